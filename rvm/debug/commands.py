"""The debugger's commands: names and aliases (gdb/pdb), help, parsing and printing.

`Debugger.execute(line)` runs one command line against a `Session` and prints to an `Out`;
it returns False when the command failed (batch mode stops there).  The command table
`COMMANDS` is the one source of the names, aliases, groups and help texts.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import RVMError, Trap
from .cells import CellError, Ref, format_value, hex_word
from .engine import Change, DebugError, Session, Stop
from .view import Out, SourceCache

__all__ = ["COMMANDS", "GROUPS", "Debugger", "Quit", "lookup"]


class Quit(Exception):
    """`quit`: leave the debugger."""


GROUPS = [
    ("forward", "Running forward"),
    ("reverse", "Running backward (the inverse instructions run: nothing is recorded)"),
    ("time", "Time travel"),
    ("breakpoints", "Breakpoints (they stop in both directions)"),
    ("watch", "Watching cells (stops in both directions)"),
    ("inspect", "Inspecting the state"),
    ("session", "Session"),
]


@dataclass
class Command:
    name: str
    aliases: tuple[str, ...]
    group: str
    usage: str
    summary: str
    details: str
    handler: str                      # Debugger method name


COMMANDS: list[Command] = []


def _cmd(name: str, aliases: tuple[str, ...], group: str, usage: str, summary: str,
         details: str = "") -> Callable[[Callable], Callable]:
    def deco(fn: Callable) -> Callable:
        COMMANDS.append(Command(name, aliases, group, usage, summary, details.strip(),
                                fn.__name__))
        return fn
    return deco


def lookup(word: str) -> Command | None:
    """A command by name or alias, or by an unambiguous prefix of its name."""
    for c in COMMANDS:
        if word == c.name or word in c.aliases:
            return c
    hits = [c for c in COMMANDS if c.name.startswith(word)]
    return hits[0] if len(hits) == 1 else None


def _names(c: Command) -> str:
    return c.name + (f" ({', '.join(c.aliases)})" if c.aliases else "")


def _count(text: str, default: int = 1) -> int:
    text = text.strip()
    if not text:
        return default
    try:
        n = int(text, 0)
    except ValueError:
        raise DebugError(f"expected a number of steps, not {text!r}") from None
    if n < 0:
        raise DebugError("the count must be >= 0")
    return n


class Debugger:
    """Reads command lines, runs them on a Session, prints what happened."""

    def __init__(self, session: Session, out: Out, *, batch: bool = False,
                 confirm: Callable[[str], bool] | None = None):
        self.s = session
        self.out = out
        self.batch = batch
        self.confirm = confirm or (lambda question: True)
        self.sources = SourceCache()
        self.displays: dict[int, str] = {}
        self._display_n = 0
        self.last_line = ""
        self.list_next: tuple[str, int] | None = None

    # ---- the loop's side ------------------------------------------------------------------

    def prompt(self) -> str:
        arrow = ">" if self.s.direction > 0 else "<"
        return f"(rdb t={self.s.t} {arrow}) "

    def execute(self, line: str) -> bool:
        """Run one command line; False if it failed.  Raises Quit."""
        line = line.strip()
        if not line or line.startswith("#"):
            return True
        word, _, rest = line.partition(" ")
        if "/" in word and not word.startswith("*"):          # p/x EXPR
            word, _, fmt = word.partition("/")
            rest = f"/{fmt} {rest}"
        cmd = lookup(word)
        if cmd is None:
            hits = [c.name for c in COMMANDS if c.name.startswith(word)]
            self.error(f"ambiguous command {word!r}: {', '.join(hits)}" if hits else
                       f"unknown command {word!r}; `help` lists the commands")
            return False
        try:
            getattr(self, cmd.handler)(rest.strip())
            return True
        except (CellError, Trap, RVMError) as e:          # DebugError is a CellError
            self.error(str(e))
            return False
        except (Quit, KeyboardInterrupt):
            raise
        except Exception as e:                  # a bug must not end the user's session
            self.error(f"internal error in {cmd.name}: {type(e).__name__}: {e} (please "
                       f"report it)")
            return False
        finally:
            self.out.flush()

    def error(self, message: str) -> None:
        self.out.print(("error: ", "bold red"), message)

    def note(self, *parts: Any) -> None:
        self.out.print(*parts, style="dim" if self.out.color else None)

    # ---- showing where we are ---------------------------------------------------------------

    def _direction_word(self, d: int) -> str:
        return "forward" if d > 0 else "backward"

    def show_position(self, changes: list[Change] | None = None, total: int = 0) -> None:
        s = self.s
        pc = s.pc
        func = s.program.function_at(pc)
        if s.status == "end":
            where = "at the end of the program"
        elif s.status == "start":
            where = "at the start of the program"
        else:
            where = f"in {func.name if func else '?'}, depth {s.depth}"
        self.out.print(("t=", "bold"), (str(s.t), "bold cyan"), "  ",
                       (s.where(pc), "green"), "  ", where)
        loc = s.location(pc)
        src = self.sources.line(loc[0], loc[1]) if loc else None
        if src is not None:
            self.out.print(("=> ", "bold yellow"), (f"{loc[1]:>4} ", "yellow"),
                           self.out.code(src))
        self.out.print(("   pc ", "dim"), (f"{pc}: ", "dim"), (s.m.format_instruction(pc), "bold"))
        if changes:
            parts: list[Any] = [("changed: ", "magenta")]
            for i, c in enumerate(changes):
                if i:
                    parts.append(", ")
                parts += [c.name, " ", format_value(c.old), " -> ", (format_value(c.new), "bold")]
            if total > len(changes):
                parts.append(f" (and {total - len(changes)} more)")
            self.out.print(*parts)
        self.show_displays()
        self.list_next = None

    def show_displays(self) -> None:
        for n, expr in self.displays.items():
            try:
                v = format_value(self.s.scope().evaluate(expr))
            except CellError as e:
                v = f"<{e}>"
            self.out.print(f"{n}: {expr} = ", (v, "bold"))

    def report(self, stop: Stop, before: Any) -> None:
        """Print why a command stopped, where, and what changed."""
        s = self.s
        way = self._direction_word(stop.direction)
        r = stop.reason
        if r == "step":
            n = stop.steps
            self.out.print(("Stepped ", "bold"), f"{n} instruction{'s' if n != 1 else ''} {way}")
        elif r == "breakpoint" and stop.breakpoint is not None:
            bp = stop.breakpoint
            self.out.print((f"Breakpoint {bp.number}", "bold red"), f" ({bp.spec}",
                           f" if {bp.condition}" if bp.condition else "", ")",
                           f", running {way}" if stop.direction < 0 else "")
        elif r == "watch":
            pass                                    # the changes below say it
        elif r == "read":
            for c in stop.watched:
                if c.watch is not None:
                    self.out.print((f"Read watchpoint {c.watch.number}", "bold red"),
                                   f": {c.name} = {format_value(c.new)}  read by ",
                                   (s.m.format_instruction(c.pc), "bold"),
                                   f" at {s.where(c.pc)}" +
                                   (", running backward" if stop.direction < 0 else ""))
        elif r == "finish":
            self.out.print(("Run till exit", "bold") if stop.direction > 0 else
                           ("Back before the call", "bold"),
                           f" ({stop.steps} steps {way})")
        elif r == "until":
            self.out.print(("Until", "bold"), f": stopped after {stop.steps} steps {way}")
        elif r == "start":
            self.out.print(("Reached the start of the program", "bold"),
                           f" ({stop.steps} steps {way})" if stop.steps else "")
        elif r == "end":
            outs = ", ".join(f"{g.name} = {format_value(self._value_of_global(g.name))}"
                             for g in s.program.globals if g.is_output)
            self.out.print(("Reached the end of the program", "bold"),
                           f" ({stop.steps} steps {way})" if stop.steps else "",
                           f": {outs}" if outs else "")
        elif r == "limit":
            self.out.print(("Stopped", "bold yellow"), f" after {stop.steps} steps {way}: "
                           f"the step limit (--limit {s.limit}) is reached")
        elif r == "goto":
            self.out.print(("Went to ", "bold"), f"t={stop.t}")
        elif r == "interrupted":
            self.out.print(("Interrupted", "bold yellow"), f" after {stop.steps} steps {way}")
        elif r == "trap" and stop.trap is not None:
            self.report_trap(stop.trap)
        if stop.note:
            self.note(stop.note)
        # old -> new always in the order of time (the write as it ran forward), also when
        # the stop was met running backward (the machine then saw new -> old)
        t_write = s.t - 1 if stop.direction > 0 else s.t
        for c in stop.watched:
            if c.watch is None or r == "read":
                continue
            old, new = (c.old, c.new) if stop.direction > 0 else (c.new, c.old)
            self.out.print((f"Watchpoint {c.watch.number}", "bold red"), f": {c.name}  ",
                           format_value(old), " -> ", (format_value(new), "bold"),
                           "  by ", (s.m.format_instruction(c.pc), "bold"),
                           f" at {s.where(c.pc)} (t={t_write} -> {t_write + 1})")
        if r == "watch" and any(c.watch is not None for c in stop.watched) and \
                stop.direction < 0:
            self.note("(old -> new in the order of time; running backward the write was "
                      "undone: stopped just before it, `step` redoes it)")
        self.show_position(*s.changes(before))

    def report_trap(self, trap: Trap) -> None:
        s = self.s
        way = self._direction_word(trap.direction)
        self.out.print(("Trap: ", "bold red"), (f"{trap.kind}: ", "bold red"), trap.detail)
        where = (f"{trap.location[0]}:{trap.location[1]}:{trap.location[2]}"
                 if trap.location else f"pc {trap.pc}")
        self.out.print(f"  at pc {trap.pc}: ", (trap.instruction, "bold"),
                       f"  ({where}, step {trap.step}, running {way})")
        if trap.values:
            self.out.print("  values: " + ", ".join(f"{k} = {format_value(v)}"
                                                     for k, v in trap.values.items()))
        if self.s.m.core.nest_stop[0]:
            self.note("It trapped inside the nested run of a derivative statement: the "
                      "machine cannot go on or back from here (`run` starts again).")
        elif trap.direction > 0:
            self.note("The faulting instruction has not run. `reverse-step` (rs) or "
                      "`last CELL` goes back to find the cause.")
        else:
            self.note(f"Running backward, undoing the instruction at pc {trap.pc} trapped "
                      f"(t={s.t}); the state here is unchanged.")

    def _value_of_global(self, name: str) -> Any:
        scope = self.s.global_scope()
        return scope.value(scope.reference(name))

    def _move(self, fn: Callable[[], Stop]) -> Stop:
        before = self.s.capture()
        stop = fn()
        self.report(stop, before)
        return stop

    def _dir(self, reverse: bool) -> int:
        return -self.s.direction if reverse else self.s.direction

    # ---- forward ----------------------------------------------------------------------------

    @_cmd("step", ("s",), "forward", "step [N]",
          "run to the next source line (N lines), entering calls",
          """
