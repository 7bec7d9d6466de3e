"""The assembler pipeline: source -> items (includes spliced) -> declarations -> code -> Program.

Errors of every stage are collected in one Reporter and raised together at the end.
"""
from __future__ import annotations

from collections.abc import Sequence

from rvm.program import Program

from .calls import CallRecord, check_calls, written_params
from .codegen import compile_function
from .declarations import collect
from .diagnostics import Pos, Reporter
from .includes import load_source
from .unit import Unit


def assemble_text(text: str, filename: str, include_paths: Sequence[str]) -> Program:
    rep = Reporter()
    items = load_source(text, filename, include_paths, rep)
    decls = collect(items, rep)
    unit = Unit(decls.F, decls.globals, decls.consts)
    calls: list[CallRecord] = []
    direct: dict[int, set[int]] = {}
    for sig in decls.order:
        unit.functions.append(compile_function(unit, decls, sig, rep, calls, direct))
    written = written_params(decls.order, direct, calls)
    check_calls(calls, written, rep)
    for sig, f in zip(decls.order, unit.functions):
        for j, p in enumerate(f.params):
            p.written = j in written[sig.index]
    main = decls.funcs.get("main")
    if main is None:
        rep.error(Pos(0, 1, 1), "E011", "no `main` function: declare `func main() { ... }`")
    elif main.params:
        rep.error(main.decl.name.pos, "E011", "`main` must have no parameters")
    rep.raise_if_any()
    return unit.program(main.index, list(rep.files))
