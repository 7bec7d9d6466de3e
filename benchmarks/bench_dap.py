"""Memory of a DAP session forward and back: `rvm debug --dap` runs programs/accumulate.rasm
for about 10^5 and 10^7 steps (each in a fresh server process), driven as an editor would:
continue to the end, reverseContinue to the start, continue again, then stepBack a few lines
and goto the middle.  It prints the server's peak RSS (VmHWM) after launch and after the
session: nothing is recorded per step, so the two sizes should match.

    python benchmarks/bench_dap.py            # 10^5 and 10^7 steps
    python benchmarks/bench_dap.py 1000000    # other step counts
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Client:
    def __init__(self, p: subprocess.Popen):
        self.p = p
        self.seq = 0

    def _read(self) -> dict:
        length = 0
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise EOFError("the server closed the connection")
            line = line.strip()
            if not line:
                break
            k, _, v = line.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
        return json.loads(self.p.stdout.read(length))

    def request(self, command: str, arguments: dict | None = None, until: str | None = None):
        self.seq += 1
        data = json.dumps({"seq": self.seq, "type": "request", "command": command,
                           "arguments": arguments or {}}).encode()
        self.p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        self.p.stdin.flush()
        response, event = None, None
        while response is None or (until is not None and event is None):
            msg = self._read()
            if msg["type"] == "response" and msg["request_seq"] == self.seq:
                if not msg["success"]:
                    raise RuntimeError(msg.get("message"))
                response = msg
            elif msg["type"] == "event" and msg["event"] == until:
                event = msg
        return response, event

    def t(self) -> int:
        r, _ = self.request("stackTrace", {"threadId": 1})
        name = r["body"]["stackFrames"][0]["name"]
        return int(re.search(r"t=(\d+)", name).group(1))


def rss_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def session(steps: int) -> dict:
    n = max(1, steps // 4)            # accumulate.rasm: 4 steps per iteration
    p = subprocess.Popen([sys.executable, "-m", "rvm.cli", "debug", "--dap"], cwd=ROOT,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    c = Client(p)
    try:
        c.request("initialize", {"adapterID": "rvm"})
        c.request("launch", {"program": "programs/accumulate.rasm", "inputs": {"n": n},
                             "stopOnEntry": True}, until="initialized")
        c.request("configurationDone", until="stopped")
        before = rss_kib(p.pid, "VmHWM")
        t0 = time.perf_counter()
        c.request("continue", {"threadId": 1}, until="stopped")
        end = c.t()
        c.request("reverseContinue", {"threadId": 1}, until="stopped")
        assert c.t() == 0
        c.request("continue", {"threadId": 1}, until="stopped")
        for _ in range(5):
            c.request("stepBack", {"threadId": 1}, until="stopped")
        c.request("goto", {"threadId": 1, "targetId": end // 2}, until="stopped")
        assert c.t() == end // 2
        elapsed = time.perf_counter() - t0
        peak = rss_kib(p.pid, "VmHWM")
        c.request("disconnect")
        p.wait(timeout=60)
        return {"steps": end, "before": before, "peak": peak, "seconds": elapsed}
    finally:
        if p.poll() is None:
            p.kill()


def main(argv: list[str]) -> None:
    counts = [int(a) for a in argv] or [10**5, 10**7]
    print(f"{'steps':>10}  {'peak RSS':>10}  {'(after launch)':>14}  {'steps run':>10}  "
          f"{'time':>8}")
    for steps in counts:
        r = session(steps)
        # the session runs end + end + end + end/2 steps (forward, back, forward, goto)
        print(f"{r['steps']:>10}  {r['peak'] / 1024:>7.1f} MiB  {r['before'] / 1024:>10.1f} MiB"
              f"  {int(r['steps'] * 3.5):>10}  {r['seconds']:>7.2f}s")


if __name__ == "__main__":
    main(sys.argv[1:])
