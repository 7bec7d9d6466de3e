"""Call-graph facts that need every function: which parameters are written, and the checks of
each call site that depend on it.

A parameter is written when its function writes it (it is the target of an instruction, or an
array whose element is one) or passes it to a written parameter of a callee; this is a
fixpoint over the call graph (recursion included).  Then every call site is checked: no
constant bound to a written parameter (E008), no cell or array passed twice when the callee
writes either (E005), no counter or bound of an enclosing `for` bound to a written parameter
(E013).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .diagnostics import Pos, Reporter
from .symbols import FuncSig, Ref, index_refs, overlaps


@dataclass
class Guard:
    """The cells a `for` body must not write."""
    refs: list[Ref]
    counter: str


@dataclass
class CallRecord:
    caller: FuncSig
    callee: FuncSig
    args: list[Ref]
    pos: Pos
    guards: list[Guard] = field(default_factory=list)
    by_value: list[bool] = field(default_factory=list)   # an expression argument (a temporary)
    reads: list[list[Ref]] = field(default_factory=list)  # cells its index/value expression reads


def written_params(order: list[FuncSig], direct: dict[int, set[int]],
                   calls: list[CallRecord]) -> dict[int, set[int]]:
    """Function index -> indices of the parameters it may write (fixpoint)."""
    written = {f.index: set(direct.get(f.index, ())) for f in order}
    changed = True
    while changed:
        changed = False
        for c in calls:
            mine = written[c.caller.index]
            for j, arg in enumerate(c.args):
                p = arg.param
                if p is not None and j in written[c.callee.index] and p not in mine:
                    mine.add(p)
                    changed = True
    return written


def check_calls(calls: list[CallRecord], written: dict[int, set[int]], rep: Reporter) -> None:
    for c in calls:
        w = written[c.callee.index]
        params = c.callee.params
        for j, arg in enumerate(c.args):
            if j in w and j < len(c.by_value) and c.by_value[j]:
                rep.error(arg.pos, "E008", f"an expression is passed to parameter "
                                           f"`{params[j].name}`, which `{c.callee.name}` writes: "
                                           f"pass a cell")
                continue
            if j in w and arg.const:
                rep.error(arg.pos, "E008", f"constant `{arg.text}` is passed to parameter "
                                           f"`{params[j].name}`, which `{c.callee.name}` writes")
            if j in w:
                for g in c.guards:
                    if any(overlaps(arg, r) for r in g.refs):
                        rep.error(arg.pos, "E013",
                                  f"`{arg.text}` is passed to parameter `{params[j].name}`, which "
                                  f"`{c.callee.name}` writes, inside the `for {g.counter}` loop "
                                  f"that depends on it")
                        break
            if j in w:
                for i, other in enumerate(c.args):
                    extra = c.reads[i] if i < len(c.reads) else []
                    if any(overlaps(arg, ix) for ix in index_refs(other) + extra):
                        rep.error(arg.pos, "E005", f"`{arg.text}` is the index of argument "
                                                   f"`{other.text}`, and `{c.callee.name}` writes "
                                                   f"`{params[j].name}`")
                        break
            for i in range(j):
                if (i in w or j in w) and overlaps(c.args[i], arg):
                    rep.error(arg.pos, "E005", f"`{arg.text}` and `{c.args[i].text}` are the same "
                                               f"cell, and `{c.callee.name}` writes "
                                               f"`{params[j if j in w else i].name}`")
                    break
