"""Build Program objects by hand for tests (no assembler needed).

    pb = ProgramBuilder()
    n = pb.input("n", INT, default=10)
    x = pb.inout("x", INT)
    one = pb.const("one", INT, 1)           # constants come after every global
    f = pb.func("main")
    i = f.local("i", INT)
    f.join("top", came_from="back", cond=("!=", INT, i, ZERO))
    f.op("add.i", x, one)
    f.op("inc.i", i)
    f.jmp("back", to="top", cond=("<", INT, i, n))
    ...
    prog = pb.build()

Operand words are plain ints (rvm.program.operand); labels, function names and constant
addresses are resolved by `build()`.  Every instruction gets a line-table entry
(``test.rasm``, line = pc + 1, column 1) so traps have a location.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from isa.functions import CMP_ALWAYS, CMP_BY_SYMBOL, FN1_BY_NAME, FN2_BY_NAME, cond_word
from isa.table import OP_BY_NAME, ROW_WIDTH
from isa.types import DEFAULT_FRACTION_BITS, NumType
from rvm.program import (
    GLOBAL,
    INOUT,
    INPUT,
    MODE_G,
    MODE_L,
    MODE_N,
    MODE_P,
    MODE_X,
    OUTPUT,
    Arg,
    CallSite,
    Const,
    Function,
    Global,
    Local,
    Param,
    Program,
    Trace,
    XEntry,
    operand,
)

Cond = tuple  # (symbol, NumType, a_word, b_word) or None for `always`


@dataclass
class Arr:
    """An array argument of a call: base word (G/L/P) and static length (-1: a parameter's)."""
    word: int
    length: int = -1


@dataclass
class _Row:
    op: str
    words: list[Any]                     # ints, or ("label", name) / ("site", ...) refs


def _cond(cond: Cond | None) -> list[int]:
    if cond is None:
        return [cond_word(CMP_ALWAYS, NumType.INT), 0, 0]
    sym, t, a, b = cond
    return [cond_word(CMP_BY_SYMBOL[sym], t), a, b]


@dataclass
class FuncBuilder:
    pb: ProgramBuilder
    name: str
    params: list[Param] = field(default_factory=list)
    locals: list[Local] = field(default_factory=list)
    frame_size: int = 0
    rows: list[_Row] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)     # name -> body index

    # -- declarations ----------------------------------------------------------------------
    def param(self, name: str, t: NumType, written: bool = True, array: bool = False) -> int:
        self.params.append(Param(name, t, array, written))
        return operand(MODE_P, len(self.params) - 1)

    def length(self, param_word: int) -> int:
        """The N operand: len() of an array parameter."""
        return operand(MODE_N, param_word >> 3)

    def local(self, name: str, t: NumType, length: int | None = None) -> int:
        off = self.frame_size
        self.locals.append(Local(name, t, off, length))
        self.frame_size += 1 if length is None else length
        return operand(MODE_L, off)

    # -- instructions ----------------------------------------------------------------------
    def _label_here(self, label: str | None) -> None:
        if label is not None:
            assert label not in self.labels, label
            self.labels[label] = len(self.rows)

    def op(self, name: str, *words: Any, label: str | None = None) -> FuncBuilder:
        """Any instruction by mnemonic; operands in isa.table order (fn may be a name)."""
        opdef = OP_BY_NAME[name]
        words = list(words)
        for i, kind in enumerate(opdef.operands):
            if kind == "fn" and isinstance(words[i], str):
                table = FN2_BY_NAME if opdef.family in ("addfn2", "subfn2") else FN1_BY_NAME
                words[i] = table[words[i]].id
        assert len(words) == len(opdef.operands), (name, words)
        self._label_here(label)
        self.rows.append(_Row(name, words))
        return self

    def jmp(self, label: str, to: str, cond: Cond | None = None) -> FuncBuilder:
        """A fork named `label` that jumps to the join named `to` when `cond` holds."""
        self._label_here(label)
        self.rows.append(_Row("jmp", _cond(cond) + [("label", to)]))
        return self

    def join(self, label: str, came_from: str, cond: Cond | None = None) -> FuncBuilder:
        """A join named `label`: control came from the jmp `came_from` iff `cond` holds."""
        self._label_here(label)
        self.rows.append(_Row("join", _cond(cond) + [("label", came_from)]))
        return self

    def assert_(self, cond: Cond) -> FuncBuilder:
        self.rows.append(_Row("assert", _cond(cond)))
        return self

    def call(self, func: str, *args: int | Arr, uncall: bool = False) -> FuncBuilder:
        self.rows.append(_Row("uncall" if uncall else "call", [("site", func, args)]))
        return self

    def uncall(self, func: str, *args: int | Arr) -> FuncBuilder:
        return self.call(func, *args, uncall=True)

    def trace(self, message: str, *words: int) -> FuncBuilder:
        self.pb.traces.append(Trace(message, list(words)))
        self.rows.append(_Row("trace", [len(self.pb.traces) - 1]))
        return self


