"""Source loading: tokenize and parse a file, and splice its includes in place.

`include "path"` is looked up relative to the including file's directory, then in each include
path, then (for `std/...`) in the package's own assembler/std/ directory.  A file is included
once: a later include of the same file is skipped; including a file that is still being read
(a cycle) is error E010, and so is a file that cannot be found or read, a file that is not a
`.rasm` source (include reads programs only: `include "/etc/passwd"` is refused unread), and a
chain of includes more than MAX_NESTING deep.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from .diagnostics import Reporter
from .lexer import TokenStream
from .nodes import Include
from .parser import Parser

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
MAX_NESTING = 64          # files being read at once (an include chain)


def _candidates(path: str, including: str, include_paths: Sequence[str]) -> list[str]:
    if os.path.isabs(path):
        return [path]
    here = os.path.dirname(including) if not including.startswith("<") else ""
    out = [os.path.join(here, path)]
    out += [os.path.join(str(p), path) for p in include_paths]
    if path.replace("\\", "/").startswith("std/"):
        out.append(os.path.join(PACKAGE_DIR, path))
    return out


def _key(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


class Loader:
    def __init__(self, rep: Reporter, include_paths: Sequence[str], bodies: bool):
        self.rep = rep
        self.bodies = bodies
        self.include_paths = tuple(include_paths)
        self.done: set[str] = set()
        self.stack: list[str] = []

    def load(self, text: str, filename: str) -> list:
        """Top-level items of `text` with every include spliced in."""
        if text.startswith("\ufeff"):
            text = text[1:]
        fi = self.rep.add_file(filename, text)
        key = _key(filename) if not filename.startswith("<") else filename
        self.stack.append(key)
        self.done.add(key)
        items: list = []
        for it in Parser(TokenStream(text, fi, self.rep), self.rep).parse_file(self.bodies):
            if isinstance(it, Include):
                items += self.include(it, filename)
            else:
                items.append(it)
        self.stack.pop()
        return items

    def include(self, it: Include, including: str) -> list:
        if not it.path.endswith(".rasm"):
            self.rep.error(it.pos, "E010", f"`{it.path}` is not a .rasm file: include reads "
                                           f"program sources only")
            return []
        if len(self.stack) >= MAX_NESTING:
            self.rep.error(it.pos, "E010", f"includes nested more than {MAX_NESTING} deep")
            return []
        found = next((c for c in _candidates(it.path, including, self.include_paths)
                      if os.path.isfile(c)), None)
        if found is None:
            self.rep.error(it.pos, "E010", f"cannot find include `{it.path}`")
            return []
        key = _key(found)
        if key in self.stack:
            self.rep.error(it.pos, "E010", f"`{it.path}` includes itself (include cycle)")
            return []
        if key in self.done:
            return []
        try:
            with open(found, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            self.rep.error(it.pos, "E010", f"cannot read include `{it.path}`: {e}")
            return []
        return self.load(text, os.path.normpath(found))


def load_source(text: str, filename: str, include_paths: Sequence[str], rep: Reporter,
                bodies: bool = False) -> list:
    """Parse `text` (named `filename`) and its includes into one list of top-level items.
    Function bodies are skipped (FuncDecl.body_at says where each starts) unless `bodies`."""
    return Loader(rep, include_paths, bodies).load(text, filename)
