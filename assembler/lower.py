"""Expressions -> instructions, by compute-use-uncompute (the Janus-to-PISA scheme).

A statement `y OP= e` (or any statement whose operands are expressions) compiles in three runs
of code:

  compute    every subexpression that is not a cell or a literal is evaluated into a fresh
             temporary (a frame cell that is zero), each temporary written by instructions of
             the instruction set only; a float temporary is written exactly once from zero
             (`t += a * b`, `t += a + b`), so that running the same instruction backward
             returns it to exactly zero;
  use        the statement's own instructions, reading the temporaries;
  uncompute  the compute run inverted (reversed, each instruction replaced by its inverse):
             every temporary is zero again.

No temporary where none is needed: an int or fixed update distributes over `+` and `-`
(`y += a*b - c` is `y += a*b; y -= c`), an int `^=` over `^`, an lns `*=` over `*` and `/`, and
an operator whose instruction exists takes cells directly (`y += a * b` is one `addmul`).  A
condition is evaluated the same way before its test; codegen.py uncomputes it on every edge.

The temporaries of a function are frame cells named `$1`, `$2`, ...: a pool per type, taken and
given back in stack order, so two statements reuse the same cells.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from isa import arith
from isa.functions import CMP_EQ, CMP_GT, CMP_NE, CMP_NEGATE, FN1_BY_NAME, FN2_BY_NAME, cond_word
from isa.program import MODE_G, MODE_L, MODE_P, MODE_X, Local, operand
from isa.table import OP_BY_NAME, Op, op_for
from isa.types import FIXED, FLOAT, INT, LNS, TYPE_BY_NAME, NumType

from .diagnostics import Fail, Pos
from .exprs import BOOL, OPERATOR_FN, Typer, names_read, text
from .literals import Lit
from .nodes import Binary, BoolLit, Call, Compare, Index, Len, Literal, Logic, Name, Unary
from .symbols import Ref

if TYPE_CHECKING:
    from .codegen import Scope
    from .operands import Resolver
    from .unit import Unit

XORAND = OP_BY_NAME["xorand.i"]
ASSERT = OP_BY_NAME["assert"]
BITOR = FN2_BY_NAME["bitor"].id
_FAMILY_SIGN = {"+=": 1, "-=": -1}
_MAY_TRAP_INT = ("/", "%", "<<", ">>")


class Test:
    """A condition as a jmp/join/assert test: condition word and its two operand words."""
    __slots__ = ("cc", "a", "b")

    def __init__(self, cc: int, a: int, b: int):
        self.cc, self.a, self.b = cc, a, b

    def negated(self) -> Test:
        cmp = self.cc & 15
        return Test((self.cc & ~15) | CMP_NEGATE[cmp], self.a, self.b)

    @property
    def words(self) -> tuple[int, int, int]:
        return self.cc, self.a, self.b


ALWAYS = Test(0, 0, 0)


class ExprCompiler:
    """Mixin of codegen.FunctionCompiler: the expression half of code generation.

    Needs from its host: unit, res (operands.Resolver), scope, locals, frame, here,
    emit(op, values, pos), fork(...) and JMP/JOIN."""

    if TYPE_CHECKING:                       # what codegen.FunctionCompiler provides
        unit: Unit
        res: Resolver
        scope: Scope
        locals: list[Local]
        frame: int
        here: Pos
        JMP: Op
        JOIN: Op

        def emit(self, op: Op, values: list[int], pos: Pos) -> int: ...

        def fork(self, op: Op, cond: tuple[int, int, int], target: int, pos: Pos,
                 label: str) -> int: ...

    # ---- temporaries ------------------------------------------------------------------------
    def init_temps(self) -> None:
        self.typer = Typer(self.res.lookup, self.unit.F)
        self.free_temps: dict[int, list[int]] = {}     # type -> free frame offsets
        self.temp_names: dict[int, str] = {}           # frame offset -> `$n`
        self.live_temps: list[tuple[int, int]] = []    # (type, offset) in the order taken
        self.n_temps = 0                               # temporaries of the function
        self.stmt_temps = 0                            # most live at once in this statement
        self.elements: dict[int, Ref] = {}             # id(Index node) -> its operand
        self.computed: dict[tuple, Ref] = {}           # (expression text, type) -> temporary

    def forget(self) -> None:
        """Start a new expression context: types, folded constants and resolved elements are
        keyed by node identity, which Python reuses once nodes are gone."""
        self.typer.reset()
        self.elements.clear()
        self.computed.clear()

    def temp(self, t: NumType) -> Ref:
        """A zero frame cell of type t for a temporary."""
        free = self.free_temps.get(int(t))
        if free:
            off = free.pop()
        else:
            self.n_temps += 1
            off = self.frame
            self.temp_names[off] = f"${self.n_temps}"
            self.locals.append(Local(self.temp_names[off], t, off, None))
            self.frame += 1
        self.live_temps.append((int(t), off))
        if len(self.live_temps) > self.stmt_temps:
            self.stmt_temps = len(self.live_temps)
        return Ref(operand(MODE_L, off), t, self.temp_names[off], self.here, temp=True)

    def temp_mark(self) -> int:
        return len(self.live_temps)

    def release(self, mark: int) -> None:
        """Give back the temporaries taken since `mark` (they are zero again)."""
        while len(self.live_temps) > mark:
            t, off = self.live_temps.pop()
            self.free_temps.setdefault(t, []).append(off)

    # ---- typing -----------------------------------------------------------------------------
    def typed(self, e, want) -> object:
        """Type-check e in a context of type `want` (a NumType, BOOL, or None)."""
        ty = self.typer
        t = ty.infer(e)
        if want == BOOL and t != BOOL:
            raise Fail(e.pos, "E004", f"`{text(e)}` is {_tn(t) if t is not None else 'a literal'}"
                                      f", not a condition: compare it, e.g. `{text(e)} != 0`")
        if want is not None and t is not None and t != want:
            if not (want == INT and t == BOOL):
                raise Fail(e.pos, "E004", f"type mismatch: `{text(e)}` is {_tn(t)}, expected "
                                          f"{_tn(want)}")
        ty.settle(e, want if t is None else t)
        return ty.type_of(e)

    # ---- leaves and operands ---------------------------------------------------------------
    def const_ref(self, t: NumType, word: int, pos: Pos, txt: str) -> Ref:
        return Ref(operand(MODE_G, self.unit.intern(t, word)), t, txt, pos, const=True)

    def operand(self, e, t: NumType | None = None) -> Ref:
        """A source operand for e, computing it into a temporary when it is not a cell."""
        ty = self.typer
        w = ty.consts.get(id(e))
        et = ty.types.get(id(e))
        if w is not None:
            return self.const_ref(et, w, e.pos, text(e))
        if isinstance(e, Name):
            return self.res.resolve(e, None)
        if isinstance(e, Index):
            return self.element(e)
        if isinstance(e, Len):
            return self.res.resolve(e, INT)
        if isinstance(e, Call) and e.name == "size":
            if not self.res.lookup(e.args[0].name, e.pos).stack:
                return self.res.resolve(Len(e.pos, e.args[0].name), INT)
            return self.stack_cell(e.args[0], 0)
        # the same expression twice in a statement (`(r + 1) * (r + 1)`, `d[j + 1] - c[j + 1]`)
        # is computed once: nothing the computations write is read by them
        key = (text(e), et)
        ref = self.computed.get(key)
        if ref is None:
            ref = self.bit(e) if et == BOOL else self.compute(e, et)
            self.computed[key] = ref
        return ref

    def element(self, e: Index) -> Ref:
        """`a[i]`: a direct cell for a constant index into a global or local array, else an
        indexed (X) operand whose index is an int cell (computed when it is an expression)."""
        ref = self.elements.get(id(e))
        if ref is None:
            ref = self.elements[id(e)] = self._element(e)
        return ref

    def _element(self, e: Index) -> Ref:
        sym = self.res.lookup(e.name, e.pos)
        k = self.typer.consts.get(id(e.index))
        if k is not None:
            if sym.length is not None and sym.length >= 0 and not 0 <= k < sym.length:
                raise Fail(e.index.pos, "E006", f"index {k} is out of bounds for `{e.name}` "
                                                f"(length {sym.length})")
            if k < 0:
                raise Fail(e.index.pos, "E006", f"index {k} is negative")
            if sym.mode != MODE_P:
                return Ref(operand(sym.mode, sym.loc + k), sym.type, text(e), e.pos,
                           const=sym.const, sym=sym)
            index = self.const_ref(INT, k, e.index.pos, str(k))
        elif isinstance(e.index, Name) and not self.res.lookup(e.index.name,
                                                                  e.index.pos).is_array:
            return self.res.element(e)
        else:
            index = self.operand(e.index, INT)
            if index.mode == MODE_X:
                index = self.copy(index, e.index.pos)
        base = operand(sym.mode, sym.loc)
        length = -1 if sym.mode == MODE_P else sym.length
        x = self.unit.xentry(base, length, index.word)
        return Ref(operand(MODE_X, x), sym.type, text(e), e.pos, const=sym.const, sym=sym,
                   base=base, index=index)

    def copy(self, ref: Ref, pos: Pos) -> Ref:
        """A temporary holding a copy of a cell (an index may not itself be indexed)."""
        t = self.temp(ref.type)
        self.emit(op_for("add", ref.type), [t.word, ref.word], pos)
        return t

    def stack_cell(self, name: Name, k: int) -> Ref:
        """Cell k of a stack (0: its size)."""
        return self.element(self._stack_index(name, k))

    def _stack_index(self, name: Name, k: int) -> Index:
        lit = Literal(name.pos, Lit("int", k, str(k)))
        ix = Index(name.pos, name.name, lit)
        self.typer.keep += [lit, ix]
        self.typer.types[id(lit)] = INT
        self.typer.consts[id(lit)] = k
        self.typer.types[id(ix)] = INT
        return ix

    def stack_top(self, e: Call) -> Ref:
        """top(s): s[s[0]], after checking that s is not empty."""
        s = e.args[0]
        size = self.stack_cell(s, 0)
        self.emit(ASSERT, [cond_word(CMP_GT, INT), size.word,
                           self.const_ref(INT, 0, e.pos, "0").word,
                           self.message(f"top({s.name}): the stack `{s.name}` is empty",
                                        [size.word], [f"size({s.name})"])], e.pos)
        if size.mode == MODE_X:
            size = self.copy(size, e.pos)
        sym = self.res.lookup(s.name, s.pos)
        base = operand(sym.mode, sym.loc)
        length = -1 if sym.mode == MODE_P else sym.length
        x = self.unit.xentry(base, length, size.word)
        return Ref(operand(MODE_X, x), INT, text(e), e.pos, sym=sym, base=base, index=size)

    def message(self, msg: str, words: list[int], names: list[str]) -> int:
        """The msg operand of an assert: 1 + the index of its Trace entry."""
        from isa.program import Trace
        return 1 + self.unit.trace(Trace(msg, list(words), list(names)))

    # ---- computing into temporaries ----------------------------------------------------------
    def compute(self, e, t: NumType) -> Ref:
        """A fresh temporary holding the value of e (emitted now)."""
        if isinstance(e, Call) and e.name == "top":
            return self.stack_top(e)
        if isinstance(e, Unary) and e.op == "~":
            a = self.operand(e.arg, INT)
            tmp = self.temp(INT)
            self.emit(op_for("add", INT), [tmp.word, a.word], e.pos)
            self.emit(op_for("not", INT), [tmp.word], e.pos)
            return tmp
        tmp = self.temp(t)
        op = "*=" if t == LNS else "+="
        for ins in self.plan(tmp, op, e, e.pos):
            self.emit(*ins)
        return tmp

    def bit(self, e) -> Ref:
        """An int cell holding 1 if the condition e holds, else 0."""
        if isinstance(e, BoolLit):
            return self.const_ref(INT, int(e.value), e.pos, text(e))
        if isinstance(e, Call) and e.name == "empty":
            size = self.stack_cell(e.args[0], 0)
            t = self.temp(INT)
            self.emit(op_for("xorcmp", INT, INT), [t.word, cond_word(CMP_EQ, INT), size.word,
                                                   self.const_ref(INT, 0, e.pos, "0").word],
                      e.pos)
            return t
        if isinstance(e, Compare):
            st = self.side_type(e)
            known = self.constant_test(e)
            if known is not None:
                return self.const_ref(INT, int(known), e.pos, text(e))
            a, b = self.operand(e.left, st), self.operand(e.right, st)
            t = self.temp(INT)
            self.emit(op_for("xorcmp", INT, st), [t.word, cond_word(e.cmp, st), a.word, b.word],
                      e.pos)
            return t
        if isinstance(e, Unary):            # `!`
            u = self.bit(e.arg)
            t = self.temp(INT)
            self.emit(op_for("xorcmp", INT, INT), [t.word, cond_word(CMP_EQ, INT), u.word,
                                                   self.const_ref(INT, 0, e.pos, "0").word],
                      e.pos)
            return t
        if isinstance(e, Logic):
            a = self.bit(e.left)
            if self.may_trap(e.right):
                b = self.guarded_bit(e, a)
            else:
                b = self.bit(e.right)
            t = self.temp(INT)
            if e.op == "&&":
                self.emit(XORAND, [t.word, a.word, b.word], e.pos)
            else:
                self.emit(op_for("addfn2", INT), [t.word, a.word, b.word, BITOR], e.pos)
            return t
        raise Fail(e.pos, "E004", f"`{text(e)}` is not a condition")

    def side_type(self, e: Compare) -> NumType:
        """The type a comparison compares in (conditions compare as int 0/1)."""
        t = self.typer.types[id(e.left)]
        if t is None:
            t = self.typer.types[id(e.right)]
        return INT if t == BOOL or t is None else t

    def constant_test(self, e: Compare) -> bool | None:
        """The value of a comparison of two constants (None when it reads a cell)."""
        ty = self.typer
        a, b = ty.consts.get(id(e.left)), ty.consts.get(id(e.right))
        if a is None or b is None:
            return None
        return arith.compare(cond_word(e.cmp, self.side_type(e)), a, b)

    def guarded_bit(self, e: Logic, a: Ref) -> Ref:
        """The right operand of && / || evaluated only when it decides (Janus's short circuit:
        `j > 0 && a[j-1] > x` never reads a[-1]); it stays zero otherwise."""
        n = self.unit.new_id()
        zero = self.const_ref(INT, 0, e.pos, "0").word
        skip_if = CMP_EQ if e.op == "&&" else CMP_NE          # skip the right operand when...
        jmp = self.fork(self.JMP, (cond_word(skip_if, INT), a.word, zero), 0, e.pos,
                        f"{'and' if e.op == '&&' else 'or'}{n}")
        outside = dict(self.computed)       # what is computed under the guard stays there
        b = self.bit(e.right)
        self.computed = outside
        join = self.fork(self.JOIN, (cond_word(skip_if, INT), a.word, zero), jmp, e.pos,
                         f"{'and' if e.op == '&&' else 'or'}{n}.end")
        self.unit.patch_pc(jmp, join)
        return b

    def may_trap(self, e) -> bool:
        """Could evaluating e trap (an index out of bounds, a division by zero, a domain
        error)?  Then && and || evaluate it only when it decides the result."""
        ty = self.typer
        if id(e) in ty.consts or isinstance(e, (Literal, Name, Len, BoolLit)):
            return False
        if isinstance(e, Index):
            return True
        if isinstance(e, (Compare, Logic)):
            return self.may_trap(e.left) or self.may_trap(e.right)
        if isinstance(e, Unary):
            return self.may_trap(e.arg)
        if isinstance(e, Binary):
            t = ty.types[id(e)]
            if t not in (INT, FIXED) or (t == FIXED and e.op not in "+-") or \
                    e.op in _MAY_TRAP_INT:
                return True
            return self.may_trap(e.left) or self.may_trap(e.right)
        if isinstance(e, Call):
            return e.name not in ("size", "empty")
        return True

    # ---- updates ------------------------------------------------------------------------------
    def plan(self, y: Ref, op: str, e, pos: Pos) -> list[tuple]:
        """The instructions of `y op= e` as (Op, operand words, pos), computing the operands
        they need into temporaries now; the caller emits the list."""
        t = y.type
        if t in (INT, FIXED) and op in _FAMILY_SIGN:
            return self.plan_sum(y, _FAMILY_SIGN[op], e, pos)
        if t == FLOAT and op in _FAMILY_SIGN:
            return [self.plan_float(y, _FAMILY_SIGN[op], e, pos)]
        if t == INT and op == "^=":
            return self.plan_xor(y, e, pos)
        if t == LNS and op in ("*=", "/="):
            return self.plan_product(y, 1 if op == "*=" else -1, e, pos)
        generic = {"+=": "y += a", "-=": "y -= a", "^=": "y ^= a", "*=": "y *= a",
                   "/=": "y /= a"}[op]
        hint = {LNS: " (lns cells take *= and /=)", INT: " (int cells take +=, -= and ^=)",
                FIXED: " (fixed cells take += and -=)", FLOAT: " (float cells take += and -=)"}
        raise Fail(y.pos, "E004", f"`{generic}` does not exist for {t.name_} cells{hint[t]}")

    def plan_sum(self, y: Ref, sign: int, e, pos: Pos) -> list[tuple]:
        terms: list[tuple[int, object]] = []
        self.flatten_sum(e, sign, terms)
        t = y.type
        out, const = [], 0
        have_const = False
        for s, n in terms:
            w = self.typer.consts.get(id(n))
            if w is not None:
                const += s * sign * w          # in the statement's direction: `y -= 2` is subi 2
                have_const = True
                continue
            out.append(self.term(y, s, n, pos))
        if have_const:
            const = _wrap(const)
            if const != 0 or not out:
                out.append((op_for("addi" if sign > 0 else "subi", t), [y.word, const], pos))
        return out

    def flatten_sum(self, e, s: int, out: list) -> None:
        if id(e) not in self.typer.consts:
            if isinstance(e, Binary) and e.op in ("+", "-"):
                self.flatten_sum(e.left, s, out)
                self.flatten_sum(e.right, s if e.op == "+" else -s, out)
                return
            if isinstance(e, Unary) and e.op == "-":
                self.flatten_sum(e.arg, -s, out)
                return
        out.append((s, e))

    def term(self, y: Ref, s: int, n, pos: Pos) -> tuple:
        """One instruction y += s*n (n an expression of y's type, not a sum)."""
        t = y.type
        fam = "add" if s > 0 else "sub"
        ty = self.typer
        if isinstance(n, Binary) and n.op in ("*", "/"):
            a, b = self.operand(n.left, t), self.operand(n.right, t)
            f = ("addmul" if n.op == "*" else "adddiv") if s > 0 else \
                ("submul" if n.op == "*" else "subdiv")
            return (op_for(f, t), [y.word, a.word, b.word], pos)
        if isinstance(n, Binary) and n.op in OPERATOR_FN:
            a, b = self.operand(n.left, INT), self.operand(n.right, INT)
            fn = FN2_BY_NAME[OPERATOR_FN[n.op]].id
            return (op_for("addfn2" if s > 0 else "subfn2", t), [y.word, a.word, b.word, fn],
                    pos)
        if isinstance(n, Call) and ty.types.get(id(n)) != BOOL and n.name not in \
                ("top", "size"):
            return self.call_term(y, s, n, pos)
        src = self.operand(n, t)
        return (op_for(fam, t), [y.word, src.word], pos)

    def call_term(self, y: Ref, s: int, n: Call, pos: Pos) -> tuple:
        t = y.type
        if n.name in TYPE_BY_NAME:
            arg = n.args[0]
            st = self.typer.types[id(arg)]
            st = INT if st == BOOL else st
            a = self.operand(arg, st)
            if t == LNS:
                return (op_for("cvt" if s > 0 else "uncvt", t, st), [y.word, a.word], pos)
            return (op_for("cvt" if s > 0 else "uncvt", t, st), [y.word, a.word], pos)
        if len(n.args) == 1:
            fn = FN1_BY_NAME[n.name]
            a = self.operand(n.args[0], t)
            return (op_for("addfn" if s > 0 else "subfn", t), [y.word, a.word, fn.id], pos)
        fn = FN2_BY_NAME[n.name]
        a, b = self.operand(n.args[0], t), self.operand(n.args[1], t)
        return (op_for("addfn2" if s > 0 else "subfn2", t), [y.word, a.word, b.word, fn.id], pos)

    def plan_float(self, y: Ref, s: int, e, pos: Pos) -> tuple:
        """Exactly one instruction writes a float y: the value of e is rounded once."""
        ty = self.typer
        w = ty.consts.get(id(e))
        if w is not None:
            return (op_for("addi" if s > 0 else "subi", FLOAT), [y.word, w], pos)
        if isinstance(e, Unary) and e.op == "-":
            return self.plan_float(y, -s, e.arg, pos)
        if isinstance(e, Binary) and e.op in ("+", "-"):
            op, right = e.op, e.right
            if isinstance(right, Unary) and right.op == "-" and id(right) not in ty.consts:
                op, right = ("-" if op == "+" else "+"), right.arg     # a + -b is a - b exactly
            a, b = self.operand(e.left, FLOAT), self.operand(right, FLOAT)
            fam = {("+", 1): "addsum", ("+", -1): "subsum", ("-", 1): "adddif",
                   ("-", -1): "subdif"}[(op, s)]
            return (op_for(fam, FLOAT), [y.word, a.word, b.word], pos)
        return self.term(y, s, e, pos)

    def plan_xor(self, y: Ref, e, pos: Pos) -> list[tuple]:
        terms: list = []
        self.flatten_xor(e, terms)
        out, const, have = [], 0, False
        for n in terms:
            w = self.typer.consts.get(id(n))
            if w is not None:
                const ^= w
                have = True
                continue
            if isinstance(n, Binary) and n.op == "&":
                a, b = self.operand(n.left, INT), self.operand(n.right, INT)
                out.append((XORAND, [y.word, a.word, b.word], pos))
            elif isinstance(n, Compare):
                st = self.side_type(n)
                a, b = self.operand(n.left, st), self.operand(n.right, st)
                out.append((op_for("xorcmp", INT, st), [y.word, cond_word(n.cmp, st), a.word,
                                                        b.word], pos))
            else:
                src = self.operand(n, INT)
                out.append((op_for("xor", INT), [y.word, src.word], pos))
        if have and (const != 0 or not out):
            out.append((op_for("xori", INT), [y.word, const], pos))
        return out

    def flatten_xor(self, e, out: list) -> None:
        if isinstance(e, Binary) and e.op == "^" and id(e) not in self.typer.consts:
            self.flatten_xor(e.left, out)
            self.flatten_xor(e.right, out)
        else:
            out.append(e)

    def plan_product(self, y: Ref, s: int, e, pos: Pos) -> list[tuple]:
        factors: list = []
        negs = self.flatten_product(e, s, factors)
        out = []
        for fs, n in factors:
            mul = "mul" if fs > 0 else "div"
            if isinstance(n, Call) and n.name == "lns" and id(n) not in self.typer.consts:
                arg = n.args[0]
                st = self.typer.types[id(arg)]
                a = self.operand(arg, INT if st == BOOL else st)
                out.append((op_for("cvt" if fs > 0 else "uncvt", LNS, INT if st == BOOL else st),
                            [y.word, a.word], pos))
            else:
                a = self.operand(n, LNS)
                out.append((op_for(mul, LNS), [y.word, a.word], pos))
        if negs & 1:
            out.append((op_for("neg", LNS), [y.word], pos))
        return out

    def flatten_product(self, e, s: int, out: list) -> int:
        """Factors (sign of the exponent, node) of an lns product; returns the count of
        negations (`-a` is a factor a and a sign flip)."""
        if id(e) not in self.typer.consts:
            if isinstance(e, Binary) and e.op in ("*", "/"):
                n = self.flatten_product(e.left, s, out)
                return n + self.flatten_product(e.right, s if e.op == "*" else -s, out)
            if isinstance(e, Unary) and e.op == "-":
                return 1 + self.flatten_product(e.arg, s, out)
        out.append((s, e))
        return 0

    # ---- conditions ---------------------------------------------------------------------------
    def test(self, e) -> Test:
        """The test of a condition, computing what it needs now (uncomputed by the caller)."""
        if isinstance(e, BoolLit):
            # a real comparison, not ALWAYS: a join or fork whose condition the program wrote
            # can still be reached both ways (an unconditional join after a fall-through
            # would not verify), and the come-from check then traps as the source says
            z = self.const_ref(INT, 0, e.pos, "0").word
            return Test(cond_word(CMP_EQ if e.value else CMP_NE, INT), z, z)
        if isinstance(e, Compare):
            known = self.constant_test(e)
            if known is not None:
                return self.test(BoolLit(e.pos, known))
            st = self.side_type(e)
            a, b = self.operand(e.left, st), self.operand(e.right, st)
            return Test(cond_word(e.cmp, st), a.word, b.word)
        if isinstance(e, Call) and e.name == "empty":
            size = self.stack_cell(e.args[0], 0)
            return Test(cond_word(CMP_EQ, INT), size.word, self.const_ref(INT, 0, e.pos, "0").word)
        if isinstance(e, Unary) and e.op == "!":
            return self.test(e.arg).negated()
        if isinstance(e, Logic):
            t = self.bit(e)
            return Test(cond_word(CMP_NE, INT), t.word, self.const_ref(INT, 0, e.pos, "0").word)
        raise Fail(e.pos, "E004", f"`{text(e)}` is not a condition: compare it, e.g. "
                                  f"`{text(e)} != 0`")

    # ---- aliasing ---------------------------------------------------------------------------
    def check_target_reads(self, target, exprs: list, what: str = "update") -> list:
        """The static half of `the target may not occur in its own expression` (E005); returns
        the reads of the target's array whose index may equal the target's (checked at run
        time, as Janus does)."""
        if isinstance(target, Name):
            for e in exprs:
                if target.name in names_read(e, set(), self.is_stack):
                    outer = self.indexed_by(e, target.name)
                    if outer is not None:
                        raise Fail(target.pos, "E005", f"`{target.name}` is the index of "
                                                       f"`{text(outer)}`: an update may not "
                                                       f"write an index it uses")
                    r = self.find_read(e, target.name)
                    raise Fail(r.pos, "E005",
                               f"`{text(r)}` is also the target `{target.name}`: a source "
                               f"may not alias the target")
            return []
        if not isinstance(target, Index):
            return []
        if target.name in names_read(target.index, set(), self.is_stack) and \
                not self.direct_index(target):
            raise Fail(target.index.pos, "E005", f"`{text(target)}`: an index computed from the "
                                                 f"array it indexes may not index a target (the "
                                                 f"update could change its own index)")
        risky = []
        for e in exprs:
            for r in self.reads_of(e, target.name):
                if isinstance(r, Index):
                    same = text(r.index) == text(target.index)
                    ka, kb = self.typer.consts.get(id(r.index)), \
                        self.typer.consts.get(id(target.index))
                    if same:
                        raise Fail(r.pos, "E005", f"`{text(r)}` is also the target "
                                                  f"`{text(target)}`: a source may not alias "
                                                  f"the target")
                    if ka is not None and kb is not None:
                        if ka == kb:
                            raise Fail(r.pos, "E005", f"`{text(r)}` is also the target "
                                                      f"`{text(target)}`: a source may not "
                                                      f"alias the target")
                        continue
                    risky.append(r)
                else:
                    raise Fail(r.pos, "E005", f"`{target.name}` is the target's array: it may "
                                              f"not occur in its own expression")
        return risky

    def is_stack(self, name: str) -> bool:
        sym = self.scope.get(name) or self.res.cells.get(name)
        return sym is None or sym.stack

    def direct_index(self, e: Index) -> bool:
        """Is e's index a cell the instruction reads itself (the machine then checks that the
        update does not write it), rather than a temporary computed from cells?"""
        ix = e.index
        if isinstance(ix, (Name, Literal)):
            return True
        if isinstance(ix, Index) and id(ix.index) in self.typer.consts:
            return self.res.lookup(ix.name, ix.pos).mode != MODE_P
        return False

    def reads_of(self, e, name: str) -> list:
        out: list = []

        def walk(n):
            if isinstance(n, Name) and n.name == name:
                out.append(n)
            elif isinstance(n, Index):
                if n.name == name:
                    out.append(n)
                walk(n.index)
            elif isinstance(n, Unary):
                walk(n.arg)
            elif isinstance(n, (Binary, Logic, Compare)):
                walk(n.left)
                walk(n.right)
            elif isinstance(n, Call):
                if n.name in ("top", "size", "empty") and n.args and \
                        isinstance(n.args[0], Name):
                    if n.args[0].name == name and self.is_stack(name):
                        out.append(n)
                    return
                for a in n.args:
                    walk(a)
        walk(e)
        return [r for r in out if not isinstance(r, Len)]

    def indexed_by(self, e, name: str):
        """The element `a[...]` of e whose index reads `name` directly (None if none)."""
        if isinstance(e, Index):
            if isinstance(e.index, Name) and e.index.name == name:
                return e
            return self.indexed_by(e.index, name)
        if isinstance(e, Unary):
            return self.indexed_by(e.arg, name)
        if isinstance(e, (Binary, Logic, Compare)):
            return self.indexed_by(e.left, name) or self.indexed_by(e.right, name)
        if isinstance(e, Call):
            for a in e.args:
                r = self.indexed_by(a, name)
                if r is not None:
                    return r
        return None

    def find_read(self, e, name: str):
        rs = self.reads_of(e, name)
        return rs[0] if rs else e

    def alias_checks(self, target: Ref, risky: list, plan: list, pos: Pos) -> None:
        """Run-time checks that no read of the target's array hits the target's cell, for the
        reads that reach the update through a temporary (the machine checks an instruction's
        own operands)."""
        direct = {w for _, values, _ in plan for w in values[1:]}
        for r in risky:
            ref = self.element(r)
            if ref.word in direct:
                continue
            ti = target.index.word if target.index is not None else None
            ri = ref.index.word if ref.index is not None else None
            if ti is None or ri is None:
                continue
            self.emit(ASSERT, [cond_word(CMP_NE, INT), ti, ri,
                               self.message(f"`{text(r)}` is the target `{target.text}` of this "
                                            f"update (the same cell): an update may not read "
                                            f"its own target", [ti, ri],
                                            [_index_text(target.text), _index_text(text(r))])],
                      r.pos)


def _index_text(s: str) -> str:
    """`i + 1` of `a[i + 1]`."""
    return s[s.index("[") + 1:-1] if "[" in s else s


def _wrap(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def _tn(t) -> str:
    return t if isinstance(t, str) else t.name_
