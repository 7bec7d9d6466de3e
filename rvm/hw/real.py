"""RevLib `.real` import and export (the reversible-logic community's circuit format).

A .real file names its lines (`.variables`), says which lines carry a constant instead of an
input (`.constants`: `-` input, `0`/`1` constant) and which outputs are garbage (`.garbage`:
`-` kept, `1` garbage), and lists gates between `.begin` and `.end`.  Import reads the whole
classical RevLib gate library (the MCT, MCF and Peres gates of RevLib and RevKit):

    t1 a            NOT a            t3 a b c     Toffoli: c ^= a & b (the last line is the target)
    t2 a b          CNOT b ^= a      tk ...       k-1 controls, then the target
    f2 a b          swap a and b     f3 c a b     Fredkin: swap a and b if c
    fk ...          k-2 controls, then the two swapped lines
    p3 a b c        Peres: t3 a b c, then t2 a b  pi3 a b c    its inverse: t2 a b, then t3 a b c

A control written `-a` is negative (it fires when a is 0), on t and f gates; targets, and
the lines of a Peres gate, are positive.  The line count after the letter may be left out
(`t a b`, `p a b c`, as RevKit writes Peres gates); `p+` is another name of `pi`.  V and V+
gates (`v`, `v+`, the NCV library's controlled square roots of NOT) are quantum: they have no
classical truth table, and a file that uses them is refused, naming them.  A Fredkin gate
with one positive control is the gate IR's FREDKIN; any other (f2, more or negative controls)
is decomposed into CNOT, MCX, CNOT: a ^= b; b ^= a if the controls fire; a ^= b.

Lines of the same register are named NAME0, NAME1, ... (least significant first) and read back
as one register.  Export writes every line in wire order; an ancilla line is a constant 0 with
the output label 0 (it must come back 0: not garbage).  rvm's ancilla lifetimes, source
registers and uncompute count travel in comments (`#@alloc w`, `#@free w`, `#@sources a b`,
`#@uncompute N`) that other tools skip,
so export then import gives back the same Circuit.
"""
from __future__ import annotations

import re
from pathlib import Path

from .circuit import ALLOC, FREE, Builder, Circuit

VERSION = "1.0"


class RealError(ValueError):
    """A .real file rvm cannot read: `file:line: message`."""


def _line_name(c: Circuit, w: int) -> str:
    for name, ws in c.inputs.items():
        if w in ws:
            return f"{name}{ws.index(w)}" if len(ws) > 1 or name[-1:].isdigit() else name
    return f"anc{w}"


def _out_name(c: Circuit, w: int) -> str | None:
    for name, ws in c.outputs.items():
        if w in ws:
            return f"{name}{ws.index(w)}" if len(ws) > 1 or name[-1:].isdigit() else name
    return None


def export_real(c: Circuit, comment: str = "") -> str:
    """The circuit as .real text."""
    names = [_line_name(c, w) for w in range(c.n_wires)]
    regs = c.register_wires
    inputs, outputs, consts, garbage = [], [], [], []
    for w in range(c.n_wires):
        if w in c.constants or w not in regs:
            v = str(c.constants.get(w, 0))
            inputs.append(v)
            consts.append(v)
        else:
            inputs.append(names[w])
            consts.append("-")
        out = _out_name(c, w)
        if w in c.garbage:
            outputs.append(f"g{w}")
            garbage.append("1")
        else:
            outputs.append(out if out is not None else str(c.constants.get(w, 0)))
            garbage.append("-")
    lines = [f"# {c.name}" + (f": {comment}" if comment else ""), "# written by rvm hw",
             f".version {VERSION}", f".numvars {c.n_wires}", ".variables " + " ".join(names),
             ".inputs " + " ".join(inputs), ".outputs " + " ".join(outputs),
             ".constants " + "".join(consts), ".garbage " + "".join(garbage)]
    lines.append(f"#@name {c.name}")
    if c.uncompute:
        lines.append(f"#@uncompute {c.uncompute}")
    if c.sources:
        lines.append("#@sources " + " ".join(c.sources))
    lines.append(".begin")
    for kind, t, rest in c.gate_list():
        if kind in ("alloc", "free"):
            lines.append(f"#@{kind} {names[t]}")
        elif kind == "fredkin":
            t2, ctl = rest
            lines.append(f"f3 {names[ctl]} {names[t]} {names[t2]}")
        else:
            ctl = [names[x] if x >= 0 else "-" + names[~x] for x in rest]
            lines.append(f"t{len(ctl) + 1} " + " ".join(ctl + [names[t]]))
    lines.append(".end")
    return "\n".join(lines) + "\n"


