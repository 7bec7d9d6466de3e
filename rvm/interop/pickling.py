"""Pickling by value: GradFn, Derivatives and Result (Program's own methods live in
isa/program.py).

Every pickle is a dict with the format's version (`rvm_pickle`); a Program's also carries the
hash of the instruction table its bytecode was assembled for.  Unpickling another version, or
a program for another table, raises IncompatiblePickle (a pickle.UnpicklingError) saying why,
never a machine that runs misread bytecode.

What travels:
* Program: every field (code, memory image, symbols, line table).
* GradFn: its program and the arguments of grad_fn, and whether it ran native code.  The
  receiving side makes its own machine; if the sender ran native code it compiles the program
  at once (from its $RVM_CACHE_DIR when the same build is there, else with its C compiler; if
  it cannot, it runs interpreted and `f.native` says why), else it compiles at the
  NATIVE_AFTER-th call as usual.
* Derivatives: the figures and the outputs at the end of the forward run (not the machine).
* Result: inputs, outputs, stats, garbage; `machine` is None on the receiving side (a machine
  is live state; run the program again to get one).
"""
from __future__ import annotations

import copyreg
from typing import Any

from isa.program import INCOMPATIBLE_PICKLE, IncompatibleProgramPickle

from ..errors import RVMError

PICKLE_VERSION = 1


class IncompatiblePickle(RVMError, IncompatibleProgramPickle):
    """A pickle this rvm cannot read: another pickle version, or another instruction table."""


INCOMPATIBLE_PICKLE[0] = IncompatiblePickle          # what Program.__setstate__ raises


def check(state: Any, kind: str) -> dict:
    """The state dict of a versioned pickle of `kind`, or IncompatiblePickle."""
    if not isinstance(state, dict) or "rvm_pickle" not in state:
        raise IncompatiblePickle(f"not a versioned rvm {kind} pickle (made by an rvm older than "
                                 "versioned pickles?): make the object again with this rvm")
    version = state["rvm_pickle"]
    if version != PICKLE_VERSION:
        raise IncompatiblePickle(f"an rvm {kind} pickle of version {version!r}: this rvm reads "
                                 f"version {PICKLE_VERSION}; unpickle it with the rvm that made "
                                 "it, or send the program (.rasm/.rbc) instead")
    return state


def state(kind: str, **fields: Any) -> dict:
    return {"rvm_pickle": PICKLE_VERSION, "kind": kind, **fields}


# ---- GradFn ---------------------------------------------------------------------------------
def reduce_gradfn(f: Any) -> tuple:
    return rebuild_gradfn, (state("GradFn", program=f.program, of=f.of, wrt=f.wrt,
                                  check_ancillas=f.check_ancillas, options=dict(f.options),
                                  native=f._choice, was_native=f._nat is not None),)


def rebuild_gradfn(s: dict) -> Any:
    from ..ad.engine import GradFn
    s = check(s, "GradFn")
    choice = s["native"]
    f = GradFn(s["program"], s["of"], s["wrt"], s["check_ancillas"], s["options"],
               native=None if choice else choice)
    if s["was_native"] or choice:
        from .. import native
        try:
            f.compile()
        except (native.Unsupported, native.BuildError, OSError) as e:
            if choice:          # native=True asked for it: say so, as grad_fn would
                raise
            f._refuse(e)
    return f


# ---- Derivatives ----------------------------------------------------------------------------
class DetachedEnd:
    """Stands for the machine of a Derivatives' end state after unpickling: the output globals
    and fraction bits `Derivatives.outputs` decodes the end words with."""

    def __init__(self, globals_: list, fraction_bits: int):
        self.program = _Layout(globals_, fraction_bits)

    def __reduce__(self) -> tuple:
        return DetachedEnd, (self.program.globals, self.program.fraction_bits)


class _Layout:
    def __init__(self, globals_: list, fraction_bits: int):
        self.globals, self.fraction_bits = globals_, fraction_bits


def derivatives_state(d: Any) -> dict:
    fields = {k: v for k, v in d.__dict__.items() if k != "_end"}
    end = None
    if d._end is not None:
        m, words = d._end
        prog = m.program
        end = ([g for g in prog.globals if g.is_output], prog.fraction_bits, words)
    return state("Derivatives", fields=fields, end=end)


def set_derivatives_state(d: Any, s: Any) -> None:
    s = check(s, "Derivatives")
    d.__dict__.update(s["fields"])
    end = s["end"]
    d._end = None if end is None else (DetachedEnd(end[0], end[1]), end[2])


# ---- Result ---------------------------------------------------------------------------------
RESULT_FIELDS = ("inputs", "outputs", "stats", "garbage")


def result_state(r: Any) -> dict:
    return state("Result", fields={k: getattr(r, k) for k in RESULT_FIELDS})


def set_result_state(r: Any, s: Any) -> None:
    s = check(s, "Result")
    for k, v in s["fields"].items():
        setattr(r, k, v)
    r.machine = None


# ---- errors ---------------------------------------------------------------------------------
def portable(error: BaseException) -> BaseException:
    """`error`, its type registered with copyreg so that it pickles as it is: rvm's errors
    build their message from keyword arguments, which the default exception pickle (the
    message as the only argument) would format twice.  Returns `error`."""
    cls = type(error)
    if isinstance(error, RVMError) and cls not in copyreg.dispatch_table:
        copyreg.pickle(cls, _reduce_error)
    return error


def _reduce_error(e: BaseException) -> tuple:
    return rebuild_error, (type(e), e.args, dict(e.__dict__))


def rebuild_error(cls: type, args: tuple, attrs: dict) -> BaseException:
    e = cls.__new__(cls)
    e.args = args
    e.__dict__.update(attrs)
    return e
