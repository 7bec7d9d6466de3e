"""rvm on GradBench, offline (issue 20): runs GradBench's own evals, with their own
validation, against rvm and against GradBench's manual (hand-differentiated C++), JAX and
PyTorch tools, playing GradBench's orchestrator over pipes.

    git clone https://github.com/gradbench/gradbench DIR && git -C DIR checkout f26651a7
    python benchmarks/gradbench.py --gradbench DIR [--evals lse,gmm,...]
        [--tools rvm,manual,jax,pytorch] [--quick] [--interleave N] [--json FILE]
        [--chart FILE]

Pinned commit: f26651a7bcc120654fa895adecaf371b8cc059c5 (2025, "Allow tools to declare
multiple accepted outcomes for an eval (#658)").  Needs: a C++ compiler and make (the manual
tool, built here with its Makefile: `make -C tools/manual bin/EVAL`; its cpp/json.hpp, which
GradBench's cpp/Makefile downloads, is taken from /usr/include/nlohmann when present), and
numpy, scipy and pydantic for the evals (ht's also dataclasses-json); jax and torch for those
tools (skipped if missing).

For each eval the driver starts the eval (`python python/gradbench/gradbench/evals/E/run.py`,
in DIR: its validator runs tools/manual/bin/E) and a tool, and forwards each message of the
eval to the tool and each response back, answering the eval's `analysis` messages itself
(they carry the eval's validation).  A tool's time for a message is GradBench's: the mean of
its `evaluate` timings.  It prints a table per eval (objective and derivative time per size,
the derivative's ratio to manual, JAX and PyTorch, validation), writes JSON and a chart, and
ends with `PASS eval tool` / `FAIL eval tool: reason` per eval and tool.  The machine it
was written on is shared, so a tool's run minutes apart from manual's can fall in a busier
spell: `--interleave N` also runs each evaluation on the manual tool, alternately with the
tool on the same input, and reports the ratio of their best runs (the reliable one).  saddle
and particle (nested AD) have four variants, ff, fr, rf and rr, each a row; manual, JAX and
PyTorch have no implementation of them at the pinned commit, so they run on rvm alone,
validated against the outputs their evals expect; `--tools rvm,finite` adds GradBench's C++
finite-difference tool as a compiled reference (its `x finite` ratio is in the JSON).  Exit status: 0 when
every validation passed, 1 when one failed (or a tool failed an evaluation), 2 for usage
errors (no such directory, an unknown eval or tool)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PINNED = "f26651a7bcc120654fa895adecaf371b8cc059c5"
DEFAULT_JSON = ROOT / "benchmarks" / "out" / "gradbench.json"
EVALS = ["lse", "llsq", "det", "ode", "kmeans", "gmm", "ba", "ht", "saddle", "particle"]
# nested AD: four variants (forward or reverse mode outside and inside), each a derivative
NESTED = {"saddle", "particle"}
TOOLS = ["rvm", "manual", "jax", "pytorch"]
# evals whose manual derivative is a closed form rather than a derivative of the objective's
# computation (ode: the exact solution's gradient, no Runge-Kutta step; kmeans: the Newton
# direction from the clusters' means): their interleaved rows also give the derivative's time
# over manual's objective (the C++ primal), the yardstick of gradient cost / primal cost
CLOSED_FORM = {"ode", "kmeans"}
# GradBench's finite-difference C++ tool: a compiled reference for saddle and particle, which
# manual, JAX and PyTorch do not implement; jax-sync, GradBench's JAX tool with each call
# waited for (gradbench_jax_sync.py) (only with --tools ...,finite / ...,jax-sync)
EXTRA_TOOLS = ["finite", "jax-sync"]
DERIVATIVE = {"lse": "gradient", "llsq": "gradient", "det": "gradient", "ode": "gradient",
              "kmeans": "dir", "gmm": "jacobian", "ba": "jacobian",
              "ht": "jacobian",
              "saddle": "ff, fr, rf, rr", "particle": "ff, fr, rf, rr"}
# the evals each GradBench tool implements at the pinned commit (tools/*/evals.txt)
SUPPORTED = {"jax": {"gmm", "kmeans", "llsq", "lse", "ode"},
             "jax-sync": {"gmm", "kmeans", "llsq", "lse", "ode"},
             "pytorch": {"gmm", "kmeans", "lse"},
             "manual": {"ba", "det", "gmm", "ht", "kmeans", "llsq", "lse", "ode"},
             "finite": {"saddle", "particle"}}
# --quick: the first sizes of each eval's defaults, repeated for at least 0.1 s
QUICK = {"lse": ["-n", "2500", "20000"], "llsq": ["-n", "16", "1024"], "det": ["-l", "5", "7"],
         "ode": ["-n", "1000", "-s", "1", "10"], "kmeans": ["-k", "10", "-n", "1000", "-d", "8"],
         "gmm": ["-d", "2", "10", "-k", "5", "10"], "ba": ["--min", "1", "--max", "2"],
         "ht": ["--min", "1", "--max", "2"],
         "saddle": [], "particle": []}


def ht_sizes(gb: Path, args: list[str]) -> tuple[list[str], str | None]:
    """ht's arguments with its sizes cut to the data files the checkout has (the eval's
    run.py crashes on a missing hand file: at the pinned commit's snapshot here,
    hand12_t26_c100000.txt, the largest, is missing from complicated_big and complicated_small,
    the eval's default being complicated_big, 1..12), and a note saying which are skipped."""
    def opt(name: str, default: str) -> str:
        return args[args.index(name) + 1] if name in args else default
    lo, hi = int(opt("--min", "1")), int(opt("--max", "12"))
    folder = f"{opt('--variant', 'complicated')}_{opt('--model', 'big')}"
    data = gb / "evals" / "ht" / "data" / folder
    have = [i for i in range(lo, hi + 1) if next(data.glob(f"hand{i}_*.txt"), None)]
    missing = [i for i in range(lo, hi + 1) if i not in have]
    if not missing:
        return args, None
    if not have or have != list(range(lo, max(have) + 1)):
        raise SystemExit(f"ht: evals/ht/data/{folder} lacks hand files "
                         f"{', '.join(map(str, missing))} within {lo}..{hi}")
    rest = [a for i, a in enumerate(args) if a != "--max" and
            (i == 0 or args[i - 1] != "--max")]
    return rest + ["--max", str(max(have))], \
        f"ht: skipping {', '.join(f'hand{i}' for i in missing)}: not in " \
        f"evals/ht/data/{folder} of this checkout (running hand{lo}..hand{max(have)})"