class ProgramBuilder:
    def __init__(self, fraction_bits: int = DEFAULT_FRACTION_BITS):
        self.F = fraction_bits
        self.globals: list[Global] = []
        self.const_specs: list[tuple[str, NumType, list[int], int | None]] = []
        self.funcs: list[FuncBuilder] = []
        self.xtab: list[XEntry] = []
        self.traces: list[Trace] = []
        self.n_globals = 0

    # -- memory ----------------------------------------------------------------------------
    def glob(self, name: str, t: NumType, length: int | None = None, role: str = GLOBAL,
             default: int | Sequence[int] | None = None) -> int:
        """A global (raw-word default for inputs); returns the G word of (element 0 of) it."""
        assert not self.const_specs, "declare every global before the first constant"
        if default is not None and not isinstance(default, (list, tuple, np.ndarray)):
            default = [default]
        g = Global(name, t, self.n_globals, length, role,
                   None if default is None else [int(v) for v in default])
        self.globals.append(g)
        self.n_globals += g.size
        return operand(MODE_G, g.addr)

    def input(self, name, t, length=None, default=None) -> int:
        return self.glob(name, t, length, INPUT, default)

    def output(self, name, t, length=None) -> int:
        return self.glob(name, t, length, OUTPUT)

    def inout(self, name, t, length=None, default=None) -> int:
        return self.glob(name, t, length, INOUT, default)

    def const(self, name: str, t: NumType, values: int | Sequence[int],
              length: int | None = None) -> int:
        """A constant (raw words); returns its G word."""
        vals = [int(v) for v in values] if isinstance(values, (list, tuple)) else [int(values)]
        addr = self.n_globals + sum(len(c[2]) for c in self.const_specs)
        self.const_specs.append((name, t, vals, length))
        return operand(MODE_G, addr)

    def x(self, base: int, length: int, index: int) -> int:
        """An X operand: element `index` (a cell word) of the array at `base` (G/L/P word)."""
        self.xtab.append(XEntry(base, length, index))
        return operand(MODE_X, len(self.xtab) - 1)

    # -- functions -------------------------------------------------------------------------
    def func(self, name: str) -> FuncBuilder:
        f = FuncBuilder(self, name)
        self.funcs.append(f)
        return f

    def build(self, main: str = "main") -> Program:
        index = {f.name: k for k, f in enumerate(self.funcs)}
        rows: list[list[int]] = []
        functions: list[Function] = []
        labels: dict[int, str] = {}
        callsites: list[CallSite] = []
        starts = []
        pc = 0
        for f in self.funcs:
            starts.append(pc)
            pc += len(f.rows) + 2
        for k, f in enumerate(self.funcs):
            begin = starts[k]
            at = {name: begin + 1 + i for name, i in f.labels.items()}
            labels.update({p: name for name, p in at.items()})
            rows.append([OP_BY_NAME["begin"].code, k])
            for r in f.rows:
                words = []
                for w in r.words:
                    if isinstance(w, tuple) and w[0] == "label":
                        words.append(at[w[1]])
                    elif isinstance(w, tuple) and w[0] == "site":
                        _, callee, args = w
                        callsites.append(CallSite(index[callee], [
                            Arg(a.word, a.length) if isinstance(a, Arr) else Arg(a)
                            for a in args]))
                        words.append(len(callsites) - 1)
                    else:
                        words.append(int(w))
                rows.append([OP_BY_NAME[r.op].code] + words)
            rows.append([OP_BY_NAME["end"].code, k])
            functions.append(Function(f.name, begin, begin + len(f.rows) + 1, f.params, f.locals,
                                      f.frame_size))
        code = np.zeros((len(rows), ROW_WIDTH), dtype=np.int64)
        for i, r in enumerate(rows):
            code[i, :len(r)] = [np.int64(np.uint64(v & ((1 << 64) - 1)).view(np.int64))
                                if not -(1 << 63) <= v < (1 << 63) else v for v in r]
        consts, addr = [], self.n_globals
        for name, t, vals, length in self.const_specs:
            consts.append(Const(name, t, addr, length, vals))
            addr += len(vals)
        lines = np.array([[0, i + 1, 1] for i in range(len(rows))], dtype=np.int32)
        return Program(self.F, code, self.globals, consts, functions, index[main], self.xtab,
                       callsites, self.traces, lines, ["test.rasm"], labels)
