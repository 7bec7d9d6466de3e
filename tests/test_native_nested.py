"""Native code for derivative statements (rvm/native/nested.py): a program's runs with
`grad`/`jvp` statements, at both nesting levels and under every outer mode, give the
interpreter's final state bit for bit (memory, value stack, steps and peaks); what the
interpreter traps on sends the run to it, which reports as usual."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_nested_ad import NESTED, ONE_LEVEL
from test_nested_limits import LONG, NESTED2

import rvm
from rvm import native
from rvm.errors import NestingError, RVMError, StepLimit

ROOT = Path(__file__).resolve().parents[1]


def _pair(prog, inputs: dict) -> tuple[rvm.Machine, rvm.Machine]:
    """The program run forward by the interpreter and by the native code."""
    mi = rvm.Machine(prog, native=False)
    mi.reset(inputs)
    mi.run()
    mn = rvm.Machine(prog)
    mn.compile()
    mn.reset(inputs)
    mn.run()
    assert mn.core.native_runs == 1 and mn.core.native_run_bails == 0
    return mi, mn


def _same(mi: rvm.Machine, mn: rvm.Machine) -> None:
    assert np.array_equal(mi.mem, mn.mem)
    assert np.array_equal(mi.stack(), mn.stack())
    assert mi.stats == mn.stats
    assert (mi.status, mi.t, mi.pc) == (mn.status, mn.t, mn.pc)


@pytest.mark.parametrize("omode, imode", [(0, 0), (0, 1), (1, 0), (1, 1)],
                         ids=["rr", "rf", "fr", "ff"])
def test_two_levels_under_every_outer_mode_are_the_interpreters(omode, imode):
    """NESTED's outer statement runs the inner one under an adjoint sweep (rr, rf) or a
    tangent run (fr, ff): the second-order modes; then back to the start."""
    prog = rvm.assemble(NESTED)
    mi, mn = _pair(prog, {"imode": imode, "omode": omode})
    _same(mi, mn)
    assert mn.read("hg")[0] != 0.0
    mi.run(-1)
    mn.run(-1)
    assert mn.core.native_runs == 2 and mn.core.native_run_bails == 0
    _same(mi, mn)


def test_one_level_grad_and_jvp_of_scalars_and_arrays():
    mi, mn = _pair(rvm.assemble(ONE_LEVEL), {"x": [0.3, 1.7], "v": [-1.0, 0.5]})
    _same(mi, mn)
    assert list(mn.read("g")) == list(mi.read("g"))


@pytest.mark.parametrize("name, inputs", [
    ("saddle", {"start": [1.0, 1.0]}), ("particle", {"w0": 0.0})])
@pytest.mark.parametrize("omode, imode", [(0, 0), (1, 1)], ids=["rr", "ff"])
def test_gradbench_nested_programs(name, inputs, omode, imode):
    """GradBench's saddle and particle: descents whose steps take derivatives of descents or
    of Euler runs that take derivatives (millions of nested instructions)."""
    prog = rvm.assemble((ROOT / "programs" / "gradbench" / f"{name}.rasm").read_text(),
                        f"{name}.rasm")
    mi, mn = _pair(prog, dict(inputs, omode=omode, imode=imode))
    _same(mi, mn)
    assert mi.stats["steps"] > 10 ** 6


def test_statements_over_parameter_arrays_and_locals_in_callees():
    """Statements inside a called function, over its parameter array (its bound length) and
    a local array, with the function itself called and uncalled."""
    text = """
input  x: float[3] = [0.4, -1.1, 0.9]
input  s: float = 2.5
output g: float[3]
output d: float[3]

func f(out: float, x: float[3], s: float) {
    out += s * x[0] * x[1] + sin(x[2]) * x[0] + exp(0.3 * x[1] * x[2])
}

func use(g: float[3], d: float[3], x: float[3], s: float) {
    local e: float[3]
    g += grad f(x, s) wrt x
    for k in 0..3 {
        e[k] += 1.0
        d[k] += jvp f(x, s) wrt x along e
        e[k] -= 1.0
    }
}

