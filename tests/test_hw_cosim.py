"""Co-simulation of the int/fixed example programs: every instruction done by its circuit,
the whole state compared with the interpreter after every instruction, forward and back."""
from __future__ import annotations

import pytest

import rvm
from rvm.hw.build import NotRealized
from rvm.hw.cosim import CosimError, WidthOverflow, cosimulate

# (program, width, inputs, expected outputs, instructions forward)
PROGRAMS = [
    ("rfib.rasm", 16, {}, {"n": 10, "out": 55}, 1692),
    ("rfibn.rasm", 16, {"n": 0, "z": 30}, {"n": 9, "z": 30}, 5260),
    ("isqrt.rasm", 16, {"x": 1000}, {"x": 1000, "r": 31}, 198),
    ("bubble_sort.rasm", 8, {}, None, 358),
    ("stack_reverse.rasm", 8, {}, None, 52),
    ("oscillator.rasm", 64, {"steps": 40}, None, 208),
    ("poly_uncall.rasm", 64, {}, {"x": 2.0, "y": 17.0}, 12),
    ("trace/diffusion.rasm", 64, {}, None, 226),       # indexed operands u[j - 1]
    ("trace/leapfrog.rasm", 64, {}, None, 910),
]


@pytest.mark.parametrize("name,width,inputs,outputs,steps", PROGRAMS)
def test_example_programs_agree_at_every_step(name, width, inputs, outputs, steps):
    prog = rvm.assemble(f"programs/{name}")
    res = cosimulate(prog, inputs, width=width, name=name)
    assert res.forward_steps == res.backward_steps == steps
    if outputs is not None:
        assert res.outputs == outputs
    direct = rvm.run(prog, inputs).outputs
    for k, v in res.outputs.items():
        assert (v == direct[k]).all() if hasattr(v, "all") else v == direct[k]
    c = res.cost
    assert c.instructions == steps and c.total == sum(t.total for t in c.by_opcode.values())
    assert c.garbage_bits == 0 and c.landauer(300.0) == 0.0
    assert 0 <= c.uncompute_gates < c.total
    assert 0 < c.toffoli_depth <= c.depth <= c.total


def test_rfib_report_figures():
    res = cosimulate(rvm.assemble("programs/rfib.rasm"), {}, width=16)
    c = res.cost
    assert dict(c.gates) == {"not": 33587, "cnot": 82660, "toffoli": 34132}
    assert (c.depth, c.toffoli_depth, c.ancilla_peak, c.wires) == (21384, 18002, 17, 354)
    # 218 adds at 134 gates each (CDKM at n = 16: 28 NOT, 76 CNOT, 30 Toffoli)
    assert c.by_opcode["add.i"].count == 218 and c.by_opcode["add.i"].total == 218 * 134


def test_free_permutations_and_moves_are_counted():
    res = cosimulate(rvm.assemble("programs/bubble_sort.rasm"), {}, width=8)
    assert res.cost.relabellings == res.cost.by_opcode["swap.i"].count > 0
    assert res.cost.by_opcode["swap.i"].total == 0
    res = cosimulate(rvm.assemble("programs/stack_reverse.rasm"), {}, width=8)
    assert res.cost.stack_peak == 5 and res.cost.moves > 0


def test_a_value_outgrowing_the_width_is_reported():
    prog = rvm.assemble("programs/rfib.rasm")
    with pytest.raises(WidthOverflow) as e:
        cosimulate(prog, {"n": 13}, width=8)
    assert str(e.value) == ("programs/lib/rfib.rasm:13:13: step 3958 (forward), pc 8: inc.i "
                            "out: out = 128 does not fit 8 bits (co-simulate at a larger "
                            "--width)")


def test_inputs_must_fit_the_width():
    prog = rvm.assemble("programs/isqrt.rasm")
    with pytest.raises(WidthOverflow, match="x = 1000 does not fit 8 bits"):
        cosimulate(prog, {"x": 1000}, width=8)


def test_unrealized_instructions_are_named():
    prog = rvm.assemble("programs/accumulate.rasm")
    with pytest.raises(NotRealized, match=r"cannot run pc \d+: add.f .* \(no gate realization\)"):
        cosimulate(prog, {}, width=16)
    src = "inout x: int = 5\nfunc main() {\n    rotl x, 3\n}\n"
    with pytest.raises(NotRealized, match="rotations turn all 64 bits: co-simulate at --width 64"):
        cosimulate(rvm.assemble(src), {}, width=16)
    res = cosimulate(rvm.assemble(src), {}, width=64)
    assert res.outputs == {"x": 40} and res.cost.relabellings == 1


def test_a_wrong_circuit_is_caught(monkeypatch):
    """Break one realization (y += a computed as y ^= a) and the co-simulation names the step."""
    from isa import gates
    from rvm.hw import build

    def bad_add(b, r, p):
        for t, s in zip(r[0], r[1]):
            b.x(t, s)
    monkeypatch.setitem(gates.REALIZATIONS, "add", gates.Realization(bad_add, gates.IF, "xor"))
    build._cached.cache_clear()
    try:
        src = "inout x: int = 3\ninout y: int = 1\nfunc main() {\n    x += y\n}\n"
        with pytest.raises(CosimError) as e:
            cosimulate(rvm.assemble(src, filename="t.rasm"), {}, width=16)
        assert str(e.value) == ("t.rasm:4:5: step 1 (forward), pc 1: add.i x, y: x: the "
                                "circuit gives 2, the interpreter 4")
    finally:
        build._cached.cache_clear()


