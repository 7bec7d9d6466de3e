"""Every realized instruction against isa/arith.py: exhaustive at 8 bits, both directions (the
circuit forward, its reversed gate list back to the inputs), random at 32 and 64 bits; and
the simulator's checks catch a broken circuit."""
from __future__ import annotations

import numpy as np
import pytest

from isa.table import OP_BY_NAME
from rvm.hw.build import NotRealized, circuit
from rvm.hw.circuit import Builder
from rvm.hw.sim import CircuitError, simulate, simulate_one
from rvm.hw.verify import all_realized, default_cases, verify

REALIZED = [op.name for op in all_realized()]


def test_the_realized_set():
    """These stay realized (in table order); an instruction given a realization in isa/gates.py
    joins the set, and the tests below verify it, without an edit here."""
    order = {op.name: op.code for op in all_realized()}
    assert REALIZED == sorted(REALIZED, key=order.get)
    assert set(REALIZED) >= {
        "add.i", "add.x", "sub.i", "sub.x", "addi.i", "addi.x", "subi.i", "subi.x", "inc.i",
        "dec.i", "addmul.i", "addmul.x", "submul.i", "submul.x", "xor.i", "xori.i",
        "xorand.i", "neg.i", "neg.x", "not.i", "rotl.i", "rotr.i", "swap.i", "swap.x",
        "addfn2.x", "subfn2.x", "cvt.ix", "uncvt.ix", "cvt.xi", "uncvt.xi", "assert", "jmp",
        "join", "addfn2.i", "subfn2.i", "xorcmp.ii", "xorcmp.ix"}


def test_the_realized_functions():
    """y += f(a, b): min and max on int and fixed cells, the bit functions and shifts on
    int; mod (a divider) is not realized."""
    from isa.functions import FN2
    names = {op: [FN2[c["fn"]].name for c in default_cases(OP_BY_NAME[op], 8, 3)]
             for op in ("addfn2.i", "subfn2.i", "addfn2.x", "subfn2.x")}
    assert names["addfn2.i"] == names["subfn2.i"] == ["min", "max", "shl", "shr", "bitand",
                                                      "bitor", "bitxor"]
    assert names["addfn2.x"] == names["subfn2.x"] == ["min", "max"]
    with pytest.raises(NotRealized, match="addfn2.i with mod has no gate realization"):
        circuit("addfn2.i", 8, fn=5)
    with pytest.raises(NotRealized, match="addfn2.x with bitand has no gate realization"):
        circuit("addfn2.x", 8, fn=8)
    with pytest.raises(NotRealized, match="xorcmp.if has no gate realization"):
        circuit("xorcmp.if", 8, cc=0x33)


