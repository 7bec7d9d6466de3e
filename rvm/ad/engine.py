"""Derivatives of a program's output with respect to its inputs, by running it (docs/ad.md).

adjoint (reverse mode), NiLang's algorithm with no tape: run forward; seed the adjoint of the
loss cell with 1; run backward.  Every instruction's inverse uncomputes the values and its
transposed rule (isa/derivatives.py) accumulates adjoints, so at the start the values are the
inputs again and the adjoints are the gradient.  Memory is the dual arrays beside the cells:
it does not grow with the number of steps.

tangent (forward mode, JVP): one forward run with a tangent per cell.

tangent over adjoint (Hessian): a forward run with tangents v, then the adjoint sweep that
also carries the tangents of the adjoints: at the start they are H v.  The full Hessian is one
such pass per input cell.

Before trusting a gradient the engine checks the ancillas (check_ancillas=True): the forward
run carries random tangents on the inputs, and a cell that is released (a local at return,
an ancilla at `free`, a cell overwritten by `pop`) with a nonzero tangent means the program
is zero there but not as a function, so its derivative is not the derivative of what it
computes (ReleasedTangentWarning, or an error with strict=True).
"""
from __future__ import annotations

import os
import re
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from isa.derivatives import DIFFERENTIABLE
from isa.types import TYPE_NAMES, NumType

from .. import _core, oneshot
from ..api import (
    BatchError,
    assemble,
    batch_failed,
    batch_row,
    batch_words,
    chunks,
    in_threads,
    out_array,
    split_batch,
)
from ..errors import RVMError
from ..machine import Machine, UnknownName
from ..program import Program
from ..values import ValueEncodingError, decode, decode_array
from . import native_lanes, native_tangent

__all__ = ["BatchError", "Derivatives", "NotDifferentiable", "NonFiniteDerivative",
           "ReleasedTangentWarning",
           "ReleasedTangentError", "derivatives", "grad", "jvp", "hessian", "hvp", "grad_fn",
           "GradFn"]

RELEASE_TOLERANCE = 1e-8      # a released tangent above this (inputs' tangents ~ N(0, 1)) counts
FLOAT, INT = NumType.FLOAT, NumType.INT


class NotDifferentiable(RVMError, ValueError):
    """A loss or input that has no derivative: an int cell, or not a global."""


class NonFiniteDerivative(RVMError, ArithmeticError):
    """A derivative came out inf or nan (e.g. sqrt at 0); carries where it first happened."""

    def __init__(self, message: str, pc: int = -1, location: tuple | None = None):
        self.pc = pc
        self.location = location
        super().__init__(message)


class ReleasedTangentWarning(UserWarning):
    """An ancilla left scope with a nonzero tangent: see the module docstring."""


class NonDifferentiablePathWarning(UserWarning):
    """The loss depends on a wrt value through a cell that carries no derivative (an int
    conversion): the gradient leaves that dependence out (rvm/ad/paths.py)."""


class NonDifferentiablePath(RVMError):
    """NonDifferentiablePathWarning raised as an error (strict=True)."""


class ReleasedTangentError(RVMError):
    """ReleasedTangentWarning raised as an error (strict=True)."""


@dataclass(frozen=True)
class Cell:
    """A differentiable run of global cells: a scalar, an array or one element."""
    name: str             # as the user wrote it: "x", "x[2]"
    addr: int
    size: int
    shape: tuple[int, ...]

    def names(self) -> list[str]:
        if not self.shape:
            return [self.name]
        return [f"{self.name}[{k}]" for k in range(self.size)]


@dataclass
class Derivatives:
    """What a differentiated run produced.

    value      the loss (`of`) at the end of the forward run, or None
    outputs    every output global at the end of the forward run
    gradient   d value / d wrt, per wrt name (np.float64 for a scalar, an array for an array)
    tangent    forward mode: the tangent of every differentiable output, per name
    hessian    (n, n) over the wrt cells flattened in order (wrt_cells names them)
    hvp        H v for the direction v of `hvp`, per wrt name
    drift      globals whose words differ from the start after the backward run, with the
               largest difference (float programs drift by rounding; fixed ones never do)
    released   the ancilla check: {'count', 'max', 'pc', 'location'} or None if clean
    steps      instructions of one forward run
    """
    value: float | None = None
    gradient: dict[str, Any] | None = None
    tangent: dict[str, Any] | None = None
    hessian: np.ndarray | None = None
    hvp: dict[str, Any] | None = None
    cells: list[Cell] = field(default_factory=list, repr=False)
    _end: tuple | None = field(default=None, repr=False)   # (machine, globals' words at the end)
    drift: dict[str, float] = field(default_factory=dict)
    released: dict[str, Any] | None = None
    steps: int = 0

    @property
    def outputs(self) -> dict[str, Any]:
        """Every output global at the end of the forward run (decoded on first use)."""
        if self._end is None:
            return {}
        m, words = self._end
        return {g.name: decode_global(g, words, m.program.fraction_bits)
                for g in m.program.globals if g.is_output}

    @property
    def wrt_cells(self) -> list[str]:
        """Names of the wrt cells in the order of the Hessian's rows: x, a[0], a[1], ..."""
        return [n for c in self.cells for n in c.names()]

    def __getstate__(self) -> dict:
        """Pickled by value and versioned (rvm.interop.pickling): the figures and the end
        state's output words, not the machine."""
        from ..interop.pickling import derivatives_state
        return derivatives_state(self)

    def __setstate__(self, state: dict) -> None:
        from ..interop.pickling import set_derivatives_state
        set_derivatives_state(self, state)


_ELEMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[\s*(\d+)\s*\])?\s*$")


def resolve(m: Machine, name: str, what: str) -> Cell:
    """The differentiable global cell(s) `name` ("x" or "x[3]") names; NotDifferentiable else."""
    match = _ELEMENT.match(name)
    if not match:
        raise NotDifferentiable(f"{what} {name!r}: expected a global name, or name[index]")
    base, index = match.group(1), match.group(2)
    g = next((g for g in m.program.globals if g.name == base), None)
    if g is None:
        known = ", ".join(g.name for g in m.program.globals) or "none"
        raise NotDifferentiable(f"{what} {base!r} is not a global of the program "
                                f"(the globals are: {known})")
    if g.type not in DIFFERENTIABLE:
        raise NotDifferentiable(
            f"{what} {base!r} is an {TYPE_NAMES[g.type]} cell: only float, fixed and lns cells "
            "have derivatives (int values are not differentiable)")
    if index is not None:
        if g.length is None:
            raise NotDifferentiable(f"{what} {name!r}: {base} is not an array")
        if int(index) >= g.length:
            raise NotDifferentiable(f"{what} {name!r}: index out of bounds (length {g.length})")
        return Cell(name.replace(" ", ""), g.addr + int(index), 1, ())
    if g.length is None:
        return Cell(base, g.addr, 1, ())
    return Cell(base, g.addr, g.length, (g.length,))


def _as_program(program: Program | str | os.PathLike) -> Program:
    return program if isinstance(program, Program) else assemble(program)


def _wrt_list(wrt: str | Sequence[str]) -> list[str]:
    if isinstance(wrt, str):
        wrt = [w for w in wrt.split(",") if w.strip()]
    else:
        try:
            wrt = list(wrt)
        except TypeError:
            wrt = [wrt]
        if not all(isinstance(w, str) for w in wrt):
            raise TypeError("wrt must be a global's name, names separated by commas or a "
                            f"sequence of names, not {wrt!r}")
    return [w.strip() for w in wrt]


