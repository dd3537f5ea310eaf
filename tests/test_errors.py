"""Every error path: the right exception type, and a message that names the op, the shapes and
the user's own source line (this file)."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import (ConcretizationError, LeakedTracerError, ShapeError, grad, jacfwd, jvp,
                      make_graph, value_and_grad, vjp)

THIS_FILE = os.path.basename(__file__)


def next_line() -> int:
    """The line number after the caller's line (where the failing call is written)."""
    return sys._getframe(1).f_lineno + 1


def assert_located(msg: str, line: int) -> None:
    assert f"{THIS_FILE}:{line}" in msg, f"expected {THIS_FILE}:{line} in:\n{msg}"


X23 = np.ones((2, 3))


# ------------------------------------------------------------------ shapes
@pytest.mark.parametrize("mode", ["eager", "make_graph", "grad"])
def test_broadcast_mismatch_names_op_shapes_and_line(mode):
    y = np.ones(4)
    with pytest.raises(ShapeError) as ei:
        if mode == "eager":
            line = next_line()
            jnp.add(X23, y)
        elif mode == "make_graph":
            line = next_line()
            make_graph(lambda x: x + y)(X23)
        else:
            line = next_line()
            grad(lambda x: jnp.sum(x * 2.0 + y))(X23)
    msg = str(ei.value)
    assert msg.startswith("add:")
    assert "(2, 3)" in msg and "(4,)" in msg
    assert "f64[2,3]" in msg and "f64[4]" in msg
    assert_located(msg, line)
    assert isinstance(ei.value, ValueError)      # ShapeError is a ValueError, as NumPy's


def test_other_elementwise_mismatch_names_primitive():
    with pytest.raises(ShapeError, match=r"^sub:.*\(3,\).*\(2,\)"):
        make_graph(lambda x: x - np.ones(2))(np.ones(3))
    with pytest.raises(ShapeError, match=r"^select:"):
        make_graph(lambda x: jnp.where(x > 0, x, np.ones(2)))(np.ones(3))
    with pytest.raises(ShapeError, match=r"^mul:"):
        grad(lambda x: jnp.sum(x * np.ones((3, 2))))(np.ones((2, 3)))


@pytest.mark.parametrize("mode", ["eager", "make_graph"])
def test_matmul_contracting_mismatch(mode):
    with pytest.raises(ShapeError) as ei:
        if mode == "eager":
            line = next_line()
            jnp.matmul(X23, np.ones((4, 2)))
        else:
            line = next_line()
            make_graph(lambda a, b: a @ b)(X23, np.ones((4, 2)))
    msg = str(ei.value)
    assert "matmul" in msg and "(2, 3)" in msg and "(4, 2)" in msg and "3 != 4" in msg
    assert_located(msg, line)


def test_matmul_other_errors():
    with pytest.raises(ShapeError, match="matmul.*batch.*"):
        make_graph(lambda a: a @ np.ones((2, 3, 3)))(np.ones((4, 3, 3)))
    with pytest.raises(ShapeError, match="matmul.*scalar"):
        make_graph(lambda a: a @ 2.0)(np.ones((3, 3)))
    with pytest.raises(ShapeError, match="matmul.*contracting"):
        make_graph(lambda a: jnp.dot(a, np.ones(4)))(np.ones(3))
    with pytest.raises(ShapeError, match="einsum.*'j'.*3.*2"):
        make_graph(lambda a: jnp.einsum("ij,jk->ik", a, a))(X23)
    with pytest.raises(ShapeError, match="einsum.*subscripts"):
        make_graph(lambda a: jnp.einsum("ij->", a))(np.ones(3))
    with pytest.raises(ValueError, match="einsum.*output.*repeats"):
        make_graph(lambda a: jnp.einsum("ij->ii", a))(np.ones((3, 3)))


