"""The user-facing transformations, with JAX's names and signatures, over pytrees.

Every transform follows one recipe: trace the function into a graph (with concrete values
where the inputs have them, so Python control flow works outside ``jit``), expand the graph
(``autodiff``), optimize it (``passes``), then evaluate it with ``eval_graph`` — which runs the
reference interpreter on arrays, or inlines the graph into an enclosing trace, which is what
makes the transforms compose to any order.

Reverse mode outside ``jit`` (``grad``, ``value_and_grad``, ``vjp``) takes a shortcut with the
same numbers: the forward pass already computed every value while tracing, so the derivative
rules run on those values (``autodiff.eager_vjp``) instead of a backward graph being built,
optimized and interpreted anew on every call; ``hessian_vector_product`` runs one cached
graph per structure (``autodiff.eager_hvp``).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Sequence

import numpy as np

from . import dtypes
from . import numpy as jnp
from .autodiff import (build_jvp, build_vjp, eager_hvp, eager_values, eager_vjp, eval_graph,
                       structure_key, vdot_leaves)
from .arrays import Array
from .core import Aval, Graph, Trace, Tracer, aval_of
from .ops.binders import operand
from .passes import optimize
from .traceback_filter import api_boundary
from .tree import TreeDef, argument_leaf_names, returns_arrays, tree_flatten


def leaf_operand(x: Any, name: str) -> Any:
    """Validate one pytree leaf of a transformed function's argument (``name`` says which, in
    the error); the tracing helpers of ``custom``, ``lax`` and ``remat`` use it too."""
    if isinstance(x, Tracer):
        return x
    return operand(x, name)


def trace_flat(fn: Callable, avals: Sequence[Aval], what: str) -> tuple[Graph, list]:
    """Trace ``fn(*tracers) -> list`` abstractly, one input per aval: (graph, captured outer
    tracers). The graph's inputs are the avals' inputs, then one per captured value; ``what``
    names the function in errors. The common step of custom_vjp's and control flow's tracing."""
    with Trace(abstract=True, what=what) as t:
        tracers = [t.new_input(a) for a in avals]
        out = fn(*tracers)
        leaves = [o if isinstance(o, Tracer) else operand(o, "output") for o in out]
        graph = t.to_graph(leaves)
        return graph, t.captured_values()


def trace_to_graph(fun: Callable, args: Sequence[Any], *, abstract: bool, what: str,
                   leaf_names: Callable[[], list[str]] | None = None):
    """Trace ``fun(*args)``. Returns (graph, captured outer tracers, argument leaves, output
    values, out_tree). ``leaf_names()`` names the argument leaves in errors (made only when
    a leaf is bad; by default each leaf's argument index and pytree path).

    Graph inputs are the argument leaves followed by captured outer tracers.
    """
    return _trace(fun, args, abstract=abstract, what=what, leaf_names=leaf_names)[1:]


def _trace(fun: Callable, args: Sequence[Any], *, abstract: bool, what: str,
           leaf_names: Callable[[], list[str]] | None = None, flat=None):
    """``trace_to_graph`` that also returns the ``Trace`` (first), for ``eager_values``.
    ``flat``: ``(leaves, in_tree)`` of ``tuple(args)``, already validated by the caller."""
    if flat is None:
        leaves, in_tree = tree_flatten(tuple(args))
        leaves = leaf_operands(args, leaves, leaf_names)
    else:
        leaves, in_tree = flat
    with Trace(abstract=abstract, what=what) as t:
        tracers = [t.new_input(x.aval, x.val) if isinstance(x, Tracer) else
                   t.new_input(a, x if type(x) is np.ndarray and x.dtype is a.dtype
                               else np.asarray(x, a.dtype))
                   for x in leaves for a in (aval_of(x),)]
        out = fun(*in_tree.unflatten(tracers))
        out_leaves, out_tree = tree_flatten(out)
        out_leaves = [leaf_operand(o, "output") for o in out_leaves]
        graph = t.to_graph(out_leaves, in_tree, out_tree)
        out_vals = [o.val if isinstance(o, Tracer) and o.trace is t else o for o in out_leaves]
        captured = t.captured_values()
    return t, graph, captured, leaves, out_vals, out_tree


def _plain_leaves(leaves: Sequence[Any]) -> bool:
    """All leaves are already valid operands (tracers, floats, arrays of supported dtypes), so
    ``leaf_operand`` (and the names it needs for error messages) can be skipped."""
    return all(type(x) is Tracer or type(x) is float
               or (type(x) is np.ndarray or type(x) is Array) and x.dtype in dtypes.SUPPORTED
               for x in leaves)


def leaf_operands(args: Sequence[Any], leaves: list,
                  leaf_names: Callable[[], list[str]] | None = None) -> list:
    """Validate the leaves of ``args`` with ``leaf_operand``, each named in errors by
    ``leaf_names()`` (by default: its argument index and pytree path)."""
    if _plain_leaves(leaves):
        return leaves
    names = leaf_names() if leaf_names is not None else argument_leaf_names(args)
    return [leaf_operand(x, n) for x, n in zip(leaves, names)]


def positional_names(fun: Callable) -> list[str]:
    """The names of ``fun``'s positional parameters (for errors; none if it has no signature)."""
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _check_float_leaves(leaves: Sequence[Any], what: str, argnum: int, arg: Any,
                        fun: Callable, holomorphic: bool = False) -> None:
    """Differentiated leaves must be floats or complex (complex only, with ``holomorphic``, as
    JAX); an error names the leaf (``argument 0 at args[0]['w']``)."""
    for k, x in enumerate(leaves):
        d = aval_of(x).dtype
        if holomorphic and not dtypes.is_complex(d):
            name = argument_leaf_names([arg], params=positional_names(fun),
                                       positions=[argnum])[k]
            raise TypeError(f"{what}(holomorphic=True) requires complex inputs, but {name} has "
                            f"dtype {d}; convert it with x.astype(jnp.complex64)")
        if not dtypes.is_inexact(d):
            name = argument_leaf_names([arg], params=positional_names(fun),
                                       positions=[argnum])[k]
            raise TypeError(
                f"{what} requires floating-point inputs, but {name} has "
                f"dtype {d}. Differentiate only with respect to float arguments (choose them "
                f"with argnums=...), or convert with x.astype(jnp.float32).")


def _split_args(args, argnums):
    if type(argnums) is int and 0 <= argnums < len(args):     # the common case
        return True, (argnums,)
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    for a in nums:
        if not -len(args) <= a < len(args):
            raise TypeError(f"argnums {argnums} is out of range for {len(args)} positional "
                            "arguments")
    nums = tuple(a % len(args) for a in nums)
    return single, nums


def describe_fn(fun: Callable) -> str:
    """``name (file:line)`` of a user function, for error messages."""
    code = getattr(fun, "__code__", None)
    name = getattr(fun, "__name__", type(fun).__name__)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code else name


def _partial(fun, args, nums, kwargs):
    def f(*diff):
        full = list(args)
        for i, d in zip(nums, diff):
            full[i] = d
        return fun(*full, **kwargs)
    return f


# ------------------------------------------------------------------ reverse mode
@returns_arrays
def vjp(fun: Callable, *primals: Any, has_aux: bool = False):
    """Evaluate ``fun`` at ``primals`` and return its vector-Jacobian product function, as
    ``jax.vjp`` (reverse mode).

    ``vjp_fn(ct)`` takes a cotangent of the output's structure and shapes and returns a tuple
    with one cotangent per primal: the cotangent times the Jacobian. ``fun`` is traced once;
    every ``vjp_fn`` call reuses that trace.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> out, vjp_fn = jitgraph.vjp(lambda x, y: x * y, jnp.array([1.0, 2.0]), jnp.array([3.0, 4.0]))
    >>> out
    array([3., 8.])
    >>> vjp_fn(jnp.ones(2))
    (array([3., 4.]), array([1., 2.]))

    ```

    :param fun: the function to differentiate; it takes the primals as positional arguments
        (each an array, a Python number or a pytree of them) and returns an array or a pytree.
    :param primals: the point to evaluate at, one value per positional argument of ``fun``.
    :param has_aux: ``fun`` returns a pair ``(out, aux)``; only ``out`` is differentiated and
        ``aux`` is returned as it is.
    :returns: ``(out, vjp_fn)``, or ``(out, vjp_fn, aux)`` with ``has_aux=True``.
    """
    def wrapped(*xs):
        r = fun(*xs)
        if has_aux:
            if not (isinstance(r, tuple) and len(r) == 2):
                raise TypeError("with has_aux=True the function must return a pair (output, aux)")
            return r
        return r, None

    t, graph, captured, in_leaves, out_vals, out_tree = _trace(
        wrapped, primals, abstract=False, what="vjp")
    n_in = len(in_leaves)
    out_treedef = out_tree.node[2][0]   # tuple(out, aux)
    n_out = _count_leaves(out_treedef)
    main_td = TreeDef(out_treedef, n_out)
    aux_td = TreeDef(out_tree.node[2][1], out_tree.num_leaves - n_out)
    call_args = list(in_leaves) + captured
    values = eager_values(t, graph, call_args)
    if values is not None:
        outs = [values[v] for v in graph.outputs]
    elif any(isinstance(a, Tracer) for a in call_args) or any(v is None for v in out_vals):
        outs = eval_graph(graph, call_args)
    else:
        outs = [np.asarray(v) for v in out_vals]
    out = main_td.unflatten(outs[:n_out])
    aux = aux_td.unflatten(outs[n_out:])
    in_tree = tree_flatten(tuple(primals))[1]
    cache: dict = {}

    @returns_arrays
    def vjp_fn(ct):
        ct_leaves, ct_tree = tree_flatten(ct)
        if ct_tree != main_td:
            raise TypeError(f"vjp_fn: cotangent structure {ct_tree} does not match the output "
                            f"structure {main_td}")
        for c, o in zip(ct_leaves, outs[:n_out]):
            c_shape, o_shape = aval_of(operand(c, "cotangent")).shape, aval_of(o).shape
            if c_shape != o_shape:
                raise ValueError(f"vjp_fn: cotangent shape {c_shape} does not match output "
                                 f"shape {o_shape}")
        ct_leaves = [jnp.astype(c, aval_of(o).dtype) if dtypes.is_inexact(aval_of(o).dtype) else c
                     for c, o in zip(ct_leaves, outs[:n_out])]
        g_main = Graph(graph.inputs, graph.nodes, graph.outputs[:n_out], graph.consts)
        if values is not None:
            key = cache.get("key")
            if key is None:   # the same structure for every cotangent of this vjp_fn
                key = cache["key"] = structure_key(g_main, range(n_in), ct_leaves)
            grads = eager_vjp(g_main, values, range(n_in), ct_leaves, key)
        else:
            g2 = cache.get("g")
            if g2 is None:   # built once, reused per call
                g2 = cache["g"] = optimize(build_vjp(g_main, list(range(n_in))))
            grads = eval_graph(g2, call_args + list(ct_leaves))
        return tuple(in_tree.unflatten(grads))

    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _count_leaves(node) -> int:
    if node == "*":
        return 1
    return sum(_count_leaves(c) for c in node[2])


def _trace_scalar(fun: Callable, args: tuple, kwargs: dict, argnums, has_aux: bool,
                  holomorphic: bool = False):
    """Validate the differentiated arguments and trace ``fun`` on them (with their values),
    for ``value_and_grad`` and ``hessian_vector_product``: returns (single, in_tree, trace,
    graph, captured outer tracers, argument leaves, out_tree); the graph's outputs are
    ``fun``'s scalar output, then aux's leaves."""
    single, nums = _split_args(args, argnums)
    diff = [args[i] for i in nums]
    leaves, in_tree = tree_flatten(tuple(diff))
    for i, d in zip(nums, diff):
        # an argument with no arrays (an empty list, a pytree of nothing) gets an empty
        # gradient of the same structure, as autograd returns; a bare None is a mistake
        if d is None:
            raise TypeError(f"grad: argument {i} is None, which has no arrays to "
                            "differentiate; pass an array, a scalar or a pytree of them, "
                            "or choose other arguments with argnums=...")
    plain = _plain_leaves(leaves)
    names = None if plain else argument_leaf_names(diff, params=positional_names(fun),
                                                   positions=nums)
    pos = 0
    for i, d, node in zip(nums, diff, in_tree.node[2]):
        n = _count_leaves(node)
        if not plain:
            leaves[pos:pos + n] = [leaf_operand(x, names[k])
                                   for k, x in enumerate(leaves[pos:pos + n], pos)]
        _check_float_leaves(leaves[pos:pos + n], "grad", i, d, fun, holomorphic)
        pos += n
    f = _partial(fun, args, nums, kwargs)

    def scalar_f(*xs):
        r = f(*xs)
        if has_aux and not (isinstance(r, tuple) and len(r) == 2):
            raise TypeError("with has_aux=True the function must return a pair (output, aux)")
        out, aux = (r if has_aux else (r, None))
        if isinstance(out, (list, tuple, dict)):
            raise TypeError("grad requires a function with a scalar output, got a "
                            f"{type(out).__name__} from {describe_fn(fun)}; use jacrev or "
                            "vjp for vector outputs (or has_aux=True for (loss, aux))")
        a = aval_of(operand(out, "output"))
        if a.shape != ():
            raise TypeError(f"grad requires a scalar output, got shape {a.shape} from "
                            f"{describe_fn(fun)}; reduce "
                            "it (e.g. .sum() or .mean()), or use jacrev / vjp")
        if dtypes.is_complex(a.dtype) and not holomorphic:
            raise TypeError(f"grad requires a real-valued output, got {a.dtype} from "
                            f"{describe_fn(fun)}; for a holomorphic function pass "
                            "holomorphic=True, else differentiate jnp.real or jnp.abs of it")
        if not dtypes.is_inexact(a.dtype):
            raise TypeError(f"grad requires a float output, got {a.dtype} from "
                            f"{describe_fn(fun)}")
        if holomorphic and not dtypes.is_complex(a.dtype):
            raise TypeError(f"grad(holomorphic=True) requires a complex output, got {a.dtype} "
                            f"from {describe_fn(fun)}")
        return out, aux

    t, graph, captured, leaves, _, out_tree = _trace(
        scalar_f, diff, abstract=False, what="grad", flat=(leaves, in_tree))
    return single, in_tree, t, graph, captured, leaves, out_tree


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                   holomorphic: bool = False):
    """A function returning both the value of the scalar function ``fun`` and its gradient,
    as ``jax.value_and_grad``: one trace, one forward and one backward pass.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> jitgraph.value_and_grad(lambda x: jnp.sum(x ** 2))(jnp.arange(3.0))
    (array(5.), array([0., 2., 4.]))
    >>> jitgraph.value_and_grad(lambda x: (x ** 2, {"x": x}), has_aux=True)(3.0)
    ((array(9.), {'x': array(3.)}), array(6.))

    ```

    :param fun: a function returning a scalar (a 0-d float array or a Python float); the
        arguments it is differentiated with respect to are float arrays, Python floats or pytrees
        of them. Keyword arguments are passed through, not differentiated.
    :param argnums: the positional argument to differentiate with respect to, or a sequence of
        them (then the gradient is a tuple with one entry per argument).
    :param has_aux: ``fun`` returns a pair ``(value, aux)``; ``aux`` (any pytree) is returned
        beside the value and not differentiated.
    :param holomorphic: ``fun`` is holomorphic with complex inputs and output: the gradient is
        its complex derivative ``f'(z)``, as ``jax.grad(..., holomorphic=True)``. Without it, a
        complex input of a real-valued ``fun`` gets JAX's gradient ``df/dx - i df/dy``
        (``z = x + iy``: the conjugate of the direction of steepest ascent).
    :returns: a function with ``fun``'s arguments returning ``(value, grad)``, or
        ``((value, aux), grad)`` with ``has_aux=True``; ``grad`` has the structure and shapes of
        the differentiated argument(s).
    """
    @functools.wraps(fun)
    @returns_arrays
    def vg(*args, **kwargs):
        single, in_tree, t, graph, captured, leaves, out_tree = _trace_scalar(
            fun, args, kwargs, argnums, has_aux, holomorphic)
        n_in = len(leaves)
        ct = [np.array(1, graph.outputs[0].aval.dtype)] + [None] * (len(graph.outputs) - 1)
        values = eager_values(t, graph, list(leaves) + captured)
        if values is not None:
            res = [values[v] for v in graph.outputs] + eager_vjp(
                graph, values, range(n_in), ct, seeded=True)
        else:
            g2 = optimize(build_vjp(graph, list(range(n_in)), ct_values=ct, keep_outputs=True))
            res = eval_graph(g2, list(leaves) + captured)
        n_out = len(graph.outputs)
        outs, grads = res[:n_out], res[n_out:]
        value, aux = out_tree.unflatten(outs)
        g = in_tree.unflatten(grads)
        g = g[0] if single else tuple(g)
        return ((value, aux), g) if has_aux else (value, g)
    return vg


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
         holomorphic: bool = False):
    """The gradient of the scalar function ``fun``, as ``jax.grad`` (reverse mode).

    ``grad(f)`` is a function with ``f``'s arguments that returns the derivative of ``f``'s
    output with respect to ``f``'s first positional argument (or those ``argnums`` names). It
    composes with every other transformation: ``jit(grad(f))`` compiles the backward pass,
    ``grad(grad(f))`` is the second derivative, ``vmap(grad(f))`` gives per-example gradients.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> jitgraph.grad(lambda x: jnp.sum(x ** 2))(jnp.arange(3.0))
    array([0., 2., 4.])
    >>> def loss(w, b, x):
    ...     return jnp.sum((x * w + b) ** 2)
    >>> jitgraph.grad(loss, argnums=(0, 1))(2.0, 1.0, jnp.array([1.0, 2.0]))
    (array(26.), array(16.))
    >>> jitgraph.grad(jitgraph.grad(lambda x: x ** 3))(2.0)
    array(12.)

    ```

    :param fun: a function returning a scalar (a 0-d float array or a Python float); the
        arguments it is differentiated with respect to are float arrays, Python floats or pytrees
        of them (dicts of parameters, lists of layers). Keyword arguments are passed through,
        not differentiated.
    :param argnums: the positional argument to differentiate with respect to (default the
        first), or a sequence of them (then the gradient is a tuple, one entry per argument).
    :param has_aux: ``fun`` returns a pair ``(value, aux)``; the gradient is of ``value``, and
        ``aux`` (any pytree: metrics, predictions) is returned beside it.
    :param holomorphic: ``fun`` is holomorphic with complex inputs and output: the gradient is
        its complex derivative ``f'(z)``, as ``jax.grad(..., holomorphic=True)``. Without it, a
        complex input of a real-valued ``fun`` gets JAX's gradient ``df/dx - i df/dy``
        (``z = x + iy``: the conjugate of the direction of steepest ascent).
    :returns: a function with ``fun``'s arguments returning the gradient, with the structure and
        shapes of the differentiated argument(s); ``(grad, aux)`` with ``has_aux=True``.
    :raises TypeError: when ``fun``'s output is not a scalar, or a differentiated argument is
        not a float array or pytree of them.
    """
    vg = value_and_grad(fun, argnums, has_aux, holomorphic)

    @functools.wraps(fun)
    @api_boundary
    def g(*args, **kwargs):
        (v, g_) = vg(*args, **kwargs)
        return (g_, v[1]) if has_aux else g_
    return g