def _loss_name(of: Any) -> None:
    """A TypeError unless `of` is a global's name (or None where no loss is asked)."""
    if of is not None and not isinstance(of, str):
        raise TypeError(f"of must be a global's name, not {of!r}")


def _seed_vector(what: str, vectors: Mapping[str, Any], cells: Sequence[Cell]) -> np.ndarray:
    """The vectors ({wrt name: a number, or an array of the cell's shape}) of `cells`, flat,
    in their order; a named error for a name with no vector (UnknownName, a KeyError) or one
    that does not fit (ValueEncodingError)."""
    parts = []
    for c in cells:
        if c.name not in vectors:
            raise UnknownName(f"{what} gives no vector for wrt {c.name!r}")
        try:
            parts.append(np.broadcast_to(np.asarray(vectors[c.name], dtype=float),
                                         c.shape or ()).ravel())
        except (TypeError, ValueError) as e:
            raise ValueEncodingError(f"{what}[{c.name!r}] = {vectors[c.name]!r} does not fit "
                                     f"{c.name} (shape {c.shape or ()}): {e}") from None
    return np.concatenate(parts) if parts else np.zeros(0)


def _shaped(flat: np.ndarray, cell: Cell):
    """A cell's derivative from a float64 array: np.float64 for a scalar (an element of a
    float64 array is one), a fresh array for an array."""
    return flat[0] if not cell.shape else flat.reshape(cell.shape).copy()


class _Runner:
    """One machine reused for the passes of a differentiation (and across grad_fn calls)."""

    def __init__(self, program: Program, of: str | None, wrt: Sequence[str],
                 machine: Machine | None = None):
        self.program = program
        self.m = machine or Machine(program)
        self.of = resolve(self.m, of, "the loss (of)") if of is not None else None
        if self.of is not None and self.of.size != 1:
            raise NotDifferentiable(f"the loss {of!r} is an array: name one element, e.g. "
                                    f"{of}[0], or add the elements into a scalar output")
        self.wrt = [resolve(self.m, w, "wrt") for w in wrt]
        seen: set[int] = set()
        for c in self.wrt:
            cells = set(range(c.addr, c.addr + c.size))
            if cells & seen:
                raise NotDifferentiable(f"wrt {c.name!r} names a cell twice")
            seen |= cells
        self.n = sum(c.size for c in self.wrt)
        self.core = self.m.core
        self.n_globals = program.n_globals
        if self.of is not None:
            self.of_type = next(g.type for g in program.globals
                                if g.addr <= self.of.addr < g.addr + g.size)
        self._fast: tuple | None = None

    # -- the one-call pass in the core (Core.gradient) -----------------------------------
    def fast(self, inputs: Mapping[str, Any] | None, tangent: np.ndarray | None = None) -> bool:
        """Reset, forward, adjoint sweep (with `tangent`: also the adjoints' tangents) in one
        core call; then self.g is the gradient, self.h the Hessian-vector product and
        self.words the globals' words at the start, the end and back at the start.  False
        when the general path must run (inputs the core does not store, a trap, a trace, a
        non-finite derivative); the general path reports it."""
        if inputs is not None and type(inputs) is not dict:
            return False            # (a dict subclass or other Mapping: the general path reads it)
        cells, def_addrs, def_words, wrt_addrs = self._fast_args()
        if tangent is not None and tangent.shape != self.h.shape:
            self.h = np.zeros(tangent.shape)        # (columns, n): one pass per row
        return self.core.gradient(self.of.addr, inputs or {}, cells, def_addrs, def_words,
                                  wrt_addrs, self.g, self.words, tangent, self.h) == 0 and \
            self.core.t == 0 and self._restored()

    def _restored(self) -> bool:
        """After a fast pass: every global that never rounds came back (else the general
        path runs again and raises PathDivergence)."""
        w, at = self.words, self._exact_addrs()
        return bool(np.array_equal(w[0, at], w[2, at]))

    def _exact_addrs(self) -> np.ndarray:
        """Addresses of the globals that never round (int, fixed, lns)."""
        if getattr(self, "_exact", None) is None:
            self._exact = np.array([g.addr + k for g in self.program.globals
                                    if g.type != FLOAT for k in range(g.size)], dtype=np.int64)
        return self._exact

    def _fast_args(self) -> tuple:
        """(input cells, default addresses, default words, wrt addresses) of the fast pass."""
        if self._fast is None:
            prog = self.program
            addrs, words = self.m._defaults()
            # inputs the core stores itself: int and float scalars, float arrays
            cells = {g.name: (g.addr, 2 if g.length is not None else int(g.type == FLOAT),
                              g.length or 1) for g in prog.globals
                     if g.is_input and (g.type == FLOAT or (g.type == INT and g.length is None))}
            self._fast = (cells, addrs.astype(np.int64), words,
                          np.array([c.addr + k for c in self.wrt for k in range(c.size)],
                                   dtype=np.int64))
            self.g, self.h = np.zeros(self.n), np.zeros(self.n)
            self.words = np.zeros((3, self.n_globals), dtype=np.int64)
        return self._fast

    def grad_call(self) -> Callable[[Mapping[str, Any] | None], dict[str, Any] | None]:
        """The gradient pass of `fast` bound into one core object: call(inputs) -> {wrt name:
        gradient} (fresh values, as _split makes them), or None for the general path."""
        cells, def_addrs, def_words, wrt_addrs = self._fast_args()
        parts, at = [], 0
        for c in self.wrt:
            parts.append((c.name, at, tuple(c.shape) if c.shape else None))
            at += c.size
        return _core.GradCall(self.core, self.of.addr, cells, def_addrs, def_words, wrt_addrs,
                              self.g, self.words, parts, self._exact_addrs())

    def flat_call(self) -> Any:
        """The fast path of GradFn.flat (a _core.FlatCall), or None when a wrt cell is not a
        float cell (a fixed one would need its rounding) or the loss is not float or fixed."""
        if any(self.m._symbols[c.name.partition("[")[0]][0] != FLOAT for c in self.wrt) or \
                self.of_type not in (FLOAT, NumType.FIXED):
            return None
        cells, def_addrs, def_words, wrt_addrs = self._fast_args()
        # the defaults of the wrt cells are left out: x's words go there after them
        keep = ~np.isin(def_addrs, wrt_addrs)
        return _core.FlatCall(self.core, self.of.addr, self.of_type == FLOAT,
                              np.ascontiguousarray(def_addrs[keep]),
                              np.ascontiguousarray(def_words[keep]), wrt_addrs, self.words,
                              self._exact_addrs())

    def fast_loss(self) -> float:
        """The loss at the end of the last fast pass's forward run."""
        return float(decode(self.of_type, int(self.words[1][self.of.addr]),
                            self.program.fraction_bits))

    # -- passes ------------------------------------------------------------------------
    def start(self, mode: int, inputs: Mapping[str, Any] | None) -> None:
        self.core.set_ad(mode)
        self.m.reset(inputs)          # also zeroes the duals used before

    def globals_words(self) -> np.ndarray:
        return self.core.mem[:self.n_globals].copy()

    def loss(self) -> float:
        return float(decode(self.of_type, int(self.core.mem[self.of.addr]),
                            self.program.fraction_bits))

    def seed_tangents(self, v: np.ndarray) -> None:
        tan = self.core.tangent
        at = 0
        for c in self.wrt:
            tan[c.addr:c.addr + c.size] = v[at:at + c.size]
            at += c.size

    def gather(self, arr: np.ndarray) -> np.ndarray:
        return np.concatenate([arr[c.addr:c.addr + c.size] for c in self.wrt]) if self.wrt \
            else np.zeros(0)

    def forward(self, max_steps: int | None) -> None:
        self.m.run(+1, max_steps)

    def backward(self, mode: int, max_steps: int | None) -> None:
        """Seed the loss adjoint and sweep back to the start."""
        core = self.core
        core.set_ad(mode)
        core.adjoint[self.of.addr] = 1.0
        self.m.run(-1, max_steps)

    def events(self) -> dict:
        return self.core.ad_events

    def location(self, pc: int) -> tuple | None:
        return self.program.location(pc) if pc >= 0 else None

    def where(self, pc: int) -> str:
        loc = self.location(pc)
        text = self.m.format_instruction(pc) if pc >= 0 else "?"
        return f"{loc[0]}:{loc[1]}:{loc[2]}: `{text}`" if loc else f"pc {pc}: `{text}`"

    def check_nonfinite(self, values: np.ndarray, what: str) -> None:
        if np.all(np.isfinite(values)):
            return
        ev = self.events()
        pc = ev["nonfinite_pc"]
        at = f" (first at {self.where(pc)})" if pc >= 0 else ""
        raise NonFiniteDerivative(f"the {what} is not finite{at}: a local derivative is "
                                  "infinite there (e.g. sqrt or log at 0, a division by 0)",
                                  pc, self.location(pc))


