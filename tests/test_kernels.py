"""Loop kernels (rvm/_kernels.pxi, run_kernel) are invisible: with and without them every run
passes through the same states at the same steps, stops at the same step limits and traps at
the same instruction with the same state, forward, backward and under AD."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table_statements import DATA_OPS, every_statement
from test_reversibility import programs, start_values

import rvm
from isa.derivatives import DIFFERENTIABLE
from isa.types import FIXED, FLOAT, INT, LNS
from rvm.errors import StepLimit, Trap

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def trajectory(prog, values, kernels: bool, chunks=(), direction=+1, max_steps=50_000):
    """What a run shows from outside: states after each chunk of steps, the end or the trap,
    then the run back to the start."""
    m = rvm.Machine(prog)
    m.core.set_kernels(kernels)
    m.reset(values)
    n = prog.n_static
    seen = []
    try:
        for k in chunks:
            m.step(k, direction)
            seen.append((m.t, m.pc, m.status, m.mem[:n].tobytes()))
        m.run(direction, max_steps=max_steps)
        seen.append(("end", m.t, m.mem[:n].tobytes()))
    except StepLimit:
        seen.append(("limit", m.t, m.pc, m.mem[:n].tobytes()))
    except Trap as e:
        seen.append(("trap", type(e).__name__, e.pc, e.step, m.mem[:n].tobytes(),
                     tuple(sorted((k, str(v)) for k, v in e.values.items()))))
    try:
        m.run(-direction, max_steps=max_steps)
        seen.append(("back", m.t, m.status, m.mem[:n].tobytes()))
    except (Trap, StepLimit) as e:
        seen.append(("back-trap", type(e).__name__, m.t))
    return seen


def same_both_ways(prog, values, chunks=()):
    a = trajectory(prog, values, True, chunks)
    b = trajectory(prog, values, False, chunks)
    assert a == b


LOOPS = """
.fixed 24
inout n: int = 5
inout k: int
inout xs: float[6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
inout f: float = 0.5
inout g: float = 1e300
inout h: float = 1e307
inout q: fixed[4] = [0.5, 0.25, 1.5, -2.0]
inout p: fixed = 0.75
inout t: fixed = 0.3
inout j: int
inout u: int = 3
inout v: int = 7
inout e: float = 1.25
inout d: float = -0.375
inout r: fixed = -0.4
inout l: lns = 1.5
inout m: lns = 0.5
inout o: lns = -2.0
func main() {
    for i in 0..n {
        BODY
    }
}
"""

BODIES = [
    "f += xs[i]",                          # indexed source, i in 0..n
    "xs[i] += f * f",                      # indexed target
    "f += g * g",                          # float overflow: a trap inside the kernel
    "f += xs[i] * h",                      # ... after a few iterations
    "f -= xs[i] / g",
    "j += n / k",                          # an int division by zero: a trap
    "p += t / q[i]",                       # fixed
    "f += h / xs[i]\n        f -= g",       # a float overflow after a few iterations
    "inc k\n        f += 1.0",
    "rot xs[i], xs[k], f",                 # the operands alias when i == k: a trap
    "rot xs[i], g, f",
    "q[j] += p * t\n        inc j",        # j runs past the end of q: a bounds trap
    "swap p, t\n        p += t * t",
    "xs[k] += f\n        k ^= i",          # the index changes inside the loop
    "k += i\n        xs[0] += xs[1]",
    # one update and the counter: run_reduce keeps the target and i in registers
    "p += q[i] * t",                       # fixed, indexed by the counter: a bounds trap at 4
    "f -= 2.5",
    "f += exp(xs[i])",                     # y += f(x)
    "p += sqrt(q[i])",                     # q[3] < 0: a domain trap mid-loop
    "f -= hypot(xs[i], h)",                # y += f(a, b)
    "k += sqrt(n)\n        inc j",
    "p += t",                              # an invariant source: the dual in a register
    "f -= g",
    "f += xs[i] * xs[i]",
    "j += n * n",
    "k -= i",                              # reads the counter: the general kernel
    "xs[0] += xs[i]",                      # the target inside the source array: aliases at 0
]


# every data instruction of the table, each function of a fn family, in its own syntax on
# the cells below (tests/table_statements.py): a new instruction runs here without an edit
TABLE_POOLS = {INT: ["u", "v", "n"], FIXED: ["p", "t", "r"], FLOAT: ["f", "e", "d"],
               LNS: ["l", "m", "o"]}
TABLE_BODIES = every_statement(TABLE_POOLS, avoid=["n"])       # n: the loop's bound
TABLE_WRT = ["f", "e", "d", "p", "t", "r", "l", "m", "o"]


def table_of(case) -> str:
    """The cell to differentiate for a table body: its target, or f if that is an int."""
    return case.written[0] if case.op.operand_types[0] in DIFFERENTIABLE else "f"


def test_the_table_bodies_cover_the_table():
    assert {c.op.name for c in TABLE_BODIES} == {op.name for op in DATA_OPS}
    assert {"cswap.i", "addfn.x-log", "addfn2.i-shl", "xorcmp.if", "cvt.lf", "rot.f"} <= \
        {c.id for c in TABLE_BODIES}


@pytest.mark.parametrize("case", TABLE_BODIES, ids=lambda c: c.id)
def test_every_table_instruction_runs_the_same_with_and_without_kernels(case):
    prog = rvm.assemble(LOOPS.replace("BODY", case.text))
    assert len(rvm.Machine(prog).core.kernels) == 2          # forward and backward
    for n in (1, 6):
        same_both_ways(prog, {"n": n})
        same_both_ways(prog, {"n": n}, [1, 1, 2, 5])            # step limits inside the kernel


@pytest.mark.filterwarnings("ignore::rvm.ad.ReleasedTangentWarning")
@pytest.mark.parametrize("case", TABLE_BODIES, ids=lambda c: c.id)
def test_every_table_instruction_differentiates_the_same_with_and_without_kernels(case):
    prog = rvm.assemble(LOOPS.replace("BODY", case.text))
    of = table_of(case)
    assert derivative_run(prog, of, True, TABLE_WRT) == derivative_run(prog, of, False, TABLE_WRT)


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("n", [0, 1, 3, 6, 9])
def test_loop_bodies_run_the_same_with_and_without_kernels(body, n):
    prog = rvm.assemble(LOOPS.replace("BODY", body))
    same_both_ways(prog, {"n": n})
    for chunks in ([1] * 12, [3, 5, 7, 11], [2, 50]):      # step limits inside the kernel
        same_both_ways(prog, {"n": n}, chunks)


def derivative_run(prog, of, kernels, wrt=("f", "g", "p", "t", "xs", "q")):
    """What differentiating shows from outside: gradient and tangents, or the error."""
    m = rvm.Machine(prog)
    m.core.set_kernels(kernels)
    wrt = list(wrt)
    try:
        d = rvm.derivatives(prog, of, wrt, {"n": 5}, machine=m)
        t = rvm.jvp(prog, {"n": 5}, {w: 0.5 for w in wrt}, machine=m)
    except (Trap, rvm.errors.RVMError) as e:
        return ("error", type(e).__name__, str(e).splitlines()[0])
    return (d.value, {k: np.asarray(v).tolist() for k, v in d.gradient.items()},
            {k: np.asarray(v).tolist() for k, v in t.items()}, d.drift)


@pytest.mark.filterwarnings("ignore::rvm.ad.ReleasedTangentWarning")
@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("of", ["f", "p"])
def test_loop_bodies_differentiate_the_same_with_and_without_kernels(body, of):
    """Adjoint and tangent rules inside every kernel form, float and fixed."""
    prog = rvm.assemble(LOOPS.replace("BODY", body))
    assert derivative_run(prog, of, True) == derivative_run(prog, of, False)


def test_kernels_are_found_for_the_benchmark_loops():
    from gen_programs import umm

    acc = rvm.Machine(rvm.assemble(ROOT / "programs" / "accumulate.rasm")).core
    assert len(acc.kernels) == 2                     # the loop, forward and backward
    assert acc.kernel_forms == ["reduce", "reduce"]
    core = rvm.Machine(rvm.assemble(umm(10))).core   # the Givens inner loop, the loss sum
    assert sorted(core.kernel_forms) == ["induct", "induct", "reduce", "reduce"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(floats=True), start_values(), st.lists(st.integers(1, 40), max_size=4))
def test_random_programs_run_the_same_with_and_without_kernels(src, values, chunks):
    same_both_ways(rvm.assemble(src), values, chunks)


@pytest.mark.parametrize("name, of, wrt, inputs", [
    ("accumulate.rasm", "x", ["x", "one"], {"n": 50}),
    ("umm.rasm", "loss", ["x", "theta"], {}),
    ("besselj.rasm", "out", ["z"], {}),
    ("besselj_rec.rasm", "out", ["z"], {}),
    ("oscillator.rasm", "x", ["x", "v", "dt"], {"steps": 20}),
])
def test_gradients_are_the_same_with_and_without_kernels(name, of, wrt, inputs):
    prog = rvm.assemble(ROOT / "programs" / name)
    results = []
    for kernels in (True, False):
        m = rvm.Machine(prog)
        m.core.set_kernels(kernels)
        d = rvm.derivatives(prog, of, wrt, inputs, hessian=len(wrt) == 1, machine=m)
        results.append((d.value, {k: np.asarray(v).tolist() for k, v in d.gradient.items()},
                        None if d.hessian is None else d.hessian.tolist(), d.drift))
    assert results[0] == results[1]


DOT = """
inout n: int = 6
inout a: float[6] = [1.0, -2.0, 3.5, 0.25, 2.0, -1.5]
inout b: float[6] = [0.5, 1.5, -1.0, 4.0, 3.0, 2.0]
inout c: float = 0.75
inout s: float
func main() {
    for i in 0..n {
        s += a[i] * b[i]
    }
    for i in 0..n {
        s += c
    }
}
"""


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("wrt", [["a", "b", "c"], ["c"]])
def test_reduction_gradients_are_the_same_with_and_without_kernels(wrt, fixed):
    """The reduce kernel keeps the changing dual of `s += c` in a register (the adjoint of c
    in the adjoint sweep, the tangent of s in tangent mode), for float and fixed cells."""
    prog = rvm.assemble(DOT.replace("float", "fixed") if fixed else DOT)
    assert [len(rows) for _, _, rows in rvm.Machine(prog).core.kernels] == [2, 2, 2, 2]
    results = []
    for kernels in (True, False):
        m = rvm.Machine(prog)
        m.core.set_kernels(kernels)
        d = rvm.derivatives(prog, "s", wrt, {}, hessian=len(wrt) == 1, machine=m)
        t = {k: np.asarray(v).tolist()
             for k, v in rvm.jvp(prog, {}, {w: 1.0 for w in wrt}, machine=m).items()}
        results.append((d.value, {k: np.asarray(v).tolist() for k, v in d.gradient.items()},
                        None if d.hessian is None else d.hessian.tolist(), t))
    assert results[0] == results[1]
    grad = results[0][1]
    assert grad["c"] == 6.0
    if "a" in grad:
        assert grad["a"] == [0.5, 1.5, -1.0, 4.0, 3.0, 2.0]
        assert grad["b"] == [1.0, -2.0, 3.5, 0.25, 2.0, -1.5]
