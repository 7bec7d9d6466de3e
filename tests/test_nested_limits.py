"""Derivative statements' nested runs obey the run's step cap and Ctrl-C (issue 20).

A `grad`/`jvp` statement runs its callee as nested runs inside one instruction of the outer
run (rvm/_nested.pxi).  `max_steps` counts every instruction those runs execute, however deep:
the run stops at the cap with StepLimit naming the statement (Machine.run, rvm.run, rvm.grad,
rvm.jvp, `rvm run`, exit 4), and a SIGINT stops a long nested run as it stops an outer one
(KeyboardInterrupt; `rvm run` exits 130).  A machine stopped inside a nested run cannot go on:
it says so until it is reset."""
from __future__ import annotations

import _thread
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import rvm
from rvm import _core
from rvm.cli import main as cli_main
from rvm.errors import AssertionTrap, NestingError, RVMError, StepLimit

# f counts i up to n and back down around out += x*x: 4n + 10 nested instructions per pass
LONG = """\
input  x: float = 0.5
input  n: int = 1000
output g: float
output y: float

func f(out: float, x: float, n: int) {
    local i: int
    from i == 0 {
        inc i
    } until i == n
    out += x * x
    from i == n {
        dec i
    } until i == 0
}

func main() {
    y += x
    g += grad f(x, n) wrt x
}
"""
STATEMENT_LINE = 19          # `g += grad f(x, n) wrt x`


def _prog(text: str = LONG, name: str = "long.rasm"):
    return rvm.assemble(text, filename=name)


def _machine(n: int, text: str = LONG, name: str = "long.rasm") -> rvm.Machine:
    m = rvm.Machine(_prog(text, name), native=False)
    m.write("x", 0.5)
    m.write("n", n)
    return m


def _statement_pc(prog) -> int:
    return next(pc for pc in range(len(prog.code))
                if prog.location(pc) and prog.location(pc)[1] == STATEMENT_LINE)


def _total_steps(n: int) -> int:
    m = _machine(n)
    m.run()
    return m.stats["steps"]


def test_max_steps_stops_a_grad_statement_of_a_hundred_million_steps():
    """n = 10^7: the statement's nested runs would take about 1.6e8 steps; the run stops at
    the cap inside them, naming the statement, with the steps the cap allows."""
    m = _machine(10 ** 7)
    prog = m.program
    with pytest.raises(StepLimit) as e:
        m.run(max_steps=100_000)
    err = e.value
    assert err.pc == _statement_pc(prog)
    assert err.location[1:] == (STATEMENT_LINE, 5)
    assert err.location[0].endswith("long.rasm")
    assert "the step limit of 100000 instructions is used up inside the nested runs of this " \
           "derivative statement" in str(err)
    assert "it stopped in f at " in str(err)
    assert 99_999 <= m.stats["steps"] <= 100_000
    assert m.core.nest_stop == (_core.NEST_STOP_LIMIT, _statement_pc(prog))
    # stopped inside the nested run: the machine says it cannot go on, until reset
    for move in (lambda: m.run(), lambda: m.run(-1), lambda: m.step(1),
                 lambda: m.advance(+1)):
        with pytest.raises(RVMError, match=r"stopped inside the nested run of the derivative "
                           r"statement at long.rasm:19:5 \(the step limit\): it cannot go on or back from there; reset it"):
            move()
    m.reset()
    m.write("x", 0.5)
    m.write("n", 3)
    m.run()
    assert m.read("g") == 1.0 and m.read("y") == 0.5
    assert m.core.nest_stop == (0, -1)


