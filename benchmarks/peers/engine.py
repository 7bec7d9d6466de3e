"""Run one case of a task in every peer: build, warm up, check the gradient, time, probe memory.

The reference gradient is rvm's when rvm's gradient API is there, else the C hand adjoint's;
a peer whose gradient disagrees is listed as WRONG and its time does not count.
"""
from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .common import PEERS, GradDict, Impl, Skip, compare, measure, peak_growth, peer_missing


@dataclass
class Row:
    task: str
    case: str                     # e.g. "n=10^6"
    size: float                   # the case's size parameter (n, N, ...) for charts
    peer: str
    forward_s: float | None = None
    grad_s: float | None = None
    compile_s: float | None = None   # first call minus a steady call (jit peers)
    mem_bytes: int | None = None     # peak RSS growth during one gradient call
    check: str = ""                  # "ref", "ok", "WRONG: ...", "" (no gradient)
    note: str = ""
    iterations: int | None = None    # loop iterations, for ns/iteration
    samples: int = 0
    flat_s: float | None = None      # rvm: the flat call f.flat(x, out) (issue 16), beside grad_s
    forward_flat_s: float | None = None  # rvm: rvm.run_fn(...).flat(x, out), beside forward_s
    profile: list[tuple[str, float]] = field(default_factory=list)  # (function, share of time)

    @property
    def counts(self) -> bool:
        return self.grad_s is not None and self.check in ("ref", "ok")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Ctx:
    quick: bool
    repeat: int
    min_sample: float         # seconds per timing sample
    max_call: float           # skip a peer whose projected single gradient exceeds this
    max_total: float          # time budget per (peer, case) measurement
    peers: set[str]
    log: Callable[[str], None]
    profile: bool = False     # cProfile rvm's gradient calls (where its time goes)
    history: dict[tuple[str, str], list[tuple[float, float]]] = field(default_factory=dict)


def run_case(ctx: Ctx, task: str, case: str, size: float, factories: dict[str, Callable[[], Impl]],
             *, rtol: float = 1e-9, atol: float = 1e-12, exact: GradDict | None = None,
             growth: float = 1.0, iterations: int | None = None) -> list[Row]:
    """One row per peer of `factories` (in PEERS order).  `growth` is the exponent of the cost
    in `size`, used to skip peers whose projected time from a smaller case is over budget;
    `exact` (if known) checks the reference gradient itself."""
    rows: list[Row] = []
    ref: GradDict | None = None
    for peer in PEERS:
        if peer not in factories or peer not in ctx.peers:
            continue
        row = Row(task, case, size, peer, iterations=iterations)
        rows.append(row)
        why = peer_missing(peer)
        if why:
            row.note = why
            continue
        proj = _projection(ctx.history.get((task, peer), []), size, growth)
        if proj is not None:
            if proj > ctx.max_call:
                row.note = f"skipped: one call would take ~{proj:.3g} s (limit {ctx.max_call:g} s)"
                continue
        ctx.log(f"{task} {case}: {peer}")
        try:
            impl = factories[peer]()
            ref = _run_peer(ctx, row, impl, ref, rtol, atol, exact)
        except Skip as s:
            row.note = str(s)
        except Exception as e:   # a peer failing must not stop the other peers
            row.note = f"error: {type(e).__name__}: {e}".splitlines()[0][:160]
            ctx.log(traceback.format_exc(limit=3))
        cost = row.grad_s if row.grad_s is not None else row.forward_s
        if cost is not None:
            ctx.history.setdefault((task, peer), []).append((size, cost))
    return rows


def _projection(hist: list[tuple[float, float]], size: float, growth: float) -> float | None:
    """Projected seconds per call at `size` from the peer's smaller cases: power law with the
    nominal exponent, or the exponent measured between the last two cases if steeper (tape
    peers slow down superlinearly: GC over a growing object graph)."""
    pts = [p for p in hist if p[0] < size]
    if not pts:
        return None
    s1, t1 = pts[-1]
    if len(pts) >= 2:
        s0, t0 = pts[-2]
        if t0 > 1e-3 and s1 > s0:   # tiny times are all overhead: no exponent from them
            growth = max(growth, math.log(t1 / t0) / math.log(s1 / s0))
    return t1 * (size / s1) ** growth


