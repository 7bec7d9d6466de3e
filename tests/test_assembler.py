"""Assembler: exact bytecode for the statement forms, memory layout, constant interning, sugar
shapes, calls, includes and the line table.  Every program assembled here also passes the
bytecode verifier and survives a disassembly round trip."""
from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
from test_disasm import roundtrip

from assembler import assemble, assemble_file
from isa.arith import f2w, lns_from_real
from isa.functions import CMP_EQ, CMP_GE, CMP_LE, CMP_LT, CMP_NE, FN1, FN2, cond_word
from isa.table import OP_BY_NAME, OPS
from isa.types import FIXED, FLOAT, INT, LNS, LNS_ZERO, TYPE_NAMES
from rvm.program import (
    INOUT,
    INPUT,
    MODE_G,
    MODE_L,
    MODE_N,
    MODE_P,
    MODE_X,
    OUTPUT,
    Arg,
    CallSite,
    Trace,
    XEntry,
    operand,
)
from rvm.verify import verify


def G(a): return operand(MODE_G, a)
def L(a): return operand(MODE_L, a)
def P(a): return operand(MODE_P, a)
def X(a): return operand(MODE_X, a)
def N(a): return operand(MODE_N, a)


def c(name):
    return OP_BY_NAME[name].code


def row(name, *vals):
    return [c(name), *vals] + [0] * (5 - len(vals))


def asm(src, **kw):
    p = assemble(src, **kw)
    verify(p)
    roundtrip(p)
    return p


def body(p, fname="main"):
    f = p.function_named(fname)
    return p.code[f.begin + 1:f.end].tolist()


# ---- statement forms --------------------------------------------------------------------------

def test_update_forms_give_exact_rows():
    p = asm("""
.fixed 16
inout a: int
inout b: int
inout x: fixed
inout f: float
inout g: float
inout l: lns
inout m: lns
func main() {
    a += b
    a -= 3
    a ^= 0xff
    a ^= b & b
    x += 0.5
    f -= 0.5
    a += b * 7
    x += fixed(a)
    a -= int(x)
    rotl a, 3
    f += exp(g)
    g -= atan2(f, f)
    l *= m
    l /= lns(x)
    swap f, g
    neg l
    inc a
    push a
    pop a
    nop
}
""")
    k7 = 7                             # first interned constant: after the 7 globals
    assert body(p) == [
        row("add.i", G(0), G(1)),
        row("subi.i", G(0), 3),
        row("xori.i", G(0), 0xff),
        row("xorand.i", G(0), G(1), G(1)),
        row("addi.x", G(2), 1 << 15),
        row("subi.f", G(3), f2w(0.5)),
        row("addmul.i", G(0), G(1), G(k7)),
        row("cvt.xi", G(2), G(0)),
        row("uncvt.ix", G(0), G(2)),
        row("rotl.i", G(0), 3),
        row("addfn.f", G(3), G(4), 1),
        row("subfn2.f", G(4), G(3), G(3), 1),
        row("mul.l", G(5), G(6)),
        row("uncvt.lx", G(5), G(2)),
        row("swap.f", G(3), G(4)),
        row("neg.l", G(5)),
        row("inc.i", G(0)),
        row("push", G(0)),
        row("pop", G(0)),
        row("nop"),
    ]
    assert [(k.addr, k.type, k.values) for k in p.consts] == [(k7, INT, [7])]


def test_every_table_statement_form_reaches_its_opcode():
    """The statement syntax of every instruction (isa/table.py) assembles to that opcode."""
    decl = "\n".join(f"inout {t}{i}: {t}" for t in TYPE_NAMES.values() for i in range(4))
    checked = 0
    for op in OPS:
        if op.family in ("begin", "end", "jmp", "join", "call", "uncall", "addgrad", "subgrad",
                         "addjvp", "subjvp"):
            continue            # (derivative statements: tests/test_nested_ad.py)
        dst = op.types[0] if op.types else INT
        src = op.types[-1] if op.types else INT
        texts, kw = [], {}
        for kind in op.operands:
            if kind == "y":
                texts.append(f"{dst.name_}{len([t for t in texts if t])}")
            elif kind == "a":
                texts.append(f"{src.name_}{2 + len([t for t in texts if t.startswith(src.name_)])}"
                             if src != dst else f"{src.name_}{len([t for t in texts if t]) + 1}")
            elif kind == "imm":
                texts.append("3")
            elif kind == "k":
                texts.append("5")
            else:
                texts.append("")
                if kind == "fn":
                    table = FN2 if op.operands.count("a") == 2 else FN1
                    kw["fn"] = next(f.name for f in table if op.type in f.types)
                elif kind == "cc":
                    kw["cond"] = f"{src.name_}2 < {src.name_}3"
                elif kind == "msg":
                    kw["msg"] = ', "a message"'
                elif kind == "trace":
                    kw["trace"] = '"m", int0'
        stmt = op.syntax.format(*texts, **kw)
        p = assemble(f"{decl}\nfunc main() {{\n    {stmt}\n}}\n")
        assert p.code[1, 0] == op.code, (op.name, stmt)
        assert len(p.code) == 3, (op.name, stmt)     # one statement, one instruction
        checked += 1
    assert checked > 90


