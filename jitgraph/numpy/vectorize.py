"""``jnp.vectorize``: NumPy's vectorize (with generalized-ufunc signatures) built on ``vmap``,
so the vectorized function is one batched program, not a Python loop over elements."""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Collection

from ..batching import vmap
from ..core import aval_of
from ..errors import ShapeError
from ._base import _operand

_NAME = r"\w+"
_ARG = r"\((?:{0}(?:,{0})*)?\)".format(_NAME)
_SIGNATURE = re.compile(r"^{0}(?:,{0})*->{0}(?:,{0})*$".format(_ARG))


def parse_signature(signature: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """``"(m,n),(n)->(m)"`` -> ``([("m", "n"), ("n",)], [("m",)])``."""
    sig = signature.replace(" ", "")
    if not _SIGNATURE.match(sig):
        raise ValueError(f"vectorize: not a valid gufunc signature: {signature!r} (expected "
                         "e.g. '(n),(n)->()' or '(m,n),(n)->(m)')")
    ins, outs = sig.split("->")
    parse = lambda side: [tuple(re.findall(_NAME, a)) for a in re.findall(_ARG, side)]  # noqa: E731
    return parse(ins), parse(outs)


def _bind_core_dims(sizes: dict, shape: tuple, core: tuple, context: str, is_input: bool):
    """Record the sizes of ``core`` dims (the trailing axes of ``shape``); mismatches raise."""
    if is_input and len(shape) < len(core):
        raise ValueError(f"vectorize: input with shape {shape} does not have enough dimensions "
                         f"for all core dimensions {core} {context}")
    if not is_input and len(shape) != len(core):
        raise ValueError(f"vectorize: output shape {shape} does not match core dimensions "
                         f"{core} {context}")
    for name, n in zip(core, shape[len(shape) - len(core):]):
        if sizes.setdefault(name, n) != n:
            raise ValueError(f"vectorize: inconsistent size for core dimension {name!r}: {n} vs "
                             f"{sizes[name]} {context}")


def _broadcast_loop_shapes(shapes: list[tuple], context: str) -> tuple:
    from ..ops.elementwise import broadcast_shapes
    try:
        return broadcast_shapes(*shapes)
    except ShapeError as e:
        raise ValueError(f"vectorize: loop dimensions {shapes} {context}: {e}") from None


def _with_static(func: Callable, static: dict[int, Any], static_kw: dict) -> Callable:
    """``func`` with the excluded positional arguments put back in place."""
    def call(*dynamic):
        args, it = [], iter(dynamic)
        for i in range(len(dynamic) + len(static)):
            args.append(static[i] if i in static else next(it))
        return func(*args, **static_kw)
    return call


def vectorize(pyfunc: Callable, *, excluded: Collection[int | str] = frozenset(),
              signature: str | None = None) -> Callable:
    """Vectorize ``pyfunc`` as ``jax.numpy.vectorize``: it is written for one element (or, with
    a gufunc ``signature`` such as ``"(n),(n)->()"``, for arrays of the core shapes) and gets
    applied over the broadcast leading ("loop") axes of its arguments by ``vmap``, one level
    per loop axis. ``excluded``: positions or names of arguments passed through unchanged.
    """
    for e in excluded:
        if not isinstance(e, (int, str)) or isinstance(e, bool):
            raise TypeError(f"vectorize can only exclude integer or string arguments, but "
                            f"excluded={excluded!r}")
        if isinstance(e, int) and e < 0:
            raise ValueError(f"vectorize: excluded={excluded!r} contains negative numbers")
    core_in, core_out = parse_signature(signature) if signature is not None else (None, None)
    context = f"on vectorized function with excluded={excluded!r} and signature={signature!r}"

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        static_kw = {k: v for k, v in kwargs.items() if k in excluded}
        extra = sorted(k for k in kwargs if k not in excluded)
        if extra:
            raise TypeError(f"vectorize: keyword arguments {extra} are not vectorized; pass "
                            "them positionally or list them in excluded=")
        static = {i: a for i, a in enumerate(args) if i in excluded}
        rest = [(i, a) for i, a in enumerate(args) if i not in excluded]
        ins = core_in if core_in is not None else [()] * len(rest)
        if len(ins) != len(rest):
            raise TypeError(f"vectorize: wrong number of positional arguments: expected "
                            f"{len(ins)}, got {len(rest)} {context}")
        if any(a is None and c != () for (_, a), c in zip(rest, ins)):
            raise ValueError(f"vectorize: cannot pass None for an argument with core "
                             f"dimensions {context}")
        static.update((i, None) for i, a in rest if a is None)   # None: passed through
        dyn = [_operand(a, f"argument {i}") for i, a in rest if a is not None]
        ins = [c for (_, a), c in zip(rest, ins) if a is not None]
        sizes: dict = {}
        loop_shapes = []
        for x, core in zip(dyn, ins):
            shape = aval_of(x).shape
            _bind_core_dims(sizes, shape, core, context, is_input=True)
            loop_shapes.append(shape[:len(shape) - len(core)])
        loop = _broadcast_loop_shapes(loop_shapes, context)
        func = _checked(_with_static(pyfunc, static, static_kw), sizes, core_out, context)
        return _map_loop_axes(func, dyn, loop_shapes, loop, vmap)
    return wrapped


def _checked(func: Callable, sizes: dict, core_out, context: str) -> Callable:
    """``func`` that checks its outputs' core dimensions against the signature."""
    def call(*args):
        out = func(*args)
        outs = out if isinstance(out, tuple) else (out,)
        if core_out is not None:
            if len(core_out) > 1 and not isinstance(out, tuple):
                raise TypeError(f"vectorize: output must be a tuple when multiple outputs are "
                                f"expected, got {out!r} {context}")
            if len(outs) != len(core_out):
                raise TypeError(f"vectorize: wrong number of output arguments: expected "
                                f"{len(core_out)}, got {len(outs)} {context}")
            local = dict(sizes)
            for o, core in zip(outs, core_out):
                _bind_core_dims(local, aval_of(_operand(o, "output")).shape, core, context,
                                is_input=False)
        return out
    return call


def _map_loop_axes(func: Callable, args: list, loop_shapes: list, loop: tuple, vmap):
    """Apply ``func`` over the loop axes: one ``vmap`` per loop axis (innermost: the last),
    mapping only the arguments that have that axis with a size other than 1; axes of size 1
    everywhere are added back to the result with ``expand_dims``."""
    from .manipulation import expand_dims, squeeze
    squeezed, filled = [], []
    for x, shape in zip(args, loop_shapes):
        filled.append((1,) * (len(loop) - len(shape)) + tuple(shape))
        ones = tuple(i for i, n in enumerate(shape) if n == 1)
        squeezed.append(squeeze(x, axis=ones) if ones else x)
    expand = []
    for k in reversed(range(len(loop))):
        axes = tuple(None if f[k] == 1 else 0 for f in filled)
        if all(a is None for a in axes):
            expand.append(k)
        else:
            func = vmap(func, axes)
    result = func(*squeezed)
    if not expand:
        return result
    if isinstance(result, tuple):
        return tuple(expand_dims(r, tuple(expand)) for r in result)
    return expand_dims(result, tuple(expand))
