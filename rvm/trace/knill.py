"""Knill's optimal reversible pebbling of a line for a given pebble budget.

T(n, s) is the fewest moves that take positions 0..n from "0 pebbled" to "0 and n pebbled"
with at most s pebbles live at once (position 0 not counted).  Knill (1995, "An analysis of
Bennett's pebble game", arXiv:math/9508218) shows an optimal schedule first pebbles some m with
all s pebbles, then pebbles n from m with s-1 (m is held), then removes m with s-1 (n is held):

    T(1, s) = 1                         (s >= 1)
    T(n, 1) = infinity                  (n >= 2)
    T(n, s) = min over 1 <= m < n of  T(m, s) + T(n-m, s-1) + T(m, s-1)

With s pebbles at most n = 2^(s-1) is reachable, and for s >= n the linear schedule (2n-1
moves) is optimal.  `dense_table` is this recurrence verbatim (O(N^2 S), the reference); the
tests check it against a brute-force search of the game.

`Table` computes the same numbers fast: write f(m) = T(m, s) + T(m, s-1) and g(k) = T(k, s-1);
then T(., s) is the min-plus convolution of f and g.  Both are convex (by induction: the
convolution of convex sequences is convex, and its slopes are the sorted merge of theirs), so
the slopes of T(., s) are 2 (from T(1)=1 to T(2)=3) followed by the merge of f's and g's slopes.
Slopes come in long runs of equal values, so a level is a short list of (slope, count) runs and
N = 10^6 with any budget takes milliseconds.  The tests check `Table` against `dense_table`.
"""
from __future__ import annotations

from bisect import bisect_right

import numpy as np

from .plan import Leaf, Node, Plan

__all__ = ["min_budget", "dense_table", "Table", "table", "plan", "INFEASIBLE"]

INFEASIBLE = None


def min_budget(n: int) -> int:
    """The fewest pebbles that can reach position n: the smallest s with 2^(s-1) >= n."""
    return max(1, (n - 1).bit_length() + 1)


_BIG = np.int64(1) << np.int64(50)     # "infinity" that still adds without overflow


def dense_table(n_max: int, budget: int) -> np.ndarray:
    """T[s, n] for 0 <= s <= budget, 0 <= n <= n_max by the recurrence as written (row 0 and
    column 0 unused); infeasible entries are -1."""
    T = np.full((budget + 1, n_max + 1), _BIG, dtype=np.int64)
    for s in range(1, budget + 1):
        T[s, 1] = 1
        f = np.full(n_max + 1, _BIG, dtype=np.int64)   # f[m] = T(m, s) + T(m, s-1)
        f[1] = min(T[s, 1] + T[s - 1, 1], _BIG)
        for n in range(2, n_max + 1):
            T[s, n] = min(int((f[1:n] + T[s - 1, n - 1:0:-1]).min()), _BIG)
            f[n] = min(T[s, n] + T[s - 1, n], _BIG)
    return np.where(T >= _BIG, -1, T)


class _Cursor:
    """Walks a list of (value, count) runs one element at a time (the list may grow)."""
    __slots__ = ("runs", "r", "off")

    def __init__(self, runs: list[tuple[int, int]]):
        self.runs, self.r, self.off = runs, 0, 0

    def value(self) -> int:
        return self.runs[self.r][0]

    def left(self) -> int:
        return self.runs[self.r][1] - self.off

    def advance(self, c: int) -> None:
        self.off += c
        runs = self.runs
        while self.r < len(runs) and self.off >= runs[self.r][1]:
            self.off -= runs[self.r][1]
            self.r += 1


def _next_level(prev: list[tuple[int, int]], s: int, n_max: int) -> list[tuple[int, int]]:
    """Slope runs of T(., s) on 1..min(2^(s-1), n_max) from those of T(., s-1)."""
    length = min(1 << (s - 1), n_max) - 1          # slopes T(n+1) - T(n) wanted
    if length <= 0:
        return []
    n_prev = sum(c for _, c in prev)
    out: list[tuple[int, int]] = [(2, 1)]          # T(2, s) - T(1, s) = 3 - 1
    done, pf, pg = 1, 0, 0                          # slopes out; slopes of f, g consumed
    cf_t, cf_p, cg = _Cursor(out), _Cursor(prev), _Cursor(prev)
    inf = float("inf")
    while done < length:
        vf = cf_t.value() + cf_p.value() if pf < n_prev else inf
        vg = cg.value() if pg < n_prev else inf
        if vf <= vg:
            # f's next slopes need T(., s) slopes already made: out has `done` > pf of them.
            c = min(cf_t.left(), cf_p.left(), length - done)
            out.append((vf, c))
            pf += c
            cf_t.advance(c)
            cf_p.advance(c)
        else:
            c = min(cg.left(), length - done)
            out.append((vg, c))
            pg += c
            cg.advance(c)
        done += c
    merged: list[tuple[int, int]] = []
    for v, c in out:
        if merged and merged[-1][0] == v:
            merged[-1] = (v, merged[-1][1] + c)
        else:
            merged.append((v, c))
    return merged