Runs until the machine reaches an instruction on another source line, in any frame (a call
is entered: the callee's first line).  `stepi` steps by instruction.  A breakpoint, a
watchpoint, the end, a trap or Ctrl-C stop it earlier.  Each stop prints the reason, t,
file:line, the next instruction and the cells that changed (old -> new).""")
    def do_step(self, arg: str) -> None:
        self._move(lambda: self.s.step_line(_count(arg), self._dir(False), over=False))

    @_cmd("stepi", ("si",), "forward", "stepi [N]",
          "run N instructions (default 1), entering calls")
    def do_stepi(self, arg: str) -> None:
        self._move(lambda: self.s.step(_count(arg), self._dir(False)))

    @_cmd("next", ("n",), "forward", "next [N]",
          "run to the next source line of this frame (N lines): a call runs as one step",
          """
Like `step`, but a call (or uncall) runs to its return as one step: it stops at the next
line of this function, or in the caller when the function returns.  `nexti` goes by
instruction.""")
    def do_next(self, arg: str) -> None:
        self._move(lambda: self.s.step_line(_count(arg), self._dir(False), over=True))

    @_cmd("nexti", ("ni",), "forward", "nexti [N]",
          "run N instructions of this frame: a call runs as one step")
    def do_nexti(self, arg: str) -> None:
        self._move(lambda: self.s.next(_count(arg), self._dir(False)))

    @_cmd("continue", ("c", "cont"), "forward", "continue",
          "run until a breakpoint, a watchpoint, a trap or the end",
          """
Runs in the current direction until something stops it.  --limit bounds the steps of one
command; Ctrl-C interrupts (the machine is left between two instructions).""")
    def do_continue(self, arg: str) -> None:
        self._move(lambda: self.s.run(self._dir(False)))

    @_cmd("finish", ("fin",), "forward", "finish",
          "run until the selected frame returns to its caller",
          """
Runs until the selected function (see `up`/`down`) returns, and stops in the caller right
after the call.  In main it runs to the end.""")
    def do_finish(self, arg: str) -> None:
        self._move(lambda: self.s.finish(None, self._dir(False)))

    @_cmd("until", ("u", "advance"), "forward", "until [LOCATION]",
          "run to a location, or past the current line (out of a loop)",
          """
`until LOCATION` runs to the location (a label, line, function or *pc, see `break`), or
until the current frame returns.  Plain `until` runs to a later line of this frame: at the
bottom of a loop it runs until the loop is left.""")
    def do_until(self, arg: str) -> None:
        pcs = set(self.resolve_location(arg)[1]) if arg else None
        self._move(lambda: self.s.until(pcs, self._dir(False)))

    # ---- reverse ----------------------------------------------------------------------------

    @_cmd("reverse-step", ("rs", "back"), "reverse", "reverse-step [N]",
          "back to the start of the previous source line (N lines), entering calls backward",
          """
Runs backward to the first instruction of the previous line (in any frame): exactly where
a forward `step` from there began, so `step` and `reverse-step` retrace each other.  Each
instruction runs its exact inverse, so the state comes back bit for bit (int, fixed and lns;
float within rounding).  Nothing was recorded.  `reverse-stepi` goes by instruction.""")
    def do_reverse_step(self, arg: str) -> None:
        self._move(lambda: self.s.step_line(_count(arg), self._dir(True), over=False))

    @_cmd("reverse-stepi", ("rsi",), "reverse", "reverse-stepi [N]",
          "undo N instructions (default 1), entering calls backward")
    def do_reverse_stepi(self, arg: str) -> None:
        self._move(lambda: self.s.step(_count(arg), self._dir(True)))

    @_cmd("reverse-next", ("rn",), "reverse", "reverse-next [N]",
          "back to the start of the previous line of this frame: a call is undone as one step")
    def do_reverse_next(self, arg: str) -> None:
        self._move(lambda: self.s.step_line(_count(arg), self._dir(True), over=True))

    @_cmd("reverse-nexti", ("rni",), "reverse", "reverse-nexti [N]",
          "undo N instructions of this frame: a call is undone as one step")
    def do_reverse_nexti(self, arg: str) -> None:
        self._move(lambda: self.s.next(_count(arg), self._dir(True)))

    @_cmd("reverse-continue", ("rc",), "reverse", "reverse-continue",
          "run backward until a breakpoint, a watchpoint or the start",
          """
Breakpoints stop where their instruction is about to run, as going forward; a watchpoint
stops just before the write that changed the cell.""")
    def do_reverse_continue(self, arg: str) -> None:
        self._move(lambda: self.s.run(self._dir(True)))

    @_cmd("reverse-finish", ("rf",), "reverse", "reverse-finish",
          "run backward to just before the selected frame was called")
    def do_reverse_finish(self, arg: str) -> None:
        self._move(lambda: self.s.finish(None, self._dir(True)))

    @_cmd("direction", ("dir",), "reverse", "direction forward|reverse|toggle",
          "set which way step/next/continue/finish/until run",
          """
The prompt shows it: `(rdb t=12 >)` forward, `(rdb t=12 <)` reverse.  The reverse-*
commands always run against the current direction.  Without an argument: show it.""")
    def do_direction(self, arg: str) -> None:
        arg = arg.strip()
        choices = {"forward": 1, "f": 1, "+": 1, "reverse": -1, "backward": -1, "r": -1, "-": -1}
        if arg in ("toggle", "t"):
            self.s.direction = -self.s.direction
        elif arg in choices:
            self.s.direction = choices[arg]
        elif arg:
            raise DebugError("direction takes forward, reverse or toggle")
        self.out.print("direction: ", ("forward" if self.s.direction > 0 else "reverse", "bold"))

    # ---- time travel -------------------------------------------------------------------------

    @_cmd("when", (), "time", "when", "show the current step t and position")
    def do_when(self, arg: str) -> None:
        s = self.s
        parts = [f"t={s.t}", f"direction {'forward' if s.direction > 0 else 'reverse'}"]
        if s.end_t is not None:
            parts.append(f"the run ends at t={s.end_t}")
        if s.forked_at is not None:
            parts.append(f"timeline forked by `set` at t={s.forked_at}")
        self.out.print(", ".join(parts))

    @_cmd("goto", ("go", "jump"), "time", "goto T|+N|-N|start|end|BOOKMARK",
          "go to step T (absolute, relative, a bookmark), ignoring breakpoints",
          """
`goto 120` goes to t=120, `goto +10` / `goto -10` moves relative to now, `goto start` and
`goto end` to the ends of the run, `goto NAME` to a bookmark.  The machine runs there
(forward, or backward through the inverses; from t=0 if that is nearer): no state is
stored per step.""")
    def do_goto(self, arg: str) -> None:
        arg = arg.strip()
        if not arg:
            raise DebugError("goto needs a step: T, +N, -N, start, end or a bookmark")
        if arg in ("start", "end"):
            target: int | str = arg
        elif arg in self.s.bookmarks:
            target = self.s.bookmarks[arg]
        else:
            try:
                n = int(arg, 0)
            except ValueError:
                raise DebugError(f"no bookmark named {arg!r}; goto takes T, +N, -N, start, "
                                 f"end or a bookmark") from None
            target = self.s.t + n if arg[0] in "+-" else n
        self._move(lambda: self.s.goto(target))

    @_cmd("run", ("r",), "time", "run",
          "from the start (t=0), run forward until a breakpoint, a watchpoint, a trap or the end",
          """
gdb's `run`: the program starts again from its inputs (the state at t=0, reached by running
back or from the stored start) and continues forward.""")
    def do_run(self, arg: str) -> None:
        before = self.s.capture()
        t0 = self.s.t
        s = self.s.goto("start")
        if s.reason not in ("goto", "start"):
            self.report(s, before)
            return
        stop = self.s.run(+1)
        stop.t0 = t0
        self.report(stop, before)

    @_cmd("start", (), "time", "start",
          "from the start (t=0), run to the first line of main's body")
    def do_start(self, arg: str) -> None:
        before = self.s.capture()
        s = self.s.goto("start")
        if s.reason not in ("goto", "start"):
            self.report(s, before)
            return
        entry = self.s.program.functions[-1]
        main = next((f for f in self.s.program.functions if f.name == "main"), entry)
        pc = main.begin + 1 if main.begin + 1 <= main.end else main.begin
        self.report(self.s.until({pc}, +1), before)

    @_cmd("bookmark", ("bm",), "time", "bookmark [NAME]",
          "name the current step (goto NAME comes back)")
    def do_bookmark(self, arg: str) -> None:
        name = arg.strip() or f"b{len(self.s.bookmarks) + 1}"
        if not re.fullmatch(r"[A-Za-z_][\w.-]*", name) or name in ("start", "end"):
            raise DebugError(f"a bookmark name is a word (not start or end), not {name!r}")
        self.s.bookmarks[name] = self.s.t
        self.out.print(f"bookmark {name} at t={self.s.t} ({self.s.where()})")

    @_cmd("bookmarks", (), "time", "bookmarks", "list the bookmarks")
    def do_bookmarks(self, arg: str) -> None:
        if not self.s.bookmarks:
            self.out.print("no bookmarks")
            return
        for name, t in sorted(self.s.bookmarks.items(), key=lambda kv: kv[1]):
            mark = "  <- now" if t == self.s.t else ""
            self.out.print(f"{name:<12} t={t}{mark}")

    # ---- breakpoints -----------------------------------------------------------------------

    def resolve_location(self, text: str) -> tuple[str, list[int]]:
        """A breakpoint location: `*PC`, a label, a function, LINE or FILE:LINE.  Returns
        (description, pcs)."""
        program = self.s.program
        text = text.strip()
        if not text:
            return f"pc {self.s.pc}", [self.s.pc]
        if text.startswith("*"):
            try:
                pc = int(text[1:], 0)
            except ValueError:
                raise DebugError(f"bad address {text!r}: write *PC, e.g. *12") from None
            if not 0 <= pc < len(program.code):
                raise DebugError(f"pc {pc} is outside the code (0..{len(program.code) - 1})")
            return f"pc {pc}", [pc]
        labels = [pc for pc, name in program.labels.items() if name == text]
        if labels:
            return f"label {text}", labels
        for f in program.functions:
            if f.name == text:
                return f"function {text}", [f.begin + 1 if f.begin + 1 <= f.end else f.begin]
        fname, sep, line_text = text.rpartition(":")
        if not line_text.isdigit():
            raise DebugError(f"no label, function or line {text!r} (a location is a label, "
                             f"a function, LINE, FILE:LINE or *PC)")
        line = int(line_text)
        if sep:
            files = [i for i, f in enumerate(program.files)
                     if f == fname or f.endswith("/" + fname) or
                     f.rsplit("/", 1)[-1] == fname]
            if not files:
                raise DebugError(f"no source file {fname!r} in this program (files: "
                                 f"{', '.join(program.files)})")
        else:
            here = self.s.location(self.s.frame_pc(self.s.level))
            current = program.files.index(here[0]) if here and here[0] in program.files else 0
            files = [current]
        return self._line_pcs(files, line)

    def _line_pcs(self, files: list[int], line: int) -> tuple[str, list[int]]:
        program = self.s.program
        rows = program.lines
        if rows is None:
            raise DebugError("this program has no line table")
        best = None
        for fi in files:
            lines_here = sorted({int(r[1]) for r in rows if int(r[0]) == fi and r[1] >= line})
            if lines_here and (best is None or lines_here[0] < best[1]):
                best = (fi, lines_here[0])
        if best is None:
            raise DebugError(f"no code at or after line {line}")
        fi, at = best
        pcs = []
        for pc in range(len(rows)):
            if int(rows[pc, 0]) == fi and int(rows[pc, 1]) == at:
                first = pc == 0 or int(rows[pc - 1, 1]) != at or int(rows[pc - 1, 0]) != fi
                if first or program.op_at(pc).name == "join":
                    pcs.append(pc)
        desc = f"{program.files[fi]}:{at}"
        if at != line:
            desc += f" (no code at line {line})"
        return desc, pcs

    def _split_condition(self, arg: str) -> tuple[str, str | None]:
        m = re.match(r"^(\S*)\s*(?:\bif\b\s*(.*))?$", arg.strip())
        if not m:
            raise DebugError("usage: break LOCATION [if CONDITION]")
        return m.group(1), m.group(2)

    @_cmd("break", ("b", "br"), "breakpoints", "break [LOCATION] [if CONDITION]",
          "stop at a label, line, function or *pc, in both directions",
          """
