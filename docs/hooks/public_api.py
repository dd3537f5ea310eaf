"""The public API the reference documents: a page per module, a page per function or class.

A module's public names are its ``__all__``, or, without one, the names it defines or
re-exports from its own submodules that do not start with ``_`` (submodules and ``__future__`` features
excluded). ``tests/test_docs.py`` checks every such function and class has a docstring and a
page.

Each module page (``api/<module>.md``) is the module's docstring, written for users, then tables
of its functions and classes (one line each, linking to their pages), its constants and dtypes
and its namespaces of functions (``scipy.stats.norm``). Each function or class has a page of its
own, ``api/<module>.<name>.md`` (as JAX's reference: ``jax.jit``, ``jax.numpy.sum``), titled with
the name users call it by. Where that name is also a submodule's (``jitgraph.jit`` is the
function and the module ``jitgraph/jit.py``), the page renders the object from its home
(``jitgraph.jit.jit``), so the function comes first, not the module.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types

# (module, page title, one line on what it is for)
MODULES = [
    ("jitgraph", "jitgraph", "Transformations, `jit`, pytrees, devices, checkpoints."),
    ("jitgraph.config", "jitgraph.config", "Default precision and other global settings."),
    ("jitgraph.numpy", "jitgraph.numpy", "NumPy-named functions on arrays and traced values."),
    ("jitgraph.numpy.linalg", "jitgraph.numpy.linalg", "`jnp.linalg`."),
    ("jitgraph.lax", "jitgraph.lax", "Structured control flow, as `jax.lax`."),
    ("jitgraph.nn", "jitgraph.nn", "Activations, layers (`Module` pytrees), losses."),
    ("jitgraph.nn.initializers", "jitgraph.nn.initializers", "Parameter initializers."),
    ("jitgraph.nn.functional", "jitgraph.nn.functional", "The layers' pure functions (`F`)."),
    ("jitgraph.random", "jitgraph.random", "Counter-based random numbers (Threefry-2x32)."),
    ("jitgraph.misc.fixed_points", "jitgraph.misc.fixed_points",
     "`fixed_point` with its implicit derivative, as autograd's."),
    ("jitgraph.optim", "jitgraph.optim", "Optimizers and schedules (optax-shaped)."),
    ("jitgraph.train", "jitgraph.train", "`train_step`: forward, backward and update as one program."),
    ("jitgraph.serialization", "jitgraph.serialization", "Checkpoints: `save` / `load`."),
    ("jitgraph.scipy.special", "jitgraph.scipy.special", "SciPy-named special functions."),
    ("jitgraph.scipy.linalg", "jitgraph.scipy.linalg", "SciPy-named linear algebra."),
    ("jitgraph.scipy.stats", "jitgraph.scipy.stats", "SciPy-named distributions."),
    ("jitgraph.compat.v1", "jitgraph.compat.v1", "TensorFlow 1's static-graph API."),
    ("jitgraph.profiler", "jitgraph.profiler", "Benchmarking and per-kernel profiles."),
    ("jitgraph.bench", "jitgraph.bench", "`python -m jitgraph.bench`."),
    ("jitgraph.device", "jitgraph.device", "Devices and device arrays."),
    ("jitgraph.cuda_driver", "jitgraph.cuda_driver", "The one layer every CUDA operation goes through."),
    ("jitgraph.distributed", "jitgraph.distributed", "Data-parallel training over MPI."),
]

# Objects a public function returns whose class is not exported: documented on that function's
# page, below it (``jit(f)`` is a ``JitFunction``; ``jit(f).lower(x)`` a ``Lowered``).
RETURNED = {
    "jitgraph.jit": ["jitgraph.jit.JitFunction", "jitgraph.jit.Lowered"],
}


def _defined_under(obj: object, modname: str) -> bool:
    """Whether ``obj`` comes from ``modname`` or one of its (private) submodules; plain
    numbers count as the module's own constants."""
    if isinstance(obj, (int, float, complex, str, types.SimpleNamespace)):
        return True
    mod = getattr(obj, "__module__", None)
    if not isinstance(mod, str):
        mod = type(obj).__module__
    return mod == modname or mod.startswith(modname + ".")


