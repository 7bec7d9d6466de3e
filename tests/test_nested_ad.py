"""Derivative statements (nested AD, issue 20): `g += grad f(args) wrt x` and
`d += jvp f(args) wrt x along v` in the language and the machine (rvm/_nested.pxi), checked
against closed forms and finite differences: plain runs, rvm.grad / rvm.jvp over them (an
outer mode from Python), and statements nested in a function another statement
differentiates, in all four combinations of forward and reverse mode; round trips, the
disassembler, the errors and the native fallback."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import assembler
import rvm
from assembler.invert import invert_program
from rvm.errors import NestingError

ROOT = Path(__file__).resolve().parents[1]

F = """
func f(out: float, x: float[2], c: float) {
    out += sin(x[0]) * x[1] * x[1] + c * x[0] * x[0] * x[1] + exp(0.5 * x[1])
}
"""


def f_val(x, c):
    return math.sin(x[0]) * x[1] ** 2 + c * x[0] ** 2 * x[1] + math.exp(0.5 * x[1])


def f_grad(x, c):
    return np.array([math.cos(x[0]) * x[1] ** 2 + 2 * c * x[0] * x[1],
                     2 * math.sin(x[0]) * x[1] + c * x[0] ** 2 + 0.5 * math.exp(0.5 * x[1])])


ONE_LEVEL = """
input  x: float[2] = [0.7, -0.4]
input  c: float = 1.3
input  v: float[2] = [0.25, -2.0]
output g: float[2]
output d: float
output g0: float
""" + F + """
func main() {
    g += grad f(x, c) wrt x
    d += jvp f(x, c) wrt x along v
    g0 += grad f(x, c) wrt c
}
"""


def test_grad_and_jvp_statements_give_the_closed_form():
    x, c, v = np.array([0.7, -0.4]), 1.3, np.array([0.25, -2.0])
    out = rvm.run(rvm.assemble(ONE_LEVEL)).outputs
    assert np.allclose(out["g"], f_grad(x, c), rtol=1e-14, atol=1e-15)
    assert out["d"] == pytest.approx(f_grad(x, c) @ v, rel=1e-14)
    assert out["g0"] == pytest.approx(x[0] ** 2 * x[1], rel=1e-14)


def test_round_trip_forward_and_backward_restores_the_inputs():
    prog = rvm.assemble(ONE_LEVEL)
    m = rvm.Machine(prog)
    m.reset()
    assert m.run() == "end"
    g = np.array(m.read("g"))
    assert m.run(direction=-1) == "start" and m.t == 0
    assert np.array_equal(m.read("x"), [0.7, -0.4]) and m.read("c") == 1.3
    assert not np.any(m.read("g")) and m.read("d") == 0.0
    assert np.allclose(g, f_grad(np.array([0.7, -0.4]), 1.3))
    assert not m.mem[prog.n_static:].any() and len(m.stack()) == 0


def _fd(fun, x: dict, name: str, i: int | None, h: float = 1e-6) -> float:
    def at(delta):
        y = {k: (np.array(v, dtype=float) if isinstance(v, list) else v) for k, v in x.items()}
        if i is None:
            y[name] = y[name] + delta
        else:
            y[name] = y[name].copy()
            y[name][i] += delta
        return fun(y)
    return (at(h) - at(-h)) / (2 * h)


@pytest.mark.parametrize("of", ["d", "g0", "g"])
def test_outer_reverse_and_forward_from_python_match_finite_differences(of):
    """rvm.grad (adjoint over the statements: Hessian-vector products) and rvm.jvp (tangent
    over them: adjoint-over-tangent) of the statements' results."""
    prog = rvm.assemble(ONE_LEVEL)
    inp = {"x": [0.7, -0.4], "c": 1.3, "v": [0.25, -2.0]}
    key = (of, 1) if of == "g" else (of, None)

    def val(y):
        o = rvm.run(prog, y).outputs[key[0]]
        return o if key[1] is None else o[key[1]]
    ofs = f"{of}[1]" if of == "g" else of
    gr = rvm.grad(prog, of=ofs, wrt=["x", "c", "v"], inputs=inp)
    for name, idx in (("x", 0), ("x", 1), ("c", None), ("v", 0), ("v", 1)):
        fd = _fd(val, inp, name, idx)
        got = gr[name] if idx is None else gr[name][idx]
        assert got == pytest.approx(fd, rel=1e-6, abs=1e-7), (name, idx)
    tan = {"x": np.array([0.3, -1.1]), "c": 0.4, "v": np.array([1.5, 0.2])}
    j = rvm.jvp(prog, inp, tan)
    fd = sum(_fd(val, inp, n, i) * (tan[n] if i is None else tan[n][i])
             for n, i in (("x", 0), ("x", 1), ("c", None), ("v", 0), ("v", 1)))
    got = j[of] if key[1] is None else j[of][key[1]]
    assert got == pytest.approx(fd, rel=1e-6, abs=1e-7)


