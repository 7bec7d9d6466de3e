"""Gate realizations: each int and fixed instruction as a reversible circuit of n-bit registers.

Declared here beside the instruction table so that the table stays the one source of truth:
a family's realization is keyed by the family name of isa/table.py, and an inverse family
(sub, subi, dec, submul, rotr, uncvt) has none of its own: its circuit is its inverse's
circuit reversed (every gate is self-inverse, so reversing the list inverts the circuit).

This module depends on nothing outside isa/.  Realizations are written against `Builder`, a
small interface that rvm/hw/circuit.py implements (it packs the gates into flat arrays, which
the bit-sliced simulator runs and the reports measure).

Conventions
-----------
* Width n (MIN_WIDTH..MAX_WIDTH): a cell is an n-bit register, a list of wires with the least
  significant bit first, holding the interpreter's 64-bit word modulo 2**n.  Signed values
  (comparisons, fixed-point products) are n-bit two's complement.
* Operand registers are passed in operand order (y/a kinds only).  Conditions (jmp, join,
  assert) get the two compared registers and `cond`, a 1-bit register of the control unit that
  receives the condition: cond ^= c.
* A control is a wire w, or ~w for a negative control (fires when the wire is 0).
* Ancillas come from b.alloc(k) and are zero; b.free(wires) returns them, and the simulator
  checks they are zero again.  `mark`/`undo` give Bennett's compute-use-uncompute: undo(s, e)
  appends the inverse of the gates emitted between the marks s and e.
* A realization returns None (every register keeps its wires) or, for a wire relabelling
  (swap, rotations), the wires that hold each operand register afterwards: zero gates.

Constructions (gate-count formulas in docs/hw.md, pinned by tests/test_hw_counts.py)
---------------------------------------------------------------------------------------
* y += a: the ripple-carry adder of Cuccaro, Draper, Kutin and Moulton (2004, "A new quantum
  ripple-carry addition circuit", quant-ph/0410184), the linear-depth version of their
  figure 5 with one ancilla, taken modulo 2**m (the carry-out gates dropped); widths m < 4
  (the low partial products of a multiplier) use the MAJ/UMA ripple of the same paper.
* A controlled adder puts the control on exactly the gates that write y: when the control
  is off the carry chain is computed and uncomputed from the same y, so everything returns.
* y += a*b: one controlled adder per bit of a, y[i:] += b[:n-i] if a_i.
* fixed y += (a*b) >> F: the signed product modulo 2**(n+F) in an ancilla register P, then
  P += 2**(F-1) - 1 + P_F (so that P >> F is the product rounded half to even, exactly as
  isa/arith.py's rne_shift), y += P[F:F+n], then everything but the last adder undone.
* Comparisons: the carry-out of ~a' + b' (a', b' with their sign bits flipped) is a < b for
  signed a, b: the adder's carry chain computed, its carry-out XORed into `cond`, uncomputed
  (one ancilla).  Equality: b ^= a, cond ^= one multi-controlled NOT with n negative
  controls, b ^= a (no ancilla).  Negated comparisons add a NOT on cond.
* Two source operands in the same cell (y += x*x): the second is copied to n ancillas first
  (n CNOTs) and uncopied after.
* y ^= (a CMP b) (xorcmp): the condition circuit above with y's bit 0 as `cond`.
* y += f(a, b) for the int functions that are natural as circuits (and fixed min/max, whose
  order is the words' order): the value of f is computed into ancillas (or, for min/max, put in
  place by a controlled swap of the sources), added to y, and uncomputed.
  - min/max: f = (b < a) (max: a < b) by the comparator, a <-> b swapped by n Fredkin gates
    controlled by f, y += a, the swap and f undone.
  - bitand/bitor/bitxor: t = a & b (Toffolis), a | b = a ^ b ^ (a & b), a ^ b (CNOTs); y += t.
  - shl/shr by a variable count: a barrel shifter of Fredkin gates.  a is copied into a
    register T of W = n + 2**k - 1 wires (2**k >= n; for shr the extra wires hold copies of
    a's sign), and stage j rotates T by 2**j (left for shl, right for shr) if bit j of b is
    set: a rotation is three reversals, each a layer of Fredkins controlled by b_j.  The low
    n wires then hold a << b (zeros came in from above) or a >> b (sign copies came in).  A
    count >= 2**k (a bit of b above k, below the sign bit) saturates: n Fredkins swap in a
    register of zeros (shl) or sign copies (shr).  A negative count traps in the interpreter
    before the circuit runs.
  mod stays unrealized (a divider).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .functions import CMP_ALWAYS, CMP_EQ, CMP_GE, CMP_LE, CMP_LT, CMP_NE, FN2, cond_parts
from .table import OP_BY_NAME, Op
from .types import FIXED, INT, NumType

MIN_WIDTH, MAX_WIDTH = 4, 64

Wires = list[int]


class Builder(Protocol):
    """What a realization may do (rvm/hw/circuit.py implements it)."""

    def x(self, target: int, *controls: int) -> None:
        """NOT the target if every control fires (NOT, CNOT, Toffoli or multi-controlled)."""

    def fredkin(self, control: int, t1: int, t2: int) -> None:
        """Swap t1 and t2 if the control is 1."""

    def alloc(self, k: int) -> Wires:
        """k fresh ancilla wires, all zero."""

    def free(self, wires: Sequence[int]) -> None:
        """Return ancillas; each must be zero again (checked by the simulator)."""

    def mark(self) -> int:
        """A position in the gate list, for undo."""

    def undo(self, start: int, end: int) -> None:
        """Append the inverse of the gates between two marks."""


@dataclass(frozen=True)
class Params:
    """What a realization needs besides the registers."""
    n: int                      # width in bits
    type: NumType | None        # the opcode's cell type (the destination type of a conversion)
    F: int = 0                  # fraction bits (fixed point)
    imm: int = 0                # immediate raw word (addi, xori) or bit count k (rotl)
    cc: int = 0                 # condition word (jmp, join, assert, xorcmp)
    src_type: NumType | None = None   # a conversion's (or xorcmp's) source type
    fn: int = 0                 # function id (addfn2: isa/functions.py FN2)


Build = Callable[[Builder, list[Wires], Params], "list[Wires] | None"]


@dataclass(frozen=True)
class Realization:
    build: Build
    types: tuple[NumType | None, ...]   # cell types realized (None: untyped, e.g. conditions)
    construction: str                   # one line for reports and docs
    # a family with a fn operand: function name -> the cell types it is realized for
    fns: dict[str, tuple[NumType, ...]] | None = None
    src_types: tuple[NumType, ...] | None = None   # xorcmp: the compared cells' types
    fn_constructions: dict[str, str] | None = None  # per function, for reports
    fraction_bits: bool = False         # on fixed cells the construction depends on F


# ---- adders ---------------------------------------------------------------------------------

def add_into(b: Builder, y: Wires, a: Wires, ctl: Sequence[int] = ()) -> None:
    """y += a modulo 2**len(y) (len(a) == len(y)); a comes back unchanged; one ancilla.
    With `ctl`, only if every control fires (the gates that write y get the controls)."""
    m = len(y)
    assert len(a) == m and m >= 1
    if m >= 4:
        _cdkm(b, y, a, ctl, carry=None, with_sum=True)
    else:
        _maj_uma(b, y, a, ctl)


def add_with_carry(b: Builder, y: Wires, a: Wires, z: int) -> None:
    """y += a and z ^= the carry out (m >= 4 bits): exactly CDKM's published figure 5."""
    _cdkm(b, y, a, (), carry=z, with_sum=True)


