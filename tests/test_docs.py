"""The documentation cannot drift: every ```python block in docs/ and README.md runs, and the
output a page shows matches.

Blocks of one page share a namespace and run in order, in a temporary working directory (and
the test session's temporary jitgraph cache, ``conftest.py``). Markers, HTML comments on the
line before a fence (invisible on the site and on GitHub):

- ``<!-- no-run: why -->`` before a ```python block skips it (GPU and MPI examples only);
- ``<!-- output -->`` before a ```text block right after a ```python block: that block's
  printed output must equal the text (trailing spaces ignored);
- ``<!-- output: not checked (why) -->``: shown, not compared (generated source, timings).

``python tests/test_docs.py --update`` rewrites the checked output blocks from a fresh run.
Also here: every public function and class (``docs/hooks/public_api.py``) has a docstring, so
the generated API reference renders one for each.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?:<!-- (?P<what>[^>]*?) -->\n)?```(?P<lang>[\w-]*)\n(?P<body>.*?)^```$",
                   re.S | re.M)
PAGES = sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts) + [ROOT / "README.md"]


def blocks(text: str) -> list[dict]:
    """The fenced blocks of a page, with their marker comment and offsets."""
    return [dict(lang=m["lang"], body=m["body"], what=(m["what"] or "").strip(),
                 start=m.start("body"), end=m.end("body")) for m in FENCE.finditer(text)]


def run_page(path: Path) -> list[tuple[dict, str, dict | None]]:
    """Run a page's python blocks; (block, its printed output, the output block after it)."""
    bs = blocks(path.read_text())
    ns: dict = {"__name__": f"docs_{path.stem}"}
    ran = []
    for i, b in enumerate(bs):
        if b["lang"] != "python" or b["what"].startswith("no-run"):
            continue
        nxt = bs[i + 1] if i + 1 < len(bs) else None
        shown = nxt if nxt is not None and nxt["lang"] == "text" and nxt["what"].startswith("output") else None
        out = io.StringIO()
        code = compile(b["body"], f"{path.relative_to(ROOT)}:block{i}", "exec")
        with contextlib.redirect_stdout(out):
            exec(code, ns)
        ran.append((b, out.getvalue(), shown))
    return ran


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").split("\n"))


@pytest.fixture(scope="module", autouse=True)
def _sandbox(tmp_path_factory):
    """Each page's files (checkpoints, ...) land in a temporary directory."""
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("docs"))
    yield
    os.chdir(old)


@pytest.fixture(autouse=True)
def _own_primitives():
    """Primitives a page registers (the adding-a-primitive guide's) are removed after it, so
    the tests that check every registered primitive is covered see only jitgraph's own."""
    import jitgraph
    before = set(jitgraph.PRIMITIVES)
    yield
    for name in set(jitgraph.PRIMITIVES) - before:
        del jitgraph.PRIMITIVES[name]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_runs_and_shows_its_output(page):
    for block, out, shown in run_page(page):
        if shown is not None and shown["what"] == "output":
            assert _norm(out) == _norm(shown["body"]), (
                f"{page.relative_to(ROOT)}: the printed output of the block\n{block['body']}\n"
                f"no longer matches the page; printed:\n{out}\n"
                f"(python tests/test_docs.py --update rewrites the page)")


def test_every_public_name_has_a_docstring():
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        import public_api
    finally:
        sys.path.pop(0)
    missing = []
    for modname, _, _ in public_api.MODULES:
        mod = importlib.import_module(modname)
        for name in public_api.public_names(modname):
            obj = getattr(mod, name)
            if public_api.is_documented_kind(obj) and not (obj.__doc__ or "").strip():
                missing.append(f"{modname}.{name}")
    assert not missing, f"public names without a docstring (the API reference needs one): {missing}"


def test_markers_are_known():
    """A misspelt marker would silently run a GPU example or skip a comparison."""
    for page in PAGES:
        for b in blocks(page.read_text()):
            assert b["what"] == "" or re.match(r"(no-run|output)\b", b["what"]), (page, b["what"])
            if b["what"].startswith("output"):
                assert b["lang"] == "text", (page, b["what"])


def _update() -> None:
    for page in PAGES:
        text = page.read_text()
        for _, out, shown in reversed(run_page(page)):
            if shown is not None and shown["what"] == "output":
                text = text[:shown["start"]] + _norm(out) + "\n" + text[shown["end"]:]
        page.write_text(text)


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        import tempfile
        os.chdir(tempfile.mkdtemp())
        _update()
    else:
        sys.exit(pytest.main([__file__, "-q"]))
