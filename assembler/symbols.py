"""Symbols (declared cells and functions) and resolved operands (`Ref`) with their overlap test.

A `Ref` is an operand after name resolution: its operand word (rvm/program.py modes G/L/P/X/N),
its cell type, whether it is a whole array, and what it may overlap.  `overlaps` is the
assembler's *definite* aliasing test: it is true only when two operands are the same cell for
every run (same address, same parameter, same indexed entry); anything it cannot decide is left
to the machine's run-time checks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from isa.program import MODE_G, MODE_L, MODE_N, MODE_P, MODE_X, operand_parts
from isa.types import NumType

from .diagnostics import Pos
from .nodes import FuncDecl


@dataclass(eq=False)
class CellSym:
    """A named cell or array: a global, constant, parameter or local."""
    name: str
    type: NumType
    length: int | None          # None: scalar; n: array of n; -1: parameter array of any length
    mode: int                   # MODE_G, MODE_L or MODE_P
    loc: int                    # address, frame offset or parameter number
    kind: str                   # "global" | "const" | "param" | "local"
    pos: Pos
    stack: bool = False         # a named stack (an int array whose cell 0 is the size)

    @property
    def is_array(self) -> bool:
        return self.length is not None

    @property
    def const(self) -> bool:
        return self.kind == "const"

    @property
    def size(self) -> int:
        return 1 if self.length is None else self.length


@dataclass(eq=False)
class FuncSig:
    name: str
    index: int
    params: list[CellSym]
    decl: FuncDecl
    labels: set[str] = field(default_factory=set)


@dataclass(frozen=True, eq=False)
class Ref:
    """A resolved operand."""
    word: int                   # operand word (scalar) or array word (whole array)
    type: NumType
    text: str                   # as written, for messages
    pos: Pos
    array: bool = False
    length: int | None = None   # whole arrays: static length, -1 for a parameter array
    const: bool = False         # read-only: a constant or len()
    sym: CellSym | None = None
    base: int | None = None     # X operands: the array word
    index: Ref | None = None  # X operands: the index cell
    temp: bool = False          # a temporary of the statement (lower.py)

    @property
    def mode(self) -> int:
        return self.word & 7

    @property
    def param(self) -> int | None:
        """The parameter number this operand reaches into (P cells/arrays and X on a P base)."""
        word = self.base if self.mode == MODE_X else self.word
        if word is not None and word & 7 == MODE_P and self.mode != MODE_N:
            return word >> 3
        return None


def _extent(r: Ref) -> tuple:
    mode, payload = operand_parts(r.word)
    if mode in (MODE_G, MODE_L):
        return (mode, payload, payload + (r.length if r.array and r.length and r.length > 0 else 1))
    return (mode, payload)


def overlaps(a: Ref, b: Ref) -> bool:
    """True if `a` and `b` certainly share a cell."""
    if a.mode == MODE_N or b.mode == MODE_N:
        return False
    if a.mode == MODE_X or b.mode == MODE_X:
        if a.mode == MODE_X and b.mode == MODE_X:
            return a.base == b.base and a.index is not None and b.index is not None \
                and a.index.word == b.index.word
        x, other = (a, b) if a.mode == MODE_X else (b, a)
        return other.array and other.word == x.base
    ea, eb = _extent(a), _extent(b)
    if ea[0] != eb[0]:
        return False
    if ea[0] == MODE_P:
        return ea[1] == eb[1]
    return ea[1] < eb[2] and eb[1] < ea[2]


def index_refs(r: Ref) -> list[Ref]:
    """The index cells an operand reads to find its cell (none unless it is indexed)."""
    return [r.index] if r.mode == MODE_X and r.index is not None else []
