"""Fuzzing harnesses (issue 19): inputs drawn from a seed, and the check each must pass.

    asm    the assembler on mutated .rasm/Janus sources (programs/, tests/janus/) and on random
           token soup: the result is a Program (which verifies, and whose disassembly assembles
           back to the same bytecode) or an AssemblyError -- nothing else, within the time limit;
    rbc    the .rbc loader on mutated files with valid checksums (metadata values and shapes,
           code words, raw bytes): InvalidBytecode, or a Program that disassembles to text
           that assembles, then runs (step limit) raising nothing but RVMError, and whose run
           back restores every cell of an int/fixed/lns program bit for bit with t == 0;
    prog   random well-typed int/fixed/float programs (expressions, if/else/fi, for, from/until,
           with/do, calls and uncalls, local ancillas): forward then backward restores the start
           state bit for bit (int and fixed; float programs only to the step count and the int
           cells), and where a C compiler is found, rvm.grad_fn's native code agrees with the
           interpreter bit for bit (gradient, loss, steps, or the same error).

`run_case(harness, seed)` is deterministic in (harness, seed): a failure is reproduced by its
seed (`python benchmarks/fuzz.py --harness H --seed S --count 1 -v`).  tests/test_fuzz.py runs a
few hundred seeds in CI; benchmarks/fuzz.py runs for minutes in a worker process that also
catches crashes (the worker dies) and hangs in C code (the worker stops answering).

Outcomes: "ok", "rejected" (a clean error: AssemblyError, InvalidBytecode), "trap" (a clean
RVMError of a run) are passes; FAILURES are "traceback", "hang", "crash" and "corruption"
(a silent wrong result).
"""
from __future__ import annotations

import json
import random
import re
import signal
import struct
import sys
import time
import traceback
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HARNESSES = ("asm", "rbc", "prog")
PASSES = ("ok", "rejected", "trap")
FAILURES = ("traceback", "hang", "crash", "corruption")
TIME_LIMIT = 10.0           # seconds per input
STEP_LIMIT = 20_000         # instructions per run


@dataclass
class Outcome:
    kind: str               # one of PASSES or FAILURES
    detail: str = ""        # for a failure: what went wrong (a traceback's last lines)
    data: bytes | str | None = None     # the input, to save for a failure
    note: str = ""          # a pass worth counting (e.g. "dis differs", "native")

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


class Hang(Exception):
    """An input ran past its time limit."""


def _tb() -> str:
    lines = traceback.format_exc().rstrip().splitlines()
    return "\n".join(lines[-12:])


def run_case(harness: str, seed: int, time_limit: float = TIME_LIMIT,
             native_every: int = 4) -> Outcome:
    """Draw input `seed` of `harness` and check it (time limit by SIGALRM in the main thread;
    elsewhere only measured)."""
    fn = {"asm": asm_case, "rbc": rbc_case, "prog": prog_case}[harness]
    rnd = random.Random(f"{harness}:{seed}")
    use_alarm = hasattr(signal, "setitimer") and _main_thread()
    if use_alarm:
        def on_alarm(signum, frame):
            raise Hang()
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, time_limit)
    t0 = time.perf_counter()
    try:
        out = fn(rnd, seed, native_every) if harness == "prog" else fn(rnd)
    except Hang:
        out = Outcome("hang", f"over {time_limit:g} s")
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    if out.kind != "hang" and time.perf_counter() - t0 > time_limit:
        out = Outcome("hang", f"{time.perf_counter() - t0:.1f} s (limit {time_limit:g} s)",
                      out.data)
    return out


def _main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


# ---- corpus -------------------------------------------------------------------------------
@cache
def sources() -> tuple[tuple[str, str, str], ...]:
    """(path, text, kind) of the seed sources: programs/**/*.rasm, tests/janus/**/*.ja."""
    out = []
    for pattern, kind in (("programs/**/*.rasm", "rasm"), ("tests/janus/**/*.ja", "janus"),
                          ("programs/**/*.ja", "janus")):
        for p in sorted(ROOT.glob(pattern)):
            out.append((str(p), p.read_text(encoding="utf-8"), kind))
    return tuple(out)


