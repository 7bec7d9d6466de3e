"""One gradient function, one machine, shared by threads: every call gives the result a serial
call gives, bit for bit, interpreted and native, and the automatic native build stays correct
while the threads run (issue 19)."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import rvm
from rvm import native

LOOP = """
inout x: float = 0.5
inout w: float = 1.5
inout n: int = 25000
output y: float
func main() {
    for k in 0..n {
        y += x * w
        x += y * 1e-9
    }
}
"""


def inputs(i: int, n: int) -> dict:
    return {"x": 0.25 + i / 64, "w": 1.0 + i / 32, "n": n}


def serial(prog, calls, **kw) -> list[dict]:
    f = rvm.grad_fn(prog, of="y", wrt="x,w", native=False, **kw)
    return [f(v) for v in calls]


def shared(f, calls, threads: int = 4) -> list[dict]:
    start = threading.Barrier(threads)

    def work(k: int) -> list[tuple[int, dict]]:
        start.wait()
        return [(i, f(calls[i])) for i in range(k, len(calls), threads)]

    with ThreadPoolExecutor(threads) as pool:
        done = [r for part in pool.map(work, range(threads)) for r in part]
    return [g for _, g in sorted(done, key=lambda r: r[0])]


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def prog():
    return rvm.assemble(LOOP)


def test_threads_sharing_one_interpreted_grad_fn_get_the_serial_gradients(prog):
    calls = [inputs(i, 25000) for i in range(60)]
    f = rvm.grad_fn(prog, of="y", wrt="x,w", native=False)
    assert same(shared(f, calls), serial(prog, calls))
    assert f.native.startswith("off")


def test_each_thread_reads_its_own_last_call(prog):
    f = rvm.grad_fn(prog, of="y", wrt="x,w", native=False)
    got: dict[int, float] = {}

    def work(i: int) -> None:
        f(inputs(i, 100))
        got[i] = f.last.value

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = {i: rvm.derivatives(prog, of="y", wrt="x", inputs=inputs(i, 100)).value
            for i in range(4)}
    assert got == want


def test_threads_sharing_a_machine_take_turns(prog):
    m = rvm.Machine(prog)
    calls = [inputs(i, 5000) for i in range(24)]
    want = [rvm.grad(prog, of="y", wrt="x,w", inputs=v) for v in calls]

    def work(k: int) -> list[tuple[int, dict]]:
        return [(i, rvm.grad(prog, of="y", wrt="x,w", inputs=calls[i], machine=m))
                for i in range(k, len(calls), 4)]

    with ThreadPoolExecutor(4) as pool:
        got = sorted((r for part in pool.map(work, range(4)) for r in part), key=lambda r: r[0])
    assert same([g for _, g in got], want)


def test_the_one_shot_api_is_safe_from_threads(prog):
    calls = [inputs(i, 5000) for i in range(24)]
    want = [rvm.grad(prog, of="y", wrt="x,w", inputs=v) for v in calls]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda v: rvm.grad(prog, of="y", wrt="x,w", inputs=v),
                            calls))
    assert same(got, want)


needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


@needs_cc
def test_threads_sharing_a_native_grad_fn_past_its_gil_releasing_poll(prog, tmp_path,
                                                                       monkeypatch):
    """Runs over 2**24 steps: native code polls (and lets other threads run) on the way."""
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    calls = [inputs(i, 1_500_000) for i in range(8)]         # 6M steps a call forward
    f = rvm.grad_fn(prog, of="y", wrt="x,w", native=True)
    assert f.native.startswith("native")
    got = shared(f, calls)
    ref = rvm.grad_fn(prog, of="y", wrt="x,w", native=True)
    assert same(got, [ref(v) for v in calls])


@needs_cc
def test_the_automatic_native_build_is_correct_while_threads_call(prog, tmp_path, monkeypatch):
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    calls = [inputs(i % 16, 20000) for i in range(48)]
    want = serial(prog, calls)
    f = rvm.grad_fn(prog, of="y", wrt="x,w")                 # native after a few calls
    deadline = time.monotonic() + 300
    while True:                     # rounds before, during and after the build in a thread
        installed = f.native.startswith("native")
        assert same(shared(f, calls), want), f.native
        if installed or time.monotonic() > deadline:
            break
    assert installed, f.native