# ------------------------------------------------------------------ forward mode
def _linearize(fun: Callable, primals: Sequence[Any]):
    """Trace once; return (outputs, out_tree, jvp_fn(tangent leaves) -> tangent leaves)."""
    graph, captured, leaves, out_vals, out_tree = trace_to_graph(
        fun, primals, abstract=False, what="jvp")
    n_in = len(leaves)
    g2 = optimize(build_jvp(graph, list(range(n_in))))
    call_args = list(leaves) + captured
    n_out = len(graph.outputs)

    def jvp_leaves(tangents: Sequence[Any]) -> list:
        res = eval_graph(g2, call_args + [jnp.astype(t, aval_of(x).dtype) if dtypes.is_inexact(aval_of(x).dtype) else t
                                     for t, x in zip(tangents, leaves)])
        return res
    return leaves, n_out, out_tree, jvp_leaves


@returns_arrays
def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False):
    """Evaluate ``fun`` at ``primals`` and its Jacobian-vector product with ``tangents``, as
    ``jax.jvp`` (forward mode).

    Example:

    ```pycon
    >>> import jitgraph
    >>> jitgraph.jvp(lambda x: x ** 3, (2.0,), (1.0,))
    (array(8.), array(12.))

    ```

    :param fun: the function to differentiate, of positional arguments (arrays, Python numbers
        or pytrees of them).
    :param primals: a tuple or list with one value per positional argument of ``fun``.
    :param tangents: a tuple or list of the same structure and shapes as ``primals``: the
        direction to differentiate in.
    :param has_aux: ``fun`` returns a pair ``(out, aux)``; only ``out`` is differentiated.
    :returns: ``(primals_out, tangents_out)``: ``fun(*primals)`` and the Jacobian of ``fun`` at
        ``primals`` times ``tangents``, of the output's structure; ``(primals_out,
        tangents_out, aux)`` with ``has_aux=True``.
    :raises TypeError: when ``primals`` and ``tangents`` are not tuples of the same structure.
    :raises ValueError: when a tangent's shape differs from its primal's.
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp: primals and tangents must be tuples (one entry per argument)")
    p_leaves, p_tree = tree_flatten(tuple(primals))
    t_leaves, t_tree = tree_flatten(tuple(tangents))
    if p_tree != t_tree:
        raise TypeError(f"jvp: tangent structure {t_tree} does not match primal structure {p_tree}")
    for p, t in zip(p_leaves, t_leaves):
        ps, ts = aval_of(operand(p)).shape, aval_of(operand(t)).shape
        if ps != ts:
            raise ValueError(f"jvp: tangent shape {ts} does not match primal shape {ps}")
    f = _with_aux(fun, "jvp") if has_aux else fun
    leaves, n_out, out_tree, jvp_leaves = _linearize(f, primals)
    res = jvp_leaves(t_leaves)
    if not has_aux:
        return out_tree.unflatten(res[:n_out]), out_tree.unflatten(res[n_out:])
    main_td, aux_td, n_main = _split_aux_tree(out_tree)
    return (main_td.unflatten(res[:n_main]), main_td.unflatten(res[n_out:n_out + n_main]),
            aux_td.unflatten(res[n_main:n_out]))


def _with_aux(fun: Callable, what: str) -> Callable:
    def f(*xs):
        r = fun(*xs)
        if not (isinstance(r, tuple) and len(r) == 2):
            raise TypeError(f"{what}: with has_aux=True the function must return a pair "
                            f"(output, aux), got {type(r).__name__} from {describe_fn(fun)}")
        return r
    return f


def _split_aux_tree(out_tree):
    """The structures of ``out`` and ``aux`` in an ``(out, aux)`` output, and ``out``'s leaf count."""
    main, aux = out_tree.node[2]
    n_main = _count_leaves(main)
    return TreeDef(main, n_main), TreeDef(aux, out_tree.num_leaves - n_main), n_main


