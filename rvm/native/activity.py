"""Activity analysis for the generated adjoint sweep (rvm/native/codegen.py).

A cell is *varied* when its value can depend on the start value of a wrt cell: a wrt cell
itself, or any cell an instruction with a differentiation rule writes from a varied source
(isa/derivatives.py: the sources an update's partials name, a swap's or rotation's other
cells, the value stack for push and pop).  The sweep's adjoint rules move adjoints only
against those edges (xbar += d * ybar for an edge y <- x; a swap exchanges, a move moves), so
the adjoint of a cell that is not varied flows only into cells that are not varied, and no
varied cell's adjoint ever reads one.  Skipping every adjoint update into a cell that is not
varied therefore leaves the adjoint of every varied cell, the wrt cells' among them, bit for
bit what it was: the generated sweep does less work for the same gradient.  (The cells it
skips are the ones whose derivative nothing asks for: in GradBench's llsq the sample points
t_i and their powers, which depend only on n.)

The analysis:
* In `main`, which runs once from its first row to its last, it follows the control flow (a
  forward may-analysis over the rows, to a fixed point around loops): whether a cell is varied
  is known per row, so a temporary that holds a varied value in one statement and a constant
  in another (expression temporaries share frame cells) is varied only where it is.  A
  scope row (alloc, free) or a push makes its cell the constant zero again; a pop gives its
  cell the stack's state; a swap exchanges the two cells' states.
* In the functions main calls or uncalls it is flow-insensitive: a cell is varied there when
  any row of theirs can make it so from the cells varied at any of main's call sites.
* Locations: a global array, a constant array, a local array and the value stack are each
  one location (only ever added to); an indexed operand reaches its whole array; a parameter
  is every location some call site may bind to it (through the callers' parameters, to a
  fixed point); a function's frame cell is one location over all its activations.
* The sweep keeps every rule that cuts an adjoint's chain (a scope row's clearing, a push's or
  pop's move) on any cell varied anywhere, so that no adjoint carries a stale value from one
  use of a cell to another.

The seeds are the wrt cells, when the caller knows them (`Activity(program, wrt_addrs)`), else
every differentiable global (any of which a caller may name as wrt), which leaves out only
locals, temporaries and constants: safe for any wrt.

The tangent modes (rvm/native/tangent.py) ask two more questions of the same flow:
* `tangent=True`: can a cell's tangent be anything but zero?  The rules add a tangent term only
  where its factor is not zero (rvm/_adrules.h, rvm/_dual.h), so a cell that is not varied
  keeps a zero tangent, with one exception: an lns scale rule multiplies the target's tangent
  by the factor g, and g * 0 is NaN when g is infinite (an lns value beyond the doubles).  So
  with `tangent`, every scale rule's target is varied (from a location that always is).
* `flow=False`: the same flow without the per-row view of main, as for the other functions.
  The adjoint sweep with tangents uncomputes the tangents (each row's tangent update is
  undone), and in floating point an undone update can leave a residue: a cell the forward run
  proves zero at a row can hold a tiny tangent there during the sweep, and pass it to cells
  that are never varied in the forward run.  The sweep's tangents are therefore those of
  every cell some row can make varied, anywhere (a closure over every row's flow, kills
  ignored).
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable

from isa.derivatives import DIFFERENTIABLE, PF_FN1, PF_FN2, PF_NONE, PF_ONE, RULES, pf_id
from isa.functions import FN1, FN2
from isa.program import MODE_G, MODE_L, MODE_N, MODE_P, MODE_X
from isa.table import OPS

_STACK = ("stack",)
_NONFINITE = ("nonfinite",)     # (tangent) a scale rule's g * 0: always varied
_BY_CODE = {op.code: op for op in OPS}


class Activity:
    """Which operands of a program can carry a derivative of the seeds (see the module)."""

    def __init__(self, program, seeds: Iterable[int] | None = None, *, tangent: bool = False,
                 flow: bool = True):
        self.p = program
        self.tangent, self.flow = tangent, flow
        # the static cells' locations: a global (by its index) or a constant, by address range
        spans = [(g.addr, g.size, ("G", i)) for i, g in enumerate(program.globals)]
        spans += [(c.addr, 1 if c.length is None else max(c.length, 1), ("C", i))
                  for i, c in enumerate(program.consts)]
        spans.sort()
        self._starts = [s[0] for s in spans]
        self._spans = spans
        # a local array is one location: each frame offset -> the base of the local holding it
        self._lbase: list[dict[int, int]] = []
        for f in program.functions:
            base: dict[int, int] = {}
            for loc in f.locals:
                for k in range(loc.offset, loc.offset + (loc.length or 1)):
                    base[k] = loc.offset
            self._lbase.append(base)
        self._params: list[list[frozenset]] = [[frozenset()] * len(f.params)
                                               for f in program.functions]
        self._bind_params()
        seed_locs: set[tuple]
        if seeds is None:
            seed_locs = {("G", i) for i, g in enumerate(program.globals)
                         if g.type in DIFFERENTIABLE}
        else:
            seed_locs = {self._static(a) for a in seeds}
        if tangent:
            seed_locs.add(_NONFINITE)
        self._cache: dict[tuple[int, int, int], bool] = {}
        self._propagate(seed_locs)

    # -- locations -------------------------------------------------------------------------
    def _static(self, addr: int) -> tuple:
        k = bisect.bisect_right(self._starts, addr) - 1
        if k >= 0:
            a, n, key = self._spans[k]
            if a <= addr < a + n:
                return key
        return ("S", addr)

    def _statics(self, lo: int, n: int) -> frozenset:
        """The locations of the static cells [lo, lo + n)."""
        out = set()
        addr = lo
        while addr < lo + max(n, 1):
            key = self._static(addr)
            out.add(key)
            k = bisect.bisect_right(self._starts, addr) - 1
            a, size, _ = self._spans[k] if k >= 0 else (addr, 1, None)
            addr = a + size if key[0] != "S" else addr + 1
        return frozenset(out)

    def _local(self, fi: int, off: int) -> tuple:
        return ("L", fi, self._lbase[fi].get(off, off))

    def _locals(self, fi: int, off: int, n: int) -> frozenset:
        return frozenset(self._local(fi, k) for k in range(off, off + max(n, 1)))

    def locs(self, fi: int, w: int) -> frozenset:
        """The locations operand word w of function fi may name."""
        m, v = w & 7, w >> 3
        if m == MODE_G:
            return frozenset((self._static(v),))
        if m == MODE_L:
            return frozenset((self._local(fi, v),))
        if m == MODE_P:
            return self._params[fi][v]
        if m == MODE_X:
            x = self.p.xtab[v]
            bm, bp = x.base & 7, x.base >> 3
            if bm == MODE_G:
                return self._statics(bp, x.length)
            if bm == MODE_L:
                return self._locals(fi, bp, x.length)
            if bm == MODE_P:
                return self._params[fi][bp]
            return frozenset()
        assert m == MODE_N                  # a parameter's length: no cell
        return frozenset()

    def _arg_locs(self, fi: int, arg) -> frozenset:
        if arg.length is None:
            return self.locs(fi, arg.word)
        m, q = arg.word & 7, arg.word >> 3
        if m == MODE_G:
            return self._statics(q, arg.length)
        if m == MODE_L:
            return self._locals(fi, q, arg.length)
        if m == MODE_P:
            return self._params[fi][q]
        return frozenset()

    def _bind_params(self) -> None:
        """Each parameter's locations: the union over the call sites, to a fixed point."""
        sites = []
        for fi, f in enumerate(self.p.functions):
            for row in self.p.code[f.begin:f.end + 1]:
                if _BY_CODE[int(row[0])].family in ("call", "uncall"):
                    sites.append((fi, self.p.callsites[int(row[1])]))
        changed = True
        while changed:
            changed = False
            for fi, site in sites:
                params = self._params[site.func]
                for i, arg in enumerate(site.args[:len(params)]):
                    new = params[i] | self._arg_locs(fi, arg)
                    if new != params[i]:
                        params[i] = new
                        changed = True

    # -- the flow ----------------------------------------------------------------------------
    def edges(self, fi: int, row) -> list[tuple[frozenset, frozenset]]:
        """(targets, sources) of the value flow the row's differentiation rule follows."""
        op = _BY_CODE[int(row[0])]
        rule = RULES[op.name]
        if rule is None:
            return []
        cells = [self.locs(fi, int(row[1 + i])) for i, k in enumerate(op.operands)
                 if k in ("y", "a")]
        if rule.kind == "update":
            pf = pf_id(op)
            if pf == PF_NONE:
                return []
            if pf >= PF_FN2:
                if not FN2[int(row[4])].differentiable:
                    return []
                return [(cells[0], cells[1] | cells[2])]
            if pf >= PF_FN1:
                if not FN1[int(row[3])].differentiable:
                    return []
                return [(cells[0], cells[1])]
            if pf == PF_ONE:
                return [(cells[0], cells[1])]
            return [(cells[0], cells[1] | cells[2])]
        if rule.kind == "scale":
            nf = frozenset((_NONFINITE,)) if self.tangent else frozenset()
            return [(cells[0], (cells[1] if rule.args else frozenset()) | nf)] \
                if rule.args or self.tangent else []
        if rule.kind == "swap":
            return [(cells[0] | cells[1], cells[0] | cells[1])]
        if rule.kind == "rot":
            return [(cells[0] | cells[1], cells[0] | cells[1] | cells[2])]
        if rule.kind == "move":
            stack = frozenset((_STACK,))
            return [(stack, cells[0])] if op.family == "push" else [(cells[0], stack)]
        return []                           # neg, scope: no flow between cells

    def _edges_of(self, fis) -> dict[tuple, list[frozenset]]:
        """source location -> the target sets of its edges, over the rows of functions fis."""
        by_source: dict[tuple, list[frozenset]] = {}
        for fi in fis:
            f = self.p.functions[fi]
            for row in self.p.code[f.begin:f.end + 1]:
                for targets, sources in self.edges(fi, row):
                    for src in sources:
                        by_source.setdefault(src, []).append(targets)
        return by_source

    @staticmethod
    def _closure(start: set, by_source: dict[tuple, list[frozenset]]) -> set:
        out = set(start)
        todo = list(start)
        while todo:
            for targets in by_source.get(todo.pop(), ()):
                for t in targets:
                    if t not in out:
                        out.add(t)
                        todo.append(t)
        return out

    def _scalar(self, locs: frozenset) -> tuple | None:
        """The one scalar location of an operand (a strong update may replace its state), or
        None (an array, the stack, a parameter that may be bound to several cells)."""
        if len(locs) != 1:
            return None
        (key,) = locs
        if key[0] == "G":
            return key if self.p.globals[key[1]].length is None else None
        if key[0] == "L":
            f = self.p.functions[key[1]]
            arr = any(loc.offset == key[2] and loc.length is not None for loc in f.locals)
            return None if arr else key
        return None

    def _propagate(self, seeds: set) -> None:
        """The varied locations: per row of main (self._in), in the other functions (self._rest)
        and anywhere (self.varied_anywhere)."""
        p = self.p
        main = p.main
        others = [fi for fi in range(len(p.functions)) if fi != main]
        rest_edges = self._edges_of(others)
        f = p.functions[main]
        called_main = any(p.callsites[int(row[1])].func == main
                          for g in p.functions for row in p.code[g.begin:g.end + 1]
                          if _BY_CODE[int(row[0])].family in ("call", "uncall"))
        if called_main or not self.flow:       # main runs more than once: flow-insensitive
            every = self._closure(seeds, self._edges_of(range(len(p.functions))))
            self._in = None
            self._rest = self._shared_varied = frozenset(every)
            self.varied_anywhere = frozenset(every)
            return
        n = f.end - f.begin + 1
        ins: list[frozenset | None] = [None] * n
        ins[1] = frozenset(seeds)                  # the row after `begin`
        rest: set = set()
        todo = [f.begin + 1]
        while todo:
            pc = todo.pop()
            state = set(ins[pc - f.begin])
            row = p.code[pc]
            op = _BY_CODE[int(row[0])]
            fam = op.family
            succ = [pc + 1]
            if fam == "end":
                succ = []
            elif fam == "jmp":
                t = int(row[4])
                succ = [t] if (int(row[1]) & 15) == 0 else [t, pc + 1]
            elif fam in ("call", "uncall"):
                after = self._closure(state, rest_edges)
                rest |= after
                state = after
            elif fam in ("alloc", "free"):
                key = self._scalar(self.locs(main, int(row[1])))
                if key is not None:
                    state.discard(key)
            elif fam in ("push", "pop"):
                cell = self.locs(main, int(row[1]))
                key = self._scalar(cell)
                if fam == "push":
                    if not state.isdisjoint(cell):
                        state.add(_STACK)
                    if key is not None:
                        state.discard(key)
                else:
                    if key is not None:
                        state.discard(key)
                    if _STACK in state:
                        state |= cell
            elif getattr(RULES[op.name], "kind", None) == "swap":
                a, b = (self.locs(main, int(row[1 + i])) for i in range(2))
                ka, kb = self._scalar(a), self._scalar(b)
                va, vb = not state.isdisjoint(a), not state.isdisjoint(b)
                if ka is not None and kb is not None:
                    state.discard(ka)
                    state.discard(kb)
                if va:
                    state |= b
                if vb:
                    state |= a
            else:
                for targets, sources in self.edges(main, row):
                    if not state.isdisjoint(sources):
                        state |= targets
            out = frozenset(state)
            for q in succ:
                k = q - f.begin
                if not 0 < k < n:
                    continue
                old = ins[k]
                new = out if old is None else old | out
                if new != old:
                    ins[k] = new
                    todo.append(q)
        self._in = [s or frozenset() for s in ins]
        self._rest = frozenset(rest)
        # the locations a row of another function names: flow-insensitive in main too (a
        # callee's rows are, and the two must agree on every adjoint they share)
        shared: set = set()
        for fi in others:
            g = p.functions[fi]
            for row in p.code[g.begin:g.end + 1]:
                op = _BY_CODE[int(row[0])]
                for i, k in enumerate(op.operands):
                    if k in ("y", "a"):
                        shared |= self.locs(fi, int(row[1 + i]))
        self._shared_varied = frozenset(shared) & self._rest
        anywhere = set(rest)
        for s_ in self._in:
            anywhere |= s_
        self.varied_anywhere = frozenset(anywhere)

    def active(self, fi: int, pc: int, w: int) -> bool:
        """Can operand word w of row pc (of function fi) name a cell whose value there may
        depend on a seed?  (In main: before the row runs forward.)"""
        key = (fi, pc, w)
        got = self._cache.get(key)
        if got is None:
            locs = self.locs(fi, w)
            if fi == self.p.main and self._in is not None:
                state = self._in[pc - self.p.functions[fi].begin]
                got = not (state.isdisjoint(locs) and self._shared_varied.isdisjoint(locs))
            else:
                got = not self._rest.isdisjoint(locs)
            self._cache[key] = got
        return got

    def frame_cells(self, fi: int) -> list[int]:
        """The offsets in function fi's frame of the cells varied anywhere: the only frame
        cells whose duals the generated code reads (the others' are written, if at all, to a
        sink)."""
        f = self.p.functions[fi]
        return [k for k in range(f.frame_size) if self._local(fi, k) in self.varied_anywhere]

    def ever(self, fi: int, w: int) -> bool:
        """Can operand word w of function fi name a cell varied anywhere (the cells whose
        scope and move rules the sweep keeps)?"""
        return not self.varied_anywhere.isdisjoint(self.locs(fi, w))
