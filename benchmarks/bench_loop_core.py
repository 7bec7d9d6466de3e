"""Quick timing of the core loop on a hand-built program (no assembler needed).

    join top <- back if i != 0 ; x += one ; inc i ; jmp back -> top if i < n

4 instructions per iteration; prints ns/instruction (median of --repeat runs) for add.i and
add.x.  The official benchmark is benchmarks/bench_loop.py.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from builder import ProgramBuilder  # noqa: E402

from isa.types import FIXED, INT  # noqa: E402
from rvm.machine import Machine  # noqa: E402


def loop_program(t, add: str):
    pb = ProgramBuilder()
    n = pb.input("n", INT)
    x = pb.inout("x", t)
    zero = pb.const("zero", INT, 0)
    one = pb.const("one", t, 1 if t == INT else 1 << 32)
    f = pb.func("main")
    i = f.local("i", INT)
    f.join("top", came_from="back", cond=("!=", INT, i, zero))
    f.op(add, x, one)
    f.op("inc.i", i)
    f.jmp("back", to="top", cond=("<", INT, i, n))
    f.op("sub.i", i, n)            # i == n here: uncompute the local so it ends zero
    return pb.build()


def bench(t, add: str, n: int, repeat: int) -> float:
    m = Machine(loop_program(t, add))
    times = []
    for _ in range(repeat + 1):
        m.reset({"n": n})
        t0 = time.perf_counter()
        m.run()
        times.append(time.perf_counter() - t0)
        steps = m.stats["steps"]
        assert m.read_raw("x") == n * (1 if t == INT else 1 << 32)
    return statistics.median(times[1:]) * 1e9 / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    for t, add in ((INT, "add.i"), (FIXED, "add.x")):
        print(f"{add}: {bench(t, add, a.n, a.repeat):.2f} ns/instruction")


if __name__ == "__main__":
    main()
