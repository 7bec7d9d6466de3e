"""Program -> C: the forward run and the adjoint sweep of a program as straight C code.

Every instruction of the program's functions becomes a few lines of C that call the same
arithmetic the interpreter calls (rvm/_arith.h for values, rvm/_deriv.h for the partials), in
the same order, so results are bit for bit those of rvm/_core.pyx; control flow becomes
gotos, a jmp's paired join is checked on both of its edges.  The instruction table (isa/table
and isa/derivatives) decides what each row is: its value update, its inverse (the sweep runs
the inverse-mapped rows, like the interpreter) and its differentiation rule.

The generated code does not report errors.  Anything the interpreter would trap on (a bounds,
alias, come-from, ancilla or arithmetic trap) makes it return BAIL with nothing promised about
the state; the caller then runs the interpreter from the start, which reports it with its
usual detail.  Like the interpreter's fast path it does not count non-finite intermediate
derivatives: a gradient that ends non-finite sends the call to the general path, which
reports where it became so.  Calls become C calls (do_call's argument checks on the caller's
side, the callee's frame at the caller's frame top); programs with the value stack or traces
raise Unsupported and stay interpreted.
"""
from __future__ import annotations

import numpy as np

from isa.derivatives import PF_DIV, PF_FN1, PF_FN2, PF_MUL, PF_NONE, PF_ONE, RULES, pf_id
from isa.table import INVERSE, OPS
from isa.types import FIXED, FLOAT, INT, LNS

# return codes of the generated functions (rvm/_core.pyx keeps the same numbers)
DONE, BAIL, STOPPED = 0, 2, 3
ABI = 3                   # bump when the state struct or the entry points change

MODE_G, MODE_L, MODE_P, MODE_X, MODE_N = range(5)
_TY = {INT: 0, FIXED: 1, LNS: 2, FLOAT: 3}

# families the generator translates; anything else makes the program Unsupported
_COVERED = {"add", "sub", "addi", "subi", "inc", "dec", "addmul", "submul", "adddiv", "subdiv",
            "xor", "xori", "xorand", "neg", "not", "rotl", "rotr", "swap", "rot", "irot",
            "addfn", "subfn", "addfn2", "subfn2", "mul", "div", "cvt", "uncvt", "alloc", "free",
            "assert", "nop", "jmp", "join", "begin", "end", "call", "uncall"}
_SIGNED = {"sub": -1, "subi": -1, "submul": -1, "subdiv": -1, "subfn": -1, "subfn2": -1,
           "uncvt": -1, "div": -1, "dec": -1}

PRELUDE = """\
#include <stdint.h>
#include <string.h>
#include <math.h>
#include "_arith.h"
#include "_deriv.h"
typedef int64_t i64;
typedef uint64_t u64;
/* rvm/_core.pyx NativeState: keep in step (ABI) */
typedef struct rvm_ns {
    i64* mem; double* adj;
    i64 steps;                      /* steps run */
    i64 budget;                     /* poll() when steps reach it, at a taken jump */
    int (*poll)(struct rvm_ns*);    /* Ctrl-C? (nonzero: stop) and a new budget */
    i64 n_mem, max_depth, pt_cap;   /* the machine's limits (over them: the interpreter) */
    i64 peak_ftop, peak_depth;      /* the deepest frame top and call depth reached */
    i64 pc;                         /* where it gave up */
} rvm_ns;
#define BAIL(at) do { st->pc = (at); *np = n; return 2; } while (0)
#define POLL(at) do { if (n >= st->budget) { st->budget = n + ((i64)1 << 24); \
    if (st->poll(st)) { st->pc = (at); *np = n; return 3; } } } while (0)
/* some cell of p[0..n) is not zero (the frame check at return), four words at a time */
static inline int rvm_any(const i64* p, i64 n) {
    u64 a = 0, b = 0, c = 0, d = 0; i64 k = 0;
    for (; k + 4 <= n; k += 4) { a |= (u64)p[k]; b |= (u64)p[k + 1]; c |= (u64)p[k + 2]; d |= (u64)p[k + 3]; }
    for (; k < n; k++) a |= (u64)p[k];
    return (a | b | c | d) != 0;
}
int rvm_native_abi(void) { return %d; }
""" % ABI

