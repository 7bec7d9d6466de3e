"""The strategies: for N steps and a strategy's parameters, a Schedule with its cost.

* `bennett1973(n)`: compute all, uncompute all but s_N: 2N-1 moves, N pebbles.
* `bennett(n, k, levels)`: Bennett 1989: split into k segments, recurse `levels` deep; each
  segment but the last is uncomputed by running its own plan backward.  N = k^L gives
  (2k-1)^L moves with L(k-1)+1 pebbles.  Otherwise the segments are as even as possible
  (sizes differ by one, larger first), and segments still longer than one step when the levels
  run out are done linearly (Bennett 1973), as in Bennett's paper.  Default levels: the
  smallest L with k^L >= N.  `split="ceil"` splits as NiLang's `bennett` does instead
  (NiLang.jl, src/stdlib/bennett.jl): segments of m = ceil(n/k) steps and a shorter last one,
  ceil(n/m) segments in all (N = 100, k = 4: 847 moves, 11 pebbles; the even split: 791, 10).
* `knill(n, budget)`: the optimum for a pebble budget (knill.py).
* `periodic(n, period)`: a checkpoint every `period` steps; the steps between two checkpoints
  are done linearly, and the checkpoints are removed at the end by recomputing each segment
  (Bennett 1989 with one level and segments of `period` steps).  Default period: ceil(sqrt N).
* `revolve(n, checkpoints)`: binomial checkpointing, the IRREVERSIBLE reference (revolve.py);
  a cost model only.

Counting: a move is one step run forward or backward; `peak` is the most live checkpoints at
once, not counting the input s_0 (the acceptance figures count it as "states").
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import knill as _knill
from . import revolve as _revolve
from .pebble import Move
from .plan import Leaf, Node, Plan
from .plan import schedule as _plan_schedule

__all__ = ["Schedule", "bennett1973", "bennett", "knill", "periodic", "revolve", "make",
           "STRATEGIES", "LABELS"]

LABELS = {
    "bennett1973": "Bennett 1973",
    "bennett": "Bennett 1989",
    "knill": "Knill optimum",
    "periodic": "periodic checkpoints",
    "revolve": "Revolve (irreversible)",
}


@dataclass
class Schedule:
    """A strategy applied to N steps, with its cost (from the plan or a formula)."""
    strategy: str
    params: dict[str, Any]
    n: int
    forward: int
    backward: int
    peak: int
    reversible: bool = True
    _plan: Callable[[], Plan] | None = field(default=None, repr=False)
    _cached: Plan | None = field(default=None, repr=False)

    @property
    def moves(self) -> int:
        return self.forward + self.backward

    @property
    def label(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return LABELS[self.strategy] + (f" {extra}" if extra else "")

    @property
    def runnable(self) -> bool:
        """Can it be played as moves (on the game or the machine)?"""
        return self._plan is not None

    def plan(self) -> Plan:
        if self._plan is None:
            raise ValueError(f"{self.label} is a cost model only: it overwrites states, which "
                             f"a reversible machine cannot do cleanly")
        if self._cached is None:
            self._cached = self._plan()
        return self._cached

    def schedule(self) -> Iterator[Move]:
        """Every move, ending with the copy-out of s_N."""
        return _plan_schedule(self.plan())


def _from_plan(strategy: str, params: dict[str, Any], p: Plan) -> Schedule:
    return Schedule(strategy, params, p.n, p.forward, p.backward, p.peak, True, lambda: p, p)


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of steps must be a positive integer, not {n!r}")


def bennett1973(n: int) -> Schedule:
    _check_n(n)
    return _from_plan("bennett1973", {}, Leaf(n))


def _even_parts(n: int, k: int) -> list[int]:
    m = min(k, n)
    q, r = divmod(n, m)
    return [q + 1] * r + [q] * (m - r)


def default_levels(n: int, k: int) -> int:
    """The smallest L with k^L >= n."""
    L, reach = 0, 1
    while reach < n:
        L, reach = L + 1, reach * k
    return L


def _ceil_parts(n: int, k: int) -> list[int]:
    """NiLang's split: segments of ceil(n/k) steps, the last one what is left."""
    m = -(-n // k)
    count = -(-n // m)
    return [m] * (count - 1) + [n - m * (count - 1)]


SPLITS = {"even": _even_parts, "ceil": _ceil_parts}


def bennett(n: int, k: int = 2, levels: int | None = None, split: str = "even") -> Schedule:
    _check_n(n)
    if k < 2:
        raise ValueError(f"Bennett's k must be >= 2, not {k}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (one of {', '.join(SPLITS)})")
    parts = SPLITS[split]
    if levels is None:
        levels = default_levels(n, k)
    if levels < 0:
        raise ValueError(f"levels must be >= 0, not {levels}")
    memo: dict[tuple[int, int], Plan] = {}

    def build(n: int, level: int) -> Plan:
        p = memo.get((n, level))
        if p is None:
            if level == 0 or n == 1:
                p = Leaf(n)
            else:
                segs = [build(size, level - 1) for size in parts(n, k)]
                p = Node(segs, segs[:-1])
            memo[(n, level)] = p
        return p

    params: dict[str, Any] = {"k": k, "levels": levels}
    if split != "even":
        params["split"] = split
    return _from_plan("bennett", params, build(n, levels))


def periodic(n: int, period: int | None = None) -> Schedule:
    _check_n(n)
    if period is None:
        period = math.isqrt(n - 1) + 1
    if period < 1:
        raise ValueError(f"the period must be >= 1, not {period}")
    p = min(period, n)
    full, rest = divmod(n, p)
    m = full + (1 if rest else 0)             # segments
    last = rest or p

    def build() -> Plan:
        if m == 1:
            return Leaf(n)
        segs = [Leaf(p)] * full + ([Leaf(rest)] if rest else [])
        return Node(segs, segs[:-1])

    # The Node costs in closed form (a plan with N one-step segments is slow to build):
    # every segment but the last is computed, then uncomputed again by running it backward.
    if m == 1:
        fwd, bwd, peak = n, n - 1, n
    else:
        fwd, bwd, peak = n + (n - last) - (m - 1), (n - m) + (n - last), m - 1 + p
    return Schedule("periodic", {"period": p}, n, fwd, bwd, peak, True, build)


def knill(n: int, budget: int | None = None) -> Schedule:
    """The optimum within `budget` pebbles (default: the fewest that reach N).  The reported
    peak is the fewest pebbles that attain the same optimum."""
    _check_n(n)
    if budget is None:
        budget = _knill.min_budget(n)
    need = _knill.min_budget(n)
    if budget < need:
        raise ValueError(f"{n} steps need a budget of at least {need} pebbles "
                         f"(2^(S-1) >= N), not {budget}")
    tab = _knill.table(n)
    moves = tab.moves(n, min(budget, n))
    peak = tab.effective_budget(n, budget)
    return Schedule("knill", {"budget": budget}, n, (moves + 1) // 2, (moves - 1) // 2, peak,
                    True, lambda: _knill.plan(n, budget))


def revolve(n: int, checkpoints: int | None = None) -> Schedule:
    """Binomial checkpointing with `checkpoints` slots (default: as many as the Knill optimum
    needs at least).  Forward = advances, backward = the n reverse steps.  Peak = min(C, N):
    Revolve holds its C slots (s_0 in one of them) and one working state, C + 1 states; like
    every other schedule's peak it leaves out s_0 only, so it counts the working state."""
    _check_n(n)
    c = checkpoints if checkpoints is not None else _knill.min_budget(n)
    if c < 1:
        raise ValueError(f"revolve needs at least one checkpoint, not {c}")
    return Schedule("revolve", {"checkpoints": c}, n, _revolve.advances(n, c), n, min(c, n),
                    False)


STRATEGIES: dict[str, Callable[..., Schedule]] = {
    "bennett1973": bennett1973, "bennett": bennett, "knill": knill, "periodic": periodic,
    "revolve": revolve,
}


def make(name: str, n: int, **params: Any) -> Schedule:
    """A strategy by name; parameters that are None take their defaults."""
    try:
        ctor = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r} (one of {', '.join(STRATEGIES)})") from None
    return ctor(n, **{k: v for k, v in params.items() if v is not None})