class Table:
    """T(n, s) for n <= n_max; levels s are built on demand."""

    def __init__(self, n_max: int):
        if n_max < 1:
            raise ValueError("n_max must be >= 1")
        self.n_max = n_max
        self._runs: list[list[tuple[int, int]]] = [[], []]   # level 0 unused; level 1: T(1)=1
        self._index: list[tuple[list[int], list[int], list[int]]] = [([], [], []),
                                                                       ([], [], [])]
        # From some level on, T(., s) on 1..n_max is 2n-1 up to n = s and 4n-2s-1 after: a
        # level of slopes [2] * (s-1) + [4] * (rest), covering 1..n_max, makes the next level
        # the same shape with s+1 (merging it with itself shifts one 2 in).  Levels from there
        # are not built: a budget near N would otherwise need N levels.
        self._stable: int | None = None

    def _level(self, s: int) -> tuple[list[int], list[int], list[int]]:
        while len(self._runs) <= s:
            k = len(self._runs)
            runs = _next_level(self._runs[-1], k, self.n_max)
            self._runs.append(runs)
            starts, values, slopes = [], [], []
            n, t = 1, 1
            for v, c in runs:
                starts.append(n)
                values.append(t)
                slopes.append(v)
                n += c
                t += v * c
            self._index.append((starts, values, slopes))
            if self._stable is None and (1 << min(k - 1, 62)) >= self.n_max and \
                    [v for v, _ in runs] == [2, 4] and runs[0][1] == k - 1:
                self._stable = k
        return self._index[s]

    def moves(self, n: int, s: int) -> int | None:
        """T(n, s), or None when n cannot be reached with s pebbles."""
        if not 1 <= n <= self.n_max:
            raise ValueError(f"n = {n} is outside 1..{self.n_max}")
        if s < 1 or n > (1 << min(s - 1, 62)):
            return INFEASIBLE
        if s >= n:
            return 2 * n - 1
        if self._stable is not None and s >= self._stable:
            return 4 * n - 2 * s - 1
        while self._stable is None and len(self._runs) <= s:
            self._level(len(self._runs))                # build up, stopping once stable
        if self._stable is not None and s >= self._stable:
            return 4 * n - 2 * s - 1
        starts, values, slopes = self._level(s)
        if n == 1:
            return 1
        r = bisect_right(starts, n - 1) - 1          # the run holding slope T(n) - T(n-1)
        return values[r] + slopes[r] * (n - starts[r])

    def effective_budget(self, n: int, s: int) -> int:
        """The fewest pebbles that still give T(n, s) moves: the peak of an optimal schedule."""
        s = min(s, n)
        best = self.moves(n, s)
        if best is None:
            raise ValueError(f"{n} steps need at least {min_budget(n)} pebbles, not {s}")
        lo, hi = min_budget(n), s        # T(n, .) is non-increasing: binary search
        while lo < hi:
            mid = (lo + hi) // 2
            if self.moves(n, mid) == best:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def split(self, n: int, s: int) -> int:
        """The smallest m that attains T(n, s) = T(m, s) + T(n-m, s-1) + T(m, s-1)."""
        cap = 1 << min(s - 2, 62)                   # T(., s-1) reaches 2^(s-2) at most
        lo, hi = max(1, n - cap), min(n - 1, cap)

        def cost(m: int) -> int:
            return self.moves(m, s) + self.moves(n - m, s - 1) + self.moves(m, s - 1)

        # cost is convex in m (a sum of convex sequences): find where it stops falling.
        while lo < hi:
            mid = (lo + hi) // 2
            if cost(mid + 1) < cost(mid):
                lo = mid + 1
            else:
                hi = mid
        assert cost(lo) == self.moves(n, s), (n, s, lo)
        return lo


_TABLES: dict[int, Table] = {}


def table(n_max: int) -> Table:
    """A shared Table covering at least 1..n_max."""
    for size, t in _TABLES.items():
        if size >= n_max:
            return t
    t = _TABLES[n_max] = Table(n_max)
    return t


def plan(n: int, budget: int) -> Plan:
    """An optimal plan for n steps within `budget` pebbles, using the fewest pebbles that
    attain the optimum (so its peak is that number exactly)."""
    tab = table(n)
    s0 = tab.effective_budget(n, budget)
    memo: dict[tuple[int, int], Plan] = {}
    # Post-order with an explicit stack: chains like (n, n-1) -> (n-1, n-2) -> ... can be far
    # deeper than Python's recursion limit.
    stack = [(n, s0)]
    while stack:
        key = stack[-1]
        if key in memo:
            stack.pop()
            continue
        k, s = key
        if k == 1 or s >= k:
            memo[key] = Leaf(k)                     # linear is optimal with k pebbles
            stack.pop()
            continue
        m = tab.split(k, s)
        kids = [(m, s), (k - m, s - 1), (m, s - 1)]
        missing = [c for c in kids if c not in memo]
        if missing:
            stack.extend(missing)
            continue
        memo[key] = Node([memo[kids[0]], memo[kids[1]]], [memo[kids[2]]])
        stack.pop()
    return memo[(n, s0)]
