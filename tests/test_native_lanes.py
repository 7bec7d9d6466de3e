"""Batch lanes (issue 16, rvm/native/lanes.py): GradFn.batch runs W rows at once, every cell a
vector of W values; each row's gradient, loss and trap are its single call's, bit for bit,
with the lane library on and off.  Groups whose rows branch apart, index differently or trap
give up and run one row at a time."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from test_kernels import TABLE_BODIES, TABLE_POOLS
from test_native import table_program

import rvm
from isa.derivatives import DIFFERENTIABLE
from isa.types import TYPE_NAMES
from rvm import native
from rvm.ad import BatchError
from rvm.native import lanes

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

W = lanes.W

SQRT = """
input x: float = 1.0
input a: float = 2.0
input n: int = 1
output y: float
func main() {
    for i in 0..n {
        y += a * sqrt(x)
    }
}
"""

# the branch taken depends on the row's x: a group of rows on both sides gives up
BRANCH = """
input x: float = 1.0
output y: float
func main() {
    if x > 0.0 {
        y += x * x
    } else {
        y -= x
    } fi x > 0.0
}
"""


def single(prog, of, wrt, rows):
    """The loop of single (interpreted) calls: each row's gradient dict, or its error."""
    f = rvm.grad_fn(prog, of=of, wrt=wrt, native=False)
    out = []
    for r in rows:
        try:
            out.append(f(r))
        except rvm.RVMError as e:
            out.append(e)
    return out


def rows_of(inputs, B):
    return [{k: (v[b] if np.ndim(v) and len(np.shape(v)) and np.shape(v)[0] == B else v)
             for k, v in inputs.items()} for b in range(B)]


def batch_vs_single(prog, of, wrt, inputs, B, threads=1):
    """f.batch with the lane library against the loop of single calls: every good row's
    gradient bit for bit, every trapping row reported with its error's type; returns the
    lane runners' (groups, bails) and the rows that trapped."""
    f = rvm.grad_fn(prog, of=of, wrt=wrt)
    assert f.compile_batch().startswith(f"{W} lanes")
    want = single(prog, of, wrt, rows_of(inputs, B))
    bad = [b for b, w in enumerate(want) if isinstance(w, Exception)]
    try:
        got = f.batch(inputs, threads=threads)
        assert bad == []
    except BatchError as e:
        assert sorted(e.errors) == bad
        assert all(type(e.errors[b]) is type(want[b]) for b in bad)
        got = e.results
    names = list(got)
    for b, w in enumerate(want):
        if b in bad:
            continue
        for name in names:
            assert np.asarray(got[name][b]).tobytes() == np.asarray(w[name], dtype=float).tobytes(), \
                (b, name)
    runners = f.__dict__.get("_lane_runners", [])
    return sum(r.groups for r in runners), sum(r.bails for r in runners), bad


@pytest.mark.parametrize("B,threads", [(8 * W, 1), (5 * W + 3, 1), (40 * W + 5, 2), (3, 1)])
def test_petersen_batches_are_the_single_calls_bit_for_bit(B, threads):
    """Whole groups, a remainder group (B not a multiple of W), two threads (chunks of whole
    groups) and a batch smaller than one group."""
    prog = rvm.assemble("programs/petersen.rasm")
    X = np.random.default_rng(B).standard_normal((B, 40))
    groups, bails, bad = batch_vs_single(prog, "loss", "x", {"x": X}, B, threads)
    assert bad == [] and bails == 0 and groups == B // W


def test_the_lanes_off_give_the_same_bits(monkeypatch):
    prog = rvm.assemble("programs/petersen.rasm")
    X = np.random.default_rng(3).standard_normal((3 * W + 1, 40))
    f = rvm.grad_fn(prog, of="loss", wrt="x")
    f.compile_batch()
    on = f.batch({"x": X})["x"]
    assert sum(r.groups for r in f.__dict__["_lane_runners"]) == 3
    loss_on = f.last_batch_loss.copy()
    monkeypatch.setenv("RVM_NATIVE_LANES", "0")
    g = rvm.grad_fn(prog, of="loss", wrt="x")
    assert g.batch_native == "off"
    off = g.batch({"x": X})["x"]
    assert "_lane_runners" not in g.__dict__
    assert on.tobytes() == off.tobytes()
    assert loss_on.tobytes() == g.last_batch_loss.tobytes()


