"""Where the loss depends on a wrt value through a cell that carries no derivative.

Derivatives flow through float, fixed and lns cells only (isa/derivatives.py,
DIFFERENTIABLE).  A conversion `k += int(x)` of a differentiable x into an int cell is a
constant increment for AD: if k then feeds the loss, part of the loss's dependence on x is
invisible to the gradient, and the gradient comes back too small (often exactly 0) with
nothing to show for it.  This module finds such paths before a gradient is computed, so the
engine can warn (or, with strict=True, refuse): `lossy_paths(program, of, wrt)`.

The analysis is a static value-flow graph over the program, an over-approximation:
* a location is a global or constant cell, a local or parameter of a function, the value
  stack, or a whole array as an indexed operand sees it: one node for what indexed writes put
  into its cells, one for what indexed reads take out (so that a[0] and a[1], used directly,
  stay apart unless an indexed instruction mixes them);
* each data instruction adds an edge from each source (and each index) to each cell it writes,
  and between the cells a swap, rotation or controlled swap exchanges; push/pop go through the
  value stack; a call binds each argument to the callee's parameter, both ways;
* a derivative statement (`g += grad f(args) wrt x`, `d += jvp f(args) wrt x along v`) binds
  f's parameters as its call would (its nested runs run f), and its value depends on whatever
  f's output does, on the wrt cells and on the along vector: edges from f's output parameter,
  wrt and along into the target, so that a conversion inside f (or before it) is seen;
* comparisons (`y ^= x < z`) and branch conditions are control, not value: the loss's dependence
  through them is piecewise constant, and its derivative is zero where it exists.
A conversion edge from a differentiable cell into a non-differentiable one is reported when the
wrt values reach its source and its target reaches the loss.  Time and memory are linear in the
program's size; the result is cached per program.
"""
from __future__ import annotations

import bisect
import weakref
from collections import defaultdict, deque
from dataclasses import dataclass

from isa.derivatives import DERIVATIVE_FAMILIES, DIFFERENTIABLE
from isa.program import MODE_G, MODE_L, MODE_N, MODE_P, MODE_X, Program, operand_parts
from isa.table import CONTROL, DATA, OPS

Loc = tuple
_ARG_SCALAR = -2        # dlen of a derivative statement whose operands are cells


@dataclass(frozen=True)
class LossyPath:
    """A conversion through which the wrt values reach the loss without a derivative."""

    pc: int
    source: str          # the converted cell, as the program names it
    target: str          # the non-differentiable cell it is converted into
    target_type: str
    where: str           # file:line:col of the conversion, or "pc N"

    def describe(self, of: str, wrt: list[str]) -> str:
        names = ", ".join(wrt)
        return (f"the loss {of} depends on {names} through {self.target_type} cell "
                f"{self.target}, converted from {self.source} at {self.where}: derivatives do "
                f"not flow through {self.target_type} cells, so the gradient leaves this "
                f"dependence out (keep the value in a float or fixed cell to differentiate it)")


