"""Exact reference arithmetic on raw 64-bit cell words.

This module is the specification of every data instruction's value semantics.  The Cython
interpreter (rvm/_arith.h) implements the same functions in C; tests check them against this
module bit for bit.  All functions take and return Python ints holding signed 64-bit words.

Rounding (fixed point): every result that has more fraction bits than the cell is rounded half
to even, as an exact function of the sources (e.g. the full 128-bit product for `y += a*b`), so
`y -= a*b` subtracts exactly the bits `y += a*b` added.  Functions of fixed-point values are
evaluated by converting the sources to binary64 (correctly rounded), calling the C library's
function, and rounding the result half to even to F fraction bits.

Results that do not fit the cell wrap for int and fixed additive updates (they are group
operations modulo 2**64); a *function value* or *conversion* that does not fit traps, and so
does a float result that is not finite (it could not be undone).
"""
from __future__ import annotations

import math
import struct

from .functions import (
    CMP_ALWAYS,
    CMP_EQ,
    CMP_GE,
    CMP_GT,
    CMP_LE,
    CMP_LT,
    CMP_NE,
    FN1,
    FN2,
    cond_parts,
)
from .types import FIXED, FLOAT, INT, INT64_MAX, INT64_MIN, LNS, LNS_LOG_MAX, LNS_ZERO, NumType

MASK64 = (1 << 64) - 1


class ArithTrap(Exception):
    """An operation that cannot be performed reversibly; `kind` names the machine trap."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind     # "div0" | "domain" | "range"


def wrap(v: int) -> int:
    """Two's complement wrap to a signed 64-bit word."""
    v &= MASK64
    return v - (1 << 64) if v >> 63 else v


