"""`rvm debug --dap` driven as an editor would, over stdio and over TCP, with every message
checked against the published Debug Adapter Protocol schema (tests/data/dap/, MIT).

Behaviours (issue 18): stepBack returns to the previous line's state exactly;
reverseContinue stops at the breakpoints and data breakpoints a forward run met; goto to a
step t equals a direct run; a trap is an exception stop with its values, and stepping back
from it works; pause ends a long run."""
from __future__ import annotations

import json
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import rvm
from rvm.machine import Machine

jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema (the test extra)")

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "tests" / "data" / "dap" / "debugAdapterProtocol.json"
TRACED = "tests/data/dap/traced.rasm"
AVERAGE = "programs/debug/average.rasm"
RFIB = "programs/rfib.rasm"
LIB_RFIB = str(ROOT / "programs" / "lib" / "rfib.rasm")
TIMEOUT = 30


class Schema:
    """Validators for the protocol's definitions (`StoppedEvent`, `NextResponse`, ...)."""

    def __init__(self) -> None:
        self.doc = json.loads(SCHEMA.read_text())
        self.defs = self.doc["definitions"]
        self.cache: dict[str, object] = {}

    def check(self, message: dict, sent: bool = False) -> None:
        kind = message["type"]
        if kind == "request":
            name = message["command"][0].upper() + message["command"][1:] + "Request"
        elif kind == "response":
            name = (message["command"][0].upper() + message["command"][1:] + "Response"
                    if message["success"] else "ErrorResponse")
            if name not in self.defs:
                name = "Response"
        else:
            name = message["event"][0].upper() + message["event"][1:] + "Event"
        assert name in self.defs, f"no schema for {name}"
        v = self.cache.get(name)
        if v is None:
            v = jsonschema.Draft4Validator({"$ref": f"#/definitions/{name}",
                                            "definitions": self.defs})
            self.cache[name] = v
        errors = sorted(v.iter_errors(message), key=str)
        assert not errors, f"{name} does not match the DAP schema: {errors[0].message}\n" \
                           f"{json.dumps(message)[:2000]}"


SCHEMA_CHECK = Schema()


class Client:
    """A DAP client over a byte stream pair: every message both ways is schema-checked."""

    def __init__(self, rfile, wfile):
        self.rfile, self.wfile = rfile, wfile
        self.seq = 0
        self.inbox: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        self.outputs: list[str] = []
        self.pending_events: list[dict] = []
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self) -> None:
        while True:
            headers = {}
            while True:
                line = self.rfile.readline()
                if not line:
                    self.inbox.put(None)
                    return
                line = line.strip()
                if not line:
                    break
                k, _, v = line.decode().partition(":")
                headers[k.strip().lower()] = v.strip()
            body = self.rfile.read(int(headers["content-length"]))
            self.inbox.put(json.loads(body))

    def send(self, command: str, arguments: dict | None = None) -> int:
        self.seq += 1
        msg = {"seq": self.seq, "type": "request", "command": command}
        if arguments is not None:
            msg["arguments"] = arguments
        SCHEMA_CHECK.check(msg, sent=True)
        data = json.dumps(msg).encode()
        self.wfile.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        self.wfile.flush()
        return self.seq

    def _next(self) -> dict:
        msg = self.inbox.get(timeout=TIMEOUT)
        assert msg is not None, "the server closed the connection"
        SCHEMA_CHECK.check(msg)
        if msg["type"] == "event":
            self.events.append(msg)
            if msg["event"] == "output":
                self.outputs.append(msg["body"]["output"])
            else:
                self.pending_events.append(msg)
        return msg

    def request(self, command: str, arguments: dict | None = None, ok: bool = True) -> dict:
        seq = self.send(command, arguments)
        while True:
            msg = self._next()
            if msg["type"] == "response" and msg["request_seq"] == seq:
                assert msg["command"] == command
                if ok:
                    assert msg["success"], msg.get("message")
                return msg

    def event(self, name: str) -> dict:
        while True:
            for i, e in enumerate(self.pending_events):
                if e["event"] == name:
                    return self.pending_events.pop(i)
            self._next()

    def stop(self, command: str, arguments: dict | None = None) -> dict:
        """Send an execution request and return its stopped event's body."""
        self.request(command, arguments if arguments is not None else {"threadId": 1})
        return self.event("stopped")["body"]

    # ---- state ------------------------------------------------------------------------------

    def frames(self) -> list[dict]:
        return self.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]

    def t(self) -> int:
        return int(re.search(r"t=(\d+)", self.frames()[0]["name"]).group(1))

    def variables(self, ref: int, deep: bool = True) -> dict[str, object]:
        out = {}
        for v in self.request("variables", {"variablesReference": ref})["body"]["variables"]:
            if deep and v["variablesReference"]:
                out[v["name"]] = self.variables(v["variablesReference"])
            else:
                out[v["name"]] = v["value"]
        return out

    def scopes(self, frame_id: int | None = None) -> dict[str, int]:
        if frame_id is None:
            frame_id = self.frames()[0]["id"]
        body = self.request("scopes", {"frameId": frame_id})["body"]
        return {s["name"]: s["variablesReference"] for s in body["scopes"]}

    def snapshot(self) -> tuple:
        """Where the machine is and every value the editor can see, in every frame."""
        frames = self.frames()
        values = []
        for f in frames:
            scopes = self.scopes(f["id"])
            values.append({name: self.variables(ref) for name, ref in scopes.items()})
        return [(f["name"], f.get("line")) for f in frames], values

    def start(self, program: str, inputs: dict | None = None, stop_on_entry: bool = True,
              breakpoints: dict[str, list[dict]] | None = None) -> dict:
        r = self.request("initialize", {"clientID": "pytest", "adapterID": "rvm",
                                        "linesStartAt1": True, "columnsStartAt1": True,
                                        "pathFormat": "path"})
        caps = r["body"]
        self.request("launch", {"program": program, "inputs": inputs or {},
                                "stopOnEntry": stop_on_entry})
        self.event("initialized")
        for path, bps in (breakpoints or {}).items():
            self.request("setBreakpoints", {"source": {"path": path}, "breakpoints": bps})
        self.request("setExceptionBreakpoints", {"filters": ["trap"]})
        self.request("configurationDone")
        return caps


