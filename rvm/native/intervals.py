"""Interval analysis of a function's int cells, for the checks the generated code can leave out
(rvm/native/codegen.py): an index whose range lies inside its array needs no bounds check, and
two indexes of one array that can never be equal need no alias check.

The analysis runs over the rows of one function as the generated code runs them (one
direction: the forward rows, or the inverse-mapped rows from the end), with the generated
code's control flow: a jmp goes to its target when its condition holds, a join is entered from
the row before it when its condition does not hold and from its jmp when it does (else the
code gives up), an assert goes on when its condition holds, a check that fails gives up.  So
every path the generated code runs to a row is a path of this flow, and what holds of the cells
on every path of the flow holds at the row.

The cells: the int cells a row names directly (G, L), outside every array an indexed operand of
the function can reach and, a global, outside every parameter's reach (so no write through an
index or a parameter changes them behind the analysis' back; as codegen._promotable).  A
constant cell is its value.  Per row, the state is
* for each such cell, the class it belongs to and its offset in it: the cells of one class
  differ by constants (value = the class's base + offset), as counters stepped together in a
  loop do (j and jm = j - 1);
* for each class, an interval of its base (as Python ints within the int64 range).
inc, dec, an add or subtraction of a constant move a cell's offset (a result that could wrap
leaves its class, unknown); any other write to a tracked cell makes it unknown (an add of
two bounded cells: the interval sum, when that cannot wrap); a swap exchanges two cells; alloc,
free and pop's zero check say the cell is 0; push leaves it 0.  A call or uncall may change any
global and the cells passed to it.  A condition narrows the intervals (and decides itself when
both cells are of one class).  At a join of paths two cells stay in one class when they differ
by the same constant on both; loops reach a fixed point by widening (a bound that moves goes to
the int64 limit), then two rounds of narrowing.

The start state: the function's frame is zero when it is entered (the machine's frames are
zero between runs, and every return checks its frame; `guards` re-checks the cells the analysis
starts from, at a few instructions per call), the globals are anything (or, for main's sweep or
backward run from its end, what main's forward analysis knows of them at the end: `guards`
checks those too, and a state that fails gives up to the interpreter, which is always right).
"""
from __future__ import annotations

import bisect

from isa.program import MODE_G, MODE_L, MODE_X
from isa.table import OPS
from isa.types import INT

LO, HI = -(1 << 63), (1 << 63) - 1
TOP = (LO, HI)                  # any int64
INF = 1 << 100                  # past any int64: where a widened bound goes (see _solve)
_BY_CODE = {op.code: op for op in OPS}
_REL = ("", "==", "!=", "<", "<=", ">", ">=")
_NEG = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", "<=": ">", ">": "<="}
_FLIP = {"==": "==", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}
WIDEN_AFTER = 3          # visits of a row before its state widens
MAX_ROUNDS = 200         # a flow that does not settle by then: no facts (every check kept)


