"""`rvm hw`: the reversible-gate hardware model.

    rvm hw cost addmul.i --width 16            # gates by type, depth, wires, ancillas
    rvm hw cost all --width 8,16,32,64 --json
    rvm hw run programs/rfib.rasm --width 16   # co-simulate against the interpreter
    rvm hw verify --width 8                    # every realization, exhaustive at 8 bits
    rvm hw chart -o docs/img/hw_counts.png     # gate counts against width
    rvm hw export add.i --width 4 -o add4.real # RevLib .real
    rvm hw real add4.real --table              # import, simulate, print the truth table
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, EXIT_FAIL = 0, 1, 2, 3

EPILOG = """\
verbs:
  cost OPCODE...   gate cost of opcodes ('all': every realized one) at --width N[,N...]
  run PROGRAM      co-simulate: every instruction by its circuit, the whole state compared
                   with the interpreter after each instruction, forward and backward
  verify [OPCODE]  check realizations against isa/arith.py (exhaustive up to 24 input bits)
  chart            draw gate counts against width to a file
  export OPCODE    write a realization as a RevLib .real file
  real FILE        import a .real file: simulate it, print or check its truth table

conditions (jmp, join, assert, xorcmp) take --cond '<' (==, !=, <, <=, >, >=) and
--cond-type; y += f(a, b) (addfn2, subfn2) takes --fn NAME (default: every realized one).