def _run_peer(ctx: Ctx, row: Row, impl: Impl, ref: GradDict | None, rtol: float, atol: float,
              exact: GradDict | None) -> GradDict | None:
    row.note = impl.note
    if impl.forward is not None:
        t0 = time.perf_counter()
        impl.forward()
        first = time.perf_counter() - t0
        tm = measure(impl.forward, impl.forward_loop, repeat=ctx.repeat, min_sample=ctx.min_sample,
                     max_total=ctx.max_total, first=first)
        row.forward_s = tm.median
    if impl.forward_flat is not None:  # rvm's flat forward: checked by rvm_side, timed the same way
        t0 = time.perf_counter()
        impl.forward_flat()
        first = time.perf_counter() - t0
        row.forward_flat_s = measure(impl.forward_flat, None, repeat=ctx.repeat,
                                     min_sample=ctx.min_sample, max_total=ctx.max_total,
                                     first=first).median

    def describe() -> None:         # after the gradient's timing: it may report on it
        if impl.describe is not None:
            extra = impl.describe(row)
            row.note = f"{row.note}; {extra}" if row.note else extra

    if impl.grad is None:
        describe()
        return ref
    t0 = time.perf_counter()
    g = impl.grad()
    first = time.perf_counter() - t0
    if ref is None and row.peer in ("rvm", "C"):
        ref, row.check = g, "ref"
        if exact is not None:
            bad = compare(g, exact, rtol, atol)
            if bad:
                row.check = f"WRONG (vs exact): {bad}"
                ref = exact   # judge the other peers by the exact values instead
    else:
        check_against = ref if ref is not None else exact
        if check_against is None:
            row.check = "unchecked"
        else:
            bad = compare(g, check_against, rtol, atol)
            row.check = "ok" if bad is None else f"WRONG: {bad}"
    # a wrong gradient is still timed (shown in parentheses) but counts in no ratio or target
    tm = measure(impl.grad, impl.grad_loop, repeat=ctx.repeat, min_sample=ctx.min_sample,
                 max_total=ctx.max_total, first=first)
    row.grad_s, row.samples = tm.median, tm.samples
    if impl.jit:
        row.compile_s = max(0.0, first - tm.median)
    if impl.compile_s is not None:
        row.compile_s = impl.compile_s
    if impl.flat is not None:          # rvm's flat call: checked by rvm_side, timed the same way
        t0 = time.perf_counter()
        impl.flat()
        first = time.perf_counter() - t0
        row.flat_s = measure(impl.flat, None, repeat=ctx.repeat, min_sample=ctx.min_sample,
                             max_total=ctx.max_total, first=first).median
    row.mem_bytes = peak_growth(impl.grad)
    if ctx.profile and row.peer == "rvm":
        row.profile = profile_calls(impl.grad, seconds=max(0.3, 3 * tm.median))
    describe()
    return ref


def profile_calls(call: Callable[[], Any], seconds: float, top: int = 6) -> list[tuple[str, float]]:
    """The functions taking most of the own time of repeated calls (cProfile tottime share).
    Cython's compiled loops show as the Python-visible method that enters them."""
    import cProfile
    import pstats
    pr = cProfile.Profile()
    t_end = time.perf_counter() + seconds
    pr.enable()
    while time.perf_counter() < t_end:
        call()
    pr.disable()
    st = pstats.Stats(pr)
    total = sum(v[2] for v in st.stats.values()) or 1.0
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]
    out = []
    for (fname, line, func), v in rows:
        where = fname.rsplit("/", 2)
        short = "/".join(where[-2:]) if len(where) > 1 else fname
        out.append((f"{short}:{line}({func})", v[2] / total))
    return out
