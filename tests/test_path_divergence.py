"""A run back that does not retrace the run it undoes (issue 19): float rounding flips a join's
condition, or a cell that never rounds is not restored.  Machine runs, gradients (interpreted,
fast and native) and round trips then fail with PathDivergence naming the join, never return a
number."""
from __future__ import annotations

import pytest

import rvm
from rvm import PathDivergence, native
from rvm.cli import main

FLIP = """\
inout a: float = 0.1
inout d: float = 0.1
inout b: float = 0.2
inout k: int
output y: float
func main() {
    if a == d {
        inc k
        y += a * b
    } fi a == d
    a += b
}
"""

INT_DRIFT = """\
inout a: float = 0.1
inout b: float = 0.2
inout k: int
output y: float
func main() {
    k += int(a * 1e17)
    a += b
    a -= b
    y += a * b
}
"""


@pytest.fixture
def flip(tmp_path):
    path = tmp_path / "flip.rasm"
    path.write_text(FLIP)
    return path


def test_a_run_back_on_another_path_names_the_join_whose_direction_changed(flip):
    m = rvm.Machine(rvm.assemble(flip))
    m.reset()
    assert m.run(+1) == "end" and m.t == 7
    with pytest.raises(PathDivergence) as e:
        m.run(-1)
    err = e.value
    assert err.location == (str(flip), 10, 7)            # the `fi a == d`
    assert err.instruction == "join if1 if a != d" and err.direction == -1
    assert err.values == {"a": 0.10000000000000003, "d": 0.1}
    assert err.step == 2
    assert "line 10 (`} fi a == d`)" in err.detail
    assert "came from line 9 (`y += a * b`)" in err.detail
    assert "sent it to line 7 (`if a == d {`)" in err.detail
    assert "Test an int or fixed cell" in err.detail


def test_a_run_back_from_the_end_state_is_not_a_return_trip(flip):
    m = rvm.Machine(rvm.assemble(flip))
    m.reset_end({"a": 0.30000000000000004, "d": 0.1, "b": 0.2, "k": 1, "y": 0.02})
    assert m.run(-1) == "start" and m.t < 0        # no origin there: nothing to retrace


@pytest.mark.parametrize("use_native", [False, True])
def test_gradients_fail_instead_of_returning_zero(flip, use_native, tmp_path, monkeypatch):
    if use_native and native.compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(PathDivergence):
        rvm.grad(flip, of="y", wrt="a,b")
    f = rvm.grad_fn(flip, of="y", wrt="a,b", native=use_native)
    ok = {"a": 0.5, "d": 0.25}
    assert f(ok) == {"a": 0.0, "b": 0.0} and f(ok) == {"a": 0.0, "b": 0.0}   # the fast path
    assert f.fast is not None
    with pytest.raises(PathDivergence, match="line 10"):
        f({})                                   # the fast path hands it to the general one
    g = f({"a": 0.25, "d": 0.25})               # the then-branch, retraced exactly
    assert (g["a"], g["b"]) == (0.2, 0.25)


def test_a_cell_that_never_rounds_must_come_back(tmp_path):
    path = tmp_path / "intdrift.rasm"
    path.write_text(INT_DRIFT)
    with pytest.raises(PathDivergence, match=r"did not restore k \(it is -4, it was 0\)"):
        rvm.grad(path, of="y", wrt="a,b")
    with pytest.raises(PathDivergence):
        rvm.roundtrip(path)
    f = rvm.grad_fn(path, of="y", wrt="a,b", native=False)
    exact = {"a": 0.5, "b": 0.25}               # a + b - b == a: nothing drifts
    assert f(exact) == f(exact) == {"a": 0.25, "b": 0.5}
    assert f.fast is not None
    with pytest.raises(PathDivergence):
        f({})


def test_the_cli_fails_with_the_trap_exit_code(flip, capsys):
    assert main(["grad", str(flip), "--of", "y", "--wrt", "a,b"]) == 3
    err = capsys.readouterr().err
    assert "PathDivergence" in err and "} fi a == d" in err
    assert main(["run", str(flip), "--roundtrip"]) == 3
    assert "PathDivergence" in capsys.readouterr().err


def test_the_roundtrip_api_fails_on_another_path(flip):
    with pytest.raises(PathDivergence):
        rvm.roundtrip(flip)
    assert rvm.roundtrip(flip, {"a": 0.5, "b": 0.25}).drift == {}
