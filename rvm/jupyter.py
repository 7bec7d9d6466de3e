"""rvm in Jupyter (docs/interop.md): `%load_ext rvm` gives

    %%rasm [--name VAR] [VERB] [options] [name=value ...]
        assemble the cell and run it as `rvm VERB` would (VERB: run, the default; grad,
        check, dis, invert, trace, hw), with the CLI's options (--reverse, --stats,
        --roundtrip, --json, --of/--wrt, ...); --name VAR also binds the Program to VAR
    %rvm ARGS
        the command line `rvm ARGS` (e.g. `%rvm grad programs/besselj.rasm --of out --wrt z`)

and rich HTML displays: Program (its listing, syntax-highlighted, beside the source lines),
Result, Derivatives, trace reports (rvm.trace.report.Report) and hardware reports
(rvm.hw.report.ProgramCost), registered with IPython's display formatter when the
extension loads (isa.program cannot know about Jupyter: it sits below rvm).
"""
from __future__ import annotations

import html
import os
import re
import shlex
import tempfile
from typing import Any

import numpy as np

__all__ = ["load_ipython_extension", "program_html", "result_html", "derivatives_html",
           "trace_report_html", "hw_report_html"]

VERBS = ("run", "grad", "check", "dis", "invert", "trace", "hw", "asm")
MAX_ROWS = 400

_STYLE = ("<style>.rvm td,.rvm th{text-align:left;padding:1px 8px;font-family:monospace;"
          "vertical-align:top}.rvm .op{color:#0550ae;font-weight:bold}.rvm .num{color:#953800}"
          ".rvm .cm{color:#6e7781}.rvm .kw{color:#8250df;font-weight:bold}"
          ".rvm .src{color:#24292f;background:#f6f8fa}</style>")
_KEYWORDS = {"func", "call", "uncall", "if", "fi", "else", "for", "in", "from", "do", "loop",
             "until", "with", "local", "delocal", "input", "output", "inout", "global",
             "const", "var", "push", "pop", "begin", "end", "jmp", "join", "return", "grad",
             "jvp", "wrt", "along"}
_TOKEN = re.compile(r"(;.*$)|(\b\d+(?:\.\d*)?(?:e[+-]?\d+)?\b)|([A-Za-z_][A-Za-z0-9_.]*)")


def highlight(text: str, ops: bool = False) -> str:
    """rasm text as HTML: comments, numbers, keywords (and, with ops, the first word as an
    opcode)."""
    out, at, first = [], 0, ops
    for m in _TOKEN.finditer(text):
        out.append(html.escape(text[at:m.start()]))
        tok = html.escape(m.group(0))
        if m.group(1):
            out.append(f'<span class="cm">{tok}</span>')
        elif m.group(2):
            out.append(f'<span class="num">{tok}</span>')
        elif first:
            out.append(f'<span class="op">{tok}</span>')
        elif m.group(3) in _KEYWORDS:
            out.append(f'<span class="kw">{tok}</span>')
        else:
            out.append(tok)
        first = False
        at = m.end()
    out.append(html.escape(text[at:]))
    return "".join(out)


def _source_lines(program: Any) -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    for k, name in enumerate(program.files):
        try:
            with open(name, encoding="utf-8") as fh:
                lines[k] = fh.read().splitlines()
        except OSError:
            pass
    return lines


def program_html(program: Any) -> str:
    """The listing: every instruction (pc, text) under the source line it came from."""
    from isa.program import Program  # noqa: F401  (the type this renders)

    from .machine import format_instruction
    src = _source_lines(program)
    head = html.escape(repr(program))
    funcs = {f.begin: f.name for f in program.functions}
    rows, last = [], None
    n = len(program.code)
    for pc in range(min(n, MAX_ROWS)):
        if pc in funcs:
            rows.append(f'<tr><th colspan="3">func {html.escape(funcs[pc])}</th></tr>')
        loc = None
        if program.lines is not None and pc < len(program.lines):
            fi, line, _ = (int(v) for v in program.lines[pc])
            loc = (fi, line)
        if loc != last and loc is not None:
            text = src.get(loc[0], [])
            line_text = text[loc[1] - 1] if 0 < loc[1] <= len(text) else ""
            name = os.path.basename(program.files[loc[0]]) if loc[0] < len(program.files) \
                else "?"
            rows.append(f'<tr class="src"><td>{html.escape(name)}:{loc[1]}</td>'
                        f'<td colspan="2">{highlight(line_text)}</td></tr>')
        last = loc
        label = program.labels.get(pc, "")
        rows.append(f"<tr><td>{pc}</td><td>{html.escape(label)}</td>"
                    f"<td>{highlight(format_instruction(program, pc), ops=True)}</td></tr>")
    more = f"<p>... and {n - MAX_ROWS} more instructions</p>" if n > MAX_ROWS else ""
    return (f'{_STYLE}<div class="rvm"><b>{head}</b><table>{"".join(rows)}</table>'
            f"{more}</div>")


def _value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return html.escape(np.array2string(v, precision=10, threshold=50))
    return html.escape(repr(v.item() if isinstance(v, np.generic) else v))


def _table(title: str, d: dict) -> str:
    if not d:
        return ""
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{_value(v)}</td></tr>"
                   for k, v in d.items())
    return f"<tr><th colspan='2'>{html.escape(title)}</th></tr>{rows}"


def result_html(r: Any) -> str:
    body = _table("outputs", r.outputs) + _table("inputs (as the run left them)", r.inputs) + \
        _table("stats", r.stats) + (_table("garbage", {"nonzero": ", ".join(r.garbage)})
                                    if r.garbage else "")
    return f'{_STYLE}<div class="rvm"><b>rvm Result</b><table>{body}</table></div>'


