"""`rvm grad`: the gradient (and Hessian) of a program's output, by running it backward.

    rvm grad programs/accumulate.rasm --of x --wrt x,one n=1000
    rvm grad programs/besselj.rasm --of out --wrt z z=3.0 --hessian
    rvm grad prog.rasm --of loss --wrt theta --inputs in.json --check fd --json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from typing import Any

import numpy as np

EXIT_DERIVATIVE = 5

EPILOG = """\
How it works: the program runs forward; the adjoint of the --of cell is set to 1 and the
program runs backward, each instruction's inverse uncomputing the values and accumulating
adjoints (no tape: memory does not grow with the run).  At the start the inputs are restored
(bit-exact for fixed point; float drift is reported) and the adjoints are the gradient.
--hessian adds one tangent-over-adjoint pass per input cell.  Only float and fixed cells are
differentiable.  Before the gradient is trusted, a forward run with random input tangents
checks that every ancilla is released with a zero tangent (--no-ancilla-check skips it), and
the program is searched for conversions that carry a wrt value into an int cell the loss
depends on: the gradient cannot see that dependence, so rvm warns.

exit status: 0 success, 1 program error, 2 usage error (also: a cell that is not
differentiable), 3 the run trapped, 4 step limit, 5 a derivative is not finite, an ancilla
was released with a nonzero tangent or the loss depends on a wrt cell through an int
conversion (both with --strict; warnings otherwise), or --check fd failed.
"""


def register(sub: Any) -> None:
    s = sub.add_parser(
        "grad", help="gradient (and Hessian) of an output by running the program backward",
        description="Differentiate a program: d OF / d WRT at the given inputs, by the "
                    "adjoint method on the reversible machine (docs/ad.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    s.add_argument("program", help="program (.rasm or .rbc)")
    s.add_argument("values", nargs="*", metavar="NAME=VALUE", help="input values")
    s.add_argument("--of", required=True, metavar="CELL",
                   help="the output to differentiate: a float/fixed global, or NAME[i]")
    s.add_argument("--wrt", required=True, metavar="A,B",
                   help="comma-separated inputs (globals or elements NAME[i])")
    s.add_argument("--inputs", metavar="FILE", help="JSON object of input values ('-': stdin)")
    s.add_argument("--hessian", action="store_true", help="also the Hessian over the wrt cells")
    s.add_argument("--check", choices=["fd"], help="compare with central finite differences")
    s.add_argument("--fd-step", type=float, metavar="H",
                   help="finite-difference step (default 1e-6, 1e-4 for fixed cells)")
    s.add_argument("--rtol", type=float, metavar="R",
                   help="--check fd: relative tolerance, absolute for values below 1 (default "
                        "1e-5; 1e-3 when a wrt cell is fixed point: its differences are "
                        "quantized)")
    s.add_argument("--strict", action="store_true",
                   help="a released nonzero tangent, or a loss that depends on a wrt cell "
                        "through a cell with no derivative (an int conversion), is an error "
                        "(exit 5), not a warning")
    s.add_argument("--no-ancilla-check", action="store_true",
                   help="skip the forward run with random tangents that checks the ancillas")
    s.add_argument("--max-steps", type=int, metavar="N", help="step limit per run")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_grad)


def cmd_grad(a: argparse.Namespace) -> int:
    import rvm
    from rvm.cli import UsageError, collect_values, load_program, plain

    from .engine import (
        NonDifferentiablePath,
        NonFiniteDerivative,
        NotDifferentiable,
        ReleasedTangentError,
        derivatives,
        resolve,
    )

    prog = load_program(a.program)
    values = collect_values(a.values, a.inputs)
    if any(isinstance(v, int) and type(v).__name__ == "Raw" for v in values.values()):
        raise UsageError("raw $0x... words are not accepted by grad: give numbers")
    wrt = [w.strip() for w in a.wrt.split(",") if w.strip()]
    if not wrt:
        raise UsageError("--wrt names no cell")
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            d = derivatives(prog, a.of, wrt, values, hessian=a.hessian,
                            check_ancillas=not a.no_ancilla_check, strict=a.strict,
                            max_steps=a.max_steps)
    except NotDifferentiable as e:
        raise UsageError(str(e)) from None
    except (KeyError, ValueError, TypeError, OverflowError) as e:
        if isinstance(e, rvm.RVMError) and not isinstance(e, KeyError):
            raise
        raise UsageError(str(e.args[0]) if e.args else str(e)) from None
    except (NonFiniteDerivative, ReleasedTangentError, NonDifferentiablePath) as e:
        print(f"rvm grad: error: {e}", file=sys.stderr)
        return EXIT_DERIVATIVE
    elapsed = time.perf_counter() - t0
    for w in caught:
        print(f"rvm grad: warning: {w.message}", file=sys.stderr)

    m = rvm.Machine(prog)
    m.reset(values)
    cells = [resolve(m, w, "wrt") for w in wrt]
    at_input = {c.name: m.read(c.name.split("[")[0]) for c in cells}
    rows = []
    for c in cells:
        g = np.atleast_1d(d.gradient[c.name])
        x = np.atleast_1d(at_input[c.name])
        if "[" in c.name:
            x = np.atleast_1d(np.asarray(x)[int(c.name.split("[")[1].rstrip("]"))])
        for k, name in enumerate(c.names()):
            rows.append([name, float(np.asarray(x, dtype=float)[k]), float(g[k])])

    status = 0
    if a.check:
        from isa.types import FIXED
        if a.rtol is None:
            fixed = any(prog.global_named(c.name.split("[")[0]).type == FIXED for c in cells)
            a.rtol = 1e-3 if fixed else 1e-5
        fd = _finite_differences(prog, a.of, cells, values, a.fd_step, a.max_steps)
        for row, f in zip(rows, fd):
            err = abs(row[2] - f) / max(abs(f), 1.0)
            row += [f, err]
            if not err <= a.rtol:
                status = EXIT_DERIVATIVE

    if a.json:
        doc = {"of": a.of, "value": d.value,
               "gradient": {k: plain(v) for k, v in d.gradient.items()},
               "steps": d.steps, "seconds": elapsed, "drift": d.drift,
               "released": d.released and {k: v for k, v in d.released.items()
                                           if k != "location"}}
        if a.hessian:
            doc["hessian"] = {"cells": d.wrt_cells, "matrix": d.hessian.tolist()}
        if a.check:
            doc["check"] = {r[0]: {"fd": r[3], "error": r[4]} for r in rows}
            doc["check_passed"] = status == 0
        print(json.dumps(doc, indent=2))
    else:
        _print(a, d, rows, elapsed)
    if a.check and status:
        print(f"rvm grad: --check fd failed: a relative error above {a.rtol:g}", file=sys.stderr)
    return status


def _finite_differences(prog, of: str, cells, values: dict, step: float | None,
                        max_steps: int | None) -> list[float]:
    """Central differences of the loss, one per wrt cell (through rvm.Machine runs)."""
    import rvm
    from isa.types import FIXED

    m = rvm.Machine(prog)
    base_of = of.split("[")[0]
    idx_of = int(of.split("[")[1].rstrip("]")) if "[" in of else None

    def loss(name: str, k: int, delta: float) -> float:
        m.reset(values)
        g = prog.global_named(name)
        x = np.array(m.read(name), dtype=float)
        if g.length is None:
            m.write(name, float(x) + delta)
        else:
            x[k] += delta
            m.write(name, x.tolist())
        m.run(max_steps=max_steps)
        v = m.read(base_of)
        return float(v if idx_of is None else v[idx_of])

    out = []
    for c in cells:
        name = c.name.split("[")[0]
        first = int(c.name.split("[")[1].rstrip("]")) if "[" in c.name else 0
        h = step or (1e-4 if prog.global_named(name).type == FIXED else 1e-6)
        for k in range(c.size):
            out.append((loss(name, first + k, h) - loss(name, first + k, -h)) / (2 * h))
    return out


def _print(a, d, rows, elapsed: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    console.print(f"{a.of} = {d.value!r}   ({d.steps} steps forward, then back; "
                  f"{elapsed * 1e3:.3g} ms)")
    t = Table(title=f"d {a.of} / d input", title_justify="left")
    t.add_column("input")
    t.add_column("value", justify="right")
    t.add_column("gradient", justify="right")
    if a.check:
        t.add_column("finite diff.", justify="right")
        t.add_column("rel. error", justify="right")
    for r in rows:
        cells = [r[0], f"{r[1]:.10g}", f"{r[2]:.12g}"]
        if a.check:
            cells += [f"{r[3]:.12g}", f"{r[4]:.2e}"]
        t.add_row(*cells)
    console.print(t)
    if a.hessian:
        h = Table(title=f"Hessian of {a.of}", title_justify="left")
        h.add_column("")
        for name in d.wrt_cells:
            h.add_column(name, justify="right")
        for name, row in zip(d.wrt_cells, d.hessian):
            h.add_row(name, *(f"{v:.10g}" for v in row))
        console.print(h)
    if d.drift:
        console.print("inputs restored with float drift: " +
                      ", ".join(f"{k} {v:.3g}" for k, v in d.drift.items()))
    else:
        console.print("inputs restored bit for bit")
