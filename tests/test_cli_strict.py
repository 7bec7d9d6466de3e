"""`rvm run --strict` and the warnings for data the run does not start from (issue 19)."""
from __future__ import annotations

from rvm.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_inconsistent_outputs_on_a_backward_run_fail_under_strict(capsys):
    code, out, err = run(capsys, "run", "programs/rfib.rasm", "--reverse", "n=10", "out=54")
    assert code == 0 and out == "n = 10\n"
    assert err == "rvm: note: non-input globals left nonzero: out\n"
    code, out, err = run(capsys, "run", "programs/rfib.rasm", "--reverse", "n=10", "out=54",
                         "--strict")
    assert code == 6
    assert err == ("rvm: error: non-input globals left nonzero: out (--strict: the program's "
                   "contract says they end at zero)\n")
    assert run(capsys, "run", "programs/rfib.rasm", "--reverse", "n=10", "out=55",
               "--strict")[:2] == (0, "n = 10\n")


def test_an_output_given_to_a_forward_run_is_warned_about(capsys):
    code, out, err = run(capsys, "run", "programs/rfib.rasm", "out=5")
    assert code == 0 and out == "n = 10\nout = 60\n"
    assert err.startswith("rvm: warning: out is not an input: the run starts from the value "
                          "given")
    code, out, err = run(capsys, "run", "programs/rfib.rasm", "out=5", "--strict")
    assert code == 2 and out == ""
    assert "out is not an input: a forward run starts from the inputs (--strict)" in err


def test_a_clean_run_passes_strict(capsys):
    assert run(capsys, "run", "programs/rfib.rasm", "--strict") == (0, "n = 10\nout = 55\n", "")


def test_values_given_as_raw_words_are_part_of_the_state_a_roundtrip_restores(capsys):
    code, _, err = run(capsys, "run", "programs/rfib.rasm", "n=$0xa", "--roundtrip")
    assert code == 0 and "roundtrip: exact" in err


def test_a_machine_larger_than_memory_is_refused_with_its_sizes(tmp_path, capsys, monkeypatch):
    import rvm
    import rvm.machine

    src = tmp_path / "big.rasm"
    src.write_text("inout a: int[4294967296]\nfunc main() {\n}\n")     # 64 GiB of cells
    monkeypatch.setattr(rvm.machine, "_physical_memory", lambda: 8 << 30)
    code, out, err = run(capsys, "run", str(src))
    assert code == 2 and out == ""
    assert err.startswith("rvm: error: the machine needs 64.0 GiB: 4294967296 static cells")
    assert "more than this computer's 8.0 GiB of memory" in err
    small = tmp_path / "small.rasm"
    small.write_text("inout a: int[1048576]\nfunc main() {\n}\n")
    try:
        rvm.Machine(rvm.assemble(small), frame_cells=1 << 30)
    except rvm.machine.MachineMemoryError as e:
        assert "1073741824 frame cells" in str(e) and isinstance(e, rvm.RVMError)
    else:
        raise AssertionError("a 1 GiB-cell frame region fits in 8 GiB")
