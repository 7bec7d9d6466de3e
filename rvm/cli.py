"""The `rvm` command: thin verbs over the assembler and the machine.

Exit codes (documented in README.md and `rvm --help`; one table for every verb):
  0  success
  1  the program is wrong: assembly errors, an invalid .rbc file, a file that cannot be read
  2  usage error: bad arguments or input values, an output that cannot be written, a size
     the machine cannot allocate
  3  the run trapped (come-from mismatch, nonzero ancilla, division by zero, ...)
  4  the run hit its step limit (--max-steps)
  5  rvm grad: a derivative is not finite or a check failed (rvm/ad/cli.py)
  130 interrupted (Ctrl-C)
  141 stdout was closed early (a broken pipe, as in `rvm run ... | head -1`): rvm stops
     quietly, with the status a program killed by SIGPIPE has in the shell (128 + 13)

Outputs (-o FILE on every verb, `rvm trace --plots DIR`): rvm creates no directories but
the output itself: the directory FILE (or DIR) goes into must exist, else exit 2.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import rvm

EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, EXIT_TRAP, EXIT_STEP_LIMIT, EXIT_INTERRUPT = 0, 1, 2, 3, 4, 130
EXIT_BROKEN_PIPE = 141
EXIT_STRICT = 6
# 5 (EXIT_DERIVATIVE) belongs to rvm grad: rvm/ad/cli.py

# The machine's capacities a command line may ask for: beyond these the work arrays alone
# (8 bytes a cell, 40 bytes a call level) would take more than 16 GiB.
MAX_STACK_CELLS = 1 << 31
MAX_FRAME_CELLS = 1 << 31
MAX_DEPTH = 1 << 24
DEFAULT_STACK_CELLS, DEFAULT_FRAME_CELLS, DEFAULT_DEPTH = 1 << 20, 1 << 22, 1 << 16

EXIT_TABLE = """\
exit status (every verb):
  0 success, 1 program error (assembly diagnostics, invalid .rbc, unreadable file),
  2 usage error (bad arguments or values, an output that cannot be written, a size that
  cannot be allocated), 3 the run trapped, 4 step limit reached, 5 rvm grad: a derivative
  is not finite or --check fd failed, 6 rvm run --strict: globals left nonzero that the
  program should zero, 130 interrupted, 141 stdout closed early (broken
  pipe: rvm stops quietly).  -o FILE: FILE's directory must exist (rvm creates none).
"""

EPILOG = EXIT_TABLE + """\

examples:
  rvm run programs/rfib.rasm n=10            # prints out = 55
  rvm run programs/rfibn.rasm --reverse n=12 z=100
  rvm asm programs/rfib.rasm -o rfib.rbc && rvm dis rfib.rbc
  rvm invert programs/isqrt.rasm
"""


class UsageError(Exception):
    pass



# options of the Janus front end, set by main() from -m/--modular and --stack-capacity
JANUS_OPTIONS: dict[str, Any] = {}


def load_program(path: str):
    """Load a program from a path: .rasm or Janus (.ja) source, or .rbc bytecode ('-' reads
    .rasm text from stdin)."""
    import rvm

    if path == "-":
        return rvm.assemble(sys.stdin.read(), filename="<stdin>")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"cannot read {path}: no such file")
    return rvm.load(p, **(JANUS_OPTIONS if p.suffix == ".ja" else {}))


def add_janus_options(parser: argparse.ArgumentParser) -> None:
    """The Janus front end's options, on every verb that reads a program."""
    g = parser.add_argument_group("Janus programs (.ja)")
    g.add_argument("-m", "--modular", action="store_true",
                   help="jana's -m: every expression value an update, index or local uses is "
                        "first reduced to 32 bits")
    g.add_argument("--stack-capacity", type=positive_int, metavar="N",
                   help="values a Janus stack holds (default 1024)")


class Raw(int):
    """A raw 64-bit cell word given as `$0x...` (exact for every type)."""


def _raw_word(text: str) -> Raw:
    try:
        w = int(text[1:], 0)
    except ValueError:
        raise UsageError(
            f"cannot read the raw word {text!r}: write $0x followed by hex digits") from None
    if not -(1 << 63) <= w < (1 << 64):
        raise UsageError(f"the raw word {text!r} does not fit in 64 bits")
    return Raw(w - (1 << 64) if w >= (1 << 63) else w)


def _raws(v: Any) -> Any:
    """Turn `$...` strings (alone or in lists) into Raw words."""
    if isinstance(v, str) and v.startswith("$"):
        return _raw_word(v)
    if isinstance(v, list):
        return [_raws(x) for x in v]
    return v


