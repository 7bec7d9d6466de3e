"""Tangent activity in the native tangent modes (rvm/native/activity.py's `tangent` and `flow`
views, used by rvm/native/tangent.py): which tangents can be nonzero, and the generated code
that leaves the others out giving the interpreter's values, tangents, Hessian-vector products,
Hessians and steps, bit for bit."""
from __future__ import annotations

from pathlib import Path

import pytest
from test_native_activity import MIXED

import rvm
from isa.derivatives import DIFFERENTIABLE
from isa.table import OPS
from rvm import native
from rvm.native.activity import Activity

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
OPS_BY_CODE = {op.code: op for op in OPS}


def operands(prog):
    """(function, pc, word) of every differentiable cell operand of the program's rows."""
    for fi, f in enumerate(prog.functions):
        for pc in range(f.begin, f.end + 1):
            op = OPS_BY_CODE[int(prog.code[pc][0])]
            for i, k in enumerate(op.operands):
                if k in ("y", "a") and op.operand_types[i] in DIFFERENTIABLE:
                    yield fi, pc, int(prog.code[pc][1 + i])


def test_the_flow_insensitive_view_holds_every_row_view():
    """flow=False (the sweep's tangents) is varied wherever the per-row view of main is, and
    more: MIXED's h and k are constants of n, varied in no row's view, but their expression
    temporaries hold values of x in other statements, so flow-insensitively they are."""
    prog = rvm.assemble(MIXED)
    x = next(g for g in prog.globals if g.name == "x")
    seeds = range(x.addr, x.addr + x.size)
    rows, anywhere = Activity(prog, seeds), Activity(prog, seeds, flow=False)
    ops = list(operands(prog))
    assert all(anywhere.active(*o) for o in ops if rows.active(*o))
    assert any(anywhere.active(*o) and not rows.active(*o) for o in ops)
    for name in ("h", "k"):
        g = next(g for g in prog.globals if g.name == name)
        assert not rows.ever(prog.main, g.addr << 3), name
        assert anywhere.ever(prog.main, g.addr << 3), name


def test_an_lns_scale_target_has_a_tangent_of_its_own():
    """y *= g multiplies y's tangent by g, and g * 0 is NaN for an infinite g: with
    `tangent`, the target of an lns scale rule is varied even from a constant factor."""
    prog = rvm.assemble("inout x: float = 1.0\ninout n: int = 3\ninout y: lns = 2.0\n"
                        "output z: float\n"
                        "func main() {\n    y *= lns(n)\n    z += x * 2.0\n}\n")
    x = next(g for g in prog.globals if g.name == "x")
    y = next(g for g in prog.globals if g.name == "y")
    plain, tangent = Activity(prog, [x.addr]), Activity(prog, [x.addr], tangent=True)
    assert not plain.ever(prog.main, y.addr << 3)
    assert tangent.ever(prog.main, y.addr << 3)


def test_frame_cells_are_the_varied_locals():
    """besselj_rec's frame: a[], q[], h, x and p carry derivatives of z; fact[], c, v and the
    int counters do not, so only those five have their duals cleared."""
    prog = rvm.assemble(ROOT / "programs" / "besselj_rec.rasm")
    z = next(g for g in prog.globals if g.name == "z")
    main = prog.functions[prog.main]
    for act in (Activity(prog, [z.addr], tangent=True), Activity(prog, None, tangent=True),
                Activity(prog, [z.addr], tangent=True, flow=False)):
        cells = act.frame_cells(prog.main)
        names = {loc.name for loc in main.locals
                 if any(loc.offset <= k < loc.offset + (loc.length or 1) for k in cells)}
        assert names == {"a", "q", "h", "x", "p"}, names
