"""The instruction table: the one source of truth for rvm's instruction set.

Every opcode is declared here once: its stable number, mnemonic, family, the cell types it acts
on, its operand kinds, its inverse, flags, statement syntax and a short doc.  The assembler's
operand checks, the disassembler, the interpreter's inverse map (rvm/_opcodes.pxi is generated
from this module at build time), the bytecode verifier and docs/isa.md are all derived from it.

Encoding: an instruction is a row of six int64 words ``[opcode, s1, s2, s3, s4, s5]``; operands
fill s1.. in the order of ``Op.operands``.  Operand kinds:

  y        cell the instruction updates (an operand word, see rvm/program.py)
  a        cell it only reads (an operand word)
  imm      immediate raw 64-bit word of the instruction's type
  k        small immediate integer (bit count 0..63)
  fn       function id (isa/functions.py)
  cc       condition word: cmp | (type << 4)
  pc       code address
  callsite index into Program.callsites
  func     index into Program.functions
  trace    index into Program.traces
  msg      0, or 1 + an index into Program.traces: the message (and value names) a failed
           assert reports

Opcode numbers are part of the .rbc format: new opcodes are appended (the generation order below
is fixed) and the format version goes up when a number changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .functions import FN1, FN2
from .types import ALL_TYPES, FIXED, FLOAT, INT, LNS, NumType

# flags
DATA = "data"              # update of cells; runs backward as its inverse opcode
CONTROL = "control"        # changes control flow; direction handled by the machine
SELF_INVERSE = "self-inverse"
EXACT = "exact"            # inverse restores every bit
READS_ONLY = "reads-only"  # changes no cell (checks, trace)


@dataclass(frozen=True)
class Op:
    code: int
    name: str                     # mnemonic, unique: family + "." + type suffix(es)
    family: str
    types: tuple[NumType, ...]    # () for untyped; (dst, src) for conversions
    operands: tuple[str, ...]
    inverse: str                  # mnemonic of the inverse opcode
    flags: frozenset[str]
    syntax: str                   # statement form; {0}.. are operands, {fn} the function name
    doc: str
    family_doc: str = field(default="", compare=False)
    # value semantics, in C over the named operands (isa/cgen.py; docs/internals.md): an
    # update `y OP= f(sources)` has its group law OP (LAW_ADD, LAW_XOR, LAW_MUL), its sign
    # (-1: the inverse OP) and f (statements `pre` that may trap, then the expression f);
    # any other data instruction has a `body` that rewrites its targets (a rotation's sign
    # is its angle's: irot is rot by -theta)
    law: str = ""
    sign: int = 1
    pre: str = ""
    f: str = ""
    body: str = ""

    @property
    def type(self) -> NumType | None:
        return self.types[0] if self.types else None

    @property
    def targets(self) -> tuple[int, ...]:
        """Operand positions of the cells this instruction writes."""
        return tuple(i for i, k in enumerate(self.operands) if k == "y")

    @property
    def sources(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.operands) if k == "a")

    @property
    def operand_types(self) -> tuple[NumType | None, ...]:
        """Cell type of each operand (y, a and imm kinds; None for the others and for untyped
        opcodes); a conversion's y has its destination type and its a the source type."""
        out = []
        for kind in self.operands:
            if kind not in ("y", "a", "imm") or not self.types:
                out.append(None)
            elif len(self.types) == 2:
                out.append(self.types[0] if kind == "y" else self.types[1])
            else:
                out.append(self.types[0])
        return tuple(out)


_ops: list[Op] = []


def _name(family: str, types: tuple[NumType, ...]) -> str:
    return family + ("." + "".join(t.suffix for t in types) if types else "")


