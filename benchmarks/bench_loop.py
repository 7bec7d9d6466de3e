"""Interpreter speed on the accumulate loop `for i in 0..n { x += one }`.

Runs the same loop in rvm, in plain Python and in C compiled with -O2 (an empty asm barrier
keeps gcc from folding the loop into x += n*one), in one process run, and prints nanoseconds per
loop iteration, nanoseconds per rvm instruction, and the ratios.  Targets (issue 2): an rvm
instruction costs at most 5 ns; rvm is at least 20x faster than plain Python on this loop.

    python benchmarks/bench_loop.py [--n 1000000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os

# numpy's OpenBLAS threads spin at import and steal one of the two cores from the timed loop
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import rvm  # noqa: E402

PROGRAM = """
input  n: int = 1000
inout  x: int = 0
const  one: int = 1

func main() {
    for i in 0..n {
        x += one
    }
}
"""

C_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]), one = atol(argv[2]), x = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        x += one;
        __asm__ volatile("" : "+r"(x));   /* keep one real add per iteration */
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%ld %.9f\n", x, (b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec));
    return 0;
}
"""


def median_time(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_rvm(n: int, repeat: int) -> tuple[float, int]:
    prog = rvm.assemble(PROGRAM)
    m = rvm.Machine(prog)
    steps = 0

    def once():
        nonlocal steps
        m.reset({"n": n, "x": 0})
        m.run()
        assert m.read("x") == n
        steps = m.stats["steps"]

    return median_time(once, repeat), steps


def bench_python(n: int, repeat: int) -> float:
    def once():
        x, one = 0, 1
        for _ in range(n):
            x += one
        assert x == n

    return median_time(once, repeat)


def bench_c(n: int, repeat: int) -> float | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "loop.c"), os.path.join(d, "loop")
        with open(src, "w") as fh:
            fh.write(C_SOURCE)
        subprocess.run([cc, "-O2", src, "-o", exe], check=True)
        times = []
        for _ in range(repeat + 1):
            out = subprocess.run([exe, str(n), "1"], check=True, capture_output=True, text=True)
            x, t = out.stdout.split()
            assert int(x) == n
            times.append(float(t))
        return statistics.median(times[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    t_rvm, steps = bench_rvm(a.n, a.repeat)
    t_py = bench_python(a.n, a.repeat)
    t_c = bench_c(a.n, a.repeat)
    per_iter = steps / a.n
    print(f"accumulate loop, n = {a.n:,}, median of {a.repeat} runs")
    print(f"  rvm     {t_rvm * 1e9 / a.n:8.2f} ns/iteration  ({per_iter:.1f} instructions/iteration, "
          f"{t_rvm * 1e9 / steps:.2f} ns/instruction)")
    print(f"  python  {t_py * 1e9 / a.n:8.2f} ns/iteration")
    if t_c is not None:
        print(f"  C -O2   {t_c * 1e9 / a.n:8.2f} ns/iteration")
    print("ratios")
    print(f"  python / rvm         {t_py / t_rvm:8.1f}x   (target >= 20x)")
    if t_c is not None:
        print(f"  rvm / C              {t_rvm / t_c:8.1f}x")
    print(f"  ns per rvm instruction {t_rvm * 1e9 / steps:6.2f}   (target <= 5 ns)")


if __name__ == "__main__":
    main()
