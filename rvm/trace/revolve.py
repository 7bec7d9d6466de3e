"""Revolve (binomial checkpointing, Griewank 1992; Griewank & Walther 2000, ACM TOMS 26:19-45):
the IRREVERSIBLE reference.

Revolve answers a different question from the reversible pebble game: visit the states
s_{N-1}, ..., s_0 in reverse order (as an adjoint sweep does) with c checkpoint slots that may
be OVERWRITTEN: a state is dropped without being uncomputed, which erases its bits.  A
reversible machine cannot do that cleanly, so Revolve is a cost model only.

With c slots (s_0 in one of them) and one working state, the fewest forward steps ("advances")
to reverse l steps is

    t(l, c) = r*l - binom(c + r, c + 1)   where r is the integer with
                                         binom(c + r - 1, c) < l <= binom(c + r, c),

which solves the recursion  t(1, c) = 0,  t(l, 1) = l(l-1)/2,
t(l, c) = min over 1 <= m < l of  m + t(l-m, c-1) + t(m, c)  (`advances_dp`, for the tests).
Each of the l reverse steps is counted as one more (backward) move, so with c >= l slots
Revolve costs (l-1) + l = 2l-1 moves, like Bennett 1973 with l pebbles.
"""
from __future__ import annotations

from functools import cache
from math import comb

__all__ = ["repetitions", "advances", "advances_dp"]


def repetitions(l: int, c: int) -> int:
    """r: the most times any step is advanced, the smallest r with binom(c + r, c) >= l."""
    if l < 1 or c < 1:
        raise ValueError("revolve needs l >= 1 steps and c >= 1 checkpoints")
    hi = 1
    while comb(c + hi, c) < l:          # binom(c + r, c) grows with r: double, then bisect
        hi *= 2
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if comb(c + mid, c) < l:
            lo = mid + 1
        else:
            hi = mid
    return lo


def advances(l: int, c: int) -> int:
    """t(l, c): the fewest forward steps to reverse l steps with c checkpoints (closed form)."""
    r = repetitions(l, c)
    return r * l - (comb(c + r, c + 1) if r >= 1 else 0)


@cache
def advances_dp(l: int, c: int) -> int:
    """t(l, c) by the recursion (small l only: it is O(l^2 c))."""
    if l == 1:
        return 0
    if c == 1:
        return l * (l - 1) // 2
    return min(m + advances_dp(l - m, c - 1) + advances_dp(m, c) for m in range(1, l))
