"""Program -> C for the tangent modes: the forward run with tangents (rvm.jvp, and the first
half of a Hessian-vector product) and the adjoint sweep that carries the tangents of the
adjoints as well (the second half: at the start they are H v).

The code is codegen.py's (the same rows, operands, checks, calls and value updates; see its
docstring) with the rules of the interpreter's tangent and tangent-over-adjoint modes in
place of the adjoint rule: each row's rule comes from its entry in isa/derivatives.py, and the
partial derivatives and their tangents from the generated rvm/_deriv.h (the same dual-number
functions the interpreter calls), in the interpreter's order of operations (rvm/_ad.pxi:
ad_rule, ad_inline, ad_rot), so tangents, gradients and Hessian-vector products are its bit
for bit.  Two variants per function: "t" (tangent rules: the forward run, where the
interpreter runs with AD_TAN) and "at" (tangent and adjoint rules: the sweep, AD_TAN |
AD_ADJ).  A tangent dropped nonzero (a released ancilla, a cell overwritten by pop, a frame at
return) is counted in the state (rel_n, rel_pc, rel_max) as the interpreter counts it, for the
engine's ancilla check (the sweep skips a frame's count at its return: nothing reads it).
Anything the interpreter would trap on gives up (BAIL), as in codegen.py.
"""
from __future__ import annotations

from collections.abc import Iterable

from isa.derivatives import PF_FN1, PF_FN2, PF_MUL, PF_NONE, PF_ONE, RULES, pf_id
from isa.program import MODE_L, MODE_X
from isa.types import FLOAT, INT

from .activity import Activity
from .codegen import ABI_FN, PRELUDE, Unsupported, _Fn, entries, functions
from .codegen import clear as _clear
from .codegen import runs as _runs

# a tangent dropped (ad_release of rvm/_ad.pxi): count it, keep the first pc and the largest
RELEASE = """\
#define REL(tv, at) do { double t_ = (tv); if (t_ != 0.0) { if (st->rel_n++ == 0) \\
    st->rel_pc = (at); if (fabs(t_) > st->rel_max || t_ != t_) st->rel_max = fabs(t_); } } \\
    while (0)
/* some double of p[0..n) is not zero (!= 0.0: -0.0 is zero, a NaN is not): its bits without
   the sign bit are not all zero.  The frame's released tangents are counted only then (a
   return's REL loop over every frame cell was 12% of T2's Hessian sweep) */
typedef u64 rvm_u2 __attribute__((vector_size(16), aligned(8), may_alias));
static inline int rvm_any_nz(const double* p, i64 n) {
    const u64* w = (const u64*)p; rvm_u2 a = {0, 0}, b = {0, 0}; i64 k = 0; u64 r;
    for (; k + 4 <= n; k += 4) {
        a |= *(const rvm_u2*)(w + k) << 1; b |= *(const rvm_u2*)(w + k + 2) << 1;
    }
    a |= b; r = a[0] | a[1];
    for (i64 j = 0; j < (n & 3); j++) r |= w[k + j] << 1;
    return r != 0;
}
"""


