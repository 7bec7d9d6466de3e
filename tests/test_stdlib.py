"""The standard library (assembler/std/*.rasm): every routine assembles, verifies and survives
a disassembly round trip; run on the machine it computes the documented value, and running
backward restores every cell bit for bit (so no ancilla is left behind in either direction)."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_disasm import roundtrip

from assembler import assemble
from isa.arith import fixed_div, fixed_mul, wrap
from rvm.machine import Machine
from rvm.verify import verify

STD = Path(__file__).resolve().parent.parent / "assembler" / "std"
LIBS = sorted(p.name for p in STD.glob("*.rasm"))


def test_the_three_libraries_exist():
    assert {"linalg.rasm", "stats.rasm", "intmath.rasm"} <= set(LIBS)


@pytest.mark.parametrize("lib", LIBS)
def test_library_assembles_verifies_and_roundtrips(lib):
    p = assemble(f'include "std/{lib}"\nfunc main() {{\n}}\n')
    verify(p)
    roundtrip(p)
    assert len(p.functions) > 1


@pytest.mark.parametrize("lib", LIBS)
def test_every_routine_says_what_it_computes(lib):
    lines = (STD / lib).read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("func "):
            assert lines[i - 1].startswith(";"), f"{lib}: {line} has no comment above it"


def run(src: str, inputs: dict | None = None, exact: bool = True) -> tuple[dict, Machine]:
    """Run forward, then backward; check the backward run restores the start bit for bit
    (float programs: the inputs bit for bit, the outputs to within rounding).  Returns the
    forward results (with their raw words under "raw")."""
    p = assemble(src)
    m = Machine(p)
    m.reset(inputs or {})
    start = {g.name: m.read_raw(g.name) for g in p.globals}
    assert m.run() == "end"
    out = {g.name: m.read(g.name) for g in p.globals}
    raw = {g.name: m.read_raw(g.name) for g in p.globals}
    assert m.run(direction=-1) == "start"
    for g in p.globals:
        if exact or g.is_input:
            np.testing.assert_array_equal(m.read_raw(g.name), start[g.name], err_msg=g.name)
        else:
            assert np.allclose(m.read(g.name), 0.0, atol=1e-12), g.name
    out["raw"] = raw
    return out, m


def program(lib: str, decls: str, call: str) -> str:
    return f'include "std/{lib}.rasm"\n{decls}\nfunc main() {{\n    {call}\n}}\n'


# ---- linalg -------------------------------------------------------------------------------

def test_dot_float():
    out, _ = run(program("linalg", "input x: float[3] = [1, 2, 3]\ninput y: float[3] = [4, 5, 6]\n"
                                   "output r: float", "call dot(r, x, y)"))
    assert out["r"] == 32.0


def test_dot_fixed_and_int():
    out, _ = run(program("linalg", "input x: fixed[2] = [0.5, 1.25]\ninput y: fixed[2] = [2, -4]\n"
                                   "output r: fixed", "call dot_x(r, x, y)"))
    assert out["r"] == -4.0
    out, _ = run(program("linalg", "input x: int[3] = [1, -2, 3]\ninput y: int[3] = [7, 8, 9]\n"
                                   "output r: int", "call dot_i(r, x, y)"))
    assert out["r"] == 7 - 16 + 27


def test_norm2_sum_and_axpy():
    src = program("linalg", "input x: float[3] = [1, -2, 0.5]\ninout y: float[3] = [1, 1, 1]\n"
                            "input a: float = 2\noutput n: float\noutput s: float",
                  "call norm2(n, x)\n    call sum(s, x)\n    call axpy(y, a, x)")
    out, _ = run(src)
    assert out["n"] == 5.25 and out["s"] == -0.5
    assert list(out["y"]) == [3.0, -3.0, 2.0]
    src = program("linalg", "input x: fixed[2] = [1.5, -0.25]\ninout y: fixed[2] = [1, 2]\n"
                            "input a: fixed = 4\noutput n: fixed\noutput s: fixed",
                  "call norm2_x(n, x)\n    call sum_x(s, x)\n    call axpy_x(y, a, x)")
    out, _ = run(src)
    assert out["n"] == 2.3125 and out["s"] == 1.25 and list(out["y"]) == [7.0, 1.0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-(1 << 40), 1 << 40), st.integers(-(1 << 40), 1 << 40)),
                min_size=1, max_size=8))
def test_dot_x_is_bit_exact_against_the_reference(pairs):
    F = 32
    n = len(pairs)
    p = assemble(program("linalg", f"input x: fixed[{n}]\ninput y: fixed[{n}]\noutput r: fixed",
                         "call dot_x(r, x, y)"))
    m = Machine(p)
    m.reset()
    m.write_raw("x", [a for a, _ in pairs])
    m.write_raw("y", [b for _, b in pairs])
    m.run()
    expect = 0
    for a, b in pairs:
        expect = wrap(expect + fixed_mul(a, b, F))
    assert m.read_raw("r") == expect
    m.run(direction=-1)
    assert m.read_raw("r") == 0 and list(m.read_raw("x")) == [a for a, _ in pairs]


# ---- stats --------------------------------------------------------------------------------

def test_mean_and_variance_float():
    xs = [1.0, 2.0, 3.0, 4.0, 10.0]
    src = program("stats", f"input x: float[5] = [{', '.join(map(str, xs))}]\n"
                           "output m: float\noutput v: float",
                  "call mean(m, x)\n    call variance(v, x, m)")
    out, _ = run(src, exact=False)
    assert out["m"] == pytest.approx(np.mean(xs), rel=1e-15)
    assert out["v"] == pytest.approx(np.var(xs), rel=1e-12)


def test_mean_and_variance_fixed_exact():
    F = 32
    xs = [1.0, 2.0, 3.0, 4.5]
    src = program("stats", "input x: fixed[4] = [1, 2, 3, 4.5]\noutput m: fixed\noutput v: fixed",
                  "call mean_x(m, x)\n    call variance_x(v, x)")
    out, _ = run(src)
    words = [int(a * 2 ** F) for a in xs]
    n = 4 << F
    mu = fixed_div(sum(words), n, F)
    q = sum(fixed_mul(w - mu, w - mu, F) for w in words)
    assert out["raw"]["m"] == mu and out["m"] == 2.625
    assert out["raw"]["v"] == fixed_div(q, n, F) and out["v"] == np.var(xs)


# ---- intmath ------------------------------------------------------------------------------

INTMATH = program("intmath", "input n: int\ninput a: int\noutput f: int\noutput s: int\n"
                             "output p: int",
                  "call factorial(f, n)\n    call isqrt(s, n)\n    call ipow(p, a, n)")


def intmath(call: str) -> str:
    return program("intmath", "input n: int\ninput a: int\noutput r: int", call)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 12, 20])
def test_factorial(n):
    out, _ = run(intmath("call factorial(r, n)"), {"n": n})
    assert out["r"] == math.factorial(n)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 8, 9, 10, 99, 100, 1000, 123456789])
def test_isqrt(n):
    out, _ = run(intmath("call isqrt(r, n)"), {"n": n})
    assert out["r"] == math.isqrt(n)


@pytest.mark.parametrize("a, k", [(2, 0), (2, 10), (-3, 5), (0, 0), (0, 4), (7, 1), (10, 18)])
def test_ipow(a, k):
    out, _ = run(intmath("call ipow(r, a, n)"), {"n": k, "a": a})
    assert out["r"] == a ** k


def test_routines_run_backward_from_their_outputs():
    """Starting at the end state (outputs given, everything else zero) and running backward
    uncomputes the outputs: the uncall direction of each routine is clean too."""
    p = assemble(INTMATH)
    m = Machine(p)
    m.reset_end({"n": 0, "a": 0, "f": 720, "s": 2, "p": 3 ** 6})
    m.write("n", 6)
    m.write("a", 3)
    assert m.run(direction=-1) == "start"
    assert (m.read("f"), m.read("s"), m.read("p")) == (0, 0, 0)
    assert (m.read("n"), m.read("a")) == (6, 3)


def test_routine_names():
    names = {lib: re.findall(r"^func (\w+)", (STD / lib).read_text(), re.M) for lib in LIBS}
    assert {"dot", "dot_x", "norm2", "norm2_x", "axpy", "axpy_x"} <= set(names["linalg.rasm"])
    assert {"mean", "variance", "mean_x", "variance_x"} <= set(names["stats.rasm"])
    assert {"factorial", "isqrt"} <= set(names["intmath.rasm"])
