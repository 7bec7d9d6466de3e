"""The gradient call path (issue 20): between two fast calls on one machine Core._gradient puts
back only the cells a run may write (isa/effects.py) and the inputs a store may have written,
clears only the duals a rule may touch, and fills the words snapshots only where the checks
read them (GradFn.last fills the rest).  Every report stays what the whole-image reset gives,
bit for bit: gradients, the loss, outputs, steps, drift; and anything else that touches the
machine's memory makes the next call put the whole image back."""
from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import native
from rvm.ad.engine import NotDifferentiable

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

# x has a default, z none; acc is summed by several instructions, so the sweep brings it back
# as a rounding residue (drift); n is a written int cell (the restored-cells check reads it);
# c is a global no instruction writes, out an output the reports decode
SRC = """
input  x: float[4] = [0.3, -1.7, 2.2, 0.9]
input  z: float
input  w: float = 1.5
output out: float[2]
output loss: float
global acc: float
global n: int
global c: float

func main() {
    for i in 0..len(x) {
        acc += x[i] * w
        acc += sin(x[i]) / 3.0
        n += 1
    }
    out[0] += acc * acc
    out[1] += z * acc + c
    loss += out[0] + out[1]
}
"""

CALLS = [{"x": np.array([0.1, 0.2, 0.3, 0.4]), "z": 2.0}, {}, {"w": -0.5},
         {"x": [1.5, -2.5, 0.125, 3.0]}, {"z": -1.0, "w": 0.25}, {}]


def bits(v) -> list:
    return np.asarray(v, dtype=np.float64).reshape(-1).view(np.int64).tolist()


def report(f, inputs: dict) -> tuple:
    """What one call reports: the gradient's bits, loss, steps, outputs, drift."""
    g = f(dict(inputs))
    d = f.last
    return ({k: bits(v) for k, v in g.items()}, bits(d.value), d.steps,
            {k: bits(v) for k, v in d.outputs.items()}, d.drift)


def whole_image(f, inputs: dict) -> tuple:
    """The same call with the whole image put back first (taking Python's view of memory
    ends the clean state)."""
    _ = f.runner.core.mem
    return report(f, inputs)


@pytest.fixture(scope="module")
def prog():
    return rvm.assemble(SRC)


def test_a_clean_start_reports_what_the_whole_image_gives(prog):
    fast = rvm.grad_fn(prog, of="loss", wrt=["x", "z", "w"], native=True)
    slow = rvm.grad_fn(prog, of="loss", wrt=["x", "z", "w"], native=True)
    got = [report(fast, c) for c in CALLS]
    want = [whole_image(slow, c) for c in CALLS]
    assert got == want
    # the first call is the general path; every later one starts clean but the first fast one
    assert fast.runner.core.clean_starts == len(CALLS) - 2
    assert slow.runner.core.clean_starts == 0
    # and the interpreter's general path gives the same (native code is bit for bit)
    for c, w in zip(CALLS, want):
        d = rvm.derivatives(prog, of="loss", wrt=["x", "z", "w"], inputs=dict(c))
        assert ({k: bits(v) for k, v in d.gradient.items()}, bits(d.value), d.steps,
                {k: bits(v) for k, v in d.outputs.items()}, d.drift) == w


def test_the_drift_is_reported_and_inputs_go_back_to_their_defaults(prog):
    f = rvm.grad_fn(prog, of="loss", wrt=["x"], native=True)
    first = report(f, {"z": 3.0, "w": 2.0})
    report(f, {"z": 3.0, "w": 2.0})
    report(f, {"x": [9.0, 8.0, 7.0, 6.0], "z": 5.0})
    again = report(f, {"z": 3.0, "w": 2.0})     # x back to its default, z, w as given
    assert again == first
    assert "acc" in first[4] and first[4]["acc"] > 0      # a rounding residue, reported
    none = report(f, {})                         # z (no default) back to 0.0
    d = rvm.derivatives(prog, of="loss", wrt=["x"], inputs={})
    assert none[0] == {"x": bits(d.gradient["x"])} and none[1] == bits(d.value)
    assert f.runner.core.clean_starts >= 3


def test_a_store_between_calls_is_not_kept(prog):
    """A write into the machine (Machine.write, through Python's view of memory) outside the
    inputs: the next call starts from the whole image, as before."""
    f = rvm.grad_fn(prog, of="loss", wrt=["x", "z"], native=True)
    base = [report(f, {"z": 2.0}) for _ in range(3)]
    f.runner.m.write("c", 100.0)
    assert report(f, {"z": 2.0}) == base[0]
    f.runner.core.adjoint[prog.global_named("c").addr] = 5.0      # a dual, too
    assert report(f, {"z": 2.0}) == base[0]


