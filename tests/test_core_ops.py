"""Every data opcode of the interpreter against the reference arithmetic (isa/arith.py), bit for
bit, forward and backward, including which inputs trap.

The opcode list is walked from isa.table.OPS, so a new opcode without a test here fails
`test_every_opcode_is_covered`.
"""
from __future__ import annotations

import math
import struct
from functools import cache, lru_cache

import pytest
from builder import ProgramBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa.arith import ArithTrap, compare, execute, f2w, fixed_from_real, lns_from_real, wrap
from isa.cgen import has_body
from isa.functions import CMP_BY_SYMBOL, CMP_SYMBOLS, FN1, FN2, cond_word
from isa.table import CONTROL, DATA, EXACT, INVERSE, OPS, READS_ONLY
from isa.types import ALL_TYPES, FIXED, FLOAT, INT, INT64_MAX, INT64_MIN, LNS, LNS_LOG_MAX, LNS_ZERO
from rvm.errors import AssertionTrap, DivisionByZero, DomainError, RangeError
from rvm.machine import Machine

F = 32
KIND = {"div0": DivisionByZero, "domain": DomainError, "range": RangeError}
# derivative statements run a function: tests/test_nested_ad.py tests them with programs
# every data instruction with value semantics in the table (a law and f, or a body); the
# machine's own (value stack, scopes, derivative statements) are tested with their own programs
ARITH_OPS = [op for op in OPS if has_body(op)]
OP_CODE = {op.name: op.code for op in OPS}
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---- words of every type, with the edges that break implementations ----------------------------

def edges(t, F: int = F) -> list[int]:
    if t == INT:
        return [INT64_MIN, INT64_MIN + 1, -2, -1, 0, 1, 2, 3, INT64_MAX - 1, INT64_MAX, 1 << 32,
                -(1 << 32), 1 << 62]
    if t == FIXED:
        one = 1 << F
        pi = fixed_from_real(math.pi, F) if F < 61 else one
        return [wrap(w) for w in (INT64_MIN, INT64_MAX, -1, 0, 1, one, -one, one >> 1,
                                  3 * (one >> 1), 2 * one, -3 * one, pi, (one >> 1) + 1,
                                  1 << 62, -(1 << 62))]
    if t == LNS:
        scaled = [lns_from_real(0.5, F), lns_from_real(3.0, F)] if F < 61 else []
        return [wrap(w) for w in [LNS_ZERO, 0, 1, 2 << F, (2 << F) | 1, -(2 << F),
                                  LNS_LOG_MAX << 1, (-LNS_LOG_MAX << 1) | 1, INT64_MAX,
                                  LNS_ZERO + 1] + scaled]
    return [f2w(x) for x in (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, math.pi, -math.pi, 1e-300,
                             5e-324, 1e300, -1e300, 1.5, 0.1)]


def words(t, F: int = F) -> st.SearchStrategy[int]:
    full = st.integers(INT64_MIN, INT64_MAX)
    if t == INT:
        rand = st.integers(-(1 << 40), 1 << 40)
    elif t == FIXED:
        rand = st.integers(-(1 << min(F + 12, 62)), 1 << min(F + 12, 62))
    elif t == LNS:
        rand = st.builds(lambda L, s: (L << 1) | s,
                         st.integers(-(40 << F), 40 << F).filter(lambda L: abs(L) <= LNS_LOG_MAX),
                         st.integers(0, 1))
    else:
        full = st.floats(allow_nan=False, allow_infinity=False).map(f2w)
        rand = st.floats(-1e3, 1e3).map(f2w)
    return st.one_of(st.sampled_from(edges(t, F)), rand, full)


def cell_types(op) -> list:
    """Type of each operand slot (conversions: destination for y, source for a)."""
    out = []
    for kind in op.operands:
        if len(op.types) == 2:
            out.append(op.types[0] if kind == "y" else op.types[1])
        else:
            out.append(op.type)
    return out


def valid_fns(op) -> list[int]:
    """The function ids the verifier accepts for the opcode's type."""
    table = FN2 if op.family in ("addfn2", "subfn2") else FN1
    return [f.id for f in table if op.type in f.types]


