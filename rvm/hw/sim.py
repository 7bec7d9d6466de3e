"""Simulating a circuit on register values, bit-sliced, with the instruction-level checks.

`simulate(c, values)` runs N inputs at once (64 per block of the Cython kernel) and then
checks what every realization promises: each ancilla was zero at every ALLOC/FREE and every
non-register wire is zero at the end, and each source register holds its input again.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import _sim
from .circuit import KIND_NAMES, Circuit


class CircuitError(Exception):
    """A circuit broke an instruction-level promise (dirty ancilla, changed source)."""


def _wires(ws) -> np.ndarray:
    return np.asarray(ws, dtype=np.int32)


def load(c: Circuit, values: Mapping[str, np.ndarray], blocks: int) -> np.ndarray:
    """A state [n_wires, blocks] with each input register's values bit-sliced onto its wires
    (input i is lane i%64 of block i//64) and every other wire zero."""
    state = np.zeros((c.n_wires, blocks), dtype=np.uint64)
    for name, ws in c.inputs.items():
        _sim.scatter(np.ascontiguousarray(values[name], dtype=np.uint64), _wires(ws), state)
    for w, v in c.constants.items():        # constant-1 lines of an imported circuit
        if v:
            state[w, :] = ~np.uint64(0)
    return state


def read(state: np.ndarray, wires, count: int) -> np.ndarray:
    """The values of a register (its wires, LSB first) in the first `count` inputs."""
    out = np.empty(count, dtype=np.uint64)
    _sim.gather(state, _wires(wires), out)
    return out


def run(c: Circuit, state: np.ndarray) -> None:
    """Run the gates on a packed state; a dirty ALLOC/FREE raises CircuitError."""
    g = _sim.run(c.gates, c.controls, state)
    if g >= 0:
        kind, w = KIND_NAMES[c.gates[g, 0]], int(c.gates[g, 1])
        raise CircuitError(f"{c.name}: gate {g} ({kind} of wire {c.wire_name(w)}) found the "
                           f"ancilla nonzero")


def check_clean(c: Circuit, state: np.ndarray, count: int | None = None) -> None:
    """Every wire that is neither an output nor garbage must be back at its start value (zero,
    or an imported circuit's constant) in the first `count` inputs."""
    keep = np.zeros(c.n_wires, dtype=bool)
    keep[[w for ws in c.outputs.values() for w in ws]] = True
    keep[list(c.garbage)] = True
    want = np.zeros(c.n_wires, dtype=np.uint64)
    for w, v in c.constants.items():
        if v:
            want[w] = ~np.uint64(0)
    diff = state ^ want[:, None]
    if count is not None and count % 64:     # lanes past the last input are padding
        diff[:, -1] &= np.uint64((1 << (count % 64)) - 1)
    dirty = np.flatnonzero(~keep & diff.any(axis=1))
    if len(dirty):
        w = int(dirty[0])
        raise CircuitError(f"{c.name}: ancilla wire {c.wire_name(w)} is not back to its "
                           f"start value at the end")


def simulate(c: Circuit, values: Mapping[str, np.ndarray | int], check: bool = True
             ) -> dict[str, np.ndarray]:
    """Run the circuit on N inputs (each register's values as an array of N unsigned words,
    or one int for all) and return the output registers' values.  With `check`, a dirty
    ancilla or a changed source raises CircuitError."""
    arrays = {k: np.atleast_1d(np.asarray(v, dtype=np.uint64)) for k, v in values.items()
              if k in c.inputs}
    missing = set(c.inputs) - set(arrays)
    if missing:
        raise ValueError(f"{c.name}: no values for register(s) {', '.join(sorted(missing))}")
    count = max(len(v) for v in arrays.values()) if arrays else 1
    arrays = {k: np.ascontiguousarray(np.broadcast_to(v, (count,))) for k, v in arrays.items()}
    blocks = (count + 63) // 64
    state = load(c, arrays, blocks)
    run(c, state)
    if check:
        check_clean(c, state, count)
    outs = {name: read(state, ws, count) for name, ws in c.outputs.items()}
    if check:
        for s in c.sources:
            bad = np.flatnonzero(outs[s] != arrays[s])
            if len(bad):
                i = int(bad[0])
                raise CircuitError(f"{c.name}: source {s} changed from {int(arrays[s][i])} to "
                                   f"{int(outs[s][i])}")
    return outs


def simulate_one(c: Circuit, values: Mapping[str, int], check: bool = True) -> dict[str, int]:
    """One input: register values as ints (n-bit, unsigned), outputs likewise."""
    outs = simulate(c, {k: np.uint64(int(v)) for k, v in values.items()}, check)
    return {k: int(v[0]) for k, v in outs.items()}
