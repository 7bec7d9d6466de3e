"""The interval analysis of the native code (rvm/native/intervals.py) against the interpreter:
every int cell the analysis follows must lie, before each row runs, in the interval the
analysis gives it there, and cells it puts in one class must differ by their offsets (in the
function and direction of the frame running the row), on
every path the interpreter takes, forward from a reset, backward from the end a forward run
reached and backward from ends the user sets (when they pass main's entry checks, as the
generated code's guards require).  A cell outside its interval is a check the native code may
leave out wrongly: an index proved in its array that is not, two indexes proved different
that are equal (tests/test_native_proofs.py runs such programs natively).

The programs are random (seeded): int counters and globals stepped by constants and changed by
everything else the instruction set has (xor, neg, not, rotl, swap, cswap, push/pop, calls and
uncalls that change the cell they receive, recursion), loops written with jmp and join (any
start, step and exit test), from/until and for loops, if/else, asserts, and arrays indexed by
the counters, with inputs at the int64 limits (so that an add of a constant may wrap)."""
from __future__ import annotations

import random

import numpy as np
import pytest

import rvm
from isa.program import MODE_X
from isa.table import INVERSE, OPS
from rvm.native.intervals import Intervals

INTS = ["i", "j", "k", "l"]
GLOBALS = ["g0", "g1", "g2"]       # g2 is never an argument: h() changes it
REL = ["<", "<=", "==", "!=", ">", ">="]
EXTREMES = [0, 1, 2, 3, -1, 4, 7, 8, 100, 2**62, -2**63, 2**63 - 1, 2**63 - 2, -2**63 + 1]


class Programs:
    """One random program (a seed's)."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.n = 0
        self.depth = 0
        self.la, self.lb, self.lg = (self.r.choice(v) for v in ([1, 2, 3, 4, 8], [1, 2, 4, 5],
                                                                [1, 3, 4]))

    def label(self) -> str:
        self.n += 1
        return f"L{self.n}"

    def cell(self) -> str:
        return self.r.choice(INTS + GLOBALS)

    def small(self) -> int:
        return self.r.choice([0, 1, 2, 3, 4, -1, self.la, self.lb, self.la - 1, self.lb - 1])

    def index(self) -> str:
        c = self.cell()
        return c if self.r.random() < 0.7 else f"{c} + {self.r.choice([1, 2, -1])}"

    def update(self) -> list[str]:
        r = self.r
        c = self.cell()
        d = r.choice([q for q in INTS + GLOBALS if q != c])
        big = r.choice([2**62, -2**63 + 1, 2**63 - 1, 100])
        cs = [r.choice(GLOBALS), r.choice(INTS)] if r.random() < 0.5 else [c, d]
        cs.append(r.choice([q for q in INTS + GLOBALS if q not in cs]))
        arg = c if c != "g2" else "i"
        x = r.randrange(22)
        if x == 0:                                  # the value stack: a statement between
            return [f"push {c}", *self.block(1), f"pop {r.choice([c, d])}"]
        return [
            [f"inc {c}"], [f"dec {c}"], [f"{c} += {self.small()}"], [f"{c} -= {self.small()}"],
            [f"{c} += {big}"], [f"{c} {r.choice(['+=', '-=', '^='])} {d}"], [f"neg {c}"],
            [f"not {c}"], [f"swap {c}, {d}"], [f"{c} ^= 3"],
            [f"cswap {cs[0]}, {cs[1]}, {cs[2]}"],
            [f"rotl {c}, {r.choice([1, 63])}"],
            [f"{r.choice(['call', 'uncall'])} {r.choice(['f1', 'f2'])}({arg})"],
            [f"{r.choice(['call', 'uncall'])} rec({arg}, a)"],
            [f"{r.choice(['call', 'uncall'])} h()"],
            [f"assert {c} {r.choice(REL)} {r.choice([self.small(), d])}"],
            [f"a[{self.index()}] += x", f"z += a[{self.index()}]"],
            [f"b[{self.index()}] += {d}"],
            [f"a[{self.index()}] += a[{self.index()}] * x"],
            [f"swap a[{self.index()}], a[{self.index()}]"],
            [f"ga[{self.index()}] += x", f"call f3(a, {arg})"],
        ][x - 1]

    def block(self, n: int | None = None) -> list[str]:
        out = []
        for _ in range(n if n is not None else self.r.randint(1, 4)):
            out += self.stmt()
        return out

    def stmt(self) -> list[str]:
        if self.depth >= 2 or self.r.random() < 0.6:
            return self.update()
        self.depth += 1
        try:
            return self.control()
        finally:
            self.depth -= 1

    def control(self) -> list[str]:
        r = self.r
        c, d = self.cell(), self.cell()
        x = r.randrange(5)
        if x == 0:                                  # a loop in jmp and join
            top, back = self.label(), self.label()
            step = r.choice([f"inc {c}", f"dec {c}", f"{c} += 2", f"{c} -= 1"])
            return [f"{top}: join {back} if {c} != {r.choice([0, 1, self.small()])}",
                    *self.block(), step,
                    f"{back}: jmp {top} if {c} {r.choice(['<', '<=', '!=', '>', '>='])} "
                    f"{r.choice([self.small(), d])}"]
        if x in (1, 2):
            rel, v = r.choice(REL), r.choice([self.small(), d])
            other = ["} else {", *self.block()] if x == 2 else []
            return [f"if {c} {rel} {v} {{", *self.block(), *other, f"}} fi {c} {rel} {v}"]
        if x == 3:
            return [f"from {c} == 0 {{", *self.block(), "} loop {", f"    inc {c}",
                    f"}} until {c} == {self.small()}"]
        return [f"for q{self.n} in 0..{r.choice([self.small(), 'g0'])} {{", *self.block(), "}"]

    def callee(self) -> list[str]:
        r = self.r
        out = ["inc g2"]
        for _ in range(r.randint(1, 4)):
            u, g = r.choice(["u", "v"]), r.choice(GLOBALS)
            out += r.choice([
                ["from u == 0 {", "    c[u] += x", "} loop {", "    inc u",
                 f"}} until u == {r.choice([2, 3, 4, 'g0', 'g1'])}"],
                [f"ga[{r.choice(['g0', 'g1', 'u', 'v'])}] += x"],
                [f"{u} {r.choice(['+=', '-=', '^='])} {g}", f"{g} += {r.choice([1, 2])}"],
                [f"c[{r.choice(['u', 'v', 'g0'])}] += c[{r.choice(['u', 'v', 'g1'])}] * x"],
                [f"swap {u}, {g}"],
                [f"assert {r.choice(['u', 'v', 'g0'])} {r.choice(REL)} {r.choice([0, 2, 'g1'])}"],
            ])
        return out

    def text(self) -> str:
        body = self.block(self.r.randint(2, 8))
        f1 = self.r.choice(["inc p", "p += 3", "neg p", "dec p", "p ^= 5", "p -= 7"])
        h = "\n    ".join(self.callee())
        main = "\n    ".join(body)
        return f"""
