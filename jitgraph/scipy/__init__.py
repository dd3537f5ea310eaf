"""SciPy-named functions (``jitgraph.scipy.special``)."""
from . import special  # noqa: F401
