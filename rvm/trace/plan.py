"""Schedules as trees: every reversible strategy here is a plan built from two shapes.

A plan for n steps takes the line from "its start pebbled" to "its start and its end pebbled",
with nothing else left in between:

* `Leaf(n)`: Bennett 1973 on n steps: compute 1..n, then uncompute n-1..1 (2n-1 moves, n
  pebbles).
* `Node(segments, cleanups)`: run each segment forward in turn (each leaves its end pebbled),
  then run `cleanups[j]` backward for j = m-2 .. 0 to remove the end of segment j.  A cleanup
  covers the same steps as its segment but may be a different (cheaper in space) plan: Bennett
  1989 uses the segment itself, Knill's optimum the same length with one pebble fewer.

Costs (moves forward and backward, peak live pebbles) are computed when a node is built, from
its children, so a plan shared many times (a DAG) prices N = 10^6 without listing a move.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

from .pebble import BWD, COPY, FWD, Move

__all__ = ["Plan", "Leaf", "Node", "moves", "schedule"]


class Plan:
    """n steps; `forward`/`backward` moves; `peak` live pebbles (its start not counted)."""
    __slots__ = ("n", "forward", "backward", "peak")
    n: int
    forward: int
    backward: int
    peak: int

    @property
    def moves(self) -> int:
        return self.forward + self.backward


class Leaf(Plan):
    __slots__ = ()

    def __init__(self, n: int):
        if n < 1:
            raise ValueError(f"a plan needs at least one step, not {n}")
        self.n, self.forward, self.backward, self.peak = n, n, n - 1, n

    def __repr__(self) -> str:
        return f"Leaf({self.n})"


class Node(Plan):
    __slots__ = ("segments", "cleanups")

    def __init__(self, segments: Sequence[Plan], cleanups: Sequence[Plan]):
        if len(segments) < 2 or len(cleanups) != len(segments) - 1 or \
                any(c.n != s.n for c, s in zip(cleanups, segments)):
            raise ValueError("a node needs m >= 2 segments and one cleanup of the same length "
                             "for each but the last")
        self.segments, self.cleanups = tuple(segments), tuple(cleanups)
        self.n = sum(s.n for s in segments)
        # Running a plan backward swaps its forward and backward moves.
        self.forward = sum(s.forward for s in segments) + sum(c.backward for c in cleanups)
        self.backward = sum(s.backward for s in segments) + sum(c.forward for c in cleanups)
        # Segment j runs with the ends of segments 0..j-1 held; cleanup j (backward) with the
        # ends of segments 0..j-1 and the final end held.
        self.peak = max(max(j + s.peak for j, s in enumerate(segments)),
                        max(j + 1 + c.peak for j, c in enumerate(cleanups)))

    def __repr__(self) -> str:
        return f"Node({list(self.segments)}, {list(self.cleanups)})"


def moves(plan: Plan, offset: int = 0, reverse: bool = False) -> Iterator[Move]:
    """The plan's moves on positions offset+1 .. offset+n (reversed: run backward).

    Iterative (an explicit stack), so deep plans do not hit Python's recursion limit."""
    stack = [(plan, offset, reverse)]
    while stack:
        p, off, rev = stack.pop()
        if isinstance(p, Leaf):
            n = p.n
            if not rev:
                for i in range(off + 1, off + n + 1):
                    yield Move(FWD, i)
                for i in range(off + n - 1, off, -1):
                    yield Move(BWD, i)
            else:
                for i in range(off + 1, off + n):
                    yield Move(FWD, i)
                for i in range(off + n, off, -1):
                    yield Move(BWD, i)
            continue
        parts = []
        start = off
        starts = []
        for s in p.segments:
            parts.append((s, start, False))
            starts.append(start)
            start += s.n
        for j in range(len(p.cleanups) - 1, -1, -1):
            parts.append((p.cleanups[j], starts[j], True))
        if rev:
            parts = [(c, o, not r) for c, o, r in reversed(parts)]
        stack.extend(reversed(parts))


def schedule(plan: Plan) -> Iterator[Move]:
    """The whole schedule: the plan's moves, then copy out s_N."""
    yield from moves(plan)
    yield Move(COPY, plan.n)