@pytest.mark.parametrize("n", [4, 5, 6, 7])
@pytest.mark.parametrize("name", ["addfn2.i", "subfn2.x", "xorcmp.ix"])
def test_new_realizations_exhaustive_at_small_widths(name, n):
    """Every width from 4 (shifters whose stage count is not a power of two's, n - 1 count
    bits above the stages or none); shifts by a negative count trap in the interpreter and
    are left out of the comparison, but the reversed circuit still gives them back."""
    from isa.functions import FN2_BY_NAME
    op = OP_BY_NAME[name]
    for case in default_cases(op, n, n // 2):
        r = verify(op, n, **case)
        assert r.ok and r.exhaustive and r.inputs == 1 << (3 * n), r.message
        shift = "fn" in case and case["fn"] in (FN2_BY_NAME["shl"].id, FN2_BY_NAME["shr"].id)
        assert r.valid == (r.inputs // 2 if shift else r.inputs)


def test_a_wrong_shifter_is_caught(monkeypatch):
    """shl realized as shr: exhaustive verification names an input."""
    from isa import gates
    from isa.functions import FN2_BY_NAME
    from rvm.hw import build

    real = gates._shift
    monkeypatch.setattr(gates, "_shift", lambda b, y, a, c, left: real(b, y, a, c, not left))
    build._cached.cache_clear()
    try:
        r = verify("addfn2.i", 5, fn=FN2_BY_NAME["shl"].id)
        assert not r.ok and r.message.startswith("addfn2.i forward: y = ")
    finally:
        build._cached.cache_clear()


@pytest.mark.parametrize("name", REALIZED)
def test_exhaustive_8_bits(name):
    """All 2**(register bits) inputs at n = 8 (2**24 for y += a*b), every immediate, every
    rotation count and every comparison of int and fixed cells.  An op of three registers
    that is not an update (cswap: its reference runs input by input in Python, 90 s at 8
    bits) is exhaustive at n = 6 here; `rvm hw verify` takes it to 8."""
    op = OP_BY_NAME[name]
    regs = sum(1 for k in op.operands if k in ("y", "a"))
    n = 6 if regs == 3 and not op.law else 8
    for case in default_cases(op, n, 3):
        r = verify(op, n, **case)
        assert r.ok, r.message
        assert r.exhaustive
        bits = n * regs + (
            1 if op.family in ("jmp", "join", "assert") else 0)
        if op.family in ("jmp", "join", "assert"):
            bits = 17
        assert r.inputs == 1 << bits


@pytest.mark.parametrize("name", ["addmul.x", "submul.x", "cvt.ix", "uncvt.ix", "cvt.xi"])
@pytest.mark.parametrize("F", [1, 2, 3, 4, 5, 6, 7, 9])
def test_exhaustive_fixed_point_fraction_bits_at_4_bits(name, F):
    """Rounding half to even of the product at every F, including F >= n."""
    r = verify(name, 4, F=F)
    assert r.ok and r.exhaustive and r.inputs == 1 << (12 if "mul" in name else 8), r.message


@pytest.mark.parametrize("n", [32, 64])
@pytest.mark.parametrize("name", REALIZED)
def test_random_wide(name, n):
    op = OP_BY_NAME[name]
    cases = default_cases(op, n, n // 2)
    if op.family in ("rotl", "rotr"):
        cases = cases[:: 7]
    for case in cases:
        r = verify(op, n, samples=256 if "mul" in name else 1024, seed=n, **case)
        assert r.ok, r.message
        assert not r.exhaustive


def test_addmul_with_both_sources_the_same_cell():
    c = circuit("addmul.x", 8, F=3, alias=(0, 1, 1))
    assert set(c.inputs) == {"y", "a"}
    a = np.arange(256, dtype=np.uint64)
    out = simulate(c, {"y": 5, "a": a})
    from isa.arith import fixed_mul
    from rvm.hw.verify import sext
    want = [(5 + fixed_mul(sext(int(v), 8), sext(int(v), 8), 3)) & 255 for v in a]
    assert out["y"].tolist() == want


def test_a_dirty_ancilla_and_a_changed_source_are_caught():
    b = Builder()
    y, a = b.register("y", 4), b.register("a", 4)
    (anc,) = b.alloc(1)
    b.x(anc, a[0])                       # forgets to uncompute
    b.x(y[0], anc)
    b.free([anc])
    c = b.build("leaky", sources=("a",))
    with pytest.raises(CircuitError, match=r"leaky: gate 3 \(free of wire anc8\) found the "
                                           r"ancilla nonzero"):
        simulate_one(c, {"y": 0, "a": 1})
    assert simulate_one(c, {"y": 0, "a": 2}) == {"y": 0, "a": 2}
    b = Builder()
    y, a = b.register("y", 4), b.register("a", 4)
    b.x(a[1], y[0])
    c = b.build("writes_source", sources=("a",))
    with pytest.raises(CircuitError, match="writes_source: source a changed from 0 to 2"):
        simulate(c, {"y": np.arange(16), "a": 0})


def test_inverse_circuit_is_the_reversed_list():
    c = circuit("add.i", 8)
    inv = c.inverse()
    assert inv.name == "add.i^-1" and inv.inverse() == c
    assert (inv.gates[1:-1] == c.gates[::-1][1:-1]).all()
    assert circuit("sub.i", 8).gate_list() == inv.gate_list()


def test_not_realized_names_the_reason():
    with pytest.raises(NotRealized, match="add.f has no gate realization"):
        circuit("add.f", 8)
    from isa.functions import CMP_LT, cond_word
    from isa.types import FLOAT
    with pytest.raises(NotRealized, match="comparisons of float cells are not realized"):
        circuit("jmp", 8, cc=cond_word(CMP_LT, FLOAT))
    with pytest.raises(ValueError, match="width must be 4..64, not 3"):
        circuit("add.i", 3)