inout g0: int
inout g1: int
inout g2: int
inout x: float = 0.5
inout z: float
global ga: float[{self.lg}]
func f1(p: int) {{
    {f1}
}}
func f2(p: int) {{
    local t: int = 0
    t += p
    p -= t
    p += t
    p += 1
    delocal t = p - 1
}}
func rec(p: int, q: float[]) {{
    if p > 0 {{
        q[p - 1] += 1.0
        dec p
        call rec(p, q)
        inc p
    }} fi p > 0
}}
func h() {{
    var c: float[3]
    var u: int
    var v: int
    {h}
}}
func f3(q: float[], p: int) {{
    q[p] += 1.0
}}
func main() {{
    var a: float[{self.la}]
    var b: int[{self.lb}]
    var i: int
    var j: int
    var k: int
    var l: int
    {main}
}}
"""


class Oracle:
    """The analysis of each (function, direction) a frame runs, as codegen.functions makes it
    (main's backward rows from what its forward rows know at their end)."""

    def __init__(self, prog):
        self.p = prog
        self.inv = np.column_stack([np.array(INVERSE, dtype=np.int64)[prog.code[:, 0]],
                                    prog.code[:, 1:]])
        self.ivs: dict[tuple[int, int], Intervals] = {}
        self.checked = 0

    def iv(self, fi: int, e: int) -> Intervals:
        if (fi, e) not in self.ivs:
            facts = self.iv(fi, 1).exit_facts() if e < 0 and fi == self.p.main else None
            self.ivs[(fi, e)] = Intervals(self.p, fi, self.p.code if e > 0 else self.inv, e,
                                          facts)
        return self.ivs[(fi, e)]

    def entry_ok(self, m: rvm.Machine) -> bool:
        """Does the end state m is at pass main's backward entry checks (_Fn.guards)?"""
        return all(lo <= int(m.mem[a]) <= hi
                   for (_, a), (lo, hi) in self.iv(self.p.main, -1).entry_facts.items())

    def run(self, m: rvm.Machine, direction: int, limit: int = 3000) -> str | None:
        """Step m in `direction` from a boundary to its end, a trap or `limit` steps; the
        first cell found outside its interval, or None."""
        core = m.core
        for _ in range(limit):
            if core.depth:
                func, fp, _pp, _ret, fdir = core.frame(core.depth - 1)
                e = fdir * direction
                iv = self.iv(func, e)
                if iv.ok:
                    s = iv.at(core.pc)
                    if s is None:
                        return f"{self.p.functions[func].name} ({e:+d}) pc {core.pc}: " \
                               f"a row the analysis takes as unreachable ran"
                    base: dict[int, tuple[tuple[str, int], int]] = {}
                    for k in sorted(iv.tracked):
                        v = int(m.mem[k[1] if k[0] == "G" else fp + k[1]])
                        lo, hi = s.get(k)
                        self.checked += 1
                        where = f"{self.p.functions[func].name} ({e:+d}) pc {core.pc}"
                        if not lo <= v <= hi:
                            return f"{where}: {k} = {v}, outside [{lo}, {hi}]"
                        if k in s.rel:              # cells of one class differ by constants
                            c, off = s.rel[k]
                            if c in base and v - off != base[c][1]:
                                return f"{where}: {k} = {v} and {base[c][0]} are not " \
                                       f"{s.same_class(base[c][0], k)} apart"
                            base.setdefault(c, (k, v - off))
            try:
                m.step(1, direction=direction)
            except rvm.RVMError:
                return None
            if core.depth == 0:
                return None
        return None


def inputs(r: random.Random) -> dict:
    return {g: r.choice(EXTREMES) for g in GLOBALS}


@pytest.mark.parametrize("chunk", range(4))
def test_every_followed_cell_lies_in_its_interval_on_the_interpreters_paths(chunk):
    programs = proofs = 0
    checked = 0
    for seed in range(chunk * 60, chunk * 60 + 60):
        src = Programs(seed).text()
        try:
            prog = rvm.assemble(src)
        except rvm.RVMError:
            continue                 # (a for loop's body writes its bound, ...)
        programs += 1
        o = Oracle(prog)
        r = random.Random(seed)
        for _ in range(3):
            inp = inputs(r)
            m = rvm.Machine(prog, native=False)
            m.reset(inp)
            bad = o.run(m, +1)
            if bad is None and m.status == "end":
                bad = o.run(m, -1)
            m = rvm.Machine(prog, native=False)
            m.reset_end(inputs(r))
            if bad is None and o.entry_ok(m):
                bad = o.run(m, -1)
            assert bad is None, f"seed {seed}, inputs {inp}: {bad}\n{src}"
        checked += o.checked
        for (fi, _e), iv in o.ivs.items():
            f = prog.functions[fi]
            for pc in range(f.begin, f.end + 1):
                op = OPS[int(prog.code[pc, 0])]
                for i, kind in enumerate(op.operands):
                    w = int(prog.code[pc, 1 + i])
                    if kind in ("y", "a") and w & 7 == MODE_X:
                        x = prog.xtab[w >> 3]
                        proofs += iv.index_in(pc, x.index, x.length)
    # the programs exercise the analysis: most assemble, and it proves indexes in range
    assert programs >= 30 and proofs >= 20 and checked >= 5000, (programs, proofs, checked)


# Programs whose cells each rule of the analysis must follow: a call changes the globals
# (bump) and the cells passed to it (f), an uncall likewise, pop brings another value, a wild
# cell's row writes both targets (cswap), a swap exchanges (a loop counter and a global).
RULES = [("""
inout n: int
inout m: int
inout x: float = 0.5
inout z: float
func bump() {
    n += 10
}
func f(p: int) {
    p += 3
}
func main() {
    var a: float[16]
    var j: int
    assert n >= 0
    assert n < 4
    call bump()
    z += a[n - 10] * x
    call f(j)
    z += a[j] * x
    uncall f(j)
    uncall bump()
    push m
    pop j
    z += a[j] * x
    push j
    pop m
    inc m
    cswap m, j, n
    z += a[j] * x
    cswap m, j, n
    dec m
    swap j, n
    z += a[j] * x
    swap j, n
}
""", [{"n": 2, "m": 5}, {"n": 3, "m": 9}, {"n": 1, "m": 15}])]


@pytest.mark.parametrize("src,ins", RULES)
def test_each_rule_of_the_analysis_against_the_interpreter(src, ins):
    prog = rvm.assemble(src)
    o = Oracle(prog)
    for inp in ins:
        m = rvm.Machine(prog, native=False)
        m.reset(inp)
        assert o.run(m, +1) is None
        assert m.status == "end", inp
        assert o.run(m, -1) is None
    assert o.checked > 100
