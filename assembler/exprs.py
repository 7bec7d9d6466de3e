"""Expressions: their types, constant folding, and their source text.

Types (docs/rasm.md, "Expressions"): every operand of an arithmetic operator has one cell type
(int, fixed, float or lns); a literal takes the type its context gives it; there is no implicit
conversion (write `float(i)`).  Comparisons, `&&`, `||`, `!` and `empty(s)` are `bool`; a bool
used as a number is int 0/1.  Operators by type:

    int     + - * / % & | ^ << >> ~ and unary -      / is floor division, % floor modulus
    fixed   + - * /, unary -                          products and quotients round half to even
    float   + - * /, unary -                          IEEE binary64
    lns     * /, unary -                              exact

Functions: those of isa/functions.py (`sqrt(x)`, `atan2(y, x)`, `min(a, b)`, ...), the
conversions `int(x)`, `fixed(x)`, `float(x)`, `lns(x)`, and the stack queries `top(s)`,
`size(s)`, `empty(s)`.  An expression made of literals only is folded by the instructions'
own arithmetic (isa/arith.py) once its type is known.
"""
from __future__ import annotations

from isa import arith
from isa.functions import CMP_SYMBOLS, FN1_BY_NAME, FN2_BY_NAME
from isa.types import FIXED, FLOAT, INT, LNS, TYPE_BY_NAME, NumType

from .diagnostics import Fail
from .literals import Lit, LiteralError, literal_word
from .nodes import Binary, BoolLit, Call, Compare, Index, Len, Literal, Logic, Name, Unary

BOOL = "bool"                    # the type of conditions (not a cell type)
Type = NumType | str | None      # None: a literal expression whose type the context decides

OPERATORS: dict[str, tuple[NumType, ...]] = {
    "+": (INT, FIXED, FLOAT), "-": (INT, FIXED, FLOAT), "*": (INT, FIXED, FLOAT, LNS),
    "/": (INT, FIXED, FLOAT, LNS), "%": (INT,), "&": (INT,), "|": (INT,), "^": (INT,),
    "<<": (INT,), ">>": (INT,)}
#: int operators that are FN2 functions of the table: `a % b` is `y += mod(a, b)`
OPERATOR_FN = {"%": "mod", "&": "bitand", "|": "bitor", "^": "bitxor", "<<": "shl", ">>": "shr"}
STACK_QUERIES = ("top", "size", "empty")
PRECEDENCE = {"||": 1, "&&": 2, "cmp": 3, "|": 4, "^": 5, "&": 6, "<<": 7, ">>": 7, "+": 8,
              "-": 8, "*": 9, "/": 9, "%": 9}


def tname(t: Type) -> str:
    if t is None:
        return "a literal"
    return t if isinstance(t, str) else t.name_


# ---- source text ------------------------------------------------------------------------------

def text(e, prec: int = 0) -> str:
    """Source-like text of an expression, parenthesized only where needed."""
    if isinstance(e, Literal):
        return e.lit.text
    if isinstance(e, Name):
        return e.name
    if isinstance(e, Len):
        return f"len({e.name})"
    if isinstance(e, Index):
        return f"{e.name}[{text(e.index)}]"
    if isinstance(e, BoolLit):
        return "true" if e.value else "false"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(text(a) for a in e.args)})"
    if isinstance(e, Unary):
        s = e.op + text(e.arg, 10)
        return s
    if isinstance(e, (Binary, Logic, Compare)):
        if isinstance(e, Compare):
            op, p = CMP_SYMBOLS[e.cmp], PRECEDENCE["cmp"]
        else:
            op, p = e.op, PRECEDENCE[e.op]
        s = f"{text(e.left, p)} {op} {text(e.right, p + 1)}"
        return f"({s})" if p < prec else s
    return "?"


def is_leaf(e) -> bool:
    return isinstance(e, (Literal, Name, Index, Len))