@cache
def rbc_files() -> tuple[bytes, ...]:
    """.rbc bytes of every seed source that assembles."""
    from assembler import AssemblyError, assemble, assemble_janus, rbc
    out = []
    for path, text, kind in sources():
        try:
            p = assemble(text, path) if kind == "rasm" else assemble_janus(text, path)
        except AssemblyError:
            continue
        out.append(rbc.dump(p))
    return tuple(out)


# ---- text mutations -----------------------------------------------------------------------
_TOKEN = re.compile(r"\s+|[A-Za-z_]\w*|\d[\w.]*|\"(?:[^\"\\\n]|\\.)*\"|;[^\n]*|.", re.S)
NUMBERS = ["0", "1", "-1", "2", "7", "0.5", "-0.0", "1e-9", "3.25", "0x7f", "0xffffffffffffffff",
           "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1_000",
           "4294967296", "4294967297", "1e308", "1e309", "5e-324", "nan", "inf", "$0x7ff8",
           "0b101", "1e99", "1e-99", "123456789012345678901234567890", "2147483648", "63", "64",
           "1e9999", "1e-9999", "1" + "0" * 400, "0x" + "f" * 40, "1." + "5" * 60]
RARE_NUMBERS = ["9" * 5000, "1e999999999", "0x" + "f" * 5000, "1e-999999999"]
WORDS = ["func", "main", "input", "output", "inout", "global", "const", "local", "delocal",
         "var", "if", "else", "fi", "from", "loop", "until", "for", "in", "with", "do", "len",
         "call", "uncall", "int", "fixed", "lns", "float", "stack", "push", "pop", "swap",
         "rot", "irot", "neg", "not", "inc", "dec", "assert", "trace", "show", "print",
         "printf", "include", "procedure", "read", "write", "skip", "x", "y", "n", "i", ".fixed",
         "{", "}", "(", ")", "[", "]", ",", ":", "=", "+=", "-=", "^=", "*=", "/=", "<=>",
         "==", "!=", "<", ">", "&&", "||", "..", "\n", " ", "\"", ";", "sqrt", "sin", "exp",
         "log", "pow", "%", "<<", ">>", "~", "!", "@"]


def number(rnd: random.Random) -> str:
    r = rnd.random()
    if r < 0.002:
        return rnd.choice(RARE_NUMBERS)
    if r < 0.6:
        return rnd.choice(NUMBERS)
    if r < 0.8:
        return str(rnd.randint(-(1 << 70), 1 << 70))
    return repr(rnd.uniform(-1e6, 1e6))


def mutate_text(rnd: random.Random, text: str, donors: list[str]) -> str:
    """1-6 mutations: character flips, token deletions, duplications, swaps and insertions,
    numbers spliced in, lines deleted or duplicated, a splice from another source."""
    toks = _TOKEN.findall(text)
    for _ in range(rnd.choice((1, 1, 2, 3, 6))):
        if not toks:
            toks = [rnd.choice(WORDS)]
        k = rnd.randrange(len(toks))
        m = rnd.randrange(11)
        if m == 0:                                        # a character flip
            s = toks[k]
            i = rnd.randrange(len(s))
            c = rnd.choice([chr(rnd.randrange(32, 127)), chr(rnd.randrange(0, 0x3000)), "\n",
                            "\x00", "\ufeff"])
            toks[k] = s[:i] + c + s[i + 1:]
        elif m == 1:
            del toks[k]
        elif m == 2:
            toks.insert(k, toks[k])
        elif m == 3:
            j = rnd.randrange(len(toks))
            toks[k], toks[j] = toks[j], toks[k]
        elif m in (4, 5):                                 # a number where a number was
            nums = [i for i, t in enumerate(toks) if t[:1].isdigit()]
            toks[rnd.choice(nums) if nums and m == 4 else k] = number(rnd)
        elif m == 6:
            toks.insert(k, rnd.choice(WORDS))
        elif m == 7:                                      # lines
            lines = "".join(toks).split("\n")
            i = rnd.randrange(len(lines))
            if rnd.random() < 0.5:
                del lines[i]
            else:
                lines.insert(i, lines[i] * rnd.choice((1, 1, 2, 50)))
            toks = _TOKEN.findall("\n".join(lines))
        elif m == 8 and donors:                           # a run of tokens from a donor
            d = _TOKEN.findall(rnd.choice(donors))
            if d:
                i = rnd.randrange(len(d))
                toks[k:k] = d[i:i + rnd.randint(1, 30)]
        elif m == 9:                                      # a block cut out
            toks[k:k + rnd.randint(2, 40)] = []
        else:                                             # a name renamed
            if toks[k][:1].isalpha() or toks[k][:1] == "_":
                old, new = toks[k], rnd.choice(WORDS + ["z9", "_", "a" * 300])
                toks = [new if t == old else t for t in toks]
    return "".join(toks)