@returns_arrays
def linearize(fun: Callable, *primals: Any):
    """Evaluate ``fun`` at ``primals`` and return its Jacobian-vector product as a function,
    as ``jax.linearize``: ``fun`` is traced once, and each ``f_jvp(*tangents)`` call only
    evaluates the forward-mode graph.

    Example:

    ```pycon
    >>> import jitgraph
    >>> y, f_jvp = jitgraph.linearize(lambda x: x ** 3, 2.0)
    >>> y, f_jvp(1.0), f_jvp(2.0)
    (array(8.), array(12.), array(24.))

    ```

    :param fun: the function to differentiate, of positional arguments.
    :param primals: the point to linearize at, one value per positional argument of ``fun``.
    :returns: ``(primals_out, f_jvp)``; ``f_jvp`` takes one tangent per primal (same
        structure and shapes) and returns the output's tangent.
    """
    leaves, n_out, out_tree, jvp_leaves = _linearize(fun, primals)
    p_tree = tree_flatten(tuple(primals))[1]
    out = out_tree.unflatten(jvp_leaves([np.zeros(aval_of(x).shape, aval_of(x).dtype)
                                         for x in leaves])[:n_out])

    @returns_arrays
    def f_jvp(*tangents):
        t_leaves, t_tree = tree_flatten(tuple(tangents))
        if t_tree != p_tree:
            raise TypeError(f"linearize: tangent structure {t_tree} does not match primal "
                            f"structure {p_tree}")
        for p, t in zip(leaves, t_leaves):
            if aval_of(operand(t)).shape != aval_of(p).shape:
                raise ValueError(f"linearize: tangent shape {aval_of(operand(t)).shape} "
                                 f"does not match primal shape {aval_of(p).shape}")
        return out_tree.unflatten(jvp_leaves(t_leaves)[n_out:])
    return out, f_jvp


