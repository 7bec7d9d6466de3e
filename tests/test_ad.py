"""Gradients by running bytecode backward: values, modes, restored inputs, sound ancillas,
errors.  (Every instruction's rule is checked against finite differences in test_ad_rules.py;
the paper's programs in test_ad_programs.py.)"""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm.ad import (
    NonFiniteDerivative,
    NotDifferentiable,
    ReleasedTangentError,
    ReleasedTangentWarning,
)

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
ACCUMULATE = PROGRAMS / "accumulate.rasm"


def fd_grad(prog, of, wrt, inputs, h=1e-6):
    """Central finite differences of rvm.run."""
    out = {}
    for w in wrt:
        up, dn = dict(inputs), dict(inputs)
        up[w] = inputs[w] + h
        dn[w] = inputs[w] - h
        out[w] = (float(rvm.run(prog, up).outputs[of]) - float(rvm.run(prog, dn).outputs[of])) / (2 * h)
    return out


def test_accumulate_gradient_and_restored_inputs():
    d = rvm.derivatives(ACCUMULATE, of="x", wrt=["x", "one"], inputs={"x": 0.5, "n": 1000})
    assert d.value == 1000.5
    assert d.gradient == {"x": 1.0, "one": 1000.0}
    assert d.drift == {}                       # every input came back bit for bit
    assert d.released is None
    assert d.steps > 3000


def test_forward_mode_and_hessian_of_a_polynomial():
    src = """
inout x: float = 1.5
inout y: float = -0.5
output f: float
func main() {
    local t: float
    t += x * x
    f += t * y          ; f = x^2 y + sin(y)
    f += sin(y)
    t -= x * x
}
"""
    prog = rvm.assemble(src)
    x, y = 1.5, -0.5
    t = rvm.jvp(prog, None, {"x": 1.0, "y": 2.0})
    assert t["f"] == pytest.approx(2 * x * y * 1.0 + (x * x + math.cos(y)) * 2.0)
    g = rvm.grad(prog, of="f", wrt="x,y")
    assert g["x"] == pytest.approx(2 * x * y) and g["y"] == pytest.approx(x * x + math.cos(y))
    H = rvm.hessian(prog, of="f", wrt=["x", "y"])
    np.testing.assert_allclose(H, [[2 * y, 2 * x], [2 * x, -math.sin(y)]], rtol=1e-12)
    hv = rvm.hvp(prog, of="f", wrt=["x", "y"], v={"x": 1.0, "y": -1.0})
    np.testing.assert_allclose([hv["x"], hv["y"]], H @ [1.0, -1.0], rtol=1e-12)


def test_arrays_elements_and_calls():
    src = """
inout xs: float[3] = [1.0, 2.0, 3.0]
output s: float
func sq(a: float[], out: float) {
    for i in 0..len(a) {
        out += a[i] * a[i]
    }
}
func main() {
    local t: float
    call sq(xs, t)
    s += sqrt(t)
    uncall sq(xs, t)
}
"""
    prog = rvm.assemble(src)
    g = rvm.grad(prog, of="s", wrt="xs")
    np.testing.assert_allclose(g["xs"], np.array([1, 2, 3]) / math.sqrt(14), rtol=1e-14)
    g1 = rvm.grad(prog, of="s", wrt=["xs[1]"])
    assert g1["xs[1]"] == pytest.approx(2 / math.sqrt(14))


def test_fixed_point_oscillator_is_restored_bit_exactly():
    prog = rvm.assemble(PROGRAMS / "oscillator.rasm")
    inputs = {"x": 1.0, "v": 0.0, "dt": 0.015625, "steps": 50}
    d = rvm.derivatives(prog, of="x", wrt=["x", "v", "dt"], inputs=inputs)
    assert d.drift == {}
    fd = fd_grad(prog, "x", ["x", "v", "dt"], inputs, h=1e-4)
    for w in fd:
        assert d.gradient[w] == pytest.approx(fd[w], rel=1e-4, abs=1e-4)


def test_float_drift_is_reported_not_hidden():
    src = """
inout a: float = 0.1
inout b: float = 0.7
inout n: int = 200
func main() {
    for i in 0..n {
        a += b * 0.01
        b -= a * 0.01
    }
}
"""
    prog = rvm.assemble(src)
    d = rvm.derivatives(prog, of="a", wrt="a,b")
    assert d.drift == rvm.roundtrip(prog).drift       # the same drift as a plain round trip
    assert set(d.drift) == {"a", "b"} and all(0 < v < 1e-14 for v in d.drift.values())
    # a rotation by 0.01 per step, 200 steps: a(2) = cos(2) a + sin(2) b, near enough
    assert d.gradient["a"] == pytest.approx(math.cos(2.0), abs=0.02)
    assert d.gradient["b"] == pytest.approx(math.sin(2.0), abs=0.02)