class Literal(Fraction):
    """A decimal value from the command line: exact, and printed (in error messages) as the
    user wrote it, not as `Fraction(...)`."""

    def __new__(cls, text: str):
        self = super().__new__(cls, text.replace("_", ""))
        self.text = text
        return self

    def __repr__(self) -> str:
        text = getattr(self, "text", None)
        return text if text is not None else Fraction.__repr__(self)

    __str__ = __repr__


_INT_TEXT = re.compile(r"[+-]?(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|[0-9][0-9_]*)\Z")
_REAL_TEXT = re.compile(r"[+-]?([0-9][0-9_]*)?(\.[0-9_]*)?([eE][+-]?[0-9]+)?\Z")


def _parse_scalar(text: str, whole: str) -> Any:
    """One number as the language writes it: 42, -7, 0x2a, 0b101, 1_000 (an int), 1.5,
    -2.5e-3 (read exactly), or a raw word $0x...; anything else (true, null, ...) is refused."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] == '"':  # a JSON string in a list: "$0x..."
        t = t[1:-1].strip()
    if t.startswith("$"):
        return _raw_word(t)
    if len(t) > 400:
        raise UsageError(f"the value {whole[:40]!r}... is too long")
    if _INT_TEXT.match(t):
        digits = t.replace("_", "")
        try:
            return int(digits, 0)
        except ValueError:  # a leading zero (007) is decimal here, as in .rasm
            return int(digits, 10)
    if t and any(c.isdigit() for c in t) and _REAL_TEXT.match(t):
        return Literal(t)
    raise UsageError(f"cannot read the value {whole!r}: give a number (42, -7, 0x2a, 1_000, "
                     f"1.5, 2.5e-3), a list [1, 2, 3] or a raw word $0x...")


def _parse_value(text: str) -> Any:
    """A number or a list of numbers; decimals are read exactly (a fixed cell gets the exact
    value rounded half to even, like a literal in .rasm), `$0x...` is a raw word."""
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        body = t[1:-1].strip()
        return [_parse_scalar(x, text) for x in body.split(",")] if body else []
    return _parse_scalar(t, text)


def collect_values(pairs: Sequence[str], json_file: str | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if json_file:
        try:
            data = json.loads(Path(json_file).read_text() if json_file != "-" else sys.stdin.read(),
                              parse_float=Literal)
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"cannot read inputs from {json_file}: {e}") from None
        if not isinstance(data, dict):
            raise UsageError(f"{json_file}: expected a JSON object of name: value")
        values.update({k: _raws(v) for k, v in data.items()})
    for pair in pairs:
        name, eq, text = pair.partition("=")
        if not eq or not name:
            raise UsageError(f"expected NAME=VALUE, got {pair!r}")
        values[name.strip()] = _parse_value(text.strip())
    return values


def set_values(m, values: dict[str, Any], at_end: bool) -> None:
    """Load the start (or end) state: raw words go in as they are, the rest by type."""
    raw = {k: v for k, v in values.items()
           if isinstance(v, Raw) or
           (isinstance(v, list) and v and all(isinstance(x, Raw) for x in v))}
    cooked = {k: v for k, v in values.items() if k not in raw}
    if at_end:
        m.reset_end(cooked)
    else:
        m.reset(cooked)
    for k, v in raw.items():
        m.write_raw(k, v)


def _global_text(m, name: str, raw: bool) -> str:
    """A global's value as text that reads back to the same words: raw `$0x...` words with
    --raw, else numbers, with fixed values in exact decimal when a float would round them."""
    from assembler.literals import fixed_text, raw_text
    from isa.types import FIXED

    g = m.program.global_named(name)
    if g.length is not None:
        return "".join(array_pieces(m, name, raw, full=True))
    w = int(m.read_raw(name))
    if raw:
        return raw_text(w)
    if g.type == FIXED and abs(w) >= 1 << 53:
        return fixed_text(w, m.program.fraction_bits)
    return format_value(m.read(name))


# Arrays longer than this print as their first and last values (`--full` prints them all):
# a program's 2^28-cell array would take gigabytes as one Python list or JSON string.
SUMMARY_CELLS = 1000
_CHUNK = 1 << 16              # values formatted at a time when an array is printed in full


def _element_texts(m, name: str, words: np.ndarray, raw: bool, exact: bool) -> str:
    """Some of an array's raw words as text, joined by ", " (`exact`: fixed values a float
    would round in exact decimal, as for a scalar)."""
    from assembler.literals import fixed_text, raw_text
    from isa.types import FIXED

    from .values import decode_array

    g = m.program.global_named(name)
    F = m.program.fraction_bits
    if raw:
        return ", ".join(raw_text(int(w)) for w in words)
    if exact and g.type == FIXED and np.any(np.abs(words) >= 1 << 53):
        return ", ".join(fixed_text(int(w), F) for w in words)
    values = decode_array(g.type, words, F)
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        return json.dumps(plain(values))[1:-1]
    return json.dumps(values.tolist())[1:-1]        # one C call per chunk


def _array_words(m, name: str, raw: bool):
    """(count, words(start, stop)): the raw words an array global prints as.  A stack prints
    its items, but with --raw every cell, its size first, as raw values are read back."""
    if raw and m.program.global_named(name).stack:
        words = m.read_raw(name)
        return len(words), lambda start, stop: words[start:stop]
    return m.size(name) or 0, lambda start, stop: m.read_range(name, start, stop, raw=True)


def array_pieces(m, name: str, raw: bool, full: bool, exact: bool = True):
    """An array global's text in pieces, for writing without building it whole: every value
    with `full`, else (past SUMMARY_CELLS values) the first and last three and the count."""
    n, words = _array_words(m, name, raw)
    if n > SUMMARY_CELLS and not full:
        head = _element_texts(m, name, words(0, 3), raw, exact)
        tail = _element_texts(m, name, words(n - 3, n), raw, exact)
        yield "[" + head + ", ..., " + tail + "]"
        yield f" ({n} values; --full prints them all)"
        return
    yield "["
    for start in range(0, n, _CHUNK):
        yield (", " if start else "") + _element_texts(m, name, words(start, start + _CHUNK),
                                                       raw, exact)
    yield "]"


def is_large(m, name: str, raw: bool = False) -> bool:
    """Whether a global is an array too long to print as one string (see SUMMARY_CELLS)."""
    return m.program.global_named(name).length is not None and \
        _array_words(m, name, raw)[0] > SUMMARY_CELLS


def plain(v: Any) -> Any:
    """A JSON-friendly Python value."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def format_value(v: Any) -> str:
    v = plain(v)
    return json.dumps(v) if isinstance(v, list) else str(v)