def carry_into(b: Builder, y: Wires, a: Wires, z: int) -> None:
    """z ^= the carry out of y + a (m >= 4 bits); y and a come back unchanged."""
    _cdkm(b, y, a, (), carry=z, with_sum=False)


def _cdkm(b: Builder, B: Wires, A: Wires, ctl: Sequence[int], carry: int | None,
          with_sum: bool) -> None:
    """CDKM figure 5 (B += A with the carries kept in A, one ancilla X).  Its fourteen steps
    are marked; with carry and with_sum it is the published circuit (2m-1 Toffoli, 5m-3 CNOT,
    2m-4 NOT, depth 2m+4)."""
    m = len(B)
    (X,) = b.alloc(1)

    def wy(t: int, *c: int) -> None:        # a gate that writes B: controlled if ctl is given
        b.x(t, *c, *ctl)

    start = b.mark()
    for i in range(1, m):                                       # 1: B_i ^= A_i
        wy(B[i], A[i])
    b.x(X, A[1])                                                # 2
    b.x(X, A[0], B[0])                                          # 3: X = a1 ^ c1
    b.x(A[1], A[2])
    b.x(A[1], X, B[1])                                          # 4: A1 = a2 ^ c2
    b.x(A[2], A[3])
    for i in range(2, m - 2):                                   # 5: A_i = a_{i+1} ^ c_{i+1}
        b.x(A[i], A[i - 1], B[i])
        b.x(A[i + 1], A[i + 2])
    b.x(A[m - 2], A[m - 3], B[m - 2])                           # 6
    end = b.mark()
    if carry is not None:                                       # 6, 7: z ^= c_m
        b.x(carry, A[m - 1], *ctl)
        b.x(carry, A[m - 2], B[m - 1], *ctl)
    if not with_sum:
        b.undo(start, end)
        b.free([X])
        return
    for i in range(1, m - 1):                                   # 7
        wy(B[i])
    wy(B[1], X)                                                 # 8: B_i = ~(b_i ^ c_i), i < m-1
    for i in range(2, m):
        wy(B[i], A[i - 1])
    b.x(A[m - 2], A[m - 3], B[m - 2])                           # 9
    for i in range(m - 3, 1, -1):                               # 10
        b.x(A[i], A[i - 1], B[i])
        b.x(A[i + 1], A[i + 2])
        wy(B[i + 1])
    b.x(A[1], X, B[1])                                          # 11
    b.x(A[2], A[3])
    wy(B[2])
    b.x(X, A[0], B[0])                                          # 12
    b.x(A[1], A[2])
    wy(B[1])
    b.x(X, A[1])                                                # 13: X = 0
    for i in range(m):                                          # 14: B_i = a_i ^ b_i ^ c_i
        wy(B[i], A[i])
    b.free([X])


