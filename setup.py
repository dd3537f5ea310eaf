"""The package list, found by setuptools rather than written by hand (a hand list once missed
``jitgraph.compiler.backends``, and only a non-editable install showed it).

Everything else is in pyproject.toml. This file exists because pyproject.toml cannot say both
"discover the packages" and "install the top-level ``kernels/`` as ``jitgraph.kernels``":
``[tool.setuptools.packages.find]`` names a package by its path under ``where``, so ``kernels/``
would be found as a top-level ``kernels``. Here ``jitgraph/`` and ``kernels/`` are each searched
with ``find_packages`` and the second's names are prefixed with ``jitgraph.kernels``; the
``package_dir`` entry maps ``jitgraph.kernels`` (and so its subpackages) to ``kernels/``.
``tests/test_packaging.py`` checks that every folder with an ``__init__.py`` under both is listed.
"""
from setuptools import find_packages, setup

# also the names tests/test_packaging.py checks against the folders of the source tree
PACKAGE_DIR = {"jitgraph": "jitgraph", "jitgraph.kernels": "kernels"}


def packages() -> list[str]:
    found = find_packages(include=["jitgraph", "jitgraph.*"])
    if "jitgraph.kernels" in found:
        raise SystemExit("jitgraph/kernels/ exists: kernels/ is the one installed as jitgraph.kernels")
    found += ["jitgraph.kernels"] + [f"jitgraph.kernels.{p}" for p in find_packages("kernels")]
    return sorted(found)


if __name__ == "__main__":
    setup(packages=packages(), package_dir=PACKAGE_DIR)
