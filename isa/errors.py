"""Exceptions of the machine.

Every runtime trap is a `Trap` carrying the instruction, its source location, the step number,
the direction and the values involved.  A trap happens before the faulting instruction changes
anything, so the machine that raised it can still be inspected and run backward.
"""
from __future__ import annotations

from typing import Any


class RVMError(Exception):
    """Base class of every error rvm raises on purpose."""


class InvalidBytecode(RVMError):
    """A Program or .rbc file that the machine will not run."""

    def __init__(self, message: str, problems: list[str] | None = None):
        self.problems = problems or [message]
        super().__init__(message if problems is None else
                         message + ":\n" + "\n".join("  " + p for p in self.problems[:20]) +
                         (f"\n  ... and {len(self.problems) - 20} more"
                          if len(self.problems) > 20 else ""))


class FormatError(InvalidBytecode):
    """A .rbc file that is not a well-formed file of a supported version."""

    def __init__(self, message: str):
        super().__init__(message)


class Trap(RVMError):
    """A runtime trap.  Attributes:

    pc           address of the faulting instruction
    instruction  its text, e.g. ``join top if i != 0``
    location     (file, line, column) or None
    step         the step counter t when it happened (instructions completed)
    direction    +1 forward, -1 backward
    values       dict of the values it read, by name
    detail       the explanation without the location prefix
    """

    code = "trap"

    def __init__(self, detail: str, *, pc: int = -1, instruction: str = "",
                 location: tuple[str, int, int] | None = None, step: int = 0,
                 direction: int = 1, values: dict[str, Any] | None = None):
        self.detail = detail
        self.pc = pc
        self.instruction = instruction
        self.location = location
        self.step = step
        self.direction = direction
        self.values = dict(values or {})
        super().__init__(self.format())

    def format(self) -> str:
        loc = self.location
        where = f"{loc[0]}:{loc[1]}:{loc[2]}: " if loc else ""
        way = "forward" if self.direction > 0 else "backward"
        text = f"{where}{self.kind}: {self.detail}"
        if self.instruction:
            text += f"\n  at pc {self.pc}: {self.instruction}  (step {self.step}, running {way})"
        if self.values:
            text += "\n  values: " + ", ".join(f"{k} = {v}" for k, v in self.values.items())
        return text

    @property
    def kind(self) -> str:
        return type(self).__name__


class ComeFromError(Trap):
    code = "come-from"


class AncillaError(Trap):
    code = "ancilla"


class PopError(Trap):
    code = "pop"


class StackUnderflow(Trap):
    code = "stack-underflow"


class StackOverflow(Trap):
    code = "stack-overflow"


class AliasError(Trap):
    code = "alias"


class ReadOnlyError(Trap):
    code = "read-only"


class BoundsError(Trap):
    code = "bounds"


class DivisionByZero(Trap):
    code = "div0"


class DomainError(Trap):
    code = "domain"


class RangeError(Trap):
    code = "range"


class AssertionTrap(Trap):
    code = "assert"


class StepLimit(Trap):
    """The step budget ran out.  Not a fault of the program: the run can be continued."""
    code = "step-limit"


class PathDivergence(Trap):
    """Running back, the machine did not retrace the forward run: a join sent control the
    other way than it came in (float rounding changed a value its condition reads), or a
    cell that never rounds (int, fixed, lns) did not come back.  The run reached the start
    (or the end) anyway, so no trap stopped it; gradients and round trips are then wrong.
    `pc`/`location` name the first join whose direction changed, when it was found."""
    code = "path"


class BytecodeTrap(Trap):
    """The machine met a state the verifier should have excluded."""
    code = "bytecode"


class NestingError(Trap):
    """A derivative statement (`grad`, `jvp`) the machine cannot run: nested deeper than the
    machine's second-order modes reach, operands of different lengths, or a scratch output
    that is not zero before or after the nested run (docs/ad.md)."""
    code = "nesting"


TRAPS: tuple[type[Trap], ...] = (ComeFromError, AncillaError, PopError, StackUnderflow,
                                 StackOverflow, AliasError, ReadOnlyError, BoundsError,
                                 DivisionByZero, DomainError, RangeError, AssertionTrap,
                                 StepLimit, BytecodeTrap, NestingError)