class _TanFn(_Fn):
    """A function's C in a tangent mode: rules "t" (the forward run with tangents) or "at"
    (the sweep with the adjoint and adjoint-tangent rules too).

    With the activity analyses (`acts`, set by generate(): rvm/native/activity.py) the code
    leaves out what is provably zero.  A cell's tangent is read as the constant 0.0 where it is
    not varied (in the forward run per row, in the sweep anywhere: see activity.py on the
    residues of uncomputed tangents), so the compiler drops the products with it; a tangent
    rule none of whose sources is varied is left out (every rule adds a term only where its
    tangent factor is not zero, so it would change no number); the adjoint and adjoint-tangent
    updates of cells no wrt cell varies go to a sink, as in codegen.py's sweep; and only the
    frame cells some rule can read have their duals cleared."""

    MODES = {"t": (("T",), "t"), "at": (("T", "A", "AT"), "at")}
    INLINE_ROWS = -1          # calls stay calls (inlining doubles the compile time)
    # rules -> (the tangents' activity, the adjoints'): None, every operand is active
    acts: dict[str, tuple[Activity | None, Activity | None]] = {}

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.tact, adj = self.acts.get(self.rules, (None, None))
        if adj is not None:
            self.activity = adj

    # -- what may be nonzero ---------------------------------------------------------------
    def t_active(self, op, c, pc: int, cut: bool = False) -> list[bool]:
        """Per cell operand of row pc: may its tangent be nonzero there (cut: anywhere)?"""
        slots = [1 + i for i, k in enumerate(op.operands) if k in ("y", "a")]
        a = self.tact
        if a is None:
            return [True] * len(slots)
        if cut:
            return [a.ever(self.fi, c[s]) for s in slots]
        return [a.active(self.fi, pc, c[s]) for s in slots]

    def clears(self, fi: int) -> dict[str, list[tuple[int, int]]]:
        """Per dual array of this mode: the runs of function fi's frame cells to zero as it is
        entered (ad_frame): those some rule may read (all of them without an analysis)."""
        fs = self.p.functions[fi].frame_size
        out = {}
        for arr in self.duals:
            act = self.tact if arr == "T" else self.activity
            out[arr] = [(0, fs)] if act is None else _runs(act.frame_cells(fi))
        return out

    def locals(self) -> list[str]:
        return ["double ez = 0.0; (void)ez;", *super().locals()]

    def row(self, pc: int) -> None:
        c = [int(v) for v in self.code[pc]]
        if self.ops[c[0]].family != "end":
            super().row(pc)
            return
        # do_return: the frame must be zero, then its tangents are released (counted in the
        # forward run, for rvm.jvp's ancilla check: nothing reads the sweep's count); a frame
        # cell that is never varied has a zero tangent
        rel = " ".join(f"if (rvm_any_nz(T + fp + {lo}, {hi - lo})) "
                       f"for (i64 k = {lo}; k < {hi}; k++) REL(T[fp + k], {pc});"
                       for lo, hi in self.clears(self.fi)["T"]) if self.rules == "t" else ""
        self.emit(f"L{pc}: n++; {self.write_back()} {self.frame_check(pc)} {rel}")
        self.emit("*np = n; return 0;")

    def rule(self, op, c, P, pc: int) -> list[str]:
        """ad_rule (and, in the forward run, ad_inline) of rvm/_ad.pxi with the tangents on
        and, in the sweep, the adjoints: calls of the rule kinds' functions in rvm/_adrules.h,
        as the interpreter makes them, less what is provably zero (the class docstring)."""
        rule = RULES[op.name]
        if rule is None:
            return []
        adj = self.rules == "at"
        t = op.types[0] if op.types else None
        s = rule.sign
        cut = rule.kind in ("scope", "move")
        tv = self.t_active(op, c, pc, cut)
        av = self.active(op, c, pc, cut) if adj else [False] * len(P)
        T = [r.duals.get("T", "") for r in P]
        # the adjoint (and its tangent) of a source no wrt cell varies goes to a sink; the
        # target's is its own (a varied source makes it varied: codegen.py's rule)
        A = [r.duals.get("A", "") if a or i == 0 else "dz" for i, (r, a) in enumerate(zip(P, av))]
        E = [r.duals.get("AT", "") if a or i == 0 else "ez"
             for i, (r, a) in enumerate(zip(P, av))]
        # a tangent read: the constant zero where it is not varied
        TR = [x if a else "0.0" for x, a in zip(T, tv)]
        if rule.kind == "update":
            pf = pf_id(op)
            if pf == PF_NONE:
                return []
            ton, aon = any(tv[1:]), any(av[1:])
            if not ton and not aon:
                return []
            if pf == PF_ONE:
                if not adj:                        # ad_inline: y' += s a'
                    return [f"rvm_ad_one({-s}.0, {TR[1]}, &{T[0]});"]
                out = [f"if ({TR[1]} != 0.0) rvm_ad_one({-s}.0, {TR[1]}, &{T[0]});"] if ton else []
                if aon:
                    out.append(f"rvm_ad_one({s}.0, {A[0]}, &{A[1]}); "
                               f"rvm_ad_one({s}.0, {E[0]}, &{E[1]});")
                return [" ".join(out)]
            sty = op.types[1] if len(op.types) > 1 else t
            if pf >= PF_FN2:
                pf, ib = pf + c[4], 2
            elif pf >= PF_FN1:
                pf, ib = pf + c[3], 1
            else:
                ib = 2
            assert pf != PF_MUL or ib == 2
            # the forward run needs the partials' values only (their tangents feed the
            # adjoint-tangent rule), which do not depend on the tangents
            t0, t1 = (TR[1], TR[ib]) if aon else ("0.0", "0.0")
            # rvm_ad_update written out, its parts in its order (the tangent, then per
            # source the adjoint and the adjoint tangent), each source's only where a wrt
            # cell varies it
            out = [f"{{ rvm_dual dx0, dx1, dd[2] = {{{{0.0, 0.0}}, {{0.0, 0.0}}}}; "
                   f"dx0.v = {self.real(P[1], sty)}; dx0.t = {t0}; "
                   f"dx1.v = {self.real(P[ib], sty)}; dx1.t = {t1}; "
                   f"{self.partials_inline(op, c)} (void)dd;"]
            if ton:
                out.append(f"{{ double v = rvm_tan_sum(np, dd[0].v, np > 1 ? dd[1].v : 0.0, "
                           f"{TR[1]}, np > 1 ? {TR[ib]} : 0.0); "
                           f"if (v != 0.0) {T[0]} = rvm_tan_add({s}.0, v, {T[0]}); }}")
            if aon:
                out.append(f"{{ const double ab = {A[0]}, abt = {E[0]};")
                for k, i in enumerate((1, ib)):
                    if av[i]:
                        out.append(f"if (np > {k}) {{ if (ab != 0.0) {A[i]} -= {s}.0 * "
                                   f"dd[{k}].v * ab; if (rvm_adjt_on(dd[{k}].t, ab, abt)) "
                                   f"{E[i]} = rvm_adjt_sub({s}.0, dd[{k}].v, dd[{k}].t, ab, "
                                   f"abt, {E[i]}); }}")
                out.append("}")
            out.append("}")
            return [" ".join(out)]
        if rule.kind == "scale":                # lns y *= a^s (its target always varied)
            sty = op.types[-1]
            da = sty != INT
            aon = adj and any(av)
            ad = [f"&{A[0]}", f"&{A[1]}" if da else "0", f"&{E[0]}", f"&{E[1]}" if da else "0"] \
                if aon else ["0"] * 4
            return [f"{{ double zta = {TR[1] if da else '0.0'}; "
                    f"rvm_ad_scale({s}.0, {self.real(P[1], sty)}, {int(da)}, "
                    f"{self.real(P[0], t)}, 1, {int(aon)}, &{T[0]}, "
                    f"{'&zta' if da else '0'}, {', '.join(ad)}); }}"]
        if rule.kind in ("neg", "swap"):
            arrs = ([T] if any(tv) else []) + ([A, E] if any(av) else [])
            if rule.kind == "neg":
                return [" ".join(f"rvm_ad_neg(&{d[0]});" for d in arrs)]
            # a swap of a varied and a constant cell exchanges both cells' duals
            arrs = ([T] if any(tv) else []) + \
                ([[r.duals.get(k, "") for r in P] for k in ("A", "AT")] if any(av) else [])
            return [" ".join(f"rvm_ad_swap(&{d[0]}, &{d[1]});" for d in arrs)]
        if rule.kind == "move":                 # the duals go with the word (ad_rule)
            pairs = ([("stan", T)] if tv[0] else []) + \
                ([("sadj", A), ("sadjt", E)] if av[0] else [])
            if op.family == "push":
                return [" ".join(f"rvm_ad_push(&{d[0]}, &st->{s_}[st->sp - 1]);"
                                 for s_, d in pairs)]
            return [(f"REL({T[0]}, {pc}); " if tv[0] else "") + " ".join(
                f"rvm_ad_pop(&st->{s_}[st->sp], &{d[0]});" for s_, d in pairs)]
        if rule.kind == "scope":
            return [(f"REL({T[0]}, {pc}); " if tv[0] else "") + " ".join(
                f"rvm_ad_scope(&{d[0]});" for d in (([T] if tv[0] else []) +
                                                     ([A, E] if av[0] else [])))]
        if rule.kind == "rot":
            if not any(tv) and not any(av):
                return []
            # the rotated cells' duals are exchanged like a swap's: both their own
            A[:2] = [r.duals.get("A", "") for r in P[:2]]
            E[:2] = [r.duals.get("AT", "") for r in P[:2]]
            return [self.rot(s, t, P, T, TR, A, E, any(av))]
        raise Unsupported(f"pc {pc}: the rule of `{op.name}`")

    def rot(self, s: int, t, P, T, TR, A, E, adj: bool) -> str:
        """ad_rot of rvm/_ad.pxi: the values now are the rotated ones."""
        if t == FLOAT:
            cs = f"double C = cs[0], S = {s}.0 * cs[1];"     # the rotation's own cos, sin
        else:
            cs = f"double th = {self.real(P[2], t)}; double C = cos(th), S = {s}.0 * sin(th);"
        out = [f"{{ {cs} double xa = {self.real(P[0], t)}, ya = {self.real(P[1], t)}; "
               f"double txb = {TR[0]}, tyb = {TR[1]}, tth = {TR[2]}; (void)txb; (void)tyb; "
               f"double tx_ = txb, ty_ = tyb; "
               f"rvm_rot_tangent({s}.0, C, S, xa, ya, tth, &tx_, &ty_); "
               f"{T[0]} = tx_; {T[1]} = ty_;"]
        if adj:
            out.append(f"double xp, yp, ax, ay; rvm_rot_adjoint({s}.0, C, S, xa, ya, &{A[0]}, "
                       f"&{A[1]}, &{A[2]}, &xp, &yp, &ax, &ay); "
                       f"rvm_rot_adjoint_tangent({s}.0, C, S, txb, tyb, tth, xp, yp, ax, ay, "
                       f"{A[0]}, {A[1]}, &{E[0]}, &{E[1]}, &{E[2]});")
        out.append("}")
        return " ".join(out)


