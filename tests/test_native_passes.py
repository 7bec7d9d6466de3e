"""The native passes' start state (issue 16): what a pass clears and what it may leave.

A native gradient or tangent pass clears only the static cells' and the value stack's duals;
the generated code zeroes a frame's duals as it enters the function (main's in the entry
point, a callee's at its call), and in the lane modes only the frame cells a rule may read
that the function does not allocate first (rvm/native/tangent.py: _LaneFn.read_cells,
lane_cells).  These tests run programs whose frames are left dirty by one call (a tangent
released nonzero, adjoints of locals) and read by the next, and compare with the
interpreter bit for bit; and the calls that remember their names' cells (GradCall,
HessCall) and the flat run (rvm.run_fn)."""
from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import rvm
from rvm import native, oneshot
from rvm.ad.engine import derivatives

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

# g leaves its frame's tangents nonzero (a == b as values, not as functions: s and t are
# zero at return, their tangents a' - b' are not), and main calls it twice: the second call
# must start from zero duals (ad_frame), in both directions and every mode.  s is a frame
# cell without alloc (zeroed at entry), t a local allocated first (zeroed by its alloc), k
# an int local whose duals no rule reads
DIRTY = """\
inout x: float = 1.5
inout y: float = 1.5
inout w: float = 0.75
output z: float

func g(v: float, a: float, b: float, c: float) {
    local t: float
    local k: int
    var s: float
    k += 3
    s += a
    t += a
    v += c * s
    v += t * t
    v += c * t
    s -= b
    t -= b
    k -= 3
}

func main() {
    call g(z, x, y, w)
    call g(z, x, y, w)
    call g(z, w, w, x)
}
"""


def _both(prog, of, wrt, **kw):
    out = {}
    for nat in (False, True):
        m = rvm.Machine(prog)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[nat] = derivatives(prog, of, wrt, machine=m, native=nat, **kw)
        if nat:
            assert m.core.native_tangent and m.core.native_bails == 0
    return out


def test_dirty_frames_are_cleared_as_the_interpreter_clears_them():
    prog = rvm.assemble(DIRTY)
    d = _both(prog, "z", ["x", "y", "w"], gradient=True, hessian=True)
    assert d[True].hessian.tobytes() == d[False].hessian.tobytes()
    for k in ("x", "y", "w"):
        assert np.float64(d[True].gradient[k]).tobytes() == \
            np.float64(d[False].gradient[k]).tobytes()
    # (the interpreter is the oracle: with tangents released nonzero, the sweep's numbers
    # are not a Hessian of anything, see docs/ad.md; they depend on every dual's start)
    H = d[True].hessian
    assert np.any(H != 0.0)
    # one direction at a time (the scalar modes) and the Hessian-vector product
    hv = _both(prog, "z", ["x", "y", "w"], gradient=False, direction={"x": 1.0, "y": 0.5,
                                                                       "w": -2.0})
    assert hv[True].hvp["x"].tobytes() == hv[False].hvp["x"].tobytes()
    np.testing.assert_allclose([hv[True].hvp[k] for k in ("x", "y", "w")],
                               H @ np.array([1.0, 0.5, -2.0]), atol=1e-12)


def test_the_lane_modes_clear_only_the_frame_cells_a_rule_reads():
    prog = rvm.assemble(DIRTY)
    lanes = native.tangent.generate(prog)[1]
    g = prog.functions[0]
    offs = {loc.name: loc.offset for loc in g.locals}
    # the forward run of g allocates t first and reads no k: it clears s only; the sweep
    # enters g at its end (no alloc first): s and t, never the int k
    fwd = lanes[lanes.index("static i64 f0_fvt(rvm_ns* st"):]
    fwd = fwd[:fwd.index("bail_out")]
    bwd = lanes[lanes.index("static i64 f0_bvat(rvm_ns* st"):]
    bwd = bwd[:bwd.index("bail_out")]
    assert f"memset(VT + (fp + {offs['s']}) * W" in fwd
    assert f"(fp + {offs['t']}) * W" not in fwd.split("goto L")[0]
    assert "memset(VAT" not in fwd                       # the forward run reads no VAT
    for arr in ("VT", "VAT"):
        assert f"memset({arr} + (fp + {offs['t']}) * W" in bwd or \
            f"memset({arr} + (fp + {min(offs['s'], offs['t'])}) * W, 0, 2" in bwd
    assert f"(fp + {offs['k']}) * W" not in bwd and f"(fp + {offs['k']}) * W" not in fwd


