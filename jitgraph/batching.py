"""``vmap``: batching by graph rewriting, and the helpers every primitive's batching rule uses.

``vmap(f)`` traces ``f`` once on one example's shapes into a graph, then replays that graph
node by node on the batched arguments, calling each primitive's batching rule
(``Primitive.batch``) where an operand carries a batch axis and the primitive itself where none
does. Rules are written with primitives, so the replay records into whatever trace encloses
the call: under ``jit`` the batched program is one graph (one compiled program, no loop of
calls), under ``grad`` it is differentiated like any other code, and outside any
transformation it runs on arrays. That is what lets ``vmap`` compose with the other
transforms, and with itself, in any order.

A rule has the form ``rule(args, dims, **params) -> (out, out_dim)``: ``dims[i]`` is the batch
axis of ``args[i]`` (a non-negative int) or None for an operand that is the same for every
example; ``out_dim`` says where the result's batch axis is (None: unbatched). Rules of
``multiple_results`` primitives return ``(outs, out_dims)``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from .core import PRIMITIVES, Aval, Graph, Trace, Tracer, aval_of, bind
from .dtypes import concrete_operand
from .errors import user_frame, where
from .passes import optimize
from .tree import key_paths, registered_flatten, returns_arrays, sorted_keys, tree_flatten


# ------------------------------------------------------------------ helpers for the rules
def _prim(name: str):
    return PRIMITIVES[name]


def batch_size(args: Sequence[Any], dims: Sequence[int | None]) -> int:
    """The batch size: the length of the batch axis of the first batched operand."""
    for x, d in zip(args, dims):
        if d is not None:
            return aval_of(x).shape[d]
    raise ValueError("batch_size: no operand is batched")


def reshape(x, shape: Sequence[int]):
    shape = tuple(int(s) for s in shape)
    return x if aval_of(x).shape == shape else bind(_prim("reshape"), x, shape=shape)


def permute(x, perm: Sequence[int]):
    """``transpose(x, perm)``, or a reshape when the permutation only moves size-1 axes (the
    elements keep their order: no copy, and nothing for fusion to index around)."""
    a = aval_of(x)
    perm = tuple(perm)
    if perm == tuple(range(a.ndim)):
        return x
    if [p for p in perm if a.shape[p] != 1] == [i for i in range(a.ndim) if a.shape[i] != 1]:
        return reshape(x, tuple(a.shape[p] for p in perm))
    return bind(_prim("transpose"), x, perm=perm)


def move_batch_axis(x, dim: int, to: int):
    """``x`` with its axis ``dim`` moved to position ``to`` (a transpose; none if equal)."""
    if dim == to:
        return x
    perm = [i for i in range(aval_of(x).ndim) if i != dim]
    perm.insert(to, dim)
    return permute(x, perm)


def broadcast_batch(x, size: int, to: int = 0):
    """An unbatched operand, repeated ``size`` times along a new axis ``to``."""
    a = aval_of(x)
    out = bind(_prim("broadcast_to"), x, shape=(size,) + a.shape)
    return move_batch_axis(out, 0, to)


def bdim_to_front(x, dim: int | None, size: int | None = None):
    """``x`` with its batch axis first; an unbatched ``x`` is broadcast (needs ``size``)."""
    if dim is None:
        return broadcast_batch(x, size)
    return move_batch_axis(x, dim, 0)


def all_to_front(args: Sequence[Any], dims: Sequence[int | None]) -> list:
    """Every operand with its batch axis first, unbatched ones broadcast."""
    size = batch_size(args, dims)
    return [bdim_to_front(x, d, size) for x, d in zip(args, dims)]


def shift_axis(axis: int, dim: int) -> int:
    """Where one example's ``axis`` is in the batched array whose batch axis is ``dim``."""
    return axis + 1 if axis >= dim else axis


