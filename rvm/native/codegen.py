"""Program -> C: the forward run and the adjoint sweep of a program as straight C code.

Every instruction of the entry function becomes a few lines of C that call the same
arithmetic the interpreter calls (rvm/_arith.h for values, rvm/_deriv.h for the partials), in
the same order, so results are bit for bit those of rvm/_core.pyx; control flow becomes
gotos, a jmp's paired join is checked on both of its edges.  The instruction table (isa/table
and isa/derivatives) decides what each row is: its value update, its inverse (the sweep runs
the inverse-mapped rows, like the interpreter) and its differentiation rule.

The generated code does not report errors.  Anything the interpreter would trap on (a bounds,
alias, come-from, ancilla or arithmetic trap, a non-finite derivative) makes it return
BAIL with nothing promised about the state; the caller then runs the interpreter from the
start, which reports it with its usual detail.  Programs the generator does not cover
(calls, the value stack, traces, parameters) raise Unsupported and stay interpreted.
"""
from __future__ import annotations

from isa.derivatives import PF_DIV, PF_FN1, PF_FN2, PF_MUL, PF_NONE, PF_ONE, RULES, pf_id
from isa.table import INVERSE, OPS
from isa.types import FIXED, FLOAT, INT, LNS

# return codes of the generated functions (rvm/_core.pyx keeps the same numbers)
DONE, BUDGET, BAIL = 0, 1, 2
ABI = 1                   # bump when the state struct or the entry points change

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
typedef struct { i64* mem; double* adj; i64 pc; i64 steps; i64 budget; i64 nonfinite; } rvm_ns;
#define BAIL(at) do { st->pc = (at); st->steps = n; return 2; } while (0)
#define NF(x) (nf |= !isfinite(x))
int rvm_native_abi(void) { return %d; }
""" % ABI


def lit(w: int) -> str:
    """A 64-bit word as a C literal (INT64_MIN has no plain decimal literal)."""
    return f"((i64)0x{w & 0xFFFFFFFFFFFFFFFF:x}ULL)"


class Unsupported(Exception):
    """The program uses something the generator does not translate (the reason says what)."""


def _ops_by_code() -> dict:
    return {op.code: op for op in OPS}


class _Fn:
    """The C of one direction of the entry function (code = the rows as executed)."""

    def __init__(self, program, code, e: int, name: str):
        self.p, self.code, self.e, self.name = program, code, e, name
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

    def cell(self, w: int, pc: int, pre: list[str]) -> tuple[str, str | None]:
        """(C pointer expression, index cell pointer or None) of the operand word w; an
        indexed operand reads its index and checks its bounds in `pre`."""
        if (w & 7) != MODE_X:
            return f"(M + {self.addr(w, f'pc {pc}')})", None
        x = self.p.xtab[w >> 3]
        base = self.addr(x.base, f"pc {pc}")
        idx = self.addr(x.index, f"pc {pc}")
        if x.length < 0:
            raise Unsupported(f"pc {pc}: an array of a parameter's length")
        self.nx += 1
        v = f"x{self.nx}"
        pre.append(f"i64 {v} = M[{idx}]; if ((u64){v} >= (u64){x.length}LL) BAIL({pc});")
        return f"(M + {base} + {v})", f"(M + {idx})"

    # -- rows ------------------------------------------------------------------------------
    def emit(self, s: str) -> None:
        self.lines.append(s)

    def cond(self, c, pc: int, pre: list[str]) -> str:
        if (c[1] & 15) == 0:
            return "1"
        a, _ = self.cell(int(c[2]), pc, pre)
        b, _ = self.cell(int(c[3]), pc, pre)
        return f"rvm_compare({lit(int(c[1]))}, *{a}, *{b})"

    def row(self, pc: int) -> None:
        c = [int(v) for v in self.code[pc]]
        op = self.ops[c[0]]
        fam = op.family
        nxt = pc + self.e
        if fam not in _COVERED:
            raise Unsupported(f"pc {pc}: `{op.name}`")
        if fam == "end":                                 # return from the entry function
            self.emit(f"L{pc}: n++; for (int k = 0; k < {self.fs}; k++) "
                      f"if (M[{self.fp} + k]) BAIL({pc});")
            self.emit("st->steps = n; if (nf) { st->nonfinite = 1; return 2; } return 0;")
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
            budget = f"if (n >= st->budget) {{ st->pc = {t}; st->steps = n; return 1; }} "
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
                    if i is not None:
                        body.append(f"if ({ptr[s]} == {i}) BAIL({pc});")
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
        y = P[0] if P else None
        out = []

        def distinct(*pairs):
            for i, j in pairs:
                out.append(f"if ({P[i]} == {P[j]}) BAIL({pc});")

        def trap(expr):
            out.append(f"if ({expr}) BAIL({pc});")

        def float_add(d):
            out.append("{ i64 v; " + f"if (rvm_float_add(*{y}, {d}, {s}, &v)) BAIL({pc}); "
                       f"*{y} = v; }}")

        def int_add(v):
            out.append(f"*{y} = (i64)((u64)*{y} {pm} (u64)({v}));")

        if fam in ("add", "sub"):
            distinct((0, 1))
            float_add(f"rvm_w2f(*{P[1]})") if t == FLOAT else int_add(f"*{P[1]}")
        elif fam in ("addi", "subi"):
            float_add(f"rvm_w2f({lit(c[2])})") if t == FLOAT else int_add(lit(c[2]))
        elif fam in ("inc", "dec"):
            int_add("1")
        elif fam in ("addmul", "submul"):
            distinct((0, 1), (0, 2))
            a, b = f"*{P[1]}", f"*{P[2]}"
            if t == FLOAT:
                float_add(f"rvm_w2f({a}) * rvm_w2f({b})")
            elif t == FIXED:
                int_add(f"rvm_fixed_mul({a}, {b}, {F})")
            else:
                int_add(f"(u64){a} * (u64){b}")
        elif fam in ("adddiv", "subdiv"):
            distinct((0, 1), (0, 2))
            a, b = f"*{P[1]}", f"*{P[2]}"
            if t == FLOAT:
                trap(f"rvm_w2f({b}) == 0.0")
                float_add(f"rvm_w2f({a}) / rvm_w2f({b})")
            else:
                div = f"rvm_int_div({a}, {b}, &q)" if t == INT else \
                    f"rvm_fixed_div({a}, {b}, {F}, &q)"
                out.append(f"{{ i64 q; if ({div}) BAIL({pc}); *{y} = (i64)((u64)*{y} {pm} (u64)q); }}")
        elif fam == "xor":
            distinct((0, 1))
            out.append(f"*{y} ^= *{P[1]};")
        elif fam == "xori":
            out.append(f"*{y} ^= {lit(c[2])};")
        elif fam == "xorand":
            distinct((0, 1), (0, 2))
            out.append(f"*{y} ^= *{P[1]} & *{P[2]};")
        elif fam == "not":
            out.append(f"*{y} = ~*{y};")
        elif fam == "neg":
            if t == FLOAT:
                out.append(f"*{y} = (i64)((u64)*{y} ^ ((u64)1 << 63));")
            elif t == LNS:
                out.append(f"if ((*{y} >> 1) != ((i64)((u64)1 << 63) >> 1)) *{y} ^= 1;")
            else:
                out.append(f"*{y} = (i64)((u64)0 - (u64)*{y});")
        elif fam in ("rotl", "rotr"):
            r = c[2] if fam == "rotl" else (64 - c[2]) & 63
            if r:
                out.append(f"*{y} = (i64)(((u64)*{y} << {r}) | ((u64)*{y} >> {64 - r}));")
        elif fam == "swap":
            out.append(f"{{ i64 v = *{y}; *{y} = *{P[1]}; *{P[1]} = v; }}")
        elif fam in ("rot", "irot"):
            distinct((0, 1), (0, 2), (1, 2))
            inv = int(fam == "irot")
            out.append(f"i64 v = *{y}, r = *{P[1]};")
            if t == FLOAT:
                trap(f"rvm_rot_float(&v, &r, *{P[2]}, {inv}, cs)")
            else:
                trap(f"rvm_rot_fixed(&v, &r, *{P[2]}, {F}, {inv})")
            out.append(f"*{y} = v; *{P[1]} = r;")
        elif fam in ("addfn", "subfn", "addfn2", "subfn2"):
            two = fam.endswith("2")
            distinct((0, 1), (0, 2)) if two else distinct((0, 1))
            ty = _TY[t]
            f = (f"rvm_fn2_value({c[4]}, {ty}, *{P[1]}, *{P[2]}, {F}, &w)" if two
                 else f"rvm_fn1_value({c[3]}, {ty}, *{P[1]}, {F}, &w)")
            out.append(f"i64 w; if ({f}) BAIL({pc});")
            float_add("rvm_w2f(w)") if t == FLOAT else int_add("w")
        elif fam in ("mul", "div"):
            distinct((0, 1))
            out.append(f"{{ i64 v; if (rvm_lns_mul(*{y}, *{P[1]}, {s}, &v)) BAIL({pc}); *{y} = v; }}")
        elif fam in ("cvt", "uncvt"):
            distinct((0, 1))
            dst, src = _TY[op.types[0]], _TY[op.types[1]]
            out.append(f"i64 w; if (rvm_convert({dst}, {src}, *{P[1]}, {F}, &w)) BAIL({pc});")
            if op.types[0] == LNS:
                out.append(f"{{ i64 v; if (rvm_lns_mul(*{y}, w, {s}, &v)) BAIL({pc}); *{y} = v; }}")
            elif op.types[0] == FLOAT:
                float_add("rvm_w2f(w)")
            else:
                int_add("w")
        elif fam in ("alloc", "free"):
            trap(f"*{y} != 0")
        elif fam == "nop":
            pass
        else:                                            # pragma: no cover (see _COVERED)
            raise Unsupported(f"pc {pc}: `{op.name}`")
        return out

    def real(self, cell: str, t) -> str:
        """real_of in rvm/_core.pyx: the value a float or fixed cell's duals are measured in."""
        return f"rvm_w2f(*{cell})" if t == FLOAT else f"ldexp((double)*{cell}, -{self.F})"

    def rule(self, op, c, P, pc: int) -> list[str]:
        """The adjoint rule of the executed row (ad_rule/ad_inline/ad_rot of rvm/_core.pyx
        with only the adjoint on): xbar -= s * df/dx * ybar for an executed y += s*f(x)."""
        rule = RULES[op.name]
        if rule is None:
            return []
        t = op.types[0] if op.types else None
        s = rule.sign
        idx = [f"({p} - M)" for p in P]
        if rule.kind == "update":
            pf = pf_id(op)
            if pf == PF_NONE:
                return []
            if pf == PF_ONE:
                return [f"A[{idx[1]}] -= {s}.0 * A[{idx[0]}];"]
            sty = op.types[1] if len(op.types) > 1 else t
            if pf == PF_MUL:
                return [f"{{ double ab = A[{idx[0]}]; if (ab != 0.0) {{ "
                        f"A[{idx[1]}] -= {s}.0 * {self.real(P[2], sty)} * ab; NF(A[{idx[1]}]); "
                        f"A[{idx[2]}] -= {s}.0 * {self.real(P[1], sty)} * ab; NF(A[{idx[2]}]); }} }}"]
            if pf >= PF_FN2:
                pf, ib = pf + c[4], 2
            elif pf >= PF_FN1:
                pf, ib = pf + c[3], 1
            else:
                assert pf == PF_DIV
                ib = 2
            out = [f"{{ rvm_dual dx0, dx1, dd[2]; dx0.v = {self.real(P[1], sty)}; dx0.t = 0.0; "
                   f"dx1.v = {self.real(P[ib], sty)}; dx1.t = 0.0; "
                   f"int np = rvm_partials({pf}, dx0, dx1, &dd[0], &dd[1]); "
                   f"double ab = A[{idx[0]}]; if (ab != 0.0) {{ "
                   f"A[{idx[1]}] -= {s}.0 * dd[0].v * ab; NF(A[{idx[1]}]); "
                   f"if (np > 1) {{ A[{idx[ib]}] -= {s}.0 * dd[1].v * ab; NF(A[{idx[ib]}]); }} }} }}"]
            return out
        if rule.kind == "neg":
            return [f"A[{idx[0]}] = -A[{idx[0]}];"]
        if rule.kind == "swap":
            return [f"{{ double u = A[{idx[0]}]; A[{idx[0]}] = A[{idx[1]}]; A[{idx[1]}] = u; }}"]
        if rule.kind == "scope":
            return [f"A[{idx[0]}] = 0.0;"]
        if rule.kind == "rot":
            if t == FLOAT:
                cs = f"double C = cs[0], S = {s}.0 * cs[1];"     # the rotation's own cos, sin
            else:
                cs = (f"double th = {self.real(P[2], t)}; double C = cos(th), "
                      f"S = {s}.0 * sin(th);")
            return [f"{{ {cs} double xa = {self.real(P[0], t)}, ya = {self.real(P[1], t)}; "
                    "double xp = C * xa + S * ya, yp = -S * xa + C * ya; "
                    f"double ax = A[{idx[0]}], ay = A[{idx[1]}]; "
                    "double nax = C * ax - S * ay, nay = S * ax + C * ay; "
                    f"A[{idx[2]}] -= {s}.0 * (-yp * ax + xp * ay); "
                    f"A[{idx[0]}] = nax; A[{idx[1]}] = nay; NF(A[{idx[2]}]); }}"]
        raise Unsupported(f"pc {pc}: the rule of `{op.name}`")

    # -- the function ----------------------------------------------------------------------
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
        enter.append(f"goto L{first};")
        cases = " ".join(f"case {t}: goto {lab};" for t, lab in sorted(self.targets.items()))
        head = [f"i64 {self.name}(rvm_ns* st) {{",
                "i64* const M = st->mem; double* const A = st->adj; i64 n = st->steps; "
                "int nf = 0; double cs[2]; (void)A; (void)cs;",
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
    import numpy as np
    inv = np.column_stack([np.array(INVERSE, dtype=np.int64)[code[:, 0]], code[:, 1:]])
    fwd = _Fn(program, code, 1, "rvm_native_forward").generate()
    bwd = _Fn(program, inv, -1, "rvm_native_backward").generate()
    return PRELUDE + fwd + bwd
