"""The reverse debugger's engine: moves one machine along its timeline and says why it stopped.

Position.  The machine's state at step t is a point on a timeline; every command moves it
forward (running instructions) or backward (running their inverses) and stops.  Between
commands the machine is kept turned forward, so `pc` is always the next instruction to run
forward ("=> the instruction about to run"), whichever way the last command went.  Stepping
backward from t to t-1 undoes the instruction that `pc` was at t-1.

Stops mean the same thing in both directions (gdb's convention): a breakpoint at an
instruction stops where that instruction is about to run forward; a watchpoint stops right
after the instruction that changed the cell (going backward: right after undoing it, i.e.
just before the write).  The machine's own backward breakpoints stop before running an
instruction's inverse, and a call is undone at the callee's `begin` (the call itself consumed
it), so backward runs arm translated pcs and check the stop after undoing one more step.

Memory stays flat: nothing is recorded per step.  `goto`, `last`, `history` and `diff` run the
machine there and back; the only stored state is the start (t = 0) of an unforked timeline,
one copy of the globals, used to restart when that is shorter than running back.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from isa.derivatives import DERIVATIVE_FAMILIES
from isa.functions import CMP_ALWAYS, cond_parts

from ..errors import Trap
from ..machine import Machine, TraceEvent
from ..program import MODE_G, MODE_L, MODE_N, MODE_P, MODE_X, Program, operand_parts
from ..values import decode
from .cells import CellError, Ref, Scope

__all__ = ["Breakpoint", "Watchpoint", "Stop", "Write", "Session", "DebugError"]


class DebugError(CellError):
    """A command that cannot be carried out (bad location, time outside the run, ...)."""


@dataclass
class Breakpoint:
    number: int
    spec: str                   # as the user wrote it: `if2.fi`, `rfib.rasm:12`, `*7`, `rfib`
    pcs: frozenset[int]
    condition: str | None = None
    enabled: bool = True
    temporary: bool = False
    hits: int = 0
    hit_condition: str | None = None    # `N`/`== N`, `>= N`, `> N`, `<= N`, `< N`, `% N`


_HIT = {"==": lambda h, n: h == n, ">=": lambda h, n: h >= n, ">": lambda h, n: h > n,
        "<=": lambda h, n: h <= n, "<": lambda h, n: h < n, "%": lambda h, n: h % n == 0}


def parse_hit_condition(text: str) -> tuple[str, int]:
    """`5` or `== 5` (the 5th hit), `>= 5`, `> 5`, `<= 5`, `< 5`, `% 5` (every 5th)."""
    import re
    m = re.fullmatch(r"\s*(==|>=|<=|>|<|%)?\s*(\d+)\s*", text)
    if not m or (m.group(1) == "%" and int(m.group(2)) == 0):
        raise DebugError(f"cannot read the hit count {text!r} (N, == N, >= N, > N, <= N, < N "
                         f"or % N)")
    return m.group(1) or "==", int(m.group(2))


def hit_ok(hits: int, text: str) -> bool:
    op, n = parse_hit_condition(text)
    return _HIT[op](hits, n)


@dataclass
class Watchpoint:
    number: int
    ref: Ref                    # the cells (absolute addresses), named as the user wrote them
    where: str                  # "global" or the frame it was set in, e.g. "rfib (depth 3)"
    words: list[int]            # last seen words, for old -> new
    enabled: bool = True
    hits: int = 0
    condition: str | None = None
    kind: str = "write"         # "write" (watch) or "read" (rwatch)
    pcs: frozenset[int] = frozenset()   # rwatch: the instructions that may read it

    @property
    def addrs(self) -> list[int]:
        return list(range(self.ref.addr, self.ref.addr + (self.ref.length or 1)))


@dataclass
class Change:
    """One cell that a stop saw change: name, value before and after, the writer's pc."""
    name: str
    old: Any
    new: Any
    pc: int | None = None
    watch: Watchpoint | None = None


@dataclass
class Stop:
    """Why and where a command stopped."""
    reason: str          # step, breakpoint, watch, finish, until, start, end, limit, goto,
                         # trap, interrupted
    direction: int
    t0: int
    t: int
    breakpoint: Breakpoint | None = None
    watched: list[Change] = field(default_factory=list)
    trap: Trap | None = None
    note: str = ""

    @property
    def steps(self) -> int:
        return abs(self.t - self.t0)


@dataclass
class Write:
    """One write of a cell, found by `last` or `history`: at step t the instruction at pc
    changed the cell from old to new."""
    t: int
    pc: int
    name: str
    old: Any
    new: Any


@dataclass
class _Target:
    """A temporary stop of next/finish/until: pcs to arm and a test at each of them."""
    pcs: set[int]
    accept: Callable[[int], bool]
    reason: str