# deeper native calls give up (the C stack is not the machine's control stack)
MAX_NATIVE_DEPTH = 2000


class Unsupported(Exception):
    """The program uses something the generator does not translate (the reason says what)."""


def lit(w: int) -> str:
    """A 64-bit word as a C literal (INT64_MIN has no plain decimal literal)."""
    return f"((i64)0x{w & 0xFFFFFFFFFFFFFFFF:x}ULL)"


def _ops_by_code() -> dict:
    return {op.code: op for op in OPS}


class Ref:
    """A cell operand in C: its address (for the alias checks), its word and its adjoint (as
    lvalues: a C local for a promoted cell, else the memory and adjoint arrays)."""

    def __init__(self, ptr: str, val: str, adj: str, lo: int, hi: int):
        self.ptr, self.val, self.adj = ptr, val, adj
        self.lo, self.hi = lo, hi               # the addresses it can have: [lo, hi)

    def same(self, other: "Ref") -> str | None:
        """C for `the two are one cell`: None when they never are, "1" when always."""
        if self.hi <= other.lo or other.hi <= self.lo:
            return None
        if self.hi - self.lo == 1 and other.hi - other.lo == 1 and self.ptr == other.ptr:
            return "1"
        return f"{self.ptr} == {other.ptr}"


ANY = 1 << 62                   # the address range of a cell reached through a parameter
MAX_PROMOTED = 512


def _promotable(program, f, rows) -> set[tuple[str, int]]:
    """Cells the generated code of function f may keep in C locals (registers): ("G", addr)
    globals and ("L", offset) frame cells, named directly by some operand and outside every
    array an indexed operand can reach, so that no access through an index sees memory that
    is stale.  A parameter can be bound to any caller cell, so a function with parameters
    keeps no global in a local (its own frame is out of its parameters' reach)."""
    ops = _ops_by_code()
    direct: dict[tuple[str, int], int] = {}
    reach_g: list[tuple[int, int]] = []
    reach_l: list[tuple[int, int]] = []
    key = {MODE_G: "G", MODE_L: "L"}
    for row in rows:
        op = ops[int(row[0])]
        for i, kind in enumerate(op.operands):
            if kind not in ("y", "a"):
                continue
            w = int(row[1 + i])
            if (w & 7) == MODE_X:
                x = program.xtab[w >> 3]
                if (x.base & 7) in key:
                    (reach_g if (x.base & 7) == MODE_G else reach_l).append(
                        (x.base >> 3, (x.base >> 3) + max(x.length, 0)))
                if (x.index & 7) in key:
                    k = (key[x.index & 7], x.index >> 3)
                    direct[k] = direct.get(k, 0) + 1
            elif (w & 7) in key:
                k = (key[w & 7], w >> 3)
                direct[k] = direct.get(k, 0) + 1
    ok = [k for k in direct
          if not any(lo <= k[1] < hi for lo, hi in (reach_g if k[0] == "G" else reach_l))
          and not (k[0] == "G" and f.params)]
    ok.sort(key=lambda k: -direct[k])
    return set(ok[:MAX_PROMOTED])


