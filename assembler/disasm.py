"""Disassembler: Program -> .rasm text that assembles back to the same bytecode.

Everything is written explicitly so that reassembly needs no inference: `.fixed`, every global
with its role and exact default, every constant (literal constants interned by the assembler
included, with generated names) in address order, and every function with its parameters, a
`var` declaration per frame cell and one statement per instruction, printed with the
instruction table's `Op.syntax` (raw `alloc`/`free`, raw `jmp`/`join` with labels).
"""
from __future__ import annotations

import re

from isa.functions import CMP_ALWAYS, CMP_SYMBOLS, cond_parts
from isa.table import OPS
from isa.types import NumType
from isa.program import MODE_G, MODE_L, MODE_N, MODE_P, MODE_X, Function, Program, operand_parts

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

    def take(self, wanted: str, fallback: str) -> str:
        name = wanted if isinstance(wanted, str) else ""
        name = re.sub(r"\W", "_", name)
        if not _IDENT.match(name) or (name in KEYWORDS and not self.keywords_ok):
            name = fallback
        base, k = name, 1
        while name in self.used or (name in KEYWORDS and not self.keywords_ok):
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name


def _type(t, length, stack: bool = False) -> str:
    if stack:
        return "stack" if length is None or length < 0 else f"stack[{length - 1}]"
    name = NumType(int(t)).name_
    return name if length is None else f"{name}[{length}]" if length >= 0 else f"{name}[]"


class Disassembler:
    def __init__(self, prog: Program):
        self.p = prog
        self.F = prog.fraction_bits
        self.out: list[str] = []
        self.cells = _Names()
        self.static: dict[int, tuple[str, int, int | None]] = {}   # addr -> (name, start, length)
        self.gname: dict[int, str] = {}                            # start addr -> name
        self.fnames: list[str] = []
        self.labels: dict[int, str] = {}

    # ---- top level ----------------------------------------------------------------------
    def run(self) -> str:
        p = self.p
        self.out.append(f".fixed {self.F}")
        self.declare_static()
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
            if g.default is not None and g.stack:
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
        self.gname[addr] = name
        for k in range(1 if length is None else length):
            self.static[addr + k] = (name, addr, length)

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
        used_globals = {self.static[a][0] for a in self.global_refs(f) if a in self.static}
        names = _Names(used_globals)
        self.pnames = [names.take(q.name, f"p{j}") for j, q in enumerate(f.params)]
        self.params = f.params
        self.local_at: dict[int, tuple[str, int, int | None]] = {}
        decls = []
        offset = 0
        for loc in sorted(f.locals, key=lambda l: l.offset):
            if loc.offset < offset:
                raise ValueError(f"function {f.name!r}: local {loc.name!r} overlaps another")
            if loc.offset > offset:
                decls.append(self.var(names.take("pad", "pad"), 0, offset, loc.offset - offset))
            decls.append(self.var(names.take(loc.name, f"t{loc.offset}"), loc.type, loc.offset,
                                  loc.length, loc.stack))
            offset = loc.offset + (1 if loc.length is None else loc.length)
        if f.frame_size > offset:
            decls.append(self.var(names.take("pad", "pad"), 0, offset, f.frame_size - offset))
        params = ", ".join(f"{n}: {_type(q.type, (-1 if q.length is None else q.length) if q.is_array else None, q.stack)}"
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
        for k in range(1 if length is None else length):
            self.local_at[offset + k] = (name, offset, length)
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
                if kind in ("y", "a") and not (always and kind == "a"):
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
            return f"{self.array(x.base)}[{self.cell(x.index)}]"
        raise ValueError(f"operand word {w} has no .rasm form")

    @staticmethod
    def element(entry, addr: int, what: str, w: int) -> str:
        if entry is None:
            raise ValueError(f"operand word {w}: no cell at {what} {addr}")
        name, start, length = entry
        return name if length is None else f"{name}[{addr - start}]"

    def array(self, w: int) -> str:
        mode, payload = operand_parts(int(w))
        table = self.static if mode == MODE_G else self.local_at if mode == MODE_L else None
        if mode == MODE_P:
            return self.pnames[payload]
        entry = table.get(payload) if table is not None else None
        if entry is None or entry[1] != payload or entry[2] is None:
            raise ValueError(f"array word {w} does not name a whole array")
        return entry[0]

    def cond(self, cc: int, a: int, b: int) -> str:
        cmp, _ = cond_parts(int(cc))
        return f"{self.cell(a)} {CMP_SYMBOLS[cmp]} {self.cell(b)}"

    def output(self, t) -> str:
        """A trace of program output (show/print/printf) as its statement."""
        lengths = t.lengths or [None] * len(t.operands)
        ops = [self.cell(w) if n is None else self.array(w) for w, n in zip(t.operands, lengths)]
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
        for kind, v in zip(op.operands, vals):
            if kind in ("y", "a"):
                texts.append(self.cell(v))
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
                    args = ", ".join(self.cell(a.word) if a.length is None else self.array(a.word)
                                     for a in cs.args)
                    kw["call"] = f"{self.fnames[cs.func]}({args})"
                elif kind == "trace":
                    t = self.p.traces[v]
                    lengths = t.lengths or [None] * len(t.operands)
                    kw["trace"] = escape(t.message) + "".join(
                        ", " + (self.cell(w) if n is None else self.array(w))
                        for w, n in zip(t.operands, lengths))
                elif kind == "pc":
                    kw["label"] = self.labels[v]
        if "msg" in ops:
            m = ops["msg"]
            tr = self.p.traces[m - 1] if m else None
            kw["msg"] = "" if tr is None else f", {escape(tr.message)}" + "".join(
                ", " + escape(n) for n in tr.names or ())
        if "cc" in ops:
            k = op.operands.index("cc")
            cc = ops["cc"]
            a, b = vals[k + 1], vals[k + 2]
            always = cond_parts(int(cc))[0] == CMP_ALWAYS
            kw["if"] = "" if always else " if " + self.cond(cc, a, b)
            if not always:
                kw["cond"] = self.cond(cc, a, b)
            elif op.family == "assert":
                raise ValueError("an `assert` without a condition has no .rasm form")
        return op.syntax.format(*texts, **kw)


def disassemble(prog: Program) -> str:
    """`.rasm` text of `prog`; raises ValueError for programs the language cannot express."""
    return Disassembler(prog).run()