LANES = "for (i64 j = 0; j < W; j++)"
LANE_OPTIONS = '#pragma GCC optimize ("O3", "no-math-errno", "no-trapping-math")\n'


def _frame_cells(p, w: int, index: bool = False) -> list[int]:
    """The frame cells operand word w names: a local, or the local array an indexed operand
    reaches (and with `index`, its index cell when that is a local)."""
    m, q = w & 7, w >> 3
    if m == MODE_L:
        return [q]
    if m != MODE_X:
        return []
    x = p.xtab[q]
    out = list(range(x.base >> 3, (x.base >> 3) + max(x.length, 1))) \
        if x.base & 7 == MODE_L else []
    if index and x.index & 7 == MODE_L:
        out.append(x.index >> 3)
    return out


class _LaneFn(_TanFn):
    """A function's C in a lane mode: the rules of "t" ("vt") and "at" ("vat") over W
    tangent directions at once, for a full Hessian in one run.  A cell's W tangents (and
    adjoint tangents) are st->vtan[c*W .. c*W + W) (st->vadjt); the values and the adjoint,
    which do not depend on the direction, are computed once.  Each lane does the arithmetic
    of the scalar mode in its order, so every column is the one a scalar run gives, bit for
    bit.  Released tangents are not counted (the Hessian passes do not report them)."""

    MODES = {"vt": ((), "vt"), "vat": (("A",), "vat")}

    def dual_locals(self, loc: str) -> dict[str, str]:
        addr = loc[2:] if loc[1] == "G" else f"fp + {loc[2:]}"
        return {"A": "d" + loc[1:], "T": f"(VT + ({addr}) * W)", "AT": f"(VAT + ({addr}) * W)"}

    def dual_cells(self, addr: str) -> dict[str, str]:
        return {"A": f"A[{addr}]", "T": f"(VT + ({addr}) * W)", "AT": f"(VAT + ({addr}) * W)"}

    def read_cells(self) -> set[int]:
        """This function's frame cells whose lanes (and adjoint) a rule may read: the cells
        an operand of a row with a rule names (directly, or as the array an index reaches)
        and the cells passed to a callee (which may run rules on them).  The other frame
        cells' duals are never read: a row without a rule (an int update, a jump's test, an
        index) does not touch them, and alloc and free (rule kind scope) only write zeros
        there.  So only these need the constant zero at entry and at an alloc (Petersen's
        sqdist: its float t, not the int counters ia, ib)."""
        done: set[int] | None = getattr(self, "_read", None)
        if done is not None:
            return done
        ops, p = self.ops, self.p
        need: set[int] = set()

        def cell(w: int) -> None:
            need.update(_frame_cells(p, w))

        for row in self.code[self.begin:self.end + 1]:
            op = ops[int(row[0])]
            if op.family in ("call", "uncall"):
                for arg in p.callsites[int(row[1])].args:
                    if arg.length is None or arg.word & 7 != MODE_L:
                        cell(arg.word)
                    else:
                        need.update(range(arg.word >> 3, (arg.word >> 3) + max(arg.length, 1)))
                continue
            rule = RULES[op.name]
            if rule is None or rule.kind == "scope":
                continue
            for i, kind in enumerate(op.operands):
                if kind in ("y", "a"):
                    cell(int(row[1 + i]))
        self._read = need
        return need

    def lane_cells(self) -> list[tuple[int, int]]:
        """The runs [lo, hi) of frame cells whose lanes must be zeroed as the function is
        entered: read_cells, less the locals its first rows allocate."""
        ops, p = self.ops, self.p
        need = self.read_cells()
        # a local that the function's first straight-line rows allocate (alloc, or free run
        # backward: rule kind scope, its lanes set to zero) before any row names it needs no
        # clearing either (sqdist's ia, ib, t)
        zeroed: set[int] = set()
        touched: set[int] = set()
        rows = range(self.begin + 1, self.end) if self.e > 0 else range(self.end - 1,
                                                                          self.begin, -1)
        for pc in rows:
            row = self.code[pc]
            op = ops[int(row[0])]
            if op.family in ("jmp", "join", "call", "uncall", "begin", "end"):
                break
            words = [int(row[1 + i]) for i, kind in enumerate(op.operands) if kind in ("y", "a")]
            rule = RULES[op.name]
            if rule is not None and rule.kind == "scope" and words[0] & 7 == MODE_L and \
                    words[0] >> 3 not in touched:
                zeroed.add(words[0] >> 3)
            for w in words:
                touched.update(_frame_cells(p, w, index=True))
        runs: list[tuple[int, int]] = []
        for k in sorted(q for q in need - zeroed if q < self.fs):
            if runs and runs[-1][1] == k:
                runs[-1] = (runs[-1][0], k + 1)
            else:
                runs.append((k, k + 1))
        return runs

    def locals(self) -> list[str]:
        # the frame's lanes are the constant zero on entry (ad_frame; the caller clears A),
        # those a rule may read (lane_cells); the forward run "vt" neither reads nor writes
        # VAT (the sweep clears it)
        clear = ["VT"] + (["VAT"] if self.rules == "vat" else [])
        runs = self.lane_cells()
        return ["double* const VT = st->vtan; double* const VAT = st->vadjt; "
                "const i64 W = st->lanes; (void)VT; (void)VAT;",
                " ".join(f"memset({a} + (fp + {lo}) * W, 0, {hi - lo} * W * sizeof(double));"
                         for a in clear for lo, hi in runs),
                *super().locals()]

    def row(self, pc: int) -> None:
        _Fn.row(self, pc)                      # no released-tangent count at the return

    def rule(self, op, c, P, pc: int) -> list[str]:
        """The scalar modes' rules (_TanFn.rule) over the W lanes: each lane calls the same
        functions of rvm/_adrules.h on its own tangents, in a loop the compiler vectorizes
        (the functions are branch-free where a lane must be); what does not depend on the
        direction (the values, the partials' values, the adjoint) is computed once."""
        rule = RULES[op.name]
        if rule is None:
            return []
        adj = self.rules == "vat"
        t = op.types[0] if op.types else None
        s = rule.sign
        T = [r.duals.get("T", "") for r in P]
        A = [r.duals.get("A", "") for r in P]
        E = [r.duals.get("AT", "") for r in P]
        if rule.kind == "update":
            pf = pf_id(op)
            if pf == PF_NONE:
                return []
            if pf == PF_ONE:
                if not adj:                    # ad_inline: y' += s a'
                    return [f"{{ double* ty = {T[0]}; const double* ta = {T[1]}; "
                            f"{LANES} rvm_ad_one({-s}.0, ta[j], &ty[j]); }}"]
                return [f"{{ double* ty = {T[0]}; const double* ta = {T[1]}; "
                        f"{LANES} rvm_ad_one_nz({-s}.0, ta[j], &ty[j]); "
                        f"rvm_ad_one({s}.0, {A[0]}, &{A[1]}); double* ea = {E[1]}; "
                        f"const double* ey = {E[0]}; {LANES} rvm_ad_one({s}.0, ey[j], &ea[j]); }}"]
            sty = op.types[1] if len(op.types) > 1 else t
            if pf >= PF_FN2:
                pf, ib = pf + c[4], 2
            elif pf >= PF_FN1:
                pf, ib = pf + c[3], 1
            else:
                ib = 2
            src = [1] if ib == 1 else [1, 2]
            out = [f"{{ const double v0 = {self.real(P[1], sty)}, v1 = {self.real(P[ib], sty)}; "
                   f"double* ty = {T[0]}; const double* ta = {T[1]}; const double* tb = {T[ib]}; "
                   "(void)tb;"]
            if adj:
                # the adjoint once: the partials' values do not depend on the tangents
                out.append(f"rvm_dual z0, z1, pd[2]; z0.v = v0; z0.t = 0.0; z1.v = v1; "
                           f"z1.t = 0.0; {self.partials_inline(op, c, 'z0', 'z1', 'pd', 'npd')} "
                           f"double ab = {A[0]}; const double* ey = {E[0]};")
                for k, i in enumerate(src):
                    out.append(f"if (npd > {k} && ab != 0.0) {A[i]} -= {s}.0 * pd[{k}].v * ab;")
                out.append(" ".join(f"double* e{k} = {E[i]};" for k, i in enumerate(src)))
            # one loop per array written (y's tangents, then each source's adjoint
            # tangents): each lane's updates stay in their order (when a and b are one cell,
            # its second loop reads what the first wrote, as one loop did), and each loop
            # writes one array, which gcc vectorizes; one loop writing two or three arrays
            # that may overlap stayed scalar (T5's Hessian ran 1.8x slower with adddif rows)
            head = (f"{LANES} {{ rvm_dual dx0, dx1, dd[2]; dx0.v = v0; dx0.t = ta[j]; "
                    f"dx1.v = v1; dx1.t = tb[j]; {self.partials_inline(op, c)} ")
            out.append(head + f"ty[j] = rvm_tan_add({s}.0, rvm_tan_sum(np, dd[0].v, np > 1 ? "
                       f"dd[1].v : 0.0, ta[j], {'tb[j]' if ib == 2 else '0.0'}), ty[j]); }}")
            if adj:
                for k, _i in enumerate(src):
                    out.append(head + f"if (np > {k}) e{k}[j] = rvm_adjt_sub({s}.0, dd[{k}].v, "
                               f"dd[{k}].t, ab, ey[j], e{k}[j]); }}")
            out.append("}")
            return [" ".join(out)]
        if rule.kind == "scale":                # lns y *= a^s: rvm_ad_scale per lane
            sty = op.types[-1]
            da = sty != INT
            out = [f"{{ const double av = {self.real(P[1], sty)}, yv = {self.real(P[0], t)}; "
                   f"double* ty = {T[0]}; double* ta = {T[1] if da else '0'};"]
            if adj:
                out.append(f"double* ey = {E[0]}; double* ea = {E[1] if da else '0'}; "
                           f"const double yb0 = {A[0]}, aa0 = {A[1] if da else '0.0'};")
            lane = (f"double yb = yb0, aa = aa0; rvm_ad_scale({s}.0, av, {int(da)}, yv, 1, 1, "
                    f"&ty[j], {'&ta[j]' if da else '0'}, &yb, &aa, &ey[j], "
                    f"{'&ea[j]' if da else '0'});") if adj else \
                (f"rvm_ad_scale({s}.0, av, {int(da)}, yv, 1, 0, &ty[j], "
                 f"{'&ta[j]' if da else '0'}, 0, 0, 0, 0);")
            out.append(f"{LANES} {{ {lane} }}")
            if adj:                             # the one adjoint, once (as without tangents)
                out.append(f"rvm_ad_scale({s}.0, av, {int(da)}, yv, 0, 1, 0, 0, &{A[0]}, "
                           f"{f'&{A[1]}' if da else '0'}, 0, 0);")
            out.append("}")
            return [" ".join(out)]
        lanes = [T, E] if adj else [T]          # the lane arrays of the cells' duals
        if rule.kind == "scope" and c[1] & 7 == MODE_L and c[1] >> 3 not in self.read_cells():
            return []                           # duals no rule reads (read_cells)
        if rule.kind in ("neg", "swap", "scope"):
            fn = {"neg": "rvm_ad_neg", "swap": "rvm_ad_swap", "scope": "rvm_ad_scope"}[rule.kind]
            n = 2 if rule.kind == "swap" else 1
            out = [f"{{ {' '.join(f'double* p{k} = {d[k]};' for k in range(n))} {LANES} "
                   f"{fn}({', '.join(f'&p{k}[j]' for k in range(n))}); }}" for d in lanes]
            if adj:
                out.append(f"{fn}({', '.join(f'&{A[k]}' for k in range(n))});")
            return [" ".join(out)]
        if rule.kind == "move":                 # the duals go with the word (rvm_ad_push/pop)
            arrs = [("vstan", T)] + ([("vsadjt", E)] if adj else [])
            if op.family == "push":
                out = [f"{{ double* c_ = {d[0]}; double* s_ = st->{n_} + (st->sp - 1) * W; "
                       f"{LANES} rvm_ad_push(&c_[j], &s_[j]); }}" for n_, d in arrs]
                if adj:
                    out.append(f"rvm_ad_push(&{A[0]}, &st->sadj[st->sp - 1]);")
                return [" ".join(out)]
            out = [f"{{ double* c_ = {d[0]}; double* s_ = st->{n_} + st->sp * W; "
                   f"{LANES} rvm_ad_pop(&s_[j], &c_[j]); }}" for n_, d in arrs]
            if adj:
                out.append(f"rvm_ad_pop(&st->sadj[st->sp], &{A[0]});")
            return [" ".join(out)]
        if rule.kind == "rot":
            if t == FLOAT:
                cs = f"double C = cs[0], S = {s}.0 * cs[1];"
            else:
                cs = f"double th = {self.real(P[2], t)}; double C = cos(th), S = {s}.0 * sin(th);"
            out = [f"{{ {cs} double xa = {self.real(P[0], t)}, ya = {self.real(P[1], t)}; "
                   f"double* tx = {T[0]}; double* ty = {T[1]}; const double* tt = {T[2]};"]
            if adj:
                out.append(f"double xp, yp, ax, ay; rvm_rot_adjoint({s}.0, C, S, xa, ya, "
                           f"&{A[0]}, &{A[1]}, &{A[2]}, &xp, &yp, &ax, &ay); "
                           f"double nax = {A[0]}, nay = {A[1]}; double* ex = {E[0]}; "
                           f"double* ey = {E[1]}; double* et = {E[2]};")
            out.append(f"{LANES} {{ double txb = tx[j], tyb = ty[j], tth = tt[j]; (void)txb; "
                       f"(void)tyb; rvm_rot_tangent({s}.0, C, S, xa, ya, tth, &tx[j], &ty[j]);")
            if adj:
                out.append(f"rvm_rot_adjoint_tangent({s}.0, C, S, txb, tyb, tth, xp, yp, ax, "
                           f"ay, nax, nay, &ex[j], &ey[j], &et[j]);")
            out.append("} }")
            return [" ".join(out)]
        raise Unsupported(f"pc {pc}: the rule of `{op.name}`")