def test_value_stack_moves_duals():
    src = """
inout x: float = 2.0
output y: float
func main() {
    local t: float
    t += x * x
    push t              ; t is zero now; its value and derivative are on the stack
    t += 1.0
    t -= 1.0
    pop t
    y += t * x          ; y = x^3
    t -= x * x
}
"""
    g = rvm.grad(rvm.assemble(src), of="y", wrt="x")
    assert g["x"] == pytest.approx(12.0)


def test_copy_into_an_ancilla_keeps_its_gradient():
    """NiLang's known flaw: an ancilla allocated as a copy `x <- y` gets gradient 0 instead
    of 1.  Here an ancilla starts at zero and the copy is an instruction with a rule."""
    src = """
inout y: float = 3.0
output z: float
func main() {
    local x: float
    x += y
    z += x
    x -= y
}
"""
    g = rvm.grad(rvm.assemble(src), of="z", wrt="y")
    assert g["y"] == 1.0


def test_ancilla_zero_here_but_not_as_a_function_is_reported():
    src = """
inout x: float = 1.0
inout y: float = 1.0
output z: float
func main() {
    local t: float
    t += x
    z += t * t
    t -= y              ; zero because x == y here, but t = x - y is not zero as a function
}
"""
    prog = rvm.assemble(src)
    with pytest.warns(ReleasedTangentWarning, match=r"nonzero tangent.*<string>:\d+:\d+: `end main`"):
        d = rvm.derivatives(prog, of="z", wrt="x,y")
    assert d.released["count"] == 1
    with pytest.raises(ReleasedTangentError):
        rvm.grad(prog, of="z", wrt="x,y", strict=True)
    with pytest.warns(ReleasedTangentWarning):       # grad_fn checks on its first call
        f = rvm.grad_fn(prog, of="z", wrt="x,y")
        f()


def test_errors_are_named_and_clear():
    prog = rvm.assemble(ACCUMULATE)
    with pytest.raises(NotDifferentiable, match="'n' is an int cell"):
        rvm.grad(prog, of="x", wrt="n")
    with pytest.raises(NotDifferentiable, match="'nope' is not a global.*x, one, n"):
        rvm.grad(prog, of="nope", wrt="x")
    with pytest.raises(NotDifferentiable, match="names a cell twice"):
        rvm.grad(prog, of="x", wrt="x,x")
    root = rvm.assemble("inout x: float = 0.0\noutput y: float\nfunc main() {\n    y += sqrt(x)\n}\n")
    with pytest.raises(NonFiniteDerivative, match=r"<string>:4:5: `addfn.f y, x, sqrt`"):
        rvm.grad(root, of="y", wrt="x")


def test_grad_fn_reuses_one_machine():
    f = rvm.grad_fn(ACCUMULATE, of="x", wrt=["one"])
    for n in (3, 10, 7):
        assert f({"n": n})["one"] == n
    assert f.last.value == 7.0


@pytest.mark.parametrize("name, of, wrt, calls", [
    ("accumulate.rasm", "x", ["x", "one"], [{"n": 3}, {"n": 40, "one": 0.25}, {"x": 2.0},
                                            {"n": 30000}]),        # slices without the GIL
    ("besselj.rasm", "out", ["z"], [{"z": 3.0}, {"z": 1.5, "nu": 0}, {"z": -2.0, "nterms": 5}]),
    ("umm.rasm", "loss", ["x", "theta"], [{}, {}]),
    ("norm.rasm", "res", ["x"], [{}, {}]),
])
def test_grad_fn_fast_calls_equal_derivatives(name, of, wrt, calls):
    """After its first call grad_fn runs forward and back in one core call (Core.gradient):
    the gradient, value, outputs, drift and steps are those of a full derivatives()."""
    prog = rvm.assemble(PROGRAMS / name)
    f = rvm.grad_fn(prog, of=of, wrt=wrt)
    f(calls[0])
    kept = []
    for inputs in calls:
        g = f(inputs)
        ref = rvm.derivatives(prog, of, wrt, inputs, check_ancillas=False)
        assert f.fast_grad is not None                # the fast path ran
        assert {k: np.asarray(v).tolist() for k, v in g.items()} == \
            {k: np.asarray(v).tolist() for k, v in ref.gradient.items()}
        last = f.last
        assert (last.value, last.drift, last.steps) == (ref.value, ref.drift, ref.steps)
        assert str(last.outputs) == str(ref.outputs)
        kept.append((g, {k: np.array(v) for k, v in g.items()}))
    for g, copy in kept:                              # later calls did not overwrite them
        assert all(np.array_equal(g[k], copy[k]) for k in g)