def tool_command(tool: str, gb: Path) -> list[str]:
    py = gb / "python" / "gradbench" / "gradbench"
    return {"rvm": [sys.executable, str(ROOT / "benchmarks" / "gradbench_rvm" / "tool.py")],
            "manual": [sys.executable, str(py / "cpp.py"), "manual"],
            "finite": [sys.executable, str(py / "cpp.py"), "finite"],
            "jax": [sys.executable, str(py / "tools" / "jax" / "run.py")],
            # the same, each jitted call waited for (gradbench_jax_sync.py: GradBench's
            # timing of an asynchronous dispatch is not the computation's)
            "jax-sync": [sys.executable, str(ROOT / "benchmarks" / "gradbench_jax_sync.py"),
                         str(py / "tools" / "jax" / "run.py")],
            "pytorch": [sys.executable, str(py / "tools" / "pytorch" / "run.py")]}[tool]


def environment(gb: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(gb / "python" / "gradbench"), str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def build_manual(gb: Path, evals: list[str]) -> None:
    """The golden tool: cpp/json.hpp (from the system's nlohmann package if GradBench's
    download is not possible), then `make -C tools/manual bin/E` per eval."""
    json_hpp = gb / "cpp" / "json.hpp"
    if not json_hpp.exists():
        system = Path("/usr/include/nlohmann/json.hpp")
        if system.exists():
            shutil.copy(system, json_hpp)
        else:
            subprocess.run(["make", "-C", str(gb / "cpp")], check=True)
    evals = [e for e in evals if e in SUPPORTED["manual"]]
    if evals:
        subprocess.run(["make", "-C", str(gb / "tools" / "manual")] + [f"bin/{e}" for e in evals],
                       check=True, stdout=subprocess.DEVNULL)


def ask(proc: subprocess.Popen, line: str) -> dict[str, Any] | None:
    """Send one message line to a tool and read its response (None if it stopped)."""
    proc.stdin.write(line if line.endswith("\n") else line + "\n")
    resp = proc.stdout.readline()
    return json.loads(resp) if resp else None


def best(resp: dict[str, Any] | None) -> float | None:
    """The fastest `evaluate` timing of a response, in seconds."""
    runs = [t["nanoseconds"] for t in (resp or {}).get("timings") or []
            if t["name"] == "evaluate"]
    return min(runs) / 1e9 if runs else None


def play(gb: Path, eval_name: str, tool: str, args: list[str], timeout: float,
         interleave: int = 0) -> dict[str, Any]:
    """One eval against one tool: the messages, the responses and the eval's analyses.
    interleave = N > 0: each `evaluate` message also goes to the manual tool, alternately
    with the tool (tool, manual, tool, manual, ...: N times each, the tool's first answer
    being the eval's), and the entry's `interleaved` holds the best run of each."""
    env = environment(gb)
    ev = subprocess.Popen([sys.executable, str(gb / "python/gradbench/gradbench/evals" /
                                               eval_name / "run.py")] + args,
                          cwd=gb, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, bufsize=1)
    tl = subprocess.Popen(tool_command(tool, gb), cwd=gb, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(tl.stderr), daemon=True).start()
    mt = None
    if interleave > 0 and tool != "manual":
        mt = subprocess.Popen(tool_command("manual", gb), cwd=gb, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, bufsize=1)
    procs = [p for p in (ev, tl, mt) if p is not None]
    timer = threading.Timer(timeout, lambda: [p.kill() for p in procs])
    timer.start()
    log: dict[str, Any] = {"evaluations": [], "define": None, "error": None}
    pending: dict[int, dict[str, Any]] = {}
    try:
        for line in ev.stdout:
            msg = json.loads(line)
            if msg["kind"] == "analysis":
                pending[msg["of"]]["valid"] = msg["valid"]
                pending[msg["of"]]["analysis_error"] = msg.get("error")
                ev.stdin.write(json.dumps({"id": msg["id"]}) + "\n")
                continue
            if msg["kind"] == "end":
                break
            t0 = time.perf_counter()
            tl.stdin.write(line if line.endswith("\n") else line + "\n")
            resp_line = tl.stdout.readline()
            if not resp_line:
                log["error"] = "the tool stopped: " + "".join(stderr)[-2000:]
                break
            resp = json.loads(resp_line)
            il = None
            if mt is not None and msg["kind"] != "evaluate":
                ask(mt, line)                   # start, define: the manual tool's answer is
            elif mt is not None and resp.get("success"):    # not the eval's
                mine, theirs = [best(resp)], []
                for r in range(interleave):
                    if r:
                        mine.append(best(ask(tl, line)))
                    theirs.append(best(ask(mt, line)))
                if None not in mine + theirs:
                    il = {"rounds": interleave, "tool": min(mine), "manual": min(theirs)}
            if msg["kind"] == "define":
                log["define"] = resp
            elif msg["kind"] == "evaluate":
                evals = [t["nanoseconds"] for t in resp.get("timings") or []
                         if t["name"] == "evaluate"]
                entry = {"id": msg["id"], "function": msg["function"],
                         "description": msg.get("description", ""),
                         "success": resp.get("success", False), "error": resp.get("error"),
                         "runs": len(evals), "wall": time.perf_counter() - t0,
                         "mean": sum(evals) / len(evals) / 1e9 if evals else None,
                         "min": min(evals) / 1e9 if evals else None,
                         "prepare": sum(t["nanoseconds"] for t in resp.get("timings") or []
                                        if t["name"] == "prepare") / 1e9, "valid": None,
                         "interleaved": il}
                pending[msg["id"]] = entry
                log["evaluations"].append(entry)
            ev.stdin.write(resp_line)
    except (BrokenPipeError, OSError) as e:
        log["error"] = f"pipe closed: {e}"
    finally:
        timer.cancel()
        for p in procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    if not timer.is_alive() and ev.returncode not in (0, None) and log["error"] is None:
        log["error"] = f"stopped after {timeout:.0f} s (the driver's --timeout)" \
            if ev.returncode == -9 else f"the eval exited with status {ev.returncode}"
    return log


def verdict(log: dict[str, Any]) -> str | None:
    """None if every evaluation ran and passed validation, else the reason."""
    if log["define"] is not None and not log["define"].get("success"):
        return "define failed: " + str(log["define"].get("error", ""))[:300]
    for e in log["evaluations"]:
        if not e["success"]:
            return f"{e['function']} {e['description']} failed: " + \
                (e["error"] or "").strip().splitlines()[-1:][0][:300] if e["error"] else ""
        if e["valid"] is False:
            first = (e["analysis_error"] or "").strip().splitlines()
            return f"{e['function']} {e['description']} invalid: " + " ".join(first[:3])[:300]
    if log["error"]:
        return log["error"][:300]
    if not log["evaluations"]:
        return "no evaluation ran"
    return None


def fmt(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


def table(eval_name: str, results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of (size, tool): objective and derivative mean times and the derivative's ratios."""
    rows = []
    deriv = DERIVATIVE[eval_name]
    sizes: list[str] = []
    nested = eval_name in NESTED        # a row per variant (each one is a derivative)

    def size_of(e: dict[str, Any]) -> str:
        return f"{e['function']} {e['description']}" if nested else e["description"]
    for log in results.values():
        for e in log["evaluations"]:
            if size_of(e) not in sizes:
                sizes.append(size_of(e))
    for size in sizes:
        times = {}
        for tool, log in results.items():
            obj = [e for e in log["evaluations"] if size_of(e) == size and
                   e["function"] != deriv and not nested]
            der = [e for e in log["evaluations"] if size_of(e) == size and
                   (e["function"] == deriv or nested)]
            times[tool] = (obj[0] if obj else None, der[0] if der else None)
        for tool, (obj, der) in times.items():
            row = {"eval": eval_name, "size": size, "tool": tool,
                   "objective": obj["mean"] if obj else None,
                   "derivative": der["mean"] if der else None,
                   "prepare": der["prepare"] if der else None,
                   "valid": all(e is None or e["valid"] is not False and e["success"]
                                for e in (obj, der))}
            il = der.get("interleaved") if der else None
            row["best"] = il["tool"] if il else None
            row["manual_best"] = il["manual"] if il else None
            row["x_manual_interleaved"] = il["tool"] / il["manual"] if il else None
            oil = obj.get("interleaved") if obj else None
            row["objective_x_manual_interleaved"] = oil["tool"] / oil["manual"] if oil else None
            # the tool's best derivative over manual's best objective, both interleaved
            row["x_manual_objective_interleaved"] = il["tool"] / oil["manual"] \
                if il and oil else None
            for ref in ("manual", "jax", "pytorch", "finite", "jax-sync"):
                r = times.get(ref, (None, None))[1]
                row[f"x_{ref}"] = row["derivative"] / r["mean"] \
                    if row["derivative"] and r and r["mean"] else None
            rows.append(row)
    return rows


def print_table(eval_name: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n== {eval_name} (derivative: {DERIVATIVE[eval_name]}; mean of the `evaluate` "
          "timings; x REF = derivative time / REF's; interleaved: the best runs of the tool "
          "and manual, alternately on the same input)")
    if eval_name in CLOSED_FORM:
        print(f"   (manual's {DERIVATIVE[eval_name]} is a closed form, not a derivative of its "
              "objective's computation: [derivative / manual's objective] is the tool's best "
              "derivative over manual's best objective, the C++ primal)")
    head = f"{'size':<18} {'tool':<8} {'objective':>11} {'derivative':>11} " \
           f"{'x manual':>9} {'x jax':>8} {'x pytorch':>9} {'interleaved (derivative; objective)':>23}  valid"
    print(head)
    print("-" * len(head))
    for r in rows:
        ratios = [f"{r[k]:.2f}" if r[k] is not None else "-"
                  for k in ("x_manual", "x_jax", "x_pytorch")]
        il = "-" if r.get("x_manual_interleaved") is None else \
            f"{fmt(r['best'])}/{fmt(r['manual_best'])} {r['x_manual_interleaved']:.2f}"
        if r.get("objective_x_manual_interleaved") is not None:
            il += f" (objective {r['objective_x_manual_interleaved']:.2f})"
        if eval_name in CLOSED_FORM and r.get("x_manual_objective_interleaved") is not None:
            il += f" [derivative / manual's objective {r['x_manual_objective_interleaved']:.2f}]"
        print(f"{r['size'][:18]:<18} {r['tool']:<8} {fmt(r['objective']):>11} "
              f"{fmt(r['derivative']):>11} {ratios[0]:>9} {ratios[1]:>8} {ratios[2]:>9} "
              f"{il:>23}  {'yes' if r['valid'] else 'NO'}")


def chart(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    evals = list(dict.fromkeys(r["eval"] for r in rows))
    fig, axes = plt.subplots(1, len(evals), figsize=(4 * len(evals), 3.6), squeeze=False)
    for ax, ev in zip(axes[0], evals):
        for tool in TOOLS:
            pts = [(i, r["derivative"]) for i, r in enumerate(
                [r for r in rows if r["eval"] == ev and r["tool"] == "manual"] or
                [r for r in rows if r["eval"] == ev and r["tool"] == "rvm"])]
            mine = [r for r in rows if r["eval"] == ev and r["tool"] == tool and r["derivative"]]
            if not mine:
                continue
            sizes = list(dict.fromkeys(r["size"] for r in rows if r["eval"] == ev))
            ax.plot([sizes.index(r["size"]) for r in mine], [r["derivative"] for r in mine],
                    "o-", label=tool)
            del pts
        ax.set_yscale("log")
        ax.set_title(f"{ev}: {DERIVATIVE[ev]}")
        ax.set_xlabel("workload (eval's order)")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def available(tool: str) -> str | None:
    """None if the tool can run here, else why not."""
    mod = {"jax": "jax", "jax-sync": "jax", "pytorch": "torch"}.get(tool)
    if mod is None:
        return None
    try:
        __import__(mod)
    except ImportError:
        return f"{mod} is not installed"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gradbench", required=True, type=Path, help="a GradBench checkout")
    ap.add_argument("--evals", default=",".join(EVALS))
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--quick", action="store_true", help="small sizes, 0.1 s per evaluation")
    ap.add_argument("--min-seconds", type=float, default=None,
                    help="passed to the evals (default: theirs, 1 s; --quick: 0.1 s)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per eval and tool")
    ap.add_argument("--interleave", type=int, default=0, metavar="N",
                    help="also run each evaluation on the manual tool, alternately with the "
                         "tool, N times each, and report the ratio of their best runs")
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON)
    ap.add_argument("--chart", type=Path, default=None,
                    help="PNG (default: the --json path with .png)")
    a = ap.parse_args(argv)
    gb = a.gradbench.resolve()
    evals, tools = a.evals.split(","), a.tools.split(",")
    if not (gb / "python" / "gradbench" / "gradbench" / "evals").is_dir():
        ap.error(f"{gb} is not a GradBench checkout")
    for e in evals:
        if e not in EVALS:
            ap.error(f"unknown eval {e!r} (rvm has programs for {', '.join(EVALS)})")
    for t in tools:
        if t not in TOOLS + EXTRA_TOOLS:
            ap.error(f"unknown tool {t!r} ({', '.join(TOOLS + EXTRA_TOOLS)})")
    if a.json == DEFAULT_JSON:
        a.json.parent.mkdir(exist_ok=True)          # benchmarks/out/, not in the repository
    if not a.json.parent.is_dir():
        ap.error(f"{a.json.parent} does not exist")
    try:
        commit = subprocess.run(["git", "-C", str(gb), "rev-parse", "HEAD"], text=True,
                                capture_output=True).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    if commit != PINNED:
        print(f"note: {gb} is at {commit}, not the pinned {PINNED}", file=sys.stderr)
    print(f"GradBench {commit[:10]} at {gb}; evals {', '.join(evals)}; tools {', '.join(tools)}"
          f"{'; quick' if a.quick else ''}", flush=True)
    build_manual(gb, evals)
    min_seconds = a.min_seconds if a.min_seconds is not None else (0.1 if a.quick else None)
    verdicts: list[tuple[str, str, str | None]] = []
    all_rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"gradbench_commit": commit, "quick": a.quick, "evals": {}}
    for ev in evals:
        args = list(QUICK[ev]) if a.quick else []
        if ev == "ht":
            args, note = ht_sizes(gb, args)
            if note:
                print(f"  {note}", flush=True)
        if min_seconds is not None:
            args += ["--min-seconds", str(min_seconds)]
        results = {}
        for tool in tools:
            if tool in SUPPORTED and ev not in SUPPORTED[tool]:
                continue                        # GradBench has no such implementation
            why = available(tool)
            if why:
                print(f"  {ev} {tool}: skipped ({why})", flush=True)
                continue
            t0 = time.perf_counter()
            log = play(gb, ev, tool, args, a.timeout,
                       a.interleave if ev in SUPPORTED["manual"] else 0)
            results[tool] = log
            v = verdict(log)
            verdicts.append((ev, tool, v))
            print(f"  {ev} {tool}: {len(log['evaluations'])} evaluations in "
                  f"{time.perf_counter() - t0:.0f} s{'' if v is None else ': ' + v}", flush=True)
            # written after every tool, so that a run stopped later keeps what it measured
            out["evals"][ev] = {"args": args, "tools": results, "rows": table(ev, results)}
            a.json.write_text(json.dumps(out, indent=1))
        rows = table(ev, results)
        print_table(ev, rows)
        all_rows += rows
        out["evals"][ev] = {"args": args, "tools": results, "rows": rows}
    a.json.write_text(json.dumps(out, indent=1))
    chart_path = a.chart or a.json.with_suffix(".png")
    if all_rows:
        chart(all_rows, chart_path)
    print(f"\nwrote {a.json} and {chart_path}")
    for ev, tool, v in verdicts:
        print(f"PASS {ev} {tool}" if v is None else f"FAIL {ev} {tool}: {v}")
    return 1 if any(v is not None for _, _, v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
