"""Checking an instruction's circuit against isa/arith.py, the reference semantics.

At width n a register holds the interpreter's word modulo 2**n; the reference runs
isa.arith.execute (or isa.arith.compare for conditions) on the n-bit values sign-extended to
64 bits and keeps the result modulo 2**n.  A rotation rotates all 64 bits, so at a width that
divides 64 it is checked on the word that repeats the n bits 64/n times (rotating that word
is rotating the n bits in each copy); at other widths there is no 64-bit reference for it.

Both directions: the circuit is run forward on every input and compared with the reference,
then its inverse (the gate list reversed) is run on the outputs and must give the inputs back.
Every run also checks that ancillas came back zero and sources unchanged (rvm/hw/sim.py).

Exhaustive at small widths (all 2**bits inputs when the registers have at most 24 bits, in
chunks of 2**16); else random inputs with the edge values 0, 1, -1, min and max mixed in.
For an update y OP= f(sources) (and a condition cond ^= c(a, b)) an exhaustive reference
calls execute once per source value with y = 0 and combines y by the group law of the update
(`target OP= f(sources)`, docs/machine.md), which a random sample of full calls confirms: so
y += a*b at 8 bits needs 2**16 reference calls for its 2**24 inputs.

Inputs on which the reference traps (a shift by a negative count) are never run by the machine
(it traps first): they are left out of the comparison, but the reversed circuit must still
give them back.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from isa.arith import ArithTrap, compare, execute
from isa.gates import CONDITIONS, register_roles
from isa.table import LAW_ADD, LAW_XOR, OP_BY_NAME, OPS, Op

from .build import circuit, default_fn, uses_fraction_bits
from .sim import CircuitError, check_clean, load, read
from .sim import run as sim_run

# y OP= f(sources): the law that combines y with f (the sign of sub-families is in f)
# the group law of an update y OP= f(sources) on its words, from the table (isa/table.py)
GROUP_LAW = {LAW_ADD: "+", LAW_XOR: "^"}
CHUNK = 1 << 20


def sext(v: int, n: int) -> int:
    v &= (1 << n) - 1
    return v - (1 << n) if v >> (n - 1) else v


def replicate(v: int, n: int) -> int:
    """The 64-bit word repeating the n bits of v (n divides 64), signed."""
    w = 0
    for i in range(0, 64, n):
        w |= (v & ((1 << n) - 1)) << i
    return sext(w, 64)


@dataclass
class Result:
    op: str
    n: int
    F: int
    imm: int
    cc: int
    inputs: int
    exhaustive: bool
    ok: bool
    message: str = ""
    seconds: float = 0.0
    fn: int = 0
    valid: int = 0                  # inputs the reference defines (the others trap)


class Reference:
    """isa/arith.py's semantics of one opcode at width n, on register values."""

    def __init__(self, op: Op, n: int, F: int, imm: int = 0, cc: int = 0, fn: int = 0):
        self.op, self.n, self.F, self.imm, self.cc, self.fn = op, n, F, imm, cc, fn
        self.roles = register_roles(op)
        self.mask = (1 << n) - 1
        if op.family in ("rotl", "rotr") and 64 % n:
            raise ValueError(f"{op.name} rotates 64 bits: at width {n} (not a divisor of 64) "
                             f"isa/arith.py gives no reference")

    def one(self, vals: dict[str, int]) -> dict[str, int]:
        """Expected outputs for one input (n-bit unsigned register values)."""
        op, n = self.op, self.n
        if op.family in CONDITIONS:
            c = compare(self.cc, sext(vals["a"], n), sext(vals["b"], n))
            return {"a": vals["a"], "b": vals["b"], "cond": vals["cond"] ^ int(c)}
        if op.family in ("rotl", "rotr"):
            word = execute(op, [replicate(vals["y"], n), self.imm], self.F)[0]
            if word != replicate(word, n):
                raise AssertionError("rotation of a replicated word is not replicated")
            return {"y": word & self.mask}
        words, regs = [], iter(self.roles)
        for kind in op.operands:
            if kind in ("y", "a"):
                words.append(sext(vals[next(regs)], n))
            else:
                words.append(self.extra(kind))
        out = execute(op, words, self.F)
        res, regs = {}, iter(self.roles)
        for kind, w in zip(op.operands, out):
            if kind in ("y", "a"):
                res[next(regs)] = w & self.mask
        return res

    def extra(self, kind: str) -> int:
        """The value of a non-register operand (immediate or count, condition, function)."""
        return self.cc if kind == "cc" else self.fn if kind == "fn" else self.imm

    def many(self, values: dict[str, np.ndarray], table: dict | None = None
             ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Expected outputs for arrays of inputs, and which inputs the reference defines (it
        traps on the others); `table` (from `source_table`) turns an update y OP= f(sources)
        or a condition into a lookup of f and the group law."""
        if table is not None:
            key = np.zeros(len(values[table["target"]]), dtype=np.uint64)
            for s in table["sources"]:
                key = (key << np.uint64(self.n)) | values[s]
            d = table["d"][key]
            out = dict(values)
            t = table["target"]
            if table["law"] == "^":
                out[t] = values[t] ^ d
            else:
                out[t] = (values[t] + d) & np.uint64(self.mask)
            return out, table["valid"][key]
        count = len(next(iter(values.values())))
        out = {k: np.empty(count, dtype=np.uint64) for k in values}
        valid = np.ones(count, dtype=bool)
        for i in range(count):
            try:
                r = self.one({k: int(v[i]) for k, v in values.items()})
            except ArithTrap:
                valid[i] = False
                r = {}
            for k in values:
                out[k][i] = r.get(k, int(values[k][i]))
        return out, valid

    def source_table(self, rng: np.random.Generator) -> dict | None:
        """For an update y OP= f(sources) (or a condition, cond ^= c(a, b)) whose sources have
        at most 16 bits together: f for every source value, after checking the group law of
        the update (docs/machine.md) on random full calls."""
        fam = self.op.family
        law = GROUP_LAW.get(self.op.law, "^" if fam in CONDITIONS else None)
        if law is None:
            return None
        target = "cond" if fam in CONDITIONS else "y"
        sources = [r for r in self.roles if r != target]
        n = self.n
        if n * len(sources) > 16:
            return None
        size = 1 << (n * len(sources))
        d = np.empty(size, dtype=np.uint64)
        valid = np.ones(size, dtype=bool)
        if fam in CONDITIONS:
            d = _condition_table(self.cc, n)
        else:
            # execute on the words directly: y = 0, the sources sign-extended, immediates
            slots = [i for i, kind in enumerate(self.op.operands) if kind == "a"]
            words = [0 if kind in ("y", "a") else self.extra(kind) for kind in self.op.operands]
            m, op, F = self.mask, self.op, self.F
            ext = [sext(v, n) for v in range(1 << n)]
            for k in range(size):
                for j, i in enumerate(reversed(slots)):
                    words[i] = ext[(k >> (n * j)) & m]
                try:
                    d[k] = execute(op, words, F)[0] & m
                except ArithTrap:
                    d[k] = 0
                    valid[k] = False
        tmask = 1 if target == "cond" else self.mask
        for _ in range(256):            # the group law, on full calls
            vals = {s: int(rng.integers(0, 1 << n)) for s in sources}
            y = int(rng.integers(0, tmask + 1))
            k = 0
            for s in sources:
                k = (k << n) | vals[s]
            if not valid[k]:
                continue
            got = self.one({**vals, target: y})[target]
            f = int(d[k])
            want = (y + f) & self.mask if law == "+" else y ^ f
            if got != want:
                raise AssertionError(f"{self.op.name}: the group law fails at {target}={y} "
                                     f"{vals}")
        return {"d": d, "valid": valid, "law": law, "target": target, "sources": sources}


@lru_cache(maxsize=64)
def _condition_table(cc: int, n: int) -> np.ndarray:
    """compare(cc, a, b) for every pair of n-bit values, index (a << n) | b: one table for
    jmp, join and assert, which all evaluate the same condition."""
    vals = [sext(v, n) for v in range(1 << n)]
    d = np.array([compare(cc, a, b) for a in vals for b in vals], dtype=np.uint64)
    d.flags.writeable = False
    return d


def _widths(op: Op, n: int) -> dict[str, int]:
    return {r: (1 if r == "cond" else n) for r in register_roles(op)}


def _edge_values(n: int) -> list[int]:
    m = (1 << n) - 1
    return [0, 1, m, 1 << (n - 1), m >> 1, 2, m - 1]


def _inputs_exhaustive(bits: dict[str, int], start: int, count: int) -> dict[str, np.ndarray]:
    k = np.arange(start, start + count, dtype=np.uint64)
    out, shift = {}, 0
    for r, w in bits.items():
        out[r] = (k >> np.uint64(shift)) & np.uint64((1 << w) - 1)
        shift += w
    return out


def _inputs_random(bits: dict[str, int], count: int, rng: np.random.Generator
                   ) -> dict[str, np.ndarray]:
    out = {}
    for r, w in bits.items():
        v = rng.integers(0, 1 << 63, count, dtype=np.uint64) << np.uint64(1)
        v ^= rng.integers(0, 2, count, dtype=np.uint64)
        v &= np.uint64((1 << w) - 1) if w < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
        edges = _edge_values(w) if w > 1 else [0, 1]
        for j, e in enumerate(edges[:count]):
            v[(j * 7 + len(out)) % count] = e
        out[r] = v
    return out


def verify(op: Op | str, n: int, F: int = 0, imm: int = 0, cc: int = 0,
           exhaustive: bool | None = None, samples: int = 4096, seed: int = 0,
           fn: int | None = None) -> Result:
    """Check the circuit of `op` at width n against isa/arith.py in both directions (fn: the
    function of addfn2/subfn2, None: the first realized one)."""
    if isinstance(op, str):
        op = OP_BY_NAME[op]
    if fn is None:
        fn = default_fn(op) if "fn" in op.operands else 0
    t0 = time.perf_counter()
    bits = _widths(op, n)
    total = sum(bits.values())
    if exhaustive is None:
        exhaustive = total <= 24
    result = Result(op.name, n, F, imm, cc, 0, exhaustive, True, fn=fn)
    rng = np.random.default_rng(seed)
    try:
        c = circuit(op, n, F=F, imm=imm, cc=cc, fn=fn)
        inv = c.inverse()
        ref = Reference(op, n, F, imm, cc, fn)
        table = ref.source_table(rng) if exhaustive else None
        if exhaustive:
            chunks = [(s, min(CHUNK, (1 << total) - s)) for s in range(0, 1 << total, CHUNK)]
        else:
            chunks = [(0, samples)]
        for start, count in chunks:
            vals = (_inputs_exhaustive(bits, start, count) if exhaustive
                    else _inputs_random(bits, count, rng))
            want, valid = ref.many(vals, table)
            _run_both_ways(op, c, inv, bits, vals, want, start if exhaustive else None, count,
                           valid)
            result.inputs += count
            result.valid += int(valid.sum())
    except (CircuitError, AssertionError, ArithTrap, ValueError) as e:
        result.ok, result.message = False, str(e)
    result.seconds = time.perf_counter() - t0
    return result


# lane patterns of the six low bits of an input's index within a 64-lane block
_LANES = (0xAAAAAAAAAAAAAAAA, 0xCCCCCCCCCCCCCCCC, 0xF0F0F0F0F0F0F0F0, 0xFF00FF00FF00FF00,
          0xFFFF0000FFFF0000, 0xFFFFFFFF00000000)


def _exhaustive_state(c, bits: dict[str, int], start: int, count: int) -> np.ndarray:
    """The bit-sliced state of inputs start..start+count-1 (start a multiple of 64) made
    directly: input k's bit s is bit s of k, so wire s holds a fixed lane pattern for s < 6
    and all-ones or all-zeros blocks above (lanes past count hold repeats, never compared)."""
    blocks = (count + 63) // 64
    state = np.zeros((c.n_wires, blocks), dtype=np.uint64)
    jb = np.arange(start // 64, start // 64 + blocks, dtype=np.uint64)
    ones = np.uint64(0xFFFFFFFFFFFFFFFF)
    s = 0
    for r, _w in bits.items():
        for wire in c.inputs[r]:
            if s < 6:
                state[wire, :] = np.uint64(_LANES[s])
            else:
                state[wire, :] = np.where((jb >> np.uint64(s - 6)) & np.uint64(1), ones,
                                          np.uint64(0))
            s += 1
    return state


def _run_both_ways(op: Op, c, inv, bits, vals, want, start: int | None, count: int,
                   valid: np.ndarray) -> None:
    """Forward on the inputs (checked against `want`, ancillas and sources), then the reversed
    gate list on the outputs in place: the state must be the input state again."""
    state = (_exhaustive_state(c, bits, start, count) if start is not None
             else load(c, vals, (count + 63) // 64))
    init = state.copy()
    sim_run(c, state)
    check_clean(c, state, count)
    for s in c.sources:                 # unchanged sources: their wires equal, bit-sliced
        ws = list(c.outputs[s])
        if list(c.inputs[s]) != ws or (state[ws] != init[ws]).any():
            got = read(state, c.outputs[s], count)
            bad = np.flatnonzero(got != vals[s])
            i = int(bad[0]) if len(bad) else 0
            raise CircuitError(f"{c.name}: source {s} changed from {int(vals[s][i])} to "
                               f"{int(got[i])}")
    got = {name: read(state, ws, count) for name, ws in c.outputs.items()
           if name not in c.sources}
    _compare(op, "forward", vals, got, {k: v for k, v in want.items() if k in got}, valid)
    sim_run(inv, state)
    check_clean(inv, state, count)
    diff = state != init
    if diff.any():
        w, blk = (int(x[0]) for x in np.nonzero(diff))
        lane = (int(state[w, blk]) ^ int(init[w, blk])) & -(int(state[w, blk]) ^ int(init[w, blk]))
        i = 64 * blk + lane.bit_length() - 1
        inputs = ", ".join(f"{r}={int(v[i])}" for r, v in vals.items()) if i < count else "?"
        raise AssertionError(f"{op.name} backward (the reversed circuit): wire "
                             f"{c.wire_name(w)} does not come back for {inputs}")


def _compare(op: Op, way: str, vals, got, want, valid: np.ndarray) -> None:
    for k in want:
        bad = np.flatnonzero((got[k] != want[k]) & valid)
        if len(bad):
            i = int(bad[0])
            inputs = ", ".join(f"{r}={int(v[i])}" for r, v in vals.items())
            raise AssertionError(f"{op.name} {way}: {k} = {int(got[k][i])}, expected "
                                 f"{int(want[k][i])} for {inputs}")


def default_cases(op: Op, n: int, F: int) -> list[dict]:
    """The parameter sets `rvm hw verify` tries for an opcode: every immediate (or a sample
    at large widths), every rotation count, every comparison of int and fixed cells."""
    from isa.functions import CMP_ALWAYS, CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE, cond_word
    from isa.gates import realization, realized_fns
    from isa.types import FIXED, INT

    fam = op.family
    if fam in CONDITIONS:
        return [dict(cc=cond_word(c, t)) for t in (INT, FIXED)
                for c in (CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE)]
    if fam == "xorcmp":
        return [dict(cc=cond_word(c, op.types[1]))
                for c in (CMP_ALWAYS, CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE)]
    if "fn" in op.operands:
        found = realization(op)
        return [dict(fn=f) for f in realized_fns(found[0], op.types[0])] if found else []
    if fam in ("rotl", "rotr"):
        return [dict(imm=k) for k in range(64)]
    if fam in ("addi", "subi", "xori"):
        if n <= 8:
            return [dict(imm=v) for v in range(1 << n)]
        m = (1 << n) - 1
        return [dict(imm=v) for v in (0, 1, 3, m, 1 << (n - 1), 0x5A5A5A5A5A5A5A5A & m,
                                      0x0123456789ABCDEF & m)]
    return [dict(F=F)] if uses_fraction_bits(op) else [dict()]


def all_realized() -> list[Op]:
    from .build import is_realized
    return [op for op in OPS if is_realized(op)]