def test_the_cap_counts_outer_and_nested_steps_exactly():
    """T = every instruction of the run (steps, nested ones included, as reported before the
    cap existed: 16010 at n = 1000, the build before it too).  max_steps = T runs; T - 1 stops at the
    outer level after the statement (the machine can go on and gives the same values); a cap
    that ends inside the nested runs stops there; one that leaves no room for them stops
    before the statement (it can go on)."""
    T = _total_steps(1000)
    assert T == 16010
    ref = rvm.run(_prog(), {"n": 1000}).outputs
    assert ref["g"] == 1.0

    m = _machine(1000)
    assert m.run(max_steps=T) == "end"
    assert m.stats["steps"] == T and m.read("g") == ref["g"]

    m = _machine(1000)
    with pytest.raises(StepLimit) as e:
        m.run(max_steps=T - 1)
    assert str(e.value).startswith("long.rasm:20:1: StepLimit: the step limit of 16009 "
                                   "instructions is used up\n")
    assert "nested" not in e.value.detail
    assert m.core.nest_stop == (0, -1) and m.stats["steps"] == T - 1
    assert m.run() == "end" and m.read("g") == ref["g"] and m.stats["steps"] == T

    for cap in (4, 100, 8000, T - 3):
        m = _machine(1000)
        with pytest.raises(StepLimit, match="inside the nested runs"):
            m.run(max_steps=cap)
        assert cap - 1 <= m.stats["steps"] <= cap

    # the statement is the 3rd instruction (enter main, y += x): caps 2 and 3 leave it no room
    for cap in (2, 3):
        m = _machine(1000)
        with pytest.raises(StepLimit, match="the next instruction is a derivative statement, "
                           "and its nested runs count as steps too") as e:
            m.run(max_steps=cap)
        assert e.value.pc == _statement_pc(m.program) and m.core.nest_stop == (0, -1)
        assert m.stats["steps"] == 2
        assert m.run() == "end" and m.read("g") == ref["g"]


def test_step_and_advance_count_a_statement_as_one_step():
    """The debugger's moves (step, advance) count the machine's own instructions: stepping
    over a derivative statement runs its nested runs whole."""
    m = _machine(1000)
    assert m.step(2) == 2
    assert m.step(1) == 1 and m.t == 3 and m.read("g") == 1.0
    assert m.advance(+1, 1) == "boundary" and m.status == "end"
    assert m.step(1, -1) == 1 and m.read("g") == 1.0
    assert m.step(1, -1) == 1 and m.read("g") == 0.0


def test_rvm_run_grad_and_jvp_obey_max_steps():
    prog = _prog()
    big = {"n": 10 ** 7}
    for call in (lambda: rvm.run(prog, big, max_steps=50_000),
                 lambda: rvm.grad(prog, of="g", wrt=["x"], inputs=big, max_steps=50_000),
                 lambda: rvm.jvp(prog, big, {"x": 1.0}, max_steps=50_000)):
        with pytest.raises(StepLimit, match="50000 instructions is used up inside the nested "
                           "runs") as e:
            call()
        assert e.value.location[1:] == (STATEMENT_LINE, 5)
    # the same calls with room give the derivative of g = 2x: d/dx = 2 (a Hessian through
    # the statement's second-order mode), and the outputs
    small = {"n": 10}
    assert rvm.grad(prog, of="g", wrt=["x"], inputs=small, max_steps=10 ** 6)["x"] == 2.0
    assert rvm.jvp(prog, small, {"x": 1.0}, max_steps=10 ** 6)["g"] == 2.0
    assert rvm.run(prog, small, max_steps=10 ** 6).outputs["g"] == 1.0
    # a Hessian would differentiate the statement twice: refused by name, cap or not
    with pytest.raises(NestingError, match="tangent-over-adjoint"):
        rvm.hessian(prog, of="g", wrt=["x"], inputs=small, max_steps=10 ** 6)


NESTED2 = """\
input  x: float = 0.5
input  n: int = 1000
output h: float

func f(out: float, x: float, n: int) {
    local i: int
    from i == 0 {
        inc i
    } until i == n
    out += x * x * x
    from i == n {
        dec i
    } until i == 0
}

func df(out: float, x: float, n: int) {
    local g: float
    g += grad f(x, n) wrt x
    out += g * g
    g -= grad f(x, n) wrt x
}

func main() {
    h += grad df(x, n) wrt x
}
"""


