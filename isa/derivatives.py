"""Differentiation rules: one declaration per instruction family, as JAX declares its JVP rules.

Only float and fixed cells are differentiable (their tangents and adjoints are binary64 numbers
in real units: a fixed cell's real value is its word / 2**F).  int and lns cells have no
derivative: instructions that write them have no rule, and an instruction that only reads
them contributes nothing (an int-to-float conversion is a constant increment).

Every data instruction that writes a differentiable cell falls in one of these kinds:

  update  y = y + s*f(x_1..x_k) with s = +1 or -1 and f declared by its partials d_k = df/dx_k
          (expressions of isa/expr.py; for addfn/addfn2 they come from isa/functions.py).
            tangent:         y' += s * sum_k d_k x_k'
            adjoint:         xbar_k += s * d_k * ybar        (ybar unchanged: dy_new/dy_old = 1)
            adjoint tangent: xbar_k' += s * (d_k * ybar' + (d_k)' * ybar)
          where (d_k)' is d_k's derivative along the sources' tangents, computed by evaluating
          d_k over dual numbers: second derivatives are never written by hand.
  neg     y = -y: every dual of y is negated.
  swap    the two cells exchange their duals.
  rot     (x, y) <- R(s*theta)(x, y): the Jacobian is R(s*theta) for (x, y) and s*J*(x', y')
          for theta (J = rotation by +90 degrees, primes: values after the rotation).
  move    push/pop: the dual moves with the value (to or from the value stack); the cell left
          behind is the constant zero, whose duals are zero.
  scope   alloc/free: an ancilla enters or leaves scope as the constant zero.  Its duals are
          cleared; a nonzero tangent at its release means the program is not reversible in a
          neighbourhood of this input (its value is zero here but not as a function), which the
          AD engine reports instead of returning a gradient of the wrong function.

The machine applies the rule of the instruction it executes (after the inverse map), so uncall,
backward runs and the adjoint sweep need no extra rules: running backward, the adjoint of the
instruction that ran forward is the executed inverse's rule with the sign flipped (see
rvm/_ad.pxi, ad_apply).  tests/test_ad_rules.py checks every rule of the table against finite
differences of the interpreter, in both modes and both directions.
"""
from __future__ import annotations

from dataclasses import dataclass

from .expr import to_c_dual
from .functions import FN1, FN2
from .table import OPS, Op, positive_family
from .types import FIXED, FLOAT, LNS

DIFFERENTIABLE = (FIXED, LNS, FLOAT)   # lns: the derivative of the value it represents

KINDS = ("none", "update", "neg", "swap", "rot", "move", "scope", "scale")


@dataclass(frozen=True)
class Rule:
    kind: str
    sign: int = 1
    args: tuple[str, ...] = ()        # names of the sources in the partials
    partials: tuple[str, ...] = ()    # update: df/dsource per source (empty: f is constant)
    fn: str = ""                      # "fn1" / "fn2": the partials are the function operand's


# partial sets shared by update families; their ids index the generated C switch
_UPDATE_PARTIALS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "add": (("a",), ("1",)),
    "cvt": (("a",), ("1",)),
    "addmul": (("a", "b"), ("b", "a")),
    "adddiv": (("a", "b"), ("1 / b", "-a / (b * b)")),
    "addsum": (("a", "b"), ("1", "1")),
    "adddif": (("a", "b"), ("1", "-1")),
}

# partial-function ids: 0 none, then the update sets, then one per function
PF_NONE = 0
PF_ONE = 1               # df/da = 1 (add, cvt): the core's fast path
PF_MUL = 2
PF_DIV = 3
PF_SUM = 4               # y += a + b
PF_DIF = 5               # y += a - b
PF_FN1 = 6
PF_FN2 = PF_FN1 + len(FN1)
N_PF = PF_FN2 + len(FN2)
_PF_OF = {"add": PF_ONE, "cvt": PF_ONE, "addmul": PF_MUL, "adddiv": PF_DIV, "addsum": PF_SUM,
          "adddif": PF_DIF}


#: derivative statements: their own derivatives are second-order modes of the machine, run by
#: the instruction itself (outer tangent: adjoint-over-tangent; outer adjoint: Hessian-vector)
DERIVATIVE_FAMILIES = ("addgrad", "subgrad", "addjvp", "subjvp")


def rule_for(op: Op) -> Rule | None:
    """The differentiation rule of `op`, or None when it touches no differentiable cell."""
    fam = op.family
    if fam in DERIVATIVE_FAMILIES:
        return None         # the machine runs their rule itself (rvm/_nested.pxi, docs/ad.md)
    if fam in ("push", "pop"):
        return Rule("move")
    if fam in ("alloc", "free"):
        return Rule("scope")
    if not op.types or op.types[0] not in DIFFERENTIABLE or "data" not in op.flags:
        return None
    sign = op.sign                                   # isa/table.py: the law's direction
    if fam == "neg":
        return Rule("neg")
    if fam == "swap":
        return Rule("swap")
    if fam in ("rot", "irot"):
        return Rule("rot", sign)
    base = positive_family(op)
    if op.types[0] == LNS:                           # y *= a or y *= lns(x): multiplicative
        da = op.types[-1] in DIFFERENTIABLE
        return Rule("scale", sign, ("a",) if da else ())
    if base == "addi":
        return Rule("update", sign)                   # y += immediate: nothing flows
    if base == "addfn":
        return Rule("update", sign, ("x",), fn="fn1")
    if base == "addfn2":
        return Rule("update", sign, ("a", "b"), fn="fn2")
    if base == "cvt" and op.types[1] not in DIFFERENTIABLE:
        return Rule("update", sign)                   # y += T(int or lns): a constant
    args, partials = _UPDATE_PARTIALS[base]
    return Rule("update", sign, args, partials)


