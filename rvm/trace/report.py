"""One report row per traced run: time and space of a schedule, from the model or the machine.

Space: `peak_checkpoints` live checkpoints at once (s_0 not counted); `peak_states` adds the
input.  `peak_cells` = peak_states * state_cells + work_cells (the step's own peak frame cells,
its ancillas), `peak_bits` = 64 * peak_cells (every cell is a 64-bit word).  Without a program
a state is one cell and there are no work cells.

Time: moves (forward + backward), `overhead` = moves / N, and instructions: measured on the
machine, or (`instructions_estimated`) moves times the instructions of one step.

`knill_at_peak` is the Knill optimum with the same number of pebbles and `gap` = moves /
knill_at_peak: how far a strategy is from the best possible at equal space.  For Revolve, which
overwrites states, the comparison answers a different question (see revolve.py).
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from . import knill as _knill
from . import strategies as S
from .strategies import Schedule

__all__ = ["Report", "model_report", "machine_report", "sweep_schedules", "print_reports",
           "to_json"]

BITS_PER_CELL = 64


@dataclass
class Report:
    n: int
    strategy: str
    label: str
    params: dict[str, Any]
    reversible: bool
    forward: int
    backward: int
    moves: int
    overhead: float
    peak_checkpoints: int
    peak_states: int
    state_cells: int
    work_cells: int
    peak_cells: int
    peak_bits: int
    instructions: int | None
    instructions_estimated: bool
    checked: str                    # "machine", "game" (moves played by the referee), "model"
    clean: bool | None              # None: not played (a formula)
    matches_direct: bool | None
    knill_at_peak: int | None
    gap: float | None
    seconds: float | None = None
    problem: str | None = None
    final_state: dict[str, Any] | None = field(default=None)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _knill_at(n: int, peak: int) -> int | None:
    if peak < _knill.min_budget(n):
        return None
    return _knill.table(n).moves(n, min(peak, n))


def _base(s: Schedule, forward: int, backward: int, peak: int, state_cells: int,
          work_cells: int) -> dict[str, Any]:
    moves = forward + backward
    states = peak + 1
    cells = states * state_cells + work_cells
    best = _knill_at(s.n, peak)
    return dict(n=s.n, strategy=s.strategy, label=s.label, params=dict(s.params),
                reversible=s.reversible, forward=forward, backward=backward, moves=moves,
                overhead=moves / s.n, peak_checkpoints=peak, peak_states=states,
                state_cells=state_cells, work_cells=work_cells, peak_cells=cells,
                peak_bits=cells * BITS_PER_CELL, knill_at_peak=best,
                gap=(moves / best) if best else None)


def model_report(s: Schedule, *, state_cells: int = 1, work_cells: int = 0,
                 step_instructions: int | None = None, play_limit: int = 1_000_000) -> Report:
    """The cost model's row.  Schedules of at most `play_limit` moves are also played by the
    referee, which checks the rules, the counts and the clean finish."""
    from .pebble import play

    checked, clean = "model", None
    if s.runnable and s.moves <= play_limit:
        g = play(s.schedule(), s.n)
        if (g.forward, g.backward, g.peak) != (s.forward, s.backward, s.peak):
            raise AssertionError(f"{s.label}: the plan's cost {s.forward}/{s.backward}/{s.peak} "
                                 f"disagrees with playing it {g.forward}/{g.backward}/{g.peak}")
        checked, clean = "game", g.clean
    instr = None if step_instructions is None else s.moves * step_instructions
    return Report(**_base(s, s.forward, s.backward, s.peak, state_cells, work_cells),
                  instructions=instr, instructions_estimated=instr is not None,
                  checked=checked, clean=clean, matches_direct=None)


def machine_report(s: Schedule, run, state_cells: int,
                   final_state: dict[str, Any] | None = None) -> Report:
    """The row of a real-machine run (`run` is a machine_run.MachineRun)."""
    return Report(**_base(s, run.forward, run.backward, run.peak, state_cells, run.work_cells),
                  instructions=run.instructions, instructions_estimated=False,
                  checked="machine", clean=run.clean, matches_direct=run.matches_direct,
                  seconds=run.seconds, problem=run.problem, final_state=final_state)


def sweep_schedules(n: int, budget: int | None = None) -> list[Schedule]:
    """Every strategy with representative parameters, ordered by peak space: Bennett 1973,
    Bennett 1989 for k = 2, 3, 4 (levels to reach N), periodic checkpoints every ceil(sqrt N),
    the Knill optimum for `budget` (default: the fewest pebbles) and Revolve with as many
    checkpoints as that budget."""
    b = budget if budget is not None else _knill.min_budget(n)
    out = [S.bennett1973(n)]
    out += [S.bennett(n, k) for k in (2, 3, 4)]
    out += [S.periodic(n), S.knill(n, b), S.revolve(n, b)]
    seen, unique = set(), []
    for s in out:
        key = (s.strategy, tuple(s.params.items()))
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return sorted(unique, key=lambda s: (s.peak, s.moves))


# ---- output ----------------------------------------------------------------------------------

_COLUMNS = [
    ("strategy", "short"), ("fwd", "forward"), ("bwd", "backward"), ("moves", "moves"),
    ("T/N", "overhead"), ("peak", "peak_checkpoints"), ("cells", "peak_cells"),
    ("bits", "peak_bits"), ("instructions", "instructions"), ("Knill@peak", "knill_at_peak"),
    ("gap", "gap"), ("clean", "clean"), ("checked", "checked"),
]
# Columns dropped on narrower terminals (under 140 columns, under 100 columns).
_NARROW = ({"forward", "backward", "peak_bits"}, {"peak_cells", "checked"})
_SHORT = {"bennett1973": "Bennett 1973", "bennett": "Bennett", "knill": "Knill",
          "periodic": "periodic", "revolve": "Revolve*"}
_PARAM = {"k": "k", "levels": "L", "split": "split", "budget": "S", "period": "p",
          "checkpoints": "c"}


def short_label(r: Report) -> str:
    """A compact name for tables and charts: `Knill S=11`, `Bennett k=2 L=10`."""
    return " ".join([_SHORT[r.strategy]] + [f"{_PARAM[k]}={v}" for k, v in r.params.items()])


def _cell(r: Report, key: str) -> str:
    if key == "short":
        return short_label(r)
    v = getattr(r, key)
    if v is None:
        return "-"
    if key == "overhead":
        return f"{v:.2f}"
    if key == "gap":
        return f"{v:.3f}" + ("*" if not r.reversible else "")
    if key == "instructions":
        return ("~" if r.instructions_estimated else "") + f"{v}"
    if key == "clean":
        return "yes" if v else "NO"
    return str(v)


def print_reports(reports: list[Report], out: TextIO | None = None) -> None:
    """A table: rich on a terminal, plain aligned columns otherwise (stable for scripts)."""
    out = out or sys.stdout
    n = reports[0].n if reports else 0
    title = f"rvm trace: N = {n}"
    notes = ["S: pebble budget, L: levels, p: period, c: checkpoints; peak: live checkpoints "
             "(input not counted); gap = moves / Knill optimum at the same peak"]
    if any(not r.reversible for r in reports):
        notes.append("* Revolve overwrites states (irreversible): it reverses N steps for an "
                     "adjoint sweep, a different question")
    if any(r.instructions_estimated for r in reports):
        notes.append("~ instructions estimated as moves x instructions of one step")
    if out.isatty():
        from rich.console import Console
        from rich.table import Table

        console = Console(file=out)
        drop = set() if console.width >= 140 else \
            _NARROW[0] if console.width >= 100 else _NARROW[0] | _NARROW[1]
        cols = [c for c in _COLUMNS if c[1] not in drop]
        t = Table(title=title, title_justify="left", pad_edge=False)
        for h, key in cols:
            t.add_column(h, justify="left" if key == "short" else "right",
                         no_wrap=key == "short")
        for r in reports:
            t.add_row(*[_cell(r, key) for _, key in cols])
        console.print(t)
        for note in notes:
            console.print(note, style="dim", highlight=False)
        return
    heads = [h for h, _ in _COLUMNS]
    rows = [[_cell(r, key) for _, key in _COLUMNS] for r in reports]
    widths = [max(len(h), *(len(row[c]) for row in rows)) for c, h in enumerate(heads)]
    print(title, file=out)
    print("  ".join(h.ljust(w) if c == 0 else h.rjust(w)
                    for c, (h, w) in enumerate(zip(heads, widths))), file=out)
    for row in rows:
        print("  ".join(v.ljust(w) if c == 0 else v.rjust(w)
                        for c, (v, w) in enumerate(zip(row, widths))), file=out)
    for note in notes:
        print(note, file=out)


def _plain(v: Any) -> Any:
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def to_json(reports: list[Report], program: str | None = None) -> str:
    return json.dumps({"program": program, "runs": [_plain(r.as_dict()) for r in reports]},
                      indent=2)
