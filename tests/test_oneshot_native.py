"""The repeated one-shot calls in C (issue 16, rvm/_runcall.pxi): once the Program's reused
machine has native code, `rvm.run(prog, values)` and `rvm.hessian(prog, ...)` are one C call
each, and give what a fresh machine (the interpreter) gives, bit for bit: outputs, inputs,
stats, garbage, the Result's machine, traps, pickles, threads."""
from __future__ import annotations

import functools
import pickle
import threading

import numpy as np
import pytest
from test_oneshot import fresh_run

import rvm
from rvm import oneshot
from rvm.errors import Trap

MIXED = """
inout  x: float = 1.5
inout  k: int = 3
inout  v: float[3] = [1, 2, 3]
inout  w: int[2] = [4, 5]
output y: float
global g: float

func main() {
    for i in 0..k {
        y += x
    }
    y += v[1]
    g += v[2]
}
"""


fresh = functools.partial(fresh_run, native=False)     # an interpreter's machine, run once


def compiled(prog, values=None):
    """Run once (the machine is made), compile it, run again (the C call is bound)."""
    rvm.run(prog, values)
    oneshot.entry(prog).local.slots[("run", ())].machine.compile()
    rvm.run(prog, values)
    e = oneshot.entry(prog)
    assert e.run_call is not None
    return e.run_call.machine


def same(res, m, at_end=True):
    """res holds what machine m holds, bit for bit and of the same types."""
    assert res.stats == m.stats
    assert res.garbage == rvm.api.garbage_cells(m, at_end=at_end)
    for got, want in ((res.outputs, m.outputs()), (res.inputs, m.inputs())):
        assert list(got) == list(want)
        for name, v in got.items():
            assert type(v) is type(want[name])
            assert np.asarray(v).dtype == np.asarray(want[name]).dtype
            assert np.asarray(v).tobytes() == np.asarray(want[name]).tobytes()


def test_repeated_runs_are_one_native_call_with_the_interpreters_results():
    prog = rvm.assemble(MIXED)
    m = compiled(prog)
    runs = m.core.native_runs
    cases = [{}, {"x": 2.25}, {"k": 7, "x": -0.5}, {"v": np.array([0.5, 0.25, 0.0])},
             {"w": np.array([9, -9], dtype=np.int64), "k": 0}]
    for values in cases:
        res = rvm.run(prog, values)
        same(res, fresh(prog, values))
    assert m.core.native_runs == runs + len(cases)        # every one ran natively
    res = rvm.run(prog, {"x": 1.0})
    assert res.outputs["y"] == 3.0 + 2.0 and res.garbage == ["g"]
    assert rvm.run(prog, {"v": np.array([1.0, 2.0, 0.0])}).garbage == []


def test_values_the_c_call_does_not_store_go_the_general_way():
    prog = rvm.assemble(MIXED)
    m = compiled(prog)
    for values in ({"x": np.float64(2.0)}, {"x": 2}, {"k": True}, {"v": [1.0, 2.0, 3.0]},
                   {"v": np.array([1, 2, 3])}):
        same(rvm.run(prog, values), fresh(prog, values))
    with pytest.raises(rvm.machine.UnknownName):
        rvm.run(prog, {"nope": 1.0})
    with pytest.raises(rvm.values.ValueEncodingError):
        rvm.run(prog, {"v": np.zeros(4)})
    assert m.core.native_runs > 0


def test_reverse_runs_and_the_besselj_example():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    compiled(prog, {"z": 3.0})
    for z in (3.0, 0.5, 4.75):
        res = rvm.run(prog, {"z": z})
        same(res, fresh(prog, {"z": z}))
        back = rvm.run(prog, res.outputs, reverse=True)
        same(back, fresh(prog, res.outputs, reverse=True), at_end=False)
        assert back.inputs["z"] == z and back.stats["steps"] == res.stats["steps"]
    assert rvm.run(prog, {"z": 3.0}).outputs["out"] == pytest.approx(0.486091260585891, abs=0)


