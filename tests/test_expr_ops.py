"""The instructions added for expressions (isa/table.py, opcodes 93..102) in the interpreter:
golden values against isa/arith.py and by hand, traps and their messages, random operands
(shift counts and moduli where they matter), loop kernels against plain dispatch, an assert's
message, and the checks of both verifiers.  Programs are built from the table directly
(tests/builder.py), so nothing here depends on the assembler."""
from __future__ import annotations

import math

import numpy as np
import pytest
from builder import ProgramBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_ops import check_op, words
from test_kernels import trajectory

import rvm
from isa.arith import execute, f2w, fixed_from_real, w2f, wrap
from isa.cgen import has_body
from isa.functions import (
    CMP_ALWAYS,
    CMP_EQ,
    CMP_GE,
    CMP_LT,
    CMP_NE,
    FN1_BY_NAME,
    FN2,
    FN2_BY_NAME,
    cond_word,
)
from isa.program import INOUT, Trace
from isa.table import EXACT, OP_BY_NAME, OPS
from isa.types import FIXED, FLOAT, INT, INT64_MAX, INT64_MIN, LNS
from rvm import _core
from rvm.errors import (
    AssertionTrap,
    BytecodeTrap,
    DivisionByZero,
    DomainError,
    InvalidBytecode,
    RangeError,
)
from rvm.machine import Machine
from rvm.verify import check

F = 32


def fx(x: float) -> int:
    return fixed_from_real(x, F)


def run_one(name: str, cells: list[int], extras: list[int]) -> list[int]:
    """Run one instruction on global cells holding `cells` (raw words); the cells after it,
    checked against isa/arith.py's execute on the same operands."""
    op = OP_BY_NAME[name]
    pb = ProgramBuilder(F)
    types = op.operand_types
    row, ci, ei = [], iter(cells), iter(extras)
    vals = []
    for k, kind in enumerate(op.operands):
        if kind in ("y", "a"):
            row.append(pb.glob(f"o{k}", types[k], role=INOUT))
            vals.append(next(ci))
        else:
            row.append(next(ei))
            vals.append(row[-1])
    pb.func("main").op(name, *row)
    m = Machine(pb.build(), stack_cells=4, frame_cells=4)
    m.reset()
    names = [f"o{k}" for k, kind in enumerate(op.operands) if kind in ("y", "a")]
    for nm, w in zip(names, cells):
        m.write_raw(nm, w)
    m.run()
    cell_slots = [k for k, kind in enumerate(op.operands) if kind in ("y", "a")]
    got = [int(m.read_raw(nm)) for nm in names]
    ref = execute(op, vals, F)
    assert got == [ref[k] for k in cell_slots]
    assert m.run(direction=-1) == "start"
    back = execute(OP_BY_NAME[op.inverse], [ref[k] if k in cell_slots else vals[k]
                                            for k in range(len(vals))], F)
    assert [int(m.read_raw(nm)) for nm in names] == [back[k] for k in cell_slots]
    if EXACT in op.flags:
        assert [back[k] for k in cell_slots] == cells            # exact: back to the start
    return got


def fn2(name: str) -> int:
    return FN2_BY_NAME[name].id


# ---- golden values ------------------------------------------------------------------------------

@pytest.mark.parametrize("fn, a, b, want", [
    ("mod", -7, 3, 2), ("mod", 7, -3, -2), ("mod", -7, -3, -1), ("mod", 7, 3, 1),
    ("mod", INT64_MIN, -1, 0), ("mod", INT64_MIN, 3, 1), ("mod", 5, INT64_MIN, INT64_MIN + 5),
    ("shl", 1, 63, INT64_MIN), ("shl", 3, 2, 12), ("shl", -3, 1, -6), ("shl", 5, 64, 0),
    ("shl", 5, 1 << 40, 0), ("shl", 0x7F, 60, -(1 << 60)),
    ("shr", -8, 1, -4), ("shr", -7, 1, -4), ("shr", 7, 1, 3), ("shr", -1, 100, -1),
    ("shr", 5, 64, 0), ("shr", INT64_MIN, 63, -1), ("shr", 100, 0, 100),
    ("bitand", 12, 10, 8), ("bitor", 12, 10, 14), ("bitxor", 12, 10, 6), ("bitand", -1, 5, 5),
    ("bitor", -8, 3, -5), ("bitxor", -1, 0, -1),
    ("min", 3, -2, -2), ("min", -2, 3, -2), ("max", 3, -2, 3), ("max", INT64_MIN, INT64_MAX,
                                                               INT64_MAX),
])
def test_int_functions_of_two_arguments(fn, a, b, want):
    y0 = 1000
    assert run_one("addfn2.i", [y0, a, b], [fn2(fn)])[0] == wrap(y0 + want)
    assert run_one("subfn2.i", [y0, a, b], [fn2(fn)])[0] == wrap(y0 - want)


