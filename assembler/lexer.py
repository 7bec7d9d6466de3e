"""Tokens of .rasm text, made a line at a time as the parser asks for them.

A line is a run of tokens; the end of a line is a NEWLINE token (statements end there, or at a
`{` or `}`).  Comments run from `;` or `#` to the end of the line.  Numbers are lexed without a
sign (the parser folds a leading `-`); `$` followed by an integer is a raw 64-bit word.  The
stream never holds more than a few lines of tokens, so a file of a million statements costs
its text and nothing per line.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from .diagnostics import Pos, Reporter

# token kinds
NAME, INT, REAL, RAW, STRING, PUNCT, DIRECTIVE, NEWLINE, EOF = (
    "name", "int", "real", "raw", "string", "punct", "directive", "newline", "eof")

_new = tuple.__new__


class Token(NamedTuple):
    kind: str
    text: str            # the source text (for a string: the decoded value)
    value: object        # int for INT/RAW, the text for REAL, None otherwise
    pos: Pos

    def is_(self, text: str) -> bool:
        """Is this the punctuation or word `text` (not a string literal)?"""
        return self.text == text and self.kind in (PUNCT, NAME)

    def describe(self) -> str:
        if self.kind == NEWLINE:
            return "end of line"
        if self.kind == EOF:
            return "end of file"
        if self.kind == STRING:
            return "a string"
        return f"`{self.text}`" if len(self.text) <= 40 else f"`{self.text[:30]}...`"


# longest first where one is a prefix of another
PUNCTUATION = ("<=>", "+=", "-=", "*=", "/=", "^=", "==", "!=", "<=", ">=", "<<", ">>", "&&",
               "||", "..", "<", ">", ",", ":", "(", ")", "[", "]", "{", "}", "=", "+", "-",
               "*", "/", "%", "&", "|", "^", "~", "!")

_NUM = r"0[xX][0-9a-fA-F]+|0[bB][01]+|\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+"
_TOKEN = re.compile(
    r"(?P<ws>[ \t\r\f\v]+)|(?P<comment>[;#].*)"
    r"|(?P<directive>\.[A-Za-z_]\w*)"
    r"|(?P<raw>\$(?:" + _NUM + r"))"
    r"|(?P<num>" + _NUM + r")"
    r"|(?P<name>[A-Za-z_]\w*)"
    r'|(?P<string>"(?:[^"\\]|\\.)*")'
    r"|(?P<punct>" + "|".join(re.escape(p) for p in PUNCTUATION) + r")")
_INTEGER = re.compile(r"0[xXbB].*|\d+")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "0": "\0"}


# An integer literal longer than this cannot fit a cell, whatever its base: its value is taken
# as TOO_BIG (so the range check reports it) without converting the digits.
MAX_DIGITS = 80
TOO_BIG = 1 << 100


def parse_int(text: str) -> int:
    """Value of an unsigned integer literal in decimal, 0x hex or 0b binary."""
    if len(text) > MAX_DIGITS:
        return TOO_BIG
    low = text.lower()
    if low.startswith("0x"):
        return int(text[2:], 16)
    if low.startswith("0b"):
        return int(text[2:], 2)
    return int(text)


def unescape(body: str) -> str | None:
    """Decode the inside of a string literal; None if an escape is invalid."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1: i + 2]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", body[i + 2:i + 4]):
            out.append(chr(int(body[i + 2:i + 4], 16)))
            i += 4
        else:
            return None
    return "".join(out)


