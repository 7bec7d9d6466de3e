"""Gate counts of every realization, pinned by closed formulas at n = 4, 8, 16, 32, 64.

The ripple-carry adder is Cuccaro, Draper, Kutin and Moulton's (quant-ph/0410184, figure 5):
with its carry-out it has exactly the published 2n-1 Toffoli, 5n-3 CNOT and 2n-4 NOT gates and
one ancilla.  Every other count is derived from it in docs/hw.md and pinned here.
"""
from __future__ import annotations

from collections import Counter

import pytest

from isa import gates
from isa.functions import CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE, FN2_BY_NAME, cond_word
from isa.types import FIXED, INT
from rvm.hw.build import circuit
from rvm.hw.circuit import KIND_NAMES, Builder
from rvm.hw.report import cost

WIDTHS = (4, 8, 16, 32, 64)


def counts(c) -> tuple[int, int, int, int, int]:
    """(NOT, CNOT, Toffoli, MCX, ancilla peak) of a circuit."""
    k = Counter(KIND_NAMES[g] for g in c.gates[:, 0])
    anc = c.n_wires - len(c.register_wires)
    return k["not"], k["cnot"], k["toffoli"], k["mcx"], anc


def adder(m: int) -> tuple[int, int, int]:
    """(NOT, CNOT, Toffoli) of y += a mod 2**m: CDKM figure 5 without its two carry-out gates
    for m >= 4, the MAJ/UMA ripple of the same paper below."""
    if m >= 4:
        return 2 * m - 4, 5 * m - 4, 2 * m - 2
    return (0, 1, 0) if m == 1 else (0, 4 * m - 2, 2 * m - 2)


def tri(n: int) -> int:
    return n * (n + 1) // 2


def multiplier(w: int) -> tuple[int, int, int]:
    """(NOT, CNOT, Toffoli) of p += x*c mod 2**w by controlled adders of widths w..1; a
    controlled adder of width m >= 4 has 4m-6 CNOT and 5m-4 Toffoli (the NOTs of figure 5
    become CNOTs, its CNOTs on y Toffolis); below 4: 2(m-1) CNOT, 4m-2 Toffoli (m=1: one)."""
    return 0, 2 * w * w - 4 * w, (5 * w * w - 3 * w) // 2 - 1


@pytest.mark.parametrize("n", WIDTHS)
def test_cdkm_published_counts(n):
    b = Builder()
    y, a, z = b.register("y", n), b.register("a", n), b.register("z", 1)
    gates.add_with_carry(b, y, a, z[0])
    c = b.build("cdkm")
    assert counts(c) == (2 * n - 4, 5 * n - 3, 2 * n - 1, 0, 1)


@pytest.mark.parametrize("m", range(1, 12))
def test_adder_and_controlled_adder(m):
    b = Builder()
    y, a = b.register("y", m), b.register("a", m)
    gates.add_into(b, y, a)
    assert counts(b.build("add"))[:3] == adder(m)
    b = Builder()
    y, a, c = b.register("y", m), b.register("a", m), b.register("c", 1)
    gates.add_into(b, y, a, ctl=c)
    want = (0, 4 * m - 6, 5 * m - 4) if m >= 4 else (0, 2 * (m - 1), 4 * m - 2 if m > 1 else 1)
    assert counts(b.build("cadd"))[:3] == want


