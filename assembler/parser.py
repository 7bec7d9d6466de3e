"""Parser: tokens of one file -> top-level items (declarations and functions with their bodies).

Instruction statements are matched against the shapes of the instruction table
(assembler/shapes.py); every full match is kept and the code generator chooses the opcode.
Structured sugar (if/from/for/with), declarations and labels are parsed here directly.
A syntax error is reported and the parser resumes at the next statement.
"""
from __future__ import annotations

from isa.functions import CMP_BY_SYMBOL
from isa.types import TYPE_BY_NAME

from .diagnostics import Fail, Pos, Reporter
from .lexer import DIRECTIVE, EOF, INT, NAME, NEWLINE, PUNCT, RAW, REAL, STRING, Token
from .literals import Lit
from .nodes import (CallExpr, Cond, Decl, Delocal, FixedDirective, For, From, FuncDecl, If,
                    Include, Index, Instr, Label, Len, Literal, LocalDecl, Match, Name, ParamDecl,
                    Recovered, TraceExpr, TypeSpec, With)
from .shapes import BY_LEAD, MNEMONICS, TABLE_WORDS, Shape

ROLES = ("input", "output", "inout", "global", "const")
LANGUAGE_WORDS = frozenset({"func", "include", "local", "delocal", "var", "if", "else", "fi",
                            "from", "loop", "until", "for", "in", "with", "do", "len", *ROLES})
KEYWORDS: frozenset[str] = LANGUAGE_WORDS | TABLE_WORDS
MAX_LENGTH = 1 << 32          # cells in one array
MAX_DEPTH = 100               # nesting of blocks
_CONTINUATIONS = ("else", "fi", "loop", "until", "do")
UPDATE_OPS = tuple(sorted({str(v) for sh in BY_LEAD[None] for k, v in sh.elems
                           if k == "word" and str(v).endswith("=")}))
_UPDATE = "an update (" + ", ".join(UPDATE_OPS) + ")"


class ParseFail(Fail):
    """A syntax error (E001) at a token."""

    def __init__(self, tok: Token, expected: str):
        super().__init__(tok.pos, "E001", f"expected {expected}, found {tok.describe()}")
        self.tok = tok