def test_the_cap_reaches_the_second_nesting_level():
    """h = d/dx (3x^2)^2 = 36 x^3: the long loop is two statements deep."""
    prog = _prog(NESTED2, "n2.rasm")
    assert rvm.run(prog, {"n": 10}).outputs["h"] == pytest.approx(36 * 0.5 ** 3, rel=1e-15)
    m = _machine(10 ** 7, NESTED2, "n2.rasm")
    with pytest.raises(StepLimit, match="inside the nested runs") as e:
        m.run(max_steps=200_000)
    assert e.value.location[1:] == (24, 5)          # the outermost statement
    assert "it stopped in f at " in str(e.value)
    # steps counts completed instructions: the two statements under way are not
    assert m.stats["steps"] == 200_000 - 2


def test_a_trap_inside_a_nested_run_names_its_statement():
    text = LONG.replace("    out += x * x\n", "    out += x * x\n    assert n < 5\n")
    m = _machine(1000, text, "t.rasm")
    with pytest.raises(AssertionTrap) as e:
        m.run()
    assert e.value.location[1] == 12              # the assert, where it happened
    assert "(inside the nested run of the derivative statement at t.rasm:20:5; the machine " \
           "cannot go on from here: reset it)" in str(e.value)
    with pytest.raises(RVMError, match=r"\(a trap\): it cannot go on"):
        m.run()


FOREVER = LONG.replace("n: int = 1000", "n: int = -1")      # i counts up to 2^64 - 1