@pytest.mark.parametrize("name, of, wrt, inputs", [
    ("besselj_rec.rasm", "out", ["z"], {"z": 2.5}),
    ("norm.rasm", "res", ["x"], {}),
    ("petersen.rasm", "loss", ["x[0]", "x[5]", "x[17]"], {}),
])
def test_hessian_passes_in_the_core_equal_the_general_ones(name, of, wrt, inputs):
    """A Hessian column is one core call (Core.gradient with a tangent) when the inputs allow
    it; a numpy scalar input takes the general path: the same numbers either way."""
    prog = rvm.assemble(PROGRAMS / name)
    fast = rvm.derivatives(prog, of, wrt, inputs, hessian=True, direction={w: 1.0 for w in wrt})
    m = rvm.Machine(prog)
    r = rvm.ad.engine._Runner(prog, of, wrt, m)
    r.fast = lambda *a, **k: False                    # force the general passes
    slow = rvm.derivatives(prog, of, wrt, inputs, hessian=True,
                           direction={w: 1.0 for w in wrt}, _runner=r)
    assert fast.hessian.tolist() == slow.hessian.tolist()
    assert {k: np.asarray(v).tolist() for k, v in fast.hvp.items()} == \
        {k: np.asarray(v).tolist() for k, v in slow.hvp.items()}
    assert (fast.value, fast.steps, fast.drift) == (slow.value, slow.steps, slow.drift)
    assert np.allclose(fast.hessian, fast.hessian.T, rtol=1e-9, atol=1e-12)


def test_grad_fn_takes_the_general_path_when_it_must():
    prog = rvm.assemble(PROGRAMS / "umm.rasm")
    f = rvm.grad_fn(prog, of="loss", wrt="theta")
    f()
    x = [0.5, -1.0, 2.0, 0.25]
    g = f({"x": x})                                   # a list of floats: the fast path
    assert f.fast_grad is not None
    assert np.array_equal(g["theta"], f({"x": np.array(x)})["theta"]) and f.fast_grad is not None
    g = f({"x": [0.5, -1, 2.0, 0.25]})                # an int in it: the general path
    assert f.fast_grad is None
    assert np.array_equal(g["theta"], rvm.grad(prog, of="loss", wrt="theta", inputs={"x": x},
                                               check_ancillas=False)["theta"])
    with pytest.raises(rvm.machine.UnknownName):
        f({"nope": 1.0})
    root = rvm.assemble("inout x: float = 1.0\noutput y: float\nfunc main() {\n"
                        "    y += sqrt(x)\n}\n")
    h = rvm.grad_fn(root, of="y", wrt="x")
    assert h({"x": 4.0})["x"] == 0.25
    assert h({"x": 1.0})["x"] == 0.5 and h.fast_grad is not None
    with pytest.raises(NonFiniteDerivative, match=r"<string>:4:5"):
        h({"x": 0.0})
    with pytest.raises(rvm.errors.DomainError):
        h({"x": -1.0})
    f = rvm.grad_fn(ACCUMULATE, of="x", wrt="one")
    f()
    with pytest.raises(rvm.errors.StepLimit):
        rvm.grad_fn(ACCUMULATE, of="x", wrt="one", max_steps=50)({"n": 100})


def test_memory_of_the_adjoint_sweep_does_not_grow_with_steps():
    """The dual arrays are the only AD memory: the frame and stack peaks do not depend on n."""
    prog = rvm.assemble(ACCUMULATE)
    peaks = []
    for n in (10, 100000):
        m = rvm.Machine(prog)
        rvm.derivatives(prog, of="x", wrt="one", inputs={"n": n}, machine=m)
        peaks.append((m.stats["peak_stack"], m.stats["peak_frame_cells"]))
    assert peaks[0] == peaks[1]


