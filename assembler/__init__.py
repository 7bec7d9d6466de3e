"""The rvm assembler: `.rasm` text (and Janus source) -> `isa.program.Program`, and back.

    from assembler import assemble, assemble_file, disassemble, AssemblyError, Diagnostic
    prog = assemble(text, filename="<string>", include_paths=())
    prog = assemble_janus(janus_text, "prog.ja")
    text = disassemble(prog)          # assembles back to the same bytecode

The language is described in docs/rasm.md.  All errors of a source are reported at once in an
`AssemblyError` whose `diagnostics` are `Diagnostic` records (file, line, col, code, message).
Modules: lexer -> parser (nodes; fastpath for simple lines) -> includes -> declarations ->
codegen (lower and exprs for expressions; operands, calls, unit) -> driver; janus.py is the
Janus front end; shapes.py derives the statement forms from isa/table.py; disasm.py goes back.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from isa.program import Program

from .diagnostics import AssemblyError, Diagnostic
from .disasm import disassemble as _disassemble
from .driver import assemble_text

__all__ = ["assemble", "assemble_file", "assemble_janus", "disassemble", "AssemblyError",
           "Diagnostic"]


def assemble(text: str, filename: str = "<string>", include_paths: Sequence[str] = ()) -> Program:
    """Assemble `.rasm` source text into a Program; raises AssemblyError."""
    return assemble_text(text, filename, include_paths)


def assemble_file(path: str | os.PathLike, include_paths: Sequence[str] = ()) -> Program:
    """Assemble the `.rasm` file at `path` (includes resolve relative to it first)."""
    path = os.fspath(path)
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AssemblyError([Diagnostic(path, 1, 1, "E001", f"not a program: the file is not "
                                                            f"UTF-8 text (byte {e.start} is "
                                                            f"0x{data[e.start]:02x}); a binary "
                                                            f"file?", None)]) from None
    return assemble(text, path, include_paths)


def assemble_janus(text: str, filename: str = "<janus>", modular: bool = False,
                   stack_capacity: int | None = None) -> Program:
    """Compile a Janus program (the jana dialect, docs/rasm.md "The Janus front end");
    `modular` is jana's -m.  Raises AssemblyError."""
    from .janus import STACK_CAPACITY
    from .janus import assemble_janus as _janus
    return _janus(text, filename, modular, stack_capacity or STACK_CAPACITY)


def disassemble(prog: Program) -> str:
    """`.rasm` text of a Program that assembles back to the same bytecode."""
    return _disassemble(prog)
