"""A random differential test of native code for derivative statements (rvm/native/nested.py)
against the interpreter (rvm/_nested.pxi): small seeded programs with `grad`/`jvp` statements
(ADD and SUB forms; scalar and array targets and wrt operands; wrt over a global array, a
parameter, a caller's local array f never sees and a global f names directly; indexed cells as
arguments; statements in called and uncalled functions, loops, if/fi branches and with/do
blocks; one and two nesting levels), run forward and then backward by both, which must end in
the same state bit for bit (memory, value stack, stats, t, pc, status) or raise the same
error; and hand-made corner cases (what the interpreter traps on, the native code gives up on
and the interpreter reports)."""
from __future__ import annotations

import random

import numpy as np
import pytest

import rvm
from rvm.errors import RVMError

HEAD = """
input  x: float[2] = [{x0}, {x1}]
input  s: float = {s}
input  v: float[2] = [{v0}, {v1}]
input  q: float = {q}
input  j: int = {j}
input  k: int = {k}
input  mode: int = {mode}
const  K: float = 1.25
const  KA: float[2] = [0.5, -0.75]
global big: float[{big}]
output g: float[2]
output d: float
output hg: float[2]
output hd: float
output y: float

func hh(out: float, x: float[2], a: float) {{
    out += x[0] * x[1] * x[1] + a * q * x[0]
}}

func hneg(out: float, x: float[2], a: float) {{
    out -= sin(x[1]) * x[0] * a + K * x[0]
}}

func fs(out: float, y: float, z: float) {{
    out += y * y * z + sin(z) * q * K
}}
"""

# bodies of the level-1 functions f(out, x: float[2], a): globals (q, j, k), constants (K,
# KA), locals, loops, calls and uncalls
F_BODIES = [
    "out += sin(x[0]) * x[1] * a",
    "out += K * x[0] * x[1] + q * a * x[1]",
    "out += exp(0.3 * x[0]) * KA[1] + a * a * x[1]",
    "out += x[j] * x[j] * a + cos(x[1]) * q",
    "local t: float\n    with {\n        t += x[0] * a\n    } do {\n        out += t * t * x[1]\n    }",
    "local i: int\n    from i == 0 {\n        inc i\n    } until i == k\n"
    "    out += x[0] * x[1] * a * x[i - 1]\n    from i == k {\n        dec i\n    } until i == 0",
    "call hh(out, x, a)",
    "uncall hneg(out, x, a)",
    "out += x[0] * x[0] * x[0] * q + sin(a * x[1])",
    "out += pow(x[0] * x[0] + 1.0, 0.5) * atan2(x[1], 1.5) + hypot(x[0], x[1]) * tanh(a)"
    " + sigmoid(x[0]) * abs(x[1]) + min(x[0], x[1]) * max(x[0], a)"
    " + log(x[0] * x[0] + 2.0) / (x[1] * x[1] + 1.0)",
    "local u: float\n    local w: float\n    with {\n        u += x[0] * a\n"
    "        w += x[1]\n        swap u, w\n        rot u, w, a\n    } do {\n"
    "        out += u * w * w + sin(u)\n    }",
    "local u: float\n    local w: float\n    u += x[0] * a\n    push u\n"
    "    w += x[1] * x[1]\n    pop u\n    out += u * w\n    push w\n    u -= x[0] * a",
]

# level-2 functions h(out, x, a): a statement over an f in a with block, its result used
H_KINDS = [
    ("gg {op} grad {f}(x, a) wrt x", "out += gg[0] * gg[1] + sin(gg[0])"),
    ("e[0] += 0.5\n        e[1] += a\n        t {op} jvp {f}(x, a) wrt x along e",
     "out += t * t + t * x[0]"),
    ("t {op} grad {f}(x, a) wrt a", "out += t * a + t * t"),
    ("t {op} grad {f}(x, a) wrt q", "out += t * x[1] + sin(t)"),
    ("gg {op} grad {f}(x, a) wrt e", "out += gg[0] + x[0] * x[1] * a"),
    ("call use{i}(gg, x, a)", "out += gg[0] * gg[0] * gg[1]"),
    ("t {op} grad fs(x[j], a) wrt x[j]", "out += t * t * x[0]"),
    ("for kk in 0..2 {{\n            e[kk] += 1.0\n            gg[kk] {op} jvp {f}(x, a) wrt x"
     " along e\n            e[kk] -= 1.0\n        }}", "out += gg[0] * gg[1] * a"),
]


