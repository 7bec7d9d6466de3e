"""The parser's fast path (assembler/fastpath.py) is an optimization, not a second grammar:
every program assembles to the same Program, and every wrong one to the same diagnostics,
with it and without it."""
from __future__ import annotations

import glob
import os
import random

import numpy as np
import pytest

from assembler import AssemblyError, assemble, assemble_file, driver

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def both(fn, *args):
    """fn(*args) with the fast path on and off: (result or diagnostics) twice."""
    out = []
    for fast in (True, False):
        driver.FAST_PATH = fast
        try:
            p = fn(*args)
            out.append(("ok", p))
        except AssemblyError as e:
            out.append(("err", [str(d) for d in e.diagnostics]))
        finally:
            driver.FAST_PATH = True
    return out


def same(a, b) -> None:
    assert a[0] == b[0], (a, b)
    if a[0] == "err":
        assert a[1] == b[1]
        return
    p, q = a[1], b[1]
    assert np.array_equal(p.code, q.code)
    assert np.array_equal(p.lines, q.lines)
    assert p.xtab == q.xtab and p.consts == q.consts and p.callsites == q.callsites
    assert p.functions == q.functions and p.labels == q.labels


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "programs", "**", "*.rasm"),
                                        recursive=True)))
def test_example_programs_are_the_same_either_way(path):
    if "lib" in path:
        return
    same(*both(assemble_file, path))


HEAD = """
input  a: int[6] = [1, 2, 3, 4, 5, 6]
inout  b: int[6]
input  i: int = 2
input  j: int = 3
inout  k: int
inout  s: int
inout  v: float[6]
inout  th: float[6]
inout  x: fixed[6]
inout  acc: fixed
const  w: fixed = 0.25
inout  l: lns
input  m: lns = 2.0
"""

LINES = ["s += a[{p}]", "s -= a[{p}] * k", "b[{p}] += a[{q}] / j", "k += {n}", "k -= {n}",
         "k ^= {n}", "s ^= a[{p}] & b[{q}]", "acc += x[{p}] * w", "acc -= x[{p}] * 0.5",
         "v[{p}] += th[{q}] - v[{r}]", "v[{p}] -= th[{q}] + v[{r}]", "s += a[i] * a[j]",
         "b[i] += a[j]", "b[i] += b[j]", "b[i] += b[i]", "s += s", "k += k * j", "a[1] += s",
         "inc k", "dec b[{p}]", "neg s", "not k", "swap b[{p}], b[{q}]", "swap s, k",
         "rot v[{p}], v[{q}], th[{r}]", "irot v[{p}], v[{q}], th[{r}]", "l *= m", "l /= m",
         "s += a[{p}] % j", "s -= a[{p}] ^ k", "i += 1", "w += acc", "s += undefined",
         "b[{n}] += 1", "k += a", "k += 1.5", "s += x[{p}]", "b[k] += a[k]", "k += b[k]",
         "v[{p}] <=> v[{q}]", "s <=> k", "s += -{n}", "s += {n} * j", "k += 2 * 3",
         "s += a[ {p} ]   ; comment", "acc += w", "s += i", "  # just a comment", ""]


@pytest.mark.parametrize("seed", range(20))
def test_random_simple_lines_are_the_same_either_way(seed):
    rng = random.Random(seed)
    body = []
    for _ in range(40):
        line = rng.choice(LINES).format(p=rng.randrange(6), q=rng.randrange(6),
                                        r=rng.randrange(6), n=rng.randrange(-3, 9))
        body.append("    " + line)
    src = HEAD + "func main() {\n" + "\n".join(body) + "\n}\n"
    same(*both(assemble, src, "t.rasm"))


def test_locals_and_loops_change_what_names_mean():
    src = HEAD + """
func main() {
    s += k
    local k: int
    k += s
    for t in 0..3 {
        s += a[t]
    }
    k -= s
    delocal k
    s -= k
}
"""
    same(*both(assemble, src, "t.rasm"))


def test_the_instruction_limit_is_reported_at_the_statement_that_crosses_it(monkeypatch):
    """The 2**20-instruction limit (E006), with a small limit so that the test is quick; the
    fast path stops short of the limit and the general path reports the crossing line."""
    from assembler import codegen
    monkeypatch.setattr(codegen, "MAX_CODE", 1000)
    src = "inout s: int\ninout a: int[4]\nfunc main() {\n" + "    s += a[1]\n" * 2000 + "}\n"
    for fast in (True, False):
        driver.FAST_PATH = fast
        try:
            with pytest.raises(AssemblyError) as e:
                assemble(src, "t.rasm")
        finally:
            driver.FAST_PATH = True
        d = e.value.diagnostics[0]
        assert (d.code, d.line) == ("E006", 1003), str(d)     # begin is pc 0: line 4 is pc 1
        assert "exceeds 1000 instructions" in d.message
