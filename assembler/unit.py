"""The assembly unit: everything emitted so far, in the shape of rvm.program.Program.

Holds the code rows with their line-table rows (flat int64/int32 arrays: 48 + 12 bytes per
instruction, so a program of a million instructions costs tens of megabytes, not gigabytes),
the constant region (declared constants, then literal constants interned in order of first
use), the xtab / callsite / trace side tables (equal entries shared, numbered in order of first
use, so that the disassembler's output numbers them the same way) and the label names.  Code
generation appends to it; `program()` freezes it into a Program.
"""
from __future__ import annotations

from array import array

import numpy as np

from isa.program import CallSite, Const, Function, Global, Program, Trace, XEntry
from isa.table import OP_BY_NAME, ROW_WIDTH, Op
from isa.types import NumType

from .diagnostics import Pos
from .literals import word_text

PC_SLOT = 1 + OP_BY_NAME["jmp"].operands.index("pc")
JMP, JOIN = OP_BY_NAME["jmp"], OP_BY_NAME["join"]
_ZEROS = (0,) * ROW_WIDTH


class Unit:
    def __init__(self, fraction_bits: int, globals_: list[Global], consts: list[Const]):
        self.F = fraction_bits
        self.globals = globals_
        self.consts = list(consts)
        self.n_globals = sum(g.size for g in globals_)
        self.next_addr = self.n_globals + sum(len(c.values) for c in consts)
        self.interned: dict[tuple[int, int], int] = {}
        self.code = array("q")                 # ROW_WIDTH words per instruction
        self.lines = array("i")                # file, line, column per instruction
        self.regions: list[tuple] = []         # the `with` region of each instruction
        self.xtab: list[XEntry] = []
        self._xkeys: dict[tuple[int, int, int], int] = {}
        self.callsites: list[CallSite] = []
        self._callkeys: dict[tuple, int] = {}
        self.traces: list[Trace] = []
        self._tracekeys: dict[tuple, int] = {}
        self.labels: dict[int, str] = {}
        self.functions: list[Function] = []
        self.stats: list[tuple[Pos, int, int]] = []   # (statement, instructions, temporaries)
        self._ids = 0

    @property
    def pc(self) -> int:
        return len(self.regions)

    def new_id(self) -> int:
        self._ids += 1
        return self._ids

    def emit(self, op: Op, values: list[int], pos: Pos, region: tuple = ()) -> int:
        """Append one instruction (operands in Op.operands order); returns its pc."""
        code = self.code
        code.append(op.code)
        code.extend(values)
        if len(values) < ROW_WIDTH - 1:
            code.extend(_ZEROS[:ROW_WIDTH - 1 - len(values)])
        self.lines.extend(pos)
        self.regions.append(region)
        return len(self.regions) - 1

    def emit_row(self, row, line, region: tuple) -> None:
        """Append a whole row (ROW_WIDTH words) with its line-table entry."""
        self.code.extend(row)
        self.lines.extend(line)
        self.regions.append(region)

    def row(self, pc: int) -> list[int]:
        return self.code[pc * ROW_WIDTH:(pc + 1) * ROW_WIDTH].tolist()

    def line(self, pc: int) -> tuple[int, int, int]:
        return tuple(self.lines[pc * 3:pc * 3 + 3])

    def opcode(self, pc: int) -> int:
        return self.code[pc * ROW_WIDTH]

    def slot(self, pc: int, k: int) -> int:
        return self.code[pc * ROW_WIDTH + k]

    def patch_pc(self, pc: int, target: int) -> None:
        self.code[pc * ROW_WIDTH + PC_SLOT] = target

    def label(self, pc: int, name: str) -> None:
        self.labels.setdefault(pc, name)

    def intern(self, t: NumType, word: int) -> int:
        """Address of the literal constant (t, word), allocated on first use."""
        key = (int(t), word)
        addr = self.interned.get(key)
        if addr is None:
            addr = self.interned[key] = self.next_addr
            self.next_addr += 1
            self.consts.append(Const(f"{word_text(word, t, self.F)}:{t.name_}", t, addr, None,
                                     [word]))
        return addr

    def xentry(self, base: int, length: int, index: int) -> int:
        key = (base, length, index)
        i = self._xkeys.get(key)
        if i is None:
            i = self._xkeys[key] = len(self.xtab)
            self.xtab.append(XEntry(base, length, index))
        return i

    def callsite(self, cs: CallSite) -> int:
        """Index of an equal call site, appended on first use."""
        key = (cs.func, tuple((a.word, a.length) for a in cs.args))
        i = self._callkeys.get(key)
        if i is None:
            i = self._callkeys[key] = len(self.callsites)
            self.callsites.append(cs)
        return i

    def trace(self, t: Trace) -> int:
        """Index of an equal trace entry, appended on first use."""
        key = (t.message, tuple(t.operands), tuple(t.names or ()), tuple(t.lengths or ()),
               t.style)
        i = self._tracekeys.get(key)
        if i is None:
            i = self._tracekeys[key] = len(self.traces)
            self.traces.append(t)
        return i

    def program(self, main: int, files: list[str]) -> Program:
        code = np.frombuffer(self.code, dtype=np.int64).reshape(-1, ROW_WIDTH).copy()
        lines = np.frombuffer(self.lines, dtype=np.int32).reshape(-1, 3).copy()
        return Program(fraction_bits=self.F, code=code, globals=self.globals, consts=self.consts,
                       functions=self.functions, main=main, xtab=self.xtab,
                       callsites=self.callsites, traces=self.traces, lines=lines, files=files,
                       labels=dict(sorted(self.labels.items())),
                       costs=[(p.file, p.line, p.col, n, k) for p, n, k in self.stats])
