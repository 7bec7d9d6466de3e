"""The `rvm` command: verbs, outputs and documented exit codes."""
import json
from pathlib import Path

import pytest

from rvm.cli import main

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
RFIB = str(PROGRAMS / "rfib.rasm")
RFIBN = str(PROGRAMS / "rfibn.rasm")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_prints_outputs(capsys):
    code, out, err = run(capsys, "run", RFIB, "n=10")
    assert code == 0
    assert "out = 55" in out.splitlines()


def test_run_reverse(capsys):
    code, out, _ = run(capsys, "run", RFIBN, "--reverse", "n=12", "z=100")
    assert code == 0
    assert out.splitlines() == ["n = 0", "z = 100"]


def test_run_json_and_stats(capsys, tmp_path):
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"n": 12}))
    code, out, err = run(capsys, "run", RFIB, "--inputs", str(inputs), "--json", "--stats")
    assert code == 0
    doc = json.loads(out)
    assert doc["outputs"]["out"] == 144
    assert doc["stats"]["steps"] > 100 and doc["stats"]["peak_depth"] >= 10


def test_stats_to_stderr(capsys):
    code, out, err = run(capsys, "run", RFIB, "n=5", "--stats")
    assert code == 0 and "out = 5" in out
    assert "steps = " in err and "peak_stack = " in err


def test_stats_name_the_loop_kernels(capsys):
    """--stats says how many loops run in each kernel form, in the direction run."""
    umm = str(Path(RFIB).parent / "umm.rasm")
    code, out, err = run(capsys, "run", umm, "--stats", "--json")
    assert json.loads(out)["stats"]["loop_kernels"] == {"reduce": 1, "induct": 1, "general": 0}
    code, out, err = run(capsys, "run", str(Path(RFIB).parent / "accumulate.rasm"), "n=7",
                         "--stats")
    assert code == 0 and "loop_kernels = 1 reduce\n" in err
    code, out, err = run(capsys, "run", RFIB, "n=5", "--stats")
    assert "loop_kernels = none" in err


def test_asm_dis_roundtrip(capsys, tmp_path):
    rbc = tmp_path / "rfib.rbc"
    assert run(capsys, "asm", RFIB, "-o", str(rbc))[0] == 0
    code, out, _ = run(capsys, "run", str(rbc), "n=10")
    assert code == 0 and "out = 55" in out
    code, text, _ = run(capsys, "dis", str(rbc))
    src = tmp_path / "dis.rasm"
    src.write_text(text)
    code, out, _ = run(capsys, "run", str(src), "n=10")
    assert code == 0 and "out = 55" in out


def test_invert_runs_the_program_backward(capsys, tmp_path):
    code, text, _ = run(capsys, "invert", RFIBN)
    assert code == 0
    inv = tmp_path / "inv.rasm"
    inv.write_text(text)
    code, out, _ = run(capsys, "run", str(inv), "n=12", "z=100")
    assert code == 0
    assert "n = 0" in out.splitlines()


def test_check_reports_all_errors(capsys, tmp_path):
    bad = tmp_path / "bad.rasm"
    bad.write_text("func main() {\n    x += 1\n    y += 2\n}\n")
    code, out, err = run(capsys, "check", str(bad))
    assert code == 1
    assert f"{bad}:2:5: error[E002]" in err and f"{bad}:3:5: error[E002]" in err
    assert "^" in err


def test_check_ok(capsys):
    code, out, _ = run(capsys, "check", RFIB, RFIBN)
    assert code == 0 and out.count(": ok (") == 2


def test_trap_exit_code(capsys):
    code, out, err = run(capsys, "run", RFIBN, "n=3", "z=100")
    assert code == 3
    assert "ComeFromError" in err and "rfibn.rasm:" in err


def test_step_limit_exit_code(capsys):
    code, _, err = run(capsys, "run", RFIB, "n=20", "--max-steps", "100")
    assert code == 4
    assert "StepLimit" in err


def test_usage_errors(capsys):
    assert run(capsys, "run", RFIB, "nope=3")[0] == 2
    assert run(capsys, "run", RFIB, "n=abc")[0] == 2
    assert run(capsys, "run", RFIB, "n")[0] == 2
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2


def test_missing_file(capsys):
    code, _, err = run(capsys, "run", "no/such/file.rasm")
    assert code == 1 and "no such file" in err