def token_soup(rnd: random.Random) -> str:
    return "".join(rnd.choice(WORDS) if rnd.random() < 0.8 else number(rnd)
                   for _ in range(rnd.randint(1, 120))).replace("x", " x ")


# ---- the same program up to the numbering of side tables ---------------------------------
def resolved(p) -> list[tuple]:
    """p's code with every side-table reference replaced by what it refers to (an indexed
    operand by its xtab entry, a call by its callee and arguments, a trace by its contents, an
    assert's message by its text), so that two programs that number their side tables in
    another order, or name an assert's values differently, compare equal."""
    from isa.program import MODE_X, operand_parts
    from isa.table import OPS

    def word(w):
        mode, payload = operand_parts(int(w))
        if mode == MODE_X:
            x = p.xtab[payload]
            return ("X", int(x.base), int(x.length), int(x.index))
        return int(w)

    out = []
    for row in p.code.tolist():
        op = OPS[row[0]]
        items: list = [row[0]]
        for kind, v in zip(op.operands, row[1:]):
            if kind in ("y", "a"):
                items.append(word(v))
            elif kind == "callsite":
                cs = p.callsites[v]
                items.append(("call", cs.func, tuple((word(a.word), a.length) for a in cs.args)))
            elif kind == "trace":
                t = p.traces[v]
                items.append(("trace", t.message, tuple(map(word, t.operands)),
                              tuple(t.lengths or ()), t.style))
            elif kind == "msg":
                items.append(p.traces[v - 1].message if v else None)
            else:
                items.append(v)
        out.append(tuple(items))
    return out


# ---- asm ------------------------------------------------------------------------------------
def asm_case(rnd: random.Random) -> Outcome:
    from assembler import AssemblyError, assemble, assemble_janus, disassemble, rbc
    from rvm.errors import InvalidBytecode
    from rvm.verify import check
    src = sources()
    path, text, kind = rnd.choice(src)
    if rnd.random() < 0.08:
        text, path = token_soup(rnd), "<soup>"
    else:
        text = mutate_text(rnd, text, [t for _, t, k in src if k == kind])
    try:
        p = assemble(text, path) if kind == "rasm" else assemble_janus(text, path)
    except AssemblyError as e:
        return Outcome("rejected", data=text) if str(e) else \
            Outcome("traceback", "an AssemblyError without a message", text)
    except Hang:
        raise
    except BaseException:                                  # noqa: BLE001 - the finding
        return Outcome("traceback", f"{kind} {path}:\n{_tb()}", text)
    problems = check(p)
    if problems:
        return Outcome("corruption", "the assembler made a Program that fails verification: "
                       + "; ".join(problems[:3]), text)
    try:
        rbc.load_bytes(rbc.dump(p))
    except InvalidBytecode as e:
        return Outcome("corruption", f"the .rbc file of an assembled program is refused: {e}",
                       text)
    try:
        back = assemble(disassemble(p), "<dis>")
    except Hang:
        raise
    except BaseException:                                  # noqa: BLE001
        return Outcome("corruption", f"dis(asm(x)) does not assemble:\n{_tb()}", text)
    if resolved(back) != resolved(p):
        return Outcome("corruption", "dis(asm(x)) assembles to another program", text)
    return Outcome("ok", data=text)


# ---- rbc -----------------------------------------------------------------------------------
def reseal(meta_bytes: bytes, arrays: bytes, version: int = 2) -> bytes:
    body = struct.pack("<6sHHQQ", b"RVMBC\x00", version, 0, len(meta_bytes), len(arrays)) \
        + meta_bytes + arrays
    return body + struct.pack("<I", zlib.crc32(body))


def split(data: bytes) -> tuple[dict, bytearray]:
    ml = struct.unpack_from("<Q", data, 10)[0]
    return json.loads(data[26:26 + ml]), bytearray(data[26 + ml:-4])


