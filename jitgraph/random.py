"""Counter-based, splittable random numbers, as ``jax.random``: a key is a value, not a state.

``key = jitgraph.random.key(0)``; ``k1, k2 = split(key)``; ``uniform(k1, (3,))``. The same key
always gives the same numbers, in any process, eagerly or under ``jit``. The generator is
Threefry-2x32 (20 rounds; Salmon et al. 2011, as JAX), written with the 32-bit word primitives
of ``jitgraph.ops.random``: under ``jit`` it is ordinary elementwise code, so the bits are
computed inside the fused kernel that consumes them.

A key is an ``int64[2]`` array holding two 32-bit words (jitgraph has no unsigned dtype). The
bit streams (``split``, ``fold_in``, ``bits``, float32 ``uniform``) follow JAX's original
(non-partitionable) Threefry scheme.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from . import dtypes
from . import numpy as jnp
from .core import Tracer, aval_of, bind
from .ops.random import MASK32, threefry_mix_p, uint32_add_p, uint32_xor_p

__all__ = ["key", "PRNGKey", "split", "fold_in", "bits", "uniform", "normal", "bernoulli",
           "permutation", "categorical", "randint", "gumbel", "dropout", "threefry2x32",
           "key_data"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def _add(x, y):
    return bind(uint32_add_p, x, y)


def threefry2x32(k0, k1, x0, x1):
    """The Threefry-2x32 block function: 32-bit words (int64 arrays) -> two 32-bit words."""
    ks = (k0, k1, bind(uint32_xor_p, bind(uint32_xor_p, k0, k1), _PARITY))
    x0, x1 = _add(x0, ks[0]), _add(x1, ks[1])
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0, x1 = _add(x0, x1), bind(threefry_mix_p, x0, x1, r=r)
        x0 = _add(x0, ks[(i + 1) % 3])
        x1 = _add(x1, _add(ks[(i + 2) % 3], i + 1))
    return x0, x1


def key(seed: int) -> np.ndarray:
    """A key from an integer seed (the two 32-bit halves of a 64-bit seed, as JAX's PRNGKey)."""
    if isinstance(seed, Tracer):
        s = jnp.astype(seed, jnp.int64)
        return jnp.stack([bind(uint32_add_p, s // 2 ** 32, 0), bind(uint32_add_p, s, 0)])
    seed = int(seed)
    if not -2 ** 63 <= seed < 2 ** 64:
        raise ValueError(f"random.key: seed {seed} does not fit in 64 bits")
    seed &= (1 << 64) - 1
    return np.array([seed >> 32, seed & MASK32], dtype=np.int64)


PRNGKey = key


def key_data(k) -> np.ndarray:
    """The two 32-bit words of a key as NumPy uint32 (JAX's raw key layout)."""
    return np.asarray(k).astype(np.uint32)


def _check_key(k, fn: str):
    k = jnp.asarray(k)
    a = aval_of(k)
    if a.shape != (2,) or a.dtype != dtypes.int64:
        raise TypeError(f"random.{fn}: expected a key (int64[2] from jitgraph.random.key or "
                        f"split), got {a}; did you pass the seed instead of key(seed)?")
    return k


def _words(k):
    return k[0], k[1]


def _hash_counts(k, counts: np.ndarray):
    """Threefry of a flat, even-length counter array: pairs (c[i], c[n/2 + i]) -> concatenated
    outputs (JAX's ``threefry_2x32`` on a count vector)."""
    half = counts.shape[0] // 2
    y0, y1 = threefry2x32(*_words(k), counts[:half], counts[half:])
    return jnp.concatenate([y0, y1])


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def bits(k, shape: Sequence[int] = ()) -> np.ndarray:
    """Uniform 32-bit words (int64 values in [0, 2**32)) of the given shape."""
    k = _check_key(k, "bits")
    shape = _shape(shape)
    n = math.prod(shape)
    if n == 0:
        return np.zeros(shape, np.int64)
    m = n + (n % 2)
    out = _hash_counts(k, np.arange(m, dtype=np.int64))
    if m != n:
        out = out[:n]
    return jnp.reshape(out, shape)


def split(k, num: int = 2):
    """``num`` new independent keys, as an int64[num, 2] array (unpack: ``a, b = split(k)``)."""
    k = _check_key(k, "split")
    return jnp.reshape(_hash_counts(k, np.arange(2 * num, dtype=np.int64)), (num, 2))


def fold_in(k, data) -> np.ndarray:
    """A new key determined by ``k`` and an integer (a step number, a layer index)."""
    k = _check_key(k, "fold_in")
    if isinstance(data, Tracer):
        d = bind(uint32_add_p, jnp.astype(data, jnp.int64), 0)
    else:
        d = np.int64(int(data) & MASK32)
    y0, y1 = threefry2x32(*_words(k), np.int64(0), d)
    return jnp.stack([y0, y1])


def _float_dtype(dtype):
    d = dtypes.canonical(dtype if dtype is not None else np.float64)
    if d.kind != "f":
        raise TypeError(f"expected a floating-point dtype, got {d}")
    return d


def _units(k, shape, dtype, count: int = 1):
    """``count`` independent arrays of uniform floats in [0, 1), all from one Threefry stream
    (one generator instance in a compiled program): 23 random bits each for float32 (exactly
    JAX's ``uniform``), 52 for float64."""
    shape = _shape(shape)
    words = 1 if dtype == dtypes.float32 else 2
    b = bits(k, (count * words,) + shape)
    if dtype == dtypes.float32:
        return [jnp.astype(b[i] // 512, jnp.float32) * np.float32(2.0 ** -23)
                for i in range(count)]
    return [jnp.astype(b[2 * i] * 1048576 + b[2 * i + 1] // 4096, jnp.float64) * 2.0 ** -52
            for i in range(count)]


def _unit(k, shape, dtype):
    if dtype == dtypes.float32:      # the same words as JAX (no leading axis of size 1)
        b = bits(k, shape)
        return jnp.astype(b // 512, jnp.float32) * np.float32(2.0 ** -23)
    return _units(k, shape, dtype)[0]


def uniform(k, shape: Sequence[int] = (), dtype=None, minval=0.0, maxval=1.0):
    """Uniform floats in [minval, maxval) (float64 unless ``dtype`` says otherwise)."""
    k = _check_key(k, "uniform")
    d = _float_dtype(dtype)
    u = _unit(k, shape, d)
    if isinstance(minval, (int, float)) and isinstance(maxval, (int, float)) \
            and minval == 0.0 and maxval == 1.0:
        return u
    lo = jnp.astype(jnp.asarray(minval), d)
    hi = jnp.astype(jnp.asarray(maxval), d)
    return jnp.maximum(lo, u * (hi - lo) + lo)


def normal(k, shape: Sequence[int] = (), dtype=None):
    """Standard normal samples (Box-Muller on two independent uniform arrays)."""
    k = _check_key(k, "normal")
    d = _float_dtype(dtype)
    u1, u2 = _units(k, shape, d, 2)
    u1 = 1.0 - u1                           # (0, 1]: log is finite
    return jnp.sqrt(-2.0 * jnp.log(u1)) * jnp.cos((2.0 * math.pi) * u2)


def bernoulli(k, p=0.5, shape: Sequence[int] | None = None):
    """Booleans that are True with probability ``p`` (shape defaults to ``p``'s shape)."""
    k = _check_key(k, "bernoulli")
    p = jnp.asarray(p)
    if shape is None:
        shape = aval_of(p).shape
    pd = aval_of(p).dtype
    d = pd if dtypes.is_float(pd) else dtypes.float64
    return _unit(k, shape, d) < jnp.astype(p, d)


def randint(k, shape: Sequence[int], minval: int, maxval: int):
    """Integers in [minval, maxval) (int64); the modulo bias is below 2**-32 * (maxval - minval)."""
    k = _check_key(k, "randint")
    span = int(maxval) - int(minval)
    if span <= 0:
        raise ValueError(f"random.randint: empty range [{minval}, {maxval})")
    if span > 2 ** 31:
        raise ValueError("random.randint: ranges wider than 2**31 are not supported")
    return bits(k, shape) % span + int(minval)


def gumbel(k, shape: Sequence[int] = (), dtype=None):
    """Standard Gumbel samples, -log(-log(u)) with u in (0, 1)."""
    k = _check_key(k, "gumbel")
    d = _float_dtype(dtype)
    tiny = float(np.finfo(d).tiny)
    u = jnp.maximum(_unit(k, shape, d), tiny)
    return -jnp.log(-jnp.log(u))


def categorical(k, logits, axis: int = -1, shape: Sequence[int] | None = None):
    """Samples from the categorical distributions with these (unnormalized log-prob) logits,
    by the Gumbel-max trick: argmax(logits + Gumbel noise)."""
    k = _check_key(k, "categorical")
    logits = jnp.asarray(logits)
    a = aval_of(logits)
    ax = axis % a.ndim
    batch = a.shape[:ax] + a.shape[ax + 1:]
    if shape is None:
        shape = batch
    shape = _shape(shape)
    if shape[len(shape) - len(batch):] != batch:
        raise ValueError(f"random.categorical: shape {shape} must end with the logits' batch "
                         f"shape {batch}")
    d = a.dtype if dtypes.is_float(a.dtype) else dtypes.float64
    lg = jnp.expand_dims(jnp.moveaxis(jnp.astype(logits, d), ax, -1), 0)
    noise_shape = shape + (a.shape[ax],)
    g = gumbel(k, noise_shape, d)
    lg = jnp.reshape(lg, (1,) * (len(shape) - len(batch)) + batch + (a.shape[ax],))
    return jnp.argmax(g + lg, axis=-1)


def permutation(k, x, axis: int = 0):
    """A random permutation of ``arange(x)`` (int ``x``) or of an array's entries along ``axis``.

    Random 32-bit sort keys, ties broken by position (a stable sort). Eagerly this is NumPy's
    argsort; under ``jit`` (no sort primitive) the rank of each key is counted by comparisons,
    O(n**2) work, which is fine up to a few thousand items.
    """
    k = _check_key(k, "permutation")
    if isinstance(x, (int, np.integer)):
        n, arr = int(x), None
    else:
        arr = jnp.asarray(x)
        n = aval_of(arr).shape[axis]
    b = bits(k, (n,))
    if isinstance(b, Tracer):
        i = np.arange(n)
        before = (b[None, :] < b[:, None]) | ((b[None, :] == b[:, None])
                                              & (i[None, :] < i[:, None]))
        rank = jnp.sum(jnp.astype(before, jnp.int64), axis=1)          # rank[i] of item i
        perm = jnp.sum(jnp.where(rank[None, :] == i[:, None], i[None, :], 0), axis=1)
    else:
        perm = np.argsort(np.asarray(b), kind="stable").astype(np.int64)
    if arr is None:
        return perm
    return jnp.take(arr, perm, axis=axis)


def dropout(k, x, rate: float, deterministic: bool = False):
    """Inverted dropout: zero each entry with probability ``rate``, scale the rest by 1/(1-rate)."""
    if deterministic or rate == 0.0:
        return x
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    x = jnp.asarray(x)
    a = aval_of(x)
    d = a.dtype if dtypes.is_float(a.dtype) else dtypes.float64
    keep = _unit(_check_key(k, "dropout"), a.shape, d) < 1.0 - rate
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros((), a.dtype))
