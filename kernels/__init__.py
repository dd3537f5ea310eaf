"""Hand-written Numba building blocks that generated jitgraph kernels call into."""
