"""The public machine: runs a Program forward and backward over the Cython core.

    m = Machine(program)
    m.reset({"n": 10})              # start state: inputs, every other global zero
    m.run()                         # forward to the end; traps raise rvm.errors.Trap subclasses
    m.outputs()                     # {"out": 55, ...}
    m.run(direction=-1)             # backward to the start: the inputs again, bit for bit

Execution semantics are in docs/machine.md.  The step counter `t` counts instructions from the
last reset (up forward, down backward); entering the entry function from the start or the end is
one step, like the `call` of any other function, and its return is one more.

This module also holds the small formatter that names cells and prints instructions for trap
messages (`describe_operand`, `format_instruction`); the disassembler proper lives with the
assembler.
"""
from __future__ import annotations

import linecache
import operator
import os
import sys
import threading
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from isa.arith import ArithTrap, execute
from isa.derivatives import DERIVATIVE_FAMILIES
from isa.functions import CMP_ALWAYS, CMP_SYMBOLS, FN1, FN2, cond_parts
from isa.table import OPS, Op
from isa.types import FLOAT, INT, NumType

from . import _core
from .errors import (
    AliasError,
    AncillaError,
    AssertionTrap,
    BoundsError,
    BytecodeTrap,
    ComeFromError,
    DivisionByZero,
    DomainError,
    NestingError,
    PathDivergence,
    PopError,
    RangeError,
    ReadOnlyError,
    RVMError,
    StackOverflow,
    StackUnderflow,
    StepLimit,
    Trap,
)
from .program import MODE_G, MODE_L, MODE_N, MODE_P, MODE_X, Function, Program, operand_parts
from .values import ValueEncodingError, decode, decode_array, encode, encode_array

_NEST_MODES = {0: "no", 1: "a tangent", 2: "an adjoint", 3: "a tangent-over-adjoint"}
# the machine's reasons for refusing a derivative statement (rvm/_nested.pxi), by trap word 3
_NEST_WHY = {
    3002: lambda tv: (f"a derivative statement under {_NEST_MODES.get(int(tv[0]) & 3, '?')} mode "
                      f"at nesting level {int(tv[1])}: unsupported (the machine differentiates a "
                      f"derivative statement once, by its second-order modes; a third order, "
                      f"or more than two statements nested, is not supported)"),
    3003: lambda tv: (f"the target, wrt and along operands of a derivative statement differ in "
                      f"length ({int(tv[0])} and {int(tv[1])} cells)"),
    3004: lambda tv: ("the scratch output of a derivative statement is not zero after the "
                      "nested run (its function must add its value into the output once, so "
                      "that running it back subtracts exactly that value)"),
    3005: lambda tv: "the scratch output of a derivative statement is not zero before the run",
}

_NEST_STOPS = {1: "the step limit", 2: "interrupted", 3: "a trap"}

__all__ = ["Machine", "TraceEvent", "UnknownName", "describe_operand", "format_instruction"]

_STATUS = {_core.S_START: "start", _core.S_END: "end", _core.S_RUNNING: "running"}
def _count(n: Any, what: str) -> int:
    """A step count: a non-negative integer (a float would truncate to a zero-step slice)."""
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"{what} must be >= 0, not {n}")
    return n


_SLICE = 1 << 24          # instructions per nogil run (~0.1 s)
_UNLIMITED = 1 << 62


class UnknownName(RVMError, KeyError):
    """A name that is not a global of the program."""

    def __str__(self) -> str:          # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


@dataclass
class TraceEvent:
    """What a `trace` instruction reports to the machine's trace handler.  `style` is "trace"
    (a debugging report) or program output: "show" (`name = value, ...`), "print" (the
    message) or "printf" (the message is a printf format of the values).  Arrays are lists;
    a stack is the list of its items, bottom first."""
    message: str
    values: dict[str, Any]
    pc: int
    step: int
    direction: int
    style: str = "trace"
    items: list[tuple[str, Any]] | None = None      # (name, value) in order, repeats included

    def __str__(self) -> str:
        items = self.items if self.items is not None else list(self.values.items())
        if self.style == "show":
            return ", ".join(f"{k} = {_text(v)}" for k, v in items)
        if self.style == "print":
            return self.message
        if self.style == "printf":
            return printf(self.message, [v for _, v in items])
        vals = " ".join(f"{k}={v}" for k, v in self.values.items())
        return f"trace: {self.message}" + (f" {vals}" if vals else "")


def _text(v: Any) -> str:
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(_text(x) for x in v) + "]"
    return str(v)


def printf(fmt: str, values: list[Any]) -> str:
    """Janus's printf: %d an int, %a an array, %t a stack, %b a condition, %% a percent."""
    out, k, i = [], 0, 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%" and i + 1 < len(fmt):
            spec = fmt[i + 1]
            i += 2
            if spec == "%":
                out.append("%")
            elif spec in "datb" and k < len(values):
                v = values[k]
                k += 1
                out.append(("true" if v else "false") if spec == "b" else _text(v))
            else:
                out.append("%" + spec)
            continue
        out.append(c)
        i += 1
    return "".join(out)


def print_trace(event: TraceEvent) -> None:
    """The default trace handler: a report on stderr; program output (show, print, printf)
    on stdout."""
    print(event, file=sys.stderr if event.style == "trace" else sys.stdout)


# ---- naming cells and printing instructions ----------------------------------------------------

def _static_cells(program: Program) -> tuple[list[int], list[tuple[int, int, str, NumType]]]:
    cells = sorted([(g.addr, g.size, g.name, g.type) for g in program.globals] +
                   [(c.addr, 1 if c.length is None else c.length, c.name, c.type)
                    for c in program.consts])
    return [c[0] for c in cells], cells


def _element(name: str, size: int, k: int, is_array: bool) -> str:
    return f"{name}[{k}]" if is_array or size > 1 else name


def _static_name(program: Program, addr: int) -> tuple[str, NumType | None]:
    starts, cells = _static_cells(program)
    i = bisect_right(starts, addr) - 1
    if i >= 0:
        a, size, name, t = cells[i]
        if addr < a + size:
            arr = any(g.name == name and g.length is not None for g in program.globals) or \
                any(c.name == name and c.length is not None for c in program.consts)
            if ":" in name:     # a literal the assembler interned as a constant: `0:int`
                return name.partition(":")[0], t
            return _element(name, size, addr - a, arr), t
    return f"@{addr}", None


def _local_name(func: Function | None, offset: int) -> tuple[str, NumType | None]:
    for loc in (func.locals if func else ()):
        size = 1 if loc.length is None else loc.length
        if loc.offset <= offset < loc.offset + size:
            return _element(loc.name, size, offset - loc.offset, loc.length is not None), loc.type
    return f"local+{offset}", None


def _param(func: Function | None, p: int):
    return func.params[p] if func is not None and 0 <= p < len(func.params) else None


def _array_name(program: Program, func: Function | None, word: int) -> tuple[str, NumType | None]:
    """Name of an array base word (G/L: element 0's cell, P: the parameter)."""
    mode, q = operand_parts(word)
    if mode == MODE_P:
        par = _param(func, q)
        return (par.name, par.type) if par else (f"param{q}", None)
    name, t = _static_name(program, q) if mode == MODE_G else _local_name(func, q)
    return (name[:-3] if name.endswith("[0]") else name), t


