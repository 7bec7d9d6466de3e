"""Functions f in `y += f(x)` and `y += f(a, b)`, and comparison codes.

Each function is declared once: its id in bytecode, the cell types it exists for, its value on
floats (the machine evaluates fixed-point f through binary64 and rounds half to even), and its
partial derivatives (used by the AD rules).  Derivatives are functions of the sources' values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .types import FIXED, FLOAT, INT, NumType


@dataclass(frozen=True)
class Fn:
    id: int
    name: str
    arity: int
    types: tuple[NumType, ...]
    value: Callable[..., float]
    derivs: tuple[Callable[..., float], ...]
    doc: str


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


FN1: tuple[Fn, ...] = (
    Fn(0, "sqrt", 1, (INT, FIXED, FLOAT), math.sqrt, (lambda x: 0.5 / math.sqrt(x),),
       "square root; x >= 0 (int: floor of the square root)"),
    Fn(1, "exp", 1, (FIXED, FLOAT), math.exp, (math.exp,), "e**x"),
    Fn(2, "log", 1, (FIXED, FLOAT), math.log, (lambda x: 1.0 / x,), "natural log; x > 0"),
    Fn(3, "sin", 1, (FIXED, FLOAT), math.sin, (math.cos,), "sine"),
    Fn(4, "cos", 1, (FIXED, FLOAT), math.cos, (lambda x: -math.sin(x),), "cosine"),
    Fn(5, "tan", 1, (FIXED, FLOAT), math.tan, (lambda x: 1.0 / math.cos(x) ** 2,), "tangent"),
    Fn(6, "atan", 1, (FIXED, FLOAT), math.atan, (lambda x: 1.0 / (1.0 + x * x),), "arc tangent"),
    Fn(7, "tanh", 1, (FIXED, FLOAT), math.tanh, (lambda x: 1.0 - math.tanh(x) ** 2,),
       "hyperbolic tangent"),
    Fn(8, "abs", 1, (INT, FIXED, FLOAT), abs, (lambda x: math.copysign(1.0, x) if x else 0.0,),
       "absolute value (derivative 0 at 0)"),
    Fn(9, "sigmoid", 1, (FIXED, FLOAT), _sigmoid,
       (lambda x: _sigmoid(x) * (1.0 - _sigmoid(x)),), "logistic 1/(1+e**-x)"),
)

FN2: tuple[Fn, ...] = (
    Fn(0, "pow", 2, (FIXED, FLOAT), math.pow,
       (lambda a, b: b * math.pow(a, b - 1.0) if a != 0.0 else (0.0 if b > 1.0 else (1.0 if b == 1.0 else math.inf)),
        lambda a, b: math.pow(a, b) * math.log(a) if a > 0.0 else 0.0),
       "a**b; a > 0, or a == 0 with b > 0, or integral b"),
    Fn(1, "atan2", 2, (FIXED, FLOAT), math.atan2,
       (lambda a, b: b / (a * a + b * b), lambda a, b: -a / (a * a + b * b)),
       "angle of the point (b, a)"),
    Fn(2, "hypot", 2, (FIXED, FLOAT), math.hypot,
       (lambda a, b: a / math.hypot(a, b), lambda a, b: b / math.hypot(a, b)),
       "sqrt(a*a + b*b)"),
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