def test_reshape_incompatible():
    with pytest.raises(ShapeError) as ei:
        line = next_line()
        make_graph(lambda x: x.reshape(4, 2))(np.ones(6))
    msg = str(ei.value)
    assert "reshape" in msg and "(6,)" in msg and "(4, 2)" in msg
    assert_located(msg, line)
    with pytest.raises(ShapeError, match="reshape.*size 6.*\\(-1, 4\\)") as ei:
        line = next_line()
        jnp.reshape(np.ones(6), (-1, 4))
    assert_located(str(ei.value), line)
    with pytest.raises(ShapeError, match="one unknown dimension"):
        make_graph(lambda x: jnp.reshape(x, (-1, -1)))(np.ones(6))


@pytest.mark.parametrize("fn, op", [
    (lambda x: jnp.sum(x, axis=2), "sum"),
    (lambda x: x.sum(axis=-3), "sum"),
    (lambda x: jnp.max(x, axis=(0, 5)), "max"),
    (lambda x: jnp.mean(x, axis=2), "mean"),
    (lambda x: jnp.var(x, axis=-3), "var"),
    (lambda x: jnp.argmax(x, axis=2), "argmax"),
    (lambda x: jnp.swapaxes(x, 0, 4), "swapaxes"),
    (lambda x: jnp.moveaxis(x, 0, 4), "moveaxis"),
    (lambda x: jnp.moveaxis(x, 3, 0), "moveaxis"),
    (lambda x: jnp.expand_dims(x, 5), "expand_dims"),
    (lambda x: jnp.squeeze(x, 3), "squeeze"),
    (lambda x: jnp.take(x, np.array([0]), axis=4), "take"),
    (lambda x: jnp.transpose(x, (0, 2)), "transpose"),
    (lambda x: jnp.transpose(x, (0, 0)), "transpose"),
    (lambda x: jnp.concatenate([x, x], axis=2), "concatenate"),
    (lambda x: jnp.stack([x, x], axis=4), "stack"),
    (lambda x: jnp.flip(x, axis=2), "flip"),
    (lambda x: jitgraph.nn.softmax(x, axis=2), "max"),
])
def test_bad_axis(fn, op):
    with pytest.raises(ShapeError) as ei:
        make_graph(fn)(X23)
    msg = str(ei.value)
    assert op in msg and "out of bounds" in msg or "permutation" in msg or "repeated" in msg, msg
    assert "(2, 3)" in msg or "dimension 2" in msg or "dimension 3" in msg
    assert THIS_FILE in msg
    # eager calls raise too (methods of NumPy arrays raise NumPy's AxisError, a ValueError)
    with pytest.raises(ValueError):
        fn(X23)


def test_squeeze_non_unit_axis():
    with pytest.raises(ShapeError) as ei:
        line = next_line()
        make_graph(lambda x: jnp.squeeze(x, 0))(X23)
    assert "squeeze" in str(ei.value) and "size 2" in str(ei.value)
    assert_located(str(ei.value), line)


def test_other_shape_errors():
    with pytest.raises(ShapeError, match="broadcast_to.*\\(2, 3\\).*\\(3, 3\\)"):
        make_graph(lambda x: jnp.broadcast_to(x, (3, 3)))(X23)
    with pytest.raises(ShapeError, match="concatenate.*\\(2, 3\\), \\(3, 2\\)"):
        make_graph(lambda x: jnp.concatenate([x, x.T]))(X23)
    with pytest.raises(ShapeError, match="zero-dimensional"):
        make_graph(lambda x: jnp.concatenate([x, x]))(1.0)
    with pytest.raises(ValueError, match="non-empty"):
        jnp.concatenate([])
    with pytest.raises(ShapeError, match="stack.*same shape"):
        make_graph(lambda x: jnp.stack([x, x.T]))(X23)
    with pytest.raises(ShapeError, match="take_along_axis.*same rank"):
        make_graph(lambda x: jnp.take_along_axis(x, np.array([0]), axis=0))(X23)
    with pytest.raises(ShapeError, match="reduce_max|max.*zero-size"):
        make_graph(lambda x: jnp.max(x))(np.ones((0, 3)))
    with pytest.raises(ShapeError, match="argmax.*empty"):
        make_graph(lambda x: jnp.argmax(x))(np.ones(0))


