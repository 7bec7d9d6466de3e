"""Batches (issue 16): f.batch(inputs) gives, row for row and bit for bit, what a loop of
single calls gives, with the rows run as native code over threads; a row that traps is
reported with its index, and the other rows' results are kept."""
from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import native, oneshot
from rvm.ad import BatchError

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

SQRT = """
input x: float = 1.0
input a: float = 2.0
input n: int = 1
output y: float
func main() {
    for i in 0..n {
        y += a * sqrt(x)
    }
}
"""


def loop(f, rows):
    return [f(r) for r in rows]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_batch_is_the_loop_of_single_calls_bit_for_bit(threads):
    prog = rvm.assemble("programs/petersen.rasm")
    f = rvm.grad_fn(prog, of="loss", wrt="x")
    X = np.random.default_rng(7).standard_normal((150, 40))
    got = f.batch({"x": X}, threads=threads)
    want = loop(rvm.grad_fn(prog, of="loss", wrt="x", native=False), [{"x": x} for x in X])
    assert got["x"].shape == (150, 40)
    assert got["x"].tobytes() == np.array([w["x"] for w in want]).tobytes()
    assert f.native.startswith("native")
    runners = f.__dict__["_batch_runners"]
    assert len(runners) == min(threads, 3) and all(r.core.native for r in runners)
    loss = [rvm.derivatives(prog, "loss", "x", {"x": x}).value for x in X[:5]]
    assert f.last_batch_loss[:5].tolist() == loss


def test_the_batch_losses_of_interpreted_rows():
    """Without native code every row runs interpreted: last_batch_loss holds their losses
    too (a row that traps: nan)."""
    prog = rvm.assemble("input x: float\noutput y: float\nfunc main() {\n  y += 1.0 / x\n}\n")
    f = rvm.grad_fn(prog, of="y", wrt="x", native=False)
    got = f.batch({"x": np.array([2.0, 4.0, 0.5])})
    assert got["x"].tolist() == [-0.25, -0.0625, -4.0]
    assert f.last_batch_loss.tolist() == [0.5, 0.25, 2.0]
    with pytest.raises(rvm.BatchError):
        f.batch({"x": np.array([2.0, 0.0])})
    assert f.last_batch_loss[0] == 0.5 and np.isnan(f.last_batch_loss[1])


def test_shared_inputs_broadcast_and_scalars_get_a_batch_axis():
    prog = rvm.assemble(SQRT)
    f = rvm.grad_fn(prog, of="y", wrt="x,a")
    xs = np.array([4.0, 1.0, 9.0, 0.25])
    got = f.batch({"x": xs, "a": 3.0, "n": np.array([1, 2, 3, 4])})
    want = [f({"x": float(x), "a": 3.0, "n": n}) for x, n in zip(xs, [1, 2, 3, 4])]
    assert got["x"].shape == got["a"].shape == (4,)
    assert got["x"].tolist() == [w["x"] for w in want]
    assert got["a"].tolist() == [w["a"] for w in want] == [2.0, 2.0, 9.0, 2.0]
    with pytest.raises(ValueError, match="no input has a batch axis"):
        f.batch({"x": 4.0})
    with pytest.raises(ValueError, match="one leading axis"):
        f.batch({"x": xs, "a": np.ones(3)})


def test_a_trapping_row_is_reported_by_its_index_and_the_others_are_kept():
    prog = rvm.assemble(SQRT)
    f = rvm.grad_fn(prog, of="y", wrt="x,a")
    xs = np.array([4.0, -1.0, 9.0, -2.0, 16.0])
    with pytest.raises(BatchError) as info:
        f.batch({"x": xs})
    e = info.value
    assert e.lane == 1 and sorted(e.errors) == [1, 3]
    assert isinstance(e.errors[1], rvm.errors.DomainError) and "sqrt(-1.0)" in str(e.errors[1])
    assert "row 1 of 5" in str(e) and "1 more rows" in str(e)
    good = [0, 2, 4]
    assert e.results["x"][good].tolist() == [f({"x": float(xs[b])})["x"] for b in good]
    assert np.isnan(e.results["x"][[1, 3]]).all()