class _Fn:
    """The C of one function run in one direction (code = its rows as executed), with or
    without the adjoint rules: the forward run runs without, the sweep with."""

    def __init__(self, program, fi: int, code, e: int, rules: bool, name: str, names: dict):
        self.p, self.fi, self.code, self.e, self.rules = program, fi, code, e, rules
        self.name, self.names = name, names       # names: (function, e, rules) -> C name
        self.needed: list[tuple[int, int, bool]] = []   # callee variants this one calls
        f = program.functions[fi]
        self.f = f
        self.main = fi == program.main
        self.begin, self.end, self.fs = f.begin, f.end, f.frame_size
        self.F = program.fraction_bits
        self.ops = _ops_by_code()
        self.promoted = _promotable(program, f, code[f.begin:f.end + 1])
        # constant cells are never written (Core validates it): their words are literals
        self.consts = {c.addr + k: w for c in program.consts for k, w in enumerate(c.values)}
        self.lines: list[str] = []
        self.nx = 0

    # -- operands --------------------------------------------------------------------------
    def local(self, key: tuple[str, int]) -> str:
        return f"r{key[0]}{key[1]}"

    def direct(self, w: int) -> Ref:
        """A G, L or P operand word's cell."""
        m, v = w & 7, w >> 3
        if m == MODE_G or m == MODE_L:
            key = ("G" if m == MODE_G else "L", v)
            a = f"{v}" if m == MODE_G else f"fp + {v}"
            lo = v if m == MODE_G else ANY + v        # frames lie above every static cell
            if key in self.promoted:
                loc = self.local(key)
                return Ref(f"(M + {a})", loc, "d" + loc[1:], lo, lo + 1)
            return Ref(f"(M + {a})", f"M[{a}]", f"A[{a}]", lo, lo + 1)
        if m == MODE_P:
            return Ref(f"(M + pa[{v}])", f"M[pa[{v}]]", f"A[pa[{v}]]", 0, 2 * ANY)
        raise Unsupported(f"operand mode {m}")

    def cell(self, w: int, pc: int, pre: list[str]) -> tuple[Ref, Ref | None]:
        """(the cell, its index cell or None) of the operand word w (opnd/opnd_slow in
        rvm/_core.pyx); an indexed operand reads its index and checks its bounds in `pre`."""
        m = w & 7
        if m == MODE_N:                                # a parameter's length: read-only
            return Ref(f"(pl + {w >> 3})", f"pl[{w >> 3}]", "", -3, -2), None
        if m != MODE_X:
            return self.direct(w), None
        x = self.p.xtab[w >> 3]
        self.nx += 1
        v, ln = f"x{self.nx}", f"n{self.nx}"
        bm, bp = x.base & 7, x.base >> 3
        if bm == MODE_P:
            base, lo, hi = f"pa[{bp}]", 0, 2 * ANY
            length = f"pl[{bp}]" if x.length < 0 else \
                f"({x.length}LL > pl[{bp}] ? pl[{bp}] : {x.length}LL)"
        else:
            base = f"{bp}" if bm == MODE_G else f"fp + {bp}"
            lo = bp if bm == MODE_G else ANY + bp
            hi, length = lo + x.length, f"{x.length}LL"
        if (x.index & 7) == MODE_N:
            idx = None
            ival = f"pl[{x.index >> 3}]"
        else:
            idx = self.direct(x.index)
            ival = idx.val
        pre.append(f"i64 {v} = {ival}; i64 {ln} = {length}; "
                   f"if ((u64){v} >= (u64){ln}) BAIL({pc});")
        return Ref(f"(M + {base} + {v})", f"M[{base} + {v}]", f"A[{base} + {v}]", lo, hi), idx

    # -- rows ------------------------------------------------------------------------------
    def emit(self, s: str) -> None:
        self.lines.append(s)

    def cond(self, c, pc: int, pre: list[str]) -> str:
        if (c[1] & 15) == 0:
            return "1"
        a, _ = self.cell(int(c[2]), pc, pre)
        b, _ = self.cell(int(c[3]), pc, pre)
        cmp, ty = c[1] & 7, (c[1] >> 4) & 3
        if 1 <= cmp <= 6 and not (c[1] & 8) and ty != _TY[LNS]:
            # rvm_compare's relations: C's operators (on doubles, unordered is false except
            # for !=, as RVM_CMP_MASK has it)
            rel = ("", "==", "!=", "<", "<=", ">", ">=")[cmp]
            if ty == _TY[FLOAT]:
                return f"(rvm_w2f({a.val}) {rel} rvm_w2f({b.val}))"
            return f"({a.val} {rel} {b.val})"
        return f"rvm_compare({lit(int(c[1]))}, {a.val}, {b.val})"

    def row(self, pc: int) -> None:
        c = [int(v) for v in self.code[pc]]
        op = self.ops[c[0]]
        fam = op.family
        nxt = pc + self.e
        if fam not in _COVERED:
            raise Unsupported(f"pc {pc}: `{op.name}`")
        if fam == "end":                                 # return (do_return)
            zero = " ".join(f"if ({self.local(k)}) BAIL({pc});" for k in sorted(self.promoted)
                            if k[0] == "L")
            self.emit(f"L{pc}: n++; {self.write_back(frame=False)} {zero} "
                      f"if (rvm_any(M + fp, {self.fs})) BAIL({pc});")
            self.emit("*np = n; return 0;")
            return
        if fam == "begin":                               # never reached legally
            self.emit(f"L{pc}: BAIL({pc});")
            return
        if fam == "join":
            pre: list[str] = []
            cond = self.cond(c, pc, pre)
            body = " ".join(pre)
            self.emit(f"L{pc}: {{ n++; {body} if ({cond}) BAIL({pc}); }} goto L{nxt};")
            self.emit(f"J{pc}: {{ n++; {body} if (!({cond})) BAIL({pc}); }}")
            return
        if fam == "jmp":
            t = c[4]
            if not (min(self.begin, self.end) < t <= max(self.begin, self.end)):
                raise Unsupported(f"pc {pc}: a jump out of the function")
            pre = []
            cond = self.cond(c, pc, pre)
            target = f"J{t}" if self.ops[int(self.code[t][0])].family == "join" else f"L{t}"
            self.emit(f"L{pc}: {{ n++; {' '.join(pre)} if ({cond}) {{ POLL({t}); "
                      f"goto {target}; }} }}")
            return
        if fam in ("call", "uncall"):
            self.emit(f"L{pc}: {{ n++; " + " ".join(self.call(c, fam == "call", pc)) + " }")
            return
        if fam == "assert":
            pre = []
            cond = self.cond(c, pc, pre)
            self.emit(f"L{pc}: {{ n++; {' '.join(pre)} if (!({cond})) BAIL({pc}); }}")
            return
        pre = []
        slots = [k for k in op.operands if k in ("y", "a")]    # they come first in the row
        ptr, idx = [], []
        for s in range(len(slots)):
            p, i = self.cell(c[1 + s], pc, pre)
            ptr.append(p)
            idx.append(i)
        body = list(pre)
        # an indexed operand's index cell must not be one the row writes
        for s, k in enumerate(slots):
            if k == "y":
                for i in idx:
                    if i is not None and ptr[s].same(i) is not None:
                        body.append(f"if ({ptr[s].same(i)}) BAIL({pc});")
        body += self.value(op, c, ptr, pc)
        if self.rules:
            body += self.rule(op, c, ptr, pc)
        self.emit(f"L{pc}: {{ n++; " + " ".join(body) + " }")

    def call(self, c, forward: bool, pc: int) -> list[str]:
        """do_call, the callee and do_return's check on the caller's side: bind the call
        site's arguments (their checks), push the frame, run the callee's variant."""
        p = self.p
        site = p.callsites[c[1]]
        fi = site.func
        g = p.functions[fi]
        npar = len(g.params)
        callee = (fi, 1 if forward else -1, self.rules)
        if callee not in self.names:
            self.names[callee] = f"f{fi}_{'f' if forward else 'b'}{'a' if self.rules else ''}"
            self.needed.append(callee)
        out = [f"i64 cpa[{max(npar, 1)}], cpl[{max(npar, 1)}];",
               f"if (depth + 1 > st->max_depth || depth + 1 > {MAX_NATIVE_DEPTH}) BAIL({pc});",
               f"if ({g.frame_size} > st->n_mem - (fp + {self.fs})) BAIL({pc});",
               f"if ({npar} > st->pt_cap - (ptop + {len(self.f.params)})) BAIL({pc});"]
        xargs = []
        for i, (arg, par) in enumerate(zip(site.args, g.params)):
            pre: list[str] = []
            if arg.length is None:                     # a scalar: the cell it names
                if (arg.word & 7) == MODE_N:
                    raise Unsupported(f"pc {pc}: a parameter length passed by reference")
                ref, idx = self.cell(arg.word, pc, pre)
                out += pre + [f"cpa[{i}] = {ref.ptr} - M; cpl[{i}] = 1;"]
                if (arg.word & 7) == MODE_X:
                    xargs.append((i, arg.word, idx))
                continue
            m, q = arg.word & 7, arg.word >> 3
            if m == MODE_G or m == MODE_L:
                out.append(f"cpa[{i}] = {q if m == MODE_G else f'fp + {q}'}; "
                           f"cpl[{i}] = {arg.length};")
            elif m == MODE_P:
                out.append(f"cpa[{i}] = pa[{q}]; cpl[{i}] = pl[{q}];")
                if arg.length >= 0:
                    out.append(f"if ({arg.length} > cpl[{i}]) BAIL({pc}); cpl[{i}] = {arg.length};")
            else:
                raise Unsupported(f"pc {pc}: argument mode {m}")
            if par.length is not None:
                out.append(f"if (cpl[{i}] != {par.length}) BAIL({pc});")
        written = [i for i, par in enumerate(g.params) if par.written]
        for i, w, idx in xargs:                        # an indexed argument's index cell
            if idx is None:
                continue                               # a parameter length: not a cell
            for j in written:
                out.append(f"{{ i64 ic = {idx.ptr} - M; if (cpa[{j}] <= ic && ic < cpa[{j}] + "
                           f"cpl[{j}]) BAIL({pc}); }}")
        lo, hi = p.n_globals, p.n_static
        for i in written:                              # no constant is written
            out.append(f"if (cpl[{i}] > 0 && cpa[{i}] < {hi} && cpa[{i}] + cpl[{i}] > {lo}) "
                       f"BAIL({pc});")
        for i in range(npar):                          # no two arguments overlap if written
            for j in range(i + 1, npar):
                if i in written or j in written:
                    out.append(f"if (cpl[{i}] > 0 && cpl[{j}] > 0 && cpa[{i}] < cpa[{j}] + "
                               f"cpl[{j}] && cpa[{j}] < cpa[{i}] + cpl[{i}]) BAIL({pc});")
        nfp = f"fp + {self.fs}"
        out.append(self.write_back(frame=True))
        if self.rules:                                 # ad_frame
            out.append(f"memset(A + {nfp}, 0, {g.frame_size} * sizeof(double));")
        out.append(f"if ({nfp} + {g.frame_size} > st->peak_ftop) st->peak_ftop = "
                   f"{nfp} + {g.frame_size};")
        out.append("if (depth + 1 > st->peak_depth) st->peak_depth = depth + 1;")
        out.append(f"{{ i64 rc = {self.names[callee]}(st, {nfp}, cpa, cpl, depth + 1, "
                   f"ptop + {len(self.f.params)}, &n); if (rc) {{ *np = n; return rc; }} }}")
        out.append(self.reload())
        for i, w, idx in xargs:                        # the argument still names that cell
            pre = []
            ref, _ = self.cell(w, pc, pre)
            out += pre + [f"if ({ref.ptr} - M != cpa[{i}]) BAIL({pc});"]
        return out

    def value(self, op, c, P, pc: int) -> list[str]:
        """The row's value update (the interpreter's vm_run branch for it)."""
        fam, F = op.family, self.F
        t = op.types[0] if op.types else None
        s = _SIGNED.get(fam, 1)
        pm = "+" if s > 0 else "-"
        V = [r.val for r in P]                  # the cells' words (lvalues)
        y = V[0] if V else None
        out = []

        def distinct(*pairs):
            for i, j in pairs:
                if P[i].same(P[j]) is not None:
                    out.append(f"if ({P[i].same(P[j])}) BAIL({pc});")

        def trap(expr):
            out.append(f"if ({expr}) BAIL({pc});")

        def float_add(d):
            out.append("{ i64 v; " + f"if (rvm_float_add({y}, {d}, {s}, &v)) BAIL({pc}); "
                       f"{y} = v; }}")

        def int_add(v):
            out.append(f"{y} = (i64)((u64){y} {pm} (u64)({v}));")

        if fam in ("add", "sub"):
            distinct((0, 1))
            float_add(f"rvm_w2f({V[1]})") if t == FLOAT else int_add(f"{V[1]}")
        elif fam in ("addi", "subi"):
            float_add(f"rvm_w2f({lit(c[2])})") if t == FLOAT else int_add(lit(c[2]))
        elif fam in ("inc", "dec"):
            int_add("1")
        elif fam in ("addmul", "submul"):
            distinct((0, 1), (0, 2))
            a, b = f"{V[1]}", f"{V[2]}"
            if t == FLOAT:
                float_add(f"rvm_w2f({a}) * rvm_w2f({b})")
            elif t == FIXED:
                int_add(f"rvm_fixed_mul({a}, {b}, {F})")
            else:
                int_add(f"(u64){a} * (u64){b}")
        elif fam in ("adddiv", "subdiv"):
            distinct((0, 1), (0, 2))
            a, b = f"{V[1]}", f"{V[2]}"
            if t == FLOAT:
                trap(f"rvm_w2f({b}) == 0.0")
                float_add(f"rvm_w2f({a}) / rvm_w2f({b})")
            else:
                div = f"rvm_int_div({a}, {b}, &q)" if t == INT else \
                    f"rvm_fixed_div({a}, {b}, {F}, &q)"
                out.append(f"{{ i64 q; if ({div}) BAIL({pc}); {y} = (i64)((u64){y} {pm} (u64)q); }}")
        elif fam == "xor":
            distinct((0, 1))
            out.append(f"{y} ^= {V[1]};")
        elif fam == "xori":
            out.append(f"{y} ^= {lit(c[2])};")
        elif fam == "xorand":
            distinct((0, 1), (0, 2))
            out.append(f"{y} ^= {V[1]} & {V[2]};")
        elif fam == "not":
            out.append(f"{y} = ~{y};")
        elif fam == "neg":
            if t == FLOAT:
                out.append(f"{y} = (i64)((u64){y} ^ ((u64)1 << 63));")
            elif t == LNS:
                out.append(f"if (({y} >> 1) != ((i64)((u64)1 << 63) >> 1)) {y} ^= 1;")
            else:
                out.append(f"{y} = (i64)((u64)0 - (u64){y});")
        elif fam in ("rotl", "rotr"):
            r = c[2] if fam == "rotl" else (64 - c[2]) & 63
            if r:
                out.append(f"{y} = (i64)(((u64){y} << {r}) | ((u64){y} >> {64 - r}));")
        elif fam == "swap":
            out.append(f"{{ i64 v = {y}; {y} = {V[1]}; {V[1]} = v; }}")
        elif fam in ("rot", "irot"):
            distinct((0, 1), (0, 2), (1, 2))
            inv = int(fam == "irot")
            out.append(f"i64 v = {y}, r = {V[1]};")
            if t == FLOAT:
                trap(f"rvm_rot_float(&v, &r, {V[2]}, {inv}, cs)")
            else:
                trap(f"rvm_rot_fixed(&v, &r, {V[2]}, {F}, {inv})")
            out.append(f"{y} = v; {V[1]} = r;")
        elif fam in ("addfn", "subfn", "addfn2", "subfn2"):
            two = fam.endswith("2")
            distinct((0, 1), (0, 2)) if two else distinct((0, 1))
            ty = _TY[t]
            f = (f"rvm_fn2_value({c[4]}, {ty}, {V[1]}, {V[2]}, {F}, &w)" if two
                 else f"rvm_fn1_value({c[3]}, {ty}, {V[1]}, {F}, &w)")
            out.append(f"i64 w; if ({f}) BAIL({pc});")
            float_add("rvm_w2f(w)") if t == FLOAT else int_add("w")
        elif fam in ("mul", "div"):
            distinct((0, 1))
            out.append(f"{{ i64 v; if (rvm_lns_mul({y}, {V[1]}, {s}, &v)) BAIL({pc}); {y} = v; }}")
        elif fam in ("cvt", "uncvt"):
            distinct((0, 1))
            dst, src = _TY[op.types[0]], _TY[op.types[1]]
            out.append(f"i64 w; if (rvm_convert({dst}, {src}, {V[1]}, {F}, &w)) BAIL({pc});")
            if op.types[0] == LNS:
                out.append(f"{{ i64 v; if (rvm_lns_mul({y}, w, {s}, &v)) BAIL({pc}); {y} = v; }}")
            elif op.types[0] == FLOAT:
                float_add("rvm_w2f(w)")
            else:
                int_add("w")
        elif fam in ("alloc", "free"):
            trap(f"{y} != 0")
        elif fam == "nop":
            pass
        else:                                            # pragma: no cover (see _COVERED)
            raise Unsupported(f"pc {pc}: `{op.name}`")
        return out

    def real(self, cell: str, t) -> str:
        """real_of in rvm/_core.pyx: the value a float or fixed cell's duals are measured in."""
        return f"rvm_w2f({cell})" if t == FLOAT else f"ldexp((double){cell}, -{self.F})"

    def rule(self, op, c, P, pc: int) -> list[str]:
        """The adjoint rule of the executed row (ad_rule/ad_inline/ad_rot of rvm/_core.pyx
        with only the adjoint on): xbar -= s * df/dx * ybar for an executed y += s*f(x)."""
        rule = RULES[op.name]
        if rule is None:
            return []
        t = op.types[0] if op.types else None
        s = rule.sign
        V = [r.val for r in P]
        D = [r.adj for r in P]                  # the cells' adjoints (lvalues)
        if rule.kind == "update":
            pf = pf_id(op)
            if pf == PF_NONE:
                return []
            if pf == PF_ONE:
                return [f"{D[1]} -= {s}.0 * {D[0]};"]
            sty = op.types[1] if len(op.types) > 1 else t
            if pf == PF_MUL:
                return [f"{{ double ab = {D[0]}; if (ab != 0.0) {{ "
                        f"{D[1]} -= {s}.0 * {self.real(V[2], sty)} * ab; "
                        f"{D[2]} -= {s}.0 * {self.real(V[1], sty)} * ab; }} }}"]
            if pf >= PF_FN2:
                pf, ib = pf + c[4], 2
            elif pf >= PF_FN1:
                pf, ib = pf + c[3], 1
            else:
                assert pf == PF_DIV
                ib = 2
            out = [f"{{ rvm_dual dx0, dx1, dd[2]; dx0.v = {self.real(V[1], sty)}; dx0.t = 0.0; "
                   f"dx1.v = {self.real(V[ib], sty)}; dx1.t = 0.0; "
                   f"int np = rvm_partials({pf}, dx0, dx1, &dd[0], &dd[1]); "
                   f"double ab = {D[0]}; if (ab != 0.0) {{ "
                   f"{D[1]} -= {s}.0 * dd[0].v * ab; "
                   f"if (np > 1) {{ {D[ib]} -= {s}.0 * dd[1].v * ab; }} }} }}"]
            return out
        if rule.kind == "neg":
            return [f"{D[0]} = -{D[0]};"]
        if rule.kind == "swap":
            return [f"{{ double u = {D[0]}; {D[0]} = {D[1]}; {D[1]} = u; }}"]
        if rule.kind == "scope":
            return [f"{D[0]} = 0.0;"]
        if rule.kind == "rot":
            if t == FLOAT:
                cs = f"double C = cs[0], S = {s}.0 * cs[1];"     # the rotation's own cos, sin
            else:
                cs = (f"double th = {self.real(V[2], t)}; double C = cos(th), "
                      f"S = {s}.0 * sin(th);")
            return [f"{{ {cs} double xa = {self.real(V[0], t)}, ya = {self.real(V[1], t)}; "
                    "double xp = C * xa + S * ya, yp = -S * xa + C * ya; "
                    f"double ax = {D[0]}, ay = {D[1]}; "
                    "double nax = C * ax - S * ay, nay = S * ax + C * ay; "
                    f"{D[2]} -= {s}.0 * (-yp * ax + xp * ay); "
                    f"{D[0]} = nax; {D[1]} = nay; }}"]
        raise Unsupported(f"pc {pc}: the rule of `{op.name}`")

    # -- the function ----------------------------------------------------------------------
    def _addr(self, key: tuple[str, int]) -> str:
        return f"{key[1]}" if key[0] == "G" else f"fp + {key[1]}"

    def write_back(self, frame: bool = True) -> str:
        """Store the promoted cells (and with the rules their adjoints) to memory: before a
        call (the callee reads memory) and at the return (a bail out needs nothing)."""
        out = []
        for k in sorted(self.promoted):
            if k[0] == "G" and k[1] in self.consts:
                continue
            out.append(f"M[{self._addr(k)}] = {self.local(k)};")
        if self.rules:
            out += [f"A[{self._addr(k)}] = d{self.local(k)[1:]};" for k in sorted(self.promoted)]
        return " ".join(out)

    def reload(self) -> str:
        """Read the promoted cells again after a call (the callee may have changed them)."""
        out = []
        for k in sorted(self.promoted):
            if not (k[0] == "G" and k[1] in self.consts):
                out.append(f"{self.local(k)} = M[{self._addr(k)}];")
            if self.rules:
                out.append(f"d{self.local(k)[1:]} = A[{self._addr(k)}];")
        return " ".join(out)

    def locals(self) -> list[str]:
        out = []
        for k in sorted(self.promoted):
            if k[0] == "G" and k[1] in self.consts:
                out.append(f"const i64 {self.local(k)} = {lit(self.consts[k[1]])};")
            else:
                out.append(f"i64 {self.local(k)} = M[{self._addr(k)}];")
            if self.rules:
                out.append(f"double d{self.local(k)[1:]} = A[{self._addr(k)}];")
        return out

    def signature(self) -> str:
        return (f"static i64 {self.name}(rvm_ns* st, const i64 fp, const i64* pa, const i64* pl, "
                "const i64 depth, const i64 ptop, i64* np)")

    def generate(self) -> str:
        e = self.e
        first = self.begin + 1 if e > 0 else self.end - 1
        last = self.end if e > 0 else self.begin
        for pc in range(first, last + e, e):
            self.row(pc)
        head = [self.signature() + " {",
                "i64* const M = st->mem; double* const A = st->adj; i64 n = *np; double cs[2]; "
                "(void)A; (void)cs; (void)pa; (void)pl; (void)depth; (void)ptop;",
                *self.locals(), f"goto L{first};"]
        return "\n".join(head + self.lines + ["}"]) + "\n"


