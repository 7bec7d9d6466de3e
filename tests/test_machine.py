"""The machine on whole programs: loops, if/else, calls and recursion, uncall, the value stack,
ancillas, indexed operands, array parameters, direction flips, step counting and the API."""
from __future__ import annotations

import math

import numpy as np
import pytest
from builder import Arr, ProgramBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.arith import f2w, fixed_from_real
from isa.types import FIXED, FLOAT, INT, LNS
from isa.verify import check
from rvm.errors import InvalidBytecode, RVMError, StepLimit
from rvm.machine import Machine, TraceEvent, UnknownName, format_instruction
from rvm.values import ValueEncodingError

SMALL = dict(stack_cells=64, frame_cells=4096, max_depth=256)


# ---- programs ----------------------------------------------------------------------------------

def loop_program():
    """x += one, n times: join / add / inc / jmp, then the counter is uncomputed."""
    pb = ProgramBuilder()
    n = pb.input("n", INT, default=5)
    x = pb.inout("x", INT)
    zero = pb.const("zero", INT, 0)
    one = pb.const("one", INT, 1)
    f = pb.func("main")
    i = f.local("i", INT)
    f.join("top", came_from="back", cond=("!=", INT, i, zero))
    f.op("add.i", x, one)
    f.op("inc.i", i)
    f.jmp("back", to="top", cond=("<", INT, i, n))
    f.op("sub.i", i, n)
    return pb.build()


def if_program():
    """if x < 10 { y += 1 } else { y += 100 } fi y >= 100"""
    pb = ProgramBuilder()
    x = pb.input("x", INT)
    y = pb.output("y", INT)
    ten = pb.const("ten", INT, 10)
    hundred = pb.const("hundred", INT, 100)
    f = pb.func("main")
    f.jmp("fork", to="then", cond=("<", INT, x, ten))
    f.op("addi.i", y, 100)
    f.jmp("skip", to="fi")
    f.join("then", came_from="fork")
    f.op("addi.i", y, 1)
    f.join("fi", came_from="skip", cond=(">=", INT, y, hundred))
    return pb.build()


def rfib_program(uncall_main: bool = False):
    """out += fib(n) by double recursion with compute/uncompute of the locals n1, n2."""
    pb = ProgramBuilder()
    n = pb.input("n", INT, default=10)
    out = pb.inout("out", INT)
    two = pb.const("two", INT, 2)
    f = pb.func("rfib")
    p_out = f.param("out", INT, written=True)
    p_n = f.param("n", INT, written=False)
    n1, n2 = f.local("n1", INT), f.local("n2", INT)
    f.op("add.i", n1, p_n).op("dec.i", n1).op("add.i", n2, p_n).op("subi.i", n2, 2)
    f.jmp("f1", to="then", cond=("<=", INT, p_n, two))
    f.call("rfib", p_out, n1)
    f.call("rfib", p_out, n2)
    f.jmp("f2", to="fi")
    f.join("then", came_from="f1")
    f.op("inc.i", p_out)
    f.join("fi", came_from="f2", cond=(">", INT, p_n, two))
    f.op("addi.i", n2, 2).op("sub.i", n2, p_n).op("inc.i", n1).op("sub.i", n1, p_n)
    m = pb.func("main")
    m.call("rfib", out, n, uncall=uncall_main)
    return pb.build()


def array_program():
    """total += sum(xs) through a function taking an array parameter and looping with len()."""
    pb = ProgramBuilder()
    xs = pb.input("xs", INT, length=4, default=[1, 2, 3, 4])
    total = pb.output("total", INT)
    zero = pb.const("zero", INT, 0)
    s = pb.func("sum")
    p_t = s.param("t", INT, written=True)
    p_a = s.param("a", INT, written=False, array=True)
    i = s.local("i", INT)
    elem = pb.x(p_a, -1, i)
    s.join("top", came_from="back", cond=("!=", INT, i, zero))
    s.op("add.i", p_t, elem)
    s.op("inc.i", i)
    s.jmp("back", to="top", cond=("<", INT, i, s.length(p_a)))
    s.op("sub.i", i, s.length(p_a))
    main = pb.func("main")
    main.call("sum", total, Arr(xs, 4))
    return pb.build()


def stack_program():
    """Swap a and b through the value stack, using a local ancilla with alloc/free."""
    pb = ProgramBuilder()
    a = pb.inout("a", FIXED)
    b = pb.inout("b", FIXED)
    f = pb.func("main")
    t = f.local("t", FIXED)
    f.op("alloc", t)
    f.op("push", a).op("push", b).op("pop", a).op("pop", b)
    f.op("free", t)
    return pb.build()


