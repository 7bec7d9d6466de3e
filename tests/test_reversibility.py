"""Property: random programs of int, fixed and lns instructions, branches, loops, calls and
uncalls, run forward and then backward, restore every cell bit for bit -- also when the
forward run stops at a trap halfway.

Besides hand-picked statements (expressions, arrays), the programs draw any data instruction
of the table (isa/table.py) on int, fixed and lns cells, written in its own syntax
(`table_stmt`): a new instruction is exercised here without an edit to this file."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table_statements import ops_on, statement

import rvm
from isa.table import OPS
from isa.types import FIXED, FLOAT, INT, LNS
from rvm.errors import StepLimit, Trap

INTS = ["i0", "i1", "i2", "i3"]
FIXEDS = ["x0", "x1", "x2", "x3"]
LNSS = ["l0", "l1", "l2"]
FLOATS = ["f0", "f1", "f2"]
POOLS = {INT: INTS, FIXED: FIXEDS, LNS: LNSS}
# every data instruction of the table whose cells are int, fixed or lns (exact: a run back
# restores them bit for bit); programs(floats=True) draws the float ones too
TABLE_OPS = ops_on(POOLS)
FLOAT_POOLS = {**POOLS, FLOAT: FLOATS}

HEADER = """
.fixed 24
inout i0: int
inout i1: int
inout i2: int
inout i3: int
inout ia: int[4]
inout x0: fixed
inout x1: fixed
inout x2: fixed
inout x3: fixed
inout l0: lns
inout l1: lns
inout l2: lns
inout f0: float = 0.5
inout f1: float = -1.25
inout f2: float = 2.0

func fi(p: int, q: int, r: fixed) {
    p += q
    r += fixed(q)
    p ^= q
    rotl p, 7
}

