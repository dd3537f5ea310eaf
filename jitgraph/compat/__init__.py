"""Compatibility APIs: ``jitgraph.compat.v1`` is TensorFlow 1's static-graph API
(``placeholder``, ``Variable``, ``Session.run``) executed by jitgraph's compiler."""