def align_front(args: Sequence[Any], dims: Sequence[int | None]) -> list:
    """Operands of a broadcasting op with every batch axis first: a batched operand of lower
    rank than the others gets size-1 axes after its batch axis, so that trailing axes align
    as NumPy broadcasts them; unbatched operands are left alone (they broadcast)."""
    ranks = [aval_of(x).ndim - (d is not None) for x, d in zip(args, dims)]
    r = max(ranks)
    res = []
    for x, d, rk in zip(args, dims, ranks):
        if d is not None:
            x = move_batch_axis(x, d, 0)
            s = aval_of(x).shape
            x = reshape(x, s[:1] + (1,) * (r - rk) + s[1:])
        res.append(x)
    return res


def align_elementwise(args: Sequence[Any], dims: Sequence[int | None]) -> tuple[list, int]:
    """Operands of a broadcasting elementwise op rearranged so that their batch axes line up
    under NumPy broadcasting. Returns ``(operands, out_dim)``.

    When every batched operand has the result's rank and the same batch axis, the batch axis
    stays where it is (no transpose, which fuses better) and unbatched operands get a size-1
    axis there; otherwise batch axes move to the front (``align_front``)."""
    ranks = [aval_of(x).ndim - (d is not None) for x, d in zip(args, dims)]
    r = max(ranks)
    bdims = {d for d in dims if d is not None}
    if len(bdims) != 1 or any(rk != r for rk, d in zip(ranks, dims) if d is not None):
        return align_front(args, dims), 0
    out_dim = bdims.pop()
    res = []
    for x, d, rk in zip(args, dims, ranks):
        if d is None and rk and out_dim:   # a size-1 axis where the others have the batch axis
            padded = (1,) * (r - rk) + aval_of(x).shape
            x = reshape(x, padded[:out_dim] + (1,) + padded[out_dim:])
        res.append(x)
    return res, out_dim


def batch_iota(size: int, rank: int) -> np.ndarray:
    """``arange(size)`` shaped (size, 1, ..., 1) with ``rank`` trailing 1s: the index of each
    example along a batch axis, for gathers and scatters whose indices are batched."""
    return np.arange(size, dtype=np.int64).reshape((size,) + (1,) * rank)


def elementwise_rule(prim) -> Callable:
    """The batching rule shared by every elementwise primitive (unary: nothing moves)."""
    def rule(args, dims, **params):
        if len(args) == 1:
            return bind(prim, args[0], **params), dims[0]
        xs, d = align_elementwise(args, dims)
        return bind(prim, *xs, **params), d
    return rule


def reduce_rule(prim) -> Callable:
    """Batching rule of a reduction over ``axes``: the batch axis stays, the axes shift."""
    def rule(args, dims, *, axes):
        d = dims[0]
        new = tuple(shift_axis(a, d) for a in axes)
        return bind(prim, args[0], axes=new), d - sum(1 for a in new if a < d)
    return rule


def arg_reduce_rule(prim) -> Callable:
    """Batching rule of argmax/argmin over one ``axis``."""
    def rule(args, dims, *, axis):
        d = dims[0]
        a = shift_axis(axis, d)
        return bind(prim, args[0], axis=a), d - (a < d)
    return rule


def leading_batch_rule(prim) -> Callable:
    """Batching rule of an op that accepts leading batch dimensions (linear algebra): every
    operand's batch axis moves to the front (unbatched ones are broadcast when another
    operand is batched, as the op needs equal batch dimensions)."""
    def rule(args, dims, **params):
        xs = all_to_front(args, dims) if len(args) > 1 else [move_batch_axis(args[0], dims[0], 0)]
        out = bind(prim, *xs, **params)
        return (out, [0] * len(out)) if prim.multiple_results else (out, 0)
    return rule


# ------------------------------------------------------------------ the graph rewrite
def _node_where(node) -> str:
    if node.source is not None:
        return "node created at %s:%s" % node.source[:2]
    return f"batched at {where(user_frame(3))}"


