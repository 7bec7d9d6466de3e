"""`rvm debug`: the reverse debugger driven through batch scripts, and its engine checked
against direct runs of the machine (stepping back restores every cell, `last` finds the
writer, stops in both directions, goto = running there directly, reverse-stepping a trap)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm.cli import main
from rvm.debug.engine import Session
from rvm.machine import Machine

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path("programs")                     # relative: locations print as programs/...
AVERAGE = PROGRAMS / "debug" / "average.rasm"        # the trapping example


@pytest.fixture(autouse=True)
def _in_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def debug(tmp_path, capsys, program, commands, *values, extra=()):
    """Run `rvm debug PROGRAM VALUES -x script --batch`; (exit code, stdout, stderr)."""
    script = tmp_path / "cmds.txt"
    script.write_text("\n".join(commands) + "\n")
    rc = main(["debug", str(program), *values, "-x", str(script), "--batch", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def after(out: str, command: str, nth: int = 0) -> str:
    """The output of the nth echoed `command` in a batch transcript (up to the next prompt)."""
    parts = re.split(r"^\(rdb t=-?\d+ [<>]\) ", out, flags=re.M)
    hits = [p for p in parts if p.split("\n", 1)[0] == command]
    return hits[nth].split("\n", 1)[1]


def state(m: Machine) -> tuple:
    """Everything the machine's future depends on."""
    return (m.t, m.pc, m.depth, m.mem[:m.core.frame_top].tobytes(), m.stack().tobytes(),
            [tuple(f.values()) for f in m.frames()])


# ---- through batch scripts ---------------------------------------------------------------

CASES = [("rfib.rasm", ["n=6"]), ("isqrt.rasm", ["x=200"]), ("bubble_sort.rasm", []),
         ("stack_reverse.rasm", []), ("oscillator.rasm", ["steps=20"]),
         ("poly_uncall.rasm", []), ("lns_product.rasm", [])]


@pytest.mark.parametrize("name, values", CASES)
def test_end_and_back_restores_every_cell(tmp_path, capsys, name, values):
    prog = rvm.load(PROGRAMS / name)
    cells = [g.name for g in prog.globals]
    show = [f"print/x {c}" for c in cells]
    rc, out, err = debug(tmp_path, capsys, PROGRAMS / name,
                         show + ["continue", "reverse-continue"] + show, *values)
    assert rc == 0, err
    for c in cells:
        first, second = after(out, f"print/x {c}", 0), after(out, f"print/x {c}", 1)
        assert first == second and "0x" in first
    assert "Reached the end of the program" in after(out, "continue")
    assert "Reached the start of the program" in after(out, "reverse-continue")


def test_single_steps_forward_then_back(tmp_path, capsys):
    n = 60
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "bubble_sort.rasm",
                       ["info globals"] + ["stepi"] * n + ["rsi"] * n + ["info globals"])
    assert rc == 0
    assert f"(rdb t={n} >) rs" in out and "(rdb t=0 >) info globals" in out
    assert after(out, "info globals", 0) == after(out, "info globals", 1)


def test_last_finds_the_writer(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "isqrt.rasm", ["goto end", "last r"],
                       "x=50")
    assert rc == 0
    # the independent answer: the last step that changed r
    m = Machine(rvm.load(PROGRAMS / "isqrt.rasm"))
    m.reset({"x": 50})
    t_last, prev = None, m.read("r")
    while m.status != "end":
        t, pc = m.t, m.pc
        m.step(1)
        if m.read("r") != prev:
            t_last, writer, prev = t, pc, m.read("r")
    text = after(out, "last r")
    assert f"r was 6, now 7, by {m.format_instruction(writer)} at " in text
    assert f"(t={t_last})" in text and f"t={t_last}  " in text
    assert re.search(r"programs/isqrt\.rasm:\d+ \(t=", text)


def bp_times(prog, pc: int, values: dict) -> list[int]:
    m = Machine(prog)
    m.reset(values)
    out = []
    while m.status != "end":
        if m.pc == pc and m.depth > 0:
            out.append(m.t)
        m.step(1)
    return out


