"""Memory and speed of the reverse debugger: reverse-continue over 10^5 and 10^7 steps.

Each size runs in a fresh Python process: the debugger session runs the loop below to its end
(forward, stops off), sets a breakpoint at main's first instruction (armed in the machine's
loop, only reached at the start) and reverse-continues back to it.  The child prints its peak
RSS (ru_maxrss) before and after the reverse run and the reverse-continue rate.  Stepping
backward runs the inverse instructions and records nothing, so the peak must not grow with
the number of steps.  A third run per size times a *conditional* breakpoint inside the loop
(its condition is evaluated in Python at every hit) for comparison.

    python benchmarks/bench_debug.py [--sizes 100000 10000000]
"""
from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

PROGRAM = """
inout  n: int = 1000
inout  x: int = 0
inout  y: int = 0

func main() {
    for i in 0..n {
        x += n
        y ^= x
    }
}
"""
STEPS_PER_ITERATION = 5           # join, add, xor, inc, jmp


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB


def child(steps: int, conditional: bool) -> dict:
    import rvm
    from rvm.debug.commands import Debugger
    from rvm.debug.engine import Session

    prog = rvm.assemble(PROGRAM)
    n = max(1, steps // STEPS_PER_ITERATION)
    s = Session(prog, {"n": n})
    end = s.goto("end")
    assert end.reason == "end", end
    before = peak_rss_mib()
    dbg = Debugger.__new__(Debugger)       # only to resolve the location text
    dbg.s = s
    if conditional:
        _, pcs = Debugger.resolve_location(dbg, "8")          # `y ^= x`, every iteration
        s.add_breakpoint("8", pcs, condition="i == -1")       # never true
    else:
        f = prog.function_named("main")
        s.add_breakpoint("main", [f.begin + 1])
    t0 = time.perf_counter()
    stop = s.run(-1)
    dt = time.perf_counter() - t0
    assert stop.t <= 1 and s.m.read("x") == 0, stop
    return {"steps": end.t - stop.t, "seconds": dt, "steps_per_s": (end.t - stop.t) / dt,
            "rss_before_mib": before, "peak_rss_mib": peak_rss_mib()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10 ** 5, 10 ** 7])
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--conditional", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.conditional)))
        return
    print(f"{'steps':>10}  {'breakpoint':<22} {'peak RSS':>10} {'(before)':>9} "
          f"{'steps/s':>12} {'time':>10}")
    for size in a.sizes:
        for conditional in (False, True):
            if conditional and size > 10 ** 6:
                continue               # Python evaluates the condition per hit: slow, and it
                                       # does not change the memory story
            cmd = [sys.executable, __file__, "--child", str(size)] + \
                (["--conditional"] if conditional else [])
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                          cwd=ROOT).stdout)
            kind = "conditional, in loop" if conditional else "at main (not hit)"
            print(f"{r['steps']:>10}  {kind:<22} {r['peak_rss_mib']:>7.1f} MiB "
                  f"{r['rss_before_mib']:>6.1f} MiB {r['steps_per_s']:>12.3g} "
                  f"{r['seconds'] * 1000:>7.1f} ms")


if __name__ == "__main__":
    main()
