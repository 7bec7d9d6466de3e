"""RevLib's classical gate library in `rvm hw real`: Toffoli t1..tn, Fredkin f2..fn (with
negative controls), Peres p and its inverse pi, on RevLib files; each circuit's truth table
is checked bit for bit against a reference interpreter of the .real text written here from
RevKit's gate semantics; V gates are refused by name."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from rvm.cli import main
from rvm.hw.real import RealError, import_real, read_real, truth_table
from rvm.hw.report import cost

DATA = Path(__file__).resolve().parent / "data" / "revlib"


# ---- the reference: the .real text run bit by bit ----------------------------------------------

def _peres(a: int, b: int, c: int) -> tuple[int, int, int]:
    """RevKit's Peres gate on (control, t1, t2): if the control is set, t1 flips, and t2 flips
    if t1 was set."""
    if a:
        c ^= b
        b ^= 1
    return a, b, c


_PERES_INVERSE = {_peres(*x): x for x in itertools.product((0, 1), repeat=3)}


def reference(text: str, lines: dict[str, int]) -> dict[str, int]:
    """Every line's value after the gates, from the start values `lines` (by variable)."""
    v = dict(lines)
    body = text.split(".begin", 1)[1].split(".end", 1)[0]
    for raw in body.splitlines():
        line = raw.split("#", 1)[0].split()
        if not line:
            continue
        gate, toks = line[0], line[1:]
        kind = re.match(r"(pi|p|t|f)", gate).group(1)

        def fires(ctl):
            return all(v[c[1:]] == 0 if c.startswith("-") else v[c] == 1 for c in ctl)
        if kind == "t":
            if fires(toks[:-1]):
                v[toks[-1]] ^= 1
        elif kind == "f":
            if fires(toks[:-2]):
                x, y = toks[-2:]
                v[x], v[y] = v[y], v[x]
        else:
            a, b, c = toks
            if kind == "p":
                v[a], v[b], v[c] = _peres(v[a], v[b], v[c])
            else:
                v[a], v[b], v[c] = _PERES_INVERSE[(v[a], v[b], v[c])]
    return v


def check_against_reference(path: Path) -> int:
    """rvm's truth table of the file equals the reference's on every input, bit for bit;
    returns the number of rows."""
    text = path.read_text()
    c = import_real(text, str(path))
    names = c.wire_names
    rows = truth_table(c)
    for inputs, outputs in rows:
        start = {names[w]: k for w, k in c.constants.items()}
        for reg, ws in c.inputs.items():
            for i, w in enumerate(ws):
                start[names[w]] = (inputs[reg] >> i) & 1
        want = reference(text, start)
        for reg, ws in c.outputs.items():
            got = [(outputs[reg] >> i) & 1 for i in range(len(ws))]
            assert got == [want[names[w]] for w in ws], (path.name, inputs, reg)
    return len(rows)


# ---- real RevLib files ---------------------------------------------------------------------------

def test_ham3_103_mct_mcf_with_an_f2_swap():
    c = read_real(DATA / "ham3_103.real")
    assert check_against_reference(DATA / "ham3_103.real") == 8
    # f2 is a swap: three CNOTs; the t3 and the t2 gates as they are
    assert cost(c).gates == {"not": 0, "cnot": 5, "toffoli": 1, "mcx": 0, "fredkin": 0}
    # ham3 is a permutation of 3 bits: every output row once
    outs = {tuple(o.values()) for _, o in truth_table(c)}
    assert len(outs) == 8


def test_4mod5_with_a_constant_input_and_garbage():
    c = read_real(DATA / "4mod5-v0_18.real")
    assert c.constants == {4: 0} and c.garbage == (0, 1, 2, 3)
    assert list(c.outputs) == ["e"]
    assert check_against_reference(DATA / "4mod5-v0_18.real") == 16
    # the function: e = 1 when the 4-bit input (a the most significant) is 0 mod 5
    for i, o in truth_table(c):
        x = (i["a"] << 3) | (i["b"] << 2) | (i["c"] << 1) | i["d"]
        assert o["e"] == (x % 5 == 0), x


def test_mod5adder_with_t4_gates():
    assert check_against_reference(DATA / "mod5adder_129.real") == 64
    assert cost(read_real(DATA / "mod5adder_129.real")).gates["mcx"] == 2


def test_peres_inverse_peres_and_every_fredkin_form():
    path = DATA / "peres_fredkin_mixed.real"
    assert check_against_reference(path) == 32
    g = cost(read_real(path)).gates
    # f3 k a c (one positive control) stays a Fredkin gate; f2, f4 with a negative control,
    # f3 with a negative control and f5 become CNOT, MCX or Toffoli, CNOT
    assert g["fredkin"] == 1 and g["mcx"] >= 3


def test_peres_then_inverse_is_the_identity_and_the_library_round_trips():
    text = (".version 1.0\n.numvars 4\n.variables a b c d\n.begin\np3 a b c\npi3 a b c\n"
            "f4 -a b c d\nf4 -a b c d\nt3 -a -b d\nt3 -a -b d\n.end\n")
    c = import_real(text)
    for i, o in truth_table(c):
        assert i == o


def test_v_gates_are_refused_by_name(capsys):
    with pytest.raises(RealError, match=r"decod24-v1_42.real:14: gate 'v' is V \(a controlled "
                                        r"square root of NOT\): a quantum gate"):
        read_real(DATA / "decod24-v1_42.real")
    for gate, name in (("v+ a b", "V\\+"), ("vi a b", "V\\+"), ("h1 a", "Hadamard")):
        with pytest.raises(RealError, match=f"is {name}"):
            import_real(f".variables a b\n.begin\n{gate}\n.end\n")
    code = main(["hw", "real", str(DATA / "decod24-v1_42.real"), "--table"])
    _, err = capsys.readouterr()
    assert code == 1 and "gate 'v' is V" in err and "Traceback" not in err


@pytest.mark.parametrize("text,message", [
    ("p4 a b c d", "a Peres gate (p4) acts on 3 lines, not 4"),
    ("p3 -a b c", "the lines of a Peres gate cannot be negated"),
    ("f3 a b -c", "the swapped lines of f3 cannot be negated"),
    ("f1 a", "f1 needs at least 2 lines"),
    ("t3 a b -c", "the target of t3 cannot be negated"),
    ("g3 a b c", "unknown gate 'g3'"),
])
def test_bad_gates(text, message):
    with pytest.raises(RealError, match=re.escape(message)):
        import_real(f".variables a b c d\n.begin\n{text}\n.end\n")


def test_cli_table_and_check_of_ham3(capsys, tmp_path):
    c = read_real(DATA / "ham3_103.real")
    table = truth_table(c)
    lines = []
    for i, o in table:
        lines.append("".join(str(i[k]) for k in "abc") + " " + "".join(str(o[k]) for k in "abc"))
    f = tmp_path / "ham3.tt"
    f.write_text("\n".join(lines) + "\n")
    code = main(["hw", "real", str(DATA / "ham3_103.real"), "--check", str(f)])
    out, _ = capsys.readouterr()
    assert code == 0 and "truth table: agrees" in out
    bad = lines[:]
    bad[3] = bad[3][:4] + ("0" if bad[3][4] == "1" else "1") + bad[3][5:]
    f.write_text("\n".join(bad) + "\n")
    code = main(["hw", "real", str(DATA / "ham3_103.real"), "--check", str(f)])
    out, _ = capsys.readouterr()
    assert code == 3 and "1 row(s) differ" in out
