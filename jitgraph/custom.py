"""User extension points: ``custom_vjp`` (as JAX's) and ``defprimitive`` (a new primitive with its
own rules, defined in one place like the built-in ones)."""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from . import numpy as jnp
from .autodiff import build_vjp, eval_graph
from .batching import batch_graph, batch_size, move_batch_axis
from .core import (Aval, Graph, KeyedParams, Primitive, SharedGraph, Tracer, Var, aval_of, bind,
                   register, top_trace)
from .interpreter import Plan, run_plan
from .interpreter import run as interpret
from .passes import optimize
from .state_key import state_key
from .transforms import leaf_operands, trace_flat, trace_to_graph
from .tree import tree_flatten


# ------------------------------------------------------------------ custom_vjp
# A call of a custom_vjp function records one ``custom_vjp_call`` node whose inputs are the
# argument leaves followed by every traced value that ``fun``, ``fwd`` or ``bwd`` closes over.
# ``fun``, ``fwd`` and ``bwd`` are traced to graphs at call time (closure conversion), so the VJP
# rule only evaluates graphs on the values it is given: closed-over traced values (a weight, a
# temperature) work, and the backward pass is made of primitives that differentiate again.
# ``_graph`` (the primal function) has exactly the node's inputs, so the compiler can inline it.
# The traced graphs are kept between calls while nothing they depend on changes (``_rules``).
# Un-jitted, on concrete values, the node runs fwd instead (``res_out``: its outputs are the
# function's followed by the residuals), so the VJP reads the residuals fwd computed instead
# of evaluating fwd again: autograd's tape does the same. Abstract traces (jit, make_graph,
# vmap) record the primal graph alone, so compiled programs never carry the residuals.
def _call_aval(*avals, _graph, **_):
    return [v.aval.strong() for v in _graph.outputs]


def _call_impl(*args, _graph, **_):
    if type(_graph) is SharedGraph:     # kept and evaluated again and again: planned once
        plan = getattr(_graph, "plan", None)
        if plan is None:
            plan = _graph.plan = Plan(_graph)
        return tuple(run_plan(plan, args))
    return tuple(interpret(_graph, list(args)))


def _call_vjp(cts, outs, *ins, _graph, _fwd_graph, _bwd_graph, _fwd_caps, _bwd_caps, n_args,
              n_res, name, res_out=False, **_):
    args, caps = list(ins[:n_args]), list(ins[n_args:])
    if res_out:     # the node's own outputs end with fwd's residuals: nothing to recompute
        n_out = len(outs) - n_res
        res, res_cts = list(outs[n_out:]), cts[n_out:]
        outs, cts = outs[:n_out], cts[:n_out]
    cts = [jnp.zeros(o.shape, o.dtype) if c is None else c for c, o in zip(cts, outs)]
    if not res_out:
        fwd_outs = eval_graph(_fwd_graph, args + [caps[i] for i in _fwd_caps])
        res = fwd_outs[len(fwd_outs) - n_res:]
    grads = eval_graph(_bwd_graph, res + cts + [caps[i] for i in _bwd_caps])
    if res_out and any(c is not None for c in res_cts):
        # residuals that reach the result (bwd's, under grad of grad) get their ordinary
        # derivative, through fwd, as when fwd is evaluated inside the VJP
        zeros = [jnp.zeros(o.shape, o.dtype) for o in outs]
        res_cts = [jnp.zeros(r.shape, r.dtype) if c is None else c for c, r in zip(res_cts, res)]
        more = eval_graph(build_vjp(_fwd_graph, list(range(n_args))), args + zeros + res_cts)
        grads = [g + m for g, m in zip(grads, more)]
    if not caps:
        return grads
    # closed-over values have no custom rule: their cotangents come from the primal graph
    cap_grads = eval_graph(build_vjp(_graph, list(range(n_args, len(ins)))), list(ins) + cts)
    return grads + list(cap_grads)


def _call_jvp(ts, outs, *ins, name, **_):
    raise TypeError(f"can't apply forward-mode autodiff (jvp/jacfwd/hessian) to the custom_vjp "
                    f"function {name}; define it without custom_vjp or use reverse mode")