def public_names(modname: str) -> list[str]:
    """The names ``modname`` exports, in a stable order."""
    mod = importlib.import_module(modname)
    names = getattr(mod, "__all__", None)
    if names is not None:
        return list(dict.fromkeys(names))
    out = []
    for name in sorted(vars(mod)):
        obj = getattr(mod, name)
        if name.startswith("_") or isinstance(obj, types.ModuleType) or obj.__class__.__name__ == "_Feature":
            continue
        if _defined_under(obj, modname):
            out.append(name)
    return out


def is_documented_kind(obj: object) -> bool:
    """jitgraph's own functions and classes carry their own docstring; constants, dtypes and
    objects of other libraries (``tf.float32`` is NumPy's) are tabled."""
    own = str(getattr(inspect.unwrap(obj), "__module__", "") or "").startswith("jitgraph")
    return own and (inspect.isroutine(obj) or inspect.isclass(obj))


def page_name(modname: str) -> str:
    """The reference page of ``modname``, relative to docs/."""
    return f"api/{modname}.md"


@functools.lru_cache(maxsize=None)
def documented_names(modname: str) -> tuple[str, ...]:
    """The public functions and classes of ``modname``: the names that get a page each."""
    mod = importlib.import_module(modname)
    return tuple(n for n in public_names(modname) if is_documented_kind(getattr(mod, n)))


def object_page(modname: str, name: str) -> str:
    """The page of ``modname.name``, relative to docs/: ``api/jitgraph.grad.md``. Two names of
    one module that differ only in case (``Primitive`` and ``primitive``) would be one file on a
    case-insensitive disk, so the one with capitals gets ``-class`` (or ``-object``) added."""
    path = f"{modname}.{name}"
    if name != name.lower() and any(n != name and n.lower() == name.lower()
                                    for n in documented_names(modname)):
        obj = getattr(importlib.import_module(modname), name)
        path += "-class" if inspect.isclass(obj) else "-object"
    return f"api/{path}.md"


def identifier(modname: str, name: str) -> str:
    """What mkdocstrings renders for ``modname.name``. Where that dotted name is also a
    submodule (``jitgraph.jit``), griffe would render the module: take the object's home."""
    path = f"{modname}.{name}"
    if path in sys.modules:
        obj = inspect.unwrap(getattr(importlib.import_module(modname), name))
        return f"{obj.__module__}.{obj.__qualname__}"
    return path


def _signature(fn: object) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _first_line(obj: object) -> str:
    """The docstring's first paragraph, as one table cell."""
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ").replace("|", "\\|")


def _is_namespace(obj: object) -> bool:
    """A bag of functions (``scipy.stats.norm``, ``tf.nn``): tabled member by member."""
    return (not callable(obj) and not isinstance(obj, types.ModuleType)
            and any(not k.startswith("_") for k in getattr(obj, "__dict__", {})))


def _describe(obj: object) -> str:
    """A constant's value, a dtype's NumPy dtype, or an object's first docstring line."""
    if isinstance(obj, (int, float, complex, str)):
        return f"`{obj!r}`"
    if hasattr(obj, "dtype") and callable(obj):
        import numpy as np
        return f"dtype `{np.dtype(obj)}`; calling it casts, traced values too"
    return _first_line(obj) or type(obj).__name__


def _table(modname: str, names: list[str], mod: types.ModuleType, what: str) -> list[str]:
    out = [f"## {what}\n", "| name | what |", "| --- | --- |"]
    for name in sorted(names, key=lambda n: (n.lower(), n)):
        link = object_page(modname, name)[len("api/"):]
        out.append(f"| [`{name}`]({link}) | {_first_line(getattr(mod, name))} |")
    out.append("")
    return out