def extras_strategy(op, F: int = F) -> st.SearchStrategy[list[int]]:
    """Values of the non-cell operands (imm, k, fn, cc)."""
    parts = []
    for kind, t in zip(op.operands, cell_types(op)):
        if kind == "imm":
            parts.append(words(t, F))
        elif kind == "k":
            parts.append(st.integers(0, 63))
        elif kind == "fn":
            parts.append(st.sampled_from(valid_fns(op)))
        elif kind == "cc":
            parts.append(st.integers(0, 6).map(lambda cmp, t=t: cond_word(cmp, t)))
    return st.tuples(*parts).map(list)


# ---- one-instruction programs ------------------------------------------------------------------

@lru_cache(maxsize=512)
def one_op_machine(name: str, extras: tuple, F: int = F) -> Machine:
    op = next(o for o in OPS if o.name == name)
    pb = ProgramBuilder(F)
    ex = iter(extras)
    row = []
    for i, (kind, t) in enumerate(zip(op.operands, cell_types(op))):
        row.append(pb.glob(f"o{i}", t) if kind in ("y", "a") else next(ex))
    pb.func("main").op(op.name, *row)
    return Machine(pb.build(), stack_cells=8, frame_cells=8, max_depth=4)


def reference(op, vals: list[int], F: int):
    """New operand words, or the trap class the machine must raise."""
    try:
        return execute(op, vals, F)
    except ArithTrap as e:
        return KIND[e.kind]
    except ValueError:        # math.sin/cos(inf) in rot_float: the reference lets it escape
        return DomainError
    except OverflowError:     # math.ldexp overflow in fixed_from_real: likewise
        return RangeError


def check_op(op, cells: list[int], extras: list[int], F: int = F) -> None:
    m = one_op_machine(op.name, tuple(extras), F)
    slots = [i for i, k in enumerate(op.operands) if k in ("y", "a")]
    types = [cell_types(op)[i] for i in slots]
    names = [f"o{i}" for i in slots]
    m.reset()
    for name, w in zip(names, cells):
        m.write_raw(name, w)
    vals, ci, ei = [], iter(cells), iter(extras)
    for k in op.operands:
        vals.append(next(ci) if k in ("y", "a") else next(ei))
    want = reference(op, vals, F)
    pc = m.program.functions[0].begin + 1
    if isinstance(want, type):
        with pytest.raises(want) as info:
            m.run()
        assert info.value.pc == pc and info.value.step == 1 and info.value.direction == 1
        assert info.value.location == ("test.rasm", pc + 1, 1)
        assert [m.read_raw(n) for n in names] == cells, "a trap must not change any cell"
        assert m.run(direction=-1) == "start" and m.t == 0
        assert [m.read_raw(n) for n in names] == cells
        return
    assert m.run() == "end"
    got = [m.read_raw(n) for n in names]
    assert got == [want[i] for i in slots], f"{op.name} {vals}"
    # backward: the inverse opcode's semantics; for exact opcodes that is the start again
    inv = OPS[INVERSE[op.code]]
    back = reference(inv, [want[i] if op.operands[i] in ("y", "a") else vals[i]
                           for i in range(len(vals))], F)
    exact = EXACT in op.flags and all(valid_lns(w) for w, t in zip(cells, types) if t == LNS)
    if isinstance(back, type):
        assert not exact, "an exact opcode's inverse cannot trap on its result"
        with pytest.raises(back):
            m.run(direction=-1)
        assert [m.read_raw(n) for n in names] == got
        return
    assert m.run(direction=-1) == "start" and m.t == 0
    restored = [m.read_raw(n) for n in names]
    assert restored == [back[i] for i in slots]
    if exact:
        assert restored == cells


def valid_lns(w: int) -> bool:
    """INT64_MIN + 1 has the log reserved for zero: isa/arith.py's neg.l maps it onto the lns
    zero, so exactness is only claimed for the other words."""
    return w == LNS_ZERO or (w >> 1) >= -LNS_LOG_MAX


