"""Cells by name, and the small expression language of print, display, conditions and set.

A `Scope` names the cells visible in one frame of the machine (its locals and parameters,
then the globals and constants) and reads them as typed values.  Expressions are Python
syntax restricted to numbers, names, indexing and slicing (`xs[i + 1]`, `xs[1:4]`),
arithmetic, comparisons, `and`/`or`/`not` and a few functions (len, abs, min, max, sum);
`@ADDR` names a raw memory cell.  Nothing here changes the machine except `Scope.store`.
"""
from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from typing import Any

from isa.types import NumType

from ..machine import Machine
from ..values import ValueEncodingError, decode, encode

__all__ = ["CellError", "Ref", "Scope", "format_value", "hex_word"]


class CellError(Exception):
    """A name, index or expression the debugger cannot evaluate (a command error)."""


@dataclass(frozen=True)
class Ref:
    """A named run of cells: one cell (length None) or an array (or a slice of one)."""
    name: str
    type: NumType | None        # None: a raw cell of unknown type (shown as an int word)
    addr: int                   # absolute address of the first cell
    length: int | None = None
    writable: bool = True

    def elements(self) -> list[Ref]:
        """One Ref per cell (the element names of an array)."""
        if self.length is None:
            return [self]
        base, _, rest = self.name.partition("[")
        start = 0
        if rest.endswith("]") and ":" in rest:          # a slice `xs[2:5]` keeps its offset
            start = int(rest.split(":")[0] or 0)
        return [Ref(f"{base}[{start + k}]", self.type, self.addr + k, None, self.writable)
                for k in range(self.length)]


def hex_word(word: int) -> str:
    """A raw 64-bit word as `0x` and 16 hex digits."""
    return f"0x{int(word) & (1 << 64) - 1:016x}"


def format_value(v: Any) -> str:
    """A value as the debugger prints it: ints exactly, floats by repr, lists in brackets."""
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
          ast.Invert: operator.invert}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
            ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_RAW_ADDR = re.compile(r"@(0[xX][0-9a-fA-F]+|\d+)")
_RAW_PREFIX = "__rdb_cell_"
_MAX_BITS = 4096            # no expression may build a number larger than this (no hangs)
_FUNCTIONS = {"abs": abs, "min": min, "max": max, "sum": sum, "int": int, "float": float}


