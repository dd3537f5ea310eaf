"""The documentation names only what exists: every environment variable, setting, command and
command-line option that the README, the docs and the benchmarks' README mention is one the code
has. A renamed variable or a dropped flag fails here, not in a user's terminal.
"""
from __future__ import annotations

import pathlib
import re
import shlex

import pytest

import jitgraph
from jitgraph import __main__ as cli, config, profiler

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (ROOT / "docs").is_dir(),
                                reason="needs the source tree (the tests were copied out of it)")

PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").rglob("*.md")])
# where a documented name may be defined: code, not prose
CODE = [p for top in ("jitgraph", "kernels", "bench", "examples", "tests", "tests_cuda", ".ci")
        for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".sh") or p.name == "run"]


def _flowing(text: str) -> str:
    """Prose with its wrapped lines joined (a command may wrap inside a sentence); code blocks
    as they are, line by line."""
    parts = re.split(r"(^```.*?^```)", text, flags=re.S | re.M)
    return "".join(p if p.startswith("```") else re.sub(r"(?<=\S)[ \t]*\n[ \t]*(?=\S)", " ", p)
                   for p in parts)


def _text(pages=PAGES) -> dict[pathlib.Path, str]:
    return {p: _flowing(p.read_text()) for p in pages if p.is_file()}


def _mentions(pattern: str) -> dict[str, list[str]]:
    """Each match of ``pattern`` in the pages -> the pages mentioning it."""
    found: dict[str, list[str]] = {}
    for page, text in _text().items():
        for m in re.finditer(pattern, text):
            found.setdefault(m.group(1), []).append(str(page.relative_to(ROOT)))
    return found


def test_documented_environment_variables_exist():
    code = "\n".join(p.read_text(errors="replace") for p in CODE if p.is_file())
    mentioned = _mentions(r"\b(JITGRAPH_[A-Z0-9_]*[A-Z0-9])\b")
    assert len(mentioned) >= 10, mentioned          # the scan sees the docs
    unknown = {name: pages for name, pages in mentioned.items() if name not in code}
    assert not unknown, f"documented environment variables no code reads: {unknown}"


def test_documented_settings_exist():
    mentioned = _mentions(r"config\.(?:update|read)\(\s*[\"']([A-Za-z0-9_]+)[\"']")
    mentioned.update(_mentions(r"\bjitgraph\.config\.([a-z][a-z0-9_]+)\b(?!\()"))
    mentioned.update(_mentions(r"with (?:jitgraph\.)?config\.([a-z][a-z0-9_]+)\("))
    assert "default_float" in mentioned, mentioned
    unknown = {}
    for name, pages in mentioned.items():
        if name in config.__all__ or name in ("update", "read", "values"):
            continue
        try:
            config.read(name)
        except AttributeError:
            unknown[name] = pages
    assert not unknown, f"documented settings jitgraph.config does not have: {unknown}"


def _command_lines(prefix: str) -> list[tuple[str, list[str]]]:
    """(page, argv after ``prefix``) of every documented command line starting so, with its
    comment and ``[optional]`` brackets taken off (their contents kept as options)."""
    out = []
    for page, text in _text().items():
        for line in text.splitlines():
            for m in re.finditer(re.escape(prefix), line):
                rest = line[m.end():]
                if rest[:1] not in ("", " "):
                    continue
                rest = re.split(r"\s#|`|\||&&|;|\)", rest)[0]
                rest = rest.replace("[", " ").replace("]", " ")
                try:
                    argv = shlex.split(rest)
                except ValueError:
                    continue
                out.append((str(page.relative_to(ROOT)), argv))
    return out


def _refused(lines, parser) -> list:
    """The documented command lines ``parser`` refuses (``--help`` itself always parses)."""
    bad = []
    for page, argv in lines:
        if not argv or argv[0] == "--help":
            continue
        try:        # placeholders (2G, DIR) are values of the options before them
            parser.parse_args(argv)
        except SystemExit:
            bad.append((page, argv))
    return bad


def test_documented_jitgraph_commands_parse():
    lines = _command_lines("python -m jitgraph")
    assert any(argv[:2] == ["cache", "prune"] for _, argv in lines), lines
    bad = _refused(lines, cli.parser())
    assert not bad, f"documented `python -m jitgraph` commands the CLI refuses: {bad}"


def test_documented_bench_commands_parse():
    lines = _command_lines("python -m jitgraph.bench") + _command_lines("python -m jitgraph.profiler")
    assert lines
    bad = _refused(lines, profiler.command_line())
    assert not bad, f"documented `python -m jitgraph.bench` commands it refuses: {bad}"


def test_documented_script_options_exist():
    """``python bench/x.py --flag`` / ``bash bench/gpu_check.sh --flag``: the script exists and
    takes the flag."""
    pattern = re.compile(r"(?:python3?|bash) ((?:examples|bench|tests_cuda|tests|\.ci)/[\w/.-]+"
                         r"\.(?:py|sh))([^`|;&)\n]*)")
    seen, bad = 0, []
    for page, text in _text().items():
        for m in pattern.finditer(text):
            script, rest = ROOT / m.group(1), re.split(r"\s#", m.group(2))[0]
            where = str(page.relative_to(ROOT))
            seen += 1
            if not script.is_file():
                bad.append((where, m.group(1), "no such file"))
                continue
            source = script.read_text()
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                if flag not in source:
                    bad.append((where, m.group(1), flag))
    assert seen >= 10
    assert not bad, f"documented scripts or options that do not exist: {bad}"


def test_cli_help_is_plain_text(capsys):
    """``python -m jitgraph --help`` prints text, not reStructuredText markup."""
    for argv, parser in ((["--help"], cli.parser()), (["--help"], profiler.command_line())):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        out = capsys.readouterr().out
        assert "``" not in out and ":func:" not in out, out
        assert out.startswith("usage: python -m jitgraph"), out


def test_the_cache_limit_documented_is_the_codes():
    """The pages that describe eviction name the real default limit and commands."""
    from jitgraph.compiler import cache_limit
    jit_guide = _flowing((ROOT / "docs" / "guides" / "jit.md").read_text())
    cache_page = _flowing((ROOT / "docs" / "pipeline" / "cache.md").read_text())
    for text in (jit_guide, cache_page):
        assert "never evicted" not in text.lower()
        assert cache_limit.ENV_MAX_BYTES in text and "4 GiB" in text
        assert "python -m jitgraph cache prune" in text
    assert jitgraph.config.read("traceback_filtering") in ("remove_frames", "off")
