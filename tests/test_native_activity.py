"""Activity analysis in the native sweep (rvm/native/activity.py): the generated sweep leaves
out the adjoint updates that cannot reach a wrt cell, and the gradient, loss, steps and words
stay the interpreter's bit for bit, for every choice of wrt cells."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from test_native_corners import observe

import rvm
from isa.derivatives import DIFFERENTIABLE
from isa.table import OPS
from rvm import native
from rvm.native.activity import Activity

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
OPS_BY_CODE = {op.code: op for op in OPS}

# a temporary shared by a statement on constants and one on the wrt cells, a swap, the value
# stack, a call whose parameter is bound to a varied and to a constant cell, a loop
MIXED = """
input  x: float[3] = [0.5, -1.25, 2.0]
input  c: float = 3.0
input  n: int = 4
output y: float
global h: float
global t: float[3]
global k: float

func scale(a: float, b: float) {
    a += b * 2.0
}

func main() {
    h += 2.0 / float(n - 1)
    for i in 0..len(x) {
        local ti: float = float(i) * h - 1.0
        t[i] += ti * ti
        y += x[i] * t[i] + sin(x[i] * ti)
        delocal ti = float(i) * h - 1.0
    }
    swap k, h
    push k
    call scale(y, c)
    call scale(k, c)
    pop k
    y += k * c
}
"""


def wrt_choices(prog):
    names = [g.name for g in prog.globals if g.type in DIFFERENTIABLE]
    return [list(c) for r in (1, 2) for c in itertools.combinations(names, r)]


@pytest.mark.parametrize("source, of, inputs", [
    (MIXED, "y", [{}, {"x": [1.0, 2.0, -0.5], "c": -1.5, "n": 7}]),
    (ROOT / "programs" / "gradbench" / "llsq.rasm", "y", [{}, {"x": [0.25, -1.0, 3.0]}]),
    (ROOT / "programs" / "gradbench" / "lse.rasm", "r", [{}, {"x": [4.0, -1.0, 2.0, 4.0]}]),
    (ROOT / "programs" / "besselj.rasm", "out", [{"z": 3.0}, {"z": 1.5, "nu": 0}]),
    (ROOT / "programs" / "norm.rasm", "res", [{}]),
    (ROOT / "programs" / "oscillator.rasm", "x", [{"steps": 20}]),
])
def test_every_wrt_choice_gives_the_interpreters_gradient_bit_for_bit(source, of, inputs):
    prog = rvm.assemble(source) if isinstance(source, Path) else rvm.assemble(source)
    for wrt in wrt_choices(prog):
        if of in wrt:
            continue
        nat, f = observe(prog, of, wrt, inputs, True)
        assert f.native.startswith("native"), f.native
        assert f.runner.core.native_bails == 0
        assert nat == observe(prog, of, wrt, inputs, False)[0], wrt


def skipped(prog, wrt_names):
    """(rule operands, those the sweep leaves out) over the rows of every function."""
    wrt = None if wrt_names is None else \
        [a for g in prog.globals if g.name in wrt_names for a in range(g.addr, g.addr + g.size)]
    act = Activity(prog, wrt)
    total, out = 0, []
    for fi, f in enumerate(prog.functions):
        for pc in range(f.begin, f.end + 1):
            op = OPS_BY_CODE[int(prog.code[pc][0])]
            for i, k in enumerate(op.operands):
                if k in ("y", "a") and op.operand_types[i] in DIFFERENTIABLE:
                    total += 1
                    if not act.active(fi, pc, int(prog.code[pc][1 + i])):
                        out.append((pc, op.name, i))
    return total, out


def test_cells_of_constants_are_left_out_and_wrt_cells_kept():
    prog = rvm.assemble(MIXED)
    main = prog.functions[prog.main]
    _, only_x = skipped(prog, ["x"])
    _, any_global = skipped(prog, None)
    # with x the only wrt cell, h (a constant of n) and the sample points ti are left out
    # (h's division, ti's products), which any-global seeds keep (h could be a wrt cell)
    rows = {(OPS_BY_CODE[int(prog.code[pc][0])].name, i) for pc, _, i in only_x
            if main.begin <= pc <= main.end}
    assert ("adddiv.f", 2) in rows and ("addmul.f", 1) in rows
    assert len(only_x) > len(any_global)
    # no operand naming x is ever left out
    x = next(g for g in prog.globals if g.name == "x")
    for pc, _, i in only_x:
        w = int(prog.code[pc][1 + i])
        assert not ((w & 7) == 0 and x.addr <= w >> 3 < x.addr + x.size)


def test_the_generated_sweep_is_smaller_with_fewer_wrt_cells():
    prog = rvm.assemble(MIXED)
    x = next(g for g in prog.globals if g.name == "x")
    everything = native.generate(prog)
    only_x = native.generate(prog, range(x.addr, x.addr + x.size))
    sweep = [src[src.index("main_ba(rvm_ns* st"):] for src in (everything, only_x)]
    assert sweep[1].count("rvm_ad_") < sweep[0].count("rvm_ad_")


def test_llsq_leaves_out_the_sample_points():
    prog = rvm.assemble(ROOT / "programs" / "gradbench" / "llsq.rasm")
    total, out = skipped(prog, ["x"])
    assert out and total > len(out)
    g = rvm.grad_fn(prog, of="y", wrt=["x"], native=True)
    ref = rvm.grad_fn(prog, of="y", wrt=["x"], native=False)
    for _ in range(2):
        a, b = g({"x": np.array([0.5, 0.25, 0.125])}), ref({"x": np.array([0.5, 0.25, 0.125])})
        assert a["x"].tobytes() == b["x"].tobytes()