# group laws of updates y OP= f(sources): OP and its inverse (sign -1)
LAW_ADD = "add"            # int, fixed: wrapping +/-; float: +/- (a non-finite result traps)
LAW_XOR = "xor"            # int bits: ^ (its own inverse)
LAW_MUL = "mul"            # lns: * and / (exact: the logs add)
# data families whose semantics is the machine's state (value stack, scopes), not a C body
MACHINE_FAMILIES = ("push", "pop", "alloc", "free", "addgrad", "subgrad", "addjvp", "subjvp")
# families whose two targets may be one cell (a swap of a cell with itself is the identity)
TARGETS_MAY_COINCIDE = ("swap",)


def _per_type(spec, tt: tuple) -> str:
    """The C text of `spec` for the types tt: one text for every type, or a dict keyed by
    the type (or the type tuple of a conversion); no entry is no text."""
    if isinstance(spec, dict):
        return spec.get(tt if len(tt) > 1 else tt[0], "") if tt else ""
    return spec or ""


def _family(family: str, inverse: str, types, operands, syntax: str, doc: str, flags=(),
            law: str = "", sign: int = 1, pre="", f="", body="") -> None:
    """Declare one family: one opcode per type (or type tuple), with its value semantics (an
    update's law, sign and f, or a body; see Op)."""
    for t in types:
        tt = t if isinstance(t, tuple) else ((t,) if t is not None else ())
        fl = set(flags)
        if inverse == family:
            fl.add(SELF_INVERSE)
        if CONTROL not in fl and READS_ONLY not in fl:
            fl.add(DATA)
        if FLOAT not in tt and CONTROL not in fl:
            fl.add(EXACT)
        lw = law(tt) if callable(law) else law
        _ops.append(Op(len(_ops), _name(family, tt), family, tt, tuple(operands),
                       _name(inverse, tt), frozenset(fl), syntax, doc, law=lw,
                       sign=sign, pre=_per_type(pre, tt), f=_per_type(f, tt),
                       body=_per_type(body, tt)))


NUM = (INT, FIXED, FLOAT)

# --- additive updates -------------------------------------------------------------------
# C text of f per type: an int or fixed f is a word added with wrapping, a float f a double
# (operand names: y, y2 targets; a, b sources; imm, k, fn, cc; F the fraction bits; $T the
# type code, $S a conversion's source type code; TRY(e) traps with e's nonzero AK_* code)
_F_A = {INT: "a", FIXED: "a", FLOAT: "rvm_w2f(a)"}
_F_IMM = {INT: "imm", FIXED: "imm", FLOAT: "rvm_w2f(imm)"}
_F_MUL = {INT: "(u64)a * (u64)b", FIXED: "rvm_fixed_mul(a, b, F)",
          FLOAT: "rvm_w2f(a) * rvm_w2f(b)"}
_PRE_DIV = {INT: "i64 q; TRY(rvm_int_div(a, b, &q));",
            FIXED: "i64 q; TRY(rvm_fixed_div(a, b, F, &q));",
            FLOAT: "if (rvm_w2f(b) == 0.0) return AK_DIV0;"}
_F_DIV = {INT: "q", FIXED: "q", FLOAT: "rvm_w2f(a) / rvm_w2f(b)"}
_F_W = {INT: "w", FIXED: "w", FLOAT: "rvm_w2f(w)"}
_PRE_FN1 = "i64 w; TRY(rvm_fn1_value((int)fn, $T, a, F, &w));"
_PRE_FN2 = "i64 w; TRY(rvm_fn2_value((int)fn, $T, a, b, F, &w));"
_ADD = dict(law=LAW_ADD, sign=1)
_SUB = dict(law=LAW_ADD, sign=-1)

_family("add", "sub", NUM, ("y", "a"), "{0} += {1}", "y += a (wrapping for int and fixed)",
        **_ADD, f=_F_A)
