"""Co-simulation: a program run with every instruction done by its gate circuit, compared with
the interpreter after every instruction, forward to the end and backward to the start.

The hardware model keeps its own register file: one `width`-bit register per memory cell
(globals, constants, frame cells), a stack of registers for the value stack, and the control
unit's one condition bit.  Before the interpreter runs an instruction, the model runs the
circuit of the opcode the instruction runs as (its inverse opcode when the effective direction
is backward) on the registers the operands name in the current frame; after it, the whole
register file must equal the interpreter's memory, each register read as a signed
`width`-bit number.  A difference is either the circuit disagreeing with the interpreter
(`CosimError`) or a value the interpreter computed that no longer fits `width` bits
(`WidthOverflow`: co-simulate at a larger --width).

Control: a fork (jmp forward, join backward) must jump exactly when the circuit's condition
bit is 1; a join (join forward, jmp backward) is reached by a jump exactly when it is 1; an
assert needs it 1.  Calls, returns, push/pop (register relabelling), alloc/free (zero checks)
need no gates.  Each circuit run checks its ancillas came back zero and its sources unchanged.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from isa import gates
from isa.functions import CMP_ALWAYS, cond_parts
from isa.table import INVERSE, OPS, Op
from rvm.errors import Trap

from . import _sim
from .build import NotRealized, circuit, is_realized
from .circuit import ALLOC, GATE_KINDS, Circuit
from .report import OpTally, ProgramCost, gate_counts

ZERO_GATE = {"push", "pop", "alloc", "free", "call", "uncall", "begin", "end", "nop", "trace"}
# families whose traps the model predicts (others, such as bounds or aliasing, it leaves to
# the interpreter)
PREDICTED = {"pop", "alloc", "free", "end", "join", "assert"}


class CosimError(Exception):
    """The circuits and the interpreter disagree (or a circuit broke its promises).  The
    message starts with the source location, step, direction, pc and instruction."""

    def __init__(self, message: str, step: int | None = None, pc: int | None = None,
                 direction: int = 1, program=None):
        where, instruction, location = "", "", None
        if pc is not None and program is not None:
            from rvm.machine import format_instruction
            instruction = format_instruction(program, pc)
            location = program.location(pc)
            loc = f"{location[0]}:{location[1]}:{location[2]}: " if location else ""
            way = "forward" if direction > 0 else "backward"
            where = f"{loc}step {step} ({way}), pc {pc}: {instruction}: "
        super().__init__(where + message)
        self.step, self.pc, self.instruction, self.location = step, pc, instruction, location
        self.direction = direction


class WidthOverflow(CosimError):
    """The interpreter's state no longer fits the register width."""


@dataclass
class CosimResult:
    cost: ProgramCost
    forward_steps: int = 0
    backward_steps: int = 0
    seconds: float = 0.0
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def instructions_per_second(self) -> float:
        n = self.forward_steps + self.backward_steps
        return n / self.seconds if self.seconds else 0.0


def unrealized(program, width: int) -> list[str]:
    """The instructions of a program the hardware model cannot run at `width`, as
    'pc N: text (reason)'."""
    from rvm.machine import format_instruction

    out = []
    for pc, row in enumerate(program.code):
        op = OPS[int(row[0])]
        reason = None
        if op.family in ZERO_GATE:
            continue
        fn = int(row[1 + op.operands.index("fn")]) if "fn" in op.operands else None
        if op.family in gates.CONDITIONS:
            if not is_realized(op, int(row[1])):
                reason = f"comparison of {cond_parts(int(row[1]))[1].name_} cells"
        elif op.family == "xorcmp" and not is_realized(op):
            reason = f"comparison of {op.types[1].name_} cells"
        elif not is_realized(op, fn=fn):
            reason = "no gate realization"
        elif op.family in ("rotl", "rotr") and width < 64:
            reason = "rotations turn all 64 bits: co-simulate at --width 64"
        if reason:
            out.append(f"pc {pc}: {format_instruction(program, pc)} ({reason})")
    return out