# a function whose value contains a derivative: h(x) = |grad f(x)|^2 / 2 + sin(df/dx . v)
NESTED = """
input  x: float[2] = [0.7, -0.4]
input  c: float = 1.3
input  v: float[2] = [0.25, -2.0]
input  imode: int = 0
input  omode: int = 0
output hv: float
output hg: float[2]
""" + F + """
func h(out: float, x: float[2], c: float, v: float[2], imode: int) {
    local g: float[2]
    local d: float
    with {
        if imode == 0 {
            g += grad f(x, c) wrt x
        } else {
            local e: float[2]
            for k in 0..2 {
                e[k] += 1.0
                g[k] += jvp f(x, c) wrt x along e
                e[k] -= 1.0
            }
            delocal e
        } fi imode == 0
        d += jvp f(x, c) wrt x along v
    } do {
        out += 0.5 * (g[0] * g[0] + g[1] * g[1]) + sin(d)
    }
}

func main() {
    call h(hv, x, c, v, imode)
    if omode == 0 {
        hg += grad h(x, c, v, imode) wrt x
    } else {
        local e: float[2]
        for k in 0..2 {
            e[k] += 1.0
            hg[k] += jvp h(x, c, v, imode) wrt x along e
            e[k] -= 1.0
        }
        delocal e
    } fi omode == 0
}
"""


def h_val(x, c, v):
    g = f_grad(x, c)
    return 0.5 * g @ g + math.sin(g @ v)


@pytest.mark.parametrize("omode, imode", [(0, 0), (0, 1), (1, 0), (1, 1)], ids=["rr", "rf", "fr", "ff"])
def test_nested_statements_in_all_four_combinations(omode, imode):
    """grad/jvp of a function that takes grad/jvp inside: the outer statement runs the inner
    one under an adjoint (rr, rf) or tangent (fr, ff) mode; against finite differences of h,
    whose closed form is checked too."""
    prog = rvm.assemble(NESTED)
    x, c, v = np.array([0.7, -0.4]), 1.3, np.array([0.25, -2.0])
    out = rvm.run(prog, {"imode": imode, "omode": omode}).outputs
    assert out["hv"] == pytest.approx(h_val(x, c, v), rel=1e-13)
    fd = [(h_val(x + h * e, c, v) - h_val(x - h * e, c, v)) / (2 * h)
          for e, h in ((np.array([1.0, 0]), 1e-6), (np.array([0, 1.0]), 1e-6))]
    assert np.allclose(out["hg"], fd, rtol=1e-7, atol=1e-8)


def test_the_four_combinations_agree_closely():
    prog = rvm.assemble(NESTED)
    res = [rvm.run(prog, {"imode": i, "omode": o}).outputs["hg"]
           for o in (0, 1) for i in (0, 1)]
    for r in res[1:]:
        assert np.allclose(r, res[0], rtol=1e-13, atol=1e-15)


def test_a_third_order_is_refused_by_name():
    """rvm.grad over a program whose statement differentiates a function with a statement:
    the inner one would run under tangent-over-adjoint, a third order."""
    prog = rvm.assemble(NESTED)
    with pytest.raises(NestingError, match="tangent-over-adjoint mode at nesting level 1"):
        rvm.grad(prog, of="hg[0]", wrt=["x"], inputs={"imode": 0, "omode": 0})


def test_a_derivative_over_python_hvp_is_refused():
    prog = rvm.assemble(ONE_LEVEL)
    with pytest.raises(NestingError, match="unsupported"):
        rvm.hvp(prog, of="d", wrt=["x"], v={"x": [1.0, 0.0]})


def test_the_disassembly_assembles_to_the_same_program():
    for text in (ONE_LEVEL, NESTED):
        prog = rvm.assemble(text)
        dis = assembler.disassemble(prog)
        assert "+= grad f(" in dis and "wrt x" in dis and "along" in dis
        again = assembler.assemble(dis, "dis.rasm")
        assert np.array_equal(again.code, prog.code) and again.callsites == prog.callsites


def test_the_inverse_program_runs_the_statements_backward():
    prog = rvm.assemble(ONE_LEVEL)
    fwd = rvm.run(prog).outputs
    """(`rvm invert`: the callee is inverted too, so the statement keeps its opcode.)"""
    inv = invert_program(prog)
    m = rvm.Machine(inv)
    m.reset()
    m.write("g", fwd["g"])
    m.write("d", fwd["d"])
    m.write("g0", fwd["g0"])
    m.write("x", [0.7, -0.4])           # the original's end state holds its inputs too
    m.write("c", 1.3)
    m.write("v", [0.25, -2.0])
    assert m.run() == "end"
    assert np.array_equal(m.read("g"), [0.0, 0.0]) and m.read("d") == 0.0 and m.read("g0") == 0.0


