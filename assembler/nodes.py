"""The syntax tree the parser builds and the code generator walks.

Every node carries the position of its first token.  Instruction statements keep every shape
of the instruction table they match (`Instr.matches`); the code generator picks the opcode.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from isa.types import NumType

from .diagnostics import Pos
from .literals import Lit
from .shapes import Shape


# ---- operands -------------------------------------------------------------------------------

@dataclass
class Literal:
    pos: Pos
    lit: Lit


@dataclass
class Name:
    pos: Pos
    name: str


@dataclass
class Index:
    """`a[i]`: i is an int operand or a literal."""
    pos: Pos
    name: str
    index: "Operand"


@dataclass
class Len:
    """`len(a)`: the length of an array."""
    pos: Pos
    name: str


Operand = Literal | Name | Index | Len


@dataclass
class Cond:
    pos: Pos
    cmp: int                 # isa.functions CMP_*
    left: Operand
    right: Operand


@dataclass
class CallExpr:
    pos: Pos                 # of the function name
    name: str
    args: list[Operand]


@dataclass
class TraceExpr:
    pos: Pos
    message: str
    operands: list[Operand]


# ---- statements -----------------------------------------------------------------------------

@dataclass
class Match:
    """One way the statement reads as an instruction shape."""
    shape: Shape
    operands: dict[int, Operand] = field(default_factory=dict)
    fn: Name | None = None
    label: Name | None = None
    cond: Cond | None = None
    call: CallExpr | None = None
    trace: TraceExpr | None = None


@dataclass
class Instr:
    pos: Pos
    matches: list[Match]


@dataclass
class TypeSpec:
    pos: Pos
    type: NumType
    array: bool = False
    length: int | None = None    # None with array=True: `T[]`


@dataclass
class LocalDecl:
    """`local t: T` (emit=True, allocates) or `var t: T` (declaration only)."""
    pos: Pos
    name: Name
    spec: TypeSpec
    emit: bool


@dataclass
class Delocal:
    pos: Pos
    name: Name


@dataclass
class Label:
    pos: Pos
    name: str


@dataclass
class If:
    pos: Pos
    cond: Cond
    then: list
    else_pos: Pos | None
    els: list | None
    fi_pos: Pos                  # of `fi`, or of the closing brace without one
    fi_cond: Cond | None


@dataclass
class From:
    pos: Pos
    cond: Cond
    body: list
    loop_pos: Pos | None
    loop: list
    until_pos: Pos
    until: Cond


@dataclass
class For:
    pos: Pos
    var: Name
    lo: Operand
    hi: Operand
    body: list
    end_pos: Pos


@dataclass
class With:
    pos: Pos
    body: list
    do_pos: Pos
    do: list
    end_pos: Pos


@dataclass
class Recovered:
    """The blocks of a statement that had a syntax error, kept to be checked (never run)."""
    pos: Pos
    body: list


Stmt = Instr | LocalDecl | Delocal | Label | If | From | For | With | Recovered


# ---- top level ------------------------------------------------------------------------------

@dataclass
class FixedDirective:
    pos: Pos
    bits: int


@dataclass
class Include:
    pos: Pos
    path: str


@dataclass
class Decl:
    """A global cell or constant: role is input/output/inout/global/const."""
    pos: Pos
    role: str
    name: Name
    spec: TypeSpec
    init: list[Literal] | None       # scalar: one literal; array: the bracketed list
    init_pos: Pos | None = None
    bracketed: bool = False


@dataclass
class ParamDecl:
    pos: Pos
    name: Name
    spec: TypeSpec


@dataclass
class FuncDecl:
    pos: Pos
    name: Name
    params: list[ParamDecl]
    body: list
    end_pos: Pos


TopItem = FixedDirective | Include | Decl | FuncDecl