def batch_eval(graph: Graph, args: Sequence[Any], dims: Sequence[int | None]) -> tuple[list, list]:
    """Evaluate ``graph`` on batched ``args`` (batch axis ``dims[i]`` or None) with each
    primitive's batching rule. Returns ``(outs, out_dims)``; operands are arrays or tracers,
    so this runs eagerly or records into the enclosing trace."""
    env: dict = {v: (c, None) for v, c in graph.consts.items()}
    env.update((v, (a, d)) for v, a, d in zip(graph.inputs, args, dims))
    for n in graph.nodes:
        xs = [env[v][0] for v in n.inputs]
        ds = [env[v][1] for v in n.inputs]
        if all(d is None for d in ds):
            outs = bind(n.prim, *xs, **n.params)
            ods = [None] * len(n.outs) if n.prim.multiple_results else None
        else:
            if n.prim.batch is None:
                raise NotImplementedError(
                    f"{n.prim.name} has no batching rule, so vmap cannot batch it "
                    f"({_node_where(n)}); give the primitive one (prim.batch = rule)")
            outs, ods = n.prim.batch(xs, ds, **n.params)
        if not n.prim.multiple_results:
            outs, ods = (outs,), (ods,)
        for v, o, d in zip(n.outs, outs, ods):
            env[v] = (o, d)
    res = [env[v] for v in graph.outputs]
    return [o for o, _ in res], [d for _, d in res]


def batched_aval(aval: Aval, dim: int | None, size: int) -> Aval:
    if dim is None:
        return aval
    shape = list(aval.shape)
    shape.insert(dim, size)
    return Aval(tuple(shape), aval.dtype, aval.weak)


def batch_graph(graph: Graph, dims: Sequence[int | None], size: int,
                out_sum: Sequence[bool] | None = None) -> Graph:
    """A graph computing ``graph`` for a batch: inputs batched at ``dims`` (None: unbatched),
    every output batched at axis 0, except outputs marked in ``out_sum``, which are summed
    over the batch (a cotangent for an unbatched input). Used by rules of primitives that
    hold graphs (custom_vjp calls)."""
    with Trace(abstract=True, what="vmap") as t:
        ins = [t.new_input(batched_aval(v.aval, d, size)) for v, d in zip(graph.inputs, dims)]
        outs, ods = batch_eval(graph, ins, dims)
        res = []
        for k, (o, d) in enumerate(zip(outs, ods)):
            if out_sum is not None and out_sum[k]:
                o = o * size if d is None else bind(_prim("reduce_sum"), o, axes=(d,))
            else:
                o = bdim_to_front(o, d, size)
            res.append(o)
        g = t.to_graph(res)
    return optimize(g)


# ------------------------------------------------------------------ in_axes / out_axes
def _is_axis(spec) -> bool:
    return spec is None or (isinstance(spec, (int, np.integer)) and not isinstance(spec, bool))


def _children(tree):
    """(kind, keys, children) of a pytree node, or None for a leaf."""
    t = type(tree)
    flatten = registered_flatten(t)      # the registry first, as tree_flatten
    if flatten is not None:
        children, aux = flatten(tree)
        return (t, aux, list(children))
    if t is tuple or t is list or (isinstance(tree, tuple) and hasattr(tree, "_fields")):
        return (t, len(tree), list(tree))
    if t is dict:
        keys = sorted_keys(tree)
        return (t, keys, [tree[k] for k in keys])
    return None


def prefix_axes(spec, tree, what: str) -> list:
    """One axis per leaf of ``tree``: ``spec`` is a tree prefix of ``tree`` whose leaves are
    ints or None (an int or None stands for a whole sub-tree), as JAX's in_axes/out_axes."""
    if _is_axis(spec):
        return [None if spec is None else int(spec)] * len(tree_flatten(tree)[0])
    sk, tk = _children(spec), _children(tree)
    if sk is None or tk is None or sk[0] is not tk[0] and not (
            {sk[0], tk[0]} <= {tuple, list}) or sk[1] != tk[1]:
        raise ValueError(
            f"vmap {what} specification must be a tree prefix of the corresponding value, got "
            f"specification {spec!r} for value tree {tree_flatten(tree)[1]}")
    out = []
    for s, c in zip(sk[2], tk[2]):
        out += prefix_axes(s, c, what)
    return out