# ------------------------------------------------------------------ indexing
def test_out_of_bounds_basic_index():
    with pytest.raises(IndexError) as ei:
        line = next_line()
        make_graph(lambda x: x[5])(X23)
    msg = str(ei.value)
    assert "index 5 is out of bounds for axis 0 with size 2" in msg and "(2, 3)" in msg
    assert_located(msg, line)
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 1 with size 3"):
        make_graph(lambda x: x[1, -4])(X23)
    with pytest.raises(IndexError, match="too many indices.*2-dimensional.*3"):
        make_graph(lambda x: x[1, 2, 0])(X23)
    with pytest.raises(IndexError, match="single ellipsis"):
        make_graph(lambda x: x[..., 0, ...])(X23)
    with pytest.raises(IndexError, match="valid indices.*float"):
        make_graph(lambda x: x[1.0])(X23)
    with pytest.raises(IndexError, match="integer type.*float64"):
        make_graph(lambda x: x[np.array([0.5])])(X23)
    with pytest.raises(IndexError, match="boolean mask.*traced.*jnp.where"):
        make_graph(lambda x: x[x > 0])(X23)
    with pytest.raises(IndexError, match="newaxis"):
        make_graph(lambda x: x[None, np.array([0])])(X23)
    # eagerly (NumPy arrays are indexed by NumPy) the same index raises NumPy's IndexError
    with pytest.raises(IndexError):
        jnp.getitem(X23, 5)


# ------------------------------------------------------------------ control flow on traced values
def _branchy(x):
    if x > 0:
        return x * x
    return -3.0 * x


@pytest.mark.parametrize("fn, what", [
    (_branchy, "bool"),
    (lambda x: bool(x), "bool"),
    (lambda x: float(x), "float"),
    (lambda x: int(x), "int"),
    (lambda x: x.item(), "item"),
    (lambda x: x * 2 if x.sum() > 0 else x, "bool"),
])
def test_concretization_error_under_make_graph(fn, what):
    line = None
    with pytest.raises(ConcretizationError) as ei:
        make_graph(fn)(1.5)
    msg = str(ei.value)
    assert what in msg
    assert "jnp.where" in msg and "static_argnums" in msg
    assert "make_graph" in msg
    assert THIS_FILE in msg
    assert isinstance(ei.value, TypeError)
    del line


def test_concretization_error_points_at_the_if():
    def f(x):
        y = jnp.sin(x)
        if y > 0:   # the line reported
            return y
        return -y
    line = f.__code__.co_firstlineno + 2
    with pytest.raises(ConcretizationError) as ei:
        make_graph(f)(1.0)
    assert_located(str(ei.value), line)


def test_traced_python_index_needs_static():
    with pytest.raises(ConcretizationError, match="static_argnums"):
        make_graph(lambda n, x: x * len(range(n)))(3, 1.0)
    # marked static, the same function traces
    g = make_graph(lambda n, x: x * len(range(n)), static_argnums=0)(3, 1.0)
    assert jitgraph.interpret(g, [np.array(2.0)])[0] == 6.0
    with pytest.raises(TypeError, match="arange.*concrete"):
        make_graph(lambda n: jnp.arange(n))(3)


def test_control_flow_works_under_grad_with_concrete_values():
    # each call records the branch actually taken, so the derivative is that branch's
    assert float(grad(_branchy)(2.0)) == 4.0
    assert float(grad(_branchy)(-1.0)) == -3.0
    assert float(value_and_grad(_branchy)(-1.0)[0]) == 3.0
    _, t = jvp(_branchy, (2.0,), (1.0,))
    assert float(t) == 4.0
    _, t = jvp(_branchy, (-2.0,), (1.0,))
    assert float(t) == -3.0
    _, f_vjp = vjp(_branchy, -2.0)
    assert float(f_vjp(1.0)[0]) == -3.0
    assert float(grad(grad(_branchy))(2.0)) == 2.0
    assert float(grad(grad(_branchy))(-2.0)) == 0.0
    np.testing.assert_array_equal(jacfwd(lambda x: x * 2.0 if float(jnp.sum(x)) > 0 else x)(
        np.ones(2)), 2 * np.eye(2))

    # a while loop on values: Newton's iteration for sqrt, differentiated through the loop
    def newton_sqrt(a):
        x = a
        while abs(float(x * x - a)) > 1e-12:
            x = 0.5 * (x + a / x)
        return x
    assert float(newton_sqrt(2.0)) == pytest.approx(np.sqrt(2.0), rel=1e-15)
    assert float(grad(newton_sqrt)(2.0)) == pytest.approx(0.5 / np.sqrt(2.0), rel=1e-10)
    # int() and .item() work with concrete values too
    assert float(grad(lambda x: x * int(x))(3.0)) == 3.0


