"""Bytecode inversion (assembler/invert.py): jmp/join pairing survives (the verifier accepts the
result), inverting twice is the identity, and a straight block followed by its inverse restores
every cell."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assembler.invert import invert_program, invert_rows
from isa.arith import ArithTrap, execute
from isa.functions import CMP_ALWAYS, CMP_EQ, CMP_GE, CMP_LT, CMP_NE, FN1_BY_NAME, cond_word
from isa.table import INVERSE, OP_BY_NAME, OPS, ROW_WIDTH
from isa.types import FIXED, INT
from rvm.program import (
    INOUT,
    INPUT,
    OUTPUT,
    Arg,
    CallSite,
    Function,
    Global,
    Local,
    Param,
    Program,
    operand,
)
from rvm.verify import check, verify

G = lambda a: operand(0, a)     # noqa: E731
L = lambda o: operand(1, o)     # noqa: E731
P = lambda i: operand(2, i)     # noqa: E731
ALWAYS = cond_word(CMP_ALWAYS, INT)
JMP, JOIN = OP_BY_NAME["jmp"].code, OP_BY_NAME["join"].code
CALL, UNCALL = OP_BY_NAME["call"].code, OP_BY_NAME["uncall"].code


def ins(name, *ops):
    row = [OP_BY_NAME[name].code, *ops]
    return row + [0] * (ROW_WIDTH - len(row))


# ---- structured code generator (a miniature of the assembler's control-flow expansion) ------
# items: ("op", row) | ("if", cc1, then, else, cc2) | ("loop", cc1, body1, body2, cc2)
# memory: a:int@0 b:int@1 c:int@2 x:fixed@3 y:fixed@4 | (no constants); helper(p: int) func 1
CONDS = [cond_word(c, INT) for c in (CMP_EQ, CMP_NE, CMP_LT, CMP_GE)]
DATA_ROWS = [
    ins("add.i", G(0), G(1)), ins("sub.i", G(1), G(2)), ins("inc.i", G(2)), ins("dec.i", G(0)),
    ins("xor.i", G(2), G(0)), ins("xori.i", G(1), 0x5A5A), ins("addi.i", G(0), -77),
    ins("subi.i", G(2), 1 << 40), ins("rotl.i", G(1), 13), ins("rotr.i", G(0), 63),
    ins("neg.i", G(2)), ins("not.i", G(1)), ins("swap.i", G(0), G(2)),
    ins("addmul.i", G(0), G(1), G(2)), ins("xorand.i", G(2), G(0), G(1)),
    ins("add.x", G(3), G(4)), ins("addmul.x", G(4), G(3), G(3)), ins("cvt.xi", G(3), G(0)),
    ins("uncvt.ix", G(1), G(4)), ins("neg.x", G(4)), ins("swap.x", G(3), G(4)),
    ins("addfn.i", G(1), G(2), FN1_BY_NAME["abs"].id),
    ins("nop"), ins("assert", ALWAYS, 0, 0), ins("push", G(3)), ins("pop", G(3)),
]
CALL_ROWS = [ins("call", 0), ins("uncall", 0)]


def emit(items, base: int) -> list[list[int]]:
    out: list[list[int]] = []

    def go(items):
        for it in items:
            if it[0] == "op":
                out.append(list(it[1]))
            elif it[0] == "if":
                _, c1, then, els, c2 = it
                p0 = base + len(out)
                out.append(ins("jmp", c1, G(0), G(1), -1))
                go(then)
                p1 = base + len(out)
                out.append(ins("jmp", ALWAYS, 0, 0, -1))
                pe = base + len(out)
                out.append(ins("join", ALWAYS, 0, 0, p0))
                out[p0 - base][4] = pe
                go(els)
                pf = base + len(out)
                out.append(ins("join", c2, G(2), G(0), p1))
                out[p1 - base][4] = pf
            else:                                     # from c1 {body1} loop {body2} until c2
                _, c1, body1, body2, c2 = it
                top = base + len(out)
                out.append(ins("join", c1, G(0), G(2), -1))
                go(body1)
                ex = base + len(out)
                out.append(ins("jmp", c2, G(1), G(2), -1))
                go(body2)
                back = base + len(out)
                out.append(ins("jmp", ALWAYS, 0, 0, top))
                out[top - base][4] = back
                exit_ = base + len(out)
                out.append(ins("join", ALWAYS, 0, 0, ex))
                out[ex - base][4] = exit_
    go(items)
    return out


def make_program(body_rows: list[list[int]]) -> Program:
    """main (function 1) = begin, body, end; helper (function 0) inc/dec's its parameter."""
    helper = [ins("begin", 0), ins("add.i", P(0), L(0)), ins("inc.i", P(0)), ins("end", 0)]
    main = [ins("begin", 1), *body_rows, ins("end", 1)]
    code = np.array(helper + main, dtype=np.int64)
    n = len(code)
    lines = np.stack([np.zeros(n), np.arange(1, n + 1), np.ones(n)], axis=1).astype(np.int32)
    return Program(
        fraction_bits=16, code=code,
        globals=[Global("a", INT, 0, None, INPUT, [3]), Global("b", INT, 1, None, OUTPUT),
                 Global("c", INT, 2, None, INOUT, [9]), Global("x", FIXED, 3, None),
                 Global("y", FIXED, 4, None)],
        consts=[],
        functions=[Function("helper", 0, 3, [Param("p", INT, False, True)],
                            [Local("t", INT, 0, None)], 1),
                   Function("main", 4, n - 1, [], [], 0)],
        main=1,
        callsites=[CallSite(0, [Arg(G(1))])],
        lines=lines, files=["gen.rasm"],
        labels={4: "main", 5: "first"},
    )


