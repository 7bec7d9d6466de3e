"""Program -> C for programs with derivative statements (`g += grad f(args) wrt x`, `d += jvp
f(args) wrt x along v`: docs/ad.md, "Derivatives inside a program").

The interpreter runs a statement as one instruction (rvm/_nested.pxi, do_deriv): its callee f
forward and back again on a dual set of the statement's nesting level, in the mode the
statement and the run around it call for, then the value (and, under an outer mode, the
statement's own derivative from a second-order mode).  Here the statement is C that does the
same around calls of f's variants, generated like every other call's (codegen.py's rows and
checks; tangent.py's tangent rules), so that values are the interpreter's bit for bit:

  variant running the statement   outer mode (vm.ad)  f forward, f back   the derivative
  plain, either direction         none                plain, adjoint      (grad)
                                                      tangent, plain      (jvp)
  adjoint sweep ("a")             adjoint             tangent, "at"       xbar += H gbar ...
  tangent run ("t")               tangents            tangent, "at"       g' += H x' ...

Each variant of a function is one C function whatever the level it runs at: the level
(st->nest, two at most, as NEST_LEVELS) and the mode (st->ad) are read at run time, and a
statement the interpreter would trap on (a third level; one under an outer tangent-over-adjoint
mode, which a tangent run is when it is the first half of one) gives up (BAIL), so that the
interpreter runs and reports it.  A nested run's instructions count against the run's cap (its
poll) and in its steps, as the interpreter's, but not in its time t (st->nest_steps).

Gradients of such programs (rvm.grad_fn and the other derivative modes around them) stay
interpreted: only their runs (rvm.run, Machine.run, `rvm run`) have native code.
"""
from __future__ import annotations

from isa.program import MODE_G, MODE_L, MODE_P, MODE_X

from .codegen import (
    ABI_FN,
    CALLING,
    PRELUDE,
    STATEMENTS,
    Unsupported,
    _Fn,
    _ops_by_code,
    entries,
    functions,
    runs,
)
from .tangent import RELEASE, _TanFn

ARG_SCALAR = -2             # a derivative operand of one cell (rvm/_decls.pxi: ARG_SCALAR)
NEST_LEVELS = 2             # dual sets beside the machine's own (rvm/_nested.pxi)
TAN, ADJ = 1, 2             # st->ad's bits: the interpreter's _AD_TAN and _AD_ADJ


# the cells a statement's nested runs can reach, as sorted disjoint runs [a, b): the
# globals its function (or any it reaches) names and its arguments' cells
SPANS = """\
typedef struct { i64 a, b; } rvm_span;
static inline int rvm_spans_merge(rvm_span* s, int n) {
    /* insertion sort by start (a few runs), moving whole runs: a swap of the two words of
       separate arrays made gcc's vector loads wait on scalar stores (a fifth of particle's
       time in the statements' caller) */
    for (int i = 1; i < n; i++) {
        rvm_span t = s[i]; int j = i;
        for (; j > 0 && s[j - 1].a > t.a; j--) s[j] = s[j - 1];
        s[j] = t;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].b <= s[i].a) continue;
        if (m > 0 && s[i].a <= s[m - 1].b) { if (s[i].b > s[m - 1].b) s[m - 1].b = s[i].b; }
        else s[m++] = s[i];
    }
    return m;
}
"""


def globals_reached(program) -> list[list[tuple[int, int]]]:
    """Per function: the runs of static cells (globals and constants) it or any function it
    calls (or differentiates in a statement) names directly, its duals' cells in a nested
    run besides those of its arguments and frames."""
    ops = _ops_by_code()
    n = len(program.functions)
    own: list[set[int]] = [set() for _ in range(n)]
    calls: list[set[int]] = [set() for _ in range(n)]

    def add(fi: int, w: int, length: int | None) -> None:
        m, q = w & 7, w >> 3
        if m == MODE_G:
            own[fi].update(range(q, q + (1 if length is None else max(length, 1))))
        elif m == MODE_X:
            x = program.xtab[q]
            if (x.base & 7) == MODE_G:
                own[fi].update(range(x.base >> 3, (x.base >> 3) + max(x.length, 1)))
            if (x.index & 7) == MODE_G:
                own[fi].add(x.index >> 3)

    for fi, f in enumerate(program.functions):
        for row in program.code[f.begin:f.end + 1]:
            op = ops[int(row[0])]
            if op.family in CALLING:
                site = program.callsites[int(row[1])]
                calls[fi].add(site.func)
                for arg in site.args:
                    add(fi, arg.word, arg.length)
            dlen = int(row[1 + op.operands.index("dlen")]) if "dlen" in op.operands else None
            for i, kind in enumerate(op.operands):
                if kind in ("y", "a"):
                    add(fi, int(row[1 + i]), None)
                elif kind in ("dy", "da"):
                    add(fi, int(row[1 + i]), None if dlen in (None, ARG_SCALAR) else dlen)
    out = []
    for fi in range(n):
        seen, todo, cells = {fi}, [fi], set()
        while todo:
            g = todo.pop()
            cells |= own[g]
            todo += [h for h in calls[g] if h not in seen]
            seen |= calls[g]
        out.append(runs(c for c in cells if c < program.n_static))
    return out