# ------------------------------------------------------------------ transform argument checks
@pytest.mark.parametrize("x, dtype", [(np.array([1, 2]), "int64"), (np.array(3, np.int32), "int32"),
                                      (np.array([True]), "bool"), (3, "int64")])
def test_grad_wrt_int_or_bool_is_type_error(x, dtype):
    with pytest.raises(TypeError) as ei:
        grad(lambda x: jnp.sum(x * 1.0))(x)
    msg = str(ei.value)
    assert "float" in msg and dtype in msg and "argument 0" in msg and "argnums" in msg
    with pytest.raises(TypeError, match="argument 1"):
        grad(lambda a, b: jnp.sum(a * b), argnums=(0, 1))(1.0, x)


def test_grad_non_scalar_output():
    with pytest.raises(TypeError) as ei:
        grad(lambda x: x * 2.0)(np.ones(3))
    msg = str(ei.value)
    assert "scalar" in msg and "(3,)" in msg and "jacrev" in msg
    assert THIS_FILE in msg          # names the user's function and where it is defined
    with pytest.raises(TypeError, match="scalar output.*tuple"):
        grad(lambda x: (x, x))(1.0)
    with pytest.raises(TypeError, match="float output.*int64"):
        grad(lambda x: jnp.sum(x > 0))(np.ones(2))
    with pytest.raises(TypeError, match="pair"):
        grad(lambda x: x, has_aux=True)(1.0)


def test_argnums_out_of_range():
    with pytest.raises(TypeError, match="argnums 3 is out of range for 1"):
        grad(lambda x: x, argnums=3)(1.0)


@pytest.mark.parametrize("bad", ["abc", b"xy", None, object()])
def test_non_array_inputs_to_transforms(bad):
    with pytest.raises(TypeError) as ei:
        grad(lambda x: jnp.sum(x))(bad)
    assert "argument 0" in str(ei.value)
    if bad is not None:   # None is an empty pytree for make_graph, as in JAX
        with pytest.raises(TypeError, match="argument 1"):
            make_graph(lambda x, y: x + y)(1.0, bad)


@pytest.mark.parametrize("bad, exc", [("abc", TypeError), (None, TypeError),
                                      ([[1.0, 2.0], [3.0]], ValueError), (["a", "b"], TypeError),
                                      (np.zeros(2, "datetime64[s]"), TypeError)])
def test_non_array_inputs_to_jnp(bad, exc):
    with pytest.raises(exc) as ei:
        line = next_line()
        jnp.sin(bad)
    msg = str(ei.value)
    assert msg.startswith("jnp.sin") and "argument" in msg
    assert_located(msg, line)
    with pytest.raises(exc, match="argument 1"):
        jnp.add(1.0, bad)
    with pytest.raises(exc, match="argument 1"):
        make_graph(lambda x: jnp.multiply(x, bad))(1.0)


def test_ragged_list_of_traced_values():
    with pytest.raises(ValueError, match="ragged"):
        make_graph(lambda x, y: jnp.sum(jnp.asarray([[x, y], [x]])))(1.0, 2.0)
    with pytest.raises(ValueError, match="ragged"):
        make_graph(lambda x, y: jnp.array([x, np.ones(2)]))(1.0, 2.0)