# ------------------------------------------------------------------ Jacobians
def _basis(aval, k: int):
    e = np.zeros(aval.size, aval.dtype)
    e[k] = 1
    return e.reshape(aval.shape)


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0):
    """The Jacobian of ``fun`` by reverse mode (one VJP per output element), as
    ``jax.jacrev``; ``jitgraph.jacobian`` is the same function. Better than ``jacfwd`` when the
    output is smaller than the input.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> jitgraph.jacrev(lambda x: x ** 2)(jnp.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])

    ```

    :param fun: the function to differentiate; its outputs and differentiated arguments are
        float arrays or pytrees of them.
    :param argnums: the positional argument to differentiate with respect to, or a sequence of
        them (then each Jacobian is a tuple, one entry per argument).
    :returns: a function with ``fun``'s arguments returning the Jacobian: for an output of shape
        ``out.shape`` and an input of shape ``in.shape``, an array of shape
        ``out.shape + in.shape`` (for pytree outputs, a pytree of such arrays).
    """
    @api_boundary
    def jac(*args, **kwargs):
        single, nums = _split_args(args, argnums)
        f = _partial(fun, args, nums, kwargs)
        diff = [args[i] for i in nums]
        out, vjp_fn = vjp(f, *diff)
        out_leaves, out_tree = tree_flatten(out)
        in_leaves, in_tree = tree_flatten(tuple(diff))
        per_out = []
        for k, o in enumerate(out_leaves):
            oa = aval_of(o)
            rows = []
            for e in range(oa.size):
                ct = [np.zeros(aval_of(x).shape, aval_of(x).dtype) for x in out_leaves]
                ct[k] = _basis(oa, e)
                rows.append(tree_flatten(vjp_fn(out_tree.unflatten(ct)))[0])
            jl = []
            for j, x in enumerate(in_leaves):
                xa = aval_of(x)
                if oa.size == 0:
                    jl.append(np.zeros(oa.shape + xa.shape, xa.dtype))
                    continue
                jl.append(jnp.reshape(jnp.stack([r[j] for r in rows]), oa.shape + xa.shape))
            per_out.append(in_tree.unflatten(jl))
        per_out = [p[0] if single else tuple(p) for p in per_out]
        return out_tree.unflatten(per_out)
    return jac


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0):
    """The Jacobian of ``fun`` by forward mode (one JVP per input element), as
    ``jax.jacfwd``. Better than ``jacrev`` when the input is smaller than the output.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> jitgraph.jacfwd(lambda x: jnp.stack([x[0] * x[1], x[0]]))(jnp.array([2.0, 3.0]))
    array([[3., 2.],
           [1., 0.]])

    ```

    :param fun: the function to differentiate; its outputs and differentiated arguments are
        float arrays or pytrees of them.
    :param argnums: the positional argument to differentiate with respect to, or a sequence of
        them (then each Jacobian is a tuple, one entry per argument).
    :returns: a function with ``fun``'s arguments returning the Jacobian, of shape
        ``out.shape + in.shape`` for each output and input.
    """
    @api_boundary
    def jac(*args, **kwargs):
        single, nums = _split_args(args, argnums)
        f = _partial(fun, args, nums, kwargs)
        diff = [args[i] for i in nums]
        leaves, n_out, out_tree, jvp_leaves = _linearize(f, diff)
        in_tree = tree_flatten(tuple(diff))[1]
        cols_per_in = []
        for j, x in enumerate(leaves):
            xa = aval_of(x)
            cols = []
            for e in range(xa.size):
                ts = [np.zeros(aval_of(l).shape, aval_of(l).dtype) for l in leaves]
                ts[j] = _basis(xa, e)
                cols.append(jvp_leaves(ts)[n_out:])
            cols_per_in.append(cols)
        outs0 = jvp_leaves([np.zeros(aval_of(l).shape, aval_of(l).dtype) for l in leaves])[:n_out]
        per_out = []
        for k in range(n_out):
            oa = aval_of(outs0[k])
            jl = []
            for j, x in enumerate(leaves):
                xa = aval_of(x)
                if xa.size == 0:
                    jl.append(np.zeros(oa.shape + xa.shape, oa.dtype))
                    continue
                st = jnp.stack([c[k] for c in cols_per_in[j]])          # (in.size, *out.shape)
                st = jnp.reshape(st, (xa.size, oa.size))
                jl.append(jnp.reshape(jnp.transpose(st), oa.shape + xa.shape))
            t = in_tree.unflatten(jl)
            per_out.append(t[0] if single else tuple(t))
        return out_tree.unflatten(per_out)
    return jac


