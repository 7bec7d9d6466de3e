# rvm/_core.pyx includes this file: validation: what the loop relies on (a Program cannot escape the buffers).
# (Text included into the one extension module: it shares the core's names.)

# ---- validation: what the loop relies on -------------------------------------------------------

class _Checker:
    """Collects the problems that would let a Program escape the machine's buffers."""

    def __init__(self, program, n_static: int, n_globals: int):
        self.p = program
        self.n_static = n_static
        self.n_globals = n_globals
        self.problems: list[str] = []

    def bad(self, pc, msg: str) -> None:
        self.problems.append(f"pc {pc}: {msg}" if pc is not None else msg)

    def cell(self, pc, f, word: int, write: bool, what: str) -> None:
        """A scalar cell operand (kinds y / a, call args, trace operands, indices)."""
        mode, q = word & 7, word >> 3
        if q < 0:
            self.bad(pc, f"{what}: negative payload in operand {word}")
        elif mode == MODE_G:
            if q >= (self.n_globals if write else self.n_static):
                self.bad(pc, f"{what}: address {q} is not a {'global' if write else 'static'} cell")
        elif mode == MODE_L:
            if q >= f.frame_size:
                self.bad(pc, f"{what}: local offset {q} outside the frame of {f.name} "
                             f"({f.frame_size} cells)")
        elif mode == MODE_P:
            if q >= len(f.params):
                self.bad(pc, f"{what}: {f.name} has no parameter {q}")
            elif f.params[q].is_array:
                self.bad(pc, f"{what}: array parameter {f.params[q].name} used as a cell")
            elif write and not f.params[q].written:
                self.bad(pc, f"{what}: writes parameter {f.params[q].name} not declared written")
        elif mode == MODE_X:
            if q >= len(self.p.xtab):
                self.bad(pc, f"{what}: no xtab entry {q}")
            else:
                self.xentry(pc, f, self.p.xtab[q], write, what)
        elif mode == MODE_N:
            if write:
                self.bad(pc, f"{what}: an array length cannot be written")
            elif q >= len(f.params) or not f.params[q].is_array:
                self.bad(pc, f"{what}: len() of {q}, not an array parameter of {f.name}")
        else:
            self.bad(pc, f"{what}: operand mode {mode} does not exist")

    def array(self, pc, f, word: int, length, write: bool, what: str) -> None:
        """An array base (xtab base, array call argument): G/L with a static length, or P."""
        mode, q = word & 7, word >> 3
        if q < 0:
            self.bad(pc, f"{what}: negative payload in array word {word}")
        elif mode == MODE_P:
            if q >= len(f.params) or not f.params[q].is_array:
                self.bad(pc, f"{what}: {q} is not an array parameter of {f.name}")
            elif write and not f.params[q].written:
                self.bad(pc, f"{what}: writes parameter {f.params[q].name} not declared written")
        elif mode in (MODE_G, MODE_L):
            if length is None or length < 0:
                self.bad(pc, f"{what}: array without a static length")
            elif mode == MODE_G and q + length > (self.n_globals if write else self.n_static):
                self.bad(pc, f"{what}: array {q}..{q + length} outside the "
                             f"{'globals' if write else 'static cells'}")
            elif mode == MODE_L and q + length > f.frame_size:
                self.bad(pc, f"{what}: local array {q}..{q + length} outside the frame of "
                             f"{f.name}")
        else:
            self.bad(pc, f"{what}: array word of mode {mode}")

    def xentry(self, pc, f, x, write: bool, what: str) -> None:
        self.array(pc, f, x.base, x.length, write, what)
        if (x.index & 7) == MODE_X:
            self.bad(pc, f"{what}: an index cannot itself be indexed")
        else:
            self.cell(pc, f, x.index, False, what + " index")


