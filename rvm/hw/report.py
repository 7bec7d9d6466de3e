"""Cost reports: gates by type, depth, wires, ancillas, garbage and the Landauer bound.

`cost(circuit)` measures one circuit (one instruction at one width); `ProgramCost` (filled by
rvm/hw/cosim.py) sums the circuits a program run executed and keeps a breakdown by opcode.
Both render as rich tables and as JSON.

Landauer: erasing one bit of information dissipates at least kT ln 2.  A realization of
isa/gates.py erases nothing (every ancilla is uncomputed and zero-checked, no output is
garbage), so its bound is 0 J; an imported RevLib circuit's garbage outputs are the bits a
reset would erase.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .circuit import ALLOC, GATE_KINDS, KIND_NAMES, Circuit

K_BOLTZMANN = 1.380649e-23      # J/K (exact in the 2019 SI)
ROOM_TEMPERATURE = 300.0         # K


def landauer_joules(bits: int, temperature: float = ROOM_TEMPERATURE) -> float:
    """The least heat erasing `bits` bits dissipates at `temperature` kelvin: bits kT ln 2."""
    return bits * K_BOLTZMANN * temperature * math.log(2)


@dataclass
class Cost:
    """What one circuit costs."""
    name: str
    width: int
    gates: dict[str, int]           # not, cnot, toffoli, mcx, fredkin
    depth: int                      # ASAP, every gate one time step
    toffoli_depth: int              # gates with >= 2 controls along the worst path
    wires: int
    register_bits: int
    ancilla_peak: int               # ancilla wires live at once (= wires - register bits)
    ancillas_clean: bool            # every ancilla released with a zero check
    relabelling: bool               # zero gates, the outputs are other wires: a free permutation
    garbage_bits: int
    construction: str = ""
    uncompute_gates: int = 0        # spent uncomputing ancillas (Bennett), included in total

    @property
    def total(self) -> int:
        return sum(self.gates.values())

    @property
    def erased_bits(self) -> int:
        """Bits a reset would erase: the garbage outputs (ancillas come back zero)."""
        return self.garbage_bits

    def landauer(self, temperature: float = ROOM_TEMPERATURE) -> float:
        return landauer_joules(self.erased_bits, temperature)

    def to_json(self, temperature: float = ROOM_TEMPERATURE) -> dict[str, Any]:
        return dict(name=self.name, width=self.width, gates=dict(self.gates), total=self.total,
                    depth=self.depth, toffoli_depth=self.toffoli_depth, wires=self.wires,
                    register_bits=self.register_bits, ancilla_peak=self.ancilla_peak,
                    ancillas_clean=self.ancillas_clean, relabelling=self.relabelling,
                    garbage_bits=self.garbage_bits, erased_bits=self.erased_bits,
                    temperature_K=temperature, landauer_J=self.landauer(temperature),
                    uncompute_gates=self.uncompute_gates, construction=self.construction)


def gate_counts(c: Circuit) -> dict[str, int]:
    k = Counter(KIND_NAMES[g] for g in c.gates[:, 0].tolist() if g < ALLOC)
    return {name: k.get(name, 0) for name in GATE_KINDS}


def cost(c: Circuit, width: int | None = None, construction: str = "") -> Cost:
    """Measure a circuit."""
    from . import _sim

    d, td = _sim.depth(c.gates, c.controls, c.n_wires)
    reg = len(c.register_wires)
    g = gate_counts(c)
    relabel = sum(g.values()) == 0 and c.outputs != c.inputs
    if width is None:
        width = max((len(ws) for ws in c.inputs.values()), default=0)
    return Cost(c.name, width, g, int(d), int(td), c.n_wires, reg, c.n_wires - reg,
                not c.garbage, relabel, len(c.garbage), construction, c.uncompute)


def instruction_cost(opname: str, n: int, F: int = 0, imm: int = 0, cc: int = 0,
                     fn: int | None = None) -> Cost:
    """The cost of one opcode at width n (fn: the function of addfn2/subfn2, None: the first
    realized one), with the construction it uses (isa/gates.py)."""
    from isa import gates
    from isa.table import OP_BY_NAME

    from .build import circuit

    op = OP_BY_NAME[opname]
    found = gates.realization(op)
    c = circuit(op, n, F=F, imm=imm, cc=cc, fn=fn)
    text = ""
    if found is not None:
        text = found[0].construction
        per_fn = found[0].fn_constructions or {}
        if "fn" in op.operands and c.name.endswith(")"):
            text = per_fn.get(c.name[c.name.index("(") + 1:-1], text)
        if found[1] is not op:
            text = f"{found[1].name} reversed: {text}"
    return cost(c, n, text)


# ---- programs -----------------------------------------------------------------------------

@dataclass
class OpTally:
    """One opcode's share of a program run."""
    count: int = 0
    gates: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.gates.values())