def _check_spec(spec, what: str) -> None:
    if _is_axis(spec):
        return
    k = _children(spec)
    if k is None:
        raise TypeError(f"vmap {what} must be an int, None, or a (nested) tuple/list/dict of "
                        f"them, got {spec!r}")
    for c in k[2]:
        _check_spec(c, what)


def _leaf_names(args, kwargs) -> list[str]:
    """Leaf names in vmap's errors, as JAX's: ``arg 0``, or ``args[0]['w']`` inside a pytree."""
    names = []
    for i, a in enumerate(args):
        names += [f"args[{i}]{p}" if p else f"arg {i}" for p in key_paths(a)]
    for k in sorted_keys(kwargs):
        names += [f"kwargs[{k!r}]{p}" if p else f"kwarg {k!r}" for p in key_paths(kwargs[k])]
    return names


def _mapped_size(leaves, axes, names, axis_size) -> int:
    sizes = [(aval_of(x).shape[a], n, x, a) for x, a, n in zip(leaves, axes, names)
             if a is not None]
    if not sizes:
        if axis_size is None:
            raise ValueError("vmap must have at least one non-None value in in_axes (or pass "
                             "axis_size=... to give the batch size)")
        return int(axis_size)
    distinct = {s for s, *_ in sizes}
    if axis_size is not None:
        distinct.add(int(axis_size))
    if len(distinct) > 1:
        lines = [f"{n} has shape {aval_of(x).shape} and axis {a} is to be mapped"
                 for _, n, x, a in sizes]
        lines += ["so"] + [f"{n} has an axis to be mapped of size {s}" for s, n, _, _ in sizes]
        if axis_size is not None:
            lines.append(f"axis_size is {axis_size}")
        raise ValueError("vmap got inconsistent sizes for array axes to be mapped:\n"
                         + "\n".join(lines)
                         + "\nEvery mapped axis must have the same length (the batch size).")
    return distinct.pop()


def _normalize_in_axes(leaves, axes, names) -> list:
    out = []
    for x, a, n in zip(leaves, axes, names):
        if a is None:
            out.append(None)
            continue
        nd = aval_of(x).ndim
        if not -nd <= a < nd:
            raise ValueError(
                f"vmap was requested to map its argument along axis {a}, which implies that its "
                f"rank should be at least {a + 1 if a >= 0 else -a}, but is only {nd} (its shape "
                f"is {aval_of(x).shape}); {n} has in_axes {a}")
        out.append(a % nd)
    return out


def _place_output(o, d, axis, size: int):
    """An output with its batch axis at ``axis`` (an unbatched one is broadcast)."""
    if axis is None:
        if d is not None:
            raise ValueError("vmap has mapped output but out_axes is None: an output that "
                             "depends on a batched input cannot be returned unbatched; give "
                             "it an int out_axes")
        return o
    nd = aval_of(o).ndim + (d is None)
    if not -nd <= axis < nd:
        raise ValueError(f"vmap out_axes {axis} is out of range for an output of rank {nd} "
                         f"(including the batch axis)")
    if d is None:
        o, d = broadcast_batch(o, size), 0
    return move_batch_axis(o, d, axis % nd)


