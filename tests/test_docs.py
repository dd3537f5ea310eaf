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
Also here: every public function and class (``docs/hooks/public_api.py``) has a docstring and
a page of its own (the ``jit`` page documents the function first), and mkdocs.yml's nav reaches
the reference. ``tests/test_docstring_examples.py`` runs the docstrings' examples.
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


def _public_api():
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        import public_api
    finally:
        sys.path.pop(0)
    return public_api


def test_every_public_function_and_class_has_its_own_page():
    """One page per function or class (as JAX's reference), each rendering that object, and
    the module pages link to every one of them; no two pages differ only in case."""
    api = _public_api()
    pages = {}
    for modname, name in api.all_object_pages():
        page = api.object_page(modname, name)
        assert page.lower() not in pages, (page, pages.get(page.lower()))
        pages[page.lower()] = page
        text = api.object_page_text(modname, name)
        assert f"::: {api.identifier(modname, name)}\n" in text
        assert f"title: {modname}.{name}\n" in text
    for modname, title, summary in api.MODULES:
        text = api.reference_page(modname, title, summary)
        for name in api.documented_names(modname):
            assert f"]({api.object_page(modname, name)[len('api/'):]})" in text, (modname, name)


def test_page_identifiers_name_the_objects_not_submodules():
    """Where a public name is also a submodule's (``jitgraph.jit``, ``jitgraph.remat``), the page
    renders the function or class, as griffe (mkdocstrings' loader) resolves the identifier."""
    griffe = pytest.importorskip("griffe")       # the docs extra
    api = _public_api()
    pkg = griffe.GriffeLoader(force_inspection=True).load("jitgraph")
    for modname, name in api.all_object_pages():
        if f"{modname}.{name}" in sys.modules:
            ident = api.identifier(modname, name)
            obj = pkg[ident[len("jitgraph."):]]
            assert obj.kind.value in ("function", "class"), (ident, obj.kind)


def test_the_jit_page_documents_the_function_first():
    """``jitgraph.jit`` is both the function and the module jitgraph/jit.py: its page renders the
    function (from its home, ``jitgraph.jit.jit``), titled ``jitgraph.jit``, before anything else."""
    import jitgraph
    api = _public_api()
    assert api.object_page("jitgraph", "jit") == "api/jitgraph.jit.md"
    ident = api.identifier("jitgraph", "jit")
    assert ident == "jitgraph.jit.jit"
    modname, _, name = ident.rpartition(".")
    assert getattr(sys.modules[modname], name) is jitgraph.jit
    text = api.object_page_text("jitgraph", "jit")
    directives = re.findall(r"^::: (\S+)", text, re.M)
    assert directives[0] == "jitgraph.jit.jit", directives
    assert 'heading: "jitgraph.jit"' in text


def test_the_nav_reaches_the_reference_pages():
    """mkdocs.yml lists every module page and the most used functions' pages."""
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    listed = set(re.findall(r"^\s*- (?:[^\n]*?: )?(\S+\.md)\s*(?:#.*)?$", nav, re.M))
    api = _public_api()
    missing = [api.page_name(m) for m, _, _ in api.MODULES if api.page_name(m) not in listed]
    missing += [f"api/jitgraph.{n}.md" for n in api.TOP_FUNCTIONS
                if f"api/jitgraph.{n}.md" not in listed]
    assert not missing, f"reference pages missing from mkdocs.yml's nav: {missing}"
    assert "contributing.md" in listed


def test_module_docstrings_are_written_for_users():
    """A module's docstring opens its reference page: notes for contributors (the layering,
    the private modules) belong in docs/contributing.md."""
    api = _public_api()
    for modname, _, _ in api.MODULES:
        doc = importlib.import_module(modname).__doc__ or ""
        for word in (".importlinter", "import downward", "_base._located", "imports nothing of"):
            assert word not in doc, f"{modname}'s docstring has a contributor's note: {word!r}"


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