def operand_type(program: Program, func: Function | None, word: int) -> NumType | None:
    """Declared type of the cell an operand word names (None if unknown)."""
    return _describe(program, func, word)[1]


def describe_operand(program: Program, func: Function | None, word: int) -> str:
    """Source-level name of the cell an operand word names in `func`: `x`, `a[3]`, `q[i]`,
    `len(q)`, or a raw form like `@12` when no symbol covers it."""
    return _describe(program, func, word)[0]


def _describe(program: Program, func: Function | None, word: int) -> tuple[str, NumType | None]:
    mode, q = operand_parts(word)
    if mode == MODE_G:
        return _static_name(program, q)
    if mode == MODE_L:
        return _local_name(func, q)
    if mode == MODE_P:
        par = _param(func, q)
        return (par.name, par.type) if par else (f"param{q}", None)
    if mode == MODE_N:
        par = _param(func, q)
        return f"len({par.name if par else f'param{q}'})", INT
    if mode == MODE_X and 0 <= q < len(program.xtab):
        x = program.xtab[q]
        base, t = _array_name(program, func, x.base)
        return f"{base}[{_describe(program, func, x.index)[0]}]", t
    return f"<operand {word}>", None


def _label(program: Program, pc: int) -> str:
    return program.labels.get(pc, f"pc {pc}")


def _imm_text(t: NumType | None, word: int, F: int) -> str:
    return repr(decode(t, word, F)) if t is not None else str(word)


def format_condition(program: Program, func: Function | None, cc: int, a: int, b: int) -> str:
    cmp, _ = cond_parts(cc)
    if cmp == CMP_ALWAYS:
        return "always"
    sym = CMP_SYMBOLS.get(cmp, f"<cmp {cmp}>")
    return f"{describe_operand(program, func, a)} {sym} {describe_operand(program, func, b)}"


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _quote(message: str) -> str:
    """A message as a double-quoted string, with the assembler's escapes."""
    out = []
    for c in message:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7f:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def format_instruction(program: Program, pc: int) -> str:
    """One instruction as text: mnemonic and operands by name, e.g. `add.i x, one`,
    `jmp top if i < n`, `call f(a, b[i])`."""
    if not 0 <= pc < len(program.code):
        return f"<pc {pc} outside the code>"
    row = [int(w) for w in program.code[pc]]
    if not 0 <= row[0] < len(OPS):
        return f"<opcode {row[0]}>"
    op = OPS[row[0]]
    func = program.function_at(pc)
    F = program.fraction_bits
    if op.name in ("jmp", "join", "assert"):
        cc, a, b = row[1:4]
        cond = format_condition(program, func, cc, a, b)
        if op.name == "assert":
            msg = row[4]
            if 0 < msg <= len(program.traces):
                return f"assert {cond}, {_quote(program.traces[msg - 1].message)}"
            return f"assert {cond}"
        return f"{op.name} {_label(program, row[4])}" + ("" if cond == "always" else f" if {cond}")
    if op.family == "xorcmp":
        return f"{op.name} {describe_operand(program, func, row[1])}, " \
               f"{format_condition(program, func, row[2], row[3], row[4])}"
    if op.name in ("call", "uncall"):
        k = row[1]
        if not 0 <= k < len(program.callsites):
            return f"{op.name} <site {k}>"
        site = program.callsites[k]
        callee = program.functions[site.func].name if 0 <= site.func < len(program.functions) \
            else f"<function {site.func}>"
        args = ", ".join(describe_operand(program, func, a.word) if a.length is None
                         else _array_name(program, func, a.word)[0] for a in site.args)
        return f"{op.name} {callee}({args})"
    if op.name in ("begin", "end"):
        k = row[1]
        name = program.functions[k].name if 0 <= k < len(program.functions) else str(k)
        return f"{op.name} {name}"
    if op.name == "trace":
        k = row[1]
        if not 0 <= k < len(program.traces):
            return f"trace <entry {k}>"
        tr = program.traces[k]
        return "trace " + ", ".join([repr(tr.message)] +
                                    [describe_operand(program, func, w) for w in tr.operands])
    parts = []
    for slot, kind in enumerate(op.operands, start=1):
        w = row[slot]
        if kind in ("y", "a"):
            parts.append(describe_operand(program, func, w))
        elif kind == "imm":
            parts.append(_imm_text(op.type, w, F))
        elif kind == "fn":
            table = FN2 if op.family in ("addfn2", "subfn2") else FN1
            parts.append(table[w].name if 0 <= w < len(table) else f"<fn {w}>")
        else:
            parts.append(str(w))
    return op.name + (" " + ", ".join(parts) if parts else "")


# ---- the machine -------------------------------------------------------------------------------

# why a float ancilla is not zero, nearly always (docs/rasm.md, "Float ancillas")
_FLOAT_RESIDUE = ("; a float ancilla comes back as a rounding residue (such as 1e-17) instead "
                  "of +0.0 when the operations that undo it are not the ones that computed it: "
                  "compute it once from zero and uncompute it with the same instruction (what "
                  "expressions do), or keep the value in a global scratch cell")


class MachineMemoryError(RVMError, MemoryError):
    """The machine's memory (static cells, frames, stack) cannot be had: the message names
    each size and the limit."""


def _memory_text(program: Program, stack_cells: int, frame_cells: int) -> str:
    n = program.n_static
    total = 16 * n + 8 * (frame_cells + stack_cells)
    return (f"the machine needs {total / 2**30:.1f} GiB: {n} static cells for the globals and "
            f"constants (16 bytes each: the memory and its start image), {frame_cells} frame "
            f"cells and {stack_cells} stack cells (8 bytes each)")


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _check_memory(program: Program, stack_cells: int, frame_cells: int) -> None:
    """Refuse at once a machine that cannot fit in this computer's memory (a numpy allocation
    would succeed lazily and the process be killed when the pages are touched)."""
    limit = _physical_memory()
    need = 16 * program.n_static + 8 * (frame_cells + stack_cells)
    if limit is not None and need > limit:
        raise MachineMemoryError(f"{_memory_text(program, stack_cells, frame_cells)}, more than "
                                 f"this computer's {limit / 2**30:.1f} GiB of memory; make the "
                                 f"arrays smaller (or give smaller --stack-cells/--frame-cells)")


def store_cells(program: Program) -> dict[str, tuple[int, int, int]]:
    """{global name: (address, kind, size)} of the globals whose values Core.load stores
    itself: kind 0 an int scalar, 1 a float scalar, 2 a float array, 3 an int array (named
    stacks, fixed and lns globals go through Machine.write)."""
    cells = {}
    for g in program.globals:
        if g.stack or g.type not in (INT, FLOAT):
            continue
        if g.length is None:
            cells[g.name] = (g.addr, int(g.type == FLOAT), 1)
        else:
            cells[g.name] = (g.addr, 2 if g.type == FLOAT else 3, g.length)
    return cells