def _maj_uma(b: Builder, y: Wires, a: Wires, ctl: Sequence[int]) -> None:
    """The plain CDKM ripple (MAJ ... MAJ, top sum bit, UMA ... UMA) for any width; used for
    m < 4 where figure 5 does not apply."""
    m = len(y)
    if m == 1:
        b.x(y[0], a[0], *ctl)
        return
    (X,) = b.alloc(1)
    c = [X] + list(a[:m - 1])           # the carry into bit i lives on c[i]
    for i in range(m - 1):              # MAJ: a_i becomes the carry c_{i+1}
        b.x(y[i], a[i], *ctl)
        b.x(c[i], a[i])
        b.x(a[i], c[i], y[i])
    b.x(y[m - 1], a[m - 1], *ctl)
    b.x(y[m - 1], c[m - 1], *ctl)
    for i in range(m - 2, -1, -1):      # UMA: restore a_i and c_i, y_i = a_i ^ b_i ^ c_i
        b.x(a[i], c[i], y[i])
        b.x(c[i], a[i])
        b.x(y[i], c[i], *ctl)
    b.free([X])


def add_constant(b: Builder, y: Wires, c: int) -> None:
    """y += c (mod 2**n) for a known constant: the constant's bits are NOTed into an ancilla
    register and added; its trailing zero bits shorten the adder (they leave y's low bits as
    they are)."""
    n = len(y)
    c &= (1 << n) - 1
    if c == 0:
        return
    t = (c & -c).bit_length() - 1
    c >>= t
    k = b.alloc(n - t)
    start = b.mark()
    for i, w in enumerate(k):
        if c >> i & 1:
            b.x(w)
    end = b.mark()
    add_into(b, y[t:], k)
    b.undo(start, end)
    b.free(k)


def multiply_into(b: Builder, p: Wires, x: Wires, ctl_bits: Sequence[int]) -> None:
    """p += x * c modulo 2**len(p), c given by its bits ctl_bits (len(p) of them): one
    controlled adder per bit.  x has len(p) wires; the control wires must not be among x's."""
    w = len(p)
    for i in range(w):
        add_into(b, p[i:], x[:w - i], ctl=(ctl_bits[i],))