def test_a_trap_is_reported_as_the_interpreter_reports_it():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    compiled(prog)
    with pytest.raises(Trap) as fast:
        rvm.run(prog, {"nterms": 0})
    with pytest.raises(Trap) as slow:
        fresh(prog, {"nterms": 0})
    assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)
    same(rvm.run(prog, {"z": 2.0}), fresh(prog, {"z": 2.0}))       # and it goes on


def test_the_results_machine_and_pickle():
    prog = rvm.assemble(MIXED)
    compiled(prog)
    old = rvm.run(prog, {"x": 4.0})
    latest = rvm.run(prog, {"x": 0.5})
    m = latest.machine                         # handed over: later calls build another
    want = fresh(prog, {"x": 0.5})
    assert np.array_equal(m.mem[:prog.n_globals], want.mem[:prog.n_globals])
    assert m.status == "end" and m.stats == want.stats
    m.run(-1)                                  # back to its start
    assert m.inputs()["x"] == 0.5 and m.outputs()["y"] == 0.0
    assert oneshot.entry(prog).run_call is None    # the handed-over machine is not reused
    want = fresh(prog, {"x": 4.0})                 # old's machine: the run made again
    assert np.array_equal(old.machine.mem[:prog.n_globals], want.mem[:prog.n_globals])
    again = pickle.loads(pickle.dumps(old))
    assert again.machine is None and again.outputs["y"] == 4.0 * 3 + 2.0
    same(again, want)
    same(rvm.run(prog, {"x": 4.0}), fresh(prog, {"x": 4.0}))
    compiled(prog)
    assert oneshot.entry(prog).run_call is not None


def test_other_threads_get_their_own_machines():
    prog = rvm.assemble(MIXED)
    owner = compiled(prog)
    out: dict[int, list] = {}

    def work(i: int) -> None:
        out[i] = [rvm.run(prog, {"x": float(i)}) for _ in range(3)]

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    mine = [rvm.run(prog, {"x": float(i)}) for i in range(4)]     # the owner's C calls
    for i in range(4):
        m = fresh(prog, {"x": float(i)})
        for res in out[i] + [mine[i]]:
            same(res, m)
    assert oneshot.entry(prog).run_call.machine is owner


def test_repeated_hessians_are_one_core_call():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    kw = dict(of="out", wrt=["z"])
    rvm.hessian(prog, inputs={"z": 3.0}, native=True, **kw)
    rvm.hessian(prog, inputs={"z": 3.0}, **kw)
    assert oneshot.entry(prog).hess_call is not None
    for z in (3.0, 1.25, 4.5):
        h = rvm.hessian(prog, inputs={"z": z}, **kw)
        want = rvm.derivatives(prog, inputs={"z": z}, gradient=False, hessian=True,
                               native=False, **kw).hessian
        assert h.shape == (1, 1) and h.tobytes() == want.tobytes()
    # another (of, wrt) form and inputs it does not store go the general way, same values
    h1 = rvm.hessian(prog, "out", "z", {"z": np.float64(2.0)})
    assert h1.tobytes() == rvm.hessian(prog, inputs={"z": 2.0}, **kw).tobytes()


def test_a_full_hessian_in_one_call():
    prog = rvm.assemble("programs/norm.rasm")
    kw = dict(of="res", wrt=["x"])
    x = np.array([1.0, -2.0, 0.5])
    rvm.hessian(prog, inputs={"x": x}, native=True, **kw)
    rvm.hessian(prog, inputs={"x": x}, **kw)
    assert oneshot.entry(prog).hess_call is not None
    h = rvm.hessian(prog, inputs={"x": x}, **kw)
    r = np.sqrt(x @ x)
    assert np.allclose(h, (np.eye(3) - np.outer(x, x) / r**2) / r, rtol=1e-12, atol=0)
    want = rvm.derivatives(prog, inputs={"x": x}, gradient=False, hessian=True, native=False,
                           **kw).hessian
    assert h.tobytes() == want.tobytes()
    h[0, 0] = 99.0                                # a fresh array each call
    assert rvm.hessian(prog, inputs={"x": x}, **kw)[0, 0] == want[0, 0]