class _Plan:
    """A circuit's wires as numpy index arrays, its gate counts and ancillas (per run)."""
    __slots__ = ("c", "inputs", "outputs", "sources", "keep", "counts", "total", "ancillas",
                 "relabel", "in_wires", "in_reg", "in_bit", "in_names", "out_weights",
                 "checks")

    def __init__(self, c: Circuit, width: int):
        self.c = c
        self.inputs = {r: np.asarray(ws, dtype=np.intp) for r, ws in c.inputs.items()}
        self.outputs = {r: np.asarray(ws, dtype=np.intp) for r, ws in c.outputs.items()}
        self.sources = c.sources
        keep = np.zeros(c.n_wires, dtype=bool)
        for ws in c.outputs.values():
            keep[list(ws)] = True
        self.keep = ~keep                     # wires that must be zero at the end
        self.counts = gate_counts(c)
        self.total = sum(self.counts.values())
        self.ancillas = c.n_wires - len(c.register_wires)
        self.relabel = self.total == 0 and c.outputs != c.inputs
        self.checks = int((c.gates[:, 0] >= ALLOC).sum())
        # every input wire with the register it belongs to and its bit: one fancy-index
        # operation loads all registers
        self.in_names = list(c.inputs)
        self.in_wires = np.concatenate([self.inputs[r] for r in self.in_names])
        self.in_reg = np.concatenate([np.full(len(c.inputs[r]), i, dtype=np.intp)
                                      for i, r in enumerate(self.in_names)])
        self.in_bit = np.concatenate([np.arange(len(c.inputs[r]), dtype=np.uint64)
                                      for r in self.in_names])
        self.out_weights = {r: np.uint64(1) << np.arange(len(ws), dtype=np.uint64)
                            for r, ws in c.outputs.items()}