def add_rounded_shift(b: Builder, y: Wires, P: Wires, F: int) -> None:
    """y += round_half_even(P / 2**F) modulo 2**len(y), P a signed (len(y) + F)-bit register
    that comes back unchanged.  Adds 2**(F-1) - 1 + P_F to P (a copy of P_F decides the
    constant: bits 0..F-2 are ~P_F, bit F-1 is P_F), takes bits F.., and undoes the add."""
    n = len(y)
    assert len(P) == n + F and F >= 1
    start = b.mark()
    (g,) = b.alloc(1)
    b.x(g, P[F])
    k = b.alloc(len(P))
    for j in range(F - 1):
        b.x(k[j])
        b.x(k[j], g)
    b.x(k[F - 1], g)
    add_into(b, P, k)
    end = b.mark()
    add_into(b, y, P[F:F + n])
    b.undo(start, end)


# ---- realizations, by family ----------------------------------------------------------------

def _add(b: Builder, r: list[Wires], p: Params) -> None:
    add_into(b, r[0], r[1])


def _addi(b: Builder, r: list[Wires], p: Params) -> None:
    add_constant(b, r[0], p.imm)


def _inc(b: Builder, r: list[Wires], p: Params) -> None:
    add_constant(b, r[0], 1)


def _addmul(b: Builder, r: list[Wires], p: Params) -> None:
    y, a, x = r
    if p.type != FIXED or p.F == 0:
        multiply_into(b, y, x, a)
        return
    n, F = p.n, p.F
    start = b.mark()
    ext = b.alloc(F)                    # x sign-extended to n + F bits
    for e in ext:
        b.x(e, x[n - 1])
    P = b.alloc(n + F)
    multiply_into(b, P, list(x) + ext, [a[min(i, n - 1)] for i in range(n + F)])
    end = b.mark()
    add_rounded_shift(b, y, P, F)
    b.undo(start, end)


def _xor(b: Builder, r: list[Wires], p: Params) -> None:
    for t, s in zip(r[0], r[1]):
        b.x(t, s)


def _xori(b: Builder, r: list[Wires], p: Params) -> None:
    for i, t in enumerate(r[0]):
        if p.imm >> i & 1:
            b.x(t)


def _xorand(b: Builder, r: list[Wires], p: Params) -> None:
    for t, s1, s2 in zip(*r):
        b.x(t, s1, s2)


def _cswap(b: Builder, r: list[Wires], p: Params) -> None:
    for t1, t2, c in zip(*r):
        b.fredkin(c, t1, t2)


def _not(b: Builder, r: list[Wires], p: Params) -> None:
    for t in r[0]:
        b.x(t)


def _neg(b: Builder, r: list[Wires], p: Params) -> None:
    _not(b, r, p)                       # -y = ~y + 1
    add_constant(b, r[0], 1)


def _swap(b: Builder, r: list[Wires], p: Params) -> list[Wires]:
    return [r[1], r[0]]


def _rotl(b: Builder, r: list[Wires], p: Params) -> list[Wires]:
    n, k = p.n, p.imm % p.n
    return [[r[0][(i - k) % n] for i in range(n)]]


def _cvt(b: Builder, r: list[Wires], p: Params) -> None:
    y, x = r
    n, F = p.n, p.F
    if p.type == FIXED:                 # fixed += int: y += x << F (mod 2**n)
        if F < n:
            add_into(b, y[F:], x[:n - F])
        return
    if F == 0:                          # int += fixed: y += x / 2**F rounded half to even
        add_into(b, y, x)
        return
    start = b.mark()
    P = b.alloc(n + F)                  # x sign-extended
    for j, w in enumerate(P):
        b.x(w, x[min(j, n - 1)])
    end = b.mark()
    add_rounded_shift(b, y, P, F)
    b.undo(start, end)