MAIN_BASE = 5      # pc of main's first body instruction


def items_strategy():
    op = st.one_of(st.sampled_from(DATA_ROWS), st.sampled_from(CALL_ROWS)).map(
        lambda r: ("op", r))
    cc_cond = st.sampled_from(CONDS)

    def extend(children):
        block = st.lists(children, max_size=3)
        return st.one_of(st.tuples(st.just("if"), cc_cond, block, block, cc_cond),
                         st.tuples(st.just("loop"), cc_cond, block, block, cc_cond))
    return st.lists(st.recursive(op, extend, max_leaves=12), max_size=6)


# ---- fixed examples ------------------------------------------------------------------------
IF_ELSE = [("op", ins("inc.i", G(0))),
           ("if", CONDS[2], [("op", ins("add.i", G(1), G(0)))],
            [("op", ins("sub.i", G(1), G(2))), ("op", ins("call", 0))], CONDS[0]),
           ("loop", CONDS[1], [("op", ins("dec.i", G(2)))], [("op", ins("nop"))], CONDS[3]),
           ("op", ins("rotl.i", G(2), 7))]


def test_generated_program_is_valid():
    verify(make_program(emit(IF_ELSE, MAIN_BASE)))


def test_invert_rows_keeps_pairing():
    body = np.array(emit(IF_ELSE, MAIN_BASE), dtype=np.int64)
    inv = invert_rows(body, MAIN_BASE)
    p = make_program(inv.tolist())
    assert check(p) == []
    # mirror image: opcode at offset i is the inverse of the one at n-1-i
    n = len(body)
    for i in range(n):
        assert inv[i, 0] == INVERSE[body[n - 1 - i, 0]]
    # every fork names its partner, which names it back
    for pc in range(n):
        if inv[pc, 0] in (JMP, JOIN):
            partner = int(inv[pc, 4]) - MAIN_BASE
            assert {int(inv[pc, 0]), int(inv[partner, 0])} == {JMP, JOIN}
            assert inv[partner, 4] == pc + MAIN_BASE


def test_invert_rows_twice_is_identity():
    body = np.array(emit(IF_ELSE, MAIN_BASE), dtype=np.int64)
    assert np.array_equal(invert_rows(invert_rows(body, MAIN_BASE), MAIN_BASE), body)
    kept = invert_rows(invert_rows(body, MAIN_BASE, False), MAIN_BASE, False)
    assert np.array_equal(kept, body)


def test_invert_rows_swaps_calls_unless_told_not_to():
    body = np.array([ins("call", 0), ins("inc.i", G(0)), ins("uncall", 0)], dtype=np.int64)
    inv = invert_rows(body, MAIN_BASE)
    assert inv[:, 0].tolist() == [CALL, OP_BY_NAME["dec.i"].code, UNCALL]
    assert invert_rows(body, MAIN_BASE, swap_calls=True)[0, 0] == CALL   # uncall -> call
    kept = invert_rows(body, MAIN_BASE, swap_calls=False)
    assert kept[:, 0].tolist() == [UNCALL, OP_BY_NAME["dec.i"].code, CALL]


def test_invert_rows_does_not_modify_its_input():
    body = np.array(emit(IF_ELSE, MAIN_BASE), dtype=np.int64)
    before = body.copy()
    invert_rows(body, MAIN_BASE)
    assert np.array_equal(body, before)


