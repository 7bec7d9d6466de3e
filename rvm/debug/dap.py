"""`rvm debug --dap`: the reverse debugger as a Debug Adapter Protocol server.

An editor (VS Code, vimspector, nvim-dap, Emacs dape...) talks to it over stdio, or over TCP on
localhost with `--port N`.  The protocol's reverse words map onto the engine directly:
`stepBack` is a backward `next` by source line, `reverseContinue` runs backward to a
breakpoint or data breakpoint, `goto` moves to a step t (its targets are the previous and the
next time a line runs).  Nothing is recorded: memory stays flat however long the session.

Threads.  A reader thread reads requests and hands them, in order, to the main thread, which
owns the Session; a long run there goes in slices (Session.interrupt), and `pause`, answered by
the reader thread itself, ends it between two slices.  Every message goes out under one lock.

Conventions (docs/debug.md, "Editors: the Debug Adapter Protocol"): one thread (id 1);
frame ids are frame levels + 1; variable references live until the machine moves; a trap is
an exception stop (exceptionInfo gives the machine's message and values); reaching the end is
a stop, not an exit, so the session can step back from it.
"""
from __future__ import annotations

import io
import json
import os
import queue
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from typing import IO, Any

from ..errors import RVMError
from .cells import CellError, Ref
from .commands import Debugger
from .engine import Breakpoint, DebugError, Session, Stop, parse_hit_condition
from .view import Out

__all__ = ["DapServer", "serve_stdio", "serve_tcp", "CAPABILITIES"]

CAPABILITIES: dict[str, Any] = {
    "supportsConfigurationDoneRequest": True,
    "supportsFunctionBreakpoints": True,
    "supportsConditionalBreakpoints": True,
    "supportsHitConditionalBreakpoints": True,
    "supportsEvaluateForHovers": True,
    "supportsStepBack": True,
    "supportsSetVariable": True,
    "supportsRestartRequest": True,
    "supportsGotoTargetsRequest": True,
    "supportsExceptionInfoRequest": True,
    "supportsTerminateRequest": True,
    "supportsDataBreakpoints": True,
    "supportsSteppingGranularity": True,
    "supportsValueFormattingOptions": False,
    "exceptionBreakpointFilters": [
        {"filter": "trap", "label": "Traps", "default": True,
         "description": "A trap (come-from mismatch, nonzero ancilla, bounds, ...) stops at "
                        "the faulting instruction, which has not run"}],
}

THREAD = 1


def _value_text(v: Any) -> str:
    """A value as `rvm run` prints it (the language's own printing)."""
    from rvm.cli import format_value
    return format_value(v)


class _Failed(Exception):
    """A request that fails: its message goes back in the error response."""


