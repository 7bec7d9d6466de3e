"""`rvm run` prints arrays too long for one line as their ends and length, and writes long arrays
(`--full`, `--json`) piece by piece instead of as one string in memory."""
from __future__ import annotations

import json

import numpy as np
import pytest

import rvm
from rvm.cli import SUMMARY_CELLS, main

PROGRAM = """\
.fixed 16
output a: int[5000]
output b: float[3000]
output f: fixed[2000]
output s: stack[1500]
output c: int[4]
output one: int
func main() {
  a[0] += 1
  a[4999] += 7
  b[1] += 2.5
  b[2] -= 1.0 / 3.0
  f[1999] += 1.25
  c[3] += 9
  for i in 0..1201 {
    local x: int = 0
    x += i
    push x, s
    delocal x = 0
  }
}
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "big.rasm"
    path.write_text(PROGRAM)
    return str(path)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def expected(path):
    m = rvm.Machine(rvm.assemble(path))
    m.reset({})
    m.run()
    return m


def test_long_arrays_print_their_ends_and_length(capsys, program):
    out = run(capsys, "run", program)
    assert out.splitlines() == [
        "a = [1, 0, 0, ..., 0, 0, 7] (5000 values; --full prints them all)",
        f"b = [0.0, 2.5, {-1 / 3!r}, ..., 0.0, 0.0, 0.0] (3000 values; --full prints them all)",
        "f = [0.0, 0.0, 0.0, ..., 0.0, 0.0, 1.25] (2000 values; --full prints them all)",
        "s = [0, 1, 2, ..., 1198, 1199, 1200] (1201 values; --full prints them all)",
        "c = [0, 0, 0, 9]",
        "one = 0",
    ]
    assert 1000 == SUMMARY_CELLS


def test_full_and_json_print_every_value(capsys, program):
    m = expected(program)
    lines = dict(line.split(" = ", 1) for line in run(capsys, "run", program, "--full")
                 .splitlines())
    doc = json.loads(run(capsys, "run", program, "--json"))["outputs"]
    for name in "abfsc":  # every array, long and short
        want = m.read(name).tolist()
        assert json.loads(lines[name]) == want
        assert doc[name] == want
    assert len(doc["a"]) == 5000 and len(doc["s"]) == 1201


def test_raw_json_of_a_long_array_is_one_string_of_words(capsys, program):
    m = expected(program)
    doc = json.loads(run(capsys, "run", program, "--json", "--raw"))["outputs"]
    words = doc["a"].strip("[]").split(", ")
    assert len(words) == 5000
    assert words[0] == "$0x0000000000000001" and words[-1] == "$0x0000000000000007"
    assert [int(w[1:], 16) for w in doc["b"].strip("[]").split(", ")[:3]] == \
        m.read_raw("b")[:3].view(np.uint64).tolist()
    # a stack's raw text is every cell, its size first, as a raw value is read back
    stack = [int(w[1:], 16) for w in doc["s"].strip("[]").split(", ")]
    assert stack == m.read_raw("s").tolist() and stack[0] == 1201


def test_read_range_pages_through_an_array_without_copying_it_whole(program):
    m = expected(program)
    assert m.size("a") == 5000 and m.size("s") == 1201 and m.size("c") == 4
    assert m.read_range("a", 4998, 6000).tolist() == [0, 7]
    assert m.read_range("s", 1199, 1201).tolist() == [1199, 1200]
    assert np.array_equal(m.read_range("b", 0, 3, raw=True), m.read_raw("b")[:3])
    assert m.size("one") is None
    with pytest.raises(rvm.RVMError, match="one is not an array"):
        m.read_range("one", 0, 1)