PROGRAMS = {"loop": (loop_program, {"n": 7}), "if_then": (if_program, {"x": 3}),
            "if_else": (if_program, {"x": 30}), "rfib": (rfib_program, {"n": 7}),
            "array": (array_program, {"xs": [5, -2, 9, 1]}),
            "stack": (stack_program, {"a": 1.5, "b": -0.25})}


def snapshot(m: Machine) -> tuple:
    return (m.mem.copy(), m.stack().tolist(), m.pc, m.came, m.t, m.depth, m.status,
            m.direction, [tuple(sorted(f.items())) for f in m.frames()])


def same(s1: tuple, s2: tuple) -> bool:
    return np.array_equal(s1[0], s2[0]) and s1[1:] == s2[1:]


# ---- results and reversibility -----------------------------------------------------------------

def test_loop_result_step_count_and_reverse():
    m = Machine(loop_program(), **SMALL)
    m.reset({"n": 1000})
    start = m.mem.copy()
    assert m.run() == "end"
    assert m.read("x") == 1000 and m.read("n") == 1000
    # enter main, 4 per iteration, the uncompute, the return
    assert m.t == 4 * 1000 + 3 == m.stats["steps"]
    assert m.run(direction=-1) == "start" and m.t == 0
    np.testing.assert_array_equal(m.mem, start)


@pytest.mark.parametrize("x, y", [(3, 1), (9, 1), (10, 100), (-5, 1), (1 << 40, 100)])
def test_if_else_both_branches_and_back(x, y):
    m = Machine(if_program(), **SMALL)
    m.reset({"x": x})
    assert m.run() == "end"
    assert m.outputs() == {"y": y}
    assert m.run(direction=-1) == "start"
    assert (m.read("x"), m.read("y")) == (x, 0)


@pytest.mark.parametrize("n, fib", [(1, 1), (2, 1), (3, 2), (7, 13), (10, 55), (15, 610)])
def test_recursive_calls(n, fib):
    m = Machine(rfib_program(), **SMALL)
    m.reset({"n": n})
    assert m.run() == "end"
    assert m.read("out") == fib
    assert m.stats["peak_depth"] == max(n, 2)          # main, rfib(n), ..., rfib(2)
    assert m.stats["peak_frame_cells"] == 2 * (m.stats["peak_depth"] - 1)
    assert m.run(direction=-1) == "start"
    assert (m.read("n"), m.read("out")) == (n, 0)


def test_uncall_runs_the_callee_backward():
    m = Machine(rfib_program(uncall_main=True), **SMALL)
    m.reset({"n": 10, "out": 100})
    assert m.run() == "end"
    assert m.read("out") == 100 - 55
    assert m.run(direction=-1) == "start" and m.read("out") == 100


def test_end_state_runs_backward_to_the_inputs():
    m = Machine(rfib_program(), **SMALL)
    m.reset_end({"n": 12, "out": 144})
    assert m.status == "end" and m.direction == -1
    assert m.run(direction=-1) == "start"
    assert m.inputs() == {"n": 12, "out": 0}
    assert m.t == -m.stats["steps"]


def test_array_parameter_indexed_operands_and_len():
    m = Machine(array_program(), **SMALL)
    m.reset()
    assert m.run() == "end" and m.read("total") == 10     # the default input
    m.reset({"xs": np.array([5, -2, 9, 1])})
    m.run()
    assert m.outputs() == {"total": 13}
    m.run(direction=-1)
    assert list(m.read("xs")) == [5, -2, 9, 1] and m.read("total") == 0


def test_local_arrays_and_static_global_index():
    """X operands over a local array (L base) and a global array (G base)."""
    pb = ProgramBuilder()
    g = pb.inout("g", INT, length=3)
    k = pb.input("k", INT)
    f = pb.func("main")
    loc = f.local("loc", INT, length=3)
    f.op("add.i", pb.x(loc, 3, k), pb.x(g, 3, k))     # loc[k] += g[k]
    f.op("swap.i", pb.x(g, 3, k), pb.x(loc, 3, k))    # g[k] <-> loc[k]
    f.op("sub.i", pb.x(loc, 3, k), pb.x(g, 3, k))     # loc[k] -= g[k]: zero again
    m = Machine(pb.build(), **SMALL)
    m.reset({"g": [10, 20, 30], "k": 1})
    m.run()
    assert list(m.read("g")) == [10, 20, 30]
    assert m.mem[m.program.n_static:m.program.n_static + 3].tolist() == [0, 0, 0]


