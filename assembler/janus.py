"""The Janus front end: Janus source (as the jana interpreter reads it) -> the same Program.

Janus (Lutz and Derby 1982; Yokoyama and Glück 2007) is the reversible language whose
if/fi and from/until rvm's sugar follows.  This module reads the dialect of jana (Budde and
Nielsen's interpreter): procedures with by-reference parameters (`int x`, `int a[]`,
`int a[10]`, `stack s`), `call`/`uncall`, `if e then s else s fi e`, `from e do s loop s until
e`, `local int x = e ... delocal int x = e`, int scalars and arrays (`size(a)`), stacks (`push`,
`pop`, `top`, `empty`, `size`, `nil`), `x <=> y`, `+= -= ^=`, `skip`, `error("...")`,
`show`/`print`/`printf`, comments `//` and `/* */`, and jana's expression precedence:

    !  >  * / %  >  + -  >  < <= > >= = !=  >  & | ^  >  && ||     (all left-associative)

It builds the assembler's syntax tree (nodes.py): main's variables become inout globals
(printed at the end), every procedure a function, and the code generator does the rest, so
every tool works on Janus programs and every trap points into the Janus source.

Numbers are rvm ints (64 bits, wrapping) where jana's are unbounded; `modular=True` is jana's
`-m`: every expression value an update, index or local uses is first reduced to 32 bits
(`wrap32`), exactly where jana reduces it.  A stack holds at most `stack_capacity` values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from isa.functions import CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE  # noqa: F401
from isa.types import INT

from .diagnostics import Fail, Pos, Reporter
from .lexer import MAX_DIGITS, TOO_BIG
from .literals import Lit, clip
from .nodes import (
    Binary,
    BoolLit,
    Call,
    CallExpr,
    Compare,
    Decl,
    Delocal,
    From,
    FuncDecl,
    If,
    Index,
    Instr,
    Literal,
    LocalDecl,
    Logic,
    Match,
    Name,
    ParamDecl,
    Show,
    StackOp,
    Swap,
    TypeSpec,
    Unary,
    Update,
)
from .parser import MAX_LENGTH as MAX_ARRAY
from .shapes import BY_LEAD

STACK_CAPACITY = 1024          # values a Janus stack holds (rvm stacks have a capacity)

KEYWORDS = frozenset({"procedure", "int", "stack", "bool", "true", "false", "if", "then", "else",
                      "fi", "from", "do", "loop", "until", "push", "pop", "local", "delocal",
                      "call", "uncall", "error", "skip", "empty", "top", "size", "show", "print",
                      "printf", "nil"})
_ENDS = frozenset({"else", "fi", "loop", "until", "delocal", "procedure", "do"})

_TOKEN = re.compile(
    r"(?P<ws>\s+)|(?P<line>//[^\n]*)|(?P<block>/\*.*?\*/)|(?P<open>/\*)"
    r"|(?P<num>0[xX][0-9a-fA-F]+|0[oO][0-7]+|\d+)"
    r"|(?P<name>[A-Za-z][A-Za-z0-9_]*)"
    r'|(?P<string>"(?:[^"\\\n]|\\.)*")'
    r"|(?P<op><=>|\+=|-=|\^=|<=|>=|!=|&&|\|\||[-+*/%&|^!<>=()\[\],])", re.S)

# binary operators: symbol -> (precedence, node kind, operator); jana's table, loosest first
_BINARY = {"&&": (1, "logic", "&&"), "||": (1, "logic", "||"),
           "&": (2, "bin", "&"), "|": (2, "bin", "|"), "^": (2, "bin", "^"),
           "<": (3, "cmp", CMP_LT), "<=": (3, "cmp", CMP_LE), ">": (3, "cmp", CMP_GT),
           ">=": (3, "cmp", CMP_GE), "=": (3, "cmp", CMP_EQ), "!=": (3, "cmp", CMP_NE),
           "+": (4, "bin", "+"), "-": (4, "bin", "-"),
           "*": (5, "bin", "*"), "/": (5, "bin", "/"), "%": (5, "bin", "%")}


@dataclass(frozen=True)
class Tok:
    kind: str             # name, num, string, op, eof
    text: str
    pos: Pos

    def is_(self, text: str) -> bool:
        return self.text == text and self.kind in ("name", "op")

    def describe(self) -> str:
        return "end of file" if self.kind == "eof" else f"`{self.text}`"


def tokenize(text: str, file: int, rep: Reporter) -> list[Tok]:
    toks: list[Tok] = []
    line, line_start, i, n = 1, 0, 0, len(text)
    while i < n:
        m = _TOKEN.match(text, i)
        col = i - line_start + 1
        if m is None:
            rep.error(Pos(file, line, col), "E001", f"unexpected character {text[i]!r}")
            i += 1
            continue
        kind = m.lastgroup
        tok = m.group()
        if kind == "open":
            rep.error(Pos(file, line, col), "E001", "unterminated comment `/*`")
            break
        if kind in ("name", "num", "string", "op"):
            if kind == "string":
                tok = bytes(tok[1:-1], "utf-8").decode("unicode_escape")
            toks.append(Tok(kind, tok, Pos(file, line, col)))
        nl = m.group().count("\n")
        if nl:
            line += nl
            line_start = i + m.group().rfind("\n") + 1
        i = m.end()
    toks.append(Tok("eof", "", Pos(file, line, i - line_start + 1)))
    return toks


class JanusParser:
    def __init__(self, toks: list[Tok], rep: Reporter, modular: bool, capacity: int):
        self.toks = toks
        self.i = 0
        self.rep = rep
        self.modular = modular
        self.capacity = capacity
        self.stacks: set[str] = set()       # names of stacks in scope (parameters, locals)
        self.scope: list[str] = []          # names in scope in the procedure being read

    # ---- cursor ----------------------------------------------------------------------------
    def peek(self, k: int = 0) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Tok:
        t = self.peek()
        if t.kind != "eof":
            self.i += 1
        return t

    def at(self, text: str) -> bool:
        return self.peek().is_(text)

    def expect(self, text: str) -> Tok:
        t = self.peek()
        if not t.is_(text):
            raise Fail(t.pos, "E001", f"expected `{text}`, found {t.describe()}")
        return self.next()

    def ident(self, what: str = "a name") -> Name:
        t = self.peek()
        if t.kind != "name" or t.text in KEYWORDS:
            raise Fail(t.pos, "E001", f"expected {what}, found {t.describe()}")
        self.next()
        return Name(t.pos, t.text)

    # ---- program ---------------------------------------------------------------------------
    def program(self) -> list:
        items: list = []
        mains = []
        while self.peek().kind != "eof":
            t = self.peek()
            if not t.is_("procedure"):
                self.rep.error(t.pos, "E001", f"expected `procedure`, found {t.describe()}")
                self.skip_to_procedure()
                continue
            try:
                item = self.procedure()
            except Fail as f:
                self.rep.fail(f)
                self.skip_to_procedure()
                continue
            if item[0] == "main":
                mains.append(item)
            items += item[1]
        if len(mains) > 1:
            self.rep.error(mains[1][2], "E003", "more than one `main` procedure")
        return items

    def skip_to_procedure(self) -> None:
        self.next()
        while self.peek().kind != "eof" and not self.at("procedure"):
            self.next()

    def procedure(self):
        kw = self.expect("procedure")
        name = self.ident("a procedure name")
        self.expect("(")
        self.stacks = set()
        if name.name == "main":
            if not self.at(")"):
                raise Fail(self.peek().pos, "E011", "`main` takes no parameters")
            self.expect(")")
            decls = []
            while self.at("int") or self.at("stack"):
                try:
                    decls.append(self.main_decl())
                except Fail as f:
                    self.rep.fail(f)
            self.scope = [d.name.name for d in decls]
            body = self.statements()
            end = self.peek().pos
            fd = FuncDecl(kw.pos, name, [], body, end)
            decls.sort(key=lambda d: d.name.name)      # jana prints them in name order
            return "main", decls + [fd], kw.pos
        params = []
        if not self.at(")"):
            while True:
                params.append(self.param())
                if not self.at(","):
                    break
                self.next()
        self.expect(")")
        self.scope = [p.name.name for p in params]
        body = self.statements()
        return name.name, [FuncDecl(kw.pos, name, params, body, self.peek().pos)], kw.pos

    def main_decl(self) -> Decl:
        t = self.next()
        name = self.ident()
        if t.text == "stack":
            self.stacks.add(name.name)
            spec = TypeSpec(t.pos, INT, array=True, length=self.capacity + 1, stack=True)
            return Decl(t.pos, "inout", name, spec, [], name.pos, bracketed=True)
        if self.at("["):
            self.next()
            n = self.peek()
            if n.kind != "num":
                raise Fail(n.pos, "E001", f"array size missing for `{name.name}`")
            self.next()
            self.expect("]")
            size = _number(n.text)
            if not 1 <= size <= MAX_ARRAY:
                raise Fail(n.pos, "E006",
                           f"array size {clip(n.text)} is not in 1..{MAX_ARRAY}")
            spec = TypeSpec(t.pos, INT, array=True, length=size)
            return Decl(t.pos, "inout", name, spec, None, n.pos)    # no values: all zero
        return Decl(t.pos, "inout", name, TypeSpec(t.pos, INT), [Literal(name.pos, Lit("int", 0,
                                                                                       "0"))],
                    name.pos)

    def param(self) -> ParamDecl:
        t = self.peek()
        if not (t.is_("int") or t.is_("stack")):
            raise Fail(t.pos, "E001", f"expected a parameter (`int x`, `int a[]`, `stack s`), "
                                      f"found {t.describe()}")
        self.next()
        name = self.ident("a parameter name")
        if t.text == "stack":
            self.stacks.add(name.name)
            return ParamDecl(name.pos, name, TypeSpec(t.pos, INT, array=True, stack=True))
        if self.at("["):
            self.next()
            length = None
            if self.peek().kind == "num":
                length = _number(self.next().text)
            self.expect("]")
            return ParamDecl(name.pos, name, TypeSpec(t.pos, INT, array=True, length=length))
        return ParamDecl(name.pos, name, TypeSpec(t.pos, INT))

    # ---- statements ------------------------------------------------------------------------
    def statements(self) -> list:
        """One or more statements (jana's `many1 statement`)."""
        out: list = []
        count = 0
        while True:
            t = self.peek()
            if t.kind == "eof" or (t.kind == "name" and t.text in _ENDS):
                break
            count += 1
            try:
                out += self.statement()
            except Fail as f:
                self.rep.fail(f)
                self.recover()
        if not count:
            t = self.peek()
            self.rep.error(t.pos, "E001", f"expected a statement, found {t.describe()}")
        return out

    def recover(self) -> None:
        """Skip to the next token that can start or end a statement."""
        self.next()
        starts = {"if", "from", "push", "pop", "local", "call", "uncall", "error", "skip",
                  "show", "print", "printf"} | _ENDS
        while True:
            t = self.peek()
            if t.kind == "eof" or (t.kind == "name" and t.text in starts):
                return
            if t.kind == "name" and self.peek(1).kind == "op" and \
                    self.peek(1).text in ("+=", "-=", "^=", "<=>", "["):
                return
            self.next()

    def statement(self) -> list:
        t = self.peek()
        w = t.text if t.kind == "name" else None
        if w == "if":
            return [self.if_stmt()]
        if w == "from":
            return [self.from_stmt()]
        if w in ("push", "pop"):
            self.next()
            self.expect("(")
            x = self.ident()
            self.expect(",")
            s = self.ident("a stack")
            self.expect(")")
            return [StackOp(t.pos, w, x, s)]
        if w == "local":
            return self.local_block()
        if w in ("call", "uncall"):
            self.next()
            f = self.ident("a procedure name")
            self.expect("(")
            args = []
            if not self.at(")"):
                args.append(self.ident("an argument"))
                while self.at(","):
                    self.next()
                    args.append(self.ident("an argument"))
            self.expect(")")
            if f.name == "main":
                raise Fail(f.pos, "E012", "`main` cannot be called")
            return [Instr(t.pos, [Match(BY_LEAD[w][0], call=CallExpr(f.pos, f.name, args))])]
        if w == "skip":
            self.next()
            return []
        if w == "error":
            self.next()
            self.expect("(")
            msg = self.string()
            self.expect(")")
            m = Match(BY_LEAD["assert"][0], cond=BoolLit(t.pos, False), message=f"error: {msg}")
            return [Instr(t.pos, [m])]
        if w in ("show", "print", "printf"):
            return [self.prints(t)]
        if t.kind == "name" and w not in KEYWORDS:
            target = self.lval()
            op = self.peek()
            if op.is_("<=>"):
                self.next()
                return [Swap(t.pos, target, self.lval())]
            if op.kind == "op" and op.text in ("+=", "-=", "^="):
                self.next()
                e = self.expr()
                return [Update(t.pos, target, op.text, op.pos, self.value(e))]
            raise Fail(op.pos, "E001", f"expected `+=`, `-=`, `^=` or `<=>`, found "
                                       f"{op.describe()}")
        raise Fail(t.pos, "E001", f"expected a statement, found {t.describe()}")

    def string(self) -> str:
        t = self.peek()
        if t.kind != "string":
            raise Fail(t.pos, "E001", f"expected a string, found {t.describe()}")
        self.next()
        return t.text

    def prints(self, t: Tok) -> Show:
        self.next()
        self.expect("(")
        if t.text == "print":
            msg = self.string()
            self.expect(")")
            return Show(t.pos, [], msg)
        if t.text == "printf":
            fmt = self.string()
            args = []
            while self.at(","):
                self.next()
                args.append(self.ident())
            self.expect(")")
            return Show(t.pos, args, "", fmt)
        args = [self.ident()]
        while self.at(","):
            self.next()
            args.append(self.ident())
        self.expect(")")
        return Show(t.pos, args)

    def if_stmt(self) -> If:
        kw = self.next()
        cond = self.expr()
        self.expect("then")
        then = self.statements()
        else_pos, els = None, None
        if self.at("else"):
            else_pos = self.next().pos
            els = self.statements()
        fi = self.expect("fi")
        return If(kw.pos, cond, then, else_pos, els, fi.pos, self.expr())

    def from_stmt(self) -> From:
        kw = self.next()
        cond = self.expr()
        body: list = []
        loop: list = []
        loop_pos = None
        if self.at("do"):
            self.next()
            body = self.statements()
        if self.at("loop"):
            loop_pos = self.next().pos
            loop = self.statements()
        u = self.expect("until")
        return From(kw.pos, cond, body, loop_pos, loop, u.pos, self.expr())

    def local_block(self) -> list:
        """`local T x = e  s...  delocal T x = e`: flat in the enclosing block."""
        kw = self.next()
        is_stack, name, value = self.local_decl()
        if name.name in self.scope:
            raise Fail(name.pos, "E003", f"`{name.name}` is already declared: a Janus local may "
                                         f"not reuse a name in scope")
        self.scope.append(name.name)
        out: list = []
        if is_stack:
            self.stacks.add(name.name)
            spec = TypeSpec(kw.pos, INT, array=True, length=self.capacity + 1, stack=True)
            out.append(LocalDecl(kw.pos, name, spec, True))
        else:
            out.append(LocalDecl(kw.pos, name, TypeSpec(kw.pos, INT), True, self.value(value)))
        out += self.statements()
        d = self.peek()
        if not d.is_("delocal"):
            raise Fail(d.pos, "E001", f"expected `delocal {name.name}`, found {d.describe()}")
        self.next()
        dpos = self.peek().pos
        d_stack, dname, dvalue = self.local_decl()
        if dname.name != name.name:
            raise Fail(dname.pos, "E001", f"`delocal {dname.name}` does not match `local "
                                          f"{name.name}` (line {name.pos.line}): locals are "
                                          f"released in reverse order")
        if d_stack != is_stack:
            raise Fail(dpos, "E004", f"`{name.name}` is a{' stack' if is_stack else 'n int'} in "
                                     f"its `local` but not in its `delocal`")
        if is_stack:
            out.append(Delocal(d.pos, dname))
        else:
            out.append(Delocal(d.pos, dname, self.value(dvalue)))
        self.scope.remove(name.name)
        return out

    def local_decl(self):
        t = self.peek()
        if not (t.is_("int") or t.is_("stack")):
            raise Fail(t.pos, "E001", f"expected `int` or `stack`, found {t.describe()}")
        self.next()
        name = self.ident()
        self.expect("=")
        if t.text == "stack":
            self.expect("nil")
            return True, name, None
        return False, name, self.expr()

    def value(self, e):
        """An expression value jana reduces with `-m`."""
        if not self.modular:
            return e
        return Call(e.pos, "wrap32", [e])

    # ---- expressions -----------------------------------------------------------------------
    def lval(self):
        n = self.ident()
        if self.at("["):
            self.next()
            ix = self.expr()
            self.expect("]")
            return Index(n.pos, n.name, self.value(ix))
        return n

    def expr(self, min_prec: int = 1):
        left = self.unary()
        while True:
            t = self.peek()
            info = _BINARY.get(t.text) if t.kind == "op" else None
            if info is None or info[0] < min_prec:
                return left
            prec, kind, op = info
            self.next()
            right = self.expr(prec + 1)
            if kind == "cmp":
                left = Compare(left.pos, op, left, right)
            elif kind == "logic":
                left = Logic(t.pos, op, left, right)
            else:
                left = Binary(t.pos, op, left, right)

    def unary(self):
        t = self.peek()
        if t.is_("!"):
            self.next()
            return Unary(t.pos, "!", self.unary())
        if (t.is_("-") or t.is_("+")) and self.peek(1).kind == "num":
            self.next()                 # Parsec's integer: a sign, then the digits
            n = self.next()
            v = _number(n.text)
            return Literal(t.pos, Lit("int", -v if t.text == "-" else v, t.text + n.text))
        return self.term()

    def term(self):
        t = self.peek()
        if t.is_("("):
            self.next()
            e = self.expr()
            self.expect(")")
            return e
        if t.kind == "num":
            self.next()
            return Literal(t.pos, Lit("int", _number(t.text), t.text))
        if t.is_("true") or t.is_("false"):
            self.next()
            return BoolLit(t.pos, t.text == "true")
        if t.is_("empty") or t.is_("top") or t.is_("size"):
            self.next()
            self.expect("(")
            s = self.ident("a stack or an array")
            self.expect(")")
            return Call(t.pos, t.text, [s])
        if t.is_("nil"):
            raise Fail(t.pos, "E004", "`nil` is the empty stack: test a stack with `empty(s)`")
        if t.kind == "name" and t.text not in KEYWORDS:
            return self.lval()
        raise Fail(t.pos, "E001", f"expected an expression, found {t.describe()}")


def _number(text: str) -> int:
    """A Janus integer literal as Parsec reads it: decimal (leading zeros allowed), 0x
    hexadecimal or 0o octal."""
    if len(text) > MAX_DIGITS:          # out of every range: not converted (Python's limit)
        return TOO_BIG
    head = text[:2].lower()
    return int(text, 16) if head == "0x" else int(text[2:], 8) if head == "0o" else int(text)


def parse_janus(text: str, filename: str, rep: Reporter, modular: bool = False,
                stack_capacity: int = STACK_CAPACITY) -> list:
    """Top-level items (nodes.py) of a Janus program."""
    if text.startswith("\ufeff"):
        text = text[1:]
    fi = rep.add_file(filename, text)
    return JanusParser(tokenize(text, fi, rep), rep, modular, stack_capacity).program()


def assemble_janus(text: str, filename: str = "<janus>", modular: bool = False,
                   stack_capacity: int = STACK_CAPACITY):
    """Compile Janus source to a Program (raises AssemblyError with every error)."""
    from .declarations import collect
    from .driver import compile_program
    rep = Reporter()
    items = parse_janus(text, filename, rep, modular, stack_capacity)
    decls = collect(items, rep)
    decls.procedures_see_globals = False
    if "main" not in decls.funcs:
        rep.error(Pos(0, 1, 1), "E011", "no `main` procedure: declare `procedure main()`")
        rep.raise_if_any()
    return compile_program(decls, rep)