@pytest.mark.parametrize("x, want", [(0, 0), (-1, -1), (1 << 31, -(1 << 31)),
                                     ((1 << 32) + 5, 5), ((1 << 31) - 1, (1 << 31) - 1),
                                     (INT64_MIN, 0), (-(1 << 31) - 1, (1 << 31) - 1)])
def test_wrap32(x, want):
    assert run_one("addfn.i", [7, x], [FN1_BY_NAME["wrap32"].id])[0] == 7 + want


@pytest.mark.parametrize("fn, a, b, want", [
    ("min", 0.5, -0.25, -0.25), ("max", 0.5, -0.25, 0.5), ("min", -3.0, -3.0, -3.0),
    ("max", 1e-9, 2e-9, 2e-9)])
def test_fixed_min_max_compare_the_words(fn, a, b, want):
    # no binary64 round trip: two words 1 apart at F = 32 stay apart
    assert run_one("addfn2.x", [fx(1.0), fx(a), fx(b)], [fn2(fn)])[0] == fx(1.0) + fx(want)
    lo, hi = (1 << 60) + 1, (1 << 60) + 2        # equal as binary64 values
    assert run_one("addfn2.x", [0, hi, lo], [fn2("min")])[0] == lo
    assert run_one("addfn2.x", [0, lo, hi], [fn2("max")])[0] == hi


def test_float_min_max_keep_signed_zeros_and_ties():
    mn, mx = fn2("min"), fn2("max")
    assert run_one("addfn2.f", [f2w(0.0), f2w(-0.0), f2w(0.0)], [mn])[0] == f2w(-0.0 + 0.0)
    assert run_one("addfn2.f", [f2w(-0.0), f2w(-0.0), f2w(0.0)], [mn])[0] == f2w(-0.0)
    assert w2f(run_one("addfn2.f", [f2w(1.0), f2w(1.5), f2w(-2.0)], [mn])[0]) == -1.0
    assert w2f(run_one("addfn2.f", [f2w(1.0), f2w(1.5), f2w(-2.0)], [mx])[0]) == 2.5
    # a NaN source: b < a is false, so min(1, nan) is 1 (a); min(nan, 1) is nan: a trap
    nan = f2w(math.nan)
    assert w2f(run_one("addfn2.f", [f2w(0.0), f2w(1.0), nan], [mn])[0]) == 1.0


def test_float_sum_is_rounded_once():
    """y += a + b adds the rounded sum: -1e16 + (1e16 + 1) is 0, where two updates give 1."""
    y, a, b = f2w(-1e16), f2w(1e16), f2w(1.0)
    assert run_one("addsum.f", [y, a, b], [])[0] == f2w(0.0)
    assert run_one("subsum.f", [f2w(0.0), a, b], [])[0] == y
    assert run_one("adddif.f", [f2w(0.5), f2w(0.75), f2w(0.25)], [])[0] == f2w(1.0)
    assert run_one("subdif.f", [f2w(0.5), f2w(0.75), f2w(0.25)], [])[0] == f2w(0.0)
    assert run_one("adddif.f", [y, a, f2w(-1.0)], [])[0] == f2w(0.0)


