"""`rvm debug`: the interactive reverse debugger, and its batch mode.

    rvm debug programs/rfib.rasm n=6                 # the prompt: (rdb t=0 >)
    rvm debug programs/rfib.rasm -x cmds.txt --batch # run a command file, print plain text

Exit status: 0 when every command ran (a trap is a stop, not a failure); 1 when a command
failed (batch mode stops at the first one, naming its line), or the program does not assemble;
2 for bad arguments or input values.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from typing import IO, Any

from rvm.cli import positive_int

from .commands import Debugger, Quit
from .engine import Session
from .view import Out

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

EPILOG = """\
At the prompt, `help` lists the commands by group (forward, reverse, time, breakpoints,
watch, inspect, session) and `help CMD` explains one.  Stepping backward runs the inverse
instructions: nothing is recorded, so memory does not grow with the run.

examples:
  rvm debug programs/rfib.rasm n=6
  rvm debug programs/debug/average.rasm -x cmds.txt --batch
  rvm debug programs/isqrt.rasm x=1000 -e 'break from1.exit' -e continue -e 'last r' --batch
  rvm debug --dap                 # a Debug Adapter Protocol server for an editor (stdio)
  rvm debug --dap --port 4711     # the same on localhost:4711

exit status: 0 every command ran, 1 a command failed (or the program does not assemble),
2 usage error.
"""


def register(sub: Any) -> None:
    s = sub.add_parser(
        "debug", help="interactive reverse debugger: step forward and backward",
        description="Debug a program forward and backward: breakpoints and watchpoints that "
                    "stop in both directions, `last` writer of a cell, goto any step, "
                    "bookmarks. Values are NAME=VALUE inputs.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    s.add_argument("program", nargs="?", help=".rasm, .ja or .rbc file (with --dap: given by "
                   "the editor's launch request)")
    s.add_argument("values", nargs="*", metavar="NAME=VALUE", help="input values")
    s.add_argument("--inputs", "-i", metavar="FILE.json", help="input values from a JSON object")
    s.add_argument("-x", "--command", dest="command_file", metavar="FILE",
                   help="run the commands in FILE first (then the prompt, unless --batch)")
    s.add_argument("-e", "--ex", dest="commands", action="append", default=[], metavar="CMD",
                   help="run a command first (repeatable; after -x)")
    s.add_argument("--batch", action="store_true",
                   help="exit after the -x/-e commands; stop at the first that fails (exit 1)")
    s.add_argument("--limit", type=positive_int, metavar="N",
                   help="no command runs more than N steps (Ctrl-C also interrupts)")
    s.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour and highlighting (auto: only on a terminal and without --batch)")
    s.add_argument("--dap", action="store_true",
                   help="serve the Debug Adapter Protocol on stdin/stdout (for an editor: "
                        "VS Code, vimspector, nvim-dap...) instead of the prompt")
    s.add_argument("--port", type=int, metavar="N",
                   help="with --dap: listen on localhost:N instead (0: a free port, printed "
                        "on stderr); one client, then exit")
    s.set_defaults(func=cmd_debug)


def _tty(f: IO[str]) -> bool:
    try:
        return f.isatty()
    except (AttributeError, ValueError):
        return False


def cmd_debug(a: argparse.Namespace) -> int:
    from rvm.cli import UsageError, collect_values, load_program, set_values
    from rvm.errors import RVMError

    if a.dap or a.port is not None:
        from .dap import serve_stdio, serve_tcp
        if a.port is not None and not 0 <= a.port < 65536:
            raise UsageError(f"--port {a.port} is not a port number")
        return serve_tcp(a.port) if a.port is not None else serve_stdio()
    if a.program is None:
        raise UsageError("a program is needed (or --dap, where the editor names it)")
    program = load_program(a.program)
    scripted: list[tuple[str, str]] = []
    if a.command_file:
        try:
            with open(a.command_file) as f:
                scripted += [(f"{a.command_file}:{i}", line) for i, line in enumerate(f, 1)]
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read the command file: {e}") from None
    values = collect_values(a.values, a.inputs)
    color = a.color == "always" or (a.color == "auto" and not a.batch and _tty(sys.stdout)
                                    and os.environ.get("NO_COLOR") is None
                                    and os.environ.get("TERM") != "dumb")
    out = Out(sys.stdout, color)

    def trace(event: Any) -> None:
        out.print(("trace: ", "magenta"), f"{event.message} " +
                  " ".join(f"{k}={v}" for k, v in event.values.items()) + f"  (t={event.step})")

    try:
        session = Session(program, limit=a.limit, trace=trace,
                          setup=lambda m: set_values(m, values, at_end=False))
    except (RVMError, ValueError, IndexError) as e:
        raise UsageError(str(e)) from None
    interactive = _tty(sys.stdin) and not a.batch
    dbg = Debugger(session, out, batch=not interactive,
                   confirm=_ask if interactive else _yes(out))
    out.print(("rvm debug", "bold"), f": {a.program}, {len(program.code)} instructions. "
              "`help` lists the commands.")
    dbg.show_position()

    scripted += [(f"-e #{i}", c) for i, c in enumerate(a.commands, 1)]
    try:
        if not _run_lines(dbg, scripted, echo=True):
            return EXIT_FAILED
        if a.batch:
            return EXIT_OK
        if interactive:
            _repl(dbg)
            return EXIT_OK
        # commands piped on stdin: like a command file, echoed
        ok = _run_lines(dbg, ((f"<stdin>:{i}", line) for i, line in enumerate(sys.stdin, 1)),
                        echo=True)
        return EXIT_OK if ok else EXIT_FAILED
    except Quit:
        return EXIT_OK


def _run_lines(dbg: Debugger, lines: Iterable[tuple[str, str]], echo: bool) -> bool:
    for where, line in lines:
        line = line.rstrip("\n")
        if not line.strip() or line.strip().startswith("#"):
            continue
        if echo:
            dbg.out.print(dbg.prompt() + line.strip(), style="dim" if dbg.out.color else None)
        if not dbg.execute(line):
            sys.stdout.flush()
            print(f"rvm debug: {where}: the command {line.strip()!r} failed", file=sys.stderr)
            return False
    return True


def _repl(dbg: Debugger) -> None:
    try:
        import readline  # noqa: F401  (line editing and history for input())
    except ImportError:
        pass
    last = ""
    while True:
        try:
            line = input(dbg.prompt())
        except EOFError:
            dbg.out.print("")
            return
        except KeyboardInterrupt:
            dbg.out.print("^C")
            continue
        if not line.strip():
            line = last                     # gdb: an empty line repeats the last command
        else:
            last = line
        if line.strip():
            try:
                dbg.execute(line)
            except KeyboardInterrupt:        # outside a run (runs stop cleanly themselves)
                dbg.out.print("interrupted")


def _ask(question: str) -> bool:
    try:
        answer = input(f"{question} (y or n) ")
    except (EOFError, KeyboardInterrupt):
        return False
    return answer.strip().lower() in ("y", "yes")


def _yes(out: Out):
    def confirm(question: str) -> bool:
        out.print(f"{question} (y or n) [answered y: not interactive]")
        return True
    return confirm