def validate(program, n_static: int, n_globals: int) -> list:
    """Problems that make `program` unsafe to run (empty if none)."""
    ck = _Checker(program, n_static, n_globals)
    code = program.code
    n = len(code)
    if not 0 <= program.fraction_bits <= MAX_FRACTION_BITS:
        ck.bad(None, f"fraction bits {program.fraction_bits} outside 0..{MAX_FRACTION_BITS}")
    if code.ndim != 2 or code.shape[1] != ROW_WIDTH:
        ck.bad(None, f"code is not an (n, {ROW_WIDTH}) array")
        return ck.problems
    bad_ops = np.nonzero((code[:, 0] < 0) | (code[:, 0] >= N_OPCODES))[0]
    for pc in bad_ops[:10]:
        ck.bad(int(pc), f"opcode {int(code[pc, 0])} does not exist")
    if len(bad_ops):
        return ck.problems
    nf = len(program.functions)
    if not 0 <= program.main < nf:
        ck.bad(None, f"entry function {program.main} does not exist")
        return ck.problems
    if program.functions[program.main].params:
        ck.bad(None, "the entry function takes parameters")
    for c in program.consts:
        size = 1 if c.length is None else c.length
        if not (n_globals <= c.addr and c.addr + size <= n_static and len(c.values) == size):
            ck.bad(None, f"constant {c.name} at {c.addr} outside the constant cells")
    for fi, f in enumerate(program.functions):
        if not (0 <= f.begin < f.end < n) or f.frame_size < 0:
            ck.bad(None, f"function {f.name}: bad range {f.begin}..{f.end} or frame size")
            continue
        for pc, op_name in ((f.begin, "begin"), (f.end, "end")):
            row = code[pc]
            if OPS[int(row[0])].name != op_name or int(row[1]) != fi:
                ck.bad(pc, f"function {f.name} does not start/end with {op_name} {fi}")
        for pc in range(f.begin + 1, f.end):
            row = [int(w) for w in code[pc]]
            op = OPS[row[0]]
            if op.name in ("begin", "end"):
                ck.bad(pc, f"{op.name} inside the body of {f.name}")
                continue
            always = False
            for slot, kind in enumerate(op.operands, start=1):
                w = row[slot]
                what = f"{op.name} operand {slot}"
                if kind == "cc":
                    if not (0 <= w < 64 and (w & 15) <= 6):
                        ck.bad(pc, f"{what}: bad condition word {w}")
                    elif op.family == "xorcmp" and (w >> 4) != int(op.types[1]):
                        ck.bad(pc, f"{what}: condition on type {w >> 4}, the sources have "
                                   f"type {int(op.types[1])}")
                    always = (w & 15) == 0
                elif kind in ("y", "a"):
                    if not (always and op.name in ("jmp", "join", "assert")):
                        ck.cell(pc, f, w, kind == "y", what)
                elif kind == "k":
                    if not 0 <= w < 64:
                        ck.bad(pc, f"{what}: rotation count {w} outside 0..63")
                elif kind == "fn":
                    table = FN2 if op.family in ("addfn2", "subfn2") else FN1
                    if not 0 <= w < len(table):
                        ck.bad(pc, f"{what}: function id {w} does not exist")
                    elif op.types[0] not in table[w].types:
                        ck.bad(pc, f"{what}: function {table[w].name} does not exist for "
                                   f"this type")
                elif kind == "msg":
                    if not 0 <= w <= len(program.traces):
                        ck.bad(pc, f"{what}: no message entry {w}")
                    elif w:
                        check_trace(ck, pc, f, program.traces[w - 1])
                elif kind == "pc":
                    partner = "join" if op.name == "jmp" else "jmp"
                    if not f.begin < w < f.end:
                        ck.bad(pc, f"{what}: target {w} outside the body of {f.name}")
                    elif OPS[int(code[w, 0])].name != partner:
                        ck.bad(pc, f"{what}: target {w} is not a {partner}")
                elif kind == "callsite":
                    check_callsite(ck, pc, f, w)
                elif kind == "trace":
                    if not 0 <= w < len(program.traces):
                        ck.bad(pc, f"{what}: no trace entry {w}")
                    else:
                        check_trace(ck, pc, f, program.traces[w])
            if len(ck.problems) > 200:
                return ck.problems
    return ck.problems


def check_trace(ck, pc, f, tr) -> None:
    """A trace's (or an assert message's) operands: cells, or arrays where `lengths` says."""
    lengths = tr.lengths or [None] * len(tr.operands)
    if len(lengths) != len(tr.operands):
        ck.bad(pc, f"trace {tr.message!r}: {len(lengths)} lengths for "
                   f"{len(tr.operands)} operands")
        return
    for word, length in zip(tr.operands, lengths):
        if length is None:
            ck.cell(pc, f, word, False, "trace operand")
        else:
            ck.array(pc, f, word, length if length >= 0 else None, False, "trace array")


def check_callsite(ck, pc, f, k: int) -> None:
    program = ck.p
    if not 0 <= k < len(program.callsites):
        ck.bad(pc, f"call site {k} does not exist")
        return
    site = program.callsites[k]
    if not 0 <= site.func < len(program.functions):
        ck.bad(pc, f"call site {k}: function {site.func} does not exist")
        return
    g = program.functions[site.func]
    if len(site.args) != len(g.params):
        ck.bad(pc, f"call of {g.name}: {len(site.args)} arguments for {len(g.params)} parameters")
        return
    for i, (arg, par) in enumerate(zip(site.args, g.params)):
        what = f"argument {i} of {g.name}"
        if par.is_array != (arg.length is not None):
            ck.bad(pc, f"{what}: {'an array' if par.is_array else 'a cell'} is expected")
        elif arg.length is None:
            if (arg.word & 7) == MODE_N:
                ck.bad(pc, f"{what}: an array length cannot be passed by reference")
            else:
                # checked as a read: the call checks at run time that no constant is bound
                # to a written parameter (ReadOnlyError), at every level of calls
                ck.cell(pc, f, arg.word, False, what)
        elif arg.length < -1:
            ck.bad(pc, f"{what}: array length {arg.length}")
        else:
            ck.array(pc, f, arg.word, arg.length if arg.length >= 0 else None, False, what)
