"""rvm.run_batch on batch lanes (issue 16, rvm/native/lanes.py with run=1 or -1): forward and
backward runs W rows at once, every cell a vector of W values; each row's outputs (inputs,
backward) and trap are its single run's, bit for bit, with the lane library on and off.
Groups whose rows branch apart, index differently or trap give up and run one row at a
time."""
from __future__ import annotations

import numpy as np
import pytest
from test_batch import SQRT
from test_kernels import TABLE_BODIES, TABLE_POOLS
from test_native import table_program

import rvm
from isa.types import TYPE_NAMES
from rvm import native, oneshot
from rvm.native import lanes

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

W = lanes.W

# backward, d's rows come back through the value stack into c, which a then reads: c is
# not one value in every lane (lanes.Uniform(back=True): a push run backward is a pop)
STACK = """
input a: int = 0
output d: int
global c: int
func main() {
    c += 7
    a += c
    push c
    pop d
}
"""

# d is 7 after every forward run, but backward runs start from d's rows: it is not one value
# in every lane (lanes.Uniform(back=True) starts from the outputs, not the inputs)
SEVEN = """
input a: int = 0
output d: int
func main() {
    d += 7
    a += d
}
"""


def split(prog, values, B):
    """Row b's values as rvm.run takes them (a value with a leading axis B is batched)."""
    out = []
    for b in range(B):
        d = {}
        for k, v in values.items():
            g = prog.global_named(k)
            single = 0 if g.length is None else 1
            v = np.asarray(v)
            if v.ndim == single + 1:
                d[k] = v[b].item() if single == 0 else v[b]
            else:
                d[k] = v.item() if single == 0 else v
        out.append(d)
    return out


def singles(prog, rows, reverse=False):
    """The loop of single runs: each row's outputs (reverse: inputs) dict, or its error."""
    out = []
    for r in rows:
        try:
            res = rvm.run(prog, r, reverse=reverse)
            out.append(res.inputs if reverse else res.outputs)
        except rvm.RVMError as e:
            out.append(e)
    return out


def lane_counts(prog, reverse=False):
    runners = [r for (_, back), rs in oneshot.entry(prog).batch_lanes.items() if back == reverse
               for r in rs]
    return sum(r.groups for r in runners), sum(r.bails for r in runners)


def batch_vs_single(prog, values, B, reverse=False, threads=1):
    """run_batch with the lane library against the loop of single runs: every good row's
    values bit for bit, every trapping row reported with its error's type; returns the lane
    runners' (groups, bails) and the rows that trapped."""
    assert rvm.compile_run_batch(prog, reverse).startswith(f"{W} lanes")
    want = singles(prog, split(prog, values, B), reverse)
    bad = [b for b, w in enumerate(want) if isinstance(w, Exception)]
    before = lane_counts(prog, reverse)
    try:
        got = rvm.run_batch(prog, values, reverse=reverse, threads=threads)
        assert bad == []
    except rvm.BatchError as e:
        assert sorted(e.errors) == bad and e.lane == (bad[0] if bad else None)
        assert all(type(e.errors[b]) is type(want[b]) for b in bad)
        got = e.results
    good = next(w for w in want if not isinstance(w, Exception))
    assert set(got) == set(good)
    for b, w in enumerate(want):
        if b in bad:
            continue
        for name in got:
            assert got[name][b].tobytes() == np.asarray(w[name], dtype=got[name].dtype).tobytes(), \
                (b, name)
    after = lane_counts(prog, reverse)
    return after[0] - before[0], after[1] - before[1], bad


@pytest.mark.parametrize("B,threads", [(8 * W, 1), (5 * W + 3, 1), (40 * W + 5, 2), (3, 1)])
def test_petersen_runs_are_the_single_runs_bit_for_bit(B, threads):
    """Whole groups, a remainder group (B not a multiple of W), two threads (chunks of whole
    groups) and a batch smaller than one group; forward, then backward from the ends."""
    prog = rvm.assemble("programs/petersen.rasm")
    X = np.random.default_rng(B).standard_normal((B, 40))
    groups, bails, bad = batch_vs_single(prog, {"x": X}, B, threads=threads)
    assert bad == [] and bails == 0 and groups == B // W
    ends = rvm.run_batch(prog, {"x": X})
    groups, bails, bad = batch_vs_single(prog, ends, B, reverse=True, threads=threads)
    assert bad == [] and bails == 0 and groups == B // W


