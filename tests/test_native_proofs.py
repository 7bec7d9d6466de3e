"""Checks the generated code (rvm/native/codegen.py) leaves out because it proves them:
each test runs a program whose check must fail at a chosen place, natively and interpreted,
and wants the interpreter's error (type and text: the native code gives up and the
interpreter reports it) and bit for bit the same results where nothing fails, and counts
the native code's give-ups, so that a check that was not redundant fails here.

* A float quotient's zero-divisor check is implied by the update's finiteness check
  (isa/cgen.implied_by_result): the native code runs the op's lane form, which leaves it
  out, and a division by zero is still the interpreter's division-by-zero error at its row;
  a float sum's inner finiteness check likewise.
"""
from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import native

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("RVM_CACHE_DIR", str(tmp_path_factory.mktemp("native_proofs")))
    yield
    mp.undo()


def bits(v) -> list:
    return np.asarray(v, dtype=np.float64).reshape(-1).view(np.int64).tolist()


def observe(prog, of: str, wrt: list[str], inputs: list[dict], use_native: bool):
    f = rvm.grad_fn(prog, of=of, wrt=wrt, native=use_native)
    assert f.runner.core.native == use_native
    out = []
    for inp in inputs:
        try:
            g = f(dict(inp))
        except Exception as e:                      # noqa: BLE001 - compared as a value
            out.append(("error", type(e).__name__, str(e)))
            continue
        out.append(({k: bits(v) for k, v in g.items()}, bits(f.last.value), f.last.steps))
    return out, f


def same(src: str, of: str, wrt: list[str], inputs: list[dict]):
    """Native and interpreted grad_fn agree on every call (the first must run cleanly);
    returns the native observations and GradFn."""
    prog = rvm.assemble(src)
    nat, f = observe(prog, of, wrt, inputs, True)
    ref, _ = observe(prog, of, wrt, inputs, False)
    for k, (a, b) in enumerate(zip(nat, ref)):
        assert a == b, f"call {k} {inputs[k]}:\n native      {a}\n interpreted {b}"
    assert nat[0][0] != "error", nat[0]
    return nat, f


def runs_same(src: str, inputs: list[dict]) -> list:
    """Machine.run natively and interpreted: the same outputs, or the same error."""
    prog = rvm.assemble(src)
    out = []
    for inp in inputs:
        got = []
        for compiled in (True, False):
            m = rvm.Machine(prog)
            if compiled:
                m.compile()
            m.reset(inp)
            try:
                m.run()
                got.append({k: bits(v) for k, v in m.outputs().items()})
            except rvm.Trap as e:
                got.append(("error", type(e).__name__, str(e)))
            if compiled:
                got.append(m.core.native_run_bails)
        assert got[0] == got[2], f"{inp}:\n native      {got[0]}\n interpreted {got[2]}"
        out.append((got[0], got[1]))
    return out


QUOTIENT = """
inout x: float = 0.5
inout b: float = 2.0
inout u: float = 1.0
inout v: float = 1.0
inout z: float
func main() {
    local q: float
    q += x / b
    z += q * x
    z += u + v
    q -= x / b
}
"""


def test_a_float_division_by_zero_is_still_the_division_error():
    ins = [{}, {"b": 0.0}, {"b": -0.0, "x": -1.0}, {"b": 0.0, "x": 0.0}, {"b": 4.0},
           {"u": 1.5e308, "v": 1.5e308}, {"b": 1e-310, "x": 1e10}]
    obs, f = same(QUOTIENT, "z", ["x", "b"], ins)
    errs = [o for o in obs if o[0] == "error"]
    assert [o[1] for o in errs] == ["DivisionByZero"] * 3 + ["RangeError"] * 2, errs
    assert all("division by zero" in o[2] and "at pc 2: adddiv.f q, x, b" in o[2]
               for o in errs[:3])
    assert "at pc 4: addsum.f z, u, v" in errs[3][2] and "at pc 2:" in errs[4][2]
    # z = x * x / b + u + v: dz/dx = 2 x / b, dz/db = -x^2 / b^2
    assert obs[4][0] == {"x": bits(2 * 0.5 / 4.0), "b": bits(-0.25 / 16.0)}
    assert f.runner.core.native_bails == 5
    ran = runs_same(QUOTIENT, ins)
    assert [r[0][1] for r in ran if isinstance(r[0], tuple)] == [o[1] for o in errs]
    assert [r[1] for r in ran] == [0, 1, 1, 1, 0, 1, 1]


def test_the_quotient_runs_the_form_without_the_zero_check():
    src = native.generate(rvm.assemble(QUOTIENT))
    assert "rvm_lop_adddiv_f(" in src and "rvm_op_adddiv_f(" not in src
    assert "rvm_lop_addsum_f(" in src and "rvm_op_addmul_f(" in src


# * An index whose interval (rvm/native/intervals.py) lies in its array needs no bounds check,
#   two indexes of one array that are never equal no alias check: where the bound is one
#   too loose the check stays, and the index that leaves the array is still the
#   interpreter's BoundsError at its row.
def loop(bound: int, with_j: bool = True) -> str:
    js = """
    a[j] += a[i] * x
    z += a[j]
    a[j] -= a[i] * x""" if with_j else ""
    return f"""
inout n: int = 4
inout k: int
inout x: float = 0.5
inout z: float
func main() {{
    var a: float[8]
    var i: int
    var j: int
    assert n >= 1
    assert n <= {bound}
    j += k
top:   join back if i != 0
    a[i] += x * x
    z += a[i] * x
    a[i] -= x * x{js}
    inc i
    inc j
back:  jmp top if i < n
    i -= n
    j -= n
    j -= k
}}
"""