def print_table(title: str, rows: list[tuple[str, str]], out=None) -> None:
    out = out or sys.stdout
    if out.isatty():
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title, title_justify="left", show_header=False, box=None)
        t.add_column(style="bold cyan")
        t.add_column()
        for k, v in rows:
            t.add_row(k, v)
        Console(file=out).print(t)
    else:
        for k, v in rows:
            print(f"{k} = {v}", file=out)


# ---- verbs -----------------------------------------------------------------------------

def print_costs(prog, verbose: bool, out=None) -> None:
    """What the program's statements cost: per function its instructions and frame cells (of
    them, temporaries), and with `verbose` each statement that used temporaries."""
    out = out or sys.stderr
    rows = []
    for f in prog.functions:
        temps = sum(1 for v in f.locals if v.name.startswith("$"))
        rows.append((f.name, f"{f.end - f.begin + 1} instructions, {f.frame_size} frame cells "
                             f"({temps} temporaries)"))
    costs = prog.costs or []
    if costs:
        n = sum(c[3] for c in costs)
        rows.append(("expressions", f"{len(costs)} statements used temporaries: {n} "
                                    f"instructions, at most {max(c[4] for c in costs)} "
                                    f"temporaries at once"))
    print_table("cost", rows, out=out)
    if verbose:
        texts: dict[str, list[str]] = {}
        for fi, line, col, n, k in costs:
            name = prog.files[fi] if 0 <= fi < len(prog.files) else "?"
            if name not in texts:
                try:
                    texts[name] = Path(name).read_text().split("\n")
                except (OSError, UnicodeDecodeError):
                    texts[name] = []
            src = texts[name][line - 1].strip() if 0 < line <= len(texts[name]) else ""
            print(f"{name}:{line}:{col}: {n} instructions, {k} temporar"
                  f"{'y' if k == 1 else 'ies'}: {src}", file=out)


