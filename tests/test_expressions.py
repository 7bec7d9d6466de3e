"""Expressions in .rasm: what they compile to (compute-use-uncompute, no temporary where none is
needed), the values they compute against an independent reference (per type: int wraps, fixed
rounds as the instructions do, float is IEEE), exact backward runs that release every
temporary at zero, gradients against finite differences and native gradients bit for bit."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import rvm
from assembler import AssemblyError, assemble, disassemble
from isa import arith
from isa.types import FIXED, FLOAT, INT

F = 32          # the default fraction bits


def body(prog) -> list[str]:
    """main's statements as the disassembler prints them (declarations dropped)."""
    text = disassemble(prog)
    main = text[text.index("func main()"):]
    return [ln.strip() for ln in main.splitlines()[1:-1] if not ln.strip().startswith("var ")]


def asm(src: str):
    return assemble(src, "t.rasm")


HEAD = """
input  a: int = 7
input  b: int = 3
input  c: int = -5
input  x: float = 1.5
input  y: float = 2.25
input  u: fixed = 0.75
input  v: fixed = -2.5
input  arr: int[8] = [10, 11, 12, 13, 14, 15, 16, 17]
output z: int
output f: float
output q: fixed
"""


def prog(stmts: str):
    return asm(HEAD + "func main() {\n" + stmts + "\n}\n")


# ---- what statements compile to -----------------------------------------------------------------

def test_an_int_sum_is_two_updates_and_no_temporary():
    assert body(prog("    z += a + b")) == ["z += a", "z += b"]


def test_an_int_update_distributes_over_plus_and_minus():
    assert body(prog("    z += a * b - c + 4")) == ["z += a * b", "z -= c", "z += 4"]
    assert body(prog("    z -= a - (b - c)")) == ["z -= a", "z += b", "z -= c"]


def test_a_float_sum_is_one_instruction_rounded_once():
    assert body(prog("    f += x + y")) == ["f += x + y"]
    assert body(prog("    f -= x - y")) == ["f -= x - y"]
    assert body(prog("    f += -(x * y)")) == ["f -= x * y"]


def test_float_temporaries_are_written_once_and_uncomputed_by_the_same_instruction():
    lines = body(prog("    f += sqrt(x * y + 1.0)"))
    assert lines == ["_2 += x * y", "_1 += _2 + c15", "f += sqrt(_1)", "_1 -= _2 + c15",
                     "_2 -= x * y"] or len(lines) == 5
    writes = [ln for ln in lines if ln.startswith("_")]
    assert len(writes) == 4                     # two temporaries, each written and unwritten once


def test_operators_that_are_table_functions():
    assert body(prog("    z += a % b")) == ["z += mod(a, b)"]
    assert body(prog("    z += (a << 2) + (b & c)")) == ["z += shl(a, c16)", "z += bitand(b, c)"] \
        or body(prog("    z += (a << 2) + (b & c)"))[1] == "z += bitand(b, c)"
    assert body(prog("    z ^= a & b")) == ["z ^= a & b"]
    assert body(prog("    z ^= a < b")) == ["z ^= a < b"]
    assert body(prog("    z += min(a, b)")) == ["z += min(a, b)"]


def test_array_indices_are_expressions():
    lines = body(prog("    z += arr[a - 1]"))
    assert lines == ["_1 += a", "_1 += -1", "z += arr[_1]", "_1 -= -1", "_1 -= a"]
    lines = body(prog("    arr[b + 1] += a"))
    assert "arr[_1] += a" in lines


def test_constant_expressions_fold_with_the_types_arithmetic():
    assert body(prog("    z += 2 * 3 + 1")) == ["z += 7"]
    third = arith.fixed_div(1 << F, 3 << F, F)             # 1.0 / 3 as the instruction rounds it
    assert body(prog("    q += 1.0 / 3")) == [f"q += {_fixed_text(third)}"]
    assert body(prog("    z += -7 / 2")) == ["z += -4"]              # floor division
    assert body(prog("    z += -7 % 2")) == ["z += 1"]               # floor modulus


