"""Every example in programs/ with its expected outputs, forward and backward."""
import math
from pathlib import Path

import numpy as np
import pytest

import rvm
from isa.arith import fixed_from_real, fixed_mul, wrap
from rvm.errors import ComeFromError

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"


def load(name):
    return rvm.assemble(PROGRAMS / name)


def roundtrip(prog, inputs):
    """Run forward, then backward from the final state; return (forward result, start words)."""
    m = rvm.Machine(prog)
    m.reset(inputs)
    start = m.mem.copy()
    m.run()
    fwd = m.outputs()
    m.run(direction=-1)
    assert m.status == "start"
    np.testing.assert_array_equal(m.mem[: len(start)], start)   # bit-for-bit
    return fwd


def test_every_program_has_a_test():
    """Every programs/**/*.rasm is named (by file name) in some test module."""
    tests = Path(__file__).resolve().parent
    text = "".join(t.read_text() for t in tests.glob("test_*.py"))
    untested = [p.relative_to(PROGRAMS).as_posix() for p in PROGRAMS.rglob("*.rasm")
                if p.name not in text and p.parent.name != "lib"]
    assert not untested, f"programs without a test naming them: {untested}"


@pytest.mark.parametrize("n, fib", [(1, 1), (2, 1), (3, 2), (10, 55), (15, 610)])
def test_rfib(n, fib):
    out = roundtrip(load("rfib.rasm"), {"n": n})
    assert out == {"n": n, "out": fib}


def test_rfib_reverse_run_from_outputs():
    res = rvm.run(load("rfib.rasm"), {"n": 10, "out": 55}, reverse=True)
    assert res.inputs == {"n": 10}
    assert res.machine.read("out") == 0


def test_rfibn_forward_and_backward():
    prog = load("rfibn.rasm")
    res = rvm.run(prog, {"n": 0, "z": 100})
    assert res.outputs == {"n": 12, "z": 100}
    back = rvm.run(prog, {"n": 12, "z": 100}, reverse=True)
    assert back.inputs == {"n": 0, "z": 100}


def test_rfibn_entry_assertion_traps():
    with pytest.raises(ComeFromError) as e:
        rvm.run(load("rfibn.rasm"), {"n": 5, "z": 100})
    assert "n" in str(e.value) and e.value.location[1] > 0


@pytest.mark.parametrize("x", [0, 1, 2, 3, 4, 15, 16, 17, 1000, 99_980_001])
def test_isqrt(x):
    out = roundtrip(load("isqrt.rasm"), {"x": x})
    assert out == {"x": x, "r": math.isqrt(x)}


def test_oscillator_bit_exact_against_reference():
    F = 32
    x, v, dt = fixed_from_real(1.0, F), 0, fixed_from_real(1 / 64, F)
    for _ in range(402):
        x = wrap(x + fixed_mul(v, dt, F))
        v = wrap(v - fixed_mul(x, dt, F))
    prog = load("oscillator.rasm")
    m = rvm.Machine(prog)
    m.reset({})
    m.run()
    assert int(m.read_raw("x")) == x and int(m.read_raw("v")) == v
    assert abs(m.read("x") - 1.0) < 0.01          # one period later, back near the start
    m.run(direction=-1)
    assert m.read("x") == 1.0 and m.read("v") == 0.0


def test_lns_product():
    out = roundtrip(load("lns_product.rasm"), {})
    assert out["p"] == pytest.approx(-6.0, rel=1e-8)
    assert out["pf"] == pytest.approx(-6.0, rel=1e-8)


def test_stack_reverse_uses_the_stack():
    prog = load("stack_reverse.rasm")
    out = roundtrip(prog, {})
    assert list(out["xs"]) == [5, 4, 3, 2, 1]
    res = rvm.run(prog)
    assert res.stats["peak_stack"] == 5


@pytest.mark.parametrize("x, y", [(2.0, 17.0), (0.5, 2.75), (-1.0, 2.0)])
def test_poly_uncall(x, y):
    res = rvm.run(load("poly_uncall.rasm"), {"x": x})
    assert res.outputs["y"] == pytest.approx(y, abs=1e-9)
    assert res.garbage == []


def test_bubble_sort_and_back():
    prog = load("bubble_sort.rasm")
    data = [5, 2, 9, 1, 5, 6]
    out = roundtrip(prog, {"xs": data})
    assert list(out["xs"]) == sorted(data)
    assert out["k"] == 25
    back = rvm.run(prog, out, reverse=True)
    assert list(back.inputs["xs"]) == data


def test_roundtrip_api():
    exact = rvm.roundtrip(load("oscillator.rasm"))
    assert exact.exact and exact.drift == {} and exact.steps > 402 * 4
    src = """
inout x: float = 0.1
inout y: float = 0.7
func main() {
    for i in 0..200 {
        x += y * y
        y -= sin(x)
    }
}
"""
    chaotic = rvm.roundtrip(rvm.assemble(src))
    assert not chaotic.exact and set(chaotic.drift) <= {"x", "y"} and chaotic.exact_broken == []
    assert all(v > 0 for v in chaotic.drift.values())


@pytest.mark.parametrize("header, start, count", [("for i in 0..i", 4, 4), ("for i in i..5", 2, 3)])
def test_for_counter_may_shadow_a_name_its_bounds_use(header, start, count):
    src = f"inout i: int = {start}\noutput out: int\nfunc main() {{\n    {header} {{\n" \
          "        inc out\n    }\n}\n"
    prog = rvm.assemble(src)
    assert roundtrip(prog, {}) == {"i": start, "out": count}
