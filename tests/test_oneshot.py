"""The one-shot calls reuse what they built for a Program (issue 16): rvm.run, roundtrip,
grad, jvp, hvp and hessian called again on one Program object give what a fresh machine
gives, bit for bit, without building a machine per call; a Result keeps its final state."""
from __future__ import annotations

import gc
import pickle
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import rvm
from rvm import oneshot
from rvm.errors import ComeFromError

RFIBN = "programs/rfibn.rasm"


def fresh_run(prog, values, reverse=False, **machine_options):
    m = rvm.Machine(prog, **machine_options)
    if reverse:
        m.reset_end(values)
        m.run(-1)
    else:
        m.reset(values)
        m.run()
    return m


def test_repeated_runs_reuse_one_machine_and_match_a_fresh_one():
    prog = rvm.assemble(RFIBN)
    first = rvm.run(prog, {"n": 0, "z": 100})
    slot = oneshot.entry(prog).local.slots[("run", ())]
    for z in (100, 7, 1000, 3):
        res = rvm.run(prog, {"n": 0, "z": z})
        assert oneshot.entry(prog).local.slots[("run", ())] is slot     # not rebuilt
        m = fresh_run(prog, {"n": 0, "z": z})
        assert res.outputs == m.outputs() and res.inputs == m.inputs()
        assert res.stats == m.stats
    assert first.outputs == {"n": 12, "z": 100}
    back = rvm.run(prog, {"n": 12, "z": 100}, reverse=True)
    assert back.inputs == {"n": 0, "z": 100}


def test_an_older_result_keeps_its_own_final_state():
    prog = rvm.assemble(RFIBN)
    old = rvm.run(prog, {"n": 0, "z": 100})
    rvm.run(prog, {"n": 0, "z": 5})                      # the reused machine moves on
    m = old.machine                                     # run again from old's start
    want = fresh_run(prog, {"n": 0, "z": 100})
    assert np.array_equal(m.mem[:prog.n_static], want.mem[:prog.n_static])
    assert m.stats == want.stats and m.status == "end" and m.t == want.t
    m.run(-1)                                           # and it runs back to the start
    assert m.inputs() == {"n": 0, "z": 100}


def test_the_latest_result_hands_its_machine_over():
    prog = rvm.assemble(RFIBN)
    res = rvm.run(prog, {"n": 0, "z": 100})
    slot = oneshot.entry(prog).local.slots[("run", ())]
    m = res.machine
    assert m is slot.machine                            # no second run was needed
    rvm.run(prog, {"n": 0, "z": 3})                     # builds another machine
    assert oneshot.entry(prog).local.slots[("run", ())].machine is not m
    assert m.read("n") == 12 and m.status == "end"      # untouched by the later call


def test_a_trace_handler_may_run_the_same_program():
    prog = rvm.assemble("""
        input x: int = 2
        output y: int
        func main() {
            y += x
            show y
        }
    """)
    inner = []

    def handler(event):
        if not inner:
            inner.append(rvm.run(prog, {"x": 40}, trace=lambda e: None).outputs["y"])

    res = rvm.run(prog, {"x": 1}, trace=handler)
    assert res.outputs["y"] == 1 and inner == [40]


def test_a_trap_leaves_the_reused_machine_usable():
    prog = rvm.assemble("programs/debug/average.rasm")
    with pytest.raises(rvm.Trap):
        rvm.run(prog)
    prog2 = rvm.assemble(RFIBN)
    rvm.run(prog2, {"n": 0, "z": 100})
    with pytest.raises(ComeFromError):                  # a wrong end state: come-from trap
        rvm.run(prog2, {"n": 3, "z": 100}, reverse=True)
    assert rvm.run(prog2, {"n": 0, "z": 100}).outputs == {"n": 12, "z": 100}


def test_threads_get_the_serial_results():
    prog = rvm.assemble(RFIBN)
    zs = list(range(1, 200, 3))
    want = [rvm.run(prog, {"n": 0, "z": z}).outputs for z in zs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda z: rvm.run(prog, {"n": 0, "z": z}).outputs, zs * 3))
    assert got == want * 3


def test_the_entry_goes_with_the_program_and_is_not_pickled():
    prog = rvm.assemble(RFIBN)
    rvm.run(prog, {"n": 0, "z": 10})
    copy = pickle.loads(pickle.dumps(prog))
    assert "_oneshot" in prog.__dict__ and "_oneshot" not in copy.__dict__
    assert np.array_equal(copy.code, prog.code)
    ref = weakref.ref(prog)
    del prog
    gc.collect()
    assert ref() is None


def test_roundtrip_reuses_the_machine():
    prog = rvm.assemble("programs/oscillator.rasm")
    a = rvm.roundtrip(prog)
    b = rvm.roundtrip(prog)
    assert a.exact and b.exact and a.outputs == b.outputs and a.steps == b.steps > 0
    assert ("run", ()) in oneshot.entry(prog).local.slots


def test_derivatives_reuse_the_machine_and_match_fresh_ones():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    fresh = rvm.derivatives(prog, "out", ["z"], {"z": 2.5}, machine=rvm.Machine(prog))
    for _ in range(3):
        g = rvm.grad(prog, of="out", wrt=["z"], inputs={"z": 2.5})
        assert g["z"] == fresh.gradient["z"]
    slot = oneshot.entry(prog).local.slots[("ad", ())]
    h = rvm.hessian(prog, of="out", wrt=["z"], inputs={"z": 2.5})
    assert oneshot.entry(prog).local.slots[("ad", ())] is slot
    h_fresh = rvm.derivatives(prog, "out", ["z"], {"z": 2.5}, gradient=False, hessian=True,
                              machine=rvm.Machine(prog)).hessian
    assert h.tobytes() == h_fresh.tobytes()
    t = rvm.jvp(prog, {"z": 2.5}, {"z": 1.0})["out"]
    t_fresh = rvm.derivatives(prog, None, (), {"z": 2.5}, gradient=False,
                              tangents={"z": 1.0}, machine=rvm.Machine(prog)).tangent["out"]
    assert t == t_fresh and t == pytest.approx(fresh.gradient["z"], rel=1e-12)
    v = rvm.hvp(prog, of="out", wrt=["z"], v={"z": 1.0}, inputs={"z": 2.5})["z"]
    assert v == h[0, 0]
    # rvm.run on the same program keeps a machine of its own (no AD mode left on)
    assert rvm.run(prog, {"z": 2.5}).outputs["out"] == fresh.outputs["out"]


def test_grad_without_the_ancilla_check_shares_one_grad_fn():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    want = rvm.grad(prog, of="out", wrt="z", inputs={"z": 1.5})["z"]
    for _ in range(3):
        assert rvm.grad(prog, of="out", wrt="z", inputs={"z": 1.5},
                        check_ancillas=False)["z"] == want
    fns = oneshot.entry(prog).grad_fns
    assert list(fns) == [("out", ("z",), ())]
    f = next(iter(fns.values()))
    assert f.fast_grad is not None                      # the calls took the fast path


def test_one_shot_calls_from_threads_share_the_program_entry():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    zs = [0.5 + 0.1 * k for k in range(24)]
    want = [rvm.hessian(prog, of="out", wrt="z", inputs={"z": z})[0, 0] for z in zs]
    seen = set()

    def work(z):
        seen.add(threading.get_ident())
        return rvm.hessian(prog, of="out", wrt="z", inputs={"z": z})[0, 0]

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(work, zs))
    assert got == want
