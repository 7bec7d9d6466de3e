"""rvm.interop.jax_function: jit, grad, jvp, hessian and vmap of an rvm program, against
rvm's own API and central finite differences."""
import numpy as np
import pytest

import rvm

jax = pytest.importorskip("jax", reason="JAX is not installed: pip install -e '.[interop]'")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

from rvm.interop import jax_function  # noqa: E402

MIXED = """
input  a: float[3]
input  w: float
output out: float
func main() {
    for i in 0..3 {
        out += w * sin(a[i]) * a[i]
    }
}
"""


@pytest.fixture(scope="module")
def bessel():
    return rvm.assemble("programs/besselj_rec.rasm")


@pytest.fixture(scope="module")
def mixed():
    return rvm.assemble(MIXED)


def fd(f, x, h=1e-6):
    """Central finite differences of a scalar function of one array, in float64."""
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for k in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[k] = h
        g[k] = (float(f(x + e)) - float(f(x - e))) / (2 * h)
    return g


def test_value_and_jit(bessel):
    f = jax_function(bessel, of="out", wrt=["z"])
    want = rvm.run(bessel, {"z": 2.5}).outputs["out"]
    assert float(f(2.5)) == want
    assert float(jax.jit(f)(2.5)) == want


def test_grad_is_rvms_adjoint(bessel):
    f = jax_function(bessel, of="out", wrt="z", inputs={"nu": 1})
    for z in (0.5, 2.0, 3.0):
        want = rvm.grad(bessel, of="out", wrt="z", inputs={"z": z, "nu": 1})["z"]
        assert float(jax.grad(f)(z)) == want
        assert float(jax.jit(jax.grad(f))(z)) == want
    assert float(jax.grad(f)(2.0)) == pytest.approx(fd(lambda z: f(float(z)), 2.0), rel=1e-7)


def test_jvp_matches_rvm_tangent_mode(bessel):
    f = jax_function(bessel, of="out", wrt=["z"])
    value, tangent = jax.jvp(f, (3.0,), (2.0,))
    want = rvm.jvp(bessel, {"z": 3.0}, {"z": 2.0})["out"]
    assert float(value) == rvm.run(bessel, {"z": 3.0}).outputs["out"]
    assert float(tangent) == pytest.approx(want, rel=1e-14)


def test_hessian(bessel):
    f = jax_function(bessel, of="out", wrt=["z"])
    want = rvm.hessian(bessel, of="out", wrt=["z"], inputs={"z": 3.0})[0, 0]
    assert float(jax.hessian(f)(3.0)) == want
    assert float(jax.jit(jax.hessian(f))(3.0)) == want
    g = jax_function(bessel, of="out", wrt="z")
    assert float(jax.hessian(g)(1.5)) == pytest.approx(
        fd(lambda z: jax.grad(g)(float(z)), 1.5), rel=1e-6)


def test_vmap_loops_over_the_batch(bessel):
    f = jax_function(bessel, of="out", wrt=["z"])
    zs = jnp.array([0.5, 1.0, 2.0, 3.0])
    values = [rvm.run(bessel, {"z": float(z)}).outputs["out"] for z in zs]
    grads = [rvm.grad(bessel, of="out", wrt="z", inputs={"z": float(z)})["z"] for z in zs]
    hess = [rvm.hessian(bessel, of="out", wrt="z", inputs={"z": float(z)})[0, 0] for z in zs]
    assert np.array_equal(jax.vmap(f)(zs), values)
    assert np.array_equal(jax.jit(jax.vmap(jax.grad(f)))(zs), grads)
    assert np.array_equal(jax.vmap(jax.hessian(f))(zs), hess)
    assert np.array_equal(jax.vmap(jax.vmap(f))(zs.reshape(2, 2)), np.reshape(values, (2, 2)))


def test_arrays_and_several_arguments(mixed):
    f = jax_function(mixed, of="out", wrt=["a", "w"])
    a, w = np.array([0.3, -1.2, 2.0]), 1.7
    d = rvm.derivatives(mixed, of="out", wrt=["a", "w"], inputs={"a": a, "w": w}, hessian=True)
    assert float(f(a, w)) == d.value
    ga, gw = jax.grad(f, argnums=(0, 1))(a, w)
    assert np.array_equal(ga, d.gradient["a"]) and float(gw) == d.gradient["w"]
    np.testing.assert_allclose(ga, fd(lambda x: f(x, w), a), rtol=1e-7)
    # the Hessian blocks, against rvm's Hessian over (a[0], a[1], a[2], w)
    H = jax.hessian(f, argnums=(0, 1))(a, w)
    np.testing.assert_allclose(H[0][0], d.hessian[:3, :3], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(H[0][1], d.hessian[:3, 3], rtol=1e-13)
    np.testing.assert_allclose(H[1][1], d.hessian[3, 3], atol=1e-15)
    # jvp along a direction, against rvm's tangent mode
    ta, tw = np.array([1.0, 0.5, -2.0]), 0.25
    _, t = jax.jvp(f, (a, w), (ta, tw))
    want = rvm.jvp(mixed, {"a": a, "w": w}, {"a": ta, "w": tw})["out"]
    assert float(t) == pytest.approx(want, rel=1e-13)
    # vmap over a batch of arrays (the scalar broadcast)
    batch = np.stack([a, 2 * a, -a])
    got = jax.vmap(jax.grad(f), in_axes=(0, None))(batch, w)
    for row, x in zip(got, batch):
        assert np.array_equal(row, rvm.grad(mixed, of="out", wrt="a",
                                            inputs={"a": x, "w": w})["a"])


def test_element_wrt_and_fixed_inputs(mixed):
    f = jax_function(mixed, of="out", wrt=["a[1]"], inputs={"a": [0.3, -1.2, 2.0], "w": 2.0})
    want = rvm.grad(mixed, of="out", wrt="a[1]", inputs={"a": [0.3, 0.4, 2.0], "w": 2.0})
    assert float(jax.grad(f)(0.4)) == want["a[1]"]


def test_shape_and_arity_errors(mixed):
    f = jax_function(mixed, of="out", wrt=["a", "w"])
    with pytest.raises(TypeError, match="takes 2 arguments"):
        f(np.zeros(3))
    with pytest.raises(ValueError, match="expected shape"):
        f(np.zeros(4), 1.0)


def test_a_trap_surfaces_as_the_rvm_error():
    prog = rvm.assemble("input x: float\noutput y: float\nfunc main() {\n  y += 1.0 / x\n}\n")
    f = jax_function(prog, of="y", wrt="x")
    assert float(f(2.0)) == 0.5
    with pytest.raises(Exception, match="division by zero"):
        jax.block_until_ready(f(0.0))


def test_float32_without_x64(bessel):
    """With x64 off, JAX's default, results come back as float32."""
    f = jax_function(bessel, of="out", wrt="z")
    with jax.enable_x64(False):
        g = jax.grad(f)(np.float32(3.0))
        assert g.dtype == np.float32
        assert float(g) == pytest.approx(0.0149981181, rel=1e-6)
