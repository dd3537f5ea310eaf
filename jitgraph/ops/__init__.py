"""First-order primitives, one module per family; importing this package registers them all.
(The higher-order ones, which hold sub-graphs, are in ``jitgraph.control_flow``.)"""
from . import binders  # noqa: F401  (first: it imports the families its rules bind)
from . import elementwise, reductions, layout, windows, indexing, linalg  # noqa: F401
from . import transcendental, sorting, decompositions, complex, fft  # noqa: F401
from . import random  # noqa: F401,E402  (32-bit word ops for jitgraph.random)
