"""`rvm trace`: the table, JSON, pictures and errors."""
import json
import struct
from pathlib import Path

import pytest

from rvm.cli import main

ROOT = Path(__file__).resolve().parent.parent
DIFFUSION = str(ROOT / "programs" / "trace" / "diffusion.rasm")
LEAPFROG = str(ROOT / "programs" / "trace" / "leapfrog.rasm")


def run(capsys, *argv):
    code = main(["trace", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_bennett_k4_run_on_the_machine(capsys):
    code, out, _ = run(capsys, DIFFUSION, "--steps", "256", "--strategy", "bennett", "--k", "4",
                       "--levels", "4")
    assert code == 0
    lines = out.splitlines()
    assert "moves = 2401 (1201 forward, 1200 backward)" in lines
    assert "peak checkpoints = 13 (14 states with the input)" in lines
    assert "instructions = 542626" in lines
    assert "clean finish = yes" in lines and "s_N equals direct execution = yes" in lines
    assert "checked by = machine" in lines
    assert any(line.startswith("u = [") for line in lines)


def test_knill_json(capsys):
    code, out, _ = run(capsys, LEAPFROG, "--steps", "64", "--budget", "7", "--json")
    assert code == 0
    doc = json.loads(out)
    (r,) = doc["runs"]
    assert (r["strategy"], r["params"], r["moves"], r["peak_checkpoints"]) == \
        ("knill", {"budget": 7}, 531, 7)
    assert r["clean"] is True and r["matches_direct"] is True and r["gap"] == 1.0
    assert r["state_cells"] == 16 and r["peak_bits"] == 64 * r["peak_cells"]
    assert set(r["final_state"]) == {"x", "v"} and len(r["final_state"]["x"]) == 8


def test_model_sweep_json_without_a_program(capsys):
    code, out, _ = run(capsys, "--steps", "1024", "--sweep", "--json")
    assert code == 0
    rows = {(r["strategy"], tuple(r["params"].values())): r for r in json.loads(out)["runs"]}
    assert rows[("knill", (11,))]["moves"] == 27231
    assert rows[("bennett", (2, 10))]["moves"] == 59049
    assert rows[("bennett", (2, 10))]["gap"] == pytest.approx(59049 / 27231)
    assert rows[("bennett1973", ())]["moves"] == 2047
    assert rows[("revolve", (11,))]["reversible"] is False
    assert all(r["checked"] == "game" and r["clean"] for r in rows.values() if r["reversible"])


def test_sweep_table_on_the_machine(capsys):
    code, out, _ = run(capsys, DIFFUSION, "--steps", "32", "--sweep")
    assert code == 0
    assert out.startswith("rvm trace: N = 32\nstrategy")
    body = out.splitlines()[2:9]
    assert [line.split("  ")[0].strip() for line in body] == [
        "Revolve* c=6", "Knill S=6", "Bennett k=2 L=5", "Bennett k=3 L=4", "Bennett k=4 L=3",
        "periodic p=6", "Bennett 1973"]
    machine = [line for line in body if line.rstrip().endswith("machine")]
    assert len(machine) == 6 and all(" yes " in line for line in machine)
    assert body[0].endswith("model") and "0.477*" in body[0]
    assert out.splitlines()[10].startswith("* Revolve overwrites states (irreversible)")


def png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24]), len(data)


def test_plots_are_written(capsys, tmp_path):
    code, _, err = run(capsys, DIFFUSION, "--steps", "48", "--budget", "7", "--plots",
                       str(tmp_path))
    assert code == 0
    for name in ("trace_frontier.png", "trace_pebbles.png", "trace_live.png"):
        (w, h), nbytes = png_size(tmp_path / name)
        assert (w, h) == (700, 460)
        assert 10_000 < nbytes < 300_000
        assert f"wrote {tmp_path / name}" in err


