"""Issue 16's figures that benchmarks/peers.py does not print: the flat call's overhead, the
one-shot calls' cost, batch speed-up over threads, and the memory of native forward runs
against run length (T3 for forward runs).  Ratios come from one process run; on a shared
machine say so.

    python benchmarks/bench_native_runs.py [--quick]

* flat overhead: f.flat(x, out) per call minus the native gradient's own time per row (the
  same gradient, measured as Core.grad_rows' time per row on one thread, no Python per row);
* one-shot: rvm.run(prog, {"z": 3.0}) and rvm.hessian(...) on T2's program, repeated;
* batch: f.batch of 10^4 Petersen gradients on 1 thread and on every core;
* memory: peak RSS growth of one native forward run of programs/accumulate.rasm at n = 10^5
  .. 10^8 (fresh processes).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rvm  # noqa: E402
from rvm.api import batch_words, split_batch  # noqa: E402


def best(fn, n: int, repeat: int) -> float:
    """Seconds per call: the median of `repeat` samples of n calls (after a warm-up)."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


def flat_overhead(repeat: int) -> dict:
    prog = rvm.assemble(str(ROOT / "programs/besselj_rec.rasm"))
    f = rvm.grad_fn(prog, of="out", wrt="z", native=True)
    x, out, d = np.array([3.0]), np.empty(1), {"z": 3.0}
    f(d)
    flat = best(lambda: f.flat(x, out), 20000, repeat)
    dict_call = best(lambda: f(d), 20000, repeat)
    B = 100_000
    r = f._batch_runner(0)
    rows, shared, _ = split_batch(prog, {"z": np.full(B, 3.0)})
    ia, dw, ra, rw = batch_words(r.m, rows, shared, B)
    g, loss, st = np.zeros((B, 1)), np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
    wa, ex = r._fast_args()[3], r._exact_addrs()
    per_row = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r.core.grad_rows(r.of.addr, ia, dw, ra, rw, wa, g, loss, st, ex)
        per_row.append((time.perf_counter() - t0) / B)
    native = statistics.median(per_row)
    return {"flat_s": flat, "dict_s": dict_call, "native_row_s": native,
            "flat_overhead_s": flat - native, "dict_overhead_s": dict_call - native}


def one_shot(repeat: int) -> dict:
    prog = rvm.assemble(str(ROOT / "programs/besselj_rec.rasm"))
    run = best(lambda: rvm.run(prog, {"z": 3.0}), 2000, repeat)
    hess = best(lambda: rvm.hessian(prog, of="out", wrt=["z"], inputs={"z": 3.0}), 1000,
                repeat)
    # a copy of the Program has none of what the calls built (as every call was before)
    fresh = best(lambda: rvm.run(copy.copy(prog), {"z": 3.0}), 20, repeat)
    return {"run_s": run, "hessian_s": hess, "run_fresh_program_s": fresh}


def batch(b: int, repeat: int) -> dict:
    prog = rvm.assemble(str(ROOT / "programs/petersen.rasm"))
    f = rvm.grad_fn(prog, of="loss", wrt="x", native=True)
    X = np.random.default_rng(0).standard_normal((b, 40))
    f.batch({"x": X[:64]})
    out = {}
    for threads in (1, os.cpu_count() or 1):
        out[f"threads_{threads}_s_per_row"] = best(
            lambda t=threads: f.batch({"x": X}, threads=t), 1, repeat) / b
    rows = list(X)
    out["loop_s_per_row"] = best(lambda: [f({"x": x}) for x in rows], 1, repeat) / b
    return out


CHILD = """
import resource, sys, rvm
prog = rvm.assemble(sys.argv[1])
m = rvm.Machine(prog, native=True)
m.reset({"n": 10}); m.run()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
m.reset({"n": int(sys.argv[2])}); m.run()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024, m.stats["steps"], m.core.native_runs)
"""


def memory(ns: list[int]) -> dict:
    out = {}
    for n in ns:
        r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "programs/accumulate.rasm"),
                            str(n)], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        growth, steps, runs = r.stdout.split()
        out[f"n={n}"] = {"rss_growth_bytes": int(growth), "steps": int(steps),
                         "native_runs": int(runs)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    repeat = 3 if a.quick else 7
    res = {"loadavg": os.getloadavg(), "flat": flat_overhead(repeat), "one_shot": one_shot(repeat),
           "batch": batch(2000 if a.quick else 10_000, repeat),
           "memory": memory([10**5, 10**6] if a.quick else [10**5, 10**6, 10**7, 10**8])}
    fl, bt = res["flat"], res["batch"]
    cores = os.cpu_count() or 1
    print(f"load average {res['loadavg']}")
    print(f"flat call {fl['flat_s'] * 1e9:.0f} ns, dict call {fl['dict_s'] * 1e9:.0f} ns, native "
          f"gradient per row {fl['native_row_s'] * 1e9:.0f} ns: overhead flat "
          f"{fl['flat_overhead_s'] * 1e9:.0f} ns, dict {fl['dict_overhead_s'] * 1e9:.0f} ns "
          f"(target flat < 300 ns)")
    os_ = res["one_shot"]
    print(f"rvm.run(prog, {{'z': 3.0}}) {os_['run_s'] * 1e6:.2f} µs (a new Program each call: "
          f"{os_['run_fresh_program_s'] * 1e6:.0f} µs), rvm.hessian {os_['hessian_s'] * 1e6:.2f} µs")
    one, all_ = bt["threads_1_s_per_row"], bt[f"threads_{cores}_s_per_row"]
    print(f"batch of Petersen gradients: 1 thread {one * 1e6:.2f} µs/row, {cores} threads "
          f"{all_ * 1e6:.2f} µs/row (speed-up {one / all_:.2f}x), loop of f() "
          f"{bt['loop_s_per_row'] * 1e6:.2f} µs/row")
    for k, v in res["memory"].items():
        print(f"forward run {k}: {v['steps']:,} steps, peak RSS growth "
              f"{v['rss_growth_bytes'] / 2**20:.1f} MiB, native runs {v['native_runs']}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