@pytest.mark.parametrize("name, t, a, b", [
    ("xorcmp.ii", INT, 2, 3), ("xorcmp.ix", FIXED, fx(-0.5), fx(0.25)),
    ("xorcmp.if", FLOAT, f2w(-0.0), f2w(0.0)), ("xorcmp.il", LNS, -(5 << F), 3 << F)])
def test_xorcmp_flips_bit_0_iff_the_condition_holds(name, t, a, b):
    from isa.arith import compare
    for cmp in range(7):
        cc = cond_word(cmp, t)
        want = int(compare(cc, a, b))
        assert run_one(name, [0, a, b], [cc])[0] == want
        assert run_one(name, [-2, a, b], [cc])[0] == -2 ^ want
    assert run_one(name, [5, a, b], [cond_word(CMP_ALWAYS, t)])[0] == 4


def test_xorcmp_on_nans():
    nan = f2w(math.nan)
    assert run_one("xorcmp.if", [0, nan, nan], [cond_word(CMP_NE, FLOAT)])[0] == 1
    assert run_one("xorcmp.if", [0, nan, f2w(1.0)], [cond_word(CMP_EQ, FLOAT)])[0] == 0
    assert run_one("xorcmp.if", [0, nan, f2w(1.0)], [cond_word(CMP_GE, FLOAT)])[0] == 0


# ---- traps --------------------------------------------------------------------------------------

def trap_of(name: str, cells: list[int], extras: list[int]):
    op = OP_BY_NAME[name]
    pb = ProgramBuilder(F)
    names = ["y", "a", "b"]
    row, ci, ei = [], iter(cells), iter(extras)
    k = 0
    for kind, t in zip(op.operands, op.operand_types):
        if kind in ("y", "a"):
            row.append(pb.glob(names[k], t, role=INOUT, default=next(ci)))
            k += 1
        else:
            row.append(next(ei))
    pb.func("main").op(name, *row)
    m = Machine(pb.build(), stack_cells=4, frame_cells=4)
    m.reset()
    with pytest.raises((DivisionByZero, DomainError, RangeError)) as e:
        m.run()
    assert [int(m.read_raw(n)) for n in names[:k]] == cells        # nothing changed
    assert m.run(direction=-1) == "start"
    return e.value


def test_trap_messages():
    e = trap_of("addfn2.i", [5, 7, 0], [fn2("mod")])
    assert isinstance(e, DivisionByZero)
    assert e.instruction == "addfn2.i y, a, b, mod"
    assert e.detail == "addfn2.i: modulus by zero" and e.values == {"y": 5, "a": 7, "b": 0}
    e = trap_of("subfn2.i", [0, 1, -3], [fn2("shl")])
    assert isinstance(e, DomainError) and e.detail == "subfn2.i: shift by a negative count -3"
    e = trap_of("addfn2.i", [0, 1, -1], [fn2("shr")])
    assert isinstance(e, DomainError) and "negative count -1" in e.detail
    e = trap_of("addsum.f", [f2w(0.0), f2w(1e308), f2w(1e308)], [])
    assert isinstance(e, RangeError) and e.detail == "addsum.f: float result inf is not finite"
    assert e.values == {"y": 0.0, "a": 1e308, "b": 1e308}
    e = trap_of("subdif.f", [f2w(-1e308), f2w(1e308), f2w(-1e308)], [])
    assert isinstance(e, RangeError) and "not finite" in e.detail
    e = trap_of("adddif.f", [f2w(1e308), f2w(1e308), f2w(-1.0)], [])    # finite inner, y overflows
    assert isinstance(e, RangeError) and e.detail == "adddif.f: float result inf is not finite"
    e = trap_of("addfn2.f", [f2w(0.0), f2w(math.nan), f2w(1.0)], [fn2("min")])
    assert isinstance(e, DomainError)


# ---- random operands: shift counts and moduli where they matter --------------------------------

INT_FNS = [f.id for f in FN2 if INT in f.types]
SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(name=st.sampled_from(["addfn2.i", "subfn2.i"]), fn=st.sampled_from(INT_FNS),
       y=words(INT), a=words(INT),
       b=st.one_of(st.integers(-3, 70), words(INT), st.sampled_from([0, -1, 1, 63, 64])))
