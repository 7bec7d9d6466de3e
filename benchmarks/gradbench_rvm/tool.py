"""rvm as a GradBench tool: reads GradBench's JSON-lines messages on stdin and answers on
stdout, as GradBench's Python tools do (python/gradbench/gradbench/tools/*/run.py):

* `start` -> {"tool": "rvm"};
* `define` -> success when programs/gradbench/ has the eval;
* `evaluate` -> the function run at least `min_runs` times and for at least `min_seconds`,
  with one `evaluate` timing per run.  What depends only on the input (parse, assemble the
  program at the input's sizes, build or find its native code, store the inputs, one first
  call, then one run of the function) is done before and reported as one `prepare` timing,
  as GradBench's C++ tools report theirs (their constructors allocate and zero their working
  arrays); GradBench's scores count the `evaluate` timings only.  The untimed run is there
  because the first run of a gradient's fast path writes the machine's arrays for the first
  time: at ba1 (p = 31,843) it took 284-370 ms against 40-60 ms for the next, the kernel
  zeroing fresh pages (clear_page_erms 26% of a profile of prepare and one run).  The result
  becomes JSON after the runs, untimed, as in GradBench's Python tools (gradbench.wrap's
  `post`).

Run: `python benchmarks/gradbench_rvm/tool.py` (the driver benchmarks/gradbench.py does)."""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# one thread, as GradBench's manual tool (its Makefile's default) and JAX's tool pinned to one
# core: numpy's OpenBLAS would start a thread per core, idle here but scheduled beside the runs
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

from gradbench_rvm import programs  # noqa: E402


def evaluate(message: dict[str, Any]) -> dict[str, Any]:
    inp = message["input"]
    t0 = time.perf_counter_ns()
    fn = programs.prepare(message["module"], message["function"], inp)
    fn.run()        # one untimed run: the machine's arrays touched once (see the docstring)
    timings = [{"name": "prepare", "nanoseconds": time.perf_counter_ns() - t0}]
    min_runs, min_seconds = int(inp.get("min_runs", 1)), float(inp.get("min_seconds", 0))
    elapsed, runs, out = 0.0, 0, None
    while runs < min_runs or elapsed < min_seconds:
        start = time.perf_counter_ns()
        out = fn.run()
        ns = time.perf_counter_ns() - start
        timings.append({"name": "evaluate", "nanoseconds": ns})
        elapsed += ns / 1e9
        runs += 1
    return {"success": True, "output": fn.post(out), "timings": timings}


def respond(message: dict[str, Any]) -> dict[str, Any]:
    kind = message["kind"]
    if kind == "start":
        return {"tool": "rvm"}
    if kind == "define":
        ok = message["module"] in programs.MODULES
        return {"success": ok} if ok else \
            {"success": False, "error": f"rvm has no program for {message['module']!r}"}
    if kind == "evaluate":
        try:
            return evaluate(message)
        except Exception as e:                  # a failed evaluation is a response, not a crash
            return {"success": False, "error": "".join(traceback.format_exception(e))}
    return {}


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        print(json.dumps({"id": message["id"]} | respond(message)), flush=True)


if __name__ == "__main__":
    try:
        main()
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