# ------------------------------------------------------------------ vmap
def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0,
         axis_size: int | None = None) -> Callable:
    """Vectorizing map, as ``jax.vmap``: ``vmap(f)(xs)`` is ``stack([f(x) for x in xs])``
    computed as one batched program (no Python loop).

    ``f`` is written for one example; every operation in it is turned into its batched form.
    It composes with the other transformations: ``vmap(grad(loss))`` gives per-example
    gradients, ``jit(vmap(f))`` compiles the batched program.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> xs = jnp.arange(6.0).reshape(3, 2)
    >>> jitgraph.vmap(lambda x: jnp.dot(x, x))(xs)
    array([ 1., 13., 41.])
    >>> jitgraph.vmap(lambda x, w: x * w, in_axes=(0, None))(jnp.arange(3.0), 2.0)
    array([0., 2., 4.])
    >>> jitgraph.vmap(lambda x: x * 2.0, out_axes=1)(jnp.ones((2, 3))).shape
    (3, 2)

    ```

    :param fun: the function of one example, of positional (and keyword) arguments.
    :param in_axes: which axis of each argument is mapped: an int (all arguments), ``None``, or
        a tuple with one entry per positional argument, each an int, ``None`` or a pytree prefix
        of that argument. ``None``: the argument is the same for every example. Negative axes
        count from the end. Keyword arguments are mapped over axis 0.
    :param out_axes: where the mapped axis goes in each output, likewise; an output that does
        not depend on a mapped input is broadcast.
    :param axis_size: the batch size, needed only when no argument is mapped.
    :returns: the batched function, with ``fun``'s arguments (with the extra axis).
    :raises TypeError: when ``in_axes`` is not an int, ``None`` or a tuple.
    :raises ValueError: when ``in_axes`` has another length than the positional arguments, or
        the mapped axes have different sizes.
    """
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not (_is_axis(in_axes) or type(in_axes) is tuple):
        raise TypeError("vmap in_axes must be an int, None, or a tuple of entries corresponding "
                        f"to the positional arguments passed to the function, but got {in_axes!r}")
    _check_spec(in_axes, "in_axes")
    _check_spec(out_axes, "out_axes")

    @functools.wraps(fun)
    @returns_arrays
    def batched(*args, **kwargs):
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError(
                "vmap in_axes must be an int, None, or a tuple of entries corresponding to the "
                f"positional arguments passed to the function, but got len(in_axes)="
                f"{len(in_axes)}, len(args)={len(args)}")
        per_arg = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        axes = []
        for i, (a, spec) in enumerate(zip(args, per_arg)):
            axes += prefix_axes(spec, a, f"in_axes (argument {i})")
        for k in sorted(kwargs, key=repr):
            axes += [0] * len(tree_flatten(kwargs[k])[0])
        leaves, in_tree = tree_flatten((args, kwargs))
        names = _leaf_names(args, kwargs)
        leaves = [x if a is None and type(x) in (bool, int, float) else _leaf(x, n)
                  for x, a, n in zip(leaves, axes, names)]
        axes = _normalize_in_axes(leaves, axes, names)
        size = _mapped_size(leaves, axes, names, axis_size)
        with Trace(abstract=True, what="vmap") as t:
            # a mapped argument enters as one example's traced value, an unmapped array as a
            # traced value too (so indexing a constant with it works as under jit); unmapped
            # Python scalars and values of an enclosing transformation enter as themselves
            # (Python control flow on a static number works, as in JAX)
            ins, traced = [], []
            for x, a in zip(leaves, axes):
                if a is not None or type(x) not in (bool, int, float) and not isinstance(x, Tracer):
                    av = aval_of(x)
                    if a is not None:
                        av = Aval(av.shape[:a] + av.shape[a + 1:], av.dtype, av.weak)
                    traced.append((x, a))
                    x = t.new_input(av)
                ins.append(x)
            a_t, kw_t = in_tree.unflatten(ins)
            out = fun(*a_t, **kw_t)
            out_leaves, out_tree = tree_flatten(out)
            out_leaves = [_leaf(o, "output") for o in out_leaves]
            graph = t.to_graph(out_leaves)
            captured = t.captured_values()
        outs, odims = batch_eval(graph, [x for x, _ in traced] + captured,
                                 [a for _, a in traced] + [None] * len(captured))
        oaxes = prefix_axes(out_axes, _shape_template(out_tree), "out_axes")
        return out_tree.unflatten([_place_output(o, d, a, size)
                                   for o, d, a in zip(outs, odims, oaxes)])
    return batched


def _leaf(x: Any, name: str) -> Any:
    """One pytree leaf as an operand (a traced value as it is)."""
    return x if isinstance(x, Tracer) else concrete_operand(x, name)


class _Leaf:
    """A stand-in leaf: rebuilds an output's structure for matching out_axes against it."""


def _shape_template(out_tree):
    return out_tree.unflatten([_Leaf() for _ in range(out_tree.num_leaves)])