def test_immediates_and_constants():
    p = asm("""
inout y: int
inout x: fixed
inout z: fixed
inout w: int
func main() {
    y += 3
    x += z * 2.5
    x -= z * 2.5
    y += w * 3
    z += x * 3
    assert y < 3
}
""")
    F = 32
    k25, k3i, k3x = 4, 5, 6
    assert body(p) == [
        row("addi.i", G(0), 3),
        row("addmul.x", G(1), G(2), G(k25)),
        row("submul.x", G(1), G(2), G(k25)),
        row("addmul.i", G(0), G(3), G(k3i)),
        row("addmul.x", G(2), G(1), G(k3x)),
        row("assert", cond_word(CMP_LT, INT), G(0), G(k3i)),
    ]
    assert [(k.addr, k.type, k.values) for k in p.consts] == [
        (k25, FIXED, [int(2.5 * 2 ** F)]), (k3i, INT, [3]), (k3x, FIXED, [3 << F])]


def test_fixed_literals_are_read_exactly_not_through_float():
    p = asm("""
.fixed 62
input a: fixed = 0.1
input b: fixed = -1.9999999999999999999
func main() {
}
""")
    exact = Fraction(1, 10) * 2 ** 62          # 461168601842738790.4 -> ...790
    assert p.global_named("a").default == [461168601842738790]
    assert p.global_named("a").default != [int(0.1 * 2 ** 62)]
    assert round(exact) == 461168601842738790
    assert p.global_named("b").default == [round(Fraction("-1.9999999999999999999") * 2 ** 62)]


def test_fixed_literals_round_half_to_even():
    p = asm("""
.fixed 2
input a: fixed[4] = [0.375, 0.625, -0.375, 0.125]
func main() {
}
""")
    assert p.global_named("a").default == [2, 2, -2, 0]   # 1.5, 2.5, -1.5, 0.5 -> even


def test_defaults_of_every_type():
    p = asm("""
input i: int = 0xffffffffffffffff
input f: float = -0.0
input l: lns[2] = [0, -2.5]
input r: float = $0x7ff8000000000001
input n: int
inout k: int = -9223372036854775808
output o: int
func main() {
}
""")
    assert p.global_named("i").default == [-1]
    assert p.global_named("f").default == [f2w(-0.0)]
    assert p.global_named("l").default == [LNS_ZERO, lns_from_real(-2.5, 32)]
    assert p.global_named("r").default == [0x7ff8000000000001]
    assert p.global_named("n").default is None
    assert p.global_named("k").default == [-(1 << 63)]
    assert p.global_named("o").default is None
    assert [g.role for g in p.globals] == [INPUT, INPUT, INPUT, INPUT, INPUT, INOUT, OUTPUT]


def test_memory_layout():
    p = asm("""
const  c1: int = 5
input  a: int
global w: fixed[3]
const  c2: float[2] = [1.5, 2]
output b: float
func main() {
    b += c2[1]
    w[2] += 1.5
    b -= 7
    b += c2[0] * 7
    a += c1 * 7
}
""")
    assert [(g.name, g.addr, g.length) for g in p.globals] == [
        ("a", 0, None), ("w", 1, 3), ("b", 4, None)]
    assert [(k.name, k.addr) for k in p.consts][:2] == [("c1", 5), ("c2", 6)]
    interned = p.consts[2:]
    assert [(k.addr, k.type, k.values) for k in interned] == [
        (8, FLOAT, [f2w(7.0)]), (9, INT, [7])]
    assert p.n_globals == 5 and p.n_static == 10
    np.testing.assert_array_equal(p.static_image(),
                                  [0, 0, 0, 0, 0, 5, f2w(1.5), f2w(2.0), f2w(7.0), 7])
    assert body(p) == [
        row("add.f", G(4), G(7)),
        row("addi.x", G(3), 3 << 31),
        row("subi.f", G(4), f2w(7.0)),
        row("addmul.f", G(4), G(6), G(8)),
        row("addmul.i", G(0), G(5), G(9)),
    ]


