"""Program -> C for batches: the gradient's forward run and adjoint sweep over W batch rows at
once (GradFn.batch, issue 16), every cell a vector of W values; and, from the same classes,
rvm.run_batch's whole runs over W rows (generate(run=1): the forward run alone; run=-1: the
backward run from main's end, no rules, no adjoints; rvm/_batch.pxi: run_group).

The code is codegen.py's (the same rows, checks, calls and adjoint rules; see its docstring;
each value update the op's lane form, isa/cgen.py's rvm_lop_<name>: the scalar op's words,
its targets stored whatever happens and a flag where the scalar op traps, since a failed lane
discards its group) with every cell, adjoint and value-stack slot held as W lanes, lane-minor: row
j's value of cell c is st->mem[c * W + j] (its adjoint st->adj[c * W + j], stack slot s's
st->stack[s * W + j]), so that each row's update is one loop over the lanes that gcc
vectorizes (elementwise IEEE + - * / sqrt, the same correctly rounded numbers; a library
function such as exp stays the scalar libm call per lane).  Each lane does the scalar code's
arithmetic in its order, so every row's values, gradient and steps are those of its single
call, bit for bit.

Control flow and addresses are shared by the W rows (one program counter, one frame pointer,
one value-stack pointer): a condition is evaluated on every lane and the group gives up
(BAIL) when the lanes disagree; an index gives up unless its cell's W values are one value;
the checks on addresses (bounds, alias, call arguments) are made once, and those codegen's
interval analysis proves (rvm/native/intervals.py) are left out, as in the scalar code: each
function checks what the analysis starts from at entry in every lane (guards), and a check
the analysis narrows on or decides (an int assert on a cell it follows or on two constants,
Intervals.reads; a zero check of a cell it follows) gives up at once where a lane fails it.
A check on a lane's data (an arithmetic trap, a cell that must be zero, an assertion) sets
the lane's bad_ word, which the function reads at every taken
jump and at its return, and gives up there (until then the lane computes on: every address
is still checked and a loop still ends).  The caller then runs each row of the group through
the scalar native code (rvm/_batch.pxi: grad_group, grad_row), which reports a row's trap as
today.

Cells in registers: the cells codegen would keep in C locals (named directly, out of reach
of every index and parameter) are C locals here too.  An int cell that holds one value in
every lane (Uniform: no batch input reaches it, e.g. a loop counter or an index computed
from constants) is one C scalar: its rows run once for the group (scalar_row, codegen's
scalar code), and it indexes and branches without a check that the lanes agree.  Any other
is a C array of its W lanes (and with the rules its adjoints'), which gcc keeps in a vector
register across rows.  Both go to memory before a call and at the return, as codegen's.
The sweep's rules skip the adjoints no varied cell reads (activity.py, seeded with every
differentiable global: the library serves every wrt), into a per-lane sink.

The loops are `omp simd` (-fopenmp-simd: gcc vectorizes them whatever its cost model says,
and no lane depends on another) under tangent.LANE_OPTIONS and FLAGS.
"""
from __future__ import annotations

from isa.cgen import distinct_pairs, has_body, lane_name, operand_names
from isa.derivatives import PF_FN1, PF_FN2, PF_MUL, PF_NONE, PF_ONE, RULES, pf_id
from isa.program import MODE_G, MODE_L, MODE_N, MODE_P, MODE_X
from isa.table import OPS
from isa.types import INT

from .activity import Activity
from .codegen import (
    _COVERED,
    ABI_FN,
    ANY,
    PRELUDE,
    Ref,
    Unsupported,
    _Fn,
    functions,
    lit,
    runs,
)
from .tangent import LANE_OPTIONS

# batch rows per group: 8 doubles are one AVX-512 vector, two AVX2 ones
W = 8

# gcc takes these from the command line only (in `#pragma GCC optimize` it still gave sqrt an
# errno branch, which kept the rows' loops from vectorizing): no errno, so sqrt is the one
# instruction (the same correctly rounded value) and a libm call a plain call; no trapping
# math, so a loop's branches become selects (no flag is read).  Neither changes a number.
FLAGS = ("-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd")

# AVX-512: one 8-lane row per vector (gcc's tuning for these CPUs prefers 256 bits; T6 per
# point, one thread: 512 bits 1.6x faster)
TARGET = """\
#if defined(__AVX512F__)
#pragma GCC target("prefer-vector-width=512")
#endif
"""

J = "__j"                       # the lane index in a row's loop
LOOP = f'_Pragma("omp simd") for (i64 {J} = 0; {J} < W; {J}++)'

