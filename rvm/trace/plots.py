"""Pictures of a trace, written to PNG files with matplotlib (Agg, no display needed).

* `frontier`: time (moves) against peak space (live checkpoints), log-log, every strategy over a
  range of its parameter, from the cost model; the Knill optimum is the lower envelope of the
  reversible strategies, Revolve (irreversible) is drawn dashed for reference.
* `pebbles`: the pebble space-time diagram: one horizontal bar per checkpoint from the move
  that computes it to the move that uncomputes it (step index against move number).
* `live`: the number of live checkpoints after each move.

Figures are made with `matplotlib.figure.Figure` directly, so no global backend is switched
and nothing needs a display.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from . import knill as _knill
from . import strategies as S
from .pebble import BWD, COPY, FWD, Move
from .report import short_label

__all__ = ["frontier", "pebbles", "live", "frontier_curves"]

_SIZE = (7.0, 4.6)
_DPI = 100


def _geometric(lo: int, hi: int, count: int) -> list[int]:
    """About `count` integers from lo to hi, evenly spaced on a log scale (lo, hi included)."""
    if hi <= lo:
        return [lo]
    out = {lo, hi}
    for j in range(count):
        out.add(int(round(lo * (hi / lo) ** (j / max(1, count - 1)))))
    return sorted(out)


def frontier_curves(n: int) -> dict[str, list[tuple[int, int]]]:
    """(peak, moves) points of each strategy family at N = n, from the cost model."""
    need = _knill.min_budget(n)
    budgets = sorted(set(range(need, min(n, need + 24) + 1)) | set(_geometric(need, n, 40)))
    knill = sorted({(s.peak, s.moves) for s in (S.knill(n, b) for b in budgets)})
    ks = [k for k in range(2, 33) if k <= max(2, n)]
    bennett = sorted((s.peak, s.moves) for s in (S.bennett(n, k) for k in ks))
    periodic = sorted({(s.peak, s.moves) for s in (S.periodic(n, p)
                                                   for p in _geometric(1, n, 40))})
    revolve = sorted({(s.peak, s.moves) for s in (S.revolve(n, c)
                                                  for c in _geometric(1, n, 40))})
    return {"knill": knill, "bennett": bennett, "periodic": periodic,
            "bennett1973": [(n, 2 * n - 1)], "revolve": revolve}


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    fig.savefig(path, dpi=_DPI)
    return path


def frontier(n: int, path: str | Path, highlight: Sequence = ()) -> Path:
    """Draw the time-vs-space frontier at N = n; `highlight` are Report rows to mark."""
    curves = frontier_curves(n)
    fig = Figure(figsize=_SIZE)
    ax = fig.add_subplot()
    style = {
        "knill": dict(color="tab:green", marker=".", lw=1.8, label="Knill optimum (budget)"),
        "bennett": dict(color="tab:blue", marker="o", ms=4, lw=1, label="Bennett 1989 (k = 2..32)"),
        "periodic": dict(color="tab:orange", marker="s", ms=3, lw=1,
                         label="periodic checkpoints (period)"),
        "bennett1973": dict(color="tab:red", marker="*", ms=10, lw=0, label="Bennett 1973"),
        "revolve": dict(color="0.45", marker="", lw=1.2, ls="--",
                        label="Revolve (irreversible reference)"),
    }
    for name, pts in curves.items():
        xs, ys = zip(*pts)
        ax.plot(xs, ys, **style[name])
    for j, r in enumerate(sorted(highlight, key=lambda r: (r.peak_checkpoints, r.moves))):
        ax.plot([r.peak_checkpoints], [r.moves], marker="o", ms=11, mfc="none", mec="black",
                mew=1.5, lw=0)
        # Cycle the label around the point so neighbours at similar peaks do not overlap.
        dx, dy = [(9, 4), (-9, -11), (9, -11), (-9, 4)][j % 4]
        ax.annotate(short_label(r), (r.peak_checkpoints, r.moves), textcoords="offset points",
                    xytext=(dx, dy), ha="left" if dx > 0 else "right", fontsize=7)
    ax.axhline(n, color="0.7", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("peak live checkpoints (pebbles, input not counted)")
    ax.set_ylabel("time: moves (steps run forward + backward)")
    ax.set_title(f"Time vs space of reversible schedules, N = {n}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return _save(fig, path)


def pebbles(moves: Iterable[Move], n: int, path: str | Path, title: str = "") -> Path:
    """Draw the pebble space-time diagram of a schedule."""
    born: dict[int, int] = {}
    segments, final = [], []
    t = 0
    for kind, i in moves:
        if kind == FWD:
            t += 1
            born[i] = t
        elif kind == BWD:
            t += 1
            segments.append([(born.pop(i), i), (t, i)])
        elif kind == COPY:
            final.append([(born.pop(i), i), (t + 0.5, i)])
    fig = Figure(figsize=_SIZE)
    ax = fig.add_subplot()
    lw = max(0.8, min(3.0, 300 / max(n, 1)))
    ax.add_collection(LineCollection(segments, colors="tab:blue", linewidths=lw))
    if final:
        ax.add_collection(LineCollection(final, colors="tab:red", linewidths=lw * 1.5,
                                         label=f"s_{n} (copied out)"))
        ax.legend(fontsize=7, loc="upper left")
    ax.set_xlim(0, t + 1)
    ax.set_ylim(0, n * 1.04 + 1)
    ax.set_xlabel("move number")
    ax.set_ylabel("step index i (checkpoint s_i)")
    ax.set_title(title or f"Pebble space-time diagram, N = {n}", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def live(counts: Sequence[int], path: str | Path, title: str = "") -> Path:
    """Draw live checkpoints after each move."""
    fig = Figure(figsize=_SIZE)
    ax = fig.add_subplot()
    xs = range(1, len(counts) + 1)
    ax.step(xs, counts, where="post", color="tab:blue", lw=0.9)
    peak = max(counts, default=0)
    ax.axhline(peak, color="tab:red", lw=0.8, ls="--", label=f"peak = {peak}")
    ax.set_xlabel("move number")
    ax.set_ylabel("live checkpoints")
    ax.set_ylim(0, max(1, math.ceil(peak * 1.1)))
    ax.set_title(title or "Live checkpoints over time", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return _save(fig, path)
