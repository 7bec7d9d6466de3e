"""Number types of rvm cells.

Every cell is 64 bits.  Its declared type says how those bits are read:

* ``int``   -- two's complement i64, wrapping.
* ``fixed`` -- signed Q(63-F).F in an i64; F (the fraction bits) is a program setting.
* ``lns``   -- logarithmic number: word = (L << 1) | sign, L a signed fixed-point log2 of the
  magnitude with F fraction bits.  The all-zero word is +1.0 (the identity of ``*=``, so a
  zeroed ancilla of type lns holds 1.0); the word INT64_MIN is the exact zero.
* ``float`` -- IEEE binary64, stored by bit pattern.
"""
from __future__ import annotations

from enum import IntEnum


class NumType(IntEnum):
    INT = 0
    FIXED = 1
    LNS = 2
    FLOAT = 3

    @property
    def name_(self) -> str:
        return TYPE_NAMES[self]

    @property
    def suffix(self) -> str:
        return TYPE_SUFFIX[self]

    @property
    def differentiable(self) -> bool:
        return self in (NumType.FIXED, NumType.FLOAT)


TYPE_NAMES = {NumType.INT: "int", NumType.FIXED: "fixed", NumType.LNS: "lns",
              NumType.FLOAT: "float"}
TYPE_SUFFIX = {NumType.INT: "i", NumType.FIXED: "x", NumType.LNS: "l", NumType.FLOAT: "f"}
TYPE_BY_NAME = {v: k for k, v in TYPE_NAMES.items()}
TYPE_BY_SUFFIX = {v: k for k, v in TYPE_SUFFIX.items()}

INT, FIXED, LNS, FLOAT = NumType.INT, NumType.FIXED, NumType.LNS, NumType.FLOAT
ALL_TYPES = (INT, FIXED, LNS, FLOAT)

DEFAULT_FRACTION_BITS = 32
MAX_FRACTION_BITS = 62

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
LNS_ZERO = INT64_MIN          # the exact zero of lns
LNS_LOG_MAX = (1 << 62) - 1   # |L| must stay <= this (L = -2**62 is reserved for zero)
