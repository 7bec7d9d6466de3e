"""Statement shapes derived from the instruction table (isa/table.py).

Every `Op.syntax` string, e.g. ``"{0} += {1} * {2}"`` or ``"{0} *= lns({1})"``, is compiled once
into a pattern of elements; the parser matches statements against these patterns and the
disassembler prints instructions with the same strings, so the language's instruction forms
have exactly one definition.  Elements:

  ("word", text)   a fixed token: punctuation or a keyword
  ("opnd", k)      the operand at position k of Op.operands (a cell, literal or len(p))
  ("fn", None)     a function name of isa/functions.py
  ("label", None)  a label name (jmp/join)
  ("if", None)     an optional `if COND`
  ("cond", None)   a condition `a OP b`
  ("call", None)   `f(arg, ...)`
  ("trace", None)  `"message", operand, ...`
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from isa.functions import FN1, FN2, Fn
from isa.table import OPS, Op
from isa.types import TYPE_NAMES, NumType

Elem = tuple[str, object]


@dataclass(frozen=True)
class Shape:
    family: str
    syntax: str
    elems: tuple[Elem, ...]
    ops: tuple[Op, ...]              # every opcode of the family with this syntax
    dst: NumType | None = None       # the target type named in a conversion's syntax
    lead: str | None = None          # the leading keyword (`inc`, ...); None for `y OP= ...`
    words: frozenset[str] = frozenset()   # every fixed token (a quick pre-filter)

    @property
    def operands(self) -> tuple[str, ...]:
        return self.ops[0].operands


_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_WORDS = re.compile(r"[A-Za-z_]\w*|\+=|-=|\*=|/=|\^=|\S")


def _compile(syntax: str) -> tuple[Elem, ...] | None:
    if syntax.startswith("("):
        return None                  # begin/end: not a statement
    elems: list[Elem] = []
    last = 0
    for m in _PLACEHOLDER.finditer(syntax):
        elems += [("word", w) for w in _WORDS.findall(syntax[last:m.start()])]
        name = m.group(1)
        elems.append(("opnd", int(name)) if name.isdigit() else (name, None))
        last = m.end()
    elems += [("word", w) for w in _WORDS.findall(syntax[last:])]
    return tuple(elems)


def _build() -> tuple[Shape, ...]:
    groups: dict[tuple[str, str], list[Op]] = {}
    for op in OPS:
        groups.setdefault((op.family, op.syntax), []).append(op)
    shapes = []
    for (family, syntax), ops in groups.items():
        elems = _compile(syntax)
        if elems is None:
            continue
        dst = None
        type_words = [v for k, v in elems if k == "word" and v in TYPE_NAMES.values()]
        if type_words and len(ops[0].types) == 2:
            dst = ops[0].types[0]
        kind, first = elems[0]
        lead = first if kind == "word" and first[:1].isalpha() else None
        words = frozenset(str(v) for k, v in elems if k == "word")
        shapes.append(Shape(family, syntax, elems, tuple(ops), dst, lead, words))
    return tuple(shapes)


SHAPES: tuple[Shape, ...] = _build()
SHAPE_OF_OP: dict[int, Shape] = {op.code: s for s in SHAPES for op in s.ops}

#: words that appear in instruction syntax (mnemonics, type names): reserved
TABLE_WORDS: frozenset[str] = frozenset(
    str(v) for s in SHAPES for k, v in s.elems if k == "word" and str(v)[:1].isalpha())
#: leading keywords of instruction statements
MNEMONICS: frozenset[str] = frozenset(s.lead for s in SHAPES if s.lead)
#: the shapes that start with a keyword, by keyword (None: `y OP= ...` forms)
BY_LEAD: dict[str | None, tuple[Shape, ...]] = {
    lead: tuple(s for s in SHAPES if s.lead == lead) for lead in {*MNEMONICS, None}}


def fn_table(shape_or_op) -> tuple[Fn, ...]:
    """The function table a `{fn}` element draws from: FN1 or FN2 by the number of sources."""
    operands = shape_or_op.operands
    return FN2 if operands.count("a") == 2 else FN1
