"""How the debugger shows things: rich output on a terminal, plain stable text otherwise.

`Out` wraps a rich Console.  With colour off (not a TTY, --batch, --color never) it writes no
escape codes and never wraps lines, so transcripts are stable enough to compare in tests.
Source lines are highlighted by a small pygments lexer for `.rasm` (`RasmLexer`).
"""
from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from pygments.lexer import RegexLexer, bygroups, words
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String
from pygments.token import Text as TText
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from isa.table import OPS

__all__ = ["Out", "RasmLexer", "SourceCache"]

_KEYWORDS = ("func", "include", "input", "output", "inout", "global", "const", "local",
             "delocal", "var", "if", "else", "fi", "from", "loop", "until", "for", "in", "with",
             "do", "len", "call", "uncall")
_INSTR = tuple(sorted({op.name.split(".")[0] for op in OPS}))     # every mnemonic of the table
_TYPES = ("int", "fixed", "lns", "float")


class RasmLexer(RegexLexer):
    """Pygments lexer for rvm's `.rasm` assembly language."""
    name = "rasm"
    aliases = ["rasm"]
    filenames = ["*.rasm"]
    tokens = {
        "root": [
            (r"[;#].*?$", Comment.Single),
            (r"\s+", TText),
            (r'"(\\\\|\\"|[^"])*"', String),
            (r"\.fixed\b", Keyword.Declaration),
            (r"^(\s*)([A-Za-z_][\w.]*)(:)(?!\s*(int|fixed|lns|float)\b)",
             bygroups(TText, Name.Label, Punctuation)),
            (words(_KEYWORDS, suffix=r"\b"), Keyword),
            (words(_TYPES, suffix=r"\b"), Keyword.Type),
            (words(_INSTR, suffix=r"\b"), Name.Builtin),
            (r"\$(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)", Number.Hex),
            (r"-?(0[xX][0-9a-fA-F]+|0[bB][01]+)", Number.Hex),
            (r"-?\d+(\.\d*)?([eE][-+]?\d+)?", Number),
            (r"[A-Za-z_]\w*", Name),
            (r"(\+=|-=|\^=|\*=|/=|==|!=|<=|>=|<|>|\.\.|[-+*/&=^])", Operator),
            (r"[{}()\[\],:]", Punctuation),
        ],
    }


class SourceCache:
    """Source files by the names in the program's line table (read once)."""

    def __init__(self) -> None:
        self._files: dict[str, list[str] | None] = {}

    def lines(self, name: str) -> list[str] | None:
        if name not in self._files:
            try:
                self._files[name] = Path(name).read_text().splitlines()
            except (OSError, UnicodeDecodeError):
                self._files[name] = None
        return self._files[name]

    def line(self, name: str, n: int) -> str | None:
        lines = self.lines(name)
        return lines[n - 1] if lines is not None and 1 <= n <= len(lines) else None


class Out:
    """Where the debugger writes.  `color` False gives plain text (no escapes, no wrapping)."""

    def __init__(self, file: IO[str], color: bool):
        self.color = color
        self.file = file
        self.console = Console(file=file, force_terminal=color or None,
                               no_color=not color, color_system="auto" if color else None,
                               highlight=False, emoji=False, markup=False,
                               width=None if color else 10_000, soft_wrap=True)
        self.theme = "monokai"

    def print(self, *parts: Any, style: str | None = None) -> None:
        """One line (or renderable): str parts are taken literally (no markup)."""
        if len(parts) == 1 and not isinstance(parts[0], (str, tuple)):
            self.console.print(parts[0], style=style)
            return
        self.console.print(Text.assemble(*[p if isinstance(p, (Text, tuple)) else str(p)
                                           for p in parts]), style=style)

    def table(self, rows: list[list[str]], headers: list[str] | None = None,
              styles: list[str | None] | None = None) -> None:
        """Aligned columns: a rich Table on a terminal; plain, without trailing blanks,
        otherwise."""
        if not self.color:
            lines = ([headers] if headers else []) + rows
            widths = [max(len(r[k]) for r in lines) for k in range(len(lines[0]))]
            for r in lines:
                self.console.print(Text("  ".join(c.ljust(w) for c, w in zip(r, widths))
                                        .rstrip()))
            return
        t = Table(box=None, show_header=headers is not None, header_style="bold",
                  pad_edge=False)
        for k, h in enumerate(headers or [""] * len(rows[0])):
            t.add_column(h, style=(styles[k] if styles else None) or "")
        for r in rows:
            t.add_row(*r)
        self.console.print(t)

    def text(self, *parts: Any) -> Text:
        return Text.assemble(*[p if isinstance(p, (Text, tuple)) else str(p) for p in parts])

    def code(self, source: str) -> Text:
        """One source line, syntax-highlighted (plain without colour)."""
        if not self.color:
            return Text(source)
        t = Syntax(source, RasmLexer(), theme=self.theme, background_color="default"
                   ).highlight(source)
        t.rstrip()
        return t

    def flush(self) -> None:
        try:
            self.file.flush()
        except (OSError, ValueError):
            pass