_family("sub", "add", NUM, ("y", "a"), "{0} -= {1}", "y -= a", **_SUB, f=_F_A)
_family("addi", "subi", NUM, ("y", "imm"), "{0} += {1}", "y += immediate", **_ADD, f=_F_IMM)
_family("subi", "addi", NUM, ("y", "imm"), "{0} -= {1}", "y -= immediate", **_SUB, f=_F_IMM)
_family("inc", "dec", (INT,), ("y",), "inc {0}", "y += 1", **_ADD, f="1")
_family("dec", "inc", (INT,), ("y",), "dec {0}", "y -= 1", **_SUB, f="1")
_family("addmul", "submul", NUM, ("y", "a", "a"), "{0} += {1} * {2}",
        "y += a*b; fixed: the 128-bit product rounded half to even to F fraction bits",
        **_ADD, f=_F_MUL)
_family("submul", "addmul", NUM, ("y", "a", "a"), "{0} -= {1} * {2}", "y -= a*b, same rounding",
        **_SUB, f=_F_MUL)
_family("adddiv", "subdiv", NUM, ("y", "a", "a"), "{0} += {1} / {2}",
        "y += a/b; int: floor division; fixed: (a << F)/b rounded half to even; traps if b == 0",
        **_ADD, pre=_PRE_DIV, f=_F_DIV)
_family("subdiv", "adddiv", NUM, ("y", "a", "a"), "{0} -= {1} / {2}", "y -= a/b, same rounding",
        **_SUB, pre=_PRE_DIV, f=_F_DIV)
# --- bit updates ------------------------------------------------------------------------
_family("xor", "xor", (INT,), ("y", "a"), "{0} ^= {1}", "y ^= a", law=LAW_XOR, f="a")
_family("xori", "xori", (INT,), ("y", "imm"), "{0} ^= {1}", "y ^= immediate", law=LAW_XOR,
        f="imm")
_family("xorand", "xorand", (INT,), ("y", "a", "a"), "{0} ^= {1} & {2}",
        "y ^= a & b (the Toffoli gate on 64 bit lanes)", law=LAW_XOR, f="a & b")
# --- permutations -----------------------------------------------------------------------
_NEG = "y = (i64)((u64)0 - (u64)y);"
_family("neg", "neg", ALL_TYPES, ("y",), "neg {0}",
        "y = -y (int wraps at INT64_MIN; lns flips the sign; float flips the sign bit)",
        body={INT: _NEG, FIXED: _NEG, FLOAT: "y = (i64)((u64)y ^ ((u64)1 << 63));",
              LNS: "if ((y >> 1) != ((i64)((u64)1 << 63) >> 1)) y ^= 1;  /* zero stays */"})
_family("not", "not", (INT,), ("y",), "not {0}", "y = ~y", body="y = ~y;")
_family("rotl", "rotr", (INT,), ("y", "k"), "rotl {0}, {1}", "rotate the 64 bits of y left by k",
        body="int r = (int)(k & 63); if (r) y = (i64)(((u64)y << r) | ((u64)y >> (64 - r)));")
_family("rotr", "rotl", (INT,), ("y", "k"), "rotr {0}, {1}", "rotate the 64 bits of y right by k",
        body="int r = (int)((64 - k) & 63); "
             "if (r) y = (i64)(((u64)y << r) | ((u64)y >> (64 - r)));")
_family("swap", "swap", ALL_TYPES, ("y", "y"), "swap {0}, {1}", "exchange two cells",
        body="i64 v = y; y = y2; y2 = v;")
_family("rot", "irot", (FIXED, FLOAT), ("y", "y", "a"), "rot {0}, {1}, {2}",
        "Givens rotation (x, y) <- (x cos t - y sin t, x sin t + y cos t); fixed: three lifting "
        "shears, exact inverse (see isa/arith.py)",
        body={FIXED: "TRY(rvm_rot_fixed(&y, &y2, a, F, 0));",
              FLOAT: "TRY(rvm_rot_float(&y, &y2, a, 0, cs));"})
_family("irot", "rot", (FIXED, FLOAT), ("y", "y", "a"), "irot {0}, {1}, {2}",
        "inverse of rot (fixed: the shears undone in reverse order)", sign=-1,
        body={FIXED: "TRY(rvm_rot_fixed(&y, &y2, a, F, 1));",
              FLOAT: "TRY(rvm_rot_float(&y, &y2, a, 1, cs));"})
