"""Counter-based, splittable random numbers with JAX's streams: a key is a value, not a state.

``key = jitgraph.random.key(0)``; ``k1, k2 = split(key)``; ``uniform(k1, (3,))``. The same key
always gives the same numbers, in any process, eagerly or under ``jit``, and the numbers JAX
gives for that key (``docs/random.md`` lists where they differ and why). The generator is
Threefry-2x32 (20 rounds; Salmon et al. 2011, as JAX), written with the 32-bit word primitives
of ``jitgraph.ops.random``: under ``jit`` it is ordinary elementwise code, so the bits are
computed inside the fused kernel that consumes them.

A key is an ``int64[2]`` array holding two 32-bit words (jitgraph has no unsigned dtype). How
counters become bits follows ``jitgraph.config``'s ``jax_threefry_partitionable`` as JAX's
flag of that name: True (JAX's default now) hashes the 64-bit index of each element, False is
JAX's original scheme (the flat counter array split in two halves, padded with a zero).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from . import config, dtypes
from . import numpy as jnp
from .arrays import Array
from .tree import as_arrays
from .core import Tracer, aval_of, bind
from .ops.elementwise import erf_p
from .ops.random import MASK32, threefry_mix_p, uint32_add_p, uint32_xor_p

__all__ = ["key", "PRNGKey", "split", "fold_in", "bits", "uniform", "normal",
           "truncated_normal", "bernoulli", "permutation", "categorical", "randint", "gumbel",
           "dropout", "threefry2x32", "key_data", "erfinv"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA
_SQRT2 = math.sqrt(2.0)


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
    """A key from an integer seed, as JAX's ``PRNGKey``: the two 32-bit halves of a 64-bit seed,
    or with 32-bit default ints (``jax_enable_x64=False``) the seed's low 32 bits after a zero
    word."""
    x32 = config.int_dtype() == dtypes.int32
    if isinstance(seed, Tracer):
        s = jnp.astype(seed, jnp.int64)
        hi = s * 0 if x32 else bind(uint32_add_p, s // 2 ** 32, 0)
        return jnp.stack([hi, bind(uint32_add_p, s, 0)])
    seed = int(seed)
    if not -2 ** 63 <= seed < 2 ** 64:
        raise ValueError(f"random.key: seed {seed} does not fit in 64 bits")
    seed &= MASK32 if x32 else (1 << 64) - 1     # (JAX's int32 seed keeps the low 32 bits)
    return np.array([seed >> 32, seed & MASK32], dtype=np.int64).view(Array)


PRNGKey = key


def key_data(k) -> np.ndarray:
    """The two 32-bit words of a key as NumPy uint32 (JAX's raw key layout)."""
    return np.asarray(k).astype(np.uint32).view(Array)


def _check_key(k, fn: str):
    k = jnp.asarray(k)
    a = aval_of(k)
    if a.shape != (2,) or a.dtype != dtypes.int64:
        raise TypeError(f"random.{fn}: expected a key (int64[2] from jitgraph.random.key or "
                        f"split), got {a}; did you pass the seed instead of key(seed)?")
    return k


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


# ------------------------------------------------------------------ counters -> words
def _hash_flat(k, counts: np.ndarray):
    """JAX's ``threefry_2x32`` of a flat counter array (the original scheme): pairs
    (c[i], c[h + i]) of the array padded with one 0 to an even length h * 2, outputs
    concatenated, the padding's word dropped."""
    n = counts.shape[0]
    if n % 2:
        counts = np.concatenate([counts, np.zeros(1, np.int64)])
    half = counts.shape[0] // 2
    y0, y1 = threefry2x32(k[0], k[1], counts[:half], counts[half:])
    out = jnp.concatenate([y0, y1])
    return out[:n] if n % 2 else out


def _hash_index(k, shape: tuple[int, ...]):
    """Threefry of each element's 64-bit row-major index (high word, low word): the
    partitionable scheme's two words per element."""
    i = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    return threefry2x32(k[0], k[1], i >> 32, i & MASK32)


def _partitionable() -> bool:
    return bool(config.read("threefry_partitionable"))


def bits(k, shape: Sequence[int] = ()) -> np.ndarray:
    """Uniform 32-bit words (int64 values in [0, 2**32)): JAX's ``random.bits`` (uint32)."""
    return as_arrays(_bits32(_check_key(k, "bits"), _shape(shape)))


def _bits32(k, shape: tuple[int, ...]):
    n = math.prod(shape)
    if n == 0:
        return np.zeros(shape, np.int64)
    if _partitionable():
        y0, y1 = _hash_index(k, shape)
        return bind(uint32_xor_p, y0, y1)
    return jnp.reshape(_hash_flat(k, np.arange(n, dtype=np.int64)), shape)


def _bits64(k, shape: tuple[int, ...]):
    """The high and low 32-bit words of JAX's 64-bit random bits."""
    n = math.prod(shape)
    if n == 0:
        return np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    if _partitionable():
        return _hash_index(k, shape)
    w = _hash_flat(k, np.arange(2 * n, dtype=np.int64))
    return jnp.reshape(w[:n], shape), jnp.reshape(w[n:], shape)


def split(k, num: int | Sequence[int] = 2):
    """``num`` new independent keys, as an int64[num, 2] array (unpack: ``a, b = split(k)``);
    a tuple ``num`` gives keys of that shape, as JAX."""
    k = _check_key(k, "split")
    shape = _shape(num)
    if _partitionable():
        y0, y1 = _hash_index(k, shape)
        return jnp.stack([y0, y1], axis=len(shape))
    return jnp.reshape(_hash_flat(k, np.arange(2 * math.prod(shape), dtype=np.int64)),
                       shape + (2,))


def _split2(k):
    s = split(k)
    return s[0], s[1]


def fold_in(k, data) -> np.ndarray:
    """A new key determined by ``k`` and an integer taken as uint32 (a step, a layer index)."""
    k = _check_key(k, "fold_in")
    if isinstance(data, Tracer):
        d = bind(uint32_add_p, jnp.astype(data, jnp.int64), 0)
    else:
        d = np.int64(int(data) & MASK32)
    y0, y1 = threefry2x32(k[0], k[1], np.int64(0), d)
    return jnp.stack([y0, y1])


# ------------------------------------------------------------------ floats
def _float_dtype(dtype, fn: str):
    d = dtypes.canonical(dtype) if dtype is not None else config.float_dtype()
    if not dtypes.is_float(d):
        raise TypeError(f"random.{fn}: expected a floating-point dtype, got {d}")
    return d


def _unit(k, shape: tuple[int, ...], d):
    """Floats in [0, 1) from the mantissa bits, as JAX's ``uniform``: the top 23 of 32 bits
    (float32) or 52 of 64 (float64) over 2**-23 / 2**-52 (exact)."""
    if d == dtypes.float32:
        return jnp.astype(_bits32(k, shape) // 512, jnp.float32) * np.float32(2.0 ** -23)
    hi, lo = _bits64(k, shape)
    return jnp.astype(hi * 1048576 + lo // 4096, jnp.float64) * 2.0 ** -52


def _scaled(u, d, minval, maxval):
    """JAX's ``max(minval, u * (maxval - minval) + minval)``, in dtype ``d``."""
    lo = jnp.astype(jnp.asarray(minval), d)
    hi = jnp.astype(jnp.asarray(maxval), d)
    return jnp.maximum(lo, _madd(u, hi - lo, lo))


def _madd(a, b, c):
    """a * b + c rounded once, as XLA's CPU code computes it (a fused multiply-add): float32
    through float64, where the product of two float32 is exact; float64 with the product's
    rounding error (Dekker's exact product) added back before the last rounding."""
    if aval_of(a).dtype == dtypes.float32:
        f64 = jnp.float64
        return jnp.astype(jnp.astype(a, f64) * jnp.astype(b, f64) + jnp.astype(c, f64),
                          jnp.float32)
    p = a * b
    ah, al = _halves(a)
    bh, bl = _halves(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl         # a * b == p + e exactly
    s = p + c
    v = s - p
    return s + (((p - (s - v)) + (c - v)) + e)               # (the sum's error, Knuth)


def _halves(x):
    """Veltkamp's split of a float64 into two 26-bit halves (x == hi + lo exactly)."""
    t = x * 134217729.0
    hi = t - (t - x)
    return hi, x - hi


def uniform(k, shape: Sequence[int] = (), dtype=None, minval=0.0, maxval=1.0):
    """Uniform floats in [minval, maxval) (the default float dtype unless ``dtype`` is given)."""
    k = _check_key(k, "uniform")
    d = _float_dtype(dtype, "uniform")
    u = _unit(k, _shape(shape), d)
    if isinstance(minval, (int, float)) and isinstance(maxval, (int, float)) \
            and minval == 0.0 and maxval == 1.0:
        return u
    return _scaled(u, d, minval, maxval)


# XLA's erf_inv polynomials (M. Giles, "Approximating the erfinv function", 2010), which JAX
# uses: in w = -log1p(-x*x), Horner's rule from the first coefficient
_ERFINV32 = ((2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
              -0.00125372503, -0.00417768164, 0.246640727, 1.50140941),
             (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
              -0.0076224613, 0.00943887047, 1.00167406, 2.83297682))
_ERFINV64 = (
    (-3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
     1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
     6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
     2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
     1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
     4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
     0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
     0.24015818242558961693, 1.6536545626831027356),
    (2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
     1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
     2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
     6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
     0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
     -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
     3.0838856104922207635),
    (-2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
     -3.7894654401267369937e-09, 7.6157012080783393804e-09, -1.4960026627149240478e-08,
     2.9147953450901080826e-08, -6.7711997758452339498e-08, 2.2900482228026654717e-07,
     -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
     7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026,
     1.0103004648645343977, 4.8499064014085844221))


def _horner(branches, t, fused: bool = True):
    """Horner's rule where each branch (a condition, its coefficients) holds: coefficient lists
    aligned at their first (highest-degree) term, the shorter ones ending early."""
    d = aval_of(t).dtype
    conds = [c for c, _ in branches]

    def pick(i):
        c = None
        for cond, cs in reversed(branches):
            if i < len(cs):
                v = np.asarray(cs[i], d)
                c = v if c is None else jnp.where(cond, v, c)   # (the last branch: the rest)
        return c
    p = pick(0)
    for i in range(1, max(len(cs) for _, cs in branches)):
        q = _madd(p, t, pick(i)) if fused else p * t + pick(i)
        live = [cond for cond, cs in branches if i < len(cs)]
        p = q if len(live) == len(conds) else jnp.where(_any(live), q, p)
    return p


def _any(conds):
    out = conds[0]
    for c in conds[1:]:
        out = out | c
    return out


# Cephes' log1p rational (highest degree first), which XLA's CPU log1p uses below sqrt(2) - 1
_LOG1P_P = (4.5270000862445199635215e-5, 4.9854102823193375972212e-1, 6.5787325942061044846969,
            2.9911919328553073277375e1, 6.0949667980987787057556e1, 5.7112963590585538103336e1,
            2.0039553499201281259648e1)
_LOG1P_Q = (1.0, 1.5062909083469192198539e1, 8.3047565967967209469434e1,
            2.2176239823732856465394e2, 3.0909872225312059774938e2, 2.1642788614495947685003e2,
            6.0118660497603843919306e1)


def _log1p(y):
    """log1p as XLA's CPU code computes it (so erfinv sees JAX's w): log(1 + y) from
    |y| = sqrt(2) - 1 up, below it y - y*y/2 + y**3 P(y)/Q(y) with fused multiply-adds."""
    d = aval_of(y).dtype
    z = y * y
    r = _horner([(None, _LOG1P_P)], y) / _horner([(None, _LOG1P_Q)], y)
    small = y + (z * np.asarray(-0.5, d) + (y * z) * r)
    return jnp.where(jnp.abs(y) < np.asarray(0.41421356237309504880, d), small,
                     jnp.log(y + np.asarray(1.0, d)))


def erfinv(x):
    """The inverse error function as XLA computes it (JAX's ``lax.erf_inv``): Giles'
    polynomials in w = -log1p(-x*x), +-inf at +-1. The last bits can differ from JAX's: float32
    where XLA's own float32 ``log`` rounds otherwise (|x| above 0.64), float64 where the
    polynomial's multiply-adds round twice here (see docs/random.md)."""
    x = jnp.asarray(x)
    d = aval_of(x).dtype
    if not dtypes.is_float(d):
        x, d = jnp.astype(x, config.float_dtype()), config.float_dtype()
    w = -_log1p(x * -x)
    if d == dtypes.float32:
        lt = w < np.float32(5.0)
        t = jnp.where(lt, w - np.float32(2.5), jnp.sqrt(w) - np.float32(3.0))
        p = _horner([(lt, _ERFINV32[0]), (~lt, _ERFINV32[1])], t)
    else:
        lt6, lt16 = w < 6.25, w < 16.0
        s = jnp.sqrt(w)
        t = jnp.where(lt6, w - 3.125, jnp.where(lt16, s - 3.25, s - 5.0))
        # (XLA fuses these 23 multiply-adds too; exact ones (Dekker) would double the compile
        # time of a program drawing float64 normals, so they round twice: within 3 ulp)
        p = _horner([(lt6, _ERFINV64[0]), (lt16, _ERFINV64[1]),
                     (None, _ERFINV64[2])], t, fused=False)
    return jnp.where(jnp.abs(x) == np.asarray(1.0, d), x * np.asarray(np.inf, d), p * x)


def normal(k, shape: Sequence[int] = (), dtype=None):
    """Standard normal samples, as JAX: sqrt(2) * erfinv(u), u uniform in (-1, 1)."""
    k = _check_key(k, "normal")
    d = _float_dtype(dtype, "normal")
    lo = np.nextafter(np.asarray(-1.0, d), np.asarray(0.0, d))
    u = _scaled(_unit(k, _shape(shape), d), d, lo, np.asarray(1.0, d))
    return np.asarray(_SQRT2, d) * erfinv(u)


def truncated_normal(k, lower, upper, shape: Sequence[int] | None = None, dtype=None):
    """Standard normal samples conditioned on lower < x < upper, as JAX: the inverse CDF of a
    uniform between erf(lower/sqrt2) and erf(upper/sqrt2), clipped inside the open interval."""
    k = _check_key(k, "truncated_normal")
    d = _float_dtype(dtype, "truncated_normal")
    if shape is None:
        shape = np.broadcast_shapes(aval_of(jnp.asarray(lower)).shape,
                                    aval_of(jnp.asarray(upper)).shape)
    sqrt2 = np.asarray(_SQRT2, d)
    lower = jnp.astype(jnp.asarray(lower), d)
    upper = jnp.astype(jnp.asarray(upper), d)
    a = bind(erf_p, lower / sqrt2)
    b = bind(erf_p, upper / sqrt2)
    out = sqrt2 * erfinv(_scaled(_unit(k, _shape(shape), d), d, a, b))
    lo = _nextafter(jnp.stop_gradient(lower), np.inf)
    hi = _nextafter(jnp.stop_gradient(upper), -np.inf)
    return jnp.clip(out, lo, hi)


def _nextafter(x, direction: float):
    if isinstance(x, Tracer):
        d = aval_of(x).dtype
        tiny = np.asarray(np.finfo(d).smallest_subnormal, d)
        step = jnp.abs(x) * np.asarray(np.finfo(d).eps / 2, d)   # half an ulp, at least
        return x + np.sign(direction) * jnp.maximum(step, tiny)
    x = np.asarray(x)
    return np.nextafter(x, np.asarray(direction, x.dtype))


def gumbel(k, shape: Sequence[int] = (), dtype=None):
    """Standard Gumbel samples, -log(-log(u)), u uniform in [tiny, 1), as JAX."""
    k = _check_key(k, "gumbel")
    d = _float_dtype(dtype, "gumbel")
    u = _scaled(_unit(k, _shape(shape), d), d, np.finfo(d).tiny, 1.0)
    return -jnp.log(-jnp.log(u))


def bernoulli(k, p=0.5, shape: Sequence[int] | None = None):
    """Booleans that are True with probability ``p`` (shape defaults to ``p``'s shape): a
    uniform of ``p``'s float dtype below ``p``, as JAX."""
    k = _check_key(k, "bernoulli")
    p = jnp.asarray(p)
    a = aval_of(p)
    if not dtypes.is_float(a.dtype):
        raise TypeError(f"random.bernoulli: probability p must have a floating dtype, got "
                        f"{a.dtype}")
    shape = a.shape if shape is None else _shape(shape)
    return as_arrays(_unit(k, shape, a.dtype) < p)


# ------------------------------------------------------------------ integers
def randint(k, shape: Sequence[int], minval: int, maxval: int, dtype=None):
    """Integers in [minval, maxval), as JAX's ``randint``: two words per value (from the two
    halves of ``split(k)``) folded modulo the span. The default dtype is the default int (int64;
    int32 with ``jax_enable_x64=False``); spans above 2**31 are not supported."""
    k = _check_key(k, "randint")
    d = dtypes.canonical(dtype) if dtype is not None else config.int_dtype()
    if d.kind != "i":
        raise TypeError(f"random.randint: expected an integer dtype, got {d}")
    if d.itemsize < 4:        # (JAX draws 8- and 16-bit words for them: not reproduced here)
        raise TypeError(f"random.randint: dtype {d} is not supported (JAX's numbers are "
                        f"reproduced for int32 and int64); draw int32 and .astype({d.name})")
    if any(isinstance(v, Tracer) or np.ndim(v) for v in (minval, maxval)):
        raise TypeError("random.randint: minval and maxval must be Python or NumPy integer "
                        "scalars (array or traced bounds are not supported)")
    info = np.iinfo(d)
    lo_v, hi_v = int(minval), int(maxval)
    if hi_v <= lo_v:          # (JAX returns minval here; an empty range is most likely a bug)
        raise ValueError(f"random.randint: empty range [{minval}, {maxval})")
    out_of_range = hi_v > info.max
    lo_v, hi_v = min(max(lo_v, info.min), info.max), min(max(hi_v, info.min), info.max)
    nbits = info.bits
    span = hi_v - lo_v + (1 if out_of_range and hi_v > lo_v else 0)
    if span > 2 ** 31:
        raise ValueError(f"random.randint: the range [{minval}, {maxval}) is wider than 2**31, "
                         "which jitgraph's 32-bit word arithmetic does not support")
    half = (2 ** (nbits // 2)) % span
    mult = (half * half) % 2 ** nbits % span        # (2**nbits % span), as JAX's wrapping mul
    shape = _shape(shape)
    k1, k2 = _split2(k)
    if nbits == 32:
        hi_r = _bits32(k1, shape) % span
        lo_r = _bits32(k2, shape) % span
        off = _add(bind(uint32_add_p, hi_r * mult, 0), lo_r) % span
    else:                     # a 64-bit word (h, l) modulo span, from its 32-bit halves
        word = 2 ** 32 % span

        def rem64(k_):
            h, l_ = _bits64(k_, shape)
            return ((h % span) * word + l_ % span) % span
        off = (rem64(k1) * mult + rem64(k2)) % span
    return jnp.astype(off + lo_v, d)


# ------------------------------------------------------------------ discrete
def categorical(k, logits, axis: int = -1, shape: Sequence[int] | None = None):
    """Samples from the categorical distributions with these (unnormalized log-prob) logits,
    by the Gumbel-max trick as JAX: argmax(logits + Gumbel noise of the logits' layout)."""
    k = _check_key(k, "categorical")
    logits = jnp.asarray(logits)
    a = aval_of(logits)
    ax = axis % a.ndim
    batch = a.shape[:ax] + a.shape[ax + 1:]
    shape = batch if shape is None else _shape(shape)
    if shape[len(shape) - len(batch):] != batch:
        raise ValueError(f"random.categorical: shape {shape} must end with the logits' batch "
                         f"shape {batch}")
    prefix = shape[:len(shape) - len(batch)]
    d = a.dtype if dtypes.is_float(a.dtype) else config.float_dtype()
    g = gumbel(k, prefix + a.shape, d)
    lg = jnp.reshape(jnp.astype(logits, d), (1,) * len(prefix) + a.shape)
    return jnp.argmax(g + lg, axis=ax + len(prefix))


def _sort_order(b):
    """The stable ascending order of 1-D sort keys. Under ``jit`` (where a sort is a host step)
    each key's rank is counted by comparisons, O(n**2) work, fine up to a few thousand items."""
    if not isinstance(b, Tracer):
        return np.argsort(np.asarray(b), kind="stable").astype(np.int64)
    i = np.arange(aval_of(b).shape[0])
    before = (b[None, :] < b[:, None]) | ((b[None, :] == b[:, None]) & (i[None, :] < i[:, None]))
    rank = jnp.sum(jnp.astype(before, jnp.int64), axis=1)          # rank[i] of item i
    return jnp.sum(jnp.where(rank[None, :] == i[:, None], i[None, :], 0), axis=1)


def permutation(k, x, axis: int = 0, independent: bool = False):
    """A random permutation of ``arange(x)`` (int ``x``) or of an array's entries along
    ``axis``, as JAX: ``ceil(3 ln n / ln(2**32 - 1))`` rounds (one up to 1625 items), each a
    stable sort by fresh 32-bit keys from a split of the key. ``independent=True`` permutes
    each slice along ``axis`` on its own."""
    k = _check_key(k, "permutation")
    arr = None
    if isinstance(x, (int, np.integer)):
        n = int(x)
    else:
        arr = jnp.asarray(x)
        a = aval_of(arr)
        axis = axis % max(a.ndim, 1)
        n = a.shape[axis]
        if independent and a.ndim > 1:
            return _shuffle_independent(k, arr, axis)
    rounds = int(np.ceil(3 * np.log(max(1, n)) / np.log(MASK32)))
    perm = np.arange(n, dtype=config.int_dtype())      # (JAX's arange: the default int)
    for _ in range(rounds):
        k, sub = _split2(k)
        perm = jnp.take(perm, _sort_order(_bits32(sub, (n,))))
    return perm if arr is None else jnp.take(arr, perm, axis=axis)


def _shuffle_independent(k, arr, axis: int):
    """JAX's ``_shuffle`` of a whole array: sort keys of its shape, a sort along ``axis``."""
    a = aval_of(arr)
    rounds = int(np.ceil(3 * np.log(max(1, math.prod(a.shape))) / np.log(MASK32)))
    for _ in range(rounds):
        k, sub = _split2(k)
        order = jnp.argsort(_bits32(sub, a.shape), axis=axis, stable=True)
        arr = jnp.take_along_axis(arr, order, axis=axis)
    return arr


def dropout(k, x, rate: float, deterministic: bool = False):
    """Inverted dropout: zero each entry with probability ``rate``, scale the rest by 1/(1-rate)
    (the keep mask is ``uniform(k, x.shape, x.dtype) < 1 - rate``)."""
    if deterministic or rate == 0.0:
        return x
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    x = jnp.asarray(x)
    a = aval_of(x)
    d = a.dtype if dtypes.is_float(a.dtype) else config.float_dtype()
    keep = _unit(_check_key(k, "dropout"), a.shape, d) < 1.0 - rate
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros((), a.dtype))
