"""Disassembler: Program -> .rasm text that assembles back to the same bytecode.

Everything is written explicitly so that reassembly needs no inference: `.fixed`, every global
with its role and exact default, every constant (literal constants interned by the assembler
included, with generated names) in address order, and every function with its parameters, a
`var` declaration per local (a run of frame cells no local covers is one `pad` array) and one
statement per instruction, printed with the instruction table's `Op.syntax` (raw `alloc`/`free`,
raw `jmp`/`join` with labels).

Time and memory are proportional to the Program's tables, never to the sizes its arrays or frames
declare: cells are found by address in sorted runs, not in a map of every cell.
`rasm_problems` lists what the language cannot express (the .rbc loader refuses such files).
"""
from __future__ import annotations

import re
from bisect import bisect_right

from isa.functions import CMP_ALWAYS, CMP_SYMBOLS, cond_parts
from isa.program import (
    MODE_G,
    MODE_L,
    MODE_N,
    MODE_P,
    MODE_X,
    Arg,
    Function,
    Program,
    operand_parts,
)
from isa.table import OPS
from isa.types import NumType

from .lexer import escape
from .literals import word_text
from .parser import KEYWORDS
from .shapes import fn_table

_IDENT = re.compile(r"[A-Za-z_]\w*\Z")


class _Names:
    """Unique, valid names within one namespace."""

    def __init__(self, taken: set[str] | None = None, keywords_ok: bool = False):
        self.used = set(taken or ())
        self.keywords_ok = keywords_ok
        self.next: dict[str, int] = {}      # base -> first suffix not yet tried

    def take(self, wanted: str, fallback: str) -> str:
        name = wanted if isinstance(wanted, str) else ""
        name = re.sub(r"\W", "_", name)
        if not _IDENT.match(name) or (name in KEYWORDS and not self.keywords_ok):
            name = fallback
        base, k = name, self.next.get(name, 1)
        while name in self.used or (name in KEYWORDS and not self.keywords_ok):
            name = f"{base}_{k}"
            k += 1
        self.next[base] = k
        self.used.add(name)
        return name


class _Runs:
    """Named runs of cells, found by address: memory and time per lookup do not depend on how
    many cells a run has (a frame of 2**32 cells is one entry)."""

    def __init__(self):
        self.items: list[tuple[int, int, str, int | None]] = []    # (start, end, name, length)
        self.starts: list[int] = []

    def add(self, name: str, start: int, length: int | None) -> None:
        size = 1 if length is None else length
        if size > 0:
            self.items.append((start, start + size, name, length))

    def seal(self) -> None:
        self.items.sort(key=lambda r: r[0])
        self.starts = [r[0] for r in self.items]

    def get(self, addr: int):
        """(name, start, length) of the run holding cell `addr`, or None."""
        i = bisect_right(self.starts, addr) - 1
        if i < 0:
            return None
        start, end, name, length = self.items[i]
        return (name, start, length) if addr < end else None

    def __contains__(self, addr: int) -> bool:
        return self.get(addr) is not None


def _type(t, length, stack: bool = False) -> str:
    if stack:
        return "stack" if length is None or length < 0 else f"stack[{length - 1}]"
    name = NumType(int(t)).name_
    return name if length is None else f"{name}[{length}]" if length >= 0 else f"{name}[]"


def _whole(entry, start: int, length: int) -> bool:
    """Whether a run found at `start` is exactly an array of `length` cells from there."""
    return entry is not None and entry[1] == start and entry[2] is not None \
        and entry[2] == length


