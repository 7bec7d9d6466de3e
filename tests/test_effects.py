"""isa/effects.py: the static cells a program may write, and those any operand names (issue 20:
the gradient call path puts back and clears only those between calls)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import rvm
from isa.effects import merge, static_refs, static_writes
from isa.table import INVERSE, OPS

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzzing  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

SRC = """
input  a: float[3] = [1.0, 2.0, 3.0]
input  k: int = 1
input  u: float = 0.5
input  ro: float[2] = [7.0, 8.0]       ; only read
output y: float
global s: float[4]                      ; written through an index
global t: float                         ; written two calls down, through parameters
global v: float                         ; passed to a parameter nobody writes
global d: float                         ; a derivative statement's target

func inner(p: float, q: float) {
    p += q * q
}

func outer(p: float, q: float) {
    call inner(p, q)
}

func sq(out: float, x: float) {
    out += x * x
}

func main() {
    s[k] += a[0] * ro[1]
    call outer(t, u)
    y += t + v
    d += grad sq(u) wrt u
}
"""


def addr(prog, name: str) -> tuple[int, int]:
    g = prog.global_named(name)
    return g.addr, g.addr + g.size


def test_writes_and_refs_of_a_program_with_calls_and_indices():
    prog = rvm.assemble(SRC)
    w = static_writes(prog)
    covered = np.zeros(prog.n_static, dtype=bool)
    for lo, hi in w:
        covered[lo:hi] = True
    for name in ("s", "t", "y", "d"):
        lo, hi = addr(prog, name)
        assert covered[lo:hi].all(), name
    for name in ("a", "k", "u", "ro", "v"):
        lo, hi = addr(prog, name)
        assert not covered[lo:hi].any(), name
    refs = np.zeros(prog.n_static, dtype=bool)
    for lo, hi in static_refs(prog):
        refs[lo:hi] = True
    for name in ("u", "y", "s", "t", "v", "d", "k"):
        lo, hi = addr(prog, name)
        assert refs[lo:hi].all(), name
    # a constant index names one element, not the array
    a, ro = addr(prog, "a")[0], addr(prog, "ro")[0]
    assert refs[a:a + 3].tolist() == [True, False, False]
    assert refs[ro:ro + 2].tolist() == [False, True]


def test_ranges_merge():
    assert merge([(5, 7), (0, 2), (2, 3), (6, 9), (4, 4)]) == [(0, 3), (5, 9)]


def test_every_inverse_has_the_same_target_slots():
    """A backward run writes what the forward one does: each opcode's inverse names its
    targets (y, dy) in the same slots."""
    for i, op in enumerate(OPS):
        inv = OPS[INVERSE[i]]
        assert [k in ("y", "dy") for k in op.operands] == \
            [k in ("y", "dy") for k in inv.operands], (op.name, inv.name)


def _changed_outside(prog, inputs: dict) -> list[str]:
    """Run forward and back interpreted; the globals that changed at any of the start, end or
    back states but lie outside static_writes."""
    m = rvm.Machine(prog, native=False)
    m.reset(inputs)
    start = m.mem[:prog.n_static].copy()
    m.run()
    end = m.mem[:prog.n_static].copy()
    m.run(-1)
    back = m.mem[:prog.n_static].copy()
    written = np.zeros(prog.n_static, dtype=bool)
    for lo, hi in static_writes(prog):
        written[lo:hi] = True
    moved = ((start != end) | (start != back)) & ~written
    return [g.name for g in prog.globals if moved[g.addr:g.addr + g.size].any()]


PROGRAMS = sorted(p for p in (ROOT / "programs").glob("*.rasm")) + \
    sorted((ROOT / "programs" / "gradbench").glob("*.rasm"))


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_a_run_writes_nothing_outside(path):
    prog = rvm.assemble(path)
    assert _changed_outside(prog, {}) == []


def test_random_programs_write_nothing_outside():
    """fuzzing's random programs (calls, uncalls, indexed cells, local ancillas) from drawn
    inputs; and the analysis is not vacuous: every cell a run changed is inside it, and the
    cells it leaves out are the inputs no instruction targets."""
    ran = 0
    for seed in range(60):
        rnd = random.Random(seed)
        src = fuzzing.random_program(rnd, ("int", "fixed", "float"))
        try:
            prog = rvm.assemble(src)
        except rvm.RVMError:
            continue
        try:
            assert _changed_outside(prog, fuzzing.random_inputs(rnd, ("int", "fixed",
                                                                      "float"))) == [], src
        except rvm.RVMError:
            continue                         # a trap (overflow, ...): nothing to compare
        ran += 1
    assert ran >= 30


def test_ba_writes_exactly_its_intermediates_and_outputs():
    """programs/gradbench/ba.rasm: every global but the inputs is written, no input is."""
    prog = rvm.assemble(ROOT / "programs" / "gradbench" / "ba.rasm")
    want = merge([(g.addr, g.addr + g.size) for g in prog.globals if not g.is_input])
    assert static_writes(prog) == want