def test_revolve_is_a_model_only(capsys, tmp_path):
    code, out, err = run(capsys, DIFFUSION, "--steps", "100", "--checkpoints", "5", "--plots",
                         str(tmp_path))
    assert code == 0
    assert "moves = 416 (316 forward, 100 backward)" in out and "checked by = model" in out
    assert "irreversible" in out and "no pebble diagram" in err
    assert png_size(tmp_path / "trace_frontier.png")[0] == (700, 460)
    assert not (tmp_path / "trace_pebbles.png").exists()


def test_long_schedules_fall_back_to_the_model(capsys):
    code, out, err = run(capsys, DIFFUSION, "--steps", "1024", "--max-moves", "1000")
    assert code == 0 and "over --max-moves 1000" in err
    assert "moves = 59049 (29525 forward, 29524 backward)" in out
    assert "instructions = ~13345074" in out and "checked by = game" in out


@pytest.mark.parametrize("argv, message", [
    (["--steps", "1024", "--budget", "3"], "at least 11 pebbles"),
    (["--steps", "10", "--budget", "5", "--k", "2"], "options of different strategies"),
    (["--steps", "10", "--strategy", "bennett", "--period", "3"], "does not apply"),
    (["--steps", "10", "--sweep", "--k", "3"], "--sweep runs every strategy"),
    (["--steps", "10", "--k", "1"], "k must be >= 2"),
    ([LEAPFROG, "--steps", "10", "y=1"], "no global named 'y'"),
])
def test_usage_errors(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_not_a_step_program(capsys):
    code, _, err = run(capsys, str(ROOT / "programs" / "rfib.rasm"), "--steps", "4")
    assert code == 1 and "NAME_next" in err


def test_unclean_run_exits_3(capsys, tmp_path):
    src = tmp_path / "float_step.rasm"
    src.write_text("inout x: float = 0.1\noutput x_next: float\nconst big: float = 1e16\n"
                   "func main() {\n    x_next += x\n    x_next += big\n}\n")
    code, out, err = run(capsys, str(src), "--steps", "3", "--strategy", "bennett1973")
    assert code == 3 and "clean finish = NO" in out and "did not come back to zero" in err


def test_readme_shows_a_committed_trace_picture():
    readme = (ROOT / "README.md").read_text()
    assert "## Tracer" in readme and "(docs/img/trace_frontier.png)" in readme
    for name in ("trace_frontier.png", "trace_pebbles.png"):
        (w, h), nbytes = png_size(ROOT / "docs" / "img" / name)
        assert (w, h) == (700, 460) and nbytes < 200_000


def test_ceil_split_runs_on_the_machine_as_nilang_counts(capsys):
    code, out, _ = run(capsys, LEAPFROG, "--steps", "100", "--k", "4", "--split", "ceil")
    lines = out.splitlines()
    assert code == 0 and "strategy = Bennett 1989 k=4, levels=4, split=ceil" in lines
    assert "moves = 847 (424 forward, 423 backward)" in lines
    assert "peak checkpoints = 11 (12 states with the input)" in lines
    assert "clean finish = yes" in lines and "checked by = machine" in lines
    code, out, _ = run(capsys, "--steps", "100", "--k", "4", "--json")
    assert code == 0 and json.loads(out)["runs"][0]["moves"] == 791


def test_plots_dir_follows_the_output_rule(capsys, tmp_path):
    """--plots DIR: DIR is made if missing, its parent must exist; a file is refused; all
    before any run."""
    code, _, err = run(capsys, LEAPFROG, "--steps", "8", "--plots", "/dev/null")
    assert code == 2 and "--plots /dev/null: it is not a directory" in err
    assert "Traceback" not in err
    code, _, err = run(capsys, LEAPFROG, "--steps", "8", "--plots",
                       str(tmp_path / "no" / "such"))
    assert code == 2 and "does not exist" in err and not (tmp_path / "no").exists()
    code, _, err = run(capsys, "--steps", "8", "--plots", str(tmp_path / "new"))
    assert code == 0 and (tmp_path / "new" / "trace_frontier.png").exists()


def test_split_belongs_to_bennett(capsys):
    code, _, err = run(capsys, "--steps", "10", "--split", "ceil", "--budget", "5")
    assert code == 2 and "options of different strategies" in err