def _statement(rng: random.Random, fn: str, tarr: str, tsc: str, arr: str) -> str:
    op = rng.choice(["+=", "-="])
    r = rng.random()
    along = "v" if arr == "x" else rng.choice(["v", "x"])
    if r < 0.3:
        return f"{tarr} {op} grad {fn}({arr}, s) wrt {arr}"
    if r < 0.5:
        return f"{tsc} {op} jvp {fn}({arr}, s) wrt {arr} along {along}"
    if r < 0.65:
        return f"{tsc} {op} grad {fn}({arr}, s) wrt s"
    if r < 0.75:
        return f"{tsc} {op} grad {fn}({arr}, s) wrt q"
    if r < 0.85:
        return f"{tsc} {op} jvp {fn}({arr}, s) wrt s along q"
    return f"{tsc} {op} grad fs({arr}[j], s) wrt {arr}[j]"


def random_program(rng: random.Random) -> str:
    nf = rng.randint(1, 3)
    parts = []
    for i in range(nf):
        body = rng.choice(F_BODIES)
        if rng.random() < 0.1:          # two adds into out: may leave a residue (a trap)
            body += "\n    " + rng.choice(F_BODIES[:4])
        parts.append(f"func f{i}(out: float, x: float[2], a: float) {{\n    {body}\n}}\n")
    nh = rng.randint(1, 2)
    for i in range(nh):
        op, f = rng.choice(["+=", "-="]), f"f{rng.randrange(nf)}"
        inner, use = rng.choice(H_KINDS)
        inner = inner.format(op=op, f=f, i=i)
        body = (f"    local gg: float[2]\n    local t: float\n    local e: float[2]\n"
                f"    with {{\n        {inner}\n    }} do {{\n        {use}\n    }}\n")
        if rng.random() < 0.3:
            body = ("    if mode == 0 {\n" + body.replace("\n    ", "\n        ").rstrip()
                    + "\n    } else {\n        out += x[0] * x[0] * a\n    } fi mode == 0\n")
        parts.append(f"func use{i}(gg: float[2], x: float[2], a: float) {{\n"
                     f"    gg {op} grad {f}(x, a) wrt x\n}}\n\n"
                     f"func h{i}(out: float, x: float[2], a: float) {{\n{body}}}\n")
    main = ["local i: int", "local le: float[2]", "local lz: float[2]", "le[0] += x[1]",
            "le[1] += x[0]"]
    for _ in range(rng.randint(2, 6)):
        lvl2 = rng.random() < 0.5
        fn = f"h{rng.randrange(nh)}" if lvl2 else f"f{rng.randrange(nf)}"
        tarr, tsc = ("hg", "hd") if lvl2 else ("g", "d")
        where = rng.randrange(5)
        arr = rng.choice(["x", "x", "le", "lz"]) if where != 3 else "x"
        st = _statement(rng, fn, tarr, tsc, arr)
        if where == 0:
            main.append(st)
        elif where == 1:
            main += ["from i == 0 {", "    " + st, "    inc i", "} until i == k",
                     "from i == k {", "    dec i", "} until i == 0"]
        elif where == 2:
            main += ["if mode == 0 {", "    " + st, "} else {", f"    {tsc} += x[0] * s",
                     "} fi mode == 0"]
        elif where == 3:                # in a function, called and uncalled
            u = len(parts)
            parts.append(f"func m{u}(g: float[2], d: float, hg: float[2], hd: float, "
                         f"x: float[2], s: float, v: float[2]) {{\n    {st}\n}}\n")
            c, inv = rng.choice([("call", "uncall"), ("uncall", "call")])
            main.append(f"{c} m{u}(g, d, hg, hd, x, s, v)")
            if rng.random() < 0.3:
                main += [f"{inv} m{u}(g, d, hg, hd, x, s, v)", f"{c} m{u}(g, d, hg, hd, x, s, v)"]
        else:
            main += ["with {", "    " + st, "} do {", "    y += d * x[0] + g[1]", "}"]
    main += ["le[0] -= x[1]", "le[1] -= x[0]"]
    head = HEAD.format(
        x0=f"{rng.uniform(-1, 1):.3f}", x1=f"{rng.uniform(-1, 1):.3f}",
        s=f"{rng.uniform(-1.5, 1.5):.3f}", v0=f"{rng.uniform(-1, 1):.3f}",
        v1=f"{rng.uniform(-1, 1):.3f}", q=f"{rng.uniform(-1, 1):.3f}", j=rng.randrange(2),
        k=rng.randint(1, 2), mode=rng.randrange(2), big=rng.choice([1, 300, 5000]))
    return head + "\n".join(parts) + "\nfunc main() {\n" + \
        "\n".join("    " + ln for ln in main) + "\n}\n"


