"""Assembly diagnostics: positions, error records and the collector that reports them at once.

Every error carries a code (E001..E014, see docs/rasm.md) and a position; the assembler keeps
going after an error and raises one `AssemblyError` listing all of them, sorted by file and
position.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from isa.errors import RVMError

CODES: dict[str, str] = {
    "E001": "syntax error",
    "E002": "undefined name",
    "E003": "duplicate name",
    "E004": "type mismatch",
    "E005": "operand aliasing",
    "E006": "immediate or literal out of range",
    "E007": "jump/join pairing",
    "E008": "wrong operand kind",
    "E009": "wrong number of arguments",
    "E010": "include not found or included in a cycle",
    "E011": "no main function, or main has parameters",
    "E012": "unknown instruction or function",
    "E013": "loop counter or bound written in a for body",
    "E014": "control flow leaves a with block, or a label used across functions",
}


class Pos(NamedTuple):
    """A source position: index into the unit's file list, 1-based line and column."""
    file: int
    line: int
    col: int


MAX_DIAGNOSTICS = 100     # reported at once; the rest are counted
CLIP = 120                # characters of a source line shown around the caret


@dataclass
class Diagnostic:
    """One error: where, which code, what, and the source line it points into."""
    file: str
    line: int
    col: int
    code: str
    message: str
    source_line: str | None = ""    # None: a diagnostic about a whole file

    def __str__(self) -> str:
        if self.source_line is None:                 # about the whole file: no line to show
            return f"{self.file}:{self.line}:{self.col}: error[{self.code}]: {self.message}"
        line, col = self.source_line, max(self.col - 1, 0)
        if len(line) > CLIP:                         # a long line: the part around the caret
            lo = max(0, min(col - CLIP // 2, len(line) - CLIP))
            line = ("..." if lo else "") + line[lo:lo + CLIP] + \
                ("..." if lo + CLIP < len(line) else "")
            col = col - lo + (3 if lo else 0)
        caret = "".join("\t" if c == "\t" else " " for c in line[:col])
        return (f"{self.file}:{self.line}:{self.col}: error[{self.code}]: {self.message}\n"
                f"  {line}\n  {caret}^")


class AssemblyError(RVMError):
    """Raised when a source has errors; `diagnostics` lists them (at most MAX_DIAGNOSTICS;
    `more` counts the ones left out)."""

    def __init__(self, diagnostics: list[Diagnostic], more: int = 0):
        self.diagnostics = list(diagnostics)
        self.more = more
        super().__init__(str(self))

    def __str__(self) -> str:
        text = "\n".join(str(d) for d in self.diagnostics)
        if self.more:
            text += f"\n... and {self.more} more error{'s' * (self.more > 1)}"
        return text


class Fail(Exception):
    """Abandon the current statement with one diagnostic (caught by the statement loop)."""

    def __init__(self, pos: Pos, code: str, message: str):
        super().__init__(message)
        self.pos, self.code, self.message = pos, code, message


class Reporter:
    """The files of one assembly and the diagnostics found in them."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.texts: list[str] = []           # the source of each file (lines are cut on demand)
        self.diagnostics: list[tuple[int, Diagnostic]] = []
        self._seen: set[tuple] = set()
        self.more = 0                        # errors past MAX_DIAGNOSTICS, only counted

    def add_file(self, name: str, text: str) -> int:
        self.files.append(name)
        self.texts.append(text)
        return len(self.files) - 1

    def error(self, pos: Pos, code: str, message: str) -> None:
        key = (pos, code, message)
        if key in self._seen:          # a line lexed by both passes reports its errors once
            return
        self._seen.add(key)
        if len(self.diagnostics) >= MAX_DIAGNOSTICS:
            self.more += 1
            return
        if len(message) > 2 * CLIP:                  # a message quoting a huge name or literal
            message = message[:CLIP] + " ... " + message[-CLIP // 2:]
        from .lexer import source_line
        text = self.texts[pos.file] if 0 <= pos.file < len(self.texts) else ""
        src = source_line(text, pos.line) if pos.line > 0 else ""
        name = self.files[pos.file] if 0 <= pos.file < len(self.files) else "?"
        self.diagnostics.append((pos.file, Diagnostic(name, pos.line, pos.col, code, message, src)))

    def fail(self, f: Fail) -> None:
        self.error(f.pos, f.code, f.message)

    @property
    def has_errors(self) -> bool:
        return bool(self.diagnostics)

    def raise_if_any(self) -> None:
        if self.diagnostics:
            ordered = sorted(self.diagnostics, key=lambda fd: (fd[0], fd[1].line, fd[1].col))
            raise AssemblyError([d for _, d in ordered], self.more)
