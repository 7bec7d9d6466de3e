"""Operand resolution: operand syntax -> `Ref` (operand word, type, overlap facts).

Names are looked up in the function scope (parameters and live locals), then among globals and
constants.  A literal becomes an interned constant cell of the type its context asks for;
`a[3]` on a global or local array becomes a direct address (bounds checked here); `a[i]`, or
any index into a parameter array, becomes an X operand (an xtab entry).  `len(p)` of a
parameter array is an N operand; of an array with a static length it is that number.
"""
from __future__ import annotations

from isa.program import MODE_G, MODE_N, MODE_P, MODE_X, operand
from isa.types import INT, NumType

from .diagnostics import Fail
from .literals import Lit, LiteralError, literal_word
from .nodes import Index, Len, Literal, Name
from .symbols import CellSym, Ref
from .unit import Unit


def describe(o) -> str:
    """Source-like text of an operand, for messages."""
    if isinstance(o, Literal):
        return o.lit.text
    if isinstance(o, Name):
        return o.name
    if isinstance(o, Len):
        return f"len({o.name})"
    if isinstance(o, Index):
        return f"{o.name}[{describe(o.index)}]"
    return "?"


class Resolver:
    def __init__(self, unit: Unit, cells: dict[str, CellSym], scope: dict[str, CellSym]):
        self.unit = unit
        self.cells = cells
        self.scope = scope

    def lookup(self, name: str, pos) -> CellSym:
        sym = self.scope.get(name) or self.cells.get(name)
        if sym is None:
            raise Fail(pos, "E002", f"undefined name `{name}`")
        return sym

    def word_of(self, lit: Literal, t: NumType) -> int:
        try:
            return literal_word(lit.lit, t, self.unit.F)
        except LiteralError as e:
            raise Fail(lit.pos, e.code, e.message) from None

    def static_len(self, o: Len) -> int | None:
        """len(a) of an array with a static length (None for a parameter array)."""
        sym = self.lookup(o.name, o.pos)
        if not sym.is_array:
            raise Fail(o.pos, "E008", f"`{o.name}` is not an array")
        return None if sym.mode == MODE_P else sym.length

    def as_literal(self, o) -> Literal | None:
        """The operand as a literal (a literal, or len() of a static array), else None."""
        if isinstance(o, Literal):
            return o
        if isinstance(o, Len):
            n = self.static_len(o)
            if n is not None:
                return Literal(o.pos, Lit("int", n, str(n)))
        return None

    def resolve(self, o, want: NumType | None) -> Ref:
        """A scalar operand as a Ref of type `want` (checked; literals take that type)."""
        lit = self.as_literal(o)
        if lit is not None:
            if want is None:
                raise Fail(o.pos, "E004", f"the type of literal `{describe(o)}` is unknown here")
            addr = self.unit.intern(want, self.word_of(lit, want))
            return Ref(operand(MODE_G, addr), want, describe(o), o.pos, const=True)
        if isinstance(o, Len):
            sym = self.lookup(o.name, o.pos)
            ref = Ref(operand(MODE_N, sym.loc), INT, describe(o), o.pos, const=True, sym=sym)
        elif isinstance(o, Name):
            sym = self.lookup(o.name, o.pos)
            if sym.is_array:
                raise Fail(o.pos, "E008", f"array `{o.name}` needs an index here")
            ref = Ref(operand(sym.mode, sym.loc), sym.type, o.name, o.pos, const=sym.const,
                      sym=sym)
        else:
            ref = self.element(o)
        if want is not None and ref.type != want:
            raise Fail(o.pos, "E004", f"type mismatch: `{ref.text}` is {ref.type.name_}, "
                                      f"expected {want.name_}")
        return ref

    def element(self, o: Index) -> Ref:
        sym = self.lookup(o.name, o.pos)
        if not sym.is_array:
            raise Fail(o.pos, "E008", f"`{o.name}` is not an array")
        base = operand(sym.mode, sym.loc)
        idx = self.as_literal(o.index) or o.index
        if isinstance(idx, Literal):
            if idx.lit.kind != "int":
                raise Fail(idx.pos, "E004", f"index `{idx.lit.text}` is not an int")
            k = int(idx.lit.value)
            if sym.length is not None and sym.length >= 0 and not 0 <= k < sym.length:
                raise Fail(idx.pos, "E006", f"index {k} is out of bounds for `{o.name}` "
                                            f"(length {sym.length})")
            if k < 0:
                raise Fail(idx.pos, "E006", f"index {k} is negative")
            if sym.mode != MODE_P:
                return Ref(operand(sym.mode, sym.loc + k), sym.type, describe(o), o.pos,
                           const=sym.const, sym=sym)
        index = self.resolve(idx, INT)
        if index.mode == MODE_X:
            raise Fail(idx.pos, "E008", f"index `{index.text}` is itself indexed by a cell: "
                                        f"copy it into a local first")
        length = -1 if sym.mode == MODE_P else sym.length
        x = self.unit.xentry(base, length, index.word)
        return Ref(operand(MODE_X, x), sym.type, describe(o), o.pos, const=sym.const, sym=sym,
                   base=base, index=index)

    def array(self, o) -> Ref:
        """A whole array (a call argument)."""
        if not isinstance(o, Name):
            raise Fail(o.pos, "E008", f"`{describe(o)}` is not an array")
        sym = self.lookup(o.name, o.pos)
        if not sym.is_array:
            raise Fail(o.pos, "E008", f"`{o.name}` is a cell, not an array")
        length = -1 if sym.mode == MODE_P else sym.length
        return Ref(operand(sym.mode, sym.loc), sym.type, o.name, o.pos, array=True,
                   length=length, const=sym.const, sym=sym)