class Machine:
    """A Program's machine state with the operations to run it in both directions.

    Capacities: `stack_cells` words of value stack, `frame_cells` cells of frame memory (also
    the capacity of the parameter table), `max_depth` frames on the control stack.  `trace` is
    called with a `TraceEvent` at every `trace` instruction (default: print to stderr).
    """

    NATIVE_AFTER = 8          # runs from a boundary before the native code is built

    def __init__(self, program: Program, *, stack_cells: int = 1 << 20,
                 frame_cells: int = 1 << 22, max_depth: int = 1 << 16,
                 trace: Callable[[TraceEvent], None] | None = None,
                 native: bool | None = None):
        self.program = program
        self.trace_handler: Callable[[TraceEvent], None] = trace or print_trace
        self._options = dict(stack_cells=stack_cells, frame_cells=frame_cells,
                             max_depth=max_depth)
        _check_memory(program, stack_cells, frame_cells)
        try:
            self.core = _core.Core(program, **self._options)
        except MemoryError:
            raise MachineMemoryError(_memory_text(program, stack_cells, frame_cells) +
                                     ": the system refused it") from None
        # where the last reset put the machine (+1 start, -1 end, 0 none yet) and the globals
        # then: a run that comes back there must retrace its way (see _check_return)
        self._origin = 0
        self._origin_words: np.ndarray | None = None
        self._default_words: tuple[np.ndarray, np.ndarray] | None = None
        self._symbols: dict[str, tuple[NumType, int, int | None, bool]] = {}
        for c in program.consts:
            self._symbols[c.name] = (c.type, c.addr, c.length, False)
        for g in program.globals:
            self._symbols[g.name] = (g.type, g.addr, g.length, True)
        self._n_globals = program.n_globals
        # named stacks read and write as the list of their items, bottom first
        self._stacks = {g.name for g in program.globals if g.stack}
        # native runs (see `run`): runs left before the automatic build (-1: none), the build
        # thread while it runs, and what the `native` property says
        self._native_count = -1 if native is False or os.environ.get("RVM_NATIVE") == "0" \
            else self.NATIVE_AFTER
        self._native_build: Any = None
        self._native_text = "off (native=False)" if native is False else "not compiled"
        if native:
            self.compile()

    # ---- start and end states --------------------------------------------------------

    def reset(self, inputs: Mapping[str, Any] | None = None) -> None:
        """Start state: the given globals (normally the inputs), the other inputs at their
        defaults, every other global zero; direction forward."""
        self._origin_words = None           # a Result may hold the last one (rvm.api.run)
        self.core.reset(False)
        self._load(inputs or {}, defaults=True)
        self._set_origin(+1)

    def reset_end(self, outputs: Mapping[str, Any] | None = None) -> None:
        """End state: the given globals (normally the outputs), every other global zero;
        direction backward, ready for `run(direction=-1)`."""
        self._origin_words = None
        self.core.reset(True)
        self._load(outputs or {}, defaults=False)
        self._set_origin(-1)

    def _set_origin(self, side: int) -> None:
        self._origin = side
        self._origin_words = self.core.globals_words()

    def _load(self, values: Mapping[str, Any], defaults: bool) -> None:
        # the common case in C: the defaults and values that are a word's bits (a Python
        # float or int for a float or int scalar, a float64 or int64 vector for an array)
        plan = self.__dict__.get("_load_plan")
        if plan is None:
            addrs, words = self._defaults()
            plan = self._load_plan = (store_cells(self.program), addrs.astype(np.int64), words)
        if type(values) is dict and (
                self.core.load(values, plan[0], plan[1], plan[2]) if defaults else
                self.core.load(values, plan[0])):
            return
        unknown = [k for k in values if k not in self._symbols or not self._symbols[k][3]]
        if unknown:
            names = ", ".join(g.name for g in self.program.globals) or "none"
            raise UnknownName(f"no global named {', '.join(map(repr, unknown))} "
                              f"(the globals are: {names})")
        mem = self.core.mem
        if defaults:
            # every input default in one store (a gradient loop resets per call), then the
            # given values over them
            addrs, words = self._defaults()
            mem[addrs] = words
        for name, value in values.items():
            self.write(name, value)

    def _defaults(self) -> tuple[np.ndarray, np.ndarray]:
        """Addresses and words of the inputs' default values (computed once)."""
        if self._default_words is None:
            addrs, words = [], []
            for g in self.program.globals:
                if g.is_input and g.default is not None:
                    addrs.extend(range(g.addr, g.addr + g.size))
                    words.extend(np.atleast_1d(np.asarray(g.default, dtype=np.int64)).tolist())
            self._default_words = (np.array(addrs, dtype=np.intp), np.array(words, dtype=np.int64))
        return self._default_words

    # ---- running -----------------------------------------------------------------------

    def run(self, direction: int = +1, max_steps: int | None = None) -> str:
        """Run to the end (forward) or the start (backward) and return the status.  Raises a
        Trap subclass on a trap, StepLimit when `max_steps` instructions have run first (the
        machine can then be run further).

        A run from the start forward or from the end backward, with no breakpoint, watch or
        AD mode on, runs as native code once the program is compiled (`compile`, or by itself
        in a thread at the NATIVE_AFTER-th such run, unless native=False or RVM_NATIVE=0):
        the same final state, steps and statistics, bit for bit.  When the native code gives
        up (anything the interpreter traps on, or a run of max_steps steps or more) the start
        state is put back and the interpreter runs it, reporting as usual."""
        budget = _UNLIMITED if max_steps is None else min(_count(max_steps, "max_steps"),
                                                           _UNLIMITED)
        if direction in (1, -1) and self.core.depth == 0 and self._native_count >= 0 \
                and self._native_turn(direction, budget):
            self._check_return()
            return self.status
        rc, _ = self._drive(direction, budget, capped=True)
        if rc == _core.R_BUDGET:
            raise self._step_limit(budget)
        self._check_return()
        return self.status

    def _native_turn(self, direction: int, budget: int) -> bool:
        """Run natively if the code is there (True: done); count the runs towards the
        automatic build, and install a finished build, otherwise."""
        core = self.core
        if not core.native_runs_on:
            if self._native_build is None:
                if core.ad_mode or self.status != ("start" if direction > 0 else "end"):
                    return False
                self._native_count -= 1
                if self._native_count > 0:
                    return False
                self._native_build = threading.Thread(target=self._build_native, daemon=True,
                                                      name="rvm-native-build")
                self._native_build.start()
                return False
            if self._native_build.is_alive():
                return False
            built, self._native_build = self._native_built, None
            if isinstance(built, Exception):
                self._native_count = -1
                self._native_text = f"interpreted: {built}"
                return False
            from .native import BuildError
            try:
                self._install(built)
            except BuildError as e:
                self._native_text = f"interpreted: {e}"
                return False
        if direction != core.direction:
            core.flip()
        return core.native_run(budget) == 0

    def _build_native(self) -> None:
        from . import native
        try:
            self._native_built = native.for_program(self.program)
        except (native.Unsupported, native.BuildError, OSError) as e:
            self._native_built = e

    def compile(self) -> Any:
        """Compile the program to native code now (or find it in the cache) and make runs
        from a boundary use it; returns rvm.native.Native.  Raises rvm.native.Unsupported
        when the program uses what the generator does not cover (`trace`), BuildError without
        a C compiler."""
        from . import native
        return self._install(native.for_program(self.program))

    def _install(self, nat: Any) -> Any:
        from . import native
        if not nat.install_runs(self.core):
            self._native_count = -1
            raise native.BuildError("the entry frame does not fit the machine's frame region")
        self._native_count = 0
        self._native_text = f"native ({nat.path.name})"
        return nat

    @property
    def native(self) -> str:
        """Whether runs from a boundary run as native code, and if not, why."""
        return self._native_text

    def step(self, n: int = 1, direction: int = +1) -> int:
        """Run up to `n` instructions, stopping at the program boundary; returns how many ran.
        Traps raise as in `run`.  `step(0, d)` only turns the machine to direction d."""
        done = self._drive(direction, min(_count(n, "n"), _UNLIMITED))[1]
        self._check_return()
        return done

    def _drive(self, direction: int, budget: int, capped: bool = False) -> tuple[int, int]:
        """Run until a stop other than a slice's end; (R_* code, steps).  `capped`: the
        budget bounds every instruction, the nested runs of derivative statements included
        (run's max_steps); otherwise it counts the machine's own instructions, a derivative
        statement one (step, advance)."""
        if direction not in (1, -1):
            raise ValueError(f"direction must be +1 or -1, not {direction!r}")
        core = self.core
        why, at = core.nest_stop
        if why:
            raise RVMError(f"the machine stopped inside the nested run of "
                           f"{self._statement_text(at)} ({_NEST_STOPS[why]}): it cannot go on "
                           f"or back from there; reset it")
        if direction != core.direction:
            core.flip()
        core.refresh_watch()
        core.skip_breakpoint()          # resuming from a breakpoint runs its instruction
        done = 0
        while True:
            # Run in slices so that Ctrl-C (raised by Python between slices) stops a long run;
            # the machine is left between two instructions and can go on or go back.
            # The cap (capped) bounds the nested runs too: a signal inside one raises here.
            if capped:
                rc = core.run(min(budget - done, _SLICE), budget - done)
                done += core.last_total
            else:
                rc = core.run(min(budget - done, _SLICE))
                done += core.last_n
            if rc == _core.R_BUDGET and done < budget:
                continue
            if rc == _core.R_TRACE:
                self._report_trace()
                core.ack_trace()
                continue
            if rc == _core.R_TRAP:
                raise self._trap_where()
            if rc == _core.R_NESTED:
                raise self._step_limit(budget)
            return rc, done

    def _statement_text(self, pc: int) -> str:
        """`the derivative statement at f.rasm:12:5 (`g += grad f(x) wrt x`)`."""
        loc = self.program.location(pc) if 0 <= pc < len(self.program.code) else None
        text = linecache.getline(loc[0], loc[1]).strip() if loc else ""
        where = f"{loc[0]}:{loc[1]}:{loc[2]}" if loc else self._pc_text(pc)
        return f"the derivative statement at {where}" + (f" (`{text}`)" if text else "")

    def _trap_where(self) -> Trap:
        """The trap the machine recorded; one inside a nested run names its statement."""
        e = self._trap()
        why, at = self.core.nest_stop
        if why == _core.NEST_STOP_TRAP:
            e.detail += (f" (inside the nested run of {self._statement_text(at)}; the machine "
                         f"cannot go on from here: reset it)")
            e.args = (e.format(),)
        return e

    def _step_limit(self, budget: int) -> StepLimit:
        """StepLimit of a run of `budget` steps: stopped between two instructions (it can go
        on), before a derivative statement with no room left for its nested runs, or inside
        one's nested run (the statement named; the machine cannot go on)."""
        why, at = self.core.nest_stop
        text = f"the step limit of {budget} instructions is used up"
        if why == _core.NEST_STOP_LIMIT:
            inner = self.program.function_at(self.pc)
            return self._make(StepLimit, f"{text} inside the nested runs of this derivative "
                              f"statement (they count: every instruction they run is a step of "
                              f"the run); it stopped in "
                              f"{inner.name if inner else '?'} at {self._where(self.pc)} and "
                              f"cannot go on from there: reset it", at, self.direction, {})
        pc = self.pc
        if 0 <= pc < len(self.program.code) and \
                OPS[int(self.core.code[pc, 0])].family in DERIVATIVE_FAMILIES:
            text += (" (the next instruction is a derivative statement, and its nested runs "
                     "count as steps too)")
        return self._make(StepLimit, text, pc, self.direction, {})

    # ---- a run back must retrace the run it undoes -----------------------------------------

    def _check_return(self) -> None:
        """At the state the last reset made (the start after reset, the end after reset_end)
        the step count must be 0 again: otherwise the run back took another path."""
        if self.core.t != 0 and self._origin != 0 and \
                self.status == ("start" if self._origin > 0 else "end"):
            raise self._divergence()

    def check_restored(self) -> None:
        """Raise PathDivergence if a global that never rounds (int, fixed, lns) differs from
        the state the last reset made: a value converted from a drifting float can do that
        even when the path back was the same.  For a machine back at its origin."""
        if self._origin_words is None:
            return
        now, was = self.core.mem, self._origin_words
        broken = [g for g in self.program.globals if g.type != FLOAT and not
                  np.array_equal(now[g.addr:g.addr + g.size], was[g.addr:g.addr + g.size])]
        if broken:
            vals = {g.name: self.read(g.name) for g in broken}
            F = self.program.fraction_bits
            olds = {g.name: decode(g.type, int(was[g.addr]), F) if g.length is None else
                    decode_array(g.type, was[g.addr:g.addr + g.size], F).tolist()
                    for g in broken}
            said = ", ".join(f"{k} (it is {vals[k]}, it was {olds[k]})" for k in vals)
            raise PathDivergence(
                f"the run back did not restore {said}: "
                f"{'these cells never round' if len(broken) > 1 else 'it never rounds'}, so a "
                "value converted from a float that drifted on the way back changed it. Convert "
                "from a fixed cell, or keep the converted value", values=vals, step=self.core.t,
                direction=self.direction)

    def _divergence(self) -> PathDivergence:
        """The PathDivergence of a run back that reached the origin with t != 0, naming the
        first join (in the order the run back met them) whose direction changed."""
        t = self.core.t
        back = "backward" if self._origin > 0 else "forward"
        where = self._first_changed_join()
        remedy = ("Test an int or fixed cell, or keep the condition's value in a cell and "
                  "test that cell, so that rounding cannot change the way back")
        if where is None:
            return PathDivergence(
                f"running {back}, control took another path than the run it undoes: it "
                f"reached the {self.status} with the step count at {t}, not 0, so the state "
                f"there is not the one it started from. A float value a join's condition "
                f"reads was rounded differently on the way back. {remedy}",
                step=t, direction=self.direction)
        pc, came, cond, vals = where
        program = self.program
        row = [int(x) for x in program.code[pc]]
        d2 = -self._origin
        came_from, went_to = (row[4], pc + d2) if came else (pc + d2, row[4])
        first = "forward" if self._origin > 0 else "backward"
        return self._make(PathDivergence,
                          f"running {back}, control left {self._where(pc)} the other way than "
                          f"it came in: running {first} it came from {self._where(came_from)}, "
                          f"but its condition `{cond}` is now {'false' if came else 'true'} and "
                          f"sent it to {self._where(went_to)}. A float value the condition "
                          f"reads was rounded differently on the way back, and the run went on "
                          f"to the {self.status} on another path (step count {t}, not 0). "
                          f"{remedy}", pc, d2, vals)

    def _where(self, pc: int) -> str:
        """`line 9 (y += a * b)`: an instruction by its source line, else by _pc_text."""
        loc = self.program.location(pc) if 0 <= pc < len(self.program.code) else None
        text = linecache.getline(loc[0], loc[1]).strip() if loc else ""
        if not text:
            return self._pc_text(pc)
        return f"line {loc[1]} (`{text if len(text) <= 60 else text[:57] + '...'}`)"

    def _first_changed_join(self, limit: int = 1_000_000) -> tuple | None:
        """Re-run the round trip from the origin on a second machine, stopping at the joins
        that choose a direction on the way back (joins backward, jumps forward): (pc, came
        on the first leg, the condition's text, its values on the way back) of the first
        whose choice differs from how control came on the first leg; None if none is found
        within `limit` stops."""
        if self._origin_words is None:
            return None
        program = self.program
        d1 = self._origin
        d2 = -d1
        choose = "join" if d2 < 0 else "jmp"
        pcs = [pc for pc in range(len(program.code))
               if OPS[int(program.code[pc, 0])].name == choose]
        if not pcs:
            return None
        m = Machine(program, trace=lambda event: None, native=False, **self._options)
        m.reset() if d1 > 0 else m.reset_end()
        m.core.mem[:program.n_globals] = self._origin_words
        m._origin = 0                               # no check of its own while it searches
        m.set_breakpoints(pcs)
        came: dict[int, bool] = {}
        stops = 0
        try:
            while m.advance(d1) == "break":
                came[m.t] = bool(m.came)
                stops += 1
                if stops > limit:
                    return None
            while m.advance(d2) == "break":
                pc, t = m.pc, m.t
                row = [int(x) for x in program.code[pc]]
                func = program.function_at(pc)
                cond = format_condition(program, func, row[1], row[2], row[3])
                vals = {} if cond_parts(row[1])[0] == CMP_ALWAYS else \
                    m._values([(row[2], cond_parts(row[1])[1]), (row[3], cond_parts(row[1])[1])],
                              func)
                m.step(1, d2)
                jumped = m.pc != pc + d2
                if t - d1 in came and came[t - d1] != jumped:
                    return pc, came[t - d1], cond, vals
                stops += 1
                if stops > 2 * limit:
                    return None
        except Trap:
            return None
        return None

    # ---- breakpoints and watched cells (the debugger's stops, in both directions) ----------

    def set_breakpoints(self, pcs) -> None:
        """Runs stop before an instruction at any of `pcs`, in either direction (a run that
        starts there runs it first).  An empty collection clears them."""
        self.core.set_breakpoints(sorted(set(pcs)))

    def set_watch(self, addrs) -> None:
        """Runs stop after any instruction that changes a cell at one of the absolute
        addresses `addrs` (see `address_of`); empty clears."""
        self.core.set_watch(list(addrs))

    def advance(self, direction: int = +1, max_steps: int | None = None) -> str:
        """Run until something stops the machine and say what: 'boundary' (start or end),
        'break', 'watch' (see `watch_hit`) or 'limit' (max_steps ran).  Traps raise."""
        budget = _UNLIMITED if max_steps is None else min(_count(max_steps, "max_steps"),
                                                           _UNLIMITED)
        rc, _ = self._drive(direction, budget)
        self._check_return()
        return {_core.R_BOUNDARY: "boundary", _core.R_BUDGET: "limit",
                _core.R_BREAK: "break", _core.R_WATCH: "watch"}[rc]

    @property
    def watch_hit(self) -> tuple[int, int]:
        """After a 'watch' stop: (index of the changed cell in set_watch's list, pc of the
        instruction that changed it)."""
        return self.core.watch_hit

    def address_of(self, name: str, index: int = 0) -> int:
        """Absolute address of a global (element `index` of an array)."""
        _, addr, length, _ = self._symbol(name)
        if not 0 <= index < (length or 1):
            raise IndexError(f"{name}[{index}] is out of bounds")
        return addr + index

    # ---- state -------------------------------------------------------------------------

    @property
    def status(self) -> str:
        """'start', 'end' or 'running'."""
        return _STATUS[self.core.status]

    @property
    def t(self) -> int:
        return self.core.t

    @property
    def pc(self) -> int:
        return self.core.pc

    @property
    def direction(self) -> int:
        return self.core.direction

    @property
    def depth(self) -> int:
        return self.core.depth

    @property
    def came(self) -> bool:
        return self.core.came

    @property
    def mem(self) -> np.ndarray:
        """All memory as an int64 array (a live view): globals, constants, frames."""
        return self.core.mem

    @property
    def stats(self) -> dict[str, int]:
        """Instructions run and peak value-stack depth, frame cells and call depth since the
        last reset."""
        return self.core.stats

    def stack(self) -> np.ndarray:
        """The value stack's raw words, bottom first."""
        return self.core.stack()

    def frames(self) -> list[dict[str, Any]]:
        """The control stack, entry function first: function name, pc, fp, direction (fdir)
        and ret_pc of every frame."""
        out = []
        depth = self.core.depth
        for level in range(depth):
            func, fp, pp, ret_pc, fdir = self.core.frame(level)
            pc = self.core.pc if level == depth - 1 else self.core.frame(level + 1)[3]
            out.append(dict(function=self.program.functions[func].name, pc=pc, fp=fp,
                            direction=fdir, ret_pc=ret_pc))
        return out

    # ---- globals by name ---------------------------------------------------------------

    def _symbol(self, name: str) -> tuple[NumType, int, int | None, bool]:
        try:
            return self._symbols[name]
        except KeyError:
            raise UnknownName(f"no global or constant named {name!r}") from None

    def read(self, name: str) -> Any:
        """A global's (or constant's) value: int or float, a numpy array for arrays."""
        return self.read_in(self.core.mem, name)

    def read_in(self, mem: np.ndarray, name: str) -> Any:
        """`read(name)` from the words `mem` (the memory, or a copy of the globals' words:
        rvm.run's Result decodes its values from such a copy when they are first read)."""
        t, addr, length, _ = self._symbol(name)
        F = self.program.fraction_bits
        if length is None:
            return decode(t, int(mem[addr]), F)
        if name in self._stacks:
            size = max(0, min(int(mem[addr]), length - 1))
            return decode_array(t, mem[addr + 1:addr + 1 + size], F)
        return decode_array(t, mem[addr:addr + length], F)

    def size(self, name: str) -> int | None:
        """How many values `read(name)` returns: None for a scalar, the array's length (a
        stack's current size) otherwise.  Lets a caller page through a huge array."""
        t, addr, length, _ = self._symbol(name)
        if length is None:
            return None
        if name in self._stacks:
            return max(0, min(int(self.core.mem[addr]), length - 1))
        return length

    def read_range(self, name: str, start: int, stop: int, raw: bool = False) -> np.ndarray:
        """Values (raw words with `raw`) of the array cells [start, stop) of a global, without
        copying the rest of it: `read(name)[start:stop]` for arrays too large to copy whole."""
        t, addr, length, _ = self._symbol(name)
        n = self.size(name)
        if n is None:
            raise RVMError(f"{name} is not an array")
        start, stop = max(0, start), min(n, stop)
        base = addr + 1 if name in self._stacks else addr
        words = self.core.mem[base + start:base + max(start, stop)]
        return words.copy() if raw else decode_array(t, words, self.program.fraction_bits)

    def read_raw(self, name: str) -> int | np.ndarray:
        """A global's raw word (int), or a copy of an array's words."""
        t, addr, length, _ = self._symbol(name)
        if length is None:
            return int(self.core.mem[addr])
        return self.core.mem[addr:addr + length].copy()

    def write(self, name: str, value: Any) -> None:
        """Store a Python value (number, list or numpy array) into a global."""
        t, addr, length, writable = self._symbol(name)
        if not writable:
            raise RVMError(f"{name} is a constant")
        F = self.program.fraction_bits
        try:
            if length is None:
                if isinstance(value, (list, tuple, np.ndarray)) and np.ndim(value) > 0:
                    raise ValueEncodingError("a single value is expected, not an array")
                word = encode(t, value, F)
            elif name in self._stacks:
                items = np.atleast_1d(np.asarray(value))
                if np.ndim(value) == 0 or len(items) > length - 1:
                    raise ValueEncodingError(f"a stack of at most {length - 1} values (bottom "
                                             f"first) is expected")
                word = np.zeros(length, dtype=np.int64)
                word[0] = len(items)
                if len(items):
                    word[1:1 + len(items)] = encode_array(t, items, F, len(items))
            else:
                if np.ndim(value) == 0:
                    raise ValueEncodingError(f"an array of {length} values is expected")
                word = encode_array(t, value, F, length)
        except (ValueEncodingError, TypeError, OverflowError) as e:
            raise ValueEncodingError(f"{name}: {e}") from None
        self._store(addr, length, word)

    def write_raw(self, name: str, words: int | Any) -> None:
        """Store raw words into a global (an int, or a sequence for an array)."""
        t, addr, length, writable = self._symbol(name)
        if not writable:
            raise RVMError(f"{name} is a constant")
        if length is None:
            w = int(words)
            if not -(1 << 63) <= w < 1 << 63:
                raise ValueEncodingError(f"{name}: {w} is not a 64-bit word")
            self._store(addr, None, w)
        else:
            arr = np.asarray(words, dtype=np.int64)
            if arr.shape != (length,):
                raise ValueEncodingError(f"{name}: expected {length} words, got {arr.shape}")
            self._store(addr, length, arr)

    def _store(self, addr: int, length: int | None, words: Any) -> None:
        n = 1 if length is None else length
        self.core.mem[addr:addr + n] = words
        if self._origin_words is not None and self.core.t == 0 and \
                self.status == ("start" if self._origin > 0 else "end"):
            # a value set at the origin is part of the state a run back must restore
            self._origin_words[addr:addr + n] = self.core.mem[addr:addr + n]

    def inputs(self) -> dict[str, Any]:
        return self._read_all(True)

    def outputs(self) -> dict[str, Any]:
        return self._read_all(False)

    def _read_all(self, inputs: bool) -> dict[str, Any]:
        """The inputs' (or outputs') values by name, as `read` gives them; int and float
        scalars straight from the memory (one-shot runs read these on every call)."""
        plans = self.__dict__.setdefault("_read_plans", {})
        plan = plans.get(inputs)
        if plan is None:
            plan = plans[inputs] = [
                (g.name, 0 if g.length is None and g.type == INT else
                 1 if g.length is None and g.type == FLOAT else 2, g.addr)
                for g in self.program.globals if (g.is_input if inputs else g.is_output)]
        mem = self.core.mem
        fv = mem.view(np.float64)
        out: dict[str, Any] = {}
        for name, kind, addr in plan:
            out[name] = int(mem[addr]) if kind == 0 else float(fv[addr]) if kind == 1 else \
                self.read(name)
        return out

    # ---- traps and traces --------------------------------------------------------------

    def format_instruction(self, pc: int | None = None) -> str:
        return format_instruction(self.program, self.pc if pc is None else pc)

    def _value(self, word: int, t: NumType | None, func: Function | None) -> Any:
        """Current value of the cell an operand names in the top frame (raw if untyped)."""
        kind, *rest = self.core.resolve(word)
        if kind == "len":
            return rest[0]
        if kind == "bounds":
            return "<out of bounds>"
        w = int(self.core.mem[rest[0]])
        if t is None:
            t = operand_type(self.program, func, word)
        return decode(t, w, self.program.fraction_bits) if t is not None else w

    def _values(self, pairs, func: Function | None) -> dict[str, Any]:
        """Values read by name; literals (interned constants) say nothing and are left out."""
        out = {}
        for w, t in pairs:
            if operand_parts(w)[0] == MODE_G and self._is_literal(operand_parts(w)[1]):
                continue
            out[describe_operand(self.program, func, w)] = self._value(w, t, func)
        return out

    def _is_literal(self, addr: int) -> bool:
        return any(":" in c.name and c.addr == addr for c in self.program.consts)

    def _make(self, cls: type[Trap], detail: str, pc: int, direction: int,
              values: dict[str, Any]) -> Trap:
        at = pc if 0 <= pc < len(self.program.code) else None
        return cls(detail, pc=pc, instruction=format_instruction(self.program, pc) if at is not None
                   else "", location=self.program.location(pc) if at is not None else None,
                   step=self.core.t, direction=direction, values=values)

    def _report_trace(self) -> None:
        pc = self.pc
        tr = self.program.traces[int(self.program.code[pc, 1])]
        func = self.program.function_at(pc)
        items = None
        if tr.names is None and tr.lengths is None:
            values = self._values([(w, None) for w in tr.operands], func)
        else:
            lengths = tr.lengths or [None] * len(tr.operands)
            names = tr.names or [describe_operand(self.program, func, w) for w in tr.operands]
            items = [(name, self._value(w, None, func) if n is None else
                      self._array_value(w, n, func))
                     for w, n, name in zip(tr.operands, lengths, names)]
            values = dict(items)
        self.trace_handler(TraceEvent(tr.message, values, pc, self.core.t, self.direction,
                                      tr.style, items))

    def _array_value(self, word: int, length: int, func: Function | None) -> Any:
        """The value of a whole array (a list) or stack (its items, bottom first) that an
        array word names in the top frame."""
        name, t = _array_name(self.program, func, word)
        mode, q = operand_parts(word)
        if mode == MODE_P:
            addr, length = self.core.param(self.core.depth - 1, q)
            stack = bool(func and 0 <= q < len(func.params) and func.params[q].stack)
        else:
            addr = self.core.resolve(word)[1]
            owner = [g for g in self.program.globals if g.addr == q] if mode == MODE_G else \
                [v for v in (func.locals if func else []) if v.offset == q]
            stack = bool(owner and owner[0].stack)
        words = self.core.mem[addr:addr + length]
        if stack:
            size = max(0, min(int(words[0]), length - 1))
            words = words[1:1 + size]
        return decode_array(t if t is not None else INT, words, self.program.fraction_bits).tolist()

    def _trap(self) -> Trap:
        code, pc, op_code, e, tv = self.core.trap
        program = self.program
        func = program.function_at(pc)
        row = [int(w) for w in self.core.code[pc]]       # what the machine ran
        ran_as = OPS[op_code]
        instr = OPS[row[0]]
        D = self.core.direction
        way = "" if e > 0 else f" (run backward as {ran_as.name})" if ran_as != instr else \
            " (run backward)"
        where_call = tv[3] >= _core.IN_CALL and instr.name in ("call", "uncall")

        if code == _core.T_COMEFROM:
            return self._come_from(pc, row, e, tv, func)
        if code == _core.T_ANCILLA:
            if ran_as.name in ("end", "begin"):
                return self._ancilla_at_return(pc, e, tv)
            val = self._values([(row[1], None)], func)
            name = next(iter(val))
            hint = _FLOAT_RESIDUE if operand_type(program, func, row[1]) == FLOAT else ""
            return self._make(AncillaError, f"{ran_as.name} of {name}: the ancilla is not zero "
                              f"(it is {val[name]}){way}{hint}", pc, D, val)
        if code == _core.T_POP:
            val = self._values([(row[1], None)], func)
            name = next(iter(val))
            t = operand_type(program, func, row[1])
            top = int(self.core.stack()[-1])
            val["top of stack"] = decode(t, top, program.fraction_bits) if t is not None else top
            return self._make(PopError, f"pop into {name}, which is not zero (it is "
                              f"{val[name]}){way}", pc, D, val)
        if code == _core.T_UNDERFLOW:
            return self._make(StackUnderflow, f"pop from the empty value stack{way}", pc, D, {})
        if code == _core.T_OVERFLOW:
            return self._overflow(pc, D, tv, row)
        if code == _core.T_ALIAS:
            if tv[3] in (_core.IDX_ALIAS, _core.IDX_RETURN):
                return self._index_alias(pc, D, tv, row, func, instr, way)
            if where_call:
                return self._call_alias(pc, D, tv, row, func)
            pairs = [(row[s], None) for s in range(1, len(instr.operands) + 1)
                     if instr.operands[s - 1] in ("y", "a")]
            names = [describe_operand(program, func, w) for w, _ in pairs]
            return self._make(AliasError, f"operands {' and '.join(dict.fromkeys(names))} are "
                              f"the same cell: an update's target may not be one of its "
                              f"sources{way}", pc, D, self._values(self._typed(instr, row), func))
        if code == _core.T_READONLY:
            return self._read_only(pc, D, tv, row, func)
        if code == _core.T_BOUNDS:
            return self._bounds(pc, D, tv, row, func, where_call)
        if code in (_core.T_DIV0, _core.T_DOMAIN, _core.T_RANGE):
            cls = {_core.T_DIV0: DivisionByZero, _core.T_DOMAIN: DomainError,
                   _core.T_RANGE: RangeError}[code]
            vals = self._values(self._typed(ran_as, row), func)
            reason = self._arith_reason(ran_as, row) or {
                DivisionByZero: "division by zero", DomainError: "argument outside the domain",
                RangeError: "result out of range"}[cls]
            return self._make(cls, f"{reason}{way}", pc, D, vals)
        if code == _core.T_ASSERT:
            return self._assertion(pc, D, row, func)
        if code == _core.T_BYTECODE and tv[3] in _NEST_WHY:
            return self._make(NestingError, _NEST_WHY[tv[3]](tv) + way, pc, D, {})
        if code == _core.T_BYTECODE and tv[3] == _core.NO_KERNEL_CASE:
            return self._make(BytecodeTrap, f"{ran_as.name} is a loop-kernel opcode "
                              f"(KERNEL_OPS) but kernel_row has no case for it: refused, "
                              f"nothing changed (rvm/_kernels.pxi)", pc, D, {})
        if code == _core.T_BYTECODE and tv[3] == _core.NO_DISPATCH_CASE:
            return self._make(BytecodeTrap, f"{ran_as.name} has no case in the dispatch loop "
                              f"(the extension was built without it: rebuild, pip install -e "
                              f"., or give it C semantics in isa/table.py): refused, nothing "
                              f"changed", pc, D, {})
        if code == _core.T_BYTECODE:
            return self._make(BytecodeTrap, f"{instr.name} reached running "
                              f"{'forward' if e > 0 else 'backward'}: control cannot get here "
                              f"in a verified program", pc, D, {})
        return self._make(BytecodeTrap, f"unknown trap code {code}", pc, D, {})

    def _assertion(self, pc: int, D: int, row: list[int], func) -> Trap:
        """A false assert: its message when it has one (msg operand k > 0: traces[k - 1]),
        with the values it names (the message's operands, else the two compared cells) under
        the message's names, else under their operands' names."""
        program = self.program
        cc, a, b, msg = row[1], row[2], row[3], row[4]
        t = cond_parts(cc)[1]
        if not 0 < msg <= len(program.traces):
            cond = format_condition(program, func, cc, a, b)
            return self._make(AssertionTrap, f"assertion {cond} is false", pc, D,
                              self._values([(a, t), (b, t)], func))
        tr = program.traces[msg - 1]
        words = list(tr.operands) or [a, b]
        names = list(tr.names or [])
        values: dict[str, Any] = {}
        for j, w in enumerate(words):
            wt = t if w in (a, b) else None
            name = names[j] if j < len(names) and names[j] else None
            if name is None:
                if operand_parts(w)[0] == MODE_G and self._is_literal(operand_parts(w)[1]):
                    continue
                name = describe_operand(program, func, w)
            values[name] = self._value(w, wt, func)
        return self._make(AssertionTrap, tr.message, pc, D, values)

    def _typed(self, op: Op, row: list[int]) -> list[tuple[int, NumType | None]]:
        types = op.operand_types
        return [(row[s], types[s - 1]) for s in range(1, len(op.operands) + 1)
                if op.operands[s - 1] in ("y", "a")]

    def _arith_reason(self, op: Op, row: list[int]) -> str | None:
        """The reference arithmetic's own explanation, computed from the unchanged operands."""
        if op.family in DERIVATIVE_FAMILIES:    # no reference arithmetic: the float add law's
            how = "plus" if op.family in ("addgrad", "addjvp") else "minus"
            return (f"{op.name}: the derivative, or the target {how} it, is not a finite float "
                    f"(inf or nan)")
        vals = []
        for s, kind in enumerate(op.operands, start=1):
            if kind in ("y", "a"):
                kind_, *rest = self.core.resolve(row[s])
                if kind_ == "bounds":
                    return None
                vals.append(rest[0] if kind_ == "len" else int(self.core.mem[rest[0]]))
            else:
                vals.append(row[s])
        try:
            execute(op, vals, self.program.fraction_bits)
        except ArithTrap as e:
            return f"{op.name}: {e}"
        except (ValueError, OverflowError) as e:
            return f"{op.name}: {e}"
        return None

    def _come_from(self, pc: int, row: list[int], e: int, tv: tuple, func) -> Trap:
        program = self.program
        cond, came = bool(tv[0]), bool(tv[1])
        instr = OPS[row[0]].name
        partner = row[4]
        cc, t = row[1], cond_parts(row[1])[1]
        text = format_condition(program, func, cc, row[2], row[3])
        other = "jmp" if instr == "join" else "join"
        here = self._where(pc)
        # e is the way this code runs; under uncall it is the opposite of the machine's run
        if e != self.core.direction:
            runs = (" (this code runs backward: it is uncalled)" if e < 0 else
                    " (this code runs forward: it is uncalled by a run going backward)")
        else:
            runs = " on the way back" if e < 0 else ""
        prev = pc - e                      # where falling through comes from, this way
        if cond_parts(cc)[0] == CMP_ALWAYS:
            says = (f"it has no condition, so control must always arrive by the jump from the "
                    f"{other} at {self._where(partner)}")
        elif cond:
            says = (f"its condition `{text}` is true, so control must arrive by the jump from "
                    f"the {other} at {self._where(partner)}")
        else:
            says = (f"its condition `{text}` is false, so control must fall through from "
                    f"{self._where(prev)}")
        if came:
            actual = f"it came by the jump from {self._where(partner)}"
        elif prev == partner:
            actual = (f"it fell through from {self._where(prev)} without taking that jump "
                      f"(the code between them is empty; that {other}'s own condition sent "
                      "control this way, so the two conditions disagree)")
        else:
            actual = f"it fell through from {self._where(prev)}"
        vals = {} if cond_parts(cc)[0] == CMP_ALWAYS else \
            self._values([(row[2], t), (row[3], t)], func)
        return self._make(ComeFromError, f"come-from check failed at {here}{runs}: {says}, "
                          f"but {actual}", pc, self.core.direction, vals)

    def _pc_text(self, pc: int) -> str:
        """`top (pc 4)`, `the entry of main (pc 0)` or `pc 7`."""
        if pc in self.program.labels:
            return f"{self.program.labels[pc]} (pc {pc})"
        for f in self.program.functions:
            if pc in (f.begin, f.end):
                return f"the {'entry' if pc == f.begin else 'exit'} of {f.name} (pc {pc})"
        return f"pc {pc}"

    def _ancilla_at_return(self, pc: int, e: int, tv: tuple) -> Trap:
        offset, word, fi = tv[0], tv[1], tv[2]
        f = self.program.functions[fi]
        name, t = _local_name(f, offset)
        value = decode(t, word, self.program.fraction_bits) if t is not None else word
        how = "returns" if e > 0 else "returns (running backward, at its begin)"
        return self._make(AncillaError, f"{f.name} {how} with local {name} = {value}; every "
                          f"local must be zero when its frame ends"
                          f"{_FLOAT_RESIDUE if t == FLOAT else ''}", pc, self.core.direction,
                          {name: value})

    def _overflow(self, pc: int, D: int, tv: tuple, row: list[int]) -> Trap:
        kind, cap = tv[0], tv[1]
        if kind == _core.OV_VALUE_STACK:
            what = f"the value stack is full ({cap} cells)"
        elif kind == _core.OV_CONTROL_STACK:
            what = f"the call depth limit of {cap} frames is reached"
        elif kind == _core.OV_FRAMES:
            what = (f"frame memory is full ({cap} cells, "
                    f"{self.core.frame_top - self.program.n_static} in use)")
        else:
            what = f"the parameter table is full ({cap} entries)"
        return self._make(StackOverflow, what, pc, D,
                          {"depth": self.core.depth, "stack": self.core.sp})

    def _call_site(self, row: list[int]):
        site = self.program.callsites[row[1]]
        return site, self.program.functions[site.func]

    def _arg_name(self, func, arg) -> str:
        return (describe_operand(self.program, func, arg.word) if arg.length is None
                else _array_name(self.program, func, arg.word)[0])

    def _call_alias(self, pc: int, D: int, tv: tuple, row: list[int], func) -> Trap:
        site, callee = self._call_site(row)
        i, j = tv[0], tv[1]
        ni, nj = self._arg_name(func, site.args[i]), self._arg_name(func, site.args[j])
        written = [callee.params[k].name for k in (i, j) if callee.params[k].written]
        return self._make(AliasError, f"arguments {i} ({ni}) and {j} ({nj}) of {callee.name} "
                          f"overlap at {self._address_name(tv[2])}, and {callee.name} writes "
                          f"{' and '.join(written)}", pc, D,
                          {callee.params[i].name: ni, callee.params[j].name: nj})

    def _index_alias(self, pc: int, D: int, tv: tuple, row: list[int], func, instr: Op,
                     way: str) -> Trap:
        """A cell used as an index is written by the same instruction or call: the inverse
        would select another element."""
        if tv[3] == _core.IDX_RETURN:
            caller_pc = self.core.frame(self.core.depth - 1)[3]
            site, callee = self._call_site([int(w) for w in self.core.code[caller_pc]])
            caller = self.program.function_at(caller_pc)
            arg = self._arg_name(caller, site.args[tv[0]])
            now = "is out of bounds" if tv[2] < 0 else f"names {self._address_name(tv[2])}"
            return self._make(AliasError, f"{callee.name} changed the index of its argument "
                              f"{arg} (bound to {self._address_name(tv[1])}, now the index "
                              f"{now}){way}: undoing the call would use another cell", pc, D, {})
        if instr.name in ("call", "uncall"):
            site, callee = self._call_site(row)
            j, i = tv[0], tv[1]
            return self._make(AliasError, f"the index of argument {i} "
                              f"({self._arg_name(func, site.args[i])}) is "
                              f"{self._address_name(tv[2])}, which {callee.name} writes through "
                              f"parameter {callee.params[j].name}", pc, D, {})
        xop = describe_operand(self.program, func, row[tv[0]])
        cell = self._address_name(tv[1])
        return self._make(AliasError, f"{cell} is written by this instruction but is the index "
                          f"of {xop}: run backward it would select another element{way}",
                          pc, D, self._values(self._typed(instr, row), func))

    def _address_name(self, addr: int) -> str:
        if addr < self.program.n_static:
            return _static_name(self.program, addr)[0]
        return f"frame cell {addr}"

    def _read_only(self, pc: int, D: int, tv: tuple, row: list[int], func) -> Trap:
        site, callee = self._call_site(row)
        i, addr = tv[0], tv[1]
        cell = _static_name(self.program, addr)[0]
        return self._make(ReadOnlyError, f"constant {cell} is bound to parameter "
                          f"{callee.params[i].name} of {callee.name}, which {callee.name} "
                          f"writes", pc, D, {callee.params[i].name: cell})

    def _bounds(self, pc: int, D: int, tv: tuple, row: list[int], func, in_call: bool) -> Trap:
        xi, index, length = tv[0], tv[1], tv[2]
        program = self.program
        if xi < 0:          # an array argument longer than the array bound to the parameter
            site, callee = self._call_site(row)
            k = tv[3] - _core.IN_CALL
            name = self._arg_name(func, site.args[k])
            return self._make(BoundsError, f"argument {k} of {callee.name} takes {index} cells "
                              f"of {name}, which has {length}", pc, D, {f"len({name})": length})
        x = program.xtab[xi]
        base = _array_name(program, func, x.base)[0]
        iname = describe_operand(program, func, x.index)
        ctx = ""
        if in_call:
            site, callee = self._call_site(row)
            ctx = f" (argument {tv[3] - _core.IN_CALL} of {callee.name})"
        return self._make(BoundsError, f"index {iname} = {index} is outside {base}[0..{length})"
                          f"{ctx}", pc, D, {iname: index, f"len({base})": length})