class _Graph:
    def __init__(self, prog: Program):
        self.prog = prog
        self.edges: dict[Loc, set[Loc]] = defaultdict(set)
        self.redges: dict[Loc, set[Loc]] = defaultdict(set)
        # the cells of static memory, by address: (addr, length, name)
        cells = sorted((int(g.addr), g.length, g.name)
                       for g in list(prog.globals) + list(prog.consts))
        self.static = cells
        self.static_addrs = [c[0] for c in cells]
        self.linked: set[Loc] = set()
        # each function's local arrays, by offset: (offsets, lengths), for bisection
        self.frame_arrays = []
        for f in prog.functions:
            runs = sorted((int(v.offset), v.length) for v in f.locals if v.length is not None)
            self.frame_arrays.append(([r[0] for r in runs], [r[1] for r in runs]))
        self.conversions: list[tuple[int, Loc, Loc, str]] = []
        self.found: dict[tuple, list[LossyPath]] = {}

    def edge(self, a: Loc, b: Loc) -> None:
        if a != b:
            self.edges[a].add(b)
            self.redges[b].add(a)

    def _element(self, kind: str, key: tuple, cell: Loc) -> Loc:
        """A cell of an array, linked to its array's nodes: an indexed write may land in it,
        an indexed read may take it."""
        if cell not in self.linked:
            self.linked.add(cell)
            self.edge((kind + "_in",) + key, cell)
            self.edge(cell, (kind + "_out",) + key)
        return cell

    def _static_array(self, addr: int) -> int | None:
        """The base address of the global or constant array holding addr (None: a scalar)."""
        i = bisect.bisect_right(self.static_addrs, addr) - 1
        if i < 0:
            return None
        base, length, _ = self.static[i]
        return base if length is not None and addr < base + length else None

    def _frame_array(self, fi: int, offset: int) -> int | None:
        """The offset of function fi's local array holding frame cell `offset` (None: none)."""
        offsets, lengths = self.frame_arrays[fi]
        i = bisect.bisect_right(offsets, offset) - 1
        return offsets[i] if i >= 0 and offset < offsets[i] + lengths[i] else None

    def static_loc(self, addr: int) -> Loc:
        base = self._static_array(addr)
        return ("g", addr) if base is None else self._element("ga", (base,), ("g", addr))

    def frame_loc(self, fi: int, offset: int) -> Loc:
        base = self._frame_array(fi, offset)
        return ("l", fi, offset) if base is None else \
            self._element("la", (fi, base), ("l", fi, offset))

    def array_loc(self, fi: int, word: int, write: bool) -> Loc:
        """The node of the whole array an array operand (indexed base, array argument) names:
        its "_in" node for a write, its "_out" node for a read (a parameter array is one
        node)."""
        mode, p = operand_parts(int(word))
        end = "_in" if write else "_out"
        if mode == MODE_G:
            base = self._static_array(p)
            return ("g", p) if base is None else ("ga" + end, base)
        if mode == MODE_L:
            base = self._frame_array(fi, p)
            return ("l", fi, p) if base is None else ("la" + end, fi, base)
        return ("p", fi, p)

    def cell_locs(self, fi: int, word: int, write: bool = False) -> list[Loc]:
        """The location an operand writes (`write`) or reads, then the locations its value
        also depends on (an indexed operand's index)."""
        mode, p = operand_parts(int(word))
        if mode == MODE_G:
            return [self.static_loc(p)]
        if mode == MODE_L:
            return [self.frame_loc(fi, p)]
        if mode == MODE_P:
            return [("p", fi, p)]
        if mode == MODE_X:
            x = self.prog.xtab[p]
            return [self.array_loc(fi, x.base, write)] + self.cell_locs(fi, x.index)
        assert mode == MODE_N
        return []                       # len(p): a constant of the call

    def build(self) -> None:
        prog, code = self.prog, self.prog.code.tolist()
        for fi, f in enumerate(prog.functions):
            for pc in range(f.begin, f.end + 1):
                row = code[pc]
                op = OPS[row[0]]
                words = row[1:]
                if CONTROL in op.flags:
                    if op.family in ("call", "uncall"):
                        self.bind(fi, words[0])
                    continue
                if op.family in DERIVATIVE_FAMILIES:
                    self.derivative(fi, op.family, words)
                    continue
                if DATA not in op.flags or op.family in ("alloc", "free"):
                    continue
                if op.family in ("push", "pop"):
                    push = op.family == "push"
                    cell = self.cell_locs(fi, words[0], write=not push)
                    if push:
                        self.edge(self.cell_locs(fi, words[0])[0], ("stack",))
                    else:
                        self.edge(("stack",), cell[0])
                    for index in cell[1:]:
                        self.edge(index, ("stack",) if push else cell[0])
                    continue
                targets = [self.cell_locs(fi, words[i], write=True) for i in op.targets]
                reads = [self.cell_locs(fi, words[i])[0] for i in op.targets]
                sources = [] if op.family == "xorcmp" else \
                    [self.cell_locs(fi, words[i]) for i in op.sources]
                for k, t in enumerate(targets):
                    for s in sources:
                        for loc in s:
                            self.edge(loc, t[0])
                    for index in t[1:]:
                        self.edge(index, t[0])
                    for j, other in enumerate(reads):     # swap, rot, cswap: they exchange
                        if j != k:
                            self.edge(other, t[0])
                if op.family in ("cvt", "uncvt") and len(op.types) == 2 and \
                        op.types[1] in DIFFERENTIABLE and op.types[0] not in DIFFERENTIABLE:
                    self.conversions.append((pc, sources[0][0], targets[0][0],
                                             op.types[0].name_))

    def bind(self, fi: int, site_index: int) -> int:
        """A call site's arguments to its callee's parameters, both ways; the callee."""
        site = self.prog.callsites[site_index]
        for j, arg in enumerate(site.args):
            q = ("p", site.func, j)
            if arg.length is not None:
                self.edge(self.array_loc(fi, arg.word, False), q)
                self.edge(q, self.array_loc(fi, arg.word, True))
            else:       # an indexed argument: read and written in place
                self.edge(self.cell_locs(fi, arg.word)[0], q)
                self.edge(q, self.cell_locs(fi, arg.word, True)[0])
        return int(site.func)

    def derivative(self, fi: int, family: str, words: list[int]) -> None:
        """A derivative statement (see the module docstring): row words (site, target, wrt,
        dlen) for grad, (site, target, wrt, along, dlen) for jvp."""
        callee = self.bind(fi, words[0])
        jvp = family in ("addjvp", "subjvp")
        length = words[4] if jvp else words[3]

        def operand(word: int, write: bool) -> list[Loc]:
            if length == _ARG_SCALAR:
                return self.cell_locs(fi, word, write)
            return [self.array_loc(fi, word, write)]
        target = self.cell_locs(fi, words[1], True) if jvp else operand(words[1], True)
        for loc in [("p", callee, 0)] + [x for w in words[2:4 if jvp else 3]
                                        for x in operand(w, False)] + target[1:]:
            self.edge(loc, target[0])

    def reach(self, start: list[Loc], edges: dict[Loc, set[Loc]]) -> set[Loc]:
        seen = set(start)
        todo = deque(start)
        while todo:
            for b in edges.get(todo.popleft(), ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    def name(self, loc: Loc) -> str:
        kind = loc[0]
        if kind in ("g", "ga_in", "ga_out"):
            i = bisect.bisect_right(self.static_addrs, loc[1]) - 1
            if i >= 0:
                base, length, name = self.static[i]
                if length is None or kind != "g":
                    return name
                return f"{name}[{loc[1] - base}]"
            return f"cell {loc[1]}"
        f = self.prog.functions[loc[1]]
        if kind == "p":
            return f"{f.params[loc[2]].name} (a parameter of {f.name})"
        for v in f.locals:
            if v.offset <= loc[2] < v.offset + (v.length or 1):
                text = v.name if v.length is None or kind != "l" else \
                    f"{v.name}[{loc[2] - v.offset}]"
                return f"{text} (a local of {f.name})"
        return f"frame cell {loc[2]} of {f.name}"

    def where(self, pc: int) -> str:
        prog = self.prog
        if prog.lines is not None and pc < len(prog.lines):
            fi, line, col = (int(v) for v in prog.lines[pc])
            if line > 0:
                name = prog.files[fi] if 0 <= fi < len(prog.files) else "?"
                return f"{name}:{line}:{col}"
        return f"pc {pc}"


def _global_locs(g: _Graph, name: str) -> list[Loc]:
    """The locations of a global (or one element, "a[3]") named as `of` and `wrt` name them."""
    base, _, index = name.partition("[")
    glob = g.prog.global_named(base)
    if glob is None:
        return []
    addr = int(glob.addr)
    if glob.length is None:
        return [("g", addr)]
    if index:
        return [g._element("ga", (addr,), ("g", addr + int(index.rstrip("]"))))]
    # every cell: what reaches the "_in" node reaches each cell, and each cell the "_out" node
    return [("ga_in", addr), ("ga_out", addr)] + [loc for loc in g.linked if loc[0] == "g" and
                                                  addr <= loc[1] < addr + glob.length]


_graphs: dict[int, _Graph] = {}


def _graph(prog: Program) -> _Graph:
    key = id(prog)
    g = _graphs.get(key)
    if g is None or g.prog is not prog:
        g = _Graph(prog)
        g.build()
        _graphs[key] = g
        weakref.finalize(prog, _graphs.pop, key, None)
    return g


def lossy_paths(prog: Program, of: str, wrt: list[str]) -> list[LossyPath]:
    """The conversions through which `wrt` reaches `of` without a derivative (see the module
    docstring), one per conversion instruction, in program order."""
    g = _graph(prog)
    if not g.conversions:
        return []
    key = (of, tuple(wrt))
    if key not in g.found:
        g.found[key] = _find(g, of, wrt)
    return g.found[key]


def _find(g: _Graph, of: str, wrt: list[str]) -> list[LossyPath]:
    ahead = g.reach([loc for w in wrt for loc in _global_locs(g, w)], g.edges)
    behind = g.reach(_global_locs(g, of), g.redges)
    return [LossyPath(pc, g.name(s), g.name(t), kind, g.where(pc))
            for pc, s, t, kind in g.conversions if s in ahead and t in behind]


__all__ = ["LossyPath", "lossy_paths"]