def test_bad_rbc_file(capsys, tmp_path):
    f = tmp_path / "junk.rbc"
    f.write_bytes(b"not bytecode at all")
    code, _, err = run(capsys, "run", str(f))
    assert code == 1 and "rvm: error:" in err


def test_ctrl_c_stops_a_runaway_run(tmp_path):
    """An endless loop without --max-steps is stopped by SIGINT with exit 130."""
    import os
    import signal
    import subprocess
    import sys
    import time

    prog = tmp_path / "forever.rasm"
    prog.write_text("inout x: int\nfunc main() {\n    from x == 0 {\n        inc x\n"
                    "    } until x == 0\n}\n")
    # SIG_DFL in the child: a test run started in the background inherits SIGINT ignored
    p = subprocess.Popen([sys.executable, "-m", "rvm.cli", "run", str(prog)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # interrupt the run, not the start-up (import and assembly take ~0.5 CPU seconds): wait
    # until the child has used 2.5 CPU seconds, however loaded the machine is
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        fields = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
        if (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") >= 2.5:
            break
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("the run did not stop on SIGINT") from None
    assert p.returncode == 130 and "interrupted" in err


def test_fixed_values_are_exact_both_ways(capsys, tmp_path):
    """A fixed value that a float would round prints in exact decimal, and reading that text
    back (forward or --reverse) gives the same word."""
    p = tmp_path / "ex.rasm"
    p.write_text(".fixed 32\ninout x: fixed = 3000000.0000000002\noutput y: fixed\n"
                 "func main() {\n    y += x\n}\n")
    code, out, _ = run(capsys, "run", str(p))
    exact = "3000000.00000000023283064365386962890625"
    assert code == 0 and out.splitlines() == [f"x = {exact}", f"y = {exact}"]
    code, out, _ = run(capsys, "run", str(p), "--reverse", f"x={exact}", f"y={exact}")
    assert code == 0 and out.splitlines() == [f"x = {exact}"]


def test_raw_words_in_and_out(capsys):
    lns = str(PROGRAMS / "lns_product.rasm")
    code, out, _ = run(capsys, "run", lns, "--raw")
    assert code == 0
    vals = dict(line.split(" = ", 1) for line in out.splitlines())
    assert vals["pf"] == "$0xfffffffa00000000"          # -6.0 in Q31.32
    code, back, err = run(capsys, "run", lns, "--reverse", "--raw",
                          "a=" + json.dumps(vals["a"][1:-1].split(", ")),
                          f"p={vals['p']}", f"pf={vals['pf']}")
    assert code == 0 and err == ""
    assert back.splitlines() == [f"a = {vals['a']}"]        # the same words came back


def test_check_keeps_going_after_a_bad_file(capsys, tmp_path):
    junk = tmp_path / "junk.rbc"
    junk.write_bytes(b"garbage")
    code, out, err = run(capsys, "check", RFIB, str(junk), "no/such.rasm", RFIBN)
    assert code == 1
    assert out.count(": ok (") == 2
    assert "junk.rbc: error:" in err and "no/such.rasm: error:" in err


def test_bad_numeric_options_are_usage_errors(capsys):
    for opt in ("--max-steps", "--stack-cells"):
        with pytest.raises(SystemExit) as e:
            main(["run", RFIB, opt, "-1"])
        assert e.value.code == 2
    assert "positive integer" in capsys.readouterr().err


def test_roundtrip_reports_exact_and_drift(capsys, tmp_path):
    code, out, err = run(capsys, "run", str(PROGRAMS / "isqrt.rasm"), "x=99", "--roundtrip")
    assert code == 0 and "r = 9" in out
    assert "roundtrip: exact: every global came back bit for bit" in err
    chaos = tmp_path / "chaos.rasm"
    chaos.write_text("inout x: float = 0.1\ninout y: float = 0.7\nfunc main() {\n"
                     "    for i in 0..1000 {\n        x += y * y\n        y -= sin(x)\n    }\n}\n")
    code, out, err = run(capsys, "run", str(chaos), "--roundtrip")
    assert code == 0 and "roundtrip: drift (largest absolute difference per global): x " in err


def test_trap_shows_the_source_line(capsys):
    code, _, err = run(capsys, "run", RFIBN, "n=3")
    lines = err.splitlines()
    assert code == 3 and "ComeFromError" in lines[0]
    assert lines[1].strip() == "from n == 0 {" and lines[2].strip() == "^"
    assert "values: n = 3" in err and "0 = 0" not in err