jacobian = jacrev


def hessian(fun: Callable, argnums: int | Sequence[int] = 0):
    """The Hessian (matrix of second derivatives) of the scalar function ``fun``, forward over
    reverse (``jacfwd(jacrev(fun))``), as ``jax.hessian``.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> jitgraph.hessian(lambda x: jnp.sum(x ** 3))(jnp.array([1.0, 2.0]))
    array([[ 6.,  0.],
           [ 0., 12.]])

    ```

    :param fun: a function returning a scalar.
    :param argnums: the positional argument to differentiate with respect to, or a sequence of
        them.
    :returns: a function with ``fun``'s arguments returning the Hessian, of shape
        ``in.shape + in.shape``. To multiply it by a vector without forming it, use
        ``hessian_vector_product``.
    """
    return jacfwd(jacrev(fun, argnums), argnums)


def hessian_vector_product(fun: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """A function ``hvp(*args, vector, **kwargs)``: the Hessian of the scalar ``fun`` at
    ``args`` (with respect to ``args[argnums]``) times ``vector``, without forming the Hessian;
    autograd's ``hessian_vector_product`` (``argnums`` for its ``argnum``), e.g. for scipy's
    Newton-CG ``hessp``.

    It is reverse over reverse: the gradient of ``<grad(fun)(*args), vector>``. Un-jitted on
    arrays, from the second call with a structure on, a call traces ``fun`` once and runs one
    cached graph.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> hvp = jitgraph.hessian_vector_product(lambda x: jnp.sum(x ** 3))
    >>> hvp(jnp.array([1.0, 2.0]), jnp.array([1.0, 1.0]))
    array([ 6., 12.])

    ```

    :param fun: a function returning a scalar.
    :param argnums: the positional argument the Hessian is taken with respect to, or a sequence
        of them (then ``vector`` is a tuple with one entry per argument).
    :returns: ``hvp(*args, vector, **kwargs)``: ``fun``'s arguments, then ``vector`` (of the
        differentiated arguments' structure and shapes); it returns an array (or pytree) of
        ``vector``'s structure.
    """
    inner = grad(fun, argnums)

    def dot_grad(*args, **kwargs):
        *xs, vector = args
        gs, g_tree = tree_flatten(inner(*xs, **kwargs))
        return vdot_leaves(gs, _vector_leaves(vector, g_tree, gs))

    @functools.wraps(fun)
    @api_boundary
    def hvp(*args, **kwargs):
        if not args:
            raise TypeError("hessian_vector_product: call it as hvp(*args, vector)")
        *xs, vector = args
        if not _any_tracer(args) and not _any_tracer(kwargs):
            single, in_tree, t, graph, captured, leaves, _ = _trace_scalar(
                fun, tuple(xs), kwargs, argnums, False)
            if t.concrete and not captured:
                vs = _vector_leaves((vector,) if single else vector, in_tree, leaves)
                vs = [np.asarray(v, aval_of(x).dtype) for v, x in zip(vs, leaves)]
                res = eager_hvp(graph, t.values, range(len(leaves)), vs)
                if res is not None:
                    h = in_tree.unflatten(res)
                    return h[0] if single else tuple(h)
        nums = _split_args(tuple(xs), argnums)[1]
        return grad(dot_grad, nums[0] if isinstance(argnums, int) else nums)(*args, **kwargs)
    del hvp.__wrapped__     # fun's name and docstring, not its signature: hvp takes the vector too
    return hvp


def _any_tracer(tree) -> bool:
    return any(isinstance(x, Tracer) for x in tree_flatten(tree)[0])


def _vector_leaves(vector, tree, like: Sequence[Any]) -> list:
    """``vector``'s leaves, checked against the structure and shapes of ``like``."""
    vs, v_tree = tree_flatten(vector)
    if v_tree != tree:
        raise TypeError(f"hessian_vector_product: the vector's structure {v_tree} does not "
                        f"match the differentiated arguments' {tree}")
    for v, x in zip(vs, like):
        if aval_of(operand(v, "vector")).shape != aval_of(x).shape:
            raise ValueError(f"hessian_vector_product: vector shape "
                             f"{aval_of(operand(v)).shape} does not match the "
                             f"argument's shape {aval_of(x).shape}")
    return vs


# ------------------------------------------------------------------ inspection
def make_graph(fun: Callable, static_argnums: int | Sequence[int] = ()):
    """A function returning the optimized ``Graph`` that ``fun`` traces to at its arguments'
    shapes and dtypes, as ``jax.make_jaxpr``: what ``jit`` compiles, printed as text.

    The arguments' values are not used; only their shapes and dtypes (and the static
    arguments' values) are.

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> print(jitgraph.make_graph(lambda x: jnp.sin(x) * 2.0)(np.zeros(3)))
    { lambda  ; a:f64[3]. let
        b:f64[3] = sin a
        c:f64[3] = mul b 2.0
      in (c,) }

    ```

    :param fun: the function to trace.
    :param static_argnums: positional arguments that are not traced: ``fun`` sees their Python
        values (flags, sizes, callables).
    :returns: a function with ``fun``'s arguments returning a ``jitgraph.Graph``; ``print`` it,
        or ``graph.to_dot()`` for Graphviz.
    :raises TypeError: when called inside another transformation on values that one traces.
    """
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    @api_boundary
    def mk(*args, **kwargs):
        dyn_idx = [i for i in range(len(args)) if i not in statics]

        def f(*dyn):
            full = list(args)
            for i, d in zip(dyn_idx, dyn):
                full[i] = d
            return fun(*full, **kwargs)
        graph, captured, *_ = trace_to_graph(f, [args[i] for i in dyn_idx], abstract=True,
                                             what="make_graph")
        if captured:
            raise TypeError("make_graph: the function closes over traced values of an "
                            "enclosing transformation; call make_graph outside it")
        return optimize(graph)
    return mk
