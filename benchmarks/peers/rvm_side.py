"""rvm as a peer: forward runs on one Machine, gradients through rvm.grad_fn (one machine
reused per call, so per-call overhead is what a user would pay in a training loop)."""
from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import ROOT, Impl, rvm_grad_missing


@functools.cache
def program(path_or_text: str) -> Any:
    import rvm
    if "\n" in path_or_text:          # program text (e.g. from benchmarks/gen_programs.py)
        return rvm.assemble(path_or_text)
    return rvm.assemble(str(ROOT / path_or_text))


def impl(prog: Any, inputs: dict[str, Any], of: str, wrt: list[str],
         second: bool = False, forward_api: bool = False) -> Impl:
    """Forward = reset + run on one Machine, as native code (rvm/native, compiled first; a
    program it does not cover runs interpreted), or with `forward_api` the user's one-shot
    `rvm.run(prog, inputs)` (its reused machine compiled first, as it is after a few calls);
    gradient = grad_fn(inputs) (or, with `second`, the Hessian of `of` wrt the single name in
    `wrt`, returned as {name: value})."""
    import rvm
    m = rvm.Machine(prog)
    try:
        m.compile()
    except (rvm.native.Unsupported, rvm.native.BuildError):
        pass                                # m.native says why

    def forward() -> None:
        m.reset(inputs)
        m.run()

    if forward_api:
        from rvm import oneshot
        rvm.run(prog, inputs)
        try:
            oneshot.entry(prog).local.slots[("run", ())].machine.compile()
        except (rvm.native.Unsupported, rvm.native.BuildError):
            pass

        # the user's call itself, with no Python function of ours around it (as the
        # gradient's functools.partial(f, inputs) below)
        forward = functools.partial(rvm.run, prog, inputs)     # type: ignore[assignment]
        forward_flat = run_flat_call(prog, inputs)

    grad: Callable[[], dict[str, Any]] | None = None
    if not forward_api:
        forward_flat = None
    grad_loop: Callable[[int], None] | None = None
    flat: Callable[[], Any] | None = None
    f = None
    note = ""
    compile_s: float | None = None
    missing = rvm_grad_missing()
    if missing:
        note = missing
    elif second:
        if not hasattr(rvm, "hessian"):
            note = "rvm gradient: rvm.hessian not available"
        else:
            name = wrt[0]

            def grad() -> dict[str, Any]:      # as a user calls it, every time
                h = rvm.hessian(prog, of=of, wrt=wrt, inputs=inputs)
                return {name: float(h.reshape(-1)[0])}

            def grad_loop(k: int) -> None:     # timed: the user's calls in a user's loop,
                hessian = rvm.hessian          # without grad()'s conversion to a dict
                for _ in range(k):
                    hessian(prog, of=of, wrt=wrt, inputs=inputs)

            compile_s, how = build_tangent(prog, lambda: rvm.hessian(
                prog, of=of, wrt=wrt, inputs=inputs, native=True))
            note = how
    else:
        # the native code (rvm/native) is built first, its time in the compile column like a
        # jit peer's; a program it does not cover stays interpreted (the note says why).  The
        # call timed is the user's: f(inputs), with no wrapper of ours around it.
        f = rvm.grad_fn(prog, of=of, wrt=wrt, native=False)
        t0 = time.perf_counter()
        try:
            f.compile()
        except (rvm.native.Unsupported, rvm.native.BuildError) as e:
            f._refuse(e)                    # f.native says why
        compile_s = time.perf_counter() - t0
        grad = functools.partial(f, inputs)
        flat = flat_call(f, inputs)
    def describe(row: Any) -> str:
        # where the forward time goes: instructions run, ns each, and the Python-side reset;
        # and whether the gradient ran as native code
        forward()
        # the steps of the run timed (the user's rvm.run has its own machine, not m)
        steps = rvm.run(prog, inputs).stats["steps"] if forward_api else m.stats["steps"]
        batches = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(50):
                m.reset(inputs)
            batches.append((time.perf_counter() - t0) / 50)
        reset_s = statistics.median(batches)
        how = f"; gradient: {f.native}" if f is not None else ""
        if forward_api:         # the whole call per instruction (its reset is in C)
            per = row.forward_s / steps * 1e9 if row.forward_s and steps else 0.0
            return (f"{steps:,} instr/run, {per:.2f} ns/instr for the whole call; forward: "
                    f"rvm.run(prog, inputs), {m.native}{how}")
        per = (row.forward_s - reset_s) / steps * 1e9 if row.forward_s and steps else 0.0
        return (f"{steps:,} instr/run, {per:.2f} ns/instr + reset {reset_s * 1e6:.1f} µs; "
                f"forward: {m.native}{how}")

    settle([forward] + [c for c in (grad, flat, forward_flat) if c is not None])
    return Impl(forward, grad, grad_loop=grad_loop, note=note, describe=describe, flat=flat,
                forward_flat=forward_flat,
                compile_s=compile_s if f is not None or second else None)