# --- functions --------------------------------------------------------------------------
_family("addfn", "subfn", NUM, ("y", "a", "fn"), "{0} += {fn}({1})",
        "y += f(x) for a unary f of isa/functions.py; fixed evaluates f in binary64 and rounds "
        "half to even; traps on a domain error or a result out of range",
        **_ADD, pre=_PRE_FN1, f=_F_W)
_family("subfn", "addfn", NUM, ("y", "a", "fn"), "{0} -= {fn}({1})", "y -= f(x)",
        **_SUB, pre=_PRE_FN1, f=_F_W)
_family("addfn2", "subfn2", (FIXED, FLOAT), ("y", "a", "a", "fn"), "{0} += {fn}({1}, {2})",
        "y += f(a, b) for a binary f of isa/functions.py (fixed, float: pow, atan2, hypot, min, "
        "max; int: min, max, mod, shl, shr, bitand, bitor, bitxor)", **_ADD, pre=_PRE_FN2, f=_F_W)
_family("subfn2", "addfn2", (FIXED, FLOAT), ("y", "a", "a", "fn"), "{0} -= {fn}({1}, {2})",
        "y -= f(a, b)", **_SUB, pre=_PRE_FN2, f=_F_W)
# --- log numbers ------------------------------------------------------------------------
_family("mul", "div", (LNS,), ("y", "a"), "{0} *= {1}",
        "y *= a, exact: adds the logs and xors the signs; traps if a is zero",
        law=LAW_MUL, sign=1, f="a")
_family("div", "mul", (LNS,), ("y", "a"), "{0} /= {1}", "y /= a, exact; traps if a is zero",
        law=LAW_MUL, sign=-1, f="a")
# --- conversions: y += T(x), and y *= lns(x) --------------------------------------------
_CVT_PAIRS = tuple((d, s) for d in ALL_TYPES for s in ALL_TYPES if d != s)
_PRE_CVT = "i64 w; TRY(rvm_convert($T, $S, a, F, &w));"
for _d, _s in _CVT_PAIRS:
    if _d == LNS:
        _family("cvt", "uncvt", ((_d, _s),), ("y", "a"), "{0} *= lns({1})",
                "y *= lns(x): multiply by x rounded to lns; traps if x is zero",
                law=LAW_MUL, sign=1, pre=_PRE_CVT, f="w")
        _family("uncvt", "cvt", ((_d, _s),), ("y", "a"), "{0} /= lns({1})", "y /= lns(x)",
                law=LAW_MUL, sign=-1, pre=_PRE_CVT, f="w")
    else:
        _family("cvt", "uncvt", ((_d, _s),), ("y", "a"), "{0} += " + _d.name_ + "({1})",
                "y += x converted to y's type (rounded half to even; traps if out of range)",
                **_ADD, pre=_PRE_CVT, f=_F_W[_d])
        _family("uncvt", "cvt", ((_d, _s),), ("y", "a"), "{0} -= " + _d.name_ + "({1})",
                "y -= x converted, same rounding", **_SUB, pre=_PRE_CVT, f=_F_W[_d])
# --- stack and ancillas (untyped: move raw words) ---------------------------------------
_family("push", "pop", (None,), ("y",), "push {0}",
        "move y onto the value stack and zero y; traps on stack overflow")
_family("pop", "push", (None,), ("y",), "pop {0}",
        "move the top of the value stack into y; traps if y is not zero or the stack is empty")
_family("alloc", "free", (None,), ("y",), "alloc {0}",
        "an ancilla comes into scope: traps unless y is zero")
_family("free", "alloc", (None,), ("y",), "free {0}",
        "an ancilla leaves scope: traps unless y is zero")
# --- checks and tracing -----------------------------------------------------------------
_family("assert", "assert", (None,), ("cc", "a", "a", "msg"), "assert {cond}{msg}",
        "trap unless the condition holds (checked in both directions); the trap carries the "
        "optional message", flags=(READS_ONLY,))
