"""The flat calls' overhead (issue 16, item 4): the time per call that is not the program's
own native passes, for `f.flat(x, out)`, `f.hvp_flat(x, v, out)`, `f.jvp_flat(x, v)` and
`rvm.run_fn(...).flat(x, out)`, on programs whose passes are nearly empty: `scalar` (one
float update, `y += x * x`, a scalar wrt) and `cells40` (the same update over two cells of
a 40-cell wrt, as programs/petersen.rasm's x: the per-cell part), and petersen.rasm itself
for scale.

    python benchmarks/bench_flat_overhead.py [--calls 100000] [--repeat 9] [--callgrind]

Wall time: the best of `repeat` loops of `calls` calls (`for _ in r: f.flat(x, out)`), in
ns per call, beside the same loop calling a two-argument builtin (`operator.is_`: the
loop's own cost). On a shared machine say the load (printed, from os.getloadavg).
With --callgrind (where valgrind is on the PATH): each call kind again under
`valgrind --tool=callgrind`, 10^4 calls after warm-up, collected only inside them
(`deque(map(...), maxlen=0)`, --toggle-collect=consume_iterator), and the instructions
per call split into the generated code (the native library), libm, and the call path
(everything else: Python's vectorcall, argument parsing, copying x in and the result out,
the resets and checks); the harness's own cost (`operator.is_` through the same map) is
printed beside it.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from itertools import repeat
from operator import is_
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

import rvm  # noqa: E402

SCALAR = """
inout  x: float = 1.5
output y: float
func main() {
    y += x * x
}
"""

CELLS40 = """
inout  x: float[40] = [%s]
output y: float
func main() {
    y += x[0] * x[1]
}
""" % ", ".join(f"{0.25 * k + 0.5}" for k in range(40))

KINDS = ("flat", "hvp_flat", "jvp_flat", "run_fn")
PROGRAMS = ("scalar", "cells40", "petersen")


def setup(program: str, kind: str):
    """(the call, its arguments): the call made native and warmed up."""
    prog = rvm.assemble(ROOT.parent / "programs" / "petersen.rasm" if program == "petersen"
                        else {"scalar": SCALAR, "cells40": CELLS40}[program])
    of = "loss" if program == "petersen" else "y"
    if kind == "run_fn":
        f = rvm.run_fn(prog, ["x"], [of], native=True)
        n = len(f.input_cells)
        x = np.linspace(-1.0, 1.0, n) if program == "petersen" else np.full(n, 1.25)
        out = np.empty(1)
        args: tuple = (x, out)
        call = f.flat
    else:
        g = rvm.grad_fn(prog, of=of, wrt="x", native=True)
        n = len(g.wrt_cells)
        x = np.linspace(-1.0, 1.0, n) if program == "petersen" else np.full(n, 1.25)
        v = np.ones(n)
        out = np.empty(n)
        if kind == "flat":
            g.compile()
            args, call = (x, out), g.flat
        elif kind == "hvp_flat":
            args, call = (x, v, out), g.hvp_flat
        else:
            args, call = (x, v), g.jvp_flat
    for _ in range(200):
        r = call(*args)
    assert r is not None
    # fetched again, as a loop `f.flat(x, out)` fetches it: after the first native call a
    # RunFn's flat is the C method itself
    return getattr(call.__self__, call.__name__), args


def wall(program: str, kind: str, calls: int, repeat_: int) -> float:
    call, args = setup(program, kind)
    r = range(calls)
    best = float("inf")
    for _ in range(repeat_):
        if len(args) == 2:
            a, b = args
            t0 = time.perf_counter_ns()
            for _ in r:
                call(a, b)
        else:
            a, b, c = args
            t0 = time.perf_counter_ns()
            for _ in r:
                call(a, b, c)
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best


def loop_cost(calls: int, repeat_: int) -> float:
    a, b = np.zeros(1), np.zeros(1)
    r = range(calls)
    best = float("inf")
    for _ in range(repeat_):
        t0 = time.perf_counter_ns()
        for _ in r:
            is_(a, b)
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best


def child(program: str, kind: str, calls: int) -> None:
    """Under callgrind: the calls, collected inside consume_iterator only."""
    if kind == "harness":
        call, args = is_, (np.zeros(1), np.zeros(1))
    else:
        call, args = setup(program, kind)
    deque(map(call, *(repeat(a, calls) for a in args)), maxlen=0)


def callgrind(program: str, kind: str, calls: int) -> dict[str, float]:
    """Instructions per call: generated code, libm, the call path, and the total."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--collect-atstart=no", "--toggle-collect=consume_iterator",
                        sys.executable, __file__, "--child", program, kind, str(calls)],
                       check=True, capture_output=True)
        text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100",
                               "--show-percs=no", "--auto=no", str(out)], check=True,
                              capture_output=True, text=True).stdout
    parts = {"native": 0, "libm": 0, "path": 0}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
        if not m or ":" not in m.group(2) or "PROGRAM TOTALS" in line:
            continue
        ir, where = int(m.group(1).replace(",", "")), m.group(2)
        obj = where.rsplit("[", 1)[-1] if "[" in where else ""
        if "rvm_native" in where or "/native/" in obj or re.search(r"rvm_[0-9a-f]{8,}", obj):
            parts["native"] += ir
        elif "libm" in obj or "libm." in where:
            parts["libm"] += ir
        else:
            parts["path"] += ir
    res = {k: v / calls for k, v in parts.items()}
    res["total"] = sum(res.values())
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--callgrind", action="store_true", help="also count instructions")
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child[0], a.child[1], int(a.child[2]))
        return
    programs = a.programs.split(",")
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"the loop alone (operator.is_(x, out)): {loop_cost(a.calls, a.repeat):.0f} ns")
    for p in programs:
        for k in KINDS:
            print(f"{p:9} {k:9} {wall(p, k, a.calls, a.repeat):7.0f} ns per call "
                  f"(best of {a.repeat} x {a.calls})", flush=True)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if not a.callgrind:
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("valgrind not found: no instruction counts")
        return
    calls = 10_000
    h = callgrind("scalar", "harness", calls)
    print(f"instructions per call (callgrind, {calls} calls after warm-up); the harness "
          f"(operator.is_ through map) alone: {h['total']:.0f}")
    for p in programs:
        for k in KINDS:
            c = callgrind(p, k, calls)
            print(f"{p:9} {k:9} total {c['total']:7.0f}  generated code {c['native']:6.0f}  "
                  f"libm {c['libm']:5.0f}  call path {c['path']:6.0f}", flush=True)


if __name__ == "__main__":
    main()