def test_operand_modes():
    p = asm("""
inout a: int[4]
inout j: int
func f(p: int[], n: int) {
    n += p[2]
    n += p[j]
    n += len(p)
}
func main() {
    local t: int[2]
    t[1] += a[3]
    t[0] += a[j]
    a[j] += len(a)
    call f(a, t[1])
}
""")
    assert body(p, "f") == [
        row("add.i", P(1), X(0)),
        row("add.i", P(1), X(1)),
        row("add.i", P(1), N(0)),
    ]
    assert p.xtab[:2] == [XEntry(P(0), -1, G(5)), XEntry(P(0), -1, G(4))]
    assert p.consts[0].values == [2]
    assert body(p) == [
        row("alloc", L(0)), row("alloc", L(1)),
        row("add.i", L(1), G(3)),
        row("add.i", L(0), X(2)),
        row("addi.i", X(2), 4),
        row("call", 0),
    ]
    assert p.xtab[2] == XEntry(G(0), 4, G(4))
    assert p.callsites == [CallSite(0, [Arg(G(0), 4), Arg(L(1), None)])]
    f = p.function_named("main")
    assert f.frame_size == 2 and [(x.name, x.offset, x.length) for x in f.locals] == [("t", 0, 2)]


# ---- sugar ------------------------------------------------------------------------------------

def test_if_else_fi_shape():
    p = asm("""
inout a: int
func main() {
    if a == 0 {
        inc a
    } else {
        dec a
    } fi a == 1
}
""")
    k0, k1 = 1, 2
    assert body(p) == [
        row("jmp", cond_word(CMP_NE, INT), G(0), G(k0), 4),     # 1: to ELSE unless a == 0
        row("inc.i", G(0)),                                      # 2
        row("jmp", 0, 0, 0, 6),                                  # 3: to FI
        row("join", 0, 0, 0, 1),                                 # 4: ELSE, only by the jump
        row("dec.i", G(0)),                                      # 5
        row("join", cond_word(CMP_EQ, INT), G(0), G(k1), 3),     # 6: came from 3 iff a == 1
    ]
    assert p.labels == {1: "if1", 3: "if1.endthen", 4: "if1.else", 6: "if1.fi"}


def test_if_without_else_and_fi():
    p = asm("""
inout a: int
inout b: int
func main() {
    if a < b {
        inc b
    }
}
""")
    assert body(p) == [
        row("jmp", cond_word(CMP_GE, INT), G(0), G(1), 3),
        row("inc.i", G(1)),
        row("join", cond_word(CMP_GE, INT), G(0), G(1), 1),   # came by the jump iff !(a < b)
    ]


def test_from_loop_until_shape():
    p = asm("""
inout i: int
func main() {
    from i == 0 {
        inc i
    } loop {
        nop
    } until i == 10
}
""")
    k0, k10 = 1, 2
    assert body(p) == [
        row("join", cond_word(CMP_NE, INT), G(0), G(k0), 5),   # 1 TOP: from BACK iff i != 0
        row("inc.i", G(0)),                                    # 2
        row("jmp", cond_word(CMP_EQ, INT), G(0), G(k10), 6),   # 3 TEST: exit iff i == 10
        row("nop"),                                            # 4
        row("jmp", 0, 0, 0, 1),                                # 5 BACK
        row("join", 0, 0, 0, 3),                               # 6 EXIT
    ]


def test_for_loop_shape_with_literal_and_cell_bounds():
    p = asm("""
inout n: int
inout s: int
func main() {
    for i in 2..5 {
        s += i
    }
    for k in 0..n {
        s -= k
    }
}
""")
    k2, k5, k0 = 2, 3, 4
    i, k = L(0), L(1)
    assert body(p) == [
        row("alloc", i),                                        # 1
        row("addi.i", i, 2),                                    # 2
        row("jmp", cond_word(CMP_EQ, INT), i, G(k5), 8),        # 3 EMPTY: skip iff i == hi
        row("join", cond_word(CMP_NE, INT), i, G(k2), 7),       # 4 TOP: from BACK iff i != lo
        row("add.i", G(1), i),                                  # 5
        row("inc.i", i),                                        # 6
        row("jmp", cond_word(CMP_LT, INT), i, G(k5), 4),        # 7 BACK: again iff i < hi
        row("join", cond_word(CMP_EQ, INT), i, G(k2), 3),       # 8 EXIT: from EMPTY iff i == lo
        row("subi.i", i, 5),
        row("free", i),
        row("assert", cond_word(CMP_LE, INT), G(k0), G(0)),     # 11
        row("alloc", k),
        row("jmp", cond_word(CMP_EQ, INT), k, G(0), 18),        # 13
        row("join", cond_word(CMP_NE, INT), k, G(k0), 17),      # 14
        row("sub.i", G(1), k),
        row("inc.i", k),
        row("jmp", cond_word(CMP_LT, INT), k, G(0), 14),        # 17
        row("join", cond_word(CMP_EQ, INT), k, G(k0), 13),      # 18
        row("sub.i", k, G(0)),
        row("free", k),
    ]
    f = p.function_named("main")
    assert [(x.name, x.offset) for x in f.locals] == [("i", 0), ("k", 1)]