def test_cli_grad_json_check_and_hessian(capsys):
    from rvm.cli import main

    rc = main(["grad", str(ACCUMULATE), "--of", "x", "--wrt", "x,one", "n=250", "--check", "fd",
               "--hessian", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert doc["gradient"] == {"x": 1.0, "one": 250.0}
    assert doc["check_passed"] and doc["check"]["one"]["fd"] == pytest.approx(250.0)
    assert doc["hessian"] == {"cells": ["x", "one"], "matrix": [[0.0, 0.0], [0.0, 0.0]]}
    assert doc["drift"] == {} and doc["released"] is None


def test_cli_grad_table_and_errors(capsys):
    from rvm.cli import main

    assert main(["grad", str(ACCUMULATE), "--of", "x", "--wrt", "one", "n=7"]) == 0
    out = capsys.readouterr().out
    assert "x = 7.0" in out and "inputs restored bit for bit" in out
    assert out.count("7") >= 2
    assert main(["grad", str(ACCUMULATE), "--of", "n", "--wrt", "x"]) == 2
    assert "'n' is an int cell" in capsys.readouterr().err


def test_cli_grad_exit_5_on_infinite_derivative(tmp_path):
    p = tmp_path / "root.rasm"
    p.write_text("inout x: float = 0.0\noutput y: float\nfunc main() {\n    y += sqrt(x)\n}\n")
    r = subprocess.run([sys.executable, "-m", "rvm.cli", "grad", str(p), "--of", "y", "--wrt", "x"],
                       capture_output=True, text=True)
    assert r.returncode == 5
    assert "not finite" in r.stderr and "root.rasm:4:5" in r.stderr


def test_a_direction_or_tangents_that_do_not_fit_are_named_errors():
    """rvm.hvp's v, derivatives' direction and rvm.jvp's tangents: something that is not a
    mapping, a wrt name without a vector (an empty dict included: it is a direction, not
    none) and a vector that does not fit its cell are named errors, not a KeyError, numpy's
    'need at least one array to concatenate' or a regex TypeError from inside; the repeated
    calls (in C once native) hand them to the same general path."""
    from rvm.machine import UnknownName
    from rvm.values import ValueEncodingError
    prog = rvm.assemble(PROGRAMS / "besselj_rec.rasm")
    for _ in range(4):
        with pytest.raises(UnknownName, match="no vector for wrt 'z'"):
            rvm.hvp(prog, "out", ["z"], {}, {"z": 2.5})
        with pytest.raises(KeyError, match="no vector for wrt 'z'"):
            rvm.hvp(prog, "out", ["z"], {"nu": 1.0}, {"z": 2.5})
        with pytest.raises(ValueEncodingError, match=r"\['z'\] = \[1.0, 2.0\] does not fit z"):
            rvm.hvp(prog, "out", ["z"], {"z": [1.0, 2.0]}, {"z": 2.5})
        with pytest.raises(TypeError, match="must map each wrt name to its vector, not list"):
            rvm.hvp(prog, "out", ["z"], [1.0], {"z": 2.5})
        with pytest.raises(TypeError, match="tangents must map each wrt name"):
            rvm.jvp(prog, {"z": 2.5}, [1.0])
        with pytest.raises(ValueEncodingError, match=r"tangents\['z'\] = 'a' does not fit z"):
            rvm.jvp(prog, {"z": 2.5}, {"z": "a"})
        with pytest.raises(UnknownName, match="no vector for wrt 'z'"):
            rvm.derivatives(prog, "out", ["z"], gradient=False, direction={})
        assert rvm.hvp(prog, "out", ["z"], {"z": 1.0}, {"z": 2.5})["z"] == \
            rvm.hessian(prog, "out", ["z"], {"z": 2.5})[0, 0]


def test_of_and_wrt_that_are_not_names_are_named_errors():
    """A loss or wrt that is not a name (a list for of, a list inside wrt, a number) is a
    TypeError saying so, the same on the first call and on the repeated ones whose entry is
    C (rvm.grad's with check_ancillas=False hashed them: 'unhashable type: list', where the
    general path said \"'list' object has no attribute 'strip'\")."""
    prog = rvm.assemble(PROGRAMS / "besselj_rec.rasm")
    for _ in range(3):                  # the repeated calls' entries are bound after a few
        rvm.grad(prog, "out", ["z"], {"z": 2.5}, check_ancillas=False)
        rvm.hessian(prog, "out", ["z"], {"z": 2.5})
    calls = [lambda of, wrt: rvm.grad(prog, of, wrt, {"z": 2.5}, check_ancillas=False),
             lambda of, wrt: rvm.grad(prog, of, wrt, {"z": 2.5}),
             lambda of, wrt: rvm.hessian(prog, of, wrt, {"z": 2.5}),
             lambda of, wrt: rvm.hvp(prog, of, wrt, {"z": 1.0}, {"z": 2.5}),
             lambda of, wrt: rvm.derivatives(prog, of, wrt, {"z": 2.5}),
             lambda of, wrt: rvm.grad_fn(prog, of, wrt),
             lambda of, wrt: rvm.hessian_batch(prog, of, wrt, {"z": np.array([2.5, 3.0])})]
    for call in calls:
        for _ in range(2):
            with pytest.raises(TypeError, match=r"of must be a global's name, not \['out'\]"):
                call(["out"], ["z"])
            with pytest.raises(TypeError, match=r"wrt must be .* not \[\['z'\]\]"):
                call("out", [["z"]])
            with pytest.raises(TypeError, match=r"wrt must be .* not \[5\]"):
                call("out", 5)
    assert rvm.grad(prog, "out", ("z",), {"z": 2.5}, check_ancillas=False) == \
        rvm.grad(prog, "out", "z", {"z": 2.5}, check_ancillas=False)
