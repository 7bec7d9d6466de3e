"""Exact inversion of bytecode.

A straight run of instructions inverts by mirroring: the instruction at offset p of an n-long
block moves to offset n-1-p and becomes its inverse opcode (isa.table.INVERSE).  Forks and
joins swap roles (`jmp` <-> `join`), so their pc operands are mirrored too; `call` <-> `uncall`.
The same function serves the compute-copy-uncompute block (`with ... do`) and whole-program
inversion (every function body mirrored between its `begin` and `end`).
"""
from __future__ import annotations

import copy

import numpy as np

from isa.derivatives import DERIVATIVE_FAMILIES
from isa.table import INVERSE, OP_BY_NAME, OPS

_JMP = OP_BY_NAME["jmp"].code
_JOIN = OP_BY_NAME["join"].code
_CALL = OP_BY_NAME["call"].code
_UNCALL = OP_BY_NAME["uncall"].code
# derivative statements call their function too: in a whole-program inversion the callee is
# inverted (its value negated), so `g += grad f` stays `g += grad f'` = `g -= grad f`
_CALLERS = {_CALL, _UNCALL} | {op.code for op in OPS
                               if op.family in DERIVATIVE_FAMILIES}
_PC_SLOT = 1 + OPS[_JMP].operands.index("pc")


def invert_rows(rows: np.ndarray, base: int, swap_calls: bool = True) -> np.ndarray:
    """Inverse of the block `rows` that sits at code address `base` (and stays there).

    Every jmp/join inside the block must pair with one inside it.  With `swap_calls` a call
    becomes an uncall of the same function (the callee is unchanged); whole-program inversion
    inverts the callees themselves and so keeps calls (and derivative statements, whose value
    the inverted callee negates) as they are."""
    n = len(rows)
    out = np.array(rows[::-1], dtype=np.int64, copy=True)
    for i in range(n):
        op = int(out[i, 0])
        if swap_calls or op not in _CALLERS:
            out[i, 0] = INVERSE[op]
        if op in (_JMP, _JOIN):
            rel = int(out[i, _PC_SLOT]) - base
            if not 0 <= rel < n:
                raise ValueError(f"jump at {base + n - 1 - i} leaves the block being inverted")
            out[i, _PC_SLOT] = base + (n - 1 - rel)
    return out


def invert_program(program):
    """A Program whose every function runs as the inverse of the original one.

    Running the result forward is running the original backward (bit-exact for int, fixed and
    lns instructions).  Inputs and outputs swap roles; the memory layout is unchanged."""
    from isa.program import INPUT, OUTPUT
    inv = copy.deepcopy(program)
    for f in inv.functions:
        lo, hi = f.begin + 1, f.end
        inv.code[lo:hi] = invert_rows(program.code[lo:hi], lo, swap_calls=False)
        if inv.lines is not None:
            inv.lines[lo:hi] = program.lines[lo:hi][::-1]
    inv.labels = {}
    for pc, name in program.labels.items():
        f = program.function_at(pc)
        if f is not None and f.begin < pc < f.end:
            inv.labels[f.begin + f.end - pc] = name
        else:
            inv.labels[pc] = name
    for g in inv.globals:
        if g.role == INPUT:
            g.role = OUTPUT
        elif g.role == OUTPUT:
            g.role = INPUT
        g.default = None   # the inverse starts from the original's end state
    return inv
