"""Complex numbers on the CPU target: creation, JAX's promotion, compiled code against the
reference interpreter, gradients with JAX's convention against central differences, and the
CUDA target's refusal.

JAX's convention: ``grad`` of a real-valued ``f`` of ``z = x + iy`` is ``df/dx - i df/dy``
(JAX's autodiff cookbook: ``grad(lambda z: abs(z)**2)(3+4j) == 6-8j``), and
``grad(f, holomorphic=True)`` is the complex derivative ``f'(z)``.
"""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler import pipeline
from jitgraph.compiler.backends.base import CompileOptions

_rng = np.random.default_rng(34)


def _cn(*shape, dtype=np.complex128):
    return (_rng.standard_normal(shape) + 1j * _rng.standard_normal(shape)).astype(dtype)


# ------------------------------------------------------------------ creation and promotion
def test_linspace_of_complex_ends():
    np.testing.assert_allclose(jnp.linspace(0, 1j, 3), np.linspace(0, 1j, 3))


def test_creation_and_scalar_types():
    assert jnp.asarray(1 + 2j).dtype == np.complex128
    assert jnp.array([1j, 2]).dtype == np.complex128
    assert jnp.zeros(3, dtype=jnp.complex64).dtype == np.complex64
    np.testing.assert_array_equal(jnp.full((2,), 1 - 1j, dtype=np.complex64),
                                  np.full((2,), 1 - 1j, np.complex64))
    assert jnp.ones(2, jnp.complex128).dtype == np.complex128
    assert jnp.complex64(3) == np.complex64(3)
    assert jnp.complex64 == np.complex64 and jnp.complex128 == np.complex128


@pytest.mark.parametrize("x, y, want", [
    (np.ones(2, np.float32), np.ones(2, np.complex64), np.complex64),
    (np.ones(2, np.float64), np.ones(2, np.complex64), np.complex128),
    (np.ones(2, np.float32), 1j, np.complex64),          # a weak complex keeps the precision
    (np.ones(2, np.complex64), 2.5, np.complex64),
    (np.ones(2, np.complex64), 1j, np.complex64),
    (np.ones(2, np.int32), 1j, np.complex128),
    (1.0, 1j, np.complex128),
])
def test_promotion_as_jax(x, y, want):
    assert jnp.add(x, y).dtype == want
    assert jnp.multiply(y, x).dtype == want


def test_array_api_dtype_functions():
    assert jnp.result_type(jnp.float32, 1j) == np.complex64
    assert jnp.result_type(jnp.complex64, jnp.float64) == np.complex128
    assert jnp.can_cast(jnp.float32, jnp.complex64) and not jnp.can_cast(jnp.complex64,
                                                                         jnp.float32)
    assert jnp.isdtype(jnp.complex128, "complex floating")


def test_ordering_is_refused():
    with pytest.raises(TypeError, match="max is not defined for complex"):
        jnp.maximum(jnp.array([1j]), 1.0)
    with pytest.raises(TypeError, match="have no order"):
        jitgraph.jit(jnp.argmax)(jnp.array([1j, 2.0]))
    with pytest.raises(TypeError, match="have no order"):
        jnp.max(jnp.array([1j, 2.0]))


# ------------------------------------------------------------------ values
def test_sign_is_z_over_abs_and_parts():
    z = np.array([3 + 4j, 0j, -2j, complex(np.nan, 1.0)])
    np.testing.assert_allclose(jnp.sign(z), [0.6 + 0.8j, 0j, -1j, complex(np.nan, np.nan)])
    assert jnp.abs(np.complex64(3 + 4j)).dtype == np.float32
    np.testing.assert_array_equal(jnp.isnan(z), [False, False, False, True])
    np.testing.assert_array_equal(jnp.isinf(np.array([complex(1, np.inf), 1j])), [True, False])
    np.testing.assert_allclose(jnp.angle(np.array([1j, -1 + 0j]), deg=True), [90.0, 180.0])