def _meet(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else None


class State:
    """cell key -> (class, offset); class -> interval of its base.  Cells not in `rel` are
    unknown."""

    __slots__ = ("rel", "rng")

    def __init__(self, rel: dict | None = None, rng: dict | None = None):
        self.rel: dict[tuple[str, int], tuple[int, int]] = rel or {}
        self.rng: dict[int, tuple[int, int]] = rng or {}

    def copy(self) -> State:
        return State(dict(self.rel), dict(self.rng))

    def get(self, k) -> tuple[int, int]:
        r = self.rel.get(k)
        if r is None:
            return TOP
        lo, hi = self.rng[r[0]]
        return (lo + r[1], hi + r[1])

    def forget(self, k, new: tuple[int, int] = TOP) -> None:
        """k gets a class of its own with interval `new` (TOP: unknown)."""
        self.rel.pop(k, None)
        if new != TOP:
            c = _fresh()
            self.rel[k] = (c, 0)
            self.rng[c] = new

    def shift(self, k, d: int) -> None:
        """k += d, as integers: its offset moves (_solve checks afterwards that no such add
        can wrap where it runs)."""
        r = self.rel.get(k)
        if r is None:
            c = _fresh()
            self.rel[k] = (c, d)
            self.rng[c] = TOP
            return
        self.rel[k] = (r[0], r[1] + d)

    def narrow(self, k, iv: tuple[int, int]) -> bool:
        """k lies in iv: the class's base narrows (False: no value can)."""
        r = self.rel.get(k)
        if r is None:
            if iv == TOP:
                return True
            c = _fresh()
            self.rel[k] = (c, 0)
            self.rng[c] = iv
            return True
        got = _meet(self.rng[r[0]], (iv[0] - r[1], iv[1] - r[1]))
        if got is None:
            return False
        self.rng[r[0]] = got
        return True

    def same_class(self, a, b) -> int | None:
        """b - a when both are known to differ by a constant."""
        ra, rb = self.rel.get(a), self.rel.get(b)
        if ra is None or rb is None or ra[0] != rb[0]:
            return None
        return rb[1] - ra[1]

    def key(self) -> tuple:
        """A canonical form (for the fixed point: class ids renamed in order of first use)."""
        names: dict[int, int] = {}
        rel = []
        for k in sorted(self.rel):
            c, o = self.rel[k]
            n = names.setdefault(c, len(names))
            rel.append((k, n, o))
        return tuple(rel), tuple(self.rng[c] for c in sorted(names, key=lambda c: names[c]))


def _key(s: State | None) -> tuple | None:
    return s.key() if s is not None else None


_next = [0]


def _fresh() -> int:
    _next[0] += 1
    return _next[0]


def join(a: State | None, b: State | None) -> State | None:
    if a is None:
        return b.copy() if b is not None else None
    if b is None:
        return a.copy()
    out = State()
    groups: dict[tuple, tuple[int, int, int]] = {}
    for k in a.rel.keys() & b.rel.keys():
        (ca, oa), (cb, ob) = a.rel[k], b.rel[k]
        g = (ca, cb, ob - oa)
        if g not in groups:
            c = _fresh()
            groups[g] = (c, oa, ob)
            la, ha = a.rng[ca]
            lb, hb = b.rng[cb]
            # the new base is a's base; b's base in it is its own plus ob - oa
            d = ob - oa
            out.rng[c] = (min(la, lb + d), max(ha, hb + d))
        c = groups[g][0]
        out.rel[k] = (c, oa)
    return out


def widen(old: State | None, new: State | None, written: set,
          steps: list[int]) -> State | None:
    """new (which contains old), with every bound of a `written` cell that moved past old's
    sent on to the next of `steps` (sorted: the program's constants and array lengths, each
    +-1), or past them to -INF or INF (its class's base with it).  A cell no row writes
    changes only by the conditions' narrowing of what it held at the entry: it needs no
    widening."""
    if old is None or new is None:
        return new
    out = new.copy()
    for k, (c, off) in new.rel.items():
        if k not in written:
            continue
        o, n = old.get(k), new.get(k)
        blo, bhi = out.rng[c]
        if n[0] < o[0]:
            i = bisect.bisect_right(steps, n[0]) - 1
            blo = min(blo, steps[i] - off) if i >= 0 else -INF
        if n[1] > o[1]:
            i = bisect.bisect_left(steps, n[1])
            bhi = max(bhi, steps[i] - off) if i < len(steps) else INF
        out.rng[c] = (blo, bhi)
    return out


class Intervals:
    """The analysis of function fi's rows `code` run in direction e (see the module);
    `entry`: intervals of globals known when the function is entered (main's sweep)."""

    def __init__(self, program, fi: int, code, e: int,
                 entry: dict[tuple[str, int], tuple[int, int]] | None = None):
        self.p, self.fi, self.code, self.e = program, fi, code, e
        f = program.functions[fi]
        self.f = f
        self.begin, self.end = f.begin, f.end
        self.consts = {c.addr + k: w for c in program.consts for k, w in enumerate(c.values)}
        self.tracked = self._tracked()
        self.written = self._written()
        self.steps = self._steps()
        self.entry_facts = {k: v for k, v in (entry or {}).items() if k in self.tracked}
        self.state_in: dict[int, State | None] = {}
        self.ok = False
        self.wild: set[tuple[str, int]] = set()
        try:
            self._solve()
        except _GiveUp:
            self.state_in = {}

    # -- cells -------------------------------------------------------------------------------
    def _tracked(self) -> set[tuple[str, int]]:
        p, f = self.p, self.f
        rows = self.code[f.begin:f.end + 1]
        reach_g: list[tuple[int, int]] = []
        reach_l: list[tuple[int, int]] = []
        direct: set[tuple[str, int]] = set()
        floats: set[tuple[str, int]] = set()     # named as another type's cell somewhere
        key = {MODE_G: "G", MODE_L: "L"}
        for row in rows:
            op = _BY_CODE[int(row[0])]
            if op.family in ("call", "uncall"):
                for arg in p.callsites[int(row[1])].args:
                    m, q = arg.word & 7, arg.word >> 3
                    if arg.length is not None and m in key:
                        (reach_g if m == MODE_G else reach_l).append((q, q + max(arg.length, 1)))
                continue
            for i, kind in enumerate(op.operands):
                if kind not in ("y", "a"):
                    continue
                w = int(row[1 + i])
                if (w & 7) == MODE_X:
                    x = p.xtab[w >> 3]
                    if (x.base & 7) in key:
                        (reach_g if (x.base & 7) == MODE_G else reach_l).append(
                            (x.base >> 3, (x.base >> 3) + max(x.length, 0)))
                    if (x.index & 7) in key:
                        direct.add((key[x.index & 7], x.index >> 3))
                elif (w & 7) in key:
                    direct.add((key[w & 7], w >> 3))
                    if op.operand_types[i] not in (None, INT) or op.family in ("jmp", "join",
                                                                                "assert") \
                            and (int(row[1]) >> 4) & 3 != int(INT):
                        floats.add((key[w & 7], w >> 3))
        direct -= floats
        # a global some parameter of any function may be bound to: any reach of any call site
        from .codegen import param_reach
        reach_p = [r for per in param_reach(p) for r in per]
        out = set()
        for k in direct:
            if k[0] == "G" and k[1] in self.consts:
                continue
            spans = reach_g + reach_p if k[0] == "G" else reach_l
            if k[0] == "G" and k[1] >= p.n_static:
                continue
            if not any(lo <= k[1] < hi for lo, hi in spans):
                out.add(k)
        return out

    def _steps(self) -> list[int]:
        """The widening's thresholds: the int constants and immediates of the function's
        rows and its arrays' lengths, each with its neighbours."""
        vals = {0}
        for row in self.code[self.f.begin:self.f.end + 1]:
            op = _BY_CODE[int(row[0])]
            for i, kind in enumerate(op.operands):
                w = int(row[1 + i])
                if kind == "imm" and op.types and op.types[0] == INT:
                    vals.add(w - (1 << 64) if w >= (1 << 63) else w)
                elif kind in ("y", "a"):
                    v = self.operand(w)
                    if isinstance(v, int):
                        vals.add(v)
                    if (w & 7) == MODE_X:
                        vals.add(self.p.xtab[w >> 3].length)
        return sorted({v + d for v in vals for d in (-1, 0, 1)})

    def _written(self) -> set[tuple[str, int]]:
        """The tracked cells some row (or, a global, some call) may write."""
        out: set[tuple[str, int]] = set()
        for row in self.code[self.f.begin:self.f.end + 1]:
            op = _BY_CODE[int(row[0])]
            if op.family in ("call", "uncall"):
                out |= {k for k in self.tracked if k[0] == "G"}
                for arg in self.p.callsites[int(row[1])].args:
                    if arg.word & 7 == MODE_L:
                        q = arg.word >> 3
                        n = 1 if arg.length is None else max(arg.length, 1)
                        out |= {("L", j) for j in range(q, q + n)}
                continue
            for i, kind in enumerate(op.operands):
                if kind == "y":
                    k = self.operand(int(row[1 + i]))
                    if k is not None and not isinstance(k, int):
                        out.add(k)
        return out

    def operand(self, w: int) -> tuple[str, int] | int | None:
        """A tracked cell's key, a constant's value, or None (unknown)."""
        m, v = w & 7, w >> 3
        if m == MODE_G and v in self.consts:
            c = self.consts[v]
            return c - (1 << 64) if c >= (1 << 63) else c
        k = ("G", v) if m == MODE_G else ("L", v) if m == MODE_L else None
        return k if k in self.tracked else None

    def value(self, s: State, w) -> tuple[int, int]:
        if isinstance(w, int):
            return (w, w)
        return s.get(w) if w is not None else TOP

    # -- transfer ----------------------------------------------------------------------------
    def start(self) -> State:
        s = State()
        zero = _fresh()
        s.rng[zero] = (0, 0)
        for k in self.tracked:
            if k[0] == "L":
                s.rel[k] = (zero, 0)
        for k, iv in self.entry_facts.items():
            s.narrow(k, iv)
        return s

    def cond(self, s: State, c, truth: bool) -> State | None:
        """s where the condition of row c (cc, a, b) is `truth` (None: never)."""
        cc = int(c[1])
        cmp, ty = cc & 7, (cc >> 4) & 3
        if (cc & 15) == 0:                      # no condition: always holds
            return s if truth else None
        if not (1 <= cmp <= 6) or (cc & 8) or ty != int(INT):
            return s
        rel = _REL[cmp] if truth else _NEG[_REL[cmp]]
        a, b = self.operand(int(c[2])), self.operand(int(c[3]))
        return self.relate(s, a, rel, b)

    def reads(self, c) -> bool:
        """Does cond() learn anything from condition row c (cc, a, b): a cell it follows
        narrows, or the condition is decided (two constants; two cells of one class, which
        are followed)?  A check of such a condition must give up at once where it fails."""
        cc = int(c[1])
        if (cc & 15) == 0 or not (1 <= (cc & 7) <= 6) or (cc & 8) or (cc >> 4) & 3 != int(INT):
            return False
        a, b = self.operand(int(c[2])), self.operand(int(c[3]))
        return isinstance(a, tuple) or isinstance(b, tuple) or \
            (isinstance(a, int) and isinstance(b, int))

    def relate(self, s: State, a, rel: str, b) -> State | None:
        if isinstance(a, int) and not isinstance(b, int):
            a, b, rel = b, a, _FLIP[rel]
        ia, ib = self.value(s, a), self.value(s, b)
        if not isinstance(a, int) and a is not None and not isinstance(b, int) and \
                b is not None:
            d = s.same_class(a, b)              # b = a + d
            if d is not None:
                holds = {"==": d == 0, "!=": d != 0, "<": d > 0, "<=": d >= 0, ">": d < 0,
                         ">=": d <= 0}[rel]
                return s if holds else None
        if a is None:
            return s
        if isinstance(a, int):                  # two constants: the relation is decided
            holds = {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                     ">=": a >= b}[rel]
            return s if holds else None
        s = s.copy()
        if rel == "==":
            m = _meet(ia, ib)
            if m is None:
                return None
            ok = s.narrow(a, m) and (b is None or isinstance(b, int) or s.narrow(b, m))
            return s if ok else None
        if rel == "!=":
            if ib[0] == ib[1]:
                lo, hi = ia
                if lo == ib[0]:
                    lo += 1
                if hi == ib[0]:
                    hi -= 1
                if lo > hi:
                    return None
                return s if s.narrow(a, (lo, hi)) else None
            return s
        if rel in (">", ">="):
            if b is None or isinstance(b, int):
                # a > b: a >= ib.lo + 1
                lo = ib[0] + (1 if rel == ">" else 0)
                return s if lo <= HI and s.narrow(a, (lo, HI)) else None
            return self.relate(s, b, _FLIP[rel], a)
        strict = 1 if rel == "<" else 0
        hi = ib[1] - strict
        if hi < LO or not s.narrow(a, (LO, hi)):
            return None
        if b is not None and not isinstance(b, int):
            lo = s.get(a)[0] + strict
            if lo > HI or not s.narrow(b, (lo, HI)):
                return None
        return s

    def transfer(self, s: State, c) -> State:
        op = _BY_CODE[int(c[0])]
        fam = op.family
        if fam in ("call", "uncall"):
            s = s.copy()
            for k in list(s.rel):
                if k[0] == "G":
                    s.forget(k)
            for arg in self.p.callsites[int(c[1])].args:
                m, q = arg.word & 7, arg.word >> 3
                if m == MODE_L:
                    for j in range(q, q + (1 if arg.length is None else max(arg.length, 1))):
                        s.forget(("L", j))
                elif m == MODE_X:
                    x = self.p.xtab[q]
                    if (x.base & 7) == MODE_L:
                        lo = x.base >> 3
                        for j in range(lo, lo + max(x.length, 1)):
                            s.forget(("L", j))
            return s
        ys = [self.operand(int(c[1 + i])) for i, k in enumerate(op.operands) if k == "y"]
        ys = [y for y in ys if y is not None and not isinstance(y, int)]
        if not ys:
            return s
        s = s.copy()
        y = ys[0]
        if fam in ("alloc", "free", "push"):
            s.forget(y)
            s.narrow(y, (0, 0))
            return s
        if fam == "swap":
            keys = [self.operand(int(c[1])), self.operand(int(c[2]))]
            a, b = [k if k is not None and not isinstance(k, int) else None for k in keys]
            if a is not None and b is not None:
                ra, rb = s.rel.get(a), s.rel.get(b)
                for key, r in ((a, rb), (b, ra)):
                    s.rel.pop(key, None)
                    if r is not None:
                        s.rel[key] = r
            else:
                for one in (a, b):
                    if one is not None:
                        s.forget(one)
            return s
        if y in self.wild:
            for t in ys:                        # (cswap writes its second target too)
                s.forget(t)
            return s
        got = self._shift_of(s, c)
        if got is not None:
            s.shift(*got)
            return s
        if op.types and op.types[0] == INT and len(op.types) == 1 and fam in ("add", "sub"):
            ia = self.value(s, self.operand(int(c[2])))
            iy = s.get(y)
            lo, hi = (iy[0] + ia[0], iy[1] + ia[1]) if fam == "add" else \
                (iy[0] - ia[1], iy[1] - ia[0])
            s.forget(y, (lo, hi) if LO <= lo and hi <= HI else TOP)
            return s
        for t in ys:
            s.forget(t)
        return s

    # -- the flow ----------------------------------------------------------------------------
    def _solve(self) -> None:
        """The flow to a fixed point, as if ints did not wrap; then every add of a constant
        to a tracked cell is checked not to wrap anywhere it runs in that solution (so the
        solution is the wrapping machine's too).  A cell whose add could wrap is made `wild`
        (any write makes it unknown) and the flow runs again."""
        self.wild = set()
        for _ in range(len(self.tracked) + 1):
            self._flow()
            bad = set()
            for pc, st in self.state_in.items():
                if st is None:
                    continue
                c = [int(v) for v in self.code[pc]]
                got = self._shift_of(st, c)
                if got is None:
                    continue
                y, d = got
                lo, hi = st.get(y)
                if lo + d < LO or hi + d > HI:
                    bad.add(y)
            if not bad:
                self.ok = True
                return
            self.wild |= bad
        raise _GiveUp

    def _shift_of(self, s: State, c) -> tuple[tuple[str, int], int] | None:
        """(the cell, the constant) of a row that adds a constant to a tracked int cell."""
        op = _BY_CODE[int(c[0])]
        if not (op.types and len(op.types) == 1 and op.types[0] == INT):
            return None
        y = self.operand(int(c[1]))
        if y is None or isinstance(y, int) or y in self.wild:
            return None
        if op.family in ("inc", "dec"):
            return y, 1 if op.family == "inc" else -1
        if op.family in ("addi", "subi"):
            imm = int(c[2])
            imm = imm - (1 << 64) if imm >= (1 << 63) else imm
            return y, imm if op.family == "addi" else -imm
        if op.family in ("add", "sub"):
            ia = self.value(s, self.operand(int(c[2])))
            if ia[0] == ia[1]:
                return y, ia[0] if op.family == "add" else -ia[0]
        return None

    def _flow(self) -> None:
        e, code = self.e, self.code
        first = self.begin + 1 if e > 0 else self.end - 1
        last = self.end if e > 0 else self.begin
        order = list(range(first, last + e, e))
        pos = {pc: i for i, pc in enumerate(order)}
        fam = {pc: _BY_CODE[int(code[pc][0])].family for pc in order}
        rows = {pc: [int(v) for v in code[pc]] for pc in order}
        entry = self.start()
        in_f: dict[int, State | None] = {}
        in_j: dict[int, State | None] = {}
        back: dict[tuple[int, str], State | None] = {}

        def round_(widening: bool, k: int) -> bool:
            nonlocal back
            fwd: dict[tuple[int, str], State | None] = {(first, "fall"): entry}
            nback: dict[tuple[int, str], State | None] = {}
            changed = False

            def edge(src: int, dst: int, st: State | None, kind: str) -> None:
                if st is None:
                    return
                if dst not in pos:
                    raise _GiveUp
                tgt = nback if pos[dst] <= pos[src] else fwd
                tgt[(dst, kind)] = join(tgt.get((dst, kind)), st)

            for pc in order:
                c = rows[pc]
                ins = []
                for kind, was in (("fall", in_f), ("jump", in_j)):
                    ahead, behind = fwd.get((pc, kind)), back.get((pc, kind))
                    if not widening:
                        ins.append(join(ahead, behind))
                        continue
                    # a loop's head widens what its back edge brings beyond what it held and
                    # what comes in from ahead (so a cell the loop does not change keeps the
                    # bounds an earlier loop still settling gives it)
                    base = join(was.get(pc), ahead)
                    new = join(base, behind)
                    if k >= WIDEN_AFTER and behind is not None:
                        new = widen(base, new, self.written, self.steps)
                    ins.append(new)
                f, j = ins
                for d, new in ((in_f, f), (in_j, j)):
                    old = d.get(pc)
                    if (old.key() if old else None) != (new.key() if new else None):
                        changed = True
                    d[pc] = new
                here = join(f, j)
                self.state_in[pc] = here
                if here is None:
                    continue
                nxt, fm = pc + e, fam[pc]
                if fm in ("end", "begin"):
                    continue
                if fm == "join":
                    a = self.cond(f, c, False) if f is not None else None
                    b = self.cond(j, c, True) if j is not None else None
                    edge(pc, nxt, join(a, b), "fall")
                elif fm == "jmp":
                    t = c[4]
                    edge(pc, t, self.cond(here, c, True),
                         "jump" if fam.get(t) == "join" else "fall")
                    edge(pc, nxt, self.cond(here, c, False), "fall")
                elif fm == "assert":
                    edge(pc, nxt, self.cond(here, c, True), "fall")
                else:
                    edge(pc, nxt, self.transfer(here, c), "fall")
            if nback.keys() != back.keys() or any(
                    _key(nback[q]) != _key(back[q]) for q in nback):
                changed = True
            back = nback
            return changed

        for k in range(MAX_ROUNDS):
            if not round_(True, k):
                break
        else:
            raise _GiveUp
        for _ in range(2):                  # narrowing: the rows recomputed, not joined
            round_(False, 0)

    # -- queries -----------------------------------------------------------------------------
    def at(self, pc: int) -> State | None:
        return self.state_in.get(pc)

    def reachable(self, pc: int) -> bool:
        return not self.ok or self.state_in.get(pc) is not None

    def index_in(self, pc: int, index_word: int, length: int) -> bool:
        """Is the index cell (operand word) in [0, length) whenever row pc runs?"""
        if not self.ok:
            return False
        s = self.state_in.get(pc)
        if s is None:
            return False              # (never runs: keep the check, it costs nothing)
        lo, hi = self.value(s, self.operand(index_word))
        return 0 <= lo and hi < length

    def differ(self, pc: int, w1: int, w2: int) -> bool:
        """Are the two index cells never equal when row pc runs?"""
        if not self.ok:
            return False
        s = self.state_in.get(pc)
        if s is None:
            return False
        a, b = self.operand(w1), self.operand(w2)
        if a is not None and b is not None and not isinstance(a, int) and \
                not isinstance(b, int):
            d = s.same_class(a, b)
            if d is not None:
                return d != 0
        ia, ib = self.value(s, a), self.value(s, b)
        return ia[1] < ib[0] or ib[1] < ia[0]

    def exit_facts(self) -> dict[tuple[str, int], tuple[int, int]]:
        """The globals' intervals where the function returns (its last row), when bounded."""
        if not self.ok:
            return {}
        last = self.end if self.e > 0 else self.begin
        s = self.state_in.get(last)
        if s is None:
            return {}
        return {k: s.get(k) for k in self.tracked if k[0] == "G" and s.get(k) != TOP}

    def zero_cells(self) -> list[tuple[str, int]]:
        """The frame cells the analysis starts at zero (tracked L cells)."""
        return sorted(k for k in self.tracked if k[0] == "L")


class _GiveUp(Exception):
    pass