def test_repeated_hvps_are_one_core_call():
    prog = rvm.assemble("programs/norm.rasm")
    x = np.array([1.0, -2.0, 0.5])
    kw = dict(of="res", wrt=["x"])
    rvm.hessian(prog, inputs={"x": x}, native=True, **kw)       # the tangent modes built
    rvm.hvp(prog, v={"x": np.array([1.0, 0.0, 0.0])}, inputs={"x": x}, **kw)
    assert oneshot.entry(prog).hvp_call is not None
    for v in ([0.0, 1.0, 0.0], [0.25, -1.5, 2.0]):
        got = rvm.hvp(prog, v={"x": np.array(v)}, inputs={"x": x}, **kw)
        want = rvm.derivatives(prog, inputs={"x": x}, gradient=False, direction={"x": v},
                               native=False, **kw).hvp
        assert list(got) == ["x"] and got["x"].shape == (3,)
        assert got["x"].tobytes() == want["x"].tobytes()
    h = rvm.hessian(prog, inputs={"x": x}, **kw)
    assert np.allclose(rvm.hvp(prog, v={"x": np.array([0.25, -1.5, 2.0])}, inputs={"x": x},
                               **kw)["x"], h @ [0.25, -1.5, 2.0], rtol=1e-12, atol=1e-15)
    with pytest.raises(KeyError):                                  # the general path's error
        rvm.hvp(prog, v={"y": np.zeros(3)}, inputs={"x": x}, **kw)
    # a scalar wrt gives an np.float64, as the general path does
    prog = rvm.assemble("programs/besselj_rec.rasm")
    kw = dict(of="out", wrt=["z"])
    rvm.hessian(prog, inputs={"z": 3.0}, native=True, **kw)
    rvm.hvp(prog, v={"z": 1.0}, inputs={"z": 3.0}, **kw)
    got = rvm.hvp(prog, v={"z": 2.0}, inputs={"z": 3.0}, **kw)
    want = rvm.derivatives(prog, inputs={"z": 3.0}, gradient=False, direction={"z": 2.0},
                           native=False, **kw).hvp
    assert type(got["z"]) is type(want["z"]) is np.float64 and got["z"] == want["z"]


def test_repeated_jvps_are_one_native_run():
    prog = rvm.assemble("programs/norm.rasm")
    x = np.array([1.0, -2.0, 0.5])
    rvm.hessian(prog, of="res", wrt=["x"], inputs={"x": x}, native=True)   # tangent code built
    rvm.jvp(prog, {"x": x}, {"x": np.array([1.0, 0.0, 0.0])})
    assert oneshot.entry(prog).jvp_call is not None
    for t in ([0.0, 1.0, 0.0], [0.25, -1.5, 2.0]):
        for xs in (x, np.array([3.0, 4.0, 0.0])):
            got = rvm.jvp(prog, {"x": xs}, {"x": np.array(t)})
            want = rvm.derivatives(prog, None, (), {"x": xs}, gradient=False,
                                   tangents={"x": t}, native=False).tangent
            assert list(got) == list(want) == ["x", "res"]
            for k in want:
                assert type(got[k]) is type(want[k])
                assert np.asarray(got[k]).tobytes() == np.asarray(want[k]).tobytes()
            assert got["res"] == pytest.approx(np.dot(xs, t) / np.linalg.norm(xs), rel=1e-12)
    with pytest.raises(rvm.ad.engine.NotDifferentiable, match="'y' is not a global"):   # as before
        rvm.jvp(prog, {"x": x}, {"y": np.zeros(3)})


