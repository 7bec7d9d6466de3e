"""The fast path of the parser: the common one-line statements read by one regular expression.

Large .rasm files are mostly generated straight-line code: `x[3] += a[4] * b`, `inc i`,
`rot x[2], x[5], theta[7]`, `call f(a, b[1])`.  For such a line the parser would make a token
object per word and run the expression grammar; this module matches the whole line once and
builds the very same syntax nodes (same positions, same literals), then hands them to the code
generator as the general path would.  A line it does not recognise exactly -- anything with a
keyword, a hex literal, parentheses, a label, a brace -- goes to the general parser, so the
language has one grammar: tests/test_fastpath.py checks that both paths give the same nodes and
the same bytecode.
"""
from __future__ import annotations

import re

from isa.table import ROW_WIDTH

from .diagnostics import Pos
from .literals import Lit
from .nodes import Binary, CallExpr, Index, Instr, Literal, Match, Name, Swap, Update
from .parser import KEYWORDS
from .shapes import BY_LEAD

_new = tuple.__new__
_ID = r"[A-Za-z_]\w*"
_NUM = r"-?(?:\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)"
_WS = r"[ \t]*"
_END = r"[ \t]*(?:[;#].*)?\r?\Z"


def _opd(g: str) -> str:
    """An operand: a name, an element a[i] / a[3], or a decimal literal (groups g*)."""
    return (rf"(?:(?P<{g}n>{_ID})(?:\[{_WS}(?P<{g}i>{_ID}|\d+){_WS}\])?"
            rf"|(?P<{g}l>{_NUM}))")


_UPDATE = re.compile(
    rf"(?P<ind>{_WS})(?P<tn>{_ID})(?:\[{_WS}(?P<ti>{_ID}|\d+){_WS}\])?{_WS}"
    rf"(?P<op>[-+^*/]=|<=>){_WS}{_opd('a')}"
    rf"(?:{_WS}(?P<bo>[-+*/%&^]){_WS}{_opd('b')})?{_END}")
_KEYWORD = re.compile(
    rf"(?P<ind>{_WS})(?P<kw>inc|dec|neg|not|swap|rot|irot)[ \t]+{_opd('a')}"
    rf"(?:{_WS},{_WS}{_opd('b')}(?:{_WS},{_WS}{_opd('c')})?)?{_END}")
_CALL = re.compile(rf"(?P<ind>{_WS})(?P<kw>call|uncall)[ \t]+(?P<f>{_ID}){_WS}"
                   rf"\((?P<args>[^()]*)\){_END}")
_ARG = re.compile(rf"{_WS}{_opd('a')}{_WS}\Z")
_BLANK = re.compile(r"[ \t]*(?:[;#].*)?\r?\Z")
_LEADS = {k: BY_LEAD[k][0] for k in ("inc", "dec", "neg", "not", "swap", "rot", "irot", "call",
                                     "uncall")}