def test_compiled_special_values_and_literals():
    z = np.array([complex(np.inf, 0.0), complex(0.0, np.nan), 1 + 1j, 0j])

    def f(z):
        return (jnp.isfinite(z), jnp.sign(z), z * (1 + 2j) + complex(0.0, np.inf) * 0,
                jnp.exp(z))
    got, want = jitgraph.jit(f)(z), f(z)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_compiled_matches_reference_interpreter(dtype):
    z, w = _cn(3, 4, dtype=dtype), _cn(4, 2, dtype=dtype)

    def f(z, w):
        a = jnp.exp(z) * jnp.conj(z) - jnp.sqrt(z) / (z + 1.0)
        return (jnp.sum(a, axis=1), jnp.prod(z, axis=0), jnp.mean(a), a @ w,
                jnp.abs(a), jnp.real(a) + jnp.imag(a), a.astype(jnp.real(a).dtype))
    graph = jitgraph.make_graph(f)(z, w)
    want = jitgraph.interpret(graph, [z, w])
    got = jitgraph.jit(f)(z, w)
    tol = 2e-5 if dtype == np.complex64 else 1e-12
    for g, r in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(r).dtype
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol)


def test_traced_methods():
    z = _cn(3)
    f = lambda z: (z.real, z.imag, z.conj(), z.conjugate(), abs(z), -z, z ** 2)   # noqa: E731
    for got, want in zip(jitgraph.jit(f)(z), (z.real, z.imag, z.conj(), z.conj(), abs(z), -z,
                                              z ** 2)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


_UNARY = ["exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh",
          "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "log2", "log10",
          "sign", "abs", "negative", "square", "conj", "real", "imag", "angle"]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_every_complex_function_compiles_as_numpy_computes_it(dtype):
    z = np.array([0.3 + 0.2j, -1.5 + 2j, 2 - 0.5j, -0.7 - 1.1j], dtype)
    fns = [getattr(jnp, n) for n in _UNARY]
    got = jitgraph.jit(lambda z: [f(z) for f in fns])(z)
    for name, f, g in zip(_UNARY, fns, got):
        want = getattr(np, name)(z) if name != "sign" else z / np.abs(z)
        assert g.dtype == want.dtype, name
        np.testing.assert_allclose(g, want, rtol=2e-6 if dtype == np.complex64 else 1e-13,
                                   err_msg=name)


def test_linalg_values():
    a, b = _cn(3, 3), _cn(3)
    np.testing.assert_allclose(jnp.linalg.inv(a), np.linalg.inv(a), rtol=1e-12)
    np.testing.assert_allclose(jnp.linalg.det(a), np.linalg.det(a), rtol=1e-12)
    np.testing.assert_allclose(jnp.linalg.solve(a, b), np.linalg.solve(a, b), rtol=1e-12)
    np.testing.assert_allclose(jitgraph.jit(jnp.linalg.solve)(a, b), np.linalg.solve(a, b),
                               rtol=1e-12)
    np.testing.assert_allclose(jnp.var(b), np.var(b), rtol=1e-12)
    with pytest.raises(TypeError, match="cholesky: complex matrices are not supported"):
        jnp.linalg.cholesky(a)


def test_linalg_vector_norm_and_vdot():
    z, w = _cn(5), _cn(5)
    np.testing.assert_allclose(jnp.linalg.norm(z), np.linalg.norm(z))
    np.testing.assert_allclose(jnp.linalg.norm(z, ord=1), np.linalg.norm(z, ord=1))
    np.testing.assert_allclose(jnp.vdot(z, w), np.vdot(z, w))
    np.testing.assert_allclose(jnp.vecdot(z, w), np.vecdot(z, w))
    np.testing.assert_allclose(jnp.linalg.vecdot(z, w), np.vecdot(z, w))


# ------------------------------------------------------------------ gradients
def test_complex_predicates():
    z = np.array([1 + 0j, 2j])
    assert jnp.iscomplexobj(z) and not jnp.iscomplexobj(np.ones(2)) and jnp.isrealobj(1.0)
    np.testing.assert_array_equal(jnp.iscomplex(z), [False, True])
    np.testing.assert_array_equal(jnp.isreal(z), [True, False])
    np.testing.assert_array_equal(jnp.isreal(np.ones(2)), [True, True])


def _central_grad(f, z, eps=1e-6):
    """df/dx - i df/dy by central differences, per element of ``z``."""
    out = np.zeros_like(z)
    for k in np.ndindex(z.shape):
        for step, weight in ((eps, 1.0), (1j * eps, -1j)):
            dz = np.zeros_like(z)
            dz[k] = step
            out[k] += weight * (float(f(z + dz)) - float(f(z - dz))) / (2 * eps)
    return out


def test_jax_cookbook_example():
    f = lambda z: jnp.abs(z) ** 2                             # noqa: E731
    assert complex(jitgraph.grad(f)(3 + 4j)) == pytest.approx(6 - 8j)
    g = lambda z: jnp.real(z) ** 2 + jnp.imag(z) ** 2          # noqa: E731
    assert complex(jitgraph.jit(jitgraph.grad(g))(np.complex128(3 + 4j))) == pytest.approx(6 - 8j)


def _control_flow_loss(z):
    c, ys = jitgraph.lax.scan(lambda c, x: (c * x + 1j, jnp.abs(c)), 1.0 + 0j, jnp.ravel(z))
    c = jitgraph.lax.fori_loop(0, 3, lambda i, c: c * 0.5j + c, c)
    c = jitgraph.lax.cond(jnp.abs(c) > 1, lambda c: c * c, lambda c: -c, c)
    return jnp.abs(c) + jnp.sum(ys)


_LOSSES = {
    "abs_exp": lambda z: jnp.sum(jnp.abs(jnp.exp(z) * z)),
    "parts": lambda z: jnp.sum(jnp.real(z) ** 3 - jnp.imag(z) * jnp.real(jnp.conj(z) * z)),
    "log_sin_sqrt": lambda z: jnp.real(jnp.sum(jnp.log(z) * jnp.sin(z) + jnp.sqrt(z))),
    "div_tanh": lambda z: jnp.imag(jnp.sum(jnp.tanh(z) / (z * z + 2.0))),
    "matmul": lambda z: jnp.sum(jnp.abs(z @ jnp.conj(z).T) ** 2),
    "angle_mean": lambda z: jnp.sum(jnp.angle(z)) + jnp.abs(jnp.mean(z * z)),
    "control_flow": lambda z: _control_flow_loss(z),
    "pow": lambda z: jnp.sum(jnp.abs(z ** 2.5) + jnp.real(z ** (1 + 1j))),
    "var": lambda z: jnp.var(z) + jnp.std(z[0]),
    "linalg": lambda z: jnp.sum(jnp.abs(jnp.linalg.inv(z))) + jnp.abs(jnp.linalg.det(z))
    + jnp.sum(jnp.imag(jnp.linalg.solve(z, jnp.array([1.0, 1j])))),
}


@pytest.mark.parametrize("name", sorted(_LOSSES))
def test_real_loss_grad_matches_central_differences(name):
    f = _LOSSES[name]
    z = _cn(2, 2)
    want = _central_grad(f, z)
    np.testing.assert_allclose(jitgraph.grad(f)(z), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(jitgraph.jit(jitgraph.grad(f))(z), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name, f, df", [
    ("exp", jnp.exp, np.exp),
    ("sin_times", lambda z: jnp.sin(z) * z, lambda z: np.cos(z) * z + np.sin(z)),
    ("log_div", lambda z: jnp.log(z) / (z + 1.0),
     lambda z: (1 / z) / (z + 1) - np.log(z) / (z + 1) ** 2),
    ("sqrt_tanh", lambda z: jnp.sqrt(z) + jnp.tanh(z),
     lambda z: 0.5 / np.sqrt(z) + 1 - np.tanh(z) ** 2),
])
def test_holomorphic_grad_is_the_complex_derivative(name, f, df):
    z = 0.7 - 1.3j
    np.testing.assert_allclose(jitgraph.grad(f, holomorphic=True)(z), df(z), rtol=1e-12)
    eps = 1e-6                     # the derivative along the real axis, numerically
    np.testing.assert_allclose(jitgraph.grad(f, holomorphic=True)(z),
                               (complex(f(z + eps)) - complex(f(z - eps))) / (2 * eps),
                               rtol=1e-7)


def test_grad_errors_follow_jax():
    with pytest.raises(TypeError, match="real-valued output.*holomorphic=True"):
        jitgraph.grad(jnp.exp)(1j)
    with pytest.raises(TypeError, match="holomorphic=True.* requires complex inputs"):
        jitgraph.grad(jnp.exp, holomorphic=True)(1.0)


def test_real_input_gets_the_real_part_of_the_cotangent():
    # x real, promoted to complex: its gradient is real (the transpose of the embedding)
    f = lambda x: jnp.real(jnp.exp(1j * x) * (2 - 1j))         # noqa: E731
    x = 0.3
    want = (f(x + 1e-6) - f(x - 1e-6)) / 2e-6
    got = jitgraph.grad(f)(x)
    assert np.asarray(got).dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-7)