def _call_batch(args, dims, *, _graph, _fwd_graph, _bwd_graph, _fwd_caps, _bwd_caps, n_args,
                n_res, name, res_out=False, **params):
    """A batched call of the same custom function: its primal, fwd and bwd graphs are each
    batched (``batch_graph``), so a vmapped function keeps its custom VJP. Batched operands go
    to axis 0; the batched bwd sums the cotangents of unbatched arguments over the batch."""
    size = batch_size(args, dims)
    xs = [x if d is None else move_batch_axis(x, d, 0) for x, d in zip(args, dims)]
    ds = [None if d is None else 0 for d in dims]
    arg_ds, cap_ds = ds[:n_args], ds[n_args:]
    n_out = len(_graph.outputs) - (n_res if res_out else 0)
    graph = batch_graph(_graph, ds, size)
    fwd = batch_graph(_fwd_graph, arg_ds + [cap_ds[i] for i in _fwd_caps], size)
    bwd = batch_graph(_bwd_graph, [0] * (n_res + n_out) + [cap_ds[i] for i in _bwd_caps], size,
                      out_sum=[d is None for d in arg_ds])
    outs = bind(custom_vjp_call_p, *xs, _graph=graph, _fwd_graph=fwd, _bwd_graph=bwd,
                _fwd_caps=_fwd_caps, _bwd_caps=_bwd_caps, n_args=n_args, n_res=n_res,
                name=name, res_out=res_out, **params)
    return list(outs), [0] * len(outs)


TRACE_CACHE_SIZE = 32   # traced (fun, fwd, bwd) kept per custom_vjp function (see _rules)

custom_vjp_call_p = register(Primitive(
    "custom_vjp_call", kind="call", abstract_eval=_call_aval, impl=_call_impl,
    vjp=_call_vjp, jvp=_call_jvp, multiple_results=True, batch=_call_batch))


def _concrete(leaves) -> bool:
    """Every leaf has a value: a concrete (un-jitted) call, whose node may keep residuals."""
    return all(not isinstance(x, Tracer) or x.val is not None for x in leaves)