class FastPath:
    """Reads simple lines of one file for a parser (see Parser.stream_statements)."""

    def __init__(self, file: int):
        self.file = file
        self.compilers: dict[int, FastCompiler] = {}

    def run(self, ts, fc) -> None:
        """Compile simple lines of the stream's text into fc, from its next unread line up to
        the first line that is not simple (left unread)."""
        comp = self.compilers.get(id(fc))
        if comp is None or comp.fc is not fc:
            if not hasattr(fc, "scope"):
                return
            comp = self.compilers[id(fc)] = FastCompiler(fc, self.file)
        if ts.i < len(ts.toks) or ts.done or fc.pending or fc.guards:
            return                          # (a waiting label is bound by the general path)
        comp.check_scope()                  # (the scope does not change within a run)
        from . import codegen
        comp.room = codegen.MAX_CODE - 2 - fc.unit.pc
        text, start, ln = ts.text, ts.offset, ts.line
        size = len(text)
        update, keyword, blank = _UPDATE.match, _KEYWORD.match, _BLANK.match
        find = text.find
        try:
            while start < size:
                end = find("\n", start)
                if end < 0:
                    end = size
                line = text[start:end]
                if comp.n + 2 >= comp.room:
                    break                   # near the code limit: the general path reports it
                if "=" in line:
                    m = update(line)
                    if m is None:
                        break
                    comp.update(m, ln)
                elif not blank(line):
                    m = keyword(line)
                    if m is None:
                        break
                    comp.keyword(m, ln)
                start, ln = end + 1, ln + 1
        except _Bail:
            pass
        comp.flush()
        ts.offset, ts.line = start, ln

    def line(self, line: str, ln: int):
        """The statement node of a simple line, True for a blank or comment line, None when
        the general parser must read it."""
        m = _UPDATE.match(line)
        if m is not None:
            return self.update(m, ln)
        if _BLANK.match(line):
            return True
        m = _KEYWORD.match(line)
        if m is not None:
            return self.keyword(m, ln)
        m = _CALL.match(line)
        if m is not None:
            return self.call(m, ln)
        return None

    def pos(self, ln: int, col: int) -> Pos:
        return _new(Pos, (self.file, ln, col + 1))

    def operand(self, m, g: str, ln: int):
        """The operand node of groups g*, or None when it is not fast-path material."""
        name = m.group(g + "n")
        if name is not None:
            if name in KEYWORDS:
                return None
            pos = self.pos(ln, m.start(g + "n"))
            ix = m.group(g + "i")
            if ix is None:
                return Name(pos, name)
            ipos = self.pos(ln, m.start(g + "i"))
            if ix[0].isdigit():
                index = Literal(ipos, Lit("int", int(ix), ix, 10))
            elif ix in KEYWORDS:
                return None
            else:
                index = Name(ipos, ix)
            return Index(pos, name, index)
        return self.literal(m.group(g + "l"), self.pos(ln, m.start(g + "l")))

    @staticmethod
    def literal(text: str, pos: Pos) -> Literal:
        body = text.lstrip("-")
        if body.isdigit():
            v = int(body)
            return Literal(pos, Lit("int", -v if text[0] == "-" else v, text, 10))
        return Literal(pos, Lit("real", text, text))

    def update(self, m, ln: int):
        tn = m.group("tn")
        if tn in KEYWORDS:
            return None
        tpos = self.pos(ln, m.start("tn"))
        ti = m.group("ti")
        if ti is None:
            target = Name(tpos, tn)
        elif ti[0].isdigit():
            target = Index(tpos, tn, Literal(self.pos(ln, m.start("ti")), Lit("int", int(ti), ti)))
        elif ti in KEYWORDS:
            return None
        else:
            target = Index(tpos, tn, Name(self.pos(ln, m.start("ti")), ti))
        a = self.operand(m, "a", ln)
        if a is None:
            return None
        op = m.group("op")
        bo = m.group("bo")
        if op == "<=>":
            if bo is not None or isinstance(a, Literal):
                return None
            return Swap(tpos, target, a)
        if bo is not None:
            b = self.operand(m, "b", ln)
            if b is None:
                return None
            e = Binary(self.pos(ln, m.start("bo")), bo, a, b)
        else:
            e = a
        return Update(tpos, target, op, self.pos(ln, m.start("op")), e)

    def keyword(self, m, ln: int):
        kw = m.group("kw")
        shape = _LEADS[kw]
        ops = []
        for g in "abc":
            if m.group(g + "n") is None and m.group(g + "l") is None:
                break
            o = self.operand(m, g, ln)
            if o is None:
                return None
            ops.append(o)
        if len(ops) != len(shape.operands):
            return None
        return Instr(self.pos(ln, m.start("kw")), [Match(shape, dict(enumerate(ops)))])

    def call(self, m, ln: int):
        f = m.group("f")
        args = []
        text = m.group("args")
        base = m.start("args")
        if text.strip():
            k = 0
            for part in text.split(","):
                am = _ARG.match(part)
                if am is None:
                    return None
                o = self.operand(_Shift(am, base + k), "a", ln)
                if o is None:
                    return None
                args.append(o)
                k += len(part) + 1
        kw = m.group("kw")
        match = Match(_LEADS[kw], call=CallExpr(self.pos(ln, m.start("f")), f, args))
        return Instr(self.pos(ln, m.start("kw")), [match])


class _Shift:
    """A match whose positions are offset (an argument matched inside the argument list)."""

    def __init__(self, m, offset: int):
        self.m, self.offset = m, offset

    def group(self, g: str):
        return self.m.group(g)

    def start(self, g: str) -> int:
        return self.m.start(g) + self.offset


# ---- compiling simple lines straight to rows ----------------------------------------------------

class _Bail(Exception):
    """The line is well-formed but not simple: compile it from its nodes instead."""


_UPDATE_FAMILY = {("+=", None): "add", ("-=", None): "sub", ("+=", "*"): "addmul",
                  ("-=", "*"): "submul", ("+=", "/"): "adddiv", ("-=", "/"): "subdiv",
                  ("^=", None): "xor", ("^=", "&"): "xorand", ("*=", None): "mul",
                  ("/=", None): "div"}
_FN2 = {"%": "mod", "&": "bitand", "^": "bitxor"}


