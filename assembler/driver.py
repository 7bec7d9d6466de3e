"""The assembler pipeline: source -> items (includes spliced) -> declarations -> code -> Program.

Pass 1 reads every file's declarations and function signatures, skipping function bodies;
pass 2 compiles each body while reading it (parser.Parser.stream_body), so that no syntax tree
of a body is ever held whole.  Errors of every stage are collected in one Reporter and raised
together at the end.
"""
from __future__ import annotations

from collections.abc import Sequence

from isa.program import Program

from . import codegen
from .calls import CallRecord, check_calls, written_params
from .codegen import CodeLimit, FunctionCompiler
from .declarations import Declarations, collect
from .diagnostics import Pos, Reporter
from .includes import load_source
from .lexer import TokenStream
from .parser import Parser
from .symbols import FuncSig
from .unit import Unit

FAST_PATH = True       # read simple lines with assembler/fastpath.py (tests switch it off)


def compile_body(fc: FunctionCompiler, sig: FuncSig, rep: Reporter) -> None:
    """Compile a function's body from its source (pass 2)."""
    d = sig.decl
    fc.begin()
    if d.body is not None:
        fc.block(d.body)
        return
    ref = d.body_at
    ts = TokenStream(rep.texts[ref.file], ref.file, rep, ref.offset, ref.line)
    while True:
        t = ts.peek()
        if (t.is_("{") and t.pos.line == ref.line and t.pos.col == ref.col) or t.kind == "eof":
            break
        ts.next()
    Parser(ts, rep, fast=FAST_PATH).stream_body(fc)


def assemble_text(text: str, filename: str, include_paths: Sequence[str]) -> Program:
    rep = Reporter()
    items = load_source(text, filename, include_paths, rep)
    decls = collect(items, rep)
    return compile_program(decls, rep)


def compile_program(decls: Declarations, rep: Reporter) -> Program:
    """Pass 2 over the declarations of pass 1 (shared with the Janus front end)."""
    unit = Unit(decls.F, decls.globals, decls.consts)
    calls: list[CallRecord] = []
    direct: dict[int, set[int]] = {}
    compilers = []
    for sig in decls.order:
        fc = FunctionCompiler(unit, decls, sig, rep, calls, direct)
        try:
            compile_body(fc, sig, rep)
        except CodeLimit as e:
            rep.error(e.pos, "E006",
                f"the program exceeds {codegen.MAX_CODE} instructions (the limit "
                                     f"of the bytecode format); nothing after this was compiled")
            rep.raise_if_any()
        unit.functions.append(fc.finish(sig.decl.end_pos))
        compilers.append(fc)
    for fc in compilers:
        fc.report_labels(compilers)
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
