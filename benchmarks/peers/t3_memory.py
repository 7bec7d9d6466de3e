"""T3: peak memory of T1's gradient, one fresh process per (peer, n).

rvm is measured in every mode (issue 16: memory stays flat in run length in each): its gradient
(peer "rvm"), its forward run (`rvm.run`, "rvm run"), its tangent (`rvm.jvp`, "rvm jvp") and its
Hessian (`rvm.hessian`, "rvm hessian"), each checked against T1's exact answer.

The child imports the peer, builds T1 for n (the same code as T1), records its resident set
before the gradient, runs one gradient, checks it (d/d one = n) and prints one JSON line with
ru_maxrss.  The parent skips a cell whose projected memory or time (extrapolated from the
smaller n of the same peer) is over budget, so a tape-based peer cannot exhaust the shared
machine.

    python -m peers.t3_memory PEER N        (child; run from benchmarks/)
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from .common import HERE, ROOT, THREAD_ENV, peer_missing, rvm_grad_missing
from .report import MemRow

PEERS = ("rvm", "rvm run", "rvm jvp", "rvm hessian", "torch", "autograd", "jax")
RVM_MODES = ("rvm run", "rvm jvp", "rvm hessian")    # rvm's other modes, run by the rvm peer


def sizes(quick: bool) -> list[int]:
    return [10**4, 10**6] if quick else [10**4, 10**5, 10**6, 10**7]


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 33


def run(quick: bool, peers: set[str], log: Callable[[str], None], max_mem: float,
        max_seconds: float) -> list[MemRow]:
    rows: list[MemRow] = []
    env = dict(os.environ, **THREAD_ENV)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), str(ROOT), env.get("PYTHONPATH", "")])
    for peer in PEERS:
        if (peer if peer not in RVM_MODES else "rvm") not in peers:
            continue
        if peer in RVM_MODES:
            why = peer_missing("rvm")
        else:
            why = peer_missing(peer) or (rvm_grad_missing() if peer == "rvm" else None)
        done: list[MemRow] = []
        for n in sizes(quick):
            row = MemRow(peer, n)
            rows.append(row)
            if why:
                row.note = why
                continue
            note = _over_budget(done, n, max_mem, max_seconds)
            if note:
                row.note = note
                continue
            log(f"T3 {peer} n={n:.0e} (fresh process)")
            limit = min(max_mem, _available_bytes() / 3)
            code, out, errtext, killed = _watch([sys.executable, "-m", "peers.t3_memory",
                                                 peer.replace(" ", "-"), str(n)], env, limit,
                                                max(60.0, 2 * max_seconds))
            if killed:
                row.note = killed
                why = f"skipped: a smaller n was stopped ({killed})"
                continue
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if code != 0 or not lines:
                tail = (errtext.strip().splitlines() or [f"exit {code}"])[-1]
                row.note = f"child failed: {tail[:120]}"
                continue
            d = json.loads(lines[-1])
            row.peak_bytes, row.base_bytes = d["peak"], d["base"]
            row.seconds, row.check = d["seconds"], d["check"]
            done.append(row)
    return rows


def _watch(cmd: list[str], env: dict[str, str], limit: float,
           timeout: float) -> tuple[int, str, str, str | None]:
    """Run the child, polling its resident set: it is killed past `limit` bytes (a tape-based
    peer can grow by GBs, and the machine is shared) or past `timeout` seconds."""
    import tempfile
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=str(HERE.parent))
        t0 = time.monotonic()
        killed = None
        while p.poll() is None:
            rss = _rss_of(p.pid)
            if rss > limit:
                killed = f"killed at {rss / 2**30:.1f} GB RSS (limit {limit / 2**30:.1f} GB)"
            elif time.monotonic() - t0 > timeout:
                killed = f"killed after {timeout:.0f} s"
            if killed:
                p.kill()
                p.wait()
                break
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        return p.returncode, out.read(), err.read(), killed


def _rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _over_budget(done: list[MemRow], n: int, max_mem: float, max_seconds: float) -> str | None:
    """Extrapolate growth and time linearly in n from the largest measured size."""
    if not done:
        return None
    last = done[-1]
    per_step = 0.0      # one size mixes fixed set-up memory (jit compile) into any slope
    if len(done) >= 2 and done[-2].growth is not None and last.growth is not None:
        per_step = max(0.0, (last.growth - done[-2].growth) / (last.n - done[-2].n))
    mem = (last.growth or 0) + per_step * (n - last.n)
    expo = 1.0       # time: linear, or the measured exponent if steeper (autograd's is ~1.3)
    if len(done) >= 2 and done[-2].seconds and last.seconds and done[-2].seconds > 1e-2:
        expo = max(1.0, math.log(last.seconds / done[-2].seconds) / math.log(last.n / done[-2].n))
    secs = (last.seconds or 0.0) * (n / last.n) ** expo
    limit = min(max_mem, _available_bytes() / 3)
    if mem > limit:
        return (f"skipped: would need ~{mem / 2**30:.1f} GB ({per_step:.0f} B/step), "
                f"limit {limit / 2**30:.1f} GB")
    if secs > max_seconds:
        return f"skipped: would take ~{secs:.0f} s (limit {max_seconds:g} s)"
    return None


def _status_kb(key: str) -> int:
    """/proc/self/status field `key` in bytes (0 if absent)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _rss() -> int:
    return _status_kb("VmRSS")