def test_native_code_falls_back_to_the_interpreter():
    prog = rvm.assemble(ONE_LEVEL)
    fn = rvm.grad_fn(prog, of="d", wrt=["x"])
    for _ in range(12):
        r = fn({})
    assert "interpreted" in fn.native
    assert np.allclose(r["x"], rvm.grad(prog, of="d", wrt=["x"])["x"])
    from rvm.native import Unsupported
    with pytest.raises(Unsupported):
        rvm.grad_fn(prog, of="d", wrt=["x"], native=True)


def _err(text: str) -> str:
    with pytest.raises(assembler.AssemblyError) as e:
        assembler.assemble(text, "t.rasm")
    return str(e.value)


@pytest.mark.parametrize("body, code, words", [
    ("g += grad nope(x) wrt x", "E012", "unknown function `nope`"),
    ("g += grad f(x) wrt x", "E009", "takes 2 arguments (all but the output)"),
    ("g += grad k(x) wrt x", "E004", "first parameter of `k` must be a float cell"),
    ("x += grad f(x, c) wrt x", "E005", "a source may not alias the target"),
    ("d += grad f(x, c) wrt x", "E004", "`d` is a cell, but `grad f` takes arrays here"),
    ("g *= grad f(x, c) wrt x", "E008", "is added (`+=`) or subtracted"),
    ("n += grad f(x, c) wrt c", "E004", "the target `n` is int"),
    ("d += jvp f(x, c) wrt x", "E001", "`along`"),
    ("g += jvp f(x, c) wrt x along x", "E008", "the target of `jvp f` is a cell"),
    ("d += grad f(x, c) wrt c + 1.0", "E008", "the wrt of `grad f` is a cell or an array"),
    ("d += grad f(c, x, c) wrt c", "E005", "`c` is also the output `c` of `grad f`, the cell f "
     "adds its value into: the derivative is taken with respect to f's inputs"),
])
def test_errors_are_diagnostics(body, code, words):
    text = ("input x: float[2]\ninput c: float\noutput g: float[2]\noutput d: float\n"
            "output n: int\n" + F + "func k(out: int, x: float[2]) {\n    out += 1\n}\n"
            "func main() {\n    " + body + "\n}\n")
    msg = _err(text)
    assert f"error[{code}]" in msg and words in msg, msg
    assert msg.startswith("t.rasm:") and ":" in msg.split("error")[0]


def test_a_function_that_adds_its_output_twice_is_reported():
    """Run back, `out += a; out += b` may leave a rounding residue in the scratch output."""
    text = ("input x: float = 0.1\noutput g: float\n"
            "func f(out: float, x: float) {\n    out += x\n    out += 0.2\n}\n"
            "func main() {\n    g += grad f(x) wrt x\n}\n")
    with pytest.raises(NestingError, match="scratch output .* is not zero after"):
        rvm.run(rvm.assemble(text))


def test_elements_with_literal_indexes_as_target_output_and_wrt():
    """`g[1] += grad f(...) wrt x[0]`, an explicit output `o[2]`: elements whose index is a
    literal (a TypeError in the assembler before)."""
    prog = rvm.assemble("""
input  x: float[2] = [0.5, 3.0]
input  s: float = 2.0
output g: float[2]
output o: float[3]

func f(out: float, x: float, s: float) {
    out += x * x * x * s
}

func main() {
    g[1] += grad f(x[0], s) wrt x[0]
    g[0] += grad f(o[2], x[1], s) wrt s
    g[1] -= jvp f(x[1], s) wrt x[1] along s
}
""")
    out = rvm.run(prog).outputs
    assert list(out["g"]) == [27.0, 3 * 0.25 * 2.0 - 3 * 9.0 * 2.0 * 2.0]
    assert list(out["o"]) == [0.0, 0.0, 0.0]


def test_a_non_finite_derivative_is_reported_as_such():
    """The statement's value law traps on inf; the report says what overflowed (it said
    "addgrad.f is not a data instruction")."""
    from rvm.errors import RangeError
    prog = rvm.assemble("""
input  x: float = 0.5
output g: float
func f(out: float, x: float) {
    out += exp(x * 1419.0)
}
func main() {
    g += grad f(x) wrt x
}
""", "nf.rasm")
    with pytest.raises(RangeError) as e:
        rvm.run(prog)
    assert "addgrad.f: the derivative, or the target plus it, is not a finite float (inf or " \
           "nan)" in str(e.value)
    assert "not a data instruction" not in str(e.value)