def escape(s: str) -> str:
    """Quote a string so that `unescape` gives it back."""
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif ord(c) < 0x20 or ord(c) == 0x7f:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def source_lines(text: str) -> list[str]:
    """The lines of a source as editors count them: split at \n only (a trailing \r is
    dropped); str.splitlines would also split at U+2028, U+0085 ... inside comments."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def source_line(text: str, n: int) -> str:
    """Line n (1-based) of a source, as `source_lines` counts them ("" past the end)."""
    start = 0
    for _ in range(n - 1):
        start = text.find("\n", start) + 1
        if start == 0:
            return ""
    end = text.find("\n", start)
    line = text[start:] if end < 0 else text[start:end]
    return line[:-1] if line.endswith("\r") else line


def line_tokens(line: str, file: int, ln: int, rep: Reporter, out: list) -> None:
    """Append the tokens of one line (without its NEWLINE) to `out`; lexical errors are
    reported and skipped."""
    i, n = 0, len(line)
    match = _TOKEN.match
    while i < n:
        m = match(line, i)
        if m is None:
            pos = Pos(file, ln, i + 1)
            if line[i] == '"':
                rep.error(pos, "E001", "unterminated string")
                return
            rep.error(pos, "E001", f"unexpected character {line[i]!r}")
            i += 1
            continue
        kind = m.lastgroup
        end = m.end()
        if kind == "ws" or kind == "comment":
            i = end
            continue
        tok = m.group()
        pos = _new(Pos, (file, ln, i + 1))
        if kind == "name":
            out.append(_new(Token, (NAME, tok, None, pos)))
        elif kind == "punct":
            out.append(_new(Token, (PUNCT, tok, None, pos)))
        elif kind == "num" or kind == "raw":
            if end < n and (line[end].isalnum() or line[end] == "_"):
                bad = re.match(r"[\w.$]+", line[i:]).group()
                rep.error(pos, "E001", f"malformed number `{bad}`")
                i += len(bad)
                continue
            if kind == "num":
                if tok.isdigit() and len(tok) <= MAX_DIGITS:
                    out.append(_new(Token, (INT, tok, int(tok), pos)))
                elif _INTEGER.fullmatch(tok):
                    out.append(_new(Token, (INT, tok, parse_int(tok), pos)))
                else:
                    out.append(_new(Token, (REAL, tok, tok, pos)))
            else:
                body = tok[1:]
                if not _INTEGER.fullmatch(body):
                    rep.error(pos, "E001", f"a raw word `{tok}` must be an integer")
                else:
                    out.append(Token(RAW, tok, parse_int(body), pos))
        elif kind == "string":
            val = unescape(tok[1:-1])
            if val is None:
                rep.error(pos, "E001", f"invalid escape in string {tok}")
                val = tok[1:-1]
            out.append(Token(STRING, val, None, pos))
        else:
            out.append(Token(DIRECTIVE, tok, None, pos))
        i = end


class TokenStream:
    """The tokens of a file from a starting offset, lexed a line at a time on demand.

    `peek(k)` looks k tokens ahead (across lines); consumed tokens are dropped, so memory stays
    bounded however long the file is.
    """

    def __init__(self, text: str, file: int, rep: Reporter, offset: int = 0, line: int = 1):
        self.text = text
        self.file = file
        self.rep = rep
        self.offset = offset          # where the next unread line starts
        self.line = line              # its number
        self.toks: list[Token] = []
        self.i = 0
        self.done = False
        self.pinned = 0               # > 0: keep the buffer (the parser saved an index)
        self.starts: dict[int, int] = {}   # line -> offset, for the lines in the buffer

    def _fill(self) -> None:
        if self.done:
            self.toks.append(self.toks[-1])
            return
        text, start = self.text, self.offset
        if start >= len(text):
            self.done = True
            last = max(self.line - 1, 1)
            self.toks.append(Token(EOF, "", None, Pos(self.file, last, 1)))
            return
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        line = text[start:end]
        if line.endswith("\r"):
            line = line[:-1]
        if self.i > 256 and not self.pinned:
            del self.toks[:self.i]
            self.i = 0
            self.starts.clear()
        self.starts[self.line] = start
        line_tokens(line, self.file, self.line, self.rep, self.toks)
        self.toks.append(Token(NEWLINE, "\n", None, Pos(self.file, self.line, len(line) + 1)))
        self.offset = end + 1
        self.line += 1

    def raw_line(self) -> str | None:
        """The next unread line, when every token made so far is read (else None)."""
        if self.i < len(self.toks) or self.done:
            return None
        text, start = self.text, self.offset
        if start >= len(text):
            return None
        end = text.find("\n", start)
        return text[start:] if end < 0 else text[start:end]

    def skip_line(self, line: str) -> None:
        """Mark the line `raw_line` gave as read (the fast path made its statement)."""
        self.offset += len(line) + 1
        self.line += 1

    def start_of(self, line: int) -> int:
        """Offset of the start of a line whose tokens are in the buffer."""
        return self.starts[line]

    def peek(self, k: int = 0) -> Token:
        j = self.i + k
        toks = self.toks
        if j < len(toks):
            return toks[j]
        while self.i + k >= len(self.toks):
            self._fill()                # may drop consumed tokens (and move self.i)
        return self.toks[self.i + k]

    def next(self) -> Token:
        i = self.i
        toks = self.toks
        t = toks[i] if i < len(toks) else self.peek()
        if t.kind != EOF:
            self.i += 1
        return t


def tokenize(text: str, file: int, rep: Reporter) -> list[Token]:
    """All tokens of a file, ending with EOF (for tools and tests; the parser streams)."""
    out: list[Token] = []
    ts = TokenStream(text, file, rep)
    while True:
        t = ts.next()
        out.append(t)
        if t.kind == EOF:
            return out
