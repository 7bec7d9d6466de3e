"""`rvm trace`: run a step program under a pebbling schedule, or price schedules in the model.

    rvm trace programs/trace/diffusion.rasm --steps 256 --strategy bennett --k 4 --levels 4
    rvm trace programs/trace/leapfrog.rasm --steps 1024 --budget 11          # Knill optimum
    rvm trace programs/trace/leapfrog.rasm --steps 64 --sweep --plots out/
    rvm trace --steps 1000000 --sweep --json                                 # model only
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rvm.cli import positive_int

from . import strategies as S
from .knill import min_budget
from .report import Report, machine_report, model_report, print_reports, sweep_schedules, to_json

EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, EXIT_UNCLEAN = 0, 1, 2, 3
PROGRESS_MIN_MOVES = 10_000
DIAGRAM_MAX_MOVES = 500_000

EPILOG = """\
strategies (--strategy; inferred from --budget, --period, --checkpoints, --k/--levels):
  bennett1973   compute all N steps, uncompute all but the last: 2N-1 moves, N pebbles
  bennett       Bennett 1989, k-ary (--k, default 2) with --levels (default: enough for N);
                --split ceil splits as NiLang's bennett (segments of ceil(n/k) steps, a
                shorter last one) instead of as evenly as possible
  knill         the optimum for a pebble budget (--budget, default: the fewest that reach N)
  periodic      a checkpoint every --period steps (default ceil(sqrt N))
  revolve       binomial checkpointing with --checkpoints slots: the IRREVERSIBLE reference
                (it overwrites states), priced by the model only.  Its peak checkpoints is
                C: the C slots (one holds s_0) plus the working state Revolve advances,
                less s_0; its peak states, C + 1, counts every slot and the working state

A step program declares its state as `inout NAME` and the next state as `output NAME_next`;
main computes NAME_next from NAME (docs/trace.md).  Without a program, or with --model, only
the pebble-game cost model runs (N = 10^6 takes a moment).

--plots DIR: DIR is made if it does not exist, but its parent must (rvm creates no other
directories); a DIR that is a file is a usage error.

