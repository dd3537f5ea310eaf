"""Hand-written kernels shipped as LLVM IR, so that their first compile is LLVM's alone.

Why: a fused attention's row kernels (``kernels/attention.py``) took Numba 2.1-2.6 s each to
compile, most of it Numba's typing, inlining and lowering: the longest jobs of a transformer
step's first call. The IR Numba lowers them to, before any optimisation (``NUMBA_OPT=0``,
every callee linked in), names no address of the process that made it and nothing of its CPU.
So it is made once per Numba version shipped, by ``python -m jitgraph.compiler.prebuilt
[PYTHON]`` (a developer's command, run when those kernels change, for the oldest and the
newest Numba ``pyproject.toml`` admits), and shipped in ``kernels/prebuilt/numba-<version>/``:
one xz-compressed module per kernel and argument types, and ``manifest.json`` with the Numba,
llvmlite and target triple it was made with and the SHA-256 of every ``kernels/`` source file
it came from. At run time LLVM optimises a module for this CPU (``loop_ir.compile_object``, as
for the generated loop kernels: 0.3-0.5 s instead of 2-2.6 s) and its object code is cached
under the helpers' cache directory, bound to its bytes by a checksum; the row kernels'
launchers (``threaded.row_pool``) run it through the kernel's native entry point, as they run
Numba's. The machine code computes what Numba's does, bit for bit (tests/test_prebuilt.py).

A kernel is served from here only where everything it was made from matches this process: a
folder made with its Numba and llvmlite versions, the same triple, the same source of every
kernel file, Numba's bounds checking and debug info off, and ``JITGRAPH_PREBUILT`` not ``0``.
Otherwise, and wherever LLVM turns the module down or a symbol it needs cannot be found, Numba
compiles the kernel as before. Numba lowers a global function object it never calls (a
``mask`` step passed to an inlined sweep) to a load from a "dynamic global" holding the
object's address: those are set to null when the IR is written, and a module where one
survives optimisation is refused (when written, and again when compiled).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
import tempfile
import threading
import warnings
from typing import Any

from . import loop_ir, native
from .disk_cache import atomic_write, read_private_file, seal, unseal
from .state import STATE

ENV = "JITGRAPH_PREBUILT"
MAGIC = b"JITGRAPH-PREBUILT-OBJECT-1\n"
FOLDER = "prebuilt"                 # beside the kernels' modules (kernels/prebuilt/)
MANIFEST = "manifest.json"
#: the kernels modules whose ``prebuilt_jobs()`` list the kernels shipped as IR
MODULES = ("attention",)
_DYNAMIC = re.compile(r"@numba\.dynamic\.globals\.([0-9a-f]+)((?:\.\d+)?)"
                      r"( = linkonce global ptr) inttoptr \(i64 \d+ to ptr\)")
_PICKLED = re.compile(r"(@\.const\.pickle(?:data|buf)\.)(\w+)")
_PICKLED_DEF = re.compile(r"^@\.const\.pickle(data|buf)\.(\w+)(\.sha1)? = .*$", re.M)


def _new_lock_in_child() -> None:
    """A child forked while another thread held ``STATE.prebuilt_lock`` (reading or compiling
    a kernel's object code) would wait for it forever: the child gets a lock of its own."""
    STATE.prebuilt_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def job_key(module: str, name: str, arg_types: tuple) -> str:
    """A kernel's name in the manifest: ``attention.forward_rows(size,size,float32,...)``."""
    return f"{module.rsplit('.', 1)[-1]}.{name}({','.join(arg_types)})"


def data_folder() -> str:
    """``kernels/prebuilt`` (``jitgraph/kernels/prebuilt`` where installed)."""
    from ..kernels import blas  # type: ignore[attr-defined]  (any module of the folder)
    return os.path.join(os.path.dirname(os.path.abspath(blas.__file__)), FOLDER)


def source_digest(filename: str) -> str | None:
    """SHA-256 of a ``kernels/`` source file (None: missing)."""
    try:
        with open(os.path.join(os.path.dirname(data_folder()), filename), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _versions() -> dict[str, str]:
    import llvmlite
    import llvmlite.binding as llvm
    import numba
    return {"numba": numba.__version__, "llvmlite": llvmlite.__version__,
            "triple": llvm.get_process_triple()}


def version_folders() -> list[str]:
    """The shipped IR's folders, one per Numba version it was made with
    (``kernels/prebuilt/numba-<version>/``)."""
    root = data_folder()
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [os.path.join(root, n) for n in names
            if n.startswith("numba-") and os.path.isfile(os.path.join(root, n, MANIFEST))]


def read_manifest(folder: str) -> dict:
    """One version folder's manifest (raises ``OSError`` or ``ValueError`` where unreadable)."""
    with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=1)
def manifest() -> tuple[dict | None, str]:
    """The manifest of the IR this process may use (with its ``"folder"``), and why there is
    none otherwise."""
    if os.environ.get(ENV, "1") == "0":
        return None, f"{ENV}=0"
    have = _versions()
    made: list[str] = []
    for folder in version_folders():
        try:
            data = read_manifest(folder)
        except (OSError, ValueError):
            continue
        made.append(f"numba {data.get('numba')} with llvmlite {data.get('llvmlite')}")
        if all(data.get(k) == v for k, v in have.items()):
            break
    else:
        return None, (f"made with {' and '.join(made) or 'nothing'} ({have['triple']}); this "
                      f"process has numba {have['numba']} with llvmlite {have['llvmlite']} "
                      f"({have['triple']})")
    from numba.core import config
    if config.BOUNDSCHECK or config.DEBUGINFO_DEFAULT or config.DISABLE_JIT:
        return None, "Numba's bounds checking, debug info or DISABLE_JIT is on"
    for filename, digest in data.get("sources", {}).items():
        if source_digest(filename) != digest:
            return None, f"kernels/{filename} changed since the IR was made"
    return {**data, "folder": folder}, ""


def ships(module: str, name: str, arg_types: tuple) -> bool:
    """Whether kernel ``name`` of ``module`` for ``arg_types`` is shipped as IR usable here
    (compiling it needs LLVM alone, no Numba)."""
    data, _ = manifest()
    return data is not None and job_key(module, name, arg_types) in data["kernels"]


def object_code(module: str, name: str, arg_types: tuple) -> tuple[str, bytes] | None:
    """The entry point's symbol and the object code of kernel ``name`` of ``module`` (a
    ``jitgraph.kernels`` module) for ``arg_types`` (as compile jobs name them), from this
    process, the helpers' cache or its shipped IR; None where it is not shipped or cannot be
    used here (then Numba compiles it)."""
    key = job_key(module, name, arg_types)
    objects = STATE.prebuilt_objects
    if key in objects:
        return objects[key]
    data, _ = manifest()
    entry = data["kernels"].get(key) if data else None
    if entry is None:
        return None
    with STATE.prebuilt_lock:
        if key not in objects:
            objects[key] = _load(entry, data["folder"])
    return objects[key]


def served(module: str, name: str, arg_types: tuple) -> bool:
    """Whether this process has run (or readied) that kernel from its shipped IR."""
    return STATE.prebuilt_objects.get(job_key(module, name, arg_types)) is not None


def compile_job(module: str, name: str, arg_types: tuple) -> bool:
    """A compile worker's job: the kernel's object code into the helpers' cache (True), or
    False where it is not shipped (Numba's job then)."""
    return object_code(module, name, arg_types) is not None


def _cache_path(entry: dict) -> str:
    from .helper_cache import helpers_directory
    cpu, features = native.target_cpu()
    target = hashlib.sha256(f"{cpu}|{features}|{_versions()}".encode()).hexdigest()[:16]
    folder = os.path.join(helpers_directory(), FOLDER)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return os.path.join(folder, f"{entry['sha256'][:24]}.{target}.o")


def _load(entry: dict, folder: str) -> tuple[str, bytes] | None:
    """``object_code`` for a manifest entry (of version folder ``folder``): cached, else
    compiled here and cached."""
    try:
        path = _cache_path(entry)
    except OSError:
        path = None
    obj = unseal(MAGIC, read_private_file(path)[1]) if path else None
    if obj is None:
        try:
            with lzma.open(os.path.join(folder, entry["file"])) as f:
                text = f.read()
            if hashlib.sha256(text).hexdigest() != entry["sha256"]:
                return None
            obj = loop_ir.compile_object(text.decode(), inspect=_no_dynamic_globals)
        except Exception:               # (a damaged file, IR this LLVM rejects)
            return None
        if path:
            try:
                atomic_write(path, seal(MAGIC, obj))
            except OSError:
                pass                    # a read-only cache: compiled again next process
    return (entry["symbol"], obj) if _resolvable(obj) else None


def _resolvable(obj: bytes) -> bool:
    """Whether every symbol the object needs is known to LLVM here (an unknown one would
    abort the process when the launcher is built)."""
    import llvmlite.binding as llvm
    from ..kernels import blas  # type: ignore[attr-defined]
    native.register_runtime()
    blas.register()
    names = native.undefined_symbols(obj)
    return names is not None and all(llvm.address_of_symbol(n) for n in names)


def _no_dynamic_globals(mod: Any) -> None:
    """Refuse a module whose optimised code still reads an address of the process that made
    its IR (set to null when it was written)."""
    left = [g.name for g in mod.global_variables if g.name.startswith("numba.dynamic.globals")]
    if left:
        raise ValueError(f"the optimised module still reads dynamic globals {left}")


# ------------------------------------------------------------------------ writing the IR

def _portable(text: str) -> str:
    """Numba's IR with its dynamic globals named by order and set to null."""
    names: dict[str, int] = {}

    def null(m: re.Match) -> str:
        n = names.setdefault(m[1], len(names))
        return f"@numba.dynamic.globals.{n}{m[2]}{m[3]} null"
    text = _DYNAMIC.sub(null, text)
    for addr, n in names.items():       # the uses
        text = re.sub(rf"@numba\.dynamic\.globals\.{addr}\b", f"@numba.dynamic.globals.{n}", text)
    # (the address older Numbas print with an object's repr, zeroed)
    text = re.sub(r"(object at 0x)([0-9a-f]+)", lambda m: m[1] + "0" * len(m[2]), text)
    text = _pickled_constants(text)
    if re.search(r"inttoptr \(i64 [1-9]\d{5,}", text):
        raise ValueError("the IR holds an address of this process")
    return text


def _llvm_bytes(body: str) -> bytes:
    """The bytes of an LLVM ``c"..."`` constant's body (``\\XX`` and ``\\\\`` escapes, the rest
    as is)."""
    return re.sub(rb"\\(\\|[0-9A-Fa-f]{2})",
                  lambda m: b"\\" if m[1] == b"\\" else bytes([int(m[1], 16)]),
                  body.encode("latin-1"))


def _llvm_string(data: bytes) -> str:
    """``data`` written as LLVM writes a ``c"..."`` constant's body."""
    return "".join("\\\\" if b == 92 else chr(b) if 32 <= b < 127 and b != 34 else f"\\{b:02X}"
                   for b in data)


def _package_path(value: Any, files: dict[str, str]) -> Any:
    """``value`` (an exception's pickled arguments and source location) with each path of a
    loaded module's file (``files``: real path to module name) written relative to its
    package root (``numba/np/arrayobj.py``, ``jitgraph/kernels/matmul.py``), any other
    absolute path as its file name: what a user's error shows, whatever machine wrote it."""
    if isinstance(value, tuple):
        return tuple(_package_path(v, files) for v in value)
    if isinstance(value, str) and os.path.isabs(value):
        name = files.get(os.path.realpath(value))
        if name is None:
            return os.path.basename(value)
        return name.replace(".", "/") + ("/__init__.py" if value.endswith("__init__.py")
                                         else ".py")
    return value


def _pickled_constants(text: str) -> str:
    """Numba's pickled exception constants (their class, message and the source location
    that raises) with package-relative paths, named by the SHA-1 of their bytes as newer
    Numbas name them (older ones use an object's id), one constant for identical ones: the
    IR then holds no path of the machine that wrote it, and does not change with the process
    or with the order in which Numba emitted its constants."""
    import pickle

    from numba.core.serialize import dumps
    files = {os.path.realpath(m.__file__): name for name, m in list(sys.modules.items())
             if isinstance(getattr(m, "__file__", None), str)}
    renamed: dict[str, str] = {}
    pickled: dict[str, bytes] = {}
    for old, body in re.findall(r'^@\.const\.pickledata\.(\w+) = internal constant '
                                r'\[\d+ x i8\] c"(.*)"$', text, re.M):
        data = _llvm_bytes(body)
        value = pickle.loads(data)
        portable = _package_path(value, files)
        if portable != value:
            data = dumps(portable)
        renamed[old] = name = hashlib.sha1(data).hexdigest()
        pickled[name] = data
    text = _PICKLED.sub(lambda m: m[1] + renamed.get(m[2], m[2]), text)
    written: set[tuple] = set()

    def definition(m: re.Match) -> str:
        data = pickled.get(m[2])
        if data is None:
            return m[0]
        if m.groups() in written:           # the same bytes, defined already
            return "\x00"
        written.add(m.groups())
        if m[1] == "buf":
            return re.sub(r"(ptr @\.const\.pickledata\.\w+, i32 )\d+",
                          lambda n: f"{n[1]}{len(data)}", m[0])
        body = hashlib.sha1(data).digest() if m[3] else data
        return re.sub(r'\[\d+ x i8\] c".*"$', lambda n: f'[{len(body)} x i8] '
                      f'c"{_llvm_string(body)}"', m[0])
    return _PICKLED_DEF.sub(definition, text).replace("\x00\n", "")


def _simplified(text: str) -> str:
    """The IR after LLVM's ``-O1`` simplifications for a generic x86-64, without
    vectorizing or unrolling (those are done for the CPU it runs on): a sixth of the text,
    and a quarter less for LLVM to do at run time."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(text)
    machine = llvm.Target.from_triple(mod.triple).create_target_machine(cpu="x86-64", opt=1)
    options = llvm.create_pipeline_tuning_options(speed_level=1)
    for option in ("loop_vectorization", "slp_vectorization", "loop_unrolling"):
        setattr(options, option, False)
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(mod, builder)
    return str(mod)


def _sources(modules: set[str]) -> dict[str, str]:
    """The ``kernels/`` files of ``modules`` and of the kernels modules they import, with
    their SHA-256: what the IR was made from."""
    folder = os.path.dirname(data_folder())
    todo, seen = [m.rsplit(".", 1)[-1] for m in modules], set()
    while todo:
        stem = todo.pop()
        if stem in seen or not os.path.exists(os.path.join(folder, stem + ".py")):
            continue
        seen.add(stem)
        with open(os.path.join(folder, stem + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                todo += [node.module] if node.module else [a.name for a in node.names]
    return {f"{s}.py": source_digest(f"{s}.py") for s in sorted(seen)}


def _write_here(root: str) -> None:
    """Lower every shipped kernel with Numba (this process runs with ``NUMBA_OPT=0`` and
    empty caches) and write its IR and the manifest into this Numba's folder under ``root``
    (its old files removed)."""
    import importlib

    from numba.core import event

    from .compile_pool import numba_signature
    from .numba_patches import entry_point
    compiled: set[str] = set()

    class Modules(event.Listener):
        def on_start(self, ev):
            compiled.add(ev.data["dispatcher"].py_func.__module__)

        def on_end(self, ev):
            pass
    import numba
    folder = os.path.join(root, f"numba-{numba.__version__}")
    os.makedirs(folder, exist_ok=True)
    for fn in os.listdir(folder):
        if fn == MANIFEST or fn.endswith(".ll.xz"):
            os.unlink(os.path.join(folder, fn))
    kernels: dict = {}
    # (Numba warns that such IR cannot go to its own cache: it never does here)
    warnings.filterwarnings("ignore", "Cannot cache compiled function")
    with event.install_listener("numba:compile", Modules()):
        for stem in MODULES:
            module = importlib.import_module(f"jitgraph.kernels.{stem}")
            for name, arg_types in module.prebuilt_jobs():
                disp = getattr(module, name)
                signature = numba_signature(arg_types)
                disp.compile(signature)
                cres = disp.overloads[signature]
                text = _simplified(_portable(cres.library.get_llvm_str())).encode()
                digest = hashlib.sha256(text).hexdigest()
                loop_ir.compile_object(text.decode(), inspect=_no_dynamic_globals)
                filename = f"{stem}.{name}.{digest[:16]}.ll.xz"
                with lzma.open(os.path.join(folder, filename), "wb", preset=9) as f:
                    f.write(text)
                kernels[job_key(module.__name__, name, tuple(arg_types))] = {
                    "file": filename, "symbol": entry_point(cres)[1], "sha256": digest}
    data = {**_versions(), "sources": _sources({m for m in compiled
                                                if m.startswith("jitgraph.kernels.")}),
            "kernels": kernels}
    with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


def write(root: str | None = None, python: str | None = None) -> str:
    """Make the IR of the Numba that ``python`` (default: this interpreter) imports again,
    in ``root/numba-<version>/`` (default root: ``kernels/prebuilt``), in a new process that
    lowers without optimising and with empty caches; returns the root. Run it once per Numba
    version shipped (the oldest and the newest ``pyproject.toml`` admits)."""
    root = root or data_folder()
    with tempfile.TemporaryDirectory(prefix="jitgraph-prebuilt-") as tmp:
        env = dict(os.environ, NUMBA_OPT="0", JITGRAPH_CACHE_DIR=os.path.join(tmp, "jit"),
                   JITGRAPH_HELPER_CACHE_DIR=os.path.join(tmp, "helpers"),
                   NUMBA_CACHE_DIR=os.path.join(tmp, "numba"))
        code = f"from jitgraph.compiler.prebuilt import _write_here; _write_here({root!r})"
        subprocess.run([python or sys.executable, "-c", code], env=env, check=True)
    return root


if __name__ == "__main__":
    # python -m jitgraph.compiler.prebuilt [PYTHON]: PYTHON, an interpreter whose Numba is
    # another shipped version (its packages: numba, numpy, scipy, threadpoolctl), imports this
    # source tree by PYTHONPATH
    other = sys.argv[1] if len(sys.argv) > 1 else None
    if other:
        tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [tree] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    print(f"wrote {write(python=other)}")
