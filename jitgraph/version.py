"""jitgraph's version (part of every disk-cache key, so an upgrade never loads stale code)."""
__version__ = "0.1.0"
