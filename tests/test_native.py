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
from table_statements import statement
from test_kernels import BODIES, LOOPS, TABLE_BODIES, TABLE_POOLS
from test_native_corners import bits, observe, wait_native
from test_reversibility import FIXEDS, INTS, programs

import rvm
from isa.derivatives import DIFFERENTIABLE
from isa.types import FIXED, FLOAT, INT, LNS, TYPE_NAMES
from rvm import native
from rvm.errors import RVMError, Trap

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def same(prog, of, wrt, inputs, bails: int | None = 0):
    """The native and the interpreted GradFn agree on every call; `bails` = how many calls
    the native code must hand back to the interpreter (None: any)."""
    try:
        native.generate(prog)
    except native.Unsupported:
        assume(False)
    # (without the runner's words snapshots: a call the native code hands back leaves them
    # to the general path, which does not write them; f.last does not read them then)
    obs, f = observe(prog, of, wrt, inputs, True)
    nat = [o[:4] for o in obs]
    assert nat == [o[:4] for o in observe(prog, of, wrt, inputs, False)[0]]
    if bails is not None:
        assert f.runner.core.native_bails == bails
    return nat


@pytest.mark.parametrize("name, of, wrt, inputs", [
    ("besselj_rec.rasm", "out", ["z"], [{"z": 3.0}, {"z": 3.0}, {"z": 0.7}, {"z": -4.25, "nu": 0}]),
    ("umm.rasm", "loss", ["x", "theta"],
     [{}, {"x": [0.5, -1.0, 2.0, 0.25]}, {"theta": np.linspace(-3.0, 3.0, 6)}]),
    ("accumulate.rasm", "x", ["x", "one"], [{"n": 10}, {"n": 100_000}, {"n": 0}]),
    ("oscillator.rasm", "x", ["x", "v", "dt"], [{"steps": 20}, {"steps": 200}]),
    # calls and uncalls: parameters, indexed and array arguments, locals, fixed point
    ("besselj.rasm", "out", ["z"], [{"z": 3.0}, {"z": 1.5, "nu": 0}, {"z": -2.0, "nterms": 5}]),
    ("besselj_fixed.rasm", "out", ["z"], [{}, {"nu": 1}, {"nu": 3}]),
    ("poly_uncall.rasm", "y", ["x"], [{}, {}]),
    ("norm.rasm", "res", ["x"], [{}, {"x": [0.5, -2.0, 1e-3]}, {"x": [3.0, 4.0, 12.0]}]),
    ("qr.rasm", "loss", ["A"], [{}, {"A": np.linspace(-2.0, 3.0, 9)}]),
    ("petersen.rasm", "loss", ["x"], [{}, {"x": np.linspace(-1.0, 1.0, 40)}]),
    ("petersen3.rasm", "loss", ["x"], [{}, {}]),
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


# the table's instructions compiled together: each statement writes cells of its own (y<k>_<j>,
# starting as TABLE_POOLS's first cells do) and reads the shared sources, so none disturbs
# another; the loss sums every differentiable target
TABLE_SOURCES = {t: cells[1:] for t, cells in TABLE_POOLS.items()}
TABLE_START = {INT: ("3", "7"), FIXED: ("0.75", "0.3"), FLOAT: ("0.5", "1.25"),
               LNS: ("1.5", "0.5")}


def table_program(cases) -> str:
    cells, body, loss = [], [], []
    for k, case in enumerate(cases):
        ys = [case.op.operand_types[j] for j, kind in enumerate(case.op.operands) if kind == "y"]
        names = [f"y{k}_{j}" for j in range(len(ys))]
        cells += [f"inout {n}: {TYPE_NAMES[t]} = {TABLE_START[t][j]}"
                  for j, (n, t) in enumerate(zip(names, ys))]
        own = {t: [n for n, u in zip(names, ys) if u == t] for t in ys}
        body.append(statement(case.op, own, fn=case.fn, sources=TABLE_SOURCES))
        loss += [f"loss += {n}" if t == FLOAT else f"loss += float({n})"
                 for n, t in zip(names, ys) if t in DIFFERENTIABLE]
    head, main = LOOPS.split("func main() {")
    return (head + "\n".join(cells) + "\ninout loss: float\nfunc main() {" +
            main.replace("BODY", "\n        ".join(body)).rstrip()[:-1] +
            "    " + "\n    ".join(loss) + "\n}\n")


@pytest.mark.filterwarnings("ignore::rvm.ad.ReleasedTangentWarning")
@pytest.mark.parametrize("t", sorted(TABLE_POOLS), ids=lambda t: TYPE_NAMES[t])
def test_every_table_instruction_agrees(t):
    """Every data instruction of the table (each function of a fn family) whose target has
    type t (test_kernels.TABLE_BODIES), in one loop and one compiled program: a new
    instruction is compiled and compared here without an edit."""
    cases = [c for c in TABLE_BODIES if c.op.operand_types[0] == t]
    prog = rvm.assemble(table_program(cases))
    wrt = ["e", "d", "t", "r", "m", "o"] + [g.name for g in prog.globals if g.name[0] == "y"
                                            and g.type in DIFFERENTIABLE]
    out = same(prog, "loss", wrt,
               [{"n": 2}, {"n": 1}, {"n": 0}, {"n": 3, "e": 0.75, "t": 0.6, "v": 12}])
    assert [o[:2] for o in out if o[0] == "error"] == []


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


RECURSIVE = """
inout x: float = 0.5
inout n: int = 8
output y: float
func rf(y: float, x: float, n: int) {
    local n1: int
    local n2: int
    with {
        n1 += n
        dec n1
        n2 += n
        n2 -= 2
    } do {
        if n <= 2 {
            y += x * x
        } else {
            call rf(y, x, n1)
            call rf(y, x, n2)
            y += sin(x)
        } fi n <= 2
    }
}
func down(y: float, x: float, n: int) {
    local n1: int
    with {
        n1 += n
        dec n1
    } do {
        if n > 0 {
            call down(y, x, n1)
        } fi n > 0
    }
    y += x * x
}
func main() {
    call rf(y, x, n)
    uncall rf(y, x, n)
    call rf(y, x, n)
    call down(y, x, DEPTH)
}
"""


@pytest.mark.parametrize("depth", [10, 2500])
def test_recursion_and_deep_calls(depth):
    """Recursive calls and uncalls; deeper than rvm.native's C recursion allows (2000), the
    interpreter runs the call (the same numbers either way)."""
    prog = rvm.assemble(RECURSIVE.replace("DEPTH", str(depth)))
    out = same(prog, "y", ["x"], [{}, {"x": 0.25, "n": 9}, {"n": 3}],
               bails=2 if depth > 2000 else 0)
    assert out[1][0] != "error"


TRACED = ("inout x: float = 2.0\noutput y: float\nfunc main() {\n"
          "    trace \"x\", x\n    y += x * x\n}\n")

STACK = """
inout xs: float[4] = [1.0, -2.0, 3.5, 0.25]
inout c: float = 1.5
inout n: int = 4
output y: float
func main() {
    local s: float
    local k: int
    for i in 0..n {
        xs[i] += c * c
        push xs[i]
    }
    for i in 0..n {
        pop s
        y += s * c
        push s
    }
    k += n
    for i in 0..n {
        dec k
        pop xs[k]
    }
}
"""


def test_the_value_stack_runs_natively():
    """push/pop move a word and its adjoint (the move rule) through the machine's stack;
    an underflow is the interpreter's trap."""
    prog = rvm.assemble(STACK)
    assert native.generate(prog)
    out = same(prog, "y", ["xs", "c"], [{}, {"c": -0.5}, {"xs": [0.5, 0.25, 2.0, -1.0]}])
    assert all(o[0] != "error" for o in out)
    # the cell's adjoint leaves with its word: uses of the zero cell in between add to nothing
    reuse = rvm.assemble("inout x: float = 2.0\ninout a: float = 0.5\noutput y: float\n"
                         "func main() {\n    push x\n    x += a\n"
                         "    y += x * a\n    x -= a\n    pop x\n    y += x * x\n}\n")
    out = same(reuse, "y", ["x", "a"], [{}, {"x": 3.0, "a": -1.5}])
    assert out[1][0] == {"x": bits(6.0), "a": bits(-3.0)}
    popped = rvm.assemble("inout x: float = 2.0\ninout f: int\noutput y: float\n"
                          "func main() {\n    push x\n    if f == 1 {\n        x += 1.0\n"
                          "    } fi f == 1\n    pop x\n    y += x * x\n}\n")
    out = same(popped, "y", ["x"], [{}, {"f": 1}, {"x": 3.0}], bails=1)
    assert out[1][0] == "error" and out[2][0] == {"x": bits(6.0)}


def test_unsupported_programs_say_why_and_stay_interpreted():
    prog = rvm.assemble(TRACED)
    with pytest.raises(native.Unsupported, match="trace"):
        native.generate(prog)
    with pytest.raises(native.Unsupported):
        native.compile_program(prog)


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
    prog = rvm.assemble(TRACED)                                      # trace: not compiled
    f = rvm.grad_fn(prog, of="y", wrt="x")
    end = time.monotonic() + 60
    while f.native == "not compiled" and time.monotonic() < end:
        g = f({"x": 3.0})
    assert f.native.startswith("interpreted: `trace`")
    assert g["x"] == 6.0


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
@given(programs(floats=True), st.booleans(), st.data())
def test_random_programs_agree(src, floats, data):
    """Random programs of int, fixed (or float), lns and float updates (any data instruction
    of the table among them), branches, loops and with blocks: gradient of one fixed (float)
    cell with respect to some of them, from their defaults and from drawn int (and float)
    inputs."""
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
    # wrt a drawn subset: the sweep's activity analysis (rvm/native/activity.py) leaves out the
    # adjoints of cells no wrt cell varies, which must change no gradient bit
    wrt = data.draw(st.lists(st.sampled_from(FIXEDS), min_size=1, max_size=len(FIXEDS),
                             unique=True))
    same(prog, data.draw(st.sampled_from(FIXEDS)), wrt, [{}, ins, {}], bails=None)


def test_a_non_finite_derivative_hands_the_call_back():
    """sqrt at 0: the value is fine, its derivative is not; the general path reports it."""
    prog = rvm.assemble("inout x: float = 1.0\noutput y: float\n"
                        "func main() {\n    y += sqrt(x)\n}\n")
    out = same(prog, "y", ["x"], [{"x": 4.0}, {"x": 0.0}, {"x": 4.0}])
    assert out[0][0] == {"x": bits(0.25)} and out[1][0] == "error"
    assert "NonFinite" in out[1][1]


CALL_TRAPS = """
inout xs: float[4] = [1.0, 2.0, 3.0, 4.0]
inout i: int
inout j: int = 1
inout k: int = 2
inout z: float = 0.5
output y: float
func touch(a: float, b: float) {
    a += 0.5
}
func moves(a: float, i: int) {
    inc i
    a += 1.0
}
func four(v: float[4], a: float) {
    a += v[0] * v[3]
}
func main() {
    call touch(xs[i], xs[j])
    call moves(xs[k], j)
    call four(xs, z)
    y += z * z
    y += xs[0] * xs[1]
}
"""


@pytest.mark.parametrize("inputs", [
    {"i": 0, "j": 1, "k": 2},
    {"i": 1, "j": 1, "k": 2},         # both arguments the same cell, one written: an alias trap
    {"i": 0, "j": 1, "k": 3},
    {"i": 0, "j": 1, "k": 5},         # an indexed argument out of bounds
    {"i": 0, "j": 2, "k": 2},
])
def test_call_binding_traps_agree(inputs):
    """do_call's argument checks and do_return's (an indexed argument whose index the callee
    moved is caught at the return): the native code hands those calls back."""
    prog = rvm.assemble(CALL_TRAPS)
    same(prog, "y", ["xs", "z"], [{"i": 0, "j": 1, "k": 2}, inputs], bails=None)


def test_the_index_of_an_argument_moved_by_the_callee_is_caught():
    """The callee moves the index of its indexed argument through a global: do_return's check
    (the argument must still name the cell it was bound to)."""
    bump = "func bump(a: float) {\n    if k == 1 {\n        inc k\n    } fi k == 2\n" \
           "    a += 1.0\n}\n"
    src = CALL_TRAPS.replace("func main() {", bump + "func main() {").replace(
        "call four(xs, z)", "call four(xs, z)\n    call bump(xs[k])")
    prog = rvm.assemble(src)
    out = same(prog, "y", ["xs", "z"], [{"i": 0, "j": 1, "k": 3}, {"i": 0, "j": 2, "k": 1},
                                        {"i": 0, "j": 1, "k": 3}], bails=1)
    assert out[1][:2] == ("error", "AliasError") and out[0][0] != "error"


def test_cli_prints_and_builds(tmp_path, capsys):
    from rvm.cli import main
    out = tmp_path / "p.c"
    assert main(["native", str(ROOT / "programs" / "besselj_rec.rasm"), "-o", str(out)]) == 0
    text = out.read_text()
    assert "rvm_native_forward" in text and "rvm_native_backward" in text
    assert main(["native", str(ROOT / "programs" / "umm.rasm"), "--build"]) == 0
    assert ".so" in capsys.readouterr().out
    traced = tmp_path / "t.rasm"
    traced.write_text(TRACED)
    assert main(["native", str(traced)]) == 1
    assert "not covered: `trace`" in capsys.readouterr().err


DEEP_LOOP = """
inout x: float = 1.0
inout d: int = 1
inout n: int = 3
output y: float
func down(y: float, x: float, d: int, n: int) {
    local d1: int
    local k: float
    with {
        d1 += d
        dec d1
        k += x
    } do {
        if d > 0 {
            call down(y, x, d1, n)
        } else {
            for i in 0..n {
                y += k
            }
        } fi d > 0
    }
}
func main() {
    call down(y, x, d, n)
}
"""


@pytest.mark.usefixtures("no_gc")
def test_ctrl_c_stops_a_long_native_run_and_the_next_call_is_right():
    """The native code polls for signals every 2^24 steps.  Interrupted 40 calls deep, deeper
    than any run before, it leaves frames the machine had never used: the next call must
    clear them (it runs natively, bails out on them otherwise, and the interpreter would find
    them dirty)."""
    import _thread
    import threading
    prog = rvm.assemble(DEEP_LOOP)
    f = rvm.grad_fn(prog, of="y", wrt=["x"], native=True)
    f({"d": 1, "n": 3})
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        f({"d": 40, "n": 2_000_000_000})        # ~8 s to the end
    timer.join()
    assert time.monotonic() - t0 < 5
    ref = rvm.grad_fn(prog, of="y", wrt=["x"], native=False)
    ref({"d": 40, "n": 4})
    assert bits(f({"d": 40, "n": 4})["x"]) == bits(ref({"d": 40, "n": 4})["x"]) == bits(4.0)
    assert f.runner.core.native_bails == 0
