"""Pass 1: the program's declarations.

Reads `.fixed`, globals, constants and function signatures from the top-level items of every
file (includes already spliced in), lays out static memory (globals from address 0 in
declaration order, then declared constants) and converts defaults and constant values to raw
words.  Function bodies are compiled later (codegen.py), once every signature is known.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from isa.program import MODE_G, MODE_P, Const, Global
from isa.types import DEFAULT_FRACTION_BITS, MAX_FRACTION_BITS

from .diagnostics import Reporter
from .literals import LiteralError, literal_word
from .nodes import Decl, FixedDirective, For, From, FuncDecl, If, Label, Recovered, With
from .symbols import CellSym, FuncSig

MAX_STATIC = 1 << 32


@dataclass
class Declarations:
    F: int = DEFAULT_FRACTION_BITS
    globals: list[Global] = field(default_factory=list)
    consts: list[Const] = field(default_factory=list)
    cells: dict[str, CellSym] = field(default_factory=dict)      # globals and constants
    funcs: dict[str, FuncSig] = field(default_factory=dict)
    order: list[FuncSig] = field(default_factory=list)
    # Janus: a procedure sees only its parameters and locals (main's variables are globals)
    procedures_see_globals: bool = True


def _labels(stmts: list, out: set[str]) -> None:
    for s in stmts:
        if isinstance(s, Label):
            out.add(s.name)
        elif isinstance(s, If):
            _labels(s.then, out)
            _labels(s.els or [], out)
        elif isinstance(s, From):
            _labels(s.body, out)
            _labels(s.loop, out)
        elif isinstance(s, (For, Recovered)):
            _labels(s.body, out)
        elif isinstance(s, With):
            _labels(s.body, out)
            _labels(s.do, out)


class _Collector:
    def __init__(self, rep: Reporter):
        self.rep = rep
        self.d = Declarations()
        self.seen_decl = False
        self.fixed_pos = None
        self.addr = 0
        self.pending_consts: list[tuple[CellSym, list[int]]] = []
        self.last_pos = None

    def run(self, items: list) -> Declarations:
        for it in items:
            if isinstance(it, FixedDirective):
                self.fixed(it)
            elif isinstance(it, Decl):
                self.seen_decl = True
                self.decl(it)
            elif isinstance(it, FuncDecl):
                self.seen_decl = True
                self.func(it)
        addr = self.addr
        for sym, values in self.pending_consts:
            sym.loc = addr
            self.d.consts.append(Const(sym.name, sym.type, addr, sym.length, values))
            addr += sym.size
        if addr > MAX_STATIC and self.last_pos is not None:
            self.rep.error(self.last_pos, "E006",
                           f"static memory of {addr} cells exceeds {MAX_STATIC}")
        return self.d

    def fixed(self, it: FixedDirective) -> None:
        if not 0 <= it.bits <= MAX_FRACTION_BITS:
            self.rep.error(it.pos, "E006", f"fraction bits {it.bits} not in 0..{MAX_FRACTION_BITS}")
        elif it.bits == self.d.F:
            self.fixed_pos = self.fixed_pos or it.pos
        elif self.seen_decl:
            self.rep.error(it.pos, "E001", "`.fixed` must come before every declaration")
        elif self.fixed_pos is not None and it.bits != self.d.F:
            self.rep.error(it.pos, "E001", f"`.fixed {it.bits}` conflicts with `.fixed {self.d.F}` "
                                           f"(line {self.fixed_pos.line})")
        else:
            self.d.F = it.bits
            self.fixed_pos = it.pos

    def _name_free(self, name, table) -> bool:
        prev = table.get(name.name)
        if prev is not None:
            where = prev.pos if isinstance(prev, CellSym) else prev.decl.pos
            self.rep.error(name.pos, "E003", f"`{name.name}` is already declared "
                                             f"({self.rep.files[where.file]}:{where.line})")
            return False
        return True

    def decl(self, it: Decl) -> None:
        self.last_pos = it.name.pos
        length = it.spec.length if it.spec.array else None
        words = self.values(it, length)
        if not self._name_free(it.name, self.d.cells):
            return
        if it.role == "const":
            if words is None:
                return
            if it.spec.stack:
                self.rep.error(it.spec.pos, "E008", "a stack cannot be a constant")
                return
            sym = CellSym(it.name.name, it.spec.type, length, MODE_G, -1, "const", it.name.pos)
            self.d.cells[sym.name] = sym
            self.pending_consts.append((sym, words))
            return
        sym = CellSym(it.name.name, it.spec.type, length, MODE_G, self.addr, "global", it.name.pos,
                      it.spec.stack)
        self.d.cells[sym.name] = sym
        self.d.globals.append(Global(sym.name, sym.type, self.addr, length, it.role, words,
                                     it.spec.stack))
        self.addr += sym.size

    def values(self, it: Decl, length: int | None) -> list[int] | None:
        """Raw words of the initializer (None when there is none or it is wrong)."""
        if it.init is None:
            if it.role == "const":
                self.rep.error(it.name.pos, "E001", f"constant `{it.name.name}` needs a value")
            return None
        if it.role in ("output", "global"):
            self.rep.error(it.init_pos, "E001", f"an {it.role} starts at zero: it takes no value")
            return None
        name, n = it.name.name, 1 if length is None else length
        if length is None and it.bracketed:
            self.rep.error(it.init_pos, "E009", f"`{name}` is a scalar: give one value, not a list")
            return None
        if it.spec.stack:
            return self.stack_values(it, length)
        if length is not None and not it.bracketed:
            self.rep.error(it.init_pos, "E009", f"`{name}` is an array: give its {n} values as "
                                                f"[v1, v2, ...]")
            return None
        if len(it.init) != n:
            self.rep.error(it.init_pos, "E009", f"`{name}` has {n} cells, the initializer gives "
                                                f"{len(it.init)} values")
            return None
        words = []
        for lit in it.init:
            try:
                words.append(literal_word(lit.lit, it.spec.type, self.d.F))
            except LiteralError as e:
                self.rep.error(lit.pos, e.code, e.message)
                return None
        return words

    def stack_values(self, it: Decl, length: int) -> list[int] | None:
        """A stack's initial items, bottom first: [size, items..., zeros]."""
        if not it.bracketed:
            self.rep.error(it.init_pos, "E009", f"`{it.name.name}` is a stack: give its items as "
                                                f"[bottom, ..., top]")
            return None
        if len(it.init) > length - 1:
            self.rep.error(it.init_pos, "E009", f"`{it.name.name}` holds at most {length - 1} "
                                                f"items, the initializer gives {len(it.init)}")
            return None
        words = [len(it.init)]
        for lit in it.init:
            try:
                words.append(literal_word(lit.lit, it.spec.type, self.d.F))
            except LiteralError as e:
                self.rep.error(lit.pos, e.code, e.message)
                return None
        return words + [0] * (length - len(words))

    def func(self, it: FuncDecl) -> None:
        params: list[CellSym] = []
        seen: dict[str, CellSym] = {}
        for i, p in enumerate(it.params):
            length = (p.spec.length if p.spec.length is not None else -1) if p.spec.array else None
            sym = CellSym(p.name.name, p.spec.type, length, MODE_P, i, "param", p.name.pos,
                          p.spec.stack)
            if self._name_free(p.name, seen):
                seen[sym.name] = sym
            params.append(sym)
        if not self._name_free(it.name, self.d.funcs):
            return
        sig = FuncSig(it.name.name, len(self.d.order), params, it)
        if it.body is not None:
            _labels(it.body, sig.labels)
        self.d.funcs[sig.name] = sig
        self.d.order.append(sig)


def collect(items: list, rep: Reporter) -> Declarations:
    """Declarations of a whole program; errors go to `rep`."""
    return _Collector(rep).run(items)