def test_the_remembered_names_of_the_gradient_and_hessian_calls():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    f = rvm.grad_fn(prog, of="out", wrt=["z"], native=True)
    want = {z: rvm.grad(prog, of="out", wrt=["z"], inputs={"z": z, "nu": 2},
                        native=False)["z"] for z in (3.0, 1.5, 2.25)}
    built = "".join(["n", "u"])                 # an equal name that is another object
    f({"z": 3.0})                               # (the first call: the general path)
    for inputs in ({"z": 3.0, "nu": 2}, {"nu": 2, "z": 1.5}, {"z": 2.25, built: 2}) * 2:
        g = f(inputs)
        assert f.fast_grad is not None
        assert g["z"].tobytes() == want[inputs["z"]].tobytes()
    # a list of Python floats for a float array goes the fast way too (as before)
    norm = rvm.assemble("programs/norm.rasm")
    fn = rvm.grad_fn(norm, of="res", wrt=["x"], native=True)
    fn({"x": [1.0, 2.0, 3.0]})
    g = fn({"x": [1.0, -2.0, 0.5]})
    assert fn.fast_grad is not None
    assert g["x"].tobytes() == rvm.grad(norm, of="res", wrt=["x"],
                                        inputs={"x": np.array([1.0, -2.0, 0.5])},
                                        native=False)["x"].tobytes()
    kw = dict(of="out", wrt=["z"])
    rvm.hessian(prog, inputs={"z": 3.0}, native=True, **kw)
    rvm.hessian(prog, inputs={"z": 3.0}, **kw)
    assert oneshot.entry(prog).hess_call is not None
    for inputs in ({"z": 3.0, "nu": 1}, {"nu": 1, "z": 3.0}, {built: 1, "z": 3.0}) * 2:
        h = rvm.hessian(prog, inputs=inputs, **kw)
        want_h = derivatives(prog, inputs={"z": 3.0, "nu": 1}, gradient=False, hessian=True,
                             native=False, **kw).hessian
        assert h.tobytes() == want_h.tobytes()


def test_run_fn_flat_is_rvm_run_flattened():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    f = rvm.run_fn(prog, ["z"], ["out"], native=True)
    assert f.input_cells == ["z"] and f.output_cells == ["out"]
    assert f.native.startswith("native")
    runs = f.machine.core.native_runs
    out = np.empty(1)
    for z in (3.0, 0.5, 4.75, 3.0):
        y = f.flat(np.array([z]))
        assert y.tobytes() == np.float64(rvm.run(prog, {"z": z}).outputs["out"]).tobytes()
        assert f.flat([z], out) is out and out.tobytes() == y.tobytes()
    assert f.machine.core.native_runs > runs          # the C call ran them
    # defaults: every float input, every float output; arrays flattened in order
    norm = rvm.assemble("programs/norm.rasm")
    fn = rvm.run_fn(norm)
    assert fn.input_cells == ["x[0]", "x[1]", "x[2]"]
    x = np.array([3.0, -4.0, 12.0])
    res = rvm.run(norm, {"x": x}).outputs
    want = np.concatenate([np.atleast_1d(np.asarray(res[n], dtype=np.float64)).ravel()
                           for n in [g.name for g in norm.globals
                                     if g.is_output and g.type == rvm.api.FLOAT]])
    for _ in range(3):
        assert fn.flat(x).tobytes() == want.tobytes()
    with pytest.raises(ValueError, match="x must be a vector of 1"):
        f.flat(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="out must be a contiguous float64 vector of 1"):
        f.flat(np.array([1.0]), np.empty(2))
    with pytest.raises(ValueError, match="int global"):
        rvm.run_fn(prog, ["nu"])
    with pytest.raises(ValueError, match="not an input"):
        rvm.run_fn(prog, ["out"])
    with pytest.raises(rvm.machine.UnknownName):
        rvm.run_fn(prog, ["nope"])



def test_run_fn_flat_becomes_the_c_call():
    """Once a RunFn's runs are native its `flat` is the C call's own method (no Python frame
    per call), with the results, errors and fallback of RunFn.flat; a `flat` fetched before
    the first call (the Python method) still gives the same."""
    prog = rvm.assemble("programs/besselj_rec.rasm")
    f = rvm.run_fn(prog, ["z"], ["out"], native=True)
    early = f.flat
    y = early(np.array([3.0]))
    assert f.flat != early and f.flat.__self__ is f._flat
    for z in (3.0, 0.25):
        want = np.float64(rvm.run(prog, {"z": z}).outputs["out"]).tobytes()
        assert f.flat([z]).tobytes() == early([z]).tobytes() == \
            rvm.api.RunFn.flat(f, np.array([z])).tobytes() == want
    assert y.tobytes() == f.flat(np.array([3.0])).tobytes()
    with pytest.raises(ValueError, match="x must be a vector of 1"):
        f.flat(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="out must be a contiguous float64 vector of 1"):
        f.flat(np.array([1.0]), np.empty(2))