def _release_report(r: _Runner, strict: bool, tolerance: float) -> dict | None:
    ev = r.events()
    if not ev["released"] or not ev["released_max"] > tolerance:
        return None
    pc = ev["released_pc"]
    report = dict(count=ev["released"], max=ev["released_max"], pc=pc, location=r.location(pc))
    msg = (f"an ancilla was released with a nonzero tangent (|t| = {ev['released_max']:.3g}, "
           f"first at {r.where(pc)}): its value is zero at this input but not as a function of "
           "the inputs, so the gradient is not the derivative of the program's outputs. "
           "Uncompute it with the same operations that computed it (docs/ad.md).")
    if strict:
        raise ReleasedTangentError(msg)
    warnings.warn(msg, ReleasedTangentWarning, stacklevel=4)
    return report


def _check_paths(prog: Program, of: str, wrt: list[str], strict: bool) -> None:
    """Warn (strict: raise) when the loss depends on wrt through a cell that carries no
    derivative, so that a gradient missing that dependence is never silent."""
    from .paths import lossy_paths

    found = lossy_paths(prog, of, wrt)
    if not found:
        return
    msg = found[0].describe(of, wrt)
    if len(found) > 1:
        msg += f"; {len(found) - 1} more such conversion{'s' if len(found) > 2 else ''} at " + \
            ", ".join(p.where for p in found[1:4]) + (", ..." if len(found) > 4 else "")
    if strict:
        raise NonDifferentiablePath(msg + " (strict)")
    warnings.warn(msg, NonDifferentiablePathWarning, stacklevel=_user_level())


def _user_level() -> int:
    """The stacklevel of the first frame outside rvm, so a warning names the user's line."""
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    level, frame = 1, sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here):
        level, frame = level + 1, frame.f_back
    return level


def derivatives(program: Program | str | os.PathLike, of: str | None = None,
                wrt: str | Sequence[str] = (), inputs: Mapping[str, Any] | None = None, *,
                gradient: bool = True, hessian: bool = False,
                tangents: Mapping[str, Any] | None = None,
                direction: Mapping[str, Any] | None = None, check_ancillas: bool = True,
                strict: bool = False, max_steps: int | None = None, seed: int = 0,
                machine: Machine | None = None, native: bool | None = None,
                _runner: _Runner | None = None) -> Derivatives:
    """Differentiate `program` run from `inputs` (see the module docstring).

    of         the loss: a float/fixed global (or one element, "out[2]")
    wrt        input globals (names, or one comma-separated string)
    gradient   compute d of / d wrt (adjoint mode)
    hessian    also the full Hessian over the wrt cells (one tangent-over-adjoint pass each)
    direction  {wrt name: vector}: also the Hessian-vector product H v
    tangents   {input name: tangent}: forward mode; the tangents of the outputs come back
    machine    a Machine of `program` to reuse (its state is reset); calls that share one
               machine from several threads take turns (a lock per machine)
    native     the tangent modes (tangents, hessian, direction) as native code: None from the
               program's rvm.ad.native_tangent.NATIVE_AFTER-th such call, True now (or
               raise), False never; results are the interpreter's (docs/ad.md)
    """
    _loss_name(of)
    if machine is not None:
        with machine.__dict__.setdefault("_ad_lock", threading.RLock()):
            return _derivatives(program, of, wrt, inputs, gradient, hessian, tangents,
                                direction, check_ancillas, strict, max_steps, seed, machine,
                                _runner, native)
    if _runner is None and isinstance(program, Program):
        # the one-shot calls on one Program reuse this thread's machine (rvm/oneshot.py)
        slot = oneshot.acquire(program, {}, "ad")
        try:
            return _derivatives(program, of, wrt, inputs, gradient, hessian, tangents,
                                direction, check_ancillas, strict, max_steps, seed,
                                slot.machine, None, native)
        finally:
            oneshot.release(slot)
    return _derivatives(program, of, wrt, inputs, gradient, hessian, tangents, direction,
                        check_ancillas, strict, max_steps, seed, machine, _runner, native)


