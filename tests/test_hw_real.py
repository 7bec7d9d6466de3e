"""RevLib .real: export then import gives the same circuit; a hand-written RevLib-style adder
(header, .variables, .constants, .garbage, t-gates) simulates correctly."""
from __future__ import annotations

import numpy as np
import pytest

from isa.functions import CMP_EQ, CMP_LE, cond_word
from isa.types import FIXED, INT
from rvm.hw.build import circuit
from rvm.hw.real import RealError, export_real, import_real, truth_table
from rvm.hw.report import cost
from rvm.hw.sim import simulate, simulate_one
from rvm.hw.verify import all_realized

# A two-bit adder written by hand in the RevLib style: s = a + b + cin into the b lines, the
# carry out on a constant-0 line, the inner carry left as garbage.  Bit 0 starts with a Peres
# gate (p3 = t3 then t2); a negative-control pair and a Fredkin pair cancel out.
ADDER_2BIT = """\
# 2-bit ripple-carry adder with carry in and carry out (hand-written)
.version 1.0
.numvars 7
.variables a0 a1 b0 b1 cin c1 c2
.inputs a0 a1 b0 b1 cin 0 0
.outputs a0 a1 s0 s1 cin g c
.constants -----00
.garbage -----1-
.begin
t4 -a1 -b1 cin c2
p3 a0 b0 c1
t4 -a1 -b1 cin c2
t3 b0 cin c1
t2 cin b0
t3 a1 b1 c2
t2 a1 b1
t3 b1 c1 c2
t2 c1 b1
f3 cin a0 a1
f3 cin a0 a1
.end
"""


def test_export_import_round_trip_of_every_realization():
    for op in all_realized():
        cc = cond_word(CMP_LE, FIXED) if op.family in ("jmp", "join", "assert") else 0
        c = circuit(op, 8, F=3, imm=0x35, cc=cc)
        text = export_real(c)
        back = import_real(text)
        assert back == c, op.name
        assert back.sources == c.sources and back.name == c.name
        assert back.uncompute == c.uncompute
        assert export_real(back) == text
    # ancilla lifetimes travel in comments: the physical wire count is the same
    c = circuit("addmul.x", 16, F=8)
    assert import_real(export_real(c)).n_wires == c.n_wires == 16 * 3 + 58


def test_export_text():
    text = export_real(circuit("jmp", 4, cc=cond_word(CMP_EQ, INT)))
    assert text.splitlines()[:14] == [
        "# jmp", "# written by rvm hw", ".version 1.0", ".numvars 9",
        ".variables a0 a1 a2 a3 b0 b1 b2 b3 cond", ".inputs a0 a1 a2 a3 b0 b1 b2 b3 cond",
        ".outputs a0 a1 a2 a3 b0 b1 b2 b3 cond", ".constants ---------", ".garbage ---------",
        "#@name jmp", "#@uncompute 4", "#@sources a b", ".begin", "t2 a0 b0"]
    assert "t5 -b0 -b1 -b2 -b3 cond" in text.splitlines()
    swap = export_real(circuit("swap.i", 4))
    assert ".outputs z0 z1 z2 z3 y0 y1 y2 y3" in swap and "t" not in swap.split(".begin")[1]


def test_hand_written_revlib_adder_simulates():
    c = import_real(ADDER_2BIT, "adder2.real")
    assert c.name == "adder2"
    assert c.inputs == {"a": (0, 1), "b": (2, 3), "cin": (4,)}
    assert c.outputs == {"a": (0, 1), "s": (2, 3), "cin": (4,), "c": (6,)}
    assert c.constants == {5: 0, 6: 0} and c.garbage == (5,)
    table = truth_table(c)
    assert len(table) == 32
    for i, o in table:
        total = i["a"] + i["b"] + i["cin"]
        assert o == {"a": i["a"], "s": total & 3, "cin": i["cin"], "c": total >> 2}, (i, o)
    assert simulate_one(c, {"a": 3, "b": 2, "cin": 1}) == {"a": 3, "s": 2, "cin": 1, "c": 1}
    r = cost(c)
    assert r.gates == {"not": 0, "cnot": 4, "toffoli": 4, "mcx": 2, "fredkin": 2}
    assert r.garbage_bits == r.erased_bits == 1
    assert r.landauer(300.0) == pytest.approx(2.870978885e-21)


def test_constant_one_lines_and_a_truth_table_check():
    text = (".version 1.0\n.numvars 3\n.variables x y k\n.inputs x y 1\n.outputs x f 1\n"
            ".constants --1\n.garbage ---\n.begin\nt3 x k y\nt2 k y\n.end\n")
    c = import_real(text)                # y ^= x & 1; y ^= 1: f = ~(y ^ x)
    out = simulate(c, {"x": np.array([0, 0, 1, 1]), "y": np.array([0, 1, 0, 1])})
    assert out["f"].tolist() == [1, 0, 0, 1]


@pytest.mark.parametrize("text,message", [
    (".variables a b\n.begin\nt2 a c\n.end\n", "<real>:3: unknown variable 'c'"),
    (".variables a b\n.begin\nv a b\n.end\n", "<real>:3: gate 'v' is V"),
    (".variables a b\n.begin\nt3 a b\n.end\n", "<real>:3: t3 needs 3 lines, got 2"),
    (".variables a b\n.constants -\n.begin\n.end\n", ".constants has 1 entries for 2"),
    (".variables a b\n.begin\nt2 a a\n.end\n", "<real>:3: a line appears twice"),
    (".variables a b\nt1 a\n", "<real>:2: expected a header line"),
    (".variables a b\n.begin\nt1 a\n", "no .begin ... .end gate list"),
    (".numvars 3\n.variables a b\n.begin\n.end\n", ".numvars 3 but 2 .variables"),
])
def test_bad_files(text, message):
    with pytest.raises(RealError, match=message.replace("(", r"\(").replace(".", r"\.")):
        import_real(text)
