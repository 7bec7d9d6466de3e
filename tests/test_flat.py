"""The flat call (issue 16): f.flat(x) -> (loss, gradient) over the wrt cells in the order of
f.wrt_cells gives the dict call's loss and gradient bit for bit, native or interpreted."""
from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

import rvm

PETERSEN = "programs/petersen.rasm"


@pytest.mark.parametrize("native", [False, None])
def test_flat_is_the_dict_call(native):
    prog = rvm.assemble("programs/umm.rasm")
    f = rvm.grad_fn(prog, of="loss", wrt="x,theta", native=native)
    ref = rvm.grad_fn(prog, of="loss", wrt="x,theta", native=False)
    assert f.wrt_cells == [f"x[{k}]" for k in range(4)] + [f"theta[{k}]" for k in range(6)]
    rng = np.random.default_rng(3)
    for _ in range(12):                 # before and after the fast path (and native code)
        x, th = rng.standard_normal(4), rng.standard_normal(6)
        loss, g = f.flat(np.concatenate([x, th]))
        want = ref({"x": x, "theta": th})
        assert g.tobytes() == np.concatenate([want["x"], want["theta"]]).tobytes()
        assert loss == ref.last.value and isinstance(loss, float)
    out = np.empty(10)
    loss2, g2 = f.flat(np.concatenate([x, th]), out)
    assert g2 is out and out.tobytes() == g.tobytes() and loss2 == loss
    assert f.flat_call is not None


def test_flat_takes_lists_and_checks_its_vectors():
    f = rvm.grad_fn(rvm.assemble("programs/besselj_rec.rasm"), of="out", wrt="z")
    loss, g = f.flat([3.0])
    assert g.shape == (1,) and g[0] == f({"z": 3.0})["z"]
    assert loss == pytest.approx(0.486091260585891, rel=1e-12)        # J_2(3)
    with pytest.raises(ValueError, match="1 values"):
        f.flat(np.zeros(2))
    with pytest.raises(ValueError, match="out must be"):
        f.flat(np.zeros(1), np.zeros(2))


def test_a_fixed_wrt_cell_takes_the_general_path():
    prog = rvm.assemble("programs/besselj_fixed.rasm")
    f = rvm.grad_fn(prog, of="out", wrt="z")
    z = float(rvm.run(prog).inputs["z"])
    loss, g = f.flat([z])
    assert f.flat_call is None and g[0] == f({"z": z})["z"]


def test_threads_sharing_a_flat_call_get_their_own_lanes():
    prog = rvm.assemble(PETERSEN)
    f = rvm.grad_fn(prog, of="loss", wrt="x")
    xs = np.random.default_rng(5).standard_normal((16, 40))
    want = [f.flat(x) for x in xs]
    got: dict[int, tuple] = {}

    def work(k):
        for i in range(k, 16, 4):
            got[i] = f.flat(xs[i])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(16):
        assert got[i][0] == want[i][0] and got[i][1].tobytes() == want[i][1].tobytes()


@pytest.mark.parametrize("native", [False, True])
def test_flat_tangent_forms_are_the_dict_calls(native):
    """hvp_flat, hessian_flat and jvp_flat give rvm.hvp, rvm.hessian and rvm.jvp bit for bit,
    the vectors and the Hessian's rows and columns in wrt_cells order."""
    prog = rvm.assemble("programs/umm.rasm")
    f = rvm.grad_fn(prog, of="loss", wrt="x,theta", native=native)
    ref = rvm.assemble("programs/umm.rasm")          # the dict calls on a Program of their own
    rng = np.random.default_rng(7)
    for _ in range(6):
        x, v = rng.standard_normal(10), rng.standard_normal(10)
        d = {"x": x[:4].copy(), "theta": x[4:].copy()}
        vd = {"x": v[:4].copy(), "theta": v[4:].copy()}
        loss, hv = f.hvp_flat(x, v)
        want = rvm.hvp(ref, of="loss", wrt=["x", "theta"], v=vd, inputs=d)
        assert hv.tobytes() == np.concatenate([want["x"], want["theta"]]).tobytes()
        loss2, h = f.hessian_flat(x)
        want_h = rvm.hessian(ref, of="loss", wrt=["x", "theta"], inputs=d)
        assert h.shape == (10, 10) and h.tobytes() == want_h.tobytes()
        loss3, t = f.jvp_flat(x, v)
        assert t == rvm.jvp(ref, d, vd)["loss"] and isinstance(t, float)
        assert loss == loss2 == loss3 == f.flat(x)[0] == rvm.run(ref, d).outputs["loss"]
    assert f.runner.core.native_tangent is bool(native)
    out, hout = np.empty(10), np.empty((10, 10))
    assert f.hvp_flat(x, v, out)[1] is out and out.tobytes() == hv.tobytes()
    assert f.hessian_flat(x, hout)[1] is hout and hout.tobytes() == h.tobytes()
    with pytest.raises(ValueError, match="10 values"):
        f.hvp_flat(x, v[:3])
    with pytest.raises(ValueError, match="10 values"):
        f.jvp_flat(x[:9], v)
    with pytest.raises(ValueError, match=r"shape \(10, 10\)"):
        f.hessian_flat(x, np.empty((10, 9)))



