"""Gradient cost against the forward run, and the memory of the adjoint sweep (issue 3).

    python benchmarks/bench_ad.py            # ratios + peak RSS at n = 10^3 and 10^7 (gradient,
                                             # tangent and Hessian modes)
    python benchmarks/bench_ad.py --quick    # smaller n, fewer repeats

For each task: the forward run alone (values only) and the gradient (forward run + adjoint
sweep back to the start, check_ancillas off, and on), both through one reused Machine,
interleaved, median of the repeats.  The machine is noisy: read the ratios, which are measured
side by side.  Peak RSS of the accumulate loop's gradient is measured in fresh processes, one
per n.  Not part of the test suite.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import rvm  # noqa: E402


def tasks(quick: bool) -> list[tuple[str, object, dict, str, list[str]]]:
    out = [("accumulate n=10^6" if not quick else "accumulate n=10^5",
            ROOT / "programs" / "accumulate.rasm", {"n": 10**5 if quick else 10**6}, "x",
            ["x", "one"])]
    bessel = ROOT / "programs" / "besselj.rasm"
    if bessel.exists():
        out.append(("Bessel J_2(3)", bessel, {"z": 3.0}, "out", ["z"]))
    try:
        from gen_programs import umm
        out.append(("umm N=100", rvm.assemble(umm(100)), {}, "loss", ["x", "theta"]))
    except ImportError:
        print("umm: benchmarks/gen_programs.py not found, skipped", file=sys.stderr)
    return out


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ratios(quick: bool) -> None:
    print(f"{'task':<22}{'forward':>12}{'gradient':>12}{'ratio':>8}{'+ancilla check':>16}{'ratio':>8}")
    for name, src, inputs, of, wrt in tasks(quick):
        prog = src if isinstance(src, rvm.Program) else rvm.assemble(src)
        m = rvm.Machine(prog)

        def forward(m=m, inputs=inputs):
            m.core.set_ad(0)
            m.reset(inputs)
            m.run()

        def gradient(prog=prog, of=of, wrt=wrt, inputs=inputs, m=m):
            rvm.derivatives(prog, of, wrt, inputs, check_ancillas=False, machine=m)

        def checked(prog=prog, of=of, wrt=wrt, inputs=inputs, m=m):
            rvm.derivatives(prog, of, wrt, inputs, check_ancillas=True, machine=m)

        for f in (forward, gradient, checked):      # warm-up
            f()
        reps = 3 if quick else 7
        fw, gr, ck = [], [], []
        for _ in range(reps):                        # interleaved: same machine load for all
            fw.append(median_time(forward, 1))
            gr.append(median_time(gradient, 1))
            ck.append(median_time(checked, 1))
        f, g, c = (statistics.median(x) for x in (fw, gr, ck))
        print(f"{name:<22}{f * 1e3:>10.3f}ms{g * 1e3:>10.3f}ms{g / f:>8.2f}"
              f"{c * 1e3:>14.3f}ms{c / f:>8.2f}")


RSS_SCRIPT = """
import resource, sys
import numpy as np
import rvm
n, prog, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if mode == "gradient":
    g = rvm.grad(prog, of="x", wrt=["x", "one"], inputs={"n": n}, check_ancillas=False)
    assert g["one"] == n, g
elif mode == "tangent":                          # rvm.jvp, native code
    t = rvm.jvp(prog, {"n": n}, {"x": 0.0, "one": 1.0}, native=True)
    assert t["x"] == n, t
else:                                            # the full Hessian, native code
    h = rvm.hessian(prog, of="x", wrt=["x", "one"], inputs={"n": n}, native=True)
    assert not h.any(), h
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def rss(ns: list[int]) -> None:
    prog = str(ROOT / "programs" / "accumulate.rasm")
    for mode in ("gradient", "tangent", "hessian"):
        print(f"\npeak RSS of the accumulate {mode}, each n in a fresh process:")
        figures = []
        for n in ns:
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(n), prog, mode],
                                 check=True, capture_output=True, text=True, cwd=ROOT).stdout
            kib = int(out.split()[-1])
            figures.append(kib)
            print(f"  n = {n:>10,}: {kib / 1024:8.1f} MiB   ({time.perf_counter() - t0:.1f} s)")
        print(f"  difference: {(figures[-1] - figures[0]) / 1024:+.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    ap.add_argument("--no-rss", action="store_true", help="skip the fresh-process RSS runs")
    a = ap.parse_args()
    ratios(a.quick)
    if not a.no_rss:
        rss([10**3, 10**6] if a.quick else [10**3, 10**7])


if __name__ == "__main__":
    main()
