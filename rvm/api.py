"""The Python API: assemble or load a Program, run it forward or backward, read the results.

    import rvm
    prog = rvm.assemble("programs/rfib.rasm")
    res = rvm.run(prog, {"n": 10})            # res.outputs == {"out": 55}
    back = rvm.run(prog, res.outputs, reverse=True)   # back.inputs == {"n": 10}
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .machine import Machine
from .program import Program


def assemble(source: str | os.PathLike, filename: str | None = None,
             include_paths: tuple[str, ...] = ()) -> Program:
    """Assemble `.rasm` text, or the file at a path (a `.rbc` path is loaded instead).

    A str is taken as a path when it names an existing file and has no newline."""
    from assembler import assemble as asm_text

    if isinstance(source, os.PathLike) or ("\n" not in source and os.path.isfile(source)):
        return load(source, include_paths=include_paths)
    return asm_text(source, filename or "<string>", include_paths)


def load(path: str | os.PathLike, include_paths: tuple[str, ...] = ()) -> Program:
    """Load a program file: `.rbc` bytecode (checked) or `.rasm` source (assembled)."""
    from assembler import assemble_file
    from assembler import rbc

    p = Path(path)
    if p.suffix == ".rbc":
        return rbc.read(p)
    return assemble_file(p, include_paths)


@dataclass
class Result:
    """What a run produced.  `inputs` and `outputs` are read from the final state: after a
    forward run `outputs` are the results; after a reverse run `inputs` are."""
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    stats: dict[str, int]
    machine: Machine
    garbage: list[str] = field(default_factory=list)   # globals left nonzero that should be zero


def run(program: Program | str | os.PathLike, values: Mapping[str, Any] | None = None, *,
        reverse: bool = False, max_steps: int | None = None,
        trace: Callable[..., None] | None = None, **machine_options: Any) -> Result:
    """Run `program` forward from `values` (its inputs), or with reverse=True backward from
    `values` (its outputs).  Traps raise rvm.errors.Trap subclasses."""
    if not isinstance(program, Program):
        program = assemble(program)
    m = Machine(program, trace=trace, **machine_options)
    if reverse:
        m.reset_end(dict(values or {}))
        m.run(direction=-1, max_steps=max_steps)
    else:
        m.reset(dict(values or {}))
        m.run(direction=+1, max_steps=max_steps)
    return Result(m.inputs(), m.outputs(), m.stats, m, garbage_cells(m, at_end=not reverse))


def garbage_cells(m: Machine, at_end: bool = True) -> list[str]:
    """Globals that the program's contract says should be zero now but are not: at the end,
    every global that is not an output; at the start, every global that is not an input."""
    out = []
    for g in m.program.globals:
        keep = g.is_output if at_end else g.is_input
        if not keep and m.mem[g.addr:g.addr + g.size].any():
            out.append(g.name)
    return out