HEAD = f"""\
#define W {W}
/* rvm_uniform: the W lanes of the cell at p hold one value (an index, a loop counter, a
   condition); rvm_failed: some lane of bad_ is not 0 (a lane's check failed).  With AVX-512
   or AVX2 each is a few vector instructions (an |= chain over the lanes, read back from a
   vector store, cost more than the row it checked) */
#if defined(__AVX512F__) && W % 8 == 0
#include <immintrin.h>
static inline int rvm_uniform(const i64* p) {{
    __m512i b = _mm512_set1_epi64(p[0]), d = _mm512_setzero_si512();
    for (int k = 0; k < W; k += 8)
        d = _mm512_or_si512(d, _mm512_xor_si512(_mm512_loadu_si512(p + k), b));
    return _mm512_test_epi64_mask(d, d) == 0;
}}
static inline int rvm_failed(const i64* p) {{
    __m512i d = _mm512_setzero_si512();
    for (int k = 0; k < W; k += 8) d = _mm512_or_si512(d, _mm512_loadu_si512(p + k));
    return _mm512_test_epi64_mask(d, d) != 0;
}}
#elif defined(__AVX2__) && W == 8
#include <immintrin.h>
static inline int rvm_uniform(const i64* p) {{
    __m256i b = _mm256_set1_epi64x(p[0]);
    __m256i d = _mm256_or_si256(_mm256_xor_si256(_mm256_loadu_si256((const __m256i*)p), b),
                                _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(p + 4)), b));
    return _mm256_testz_si256(d, d);
}}
static inline int rvm_failed(const i64* p) {{
    __m256i d = _mm256_or_si256(_mm256_loadu_si256((const __m256i*)p),
                                _mm256_loadu_si256((const __m256i*)(p + 4)));
    return !_mm256_testz_si256(d, d);
}}
#else
static inline int rvm_uniform(const i64* p) {{
    i64 d = 0; for (int j = 1; j < W; j++) d |= p[j] ^ p[0]; return d == 0;
}}
static inline int rvm_failed(const i64* p) {{
    i64 d = 0; for (int j = 0; j < W; j++) d |= p[j]; return d != 0;
}}
#endif
int rvm_lanes_width(void) {{ return W; }}
"""


class LRef(Ref):
    """A cell operand over the lanes: `addr`, its scalar address (None for a constant's
    literal or a parameter's length, the same in every lane); val and the adjoint are lane
    J's lvalues.  `base` is the C pointer to its W lanes (memory, or a promoted cell's local
    array; None for a literal or a cell kept as one scalar); `uni`: it holds one value in
    every lane (Uniform), so lane 0's is the value; `local`: promoted (a C local)."""

    def __init__(self, addr: str | None, val: str, lo: int, hi: int, ptr: str | None = None):
        adj = {"A": f"AV[({addr}) * W + {J}]"} if addr is not None else {}
        super().__init__(ptr or f"(M + {addr})", val, adj, lo, hi)
        self.addr = addr
        self.key: tuple[str, int] | None = None     # a direct G or L cell: ("G", addr)
        self.base: str | None = f"MV + ({addr}) * W" if addr is not None else None
        self.uni = False
        self.local = False

    def lane0(self) -> str:
        return self.val.replace(J, "0")

    def bound(self, k: int, pre: list[str]) -> LRef:
        """The same cell through pointers to its lanes declared in `pre` (q<k>, its values,
        and a<k>, its adjoints): the row's loop then indexes them by the lane alone, an
        address gcc sees is the same in every lane.  (A promoted cell's lanes are C locals
        already.)"""
        if self.local or (self.addr is None and "A" not in self.duals):
            return self
        r = LRef(self.addr, self.val, self.lo, self.hi, self.ptr)
        r.key, r.uni, r.base = self.key, self.uni, self.base
        r.duals = dict(self.duals)
        if self.addr is not None:
            pre.append(f"i64* const q{k} = MV + ({self.addr}) * W;")
            r.val = f"q{k}[{J}]"
        if "A" in self.duals:
            a = self.duals["A"]
            base = a[len("AV["):-len(f" * W + {J}]")]
            pre.append(f"double* const a{k} = AV + {base} * W;")
            r.duals = {"A": f"a{k}[{J}]"}
        r.adj = r.duals["A"]
        return r


class SRef(Ref):
    """A cell of a row run once for every lane (_BatchFn.scalar_row: int arithmetic on cells
    that hold one value in every lane): its value is lane 0's (or the promoted scalar's), and
    a store writes every lane."""

    def __init__(self, r: Ref):
        super().__init__(r.ptr, r.lane0() if isinstance(r, LRef) else r.val, {}, r.lo, r.hi)
        self.base = r.base if isinstance(r, LRef) else None
        self.at, self.iw = r.at, r.iw

    def set(self, word: str) -> str:
        if self.base is None:               # a cell kept as one scalar
            return f"{self.val} = {word};"
        return f"{{ const i64 v_ = {word}; {LOOP} ({self.base})[{J}] = v_; }}"


_BY_CODE = {op.code: op for op in OPS}
_STACK = ("stack",)


