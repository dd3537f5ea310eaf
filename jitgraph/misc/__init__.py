"""Utilities at the paths HIPS autograd gives them (``autograd.misc``), so code written for
autograd runs by changing the import: ``from jitgraph.misc.fixed_points import fixed_point``."""
