"""Literals <-> raw cell words, exactly.

`literal_word` turns a source literal into the 64-bit word of a cell type: fixed literals are
read from the decimal text with `fractions.Fraction` and rounded half to even to F fraction
bits (never through a float), floats by `float()`, lns by `isa.arith.lns_from_real`, and a raw
word `$0x...` is taken as it is.  `word_text` is the inverse used by the disassembler: it prints
a literal that `literal_word` maps back to the same word.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from isa.arith import ArithTrap, f2w, lns_from_real, rne_div, w2f, wrap
from isa.types import FIXED, FLOAT, INT, INT64_MAX, INT64_MIN, LNS, LNS_ZERO, NumType

MASK64 = (1 << 64) - 1
TOO_BIG = 1 << 100        # the value the lexer gives an integer literal too long to read


class LiteralError(Exception):
    """A literal that does not fit its context: code E004 (wrong type) or E006 (range)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class Lit:
    """A literal as written: kind "int" (value: signed int, radix 10/16/2), "real" (value: the
    decimal text with its sign) or "raw" (value: the word, 0..2**64-1)."""
    kind: str
    value: int | str
    text: str
    radix: int = 10


def _fits(v: int) -> bool:
    return INT64_MIN <= v <= INT64_MAX


def literal_word(lit: Lit, t: NumType, F: int) -> int:
    """The raw word of `lit` in a cell of type `t` (F fraction bits); raises LiteralError."""
    if lit.kind != "real" and abs(int(lit.value)) >= TOO_BIG:
        raise LiteralError("E006", f"literal `{clip(lit.text)}` is too long for any cell")
    if lit.kind == "raw":
        if not 0 <= int(lit.value) <= MASK64:
            raise LiteralError("E006", f"raw word `{clip(lit.text)}` does not fit in 64 bits")
        return wrap(int(lit.value))
    if t == INT:
        if lit.kind == "real":
            raise LiteralError("E004",
                f"real literal `{clip(lit.text)}` needs a fixed, float or lns "
                                       f"cell, not int")
        v = int(lit.value)
        if _fits(v) or (lit.radix != 10 and 0 <= v <= MASK64):
            return wrap(v)
        raise LiteralError("E006", f"literal `{clip(lit.text)}` does not fit in an int")
    if t == FIXED:
        if lit.kind == "real":
            small = _exact_bounds(lit.text)
            if small == "large":
                raise LiteralError("E006", f"literal `{clip(lit.text)}` does not fit in a fixed "
                                           f"cell ({63 - F} integer bits)")
            if small == "tiny":
                return 0                      # below 2**-(F+1): rounds to zero exactly
        exact = Fraction(lit.value) if lit.kind == "real" else Fraction(int(lit.value))
        scaled = exact * (1 << F)
        w = rne_div(scaled.numerator, scaled.denominator)
        if not _fits(w):
            raise LiteralError("E006", f"literal `{clip(lit.text)}` does not fit in a fixed cell "
                                       f"({63 - F} integer bits)")
        return w
    x = _real(lit)
    if t == FLOAT:
        if not math.isfinite(x):
            raise LiteralError("E006", f"literal `{clip(lit.text)}` overflows a float")
        if lit.kind == "int" and (not math.isfinite(x) or int(x) != int(lit.value)):
            raise LiteralError("E006",
                f"integer literal `{clip(lit.text)}` is not exact in a float")
        return f2w(x)
    if t == LNS:
        if x == 0.0:
            return LNS_ZERO
        try:
            return lns_from_real(x, F)
        except (ArithTrap, OverflowError, ValueError):
            raise LiteralError("E006", f"literal `{clip(lit.text)}` has no lns value") from None
    raise LiteralError("E004", f"no literal of type {t}")


_REAL = re.compile(r"-?(\d+)(?:\.(\d*))?(?:[eE]([+-]?\d+))?\Z")


def clip(text: str, n: int = 40) -> str:
    """A literal's text for a message (a huge one is shortened)."""
    return text if len(text) <= n else f"{text[:n // 2]}...{text[-8:]} ({len(text)} characters)"


def _exact_bounds(text: str) -> str:
    """"large" if a real literal is far beyond any fixed cell, "tiny" if it rounds to zero in
    every fixed format, else "ok": decided from its digits and exponent, so that `1e999999999`
    is never expanded into an exact fraction."""
    m = _REAL.match(text)
    if m is None:
        return "ok"
    whole, frac, exp_text = m.group(1).lstrip("0"), m.group(2) or "", m.group(3) or "0"
    if len(exp_text.lstrip("+-")) > 12:
        exp = -(10 ** 12) if exp_text.startswith("-") else 10 ** 12
    else:
        exp = int(exp_text)
    if whole:                                   # the value is about 10**(exp + len(whole) - 1)
        magnitude = exp + len(whole) - 1
    elif frac.strip("0"):
        magnitude = exp - (len(frac) - len(frac.lstrip("0"))) - 1
    else:
        return "ok"                             # zero
    if magnitude > 40:
        return "large"
    if magnitude < -40:
        return "tiny"
    return "ok"


def _real(lit: Lit) -> float:
    try:
        return float(lit.value) if lit.kind == "real" else float(int(lit.value))
    except OverflowError:
        return math.inf


def fixed_text(w: int, F: int) -> str:
    """The exact decimal value of the fixed word w (w / 2**F)."""
    sign = "-" if w < 0 else ""
    n = abs(w)
    whole, frac = n >> F, n & ((1 << F) - 1)
    if frac == 0:
        return f"{sign}{whole}"
    digits = str(frac * 5 ** F).rjust(F, "0").rstrip("0")
    return f"{sign}{whole}.{digits}"


def raw_text(w: int) -> str:
    return f"$0x{w & MASK64:016x}"


def word_text(w: int, t: NumType | None, F: int) -> str:
    """A literal that denotes exactly the word `w` in a cell of type `t`."""
    w = wrap(int(w))
    if t == INT:
        return str(w)
    if t == FIXED:
        return fixed_text(w, F)
    if t == FLOAT:
        x = w2f(w)
        if math.isfinite(x) and f2w(float(repr(x))) == w:
            return repr(x)
        return raw_text(w)
    return raw_text(w)


def literal_value(lit: Lit) -> int | None:
    """The integer value of an int literal (None for real/raw literals)."""
    return int(lit.value) if lit.kind == "int" else None