def test_run_fn_traps_and_threads():
    text = """\
inout x: float = 1.0
inout d: float = 2.0
output y: float
func main() {
    y += x / d
}
"""
    prog = rvm.assemble(text)
    f = rvm.run_fn(prog, ["x", "d"], ["y"], native=True)
    assert f.flat(np.array([3.0, 4.0]))[0] == 0.75
    bails = f.machine.core.native_run_bails
    with pytest.raises(rvm.errors.RVMError) as e:
        f.flat(np.array([3.0, 0.0]))
    with pytest.raises(type(e.value)) as e2:
        rvm.run(prog, {"x": 3.0, "d": 0.0}, native=False)
    assert str(e.value) == str(e2.value)
    assert f.machine.core.native_run_bails > bails        # the native code handed it back
    got: dict[int, float] = {}

    def work(k: int) -> None:
        got[k] = float(f.flat(np.array([float(k), 2.0]))[0])

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == {k: k / 2.0 for k in range(4)}


def test_a_dropped_hessian_array_is_reused_and_a_held_one_never_changes():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    kw = dict(of="out", wrt=["z"])
    rvm.hessian(prog, inputs={"z": 3.0}, native=True, **kw)
    rvm.hessian(prog, inputs={"z": 3.0}, **kw)
    assert oneshot.entry(prog).hess_call is not None
    want = {z: derivatives(prog, inputs={"z": z}, gradient=False, hessian=True, native=False,
                           **kw).hessian.tobytes() for z in (3.0, 1.5, 2.5)}
    held = rvm.hessian(prog, inputs={"z": 3.0}, **kw)
    view = rvm.hessian(prog, inputs={"z": 1.5}, **kw).ravel()     # only a view is kept
    for z in (2.5, 3.0, 2.5):
        h = rvm.hessian(prog, inputs={"z": z}, **kw)
        assert h.tobytes() == want[z]
        assert h is not held and h.base is not view.base
        del h
    assert held.tobytes() == want[3.0] and view.tobytes() == want[1.5]
    a = id(rvm.hessian(prog, inputs={"z": 2.5}, **kw))       # dropped at once: reused
    assert id(rvm.hessian(prog, inputs={"z": 3.0}, **kw)) == a


def test_a_list_of_floats_for_a_float_array_is_stored_in_c():
    prog = rvm.assemble("programs/norm.rasm")
    rvm.run(prog, {"x": [1.0, 2.0, 3.0]})
    oneshot.entry(prog).local.slots[("run", ())].machine.compile()
    rvm.run(prog, {"x": [1.0, 2.0, 3.0]})
    call = oneshot.entry(prog).run_call
    assert call is not None
    for x in ([3.0, -4.0, 12.0], [0.5, 0.25, -2.0]):
        assert call({"x": x}) is not None                   # the C call took it
        got = rvm.run(prog, {"x": x}).outputs
        want = rvm.run(prog, {"x": np.array(x)}, native=False).outputs
        assert got["res"] == want["res"] and got["x"].tobytes() == want["x"].tobytes()
    assert call({"x": [3, -4.0, 12.0]}) is None              # an int in it: the general way
    assert call({"x": [3.0, -4.0]}) is None                  # the wrong length too


# The gradient's sweep clears only main's and each callee's frame adjoints that it reads (the
# cells varied anywhere, activity.frame_cells): sq is called on a constant and on a wrt cell,
# rec recursively, and main's locals and rec's u share frame cells across activations.
# Every frame adjoint is filled with junk between two calls; each call must still be the
# interpreter's gradient bit for bit, from the native sweep (a NaN junk read by a rule would
# send the call to the general path, a large one cancel a small gradient to 0.0).  Fails with
# a callee's clear one cell short or without the clears.
FRAMES = """\
input x: float = 1.5
input y: float = 0.5
input c: float = 2.0
input depth: int = 3
output loss: float

func sq(out: float, a: float) {
    local t: float
    var s: float
    t += a * a
    s += t * a
    out += s
    s -= t * a
    t -= a * a
}

func rec(out: float, a: float, n: int) {
    if n > 0 {
        local u: float
        u += a * 0.5
        dec n
        call rec(out, u, n)
        inc n
        u -= a * 0.5
    } else {
        out += a * a
    } fi n > 0
}

func main() {
    local k: float
    local m: float
    call sq(k, c)
    call sq(m, x)
    loss += k * m
    loss += m * y
    call rec(loss, y, depth)
    call rec(loss, x, depth)
    uncall sq(m, x)
    uncall sq(k, c)
}
"""