def test_value_stack_and_ancillas():
    m = Machine(stack_program(), **SMALL)
    m.reset({"a": 1.5, "b": -0.25})
    m.run()
    assert (m.read("a"), m.read("b")) == (-0.25, 1.5)
    assert m.stats["peak_stack"] == 2 and len(m.stack()) == 0
    m.run(direction=-1)
    assert (m.read("a"), m.read("b")) == (1.5, -0.25)


# ---- direction flips ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", PROGRAMS)
def test_forward_k_backward_k_returns_to_the_start_state(name):
    build, inputs = PROGRAMS[name]
    m = Machine(build(), **SMALL)
    m.reset(inputs)
    start = snapshot(m)
    total = m.step(10**9)
    assert m.status == "end"
    for k in range(total + 1):
        m.reset(inputs)
        assert m.step(k) == k
        assert m.step(k, direction=-1) == k
        m.step(0, direction=+1)
        assert same(snapshot(m), start), f"after {k} steps forward and back"


@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_flip_anywhere_then_continue(name, data):
    """From any t: go back some steps, forward again: the same state as never turning."""
    build, inputs = PROGRAMS[name]
    m = Machine(build(), **SMALL)
    m.reset(inputs)
    total = m.step(10**9)
    end = snapshot(m)
    a = data.draw(st.integers(0, total))
    b = data.draw(st.integers(0, a))
    m.reset(inputs)
    m.step(a)
    here = snapshot(m)
    assert m.step(b, direction=-1) == b
    assert m.t == a - b
    assert m.step(b, direction=+1) == b
    assert same(snapshot(m), here)
    assert m.step(10**9) == total - a
    assert same(snapshot(m), end)


def test_flip_inside_recursion_reports_frames():
    m = Machine(rfib_program(), **SMALL)
    m.reset({"n": 5})
    m.step(12)
    frames = m.frames()
    assert frames[0]["function"] == "main" and all(f["function"] == "rfib" for f in frames[1:])
    assert frames[-1]["pc"] == m.pc and m.depth == len(frames) >= 2
    assert frames[1]["ret_pc"] == m.program.functions[1].begin + 1   # main's call
    m.run(direction=-1)
    assert m.status == "start" and m.t == 0 and m.read("out") == 0


# ---- step counting, limits, boundaries ---------------------------------------------------------

def test_step_stops_at_the_boundary_and_counts():
    m = Machine(if_program(), **SMALL)
    m.reset({"x": 1})
    assert m.status == "start" and m.t == 0
    assert m.step() == 1 and m.status == "running" and m.pc == m.program.functions[0].begin + 1
    n = m.step(1000)
    assert m.status == "end" and m.t == n + 1 and m.stats["steps"] == n + 1
    assert m.step(5) == 0 and m.t == n + 1
    assert m.step(1000, direction=-1) == n + 1 and m.status == "start" and m.t == 0
    assert m.step(3, direction=-1) == 0


def test_step_limit_can_be_continued():
    m = Machine(loop_program(), **SMALL)
    m.reset({"n": 100})
    with pytest.raises(StepLimit) as e:
        m.run(max_steps=50)
    assert e.value.step == 50 == m.t and e.value.pc == m.pc
    assert "50" in str(e.value)
    assert m.run() == "end" and m.read("x") == 100


def test_run_in_the_direction_of_a_boundary_it_is_at():
    m = Machine(loop_program(), **SMALL)
    m.reset()
    assert m.run(direction=-1) == "start" and m.t == 0
    m.reset_end({"n": 3, "x": 3})
    assert m.run(direction=+1) == "end" and m.t == 0
    assert m.run(direction=-1) == "start" and m.read("x") == 0


def test_direction_argument_is_checked():
    m = Machine(loop_program(), **SMALL)
    m.reset()
    with pytest.raises(ValueError):
        m.run(direction=0)


# ---- values in and out -------------------------------------------------------------------------

def typed_program():
    pb = ProgramBuilder(fraction_bits=16)
    pb.input("i", INT, default=7)
    pb.input("x", FIXED)
    pb.input("l", LNS)
    pb.input("f", FLOAT)
    pb.input("v", FIXED, length=3)
    pb.output("o", FLOAT, length=2)
    pb.const("c", INT, 42)
    pb.func("main")
    return pb.build()