def _group(labels: list[tuple[int, str]]) -> dict[str, tuple[int, ...]]:
    """Lines labelled NAME0, NAME1, ... form register NAME (in that bit order); any other
    label is a one-line register."""
    by: dict[str, dict[int, int]] = {}
    order: list[str] = []
    single: dict[str, int] = {}
    for w, lab in labels:
        m = re.fullmatch(r"(.*?[A-Za-z_])(\d+)", lab)
        if m:
            base, i = m.group(1), int(m.group(2))
            if base not in by:
                by[base] = {}
                order.append(base)
            by[base][i] = w
        else:
            single[lab] = w
            order.append(lab)
    out: dict[str, tuple[int, ...]] = {}
    for name in order:
        if name in single:
            out[name] = (single[name],)
            continue
        bits = by[name]
        if sorted(bits) == list(range(len(bits))):
            out[name] = tuple(bits[i] for i in range(len(bits)))
        else:                           # not a register: keep the lines one by one
            for i, w in sorted(bits.items()):
                out[f"{name}{i}"] = (w,)
    return out


def import_real(text: str, filename: str = "<real>") -> Circuit:
    """Read .real text into a Circuit (inputs: the non-constant lines; outputs: the lines that
    are not garbage and not a clean constant; constants and garbage recorded)."""
    header: dict[str, str] = {}
    body: list[tuple[int, str]] = []
    sources: tuple[str, ...] = ()
    cname = None
    uncompute = 0
    in_body = done = False
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("#@") and in_body:
            body.append((no, line))
            continue
        if line.startswith("#@sources"):
            sources = tuple(line.split()[1:])
            continue
        if line.startswith("#@name") and len(line.split()) == 2:
            cname = line.split()[1]
            continue
        if line.startswith("#@uncompute") and line[11:].strip().isdigit():
            uncompute = int(line[11:])
            continue
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if done:
            raise RealError(f"{filename}:{no}: text after .end")
        key = line.split()[0].lower()
        if key == ".begin":
            in_body = True
        elif key == ".end":
            if not in_body:
                raise RealError(f"{filename}:{no}: .end without .begin")
            in_body, done = False, True
        elif in_body:
            body.append((no, line))
        elif key.startswith("."):
            header[key] = line[len(key):].strip()
        else:
            raise RealError(f"{filename}:{no}: expected a header line (.variables, ...) or "
                            f".begin, got {line!r}")
    if not done:
        raise RealError(f"{filename}: no .begin ... .end gate list")
    if ".variables" not in header:
        raise RealError(f"{filename}: missing .variables")
    names = header[".variables"].split()
    n = len(names)
    if ".numvars" in header and header[".numvars"].strip() != str(n):
        raise RealError(f"{filename}: .numvars {header['.numvars']} but {n} .variables")
    index = {v: i for i, v in enumerate(names)}
    if len(index) != n:
        raise RealError(f"{filename}: a variable is named twice")

    def per_line(key: str, default: str) -> str:
        s = header.get(key, default * n).replace(" ", "")
        if len(s) != n:
            raise RealError(f"{filename}: {key} has {len(s)} entries for {n} variables")
        return s

    consts = per_line(".constants", "-")
    garb = per_line(".garbage", "-")
    if set(consts) - set("-01") or set(garb) - set("-1"):
        raise RealError(f"{filename}: .constants takes - 0 1 and .garbage takes - 1")
    in_labels = header.get(".inputs", " ".join(names)).split()
    out_labels = header.get(".outputs", " ".join(names)).split()
    if len(in_labels) != n or len(out_labels) != n:
        raise RealError(f"{filename}: .inputs and .outputs need one label per variable")
    constants = {w: int(ch) for w, ch in enumerate(consts) if ch != "-"}
    garbage = tuple(w for w, ch in enumerate(garb) if ch == "1")
    inputs = _group([(w, in_labels[w]) for w in range(n) if w not in constants])
    outputs = _group([(w, out_labels[w]) for w in range(n) if w not in garbage
                      and not (w in constants and out_labels[w] == str(constants[w]))])

    b = Builder()
    b._next = b._n_regs = n            # every line is a wire; gates name them directly
    rows, ctl = b._rows, b._ctl

    def wire(no: int, tok: str) -> int:
        neg = tok.startswith("-")
        v = tok[1:] if neg else tok
        if v not in index:
            raise RealError(f"{filename}:{no}: unknown variable {v!r}")
        return ~index[v] if neg else index[v]

    for no, line in body:
        if line.startswith("#@"):
            kind, *args = line[2:].split()
            if kind in ("alloc", "free") and len(args) == 1:
                w = wire(no, args[0])
                rows += (ALLOC if kind == "alloc" else FREE, w, 0, 0)
            continue
        gate, *toks = line.split()
        kind, k = _gate_kind(filename, no, gate, len(toks))
        ws = [wire(no, t) for t in toks]
        plain = [w if w >= 0 else ~w for w in ws]
        if len(set(plain)) != len(plain):
            raise RealError(f"{filename}:{no}: a line appears twice in {line!r}")
        try:
            if kind == "t":
                if ws[-1] < 0:
                    raise RealError(f"{filename}:{no}: the target of {gate} cannot be negated")
                b.x(ws[-1], *ws[:-1])
            elif kind == "f":
                if ws[-1] < 0 or ws[-2] < 0:
                    raise RealError(f"{filename}:{no}: the swapped lines of {gate} cannot be "
                                    f"negated")
                fc, (t1, t2) = ws[:-2], ws[-2:]
                if len(fc) == 1 and fc[0] >= 0:
                    b.fredkin(fc[0], t1, t2)
                else:                       # swap by three XORs, the middle one controlled
                    b.x(t1, t2)
                    b.x(t2, t1, *fc)
                    b.x(t1, t2)
            else:
                if any(w < 0 for w in ws):
                    raise RealError(f"{filename}:{no}: the lines of a Peres gate cannot be "
                                    f"negated")
                a_, b_, c_ = ws
                if kind == "p":
                    b.x(c_, a_, b_)
                    b.x(b_, a_)
                else:
                    b.x(b_, a_)
                    b.x(c_, a_, b_)
        except ValueError as e:
            if isinstance(e, RealError):
                raise
            raise RealError(f"{filename}:{no}: {e}") from None
    import numpy as np

    g = np.array(rows, dtype=np.int32).reshape(-1, 4)
    name = cname or (Path(filename).stem if filename != "<real>" else "real")
    return Circuit(name, g, np.array(ctl, dtype=np.int32), n, inputs, outputs,
                   tuple(s for s in sources if s in inputs), tuple(names), constants, garbage,
                   uncompute)