# ---- the tests ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ARITH_OPS, ids=lambda op: op.name)
@SETTINGS
@given(data=st.data())
def test_opcode_matches_reference_both_ways(op, data):
    types = cell_types(op)
    cells = [data.draw(words(t), label=f"operand {i}") for i, (k, t) in
             enumerate(zip(op.operands, types)) if k in ("y", "a")]
    check_op(op, cells, data.draw(extras_strategy(op), label="extras"))


@pytest.mark.parametrize("op", ARITH_OPS, ids=lambda op: op.name)
def test_opcode_on_edge_words(op):
    """All pairs of edge words for the first two cell operands (no sampling luck needed)."""
    types = [t for k, t in zip(op.operands, cell_types(op)) if k in ("y", "a")]
    extras_list = [[]]
    for kind, t in zip(op.operands, cell_types(op)):
        if kind == "imm":
            extras_list = [e + [w] for e in extras_list for w in edges(t)[::3]]
        elif kind == "fn":
            extras_list = [e + [f] for e in extras_list for f in valid_fns(op)]
        elif kind == "cc":
            extras_list = [e + [cond_word(cmp, t)] for e in extras_list for cmp in range(7)]
        elif kind == "k":
            extras_list = [e + [k] for e in extras_list for k in (0, 1, 17, 63)]
    e0, e1 = edges(types[0]), edges(types[1]) if len(types) > 1 else [None]
    rest = [edges(t)[3] for t in types[2:]]
    for extras in extras_list:
        for a in e0[::2]:
            for b in e1[::2]:
                cells = [a] + ([b] if b is not None else []) + rest
                check_op(op, cells, extras)


@pytest.mark.parametrize("Fbits", [0, 1, 17, 62])
@pytest.mark.parametrize("op", [op for op in ARITH_OPS if FIXED in op.types or LNS in op.types],
                         ids=lambda op: op.name)
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fraction_bits_extremes(op, Fbits, data):
    types = cell_types(op)
    cells = [data.draw(words(t, Fbits)) for k, t in zip(op.operands, types) if k in ("y", "a")]
    check_op(op, cells, data.draw(extras_strategy(op, Fbits)), Fbits)


@settings(max_examples=300, deadline=None)
@given(x=words(FIXED), y=words(FIXED), theta=words(FIXED))
def test_fixed_rot_then_irot_is_the_identity(x, y, theta):
    pb = ProgramBuilder(F)
    gx, gy, gt = pb.glob("x", FIXED), pb.glob("y", FIXED), pb.glob("theta", FIXED)
    f = pb.func("main")
    f.op("rot.x", gx, gy, gt)
    f.op("irot.x", gx, gy, gt)
    m = Machine(pb.build(), stack_cells=4, frame_cells=4)
    m.reset()
    for name, w in (("x", x), ("y", y), ("theta", theta)):
        m.write_raw(name, w)
    m.step(2)                                # enter main, rot
    rotated = execute(OPS[OP_CODE["rot.x"]], [x, y, theta], F)
    assert (m.read_raw("x"), m.read_raw("y")) == (rotated[0], rotated[1])
    assert m.run() == "end"
    assert (m.read_raw("x"), m.read_raw("y"), m.read_raw("theta")) == (x, y, theta)


@settings(max_examples=400, deadline=None)
@given(t=st.sampled_from(ALL_TYPES), cmp=st.sampled_from(sorted(CMP_SYMBOLS)), data=st.data())
def test_conditions_match_reference(t, cmp, data):
    """assert/jmp/join share one comparison: check it through assert, NaNs included."""
    if t == FLOAT:
        any_word = st.one_of(words(FLOAT), st.floats(allow_nan=True).map(f2w),
                             st.sampled_from([f2w(math.nan), f2w(-math.inf), f2w(math.inf)]))
    else:
        any_word = words(t)
    a, b = data.draw(any_word), data.draw(any_word)
    if data.draw(st.booleans()):
        b = a
    m = _assert_machine(t, cmp)
    m.reset()
    m.write_raw("a", a)
    m.write_raw("b", b)
    if compare(cond_word(cmp, t), a, b):
        assert m.run() == "end"
    else:
        with pytest.raises(AssertionTrap):
            m.run()


