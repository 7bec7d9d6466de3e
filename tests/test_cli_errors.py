"""The `rvm` command's edges: no tracebacks, one-line errors with documented exit codes, the
one -o rule, --json on a trap, the machine's capacities, a broken pipe, every verb's --help."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rvm.cli import EXIT_BROKEN_PIPE, MAX_STACK_CELLS, build_parser, main

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "programs"
RFIB = str(PROGRAMS / "rfib.rasm")
ISQRT = str(PROGRAMS / "isqrt.rasm")
OSCILLATOR = str(PROGRAMS / "oscillator.rasm")
AVERAGE = str(PROGRAMS / "debug" / "average.rasm")


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:          # argparse's own usage errors
        code = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# ---- capacities ------------------------------------------------------------------------------

def test_stack_cells_beyond_the_limit_is_a_usage_error(capsys):
    code, _, err = run(capsys, "run", RFIB, "--stack-cells", "99999999999999")
    assert code == 2 and f"over the limit of {MAX_STACK_CELLS}" in err


def test_memory_the_system_cannot_give_names_the_sizes(capsys, monkeypatch):
    import rvm

    def refuse(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(rvm, "Machine", refuse)
    code, _, err = run(capsys, "run", RFIB, "--stack-cells", "1000000000")
    assert code == 2
    assert err.startswith("rvm: error: cannot allocate the machine's memory (1000000000 stack "
                          "cells, 4194304 frame cells, call depth 65536")
    assert len(err.strip().splitlines()) == 1


def test_call_depth_limit_is_settable(capsys):
    code, out, _ = run(capsys, "run", RFIB, "n=12", "--max-depth", "64")
    assert code == 0 and "out = 144" in out
    code, _, err = run(capsys, "run", RFIB, "n=12", "--max-depth", "5")
    assert code == 3 and "StackOverflow: the call depth limit of 5 frames is reached" in err
    code, _, err = run(capsys, "run", RFIB, "--max-depth", "0")
    assert code == 2 and "expected a positive integer" in err


def test_help_documents_the_capacities(capsys):
    code, out, _ = run(capsys, "run", "--help")
    assert code == 0
    assert "--max-depth N" in out and "(default 65536" in out and "--frame-cells N" in out


# ---- values as typed -------------------------------------------------------------------------

@pytest.mark.parametrize("argv, shown", [
    ([RFIB, "n=1e400"], "n: 1e400 cannot be stored"),
    ([RFIB, "n=1.5"], "n: 1.5 cannot be stored"),
    ([OSCILLATOR, "x=1.0e400"], "x: 1.0e400 cannot be stored"),
])
def test_values_in_errors_read_as_typed(capsys, argv, shown):
    code, _, err = run(capsys, "run", *argv)
    assert code == 2 and shown in err and "Fraction" not in err


def test_json_values_read_as_typed(capsys, tmp_path):
    f = tmp_path / "in.json"
    f.write_text('{"n": 2.50}')
    code, _, err = run(capsys, "run", RFIB, "--inputs", str(f))
    assert code == 2 and "n: 2.50 cannot be stored" in err


def test_decimal_values_stay_exact(capsys):
    from fractions import Fraction

    from rvm.cli import Literal, _parse_value
    v = _parse_value("0.1")
    assert isinstance(v, Literal) and v == Fraction(1, 10) and repr(v) == "0.1"
    assert v + 1 == Fraction(11, 10)


# ---- --json on a trap ------------------------------------------------------------------------

def test_json_on_a_trap_carries_the_trap(capsys):
    code, out, err = run(capsys, "run", AVERAGE, "--json")
    assert code == 3
    trap = json.loads(out)["trap"]
    assert trap["kind"] == "AncillaError" and trap["code"] == "ancilla"
    assert trap["location"] == {"file": AVERAGE, "line": 18, "column": 1}
    assert trap["step"] == 49 and trap["direction"] == "forward"
    assert trap["values"] == {"s": 5} and trap["exit_status"] == 3
    assert "local s = 5" in trap["message"]
    assert err.startswith("rvm: ") and "AncillaError" in err


def test_json_on_the_step_limit(capsys):
    code, out, _ = run(capsys, "run", RFIB, "n=20", "--max-steps", "10", "--json")
    trap = json.loads(out)["trap"]
    assert code == 4 and trap["kind"] == "StepLimit" and trap["exit_status"] == 4
    assert trap["step"] == 10


# ---- one rule for -o -------------------------------------------------------------------------

OUTPUT_VERBS = [
    ["asm", RFIB, "-o"],
    ["dis", RFIB, "-o"],
    ["invert", ISQRT, "-o"],
    ["hw", "export", "add.i", "--width", "4", "-o"],
    ["hw", "chart", "add.i", "--widths", "4,8", "-o"],
    ["native", str(PROGRAMS / "accumulate.rasm"), "-o"],
]


@pytest.mark.parametrize("argv", OUTPUT_VERBS, ids=lambda a: " ".join(a[:2]))
def test_output_directory_must_exist_in_every_verb(capsys, tmp_path, argv):
    suffix = ".png" if "chart" in argv else ".out"
    target = tmp_path / "missing" / f"x{suffix}"
    code, _, err = run(capsys, *argv, str(target))
    assert code == 2
    assert err.strip() == (f"rvm: error: cannot write {target}: the directory "
                           f"{target.parent} does not exist (rvm creates no directories; "
                           f"make it first)")
    assert not target.parent.exists()
    if "chart" in argv:           # a chart draws for seconds: the rest is checked elsewhere
        return
    code, _, err = run(capsys, *argv, str(tmp_path))
    assert code == 2 and f"cannot write {tmp_path}: it is a directory" in err
    code, _, err = run(capsys, *argv, "/dev/null/x")
    assert code == 2 and "cannot write /dev/null/x: /dev/null is not a directory" in err
    good = tmp_path / f"ok{suffix}"
    code, _, _ = run(capsys, *argv, str(good))
    assert code == 0 and good.stat().st_size > 0


def test_chart_refuses_an_unknown_format_before_drawing(capsys, tmp_path):
    code, _, err = run(capsys, "hw", "chart", "-o", str(tmp_path / "x.bogus"))
    assert code == 2
    assert err.strip() == (f"rvm: error: unknown image format .bogus in {tmp_path / 'x.bogus'}; "
                           f"use .png, .svg, .pdf")
    code, _, err = run(capsys, "hw", "chart", "-o", str(tmp_path / "x"))
    assert code == 2 and "unknown image format (no suffix)" in err


def test_chart_writes_svg(capsys, tmp_path):
    out = tmp_path / "c.svg"
    code, _, _ = run(capsys, "hw", "chart", "add.i", "--widths", "4,8", "-o", str(out))
    assert code == 0 and out.read_text().lstrip().startswith("<?xml")


# ---- a broken pipe ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["run", RFIB, "--stats"],
    ["dis", str(PROGRAMS / "besselj.rasm")],
    ["hw", "cost", "add.i", "--width", "8"],
    ["grad", str(PROGRAMS / "accumulate.rasm"), "--of", "x", "--wrt", "x,one"],
], ids=lambda a: a[0])
def test_a_closed_stdout_exits_quietly_with_141(argv):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "rvm.cli", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT, env=env)
    p.stdout.close()                     # the reader is gone before rvm writes a byte
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait() == EXIT_BROKEN_PIPE == 141
    assert err == ""


# ---- --help: a description and the exit codes on every verb ----------------------------------

def _verbs():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            for sname, sp in nested[0].choices.items():
                yield f"{name} {sname}", sp
        yield name, p


@pytest.mark.parametrize("name, parser", list(_verbs()), ids=lambda x: x if isinstance(x, str)
                         else "")
def test_every_verb_has_a_description_and_exit_codes(name, parser):
    text = parser.format_help()
    assert parser.description and len(parser.description) > 40, name
    assert "exit status" in text.lower() or "exit codes" in text.lower(), name


def test_debug_help_example_works(capsys, monkeypatch):
    import shlex

    from rvm.debug.cli import EPILOG
    line = next(x for x in EPILOG.splitlines() if "-e 'break" in x)
    argv = shlex.split(line.strip())
    assert argv[0] == "rvm"
    monkeypatch.chdir(ROOT)
    code, out, _ = run(capsys, *argv[1:])
    assert code == 0 and "Breakpoint 1 (from1.exit)" in out and "r was 30, now 31" in out


def test_json_on_a_trap_in_grad(capsys, tmp_path):
    src = tmp_path / "bounds.rasm"
    src.write_text("inout x: float = 1.0\noutput y: float\nglobal g: int[3]\ninout i: int = 5\n"
                   "func main() {\n    g[i] += 1\n    y += x\n}\n")
    code, out, err = run(capsys, "grad", str(src), "--of", "y", "--wrt", "x", "--json")
    trap = json.loads(out)["trap"]
    assert code == 3 and trap["kind"] == "BoundsError" and trap["location"]["line"] == 6
    assert trap["values"] == {"i": 5, "len(g)": 3} and "BoundsError" in err