def test_groups_whose_rows_branch_apart_run_one_row_at_a_time():
    prog = rvm.assemble(BRANCH)
    # group 0: every x > 0; group 1: mixed (gives up); group 2: every x <= 0; then 2 more
    x = np.concatenate([np.linspace(0.5, 4.0, W), np.linspace(-2.0, 2.0, W),
                        -np.linspace(0.25, 3.0, W), [1.5, -1.5]])
    groups, bails, bad = batch_vs_single(prog, "y", "x", {"x": x}, len(x))
    assert (groups, bails, bad) == (2, 1, [])


def test_a_trapping_row_makes_its_group_give_up_and_is_reported_by_its_index():
    prog = rvm.assemble(SQRT)
    x = np.linspace(1.0, 9.0, 3 * W)
    x[W + 2] = -1.0                                       # in the second group
    groups, bails, bad = batch_vs_single(prog, "y", "x,a", {"x": x, "a": 3.0}, 3 * W)
    assert (groups, bails, bad) == (2, 1, [W + 2])


def test_loop_counts_that_differ_give_up_and_shared_inputs_broadcast():
    """n (a loop count) differs in the second group only; a (not batched) is every row's."""
    prog = rvm.assemble(SQRT)
    B = 2 * W + 1
    x = np.linspace(0.5, 8.0, B)
    n = np.full(B, 3)
    n[W + 1] = 4
    groups, bails, bad = batch_vs_single(prog, "y", "x,a", {"x": x, "a": 1.5, "n": n}, B)
    assert (groups, bails, bad) == (1, 1, [])


@pytest.mark.filterwarnings("ignore::rvm.ad.ReleasedTangentWarning")
@pytest.mark.parametrize("t", sorted(TABLE_POOLS), ids=lambda t: TYPE_NAMES[t])
def test_every_table_instruction_in_lanes(t):
    """Every data instruction of the table with a target of type t, in one compiled program
    (tests/test_native.py's): the rows vary the float inputs, so every lane computes other
    numbers through the same path."""
    cases = [c for c in TABLE_BODIES if c.op.operand_types[0] == t]
    prog = rvm.assemble(table_program(cases))
    wrt = ["e", "d", "t", "r", "m", "o"] + [g.name for g in prog.globals if g.name[0] == "y"
                                            and g.type in DIFFERENTIABLE]
    B = 2 * W
    rng = np.random.default_rng(5)
    inputs = {"n": 2, "e": 0.75 + 0.05 * rng.standard_normal(B),
              "t": 0.6 + 0.05 * rng.standard_normal(B)}
    assert batch_vs_single(prog, "loss", wrt, inputs, B) == (2, 0, [])


def test_the_generated_code_is_one_loop_per_row_over_the_lanes():
    """The lane code of a row: a loop over W lanes of the op's lane form (isa/cgen.py: the
    scalar code's op from the same table, flagging a trap instead of keeping its target), the
    index and the branch read once, with the check that the lanes agree."""
    src = lanes.generate(rvm.assemble(BRANCH))
    assert f"#define W {W}" in src and "rvm_native_forward_w" in src
    assert "rvm_native_backward_wa" in src
    assert "rvm_lop_addmul_f(" in src and "rvm_op_addmul_f(" not in src and "rvm_ad_sub_nz(" in src
    assert src.count("rvm_uniform(c") >= 2           # the branch's condition, both ways


# i is checked to hold one value at its first use as an index, then changed by k (an input
# that may differ between rows): its next use must be checked again
REINDEX = """
input x: float = 1.0
input k: int = 0
const arr: float[4] = [1.0, 2.0, 3.0, 4.0]
output y: float
func main() {
    local i: int
    i += 1
    y += arr[i] * x
    i += k
    y += arr[i] * x
    i -= k
    i -= 1
}
"""


def test_an_index_changed_by_a_row_input_is_checked_again():
    prog = rvm.assemble(REINDEX)
    B = 3 * W
    x = np.linspace(0.5, 2.0, B)
    k = np.zeros(B, dtype=np.int64)
    k[W:2 * W] = 1                                        # group 1: one value, not 0
    k[2 * W + 3] = 2                                      # group 2: two values
    assert batch_vs_single(prog, "y", "x", {"x": x, "k": k}, B) == (2, 1, [])
    src = lanes.generate(prog)
    # i (a local written from the input k: not one value in every lane) is a C array of its
    # lanes, checked at its two uses, in both directions
    assert src.count("rvm_uniform(vL0)") == 2 * 2


