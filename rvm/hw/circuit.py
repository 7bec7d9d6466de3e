"""The gate IR: a circuit is a flat array of gates over numbered wires.

Each gate is one row of four int32 words `[kind, p, q, r]`:

  NOT      [0, t, -, -]
  CNOT     [1, t, c, -]
  TOFFOLI  [2, t, c1, c2]
  MCX      [3, t, off, k]   NOT t if all k controls controls[off:off+k] fire; a control is a
                            wire w >= 0, or ~w (< 0) for a negative control that fires on 0
  FREDKIN  [4, t1, t2, c]   swap t1 and t2 if c is 1
  ALLOC    [5, w, -, -]     pseudo-op: ancilla w comes into use; it must be zero
  FREE     [6, w, -, -]     pseudo-op: ancilla w is released; it must be zero (checked)

Every gate is its own inverse, so a circuit is inverted by reversing its rows (and swapping
ALLOC with FREE).  Registers name lists of wires (least significant bit first) on the way in
and on the way out; a wire relabelling (swap, rotation) is a circuit whose outputs name other
wires than its inputs, with zero gates.

`Builder` implements isa.gates.Builder: realizations emit gates into it, ancillas get fresh
virtual wires, and `build()` packs the rows and maps the ancillas onto as few physical wires
as their lifetimes allow (so the wire count is the registers plus the peak of live ancillas).
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

NOT, CNOT, TOFFOLI, MCX, FREDKIN, ALLOC, FREE = range(7)
KIND_NAMES = ("not", "cnot", "toffoli", "mcx", "fredkin", "alloc", "free")
GATE_KINDS = KIND_NAMES[:5]


@dataclass(frozen=True, eq=False)
class Circuit:
    """A reversible circuit: gates (G x 4 int32), MCX control lists, wire count and registers."""
    name: str
    gates: np.ndarray
    controls: np.ndarray
    n_wires: int
    inputs: dict[str, tuple[int, ...]]
    outputs: dict[str, tuple[int, ...]]
    sources: tuple[str, ...] = ()       # registers that must come back unchanged
    wire_names: tuple[str, ...] = field(default=())
    # Imported circuits (RevLib .real) may fix some input lines to a constant and leave some
    # outputs as garbage; the realizations of isa/gates.py have neither.
    constants: dict[int, int] = field(default_factory=dict)    # wire -> 0/1 on entry
    garbage: tuple[int, ...] = ()                               # wires left as junk
    # gates a realization spends uncomputing its ancilla registers (emitted by Builder.undo):
    # the price of erasing nothing, instead of kT ln 2 per bit
    uncompute: int = 0

    def inverse(self) -> Circuit:
        """The inverse circuit: the rows reversed, ALLOC and FREE swapped, outputs <-> inputs."""
        g = self.gates[::-1].copy()
        kinds = g[:, 0].copy()
        g[kinds == ALLOC, 0] = FREE
        g[kinds == FREE, 0] = ALLOC
        name = self.name[:-3] if self.name.endswith("^-1") else self.name + "^-1"
        return Circuit(name, g, self.controls, self.n_wires, dict(self.outputs),
                       dict(self.inputs), self.sources, self.wire_names,
                       uncompute=self.uncompute)

    @property
    def gate_count(self) -> int:
        """Gates without the ALLOC/FREE pseudo-ops."""
        return int((self.gates[:, 0] < ALLOC).sum())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Circuit):
            return NotImplemented
        return (self.n_wires == other.n_wires and self.inputs == other.inputs
                and self.outputs == other.outputs and self.gate_list() == other.gate_list())

    __hash__ = object.__hash__

    def mcx_controls(self, row: int) -> tuple[int, ...]:
        _, _, off, k = (int(v) for v in self.gates[row])
        return tuple(int(c) for c in self.controls[off:off + k])

    @property
    def register_wires(self) -> frozenset[int]:
        return frozenset(w for ws in self.inputs.values() for w in ws)

    @property
    def ancilla_wires(self) -> list[int]:
        regs = self.register_wires
        return [w for w in range(self.n_wires) if w not in regs]

    def wire_name(self, w: int) -> str:
        if self.wire_names:
            return self.wire_names[w]
        for name, ws in self.inputs.items():
            if w in ws:
                return f"{name}{ws.index(w)}"
        return f"anc{w}"

    def gate_list(self) -> list[tuple[str, int, tuple[int, ...]]]:
        """The gates as (kind name, target or first target, controls / second wires), for
        printing and export: NOT (t, ()), CNOT (t, (c,)), TOFFOLI (t, (c1, c2)),
        MCX (t, controls), FREDKIN (t1, (t2, c)), ALLOC/FREE (w, ())."""
        out = []
        for i, (k, p, q, r) in enumerate(self.gates.tolist()):
            if k == NOT or k in (ALLOC, FREE):
                out.append((KIND_NAMES[k], p, ()))
            elif k == CNOT:
                out.append(("cnot", p, (q,)))
            elif k == TOFFOLI:
                out.append(("toffoli", p, (q, r)))
            elif k == MCX:
                out.append(("mcx", p, self.mcx_controls(i)))
            else:
                out.append(("fredkin", p, (q, r)))
        return out


class Builder:
    """Collects gates for a circuit (isa.gates.Builder).  Register wires come first; each
    alloc hands out fresh virtual wires that build() maps onto physical ones."""

    def __init__(self) -> None:
        self._rows: list[int] = []          # flat: kind, p, q, r per gate
        self._ctl: list[int] = []
        self._next = 0
        self._n_regs = 0
        self._uncompute = 0                 # gates emitted by undo
        self.inputs: dict[str, tuple[int, ...]] = {}

    # ---- registers and ancillas --------------------------------------------------------

    def register(self, name: str, n: int) -> list[int]:
        if self._rows or self._next != self._n_regs:
            raise RuntimeError("registers come before any gate or ancilla")
        ws = list(range(self._next, self._next + n))
        self._next += n
        self._n_regs = self._next
        self.inputs[name] = tuple(ws)
        return ws

    def alloc(self, k: int) -> list[int]:
        ws = list(range(self._next, self._next + k))
        self._next += k
        for w in ws:
            self._rows += (ALLOC, w, 0, 0)
        return ws

    def free(self, wires: Sequence[int]) -> None:
        for w in reversed(list(wires)):
            self._rows += (FREE, w, 0, 0)

    # ---- gates ---------------------------------------------------------------------------

    def x(self, target: int, *controls: int) -> None:
        wires = [target] + [c if c >= 0 else ~c for c in controls]
        if len(set(wires)) != len(wires):
            raise ValueError(f"gate on wire {target} with controls {controls}: wires repeat")
        k = len(controls)
        if any(c < 0 for c in controls) or k > 2:
            self._rows += (MCX, target, len(self._ctl), k)
            self._ctl += controls
        elif k == 0:
            self._rows += (NOT, target, 0, 0)
        elif k == 1:
            self._rows += (CNOT, target, controls[0], 0)
        else:
            self._rows += (TOFFOLI, target, controls[0], controls[1])

    def fredkin(self, control: int, t1: int, t2: int) -> None:
        if len({control, t1, t2}) != 3:
            raise ValueError("fredkin wires repeat")
        self._rows += (FREDKIN, t1, t2, control)

    def mark(self) -> int:
        return len(self._rows) // 4

    def undo(self, start: int, end: int) -> None:
        """Append the inverse of gates [start, end): reversed, ALLOC <-> FREE.  A virtual
        wire freed inside and allocated again here starts a new lifetime."""
        rows = self._rows
        for g in range(end - 1, start - 1, -1):
            k, p, q, r = rows[4 * g:4 * g + 4]
            if k == ALLOC:
                k = FREE
            elif k == FREE:
                k = ALLOC
            else:
                self._uncompute += 1
            rows += (k, p, q, r)

    # ---- packing -------------------------------------------------------------------------

    def build(self, name: str, outputs: dict[str, Sequence[int]] | None = None,
              sources: Sequence[str] = ()) -> Circuit:
        """Pack the gates; ancilla lifetimes are mapped onto the lowest free physical wire."""
        rows = np.array(self._rows, dtype=np.int64).reshape(-1, 4)
        nreg = self._n_regs
        phys = np.full(self._next, -1, dtype=np.int64)
        phys[:nreg] = np.arange(nreg)
        free: list[int] = []
        top = nreg
        ctl_out: list[int] = []
        out = rows.copy()
        live = 0
        for i, (k, p, q, r) in enumerate(rows.tolist()):
            if k == ALLOC:
                if phys[p] >= 0 and p >= nreg:
                    raise RuntimeError(f"{name}: ancilla {p} allocated twice")
                if p < nreg:
                    raise RuntimeError(f"{name}: alloc of register wire {p}")
                if free:
                    phys[p] = heapq.heappop(free)
                else:
                    phys[p] = top
                    top += 1
                live += 1
                out[i, 1] = phys[p]
                continue
            if k == FREE:
                if p < nreg or phys[p] < 0:
                    raise RuntimeError(f"{name}: free of wire {p} that is not a live ancilla")
                out[i, 1] = phys[p]
                heapq.heappush(free, int(phys[p]))
                phys[p] = -1
                live -= 1
                continue
            if k == MCX:
                cs = self._ctl[q:q + r]
                mapped = [int(phys[c]) if c >= 0 else ~int(phys[~c]) for c in cs]
                if any((m if m >= 0 else ~m) < 0 for m in mapped):
                    raise RuntimeError(f"{name}: gate {i} uses a wire that is not live")
                out[i, 1] = phys[p]
                out[i, 2] = len(ctl_out)
                ctl_out += mapped
            else:
                used = (p,) if k == NOT else (p, q) if k == CNOT else (p, q, r)
                for j, w in enumerate(used, start=1):
                    out[i, j] = phys[w]
            if out[i, 1] < 0 or (k in (CNOT, TOFFOLI, FREDKIN) and (out[i, 2:] < 0).any()):
                raise RuntimeError(f"{name}: gate {i} uses a wire that is not live")
        if live:
            raise RuntimeError(f"{name}: {live} ancilla(s) never freed")
        outs = {k: tuple(v) for k, v in (outputs or self.inputs).items()}
        return Circuit(name, out.astype(np.int32), np.array(ctl_out, dtype=np.int32), top,
                       dict(self.inputs), outs, tuple(sources), uncompute=self._uncompute)
