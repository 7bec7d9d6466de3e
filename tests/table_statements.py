"""Statements for the data instructions of the table (isa/table.py), each written in its own
syntax (Op.syntax) over cells the caller names by type.

The property and differential tests take their instructions from here (the reversibility,
kernel, native, AD and round-trip tests), so an instruction added to the table is exercised by
all of them without an edit to any test."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from isa.cgen import has_body
from isa.functions import CMP_SYMBOLS, FN1, FN2
from isa.table import OPS, Op
from isa.types import INT

# every data instruction with value semantics in the table (the machine's own push, pop,
# alloc and free are not: tests about them name them)
DATA_OPS: list[Op] = [op for op in OPS if has_body(op)]

INT_IMMEDIATES = ("5", "-77", "1000", "0")
REAL_IMMEDIATES = ("0.75", "-2.5", "0.001")
ROTATIONS = ("3", "13", "63", "0")
COMPARISONS = tuple(sorted(CMP_SYMBOLS.values()))


def first(options: Sequence[str]) -> str:
    return options[0]


def functions(op: Op) -> list[str]:
    """The functions op's fn operand may name: those of FN1 (one source) or FN2 (two) that
    are defined on its type; [] for an op without a fn operand."""
    if "fn" not in op.operands:
        return []
    table = FN2 if op.operands.count("a") == 2 else FN1
    return [f.name for f in table if op.types[0] in f.types]


def ops_on(types: Iterable) -> list[Op]:
    """The data instructions all of whose cells have one of `types`."""
    ok = set(types)
    return [op for op in DATA_OPS if all(t in ok for t in op.types)]


@dataclass(frozen=True)
class Case:
    id: str                 # the op's name, and for a fn family the function: addfn.x-sin
    op: Op
    fn: str | None          # the function of a fn family
    text: str               # the statement
    written: tuple[str, ...]    # the cells it writes (its y operands), in operand order


def statement(op: Op, pools: dict, choose: Callable[[Sequence[str]], str] = first,
              avoid: Iterable[str] = (), fn: str | None = None,
              sources: dict | None = None) -> str:
    """op in its syntax: its cells distinct, taken from pools[type] by `choose` (the first
    free one by default), no target in `avoid`, the sources from `sources[type]` if given;
    immediates, rotation counts, the function (or `fn`) and the comparison also by `choose`."""
    return _case(op, pools, choose, avoid, fn, sources).text


def _case(op: Op, pools: dict, choose: Callable[[Sequence[str]], str] = first,
          avoid: Iterable[str] = (), fn: str | None = None,
          sources: dict | None = None) -> Case:
    avoid = set(avoid)
    used: list[str] = []
    args: list[str] = []
    for k, kind in enumerate(op.operands):
        t = op.operand_types[k]
        if kind in ("y", "a"):
            pool = (sources or pools)[t] if kind == "a" else pools[t]
            free = [c for c in pool if c not in used and (kind == "a" or c not in avoid)]
            args.append(choose(free))
            used.append(args[-1])
        elif kind == "imm":
            args.append(choose(INT_IMMEDIATES if t == INT else REAL_IMMEDIATES))
        elif kind == "k":
            args.append(choose(ROTATIONS))
        elif kind == "fn":
            fn = fn or choose(functions(op))
            args.append("")
        else:
            assert kind == "cc", (op.name, kind)
            args.append("")
    cond = ""
    if "cc" in op.operands:
        a, b = [args[k] for k, kind in enumerate(op.operands) if kind == "a"]
        cond = f"{a} {choose(COMPARISONS)} {b}"
    written = tuple(args[k] for k, kind in enumerate(op.operands) if kind == "y")
    return Case(op.name + (f"-{fn}" if fn else ""), op, fn,
                op.syntax.format(*args, fn=fn or "", cond=cond), written)


def every_statement(pools: dict, avoid: Iterable[str] = (),
                    sources: dict | None = None) -> list[Case]:
    """Every data instruction on the types of `pools`, once per function of a fn family: the
    first free cells of each pool, targets not in `avoid`, the sources from `sources` if
    given."""
    return [_case(op, pools, avoid=avoid, fn=fn, sources=sources)
            for op in ops_on(pools) for fn in functions(op) or [None]]