def pf_id(op: Op) -> int:
    """Partial-function id of an update rule (for addfn/addfn2: the base, plus the fn id)."""
    rule = rule_for(op)
    if rule is None or rule.kind != "update":
        return PF_NONE
    if rule.fn == "fn1":
        return PF_FN1
    if rule.fn == "fn2":
        return PF_FN2
    if not rule.partials:
        return PF_NONE
    return _PF_OF[positive_family(op)]


def partials(op: Op, fn: int | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(argument names, partial expressions) of an update instruction (fn: its fn operand)."""
    rule = rule_for(op)
    assert rule is not None and rule.kind == "update"
    if rule.fn:
        f = (FN1 if rule.fn == "fn1" else FN2)[fn]
        return f.args, f.derivs
    return rule.args, rule.partials


RULES: dict[str, Rule | None] = {op.name: rule_for(op) for op in OPS}


def rule_doc(op: Op) -> str:
    """One line for docs/isa.md: the tangent rule (the adjoint and Hessian rules follow)."""
    rule = RULES[op.name]
    if rule is None:
        return "-"
    s = "+" if rule.sign > 0 else "-"
    if rule.kind == "update":
        if rule.fn:
            return f"y' {s}= f'(sources) . sources' (df column below)"
        if not rule.partials:
            return "y' unchanged (constant increment)"
        terms = []
        for a, p in zip(rule.args, rule.partials):
            neg = p.startswith("-") and p != "-1" and not any(c in p[1:] for c in "+-/ ")
            term = (f"{a}'" if p in ("1", "-1") else
                    f"{p.lstrip('-')} {a}'" if neg or not any(c in p for c in "+-/ ")
                    else f"({p}) {a}'")
            minus = p == "-1" or neg
            terms.append(("- " if minus else "+ ") + term if terms else
                         ("-" if minus else "") + term)
        return f"y' {s}= " + " ".join(terms)
    if rule.kind == "scale":
        g = "a" if rule.sign > 0 else "1/a"
        return (f"y' = {g} y'" + (f" {s} y a'/a (y the result)" if rule.args else "")
                + " (lns: the represented value)")
    return {"neg": "y' = -y'", "swap": "duals exchanged",
            "rot": f"(x', y') <- R({s}t)(x', y') {s} t' J (x, y), (x, y) the rotated values",
            "move": "the dual moves with the value", "scope": "duals zero (checked at release)"
            }[rule.kind]


def generate_header() -> str:
    """C header rvm/_deriv.h: every partial derivative over dual numbers (setup.py writes it)."""
    out = ["/* Generated from isa/derivatives.py by setup.py; do not edit. */",
           "#ifndef RVM_DERIV_H", "#define RVM_DERIV_H", '#include "_dual.h"', "",
           f"enum {{ PF_NONE = {PF_NONE}, PF_ONE = {PF_ONE}, PF_MUL = {PF_MUL}, "
           f"PF_DIV = {PF_DIV}, PF_FN1 = {PF_FN1}, PF_FN2 = {PF_FN2}, N_PF = {N_PF} }};", "",
           "/* Partials of f at the sources (a, b) as duals; returns the number of sources. */",
           "static inline int rvm_partials(int pf, rvm_dual a, rvm_dual b, rvm_dual* da, "
           "rvm_dual* db) {",
           "    (void)b; (void)db;",
           "    switch (pf) {"]
    cases = [(PF_ONE, ("a",), ("1",), "add, cvt"),
             (PF_MUL, ("a", "b"), _UPDATE_PARTIALS["addmul"][1], "addmul"),
             (PF_DIV, ("a", "b"), _UPDATE_PARTIALS["adddiv"][1], "adddiv"),
             (PF_SUM, ("a", "b"), _UPDATE_PARTIALS["addsum"][1], "addsum"),
             (PF_DIF, ("a", "b"), _UPDATE_PARTIALS["adddif"][1], "adddif")]
    # int-only functions have no derivative: no case (rvm_partials returns 0 sources)
    cases += [(PF_FN1 + f.id, f.args, f.derivs, f.name) for f in FN1 if f.differentiable]
    cases += [(PF_FN2 + f.id, f.args, f.derivs, f.name) for f in FN2 if f.differentiable]
    for pf, args, exprs, what in cases:
        out.append(f"    case {pf}: {{  /* {what} */")
        if args == ("x",):
            out.append("        rvm_dual x = a;")
        for dst, e in zip(("da", "db"), exprs):
            out.append(f"        *{dst} = {to_c_dual(e, args)};")
        out.append(f"        return {len(args)};")
        out.append("    }")
    out += ["    default: return 0;", "    }", "}", "#endif", ""]
    return "\n".join(out)
