"""Disassembler: `assemble(disassemble(p))` is the same program as `p` -- for hand-written
programs covering every statement form, for programs/*.rasm, for inverted programs and for
random straight-line programs."""
from __future__ import annotations

import copy
import math
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from table_statements import DATA_OPS, statement

from assembler import assemble, assemble_file, disassemble
from assembler.invert import invert_program
from rvm.verify import verify

ROOT = Path(__file__).resolve().parent.parent


def assert_same(p, q) -> None:
    """Everything that defines how `p` runs is equal in `q`."""
    assert p.fraction_bits == q.fraction_bits
    np.testing.assert_array_equal(p.code, q.code)
    np.testing.assert_array_equal(p.static_image(), q.static_image())
    np.testing.assert_array_equal(p.static_types(), q.static_types())
    assert p.xtab == q.xtab
    assert p.callsites == q.callsites
    assert p.traces == q.traces
    assert p.main == q.main
    assert [(f.begin, f.end, f.frame_size) for f in p.functions] == \
        [(f.begin, f.end, f.frame_size) for f in q.functions]
    assert [[(a.type, a.is_array, a.written) for a in f.params] for f in p.functions] == \
        [[(a.type, a.is_array, a.written) for a in f.params] for f in q.functions]
    assert [(g.addr, g.type, g.role, g.length, g.default) for g in p.globals] == \
        [(g.addr, g.type, g.role, g.length, g.default) for g in q.globals]


def roundtrip(p):
    """Disassemble p, reassemble, check it is the same (valid) program; returns the text."""
    text = disassemble(p)
    q = assemble(text, "<dis>")
    verify(q)
    assert_same(p, q)
    return text


