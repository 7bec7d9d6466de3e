"""rvm.run_batch with its lane library against without (issue 16): forward runs of
programs/petersen.rasm at B random points (T6's, benchmarks/bench_batch_lanes.py), then the
backward runs from their ends, in one process, lanes on and off alternately
(RVM_NATIVE_LANES), wall time of the whole public call.

    python benchmarks/bench_run_batch_lanes.py [--rows 10000] [--repeat 7] [--threads 1]

Prints the best and median times and the ratio; every result is checked bit for bit against
the lanes-off one.  On a shared machine say the load (uptime): the ratio is the figure.
"""
from __future__ import annotations

import argparse
import os
import statistics
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="run_batch's threads (default: "
                    "the cores)")
    a = ap.parse_args(argv)
    prog = rvm.assemble(ROOT.parent / "programs" / "petersen.rasm")
    X = np.random.default_rng(6).standard_normal((a.rows, 40))
    print("forward lanes:", rvm.compile_run_batch(prog))
    print("backward lanes:", rvm.compile_run_batch(prog, reverse=True))
    ends = rvm.run_batch(prog, {"x": X})
    cases = {"forward": ({"x": X}, False), "backward": (ends, True)}
    for name, (values, reverse) in cases.items():
        times: dict[str, list[float]] = {"lanes": [], "no lanes": []}
        want = None
        for _ in range(a.repeat):
            for how in ("no lanes", "lanes"):
                os.environ["RVM_NATIVE_LANES"] = "0" if how == "no lanes" else "1"
                t0 = time.perf_counter()
                got = rvm.run_batch(prog, values, reverse=reverse, threads=a.threads)
                times[how].append(time.perf_counter() - t0)
                if want is None:
                    want = got
                assert all(got[k].tobytes() == want[k].tobytes() for k in want), how
        best = {k: min(v) for k, v in times.items()}
        print(f"{name} B={a.rows} threads={a.threads or 'cores'}: " + ", ".join(
            f"{k} best {best[k] * 1e3:.1f} ms median {statistics.median(v) * 1e3:.1f} ms"
            for k, v in times.items()) + f"; {best['no lanes'] / best['lanes']:.2f}x")
    os.environ.pop("RVM_NATIVE_LANES", None)
    print("load:", os.getloadavg())


if __name__ == "__main__":
    main()