def test_reset_encodes_values_of_every_type():
    m = Machine(typed_program(), **SMALL)
    m.reset({"x": 3, "l": -0.5, "f": 2.5, "v": [0.5, 1, -2.25]})
    assert m.read("i") == 7                              # default
    assert m.read_raw("x") == 3 << 16                    # int -> fixed is exact
    assert m.read("l") == -0.5 and m.read("f") == 2.5
    assert m.read("v").tolist() == [0.5, 1.0, -2.25] and m.read("v").dtype == np.float64
    assert m.read("c") == 42 and m.read("o").tolist() == [0.0, 0.0]
    m.reset({"x": 1 / 3})
    assert m.read_raw("x") == fixed_from_real(1 / 3, 16)  # floats round half to even
    m.reset({"x": 0.5 / (1 << 16) * 3})                    # 1.5 ulp: ties to even 2
    assert m.read_raw("x") == 2
    m.write("f", np.float64(-1.25))
    assert m.read_raw("f") == f2w(-1.25)
    assert set(m.inputs()) == {"i", "x", "l", "f", "v"} and set(m.outputs()) == {"o"}


@pytest.mark.parametrize("values, text", [
    ({"nope": 1}, "nope"),
    ({"i": 1 << 70}, "i"),
    ({"i": 2.5}, "i"),
    ({"x": 1 << 50}, "x"),
    ({"x": 1e300}, "x"),
    ({"v": [1, 2]}, "v"),
    ({"v": 3}, "v"),
    ({"i": [1, 2]}, "i"),
    ({"l": math.inf}, "l"),
])
def test_bad_values_are_clear_errors(values, text):
    m = Machine(typed_program(), **SMALL)
    with pytest.raises((UnknownName, ValueEncodingError)) as e:
        m.reset(values)
    assert text in str(e.value)
    assert isinstance(e.value, RVMError)


def test_unknown_name_is_a_key_error_and_constants_are_read_only():
    m = Machine(typed_program(), **SMALL)
    with pytest.raises(KeyError):
        m.read("missing")
    with pytest.raises(RVMError):
        m.write("c", 1)


def test_trace_reports_to_the_handler_and_changes_nothing(capsys):
    pb = ProgramBuilder()
    x = pb.inout("x", FIXED)
    k = pb.inout("k", INT)
    f = pb.func("main")
    f.op("inc.i", k)
    f.trace("values", x, k)
    f.op("inc.i", k)
    events: list[TraceEvent] = []
    m = Machine(pb.build(), trace=events.append, **SMALL)
    m.reset({"x": 2.5, "k": 1})
    assert m.run() == "end"
    assert [(e.message, e.values, e.direction) for e in events] == [("values", {"x": 2.5, "k": 2}, 1)]
    assert m.t == 5
    m.run(direction=-1)
    assert events[-1].direction == -1 and events[-1].values == {"x": 2.5, "k": 2}
    assert m.t == 0 and m.read("k") == 1
    # stepping onto a trace: it runs as one step
    m.reset({"k": 1})
    assert m.step(2) == 2 and m.step(1) == 1 and len(events) == 3
    # the default handler prints one line on stderr
    m2 = Machine(pb.build(), **SMALL)
    m2.reset({"x": 2.5, "k": 1})
    m2.run()
    assert capsys.readouterr().err == "trace: values x=2.5 k=2\n"


def test_format_instruction_names_cells():
    p = rfib_program()
    text = [format_instruction(p, pc) for pc in range(len(p.code))]
    assert "add.i n1, n" in text
    assert "jmp then if n <= two" in text
    assert "call rfib(out, n1)" in text
    assert "join f2 if n > two" in text            # a join names its jmp
    assert "call rfib(out, n)" in text
    a = array_program()
    assert "add.i t, a[i]" in [format_instruction(a, pc) for pc in range(len(a.code))]


# ---- programs the machine refuses --------------------------------------------------------------

def _broken(mutate) -> None:
    p = rfib_program()
    mutate(p)
    Machine(p, **SMALL)