class Uniform:
    """Which cells hold one value in every lane of a group, wherever the code runs: the
    cells no batch row's input reaches.  A batch's rows differ only in the input globals'
    words; every lane starts from the same static image, frames and stack, and runs the same
    rows (control is shared: the lanes give up where a branch would part them), so a cell
    that only int arithmetic on such cells ever writes (and immediates, constants,
    parameter lengths) holds one value.  Flow-insensitive, over activity.py's locations (a
    global or local array, a parameter's every binding, the value stack): a location is not
    uniform if it is an input, or some row writes it from a cell that may not be, or from a
    non-int operand (a conversion, a comparison of floats), or with a push or pop of such a
    value.  Such an int cell needs no per-lane words: the lanes keep it as one C scalar, its
    rows run once (scalar_row), and it indexes and branches without the check that the
    lanes agree.

    back: the rows are backward runs from main's end (rvm.run_batch(..., reverse=True)),
    which differ in the output globals' words; a push run backward pops into its cell and a
    pop pushes it, so each also moves a word the other way."""

    def __init__(self, program, act: Activity, back: bool = False):
        self.act = act
        non: set = {("G", i) for i, g in enumerate(program.globals)
                    if (g.is_output if back else g.is_input)}
        rows = []
        for fi, f in enumerate(program.functions):
            for row in program.code[f.begin:f.end + 1]:
                op = _BY_CODE[int(row[0])]
                if op.family in ("push", "pop") or has_body(op):
                    cells = [(k, act.locs(fi, int(row[1 + i])), op.operand_types[i])
                             for i, k in enumerate(op.operands) if k in ("y", "a")]
                    rows.append((op, cells))
        changed = True
        while changed:
            changed = False
            for op, cells in rows:
                if op.family in ("push", "pop"):
                    cell, stack = cells[0][1], frozenset((_STACK,))
                    moves = [(cell, stack), (stack, cell)] if back else \
                        [(cell, stack) if op.family == "push" else (stack, cell)]
                else:
                    src = frozenset().union(*(loc for _, loc, _ in cells))
                    dst = frozenset().union(*(loc for k, loc, _ in cells if k == "y"))
                    if not all(t == INT for _, _, t in cells):
                        src = src | {None}             # a non-int operand: not uniform
                        non.add(None)
                    moves = [(src, dst)]
                for src, dst in moves:
                    if not src.isdisjoint(non) and not dst <= non:
                        non |= dst
                        changed = True
        self.non = frozenset(non)

    def uniform(self, fi: int, w: int) -> bool:
        """Does operand word w of function fi name only cells that hold one value?"""
        if (w & 7) == MODE_N:
            return True
        locs = self.act.locs(fi, w)
        return bool(locs) and locs.isdisjoint(self.non)


def fill(text: str, refs: list[Ref]) -> str:
    """A lane statement with its cells' lane words for @0@, @1@, ... and the lane for @J@."""
    for i, r in enumerate(refs):
        text = text.replace(f"@{i}@", r.val)
    return text.replace("@J@", J)


def lane_val(addr: str) -> str:
    return f"MV[({addr}) * W + {J}]"


