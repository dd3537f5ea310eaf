"""A module-like namespace (``tf.nn``, ``tf.train``, ...) whose missing names say why."""
from __future__ import annotations

from typing import Any

DOCS = "the coverage table in docs/compat_v1.md lists what jitgraph.compat.v1 serves"


def not_served(qualname: str, why: str | None) -> AttributeError:
    """The error for a TensorFlow name this layer does not serve: it names it and says why."""
    reason = why or "it is not part of what this layer serves"
    return AttributeError(f"{qualname} is not served by jitgraph.compat.v1: {reason} ({DOCS})")


class Namespace:
    """Attributes from ``attrs``; a name in ``not_served`` (or any other missing name) raises an
    ``AttributeError`` naming it, with the reason."""

    def __init__(self, name: str, attrs: dict[str, Any], not_served: dict[str, str] | None = None):
        self.__dict__.update(attrs)
        self._name = name
        self._not_served = dict(not_served or {})

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise not_served(f"{self._name}.{attr}", self._not_served.get(attr))

    def __dir__(self):
        return [k for k in self.__dict__ if not k.startswith("_")]

    def __repr__(self) -> str:
        return f"<jitgraph.compat.v1 namespace {self._name}>"
