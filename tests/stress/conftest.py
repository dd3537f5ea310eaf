"""The stress tier's pytest setup: the ``stress`` marker on every test here, and a record of
Numba's files in the installed package's ``kernels/__pycache__`` when the session starts (see
``test_zz_package_dir.py``)."""
from __future__ import annotations

import os
import pathlib

import pytest

from . import harness

HERE = pathlib.Path(__file__).resolve().parent
SESSION_START: dict = {}


def pytest_configure(config):
    # every test here has a cold helpers cache of its own (under its JITGRAPH_CACHE_DIR)
    os.environ.pop("JITGRAPH_HELPER_CACHE_DIR", None)
    config.addinivalue_line("markers", "stress: the stress tier (python -m pytest tests/stress)")
    SESSION_START["package_helpers"] = harness.numba_helper_files(harness.KERNELS_DIR)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.stress)