def _condition(b: Builder, r: list[Wires], p: Params) -> None:
    """cond ^= (a CMP b): the comparison's carry chain (or equality test) targets the control
    unit's condition bit directly, so no flag ancilla is needed; a negated comparison adds
    one NOT on cond."""
    a, c, (cond,) = r
    cmp, _ = cond_parts(p.cc)
    if cmp == CMP_ALWAYS:
        return
    if cmp in (CMP_EQ, CMP_NE):
        _equal_into(b, a, c, cond)
    elif cmp in (CMP_LT, CMP_GE):
        _less_into(b, a, c, cond)
    else:                               # a > c is c < a; a <= c is not c < a
        _less_into(b, c, a, cond)
    if cmp in (CMP_NE, CMP_GE, CMP_LE):
        b.x(cond)


def _less_into(b: Builder, a: Wires, c: Wires, f: int) -> None:
    """f ^= (a < c), signed: the carry out of ~a' + c' where ' flips the sign bit, since
    ~a' + c' >= 2**n exactly when c' > a' unsigned."""
    n = len(a)
    start = b.mark()
    for w in a[:n - 1]:
        b.x(w)
    b.x(c[n - 1])
    end = b.mark()
    carry_into(b, c, a, f)
    b.undo(start, end)


def _equal_into(b: Builder, a: Wires, c: Wires, f: int) -> None:
    """f ^= (a == c): c ^= a is all zeros exactly when they are equal (one MCX with n
    negative controls)."""
    start = b.mark()
    for t, s in zip(c, a):
        b.x(t, s)
    end = b.mark()
    b.x(f, *[~w for w in c])
    b.undo(start, end)


def _xorcmp(b: Builder, r: list[Wires], p: Params) -> None:
    """y ^= (a CMP b): the condition circuit into y's bit 0 (always: one NOT)."""
    y, a, c = r
    if cond_parts(p.cc)[0] == CMP_ALWAYS:
        b.x(y[0])
    else:
        _condition(b, [a, c, [y[0]]], p)


def _fn2(b: Builder, r: list[Wires], p: Params) -> None:
    """y += f(a, b) for the realized functions (see the module docstring)."""
    y, a, c = r
    name = FN2[p.fn].name
    if name in ("min", "max"):
        _min_max(b, y, a, c, name == "max")
    elif name in ("bitand", "bitor", "bitxor"):
        _bitwise(b, y, a, c, name)
    elif name in ("shl", "shr"):
        _shift(b, y, a, c, name == "shl")
    else:
        raise ValueError(f"{name} has no gate realization")


def _min_max(b: Builder, y: Wires, a: Wires, c: Wires, is_max: bool) -> None:
    """y += min(a, c) (b if b < a, else a) or max: the comparator's bit f swaps the sources
    (n Fredkins) so that a holds the result, y += a, then the swap and f are undone."""
    (f,) = b.alloc(1)
    start = b.mark()
    if is_max:
        _less_into(b, a, c, f)          # the max is c iff a < c
    else:
        _less_into(b, c, a, f)          # the min is c iff c < a
    for u, v in zip(a, c):
        b.fredkin(f, u, v)
    end = b.mark()
    add_into(b, y, a)
    b.undo(start, end)
    b.free([f])


def _bitwise(b: Builder, y: Wires, a: Wires, c: Wires, name: str) -> None:
    """y += a & c, a | c or a ^ c: the value into n ancillas, added, uncomputed."""
    t = b.alloc(len(y))
    start = b.mark()
    for w, u, v in zip(t, a, c):
        if name != "bitand":            # a ^ c (and a | c = a ^ c ^ (a & c))
            b.x(w, u)
            b.x(w, v)
        if name != "bitxor":
            b.x(w, u, v)
    end = b.mark()
    add_into(b, y, t)
    b.undo(start, end)
    b.free(t)


def _rotate_if(b: Builder, ctl: int, T: Wires, s: int) -> None:
    """Rotate T left by s (T'[i] = T[i - s mod W]) if ctl is 1: three reversals (all of T,
    then T[:s] and T[s:]), each a layer of Fredkin gates."""
    W = len(T)
    s %= W
    if s == 0:
        return
    for lo, hi in ((0, W), (0, s), (s, W)):
        i, j = lo, hi - 1
        while i < j:
            b.fredkin(ctl, T[i], T[j])
            i, j = i + 1, j - 1