class Scope:
    """The cells visible in frame `level` (0 = the entry function; None = no frame, only
    globals and constants), innermost names first."""

    def __init__(self, machine: Machine, level: int | None):
        self.m = machine
        self.level = level
        self.names: dict[str, Ref] = {}
        program = machine.program
        for c in program.consts:
            if ":" not in c.name:             # `2:int` is a literal the assembler interned
                self.names[c.name] = Ref(c.name, c.type, c.addr, c.length, False)
        for g in program.globals:
            self.names[g.name] = Ref(g.name, g.type, g.addr, g.length, True)
        if level is not None:
            core = machine.core
            fi, fp = core.frame(level)[:2]
            func = program.functions[fi]
            for p, par in enumerate(func.params):
                addr, length = core.param(level, p)
                lo, hi = program.const_range       # a parameter bound to a constant
                self.names[par.name] = Ref(par.name, par.type, int(addr),
                                           int(length) if par.is_array else None,
                                           not lo <= int(addr) < hi)
            # A name declared twice (two `for i` loops, a local declared again after its
            # delocal) has a cell per declaration.  Locals are zero outside their scope, so
            # the live one is the last declared that is nonzero (or else the last declared).
            mem = core.mem
            for loc in func.locals:
                ref = Ref(loc.name, loc.type, fp + loc.offset, loc.length, True)
                prev = self.names.get(loc.name)
                n = 1 if loc.length is None else loc.length
                live = bool(mem[ref.addr:ref.addr + n].any())
                if prev is None or prev.addr < fp or live or not self._live(prev):
                    self.names[loc.name] = ref

    def _live(self, ref: Ref) -> bool:
        n = 1 if ref.length is None else ref.length
        return bool(self.m.core.mem[ref.addr:ref.addr + n].any())

    # ---- reading and writing ------------------------------------------------------------

    def words(self, ref: Ref) -> list[int]:
        mem = self.m.core.mem
        n = 1 if ref.length is None else ref.length
        return [int(w) for w in mem[ref.addr:ref.addr + n]]

    def value(self, ref: Ref) -> Any:
        """Decoded value: a number for one cell, a list for an array."""
        F = self.m.program.fraction_bits
        vals = [w if ref.type is None else decode(ref.type, w, F) for w in self.words(ref)]
        return vals[0] if ref.length is None else vals

    def store(self, ref: Ref, value: Any) -> None:
        """Write a value (a number, or a list for an array) into the cells of `ref`."""
        if not ref.writable:
            raise CellError(f"{ref.name} is a constant (read-only)")
        values = value if isinstance(value, list) else [value]
        n = 1 if ref.length is None else ref.length
        if ref.length is not None and not isinstance(value, list):
            values = [value] * n                   # `set xs = 0` fills the array
        if len(values) != n:
            raise CellError(f"{ref.name} has {n} cells, the value has {len(values)}")
        F = self.m.program.fraction_bits
        try:
            words = [v.word if isinstance(v, RawWord) else
                     int(v) if ref.type is None else encode(ref.type, v, F) for v in values]
        except (ValueEncodingError, TypeError, OverflowError, ValueError) as e:
            raise CellError(f"{ref.name}: {e}") from None
        self.m.core.mem[ref.addr:ref.addr + n] = words

    def name_of(self, addr: int) -> str | None:
        """The name of the cell at an absolute address in this scope (`xs[2]`, `n1`)."""
        for ref in reversed(list(self.names.values())):
            n = 1 if ref.length is None else ref.length
            if ref.addr <= addr < ref.addr + n:
                return ref.name if ref.length is None else f"{ref.name}[{addr - ref.addr}]"
        return None

    # ---- expressions ----------------------------------------------------------------------

    def evaluate(self, text: str) -> Any:
        """The value of an expression."""
        return self._eval(self._parse(text))

    def value_for_store(self, text: str) -> Any:
        """The right-hand side of `set`: `$0x...` is a raw word, anything else an expression
        (a list `[1, 2, 3]` for an array)."""
        text = text.strip()
        if text.startswith("$"):
            try:
                w = int(text[1:], 0)
            except ValueError:
                raise CellError(f"cannot read the raw word {text!r} (write $0x and hex "
                                f"digits)") from None
            if not -(1 << 63) <= w < 1 << 64:
                raise CellError(f"the raw word {text!r} does not fit in 64 bits")
            return RawWord(w - (1 << 64) if w >= 1 << 63 else w)
        return self.evaluate(text)

    def reference(self, text: str) -> Ref:
        """The cells an expression names: `x`, `xs`, `xs[i+1]`, `xs[2:5]`, `@ADDR`."""
        text = text.strip()
        if text.startswith("@"):
            return self._raw_ref(text)
        node = self._parse(text)
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                node.value.id.startswith(_RAW_PREFIX):
            raise CellError("a raw cell @ADDR cannot be indexed")
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            base = self._name(node.value.id)
            if base.length is None:
                raise CellError(f"{base.name} is not an array")
            if isinstance(node.slice, ast.Slice):
                lo, hi = self._bounds(node.slice, base.length)
                return Ref(f"{base.name}[{lo}:{hi}]", base.type, base.addr + lo, hi - lo,
                           base.writable)
            k = self._index(node.slice, base)
            return Ref(f"{base.name}[{k}]", base.type, base.addr + k, None, base.writable)
        raise CellError(f"{text!r} does not name cells (write a name, name[index] or @ADDR)")

    def _raw_ref(self, text: str) -> Ref:
        try:
            addr = int(text[1:], 0)
        except ValueError:
            raise CellError(f"bad address {text!r}") from None
        if not 0 <= addr < len(self.m.core.mem):
            raise CellError(f"address {addr} is outside memory")
        name = self.name_of(addr)
        if name is not None:
            return self.reference(name)
        return Ref(f"@{addr}", None, addr, None, addr < self.m.program.const_range[0] or
                   addr >= self.m.program.n_static)

    def _parse(self, text: str) -> ast.expr:
        text = text.strip()
        if not text:
            raise CellError("an expression is expected")
        # `@12` (a raw cell) is not Python: give it a name the evaluator recognises
        text = _RAW_ADDR.sub(lambda mo: f"{_RAW_PREFIX}{int(mo.group(1), 0)}", text)
        try:
            return ast.parse(text, mode="eval").body
        except SyntaxError:
            raise CellError(f"cannot read the expression {text!r}") from None

    def _name(self, name: str) -> Ref:
        if name.startswith(_RAW_PREFIX):
            return self._raw_ref(f"@{name[len(_RAW_PREFIX):]}")
        try:
            return self.names[name]
        except KeyError:
            where = "" if self.level is None else " in this frame"
            raise CellError(f"no cell named {name!r}{where}") from None

    def _index(self, node: ast.expr, base: Ref) -> int:
        k = self._eval(node)
        if isinstance(k, float) and k.is_integer():
            k = int(k)
        if not isinstance(k, int) or isinstance(k, bool):
            raise CellError(f"an index of {base.name} must be an integer, not {format_value(k)}")
        if not 0 <= k < (base.length or 0):
            raise CellError(f"index {k} is outside {base.name}[0..{base.length})")
        return k

    def _bounds(self, s: ast.Slice, n: int) -> tuple[int, int]:
        if s.step is not None:
            raise CellError("a slice step is not supported")
        lo = 0 if s.lower is None else self._eval(s.lower)
        hi = n if s.upper is None else self._eval(s.upper)
        if not all(isinstance(v, int) for v in (lo, hi)) or not 0 <= lo <= hi <= n:
            raise CellError(f"slice [{lo}:{hi}] is outside [0:{n}]")
        return lo, hi

    def _eval(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in ("true", "false"):
                return node.id == "true"
            return self.value(self._name(node.id))
        if isinstance(node, ast.Subscript):
            if isinstance(node.value, ast.Name) and node.value.id in self.names:
                return self.value(self.reference(ast.unparse(node)))
            seq = self._eval(node.value)
            if not isinstance(seq, list):
                raise CellError(f"{ast.unparse(node.value)} is not an array")
            if isinstance(node.slice, ast.Slice):
                lo, hi = self._bounds(node.slice, len(seq))
                return seq[lo:hi]
            k = self._eval(node.slice)
            if not isinstance(k, int) or not 0 <= k < len(seq):
                raise CellError(f"index {format_value(k)} is outside [0..{len(seq)})")
            return seq[k]
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self._eval(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return self._arith(_BINOPS[type(node.op)], self._eval(node.left),
                               self._eval(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            v = self._eval(node.operand)
            if isinstance(v, list) and not isinstance(node.op, ast.Not):
                raise CellError("arithmetic on a whole array is not supported")
            return _UNARY[type(node.op)](v)
        if isinstance(node, ast.BoolOp):
            vals = (self._eval(v) for v in node.values)
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare) and all(type(o) in _COMPARE for o in node.ops):
            left = self._eval(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._eval(right_node)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            if node.func.id == "len" and len(node.args) == 1:
                v = self._eval(node.args[0])
                if not isinstance(v, list):
                    raise CellError("len() of a single cell")
                return len(v)
            if node.func.id in _FUNCTIONS:
                args = [self._eval(a) for a in node.args]
                try:
                    return _FUNCTIONS[node.func.id](*args)
                except (TypeError, ValueError) as e:
                    raise CellError(f"{node.func.id}(): {e}") from None
        raise CellError(f"cannot evaluate {ast.unparse(node)!r} (names, numbers, indexing, "
                        f"arithmetic, comparisons, and/or/not, len/abs/min/max/sum)")

    @staticmethod
    def _arith(fn, a: Any, b: Any) -> Any:
        if isinstance(a, list) or isinstance(b, list):
            raise CellError("arithmetic on a whole array is not supported")
        # 2 ** 10**9 or 1 << 10**9 would hang the debugger: bound the size of the result
        if fn in (operator.pow, operator.lshift) and isinstance(b, int) and isinstance(a, int):
            bits = abs(b) * max(abs(a).bit_length(), 1) if fn is operator.pow else \
                abs(a).bit_length() + b
            if bits > _MAX_BITS:
                raise CellError(f"the result would have more than {_MAX_BITS} bits")
        try:
            return fn(a, b)
        except (ZeroDivisionError, OverflowError, ValueError, TypeError) as e:
            raise CellError(str(e)) from None


@dataclass(frozen=True)
class RawWord:
    """A value given as a raw 64-bit word (`$0x...` in set): stored as it is."""
    word: int