SAMPLES = {
    "every_form": """
.fixed 20
input  n: int = 7
input  xs: fixed[3] = [0.5, -1.25, 3]
inout  f: float = -0.0
inout  l: lns = 2.5
output y: fixed
output r: int
global w: float[2]
const  half: fixed = 0.5
const  tab: int[3] = [1, -2, 0x7fffffffffffffff]

func g(a: fixed, b: fixed[], c: int[3], k: int) {
    a += b[k]
    a -= b[2] * b[0]
    a += fixed(len(b))
    a -= fixed(c[k])
    trace "g \\"in\\"\\n", a, b[k], len(b)
}

func main() {
    local t: fixed
    local u: int[2]
    y += xs[1]
    y -= 0.75
    y += half * xs[2]
    y -= xs[0] / 1.5
    y += sqrt(half)
    y -= pow(half, xs[0])
    y += fixed(n)
    r += int(y)
    f += float(n)
    l *= lns(f)
    l /= lns(n)
    r ^= 0xff
    r ^= n & tab[2]
    rotl r, 5
    rotr r, 63
    neg r
    not r
    inc r
    dec r
    swap u[0], u[1]
    rot y, t, half
    irot y, t, half
    w[0] += 1e300
    w[1] -= w[0] * 2
    push r
    pop r
    nop
    assert n < 100
    u[0] += n
    r += tab[u[0]]
    u[0] -= n
    call g(t, xs, tab, n)
    uncall g(t, xs, tab, 0)
    delocal t
}
""",
    "sugar": """
inout a: int[4] = [3, 1, 2, 0]
inout k: int = 2
output c: int

func count(c: int, a: int[], k: int) {
    for i in 0..len(a) {
        if a[i] > k {
            inc c
        } fi a[i] > k
    }
}

func main() {
    local t: int
    call count(c, a, k)
    with {
        t += c
        if t == 0 {
            inc t
        } else {
            dec t
        } fi t == 1
    } do {
        from k == 2 {
            inc k
        } loop {
            nop
        } until k == 5
        from k == 5 {
            dec k
        } until k == 2
    }
    var z: int
}
""",
    "raw_labels": """
inout i: int = 0
func main() {
top:  join back if i != 0
      inc i
back: jmp top if i < 10
}
""",
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_samples_roundtrip(name):
    roundtrip(assemble(SAMPLES[name]))


@pytest.mark.parametrize("path", sorted(p.name for p in (ROOT / "programs").glob("*.rasm")
                                        if "lib" not in p.name))
def test_example_programs_roundtrip(path):
    roundtrip(assemble_file(ROOT / "programs" / path))


def canonical(p):
    """A copy of p with xtab, callsites and traces renumbered in order of first use by pc
    (the order the assembler numbers them in)."""
    from isa.table import OPS
    from rvm.program import MODE_X, CallSite, Trace, operand, operand_parts
    q = copy.deepcopy(p)
    xmap, cmap, tmap = {}, {}, {}

    def word(w):
        mode, payload = operand_parts(int(w))
        if mode != MODE_X:
            return int(w)
        return operand(MODE_X, xmap.setdefault(payload, len(xmap)))

    for row in q.code:
        op = OPS[int(row[0])]
        for k, kind in enumerate(op.operands):
            if kind in ("y", "a"):
                row[1 + k] = word(row[1 + k])
            elif kind == "callsite":
                cs = p.callsites[int(row[1 + k])]
                for a in cs.args:
                    word(a.word)
                row[1 + k] = cmap.setdefault(int(row[1 + k]), len(cmap))
            elif kind == "trace":
                for w in p.traces[int(row[1 + k])].operands:
                    word(w)
                row[1 + k] = tmap.setdefault(int(row[1 + k]), len(tmap))
            elif kind == "msg" and int(row[1 + k]):         # an assert's message: 1 + index
                for w in p.traces[int(row[1 + k]) - 1].operands:
                    word(w)
                row[1 + k] = 1 + tmap.setdefault(int(row[1 + k]) - 1, len(tmap))
    q.xtab = [p.xtab[old] for old, new in sorted(xmap.items(), key=lambda kv: kv[1])]
    q.callsites = [CallSite(p.callsites[old].func, [type(a)(word(a.word), a.length)
                                                   for a in p.callsites[old].args])
                   for old, new in sorted(cmap.items(), key=lambda kv: kv[1])]
    q.traces = [Trace(p.traces[old].message, [word(w) for w in p.traces[old].operands],
                      p.traces[old].names, p.traces[old].lengths, p.traces[old].style)
                for old, new in sorted(tmap.items(), key=lambda kv: kv[1])]
    return q


def test_assembled_side_tables_are_canonical():
    for path in sorted((ROOT / "programs").glob("*.rasm")):
        if "lib" not in path.name:
            p = assemble_file(path)
            assert_same(p, canonical(p))


def test_inverted_programs_roundtrip():
    """Inverting reverses the order of first use; up to that numbering the text is exact."""
    for path in sorted((ROOT / "programs").glob("*.rasm")):
        if "lib" in path.name:
            continue
        inv = invert_program(assemble_file(path))
        assert_same(canonical(inv), assemble(disassemble(inv)))


def test_exact_values_in_text():
    text = roundtrip(assemble("""
.fixed 32
input a: fixed = 0.1
input b: float = 0.1
input c: lns = 3
input d: int = -5
func main() {
    b += 1e-320
}
"""))
    # 0.1 * 2**32 = 429496729.6 rounds to 429496730, printed as its exact decimal
    assert "input  a: fixed = 0.1000000000931322574615478515625" in text
    assert Fraction("0.1000000000931322574615478515625") == Fraction(429496730, 1 << 32)
    assert "input  b: float = 0.1" in text
    assert "input  c: lns = $0x" in text
    assert "input  d: int = -5" in text
    assert "b += 1e-320" in text


def test_nonfinite_float_immediate_is_a_raw_word():
    p = assemble("inout x: float\nfunc main() {\n    x += $0x7ff0000000000000\n}\n")
    assert p.code[1, 2] == 0x7ff0000000000000
    text = roundtrip(p)
    assert "x += $0x7ff0000000000000" in text


def test_labels_of_sugar_are_valid_names():
    text = roundtrip(assemble(SAMPLES["sugar"]))
    assert "for1: join for1_back if i != " in text
    assert "jmp if" in text and "if2_fi" in text


def test_locals_are_renamed_when_they_would_shadow():
    p = assemble("""
inout t: int
func main() {
    t += 1
    local t: int
    inc t
    delocal t
    for i in 0..2 {
    }
    for i in 0..3 {
    }
}
""")
    text = roundtrip(p)
    assert "var t_1: int" in text and "var i: int" in text and "var i_1: int" in text


def test_unrepresentable_program_is_a_value_error():
    p = assemble("inout x: int\nfunc main() {\n    inc x\n}\n")
    p.code[1, 1] = (5 << 3) | 0        # an address with no cell
    with pytest.raises(ValueError):
        disassemble(p)


def test_jumps_without_condition_in_a_program_without_static_memory():
    """An unconditional jmp/join's unused operand words (0) are not read as cell G 0: a program
    with no globals or constants disassembles (it raised `no cell at G 0`)."""
    p = assemble("func main() {\n    var i: int\n    var k: int\n"
                 "    if i == k { inc k } else { dec k } fi k == i\n}\n")
    assert not p.globals and not p.consts
    roundtrip(p)


def test_huge_frame_is_one_var_line():
    """Frame cells no local covers are one `pad` array, found by address without a map of every
    cell: a 2**32-cell frame costs what a 2-cell frame does."""
    import dataclasses
    import time
    p = assemble("inout x: int\nfunc main() {\n    var t: int\n    inc x\n}\n")
    p.functions[0] = dataclasses.replace(p.functions[0], frame_size=1 << 32)
    t0 = time.perf_counter()
    text = roundtrip(p)
    assert time.perf_counter() - t0 < 1.0
    assert "var pad: int[4294967295]" in text and text.count("\n") < 12


JANUS = sorted((ROOT / "tests" / "janus").glob("**/*.ja")) + \
    sorted((ROOT / "programs").glob("**/*.ja"))


def test_janus_programs_disassemble_to_text_that_assembles():
    """Named stacks (a `stack` input that starts empty; the assembler's own asserts, whose
    messages report a stack's size or a popped cell) have a .rasm form: the text assembles to the
    same program up to the numbering of side tables and the names of reported values."""
    from fuzzing import resolved

    from assembler import AssemblyError, assemble_janus
    done = 0
    for path in JANUS:
        try:
            p = assemble_janus(path.read_text(), str(path))
        except AssemblyError:
            continue
        q = assemble(disassemble(p), "<dis>")
        assert resolved(q) == resolved(p), path
        done += 1
    assert done >= 20


def test_empty_stack_input_has_no_start_value_in_text():
    p = assemble("inout s: stack[4]\ninout x: int = 3\nfunc main() {\n    push x, s\n}\n")
    p.globals[0].default = [0] * 5          # as the Janus front end writes an empty stack
    text = disassemble(p)
    assert "inout  s: stack[4]\n" in text
    assert np.array_equal(assemble(text).code, p.code)


# ---- random straight-line programs ------------------------------------------------------------

CELLS = {"int": ["i0", "i1", "i2"], "fixed": ["x0", "x1", "x2"], "float": ["f0", "f1", "f2"],
         "lns": ["l0", "l1", "l2"]}


def _float_text(x: float) -> str:
    if math.isfinite(x):
        return repr(x)
    return "$0x%016x" % struct.unpack("<Q", struct.pack("<d", x))[0]


literal = {
    "int": st.integers(-(1 << 63), (1 << 63) - 1).map(str),
    "fixed": st.one_of(st.integers(-1000, 1000).map(str),
                       st.decimals(-1000, 1000, places=12, allow_nan=False).map(str)),
    "float": st.floats(width=64).map(_float_text),
    "lns": st.one_of(st.sampled_from(["0", "1", "-2.5", "0.001"]),
                     st.integers(0, (1 << 64) - 1).map(lambda w: f"${w:#x}")),
}


@st.composite
def table_statement(draw):
    """Any data instruction of the table in its own syntax (tests/table_statements.py)."""
    from isa.types import TYPE_BY_NAME
    pools = {TYPE_BY_NAME[t]: cells for t, cells in CELLS.items()}
    return statement(draw(st.sampled_from(DATA_OPS)), pools,
                     choose=lambda options: draw(st.sampled_from(options)))


@st.composite
def hand_statement(draw):
    t = draw(st.sampled_from(sorted(CELLS)))
    cells = CELLS[t]
    y = draw(st.sampled_from(cells))
    a = draw(st.sampled_from([c for c in cells if c != y] + ["idx"] * (t == "int")))
    b = draw(st.sampled_from([c for c in cells if c != y]))
    lit = draw(literal[t])
    forms = {
        "int": [f"{y} += {a}", f"{y} -= {lit}", f"{y} ^= {a} & {b}", f"{y} += {a} * {lit}",
                f"rotl {y}, {draw(st.integers(0, 63))}", f"neg {y}", f"not {y}", f"inc {y}",
                f"{y} ^= {lit}", f"arr[idx] += {a}", f"{y} += arr[{draw(st.integers(0, 3))}]",
                f"{y} += int({draw(st.sampled_from(CELLS['fixed']))})",
                f"swap {y}, {a}" if a != "idx" else "nop", f"push {y}", f"pop {y}"],
        "fixed": [f"{y} += {lit}", f"{y} -= {a} * {b}", f"{y} += {a} / {lit}",
                  f"{y} += sin({a})", f"rot {y}, {a}, k0",
                  f"{y} += fixed(i0)", f"assert {a} <= {lit}", f"trace \"t\", {y}, {a}"],
        "float": [f"{y} += {lit}", f"{y} -= {a} * {b}", f"{y} += exp({a})",
                  f"{y} -= atan2({a}, {lit})", f"{y} += float(x0)", f"neg {y}"],
        "lns": [f"{y} *= {a}", f"{y} /= {lit}", f"{y} *= lns(f0)", f"neg {y}"],
    }
    return draw(st.sampled_from(forms[t]))


@st.composite
def program(draw):
    F = draw(st.integers(0, 62))
    lines = [f".fixed {F}"]
    for t, cells in CELLS.items():
        for c in cells:
            role = draw(st.sampled_from(["input", "output", "inout", "global"]))
            default = ""
            if role in ("input", "inout") and draw(st.booleans()):
                lit = draw(literal[t])
                default = f" = {lit}"
            lines.append(f"{role} {c}: {t}{default}")
    lines += ["inout idx: int", "inout arr: int[4] = [1, 2, 3, 4]", "const k0: fixed = 0.25"]
    body = draw(st.lists(st.one_of(hand_statement(), table_statement()), min_size=1,
                         max_size=25))
    lines += ["func main() {"] + ["    " + s for s in body] + ["}"]
    return "\n".join(lines) + "\n"


@settings(max_examples=200, deadline=None)
@given(program())
def test_random_programs_roundtrip(src):
    from assembler import AssemblyError
    try:
        p = assemble(src)
    except AssemblyError as e:
        # literals out of range for small F and similar: legitimate rejections only
        assert {d.code for d in e.diagnostics} <= {"E006"}, str(e)
        return
    roundtrip(p)