exit status: 0 success, 1 program or file error, 2 usage error (bad arguments, an output
whose directory does not exist or cannot be written), 3 a check failed (the circuits and the
interpreter disagree, a value overflowed the width, a run trapped, a verification or
truth-table check failed), 141 broken pipe.  Each verb's --help says which it returns.
"""

RAW = argparse.RawDescriptionHelpFormatter


def _epilog(examples: str, status: str) -> str:
    return f"examples:\n{examples}\nexit status: {status}\n"


CHART_FORMATS = (".png", ".svg", ".pdf")


def register(sub: Any) -> None:
    s = sub.add_parser("hw", help="reversible-gate hardware model: costs, co-simulation, "
                                  "verification, RevLib .real",
                       description="Realize int and fixed instructions as reversible gate "
                                   "circuits (NOT, CNOT, Toffoli, MCX, Fredkin), measure them "
                                   "and co-simulate programs bit-exactly against the "
                                   "interpreter.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    hs = s.add_subparsers(dest="hw_verb", metavar="VERB")
    hs.required = True

    def common(p: argparse.ArgumentParser, widths: bool = False) -> None:
        p.add_argument("--width", "-w", default="16" if not widths else None,
                       help="register width in bits, 4..64" + (" (a comma list)" if widths
                                                                else " (default 16)"))
        p.add_argument("--json", action="store_true", help="print JSON")
        p.add_argument("--temperature", "-T", type=float, default=300.0, metavar="K",
                       help="temperature for the Landauer bound (default 300 K)")

    p = hs.add_parser(
        "cost", help="gate cost of opcodes", formatter_class=RAW,
        description="Build each opcode's gate circuit at the given widths and print its cost: "
                    "gates by type, depth, Toffoli depth, wires, ancillas, uncompute gates and "
                    "the Landauer bound of the bits it erases (none: every realization is "
                    "reversible).",
        epilog=_epilog("  rvm hw cost addmul.i add.i jmp --width 32\n"
                       "  rvm hw cost all --width 8,16,32,64 --json\n",
                       "0 success, 2 usage error (an unknown or unrealized opcode, a width "
                       "outside 4..64), 141 broken pipe."))
    p.add_argument("opcodes", nargs="+", metavar="OPCODE", help="e.g. add.i, addmul.x, jmp; "
                                                                "'all' for every realized one")
    common(p, widths=True)
    _params(p)
    p.set_defaults(func=cmd_cost)

    p = hs.add_parser(
        "run", help="co-simulate a program against the interpreter", formatter_class=RAW,
        description="Run a program with every instruction done by its gate circuit at the "
                    "given width, and compare the whole state with the interpreter after "
                    "every instruction, forward and then backward; print the gates the run "
                    "used.",
        epilog=_epilog("  rvm hw run programs/rfib.rasm --width 16\n"
                       "  rvm hw run programs/isqrt.rasm x=1000 --forward-only --json\n",
                       "0 every step agrees, 1 an assembly error, an unreadable program or "
                       "an instruction without a circuit, 2 usage error, 3 the circuits and "
                       "the interpreter disagree, a value overflowed the width or the run "
                       "trapped, 141 broken pipe."))
    p.add_argument("program", help=".rasm or .rbc file")
    p.add_argument("values", nargs="*", metavar="NAME=VALUE", help="input values")
    common(p)
    p.add_argument("--forward-only", action="store_true", help="skip the backward run")
    p.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="stop each direction after N instructions")
    p.add_argument("--top", type=int, default=12, help="opcodes in the breakdown (default 12)")
    p.set_defaults(func=cmd_run)

    p = hs.add_parser(
        "verify", help="check realizations against isa/arith.py", formatter_class=RAW,
        description="Simulate each realization on every input (up to 24 input bits; random "
                    "samples above) forward and reversed, and compare the results with the "
                    "exact reference arithmetic of isa/arith.py.",
        epilog=_epilog("  rvm hw verify --width 8\n  rvm hw verify add.i addmul.x --width 4,8\n",
                       "0 every case agrees, 2 usage error, 3 a realization disagrees, 141 "
                       "broken pipe."))
    p.add_argument("opcodes", nargs="*", metavar="OPCODE", help="default: every realized one")
    p.add_argument("--width", "-w", default="8", help="width(s), comma list (default 8)")
    p.add_argument("--F", type=int, default=None, help="fraction bits (default n/2)")
    p.add_argument("--samples", type=int, default=4096, help="random inputs when the space "
                                                            "is too big to enumerate")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_verify)

    p = hs.add_parser(
        "chart", help="draw gate counts against width", formatter_class=RAW,
        description="Draw total gates (solid) and Toffoli-class gates (dashed) of opcodes "
                    "against the register width, log-log, to an image file: PNG, SVG or PDF, "
                    "by the file's suffix.",
        epilog=_epilog("  rvm hw chart -o docs/img/hw_counts.png\n"
                       "  rvm hw chart add.i addmul.i --widths 4,8,16 -o add.svg\n",
                       "0 written, 2 usage error (an unknown opcode, an image format other "
                       "than .png, .svg, .pdf, a directory that does not exist), 141 broken "
                       "pipe."))
    p.add_argument("opcodes", nargs="*", metavar="OPCODE",
                   help="default: add.i addi.i neg.i addmul.i addmul.x cvt.ix jmp< jmp==")
    p.add_argument("-o", "--output", default="hw_counts.png",
                   help="image file: .png, .svg or .pdf (default hw_counts.png); its directory "
                        "must exist")
    p.add_argument("--widths", default=None, help="comma list (default 4,8,12,16,24,32,48,64)")
    p.add_argument("--F", type=int, default=None, help="fraction bits (default n/2)")
    p.set_defaults(func=cmd_chart)

    p = hs.add_parser(
        "export", help="write a realization as RevLib .real", formatter_class=RAW,
        description="Write an opcode's gate circuit at one width as a RevLib .real file; "
                    "rvm's ancilla lifetimes travel in #@ comments, so `rvm hw real` reads "
                    "back the same circuit.",
        epilog=_epilog("  rvm hw export add.i --width 4 -o add4.real\n",
                       "0 written, 2 usage error (an unknown or unrealized opcode, a bad "
                       "width, an output whose directory does not exist), 141 broken pipe."))
    p.add_argument("opcode")
    p.add_argument("--width", "-w", default="8", help="width in bits (default 8)")
    p.add_argument("-o", "--output", default="-", help="file (default stdout); its directory "
                                                        "must exist")
    _params(p)
    p.set_defaults(func=cmd_export)

    p = hs.add_parser(
        "real", help="import a RevLib .real file and simulate it", formatter_class=RAW,
        description="Read a RevLib .real circuit (the classical gate library: Toffoli t1..tn, "
                    "Fredkin f2..fn, Peres p3 and its inverse pi3, negative controls on t and "
                    "f gates; V and V+ gates are quantum and refused), print its cost, and "
                    "simulate it: one input, the whole truth table, or a check against a "
                    "truth-table file.",
        epilog=_epilog("  rvm hw real tests/data/revlib/ham3_103.real --table\n"
                       "  rvm hw real add4.real a=3 b=5\n",
                       "0 success, 1 a file that cannot be read or is not a .real circuit rvm "
                       "reads (a V gate, say), 2 usage error, 3 the truth table differs from "
                       "--check's or the circuit broke a constant or ancilla line, 141 broken "
                       "pipe."))
    p.add_argument("file", help=".real file ('-' for stdin)")
    p.add_argument("values", nargs="*", metavar="NAME=VALUE", help="simulate one input")
    p.add_argument("--table", action="store_true", help="print the truth table")
    p.add_argument("--check", metavar="TABLE", help="check against a truth table file: lines "
                   "'INPUT_BITS OUTPUT_BITS' over the input and output lines in file order")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--temperature", "-T", type=float, default=300.0, metavar="K")
    p.set_defaults(func=cmd_real)


def _params(p: argparse.ArgumentParser) -> None:
    p.add_argument("--F", type=int, default=None, help="fraction bits of fixed products and "
                                                      "conversions (default n/2)")
    p.add_argument("--imm", default="1", help="immediate or rotation count (default 1)")
    p.add_argument("--cond", default="<", help="comparison of jmp/join/assert (default <)")
    p.add_argument("--cond-type", default="int", choices=("int", "fixed"),
                   help="cell type compared (default int)")
    p.add_argument("--fn", default=None, metavar="NAME",
                   help="function of addfn2/subfn2: min, max, bitand, bitor, bitxor, shl, shr")


class _Usage(Exception):
    pass


def _widths(text: str | None, default: str = "16") -> list[int]:
    from isa.gates import MAX_WIDTH, MIN_WIDTH
    out = []
    for part in (text or default).split(","):
        try:
            n = int(part)
        except ValueError:
            raise _Usage(f"--width: expected numbers like 16 or 8,16,32, got {text!r}") from None
        if not MIN_WIDTH <= n <= MAX_WIDTH:
            raise _Usage(f"--width: {n} is outside {MIN_WIDTH}..{MAX_WIDTH}")
        out.append(n)
    return out


def _opcodes(names: list[str]) -> list[str]:
    from isa.table import OP_BY_NAME

    from .build import realized_opcodes

    if not names or names == ["all"]:
        return [op.name for op in realized_opcodes()]
    out = []
    for nm in names:
        if nm not in OP_BY_NAME:
            close = [k for k in OP_BY_NAME if k.split(".")[0] == nm.split(".")[0]]
            raise _Usage(f"unknown opcode {nm!r}" + (f" (did you mean {', '.join(close)}?)"
                                                     if close else ""))
        out.append(nm)
    return out


def _cc(a: argparse.Namespace) -> int:
    from isa.functions import CMP_BY_SYMBOL, cond_word
    from isa.types import TYPE_BY_NAME
    if a.cond not in CMP_BY_SYMBOL:
        raise _Usage(f"--cond: one of {' '.join(CMP_BY_SYMBOL)}, not {a.cond!r}")
    return cond_word(CMP_BY_SYMBOL[a.cond], TYPE_BY_NAME[a.cond_type])


def _fns(a: argparse.Namespace, name: str) -> list[int | None]:
    """The function ids to cost or export for an opcode: --fn, else every realized one (a
    single None for an opcode without a function operand)."""
    from isa import gates
    from isa.functions import FN2_BY_NAME
    from isa.table import OP_BY_NAME

    op = OP_BY_NAME[name]
    if "fn" not in op.operands:
        return [None]
    found = gates.realization(op)
    ids = gates.realized_fns(found[0], op.types[0]) if found else []
    if getattr(a, "fn", None) is None:
        return list(ids) or [None]
    f = FN2_BY_NAME.get(a.fn)
    if f is None:
        raise _Usage(f"--fn: one of {', '.join(FN2_BY_NAME)}, not {a.fn!r}")
    return [f.id]


def _cc_of(a: argparse.Namespace, name: str) -> int:
    """--cond for an opcode: xorcmp compares its sources' type whatever --cond-type says."""
    from isa.functions import CMP_BY_SYMBOL, cond_word
    from isa.table import OP_BY_NAME

    op = OP_BY_NAME[name]
    if op.family == "xorcmp":
        _cc(a)
        return cond_word(CMP_BY_SYMBOL[a.cond], op.types[1])
    return _cc(a)