def _shift(b: Builder, y: Wires, a: Wires, c: Wires, left: bool) -> None:
    """y += a << c (left) or a >> c (arithmetic): a barrel shifter of Fredkin gates on a copy
    of a (see the module docstring), added to y and uncomputed."""
    n = len(y)
    k = (n - 1).bit_length()            # stages: counts 0 .. 2**k - 1, and 2**k >= n
    W = n + (1 << k) - 1
    T = b.alloc(W)
    fill = b.alloc(n)                   # what a saturated shift gives: zeros or the sign
    high = list(c[k:n - 1])             # count bits above the stages (the sign bit traps)
    h = b.alloc(1) if high else []
    start = b.mark()
    for w, u in zip(T, a):
        b.x(w, u)
    if not left:
        for w in T[n:] + fill:
            b.x(w, a[n - 1])
    if high:                            # h = OR(high) = NOT AND(NOT high)
        b.x(h[0], *[~w for w in high])
        b.x(h[0])
    for j in range(k):
        _rotate_if(b, c[j], T, (1 << j) if left else W - (1 << j))
    if high:
        for u, v in zip(T[:n], fill):
            b.fredkin(h[0], u, v)
    end = b.mark()
    add_into(b, y, T[:n])
    b.undo(start, end)
    b.free(T + fill + h)


IF = (INT, FIXED)

REALIZATIONS: dict[str, Realization] = {
    "add": Realization(_add, IF, "CDKM ripple-carry adder (figure 5) mod 2^n, one ancilla"),
    "addi": Realization(_addi, IF, "constant NOTed into ancillas, CDKM adder over the bits "
                                   "above its trailing zeros"),
    "inc": Realization(_inc, (INT,), "constant adder with c = 1"),
    "addmul": Realization(_addmul, IF, "int: one controlled CDKM adder per bit of a; fixed: "
                                       "signed product mod 2^(n+F) in ancillas, rounding add, "
                                       "y += P >> F, uncompute", fraction_bits=True),
    "xor": Realization(_xor, (INT,), "one CNOT per bit"),
    "xori": Realization(_xori, (INT,), "one NOT per set bit of the immediate"),
    "xorand": Realization(_xorand, (INT,), "one Toffoli per bit"),
    "neg": Realization(_neg, IF, "NOT every bit, then the constant adder with c = 1"),
    "not": Realization(_not, (INT,), "one NOT per bit"),
    "swap": Realization(_swap, IF, "wire relabelling (zero gates)"),
    "cswap": Realization(_cswap, (INT,), "one Fredkin per bit"),
    "rotl": Realization(_rotl, (INT,), "wire relabelling (zero gates)"),
    "cvt": Realization(_cvt, (FIXED, INT), "fixed += int: adder on the bits above F; int += "
                                           "fixed: sign-extended copy, rounding add, adder",
                          fraction_bits=True),
    "jmp": Realization(_condition, (None,), "cond ^= comparison: CDKM carry chain out and back "
                                            "(==: XOR, one negative-control MCX, XOR back)"),
    "xorcmp": Realization(_xorcmp, (INT,), "y0 ^= comparison: the condition circuit of jmp",
                          src_types=IF),
    "addfn2": Realization(_fn2, IF, "min/max: comparator, Fredkin swap of the sources, adder; "
                                    "and/or/xor: Toffoli/CNOT value, adder; shl/shr: Fredkin "
                                    "barrel shifter, adder (each value uncomputed)",
                          fns={"min": IF, "max": IF, "bitand": (INT,), "bitor": (INT,),
                               "bitxor": (INT,), "shl": (INT,), "shr": (INT,)},
                          fn_constructions={
                              "min": "comparator b < a, n Fredkins swap a and b if so, "
                                     "CDKM y += a, swap and comparator undone",
                              "max": "comparator a < b, n Fredkins swap a and b if so, "
                                     "CDKM y += a, swap and comparator undone",
                              "bitand": "n Toffolis into ancillas, CDKM adder, uncompute",
                              "bitor": "a ^ b ^ (a & b) into ancillas, CDKM adder, uncompute",
                              "bitxor": "2n CNOTs into ancillas, CDKM adder, uncompute",
                              "shl": "Fredkin barrel shifter (ceil(log2 n) stages of three "
                                     "reversals), saturation swap, CDKM adder, uncompute",
                              "shr": "Fredkin barrel shifter on a sign-extended copy, "
                                     "saturation swap, CDKM adder, uncompute"}),
}
REALIZATIONS["join"] = REALIZATIONS["assert"] = REALIZATIONS["jmp"]

