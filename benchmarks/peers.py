"""Speed and memory of rvm's gradients against its peers (issue 4), in one process run.

Runs the same tasks in rvm and in every peer that is installed: C -O2 with a hand-written
adjoint (the physical-limit reference, compiled at run time), plain Python with a hand-written
adjoint, numpy where the task vectorizes, autograd, PyTorch eager and JAX (jit, compile time
reported apart).  Prints one table per task (forward time, gradient time, grad/forward, ratio
to C and to rvm, peak memory), checks every peer's gradient against rvm's (or C's when rvm
has none) before its time counts, prints PASS/MISS per issue-4 target, and writes JSON and a
chart (default benchmarks/out/).

    python benchmarks/peers.py [--quick] [--tasks T1,T4] [--peers rvm,C,jax]
                               [--json out.json] [--chart out.png] [--profile]

Tasks: T1 accumulate loop, T2 Bessel J_2(3) by the series, T3 peak memory of T1's gradient
(fresh processes), T4 unitary matrix multiply by Givens rotations, T5 Petersen embedding loss
(gradient and full Hessian), T6 Petersen gradients at 10^4 points in one call.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))           # the peers/ package beside this script
sys.path.insert(0, str(HERE.parent))    # rvm, isa, assembler from the checkout

from peers.common import PEERS, set_thread_env  # noqa: E402

set_thread_env()

from peers import report, t1_accumulate, t3_memory  # noqa: E402
from peers.common import rvm_grad_missing, versions  # noqa: E402
from peers.engine import Ctx, Row  # noqa: E402
from rich.console import Console  # noqa: E402

TASKS = ("T1", "T2", "T3", "T4", "T5", "T6")
TITLES = {
    "T1": "T1: accumulate loop  for i in 1..n: x += one,  gradient wrt x and one",
    "T2": "T2: Bessel J_2(3.0) by the series,  first and second derivative in z",
    "T4": "T4: unitary matrix multiply by N(N-1)/2 Givens rotations, loss = sum(x), grad wrt x, theta",
    "T5": "T5: Petersen graph embedding loss (k = 4), one gradient and the full Hessian",
    "T6": "T6: Petersen loss gradients at B = 10^4 random points (one batch)",
}


def _task_module(task: str):
    """The module of a timed task, imported lazily so a broken task cannot stop the others."""
    import importlib
    name = {"T1": "t1_accumulate", "T2": "t2_bessel", "T4": "t4_umm", "T5": "t5_petersen",
            "T6": "t6_batch"}[task]
    return importlib.import_module(f"peers.{name}")


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _git_head() -> str:
    """The checkout being measured (other engineers change it while we run)."""
    import subprocess
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=HERE.parent, capture_output=True, text=True).stdout.strip()
        return head + (" (modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _list(text: str, allowed: tuple[str, ...], what: str) -> set[str]:
    items = {s.strip() for s in text.split(",") if s.strip()}
    canon = {a.lower(): a for a in allowed}
    bad = [s for s in items if s.lower() not in canon]
    if bad:
        raise SystemExit(f"unknown {what}: {', '.join(bad)} (choose from {', '.join(allowed)})")
    return {canon[s.lower()] for s in items}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--quick", action="store_true",
                    help="smaller sizes, fewer runs, tighter time limits (for development)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma list of T1..T6")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma list of " + ",".join(PEERS))
    ap.add_argument("--repeat", type=int, default=None,
                    help="timing samples per measurement (median; default 5, quick 3)")
    ap.add_argument("--max-call", type=float, default=None,
                    help="skip a peer whose projected single call exceeds this many seconds "
                         "(default 20, quick 2)")
    ap.add_argument("--t3-max-gb", type=float, default=4.0,
                    help="T3: skip a cell projected to need more memory than this (GB)")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile rvm's gradient calls and print where the time goes")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="output directory")
    ap.add_argument("--json", type=Path, default=None, help="JSON path (default OUT/peers.json)")
    ap.add_argument("--chart", type=Path, default=None, help="PNG path (default OUT/peers.png)")
    ap.add_argument("--markdown", type=Path, default=None,
                    help="also write the figures as markdown tables (for docs/benchmarks.md)")
    a = ap.parse_args(argv)

    tasks = _list(a.tasks, TASKS, "task")
    peers = _list(a.peers, PEERS, "peer")
    # a redirected run still gets the whole table (rich would fold it to 80 columns)
    console = Console() if sys.stdout.isatty() else Console(width=200)
    err = Console(stderr=True, style="dim")
    repeat = a.repeat or (3 if a.quick else 5)
    max_call = a.max_call or (2.0 if a.quick else 20.0)
    ctx = Ctx(quick=a.quick, repeat=repeat, min_sample=0.02 if a.quick else 0.1,
              max_call=max_call, max_total=3 * max_call, peers=peers,
              log=lambda s: err.print(s, highlight=False), profile=a.profile)
    started = time.time()
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(), "cpu": _cpu(), "rvm_commit": _git_head(), "cores": os.cpu_count(),
            "loadavg_start": _loadavg(), "quick": a.quick, "repeat": repeat,
            "max_call_s": max_call, "versions": versions(), "rvm_gradient":
            rvm_grad_missing() or "available"}
    console.print(f"[bold]rvm vs peers[/]  {meta['date']}  rvm {meta['rvm_commit']}  "
                  f"{meta['cpu']} x{meta['cores']}  "
                  f"load {meta['loadavg_start']}  {'QUICK ' if a.quick else ''}"
                  f"median of up to {repeat} samples after a warm-up")
    console.print("  " + "  ".join(f"{k} {v}" for k, v in meta["versions"].items()
                                   if k != "cc"), highlight=False)
    if rvm_grad_missing():
        console.print(f"  [yellow]{rvm_grad_missing()}[/]: rvm rows show the forward only; "
                      "gradients are checked against the C hand adjoint")

    rows: list[Row] = []
    mem: list[report.MemRow] = []
    for task in TASKS:
        if task not in tasks:
            continue
        if task == "T3":
            mem = t3_memory.run(a.quick, peers, ctx.log, a.t3_max_gb * 2**30,
                                60.0 if a.quick else 180.0)
            console.print(report.mem_table(mem, []))
            continue
        try:
            mod = t1_accumulate if task == "T1" else _task_module(task)
        except Exception as e:   # a task whose module cannot load is skipped, not fatal
            console.print(f"[yellow]{task} skipped: {type(e).__name__}: {e}[/]")
            continue
        task_rows = mod.run(ctx)
        rows += task_rows
        console.print(report.task_table(TITLES[task], task_rows, getattr(mod, "NOTES", [])))
        prof = report.profile_table(task, task_rows)
        if prof is not None:
            console.print(prof)

    ts = report.targets(rows, mem)
    report.print_targets(console, ts)
    meta["loadavg_end"] = _loadavg()
    meta["seconds"] = round(time.time() - started, 1)
    json_path = a.json or a.out / "peers.json"
    chart_path = a.chart or a.out / "peers.png"
    report.write_json(json_path, meta, rows, mem, ts)
    if a.markdown:
        import json
        a.markdown.parent.mkdir(parents=True, exist_ok=True)
        a.markdown.write_text(report.markdown(json.loads(json_path.read_text())))
    try:
        report.write_chart(chart_path, rows, mem,
                           f"rvm vs peers, {meta['date']} ({'quick' if a.quick else 'full'} run, "
                           f"load {meta['loadavg_start']})")
        chart_note = f", chart {chart_path}"
    except Exception as e:    # matplotlib trouble must not lose the measured figures
        chart_note = f", chart failed: {type(e).__name__}: {e}"
    console.print(f"\nwrote {json_path}{chart_note}  ({meta['seconds']} s, load at end "
                  f"{meta['loadavg_end']})", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