def test_same_cell_sources_and_a_trap():
    src = ("inout x: int = 7\ninout y: int = 0\nfunc main() {\n    y += x * x\n"
           "    assert y == 49\n}\n")
    res = cosimulate(rvm.assemble(src), {}, width=16)
    assert res.outputs == {"x": 7, "y": 49}
    from rvm.errors import AssertionTrap
    with pytest.raises(AssertionTrap):
        cosimulate(rvm.assemble(src), {"x": 6}, width=16)


def test_wrong_condition_bits_are_caught(monkeypatch):
    """A condition circuit that never sets the bit: the fork disagrees with the interpreter's
    jump, and a join reached by its jump is one the model says must trap."""
    from isa import gates
    from rvm.hw import build

    never = gates.Realization(lambda b, r, p: None, (None,), "no gates")
    prog = rvm.assemble("programs/rfib.rasm")
    try:
        monkeypatch.setitem(gates.REALIZATIONS, "jmp", never)
        build._cached.cache_clear()
        with pytest.raises(CosimError, match=r"jmp .*: the condition bit is 0 but the "
                                             r"interpreter jumped"):
            cosimulate(prog, {}, width=16)
        monkeypatch.setitem(gates.REALIZATIONS, "jmp", gates.REALIZATIONS["assert"])
        monkeypatch.setitem(gates.REALIZATIONS, "join", never)
        build._cached.cache_clear()
        with pytest.raises(CosimError, match=r"join .*: the model expects a trap \(come-from\) "
                                             r"but the interpreter ran the instruction"):
            cosimulate(prog, {}, width=16)
    finally:
        build._cached.cache_clear()


def test_traps_the_model_predicts_pass_through():
    from rvm.errors import PopError
    src = ("inout x: int = 3\ninout y: int = 4\nfunc main() {\n    push x\n    pop y\n}\n")
    with pytest.raises(PopError):
        cosimulate(rvm.assemble(src), {}, width=8)
    res = cosimulate(rvm.assemble(src), {"y": 0}, width=8)
    assert res.outputs == {"x": 0, "y": 3} and res.cost.stack_peak == 1


def _expr_program(fn_names, mod: bool = False):
    """Built by hand (tests/builder.py): the instructions added for expressions in a loop."""
    from builder import ProgramBuilder

    from isa.arith import fixed_from_real
    from isa.functions import CMP_GE, CMP_LT, FN2_BY_NAME, cond_word
    from isa.program import INOUT
    from isa.types import FIXED, INT

    pb = ProgramBuilder(8)
    n = pb.glob("n", INT, role=INOUT, default=5)
    i = pb.glob("i", INT, role=INOUT)
    xs = pb.glob("xs", INT, 5, role=INOUT, default=[7, -3, 12, 0, -9])
    acc = pb.glob("acc", INT, role=INOUT, default=1)
    s = pb.glob("s", INT, role=INOUT, default=2)
    t = pb.glob("t", INT, role=INOUT)
    p = pb.glob("p", FIXED, role=INOUT, default=fixed_from_real(1.5, 8))
    q = pb.glob("q", FIXED, role=INOUT, default=fixed_from_real(-0.25, 8))
    r = pb.glob("r", FIXED, role=INOUT)
    zero = pb.const("zero", INT, 0)
    x = pb.x(xs, 5, i)
    f = pb.func("main")
    f.jmp("skip", to="out", cond=("==", INT, i, n))
    f.join("top", came_from="back", cond=("!=", INT, i, zero))
    for name in fn_names:
        f.op("addfn2.i", acc, x, s, FN2_BY_NAME[name].id)
        f.op("subfn2.i", t, s, acc, FN2_BY_NAME[name].id) if name != "shl" else None
    f.op("xorcmp.ii", t, cond_word(CMP_LT, INT), x, s)
    f.op("xorcmp.ix", t, cond_word(CMP_GE, FIXED), p, q)
    f.op("addfn2.x", r, p, q, FN2_BY_NAME["max"].id)
    if mod:
        f.op("addfn2.i", acc, x, s, FN2_BY_NAME["mod"].id)
    f.op("inc.i", i)
    f.jmp("back", to="top", cond=("<", INT, i, n))
    f.join("out", came_from="skip", cond=("==", INT, i, zero))
    return pb.build()


def test_expression_instructions_agree_at_every_step():
    prog = _expr_program(["min", "max", "shl", "shr", "bitand", "bitor", "bitxor"])
    res = cosimulate(prog, {}, width=32)
    direct = rvm.run(prog, {}).outputs
    # entry, jmp, 5 x (join, 13 functions, 2 xorcmp, min, inc, jmp), join, return
    assert res.forward_steps == res.backward_steps == 2 + 5 * 19 + 2
    assert {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in res.outputs.items()} == \
        {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in direct.items()}
    assert res.outputs["r"] == 5 * 1.5
    by = res.cost.by_opcode
    assert by["addfn2.i"].count == 35 and by["xorcmp.ii"].count == 5
    assert by["addfn2.i"].gates["fredkin"] > 0 and res.cost.garbage_bits == 0


def test_an_unrealized_function_is_named():
    prog = _expr_program(["min"], mod=True)
    with pytest.raises(NotRealized, match=r"cannot run pc \d+: addfn2.i acc, xs\[i\], s, mod "
                                          r"\(no gate realization\)"):
        cosimulate(prog, {}, width=16)
