"""Overhead of rvm.interop.jax_function (issue 17): a jitted JAX call of the rvm gradient of
besselj_rec.rasm (benchmarks/peers T2) against the bare GradFn call, and JAX's own
pure_callback overhead measured on an empty callback.

    python benchmarks/bench_interop.py            # medians of --repeat runs of --calls calls

Prints per-call times, the acceptance target 2 * grad_fn + empty pure_callback and the ratio
of jit(grad(f)) to it (at most 1 meets it), for the XLA FFI call jax_function uses and for
its jax.pure_callback fallback (ffi=False).
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
    ap.add_argument("--batch", type=int, default=10000, help="points of the vmap rows")
    a = ap.parse_args()
    native = {"auto": None, "on": True, "off": False}[a.native]
    prog = rvm.assemble(ROOT / "programs" / "besselj_rec.rasm")

    gf = rvm.grad_fn(prog, of="out", wrt=["z"], native=native)
    inputs = {"z": 3.0}
    for _ in range(50):
        gf(inputs)

    f = jax_function(prog, of="out", wrt=["z"], native=native)
    fcb = jax_function(prog, of="out", wrt=["z"], native=native, ffi=False)
    z = jnp.float64(3.0)
    jf, jg, jvg, jcb = (jax.jit(f), jax.jit(jax.grad(f)), jax.jit(jax.value_and_grad(f)),
                        jax.jit(jax.grad(fcb)))
    want = gf(inputs)["z"]
    for fn in (jg, jcb):
        assert float(fn(z)) == want
    assert float(jvg(z)[1]) == want

    def empty_cb(x):
        return np.float64(0.0)

    @jax.jit
    def empty(x):
        return jax.pure_callback(empty_cb, jax.ShapeDtypeStruct((), jnp.float64), x)

    assert float(jf(z)) == rvm.run(prog, inputs).outputs["out"]
    fns = {"bare": lambda: gf(inputs),
           "value": lambda: jf(z).block_until_ready(),
           "jitted": lambda: jg(z).block_until_ready(),
           "value_and_grad": lambda: jax.block_until_ready(jvg(z)),
           "callback": lambda: jcb(z).block_until_ready(),
           "empty": lambda: empty(z).block_until_ready()}
    if f.mechanism.startswith("XLA FFI"):
        from rvm.interop import jax_ffi

        def nothing_host(x):
            return (0.0,)
        key = np.int64(jax_ffi.register(nothing_host))
        call = jax.ffi.ffi_call(jax_ffi.target(), jax.ShapeDtypeStruct((), jnp.float64))
        empty_ffi = jax.jit(lambda x: call(x, key=key))
        fns["empty_ffi"] = lambda: empty_ffi(z).block_until_ready()
    base = jax.jit(lambda x: x * 2.0)
    fns["base"] = lambda: base(z).block_until_ready()
    for fn in fns.values():
        for _ in range(50):
            fn()
    t = measure(fns, a.calls, a.repeat)

    def row(what: str, key: str) -> None:
        if key in t:
            print(f"  {what:44s} {t[key][0] * 1e6:8.2f} us  {t[key][1] * 1e6:8.2f} us")

    print(f"besselj_rec.rasm, J_2'(3): grad_fn {gf.native}; jax_function: {f.mechanism}")
    print(f"  {'per call':44s} {'minimum':>11s}  {'median':>11s}")
    row("bare grad_fn call", "bare")
    row("jax.jit(f)", "value")
    row("jax.jit(jax.grad(f))", "jitted")
    row("jax.jit(jax.value_and_grad(f))", "value_and_grad")
    row("jax.jit(jax.grad(f)), pure_callback fallback", "callback")
    row("jitted empty pure_callback", "empty")
    row("jitted FFI call of an empty host function", "empty_ffi")
    row("jitted x * 2 (no host call)", "base")
    # a batch: jit(vmap(grad f)) against rvm's batch mode and a loop of grad_fn calls
    zs = np.linspace(0.5, 3.0, a.batch)
    jvm = jax.jit(jax.vmap(jax.grad(f)))
    assert np.array_equal(jvm(zs), gf.batch({"z": zs})["z"])
    tb = measure({"vmap": lambda: jvm(zs).block_until_ready(),
                  "batch": lambda: gf.batch({"z": zs}),
                  "loop": lambda: [gf({"z": z}) for z in zs.tolist()]}, 3, a.repeat)

    def brow(what: str, key: str) -> None:
        print(f"  {what:44s} {tb[key][0] * 1e9 / a.batch:8.1f} ns  "
              f"{tb[key][1] * 1e9 / a.batch:8.1f} ns")
    print(f"  a batch of {a.batch} points, per point")
    brow("jax.jit(jax.vmap(jax.grad(f)))", "vmap")
    brow("grad_fn.batch (rvm's batch mode)", "batch")
    brow("a loop of grad_fn calls", "loop")
    for k, label in ((0, "minimum"), (1, "median")):
        bare, cb = t["bare"][k], t["empty"][k]
        target = 2 * bare + cb
        print(f"  {label}: target 2 * grad_fn + empty callback = {target * 1e6:.1f} us; "
              f"jit(grad(f)) / target = {t['jitted'][k] / target:.2f} (FFI), "
              f"{t['callback'][k] / target:.2f} (pure_callback); "
              f"(jit(grad(f)) - jitted x * 2) / grad_fn = "
              f"{(t['jitted'][k] - t['base'][k]) / bare:.2f}")


if __name__ == "__main__":
    main()