@pytest.mark.parametrize("path", ["programs/besselj.rasm", "programs/besselj_rec.rasm"])
def test_bessel_rows_with_a_shared_order_run_in_lanes(path):
    """z batched, nu and nterms shared (broadcast): every group in lanes, both ways."""
    prog = rvm.assemble(path)
    B = 6 * W + 5
    zs = np.linspace(-3.0, 5.0, B)
    groups, bails, bad = batch_vs_single(prog, {"z": zs, "nu": 1, "nterms": 12}, B)
    assert (groups, bails, bad) == (6, 0, [])
    ends = rvm.run_batch(prog, {"z": zs, "nu": 1, "nterms": 12})
    groups, bails, bad = batch_vs_single(prog, ends, B, reverse=True)
    assert (groups, bails, bad) == (6, 0, [])


def test_int_inputs_that_part_the_rows_give_up_their_groups():
    """besselj_rec's order nu per row (its loops' counts): a group of one order runs in
    lanes, a group of mixed orders gives up and runs row by row, both ways."""
    prog = rvm.assemble("programs/besselj_rec.rasm")
    B = 3 * W + 2
    nu = np.full(B, 2)
    nu[W + 3] = 5                                       # in the second group
    zs = np.linspace(0.5, 4.0, B)
    groups, bails, bad = batch_vs_single(prog, {"z": zs, "nu": nu}, B)
    assert (groups, bails, bad) == (2, 1, [])
    ends = rvm.run_batch(prog, {"z": zs, "nu": nu})
    groups, bails, bad = batch_vs_single(prog, ends, B, reverse=True)
    assert (groups, bails, bad) == (2, 1, [])


@pytest.mark.parametrize("path,name,values", [
    ("programs/isqrt.rasm", "x", np.arange(1, 3 * W + 4) ** 3),
    ("programs/rfibn.rasm", "z", np.arange(2 * W) * 37 + 5),
])
def test_int_programs_whose_loops_differ_per_row(path, name, values):
    """Every row a loop count of its own: the groups give up, every row is its single run's,
    forward and backward."""
    prog = rvm.assemble(path)
    B = len(values)
    groups, bails, bad = batch_vs_single(prog, {name: values}, B)
    assert bad == [] and groups + bails == B // W and bails >= 1
    ends = rvm.run_batch(prog, {name: values})
    groups, bails, bad = batch_vs_single(prog, ends, B, reverse=True)
    assert bad == [] and groups + bails == B // W


@pytest.mark.parametrize("t", sorted(TABLE_POOLS), ids=lambda t: TYPE_NAMES[t])
def test_every_table_instruction_runs_in_lanes_both_ways(t):
    """Every data instruction of the table with a target of type t, in one program
    (tests/test_native.py's): the rows vary the float inputs, so every lane computes other
    numbers through the same path, forward and backward from the ends."""
    prog = rvm.assemble(table_program([c for c in TABLE_BODIES if c.op.operand_types[0] == t]))
    B = 2 * W
    rng = np.random.default_rng(5)
    inputs = {"n": 2, "e": 0.75 + 0.05 * rng.standard_normal(B),
              "t": 0.6 + 0.05 * rng.standard_normal(B)}
    assert batch_vs_single(prog, inputs, B) == (2, 0, [])
    ends = rvm.run_batch(prog, inputs)
    assert batch_vs_single(prog, ends, B, reverse=True) == (2, 0, [])


def test_a_trapping_row_gives_up_its_group_and_is_reported_by_its_index():
    prog = rvm.assemble(SQRT)
    x = np.linspace(1.0, 9.0, 3 * W + 3)
    x[W + 2] = -1.0                                       # in the second group
    x[3 * W + 1] = -4.0                                   # in the remainder
    groups, bails, bad = batch_vs_single(prog, {"x": x, "a": 3.0, "n": 2}, 3 * W + 3)
    assert (groups, bails, bad) == (2, 1, [W + 2, 3 * W + 1])
    with pytest.raises(rvm.BatchError) as info:
        rvm.run_batch(prog, {"x": x, "n": 2})
    e = info.value
    assert e.lane == W + 2 and isinstance(e.errors[W + 2], rvm.errors.DomainError)
    assert np.isnan(e.results["y"][[W + 2, 3 * W + 1]]).all()
    assert e.results["y"][0] == rvm.run(prog, {"x": float(x[0]), "n": 2}).outputs["y"]


@pytest.mark.parametrize("text,back", [(STACK, lambda d: -d), (SEVEN, lambda d: -d)])
def test_backward_rows_that_differ_in_their_outputs_are_not_taken_for_one_value(text, back):
    """lanes.Uniform(back=True): the output d differs per row, and c gets d's word through
    the stack when run backward."""
    prog = rvm.assemble(text)
    B = 2 * W + 1
    d = np.arange(B) * 3 - 5
    groups, bails, bad = batch_vs_single(prog, {"d": d}, B, reverse=True)
    assert (groups, bails, bad) == (2, 0, [])
    assert rvm.run_batch(prog, {"d": d}, reverse=True)["a"].tolist() == back(d).tolist()