def test_with_block_emits_the_exact_inverse():
    p = asm("""
inout a: int
output r: int
func main() {
    with {
        local t: int
        t += a
        t += 3
        call sq(r, t)
    } do {
        trace "t", t
    }
}
func sq(r: int, t: int) {
    r += t * t
}
""")
    t = L(0)
    assert body(p) == [
        row("alloc", t),           # 1
        row("add.i", t, G(0)),     # 2
        row("addi.i", t, 3),       # 3
        row("call", 0),            # 4
        row("trace", 0),           # 5
        row("uncall", 0),          # 6
        row("subi.i", t, 3),       # 7
        row("sub.i", t, G(0)),     # 8
        row("free", t),            # 9
    ]
    lines = p.lines[1:10, 1].tolist()
    assert lines == [6, 7, 8, 9, 11, 9, 8, 7, 6]
    assert p.traces == [Trace("t", [t])]


def test_with_block_inverts_inner_control_flow():
    p = asm("""
inout a: int
func main() {
    with {
        if a == 0 {
            inc a
        } fi a == 1
    } do {
        nop
    }
}
""")
    rows = body(p)
    assert rows[:3] == [row("jmp", cond_word(CMP_NE, INT), G(0), G(1), 3),
                        row("inc.i", G(0)),
                        row("join", cond_word(CMP_NE, INT), G(0), G(2), 1)]
    assert rows[3] == row("nop")
    assert rows[4:] == [row("jmp", cond_word(CMP_NE, INT), G(0), G(2), 7),
                        row("dec.i", G(0)),
                        row("join", cond_word(CMP_NE, INT), G(0), G(1), 5)]


def test_raw_jumps_and_labels():
    p = asm("""
inout i: int
func main() {
top:  join back if i != 0
      inc i
back: jmp top if i < 10
}
""")
    assert body(p) == [
        row("join", cond_word(CMP_NE, INT), G(0), G(1), 3),
        row("inc.i", G(0)),
        row("jmp", cond_word(CMP_LT, INT), G(0), G(2), 1),
    ]
    assert p.labels == {1: "top", 3: "back"}


# ---- functions and calls ----------------------------------------------------------------------

def test_written_parameters_fixpoint_through_calls_and_recursion():
    p = asm("""
inout a: int
inout b: int
global arr: int[2]
func leaf(x: int, y: int) {
    x += y
}
func mid(u: int, v: int, w: int[]) {
    call leaf(v, u)
    call rec(u, w)
}
func rec(r: int, w: int[]) {
    call leaf(w[0], r)
    call other(r)
}
func other(q: int) {
    call mid(a, q, arr)
}
func main() {
    call mid(a, b, arr)
}
""")
    written = {f.name: [q.written for q in f.params] for f in p.functions}
    # other.q -> mid.v (leaf.x) is written; so rec.r (passed to other) and mid.u (to rec)
    assert written == {"leaf": [True, False], "mid": [True, True, True],
                       "rec": [True, True], "other": [True], "main": []}


def test_call_sites_literal_arguments_and_sharing():
    p = asm("""
inout a: fixed
inout v: fixed[3]
func f(x: fixed, y: fixed, z: fixed[3]) {
    x += y
}
func main() {
    call f(a, 1.5, v)
    uncall f(a, 1.5, v)
    call f(a, v[1], v)
}
""")
    k = 4
    assert p.callsites == [CallSite(0, [Arg(G(0)), Arg(G(k)), Arg(G(1), 3)]),
                           CallSite(0, [Arg(G(0)), Arg(G(2)), Arg(G(1), 3)])]
    assert body(p) == [row("call", 0), row("uncall", 0), row("call", 1)]
    assert p.consts[0].values == [3 << 31]


