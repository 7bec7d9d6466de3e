"""Pass 2: function bodies -> instructions.

One `FunctionCompiler` per function emits `begin`, the body and `end` into the unit.  It is
driven statement by statement (`stmt`, and for structured sugar `if_begin`/`if_else`/`if_end`,
`from_begin`/`from_end`, `for_begin`/`for_end`, `with_begin`/`with_do`/`with_end`), so the
.rasm parser can compile a body while it reads it and the Janus front end can walk its own
tree; `block` compiles a list of statements.

An instruction statement picks its opcode from the shapes it matched (isa/table.py through
shapes.py) and the types of its operands; an update `y OP= e` and every operand that is an
expression compile by compute-use-uncompute (lower.py); structured sugar expands into forks
and joins (docs/rasm.md, "How sugar expands"), with a condition's computation uncomputed on
every edge; raw `jmp`/`join` labels are resolved at the end of the function and their pairing
is checked.  Each statement that fails reports one diagnostic; compilation goes on with the
next statement.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from isa.functions import CMP_ALWAYS, CMP_EQ, CMP_GE, CMP_LE, CMP_LT, CMP_NE, cond_parts, cond_word
from isa.program import (
    MODE_L,
    MODE_N,
    MODE_P,
    MODE_X,
    Arg,
    CallSite,
    Function,
    Local,
    Param,
    Trace,
    operand,
)
from isa.table import INVERSE, OP_BY_NAME, ROW_WIDTH, Op, op_for
from isa.types import FLOAT, INT, LNS, NumType

from .calls import CallRecord, Guard
from .declarations import Declarations
from .diagnostics import Fail, Pos, Reporter
from .exprs import BOOL, names_read, text
from .invert import invert_rows
from .literals import Lit
from .lower import ALWAYS, ExprCompiler, Test
from .nodes import (
    Compare,
    Delocal,
    Deriv,
    For,
    From,
    If,
    Index,
    Instr,
    Label,
    Len,
    Literal,
    LocalDecl,
    Match,
    Name,
    Recovered,
    Show,
    StackOp,
    Swap,
    Update,
    With,
)
from .operands import Resolver, describe
from .parser import MAX_LENGTH
from .symbols import CellSym, FuncSig, Ref, index_refs, overlaps
from .unit import JMP, JOIN, PC_SLOT, Unit

BEGIN, END = OP_BY_NAME["begin"], OP_BY_NAME["end"]
ALLOC, FREE = OP_BY_NAME["alloc"], OP_BY_NAME["free"]
ASSERT, TRACE = OP_BY_NAME["assert"], OP_BY_NAME["trace"]
INC_I, DEC_I = op_for("inc", INT), op_for("dec", INT)
ADD_I, SUB_I, ADDI_I, SUBI_I = (op_for(f, INT) for f in ("add", "sub", "addi", "subi"))
MAX_CODE = 1 << 20            # instructions in one program (nested `with` blocks double code)


class Scope(dict):
    """The names in scope (parameters and live locals), with a version that changes whenever
    they do (the fast path caches what names resolve to)."""
    version = 0

    def __setitem__(self, key, value) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        self.version += 1
        super().__delitem__(key)

    def pop(self, *args):
        self.version += 1
        return super().pop(*args)


class CodeLimit(Exception):
    """The program reached MAX_CODE instructions: compiling more is pointless."""

    def __init__(self, pos: Pos):
        super().__init__("code limit")
        self.pos = pos


@dataclass
class Fixup:
    """A raw jmp/join whose pc operand names a label."""
    pc: int
    label: Name
    region: tuple
    done: bool = False


@dataclass
class Cond:
    """A condition computed at a fork or join: its test and the code that computed it."""
    test: Test
    lo: int                   # the code that computed it: rows [lo, hi)
    hi: int
    mark: int                 # temporaries taken from here on hold it
    pos: Pos
    temps: int = 0            # temporaries it holds at once
    copies: int = 1           # runs of its code emitted (computes and uncomputes)

    @property
    def code(self) -> bool:
        return self.hi > self.lo


@dataclass
class Handle:
    """An open structured statement (if/from/for/with) of the streaming interface."""
    kind: str
    n: int
    pos: Pos
    data: dict = field(default_factory=dict)


def _generic(m: Match) -> str:
    """The statement form with placeholder operands, e.g. `rot x, y, t`."""
    return m.shape.syntax.format("y", "a", "b", fn="f", cond="a < b", msg="", label="L",
                                 call="f(...)", trace='"..."')


class FunctionCompiler(ExprCompiler):
    JMP, JOIN = JMP, JOIN

    def __init__(self, unit: Unit, decls: Declarations, sig: FuncSig, rep: Reporter,
                 calls: list[CallRecord], direct_writes: dict[int, set[int]]):
        self.unit, self.decls, self.sig, self.rep = unit, decls, sig, rep
        self.calls = calls
        self.written = direct_writes.setdefault(sig.index, set())
        self.scope = Scope({p.name: p for p in sig.params})
        cells = decls.cells if decls.procedures_see_globals or sig.name == "main" else {}
        self.res = Resolver(unit, cells, self.scope)
        self.locals: list[Local] = []
        self.frame = 0
        self.region: tuple = ()
        self.pending: list[Label] = []
        self.label_at: dict[str, tuple[int, tuple, Pos]] = {}
        self.fixups: list[Fixup] = []
        self.guards: list[Guard] = []
        self.undefined: list[Name] = []
        self.here: Pos = sig.decl.pos
        self.begin_pc = -1
        self.init_temps()

    # ---- driver -------------------------------------------------------------------------
    def begin(self) -> None:
        d = self.sig.decl
        self.begin_pc = self.emit(BEGIN, [self.sig.index], d.pos)

    def finish(self, end_pos: Pos) -> Function:
        end = self.emit(END, [self.sig.index], end_pos)
        self.finish_labels()
        params = [Param(p.name, p.type, p.is_array, False,
                        p.length if p.is_array and p.length >= 0 else None, p.stack)
                  for p in self.sig.params]
        return Function(self.sig.name, self.begin_pc, end, params, self.locals, self.frame)

    def compile(self) -> Function:
        """Compile a body given as statements (FuncDecl.body)."""
        self.begin()
        self.block(self.sig.decl.body)
        return self.finish(self.sig.decl.end_pos)

    def block(self, stmts: list) -> None:
        for s in stmts:
            try:
                self.stmt(s)
            except Fail as f:
                self.rep.fail(f)

    def stmt(self, s) -> None:
        """Compile one statement (any node of nodes.Stmt)."""
        if s is None:
            return
        pc0 = self.unit.pc
        n_stats = len(self.unit.stats)
        self.stmt_temps = 0
        self.here = s.pos
        self.forget()
        mark = self.temp_mark()
        try:
            self._stmt(s)
        finally:
            self.release(mark)
        if self.stmt_temps and len(self.unit.stats) == n_stats:   # (conditions record themselves)
            self.unit.stats.append((s.pos, self.unit.pc - pc0, self.stmt_temps))

    def _stmt(self, s) -> None:
        if isinstance(s, Update):
            self.update(s)
        elif isinstance(s, Deriv):
            self.deriv(s)
        elif isinstance(s, Instr):
            self.instr(s)
        elif isinstance(s, Label):
            self.pending.append(s)
        elif isinstance(s, LocalDecl):
            self.local(s)
        elif isinstance(s, Delocal):
            self.delocal(s)
        elif isinstance(s, Swap):
            self.swap(s)
        elif isinstance(s, StackOp):
            self.stack_op(s)
        elif isinstance(s, Show):
            self.show(s)
        elif isinstance(s, If):
            h = self.if_begin(s.cond, s.pos)
            self.block(s.then)
            if s.els is not None:
                self.if_else(h, s.else_pos)
                self.block(s.els)
            self.if_end(h, s.fi_cond, s.fi_pos)
        elif isinstance(s, From):
            h = self.from_begin(s.cond, s.pos)
            self.block(s.body)
            self.from_end(h, s.until, s.until_pos, s.loop)
        elif isinstance(s, For):
            h = self.for_begin(s.var, s.lo, s.hi, s.pos)
            try:
                self.block(s.body)
            finally:
                self.for_end(h, s.end_pos)
        elif isinstance(s, With):
            h = self.with_begin(s.pos)
            self.block(s.body)
            self.with_do(h, s.do_pos)
            self.block(s.do)
            self.with_end(h, s.end_pos)
        elif isinstance(s, Recovered):
            self.block(s.body)

    # ---- emission and labels ------------------------------------------------------------
    def emit(self, op: Op, values: list[int], pos: Pos) -> int:
        pc = self.unit.emit(op, values, pos, self.region)
        if pc >= MAX_CODE:
            raise CodeLimit(pos)
        if self.pending:
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
                self.undefined.append(fx.label)     # reported once every function is known
                continue
            if entry[1] != fx.region:
                self.rep.error(fx.label.pos, "E014", f"`{name}` is across the boundary of a "
                                                     f"`with` block: control flow cannot leave "
                                                     f"or enter one")
                continue
            self.unit.patch_pc(fx.pc, entry[0])
            fx.done = True
        unit = self.unit
        for fx in self.fixups:
            if not fx.done:
                continue
            me = unit.opcode(fx.pc)
            t = unit.slot(fx.pc, PC_SLOT)
            want, what = (JOIN, "a `join` that names this jmp") if me == JMP.code else \
                (JMP, "a `jmp` that targets this join")
            if unit.opcode(t) != want.code or unit.slot(t, PC_SLOT) != fx.pc:
                self.rep.error(fx.label.pos, "E007", f"`{fx.label.name}` must label {what}")
            elif cond_parts(unit.slot(fx.pc, 1))[0] == CMP_ALWAYS:
                pos = Pos(*unit.line(fx.pc))
                if me == JMP.code and unit.opcode(fx.pc + 1) not in (JOIN.code, END.code):
                    self.rep.error(pos, "E007", "an unconditional `jmp` must be followed by a "
                                                "`join` or the end of the function")
                if me == JOIN.code and unit.opcode(fx.pc - 1) not in (JMP.code, BEGIN.code):
                    self.rep.error(pos, "E007", "an unconditional `join` must come right after "
                                                "a `jmp` or the start of the function")

    def report_labels(self, compilers: list[FunctionCompiler]) -> None:
        """Report the jumps to labels this function does not define (E014 when another
        function defines them, else E007)."""
        for lab in self.undefined:
            other = next((fc.sig for fc in compilers
                          if fc is not self and lab.name in fc.label_at), None)
            if other is not None:
                self.rep.error(lab.pos, "E014", f"label `{lab.name}` is in function "
                                                f"`{other.name}`: jumps stay inside their "
                                                f"function")
            else:
                self.rep.error(lab.pos, "E007", f"undefined label `{lab.name}`")

    def copy_rows(self, a0: int, a1: int, inverse: bool, suffix: str) -> None:
        """Append a copy of the rows [a0, a1): as they are (a condition computed again on a
        second edge) or inverted (uncomputed: reversed, each opcode its inverse, jumps
        mirrored).  Jumps inside the rows are relocated; labels get `suffix`."""
        if a1 == a0 or self.rep.has_errors:
            # after an error the rows may hold half-built forks; no program is produced
            return
        unit = self.unit
        self.room(a1 - a0, self.here)
        W = ROW_WIDTH
        flat = unit.code[a0 * W:a1 * W].tolist()
        rows = [flat[k:k + W] for k in range(0, len(flat), W)]
        base = unit.pc
        jumps = (JMP.code, JOIN.code)
        for r in rows:
            if r[0] in jumps:
                r[PC_SLOT] += base - a0
        flat_lines = unit.lines[a0 * 3:a1 * 3].tolist()
        lines = [flat_lines[k:k + 3] for k in range(0, len(flat_lines), 3)]
        if inverse:
            rows = _inverted(rows, base)
            lines.reverse()
        self.bind_pending(base)
        for r, ln in zip(rows, lines):
            unit.emit_row(r, ln, self.region)
        for p in range(a0, a1):
            if p in unit.labels:
                q = base + (a1 - 1 - p if inverse else p - a0)
                unit.label(q, unit.labels[p] + suffix)

    def uncompute(self, a0: int, a1: int) -> None:
        self.copy_rows(a0, a1, True, ".undo")

    # ---- operands -----------------------------------------------------------------------
    def target(self, o) -> Ref:
        """Resolve a cell a statement writes (its index computed if it is an expression), and
        check it may be written."""
        if isinstance(o, Literal):
            raise Fail(o.pos, "E008", f"cannot write to literal `{o.lit.text}`")
        if isinstance(o, Len):
            raise Fail(o.pos, "E008", f"`{describe(o)}` is read-only")
        if not isinstance(o, (Name, Index)):
            raise Fail(o.pos, "E008", f"cannot write to `{text(o)}`: a target is a cell or an "
                                      f"array element")
        if isinstance(o, Name):
            ref = self.res.resolve(o, None)
        else:
            ref = self.element(o)
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

    def check_aliases(self, targets: list[Ref], sources: list[Ref]) -> None:
        """The assembler's definite aliasing checks on one instruction's operands (E005)."""
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

    def room(self, n: int, pos: Pos) -> None:
        """Fail unless n more instructions fit in the program."""
        if self.unit.pc + n > MAX_CODE:
            raise Fail(pos, "E006", f"the program would exceed {MAX_CODE} instructions")

    def negate(self, test: Test) -> Test:
        if test.cc & 15 == CMP_ALWAYS:
            z = self.const_ref(INT, 0, self.here, "0").word
            return Test(cond_word(CMP_NE, INT), z, z)
        return test.negated()

    def condition(self, e, pos: Pos) -> Cond:
        """Type-check and compute a condition now; the caller uncomputes it."""
        self.forget()
        self.here = pos
        self.typed(e, BOOL)
        mark = self.temp_mark()
        lo = self.unit.pc
        test = self.test(e)
        return Cond(test, lo, self.unit.pc, mark, pos, len(self.live_temps) - mark)

    def again(self, c: Cond, inverse: bool) -> None:
        """The condition's code once more: computed on a second edge, or uncomputed."""
        self.copy_rows(c.lo, c.hi, inverse, ".undo" if inverse else ".again")
        c.copies += 1

    def done(self, c: Cond) -> None:
        """Uncompute a condition here, give back its temporaries and record what it cost."""
        self.again(c, True)
        self.release(c.mark)

    def same_code(self, c: Cond, d: Cond) -> bool:
        """Do two conditions compute the same thing into the same temporaries?"""
        W = ROW_WIDTH
        code = self.unit.code
        return c.code and c.hi - c.lo == d.hi - d.lo and c.test.words == d.test.words and \
            code[c.lo * W:c.hi * W] == code[d.lo * W:d.hi * W]

    def record(self, c: Cond) -> None:
        if c.code:
            self.unit.stats.append((c.pos, (c.hi - c.lo) * c.copies, c.temps))

    # ---- updates --------------------------------------------------------------------------
    def update(self, st: Update) -> None:
        tgt = st.target
        if isinstance(tgt, (Literal, Len)) or not isinstance(tgt, (Name, Index)):
            self.target(tgt)
        ty = self.typer
        t = ty.infer(tgt)
        ty.settle(tgt, t)
        self.typed(st.expr, t)
        risky = self.check_target_reads(tgt, [st.expr])
        lo = self.unit.pc
        y = self.target(tgt)
        plan = self.plan(y, st.op, st.expr, st.pos)
        self.alias_checks(y, risky, plan, st.pos)
        hi = self.unit.pc
        for ins in plan:
            self.emit(*ins)
        self.uncompute(lo, hi)

    # ---- instruction statements ---------------------------------------------------------
    def instr(self, st: Instr) -> None:
        m = st.matches[0]
        fam = m.shape.family
        if fam in ("jmp", "join"):
            return self.jump(m, st)
        if fam in ("call", "uncall"):
            return self.call(m, st)
        if fam == "trace":
            return self.trace(m, st)
        if fam == "assert":
            return self.assert_(m, st)
        self.data(m, st.pos)

    def data(self, m: Match, pos: Pos) -> None:
        shape = m.shape
        kinds = shape.operands
        ty = self.typer
        types = []
        for k, kind in enumerate(kinds):
            o = m.operands.get(k)
            if kind in ("y", "a"):
                if kind == "y" and isinstance(o, Literal):
                    raise Fail(o.pos, "E008", f"cannot write to `{describe(o)}`")
                t = ty.infer(o)
                if t == BOOL:
                    raise Fail(o.pos, "E004", f"`{text(o)}` is a condition, not a value: "
                                              f"write a cell or an expression of one")
                types.append(t)
            elif kind in ("imm", "k"):
                if ty.infer(o) is not None:
                    what = "bit count" if kind == "k" else "immediate"
                    raise Fail(o.pos, "E008", f"the {what} of `{_generic(m)}` must be a "
                                              f"literal, not `{text(o)}`")
        t = next((x for x in types if x is not None), None)
        if shape.ops[0].types:
            if t is None:
                raise Fail(m.operands[0].pos, "E004", "no cell operand to take a type from")
            op = op_for(shape.family, t)
            if op is None:
                first = next(o for _, o in sorted(m.operands.items()))
                raise Fail(first.pos, "E004", f"`{_generic(m)}` does not exist for {t.name_} "
                                              f"cells")
        else:
            op = shape.ops[0]
        opt = op.operand_types
        for k, kind in enumerate(kinds):
            o = m.operands.get(k)
            if kind in ("y", "a", "imm", "k") and o is not None:
                want = opt[k] if kind != "k" else INT
                if kind in ("y", "a") and want is None:
                    ty.settle(o, ty.types[id(o)])
                    continue
                tt = ty.types[id(o)]
                if tt is not None and want is not None and tt != want:
                    raise Fail(o.pos, "E004", f"type mismatch: `{text(o)}` is {tt.name_}, "
                                              f"expected {want.name_}")
                ty.settle(o, want)
        writes = [m.operands[k] for k, kind in enumerate(kinds) if kind == "y"]
        reads = [m.operands[k] for k, kind in enumerate(kinds) if kind == "a"]
        for w in writes:
            if isinstance(w, (Name, Index)):
                # another target's index is read too (the whole element, for a scalar target:
                # so the message can say which element it indexes)
                others = [x if isinstance(w, Name) else x.index for x in writes
                          if isinstance(x, Index) and x is not w]
                self.check_target_reads(w, list(reads) + others)
        lo = self.unit.pc
        values: list[int] = []
        targets: list[Ref] = []
        sources: list[Ref] = []
        for k, kind in enumerate(kinds):
            o = m.operands.get(k)
            if kind == "y":
                ref = self.target(o)
                targets.append(ref)
                values.append(ref.word)
            elif kind == "a":
                ref = self.operand(o, opt[k])
                sources.append(ref)
                values.append(ref.word)
            elif kind == "imm":
                values.append(self.literal_word_of(o, op.type))
            elif kind == "k":
                w = self.literal_word_of(o, INT)
                if not 0 <= w <= 63:
                    raise Fail(o.pos, "E006", f"bit count `{text(o)}` is not in 0..63")
                values.append(w)
        hi = self.unit.pc
        self.check_aliases(targets, sources)
        self.emit(op, values, pos)
        self.uncompute(lo, hi)

    def literal_word_of(self, o, t: NumType) -> int:
        w = self.typer.consts.get(id(o))
        if w is None:
            raise Fail(o.pos, "E008", f"`{text(o)}` must be a literal")
        return w

    def swap(self, st: Swap) -> None:
        if isinstance(st.a, Name) and isinstance(st.b, Name):
            sa = self.res.lookup(st.a.name, st.a.pos)
            sb = self.res.lookup(st.b.name, st.b.pos)
            if sa.is_array or sb.is_array:
                return self.swap_arrays(st, sa, sb)
        shape = next(s for s in _shapes("swap"))
        m = Match(shape, {0: st.a, 1: st.b})
        self.data(m, st.pos)

    def swap_arrays(self, st: Swap, sa: CellSym, sb: CellSym) -> None:
        """`a <=> b` of two whole arrays (or stacks) of one length: element by element."""
        a, b = st.a, st.b
        assert isinstance(a, Name) and isinstance(b, Name)      # swap() looked them up
        if not (sa.is_array and sb.is_array) or sa.type != sb.type or sa.stack != sb.stack:
            raise Fail(b.pos, "E004", f"`{a.name}` and `{b.name}` cannot swap: whole arrays "
                                      f"swap with arrays of the same type (and stacks with "
                                      f"stacks)")
        if sa is sb:
            raise Fail(b.pos, "E005", f"`{a.name}` and `{b.name}` are the same array")
        la = sa.length if sa.mode != MODE_P else None
        lb = sb.length if sb.mode != MODE_P else None
        if la is not None and lb is not None and la != lb:
            raise Fail(b.pos, "E004", f"`{a.name}` has {la} cells and `{b.name}` {lb}: whole "
                                      f"arrays swap only with arrays of the same length")
        for sym, name in ((sa, a), (sb, b)):
            self.check_write(Ref(operand(sym.mode, sym.loc), sym.type, name.name, name.pos,
                                 array=True, sym=sym))
        n = la if la is not None else lb
        if n is not None and n <= 16:
            for k in range(n):
                lit = Literal(st.pos, Lit("int", k, str(k)))
                self.data(Match(_shapes("swap")[0], {0: Index(a.pos, a.name, lit),
                                                     1: Index(b.pos, b.name, lit)}), st.pos)
                self.forget()
            return
        if la is None and lb is None:
            length_a, length_b = Len(a.pos, a.name), Len(b.pos, b.name)
            self.forget()
            self.typed(length_a, INT)
            self.typed(length_b, INT)
            ra, rb = self.res.resolve(length_a, INT), self.res.resolve(length_b, INT)
            self.emit(ASSERT, [cond_word(CMP_EQ, INT), ra.word, rb.word,
                               self.message(f"`{a.name}` and `{b.name}` swap only if they have "
                                            f"the same length", [ra.word, rb.word],
                                            [f"len({a.name})", f"len({b.name})"])], st.pos)
        k = Name(st.pos, f"$swap{self.unit.new_id()}")
        hi = Len(st.pos, a.name if la is None else b.name)
        body = [Swap(st.pos, Index(a.pos, a.name, k), Index(b.pos, b.name, k))]
        self.stmt(For(st.pos, k, Literal(st.pos, Lit("int", 0, "0")), hi, body, st.pos))

    def jump(self, m: Match, st: Instr) -> None:
        op = m.shape.ops[0]
        if m.cond is None:
            test = ALWAYS
        else:
            c = self.condition(m.cond, st.pos)
            if c.code:
                raise Fail(m.cond.pos, "E008", f"the condition of a raw `{op.name}` must compare "
                                               f"cells or literals: `{text(m.cond)}` needs "
                                               f"code (use if/from, or compute it first)")
            test = c.test
        pc = self.emit(op, [test.cc, test.a, test.b, 0], st.pos)
        self.fixups.append(Fixup(pc, m.label, self.region))

    def assert_(self, m: Match, st: Instr) -> None:
        c = self.condition(m.cond, st.pos)
        msg = 0
        words = [c.test.a, c.test.b]
        if m.message is not None:
            msg = self.message(m.message, words, m.names or [])
        elif c.code:
            # a condition computed into temporaries: name the values by what they hold
            cond = m.cond
            names = [text(cond.left), text(cond.right)] if isinstance(cond, Compare) else \
                [text(cond), "0"]
            msg = self.message(f"assertion `{text(cond)}` is false", words, names)
        self.emit(ASSERT, [c.test.cc, c.test.a, c.test.b, msg], st.pos)
        self.done(c)
        self.record(c)

    def call(self, m: Match, st: Instr) -> None:
        ce = m.call
        callee = self.decls.funcs.get(ce.name)
        if callee is None:
            raise Fail(ce.pos, "E012", f"unknown function `{ce.name}`")
        n = len(callee.params)
        if len(ce.args) != n:
            raise Fail(ce.pos, "E009", f"`{ce.name}` takes {n} argument{'s' * (n != 1)}, "
                                       f"not {len(ce.args)}")
        lo = self.unit.pc
        refs, by_value = [], []
        ty = self.typer
        for o, p in zip(ce.args, callee.params):
            if p.is_array:
                r = self.res.array(o)
                if r.type != p.type:
                    raise Fail(o.pos, "E004", f"`{r.text}` is {r.type.name_}[], parameter "
                                              f"`{p.name}` of `{ce.name}` is {p.type.name_}[]")
                if p.stack and not (r.sym is not None and r.sym.stack):
                    raise Fail(o.pos, "E004", f"`{r.text}` is not a stack: parameter "
                                              f"`{p.name}` of `{ce.name}` is a stack")
                have = r.sym.length if r.sym is not None else -1
                if p.length > 0 and have is not None and have > 0 and have != p.length:
                    raise Fail(o.pos, "E004", f"`{r.text}` has {have} cells, parameter "
                                              f"`{p.name}` of `{ce.name}` takes {p.length}")
                by_value.append(False)
            else:
                if isinstance(o, Len) and self.res.as_literal(o) is None:
                    raise Fail(o.pos, "E008", f"`{describe(o)}` cannot be passed by reference")
                if isinstance(o, Name) and self.res.lookup(o.name, o.pos).is_array:
                    sym = self.res.lookup(o.name, o.pos)
                    what = "a stack" if sym.stack else "an array"
                    raise Fail(o.pos, "E004", f"`{o.name}` is {what}, parameter `{p.name}` of "
                                              f"`{ce.name}` is {p.type.name_}")
                t = ty.infer(o)
                if t is not None and t != p.type and not (t == BOOL and p.type == INT):
                    raise Fail(o.pos, "E004",
                        f"type mismatch: `{text(o)}` is {t.name_ if t != BOOL else t}, "
                                              f"expected {p.type.name_}")
                ty.settle(o, p.type)
                if isinstance(o, (Name, Index)) or id(o) in ty.consts:
                    r = self.operand(o, p.type)
                    by_value.append(False)
                else:
                    r = self.operand(o, p.type)         # an expression: passed by value
                    by_value.append(True)
            refs.append(r)
        hi = self.unit.pc
        k = self.unit.callsite(CallSite(callee.index, [
            Arg(r.word, r.length if r.array else None) for r in refs]))
        reads = [self.arg_reads(o) for o in ce.args]
        self.calls.append(CallRecord(self.sig, callee, refs, ce.pos, list(self.guards),
                                     by_value, reads))
        self.emit(m.shape.ops[0], [k], st.pos)
        self.uncompute(lo, hi)

    def deriv(self, st: Deriv) -> None:
        """`g += grad f(args) wrt x` / `d += jvp f(args) wrt x along v`: one addgrad/addjvp
        row whose callsite passes a scratch float temporary as f's first argument (its output)
        and then args; the target, wrt and along are float cells or float arrays of one
        length (docs/rasm.md, "Derivatives")."""
        ce = st.call
        what = f"{st.kind} {ce.name}"
        if st.op not in ("+=", "-="):
            raise Fail(st.op_pos, "E008", f"`{what}` is added (`+=`) or subtracted (`-=`), not "
                                          f"`{st.op}`")
        callee = self.decls.funcs.get(ce.name)
        if callee is None:
            raise Fail(ce.pos, "E012", f"unknown function `{ce.name}`")
        ps = callee.params
        if not ps or ps[0].is_array or ps[0].type != FLOAT:
            raise Fail(ce.pos, "E004", f"the first parameter of `{ce.name}` must be a float cell: "
                                       f"the output `{st.kind}` differentiates (f adds its value "
                                       f"into it)")
        n = len(ps) - 1
        args = list(ce.args)
        if len(args) not in (n, n + 1):
            raise Fail(ce.pos, "E009", f"`{st.kind} {ce.name}(...)` takes {n} argument"
                                       f"{'s' * (n != 1)} (all but the output), or {n + 1} with "
                                       f"the output cell first, not {len(args)}")

        def cells(o, role: str, write: bool) -> Ref:
            if isinstance(o, Name) and self.res.lookup(o.name, o.pos).is_array:
                r = self.res.array(o)
                if write:
                    self.check_write(r)
            elif isinstance(o, (Name, Index)):
                # typed first: an element's index (a literal one too) is an expression
                self.typer.settle(o, self.typer.infer(o))
                r = self.target(o) if write else self.operand(o, FLOAT)
            else:
                raise Fail(o.pos, "E008", f"the {role} of `{what}` is a cell or an array, not "
                                          f"`{text(o)}`")
            if r.type != FLOAT:
                raise Fail(o.pos, "E004", f"the {role} `{r.text}` is {r.type.name_}: derivatives "
                                          f"are taken of and with respect to float cells")
            return r

        lo = self.unit.pc
        y = cells(st.target, "target", True)
        w = cells(st.wrt, "wrt", False)
        v = cells(st.along, "along", False) if st.along is not None else None
        if st.kind == "jvp" and y.array:
            raise Fail(st.target.pos, "E008", f"the target of `{what}` is a cell (the directional "
                                              f"derivative is a number)")
        shaped = [w] + ([v] if v is not None else []) + ([y] if st.kind == "grad" else [])
        if any(r.array for r in shaped) and not all(r.array for r in shaped):
            bad = next(r for r in shaped if not r.array)
            raise Fail(bad.pos, "E004", f"`{bad.text}` is a cell, but `{what}` takes arrays here "
                                        f"(the target, wrt and along are all cells or all arrays)")
        if w.array:
            lens = {r.length for r in shaped if r.length is not None and r.length >= 0}
            if len(lens) > 1:
                raise Fail(st.wrt.pos, "E004", f"the arrays of `{what}` differ in length "
                                               f"({', '.join(str(x) for x in sorted(lens))})")
            dlen = lens.pop() if lens else -1
        else:
            dlen = -2
        refs, by_value = [], []
        ty = self.typer
        if len(args) == n + 1:          # the output cell given (as the disassembler writes it)
            out = cells(args.pop(0), "output", True)
            if out.array:
                raise Fail(out.pos, "E008", f"the output of `{what}` is a float cell")
        else:
            out = self.temp(FLOAT)
        for o, p in zip(args, ps[1:]):
            if p.is_array:
                r = self.res.array(o)
                if r.type != p.type:
                    raise Fail(o.pos, "E004", f"`{r.text}` is {r.type.name_}[], parameter "
                                              f"`{p.name}` of `{ce.name}` is {p.type.name_}[]")
                by_value.append(False)
            else:
                t = ty.infer(o)
                if t is not None and t != p.type and not (t == BOOL and p.type == INT):
                    raise Fail(o.pos, "E004", f"type mismatch: `{text(o)}` is {t}, expected "
                                              f"{p.type.name_}")
                ty.settle(o, p.type)
                r = self.operand(o, p.type)
                by_value.append(not (isinstance(o, (Name, Index)) or id(o) in ty.consts))
            refs.append(r)
        for r in refs + [w] + ([v] if v is not None else []):
            if overlaps(out, r):        # (check_aliases would call the output "the target")
                raise Fail(r.pos, "E005", f"`{r.text}` is also the output `{out.text}` of "
                                          f"`{what}`, the cell f adds its value into: the "
                                          f"derivative is taken with respect to f's inputs")
        self.check_aliases([y, out], refs + [w] + ([v] if v is not None else []))
        hi = self.unit.pc
        k = self.unit.callsite(CallSite(callee.index, [
            Arg(r.word, r.length if r.array else None) for r in [out] + refs]))
        reads = [[]] + [self.arg_reads(o) for o in args]
        self.calls.append(CallRecord(self.sig, callee, [out] + refs, ce.pos, list(self.guards),
                                     [False] + by_value, reads))
        sign = "add" if st.op == "+=" else "sub"
        op = OP_BY_NAME[f"{sign}{st.kind}.f"]
        if st.kind == "grad":
            self.emit(op, [k, y.word, w.word, dlen], st.pos)
        else:
            assert v is not None
            self.emit(op, [k, y.word, w.word, v.word, dlen], st.pos)
        self.uncompute(lo, hi)

    def arg_reads(self, o) -> list[Ref]:
        """The cells an argument's index expression (or by-value expression) reads."""
        if isinstance(o, (Name, Literal, Len)):
            return []
        out = []
        seen = names_read(o.index if isinstance(o, Index) else o, set())
        for name in sorted(seen):
            sym = self.res.lookup(name, o.pos)
            if sym.is_array:
                out.append(Ref(operand(sym.mode, sym.loc), sym.type, name, o.pos, array=True,
                               length=-1 if sym.mode == MODE_P else sym.length, sym=sym))
            else:
                out.append(Ref(operand(sym.mode, sym.loc), sym.type, name, o.pos, sym=sym,
                               const=sym.const))
        return out

    def trace(self, m: Match, st: Instr) -> None:
        lo = self.unit.pc
        words, names = [], []
        ty = self.typer
        for o in m.trace.operands:
            if isinstance(o, Literal):
                raise Fail(o.pos, "E008", f"trace takes cells, not the literal `{o.lit.text}`")
            t = ty.infer(o)
            ty.settle(o, t if t is not None else INT)
            words.append(self.operand(o, ty.types[id(o)] if ty.types[id(o)] != BOOL else INT).word)
            names.append(text(o))
        hi = self.unit.pc
        plain = all(isinstance(o, (Name, Index, Len)) for o in m.trace.operands)
        tr = Trace(m.trace.message, words, None if plain else names)
        self.emit(TRACE, [self.unit.trace(tr)], st.pos)
        self.uncompute(lo, hi)

    def show(self, st: Show) -> None:
        """`show a, b[i], arr, s`: a trace of values, whole arrays and stacks included."""
        lo = self.unit.pc
        words, names, lengths = [], [], []
        ty = self.typer
        for o in st.operands:
            if isinstance(o, Name):
                sym = self.res.lookup(o.name, o.pos)
                if sym.is_array:
                    words.append(operand(sym.mode, sym.loc))
                    names.append(o.name)
                    lengths.append(-1 if sym.mode == MODE_P else sym.length)
                    continue
            t = ty.infer(o)
            ty.settle(o, t if t is not None else INT)
            tt = ty.types[id(o)]
            words.append(self.operand(o, INT if tt == BOOL else tt).word)
            names.append(text(o))
            lengths.append(None)
        hi = self.unit.pc
        style = "printf" if st.fmt is not None else "print" if not st.operands else "show"
        tr = Trace(st.message if st.fmt is None else st.fmt, words, names,
                   lengths if any(x is not None for x in lengths) else None, style)
        self.emit(TRACE, [self.unit.trace(tr)], st.pos)
        self.uncompute(lo, hi)

    # ---- named stacks -----------------------------------------------------------------------
    def stack_sym(self, name: Name) -> CellSym:
        sym = self.res.lookup(name.name, name.pos)
        if not sym.stack:
            raise Fail(name.pos, "E004", f"`{name.name}` is not a stack")
        return sym

    def stack_op(self, st: StackOp) -> None:
        """push x, s: x moves onto s and becomes zero; pop x, s is its inverse (x must be zero
        and s not empty).  The pop is the push's code inverted, so each checks both ways."""
        sym = self.stack_sym(st.stack)
        ty = self.typer
        t = ty.infer(st.cell)
        if t != INT:
            raise Fail(st.cell.pos, "E004", f"a stack holds int values, `{text(st.cell)}` is "
                                            f"{t.name_ if t else 'a literal'}")
        ty.settle(st.cell, INT)
        if st.cell.__class__ is Index and st.cell.name == sym.name:
            raise Fail(st.cell.pos, "E005", "a stack cannot push or pop its own cells")
        self.check_target_reads(st.cell, []) if isinstance(st.cell, Index) else None
        s = st.stack
        lo = self.unit.pc
        x = self.target(st.cell)
        size = self.stack_cell(s, 0)
        self.check_write(size)
        hi = self.unit.pc
        p0 = self.unit.pc
        zero = self.const_ref(INT, 0, st.pos, "0").word
        if sym.mode == MODE_P:
            cap_w, cap_text = operand(MODE_N, sym.loc), f"len({s.name}) - 1"
        else:
            cap_w = self.const_ref(INT, sym.length, st.pos, str(sym.length)).word
            cap_text = str(sym.length - 1)
        self.emit(INC_I, [size.word], st.pos)
        self.emit(ASSERT, [cond_word(CMP_LT, INT), size.word, cap_w,
                           self.message(f"the stack `{s.name}` is full ({cap_text} values)",
                                        [size.word], [f"size({s.name})"])], st.pos)
        idx = size if size.mode != MODE_X else None
        c0 = self.unit.pc
        if idx is None:
            idx = self.copy(size, st.pos)
        c1 = self.unit.pc
        base = operand(sym.mode, sym.loc)
        xe = self.unit.xentry(base, -1 if sym.mode == MODE_P else sym.length, idx.word)
        top = operand(MODE_X, xe)
        self.emit(op_for("swap", INT), [x.word, top], st.pos)
        self.emit(ASSERT, [cond_word(CMP_GE, INT), size.word,
                           self.const_ref(INT, 1, st.pos, "1").word,
                           self.message(f"the stack `{s.name}` is empty", [size.word],
                                        [f"size({s.name})"])], st.pos)
        self.uncompute(c0, c1)
        self.emit(ASSERT, [cond_word(CMP_EQ, INT), x.word, zero,
                           self.message(f"`{x.text}` is not zero: a pop needs a zero cell",
                                        [x.word], [x.text])], st.pos)
        p1 = self.unit.pc
        if st.op == "pop":
            # the pop is the push run backward: replace the rows just emitted by their inverse
            view = np.frombuffer(self.unit.code, dtype=np.int64)
            rows = view[p0 * ROW_WIDTH:p1 * ROW_WIDTH].reshape(-1, ROW_WIDTH)
            rows[:] = invert_rows(rows.copy(), p0)
            del view, rows                  # the code array may grow again
        self.uncompute(lo, hi)

    # ---- locals -------------------------------------------------------------------------
    def declare(self, name: Name, spec_type, length: int | None,
                shadow: bool = False, stack: bool = False) -> CellSym:
        prev = self.scope.get(name.name)
        if prev is not None and not shadow:
            raise Fail(name.pos, "E003", f"`{name.name}` is already declared in "
                                         f"`{self.sig.name}` (line {prev.pos.line})")
        size = 1 if length is None else length
        if self.frame + size > MAX_LENGTH:
            raise Fail(name.pos, "E006", f"the frame of `{self.sig.name}` exceeds {MAX_LENGTH} "
                                         f"cells")
        sym = CellSym(name.name, spec_type, length, MODE_L, self.frame, "local", name.pos,
                      stack)
        self.locals.append(Local(name.name, spec_type, self.frame, length, stack))
        self.frame += size
        self.scope[name.name] = sym
        return sym

    def local(self, st: LocalDecl) -> None:
        spec = st.spec
        length = spec.length if spec.array else None
        if st.init is not None and spec.array:
            raise Fail(st.init.pos, "E001", "an array local takes no value (it starts zero)")
        cells = 1 if spec.stack else (length or 1)
        if st.emit:
            self.room(cells, st.pos)
        if st.init is not None:
            self.forget()
            self.typed(st.init, spec.type)
            if st.name.name in names_read(st.init, set()):
                raise Fail(st.init.pos, "E002", f"`{st.name.name}` is not declared yet")
        sym = self.declare(st.name, spec.type, length, stack=spec.stack)
        if not st.emit:
            return
        for k in range(cells):
            self.emit(ALLOC, [operand(MODE_L, sym.loc + k)], st.pos)
        if st.init is not None and self.typer.consts.get(id(st.init)) != 0:
            # (a zero value is what `alloc` checks already)
            y = Ref(operand(MODE_L, sym.loc), spec.type, st.name.name, st.name.pos, sym=sym)
            self.set_checked(y, st.init, st.pos, "local")

    def set_checked(self, y: Ref, e, pos: Pos, how: str) -> None:
        """`local y = e` (how="local": y += e, then check) or `delocal y = e` (check, then
        y -= e): the check `y == e` runs in both directions, so running backward each one
        releases y only when it holds e."""
        lo = self.unit.pc
        v = self.operand(e, y.type)
        hi = self.unit.pc
        add = "mul" if y.type == LNS else "add"
        sub = "div" if y.type == LNS else "sub"
        msg = self.message(f"`{y.text}` must equal `{text(e)}` where it is released "
                           f"({'delocal' if how == 'delocal' else 'local, running backward'})",
                           [y.word, v.word], [y.text, text(e)])
        chk = [cond_word(CMP_EQ, y.type), y.word, v.word, msg]
        if how == "local":
            self.emit(op_for(add, y.type), [y.word, v.word], pos)
            self.emit(ASSERT, chk, pos)
        else:
            self.emit(ASSERT, chk, pos)
            self.emit(op_for(sub, y.type), [y.word, v.word], pos)
        self.uncompute(lo, hi)

    def delocal(self, st: Delocal) -> None:
        name = st.name.name
        sym = self.scope.get(name)
        if sym is None:
            if name in self.decls.cells:
                raise Fail(st.name.pos, "E008", f"`{name}` is not a local of `{self.sig.name}`")
            raise Fail(st.name.pos, "E002", f"undefined name `{name}`")
        if sym.kind != "local":
            raise Fail(st.name.pos, "E008", f"`{name}` is a parameter, not a local")
        cells = 1 if sym.stack else sym.size
        for k in range(cells):
            ref = Ref(operand(MODE_L, sym.loc + k), sym.type, name, st.name.pos, sym=sym)
            self.check_write(ref)
        if st.value is not None:
            if sym.is_array and not sym.stack:
                raise Fail(st.value.pos, "E001", "an array local is released at zero: it takes "
                                                 "no value")
            if sym.stack:
                if not (isinstance(st.value, Name) and st.value.name == "nil"):
                    raise Fail(st.value.pos, "E004", "a stack is released empty: "
                                                     f"`delocal {name} = nil`")
            else:
                self.typed(st.value, sym.type)
                if name in names_read(st.value, set()):
                    raise Fail(st.value.pos, "E005", f"`{name}` may not occur in the value it "
                                                     f"is released with")
                if self.typer.consts.get(id(st.value)) != 0:     # zero: `free` checks it
                    y = Ref(operand(MODE_L, sym.loc), sym.type, name, st.name.pos, sym=sym)
                    self.set_checked(y, st.value, st.pos, "delocal")
        self.room(cells + 1, st.pos)
        if sym.stack:
            size = operand(MODE_L, sym.loc)
            self.emit(ASSERT, [cond_word(CMP_EQ, INT), size,
                               self.const_ref(INT, 0, st.pos, "0").word,
                               self.message(f"delocal `{name}`: the stack is not empty",
                                            [size], [f"size({name})"])], st.pos)
        for k in range(cells):
            self.emit(FREE, [operand(MODE_L, sym.loc + k)], st.pos)
        del self.scope[name]

    # ---- structured sugar (shapes documented in docs/rasm.md) ---------------------------
    def if_begin(self, cond, pos: Pos) -> Handle:
        n = self.unit.new_id()
        c = self.condition(cond, pos)
        test = self.fork(JMP, self.negate(c.test).words, 0, pos, f"if{n}")
        self.done(c)
        return Handle("if", n, pos, {"c": c, "cond": cond, "test": test, "skip": None,
                                     "els": None})

    def if_else(self, h: Handle, pos: Pos) -> None:
        d = h.data
        d["skip"] = self.fork(JMP, ALWAYS.words, 0, pos, f"if{h.n}.endthen")
        d["els"] = self.fork(JOIN, ALWAYS.words, d["test"], pos, f"if{h.n}.else")
        self.unit.patch_pc(d["test"], d["els"])
        self.again(d["c"], True)

    def if_end(self, h: Handle, fi_cond, pos: Pos) -> None:
        d, n = h.data, h.n
        c: Cond = d["c"]
        fc = self.condition(fi_cond if fi_cond is not None else d["cond"], pos)
        made_else = False
        if d["skip"] is None and (c.code or fc.code):
            # the jump edge needs code (an uncompute of C, or D computed): give it an else
            if self.same_code(c, fc):
                # D computes what C did (`fi` omitted): on the else edge nothing ran since
                # C, so C's temporaries already hold D; no uncompute and recompute
                d["skip"] = self.fork(JMP, ALWAYS.words, 0, pos, f"if{n}.endthen")
                d["els"] = self.fork(JOIN, ALWAYS.words, d["test"], pos, f"if{n}.else")
                self.unit.patch_pc(d["test"], d["els"])
            else:
                self.if_else(h, pos)
                self.again(fc, False)
            made_else = True
        if d["skip"] is None:
            fi = self.fork(JOIN, self.negate(fc.test).words, d["test"], pos, f"if{n}.fi")
            self.unit.patch_pc(d["test"], fi)
        elif not fc.code or made_else:
            fi = self.fork(JOIN, fc.test.words, d["skip"], pos, f"if{n}.fi")
            self.unit.patch_pc(d["skip"], fi)
        else:
            # D computed at the end of the else branch; the then branch lands on a second
            # computation of D just before the join (it could not be computed before `else`)
            e2 = self.fork(JMP, ALWAYS.words, 0, pos, f"if{n}.endelse")
            land = self.fork(JOIN, ALWAYS.words, d["skip"], pos, f"if{n}.then")
            self.unit.patch_pc(d["skip"], land)
            self.again(fc, False)
            fi = self.fork(JOIN, self.negate(fc.test).words, e2, pos, f"if{n}.fi")
            self.unit.patch_pc(e2, fi)
        self.done(fc)
        self.record(c)
        self.record(fc)

    def from_begin(self, cond, pos: Pos) -> Handle:
        n = self.unit.new_id()
        c = self.condition(cond, pos)
        top = self.fork(JOIN, self.negate(c.test).words, 0, pos, f"from{n}")
        self.done(c)
        return Handle("from", n, pos, {"c": c, "top": top})

    def from_end(self, h: Handle, until, until_pos: Pos, loop: list) -> None:
        d, n = h.data, h.n
        u = self.condition(until, until_pos)
        test = self.fork(JMP, u.test.words, 0, until_pos, f"from{n}.until")
        self.again(u, True)
        mark = self.temp_mark()
        self.block(loop)
        self.release(mark)
        c: Cond = d["c"]
        self.again(c, False)
        back = self.fork(JMP, ALWAYS.words, d["top"], until_pos, f"from{n}.back")
        exit_ = self.fork(JOIN, ALWAYS.words, test, until_pos, f"from{n}.exit")
        self.unit.patch_pc(d["top"], back)
        self.unit.patch_pc(test, exit_)
        self.done(u)
        self.record(c)
        self.record(u)

    def for_begin(self, var: Name, lo_e, hi_e, pos: Pos) -> Handle:
        ty = self.typer
        self.forget()
        self.here = pos
        bounds = []
        for o in (lo_e, hi_e):
            t = ty.infer(o)
            if t == BOOL:
                raise Fail(o.pos, "E004", f"loop bound `{text(o)}` is a condition, not an int")
            if t not in (INT, None):
                raise Fail(o.pos, "E004", f"loop bound `{text(o)}` is {t.name_}, not int")
            ty.settle(o, INT)
            bounds.append(ty.consts.get(id(o)))
        if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
            raise Fail(lo_e.pos, "E006", f"empty range {bounds[0]}..{bounds[1]}: the lower "
                                         f"bound must not exceed the upper")
        mark = self.temp_mark()
        c0 = self.unit.pc
        lo, hi = self.operand(lo_e, INT), self.operand(hi_e, INT)
        c1 = self.unit.pc
        if bounds[0] is None or bounds[1] is None:
            self.emit(ASSERT, [cond_word(CMP_LE, INT), lo.word, hi.word, 0], pos)
        guard_refs: list[Ref] = []
        for o, r in ((lo_e, lo), (hi_e, hi)):
            if r.const:
                continue
            guard_refs += [r] + ([r.index] if r.index is not None else [])
            guard_refs += self.arg_reads(o)
        shadowed = self.scope.get(var.name)
        sym = self.declare(var, INT, None, shadow=True)
        i = Ref(operand(MODE_L, sym.loc), INT, sym.name, var.pos, sym=sym)
        n = self.unit.new_id()
        self.emit(ALLOC, [i.word], pos)
        if bounds[0] is None:
            self.emit(ADD_I, [i.word, lo.word], pos)
        elif bounds[0] != 0:
            self.emit(ADDI_I, [i.word, bounds[0]], pos)
        # Bottom-tested, so an iteration costs join + body + inc + jmp:
        #   empty: jmp exit if i == hi      (skips an empty range)
        #   top:   join back if i != lo     (came from `back` iff not the first iteration)
        #          body; inc i
        #   back:  jmp top if i < hi
        #   exit:  join empty if i == lo    (came from `empty` iff the range was empty)
        empty = self.fork(JMP, (cond_word(CMP_EQ, INT), i.word, hi.word), 0, pos, f"for{n}.empty")
        top = self.fork(JOIN, (cond_word(CMP_NE, INT), i.word, lo.word), 0, pos, f"for{n}")
        self.guards.append(Guard([i] + guard_refs, sym.name))
        return Handle("for", n, pos, {"i": i, "lo": lo, "hi": hi, "bounds": bounds,
                                      "empty": empty, "top": top, "sym": sym,
                                      "shadowed": shadowed, "c": (c0, c1), "mark": mark})

    def for_end(self, h: Handle, end_pos: Pos) -> None:
        d = h.data
        self.guards.pop()
        i, lo, hi, bounds = d["i"], d["lo"], d["hi"], d["bounds"]
        self.emit(INC_I, [i.word], end_pos)
        back = self.fork(JMP, (cond_word(CMP_LT, INT), i.word, hi.word), d["top"], end_pos,
                         f"for{h.n}.back")
        exit_ = self.fork(JOIN, (cond_word(CMP_EQ, INT), i.word, lo.word), d["empty"], end_pos,
                          f"for{h.n}.exit")
        self.unit.patch_pc(d["top"], back)
        self.unit.patch_pc(d["empty"], exit_)
        if bounds[1] is None:
            self.emit(SUB_I, [i.word, hi.word], end_pos)
        elif bounds[1] != 0:
            self.emit(SUBI_I, [i.word, bounds[1]], end_pos)
        self.emit(FREE, [i.word], end_pos)
        self.here = end_pos
        self.uncompute(*d["c"])
        self.release(d["mark"])
        sym = d["sym"]
        if d["shadowed"] is None:
            del self.scope[sym.name]
        else:
            self.scope[sym.name] = d["shadowed"]

    def with_begin(self, pos: Pos) -> Handle:
        n = self.unit.new_id()
        h = Handle("with", n, pos, {"outer": self.region, "before": dict(self.scope),
                                    "a0": self.unit.pc})
        self.region = h.data["outer"] + ((n, "with"),)
        return h

    def with_do(self, h: Handle, pos: Pos) -> None:
        d = h.data
        d["a1"] = self.unit.pc
        self.resolve_fixups(d["a0"], d["a1"])
        d["after"] = dict(self.scope)
        self.region = d["outer"] + ((h.n, "do"),)

    def with_end(self, h: Handle, pos: Pos) -> None:
        d = h.data
        self.region = d["outer"] + ((h.n, "undo"),)
        try:
            self.room(d["a1"] - d["a0"], h.pos)
            self.emit_inverse(d["a0"], d["a1"])
        finally:
            self.region = d["outer"]
        before, after_a = d["before"], d["after"]
        for name, sym in after_a.items():           # declared in the with block: freed again
            if before.get(name) is not sym and self.scope.get(name) is sym:
                del self.scope[name]
        for name, sym in before.items():            # delocal'ed in it: allocated again
            if after_a.get(name) is not sym and name not in self.scope:
                self.scope[name] = sym

    def abort(self, h: Handle) -> None:
        """Close a structured statement that failed half way (nothing it emitted will run)."""
        if h.kind == "with":
            self.region = h.data["outer"]
        elif h.kind == "for":
            if self.guards:
                self.guards.pop()
            sym = h.data["sym"]
            if h.data["shadowed"] is None:
                self.scope.pop(sym.name, None)
            else:
                self.scope[sym.name] = h.data["shadowed"]

    def emit_inverse(self, a0: int, a1: int) -> None:
        """Append the exact inverse of the rows [a0, a1) (mirrored, opcodes inverted)."""
        if a1 == a0 or self.rep.has_errors:
            return
        for fx in self.fixups:                      # left-over jumps are reported later
            if not fx.done and a0 <= fx.pc < a1:
                self.unit.patch_pc(fx.pc, a0)
        self.copy_rows(a0, a1, True, ".undo")


def _inverted(rows: list[list[int]], base: int) -> list[list[int]]:
    """invert_rows on a few rows as lists (the statement-sized case, without numpy)."""
    n = len(rows)
    out = []
    for r in reversed(rows):
        op = r[0]
        r = list(r)
        r[0] = INVERSE[op]
        if op == JMP.code or op == JOIN.code:
            r[PC_SLOT] = base + (n - 1 - (r[PC_SLOT] - base))
        out.append(r)
    return out


def _shapes(family: str):
    from .shapes import SHAPES
    return [s for s in SHAPES if s.family == family]


def compile_function(unit: Unit, decls: Declarations, sig: FuncSig, rep: Reporter,
                     calls: list[CallRecord], direct_writes: dict[int, set[int]]) -> Function:
    """Emit one function whose body is a list of statements; returns its Function record
    (params' `written` unset)."""
    return FunctionCompiler(unit, decls, sig, rep, calls, direct_writes).compile()