@dataclass
class ProgramCost:
    """The circuits a program run executed, instruction after instruction (forward run)."""
    program: str
    width: int
    instructions: int = 0           # instructions executed
    gates: Counter = field(default_factory=Counter)
    depth: int = 0                  # ASAP over the whole run on shared cell wires
    toffoli_depth: int = 0
    cells: int = 0                  # registers: static cells + peak frame cells
    stack_peak: int = 0             # value-stack registers at the peak
    ancilla_peak: int = 0           # the largest instruction's ancillas (they are reused)
    relabellings: int = 0           # free permutations executed (swap, rotations)
    moves: int = 0                  # zero-gate moves and checks (push/pop/alloc/free/calls)
    ancilla_checks: int = 0         # ancilla zero-checks passed (ALLOC/FREE and alloc/free)
    garbage_bits: int = 0
    uncompute_gates: int = 0        # of the total, spent uncomputing ancillas
    by_opcode: dict[str, OpTally] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.gates.values())

    @property
    def wires(self) -> int:
        """Register file (cells and stack slots of `width` bits), the control unit's condition
        bit and the ancilla pool."""
        return (self.cells + self.stack_peak) * self.width + 1 + self.ancilla_peak

    @property
    def erased_bits(self) -> int:
        return self.garbage_bits

    def landauer(self, temperature: float = ROOM_TEMPERATURE) -> float:
        return landauer_joules(self.erased_bits, temperature)

    def to_json(self, temperature: float = ROOM_TEMPERATURE) -> dict[str, Any]:
        return dict(
            program=self.program, width=self.width, instructions=self.instructions,
            gates={k: self.gates.get(k, 0) for k in GATE_KINDS}, total=self.total,
            depth=self.depth, toffoli_depth=self.toffoli_depth, wires=self.wires,
            cells=self.cells, stack_peak=self.stack_peak, ancilla_peak=self.ancilla_peak,
            ancillas_clean=True, ancilla_checks=self.ancilla_checks,
            free_permutations=self.relabellings, zero_gate_moves=self.moves,
            uncompute_gates=self.uncompute_gates,
            garbage_bits=self.garbage_bits, erased_bits=self.erased_bits,
            temperature_K=temperature, landauer_J=self.landauer(temperature),
            by_opcode={k: dict(count=v.count, total=v.total,
                               gates={g: v.gates.get(g, 0) for g in GATE_KINDS})
                       for k, v in sorted(self.by_opcode.items(), key=lambda kv: -kv[1].total)})


# ---- rendering ----------------------------------------------------------------------------

def _console(file=None):
    """A rich console; off a terminal it is wide enough for every column (plain, stable
    output for pipes and files)."""
    import sys

    from rich.console import Console
    f = file or sys.stdout
    tty = hasattr(f, "isatty") and f.isatty()
    return Console(file=f, highlight=False, soft_wrap=False, width=None if tty else 160)