def generate(program, wrt: Iterable[int] | None = None) -> list[str]:
    """The C of `program`'s tangent modes, two translation units that build.build compiles at
    once into one library: rvm_native_forward_t (the forward run with the tangents of the
    cells, from the state the caller set up) and rvm_native_backward_at (the sweep back to
    the start with the adjoint, tangent and adjoint-tangent rules) at the library's flags;
    and the same over st->lanes directions at once (rvm_native_forward_vt, _backward_vat)
    under LANE_OPTIONS.  The scalar modes leave out what the activity analyses prove zero
    (_TanFn) for tangents seeded at, and derivatives asked of, the cells at addresses `wrt`
    (None: any differentiable global, so any call's).  Raises Unsupported for what
    codegen.py does not cover."""
    main = program.main
    cells = None if wrt is None else sorted(set(wrt))
    acts = {"t": (Activity(program, cells, tangent=True), None),
            "at": (Activity(program, cells, tangent=True, flow=False), Activity(program, cells))}
    fn = type("_TanFnActive", (_TanFn,), {"acts": acts})
    protos, bodies = functions(program, {(main, 1, "t"): "main_ft", (main, -1, "at"): "main_bat"},
                               fn)
    lprotos, lbodies = functions(program, {(main, 1, "vt"): "main_fvt",
                                           (main, -1, "vat"): "main_bvat"}, _LaneFn)
    # main's frame duals are zero when it is entered (ad_frame): the entries clear those a
    # run reads (the forward run with tangents reads no adjoint and no adjoint tangent; the
    # sweep clears all three), so the caller clears only the static cells' duals (a callee's
    # frame is cleared at its call)
    scalar = entries(program, [
        ("rvm_native_forward_t", "main_ft", ("tan",), "run main with tangents"),
        ("rvm_native_backward_at", "main_bat", ("tan", "adj", "adjt"),
         "from main's end: every rule on")])
    # ... of those the frame cells some rule may read (_TanFn.clears)
    fp, fs = program.n_static, program.functions[main].frame_size
    for arr, name, act in (("tan", "main_ft", acts["t"][0]), ("tan", "main_bat", acts["at"][0]),
                           ("adj", "main_bat", acts["at"][1]), ("adjt", "main_bat", acts["at"][1])):
        head = scalar.index(f"rc = {name}(")
        whole = f"memset(st->{arr} + {fp}, 0, {fs} * sizeof(double));"
        assert act is not None
        at = scalar.rindex(whole, 0, head)
        scalar = scalar[:at] + _clear(f"st->{arr}", f"{fp}", _runs(act.frame_cells(main))) + \
            scalar[at + len(whole):]
    # main's frame lanes are cleared in main; the lanes' forward run reads no adjoint
    lanes = entries(program, [
        ("rvm_native_forward_vt", "main_fvt", (), "run main, st->lanes tangents"),
        ("rvm_native_backward_vat", "main_bvat", ("adj",), "from main's end, st->lanes")])
    # the lane loops are elementwise and branch-free (a skipped add of the scalar rules is an
    # add of -0.0 or a subtraction of 0.0, which change no number): gcc vectorizes them at -O3
    # without changing a result (no reassociation; -ffp-contract=off stays; no-math-errno
    # lets it keep a partial's sqrt or exp out of the loop, the same correctly rounded value;
    # no-trapping-math lets it compute both sides of a select, the flags are not read)
    # (for the whole unit: gcc does not inline across functions of different options)
    return [PRELUDE + ABI_FN + RELEASE + "\n".join(protos) + "\n" + "".join(bodies) + scalar,
            LANE_OPTIONS + PRELUDE + "\n".join(lprotos) + "\n" + "".join(lbodies) + lanes]