def generate(program) -> str:
    """The C source of `program`'s forward run (rvm_native_forward) and adjoint sweep
    (rvm_native_backward): one C function per function of the program, direction it runs in
    and whether the adjoint rules run (the sweep), for the variants the calls reach.  Raises
    Unsupported for what it does not cover."""
    inv = np.column_stack([np.array(INVERSE, dtype=np.int64)[program.code[:, 0]],
                           program.code[:, 1:]])
    main = program.main
    names = {(main, 1, False): "main_f", (main, -1, True): "main_ba"}
    todo = list(names)
    done: dict[tuple[int, int, bool], str] = {}
    while todo:
        key = todo.pop()
        fi, e, rules = key
        fn = _Fn(program, fi, program.code if e > 0 else inv, e, rules, names[key], names)
        for row in program.code[fn.begin:fn.end + 1]:
            fam = fn.ops[int(row[0])].family
            if fam in ("push", "pop", "trace"):
                raise Unsupported(f"`{fam}` in {fn.f.name}")
        done[key] = fn.generate()
        todo += [k for k in fn.needed if k not in done and k not in todo]
    fp, fs = program.n_static, program.functions[main].frame_size
    protos = [f"static i64 {names[k]}(rvm_ns*, const i64, const i64*, const i64*, const i64, "
              "const i64, i64*);" for k in done]
    entries = f"""
static const i64 rvm_no_params[1] = {{0}};
i64 rvm_native_forward(rvm_ns* st) {{        /* enter main (a step), run it, return */
    i64 n = st->steps + 1, rc;
    rc = main_f(st, {fp}, rvm_no_params, rvm_no_params, 1, 0, &n);
    st->steps = n; return rc;
}}
i64 rvm_native_backward(rvm_ns* st) {{       /* enter main from its end with the rules on */
    i64 n = st->steps + 1, rc;
    memset(st->adj + {fp}, 0, {fs} * sizeof(double));
    rc = main_ba(st, {fp}, rvm_no_params, rvm_no_params, 1, 0, &n);
    st->steps = n; return rc;
}}
"""
    return PRELUDE + "\n".join(protos) + "\n" + "".join(done.values()) + entries
