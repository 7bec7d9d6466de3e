"""Bytecode verifier: what the machine relies on before it runs a Program.

`verify(program)` checks memory safety and structural sanity (see docs/machine.md and the
docstring of rvm/program.py) and raises `InvalidBytecode("program failed verification",
problems=[...])` listing every problem it finds.  Problems about an instruction read
``pc 12 (add.i): operand 1: ...``; problems about side tables name the table entry
(``global 'x': ...``, ``xtab[3]: ...``, ``callsite 2: ...``, ``function 'f': ...``).

What is checked
---------------
* top level: field types, code int64 (n, 6), lines (n, 3), fraction_bits 0..62, labels inside
  the code, files are strings;
* static memory: globals inside ``[0, n_globals)``, constants inside ``[n_globals, n_static)``,
  no overlaps, valid types and roles, defaults / constant values of the right length and
  int64 range, sizes below MAX_CELLS;
* functions: disjoint ``[begin, end]`` ranges covering the code, ``begin``/``end`` rows at those
  pcs carrying the function's index and nowhere else, parameters and locals well formed (locals
  inside the frame, not overlapping), main valid with no parameters;
* every instruction: opcode in range, unused slots zero, every operand valid for its kind in the
  enclosing function (G/L/P/X/N modes, no write to a constant, to an N operand or to a
  parameter not declared written), the cell types the opcode expects where they can be
  determined, k in 0..63, fn ids valid for the type, condition words valid (xorcmp's of its
  sources' type), pc operands inside the function, side table indices in range, an assert's
  msg 0 or 1 + a trace entry whose operands (cells, or arrays where `lengths` says) are valid;
* control: jmp/join pairing both ways; after an unconditional jmp comes a join or an end, and
  (the same rule seen backward) before an unconditional join comes a jmp or a begin;
* calls: arity, array arguments only for array parameters (G/L/P words with static extents
  inside memory / the frame), scalars for scalars (G/L/P/X: an N operand has no cell to pass by
  reference), argument types, no constant or unwritten parameter bound to a parameter the
  callee writes.

The jmp/join/assert operands of an ``always`` condition are never read: they must be 0 or
valid words (their type is not checked).  xorcmp's are always checked (it reads them).
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter

import numpy as np

from isa.derivatives import DERIVATIVE_FAMILIES
from isa.functions import CMP_ALWAYS, FN1, FN2
from isa.table import OPS, ROW_WIDTH
from isa.types import FLOAT, INT, INT64_MAX, INT64_MIN, MAX_FRACTION_BITS, TYPE_NAMES, NumType

from .errors import InvalidBytecode
from .program import (
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
)

__all__ = ["verify", "check", "MAX_CELLS"]

MAX_CELLS = 1 << 32          # static memory and every frame stay below this many cells
ROLES = (INPUT, OUTPUT, INOUT, GLOBAL)

_OP = {op.name: op.code for op in OPS}
_JMP, _JOIN, _BEGIN, _END = _OP["jmp"], _OP["join"], _OP["begin"], _OP["end"]
_CALL, _UNCALL = _OP["call"], _OP["uncall"]
_CONDITIONS = ("jmp", "join", "assert")     # their operands are unused by an `always`
_PC_SLOT = 1 + OPS[_JMP].operands.index("pc")
_CC_SLOT = 1 + OPS[_JMP].operands.index("cc")


def _want_types(op) -> tuple:
    """Expected cell type per operand position (None: not a typed cell, or untyped op;
    "cc": the type of the instruction's condition word)."""
    if not op.types and "cc" in op.operands:
        return tuple("cc" if k in ("y", "a") else None for k in op.operands)
    return tuple(t if k in ("y", "a") else None for k, t in zip(op.operands, op.operand_types))


_WANT = tuple(_want_types(op) for op in OPS)
_FN_TABLE = tuple((FN2 if op.family.endswith("fn2") else FN1) if "fn" in op.operands else None
                  for op in OPS)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_word(x) -> bool:
    return _is_int(x) and INT64_MIN <= int(x) <= INT64_MAX


def _is_type(t) -> bool:
    return _is_int(t) and 0 <= int(t) <= 3


def _tname(t) -> str:
    return TYPE_NAMES[NumType(t)]


class _Objects:
    """Sorted disjoint-ish intervals [start, end) -> (type, name, is_const)."""

    def __init__(self, items):
        self.items = sorted((i for i in items if i[1] > i[0]), key=lambda i: i[0])
        self.starts = [i[0] for i in self.items]

    def find(self, addr: int):
        i = bisect_right(self.starts, addr) - 1
        if i >= 0 and self.items[i][0] <= addr < self.items[i][1]:
            return self.items[i]
        return None


class _Verifier:
    def __init__(self, program: Program, machine: bool = False):
        self.p = program
        self.problems: list[str] = []
        # machine=True: only what the machine relies on to stay inside its buffers.  The rules
        # of a well-formed program that the machine enforces itself as it runs (the cell types
        # an instruction expects, jmp/join pairing and fall-through, unused slots) are skipped,
        # so that a test can build such a program and see the machine's trap.
        self.machine = machine

    def err(self, msg: str) -> None:
        self.problems.append(msg)

    def form(self, msg: str) -> None:
        """A problem of form only: the machine runs such a program and traps where it must."""
        if not self.machine:
            self.problems.append(msg)

    # ---------------------------------------------------------------------------------------
    def run(self) -> list[str]:
        p = self.p
        if not isinstance(p, Program):
            self.err(f"not a Program: {type(p).__name__}")
            return self.problems
        self.check_top()
        code_ok = self.check_code_array()
        self.n = len(p.code) if code_ok else 0
        self.check_lines()
        self.check_static()
        self.check_functions()
        self.check_xtab()
        self.check_callsites()
        self.check_traces()
        self.check_labels()
        if code_ok:
            self.check_instructions()
        return self.problems

    # ---- top level ------------------------------------------------------------------------
    def check_top(self) -> None:
        p = self.p
        fb = p.fraction_bits
        if not _is_int(fb) or not 0 <= int(fb) <= MAX_FRACTION_BITS:
            self.err(f"fraction_bits {fb!r} is not an integer in 0..{MAX_FRACTION_BITS}")
        if not isinstance(p.files, list) or not all(isinstance(f, str) for f in p.files):
            self.err("files must be a list of strings")
        for name in ("globals", "consts", "functions", "xtab", "callsites", "traces"):
            if not isinstance(getattr(p, name), list):
                self.err(f"{name} must be a list, not {type(getattr(p, name)).__name__}")
                setattr(self, "_" + name, [])
            else:
                setattr(self, "_" + name, getattr(p, name))

    def check_code_array(self) -> bool:
        c = self.p.code
        if not isinstance(c, np.ndarray) or c.dtype != np.int64 or c.ndim != 2 \
                or c.shape[1] != ROW_WIDTH:
            shape = getattr(c, "shape", None)
            dtype = getattr(c, "dtype", type(c).__name__)
            self.err(f"code must be an int64 array of shape (n, {ROW_WIDTH}), "
                     f"not {dtype} {shape}")
            return False
        return True

    def check_lines(self) -> None:
        ln = self.p.lines
        if ln is None:
            return
        if not isinstance(ln, np.ndarray) or ln.ndim != 2 or ln.shape != (self.n, 3) \
                or not np.issubdtype(ln.dtype, np.integer):
            self.err(f"lines must be an integer array of shape ({self.n}, 3), not "
                     f"{getattr(ln, 'dtype', type(ln).__name__)} {getattr(ln, 'shape', None)}")

    def check_labels(self) -> None:
        labels = self.p.labels
        if not isinstance(labels, dict):
            self.err("labels must be a dict pc -> name")
            return
        for pc, name in labels.items():
            if not _is_int(pc) or not 0 <= int(pc) < self.n:
                self.err(f"label {name!r}: pc {pc!r} is outside the code (0..{self.n - 1})")
            if not isinstance(name, str):
                self.err(f"label at pc {pc!r}: name {name!r} is not a string")

    # ---- static memory --------------------------------------------------------------------
    def check_static(self) -> None:
        objs = []          # (start, end, type, name, is_const)
        self.static_ok = True
        gsizes, csizes = [], []
        for i, g in enumerate(self._globals):
            gsizes.append(self._static_item(i, g, Global, "global", objs, False))
        for i, c in enumerate(self._consts):
            csizes.append(self._static_item(i, c, Const, "constant", objs, True))
        if any(s is None for s in gsizes + csizes):
            self.static_ok = False
        self.n_globals = sum(s or 0 for s in gsizes)
        self.n_static = self.n_globals + sum(s or 0 for s in csizes)
        if self.n_static > MAX_CELLS:
            self.err(f"static memory of {self.n_static} cells exceeds the limit {MAX_CELLS}")
            self.static_ok = False
        # placement: globals in [0, n_globals), constants in [n_globals, n_static)
        for (start, end, _t, name, is_const) in objs:
            lo, hi = (self.n_globals, self.n_static) if is_const else (0, self.n_globals)
            if not (lo <= start and end <= hi):
                what = "constant" if is_const else "global"
                self.err(f"{what} {name!r}: cells [{start}, {end}) are outside the {what} "
                         f"region [{lo}, {hi})")
                self.static_ok = False
        srt = sorted((o for o in objs if o[1] > o[0]), key=lambda o: o[0])
        for a, b in zip(srt, srt[1:]):
            if b[0] < a[1]:
                self.err(f"{'constant' if b[4] else 'global'} {b[3]!r} at [{b[0]}, {b[1]}) "
                         f"overlaps {'constant' if a[4] else 'global'} {a[3]!r} at "
                         f"[{a[0]}, {a[1]})")
                self.static_ok = False
        self.static = _Objects(objs)
        names = Counter(g.name for g in self._globals
                        if isinstance(g, Global) and isinstance(g.name, str))
        for dup in sorted(n for n, c in names.items() if c > 1):
            self.err(f"global name {dup!r} is declared more than once")

    def _static_item(self, i, g, cls, what, objs, is_const):
        if not isinstance(g, cls):
            self.err(f"{what} {i}: not a {cls.__name__} ({type(g).__name__})")
            return None
        label = f"{what} {g.name!r}" if isinstance(g.name, str) else f"{what} {i}"
        ok = True
        if not isinstance(g.name, str):
            self.err(f"{what} {i}: name {g.name!r} is not a string")
        if not _is_type(g.type):
            self.err(f"{label}: invalid type {g.type!r}")
            ok = False
        if not (g.length is None or (_is_int(g.length) and 0 <= int(g.length) <= MAX_CELLS)):
            self.err(f"{label}: length {g.length!r} is not None or an integer in 0..{MAX_CELLS}")
            return None
        size = 1 if g.length is None else int(g.length)
        if not _is_int(g.addr) or not 0 <= int(g.addr) <= MAX_CELLS:
            self.err(f"{label}: address {g.addr!r} is not a non-negative integer")
            return size
        if is_const:
            vals = g.values
            if not isinstance(vals, list) or len(vals) != size:
                self.err(f"{label}: needs {size} values, has "
                         f"{len(vals) if isinstance(vals, list) else type(vals).__name__}")
            elif not all(_is_word(v) for v in vals):
                self.err(f"{label}: values must be int64 words")
        else:
            if g.role not in ROLES:
                self.err(f"{label}: invalid role {g.role!r} (one of {', '.join(ROLES)})")
            d = g.default
            if d is not None:
                if not isinstance(d, list) or len(d) != size:
                    self.err(f"{label}: default needs {size} values, has "
                             f"{len(d) if isinstance(d, list) else type(d).__name__}")
                elif not all(_is_word(v) for v in d):
                    self.err(f"{label}: default values must be int64 words")
        if ok:
            name = g.name if isinstance(g.name, str) else f"#{i}"
            objs.append((int(g.addr), int(g.addr) + size, NumType(int(g.type)), name, is_const))
        return size

    # ---- functions ------------------------------------------------------------------------
    def check_functions(self) -> None:
        n = self.n
        fs = self._functions
        self.fvalid = [False] * len(fs)
        self.params_ok = [False] * len(fs)
        self.owner = [-1] * n
        self.local_objs: list[_Objects | None] = [None] * len(fs)
        ranges = []
        for i, f in enumerate(fs):
            if not isinstance(f, Function):
                self.err(f"function {i}: not a Function ({type(f).__name__})")
                continue
            label = f"function {f.name!r}" if isinstance(f.name, str) else f"function {i}"
            if not isinstance(f.name, str):
                self.err(f"function {i}: name {f.name!r} is not a string")
            ok = True
            if not (_is_int(f.frame_size) and 0 <= int(f.frame_size) <= MAX_CELLS):
                self.err(f"{label}: frame_size {f.frame_size!r} is not an integer in "
                         f"0..{MAX_CELLS}")
                ok = False
            if not isinstance(f.params, list) or not all([self._param_ok(label, j, q)
                                                          for j, q in enumerate(f.params)]):
                if not isinstance(f.params, list):
                    self.err(f"{label}: params must be a list")
                ok = False
            else:
                self.params_ok[i] = True
            if ok:
                lo = self._locals_ok(label, f)
                if lo is None:
                    ok = False
                self.local_objs[i] = lo
            if not (_is_int(f.begin) and _is_int(f.end) and 0 <= int(f.begin) < int(f.end) < n):
                self.err(f"{label}: range [begin {f.begin!r}, end {f.end!r}] is not inside the "
                         f"code (0..{n - 1}) with begin < end")
                continue
            ranges.append((int(f.begin), int(f.end), i, label))
            self.fvalid[i] = ok
        ranges.sort()
        expect = 0
        for b, e, i, label in ranges:
            if b > expect:
                self.err(f"pcs {expect}..{b - 1} are not inside any function")
            elif b < expect:
                self.err(f"{label}: range [{b}, {e}] overlaps another function")
                self.fvalid[i] = False
            for pc in range(max(b, expect), e + 1):
                self.owner[pc] = i
            expect = max(expect, e + 1)
        if expect < n:
            self.err(f"pcs {expect}..{n - 1} are not inside any function")
        names = Counter(f.name for f in fs if isinstance(f, Function) and isinstance(f.name, str))
        for dup in sorted(x for x, c in names.items() if c > 1):
            self.err(f"function name {dup!r} is declared more than once")
        m = self.p.main
        if not _is_int(m) or not 0 <= int(m) < len(fs):
            self.err(f"main {m!r} is not a function index (0..{len(fs) - 1})")
        elif isinstance(fs[int(m)], Function) and isinstance(fs[int(m)].params, list) \
                and fs[int(m)].params:
            self.err(f"main function {fs[int(m)].name!r} has parameters")

    def _param_ok(self, label, j, q) -> bool:
        if not isinstance(q, Param):
            self.err(f"{label}: parameter {j} is not a Param")
            return False
        ok = True
        if not isinstance(q.name, str):
            self.err(f"{label}: parameter {j}: name {q.name!r} is not a string")
        if not _is_type(q.type):
            self.err(f"{label}: parameter {j}: invalid type {q.type!r}")
            ok = False
        if not isinstance(q.is_array, bool) or not isinstance(q.written, bool):
            self.err(f"{label}: parameter {j}: is_array and written must be bools")
            ok = False
        if q.length is not None and not (q.is_array is True and type(q.length) is int
                                         and 0 <= q.length <= MAX_CELLS):
            self.err(f"{label}: parameter {j}: length {q.length!r} needs an array parameter "
                     f"and 0..{MAX_CELLS}")
            ok = False
        return ok

    def _locals_ok(self, label, f):
        if not isinstance(f.locals, list):
            self.err(f"{label}: locals must be a list")
            return None
        fsz = int(f.frame_size)
        items = []
        ok = True
        for j, loc in enumerate(f.locals):
            if not isinstance(loc, Local):
                self.err(f"{label}: local {j} is not a Local")
                ok = False
                continue
            ln = f"{label}: local {loc.name!r}" if isinstance(loc.name, str) else \
                f"{label}: local {j}"
            if not isinstance(loc.name, str):
                self.err(f"{label}: local {j}: name {loc.name!r} is not a string")
            if not _is_type(loc.type):
                self.err(f"{ln}: invalid type {loc.type!r}")
                ok = False
                continue
            if not (loc.length is None or (_is_int(loc.length) and int(loc.length) >= 0)):
                self.err(f"{ln}: length {loc.length!r} is not None or a non-negative integer")
                ok = False
                continue
            size = 1 if loc.length is None else int(loc.length)
            if not _is_int(loc.offset) or not (0 <= int(loc.offset)
                                               and int(loc.offset) + size <= fsz):
                self.err(f"{ln}: cells [{loc.offset!r}, +{size}) are outside the frame "
                         f"(size {fsz})")
                ok = False
                continue
            items.append((int(loc.offset), int(loc.offset) + size, NumType(int(loc.type)),
                          loc.name, False))
        srt = sorted((o for o in items if o[1] > o[0]), key=lambda o: o[0])
        for a, b in zip(srt, srt[1:]):
            if b[0] < a[1]:
                self.err(f"{label}: local {b[3]!r} at [{b[0]}, {b[1]}) overlaps local "
                         f"{a[3]!r} at [{a[0]}, {a[1]})")
                ok = False
        return _Objects(items) if ok else None

    # ---- side tables (context-free part) ---------------------------------------------------
    def check_xtab(self) -> None:
        self.xvalid = []
        for i, x in enumerate(self._xtab):
            self.xvalid.append(self._xentry_ok(i, x))

    def _xentry_ok(self, i, x) -> bool:
        if not isinstance(x, XEntry):
            self.err(f"xtab[{i}]: not an XEntry ({type(x).__name__})")
            return False
        if not (_is_word(x.base) and _is_word(x.length) and _is_word(x.index)):
            self.err(f"xtab[{i}]: base, length and index must be int64 words")
            return False
        ok = self._array_word_ok(f"xtab[{i}]: base", int(x.base), int(x.length))
        mode, payload = int(x.index) & 7, int(x.index) >> 3
        if mode not in (MODE_G, MODE_L, MODE_P, MODE_N) or payload < 0:
            self.err(f"xtab[{i}]: index word {int(x.index)} is not a scalar operand of mode "
                     f"G, L, P or N")
            ok = False
        return ok

    def _array_word_ok(self, what, word, length) -> bool:
        """Context-free check of an array word with its static length."""
        mode, payload = word & 7, word >> 3
        if mode not in (MODE_G, MODE_L, MODE_P) or payload < 0:
            self.err(f"{what} word {word} is not an array word of mode G, L or P")
            return False
        if mode == MODE_P:
            if length != -1:
                self.err(f"{what}: a parameter array has length -1 (from the call), not "
                         f"{length}")
                return False
        elif not 0 <= length <= MAX_CELLS:
            self.err(f"{what}: static length {length} is not in 0..{MAX_CELLS}")
            return False
        if mode == MODE_G and self.static_ok and payload + length > self.n_static:
            self.err(f"{what}: G array [{payload}, {payload + length}) is outside static "
                     f"memory (size {self.n_static})")
            return False
        return True

    def check_callsites(self) -> None:
        self.csvalid = []
        fs = self._functions
        for i, cs in enumerate(self._callsites):
            ok = isinstance(cs, CallSite)
            if not ok:
                self.err(f"callsite {i}: not a CallSite ({type(cs).__name__})")
            elif not _is_int(cs.func) or not 0 <= int(cs.func) < len(fs) \
                    or not isinstance(fs[int(cs.func)], Function):
                self.err(f"callsite {i}: func {cs.func!r} is not a function index "
                         f"(0..{len(fs) - 1})")
                ok = False
            elif not self.params_ok[int(cs.func)]:
                ok = False      # the callee's parameters are reported already
            elif not isinstance(cs.args, list) or not all(
                    isinstance(a, Arg) and _is_word(a.word)
                    and (a.length is None or _is_word(a.length)) for a in cs.args):
                self.err(f"callsite {i}: args must be a list of Arg(word, length) with int64 "
                         f"words")
                ok = False
            else:
                callee = fs[int(cs.func)]
                if len(cs.args) != len(callee.params):
                    self.err(f"callsite {i}: {len(cs.args)} arguments for "
                             f"{callee.name!r}, which has {len(callee.params)} parameters")
                    ok = False
                else:
                    for j, (a, q) in enumerate(zip(cs.args, callee.params)):
                        w = f"callsite {i}: argument {j} (parameter {q.name!r})"
                        if q.is_array:
                            if a.length is None:
                                self.err(f"{w}: a cell is passed to an array parameter")
                                ok = False
                            elif not self._array_word_ok(w, int(a.word), int(a.length)):
                                ok = False
                            elif q.length is not None and a.length >= 0 and a.length != q.length:
                                self.err(f"{w}: an array of {a.length} cells for a parameter "
                                         f"of {q.length}")
                                ok = False
                        elif a.length is not None:
                            self.err(f"{w}: an array is passed to a scalar parameter")
                            ok = False
                        elif int(a.word) & 7 == MODE_N:
                            self.err(f"{w}: an array length (N operand) has no cell to pass "
                                     f"by reference")
                            ok = False
                        elif int(a.word) & 7 > MODE_N or int(a.word) >> 3 < 0:
                            self.err(f"{w}: word {int(a.word)} is not a valid operand word")
                            ok = False
            self.csvalid.append(ok)

    def check_traces(self) -> None:
        self.trvalid = []
        for i, t in enumerate(self._traces):
            ok = isinstance(t, Trace) and isinstance(t.message, str) and \
                isinstance(t.operands, list) and all(_is_word(w) for w in t.operands)
            if not ok:
                self.err(f"trace {i}: must be Trace(message: str, operands: list of int64 "
                         f"words)")
            elif t.names is not None and not (isinstance(t.names, list) and
                                               all(isinstance(n, str) for n in t.names)):
                self.err(f"trace {i}: names must be None or a list of strings")
                ok = False
            elif t.lengths is not None and not (
                    isinstance(t.lengths, list) and len(t.lengths) == len(t.operands)
                    and all(n is None or (_is_int(n) and -1 <= int(n) <= MAX_CELLS)
                            for n in t.lengths)):
                self.err(f"trace {i}: lengths must be None or one None or array length "
                         f"(-1..{MAX_CELLS}) per operand")
                ok = False
            self.trvalid.append(ok)

    # ---- operands in context --------------------------------------------------------------
    def _fparams(self, fi):
        return self._functions[fi].params

    def cell(self, fi: int, word: int, target: bool):
        """Check a scalar operand word in function fi; returns (problem | None, type | None)."""
        mode, payload = word & 7, word >> 3
        if payload < 0:
            return f"operand word {word} has a negative payload", None
        if mode == MODE_G:
            if not self.static_ok:
                return None, None
            if payload >= self.n_static:
                return (f"G address {payload} is outside static memory "
                        f"(size {self.n_static})"), None
            obj = self.static.find(payload)
            if target and (obj[4] if obj else payload >= self.n_globals):
                name = f" {obj[3]!r}" if obj else ""
                return f"writes constant{name} (address {payload})", None
            return None, (obj[2] if obj else None)
        if mode in (MODE_L, MODE_P, MODE_N) and (fi < 0 or not self.fvalid[fi]):
            return None, None      # the enclosing function is already reported
        if mode == MODE_L:
            f = self._functions[fi]
            if payload >= f.frame_size:
                return (f"L offset {payload} is outside the frame of {f.name!r} "
                        f"(size {f.frame_size})"), None
            lo = self.local_objs[fi]
            obj = lo.find(payload) if lo else None
            return None, (obj[2] if obj else None)
        if mode == MODE_P or mode == MODE_N:
            f = self._functions[fi]
            if payload >= len(f.params):
                return (f"parameter {payload} does not exist ({f.name!r} has "
                        f"{len(f.params)})"), None
            q = f.params[payload]
            if mode == MODE_N:
                if target:
                    return f"N operand (length of {q.name!r}) is read-only", None
                if not q.is_array:
                    return f"N operand: parameter {q.name!r} is not an array", None
                return None, INT
            if q.is_array:
                return f"parameter {q.name!r} is an array where a cell is needed", None
            if target and not q.written:
                return f"writes parameter {q.name!r}, which is not declared written", None
            return None, NumType(int(q.type))
        if mode == MODE_X:
            if payload >= len(self._xtab):
                return f"xtab index {payload} is out of range ({len(self._xtab)} entries)", None
            if not self.xvalid[payload]:
                return f"uses invalid xtab[{payload}]", None
            x = self._xtab[payload]
            problem, t = self.array(fi, int(x.base), int(x.length), target)
            if problem:
                return f"xtab[{payload}] base: {problem}", None
            problem, it = self.cell(fi, int(x.index), False)
            if problem:
                return f"xtab[{payload}] index: {problem}", None
            if it is not None and it != INT and not self.machine:
                return f"xtab[{payload}] index has type {_tname(it)}, not int", None
            return None, t
        return f"invalid operand mode {mode} (word {word})", None

    def array(self, fi: int, word: int, length: int, target: bool):
        """Check an array word (already valid context-free) in function fi."""
        mode, payload = word & 7, word >> 3
        if mode == MODE_G:
            if not self.static_ok or length == 0:
                return None, None
            obj = self.static.find(payload)
            if obj is None or payload + length > obj[1]:
                return (f"G array [{payload}, {payload + length}) is not inside one global "
                        f"or constant"), None
            if target and obj[4]:
                return f"writes constant array {obj[3]!r}", None
            return None, obj[2]
        if fi < 0 or not self.fvalid[fi]:
            return None, None
        f = self._functions[fi]
        if mode == MODE_L:
            if payload + length > f.frame_size:
                return (f"L array [{payload}, {payload + length}) is outside the frame of "
                        f"{f.name!r} (size {f.frame_size})"), None
            lo = self.local_objs[fi]
            obj = lo.find(payload) if lo and length else None
            return None, (obj[2] if obj else None)
        # MODE_P
        if payload >= len(f.params):
            return f"parameter {payload} does not exist ({f.name!r} has {len(f.params)})", None
        q = f.params[payload]
        if not q.is_array:
            return f"parameter {q.name!r} is not an array", None
        if target and not q.written:
            return f"writes parameter {q.name!r}, which is not declared written", None
        return None, NumType(int(q.type))

    # ---- instructions ---------------------------------------------------------------------
    def check_instructions(self) -> None:
        rows = self.p.code.tolist()
        n = self.n
        first = len(self.problems)
        fs = self._functions
        nops = len(OPS)
        forks: list[int] = []
        for pc, row in enumerate(rows):
            opc = row[0]
            if not 0 <= opc < nops:
                self.err(f"pc {pc} (opcode {opc}): unknown opcode {opc} (valid 0..{nops - 1})")
                continue
            op = OPS[opc]
            where = f"pc {pc} ({op.name})"
            fi = self.owner[pc]
            kinds = op.operands
            for s in range(1 + len(kinds), ROW_WIDTH):
                if row[s] != 0:
                    self.form(f"{where}: unused slot {s} is {row[s]}, not 0")
            cc_type = None
            always = False
            if "cc" in kinds:
                w = row[1 + kinds.index("cc")]
                if not (0 <= w < 64 and (w & 15) <= 6):
                    self.err(f"{where}: invalid condition word {w} (cmp 0..6 | type 0..3 << 4)")
                else:
                    always = (w & 15) == CMP_ALWAYS
                    cc_type = NumType(w >> 4)
            if op.family == "xorcmp" and cc_type is not None and cc_type != op.types[1]:
                self.err(f"{where}: operand 2 (cc): the condition compares {_tname(cc_type)} "
                         f"values, the sources of {op.name} are {_tname(op.types[1])}")
            want = _WANT[opc]
            for k, kind in enumerate(kinds):
                w = row[1 + k]
                ow = f"{where}: operand {k + 1} ({kind})"
                if kind in ("y", "a"):
                    if always and kind == "a" and op.family in _CONDITIONS:
                        if w == 0:
                            continue
                        problem, t = self.cell(fi, w, False)
                        if problem:
                            self.err(f"{ow}: {problem} (unused by 'always' but must be 0 or "
                                     f"valid)")
                        continue
                    problem, t = self.cell(fi, w, kind == "y")
                    if problem:
                        self.err(f"{ow}: {problem}")
                        continue
                    wt = cc_type if want[k] == "cc" else want[k]
                    if wt is not None and t is not None and t != wt:
                        self.form(f"{ow}: cell has type {_tname(t)}, {op.name} needs "
                                 f"{_tname(wt)}")
                elif kind == "k":
                    if not 0 <= w <= 63:
                        self.err(f"{ow}: bit count {w} is not in 0..63")
                elif kind == "fn":
                    table = _FN_TABLE[opc]
                    if not 0 <= w < len(table):
                        self.err(f"{ow}: function id {w} is not in 0..{len(table) - 1}")
                    elif op.type not in table[w].types:
                        self.err(f"{ow}: function {table[w].name} does not exist for "
                                 f"{_tname(op.type)}")
                elif kind == "pc":
                    if not 0 <= w < n:
                        self.err(f"{ow}: pc {w} is outside the code (0..{n - 1})")
                    elif fi >= 0 and self.owner[w] != fi:
                        self.err(f"{ow}: pc {w} is outside the function "
                                 f"{fs[fi].name!r} [{fs[fi].begin}, {fs[fi].end}]")
                    else:
                        forks.append(pc)
                elif kind == "callsite":
                    self.check_call(where, fi, w)
                    if op.family in DERIVATIVE_FAMILIES:
                        self.check_deriv(where, fi, op, row)
                elif kind == "trace":
                    if not 0 <= w < len(self._traces):
                        self.err(f"{ow}: trace index {w} is out of range "
                                 f"({len(self._traces)} traces)")
                    elif self.trvalid[w]:
                        self.check_trace_operands(ow, fi, w)
                elif kind == "msg":
                    if not 0 <= w <= len(self._traces):
                        self.err(f"{ow}: message {w} is not 0 (none) or a trace entry + 1 "
                                 f"(1..{len(self._traces)})")
                    elif w and self.trvalid[w - 1]:
                        self.check_trace_operands(ow, fi, w - 1)
                elif kind == "func":
                    if not 0 <= w < len(fs):
                        self.err(f"{ow}: function index {w} is out of range ({len(fs)})")
                    elif w != fi:
                        self.err(f"{ow}: names function {w}, but pc {pc} is in "
                                 + (f"function {fi}" if fi >= 0 else "no function"))
            # begin/end only at the function's own begin/end, and those rows are begin/end
            if fi >= 0:
                f = fs[fi]
                if opc in (_BEGIN, _END) and pc not in (f.begin, f.end):
                    self.err(f"{where}: {op.name} inside the body of function {f.name!r}")
                if pc == f.begin and opc != _BEGIN:
                    self.err(f"{where}: function {f.name!r} starts here, needs 'begin'")
                if pc == f.end and opc != _END:
                    self.err(f"{where}: function {f.name!r} ends here, needs 'end'")
            # falling through into an unconditional jmp/join
            if opc == _JMP and always:
                nxt = rows[pc + 1][0] if pc + 1 < n else None
                if nxt not in (_JOIN, _END):
                    self.form(f"{where}: an unconditional jmp must be followed by a join or "
                             f"an end")
            if opc == _JOIN and always:
                prv = rows[pc - 1][0] if pc > 0 else None
                if prv not in (_JMP, _BEGIN):
                    self.form(f"{where}: an unconditional join must follow a jmp or a begin")
        # pairing
        for pc in forks:
            opc = rows[pc][0]
            t = rows[pc][_PC_SLOT]
            me, other = ("jmp", "join") if opc == _JMP else ("join", "jmp")
            want = _JOIN if opc == _JMP else _JMP
            to = rows[t][0]
            if to != want:
                tn = OPS[to].name if 0 <= to < nops else f"opcode {to}"
                self.err(f"pc {pc} ({me}): pc operand {t} is not a {other} (it is {tn})")
            elif rows[t][_PC_SLOT] != pc:
                self.form(f"pc {pc} ({me}): the {other} at {t} names {rows[t][_PC_SLOT]}, "
                         f"not {pc}")
        # every message above starts with "pc N": list them in code order
        self.problems[first:] = sorted(self.problems[first:], key=lambda s: int(s.split()[1]))

    def check_trace_operands(self, ow: str, fi: int, k: int) -> None:
        """The cells (or, where `lengths` says, arrays) a trace or an assert message reports."""
        tr = self._traces[k]
        lengths = tr.lengths or [None] * len(tr.operands)
        for j, (tw, n) in enumerate(zip(tr.operands, lengths)):
            if n is None:
                problem, _ = self.cell(fi, int(tw), False)
            elif not self._array_word_ok(f"{ow}: trace {k} operand {j}", int(tw), int(n)):
                continue
            else:
                problem, _ = self.array(fi, int(tw), int(n), False)
            if problem:
                self.err(f"{ow}: trace {k} operand {j}: {problem}")

    def check_deriv(self, where, fi, op, row) -> None:
        """A derivative statement (addgrad, addjvp, ...): its callee's first parameter is the
        scratch float output; the target, wrt and along operands are float cells (dlen -2) or
        float arrays of dlen cells (-1: parameter arrays, the wrt parameter's length)."""
        kinds = op.operands
        k = row[1]
        if 0 <= k < len(self._callsites) and self.csvalid[k]:
            callee = self._functions[int(self._callsites[k].func)]
            q = callee.params[0] if callee.params else None
            if q is None or q.is_array or int(q.type) != int(FLOAT):
                self.err(f"{where}: the first parameter of {callee.name!r} must be a float cell "
                         f"(the output the derivative is taken of)")
        n = row[kinds.index("dlen") + 1]
        if n < -2 or n > MAX_CELLS:
            self.err(f"{where}: dlen {n} is not -2 (cells), -1 (parameter arrays) or a length")
            return
        for j, kind in enumerate(kinds):
            w = row[1 + j]
            if kind not in ("dy", "da") or (op.family.endswith("jvp") and kind == "y"):
                continue
            ow = f"{where}: operand {j + 1} ({kind})"
            if n == -2:
                problem, t = self.cell(fi, w, kind == "dy")
            elif n == -1 and w & 7 != MODE_P:
                problem, t = "an array of the wrt parameter's length must be a parameter", None
            else:
                m = -1 if w & 7 == MODE_P else int(n)      # a parameter's length is the call's
                if not self._array_word_ok(ow, int(w), m):
                    continue
                problem, t = self.array(fi, int(w), m, kind == "dy")
            if problem:
                self.err(f"{ow}: {problem}")
            elif t is not None and t != FLOAT:
                self.form(f"{ow}: cell has type {_tname(t)}, {op.name} needs float")

    def check_call(self, where, fi, k) -> None:
        if not 0 <= k < len(self._callsites):
            self.err(f"{where}: callsite index {k} is out of range "
                     f"({len(self._callsites)} callsites)")
            return
        if not self.csvalid[k]:
            self.err(f"{where}: uses invalid callsite {k}")
            return
        cs = self._callsites[k]
        callee = self._functions[int(cs.func)]
        for j, (a, q) in enumerate(zip(cs.args, callee.params)):
            w = f"{where}: callsite {k} argument {j}"
            # a constant bound to a parameter the callee writes: the machine refuses the call
            # as it binds it (ReadOnlyError, at every level of calls)
            writes = bool(q.written) and not self.machine
            if q.is_array:
                problem, t = self.array(fi, int(a.word), int(a.length), writes)
            else:
                problem, t = self.cell(fi, int(a.word), writes)
            if problem:
                if writes:
                    problem += f" (bound to parameter {q.name!r} of {callee.name!r}, " \
                               f"which it may write)"
                self.err(f"{w}: {problem}")
            elif t is not None and _is_type(q.type) and t != q.type:
                self.form(f"{w}: {_tname(t)} passed to {_tname(q.type)} parameter {q.name!r} "
                         f"of {callee.name!r}")


def check(program: Program, machine: bool = False) -> list[str]:
    """Every problem `verify` would report (empty if the program is valid); machine=True: only
    those that would let the program escape the machine's buffers (what a Core refuses)."""
    return _Verifier(program, machine).run()


def verify(program: Program) -> None:
    """Raise InvalidBytecode listing every problem of `program`; return None if it is valid."""
    problems = check(program)
    if problems:
        raise InvalidBytecode("program failed verification", problems=problems)
