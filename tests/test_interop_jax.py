"""rvm.interop.jax_function: jit, grad, jvp, hessian and vmap of an rvm program, against
rvm's own API and central finite differences."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rvm

jax = pytest.importorskip("jax", reason="JAX is not installed: pip install -e '.[interop]'")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

from rvm.interop import jax_function  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

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


def test_value_and_jit(bessel, ffi):
    f = jax_function(bessel, of="out", wrt=["z"], ffi=ffi)
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


@pytest.fixture(params=[None, False], ids=["ffi", "pure_callback"])
def ffi(request):
    """Both host-call mechanisms: the XLA FFI call (where it builds) and pure_callback."""
    return request.param


def test_jvp_is_rvms_tangent_mode(bessel, ffi):
    f = jax_function(bessel, of="out", wrt=["z"], ffi=ffi)
    value, tangent = jax.jvp(f, (3.0,), (2.0,))
    assert float(value) == rvm.run(bessel, {"z": 3.0}).outputs["out"]
    assert float(tangent) == rvm.jvp(bessel, {"z": 3.0}, {"z": 2.0})["out"]
    _, tangent = jax.jit(lambda z, t: jax.jvp(f, (z,), (t,)))(1.5, -0.5)
    assert float(tangent) == rvm.jvp(bessel, {"z": 1.5}, {"z": -0.5})["out"]
    assert float(jax.jacfwd(f)(2.0)) == rvm.jvp(bessel, {"z": 2.0}, {"z": 1.0})["out"]


def test_repeated_jvps_take_the_c_call(bessel):
    """With native tangent code, jax.jvp's host call runs rvm's JvpCall (rvm/_runcall.pxi)
    after its first call: the same tangents, bit for bit."""
    f = jax_function(bessel, of="out", wrt=["z"], native=True)
    jf = jax.jit(lambda z, t: jax.jvp(f, (z,), (t,)))
    for z, t in ((1.5, -0.5), (3.0, 2.0), (0.25, 1.0)):
        want = rvm.derivatives(bessel, None, (), {"z": z}, gradient=False, tangents={"z": t},
                               native=False).tangent["out"]
        assert float(jf(z, t)[1]) == want
    assert getattr(f.host._machines, "jvp", None) is not None     # (this thread's)


def test_hessian(bessel, ffi):
    f = jax_function(bessel, of="out", wrt=["z"], ffi=ffi)
    want = rvm.hessian(bessel, of="out", wrt=["z"], inputs={"z": 3.0})[0, 0]
    assert float(jax.hessian(f)(3.0)) == want
    assert float(jax.jit(jax.hessian(f))(3.0)) == want
    # reverse over reverse and forward over forward: rvm's Hessian-vector product as well
    assert float(jax.jacrev(jax.grad(f))(3.0)) == want
    assert float(jax.jit(jax.jacrev(jax.grad(f)))(3.0)) == want
    assert float(jax.jacfwd(jax.jacfwd(f))(3.0)) == want
    g = jax_function(bessel, of="out", wrt="z", ffi=ffi)
    assert float(jax.hessian(g)(1.5)) == pytest.approx(
        fd(lambda z: jax.grad(g)(float(z)), 1.5), rel=1e-6)


def test_third_derivatives_are_refused(bessel):
    f = jax_function(bessel, of="out", wrt=["z"])
    with pytest.raises(NotImplementedError, match="third derivatives"):
        jax.grad(jax.grad(jax.grad(f)))(3.0)


def test_value_and_grad_is_one_host_call(bessel):
    """jit(value_and_grad(f)) and jit(grad(f)) each make one call of the program."""
    f = jax_function(bessel, of="out", wrt=["z"])
    if not f.mechanism.startswith("XLA FFI"):
        pytest.skip(f.mechanism)
    calls = []
    vg = f.host.vg
    f._ops["vg"] = lambda *a: calls.append(a) or vg(*a)
    from rvm.interop import jax_ffi
    f._keys["vg"] = np.int64(jax_ffi.register(f._ops["vg"]))
    value, g = jax.jit(jax.value_and_grad(f))(3.0)
    assert len(calls) == 1
    assert float(value) == rvm.run(bessel, {"z": 3.0}).outputs["out"]
    assert float(g) == rvm.grad(bessel, of="out", wrt="z", inputs={"z": 3.0})["z"]
    jax.jit(jax.grad(f))(3.0)
    assert len(calls) == 2


def test_vmap_is_rvms_batch_mode(mixed, ffi):
    """vmap(grad f) is one GradFn.batch call, bit for bit the loop of single calls."""
    f = jax_function(mixed, of="out", wrt=["a", "w"], ffi=ffi)
    calls = []
    batch = f.host.gf.batch
    f.host.gf.batch = lambda inputs, **kw: calls.append(inputs) or batch(inputs, **kw)
    rng = np.random.default_rng(3)
    a, w = rng.normal(size=(100, 3)), rng.normal(size=100)
    ga, gw = jax.jit(jax.vmap(jax.grad(f, argnums=(0, 1))))(a, w)
    values = jax.vmap(f)(a, w)
    assert len(calls) == 2 and calls[0]["a"].shape == (100, 3)
    for k in range(100):
        d = rvm.derivatives(mixed, of="out", wrt=["a", "w"], inputs={"a": a[k], "w": w[k]})
        assert np.array_equal(ga[k], d.gradient["a"]) and float(gw[k]) == d.gradient["w"]
        assert float(values[k]) == d.value


def test_vmap_without_native_code(bessel):
    """The batch mode's interpreted rows give the same values and gradients."""
    f = jax_function(bessel, of="out", wrt="z", native=False)
    zs = np.array([0.5, 1.5, 2.5])
    value, g = jax.vmap(jax.value_and_grad(f))(zs)
    for k, z in enumerate(zs):
        d = rvm.derivatives(bessel, of="out", wrt="z", inputs={"z": float(z)})
        assert float(value[k]) == d.value and float(g[k]) == d.gradient["z"]