class custom_vjp:
    """A function with a user-defined reverse-mode derivative, as ``jax.custom_vjp``: decorate
    ``fun``, then give the rule with ``f.defvjp(fwd, bwd)``.

    ``fwd(*args) -> (out, residuals)`` computes the output and what the backward pass needs;
    ``bwd(residuals, ct) -> tuple`` returns one cotangent per argument of ``fun`` (``None`` for
    a zero cotangent). ``bwd`` is written with ``jitgraph.numpy``, so it can be differentiated
    again. ``fwd`` and ``bwd`` may close over traced values; values closed over get their
    ordinary derivative. Called outside a derivative, ``f(*args)`` is ``fun(*args)``.

    Example: a gradient clipped to [-1, 1] on its way back.

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> @jitgraph.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> def fwd(x):
    ...     return x, None
    >>> def bwd(residuals, ct):
    ...     return (jnp.clip(ct, -1.0, 1.0),)
    >>> clip_gradient.defvjp(fwd, bwd)
    >>> jitgraph.grad(lambda x: 5.0 * clip_gradient(x))(2.0)
    array(1.)

    ```

    :param fun: the function, of positional arguments (arrays or pytrees of them).
    """

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None
        self._tracing_rules = False
        self._traces: OrderedDict = OrderedDict()   # see _rules
        self._last = None                           # the most recently used of them

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        """Set the derivative rule (as JAX's ``f.defvjp``).

        :param fwd: ``fwd(*args) -> (out, residuals)``, with ``fun``'s arguments; ``out`` is
            ``fun(*args)``, ``residuals`` any pytree ``bwd`` needs.
        :param bwd: ``bwd(residuals, ct) -> tuple``: one cotangent per argument of ``fun`` (of its
            structure and shapes, or ``None`` for zero), given the output's cotangent ``ct``.
        """
        self.fwd, self.bwd = fwd, bwd
        self._traces.clear()

    def _state_key_parts(self) -> tuple:
        """What this function's traces depend on besides its arguments (``state_key``)."""
        return (self.fun, self.fwd, self.bwd)

    def __call__(self, *args: Any) -> Any:
        if self.fwd is None:
            raise TypeError(f"custom_vjp function {self.fun.__name__}: call defvjp(fwd, bwd) "
                            "before using it")
        leaves, in_tree = tree_flatten(args)
        if self._tracing_rules or not any(isinstance(x, Tracer) for x in leaves):
            # (fwd usually calls the function itself: while fwd/bwd are being traced, that is
            # the plain primal computation)
            return self.fun(*args)
        self._tracing_rules = True
        try:
            return self._bind(args, leaves, in_tree)
        finally:
            self._tracing_rules = False

    def _bind(self, args, leaves, in_tree):
        in_leaves, rules = self._rules(args, leaves, in_tree)
        prim_graph, fwd_graph, bwd_graph, caps, fwd_caps, bwd_caps, n_res, out_tree, eager = rules
        if eager is not None and _concrete(in_leaves):
            params, out_avals = eager
            trace = top_trace(in_leaves)
            if trace.active:        # (else bind explains the leaked tracer)
                outs = trace.emit(custom_vjp_call_p, in_leaves, out_avals, params)
            else:
                outs = bind(custom_vjp_call_p, *in_leaves, **params)
            return out_tree.unflatten(list(outs[:len(outs) - n_res]))
        outs = bind(custom_vjp_call_p, *in_leaves, *caps, _graph=prim_graph,
                    _fwd_graph=fwd_graph, _bwd_graph=bwd_graph, _fwd_caps=fwd_caps,
                    _bwd_caps=bwd_caps, n_args=len(in_leaves), n_res=n_res,
                    name=self.fun.__name__)
        return out_tree.unflatten(list(outs))

    def _rules(self, args, leaves, in_tree):
        """(argument leaves, traced rules). Tracing ``fun``, ``fwd`` and ``bwd`` and
        optimizing their graphs costs several times what evaluating them does on small
        eager arguments, so the rules are kept per argument structure, shapes and dtypes
        and the state the functions read (``state_key``), unless they close over traced
        values (which must be node inputs, found by tracing) or read state that can't be
        keyed. At most ``TRACE_CACHE_SIZE`` entries per function, least recently used
        dropped first."""
        leaves = leaf_operands(args, leaves)
        key = None
        state = state_key(self)
        if state is not None:
            key = (in_tree, tuple(aval_of(x) for x in leaves), state)
            hit = self._traces.get(key)
            if hit is not None:
                if hit is not self._last:
                    self._traces.move_to_end(key)
                    self._last = hit
                return leaves, hit
        in_leaves, rules = self._trace_rules(args, in_tree)
        if key is not None and not rules[3]:        # no closed-over traced values
            if len(self._traces) >= TRACE_CACHE_SIZE:
                self._traces.popitem(last=False)
            self._traces[key] = self._last = rules
        return in_leaves, rules

    def _trace_rules(self, args, in_tree):
        """Trace ``fun``, ``fwd`` and ``bwd`` at ``args``; returns (argument leaves, (primal
        graph, fwd graph, bwd graph, closed-over traced values, positions among them of
        fwd's and of bwd's, residual count, output structure, (parameters, output avals) of
        the node of a concrete call or None))."""
        name = self.fun.__name__
        graph, cap_f, in_leaves, _, out_tree = trace_to_graph(
            self.fun, args, abstract=True, what=f"custom_vjp {name}")
        n_args = len(in_leaves)
        arg_avals = [v.aval for v in graph.inputs[:n_args]]
        out_avals = [v.aval.strong() for v in graph.outputs]

        def fwd_flat(*xs):
            r = self.fwd(*in_tree.unflatten(list(xs)))
            if not (isinstance(r, tuple) and len(r) == 2):
                raise TypeError(f"custom_vjp {name}: fwd must return a pair (output, residuals)")
            out_l, o_tree = tree_flatten(r[0])
            if o_tree != out_tree:
                raise TypeError(f"custom_vjp {name}: fwd's output structure {o_tree} differs "
                                f"from the function's {out_tree}")
            res_l, res_tree = tree_flatten(r[1])
            fwd_flat.res_tree = res_tree
            return out_l + res_l

        fwd_graph, cap_fwd = trace_flat(fwd_flat, arg_avals, f"custom_vjp {name} (fwd)")
        res_tree = fwd_flat.res_tree
        n_res = res_tree.num_leaves
        res_avals = [v.aval.strong() for v in fwd_graph.outputs[len(out_avals):]]
        arg_trees = [tree_flatten(a)[1] for a in args]

        def bwd_flat(*xs):
            res = res_tree.unflatten(list(xs[:n_res]))
            ct = out_tree.unflatten(list(xs[n_res:]))
            g = self.bwd(res, ct)
            if not isinstance(g, tuple) or len(g) != len(args):
                raise TypeError(f"custom_vjp {name}: bwd must return a tuple with one cotangent "
                                f"per argument ({len(args)}), got {type(g).__name__}"
                                + (f" of length {len(g)}" if isinstance(g, tuple) else ""))
            flat = []
            for k, (gi, td) in enumerate(zip(g, arg_trees)):
                if gi is None:
                    gl = [None] * td.num_leaves
                else:
                    gl, gtd = tree_flatten(gi)
                    if gtd != td:
                        raise TypeError(f"custom_vjp {name}: the cotangent for argument {k} has "
                                        f"structure {gtd}, the argument has {td}")
                flat += gl
            outs = []
            for gl, a in zip(flat, arg_avals):
                if gl is None:
                    outs.append(np.zeros(a.shape, a.dtype))
                    continue
                gl = jnp.asarray(gl)
                if aval_of(gl).shape != a.shape:
                    gl = jnp.broadcast_to(gl, a.shape) if aval_of(gl).size == 1 or \
                        aval_of(gl).ndim < len(a.shape) else jnp.reshape(gl, a.shape)
                outs.append(gl)
            return outs

        bwd_graph, cap_bwd = trace_flat(bwd_flat, res_avals + out_avals,
                                         f"custom_vjp {name} (bwd)")
        # every closed-over traced value becomes an input of the node, once
        caps: list = []
        for c in cap_f + cap_fwd + cap_bwd:
            if not any(c is d for d in caps):
                caps.append(c)
        pos = lambda cs: tuple(next(i for i, d in enumerate(caps) if d is c) for c in cs)
        f_in = dict(zip(pos(cap_f), graph.inputs[n_args:]))
        prim_graph = Graph(list(graph.inputs[:n_args]) + [f_in.get(i) or Var(c.aval)
                                                          for i, c in enumerate(caps)],
                           graph.nodes, graph.outputs, graph.consts)
        graphs = [optimize(g) for g in (prim_graph, fwd_graph, bwd_graph)]
        eager = None
        if not caps:    # kept for reuse (see _rules): nodes holding them are keyed by identity
            graphs = [SharedGraph(g.inputs, g.nodes, g.outputs, g.consts, g.in_tree,
                                  g.out_tree) for g in graphs]
            # the node of a concrete call (see res_out): its parameters and output avals
            eager = (KeyedParams.of(_graph=graphs[1], _fwd_graph=graphs[1], _bwd_graph=graphs[2],
                                    _fwd_caps=(), _bwd_caps=(), n_args=n_args, n_res=n_res,
                                    name=name, res_out=True),
                     _call_aval(_graph=graphs[1]))
        return in_leaves, (*graphs, caps, pos(cap_fwd), pos(cap_bwd), n_res, out_tree, eager)


