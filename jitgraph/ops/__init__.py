"""Primitive definitions, one module per family. Importing this package registers them all."""
from . import elementwise, reductions, layout, indexing, linalg  # noqa: F401
from . import transcendental, sorting, decompositions  # noqa: F401
