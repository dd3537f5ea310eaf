"""User extension points: ``custom_vjp`` (as JAX's) and ``defprimitive`` (a new primitive with its
own rules, defined in one place like the built-in ones)."""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from .core import Aval, Primitive, Tracer, bind, register
from .tree import tree_flatten


# ------------------------------------------------------------------ custom_vjp
def _call_aval(*avals, _graph, **_):
    return [v.aval.strong() for v in _graph.outputs]


def _call_impl(*args, _graph, **_):
    from .interpreter import run
    return tuple(run(_graph, list(args)))


def _call_vjp(cts, outs, *ins, _graph, _fwd, _bwd, _in_tree, _out_tree, n_args, name):
    import jitgraph.numpy as jnp
    args = _in_tree.unflatten(list(ins[:n_args]))
    fwd_out = _fwd(*args)
    if not (isinstance(fwd_out, tuple) and len(fwd_out) == 2):
        raise TypeError(f"custom_vjp {name}: fwd must return a pair (output, residuals)")
    _, res = fwd_out
    cts = [jnp.zeros(o.shape, o.dtype) if c is None else c for c, o in zip(cts, outs)]
    g = _bwd(res, _out_tree.unflatten(cts))
    if not isinstance(g, tuple) or len(g) != len(args):
        raise TypeError(f"custom_vjp {name}: bwd must return a tuple with one cotangent per "
                        f"argument ({len(args)}), got {type(g).__name__}"
                        + (f" of length {len(g)}" if isinstance(g, tuple) else ""))
    leaves = []
    for gi, a in zip(g, args):
        gl, _ = tree_flatten(gi)
        al, _ = tree_flatten(a)
        if len(gl) != len(al):
            raise TypeError(f"custom_vjp {name}: a cotangent's structure does not match its "
                            "argument's")
        leaves += [None if x is None else jnp.reshape(jnp.asarray(x), np.shape(y) if not isinstance(y, Tracer) else y.shape)
                   for x, y in zip(gl, al)]
    return leaves + [None] * (len(ins) - n_args)


def _call_jvp(ts, outs, *ins, name, **_):
    raise TypeError(f"can't apply forward-mode autodiff (jvp/jacfwd/hessian) to the custom_vjp "
                    f"function {name}; define it without custom_vjp or use reverse mode")


custom_vjp_call_p = register(Primitive(
    "custom_vjp_call", kind="call", abstract_eval=_call_aval, impl=_call_impl,
    vjp=_call_vjp, jvp=_call_jvp, multiple_results=True))


class custom_vjp:
    """A function with a user-defined VJP: ``f.defvjp(fwd, bwd)`` as in JAX.

    ``fwd(*args) -> (out, residuals)``; ``bwd(residuals, ct) -> tuple`` with one cotangent per
    argument. ``bwd`` is written with jitgraph.numpy, so it can be differentiated again.
    """

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any) -> Any:
        if self.fwd is None:
            raise TypeError(f"custom_vjp function {self.fun.__name__}: call defvjp(fwd, bwd) "
                            "before using it")
        leaves, in_tree = tree_flatten(args)
        if not any(isinstance(x, Tracer) for x in leaves):
            return self.fun(*args)
        from .transforms import trace_to_graph
        from .passes import optimize
        graph, captured, in_leaves, _, out_tree = trace_to_graph(
            self.fun, args, abstract=True, what=f"custom_vjp {self.fun.__name__}")
        graph = optimize(graph)
        outs = bind(custom_vjp_call_p, *in_leaves, *captured, _graph=graph, _fwd=self.fwd,
                    _bwd=self.bwd, _in_tree=in_tree, _out_tree=out_tree, n_args=len(in_leaves),
                    name=self.fun.__name__)
        return out_tree.unflatten(list(outs))


# ------------------------------------------------------------------ user primitives
def defprimitive(name: str, impl: Callable, abstract_eval: Callable | None = None, *,
                 vjp: Callable | None = None, jvp: Callable | None = None,
                 codegen: Any = None, kind: str = "opaque") -> Primitive:
    """Define a new primitive with the same mechanism as the built-in ones.

    ``impl(*arrays, **params)`` is the NumPy reference; ``abstract_eval(*avals, **params)`` returns
    an ``Aval`` (default: the first operand's); ``vjp(g, out, *inputs, **params)`` returns a tuple
    of input cotangents written with jitgraph.numpy (``None`` = zero); ``jvp(tangents, out,
    *inputs, **params)`` returns the output tangent. Without ``codegen`` a compiled program calls
    ``impl`` between generated kernels. The primitive is callable: ``prim(x, **params)``.
    """
    if abstract_eval is None:
        def abstract_eval(x, *rest, **params):
            return Aval(x.shape, x.dtype, x.weak)
    return register(Primitive(name, kind=kind, abstract_eval=abstract_eval, impl=impl,
                              vjp=vjp, jvp=jvp, codegen=codegen))


def defvjp(prim: Primitive, vjp: Callable) -> Primitive:
    prim.vjp = vjp
    return prim


def defjvp(prim: Primitive, jvp: Callable) -> Primitive:
    prim.jvp = jvp
    return prim
