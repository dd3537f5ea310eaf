"""The stress tier: races, forks, threads and damaged caches, each scenario in fresh processes.

Run it with ``python -m pytest tests/stress -q -rf`` (about two minutes on two cores). The
default ``python -m pytest`` does not collect it (``pytest_ignore_collect`` in
``tests/conftest.py``); naming the folder, a file or a test in it does.

* ``test_helper_cache.py``: the ``kernels/`` helpers' Numba cache under concurrent compiles
  (four processes; a process and its compile worker inside one ``jit`` call).
* ``test_fork_threads.py``: ``os.fork`` 0-50 ms after a first call; ``multiprocessing`` Pools
  (fork, spawn, forkserver) after a first call; eight threads' first calls at once in fresh
  processes.
* ``test_cache_processes.py``: four processes compiling into one cache; writers killed with
  SIGKILL mid-write; damaged files of each kind (generated ``.py``, ``.native``, Numba's
  ``.nbi``/``.nbc``/``.sha256``, and the helpers' ``.nbi``/``.nbc``/``.sha256``); Numba entries
  and native bundles swapped between ``x * 2`` and ``x + 1``.
* ``test_zz_package_dir.py`` (last): nothing written into the installed package.

The children are ``child.py`` (one scenario per process, results printed as JSON);
``programs.py`` holds the programs, written once for NumPy and ``jitgraph.numpy``, and the
comparison (integers exact, float32 within 2e-5 and float64 within 1e-11 of the largest
value); ``harness.py`` starts children (own process group, timeout, SIGKILL of the group, a
HANG reported with the stacks the child dumped), checks results and finds and damages cache
files. Every test has its own ``JITGRAPH_CACHE_DIR`` under ``tmp_path``.

``JITGRAPH_STRESS_ROUNDS=N`` multiplies every repetition count (soaks; with N >= 2 the
unwidened helper races run too, and the fork test no longer stops after two hangs);
``JITGRAPH_STRESS_SEED`` changes the seeds.
"""
