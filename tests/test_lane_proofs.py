"""The lanes (rvm/native/lanes.py) leave out the checks codegen's interval analysis proves
(rvm/native/intervals.py), with the analysis' start checked at each function's entry in every
lane: a group whose start state breaks an assumption hands back (RVM_NATIVE_BAIL) before it
runs a row, and the scalar path runs its rows.  These tests call the lane library's entries
on a lane state built here (cell c's lane j at c * W + j), so that a start state the machine
never hands the lanes can be tried."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from test_native_proofs import loop

import rvm
from rvm import native
from rvm.errors import AssertionTrap
from rvm.native import codegen, lanes
from rvm.native.build import build

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

W = lanes.W
BAIL = 2                                   # RVM_NATIVE_BAIL (rvm/_abi.h)


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("RVM_CACHE_DIR", str(tmp_path_factory.mktemp("lane_proofs")))
    yield
    mp.undo()


P64, PD = ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_double)


class NS(ctypes.Structure):
    """rvm_ns of rvm/_abi.h."""
    _fields_ = [("mem", P64), ("adj", PD), ("steps", ctypes.c_int64),
                ("budget", ctypes.c_int64), ("poll", ctypes.c_void_p),
                ("n_mem", ctypes.c_int64), ("max_depth", ctypes.c_int64),
                ("pt_cap", ctypes.c_int64), ("peak_ftop", ctypes.c_int64),
                ("peak_depth", ctypes.c_int64), ("pc", ctypes.c_int64),
                ("stack_low", ctypes.c_void_p), ("stack", P64), ("sadj", PD),
                ("sp", ctypes.c_int64), ("stack_cap", ctypes.c_int64),
                ("peak_sp", ctypes.c_int64), ("tan", ctypes.c_void_p),
                ("adjt", ctypes.c_void_p), ("stan", ctypes.c_void_p),
                ("sadjt", ctypes.c_void_p), ("rel_n", ctypes.c_int64),
                ("rel_pc", ctypes.c_int64), ("rel_max", ctypes.c_double),
                ("vtan", ctypes.c_void_p), ("vadjt", ctypes.c_void_p),
                ("vstan", ctypes.c_void_p), ("vsadjt", ctypes.c_void_p),
                ("lanes", ctypes.c_int64)]


def run(lib, entry: str, mem: np.ndarray, adj: np.ndarray) -> int:
    """The lane entry `entry` on the lane state (mem, adj: changed in place); its code."""
    stack, sadj = np.zeros(16 * W, np.int64), np.zeros(16 * W)
    st = NS(mem=mem.ctypes.data_as(P64), adj=adj.ctypes.data_as(PD), steps=0,
            budget=1 << 62, n_mem=len(mem) // W, max_depth=100, pt_cap=64,
            stack=stack.ctypes.data_as(P64), sadj=sadj.ctypes.data_as(PD), stack_cap=16)
    fn = getattr(lib, entry)
    fn.restype, fn.argtypes = ctypes.c_int64, [ctypes.POINTER(NS)]
    return int(fn(ctypes.byref(st)))


def image(m: rvm.Machine, prog) -> np.ndarray:
    """The machine's static cells and main's frame (and a few more), in every lane."""
    mem = np.array(m.mem[:prog.n_static + prog.functions[prog.main].frame_size + 8])
    return np.repeat(mem, W)


def test_the_lanes_leave_out_what_the_intervals_prove():
    prog = rvm.assemble(loop(8))
    src = lanes.generate(prog)
    codegen.PROVE = False
    try:
        kept = lanes.generate(prog)
    finally:
        codegen.PROVE = True
    assert kept.count(">= (u64)") > src.count(">= (u64)")
    # main's sweep starts from the forward run's end: n in [1, 8], in every lane
    assert "M[0 * W + __j] < ((i64)0x1ULL)) | (M[0 * W + __j] > ((i64)0x8ULL))" in src


@pytest.mark.parametrize("lanes_out", [range(W), [W - 1]], ids=["every-lane", "one-lane"])
@pytest.mark.parametrize("n", [9, 0, 100])
def test_a_sweep_from_outside_the_forward_runs_ranges_hands_back_before_a_row(lanes_out, n):
    """The sweep's a[i] checks rest on n in [1, 8] (the forward run's asserts): a group with
    n outside gives up at entry, its lanes' memory and adjoints untouched (run on, it would
    index a[-1], a[8] and beyond, and write there)."""
    prog = rvm.assemble(loop(8, False))
    lib, _path, _built = build(lanes.generate(prog), for_cpu=True, extra=lanes.FLAGS)
    m = rvm.Machine(prog, native=False)
    m.reset({"n": 4, "x": 0.5, "k": 1})
    start = image(m, prog)
    m.run()
    end = image(m, prog)
    # the whole group in range: the sweep runs back to the start state
    mem, adj = end.copy(), np.zeros(len(end))
    assert run(lib, "rvm_native_backward_wa", mem, adj) == 0
    assert mem.tobytes() == start.tobytes()
    mem = end.copy()
    for j in lanes_out:
        mem[0 * W + j] = n
    before, adj = mem.copy(), np.full(len(end), 0.25)
    assert run(lib, "rvm_native_backward_wa", mem, adj) == BAIL
    # (the entry clears main's frame adjoints first; the globals' are the sweep's to change)
    assert mem.tobytes() == before.tobytes() and (adj[:prog.n_static * W] == 0.25).all()


# i is 2 where a[i] is read: the check of a[i] is left out, on i starting at 0
FRAME = """
inout x: float = 0.5
inout z: float
func main() {
    var a: float[4]
    var i: int
    i += 2
    a[i] += x * x
    z += a[i] * x
    a[i] -= x * x
    i -= 2
}
"""


@pytest.mark.parametrize("lanes_out", [range(W), [W - 1]], ids=["every-lane", "one-lane"])
def test_a_frame_not_zero_hands_back_before_a_row(lanes_out):
    """The analysis starts from main's frame zero (i = 0): a group with i = 5 gives up at the
    forward run's entry, nothing written (run on, it would write a[7], past a; i, one C
    scalar, is read from lane 0: only the entry check sees the last lane's)."""
    prog = rvm.assemble(FRAME)
    src = lanes.generate(prog)
    assert "if (rvm_any(M + (fp + 4) * W, W)) BAIL(" in src and ">= (u64)" not in src
    lib, _path, _built = build(src, for_cpu=True, extra=lanes.FLAGS)
    m = rvm.Machine(prog, native=False)
    m.reset({"x": 0.5})
    start = image(m, prog)
    mem, adj = start.copy(), np.zeros(len(start))
    assert run(lib, "rvm_native_forward_w", mem, adj) == 0
    m.run()
    assert mem.tobytes() == image(m, prog).tobytes()
    i = prog.n_static + 4                       # main's locals: a[4], then i
    mem = start.copy()
    for j in lanes_out:
        mem[i * W + j] = 5
    before = mem.copy()
    assert run(lib, "rvm_native_forward_w", mem, adj) == BAIL
    assert mem.tobytes() == before.tobytes()


