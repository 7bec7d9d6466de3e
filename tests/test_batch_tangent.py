"""Batches of tangents and Hessians (issue 16): rvm.jvp_batch and rvm.hessian_batch give,
row for row and bit for bit, what a loop of rvm.jvp / rvm.hessian calls gives, with the rows
run by the tangent library's native code over threads; shared values broadcast; a row that
traps is reported with its index and the other rows are kept."""
from __future__ import annotations

import numpy as np
import pytest
from test_batch import SQRT

import rvm
from rvm import native, oneshot

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

def _native_rows(prog, key) -> bool:
    """Every machine of the batch has the tangent library installed."""
    ms = oneshot.entry(prog).batch_machines[key]
    return bool(ms) and all(r.core.native_tangent for m in ms
                            for r in m.__dict__["_ad_runners"].values())


@pytest.mark.parametrize("threads", [1, 2])
def test_hessian_batch_is_the_loop_of_hessians_bit_for_bit(threads):
    prog = rvm.assemble("programs/petersen.rasm")
    X = np.random.default_rng(3).standard_normal((130, 40))
    got = rvm.hessian_batch(prog, "loss", ["x"], {"x": X}, threads=threads)
    assert got.shape == (130, 40, 40)
    for b in (0, 64, 65, 129):
        want = rvm.hessian(prog, of="loss", wrt=["x"], inputs={"x": X[b]})
        assert got[b].tobytes() == want.tobytes()
    np.testing.assert_allclose(got, np.swapaxes(got, 1, 2), rtol=1e-9, atol=1e-12)  # symmetric
    assert _native_rows(prog, ("hessian", "loss", ("x",)))
    assert len(oneshot.entry(prog).batch_machines[("hessian", "loss", ("x",))]) >= threads


def test_hessian_batch_matches_finite_differences_of_the_gradient():
    prog = rvm.assemble(SQRT)
    xs = np.array([4.0, 1.0, 9.0])
    H = rvm.hessian_batch(prog, "y", "x,a", {"x": xs, "a": 3.0})
    # y = a sqrt(x): d2y/dx2 = -a x^(-3/2) / 4, d2y/dxda = x^(-1/2) / 2, d2y/da2 = 0
    want = np.array([[[-3.0 * x ** -1.5 / 4, 0.5 / np.sqrt(x)], [0.5 / np.sqrt(x), 0.0]]
                     for x in xs])
    np.testing.assert_allclose(H, want, rtol=1e-14)


def test_jvp_batch_is_the_loop_of_jvps_bit_for_bit():
    prog = rvm.assemble("programs/petersen.rasm")
    rng = np.random.default_rng(5)
    X, V = rng.standard_normal((150, 40)), rng.standard_normal((150, 40))
    got = rvm.jvp_batch(prog, {"x": X}, {"x": V}, threads=2)
    assert got["loss"].shape == (150,) and got["x"].shape == (150, 40)
    for b in (0, 74, 75, 149):
        want = rvm.jvp(prog, {"x": X[b]}, {"x": V[b]})
        assert got["loss"][b] == want["loss"]
        assert got["x"][b].tobytes() == want["x"].tobytes()
    assert _native_rows(prog, ("jvp", ("x",)))
    # one direction per row: the tangent library's scalar modes, not the lane modes
    ms = oneshot.entry(prog).batch_machines[("jvp", ("x",))]
    assert not any(r.core.native_tangent_lanes for m in ms
                   for r in m.__dict__["_ad_runners"].values())


def test_a_shared_input_with_batched_tangents_gives_the_jacobian_rows():
    """The directions e_0 .. e_39 at one point: the loss's tangents are its gradient."""
    prog = rvm.assemble("programs/petersen.rasm")
    x = np.random.default_rng(9).standard_normal(40)
    got = rvm.jvp_batch(prog, {"x": x}, {"x": np.eye(40)})
    g = rvm.grad(prog, of="loss", wrt=["x"], inputs={"x": x})["x"]
    np.testing.assert_allclose(got["loss"], g, rtol=1e-12, atol=1e-14)
    # and a shared tangent broadcasts over batched inputs
    X = np.stack([x, 2 * x])
    both = rvm.jvp_batch(prog, {"x": X}, {"x": np.ones(40)})
    assert both["loss"][0] == rvm.jvp(prog, {"x": x}, {"x": np.ones(40)})["loss"]


def test_a_trapping_row_is_reported_by_its_index_and_the_others_are_kept():
    prog = rvm.assemble(SQRT)
    xs = np.array([4.0, -1.0, 9.0, -2.0, 16.0])
    with pytest.raises(rvm.BatchError) as info:
        rvm.jvp_batch(prog, {"x": xs}, {"x": 1.0})
    e = info.value
    assert e.lane == 1 and sorted(e.errors) == [1, 3]
    assert "sqrt(-1.0)" in str(e.errors[1]) and "row 1 of 5" in str(e)
    assert e.results["y"][[0, 2, 4]].tolist() == [0.5, 2.0 / 6.0, 0.25]
    assert np.isnan(e.results["y"][[1, 3]]).all()
    with pytest.raises(rvm.BatchError) as info:
        rvm.hessian_batch(prog, "y", ["x"], {"x": xs})
    e = info.value
    assert e.lane == 1 and sorted(e.errors) == [1, 3]
    assert e.results["hessian"][0, 0, 0] == rvm.hessian(prog, "y", ["x"], {"x": 4.0})[0, 0]
    assert np.isnan(e.results["hessian"][[1, 3]]).all()


def test_without_native_code_the_rows_run_one_by_one(monkeypatch):
    prog = rvm.assemble(SQRT)
    xs = np.array([4.0, 1.0])
    fast = rvm.jvp_batch(prog, {"x": xs}, {"x": 1.0})
    monkeypatch.setenv("RVM_NATIVE", "0")
    slow_prog = rvm.assemble(SQRT)
    slow = rvm.jvp_batch(slow_prog, {"x": xs}, {"x": 1.0})
    assert slow["y"].tolist() == fast["y"].tolist() == [0.5, 1.0]
    assert not _native_rows(slow_prog, ("jvp", ("x",)))
    H = rvm.hessian_batch(slow_prog, "y", ["x"], {"x": xs})
    assert H[:, 0, 0].tolist() == [-2.0 / 32.0, -0.5]


def test_batch_shapes_and_names_are_checked():
    prog = rvm.assemble(SQRT)
    with pytest.raises(ValueError, match="no value has a batch axis"):
        rvm.jvp_batch(prog, {"x": 4.0}, {"x": 1.0})
    with pytest.raises(ValueError, match="one leading axis"):
        rvm.jvp_batch(prog, {"x": np.ones(3)}, {"x": np.ones(2)})
    with pytest.raises(ValueError, match="expected shape"):
        rvm.hessian_batch(prog, "y", ["x"], {"x": np.ones((2, 2))})
    with pytest.raises(rvm.errors.RVMError, match="'z' .* is not an input"):
        rvm.jvp_batch(prog, {"z": np.ones(2)}, {"x": 1.0})
    with pytest.raises(rvm.errors.RVMError, match="'z' is not an input"):
        rvm.run_batch(prog, {"z": np.ones(2)})
