"""The attention kernels shipped as LLVM IR (``jitgraph/compiler/prebuilt.py``): made from the
kernels as they are, used where everything they were made from matches, the same bits as
Numba's compile of the same source, and Numba's compile wherever they do not apply."""
from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jitgraph.compiler import loop_ir, prebuilt, threaded
from jitgraph.compiler.state import STATE
from jitgraph.kernels import attention as kernels  # type: ignore[attr-defined]

DATA = prebuilt.data_folder()
REGENERATE = ("run `python -m jitgraph.compiler.prebuilt [PYTHON]` for each Numba shipped and "
              "commit kernels/prebuilt/")


def _shipped() -> dict:
    """The manifest of the newest Numba shipped."""
    return prebuilt.read_manifest(prebuilt.version_folders()[-1])


def _usable() -> tuple[bool, str]:
    data, why = prebuilt.manifest()
    return data is not None, why


needs_usable_ir = pytest.mark.skipif(not _usable()[0] or not threaded.available(),
                                     reason=f"the shipped IR does not apply here: {_usable()[1]}")


@pytest.fixture
def fresh_manifest():
    """``prebuilt.manifest`` read again (after the test changed what it checks) and again
    after it (so later tests see this process's true state)."""
    prebuilt.manifest.cache_clear()
    yield
    prebuilt.manifest.cache_clear()


def test_the_shipped_ir_is_made_from_the_kernels_as_they_are():
    """For each Numba shipped (the oldest and the newest ``pyproject.toml`` admits): every
    kernels/ file the IR came from is unchanged, the kernels shipped are exactly the
    attention module's ``prebuilt_jobs``, and each file holds the IR its digest names."""
    folders = prebuilt.version_folders()
    versions = [prebuilt.read_manifest(f)["numba"] for f in folders]
    assert len(folders) == 2 and [os.path.basename(f) for f in folders] == \
        [f"numba-{v}" for v in versions], versions
    wanted = {prebuilt.job_key(kernels.__name__, name, types)
              for name, types in kernels.prebuilt_jobs()}
    assert len(wanted) == 18            # 9 row kernels (masked or not, each sweep) x 2 dtypes
    for folder in folders:
        shipped = prebuilt.read_manifest(folder)
        stale = [f for f, digest in shipped["sources"].items()
                 if prebuilt.source_digest(f) != digest]
        assert not stale, f"kernels/{stale} changed since {folder} was made: {REGENERATE}"
        assert {"attention.py", "fastmath.py", "matmul.py", "rows.py"} <= set(shipped["sources"])
        assert set(shipped["kernels"]) == wanted, REGENERATE
        for key, entry in shipped["kernels"].items():
            with lzma.open(os.path.join(folder, entry["file"])) as f:
                text = f.read()
            assert hashlib.sha256(text).hexdigest() == entry["sha256"], key
            assert not re.search(rb"inttoptr \(i64 [1-9][0-9]{5,}", text), key
        files = {f for f in os.listdir(folder) if f != prebuilt.MANIFEST}
        assert files == {e["file"] for e in shipped["kernels"].values()}, "stray files"
    assert not [f for f in os.listdir(DATA) if not f.startswith("numba-")], "stray files"


CHILD = textwrap.dedent("""
    import json
    import numpy as np
    import jitgraph
    from jitgraph.kernels import attention as A
    out = {}
    for b, t in ((2, 100), (1, 300)):       # one sweep a batch; key and query sweeps
        rng = np.random.default_rng(t)
        q, k, v, do = (rng.standard_normal((b, t, 8)) for _ in range(4))
        extra, ebi = np.zeros((1, 1, 1)), np.zeros(b, np.int64)
        o, rmax, rsum = np.empty((b, t, 8)), np.empty((b, t)), np.empty((b, t))
        A.attention_forward(q, k, v, extra, ebi, 0, True, -1e9, 0.5, o, rmax, rsum)
        dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
        A.attention_backward(q, k, v, extra, ebi, 0, True, -1e9, 0.5, o, rmax, rsum, do,
                             dq, dk, dv)
        s = 0.5 * q @ k.transpose(0, 2, 1) + np.where(np.tri(t, dtype=bool), 0, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        dp = do @ v.transpose(0, 2, 1)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        want = (p @ v, 0.5 * ds @ k, 0.5 * ds.transpose(0, 2, 1) @ q, p.transpose(0, 2, 1) @ do)
        out[t] = max(float(np.abs(x - w).max()) for x, w in zip((o, dq, dk, dv), want))
    names = ("forward_rows", "batch_rows", "dots_rows", "key_rows", "query_rows")
    out["numba"] = {n: len(getattr(A, n).overloads) for n in names}
    print(json.dumps(out))
""")


