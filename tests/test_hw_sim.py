"""The bit-sliced simulator kernel: gate semantics against a plain Python model, the bit
transposes at every block boundary, the ASAP depth pass."""
from __future__ import annotations

import numpy as np
import pytest

from rvm.hw import _sim
from rvm.hw.circuit import Builder
from rvm.hw.report import cost
from rvm.hw.sim import simulate


def model(gates, x: list[int]) -> list[int]:
    """Apply (kind, target, args) gates to a list of bits."""
    x = list(x)
    for kind, t, args in gates:
        if kind == "x":
            if all((x[c] if c >= 0 else 1 - x[~c]) for c in args):
                x[t] ^= 1
        else:
            c, t2 = args
            if x[c]:
                x[t], x[t2] = x[t2], x[t]
    return x


def test_every_gate_kind_on_all_inputs():
    gates = [("x", 0, ()), ("x", 1, (0,)), ("x", 2, (0, 1)), ("x", 3, (~0, 1, ~2)),
             ("f", 4, (3, 5)), ("x", 5, (0, 1, 2, 3)), ("x", 0, (~5,)), ("f", 1, (0, 2))]
    b = Builder()
    regs = [b.register(f"w{i}", 1) for i in range(6)]
    for kind, t, args in gates:
        if kind == "x":
            b.x(regs[t][0], *args)
        else:
            b.fredkin(args[0], t, args[1])
    c = b.build("mix")
    k = np.arange(64, dtype=np.uint64)
    out = simulate(c, {f"w{i}": (k >> np.uint64(i)) & np.uint64(1) for i in range(6)})
    for v in range(64):
        want = model(gates, [(v >> i) & 1 for i in range(6)])
        assert [int(out[f"w{i}"][v]) for i in range(6)] == want
    inv = c.inverse()
    back = simulate(inv, out)
    assert all((back[f"w{i}"] == (k >> np.uint64(i)) & np.uint64(1)).all() for i in range(6))


@pytest.mark.parametrize("count", [1, 63, 64, 65, 127, 1000])
@pytest.mark.parametrize("bits", [1, 7, 33, 64])
def test_scatter_gather_round_trip(count, bits):
    rng = np.random.default_rng(count * bits)
    v = rng.integers(0, 1 << 62, count, dtype=np.uint64) * np.uint64(4) + \
        rng.integers(0, 4, count, dtype=np.uint64)
    if bits < 64:
        v &= np.uint64((1 << bits) - 1)
    wires = (np.arange(bits, dtype=np.int32)[::-1] + 2).copy()
    state = np.zeros((bits + 2, (count + 63) // 64), dtype=np.uint64)
    _sim.scatter(v, wires, state)
    i = count - 1
    for j in (0, bits - 1):
        assert (int(state[wires[j], i // 64]) >> (i % 64)) & 1 == (int(v[i]) >> j) & 1
    out = np.empty(count, dtype=np.uint64)
    _sim.gather(state, wires, out)
    assert (out == v).all()


def test_depth_and_carried_levels():
    b = Builder()
    w = [b.register(f"w{i}", 1)[0] for i in range(4)]
    b.x(w[0])                 # level 1 on w0
    b.x(w[1], w[0])           # 2 on w0, w1
    b.x(w[3])                 # 1 on w3 (parallel)
    b.x(w[2], w[0], w[3])     # 3, Toffoli 1
    b.x(w[1], w[2], w[3])     # 4, Toffoli 2
    c = b.build("d")
    r = cost(c)
    assert (r.depth, r.toffoli_depth) == (4, 2)
    lv = np.array([10, 0, 0, 0], dtype=np.int64)
    tl = np.zeros(4, dtype=np.int64)
    assert _sim.depth(c.gates, c.controls, c.n_wires, lv, tl) == (14, 2)
    assert lv.tolist() == [13, 14, 14, 14]


def test_dirty_alloc_is_reported_at_its_gate():
    b = Builder()
    (y,) = b.register("y", 1)
    (a,) = b.alloc(1)
    b.x(a, y)
    b.free([a])
    c = b.build("dirty")
    state = np.zeros((c.n_wires, 1), dtype=np.uint64)
    assert _sim.run(c.gates, c.controls, state) == -1      # y = 0: clean
    state[0, 0] = 1
    assert _sim.run(c.gates, c.controls, state) == 2       # the FREE row


def test_builder_rejects_wrong_wires():
    b = Builder()
    y = b.register("y", 2)
    with pytest.raises(ValueError, match="wires repeat"):
        b.x(y[0], y[0])
    (a,) = b.alloc(1)
    with pytest.raises(RuntimeError, match="1 ancilla\\(s\\) never freed"):
        b.build("leak")
    with pytest.raises(RuntimeError, match="registers come before any gate or ancilla"):
        b.register("z", 2)
