"""Source-line stepping (step/next and their reverse retrace each other exactly) and the gdb
habits of issue 18: run, start, frame N, x, rwatch, watch CELL if COND, info line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_debug import after, debug, state

import rvm
from rvm.debug.engine import Session

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path("programs")
AVERAGE = PROGRAMS / "debug" / "average.rasm"


@pytest.fixture(autouse=True)
def _in_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name, values", [("rfib.rasm", {"n": 5}), ("isqrt.rasm", {"x": 30}),
                                          ("poly_uncall.rasm", {}),
                                          ("debug/average.rasm", {})])
@pytest.mark.parametrize("over", [False, True])
def test_line_steps_and_their_reverse_retrace_each_other(name, values, over):
    s = Session(rvm.load(PROGRAMS / name), values)
    seen = [state(s.m)]
    for _ in range(400):
        stop = s.step_line(1, +1, over=over)
        if stop.reason != "step":
            break
        seen.append(state(s.m))
        here = s.line_of(s.pc)
        # a forward line step stops at the first instruction of a line it enters
        assert here is not None
    assert len(seen) >= 3 and stop.reason in ("end", "trap")
    if stop.reason == "trap":                     # it stops where the last step stopped
        assert seen.pop() == state(s.m)
    for expected in reversed(seen):
        stop = s.step_line(1, -1, over=over)
        assert state(s.m) == expected, (stop.reason, s.t)


def test_next_steps_over_calls_by_line():
    s = Session(rvm.load(PROGRAMS / "rfib.rasm"), {"n": 5})
    s.step_line(1, +1, over=True)              # into main's body
    while s.program.op_at(s.pc).name != "call":
        s.step_line(1, +1, over=True)
    depth = s.depth
    s.step_line(1, +1, over=True)
    assert s.depth == depth and s.m.read("out") == 5
    s.step_line(1, -1, over=True)
    assert s.program.op_at(s.pc).name == "call" and s.m.read("out") == 0


def test_step_and_stepi(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, AVERAGE, ["next", "next", "stepi", "nexti",
                                                   "reverse-stepi", "reverse-nexti", "info line"])
    assert rc == 0
    assert "t=2  programs/debug/average.rasm:11" in after(out, "next", 1)
    assert "Stepped 1 instruction forward" in after(out, "stepi")
    assert "(rdb t=4 >) reverse-stepi" in out
    assert re.search(r"Line 11 of programs/debug/average.rasm is at pc \d+", out)


def test_run_start_frame_x(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm",
                       ["break if2.fi if n == 2", "run", "frame 2", "x n", "x/2 @0", "start",
                        "info line rfib.rasm:13", "frame"], "n=4")
    assert rc == 0, out
    assert "Breakpoint 1 (if2.fi if n == 2)" in after(out, "run")
    assert "t=29" in after(out, "run")
    assert after(out, "frame 2").startswith("#2 rfib at ")
    assert re.search(r"^@\d+\s+n\s+0x0000000000000004\s+4$", after(out, "x n"), re.M)
    assert "t=1  programs/rfib.rasm:11" in after(out, "start")
    assert "Line 11 of programs/rfib.rasm" in after(out, "info line rfib.rasm:13") or \
        "rfib.rasm" in after(out, "info line rfib.rasm:13")
    assert after(out, "frame").startswith("#0 main")


def test_rwatch_stops_before_reads_in_both_directions(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, AVERAGE, ["rwatch xs[2]", "c", "c", "c", "rc", "rc"])
    assert rc == 0
    reads = re.findall(r"Read watchpoint 1: xs\[2\] = 4  read by (\S+ \S+ \S+) at \S+:(\d+)"
                       r"(, running backward)?", out)
    assert [(r[1], bool(r[2])) for r in reads] == [("12", False), ("16", False),
                                                   ("16", True), ("12", True)]
    times = re.findall(r"^t=(\d+) ", out, re.M)[1:]
    assert times[0] == times[4] and times[1] == times[3]    # backward stops = forward ones
    assert "Trap" in after(out, "c", 2)


def test_watch_if_condition(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, AVERAGE, ["stepi", "watch s if s > 10", "c", "c", "rc",
                                                   "info breakpoints"])
    assert rc == 0
    assert "Watchpoint 1: s  9 -> 14" in after(out, "c")
    assert "Watchpoint 1: s  14 -> 11" in after(out, "c", 1)
    assert "Watchpoint 1: s  9 -> 14" in after(out, "rc") or \
        "Watchpoint 1: s  14 -> 11" in after(out, "rc")
    assert re.search(r"watch\s+y\s+s in main \(depth 1\) if s > 10", out)