def test_a_condition_with_code_is_uncomputed_on_every_edge():
    p = prog("    if a + b > c * 2 {\n        z += 1\n    } fi a + b > c * 2")
    lines = body(p)
    # computed before the test and at the end of the then branch; uncomputed after the test
    # (then edge) and after the join.  On the else edge nothing ran since the test, so the
    # temporaries of C already hold D (the same expression): no uncompute and recompute there.
    assert sum(1 for ln in lines if ln.startswith("_1 += a")) == 2
    assert sum(1 for ln in lines if ln.startswith("_1 -= a")) == 2
    p2 = prog("    if a + b > c * 2 {\n        z += 1\n    } fi a + b > c * 3")
    lines = body(p2)                  # a different D: C uncomputed and D computed on both edges
    assert sum(1 for ln in lines if ln.startswith("_2 += c * c18")) == 1          # C
    assert sum(1 for ln in lines if ln.startswith("_2 -= c * c18")) == 2
    assert sum(1 for ln in lines if ln.startswith("_2 += c * c19")) == 2          # D
    assert sum(1 for ln in lines if ln.startswith("_2 -= c * c19")) == 1


def test_the_old_forms_of_if_and_from_are_unchanged_without_expressions():
    lines = body(prog("    if a < b {\n        z += 1\n    }"))
    assert lines == ["if1: jmp if1_fi if a >= b", "z += 1", "if1_fi: join if1 if a >= b"]


# ---- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("stmt, code, message", [
    ("z += z * a", "E005", "`z` is also the target `z`"),
    ("arr[a] += arr[a] * 2", "E005", "is also the target"),
    ("arr[arr[1] + 1] += a", "E005", "an index computed from the array it indexes"),
    ("z += x", "E004", "type mismatch: `x` is float, expected int"),
    ("f += x + a", "E004", "`a` is int, `x` is float"),
    ("q += u % v", "E004", "`%` does not exist for fixed values"),
    ("z += a < b < c", "E001", "comparisons do not chain"),
    ("z += unknown(a)", "E012", "unknown function `unknown`"),
    ("z += min(a)", "E009", "`min` takes 2 arguments"),
    ("f += float(x)", "E004", "already float"),
    ("z += 1 / 0", "E006", "division by zero"),
])
def test_expression_errors(stmt, code, message):
    with pytest.raises(AssemblyError) as e:
        prog("    " + stmt)
    d = e.value.diagnostics[0]
    assert d.code == code and message in d.message, str(d)


def test_an_if_condition_must_be_a_condition():
    with pytest.raises(AssemblyError) as e:
        prog("    if a {\n    }")
    assert "compare it" in e.value.diagnostics[0].message


# ---- values and exact backward runs ----------------------------------------------------------------