class _BatchFn(_Fn):
    """A function's C over W batch rows: rules False, the forward run; True, the sweep with
    the adjoint rules."""

    MODES = {False: ((), "w"), True: (("A",), "wa")}
    # which cells hold one value in every lane (generate() sets it: Uniform)
    uni_cells: Uniform

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # codegen's promotable cells (named directly, out of reach of every index and
        # parameter), less the constants (literals already): an int cell that holds one value
        # (Uniform) and only scalar rows write is one C scalar (`one`); any other a C array of
        # its W lanes (`vec`, and with the rules its adjoints'), which gcc keeps in a vector
        # register across the rows, as the scalar code keeps a cell in a register
        cand = {k for k in self.promoted if not (k[0] == "G" and k[1] in self.consts)}
        self.promoted, self.dbl = set(), set()
        self.one = self._scalars(cand)
        self.vec = cand - self.one
        self.nc = self.nq = 0
        self.known: set[tuple[str, int]] = set()     # int cells known uniform (uniform())
        self._targets: set[int] | None = None

    def _scalars(self, cand: set) -> set:
        """The candidates kept as one C scalar: uniform, never pushed or popped, and written
        only by scalar rows (or checked by a scope row)."""
        out, bad = set(), set()
        key_of = {MODE_G: "G", MODE_L: "L"}
        for row in self.code[self.begin:self.end + 1]:
            c = [int(v) for v in row]
            op = self.ops[c[0]]
            for i, k in enumerate(op.operands):
                if k not in ("y", "a"):
                    continue
                w = c[1 + i]
                words = [(w, k)]
                if (w & 7) == MODE_X:
                    words = [(self.p.xtab[w >> 3].index, "a")]      # its index is read
                for u, kind in words:
                    if (u & 7) not in key_of:
                        continue
                    key = (key_of[u & 7], u >> 3)
                    if key not in cand:
                        continue
                    out.add(key)
                    if not self.uni_cells.uniform(self.fi, u) or op.family in ("push", "pop") \
                            or (kind == "y" and op.family not in ("alloc", "free") and
                                not self.scalar_op(op, c)):
                        bad.add(key)
        return out - bad

    def scalar_op(self, op, c) -> bool:
        """A row run once for all lanes: int arithmetic (a body, no adjoint rule to run) whose
        every cell holds one value in every lane."""
        if not has_body(op) or (self.rules and RULES[op.name] is not None):
            return False
        return all(t == INT and self.uni_cells.uniform(self.fi, c[1 + i])
                   for i, (k, t) in enumerate(zip(op.operands, op.operand_types))
                   if k in ("y", "a"))

    def targets(self) -> set[int]:
        """The rows a jump of this function lands on (in its direction)."""
        if self._targets is None:
            lo, hi = min(self.begin, self.end), max(self.begin, self.end)
            self._targets = {int(self.code[pc][4]) for pc in range(lo, hi + 1)
                             if self.ops[int(self.code[pc][0])].family == "jmp"}
        return self._targets

    # -- operands ----------------------------------------------------------------------------
    def names_of(self, key: tuple[str, int]) -> tuple[str, str, str]:
        """(the promoted cell's scalar or lane array, its adjoints' array, its address)."""
        tag = f"{key[0]}{key[1]}"
        return f"u{tag}" if key in self.one else f"v{tag}", f"g{tag}", self._addr(key)

    def direct(self, w: int) -> Ref:
        m, v = w & 7, w >> 3
        if m == MODE_G or m == MODE_L:
            a = f"{v}" if m == MODE_G else f"fp + {v}"
            lo = v if m == MODE_G else ANY + v
            if m == MODE_G and v in self.consts:     # never written: its word is a literal
                r = LRef(a, lit(self.consts[v]), lo, lo + 1)
                r.duals = {"A": f"AV[({a}) * W + {J}]"}
                r.addr = r.base = None
                return r
            key = ("G" if m == MODE_G else "L", v)
            r = LRef(a, lane_val(a), lo, lo + 1)
            r.key = key
            if key in self.one or key in self.vec:
                name, adj, _ = self.names_of(key)
                r.local = True
                if key in self.one:
                    r.val, r.base, r.uni = name, None, True
                else:
                    r.val, r.base = f"{name}[{J}]", name
                    if self.rules:
                        r.duals = {"A": f"{adj}[{J}]"}
                        r.adj = r.duals["A"]
            return r
        if m == MODE_P:
            lo, hi = self.reach[v]
            return LRef(f"pa[{v}]", lane_val(f"pa[{v}]"), lo, hi)
        raise Unsupported(f"operand mode {m}")

    def cell(self, w: int, pc: int, pre: list[str]) -> tuple[Ref, Ref | None]:
        r, idx = super().cell(w, pc, pre)
        if isinstance(r, LRef) and r.addr is not None and not r.uni:
            r.uni = self.uni_cells.uniform(self.fi, w)
        return r, idx

    def uniform(self, ref: Ref, pc: int, pre: list[str]) -> str:
        """The one value of an int cell read as an address, length or condition (its lane
        0): without a check when the cell always holds one value (Uniform), else with the
        check that every lane holds it unless the cell is known to (self.known: checked
        since the last jump target, call or write that could change it, or written since only
        from such cells by int arithmetic, which every lane does alike)."""
        if not isinstance(ref, LRef) or ref.addr is None:
            return ref.val
        if ref.uni:
            return ref.lane0()
        if ref.key is None or ref.key not in self.known:
            pre.append(f"if (!rvm_uniform({ref.base})) BAIL({pc});")
            if ref.key is not None:
                self.known.add(ref.key)
        return ref.lane0()

    def written(self, op, P: list[Ref], slots: list[str]) -> None:
        """Update self.known after a row that writes its "y" operands: a target keeps (or, a
        pushed cell, gets) one value in every lane when the row is int arithmetic on cells
        known to hold one; a write through a parameter or an index may change any global
        (and, an index into this frame, any local)."""
        ys = [r for r, k in zip(P, slots) if k == "y"]
        srcs = [r for r, k in zip(P, slots) if k == "a"]
        ints = has_body(op) and all(t == INT for t, k in zip(op.operand_types, op.operands)
                                    if k in ("y", "a"))
        keep = ints and all(getattr(r, "key", None) in self.known or
                            getattr(r, "addr", "") is None for r in srcs + ys)
        for r in ys:
            key = getattr(r, "key", None)
            if key is None:
                self.known = {k for k in self.known if k[0] == "L"} \
                    if "pa[" in r.ptr or "fp" not in r.ptr else set()
            elif op.family == "push":
                self.known.add(key)
            elif not keep:
                self.known.discard(key)

    def length_ref(self, k: int) -> Ref:
        return LRef(None, f"pl[{k}]", -3, -2, ptr=f"(pl + {k})")

    def index_value(self, idx: Ref, pc: int, pre: list[str]) -> str:
        return self.uniform(idx, pc, pre)       # one index for every lane, checked

    def indexed(self, a: str, lo: int, hi: int) -> Ref:
        return LRef(a, lane_val(a), lo, hi)

    # -- rows --------------------------------------------------------------------------------
    def lanes(self, stmts: list[str]) -> str:
        """The statements in a loop over the lanes.  A lane's failed check (a trap code, a
        cell not zero) goes into its bad_, which the function reads at each taken jump and
        at its return: until then a lane that failed computes on (what it computes is
        thrown away), every address stays checked, and the loop has no branch out."""
        if not stmts:
            return ""
        return f"{LOOP} {{ double cs[2], dz = 0.0; (void)cs; (void)dz; {' '.join(stmts)} }}"

    def bind(self, refs: list[Ref], pre: list[str]) -> list[Ref]:
        out = []
        for r in refs:
            if isinstance(r, LRef):
                self.nq += 1
                r = r.bound(self.nq, pre)
            out.append(r)
        return out

    def cond(self, c, pc: int, pre: list[str]) -> str:
        """The condition's one value over the lanes: lane 0's, after the check that every
        lane agrees (a group whose rows branch differently gives up)."""
        if (c[1] & 15) == 0:
            return "1"
        a, _ = self.cell(int(c[2]), pc, pre)
        b, _ = self.cell(int(c[3]), pc, pre)
        if (int(c[1]) >> 4) & 3 == int(INT) and all(
                isinstance(r, LRef) and (r.addr is None or r.key is not None or r.uni)
                for r in (a, b)):
            # ints: the cells' one values (checked, or known) compared once
            va, vb = self.uniform(a, pc, pre), self.uniform(b, pc, pre)
            return self.compare(int(c[1]), Ref(a.ptr, va, {}, a.lo, a.hi),
                                Ref(b.ptr, vb, {}, b.lo, b.hi))
        a, b = self.bind([a, b], pre)
        e = self.compare(int(c[1]), a, b)
        if J not in e:
            return e
        self.nc += 1
        k = f"c{self.nc}"
        pre.append(f"i64 {k}[W]; {LOOP} {k}[{J}] = ({e}); "
                   f"if (!rvm_uniform({k})) BAIL({pc});")
        return f"{k}[0]"

    def frame_check(self, pc: int) -> str:
        """At the return: no lane failed a check, and the frame is zero in every lane: the
        cells kept in locals on the locals (their words: a -0.0 is not zero), the others on
        the memory, a run of them at a time (as codegen's)."""
        out = [f"if (rvm_failed(bad_)) BAIL({pc});"]
        ones = [self.names_of(("L", k))[0] for k in range(self.fs) if ("L", k) in self.one]
        vecs = [self.names_of(("L", k))[0] for k in range(self.fs) if ("L", k) in self.vec]
        if ones:
            out.append(f"if ({' | '.join(ones)}) BAIL({pc});")
        if vecs:
            lanes = " | ".join(f"{v}[{J}]" for v in vecs)
            out.append(f'{{ i64 z_ = 0; _Pragma("omp simd reduction(|:z_)") '
                       f"for (i64 {J} = 0; {J} < W; {J}++) z_ |= {lanes}; "
                       f"if (z_) BAIL({pc}); }}")
        run: list[int] = []
        for k in range(self.fs + 1):
            if k < self.fs and ("L", k) not in self.one and ("L", k) not in self.vec:
                run.append(k)
                continue
            if run:
                out.append(f"if (rvm_any(MV + (fp + {run[0]}) * W, {len(run)} * W)) "
                           f"BAIL({pc});")
            run = []
        return " ".join(out)

    def row(self, pc: int) -> None:
        c = [int(v) for v in self.code[pc]]
        op = self.ops[c[0]]
        fam = op.family
        if fam not in _COVERED:
            raise Unsupported(f"pc {pc}: `{op.name}`")
        if pc in self.targets():               # control may come from elsewhere
            self.known = set()
        if fam in ("end", "begin", "join"):
            super().row(pc)                    # (cond, frame_check: the lanes' forms)
            return
        if fam == "jmp":                       # a taken jump reads bad_ (a loop ends)
            t = c[4]
            if not (min(self.begin, self.end) < t <= max(self.begin, self.end)):
                raise Unsupported(f"pc {pc}: a jump out of the function")
            pre: list[str] = []
            cond = self.cond(c, pc, pre)
            target = f"J{t}" if self.ops[int(self.code[t][0])].family == "join" else f"L{t}"
            self.emit(f"L{pc}: {{ n++; {' '.join(pre)} if ({cond}) {{ "
                      f"if (rvm_failed(bad_)) BAIL({pc}); POLL({t}); goto {target}; }} }}")
            return
        if fam in ("call", "uncall"):
            self.emit(f"L{pc}: {{ n++; " + " ".join(self.call(c, fam == "call", pc)) + " }")
            self.known = set()                 # the callee may write any global, any argument
            return
        if fam == "assert":                    # every lane's condition holds
            pre = []
            if (c[1] & 15) == 0:
                self.emit(f"L{pc}: {{ n++; }}")
                return
            if self.iv is not None and self.iv.reads(c):
                # the intervals narrow on it (or decide it: two constants), and a check they
                # drop may rest on that: the group gives up at once where a lane fails (cond:
                # the lanes' one truth)
                cond = self.cond(c, pc, pre)
                self.emit(f"L{pc}: {{ n++; {' '.join(pre)} if (!({cond})) BAIL({pc}); }}")
                return
            a, _ = self.cell(int(c[2]), pc, pre)
            b, _ = self.cell(int(c[3]), pc, pre)
            a, b = self.bind([a, b], pre)
            e = self.compare(int(c[1]), a, b)
            self.emit(f"L{pc}: {{ n++; {' '.join(pre)} "
                      f"{self.lanes([f'bad_[{J}] |= !({e});'])} }}")
            return
        pre = []
        cslots = [1 + i for i, k in enumerate(op.operands) if k in ("y", "a")]
        slots = [op.operands[s - 1] for s in cslots]
        ptr, idx = [], []
        for s in cslots:
            p, i = self.cell(c[s], pc, pre)
            ptr.append(p)
            idx.append(i)
        body = list(pre)
        for s, k in enumerate(slots):          # an indexed operand's index is not written
            if k == "y":
                for i in idx:
                    if i is not None and ptr[s].same(i) is not None:
                        body.append(f"if ({ptr[s].same(i)}) BAIL({pc});")
        if self.scalar_op(op, c):              # once for every lane: codegen's scalar row
            body += self.value(op, c, [SRef(r) for r in ptr], pc)
            self.written(op, ptr, slots)
            self.emit(f"L{pc}: {{ n++; " + " ".join(body) + " }")
            return
        p0 = ptr[0] if ptr else None
        if fam in ("alloc", "free") and isinstance(p0, LRef) and p0.local and p0.base is None:
            body.append(f"if ({p0.val} != 0) BAIL({pc});")     # a scalar cell's check
            if self.rules:
                body.append(self.lanes(self.rule(op, c, self.bind(ptr, body), pc)))
            self.emit(f"L{pc}: {{ n++; " + " ".join(body) + " }")
            return
        scalar, lane, post = self.lane_value(op, c, ptr, pc)
        body += scalar
        P = self.bind(ptr, body)
        lane = [fill(ln, P) for ln in lane]
        if self.rules:
            lane += self.rule(op, c, P, pc)
        body.append(self.lanes(lane))
        body += post
        if fam in ("alloc", "free", "pop") and self.tracked(c[1]):
            # the intervals take the cell as 0 after its check: a failed lane gives up here
            body.append(f"if (rvm_failed(bad_)) BAIL({pc});")
        self.written(op, ptr, slots)
        self.emit(f"L{pc}: {{ n++; " + " ".join(body) + " }")

    def lane_value(self, op, c, P, pc: int) -> tuple[list[str], list[str], list[str]]:
        """(scalar C before the lane loop, the lane loop's statements, scalar C after it) of
        the row's value update: codegen's value() per lane, a failed check or a trapping
        update setting its bad_.  The lane statements name the cells @0@, @1@, ... and the
        lane @J@ (filled in by row, `fill`)."""
        if has_body(op):
            names = operand_names(op)
            kinds = list(op.operands)
            cell = dict(zip([n for n, k in zip(names, kinds) if k in ("y", "a")], P))
            slot = {n: f"@{i}@" for i, n in
                    enumerate(n for n, k in zip(names, kinds) if k in ("y", "a"))}
            scalar = []
            for p, q in distinct_pairs(op):          # the dispatch loop's alias trap
                a, b = cell[p], cell[q]
                same = a.same(b)
                if same is not None and a.at and b.at and a.at[0] == b.at[0] and \
                        a.iw is not None and b.iw is not None and self.iv is not None and \
                        self.iv.differ(pc, a.iw, b.iw):
                    self.proved += 1                 # indexes never equal there (codegen's)
                    continue
                if same is not None:
                    scalar.append(f"if ({same}) BAIL({pc});")
            decl, args, store = [], [], []
            for i, (kind, name) in enumerate(zip(kinds, names)):
                if kind == "y":
                    decl.append(f"i64 w_{name} = {slot[name]};")
                    args.append(f"&w_{name}")
                    store.append(f"{slot[name]} = w_{name};")
                elif kind == "a":
                    args.append(slot[name])
                else:
                    args.append(lit(c[i + 1]))
            args += [str(self.F), "cs"]
            return scalar, ["{ " + " ".join(decl) + f" bad_[@J@] |= {lane_name(op)}"
                            f"({', '.join(args)}); " + " ".join(store) + " }"], []
        if op.family == "push":                 # the cell's words onto the stack, the cell 0
            return ([f"if (st->sp >= st->stack_cap) BAIL({pc}); const i64 sp_ = st->sp++; "
                     "if (st->sp > st->peak_sp) st->peak_sp = st->sp;"],
                    ["SV[sp_ * W + @J@] = @0@; @0@ = 0;"], [])
        if op.family == "pop":                  # a zero cell takes the top words
            return ([f"if (st->sp == 0) BAIL({pc}); const i64 sp_ = --st->sp;"],
                    ["bad_[@J@] |= @0@ != 0; @0@ = SV[sp_ * W + @J@];"], [])
        if op.family in ("alloc", "free"):
            return [], ["bad_[@J@] |= @0@ != 0;"], []
        if op.family == "nop":
            return [], [], []
        raise Unsupported(f"pc {pc}: `{op.name}` has no C case")   # pragma: no cover

    def rule(self, op, c, P, pc: int) -> list[str]:
        """codegen's adjoint rule per lane; the update rules' adjoint steps branch-free
        (rvm_ad_sub_nz: the same numbers as rvm_ad_mul and rvm_ad_update, in their order),
        so that the loop vectorizes."""
        rule = RULES[op.name]
        if rule is None:
            return []
        act = self.active(op, c, pc, rule.kind in ("scope", "move"))
        if not any(act):
            return []
        # as codegen's: an adjoint no varied cell reads goes to the lane's sink dz (lanes())
        D = [r.adj if a or i == 0 or rule.kind in ("swap", "rot") and i < 2 else "dz"
             for i, (r, a) in enumerate(zip(P, act))]
        s = rule.sign
        if rule.kind == "move":                 # the adjoint goes with the word
            if op.family == "push":
                return [f"rvm_ad_push(&{D[0]}, &SA[sp_ * W + {J}]);"]
            return [f"rvm_ad_pop(&SA[sp_ * W + {J}], &{D[0]});"]
        if rule.kind != "update":
            return super().rule(op, c, P, pc)
        pf = pf_id(op)
        if pf in (PF_NONE, PF_ONE):
            return super().rule(op, c, P, pc)
        if not any(act[1:]):
            return []
        t = op.types[0] if op.types else None
        sty = op.types[1] if len(op.types) > 1 else t
        if pf == PF_MUL:
            return [f"{{ const double yb = {D[0]}, va = {self.real(P[1], sty)}, "
                    f"vb = {self.real(P[2], sty)}; rvm_ad_sub_nz({s}.0, vb, yb, &{D[1]}); "
                    f"rvm_ad_sub_nz({s}.0, va, yb, &{D[2]}); }}"]
        if pf >= PF_FN2:
            ib = 2
        elif pf >= PF_FN1:
            ib = 1
        else:
            ib = 2
        return [f"{{ rvm_dual dx0, dx1, dd[2]; dx0.v = {self.real(P[1], sty)}; dx0.t = 0.0; "
                f"dx1.v = {self.real(P[ib], sty)}; dx1.t = 0.0; "
                f"{self.partials_inline(op, c)} const double yb = {D[0]}; "
                f"if (np > 0) rvm_ad_sub_nz({s}.0, dd[0].v, yb, &{D[1]}); "
                f"if (np > 1) rvm_ad_sub_nz({s}.0, dd[1].v, yb, &{D[ib]}); }}"]

    # -- the intervals' proofs and the narrowed clears, in the lane layout ------------------
    def analysed(self) -> bool:
        """The lanes take codegen's interval proofs (guards: the entry checks over every lane)
        and its narrowed frame clears (frame_clear: every lane of each span)."""
        return True

    def frame_clear(self, arr: str, nfp: str, fs: int, spans: list[tuple[int, int]]) -> str:
        assert arr == "A"
        return " ".join(f"memset(AV + ({nfp} + {lo}) * W, 0, {hi - lo} * W * sizeof(double));"
                        for lo, hi in spans)

    def guards(self, pc: int) -> list[str]:
        """codegen's entry checks of what the intervals start from, in every lane (a lane that
        breaks one hands the group back to the scalar path, which checks its own row): the
        frame's int cells zero and the globals in the entry facts' ranges.  (Before locals():
        on M, the lanes' memory, cell c's lane j at c * W + j.)"""
        if self.iv is None or not self.proved:
            return []
        out = []
        for k in self.iv.zero_cells():
            out.append(f"if (rvm_any(M + (fp + {k[1]}) * W, W)) BAIL({pc});")
        for (_, a), (lo, hi) in sorted(self.iv.entry_facts.items()):
            out.append(f"{{ i64 b_ = 0; for (i64 {J} = 0; {J} < W; {J}++) "
                       f"b_ |= (M[{a} * W + {J}] < {lit(lo)}) | (M[{a} * W + {J}] > {lit(hi)}); "
                       f"if (b_) BAIL({pc}); }}")
        return out

    def tracked(self, w: int) -> bool:
        """Is operand word w a cell the intervals follow (a fact about it may rest on a check
        of this row)?"""
        return self.iv is not None and isinstance(self.iv.operand(w), tuple)

    def locals(self) -> list[str]:
        out = ["i64* const MV = st->mem; double* const AV = st->adj; "
               "i64* const SV = st->stack; double* const SA = st->sadj; "
               "(void)MV; (void)AV; (void)SV; (void)SA; "
               "i64 bad_[W]; memset(bad_, 0, sizeof bad_);"]
        for k in sorted(self.one):
            name, _, a = self.names_of(k)
            out.append(f"i64 {name} = MV[({a}) * W];")
        for k in sorted(self.vec):
            name, adj, a = self.names_of(k)
            out.append(f"i64 {name}[W] __attribute__((aligned(64))); "
                       f"memcpy({name}, MV + ({a}) * W, sizeof {name});")
            if self.rules:
                out.append(f"double {adj}[W] __attribute__((aligned(64))); "
                           f"memcpy({adj}, AV + ({a}) * W, sizeof {adj});")
        return out

    def write_back(self) -> str:
        """The promoted cells' lanes (and with the rules their adjoints) to memory: before a
        call and at the return; a scalar cell's one value into each of its lanes."""
        out = []
        for k in sorted(self.one):
            name, _, a = self.names_of(k)
            out.append(f"{{ i64* const b_ = MV + ({a}) * W; {LOOP} b_[{J}] = {name}; }}")
        for k in sorted(self.vec):
            name, adj, a = self.names_of(k)
            out.append(f"memcpy(MV + ({a}) * W, {name}, sizeof {name});")
            if self.rules:
                out.append(f"memcpy(AV + ({a}) * W, {adj}, sizeof {adj});")
        return " ".join(out)

    def reload(self) -> str:
        """The promoted cells again after a call (the callee may have changed them)."""
        out = []
        for k in sorted(self.one):
            name, _, a = self.names_of(k)
            out.append(f"{name} = MV[({a}) * W];")
        for k in sorted(self.vec):
            name, adj, a = self.names_of(k)
            out.append(f"memcpy({name}, MV + ({a}) * W, sizeof {name});")
            if self.rules:
                out.append(f"memcpy({adj}, AV + ({a}) * W, sizeof {adj});")
        return " ".join(out)


