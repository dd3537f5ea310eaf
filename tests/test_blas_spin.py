"""OpenBLAS's idle workers stop spinning soon after a product once jitgraph has bound BLAS
(kernels/blas_spin.py), and a user's own OPENBLAS_THREAD_TIMEOUT is left alone."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import jitgraph
from jitgraph.kernels import blas, blas_spin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(jitgraph.__file__)))  # as imported here


def _openblas_with_symbol() -> list[str]:
    blas.register()
    return [p for p in blas_spin._loaded_openblas() if blas_spin.spin_cycles(p) is not None]


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    environ.update(env, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


requires_symbol = pytest.mark.skipif(not _openblas_with_symbol(),
                                     reason="no OpenBLAS with a thread_timeout symbol loaded")


@requires_symbol
def test_binding_blas_shortens_the_spin_of_every_loaded_openblas():
    for path, what in blas_spin.shorten_idle_spin().items():
        if what.startswith("set"):
            assert blas_spin.spin_cycles(path) <= blas_spin.SPIN_CYCLES, (path, what)


@requires_symbol
def test_a_users_openblas_thread_timeout_is_kept():
    code = """
        import numpy
        from jitgraph.kernels import blas, blas_spin
        blas.register()
        print(min(blas_spin.spin_cycles(p) for p in blas_spin._loaded_openblas()))
    """
    assert int(_run(code, OPENBLAS_THREAD_TIMEOUT="26")) == 1 << 26
    assert int(_run(code)) == blas_spin.SPIN_CYCLES


@requires_symbol
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS runs one thread on one CPU")
def test_idle_workers_sleep_after_a_product():
    """CPU ticks (1/100 s) the OpenBLAS workers use in the 0.5 s after a threaded product:
    about 10 with OpenBLAS's own 2**28-cycle spin, none once shortened."""
    code = """
        import os, time, numpy as np
        from jitgraph.kernels import blas
        blas.register()
        def ticks():
            out = {}
            for t in os.listdir('/proc/self/task'):
                f = open(f'/proc/self/task/{t}/stat').read().rsplit(')', 1)[1].split()
                out[t] = int(f[11]) + int(f[12])
            return out
        me = str(__import__('threading').get_native_id())
        a = np.ones((600, 600), np.float32)
        a @ a
        t0 = ticks(); time.sleep(0.5); t1 = ticks()
        print(sum(t1[t] - t0.get(t, 0) for t in t1 if t != me))
    """
    assert int(_run(code, OPENBLAS_NUM_THREADS="2")) <= 3


def test_symbols_of_a_file_that_is_not_elf(tmp_path):
    path = tmp_path / "not_elf.so"
    path.write_bytes(b"MZ" + bytes(100))
    assert blas_spin._symbols(str(path), (b"thread_timeout",)) == {b"thread_timeout": []}


@requires_symbol
def test_an_eager_product_shortens_the_spin():
    """A product run eagerly (no compile, no BLAS binding) shortens the spin too: eager steps
    call a product every few milliseconds, and the default spin held a core between them."""
    code = """
        import numpy as np
        import jitgraph.numpy as jnp
        from jitgraph.kernels import blas_spin
        before = min(blas_spin.spin_cycles(p) for p in blas_spin._loaded_openblas())
        a = np.ones((64, 64), np.float32)
        assert float(jnp.sum(jnp.matmul(a, a))) == 64.0 ** 3
        print(before, min(blas_spin.spin_cycles(p) for p in blas_spin._loaded_openblas()))
    """
    before, after = map(int, _run(code).split())
    assert before > blas_spin.SPIN_CYCLES and after == blas_spin.SPIN_CYCLES