class Session:
    """One program under the debugger: the machine, its stops and the user's bookmarks."""

    def __init__(self, program: Program, inputs: dict[str, Any] | None = None, *,
                 limit: int | None = None, trace: Callable[[TraceEvent], None] | None = None,
                 setup: Callable[[Machine], None] | None = None):
        self.program = program
        self.m = Machine(program, trace=trace)
        if setup is not None:
            setup(self.m)
        else:
            self.m.reset(inputs or {})
        self.limit = limit
        # polled between slices of `slice_steps` steps; True ends the run ("interrupted"):
        # how a DAP client's `pause` stops a long run made on another thread
        self.interrupt: Callable[[], bool] | None = None
        self.slice_steps = 1 << 20
        self.direction = +1                  # what step/next/continue do
        self.selected: int | None = None     # frame level chosen by up/down (None: the top)
        self.breakpoints: dict[int, Breakpoint] = {}
        self.watchpoints: dict[int, Watchpoint] = {}
        self.bookmarks: dict[str, int] = {}
        self._number = 0
        self._armed: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self.end_t: int | None = None        # t at the end, once a run has got there
        self.forked_at: int | None = None    # t of the first `set` (the timeline changed)
        self._start = self.m.mem[:program.n_globals].copy()   # the state at t = 0
        self._static = program.static_image()
        self._callers: dict[int, list[int]] = {}
        self._callee: dict[int, int] = {}
        for pc in range(len(program.code)):
            name = program.op_at(pc).name
            if name in ("call", "uncall"):
                f = program.callsites[int(program.code[pc, 1])].func
                self._callers.setdefault(f, []).append(pc)
                self._callee[pc] = f
        # functions that derivative statements run as nested runs (their callee and what it
        # calls), with the statement: the debugger does not stop inside those runs
        self.nested_in: dict[int, int] = {}
        todo = [(int(program.callsites[int(program.code[pc, 1])].func), pc)
                for pc in range(len(program.code))
                if program.op_at(pc).name.split(".")[0] in DERIVATIVE_FAMILIES]
        while todo:
            fi, at = todo.pop()
            if fi in self.nested_in:
                continue
            self.nested_in[fi] = at
            f = program.functions[fi]
            for pc in range(f.begin, f.end + 1):
                name = program.op_at(pc).name.split(".")[0]
                if name in ("call", "uncall") or name in DERIVATIVE_FAMILIES:
                    todo.append((int(program.callsites[int(program.code[pc, 1])].func), at))

    # ---- where the machine is -------------------------------------------------------------

    @property
    def t(self) -> int:
        return self.m.t

    @property
    def pc(self) -> int:
        """The next instruction to run forward."""
        return self.m.pc

    @property
    def status(self) -> str:
        return self.m.status

    @property
    def depth(self) -> int:
        return self.m.depth

    @property
    def level(self) -> int | None:
        """The selected frame level (0 = the entry function), None before entry/after exit."""
        if self.m.depth == 0:
            return None
        top = self.m.depth - 1
        return top if self.selected is None else min(self.selected, top)

    def frame_pc(self, level: int | None) -> int:
        """The pc a frame is at: the top frame's next instruction, a caller's call."""
        if level is None or level >= self.m.depth - 1:
            return self.pc
        return int(self.m.core.frame(level + 1)[3])

    def scope(self, level: int | None = None) -> Scope:
        """The cells visible in frame `level` (default: the selected frame)."""
        return Scope(self.m, self.level if level is None else level)

    def global_scope(self) -> Scope:
        """Only the globals and constants (no frame's names shadow them)."""
        return Scope(self.m, None)

    def location(self, pc: int) -> tuple[str, int, int] | None:
        return self.program.location(pc)

    def where(self, pc: int | None = None) -> str:
        """`file:line` of an instruction (the current one by default)."""
        loc = self.location(self.pc if pc is None else pc)
        return f"{loc[0]}:{loc[1]}" if loc else f"pc {self.pc if pc is None else pc}"

    def _normalize(self) -> None:
        """Keep the machine turned forward between commands (see the module docstring)."""
        if self.m.core.direction < 0:
            self.m.core.flip()

    def _back_pc(self) -> int:
        """The instruction the machine would undo next (it differs from the forward view
        around calls and returns)."""
        core = self.m.core
        if core.direction < 0:            # already turned backward (inside a run)
            return core.pc
        core.flip()
        pc = core.pc
        core.flip()
        return pc

    def _done(self, direction: int) -> bool:
        return (self.m.status == "end" and direction > 0) or \
            (self.m.status == "start" and direction < 0)

    # ---- breakpoints and watchpoints --------------------------------------------------------

    def _next_number(self) -> int:
        self._number += 1
        return self._number

    def add_breakpoint(self, spec: str, pcs: Iterable[int], condition: str | None = None,
                       temporary: bool = False) -> Breakpoint:
        if condition is not None:
            condition = condition.strip() or None
            if condition is not None:
                self.scope(None)._parse(condition)          # reject unreadable text now
        bp = Breakpoint(self._next_number(), spec, frozenset(pcs), condition,
                        temporary=temporary)
        self.breakpoints[bp.number] = bp
        return bp

    def add_watch(self, text: str, condition: str | None = None,
                  kind: str = "write") -> Watchpoint:
        ref = self.scope().reference(text)
        if condition is not None:
            condition = condition.strip() or None
            if condition is not None:
                self.scope()._parse(condition)
        level = self.level
        local = level is not None and ref.addr >= self.program.n_static
        where = "global"
        if local:
            f = self.program.functions[self.m.core.frame(level)[0]].name
            where = f"{f} (depth {level + 1})"
        wp = Watchpoint(self._next_number(), ref, where, self._words(ref), condition=condition,
                        kind=kind)
        if kind == "read":
            wp.pcs = frozenset(self._may_read(set(wp.addrs)))
        self.watchpoints[wp.number] = wp
        return wp

    def delete(self, number: int) -> str:
        if number in self.breakpoints:
            del self.breakpoints[number]
            return "breakpoint"
        if number in self.watchpoints:
            del self.watchpoints[number]
            return "watchpoint"
        raise DebugError(f"no breakpoint or watchpoint number {number}")

    def _words(self, ref: Ref) -> list[int]:
        n = ref.length or 1
        return [int(w) for w in self.m.mem[ref.addr:ref.addr + n]]

    def _refresh_watches(self) -> None:
        """Take the watched cells' current values as seen (after a jump in time or a set)."""
        for wp in self.watchpoints.values():
            wp.words = self._words(wp.ref)

    def _arm(self, pcs: Iterable[int], addrs: Iterable[int]) -> None:
        key = (tuple(sorted(set(pcs))), tuple(addrs))
        if key != self._armed:
            self.m.set_breakpoints(key[0])
            self.m.set_watch(key[1])
            self._armed = key

    def nested_note(self, pcs: Iterable[int]) -> str | None:
        """What to say when a breakpoint is set in a function that derivative statements run
        as nested runs (inside which the debugger does not stop), or None."""
        program = self.program
        for pc in sorted(pcs):
            fi = program.functions.index(program.function_at(pc))
            at = self.nested_in.get(fi)
            if at is not None:
                loc = program.location(at)
                where = f"{loc[0]}:{loc[1]}" if loc else f"pc {at}"
                return (f"{program.functions[fi].name} runs inside the nested runs of the "
                        f"derivative statement at {where}: the debugger steps over a "
                        f"statement as one instruction and does not stop inside its nested "
                        f"runs; this breakpoint stops only where {program.functions[fi].name} "
                        f"runs as an ordinary call")
        return None

    def _backward_pcs(self, pcs: Iterable[int]) -> set[int]:
        """Machine pcs to arm running backward so that no forward stop at `pcs` is missed:
        the pc itself; for a call its callee's begin (an uncall: end), where the call is undone;
        for a function's begin or end, the call sites, where its return is undone."""
        out: set[int] = set()
        program = self.program
        for pc in pcs:
            out.add(pc)
            name = program.op_at(pc).name
            if pc in self._callee:
                f = program.functions[self._callee[pc]]
                out.add(f.begin if name == "call" else f.end)
            elif name in ("begin", "end"):
                f = program.function_at(pc)
                fi = program.functions.index(f)
                out.update(self._callers.get(fi, ()))
        return out

    # ---- moving -------------------------------------------------------------------------

    def _budget(self, n: int | None) -> tuple[int | None, str]:
        """Steps a command may run, and the stop reason when they are used up."""
        if n is None:
            return self.limit, "limit"
        if self.limit is not None and self.limit < n:
            return self.limit, "limit"
        return n, "step"

    def run(self, direction: int, max_steps: int | None = None, *,
            target: _Target | None = None, stops: bool = True,
            watch: list[int] | None = None) -> Stop:
        """Run until a stop: a user breakpoint or watchpoint (if `stops`), the target of
        next/finish/until, a write to the `watch` addresses, the start or end, `max_steps`
        (or the session's limit), a trap, or Ctrl-C."""
        m = self.m
        t0 = m.t
        self.selected = None
        budget, on_budget = self._budget(max_steps)
        user: dict[int, list[Breakpoint]] = {}
        if stops:
            for bp in self.breakpoints.values():
                if bp.enabled:
                    for pc in bp.pcs:
                        user.setdefault(pc, []).append(bp)
        live = [wp for wp in self.watchpoints.values() if wp.enabled] if stops else []
        wps = [wp for wp in live if wp.kind == "write"]
        rws = [wp for wp in live if wp.kind == "read"]
        addrs = [a for wp in wps for a in wp.addrs] + list(watch or ())
        forward_pcs = set(user) | (target.pcs if target else set())
        for wp in rws:
            forward_pcs |= wp.pcs
        back_pcs = self._backward_pcs(forward_pcs) if direction < 0 else set()
        self._arm(forward_pcs if direction > 0 else back_pcs, addrs)
        for wp in wps:
            wp.words = self._words(wp.ref)
        watch_words = [int(m.mem[a]) for a in watch or ()]

        def stop(reason: str, **kw: Any) -> Stop:
            return Stop(reason, direction, t0, m.t, **kw)

        def at_pc() -> Stop | None:
            pc = m.pc
            if target is not None and pc in target.pcs and target.accept(pc):
                return stop(target.reason)
            for bp in user.get(pc, ()):
                note = ""
                if bp.condition is not None:
                    try:
                        if not self.scope(None).evaluate(bp.condition):
                            continue
                    except CellError as e:
                        note = f"error in the condition {bp.condition!r}: {e}"
                bp.hits += 1
                if bp.hit_condition is not None and not hit_ok(bp.hits, bp.hit_condition):
                    continue
                if bp.temporary:
                    del self.breakpoints[bp.number]
                return stop("breakpoint", breakpoint=bp, note=note)
            if rws:
                reads = self.reads(pc)
                seen = []
                for wp in rws:
                    hit = [r for r in wp.ref.elements() if r.addr in reads]
                    if hit and self._holds(wp.condition):
                        wp.hits += 1
                        seen += [Change(r.name, self._decode(r, int(m.mem[r.addr])),
                                        self._decode(r, int(m.mem[r.addr])), pc, wp)
                                 for r in hit]
                if seen:
                    return stop("read", watched=seen)
            return None

        def watch_stop(base: Stop | None) -> Stop | None:
            pc = m.watch_hit[1]
            changes = []
            for wp in wps:
                now = self._words(wp.ref)
                if now != wp.words and not self._holds(wp.condition):
                    wp.words = now
                elif now != wp.words:
                    for k, (a, b) in enumerate(zip(wp.words, now)):
                        if a != b:
                            name = wp.ref.elements()[k].name if wp.ref.length else wp.ref.name
                            changes.append(Change(name, self._decode(wp.ref, a),
                                                  self._decode(wp.ref, b), pc, wp))
                    wp.words = now
                    wp.hits += 1
            if watch:
                now = [int(m.mem[a]) for a in watch]
                if now != watch_words:
                    changes.append(Change("", None, None, pc))
            if not changes:
                return base
            if base is None:
                base = stop("watch")
            base.watched = changes
            return base

        try:
            while True:
                if self._done(direction):
                    return stop("end" if direction > 0 else "start")
                remaining = None if budget is None else budget - abs(m.t - t0)
                if remaining is not None and remaining <= 0:
                    return stop(on_budget)
                if self.interrupt is not None:
                    if self.interrupt():
                        return stop("interrupted")
                    if remaining is None or remaining > self.slice_steps:
                        remaining = self.slice_steps
                        sliced = True
                    else:
                        sliced = False
                else:
                    sliced = False
                if m.depth == 0:
                    # Entering main from the start or the end is a step of its own: the
                    # core's resume-from-breakpoint flag would otherwise skip a breakpoint
                    # at main's first instruction, so take it alone and test the stop here.
                    m.advance(direction, 1)
                    self._normalize()
                    s = at_pc() if m.pc in forward_pcs else None
                    if s is not None:
                        return s
                    continue
                if direction > 0:
                    rc = m.advance(+1, remaining)
                    if rc == "break":
                        s = at_pc()
                        if s is not None:
                            return s
                        continue
                elif self._back_pc() in back_pcs:
                    # undo the instruction, then see whether the forward view stops here
                    rc = m.advance(-1, 1)
                    self._normalize()
                    s = at_pc() if m.pc in forward_pcs else None
                    s = watch_stop(s) if rc == "watch" else s
                    if s is not None:
                        return s
                    continue
                else:
                    rc = m.advance(-1, remaining)
                    if rc == "break":
                        continue
                if rc == "watch":
                    s = watch_stop(None)
                    if s is not None:
                        return s
                    continue
                if rc == "limit":
                    if sliced:
                        continue                    # the slice is over: poll, go on
                    return stop(on_budget)
                # 'boundary': the loop's first test names it
        except Trap as e:
            self._normalize()
            return stop("trap", trap=e)
        except KeyboardInterrupt:
            self._normalize()
            return stop("interrupted")
        finally:
            self._normalize()
            if m.status == "end":
                self.end_t = m.t

    def _holds(self, condition: str | None) -> bool:
        """A stop's condition in the top frame (an error in it stops: the user sees why)."""
        if condition is None:
            return True
        try:
            return bool(self.scope(None).evaluate(condition))
        except CellError:
            return True

    def _decode(self, ref: Ref, word: int) -> Any:
        return word if ref.type is None else decode(ref.type, word, self.program.fraction_bits)

    def step(self, n: int = 1, direction: int = +1) -> Stop:
        """`n` instructions (calls are entered)."""
        return self.run(direction, n)

    def next(self, n: int = 1, direction: int = +1) -> Stop:
        """`n` instructions of this frame: a call runs as one step."""
        s = None
        t0 = self.t
        for _ in range(n):
            d = self.depth
            s = self.run(direction, 1)
            if s.reason == "step" and self.depth > d > 0:     # entering main is one step
                s = self.finish(self.depth - 1, direction, reason="step")
            if s.reason != "step":
                break
        assert s is not None
        s.t0 = t0
        return s

    def finish(self, level: int | None = None, direction: int = +1,
               reason: str = "finish", stops: bool = True) -> Stop:
        """Run until frame `level` (default: the selected one) returns to its caller
        (backward: until just before its call)."""
        if level is None:
            level = self.level
        if level is None or level == 0:
            return self.run(direction)          # the entry function: to the end / start
        core = self.m.core
        ret_pc = int(core.frame(level)[3])
        if direction > 0:
            back = ret_pc + int(core.frame(level - 1)[4])   # the caller's next instruction
        else:
            back = ret_pc                                   # just before the call
        target = _Target({back}, lambda pc: self.depth <= level, reason)
        return self.run(direction, target=target, stops=stops)

    def until(self, pcs: set[int] | None = None, direction: int = +1) -> Stop:
        """Run to one of `pcs` (any frame); without pcs, to a later line of this frame
        (an earlier one going backward), e.g. past the end of a loop.  Stops too when the
        frame returns."""
        level = self.level
        if level is None:
            # at the start or the end: no frame to stay in, any frame counts
            if not pcs:
                return self.run(direction)
            return self.run(direction, target=_Target(set(pcs), lambda pc: True, "until"))
        depth = level + 1
        if pcs is None:
            func = self.program.function_at(self.pc)
            here = self.location(self.pc)
            pcs = set()
            if func is not None and here is not None:
                for pc in range(func.begin, func.end + 1):
                    loc = self.location(pc)
                    if loc and loc[0] == here[0] and (loc[1] - here[1]) * direction > 0:
                        pcs.add(pc)
            local = frozenset(pcs)

            def accept(pc: int) -> bool:
                return self.depth < depth or (self.depth == depth and pc in local)
        else:
            wanted = frozenset(pcs)

            def accept(pc: int) -> bool:
                return pc in wanted or self.depth < depth
        core = self.m.core
        if level > 0:
            ret_pc = int(core.frame(level)[3])
            pcs = set(pcs) | {ret_pc + int(core.frame(level - 1)[4]) if direction > 0
                              else ret_pc}
        return self.run(direction, target=_Target(set(pcs), accept, "until"))


    # ---- by source line ---------------------------------------------------------------------

    def line_of(self, pc: int) -> tuple[str, int] | None:
        loc = self.location(pc)
        return (loc[0], loc[1]) if loc else None

    def _other_lines(self, here: tuple[str, int] | None, func: Any = None) -> set[int]:
        """The pcs (of `func`, or of the whole program) whose source line is not `here`."""
        lo, hi = (func.begin, func.end + 1) if func is not None else (0, len(self.program.code))
        return {pc for pc in range(lo, hi) if self.line_of(pc) != here}

    def _line_target(self, over: bool, reason: str) -> _Target:
        """Stop at the next instruction on another line: in any frame (`step`), or in this
        frame or a caller (`next`: calls run as one step)."""
        here = self.line_of(self.pc)
        level = self.level
        if not over or level is None:
            return _Target(self._other_lines(here), lambda pc: True, reason)
        d = self.depth
        pcs = self._other_lines(here, self.program.function_at(self.pc))
        if level > 0:
            core = self.m.core
            pcs.add(int(core.frame(level)[3]) + int(core.frame(level - 1)[4]))
            pcs.add(int(core.frame(level)[3]))

        def accept(pc: int) -> bool:
            return self.depth < d or (self.depth == d and self.line_of(pc) != here)
        return _Target(pcs, accept, reason)

    def step_line(self, n: int = 1, direction: int = +1, over: bool = False) -> Stop:
        """`n` source lines: forward to the first instruction of the next line met (`over`:
        in this frame or a caller, a call runs as one step); backward to the first
        instruction of the previous line, where a forward `step`/`next` from there started,
        so that going back retraces the forward stops exactly."""
        t0 = self.t
        s = None
        for _ in range(n):
            s = self._line_forward(over) if direction > 0 else self._line_backward(over)
            if s.reason != "step":
                break
        if s is None:
            return Stop("step", direction, t0, t0)
        s.t0 = t0
        return s

    def _line_forward(self, over: bool) -> Stop:
        s = self.run(+1, target=self._line_target(over, "step"))
        return s

    def _line_backward(self, over: bool) -> Stop:
        t0 = self.t
        # the previous instruction (from the end: main's `end`, not the whole of main)
        s = self.next(1, -1) if over and self.depth > 0 else self.run(-1, 1)
        if s.reason != "step":
            return s
        # back while the instruction before is still on this line, one too far, and redo it
        s = self.run(-1, target=self._line_target(over, "line"))
        if s.reason == "line":
            d = self.depth
            is_call = self.program.op_at(self.pc).name in ("call", "uncall")
            r = self.run(+1, 1, stops=False)
            if over and is_call and r.reason == "step" and self.depth > d:
                self.finish(self.depth - 1, +1, stops=False)
            s = Stop("step", -1, t0, self.t)
        elif s.reason == "start":
            s = Stop("step", -1, t0, self.t)
        s.t0 = t0
        return s

    # ---- what an instruction reads ------------------------------------------------------------

    def _operand_addrs(self, word: int, level: int) -> set[int]:
        """The absolute addresses an operand word reads in frame `level` now (an indexed
        operand reads its index cell too)."""
        mode, q = operand_parts(word)
        core = self.m.core
        if mode == MODE_G:
            return {q}
        if level < 0:
            return set()
        if mode == MODE_L:
            return {int(core.frame(level)[1]) + q}
        if mode == MODE_P:
            try:
                return {int(core.param(level, q)[0])}
            except IndexError:
                return set()
        if mode == MODE_X and 0 <= q < len(self.program.xtab):
            x = self.program.xtab[q]
            idx = self._operand_addrs(x.index, level)
            bmode, bq = operand_parts(x.base)
            base = self._operand_addrs(x.base, level) if bmode != MODE_X else set()
            if len(idx) == 1 and len(base) == 1:
                k = int(self.m.mem[next(iter(idx))])
                return idx | {next(iter(base)) + k}
            return idx
        return set()

    def _read_words(self, pc: int) -> list[int]:
        program = self.program
        row = [int(w) for w in program.code[pc]]
        op = program.op_at(pc)
        if op.name in ("jmp", "join", "assert"):
            return [] if cond_parts(row[1])[0] == CMP_ALWAYS else [row[2], row[3]]
        if op.family == "xorcmp":
            return [row[3], row[4]]
        if op.name == "trace":
            return list(program.traces[row[1]].operands) if 0 <= row[1] < len(program.traces) \
                else []
        if op.name in ("call", "uncall", "begin", "end"):
            return []
        return [row[k] for k, kind in enumerate(op.operands, start=1) if kind == "a"]

    def reads(self, pc: int | None = None) -> set[int]:
        """The addresses the instruction at pc (default: the next one) reads as a source in
        the top frame now: the inputs of an update, a condition's operands, a trace's."""
        pc = self.pc if pc is None else pc
        level = self.m.depth - 1
        out: set[int] = set()
        for w in self._read_words(pc):
            out |= self._operand_addrs(w, level)
        return out

    def _may_read(self, addrs: set[int]) -> set[int]:
        """The pcs whose instruction may read one of `addrs` (a superset: any parameter,
        local or indexed operand whose cell is only known at run time)."""
        out = set()
        static = self.program.n_static
        for pc in range(len(self.program.code)):
            for w in self._read_words(pc):
                mode, q = operand_parts(w)
                if mode == MODE_G and q not in addrs:
                    continue
                if mode == MODE_L and all(a < static for a in addrs):
                    continue
                if mode == MODE_N:
                    continue
                out.add(pc)
                break
        return out

    # ---- time travel ----------------------------------------------------------------------

    def _restart(self) -> None:
        """Back to t = 0 of an unforked timeline from the stored start state."""
        self.m.core.reset(False)
        self.m.mem[:self.program.n_globals] = self._start
        self._armed = None
        self.m.set_breakpoints([])
        self.m.set_watch([])
        self._armed = ((), ())

    def goto(self, t: int | str) -> Stop:
        """Go to step t (ignoring breakpoints): an int, 'start' or 'end'."""
        m = self.m
        t0 = m.t
        self._arm((), ())
        self.selected = None
        try:
            if t == "end":
                budget = self.limit
                self._step_sliced(budget if budget is not None else 1 << 62, +1)
                reason = "end" if m.status == "end" else "limit"
            else:
                t = 0 if t == "start" else int(t)
                if t < 0 and self.forked_at is None:
                    raise DebugError(f"t={t} is before the start (t=0)")
                if self.end_t is not None and t > self.end_t and self.forked_at is None:
                    raise DebugError(f"t={t} is after the end of the run (t={self.end_t})")
                if self.forked_at is None and (0 <= t < abs(t - m.t) or
                                               (m.core.nest_stop[0] and t >= 0)):
                    # nearer from the start than from here, or the machine stopped inside a
                    # derivative statement's nested run, where it cannot move
                    self._restart()
                n = t - m.t
                if self.limit is not None and abs(n) > self.limit:
                    raise DebugError(f"t={t} is {abs(n)} steps away, more than --limit "
                                     f"{self.limit}")
                self._step_sliced(abs(n), +1 if n >= 0 else -1)
                reason = "goto"
                if m.t != t:
                    where = "ends" if n > 0 else "starts"
                    reason = "end" if n > 0 else "start"
                    self._normalize()
                    return Stop(reason, 1 if n >= 0 else -1, t0, m.t,
                                note=f"the run {where} at t={m.t}")
        except Trap as e:
            self._normalize()
            return Stop("trap", 1, t0, m.t, trap=e)
        except KeyboardInterrupt:
            self._normalize()
            return Stop("interrupted", 1, t0, m.t)
        finally:
            self._normalize()
            self._refresh_watches()
            if m.status == "end":
                self.end_t = m.t
        return Stop(reason, 1 if m.t >= t0 else -1, t0, m.t)

    def _step_sliced(self, n: int, direction: int) -> None:
        """m.step(n), in slices when a run may be interrupted (raises KeyboardInterrupt)."""
        m = self.m
        if self.interrupt is None:
            m.step(n, direction)
            return
        while n > 0:
            if self.interrupt():
                raise KeyboardInterrupt
            k = min(n, self.slice_steps)
            done = m.step(k, direction)
            n -= k
            if done < k:
                return

    def _go_back_to(self, t: int) -> None:
        """Return to t after a search (`last`, `history`, `diff`)."""
        if self.m.t != t:
            s = self.goto(t)
            if s.t != t:
                raise DebugError(f"could not return to t={t}: {s.trap or s.note or s.reason}")
        self._refresh_watches()

    def _frame_target(self, ref: Ref) -> _Target | None:
        """For a frame cell: the entry of its frame, where searching backward must end
        (before it the cell belonged to no frame or to another call)."""
        if ref.addr < self.program.n_static or self.level is None:
            return None
        core = self.m.core
        for level in range(self.m.depth - 1, -1, -1):
            fi, fp = core.frame(level)[:2]
            if fp <= ref.addr < fp + self.program.functions[fi].frame_size:
                if level == 0:
                    return None
                ret_pc = int(core.frame(level)[3])
                return _Target({ret_pc}, lambda pc, lv=level: self.depth <= lv, "entry")
        return None

    def last(self, text: str) -> tuple[Write | None, Stop]:
        """Run back to the most recent write of a cell (or any cell of an array/slice)."""
        ref = self.scope().reference(text)
        addrs = list(range(ref.addr, ref.addr + (ref.length or 1)))
        after = self._words(ref)
        t0 = self.t
        s = self.run(-1, target=self._frame_target(ref), stops=False, watch=addrs)
        if s.reason != "watch":
            if s.reason in ("start", "entry", "limit", "interrupted"):
                self._go_back_to(t0)
                s.t = self.t
            return None, s
        before = self._words(ref)
        k = next(i for i, (a, b) in enumerate(zip(before, after)) if a != b)
        name = ref.elements()[k].name if ref.length else ref.name
        pc = s.watched[0].pc
        assert pc is not None
        return Write(self.t, pc, name, self._decode(ref, before[k]),
                     self._decode(ref, after[k])), s

    def history(self, text: str, count: int = 20) -> tuple[list[Write], bool, Stop]:
        """The last `count` writes of a cell before now, oldest first, and whether there are
        earlier ones.  The machine runs back through them and returns."""
        ref = self.scope().reference(text)
        addrs = list(range(ref.addr, ref.addr + (ref.length or 1)))
        target = self._frame_target(ref)
        t0 = self.t
        writes: list[Write] = []
        more = False
        after = self._words(ref)
        s = None
        try:
            while True:
                s = self.run(-1, target=target, stops=False, watch=addrs)
                if s.reason != "watch":
                    break
                if len(writes) == count:
                    more = True
                    break
                before = self._words(ref)
                pc = s.watched[0].pc
                for k, (a, b) in enumerate(zip(before, after)):
                    if a != b:
                        name = ref.elements()[k].name if ref.length else ref.name
                        writes.append(Write(self.t, pc, name, self._decode(ref, a),
                                            self._decode(ref, b)))
                after = before
        finally:
            self._go_back_to(t0)
        writes.reverse()
        assert s is not None
        return writes, more, s

    # ---- states ---------------------------------------------------------------------------

    def cells(self) -> dict[str, tuple[Ref, int]]:
        """Every named cell of the state: globals, then each frame's locals by
        `function#depth.name`; name -> (ref of the cell, word)."""
        out: dict[str, tuple[Ref, int]] = {}
        mem = self.m.mem
        for g in self.program.globals:
            for r in Ref(g.name, g.type, g.addr, g.length).elements():
                out[r.name] = (r, int(mem[r.addr]))
        core = self.m.core
        for level in range(self.m.depth):
            fi, fp = core.frame(level)[:2]
            f = self.program.functions[fi]
            for loc in f.locals:
                for r in Ref(loc.name, loc.type, fp + loc.offset, loc.length).elements():
                    key = f"{f.name}#{level + 1}.{r.name}@{loc.offset}"
                    out[key] = (r, int(mem[r.addr]))
        return out

    def snapshot(self) -> dict[str, Any]:
        """What `diff` compares: position, every named cell, the value stack."""
        return {"t": self.t, "pc": self.pc, "depth": self.depth, "cells": self.cells(),
                "stack": [int(w) for w in self.m.stack()]}

    def diff(self, t1: int | str, t2: int | str) -> tuple[dict, dict]:
        """The states at two steps (the machine goes there and comes back)."""
        t0 = self.t
        try:
            out = []
            for t in (t1, t2):
                s = self.goto(t)
                # `end` of a run that traps is the trap: the last state there is
                reached = s.reason in ("end", "trap") if t == "end" else \
                    s.reason == "goto" and s.t == (0 if t == "start" else t)
                if not reached:
                    why = s.trap.detail if s.trap else s.note or s.reason
                    raise DebugError(f"cannot reach t={t}: {why}")
                out.append(self.snapshot())
        finally:
            self._go_back_to(t0)
        return out[0], out[1]

    def set_cell(self, text: str, value_text: str) -> tuple[Ref, Any, Any]:
        """Write a cell (forks the timeline: the past and future change; later bookmarks are
        dropped).  Returns (ref, old value, new value)."""
        scope = self.scope()
        ref = scope.reference(text)
        value = scope.value_for_store(value_text)
        old = scope.value(ref)
        scope.store(ref, value)
        new = scope.value(ref)
        if self.forked_at is None:
            self.forked_at = self.t
        self.end_t = None
        for name, t in list(self.bookmarks.items()):
            if t > self.t:
                del self.bookmarks[name]
        self._refresh_watches()
        return ref, old, new

    # ---- naming what changed --------------------------------------------------------------

    def capture(self) -> tuple[np.ndarray, int, list]:
        """Memory in use now (static cells and live frames), to name what a command changed."""
        top = self.m.core.frame_top
        return self.m.mem[:top].copy(), self.depth, self._frame_table()

    def _frame_table(self) -> list[tuple[int, int, int]]:
        core = self.m.core
        return [(level, *core.frame(level)[:2]) for level in range(self.m.depth)]

    def changes(self, before: tuple[np.ndarray, int, list], limit: int = 8
                ) -> tuple[list[Change], int]:
        """Cells whose words differ from `before`: up to `limit` named changes and the
        total number."""
        words, _, frames_before = before
        mem = self.m.mem
        top = max(len(words), self.m.core.frame_top)
        now = mem[:top]
        old = np.zeros(top, dtype=np.int64)
        old[:len(words)] = words
        diff = np.flatnonzero(now != old)
        out = []
        for addr in diff[:limit]:
            addr = int(addr)
            ref = self._owner(addr, self._frame_table()) or self._owner(addr, frames_before)
            if ref is None:
                out.append(Change(f"@{addr}", int(old[addr]), int(now[addr])))
            else:
                out.append(Change(ref.name, self._decode(ref, int(old[addr])),
                                  self._decode(ref, int(now[addr]))))
        return out, len(diff)

    def _owner(self, addr: int, frames: list[tuple[int, int, int]]) -> Ref | None:
        """The named cell at an absolute address: a global, or a local of a frame (named
        plainly in the top frame, `f#depth.name` in the others)."""
        program = self.program
        if addr < program.n_static:
            for g in program.globals:
                if g.addr <= addr < g.addr + g.size:
                    r = Ref(g.name, g.type, g.addr, g.length)
                    return r.elements()[addr - g.addr] if g.length else r
            return None
        top = self.m.depth - 1
        for level, fi, fp in reversed(frames):
            f = program.functions[fi]
            if fp <= addr < fp + f.frame_size:
                for loc in f.locals:
                    n = loc.length or 1
                    if fp + loc.offset <= addr < fp + loc.offset + n:
                        name = loc.name if level == top else f"{f.name}#{level + 1}.{loc.name}"
                        r = Ref(name, loc.type, fp + loc.offset, loc.length)
                        return r.elements()[addr - r.addr] if loc.length else r
        return None