@cache
def _assert_machine(t, cmp) -> Machine:
    pb = ProgramBuilder(F)
    a, b = pb.glob("a", t), pb.glob("b", t)
    pb.func("main").assert_((CMP_SYMBOLS[cmp], t, a, b))
    return Machine(pb.build(), stack_cells=4, frame_cells=4)


def test_stack_and_ancilla_opcodes():
    """push/pop move raw words and zero the source; alloc/free only check for zero."""
    pb = ProgramBuilder(F)
    x, y = pb.glob("x", FLOAT), pb.glob("y", FLOAT)
    f = pb.func("main")
    f.op("push", x)
    f.op("alloc", x)
    f.op("pop", y)
    f.op("free", x)
    m = Machine(pb.build(), stack_cells=4, frame_cells=4)
    w = f2w(-2.5)
    m.reset()
    m.write_raw("x", w)
    m.step(2)
    assert m.read_raw("x") == 0 and list(m.stack()) == [w]
    assert m.run() == "end"
    assert (m.read_raw("x"), m.read_raw("y"), len(m.stack())) == (0, w, 0)
    assert m.run(direction=-1) == "start"
    assert (m.read_raw("x"), m.read_raw("y"), len(m.stack())) == (w, 0, 0)


# ---- coverage: each executor runs each opcode as the oracle does ------------------------------
#
# The covered sets are found by running every data opcode of the table, not read from the lists
# the executors are built from (KERNEL_OPS, the native generator's families): an opcode an
# executor is given without its own code traps, gives up, or computes something else, and
# drops out of the set.

def _benign(t, k: int) -> int:
    """The k-th operand word of a type: small values no instruction traps on."""
    x = (1.5, 0.75, 0.5)[k]
    if t == INT:
        return (5, 3, 2)[k]
    if t == FIXED:
        return fixed_from_real(x, F)
    if t == LNS:
        return lns_from_real(x, F)
    return f2w(x)


def _benign_extras(op) -> list[int]:
    out = []
    for kind, t in zip(op.operands, cell_types(op)):
        if kind == "imm":
            out.append(_benign(t, 2))
        elif kind == "k":
            out.append(3)
        elif kind == "fn":
            out.append(valid_fns(op)[0])
        elif kind == "cc":
            out.append(cond_word(CMP_BY_SYMBOL["<"], t))
    return out


def _one_op_loop(op, n: int = 3):
    """main: `for i in 0..n { op }` on globals o0.. holding benign words."""
    pb = ProgramBuilder(F)
    words, cells = [], []
    extras = iter(_benign_extras(op))
    k = 0
    for i, (kind, t) in enumerate(zip(op.operands, cell_types(op))):
        if kind in ("y", "a"):
            words.append(pb.inout(f"o{i}", t, default=_benign(t, k)))
            cells.append(f"o{i}")
            k += 1
        else:
            words.append(next(extras))
    i = pb.glob("i", INT)
    zero, cnt = pb.const("zero", INT, 0), pb.const("n", INT, n)
    f = pb.func("main")
    f.join("top", came_from="back", cond=("!=", INT, i, zero))
    f.op(op.name, *words)
    f.op("inc.i", i)
    f.jmp("back", to="top", cond=("<", INT, i, cnt))
    return pb.build(), cells


def _run(prog, cells, kernels: bool):
    """(how many loop kernels the core found, (words after the run, words after the run back)
    or the name of the exception the run raised)."""
    m = Machine(prog, stack_cells=4, frame_cells=4)
    m.core.set_kernels(kernels)
    m.reset()
    try:
        m.run()
        fwd = [m.read_raw(c) for c in cells]
        m.run(direction=-1)
        return len(m.core.kernels), (fwd, [m.read_raw(c) for c in cells])
    except Exception as e:           # noqa: BLE001 - any failure drops the op from the set
        return len(m.core.kernels), type(e).__name__