# ------------------------------------------------------------------ user primitives
def defprimitive(name: str, impl: Callable, abstract_eval: Callable | None = None, *,
                 vjp: Callable | None = None, jvp: Callable | None = None,
                 codegen: Any = None, kind: str = "opaque",
                 batch: Callable | None = None) -> Primitive:
    """Define a new primitive with the same mechanism as the built-in ones
    (``jitgraph.primitive`` is the same function). The guide "Adding a primitive" walks
    through every rule.

    The primitive is callable: ``prim(x, **params)`` computes ``impl`` on arrays and records a
    node on traced values. Without ``codegen``, a compiled program calls ``impl`` between its
    generated kernels.

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> cube = jitgraph.defprimitive("doc_cube", lambda x: x ** 3,
    ...                              vjp=lambda g, out, x: (3.0 * x ** 2 * g,))
    >>> cube(np.array([1.0, 2.0]))
    array([1., 8.])
    >>> jitgraph.grad(lambda x: jnp.sum(cube(x)))(np.array([1.0, 2.0]))
    array([ 3., 12.])
    >>> jitgraph.jit(lambda x: cube(x) + 1.0)(np.array([1.0, 2.0]))
    array([2., 9.])

    ```

    :param name: the primitive's name in graphs and messages; unique.
    :param impl: ``impl(*arrays, **params) -> ndarray``: the NumPy reference implementation.
    :param abstract_eval: ``abstract_eval(*avals, **params) -> Aval``: the output's shape and
        dtype (default: the first operand's).
    :param vjp: ``vjp(g, out, *inputs, **params) -> tuple``: the inputs' cotangents given the
        output's ``g``, written with ``jitgraph.numpy`` (``None`` for a zero cotangent). Also
        settable later with ``defvjp``.
    :param jvp: ``jvp(tangents, out, *inputs, **params)``: the output's tangent. Also settable
        later with ``defjvp``.
    :param codegen: for kind ``"elementwise"``: ``rule(ctx, *input_exprs, **params) -> scalar
        expression``, fused into the generated loops (or a ``core.Lowering`` record); write it
        with ``ctx``, the target's syntax table (``ctx.op("times", x, y)``, ``ctx.select``,
        ``ctx.call(ctx.fn("exp"), x)``...), and it fits every target.
    :param kind: how the compiler treats it (``"opaque"``: a host step; ``"elementwise"``: fused
        with ``codegen``); see ``jitgraph.Primitive``.
    :param batch: ``batch(args, dims, **params) -> (out, out_dim)``: its batching rule for
        ``vmap`` (see ``jitgraph.batching``).
    :returns: the registered ``jitgraph.Primitive``.
    """
    if abstract_eval is None:
        def abstract_eval(x, *rest, **params):
            return Aval(x.shape, x.dtype, x.weak)
    return register(Primitive(name, kind=kind, abstract_eval=abstract_eval, impl=impl,
                              vjp=vjp, jvp=jvp, codegen=codegen, batch=batch))