def rvm_mode(mode: str, n: int) -> tuple[Callable[[], Any], Callable[[Any], str | None]]:
    """One of rvm's non-gradient modes on T1's program: the call and its check.

    run: x = n.  jvp along one = 1: dx/d one = n.  hessian of x wrt (x, one): zero (x is
    linear).  Each call is the public one-shot function, as a user writes it."""
    import numpy as np

    import rvm

    from . import rvm_side
    from .t1_accumulate import ONE, PROGRAM, X0

    prog = rvm_side.program(PROGRAM)
    inputs = {"x": X0, "one": ONE, "n": n}
    want: Any
    if mode == "rvm run":
        def call() -> Any:
            return rvm.run(prog, inputs).outputs["x"]
        want = float(n)
    elif mode == "rvm jvp":
        def call() -> Any:
            return rvm.jvp(prog, inputs, {"one": 1.0})["x"]
        want = float(n)
    else:
        def call() -> Any:
            return rvm.hessian(prog, of="x", wrt=["x", "one"], inputs=inputs)
        want = np.zeros((2, 2))

    def check(got: Any) -> str | None:
        ok = np.array_equal(np.asarray(got, dtype=float), np.asarray(want, dtype=float))
        return None if ok else f"got {got!r}, want {want!r}"
    return call, check


def child(peer: str, n: int) -> None:
    import resource

    from . import t1_accumulate as t1
    from .common import compare

    if peer in RVM_MODES:
        warm_call, _ = rvm_mode(peer, 10)
        warm_call()
        call, check = rvm_mode(peer, n)
        base = _rss()
        t0 = time.perf_counter()
        got = call()
        secs = time.perf_counter() - t0
        peak = _status_kb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        bad = check(got)
        print(json.dumps({"peak": peak, "base": base, "seconds": secs,
                          "check": "ok" if bad is None else f"WRONG: {bad}"}))
        return

    warm = t1.FACTORIES[peer](10)   # import-time and first-call set-up (autograd engine,
    if warm.grad is not None:       # jit machinery) belongs to the baseline, not to n
        warm.grad()
    impl = t1.FACTORIES[peer](n)
    if impl.grad is None:
        raise SystemExit(impl.note or "no gradient")
    base = _rss()
    t0 = time.perf_counter()
    g = impl.grad()
    secs = time.perf_counter() - t0
    # VmHWM, not ru_maxrss: Linux carries the parent's peak RSS over fork+exec into the
    # child's ru_maxrss, so a big harness process would mask the child's own peak
    peak = _status_kb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    bad = compare(g, t1.exact(n), rtol=1e-12, atol=0.0)
    print(json.dumps({"peak": peak, "base": base, "seconds": secs,
                      "check": "ok" if bad is None else f"WRONG: {bad}"}))


if __name__ == "__main__":
    for k, v in THREAD_ENV.items():
        os.environ.setdefault(k, v)
    child(sys.argv[1].replace("-", " "), int(sys.argv[2]))