# Gates of RevLib's quantum libraries (NCV, Clifford+T, ...) and of MQT's extension of the
# format, refused by name: they have no classical truth table.
_QUANTUM = {"v": "V (a controlled square root of NOT)", "v+": "V+ (the inverse of V)",
            "vi": "V+ (the inverse of V)", "vp": "V+ (the inverse of V)", "h": "Hadamard",
            "s": "S (phase)", "s+": "S+ (phase)", "si": "S+ (phase)", "sp": "S+ (phase)",
            "y": "Y (Pauli)", "z": "Z (Pauli)", "q": "a phase rotation", "rx": "a rotation",
            "ry": "a rotation", "rz": "a rotation"}
_GATE = re.compile(r"(t|f|pi|p\+|p|v\+|vi|vp|v|h|s\+|si|sp|s|x|y|z|q|rx|ry|rz)(\d*)(?::.*)?\Z")


def _gate_kind(filename: str, no: int, gate: str, n_lines: int) -> tuple[str, int]:
    """('t' | 'f' | 'p' | 'pi', line count) of a gate token, or a RealError that says why
    rvm cannot read it."""
    m = _GATE.match(gate.lower())
    if not m:
        raise RealError(f"{filename}:{no}: unknown gate {gate!r} (rvm reads the classical "
                        f"RevLib gates: t (Toffoli), f (Fredkin), p and pi (Peres))")
    name, digits = m.group(1), m.group(2)
    if name in _QUANTUM or name.startswith("v"):
        what = _QUANTUM.get(name, "a V gate")
        raise RealError(f"{filename}:{no}: gate {gate!r} is {what}: a quantum gate with no "
                        f"classical truth table; rvm reads the classical RevLib gates (t, f, "
                        f"p, pi)")
    if name == "x":
        raise RealError(f"{filename}:{no}: gate {gate!r} is not a RevLib gate; write t{n_lines} "
                        f"for a (controlled) NOT")
    kind = "pi" if name in ("pi", "p+") else name
    k = int(digits) if digits else n_lines
    least = {"t": 1, "f": 2, "p": 3, "pi": 3}[kind]
    if kind in ("p", "pi") and k != 3:
        raise RealError(f"{filename}:{no}: a Peres gate ({gate}) acts on 3 lines, not {k}")
    if k != n_lines:
        raise RealError(f"{filename}:{no}: {gate} needs {k} lines, got {n_lines}")
    if k < least:
        raise RealError(f"{filename}:{no}: {gate} needs at least {least} lines")
    return kind, k


def read_real(path: str | Path) -> Circuit:
    p = Path(path)
    return import_real(p.read_text(), str(p))


def write_real(c: Circuit, path: str | Path, comment: str = "") -> None:
    Path(path).write_text(export_real(c, comment))


def truth_table(c: Circuit) -> list[tuple[dict[str, int], dict[str, int]]]:
    """Every input assignment of a small circuit (at most 20 input lines) and its outputs."""
    import numpy as np

    from .sim import simulate

    bits = {r: len(ws) for r, ws in c.inputs.items()}
    total = sum(bits.values())
    if total > 20:
        raise ValueError(f"{c.name}: {total} input lines are too many for a truth table")
    k = np.arange(1 << total, dtype=np.uint64)
    vals, shift = {}, 0
    for r, w in bits.items():
        vals[r] = (k >> np.uint64(shift)) & np.uint64((1 << w) - 1)
        shift += w
    outs = simulate(c, vals)
    return [({r: int(v[i]) for r, v in vals.items()}, {r: int(v[i]) for r, v in outs.items()})
            for i in range(1 << total)]