def defvjp(prim: Primitive, vjp: Callable) -> Primitive:
    """Give the primitive ``prim`` a reverse-mode rule (for ``grad``, ``vjp``, ``jacrev``).

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> square = jitgraph.defprimitive("doc_square", lambda x: x * x)
    >>> _ = jitgraph.defvjp(square, lambda g, out, x: (2.0 * x * g,))
    >>> jitgraph.grad(lambda x: jnp.sum(square(x)))(np.array([1.0, 2.0]))
    array([2., 4.])

    ```

    :param prim: a primitive (from ``defprimitive``).
    :param vjp: ``vjp(g, out, *args, **params) -> tuple``: one cotangent per input of ``prim``
        (``None`` for zero), given the output ``out``'s cotangent ``g``; written with
        ``jitgraph.numpy``, so it can be differentiated again.
    :returns: ``prim``.
    """
    prim.vjp = vjp
    return prim


def defjvp(prim: Primitive, jvp: Callable) -> Primitive:
    """Give the primitive ``prim`` a forward-mode rule (for ``jvp``, ``jacfwd``, ``hessian``).

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> twice = jitgraph.defprimitive("doc_twice", lambda x: 2.0 * x)
    >>> _ = jitgraph.defjvp(twice, lambda tangents, out, x: 2.0 * tangents[0])
    >>> jitgraph.jvp(twice, (np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
    (array([2., 4.]), array([2., 0.]))

    ```

    :param prim: a primitive (from ``defprimitive``).
    :param jvp: ``jvp(tangents, out, *args, **params)``: the output's tangent, given one tangent
        per input (``tangents[i]`` for ``args[i]``) and the output ``out``.
    :returns: ``prim``.
    """
    prim.jvp = jvp
    return prim
