"""Derivative expressions: one text, evaluated in Python and compiled to C over dual numbers.

A local derivative in isa/ is written once as a small expression over the instruction's source
values, e.g. ``"0.5 / sqrt(x)"`` or ``"pow(a, b) * log(a) if a > 0 else 0"``.  From that one
text come (1) its value in Python (tests, docs) and (2) C code that evaluates it over
``rvm_dual`` numbers (value, tangent): the value is the partial derivative the tangent and
adjoint rules need, the tangent its directional derivative, which tangent-over-adjoint (Hessian)
mode needs.  So second derivatives are never written by hand.

The language is Python syntax restricted to: numbers, the source names, ``+ - * /``, unary
minus, calls of FUNCTIONS, comparisons ``< <= > >= == !=`` of values and ``A if COND else B``.
"""
from __future__ import annotations

import ast
import functools
import math
import operator
import threading
from collections.abc import Callable, Mapping

# name -> (arity, Python implementation); the C side implements d_<name> in rvm/_dual.h
FUNCTIONS: dict[str, tuple[int, Callable[..., float]]] = {
    "sqrt": (1, math.sqrt),
    "exp": (1, math.exp),
    "log": (1, math.log),
    "sin": (1, math.sin),
    "cos": (1, math.cos),
    "tan": (1, math.tan),
    "atan": (1, math.atan),
    "tanh": (1, math.tanh),
    "sigmoid": (1, lambda x: 1.0 / (1.0 + math.exp(-x)) if x >= 0 else
                math.exp(x) / (1.0 + math.exp(x))),
    "sign": (1, lambda x: float((x > 0) - (x < 0))),
    "pow": (2, math.pow),
    "hypot": (2, math.hypot),
}

_BINOPS = {ast.Add: ("+", "d_add"), ast.Sub: ("-", "d_sub"), ast.Mult: ("*", "d_mul"),
           ast.Div: ("/", "d_div")}
_CMPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_CMP_FN = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}


class ExprError(ValueError):
    """An expression outside the derivative language."""


# CPython 3.11's ast.parse is not safe in two threads at once ("AST constructor recursion
# depth mismatch"): the native tangent library is generated in a background thread
_parse_lock = threading.Lock()


@functools.cache
def _tree(text: str) -> ast.expr:
    """The parsed text (read only: every caller walks it, none changes it)."""
    with _parse_lock:
        return ast.parse(text, mode="eval").body


def parse(text: str, names: tuple[str, ...]) -> ast.expr:
    """Parse and check `text` as an expression over `names`."""
    try:
        tree = _tree(text)
    except SyntaxError as e:
        raise ExprError(f"{text!r}: {e.msg}") from None
    _check(tree, text, names)
    return tree


def _check(node: ast.AST, text: str, names: tuple[str, ...]) -> None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ExprError(f"{text!r}: unknown name {node.id!r} (sources are {names})")
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check(node.left, text, names)
        _check(node.right, text, names)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand, text, names)
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in FUNCTIONS and not node.keywords:
        if len(node.args) != FUNCTIONS[node.func.id][0]:
            raise ExprError(f"{text!r}: {node.func.id} takes {FUNCTIONS[node.func.id][0]} "
                            "arguments")
        for a in node.args:
            _check(a, text, names)
        return
    if isinstance(node, ast.IfExp):
        for part in (node.test, node.body, node.orelse):
            _check(part, text, names)
        return
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPS:
        _check(node.left, text, names)
        _check(node.comparators[0], text, names)
        return
    raise ExprError(f"{text!r}: {ast.dump(node)[:40]}... is outside the derivative language")


def evaluate(text: str, values: Mapping[str, float]) -> float:
    """The expression's value at `values` (IEEE semantics: x/0 gives inf or nan, no raise)."""
    return float(_eval(parse(text, tuple(values)), values))


def _eval(node: ast.AST, env: Mapping[str, float]) -> float:
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return float(env[node.id])
    if isinstance(node, ast.UnaryOp):
        return -_eval(node.operand, env)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if b == 0.0:
            return math.copysign(math.inf, a) * math.copysign(1.0, b) if a else math.nan
        return a / b
    if isinstance(node, ast.Call):
        fn = FUNCTIONS[node.func.id][1]
        try:
            return fn(*(_eval(a, env) for a in node.args))
        except (ValueError, OverflowError, ZeroDivisionError):
            return math.nan
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env) else node.orelse, env)
    if isinstance(node, ast.Compare):
        a, b = _eval(node.left, env), _eval(node.comparators[0], env)
        return float(_CMP_FN[type(node.ops[0])](a, b))
    raise AssertionError(node)


def to_c_dual(text: str, names: tuple[str, ...]) -> str:
    """C expression of type rvm_dual computing `text` over rvm_dual variables `names`."""
    return _c(parse(text, names))


def _c(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return f"d_const({float(node.value)!r})"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.UnaryOp):
        return f"d_neg({_c(node.operand)})"
    if isinstance(node, ast.BinOp):
        return f"{_BINOPS[type(node.op)][1]}({_c(node.left)}, {_c(node.right)})"
    if isinstance(node, ast.Call):
        return f"d_{node.func.id}({', '.join(_c(a) for a in node.args)})"
    if isinstance(node, ast.IfExp):
        return f"({_c(node.test)} ? {_c(node.body)} : {_c(node.orelse)})"
    if isinstance(node, ast.Compare):
        # a comparison looks at values only: the branches are pieces of one function
        op = _CMPS[type(node.ops[0])]
        return f"(({_c(node.left)}).v {op} ({_c(node.comparators[0])}).v)"
    raise AssertionError(node)