def test_breakpoints_stop_in_both_directions(tmp_path, capsys):
    prog = rvm.load(PROGRAMS / "rfib.rasm")
    pc = next(p for p, name in prog.labels.items() if name == "if2.fi")
    expected = bp_times(prog, pc, {"n": 5})
    k = len(expected)
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm",
                       ["break if2.fi"] + ["continue"] * (k + 1) + ["reverse-continue"] * (k + 1),
                       "n=5")
    assert rc == 0
    stops = [int(t) for t in re.findall(r"^Breakpoint 1 \(if2.fi\).*\nt=(\d+)", out, re.M)]
    assert stops == expected + expected[::-1]
    assert out.count("Reached the end") == 1 and out.count("Reached the start") == 1


def test_conditional_breakpoint_and_line_breakpoint(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm",
                       ["break rfib.rasm:13 if n == 2", "continue", "print n", "rc", "c", "c",
                        "info breakpoints"], "n=5")
    assert rc == 0
    assert after(out, "print n").startswith("n = 2")
    assert "Breakpoint 1 (rfib.rasm:13 if n == 2)" in after(out, "c")
    assert re.search(r"1\s+break\s+y\s+rfib.rasm:13 \(pc 8\) if n == 2\s+3", out)


def test_watch_stops_in_both_directions_with_writer(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "isqrt.rasm",
                       ["watch r", "c", "c", "c", "rc", "rc", "rc"], "x=20")
    assert rc == 0
    fwd = re.findall(r"Watchpoint 1: r  (\d+) -> (\d+)  by inc.i r at \S*isqrt.rasm:13 "
                     r"\(t=\d+ -> \d+\)\nt=", out)
    back = re.findall(r"Watchpoint 1: r  (\d+) -> (\d+)  by inc.i r .*\n\(old -> new in the "
                      r"order of time; running backward", out)
    assert fwd == [("0", "1"), ("1", "2"), ("2", "3")]
    # old -> new in the order of time in both directions, and it says so
    assert back == [("2", "3"), ("1", "2"), ("0", "1")]
    # backward it stops just before the write: the write is the next instruction
    assert "=>   13         inc r" in after(out, "rc", 2)


def test_goto_matches_direct_runs(tmp_path, capsys):
    prog = rvm.load(PROGRAMS / "rfib.rasm")
    s = Session(prog, {"n": 6})
    rng = np.random.default_rng(5)
    end = s.goto("end").t
    for t in list(rng.integers(0, end + 1, 25)) + [0, end, 1, end - 1]:
        s.goto(int(t))
        m = Machine(prog)
        m.reset({"n": 6})
        m.step(int(t))
        assert state(s.m) == state(m), t
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm",
                       ["goto 40", "bookmark here", "goto +5", "goto -10", "goto here", "when",
                        "goto end", "goto start"], "n=6")
    assert rc == 0
    assert "(rdb t=45 >) goto -10" in out and "(rdb t=35 >) goto here" in out
    assert after(out, "when").startswith("t=40,")


def test_step_back_restores_each_state_exactly():
    for name, values in [("rfib.rasm", {"n": 5}), ("stack_reverse.rasm", {}),
                         ("poly_uncall.rasm", {})]:
        prog = rvm.load(PROGRAMS / name)
        s = Session(prog, values)
        states = [state(s.m)]
        while s.status != "end":
            assert s.step(1).reason in ("step", "end")
            states.append(state(s.m))
        while s.t > 0:
            s.step(1, -1)
            assert state(s.m) == states[s.t]


def test_next_finish_and_reverse_counterparts():
    prog = rvm.load(PROGRAMS / "rfib.rasm")
    s = Session(prog, {"n": 5})
    s.step(1)                                    # at `call rfib(out, n)` in main
    assert prog.op_at(s.pc).name == "call"
    stop = s.next(1)                             # the whole call as one step
    assert s.depth == 1 and s.m.read("out") == 5 and stop.reason == "step"
    stop = s.next(1, -1)                         # and undone as one
    assert s.depth == 1 and s.t == 1 and s.m.read("out") == 0
    s.step(10)
    d = s.depth
    s.finish()
    assert s.depth == d - 1
    s.step(3)
    t = s.t
    s.finish(None, -1)                           # back before the call
    assert prog.op_at(s.pc).name == "call" and s.t < t


