"""A loss that depends on a wrt value through a cell with no derivative (an int conversion) is
never a silent gradient: a warning names the conversion, strict=True / --strict refuses
(rvm/ad/paths.py, issue 19)."""
from __future__ import annotations

import glob
import warnings

import pytest

import rvm
from isa.derivatives import DIFFERENTIABLE
from rvm.ad import NonDifferentiablePath, NonDifferentiablePathWarning
from rvm.ad.paths import lossy_paths
from rvm.cli import main

THROUGH_INT = """\
input x: float = 2.5
output y: float
global k: int
func main() {
    k += int(x)
    y += float(k)
    y += x * x
    k -= int(x)
}
"""


def gradient_and_warnings(source: str, of: str, wrt, inputs=None, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = rvm.grad(rvm.assemble(source), of=of, wrt=wrt, inputs=inputs or {}, **options)
    return g, [str(w.message) for w in caught
               if issubclass(w.category, NonDifferentiablePathWarning)]


def test_an_int_conversion_on_the_way_to_the_loss_is_warned_about():
    g, found = gradient_and_warnings(THROUGH_INT, "y", ["x"], {"x": 2.5})
    assert g["x"] == 5.0                  # d(x*x)/dx: the int path is invisible to AD
    assert len(found) == 1
    assert found[0].startswith("the loss y depends on x through int cell k, converted from x "
                               "at <string>:5:5: derivatives do not flow through int cells")
    assert found[0].endswith("; 1 more such conversion at <string>:8:5")


def test_strict_refuses_it():
    with pytest.raises(NonDifferentiablePath, match=r"through int cell k.*\(strict\)$"):
        rvm.derivatives(rvm.assemble(THROUGH_INT), of="y", wrt="x", inputs={"x": 2.5},
                        strict=True)


def test_strict_refuses_it_after_a_warned_call_too():
    prog = rvm.assemble(THROUGH_INT)
    with pytest.warns(NonDifferentiablePathWarning):
        rvm.grad(prog, of="y", wrt="x", inputs={"x": 2.5})
    with pytest.raises(NonDifferentiablePath):
        rvm.grad(prog, of="y", wrt="x", inputs={"x": 2.5}, strict=True)


def test_the_cli_warns_and_strict_exits_5(tmp_path, capsys):
    path = tmp_path / "p.rasm"
    path.write_text(THROUGH_INT)
    assert main(["grad", str(path), "--of", "y", "--wrt", "x"]) == 0
    err = capsys.readouterr().err
    assert f"rvm grad: warning: the loss y depends on x through int cell k, converted from x " \
           f"at {path}:5:5" in err
    assert main(["grad", str(path), "--of", "y", "--wrt", "x", "--strict"]) == 5
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("rvm grad: error: the loss y depends on x")


def test_grad_fn_warns_once_at_its_first_call():
    f = rvm.grad_fn(rvm.assemble(THROUGH_INT), of="y", wrt="x", native=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [f({"x": v})["x"] for v in (1.0, 2.0, 3.0)] == [2.0, 4.0, 6.0]
    assert [w.category for w in caught] == [NonDifferentiablePathWarning]
    assert caught[0].filename == __file__      # names the user's line, not rvm's


def test_paths_through_calls_and_indexed_arrays_are_found():
    src = """\
input x: float = 1.5
input i: int = 1
output y: float
global a: int[3]
func conv(v: float, n: int) {
    n += int(v)
}
func main() {
    call conv(x, a[i])
    y += float(a[1])
    uncall conv(x, a[i])
}
"""
    g, found = gradient_and_warnings(src, "y", ["x"], {"x": 1.5})
    assert g["x"] == 0.0
    assert len(found) == 1 and "through int cell n (a parameter of conv), converted from v " \
        "(a parameter of conv) at <string>:6:5" in found[0]


def test_no_warning_when_the_int_cell_does_not_reach_the_loss():
    src = """\
input x: float = 2.5
output y: float
output n: int
global a: int[2]
func main() {
    n += int(x)
    a[0] += int(x)
    y += float(a[1])
    y += x * x
    if x > 1.0 {
        y += x
    } fi x > 1.0
}
"""
    g, found = gradient_and_warnings(src, "y", ["x"], {"x": 2.5})
    assert g["x"] == 6.0 and found == []
    assert len(lossy_paths(rvm.assemble(src), "n", ["x"])) == 1


def test_a_log_number_path_is_never_a_silent_zero():
    # the example: y = x through an lns cell, which carries the derivative of its
    # value: the gradient is 1; through an int cell the path is reported, never a silent 0
    src = """\
.fixed 16
input x: fixed = 3.0
output y: fixed
global l: lns
func main() {
    l *= lns(x)
    y += fixed(l)
    l /= lns(x)
}
"""
    g, found = gradient_and_warnings(src, "y", ["x"], {"x": 3.0})
    # lns cells carry the derivative of their value (docs/ad.md): no warning, dy/dx = 1
    assert abs(g["x"] - 1.0) < 1e-9 and found == []
    # ... and through an int cell the path is still reported
    through_int = src.replace("global l: lns", "global l: lns\nglobal k: int").replace(
        "    y += fixed(l)\n", "    k += int(l)\n    y += fixed(k)\n    k -= int(l)\n")
    g, found = gradient_and_warnings(through_int, "y", ["x"], {"x": 3.0})
    assert g["x"] == 0.0 and found and "through int cell k, converted from l" in found[0]


@pytest.mark.parametrize("path", sorted(glob.glob("programs/**/*.rasm", recursive=True)))
def test_no_example_program_warns(path):
    try:
        prog = rvm.assemble(path)
    except rvm.RVMError:
        pytest.skip("a library file, not a program")
    ins = [g.name for g in prog.globals if g.is_input and g.type in DIFFERENTIABLE]
    for g in prog.globals:
        if g.is_output and g.type in DIFFERENTIABLE and ins:
            name = g.name if g.length is None else f"{g.name}[0]"
            assert lossy_paths(prog, name, ins) == []


THROUGH_A_STATEMENT = """\
input x: float = 2.5
input c: float = 1.5
output y: float
output g: float

func f(out: float, x: float, c: float) {
    local k: int
    k += int(c)
    out += x * float(k)
    k -= int(c)
}

func main() {
    g += grad f(x, c) wrt x
    y += g * x
}
"""


def test_a_conversion_inside_a_derivative_statement_is_seen():
    """The analysis looks through a derivative statement's nested run (issue 20): g = int(c),
    so y = g x depends on c through f's int cell k, and the gradient's 0 for c is warned
    about; x's own path (through the statement's wrt and f's float cells) is not."""
    g, found = gradient_and_warnings(THROUGH_A_STATEMENT, "y", ["c", "x"])
    assert g["c"] == 0.0 and g["x"] == 2.0
    assert len(found) == 1
    assert found[0].startswith("the loss y depends on c, x through int cell k (a local of f), "
                               "converted from c (a parameter of f) at <string>:8:5")
    prog = rvm.assemble(THROUGH_A_STATEMENT)
    assert lossy_paths(prog, "y", ["x"]) == []
    assert [p.where for p in lossy_paths(prog, "g", ["c"])] == ["<string>:8:5", "<string>:10:5"]
    jvp_text = THROUGH_A_STATEMENT.replace("output g: float", "output g: float\ninput v: float") \
        .replace("g += grad f(x, c) wrt x", "g += jvp f(x, c) wrt x along v")
    prog = rvm.assemble(jvp_text)
    assert [p.where for p in lossy_paths(prog, "y", ["c"])] == ["<string>:9:5", "<string>:11:5"]
    assert [p.where for p in lossy_paths(prog, "y", ["v"])] == []