def test_without_native_code_a_batch_runs_row_by_row():
    prog = rvm.assemble(SQRT)
    f = rvm.grad_fn(prog, of="y", wrt="x", native=False)
    got = f.batch({"x": np.array([1.0, 4.0])})
    assert got["x"].tolist() == [1.0, 0.5] and "_batch_runners" in f.__dict__
    assert not f.__dict__["_batch_runners"][0].core.native


def test_run_batch_is_the_loop_of_runs_bit_for_bit():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    zs = np.linspace(-3.0, 5.0, 301)
    got = rvm.run_batch(prog, {"z": zs, "nu": 1}, threads=2)
    want = [rvm.run(prog, {"z": float(z), "nu": 1}).outputs for z in zs]
    assert set(got) == set(want[0])
    for name in got:
        assert got[name].shape == (301,)
        assert got[name].tolist() == [w[name] for w in want]
    machines = next(iter(oneshot.entry(prog).batch_machines.values()))
    assert len(machines) == 2 and all(m.core.native_runs_on for m in machines)


def test_run_batch_reports_a_trapping_row_and_keeps_the_others():
    prog = rvm.assemble(SQRT)
    with pytest.raises(rvm.BatchError) as info:
        rvm.run_batch(prog, {"x": np.array([4.0, 9.0, -1.0]), "n": 2})
    e = info.value
    assert e.lane == 2 and list(e.errors) == [2]
    assert isinstance(e.errors[2], rvm.errors.DomainError)
    assert e.results["y"][:2].tolist() == [8.0, 12.0] and np.isnan(e.results["y"][2])


def test_run_batch_backward_is_the_loop_of_reverse_runs_bit_for_bit():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    zs = np.linspace(-3.0, 5.0, 257)
    ends = rvm.run_batch(prog, {"z": zs, "nu": 3})
    got = rvm.run_batch(prog, ends, reverse=True, threads=2)
    want = [rvm.run(prog, {k: v[b].item() for k, v in ends.items()}, reverse=True).inputs
            for b in range(len(zs))]
    assert set(got) == set(want[0]) == {"z", "nu", "nterms"}
    for name in got:
        assert got[name].shape == (257,)
        assert got[name].tobytes() == np.array([w[name] for w in want]).tobytes()
    assert got["z"].tobytes() == zs.tobytes() and set(got["nu"].tolist()) == {3}
    # shared outputs broadcast; a row whose backward run traps is reported by its index
    ends["nterms"] = ends["nterms"].copy()
    ends["nterms"][5] = 0
    with pytest.raises(rvm.BatchError) as info:
        rvm.run_batch(prog, ends, reverse=True)
    e = info.value
    assert e.lane == 5 and list(e.errors) == [5] and np.isnan(e.results["z"][5])
    assert np.delete(e.results["z"], 5).tobytes() == np.delete(zs, 5).tobytes()
    with pytest.raises(rvm.machine.UnknownName, match="'x' is not an output"):
        rvm.run_batch(rvm.assemble(SQRT), {"x": np.ones(3)}, reverse=True)


def test_threads_sharing_one_grad_fn_may_batch_at_once():
    """Batches on one GradFn from several threads take turns (they share its batch
    machines): every thread gets the serial result bit for bit."""
    from concurrent.futures import ThreadPoolExecutor

    prog = rvm.assemble("programs/petersen.rasm")
    f = rvm.grad_fn(prog, of="loss", wrt="x")
    rng = np.random.default_rng(11)
    batches = [rng.standard_normal((40, 40)) for _ in range(6)]
    serial = rvm.grad_fn(prog, of="loss", wrt="x", native=False)
    want = [np.array([serial({"x": x})["x"] for x in X]).tobytes() for X in batches]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda X: f.batch({"x": X}, threads=2)["x"].tobytes(), batches))
    assert got == want