def names_read(e, out: set[str], is_stack=None) -> set[str]:
    """Every name whose cells an expression reads (index expressions included; `len(a)` reads
    no cell, nor does `size(a)` of an array when `is_stack(name)` says it is not a stack)."""
    if isinstance(e, Name):
        out.add(e.name)
    elif isinstance(e, Index):
        out.add(e.name)
        names_read(e.index, out, is_stack)
    elif isinstance(e, Unary):
        names_read(e.arg, out, is_stack)
    elif isinstance(e, (Binary, Logic, Compare)):
        names_read(e.left, out, is_stack)
        names_read(e.right, out, is_stack)
    elif isinstance(e, Call):
        if e.name in STACK_QUERIES and e.args and isinstance(e.args[0], Name):
            if is_stack is None or is_stack(e.args[0].name):
                out.add(e.args[0].name)
            return out
        for a in e.args:
            names_read(a, out, is_stack)
    return out


# ---- typing --------------------------------------------------------------------------------------

class Typer:
    """Types of the nodes of one statement's expressions, and the words of folded constants.

    `infer(e)` gives a node's own type (None for literal-only expressions), `settle(e, t)`
    pushes a context type down to the literals and folds constant subexpressions; afterwards
    `type_of(e)` and `const_of(e)` answer for every node.  `lookup(name, pos)` resolves a name
    to its symbol (scope first, then globals).
    """

    def __init__(self, lookup, F: int):
        self.lookup = lookup
        self.F = F
        self.types: dict[int, Type] = {}
        self.consts: dict[int, int] = {}       # id(node) -> word, for folded nodes
        self.keep: list = []                   # nodes made here (ids must stay unique)

    def reset(self) -> None:
        self.types.clear()
        self.consts.clear()
        self.keep.clear()

    def type_of(self, e) -> Type:
        return self.types[id(e)]

    def const_of(self, e) -> int | None:
        return self.consts.get(id(e))

    def set(self, e, t: Type) -> Type:
        self.types[id(e)] = t
        return t

    # -- bottom up
    def infer(self, e) -> Type:
        if isinstance(e, Literal):
            return self.set(e, None)
        if isinstance(e, Name):
            sym = self.lookup(e.name, e.pos)
            if sym.is_array:
                raise Fail(e.pos, "E008", f"array `{e.name}` needs an index here")
            return self.set(e, sym.type)
        if isinstance(e, Index):
            sym = self.lookup(e.name, e.pos)
            if not sym.is_array:
                raise Fail(e.pos, "E008", f"`{e.name}` is not an array")
            self.index_type(e.index)
            return self.set(e, sym.type)
        if isinstance(e, Len):
            sym = self.lookup(e.name, e.pos)
            if not sym.is_array:
                raise Fail(e.pos, "E008", f"`{e.name}` is not an array")
            # a static length is a literal; a parameter's is the N operand
            return self.set(e, INT if sym.length is None or sym.length < 0 else None)
        if isinstance(e, BoolLit):
            return self.set(e, BOOL)
        if isinstance(e, Unary):
            t = self.infer(e.arg)
            if e.op == "!":
                self.want_bool(e.arg, t, "`!`")
                return self.set(e, BOOL)
            t = self.numeric(e.arg, t)
            if e.op == "~" and t not in (INT, None):
                raise Fail(e.pos, "E004", f"`~` takes an int, not {tname(t)}: bits are int")
            if e.op == "-" and t == LNS:
                return self.set(e, LNS)
            return self.set(e, t)
        if isinstance(e, Binary):
            return self.set(e, self.binary(e))
        if isinstance(e, Compare):
            tl = self.numeric(e.left, self.infer(e.left))
            tr = self.numeric(e.right, self.infer(e.right))
            self.unify(e, tl, tr, "compared")
            return self.set(e, BOOL)
        if isinstance(e, Logic):
            self.want_bool(e.left, self.infer(e.left), f"`{e.op}`")
            self.want_bool(e.right, self.infer(e.right), f"`{e.op}`")
            return self.set(e, BOOL)
        if isinstance(e, Call):
            return self.set(e, self.call(e))
        raise Fail(e.pos, "E001", "not an expression")

    def index_type(self, ix) -> None:
        t = self.numeric(ix, self.infer(ix))
        if t not in (INT, None):
            raise Fail(ix.pos, "E004", f"index `{text(ix)}` is {tname(t)}, not int")

    def want_bool(self, e, t: Type, what: str) -> None:
        if t != BOOL:
            raise Fail(e.pos, "E004", f"{what} takes a condition, not {tname(t)} "
                                      f"`{text(e)}`: compare it, e.g. `{text(e)} != 0`")

    def numeric(self, e, t: Type) -> Type:
        """A bool used as a number is int 0/1."""
        return INT if t == BOOL else t

    def unify(self, e, tl: Type, tr: Type, how: str) -> Type:
        if tl is None or tr is None or tl == tr:
            return tl if tl is not None else tr
        right = e.right
        raise Fail(right.pos, "E004", f"type mismatch: `{text(right)}` is {tname(tr)}, "
                                      f"`{text(e.left)}` is {tname(tl)} (convert one with "
                                      f"{tname(tl)}(...) or {tname(tr)}(...))")

    def binary(self, e: Binary) -> Type:
        tl = self.numeric(e.left, self.infer(e.left))
        tr = self.numeric(e.right, self.infer(e.right))
        if e.op in ("<<", ">>"):
            for side, t in ((e.left, tl), (e.right, tr)):
                if t not in (INT, None):
                    raise Fail(side.pos, "E004", f"`{e.op}` takes int operands, not "
                                                 f"{tname(t)} `{text(side)}`")
            return INT if (tl is not None or tr is not None) else None
        t = self.unify(e, tl, tr, "combined")
        if t is not None and t not in OPERATORS[e.op]:
            allowed = ", ".join(x.name_ for x in OPERATORS[e.op])
            raise Fail(e.pos, "E004", f"`{e.op}` does not exist for {t.name_} values "
                                      f"(it takes {allowed})")
        return t

    def call(self, e: Call) -> Type:
        name, n = e.name, len(e.args)
        if name in TYPE_BY_NAME:
            if n != 1:
                raise Fail(e.pos, "E009", f"`{name}(x)` converts one value")
            t = self.numeric(e.args[0], self.infer(e.args[0]))
            dst = TYPE_BY_NAME[name]
            if t is None:
                raise Fail(e.args[0].pos, "E004", f"literal `{text(e.args[0])}` has no type to "
                                                  f"convert from: convert a cell")
            if t == dst:
                raise Fail(e.args[0].pos, "E004", f"`{text(e.args[0])}` is already "
                                                  f"{dst.name_}: no conversion needed")
            return dst
        if name in STACK_QUERIES:
            if n != 1 or not isinstance(e.args[0], Name):
                raise Fail(e.pos, "E009", f"`{name}(s)` takes one stack")
            sym = self.lookup(e.args[0].name, e.args[0].pos)
            if name == "size" and sym.is_array and not sym.stack:
                # Janus's size(a) of an array is len(a): a literal for a static length
                self.set(e.args[0], INT)
                return INT if sym.length is None or sym.length < 0 else None
            if not getattr(sym, "stack", False):
                raise Fail(e.args[0].pos, "E004", f"`{e.args[0].name}` is not a stack")
            self.set(e.args[0], INT)
            return BOOL if name == "empty" else INT
        fn1, fn2 = FN1_BY_NAME.get(name), FN2_BY_NAME.get(name)
        if fn1 is None and fn2 is None:
            raise Fail(e.pos, "E012", f"unknown function `{name}`")
        fn = fn1 if (fn1 is not None and (n == 1 or fn2 is None)) else fn2
        if n != fn.arity:
            raise Fail(e.pos, "E009", f"`{name}` takes {fn.arity} argument"
                                      f"{'s' * (fn.arity > 1)}")
        ts = [self.numeric(a, self.infer(a)) for a in e.args]
        t = ts[0]
        if n == 2:
            t = self.unify(Binary(e.pos, ",", e.args[0], e.args[1]), ts[0], ts[1], "passed")
        if t is not None and t not in fn.types:
            raise Fail(e.pos, "E004", f"`{name}` does not exist for {tname(t)} cells")
        return t

    # -- top down
    def settle(self, e, want: Type) -> None:
        """Give literal-only subexpressions the context type `want` and fold them."""
        t = self.types[id(e)]
        if t is None:
            if want is None:
                raise Fail(e.pos, "E004", f"the type of `{text(e)}` is unknown here: "
                                          f"compare or combine it with a cell")
            if want == BOOL:
                want = INT
            self.types[id(e)] = want
            self.consts[id(e)] = self.fold(e, want)
            return
        if isinstance(e, Index):
            self.settle(e.index, INT)
        elif isinstance(e, Unary):
            self.settle(e.arg, BOOL if e.op == "!" else t)
        elif isinstance(e, Binary):
            if e.op in ("<<", ">>"):
                self.settle(e.left, INT)
                self.settle(e.right, INT)
            else:
                self.settle(e.left, t)
                self.settle(e.right, t)
        elif isinstance(e, Compare):
            side = self.types[id(e.left)]
            if side is None:
                side = self.types[id(e.right)]
            side = INT if side == BOOL else side
            if side is None:
                if not (_int_literals(e.left) and _int_literals(e.right)):
                    raise Fail(e.pos, "E004", "a comparison of two literals has no type: "
                                              "compare a cell")
                side = INT                  # `1 = 1` (Janus): integers compare as ints
            self.settle(e.left, side)
            self.settle(e.right, side)
        elif isinstance(e, Logic):
            self.settle(e.left, BOOL)
            self.settle(e.right, BOOL)
        elif isinstance(e, Call) and e.name not in STACK_QUERIES:
            for a in e.args:
                at = self.types[id(a)]
                self.settle(a, at if at is not None else
                            (t if e.name not in TYPE_BY_NAME else None))

    def fold(self, e, t: NumType) -> int:
        """The word of a literal-only expression in type t, computed as the instructions do."""
        try:
            return self._fold(e, t)
        except arith.ArithTrap as x:
            raise Fail(e.pos, "E006", f"`{text(e)}`: {x}") from None

    def _fold(self, e, t: NumType) -> int:
        F = self.F
        if isinstance(e, Literal):
            try:
                return literal_word(e.lit, t, F)
            except LiteralError as x:
                raise Fail(e.pos, x.code, x.message) from None
        if isinstance(e, Len):
            sym = self.lookup(e.name, e.pos)
            return sym.length
        if isinstance(e, Unary):
            a = self._fold(e.arg, t)
            if e.op == "~":
                return ~a
            return arith.execute(_op("neg", t), [a], F)[0]
        if isinstance(e, Binary):
            a, b = self._fold(e.left, t), self._fold(e.right, t)
            if e.op in OPERATOR_FN:
                return arith.int_fn2(OPERATOR_FN[e.op], a, b)
            if t == LNS:
                return arith.lns_mul(a, b, 1 if e.op == "*" else -1)
            if e.op in ("+", "-"):
                if t == FLOAT:
                    return arith.execute(_op("addsum" if e.op == "+" else "adddif", t),
                                         [0, a, b], F)[0]
                return arith.wrap(a + b if e.op == "+" else a - b)
            fam = "addmul" if e.op == "*" else "adddiv"
            return arith.execute(_op(fam, t), [0, a, b], F)[0]
        if isinstance(e, Call) and e.name == "size":
            return self.lookup(e.args[0].name, e.pos).length
        if isinstance(e, Call):
            fn = FN1_BY_NAME.get(e.name) if len(e.args) == 1 else FN2_BY_NAME.get(e.name)
            args = [self._fold(a, t) for a in e.args]
            if len(args) == 1:
                return arith.fn1_value(fn.id, t, args[0], F)
            return arith.fn2_value(fn.id, t, args[0], args[1], F)
        raise Fail(e.pos, "E004", f"`{text(e)}` is not a constant")

    def literal_node(self, e, t: NumType) -> Literal:
        """A Literal standing for a folded node (its word as a raw literal)."""
        w = self.consts[id(e)]
        lit = Literal(e.pos, Lit("raw", w & ((1 << 64) - 1), text(e), 16))
        self.keep.append(lit)
        self.types[id(lit)] = t
        self.consts[id(lit)] = w
        return lit


def _int_literals(e) -> bool:
    """Is e made of int literals only (no real literal, no cell)?"""
    if isinstance(e, Literal):
        return e.lit.kind == "int"
    if isinstance(e, Unary):
        return _int_literals(e.arg)
    if isinstance(e, Binary):
        return _int_literals(e.left) and _int_literals(e.right)
    return False


def _op(family: str, t: NumType):
    from isa.table import op_for
    return op_for(family, t)