class Disassembler:
    def __init__(self, prog: Program):
        self.p = prog
        self.F = prog.fraction_bits
        self.out: list[str] = []
        self.cells = _Names()
        self.static = _Runs()                                      # globals and constants
        self.fnames: list[str] = []
        self.labels: dict[int, str] = {}

    # ---- top level ----------------------------------------------------------------------
    def run(self) -> str:
        p = self.p
        self.out.append(f".fixed {self.F}")
        self.declare_static()
        self.static.seal()
        self.name_functions()
        self.name_labels()
        for i, f in enumerate(p.functions):
            self.function(i, f)
        return "\n".join(self.out) + "\n"

    def declare_static(self) -> None:
        p = self.p
        for g in p.globals:
            name = self.cells.take(g.name, f"g{g.addr}")
            self.place(name, g.addr, g.length)
            line = f"{g.role:<6} {name}: {_type(g.type, g.length, g.stack)}"
            if g.default is not None and g.stack and not g.default[0]:
                pass            # empty: as a stack without `= [...]` starts
            elif g.default is not None and not g.is_input and not any(g.default):
                pass            # an output or global starts at zero and takes no value
            elif g.default is not None and g.stack:
                line += " = [" + ", ".join(word_text(int(w), g.type, self.F)
                                           for w in g.default[1:1 + int(g.default[0])]) + "]"
            elif g.default is not None:
                line += " = " + self.values(g.default, g.type, g.length)
            self.out.append(line)
        for c in sorted(p.consts, key=lambda c: c.addr):
            name = self.cells.take(c.name, f"c{c.addr}")
            self.place(name, c.addr, c.length)
            self.out.append(f"const  {name}: {_type(c.type, c.length)} = "
                            + self.values(c.values, c.type, c.length))

    def place(self, name: str, addr: int, length: int | None) -> None:
        if length is not None and length < 1:
            raise ValueError(f"`{name}`: an array of length {length} has no .rasm form")
        self.static.add(name, addr, length)

    def values(self, words, t, length) -> str:
        texts = [word_text(int(w), t, self.F) for w in words]
        return texts[0] if length is None else "[" + ", ".join(texts) + "]"

    def name_functions(self) -> None:
        names = _Names(keywords_ok=True)
        main = self.p.main
        names.used.add("main")
        for i, f in enumerate(self.p.functions):
            self.fnames.append("main" if i == main else names.take(
                "" if f.name == "main" else f.name, f"f{i}"))

    def name_labels(self) -> None:
        p = self.p
        names = _Names()
        wanted = set(p.labels)
        for pc, row in enumerate(p.code.tolist()):
            if OPS[row[0]].family in ("jmp", "join"):
                wanted.add(pc)
        for pc in sorted(wanted):
            self.labels[pc] = names.take(p.labels.get(pc, ""), f"L{pc}")

    # ---- functions ----------------------------------------------------------------------
    def function(self, i: int, f: Function) -> None:
        p = self.p
        body = range(f.begin + 1, f.end)
        used_globals = {e[0] for e in map(self.static.get, self.global_refs(f)) if e}
        names = _Names(used_globals)
        self.pnames = [names.take(q.name, f"p{j}") for j, q in enumerate(f.params)]
        self.params = f.params
        self.local_at = _Runs()
        decls = []
        offset = 0
        for loc in sorted(f.locals, key=lambda l: l.offset):
            if loc.length == 0:
                continue        # no cells: nothing refers to it, and `T[0]` is not .rasm
            if loc.offset < offset:
                raise ValueError(f"function {f.name!r}: local {loc.name!r} overlaps another")
            if loc.offset > offset:
                decls.append(self.var(names.take("pad", "pad"), 0, offset, loc.offset - offset))
            decls.append(self.var(names.take(loc.name, f"t{loc.offset}"), loc.type, loc.offset,
                                  loc.length, loc.stack))
            offset = loc.offset + (1 if loc.length is None else loc.length)
        if f.frame_size > offset:
            decls.append(self.var(names.take("pad", "pad"), 0, offset, f.frame_size - offset))
        self.local_at.seal()
        params = ", ".join(
            f"{n}: {_type(q.type, (-1 if q.length is None else q.length) if q.is_array else None, q.stack)}"  # noqa: E501
            for n, q in zip(self.pnames, f.params))
        self.out.append("")
        self.out.append(f"func {self.fnames[i]}({params}) {{")
        self.out += ["    " + d for d in decls]
        rows = p.code.tolist()
        for pc in body:
            text = self.instruction(rows[pc])
            lab = self.labels.get(pc)
            self.out.append(f"{lab}: {text}" if lab else f"    {text}")
        self.out.append("}")

    def var(self, name: str, t, offset: int, length: int | None, stack: bool = False) -> str:
        self.local_at.add(name, offset, length)
        return f"var {name}: {_type(t, length, stack)}"

    def global_refs(self, f: Function) -> set[int]:
        """Static addresses the function's instructions name (to avoid shadowing them)."""
        p = self.p
        out: set[int] = set()

        def word(w: int) -> None:
            mode, payload = operand_parts(int(w))
            if mode == MODE_G:
                out.add(payload)
            elif mode == MODE_X and 0 <= payload < len(p.xtab):
                word(p.xtab[payload].base)
                word(p.xtab[payload].index)

        for row in p.code[f.begin + 1:f.end].tolist():
            op = OPS[row[0]]
            always = "cc" in op.operands and cond_parts(row[1])[0] == CMP_ALWAYS
            for k, kind in enumerate(op.operands):
                v = row[1 + k]
                if kind in ("y", "a", "dy", "da") and not (always and kind == "a"):
                    word(v)
                elif kind == "callsite":
                    for a in p.callsites[v].args:
                        word(a.word)
                elif kind == "trace":
                    for w in p.traces[v].operands:
                        word(w)
        return out

    # ---- operands -----------------------------------------------------------------------
    def cell(self, w: int) -> str:
        mode, payload = operand_parts(int(w))
        if mode == MODE_G:
            return self.element(self.static.get(payload), payload, "G", w)
        if mode == MODE_L:
            return self.element(self.local_at.get(payload), payload, "L", w)
        if mode == MODE_P:
            return self.pnames[payload]
        if mode == MODE_N:
            return f"len({self.pnames[payload]})"
        if mode == MODE_X:
            x = self.p.xtab[payload]
            return f"{self.array(x.base, x.length)}[{self.cell(x.index)}]"
        raise ValueError(f"operand word {w} has no .rasm form")

    @staticmethod
    def element(entry, addr: int, what: str, w: int) -> str:
        if entry is None:
            raise ValueError(f"operand word {w}: no cell at {what} {addr}")
        name, start, length = entry
        return name if length is None else f"{name}[{addr - start}]"

    def array(self, w: int, length: int) -> str:
        """The name of the array that array word `w` of static `length` names."""
        mode, payload = operand_parts(int(w))
        if mode == MODE_P:
            return self.pnames[payload]
        table = self.static if mode == MODE_G else self.local_at if mode == MODE_L else None
        entry = table.get(payload) if table is not None else None
        if not _whole(entry, payload, length):
            raise ValueError(f"array word {w} (length {length}) does not name a whole array")
        return entry[0]

    def cond(self, cc: int, a: int, b: int) -> str:
        cmp, _ = cond_parts(int(cc))
        return f"{self.cell(a)} {CMP_SYMBOLS[cmp]} {self.cell(b)}"

    def output(self, t) -> str:
        """A trace of program output (show/print/printf) as its statement."""
        lengths = t.lengths or [None] * len(t.operands)
        ops = [self.cell(w) if n is None else self.array(w, n) for w, n in zip(t.operands, lengths)]
        if t.style == "show":
            return "show " + ", ".join(ops)
        return f"{t.style} {escape(t.message)}" + "".join(", " + o for o in ops)

    def instruction(self, row: list[int]) -> str:
        op = OPS[row[0]]
        if op.family == "trace" and self.p.traces[row[1]].style != "trace":
            return self.output(self.p.traces[row[1]])
        vals = row[1:1 + len(op.operands)]
        texts: list[str] = []
        kw: dict[str, str] = {}
        ops = dict(zip(op.operands, vals))
        always = "cc" in ops and cond_parts(int(ops["cc"]))[0] == CMP_ALWAYS
        for kind, v in zip(op.operands, vals):
            if kind == "a" and always:
                texts.append("")        # a condition's operands: there is no condition
            elif kind in ("y", "a"):
                texts.append(self.cell(v))
            elif kind in ("dy", "da"):
                n = int(ops["dlen"])
                texts.append(self.cell(v) if n == -2 else self.array(v, n))
            elif kind == "imm":
                texts.append(word_text(v, op.type, self.F))
            elif kind == "k":
                texts.append(str(v))
            else:
                texts.append("")
                if kind == "fn":
                    kw["fn"] = fn_table(op)[v].name
                elif kind == "callsite":
                    cs = self.p.callsites[v]
                    args = ", ".join(self.cell(a.word) if a.length is None
                                     else self.array(a.word, a.length)
                                     for a in cs.args)
                    kw["call"] = f"{self.fnames[cs.func]}({args})"
                elif kind == "trace":
                    t = self.p.traces[v]
                    lengths = t.lengths or [None] * len(t.operands)
                    kw["trace"] = escape(t.message) + "".join(
                        ", " + (self.cell(w) if n is None else self.array(w, n))
                        for w, n in zip(t.operands, lengths))
                elif kind == "pc":
                    kw["label"] = self.labels[v]
        if "msg" in ops:
            m = ops["msg"]
            tr = self.p.traces[m - 1] if m else None
            k = op.operands.index("cc")
            # .rasm names the two compared values or none; the values the assembler's own
            # checks report (a stack's size, a popped cell) are left to the message
            names = tr.names if tr is not None and tr.names and len(tr.names) == 2 and \
                list(tr.operands) == [vals[k + 1], vals[k + 2]] else ()
            kw["msg"] = "" if tr is None else f", {escape(tr.message)}" + "".join(
                ", " + escape(n) for n in names)
        if "cc" in ops:
            k = op.operands.index("cc")
            cc = ops["cc"]
            a, b = vals[k + 1], vals[k + 2]
            kw["if"] = "" if always else " if " + self.cond(cc, a, b)
            if not always:
                kw["cond"] = self.cond(cc, a, b)
            elif "{cond}" in op.syntax:
                raise ValueError(f"{_a(op.family)} `{op.family}` without a condition has no "
                                 f".rasm form")
        return op.syntax.format(*texts, **kw)


