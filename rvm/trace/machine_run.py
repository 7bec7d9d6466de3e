"""Running schedules on the real machine: every move runs the step program forward or backward.

The step-program convention (docs/trace.md):

* the state is every global NAME that has a partner `output NAME_next` of the same type and
  length; NAME itself is an `inout` (or `input`) global, whose default is s_0;
* `main` computes every NAME_next from the state into cells that start at zero, reads the state
  without changing it and leaves every other non-input global zero: it is the step function,
  and running it backward is its uncall;
* every other input is a parameter, held at the same value for every move.

A move `compute i` resets the machine, loads s_{i-1} and runs forward: NAME_next is s_i.  A move
`uncompute i` loads s_{i-1} and s_i (into NAME_next) at the end and runs backward: NAME_next must
come back to zero, or the checkpoint was not what the step computes and the finish is not clean.
Checkpoints are the raw 64-bit words of the state (exact for every type), held in slots that
the runner counts.  Instructions come from the machine's step counter.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..machine import Machine
from ..program import Program
from .pebble import BWD, COPY, FWD, IllegalMove, Move

__all__ = ["StepProgram", "StepProgramError", "NotClean", "MachineRun", "run_schedule"]

SUFFIX = "_next"


class StepProgramError(ValueError):
    """The program does not follow the step-program convention."""


class NotClean(RuntimeError):
    """A move left cells that should be zero (or changed cells it should only read)."""


@dataclass
class _Region:
    name: str
    addr: int
    size: int


class StepProgram:
    """A Program used as a step function s_i -> s_{i+1}, on one Machine reused for every move.

    `values` sets parameters and the initial state by name (as `Machine.reset` takes them);
    raw words go through `raw` (name -> int or list of ints)."""

    def __init__(self, program: Program, values: Mapping[str, Any] | None = None,
                 raw: Mapping[str, Any] | None = None, **machine_options: Any):
        self.program = program
        names = {g.name: g for g in program.globals}
        pairs = []
        for g in program.globals:
            partner = names.get(g.name + SUFFIX)
            if partner is None:
                continue
            if not partner.is_output or partner.is_input:
                raise StepProgramError(f"{partner.name} must be declared `output` (it is the "
                                       f"next state of {g.name}, zero before the step)")
            if not g.is_input:
                raise StepProgramError(f"{g.name} must be an input (`inout`): it is the state")
            if partner.type != g.type or partner.size != g.size:
                raise StepProgramError(f"{partner.name} must have the type and length of "
                                       f"{g.name}")
            pairs.append((g, partner))
        if not pairs:
            raise StepProgramError(
                "no state found: a step program declares its state as `inout NAME: T[n]` and "
                "the next state as `output NAME_next: T[n]` (see docs/trace.md)")
        self.state = [_Region(g.name, g.addr, g.size) for g, _ in pairs]
        self.next = [_Region(p.name, p.addr, p.size) for _, p in pairs]
        paired = {g.name for g, _ in pairs} | {p.name for _, p in pairs}
        self.params = [_Region(g.name, g.addr, g.size) for g in program.globals
                       if g.is_input and g.name not in paired]
        self.work = [_Region(g.name, g.addr, g.size) for g in program.globals
                     if not g.is_input and g.name not in paired]
        self.state_cells = sum(r.size for r in self.state)
        self.machine = Machine(program, **machine_options)
        m = self.machine
        m.reset(dict(values or {}))
        for name, words in (raw or {}).items():
            m.write_raw(name, words)
        self._param_words = self._gather(self.params)
        self.initial = self._gather(self.state)
        self.work_cells = 0          # peak frame cells of any move so far

    # ---- words in and out of the machine ---------------------------------------------

    def _gather(self, regions: list[_Region]) -> np.ndarray:
        mem = self.machine.mem
        if not regions:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([mem[r.addr:r.addr + r.size] for r in regions])

    def _scatter(self, regions: list[_Region], words: np.ndarray) -> None:
        mem = self.machine.mem
        k = 0
        for r in regions:
            mem[r.addr:r.addr + r.size] = words[k:k + r.size]
            k += r.size

    def decode(self, words: np.ndarray) -> dict[str, Any]:
        """A state's words as values by name (as Machine.read gives them)."""
        from ..values import decode, decode_array

        out, k, F = {}, 0, self.program.fraction_bits
        for r in self.state:
            g = self.program.global_named(r.name)
            chunk = words[k:k + r.size]
            out[r.name] = decode(g.type, int(chunk[0]), F) if g.length is None else \
                decode_array(g.type, chunk, F)
            k += r.size
        return out

    def _check(self, what: str, state: np.ndarray) -> None:
        if not np.array_equal(self._gather(self.state), state):
            names = ", ".join(r.name for r in self.state)
            raise NotClean(f"{what}: the step changed its state {names}")
        if not np.array_equal(self._gather(self.params), self._param_words):
            raise NotClean(f"{what}: the step changed a parameter")
        left = [r.name for r in self.work if self.machine.mem[r.addr:r.addr + r.size].any()]
        if left:
            raise NotClean(f"{what}: work globals left nonzero: {', '.join(left)}")

    # ---- moves -----------------------------------------------------------------------

    def forward(self, state: np.ndarray) -> tuple[np.ndarray, int]:
        """s_{i+1} from s_i, and the instructions it took."""
        m = self.machine
        m.reset()
        self._scatter(self.params, self._param_words)
        self._scatter(self.state, state)
        m.run(direction=+1)
        self._check("compute", state)
        stats = m.stats
        self.work_cells = max(self.work_cells, stats["peak_frame_cells"])
        return self._gather(self.next), stats["steps"]

    def backward(self, state: np.ndarray, nxt: np.ndarray) -> int:
        """Uncompute s_{i+1} (given s_i): NAME_next must come back to zero.  Instructions."""
        m = self.machine
        m.reset_end()
        self._scatter(self.params, self._param_words)
        self._scatter(self.state, state)
        self._scatter(self.next, nxt)
        m.run(direction=-1)
        self._check("uncompute", state)
        left = self._gather(self.next)
        if left.any():
            raise NotClean(f"uncompute: {', '.join(r.name for r in self.next)} did not come "
                           f"back to zero ({int(np.count_nonzero(left))} nonzero cells): the "
                           f"step is not exactly invertible from its output")
        stats = m.stats
        self.work_cells = max(self.work_cells, stats["peak_frame_cells"])
        return stats["steps"]

    def direct(self, n: int, state: np.ndarray | None = None) -> np.ndarray:
        """s_n by running the step n times, keeping only the newest state (the reference)."""
        s = self.initial if state is None else state
        for _ in range(n):
            s, _ = self.forward(s)
        return s