def test_flat_and_dict_calls_alternate(prog):
    f = rvm.grad_fn(prog, of="loss", wrt=["x"], native=True)
    ref = rvm.grad_fn(prog, of="loss", wrt=["x"], native=True)
    f({})
    ref({})
    for k in range(4):
        x = np.array([0.5 * k, -1.0, 2.0 + k, 0.25])
        loss, g = f.flat(x)
        want = whole_image(ref, {"x": x})
        assert bits(g) == want[0]["x"] and bits(loss) == want[1]
        assert report(f, {"x": x}) == want


def test_last_survives_a_tangent_call(prog):
    """f(x) then f.hvp_flat(...): f.last is still f(x)'s (built before the tangent pass
    changes the machine)."""
    f = rvm.grad_fn(prog, of="loss", wrt=["x"], native=True)
    ref = rvm.grad_fn(prog, of="loss", wrt=["x"], native=True)
    for _ in range(3):
        f({"z": 1.0})
        ref({"z": 1.0})
    g = f({"z": 1.0, "w": 3.0})
    f.hvp_flat(np.ones(4), np.ones(4))
    want = whole_image(ref, {"z": 1.0, "w": 3.0})
    d = f.last
    assert ({k: bits(v) for k, v in g.items()}, bits(d.value), d.steps,
            {k: bits(v) for k, v in d.outputs.items()}, d.drift) == want


def test_fill_words_refuses_after_a_store(prog):
    f = rvm.grad_fn(prog, of="loss", wrt=["x"], native=True)
    for _ in range(3):
        f({})
    core, w = f.runner.core, f.runner.words
    assert core.fill_words(w)
    full = w.copy()
    assert core.fill_words(w) and np.array_equal(w, full)     # filled once: the same
    _ = core.mem                                                # memory may change now
    assert not core.fill_words(w)
    # rows 0 and 2: every global at the start and back at the start
    m = rvm.Machine(prog)
    m.reset({})
    assert np.array_equal(full[0], m.mem[:prog.n_globals])


# ---- several seeds from one forward run: GradFn.jacobian_flat ------------------------------

ROWS = """
input  x: float[3] = [0.5, -1.25, 2.0]
input  s: float = 0.75
output a: float
output b: fixed
output c: float
global t: float[3]
global k: int
func main() {
    for i in 0..len(x) {
        t[i] += x[i] * s
        t[i] += cos(x[i])
        k += i
    }
    a += t[0] * t[1] + t[2]
    b += fixed(t[1] * t[2])
    c += sin(t[0]) * s
}
"""


def test_jacobian_rows_are_the_single_seed_gradients_bit_for_bit():
    prog = rvm.assemble(ROWS)
    wrt = ["x", "s"]
    f = rvm.grad_fn(prog, of="a", wrt=wrt, native=True)
    single = {o: rvm.grad_fn(prog, of=o, wrt=wrt, native=True) for o in ("a", "b", "c")}
    rng = np.random.default_rng(7)
    out = np.empty((3, 4))
    for k in range(5):
        x = rng.uniform(-2.0, 2.0, 4)
        vals, J = f.jacobian_flat(x, ("c", "a", "b"), out)
        assert J is out
        for j, o in enumerate(("c", "a", "b")):
            loss, g = single[o].flat(x)
            assert bits(J[j]) == bits(g) and bits(vals[j]) == bits(loss), (k, o)
    assert f.runner.core.native_bails == 0
    # the rows' numbers: d a / d s = x0 t1 + t0 x1 + x2 at the defaults
    x0 = np.array([0.5, -1.25, 2.0])
    t = x0 * 0.75 + np.cos(x0)
    vals, J = f.jacobian_flat(np.concatenate([x0, [0.75]]), ["a"])
    assert J[0, 3] == pytest.approx(x0[0] * t[1] + t[0] * x0[1] + x0[2], rel=1e-14)
    assert vals[0] == pytest.approx(t[0] * t[1] + t[2], rel=1e-14)


def test_jacobian_rows_without_native_code_and_errors():
    prog = rvm.assemble(ROWS)
    f = rvm.grad_fn(prog, of="a", wrt=["x", "s"], native=False)
    ref = rvm.grad_fn(prog, of="c", wrt=["x", "s"], native=False)
    x = np.array([0.1, 0.2, 0.3, 0.4])
    vals, J = f.jacobian_flat(x, ["c"])
    loss, g = ref.flat(x)
    assert bits(J[0]) == bits(g) and vals[0] == loss
    with pytest.raises(ValueError, match=r"shape \(2, 4\)"):
        f.jacobian_flat(x, ["a", "c"], np.empty((4, 2)))
    with pytest.raises(NotDifferentiable, match="is an array"):
        f.jacobian_flat(x, ["t"])


# ---- many wrt cells: the gradient gathered by runs of consecutive addresses -----------------