def test_jvp_of_parts_and_abs():
    z, t = _cn(3), _cn(3)
    f = lambda z: jnp.abs(z) + jnp.real(z) * jnp.imag(jnp.conj(z))   # noqa: E731
    eps = 1e-6
    want = (f(z + eps * t) - f(z - eps * t)) / (2 * eps)
    np.testing.assert_allclose(jitgraph.jvp(f, (z,), (t,))[1], want, rtol=1e-6)


# ------------------------------------------------------------------ the CUDA target
def test_cuda_target_refuses_complex_with_the_op_and_the_fix():
    graph = jitgraph.make_graph(lambda z: jnp.exp(z) * 2)(np.ones(3, np.complex64))
    with pytest.raises(TypeError, match=r"exp at .*complex64 \(3,\).*cuda target does not "
                                        r"compute complex.*device='cpu'"):
        pipeline.generate_graph(graph, pipeline.target_of("cuda"), CompileOptions())


# ------------------------------------------------------------------ fft
_FFT_CASES = [
    ("fft", lambda a: np.fft.fft(a), "c"), ("fft_n5", lambda a: np.fft.fft(a, 5), "c"),
    ("fft_n12_ortho", lambda a: np.fft.fft(a, 12, norm="ortho"), "c"),
    ("ifft_forward", lambda a: np.fft.ifft(a, norm="forward"), "c"),
    ("rfft", lambda a: np.fft.rfft(a), "r"), ("rfft_n7", lambda a: np.fft.rfft(a, 7), "r"),
    ("irfft", lambda a: np.fft.irfft(a), "c"), ("irfft_n9", lambda a: np.fft.irfft(a, 9), "c"),
    ("irfft_ortho", lambda a: np.fft.irfft(a, norm="ortho"), "c"),
    ("fft2", lambda a: np.fft.fft2(a), "c"), ("ifftn", lambda a: np.fft.ifftn(a), "c"),
    ("rfftn", lambda a: np.fft.rfftn(a), "r"), ("irfftn", lambda a: np.fft.irfftn(a), "c"),
    ("rfft2_forward", lambda a: np.fft.rfft2(a, norm="forward"), "r"),
    ("hfft", lambda a: np.fft.hfft(a), "c"), ("ihfft", lambda a: np.fft.ihfft(a), "r"),
    ("fftshift", lambda a: np.fft.fftshift(a), "r"), ("ifftshift", lambda a: np.fft.ifftshift(a, 1), "c"),
]