def _run(m: rvm.Machine, direction: int = 1, max_steps: int | None = None):
    try:
        if max_steps is None:
            return "ok", m.run(direction)
        return "ok", m.run(direction, max_steps=max_steps)
    except RVMError as e:
        return type(e).__name__, str(e)


def _same(mi: rvm.Machine, mn: rvm.Machine, peaks: bool = True) -> None:
    assert np.array_equal(mi.mem, mn.mem)
    assert np.array_equal(mi.stack(), mn.stack())
    if peaks:
        assert mi.stats == mn.stats
    else:       # a run the native code gave up on keeps its frames' peak (to clear them)
        assert {k: v for k, v in mi.stats.items() if k != "peak_frame_cells"} == \
            {k: v for k, v in mn.stats.items() if k != "peak_frame_cells"}
    assert (mi.status, mi.t, mi.pc) == (mn.status, mn.t, mn.pc)


def differential(text: str, inputs: dict | None = None, max_steps: int | None = None,
                 back: bool = True) -> tuple[str, int]:
    """Run `text` forward (and, when that ends, backward) interpreted and native; assert the
    same outcome and state.  Returns (the forward outcome, the native runs' bail count)."""
    prog = rvm.assemble(text, "r.rasm")
    mi = rvm.Machine(prog, native=False)
    mn = rvm.Machine(prog)
    mn.compile()
    mi.reset(inputs or {})
    mn.reset(inputs or {})
    ri, rn = _run(mi, 1, max_steps), _run(mn, 1, max_steps)
    assert ri == rn
    _same(mi, mn, peaks=mn.core.native_run_bails == 0)
    if back and ri[0] == "ok":
        assert _run(mi, -1) == _run(mn, -1)
        _same(mi, mn, peaks=mn.core.native_run_bails == 0)
    return ri[0], mn.core.native_run_bails


# seeds of programs quick to compile (the file stays near 30 s on two cores); seed 6's
# program traps (a residue), the others run natively to the end.  A longer sweep:
# for s in range(N): differential(random_program(random.Random(s)))
SEEDS = {0: "ok", 2: "ok", 4: "ok", 5: "ok", 6: "NestingError", 7: "ok"}


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_random_programs_native_is_the_interpreter(seed):
    outcome, bails = differential(random_program(random.Random(seed)))
    assert (outcome, bails) == (SEEDS[seed], 0 if SEEDS[seed] == "ok" else 1)


CORNERS = HEAD.format(x0=0.7, x1=-0.4, s=1.3, v0=0.25, v1=-2.0, q=0.9, j=1, k=2, mode=0,
                      big=3000) + """
input  o: float = 0.0
input  n: int = 5
input  m: int = 1

func f(out: float, x: float[2], a: float) {
    out += sin(x[0]) * x[1] * a + q * x[0] * K + KA[j] * x[1] * x[1]
}
"""


def test_an_indexed_argument_f_moves_is_reported_by_the_interpreter():
    """f changes j in `grad fj(x[j], s)`: at its return x[j] names another cell, which the
    interpreter traps on (AliasError); the native code ran on (d = 0.49 forward, j = 1)."""
    text = CORNERS + """
func fj(out: float, y: float, a: float) {
    out += y * y * a
    j += m
}

func h(out: float, y: float, a: float) {
    local t: float
    with {
        t += grad fj(x[j], a) wrt a
    } do {
        out += t * t * y
    }
}

func main() {
    d += grad fj(x[j], s) wrt s
    d += jvp fj(x[j], s) wrt s along s
    hd += grad h(x[1], s) wrt s
    hd += jvp h(x[1], s) wrt s along s
}
"""
    assert differential(text) == ("AliasError", 1)
    assert differential(text, {"m": 5}) == ("AliasError", 1)     # and out of bounds
    assert differential(text, {"m": 0}) == ("ok", 0)


