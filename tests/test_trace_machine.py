"""Schedules run on the real machine: clean finish, s_N equal to direct execution, and the
measured moves and peak checkpoints equal to the cost model's."""
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm.trace import strategies as S
from rvm.trace.machine_run import StepProgram, StepProgramError, run_schedule
from rvm.trace.pebble import BWD, COPY, FWD, IllegalMove, Move
from rvm.trace.report import machine_report

TRACE_PROGRAMS = Path(__file__).resolve().parent.parent / "programs" / "trace"


@pytest.fixture(scope="module", params=["diffusion.rasm", "leapfrog.rasm"])
def step(request):
    return StepProgram(rvm.load(TRACE_PROGRAMS / request.param))


def schedules(n):
    return [S.bennett1973(n), S.bennett(n, 2), S.bennett(n, 3), S.bennett(n, 2, levels=2),
            S.knill(n), S.knill(n, 7), S.periodic(n), S.periodic(n, 7)]


@pytest.mark.parametrize("n", [1, 2, 23])
def test_every_strategy_runs_clean_and_matches_the_model(step, n):
    _, per_step = step.forward(step.initial)
    direct = step.direct(n)
    for s in schedules(n):
        run = run_schedule(step, s.schedule(), n, record=True)
        assert run.clean, (s.label, run.problem)
        assert run.matches_direct and np.array_equal(run.result, direct)
        assert (run.forward, run.backward, run.peak) == (s.forward, s.backward, s.peak), s.label
        assert run.instructions == s.moves * per_step     # backward runs as long as forward
        assert max(run.live) == run.peak and run.live[-1] == 1 and run.left == []


def test_bennett_k4_four_levels_on_the_machine():
    step = StepProgram(rvm.load(TRACE_PROGRAMS / "diffusion.rasm"))
    s = S.bennett(256, 4, 4)
    run = run_schedule(step, s.schedule(), 256)
    r = machine_report(s, run, step.state_cells)
    assert (r.moves, r.forward, r.backward) == (2401, 1201, 1200)
    assert (r.peak_checkpoints, r.peak_states) == (13, 14)
    assert r.clean and r.matches_direct and r.checked == "machine"
    assert r.instructions == 2401 * 226
    assert r.peak_cells == 14 * 16 + run.work_cells and r.peak_bits == 64 * r.peak_cells
    assert r.knill_at_peak == S.knill(256, 13).moves and r.gap > 1


def test_knill_64_on_the_machine():
    step = StepProgram(rvm.load(TRACE_PROGRAMS / "leapfrog.rasm"))
    s = S.knill(64, 7)
    run = run_schedule(step, s.schedule(), 64)
    assert run.clean and run.matches_direct
    assert (run.moves, run.peak) == (s.moves, 7) == (531, 7)


def test_initial_state_and_parameters_from_values():
    prog = rvm.load(TRACE_PROGRAMS / "diffusion.rasm")
    u0 = [0.0] * 7 + [2.0] + [0.0] * 8
    step = StepProgram(prog, {"u": u0})
    assert step.decode(step.initial)["u"][7] == 2.0
    run = run_schedule(step, S.knill(10).schedule(), 10)
    assert run.clean and run.matches_direct


FLOAT_STEP = """
inout  x: float = 0.1
output x_next: float
const  big: float = 1e16
func main() {
    x_next += x
    x_next += big
}
"""


def test_a_step_that_does_not_uncompute_to_zero_is_not_clean():
    # fl(fl(0.1 + 1e16) - 1e16) - 0.1 != 0: the backward run leaves x_next nonzero
    step = StepProgram(rvm.assemble(FLOAT_STEP))
    run = run_schedule(step, S.bennett1973(3).schedule(), 3)
    assert not run.clean
    assert "did not come back to zero" in run.problem and "(uncompute 1)" in run.problem


GARBAGE_STEP = """
inout  s: int = 1
output s_next: int
global junk: int
func main() {
    s_next += s
    inc s_next
    inc junk
}
"""


def test_a_step_that_leaves_work_globals_is_not_clean():
    step = StepProgram(rvm.assemble(GARBAGE_STEP))
    run = run_schedule(step, S.bennett1973(2).schedule(), 2)
    assert not run.clean and "junk" in run.problem


def test_a_program_without_a_next_state_is_rejected():
    with pytest.raises(StepProgramError, match="NAME_next"):
        StepProgram(rvm.load(Path(__file__).resolve().parent.parent / "programs" / "rfib.rasm"))
    with pytest.raises(StepProgramError, match="type and length"):
        StepProgram(rvm.assemble("inout a: int[2]\noutput a_next: int[3]\nfunc main() {\n}\n"))


def test_illegal_moves_are_refused_on_the_machine_too():
    step = StepProgram(rvm.assemble(GARBAGE_STEP.replace("    inc junk\n", "")))
    with pytest.raises(IllegalMove, match="s_1 is needed"):
        run_schedule(step, [Move(FWD, 2)], 2)
    run = run_schedule(step, [Move(FWD, 1), Move(FWD, 2), Move(BWD, 1), Move(COPY, 2)], 2)
    assert run.clean and step.decode(run.result) == {"s": 3}


def test_a_step_that_changes_its_state_is_not_clean():
    src = GARBAGE_STEP.replace("    inc junk\n", "    inc s\n").replace("global junk: int\n", "")
    run = run_schedule(StepProgram(rvm.assemble(src)), S.bennett1973(2).schedule(), 2)
    assert not run.clean and "(compute 1): compute: the step changed its state s" in run.problem
