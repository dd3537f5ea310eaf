"""SciPy-named functions (``jitgraph.scipy.special``)."""
from . import special  # noqa: F401
from . import linalg  # noqa: F401
