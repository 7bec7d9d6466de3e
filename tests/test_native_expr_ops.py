"""Native code (rvm/native/codegen.py) of the instructions added for expressions gives the
interpreter's results bit for bit: gradients, loss, steps, drift and every global's words, and
where the interpreter traps (a shift by a negative count, a modulus by zero, a sum that is not
finite, aliased cells) the native code hands back and the interpreter reports the same error."""
from __future__ import annotations

import math

import pytest
from builder import ProgramBuilder
from test_expr_ops import FLOAT_BODIES, FLOAT_CELLS, INT_BODIES, INT_CELLS, loop
from test_native_corners import same

from isa.arith import f2w, fixed_from_real
from isa.functions import CMP_GT, CMP_LE, CMP_LT, CMP_NE, FN1_BY_NAME, FN2, cond_word
from isa.program import INOUT
from isa.types import FIXED, FLOAT, INT, LNS
from rvm import native

pytestmark = [pytest.mark.skipif(native.compiler() is None, reason="no C compiler"),
              pytest.mark.filterwarnings("ignore::rvm.ad.ReleasedTangentWarning")]

F = 24


def fx(x: float) -> int:
    return fixed_from_real(x, F)


def straight_line():
    """Every new float/fixed update in a row (y += a + b, y -= a - b, min and max), with the
    comparisons as values (xorcmp) on every type, and the int functions on the way."""
    pb = ProgramBuilder(F)
    g = {}
    for name, t, v in (("x", FLOAT, 1.5), ("y", FLOAT, -0.75), ("z", FLOAT, 0.0),
                       ("w", FLOAT, 2.0), ("p", FIXED, 0.5), ("q", FIXED, -1.25),
                       ("r", FIXED, 0.0), ("a", INT, 13), ("b", INT, 3), ("c", INT, 0),
                       ("d", INT, 0), ("e", INT, 0), ("l", LNS, None)):
        word = f2w(v) if t == FLOAT else fx(v) if t == FIXED else (v if t == INT else 2 << F)
        g[name] = pb.glob(name, t, role=INOUT, default=word)
    fid = {f.name: f.id for f in FN2}
    f = pb.func("main")
    f.op("addsum.f", g["z"], g["x"], g["y"])          # z = x + y
    f.op("adddif.f", g["w"], g["x"], g["z"])          # w += x - z
    f.op("addfn2.f", g["z"], g["x"], g["w"], fid["max"])
    f.op("subfn2.f", g["z"], g["y"], g["w"], fid["min"])
    f.op("subsum.f", g["w"], g["z"], g["z"])          # two equal sources
    f.op("subdif.f", g["z"], g["w"], g["y"])
    f.op("addfn2.x", g["r"], g["p"], g["q"], fid["min"])
    f.op("subfn2.x", g["r"], g["q"], g["p"], fid["max"])
    f.op("xorcmp.if", g["c"], cond_word(CMP_LT, FLOAT), g["x"], g["y"])
    f.op("xorcmp.ix", g["c"], cond_word(CMP_GT, FIXED), g["p"], g["q"])
    f.op("xorcmp.ii", g["d"], cond_word(CMP_LE, INT), g["a"], g["b"])
    f.op("xorcmp.il", g["d"], cond_word(CMP_NE, LNS), g["l"], g["l"])
    for name in ("mod", "shl", "shr", "bitand", "bitor", "bitxor", "min", "max"):
        f.op("addfn2.i", g["e"], g["a"], g["b"], fid[name])
    f.op("subfn2.i", g["e"], g["b"], g["a"], fid["shl"])
    f.op("addfn.i", g["e"], g["a"], FN1_BY_NAME["wrap32"].id)
    f.op("addmul.f", g["z"], g["w"], g["x"])          # the loss depends on everything above
    return pb.build()


def test_straight_line_agrees_bit_for_bit():
    prog = straight_line()
    obs, f = same(prog, "z", ["x", "y", "w", "z"], [
        {}, {"x": 0.25}, {"y": 3.0, "b": 0}, {"b": -2}, {"x": 1e308, "y": 1e308},
        {"a": -(1 << 40), "b": 70}, {"x": math.nan}])
    # mod by 0, shl by -2, x + y = inf, b << -2**40, a NaN sum: handed back; the rest native
    assert [o[1] for o in obs if o[0] == "error"] == ["DivisionByZero", "DomainError",
                                                      "RangeError", "DomainError", "RangeError"]
    assert f.runner.core.native_bails == 5
    obs, f = same(prog, "r", ["p", "q", "r"], [{}, {"p": -2.0}, {"q": -3.0}, {"p": 0.5, "q": 0.5}])
    grads = [o[0]["p"] for o in obs]                  # r += min(p, q) - max(q, p)
    assert f.runner.core.native_bails == 0 and grads[1] != grads[2]


@pytest.mark.parametrize("body", sorted(FLOAT_BODIES))
def test_float_loops_agree_including_traps(body):
    prog = loop(FLOAT_BODIES[body], {**FLOAT_CELLS, "k": (INT, 5)}, 2)
    of = "p" if "fixed" in body else "f"
    same(prog, of, ["f", "g", "h", "fs", "p", "q"],
         [{"n": 2}, {"n": 0}, {"n": 5}, {"n": 9}, {"n": 1, "g": -0.5}, {"n": 2}])


@pytest.mark.parametrize("body", sorted(INT_BODIES))
def test_int_loops_agree_including_traps(body):
    """The int results show in the words snapshots of every global."""
    prog = loop(INT_BODIES[body], {**INT_CELLS, "z": (FLOAT, f2w(0.5))}, 2)
    same(prog, "z", ["z"], [{"n": 2}, {"n": 0}, {"n": 3}, {"n": 6}, {"n": 9}, {"n": 1}])
