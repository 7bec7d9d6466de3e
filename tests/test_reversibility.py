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

import rvm
from isa.cgen import has_body
from isa.functions import CMP_SYMBOLS, FN1, FN2
from isa.table import OPS
from isa.types import FIXED, INT, LNS
from rvm.errors import StepLimit, Trap

INTS = ["i0", "i1", "i2", "i3"]
FIXEDS = ["x0", "x1", "x2", "x3"]
LNSS = ["l0", "l1", "l2"]
POOLS = {INT: INTS, FIXED: FIXEDS, LNS: LNSS}
# every data instruction of the table whose cells are int, fixed or lns
TABLE_OPS = [op for op in OPS if has_body(op) and all(t in POOLS for t in op.types)]

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
def table_stmt(draw, write=(INT, FIXED, LNS), avoid=()):
    """A data instruction of the table, drawn from TABLE_OPS, on distinct cells of its operand
    types, written with its syntax; it writes only cells of the types `write`, none of `avoid`."""
    ops = [op for op in TABLE_OPS
           if all(op.operand_types[k] in write for k, kind in enumerate(op.operands) if kind == "y")]
    op = draw(st.sampled_from(ops))
    used: set[str] = set()
    args, fn = [], ""
    for k, kind in enumerate(op.operands):
        t = op.operand_types[k]
        if kind in ("y", "a"):
            pool = [c for c in POOLS[t] if c not in used and (kind == "a" or c not in avoid)]
            args.append(draw(st.sampled_from(pool)))
            used.add(args[-1])
        elif kind == "imm":
            args.append(str(draw(st.integers(-1000, 1000))) if t == INT else "0.75")
        elif kind == "k":
            args.append(str(draw(st.integers(0, 63))))
        elif kind == "fn":
            table = FN2 if op.family.endswith("fn2") else FN1
            fn = draw(st.sampled_from([f.name for f in table if op.types[0] in f.types]))
            args.append("")
        else:
            assert kind == "cc", (op.name, kind)
            args.append("")
    cond = ""
    if "cc" in op.operands:
        a, b = [args[k] for k, kind in enumerate(op.operands) if kind == "a"]
        cond = f"{a} {draw(st.sampled_from(sorted(CMP_SYMBOLS.values())))} {b}"
    return op.syntax.format(*args, fn=fn, cond=cond)


def test_the_table_statements_cover_the_table():
    """TABLE_OPS is every int/fixed/lns data instruction, and each assembles to itself."""
    names = {op.name for op in TABLE_OPS}
    assert {"cswap.i", "mul.l", "cvt.lx", "xorcmp.il", "addfn2.i", "rotl.i"} <= names
    seen = set()
    for op in TABLE_OPS:
        src = HEADER + "func main() {\n    " + _example(op) + "\n}\n"
        code = rvm.assemble(src).code
        ran = {OPS[int(r[0])].name for r in code}
        assert op.name in ran, (op.name, _example(op))
        seen.add(op.name)
    assert seen == names


def _example(op) -> str:
    """One fixed statement of op (the first cells of each pool, in order)."""
    used: list[str] = []
    args, fn = [], ""
    for k, kind in enumerate(op.operands):
        t = op.operand_types[k]
        if kind in ("y", "a"):
            args.append(next(c for c in POOLS[t] if c not in used))
            used.append(args[-1])
        elif kind == "imm":
            args.append("5" if t == INT else "0.75")
        elif kind == "k":
            args.append("3")
        elif kind == "fn":
            table = FN2 if op.family.endswith("fn2") else FN1
            fn = next(f.name for f in table if op.types[0] in f.types)
            args.append("")
        else:
            args.append("")
    cond = ""
    if "cc" in op.operands:
        a, b = [args[k] for k, kind in enumerate(op.operands) if kind == "a"]
        cond = f"{a} < {b}"
    return op.syntax.format(*args, fn=fn, cond=cond)


@st.composite
def block(draw, depth=0):
    out = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["int", "int", "fixed", "fixed", "lns", "table", "table",
                                     "ctl"]))
        if kind == "table":
            out.append(draw(table_stmt()))
        elif kind == "int":
            out.append(draw(int_stmt()))
        elif kind == "fixed":
            out.append(draw(fixed_stmt()))
        elif kind == "lns":
            out.append(draw(lns_stmt()))
        elif depth < 2:
            out.extend(draw(control(depth)))
    return out


@st.composite
def control(draw, depth):
    kind = draw(st.sampled_from(["if", "ifelse", "for", "with", "call", "uncall", "push"]))
    body = lambda: ["    " + s for s in draw(block(depth + 1))]  # noqa: E731
    if kind in ("if", "ifelse"):
        # the branches write only cells outside the condition, so `fi` repeats it
        p, q = _two(draw, INTS)
        cmp = draw(st.sampled_from(["<", "<=", "==", "!=", ">", ">="]))
        safe = lambda: ["    " + draw(st.one_of(int_stmt(avoid=(p, q)), fixed_stmt(write_ints=False),  # noqa: E731
                                                   table_stmt(avoid=(p, q))))
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
                           table_stmt(write=(FIXED, LNS))))
            for _ in range(draw(st.integers(0, 3)))]
    return [f"push {a}", *["    " + s for s in rest], f"pop {a}"]


@st.composite
def programs(draw):
    body = draw(block())
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