class Parser:
    def __init__(self, toks: list[Token], rep: Reporter):
        self.toks = toks
        self.n = len(toks)
        self.rep = rep
        self.i = 0
        self.depth = 0

    # ---- cursor ---------------------------------------------------------------------------
    def peek(self, k: int = 0) -> Token:
        j = self.i + k
        return self.toks[j] if j < self.n else self.toks[-1]

    def next(self) -> Token:
        t = self.peek()
        if t.kind != EOF:
            self.i += 1
        return t

    def at(self, text: str, k: int = 0) -> bool:
        return self.peek(k).is_(text)

    def accept(self, text: str) -> Token | None:
        return self.next() if self.at(text) else None

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise ParseFail(self.peek(), f"`{text}`")
        return self.next()

    def skip_newlines(self) -> None:
        while self.peek().kind == NEWLINE:
            self.next()

    def at_stmt_end(self, k: int = 0) -> bool:
        t = self.peek(k)
        return t.kind in (NEWLINE, EOF) or t.is_("{") or t.is_("}")

    def end_stmt(self) -> None:
        t = self.peek()
        if t.kind == NEWLINE:
            self.next()
        elif not (t.kind == EOF or t.is_("}")):
            raise ParseFail(t, "end of line")

    def name(self, what: str = "a name", keyword_ok: bool = False) -> Name:
        t = self.peek()
        if t.kind != NAME:
            raise ParseFail(t, what)
        if t.text in KEYWORDS and not keyword_ok:
            raise Fail(t.pos, "E001", f"`{t.text}` is a keyword, not a name")
        self.next()
        return Name(t.pos, t.text)

    # ---- recovery -------------------------------------------------------------------------
    def recover(self) -> list:
        """Skip the rest of a broken statement.  Stops before a `}` that closes the enclosing
        block.  Blocks the statement opens are still parsed; their statements are returned so
        that the code generator can check them too."""
        kept: list = []
        while True:
            t = self.peek()
            if t.kind == EOF or t.is_("}"):
                return kept
            if t.kind == NEWLINE:
                self.next()
                return kept
            if t.is_("{"):
                kept += self.block()[0]
                continue
            self.next()

    # ---- files ----------------------------------------------------------------------------
    def parse_file(self) -> list:
        items = []
        while True:
            self.skip_newlines()
            t = self.peek()
            if t.kind == EOF:
                return items
            try:
                if t.is_("}"):
                    self.next()
                    raise Fail(t.pos, "E001", "unmatched `}`")
                items.append(self.top_item())
            except Fail as f:
                self.rep.fail(f)
                self.recover()

    def top_item(self):
        t = self.peek()
        if t.kind == DIRECTIVE:
            self.next()
            if t.text != ".fixed":
                raise Fail(t.pos, "E001", f"unknown directive `{t.text}`")
            n = self.peek()
            if n.kind != INT:
                raise ParseFail(n, "the number of fraction bits")
            self.next()
            self.end_stmt()
            return FixedDirective(t.pos, int(n.value))
        if t.is_("include"):
            self.next()
            s = self.peek()
            if s.kind != STRING:
                raise ParseFail(s, "a file name in quotes")
            self.next()
            self.end_stmt()
            return Include(t.pos, s.text)
        if t.kind == NAME and t.text in ROLES:
            return self.declaration()
        if t.is_("func"):
            return self.function()
        if t.kind == NAME and t.text not in KEYWORDS and self.peek(1).is_("("):
            raise Fail(t.pos, "E001", "a function needs `func` before its name")
        raise ParseFail(t, "a declaration (input, output, inout, global, const, func, "
                           "include or .fixed)")

    def type_spec(self, allow_open: bool = False) -> TypeSpec:
        t = self.peek()
        if t.kind != NAME or t.text not in TYPE_BY_NAME:
            raise ParseFail(t, "a type (int, fixed, lns or float)")
        self.next()
        spec = TypeSpec(t.pos, TYPE_BY_NAME[t.text])
        if self.accept("["):
            spec.array = True
            n = self.peek()
            if n.kind == INT:
                self.next()
                if not 1 <= int(n.value) <= MAX_LENGTH:
                    raise Fail(n.pos, "E006", f"array length {n.text} is not in 1..{MAX_LENGTH}")
                spec.length = int(n.value)
            elif not (allow_open and n.is_("]")):
                raise ParseFail(n, "an array length" if not allow_open else "an array length or `]`")
            self.expect("]")
        return spec

    def literal(self) -> Literal:
        t = self.peek()
        neg = False
        if t.is_("-"):
            self.next()
            neg = True
            t = self.peek()
            if t.kind not in (INT, REAL):
                raise ParseFail(t, "a number after `-`")
        if t.kind == INT:
            self.next()
            text = t.text
            radix = 16 if text[:2].lower() == "0x" else 2 if text[:2].lower() == "0b" else 10
            v = int(t.value)
            return Literal(t.pos, Lit("int", -v if neg else v, ("-" if neg else "") + text, radix))
        if t.kind == REAL:
            self.next()
            text = ("-" if neg else "") + t.text
            return Literal(t.pos, Lit("real", text, text))
        if t.kind == RAW:
            self.next()
            return Literal(t.pos, Lit("raw", int(t.value), t.text, 16))
        raise ParseFail(t, "a literal")

    def declaration(self) -> Decl:
        role_tok = self.next()
        name = self.name()
        self.expect(":")
        spec = self.type_spec()
        decl = Decl(role_tok.pos, role_tok.text, name, spec, None)
        if self.at("="):
            self.next()
            decl.init_pos = self.peek().pos
            if self.accept("["):
                decl.bracketed = True
                vals = [self.literal()]
                while self.accept(","):
                    vals.append(self.literal())
                self.expect("]")
                decl.init = vals
            else:
                decl.init = [self.literal()]
        self.end_stmt()
        return decl

    def function(self) -> FuncDecl:
        kw = self.next()
        name = self.name("a function name", keyword_ok=True)
        self.expect("(")
        params = []
        if not self.at(")"):
            while True:
                pname = self.name("a parameter name")
                self.expect(":")
                params.append(ParamDecl(pname.pos, pname, self.type_spec(allow_open=True)))
                if not self.accept(","):
                    break
        self.expect(")")
        body, end = self.block()
        self.end_stmt()
        return FuncDecl(kw.pos, name, params, body, end)

    # ---- blocks and statements ------------------------------------------------------------
    def block(self) -> tuple[list, Pos]:
        """`{ statements }`; returns the statements and the position of the closing brace."""
        self.skip_newlines()
        opening = self.expect("{")
        if self.depth >= MAX_DEPTH:
            self.rep.error(opening.pos, "E001", f"blocks nested more than {MAX_DEPTH} deep")
            return [], self.skip_balanced()
        self.depth += 1
        try:
            return self.statements()
        finally:
            self.depth -= 1

    def skip_balanced(self) -> Pos:
        """Skip to the brace that closes an already opened block; returns its position."""
        level = 1
        while True:
            t = self.next()
            if t.kind == EOF:
                return t.pos
            if t.is_("{"):
                level += 1
            elif t.is_("}"):
                level -= 1
                if level == 0:
                    return t.pos

    def statements(self) -> tuple[list, Pos]:
        stmts: list = []
        while True:
            self.skip_newlines()
            t = self.peek()
            if t.is_("}"):
                self.next()
                return stmts, t.pos
            if t.kind == EOF:
                self.rep.error(t.pos, "E001", "expected `}`, found end of file")
                return stmts, t.pos
            try:
                stmts.append(self.statement())
            except Fail as f:
                self.rep.fail(f)
                kept = self.recover()
                if kept:
                    stmts.append(Recovered(t.pos, kept))

    def continuation(self, word: str) -> Token | None:
        """The keyword after a closing brace (`else`, `fi`, ...), possibly on the next line."""
        k = 0
        while self.peek(k).kind == NEWLINE:
            k += 1
        if self.peek(k).is_(word):
            self.i += k
            return self.next()
        return None

    def statement(self):
        t = self.peek()
        if t.kind == NAME and self.peek(1).is_(":") and t.text not in KEYWORDS:
            self.next()
            self.next()
            return Label(t.pos, t.text)
        if t.kind == NAME and t.text in ("local", "var"):
            self.next()
            name = self.name()
            self.expect(":")
            spec = self.type_spec()
            self.end_stmt()
            return LocalDecl(t.pos, name, spec, t.text == "local")
        if t.is_("delocal"):
            self.next()
            name = self.name()
            self.end_stmt()
            return Delocal(t.pos, name)
        if t.is_("if"):
            return self.if_stmt()
        if t.is_("from"):
            return self.from_stmt()
        if t.is_("for"):
            return self.for_stmt()
        if t.is_("with"):
            return self.with_stmt()
        if t.kind == NAME and t.text in _CONTINUATIONS:
            raise Fail(t.pos, "E001", f"`{t.text}` without the statement it continues")
        if t.kind == NAME and t.text in LANGUAGE_WORDS:
            raise Fail(t.pos, "E001", f"`{t.text}` cannot start a statement here")
        return self.instr()

    def if_stmt(self) -> If:
        kw = self.next()
        cond = self.cond()
        then, close = self.block()
        else_pos, els = None, None
        e = self.continuation("else")
        if e:
            else_pos = e.pos
            els, close = self.block()
        fi_pos, fi_cond = close, None
        f = self.continuation("fi")
        if f:
            fi_pos = f.pos
            fi_cond = self.cond()
        self.end_stmt()
        return If(kw.pos, cond, then, else_pos, els, fi_pos, fi_cond)

    def from_stmt(self) -> From:
        kw = self.next()
        cond = self.cond()
        body, _ = self.block()
        loop_pos, loop = None, []
        lp = self.continuation("loop")
        if lp:
            loop_pos = lp.pos
            loop, _ = self.block()
        u = self.continuation("until")
        if u is None:
            raise ParseFail(self.peek(), "`until` after the loop body")
        until = self.cond()
        self.end_stmt()
        return From(kw.pos, cond, body, loop_pos, loop, u.pos, until)

    def for_stmt(self) -> For:
        kw = self.next()
        var = self.name("a loop counter name")
        self.expect("in")
        lo = self.operand()
        self.expect("..")
        hi = self.operand()
        body, close = self.block()
        self.end_stmt()
        return For(kw.pos, var, lo, hi, body, close)

    def with_stmt(self) -> With:
        kw = self.next()
        body, _ = self.block()
        d = self.continuation("do")
        if d is None:
            raise ParseFail(self.peek(), "`do` after the `with` block")
        do, close = self.block()
        self.end_stmt()
        return With(kw.pos, body, d.pos, do, close)

    # ---- operands -------------------------------------------------------------------------
    def operand(self):
        t = self.peek()
        if t.kind in (INT, REAL, RAW) or t.is_("-"):
            return self.literal()
        if t.is_("len") and self.peek(1).is_("("):
            self.next()
            self.next()
            n = self.name("an array name")
            self.expect(")")
            return Len(t.pos, n.name)
        if t.kind == NAME and t.text not in KEYWORDS:
            self.next()
            if self.accept("["):
                idx = self.operand()
                self.expect("]")
                return Index(t.pos, t.text, idx)
            return Name(t.pos, t.text)
        raise ParseFail(t, "an operand")

    def cond(self) -> Cond:
        left = self.operand()
        t = self.peek()
        if t.kind != PUNCT or t.text not in CMP_BY_SYMBOL:
            raise ParseFail(t, "a comparison (==, !=, <, <=, >, >=)")
        self.next()
        right = self.operand()
        return Cond(left.pos, CMP_BY_SYMBOL[t.text], left, right)

    # ---- instruction statements -------------------------------------------------------------
    def instr(self) -> Instr:
        start = self.i
        end = start
        while not self.at_stmt_end(end - start):
            end += 1
        first = self.peek()
        lead = first.text if first.kind == NAME and first.text in MNEMONICS else None
        present = {t.text for t in self.toks[start:end] if t.kind in (NAME, PUNCT)}
        likely = [s for s in BY_LEAD[lead] if s.words <= present]
        matches, _ = self.match_all(likely, start, end)
        if matches:
            self.i = end
            self.end_stmt()
            return Instr(first.pos, matches)
        _, best = self.match_all(BY_LEAD[lead], start, end)    # for the best message
        self.i = start
        second = self.peek(1)
        if lead is None and first.kind == NAME and first.text not in KEYWORDS and \
                (second.kind in (NAME, INT, REAL, RAW) or self.at_stmt_end(1)):
            raise Fail(first.pos, "E012", f"unknown instruction `{first.text}`")
        if best is None:
            raise ParseFail(first, "a statement")
        raise best

    def match_all(self, shapes, start: int, end: int) -> tuple[list[Match], Fail | None]:
        """Every full match of the statement [start, end) among `shapes`, and the failure
        that got furthest."""
        matches, best = [], None
        for shape in shapes:
            self.i = start
            try:
                matches.append(self.match(shape, end))
            except Fail as f:
                if best is None or (f.pos.line, f.pos.col) > (best.pos.line, best.pos.col):
                    best = f
        return matches, best

    def match(self, shape: Shape, end: int) -> Match:
        m = Match(shape)
        for kind, val in shape.elems:
            t = self.peek()
            if kind == "word":
                if not t.is_(str(val)) or self.i >= end:
                    raise ParseFail(t, _UPDATE if str(val) in UPDATE_OPS else f"`{val}`")
                self.next()
            elif kind == "opnd":
                m.operands[int(val)] = self.operand()
            elif kind == "fn":
                if t.kind != NAME or t.text in KEYWORDS or not self.peek(1).is_("("):
                    raise ParseFail(t, "a function name")
                self.next()
                m.fn = Name(t.pos, t.text)
            elif kind == "label":
                m.label = self.name("a label")
            elif kind == "if":
                if self.accept("if"):
                    m.cond = self.cond()
            elif kind == "cond":
                m.cond = self.cond()
            elif kind == "call":
                n = self.name("a function name", keyword_ok=True)
                self.expect("(")
                args = []
                if not self.at(")"):
                    args.append(self.operand())
                    while self.accept(","):
                        args.append(self.operand())
                self.expect(")")
                m.call = CallExpr(n.pos, n.name, args)
            elif kind == "trace":
                if t.kind != STRING:
                    raise ParseFail(t, "a message in quotes")
                self.next()
                ops = []
                while self.accept(","):
                    ops.append(self.operand())
                m.trace = TraceExpr(t.pos, t.text, ops)
            if self.i > end:
                raise ParseFail(self.toks[end], "more")
        if self.i != end:
            raise ParseFail(self.peek(), "end of statement")
        return m


def parse(toks: list[Token], rep: Reporter) -> list:
    """Parse one file's tokens into top-level items; errors go to `rep`."""
    return Parser(toks, rep).parse_file()