@needs_usable_ir
def test_a_new_process_runs_attention_from_the_ir_without_numba_compiling_it(tmp_path):
    """With every cache empty, a first forward and backward pass in both gradient paths
    compiles no attention kernel with Numba, and gives the formula's numbers."""
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path / "jit"),
               JITGRAPH_HELPER_CACHE_DIR=str(tmp_path / "helpers"))
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["numba"] == dict.fromkeys(out["numba"], 0), out["numba"]
    assert out["100"] < 1e-12 and out["300"] < 1e-12, out


@needs_usable_ir
def test_two_processes_on_one_empty_cache_both_run_the_ir_and_leave_it_whole(tmp_path):
    """Two processes started together on the same empty caches both compile the IR and write
    its object code (atomically, the same bytes): both give the formula's numbers, every
    cached object is whole, and a third process runs from those objects."""
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path / "jit"),
               JITGRAPH_HELPER_CACHE_DIR=str(tmp_path / "helpers"))
    children = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(2)]
    runs = [child.communicate(timeout=300) for child in children]
    for child, (out, err) in zip(children, runs):
        assert child.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["100"] < 1e-12 and result["300"] < 1e-12, result
    cached = sorted((tmp_path / "helpers").rglob(f"{prebuilt.FOLDER}/*"))
    assert cached and all(p.suffix == ".o" for p in cached), cached     # no temporary left
    for path in cached:
        assert prebuilt.unseal(prebuilt.MAGIC, path.read_bytes()) is not None, path
    stamps = {p: p.stat().st_mtime_ns for p in cached}
    third = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                           text=True, timeout=300)
    assert third.returncode == 0, third.stderr[-3000:]
    assert json.loads(third.stdout.strip().splitlines()[-1])["300"] < 1e-12
    assert {p: p.stat().st_mtime_ns for p in cached} == stamps     # read, not compiled again