def cost_table(costs: list[Cost], temperature: float = ROOM_TEMPERATURE):
    from rich.table import Table

    t = Table(title=f"gate cost at width {costs[0].width}" if len({c.width for c in costs}) == 1
              else "gate cost")
    for col in ("instruction", "n", "NOT", "CNOT", "Toffoli", "MCX", "Fredkin", "total",
                "uncompute", "depth", "T-depth", "wires", "anc", "garbage", "Landauer"):
        t.add_column(col, justify="left" if col == "instruction" else "right", no_wrap=True)
    for c in costs:
        g = c.gates
        t.add_row(c.name + (" (relabelling)" if c.relabelling else ""), str(c.width),
                  *(str(g[k]) for k in GATE_KINDS), str(c.total), str(c.uncompute_gates),
                  str(c.depth),
                  str(c.toffoli_depth), str(c.wires),
                  f"{c.ancilla_peak}{'' if c.ancillas_clean else '!'}",
                  str(c.garbage_bits), f"{c.landauer(temperature):.3g} J")
    return t


def print_costs(costs: list[Cost], temperature: float = ROOM_TEMPERATURE, file=None) -> None:
    con = _console(file)
    con.print(cost_table(costs, temperature))
    for c in costs:
        if c.construction:
            con.print(f"{c.name}: {c.construction}")
    con.print(f"ancillas: every one released with a zero check (uncompute: the gates that "
              f"clear them); Landauer bound kT ln 2 per erased bit at T = {temperature:g} K")


def print_program(pc: ProgramCost, temperature: float = ROOM_TEMPERATURE, file=None,
                  top: int = 12) -> None:
    from rich.table import Table

    con = _console(file)
    s = Table(title=f"{pc.program} at width {pc.width}: {pc.instructions} instructions "
                    f"co-simulated", show_header=False)
    s.add_column("", justify="left")
    s.add_column("", justify="right")
    for k in GATE_KINDS:
        s.add_row(f"{k} gates", f"{pc.gates.get(k, 0):,}")
    share = pc.uncompute_gates / pc.total if pc.total else 0.0
    rows = [("total gates", f"{pc.total:,}"),
            ("of which uncompute", f"{pc.uncompute_gates:,} ({100 * share:.1f}%: erasing "
                                   f"nothing instead of kT ln 2 per bit)"),
            ("depth (ASAP)", f"{pc.depth:,}"),
            ("Toffoli depth", f"{pc.toffoli_depth:,}"),
            ("wires", f"{pc.wires:,} = ({pc.cells} cells + {pc.stack_peak} stack) x "
                      f"{pc.width} + 1 condition + {pc.ancilla_peak} ancillas"),
            ("ancilla peak", f"{pc.ancilla_peak} (all returned clean: "
                             f"{pc.ancilla_checks:,} zero checks)"),
            ("free permutations", f"{pc.relabellings:,} (zero gates: wire relabelling)"),
            ("zero-gate moves", f"{pc.moves:,} (push/pop/alloc/free/call/return)"),
            ("garbage / erased bits", f"{pc.garbage_bits} / {pc.erased_bits}"),
            (f"Landauer bound at {temperature:g} K", f"{pc.landauer(temperature):.3g} J")]
    for a, b in rows:
        s.add_row(a, b)
    con.print(s)
    t = Table(title="by opcode (gates executed)")
    for col in ("opcode", "count", "NOT", "CNOT", "Toffoli", "MCX", "Fredkin", "total", "share"):
        t.add_column(col, justify="left" if col == "opcode" else "right")
    items = sorted(pc.by_opcode.items(), key=lambda kv: (-kv[1].total, -kv[1].count))
    for name, v in items[:top]:
        share = v.total / pc.total if pc.total else 0.0
        t.add_row(name, f"{v.count:,}", *(f"{v.gates.get(k, 0):,}" for k in GATE_KINDS[:5]),
                  f"{v.total:,}", f"{100 * share:.1f}%")
    if len(items) > top:
        t.add_row(f"({len(items) - top} more)", "", "", "", "", "", "", "", "")
    con.print(t)