def reference_page(modname: str, title: str, summary: str) -> str:
    """Markdown for one module: its docstring (the introduction, written for users; ``summary``
    is the index's line), then its submodules, its functions and classes with a line each
    (alphabetical), linking to their pages, then its constants, dtypes and namespaces."""
    mod = importlib.import_module(modname)
    functions, classes, constants, namespaces = [], [], [], []
    for name in public_names(modname):
        obj = getattr(mod, name)
        if isinstance(obj, types.ModuleType):
            continue
        if is_documented_kind(obj):
            (classes if inspect.isclass(obj) else functions).append(name)
        elif _is_namespace(obj):
            namespaces.append((name, obj))
        else:
            constants.append((name, obj))
    out = [f"# {title}\n",
           f"::: {modname}\n    options:\n      members: false\n      show_root_heading: false\n"
           "      show_root_toc_entry: false\n"]
    children = [(m, s) for m, _, s in MODULES if m.startswith(modname + ".")]
    if children:
        out += ["## Modules\n", "| module | what |", "| --- | --- |"]
        out += [f"| [`{m}`]({m}.md) | {s} |" for m, s in children]
        out.append("")
    if functions:
        out += _table(modname, functions, mod, "Functions")
    if classes:
        out += _table(modname, classes, mod, "Classes")
    if constants:
        out.append("## Constants and dtypes\n\n| name | value |\n| --- | --- |")
        for name, obj in constants:
            out.append(f"| `{name}` | {_describe(obj)} |")
        out.append("")
    for name, ns in namespaces:
        out.append(f"## `{modname}.{name}`\n\n| function | what |\n| --- | --- |")
        for member, fn in sorted((k, v) for k, v in vars(ns).items() if not k.startswith("_")):
            what = (_first_line(fn) or "as the function of this name in the library the module mirrors") \
                if callable(fn) else f"`{fn!r}`"
            sig = _signature(fn) if callable(fn) else ""
            out.append(f"| `{name}.{member}{sig}` | {what} |")
        out.append("")
    return "\n".join(out) + "\n"


def object_page_text(modname: str, name: str) -> str:
    """Markdown for one function or class: it, as its page's title (its heading is the page's
    only level-1 heading), then the objects it returns whose classes are not exported."""
    full = f"{modname}.{name}"
    ident = identifier(modname, name)
    out = [f"---\ntitle: {full}\n---\n",
           f"::: {ident}\n    options:\n      heading_level: 1\n      heading: \"{full}\"\n"
           f"      toc_label: \"{full}\"\n"]
    out.append(f"All of [`{modname}`]({modname}.md): its page lists every name.\n")
    returned = RETURNED.get(full, [])
    if returned:
        out.append("## What it returns\n")
        out += [f"::: {r}\n    options:\n      heading_level: 3\n" for r in returned]
    return "\n".join(out) + "\n"


def all_object_pages() -> list[tuple[str, str]]:
    """(module, name) of every function and class with a page."""
    return [(m, n) for m, _, _ in MODULES for n in documented_names(m)]


def index_page() -> str:
    """The reference's contents: the most used functions, then one line per module page."""
    import jitgraph
    lines = ["# API reference\n",
             "A page per module, with a line per name, and a page per function or class, "
             "rendered from its docstring.\n",
             "## Most used\n", "| name | what |", "| --- | --- |"]
    for name in TOP_FUNCTIONS:
        lines.append(f"| [`jitgraph.{name}`](jitgraph.{name}.md) | "
                     f"{_first_line(getattr(jitgraph, name))} |")
    lines += ["", "## Modules\n", "| module | what |", "| --- | --- |"]
    lines += [f"| [`{title}`]({modname}.md) | {summary} |" for modname, title, summary in MODULES]
    return "\n".join(lines) + "\n"


# the functions the index lists first (mkdocs.yml's nav lists them too)
TOP_FUNCTIONS = ["jit", "grad", "value_and_grad", "vmap", "jvp", "vjp", "make_graph",
                 "train_step"]


# --- MkDocs hooks (mkdocs.yml: hooks) -------------------------------------------------------

def on_files(files, config):
    """Add the generated reference pages to the site."""
    from mkdocs.structure.files import File
    files.append(File.generated(config, "api/index.md", content=index_page()))
    for modname, title, summary in MODULES:
        files.append(File.generated(config, page_name(modname),
                                    content=reference_page(modname, title, summary)))
    for modname, name in all_object_pages():
        files.append(File.generated(config, object_page(modname, name),
                                    content=object_page_text(modname, name)))
    return files
