"""An instruction's circuit at a width: isa/gates.py's realization emitted into a Builder.

Circuits are cached by everything that changes their gates: opcode, width, fraction bits
(fixed products and conversions only), the immediate modulo 2**n or the rotation count, the
condition word, the function id, and which source operands name the same cell.
"""
from __future__ import annotations

from functools import lru_cache

from isa import gates
from isa.functions import CMP_ALWAYS, FN2, cond_parts
from isa.table import OP_BY_NAME, Op
from isa.types import FIXED, INT

from .circuit import Builder, Circuit


class NotRealized(ValueError):
    """An opcode (or condition type) without a gate realization."""


def is_realized(op: Op, cc: int | None = None, fn: int | None = None) -> bool:
    """Whether `op` has a circuit (for a condition, with the condition word cc; for a family
    with a function operand, for the function fn; None: for some condition or function)."""
    if op.family in gates.CONDITIONS:
        if cc is None:
            return True
        cmp, t = cond_parts(cc)
        return cmp == CMP_ALWAYS or t in (INT, FIXED)
    return gates.realization(op, fn) is not None


def default_fn(op: Op) -> int:
    """The function a fn family's circuit realizes when none is given: the first realized."""
    found = gates.realization(op)
    if found is None or found[0].fns is None:
        return 0
    return gates.realized_fns(found[0], op.types[0])[0]


def fn_name(op: Op, fn: int) -> str:
    """The circuit's name: the mnemonic, and for a fn family the function (`addfn2.i(min)`)."""
    return f"{op.name}({FN2[fn].name})" if "fn" in op.operands else op.name


def uses_fraction_bits(op: Op) -> bool:
    """The circuit of op depends on F: a fixed cell and a realization that reads it (isa/gates.py:
    Realization.fraction_bits; an inverse family's is its inverse's)."""
    found = gates.realization(op)
    return FIXED in op.types and found is not None and found[0].fraction_bits


def circuit(op: Op | str, n: int, F: int = 0, imm: int = 0, cc: int = 0,
            alias: tuple[int, ...] | None = None, fn: int | None = None) -> Circuit:
    """The circuit of `op` at width n.  `imm` is the immediate raw word (addi, subi, xori) or
    the bit count (rotl, rotr); `cc` the condition word of jmp/join/assert/xorcmp; `fn` the
    function id of addfn2/subfn2 (None: the first realized one); `alias[i]` the index of the
    first register operand naming the same cell as operand i (None: all distinct).  An
    inverse family's circuit is its inverse's circuit reversed."""
    if isinstance(op, str):
        op = OP_BY_NAME[op]
    if not uses_fraction_bits(op):
        F = 0
    if op.family in ("rotl", "rotr"):
        imm %= n
    elif op.family in ("addi", "subi", "xori"):
        imm &= (1 << n) - 1
    else:
        imm = 0
    if "cc" not in op.operands:
        cc = 0
    elif op.family in gates.CONDITIONS and not is_realized(op, cc):
        raise NotRealized(f"{op.name}: comparisons of {cond_parts(cc)[1].name_} cells are not "
                          f"realized (int and fixed only)")
    if "fn" not in op.operands:
        fn = 0
    elif fn is None:
        fn = default_fn(op)
    roles = gates.register_roles(op)
    if alias is None or all(alias[i] == i for i in range(len(alias))):
        alias = tuple(range(len(roles)))
    return _cached(op.name, n, F, imm, cc, alias, fn)


@lru_cache(maxsize=512)
def _cached(name: str, n: int, F: int, imm: int, cc: int, alias: tuple[int, ...],
            fn: int = 0) -> Circuit:
    op = OP_BY_NAME[name]
    has_fn = "fn" in op.operands
    found = gates.realization(op, fn if has_fn else None)
    if found is None:
        what = f"{op.name} with {FN2[fn].name}" if has_fn and 0 <= fn < len(FN2) else op.name
        raise NotRealized(f"{what} has no gate realization (realized: int and fixed "
                          f"add/sub, immediates, inc/dec, addmul/submul, xor family, neg, "
                          f"not, swap, rotations, int<->fixed conversions, comparisons, "
                          f"xorcmp, min/max, and/or/xor, shl/shr)")
    _, realized = found
    if realized is not op:
        inv = _cached(realized.name, n, F, imm, cc, alias, fn).inverse()
        return Circuit(fn_name(op, fn), inv.gates, inv.controls, inv.n_wires, inv.inputs,
                       inv.outputs, inv.sources, uncompute=inv.uncompute)
    roles = gates.register_roles(op)
    b = Builder()
    regs: list[list[int]] = []
    for i, role in enumerate(roles):
        if alias[i] != i:
            regs.append(regs[alias[i]])
        else:
            regs.append(b.register(role, 1 if role == "cond" else n))
    p = gates.params(op, n, F=F, imm=imm, cc=cc, fn=fn)
    relabel = gates.realize(b, op, regs, p)
    outputs = None
    if relabel is not None:
        outputs = {roles[i]: tuple(ws) for i, ws in enumerate(relabel) if alias[i] == i}
    sources = tuple(r for i, r in enumerate(roles) if alias[i] == i and r in ("a", "b"))
    return b.build(fn_name(op, fn), outputs, sources)


def realized_opcodes() -> list[Op]:
    """Every opcode with a realization (conditions counted once per family)."""
    from isa.table import OPS
    return [op for op in OPS if gates.realization(op) is not None]