@needs_usable_ir
def test_the_ir_computes_numbas_bits():
    """The forward kernel from the shipped IR and Numba's compile of its source (called as a
    Python function) give the same bits, over several tiles with the causal cut."""
    b, t, d = 3, 300, 16
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((b, t, d)).astype(np.float32) for _ in range(3))
    extra, ebi = np.zeros((1, 1, 1), np.float32), np.zeros(b, np.int64)
    flat, ints, floats = kernels._params(q, k, v, extra, 0, True, -1e9, 0.25)
    n = b * ((t + kernels.BLOCK - 1) // kernels.BLOCK)
    outs = []
    for run in ("ir", "numba"):
        o, rmax, rsum = np.empty(b * t * d, np.float32), np.empty(b * t, np.float32), \
            np.empty(b * t, np.float32)
        args = (*flat, ebi, ints, floats, o, rmax, rsum)
        if run == "ir":
            assert threaded.row_pool(kernels.forward_rows, n, args)
        else:
            kernels.forward_rows(0, n, *args, n)
        outs.append((o, rmax, rsum))
    types = ("size", "size") + tuple(threaded._arg_type(a) for a in args) + ("size",)
    assert prebuilt.served(kernels.__name__, "forward_rows", types)
    for x, y in zip(*outs):
        assert np.array_equal(x, y)


FORKED_WHILE_HELD = textwrap.dedent("""
    import os, threading, time
    import numpy as np
    import jitgraph
    from jitgraph.compiler import prebuilt
    from jitgraph.compiler.state import STATE
    from jitgraph.kernels import attention as A
    name, types = next(j for j in A.prebuilt_jobs() if j[0] == "dots_rows")
    held, done = threading.Event(), threading.Event()

    def holder():                       # a thread inside prebuilt's lock at the fork
        with STATE.prebuilt_lock:
            held.set()
            done.wait()
    threading.Thread(target=holder, daemon=True).start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        ok = prebuilt.object_code(A.__name__, name, types) is not None
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    done.set()
    print(os.waitstatus_to_exitcode(status))
""")


@needs_usable_ir
def test_a_child_forked_while_a_thread_holds_the_lock_still_loads_kernels(tmp_path):
    """A child forked while another thread reads or compiles a kernel's object code (inside
    the module's lock) loads kernels itself instead of waiting for a thread it does not have."""
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path / "jit"),
               JITGRAPH_HELPER_CACHE_DIR=str(tmp_path / "helpers"))
    try:
        p = subprocess.run([sys.executable, "-c", FORKED_WHILE_HELD], env=env,
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the forked child waited for a lock held by a thread it does not have")
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "0", p.stderr[-2000:]


def _smallest_kernel(data: dict | None = None) -> tuple[str, tuple, dict]:
    """A kernel's name, argument types and entry in ``data`` (a manifest; default: the
    newest Numba's)."""
    name, types = next(j for j in kernels.prebuilt_jobs()
                       if j[0] == "dots_rows" and "float64" in j[1])
    data = data or _shipped()
    return name, types, data["kernels"][prebuilt.job_key(kernels.__name__, name, types)]


@needs_usable_ir
def test_a_damaged_cached_object_is_compiled_again(monkeypatch):
    """Object code cached with a checksum: a truncated, altered or foreign file is not run but
    compiled again from the IR, and the cache entry is mended."""
    name, types, entry = _smallest_kernel(prebuilt.manifest()[0])
    monkeypatch.setattr(STATE, "prebuilt_objects", {})
    first = prebuilt.object_code(kernels.__name__, name, types)
    assert first is not None and first[0] == entry["symbol"]
    path = prebuilt._cache_path(entry)
    with open(path, "rb") as f:
        good = f.read()
    cut = len(prebuilt.MAGIC) + 70
    for bad in (good[:-9], good[:cut] + bytes([good[cut] ^ 1]) + good[cut + 1:], b"junk"):
        with open(path, "wb") as f:
            f.write(bad)
        monkeypatch.setattr(STATE, "prebuilt_objects", {})
        again = prebuilt.object_code(kernels.__name__, name, types)
        assert again == first
        with open(path, "rb") as f:
            assert f.read() == good


def test_kernels_go_to_numba_where_the_ir_does_not_apply(monkeypatch, fresh_manifest):
    """Turned off, made with another Numba, or made from a kernels file that has changed
    since: the manifest says why and nothing is served (Numba compiles the kernels)."""
    name, types, _ = _smallest_kernel()
    monkeypatch.setattr(STATE, "prebuilt_objects", {})
    # (as if this process had the versions the newest IR was made with, whatever it has)
    shipped = {k: _shipped()[k] for k in prebuilt._versions()}
    monkeypatch.setattr(prebuilt, "_versions", lambda: dict(shipped))
    prebuilt.manifest.cache_clear()
    assert prebuilt.manifest()[0]["numba"] == shipped["numba"]

    def other_sources(m):
        m.setattr(prebuilt, "source_digest", lambda f: "0" * 64)
    cases = [(lambda m: m.setenv(prebuilt.ENV, "0"), f"{prebuilt.ENV}=0"),
             (lambda m: m.setattr(prebuilt, "_versions", lambda: {**shipped, "numba": "0.1"}),
              "this process has numba 0.1 with llvmlite"),
             (other_sources, "changed since the IR was made")]
    for change, reason in cases:
        with monkeypatch.context() as m:        # (each change undone after its case)
            change(m)
            prebuilt.manifest.cache_clear()
            data, why = prebuilt.manifest()
            assert data is None and reason in why, why
            assert not prebuilt.ships(kernels.__name__, name, types)
            assert prebuilt.object_code(kernels.__name__, name, types) is None


GLOBAL = "@numba.dynamic.globals.7fc035fa1770{} = linkonce global ptr inttoptr " \
         "(i64 140463516030832 to ptr)\n"


def test_addresses_of_the_writing_process_are_nulled_and_must_not_survive():
    """A dynamic global (an object's address in the process that lowered the IR) is written
    as null under a name by order; a module that still reads one after optimisation is
    refused, and so is IR holding any other address; addresses printed in text are zeroed."""
    text = GLOBAL.format("") + GLOBAL.format(".1") + textwrap.dedent("""
        define ptr @f() {
          %a = load ptr, ptr @numba.dynamic.globals.7fc035fa1770
          %b = load ptr, ptr @numba.dynamic.globals.7fc035fa1770.1
          ret ptr %a
        }
    """)
    out = prebuilt._portable(text)
    assert "140463516030832" not in out and "7fc035fa1770" not in out
    assert "@numba.dynamic.globals.0 = linkonce global ptr null" in out
    assert "@numba.dynamic.globals.0.1 = linkonce global ptr null" in out
    assert "load ptr, ptr @numba.dynamic.globals.0\n" in out
    with pytest.raises(ValueError, match="dynamic globals"):
        loop_ir.compile_object(out, inspect=prebuilt._no_dynamic_globals)
    dead = out.replace("ret ptr %a", "ret ptr null")    # loads nobody uses: optimised away
    assert loop_ir.compile_object(dead, inspect=prebuilt._no_dynamic_globals)
    with pytest.raises(ValueError, match="address"):
        prebuilt._portable("@x = global ptr inttoptr (i64 140463516030832 to ptr)\n")
    assert prebuilt._portable('c"<X object at 0x7f1f99340410>"') == \
        'c"<X object at 0x000000000000>"'


def _pickled_constants(text: str) -> dict[str, tuple[bytes, bytes, int]]:
    """Each pickled exception constant of ``text``: its bytes, its SHA-1 constant and the
    length its buffer gives, by name."""
    def constant(pattern: str) -> dict[str, str]:
        return dict(re.findall(pattern, text, re.M))
    data = constant(r'^@\.const\.pickledata\.(\w+) = internal constant \[\d+ x i8\] c"(.*)"$')
    sha1 = constant(r'^@\.const\.pickledata\.(\w+)\.sha1 = internal constant \[20 x i8\] '
                    r'c"(.*)"$')
    size = constant(r"^@\.const\.picklebuf\.(\w+) = .*?, i32 (\d+), ptr @")
    return {n: (prebuilt._llvm_bytes(d), prebuilt._llvm_bytes(sha1[n]), int(size[n]))
            for n, d in data.items()}


def _strings(value) -> list[str]:
    if isinstance(value, tuple):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_the_shipped_ir_names_no_path_of_the_machine_that_wrote_it():
    """The exception constants Numba pickles into the IR carry the raising source's file:
    package-relative in every shipped file, each constant consistent with its SHA-1 (its
    name too) and its length."""
    import pickle
    seen = set()
    for folder in prebuilt.version_folders():
        for entry in prebuilt.read_manifest(folder)["kernels"].values():
            with lzma.open(os.path.join(folder, entry["file"])) as f:
                text = f.read().decode()
            constants = _pickled_constants(text)
            assert constants, entry["file"]
            for name, (data, sha1, size) in constants.items():
                assert hashlib.sha1(data).digest() == sha1 and name == sha1.hex(), name
                assert size == len(data), name
                strings = _strings(pickle.loads(data))
                assert not [s for s in strings if os.path.isabs(s) or "site-packages" in s]
                seen.update(s for s in strings if s.endswith(".py"))
    assert {"jitgraph/kernels/matmul.py", "numba/np/arrayobj.py"} <= seen, seen


def test_pickled_constants_are_made_portable_and_named_by_their_bytes():
    """Paths of loaded modules become package-relative (any other absolute path its file
    name); an older Numba's id-named constants, identical ones among them, become one
    constant named by the SHA-1 of its new bytes, with its length and references mended."""
    import pickle

    from numba.core.serialize import dumps
    where = os.path.realpath(prebuilt.__file__)
    raised = (ValueError, ("too \\ \"big\"",), ("blas_gemm", where, 7),
              ("f", "/elsewhere/x.py", 1))
    data = dumps(raised)
    lines = []
    for i in ("140686044240896", "140686044240999"):    # two ids, the same bytes
        const = f"@.const.pickledata.{i}"
        lines += [f'{const} = internal constant [{len(data)} x i8] '
                  f'c"{prebuilt._llvm_string(data)}"',
                  f'{const}.sha1 = internal constant [20 x i8] '
                  f'c"{prebuilt._llvm_string(hashlib.sha1(data).digest())}"',
                  f"@.const.picklebuf.{i} = internal constant {{ ptr, i32, ptr, ptr, i32 }} "
                  f"{{ ptr {const}, i32 {len(data)}, ptr {const}.sha1, ptr null, i32 0 }}"]
    lines += ["define ptr @f(i1 %c) {",
              "  %p = select i1 %c, ptr @.const.picklebuf.140686044240896, "
              "ptr @.const.picklebuf.140686044240999", "  ret ptr %p", "}", ""]
    out = prebuilt._portable("\n".join(lines))
    constants = _pickled_constants(out)
    assert len(constants) == 1 and "1406860442" not in out
    [(name, (new, sha1, size))] = constants.items()
    assert pickle.loads(new) == (ValueError, ("too \\ \"big\"",),
                                 ("blas_gemm", "jitgraph/compiler/prebuilt.py", 7),
                                 ("f", "x.py", 1))
    assert name == hashlib.sha1(new).hexdigest() and sha1 == hashlib.sha1(new).digest()
    assert size == len(new) and out.count(f"@.const.picklebuf.{name}") == 3
    assert prebuilt._portable(out) == out
    loop_ir.compile_object(out)             # still IR that LLVM takes


def test_object_code_needing_an_unknown_symbol_is_refused():
    """LLVM would abort the process building a launcher over a symbol it cannot resolve:
    such object code is refused first (Numba's compile then runs the kernel)."""
    call = "declare void @{0}()\ndefine void @g() {{\n  call void @{0}()\n  ret void\n}}\n"
    assert not prebuilt._resolvable(loop_ir.compile_object(call.format("jg_no_such_symbol")))
    assert prebuilt._resolvable(loop_ir.compile_object(call.format("NRT_MemInfo_call_dtor")))
