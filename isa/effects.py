"""Which static cells a program can touch: the cells any run may write, and the cells whose
derivatives any rule may touch, from the instruction table's operand kinds.

The gradient fast path of the machine (rvm/_core.pyx, Core._gradient) uses them between two
calls on one machine: it puts back only the cells a run can have written (and the inputs a
call may have stored without a default) instead of the whole static image, and clears only
the adjoints a sweep can have touched.  Both are supersets, found without running anything:

* a cell is **written** when an instruction has it as a target operand (kind ``y``, or ``dy``
  of a derivative statement: a cell, or an array of ``dlen`` cells), directly (mode G), as an
  indexed element of a global array (mode X: the whole array), or through a parameter the
  callee writes (mode P: every argument some callsite binds to it, at every level of calls);
* a cell is **referenced** when any operand or callsite argument names it in those ways
  (read or written): the only static cells whose tangents, adjoints or adjoints' tangents a
  rule updates.

A run forward or back, interpreted or native, in any AD mode, writes no static cell outside
`written` (every opcode's inverse has the same target slots: tests/test_effects.py checks
it), and constants are never written (the verifier refuses it).  Ranges are half-open
[lo, hi) static addresses, sorted and merged.  This module depends on nothing outside isa/.
"""
from __future__ import annotations

from isa.program import MODE_G, MODE_P, MODE_X, Program
from isa.table import OPS

Ranges = list[tuple[int, int]]


def merge(ranges: list[tuple[int, int]]) -> Ranges:
    """Sorted, merged half-open ranges; empty ones dropped."""
    out: Ranges = []
    for lo, hi in sorted(r for r in ranges if r[1] > r[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


class _Walk:
    """One pass over the code and callsites, per function: the static ranges its operands
    name (written or all) and the parameters it uses (written or all)."""

    def __init__(self, program: Program):
        self.p = program
        nf = len(program.functions)
        self.writes: Ranges = []                   # static ranges targets name directly
        self.refs: Ranges = []                     # static ranges any operand names
        self.pw: list[set[int]] = [set() for _ in range(nf)]   # parameters each writes itself
        # (caller function, callsite) for every instruction that names a callsite
        self.sites: list[tuple[int, int]] = []
        owner = [-1] * len(program.code)
        for fi, f in enumerate(program.functions):
            for pc in range(f.begin, min(f.end + 1, len(owner))):
                owner[pc] = fi
        for pc, row in enumerate(program.code.tolist()):
            op = OPS[row[0]]
            fi = owner[pc]
            kinds = op.operands
            dlen = row[1 + kinds.index("dlen")] if "dlen" in kinds else -2
            for k, kind in enumerate(kinds):
                w = row[1 + k]
                if kind == "callsite":
                    self.sites.append((fi, w))
                elif kind in ("y", "a") or (kind in ("dy", "da") and dlen == -2):
                    self.cell(fi, w, kind == "y" or kind == "dy")
                elif kind in ("dy", "da"):
                    self.array(fi, w, dlen, kind == "dy")

    def cell(self, fi: int, word: int, target: bool) -> None:
        mode, at = word & 7, word >> 3
        if mode == MODE_G:
            self.name(at, at + 1, target)
        elif mode == MODE_P:
            if target and fi >= 0:
                self.pw[fi].add(at)
        elif mode == MODE_X and 0 <= at < len(self.p.xtab):
            x = self.p.xtab[at]
            self.array(fi, int(x.base), int(x.length), target)
            self.cell(fi, int(x.index), False)

    def array(self, fi: int, word: int, length: int, target: bool) -> None:
        mode, at = word & 7, word >> 3
        if mode == MODE_G and length > 0:
            self.name(at, at + length, target)
        elif mode == MODE_P and target and fi >= 0:
            self.pw[fi].add(at)

    def name(self, lo: int, hi: int, target: bool) -> None:
        self.refs.append((lo, hi))
        if target:
            self.writes.append((lo, hi))


def _written_params(w: _Walk) -> list[set[int]]:
    """Per function, the parameters a run of it may write: its own targets, those declared
    written, and those it passes on to a parameter a callee may write (to a fixed point)."""
    fns = w.p.functions
    pw = [set(s) | {j for j, q in enumerate(f.params) if q.written}
          for s, f in zip(w.pw, fns)]
    changed = True
    while changed:
        changed = False
        for fi, s in w.sites:
            if fi < 0 or not 0 <= s < len(w.p.callsites):
                continue
            cs = w.p.callsites[s]
            for j, a in enumerate(cs.args):
                if j not in pw[cs.func]:
                    continue
                mode, at = a.word & 7, a.word >> 3
                if mode == MODE_X and 0 <= at < len(w.p.xtab):
                    mode, at = int(w.p.xtab[at].base) & 7, int(w.p.xtab[at].base) >> 3
                if mode == MODE_P and at not in pw[fi]:
                    pw[fi].add(at)
                    changed = True
    return pw


def _args(w: _Walk, pw: list[set[int]] | None) -> None:
    """Name every callsite argument's static cells (only those bound to a parameter the callee
    may write, when pw is given) as referenced, and as written with pw."""
    for fi, s in w.sites:
        if not 0 <= s < len(w.p.callsites):
            continue
        cs = w.p.callsites[s]
        for j, a in enumerate(cs.args):
            target = pw is not None and j in pw[cs.func]
            if pw is not None and not target:
                continue
            if a.length is None:
                w.cell(fi, int(a.word), target)
            else:
                w.array(fi, int(a.word), int(a.length), target)


def static_writes(program: Program) -> Ranges:
    """The static cells any run of `program` may write (see the module's docstring)."""
    w = _Walk(program)
    _args(w, _written_params(w))
    return merge(w.writes)


def static_refs(program: Program) -> Ranges:
    """The static cells any operand or callsite argument of `program` names: the only static
    cells a differentiation rule updates the derivatives of."""
    w = _Walk(program)
    _args(w, None)
    return merge(w.refs)