@pytest.mark.parametrize("name, body, inputs, outcome", [
    ("scratch not zero at the start", "g += grad f(o, x, s) wrt x", {"o": 0.5},
     "NestingError"),
    ("scratch -0.0 at the start", "g += grad f(o, x, s) wrt x", {"o": -0.0}, "NestingError"),
    ("wrt a global f names, a local it never sees",
     "local z: float[2]\n    g += grad f(x, s) wrt z\n    d += grad f(x, s) wrt q\n"
     "    d -= jvp f(x, s) wrt q along s", {}, "ok"),
])
def test_corners_at_one_level(name, body, inputs, outcome):
    assert differential(CORNERS + f"\nfunc main() {{\n    {body}\n}}\n", inputs)[0] == outcome


def test_a_residue_a_third_level_and_deep_recursion():
    text = CORNERS + """
func left(out: float, x: float[2], a: float) {
    out += x[0] * a
    out += x[1] * 1.0e17
}

func r(out: float, x: float[2], a: float, n: int) {
    if n == 0 {
        out += x[0] * x[1] * a
    } else {
        dec n
        call r(out, x, a, n)
        inc n
    } fi n == 0
}

func h(out: float, x: float[2], a: float, n: int) {
    local gg: float[2]
    with {
        gg += grad r(x, a, n) wrt x
    } do {
        out += gg[0] * gg[1]
    }
}

func h3(out: float, x: float[2], a: float, n: int) {
    local gg: float[2]
    with {
        gg += grad h(x, a, n) wrt x
    } do {
        out += gg[0] * gg[1]
    }
}

func main() {
    if mode == 1 {
        g += grad left(x, s) wrt x
    } fi mode == 1
    hg += grad h(x, s, n) wrt x
    hd += jvp h(x, s, n) wrt x along v
    if mode == 2 {
        hg += grad h3(x, s, n) wrt x
    } fi mode == 2
    d += jvp r(x, s, n) wrt x along v
}
"""
    assert differential(text) == ("ok", 0)
    assert differential(text, {"mode": 1}) == ("NestingError", 1)
    assert differential(text, {"mode": 2}) == ("NestingError", 1)
    assert differential(text, {"n": 3000})[0] == "ok"           # deeper than native calls go


def test_step_caps_that_bind_inside_nested_runs():
    text = CORNERS + """
func p(out: float, x: float[2], a: float) {
    local t: float
    t += x[0] * a
    out += t * x[1] * t
    push t
}

func h(out: float, x: float[2], a: float) {
    local gg: float[2]
    with {
        gg += grad p(x, a) wrt x
    } do {
        out += gg[0] * gg[1]
    }
}

func main() {
    g += grad p(x, s) wrt x
    hg += grad h(x, s) wrt x
    hd += jvp h(x, s) wrt x along v
}
"""
    prog = rvm.assemble(text, "r.rasm")
    m = rvm.Machine(prog, native=False)
    m.run()
    total = m.stats["steps"]
    for cap in (2, 5, 9, 17, 40, total // 3, total // 2, total - 3, total - 1, total, total + 1):
        differential(text, max_steps=cap, back=False)


def test_a_value_the_caller_pushed_carries_no_earlier_statements_tangent():
    """f pops a value its caller pushed (and pushes it back).  The level's stack duals were
    not cleared at the start of a statement, so that value took the tangent an earlier jvp
    statement's f had left in its slot: d = -2.3075 instead of s^2 v[0] = 0.4225, in the
    interpreter and (bit for bit) the native code; now they start zero, as the cells do."""
    text = CORNERS + """
func fl(out: float, x: float[2], a: float) {
    local w: float
    w += x[0] * x[1]
    out += w * a
    push w
}

func fp(out: float, x: float[2], a: float) {
    local u: float
    pop u
    out += u * u * x[0]
    push u
}

func main() {
    local w: float
    hd += jvp fl(x, s) wrt x along v
    w += s
    push w
    d += jvp fp(x, s) wrt x along v
    g += grad fp(x, s) wrt x
    pop w
    w -= s
}
"""
    assert differential(text) == ("ok", 0)
    out = rvm.run(rvm.assemble(text), native=False).outputs
    assert out["d"] == pytest.approx(1.3 ** 2 * 0.25, rel=1e-15)
    assert list(out["g"]) == pytest.approx([1.3 ** 2, 0.0], rel=1e-15)