def test_vmap_of_values_gradients_tangents_hessians(bessel, ffi):
    f = jax_function(bessel, of="out", wrt=["z"], ffi=ffi)
    zs = jnp.array([0.5, 1.0, 2.0, 3.0])
    values = [rvm.run(bessel, {"z": float(z)}).outputs["out"] for z in zs]
    grads = [rvm.grad(bessel, of="out", wrt="z", inputs={"z": float(z)})["z"] for z in zs]
    hess = [rvm.hessian(bessel, of="out", wrt="z", inputs={"z": float(z)})[0, 0] for z in zs]
    assert np.array_equal(jax.vmap(f)(zs), values)
    assert np.array_equal(jax.jit(jax.vmap(jax.grad(f)))(zs), grads)
    assert np.array_equal(jax.vmap(jax.hessian(f))(zs), hess)
    assert np.array_equal(jax.vmap(jax.vmap(f))(zs.reshape(2, 2)), np.reshape(values, (2, 2)))
    tangents = [rvm.jvp(bessel, {"z": float(z)}, {"z": 0.5})["out"] for z in zs]
    assert np.array_equal(jax.vmap(lambda z: jax.jvp(f, (z,), (0.5,))[1])(zs), tangents)
    assert np.array_equal(jax.vmap(jax.jacrev(jax.grad(f)))(zs), hess)