func ff(a: fixed, b: fixed, c: fixed) {
    a += b * b
    rot a, b, c
    b += sin(a)
}
"""


def _two(draw, pool):
    a = draw(st.sampled_from(pool))
    b = draw(st.sampled_from([c for c in pool if c != a]))
    return a, b


def _three(draw, pool):
    """A target and two sources that are not the target (the sources may be equal)."""
    a, b = _two(draw, pool)
    c = draw(st.sampled_from([c for c in pool if c != a]))
    return a, b, c


@st.composite
def int_stmt(draw, avoid=()):
    """An int update whose target is not in `avoid`."""
    a = draw(st.sampled_from([c for c in INTS if c not in avoid]))
    others = [c for c in INTS if c != a]
    b, c = draw(st.sampled_from(others)), draw(st.sampled_from(others))
    k = draw(st.integers(-1000, 1000))
    return draw(st.sampled_from([
        f"{a} += {b}", f"{a} -= {b}", f"{a} += {k}", f"{a} ^= {b}", f"{a} ^= {b} & {c}",
        f"{a} += {b} * {c}", f"{a} -= {b} * {c}", f"neg {a}", f"not {a}", f"rotl {a}, 13",
        f"rotr {a}, 3", f"inc {a}", f"dec {a}", f"{a} += {b} / {c}", f"{a} += abs({b})",
        f"ia[2] += {b}", f"{a} += ia[1]",
    ]))


@st.composite
def fixed_stmt(draw, write_ints=True):
    a, b, c = _three(draw, FIXEDS)
    r = draw(st.sampled_from([v for v in FIXEDS if v not in (a, b)]))   # rot writes a and b
    i = draw(st.sampled_from(INTS))
    return draw(st.sampled_from(([f"{i} += int({a})"] if write_ints else []) + [
        f"{a} += {b}", f"{a} -= {b}", f"{a} += 0.75", f"{a} += {b} * {c}", f"{a} -= {b} * {c}",
        f"rot {a}, {b}, {r}", f"irot {a}, {b}, {r}", f"{a} += sin({b})", f"{a} += atan({b})",
        f"{a} += fixed({i})", f"{a} += {b} / {c}", f"swap {a}, {b}",
        f"neg {a}",
    ]))


@st.composite
def lns_stmt(draw):
    a, b = _two(draw, LNSS)
    x = draw(st.sampled_from(FIXEDS))
    return draw(st.sampled_from([
        f"{a} *= {b}", f"{a} /= {b}", f"neg {a}", f"{a} *= lns({x})", f"{x} += fixed({a})",
        f"swap {a}, {b}",
    ]))


@st.composite
def table_stmt(draw, write=(INT, FIXED, LNS), avoid=(), floats=False):
    """A data instruction of the table (TABLE_OPS; with `floats` also those on float cells)
    in its own syntax (tests/table_statements.py) on distinct cells drawn from the pools of its
    operand types; it writes only cells of the types `write`, none of `avoid`."""
    pools = FLOAT_POOLS if floats else POOLS
    write = (*write, FLOAT) if floats else write
    ops = [op for op in ops_on(pools)
           if all(op.operand_types[k] in write for k, kind in enumerate(op.operands) if kind == "y")]
    op = draw(st.sampled_from(ops))
    return statement(op, pools, choose=lambda options: draw(st.sampled_from(options)), avoid=avoid)


def test_the_table_statements_cover_the_table():
    """TABLE_OPS is every int/fixed/lns data instruction, and each assembles to itself."""
    names = {op.name for op in TABLE_OPS}
    assert {"cswap.i", "mul.l", "cvt.lx", "xorcmp.il", "addfn2.i", "rotl.i"} <= names
    for op in ops_on(FLOAT_POOLS):
        src = HEADER + "func main() {\n    " + statement(op, FLOAT_POOLS) + "\n}\n"
        ran = {OPS[int(r[0])].name for r in rvm.assemble(src).code}
        assert op.name in ran, (op.name, statement(op, FLOAT_POOLS))


@st.composite
def block(draw, depth=0, floats=False):
    out = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["int", "int", "fixed", "fixed", "lns", "table", "table",
                                     "ctl"]))
        if kind == "table":
            out.append(draw(table_stmt(floats=floats)))
        elif kind == "int":
            out.append(draw(int_stmt()))
        elif kind == "fixed":
            out.append(draw(fixed_stmt()))
        elif kind == "lns":
            out.append(draw(lns_stmt()))
        elif depth < 2:
            out.extend(draw(control(depth, floats)))
    return out


@st.composite
def control(draw, depth, floats=False):
    kind = draw(st.sampled_from(["if", "ifelse", "for", "with", "call", "uncall", "push"]))
    body = lambda: ["    " + s for s in draw(block(depth + 1, floats))]  # noqa: E731
    if kind in ("if", "ifelse"):
        # the branches write only cells outside the condition, so `fi` repeats it
        p, q = _two(draw, INTS)
        cmp = draw(st.sampled_from(["<", "<=", "==", "!=", ">", ">="]))
        safe = lambda: ["    " + draw(st.one_of(int_stmt(avoid=(p, q)), fixed_stmt(write_ints=False),  # noqa: E731
                                                   table_stmt(avoid=(p, q), floats=floats)))
                        for _ in range(draw(st.integers(1, 3)))]
        text = [f"if {p} {cmp} {q} {{", *safe()]
        if kind == "ifelse":
            text += ["} else {", *safe()]
        return text + [f"}} fi {p} {cmp} {q}"]
    if kind == "for":
        return [f"for k{depth} in 0..{draw(st.integers(0, 3))} {{", *body(), "}"]
    if kind == "with":
        return ["with {", *body(), "} do {", *body(), "}"]
    if kind in ("call", "uncall"):
        if draw(st.booleans()):
            p, q = _two(draw, INTS)
            return [f"{kind} fi({p}, {q}, {draw(st.sampled_from(FIXEDS))})"]
        a, b, c = draw(st.permutations(FIXEDS))[:3]
        return [f"{kind} ff({a}, {b}, {c})"]
    # push zeroes a; the body must leave it zero for the pop, so it writes no int cell
    a = draw(st.sampled_from(INTS))
    rest = [draw(st.one_of(fixed_stmt(write_ints=False), lns_stmt(),
                           table_stmt(write=(FIXED, LNS), floats=floats)))
            for _ in range(draw(st.integers(0, 3)))]
    return [f"push {a}", *["    " + s for s in rest], f"pop {a}"]


@st.composite
def programs(draw, floats=False):
    """A program of HEADER's cells; with `floats`, the table's float instructions too (on
    f0..f2: a run back restores them only to within rounding)."""
    body = draw(block(floats=floats))
    return HEADER + "func main() {\n" + "\n".join("    " + s for s in body) + "\n}\n"


word = st.integers(-(1 << 63), (1 << 63) - 1)
small = st.integers(-(1 << 40), 1 << 40)


@st.composite
def start_values(draw):
    vals = {n: draw(st.one_of(small, word)) for n in INTS}
    vals["ia"] = [draw(small) for _ in range(4)]
    vals.update({n: draw(st.floats(-1e3, 1e3)) for n in FIXEDS})
    vals.update({n: draw(st.sampled_from([0.0, 1.0, -2.5, 1e-3, 7.25])) for n in LNSS})
    return vals


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), start_values())
def test_forward_then_backward_restores_every_cell(src, values):
    prog = rvm.assemble(src)
    m = rvm.Machine(prog)
    m.reset(values)
    start = m.mem[: prog.n_static].copy()
    try:
        m.run(max_steps=20_000)
    except StepLimit:
        pass
    except Trap:
        pass                      # a trap leaves the state consistent: go back from there
    m.run(direction=-1)
    assert m.status == "start" and m.t == 0
    np.testing.assert_array_equal(m.mem[: prog.n_static], start)