def _with(body, module):
    import types
    g = dict(body.__globals__)
    g["np"] = module
    return types.FunctionType(body.__code__, g)


def _operand_for(kind):
    return _cn(3, 8) if kind == "c" else _rng.standard_normal((3, 8))


@pytest.mark.parametrize("name, body, kind", _FFT_CASES, ids=[c[0] for c in _FFT_CASES])
def test_fft_matches_numpy_eager_and_compiled(name, body, kind):
    a = _operand_for(kind)
    f = _with(body, type("M", (), {"fft": jnp.fft}))
    want = body(a)
    for got in (f(a), jitgraph.jit(f)(a)):
        assert np.asarray(got).dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, body, kind", _FFT_CASES, ids=[c[0] for c in _FFT_CASES])
def test_fft_gradients_match_central_differences(name, body, kind):
    f = _with(body, type("M", (), {"fft": jnp.fft}))
    w = _cn(*np.shape(body(_operand_for(kind))))
    loss = lambda a: jnp.sum(jnp.real(f(a) * w))        # noqa: E731  (w: any weights)
    a = _operand_for(kind)
    if kind == "r":
        eps = 1e-6
        want = np.zeros_like(a)
        for k in np.ndindex(a.shape):
            d = np.zeros_like(a)
            d[k] = eps
            want[k] = (float(loss(a + d)) - float(loss(a - d))) / (2 * eps)
    else:
        want = _central_grad(loss, a)
    np.testing.assert_allclose(jitgraph.grad(loss)(a), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(jitgraph.jit(jitgraph.grad(loss))(a), want, rtol=1e-6, atol=1e-7)


def test_fft_helpers_and_float32():
    np.testing.assert_allclose(jnp.fft.fftfreq(5, 0.5), np.fft.fftfreq(5, 0.5))
    np.testing.assert_allclose(jnp.fft.rfftfreq(6), np.fft.rfftfreq(6))
    assert jnp.fft.fft(np.ones(4, np.float32)).dtype == np.complex64
    assert jnp.fft.irfft(np.ones(3, np.complex64)).dtype == np.float32
    with pytest.raises(TypeError, match="rfft: needs a real operand"):
        jnp.fft.rfft(np.ones(3, np.complex64))