WIDE = """
input  x: float[40]
global t: float[40]
input  s: float = 0.5
input  y: float[30]
output a: float
output c: float
func main() {
    for i in 0..len(x) {
        t[i] += x[i] * s
        a += t[i] * t[i]
    }
    for i in 0..len(y) {
        c += y[i] * s
        a += sin(y[i])
    }
    c += sqrt(s)
}
"""


def test_many_wrt_cells_in_several_runs_are_gathered_bit_for_bit():
    """71 wrt cells in two runs of addresses (x, then s and y past t): the flat gradient
    (Core._gradient) and the Jacobian's rows (Core.gradient_rows) copy them by runs; each is
    the interpreter's bit for bit, and a non-finite derivative (sqrt at 0) still hands the
    call back to the general path, which reports it as the interpreted call does."""
    prog = rvm.assemble(WIDE)
    wrt = ["x", "s", "y"]
    f = rvm.grad_fn(prog, of="a", wrt=wrt, native=True)
    ref = {o: rvm.grad_fn(prog, of=o, wrt=wrt, native=False) for o in ("a", "c")}
    assert len(f.wrt_cells) == 71
    rng = np.random.default_rng(3)
    for k in range(4):
        x = rng.uniform(-2.0, 2.0, 71)
        x[40] = rng.uniform(0.5, 1.5)           # s > 0
        loss, g = f.flat(x)
        want = ref["a"].flat(x)
        assert bits(g) == bits(want[1]) and loss == want[0], k
        vals, J = f.jacobian_flat(x, ("c", "a"))
        for j, o in enumerate(("c", "a")):
            lo, go = ref[o].flat(x)
            assert bits(J[j]) == bits(go) and vals[j] == lo, (k, o)
        # d c / d s = sum(y) + 1 / (2 sqrt(s)); d a / d x_i = 2 s^2 x_i
        assert J[0, 40] == pytest.approx(x[41:].sum() + 0.5 / np.sqrt(x[40]), rel=1e-12)
        assert J[1, :40] == pytest.approx(2 * x[40] ** 2 * x[:40], rel=1e-12)
    assert f.runner.core.native_bails == 0
    x[40] = 0.0                                  # d sqrt(s) / d s at 0: not finite
    g0 = f.jacobian_flat(x, ("a",))[1][0]       # (row a has no sqrt: finite)
    assert bits(g0) == bits(ref["a"].flat(x)[1])
    with pytest.raises(rvm.ad.engine.NonFiniteDerivative) as want_e:
        ref["c"].flat(x)
    fc = rvm.grad_fn(prog, of="c", wrt=wrt, native=True)
    fc.flat(x + 1.0)
    with pytest.raises(rvm.ad.engine.NonFiniteDerivative) as got_e:
        fc.flat(x)
    assert str(got_e.value) == str(want_e.value)
    with pytest.raises(rvm.ad.engine.NonFiniteDerivative) as got_rows:
        f.jacobian_flat(x, ("a", "c"))
    assert str(got_rows.value) == str(want_e.value)


@pytest.mark.parametrize("wrt", [["y", "s", "x"], ["s", "x", "y"], ["x", "y", "s"]])
def test_many_wrt_cells_out_of_address_order_are_gathered_bit_for_bit(wrt):
    """The runs of a wrt list not in address order (y past s, x before both; or s, then x
    at a lower address): each run lands at its own place in the gradient, and flat calls
    alternating with Jacobian rows (two address arrays on one machine) give the
    interpreter's numbers bit for bit every time."""
    prog = rvm.assemble(WIDE)
    f = rvm.grad_fn(prog, of="a", wrt=wrt, native=True)
    ref = {o: rvm.grad_fn(prog, of=o, wrt=wrt, native=False) for o in ("a", "c")}
    at = {"x": 0, "s": 0, "y": 0}
    k = 0
    for name in wrt:
        at[name] = k
        k += {"x": 40, "s": 1, "y": 30}[name]
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.uniform(-2.0, 2.0, 71)
        x[at["s"]] = rng.uniform(0.5, 1.5)
        loss, g = f.flat(x)
        assert bits(g) == bits(ref["a"].flat(x)[1]) and loss == ref["a"].flat(x)[0]
        vals, J = f.jacobian_flat(x, ("c", "a"))
        for j, o in enumerate(("c", "a")):
            assert bits(J[j]) == bits(ref[o].flat(x)[1]), (wrt, o)
        s = x[at["s"]]
        assert J[1, at["x"]:at["x"] + 40] == pytest.approx(2 * s ** 2 * x[at["x"]:at["x"] + 40],
                                                           rel=1e-12)
        assert J[0, at["y"]:at["y"] + 30] == pytest.approx(np.full(30, s), rel=1e-12)
    assert f.runner.core.native_bails == 0