def output_path(path: str | Path, what: str = "") -> Path:
    """The one rule for every output a verb writes (-o FILE, --plots DIR): the directory it goes
    into must exist (rvm creates no directories but the output itself), and a FILE may not be
    a directory.  A usage error (exit 2) otherwise."""
    p = Path(path)
    name = f"{what} {path}" if what else str(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        if parent.exists():
            raise UsageError(f"cannot write {name}: {parent} is not a directory")
        raise UsageError(f"cannot write {name}: the directory {parent} does not exist (rvm "
                         f"creates no directories; make it first)")
    return p


def output_dir(path: str | Path, what: str) -> Path:
    """An output directory (`--plots DIR`): made if missing, under the rule of output_path."""
    p = output_path(path, what)
    if p.exists() and not p.is_dir():
        raise UsageError(f"cannot write {what} {path}: it is not a directory")
    try:
        p.mkdir(exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot make {what} {path}: {e.strerror or e}") from None
    return p


def write_output(path: str | Path, data: str | bytes, what: str = "") -> None:
    """Write a verb's output file under the rule of output_path; a failure is a usage error."""
    p = output_path(path, what)
    if p.is_dir():
        raise UsageError(f"cannot write {path}: it is a directory")
    try:
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def cmd_asm(a: argparse.Namespace) -> int:
    from assembler import rbc

    prog = load_program(a.program)
    if a.stats:
        print_costs(prog, verbose=True)
    data = rbc.dump(prog)
    out = a.output or (str(Path(a.program).with_suffix(".rbc")) if a.program != "-" else "-")
    if out == "-":
        sys.stdout.buffer.write(data)
    else:
        write_output(out, data)
        print(f"wrote {out} ({len(prog.code)} instructions, {len(data)} bytes)", file=sys.stderr)
    return EXIT_OK


def _write_text(text: str, output: str | None) -> None:
    if output and output != "-":
        write_output(output, text)
    else:
        sys.stdout.write(text)


def cmd_dis(a: argparse.Namespace) -> int:
    from assembler import disassemble

    _write_text(disassemble(load_program(a.program)), a.output)
    return EXIT_OK


def cmd_invert(a: argparse.Namespace) -> int:
    from assembler import disassemble
    from assembler.invert import invert_program

    _write_text(disassemble(invert_program(load_program(a.program))), a.output)
    return EXIT_OK


def cmd_check(a: argparse.Namespace) -> int:
    from assembler import AssemblyError
    from rvm.errors import InvalidBytecode
    from rvm.verify import verify

    status = EXIT_OK
    for path in a.programs:
        try:
            prog = load_program(path)
            verify(prog)
        except AssemblyError as e:
            print(e, file=sys.stderr)
            status = EXIT_PROGRAM
            continue
        except (InvalidBytecode, OSError, UnicodeDecodeError) as e:
            print(f"{path}: error: {e}", file=sys.stderr)
            status = EXIT_PROGRAM
            continue
        nf = len(prog.functions)
        print(f"{path}: ok ({len(prog.code)} instructions, {nf} function{'s' * (nf != 1)}, "
              f"{prog.n_static} static cells)")
        if a.verbose:
            print_costs(prog, verbose=True, out=sys.stdout)
    return status



def loop_kernels(m: rvm.Machine, forward: bool = True) -> dict[str, int]:
    """How many of the program's loops run in each loop-kernel form (docs/machine.md) in one
    direction: a backward kernel's jmp is above its join."""
    core = m.core
    counts = {"reduce": 0, "induct": 0, "general": 0}
    for (jmp, join, _), form in zip(core.kernels, core.kernel_forms):
        if (jmp > join) == forward:
            counts[form] += 1
    return counts


def add_machine_options(s: argparse.ArgumentParser) -> None:
    """The machine's capacities, on every verb that builds a Machine from the command line."""
    s.add_argument("--stack-cells", type=bounded_int(MAX_STACK_CELLS), metavar="N",
                   help=f"value stack size in cells (default {DEFAULT_STACK_CELLS}, at most "
                        f"{MAX_STACK_CELLS})")
    s.add_argument("--frame-cells", type=bounded_int(MAX_FRAME_CELLS), metavar="N",
                   help=f"frame memory for the locals of active calls, in cells (default "
                        f"{DEFAULT_FRAME_CELLS}, at most {MAX_FRAME_CELLS})")
    s.add_argument("--max-depth", type=bounded_int(MAX_DEPTH), metavar="N",
                   help=f"call depth limit: calls and uncalls nested at most N deep (default "
                        f"{DEFAULT_DEPTH}, at most {MAX_DEPTH}); deeper traps with StackOverflow")


def make_machine(prog, a: argparse.Namespace):
    """rvm.Machine with the capacities of add_machine_options; memory the system cannot give
    is a usage error that names the sizes asked for."""
    import rvm

    options = {k: getattr(a, k) for k in ("stack_cells", "frame_cells", "max_depth")
               if getattr(a, k, None)}
    try:
        return rvm.Machine(prog, **options)
    except rvm.RVMError as e:                   # MachineMemoryError: it names the sizes
        raise UsageError(str(e)) from None
    except MemoryError:
        sizes = (f"{options.get('stack_cells', DEFAULT_STACK_CELLS)} stack cells, "
                 f"{options.get('frame_cells', DEFAULT_FRAME_CELLS)} frame cells, call depth "
                 f"{options.get('max_depth', DEFAULT_DEPTH)}")
        raise UsageError(f"cannot allocate the machine's memory ({sizes}; 8 bytes a cell): "
                         f"out of memory; give smaller --stack-cells/--frame-cells/--max-depth"
                         ) from None


def trap_json(e) -> dict[str, Any]:
    """A trap as JSON: what `--json` prints on stdout when a verb's run traps."""
    from rvm.errors import StepLimit

    loc = e.location
    return {"kind": e.kind, "code": e.code, "message": e.detail,
            "location": {"file": loc[0], "line": loc[1], "column": loc[2]} if loc else None,
            "pc": e.pc, "instruction": e.instruction, "step": e.step,
            "direction": "forward" if e.direction > 0 else "backward",
            "values": {k: plain(v) if isinstance(v, (int, float, list)) or hasattr(v, "tolist")
                       else str(v) for k, v in e.values.items()},
            "exit_status": EXIT_STEP_LIMIT if isinstance(e, StepLimit) else EXIT_TRAP}


def cmd_run(a: argparse.Namespace) -> int:
    import rvm
    from rvm.api import drift_since, garbage_cells, snapshot

    prog = load_program(a.program)
    values = collect_values(a.values, a.inputs)
    m = make_machine(prog, a)
    try:
        set_values(m, values, at_end=a.reverse)
    except (KeyError, ValueError, TypeError, OverflowError, rvm.RVMError) as e:
        raise UsageError(str(e.args[0]) if e.args else str(e)) from None
    # a value for a cell the run does not start from is most likely a mistake: an output on
    # a forward run (it is added to, not replaced) or an input-only cell on a backward one
    wrong = [k for k in values if (g := prog.global_named(k)) is not None and
             (not g.is_input if not a.reverse else not g.is_output)]
    if wrong:
        what = "inputs" if not a.reverse else "outputs"
        msg = (f"{', '.join(wrong)} {'is not an input' if len(wrong) == 1 else 'are not inputs'}"
               if not a.reverse else
               f"{', '.join(wrong)} {'is not an output' if len(wrong) == 1 else 'are not outputs'}")
        if a.strict:
            raise UsageError(f"{msg}: a {'forward' if not a.reverse else 'backward'} run starts "
                             f"from the {what} (--strict)")
        print(f"rvm: warning: {msg}: the run starts from the value given (a "
              f"{'forward' if not a.reverse else 'backward'} run normally starts from the "
              f"{what}{'; use --reverse to run from the outputs' if not a.reverse else ''})",
              file=sys.stderr)
    if a.native:
        from rvm import native
        try:
            m.compile()
        except (native.Unsupported, native.BuildError) as e:
            print(f"rvm: note: running interpreted: {e}", file=sys.stderr)
    snap = snapshot(m) if a.roundtrip else None
    t0 = time.perf_counter()
    m.run(direction=-1 if a.reverse else 1, max_steps=a.max_steps)
    elapsed = time.perf_counter() - t0
    garbage = garbage_cells(m, at_end=not a.reverse)
    stats = dict(m.stats)
    stats["loop_kernels"] = loop_kernels(m, forward=not a.reverse)
    names = [g.name for g in prog.globals if (g.is_input if a.reverse else g.is_output)]
    if a.json:
        # large arrays are written piece by piece in place of a placeholder, so that the JSON
        # of a huge array is never one string in memory; JSON always carries every value
        large = {k: f"@@rvm-array-{i}@@" for i, k in enumerate(names) if is_large(m, k, a.raw)}
        doc: dict[str, Any] = {"inputs" if a.reverse else "outputs":
                               {k: large.get(k) or (_global_text(m, k, True) if a.raw
                                                    else plain(m.read(k))) for k in names}}
        if a.stats:
            doc["stats"] = {**stats, "seconds": elapsed, "garbage": garbage}
        text = json.dumps(doc, indent=2)
        for k, mark in large.items():
            before, text = text.split(json.dumps(mark), 1)
            # --raw JSON carries an array as one string of $0x words, as for small arrays
            sys.stdout.write(before + ('"' if a.raw else ""))
            for piece in array_pieces(m, k, a.raw, full=True, exact=False):
                sys.stdout.write(piece)
            sys.stdout.write('"' if a.raw else "")
        print(text)
    elif any(is_large(m, k, a.raw) for k in names):
        # a table would hold every value at once; write `name = value` lines, large arrays in
        # pieces (summarized unless --full)
        for k in names:
            if is_large(m, k, a.raw):
                sys.stdout.write(f"{k} = ")
                for piece in array_pieces(m, k, a.raw, a.full):
                    sys.stdout.write(piece)
                sys.stdout.write("\n")
            else:
                print(f"{k} = {_global_text(m, k, a.raw)}")
    else:
        print_table("inputs" if a.reverse else "outputs",
                     [(k, _global_text(m, k, a.raw)) for k in names])
        if a.stats:
            steps = stats.get("steps", 0)
            rows = [(k, str(v)) for k, v in stats.items() if k != "loop_kernels"]
            rows.append(("loop_kernels", ", ".join(f"{n} {form}" for form, n in
                                                   stats["loop_kernels"].items() if n)
                         or "none"))
            rows.append(("seconds", f"{elapsed:.6f}"))
            if steps:
                rows.append(("ns_per_step", f"{elapsed * 1e9 / steps:.2f}"))
            rows.append(("garbage", ", ".join(garbage) or "none"))
            print_table("stats", rows, out=sys.stderr)
    if snap is not None:
        m.run(direction=1 if a.reverse else -1, max_steps=a.max_steps)   # PathDivergence?
        m.check_restored()
        drift, broken = drift_since(m, snap)
        if not drift:
            print("roundtrip: exact: every global came back bit for bit", file=sys.stderr)
        else:
            print("roundtrip: drift (largest absolute difference per global): " +
                  ", ".join(f"{k} {v:.3g}" for k, v in drift.items()), file=sys.stderr)
        if broken:
            print(f"roundtrip: note: {', '.join(broken)} (not float) did not come back exactly; "
                  f"a value converted from a drifting float can do that", file=sys.stderr)
    if garbage and a.strict:
        print(f"rvm: error: {'non-input' if a.reverse else 'non-output'} globals left nonzero: "
              f"{', '.join(garbage)} (--strict: the program's contract says they end at zero)",
              file=sys.stderr)
        return EXIT_STRICT
    if garbage and not a.json:
        print(f"rvm: note: {'non-input' if a.reverse else 'non-output'} globals left nonzero: "
              f"{', '.join(garbage)}", file=sys.stderr)
    return EXIT_OK


def _source_excerpt(location: tuple[str, int, int] | None) -> str:
    """The source line of a trap with a caret under its column, as diagnostics show it."""
    if not location:
        return ""
    name, line, col = location
    try:
        text = Path(name).read_text().splitlines()[line - 1]
    except (OSError, IndexError, UnicodeDecodeError):
        return ""
    return f"\n  {text}\n  {' ' * (col - 1)}^"


# ---- entry -----------------------------------------------------------------------------

def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (the tool verbs use it too)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def bounded_int(most: int):
    """argparse type: an integer from 1 to `most`."""
    def parse(text: str) -> int:
        n = positive_int(text)
        if n > most:
            raise argparse.ArgumentTypeError(f"{text} is over the limit of {most}")
        return n
    parse.__name__ = "positive integer"
    return parse


TOOL_MODULES = ("rvm.ad.cli", "rvm.debug.cli", "rvm.trace.cli", "rvm.hw.cli", "rvm.native.cli")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rvm", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="rvm: a reversible virtual machine. Assemble .rasm programs (or Janus "
                    "programs, .ja) and run them forward or backward.")
    p.add_argument("--version", action="version", version="rvm 0.1.0")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True

    s = sub.add_parser("run", help="run a program forward (or backward with --reverse)",
                       description="Run a .rasm or .rbc program and print its outputs (or, with "
                                   "--reverse, run it backward from its outputs and print its "
                                   "inputs). Values are NAME=VALUE pairs (VALUE is a number or a "
                                   "JSON list) and/or a JSON file; missing inputs take their "
                                   "declared defaults.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    s.add_argument("program", help=".rasm, .ja (Janus) or .rbc file ('-': .rasm text on stdin)")
    s.add_argument("values", nargs="*", metavar="NAME=VALUE", help="input (or output) values")
    s.add_argument("--inputs", "-i", metavar="FILE.json", help="values from a JSON object")
    s.add_argument("--reverse", "-r", action="store_true",
                   help="run backward: the values are outputs; print the inputs")
    s.add_argument("--stats", action="store_true",
                   help="print steps, time and peak stack/ancilla/call depth (to stderr)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--native", action="store_true",
                   help="compile the program to C first (rvm/native; cached) and run that: the "
                        "same results, steps and traps; a program with `trace` runs "
                        "interpreted (a note says so)")
    s.add_argument("--roundtrip", action="store_true",
                   help="then run back again and report whether every global came back bit "
                        "for bit, or how far float cells drifted (to stderr)")
    s.add_argument("--strict", action="store_true",
                   help="fail (exit 6) when globals the program should leave at zero are not "
                        "(non-outputs at the end, non-inputs at the start with --reverse), and "
                        "refuse values for cells the run does not start from (exit 2)")
    s.add_argument("--raw", action="store_true",
                   help="print values as raw 64-bit words $0x... (exact for every type; "
                        "values given as $0x... are always taken raw)")
    s.add_argument("--full", action="store_true",
                   help=f"print every value of arrays longer than {SUMMARY_CELLS} (by default "
                        f"their first and last three values and their length; --json always "
                        f"prints every value)")
    s.add_argument("--max-steps", type=positive_int, metavar="N",
                   help="stop with exit 4 after N steps")
    add_machine_options(s)
    s.set_defaults(func=cmd_run)

    raw = argparse.RawDescriptionHelpFormatter
    s = sub.add_parser(
        "asm", help="assemble .rasm into .rbc bytecode", formatter_class=raw,
        description="Assemble a .rasm (or Janus .ja) program into a .rbc bytecode file "
                    "(docs/rbc.md): versioned and checksummed, verified when it is loaded. "
                    "Every assembly error of the file is reported at once.",
        epilog="""\
examples:
  rvm asm programs/rfib.rasm -o rfib.rbc     # wrote rfib.rbc (... instructions, ... bytes)
  rvm asm programs/isqrt.rasm --stats        # and what each expression statement costs

exit status: 0 written, 1 assembly errors or an unreadable program, 2 usage error (bad
arguments; -o FILE whose directory does not exist or cannot be written), 141 broken pipe.
""")
    s.add_argument("program", help=".rasm or .ja file ('-' for .rasm text on stdin)")
    s.add_argument("-o", "--output", help="output path (default: PROGRAM.rbc; '-' for stdout); "
                                          "its directory must exist")
    s.add_argument("--stats", action="store_true",
                   help="print what the program costs (to stderr): instructions and frame "
                        "cells per function, and instructions and temporaries of every "
                        "statement that computes an expression")
    s.set_defaults(func=cmd_asm)

    s = sub.add_parser(
        "dis", help="disassemble a program back to .rasm", formatter_class=raw,
        description="Print a program (.rbc bytecode, or .rasm/.ja source after assembly) as "
                    ".rasm text that assembles back to the same bytecode.",
        epilog="""\
examples:
  rvm dis rfib.rbc                  # .rasm text on stdout
  rvm dis rfib.rbc -o rfib2.rasm

exit status: 0 success, 1 an invalid .rbc file, assembly errors or an unreadable program,
2 usage error (-o FILE whose directory does not exist or cannot be written), 141 broken pipe.
""")
    s.add_argument("program", help=".rbc, .rasm or .ja file")
    s.add_argument("-o", "--output", help="output path (default stdout); its directory must "
                                          "exist")
    s.set_defaults(func=cmd_dis)

    s = sub.add_parser(
        "check", help="assemble and verify, report every error", formatter_class=raw,
        description="Assemble each program (or load each .rbc file) and run the bytecode "
                    "verifier; print one 'ok' line per good program and every error of the "
                    "bad ones, then go on to the next file.",
        epilog="""\
examples:
  rvm check programs/*.rasm         # programs/rfib.rasm: ok (... instructions, ...)
  rvm check -v programs/isqrt.rasm  # and the cost of each expression statement

exit status: 0 every program is good, 1 at least one has errors (or cannot be read),
2 usage error, 141 broken pipe.
""")
    s.add_argument("programs", nargs="+", help=".rasm, .ja or .rbc files")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="also print the cost of each statement that computes an expression "
                        "(instructions, temporaries)")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser(
        "invert", help="print the inverse program as .rasm", formatter_class=raw,
        description="Print the inverse of a program as .rasm: the program that runs forward "
                    "the way the original runs backward (its inputs are the original's "
                    "outputs). Inverting twice gives back the original bytecode.",
        epilog="""\
examples:
  rvm invert programs/isqrt.rasm              # the inverse, on stdout
  rvm invert programs/isqrt.rasm -o inv.rasm && rvm run inv.rasm r=31 x=1000

exit status: 0 success, 1 assembly errors, an invalid .rbc file or an unreadable program,
2 usage error (-o FILE whose directory does not exist or cannot be written), 141 broken pipe.
""")
    s.add_argument("program", help=".rasm, .ja or .rbc file")
    s.add_argument("-o", "--output", help="output path (default stdout); its directory must "
                                          "exist")
    s.set_defaults(func=cmd_invert)

    # The tools (grad, debug, trace, hw) sit on the machine's public API; each module adds its
    # own verb with register(sub), so this file does not grow with them.
    import importlib
    for name in TOOL_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if not (e.name and (name + ".").startswith(e.name + ".")):
                raise  # a tool that exists but fails to import is a bug, not a missing tool
            continue
        module.register(sub)
    for sp in sub.choices.values():
        if any(a.dest in ("program", "programs") for a in sp._actions):
            add_janus_options(sp)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from assembler import AssemblyError
    from rvm.errors import InvalidBytecode, StepLimit, Trap

    stdout_id = _stdout_id()
    parser = build_parser()
    # NAME=VALUE pairs may come after options (`rvm run p.rasm --reverse n=12`), which
    # argparse's positional nargs="*" does not take: collect them from the leftovers.
    a, extra = parser.parse_known_args(argv)
    pairs = [x for x in extra if "=" in x and not x.startswith("-")]
    takes_values = hasattr(a, "values")
    if len(pairs) != len(extra) or (pairs and not takes_values):
        parser.error("unrecognized arguments: "
                     + " ".join(x for x in extra if x not in pairs or not takes_values))
    if pairs:
        a.values = list(a.values) + pairs
    JANUS_OPTIONS.clear()
    if getattr(a, "modular", False):
        JANUS_OPTIONS["modular"] = True
    if getattr(a, "stack_capacity", None):
        JANUS_OPTIONS["stack_capacity"] = a.stack_capacity
    try:
        status = a.func(a)
        sys.stdout.flush()      # a reader that went away shows up here, inside the handlers
        return status
    except AssemblyError as e:
        print(e, file=sys.stderr)
        return EXIT_PROGRAM
    except InvalidBytecode as e:
        print(f"rvm: error: {e}", file=sys.stderr)
        return EXIT_PROGRAM
    except (FileNotFoundError, IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        print(f"rvm: error: {e}", file=sys.stderr)
        return EXIT_PROGRAM
    except UsageError as e:
        print(f"rvm: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except StepLimit as e:
        _print_trap_json(a, e)
        print(f"rvm: {e}", file=sys.stderr)
        return EXIT_STEP_LIMIT
    except Trap as e:
        _print_trap_json(a, e)
        first, _, rest = str(e).partition("\n")
        print(f"rvm: {first}{_source_excerpt(e.location)}" + (f"\n{rest}" if rest else ""),
              file=sys.stderr)
        return EXIT_TRAP
    except KeyboardInterrupt:
        print("rvm: interrupted", file=sys.stderr)
        return EXIT_INTERRUPT
    except BrokenPipeError:
        return _broken_pipe()
    except SystemExit as e:
        # rich's Console meets a broken pipe by pointing stdout at /dev/null and exiting 1
        if e.code == 1 and _stdout_replaced(stdout_id):
            return EXIT_BROKEN_PIPE
        raise


def _print_trap_json(a: argparse.Namespace, e) -> None:
    """With --json (run, grad, ...), a trap that ends the verb is also printed on stdout as
    {"trap": {...}}; the message still goes to stderr and the exit status is the trap's."""
    if getattr(a, "json", False):
        try:
            print(json.dumps({"trap": trap_json(e)}, indent=2))
        except BrokenPipeError:
            pass


def _stdout_id() -> tuple[int, int] | None:
    try:
        st = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return st.st_dev, st.st_ino


def _stdout_replaced(before: tuple[int, int] | None) -> bool:
    """Has stdout been pointed at /dev/null since `before` (what a broken pipe leads to)?"""
    now = _stdout_id()
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return before is not None and now != before and now == (null.st_dev, null.st_ino)


def _broken_pipe() -> int:
    """The reader of stdout went away (`rvm ... | head -1`): stop quietly.  stdout is pointed
    at /dev/null so the interpreter's last flush at exit has nowhere to fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    # `python -m rvm.cli`: run the imported module's main, so the tools (which import rvm.cli)
    # and main share one UsageError class
    from rvm.cli import main as _main
    sys.exit(_main())