INT_VALUES = [0, 1, 2, 3, -1, -2, 4, 7, 8, 9, 15, 16, 17, 63, 64, 255, 1 << 16, 1 << 20,
              (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, (1 << 32) + 1, (1 << 62),
              (1 << 63) - 1, -(1 << 63)]


def _word(rnd: random.Random, v: int) -> int:
    r = rnd.random()
    if r < 0.3:
        v = rnd.choice(INT_VALUES)
    elif r < 0.5:
        v += rnd.randint(-3, 3)
    elif r < 0.65:                                      # the same payload in another mode
        v = (v & ~7) | rnd.randrange(8)
    elif r < 0.8:                                       # another payload in the same mode
        v = ((v >> 3) + rnd.choice((-1, 1, 2, 8, 1 << 20, 1 << 32)) << 3) | (v & 7)
    else:
        v ^= 1 << rnd.randrange(64)
    return max(-(1 << 63), min((1 << 63) - 1, v))


def _nodes(node, path=()):
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _nodes(v, path + (i,))


def _mutate_meta(rnd: random.Random, meta: dict) -> None:
    nodes = [(p, v) for p, v in _nodes(meta) if p and p[0] != "arrays"]
    path, v = rnd.choice(nodes)
    parent = meta
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    r = rnd.random()
    if type(v) is int and r < 0.75:
        parent[key] = _word(rnd, v)
    elif isinstance(v, list) and v and r < 0.5:
        i = rnd.randrange(len(v))
        op = rnd.randrange(3)
        if op == 0:
            del v[i]
        elif op == 1:
            v.insert(i, json.loads(json.dumps(v[i])))
        else:
            j = rnd.randrange(len(v))
            v[i], v[j] = v[j], v[i]
    elif type(v) is str:
        parent[key] = rnd.choice(["", "main", "x", "a b", "if", "_1", "\u00e9", v + v, "int",
                                  "float", "fixed", "lns", "input", "output", "global", "stack",
                                  "show", "print", "printf", "%d %d %a", "\"\\"])
    elif type(v) is bool:
        parent[key] = not v
    elif v is None:
        parent[key] = rnd.choice([0, 1, 3, -1, 1 << 32])
    elif type(v) is int and isinstance(parent, dict):
        parent[key] = None


def rbc_case(rnd: random.Random) -> Outcome:
    from assembler import AssemblyError, assemble, disassemble, rbc
    from rvm.errors import InvalidBytecode
    base = rnd.choice(rbc_files())
    meta, arrays = split(base)
    for _ in range(rnd.choice((1, 1, 2, 3, 5))):
        r = rnd.random()
        if r < 0.45:
            _mutate_meta(rnd, meta)
        elif r < 0.85 and len(arrays) >= 8:             # a code (or line table) word
            k = rnd.randrange(len(arrays) // 8)
            v = struct.unpack_from("<q", arrays, 8 * k)[0]
            struct.pack_into("<q", arrays, 8 * k, _word(rnd, v))
        elif len(arrays):                               # a byte
            arrays[rnd.randrange(len(arrays))] = rnd.randrange(256)
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode()
    if rnd.random() < 0.05:                             # raw bytes of the metadata
        mb = bytearray(meta_bytes)
        mb[rnd.randrange(len(mb))] = rnd.randrange(256)
        meta_bytes = bytes(mb)
    data = reseal(meta_bytes, bytes(arrays))
    try:
        prog = rbc.load_bytes(data, name="fuzz.rbc")
    except InvalidBytecode as e:
        return Outcome("rejected", data=data) if str(e).startswith("fuzz.rbc: ") else \
            Outcome("traceback", f"an error that does not name the file: {e}", data)
    except Hang:
        raise
    except BaseException:                                  # noqa: BLE001
        return Outcome("traceback", f"rbc.load_bytes:\n{_tb()}", data)
    try:
        text = disassemble(prog)
    except Hang:
        raise
    except BaseException:                                  # noqa: BLE001
        return Outcome("traceback", f"disassemble of a loaded file:\n{_tb()}", data)
    note = ""
    try:
        back = assemble(text, "<dis>")
        if resolved(back) != resolved(prog):
            note = "dis differs"
    except AssemblyError as e:
        return Outcome("corruption", f"the disassembly of a loaded file does not assemble: "
                                     f"{str(e)[:500]}", data)
    out = run_back_and_forth(prog, {})
    out.data, out.note = data, out.note or note
    return out


def _exact(prog) -> bool:
    """Whether no cell or instruction of `prog` is float (its run back is then exact)."""
    from isa.table import OPS
    from isa.types import FLOAT
    if any(g.type == FLOAT for g in prog.globals + prog.consts):
        return False
    if any(v.type == FLOAT for f in prog.functions for v in f.locals) or \
            any(q.type == FLOAT for f in prog.functions for q in f.params):
        return False
    return not any(OPS[int(op)].type == FLOAT for op in set(prog.code[:, 0].tolist()))


def run_back_and_forth(prog, inputs: dict, max_steps: int = STEP_LIMIT,
                       exact: bool | None = None) -> Outcome:
    """Run forward (to the end, a trap or the step limit) and back to the start: the start state
    must come back bit for bit with t == 0 (every cell of an `exact` program, by default one
    without float; the int, fixed and lns cells of another unless Machine.check_restored blames
    float drift, the documented limit).  Anything raised but an RVMError is a traceback."""
    import rvm
    from rvm.errors import PathDivergence, RVMError, StepLimit
    try:
        m = rvm.Machine(prog, stack_cells=1 << 12, frame_cells=1 << 16, max_depth=1 << 10,
                        trace=lambda ev: None)
        m.reset(inputs)
    except RVMError:
        return Outcome("trap", "no machine")
    except Hang:
        raise
    except BaseException:                                  # noqa: BLE001
        return Outcome("traceback", f"Machine/reset:\n{_tb()}")
    n = prog.n_static
    start = m.mem[:n].copy()
    exact = _exact(prog) if exact is None else exact
    what = "end"
    try:
        m.run(max_steps=max_steps)
    except StepLimit:
        what = "step limit"
    except RVMError as e:
        what = type(e).__name__
    except Hang:
        raise
    except BaseException:                                  # noqa: BLE001
        return Outcome("traceback", f"forward run:\n{_tb()}")
    steps = m.t
    try:
        m.run(direction=-1, max_steps=steps + 16)
    except PathDivergence as e:
        if exact:
            return Outcome("corruption", f"exact program, run back after {what} at step "
                                         f"{steps}: {e}")
        return Outcome("trap", "PathDivergence")
    except RVMError as e:
        if not exact:
            return Outcome("trap", f"float drift: {type(e).__name__}")
        return Outcome("corruption", f"the run back after {what} at step {steps} raised "
                                     f"{type(e).__name__}: {str(e)[:400]}")
    except Hang:
        raise
    except BaseException:                                  # noqa: BLE001
        return Outcome("traceback", f"backward run:\n{_tb()}")
    if m.status != "start" or m.t != 0:
        return Outcome("corruption", f"after {what} at step {steps} the run back ended with "
                                     f"status {m.status!r} at t = {m.t}")
    if not exact:
        try:
            m.check_restored()
        except PathDivergence:
            return Outcome("trap", "PathDivergence")
    now = m.mem[:n]
    if exact:
        bad = np.flatnonzero(now != start)
    else:
        from isa.types import FLOAT
        types = prog.static_types()[:n]
        bad = np.flatnonzero((now != start) & (types != int(FLOAT)))
    if len(bad):
        a = int(bad[0])
        return Outcome("corruption", f"after {what} at step {steps} the run back left "
                                     f"{len(bad)} cell(s) changed, first address {a}: "
                                     f"{int(start[a])} -> {int(now[a])}")
    return Outcome("ok" if what in ("end", "step limit") else "trap", what)


# ---- prog: random programs --------------------------------------------------------------
INTS = ["i0", "i1", "i2", "i3"]
FIXEDS = ["x0", "x1", "x2", "x3"]
FLOATS = ["f0", "f1", "f2", "f3"]
HEAD = """\
.fixed {F}
inout i0: int = 3
inout i1: int = -5
inout i2: int
inout i3: int = 2
inout ia: int[4] = [1, 2, 3, 4]
inout x0: fixed = 0.5
inout x1: fixed = -1.25
inout x2: fixed
inout x3: fixed = 2
inout xa: fixed[4] = [0.25, -0.5, 1, 3]
inout f0: float = 0.5
inout f1: float = -1.5
inout f2: float
inout f3: float = 0.125
inout fa: float[4] = [1, -2, 0.5, 0.25]
output loss: float
output lossx: fixed

func fi(p: int, q: int, r: fixed) {{
    p += q * 3
    r += fixed(q)
    p ^= q
    rotl p, 7
}}

func ff(a: fixed, b: fixed, v: fixed[]) {{
    a += b * b
    v[1] += a - b
    b += sin(a)
}}

func fl(a: float, b: float, v: float[]) {{
    a += b * b + 0.5
    v[2] += sin(a) * b
    b -= a / 3.0
}}
"""


class _Gen:
    """One random program: statements whose targets never occur in their own expressions,
    branches that write nothing their conditions read, loops with bounded counters."""

    def __init__(self, rnd: random.Random, kinds: tuple[str, ...]):
        self.r = rnd
        self.kinds = kinds
        self.depth = 0
        self.n = 0

    def pool(self, kind: str) -> list[str]:
        return {"int": INTS, "fixed": FIXEDS, "float": FLOATS}[kind]

    def arr(self, kind: str) -> str:
        return {"int": "ia", "fixed": "xa", "float": "fa"}[kind]

    def leaf(self, kind: str, avoid: set[str]) -> str:
        r = self.r
        x = r.random()
        cells = [c for c in self.pool(kind) if c not in avoid]
        if x < 0.2 or not cells:
            if kind == "int":
                return str(r.choice([0, 1, 2, 3, 7, -4, 100, 12345]))
            return r.choice(["0.5", "1.0", "-0.25", "3.0", "0.125", "2.5"])
        if x < 0.3 and self.arr(kind) not in avoid:
            return f"{self.arr(kind)}[{r.randrange(4)}]"
        if x < 0.35 and self.arr(kind) not in avoid and "i2" not in avoid:
            return f"{self.arr(kind)}[i2 & 3]"
        return r.choice(cells)

    def expr(self, kind: str, avoid: set[str], d: int = 0) -> str:
        r = self.r
        if d >= 2 or r.random() < 0.35:
            return self.leaf(kind, avoid)
        a, b = self.expr(kind, avoid, d + 1), self.expr(kind, avoid, d + 1)
        if kind == "int":
            op = r.choice(["+", "-", "*", "^", "&", "|", "+", "-", "/", "%", "<<", ">>"])
            return f"({a} {op} {b})"
        x = r.random()
        if x < 0.6:
            return f"({a} {r.choice(['+', '-', '*', '+', '-', '/'])} {b})"
        if x < 0.8:
            return f"{r.choice(['sin', 'cos', 'atan', 'tanh', 'sqrt', 'exp', 'log', 'abs'])}({a})"
        if x < 0.9:
            return f"-{a}"
        conv = [c for c in INTS if c not in avoid]
        return f"{kind}({r.choice(conv)})" if conv else a

    def update(self, kind: str, forbid: set[str]) -> str:
        """`y op= e` with y not in forbid, e not reading y."""
        r = self.r
        cells = [c for c in self.pool(kind) if c not in forbid]
        if not cells:
            return "nop"
        if r.random() < 0.15 and self.arr(kind) not in forbid:
            y = f"{self.arr(kind)}[{r.randrange(4)}]"
            avoid = {self.arr(kind)}
        else:
            y = r.choice(cells)
            avoid = {y}
        x = r.random()
        if x < 0.55:
            return f"{y} {r.choice(['+=', '-='])} {self.expr(kind, avoid)}"
        if kind == "int":
            return r.choice([f"{y} ^= {self.expr(kind, avoid)}", f"inc {y}", f"dec {y}",
                             f"neg {y}", f"not {y}", f"rotl {y}, {r.randrange(64)}"])
        others = [c for c in self.pool(kind) if c != y and c not in forbid]
        if x < 0.7 and len(others) >= 2 and not y.endswith("]"):
            a, t = r.sample(others, 2)
            return f"{r.choice(['rot', 'irot'])} {y}, {a}, {t}"
        if x < 0.8 and others and not y.endswith("]"):
            return f"swap {y}, {r.choice(others)}"
        if x < 0.9:
            return f"neg {y}"
        return f"{y} += {self.expr(kind, avoid)} * {self.leaf(kind, avoid)}"

    def block(self, forbid: set[str], n: int | None = None) -> list[str]:
        out = []
        for _ in range(n if n is not None else self.r.randint(1, 4)):
            out += self.stmt(forbid)
        return out

    def stmt(self, forbid: set[str]) -> list[str]:
        r = self.r
        self.n += 1
        x = r.random()
        if self.depth >= 2 or self.n > 40 or x < 0.55:
            return [self.update(r.choice(self.kinds), forbid)]
        self.depth += 1
        try:
            return self.control(forbid)
        finally:
            self.depth -= 1

    def control(self, forbid: set[str]) -> list[str]:
        r = self.r
        ind = lambda lines: ["    " + s for s in lines]     # noqa: E731
        c = r.randrange(9)
        if c == 7:                                      # a check that may fail
            kind = r.choice(self.kinds)
            a = r.choice(self.pool(kind))
            return [f"assert {a} {r.choice(['<', '<=', '!=', '>='])} "
                    f"{self.expr(kind, {a})}"]
        if c == 8:                                      # the value stack
            kind = r.choice(self.kinds)
            cand = [v for v in self.pool(kind) if v not in forbid]
            if not cand:
                return ["nop"]
            y = r.choice(cand)
            return [f"push {y}", *self.block(forbid | {y}, 1), f"pop {y}"]
        if c in (0, 1):                                 # if/else/fi on cells the arms keep
            kind = r.choice([k for k in self.kinds if k != "float"] or ["int"])
            p = r.choice(self.pool(kind))
            q = self.leaf(kind, {p, self.arr(kind)})
            cmp = r.choice(["<", "<=", "==", "!=", ">", ">="])
            keep = forbid | {p, q, self.arr(kind), "i2"}
            text = [f"if {p} {cmp} {q} {{", *ind(self.block(keep))]
            if c == 1:
                text += ["} else {", *ind(self.block(keep))]
            return text + [f"}} fi {p} {cmp} {q}"]
        if c == 2:                                      # counted loop
            k = f"k{self.depth}"
            return [f"for {k} in 0..{r.randint(0, 4)} {{", *ind(self.block(forbid)), "}"]
        if c == 3:                                      # compute, use, uncompute
            return ["with {", *ind(self.block(forbid)), "} do {",
                    *ind(self.block(forbid | {"i0", "i1", "i2", "i3", "x0", "x1", "x2", "x3",
                                              "f0", "f1", "f2", "f3", "ia", "xa", "fa"} -
                                    {"i3", "x3", "f3"}, 1)), "}"]
        if c == 4:                                      # calls and uncalls
            verb = r.choice(["call", "uncall"])
            kind = r.choice(self.kinds)
            if kind == "int":
                cand = [v for v in INTS if v not in forbid]
                xs = [v for v in FIXEDS if v not in forbid]
                if len(cand) >= 2 and xs:
                    p, q = r.sample(cand, 2)
                    return [f"{verb} fi({p}, {q}, {r.choice(xs)})"]
                return ["nop"]
            cand = [v for v in self.pool(kind) if v not in forbid]
            arr = self.arr(kind)
            if len(cand) >= 2 and arr not in forbid:
                a, b = r.sample(cand, 2)
                return [f"{verb} {'ff' if kind == 'fixed' else 'fl'}({a}, {b}, {arr})"]
            return ["nop"]
        if c == 5:                                      # a local ancilla, used and cleared
            kind = r.choice([k for k in self.kinds if k != "float"] or ["int"])
            src = [v for v in self.pool(kind)]
            e = self.expr(kind, {"t" + str(self.depth)})
            t = f"t{self.depth}"
            return [f"local {t}: {kind} = {e}", *self.block(forbid | set(src) | {self.arr(kind)}
                                                            | {"i2"}, 1),
                    f"delocal {t} = {e}"]
        # from/loop/until: a counter from 0 to a bound
        j = f"j{self.depth}"
        bound = r.randint(1, 5)
        return [f"local {j}: int = 0", f"from {j} == 0 {{", *ind(self.block(forbid | {j})),
                "} loop {", f"    inc {j}", f"}} until {j} == {bound}",
                f"delocal {j} = {bound}"]


def random_program(rnd: random.Random, kinds: tuple[str, ...] = ("int", "fixed")) -> str:
    g = _Gen(rnd, kinds)
    body = g.block(set(), rnd.randint(2, 10))
    if "float" in kinds:
        body.append(f"loss += {g.expr('float', {'loss'})}")
    if "fixed" in kinds:
        body.append(f"lossx += {g.expr('fixed', {'lossx'})}")
    return HEAD.format(F=rnd.choice([8, 16, 24, 32, 40])) + "\nfunc main() {\n" + \
        "\n".join("    " + s for s in body) + "\n}\n"


def random_inputs(rnd: random.Random, kinds) -> dict:
    out: dict = {}
    if rnd.random() < 0.3:
        return out
    for c in INTS:
        out[c] = rnd.choice([0, 1, -1, 3, 1 << 40, -(1 << 62), rnd.randint(-1000, 1000)])
    for c in FIXEDS:
        out[c] = rnd.choice([0.0, 0.5, -1.5, 2.75, rnd.uniform(-100, 100)])
    if "float" in kinds:
        for c in FLOATS:
            out[c] = rnd.choice([0.0, 0.5, -1.5, 1e-3, rnd.uniform(-10, 10)])
    return out


def _bits(v) -> list:
    return np.asarray(v, dtype=np.float64).reshape(-1).view(np.int64).tolist()


def _grad_obs(prog, of, wrt, inputs, native: bool):
    import rvm
    f = rvm.grad_fn(prog, of=of, wrt=wrt, native=native)
    out = []
    for inp in inputs:
        try:
            g = f(dict(inp))
        except Exception as e:                              # noqa: BLE001 - compared
            out.append(("error", type(e).__name__, str(e)))
            continue
        out.append(({k: _bits(v) for k, v in g.items()}, _bits(f.last.value), f.last.steps))
    return out, f


def prog_case(rnd: random.Random, seed: int, native_every: int = 4) -> Outcome:
    import warnings

    import rvm
    from assembler import AssemblyError
    from rvm import native
    floats = rnd.random() < 0.35
    kinds = ("int", "fixed", "float") if floats else rnd.choice(
        [("int",), ("fixed",), ("int", "fixed")])
    src = random_program(rnd, kinds)
    try:
        prog = rvm.assemble(src)
    except AssemblyError as e:
        return Outcome("rejected", str(e)[:300], src)
    except Hang:
        raise
    except BaseException:                                  # noqa: BLE001
        return Outcome("traceback", f"assemble:\n{_tb()}", src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = Outcome("ok")
        for limit in (STEP_LIMIT, rnd.choice((STEP_LIMIT, rnd.randint(1, 300)))):
            out = run_back_and_forth(prog, random_inputs(rnd, kinds), limit, exact=not floats)
            if out.failed:
                out.data = src
                return out
        if floats and native_every and seed % native_every == 0 and native.compiler():
            wrt = ["f0", "f1", "fa", "x0"]
            ins = [random_inputs(rnd, kinds) for _ in range(3)]
            try:
                nat, f = _grad_obs(prog, "loss", wrt, ins, True)
                ref, _ = _grad_obs(prog, "loss", wrt, ins, False)
            except rvm.RVMError:
                return Outcome("trap", "grad_fn", src)
            except Hang:
                raise
            except BaseException:                          # noqa: BLE001
                return Outcome("traceback", f"grad_fn:\n{_tb()}", src)
            for k, (a, b) in enumerate(zip(nat, ref)):
                if a != b:
                    return Outcome("corruption", f"native and interpreted grad_fn differ on "
                                                 f"input {ins[k]}:\n native      {a}\n "
                                                 f"interpreted {b}", src)
            out.note = "native" if f.runner.core.native else "native unused"
    out.data = src
    return out


def reproduce_hint(harness: str, seed: int) -> str:
    return f"python benchmarks/fuzz.py --harness {harness} --seed {seed} --count 1 -v"


def main_once(harness: str, seed: int) -> None:             # pragma: no cover - a helper
    out = run_case(harness, seed)
    print(out.kind, out.note, out.detail, sep="\n", file=sys.stderr)
