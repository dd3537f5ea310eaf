"""The API reference's examples run: every ``>>>`` example in the docstring of a public
function or class (``docs/hooks/public_api.py``'s names, and the objects their pages document
beside them, such as ``jit``'s ``JitFunction``) is run as a doctest, and its output must be the
one shown.

The main functions and classes of the top-level ``jitgraph`` namespace (``MAIN``) must also
explain every parameter (a Sphinx ``:param name:`` field per parameter of the signature) and
show an example. Examples are ```` ```pycon ```` blocks with a blank line before the closing
fence (doctest reads up to a blank line); they run in a temporary directory, with the test
session's temporary jitgraph cache (``conftest.py``).
"""
from __future__ import annotations

import doctest
import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# the names of ``jitgraph`` whose pages must explain every parameter and show an example
MAIN = ["jit", "grad", "value_and_grad", "vjp", "jvp", "linearize", "jacfwd", "jacrev",
        "jacobian", "hessian", "hessian_vector_product", "make_graph", "vmap", "custom_vjp",
        "defvjp", "defjvp", "defprimitive", "primitive", "checkpoint", "remat",
        "checkpoint_name", "tree_map", "tree_flatten", "tree_unflatten", "tree_leaves",
        "register_pytree_node", "device_put", "device_get", "save", "load", "train_step",
        "check_grads", "benchmark", "cache_info", "clear_cache", "stop_gradient", "Primitive"]


def _public_api():
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import public_api
    finally:
        sys.path.pop(0)
    return public_api


def _objects() -> list[tuple[str, object]]:
    """(name, object) of every documented function and class, and each class's own public
    methods and properties; one entry per docstring (aliases share theirs)."""
    api = _public_api()
    found: list[tuple[str, object]] = []
    for modname, name in api.all_object_pages():
        found.append((f"{modname}.{name}", getattr(importlib.import_module(modname), name)))
    for path in [p for ps in api.RETURNED.values() for p in ps]:
        modname, _, name = path.rpartition(".")
        found.append((path, getattr(importlib.import_module(modname), name)))
    out, seen = [], set()
    for name, obj in found:
        members = [(name, obj)]
        if inspect.isclass(obj):
            members += [(f"{name}.{k}", v) for k, v in vars(obj).items()
                        if not k.startswith("_") and (inspect.isfunction(v) or isinstance(
                            v, (property, staticmethod, classmethod)))]
        for n, o in members:
            doc = getattr(o, "__doc__", None)
            if isinstance(doc, str) and ">>>" in doc and doc not in seen:
                seen.add(doc)
                out.append((n, o))
    return out


OBJECTS = _objects()


@pytest.fixture(autouse=True)
def _sandbox(tmp_path, monkeypatch):
    """Examples write files (checkpoints) into a temporary directory, and the primitives they
    define are removed after them (other tests check every registered primitive is covered)."""
    monkeypatch.chdir(tmp_path)
    import jitgraph
    before = set(jitgraph.PRIMITIVES)
    yield
    for name in set(jitgraph.PRIMITIVES) - before:
        del jitgraph.PRIMITIVES[name]


@pytest.mark.parametrize("name,obj", OBJECTS, ids=[n for n, _ in OBJECTS])
def test_docstring_example_runs(name, obj):
    test = doctest.DocTestParser().get_doctest(inspect.getdoc(obj), {}, name, None, 0)
    assert test.examples, name
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, f"the example in {name}'s docstring fails:\n" + "".join(out)


def _params(fn) -> list[str]:
    target = fn.__init__ if inspect.isclass(fn) else fn
    names = list(inspect.signature(target).parameters)
    return [n for n in names if n != "self"]


@pytest.mark.parametrize("name", MAIN)
def test_main_names_explain_every_parameter_and_show_an_example(name):
    import jitgraph
    obj = getattr(jitgraph, name)
    doc = inspect.getdoc(obj) or ""
    missing = [p for p in _params(obj) if not re.search(rf"^:param {p}:", doc, re.M)]
    assert not missing, f"jitgraph.{name}: parameters without a ':param name:' line: {missing}"
    assert "```pycon\n>>> " in doc, f"jitgraph.{name}: no ```pycon example"
    assert any(n == f"jitgraph.{name}" or getattr(o, "__doc__", None) == obj.__doc__
               for n, o in OBJECTS), f"jitgraph.{name}'s example is not collected"


def test_examples_end_with_a_blank_line():
    """A closing fence right after an output line would be read as part of the output."""
    for name, obj in OBJECTS:
        doc = inspect.getdoc(obj) or ""
        for block in re.findall(r"```pycon\n(.*?)```", doc, re.S):
            assert block.endswith("\n\n"), f"{name}: no blank line before the closing fence"