def test_the_lanes_off_give_the_same_bits(monkeypatch):
    prog = rvm.assemble("programs/petersen.rasm")
    X = np.random.default_rng(3).standard_normal((3 * W + 1, 40))
    rvm.compile_run_batch(prog)
    on = rvm.run_batch(prog, {"x": X})
    assert lane_counts(prog) == (3, 0)
    monkeypatch.setenv("RVM_NATIVE_LANES", "0")
    other = rvm.assemble("programs/petersen.rasm")
    assert rvm.run_batch_native(other) == "off" == rvm.run_batch_native(prog)
    off = rvm.run_batch(other, {"x": X})
    assert oneshot.entry(other).batch_lanes == {}
    again = rvm.run_batch(prog, {"x": X})           # the library is there, but off
    assert lane_counts(prog) == (3, 0)
    for name in on:
        assert on[name].tobytes() == off[name].tobytes() == again[name].tobytes()


def test_a_large_batch_starts_the_build_and_later_batches_take_the_lanes(monkeypatch):
    """The first batch of MIN_ROWS rows or more starts the build in the background and runs
    row by row; compile_run_batch waits for it; a small batch starts nothing."""
    monkeypatch.delenv("RVM_NATIVE_LANES", raising=False)
    prog = rvm.assemble(SQRT)
    assert rvm.run_batch_native(prog) == "not built yet"
    rvm.run_batch(prog, {"x": np.linspace(1.0, 2.0, 10)})
    assert rvm.run_batch_native(prog) == "not built yet"
    x = np.linspace(1.0, 2.0, 64)
    first = rvm.run_batch(prog, {"x": x})
    assert rvm.compile_run_batch(prog).startswith(f"{W} lanes")
    assert rvm.run_batch_native(prog, reverse=True) == "not built yet"
    second = rvm.run_batch(prog, {"x": x})
    assert lane_counts(prog)[0] == 64 // W
    assert first["y"].tobytes() == second["y"].tobytes()


# Backward runs from ends no forward run reaches, each failing one kind of check in some
# lanes: the ancilla t is zero at the start only where d == a; the fi condition d > 0 holds
# backward where a > 0 does not (a come-from check); k indexes x[k] after the asserts the
# intervals narrow on, which run backward only after the access; n bounds a loop backward.
ANCILLA = """
inout a: int
inout d: int
inout x: float
func main() {
    local t: int = 0
    t += a
    swap t, d
    x += 1.5
    delocal t = a
}
"""

COME_FROM = """
inout a: int
inout d: int
inout x: float
func main() {
    if a > 0 {
        inc d
        x += 2.0
    } fi d > 0
}
"""

INDEX = """
inout k: int = 1
inout x: float[4] = [1.0, 2.0, 3.0, 4.0]
output y: float
func main() {
    assert k >= 0
    assert k < 4
    y += x[k] * 2.0
    k += 1
    x[k - 1] += 0.5
}
"""

BOUND = """
inout n: int = 3
inout x: float[8]
output s: float
func main() {
    for i in 0..n {
        s += x[i]
        x[i] += 1.0
    }
}
"""


@pytest.mark.parametrize("text,good,name,wrong,f", [
    (ANCILLA, {"a": 3, "d": 3}, "d", [4, -3, 2**63 - 1], "x"),
    (COME_FROM, {"a": 1, "d": 1}, "a", [0, -2**63], "x"),
    (INDEX, {"k": 2, "x": [1.0, 2.0, 3.0, 4.0]}, "k", [5, 4, -1, 2**62, -2**63], "y"),
    (BOUND, {"n": 3, "x": np.arange(8.0)}, "n", [9, -1, 8, 2**63 - 1], "s"),
], ids=["ancilla", "come-from", "index", "loop-bound"])
def test_backward_rows_from_ends_no_forward_run_reaches(text, good, name, wrong, f):
    """One lane of a group with a wrong end (its group gives up, that row is reported with its
    single run's error, the others bit for bit), then every row of a group and the remainder
    (B = 2W + 1), with an int at the int64 limits where an index or a count reads it."""
    prog = rvm.assemble(text)
    B = 2 * W + 1
    floats = {f: np.linspace(-2.0, 6.0, B)}         # every row's own float: lanes that differ
    for w in wrong:
        for rows in ([W + 3], list(range(W)) + [2 * W]):
            col = np.full(B, good[name], dtype=np.int64)
            col[rows] = w
            values = {**{k: v for k, v in good.items() if k != name}, **floats, name: col}
            groups, bails, bad = batch_vs_single(prog, values, B, reverse=True)
            assert groups + bails == 2 and (len(rows) > 1 or (groups, bails) == (1, 1)), \
                (w, rows, groups, bails, bad)
    assert batch_vs_single(prog, {**good, **floats}, B, reverse=True)[:2] == (2, 0)