func main() {
    call use(g, d, x, s)
    uncall use(g, d, x, s)
    call use(g, d, x, s)
}
"""
    mi, mn = _pair(rvm.assemble(text), {"s": -0.75})
    _same(mi, mn)
    assert np.allclose(mn.read("g"), mn.read("d"), rtol=1e-15, atol=1e-15)


def test_batches_of_runs_take_the_native_rows():
    """rvm.run_batch: the rows run the native code one at a time (the lanes do not cover
    statements), each the interpreter's run bit for bit."""
    prog = rvm.assemble(ONE_LEVEL)
    x = np.array([[0.1 * i, -0.2 * i] for i in range(70)])
    c = 1.0 + np.arange(70.0)
    got = rvm.run_batch(prog, {"x": x, "c": c})
    for b in (0, 1, 37, 69):
        want = rvm.run(prog, {"x": x[b], "c": c[b]}, native=False).outputs
        assert list(got["g"][b]) == list(want["g"]) and got["d"][b] == want["d"]
        assert got["g0"][b] == want["g0"]
    assert got["g0"][37] == pytest.approx(3.7 ** 2 * -7.4, rel=1e-14)


def test_what_the_interpreter_traps_on_it_reports():
    # a third level: level 2's function takes a derivative itself
    text = NESTED2.replace("func main() {\n    h += grad df(x, n) wrt x\n}",
                           "func ddf(out: float, x: float, n: int) {\n"
                           "    out += grad df(x, n) wrt x\n}\n\n"
                           "func main() {\n    h += grad ddf(x, n) wrt x\n}")
    prog = rvm.assemble(text, "three.rasm")
    m = rvm.Machine(prog)
    m.compile()
    m.write("n", 3)
    with pytest.raises(NestingError) as e:
        m.run()
    assert m.core.native_run_bails == 1
    mi = rvm.Machine(prog, native=False)
    mi.write("n", 3)
    with pytest.raises(NestingError) as ei:
        mi.run()
    assert str(e.value) == str(ei.value)


def test_the_step_cap_counts_nested_instructions_and_the_interpreter_reports():
    prog = rvm.assemble(LONG, "long.rasm")
    m = rvm.Machine(prog)
    m.compile()
    m.write("n", 10 ** 6)
    with pytest.raises(StepLimit, match="inside the nested runs of this derivative statement"):
        m.run(max_steps=5000)
    assert m.core.native_run_bails == 1
    m.reset({"n": 10})
    m.run(max_steps=1000)
    assert m.read("g") == 1.0 and m.core.native_runs == 1


def test_gradients_of_such_programs_stay_interpreted_by_name():
    prog = rvm.assemble(ONE_LEVEL)
    with pytest.raises(native.Unsupported, match="derivative statements: the program's "
                       "gradients run interpreted"):
        rvm.grad_fn(prog, of="d", wrt=["x"], native=True)
    fn = rvm.grad_fn(prog, of="d", wrt=["x"])
    for _ in range(12):
        fn({})
    assert fn.native.startswith("interpreted: derivative statements")
    with pytest.raises(RVMError):       # and the third order stays refused
        rvm.grad(rvm.assemble(NESTED), of="hg[0]", wrt=["x"], inputs={"omode": 0})


def test_which_functions_may_pop_a_value_their_caller_pushed():
    """Program.pops_below_entry: a derivative statement clears the value stack's duals below
    it only for a function that may pop what it did not push (a pop, or a push run backward
    by an uncall, anywhere down its calls)."""
    prog = rvm.assemble("""
global a: float
func pusher(x: float) {
    push x
}
func popper(x: float) {
    pop x
}
func undoes(x: float) {
    uncall pusher(x)
}
func calls(x: float) {
    call popper(x)
}
func balanced(x: float) {
    call pusher(x)
    call popper(x)
}
func main() {
}
""")
    got = dict(zip([f.name for f in prog.functions], prog.pops_below_entry()))
    assert got == {"pusher": False, "popper": True, "undoes": True, "calls": True,
                   "balanced": True, "main": False}