def test_jvp_vjp_argument_checks():
    with pytest.raises(ValueError, match="tangent shape \\(3,\\) does not match primal shape"):
        jvp(lambda x: x * 2.0, (np.ones(2),), (np.ones(3),))
    with pytest.raises(TypeError, match="tuples"):
        jvp(lambda x: x * 2.0, np.ones(2), np.ones(2))
    with pytest.raises(TypeError, match="structure"):
        jvp(lambda x, y: x * y, (1.0, 2.0), (1.0,))
    _, f_vjp = vjp(lambda x: x * 2.0, np.ones(2))
    with pytest.raises(ValueError, match="cotangent shape"):
        f_vjp(np.ones(3))
    _, f_vjp = vjp(lambda x: (x, x), np.ones(2))
    with pytest.raises(TypeError, match="structure"):
        f_vjp(np.ones(2))


# ------------------------------------------------------------------ escaping tracers
def test_leaked_tracer():
    leaked = []

    def f(x):
        leaked.append(x)
        return x * 2.0

    grad(f)(1.0)
    with pytest.raises(LeakedTracerError) as ei:
        line = next_line()
        leaked[0] + 1.0
    msg = str(ei.value)
    assert "add" in msg and "escape" in msg and "grad" in msg
    assert_located(msg, line)
    with pytest.raises(LeakedTracerError):
        jnp.sin(leaked[0])
    # used inside a later transformation
    with pytest.raises(LeakedTracerError, match="escape"):
        grad(lambda y: y * leaked[0])(3.0)
    with pytest.raises(LeakedTracerError):
        make_graph(lambda y: y + leaked[0])(3.0)
    # from make_graph too
    make_graph(f)(1.0)
    with pytest.raises(LeakedTracerError):
        jnp.exp(leaked[-1])


# ------------------------------------------------------------------ tracers in NumPy functions
@pytest.mark.parametrize("np_fn", [np.sin, np.exp, lambda x: np.dot(x, x),
                                   lambda x: np.where(x > 0, x, 0.0), np.asarray,
                                   lambda x: np.concatenate([x, x]), lambda x: np.matmul(x, x)])
@pytest.mark.parametrize("transform", ["make_graph", "grad"])
def test_tracer_in_numpy_function(np_fn, transform):
    with pytest.raises(TypeError) as ei:
        if transform == "make_graph":
            make_graph(np_fn)(np.ones(3))
        else:
            grad(lambda x: jnp.sum(np_fn(x)))(np.ones(3))
    msg = str(ei.value)
    assert "NumPy function" in msg and "jitgraph.numpy" in msg
    assert THIS_FILE in msg


def test_numpy_operators_and_methods_defer_to_tracers():
    # ndarray (op) tracer is the tracer's reflected operator, not a NumPy ufunc call
    def f(x):
        return np.ones(3) + x, np.ones(3) * x, np.float64(2.0) - x, np.ones(3) @ x, \
            np.ones(3) > x
    g = make_graph(f)(np.arange(3.0))
    outs = jitgraph.interpret(g, [np.arange(3.0)])
    np.testing.assert_array_equal(outs[0], 1 + np.arange(3.0))
    assert float(outs[3]) == 3.0
    # NumPy reductions call the method, which traces
    assert float(grad(lambda x: np.sum(x * x))(np.ones(2) * 3)[0]) == 6.0
    assert float(grad(lambda x: np.mean(x))(np.ones(2))[0]) == 0.5
    with pytest.raises(TypeError, match="out="):
        make_graph(lambda x: x.sum(out=np.zeros(())))(np.ones(2))


# ------------------------------------------------------------------ extension points
def test_custom_vjp_errors():
    @jitgraph.custom_vjp
    def f(x):
        return x * 2.0
    with pytest.raises(TypeError, match="defvjp"):
        grad(f)(1.0)
    f.defvjp(lambda x: (f(x), None), lambda r, g: (g, g))
    with pytest.raises(TypeError, match="one cotangent per argument"):
        grad(f)(1.0)
    f.defvjp(lambda x: f(x), lambda r, g: (g,))
    with pytest.raises(TypeError, match="fwd must return a pair"):
        grad(f)(1.0)


