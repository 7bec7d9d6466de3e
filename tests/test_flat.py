"""The flat call (issue 16): f.flat(x) -> (loss, gradient) over the wrt cells in the order of
f.wrt_cells gives the dict call's loss and gradient bit for bit, native or interpreted."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import rvm

PETERSEN = "programs/petersen.rasm"


@pytest.mark.parametrize("native", [False, None])
def test_flat_is_the_dict_call(native):
    prog = rvm.assemble("programs/umm.rasm")
    f = rvm.grad_fn(prog, of="loss", wrt="x,theta", native=native)
    ref = rvm.grad_fn(prog, of="loss", wrt="x,theta", native=False)
    assert f.wrt_cells == [f"x[{k}]" for k in range(4)] + [f"theta[{k}]" for k in range(6)]
    rng = np.random.default_rng(3)
    for _ in range(12):                 # before and after the fast path (and native code)
        x, th = rng.standard_normal(4), rng.standard_normal(6)
        loss, g = f.flat(np.concatenate([x, th]))
        want = ref({"x": x, "theta": th})
        assert g.tobytes() == np.concatenate([want["x"], want["theta"]]).tobytes()
        assert loss == ref.last.value and isinstance(loss, float)
    out = np.empty(10)
    loss2, g2 = f.flat(np.concatenate([x, th]), out)
    assert g2 is out and out.tobytes() == g.tobytes() and loss2 == loss
    assert f.flat_call is not None


def test_flat_takes_lists_and_checks_its_vectors():
    f = rvm.grad_fn(rvm.assemble("programs/besselj_rec.rasm"), of="out", wrt="z")
    loss, g = f.flat([3.0])
    assert g.shape == (1,) and g[0] == f({"z": 3.0})["z"]
    assert loss == pytest.approx(0.486091260585891, rel=1e-12)        # J_2(3)
    with pytest.raises(ValueError, match="1 values"):
        f.flat(np.zeros(2))
    with pytest.raises(ValueError, match="out must be"):
        f.flat(np.zeros(1), np.zeros(2))


def test_a_fixed_wrt_cell_takes_the_general_path():
    prog = rvm.assemble("programs/besselj_fixed.rasm")
    f = rvm.grad_fn(prog, of="out", wrt="z")
    z = float(rvm.run(prog).inputs["z"])
    loss, g = f.flat([z])
    assert f.flat_call is None and g[0] == f({"z": z})["z"]


def test_threads_sharing_a_flat_call_get_their_own_lanes():
    prog = rvm.assemble(PETERSEN)
    f = rvm.grad_fn(prog, of="loss", wrt="x")
    xs = np.random.default_rng(5).standard_normal((16, 40))
    want = [f.flat(x) for x in xs]
    got: dict[int, tuple] = {}

    def work(k):
        for i in range(k, 16, 4):
            got[i] = f.flat(xs[i])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(16):
        assert got[i][0] == want[i][0] and got[i][1].tobytes() == want[i][1].tobytes()