# n != 0 fails the assert on two constants, which the analysis decides (never holds): only
# the jump's edge reaches A, with i = 0, and a[i] has no check.  A lane that fails a check
# computes on until the next taken jump or the return, so the lanes must give up at such an
# assert at once (they set the lanes' flags and went on: i += 5, then a[5] written and z
# changed before the return gave up; i += 2^40 segfaulted through f.batch).
DEAD = """
input n: int
input x: float = 0.5
output z: float
const one: int = 1
func main() {
    var a: float[2]
    var i: int
A0: jmp A if n == 0
    assert one == 2
    i += 5
A:  join A0 if n == 0
    a[i] += x
    z += a[i] * x
    a[i] -= x
}
"""


def test_an_assert_the_analysis_decides_gives_up_at_once_in_the_lanes():
    prog = rvm.assemble(DEAD)
    src = lanes.generate(prog)
    assert ">= (u64)" not in src
    lib, _path, _built = build(src, for_cpu=True, extra=lanes.FLAGS)
    m = rvm.Machine(prog, native=False)
    m.reset({"n": 0, "x": 0.5})
    start = image(m, prog)
    mem, adj = start.copy(), np.zeros(len(start))
    assert run(lib, "rvm_native_forward_w", mem, adj) == 0
    m.run()
    assert mem.tobytes() == image(m, prog).tobytes()
    mem = start.copy()
    mem[:W] = 1                                 # n = 1: the assert fails in every lane
    five = (prog.n_static + 5) * W              # a[5], past main's frame (a[2], i)
    mem[five:five + W] = np.float64(2.0).view(np.int64)
    before = mem.copy()
    assert run(lib, "rvm_native_forward_w", mem, adj) == BAIL
    assert mem.tobytes() == before.tobytes()
    m.reset({"n": 1, "x": 0.5})
    with pytest.raises(AssertionTrap):
        m.run()