CONDITIONS = ("jmp", "join", "assert")

# Instructions that move or check whole registers and need no gates; the co-simulation does
# them on the register file: push/pop relabel a register onto/off the value stack, alloc/free
# check that every wire of the register is zero.
MOVES = {"push": "relabel onto the value stack, register zeroed (zero gates)",
         "pop": "relabel off the value stack into a zero register (zero gates)",
         "alloc": "zero check of the register's wires (zero gates)",
         "free": "zero check of the register's wires (zero gates)",
         "nop": "nothing", "trace": "nothing (reads no register)"}


def realization(op: Op, fn: int | None = None) -> tuple[Realization, Op] | None:
    """(the realization, the opcode it realizes) for an opcode whose cell types are realized:
    either the opcode itself or, for an inverse family, its inverse opcode (whose circuit is
    reversed).  None if the opcode has no gate realization.  For a family with a function
    operand, `fn` is the function id; None asks whether any function is realized."""
    for target in (op, OP_BY_NAME[op.inverse]):
        r = REALIZATIONS.get(target.family)
        if r is None:
            continue
        if target.family == "cvt":
            if target.types not in ((FIXED, INT), (INT, FIXED)):
                return None
        elif op.types and op.types[0] not in r.types:
            return None
        if r.src_types is not None and op.types[1] not in r.src_types:
            return None
        if r.fns is not None and not realized_fns(r, op.types[0], fn):
            return None
        return r, target
    return None


def realized_fns(r: Realization, t: NumType, fn: int | None = None) -> list[int]:
    """The function ids (all, or just `fn`) a fn family's realization covers for type t."""
    ids = range(len(FN2)) if fn is None else [fn] if 0 <= fn < len(FN2) else []
    return [i for i in ids if t in (r.fns or {}).get(FN2[i].name, ())]


def params(op: Op, n: int, F: int = 0, imm: int = 0, cc: int = 0, fn: int = 0) -> Params:
    """Parameters for realizing `op` at width n (F only matters to fixed products and
    conversions; imm is an immediate word or a rotation count; cc a condition word; fn a
    function id)."""
    if not MIN_WIDTH <= n <= MAX_WIDTH:
        raise ValueError(f"width must be {MIN_WIDTH}..{MAX_WIDTH}, not {n}")
    src = op.types[1] if len(op.types) == 2 else None
    return Params(n=n, type=op.type, F=F, imm=imm, cc=cc, src_type=src, fn=fn)


def register_roles(op: Op) -> list[str]:
    """Register names of an opcode's realization in operand order: targets y, z; sources a,
    b; a condition's compared cells a, b and its result `cond`."""
    if op.family in CONDITIONS:
        return ["a", "b", "cond"]
    names, targets, sources = [], iter("yz"), iter("ab")
    for kind in op.operands:
        if kind == "y":
            names.append(next(targets))
        elif kind == "a":
            names.append(next(sources))
    return names


def realize(b: Builder, op: Op, regs: list[Wires], p: Params) -> list[Wires] | None:
    """Emit the gates of `op` (itself realized, not an inverse family: see `realization`) on
    the registers; a source register given twice (the same cell) is copied first."""
    found = realization(op, p.fn if "fn" in op.operands else None)
    if found is None or found[1] is not op:
        raise ValueError(f"{op.name} has no realization of its own")
    regs = list(regs)
    copies = []
    for i in range(len(regs)):
        if any(regs[i] is regs[j] for j in range(i)):
            c = b.alloc(len(regs[i]))
            for t, s in zip(c, regs[i]):
                b.x(t, s)
            copies.append((regs[i], c))
            regs[i] = c
    out = found[0].build(b, regs, p)
    for src, c in reversed(copies):
        for t, s in zip(c, src):
            b.x(t, s)
        b.free(c)
    return out