def test_trap_stops_and_can_be_reverse_stepped(tmp_path, capsys):
    rc, out, err = debug(tmp_path, capsys, AVERAGE,
                         ["continue", "reverse-stepi", "print s", "last s", "step", "continue"])
    assert rc == 0, err
    trap = after(out, "continue", 0)
    assert "Trap: AncillaError: main returns with local s = 5" in trap
    assert "at pc 21: end main" in trap and "t=49" in trap
    assert "(rdb t=48 >) print s" in out
    assert "s was 6, now 5, by sub.i s, xs[i] at programs/debug/average.rasm:16 (t=43)" in out
    assert "Trap: AncillaError" in after(out, "continue", 1)


def test_set_forks_the_timeline(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "isqrt.rasm",
                       ["goto 10", "bookmark early", "goto 30", "bookmark late", "goto 20",
                        "set x = 1000", "bookmarks", "continue", "print r"], "x=20")
    assert rc == 0
    assert "later bookmarks late are dropped" in out
    assert "x: 20 -> 1000" in out
    books = after(out, "bookmarks")
    assert "early" in books and "late" not in books
    assert after(out, "print r").startswith("r = 31")


def test_inspection_commands(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm",
                       ["break rfib", "c", "c", "where", "up", "info locals", "down",
                        "print n1 + n2 * 2", "print n >= 3 and out == 0", "display n",
                        "step", "info stack", "list", "disassemble", "diff 0 end",
                        "history out", "help watch", "help reverse-finish"], "n=4")
    assert rc == 0
    assert re.search(r"=> #0 rfib\(out, n\) .*\n   #1 rfib\(out, n\) .*\n   #2 main\(\)",
                     after(out, "where"))
    assert after(out, "up").startswith("#1 rfib")
    assert re.search(r"^n\s+4\s+int$", after(out, "info locals"), re.M)
    assert after(out, "print n >= 3 and out == 0").startswith("n >= 3 and out == 0 = true")
    assert "1: n = 3" in after(out, "step")
    assert re.search(r"^=>    5      local n2: int$", after(out, "list"), re.M)
    assert "=>     4  alloc n2" in after(out, "disassemble") or \
        re.search(r"=>\s+\d+  ", after(out, "disassemble"))
    assert "out  0 -> " in after(out, "diff 0 end")
    assert "no writes before" in after(out, "history out")
    assert "watch CELL" in after(out, "help watch")
    assert "aliases: rf" in after(out, "help reverse-finish")


def test_history_lists_every_write(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm",
                       ["goto end", "history out", "history out 2", "when"], "n=5")
    assert rc == 0
    rows = re.findall(r"^(\d+)\s+out\s+(\d+) -> (\d+)\s+inc.i out", after(out, "history out"),
                      re.M)
    assert [(int(a), int(b)) for _, a, b in rows] == [(k, k + 1) for k in range(5)]
    assert "history out all" in after(out, "history out 2")
    assert after(out, "when").startswith("t=142,")          # came back


def test_array_slices_and_raw_cells(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "bubble_sort.rasm",
                       ["print xs", "print xs[1:3]", "print sum(xs) + len(xs)", "print @0",
                        "watch xs[0:2]", "continue", "last xs[3]"])
    assert rc == 0
    assert after(out, "print xs").startswith("xs = [5, 2, 9, 1, 5, 6]")
    assert after(out, "print xs[1:3]").startswith("xs[1:3] = [2, 9]")
    assert after(out, "print sum(xs) + len(xs)").startswith("sum(xs) + len(xs) = 34")
    assert after(out, "print @0").startswith("@0 = 5")
    assert ("Watchpoint 1: xs[0]  5 -> 2  by swap.i xs[j], xs[$1] at "
            "programs/bubble_sort.rasm:14") in out
    assert "was not written since the start" in after(out, "last xs[3]")