def test_arrays_and_several_arguments(mixed, ffi):
    f = jax_function(mixed, of="out", wrt=["a", "w"], ffi=ffi)
    a, w = np.array([0.3, -1.2, 2.0]), 1.7
    d = rvm.derivatives(mixed, of="out", wrt=["a", "w"], inputs={"a": a, "w": w}, hessian=True)
    assert float(f(a, w)) == d.value
    ga, gw = jax.grad(f, argnums=(0, 1))(a, w)
    assert np.array_equal(ga, d.gradient["a"]) and float(gw) == d.gradient["w"]
    np.testing.assert_allclose(ga, fd(lambda x: f(x, w), a), rtol=1e-7)
    # the Hessian blocks, against rvm's Hessian over (a[0], a[1], a[2], w)
    # (jax.hessian's basis vectors at one point: rvm's Hessian columns, one call)
    H = jax.hessian(f, argnums=(0, 1))(a, w)
    assert np.array_equal(H[0][0], d.hessian[:3, :3])
    assert np.array_equal(H[0][1], d.hessian[:3, 3]) and np.array_equal(H[1][0], d.hessian[3, :3])
    assert float(H[1][1]) == d.hessian[3, 3]
    # one Hessian-vector product along a direction that is not a basis vector: rvm.hvp's
    hv = jax.jvp(jax.grad(f, argnums=(0, 1)), (a, w), (np.array([0.5, 1.0, -1.0]), 2.0))[1]
    want_hv = rvm.hvp(mixed, of="out", wrt=["a", "w"], inputs={"a": a, "w": w},
                      v={"a": np.array([0.5, 1.0, -1.0]), "w": 2.0})
    assert np.array_equal(hv[0], want_hv["a"]) and float(hv[1]) == want_hv["w"]
    # jvp along a direction, against rvm's tangent mode
    ta, tw = np.array([1.0, 0.5, -2.0]), 0.25
    _, t = jax.jvp(f, (a, w), (ta, tw))
    want = rvm.jvp(mixed, {"a": a, "w": w}, {"a": ta, "w": tw})["out"]
    assert float(t) == want
    # reverse over reverse: the Hessian blocks again
    H2 = jax.jacrev(jax.grad(f, argnums=(0, 1)), argnums=(0, 1))(a, w)
    # (reverse mode transposes H v as H ct: rows come back as rvm's columns, which equal
    # the rows to rounding; rvm's Hessian is symmetric to the last bits only)
    assert np.array_equal(H2[0][0], d.hessian[:3, :3].T)
    assert np.array_equal(H2[1][0], d.hessian[:3, 3])
    np.testing.assert_allclose(H2[1][0], d.hessian[3, :3], rtol=1e-13)
    # a batch of directions at one point that are not all basis vectors: one HVP each
    vs = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.3, 0.0, 1.0]])
    got = jax.vmap(lambda v: jax.jvp(lambda x: jax.grad(f)(x, w), (a,), (v,))[1])(vs)
    for row, v in zip(got, vs):
        assert np.array_equal(row, rvm.hvp(mixed, of="out", wrt=["a", "w"],
                                           inputs={"a": a, "w": w}, v={"a": v, "w": 0.0})["a"])
    # vmap over a batch of arrays (the scalar broadcast)
    batch = np.stack([a, 2 * a, -a])
    got = jax.vmap(jax.grad(f), in_axes=(0, None))(batch, w)
    for row, x in zip(got, batch):
        assert np.array_equal(row, rvm.grad(mixed, of="out", wrt="a",
                                            inputs={"a": x, "w": w})["a"])
    # leading batch dimensions broadcast: a batch of arrays with one w
    losses = f(batch, w)
    assert losses.shape == (3,)
    assert [float(v) for v in losses] == [
        rvm.run(mixed, {"a": x, "w": w}).outputs["out"] for x in batch]


def test_element_wrt_and_fixed_inputs(mixed):
    f = jax_function(mixed, of="out", wrt=["a[1]"], inputs={"a": [0.3, -1.2, 2.0], "w": 2.0})
    want = rvm.grad(mixed, of="out", wrt="a[1]", inputs={"a": [0.3, 0.4, 2.0], "w": 2.0})
    assert float(jax.grad(f)(0.4)) == want["a[1]"]
    # tangent mode seeds whole cells: an element's tangent is its gradient times the tangent
    assert float(jax.jvp(f, (0.4,), (2.0,))[1]) == 2.0 * want["a[1]"]


def test_shape_and_arity_errors(mixed):
    f = jax_function(mixed, of="out", wrt=["a", "w"])
    with pytest.raises(TypeError, match="takes 2 arguments"):
        f(np.zeros(3))
    with pytest.raises(ValueError, match="expected shape"):
        f(np.zeros(4), 1.0)