def bounds_checks(src: str) -> int:
    return native.generate(rvm.assemble(src)).count(">= (u64)n")


def test_an_index_proved_in_range_has_no_check_and_one_that_is_not_keeps_it():
    # i in [0, 7] with n <= 8: a[i] proved (forward run, sweep and backward run); j = i + k
    # with k unknown: its rows keep theirs, and a[j] with a[i] keeps the alias check
    tight, loose = bounds_checks(loop(8)), bounds_checks(loop(9))
    assert tight > 0 and loose > tight
    src = native.generate(rvm.assemble(loop(8)))
    assert "if (M[0] < ((i64)0x1ULL) || M[0] > ((i64)0x8ULL))" in src      # main's sweep
    ins = [{"k": 1}, {}, {"n": 8}, {"n": 9}, {"k": 4, "n": 4}, {"k": 5, "n": 4}, {"k": -1},
           {"n": 0}]
    obs, f = same(loop(8), "z", ["x"], ins)
    assert [o[1] if o[0] == "error" else "ok" for o in obs] == \
        ["ok", "AliasError", "AliasError", "AssertionTrap", "ok", "BoundsError", "BoundsError",
         "AssertionTrap"], obs
    assert "addmul.f a[j], a[i], x" in obs[1][2]
    assert all("addmul.f a[j], a[i], x" in obs[q][2] and "index" in obs[q][2] for q in (5, 6))
    # z = n x^3 (a[i] is zero again when a[j] reads it): dz/dx = 3 n x^2 at n = 4
    assert obs[0][0] == {"x": bits(3 * 4 * 0.25)} and obs[0][1] == bits(0.5)
    assert f.runner.core.native_bails == 6
    ran = runs_same(loop(8), ins)
    assert [r[1] for r in ran] == [0, 1, 1, 1, 0, 1, 1, 1]


def test_one_too_many_is_still_the_bounds_error_at_its_row():
    assert bounds_checks(loop(8, False)) == 0 and bounds_checks(loop(9, False)) > 0
    ins = [{"k": 1}, {"k": 1, "n": 8}, {"k": 1, "n": 9}]
    obs, f = same(loop(9), "z", ["x"], ins)
    assert [o[1] if o[0] == "error" else "ok" for o in obs] == \
        ["ok", "BoundsError", "BoundsError"], obs
    # n = 8, k = 1: a[j] leaves the array at j = 8; n = 9 the same, first
    assert all("addmul.f a[j], a[i], x" in obs[q][2] for q in (1, 2))
    obs, f = same(loop(9, False), "z", ["x"], [{}, {"n": 9}, {"n": 8}])
    assert obs[1][0] == "error" and obs[1][1] == "BoundsError", obs
    assert "addmul.f a[i], x, x" in obs[1][2] and "i = 8" in obs[1][2]
    assert obs[2][0] == {"x": bits(3 * 8 * 0.25)}
    assert f.runner.core.native_bails == 1


def test_a_backward_run_outside_the_forward_runs_ranges_gives_up_to_the_interpreter():
    """main's backward rows start from what its forward rows know of the globals at the end
    (nterms in [1, 64]): an end state outside that is checked at entry, and the
    interpreter's run reports its trap."""
    prog = rvm.assemble("programs/besselj_rec.rasm")
    nat, ref = rvm.Machine(prog, native=True), rvm.Machine(prog, native=False)
    got = []
    for m in (nat, ref):
        m.reset({"nterms": 18})
        m.run()
        end = m.outputs()
        m.run(-1)
        got.append(m.read("z"))
        m.reset_end(dict(end, nterms=70))
        try:
            m.run(-1)
            got.append(None)
        except rvm.Trap as e:
            got.append((type(e).__name__, str(e)))
    assert got[:2] == got[2:] and got[0] == 3.0 and got[1][0] == "BoundsError", got
    assert nat.core.native_runs == 2 and nat.core.native_run_bails == 1


# w is anything at the start, so its inc may wrap: the analysis follows none of w's writes
# (intervals.py: `wild`).  cswap writes both of its targets: j takes w's bits where m has
# ones, and a[j] must keep its check (the analysis once forgot only the first target of a
# wild cell's row, kept j = 0 and left the check out: a[100] and a[-1] were written).
CSWAP = """
inout w: int
inout m: int
inout x: float = 0.5
inout z: float
func main() {
    var a: float[2]
    var j: int
    inc w
    cswap w, j, m
    a[j] += x
    z += a[j] * x
    a[j] -= x
    cswap w, j, m
    dec w
}
"""


def test_a_row_that_writes_a_wild_cell_forgets_every_target():
    assert bounds_checks(CSWAP) > 0
    ins = [{}, {"w": 0, "m": 1}, {"w": 1, "m": 3}, {"w": 99, "m": -1}, {"w": -2, "m": -1}]
    ran = runs_same(CSWAP, ins)
    assert [r[0][1] if isinstance(r[0], tuple) else "ok" for r in ran] == \
        ["ok", "ok"] + ["BoundsError"] * 3, ran
    assert [r[1] for r in ran] == [0, 0, 1, 1, 1]
    obs, f = same(CSWAP, "z", ["x"], ins)
    assert [o[1] if o[0] == "error" else "ok" for o in obs] == ["ok", "ok"] + ["BoundsError"] * 3
    assert "index j = 100 is outside a[0..2)" in obs[3][2]
    assert obs[0][0] == {"x": bits(2 * 0.5)}