def settle(calls: list[Callable[[], Any]]) -> None:
    """Make each call a few times, as a user's loop does before it is timed, then wait for
    the native builds those calls start in the background (the tangent library after a few
    calls that check ancillas: ~5 s of gcc on both cores, which would otherwise run during
    the timing of this row and the next peers')."""
    import threading
    for call in calls:
        for _ in range(8):
            call()
    for t in threading.enumerate():
        if t.name.startswith("rvm-native") and t is not threading.current_thread():
            t.join()


def flat_call(f: Any, inputs: dict[str, Any]) -> Callable[[], Any] | None:
    """The gradient by the flat call f.flat(x, out) (x: the wrt values in f.wrt_cells order,
    every other input at its default), when it gives the dict call's gradient bit for bit at
    these inputs (not when an input other than wrt differs from its default); else None."""
    import numpy as np
    try:
        x = np.concatenate([np.atleast_1d(np.asarray(inputs[w], dtype=np.float64)).ravel()
                            for w in f.wrt])
        out = np.empty(len(f.wrt_cells))
        f.flat(x, out)
        g = f(inputs)
        want = np.concatenate([np.atleast_1d(np.asarray(g[w], dtype=np.float64)).ravel()
                               for w in f.wrt])
    except (KeyError, TypeError, ValueError):
        return None
    if want.tobytes() != out.tobytes():
        return None
    return functools.partial(f.flat, x, out)


def run_flat_call(prog: Any, inputs: dict[str, Any]) -> Callable[[], Any] | None:
    """The forward run by rvm.run_fn(prog, float inputs, float outputs).flat(x, out), compiled
    first, when it gives rvm.run's float outputs bit for bit at these inputs (not when an
    input other than the float ones differs from its default); else None."""
    import numpy as np

    import rvm
    if not hasattr(rvm, "run_fn"):
        return None
    try:
        fn = rvm.run_fn(prog, native=True)
    except (rvm.native.Unsupported, rvm.native.BuildError, ValueError):
        return None
    try:
        x = np.concatenate([np.atleast_1d(np.asarray(inputs.get(g.name, g.default),
                                                     dtype=np.float64)).ravel()
                            for g in fn._in]) if fn._in else np.empty(0)
        out = np.empty(len(fn.output_cells))
        fn.flat(x, out)
        res = rvm.run(prog, inputs).outputs
        want = np.concatenate([np.atleast_1d(np.asarray(res[g.name], dtype=np.float64)).ravel()
                               for g in fn._out])
    except (KeyError, TypeError, ValueError):
        return None
    if want.tobytes() != out.tobytes():
        return None
    return functools.partial(fn.flat, x, out)


def build_tangent(prog: Any, call: Callable[[], Any]) -> tuple[float | None, str]:
    """Build the tangent modes' native code of `prog` first (one call with native=True; its
    time goes in the compile column, like a jit peer's), so that the calls timed are the
    ones a user makes after the first few; (seconds, how the calls run)."""
    import rvm
    t0 = time.perf_counter()
    try:
        call()
    except (rvm.native.Unsupported, rvm.native.BuildError) as e:
        return None, f"interpreted: {e}"
    return time.perf_counter() - t0, "native"


def program_path(rel: str) -> Path | None:
    p = ROOT / rel
    return p if p.is_file() else None
