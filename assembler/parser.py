"""Parser: .rasm tokens -> top-level items, and function bodies -> statements.

Declarations are parsed into nodes (nodes.py).  A function body is either parsed into a list of
statements (`Parser.block`) or, on the assembler's main path, compiled as it is read
(`Parser.stream_body`): each statement is handed to the code generator as soon as it is parsed
and then dropped, so memory does not grow with the length of a function.  Pass 1 skips bodies
with a brace count over the raw lines (`skip_body`) and remembers where each one starts.

Expressions (docs/rasm.md, "Expressions"), lowest precedence first:
    ||    &&    == != < <= > >= (no chains)    |    ^    &    << >>    + -    * / %
    unary - ~ !    primary: literal, name, a[e], len(a), f(e, ...), (e)
Instruction statements with a leading keyword (`inc y`, `rot x, y, t`, `call f(...)`) are
matched against the shapes of the instruction table (assembler/shapes.py); every full match is
kept and the code generator chooses the opcode.  A syntax error is reported and the parser
resumes at the next statement.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from isa.functions import CMP_BY_SYMBOL
from isa.types import INT, TYPE_BY_NAME

from .diagnostics import Fail, Pos, Reporter
from .lexer import DIRECTIVE, EOF, NAME, NEWLINE, PUNCT, RAW, REAL, STRING, Token, TokenStream
from .lexer import INT as T_INT
from .literals import Lit, clip
from .nodes import (
    Binary,
    Call,
    CallExpr,
    Compare,
    Decl,
    Delocal,
    Deriv,
    FixedDirective,
    For,
    From,
    FuncDecl,
    If,
    Include,
    Index,
    Instr,
    Label,
    Len,
    Literal,
    LocalDecl,
    Logic,
    Match,
    Name,
    ParamDecl,
    Recovered,
    Show,
    StackOp,
    Swap,
    TraceExpr,
    TypeSpec,
    Unary,
    Update,
    With,
)
from .shapes import BY_LEAD, MNEMONICS, TABLE_WORDS, Shape

ROLES = ("input", "output", "inout", "global", "const")
LANGUAGE_WORDS = frozenset({"func", "include", "local", "delocal", "var", "if", "else", "fi",
                            "from", "loop", "until", "for", "in", "with", "do", "len", "show",
                            "print", "printf", *ROLES})
KEYWORDS: frozenset[str] = LANGUAGE_WORDS | TABLE_WORDS
MAX_LENGTH = 1 << 32          # cells in one array
MAX_DEPTH = 100               # nesting of blocks (and of parentheses in an expression)
_CONTINUATIONS = ("else", "fi", "loop", "until", "do")
_STRUCTURED = ("if", "from", "for", "with")
UPDATE_OPS = ("*=", "+=", "-=", "/=", "^=")
_UPDATE = "an update (" + ", ".join(UPDATE_OPS) + ")"

# binary operators: symbol -> (precedence, node kind); higher binds tighter
BINARY: dict[str, tuple[int, str]] = {
    "||": (1, "logic"), "&&": (2, "logic"),
    "==": (3, "cmp"), "!=": (3, "cmp"), "<": (3, "cmp"), "<=": (3, "cmp"), ">": (3, "cmp"),
    ">=": (3, "cmp"),
    "|": (4, "bin"), "^": (5, "bin"), "&": (6, "bin"), "<<": (7, "bin"), ">>": (7, "bin"),
    "+": (8, "bin"), "-": (8, "bin"), "*": (9, "bin"), "/": (9, "bin"), "%": (9, "bin"),
}
UNARY = ("-", "~", "!")


class ParseFail(Fail):
    """A syntax error (E001) at a token."""

    def __init__(self, tok: Token, expected: str):
        super().__init__(tok.pos, "E001", f"expected {expected}, found {tok.describe()}")
        self.tok = tok


@dataclass(frozen=True)
class BodyRef:
    """Where a function body starts in its file: the line holding its `{` and that brace's
    column (pass 2 starts a token stream there)."""
    file: int
    offset: int                 # of the start of the line
    line: int
    col: int


class Parser:
    def __init__(self, ts: TokenStream, rep: Reporter, fast: bool = False):
        self.ts = ts
        self.peek = ts.peek             # the cursor is the stream's (no extra call per token)
        self.next = ts.next
        self.rep = rep
        self.depth = 0
        self.fast = None
        if fast:
            from .fastpath import FastPath
            self.fast = FastPath(ts.file)

    # ---- cursor (peek and next are the stream's) -------------------------------------------
    def at(self, text: str, k: int = 0) -> bool:
        return self.ts.peek(k).is_(text)

    def accept(self, text: str) -> Token | None:
        return self.ts.next() if self.ts.peek().is_(text) else None

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
    def parse_file(self, bodies: bool = True) -> list:
        """Top-level items; with bodies=False function bodies are skipped (FuncDecl.body_at
        says where each starts)."""
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
                items.append(self.top_item(bodies))
            except Fail as f:
                self.rep.fail(f)
                self.recover()

    def top_item(self, bodies: bool = True):
        t = self.peek()
        if t.kind == DIRECTIVE:
            self.next()
            if t.text != ".fixed":
                raise Fail(t.pos, "E001", f"unknown directive `{t.text}`")
            n = self.peek()
            if n.kind != T_INT:
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
            return self.function(bodies)
        if t.kind == NAME and t.text not in KEYWORDS and self.peek(1).is_("("):
            raise Fail(t.pos, "E001", "a function needs `func` before its name")
        raise ParseFail(t, "a declaration (input, output, inout, global, const, func, "
                           "include or .fixed)")

    def type_spec(self, allow_open: bool = False) -> TypeSpec:
        t = self.peek()
        if t.kind == NAME and t.text == "stack":
            return self.stack_spec(allow_open)
        if t.kind != NAME or t.text not in TYPE_BY_NAME:
            raise ParseFail(t, "a type (int, fixed, lns or float)")
        self.next()
        spec = TypeSpec(t.pos, TYPE_BY_NAME[t.text])
        if self.accept("["):
            spec.array = True
            n = self.peek()
            if n.kind == T_INT:
                self.next()
                if not 1 <= int(n.value) <= MAX_LENGTH:
                    raise Fail(n.pos, "E006", f"array length {clip(n.text)} is not in "
                                              f"1..{MAX_LENGTH}")
                spec.length = int(n.value)
            elif not (allow_open and n.is_("]")):
                raise ParseFail(n, "an array length" if not allow_open
                                else "an array length or `]`")
            self.expect("]")
        return spec

    def stack_spec(self, allow_open: bool) -> TypeSpec:
        """`stack[n]`: a stack of at most n ints (a parameter may say just `stack`)."""
        t = self.next()
        spec = TypeSpec(t.pos, INT, array=True, stack=True)
        if self.accept("["):
            n = self.peek()
            if n.kind != T_INT:
                raise ParseFail(n, "the capacity of the stack")
            self.next()
            if not 1 <= int(n.value) < MAX_LENGTH:
                raise Fail(n.pos, "E006", f"stack capacity {clip(n.text)} is not in "
                                          f"1..{MAX_LENGTH - 1}")
            spec.length = int(n.value) + 1        # cell 0 holds the size
            self.expect("]")
        elif not allow_open:
            raise ParseFail(self.peek(), "`[` and the capacity of the stack")
        return spec

    def literal(self) -> Literal:
        t = self.peek()
        neg = False
        if t.is_("-"):
            self.next()
            neg = True
            t = self.peek()
            if t.kind not in (T_INT, REAL):
                raise ParseFail(t, "a number after `-`")
        if t.kind == T_INT:
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

    def function(self, bodies: bool = True) -> FuncDecl:
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
        if bodies:
            body, end = self.block()
            self.end_stmt()
            return FuncDecl(kw.pos, name, params, body, end)
        self.skip_newlines()
        brace = self.peek()
        if not brace.is_("{"):
            raise ParseFail(brace, "`{`")
        ref = BodyRef(self.ts.file, self.ts.start_of(brace.pos.line), brace.pos.line,
                      brace.pos.col)
        end = self.skip_body()
        self.end_stmt()
        return FuncDecl(kw.pos, name, params, None, end, ref)

    def skip_body(self) -> Pos:
        """Skip from a body's `{` to its matching `}`; returns the position of that brace.
        Lines without strings or comments are counted without making tokens."""
        ts = self.ts
        level = 0
        while True:                              # the tokens already made
            t = ts.peek()
            if t.kind == EOF:
                self.rep.error(t.pos, "E001", "expected `}`, found end of file")
                return t.pos
            ts.next()
            if t.is_("{"):
                level += 1
            elif t.is_("}"):
                level -= 1
                if level == 0:
                    return t.pos
            elif t.kind == NEWLINE and ts.i >= len(ts.toks):
                break
        text = ts.text
        # the raw text: a regular expression finds the next brace, string or comment, so
        # lines without any are skipped without being looked at one by one
        pos, start = ts.offset, ts.offset
        line_start, line_level, next_line = -1, level, pos
        closing = None
        search = _SKIP.search
        while True:
            m = search(text, pos)
            if m is None:
                break
            p, c = m.start(), m.group()
            if p >= next_line:                   # the first mark on a new line
                line_start = text.rfind("\n", 0, p) + 1
                line_level = level
                nl = text.find("\n", p)
                next_line = len(text) if nl < 0 else nl + 1
            if c == "{":
                level += 1
            elif c == "}":
                level -= 1
                if level == 0:
                    closing = line_start
                    break
            elif c == '"':
                q = _STRING.match(text, p)
                if q is not None:
                    pos = q.end()
                    continue
                pos = next_line
                continue
            else:                                # ; or #: a comment to the end of the line
                pos = next_line
                continue
            pos = p + 1
        if closing is None:
            ts.line += text.count("\n", start)
            ts.offset = len(text)
            t = ts.peek()
            self.rep.error(t.pos, "E001", "expected `}`, found end of file")
            return t.pos
        ts.line += text.count("\n", start, closing)
        ts.offset = closing
        level = line_level                       # read the closing line as tokens
        while True:
            t = ts.next()
            if t.kind == EOF:
                break
            if t.is_("{"):
                level += 1
            elif t.is_("}"):
                level -= 1
                if level == 0:
                    return t.pos
        t = ts.peek()
        self.rep.error(t.pos, "E001", "expected `}`, found end of file")
        return t.pos

    # ---- blocks and statements (as nodes) --------------------------------------------------
    def open_block(self) -> bool:
        """Read a block's `{`; False (reported) when blocks nest too deep."""
        self.skip_newlines()
        opening = self.expect("{")
        if self.depth >= MAX_DEPTH:
            self.rep.error(opening.pos, "E001", f"blocks nested more than {MAX_DEPTH} deep")
            self.skip_balanced()
            return False
        return True

    def block(self) -> tuple[list, Pos]:
        """`{ statements }`; returns the statements and the position of the closing brace."""
        self.skip_newlines()
        if not self.open_block():
            return [], self.peek().pos
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
            for _ in range(k):
                self.next()
            return self.next()
        return None

    def statement(self):
        t = self.peek()
        if t.kind == NAME:
            word = t.text
            if self.peek(1).is_(":") and word not in KEYWORDS:
                self.next()
                self.next()
                return Label(t.pos, word)
            if word in _STRUCTURED:
                return self.structured(None, word)
        return self.simple()

    def simple(self):
        """A statement that is not structured sugar."""
        t = self.peek()
        if t.kind == NAME:
            word = t.text
            if word in ("local", "var"):
                return self.local_decl()
            if word == "delocal":
                self.next()
                name = self.name()
                value = self.expr() if self.accept("=") else None
                self.end_stmt()
                return Delocal(t.pos, name, value)
            if word in ("show", "print", "printf"):
                return self.show(t)
            if word in _CONTINUATIONS:
                raise Fail(t.pos, "E001", f"`{word}` without the statement it continues")
            if word in LANGUAGE_WORDS:
                raise Fail(t.pos, "E001", f"`{word}` cannot start a statement here")
            if word in MNEMONICS:
                return self.instr()
            if word not in KEYWORDS:
                return self.update()
        return self.update()

    def show(self, t: Token) -> Show:
        """`show a, b[i], arr`, `print "text"`, `printf "format", a, b`: program output."""
        self.next()
        message, fmt, ops = "", None, []
        if t.text != "show":
            s = self.peek()
            if s.kind != STRING:
                raise ParseFail(s, "a message in quotes")
            self.next()
            if t.text == "print":
                message = s.text
            else:
                fmt = s.text
            while self.accept(","):
                ops.append(self.expr())
        else:
            ops.append(self.expr())
            while self.accept(","):
                ops.append(self.expr())
        self.end_stmt()
        return Show(t.pos, ops, message, fmt)

    def local_decl(self) -> LocalDecl:
        t = self.next()
        name = self.name()
        self.expect(":")
        spec = self.type_spec()
        init = None
        if self.at("="):
            eq = self.next()
            if t.text == "var":
                raise Fail(eq.pos, "E001", "`var` declares cells without code: it takes no value")
            init = self.expr()
        self.end_stmt()
        return LocalDecl(t.pos, name, spec, t.text == "local", init)

    # ---- structured statements: as nodes (cg None) or compiled as they are read ------------
    def body(self, cg) -> tuple[list | None, Pos]:
        """A block: parsed into statements (cg None) or compiled into cg."""
        if cg is None:
            return self.block()
        self.skip_newlines()
        if not self.open_block():
            return None, self.peek().pos
        self.depth += 1
        try:
            return None, self.stream_statements(cg)
        finally:
            self.depth -= 1

    def condition(self):
        """An expression used as a condition (`=` after it is a likely `==`)."""
        e = self.expr()
        t = self.peek()
        if t.is_("="):
            raise Fail(t.pos, "E001", "`=` is not a comparison: write `==`")
        return e

    def header(self, parse):
        """Parse a statement header; on an error report it and return None (the blocks are
        still read, and compiled to be checked)."""
        try:
            return parse()
        except Fail as f:
            self.rep.fail(f)
            while not self.at("{") and self.peek().kind not in (NEWLINE, EOF):
                self.next()
            return None

    def structured(self, cg, word: str):
        """if/from/for/with: a node (cg None) or compiled into cg as it is read.  A handle the
        code generator opened is closed (`abort`) if the statement fails half way."""
        box: list = []
        try:
            return getattr(self, f"_{word}")(cg, box)
        except Fail:
            if box and box[0] is not None:
                cg.abort(box[0])
            raise

    def _if(self, cg, box):
        kw = self.next()
        cond = self.header(self.condition)
        h = cg.if_begin(cond, kw.pos) if cg is not None and cond is not None else None
        box.append(h)
        then, close = self.body(cg)
        else_pos, els = None, None
        e = self.continuation("else")
        if e:
            else_pos = e.pos
            if h is not None:
                cg.if_else(h, e.pos)
            els, close = self.body(cg)
            if els is None:
                els = []
        fi_pos, fi_cond = close, None
        f = self.continuation("fi")
        if f:
            fi_pos = f.pos
            fi_cond = self.condition()
        if h is not None:
            box.clear()
            cg.if_end(h, fi_cond, fi_pos)
        self.end_stmt()
        if cg is None:
            if cond is None:
                return Recovered(kw.pos, then + (els or []))
            return If(kw.pos, cond, then, else_pos, els, fi_pos, fi_cond)
        return None

    def _from(self, cg, box):
        kw = self.next()
        cond = self.header(self.condition)
        h = cg.from_begin(cond, kw.pos) if cg is not None and cond is not None else None
        box.append(h)
        body, _ = self.body(cg)
        loop_pos, loop = None, []
        lp = self.continuation("loop")
        if lp:
            loop_pos = lp.pos
            loop, _ = self.block()              # compiled after `until`: it follows the test
        u = self.continuation("until")
        if u is None:
            raise ParseFail(self.peek(), "`until` after the loop body")
        until = self.condition()
        if h is not None:
            box.clear()
            cg.from_end(h, until, u.pos, loop)
        elif cg is not None:
            cg.block(loop)
        self.end_stmt()
        if cg is None:
            if cond is None:
                return Recovered(kw.pos, body + loop)
            return From(kw.pos, cond, body, loop_pos, loop, u.pos, until)
        return None

    def _for(self, cg, box):
        kw = self.next()

        def head():
            var = self.name("a loop counter name")
            self.expect("in")
            lo = self.expr()
            self.expect("..")
            return var, lo, self.expr()
        parts = self.header(head)
        h = cg.for_begin(*parts, kw.pos) if cg is not None and parts is not None else None
        box.append(h)
        body, close = self.body(cg)
        if h is not None:
            box.clear()
            cg.for_end(h, close)
        self.end_stmt()
        if cg is None:
            if parts is None:
                return Recovered(kw.pos, body)
            return For(kw.pos, parts[0], parts[1], parts[2], body, close)
        return None

    def _with(self, cg, box):
        kw = self.next()
        h = cg.with_begin(kw.pos) if cg is not None else None
        box.append(h)
        body, _ = self.body(cg)
        d = self.continuation("do")
        if d is None:
            raise ParseFail(self.peek(), "`do` after the `with` block")
        if h is not None:
            cg.with_do(h, d.pos)
        do, close = self.body(cg)
        if h is not None:
            box.clear()
            cg.with_end(h, close)
        self.end_stmt()
        if cg is None:
            return With(kw.pos, body, d.pos, do, close)
        return None

    # ---- streaming ---------------------------------------------------------------------------
    def stream_body(self, cg) -> Pos:
        """Compile a function body from its `{` (already peeked) into cg; returns the position
        of the closing brace."""
        self.skip_newlines()
        self.expect("{")
        self.depth = 1
        return self.stream_statements(cg)

    def stream_statements(self, cg) -> Pos:
        ts = self.ts
        fast = self.fast
        while True:
            if fast is not None:
                fast.run(ts, cg)
                line = ts.raw_line()
                if line is not None:
                    node = fast.line(line, ts.line)
                    if node is not None:
                        ts.skip_line(line)
                        if node is not True:
                            try:
                                cg.stmt(node)
                            except Fail as f:
                                self.rep.fail(f)
                        continue
            self.skip_newlines()
            t = self.peek()
            if t.is_("}"):
                self.next()
                return t.pos
            if t.kind == EOF:
                self.rep.error(t.pos, "E001", "expected `}`, found end of file")
                return t.pos
            try:
                if t.kind == NAME and t.text in _STRUCTURED and not self.peek(1).is_(":"):
                    self.structured(cg, t.text)
                    continue
                node = self.statement()
            except Fail as f:
                self.rep.fail(f)
                kept = self.recover()
                if kept:
                    cg.block(kept)
                continue
            try:
                cg.stmt(node)                   # the statement is read whole: no recovery
            except Fail as f:
                self.rep.fail(f)

    # ---- expressions ----------------------------------------------------------------------
    def expr(self, min_prec: int = 1):
        """An expression whose binary operators bind at least as tightly as min_prec."""
        left = self.unary()
        while True:
            t = self.peek()
            if t.kind != PUNCT:
                return left
            info = BINARY.get(t.text)
            if info is None or info[0] < min_prec:
                return left
            prec, kind = info
            self.next()
            if kind == "cmp":
                right = self.expr(prec + 1)
                nxt = self.peek()
                if nxt.kind == PUNCT and BINARY.get(nxt.text, (0, ""))[1] == "cmp":
                    raise Fail(nxt.pos, "E001", "comparisons do not chain: write "
                                                "`a < b && b < c`")
                left = Compare(left.pos, CMP_BY_SYMBOL[t.text], left, right)
            elif kind == "logic":
                left = Logic(t.pos, t.text, left, self.expr(prec + 1))
            else:
                left = Binary(t.pos, t.text, left, self.expr(prec + 1))

    def unary(self):
        t = self.peek()
        if t.kind == PUNCT and t.text in UNARY:
            self.next()
            n = self.peek()
            if t.text == "-" and n.kind in (T_INT, REAL):
                return self.literal_after_minus(t)
            self.enter(t)
            try:
                return Unary(t.pos, t.text, self.unary())
            finally:
                self.depth -= 1
        return self.primary()

    def literal_after_minus(self, minus: Token) -> Literal:
        """`-5`, `-2.5`: a negative literal (so `y += -1` is an immediate, as before)."""
        t = self.next()
        if t.kind == T_INT:
            text = t.text
            radix = 16 if text[:2].lower() == "0x" else 2 if text[:2].lower() == "0b" else 10
            return Literal(minus.pos, Lit("int", -int(t.value), "-" + text, radix))
        return Literal(minus.pos, Lit("real", "-" + t.text, "-" + t.text))

    def enter(self, t: Token) -> None:
        if self.depth >= MAX_DEPTH + 100:
            raise Fail(t.pos, "E001", "expression nested too deep")
        self.depth += 1

    def primary(self):
        t = self.peek()
        kind = t.kind
        if kind == NAME:
            word = t.text
            nxt = self.peek(1)
            if word == "len" and nxt.is_("("):
                self.next()
                self.next()
                n = self.name("an array name")
                self.expect(")")
                return Len(t.pos, n.name)
            if word in KEYWORDS and not (nxt.is_("(") and word in TYPE_BY_NAME):
                raise ParseFail(t, "an operand")
            self.next()
            if nxt.is_("["):
                self.next()
                self.enter(t)
                try:
                    idx = self.expr()
                finally:
                    self.depth -= 1
                self.expect("]")
                return Index(t.pos, word, idx)
            if nxt.is_("("):
                self.next()
                self.enter(t)
                try:
                    args = self.call_args()
                finally:
                    self.depth -= 1
                self.expect(")")
                return Call(t.pos, word, args)
            return Name(t.pos, word)
        if kind in (T_INT, REAL, RAW):
            return self.literal()
        if t.is_("("):
            self.next()
            self.enter(t)
            try:
                e = self.expr()
            finally:
                self.depth -= 1
            self.expect(")")
            return e
        raise ParseFail(t, "an operand")

    # ---- update statements ----------------------------------------------------------------
    def update(self):
        first = self.peek()
        if first.kind == NAME and first.text not in KEYWORDS:
            second = self.peek(1)
            if second.kind in (NAME, T_INT, REAL, RAW) or self.at_stmt_end(1):
                raise Fail(first.pos, "E012", f"unknown instruction `{first.text}`")
        if first.kind not in (NAME, T_INT, REAL, RAW) and not first.is_("-"):
            raise ParseFail(first, "a statement")
        target = self.unary()
        t = self.peek()
        if t.kind == PUNCT and t.text in UPDATE_OPS:
            self.next()
            d = self.peek()
            if d.kind == NAME and d.text in ("grad", "jvp") and self.peek(1).kind == NAME \
                    and self.peek(2).is_("("):
                return self.deriv(first, target, t, d)
            e = self.expr()
            self.end_stmt()
            return Update(first.pos, target, t.text, t.pos, e)
        if t.is_("<=>"):
            self.next()
            other = self.unary()
            self.end_stmt()
            return Swap(first.pos, target, other)
        raise ParseFail(t, _UPDATE)

    def call_args(self) -> list:
        """The comma-separated expressions of a call's argument list, up to (not taking) its
        closing parenthesis; none if it follows at once."""
        args = []
        if not self.at(")"):
            args.append(self.expr())
            while self.accept(","):
                args.append(self.expr())
        return args

    def deriv(self, first: Token, target, op: Token, kind: Token) -> Deriv:
        """`target OP grad f(args) wrt x` / `target OP jvp f(args) wrt x along v`."""
        self.next()
        n = self.name("a function name", keyword_ok=True)
        self.expect("(")
        args = self.call_args()
        self.expect(")")
        self.expect("wrt")
        wrt = self.expr()
        along = None
        if kind.text == "jvp":
            self.expect("along")
            along = self.expr()
        self.end_stmt()
        return Deriv(first.pos, target, op.text, op.pos, kind.text, CallExpr(n.pos, n.name, args),
                     wrt, along)

    # ---- instruction statements -------------------------------------------------------------
    def instr(self):
        first = self.peek()
        lead = first.text
        if lead in ("push", "pop") and self._stack_form():
            self.next()
            cell = self.unary()
            self.expect(",")
            stack = self.name("a stack")
            self.end_stmt()
            return StackOp(first.pos, lead, cell, stack)
        ts = self.ts
        ts.pinned += 1                  # indices into the token buffer stay valid
        try:
            start = ts.i
            matches, best = [], None
            for shape in BY_LEAD[lead]:
                ts.i = start
                try:
                    matches.append((self.match(shape), ts.i))
                except Fail as f:
                    if best is None or (f.pos.line, f.pos.col) > (best.pos.line, best.pos.col):
                        best = f
        finally:
            ts.pinned -= 1
        if matches:
            ends = {end for _, end in matches}
            self.ts.i = max(ends)
            self.end_stmt()
            return Instr(first.pos, [m for m, end in matches if end == max(ends)])
        self.ts.i = start
        if best is None:
            raise ParseFail(first, "a statement")
        raise best

    def _stack_form(self) -> bool:
        """Is this `push x, s` / `pop x, s` (a named stack) rather than `push x`?"""
        k, level = 1, 0
        while not self.at_stmt_end(k):
            t = self.peek(k)
            if t.is_("[") or t.is_("("):
                level += 1
            elif t.is_("]") or t.is_(")"):
                level -= 1
            elif t.is_(",") and level == 0:
                return True
            k += 1
        return False

    def match(self, shape: Shape) -> Match:
        m = Match(shape)
        for kind, val in shape.elems:
            t = self.peek()
            if kind == "word":
                if not t.is_(str(val)):
                    raise ParseFail(t, _UPDATE if str(val) in UPDATE_OPS else f"`{val}`")
                self.next()
            elif kind == "opnd":
                m.operands[int(val)] = self.expr()
            elif kind == "label":
                m.label = self.name("a label")
            elif kind == "if":
                if self.accept("if"):
                    m.cond = self.expr()
            elif kind == "cond":
                m.cond = self.expr()
            elif kind == "msg":
                if self.accept(","):
                    s = self.peek()
                    if s.kind != STRING:
                        raise ParseFail(s, "a message in quotes")
                    self.next()
                    m.message = s.text
                    names = []                  # optional: what to call the two values
                    while self.accept(","):
                        n = self.peek()
                        if n.kind != STRING:
                            raise ParseFail(n, "the name of a value, in quotes")
                        self.next()
                        names.append(n.text)
                    if names and len(names) != 2:
                        raise Fail(s.pos, "E009", "an assert names both values or neither")
                    m.names = names or None
            elif kind == "call":
                n = self.name("a function name", keyword_ok=True)
                self.expect("(")
                args = self.call_args()
                self.expect(")")
                m.call = CallExpr(n.pos, n.name, args)
            elif kind == "trace":
                if t.kind != STRING:
                    raise ParseFail(t, "a message in quotes")
                self.next()
                ops = []
                while self.accept(","):
                    ops.append(self.expr())
                m.trace = TraceExpr(t.pos, t.text, ops)
            elif kind == "fn":
                raise ParseFail(t, "a statement")
        if not self.at_stmt_end():
            raise ParseFail(self.peek(), "end of statement")
        return m


_SKIP = re.compile(r'[{}";#]')
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def parse(text: str, file: int, rep: Reporter) -> list:
    """Parse one file's text into top-level items, bodies included (tools and tests)."""
    return Parser(TokenStream(text, file, rep), rep).parse_file(bodies=True)