def _derivatives(program: Program | str | os.PathLike, of: str | None,
                 wrt: str | Sequence[str], inputs: Mapping[str, Any] | None, gradient: bool,
                 hessian: bool, tangents: Mapping[str, Any] | None,
                 direction: Mapping[str, Any] | None, check_ancillas: bool, strict: bool,
                 max_steps: int | None, seed: int, machine: Machine | None,
                 _runner: _Runner | None, native: bool | None = None) -> Derivatives:
    prog = machine.program if machine is not None else _as_program(program)
    for what, vectors in (("tangents", tangents), ("direction (v)", direction)):
        if vectors is not None and not isinstance(vectors, Mapping):
            raise TypeError(f"{what} must map each wrt name to its vector, not "
                            f"{type(vectors).__name__}")
    names = _wrt_list(wrt) if (gradient or hessian or direction is not None) else \
        list(tangents or {})
    r = _runner
    if r is None and machine is not None:
        # a machine reused across calls keeps its resolved cells (training loops, benchmarks)
        cache = machine.__dict__.setdefault("_ad_runners", {})
        r = cache.get((of, tuple(names)))
        if r is None:
            r = cache[(of, tuple(names))] = _Runner(prog, of, names, machine)
    if r is None:
        r = _Runner(prog, of, names, machine)
    out = Derivatives(cells=r.wrt)
    if (gradient or hessian or direction is not None) and r.of is None:
        raise NotDifferentiable("a gradient needs the loss: of=NAME")
    # warned once per runner (reused by grad_fn and the one-shot calls); strict always checks
    # (the search is cached per program)
    if of is not None and (strict or not getattr(r, "paths_checked", False)):
        _check_paths(prog, of, [c.name for c in r.wrt], strict)
        r.paths_checked = True

    if tangents is not None:                           # forward mode
        v = _seed_vector("tangents", tangents, r.wrt)
        r.start(_core.AD_TAN, inputs)
        r.seed_tangents(v)
        ran = False
        if max_steps is None and \
                native_tangent.prepare(r.core, prog, native, lanes=False) == "native":
            ran = r.core.tangent_run() == 0 and _finite_outputs(r, prog)
            if not ran:                # the interpreter runs it again and reports
                r.start(_core.AD_TAN, inputs)
                r.seed_tangents(v)
        if not ran:
            r.forward(max_steps)
        out.steps = r.m.stats["steps"]
        out._end = (r.m, r.globals_words())
        out.value = r.loss() if r.of is not None else None
        tan = r.core.tangent
        out.tangent = {}
        for g in prog.globals:
            if g.is_output and g.type in DIFFERENTIABLE:
                cell = resolve(r.m, g.name, "output")
                out.tangent[g.name] = _shaped(tan[cell.addr:cell.addr + cell.size], cell)
        r.check_nonfinite(np.concatenate([np.atleast_1d(t) for t in out.tangent.values()])
                          if out.tangent else np.zeros(0), "tangent")
        out.released = _release_report(r, strict, RELEASE_TOLERANCE)
        return out

    if gradient:
        mode = _core.AD_TAN if check_ancillas else 0
        r.start(mode, inputs)
        start = r.globals_words()
        if check_ancillas:
            r.seed_tangents(np.random.default_rng(seed).standard_normal(r.n))
        r.forward(max_steps)
        out.steps = r.m.stats["steps"]
        out._end = (r.m, r.globals_words())
        out.value = r.loss()
        if check_ancillas:
            out.released = _release_report(r, strict, RELEASE_TOLERANCE)
        r.backward(_core.AD_ADJ, max_steps)
        r.m.check_restored()
        g = r.gather(r.core.adjoint)
        r.check_nonfinite(g, "gradient")
        out.gradient = _split(g, r.wrt)
        out.drift = _drift(prog, r.core.mem, start)

    rows = [np.eye(r.n)] if hessian else []
    if direction is not None:
        rows.append(_seed_vector("direction (v)", direction, r.wrt)[None])
    seeds = np.ascontiguousarray(np.concatenate(rows)) if rows else np.zeros((0, r.n))
    columns: Any = []
    vectors: Any = seeds
    if len(seeds) and max_steps is None:
        # every column in one core call (native code when it is built): a (columns, n) seed
        native_tangent.prepare(r.core, prog, native, lanes=len(seeds) > 1)
        if r.fast(inputs, seeds):
            columns = r.h.copy()
            out.value = r.fast_loss() if out.value is None else out.value
            if out._end is None:
                out._end = (r.m, r.words[1].copy())
                out.steps = r.core.last_n
            if out.gradient is None:
                out.gradient = _split(r.g.copy(), r.wrt)
                out.drift = _drift(prog, r.words[2], r.words[0])
            vectors = ()
    for v in vectors:
        if max_steps is None and r.fast(inputs, np.ascontiguousarray(v)):
            columns.append(r.h.copy())
            if out.value is None:
                out.value = r.fast_loss()
                out._end = (r.m, r.words[1].copy())
                out.steps = r.core.last_n
            if out.gradient is None:
                out.gradient = _split(r.g.copy(), r.wrt)
                out.drift = _drift(prog, r.words[2], r.words[0])
            continue
        r.start(_core.AD_TAN, inputs)
        start = r.globals_words()
        r.seed_tangents(v)
        r.forward(max_steps)
        if out.value is None:
            out.value = r.loss()
            out._end = (r.m, r.globals_words())
            out.steps = r.m.stats["steps"]
        r.backward(_core.AD_TAN | _core.AD_ADJ, max_steps)
        r.m.check_restored()
        col = r.gather(r.core.adjoint_tangent)
        r.check_nonfinite(col, "Hessian")
        columns.append(col)
        if out.gradient is None:
            out.gradient = _split(r.gather(r.core.adjoint), r.wrt)
            out.drift = _drift(prog, r.core.mem, start)
    if hessian:
        out.hessian = np.ascontiguousarray(np.array(columns[:r.n]).T) if r.n else \
            np.zeros((0, 0))
    if direction is not None:
        out.hvp = _split(columns[-1], r.wrt)
    return out


def _finite_outputs(r: _Runner, prog: Program) -> bool:
    """Every differentiable output's tangent is finite (else the interpreter runs the jvp
    again, to name the instruction where it stopped being so)."""
    tan = r.core.tangent
    return all(np.all(np.isfinite(tan[g.addr:g.addr + g.size])) for g in prog.globals
               if g.is_output and g.type in DIFFERENTIABLE)


def decode_global(g, words: np.ndarray, F: int) -> Any:
    """The value of global g in a copy of the globals' words."""
    if g.length is None:
        return decode(g.type, int(words[g.addr]), F)
    return decode_array(g.type, words[g.addr:g.addr + g.length], F)


def _drift(program: Program, now: np.ndarray, start: np.ndarray) -> dict[str, float]:
    """Globals whose words differ between `now` and `start`, with the largest difference of
    their values."""
    now = now[:len(start)]
    if now.tobytes() == start.tobytes():          # the common case, cheaply
        return {}
    F, out = program.fraction_bits, {}
    diff = now != start
    with np.errstate(invalid="ignore"):
        for g in program.globals:
            if not diff[g.addr:g.addr + g.size].any():
                continue
            a, b = now[g.addr:g.addr + g.size], start[g.addr:g.addr + g.size]
            if g.type == FLOAT:                  # the words are the doubles
                out[g.name] = float(np.nanmax(np.abs(a.view(np.float64) - b.view(np.float64))))
                continue
            out[g.name] = float(np.nanmax(np.abs(
                np.asarray(decode_global(g, now, F), dtype=float)
                - np.asarray(decode_global(g, start, F), dtype=float))))
    return out


def _split(flat: np.ndarray, cells: list[Cell]) -> dict[str, Any]:
    res, at = {}, 0
    for c in cells:
        res[c.name] = _shaped(flat[at:at + c.size], c)
        at += c.size
    return res


# ---- the short forms ---------------------------------------------------------------------------

