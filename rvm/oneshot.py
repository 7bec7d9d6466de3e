"""What the one-shot calls keep between calls on the same Program (issue 16).

`rvm.run`, `rvm.roundtrip`, `rvm.grad`, `rvm.jvp`, `rvm.hvp` and `rvm.hessian` called again
and again on one Program object (a loop, a sweep) would otherwise build a Machine per call:
checking the bytecode and finding its loop kernels costs about 1 ms, a run of a small program
a few µs.  So each Program gets, on its first one-shot call, an entry here holding

* per thread, one Machine per set of machine options (the machine is one state: a thread
  never shares it; a call made while that machine is busy, e.g. from a trace handler, gets a
  machine of its own for that call);
* the gradient functions of `rvm.grad(..., check_ancillas=False)`, one per (of, wrt,
  options): `rvm.grad_fn`s, shared by threads (they give each thread a lane of its own), so
  that repeated calls reach native code as a GradFn's do;
* once a machine has native code, C objects that make the whole repeated call on it
  (rvm/_runcall.pxi): `run_call` for `rvm.run(prog, values)` and `hess_call` for
  `rvm.hessian`, taking only the calls of the thread that made them.

The entry hangs on the Program object itself (its `_oneshot` attribute, which pickles and
copies leave out) and goes with it: a Program's machines refer to the Program, so a table of
entries beside it would keep every Program alive; this way the two form a cycle the garbage
collector frees.  Pass the same Program object to reuse it; a path is assembled anew on every
call.  A Program is treated as unchanging once it has run (the machine
keeps its own checked copy of the bytecode, as every Machine does).
"""
from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from . import _core
from .machine import Machine
from .program import Program

__all__ = ["Slot", "acquire", "release", "detach", "entry", "clear"]

_LOCK = threading.Lock()


_C: Any = _core                  # (the C classes: untyped to mypy)
_EntryBase: Any = _C.OneShotEntry


class _Entry(_EntryBase):
    """One Program's reusables (see the module docstring).  The fields live in the C base
    class, so that the public calls in C (rvm/_runcall.pxi: rvm.run, rvm.hessian, rvm.hvp,
    rvm.jvp) read the bound C calls without a Python frame."""

    def __init__(self) -> None:
        self.local = threading.local()        # .slots: {options key: Slot}
        self.lock = threading.Lock()          # guards grad_fns
        self.grad_fns: dict[Hashable, Any] = {}     # filled by rvm.ad.engine
        self.batch_machines: dict[Hashable, list[Machine]] = {}   # rvm.run_batch's (lock)
        # and their lane runners (_core.LaneRows), by (options key, reverse) (lock)
        self.batch_lanes: dict[Hashable, list[Any]] = {}
        # the C calls of the first thread whose machine has native code (rvm/_runcall.pxi):
        # rvm.run's (a _core.RunCall on its "run" machine without options) and rvm.hessian's
        # (a _core.HessCall for one (of, wrt)); each takes only its owner thread's calls
        self.run_call: Any = None
        self.hess_call: Any = None
        self.hvp_call: Any = None             # rvm.hvp's (a _core.HvpCall)
        self.jvp_call: Any = None             # rvm.jvp's (a _core.JvpCall)


def entry(program: Program) -> _Entry:
    """The Program's entry, made on first use."""
    e = program.__dict__.get("_oneshot")
    if e is None:
        with _LOCK:
            e = program.__dict__.setdefault("_oneshot", _Entry())
    return e


def clear(program: Program) -> None:
    """Forget what the one-shot calls built for `program` (its machines, gradient
    functions)."""
    program.__dict__.pop("_oneshot", None)


def options_key(options: dict[str, Any]) -> Hashable | None:
    if not options:
        return ()
    try:
        key = tuple(sorted(options.items()))
        hash(key)
    except TypeError:
        return None
    return key


# A cached machine and how many one-shot calls have used it (a Result's lease): busy while a
# call uses it; cached unless made for one call.  A C class: the C calls read it directly.
if TYPE_CHECKING:
    class Slot:
        machine: Machine
        busy: bool
        gen: int
        cached: bool

        def __init__(self, machine: Machine, cached: bool) -> None: ...
else:
    Slot = _core.OneShotSlot


def acquire(program: Program, options: dict[str, Any], kind: str = "run") -> Slot:
    """This thread's idle Machine of `program` with these machine options (in a Slot marked
    busy until `release`); a fresh one, not kept, when that machine is busy (a reentrant call
    from a trace handler) or the options do not hash.  `kind` keeps machines apart by use:
    "run" (rvm.run, roundtrip) and "ad" (the derivatives, whose machine has AD modes on)."""
    okey = options_key(options)
    if okey is None:
        return Slot(Machine(program, **options), False)
    key = (kind, okey)
    local = entry(program).local
    slots = getattr(local, "slots", None)
    if slots is None:
        slots = local.slots = {}
    s = slots.get(key)
    if s is None:
        s = slots[key] = Slot(Machine(program, **options), True)
    elif s.busy:
        return Slot(Machine(program, **options), False)
    s.busy = True
    s.gen += 1
    return s


def release(s: Slot) -> None:
    s.busy = False


def detach(program: Program, s: Slot) -> None:
    """Hand the slot's machine over to the caller for good: later one-shot calls in this
    thread build another."""
    e = entry(program)
    slots = getattr(e.local, "slots", None) or {}
    for k, v in list(slots.items()):
        if v is s:
            del slots[k]
    s.cached = False
    if e.run_call is not None and e.run_call.bound_slot is s:
        e.run_call = None
