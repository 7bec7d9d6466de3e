"""Bennett's reversible pebble game on a line: the moves of a schedule and a referee.

Positions 0..N stand for the states s_0..s_N of an N-step computation.  Position 0 (the input)
is always pebbled.  A pebble on position i is a live checkpoint holding s_i.  Moves:

* ``Move(FWD, i)``: compute step i: s_i from s_{i-1} into fresh cells (i-1 pebbled, i not);
* ``Move(BWD, i)``: uncompute step i: run the step backward, which returns s_i's cells to zero
  (i-1 and i pebbled; i is not pebbled afterwards);
* ``Move(COPY, N)``: copy out: hand s_N over as the result.  It takes no step, so it is not
  counted as a move; afterwards no checkpoint is live.

A schedule finishes clean when, after its last move, s_N has been copied out and no checkpoint
is left (only s_0 and the result remain).  `play` checks every rule and counts what a schedule
costs; it is the cost model's referee and the real-machine runner uses the same rules.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

FWD, BWD, COPY = 1, -1, 0

__all__ = ["FWD", "BWD", "COPY", "Move", "IllegalMove", "GameResult", "play"]


class Move(NamedTuple):
    kind: int       # FWD, BWD or COPY
    i: int          # the position (state index) the move places, removes or copies

    def __str__(self) -> str:
        return {FWD: "compute", BWD: "uncompute", COPY: "copy out"}[self.kind] + f" {self.i}"


class IllegalMove(ValueError):
    """A move that breaks the rules of the game (the message says which rule)."""


@dataclass
class GameResult:
    n: int
    forward: int = 0
    backward: int = 0
    peak: int = 0               # most live checkpoints at once (the input s_0 not counted)
    copied: bool = False        # s_N was copied out
    left: list[int] = field(default_factory=list)   # checkpoints still live at the end
    live: list[int] | None = None   # live checkpoints after each counted move (if recorded)

    @property
    def moves(self) -> int:
        return self.forward + self.backward

    @property
    def clean(self) -> bool:
        return self.copied and not self.left


def play(moves: Iterable[Move], n: int, *, budget: int | None = None,
         record: bool = False) -> GameResult:
    """Play `moves` on positions 0..n; raise IllegalMove at the first broken rule (or when more
    than `budget` checkpoints would be live).  With `record`, keep the live count per move."""
    pebbled = bytearray(n + 1)
    pebbled[0] = 1
    res = GameResult(n, live=[] if record else None)
    live = 0
    for k, (kind, i) in enumerate(moves):
        if res.copied:
            raise IllegalMove(f"move {k} ({Move(kind, i)}) comes after the copy-out")
        if not 1 <= i <= n:
            raise IllegalMove(f"move {k}: position {i} is outside 1..{n}")
        if kind == COPY:
            if i != n or not pebbled[n]:
                raise IllegalMove(f"move {k}: copy out needs s_{n} pebbled (asked for {i})")
            pebbled[n] = 0
            live -= 1
            res.copied = True
            continue
        if not pebbled[i - 1]:
            raise IllegalMove(f"move {k} ({Move(kind, i)}): s_{i - 1} is not pebbled")
        if kind == FWD:
            if pebbled[i]:
                raise IllegalMove(f"move {k} ({Move(kind, i)}): s_{i} is already pebbled")
            pebbled[i] = 1
            live += 1
            res.forward += 1
            if live > res.peak:
                res.peak = live
                if budget is not None and live > budget:
                    raise IllegalMove(f"move {k} ({Move(kind, i)}): {live} live checkpoints, "
                                      f"over the budget of {budget}")
        elif kind == BWD:
            if not pebbled[i]:
                raise IllegalMove(f"move {k} ({Move(kind, i)}): s_{i} is not pebbled")
            pebbled[i] = 0
            live -= 1
            res.backward += 1
        else:
            raise IllegalMove(f"move {k}: unknown kind {kind!r}")
        if record:
            res.live.append(live)
    res.left = [i for i in range(1, n + 1) if pebbled[i]]
    return res