def test_int_functions_random(name, fn, y, a, b):
    check_op(OP_BY_NAME[name], [y, a, b], [fn])


@SETTINGS
@given(name=st.sampled_from(["addsum.f", "subsum.f", "adddif.f", "subdif.f"]),
       y=words(FLOAT), a=words(FLOAT),
       b=st.one_of(words(FLOAT), st.sampled_from([f2w(1e308), f2w(-1e308), f2w(math.inf)])))
def test_float_sums_random(name, y, a, b):
    check_op(OP_BY_NAME[name], [y, a, b], [])


# ---- loop kernels -------------------------------------------------------------------------------

def loop(body, cells, n: int = 6, F_: int = 24):
    """A counted loop `for i in 0..n { body }` as the assembler lays it out (a jmp over the
    loop, the body's join, the back edge), built by hand; body(f, cells, i) emits its rows
    and `cells` maps name -> (type, values)."""
    pb = ProgramBuilder(F_)
    nw = pb.glob("n", INT, role=INOUT, default=n)
    i = pb.glob("i", INT, role=INOUT)
    w = {}
    for name, (t, vals) in cells.items():
        if isinstance(vals, list):
            w[name] = pb.glob(name, t, len(vals), role=INOUT, default=vals)
        else:
            w[name] = pb.glob(name, t, role=INOUT, default=vals)
    zero = pb.const("zero", INT, 0)
    idx = {}
    for name, word in w.items():
        if isinstance(cells[name][1], list):
            idx[name + "[i]"] = pb.x(word, len(cells[name][1]), i)
            if "k" in w:
                idx[name + "[k]"] = pb.x(word, len(cells[name][1]), w["k"])
    f = pb.func("main")
    f.jmp("skip", to="out", cond=("==", INT, i, nw))
    f.join("top", came_from="back", cond=("!=", INT, i, zero))
    body(f, {**w, **idx})
    f.op("inc.i", i)
    f.jmp("back", to="top", cond=("<", INT, i, nw))
    f.join("out", came_from="skip", cond=("==", INT, i, zero))
    return pb.build()


I24 = lambda x: fixed_from_real(x, 24)      # noqa: E731
INT_CELLS = {"acc": (INT, 5), "s": (INT, 3), "t": (INT, 0), "k": (INT, 2),
             "xs": (INT, [1, -2, 30, 4, -5, 6, 7, 8]), "cs": (INT, [1, 2, 3, -1, 5, 0, 7, 8]),
             "ds": (INT, [3, -2, 5, 7, 0, 1, 2, 3])}
FLOAT_CELLS = {"f": (FLOAT, f2w(0.5)), "g": (FLOAT, f2w(1.25)), "h": (FLOAT, f2w(1e307)),
               "fs": (FLOAT, [f2w(v) for v in (1.0, -2.5, math.nan, 4.0, 1e308, 6.0, 7.0, 8.0)]),
               "p": (FIXED, I24(0.75)), "q": (FIXED, [I24(v) for v in
                                                     (0.5, -1.0, 2.0, -0.25, 3.0, 1.5, 0, 1)]),
               "u": (INT, 0), "k": (INT, 2)}


def _ops(*rows):
    def body(f, w):
        for name, *args in rows:
            f.op(name, *[w[a] if isinstance(a, str) else a for a in args])
    return body