def covered_by_dispatch() -> set[str]:
    """Data opcodes whose one-instruction run in the dispatch loop matches isa/arith.py."""
    out = set()
    for op in ARITH_OPS:
        m = one_op_machine(op.name, tuple(_benign_extras(op)), F)
        extras = iter(_benign_extras(op))
        vals, names, k = [], [], 0
        for i, kind in enumerate(op.operands):
            if kind in ("y", "a"):
                vals.append(_benign(cell_types(op)[i], k))
                names.append(f"o{i}")
                k += 1
            else:
                vals.append(next(extras))
        m.reset()
        for name, v in zip(names, (v for v, kd in zip(vals, op.operands) if kd in ("y", "a"))):
            m.write_raw(name, v)
        try:
            m.run()
        except Exception:            # noqa: BLE001
            continue
        want = reference(op, vals, F)
        slots = [i for i, kd in enumerate(op.operands) if kd in ("y", "a")]
        if not isinstance(want, type) and [m.read_raw(n) for n in names] == \
                [want[i] for i in slots]:
            out.add(op.name)
    return out


def covered_by_kernels() -> tuple[set[str], set[str]]:
    """(data opcodes a loop kernel runs, those it runs as the dispatch loop does): the same
    words after a loop of the op forward and back, with kernels on and off."""
    ran, same = set(), set()
    for op in ARITH_OPS:
        prog, cells = _one_op_loop(op)
        (kernels, on), (_, off) = _run(prog, cells, True), _run(prog, cells, False)
        if kernels:
            ran.add(op.name)
            if on == off and isinstance(on, tuple):
                same.add(op.name)
    return ran, same


def test_every_opcode_is_covered():
    missing = [op.name for op in ARITH_OPS if op.name not in covered_by_dispatch()]
    assert not missing, f"the dispatch loop does not run these as isa/arith.py: {missing}"
    ran, same = covered_by_kernels()
    assert ran, "no loop kernel was found at all"
    assert ran == same, f"loop kernels run these otherwise than the dispatch loop: {ran - same}"
    # the flags the harness relies on
    for op in OPS:
        assert (DATA in op.flags) + (CONTROL in op.flags) + (READS_ONLY in op.flags) == 1


def test_float_words_round_trip_bit_patterns():
    """Float cells hold bit patterns: -0.0 and a NaN payload survive swap both ways."""
    pb = ProgramBuilder(F)
    a, b = pb.glob("a", FLOAT), pb.glob("b", FLOAT)
    pb.func("main").op("swap.f", a, b)
    m = Machine(pb.build(), stack_cells=4, frame_cells=4)
    nan = struct.unpack("<q", struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF))[0]
    m.reset()
    m.write_raw("a", f2w(-0.0))
    m.write_raw("b", nan)
    m.run()
    assert (m.read_raw("a"), m.read_raw("b")) == (nan, f2w(-0.0))


# glibc's hypot and CPython's math.hypot (which isa/arith.py uses) differ in the last bit on these
HYPOT_HARD = [("-0x1.89b340603b524p+16", "0x1.c35be9d3022fcp+15"),
              ("-0x1.8ed3390f53a16p-13", "-0x1.7519c1fc24804p-14"),
              ("0x1.134d5181ad118p-27", "-0x1.6e2cdf5a80f2cp-25"),
              ("0x1.828cb95a72d00p+17", "-0x1.ba74e0bf7b8e2p+16"),
              ("-0x1.9e5dd2482f574p-7", "0x1.6040395c6eedcp-9"),
              ("-0x1.99b4c2775d4a6p-2", "0x1.f30b8cc9bb910p-3"),
              ("0x1.055dd7bccd0dap+5", "0x1.37126f3880d7ap+6"),
              ("0x1.455b4a26727a2p+12", "-0x1.75d5dd36e865ap+14")]


@pytest.mark.parametrize("a, b", HYPOT_HARD)
def test_float_hypot_is_pythons_not_glibcs(a, b):
    op = OPS[OP_CODE["addfn2.f"]]
    check_op(op, [f2w(0.0), f2w(float.fromhex(a)), f2w(float.fromhex(b))], [2])
