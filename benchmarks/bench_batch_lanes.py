"""T6's lane code against C's loop, in one process, and lane libraries against each other: the
gradients of programs/petersen.rasm at B random points on one thread, by Core.grad_rows' lane
path (LaneRows: no Python per row, no batch encoding), CPU time of the calling thread.

    python benchmarks/bench_batch_lanes.py [--rows 10000] [--repeat 7] [--threads] [old.c ...]

Each old.c is a lane library's C (as rvm/native/lanes.py generates it, saved from an older
checkout) timed beside this checkout's, alternately, so that the machine's load falls on both
alike; every library's gradients are checked bit for bit against the first's.  Prints the
best and median times and the ratios to the C loop of benchmarks/peers (t6_grad_points, one
thread).  With --threads, also the public f.batch with threads=1 and threads=2, alternately
(wall time: T6's second-core speed-up; it needs the second core free, so say the load).  On a
shared machine say so: the ratios are the figures to compare.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from peers.common import set_thread_env  # noqa: E402

set_thread_env()

import rvm  # noqa: E402
from rvm import _core  # noqa: E402
from rvm.api import batch_words, split_batch  # noqa: E402
from rvm.native import lanes  # noqa: E402
from rvm.native.build import build  # noqa: E402


def lane_rows(source: str) -> _core.LaneRows:
    lib, _path, _built = build(source, for_cpu=True, extra=lanes.FLAGS)
    fw, bw = (ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
              for n in ("rvm_native_forward_w", "rvm_native_backward_wa"))
    return _core.LaneRows(lib, fw, bw, lib.rvm_lanes_width())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", action="store_true",
                    help="also time f.batch on 1 and 2 threads (the second core's speed-up)")
    ap.add_argument("old", nargs="*", type=Path, help="lane C sources to compare")
    a = ap.parse_args(argv)
    prog = rvm.assemble(ROOT.parent / "programs" / "petersen.rasm")
    B = a.rows
    X = np.random.default_rng(6).standard_normal((B, 40))
    f = rvm.grad_fn(prog, of="loss", wrt="x")
    f.compile()
    f({"x": X[0]})
    r = f._batch_runner(0)
    rows_, shared, _ = split_batch(prog, {"x": X})
    in_addrs, def_words, row_addrs, rows = batch_words(r.m, rows_, shared, B)
    wrt_addrs, exact, of = r._fast_args()[3], r._exact_addrs(), r.of.addr
    libs = {"this checkout": lane_rows(lanes.generate(prog))}
    for p in a.old:
        libs[p.name] = lane_rows(p.read_text())

    def run(lr: _core.LaneRows) -> tuple[float, np.ndarray, int]:
        out = np.full((B, 40), np.nan)
        loss, status = np.zeros(B, np.int64), np.ones(B, np.int64)
        t0 = time.thread_time()
        lr.grad_rows(r.core, of, in_addrs, def_words, row_addrs, rows, wrt_addrs, out, loss,
                     status, exact)
        return time.thread_time() - t0, out, int(status.sum())

    first = None
    for name, lr in libs.items():
        _, out, handed = run(lr)
        same = first is None or out.tobytes() == first.tobytes()
        first = out if first is None else first
        print(f"{name}: {lr.groups} groups, {lr.bails} given up, {handed} rows handed back, "
              f"gradients {'bit for bit the first' if same else 'DIFFER from the first'}")
    from peers import t6_batch
    c = t6_batch.c_impl(B)
    assert c.grad_loop is not None
    times: dict[str, list[float]] = {name: [] for name in libs}
    times["C loop"] = []
    for _ in range(a.repeat):
        for name, lr in libs.items():
            times[name].append(run(lr)[0])
        t0 = time.thread_time()
        c.grad_loop(1)
        times["C loop"].append(time.thread_time() - t0)
    c_best = min(times["C loop"])
    for name, ts in times.items():
        ts.sort()
        print(f"{name:>16}: best {ts[0] * 1e3:7.2f} ms  median {ts[len(ts) // 2] * 1e3:7.2f} ms"
              f"  best / C {ts[0] / c_best:5.2f}x")
    if a.threads:
        f.compile_batch()
        wall: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(a.repeat):
            for k in wall:
                t0 = time.perf_counter()
                f.batch({"x": X}, threads=k)
                wall[k].append(time.perf_counter() - t0)
        for k, ts in wall.items():
            ts.sort()
            print(f"f.batch threads={k}: best {ts[0] * 1e3:7.2f} ms  "
                  f"median {ts[len(ts) // 2] * 1e3:7.2f} ms")
        print(f"second core: best {min(wall[1]) / min(wall[2]):.2f}x, "
              f"median {sorted(wall[1])[a.repeat // 2] / sorted(wall[2])[a.repeat // 2]:.2f}x "
              f"(os.getloadavg: {' '.join(f'{v:.2f}' for v in os.getloadavg())})")


if __name__ == "__main__":
    main()
