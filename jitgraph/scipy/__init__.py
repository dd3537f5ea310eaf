"""SciPy-named functions (``jitgraph.scipy.special``)."""
from . import special  # noqa: F401
from . import linalg, stats  # noqa: F401