def test_invert_rows_rejects_a_jump_leaving_the_block():
    body = np.array(emit(IF_ELSE, MAIN_BASE), dtype=np.int64)
    # invert only the first half: the if's jumps leave it
    with pytest.raises(ValueError, match="leaves the block"):
        invert_rows(body[:3], MAIN_BASE)


def test_with_block_compute_copy_uncompute_is_valid():
    """with {A} do {B}: A, B, then the inverse of A placed after B (pairing intact)."""
    a_items = IF_ELSE[:3]
    b_items = [("op", ins("xor.i", G(1), G(2)))]
    a = emit(a_items, MAIN_BASE)
    b = emit(b_items, MAIN_BASE + len(a))
    base_u = MAIN_BASE + len(a) + len(b)
    a_again = np.array(emit(a_items, base_u), dtype=np.int64)     # A as if placed at base_u
    undo = invert_rows(a_again, base_u).tolist()
    p = make_program(a + b + undo)
    assert check(p) == []


def test_invert_program_twice_is_identity_and_valid():
    p = make_program(emit(IF_ELSE, MAIN_BASE))
    inv = invert_program(p)
    assert check(inv) == []
    assert not np.array_equal(inv.code, p.code)
    back = invert_program(inv)
    assert np.array_equal(back.code, p.code)
    assert np.array_equal(back.lines, p.lines)
    assert back.labels == p.labels
    assert [g.role for g in inv.globals] == ["output", "input", "inout", "global", "global"]
    assert [g.role for g in back.globals] == [g.role for g in p.globals]
    # begin/end stay, calls are not swapped (the callee itself is inverted)
    assert inv.code[4, 0] == OP_BY_NAME["begin"].code and inv.code[0, 0] == p.code[0, 0]
    assert (inv.code[:, 0] == CALL).sum() == (p.code[:, 0] == CALL).sum()
    # the original is untouched
    assert np.array_equal(p.code, make_program(emit(IF_ELSE, MAIN_BASE)).code)


# ---- exactness on straight-line code -------------------------------------------------------
def run_straight(rows, mem: list[int], F: int = 16) -> None:
    """Apply straight-line data rows (G operands only) with the reference arithmetic."""
    for row in rows:
        op = OPS[int(row[0])]
        if op.family in ("push", "pop", "nop", "assert", "trace"):
            continue
        vals = []
        for k, kind in enumerate(op.operands):
            w = int(row[1 + k])
            vals.append(mem[w >> 3] if kind in ("y", "a") else w)
        new = execute(op, vals, F)
        for k, kind in enumerate(op.operands):
            if kind == "y":
                mem[int(row[1 + k]) >> 3] = new[k]


STRAIGHT = [r for r in DATA_ROWS if OPS[r[0]].family not in ("push", "pop")]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(STRAIGHT), min_size=1, max_size=12),
       st.lists(st.integers(-(1 << 40), 1 << 40), min_size=5, max_size=5))
def test_block_then_inverse_restores_every_cell(rows, mem0):
    block = np.array(rows, dtype=np.int64)
    mem = list(mem0)
    try:
        run_straight(block, mem)
        run_straight(invert_rows(block, 0), mem)
    except ArithTrap:
        return                      # e.g. a conversion out of range: the machine would trap
    assert mem == mem0


# ---- random structured programs ------------------------------------------------------------
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items_strategy())
def test_random_structures_invert(items):
    body = emit(items, MAIN_BASE)
    p = make_program(body)
    assert check(p) == [], items
    arr = np.array(body, dtype=np.int64).reshape(-1, ROW_WIDTH)
    inv = invert_rows(arr, MAIN_BASE)
    assert check(make_program(inv.tolist())) == []
    assert np.array_equal(invert_rows(inv, MAIN_BASE), arr)
    ip = invert_program(p)
    assert check(ip) == []
    assert np.array_equal(invert_program(ip).code, p.code)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items_strategy(), st.integers(0, 50))
def test_inversion_is_independent_of_the_base(items, shift):
    """A block emitted at another base inverts to the same block shifted."""
    a = np.array(emit(items, MAIN_BASE), dtype=np.int64).reshape(-1, ROW_WIDTH)
    b = np.array(emit(items, MAIN_BASE + shift), dtype=np.int64).reshape(-1, ROW_WIDTH)
    ia, ib = invert_rows(a, MAIN_BASE), invert_rows(b, MAIN_BASE + shift)
    forks = np.isin(ia[:, 0], [JMP, JOIN])
    assert np.array_equal(ia[~forks], ib[~forks])
    assert np.array_equal(ia[forks][:, 4] + shift, ib[forks][:, 4])