def entries(program, variants: list[tuple[str, str, bool, str]],
            spans: list[tuple[int, int]]) -> str:
    """codegen.entries over the lanes: each entry clears main's frame adjoints `spans` (all
    W lanes: the cells the sweep reads, activity.frame_cells) when asked, enters main and
    adds the steps."""
    fp = program.n_static
    out = ["static const i64 rvm_no_params[1] = {0};"]
    for name, fn, clear, what in variants:
        out.append(f"i64 {name}(rvm_ns* st) {{   /* {what} */\n"
                   "    i64 n = st->steps + 1, rc;\n"
                   "    st->stack_low = rvm_stack_low();\n" +
                   "".join(f"    memset(st->adj + ({fp} + {lo}) * W, 0, "
                           f"{hi - lo} * W * sizeof(double));\n" for lo, hi in spans
                           if clear) +
                   f"    rc = {fn}(st, {fp}, rvm_no_params, rvm_no_params, 1, 0, &n);\n"
                   "    st->steps = n; return rc;\n}")
    return "\n" + "\n".join(out) + "\n"


def generate(program, run: int = 0) -> str:
    """The C of `program`'s gradient over W batch rows: rvm_native_forward_w (the forward run,
    W rows at once, from the lane state the caller set up) and rvm_native_backward_wa (the
    adjoint sweep from main's end), and rvm_lanes_width() (W).  run=1: rvm.run_batch's
    library instead, rvm_native_run_w, the forward run alone (the same code as the
    gradient's, without a sweep); run=-1: rvm_native_run_w is the backward run from main's
    end (codegen's rvm_native_run_backward over W rows: no rules, no adjoints), for rows
    that differ in their outputs.  Raises Unsupported for what codegen.py does not cover."""
    main = program.main
    # the sweep's rules skip what carries no derivative of any differentiable global (the
    # library serves every wrt); the lanes keep the cells that hold one value as scalars
    act = Activity(program)
    cls = type("_Lanes", (_BatchFn,), {"uni_cells": Uniform(program, act, back=run < 0)})
    if run:
        protos, bodies = functions(program, {(main, run, False): "main_r"}, cls, activity=act)
        return TARGET + LANE_OPTIONS + PRELUDE + HEAD + ABI_FN + "\n".join(protos) + "\n" + \
            "".join(bodies) + entries(program, [
                ("rvm_native_run_w", "main_r", False,
                 f"run main {'forward' if run > 0 else 'backward from its end'}, W rows")], [])
    protos, bodies = functions(program, {(main, 1, False): "main_fw", (main, -1, True): "main_bwa"},
                               cls, activity=act)
    # LANE_OPTIONS (tangent.py): O3 vectorizes each row's loop over the lanes; no
    # reassociation, -ffp-contract=off stays, so every lane's numbers are the scalar code's
    return TARGET + LANE_OPTIONS + PRELUDE + HEAD + ABI_FN + "\n".join(protos) + "\n" + \
        "".join(bodies) + entries(program, [
            ("rvm_native_forward_w", "main_fw", False, "run main, W rows"),
            ("rvm_native_backward_wa", "main_bwa", True, "from main's end with the rules on")],
            runs(act.frame_cells(main)))