_family("trace", "trace", (None,), ("trace",), "trace {trace}",
        "report a message and cell values to the trace handler; changes nothing",
        flags=(READS_ONLY,))
_family("nop", "nop", (None,), (), "nop", "do nothing", flags=(READS_ONLY,))
# --- control ----------------------------------------------------------------------------
_family("jmp", "join", (None,), ("cc", "a", "a", "pc"), "jmp {label}{if}",
        "fork: go to the join at pc if the condition holds (always without one), else fall "
        "through.  Backward it is a join: the condition must hold iff control came from pc",
        flags=(CONTROL,))
_family("join", "jmp", (None,), ("cc", "a", "a", "pc"), "join {label}{if}",
        "join: control came from the jmp at pc iff the condition holds (traps otherwise).  "
        "Backward it is a fork: it goes back to pc iff the condition holds", flags=(CONTROL,))
_family("call", "uncall", (None,), ("callsite",), "call {call}",
        "run a function forward with by-reference arguments", flags=(CONTROL,))
_family("uncall", "call", (None,), ("callsite",), "uncall {call}",
        "run a function backward", flags=(CONTROL,))
_family("begin", "end", (None,), ("func",), "(function entry)",
        "function entry; reached going backward it returns (locals must be zero)",
        flags=(CONTROL,))
_family("end", "begin", (None,), ("func",), "(function exit)",
        "function exit; reached going forward it returns (locals must be zero)",
        flags=(CONTROL,))

# --- appended for expressions (docs/rasm.md): numbers above are part of the .rbc format -----
# int forms of y += f(a, b): min, max, mod, shl, shr, bitand, bitor, bitxor (isa/functions.py)
_family("addfn2", "subfn2", (INT,), ("y", "a", "a", "fn"), "{0} += {fn}({1}, {2})",
        "y += f(a, b) for a binary f (pow, atan2, hypot; min, max; int: mod, shl, shr, bitand, "
        "bitor, bitxor)", **_ADD, pre=_PRE_FN2, f=_F_W)
_family("subfn2", "addfn2", (INT,), ("y", "a", "a", "fn"), "{0} -= {fn}({1}, {2})",
        "y -= f(a, b)", **_SUB, pre=_PRE_FN2, f=_F_W)
# float y += (a + b): the sum rounded once, so a float temporary is written once from zero and
# uncomputed exactly (int and fixed sums are exact: expressions split them into two updates)
_PRE_SUM = "double s = rvm_w2f(a) + rvm_w2f(b); if (!isfinite(s)) return AK_RANGE;"
_PRE_DIF = "double s = rvm_w2f(a) - rvm_w2f(b); if (!isfinite(s)) return AK_RANGE;"
_family("addsum", "subsum", (FLOAT,), ("y", "a", "a"), "{0} += {1} + {2}",
        "y += (a + b): the sum rounded, then added", **_ADD, pre=_PRE_SUM, f="s")
_family("subsum", "addsum", (FLOAT,), ("y", "a", "a"), "{0} -= {1} + {2}", "y -= (a + b)",
        **_SUB, pre=_PRE_SUM, f="s")
_family("adddif", "subdif", (FLOAT,), ("y", "a", "a"), "{0} += {1} - {2}",
        "y += (a - b): the difference rounded, then added", **_ADD, pre=_PRE_DIF, f="s")
_family("subdif", "adddif", (FLOAT,), ("y", "a", "a"), "{0} -= {1} - {2}", "y -= (a - b)",
        **_SUB, pre=_PRE_DIF, f="s")
# comparisons as 0/1 values: y (int) ^= 1 iff the condition holds; the sources have the
# condition's type (the second type of the opcode)
_family("xorcmp", "xorcmp", tuple((INT, _t) for _t in ALL_TYPES), ("y", "cc", "a", "a"),
        "{0} ^= {cond}", "y ^= 1 if the condition holds, else y unchanged (y is int)",
        flags=(EXACT,), law=LAW_XOR, f="rvm_compare(cc, a, b)")