@pytest.mark.parametrize("wrt", [["x"], ["y"], ["x", "y", "c"]])
def test_the_gradient_sweep_clears_every_frame_adjoint_it_reads(wrt):
    prog = rvm.assemble(FRAMES)
    ref = rvm.grad_fn(prog, of="loss", wrt=wrt, native=False)
    f = rvm.grad_fn(prog, of="loss", wrt=wrt, native=True)
    core = f.runner.core
    for inp in ({"x": 1.5, "y": 0.5}, {"x": -2.0, "y": 3.0, "c": 0.25},
                {"x": 0.1, "y": 0.2, "depth": 5}):
        want = {k: np.float64(v).tobytes() for k, v in ref(dict(inp)).items()}
        assert {k: np.float64(v).tobytes() for k, v in f(dict(inp)).items()} == want
        for junk in (float("nan"), 12345.0, -1e300):
            core.adjoint[prog.n_static:] = junk
            bails = core.native_bails
            got = f(dict(inp))
            assert {k: np.float64(v).tobytes() for k, v in got.items()} == want, (inp, junk)
            assert f.fast_grad is not None and core.native_bails == bails, (inp, junk)


# A numpy array in the other byte order ('>f8', '>i8' on this machine) has the float64 or
# int64 type number too: the C stores copied its bytes as the machine's words, so every call
# that reads an input, direction or flat vector in C computed on garbage, silently (and the
# general path's Machine.reset stores through the same C).  An `out` that is read-only or in
# the other byte order was written as native words.
SWAPPED = """\
input x: float[3] = [1.0, 2.0, 3.0]
input k: int[2] = [1, 2]
output y: float
func main() {
    for i in 0..len(x) {
        y += x[i] * x[i] * x[i]
    }
    y += float(k[0] + k[1])
}
"""


def test_arrays_in_the_other_byte_order_and_read_only_outs():
    prog = rvm.assemble(SWAPPED)
    other = ">" if np.little_endian else "<"
    xs = [np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25, -3.0])]
    k = np.array([3, 4])

    def sw(a):
        return a.astype(a.dtype.newbyteorder(other))

    m = rvm.Machine(prog)
    m.reset({"x": sw(xs[0]), "k": sw(k)})
    m.run()
    assert m.outputs()["y"] == 0.125 - 1.0 + 8.0 + 7.0
    for x in xs + xs:                                   # the repeated calls are C
        assert rvm.run(prog, {"x": sw(x), "k": sw(k)}).outputs == \
            rvm.run(prog, {"x": x, "k": k}).outputs
        want_g = 3 * x * x
        assert rvm.grad(prog, "y", "x", {"x": sw(x)})["x"].tobytes() == want_g.tobytes()
        assert rvm.grad(prog, "y", "x", {"x": sw(x)}, check_ancillas=False)["x"].tobytes() == \
            want_g.tobytes()
        h = rvm.hessian(prog, "y", ["x"], {"x": sw(x)})
        assert h.tobytes() == np.diag(6 * x).tobytes()
        v = np.array([1.0, 0.5, -2.0])
        assert rvm.hvp(prog, "y", ["x"], {"x": sw(v)}, {"x": x})["x"].tobytes() == \
            (6 * x * v).tobytes()
        assert rvm.jvp(prog, {"x": x}, {"x": sw(v)})["y"] == np.dot(3 * x * x, v)
    f = rvm.grad_fn(prog, of="y", wrt="x", native=True)
    rf = rvm.run_fn(prog, ["x"], ["y"], native=True)
    for x in xs + xs:
        want = f.flat(x)
        assert f({"x": sw(x)})["x"].tobytes() == want[1].tobytes()
        assert f.flat(sw(x))[1].tobytes() == want[1].tobytes()
        assert f.hvp_flat(sw(x), sw(v))[1].tobytes() == f.hvp_flat(x, v)[1].tobytes()
        assert f.hessian_flat(sw(x))[1].tobytes() == f.hessian_flat(x)[1].tobytes()
        assert f.jvp_flat(sw(x), sw(v)) == f.jvp_flat(x, v)
        assert rf.flat(sw(x)).tobytes() == rf.flat(x).tobytes()
    x = xs[0]
    for bad in (sw(np.zeros(3)), np.frombuffer(bytes(24))):
        with pytest.raises(ValueError, match="out must be"):
            f.flat(x, bad)
        with pytest.raises(ValueError, match="out must be"):
            f.hvp_flat(x, v, bad)
    for bad in (sw(np.zeros((3, 3))), np.frombuffer(bytes(72)).reshape(3, 3)):
        with pytest.raises(ValueError, match="out must be"):
            f.hessian_flat(x, bad)
    with pytest.raises(ValueError, match="out must be"):
        rf.flat(x, np.frombuffer(bytes(8)))
    with pytest.raises(ValueError, match="out must be"):
        f.jacobian_flat(x, ["y"], np.frombuffer(bytes(24)).reshape(1, 3))