def _a(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _overlap(prog: Program, a: Arg, b: Arg) -> bool:
    """Whether two call arguments certainly share a cell (the assembler's E005 test)."""
    (ma, pa), (mb, pb) = operand_parts(int(a.word)), operand_parts(int(b.word))
    if MODE_N in (ma, mb):
        return False
    if ma == MODE_X or mb == MODE_X:
        if ma == mb:
            xa, xb = prog.xtab[pa], prog.xtab[pb]
            return (int(xa.base), int(xa.index)) == (int(xb.base), int(xb.index))
        x, other = (pa, b) if ma == MODE_X else (pb, a)
        return other.length is not None and int(other.word) == int(prog.xtab[x].base)
    if ma != mb:
        return False
    if ma == MODE_P:
        return pa == pb
    ea = pa + (a.length if a.length is not None and a.length > 0 else 1)
    eb = pb + (b.length if b.length is not None and b.length > 0 else 1)
    return pa < eb and pb < ea


def _aliased(prog: Program, targets: list[int], sources: list[int]) -> bool:
    """Whether an instruction's operands certainly share a cell the way the assembler refuses
    (E005): a target that is a source, another target, or an index the instruction reads."""
    def key(w: int):
        mode, payload = operand_parts(int(w))
        if mode == MODE_X:
            x = prog.xtab[payload]
            return ("x", int(x.base), int(x.index))
        return ("c", int(w)) if mode != MODE_N else None

    indexes = {("c", int(prog.xtab[operand_parts(int(w))[1]].index))
               for w in targets + sources if operand_parts(int(w))[0] == MODE_X}
    seen = set()
    for t in targets:
        k = key(t)
        if k in seen or k in indexes:
            return True
        seen.add(k)
    return any(key(s) in seen for s in sources)


def _function_problems(prog: Program, code: list, f: Function, static: _Runs, frame: _Runs,
                       problems: list[str]) -> None:
    """rasm_problems of the instructions of function f."""
    stacks = {(MODE_G, int(g.addr)): g.stack for g in prog.globals}
    stacks.update({(MODE_L, int(v.offset)): v.stack for v in f.locals})
    def whole(pc: int, what: str, w: int, length: int) -> None:
        mode, start = operand_parts(int(w))
        if mode == MODE_P:
            return
        table, where = (static, "static memory") if mode == MODE_G else \
            (frame, f"the frame of {f.name!r}")
        if not _whole(table.get(start), start, length):
            problems.append(f"pc {pc}: {what} is cells [{start}, {start + length}) of "
                            f"{where}, not a whole declared array")

    def scalar(pc: int, w: int) -> None:
        mode, payload = operand_parts(int(w))
        if mode == MODE_X:
            x = prog.xtab[payload]
            whole(pc, f"the array of indexed operand xtab[{payload}]", x.base, x.length)
            scalar(pc, x.index)
            (bm, bp), (im, ip) = operand_parts(int(x.base)), operand_parts(int(x.index))
            n = f.params[bp].length if bm == MODE_P else x.length
            if im == MODE_N and n is not None and f.params[ip].length is not None and \
                    f.params[ip].length >= n:
                # `len(p)` of a declared length is that number: an index out of bounds
                problems.append(f"pc {pc}: indexed operand xtab[{payload}] indexes an array "
                                f"of {n} cells by the length {f.params[ip].length}")
        elif mode == MODE_L and frame.get(payload) is None:
            problems.append(f"pc {pc}: frame cell {payload} of {f.name!r} is in no declared "
                            f"local")
        elif mode == MODE_P and f.params[payload].is_array:
            problems.append(f"pc {pc}: array parameter {f.params[payload].name!r} as a cell")
        elif mode == MODE_N and not f.params[payload].is_array:
            problems.append(f"pc {pc}: the length of parameter {f.params[payload].name!r}, "
                            f"which is not an array")

    def is_stack(w: int) -> bool:
        mode, payload = operand_parts(int(w))
        if mode == MODE_P:
            return bool(f.params[payload].stack)
        return bool(stacks.get((mode, payload), False))

    def call(pc: int, cs) -> None:
        params = prog.functions[cs.func].params
        for j, a in enumerate(cs.args):
            if a.length is None:
                scalar(pc, a.word)
                continue
            whole(pc, f"call argument {j}", a.word, a.length)
            if is_stack(a.word) != bool(params[j].stack):
                problems.append(f"pc {pc}: call argument {j} is "
                                f"{'a' if is_stack(a.word) else 'no'} stack for a parameter "
                                f"that is {'one' if params[j].stack else 'not'}")
            mode, payload = operand_parts(int(a.word))
            n = f.params[payload].length if mode == MODE_P else a.length
            if n is not None and params[j].length is not None and n != params[j].length:
                problems.append(f"pc {pc}: call argument {j} is an array of {n} cells for a "
                                f"parameter of {params[j].length}")
        for j, a in enumerate(cs.args):
            for i in range(j):
                b = cs.args[i]
                if (params[i].written or params[j].written) and _overlap(prog, a, b):
                    problems.append(f"pc {pc}: call arguments {i} and {j} are the same cell, "
                                    f"and the callee writes one")
            if params[j].written and any(
                    operand_parts(int(b.word))[0] == MODE_X and
                    _overlap(prog, a, Arg(prog.xtab[operand_parts(int(b.word))[1]].index))
                    for b in cs.args):
                problems.append(f"pc {pc}: call argument {j} is the index of another, and "
                                f"the callee writes it")

    for pc in range(f.begin + 1, f.end):
        row = code[pc]
        op = OPS[row[0]]
        always = "cc" in op.operands and \
            cond_parts(int(row[1 + op.operands.index("cc")]))[0] == CMP_ALWAYS
        targets = [v for kind, v in zip(op.operands, row[1:]) if kind == "y"]
        sources = [v for kind, v in zip(op.operands, row[1:]) if kind == "a" and not always]
        if targets and _aliased(prog, targets, sources):
            problems.append(f"pc {pc}: a source or index of `{op.name}` is its target")
        for kind, v in zip(op.operands, row[1:]):
            if kind == "y" or (kind == "a" and not always):
                scalar(pc, v)
            elif kind == "callsite":
                call(pc, prog.callsites[v])
            elif kind == "trace":
                t = prog.traces[v]
                for j, (w, n) in enumerate(zip(t.operands, t.lengths or
                                               [None] * len(t.operands))):
                    if n is None:
                        scalar(pc, w)
                    else:
                        whole(pc, f"traced array {j}", w, n)
            elif kind == "cc" and always and "{cond}" in op.syntax:
                problems.append(f"pc {pc}: {_a(op.family)} `{op.family}` without a condition")


def rasm_problems(prog: Program) -> list[str]:
    """What in a verified Program the .rasm language cannot express, so that `disassemble`
    would refuse it: a global or constant array of no cells, an `assert` without a condition,
    an array operand (call argument, indexed or traced array) that is not a whole declared array
    of its length.  Empty when the program has a .rasm form.  Time proportional to the
    Program's tables."""
    problems: list[str] = []
    static = _Runs()
    for what, items in (("global", prog.globals), ("constant", prog.consts)):
        for g in items:
            if g.length is not None and g.length < 1:
                problems.append(f"{what} {g.name!r}: an array of {g.length} cells")
            elif what == "global" and not g.is_input and g.default is not None and \
                    any(g.default):
                problems.append(f"{g.role} {g.name!r}: a start value (an {g.role} starts at "
                                f"zero)")
            elif getattr(g, "stack", False) and g.default is not None and \
                    0 <= g.default[0] < len(g.default) and any(g.default[1 + g.default[0]:]):
                problems.append(f"stack {g.name!r}: its start value has nonzero cells above "
                                f"its {g.default[0]} items")
            static.add(g.name, int(g.addr), g.length)
    static.seal()
    code = prog.code.tolist()
    for f in prog.functions:
        for q in f.params:
            if q.is_array and q.length is not None and q.length < 1:
                problems.append(f"function {f.name!r}: parameter {q.name!r} is an array of "
                                f"{q.length} cells")
        frame = _Runs()
        for loc in f.locals:
            frame.add(loc.name, int(loc.offset), loc.length)
        frame.seal()
        _function_problems(prog, code, f, static, frame, problems)
    return problems


def disassemble(prog: Program) -> str:
    """`.rasm` text of `prog`; raises ValueError for programs the language cannot express."""
    return Disassembler(prog).run()
