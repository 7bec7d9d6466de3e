"""Pass 2: function bodies -> instructions.

One `FunctionCompiler` per function emits `begin`, the body and `end` into the unit.  An
instruction statement picks its opcode from the shapes it matched (isa/table.py through
shapes.py) and the types of its operands; structured sugar expands into forks and joins
(docs/rasm.md, "How sugar expands"); raw `jmp`/`join` labels are resolved at the end of the
function and their pairing is checked.  Each statement that fails reports one diagnostic and
emits nothing; compilation goes on with the next statement.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.functions import CMP_ALWAYS, CMP_EQ, CMP_LE, CMP_LT, CMP_NE, FN1, FN2, cond_parts, cond_word
from isa.table import OP_BY_NAME, ROW_WIDTH, Op, op_for
from isa.types import INT
from rvm.program import MODE_L, Arg, CallSite, Function, Local, Param, Trace, operand

from .calls import CallRecord, Guard
from .declarations import Declarations
from .diagnostics import Fail, Pos, Reporter
from .invert import invert_rows
from .nodes import (Delocal, For, From, If, Instr, Label, Len, Literal, LocalDecl, Match,
                    Name, Recovered, With)
from .operands import Resolver, describe
from .parser import MAX_LENGTH
from .shapes import fn_table
from .symbols import CellSym, FuncSig, Ref, index_refs, overlaps
from .unit import JMP, JOIN, PC_SLOT, Unit

BEGIN, END = OP_BY_NAME["begin"], OP_BY_NAME["end"]
ALLOC, FREE = OP_BY_NAME["alloc"], OP_BY_NAME["free"]
ASSERT, TRACE = OP_BY_NAME["assert"], OP_BY_NAME["trace"]
INC_I = op_for("inc", INT)
ADD_I, SUB_I, ADDI_I, SUBI_I = (op_for(f, INT) for f in ("add", "sub", "addi", "subi"))
MAX_CODE = 1 << 20            # instructions in one program (nested `with` blocks double code)


@dataclass
class Fixup:
    """A raw jmp/join whose pc operand names a label."""
    pc: int
    label: Name
    region: tuple
    done: bool = False


def _generic(m: Match) -> str:
    """The statement form with placeholder operands, e.g. `y += a * b`."""
    fn = m.fn.name if m.fn else "f"
    return m.shape.syntax.format("y", "a", "b", fn=fn)


class FunctionCompiler:
    def __init__(self, unit: Unit, decls: Declarations, sig: FuncSig, rep: Reporter,
                 calls: list[CallRecord], direct_writes: dict[int, set[int]]):
        self.unit, self.decls, self.sig, self.rep = unit, decls, sig, rep
        self.calls = calls
        self.written = direct_writes.setdefault(sig.index, set())
        self.scope: dict[str, CellSym] = {p.name: p for p in sig.params}
        self.res = Resolver(unit, decls.cells, self.scope)
        self.locals: list[Local] = []
        self.frame = 0
        self.region: tuple = ()
        self.pending: list[Label] = []
        self.label_at: dict[str, tuple[int, tuple, Pos]] = {}
        self.fixups: list[Fixup] = []
        self.guards: list[Guard] = []

    # ---- driver -------------------------------------------------------------------------
    def compile(self) -> Function:
        d = self.sig.decl
        begin = self.emit(BEGIN, [self.sig.index], d.pos)
        self.block(d.body)
        end = self.emit(END, [self.sig.index], d.end_pos)
        self.finish_labels()
        params = [Param(p.name, p.type, p.is_array, False,
                        p.length if p.is_array and p.length >= 0 else None)
                  for p in self.sig.params]
        return Function(self.sig.name, begin, end, params, self.locals, self.frame)

    def block(self, stmts: list) -> None:
        for s in stmts:
            try:
                self.stmt(s)
            except Fail as f:
                self.rep.fail(f)

    def stmt(self, s) -> None:
        if isinstance(s, Instr):
            self.instr(s)
        elif isinstance(s, Label):
            self.pending.append(s)
        elif isinstance(s, LocalDecl):
            self.local(s)
        elif isinstance(s, Delocal):
            self.delocal(s)
        elif isinstance(s, If):
            self.if_(s)
        elif isinstance(s, From):
            self.from_(s)
        elif isinstance(s, For):
            self.for_(s)
        elif isinstance(s, With):
            self.with_(s)
        elif isinstance(s, Recovered):
            self.block(s.body)

    # ---- emission and labels ------------------------------------------------------------
    def emit(self, op: Op, values: list[int], pos: Pos) -> int:
        pc = self.unit.emit(op, values, pos, self.region)
        self.bind_pending(pc)
        return pc

    def bind_pending(self, pc: int) -> None:
        for lab in self.pending:
            prev = self.label_at.get(lab.name)
            if prev is not None:
                self.rep.error(lab.pos, "E003", f"label `{lab.name}` is already defined "
                                                f"(line {prev[2].line})")
                continue
            self.label_at[lab.name] = (pc, self.region, lab.pos)
            self.unit.label(pc, lab.name)
        self.pending.clear()

    def fork(self, op: Op, cond: tuple[int, int, int], target: int, pos: Pos, label: str) -> int:
        pc = self.emit(op, [cond[0], cond[1], cond[2], target], pos)
        self.unit.label(pc, label)
        return pc

    def resolve_fixups(self, lo: int, hi: int) -> None:
        """Patch raw jumps in [lo, hi) whose labels are in the same range and region."""
        for fx in self.fixups:
            if fx.done or not lo <= fx.pc < hi:
                continue
            entry = self.label_at.get(fx.label.name)
            if entry is not None and lo <= entry[0] < hi and entry[1] == fx.region:
                self.unit.patch_pc(fx.pc, entry[0])
                fx.done = True

    def finish_labels(self) -> None:
        for fx in self.fixups:
            if fx.done:
                continue
            name = fx.label.name
            entry = self.label_at.get(name)
            if entry is None:
                other = next((f for f in self.decls.order
                              if f is not self.sig and name in f.labels), None)
                if other is not None:
                    self.rep.error(fx.label.pos, "E014", f"label `{name}` is in function "
                                                         f"`{other.name}`: jumps stay inside "
                                                         f"their function")
                else:
                    self.rep.error(fx.label.pos, "E007", f"undefined label `{name}`")
                continue
            if entry[1] != fx.region:
                self.rep.error(fx.label.pos, "E014", f"`{name}` is across the boundary of a "
                                                     f"`with` block: control flow cannot leave "
                                                     f"or enter one")
                continue
            self.unit.patch_pc(fx.pc, entry[0])
            fx.done = True
        rows = self.unit.rows
        for fx in self.fixups:
            if not fx.done:
                continue
            me = rows[fx.pc][0]
            t = rows[fx.pc][PC_SLOT]
            want, what = (JOIN, "a `join` that names this jmp") if me == JMP.code else \
                (JMP, "a `jmp` that targets this join")
            if rows[t][0] != want.code or rows[t][PC_SLOT] != fx.pc:
                self.rep.error(fx.label.pos, "E007", f"`{fx.label.name}` must label {what}")
            elif cond_parts(rows[fx.pc][1])[0] == CMP_ALWAYS:
                pos = Pos(*self.unit.lines[fx.pc])
                if me == JMP.code and rows[fx.pc + 1][0] not in (JOIN.code, END.code):
                    self.rep.error(pos, "E007", "an unconditional `jmp` must be followed by a "
                                                "`join` or the end of the function")
                if me == JOIN.code and rows[fx.pc - 1][0] not in (JMP.code, BEGIN.code):
                    self.rep.error(pos, "E007", "an unconditional `join` must come right after "
                                                "a `jmp` or the start of the function")

    # ---- operands -----------------------------------------------------------------------
    def target(self, o, want) -> Ref:
        """Resolve a cell the instruction writes, and check it may be written."""
        if isinstance(o, Literal):
            raise Fail(o.pos, "E008", f"cannot write to literal `{o.lit.text}`")
        if isinstance(o, Len):
            raise Fail(o.pos, "E008", f"`{describe(o)}` is read-only")
        ref = self.res.resolve(o, want)
        self.check_write(ref)
        return ref

    def check_write(self, ref: Ref) -> None:
        if ref.const:
            raise Fail(ref.pos, "E008", f"cannot write constant `{ref.text}`")
        for g in self.guards:
            if any(overlaps(ref, r) for r in g.refs):
                raise Fail(ref.pos, "E013", f"the body of `for {g.counter}` must not write "
                                            f"`{ref.text}` (its counter or a bound)")
        p = ref.param
        if p is not None:
            self.written.add(p)

    # ---- instruction statements ---------------------------------------------------------
    def candidates(self, st: Instr) -> list[Match]:
        exact, relaxed, errors = [], [], []
        for m in st.matches:
            if m.fn is not None:
                table = fn_table(m.shape)
                if m.fn.name not in {f.name for f in table}:
                    other = FN2 if table is FN1 else FN1
                    if m.fn.name in {f.name for f in other}:
                        n = 2 if other is FN2 else 1
                        errors.insert(0, Fail(m.fn.pos, "E009", f"`{m.fn.name}` takes {n} "
                                                                f"argument{'s' * (n > 1)}"))
                    else:
                        errors.insert(0, Fail(m.fn.pos, "E012", f"unknown function "
                                                                f"`{m.fn.name}`"))
                    continue
            fit = self.fit(m)
            if isinstance(fit, Fail):
                errors.append(fit)
            else:
                (exact if fit else relaxed).append(m)
        if not exact and not relaxed:
            raise errors[0]
        return exact + relaxed

    def fit(self, m: Match) -> bool | Fail:
        """True: literals exactly where the shape takes immediates; False: a literal source
        that becomes a constant; a Fail when the operand kinds do not fit."""
        exact = True
        for k, kind in enumerate(m.shape.operands):
            o = m.operands.get(k)
            if o is None:
                continue
            try:
                lit = self.res.as_literal(o) is not None
            except Fail as f:
                return f
            if kind in ("imm", "k") and not lit:
                what = "bit count" if kind == "k" else "immediate"
                return Fail(o.pos, "E008", f"the {what} of `{_generic(m)}` must be a literal, "
                                           f"not `{describe(o)}`")
            if kind == "y" and lit:
                return Fail(o.pos, "E008", f"cannot write to `{describe(o)}`")
            if kind == "a" and lit:
                exact = False
        return exact

    def pick_op(self, m: Match) -> Op:
        shape = m.shape
        if not shape.ops[0].types:
            return shape.ops[0]
        if shape.dst is not None:
            src = m.operands[shape.operands.index("a")]
            ts = self.res.peek_type(src)
            if ts is None:
                raise Fail(src.pos, "E004", f"literal `{describe(src)}` has no type to convert "
                                            f"from: convert a cell")
            op = op_for(shape.family, shape.dst, ts)
            if op is None:
                raise Fail(src.pos, "E004", f"`{describe(src)}` is already {ts.name_}: no "
                                            f"conversion needed")
            return op
        t = None
        for k, kind in enumerate(shape.operands):
            if kind in ("y", "a"):
                t = self.res.peek_type(m.operands[k])
                if t is not None:
                    break
        if t is None:
            raise Fail(m.operands[0].pos, "E004", "no cell operand to take a type from")
        op = op_for(shape.family, t)
        if op is None:
            first = next(o for k, o in sorted(m.operands.items()))
            raise Fail(first.pos, "E004", f"`{_generic(m)}` does not exist for {t.name_} cells")
        return op

    def instr(self, st: Instr) -> None:
        cands = self.candidates(st)
        fam = cands[0].shape.family
        m = cands[0]
        if fam in ("jmp", "join"):
            return self.jump(m, st)
        if fam in ("call", "uncall"):
            return self.call(m, st)
        if fam == "trace":
            return self.trace(m, st)
        if fam == "assert":
            cc, a, b, _ = self.res.condition(m.cond)
            self.emit(ASSERT, [cc, a, b], st.pos)
            return
        first_error = None
        for m in cands:
            try:
                op = self.pick_op(m)
                break
            except Fail as f:
                first_error = first_error or f
        else:
            raise first_error
        self.data(m, op, st.pos)

    def data(self, m: Match, op: Op, pos: Pos) -> None:
        values: list[int] = []
        targets: list[Ref] = []
        sources: list[Ref] = []
        for k, kind in enumerate(op.operands):
            o = m.operands.get(k)
            if kind == "y":
                ref = self.target(o, op.types[0] if op.types else None)
                targets.append(ref)
                values.append(ref.word)
            elif kind == "a":
                ref = self.res.resolve(o, op.types[-1] if op.types else None)
                sources.append(ref)
                values.append(ref.word)
            elif kind == "imm":
                values.append(self.res.word_of(self.res.as_literal(o), op.type))
            elif kind == "k":
                lit = self.res.as_literal(o)
                if lit.lit.kind != "int" or not 0 <= int(lit.lit.value) <= 63:
                    raise Fail(o.pos, "E006", f"bit count `{lit.lit.text}` is not in 0..63")
                values.append(int(lit.lit.value))
            elif kind == "fn":
                table = fn_table(op)
                fn = next(f for f in table if f.name == m.fn.name)
                if op.type not in fn.types:
                    raise Fail(m.fn.pos, "E004", f"`{fn.name}` does not exist for "
                                                 f"{op.type.name_} cells")
                values.append(fn.id)
        for i, t in enumerate(targets):
            for s in sources:
                if overlaps(t, s):
                    raise Fail(s.pos, "E005", f"`{s.text}` is also the target `{t.text}`: a "
                                              f"source may not alias the target")
            for t2 in targets[:i]:
                if overlaps(t, t2):
                    raise Fail(t.pos, "E005", f"`{t.text}` and `{t2.text}` are the same cell")
            for o in targets + sources:
                for ix in index_refs(o):
                    if overlaps(t, ix):
                        raise Fail(t.pos, "E005", f"`{t.text}` is the index of `{o.text}`: an "
                                                  f"update may not write an index it uses")
        self.emit(op, values, pos)

    def jump(self, m: Match, st: Instr) -> None:
        op = m.shape.ops[0]
        cc, a, b, _ = self.res.condition(m.cond)
        pc = self.emit(op, [cc, a, b, 0], st.pos)
        self.fixups.append(Fixup(pc, m.label, self.region))

    def call(self, m: Match, st: Instr) -> None:
        ce = m.call
        callee = self.decls.funcs.get(ce.name)
        if callee is None:
            raise Fail(ce.pos, "E012", f"unknown function `{ce.name}`")
        n = len(callee.params)
        if len(ce.args) != n:
            raise Fail(ce.pos, "E009", f"`{ce.name}` takes {n} argument{'s' * (n != 1)}, "
                                       f"not {len(ce.args)}")
        refs = []
        for o, p in zip(ce.args, callee.params):
            if p.is_array:
                r = self.res.array(o)
                if r.type != p.type:
                    raise Fail(o.pos, "E004", f"`{r.text}` is {r.type.name_}[], parameter "
                                              f"`{p.name}` of `{ce.name}` is {p.type.name_}[]")
                have = r.sym.length if r.sym is not None else -1
                if p.length > 0 and have is not None and have > 0 and have != p.length:
                    raise Fail(o.pos, "E004", f"`{r.text}` has {have} cells, parameter "
                                              f"`{p.name}` of `{ce.name}` takes {p.length}")
            else:
                if isinstance(o, Len) and self.res.as_literal(o) is None:
                    raise Fail(o.pos, "E008", f"`{describe(o)}` cannot be passed by reference")
                r = self.res.resolve(o, p.type)
            refs.append(r)
        k = self.unit.callsite(CallSite(callee.index, [
            Arg(r.word, r.length if r.array else None) for r in refs]))
        self.calls.append(CallRecord(self.sig, callee, refs, ce.pos, list(self.guards)))
        self.emit(m.shape.ops[0], [k], st.pos)

    def trace(self, m: Match, st: Instr) -> None:
        words = []
        for o in m.trace.operands:
            if isinstance(o, Literal):
                raise Fail(o.pos, "E008", f"trace takes cells, not the literal `{o.lit.text}`")
            words.append(self.res.resolve(o, INT if isinstance(o, Len) else None).word)
        self.emit(TRACE, [self.unit.trace(Trace(m.trace.message, words))], st.pos)

    # ---- locals -------------------------------------------------------------------------
    def declare(self, name: Name, spec_type, length: int | None,
                shadow: bool = False) -> CellSym:
        prev = self.scope.get(name.name)
        if prev is not None and not shadow:
            raise Fail(name.pos, "E003", f"`{name.name}` is already declared in "
                                         f"`{self.sig.name}` (line {prev.pos.line})")
        size = 1 if length is None else length
        if self.frame + size > MAX_LENGTH:
            raise Fail(name.pos, "E006", f"the frame of `{self.sig.name}` exceeds {MAX_LENGTH} "
                                         f"cells")
        sym = CellSym(name.name, spec_type, length, MODE_L, self.frame, "local", name.pos)
        self.locals.append(Local(name.name, spec_type, self.frame, length))
        self.frame += size
        self.scope[name.name] = sym
        return sym

    def room(self, n: int, pos: Pos) -> None:
        """Fail unless n more instructions fit in the program."""
        if self.unit.pc + n > MAX_CODE:
            raise Fail(pos, "E006", f"the program would exceed {MAX_CODE} instructions")

    def local(self, st: LocalDecl) -> None:
        length = st.spec.length if st.spec.array else None
        if st.emit:
            self.room(length or 1, st.pos)
        sym = self.declare(st.name, st.spec.type, length)
        if st.emit:
            for k in range(sym.size):
                self.emit(ALLOC, [operand(MODE_L, sym.loc + k)], st.pos)

    def delocal(self, st: Delocal) -> None:
        name = st.name.name
        sym = self.scope.get(name)
        if sym is None:
            if name in self.decls.cells:
                raise Fail(st.name.pos, "E008", f"`{name}` is not a local of `{self.sig.name}`")
            raise Fail(st.name.pos, "E002", f"undefined name `{name}`")
        if sym.kind != "local":
            raise Fail(st.name.pos, "E008", f"`{name}` is a parameter, not a local")
        for k in range(sym.size):
            ref = Ref(operand(MODE_L, sym.loc + k), sym.type, name, st.name.pos, sym=sym)
            self.check_write(ref)
        self.room(sym.size, st.pos)
        for k in range(sym.size):
            self.emit(FREE, [operand(MODE_L, sym.loc + k)], st.pos)
        del self.scope[name]

    # ---- structured sugar (shapes documented in docs/rasm.md) ---------------------------
    def if_(self, st: If) -> None:
        n = self.unit.new_id()
        c = self.res.condition(st.cond, negate=True)
        test = self.fork(JMP, c[:3], 0, st.pos, f"if{n}")
        self.block(st.then)
        fi_cond = st.fi_cond if st.fi_cond is not None else st.cond
        if st.els is not None:
            skip = self.fork(JMP, (0, 0, 0), 0, st.else_pos, f"if{n}.endthen")
            els = self.fork(JOIN, (0, 0, 0), test, st.else_pos, f"if{n}.else")
            self.unit.patch_pc(test, els)
            self.block(st.els)
            d = self.res.condition(fi_cond)
            fi = self.fork(JOIN, d[:3], skip, st.fi_pos, f"if{n}.fi")
            self.unit.patch_pc(skip, fi)
        else:
            d = self.res.condition(fi_cond, negate=True)
            fi = self.fork(JOIN, d[:3], test, st.fi_pos, f"if{n}.fi")
            self.unit.patch_pc(test, fi)

    def from_(self, st: From) -> None:
        n = self.unit.new_id()
        c = self.res.condition(st.cond, negate=True)
        top = self.fork(JOIN, c[:3], 0, st.pos, f"from{n}")
        self.block(st.body)
        d = self.res.condition(st.until)
        test = self.fork(JMP, d[:3], 0, st.until_pos, f"from{n}.until")
        self.block(st.loop)
        back = self.fork(JMP, (0, 0, 0), top, st.until_pos, f"from{n}.back")
        exit_ = self.fork(JOIN, (0, 0, 0), test, st.until_pos, f"from{n}.exit")
        self.unit.patch_pc(top, back)
        self.unit.patch_pc(test, exit_)

    def for_(self, st: For) -> None:
        res = self.res
        lits = [res.as_literal(st.lo), res.as_literal(st.hi)]
        for o, lit in zip((st.lo, st.hi), lits):
            if lit is None and res.peek_type(o) != INT:
                raise Fail(o.pos, "E004", f"loop bound `{describe(o)}` is "
                                          f"{res.peek_type(o).name_}, not int")
        vals = [res.word_of(lit, INT) if lit is not None else None for lit in lits]
        guard_refs: list[Ref] = []
        if vals[0] is not None and vals[1] is not None:
            if vals[0] > vals[1]:
                raise Fail(st.lo.pos, "E006", f"empty range {vals[0]}..{vals[1]}: the lower "
                                              f"bound must not exceed the upper")
        else:
            lo, hi = res.resolve(st.lo, INT), res.resolve(st.hi, INT)
            self.emit(ASSERT, [cond_word(CMP_LE, INT), lo.word, hi.word], st.pos)
        for o, lit in zip((st.lo, st.hi), lits):
            if lit is None:
                r = res.resolve(o, INT)
                guard_refs += [r] + ([r.index] if r.index is not None else [])
        # the bounds are read in the enclosing scope: resolve them before the counter (which
        # may shadow a name they use) comes into scope
        lo_w, hi_w = res.resolve(st.lo, INT).word, res.resolve(st.hi, INT).word
        shadowed = self.scope.get(st.var.name)
        sym = self.declare(st.var, INT, None, shadow=True)
        i = Ref(operand(MODE_L, sym.loc), INT, sym.name, st.var.pos, sym=sym)
        n = self.unit.new_id()
        self.emit(ALLOC, [i.word], st.pos)
        if vals[0] is None:
            self.emit(ADD_I, [i.word, lo_w], st.pos)
        elif vals[0] != 0:
            self.emit(ADDI_I, [i.word, vals[0]], st.pos)
        # Bottom-tested, so an iteration costs join + body + inc + jmp:
        #   empty: jmp exit if i == hi      (skips an empty range)
        #   top:   join back if i != lo     (came from `back` iff not the first iteration)
        #          body; inc i
        #   back:  jmp top if i < hi
        #   exit:  join empty if i == lo    (came from `empty` iff the range was empty)
        empty = self.fork(JMP, (cond_word(CMP_EQ, INT), i.word, hi_w), 0, st.pos, f"for{n}.empty")
        top = self.fork(JOIN, (cond_word(CMP_NE, INT), i.word, lo_w), 0, st.pos, f"for{n}")
        self.guards.append(Guard([i] + guard_refs, sym.name))
        try:
            self.block(st.body)
        finally:
            self.guards.pop()
        self.emit(INC_I, [i.word], st.end_pos)
        back = self.fork(JMP, (cond_word(CMP_LT, INT), i.word, hi_w), top, st.end_pos,
                         f"for{n}.back")
        exit_ = self.fork(JOIN, (cond_word(CMP_EQ, INT), i.word, lo_w), empty, st.end_pos,
                          f"for{n}.exit")
        self.unit.patch_pc(top, back)
        self.unit.patch_pc(empty, exit_)
        if vals[1] is None:
            self.emit(SUB_I, [i.word, hi_w], st.end_pos)
        elif vals[1] != 0:
            self.emit(SUBI_I, [i.word, vals[1]], st.end_pos)
        self.emit(FREE, [i.word], st.end_pos)
        if shadowed is None:
            del self.scope[sym.name]
        else:
            self.scope[sym.name] = shadowed

    def with_(self, st: With) -> None:
        n = self.unit.new_id()
        outer = self.region
        before = dict(self.scope)
        self.region = outer + ((n, "with"),)
        a0 = self.unit.pc
        self.block(st.body)
        a1 = self.unit.pc
        self.resolve_fixups(a0, a1)
        after_a = dict(self.scope)
        self.region = outer + ((n, "do"),)
        self.block(st.do)
        self.region = outer + ((n, "undo"),)
        try:
            self.room(a1 - a0, st.pos)
            self.emit_inverse(a0, a1)
        finally:
            self.region = outer
        for name, sym in after_a.items():           # declared in the with block: freed again
            if before.get(name) is not sym and self.scope.get(name) is sym:
                del self.scope[name]
        for name, sym in before.items():            # delocal'ed in it: allocated again
            if after_a.get(name) is not sym and name not in self.scope:
                self.scope[name] = sym

    def emit_inverse(self, a0: int, a1: int) -> None:
        """Append the exact inverse of the rows [a0, a1) (mirrored, opcodes inverted)."""
        if a1 == a0 or self.rep.has_errors:
            # after an error the block may hold half-built forks; no program is produced,
            # so skip the inverse and keep checking the rest of the file
            return
        unit = self.unit
        rows = [list(r) for r in unit.rows[a0:a1]]
        for fx in self.fixups:                      # left-over jumps are reported later
            if not fx.done and a0 <= fx.pc < a1:
                rows[fx.pc - a0][PC_SLOT] = a0
        base = unit.pc
        for r in rows:
            if r[0] in (JMP.code, JOIN.code):
                r[PC_SLOT] += base - a0
        inv = invert_rows(np.array(rows, dtype=np.int64).reshape(-1, ROW_WIDTH), base)
        self.bind_pending(base)
        for k, r in enumerate(inv.tolist()):
            unit.rows.append([int(v) for v in r])
            unit.lines.append(unit.lines[a1 - 1 - k])
            unit.regions.append(self.region)
        for p in range(a0, a1):
            if p in unit.labels:
                unit.label(base + (a1 - 1 - p), unit.labels[p] + ".undo")


def compile_function(unit: Unit, decls: Declarations, sig: FuncSig, rep: Reporter,
                     calls: list[CallRecord], direct_writes: dict[int, set[int]]) -> Function:
    """Emit one function into `unit`; returns its Function record (params' `written` unset)."""
    return FunctionCompiler(unit, decls, sig, rep, calls, direct_writes).compile()