@pytest.mark.parametrize("n", WIDTHS)
def test_int_counts(n):
    A = adder(n)
    assert counts(circuit("add.i", n)) == (*A, 0, 1)
    assert counts(circuit("sub.i", n)) == (*A, 0, 1)
    inc = (A[0] + 2, A[1], A[2], 0, n + 1)          # the constant 1 NOTed in and out
    assert counts(circuit("inc.i", n)) == inc
    assert counts(circuit("dec.i", n)) == inc
    assert counts(circuit("neg.i", n)) == (inc[0] + n, *inc[1:])
    assert counts(circuit("not.i", n)) == (n, 0, 0, 0, 0)
    assert counts(circuit("xor.i", n)) == (0, n, 0, 0, 0)
    assert counts(circuit("xorand.i", n)) == (0, 0, n, 0, 0)
    assert counts(circuit("swap.i", n)) == (0, 0, 0, 0, 0)
    assert counts(circuit("rotl.i", n, imm=3)) == (0, 0, 0, 0, 0)
    M = multiplier(n)
    assert M[1:] == (2 * n * n - 4 * n, (5 * n * n - 3 * n) // 2 - 1)
    assert counts(circuit("addmul.i", n)) == (*M, 0, 1)
    assert counts(circuit("submul.i", n)) == (*M, 0, 1)
    # y += x*x: the second source copied to n ancillas and back (2n CNOTs)
    assert counts(circuit("addmul.i", n, alias=(0, 1, 1))) == (M[0], M[1] + 2 * n, M[2], 0,
                                                                n + 1)


@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("imm", [1, 6, -1, 0x5A5A5A5A5A5A5A5A, 0])
def test_add_immediate(n, imm):
    c = imm & ((1 << n) - 1)
    if c == 0:
        assert counts(circuit("addi.i", n, imm=imm)) == (0, 0, 0, 0, 0)
        return
    t = (c & -c).bit_length() - 1                   # trailing zeros shorten the adder
    w = n - t
    A = adder(w)
    want = (2 * bin(c >> t).count("1") + A[0], A[1], A[2], 0, w + (1 if w > 1 else 0))
    assert counts(circuit("addi.i", n, imm=imm)) == want
    assert counts(circuit("subi.x", n, imm=imm)) == want
    assert counts(circuit("xori.i", n, imm=imm)) == (bin(c).count("1"), 0, 0, 0, 0)


@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("F", [1, 4, 16, 32])
def test_fixed_counts(n, F):
    w = n + F                                       # the signed product's register
    A, Aw, M = adder(n), adder(w), multiplier(w)
    # sign extension (F CNOT) and product, rounding add (F-1 NOT, F+1 CNOT, adder of width w),
    # all computed and uncomputed, around one adder y += P[F:]
    mul = (2 * (F - 1 + Aw[0]) + A[0],
           2 * (F + M[1]) + 2 * (F + 1 + Aw[1]) + A[1],
           2 * M[2] + 2 * Aw[2] + A[2])
    c = circuit("addmul.x", n, F=F)
    assert counts(c)[:4] == (*mul, 0)
    # everything but the adder y += P[F:] is computed and uncomputed (Bennett)
    assert c.uncompute == 3 * F + sum(M) + sum(Aw)
    assert c.gate_count == 2 * c.uncompute + sum(A)
    assert counts(circuit("submul.x", n, F=F))[:4] == (*mul, 0)
    # int += fixed: a sign-extended copy (w CNOT) instead of the product
    cvt = (2 * (F - 1 + Aw[0]) + A[0], 2 * w + 2 * (F + 1 + Aw[1]) + A[1], 2 * Aw[2] + A[2])
    assert counts(circuit("cvt.ix", n, F=F))[:4] == (*cvt, 0)
    # fixed += int: an adder on the bits above F
    assert counts(circuit("cvt.xi", n, F=F))[:3] == (adder(n - F) if F < n else (0, 0, 0))
    assert counts(circuit("add.x", n))[:3] == A


@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("t", [INT, FIXED])
def test_condition_counts(n, t):
    # sign flips (n NOT) around the carry chain of ~a' + b', out and back, into cond
    less = (2 * n, 4 * n - 3, 2 * n - 1, 0, 1)
    for cmp in (CMP_LT, CMP_GT):
        assert counts(circuit("jmp", n, cc=cond_word(cmp, t))) == less
    for cmp in (CMP_LE, CMP_GE):                     # one NOT on cond
        assert counts(circuit("join", n, cc=cond_word(cmp, t))) == (less[0] + 1, *less[1:])
    eq = (0, 2 * n, 0, 1, 0)                         # b ^= a, one MCX on n negative controls
    assert counts(circuit("assert", n, cc=cond_word(CMP_EQ, t))) == eq
    assert counts(circuit("jmp", n, cc=cond_word(CMP_NE, t))) == (1, *eq[1:])
    assert counts(circuit("jmp", n, cc=0)) == (0, 0, 0, 0, 0)     # always: no gates
    # the carry chain and the sign flips are uncomputed; only the two carry gates into cond
    # are not
    c = circuit("jmp", n, cc=cond_word(CMP_LT, t))
    assert c.uncompute == 4 * n - 3 and c.gate_count == 2 * c.uncompute + 2


def test_cost_summary_of_the_adder():
    r = cost(circuit("add.i", 16))
    assert (r.gates["toffoli"], r.gates["cnot"], r.gates["not"], r.total) == (30, 76, 28, 134)
    assert r.ancilla_peak == 1 and r.wires == 33 and r.garbage_bits == 0
    assert r.uncompute_gates == 0           # CDKM's own uncompute half is part of the adder
    assert r.relabelling is False
    assert cost(circuit("swap.i", 16)).relabelling is True


def less(n: int) -> tuple[int, int, int]:
    """(NOT, CNOT, Toffoli) of f ^= (a < b): sign flips around the carry chain, out and back."""
    return 2 * n, 4 * n - 3, 2 * n - 1


@pytest.mark.parametrize("n", WIDTHS)
def test_xorcmp_counts(n):
    """y ^= (a CMP b) is the condition circuit with y's bit 0 as cond; always: one NOT."""
    for t, name in ((INT, "xorcmp.ii"), (FIXED, "xorcmp.ix")):
        for cmp in (CMP_LT, CMP_GT, CMP_LE, CMP_GE, CMP_EQ, CMP_NE):
            cc = cond_word(cmp, t)
            assert counts(circuit(name, n, cc=cc)) == counts(circuit("jmp", n, cc=cc))
        assert counts(circuit(name, n, cc=cond_word(0, t))) == (1, 0, 0, 0, 0)


@pytest.mark.parametrize("n", WIDTHS)
def test_min_max_counts(n):
    """f = (b < a) (max: a < b), n Fredkins swap a and b if f, y += a, the swap and the
    comparator undone: two comparators, 2n Fredkin, one adder; ancillas f and the chain's."""
    A, L = adder(n), less(n)
    want = (2 * L[0] + A[0], 2 * L[1] + A[1], 2 * L[2] + A[2], 0, 2)
    for name in ("addfn2.i", "subfn2.i", "addfn2.x", "subfn2.x"):
        for fn in ("min", "max"):
            c = circuit(name, n, fn=FN2_BY_NAME[fn].id)
            assert counts(c) == want and fredkins(c) == 2 * n, (name, fn)


@pytest.mark.parametrize("n", WIDTHS)
def test_bitwise_counts(n):
    """The value into n ancillas (a & b: n Toffoli; a ^ b: 2n CNOT; a | b both), added, and
    uncomputed."""
    A = adder(n)
    per = {"bitand": (0, n), "bitxor": (2 * n, 0), "bitor": (2 * n, n)}
    for fn, (cnot, toffoli) in per.items():
        c = circuit("addfn2.i", n, fn=FN2_BY_NAME[fn].id)
        assert counts(c) == (A[0], A[1] + 2 * cnot, A[2] + 2 * toffoli, 0, n + 1), fn


def barrel(n: int) -> tuple[int, int]:
    """(k stages, Fredkins of the stages) of the shifter: register W = n + 2**k - 1, each
    stage's rotation by s = three reversals, floor(W/2) + floor(s/2) + floor((W-s)/2)."""
    k = (n - 1).bit_length()
    W = n + (1 << k) - 1
    return k, sum(W // 2 + s // 2 + (W - s) // 2 for s in (1 << j for j in range(k)))


@pytest.mark.parametrize("n", WIDTHS)
def test_shifter_counts(n):
    """Copy of a (n CNOT; shr: the sign into 2**k - 1 + n more wires), count bits above the
    stages ORed into h (one MCX and a NOT), the stages' Fredkins, n Fredkins of saturation;
    all of it computed and uncomputed around one adder."""
    A = adder(n)
    k, stages = barrel(n)
    high = n - 1 - k                             # count bits between the stages and the sign
    h = 1 if high else 0
    for fn in ("shl", "shr"):
        c = circuit("addfn2.i", n, fn=FN2_BY_NAME[fn].id)
        copies = n + ((1 << k) - 1 + n if fn == "shr" else 0)
        assert counts(c) == (A[0] + 2 * h, A[1] + 2 * copies, A[2], 2 * h,
                             n + (1 << k) - 1 + n + h + 1), fn
        assert fredkins(c) == 2 * (stages + (n if high else 0)), fn
    # W is odd at even n: every stage is W - 1 Fredkins (k (n + 2**k - 2) in all)
    assert barrel(8) == (3, 3 * 14) and barrel(64) == (6, 6 * 126)


def fredkins(c) -> int:
    return sum(1 for g in c.gates[:, 0] if KIND_NAMES[g] == "fredkin")