def _imm(a: argparse.Namespace) -> int:
    try:
        return int(a.imm, 0)
    except ValueError:
        raise _Usage(f"--imm: expected an integer (raw word), got {a.imm!r}") from None


def _guard(fn):
    def run(a: argparse.Namespace) -> int:
        from rvm.cli import UsageError

        from .build import NotRealized
        try:
            return fn(a)
        except (_Usage, UsageError) as e:
            print(f"rvm: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        except NotRealized as e:
            print(f"rvm: error: {e}", file=sys.stderr)
            return EXIT_PROGRAM if fn.__name__ == "cmd_run" else EXIT_USAGE
    run.__name__ = fn.__name__
    return run


@_guard
def cmd_cost(a: argparse.Namespace) -> int:
    from .report import instruction_cost, print_costs

    widths = _widths(a.width)
    costs = []
    for name in _opcodes(a.opcodes):
        for fn in _fns(a, name):
            for n in widths:
                F = a.F if a.F is not None else n // 2
                costs.append(instruction_cost(name, n, F=F, imm=_imm(a), cc=_cc_of(a, name),
                                              fn=fn))
    if a.json:
        print(json.dumps([c.to_json(a.temperature) for c in costs], indent=1))
    else:
        print_costs(costs, a.temperature)
    return EXIT_OK


@_guard
def cmd_run(a: argparse.Namespace) -> int:
    from rvm.cli import Raw, UsageError, collect_values, load_program
    from rvm.errors import Trap

    from .build import NotRealized
    from .cosim import CosimError, cosimulate
    from .report import print_program

    n = _widths(a.width)[0]
    program = load_program(a.program)
    try:
        values = collect_values(a.values, None)
    except UsageError as e:
        raise _Usage(str(e)) from None
    raw = {k: v for k, v in values.items()
           if isinstance(v, Raw) or (isinstance(v, list) and v and all(isinstance(x, Raw)
                                                                       for x in v))}
    cooked = {k: v for k, v in values.items() if k not in raw}
    try:
        res = cosimulate(program, cooked, width=n, backward=not a.forward_only,
                         name=a.program, raw=raw, max_steps=a.max_steps)
    except CosimError as e:
        print(f"rvm: hw: {e}", file=sys.stderr)
        return EXIT_FAIL
    except Trap as e:
        print(f"rvm: the run trapped (the hardware model agreed up to here): {e}",
              file=sys.stderr)
        return EXIT_FAIL
    except NotRealized:
        raise
    except (KeyError, ValueError, TypeError, OverflowError) as e:
        raise _Usage(str(e.args[0]) if e.args else str(e)) from None
    summary = (f"co-simulated {res.forward_steps} instructions forward"
               + (f" and {res.backward_steps} backward" if not a.forward_only else "")
               + f" at width {n}: every step agrees with the interpreter "
               f"({res.instructions_per_second:,.0f} instructions/s)")
    if a.json:
        out = res.cost.to_json(a.temperature)
        out.update(forward_steps=res.forward_steps, backward_steps=res.backward_steps,
                   agrees=True, seconds=res.seconds,
                   outputs={k: (v.tolist() if hasattr(v, "tolist") else v)
                            for k, v in res.outputs.items()})
        print(json.dumps(out, indent=1))
    else:
        print_program(res.cost, a.temperature, top=a.top)
        print(summary)
    return EXIT_OK


@_guard
def cmd_verify(a: argparse.Namespace) -> int:
    from isa.table import OP_BY_NAME

    from .verify import default_cases, verify

    results, skipped = [], []
    for n in _widths(a.width, "8"):
        for name in _opcodes(a.opcodes):
            op = OP_BY_NAME[name]
            if op.family in ("rotl", "rotr") and 64 % n:
                skipped.append(f"{name} at width {n}")   # no 64-bit reference (verify.py)
                continue
            F = a.F if a.F is not None else n // 2
            for case in default_cases(op, n, F):
                results.append(verify(op, n, samples=a.samples, **case))
    failed = [r for r in results if not r.ok]
    if a.json:
        print(json.dumps([r.__dict__ for r in results], indent=1))
    else:
        from rich.console import Console
        from rich.table import Table

        t = Table(title="realizations against isa/arith.py (forward and reversed)")
        for col in ("opcode", "n", "cases", "inputs", "mode", "seconds", "result"):
            t.add_column(col, justify="left" if col in ("opcode", "mode", "result")
                         else "right")
        groups: dict[tuple[str, int], list] = {}
        for r in results:
            groups.setdefault((r.op, r.n), []).append(r)
        for (op, n), rs in groups.items():
            bad = [r for r in rs if not r.ok]
            t.add_row(op, str(n), str(len(rs)), f"{sum(r.inputs for r in rs):,}",
                      "exhaustive" if all(r.exhaustive for r in rs) else "random",
                      f"{sum(r.seconds for r in rs):.3f}",
                      "ok" if not bad else f"FAIL: {bad[0].message}")
        Console(highlight=False).print(t)
        print(f"{len(results) - len(failed)} of {len(results)} cases agree")
    if skipped:
        print(f"rvm: note: skipped {', '.join(skipped)}: rotations turn 64 bits and are "
              f"checked at widths that divide 64", file=sys.stderr)
    return EXIT_FAIL if failed else EXIT_OK


@_guard
def cmd_chart(a: argparse.Namespace) -> int:
    from pathlib import Path

    from rvm.cli import output_path

    from .chart import plot_counts

    suffix = Path(a.output).suffix.lower()
    if suffix not in CHART_FORMATS:
        raise _Usage(f"unknown image format {suffix or '(no suffix)'} in {a.output}; use "
                     f"{', '.join(CHART_FORMATS)}")
    output_path(a.output)
    widths = _widths(a.widths, "4,8,12,16,24,32,48,64") if a.widths else None
    ops = a.opcodes or None
    if ops:
        _opcodes([o for o in ops if not o.startswith("jmp")])
    p = plot_counts(a.output, ops, widths, a.F)
    print(f"wrote {p}")
    return EXIT_OK


@_guard
def cmd_export(a: argparse.Namespace) -> int:
    from .build import circuit
    from .real import export_real

    n = _widths(a.width, "8")[0]
    (name,) = _opcodes([a.opcode])
    F = a.F if a.F is not None else n // 2
    c = circuit(name, n, F=F, imm=_imm(a), cc=_cc_of(a, name), fn=_fns(a, name)[0])
    text = export_real(c, f"width {n}")
    if a.output == "-":
        sys.stdout.write(text)
    else:
        from rvm.cli import write_output
        write_output(a.output, text)
        print(f"wrote {a.output} ({c.gate_count} gates on {c.n_wires} lines)", file=sys.stderr)
    return EXIT_OK


@_guard
def cmd_real(a: argparse.Namespace) -> int:
    from .real import RealError, import_real, truth_table
    from .report import cost, print_costs
    from .sim import CircuitError, simulate_one

    try:
        text = sys.stdin.read() if a.file == "-" else open(a.file).read()
    except OSError as e:
        print(f"rvm: error: cannot read {a.file}: {e.strerror}", file=sys.stderr)
        return EXIT_PROGRAM
    try:
        c = import_real(text, a.file if a.file != "-" else "<stdin>")
    except RealError as e:
        print(f"rvm: error: {e}", file=sys.stderr)
        return EXIT_PROGRAM
    status = EXIT_OK
    out: dict[str, Any] = {"cost": cost(c).to_json(a.temperature)}
    try:
        if a.values:
            vals = {}
            for pair in a.values:
                k, _, v = pair.partition("=")
                if k not in c.inputs:
                    raise _Usage(f"{k!r} is not an input of {c.name} (inputs: "
                                 f"{', '.join(c.inputs)})")
                vals[k] = int(v, 0)
            missing = [k for k in c.inputs if k not in vals]
            if missing:
                raise _Usage(f"no value for {', '.join(missing)}")
            out["outputs"] = simulate_one(c, vals)
        if a.table or a.check:
            table = truth_table(c)
            out["table"] = [[i, o] for i, o in table]
        if a.check:
            bad = _check_table(c, table, a.check)
            out["check"] = {"ok": not bad, "mismatches": bad[:10]}
            if bad:
                status = EXIT_FAIL
    except CircuitError as e:
        print(f"rvm: hw: {e}", file=sys.stderr)
        return EXIT_FAIL
    except ValueError as e:
        raise _Usage(str(e)) from None
    if a.json:
        print(json.dumps(out, indent=1))
        return status
    print_costs([cost(c)], a.temperature)
    if "outputs" in out:
        print(" ".join(f"{k}={v}" for k, v in out["outputs"].items()))
    if a.table:
        ins, outs = list(c.inputs), list(c.outputs)
        print(" ".join(ins) + " | " + " ".join(outs))
        for i, o in table:
            print(" ".join(str(i[k]) for k in ins) + " | " + " ".join(str(o[k]) for k in outs))
    if a.check:
        bad = out["check"]["mismatches"]
        print("truth table: " + ("agrees" if not bad else f"{len(bad)} row(s) differ, first: "
                                 f"{bad[0]}"))
    return status


def _bits(c, vals: dict[str, int], regs) -> str:
    """The line values of registers in line order, as a bit string."""
    lines = sorted((w, (vals[r] >> i) & 1) for r in regs for i, w in enumerate(regs[r]))
    return "".join(str(b) for _, b in lines)


def _check_table(c, table, path: str) -> list[str]:
    """Rows of a truth-table file that the circuit does not reproduce."""
    want: dict[str, str] = {}
    with open(path) as fh:
        for no, line in enumerate(fh, start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or set("".join(parts)) - set("01-"):
                raise _Usage(f"{path}:{no}: expected 'INPUT_BITS OUTPUT_BITS', got {line!r}")
            want[parts[0]] = parts[1]
    bad = []
    for i, o in table:
        ib, ob = _bits(c, i, c.inputs), _bits(c, o, c.outputs)
        if ib in want:
            w = want[ib]
            if len(w) != len(ob) or any(x != "-" and x != y for x, y in zip(w, ob)):
                bad.append(f"{ib}: {ob}, expected {w}")
    missing = len(table) - sum(1 for i, _ in table if _bits(c, i, c.inputs) in want)
    if missing:
        bad.append(f"{missing} input row(s) are not in {path}")
    return bad
