"""Tokens of .rasm text.

A line is a run of tokens; the end of a line is a NEWLINE token (statements end there, or at a
`{` or `}`).  Comments run from `;` or `#` to the end of the line.  Numbers are lexed without a
sign (the parser folds a leading `-`); `$` followed by an integer is a raw 64-bit word.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from .diagnostics import Pos, Reporter

# token kinds
NAME, INT, REAL, RAW, STRING, PUNCT, DIRECTIVE, NEWLINE, EOF = (
    "name", "int", "real", "raw", "string", "punct", "directive", "newline", "eof")


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
        return f"`{self.text}`"


PUNCTUATION = ("+=", "-=", "*=", "/=", "^=", "==", "!=", "<=", ">=", "..",
               "<", ">", ",", ":", "(", ")", "[", "]", "{", "}", "=", "-", "*", "/", "&")

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


def parse_int(text: str) -> int:
    """Value of an unsigned integer literal in decimal, 0x hex or 0b binary."""
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


def tokenize(text: str, file: int, rep: Reporter) -> list[Token]:
    """All tokens of a file, ending with EOF; lexical errors are reported and skipped."""
    toks: list[Token] = []
    lines = source_lines(text)
    for ln, line in enumerate(lines, 1):
        i = 0
        while i < len(line):
            m = _TOKEN.match(line, i)
            pos = Pos(file, ln, i + 1)
            if m is None:
                if line[i] == '"':
                    rep.error(pos, "E001", "unterminated string")
                    break
                rep.error(pos, "E001", f"unexpected character {line[i]!r}")
                i += 1
                continue
            kind, tok = m.lastgroup, m.group()
            end = m.end()
            if kind in ("num", "raw") and end < len(line) and (line[end].isalnum() or line[end] == "_"):
                bad = re.match(r"[\w.$]+", line[i:]).group()
                rep.error(pos, "E001", f"malformed number `{bad}`")
                i += len(bad)
                continue
            i = end
            if kind in ("ws", "comment"):
                continue
            if kind == "num":
                if _INTEGER.fullmatch(tok):
                    toks.append(Token(INT, tok, parse_int(tok), pos))
                else:
                    toks.append(Token(REAL, tok, tok, pos))
            elif kind == "raw":
                body = tok[1:]
                if not _INTEGER.fullmatch(body):
                    rep.error(pos, "E001", f"a raw word `{tok}` must be an integer")
                    continue
                toks.append(Token(RAW, tok, parse_int(body), pos))
            elif kind == "string":
                val = unescape(tok[1:-1])
                if val is None:
                    rep.error(pos, "E001", f"invalid escape in string {tok}")
                    val = tok[1:-1]
                toks.append(Token(STRING, val, None, pos))
            elif kind == "name":
                toks.append(Token(NAME, tok, None, pos))
            elif kind == "directive":
                toks.append(Token(DIRECTIVE, tok, None, pos))
            else:
                toks.append(Token(PUNCT, tok, None, pos))
        toks.append(Token(NEWLINE, "\n", None, Pos(file, ln, len(line) + 1)))
    nlines = len(lines)
    toks.append(Token(EOF, "", None, Pos(file, max(nlines, 1), 1)))
    return toks