def test_main_need_not_come_first():
    p = asm("func main() {\n}\nfunc helper() {\n    nop\n}\n")
    assert p.main == 0 and [f.name for f in p.functions] == ["main", "helper"]
    p = asm("func helper() {\n    nop\n}\nfunc main() {\n}\n")
    assert p.main == 1 and p.functions[1].begin == 3


def test_var_declares_without_code_and_delocal_frees():
    p = asm("""
func main() {
    var t: int
    local u: fixed[2]
    delocal u
    var t2: lns
}
""")
    f = p.function_named("main")
    assert f.frame_size == 4
    assert [(x.name, x.type, x.offset, x.length) for x in f.locals] == [
        ("t", INT, 0, None), ("u", FIXED, 1, 2), ("t2", LNS, 3, None)]
    assert body(p) == [row("alloc", L(1)), row("alloc", L(2)), row("free", L(1)),
                       row("free", L(2))]


def test_function_names_may_be_keywords():
    p = asm("inout x: int\nfunc fi(p: int) {\n    inc p\n}\nfunc main() {\n    call fi(x)\n}\n")
    assert p.functions[0].name == "fi"


# ---- line table and includes ------------------------------------------------------------------

def test_line_table():
    src = """inout a: int
func main() {
    inc a
    if a == 1 {
        dec a
    } else {
        inc a
    } fi a == 0
}
"""
    p = asm(src, filename="prog.rasm")
    assert p.files == ["prog.rasm"]
    assert p.lines.tolist() == [
        [0, 2, 1],     # begin: the func keyword
        [0, 3, 5],
        [0, 4, 5],     # jmp of the if
        [0, 5, 9],
        [0, 6, 7],     # jmp FI and ELSE join: at `else`
        [0, 6, 7],
        [0, 7, 9],
        [0, 8, 7],     # FI join: at `fi`
        [0, 9, 1],     # end: the closing brace
    ]
    assert p.location(3) == ("prog.rasm", 5, 9)


def test_std_include_and_include_once(tmp_path):
    (tmp_path / "lib.rasm").write_text('include "std/linalg.rasm"\n'
                                       'func twice(r: float) {\n    nop\n}\n')
    main = tmp_path / "main.rasm"
    main.write_text('include "lib.rasm"\ninclude "std/linalg.rasm"\ninclude "lib.rasm"\n'
                    'input x: float[2] = [1, 2]\noutput r: float\n'
                    'func main() {\n    call dot(r, x, x)\n}\n')
    p = assemble_file(main)
    verify(p)
    roundtrip(p)
    names = [f.name for f in p.functions]
    assert names[:2] == ["dot", "dot_x"] and names.count("dot") == 1
    assert names[-2:] == ["twice", "main"]
    assert p.files[0] == str(main)
    assert p.files[1].endswith("lib.rasm") and p.files[2].endswith(os.path.join("std", "linalg.rasm"))
    assert len(p.files) == 3
    f = p.function_named("dot")
    assert p.location(f.begin)[0] == p.files[2]


def test_include_paths(tmp_path):
    inc = tmp_path / "incdir"
    inc.mkdir()
    (inc / "helper.rasm").write_text("global h: int\n")
    p = asm('include "helper.rasm"\nfunc main() {\n    inc h\n}\n',
            include_paths=[str(inc)])
    assert p.globals[0].name == "h"


def test_for_counter_may_shadow_an_outer_counter():
    p = asm("""
inout s: int
func main() {
    for k in 0..2 {
        for k in 0..3 {
            s += k
        }
        s -= k
    }
}
""")
    rows = body(p)
    outer, inner = L(0), L(1)
    assert row("add.i", G(0), inner) in rows and row("sub.i", G(0), outer) in rows
    assert [x.name for x in p.function_named("main").locals] == ["k", "k"]


def test_raw_jumps_inside_a_with_block_are_inverted_with_it():
    p = asm("""
inout i: int
inout n: int
func main() {
    with {
top:    join back if i != 0
        inc i
back:   jmp top if i < n
    } do {
        nop
    }
}
""")
    assert body(p) == [
        row("join", cond_word(CMP_NE, INT), G(0), G(2), 3),
        row("inc.i", G(0)),
        row("jmp", cond_word(CMP_LT, INT), G(0), G(1), 1),
        row("nop"),
        row("join", cond_word(CMP_LT, INT), G(0), G(1), 7),   # the mirrored `back`
        row("dec.i", G(0)),
        row("jmp", cond_word(CMP_NE, INT), G(0), G(2), 5),    # the mirrored `top`
    ]
    assert p.labels[5] == "back.undo" and p.labels[7] == "top.undo"