@pytest.mark.usefixtures("no_gc")
def test_ctrl_c_stops_a_nested_run_in_python():
    """A SIGINT (interrupt_main) during a nested run that would not end for centuries raises
    KeyboardInterrupt from Machine.run, as for an outer run; the machine then says where it
    stopped."""
    m = _machine(-1, FOREVER)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            m.run()
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 60
    assert m.core.nest_stop == (_core.NEST_STOP_SIGNAL, _statement_pc(m.program))
    assert m.stats["steps"] > 1000
    with pytest.raises(RVMError, match=r"\(interrupted\): it cannot go on"):
        m.run()
    m.reset()
    m.write("x", 0.5)
    m.write("n", 2)
    assert m.run() == "end" and m.read("g") == 1.0


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_sigint_stops_rvm_run_inside_a_nested_run(tmp_path):
    """`rvm run` on a statement whose nested run would not end: a real SIGINT gives exit 130
    and `rvm: interrupted`, as for an outer run (tests/test_cli.py)."""
    prog = tmp_path / "forever.rasm"
    prog.write_text(FOREVER)
    p = subprocess.Popen([sys.executable, "-m", "rvm.cli", "run", str(prog)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # interrupt the nested run, not the start-up: wait for 2.5 CPU seconds of the child
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None and _cpu_seconds(p.pid) < 2.5:
        time.sleep(0.1)
    assert p.poll() is None, "the run ended by itself"
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("the nested run did not stop on SIGINT") from None
    assert p.returncode == 130 and err == "rvm: interrupted\n" and out == ""


def test_rvm_run_max_steps_exit_code(tmp_path, capsys):
    prog = tmp_path / "long.rasm"
    prog.write_text(LONG)
    code = cli_main(["run", str(prog), "n=10000000", "--max-steps", "5000"])
    err = capsys.readouterr().err
    assert code == 4
    assert err.startswith(f"rvm: {prog}:{STATEMENT_LINE}:5: StepLimit: the step limit of 5000 "
                          f"instructions is used up inside the nested runs of this derivative "
                          f"statement")
    # --native: the native code runs the statement and gives up at the cap; the interpreter
    # runs again and reports the same
    first = err
    code = cli_main(["run", str(prog), "n=10000000", "--max-steps", "5000", "--native"])
    assert code == 4 and capsys.readouterr().err == first
    # with room: the values
    assert cli_main(["run", str(prog), "n=10", "--max-steps", "1000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"] == {"g": 1.0, "y": 0.5}


def test_native_code_runs_two_levels_of_statements():
    m = rvm.Machine(_prog(NESTED2, "n2.rasm"))
    m.compile()
    m.reset({"n": 10})
    m.run()
    assert m.core.native_runs == 1 and m.read("h") == pytest.approx(36 * 0.5 ** 3, rel=1e-15)


def test_saddle_and_particle_keep_their_values_with_a_cap():
    """The GradBench nested programs under a cap that does not bind give the uncapped values
    bit for bit (and the same steps); one that binds stops inside their statements."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "programs" / "gradbench"
    for name, out in (("saddle", "r1"), ("particle", "w")):
        prog = rvm.assemble((root / f"{name}.rasm").read_text(), filename=f"{name}.rasm")
        free = rvm.run(prog, {"omode": 0, "imode": 1})
        capped = rvm.run(prog, {"omode": 0, "imode": 1}, max_steps=free.stats["steps"])
        assert np.array_equal(np.atleast_1d(free.outputs[out]).view(np.int64),
                              np.atleast_1d(capped.outputs[out]).view(np.int64))
        assert capped.stats["steps"] == free.stats["steps"]
        with pytest.raises(StepLimit, match="inside the nested runs"):
            rvm.run(prog, {"omode": 0, "imode": 1}, max_steps=free.stats["steps"] // 2)


def test_the_debugger_steps_over_a_statement_and_restarts_after_a_nested_trap(tmp_path,
                                                                               capsys):
    """`step` over a statement is one step (its nested runs whole, under --limit 100), and a
    breakpoint inside its function says it will not stop there; a trap inside a nested run says the machine cannot go on, a move says why, and `goto`
    starts again from the stored start."""
    prog = tmp_path / "t.rasm"
    prog.write_text(LONG.replace("    out += x * x\n", "    out += x * x\n    assert n < 5\n"))
    cmds = tmp_path / "cmds.txt"
    cmds.write_text("break 9\nstep 3\nprint g\n")
    assert cli_main(["debug", str(prog), "x=0.5", "n=3", "-x", str(cmds), "--batch",
                     "--limit", "100"]) == 0
    out = capsys.readouterr().out
    # a breakpoint in f, which only the statement runs: said, not silently never hit
    assert f"Note: f runs inside the nested runs of the derivative statement at {prog}:20: " \
           "the debugger steps over a statement as one instruction and does not stop inside " \
           "its nested runs; this breakpoint stops only where f runs as an ordinary call." \
           in " ".join(out.split())
    assert "(rdb t=3 >) print g\ng = 1.0\n" in out and "changed: g 0.0 -> 1.0, y 0.0 -> 0.5" in out
    cmds.write_text("continue\ngoto 2\nprint y\nprint g\n")
    assert cli_main(["debug", str(prog), "x=0.5", "n=1000", "-x", str(cmds), "--batch"]) == 0
    out = capsys.readouterr().out
    assert "Trap: AssertionTrap: assertion n < 5 is false (inside the nested run of the " \
           f"derivative statement at {prog}:20:5 (`g += grad f(x, n) wrt x`)" in out
    assert "It trapped inside the nested run of a derivative statement: the machine cannot " \
           "go on or back from here (`run` starts again)." in out
    assert "Went to t=2" in out and "y = 0.5" in out and "g = 0.0" in out
    cmds.write_text("continue\nstep\n")
    assert cli_main(["debug", str(prog), "x=0.5", "n=1000", "-x", str(cmds), "--batch"]) == 1
    out = capsys.readouterr().out
    assert "error: the machine stopped inside the nested run of the derivative statement at " \
           f"{prog}:20:5 (`g += grad f(x, n) wrt x`) (a trap): it cannot go on or back from " \
           "there; reset it" in out


@pytest.mark.usefixtures("no_gc")
@pytest.mark.parametrize("call", ["run", "grad", "jvp"])
def test_ctrl_c_stops_the_one_shot_calls_and_they_work_after(call):
    """rvm.run / rvm.grad / rvm.jvp (their reused machines and the gradient sweeps) stop on a
    SIGINT inside a nested run, and the next call, on a reset machine, gives the values."""
    prog = _prog(FOREVER)
    calls = {"run": lambda n: rvm.run(prog, {"n": n}).outputs["g"],
             "grad": lambda n: rvm.grad(prog, of="g", wrt=["x"], inputs={"n": n})["x"],
             "jvp": lambda n: rvm.jvp(prog, {"n": n}, {"x": 1.0})["g"]}
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            calls[call](-1)
    finally:
        timer.cancel()
    assert calls[call](3) == (1.0 if call == "run" else 2.0)