class Cosim:
    """One program on the machine and on the hardware model, in lockstep."""

    def __init__(self, program, width: int = 16, name: str = ""):
        from rvm.machine import Machine

        if not gates.MIN_WIDTH <= width <= gates.MAX_WIDTH:
            raise ValueError(f"width must be {gates.MIN_WIDTH}..{gates.MAX_WIDTH}, not {width}")
        bad = unrealized(program, width)
        if bad:
            raise NotRealized("the hardware model cannot run " + "; ".join(bad[:5])
                              + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""))
        self.program, self.n = program, width
        self.mask = (1 << width) - 1
        self.F = program.fraction_bits
        self.m = Machine(program)
        self.cost = ProgramCost(name or "program", width)
        self._plans: dict[int, _Plan] = {}
        self.counting = True
        self.max_addr = 0

    # ---- state -------------------------------------------------------------------------

    def reset(self, inputs: Mapping[str, Any] | None = None,
              raw: Mapping[str, Any] | None = None) -> None:
        """Load the start state into both; it must fit `width` bits."""
        self.m.reset(inputs or {})
        for k, v in (raw or {}).items():
            self.m.write_raw(k, v)
        hi = self.m.core.frame_top
        self.hi = hi
        self.shadow = np.zeros(max(hi, 64), dtype=np.int64)
        self.shadow[:hi] = self._sext(self.m.mem[:hi])
        self.stack: list[int] = []
        self.cell_lv = np.zeros((len(self.shadow), self.n), dtype=np.int64)
        self.cell_tl = np.zeros_like(self.cell_lv)
        self.stack_lv: list[tuple[np.ndarray, np.ndarray]] = []
        self.cond_lv = np.zeros(2, dtype=np.int64)      # level, Toffoli level
        self._check_state(None, 1)

    def _sext(self, words: np.ndarray) -> np.ndarray:
        s = 64 - self.n
        return (np.asarray(words, dtype=np.int64) << s) >> s if s else \
            np.asarray(words, dtype=np.int64).copy()

    def _grow(self, addr: int) -> None:
        if addr < len(self.shadow):
            return
        size = max(addr + 1, 2 * len(self.shadow))
        for name in ("shadow", "cell_lv", "cell_tl"):
            old = getattr(self, name)
            new = np.zeros((size,) + old.shape[1:], dtype=old.dtype)
            new[:len(old)] = old
            setattr(self, name, new)

    def cell_name(self, addr: int) -> str:
        p = self.program
        for g in p.globals:
            if g.addr <= addr < g.addr + g.size:
                return g.name if g.length is None else f"{g.name}[{addr - g.addr}]"
        for c in p.consts:
            n = 1 if c.length is None else c.length
            if c.addr <= addr < c.addr + n:
                return f"constant {c.name}"
        return f"frame cell {addr}"

    def _check_state(self, ctx: dict | None, direction: int) -> None:
        """The register file against the interpreter's memory (and the value stacks)."""
        core = self.m.core
        hi = max(self.hi, core.frame_top)
        self.hi = hi
        self._grow(hi)
        mem = self.m.mem[:hi]
        sh = self.shadow[:hi]
        if np.array_equal(mem, sh):
            return
        bad = np.flatnonzero(mem != sh)
        if len(bad):
            a = int(bad[0])
            w, s = int(mem[a]), int(sh[a])
            ctx = ctx or {}
            if (w & self.mask) == (s & self.mask):
                raise WidthOverflow(f"{self.cell_name(a)} = {w} does not fit {self.n} bits "
                                    f"(co-simulate at a larger --width)", **ctx)
            raise CosimError(f"{self.cell_name(a)}: the circuit gives {s}, the interpreter "
                             f"{w}", **ctx)

    def _check_stack(self, ctx: dict) -> None:
        st = self.m.stack()
        if len(st) != len(self.stack) or (len(st) and (st != np.asarray(self.stack,
                                                                        dtype=np.int64)).any()):
            raise CosimError(f"value stack: the model has {self.stack}, the interpreter "
                             f"{st.tolist()}", **ctx)

    # ---- one instruction ---------------------------------------------------------------

    def _plan(self, c: Circuit) -> _Plan:
        p = self._plans.get(id(c))
        if p is None or p.c is not c:
            p = self._plans[id(c)] = _Plan(c, self.n)
        return p

    def _operands(self, op: Op, row) -> tuple[list[int | None], list[int]]:
        """Addresses (None for an array length) and values of the y/a operands."""
        addrs, vals = [], []
        core = self.m.core
        for s, kind in enumerate(op.operands, start=1):
            if kind not in ("y", "a"):
                continue
            r = core.resolve(int(row[s]))
            if r[0] == "cell":
                a = int(r[1])
                self._grow(a)
                addrs.append(a)
                vals.append(int(self.shadow[a]))
            elif r[0] == "len":
                addrs.append(None)
                vals.append(int(r[1]))
            else:
                return [], []              # out of bounds: the interpreter traps
        return addrs, vals

    def step(self, direction: int) -> bool:
        """Run one instruction in both; False at the program boundary."""
        m, core = self.m, self.m.core
        if core.direction != direction:
            m.step(0, direction)
        if m.status == ("end" if direction > 0 else "start"):
            return False
        pc, e, came = core.pc, core.effective_direction, core.came
        row = self.program.code[pc]
        op = OPS[int(row[0])]
        ran = op if e > 0 else OPS[INVERSE[op.code]]
        # where we are, for error messages (the instruction text is formatted only then)
        ctx = dict(step=core.t, pc=pc, direction=direction, program=self.program)
        fam = ran.family
        if fam in ZERO_GATE:
            update = self._move(ran, row, ctx)
        else:
            update = self._gates(ran, row, ctx)
        # the traps the model can see coming: a dirty ancilla or frame local, a pop into a
        # nonzero cell or from an empty stack, a join reached the wrong way, a false assert
        expect = None
        if update is not None and update[0] == "trap":
            expect = update[1]
        elif update is not None and update[0] == "cond":
            cond = update[1]
            if fam == "join" and cond != came:
                expect = "come-from"
            elif fam == "assert" and cond != 1:
                expect = "assertion"
        try:
            ran_one = m.step(1, direction)
        except Trap as t:
            if expect is None and fam in PREDICTED:
                raise CosimError(f"the interpreter trapped ({type(t).__name__}: {t}) but the "
                                 f"model finds nothing wrong", **ctx) from t
            raise
        if expect is not None:
            raise CosimError(f"the model expects a trap ({expect}) but the interpreter ran "
                             f"the instruction", **ctx)
        if ran_one != 1:
            raise CosimError("the interpreter did not run the instruction", **ctx)
        if update is not None and update[0] == "cells":
            for a, v in update[1]:
                self.shadow[a] = v
        elif update is not None and update[0] == "cond" and fam == "jmp":
            if update[1] != core.came:          # a fork: it jumps iff the bit is 1
                raise CosimError(f"the condition bit is {update[1]} but the interpreter "
                                 f"{'jumped' if core.came else 'fell through'}", **ctx)
        self._check_state(ctx, direction)
        if fam in ("push", "pop"):
            self._check_stack(ctx)
        if direction > 0 and self.counting:
            self.cost.instructions += 1
        return True

    def _move(self, ran: Op, row, ctx: dict):
        fam = ran.family
        if fam not in ("push", "pop", "alloc", "free"):
            if self.counting:
                self.cost.moves += 1
            if fam == "end":                    # a return: the frame's locals must be zero
                core = self.m.core
                fp = core.frame(core.depth - 1)[1]
                if self.shadow[fp:core.frame_top].any():
                    return ("trap", "a local is not zero at the return")
            return None
        addrs, vals = self._operands(ran, row)
        if not addrs:
            return None
        a, v = addrs[0], vals[0]
        if self.counting:
            self.cost.moves += 1
        if fam in ("alloc", "free"):
            if self.counting:
                self.cost.ancilla_checks += 1
            return ("trap", f"{fam} of a nonzero ancilla") if v != 0 else None
        if fam == "push":
            self.stack.append(v)
            self.stack_lv.append((self.cell_lv[a].copy(), self.cell_tl[a].copy()))
            return ("cells", [(a, 0)])
        if v != 0 or not self.stack:
            return ("trap", "pop into a nonzero cell" if v else "pop from an empty stack")
        w = self.stack.pop()
        lv, tl = self.stack_lv.pop()
        self.cell_lv[a], self.cell_tl[a] = lv, tl
        return ("cells", [(a, w)])

    def _gates(self, ran: Op, row, ctx: dict):
        fam = ran.family
        addrs, vals = self._operands(ran, row)
        if not addrs:
            return None
        imm = cc = fn = 0
        for s, kind in enumerate(ran.operands, start=1):
            if kind in ("imm", "k"):
                imm = int(row[s])
            elif kind == "cc":
                cc = int(row[s])
            elif kind == "fn":
                fn = int(row[s])
        cond_fam = fam in gates.CONDITIONS
        if cond_fam and cond_parts(cc)[0] == CMP_ALWAYS:
            return ("cond", 1)
        roles = gates.register_roles(ran)
        if cond_fam:
            addrs.append(-1)                    # the condition bit
            vals.append(0)
        targets = [i for i, r in enumerate(roles) if r in ("y", "z")]
        if any(addrs[i] is not None and addrs[i] == addrs[j]
               for i in targets for j in range(len(roles)) if j != i):
            return None                         # a target is also an operand: AliasError
        # two sources naming one cell share a register (the realization copies it)
        alias = tuple(next(j for j in range(i + 1) if addrs[i] is not None
                           and addrs[j] == addrs[i]) if addrs[i] is not None else i
                      for i in range(len(roles)))
        c = circuit(ran, self.n, F=self.F, imm=imm, cc=cc, alias=alias, fn=fn)
        plan = self._plan(c)
        inputs = {roles[i]: vals[i] & self.mask for i in range(len(roles)) if alias[i] == i}
        outs = self._run(plan, inputs, ctx)
        if self.counting:
            self._account(ran, plan, roles, addrs, alias)
        if cond_fam:
            return ("cond", int(outs["cond"]))
        upd = []
        for i, r in enumerate(roles):
            if r in ("y", "z") and alias[i] == i:
                v = outs[r]
                upd.append((addrs[i], v - (1 << self.n) if v >> (self.n - 1) else v))
        return ("cells", upd)

    def _run(self, plan: _Plan, inputs: dict[str, int], ctx: dict) -> dict[str, int]:
        """One input through the circuit with the instruction-level checks."""
        c = plan.c
        state = np.zeros((c.n_wires, 1), dtype=np.uint64)
        regs = np.array([inputs[r] for r in plan.in_names], dtype=np.uint64)
        state[plan.in_wires, 0] = (regs[plan.in_reg] >> plan.in_bit) & np.uint64(1)
        g = _sim.run(c.gates, c.controls, state)
        if g >= 0:
            raise CosimError(f"{c.name}: gate {g} found ancilla {c.wire_name(int(c.gates[g, 1]))}"
                             f" nonzero", **ctx)
        state &= np.uint64(1)       # lane 0 holds the input (the other lanes run on zeros)
        if state[plan.keep].any():
            w = int(np.flatnonzero(plan.keep & state[:, 0].astype(bool))[0])
            raise CosimError(f"{c.name}: ancilla {c.wire_name(w)} is not zero after the "
                             f"instruction", **ctx)
        outs = {r: int(np.bitwise_or.reduce(state[ws, 0] * plan.out_weights[r]))
                for r, ws in plan.outputs.items()}
        for s in plan.sources:
            if outs[s] != inputs[s]:
                raise CosimError(f"{c.name}: source {s} changed from {inputs[s]} to "
                                 f"{outs[s]}", **ctx)
        return outs

    def _account(self, ran: Op, plan: _Plan, roles, addrs, alias) -> None:
        cost = self.cost
        t = cost.by_opcode.get(ran.name)
        if t is None:
            t = cost.by_opcode[ran.name] = OpTally()
        t.count += 1
        for k in GATE_KINDS:
            v = plan.counts[k]
            if v:
                t.gates[k] += v
                cost.gates[k] += v
        cost.uncompute_gates += plan.c.uncompute
        if plan.relabel:
            cost.relabellings += 1
        cost.ancilla_peak = max(cost.ancilla_peak, plan.ancillas)
        cost.ancilla_checks += plan.checks
        if plan.total == 0 and not plan.relabel:
            return
        # ASAP: the circuit's wires start at the levels of the registers they carry
        c = plan.c
        lv = np.zeros(c.n_wires, dtype=np.int64)
        tl = np.zeros(c.n_wires, dtype=np.int64)
        for i, r in enumerate(roles):
            if alias[i] != i or addrs[i] is None:
                continue
            ws = plan.inputs[r]
            if addrs[i] < 0:
                lv[ws], tl[ws] = self.cond_lv[0], self.cond_lv[1]
            else:
                lv[ws], tl[ws] = self.cell_lv[addrs[i]], self.cell_tl[addrs[i]]
        d, td = _sim.depth(c.gates, c.controls, c.n_wires, lv, tl)
        cost.depth = max(cost.depth, int(d))
        cost.toffoli_depth = max(cost.toffoli_depth, int(td))
        for i, r in enumerate(roles):
            if alias[i] != i or addrs[i] is None:
                continue
            ws = plan.outputs[r]
            if addrs[i] < 0:
                self.cond_lv[0], self.cond_lv[1] = lv[ws[0]], tl[ws[0]]
            else:
                self.cell_lv[addrs[i]], self.cell_tl[addrs[i]] = lv[ws], tl[ws]

    # ---- whole runs --------------------------------------------------------------------

    def run(self, direction: int, max_steps: int | None = None,
            tick: Callable[[int], None] | None = None) -> int:
        done = 0
        while max_steps is None or done < max_steps:
            if not self.step(direction):
                break
            done += 1
            if tick is not None and done % 1024 == 0:
                tick(done)
        return done


def cosimulate(program, inputs: Mapping[str, Any] | None = None, width: int = 16,
               backward: bool = True, name: str = "", raw: Mapping[str, Any] | None = None,
               max_steps: int | None = None,
               tick: Callable[[int], None] | None = None) -> CosimResult:
    """Run `program` forward to the end (and back to the start) with every instruction done by
    its circuit at `width` bits, comparing the whole state with the interpreter after every
    instruction.  Raises CosimError / WidthOverflow on a difference, NotRealized for an
    instruction without a circuit, the machine's Trap if the program traps."""
    t0 = time.perf_counter()
    cs = Cosim(program, width, name)
    cs.reset(inputs, raw)
    res = CosimResult(cs.cost)
    res.forward_steps = cs.run(+1, max_steps, tick)
    res.outputs = cs.m.outputs()
    stats = cs.m.stats
    cs.cost.cells = program.n_static + stats["peak_frame_cells"]
    cs.cost.stack_peak = stats["peak_stack"]
    if backward:
        cs.counting = False
        res.backward_steps = cs.run(-1, max_steps, tick)
        if max_steps is None and cs.m.status != "start":
            raise CosimError("the backward run did not reach the start")
    res.seconds = time.perf_counter() - t0
    return res