def _grad(program: Program | str | os.PathLike, of: str, wrt: str | Sequence[str],
          inputs: Mapping[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """d of / d wrt at `inputs`: {wrt name: np.float64 or array}.  See `derivatives`.

    With check_ancillas=False, repeated calls on the same Program object go through one
    shared `grad_fn` per (of, wrt, options) (rvm/oneshot.py), so that they take its fast
    path and, after a few calls, native code (with no other option, the call reaches it
    from a C function, rvm/_runcall.pxi, with no Python frame); by default every call checks
    the ancillas (a forward run with tangents) on the Program's reused machine."""
    _loss_name(of)
    if options.get("check_ancillas") is False and "machine" not in options and \
            "_runner" not in options:
        f = _shared_grad_fn(_as_program(program), of, tuple(_wrt_list(wrt)),
                            {k: v for k, v in options.items() if k != "check_ancillas"})
        if f is not None:
            return f(inputs)
    return derivatives(program, of, wrt, inputs, **options).gradient


def _shared_grad_fn(program: Program, of: str, wrt: tuple[str, ...],
                    options: dict[str, Any]) -> GradFn | None:
    """The Program's shared grad_fn of (of, wrt, options), made on first use; None when the
    options do not hash."""
    okey = oneshot.options_key(options)
    if okey is None:
        return None
    e = oneshot.entry(program)
    key = (of, wrt, okey)
    f = e.grad_fns.get(key)
    if f is None:
        with e.lock:
            f = e.grad_fns.get(key)
            if f is None:
                f = e.grad_fns[key] = grad_fn(program, of, list(wrt), **options)
    return f


def _jvp(program: Program | str | os.PathLike, inputs: Mapping[str, Any] | None,
         tangents: Mapping[str, Any], **options: Any) -> dict[str, Any]:
    """Forward mode: the tangents of every differentiable output for input tangents
    {name: tangent}.

    Called again on the same Program object, it reuses the first call's machine and, once
    the tangent modes run as native code, the whole call is one C function (rvm/_runcall.pxi:
    one native run, no Python frame)."""
    res = derivatives(program, None, (), inputs, gradient=False, tangents=tangents,
                      **options).tangent
    if not options and isinstance(program, Program) and isinstance(tangents, dict):
        _bind_jvp(program, list(tangents))
    return res


def _bind_jvp(program: Program, names: list[str]) -> None:
    """Make the Program's JvpCall for tangents of `names` on this thread's reused AD machine,
    when it has none and that machine's runner has native tangent modes."""
    e = oneshot.entry(program)
    if e.jvp_call is not None:
        return
    slot = oneshot.acquire(program, {}, "ad")
    try:
        if slot.cached:
            e.jvp_call = jvp_call(slot.machine, names, slot)
    finally:
        oneshot.release(slot)


def jvp_call(m: Machine, names: list[str], slot: Any = None) -> Any:
    """A _core.JvpCall on machine m for tangents of `names` (`derivatives(..., tangents=...,
    machine=m)` repeated, in C), once a call of those names has run on m and its tangent
    modes are native; else None.  `slot` (an rvm.oneshot.Slot) marks m busy, if it is a
    one-shot machine."""
    runners = m.__dict__.get("_ad_runners")
    r = runners.get((None, tuple(names))) if runners else None
    if r is None or not r.core.native_tangent:
        return None
    cells, def_addrs, def_words, _ = r._fast_args()
    seeds = [(c.name, c.addr, c.size, not c.shape) for c in r.wrt]
    return _core.JvpCall(r.core, slot if slot is not None else oneshot.Slot(m, False), cells,
                         def_addrs, def_words, seeds, tangent_outputs(m))


def tangent_outputs(m: Machine) -> list[tuple[str, int, int, tuple[int, ...] | None]]:
    """(name, address, size, shape or None for a scalar) of every differentiable output of
    m's program: the cells whose tangents rvm.jvp returns."""
    outs = []
    for g in m.program.globals:
        if g.is_output and g.type in DIFFERENTIABLE:
            c = resolve(m, g.name, "output")
            outs.append((g.name, c.addr, c.size, tuple(c.shape) if c.shape else None))
    return outs


def _hessian(program: Program | str | os.PathLike, of: str, wrt: str | Sequence[str],
             inputs: Mapping[str, Any] | None = None, **options: Any) -> np.ndarray:
    """The Hessian of `of` over the wrt cells flattened in order, shape (n, n).

    Called again on the same Program object, it reuses the first call's machine and, once
    the tangent modes run as native code, the whole call is one C function (rvm/_runcall.pxi:
    one core call, no Python frame)."""
    _loss_name(of)
    if isinstance(program, Program) and options.keys() <= {"native"}:
        h = _hessian_again(program, of, wrt, inputs, options.get("native"))
        if h is not None:
            return h
    return derivatives(program, of, wrt, inputs, gradient=False, hessian=True,
                       **options).hessian


def _hessian_again(program: Program, of: str, wrt: str | Sequence[str],
                   inputs: Mapping[str, Any] | None, native: bool | None) -> np.ndarray | None:
    """A one-shot Hessian on this thread's machine of `program` whose runner an earlier call
    made (resolved cells, paths checked): the core pass alone, which gives what
    `derivatives` gives (its Hessian block takes the same pass); None when the general way
    must run (the first call, inputs the core does not store, a trap, a non-finite value)."""
    slot = oneshot.acquire(program, {}, "ad")
    try:
        runners = slot.machine.__dict__.get("_ad_runners")
        r = runners.get((of, tuple(_wrt_list(wrt)))) if runners else None
        if r is None or not getattr(r, "paths_checked", False) or not r.n:
            return None
        native_tangent.prepare(r.core, program, native, lanes=r.n > 1)
        seeds = r.__dict__.get("_eye")
        if seeds is None:
            seeds = r._eye = np.eye(r.n)
        if not r.fast(inputs, seeds):
            return None
        e = oneshot.entry(program)
        if e.hess_call is None and slot.cached and native is not False and \
                r.core.native_tangent:
            cells, def_addrs, def_words, wrt_addrs = r._fast_args()
            e.hess_call = _core.HessCall(r.core, slot, of,
                                         list(wrt) if isinstance(wrt, list) else wrt,
                                         r.of.addr, cells, def_addrs,
                                         def_words, wrt_addrs, r._exact_addrs())
        return np.ascontiguousarray(r.h.T)
    finally:
        oneshot.release(slot)


def _hvp(program: Program | str | os.PathLike, of: str, wrt: str | Sequence[str],
         v: Mapping[str, Any], inputs: Mapping[str, Any] | None = None,
         **options: Any) -> dict[str, Any]:
    """The Hessian-vector product H v for v = {wrt name: vector}.

    Called again on the same Program object, it reuses the first call's machine and, once
    the tangent modes run as native code, the whole call is one C function (rvm/_runcall.pxi:
    one core call, no Python frame)."""
    res = derivatives(program, of, wrt, inputs, gradient=False, direction=v, **options).hvp
    if not options and isinstance(program, Program):
        _bind_hvp(program, of, wrt)
    return res


def _bind_hvp(program: Program, of: str, wrt: str | Sequence[str]) -> None:
    """Make the Program's HvpCall for (of, wrt) on this thread's reused AD machine, when it
    has none and that machine's runner has native tangent modes and checked paths."""
    e = oneshot.entry(program)
    if e.hvp_call is not None:
        return
    slot = oneshot.acquire(program, {}, "ad")
    try:
        runners = slot.machine.__dict__.get("_ad_runners")
        r = runners.get((of, tuple(_wrt_list(wrt)))) if runners else None
        if r is None or not slot.cached or not getattr(r, "paths_checked", False) or \
                not r.n or not r.core.native_tangent:
            return
        cells, def_addrs, def_words, wrt_addrs = r._fast_args()
        parts, at = [], 0
        for c in r.wrt:
            parts.append((c.name, at, c.size, tuple(c.shape) if c.shape else None))
            at += c.size
        e.hvp_call = _core.HvpCall(r.core, slot, of, list(wrt) if isinstance(wrt, list) else wrt,
                                   r.of.addr, cells, def_addrs, def_words, wrt_addrs,
                                   r._exact_addrs(), parts)
    finally:
        oneshot.release(slot)


if TYPE_CHECKING:
    jvp, hessian, hvp, grad = _jvp, _hessian, _hvp, _grad
else:   # the C functions (rvm/_runcall.pxi) whose general paths are these
    grad = _core.oneshot_public("grad", _grad)
    jvp = _core.oneshot_public("jvp", _jvp)
    hessian = _core.oneshot_public("hessian", _hessian)
    hvp = _core.oneshot_public("hvp", _hvp)


class GradFn(_core.GradFnBase):
    """f(inputs) -> {wrt name: gradient}, reusing one machine (for training loops); made by
    `grad_fn`.  The first call (every call with check_ancillas=True) runs `derivatives`.  Later
    calls take one call into the core (`Core.gradient`: reset, forward, adjoint sweep; the
    call itself is C, see _core.GradFnBase) when every input is a Python float or int for a
    scalar float or int input, or a list of Python floats or a float64 array for a float
    array; anything else goes the general way.
    Those core calls run the program as native code (rvm/native) once it is compiled: at the
    NATIVE_AFTER-th fast call (native=None, unless RVM_NATIVE=0; built in a thread, the calls
    go on interpreted until it is ready), at once (native=True, which raises when it cannot)
    or never (native=False).  `f.last` is the last call's Derivatives;
    `f.native` says whether native code runs and, if not, why.

    One GradFn may be shared by threads (a thread pool, Dask workers): the first thread to call
    it owns its machine, and each other thread gets a lane of its own, a GradFn on its own
    machine made at its first call (it costs one Machine per thread and, on that thread's first
    call, one general call; native code built for the owner is shared, not rebuilt).  Calls on
    different threads then run in parallel where native code releases the GIL, and each gives
    the result a serial call would, bit for bit.  `f.last` is the calling thread's last call."""

    NATIVE_AFTER = 8

    def __init__(self, program: Program, of: str, wrt: str | Sequence[str],
                 check_ancillas: bool, options: dict[str, Any], native: bool | None = None):
        self.program, self.of, self.wrt = program, of, wrt
        self.runner = _Runner(program, of, _wrt_list(wrt))
        self.check_ancillas, self.options = check_ancillas, options
        self._first = True
        self._last: Derivatives | None = None
        # the fast pass has no step limit or ancilla check to honour
        self._fast = not check_ancillas and options.get("max_steps") is None
        self._native: str = "not compiled"
        self._build: threading.Thread | None = None     # the automatic build, while it runs
        self._built: Any = None
        self._nat: Any = None                           # the installed rvm.native.Native
        self._choice = native
        self._lanes = threading.local()                 # .fn: the calling thread's GradFn
        self._lanes_lock = threading.Lock()
        # batches on one GradFn take turns: they share its batch machines (and each batch
        # already spreads its rows over the cores)
        self._batch_lock = threading.Lock()
        self.countdown = -1 if native is False or os.environ.get("RVM_NATIVE") == "0" \
            else self.NATIVE_AFTER
        if native is False:
            self._native = "off (native=False)"
        elif native:
            self.compile()

    def _general(self, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
        """A call the fast path does not take (GradFnBase.__call__ sends it here)."""
        self._last = None                   # a call that raises leaves no stale `last`
        res = derivatives(self.program, self.of, self.wrt, inputs,
                          check_ancillas=self.check_ancillas or self._first, _runner=self.runner,
                          **self.options)
        if self._first and self._fast:
            self.fast = self.runner.grad_call()
            self.flat_call = self.runner.flat_call()
        self._first = False
        self._last = res
        return res.gradient

    def _lane(self, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
        """A call from a thread other than the owner (GradFnBase.__call__ sends it here): run
        it on the calling thread's own GradFn."""
        lane = getattr(self._lanes, "fn", None)
        if lane is None:
            if not any(t.ident == self.owner for t in threading.enumerate()):
                # the owner thread has ended (a pool that came and went): take its machine,
                # and with it the native build under way
                self.owner = threading.get_ident()
                return self(inputs)
            lane = self._lanes.fn = self._new_lane()
        return lane(inputs)

    def _new_lane(self) -> GradFn:
        with self._lanes_lock:              # the owner may be installing its native code
            nat, choice = self._nat, self._choice
            if nat is None and self.countdown == -1:
                choice = False              # the owner will not run native code: nor a lane
        lane = GradFn(self.program, self.of, self.wrt, self.check_ancillas, self.options,
                      native=False if nat is not None else choice)
        if nat is not None:
            lane._install(nat)
        return lane

    def _countdown_done(self) -> None:
        """At the NATIVE_AFTER-th fast call: build the native code in a thread (the compiler
        is a subprocess: calls go on, interpreted, meanwhile), then install it at a later
        call, between two calls, so that no call runs half one way and half the other."""
        if self._build is None:
            from .. import native
            if native.nested.has_statements(self.program):    # known now: no build
                self._refuse(native.STATEMENT_GRADIENTS)
                return
            self._build = threading.Thread(target=self._build_native, daemon=True,
                                           name="rvm-native-build")
            self._build.start()
            self.countdown = 1                  # look again at the next call
        elif self._build.is_alive():
            self.countdown = 1
        else:
            built, self._build = self._built, None
            self._install(built) if not isinstance(built, Exception) else \
                self._refuse(built)

    def _build_native(self) -> None:
        from .. import native
        try:
            self._built = native.compile_program(self.program, wrt=self._wrt_addrs())
        except (native.Unsupported, native.BuildError, OSError) as e:
            self._built = e

    def compile(self) -> Any:
        """Compile the program to native code now (or find it in the cache) and run the fast
        calls with it; returns rvm.native.Native.  Raises rvm.native.Unsupported when the
        program uses what the generator does not cover, BuildError without a C compiler."""
        from .. import native
        return self._install(native.compile_program(self.program, wrt=self._wrt_addrs()))

    def _wrt_addrs(self) -> list[int]:
        """The wrt cells' addresses: the native sweep leaves out the adjoints that cannot
        reach them (rvm/native/activity.py)."""
        return [a for c in self.runner.wrt for a in range(c.addr, c.addr + c.size)]

    def _install(self, nat: Any) -> Any:
        from .. import native
        self.countdown = -1
        if not nat.install(self.runner.core):
            raise native.BuildError("the entry frame does not fit the machine's frame region")
        with self._lanes_lock:
            self._nat = nat
        self._native = f"native ({nat.path.name}, {'built' if nat.built else 'cached'} "\
                       f"in {nat.seconds:.2f} s)"
        return nat

    # -- the flat call -----------------------------------------------------------------------
    @property
    def wrt_cells(self) -> list[str]:
        """The wrt cells in the order of `flat`'s vectors: x, a[0], a[1], ..."""
        return [n for c in self.runner.wrt for n in c.names()]

    # flat(x, out=None) -> (loss, gradient) is GradFnBase.flat (C): x (a float64 vector of
    # len(wrt_cells) values) goes into the wrt cells, every other input at its default; the
    # gradient comes back as a vector in the same order (into `out` if given).  Calls that
    # the fast path cannot take come here.
    def _flat_dict(self, x: Any, what: str, name: str = "x") -> dict[str, Any]:
        """A vector over the wrt cells (flat's order) as the dict call's {wrt name: value}."""
        xa = np.ascontiguousarray(x, dtype=np.float64)
        n = self.runner.n
        if xa.shape != (n,):
            raise ValueError(f"{what}: {name} must be a vector of {n} values (the wrt cells "
                             f"{', '.join(self.wrt_cells)}), got shape {xa.shape}")
        res: dict[str, Any] = {}
        at = 0
        for c in self.runner.wrt:
            if "[" in c.name:
                raise ValueError(f"{what}: wrt {c.name!r} names an element; flat takes whole "
                                 "globals (name the array)")
            res[c.name] = float(xa[at]) if not c.shape else xa[at:at + c.size].copy()
            at += c.size
        return res

    def _flat_general(self, x: Any, out: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        inputs = self._flat_dict(x, "flat")
        n = self.runner.n
        if out is not None and not out_array(out, (n,)):
            raise ValueError(f"flat: out must be a contiguous float64 vector of {n} "
                             "(writeable, in this machine's byte order)")
        g = self(inputs)
        res = out if out is not None else np.empty(n)
        res[:] = np.concatenate([np.atleast_1d(g[c.name]).ravel() for c in self.runner.wrt]) \
            if n else res
        last = self.last
        return float(last.value if last is not None and last.value is not None else np.nan), res

    def jacobian_flat(self, x: Any, of: Sequence[str],
                      out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(values, J): the gradients of several scalar loss cells `of` (float or fixed
        globals) at x, as the rows of J (len(of), n) in the order of `of` (into `out`, a
        C-contiguous float64 array of that shape, if given), and the losses' values at the
        end of the forward run.  x as for `flat`.  With native code (compiled on the first
        call, unless native=False) the forward run runs once and one adjoint sweep per loss
        follows, each from the forward run's end state: each row is bit for bit
        `grad_fn(program, of=o, wrt=...).flat(x)`.  Otherwise, or when the native code hands
        a call back, each row is `derivatives` of its own (which reports what went wrong)."""
        names = tuple(of)
        n = self.runner.n
        if out is None:
            out = np.empty((len(names), n))
        elif not out_array(out, (len(names), n)):
            raise ValueError(f"jacobian_flat: out must be a C-contiguous float64 array of "
                             f"shape ({len(names)}, {n}) (writeable, in this machine's byte "
                             "order)")
        rows = self.__dict__.setdefault("_rows_calls", {})
        call = rows.get(names)
        if call is None:
            cells = [resolve(self.runner.m, o, "the loss (of)") for o in names]
            for o, c in zip(names, cells):
                if c.size != 1:
                    raise NotDifferentiable(f"the loss {o!r} is an array: name one element")
            types = [next(g.type for g in self.program.globals
                          if g.addr <= c.addr < g.addr + g.size) for c in cells]
            if self._first:
                self(self._flat_dict(x, "jacobian_flat"))    # the first call's checks
            self._compile_now()
            call = False
            if self._nat is not None and self._fast and self.flat_call is not None and \
                    all(t in (FLOAT, NumType.FIXED) for t in types):
                _, def_addrs, def_words, wrt_addrs = self.runner._fast_args()
                keep = ~np.isin(def_addrs, wrt_addrs)
                call = _core.RowsCall(self.runner.core,
                                      np.array([c.addr for c in cells], dtype=np.int64),
                                      np.array([t == FLOAT for t in types], dtype=np.uint8),
                                      np.ascontiguousarray(def_addrs[keep]),
                                      np.ascontiguousarray(def_words[keep]), wrt_addrs,
                                      self.runner.words)
            rows[names] = call
        if call is not False:
            self.fast_grad = None
            r = call(x, out)
            if r is not None:
                return r
        inputs = self._flat_dict(x, "jacobian_flat")
        vals = np.empty(len(names))
        for j, o in enumerate(names):
            d = derivatives(self.program, o, self.wrt, inputs, **self.options)
            out[j] = np.concatenate([np.atleast_1d(d.gradient[c.name]).ravel()
                                     for c in self.runner.wrt]) if n else out[j]
            vals[j] = float(d.value if d.value is not None else np.nan)
        return vals, out

    # hvp_flat(x, v, out=None) -> (loss, H v), hessian_flat(x, out=None) -> (loss, H) and
    # jvp_flat(x, v) -> (loss, tangent of the loss) are GradFnBase's (C): x, v, H v and H's
    # rows and columns in the order of wrt_cells, every other input at its default; the
    # passes of rvm.hvp, rvm.hessian and rvm.jvp on this GradFn's machine, in one C call once
    # its tangent modes are native code.  Calls the C pass does not take come here.
    _TANGENT_KINDS = ("hvp_flat", "hessian_flat", "jvp_flat")

    def _flat_tangent_general(self, kind: int, x: Any, v: Any,
                              out: np.ndarray | None) -> tuple[float, Any]:
        what = self._TANGENT_KINDS[kind]
        inputs = self._flat_dict(x, what)
        vd = self._flat_dict(v, what, "v") if kind != 1 else None
        n = self.runner.n
        if kind == 1 and out is not None and not out_array(out, (n, n)):
            raise ValueError(f"hessian_flat: out must be a C-contiguous float64 array of "
                             f"shape ({n}, {n}) (writeable, in this machine's byte order)")
        if kind == 0 and out is not None and not out_array(out, (n,)):
            raise ValueError(f"hvp_flat: out must be a contiguous float64 vector of {n} "
                             "(writeable, in this machine's byte order)")
        if self._first:
            self(inputs)                    # the first call: the ancilla and path checks
        choice = False if self._native.startswith("off") else self._choice
        # one direction (hvp_flat, jvp_flat, a one-cell Hessian): the scalar modes will do;
        # a Hessian over more cells takes the lane modes once they are built
        lanes = kind == 1 and n > 1
        how = native_tangent.prepare(self.runner.core, self.program, choice, lanes=lanes)
        if lanes:
            self.lanes_settled = not native_tangent.lanes_pending(self.runner.core,
                                                                  self.program, choice)
        if how == "native" and self.flat_call is not None:
            fc = self.flat_call
            r = fc.hvp(x, v, out) if kind == 0 else fc.hessian(x, out) if kind == 1 else \
                fc.jvp(x, v)
            if r is not None:
                return r
        d = derivatives(self.program, self.of, self.wrt, inputs, gradient=False,
                        hessian=kind == 1, direction=vd if kind == 0 else None,
                        tangents=vd if kind == 2 else None, native=choice, _runner=self.runner)
        loss = float(d.value if d.value is not None else np.nan)
        if kind == 2:
            return loss, float(self.runner.core.tangent[self.runner.of.addr])
        if kind == 1:
            if out is None:
                return loss, d.hessian
            out[...] = d.hessian
            return loss, out
        res = out if out is not None else np.empty(n)
        res[:] = np.concatenate([np.atleast_1d(d.hvp[c.name]).ravel() for c in self.runner.wrt])
        return loss, res

    def _lane_flat_tangent(self, kind: int, x: Any, v: Any, out: np.ndarray | None) -> Any:
        """A flat tangent call from a thread other than the owner: on its own GradFn."""
        lane = getattr(self._lanes, "fn", None)
        if lane is None:
            if not any(t.ident == self.owner for t in threading.enumerate()):
                self.owner = threading.get_ident()
                lane = self
            else:
                lane = self._lanes.fn = self._new_lane()
        return lane.hvp_flat(x, v, out) if kind == 0 else lane.hessian_flat(x, out) \
            if kind == 1 else lane.jvp_flat(x, v)

    def _lane_flat(self, x: Any, out: np.ndarray | None) -> tuple[float, np.ndarray]:
        """A flat call from a thread other than the owner: on that thread's own GradFn."""
        lane = getattr(self._lanes, "fn", None)
        if lane is None:
            if not any(t.ident == self.owner for t in threading.enumerate()):
                self.owner = threading.get_ident()
                return self.flat(x, out)
            lane = self._lanes.fn = self._new_lane()
        return lane.flat(x, out)

    # -- batches ----------------------------------------------------------------------------
    def batch(self, inputs: Mapping[str, Any], *, threads: int | None = None) -> dict[str, Any]:
        """The gradients of B calls in one: each value of `inputs` with a leading batch axis
        of length B (a value without one, shaped as the single call's, is the same for
        every row).  Returns the single call's dict with a leading axis B on every value,
        row b bit for bit `f(row b's inputs)`.

        The rows run as native code (compiled now if it is not yet; a program it does not
        cover runs row by row, interpreted) without the GIL, in contiguous chunks over
        `threads` threads (default: the machine's cores, at most one per 64 rows), each on a
        machine of its own (made on first use and kept).  Once the program's lane library is
        built (the first batch of 64 rows or more starts its build in the background;
        `compile_batch` builds it now), each thread runs its rows W at a time, every cell a
        vector of W values (rvm/native/lanes.py; `batch_native` says how rows run); a group
        of W rows whose branches, indices or traps differ runs one row at a time.  A row the
        native code hands back runs interpreted; one that traps raises BatchError naming its
        row (lane) with the error, and carries every other row's result (the failed rows'
        values are nan).
        Threads sharing one GradFn may call batch at once: the calls take turns, and
        `last_batch_loss` is then the losses of whichever batch ended last."""
        with self._batch_lock:
            return self._batch(inputs, threads)

    def _batch(self, inputs: Mapping[str, Any], threads: int | None) -> dict[str, Any]:
        batch_rows, shared, B = split_batch(self.program, inputs)
        n = self.runner.n
        out = np.full((B, n), np.nan)
        status = np.ones(B, dtype=np.int64)
        if self._first:                 # the first call checks the ancillas, as f() does
            try:
                self(batch_row(batch_rows, shared, 0))
            except RVMError:            # row 0 traps: reported below by its index, as any row
                pass
        self._compile_now()
        self.last_batch_loss = np.full(B, np.nan)
        if self._nat is not None and self._fast and n:
            words = batch_words(self._batch_runner(0).m, batch_rows, shared, B)
            self._native_rows(words, out, status, threads)
        errors: dict[int, Exception] = {}
        for b in np.nonzero(status)[0].tolist():          # interpreted: handed back, or all
            try:
                d = derivatives(self.program, self.of, self.wrt,
                                batch_row(batch_rows, shared, b), check_ancillas=False,
                                _runner=self._batch_runner(0), **self.options)
            except RVMError as e:
                errors[b] = e
                self.last_batch_loss[b] = np.nan
                continue
            g = d.gradient
            self.last_batch_loss[b] = d.value       # (the native rows' loss words are not)
            out[b] = np.concatenate([np.atleast_1d(g[c.name]).ravel()
                                     for c in self.runner.wrt])
        res, at = {}, 0
        for c in self.runner.wrt:        # (one wrt cell: its view of `out`, no copy)
            v = out[:, at:at + c.size].reshape((B,) + c.shape)
            res[c.name] = v if c.size == n else v.copy()
            at += c.size
        if errors:
            raise batch_failed(errors, B, res)
        return res

    def _batch_runner(self, k: int) -> _Runner:
        """The k-th machine of the batches (made on first use, with the native code)."""
        runners = self.__dict__.setdefault("_batch_runners", [])
        while len(runners) <= k:
            r = _Runner(self.program, self.of, _wrt_list(self.wrt))
            if self._nat is not None:
                self._nat.install(r.core)
            runners.append(r)
        r = runners[k]
        if self._nat is not None and not r.core.native:
            self._nat.install(r.core)
        return r

    def _native_rows(self, words: tuple, out: np.ndarray, status: np.ndarray,
                     threads: int | None) -> None:
        in_addrs, def_words, row_addrs, rows = words
        B = rows.shape[0]
        bounds = chunks(B, threads)
        lanes = native_lanes.ready(self.program, B)      # W rows at a time (issue 16)
        if lanes is not None:
            bounds = native_lanes.bounds(bounds, lanes.width)
        k = len(bounds) - 1
        loss = np.zeros(B, dtype=np.int64)
        runners = [self._batch_runner(i) for i in range(k)]
        wrt_addrs = runners[0]._fast_args()[3]
        exact = runners[0]._exact_addrs()
        of = runners[0].of.addr
        rows_by = [r.core for r in runners] if lanes is None else \
            [self._lane_rows(i, lanes) for i in range(k)]

        def work(i: int) -> None:
            lo, hi = bounds[i], bounds[i + 1]
            args = (of, in_addrs, def_words, row_addrs, rows[lo:hi], wrt_addrs, out[lo:hi],
                    loss[lo:hi], status[lo:hi], exact)
            if lanes is None:
                runners[i].core.grad_rows(*args)
            else:
                rows_by[i].grad_rows(runners[i].core, *args)

        in_threads(work, k)
        self.last_batch_loss = np.array(decode_array(runners[0].of_type, loss,
                                                     self.program.fraction_bits), np.float64)

    def _lane_rows(self, k: int, lanes: Any) -> Any:
        """The k-th batch machine's lane runner (its lane buffers), made on first use."""
        got = self.__dict__.setdefault("_lane_runners", [])
        while len(got) <= k:
            got.append(_core.LaneRows(lanes.lib, lanes.forward, lanes.backward, lanes.width))
        return got[k]

    def compile_batch(self) -> str:
        """Build the lane library of `batch` now (rvm/native/lanes.py: the gradient over W
        rows at once), or wait for the build the first batch started; returns how batches
        run (`batch_native`).  Raises rvm.native.Unsupported or BuildError when it cannot be
        built (batches then run a row at a time, as without it)."""
        native_lanes.build_now(self.program)
        return self.batch_native

    @property
    def batch_native(self) -> str:
        """How `batch` runs the native rows: W at a time ("8 lanes (...)"), or why a row at
        a time ("not built yet", "off", "one row at a time: why")."""
        return native_lanes.status(self.program)

    def _compile_now(self) -> None:
        """Build the native code now, unless it is built or turned off (native=False or
        RVM_NATIVE=0); a refusal leaves the calls interpreted and says why."""
        from .. import native
        if self._nat is None and self._choice is not False and \
                os.environ.get("RVM_NATIVE") != "0":
            try:
                self.compile()
            except (native.Unsupported, native.BuildError) as e:
                self._refuse(e)

    def _refuse(self, e: Exception) -> None:
        with self._lanes_lock:
            self.countdown = -1
        self._native = f"interpreted: {e}"

    @property
    def native(self) -> str:
        """Whether the fast calls run native code, and if not, why."""
        return self._native

    @property
    def last(self) -> Derivatives | None:
        """The calling thread's last call's Derivatives (built on demand after a fast call)."""
        if self.owner not in (0, threading.get_ident()):
            lane = getattr(self._lanes, "fn", None)
            return lane.last if lane is not None else None
        if self.fast_grad is not None:
            r, w = self.runner, self.runner.words
            # the C call filled the words only where its checks read them: the rest now, from
            # the machine, which holds the state the call left (the C calls that could change
            # it first build `last`: GradFnBase._flat_tangent)
            r.core.fill_words(w)
            self._last = Derivatives(cells=r.wrt, gradient=self.fast_grad, steps=r.core.last_n,
                                     _end=(r.m, w[1].copy()), value=r.fast_loss(),
                                     drift=_drift(self.program, w[2], w[0]))
            self.fast_grad = None
        return self._last

    def __reduce__(self) -> tuple:
        """Pickled by value and versioned (rvm.interop.pickling): the program and grad_fn's
        arguments; the receiving side makes its own machine and, if this one ran native code,
        takes the same build from its cache or compiles it."""
        from ..interop.pickling import reduce_gradfn
        return reduce_gradfn(self)


def grad_fn(program: Program | str | os.PathLike, of: str, wrt: str | Sequence[str], *,
            check_ancillas: bool = False, native: bool | None = None,
            **options: Any) -> GradFn:
    """A gradient function f(inputs) -> {wrt name: gradient} that reuses one machine (for
    training loops).  The ancillas are checked on the first call only (unless
    check_ancillas=True: every call); `f.last` is the last call's Derivatives.  native: run
    repeated calls as compiled C (None: from the GradFn.NATIVE_AFTER-th call when possible;
    True: now, or raise; False: never); see GradFn."""
    _loss_name(of)
    return GradFn(_as_program(program), of, wrt, check_ancillas, options, native)