def spawn_stdio():
    p = subprocess.Popen([sys.executable, "-m", "rvm.cli", "debug", "--dap"], cwd=ROOT,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    return p, Client(p.stdout, p.stdin)


def close(p, c: Client) -> None:
    c.request("disconnect", {})
    p.wait(timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr.read().decode()


@pytest.fixture
def stdio():
    p, c = spawn_stdio()
    yield c
    if getattr(c, "closed", False):
        p.wait(timeout=TIMEOUT)
    else:
        try:
            close(p, c)
        finally:
            if p.poll() is None:
                p.kill()


# ---- the session over stdio ---------------------------------------------------------------

def test_initialize_launch_inspect_and_set(stdio):
    c = stdio
    caps = c.start(TRACED, {"xs": [2, 7, 1, 8]},
                   breakpoints={str(ROOT / TRACED): [{"line": 9}]})
    for cap in ("supportsStepBack", "supportsConditionalBreakpoints",
                "supportsHitConditionalBreakpoints", "supportsDataBreakpoints",
                "supportsSetVariable", "supportsGotoTargetsRequest", "supportsRestartRequest",
                "supportsEvaluateForHovers", "supportsConfigurationDoneRequest",
                "supportsFunctionBreakpoints", "supportsExceptionInfoRequest"):
        assert caps[cap] is True, cap
    assert c.event("stopped")["body"]["reason"] == "entry"
    assert c.request("threads")["body"]["threads"] == [{"id": 1, "name": "rvm"}]
    body = c.stop("continue")
    assert body["reason"] == "breakpoint"
    frame = c.frames()[0]
    assert frame["source"]["path"] == str(ROOT / TRACED) and frame["line"] == 9
    scopes = c.scopes()
    assert set(scopes) == {"Parameters", "Locals", "Ancillas not yet zero", "Globals",
                           "Value stack"}
    g = c.variables(scopes["Globals"])
    assert g["xs"] == {"[0]": "2", "[1]": "7", "[2]": "1", "[3]": "8"}
    assert g["f"] == "0.5" and g["total"] == "2"
    assert c.variables(scopes["Locals"]) == {"i": "0"}
    # arrays are expandable, with their count; values print as `rvm run` prints them
    raw = c.request("variables", {"variablesReference": scopes["Globals"]})["body"]
    xs = next(v for v in raw["variables"] if v["name"] == "xs")
    assert xs["value"] == "[2, 7, 1, 8]" and xs["indexedVariables"] == 4
    assert xs["type"] == "int[4]"
    # the trace instruction's report is an output event
    c.stop("next")
    assert any(o.startswith("partial i=0 total=2") for o in c.outputs), c.outputs
    # evaluate: hover and the print expressions
    frame_id = c.frames()[0]["id"]
    r = c.request("evaluate", {"expression": "xs[i] * 10 + total", "frameId": frame_id,
                               "context": "hover"})
    assert r["body"]["result"] == "22"
    r = c.request("evaluate", {"expression": "nosuch", "frameId": frame_id,
                               "context": "hover"}, ok=False)
    assert not r["success"] and "nosuch" in r["message"]
    # the debug console also takes the terminal debugger's commands
    r = c.request("evaluate", {"expression": "history total", "frameId": frame_id,
                               "context": "repl"})
    assert "1 write before" in r["body"]["result"]
    # setVariable forks the timeline and says so
    r = c.request("setVariable", {"variablesReference": c.scopes()["Globals"],
                                  "name": "total", "value": "100"})
    assert r["body"]["value"] == "100"
    assert any("forked" in o for o in c.outputs)
    assert c.variables(c.scopes()["Globals"])["total"] == "100"
    xs_ref = next(v for v in c.request("variables", {"variablesReference":
                  c.scopes()["Globals"]})["body"]["variables"] if v["name"] == "xs")
    r = c.request("setVariable", {"variablesReference": xs_ref["variablesReference"],
                                  "name": "[2]", "value": "5"})
    assert r["body"]["value"] == "5"
    # restart: back to t=0 with the inputs, the breakpoints kept
    c.request("restart", {})
    c.event("stopped")
    assert c.t() == 0
    assert c.stop("continue")["reason"] == "breakpoint"
    assert c.variables(c.scopes()["Globals"])["total"] == "2"


def test_step_back_returns_to_each_previous_line_exactly(stdio):
    c = stdio
    c.start(AVERAGE)
    c.event("stopped")
    seen = [c.snapshot()]
    for _ in range(14):
        body = c.stop("next")
        assert body["reason"] == "step"
        seen.append(c.snapshot())
    for _ in range(3):
        c.stop("stepIn")
        seen.append(c.snapshot())
    for expected in reversed(seen[:-1]):
        c.stop("stepBack")
        assert c.snapshot() == expected
    # instruction granularity goes one instruction
    t = c.t()
    c.stop("next", {"threadId": 1, "granularity": "instruction"})
    c.stop("stepIn", {"threadId": 1, "granularity": "instruction"})
    assert c.t() == t + 2
    c.stop("stepBack", {"threadId": 1, "granularity": "instruction"})
    assert c.t() == t + 1


def test_reverse_continue_meets_the_forward_stops_backward(stdio):
    c = stdio
    c.start(RFIB, {"n": 5},
            breakpoints={LIB_RFIB: [{"line": 17, "condition": "n == 2"}]})
    c.event("stopped")
    forward = []
    while True:
        body = c.stop("continue")
        if body["reason"] != "breakpoint":
            break
        forward.append(c.t())
    assert len(forward) >= 3 and "End of the program" in body["description"]
    backward = []
    while True:
        body = c.stop("reverseContinue")
        if body["reason"] != "breakpoint":
            break
        backward.append(c.t())
    assert backward == forward[::-1]
    assert c.t() == 0
    # hit counts: only the 2nd hit stops
    r = c.request("setBreakpoints", {"source": {"path": LIB_RFIB}, "breakpoints":
                                     [{"line": 17, "condition": "n == 2",
                                       "hitCondition": "2"}]})
    assert r["body"]["breakpoints"][0]["verified"]
    assert c.stop("continue")["reason"] == "breakpoint" and c.t() == forward[1]
    c.request("setBreakpoints", {"source": {"path": LIB_RFIB}, "breakpoints": []})
    # data breakpoints: a write watch on the global `out`, both directions
    c.request("goto", {"threadId": 1, "targetId": 0})
    c.event("stopped")
    info = c.request("dataBreakpointInfo", {"variablesReference": c.scopes()["Globals"],
                                            "name": "out"})["body"]
    assert info["dataId"] and "write" in info["accessTypes"]
    r = c.request("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"],
                                                          "accessType": "write"}]})
    assert r["body"]["breakpoints"][0]["verified"]
    writes = []
    while True:
        body = c.stop("continue")
        if body["reason"] != "data breakpoint":
            break
        writes.append((c.t(), body["description"]))
    assert [d.split(" by")[0] for _, d in writes] == [f"out {k} -> {k + 1}" for k in range(5)]
    back = []
    while True:
        body = c.stop("reverseContinue")
        if body["reason"] != "data breakpoint":
            break
        back.append((c.t(), body["description"]))
    # backward: just before each write, reported old -> new in the order of time
    assert [t + 1 for t, _ in back] == [t for t, _ in writes][::-1]
    assert [d.split(" by")[0] for _, d in back] == [f"out {k} -> {k + 1}"
                                                   for k in range(4, -1, -1)]
    # a read data breakpoint stops before the instructions that read n, both directions
    c.request("goto", {"threadId": 1, "targetId": 0})
    c.event("stopped")
    info = c.request("dataBreakpointInfo", {"variablesReference": c.scopes()["Globals"],
                                            "name": "n"})["body"]
    c.request("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"],
                                                      "accessType": "read"}]})
    reads = [c.stop("continue") for _ in range(2)]
    assert all(b["reason"] == "data breakpoint" and "n = 5 read by" in b["description"]
               for b in reads)
    t_read = c.t()
    assert c.stop("reverseContinue")["reason"] == "data breakpoint" and c.t() < t_read
    # a function breakpoint stops in both directions too
    c.request("setDataBreakpoints", {"breakpoints": []})
    r = c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "rfib",
                                                              "condition": "n == 1"}]})
    assert r["body"]["breakpoints"][0]["verified"]
    body = c.stop("continue")
    assert body["reason"] == "function breakpoint"
    t1 = c.t()
    c.stop("continue")
    t2 = c.t()
    assert t2 > t1
    assert c.stop("reverseContinue")["reason"] == "function breakpoint" and c.t() == t1
    c.stop("continue")
    assert c.t() == t2