LT_I, LT_F, NE_F = cond_word(CMP_LT, INT), cond_word(CMP_LT, FLOAT), cond_word(CMP_NE, FLOAT)
INT_BODIES = {
    "shl by xs[i]": _ops(("addfn2.i", "acc", "s", "cs[i]", fn2("shl"))),    # -1 at 3: a trap
    "shr": _ops(("subfn2.i", "acc", "xs[i]", "s", fn2("shr"))),
    "mod by ds[i]": _ops(("addfn2.i", "acc", "xs[i]", "ds[i]", fn2("mod"))),  # 0 at 4: a trap
    "min and max": _ops(("addfn2.i", "acc", "xs[i]", "s", fn2("min")),
                        ("subfn2.i", "t", "xs[i]", "cs[i]", fn2("max"))),
    "bits": _ops(("addfn2.i", "acc", "xs[i]", "s", fn2("bitand")),
                 ("addfn2.i", "t", "xs[i]", "acc", fn2("bitxor")),
                 ("subfn2.i", "s", "ds[i]", "cs[i]", fn2("bitor"))),
    "xorcmp": _ops(("xorcmp.ii", "t", LT_I, "xs[i]", "s"), ("addfn2.i", "acc", "t", "s",
                                                              fn2("max"))),
    "wrap32": _ops(("addfn.i", "acc", "xs[i]", FN1_BY_NAME["wrap32"].id)),
    "aliased": _ops(("addfn2.i", "xs[i]", "s", "xs[k]", fn2("min"))),      # i == k: a trap
    # the body writes k, the index of xs[k]: the general kernel, not run_induct
    "general": _ops(("addfn2.i", "xs[k]", "s", "cs[i]", fn2("shl")),
                    ("xorcmp.ii", "k", LT_I, "xs[i]", "s")),
}
FLOAT_BODIES = {
    "addsum": _ops(("addsum.f", "f", "fs[i]", "g")),                      # nan at 2: a trap
    "subsum overflow": _ops(("subsum.f", "f", "h", "fs[i]")),             # 1e307 + 1e308
    "adddif": _ops(("adddif.f", "f", "g", "fs[i]"), ("subdif.f", "g", "f", "h")),
    "min/max": _ops(("addfn2.f", "g", "f", "fs[i]", fn2("max")),
                    ("addfn2.x", "q[i]", "p", "q[k]", fn2("min"))),       # i == k: a trap
    "fixed min": _ops(("addfn2.x", "p", "q[i]", "q[i]", fn2("max"))),
    "xorcmp.if": _ops(("xorcmp.if", "u", NE_F, "fs[i]", "g"), ("xorcmp.ix", "u", cond_word(
        CMP_LT, FIXED), "q[i]", "p")),
    "general": _ops(("adddif.f", "fs[k]", "g", "fs[i]"),                  # i == k: a trap
                    ("xorcmp.if", "k", NE_F, "fs[i]", "g")),
}


@pytest.mark.parametrize("kind, body", [("int", b) for b in INT_BODIES] +
                         [("float", b) for b in FLOAT_BODIES])
@pytest.mark.parametrize("n", [0, 1, 3, 6, 9])
def test_loops_run_the_same_with_and_without_kernels(kind, body, n):
    cells = INT_CELLS if kind == "int" else FLOAT_CELLS
    prog = loop((INT_BODIES if kind == "int" else FLOAT_BODIES)[body], cells, n)
    assert len(Machine(prog).core.kernels) == 2          # forward and backward: a kernel
    for chunks in ((), [1] * 12, [3, 5, 7, 11], [2, 50]):
        assert trajectory(prog, {}, True, chunks) == trajectory(prog, {}, False, chunks)


@pytest.mark.filterwarnings("ignore::rvm.ad.ReleasedTangentWarning")
@pytest.mark.parametrize("body", ["addsum", "adddif", "fixed min"])
def test_loop_derivatives_are_the_same_with_and_without_kernels(body):
    prog = loop(FLOAT_BODIES[body], {**FLOAT_CELLS, "fs": (FLOAT, [f2w(v) for v in (
        1.0, -2.5, 0.5, 4.0, 0.25, 6.0, 7.0, 8.0)])}, 6)
    out = []
    for kernels in (True, False):
        m = rvm.Machine(prog)
        m.core.set_kernels(kernels)
        of = "p" if "fixed" in body else "f"
        d = rvm.derivatives(prog, of, ["f", "g", "fs", "p", "q"], {}, machine=m)
        t = rvm.jvp(prog, {}, {"g": 1.0, "q": 0.5}, machine=m)
        out.append((d.value, {k: np.asarray(v).tolist() for k, v in d.gradient.items()},
                    {k: np.asarray(v).tolist() for k, v in t.items()}))
    assert out[0] == out[1]
    if body == "addsum":                        # f = f0 + sum(fs) + 6 g
        assert out[0][1]["g"] == 6.0 and out[0][1]["fs"][:6] == [1.0] * 6


