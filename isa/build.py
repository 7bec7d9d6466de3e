"""What the compiled core is built from, and the check that a build matches the table.

setup.py writes every file of GENERATED from isa/ before it compiles rvm/_core.pyx; the Cython
include (rvm/_opcodes.pxi) also carries TABLE_HASH, a digest of the table and of every
generated text.  At import the core hands its TABLE_HASH to check_build: a table edited
without a rebuild is an ImportError that names the fix, never a core that indexes its
fixed-size per-opcode arrays with the new table's numbers.
"""
from __future__ import annotations

import hashlib
from dataclasses import fields

from .cgen import generate_abi_header, generate_isa_header, generate_vm_run
from .derivatives import generate_header, rule_for
from .functions import FN1, FN2
from .table import OPS, generate_pxi

REBUILD = ("rvm's compiled core was built from a different instruction table; "
           "rebuild: pip install -e .")


def _describe(op) -> str:
    """Every compared field of an Op (flags sorted: a frozenset's order varies per process),
    and its differentiation rule."""
    parts = []
    for f in fields(op):
        if not f.compare:
            continue
        v = getattr(op, f.name)
        if isinstance(v, frozenset):
            v = tuple(sorted(v))
        parts.append(f"{f.name}={v!r}")
    parts.append(f"rule={rule_for(op)!r}")
    return " ".join(parts)


def _texts() -> list[str]:
    """The generated texts, without the hash itself."""
    return [generate_pxi(), generate_abi_header(), generate_header(), generate_isa_header(),
            generate_vm_run()]


def table_hash(ops=None) -> str:
    """Digest of the opcode table `ops` (default: isa's), the function ids and the generated
    texts."""
    h = hashlib.sha256()
    for op in OPS if ops is None else ops:
        h.update(_describe(op).encode() + b"\n")
    for f in (*FN1, *FN2):
        h.update(f"fn {f.arity} {f.id} {f.name} {sorted(t.suffix for t in f.types)}\n".encode())
    for text in _texts():
        h.update(text.encode() + b"\0")
    return h.hexdigest()


def check_build(built: str, ops=None) -> None:
    """Raise ImportError unless `built` (the TABLE_HASH compiled into the core) is the hash of
    the table `ops` as isa/ declares it now."""
    if built != table_hash(ops):
        raise ImportError(REBUILD)


def generate_opcodes_pxi() -> str:
    """rvm/_opcodes.pxi: the opcode enum and inverse map, plus the table hash."""
    return generate_pxi() + f'\nTABLE_HASH = "{table_hash()}"\n'


# generated file (relative to the repository) -> function returning its text
GENERATED = {
    "rvm/_opcodes.pxi": generate_opcodes_pxi,
    "rvm/_abi.h": generate_abi_header,
    "rvm/_deriv.h": generate_header,
    "rvm/_isa.h": generate_isa_header,
    "rvm/_vm_run.pxi": generate_vm_run,
}
