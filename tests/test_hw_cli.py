"""`rvm hw` verbs: cost, run, verify, chart, export, real."""
from __future__ import annotations

import json

from rvm.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["hw", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cost_json(capsys):
    rc, out, _ = run(capsys, "cost", "add.i", "swap.x", "--width", "8,64", "--json")
    assert rc == 0
    rows = json.loads(out)
    assert [(r["name"], r["width"], r["total"]) for r in rows] == [
        ("add.i", 8, 62), ("add.i", 64, 566), ("swap.x", 8, 0), ("swap.x", 64, 0)]
    add8 = rows[0]
    assert add8["gates"] == {"not": 12, "cnot": 36, "toffoli": 14, "mcx": 0, "fredkin": 0}
    # CDKM's published depth 2n+4 (the two carry-out gates run beside the sum chain)
    assert (add8["depth"], add8["toffoli_depth"], add8["wires"]) == (20, 14, 17)
    assert add8["ancilla_peak"] == 1 and add8["landauer_J"] == 0.0
    assert rows[2]["relabelling"] is True


def test_cost_table_and_conditions(capsys):
    rc, out, _ = run(capsys, "cost", "jmp", "--cond", "==", "--width", "16")
    assert rc == 0 and "jmp" in out and "cond ^= comparison" in out
    rc, _, err = run(capsys, "cost", "add.q")
    assert rc == 2 and "unknown opcode 'add.q' (did you mean add.i, add.x, add.f?)" in err
    rc, _, err = run(capsys, "cost", "add.f")
    assert rc == 2 and "add.f has no gate realization" in err
    rc, _, err = run(capsys, "cost", "add.i", "--width", "3")
    assert rc == 2 and "--width: 3 is outside 4..64" in err


def test_run_program(capsys):
    rc, out, _ = run(capsys, "run", "programs/isqrt.rasm", "x=1000", "--width", "16", "--json")
    assert rc == 0
    r = json.loads(out)
    assert r["agrees"] and r["forward_steps"] == r["backward_steps"] == 198
    assert r["outputs"] == {"x": 1000, "r": 31}
    assert r["by_opcode"]["submul.i"]["count"] > 0
    rc, out, _ = run(capsys, "run", "programs/isqrt.rasm", "x=1000", "--width", "16")
    assert rc == 0 and "every step agrees with the interpreter" in out and "Landauer" in out


def test_run_failures(capsys):
    rc, _, err = run(capsys, "run", "programs/isqrt.rasm", "x=1000", "--width", "8")
    assert rc == 3 and "x = 1000 does not fit 8 bits" in err
    rc, _, err = run(capsys, "run", "programs/lns_product.rasm")
    assert rc == 1 and "the hardware model cannot run" in err and "mul.l" in err


def test_verify(capsys):
    rc, out, _ = run(capsys, "verify", "add.i", "neg.x", "--width", "8", "--json")
    assert rc == 0
    rows = json.loads(out)
    assert [(r["op"], r["inputs"], r["exhaustive"], r["ok"]) for r in rows] == [
        ("add.i", 65536, True, True), ("neg.x", 256, True, True)]


def test_verify_skips_rotations_at_widths_not_dividing_64(capsys):
    rc, out, err = run(capsys, "verify", "rotl.i", "not.i", "--width", "12")
    assert rc == 0 and "1 of 1 cases agree" in out
    assert "skipped rotl.i at width 12: rotations turn 64 bits" in err


def test_chart(capsys, tmp_path):
    p = tmp_path / "hw_counts.png"
    rc, out, _ = run(capsys, "chart", "-o", str(p), "--widths", "4,8,16", "add.i", "jmp==")
    assert rc == 0 and p.read_bytes()[:4] == b"\x89PNG"


def test_export_and_real(capsys, tmp_path):
    p = tmp_path / "add4.real"
    rc, _, err = run(capsys, "export", "add.i", "--width", "4", "-o", str(p))
    assert rc == 0 and "wrote" in err
    rc, out, _ = run(capsys, "real", str(p), "y=9", "a=12")
    assert rc == 0 and "y=5 a=12" in out
    # the truth table of y += a mod 16 over the lines y0..y3 a0..a3 (LSB first)
    def bits(v: int) -> str:
        return "".join(str(v >> i & 1) for i in range(4))
    table = tmp_path / "add4.tt"
    table.write_text("".join(f"{bits(y)}{bits(a)} {bits((y + a) & 15)}{bits(a)}\n"
                             for y in range(16) for a in range(16)))
    rc, out, _ = run(capsys, "real", str(p), "--check", str(table))
    assert rc == 0 and "truth table: agrees" in out
    table.write_text(table.read_text().replace("00000000 00000000", "00000000 10000000"))
    rc, out, _ = run(capsys, "real", str(p), "--check", str(table))
    assert rc == 3 and "1 row(s) differ, first: 00000000: 00000000, expected 10000000" in out
    rc, _, err = run(capsys, "real", str(tmp_path / "missing.real"))
    assert rc == 1 and "cannot read" in err
