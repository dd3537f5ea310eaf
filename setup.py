"""The package list, found by setuptools rather than written by hand, and the long description (a hand list once missed
``jitgraph.compiler.backends``, and only a non-editable install showed it).

Everything else is in pyproject.toml. This file exists because pyproject.toml cannot say both
"discover the packages" and "install the top-level ``kernels/`` as ``jitgraph.kernels``":
``[tool.setuptools.packages.find]`` names a package by its path under ``where``, so ``kernels/``
would be found as a top-level ``kernels``. Here ``jitgraph/`` and ``kernels/`` are each searched
with ``find_packages`` and the second's names are prefixed with ``jitgraph.kernels``; the
``package_dir`` entry maps ``jitgraph.kernels`` (and so its subpackages) to ``kernels/``.
``tests/test_packaging.py`` checks that every folder with an ``__init__.py`` under both is listed.
"""
import os
import re

from setuptools import find_packages, setup

# also the names tests/test_packaging.py checks against the folders of the source tree
PACKAGE_DIR = {"jitgraph": "jitgraph", "jitgraph.kernels": "kernels"}
# where the README's relative links point on a package index (pyproject.toml's [project.urls])
REPOSITORY = "https://github.com/jitgraph/jitgraph"
# a Markdown link or image target that is a path in the repository (not a URL, nor an anchor)
_RELATIVE_LINK = re.compile(r"(!?\[[^\]]*\]\()(?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)")


def long_description(readme: str = "README.md") -> str:
    """The README, its relative links made absolute: a package index shows the text alone,
    so ``docs/guides/jit.md`` must point into the repository (images to their raw files)."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, readme), encoding="utf-8") as f:
        text = f.read()

    def absolute(m: re.Match) -> str:
        kind = "raw" if m[1].startswith("!") else "blob"
        return f"{m[1]}{REPOSITORY}/{kind}/main/{m[2]})"
    return _RELATIVE_LINK.sub(absolute, text)


def packages() -> list[str]:
    found = find_packages(include=["jitgraph", "jitgraph.*"])
    if "jitgraph.kernels" in found:
        raise SystemExit("jitgraph/kernels/ exists: kernels/ is the one installed as jitgraph.kernels")
    found += ["jitgraph.kernels"] + [f"jitgraph.kernels.{p}" for p in find_packages("kernels")]
    return sorted(found)


if __name__ == "__main__":
    setup(packages=packages(), package_dir=PACKAGE_DIR, long_description=long_description(),
          long_description_content_type="text/markdown")
