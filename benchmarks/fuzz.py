"""Run the fuzz harnesses of tests/fuzzing.py for a while (issue 19).

    python benchmarks/fuzz.py --minutes 10                  # every harness, time shared equally
    python benchmarks/fuzz.py --harness rbc --count 5000    # one harness, 5000 inputs
    python benchmarks/fuzz.py --harness asm --seed 607 --count 1 -v     # reproduce one input

Each input is drawn from (harness, seed) alone; seeds run upward from --seed.  The inputs run
in a worker process with a memory limit, so that a crash (the worker dies: a segfault, an abort)
and a hang in C code (the worker does not answer within twice the time limit) are caught and
counted; the worker is then restarted.  Failing inputs are written to --out (if given), one file
per failure with the seed in its name.  The final table gives the inputs tried per harness and
their outcomes: ok, rejected (a clean AssemblyError / InvalidBytecode), trap (a clean RVMError
of a run); failures: traceback, hang, crash, corruption.  Exit status 1 if anything failed.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

KINDS = ("ok", "rejected", "trap", "traceback", "hang", "crash", "corruption")
FAILS = ("traceback", "hang", "crash", "corruption")


def _worker(conn, time_limit: float, native_every: int, memory_gb: float) -> None:
    try:
        import resource
        limit = int(memory_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    import warnings
    warnings.simplefilter("ignore")
    import fuzzing
    while True:
        msg = conn.recv()
        if msg is None:
            return
        harness, seed = msg
        out = fuzzing.run_case(harness, seed, time_limit, native_every)
        data = out.data if out.failed else None
        conn.send((out.kind, out.detail, out.note, data))


class Worker:
    """A worker process that runs one input at a time and can be killed and restarted."""

    def __init__(self, args):
        self.args = args
        self.ctx = mp.get_context("spawn")
        self.proc = None
        self.conn = None
        self.start()

    def start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, self.args.time_limit,
                                                           self.args.native_every,
                                                           self.args.memory_gb), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.proc.join(5)
        except (OSError, BrokenPipeError):
            pass
        self.kill()

    def run(self, harness: str, seed: int):
        """(kind, detail, note, data) of one input; a crash or hang restarts the worker."""
        try:
            self.conn.send((harness, seed))
            # the first input of a worker also imports numpy, rvm and the corpus
            if self.conn.poll(2 * self.args.time_limit + 30):
                return self.conn.recv()
            self.kill()
            self.start()
            return ("hang", f"no answer in {2 * self.args.time_limit + 30:g} s (killed)",
                    "", None)
        except (EOFError, OSError, BrokenPipeError):
            self.proc.join(5)
            code = self.proc.exitcode
            self.kill()
            self.start()
            return ("crash", f"the worker died (exit code {code})", "", None)


def main(argv=None) -> int:
    import fuzzing
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--harness", action="append", choices=fuzzing.HARNESSES,
                    help="a harness to run (repeatable; default: all)")
    ap.add_argument("--minutes", type=float, help="run for this long (time shared equally)")
    ap.add_argument("--count", type=int, help="inputs per harness")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--time-limit", type=float, default=fuzzing.TIME_LIMIT,
                    help="seconds per input before it counts as a hang (default %(default)s)")
    ap.add_argument("--native-every", type=int, default=4,
                    help="compare native and interpreted gradients on every Nth float program "
                         "(0: never; default %(default)s)")
    ap.add_argument("--memory-gb", type=float, default=3.0,
                    help="address-space limit of the worker (default %(default)s GB)")
    ap.add_argument("--out", type=Path, help="directory for failing inputs")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each failure in full")
    a = ap.parse_args(argv)
    harnesses = a.harness or list(fuzzing.HARNESSES)
    try:
        import rvm.machine  # noqa: F401 - the compiled core must load before anything is fuzzed
    except ImportError as e:
        print(f"fuzz: rvm does not load: {e}", file=sys.stderr)
        return 2
    if a.minutes is None and a.count is None:
        a.minutes = 1.0
    deadline = None if a.minutes is None else time.monotonic() + 60 * a.minutes

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table
    console = Console(stderr=True)
    console.print(f"fuzzing {', '.join(harnesses)} from seed {a.seed}"
                  + (f" for {a.minutes:g} min" if a.minutes is not None else "")
                  + (f", {a.count} inputs each" if a.count is not None else "")
                  + f" (time limit {a.time_limit:g} s per input, pid {os.getpid()})")
    counts = {h: Counter() for h in harnesses}
    notes = {h: Counter() for h in harnesses}
    spent = dict.fromkeys(harnesses, 0.0)
    nxt = dict.fromkeys(harnesses, a.seed)
    failures: dict[str, list[int]] = defaultdict(list)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
    # the native code of random programs goes to a cache of this run (removed at the end),
    # not to the user's, unless RVM_CACHE_DIR says where
    own_cache = None
    if not os.environ.get("RVM_CACHE_DIR"):
        import tempfile
        own_cache = tempfile.mkdtemp(prefix="rvm-fuzz-native-")
        os.environ["RVM_CACHE_DIR"] = own_cache
    worker = Worker(a)
    t_start = time.monotonic()
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[n]}"),
                      TimeElapsedColumn(), console=console, transient=False) as progress:
            total = 60 * a.minutes if a.minutes is not None else a.count * len(harnesses)
            bar = progress.add_task("fuzzing", total=total, n="")
            while True:
                live = [h for h in harnesses if a.count is None or nxt[h] - a.seed < a.count]
                if not live or (deadline is not None and time.monotonic() >= deadline):
                    break
                h = min(live, key=lambda k: spent[k])       # equal time per harness
                seed = nxt[h]
                nxt[h] += 1
                t0 = time.monotonic()
                kind, detail, note, data = worker.run(h, seed)
                spent[h] += time.monotonic() - t0
                counts[h][kind] += 1
                if note:
                    notes[h][note] += 1
                if kind in FAILS:
                    failures[h].append(seed)
                    progress.console.print(f"[red]{h} seed {seed}: {kind}[/red]: "
                                           f"{detail if a.verbose else detail[-300:]}\n"
                                           f"  reproduce: {fuzzing.reproduce_hint(h, seed)}")
                    if a.out and data is not None:
                        ext = {"asm": ".txt", "rbc": ".rbc", "prog": ".rasm"}[h]
                        p = a.out / f"{h}-{seed}-{kind}{ext}"
                        p.write_bytes(data if isinstance(data, bytes) else data.encode())
                elif a.verbose and a.count == 1:
                    progress.console.print(f"{h} seed {seed}: {kind} {note} {detail}")
                done = time.monotonic() - t_start if a.minutes is not None else \
                    sum(nxt[k] - a.seed for k in harnesses)
                progress.update(bar, completed=done, n=" ".join(
                    f"{k} {sum(counts[k].values())}" for k in harnesses))
    except KeyboardInterrupt:
        console.print("interrupted")
    finally:
        worker.stop()
        if own_cache is not None:
            import shutil
            shutil.rmtree(own_cache, ignore_errors=True)

    table = Table(title=f"fuzzing: {time.monotonic() - t_start:.0f} s, seeds from {a.seed}")
    table.add_column("harness")
    table.add_column("inputs", justify="right")
    for k in KINDS:
        table.add_column(k, justify="right", style="red" if k in FAILS else None)
    table.add_column("notes")
    table.add_column("failing seeds")
    for h in harnesses:
        c = counts[h]
        table.add_row(h, str(sum(c.values())), *[str(c[k]) for k in KINDS],
                      ", ".join(f"{n} {v}" for n, v in sorted(notes[h].items())),
                      " ".join(map(str, failures[h][:12])) + (" ..." if len(failures[h]) > 12
                                                              else ""))
    out = Console()
    if not out.is_terminal:
        out = Console(width=200)
    out.print(table)
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
