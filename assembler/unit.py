"""The assembly unit: everything emitted so far, in the shape of rvm.program.Program.

Holds the code rows with their line-table rows, the constant region (declared constants, then
literal constants interned in order of first use), the xtab / callsite / trace side tables
(equal entries shared, numbered in order of first use, so that the disassembler's output numbers
them the same way) and the label names.  Code generation appends to it; `program()` freezes it into a Program.
"""
from __future__ import annotations

import numpy as np

from isa.table import OP_BY_NAME, Op, ROW_WIDTH
from isa.types import NumType
from rvm.program import CallSite, Const, Function, Global, Program, Trace, XEntry

from .diagnostics import Pos
from .literals import word_text

PC_SLOT = 1 + OP_BY_NAME["jmp"].operands.index("pc")
JMP, JOIN = OP_BY_NAME["jmp"], OP_BY_NAME["join"]


class Unit:
    def __init__(self, fraction_bits: int, globals_: list[Global], consts: list[Const]):
        self.F = fraction_bits
        self.globals = globals_
        self.consts = list(consts)
        self.n_globals = sum(g.size for g in globals_)
        self.next_addr = self.n_globals + sum(len(c.values) for c in consts)
        self.interned: dict[tuple[int, int], int] = {}
        self.rows: list[list[int]] = []
        self.lines: list[tuple[int, int, int]] = []
        self.regions: list[tuple] = []
        self.xtab: list[XEntry] = []
        self._xkeys: dict[tuple[int, int, int], int] = {}
        self.callsites: list[CallSite] = []
        self._callkeys: dict[tuple, int] = {}
        self.traces: list[Trace] = []
        self._tracekeys: dict[tuple, int] = {}
        self.labels: dict[int, str] = {}
        self.functions: list[Function] = []
        self._ids = 0

    @property
    def pc(self) -> int:
        return len(self.rows)

    def new_id(self) -> int:
        self._ids += 1
        return self._ids

    def emit(self, op: Op, values: list[int], pos: Pos, region: tuple = ()) -> int:
        """Append one instruction (operands in Op.operands order); returns its pc."""
        row = [op.code, *values]
        row += [0] * (ROW_WIDTH - len(row))
        self.rows.append(row)
        self.lines.append((pos.file, pos.line, pos.col))
        self.regions.append(region)
        return len(self.rows) - 1

    def patch_pc(self, pc: int, target: int) -> None:
        self.rows[pc][PC_SLOT] = target

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
        key = (t.message, tuple(t.operands))
        i = self._tracekeys.get(key)
        if i is None:
            i = self._tracekeys[key] = len(self.traces)
            self.traces.append(t)
        return i

    def program(self, main: int, files: list[str]) -> Program:
        code = np.array(self.rows, dtype=np.int64).reshape(-1, ROW_WIDTH)
        lines = np.array(self.lines, dtype=np.int32).reshape(-1, 3)
        return Program(fraction_bits=self.F, code=code, globals=self.globals, consts=self.consts,
                       functions=self.functions, main=main, xtab=self.xtab,
                       callsites=self.callsites, traces=self.traces, lines=lines, files=files,
                       labels=dict(sorted(self.labels.items())))