def test_a_kernel_op_without_its_case_is_refused_by_name(monkeypatch):
    """The kernel-drift experiment of issue 15.  Kernel eligibility is derived from the table
    (every instruction with a body, which rvm_exec runs), so it cannot drift; an op forced into
    the kernels without a body (alloc: the machine's own case) traps with a named error,
    nothing changed, instead of running as another op."""
    assert _core.KERNEL_OPS == {op.name for op in OPS if has_body(op)}
    scope = {OP_BY_NAME["alloc"].code, OP_BY_NAME["free"].code}
    monkeypatch.setattr(_core, "_KERNEL_CODES", _core._KERNEL_CODES | scope)
    prog = loop(_ops(("alloc", "t"), ("xorand.i", "acc", "xs[i]", "s")), INT_CELLS, 6)
    m = Machine(prog)
    assert len(m.core.kernels) == 2
    m.reset()
    with pytest.raises(BytecodeTrap, match=r"alloc is a loop-kernel opcode \(KERNEL_OPS\) "
                                           r"but kernel_row has no case for it") as e:
        m.run()
    assert e.value.instruction == "alloc t" and e.value.pc == 3
    # the state is the dispatch loop's at the same step, and runs back to the start
    plain = Machine(prog)
    plain.core.set_kernels(False)
    plain.reset()
    plain.step(e.value.step)
    n = prog.n_static
    assert (m.mem[:n] == plain.mem[:n]).all() and m.pc == plain.pc
    m.core.set_kernels(False)                   # (the backward kernel would refuse too)
    assert m.run(direction=-1) == "start" and m.read("acc") == 5


# ---- assert messages ----------------------------------------------------------------------------

def assert_program(msg: Trace | None, cond=("<", INT)):
    pb = ProgramBuilder(F)
    a = pb.glob("a", cond[1], role=INOUT, default=5)
    b = pb.glob("b", cond[1], role=INOUT, default=3)
    two = pb.const("2:int", INT, 2)
    if msg is not None:
        msg.operands = [{"a": a, "b": b, "2": two}[w] if isinstance(w, str) else w
                        for w in msg.operands]
        pb.traces.append(msg)
    f = pb.func("main")
    f.op("assert", cond_word(CMP_LT, cond[1]), a, b, len(pb.traces) if msg else 0)
    return pb.build()


def assertion(prog, direction=1) -> AssertionTrap:
    m = Machine(prog)
    if direction > 0:
        m.reset()
    else:
        m.reset_end({"a": 5, "b": 3})
    with pytest.raises(AssertionTrap) as e:
        m.run(direction)
    return e.value


def test_assert_without_a_message():
    e = assertion(assert_program(None))
    assert e.detail == "assertion a < b is false" and e.values == {"a": 5, "b": 3}
    assert e.instruction == "assert a < b"


def test_assert_message_with_names():
    e = assertion(assert_program(Trace("`num * try` must be below `n`", ["a", "b"],
                                       ["num * try", "n"])))
    assert e.detail == "`num * try` must be below `n`"
    assert e.values == {"num * try": 5, "n": 3}
    assert e.instruction == 'assert a < b, "`num * try` must be below `n`"'
    assert str(e).splitlines()[0].endswith("`num * try` must be below `n`")
    back = assertion(assert_program(Trace("m", ["a", "b"], ["x", "y"])), direction=-1)
    assert back.detail == "m" and back.values == {"x": 5, "y": 3} and back.direction == -1


def test_assert_message_without_names_or_operands():
    e = assertion(assert_program(Trace('say "no"\n', [], None)))
    assert e.detail == 'say "no"\n' and e.values == {"a": 5, "b": 3}
    assert e.instruction == 'assert a < b, "say \\"no\\"\\n"'
    # fewer names than words: the rest by their operand names; literals say nothing
    e = assertion(assert_program(Trace("stack full", ["a", "2", "b"], ["size(s)"])))
    assert e.values == {"size(s)": 5, "b": 3}


# ---- the verifiers ------------------------------------------------------------------------------