def derivatives_html(d: Any) -> str:
    body = _table("value", {"loss": d.value} if d.value is not None else {})
    body += _table("gradient", d.gradient or {}) + _table("tangent", d.tangent or {})
    body += _table("hvp", d.hvp or {})
    if d.hessian is not None:
        names = d.wrt_cells
        head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
        rows = "".join(f"<tr><th>{html.escape(n)}</th>" + "".join(
            f"<td>{float(v):.10g}</td>" for v in row) + "</tr>"
            for n, row in zip(names, np.atleast_2d(d.hessian)))
        body += (f"<tr><th colspan='2'>hessian</th></tr><tr><td colspan='2'><table>"
                 f"<tr><th></th>{head}</tr>{rows}</table></td></tr>")
    body += _table("drift", d.drift) + _table("run", {"steps": d.steps,
                                                      "released": d.released})
    return f'{_STYLE}<div class="rvm"><b>rvm Derivatives</b><table>{body}</table></div>'


def _png(fig_path_fn) -> str:
    """An <img> of the PNG a plotting function writes to the path it is given."""
    import base64
    with tempfile.TemporaryDirectory() as d:
        path = fig_path_fn(os.path.join(d, "plot.png"))
        data = base64.b64encode(open(path, "rb").read()).decode()
    return f'<img src="data:image/png;base64,{data}"/>'


def trace_report_html(r: Any, plot: bool = True) -> str:
    """A trace report (rvm trace): its figures and, inline, the time/space frontier for its
    N with this schedule's point."""
    fields = {k: v for k, v in r.as_dict().items() if v is not None and k != "final_state"}
    body = _table(f"{r.label} (N = {r.n})", fields)
    img = ""
    if plot:
        try:
            from .trace import plots
            img = _png(lambda p: plots.frontier(r.n, p))
        except Exception as e:          # noqa: BLE001 - the table still shows
            img = f"<p>(no plot: {html.escape(str(e))})</p>"
    return f'{_STYLE}<div class="rvm"><b>rvm trace report</b><table>{body}</table>{img}</div>'


def hw_report_html(c: Any) -> str:
    """A hardware cost report (rvm hw): totals and the per-opcode tally."""
    body = _table(f"{c.program} (width {c.width})", {
        "instructions": c.instructions, "gates": c.total, "depth": c.depth,
        "toffoli depth": c.toffoli_depth, "cells": c.cells, "wires": c.wires,
        "ancilla peak": c.ancilla_peak, "garbage bits": c.garbage_bits,
        "erased bits": c.erased_bits, "uncompute gates": c.uncompute_gates})
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{t.count}</td><td>{t.total}</td></tr>"
                   for k, t in sorted(c.by_opcode.items(), key=lambda kv: -kv[1].total))
    tally = (f"<table><tr><th>opcode</th><th>executed</th><th>gates</th></tr>{rows}</table>"
             if rows else "")
    return f'{_STYLE}<div class="rvm"><b>rvm hardware report</b><table>{body}</table>' \
           f"{tally}</div>"


# ---- magics ---------------------------------------------------------------------------------
def _cli(argv: list[str]) -> int:
    from . import cli
    try:
        return cli.main(argv)
    except SystemExit as e:             # argparse's --help and usage errors
        return int(e.code or 0) if not isinstance(e.code, str) else 2


def rasm_magic(line: str, cell: str, namespace: dict | None = None) -> int:
    """%%rasm: see the module docstring.  Returns the CLI's exit status (printed when not 0)."""
    args = shlex.split(line)
    name = None
    if "--name" in args:
        k = args.index("--name")
        if k + 1 >= len(args):
            print("%%rasm: --name needs a variable name")
            return 2
        name = args[k + 1]
        del args[k:k + 2]
    verb = args.pop(0) if args and args[0] in VERBS else "run"
    if name is not None and namespace is not None:
        from assembler import AssemblyError

        from .api import assemble
        try:
            namespace[name] = assemble(cell, "cell.rasm", include_paths=(os.getcwd(),))
        except AssemblyError as e:
            print(e)
            return 1
    # a hidden file in the working directory, so that `include` finds what it would
    # beside a notebook
    fd, path = tempfile.mkstemp(prefix=".rvm-cell-", suffix=".rasm", dir=os.getcwd())
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(cell)
        status = _cli([verb, path, *args])
    finally:
        os.unlink(path)
    if status:
        print(f"(exit status {status})")
    return status


def load_ipython_extension(ip: Any) -> None:
    """Register %%rasm, %rvm and the HTML displays with the IPython shell `ip`."""
    from isa.program import Program

    from .ad.engine import Derivatives
    from .api import Result

    def rasm(line: str, cell: str) -> None:
        rasm_magic(line, cell, ip.user_ns)

    def rvm_line(line: str) -> None:
        status = _cli(shlex.split(line))
        if status:
            print(f"(exit status {status})")

    ip.register_magic_function(rasm, magic_kind="cell", magic_name="rasm")
    ip.register_magic_function(rvm_line, magic_kind="line", magic_name="rvm")
    fmt = ip.display_formatter.formatters["text/html"]
    fmt.for_type(Program, program_html)
    fmt.for_type(Result, result_html)
    fmt.for_type(Derivatives, derivatives_html)
    fmt.for_type_by_name("rvm.trace.report", "Report", trace_report_html)
    fmt.for_type_by_name("rvm.hw.report", "ProgramCost", hw_report_html)