def test_a_trap_surfaces_as_the_rvm_error(ffi):
    prog = rvm.assemble("input x: float\noutput y: float\nfunc main() {\n  y += 1.0 / x\n}\n")
    f = jax_function(prog, of="y", wrt="x", ffi=ffi)
    assert float(f(2.0)) == 0.5
    with pytest.raises(Exception, match="division by zero"):
        jax.block_until_ready(f(0.0))


def test_float32_without_x64(bessel, ffi):
    """With x64 off, JAX's default, results come back as float32."""
    f = jax_function(bessel, of="out", wrt="z", ffi=ffi)
    with jax.enable_x64(False):
        g = jax.grad(f)(np.float32(3.0))
        assert g.dtype == np.float32
        assert float(g) == pytest.approx(0.0149981181, rel=1e-6)


def test_ffi_falls_back_to_pure_callback_without_a_compiler(tmp_path):
    """No C compiler (and nothing in the cache): jax_function says so and uses
    pure_callback, with the same results."""
    script = (
        "import jax, rvm\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "from rvm.interop import jax_function\n"
        "f = jax_function(rvm.assemble('programs/besselj_rec.rasm'), of='out', wrt='z')\n"
        "print(f.mechanism)\n"
        "print(repr(float(jax.jit(jax.grad(f))(3.0))))\n")
    env = dict(os.environ, RVM_CACHE_DIR=str(tmp_path / "cache"), CC="no-such-cc",
               PATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    mechanism, value = out.stdout.splitlines()
    assert mechanism == ("jax.pure_callback (the XLA FFI call is unavailable: "
                         "no C compiler found (set CC))")
    assert float(value) == rvm.grad(ROOT / "programs" / "besselj_rec.rasm", of="out",
                                    wrt="z", inputs={"z": 3.0})["z"]
    # ffi=True insists: the reason is the error
    out = subprocess.run([sys.executable, "-c", script.replace("wrt='z')", "wrt='z', ffi=True)")],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 1
    assert "Unavailable: no C compiler found (set CC)" in out.stderr


def test_the_ffi_call_is_used_where_it_builds(bessel):
    """Here (a C compiler and jaxlib's FFI headers) jax_function calls the host through the
    XLA FFI target, and jit(grad(f)) lowers to that custom call."""
    from rvm.interop import jax_ffi
    try:
        jax_ffi.target()
    except jax_ffi.Unavailable as e:
        pytest.skip(str(e))
    f = jax_function(bessel, of="out", wrt="z")
    assert f.mechanism == "XLA FFI custom call"
    assert "rvm_host_call" in jax.jit(jax.grad(f)).lower(3.0).as_text()


def test_float32_arrays_without_x64(mixed, ffi):
    """float32 array operands are widened for rvm and its results narrowed back."""
    f = jax_function(mixed, of="out", wrt=["a", "w"], ffi=ffi)
    a = np.array([0.3, -1.2, 2.0], np.float32)
    want = rvm.grad(mixed, of="out", wrt="a", inputs={"a": a.astype(np.float64), "w": 1.5})
    with jax.enable_x64(False):
        g = jax.grad(f)(a, np.float32(1.5))
        assert g.dtype == np.float32
        np.testing.assert_array_equal(g, want["a"].astype(np.float32))
        batch = jax.vmap(jax.grad(f), in_axes=(0, None))(np.stack([a, a]), np.float32(1.5))
        np.testing.assert_array_equal(batch, np.stack([want["a"]] * 2).astype(np.float32))


def test_threads_calling_one_jitted_gradient(bessel, ffi):
    """Threads share a jitted rvm gradient: each gets rvm's value (GradFn gives each thread a
    machine of its own; the FFI handler takes the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    f = jax_function(bessel, of="out", wrt="z", ffi=ffi)
    jg = jax.jit(jax.grad(f))
    zs = [0.25 * k for k in range(1, 41)]
    want = [rvm.grad(bessel, of="out", wrt="z", inputs={"z": z})["z"] for z in zs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda z: float(jg(z)), zs))
    assert got == want
