"""rvm.parallel.map: chunks, input order, per-input errors, the local fallback, and a real
dask.distributed LocalCluster of 2 worker processes (10^4 gradients, bit for bit serial)."""
import functools
import time

import numpy as np
import pytest

import rvm
from rvm import parallel

DIV = "input x: float\noutput y: float\nfunc main() {\n  y += 1.0 / x\n}\n"


@pytest.fixture(scope="module")
def bessel():
    return rvm.assemble("programs/besselj_rec.rasm")


@pytest.mark.parametrize("local", ["serial", "threads", "processes"])
def test_local_in_order_with_errors(local):
    f = rvm.grad_fn(rvm.assemble(DIV), of="y", wrt="x")
    xs = [2.0, 0.0, -4.0, 0.5, 0.0, 1.0]
    out = parallel.map(f, [{"x": x} for x in xs], local=local, chunk_size=2, max_workers=2)
    assert len(out) == len(xs)
    for x, r in zip(xs, out):
        if x == 0.0:
            assert isinstance(r, rvm.errors.DivisionByZero) and r.pc >= 0
            assert "division by zero" in str(r)
        else:
            assert r["x"] == -1.0 / (x * x)


def test_errors_raise():
    f = functools.partial(rvm.run, rvm.assemble(DIV))
    with pytest.raises(rvm.errors.DivisionByZero):
        parallel.map(f, [{"x": 1.0}, {"x": 0.0}], errors="raise", local="serial")
    assert parallel.map(f, [], local="serial") == []
    with pytest.raises(ValueError, match="local="):
        parallel.map(f, [{"x": 1.0}], local="gpu")


def test_lambda_and_results(bessel):
    out = parallel.map(lambda z: rvm.run(bessel, {"z": z}).outputs["out"], [1.0, 2.0, 3.0])
    assert out[2] == 0.486091260585891


def test_local_cluster_bit_for_bit(bessel):
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed:"
                                      " pip install -e '.[interop]'")
    zs = np.linspace(0.1, 5.0, 10_000)
    inputs = [{"z": float(z)} for z in zs]
    f = rvm.grad_fn(bessel, of="out", wrt=["z"])
    t = time.perf_counter()
    serial = [f(x)["z"] for x in inputs]
    t_serial = time.perf_counter() - t
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        parallel.map(f, inputs[:100], client=client)            # workers warm up
        t = time.perf_counter()
        out = parallel.map(f, inputs, client=client)
        t_dask = time.perf_counter() - t
        bad = parallel.map(rvm.grad_fn(rvm.assemble(DIV), of="y", wrt="x"),
                           [{"x": 1.0}, {"x": 0.0}, {"x": 2.0}], client=client)
    got = np.array([r["z"] for r in out])
    assert np.array_equal(got.view(np.int64), np.array(serial).view(np.int64))
    assert bad[0]["x"] == -1.0 and bad[2]["x"] == -0.25
    assert isinstance(bad[1], rvm.errors.DivisionByZero)
    print(f"\n10^4 gradients: serial {t_serial:.3f} s ({len(zs) / t_serial:.0f}/s), "
          f"LocalCluster(2 processes) {t_dask:.3f} s ({len(zs) / t_dask:.0f}/s), "
          f"ratio {t_serial / t_dask:.2f}")
