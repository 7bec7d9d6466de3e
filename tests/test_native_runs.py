"""Native forward and backward runs (issue 16): Machine.run, rvm.run, rvm.roundtrip and
`rvm run` run compiled C from a boundary, and every example program gives the interpreter's
final state, steps and statistics bit for bit, both ways; a trap is the interpreter's."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import rvm
from isa.derivatives import DERIVATIVE_FAMILIES
from rvm import native, oneshot
from rvm.errors import StepLimit, Trap

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

EXAMPLES = sorted(p.relative_to(ROOT).as_posix() for p in
                  list((ROOT / "programs").rglob("*.rasm")) + list((ROOT / "programs").rglob("*.ja"))
                  if "lib" not in p.parts)


def state(m: rvm.Machine) -> tuple:
    return (m.mem.tobytes(), m.stack().tobytes(), m.stats, m.t, m.pc, m.status, m.direction,
            m.depth)


def trap_of(run) -> tuple | None:
    try:
        run()
    except Trap as e:
        return (type(e), str(e), e.step, e.pc, e.direction, e.values)
    return None


@pytest.mark.parametrize("path", EXAMPLES)
def test_every_example_runs_natively_both_ways_as_the_interpreter(path):
    prog = rvm.load(ROOT / path)
    try:
        native.generate(prog)
    except native.Unsupported as e:     # `trace`, derivative statements: not covered
        assert any(f"`{fam}" in str(e) for fam in ("trace", *DERIVATIVE_FAMILIES)), str(e)
        m = rvm.Machine(prog)
        with pytest.raises(native.Unsupported):
            m.compile()
        return
    nat, ref = rvm.Machine(prog, native=True, trace=lambda e: None), \
        rvm.Machine(prog, native=False, trace=lambda e: None)
    for m in (nat, ref):
        m.reset()
    traps = [trap_of(lambda m=m: m.run()) for m in (nat, ref)]
    assert traps[0] == traps[1]
    assert state(nat) == state(ref)
    if traps[0] is not None:                     # programs/debug/average.rasm
        assert nat.core.native_runs == 0 and nat.core.native_run_bails == 1
        return
    assert nat.core.native_runs == 1
    for m in (nat, ref):                         # back to the start, by the run
        m.run(-1)
    assert state(nat) == state(ref) and nat.core.native_runs == 2
    for m in (nat, ref):                         # from a fresh end state, backward
        m.reset_end(m.outputs())
    for m in (nat, ref):
        m.reset_end({g.name: ref.read(g.name) for g in prog.globals if g.is_output})
    traps = [trap_of(lambda m=m: m.run(-1)) for m in (nat, ref)]
    assert traps[0] == traps[1] and state(nat) == state(ref)


def test_a_trap_reports_what_the_interpreter_reports_and_the_machine_goes_on():
    prog = rvm.assemble("programs/rfibn.rasm")
    nat, ref = rvm.Machine(prog, native=True), rvm.Machine(prog, native=False)
    for m in (nat, ref):
        m.reset_end({"n": 3, "z": 100})          # not an end state: the loop's join traps
    traps = [trap_of(lambda m=m: m.run(-1)) for m in (nat, ref)]
    assert traps[0] is not None and traps[0] == traps[1]
    assert state(nat) == state(ref)
    assert nat.core.native_run_bails == 1
    for m in (nat, ref):                         # from the trap, back to where it began
        m.run(+1)
    assert state(nat) == state(ref)
    for m in (nat, ref):
        m.reset({"n": 0, "z": 100})
        m.run()
    assert state(nat) == state(ref) and nat.read("n") == 12 and nat.core.native_runs == 1


def test_a_step_limit_is_the_interpreters():
    prog = rvm.assemble("programs/accumulate.rasm")
    nat, ref = rvm.Machine(prog, native=True), rvm.Machine(prog, native=False)
    for limit in (3, 1000, 3004):
        for m in (nat, ref):
            m.reset({"n": 1000})
        traps = [trap_of(lambda m=m, k=limit: m.run(max_steps=k)) for m in (nat, ref)]
        assert traps[0] is not None and traps[0][0] is StepLimit and traps[0] == traps[1]
        assert state(nat) == state(ref)
    for m in (nat, ref):
        m.reset({"n": 1000})
        m.run(max_steps=10_000)
    assert state(nat) == state(ref) and nat.core.native_runs == 1


def test_breakpoints_and_ad_keep_the_interpreter():
    prog = rvm.assemble("programs/besselj_rec.rasm")
    m = rvm.Machine(prog, native=True)
    m.set_breakpoints([5])
    m.reset()
    assert m.advance() == "break" and m.core.native_runs == 0
    m.set_breakpoints([])
    m.run()
    m.reset()
    m.run()
    assert m.core.native_runs == 1
    assert rvm.grad(prog, of="out", wrt="z", machine=m)["z"] != 0.0
    assert m.core.native_runs == 1                # the AD runs were interpreted


def test_the_build_starts_by_itself_after_a_few_runs(monkeypatch):
    monkeypatch.delenv("RVM_NATIVE", raising=False)
    prog = rvm.assemble("programs/besselj_rec.rasm")
    m = rvm.Machine(prog)
    assert m.native == "not compiled"
    for _ in range(rvm.Machine.NATIVE_AFTER - 1):
        m.reset()
        m.run()
    assert m._native_build is None               # not yet
    m.reset()
    m.run()
    assert m._native_build is not None           # the 8th run starts it in a thread
    m._native_build.join(60)
    m.reset()
    m.run()                                      # installs it, and runs natively
    assert m.native.startswith("native") and m.core.native_runs == 1
    off = rvm.Machine(prog, native=False)
    for _ in range(2 * rvm.Machine.NATIVE_AFTER):
        off.reset()
        off.run()
    assert off._native_build is None and off.native == "off (native=False)"
    monkeypatch.setenv("RVM_NATIVE", "0")
    env = rvm.Machine(prog)
    for _ in range(2 * rvm.Machine.NATIVE_AFTER):
        env.reset()
        env.run()
    assert env._native_build is None and env.core.native_runs == 0


def test_one_shot_runs_and_round_trips_go_native():
    prog = rvm.assemble("programs/oscillator.rasm")
    want = rvm.run(prog, {"steps": 50}).outputs
    m = oneshot.entry(prog).local.slots[("run", ())].machine
    m.compile()
    for _ in range(3):
        assert rvm.run(prog, {"steps": 50}).outputs == want
    assert m.core.native_runs == 3
    rt = rvm.roundtrip(prog, {"steps": 50})
    assert rt.outputs == want and m.core.native_runs == 5
    fresh = rvm.roundtrip(rvm.assemble("programs/oscillator.rasm"), {"steps": 50})
    assert (rt.drift, rt.steps, rt.exact) == (fresh.drift, fresh.steps, fresh.exact)


def test_the_cli_runs_natively_on_request():
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "rvm.cli", "run", *args], cwd=ROOT,
                              capture_output=True, text=True)
    a = cli("programs/rfibn.rasm", "n=0", "z=100", "--native", "--stats")
    b = cli("programs/rfibn.rasm", "n=0", "z=100", "--stats")
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout and "n = 12" in a.stdout
    strip = [[ln for ln in r.stderr.splitlines() if "seconds" not in ln and "ns_per" not in ln]
             for r in (a, b)]
    assert strip[0] == strip[1]
    c = cli("programs/debug/average.rasm", "--native")       # a trap: the interpreter's
    d = cli("programs/debug/average.rasm")
    assert c.returncode == d.returncode != 0 and c.stderr == d.stderr


def test_a_long_native_run_is_the_interpreters():
    prog = rvm.assemble("programs/accumulate.rasm")
    m, ref = rvm.Machine(prog, native=True), rvm.Machine(prog, native=False)
    for x in (m, ref):
        x.reset({"n": 1_000_000})
        x.run()
    assert state(m) == state(ref) and m.core.native_runs == 1
    assert m.read("x") == 1_000_000.0


@pytest.mark.parametrize("name", ["diffusion.rasm", "leapfrog.rasm"])
def test_the_tracer_runs_its_moves_natively(name):
    from rvm.trace import strategies as S
    from rvm.trace.machine_run import StepProgram, run_schedule

    prog = rvm.load(ROOT / "programs" / "trace" / name)
    s = S.bennett(64, 4, 3)
    runs = []
    for flag in (True, False):
        step = StepProgram(prog, native=flag)
        run = run_schedule(step, s.schedule(), 64)
        runs.append((run.forward, run.backward, run.peak, run.instructions, run.work_cells,
                     run.result.tobytes(), run.clean, run.matches_direct))
        if flag:
            assert step.machine.core.native_runs >= run.moves      # every move, and direct()
        else:
            assert step.machine.core.native_runs == 0
    assert runs[0] == runs[1] and runs[0][-2:] == (True, True)
