"""The syntax tree both front ends build (.rasm: parser.py; Janus: janus/) and codegen.py walks.

Every node carries the position of its first token (an operator node: the operator's, so that
a trap in the instructions an operator compiles to points at it).  Expressions are trees of
Literal, Name, Index, Len, Unary, Binary, Compare, Logic, Call and BoolLit; statements say
what to do with them.  Instruction statements with a leading keyword (`inc y`, `rot x, y, t`,
`call f(...)`) keep the instruction-table shape they matched (`Instr.match`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from isa.types import NumType

from .diagnostics import Pos
from .literals import Lit
from .shapes import Shape

# ---- expressions ----------------------------------------------------------------------------

@dataclass(slots=True, eq=False)
class Literal:
    pos: Pos
    lit: Lit


@dataclass(slots=True, eq=False)
class Name:
    pos: Pos
    name: str


@dataclass(slots=True, eq=False)
class Index:
    """`a[e]`: e is an int expression."""
    pos: Pos
    name: str
    index: Expr


@dataclass(slots=True, eq=False)
class Len:
    """`len(a)`: the length of an array."""
    pos: Pos
    name: str


@dataclass(slots=True, eq=False)
class Unary:
    """`-e`, `~e` (int bits) or `!e` (logical not)."""
    pos: Pos
    op: str
    arg: Expr


@dataclass(slots=True, eq=False)
class Binary:
    """`l OP r` for OP in + - * / % & | ^ << >> (pos: the operator's)."""
    pos: Pos
    op: str
    left: Expr
    right: Expr


@dataclass(slots=True, eq=False)
class Compare:
    """`l CMP r`, cmp an isa.functions CMP_* code (pos: the left operand's)."""
    pos: Pos
    cmp: int
    left: Expr
    right: Expr


@dataclass(slots=True, eq=False)
class Logic:
    """`l && r` or `l || r` (short-circuit, as Janus; pos: the operator's)."""
    pos: Pos
    op: str
    left: Expr
    right: Expr


@dataclass(slots=True, eq=False)
class Call:
    """`f(e, ...)`: a function of isa/functions.py, a conversion `fixed(e)`, or a stack query
    `top(s)`, `empty(s)`, `size(s)`."""
    pos: Pos
    name: str
    args: list


@dataclass(slots=True, eq=False)
class BoolLit:
    pos: Pos
    value: bool


Expr = Literal | Name | Index | Len | Unary | Binary | Compare | Logic | Call | BoolLit
Operand = Literal | Name | Index | Len


@dataclass(slots=True, eq=False)
class CallExpr:
    """`call f(a, ...)`: by-reference arguments (cells, elements, arrays; literals)."""
    pos: Pos                 # of the function name
    name: str
    args: list


@dataclass(slots=True, eq=False)
class TraceExpr:
    pos: Pos
    message: str
    operands: list


# ---- statements -----------------------------------------------------------------------------

@dataclass(slots=True, eq=False)
class Match:
    """How a keyword statement reads as an instruction shape."""
    shape: Shape
    operands: dict = field(default_factory=dict)
    fn: Name | None = None
    label: Name | None = None
    cond: Expr | None = None
    call: CallExpr | None = None
    trace: TraceExpr | None = None
    message: str | None = None       # assert COND, "message"
    names: list | None = None        # assert COND, "message", "name of a", "name of b"


@dataclass(slots=True, eq=False)
class Instr:
    """A statement with a leading keyword, matched against the table's shapes."""
    pos: Pos
    matches: list


@dataclass(slots=True, eq=False)
class Deriv:
    """`target += grad f(args) wrt x` or `target += jvp f(args) wrt x along v` (also `-=`):
    a derivative of f, whose first parameter (not written in args) is its float output."""
    pos: Pos
    target: Expr
    op: str
    op_pos: Pos
    kind: str                # "grad" or "jvp"
    call: CallExpr
    wrt: Expr
    along: Expr | None


@dataclass(slots=True, eq=False)
class Update:
    """`target OP= expr` (OP one of + - ^ * /): compiled by compute-use-uncompute."""
    pos: Pos
    target: Expr
    op: str
    op_pos: Pos
    expr: Expr


@dataclass(slots=True, eq=False)
class Swap:
    """`a <=> b` (Janus's swap)."""
    pos: Pos
    a: Expr
    b: Expr


@dataclass(slots=True, eq=False)
class StackOp:
    """`push x, s` / `pop x, s` on a named stack (Janus `push(x, s)`)."""
    pos: Pos
    op: str                  # "push" | "pop"
    cell: Expr
    stack: Name


@dataclass(slots=True, eq=False)
class Show:
    """`show a, b` (and Janus show/print/printf): report values, change nothing.  `fmt` is a
    printf format (Janus printf) or None; `message` a plain text (print)."""
    pos: Pos
    operands: list
    message: str = ""
    fmt: str | None = None


@dataclass(slots=True, eq=False)
class TypeSpec:
    pos: Pos
    type: NumType
    array: bool = False
    length: int | None = None    # None with array=True: `T[]`
    stack: bool = False          # `stack[n]`: a named stack of int (length = its capacity)


@dataclass(slots=True, eq=False)
class LocalDecl:
    """`local t: T [= e]` (emit=True, allocates) or `var t: T` (declaration only)."""
    pos: Pos
    name: Name
    spec: TypeSpec
    emit: bool
    init: Expr | None = None


@dataclass(slots=True, eq=False)
class Delocal:
    """`delocal t [= e]`: e, when given, is checked against t's value before t is released."""
    pos: Pos
    name: Name
    value: Expr | None = None


@dataclass(slots=True, eq=False)
class Label:
    pos: Pos
    name: str


@dataclass(slots=True, eq=False)
class If:
    pos: Pos
    cond: Expr
    then: list
    else_pos: Pos | None
    els: list | None
    fi_pos: Pos                  # of `fi`, or of the closing brace without one
    fi_cond: Expr | None


@dataclass(slots=True, eq=False)
class From:
    pos: Pos
    cond: Expr
    body: list
    loop_pos: Pos | None
    loop: list
    until_pos: Pos
    until: Expr


@dataclass(slots=True, eq=False)
class For:
    pos: Pos
    var: Name
    lo: Expr
    hi: Expr
    body: list
    end_pos: Pos


@dataclass(slots=True, eq=False)
class With:
    pos: Pos
    body: list
    do_pos: Pos
    do: list
    end_pos: Pos


@dataclass(slots=True, eq=False)
class Recovered:
    """The blocks of a statement that had a syntax error, kept to be checked (never run)."""
    pos: Pos
    body: list


Stmt = (Instr | Update | Deriv | Swap | StackOp | Show | LocalDecl | Delocal | Label | If | From
        | For | With | Recovered)


# ---- top level ------------------------------------------------------------------------------

@dataclass(slots=True, eq=False)
class FixedDirective:
    pos: Pos
    bits: int


@dataclass(slots=True, eq=False)
class Include:
    pos: Pos
    path: str


@dataclass(slots=True, eq=False)
class Decl:
    """A global cell or constant: role is input/output/inout/global/const."""
    pos: Pos
    role: str
    name: Name
    spec: TypeSpec
    init: list | None                # scalar: one literal; array: the bracketed list
    init_pos: Pos | None = None
    bracketed: bool = False


@dataclass(slots=True, eq=False)
class ParamDecl:
    pos: Pos
    name: Name
    spec: TypeSpec


@dataclass(slots=True, eq=False)
class FuncDecl:
    """A function.  `body` is its statements, or None when the body is compiled straight
    from the source (`body_at`: where its `{` ends, see parser.BodyRef)."""
    pos: Pos
    name: Name
    params: list
    body: list | None
    end_pos: Pos | None
    body_at: object = None


TopItem = FixedDirective | Include | Decl | FuncDecl