# i holds one value in every lane (from a constant): the lanes keep it as one C scalar and run
# its rows once; j comes from the input n and m from the float input x (a conversion): they
# are per lane, C arrays of W lanes, checked where they index
UNIFORM = """
input x: float = 1.0
input n: int = 1
const c: int[3] = [1, 2, 0]
const arr: float[4] = [1.5, 2.0, 3.0, 4.0]
output y: float
func main() {
    local i: int
    local j: int
    local m: int
    local t: float
    i += c[1]
    j += n
    m += int(x)
    with {
        t += arr[i] * x
    } do {
        y += t * arr[j]
    }
    y += arr[m] * x
    m -= int(x)
    j -= n
    i -= c[1]
}
"""


def test_cells_that_hold_one_value_in_every_lane_are_scalars():
    prog = rvm.assemble(UNIFORM)
    src = lanes.generate(prog)
    assert "i64 uL0 = " in src and "uL0 = w_y;" in src                 # i: one scalar
    assert "i64 vL1[W]" in src and "i64 vL2[W]" in src                 # j, m: W lanes
    assert "i64 vL3[W]" in src and "double gL3[W]" in src              # t, its adjoints
    assert "rvm_uniform(vL1)" in src and "rvm_uniform(vL2)" in src
    assert "rvm_uniform(uL0)" not in src and "vL0" not in src
    B = 3 * W
    x = np.linspace(0.6, 1.4, B)                         # int(x) is 1 in every row
    n = np.full(B, 2)
    n[W + 3] = 3                                         # group 1: j differs in one row
    assert batch_vs_single(prog, "y", "x", {"x": x, "n": n}, B) == (2, 1, [])
    x[2 * W + 1] = 2.0                                   # group 2: m differs in one row
    assert batch_vs_single(prog, "y", "x", {"x": x, "n": n}, B) == (1, 2, [])


def test_petersen_lanes_keep_its_ints_as_scalars():
    """Petersen's loop counters and indexes derive from constants only: no lane check is
    left; its float temporary t is a C array (a vector register), with its adjoints."""
    src = lanes.generate(rvm.assemble("programs/petersen.rasm"))
    assert "if (!rvm_uniform(" not in src
    assert "i64 uL0 = " in src and "i64 vL2[W]" in src and "double gL2[W]" in src


# z is zero: the scalar row i += c / z traps in every lane; the group gives up and every row
# is reported with its index, as the single call reports it
SCALAR_TRAP = """
input x: float = 1.0
const c: int = 7
output y: float
func main() {
    local z: int
    local i: int
    y += x * x
    i += c / z
    y += x
    i -= c / z
}
"""


def test_a_trap_in_a_scalar_row_is_reported_for_every_row():
    prog = rvm.assemble(SCALAR_TRAP)
    src = lanes.generate(prog)
    assert "if (rvm_op_adddiv_i(&w_y, " in src            # once, not in a loop over lanes
    B = 2 * W
    assert batch_vs_single(prog, "y", "x", {"x": np.linspace(1.0, 2.0, B)}, B) == \
        (0, 2, list(range(B)))


# the sweep's rules skip what no varied cell reads (rvm/native/activity.py): the local s comes
# from a constant only, so the adjoint it would get from y += s * x goes to the lane's sink
ACTIVITY = """
input x: float = 1.0
const a: float = 0.5
output y: float
func main() {
    local s: float
    s += sqrt(a)
    y += s * x
    y += x * x
    s -= sqrt(a)
}
"""


def test_the_sweep_skips_the_rules_into_cells_that_carry_no_derivative():
    prog = rvm.assemble(ACTIVITY)
    src = lanes.generate(prog)
    assert "&dz)" in src                                  # s's adjoint, into the sink
    B = 2 * W
    x = np.linspace(-1.0, 2.0, B)
    assert batch_vs_single(prog, "y", "x", {"x": x}, B) == (2, 0, [])


# a lane that divides by zero or overflows into a cell nothing else reads: only its flag
# (isa/cgen.py's lane forms store the non-finite value and flag it) sends the group to the
# scalar path, which reports the row; the sweep's inverse would flag it too, so the test
# fails only if the lane forms drop the flag altogether
QUIET_TRAP = """
input x: float = 1.0
const one: float = 1.0
output y: float
global g: float
func main() {
    g += OP
    y += x * x
}
"""


@pytest.mark.parametrize("op,x", [("one / x", 0.0), ("x * x", 1e200), ("x - one", math.inf)],
                         ids=["divide-by-zero", "overflow", "inf-input"])
