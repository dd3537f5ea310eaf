"""CUDA backend tests. They run in their own pytest process: Numba's CUDA simulator must be
switched on before numba is first imported, which this conftest does unless
``JITGRAPH_CUDA_REAL=1`` asks for the real GPU (bench/gpu_check.sh sets it)."""
import os
import sys

if os.environ.get("JITGRAPH_CUDA_REAL") != "1":
    if "numba" in sys.modules and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise RuntimeError("tests_cuda: numba was imported before NUMBA_ENABLE_CUDASIM=1 could be "
                           "set; run these tests in their own process (python -m pytest tests_cuda)")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    # The simulator runs each CUDA thread of a block as a Python thread, and a syncthreads
    # barrier waits until every one has had the GIL: at the default 5 ms switch interval a
    # reduction's shared-memory tree costs milliseconds per level. 0.5 ms makes the
    # barrier-heavy kernels (row and column reductions) about 4x faster here.
    sys.setswitchinterval(5e-4)

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (os.path.join(_ROOT, "tests"), _ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)