LOCATION is a label (`top`, `if2.fi`), a function (its first instruction), LINE or
FILE:LINE (each entry into the line's code), or *PC.  Without one: the current instruction.
`if CONDITION` stops only when the expression is true in the stopped frame, e.g.
`break 14 if n == 3`.  Breakpoints stop running forward and backward, where the
instruction is about to run.  See also tbreak, condition, delete, disable, enable.""")
    def do_break(self, arg: str, temporary: bool = False) -> None:
        loc, cond = self._split_condition(arg)
        desc, pcs = self.resolve_location(loc)
        spec = desc.split(" (")[0] if not loc or loc.isdigit() else loc   # `15` -> file:15
        bp = self.s.add_breakpoint(spec, pcs, cond, temporary)
        kind = "Temporary breakpoint" if temporary else "Breakpoint"
        self.out.print((f"{kind} {bp.number}", "bold"),
                       f" at {desc}: pc {', '.join(map(str, pcs))}",
                       f" if {bp.condition}" if bp.condition else "")
        nested = self.s.nested_note(pcs)
        if nested:
            self.note(f"Note: {nested}.")

    @_cmd("tbreak", ("tb",), "breakpoints", "tbreak LOCATION [if CONDITION]",
          "a breakpoint that is deleted when it first stops")
    def do_tbreak(self, arg: str) -> None:
        self.do_break(arg, temporary=True)

    @_cmd("condition", ("cond",), "breakpoints", "condition N [EXPRESSION]",
          "stop at breakpoint N only when the expression is true (none: always)")
    def do_condition(self, arg: str) -> None:
        num, _, expr = arg.strip().partition(" ")
        bp = self.s.breakpoints.get(_count(num, -1))
        if bp is None:
            raise DebugError(f"no breakpoint number {num!r}")
        if expr.strip():
            self.s.scope()._parse(expr)
        bp.condition = expr.strip() or None
        self.out.print(f"breakpoint {bp.number}: " +
                       (f"stops if {bp.condition}" if bp.condition else "unconditional"))

    @_cmd("delete", ("d",), "breakpoints", "delete [N ...]",
          "delete breakpoints or watchpoints (all, without numbers)")
    def do_delete(self, arg: str) -> None:
        nums = arg.split()
        if not nums:
            n = len(self.s.breakpoints) + len(self.s.watchpoints)
            self.s.breakpoints.clear()
            self.s.watchpoints.clear()
            self.out.print(f"deleted {n} breakpoints and watchpoints")
            return
        for x in nums:
            what = self.s.delete(_count(x, -1))
            self.out.print(f"deleted {what} {x}")

    def _toggle(self, arg: str, on: bool) -> None:
        nums = [_count(x, -1) for x in arg.split()] or \
            list(self.s.breakpoints) + list(self.s.watchpoints)
        for n in nums:
            item = self.s.breakpoints.get(n) or self.s.watchpoints.get(n)
            if item is None:
                raise DebugError(f"no breakpoint or watchpoint number {n}")
            item.enabled = on
        self.out.print(f"{'enabled' if on else 'disabled'} {', '.join(map(str, nums)) or 'none'}")

    @_cmd("disable", ("dis",), "breakpoints", "disable [N ...]",
          "disable breakpoints or watchpoints (all, without numbers)")
    def do_disable(self, arg: str) -> None:
        self._toggle(arg, False)

    @_cmd("enable", ("en",), "breakpoints", "enable [N ...]", "enable them again")
    def do_enable(self, arg: str) -> None:
        self._toggle(arg, True)

    # ---- watch -------------------------------------------------------------------------------

    @_cmd("watch", ("w",), "watch", "watch CELL [if COND]",
          "stop whenever a cell (or any cell of an array/slice) changes, in either direction",
          """
CELL is a name, name[i], name[a:b] or @ADDR.  Each stop prints old -> new in the order of
time and the instruction that wrote it.  Running backward the stop is just before the write.
`if COND` stops only when the expression is true after the change (forward; before it,
backward).  A local is watched in the frame it names now.""")
    def do_watch(self, arg: str, kind: str = "write") -> None:
        if not arg.strip():
            raise DebugError(f"{'r' if kind == 'read' else ''}watch needs a cell: watch x, "
                             "watch xs[2], watch xs[0:3] [if COND]")
        m = re.match(r"^(.*?)(?:\s+if\s+(.*))?$", arg.strip())
        assert m is not None
        wp = self.s.add_watch(m.group(1), m.group(2), kind)
        value = format_value(self.s.scope().value(wp.ref))
        kind_name = "Read watchpoint" if kind == "read" else "Watchpoint"
        self.out.print((f"{kind_name} {wp.number}", "bold"), f": {wp.ref.name} = {value}",
                       "" if wp.where == "global" else f" (in {wp.where})",
                       f" if {wp.condition}" if wp.condition else "")

    @_cmd("rwatch", ("rw",), "watch", "rwatch CELL [if COND]",
          "stop before an instruction reads a cell, in either direction",
          """
Stops where an instruction that reads CELL as a source (an input of an update, an operand
of a condition or a trace) is about to run forward, as a breakpoint would, running forward
and backward.  A cell read through an index or a parameter is found at run time.""")
    def do_rwatch(self, arg: str) -> None:
        self.do_watch(arg, kind="read")

    @_cmd("last", ("lw",), "watch", "last CELL",
          "run back to the most recent write of a cell and say who wrote it",
          """
Runs backward to just before the instruction that last changed CELL (a name, name[i], a
slice or @ADDR) and prints `was X, now Y, by <instruction> at file:line (t=...)`.  If
nothing wrote it since the start (or, for a local, since its frame was entered), it says so
and stays where it was.""")
    def do_last(self, arg: str) -> None:
        if not arg.strip():
            raise DebugError("last needs a cell: last x")
        before = self.s.capture()
        t0 = self.s.t
        write, stop = self.s.last(arg)
        if write is None:
            if stop.reason == "trap":
                self.report(stop, before)
                return
            why = {"start": "since the start (t=0)",
                   "entry": "since its frame was entered",
                   "limit": f"in the last {self.s.limit} steps (--limit)",
                   "interrupted": "before Ctrl-C"}.get(stop.reason, stop.reason)
            value = format_value(self.s.scope().value(self.s.scope().reference(arg)))
            self.out.print(f"{arg.strip()} was not written {why}; it is {value} (still at "
                           f"t={self.s.t})")
            return
        s = self.s
        self.out.print((write.name, "bold"), " was ", (format_value(write.old), "bold"),
                       ", now ", (format_value(write.new), "bold"), ", by ",
                       (s.m.format_instruction(write.pc), "bold"), f" at {s.where(write.pc)} "
                       f"(t={write.t})")
        self.report(Stop("last", -1, t0, s.t), before)

    @_cmd("history", ("hist",), "watch", "history CELL [N]",
          "list the last N writes of a cell (default 20), oldest first")
    def do_history(self, arg: str) -> None:
        m = re.match(r"^(.*?)(?:\s+(\d+|all))?$", arg.strip())
        if not m or not m.group(1):
            raise DebugError("history needs a cell: history x [N]")
        n = 1 << 62 if m.group(2) == "all" else int(m.group(2) or 20)
        writes, more, stop = self.s.history(m.group(1), n)
        s = self.s
        if stop.reason == "trap" and stop.trap is not None:
            self.note(f"(the search back stopped at a trap: {stop.trap.detail})")
        if not writes:
            self.out.print(f"{m.group(1)}: no writes before t={s.t}")
            return
        self.out.print(f"{m.group(1)}: {len(writes)} write{'s' if len(writes) != 1 else ''} "
                       f"before t={s.t}" + (f" (the last {len(writes)}; `history "
                                            f"{m.group(1)} all` for every one)" if more else ""))
        self.out.table([[str(w.t), w.name, f"{format_value(w.old)} -> {format_value(w.new)}",
                         s.m.format_instruction(w.pc), s.where(w.pc)] for w in writes],
                       ["t", "cell", "old -> new", "instruction", "at"])

    # ---- inspect -----------------------------------------------------------------------------

    @_cmd("print", ("p",), "inspect", "print[/x] EXPRESSION",
          "print a cell, an array or slice, or an expression",
          """
Names (locals and parameters of the selected frame, then globals and constants), name[i],
name[a:b], @ADDR (a raw memory cell), numbers, + - * / // % **, comparisons, and/or/not,
len/abs/min/max/sum.  `print/x` prints the raw 64-bit words in hex.""")
    def do_print(self, arg: str) -> None:
        fmt = ""
        if arg.startswith("/"):
            fmt, _, arg = arg[1:].partition(" ")
        if not arg.strip():
            raise DebugError("print needs an expression")
        scope = self.s.scope()
        if fmt == "x":
            ref = scope.reference(arg)
            words = scope.words(ref)
            text = hex_word(words[0]) if ref.length is None else \
                "[" + ", ".join(hex_word(w) for w in words) + "]"
        elif fmt:
            raise DebugError(f"unknown print format /{fmt} (only /x)")
        else:
            text = format_value(scope.evaluate(arg))
        self.out.print(f"{arg.strip()} = ", (text, "bold"))

    @_cmd("display", ("disp",), "inspect", "display [EXPRESSION]",
          "print an expression after every stop (none: show them now)")
    def do_display(self, arg: str) -> None:
        if not arg.strip():
            self.show_displays()
            return
        self.s.scope()._parse(arg)
        self._display_n += 1
        self.displays[self._display_n] = arg.strip()
        self.show_displays()

    @_cmd("undisplay", ("undisp",), "inspect", "undisplay [N ...]", "remove displays")
    def do_undisplay(self, arg: str) -> None:
        for x in arg.split() or list(self.displays):
            self.displays.pop(_count(str(x), -1), None)

    @_cmd("info", ("i",), "inspect",
          "info locals|globals|stack|frames|breakpoints|display|line [LOC]",
          "locals and parameters, globals, the value stack, frames, breakpoints")
    def do_info(self, arg: str) -> None:
        what = arg.strip().split(" ")[0]
        table = {"locals": self.info_locals, "args": self.info_locals,
                 "globals": self.info_globals, "variables": self.info_globals,
                 "stack": self.info_stack, "frames": self.do_where, "frame": self.do_where,
                 "breakpoints": self.info_breakpoints, "watchpoints": self.info_breakpoints,
                 "break": self.info_breakpoints, "display": self.do_display,
                 "bookmarks": self.do_bookmarks, "time": self.do_when,
                 "line": self.info_line}
        fn = next((fn for k, fn in table.items() if what and k.startswith(what)), None)
        if fn is None:
            raise DebugError("info takes locals, globals, stack, frames, breakpoints, display, "
                             "bookmarks, time or line")
        fn(arg.strip()[len(what):].strip())

    def _cell_rows(self, refs: list[Ref], scope: Any = None) -> None:
        scope = scope or self.s.scope()
        self.out.table([[ref.name, format_value(scope.value(ref)),
                         ref.type.name.lower() if ref.type is not None else ""]
                        for ref in refs], styles=["cyan", None, "dim"])

    def info_line(self, arg: str = "") -> None:
        """`info line [LOCATION]`: the instructions (pcs) of a source line."""
        s = self.s
        if arg:
            desc, pcs = self.resolve_location(arg)
            line = s.line_of(pcs[0])
        else:
            line = s.line_of(s.frame_pc(s.level))
        if line is None:
            raise DebugError("no source line here")
        pcs = [pc for pc in range(len(s.program.code)) if s.line_of(pc) == line]
        if not pcs:
            raise DebugError(f"no code at {line[0]}:{line[1]}")
        self.out.print(f"Line {line[1]} of {line[0]} is at pc {pcs[0]}" +
                       (f" to {pcs[-1]}" if len(pcs) > 1 else "") +
                       f" ({len(pcs)} instruction{'s' if len(pcs) != 1 else ''}):")
        for pc in pcs:
            self.out.print(f"  {pc:>5}  {s.m.format_instruction(pc)}")

    def info_locals(self, arg: str = "") -> None:
        level = self.s.level
        if level is None:
            self.out.print("no frame (the program is at its start or end)")
            return
        fi, fp = self.s.m.core.frame(level)[:2]
        f = self.s.program.functions[fi]
        scope = self.s.scope()
        names = [p.name for p in f.params] + list(dict.fromkeys(loc.name for loc in f.locals))
        refs = [scope.names[n] for n in names if n in scope.names]
        if not refs:
            self.out.print(f"{f.name} has no parameters or locals")
            return
        self._cell_rows(refs)

    def info_globals(self, arg: str = "") -> None:
        scope = self.s.global_scope()
        refs = [scope.names[g.name] for g in self.s.program.globals]
        self._cell_rows(refs, scope)

    def info_stack(self, arg: str = "") -> None:
        words = self.s.m.stack()
        if not len(words):
            self.out.print("the value stack is empty")
            return
        n = len(words)
        self.out.print(f"value stack ({n} word{'s' if n != 1 else ''}, top last):")
        for k, w in enumerate(words):
            self.out.print(f"  [{k}] {int(w)}  {hex_word(int(w))}")

    def info_breakpoints(self, arg: str = "") -> None:
        s = self.s
        if not s.breakpoints and not s.watchpoints:
            self.out.print("no breakpoints or watchpoints")
            return
        rows = []
        for n in sorted(list(s.breakpoints) + list(s.watchpoints)):
            if n in s.breakpoints:
                bp = s.breakpoints[n]
                where = f"{bp.spec} (pc {', '.join(map(str, sorted(bp.pcs)))})"
                if bp.condition:
                    where += f" if {bp.condition}"
                rows.append([str(n), "tbreak" if bp.temporary else "break",
                             "y" if bp.enabled else "n", where, str(bp.hits)])
            else:
                wp = s.watchpoints[n]
                rows.append([str(n), "rwatch" if wp.kind == "read" else "watch",
                             "y" if wp.enabled else "n",
                             wp.ref.name + ("" if wp.where == "global" else f" in {wp.where}")
                             + (f" if {wp.condition}" if wp.condition else ""),
                             str(wp.hits)])
        self.out.table(rows, ["num", "type", "enabled", "where", "hits"])

    @_cmd("where", ("bt", "backtrace", "frames"), "inspect", "where",
          "the call stack, innermost frame first")
    def do_where(self, arg: str = "") -> None:
        s = self.s
        if s.depth == 0:
            self.out.print(f"no frames: the program is at its {s.status} (t={s.t})")
            return
        core = s.m.core
        for level in range(s.depth - 1, -1, -1):
            fi, fp, _, _, fdir = core.frame(level)
            f = s.program.functions[fi]
            pc = s.frame_pc(level)
            mark = "=>" if level == s.level else "  "
            args = ", ".join(p.name for p in f.params)
            way = "" if fdir > 0 else "  (uncalled: runs backward)"
            self.out.print((f"{mark} #{s.depth - 1 - level} ", "bold"), (f"{f.name}({args})",
                           "cyan"), f" at {s.where(pc)}, pc {pc}: {s.m.format_instruction(pc)}",
                           way)

    def _select(self, level: int) -> None:
        s = self.s
        if s.depth == 0:
            raise DebugError("no frames")
        s.selected = max(0, min(level, s.depth - 1))
        if s.selected == s.depth - 1:
            s.selected = None
        lv = s.level
        assert lv is not None
        f = s.program.functions[s.m.core.frame(lv)[0]]
        pc = s.frame_pc(lv)
        self.out.print((f"#{s.depth - 1 - lv} {f.name}", "bold"), f" at {s.where(pc)}, "
                       f"pc {pc}: {s.m.format_instruction(pc)}")

    @_cmd("frame", ("f",), "inspect", "frame [N]",
          "select frame N (#N in `where`, 0 the innermost); none: show the selected one")
    def do_frame(self, arg: str) -> None:
        s = self.s
        if s.depth == 0:
            raise DebugError("no frames")
        if not arg.strip():
            lv = s.level
            assert lv is not None
            self._select(lv)
            return
        n = _count(arg, 0)
        if n >= s.depth:
            raise DebugError(f"no frame #{n} (the stack has {s.depth})")
        self._select(s.depth - 1 - n)

    @_cmd("x", (), "inspect", "x[/N] CELL|@ADDR",
          "examine memory: N raw words from a cell or address, with their decoded values",
          """
`x/4 xs` shows 4 cells from xs[0]: the address, the name, the raw word in hex and the value
by the cell's type; `x @12` one raw cell.""")
    def do_x(self, arg: str) -> None:
        count = None
        if arg.startswith("/"):
            fmt, _, arg = arg[1:].partition(" ")
            digits = "".join(ch for ch in fmt if ch.isdigit())
            count = int(digits) if digits else None
        if not arg.strip():
            raise DebugError("x needs a cell or @ADDR")
        scope = self.s.scope()
        ref = scope.reference(arg)
        n = count if count is not None else (ref.length or 1)
        mem = self.s.m.mem
        rows = []
        for k in range(n):
            addr = ref.addr + k
            if addr >= len(mem):
                break
            name = scope.name_of(addr) or f"@{addr}"
            word = int(mem[addr])
            cell = scope.reference(name) if not name.startswith("@") else None
            value = format_value(scope.value(cell)) if cell is not None and \
                cell.length is None else str(word)
            rows.append([f"@{addr}", name, hex_word(word), value])
        self.out.table(rows)

    @_cmd("up", (), "inspect", "up [N]", "select the caller's frame (N levels up)")
    def do_up(self, arg: str) -> None:
        lv = self.s.level
        self._select((lv if lv is not None else 0) - _count(arg))

    @_cmd("down", (), "inspect", "down [N]", "select the callee's frame again")
    def do_down(self, arg: str) -> None:
        lv = self.s.level
        self._select((lv if lv is not None else 0) + _count(arg))

    @_cmd("list", ("l",), "inspect", "list [LOCATION|FILE:LINE]",
          "source around the current line (marked =>), breakpoints marked B",
          """
Shows 11 lines around the selected frame's line, or around a location; `list` again
continues below.""")
    def do_list(self, arg: str) -> None:
        s = self.s
        if arg.strip():
            desc, pcs = self.resolve_location(arg)
            loc = s.location(pcs[0])
            if loc is None:
                raise DebugError("no source line for that location")
            name, center = loc[0], loc[1]
            first = max(1, center - 5)
        elif self.list_next is not None:
            name, first = self.list_next
        else:
            loc = s.location(s.frame_pc(s.level))
            if loc is None:
                raise DebugError("no source line here")
            name, center = loc[0], loc[1]
            first = max(1, center - 5)
        lines = self.sources.lines(name)
        if lines is None:
            raise DebugError(f"cannot read the source file {name}")
        here = s.location(s.frame_pc(s.level))
        bp_lines = {loc[1] for bp in s.breakpoints.values() for pc in bp.pcs
                    for loc in [s.location(pc)] if loc and loc[0] == name}
        last = min(len(lines), first + 10)
        if first > len(lines):
            raise DebugError(f"{name} has only {len(lines)} lines")
        for n in range(first, last + 1):
            cur = here is not None and here[0] == name and here[1] == n
            mark = "=>" if cur else "  "
            b = "B" if n in bp_lines else " "
            self.out.print((mark, "bold yellow"), (b, "bold red"),
                           (f"{n:>4}  ", "yellow" if cur else "dim"), self.out.code(lines[n - 1]),
                           style="on grey23" if cur and self.out.color else None)
        self.list_next = (name, last + 1)

    @_cmd("disassemble", ("disas",), "inspect", "disassemble [FUNCTION]",
          "the instructions of a function, the current one marked =>")
    def do_disassemble(self, arg: str) -> None:
        s = self.s
        program = s.program
        if arg.strip():
            try:
                f = program.function_named(arg.strip())
            except KeyError:
                raise DebugError(f"no function named {arg.strip()!r}") from None
        else:
            f = program.function_at(s.frame_pc(s.level))
            if f is None:
                raise DebugError("no current function")
        here = s.frame_pc(s.level)
        bps = {pc for bp in s.breakpoints.values() for pc in bp.pcs}
        for pc in range(f.begin, f.end + 1):
            label = program.labels.get(pc)
            if label:
                self.out.print((f"        {label}:", "cyan"))
            loc = program.location(pc)
            self.out.print(("=>" if pc == here else "  ", "bold yellow"),
                           ("B" if pc in bps else " ", "bold red"), f"{pc:>5}  ",
                           (f"{s.m.format_instruction(pc):<36}", "bold" if pc == here else ""),
                           (f" ; {loc[0]}:{loc[1]}" if loc else "", "dim"))

    @_cmd("diff", (), "inspect", "diff T1 [T2]",
          "the cells that differ between the states at two steps (T2: now)",
          """
The machine runs to T1 and T2 (forward or backward) and comes back; the states are compared
cell by cell (globals, and frame locals by function and depth), with the position and the
value stack.  T may be a number, start, end or a bookmark.""")
    def do_diff(self, arg: str) -> None:
        parts = arg.split()
        if not 1 <= len(parts) <= 2:
            raise DebugError("usage: diff T1 [T2]")
        times = [self._time(p) for p in parts] + ([self.s.t] if len(parts) == 1 else [])
        a, b = self.s.diff(times[0], times[1])
        s = self.s
        self.out.print(f"t={a['t']} -> t={b['t']}:")
        if a["pc"] != b["pc"]:
            self.out.print(f"  pc     {a['pc']} ({s.where(a['pc'])}) -> {b['pc']} "
                           f"({s.where(b['pc'])})")
        if a["depth"] != b["depth"]:
            self.out.print(f"  depth  {a['depth']} -> {b['depth']}")
        if a["stack"] != b["stack"]:
            self.out.print(f"  value stack  {len(a['stack'])} -> {len(b['stack'])} words")
        n = 0
        keys = list(dict.fromkeys(list(a["cells"]) + list(b["cells"])))
        for k in keys:
            ra, wa = a["cells"].get(k, (None, None))
            rb, wb = b["cells"].get(k, (None, None))
            if wa == wb or (wa is None and wb == 0) or (wb is None and wa == 0):
                continue        # a frame cell that exists on one side only and is zero
            n += 1
            ref = ra or rb
            name = k.split("@")[0]
            va = "-" if wa is None else format_value(s._decode(ref, wa))
            vb = "-" if wb is None else format_value(s._decode(ref, wb))
            self.out.print(f"  {name}  {va} -> ", (vb, "bold"))
        if n == 0:
            self.out.print("  no cell differs")

    def _time(self, text: str) -> int | str:
        if text in ("start", "end"):
            return text
        if text in self.s.bookmarks:
            return self.s.bookmarks[text]
        try:
            return int(text, 0)
        except ValueError:
            raise DebugError(f"not a step or bookmark: {text!r}") from None

    @_cmd("set", (), "inspect", "set CELL = VALUE",
          "change a cell: forks the timeline (asks first; later bookmarks are dropped)",
          """
VALUE is an expression, a list for an array (`set xs = [1, 2, 3]`; one number fills it), or
a raw word `$0x...`.  Changing the state changes both the future and the past that running
backward reaches, so it asks for confirmation and drops the bookmarks after now.""")
    def do_set(self, arg: str) -> None:
        if arg.startswith("var "):
            arg = arg[4:]
        cell, eq, value = arg.partition("=")
        if not eq or not cell.strip() or not value.strip():
            raise DebugError("usage: set CELL = VALUE")
        scope = self.s.scope()
        ref = scope.reference(cell)             # check the cell and value before asking
        if not ref.writable:
            raise DebugError(f"{ref.name} is a constant (read-only)")
        v = scope.value_for_store(value)
        n = ref.length or 1
        if isinstance(v, list) and len(v) != n:
            raise DebugError(f"{ref.name} has {n} cell{'s' if n != 1 else ''}, the value "
                             f"has {len(v)}")
        later = [n for n, t in self.s.bookmarks.items() if t > self.s.t]
        question = (f"Changing {cell.strip()} forks the timeline at t={self.s.t}: the run "
                    f"from here on (and back) will differ" +
                    (f", and the later bookmarks {', '.join(later)} are dropped" if later else "")
                    + ". Change it?")
        if not self.confirm(question):
            self.out.print("not changed")
            return
        ref, old, new = self.s.set_cell(cell, value)
        self.out.print(f"{ref.name}: {format_value(old)} -> ", (format_value(new), "bold"),
                       f"  (timeline forked at t={self.s.t})")

    # ---- session -----------------------------------------------------------------------------

    @_cmd("help", ("h", "?"), "session", "help [COMMAND]", "list the commands, or explain one")
    def do_help(self, arg: str) -> None:
        arg = arg.strip()
        if arg:
            c = lookup(arg) or next((c for c in COMMANDS if c.group == arg), None)
            if c is None:
                raise DebugError(f"no command {arg!r}; `help` lists them")
            if c.group == arg and c.name != arg:
                self._help_group(arg)
                return
            self.out.print((c.usage, "bold"))
            if c.aliases:
                self.out.print("  aliases: " + ", ".join(c.aliases))
            self.out.print("  " + c.summary)
            if c.details:
                for line in c.details.splitlines():
                    self.out.print("  " + line)
            return
        self.out.print("rdb: a reverse debugger. Every instruction has an exact inverse, so "
                       "stepping backward runs it (nothing is recorded).")
        for group, _ in GROUPS:
            self._help_group(group)
        self.out.print("A location is a label, a function, LINE, FILE:LINE or *PC. Empty input "
                       "repeats the last command. `help CMD` explains one.")

    def _help_group(self, group: str) -> None:
        title = dict(GROUPS)[group]
        self.out.print((title, "bold underline"))
        width = max(len(_names(c)) for c in COMMANDS) + 2
        for c in COMMANDS:
            if c.group == group:
                self.out.print(("  ", ""), (f"{_names(c):<{width}}", "cyan"), c.summary)

    @_cmd("quit", ("q", "exit"), "session", "quit", "leave the debugger")
    def do_quit(self, arg: str) -> None:
        raise Quit()

    @_cmd("echo", (), "session", "echo TEXT", "print text (for command files)")
    def do_echo(self, arg: str) -> None:
        self.out.print(arg)

    @_cmd("source", (), "session", "source FILE", "run the commands in a file")
    def do_source(self, arg: str) -> None:
        try:
            lines = open(shlex.split(arg)[0] if arg.strip() else "").read().splitlines()
        except (OSError, IndexError, ValueError) as e:
            raise DebugError(f"cannot read commands: {e}") from None
        for line in lines:
            if line.strip() and not line.strip().startswith("#"):
                self.out.print(self.prompt() + line.strip(),
                               style="dim" if self.out.color else None)
            if not self.execute(line):
                raise DebugError(f"stopped: a command in {arg.strip()} failed")
