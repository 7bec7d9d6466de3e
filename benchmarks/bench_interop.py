"""Overhead of rvm.interop.jax_function (issue 17): a jitted JAX call of the rvm gradient of
besselj_rec.rasm (benchmarks/peers T2) against the bare GradFn call, and JAX's own
pure_callback overhead measured on an empty callback.

    python benchmarks/bench_interop.py            # medians of --repeat runs of --calls calls

Prints per-call times and the ratio (jit(grad(f)) - empty callback) / grad_fn, which the
issue's acceptance bounds by 2.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_enable_x64", True)

import rvm  # noqa: E402
from rvm.interop import jax_function  # noqa: E402


def measure(fns: dict, calls: int, repeat: int) -> dict:
    """Seconds per call of each function: the minimum and the median over `repeat` rounds,
    the functions interleaved in every round (the machine's load hits them alike)."""
    runs: dict = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            runs[k].append((time.perf_counter() - t) / calls)
    return {k: (min(v), statistics.median(v)) for k, v in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--native", choices=["auto", "on", "off"], default="on")
    a = ap.parse_args()
    native = {"auto": None, "on": True, "off": False}[a.native]
    prog = rvm.assemble(ROOT / "programs" / "besselj_rec.rasm")

    gf = rvm.grad_fn(prog, of="out", wrt=["z"], native=native)
    inputs = {"z": 3.0}
    for _ in range(50):
        gf(inputs)

    f = jax_function(prog, of="out", wrt=["z"], native=native)
    jg = jax.jit(jax.grad(f))
    z = jnp.float64(3.0)
    for _ in range(50):
        jg(z).block_until_ready()
    assert float(jg(z)) == gf(inputs)["z"]

    def empty_cb(x):
        return np.float64(0.0)

    @jax.jit
    def empty(x):
        return jax.pure_callback(empty_cb, jax.ShapeDtypeStruct((), jnp.float64), x)
    for _ in range(50):
        empty(z).block_until_ready()

    def reading_cb(x):
        return np.float64(float(np.asarray(x)))

    @jax.jit
    def reading(x):
        return jax.pure_callback(reading_cb, jax.ShapeDtypeStruct((), jnp.float64), x)
    for _ in range(50):
        reading(z).block_until_ready()

    @jax.jit
    def nothing(x):
        return x * 2.0
    for _ in range(50):
        nothing(z).block_until_ready()
    t = measure({"bare": lambda: gf(inputs), "jitted": lambda: jg(z).block_until_ready(),
                 "empty": lambda: empty(z).block_until_ready(),
                 "reading": lambda: reading(z).block_until_ready(),
                 "base": lambda: nothing(z).block_until_ready()}, a.calls, a.repeat)

    def row(what: str, key: str) -> None:
        print(f"  {what:38s} {t[key][0] * 1e6:8.2f} us  {t[key][1] * 1e6:8.2f} us")

    print(f"besselj_rec.rasm, J_2'(3): grad_fn {gf.native}")
    print(f"  {'per call':38s} {'minimum':>11s}  {'median':>11s}")
    row("bare grad_fn call", "bare")
    row("jax.jit(jax.grad(f)) call", "jitted")
    row("jitted empty pure_callback", "empty")
    row("jitted pure_callback reading its arg", "reading")
    row("jitted x * 2 (no callback)", "base")
    for k, label in ((0, "minimum"), (1, "median")):
        bare, jitted, cb = t["bare"][k], t["jitted"][k], t["empty"][k]
        print(f"  {label}: jit(grad) / grad_fn = {jitted / bare:.1f}; (jit(grad) - empty "
              f"callback) / grad_fn = {(jitted - cb) / bare:.2f} (acceptance: <= 2); "
              f"jit(grad) / empty callback = {jitted / cb:.2f}; (jit(grad) - callback reading "
              f"its argument) / grad_fn = {(jitted - t['reading'][k]) / bare:.2f}")


if __name__ == "__main__":
    main()