@dataclass
class MachineRun:
    """What running a schedule on the machine measured."""
    n: int
    forward: int = 0
    backward: int = 0
    peak: int = 0                       # most checkpoints held at once (s_0 not counted)
    instructions: int = 0
    work_cells: int = 0                 # peak frame cells of the step
    result: np.ndarray | None = None    # s_N as copied out
    left: list[int] = field(default_factory=list)   # checkpoints still held at the end
    problem: str | None = None          # why the finish is not clean
    matches_direct: bool | None = None
    live: list[int] | None = None       # checkpoints held after each counted move
    seconds: float = 0.0

    @property
    def moves(self) -> int:
        return self.forward + self.backward

    @property
    def clean(self) -> bool:
        return self.problem is None and self.result is not None and not self.left


def run_schedule(step: StepProgram, moves: Iterable[Move], n: int, *, record: bool = False,
                 check_direct: bool = True,
                 progress: Callable[[int], None] | None = None) -> MachineRun:
    """Run every move on the machine; `progress(k)` is called every 1024 moves."""
    run = MachineRun(n, live=[] if record else None)
    slots: dict[int, np.ndarray] = {}
    s0 = step.initial
    t0 = time.perf_counter()

    def state(i: int) -> np.ndarray:
        if i == 0:
            return s0
        try:
            return slots[i]
        except KeyError:
            raise IllegalMove(f"s_{i} is needed but not held") from None

    try:
        for k, (kind, i) in enumerate(moves):
            if progress is not None and k % 1024 == 0:
                progress(k)
            if kind == COPY:
                if i != n:
                    raise IllegalMove(f"copy out of s_{i}, not s_{n}")
                run.result = slots.pop(i)
                continue
            if kind == FWD:
                if i in slots:
                    raise IllegalMove(f"compute {i}: s_{i} is already held")
                slots[i], steps = step.forward(state(i - 1))
                run.forward += 1
                run.peak = max(run.peak, len(slots))
            elif kind == BWD:
                steps = step.backward(state(i - 1), state(i))
                del slots[i]
                run.backward += 1
            else:
                raise IllegalMove(f"unknown move kind {kind!r}")
            run.instructions += steps
            if record:
                run.live.append(len(slots))
    except NotClean as e:
        run.problem = f"move {k} ({Move(kind, i)}): {e}"
    run.left = sorted(slots)
    run.work_cells = step.work_cells
    run.seconds = time.perf_counter() - t0
    if run.problem is None and run.left:
        run.problem = f"checkpoints left at the end: {run.left[:10]}"
    if run.problem is None and run.result is None:
        run.problem = "s_N was never copied out"
    if check_direct and run.result is not None:
        run.matches_direct = bool(np.array_equal(run.result, step.direct(n)))
        if not run.matches_direct and run.problem is None:
            run.problem = "s_N differs from direct execution"
    return run