def one_row(name: str, words_: list, t_y=INT, t_src=None, traces=()):
    op = OP_BY_NAME[name]
    pb = ProgramBuilder(F)
    y = pb.glob("y", t_y, role=INOUT)
    a = pb.glob("a", t_src or t_y, role=INOUT)
    b = pb.glob("b", t_src or t_y, role=INOUT)
    pb.traces.extend(traces)
    cells = iter([y, a, b])
    row = [next(cells) if k in ("y", "a") else w for k, w in zip(op.operands, words_)]
    pb.func("main").op(name, *row)
    return pb.build()


def rejected(prog, fragment: str, core: bool = True) -> None:
    """rvm.verify reports the problem; so does the core's own check (core=True) when it is
    one the core looks for (it checks what the loop relies on, not cell types)."""
    problems = check(prog)
    assert any(fragment in p for p in problems), problems
    if core:
        with pytest.raises(InvalidBytecode):
            Machine(prog)


@pytest.mark.parametrize("name, fn, t", [
    ("addfn2.i", "pow", INT), ("addfn2.i", "hypot", INT), ("addfn2.x", "mod", FIXED),
    ("subfn2.f", "shl", FLOAT), ("addfn2.x", "bitand", FIXED), ("addfn.x", "wrap32", FIXED)])
def test_functions_exist_only_for_their_types(name, fn, t):
    table = FN2_BY_NAME if "fn2" in name else FN1_BY_NAME
    prog = one_row(name, ["y", "a", "b", table[fn].id] if "fn2" in name else
                   ["y", "a", table[fn].id], t)
    rejected(prog, f"function {fn} does not exist for")


def test_valid_functions_pass_both_verifiers():
    for name, t in (("addfn2.i", INT), ("addfn2.x", FIXED), ("subfn2.f", FLOAT)):
        for f in FN2:
            if t in f.types:
                prog = one_row(name, ["y", "a", "b", f.id], t)
                assert check(prog) == [] and Machine(prog)
    prog = one_row("addfn.i", ["y", "a", FN1_BY_NAME["wrap32"].id])
    assert check(prog) == [] and Machine(prog)


def test_xorcmp_condition_type_is_its_sources_type():
    rejected(one_row("xorcmp.if", ["y", cond_word(CMP_LT, INT), "a", "b"], INT, FLOAT),
             "the condition compares int values, the sources of xorcmp.if are float")
    rejected(one_row("xorcmp.ii", ["y", cond_word(CMP_LT, INT), "a", "b"], INT, FLOAT),
             "cell has type float, xorcmp.ii needs int", core=False)
    rejected(one_row("xorcmp.ii", ["y", 99, "a", "b"]), "invalid condition word 99")
    ok = one_row("xorcmp.il", ["y", cond_word(CMP_ALWAYS, LNS), "a", "b"], INT, LNS)
    assert check(ok) == [] and Machine(ok)


def test_assert_message_operand():
    tr = [Trace("m", [], ["x"])]
    for msg in (0, 1):
        prog = one_row("assert", [cond_word(CMP_LT, INT), "a", "b", msg], traces=tr)
        prog.code[1, 1], prog.code[1, 2], prog.code[1, 3] = cond_word(CMP_LT, INT), 8, 16
        assert check(prog) == [] and Machine(prog)
    for msg in (2, -1):
        prog = one_row("assert", [cond_word(CMP_LT, INT), "a", "b", msg], traces=tr)
        prog.code[1, 1], prog.code[1, 2], prog.code[1, 3] = cond_word(CMP_LT, INT), 8, 16
        rejected(prog, f"message {msg} is not 0 (none) or a trace entry + 1 (1..1)")
    # the message's words are checked like a trace's
    prog = one_row("assert", [cond_word(CMP_LT, INT), "a", "b", 1],
                   traces=[Trace("m", [999 << 3], None)])
    prog.code[1, 1], prog.code[1, 2], prog.code[1, 3] = cond_word(CMP_LT, INT), 8, 16
    rejected(prog, "trace 0 operand 0: G address 999 is outside static memory")
