"""Program: what the assembler produces and the machine runs.

A Program is bytecode plus everything needed to run and explain it: the static memory image
(globals then constants), the functions with their frames, side tables for calls, indexed
operands and traces, symbols and a line table.  It is plain data: the assembler builds it, the
.rbc format stores it, `verify` checks it before the machine accepts it.

Operand words
-------------
A cell operand is one int64 word ``(payload << 3) | mode``:

  mode 0  G  absolute address in memory (globals and constants)
  mode 1  L  frame-relative: the current frame's local cell at offset payload
  mode 2  P  by-reference parameter number payload: its address is taken from the frame's
             parameter table (filled by the call)
  mode 3  X  indexed element: payload is an entry of Program.xtab (base array + index cell)
  mode 4  N  the length of array parameter number payload (read-only, never a target)

Memory layout: ``[globals | constants | frames...]``.  Constants are read-only: the assembler
and the verifier reject any write to them (including passing one to a parameter the callee
writes).

Side tables
-----------
xtab[i]      = XEntry(base, length, index): base is an array word (G: address of element 0,
               L: frame offset of element 0, P: array parameter number), length its static
               length (-1 for a parameter: taken from the call), index a scalar operand word.
callsites[i] = CallSite(func, args): each Arg is a scalar operand word, or an array word
               (mode G/L/P as in xtab bases) with its static length (-1 for P).
traces[i]    = Trace(message, operand words, names): a trace's report, or (referenced by an
               assert's msg operand, 1 + i) the message a failed assert raises.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import numpy as np

from isa.table import OPS, ROW_WIDTH
from isa.types import NumType

MODE_G, MODE_L, MODE_P, MODE_X, MODE_N = range(5)
MODE_NAMES = "GLPXN"


def operand(mode: int, payload: int) -> int:
    return (payload << 3) | mode


def operand_parts(word: int) -> tuple[int, int]:
    return word & 7, word >> 3


# roles of global cells
INPUT, OUTPUT, INOUT, GLOBAL = "input", "output", "inout", "global"


class IncompatibleProgramPickle(pickle.UnpicklingError):
    """A Program pickle of another pickle version or instruction table (defined here, below
    rvm: rvm.interop.pickling.IncompatiblePickle derives from it and from rvm.RVMError)."""


# the class Program.__setstate__ raises: rvm.interop.pickling puts its IncompatiblePickle here
# when it loads (isa does not import rvm)
INCOMPATIBLE_PICKLE: list[type[Exception]] = [IncompatibleProgramPickle]


@dataclass
class Global:
    name: str
    type: NumType
    addr: int
    length: int | None          # None: a scalar cell; n: an array of n cells
    role: str = GLOBAL          # input | output | inout | global
    default: list[int] | None = None   # raw words for inputs (length cells)
    stack: bool = False         # a named stack: cell 0 holds its size, cells 1.. its items

    @property
    def size(self) -> int:
        return 1 if self.length is None else self.length

    @property
    def is_input(self) -> bool:
        return self.role in (INPUT, INOUT)

    @property
    def is_output(self) -> bool:
        return self.role in (OUTPUT, INOUT)


@dataclass
class Const:
    name: str                   # a literal the assembler interned is named `text:type` (`2:int`)
    type: NumType
    addr: int
    length: int | None
    values: list[int]           # raw words


@dataclass
class Param:
    name: str
    type: NumType
    is_array: bool
    written: bool               # the function (or a callee) may write it
    length: int | None = None   # `p: T[n]`: every array bound to it has n cells (None: any)
    stack: bool = False         # a named stack (cell 0: the size)


@dataclass
class Local:
    name: str
    type: NumType
    offset: int                 # in the frame
    length: int | None
    stack: bool = False         # a named stack (cell 0: the size)


@dataclass
class Function:
    name: str
    begin: int                  # pc of its `begin`
    end: int                    # pc of its `end`
    params: list[Param]
    locals: list[Local]
    frame_size: int


@dataclass
class XEntry:
    base: int
    length: int
    index: int


@dataclass
class Arg:
    word: int
    length: int | None = None   # None: scalar; n >= 0 static array length; -1 from a parameter


@dataclass
class CallSite:
    func: int
    args: list[Arg]


@dataclass
class Trace:
    message: str
    operands: list[int]
    # names to report the operands' values by (None: the operands' own names); an assert's
    # message names the value of a temporary by the expression it holds, e.g. `num * try`
    names: list[str] | None = None
    # per operand: None for a cell, else the operand is an array word (as in xtab bases) and
    # this its length (-1: a parameter array's); `show a` reports a whole array or stack
    lengths: list[int | None] | None = None
    # "trace" (a debugging report), or program output: "show" (name = value, ...), "print"
    # (the message) or "printf" (the message is a printf format of the values)
    style: str = "trace"


@dataclass
class Program:
    fraction_bits: int
    code: np.ndarray                      # int64 (n, ROW_WIDTH)
    globals: list[Global]
    consts: list[Const]
    functions: list[Function]
    main: int                             # index of the entry function
    xtab: list[XEntry] = field(default_factory=list)
    callsites: list[CallSite] = field(default_factory=list)
    traces: list[Trace] = field(default_factory=list)
    lines: np.ndarray | None = None       # int32 (n, 3): file index, line, column (1-based)
    files: list[str] = field(default_factory=list)
    labels: dict[int, str] = field(default_factory=dict)   # pc -> label name
    # what each statement that used temporaries cost: (file, line, col, instructions,
    # temporaries live at once); set by the assembler, not stored in .rbc files
    costs: list[tuple[int, int, int, int, int]] | None = field(default=None, compare=False,
                                                                repr=False)

    # ---- derived layout ----------------------------------------------------------------
    @property
    def n_globals(self) -> int:
        return sum(g.size for g in self.globals)

    @property
    def n_static(self) -> int:
        """Cells of globals and constants (frames start here)."""
        return self.n_globals + sum(1 if c.length is None else c.length for c in self.consts)

    @property
    def const_range(self) -> tuple[int, int]:
        return self.n_globals, self.n_static

    def static_types(self) -> np.ndarray:
        """uint8 type of every static cell."""
        t = np.zeros(self.n_static, dtype=np.uint8)
        for g in self.globals:
            t[g.addr:g.addr + g.size] = g.type
        for c in self.consts:
            t[c.addr:c.addr + (1 if c.length is None else c.length)] = c.type
        return t

    def static_image(self) -> np.ndarray:
        """int64 initial static memory: zero globals, constant values."""
        m = np.zeros(self.n_static, dtype=np.int64)
        for c in self.consts:
            m[c.addr:c.addr + len(c.values)] = c.values
        return m

    def global_named(self, name: str) -> Global:
        for g in self.globals:
            if g.name == name:
                return g
        raise KeyError(name)

    def function_named(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def function_at(self, pc: int) -> Function | None:
        for f in self.functions:
            if f.begin <= pc <= f.end:
                return f
        return None

    def location(self, pc: int) -> tuple[str, int, int] | None:
        """(file, line, column) of the instruction at pc, if known."""
        if self.lines is None or not 0 <= pc < len(self.lines):
            return None
        fi, line, col = (int(v) for v in self.lines[pc])
        name = self.files[fi] if 0 <= fi < len(self.files) else "?"
        return name, line, col

    def op_at(self, pc: int):
        return OPS[int(self.code[pc, 0])]

    def pops_below_entry(self) -> list[bool]:
        """Per function f: can a run of f (forward) pop a value it did not push, one its caller
        left on the value stack?  Only if some row it runs is a pop: a `pop` of f or of a
        function it calls, a `push` of one it uncalls (run backward, a push pops), and so on
        down the calls (a derivative statement's own runs are its business).  A derivative
        statement whose f cannot clears no value-stack duals below its start (rvm/_nested.pxi,
        rvm/native/nested.py)."""
        fams = [OPS[int(op)].family for op in self.code[:, 0]] if len(self.code) else []
        out = []
        for fi in range(len(self.functions)):
            seen, todo, pops = {(fi, 1)}, [(fi, 1)], False
            while todo and not pops:
                g, d = todo.pop()
                f = self.functions[g]
                for pc in range(f.begin, f.end + 1):
                    fam = fams[pc]
                    if fam == ("pop" if d > 0 else "push"):
                        pops = True
                        break
                    if fam in ("call", "uncall"):
                        h = (self.callsites[int(self.code[pc, 1])].func,
                             d if fam == "call" else -d)
                        if h not in seen:
                            seen.add(h)
                            todo.append(h)
            out.append(pops)
        return out

    def __post_init__(self) -> None:
        self.code = np.ascontiguousarray(self.code, dtype=np.int64).reshape(-1, ROW_WIDTH)
        if self.lines is not None:
            self.lines = np.ascontiguousarray(self.lines, dtype=np.int32).reshape(-1, 3)

    # ---- pickling and display (docs/interop.md) -------------------------------------------
    def __getstate__(self) -> dict:
        """Pickled by value and versioned: every field, the pickle version and the hash of the
        instruction table the bytecode is for (it means nothing under another table)."""
        from isa.build import table_hash
        # attributes named with an underscore are caches of the tools (rvm/oneshot.py)
        return {"rvm_pickle": 1, "kind": "Program", "table": table_hash(),
                "fields": {k: v for k, v in self.__dict__.items() if not k.startswith("_")}}

    def __setstate__(self, state: dict) -> None:
        """Raises IncompatibleProgramPickle (a pickle.UnpicklingError; rvm.interop's
        IncompatiblePickle catches it too) for a pickle of another version or table."""
        from isa.build import table_hash
        Error = INCOMPATIBLE_PICKLE[0]
        if not isinstance(state, dict) or "rvm_pickle" not in state:
            raise Error("not a versioned rvm Program pickle (made by an rvm older than "
                        "versioned pickles?): assemble or load the program again")
        if state["rvm_pickle"] != 1:
            raise Error(f"an rvm Program pickle of version {state['rvm_pickle']!r}: this rvm "
                        "reads version 1; send the .rasm or .rbc file instead")
        if state["table"] != table_hash():
            raise Error("this Program was pickled by an rvm with another instruction table "
                        f"(table hash {str(state['table'])[:12]}..., here "
                        f"{table_hash()[:12]}...): its bytecode would be misread; unpickle it "
                        "with the same rvm version, or send the .rasm source and assemble it")
        self.__dict__.update(state["fields"])

    def __repr__(self) -> str:
        where = f"{self.files[0]}: " if self.files else ""
        return (f"Program({where}{len(self.code)} instructions, {len(self.functions)} "
                f"functions, {len(self.globals)} globals, fraction_bits={self.fraction_bits})")