def test_errors_are_messages_and_batch_stops(tmp_path, capsys):
    rc, out, err = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm",
                         ["print nosuch", "step"], "n=3")
    assert rc == 1
    assert "error: no cell named 'nosuch'" in out
    assert "cmds.txt:1: the command 'print nosuch' failed" in err
    assert "(rdb t=0 >) step" not in out
    for bad in ["frobnicate", "break nowhere", "goto 10**9", "print 2**100000",
                "set out", "print xs[", "watch", "diff 1 2 3", "until nowhere"]:
        rc, out, err = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm", [bad], "n=3")
        assert rc == 1 and "error: " in out and "Traceback" not in out + err, bad


def test_limit_bounds_runs(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm", ["continue", "when"], "n=10",
                       extra=("--limit", "100"))
    assert rc == 0
    assert "the step limit (--limit 100) is reached" in out
    assert after(out, "when").startswith("t=100,")


def test_plain_output_has_no_escapes(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm", ["list", "step 3", "help"],
                       "n=3")
    assert rc == 0 and "\x1b[" not in out


@pytest.mark.parametrize("name, values", [("rfib.rasm", {"n": 4}), ("poly_uncall.rasm", {}),
                                          ("stack_reverse.rasm", {})])
def test_every_breakpoint_stops_at_the_same_steps_both_ways(name, values):
    """For every instruction: continuing forward and reverse-continuing stop at exactly the
    steps where it is about to run (calls, returns and uncalls included)."""
    prog = rvm.load(PROGRAMS / name)
    for pc in range(len(prog.code)):
        expected = [t for t in bp_times(prog, pc, values)]
        s = Session(prog, values)
        s.add_breakpoint("x", [pc])
        fwd, back = [], []
        while (stop := s.run(+1)).reason == "breakpoint":
            fwd.append(stop.t)
        assert stop.reason == "end"
        while (stop := s.run(-1)).reason == "breakpoint":
            back.append(stop.t)
        assert stop.reason in ("start", "breakpoint")
        if stop.reason == "breakpoint":           # main's begin: about to run at t=0
            assert stop.t == 0 and pc == prog.functions[prog.main].begin
            back.append(0)
        assert fwd == expected, (pc, prog.op_at(pc).name)
        at_start = [0] if pc == prog.functions[prog.main].begin else []
        assert back == expected[::-1] + at_start, pc


def test_until_leaves_a_loop_and_display_follows_stops(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "isqrt.rasm",
                       ["tbreak 14", "c", "display r", "until", "until", "undisplay", "step",
                        "info breakpoints"], "x=50")
    assert rc == 0
    assert "programs/isqrt.rasm:15" in after(out, "until", 0)
    left = after(out, "until", 1)                  # the whole loop ran: r is the root
    assert "programs/isqrt.rasm:16" in left and "1: r = 7" in left
    assert "1: r" not in after(out, "step")
    assert "no breakpoints" in after(out, "info breakpoints")     # the tbreak is gone


# ---- regressions (issue 18) -----------------------------------------------------------------

def test_info_globals_shows_globals_not_the_frames_names(tmp_path, capsys):
    """In rfib the parameter n shadows the global n: `info globals` must show the global."""
    rc, out, _ = debug(tmp_path, capsys, PROGRAMS / "rfib.rasm",
                       ["break rfib if n == 2", "c", "info globals", "print n"], "n=6")
    assert rc == 0
    assert re.search(r"^n\s+6\s+int$", after(out, "info globals"), re.M)
    assert "n = 2" in after(out, "print n")          # print still looks in the frame first


def test_until_a_line_from_the_start_stops_there(tmp_path, capsys):
    rc, out, _ = debug(tmp_path, capsys, AVERAGE, ["until 16"])
    assert rc == 0
    text = after(out, "until 16")
    assert "Trap" not in text
    assert text.startswith("Until") and "=>   16         s -= xs[i]" in text


def test_the_help_examples_run(capsys):
    """Every `rvm debug` line of the --help epilog runs without a failed command."""
    import shlex

    from rvm.debug.cli import EPILOG
    lines = [ln.strip() for ln in EPILOG.splitlines() if ln.strip().startswith("rvm debug")
             and "--batch" in ln and "-x" not in ln.split()]
    assert lines
    for line in lines:
        assert main(shlex.split(line)[1:]) == 0, line
        out, _ = capsys.readouterr()
        assert "error" not in out