def test_goto_a_step_equals_a_direct_run(stdio):
    c = stdio
    c.start(RFIB, {"n": 5})
    c.event("stopped")
    c.stop("continue")                      # to the end
    end = c.t()
    prog = rvm.load(ROOT / RFIB)
    targets = c.request("gotoTargets", {"source": {"path": LIB_RFIB}, "line": 13})
    ts = [g["id"] for g in targets["body"]["targets"]]
    assert len(ts) == 1 and ts[0] < end          # only a previous time, at the end
    r = c.request("goto", {"threadId": 1, "targetId": end + 1}, ok=False)
    assert not r["success"] and "outside the run" in r["message"]
    for t in [ts[0], 7, end - 3, 1]:
        c.request("goto", {"threadId": 1, "targetId": t})
        assert c.event("stopped")["body"]["reason"] == "goto"
        assert c.t() == t
        m = Machine(prog)
        m.reset({"n": 5})
        m.step(t)
        frames = c.frames()
        assert frames[0]["line"] == prog.location(m.pc)[1] and len(frames) == m.depth
        g = c.variables(c.scopes()["Globals"])
        assert g == {"n": str(m.read("n")), "out": str(m.read("out"))}
        locals_ = c.variables(c.scopes()["Locals"])
        for name, value in locals_.items():
            assert value == str(c.request("evaluate", {"expression": name, "frameId":
                                                       frames[0]["id"]})["body"]["result"])
    c.request("goto", {"threadId": 1, "targetId": end // 2})
    c.event("stopped")
    targets = c.request("gotoTargets", {"source": {"path": LIB_RFIB}, "line": 13})
    assert [g["label"].split(":")[1].split()[1] for g in targets["body"]["targets"]] == \
        ["previous", "next"]


def test_a_trap_is_an_exception_stop_and_stepping_back_works(stdio):
    c = stdio
    c.start(AVERAGE, stop_on_entry=False)
    body = c.event("stopped")["body"]
    assert body["reason"] == "exception" and "AncillaError" in body["description"]
    info = c.request("exceptionInfo", {"threadId": 1})["body"]
    assert info["exceptionId"] == "AncillaError" and "s = 5" in info["description"]
    assert info["breakMode"] == "always"
    t = c.t()
    assert c.variables(c.scopes()["Ancillas not yet zero"]) == {"s": "5"}
    c.stop("stepBack")
    assert c.t() < t and c.frames()[0]["line"] == 17
    c.stop("stepBack")
    assert c.frames()[0]["line"] == 16
    assert c.stop("continue")["reason"] == "exception" and c.t() == t


def test_pause_ends_a_long_run(stdio):
    c = stdio
    c.start("programs/accumulate.rasm", {"n": 2_000_000_000})
    c.event("stopped")
    c.request("continue", {"threadId": 1})
    time.sleep(0.3)
    c.request("pause", {"threadId": 1})
    body = c.event("stopped")["body"]
    assert body["reason"] == "pause"
    t = c.t()
    assert t > 1000
    c.stop("stepBack", {"threadId": 1, "granularity": "instruction"})
    assert c.t() == t - 1
    c.request("terminate", {})
    c.event("terminated")
    c.closed = True


def test_errors_are_error_responses(stdio):
    c = stdio
    c.request("initialize", {"adapterID": "rvm"})
    r = c.request("launch", {"program": "programs/nosuch.rasm"}, ok=False)
    assert "nosuch" in r["message"]
    r = c.request("stackTrace", {"threadId": 1}, ok=False)
    assert "launch" in r["message"]
    r = c.request("disassemble", {"memoryReference": "0", "instructionCount": 1}, ok=False)
    assert "does not support" in r["message"]


# ---- over TCP ---------------------------------------------------------------------------------

def test_the_same_over_tcp():
    p = subprocess.Popen([sys.executable, "-m", "rvm.cli", "debug", "--dap", "--port", "0"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = p.stderr.readline().decode()
        port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
        sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        c = Client(sock.makefile("rb"), sock.makefile("wb"))
        c.start(AVERAGE, breakpoints={str(ROOT / AVERAGE): [{"line": 16,
                                                            "condition": "i == 3"}]})
        c.event("stopped")
        assert c.stop("continue")["reason"] == "breakpoint"
        t = c.t()
        before = c.snapshot()
        c.stop("next")
        c.stop("stepBack")
        assert c.t() == t and c.snapshot() == before
        c.request("disconnect", {})
        p.wait(timeout=TIMEOUT)
        assert p.returncode == 0
    finally:
        if p.poll() is None:
            p.kill()


def test_janus_source_lines(stdio):
    c = stdio
    fib = str(ROOT / "programs" / "janus" / "fib.ja")
    c.start("programs/janus/fib.ja", breakpoints={fib: [{"line": 10}]})
    c.event("stopped")
    assert c.stop("continue")["reason"] == "breakpoint"
    frames = c.frames()
    assert frames[0]["source"]["path"] == fib and frames[0]["line"] == 10
    assert [f["name"].split("(")[0] for f in frames] == ["fib"] * 5 + ["main"]
    c.stop("stepBack")
    assert c.frames()[0]["source"]["path"] == fib
    depth = len(c.frames())
    c.stop("stepOut")
    assert len(c.frames()) == depth - 1 and c.frames()[0]["line"] == 15   # after the call


NESTED = """\
input  x: float = 0.5
output g: float
output y: float

func f(out: float, x: float) {
    out += x * x
}

func main() {
    call f(y, x)
    g += grad f(x) wrt x
}
"""


def test_a_breakpoint_in_a_function_a_statement_runs_says_so(stdio, tmp_path):
    """A breakpoint in f, which a derivative statement runs as a nested run, is set (it stops
    where f runs as an ordinary call) and carries the debugger's note as its message; one in
    main carries none."""
    prog = tmp_path / "nested.rasm"
    prog.write_text(NESTED)
    c = stdio
    c.start(str(prog), breakpoints={str(prog): [{"line": 6}]})
    c.event("stopped")
    r = c.request("setBreakpoints", {"source": {"path": str(prog)},
                                     "breakpoints": [{"line": 6}, {"line": 10}]})
    in_f, in_main = r["body"]["breakpoints"]
    assert in_f["verified"] and in_f["line"] == 6
    assert in_f["message"] == (
        f"f runs inside the nested runs of the derivative statement at {prog}:11: the "
        "debugger steps over a statement as one instruction and does not stop inside its "
        "nested runs; this breakpoint stops only where f runs as an ordinary call.")
    assert in_main["verified"] and "message" not in in_main
    r = c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "f"}]})
    assert r["body"]["breakpoints"][0]["message"].startswith("f runs inside the nested runs")
    # it stops at the ordinary call, once: the statement's nested run passes it by
    c.request("setFunctionBreakpoints", {"breakpoints": []})
    c.request("setBreakpoints", {"source": {"path": str(prog)}, "breakpoints": [{"line": 6}]})
    assert c.stop("continue")["reason"] == "breakpoint"
    assert [f["name"].split("(")[0] for f in c.frames()] == ["f", "main"]
    assert c.stop("continue")["reason"] != "breakpoint"
    assert c.variables(c.scopes()["Globals"])["g"] == "1.0"
