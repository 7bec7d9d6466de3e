"""Every trap of rvm.errors.TRAPS from a tiny program: its class, pc, step, location, message and
values; the faulting instruction changes nothing; and from the trap the machine runs back to
where it started, restoring the inputs exactly."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from builder import Arr, ProgramBuilder
from test_machine import if_program

from isa.table import OP_BY_NAME
from isa.types import FIXED, FLOAT, INT
from rvm.errors import (
    TRAPS,
    AliasError,
    AncillaError,
    AssertionTrap,
    BoundsError,
    BytecodeTrap,
    ComeFromError,
    DivisionByZero,
    DomainError,
    NestingError,
    PopError,
    RangeError,
    ReadOnlyError,
    StackOverflow,
    StackUnderflow,
    StepLimit,
    Trap,
)
from rvm.machine import Machine

SMALL = dict(stack_cells=16, frame_cells=256, max_depth=32)
tested: set[type] = set()


def snapshot(m: Machine) -> tuple:
    return (m.mem.copy(), m.stack().tolist(), m.pc, m.came, m.t, m.depth, m.status, m.direction)


def same(a: tuple, b: tuple) -> bool:
    return np.array_equal(a[0], b[0]) and a[1:] == b[1:]


def trap_of(m: Machine, cls: type[Trap], direction: int = 1) -> Trap:
    """Step until a trap; check it is `cls` and left the state exactly as before the step."""
    m.step(0, direction)
    while True:
        before = snapshot(m)
        try:
            ran = m.step(1, direction)
        except Trap as e:
            assert type(e) is cls, f"{type(e).__name__}: {e}"
            assert same(snapshot(m), before), "a trap must not change the state"
            assert e.pc == m.pc and e.step == m.t and e.direction == direction
            tested.add(cls)
            return e
        assert ran == 1, f"reached {m.status} without a {cls.__name__}"


def check_location(e: Trap) -> None:
    assert e.location == ("test.rasm", e.pc + 1, 1)
    assert str(e).startswith(f"test.rasm:{e.pc + 1}:1: {type(e).__name__}: ")
    assert e.instruction and e.instruction in str(e)


def back_to_start(m: Machine, start: dict) -> None:
    """Run backward from the trap to the start: the inputs are the ones the run began with."""
    assert m.run(direction=-1) == "start" and m.t == 0
    now = m.inputs()
    assert set(now) == set(start)
    for k, v in start.items():
        assert np.array_equal(now[k], v), k
    assert not m.mem[m.program.n_static:].any() and len(m.stack()) == 0


# ---- come-from -----------------------------------------------------------------------------

def entry_loop():
    """join top if x != 0 (an entry assertion: x must be 0 when the loop is entered)."""
    pb = ProgramBuilder()
    x = pb.input("x", INT)
    zero = pb.const("zero", INT, 0)
    f = pb.func("main")
    f.join("top", came_from="back", cond=("!=", INT, x, zero))
    f.op("dec.i", x)
    f.jmp("back", to="top", cond=("!=", INT, x, zero))
    return pb.build()


def test_come_from_forward():
    m = Machine(entry_loop(), **SMALL)
    m.reset({"x": 3})
    e = trap_of(m, ComeFromError)
    assert (e.pc, e.step, e.instruction) == (1, 1, "join back if x != zero")
    check_location(e)
    assert e.values == {"x": 3, "zero": 0}
    assert "top (pc 1)" in e.detail and "`x != zero` is true" in e.detail
    assert "fell through from the entry of main (pc 0)" in e.detail
    assert "arrive by the jump from the jmp at back (pc 3)" in e.detail
    back_to_start(m, {"x": 3})


def test_come_from_backward():
    """From an end state no forward run produces (x < 10 yet y == 100), going backward the
    first fork finds control came the other way."""
    m = Machine(if_program(), **SMALL)
    m.reset_end({"x": 3, "y": 100})
    e = trap_of(m, ComeFromError, direction=-1)
    assert (e.pc, e.step, e.direction) == (1, -4, -1)
    check_location(e)
    assert e.instruction == "jmp then if x < ten" and "running backward" in str(e)
    assert e.values == {"x": 3, "ten": 10}
    assert "fell through from pc 2" in e.detail and "jump from the join at then (pc 4)" in e.detail
    assert m.run(direction=+1) == "end" and m.t == 0                # back where it started
    assert (m.read("x"), m.read("y")) == (3, 100)


def test_unconditional_join_reached_by_falling_through():
    pb = ProgramBuilder()
    x = pb.input("x", INT)
    ten = pb.const("ten", INT, 10)
    f = pb.func("main")
    f.op("inc.i", x)
    f.join("top", came_from="back")                 # `always`: only a jump may arrive here
    f.op("inc.i", x)
    f.jmp("back", to="top", cond=("<", INT, x, ten))
    m = Machine(pb.build(), **SMALL)
    m.reset({"x": 0})
    e = trap_of(m, ComeFromError)
    assert e.pc == 2 and e.step == 2 and e.instruction == "join back"
    assert "must always arrive by the jump" in e.detail and "fell through from pc 1" in e.detail
    assert e.values == {}
    back_to_start(m, {"x": 0})


# ---- ancillas and the value stack ----------------------------------------------------------

def leak_program():
    pb = ProgramBuilder()
    x = pb.input("x", FIXED)
    leak = pb.func("leak")
    p = leak.param("p", FIXED, written=False)
    t = leak.local("t", FIXED)
    leak.op("add.x", t, p)
    pb.func("main").call("leak", x)
    return pb.build()


def test_ancilla_error_at_return_names_the_local():
    m = Machine(leak_program(), **SMALL)
    m.reset({"x": 2.5})
    e = trap_of(m, AncillaError)
    assert e.instruction == "end leak" and e.step == 3 and e.values == {"t": 2.5}
    assert "leak returns with local t = 2.5" in e.detail
    check_location(e)
    back_to_start(m, {"x": 2.5})
    assert not m.mem[m.program.n_static:].any()


def test_ancilla_error_at_return_backward():
    """uncall leak: the local is computed going backward, so `begin` finds it nonzero."""
    m = Machine(leak_program(), **SMALL)
    m.reset_end({"x": 1.0})
    e = trap_of(m, AncillaError, direction=-1)
    assert e.instruction == "begin leak" and e.values == {"t": -1.0}
    assert "running backward" in e.detail
    assert m.run(direction=+1) == "end" and m.read("x") == 1.0


def stack_program():
    pb = ProgramBuilder()
    a = pb.input("a", INT)
    b = pb.input("b", INT)
    c = pb.input("c", INT)
    f = pb.func("main")
    f.op("alloc", c)
    f.op("push", a)
    f.op("pop", b)
    f.op("pop", c)
    return pb.build()


def test_alloc_of_nonzero_cell():
    m = Machine(stack_program(), **SMALL)
    m.reset({"c": 4})
    e = trap_of(m, AncillaError)
    assert e.instruction == "alloc c" and e.values == {"c": 4} and "not zero" in e.detail
    back_to_start(m, {"a": 0, "b": 0, "c": 4})


def test_pop_into_nonzero_cell():
    m = Machine(stack_program(), **SMALL)
    m.reset({"a": 7, "b": -3})
    e = trap_of(m, PopError)
    assert e.instruction == "pop b" and e.step == 3
    assert e.values == {"b": -3, "top of stack": 7}
    check_location(e)
    back_to_start(m, {"a": 7, "b": -3, "c": 0})


def test_pop_from_empty_stack():
    m = Machine(stack_program(), **SMALL)
    m.reset({"a": 7})
    e = trap_of(m, StackUnderflow)
    assert e.instruction == "pop c" and "empty" in e.detail
    back_to_start(m, {"a": 7, "b": 0, "c": 0})


def test_value_stack_overflow():
    pb = ProgramBuilder()
    xs = [pb.input(f"x{i}", INT) for i in range(3)]
    f = pb.func("main")
    for x in xs:
        f.op("push", x)
    m = Machine(pb.build(), stack_cells=2, frame_cells=4)
    m.reset({"x0": 1, "x1": 2, "x2": 3})
    e = trap_of(m, StackOverflow)
    assert e.instruction == "push x2" and "value stack is full (2 cells)" in e.detail
    back_to_start(m, {"x0": 1, "x1": 2, "x2": 3})


def down_program(frame: int = 1):
    pb = ProgramBuilder()
    n = pb.input("n", INT)
    d = pb.func("down")
    p = d.param("n", INT)
    d.local("pad", INT, length=frame)
    d.op("dec.i", p)
    d.call("down", p)
    pb.func("main").call("down", n)
    return pb.build()


def test_call_depth_overflow():
    m = Machine(down_program(), stack_cells=4, frame_cells=1000, max_depth=10)
    m.reset({"n": 50})
    e = trap_of(m, StackOverflow)
    assert e.instruction == "call down(n)" and "call depth limit of 10" in e.detail
    assert e.values["depth"] == 10
    back_to_start(m, {"n": 50})


def test_frame_memory_overflow():
    m = Machine(down_program(frame=8), stack_cells=4, frame_cells=30, max_depth=100)
    m.reset({"n": 50})
    e = trap_of(m, StackOverflow)
    assert "frame memory is full (30 cells, 24 in use)" in e.detail
    assert m.stats["peak_frame_cells"] == 24
    back_to_start(m, {"n": 50})


# ---- aliasing and constants -----------------------------------------------------------------

def test_alias_of_target_and_source():
    pb = ProgramBuilder()
    a = pb.inout("a", INT, length=3)
    i = pb.input("i", INT)
    j = pb.input("j", INT)
    f = pb.func("main")
    f.op("add.i", pb.x(a, 3, i), pb.x(a, 3, j))
    m = Machine(pb.build(), **SMALL)
    m.reset({"a": [1, 2, 3], "i": 0, "j": 2})
    m.run()
    assert list(m.read("a")) == [4, 2, 3]
    m.reset({"a": [1, 2, 3], "i": 1, "j": 1})
    e = trap_of(m, AliasError)
    assert e.instruction == "add.i a[i], a[j]" and "a[i] and a[j] are the same cell" in e.detail
    assert e.values == {"a[i]": 2, "a[j]": 2}
    back_to_start(m, {"a": [1, 2, 3], "i": 1, "j": 1})


def test_alias_of_call_arguments():
    pb = ProgramBuilder()
    x = pb.inout("x", INT)
    y = pb.inout("y", INT)
    g = pb.func("g")
    p = g.param("p", INT, written=True)
    q = g.param("q", INT, written=False)
    g.op("add.i", p, q)
    main = pb.func("main")
    main.call("g", x, y)
    main.call("g", x, x)
    m = Machine(pb.build(), **SMALL)
    m.reset({"x": 1, "y": 5})
    e = trap_of(m, AliasError)
    assert e.instruction == "call g(x, x)" and e.step == 4
    assert "arguments 0 (x) and 1 (x) of g overlap" in e.detail and "g writes p" in e.detail
    back_to_start(m, {"x": 1, "y": 5})


def test_overlapping_array_arguments():
    pb = ProgramBuilder()
    a = pb.inout("a", INT, length=4)
    g = pb.func("g")
    g.param("u", INT, written=True, array=True)
    g.param("v", INT, written=False, array=True)
    main = pb.func("main")
    main.call("g", Arr(a, 2), Arr(a + (2 << 3), 2))      # a[0:2], a[2:4]: fine
    main.call("g", Arr(a, 3), Arr(a + (2 << 3), 2))      # a[0:3], a[2:4]: overlap at a[2]
    m = Machine(pb.build(), **SMALL)
    m.reset({"a": [1, 2, 3, 4]})
    e = trap_of(m, AliasError)
    assert "arguments 0 (a) and 1 (a[2]) of g overlap at a[2]" in e.detail
    back_to_start(m, {"a": [1, 2, 3, 4]})


def test_constant_bound_to_written_parameter():
    pb = ProgramBuilder()
    x = pb.input("x", INT)
    k = pb.const("k", INT, 5)
    g = pb.func("g")
    p = g.param("p", INT, written=True)
    g.op("inc.i", p)
    pb.func("main").op("inc.i", x).call("g", k)
    m = Machine(pb.build(), **SMALL)
    m.reset({"x": 1})
    e = trap_of(m, ReadOnlyError)
    assert e.instruction == "call g(k)" and e.step == 2
    assert "constant k is bound to parameter p of g, which g writes" in e.detail
    assert e.values == {"p": "k"}
    check_location(e)
    assert m.read("k") == 5
    back_to_start(m, {"x": 1})


# ---- bounds ---------------------------------------------------------------------------------

@pytest.mark.parametrize("i", [3, 4, -1, -(1 << 63)])
def test_index_out_of_bounds(i):
    pb = ProgramBuilder()
    a = pb.input("a", INT, length=3)
    idx = pb.input("i", INT)
    y = pb.output("y", INT)
    f = pb.func("main")
    f.op("inc.i", y)
    f.op("add.i", y, pb.x(a, 3, idx))
    m = Machine(pb.build(), **SMALL)
    m.reset({"a": [1, 2, 3], "i": i})
    e = trap_of(m, BoundsError)
    assert e.instruction == "add.i y, a[i]" and e.step == 2
    assert f"index i = {i} is outside a[0..3)" in e.detail
    assert e.values == {"i": i, "len(a)": 3}
    check_location(e)
    back_to_start(m, {"a": [1, 2, 3], "i": i})


def test_index_out_of_bounds_in_call_argument():
    pb = ProgramBuilder()
    a = pb.input("a", INT, length=2)
    i = pb.input("i", INT)
    g = pb.func("g")
    g.param("p", INT, written=False)
    pb.func("main").call("g", pb.x(a, 2, i))
    m = Machine(pb.build(), **SMALL)
    m.reset({"a": [1, 2], "i": 2})
    e = trap_of(m, BoundsError)
    assert "(argument 0 of g)" in e.detail
    back_to_start(m, {"a": [1, 2], "i": 2})


# ---- arithmetic -----------------------------------------------------------------------------

def arith_program(op: str, t, src_t=None):
    pb = ProgramBuilder()
    y = pb.output("y", t)
    a = pb.input("a", src_t or t)
    words = [y, a]
    if len(OP_BY_NAME[op].operands) >= 3 and OP_BY_NAME[op].operands[2] == "a":
        words.append(pb.input("b", t))
    return pb, words


def test_division_by_zero():
    pb, (y, a, b) = arith_program("adddiv.i", INT)
    pb.func("main").op("adddiv.i", y, a, b)
    m = Machine(pb.build(), **SMALL)
    m.reset({"a": 7, "b": 0})
    e = trap_of(m, DivisionByZero)
    assert e.instruction == "adddiv.i y, a, b" and "division by zero" in e.detail
    assert e.values == {"y": 0, "a": 7, "b": 0}
    check_location(e)
    back_to_start(m, {"a": 7, "b": 0})


def test_division_by_zero_backward_names_the_inverse():
    pb, (y, a, b) = arith_program("adddiv.x", FIXED)
    pb.func("main").op("adddiv.x", y, a, b)
    m = Machine(pb.build(), **SMALL)
    m.reset_end({"y": 1.0, "a": 1.0})
    e = trap_of(m, DivisionByZero, direction=-1)
    assert "run backward as subdiv.x" in e.detail
    assert m.run(direction=1) == "end" and m.read("y") == 1.0


def test_domain_error():
    pb, (y, a) = arith_program("addfn.x", FIXED)
    pb.func("main").op("addfn.x", y, a, "log")
    m = Machine(pb.build(), **SMALL)
    m.reset({"a": -2.0})
    e = trap_of(m, DomainError)
    assert e.instruction == "addfn.x y, a, log" and "log" in e.detail
    assert e.values == {"y": 0.0, "a": -2.0}
    back_to_start(m, {"a": -2.0})


def test_lns_multiply_by_zero_is_a_domain_error():
    from isa.types import LNS
    pb = ProgramBuilder()
    y = pb.inout("y", LNS)
    a = pb.input("a", LNS)
    pb.func("main").op("mul.l", y, a)
    m = Machine(pb.build(), **SMALL)
    m.reset({"y": 4.0, "a": 0.0})
    e = trap_of(m, DomainError)
    assert e.values == {"y": 4.0, "a": 0.0}
    back_to_start(m, {"y": 4.0, "a": 0.0})


def test_range_error():
    pb, (y, a) = arith_program("cvt.if", INT, FLOAT)
    pb.func("main").op("cvt.if", y, a)
    m = Machine(pb.build(), **SMALL)
    m.reset({"a": 1e300})
    e = trap_of(m, RangeError)
    assert e.instruction == "cvt.if y, a" and "does not fit" in e.detail
    assert e.values == {"y": 0, "a": 1e300}
    back_to_start(m, {"a": 1e300})


def test_float_overflow_is_a_range_error():
    pb, (y, a) = arith_program("add.f", FLOAT)
    f = pb.func("main")
    f.op("add.f", y, a).op("add.f", y, a)
    m = Machine(pb.build(), **SMALL)
    m.reset({"a": 1e308})
    e = trap_of(m, RangeError)
    assert e.step == 2 and e.values == {"y": 1e308, "a": 1e308} and "not finite" in e.detail
    back_to_start(m, {"a": 1e308})


# ---- assertions, limits, bytecode -----------------------------------------------------------

def test_assertion():
    pb = ProgramBuilder()
    x = pb.input("x", INT)
    ten = pb.const("ten", INT, 10)
    pb.func("main").op("inc.i", x).assert_(("<", INT, x, ten))
    m = Machine(pb.build(), **SMALL)
    m.reset({"x": 9})
    e = trap_of(m, AssertionTrap)
    assert e.instruction == "assert x < ten" and "assertion x < ten is false" in e.detail
    assert e.values == {"x": 10, "ten": 10}
    check_location(e)
    back_to_start(m, {"x": 9})


def test_step_limit():
    m = Machine(entry_loop(), **SMALL)
    m.reset({"x": 0})                              # counts down through the whole int range
    with pytest.raises(StepLimit) as info:
        m.run(max_steps=1000)
    tested.add(StepLimit)
    e = info.value
    assert e.step == 1000 == m.t and e.pc == m.pc and "1000 instructions" in e.detail
    assert e.instruction and e.location == ("test.rasm", e.pc + 1, 1)
    back_to_start(m, {"x": 0})


def test_bytecode_trap():
    """Reaching `begin` running forward is impossible in a verified program: patch the
    machine's own code copy behind the validator's back to get there."""
    pb = ProgramBuilder()
    x = pb.input("x", INT)
    pb.func("main").op("inc.i", x).op("nop").op("inc.i", x)
    m = Machine(pb.build(), **SMALL)
    code = m.core.code
    code.setflags(write=True)
    code[2] = [OP_BY_NAME["begin"].code, 0, 0, 0, 0, 0]
    m.reset({"x": 1})
    e = trap_of(m, BytecodeTrap)
    assert e.pc == 2 and "begin reached running forward" in e.detail
    back_to_start(m, {"x": 1})


def taken_jump_to_wrong_join():
    """jmp L if x == 0 lands on a join that claims the jump happens iff x != 0."""
    pb = ProgramBuilder()
    x = pb.input("x", INT)
    zero = pb.const("zero", INT, 0)
    f = pb.func("main")
    f.jmp("fork", to="L", cond=("==", INT, x, zero))
    f.op("nop")
    f.join("L", came_from="fork", cond=("!=", INT, x, zero))
    return pb.build()


@pytest.mark.parametrize("how", ["run", "step"])
def test_come_from_after_a_taken_jump(how):
    """The machine checks a join reached by a taken jump in the same dispatch as the jump
    (when the budget allows); the trap must be the same as when stepping one at a time."""
    m = Machine(taken_jump_to_wrong_join(), **SMALL)
    m.reset({"x": 0})
    with pytest.raises(ComeFromError) as info:
        if how == "run":
            m.run()
        else:
            while True:
                m.step(1)
    e = info.value
    assert (e.pc, e.step, m.pc, m.t, m.came) == (3, 2, 3, 2, True)   # begin is pc 0, t counts entry
    assert "arrive" in e.detail or "came" in e.detail
    back_to_start(m, {"x": 0})


def test_nesting_error_changes_nothing():
    """A derivative statement whose parameter arrays differ in length (docs/ad.md)."""
    import assembler
    prog = assembler.assemble(
        "input x: float[3] = [1.0, 2.0, 3.0]\nglobal g: float[2]\n"
        "func f(out: float, x: float[]) {\n    out += x[0] * x[1]\n}\n"
        "func h(g: float[], x: float[]) {\n    g += grad f(x) wrt x\n}\n"
        "func main() {\n    call h(g, x)\n}\n", "test.rasm")
    m = Machine(prog)
    m.reset()
    e = trap_of(m, NestingError)
    assert "differ in length (2 and 3 cells)" in str(e)
    assert e.location == ("test.rasm", 7, 5)
    back_to_start(m, {"x": [1.0, 2.0, 3.0]})


def test_every_trap_class_is_tested():
    """Each class of rvm.errors.TRAPS is raised by this file's tests.  They gather what they
    raised in this process; when pytest -n ran some elsewhere, or this test first, it runs the
    file's tests here (about a second) before it checks."""
    if not set(TRAPS) <= tested:
        for name, fn in list(globals().items()):
            if name.startswith("test_") and name != "test_every_trap_class_is_tested" \
                    and callable(fn) and not inspect.signature(fn).parameters:
                fn()
        test_index_out_of_bounds(3)
        test_come_from_after_a_taken_jump("run")
    assert set(TRAPS) <= tested, f"untested traps: {set(TRAPS) - tested}"


def test_a_float_ancilla_residue_says_why_and_what_to_do():
    import rvm

    prog = rvm.assemble("inout x: float = 0.1\ninout y: float = 0.2\noutput z: float\n"
                        "func main() {\n    local t: float\n    t += x\n    t += y\n"
                        "    t -= x\n    t -= y\n    z += x\n}\n")
    m = rvm.Machine(prog)
    m.reset()
    with pytest.raises(AncillaError) as e:
        m.run()
    assert e.value.values == {"t": 2.7755575615628914e-17}
    assert "rounding residue" in e.value.detail and "same instruction" in e.value.detail
    int_prog = rvm.assemble("inout x: int = 1\nfunc main() {\n    local t: int\n"
                            "    t += x\n}\n")
    m = rvm.Machine(int_prog)
    m.reset()
    with pytest.raises(AncillaError) as e:
        m.run()
    assert "rounding" not in e.value.detail