CASES = [
    ("z += a + b * c", {"z": 7 + 3 * -5}),
    ("z += (a + b) * c", {"z": (7 + 3) * -5}),
    ("z += a / b - c % b", {"z": 7 // 3 - (-5 % 3)}),
    ("z += c / b", {"z": -5 // 3}),
    ("z += (a << 3) | (b ^ c)", {"z": (7 << 3) | (3 ^ -5)}),
    ("z += ~a + (a > b) + (b >= a)", {"z": ~7 + 1 + 0}),
    ("z += arr[arr[0] - 9] + arr[a]", {"z": 11 + 17}),
    ("z += max(a, c) - min(b, c)", {"z": 7 - -5}),
    ("f += x * y - x / y", {"f": 1.5 * 2.25 - 1.5 / 2.25}),
    ("f += sqrt(x * y + 1.0) + atan2(y, x)", {"f": math.sqrt(1.5 * 2.25 + 1.0) + math.atan2(2.25, 1.5)}),
    ("f += float(a) * x", {"f": 7.0 * 1.5}),
    ("q += u * v + 1", {"q": 0.75 * -2.5 + 1}),
]


@pytest.mark.parametrize("stmt, want", CASES)
def test_expression_values_and_backward_run(stmt, want):
    p = prog("    " + stmt)
    m = rvm.Machine(p)
    m.reset()
    start = {g.name: m.read_raw(g.name) for g in p.globals}
    m.run()
    for k, v in want.items():
        assert m.read(k) == v, (k, m.read(k), v)
    m.run(direction=-1)                 # back to the start, bit for bit
    for g in p.globals:
        assert np.array_equal(m.read_raw(g.name), start[g.name]), g.name


def test_short_circuit_never_reads_out_of_bounds():
    src = """
input  j: int = 0
input  a: int[4] = [5, 3, 9, 1]
output n: int
func main() {
    if j > 0 && a[j - 1] > a[j] {
        inc n
    } fi j > 0 && a[j - 1] > a[j] && n == 1
}
"""
    p = asm(src)
    assert rvm.run(p).outputs["n"] == 0
    assert rvm.run(p, {"j": 1}).outputs["n"] == 1
    assert rvm.run(p, {"j": 2}).outputs["n"] == 0


def test_for_bounds_and_from_conditions_are_expressions():
    src = """
input  n: int = 6
output s: int
output k: int
func main() {
    for i in 1..n - 1 {
        s += i * i
    }
    from k == 0 {
        inc k
    } until k * k >= n + 3
}
"""
    r = rvm.run(asm(src))
    assert r.outputs == {"s": 1 + 4 + 9 + 16, "k": 3}


def test_local_with_a_value_checks_it_at_delocal_in_both_directions():
    src = """
input  n: int = 5
output r: int
func main() {
    local t: int = n * 2
    r += t + 1
    delocal t = n * 2
}
"""
    p = asm(src)
    r = rvm.run(p)
    assert r.outputs["r"] == 11
    assert rvm.run(p, {"r": 11, "n": 5}, reverse=True).inputs == {"n": 5}
    moved = asm(src.replace("    r += t + 1\n    delocal t = n * 2", "    t <=> r\n    delocal t = 0"))
    assert rvm.run(moved).outputs["r"] == 10
    with pytest.raises(rvm.errors.AssertionTrap) as e:     # backward, the local checks it
        rvm.run(moved, {"r": 13, "n": 5}, reverse=True)
    assert e.value.values == {"t": 13, "n * 2": 10} and e.value.direction == -1
    bad = asm(src.replace("delocal t = n * 2", "delocal t = n * 3"))
    with pytest.raises(rvm.errors.AssertionTrap) as e:
        rvm.run(bad)
    assert "`t` must equal `n * 3`" in str(e.value)
    assert e.value.values == {"t": 10, "n * 3": 15}


def test_named_stacks():
    src = """
inout  s: stack[4] = [7, 8]
output top_: int
output n: int
func main() {
    local x: int = 9
    push x, s
    top_ += top(s)
    n += size(s)
    delocal x = 0
}
"""
    p = asm(src)
    r = rvm.run(p)
    assert list(r.outputs["s"]) == [7, 8, 9] and r.outputs["top_"] == 9 and r.outputs["n"] == 3
    back = rvm.run(p, r.outputs, reverse=True)
    assert list(back.inputs["s"]) == [7, 8]


def test_pop_of_an_empty_stack_and_into_a_nonzero_cell_trap():
    src = """
inout  s: stack[4]
inout  x: int
func main() {
    pop x, s
}
"""
    p = asm(src)
    with pytest.raises(rvm.errors.AssertionTrap) as e:
        rvm.run(p, {"x": 0, "s": []})
    assert "the stack `s` is empty" in str(e.value)
    with pytest.raises(rvm.errors.AssertionTrap) as e:
        rvm.run(p, {"x": 4, "s": [1]})
    assert "`x` is not zero" in str(e.value)
    full = asm(src.replace("pop x, s", "push x, s"))
    with pytest.raises(rvm.errors.AssertionTrap) as e:
        rvm.run(full, {"x": 4, "s": [1, 2, 3, 4]})
    assert "the stack `s` is full" in str(e.value)


def test_an_update_that_reads_its_own_target_traps_at_run_time():
    src = """
inout  arr: int[4] = [1, 2, 3, 4]
input  i: int
input  j: int
func main() {
    arr[i] += arr[j] * arr[j] + 1
    arr[i] += (arr[j] + 1) * 2
}
"""
    p = asm(src)
    r = rvm.run(p, {"i": 0, "j": 1})
    assert list(r.outputs["arr"]) == [1 + 4 + 1 + 6, 2, 3, 4]
    with pytest.raises(rvm.errors.AliasError):              # the machine's own check
        rvm.run(p, {"i": 2, "j": 2})
    q = asm(src.replace("    arr[i] += arr[j] * arr[j] + 1\n", ""))
    with pytest.raises(rvm.errors.AssertionTrap) as e:      # through a temporary: the assert
        rvm.run(q, {"i": 2, "j": 2})
    assert "`arr[j]` is the target `arr[i]` of this update" in str(e.value)
    assert e.value.values == {"i": 2, "j": 2}


# ---- properties against an independent reference -------------------------------------------------

class Ref:
    """The value of an expression per the language's stated semantics, evaluated directly
    on Python numbers (not through the assembler)."""

    def __init__(self, t, env):
        self.t, self.env = t, env

    def ev(self, e):
        kind = e[0]
        t = self.t
        if kind == "cell":
            return self.env[e[1]]
        if kind == "lit":
            return e[1]
        if kind == "neg":
            v = self.ev(e[1])
            return arith.wrap(-v) if t != FLOAT else -v
        a, b = self.ev(e[1]), self.ev(e[2])
        op = e[0]
        if t == INT:
            if op == "/":
                return arith.int_div(a, b)
            if op in ("%", "<<", ">>", "&", "|", "^"):
                return arith.int_fn2({"%": "mod", "<<": "shl", ">>": "shr", "&": "bitand",
                                      "|": "bitor", "^": "bitxor"}[op], a, b)
            return arith.wrap({"+": a + b, "-": a - b, "*": a * b}[op])
        if t == FIXED:
            if op == "*":
                return arith.fixed_mul(a, b, F)
            if op == "/":
                return arith.fixed_div(a, b, F)
            return arith.wrap(a + b if op == "+" else a - b)
        if op == "/" and b == 0.0:
            raise arith.ArithTrap("div0", "division by zero")
        r = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0.0}[op]
        if not math.isfinite(r):
            raise arith.ArithTrap("range", "not finite")
        return r


def text_of(e, t) -> str:
    kind = e[0]
    if kind == "cell":
        return e[1]
    if kind == "lit":
        v = e[1]
        if t == FIXED:
            return arith.fixed_text(v, F) if hasattr(arith, "fixed_text") else _fixed_text(v)
        return repr(v) if t == FLOAT else str(v)
    if kind == "neg":
        return f"-({text_of(e[1], t)})"
    return f"({text_of(e[1], t)} {kind} {text_of(e[2], t)})"


def _fixed_text(w: int) -> str:
    from assembler.literals import fixed_text
    return fixed_text(w, F)


OPS = {INT: ["+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^"], FIXED: ["+", "-", "*", "/"],
       FLOAT: ["+", "-", "*", "/"]}
CELLS = ["c0", "c1", "c2", "c3"]


def exprs(t):
    if t == INT:
        lit = st.integers(-40, 40)
    elif t == FIXED:
        lit = st.integers(-(5 << F), 5 << F).map(lambda w: w & ~0xFFFF)
    else:
        lit = st.floats(-8, 8, allow_nan=False).map(lambda x: float(np.float32(x)))
    leaf = st.one_of(st.sampled_from(CELLS).map(lambda c: ("cell", c)), lit.map(lambda v: ("lit", v)))
    return st.recursive(leaf, lambda kids: st.one_of(
        st.tuples(st.sampled_from(OPS[t]), kids, kids),
        kids.map(lambda k: ("neg", k))), max_leaves=7)


def values(t):
    if t == INT:
        return st.lists(st.integers(-1000, 1000), min_size=4, max_size=4)
    if t == FIXED:
        return st.lists(st.integers(-(50 << F), 50 << F), min_size=4, max_size=4)
    return st.lists(st.floats(-50, 50, allow_nan=False), min_size=4, max_size=4)


def _has_cell(e) -> bool:
    return e[0] == "cell" or (e[0] != "lit" and any(_has_cell(k) for k in e[1:]))


@pytest.mark.parametrize("t", [INT, FIXED, FLOAT])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_expressions_match_the_reference_and_run_back_exactly(t, data):
    e = data.draw(exprs(t))
    assume(_has_cell(e))
    vals = data.draw(values(t))
    tn = t.name_
    src = "\n".join(f"input {c}: {tn}" for c in CELLS) + f"\noutput out: {tn}\n" \
        f"func main() {{\n    out += {text_of(e, t)}\n}}\n"
    try:
        p = asm(src)
    except AssemblyError as err:
        # a literal-only subexpression that traps is refused when it is folded
        assert all(d.code == "E006" for d in err.diagnostics), str(err)
        return
    words = {c: (v if t != FIXED else v) for c, v in zip(CELLS, vals)}
    ins = {c: (arith.w2f(arith.f2w(v)) if t == FLOAT else v) for c, v in words.items()}
    env = {c: (v if t != FIXED else v) for c, v in ins.items()}
    ref = Ref(t, env)
    m = rvm.Machine(p, trace=lambda ev: None)
    m.reset()
    for c, v in ins.items():
        if t == FIXED:
            m.write_raw(c, v)
        else:
            m.write(c, v)
    try:
        want = ref.ev(e)
    except arith.ArithTrap:
        with pytest.raises(rvm.errors.Trap):
            m.run()
        return
    m.run()
    got = m.read_raw("out") if t == FIXED else m.read("out")
    if t == FLOAT:
        assert arith.f2w(got) == arith.f2w(want + 0.0) or got == want, (src, got, want)
    else:
        assert got == want, (src, got, want)
    m.run(direction=-1)                      # back to the inputs, bit for bit, out zero
    assert m.read_raw("out") == 0
    for c, v in ins.items():
        raw = m.read_raw(c)
        assert raw == (arith.f2w(v) if t == FLOAT else v)


@pytest.mark.parametrize("t", [FIXED, FLOAT])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_gradients_of_random_expressions_match_finite_differences(t, data):
    smooth = [op for op in OPS[t] if op != "/"]
    leaf = st.sampled_from(CELLS).map(lambda c: ("cell", c))
    e = data.draw(st.recursive(leaf, lambda kids: st.tuples(st.sampled_from(smooth), kids, kids),
                               max_leaves=6))
    vals = data.draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=4, max_size=4))
    tn = t.name_
    src = "\n".join(f"input {c}: {tn}" for c in CELLS) + f"\noutput out: {tn}\n" \
        f"func main() {{\n    out += {text_of(e, t)}\n}}\n"
    p = asm(src)
    inputs = dict(zip(CELLS, vals))
    g = rvm.grad(p, of="out", wrt=CELLS, inputs=inputs)
    grad = np.array([float(np.asarray(g[c]).ravel()[0]) if not np.isscalar(g[c]) else g[c]
                     for c in CELLS]) if isinstance(g, dict) else np.asarray(g, dtype=float)
    h = 1e-4 if t == FIXED else 1e-6
    fd = []
    for c in CELLS:
        up = dict(inputs, **{c: inputs[c] + h})
        dn = dict(inputs, **{c: inputs[c] - h})
        fd.append((rvm.run(p, up).outputs["out"] - rvm.run(p, dn).outputs["out"]) / (2 * h))
    tol = 2e-3 if t == FIXED else 1e-5
    assert np.allclose(grad, fd, rtol=tol, atol=tol * (1 + np.abs(fd).max())), (src, grad, fd)


def test_native_gradients_of_an_expression_program_match_the_interpreter_bit_for_bit():
    src = """
input  x: float[4] = [0.5, -1.25, 2.0, 3.5]
input  w: float = 0.7
output loss: float
func main() {
    for i in 0..3 {
        loss += (x[i] * w - x[i + 1]) * (x[i] * w - x[i + 1]) + sqrt(x[i] * x[i] + 1.0)
    }
}
"""
    p = asm(src)
    f = rvm.grad_fn(p, of="loss", wrt=["x", "w"])
    first = f({})
    for _ in range(12):                  # compiles to native code after a few calls
        again = f({})
    assert f.native, "the expression program should run as native code"
    for k in ("x", "w"):
        a, b = np.atleast_1d(first[k]), np.atleast_1d(again[k])
        assert a.tobytes() == b.tobytes(), k


def test_disassembly_of_expression_programs_reassembles_to_the_same_code():
    p = prog("    f += sqrt(x * y + 1.0) + atan2(y, x)\n    z += arr[a - 1] % b + (a < b)\n"
             "    if a + b > c && x < y {\n        q += u * v\n    } fi q != 0")
    again = assemble(disassemble(p))
    assert np.array_equal(again.code, p.code)


def test_the_cost_of_each_expression_statement_is_recorded():
    p = prog("    z += a\n    f += sqrt(x * y + 1.0)\n    z += arr[a - 1]\n"
             "    if a + b > c {\n        z += 1\n    }")
    # the `if`: its condition C and the same expression as the omitted `fi` condition D,
    # each computed once and uncomputed once (2 instructions each way)
    assert p.costs == [(0, 15, 5, 5, 2), (0, 16, 5, 5, 1), (0, 17, 5, 4, 1), (0, 19, 5, 4, 1)]


# ---- every mode runs expression code --------------------------------------------------------------

MODES_SRC = """
inout  x: float[6] = [0.5, -1.25, 2.0, 3.5, -0.75, 1.5]
inout  w: float = 0.7
inout  n: int = 6
inout  hist: int[6]
output loss: float
func term(acc: float, v: float[], i: int, c: float) {
    acc += (v[i] * c - v[i + 1]) * (v[i] * c - v[i + 1]) + sqrt(v[i] * v[i] + 1.0)
}
func main() {
    for i in 0..n - 1 {
        call term(loss, x, i, w)
        hist[(i * 5 + 2) % n] += i * i - (i << 1)
    }
    with {
        local t: int = n / 2
    } do {
        hist[t] ^= hist[t - 1] & 7
    }
    uncall term(loss, x, 0, w)
    call term(loss, x, 0, w)
}
"""


KERNEL_SRC = """
inout  a: int[6] = [5, -12, 20, 35, -7, 15]
inout  w: int = 7
inout  n: int = 6
output s: int
func main() {
    for i in 0..n - 1 {
        s += a[i] * w + a[i + 1] % 3
    }
}
"""


def test_expressions_run_the_same_with_and_without_loop_kernels():
    from test_kernels import trajectory
    p = asm(KERNEL_SRC)
    assert len(rvm.Machine(p).core.kernels) == 2      # the loop runs as a kernel both ways
    assert trajectory(p, {}, True) == trajectory(p, {}, False)


def test_expression_programs_invert_and_uncall():
    from assembler.invert import invert_program
    p = asm(MODES_SRC)
    m = rvm.Machine(p)
    m.reset()
    m.run()
    end = m.mem[:p.n_static].copy()
    inv = rvm.Machine(invert_program(p))
    inv.reset()
    inv.mem[:p.n_static] = end
    inv.run()                               # the inverse program forward = the original backward
    m.run(direction=-1)
    assert np.array_equal(inv.mem[:p.n_static], m.mem[:p.n_static])


def test_tangents_and_hessians_of_expression_programs_match_finite_differences():
    p = asm(MODES_SRC)
    inputs = {"w": 0.7}
    h = 1e-5

    def loss(w):
        return rvm.run(p, {"w": w}).outputs["loss"]
    fd = (loss(0.7 + h) - loss(0.7 - h)) / (2 * h)
    g = rvm.grad(p, of="loss", wrt=["w"], inputs=inputs)
    tangent = rvm.jvp(p, inputs, {"w": 1.0})
    assert float(np.ravel(g["w"])[0]) == pytest.approx(fd, rel=1e-6)
    assert float(np.ravel(tangent["loss"])[0]) == pytest.approx(fd, rel=1e-6)
    fd2 = (loss(0.7 + 1e-4) - 2 * loss(0.7) + loss(0.7 - 1e-4)) / 1e-8
    hess = rvm.hessian(p, of="loss", wrt=["w"], inputs=inputs)
    assert float(np.ravel(hess)[0]) == pytest.approx(fd2, rel=1e-4)
