"""Native code (rvm/native) is invisible: a grad_fn call run as compiled C gives the
interpreter's gradient, loss, steps and words bit for bit, and where the interpreter traps the
native code gives up and the interpreter reports the same error."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import rvm
from rvm import native
from rvm.errors import RVMError, Trap
from test_kernels import BODIES, LOOPS
from test_native_review import wait_native
from test_reversibility import FIXEDS, INTS, programs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def bits(v) -> list:
    return np.asarray(v, dtype=np.float64).reshape(-1).view(np.int64).tolist()


def calls(prog, of: str, wrt: list[str], inputs: list[dict], use_native: bool) -> list:
    """What a GradFn shows from outside over a series of calls (the first one always runs the
    general path; the later ones the fast path, natively or not)."""
    f = rvm.grad_fn(prog, of=of, wrt=wrt, native=use_native)
    assert f.runner.core.native == use_native
    out = []
    for inp in inputs:
        try:
            g = f(dict(inp))
        except (Trap, RVMError) as e:
            out.append(("error", type(e).__name__, str(e)))
            continue
        d = f.last
        out.append(({k: bits(v) for k, v in g.items()}, bits(d.value), d.steps, d.drift))
    return out, f.runner.core.native_bails


def same(prog, of, wrt, inputs, bails: int | None = 0):
    """The native and the interpreted GradFn agree on every call; `bails` = how many calls
    the native code must hand back to the interpreter (None: any)."""
    try:
        native.generate(prog)
    except native.Unsupported:
        assume(False)
    nat, n_bails = calls(prog, of, wrt, inputs, True)
    assert nat == calls(prog, of, wrt, inputs, False)[0]
    if bails is not None:
        assert n_bails == bails
    return nat


@pytest.mark.parametrize("name, of, wrt, inputs", [
    ("besselj_rec.rasm", "out", ["z"], [{"z": 3.0}, {"z": 3.0}, {"z": 0.7}, {"z": -4.25, "nu": 0}]),
    ("umm.rasm", "loss", ["x", "theta"],
     [{}, {"x": [0.5, -1.0, 2.0, 0.25]}, {"theta": np.linspace(-3.0, 3.0, 6)}]),
    ("accumulate.rasm", "x", ["x", "one"], [{"n": 10}, {"n": 100_000}, {"n": 0}]),
    ("oscillator.rasm", "x", ["x", "v", "dt"], [{"steps": 20}, {"steps": 200}]),
])
def test_programs_give_the_interpreters_gradients_bit_for_bit(name, of, wrt, inputs):
    prog = rvm.assemble(ROOT / "programs" / name)
    out = same(prog, of, wrt, inputs)
    assert all(o[0] != "error" for o in out)


def test_besselj_rec_native_values():
    f = rvm.grad_fn(ROOT / "programs" / "besselj_rec.rasm", of="out", wrt="z", native=True)
    assert f.native.startswith("native")
    for _ in range(3):
        g = f({"z": 3.0})
    assert g["z"] == pytest.approx(0.0149981181, abs=1e-10)      # J_2'(3)
    assert f.last.value == pytest.approx(0.486091260585891, rel=1e-14)
    assert f.last.steps == 505 and f.runner.core.native_bails == 0


def test_the_umm_benchmark_program():
    from gen_programs import umm
    prog = rvm.assemble(umm(12, defaults=False))
    rng = np.random.default_rng(1)
    inputs = [{"x": rng.standard_normal(12), "theta": rng.uniform(-3, 3, 66)} for _ in range(3)]
    same(prog, "loss", ["x", "theta"], inputs)


@pytest.mark.filterwarnings("ignore::rvm.ad.ReleasedTangentWarning")
@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("of", ["f", "p"])
def test_loop_bodies_agree_including_traps(body, of):
    """Every kernel body (float and fixed rules, traps mid-loop, bounds, aliasing, indices
    that change): a good first call, then n where some of them trap."""
    prog = rvm.assemble(LOOPS.replace("BODY", body))
    wrt = ["f", "g", "p", "t", "xs", "q"]
    same(prog, of, wrt, [{"n": 2}, {"n": 0}, {"n": 5}, {"n": 9}, {"n": 2, "f": -1.5}],
         bails=None)


def test_a_trap_is_reported_by_the_interpreter_after_a_bail():
    prog = rvm.assemble(LOOPS.replace("BODY", "f += g * g"))
    f = rvm.grad_fn(prog, of="f", wrt=["f"], native=True)
    f({"n": 0})
    f({"n": 0})
    assert f.runner.core.native_bails == 0
    with pytest.raises(Trap, match="not finite|overflow|range"):
        f({"n": 3})
    assert f.runner.core.native_bails == 1
    assert f.last is None                               # no stale Derivatives of a call before
    assert bits(f({"n": 0})["f"]) == bits(1.0)          # and the next call is native again
    assert f.runner.core.native_bails == 1 and f.last.steps > 0


def test_long_runs_resume_after_the_budget_slice():
    """A run longer than the first slice (1 << 16 steps) returns and resumes at a jump."""
    prog = rvm.assemble(ROOT / "programs" / "accumulate.rasm")
    f = rvm.grad_fn(prog, of="x", wrt=["x", "one"], native=True)
    f({"n": 3})
    g = f({"n": 300_000})
    assert f.runner.core.native_bails == 0
    assert g["one"] == 300_000.0 and g["x"] == 1.0
    assert f.last.steps > 600_000


def test_unsupported_programs_say_why_and_stay_interpreted():
    prog = rvm.assemble(ROOT / "programs" / "rfib.rasm")
    with pytest.raises(native.Unsupported, match="call"):
        native.generate(prog)
    with pytest.raises(native.Unsupported):
        native.compile_program(prog)
    stack = rvm.assemble(ROOT / "programs" / "stack_reverse.rasm")
    with pytest.raises(native.Unsupported, match="push"):
        native.generate(stack)


def test_grad_fn_compiles_after_repeated_calls(monkeypatch):
    monkeypatch.delenv("RVM_NATIVE", raising=False)
    f = rvm.grad_fn(ROOT / "programs" / "besselj_rec.rasm", of="out", wrt="z")
    for _ in range(f.NATIVE_AFTER):
        f({"z": 1.0})
    assert not f.runner.core.native and f.native == "not compiled"
    g = f({"z": 1.0})                       # the build starts in a thread; calls go on
    wait_native(f, {"z": 1.0})
    assert f.native.startswith("native") and f({"z": 1.0}) == g
    off = rvm.grad_fn(ROOT / "programs" / "besselj_rec.rasm", of="out", wrt="z", native=False)
    for _ in range(f.NATIVE_AFTER + 2):
        off({"z": 1.0})
    assert not off.runner.core.native and "native=False" in off.native
    monkeypatch.setenv("RVM_NATIVE", "0")
    env = rvm.grad_fn(ROOT / "programs" / "besselj_rec.rasm", of="out", wrt="z")
    for _ in range(f.NATIVE_AFTER + 2):
        env({"z": 1.0})
    assert not env.runner.core.native


def test_unsupported_program_in_auto_mode_keeps_working():
    prog = rvm.assemble(ROOT / "programs" / "besselj.rasm")         # calls: not compiled
    f = rvm.grad_fn(prog, of="out", wrt="z")
    end = time.monotonic() + 60
    while f.native == "not compiled" and time.monotonic() < end:
        g = f({"z": 3.0})
    assert f.native.startswith("interpreted: pc") and "call" in f.native
    assert g["z"] == pytest.approx(0.0149981181, abs=1e-8)


def test_the_cache_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    prog = rvm.assemble(ROOT / "programs" / "umm.rasm")
    first = native.compile_program(prog)
    again = native.compile_program(prog)
    assert first.built and not again.built and first.path == again.path
    assert list(tmp_path.glob("*.so")) == [first.path]


def test_no_compiler_is_a_build_error(monkeypatch, tmp_path):
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sys.modules["rvm.native.build"], "compiler", lambda: None)
    with pytest.raises(native.BuildError, match="no C compiler"):
        native.compile_program(rvm.assemble(ROOT / "programs" / "umm.rasm"))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(programs(), st.booleans(), st.data())
def test_random_programs_agree(src, floats, data):
    """Random programs of int, fixed (or float) and lns updates, branches, loops and with
    blocks: gradient of one fixed (float) cell with respect to all of them, from their
    defaults and from drawn int (and float) inputs."""
    for name, v in zip(FIXEDS, ("0.7", "-1.3", "0.4", "2.1")):       # nonzero derivatives
        src = src.replace(f"inout {name}: fixed\n", f"inout {name}: fixed = {v}\n")
    if floats:
        src = src.replace(".fixed 24", "").replace("fixed", "float")
    try:
        prog = rvm.assemble(src)
    except RVMError:
        assume(False)
    ins = {n: data.draw(st.integers(-(1 << 20), 1 << 20)) for n in INTS}
    if floats:
        ins.update({n: data.draw(st.floats(-100, 100)) for n in FIXEDS})
    same(prog, data.draw(st.sampled_from(FIXEDS)), FIXEDS, [{}, ins, {}], bails=None)


def test_a_non_finite_derivative_hands_the_call_back():
    """sqrt at 0: the value is fine, its derivative is not; the general path reports it."""
    prog = rvm.assemble("inout x: float = 1.0\noutput y: float\n"
                        "func main() {\n    y += sqrt(x)\n}\n")
    out = same(prog, "y", ["x"], [{"x": 4.0}, {"x": 0.0}, {"x": 4.0}])
    assert out[0][0] == {"x": bits(0.25)} and out[1][0] == "error"
    assert "NonFinite" in out[1][1]