def test_primitive_without_rules():
    p = jitgraph.defprimitive("test_no_rules", impl=lambda x: x * 2.0)
    with pytest.raises(NotImplementedError, match="test_no_rules has no VJP rule") as ei:
        grad(lambda x: jnp.sum(p(x)))(np.ones(2))
    assert THIS_FILE in str(ei.value)
    with pytest.raises(NotImplementedError, match="test_no_rules has no JVP rule"):
        jvp(lambda x: p(x), (np.ones(2),), (np.ones(2),))
    with pytest.raises(ValueError, match="already exists"):
        jitgraph.defprimitive("test_no_rules", impl=lambda x: x)


def test_check_grads_reports_a_wrong_rule():
    wrong = jitgraph.defprimitive(
        "test_wrong_sin", impl=np.sin,
        vjp=lambda g, out, x: (g * jnp.cos(x) * 1.01,),
        jvp=lambda ts, out, x: ts[0] * jnp.cos(x))
    x = np.array([0.3, 0.5])
    jitgraph.check_grads(wrong, (x,), order=1, modes=("fwd",))       # the JVP is right
    with pytest.raises(jitgraph.GradCheckError) as ei:
        jitgraph.check_grads(wrong, (x,), order=1, modes=("rev",))
    msg = str(ei.value)
    assert "reverse-mode" in msg and "order 1" in msg and "autodiff" in msg
    assert "numerical" in msg
    with pytest.raises(ValueError, match="unknown mode"):
        jitgraph.check_grads(jnp.sin, (x,), modes=("bwd",))


def test_unsupported_dtypes():
    with pytest.raises(TypeError, match="datetime64"):
        grad(lambda x: jnp.sum(x))(np.zeros(2, "datetime64[s]"))
    with pytest.raises(TypeError, match="astype.*datetime64"):
        make_graph(lambda x: x.astype("datetime64[s]"))(np.ones(2))
    with pytest.raises(TypeError, match="real-valued output.*holomorphic=True"):
        grad(lambda x: jnp.sum(x))(np.ones(2, complex))     # (complex: supported, as JAX)
    with pytest.raises(TypeError, match="where.*both x and y"):
        make_graph(lambda x: jnp.where(x > 0))(np.ones(2))


def test_error_messages_do_not_show_internal_frames():
    with pytest.raises(ShapeError) as ei:
        make_graph(lambda x: jitgraph.nn.softmax(x) + np.ones(4))(X23)
    msg = str(ei.value)
    loc = re.findall(r"at (\S+):(\d+)", msg)
    assert loc and all(os.path.basename(f) == THIS_FILE for f, _ in loc), msg


@pytest.mark.parametrize("fn, op", [(lambda x: x & 1, "&"), (lambda x: 2 | x, "|"),
                                    (lambda x: ~x, "~"), (lambda x: (x > 0) & x, "&")])
def test_bitwise_operators_on_integers_are_refused(fn, op):
    # NumPy's & | ~ on integers are bitwise; there is no bitwise primitive, so rather than
    # silently computing a logical result they raise (bool operands work, see cases.py)
    with pytest.raises(TypeError) as ei:
        make_graph(fn)(np.array([5, 6, 7]))
    msg = str(ei.value)
    assert op in msg and "int64" in msg and "logical" in msg and THIS_FILE in msg


def test_traced_values_are_immutable():
    def f(x):
        x[0] = 1.0
        return x
    with pytest.raises(TypeError, match="immutable.*jnp.where") as ei:
        make_graph(f)(np.ones(3))
    assert THIS_FILE in str(ei.value)
    with pytest.raises(TypeError, match="immutable"):
        grad(lambda x: jnp.sum(f(x)))(np.ones(3))


def test_tracing_in_several_threads_does_not_interleave():
    """Each thread has its own trace nesting, so concurrent grads stay correct."""
    import threading

    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                x = rng.standard_normal(5)
                g = jitgraph.grad(lambda v: jnp.sum(jnp.sin(v) * v))(x)
                np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-12)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