# --- appended: the controlled swap (Fredkin) -------------------------------------------------
_family("cswap", "cswap", (INT,), ("y", "y", "a"), "cswap {0}, {1}, {2}",
        "exchange the bits of x and y where c has a 1 bit (the Fredkin gate on 64 bit lanes)",
        body="i64 t = (y ^ y2) & a; y ^= t; y2 ^= t;")

# --- appended: derivative statements (nested AD, docs/ad.md "Derivatives inside a program") --
# The callsite calls f with a scratch float cell first (f adds its value into it); the target,
# wrt and along operands are cells (dlen = -2) or arrays of dlen cells (-1: the length of the
# wrt parameter array).  The machine runs f forward and back on a scratch set of duals and adds
# the derivative; its own derivative for an outer mode is a second-order mode (Hessian-vector).
_family("addgrad", "subgrad", (FLOAT,), ("callsite", "dy", "da", "dlen"),
        "{1} += grad {call} wrt {2}",
        "g += the gradient of f (its first parameter, a scratch output) with respect to the wrt "
        "cell or array, by an adjoint sweep of f on scratch duals")
_family("subgrad", "addgrad", (FLOAT,), ("callsite", "dy", "da", "dlen"),
        "{1} -= grad {call} wrt {2}", "g -= the same gradient")
_family("addjvp", "subjvp", (FLOAT,), ("callsite", "y", "da", "da", "dlen"),
        "{1} += jvp {call} wrt {2} along {3}",
        "d += the directional derivative of f (first parameter: a scratch output) at the wrt "
        "cells along v, by a tangent run of f on scratch duals")
_family("subjvp", "addjvp", (FLOAT,), ("callsite", "y", "da", "da", "dlen"),
        "{1} -= jvp {call} wrt {2} along {3}", "d -= the same directional derivative")
OPS: tuple[Op, ...] = tuple(_ops)
OP_BY_NAME: dict[str, Op] = {op.name: op for op in OPS}
assert len(OP_BY_NAME) == len(OPS)
INVERSE: tuple[int, ...] = tuple(OP_BY_NAME[op.inverse].code for op in OPS)
FAMILIES: dict[str, tuple[Op, ...]] = {}
for _op in OPS:
    FAMILIES.setdefault(_op.family, ())
    FAMILIES[_op.family] += (_op,)

ROW_WIDTH = 6   # words per instruction


def positive_family(op: Op) -> str:
    """The family of the update with the + law of op's pair (sub -> add, uncvt -> cvt, irot ->
    rot): where the pair's shared f and derivative are declared."""
    return op.family if op.sign > 0 else OP_BY_NAME[op.inverse].family


def op_for(family: str, *types: NumType) -> Op | None:
    """The opcode of `family` acting on `types` (None if the family has no such variant)."""
    return OP_BY_NAME.get(_name(family, tuple(types)))


def c_name(op: Op) -> str:
    """Identifier of the opcode in the generated C/Cython enum, e.g. OP_ADDMUL_X."""
    return "OP_" + op.name.replace(".", "_").upper()


def generate_pxi() -> str:
    """Cython include with the opcode enum and the inverse map (written at build time)."""
    lines = ["# Generated from isa/table.py by setup.py; do not edit.", "cdef enum:"]
    lines += [f"    {c_name(op)} = {op.code}" for op in OPS]
    lines += [f"    N_OPCODES = {len(OPS)}", "",
              "cdef enum:"]
    lines += [f"    FN1_{f.name.upper()} = {f.id}" for f in FN1]
    lines += [f"    FN2_{f.name.upper()} = {f.id}" for f in FN2]
    lines += ["", f"cdef int INVERSE_TABLE[{len(OPS)}]",
              "INVERSE_TABLE[:] = [" + ", ".join(str(i) for i in INVERSE) + "]", ""]
    return "\n".join(lines)
