"""Program -> C: the forward run and the adjoint sweep of a program as straight C code.

Every instruction of the entry function becomes a few lines of C that call the same
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
reports where it became so.  Programs the generator does not cover
(calls, the value stack, traces, parameters) raise Unsupported and stay interpreted.
"""
from __future__ import annotations

import numpy as np

from isa.derivatives import PF_DIV, PF_FN1, PF_FN2, PF_MUL, PF_NONE, PF_ONE, RULES, pf_id
from isa.table import INVERSE, OPS
from isa.types import FIXED, FLOAT, INT, LNS

# return codes of the generated functions (rvm/_core.pyx keeps the same numbers)
DONE, BUDGET, BAIL = 0, 1, 2
ABI = 2                   # bump when the state struct or the entry points change

MODE_G, MODE_L, MODE_P, MODE_X, MODE_N = range(5)
_TY = {INT: 0, FIXED: 1, LNS: 2, FLOAT: 3}

# families the generator translates; anything else makes the program Unsupported
_COVERED = {"add", "sub", "addi", "subi", "inc", "dec", "addmul", "submul", "adddiv", "subdiv",
            "xor", "xori", "xorand", "neg", "not", "rotl", "rotr", "swap", "rot", "irot",
            "addfn", "subfn", "addfn2", "subfn2", "mul", "div", "cvt", "uncvt", "alloc", "free",
            "assert", "nop", "jmp", "join", "begin", "end"}
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
typedef struct { i64* mem; double* adj; i64 pc; i64 steps; i64 budget; } rvm_ns;
#define BAIL(at) do { st->pc = (at); st->steps = n; return 2; } while (0)
/* some cell of p[0..n) is not zero (the frame check at return), four words at a time */
static inline int rvm_any(const i64* p, int n) {
    u64 a = 0, b = 0, c = 0, d = 0; int k = 0;
    for (; k + 4 <= n; k += 4) { a |= (u64)p[k]; b |= (u64)p[k + 1]; c |= (u64)p[k + 2]; d |= (u64)p[k + 3]; }
    for (; k < n; k++) a |= (u64)p[k];
    return (a | b | c | d) != 0;
}
int rvm_native_abi(void) { return %d; }
""" % ABI


def lit(w: int) -> str:
    """A 64-bit word as a C literal (INT64_MIN has no plain decimal literal)."""
    return f"((i64)0x{w & 0xFFFFFFFFFFFFFFFF:x}ULL)"


class Unsupported(Exception):
    """The program uses something the generator does not translate (the reason says what)."""


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
        if self.hi - self.lo == 1 and other.hi - other.lo == 1:
            return "1"
        return f"{self.ptr} == {other.ptr}"


MAX_PROMOTED = 512


def _promotable(program, rows, fp: int) -> set[int]:
    """Cells the generated code may keep in C locals (registers): named directly by some
    operand and outside every array an indexed operand can reach, so that no access through
    an index sees memory that is stale."""
    ops = _ops_by_code()
    direct: dict[int, int] = {}
    reach: list[tuple[int, int]] = []

    def addr(w):
        return (w >> 3) if (w & 7) == MODE_G else fp + (w >> 3) if (w & 7) == MODE_L else None

    for row in rows:
        op = ops[int(row[0])]
        for i, kind in enumerate(op.operands):
            if kind not in ("y", "a"):
                continue
            w = int(row[1 + i])
            if (w & 7) == MODE_X:
                x = program.xtab[w >> 3]
                b, k = addr(x.base), addr(x.index)
                if b is not None:
                    reach.append((b, b + max(x.length, 0)))
                if k is not None:
                    direct[k] = direct.get(k, 0) + 1
            elif addr(w) is not None:
                direct[addr(w)] = direct.get(addr(w), 0) + 1
    ok = [a for a in direct if not any(lo <= a < hi for lo, hi in reach)]
    ok.sort(key=lambda a: -direct[a])
    return set(ok[:MAX_PROMOTED])


class _Fn:
    """The C of one direction of the entry function (code = the rows as executed)."""

    def __init__(self, program, code, e: int, name: str, promoted: set[int]):
        self.p, self.code, self.e, self.name = program, code, e, name
        self.promoted = promoted
        # constant cells are never written (Core validates it): their words are literals
        self.consts = {c.addr + k: w for c in program.consts for k, w in enumerate(c.values)}
        f = program.functions[program.main]
        self.begin, self.end, self.fs = f.begin, f.end, f.frame_size
        self.fp = program.n_static            # the entry frame starts right after the statics
        self.F = program.fraction_bits
        self.ops = _ops_by_code()
        self.lines: list[str] = []
        self.nx = 0
        self.targets: dict[int, str] = {}   # jump target -> its came-from entry

    # -- operands --------------------------------------------------------------------------
    def addr(self, w: int, what: str) -> int:
        """Absolute address of a G or L word (the entry frame is at a fixed place)."""
        m, v = w & 7, w >> 3
        if m == MODE_G:
            return v
        if m == MODE_L:
            return self.fp + v
        raise Unsupported(f"{what}: a parameter operand")

    def direct(self, a: int) -> Ref:
        if a in self.promoted:
            return Ref(f"(M + {a})", f"r{a}", f"d{a}", a, a + 1)
        return Ref(f"(M + {a})", f"M[{a}]", f"A[{a}]", a, a + 1)

    def cell(self, w: int, pc: int, pre: list[str]) -> tuple[Ref, Ref | None]:
        """(the cell, its index cell's address or None) of the operand word w; an indexed
        operand reads its index and checks its bounds in `pre`."""
        if (w & 7) != MODE_X:
            return self.direct(self.addr(w, f"pc {pc}")), None
        x = self.p.xtab[w >> 3]
        base = self.addr(x.base, f"pc {pc}")
        idx = self.direct(self.addr(x.index, f"pc {pc}"))
        if x.length < 0:
            raise Unsupported(f"pc {pc}: an array of a parameter's length")
        self.nx += 1
        v = f"x{self.nx}"
        pre.append(f"i64 {v} = {idx.val}; if ((u64){v} >= (u64){x.length}LL) BAIL({pc});")
        return Ref(f"(M + {base} + {v})", f"M[{base} + {v}]", f"A[{base} + {v}]", base,
                   base + x.length), idx

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
        if fam == "end":                                 # return from the entry function
            self.emit(f"L{pc}: n++; {self.write_back()} "
                      f"if (rvm_any(M + {self.fp}, {self.fs})) BAIL({pc});")
            self.emit("st->steps = n; return 0;")
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
            self.targets[t] = target
            budget = (f"if (n >= st->budget) {{ {self.write_back()} st->pc = {t}; "
                      "st->steps = n; return 1; } ")
            self.emit(f"L{pc}: {{ n++; {' '.join(pre)} if ({cond}) {{ {budget}goto {target}; }} }}")
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
        if self.e < 0:
            body += self.rule(op, c, ptr, pc)
        self.emit(f"L{pc}: {{ n++; " + " ".join(body) + " }")

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
    def write_back(self) -> str:
        """Store the promoted cells (and in the sweep their adjoints) where the Core reads
        them: before returning at the end or at a budget (a bail out needs nothing)."""
        out = [f"M[{a}] = r{a};" for a in sorted(self.promoted) if a not in self.consts]
        if self.e < 0:
            out += [f"A[{a}] = d{a};" for a in sorted(self.promoted)]
        return " ".join(out)

    def locals(self) -> list[str]:
        out = []
        for a in sorted(self.promoted):
            if a in self.consts:
                out.append(f"const i64 r{a} = {lit(self.consts[a])};")
            else:
                out.append(f"i64 r{a} = M[{a}];")
            if self.e < 0:
                out.append(f"double d{a} = A[{a}];")
        return out

    def generate(self) -> str:
        e = self.e
        first = self.begin + 1 if e > 0 else self.end - 1
        last = self.end if e > 0 else self.begin
        for pc in range(first, last + e, e):
            self.row(pc)
        body = self.lines
        enter = [f"ENTER: n++;"]
        if e < 0:                       # entering the frame zeroes its duals (ad_frame)
            enter.append(f"memset(A + {self.fp}, 0, {self.fs} * sizeof(double));")
            enter += [f"d{a} = 0.0;" for a in sorted(self.promoted)
                      if self.fp <= a < self.fp + self.fs]
        enter.append(f"goto L{first};")
        cases = " ".join(f"case {t}: goto {lab};" for t, lab in sorted(self.targets.items()))
        head = [f"i64 {self.name}(rvm_ns* st) {{",
                "i64* const M = st->mem; double* const A = st->adj; i64 n = st->steps; "
                "double cs[2]; (void)A; (void)cs;",
                *self.locals(),
                f"switch (st->pc) {{ case -1: goto ENTER; {cases} default: return 2; }}"]
        return "\n".join(head + enter + body + ["}"]) + "\n"


def generate(program) -> str:
    """The C source of `program`'s forward run (rvm_native_forward) and adjoint sweep
    (rvm_native_backward); raises Unsupported for what it does not cover."""
    f = program.functions[program.main]
    code = program.code
    ops = _ops_by_code()
    for pc in range(len(code)):
        fam = ops[int(code[pc][0])].family
        if fam in ("call", "uncall") and f.begin <= pc <= f.end:
            raise Unsupported(f"pc {pc}: a call")
    if f.params:
        raise Unsupported("the entry function has parameters")
    inv = np.column_stack([np.array(INVERSE, dtype=np.int64)[code[:, 0]], code[:, 1:]])
    body = code[f.begin:f.end + 1]
    promoted = _promotable(program, body, program.n_static)
    fwd = _Fn(program, code, 1, "rvm_native_forward", promoted).generate()
    bwd = _Fn(program, inv, -1, "rvm_native_backward", promoted).generate()
    return PRELUDE + fwd + bwd
