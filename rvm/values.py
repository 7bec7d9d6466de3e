"""Python values <-> raw 64-bit cell words, per number type.

Encoding follows isa/arith.py exactly, so a value written through the machine's API holds the
same bits the instruction set would compute:

* ``int``   -- an integral number in the int64 range (integral floats such as ``3.0`` too);
* ``fixed`` -- an int is exact (``v << F``); a float is rounded half to even (``fixed_from_real``);
  a Fraction or Decimal is rounded half to even from its exact value;
* ``lns``   -- ``lns_from_real`` of the value as a float (0 is the exact lns zero);
* ``float`` -- the IEEE binary64 bit pattern.

Decoding gives an int for ``int`` cells and a float for the others.  The array versions take
and return numpy arrays (int64 for ``int``, float64 otherwise).  Values that do not fit raise
`ValueEncodingError` (a ValueError) naming the value and the type.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from isa.arith import (
    ArithTrap,
    f2w,
    fixed_from_real,
    fixed_to_real,
    lns_from_real,
    lns_to_real,
    rne_div,
    w2f,
    wrap,
)
from isa.types import FIXED, FLOAT, INT, INT64_MAX, INT64_MIN, LNS, NumType

from .errors import RVMError

__all__ = ["ValueEncodingError", "encode", "decode", "encode_array", "decode_array"]

_TWO63 = float(1 << 63)


class ValueEncodingError(RVMError, ValueError):
    """A Python value that has no word of the requested cell type."""


def _fail(value: Any, t: NumType, why: str) -> ValueEncodingError:
    article = "an" if t.name_[0] in "aeiol" else "a"        # an int, an lns, a fixed
    return ValueEncodingError(f"{value!r} cannot be stored in {article} {t.name_} cell: {why}")


def _exact(value: Any) -> int | Fraction | float:
    """The value as an int, an exact Fraction or a float (numpy scalars included)."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, Fraction):
        return value
    if isinstance(value, Decimal):
        if not value.is_finite():
            return float(value)
        return Fraction(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{value!r} is not a number")


def encode(t: NumType, value: Any, F: int) -> int:
    """The word of type `t` holding `value` (F = fraction bits of fixed and lns)."""
    # the common cases first: a Python float into a float cell, a Python int into an int cell
    if type(value) is float and t == FLOAT:
        return f2w(value)
    if type(value) is int and t == INT and INT64_MIN <= value <= INT64_MAX:
        return value
    v = _exact(value)
    if t == INT:
        if isinstance(v, float):
            if not (math.isfinite(v) and v.is_integer()):
                raise _fail(value, t, "not an integer")
            v = int(v)
        elif isinstance(v, Fraction):
            if v.denominator != 1:
                raise _fail(value, t, "not an integer")
            v = int(v)
        if not INT64_MIN <= v <= INT64_MAX:
            raise _fail(value, t, "outside the int64 range")
        return v
    if t == FIXED:
        if isinstance(v, int):
            w = v << F
        elif isinstance(v, Fraction):
            w = rne_div(v.numerator << F, v.denominator)
        else:
            try:
                return fixed_from_real(v, F)
            except (ArithTrap, OverflowError) as e:   # math.ldexp overflows for huge floats
                raise _fail(value, t, f"outside the fixed range with {F} fraction bits "
                                      f"({e})") from None
        if not INT64_MIN <= w <= INT64_MAX:
            raise _fail(value, t, f"outside the fixed range with {F} fraction bits")
        return w
    if t == LNS:
        try:
            x = float(v)
        except OverflowError:
            raise _fail(value, t, "too large") from None
        try:
            return lns_from_real(x, F)
        except ArithTrap as e:
            raise _fail(value, t, str(e)) from None
    try:
        return f2w(float(v))
    except OverflowError:
        raise _fail(value, t, "too large for a float") from None


def decode(t: NumType, word: int, F: int) -> int | float:
    """The Python value of a word of type `t`: int for int cells, float otherwise."""
    w = wrap(int(word))
    if t == INT:
        return w
    if t == FIXED:
        return fixed_to_real(w, F)
    if t == LNS:
        return lns_to_real(w, F)
    return w2f(w)


def encode_array(t: NumType, values: Sequence[Any] | np.ndarray, F: int,
                 length: int | None = None) -> np.ndarray:
    """int64 words of `values` (a sequence or numpy array); `length` is checked if given."""
    arr = np.asarray(values)
    if t != FLOAT and not isinstance(values, np.ndarray) and arr.dtype.kind == "f" and \
            any(isinstance(v, int) and not isinstance(v, bool) for v in values):
        arr = np.asarray(values, dtype=object)     # keep big Python ints exact (a float cell
                                                   # rounds them either way)
    if arr.ndim != 1:
        raise ValueEncodingError(f"an array of {t.name_} must be one-dimensional, "
                                 f"got shape {arr.shape}")
    if length is not None and len(arr) != length:
        raise ValueEncodingError(f"expected {length} values, got {len(arr)}")
    kind = arr.dtype.kind
    if t == FLOAT and kind in "biuf":
        return arr.astype(np.float64).view(np.int64)      # (astype copies)
    if t == INT and kind in "biu":
        if kind == "u" and len(arr) and arr.max() > INT64_MAX:
            raise _fail(int(arr.max()), t, "outside the int64 range")
        return arr.astype(np.int64)
    if t == FIXED and kind in "biu":
        lim = 1 << (63 - F)
        if len(arr) and (int(arr.max()) >= lim or int(arr.min()) < -lim):
            bad = int(arr.max()) if int(arr.max()) >= lim else int(arr.min())
            raise _fail(bad, t, f"outside the fixed range with {F} fraction bits")
        return arr.astype(np.int64) << np.int64(F)
    if t == FIXED and kind == "f":
        # np.ldexp is exact and np.rint rounds half to even: the same words as fixed_from_real
        scaled = np.ldexp(arr.astype(np.float64), F)
        ok = np.isfinite(scaled)
        r = np.rint(np.where(ok, scaled, 0.0))
        ok &= (r >= -_TWO63) & (r < _TWO63)
        if not ok.all():
            bad = arr[np.argmin(ok)]
            raise _fail(float(bad), t, f"outside the fixed range with {F} fraction bits")
        return r.astype(np.int64)
    # lns (libm's log2 is what isa/arith.py uses; numpy's may differ), and mixed/object arrays
    return np.array([encode(t, v, F) for v in arr.tolist()], dtype=np.int64)


def decode_array(t: NumType, words: np.ndarray, F: int) -> np.ndarray:
    """Values of an int64 word array: int64 for int cells, float64 otherwise."""
    w = np.asarray(words, dtype=np.int64)
    if t == INT:
        return w.copy()
    if t == FIXED:
        return np.ldexp(w.astype(np.float64), -F)
    if t == FLOAT:
        return w.view(np.float64).copy()
    return np.array([lns_to_real(int(x), F) for x in w], dtype=np.float64)