def test_flat_tangent_vectors_in_any_form():
    """hvp_flat and jvp_flat take v as a list, a strided view, an int, float32 or byte-swapped
    array or a contiguous float64 vector in the machine's byte order (taken as it is, with
    no conversion call), with the same results bit for bit, and refuse a v of another shape
    with the same error."""
    prog = rvm.assemble("programs/umm.rasm")
    f = rvm.grad_fn(prog, of="loss", wrt="x,theta", native=True)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(10)
    v = np.arange(1, 11, dtype=np.float64)
    want_hv, want_t = f.hvp_flat(x, v)[1].copy(), f.jvp_flat(x, v)[1]
    assert f.runner.core.native_tangent
    wide = np.zeros(20)
    wide[::2] = v
    for form in (v, list(v), wide[::2], v.astype(np.int64), v.astype(np.float32),
                 v.astype(v.dtype.newbyteorder())):
        for _ in range(3):
            assert f.hvp_flat(x, form)[1].tobytes() == want_hv.tobytes()
            assert f.jvp_flat(x, form)[1] == want_t
    for bad in (v[:9], v.reshape(2, 5), np.float64(1.0)):
        msg = re.escape(f"v must be a vector of 10 values (the wrt cells), got shape "
                        f"{np.shape(bad)}")
        with pytest.raises(ValueError, match=msg):
            f.hvp_flat(x, bad)
        with pytest.raises(ValueError, match=msg):
            f.jvp_flat(x, bad)


def test_flat_tangent_forms_on_another_thread():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    f = rvm.grad_fn(prog, of="out", wrt="z", native=True)
    want = f.hessian_flat([3.0])[1]
    got: list = []
    t = threading.Thread(target=lambda: got.append(f.hessian_flat(np.array([3.0]))[1]))
    t.start()
    t.join()
    assert got[0].tobytes() == want.tobytes()
    assert want[0, 0] == rvm.hessian(prog, of="out", wrt=["z"], inputs={"z": 3.0})[0, 0]
    # J_2''(3) against a finite difference of the gradient
    g = [f.flat([3.0 + s])[1][0] for s in (1e-5, -1e-5)]
    assert want[0, 0] == pytest.approx((g[0] - g[1]) / 2e-5, rel=1e-6)


@pytest.mark.parametrize("native", [True, None])
def test_hvp_flat_builds_the_scalar_modes_and_a_later_hessian_flat_the_lanes(native):
    """hvp_flat and jvp_flat take one direction: they install the tangent library's scalar
    modes alone.  A hessian_flat over several cells afterwards still gets the lane modes
    (built now with native=True, in the background after a few calls with native=None),
    though its C call could run on the scalar modes: it goes through native_tangent.prepare
    until they are there.  Every result is the interpreter's bit for bit."""
    prog = rvm.assemble("programs/umm.rasm")
    f = rvm.grad_fn(prog, of="loss", wrt="x,theta", native=native)
    ref = rvm.assemble("programs/umm.rasm")
    core = f.runner.core
    rng = np.random.default_rng(11)
    x, v = rng.standard_normal(10), rng.standard_normal(10)
    d = {"x": x[:4].copy(), "theta": x[4:].copy()}
    vd = {"x": v[:4].copy(), "theta": v[4:].copy()}
    want_hv = rvm.hvp(ref, of="loss", wrt=["x", "theta"], v=vd, inputs=d, native=False)
    want_h = rvm.hessian(ref, of="loss", wrt=["x", "theta"], inputs=d, native=False)
    want_t = rvm.jvp(ref, d, vd, native=False)["loss"]
    for _ in range(40):
        hv = f.hvp_flat(x, v)[1]
        assert hv.tobytes() == np.concatenate([want_hv["x"], want_hv["theta"]]).tobytes()
        assert f.jvp_flat(x, v)[1] == want_t
        if core.native_tangent:
            break
        time.sleep(0.25)                    # (native=None: the scalar build in its thread)
    assert core.native_tangent and not core.native_tangent_lanes
    deadline = time.monotonic() + 240
    while True:
        h = f.hessian_flat(x)[1]
        assert h.tobytes() == want_h.tobytes()
        if core.native_tangent_lanes or time.monotonic() > deadline:
            break
        time.sleep(0.25)                    # (native=None: the full build in its thread)
    assert core.native_tangent_lanes and f.lanes_settled
    assert f.hessian_flat(x)[1].tobytes() == want_h.tobytes()
    assert f.hvp_flat(x, v)[1].tobytes() == hv.tobytes()