def f2w(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


def w2f(w: int) -> float:
    return struct.unpack("<d", struct.pack("<q", wrap(w)))[0]


def rne_div(n: int, d: int) -> int:
    """n / d rounded half to even (exact integers, d != 0)."""
    neg = (n < 0) != (d < 0)
    q, r = divmod(abs(n), abs(d))
    if 2 * r > abs(d) or (2 * r == abs(d) and q & 1):
        q += 1
    return -q if neg else q


def rne_shift(n: int, f: int) -> int:
    """n / 2**f rounded half to even."""
    return n if f == 0 else rne_div(n, 1 << f)


def real_to_int(x: float, kind: str = "range") -> int:
    """Round a float half to even to an int64; trap if not finite or out of range."""
    if not math.isfinite(x):
        raise ArithTrap(kind, f"result {x} is not finite")
    r = round(x)
    if not INT64_MIN <= r <= INT64_MAX:
        raise ArithTrap("range", f"result {x} does not fit in 64 bits")
    return r


# ---- fixed point --------------------------------------------------------------------------

def fixed_from_real(x: float, F: int) -> int:
    try:
        scaled = math.ldexp(x, F)
    except OverflowError:
        raise ArithTrap("range", f"{x} does not fit a fixed-point cell") from None
    return real_to_int(scaled)


def fixed_to_real(w: int, F: int) -> float:
    return math.ldexp(float(w), -F)


def fixed_mul(a: int, b: int, F: int) -> int:
    """(a*b) >> F rounded half to even, wrapped: the product term of fixed `y += a*b`."""
    return wrap(rne_shift(a * b, F))


def fixed_div(a: int, b: int, F: int) -> int:
    """(a << F) / b rounded half to even, wrapped."""
    if b == 0:
        raise ArithTrap("div0", "division by zero")
    return wrap(rne_div(a << F, b))


def int_div(a: int, b: int) -> int:
    """Floor division, wrapped (INT64_MIN / -1 wraps to INT64_MIN)."""
    if b == 0:
        raise ArithTrap("div0", "division by zero")
    return wrap(a // b)


def isqrt(a: int) -> int:
    if a < 0:
        raise ArithTrap("domain", f"sqrt of negative {a}")
    return math.isqrt(a)


def _call(fn, *args: float) -> float:
    call = f"{fn.name}({', '.join(repr(a) for a in args)})"        # log(-0.25), not log(-0.25,)
    try:
        r = fn.value(*args)
    except (ValueError, ZeroDivisionError):
        raise ArithTrap("domain", f"{call} is undefined") from None
    except OverflowError:
        raise ArithTrap("range", f"{call} overflows") from None
    if not math.isfinite(r):
        raise ArithTrap("domain" if math.isnan(r) else "range", f"{call} = {r}")
    return r


def fn1_value(fn_id: int, t: NumType, x: int, F: int) -> int:
    """The word f(x) that `y += f(x)` adds, for a cell type t."""
    fn = FN1[fn_id]
    if t == INT:
        if fn.name == "abs":
            return wrap(abs(x))
        if fn.name == "sqrt":
            return isqrt(x)
        if fn.name == "wrap32":
            return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
        raise ArithTrap("domain", f"{fn.name} has no int form")
    if t == FIXED:
        return fixed_from_real(_call(fn, fixed_to_real(x, F)), F)
    return f2w(_call(fn, w2f(x)))


def int_fn2(name: str, a: int, b: int) -> int:
    """The int functions of `y += f(a, b)` (exact, on signed 64-bit words)."""
    if name == "min":
        return b if b < a else a
    if name == "max":
        return b if b > a else a
    if name == "mod":
        if b == 0:
            raise ArithTrap("div0", "modulus by zero")
        return wrap(a % b)
    if name in ("shl", "shr"):
        if b < 0:
            raise ArithTrap("domain", f"shift by a negative count {b}")
        if name == "shl":
            return 0 if b >= 64 else wrap(a << b)
        return a >> min(b, 63)
    if name == "bitand":
        return a & b
    if name == "bitor":
        return a | b
    if name == "bitxor":
        return a ^ b
    raise ArithTrap("domain", f"{name} has no int form")


def fn2_value(fn_id: int, t: NumType, a: int, b: int, F: int) -> int:
    fn = FN2[fn_id]
    if t == INT or (t == FIXED and fn.name in ("min", "max")):
        return int_fn2(fn.name, a, b)     # fixed min/max compare the words: exact
    if t == FIXED:
        return fixed_from_real(_call(fn, fixed_to_real(a, F), fixed_to_real(b, F)), F)
    return f2w(_call(fn, w2f(a), w2f(b)))


# ---- float --------------------------------------------------------------------------------

def float_result(x: float) -> int:
    if not math.isfinite(x):
        raise ArithTrap("range", f"float result {x} is not finite")
    return f2w(x)


# ---- log numbers --------------------------------------------------------------------------

def lns_parts(w: int) -> tuple[int, int]:
    """(L, sign) of a nonzero lns word."""
    return w >> 1, w & 1


def lns_make(L: int, sign: int) -> int:
    if not -LNS_LOG_MAX <= L <= LNS_LOG_MAX:
        raise ArithTrap("range", "lns log out of range")
    return wrap((L << 1) | sign)


def lns_from_real(x: float, F: int) -> int:
    if x == 0.0:
        return LNS_ZERO
    if not math.isfinite(x):
        raise ArithTrap("range", f"{x} has no lns value")
    return lns_make(real_to_int(math.ldexp(math.log2(abs(x)), F)), 1 if x < 0 else 0)


def lns_to_real(w: int, F: int) -> float:
    if w == LNS_ZERO:
        return 0.0
    L, s = lns_parts(w)
    try:
        m = math.exp2(math.ldexp(float(L), -F))
    except OverflowError:
        m = math.inf
    return -m if s else m


def lns_mul(y: int, a: int, sign: int = 1) -> int:
    """y * a (sign=+1) or y / a (sign=-1), exact on the logs."""
    if a == LNS_ZERO:
        raise ArithTrap("domain", "multiplying or dividing by lns zero cannot be undone")
    if y == LNS_ZERO:
        return y
    Ly, sy = lns_parts(y)
    La, sa = lns_parts(a)
    return lns_make(Ly + sign * La, sy ^ sa)


def lns_key(w: int) -> int:
    """A signed integer with the same order as the lns value (for comparisons)."""
    if w == LNS_ZERO:
        return 0
    L, s = lns_parts(w)
    return -((1 << 62) + L) if s else (1 << 62) + L


# ---- conversions --------------------------------------------------------------------------

def to_real(t: NumType, w: int, F: int) -> float:
    if t == INT:
        return float(w)
    if t == FIXED:
        return fixed_to_real(w, F)
    if t == LNS:
        return lns_to_real(w, F)
    return w2f(w)


def convert(dst: NumType, src: NumType, x: int, F: int) -> int:
    """The word that `y += dst(x)` adds (or, for lns, the factor `y *= lns(x)` multiplies by)."""
    if dst == FIXED and src == INT:
        return wrap(x << F)
    if dst == INT and src == FIXED:
        return rne_shift(x, F)
    if dst == INT:
        return real_to_int(to_real(src, x, F))
    if dst == FIXED:
        return fixed_from_real(to_real(src, x, F), F)
    if dst == FLOAT:
        return float_result(to_real(src, x, F))
    v = to_real(src, x, F)
    if v == 0.0:
        raise ArithTrap("domain", "multiplying by lns zero cannot be undone")
    return lns_from_real(v, F)


# ---- rotations ----------------------------------------------------------------------------

def rot_fixed_params(theta: int, F: int) -> tuple[int, int, int]:
    """(flip, t, s) for a fixed-point rotation by theta: flip = 1 if the angle was reduced by
    an odd multiple of pi (a negation of both cells), t = tan(phi/2) and s = sin(phi) as fixed
    words, phi = theta - k*pi in [-pi/2, pi/2]."""
    th = fixed_to_real(theta, F)
    k = round(th / math.pi)
    phi = th - k * math.pi
    return k & 1, fixed_from_real(math.tan(phi / 2.0), F), fixed_from_real(math.sin(phi), F)


def rot_fixed(x: int, y: int, theta: int, F: int, inverse: bool = False) -> tuple[int, int]:
    """Rotation by three lifting shears x -= t*y; y += s*x; x -= t*y (each exactly invertible).
    The inverse runs the shears backward, then undoes the flip."""
    flip, t, s = rot_fixed_params(theta, F)
    if not inverse:
        if flip:
            x, y = wrap(-x), wrap(-y)
        x = wrap(x - fixed_mul(t, y, F))
        y = wrap(y + fixed_mul(s, x, F))
        x = wrap(x - fixed_mul(t, y, F))
    else:
        x = wrap(x + fixed_mul(t, y, F))
        y = wrap(y - fixed_mul(s, x, F))
        x = wrap(x + fixed_mul(t, y, F))
        if flip:
            x, y = wrap(-x), wrap(-y)
    return x, y


def rot_float(x: int, y: int, theta: int, inverse: bool = False) -> tuple[int, int]:
    th = w2f(theta)
    if not math.isfinite(th):
        raise ArithTrap("domain", f"rotation by the angle {th}")
    c, s = math.cos(th), math.sin(th)
    if inverse:
        s = -s
    xf, yf = w2f(x), w2f(y)
    return float_result(c * xf - s * yf), float_result(s * xf + c * yf)


# ---- comparisons --------------------------------------------------------------------------

def compare(cc: int, a: int, b: int) -> bool:
    """Evaluate a condition word on two source words."""
    cmp, t = cond_parts(cc)
    if cmp == CMP_ALWAYS:
        return True
    if t == FLOAT:
        a, b = w2f(a), w2f(b)
    elif t == LNS:
        a, b = lns_key(a), lns_key(b)
    return {CMP_EQ: a == b, CMP_NE: a != b, CMP_LT: a < b, CMP_LE: a <= b,
            CMP_GT: a > b, CMP_GE: a >= b}[cmp]


# ---- one data instruction -----------------------------------------------------------------

def execute(op, vals: list[int], F: int) -> list[int]:
    """Reference semantics of one data instruction (an isa.table.Op) applied to the words of its
    operands (cells for y/a kinds, raw values for imm/k/fn).  Returns the new operand words;
    only `y` operands change.  Raises ArithTrap for division by zero, domain and range errors.
    """
    fam, t = op.family, op.type
    v = list(vals)
    sign = -1 if fam in ("sub", "subi", "submul", "subdiv", "subfn", "subfn2", "dec", "uncvt",
                         "subsum", "subdif") else 1

    def add(y: int, d: int) -> int:
        if t == FLOAT:
            return float_result(w2f(y) + sign * w2f(d))
        return wrap(y + sign * d)

    if fam in ("add", "sub", "addi", "subi"):
        v[0] = add(v[0], v[1])
    elif fam in ("inc", "dec"):
        v[0] = wrap(v[0] + sign)
    elif fam in ("addmul", "submul"):
        a, b = v[1], v[2]
        if t == FLOAT:
            v[0] = float_result(w2f(v[0]) + sign * (w2f(a) * w2f(b)))
        else:
            v[0] = wrap(v[0] + sign * (fixed_mul(a, b, F) if t == FIXED else a * b))
    elif fam in ("adddiv", "subdiv"):
        a, b = v[1], v[2]
        if t == FLOAT:
            if w2f(b) == 0.0:
                raise ArithTrap("div0", "division by zero")
            v[0] = float_result(w2f(v[0]) + sign * (w2f(a) / w2f(b)))
        else:
            v[0] = wrap(v[0] + sign * (fixed_div(a, b, F) if t == FIXED else int_div(a, b)))
    elif fam in ("addsum", "subsum", "adddif", "subdif"):
        a, b = w2f(v[1]), w2f(v[2])
        inner = a + b if fam in ("addsum", "subsum") else a - b
        if not math.isfinite(inner):
            raise ArithTrap("range", f"float result {inner} is not finite")
        v[0] = float_result(w2f(v[0]) + sign * inner)
    elif fam == "xorcmp":
        v[0] = v[0] ^ (1 if compare(v[1], v[2], v[3]) else 0)
    elif fam in ("xor", "xori"):
        v[0] = v[0] ^ v[1]
    elif fam == "xorand":
        v[0] = v[0] ^ (v[1] & v[2])
    elif fam == "neg":
        if t == FLOAT:
            v[0] = wrap(v[0] ^ INT64_MIN)
        elif t == LNS:
            # flip the sign, except on the words whose log is the reserved -2**62 (zero, and
            # the never-produced INT64_MIN + 1): they stay put, so neg is a bijection
            v[0] = v[0] if v[0] >> 1 == LNS_ZERO >> 1 else v[0] ^ 1
        else:
            v[0] = wrap(-v[0])
    elif fam == "not":
        v[0] = ~v[0]
    elif fam in ("rotl", "rotr"):
        k = v[1] if fam == "rotl" else (64 - v[1]) % 64
        u = v[0] & MASK64
        v[0] = wrap(((u << k) | (u >> (64 - k))) & MASK64) if k else v[0]
    elif fam == "swap":
        v[0], v[1] = v[1], v[0]
    elif fam == "cswap":
        d = (v[0] ^ v[1]) & v[2]
        v[0], v[1] = v[0] ^ d, v[1] ^ d
    elif fam in ("rot", "irot"):
        inv = fam == "irot"
        if t == FIXED:
            v[0], v[1] = rot_fixed(v[0], v[1], v[2], F, inv)
        else:
            v[0], v[1] = rot_float(v[0], v[1], v[2], inv)
    elif fam in ("addfn", "subfn"):
        d = fn1_value(v[2], t, v[1], F)
        v[0] = add(v[0], d)
    elif fam in ("addfn2", "subfn2"):
        d = fn2_value(v[3], t, v[1], v[2], F)
        v[0] = add(v[0], d)
    elif fam in ("mul", "div"):
        v[0] = lns_mul(v[0], v[1], 1 if fam == "mul" else -1)
    elif fam in ("cvt", "uncvt"):
        dst, src = op.types
        d = convert(dst, src, v[1], F)
        if dst == LNS:
            v[0] = lns_mul(v[0], d, sign)
        elif dst == FLOAT:
            v[0] = float_result(w2f(v[0]) + sign * w2f(d))
        else:
            v[0] = wrap(v[0] + sign * d)
    elif fam in ("push", "pop", "alloc", "free", "assert", "trace", "nop"):
        pass
    else:
        raise ValueError(f"{op.name} is not a data instruction")
    return v
