"""The rvm assembler: `.rasm` text -> `rvm.program.Program`, and back.

    from assembler import assemble, assemble_file, disassemble, AssemblyError, Diagnostic
    prog = assemble(text, filename="<string>", include_paths=())
    text = disassemble(prog)          # assembles back to the same bytecode

The language is described in docs/rasm.md.  All errors of a source are reported at once in an
`AssemblyError` whose `diagnostics` are `Diagnostic` records (file, line, col, code, message).
Modules: lexer -> parser (nodes) -> includes -> declarations -> codegen (operands, calls,
unit) -> driver; shapes.py derives the statement forms from isa/table.py; disasm.py goes back.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from rvm.program import Program

from .diagnostics import AssemblyError, Diagnostic
from .disasm import disassemble as _disassemble
from .driver import assemble_text

__all__ = ["assemble", "assemble_file", "disassemble", "AssemblyError", "Diagnostic"]


def assemble(text: str, filename: str = "<string>", include_paths: Sequence[str] = ()) -> Program:
    """Assemble `.rasm` source text into a Program; raises AssemblyError."""
    return assemble_text(text, filename, include_paths)


def assemble_file(path: str | os.PathLike, include_paths: Sequence[str] = ()) -> Program:
    """Assemble the `.rasm` file at `path` (includes resolve relative to it first)."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    return assemble(text, path, include_paths)


def disassemble(prog: Program) -> str:
    """`.rasm` text of a Program that assembles back to the same bytecode."""
    return _disassemble(prog)