@pytest.mark.parametrize("mutate, text", [
    (lambda p: p.code.__setitem__((2, 0), 999), "opcode"),
    (lambda p: p.code.__setitem__((2, 1), (7 << 3) | 1),
     "L offset 7 is outside the frame of 'rfib'"),
    (lambda p: p.code.__setitem__((2, 1), (5 << 3) | 2), "parameter"),           # P beyond params
    (lambda p: p.code.__setitem__((1, 2), (99 << 3) | 0), "address"),            # G beyond static
    (lambda p: p.code.__setitem__((2, 1), (2 << 3) | 0), "writes constant 'two'"),
    (lambda p: p.code.__setitem__((2, 1), (1 << 3) | 2), "not declared written"),
    (lambda p: p.code.__setitem__((2, 1), (0 << 3) | 4), "length"),              # write an N
    (lambda p: p.code.__setitem__((2, 1), (3 << 3) | 3), "xtab"),
    (lambda p: p.code.__setitem__((2, 1), 6), "mode"),
    (lambda p: p.code.__setitem__((5, 4), 30), "pc 30 is outside the code"),     # jmp elsewhere
    (lambda p: p.code.__setitem__((5, 4), 7), "not a join"),
    (lambda p: p.code.__setitem__((7, 1), 50), "callsite index 50 is out of range"),
    (lambda p: p.callsites[0].args.pop(), "arguments"),
    (lambda p: p.code.__setitem__((5, 1), 9), "condition"),
    (lambda p: setattr(p, "main", 7), "main 7 is not a function index"),
    (lambda p: p.code.__setitem__((0, 1), 1), "begin"),
])
def test_invalid_programs_are_rejected(mutate, text):
    """The machine refuses with the diagnostics of the one bytecode verifier (isa/verify.py),
    the same problems `rvm check`/`verify` and the .rbc loader report."""
    with pytest.raises(InvalidBytecode) as e:
        _broken(mutate)
    assert text in str(e.value)
    p = rfib_program()
    mutate(p)
    assert e.value.problems == check(p, machine=True)


# ---- no program that passes construction can crash the interpreter -----------------------------

WORDS = st.one_of(st.integers(-3, 40), st.integers(0, 12).map(lambda q: q << 3),
                  st.builds(lambda q, m: (q << 3) | m, st.integers(-2, 12), st.integers(0, 7)),
                  st.sampled_from([-(1 << 63), (1 << 63) - 1, 1 << 40, -1]))


@settings(max_examples=400, deadline=None)
@given(base=st.sampled_from(["rfib", "array", "loop", "stack"]),
       edits=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 5), WORDS), min_size=1,
                      max_size=4),
       arg_edit=st.none() | st.tuples(st.integers(0, 3), WORDS, st.integers(-3, 6)),
       x_edit=st.none() | st.tuples(WORDS, st.integers(-2, 6), WORDS))
def test_mutated_programs_never_crash(base, edits, arg_edit, x_edit):
    build, inputs = PROGRAMS[base if base != "rfib" else "rfib"]
    p = build()
    for row, col, w in edits:
        p.code[row % len(p.code), col] = w
    if arg_edit and p.callsites:
        k, w, length = arg_edit
        site = p.callsites[k % len(p.callsites)]
        if site.args:
            site.args[0].word, site.args[0].length = w, (None if length == -3 else length)
    if x_edit and p.xtab:
        p.xtab[0].base, p.xtab[0].length, p.xtab[0].index = x_edit
    try:
        m = Machine(p, stack_cells=8, frame_cells=64, max_depth=8)
    except InvalidBytecode:
        return
    for start in (m.reset, m.reset_end):
        start()
        for d in (1, -1, 1):
            try:
                m.run(direction=d, max_steps=500)
            except RVMError:
                pass


def test_fixed_length_array_parameter():
    """`v: int[4]` takes arrays of exactly 4 cells: checked by the assembler where it can see
    the argument, at the call otherwise; the length survives .rbc and disassembly."""
    import rvm
    from assembler import disassemble, rbc
    from rvm.errors import BoundsError

    src = """
inout a: int[{n}]
inout s: int
func sum4(s: int, v: int[4]) {{
    for i in 0..4 {{
        s += v[i]
    }}
}}
func pass(s: int, v: int[]) {{
    call sum4(s, v)
}}
func main() {{
    call pass(s, a)
}}
"""
    ok = rvm.assemble(src.format(n=4))
    assert ok.function_named("sum4").params[1].length == 4
    assert ok.function_named("pass").params[1].length is None
    assert rbc.load_bytes(rbc.dump(ok)).function_named("sum4").params[1].length == 4
    assert "func sum4(s: int, v: int[4])" in disassemble(ok)
    assert rvm.run(ok, {"a": [1, 2, 3, 4]}).outputs["s"] == 10
    short = rvm.assemble(src.format(n=3))
    with pytest.raises(BoundsError) as e:
        rvm.run(short, {"a": [1, 2, 3]})
    assert "argument 1 of sum4 takes 4 cells of v, which has 3" in e.value.detail