exit status: 0 clean finish, 1 program error, 2 usage error (bad arguments, a --plots DIR
that cannot be made), 3 a run trapped or did not finish clean, 141 broken pipe.
"""


def register(sub: Any) -> None:
    s = sub.add_parser(
        "trace", help="Bennett time/space tracer: run a step program under pebbling schedules",
        description="Run a step program N times under a checkpoint (pebbling) schedule on the "
                    "real machine, or price schedules in the pebble-game cost model, and report "
                    "time (moves, instructions) and peak space (checkpoints, cells, bits).",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    s.add_argument("program", nargs="?", help="step program (.rasm or .rbc); omit for the "
                                               "cost model alone")
    s.add_argument("values", nargs="*", metavar="NAME=VALUE",
                   help="initial state or parameter values")
    s.add_argument("--steps", "-n", type=positive_int, required=True, metavar="N",
                   help="number of steps N")
    s.add_argument("--strategy", "-s", choices=list(S.STRATEGIES), help="the schedule")
    s.add_argument("--k", type=positive_int, metavar="K", help="Bennett 1989: segments per level")
    s.add_argument("--levels", type=_natural, metavar="L", help="Bennett 1989: levels")
    s.add_argument("--split", choices=("even", "ceil"), help="Bennett 1989: segment sizes as "
                   "even as possible (default) or NiLang's ceil(n/k)")
    s.add_argument("--budget", type=positive_int, metavar="S", help="Knill: pebble budget")
    s.add_argument("--period", type=positive_int, metavar="P", help="periodic: steps between "
                                                                  "checkpoints")
    s.add_argument("--checkpoints", type=positive_int, metavar="C", help="Revolve: checkpoints")
    s.add_argument("--sweep", action="store_true",
                   help="every strategy (with --budget: Knill and Revolve at that budget)")
    s.add_argument("--model", action="store_true", help="cost model only, even with a program")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--plots", metavar="DIR", help="write trace_frontier.png, trace_pebbles.png "
                                                  "and trace_live.png into DIR")
    s.add_argument("--max-moves", type=positive_int, default=5_000_000, metavar="M",
                   help="run schedules of at most M moves on the machine; longer ones are "
                        "priced by the model (default 5000000)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_trace)


def _natural(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return n


_OWNER = {"k": "bennett", "levels": "bennett", "split": "bennett", "budget": "knill",
          "period": "periodic", "checkpoints": "revolve"}


def _choose(a: argparse.Namespace) -> S.Schedule | list[S.Schedule]:
    from rvm.cli import UsageError

    given = [opt for opt in _OWNER if getattr(a, opt) is not None]
    if a.sweep:
        extra = [o for o in given if o != "budget"]
        if a.strategy or extra:
            raise UsageError("--sweep runs every strategy; only --budget may go with it")
        try:
            return sweep_schedules(a.steps, a.budget)
        except ValueError as e:
            raise UsageError(str(e)) from None
    owners = {_OWNER[o] for o in given}
    name = a.strategy or (owners.pop() if len(owners) == 1 else None)
    if name is None and owners:
        raise UsageError("options of different strategies: " + ", ".join("--" + o for o in given))
    name = name or "bennett"
    wrong = [o for o in given if _OWNER[o] != name]
    if wrong:
        raise UsageError(f"{', '.join('--' + o for o in wrong)} does not apply to "
                         f"--strategy {name}")
    params = {o: getattr(a, o) for o in given}
    try:
        return S.make(name, a.steps, **params)
    except ValueError as e:
        raise UsageError(str(e)) from None


@contextmanager
def _progress(total: int, label: str, enabled: bool) -> Iterator[Any]:
    """A rich progress bar on stderr; yields a callback taking the moves done (or None)."""
    if not enabled or total < PROGRESS_MIN_MOVES or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda k: bar.update(task, completed=k)


def _load_step(a: argparse.Namespace):
    from rvm.cli import Raw, UsageError, collect_values, load_program

    from .machine_run import StepProgram, StepProgramError

    program = load_program(a.program)
    values = collect_values(a.values, None)
    raw = {k: v for k, v in values.items()
           if isinstance(v, Raw) or (isinstance(v, list) and v and all(isinstance(x, Raw)
                                                                       for x in v))}
    cooked = {k: v for k, v in values.items() if k not in raw}
    try:
        return StepProgram(program, cooked, raw)
    except StepProgramError:
        raise
    except (KeyError, ValueError, TypeError, OverflowError) as e:
        raise UsageError(str(e.args[0]) if e.args else str(e)) from None


def cmd_trace(a: argparse.Namespace) -> int:
    # Usage errors are reported here rather than by rvm.cli.main: under `python -m rvm.cli`
    # that module runs as __main__ and its UsageError is a different class from this one.
    from rvm.cli import UsageError

    try:
        return _trace(a)
    except UsageError as e:
        print(f"rvm: error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _trace(a: argparse.Namespace) -> int:
    from .machine_run import StepProgramError, run_schedule

    chosen = _choose(a)
    if a.plots is not None:
        from rvm.cli import output_dir
        output_dir(a.plots, "--plots")       # before the runs: a bad DIR fails at once
    schedules = chosen if isinstance(chosen, list) else [chosen]
    step = None
    if a.program:
        try:
            step = _load_step(a)
        except StepProgramError as e:
            print(f"rvm: error: {a.program}: {e}", file=sys.stderr)
            return EXIT_PROGRAM
    elif a.values:
        from rvm.cli import UsageError
        raise UsageError("NAME=VALUE pairs need a program")
    want_plots = a.plots is not None
    reports: list[Report] = []
    lives: dict[int, list[int]] = {}
    probe = None
    for s in schedules:
        on_machine = step is not None and not a.model and s.runnable
        if on_machine and s.moves > a.max_moves:
            print(f"rvm: note: {s.label} takes {s.moves} moves (over --max-moves "
                  f"{a.max_moves}): priced by the model", file=sys.stderr)
            on_machine = False
        if on_machine:
            with _progress(s.moves, s.label, not a.no_progress) as tick:
                run = run_schedule(step, s.schedule(), s.n, record=want_plots, progress=tick)
            final = step.decode(run.result) if run.result is not None else None
            reports.append(machine_report(s, run, step.state_cells, final))
            if run.live is not None:
                lives[len(reports) - 1] = run.live
        else:
            if step is not None and probe is None:
                _, probe = step.forward(step.initial)     # instructions of one step
            reports.append(model_report(
                s, state_cells=step.state_cells if step else 1,
                work_cells=step.work_cells if step else 0, step_instructions=probe))
    if a.json:
        print(to_json(reports, a.program))
    elif len(reports) == 1:
        _print_one(reports[0])
    else:
        print_reports(reports)
    if want_plots:
        _plots(a, schedules, reports, lives)
    bad = [r for r in reports if r.clean is False]
    for r in bad:
        print(f"rvm: {r.label}: not clean: {r.problem}", file=sys.stderr)
    return EXIT_UNCLEAN if bad else EXIT_OK


def _print_one(r: Report) -> None:
    from rvm.cli import print_table

    rows = [("strategy", r.label), ("N", str(r.n)),
            ("moves", f"{r.moves} ({r.forward} forward, {r.backward} backward)"),
            ("overhead T/N", f"{r.overhead:.3f}"),
            ("instructions", "-" if r.instructions is None else
             ("~" if r.instructions_estimated else "") + str(r.instructions)),
            ("peak checkpoints", f"{r.peak_checkpoints} ({r.peak_states} states with the input)"),
            ("peak cells", str(r.peak_cells)), ("peak bits", str(r.peak_bits)),
            ("Knill optimum at this peak", str(r.knill_at_peak) if r.knill_at_peak else
             f"- (N = {r.n} needs at least {min_budget(r.n)} pebbles)"),
            ("gap to Knill", "-" if r.gap is None else f"{r.gap:.3f}"),
            ("checked by", r.checked),
            ("clean finish", "-" if r.clean is None else "yes" if r.clean else "NO")]
    if r.matches_direct is not None:
        rows.append(("s_N equals direct execution", "yes" if r.matches_direct else "NO"))
    if r.seconds is not None:
        rows.append(("seconds", f"{r.seconds:.3f}"))
    if not r.reversible:
        rows.append(("note", "irreversible reference: it overwrites states to reverse N steps"))
    print_table("trace", rows)
    if r.final_state:
        from rvm.cli import format_value
        print_table("s_N", [(k, format_value(v)) for k, v in r.final_state.items()])


def _plots(a: argparse.Namespace, schedules: list[S.Schedule], reports: list[Report],
           lives: dict[int, list[int]]) -> None:
    from . import plots
    from .pebble import play

    out = Path(a.plots)
    written = [plots.frontier(a.steps, out / "trace_frontier.png", highlight=reports)]
    # The diagrams show one schedule: the only one, or in a sweep the Knill optimum.
    pick = next((j for j, s in enumerate(schedules) if s.strategy == "knill"), 0) \
        if len(schedules) > 1 else 0
    s = schedules[pick]
    if not s.runnable:
        print(f"rvm: note: {s.label} is a cost model only: no pebble diagram", file=sys.stderr)
    elif s.moves > DIAGRAM_MAX_MOVES:
        print(f"rvm: note: {s.moves} moves are too many to draw (at most "
              f"{DIAGRAM_MAX_MOVES}): no pebble diagram", file=sys.stderr)
    else:
        title = f"{s.label}, N = {s.n}: {s.moves} moves, peak {s.peak}"
        written.append(plots.pebbles(s.schedule(), s.n, out / "trace_pebbles.png", title))
        counts = lives.get(pick)
        if counts is None:
            counts = play(s.schedule(), s.n, record=True).live
        written.append(plots.live(counts, out / "trace_live.png", title))
    for p in written:
        print(f"wrote {p}", file=sys.stderr)
