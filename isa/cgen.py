"""C from the instruction table: rvm/_isa.h, one static inline function per data instruction.

Every data instruction of isa/table.py carries its value semantics in C over named operands:
an update `y OP= f(sources)` its law, sign and f (statements that may trap, then the
expression), any other instruction a body that rewrites its targets.  generate_isa_header()
writes from them

  * the opcode and type enums (the same numbers as rvm/_opcodes.pxi, from the same table);
  * rvm_op_<name>(targets, sources, extras, F, cs): the instruction on its operand words.  A
    target is read into a local, the body runs, and the local is written back only when the
    body did not trap, so a trap changes nothing;
  * rvm_lop_<name>(the same parameters): its lane form for the batch lanes
    (rvm/native/lanes.py): the same words, the targets stored whatever happens, and a
    nonzero flag exactly where rvm_op_<name> traps;
  * rvm_exec(op, p0, p1, p2, row, F, cs): every such instruction on its cells (in operand
    order) and its row, and RVM_NO_CASE, a named refusal, for any other opcode.

The dispatch loop, the loop kernels (rvm/_kernels.pxi) and the native code (rvm/native/codegen.py)
run these functions, so what an instruction computes is written once, here in the table;
isa/arith.py stays the independent oracle the tests compare them with.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .table import (
    DATA,
    LAW_ADD,
    LAW_MUL,
    LAW_XOR,
    MACHINE_FAMILIES,
    OPS,
    TARGETS_MAY_COINCIDE,
    c_name,
)
from .types import ALL_TYPES, FIXED, FLOAT, INT, LNS

RVM_NO_CASE = 100          # rvm_exec's refusal (distinct from every AK_* code)
_EXTRA = ("imm", "k", "fn", "cc")


class MissingBody(Exception):
    """A data instruction of the table has no C semantics (the build stops here)."""


def func_name(op) -> str:
    return "rvm_op_" + op.name.replace(".", "_")


def operand_names(op) -> list[str]:
    """The C name of each operand: targets y, y2; sources a, b; imm, k, fn, cc."""
    names, ny, na = [], 0, 0
    for kind in op.operands:
        if kind == "y":
            names.append("y" if ny == 0 else "y2")
            ny += 1
        elif kind == "a":
            names.append("a" if na == 0 else "b")
            na += 1
        elif kind in _EXTRA:
            names.append(kind)
        else:
            raise MissingBody(f"{op.name}: operand kind {kind!r} has no C name")
    return names


def has_body(op) -> bool:
    return DATA in op.flags and op.family not in MACHINE_FAMILIES


def _subst(text: str, op) -> str:
    text = text.replace("$T", str(int(op.types[0])))
    if len(op.types) > 1:
        text = text.replace("$S", str(int(op.types[1])))
    return text


def statements(op) -> list[str]:
    """The C statements of the instruction on locals y (y2) and its sources."""
    if op.body:
        return [_subst(op.body, op)]
    if not (op.law and op.f):
        raise MissingBody(f"{op.name} is a data instruction without C semantics: give its "
                          f"family a law and f, or a body, in isa/table.py")
    out = [_subst(op.pre, op)] if op.pre else []
    f = _subst(op.f, op)
    t = op.types[0]
    s = op.sign
    if op.law == LAW_ADD and t == FLOAT:
        out.append(f"TRY(rvm_float_add(y, {f}, {s}, &y));")
    elif op.law == LAW_ADD and t in (INT, FIXED):
        out.append(f"y = (i64)((u64)y {'+' if s > 0 else '-'} (u64)({f}));")
    elif op.law == LAW_XOR and t == INT:
        out.append(f"y ^= (i64)({f});")
    elif op.law == LAW_MUL and t == LNS:
        out.append(f"TRY(rvm_lns_mul(y, {f}, {s}, &y));")
    else:
        raise MissingBody(f"{op.name}: law {op.law!r} has no C form on {t.name}")
    return out


def function(op) -> str:
    names = operand_names(op)
    params = [f"i64* {n}_" if n in ("y", "y2") else f"i64 {n}" for n in names]
    params += ["int F", "double* cs"]
    targets = [n for n in names if n in ("y", "y2")]
    lines = [f"/* {op.name}: {op.syntax.format(*names, fn='fn', cond='cc', label='pc')} */",
             f"RVM_OP int {func_name(op)}({', '.join(params)})", "{"]
    lines.append("    " + " ".join(f"i64 {n} = *{n}_;" for n in targets) + " (void)F; (void)cs;")
    lines += ["    " + s for s in statements(op)]
    lines.append("    " + " ".join(f"*{n}_ = {n};" for n in targets))
    lines += ["    return AK_OK;", "}"]
    return "\n".join(lines)


# ---- lane forms (rvm/native/lanes.py: W batch rows at once) ---------------------------------
# A batch's group of W rows gives up as a whole when any lane's check fails (it reruns every
# row on the scalar path, which reports the trap), so a lane needs no trap code and no
# unchanged target: rvm_lop_<name> stores its targets whatever happens and returns nonzero
# iff rvm_op_<name> on the same words would trap.  No select keeps a target on a failed check,
# which took the check into every row's dependency chain; the caller ORs the flags and reads
# them before anything observable.  A check that fails does not stop the lane: the form goes
# on with the value it has (a failed TRY call leaves its outputs as they were), so a table
# check may never guard an operation that faults (an int division: rvm_int_div checks itself).
_LANE_RETURN = re.compile(r"if \((.*?)\) return AK_[A-Z0-9_]+;")


def implied_by_result(cond: str, op) -> bool:
    """Is the pre check `if (cond) return AK_X;` of a float update y +/-= f implied by the
    update's own check that its result is finite?  IEEE: y + t and y - t are not finite when
    the term t is not (an infinity gives an infinity or NaN, a NaN a NaN), and a quotient by
    zero is an infinity or NaN.  So when f is the checked value itself (addsum's s), or f
    divides by the value checked to be zero (adddiv's b), the result's check flags every
    lane the pre check would, and the lane form leaves the pre check out."""
    if not (op.law == LAW_ADD and op.types and op.types[0] == FLOAT):
        return False
    f = _subst(op.f, op).replace(" ", "")
    c = cond.replace(" ", "")
    m = re.fullmatch(r"!isfinite\((\w+)\)", c)
    if m and f == m.group(1):
        return True
    m = re.fullmatch(r"(.+)==0\.0", c)
    return bool(m and f.endswith("/" + m.group(1)))


def lane_text(text: str, op) -> str:
    """A pre or body's statements in lane form: `if (c) return AK_X;` sets the flag (or goes,
    when the update's result check implies it: implied_by_result)."""
    out = _LANE_RETURN.sub(lambda m: "" if implied_by_result(m.group(1), op) else
                           f"bad_ |= ({m.group(1)});", text)
    # a word a failed TRY call leaves unwritten: 0, not an indeterminate value
    out = re.sub(r"\b(i64|double) (\w+);", r"\1 \2 = 0;", out)
    if re.search(r"\breturn\b", out):
        raise MissingBody(f"{op.name}: a return the lane form cannot read: {text!r}")
    return out


def lane_statements(op) -> list[str]:
    """statements(op) in lane form: TRY(e) sets the flag (bad_) and goes on; a float update's
    result is stored, finite or not, and flagged unless finite."""
    if op.body:
        return [lane_text(_subst(op.body, op), op)]
    pre = lane_text(_subst(op.pre, op), op).strip() if op.pre else ""
    out = [pre] if pre else []
    f = _subst(op.f, op)
    if op.law == LAW_ADD and op.types[0] == FLOAT:
        out.append(f"{{ const double r_ = rvm_w2f(y) {'+' if op.sign > 0 else '-'} ({f}); "
                   "bad_ |= !isfinite(r_); y = rvm_f2w(r_); }")
        return out
    return out + statements(op)[1 if op.pre else 0:]


def lane_function(op) -> str:
    """rvm_lop_<name>: the lane form of rvm_op_<name> (the same parameters)."""
    names = operand_names(op)
    params = [f"i64* {n}_" if n in ("y", "y2") else f"i64 {n}" for n in names]
    params += ["int F", "double* cs"]
    targets = [n for n in names if n in ("y", "y2")]
    lines = [f"RVM_OP int {lane_name(op)}({', '.join(params)})", "{",
             "    " + " ".join(f"i64 {n} = *{n}_;" for n in targets) +
             " int bad_ = 0; (void)F; (void)cs;"]
    lines += ["    " + s for s in lane_statements(op)]
    lines.append("    " + " ".join(f"*{n}_ = {n};" for n in targets))
    lines += ["    return bad_;", "}"]
    return "\n".join(lines)


def lane_name(op) -> str:
    return "rvm_lop_" + op.name.replace(".", "_")


def exec_case(op) -> str:
    args, cell = [], 0
    for i, kind in enumerate(op.operands):
        if kind == "y":
            args.append(f"p{cell}")
            cell += 1
        elif kind == "a":
            args.append(f"*p{cell}")
            cell += 1
        else:
            args.append(f"c[{i + 1}]")
    return f"    case {c_name(op)}: return {func_name(op)}({', '.join(args + ['F', 'cs'])});"


def has_incr(op) -> bool:
    """An update with the add law whose f reads only cells and immediates (rvm_incr)."""
    return has_body(op) and op.law == LAW_ADD and not op.body and \
        all(k in ("y", "a", "imm") for k in op.operands)


def incr_case(op) -> str:
    pre = _subst(op.pre, op)
    for i, kind in enumerate(op.operands):
        if kind == "imm":
            pre = f"i64 imm = c[{i + 1}]; {pre}"
    out = f"*df = {_subst(op.f, op)};" if op.types[0] == FLOAT else \
        f"*di = (i64)({_subst(op.f, op)});"
    return f"    case {c_name(op)}: {{ {pre} {out} return AK_OK; }}"


def generate_isa_header() -> str:
    out = ["/* Generated from isa/table.py by setup.py (isa/cgen.py); do not edit. */",
           "#ifndef RVM_ISA_H", "#define RVM_ISA_H", "#include <stdint.h>", "#include <math.h>",
           '#include "_arith.h"', "typedef int64_t i64;", "typedef uint64_t u64;", "",
           "enum {"]
    out += [f"    {c_name(op)} = {op.code}," for op in OPS]
    out += [f"    N_OPCODES = {len(OPS)}", "};",
            f"enum {{ RVM_NO_CASE = {RVM_NO_CASE} }};   /* rvm_exec: no case for the opcode */",
            "/* a failed step returns its AK_* code: the target locals are not written back */",
            "#define TRY(e) do { int rvm_e_ = (e); if (rvm_e_) return rvm_e_; } while (0)",
            "/* inlined even into the large dispatch loop, where gcc's size limits would refuse */",
            "#define RVM_OP static inline __attribute__((always_inline))", ""]
    for op in OPS:
        if has_body(op):
            out += [function(op), ""]
    out += ["/* The lane forms (isa/cgen.py: lane_function): targets stored whatever happens,",
            "   nonzero iff the instruction traps.  In them TRY(e) flags a failure and goes on. */",
            "#undef TRY", "#define TRY(e) (bad_ |= ((e) != 0))", ""]
    for op in OPS:
        if has_body(op):
            out += [lane_function(op), ""]
    out += ["#undef TRY",
            "#define TRY(e) do { int rvm_e_ = (e); if (rvm_e_) return rvm_e_; } while (0)", ""]
    out += ["/* Every data instruction on its cells p0.. (operand order) and its row c. */",
            "RVM_OP int rvm_exec(int op, i64* p0, i64* p1, i64* p2, const i64* c, int F,",
            "                           double* cs)",
            "{", "    (void)p0; (void)p1; (void)p2; (void)c;", "    switch (op) {"]
    out += [exec_case(op) for op in OPS if has_body(op)]
    out += ["    default: return RVM_NO_CASE;   /* named by the caller: never a guess */",
            "    }", "}", ""]
    out += ["/* f of an update y +/-= f(sources) on int, fixed or float cells, on its source words "
            "a, b",
            "   and row c: the word to add (int, fixed) or the double (float).  run_reduce adds a",
            "   loop-invariant f with the law itself. */",
            "RVM_OP int rvm_incr_(int op, i64 a, i64 b, const i64* c, int F, i64* di, double* df)",
            "{", "    (void)a; (void)b; (void)c; (void)F; (void)di; (void)df;", "    switch (op) {"]
    out += [incr_case(op) for op in OPS if has_incr(op)]
    out += ["    default: return RVM_NO_CASE;", "    }", "}", "",
            "/* ... returned by value (err: its AK_* code or RVM_NO_CASE), so that the caller's",
            "   locals keep their registers */",
            "typedef struct { int err; i64 w; double d; } rvm_incv;",
            "RVM_OP rvm_incv rvm_incr(int op, i64 a, i64 b, const i64* c, int F)",
            "{", "    rvm_incv r; r.w = 0; r.d = 0.0;",
            "    r.err = rvm_incr_(op, a, b, c, F, &r.w, &r.d);", "    return r;", "}", "",
            "#undef TRY", "#undef RVM_OP", "#endif", ""]
    return "\n".join(out)


# ---- the dispatch loop's data cases (rvm/_vm_run.pxi from rvm/_vm_run.pxi.in) -------------------

VM_RUN_TEMPLATE = Path(__file__).resolve().parent.parent / "rvm" / "_vm_run.pxi.in"
_MARKER = "        #@ data instructions"


def distinct_pairs(op) -> list[tuple[str, str]]:
    """Operand pairs that must be different cells (the alias trap): a target and a source, and
    two targets unless the family allows them to coincide (swap of a cell with itself)."""
    names = operand_names(op)
    ys = [n for n, k in zip(names, op.operands) if k == "y"]
    xs = [n for n, k in zip(names, op.operands) if k == "a"]
    pairs = [(y, x) for y in ys for x in xs]
    if len(ys) == 2 and op.family not in TARGETS_MAY_COINCIDE:
        pairs.insert(0, (ys[0], ys[1]))
    return pairs


def leaves_cos_sin(op) -> bool:
    """The body leaves the cos and sin of its angle in `cs` (float rotations): the executors
    record that angle (vm.rot_w), and the AD rule reuses them."""
    return has_body(op) and re.search(r"\bcs\b", op.body or "") is not None


def _decode(op) -> tuple:
    """What the dispatch loop's case does before the body: the cells (name, row slot), the
    pairs that must differ, and whether it records a float rotation's angle."""
    names = operand_names(op)
    cells = tuple((n, i + 1) for i, (n, k) in enumerate(zip(names, op.operands))
                  if k in ("y", "a"))
    rotw = leaves_cos_sin(op)
    return cells, tuple(distinct_pairs(op)), rotw


def _call(op) -> str:
    names = operand_names(op)
    args = [n if k == "y" else f"{n}[0]" if k == "a" else f"c[{i + 1}]"
            for i, (n, k) in enumerate(zip(names, op.operands))]
    return f"tc = {func_name(op)}({', '.join(args + ['vm.F', 'vm.rot_cs'])})"


def dispatch_case(ops, first: bool) -> list[str]:
    """The dispatch loop's case of a family's data instructions that decode alike (Cython,
    inside vm_run's if chain): the cells resolved once, then the instruction's body."""
    cells, pairs, rotw = _decode(ops[0])
    out = [f"{'if' if first else 'elif'} " + " or ".join(f"op == {c_name(op)}" for op in ops)
           + ":"]
    out += [f"    {n} = opnd(vm, c[{slot}], mem, fpm, pa)" for n, slot in cells]
    out += ["    if " + " or ".join(f"{n} == NULL" for n, _ in cells) + ":",
            "        tc = _T_BOUNDS", "        break"]
    if pairs:
        out += ["    if " + " or ".join(f"{p} == {q}" for p, q in pairs) + ":",
                "        tc = _T_ALIAS", "        break"]
    if len(ops) == 1:
        out.append("    " + _call(ops[0]))
    else:
        for k, op in enumerate(ops):
            out += [f"    {'if' if k == 0 else 'elif'} op == {c_name(op)}:", "        " + _call(op)]
        out += ["    else:", "        tc = RVM_NO_CASE"]
    out += ["    if tc:", "        tc = exec_trap(vm, op, tc, _NO_DISPATCH_CASE)", "        break"]
    if rotw:
        out.append(f"    vm.rot_w = {cells[2][0]}[0]        "
                   "# the angle whose cos, sin are in rot_cs")
    out += ["    pc += e", "    came = 0"]
    return out


def extern_decl(op) -> str:
    names = operand_names(op)
    params = [f"i64* {n}_" if n in ("y", "y2") else f"i64 {n}" for n in names]
    return f"    int {func_name(op)}({', '.join(params + ['int F', 'double* cs'])})"


def generate_vm_run() -> str:
    """rvm/_vm_run.pxi: the template with the data cases, and the declarations they call."""
    template = VM_RUN_TEMPLATE.read_text()
    ops = [op for op in OPS if has_body(op)]
    head = ["# Generated from rvm/_vm_run.pxi.in and isa/table.py by setup.py; do not edit.", "",
            'cdef extern from "_isa.h" nogil:']
    head += [extern_decl(op) for op in ops] + ["", ""]
    groups: dict[tuple, list] = {}
    for op in ops:
        groups.setdefault((op.family, _decode(op)), []).append(op)
    cases = []
    for k, group in enumerate(groups.values()):
        cases += ["        " + line for line in dispatch_case(group, k == 0)]
    lines = template.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith(_MARKER)]
    if len(at) != 1:
        raise MissingBody(f"{VM_RUN_TEMPLATE}: expected one line {_MARKER.strip()!r}")
    lines[at[0]:at[0] + 1] = cases
    return "\n".join(head + lines) + "\n"


# ---- the codes and the native ABI the core and the native code share (rvm/_abi.h) --------------

# what a native entry point returns (rvm/_native.pxi native_run reads it): done, gave up (the
# interpreter runs the call), stopped by a signal (its exception is set)
NATIVE_DONE, NATIVE_BAIL, NATIVE_STOPPED = 0, 2, 3

# the state a native entry point runs on: the core fills it, the generated code reads and
# updates it (rvm/_native.pxi, rvm/native/codegen.py)
NATIVE_STATE = """\
typedef struct rvm_ns {
    int64_t* mem; double* adj;
    int64_t steps;                      /* steps run */
    int64_t budget;                     /* poll() when steps reach it, at a taken jump */
    int (*poll)(struct rvm_ns*);        /* Ctrl-C? (nonzero: stop) and a new budget */
    int64_t n_mem, max_depth, pt_cap;   /* the machine's limits (over them: the interpreter) */
    int64_t peak_ftop, peak_depth;      /* the deepest frame top and call depth reached */
    int64_t pc;                         /* where a signal stopped it */
    char* stack_low;                    /* a call whose frame is below gives up (set on entry) */
    int64_t* stack; double* sadj;       /* the value stack and its adjoints */
    int64_t sp, stack_cap, peak_sp;
    double* tan; double* adjt;          /* tangent modes (rvm/native/tangent.py): the cells' */
    double* stan; double* sadjt;        /* tangents and adjoints' tangents, and the stack's */
    int64_t rel_n, rel_pc; double rel_max;  /* tangents released nonzero: count, first pc, max */
    double* vtan; double* vadjt;        /* the lane modes: `lanes` tangents per cell (cell c's */
    double* vstan; double* vsadjt;      /* at c * lanes), and per value stack slot */
    int64_t lanes;
    double* n_tan[3]; double* n_adj[3]; double* n_adjt[3];  /* derivative statements */
    double* n_stan[3]; double* n_sadj[3]; double* n_sadjt[3];   /* (rvm/native/nested.py):
                                           a dual set per nesting level (index 0 unused) */
    int64_t nest, ad;                   /* the nesting level running, its mode (1 tangents,
                                           2 adjoints: the interpreter's vm.ad) */
    int64_t nest_steps;                 /* the nested runs' steps: in `steps`, not in the
                                           machine's time t (a statement is one step of t) */
} rvm_ns;
/* an entry point: rvm_native_forward, rvm_native_backward (rvm_native_forward_t,
   rvm_native_backward_at: the tangent modes; rvm_native_forward_vt, rvm_native_backward_vat:
   the same over `lanes` tangents at once) */
typedef int64_t (*rvm_native_fn)(rvm_ns*);"""


def _enum(names_values) -> str:
    return "enum { " + ", ".join(f"{n} = {v}" for n, v in names_values) + " };"


def abi_codes() -> dict[str, int]:
    """Every named code of rvm/_abi.h and its value, from isa/ (tests compare the built core
    and the header with it)."""
    from .derivatives import KINDS
    from .functions import CMP_ALWAYS, CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE, FN1, FN2
    from .program import MODE_NAMES
    codes: dict[str, int] = {}
    codes.update({f"TY_{t.name}": int(t) for t in ALL_TYPES})
    codes.update({f"MODE_{m}": i for i, m in enumerate(MODE_NAMES)})
    codes.update(RC_ALWAYS=CMP_ALWAYS, RC_EQ=CMP_EQ, RC_NE=CMP_NE, RC_LT=CMP_LT, RC_LE=CMP_LE,
                 RC_GT=CMP_GT, RC_GE=CMP_GE)
    codes.update({f"RF_{f.name.upper()}": f.id for f in FN1})
    codes.update({f"RF2_{f.name.upper()}": f.id for f in FN2})
    codes.update({f"ADK_{k.upper()}": i for i, k in enumerate(KINDS)})
    codes.update(RVM_NATIVE_DONE=NATIVE_DONE, RVM_NATIVE_BAIL=NATIVE_BAIL,
                 RVM_NATIVE_STOPPED=NATIVE_STOPPED)
    return codes


def generate_abi_header() -> str:
    """rvm/_abi.h: every enum the core, the arithmetic and the native code share, and the
    native state struct.  Nothing here is written by hand anywhere else."""
    codes = abi_codes()

    def group(prefix: str) -> str:
        return _enum((n, v) for n, v in codes.items() if n.startswith(prefix))
    out = ["/* Generated from isa/ by setup.py (isa/cgen.py: generate_abi_header); do not edit.",
           "   The native code's ABI number is a hash of this text (isa/cgen.py: abi_number). */",
           "#ifndef RVM_ABI_H", "#define RVM_ABI_H", "#include <stdint.h>", "",
           "/* number types (isa/types.py) */", group("TY_"),
           "/* operand modes: word & 7 (isa/program.py) */", group("MODE_"),
           "/* comparison codes of a condition word (isa/functions.py CMP_*) */", group("RC_"),
           "/* function ids (isa/functions.py FN1, FN2) */", group("RF_"), group("RF2_"),
           "/* differentiation rule kinds (isa/derivatives.py KINDS) */", group("ADK_"),
           "/* what a native entry point returns */", group("RVM_NATIVE_"), "",
           NATIVE_STATE, "", "#endif", ""]
    return "\n".join(out)


def abi_number() -> int:
    """The native code's ABI: a hash of rvm/_abi.h (a library built against another header
    is refused)."""
    return int(hashlib.sha256(generate_abi_header().encode()).hexdigest()[:7], 16)
