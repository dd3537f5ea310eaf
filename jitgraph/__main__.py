"""``python -m jitgraph``: the environment report bug reports ask for, and the disk cache.

    python -m jitgraph info [--json]         versions, CPU, BLAS, CUDA, cache, settings
    python -m jitgraph cache info            directory, size, entries, limit
    python -m jitgraph cache prune [--max-bytes 2G]   evict least recently used entries
    python -m jitgraph cache clear           evict every entry
"""
from __future__ import annotations

import argparse
import json
import sys

from .compiler import cache_limit
from .compiler.disk_cache import DiskCache
from .environment import environment_info, format_environment_info, format_size


def _size(text: str) -> int:
    try:
        return cache_limit.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).replace(cache_limit.ENV_MAX_BYTES, "--max-bytes"))


def _cache_command(args: argparse.Namespace) -> int:
    cache = DiskCache(args.dir)
    if args.action == "info":
        usage = cache.usage()
        entries = cache.entries()
        print(f"directory: {usage['directory']}")
        print(f"size: {usage['bytes']} bytes ({format_size(usage['bytes'])}) in "
              f"{usage['entries']} entries")
        limit = usage["limit"]
        print(f"limit: {limit} bytes ({format_size(limit)})" if limit is not None else "limit: none")
        if entries:
            import time
            fmt = "%Y-%m-%d %H:%M:%S"
            print(f"least recently used: {time.strftime(fmt, time.localtime(entries[0].last_used))}, "
                  f"most recently used: {time.strftime(fmt, time.localtime(entries[-1].last_used))}")
        return 0
    if args.action == "clear":
        result = cache.clear(timeout=args.timeout)
    else:
        result = cache.prune(max_bytes=args.max_bytes, timeout=args.timeout)
    if result["unsafe"]:
        print(f"not touching {cache.directory}: {result['unsafe']}", file=sys.stderr)
        return 1
    if result["busy"]:
        print(f"the cache {cache.directory} is busy (another process is pruning it or loading "
              f"from it): try again, or give --timeout more seconds", file=sys.stderr)
        return 1
    print(f"evicted {result['evicted']} entries ({result['freed']} bytes); "
          f"{result['entries']} entries, {result['bytes']} bytes left in {cache.directory}")
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line's parser (the docs' commands are checked against it)."""
    ap = argparse.ArgumentParser(
        prog="python -m jitgraph", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The environment report that bug reports ask for, and the disk cache of "
                    "compiled programs.",
        epilog="commands:\n" + "\n".join(
            line for line in __doc__.splitlines() if line.startswith("    python -m")))
    sub = ap.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="print the environment report (versions, CPU, BLAS, CUDA, cache)")
    info.add_argument("--json", action="store_true", help="print it as JSON")
    cache = sub.add_parser("cache", help="the disk cache of compiled code")
    cache.add_argument("action", choices=["info", "clear", "prune"])
    cache.add_argument("--dir", default=None, help="cache directory (default: JITGRAPH_CACHE_DIR "
                       "or ~/.cache/jitgraph)")
    cache.add_argument("--max-bytes", type=_size, default=None,
                       help="prune to this size (bytes, or 512M, 2G; default: JITGRAPH_CACHE_MAX_BYTES or 4G)")
    cache.add_argument("--timeout", type=float, default=30.0,
                       help="seconds to wait for another process's prune or load (default 30)")
    return ap


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args = parser().parse_args(argv)
    if args.command == "info":
        print(json.dumps(environment_info(), indent=2) if args.json else format_environment_info())
        return 0
    return _cache_command(args)


if __name__ == "__main__":
    sys.exit(main())