def test_one_failing_lane_sends_its_group_to_the_scalar_path_which_reports_its_row(op, x):
    prog = rvm.assemble(QUIET_TRAP.replace("OP", op))
    B = 3 * W
    xs = np.linspace(1.0, 2.0, B)
    xs[W + 5] = x                                          # one lane of the second group
    groups, bails, bad = batch_vs_single(prog, "y", "x", {"x": xs}, B)
    assert (groups, bails, bad) == (2, 1, [W + 5])


# the same for the int and fixed forms (review of eec3c4c/5a108b0: they keep their checks; a
# failed TRY leaves its word 0 and the lane computes on): one lane's int division or modulo by
# zero, fixed division by zero, a float too large for an int, in a cell nothing reads, with a
# shared input beside the batched ones
QUIET_INT_TRAP = """
.fixed 20
input x: float = 1.0
input d: int = 1
input e: fixed = 1.0
input k: int = 7
output y: float
global g: int
global h: fixed
func main() {
    OP
    y += x * x
}
"""


@pytest.mark.parametrize("op,row", [("g += k / d", {"d": 0}), ("g += k % d", {"d": 0}),
                                    ("h += e / e", {"e": 0.0}), ("g += int(x)", {"x": 1e19})],
                         ids=["int-divide-by-zero", "int-mod-by-zero", "fixed-divide-by-zero",
                              "float-to-int-range"])
def test_one_failing_int_or_fixed_lane_sends_its_group_to_the_scalar_path(op, row):
    prog = rvm.assemble(QUIET_INT_TRAP.replace("OP", op))
    B = 3 * W
    inputs = {"x": np.linspace(1.0, 2.0, B), "d": np.arange(B) % 3 + 1,
              "e": np.linspace(0.5, 1.5, B), "k": 7}
    for name, v in row.items():
        inputs[name][W + 5] = v                           # one lane of the second group
    groups, bails, bad = batch_vs_single(prog, "y", "x", inputs, B)
    assert (groups, bails, bad) == (2, 1, [W + 5])


# t, a local in a register, ends as a rounding residue (not zero) in the lane whose x is 0.1:
# the return's frame check reads it from its lanes' register and gives up the group
RESIDUE = """
input x: float = 0.5
const one: float = 1.0
output y: float
func g(y: float, x: float) {
    local t: float
    t += x + one
    y += t * t
    t -= one
    t -= x
}
func main() {
    call g(y, x)
}
"""


def test_a_local_left_nonzero_in_one_lane_fails_the_return_check_of_its_group():
    prog = rvm.assemble(RESIDUE)
    assert "z_ |= vL" in lanes.generate(prog)             # t's lanes checked in the register
    B = 3 * W
    xs = np.full(B, 0.5)
    xs[W + 3] = 0.1
    assert batch_vs_single(prog, "y", "x", {"x": xs}, B) == (2, 1, [W + 3])


def test_lane_rows_check_the_retrace_of_exact_cells_and_hand_back_no_row_that_retraced():
    """LaneRows.grad_rows (the lanes' entry, as bench_batch_lanes.py calls it) on a program
    with int inputs (cells that never round: the retrace check compares their start and end
    words in every lane): every row retraced, so none is handed back (status 0), and every
    gradient is the single call's."""
    from rvm import _core
    from rvm.api import batch_words, split_batch
    from rvm.native.build import build
    prog = rvm.assemble(REINDEX)
    B = 2 * W
    x, k = np.linspace(0.5, 2.0, B), np.ones(B, dtype=np.int64)
    f = rvm.grad_fn(prog, of="y", wrt="x")
    f.compile()
    r = f._batch_runner(0)
    exact = r._exact_addrs()
    assert len(exact) > 0
    rows_, shared, _ = split_batch(prog, {"x": x, "k": k})
    in_addrs, def_words, row_addrs, rows = batch_words(r.m, rows_, shared, B)
    lib, _path, _built = build(lanes.generate(prog), for_cpu=True, extra=lanes.FLAGS)
    fw, bw = (ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
              for n in ("rvm_native_forward_w", "rvm_native_backward_wa"))
    lr = _core.LaneRows(lib, fw, bw, lib.rvm_lanes_width())
    out = np.full((B, 1), np.nan)
    loss, status = np.zeros(B, np.int64), np.ones(B, np.int64)
    assert lr.grad_rows(r.core, r.of.addr, in_addrs, def_words, row_addrs, rows,
                        r._fast_args()[3], out, loss, status, exact)
    assert (lr.groups, lr.bails) == (2, 0) and status.tolist() == [0] * B
    want = single(prog, "y", "x", rows_of({"x": x, "k": k}, B))
    assert out[:, 0].tobytes() == np.array([w["x"] for w in want]).tobytes()