class FastCompiler:
    """Emits the instructions of a simple line directly (no syntax tree), for the lines whose
    every name resolves to a plain cell, element or literal of the target's type and whose
    statement is one instruction of the table (or, for an int/fixed `y += a + b`, two).
    Anything else -- an error included -- raises _Bail and the general path compiles the line,
    so both paths give the same bytecode and the same diagnostics (tests/test_fastpath.py)."""

    def __init__(self, fc, file: int):
        from isa.functions import FN2_BY_NAME
        from isa.table import OP_BY_NAME, ROW_WIDTH
        from isa.types import FLOAT, INT, LNS
        self.fc = fc
        self.unit = fc.unit
        self.file = file
        self.ops = OP_BY_NAME
        self.width = ROW_WIDTH
        self.FLOAT, self.INT, self.LNS = FLOAT, INT, LNS
        self.fn2 = {k: FN2_BY_NAME[v].id for k, v in _FN2.items()}
        self.literals: dict[tuple, int] = {}         # (literal text, type) -> word
        self.opcache: dict[tuple, object] = {}
        self.codes: dict[tuple, int] = {}            # (operator, None, type) -> opcode
        self.cells: dict[tuple, tuple] = {}          # (name, index, write) -> cell()
        self.version = -1
        self.words: list[int] = []                   # rows emitted but not yet in the unit
        self.where: list[int] = []
        self.n = 0
        self.room = 0

    def op(self, fam: str, t):
        key = (fam, t)
        o = self.opcache.get(key)
        if o is None:
            from isa.table import op_for
            o = self.opcache[key] = op_for(fam, t)
            if o is None:
                raise _Bail
        return o

    def cell(self, name: str, ix: str | None, write: bool):
        """(operand word, type, param number or None, element key) of a name or element
        (remembered until the names in scope change)."""
        r = self.cells.get((name, ix, write))
        if r is None:
            r = self.cells[(name, ix, write)] = self.resolve(name, ix, write)
        return r

    def check_scope(self) -> None:
        """Forget what names meant when the names in scope have changed."""
        fc = self.fc
        if fc.scope.version != self.version or fc.guards:
            self.cells.clear()
            self.version = fc.scope.version

    def resolve(self, name: str, ix: str | None, write: bool):
        fc = self.fc
        sym = fc.scope.get(name) or fc.res.cells.get(name)
        if sym is None or (write and sym.const):
            raise _Bail
        mode, loc, length = sym.mode, sym.loc, sym.length
        if ix is None:
            if length is not None:
                raise _Bail
            return (loc << 3) | mode, sym.type, loc if mode == 2 else None, None
        if length is None:
            raise _Bail
        if ix[0].isdigit():
            k = int(ix)
            if mode == 2 or not 0 <= k < length:
                raise _Bail
            return ((loc + k) << 3) | mode, sym.type, None, None
        isym = fc.scope.get(ix) or fc.res.cells.get(ix)
        if isym is None or isym.length is not None or isym.type != self.INT or ix == name:
            raise _Bail
        iword = (isym.loc << 3) | isym.mode
        base = (loc << 3) | mode
        x = self.unit.xentry(base, -1 if mode == 2 else length, iword)
        return (x << 3) | 3, sym.type, loc if mode == 2 else None, (base, iword)

    def literal(self, text: str, t) -> int:
        key = (text, t)
        w = self.literals.get(key)
        if w is None:
            from .literals import LiteralError, literal_word
            lit = FastPath.literal(text, None).lit
            try:
                w = literal_word(lit, t, self.unit.F)
            except LiteralError:
                raise _Bail from None
            self.literals[key] = w
        return w

    def source(self, name, ix, lit, t):
        """(operand word, element key, name) of a source; a literal is a constant cell."""
        if name is not None:
            w, st, _, key = self.cells.get((name, ix, False)) or self.cell(name, ix, False)
            if st != t:
                raise _Bail
            return w, key, name
        return (self.unit.intern(t, self.literal(lit, t)) << 3), None, None

    def emit(self, row: tuple, pos: tuple) -> None:
        """Queue one row (ROW_WIDTH words) for `flush`."""
        self.words.extend(row)
        self.where.extend(pos)
        self.n += 1

    def flush(self) -> None:
        """Append the queued rows to the unit."""
        if self.n:
            unit = self.unit
            unit.code.extend(self.words)
            unit.lines.extend(self.where)
            unit.regions.extend([self.fc.region] * self.n)
            self.words, self.where, self.n = [], [], 0

    def code(self, fam: str, t) -> int:
        """The opcode of a family and type (remembered by statement operator too)."""
        code = self.op(fam, t).code
        for (op, bo), f in _UPDATE_FAMILY.items():
            if f == fam and bo is None:
                self.codes[(op, None, t)] = code
        return code

    def update(self, m, ln: int) -> None:
        tn, ti, op, an, ai, al, bo, bn, bi, bl = m.group(
            "tn", "ti", "op", "an", "ai", "al", "bo", "bn", "bi", "bl")
        if op == "<=>" or (an is None and bo is not None and bn is None):
            raise _Bail                   # a swap, or a literal-only expression (folded)
        cells = self.cells
        y, t, param, ykey = cells.get((tn, ti, True)) or self.cell(tn, ti, True)
        pos = (self.file, ln, m.start("tn") + 1)
        if bo is None:
            if al is not None:
                if t == self.LNS or op == "*=" or op == "/=":
                    raise _Bail
                fam = "addi" if op == "+=" else "subi" if op == "-=" else "xori"
                self.emit((self.code(fam, t), y, self.literal(al, t), 0, 0, 0), pos)
            else:
                a, at, _, akey = cells.get((an, ai, False)) or self.cell(an, ai, False)
                if at != t or a == y or (akey and akey[1] == y) or (ykey and ykey[1] == a):
                    raise _Bail
                code = self.codes.get((op, None, t)) or self.code(_UPDATE_FAMILY[(op, None)], t)
                self.words.extend((code, y, a, 0, 0, 0))
                self.where.extend(pos)
                self.n += 1
        else:
            a, akey, an = self.source(an, ai, al, t)
            b, bkey, bn = self.source(bn, bi, bl, t)
            self.distinct(y, ykey, tn, a, akey, an)
            self.distinct(y, ykey, tn, b, bkey, bn)
            fam = _UPDATE_FAMILY.get((op, bo))
            if fam is not None:
                self.emit((self.code(fam, t), y, a, b, 0, 0), pos)
            elif op in ("+=", "-=") and bo in "%&^" and t == self.INT:
                fam = "addfn2" if op == "+=" else "subfn2"
                self.emit((self.code(fam, t), y, a, b, self.fn2[bo], 0), pos)
            elif op in ("+=", "-=") and bo in "+-" and t != self.LNS:
                if t == self.FLOAT:
                    fam = {("+=", "+"): "addsum", ("-=", "+"): "subsum", ("+=", "-"): "adddif",
                           ("-=", "-"): "subdif"}[(op, bo)]
                    self.emit((self.code(fam, t), y, a, b, 0, 0), pos)
                else:
                    second = "add" if (op == "+=") == (bo == "+") else "sub"
                    self.emit((self.code("add" if op == "+=" else "sub", t), y, a, 0, 0, 0),
                              pos)
                    self.emit((self.code(second, t), y, b, 0, 0, 0), pos)
            else:
                raise _Bail
        if param is not None:
            self.fc.written.add(param)

    def keyword(self, m, ln: int) -> None:
        """inc/dec/neg/not y, swap y, z and rot/irot y, z, a."""
        kw, an, ai, al, bn, bi, bl, cn, ci, cl = m.group(
            "kw", "an", "ai", "al", "bn", "bi", "bl", "cn", "ci", "cl")
        if an is None:
            raise _Bail
        y, t, param, ykey = self.cell(an, ai, True)
        params = [param]
        if kw in ("inc", "dec", "neg", "not"):
            if bn is not None or bl is not None:
                raise _Bail
            row = (self.code(kw, t), y, 0, 0, 0, 0)
        else:
            if bn is None:
                raise _Bail
            z, zt, zparam, zkey = self.cell(bn, bi, True)
            if zt != t or z == y or (ykey and ykey[1] == z) or (zkey and zkey[1] == y):
                raise _Bail
            params.append(zparam)
            if kw == "swap":
                if cn is not None or cl is not None:
                    raise _Bail
                row = (self.code(kw, t), y, z, 0, 0, 0)
            else:
                if cn is None and cl is None:
                    raise _Bail
                c, ckey, cname = self.source(cn, ci, cl, t)
                for w, key, nm in ((y, ykey, an), (z, zkey, bn)):
                    self.distinct(w, key, nm, c, ckey, cname)
                row = (self.code(kw, t), y, z, c, 0, 0)
        self.emit(row, (self.file, ln, m.start("kw") + 1))
        for p in params:
            if p is not None:
                self.fc.written.add(p)

    def distinct(self, y: int, ykey, yname: str, a: int, akey, aname) -> None:
        """Bail (the node path reports E005) when a source is, or indexes, the target."""
        if a == y or (akey is not None and akey[1] == y) or (ykey is not None and ykey[1] == a):
            raise _Bail


assert ROW_WIDTH == 6, "the fast path writes rows of six words"