def has_statements(program) -> bool:
    """Does `program` have a derivative statement?"""
    ops = _ops_by_code()
    return any(ops[int(op)].family in STATEMENTS for op in program.code[:, 0]) \
        if len(program.code) else False


class _NestFn(_TanFn):
    """A function's C in any of the four modes a program with derivative statements runs
    in: plain (rules False) and the adjoint sweep (True), as codegen.py's; the tangent run
    ("t") and the sweep with tangents ("at"), as tangent.py's; with the statements' rows."""

    MODES = {False: ((), ""), True: (("A",), "a"), "t": (("T",), "t"),
             "at": (("T", "A", "AT"), "at")}
    INLINE_ROWS = -1                    # calls stay calls: gcc then inlines the helpers
    acts: dict = {}                     # no activity analysis: every rule in full
    reached: list = []                  # per function, globals_reached (set by generate())
    pops: list = []                     # ... Program.pops_below_entry

    def rule(self, op, c, P, pc: int) -> list[str]:
        if self.rules in (False, True):
            return _Fn.rule(self, op, c, P, pc)
        return super().rule(op, c, P, pc)

    def row(self, pc: int) -> None:
        if self.ops[int(self.code[pc][0])].family in STATEMENTS:
            self.statement(pc)
            return
        super().row(pc)

    # -- derivative statements --------------------------------------------------------------
    def span(self, w: int, length: int, pc: int, pre: list[str]) -> tuple[str, str]:
        """(first address, cell count) in C of a derivative operand (deriv_span of
        rvm/_nested.pxi): one cell, a parameter array (length -1: its bound length) or
        `length` cells from the array word w."""
        if length == ARG_SCALAR:
            ref, _ = self.cell(w, pc, pre)
            return f"({ref.ptr} - M)", "1"
        m, q = w & 7, w >> 3
        if m == MODE_G:
            return f"{q}", f"{length}"
        if m == MODE_L:
            return f"(fp + {q})", f"{length}"
        if m == MODE_P:
            if length >= 0:
                pre.append(f"if (pl[{q}] != {length}) BAIL({pc});")
                return f"pa[{q}]", f"{length}"
            return f"pa[{q}]", f"pl[{q}]"
        raise Unsupported(f"pc {pc}: a derivative operand of mode {m}")

    def nested_index_check(self, xargs: list, pc: int) -> str:
        """_Fn.index_check after each of a statement's nested runs, the promoted cells read
        again first (the nested run wrote memory)."""
        return " ".join([self.reload(), *self.index_check(xargs, pc)]) if xargs else ""

    def statement(self, pc: int) -> None:
        """do_deriv of rvm/_nested.pxi as C: f forward and back on the next level's duals."""
        c = [int(v) for v in self.code[pc]]
        fam = self.ops[c[0]].family
        jvp = fam in ("addjvp", "subjvp")
        s = 1 if fam in ("addgrad", "addjvp") else -1
        site = self.p.callsites[c[1]]
        g = self.p.functions[site.func]
        length = c[5] if jvp else c[4]
        pre: list[str] = []
        if jvp:
            ya, yn = self.span(c[2], ARG_SCALAR, pc, pre)
            wa, wn = self.span(c[3], length, pc, pre)
            va, vn = self.span(c[4], length, pc, pre)
            pre.append(f"const i64 va = {va}, vn = {vn};")
            same = "vn != wn"
        else:
            ya, yn = self.span(c[2], length, pc, pre)
            wa, wn = self.span(c[3], length, pc, pre)
            same = "yn != wn"
        out_ref, _ = self.cell(site.args[0].word, pc, pre)
        pre.append(f"const i64 ya = {ya}, yn = {yn}, wa = {wa}, wn = {wn}, "
                   f"oa = {out_ref.ptr} - M; (void)yn;")
        pre.append(f"if ({same}) BAIL({pc});")
        # what the run around it is: a tangent run may be the first half of a
        # tangent-over-adjoint mode, where a statement traps (checked at run time)
        outer = {False: "", True: "adj", "t": "tan", "at": None}[self.rules]
        if outer is None:
            self.emit(f"L{pc}: {{ n++; BAIL({pc}); }}")
            return
        bind, xargs = self.bind_args(site, pc)
        top = f"(fp + {self.fs})"                     # vm.ftop: the caller's frame top
        own = len(self.f.params)
        args = f"(st, {top}, cpa, cpl, depth + 1, ptop + {own}, &n)"
        b = [*pre, *bind, self.write_back(),
             f"if (M[oa] != 0) BAIL({pc});",
             f"if (st->nest >= {NEST_LEVELS}"
             f"{f' || (st->ad & {ADJ})' if outer == 'tan' else ''}) BAIL({pc});",
             "const i64 lvl = st->nest + 1;",
             "double* const nT = st->n_tan[lvl]; double* const nA = st->n_adj[lvl]; "
             "double* const nAT = st->n_adjt[lvl];",
             f"if (!nT || !nA || !nAT) BAIL({pc});"]
        # the inner mode; the dual arrays it reads start zero (the first-order modes read one
        # each: the interpreter clears all three, the others go unread)
        second = bool(outer)                  # an outer mode: the second-order mode
        used = ("nT", "nA", "nAT") if second else ("nT",) if jvp else ("nA",)
        # the cells below f's frame whose duals the nested runs can touch (the interpreter
        # clears all of them, [0, top), and reads those others as zeros): the statics f
        # reaches, f's arguments and the wrt cells, as sorted disjoint runs
        stat = self.reached[site.func]
        npar = len(g.params)
        b.append(f"rvm_span sp[{len(stat) + npar + 1}]; int ns = 0;")
        b += [f"sp[ns].a = {lo}; sp[ns++].b = {hi};" for lo, hi in stat]
        b += [f"sp[ns].a = cpa[{i}]; sp[ns++].b = cpa[{i}] + cpl[{i}];" for i in range(npar)]
        b.append("sp[ns].a = wa; sp[ns++].b = wa + wn; ns = rvm_spans_merge(sp, ns);")
        span_loop = "for (int q = 0; q < ns; q++) for (i64 k = sp[q].a; k < sp[q].b; k++)"
        b.append("for (int q = 0; q < ns; q++) { " + " ".join(
            f"memset({a} + sp[q].a, 0, (sp[q].b - sp[q].a) * sizeof(double));" for a in used)
            + " }")
        b.append(" ".join(f"memset({a} + {top}, 0, {g.frame_size} * sizeof(double));"
                          for a in used))
        if jvp:
            b.append("for (i64 k = 0; k < wn; k++) nT[wa + k] = rvm_w2f(M[va + k]);")
        elif outer == "tan":
            b.append(f"{span_loop} nT[k] = T[k];")
        elif outer == "adj":
            b.append("for (i64 k = 0; k < wn; k++) nT[wa + k] = A[ya + k];")
        fwd: bool | str
        bwd: bool | str
        if second:
            fwd, bwd, ad_f, ad_b = "t", "at", TAN | ADJ, TAN | ADJ
        elif jvp:
            fwd, bwd, ad_f, ad_b = "t", False, TAN, 0
        else:
            fwd, bwd, ad_f, ad_b = False, True, 0, ADJ
        fname = self.variant(site.func, 1, fwd)
        bname = self.variant(site.func, -1, bwd)
        b += ["double* const o_tan = st->tan; double* const o_adj = st->adj; "
              "double* const o_adjt = st->adjt; double* const o_stan = st->stan; "
              "double* const o_sadj = st->sadj; double* const o_sadjt = st->sadjt; "
              "const i64 o_ad = st->ad, sp0 = st->sp, n0 = n; i64 rc; double R = 0.0; (void)R;",
              f"if (!st->n_stan[lvl] || !st->n_sadj[lvl] || !st->n_sadjt[lvl]) BAIL({pc});",
              # the duals of the values below on the value stack start zero too, those the
              # mode reads, when f may pop one (Program.pops_below_entry; else it writes
              # every slot it reaches first)
              " ".join(f"memset(st->n_{sa}[lvl], 0, st->sp * sizeof(double));"
                       for a, sa in (("nT", "stan"), ("nA", "sadj"), ("nAT", "sadjt"))
                       if a in used and self.pops[site.func]),
              "st->tan = nT; st->adj = nA; st->adjt = nAT; st->stan = st->n_stan[lvl]; "
              "st->sadj = st->n_sadj[lvl]; st->sadjt = st->n_sadjt[lvl]; st->nest = lvl;",
              self.peaks(g.frame_size),
              f"st->ad = {ad_f}; rc = {fname}{args};",
              f"if (rc == 0) {{ {self.nested_index_check(xargs, pc)}"]
        if jvp:
            b.append("R = nT[oa];")
        if bwd is not False:
            b.append("nA[oa] = 1.0;")
            # the values f left on the value stack carry a zero adjoint into the sweep
            b.append("for (i64 k = sp0; k < st->sp; k++) st->sadj[k] = 0.0;")
            if bwd == "at":
                b.append("for (i64 k = sp0; k < st->sp; k++) st->sadjt[k] = 0.0;")
        # f's frame, pushed again for the way back (ad_frame clears its duals)
        fs = g.frame_size
        if bwd is True:
            b.append(f"memset(nA + {top}, 0, {fs} * sizeof(double));")
        elif bwd == "at":
            b.append(" ".join(f"memset({a} + {top}, 0, {fs} * sizeof(double));"
                              for a in ("nT", "nA", "nAT")))
        b += [f"st->ad = {ad_b}; rc = {bname}{args}; "
              f"if (rc == 0) {{ {self.nested_index_check(xargs, pc)} }} }}",
              "st->tan = o_tan; st->adj = o_adj; st->adjt = o_adjt; st->stan = o_stan; "
              "st->sadj = o_sadj; st->sadjt = o_sadjt; st->ad = o_ad; st->nest = lvl - 1;",
              "if (rc) { *np = n; return rc; }",
              "if (lvl == 1) st->nest_steps += n - n0;",
              "bud = st->budget;",
              f"if (M[oa] != 0) BAIL({pc});",
              # the value: y += s * R, cell by cell (a trap sends the run to the interpreter)
              "for (i64 k = 0; k < yn; k++) { i64 w_; "
              f"if (rvm_float_add(M[ya + k], {'R' if jvp else 'nA[wa + k]'}, {s}, &w_)) "
              f"BAIL({pc}); M[ya + k] = w_; }}"]
        # its own derivative for the outer mode
        if outer == "tan":
            if jvp:
                b.append(f"{{ double rd = 0.0; {span_loop} "
                         "if (nAT[k] != 0.0) rd += nAT[k] * T[k]; "
                         "for (i64 k = 0; k < wn; k++) rd += nA[wa + k] * T[va + k]; "
                         f"T[ya] += {s} * rd; }}")
            else:
                b.append(f"for (i64 k = 0; k < yn; k++) T[ya + k] += {s} * nAT[wa + k];")
        elif outer == "adj":
            if jvp:
                b.append(f"{{ const double yb = A[ya]; if (yb != 0.0) {{ "
                         f"{span_loop} if (nAT[k] != 0.0) "
                         f"A[k] -= {s} * yb * nAT[k]; "
                         f"for (i64 k = 0; k < wn; k++) A[va + k] -= {s} * yb * nA[wa + k]; }} }}")
            else:
                b.append(f"{span_loop} if (nAT[k] != 0.0) A[k] -= {s} * nAT[k];")
        b.append(self.reload())
        self.emit(f"L{pc}: {{ n++; " + " ".join(b) + " }")


def generate(program, wrt=None) -> str:
    """codegen.generate for a program with derivative statements: its forward run
    (rvm_native_forward), adjoint sweep (rvm_native_backward) and backward run
    (rvm_native_run_backward), every variant of every function the statements reach in the
    modes they run in.  `wrt` is ignored: no activity analysis follows the statements, so
    every rule runs in full."""
    main = program.main
    fn = type("_NestFnP", (_NestFn,), {"reached": globals_reached(program),
                                        "pops": program.pops_below_entry()})
    protos, bodies = functions(program, {(main, 1, False): "main_f", (main, -1, True): "main_ba",
                                         (main, -1, False): "main_b"}, fn)
    head = PRELUDE + ABI_FN + RELEASE + SPANS
    return head + "\n".join(protos) + "\n" + "".join(bodies) + entries(program, [
        ("rvm_native_forward", "main_f", (), "run main"),
        ("rvm_native_backward", "main_ba", ("adj",), "from main's end with the rules on"),
        ("rvm_native_run_backward", "main_b", (), "a backward run: from main's end")])
