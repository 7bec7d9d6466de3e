"""Functions f in `y += f(x)` and `y += f(a, b)`, and comparison codes.

Each function is declared once: its id in bytecode, the cell types it exists for, its value on
floats (the machine evaluates fixed-point f through binary64 and rounds half to even), and its
partial derivatives as expressions (isa/expr.py) over the sources' values, from which
isa/derivatives.py builds the tangent, adjoint and Hessian rules.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .expr import evaluate
from .types import FIXED, FLOAT, INT, NumType


@dataclass(frozen=True)
class Fn:
    id: int
    name: str
    arity: int
    types: tuple[NumType, ...]
    value: Callable[..., float]
    derivs: tuple[str, ...]     # partial derivative per argument, in the language of isa/expr.py
    #                             (empty for an int-only function: int cells have no derivative)
    doc: str

    @property
    def differentiable(self) -> bool:
        return bool(self.derivs)

    @property
    def args(self) -> tuple[str, ...]:
        """Argument names the derivative expressions use."""
        return ("x",) if self.arity == 1 else ("a", "b")

    def partial(self, k: int, *args: float) -> float:
        """Value of the partial derivative with respect to argument k at `args`."""
        return evaluate(self.derivs[k], dict(zip(self.args, args)))


def _no_real(*args: float) -> float:
    raise ValueError("an int-only function has no real form")


def _min(a: float, b: float) -> float:
    return b if b < a else a


def _max(a: float, b: float) -> float:
    return b if b > a else a


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


FN1: tuple[Fn, ...] = (
    Fn(0, "sqrt", 1, (INT, FIXED, FLOAT), math.sqrt, ("0.5 / sqrt(x)",),
       "square root; x >= 0 (int: floor of the square root)"),
    Fn(1, "exp", 1, (FIXED, FLOAT), math.exp, ("exp(x)",), "e**x"),
    Fn(2, "log", 1, (FIXED, FLOAT), math.log, ("1 / x",), "natural log; x > 0"),
    Fn(3, "sin", 1, (FIXED, FLOAT), math.sin, ("cos(x)",), "sine"),
    Fn(4, "cos", 1, (FIXED, FLOAT), math.cos, ("-sin(x)",), "cosine"),
    Fn(5, "tan", 1, (FIXED, FLOAT), math.tan, ("1 / (cos(x) * cos(x))",), "tangent"),
    Fn(6, "atan", 1, (FIXED, FLOAT), math.atan, ("1 / (1 + x * x)",), "arc tangent"),
    Fn(7, "tanh", 1, (FIXED, FLOAT), math.tanh, ("1 - tanh(x) * tanh(x)",),
       "hyperbolic tangent"),
    Fn(8, "abs", 1, (INT, FIXED, FLOAT), abs, ("sign(x)",), "absolute value (derivative 0 at 0)"),
    Fn(9, "sigmoid", 1, (FIXED, FLOAT), _sigmoid, ("sigmoid(x) * (1 - sigmoid(x))",),
       "logistic 1/(1+e**-x)"),
    # int only: jana's `-m` (every expression value reduced to 32 bits before it is used)
    Fn(10, "wrap32", 1, (INT,), _no_real, (), "x reduced to the 32-bit two's complement range"),
)

FN2: tuple[Fn, ...] = (
    # at a == 0, d/da is the one-sided limit 0 (b > 1), 1 (b == 1) or inf (b < 1)
    Fn(0, "pow", 2, (FIXED, FLOAT), math.pow,
       ("b * pow(a, b - 1) if b != 0 else 0",
        "pow(a, b) * log(a) if a > 0 else 0"),
       "a**b; a > 0, or a == 0 with b > 0, or integral b"),
    Fn(1, "atan2", 2, (FIXED, FLOAT), math.atan2,
       ("b / (a * a + b * b)", "-a / (a * a + b * b)"), "angle of the point (b, a)"),
    Fn(2, "hypot", 2, (FIXED, FLOAT), math.hypot,
       ("a / hypot(a, b)", "b / hypot(a, b)"), "sqrt(a*a + b*b)"),
    # exact on every type (fixed compares words: no binary64 round trip); a when equal
    Fn(3, "min", 2, (INT, FIXED, FLOAT), _min, ("0 if b < a else 1", "1 if b < a else 0"),
       "the smaller of a and b (b if b < a, else a)"),
    Fn(4, "max", 2, (INT, FIXED, FLOAT), _max, ("0 if b > a else 1", "1 if b > a else 0"),
       "the larger of a and b (b if b > a, else a)"),
    # int only (no derivative): the int operators of expressions (docs/rasm.md)
    Fn(5, "mod", 2, (INT,), _no_real, (),
       "floor modulus a - b*floor(a/b): the sign of b, as Janus; traps if b == 0"),
    Fn(6, "shl", 2, (INT,), _no_real, (),
       "a << b wrapped to 64 bits (0 for b >= 64); traps if b < 0"),
    Fn(7, "shr", 2, (INT,), _no_real, (),
       "a >> b arithmetic: floor(a / 2**b) (0 or -1 for b >= 64); traps if b < 0"),
    Fn(8, "bitand", 2, (INT,), _no_real, (), "a & b"),
    Fn(9, "bitor", 2, (INT,), _no_real, (), "a | b"),
    Fn(10, "bitxor", 2, (INT,), _no_real, (), "a ^ b"),
)

FN1_BY_NAME = {f.name: f for f in FN1}
FN2_BY_NAME = {f.name: f for f in FN2}

# Comparison codes used by jmp/join/assert conditions.  A condition word is cmp | (type << 4).
CMP_ALWAYS, CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE = range(7)
CMP_SYMBOLS = {CMP_EQ: "==", CMP_NE: "!=", CMP_LT: "<", CMP_LE: "<=", CMP_GT: ">", CMP_GE: ">="}
CMP_BY_SYMBOL = {v: k for k, v in CMP_SYMBOLS.items()}
CMP_NEGATE = {CMP_ALWAYS: CMP_ALWAYS, CMP_EQ: CMP_NE, CMP_NE: CMP_EQ, CMP_LT: CMP_GE,
              CMP_GE: CMP_LT, CMP_GT: CMP_LE, CMP_LE: CMP_GT}


def cond_word(cmp: int, t: NumType) -> int:
    return cmp | (int(t) << 4)


def cond_parts(word: int) -> tuple[int, NumType]:
    return word & 15, NumType((word >> 4) & 3)
