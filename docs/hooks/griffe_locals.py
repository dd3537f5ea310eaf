"""Griffe extension for the API reference, which inspects jitgraph at runtime.

- Functions made by a factory (``tanh = _unary("tanh")``) name their factory's locals as their
  home (``_unary.<locals>.fn``), which griffe cannot resolve as an alias: document them where
  they are bound, from the function object itself (its ``__doc__`` and signature).
- A plain attribute (``DEFAULT_BUCKET_BYTES = 4 << 20``) would show its type's docstring
  (``int``'s): drop that, so only attributes with a docstring of their own render.
"""
from __future__ import annotations

import griffe


class FactoryFunctions(griffe.Extension):
    def on_alias_instance(self, *, alias, node, agent, **kwargs) -> None:
        if "<locals>" not in alias.target_path:
            return
        child = next(c for c in node.children if c.name == alias.name)
        agent.inspect(child)

    def on_attribute_instance(self, *, node, attr, agent, **kwargs) -> None:
        doc, type_doc = attr.docstring, type(node.obj).__dict__.get("__doc__")
        if doc is not None and isinstance(type_doc, str) and doc.value.strip() == type_doc.strip():
            attr.docstring = None
