"""The public API the reference documents: one page per module, every public name on it.

A module's public names are its ``__all__``, or, without one, the names it defines or
re-exports from its own submodules that do not start with ``_`` (submodules and ``__future__`` features
excluded). ``tests/test_docs.py`` checks every such function and class has a docstring.
"""
from __future__ import annotations

import importlib
import inspect
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


def _signature(fn: object) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _first_line(obj: object) -> str:
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


def reference_page(modname: str, title: str, summary: str) -> str:
    """Markdown for one module: its docstring, then every public name (mkdocstrings renders
    functions and classes from their docstrings; constants, dtypes and namespaces are tables)."""
    mod = importlib.import_module(modname)
    objects, constants, namespaces = [], [], []
    for name in public_names(modname):
        obj = getattr(mod, name)
        if isinstance(obj, types.ModuleType):
            continue
        if is_documented_kind(obj):
            objects.append(name)
        elif _is_namespace(obj):
            namespaces.append((name, obj))
        else:
            constants.append((name, obj))
    out = [f"# `{title}`\n", f"{summary}\n",
           f"::: {modname}\n    options:\n      members: false\n      show_root_heading: false\n"]
    if objects:
        out.append("## Functions and classes\n")
        out += [f"::: {modname}.{name}\n" for name in objects]
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


def index_page() -> str:
    """The reference's contents: one line per module page."""
    lines = ["# API reference\n", "Every public name of each module, rendered from its docstring.\n",
             "| module | what |", "| --- | --- |"]
    lines += [f"| [`{title}`]({modname}.md) | {summary} |" for modname, title, summary in MODULES]
    return "\n".join(lines) + "\n"


# --- MkDocs hooks (mkdocs.yml: hooks) -------------------------------------------------------

def on_files(files, config):
    """Add the generated reference pages to the site."""
    from mkdocs.structure.files import File
    files.append(File.generated(config, "api/index.md", content=index_page()))
    for modname, title, summary in MODULES:
        files.append(File.generated(config, page_name(modname),
                                    content=reference_page(modname, title, summary)))
    return files
