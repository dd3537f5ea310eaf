"""Primitive definitions, one module per family. Importing this package registers them all."""
from . import elementwise, reductions, layout, indexing, linalg  # noqa: F401
from . import transcendental, sorting, decompositions  # noqa: F401
from . import random  # noqa: F401,E402  (32-bit word ops for jitgraph.random)
from . import control_flow  # noqa: F401,E402  (cond, scan, while, remat: nodes holding sub-graphs)