class DapServer:
    """One debug session over a pair of byte streams."""

    def __init__(self, rfile: IO[bytes], wfile: IO[bytes], *, log: IO[str] | None = None):
        self.rfile = rfile
        self.wfile = wfile
        self.log = log
        self.seq = 0
        self.lock = threading.Lock()
        self.work: queue.Queue[dict | None] = queue.Queue()
        self.session: Session | None = None
        self.launch_args: dict[str, Any] = {}
        self.pause_flag = threading.Event()
        self.running = threading.Event()
        self.done = threading.Event()
        self.refs: dict[int, Callable[[], list[dict]]] = {}
        self.ref_cells: dict[int, tuple[int | None, str]] = {}   # ref -> (level, base name)
        self.line_bps: dict[str, list[tuple[dict, Breakpoint]]] = {}
        self.function_bps: list[tuple[dict, Breakpoint]] = []
        self.data_bps: list[int] = []
        self.trap_filter = True
        self.last_stop: Stop | None = None
        self.configured = False

    # ---- wire --------------------------------------------------------------------------------

    def _read(self) -> dict | None:
        length = None
        while True:
            line = self.rfile.readline()
            if not line:
                return None
            line = line.strip()
            if not line:
                if length is not None:
                    break
                continue
            key, _, value = line.decode("ascii", "replace").partition(":")
            if key.strip().lower() == "content-length":
                length = int(value.strip())
        body = b""
        while len(body) < length:
            chunk = self.rfile.read(length - len(body))
            if not chunk:
                return None
            body += chunk
        return json.loads(body.decode("utf-8"))

    def send(self, message: dict) -> None:
        with self.lock:
            self.seq += 1
            message = {"seq": self.seq, **message}
            data = json.dumps(message).encode("utf-8")
            try:
                self.wfile.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
                self.wfile.flush()
            except (OSError, ValueError):
                self.done.set()

    def event(self, name: str, body: dict | None = None) -> None:
        self.send({"type": "event", "event": name, **({"body": body} if body is not None
                                                      else {})})

    def respond(self, request: dict, body: dict | None = None, *, success: bool = True,
                message: str | None = None) -> None:
        r: dict[str, Any] = {"type": "response", "request_seq": request["seq"],
                             "success": success, "command": request["command"]}
        if message is not None:
            r["message"] = message
        if not success and body is None:
            body = {"error": {"id": 1, "format": message or "failed", "showUser": False}}
        if body is not None:
            r["body"] = body
        self.send(r)

    def output(self, text: str, category: str = "console") -> None:
        self.event("output", {"category": category, "output": text})

    # ---- the loop ----------------------------------------------------------------------------

    def serve(self) -> None:
        """Until disconnect, terminate or the end of the input: requests are read on a
        daemon thread and run here, in order."""
        reader = threading.Thread(target=self._reader, name="rvm-dap-reader", daemon=True)
        reader.start()
        self._work()

    def _reader(self) -> None:
        try:
            while not self.done.is_set():
                try:
                    msg = self._read()
                except (ValueError, OSError):
                    msg = None
                if msg is None:
                    break
                if msg.get("type") != "request":
                    continue
                if msg.get("command") == "pause":
                    self.pause_flag.set()
                    self.respond(msg)
                    continue
                self.work.put(msg)
        finally:
            self.pause_flag.set()
            self.work.put(None)

    def _work(self) -> None:
        while True:
            msg = self.work.get()
            if msg is None:
                return
            try:
                self.handle(msg)
            except _Failed as e:
                self.respond(msg, success=False, message=str(e))
            except (CellError, RVMError) as e:
                self.respond(msg, success=False, message=str(e))
            except Exception as e:        # a bug must not end the editor's session
                if self.log:
                    traceback.print_exc(file=self.log)
                self.respond(msg, success=False,
                             message=f"internal error: {type(e).__name__}: {e}")
            if self.done.is_set():
                return

    def handle(self, req: dict) -> None:
        command = req["command"]
        fn = getattr(self, "on_" + command, None)
        if fn is None:
            raise _Failed(f"rvm debug does not support the request {command!r}")
        fn(req, req.get("arguments") or {})

    # ---- the session -------------------------------------------------------------------------

    @property
    def s(self) -> Session:
        if self.session is None:
            raise _Failed("no program: send launch first")
        return self.session

    def on_initialize(self, req: dict, args: dict) -> None:
        self.respond(req, CAPABILITIES)

    def _start(self, args: dict) -> None:
        from rvm.cli import load_program
        program_path = args.get("program")
        if not program_path:
            raise _Failed("launch needs `program`: the path of a .rasm, .ja or .rbc file")
        cwd = args.get("cwd")
        if cwd:
            try:
                os.chdir(cwd)
            except OSError as e:
                raise _Failed(f"cannot change to cwd {cwd!r}: {e}") from None
        try:
            program = load_program(program_path)
        except (OSError, RVMError, ValueError) as e:
            raise _Failed(f"cannot load {program_path}: {e}") from None
        inputs = dict(args.get("inputs") or {})
        for pair in args.get("args") or []:
            name, eq, value = str(pair).partition("=")
            if not eq:
                raise _Failed(f"an input is NAME=VALUE, not {pair!r}")
            try:
                inputs[name] = json.loads(value)
            except ValueError:
                inputs[name] = value
        try:
            session = Session(program, inputs, limit=args.get("limit"), trace=self._trace)
        except (RVMError, ValueError, IndexError, KeyError) as e:
            raise _Failed(f"bad inputs: {e}") from None
        session.interrupt = self._interrupted
        self.session = session
        self.program_path = program_path

    def _trace(self, ev: Any) -> None:
        values = " ".join(f"{k}={_value_text(v)}" for k, v in ev.values.items())
        self.output(f"{ev.message} {values}  (t={ev.step})\n", "stdout")

    def _interrupted(self) -> bool:
        return self.pause_flag.is_set()

    def on_launch(self, req: dict, args: dict) -> None:
        self.launch_args = args
        self._start(args)
        self.respond(req)
        s = self.s
        self.output(f"rvm debug: {self.program_path}, {len(s.program.code)} instructions, "
                    f"t={s.t}. Stepping back runs the inverse instructions: nothing is "
                    f"recorded.\n")
        self.event("initialized")

    def on_attach(self, req: dict, args: dict) -> None:
        raise _Failed("rvm debug launches programs; attach is not supported")

    def on_configurationDone(self, req: dict, args: dict) -> None:
        self.respond(req)
        self.configured = True
        self._begin()

    def _begin(self) -> None:
        if self.launch_args.get("stopOnEntry", False):
            self._stopped(Stop("entry", +1, self.s.t, self.s.t))
        else:
            self._run(lambda: self.s.run(+1))

    def on_restart(self, req: dict, args: dict) -> None:
        new = args.get("arguments")
        if isinstance(new, dict):
            self.launch_args = new
        lines = {path: [spec for spec, _ in bps] for path, bps in self.line_bps.items()}
        funcs = [spec for spec, _ in self.function_bps]
        self._start(self.launch_args)
        self.line_bps, self.function_bps, self.data_bps = {}, [], []
        for path, specs in lines.items():
            self._set_line_breakpoints(path, specs)
        self._set_function_breakpoints(funcs)
        self.respond(req)
        self.output(f"restarted: t={self.s.t}\n")
        self._begin()

    def on_disconnect(self, req: dict, args: dict) -> None:
        self.respond(req)
        self.done.set()

    def on_terminate(self, req: dict, args: dict) -> None:
        self.respond(req)
        self.event("terminated")
        self.done.set()

    # ---- breakpoints -------------------------------------------------------------------------

    def _file_index(self, path: str) -> int | None:
        files = self.s.program.files
        real = os.path.realpath(path)
        for i, f in enumerate(files):
            if os.path.realpath(f) == real:
                return i
        base = os.path.basename(path)
        hits = [i for i, f in enumerate(files) if os.path.basename(f) == base]
        return hits[0] if len(hits) == 1 else None

    def _source(self, file: str) -> dict:
        return {"name": os.path.basename(file), "path": os.path.abspath(file)}

    def _debugger(self) -> Debugger:
        return Debugger(self.s, Out(io.StringIO(), False), batch=True)

    def _bp_body(self, bp: Breakpoint | None, message: str | None = None,
                 line: int | None = None) -> dict:
        if bp is None:
            out: dict[str, Any] = {"verified": False, "message": message or "not set"}
            if line is not None:
                out["line"] = line
            return out
        loc = self.s.location(min(bp.pcs))
        out = {"id": bp.number, "verified": True}
        if loc:
            out.update(source=self._source(loc[0]), line=loc[1], column=loc[2] or 1)
        # set, but a function that derivative statements run does not stop inside their nested
        # runs: the editor shows the message on the breakpoint, as `break` prints its note
        nested = self.s.nested_note(bp.pcs)
        if nested:
            out["message"] = nested + "."
        return out

    def _check_conditions(self, spec: dict) -> tuple[str | None, str | None]:
        cond = spec.get("condition") or None
        hit = spec.get("hitCondition") or None
        if cond:
            self.s.scope(None)._parse(cond)
        if hit:
            parse_hit_condition(hit)
        return cond, hit

    def _set_line_breakpoints(self, path: str, specs: list[dict]) -> list[dict]:
        s = self.s
        for _, bp in self.line_bps.pop(path, []):
            s.breakpoints.pop(bp.number, None)
        fi = self._file_index(path)
        out = []
        made = []
        for spec in specs:
            line = int(spec.get("line", 0))
            if fi is None:
                out.append(self._bp_body(None, f"{os.path.basename(path)} is not a source "
                                         f"of this program", line))
                continue
            try:
                cond, hit = self._check_conditions(spec)
                desc, pcs = self._debugger()._line_pcs([fi], line)
            except (CellError, DebugError) as e:
                out.append(self._bp_body(None, str(e), line))
                continue
            bp = s.add_breakpoint(desc.split(" (")[0], pcs, cond)
            bp.hit_condition = hit
            made.append((spec, bp))
            out.append(self._bp_body(bp))
        self.line_bps[path] = made
        return out

    def on_setBreakpoints(self, req: dict, args: dict) -> None:
        source = args.get("source") or {}
        path = source.get("path") or source.get("name") or ""
        specs = args.get("breakpoints")
        if specs is None:
            specs = [{"line": n} for n in args.get("lines") or []]
        self.respond(req, {"breakpoints": self._set_line_breakpoints(path, specs)})

    def _set_function_breakpoints(self, specs: list[dict]) -> list[dict]:
        s = self.s
        for _, bp in self.function_bps:
            s.breakpoints.pop(bp.number, None)
        self.function_bps = []
        out = []
        dbg = self._debugger()
        for spec in specs:
            name = str(spec.get("name", "")).strip()
            try:
                cond, hit = self._check_conditions(spec)
                desc, pcs = dbg.resolve_location(name)
            except (CellError, DebugError) as e:
                out.append(self._bp_body(None, str(e)))
                continue
            bp = s.add_breakpoint(name, pcs, cond)
            bp.hit_condition = hit
            self.function_bps.append((spec, bp))
            out.append(self._bp_body(bp))
        return out

    def on_setFunctionBreakpoints(self, req: dict, args: dict) -> None:
        self.respond(req, {"breakpoints":
                           self._set_function_breakpoints(args.get("breakpoints") or [])})

    def on_setExceptionBreakpoints(self, req: dict, args: dict) -> None:
        filters = list(args.get("filters") or [])
        for f in args.get("filterOptions") or []:
            filters.append(f.get("filterId"))
        self.trap_filter = "trap" in filters
        self.respond(req, {"breakpoints": [{"verified": True} for _ in filters]})

    def on_dataBreakpointInfo(self, req: dict, args: dict) -> None:
        name = args.get("name", "")
        ref = args.get("variablesReference")
        level: int | None = None
        text = name
        if ref is not None and ref in self.ref_cells:
            level, base = self.ref_cells[ref]
            if base == "<stack>":
                self.respond(req, {"dataId": None, "description":
                                   "a value stack word cannot be watched"})
                return
            text = f"{base}{name}" if base else name
        try:
            cell = self._scope(level).reference(text) if level != -2 else \
                self.s.global_scope().reference(text)
        except CellError as e:
            self.respond(req, {"dataId": None, "description": str(e)})
            return
        lv = "g" if level in (None, -2) else str(level)
        self.respond(req, {"dataId": f"{lv}|{text}", "description": cell.name,
                           "accessTypes": ["write", "read"], "canPersist": False})

    def on_setDataBreakpoints(self, req: dict, args: dict) -> None:
        s = self.s
        for n in self.data_bps:
            s.watchpoints.pop(n, None)
        self.data_bps = []
        out = []
        for spec in args.get("breakpoints") or []:
            lv, _, text = str(spec.get("dataId", "")).partition("|")
            try:
                cond, hit = self._check_conditions(spec)
                s.selected = None if lv == "g" else int(lv)
                if lv == "g":
                    s.selected = None
                kind = "read" if spec.get("accessType") == "read" else "write"
                if lv == "g":
                    ref = s.global_scope().reference(text)
                    wp = s.add_watch(f"@{ref.addr}" if ref.length is None else text, cond,
                                     kind)
                else:
                    wp = s.add_watch(text, cond, kind)
            except (CellError, DebugError, ValueError) as e:
                out.append({"verified": False, "message": str(e)})
                continue
            finally:
                s.selected = None
            self.data_bps.append(wp.number)
            out.append({"id": wp.number, "verified": True,
                        "message": f"{wp.ref.name} ({'read' if kind == 'read' else 'write'})"})
        self.respond(req, {"breakpoints": out})

    # ---- running -----------------------------------------------------------------------------

    def _run(self, fn: Callable[[], Stop]) -> None:
        self.refs.clear()
        self.ref_cells.clear()
        self.pause_flag.clear()
        self.running.set()
        t0 = self.s.t
        try:
            stop = fn()
        except (CellError, RVMError) as e:
            # the request was answered already: the client waits for a stop, so say why here
            self.output(f"error: {e}\n", "stderr")
            stop = Stop("error", +1, t0, self.s.t, note="")
        finally:
            self.running.clear()
            self.pause_flag.clear()         # a pause ends one run, not the next
        self._stopped(stop)

    def _stopped(self, stop: Stop) -> None:
        s = self.s
        self.last_stop = stop
        self.refs.clear()
        self.ref_cells.clear()
        r = stop.reason
        body: dict[str, Any] = {"threadId": THREAD, "allThreadsStopped": True}
        way = "forward" if stop.direction > 0 else "backward"
        if r == "breakpoint" and stop.breakpoint is not None:
            bp = stop.breakpoint
            fn = any(bp is b for _, b in self.function_bps)
            body.update(reason="function breakpoint" if fn else "breakpoint",
                        hitBreakpointIds=[bp.number],
                        description=f"Breakpoint {bp.number} ({bp.spec}), running {way}")
        elif r in ("watch", "read"):
            ids = sorted({c.watch.number for c in stop.watched if c.watch is not None})
            texts = []
            for c in stop.watched:
                if c.watch is None:
                    continue
                if r == "read":
                    texts.append(f"{c.name} = {_value_text(c.new)} read by "
                                 f"{s.m.format_instruction(c.pc)}")
                else:
                    old, new = (c.old, c.new) if stop.direction > 0 else (c.new, c.old)
                    texts.append(f"{c.name} {_value_text(old)} -> {_value_text(new)} by "
                                 f"{s.m.format_instruction(c.pc)}")
            desc = "; ".join(texts) + (" (old -> new in the order of time; running backward: "
                                       "stopped just before the write)"
                                       if stop.direction < 0 and r == "watch" else "")
            body.update(reason="data breakpoint", hitBreakpointIds=ids, description=desc)
            self.output(f"Data breakpoint: {desc}\n")
        elif r == "trap" and stop.trap is not None:
            trap = stop.trap
            body.update(reason="exception", description=f"{trap.kind}: {trap.detail}",
                        text=trap.kind)
            self.output(f"Trap: {trap.kind}: {trap.detail}\n" +
                        ("  values: " + ", ".join(f"{k} = {_value_text(v)}"
                                                  for k, v in trap.values.items()) + "\n"
                         if trap.values else "") +
                        ("The faulting instruction has not run: step back to find the cause.\n"
                         if trap.direction > 0 else ""))
        elif r == "interrupted":
            body.update(reason="pause", description=f"Paused at t={s.t}")
        elif r == "entry":
            body.update(reason="entry", description=f"t={s.t}")
        elif r == "goto":
            body.update(reason="goto", description=f"Went to t={s.t}")
        elif r == "end":
            outs = ", ".join(f"{g.name} = {_value_text(s.m.read(g.name))}"
                             for g in s.program.globals if g.is_output)
            body.update(reason="step", description=f"End of the program (t={s.t})")
            self.output(f"Reached the end of the program at t={s.t}" +
                        (f": {outs}" if outs else "") +
                        ". Step back or reverse-continue from here.\n")
        elif r == "start":
            body.update(reason="entry", description=f"Start of the program (t={s.t})")
        elif r == "limit":
            body.update(reason="pause", description=f"Step limit reached at t={s.t}")
        elif r == "error":
            body.update(reason="pause", description=f"the request failed (see the console); "
                                                    f"t={s.t}")
        else:
            body.update(reason="step", description=f"t={s.t}")
        if stop.note:
            self.output(stop.note + "\n")
        self.event("stopped", body)

    def _granularity(self, args: dict) -> str:
        return args.get("granularity") or "statement"

    def on_continue(self, req: dict, args: dict) -> None:
        self.respond(req, {"allThreadsContinued": True})
        self._run(lambda: self.s.run(+1))

    def on_reverseContinue(self, req: dict, args: dict) -> None:
        self.respond(req)
        self._run(lambda: self.s.run(-1))

    def on_next(self, req: dict, args: dict) -> None:
        self.respond(req)
        if self._granularity(args) == "instruction":
            self._run(lambda: self.s.next(1, +1))
        else:
            self._run(lambda: self.s.step_line(1, +1, over=True))

    def on_stepIn(self, req: dict, args: dict) -> None:
        self.respond(req)
        if self._granularity(args) == "instruction":
            self._run(lambda: self.s.step(1, +1))
        else:
            self._run(lambda: self.s.step_line(1, +1, over=False))

    def on_stepOut(self, req: dict, args: dict) -> None:
        self.respond(req)
        self._run(lambda: self.s.finish(None, +1))

    def on_stepBack(self, req: dict, args: dict) -> None:
        self.respond(req)
        if self._granularity(args) == "instruction":
            self._run(lambda: self.s.next(1, -1))
        else:
            self._run(lambda: self.s.step_line(1, -1, over=True))

    def on_gotoTargets(self, req: dict, args: dict) -> None:
        """The previous and the next time the line runs (the machine looks both ways and
        comes back), and the start and end of the run for a line without code."""
        s = self.s
        source = args.get("source") or {}
        fi = self._file_index(source.get("path") or source.get("name") or "")
        line = int(args.get("line", 0))
        if fi is None:
            raise _Failed("not a source of this program")
        desc, pcs = self._debugger()._line_pcs([fi], line)
        t0 = s.t
        self.pause_flag.clear()
        found: list[tuple[int, str]] = []
        from .engine import _Target
        try:
            for direction, word in ((-1, "previous"), (+1, "next")):
                stop = s.run(direction, target=_Target(set(pcs), lambda pc: True, "here"),
                             stops=False)
                if stop.reason == "here" and s.t != t0:
                    found.append((s.t, word))
                s.goto(t0)
        finally:
            if s.t != t0:
                s.goto(t0)
        loc = s.location(pcs[0])
        targets = [{"id": t, "label": f"t={t}: the {word} time {desc} runs",
                    "line": loc[1] if loc else line} for t, word in found]
        self.respond(req, {"targets": targets})

    def on_goto(self, req: dict, args: dict) -> None:
        t = int(args["targetId"])
        s = self.s
        if t < 0 or (s.end_t is not None and t > s.end_t and s.forked_at is None):
            raise _Failed(f"t={t} is outside the run (0..{s.end_t})")
        self.respond(req)
        self._run(lambda: self.s.goto(t))

    # ---- inspecting --------------------------------------------------------------------------

    def on_threads(self, req: dict, args: dict) -> None:
        self.respond(req, {"threads": [{"id": THREAD, "name": "rvm"}]})

    def on_stackTrace(self, req: dict, args: dict) -> None:
        s = self.s
        frames = []
        if s.depth == 0:
            loc = s.location(s.pc)
            f: dict[str, Any] = {"id": 0, "name": f"<{s.status} of the program, t={s.t}>",
                                 "line": loc[1] if loc else 0, "column": loc[2] or 1
                                 if loc else 0,
                                 "instructionPointerReference": str(s.pc)}
            if loc:
                f["source"] = self._source(loc[0])
            frames.append(f)
        core = s.m.core
        for level in range(s.depth - 1, -1, -1):
            fi = core.frame(level)[0]
            func = s.program.functions[fi]
            pc = s.frame_pc(level)
            loc = s.location(pc)
            name = f"{func.name}({', '.join(p.name for p in func.params)})"
            if level == s.depth - 1:
                name += f"  t={s.t}"
            fr: dict[str, Any] = {"id": level + 1, "name": name,
                                  "line": loc[1] if loc else 0,
                                  "column": (loc[2] or 1) if loc else 0,
                                  "instructionPointerReference": str(pc)}
            if loc:
                fr["source"] = self._source(loc[0])
            frames.append(fr)
        start = int(args.get("startFrame") or 0)
        levels = args.get("levels") or len(frames)
        self.respond(req, {"stackFrames": frames[start:start + levels],
                           "totalFrames": len(frames)})

    def _level(self, frame_id: Any) -> int | None:
        if frame_id is None or frame_id == 0 or self.s.depth == 0:
            return None if self.s.depth == 0 else self.s.depth - 1
        level = int(frame_id) - 1
        if not 0 <= level < self.s.depth:
            raise _Failed(f"no frame {frame_id}")
        return level

    def _scope(self, level: int | None):
        """The cells of frame `level`; None or -2 (the Globals scope): the globals only."""
        return self.s.scope(level) if level is not None and level >= 0 else \
            self.s.global_scope()

    def _new_ref(self, fn: Callable[[], list[dict]], level: int | None = None,
                 base: str = "") -> int:
        ref = len(self.refs) + 1
        self.refs[ref] = fn
        self.ref_cells[ref] = (level, base)
        return ref

    def _var(self, ref: Ref, level: int | None, scope: Any, name: str | None = None) -> dict:
        value = scope.value(ref)
        t = ref.type.name.lower() if ref.type is not None else "word"
        v: dict[str, Any] = {"name": name or ref.name, "value": _value_text(value),
                             "type": f"{t}[{ref.length}]" if ref.length is not None else t,
                             "evaluateName": ref.name, "variablesReference": 0}
        if ref.length is not None:
            def elements(r: Ref = ref, lv: int | None = level) -> list[dict]:
                return self._elements(r, lv)
            v["variablesReference"] = self._new_ref(elements, level, ref.name)
            v["indexedVariables"] = ref.length
        if not ref.writable:
            v["presentationHint"] = {"attributes": ["readOnly"]}
        return v

    def _elements(self, ref: Ref, level: int | None) -> list[dict]:
        scope = self._scope(level)
        return [self._var(r, level, scope, name=f"[{k}]")
                for k, r in enumerate(ref.elements())]

    def on_scopes(self, req: dict, args: dict) -> None:
        s = self.s
        level = self._level(args.get("frameId"))
        scopes = []
        if level is not None:
            fi = s.m.core.frame(level)[0]
            func = s.program.functions[fi]

            def params(lv: int = level, f: Any = func) -> list[dict]:
                sc = s.scope(lv)
                return [self._var(sc.names[p.name], lv, sc) for p in f.params]

            def locals_(lv: int = level, f: Any = func, nonzero: bool = False) -> list[dict]:
                sc = s.scope(lv)
                names = list(dict.fromkeys(loc.name for loc in f.locals))
                refs = [sc.names[n] for n in names if n in sc.names]
                if nonzero:
                    refs = [r for r in refs if any(sc.words(r))]
                return [self._var(r, lv, sc) for r in refs]
            scopes.append({"name": "Parameters", "presentationHint": "arguments",
                           "variablesReference": self._new_ref(params, level),
                           "namedVariables": len(func.params), "expensive": False})
            scopes.append({"name": "Locals", "presentationHint": "locals",
                           "variablesReference": self._new_ref(locals_, level),
                           "expensive": False})
            scopes.append({"name": "Ancillas not yet zero",
                           "variablesReference": self._new_ref(
                               lambda: locals_(nonzero=True), level),
                           "expensive": False})

        def globals_() -> list[dict]:
            sc = s.global_scope()
            return [self._var(sc.names[g.name], -2, sc) for g in s.program.globals]

        def stack() -> list[dict]:
            words = s.m.stack()
            return [{"name": f"[{k}]", "value": str(int(w)), "type": "word",
                     "variablesReference": 0} for k, w in enumerate(words)]
        scopes.append({"name": "Globals", "variablesReference":
                       self._new_ref(globals_, -2), "expensive": False})
        scopes.append({"name": "Value stack", "presentationHint": "registers",
                       "variablesReference": self._new_ref(stack, None, "<stack>"),
                       "indexedVariables": len(s.m.stack()), "expensive": False})
        self.respond(req, {"scopes": scopes})

    def on_variables(self, req: dict, args: dict) -> None:
        ref = int(args["variablesReference"])
        fn = self.refs.get(ref)
        if fn is None:
            raise _Failed("the variables reference is stale (the machine moved)")
        variables = fn()
        start = int(args.get("start") or 0)
        count = int(args.get("count") or 0)
        if start or count:
            variables = variables[start:start + count if count else None]
        self.respond(req, {"variables": variables})

    def on_setVariable(self, req: dict, args: dict) -> None:
        s = self.s
        ref = int(args["variablesReference"])
        if ref not in self.ref_cells:
            raise _Failed("the variables reference is stale (the machine moved)")
        level, base = self.ref_cells[ref]
        if base == "<stack>":
            raise _Failed("the value stack cannot be written")
        name = args["name"]
        text = f"{base}{name}" if base else name
        if level == -2:
            ref_ = s.global_scope().reference(text)
            text = f"@{ref_.addr}" if ref_.length is None else text
            level = None
        s.selected = level
        try:
            cell, old, new = s.set_cell(text, str(args["value"]))
        finally:
            s.selected = None
        scope = self._scope(level)
        self.output(f"{cell.name}: {_value_text(old)} -> {_value_text(new)} (the timeline is "
                    f"forked at t={s.t}: running forward or back now follows the new "
                    f"state)\n")
        self.respond(req, {"value": _value_text(scope.value(cell)),
                           "type": cell.type.name.lower() if cell.type else "word"})

    def on_evaluate(self, req: dict, args: dict) -> None:
        s = self.s
        expr = str(args.get("expression", "")).strip()
        level = self._level(args.get("frameId")) if s.depth else None
        context = args.get("context")
        try:
            scope = self._scope(level)
            value = scope.evaluate(expr)
            body: dict[str, Any] = {"result": _value_text(value), "variablesReference": 0}
            try:
                cell = scope.reference(expr)
                if cell.length is not None:
                    body = self._var(cell, level, scope)
                    body = {"result": body["value"], "type": body["type"],
                            "variablesReference": body["variablesReference"],
                            "indexedVariables": cell.length}
            except CellError:
                pass
            self.respond(req, body)
            return
        except CellError as e:
            if context != "repl":
                raise _Failed(str(e)) from None
            error = str(e)
        # the debug console: a command of the terminal debugger (`last s`, `history s`, ...)
        text = io.StringIO()
        dbg = Debugger(s, Out(text, False), batch=True)
        t0 = s.t
        if s.depth and level is not None:
            s.selected = level
        from .commands import lookup
        word = expr.split(" ", 1)[0].split("/", 1)[0]
        if lookup(word) is None:
            raise _Failed(error)
        self.pause_flag.clear()
        ok = dbg.execute(expr)
        s.selected = None
        self.respond(req, {"result": text.getvalue().rstrip("\n"), "variablesReference": 0},
                     success=ok, message=None if ok else text.getvalue().strip())
        if s.t != t0:
            self._stopped(Stop("goto", +1 if s.t > t0 else -1, t0, s.t))

    def on_exceptionInfo(self, req: dict, args: dict) -> None:
        stop = self.last_stop
        if stop is None or stop.trap is None:
            raise _Failed("not stopped at a trap")
        trap = stop.trap
        values = ", ".join(f"{k} = {_value_text(v)}" for k, v in trap.values.items())
        where = (f"{trap.location[0]}:{trap.location[1]}:{trap.location[2]}"
                 if trap.location else f"pc {trap.pc}")
        self.respond(req, {
            "exceptionId": trap.kind,
            "description": trap.detail + (f" (values: {values})" if values else ""),
            "breakMode": "always" if self.trap_filter else "unhandled",
            "details": {"message": trap.detail, "typeName": trap.kind,
                        "stackTrace": f"at pc {trap.pc}: {trap.instruction} ({where}, step "
                                      f"{trap.step}, running "
                                      f"{'forward' if trap.direction > 0 else 'backward'})"},
        })

    def on_source(self, req: dict, args: dict) -> None:
        source = args.get("source") or {}
        path = source.get("path")
        try:
            with open(path or "") as f:
                content = f.read()
        except OSError as e:
            raise _Failed(f"cannot read the source: {e}") from None
        self.respond(req, {"content": content})

    def on_loadedSources(self, req: dict, args: dict) -> None:
        self.respond(req, {"sources": [self._source(f) for f in self.s.program.files]})


def serve_stdio() -> int:
    """Serve one session on stdin/stdout (the process's own output goes to stderr)."""
    rfile = sys.stdin.buffer
    wfile = sys.stdout.buffer
    sys.stdout = sys.stderr             # a stray print must not corrupt the protocol
    DapServer(rfile, wfile, log=sys.stderr).serve()
    _exit()
    return 0


def _exit() -> None:
    """End the process now: the reader thread may be blocked reading the client's stream,
    and interpreter shutdown would wait on (or abort over) its lock."""
    for f in (sys.stderr, sys.__stdout__):
        try:
            if f is not None:
                f.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(0)


def serve_tcp(port: int, host: str = "127.0.0.1") -> int:
    """Listen on localhost:port (0: any free port; the port is printed on stderr), serve one
    client, then exit."""
    with socket.create_server((host, port)) as srv:
        print(f"rvm debug: DAP server listening on {host}:{srv.getsockname()[1]}",
              file=sys.stderr, flush=True)
        conn, _ = srv.accept()
        with conn:
            rfile = conn.makefile("rb")
            wfile = conn.makefile("wb")
            DapServer(rfile, wfile, log=sys.stderr).serve()
            try:
                wfile.flush()
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    _exit()
    return 0