def test_the_public_calls_are_c_functions_with_the_python_signatures():
    import inspect

    from rvm.ad import engine
    for f, general in ((rvm.run, rvm.api._run), (rvm.hessian, engine._hessian),
                       (rvm.hvp, engine._hvp), (rvm.jvp, engine._jvp),
                       (rvm.grad, engine._grad)):
        assert type(f).__name__ == "cython_function_or_method" and f is not general
        assert f.__name__ == general.__name__.lstrip("_") and f.__doc__ == general.__doc__
        assert inspect.signature(f) == inspect.signature(general)
        assert pickle.loads(pickle.dumps(f)) is f
    prog = rvm.assemble("programs/besselj_rec.rasm")
    m = compiled(prog, {"z": 3.0})
    runs = m.core.native_runs
    res = rvm.run(prog, {"z": 2.5})
    assert m.core.native_runs == runs + 1 and not hasattr(res, "__dict__")
    same(res, fresh(prog, {"z": 2.5}))
    # options, a path, a bad argument: the general path, as before
    with pytest.raises(rvm.errors.StepLimit):
        rvm.run(prog, {"z": 2.5}, max_steps=10)
    assert m.core.native_runs == runs + 1
    same(rvm.run("programs/besselj_rec.rasm", {"z": 2.5}), fresh(prog, {"z": 2.5}))
    with pytest.raises(TypeError, match="positional"):
        rvm.run(prog, {"z": 2.5}, True)


def test_repeated_grads_without_the_ancilla_check_reach_the_shared_grad_fn():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    ref = rvm.grad_fn(rvm.assemble("programs/besselj_rec.rasm"), of="out", wrt="z",
                      native=False)
    for wrt in ("z", ["z"], ("z",), " z"):
        for z in (3.0, 1.25):
            got = rvm.grad(prog, "out", wrt, {"z": z}, check_ancillas=False)
            assert list(got) == ["z"] and got["z"].tobytes() == ref({"z": z})["z"].tobytes()
    f = oneshot.entry(prog).grad_fns[("out", ("z",), ())]
    g = rvm.grad(prog, "out", ["z"], {"z": 2.0}, check_ancillas=False)
    assert f.fast_grad is g                 # the shared grad_fn's fast path made it
    with pytest.raises(rvm.ad.engine.NotDifferentiable):
        rvm.grad(prog, "out", ["nope"], {"z": 2.0}, check_ancillas=False)


def test_a_dropped_result_is_reused_and_a_held_one_never_changes():
    for src in ("programs/besselj_rec.rasm", MIXED):          # words inline, words malloc'd
        prog = rvm.assemble(src)
        name = "z" if "besselj" in src else "x"
        compiled(prog)
        held = [rvm.run(prog, {name: float(k)}) for k in range(3)]
        for k, res in enumerate(held):
            same(res, fresh(prog, {name: float(k)}))
        r1 = rvm.run(prog, {name: 1.5})
        assert r1.outputs and r1.inputs[name] == 1.5 and r1.stats      # decoded and cached
        first = id(r1)
        del r1
        r2 = rvm.run(prog, {name: 2.5})
        assert id(r2) == first                     # the dropped Result, filled anew
        same(r2, fresh(prog, {name: 2.5}))
        assert r2.machine.inputs()[name] == 2.5
        for k, res in enumerate(held):             # untouched by the later runs
            same(res, fresh(prog, {name: float(k)}))


def test_the_names_cells_are_remembered_by_position_and_checked_by_identity():
    prog = rvm.assemble(MIXED)
    m = compiled(prog)
    runs = m.core.native_runs
    built = "".join(["k"])                      # an equal name that is another object
    cases = [{"x": 2.0, "k": 2}, {"k": 2, "x": 2.0}, {built: 4, "x": -1.0},
             {"x": 0.5}, {"v": np.array([1.0, 0.0, 2.0]), "x": 3.0, "k": 1},
             {"w": np.array([1, 2], dtype=np.int64), "v": np.array([3.0, 2.0, 1.0])}]
    for values in cases * 2:
        same(rvm.run(prog, values), fresh(prog, values))
    assert m.core.native_runs == runs + 2 * len(cases)
    with pytest.raises(rvm.machine.UnknownName):         # a name never seen: the general way
        rvm.run(prog, {"x": 1.0, "nope": 2})
