"""Tangent activity in the native tangent modes (rvm/native/activity.py's `tangent` and `flow`
views, used by rvm/native/tangent.py): which tangents can be nonzero, and the generated code
that leaves the others out giving the interpreter's values, tangents, Hessian-vector products,
Hessians and steps, bit for bit."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_native_activity import MIXED, wrt_choices
from test_native_corners import bits as _bits
from test_reversibility import FIXEDS, INTS, programs

import rvm
from isa.derivatives import DIFFERENTIABLE
from isa.table import OPS
from rvm import native
from rvm.ad import native_tangent
from rvm.ad.engine import derivatives
from rvm.errors import RVMError
from rvm.native import tangent
from rvm.native.activity import Activity

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True, scope="module")
def _no_automatic_build():
    """The tests install the libraries they build; no background build may replace them."""
    old = native_tangent.NATIVE_AFTER
    native_tangent.NATIVE_AFTER = 1 << 30
    yield
    native_tangent.NATIVE_AFTER = old
OPS_BY_CODE = {op.code: op for op in OPS}


def operands(prog):
    """(function, pc, word) of every differentiable cell operand of the program's rows."""
    for fi, f in enumerate(prog.functions):
        for pc in range(f.begin, f.end + 1):
            op = OPS_BY_CODE[int(prog.code[pc][0])]
            for i, k in enumerate(op.operands):
                if k in ("y", "a") and op.operand_types[i] in DIFFERENTIABLE:
                    yield fi, pc, int(prog.code[pc][1 + i])


def test_the_flow_insensitive_view_holds_every_row_view():
    """flow=False (the sweep's tangents) is varied wherever the per-row view of main is, and
    more: MIXED's h and k are constants of n, varied in no row's view, but their expression
    temporaries hold values of x in other statements, so flow-insensitively they are."""
    prog = rvm.assemble(MIXED)
    x = next(g for g in prog.globals if g.name == "x")
    seeds = range(x.addr, x.addr + x.size)
    rows, anywhere = Activity(prog, seeds), Activity(prog, seeds, flow=False)
    ops = list(operands(prog))
    assert all(anywhere.active(*o) for o in ops if rows.active(*o))
    assert any(anywhere.active(*o) and not rows.active(*o) for o in ops)
    for name in ("h", "k"):
        g = next(g for g in prog.globals if g.name == name)
        assert not rows.ever(prog.main, g.addr << 3), name
        assert anywhere.ever(prog.main, g.addr << 3), name


def test_an_lns_scale_target_has_a_tangent_of_its_own():
    """y *= g multiplies y's tangent by g, and g * 0 is NaN for an infinite g: with
    `tangent`, the target of an lns scale rule is varied even from a constant factor."""
    prog = rvm.assemble("inout x: float = 1.0\ninout n: int = 3\ninout y: lns = 2.0\n"
                        "output z: float\n"
                        "func main() {\n    y *= lns(n)\n    z += x * 2.0\n}\n")
    x = next(g for g in prog.globals if g.name == "x")
    y = next(g for g in prog.globals if g.name == "y")
    plain, tangent = Activity(prog, [x.addr]), Activity(prog, [x.addr], tangent=True)
    assert not plain.ever(prog.main, y.addr << 3)
    assert tangent.ever(prog.main, y.addr << 3)


def test_frame_cells_are_the_varied_locals():
    """besselj_rec's frame: a[], q[], h, x and p carry derivatives of z; fact[], c, v and the
    int counters do not, so only those five have their duals cleared."""
    prog = rvm.assemble(ROOT / "programs" / "besselj_rec.rasm")
    z = next(g for g in prog.globals if g.name == "z")
    main = prog.functions[prog.main]
    for act in (Activity(prog, [z.addr], tangent=True), Activity(prog, None, tangent=True),
                Activity(prog, [z.addr], tangent=True, flow=False)):
        cells = act.frame_cells(prog.main)
        names = {loc.name for loc in main.locals
                 if any(loc.offset <= k < loc.offset + (loc.length or 1) for k in cells)}
        assert names == {"a", "q", "h", "x", "p"}, names


# ---- the generated code ------------------------------------------------------------------

def bits(v) -> list:
    """The bits of the doubles of v, a zero's sign aside: the native code may leave out a
    rule on zero tangents (a neg of a cell no seed varies), where the interpreter turns +0.0
    into -0.0 (docs/ad.md: the sign of a zero is the one freedom)."""
    return _bits(np.asarray(v, dtype=np.float64) + 0.0)


def _basis(prog, wrt):
    """The unit directions over the wrt cells, as {name: value} dicts."""
    cells = [(g, k) for g in prog.globals if g.name in wrt for k in range(g.length or 1)]
    out = []
    for g, k in cells:
        v = {h.name: (np.zeros(h.length) if h.length else 0.0)
             for h in prog.globals if h.name in wrt}
        if g.length:
            v[g.name][k] = 1.0
        else:
            v[g.name] = 1.0
        out.append(v)
    return out


def observe(prog, of, wrt, inputs, direction, lib, bails: bool = False):
    """Per input: the Hessian, gradient and value bits and the steps of `of` over wrt, H v
    along `direction` and along each unit direction, and the tangents and steps of a forward
    run along `direction`, from the interpreter (lib None) or from the tangent library lib
    (the scalar modes) installed on the machine; or the errors."""
    calls = [{"of": of, "wrt": wrt, "hessian": True}] + \
        [{"of": of, "wrt": wrt, "gradient": False, "direction": v}
         for v in [direction, *_basis(prog, wrt)]] + \
        [{"of": None, "wrt": (), "gradient": False, "tangents": direction}]
    out = []
    for inp in inputs:
        row: list = []
        for kw in calls:
            m = rvm.Machine(prog)
            if lib is not None:
                assert lib.install(m.core)
            try:
                # native=None with no automatic build: the calls run on lib, the scalar modes
                # (a Hessian column by column), and nothing replaces it
                d = derivatives(prog, inputs=dict(inp), machine=m,
                                native=None if lib is not None else False,
                                check_ancillas=False, **kw)
            except Exception as e:                      # noqa: BLE001 - compared as a value
                row.append(("error", type(e).__name__, str(e)))
                continue
            if "tangents" in kw:
                row.append(({k: bits(v) for k, v in d.tangent.items()}, d.steps,
                            {k: bits(v) for k, v in d.outputs.items()}))
            elif "direction" in kw:
                row.append(({k: bits(v) for k, v in d.hvp.items()}, bits(d.value), d.steps))
            else:
                row.append((bits(d.hessian), {k: bits(v) for k, v in d.gradient.items()},
                            bits(d.value), d.steps))
            if lib is not None and not bails:
                assert m.core.native_bails == 0, kw
        out.append(row)
    return out


def addrs(prog, names):
    return [a for g in prog.globals if g.name in names for a in range(g.addr, g.addr + g.size)]


def agree(prog, of, wrt, inputs, direction, seeds=None, bails: bool = False):
    """The native tangent modes (built for `seeds`: None, any global; "wrt", the wrt cells)
    give the interpreter's results (bails: the native code may hand calls back to it);
    returns them."""
    cells = addrs(prog, wrt) if seeds == "wrt" else seeds
    lib = native.compile_tangent(prog, cells, lanes=False)
    nat = observe(prog, of, wrt, inputs, direction, lib, bails)
    assert nat == observe(prog, of, wrt, inputs, direction, None)
    return nat


def direction_of(prog, wrt, seed=3):
    rng = np.random.default_rng(seed)
    return {g.name: (rng.standard_normal(g.length) if g.length else float(rng.standard_normal()))
            for g in prog.globals if g.name in wrt}


@pytest.mark.parametrize("seeds", [None, "wrt"])
def test_mixed_gives_the_interpreters_derivatives_for_every_wrt_choice(seeds):
    """MIXED: temporaries shared by constants and varied values, a swap, the value stack, a
    call bound to a varied and a constant cell, a loop."""
    prog = rvm.assemble(MIXED)
    for wrt in wrt_choices(prog):
        if "y" in wrt:
            continue
        agree(prog, "y", wrt, [{}, {"x": [1.0, 2.0, -0.5], "c": -1.5, "n": 7}],
              direction_of(prog, wrt), seeds)


TABLE = """
inout  x: float = 0.75
inout  w: float[3] = [0.5, -1.5, 2.0]
inout  n: int = 5
output y: float
const  tab: float[6] = [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125]

func main() {
    var f: float[8]                 ; a table of constants built from the counter
    var p: float                    ; the running power of x
    var c: float                    ; a float counter
    var k: int
    with {
        for i in 0..n {
            c += 1.0
            f[i + 1] += f[i] + c * tab[i]
        }
        p += x * x
    } do {
        for j in 0..len(w) {
            y += w[j] * f[j + 1] * p + tab[j] * exp(x * w[j]) / f[j + 2]
        }
        k += n
        k -= n
    }
}
"""


@pytest.mark.parametrize("seeds", [None, "wrt"])
def test_a_constant_table_and_counters_give_the_interpreters_derivatives(seeds):
    prog = rvm.assemble(TABLE)
    for wrt in (["x"], ["w"], ["x", "w"]):
        agree(prog, "y", wrt, [{}, {"x": -0.3, "n": 4}, {"n": 7}], direction_of(prog, wrt),
              seeds)


def test_a_constant_table_matches_finite_differences():
    prog = rvm.assemble(TABLE)
    lib = native.compile_tangent(prog)
    m = rvm.Machine(prog)
    assert lib.install(m.core)
    d = derivatives(prog, "y", ["x", "w"], machine=m, hessian=True, native=True)
    assert m.core.native_bails == 0
    x0 = np.array([0.75, 0.5, -1.5, 2.0])

    def grad(x):
        g = rvm.grad(prog, of="y", wrt=["x", "w"], inputs={"x": float(x[0]), "w": x[1:]})
        return np.concatenate([[g["x"]], g["w"]])

    eps = 1e-6
    fd = np.column_stack([(grad(x0 + eps * e) - grad(x0 - eps * e)) / (2 * eps)
                          for e in np.eye(4)])
    np.testing.assert_allclose(d.hessian, fd, rtol=1e-6, atol=1e-7)
    # and the lane modes (the full Hessian) agree with the scalar sweep column by column
    for j in range(4):
        v = {"x": float(np.eye(4)[j][0]), "w": np.eye(4)[j][1:]}
        h = derivatives(prog, "y", ["x", "w"], machine=m, gradient=False, direction=v,
                        native=True).hvp
        assert np.array_equal(np.concatenate([[h["x"]], h["w"]]), d.hessian[:, j])


class _Broken(Activity):
    """The analysis with one location taken out of every varied set."""
    drop: tuple = ()

    def _propagate(self, seeds):
        super()._propagate(seeds)
        d = {self.drop}
        if self._in is not None:
            self._in = [s - d for s in self._in]
        self._rest = self._rest - d
        self._shared_varied = self._shared_varied - d
        self.varied_anywhere = self.varied_anywhere - d


@pytest.mark.parametrize("local", ["h", "x", "q"])
def test_a_varied_cell_marked_constant_gives_another_hessian(monkeypatch, local):
    """The tests above would see a broken analysis: with one of besselj_rec's varied locals
    marked constant, the second derivative is no longer the interpreter's."""
    prog = rvm.assemble(ROOT / "programs" / "besselj_rec.rasm")
    main = prog.functions[prog.main]
    off = next(loc.offset for loc in main.locals if loc.name == local)
    good = observe(prog, "out", ["z"], [{}], {"z": 1.0},
                   native.compile_tangent(prog, lanes=False))
    assert good == observe(prog, "out", ["z"], [{}], {"z": 1.0}, None)
    monkeypatch.setattr(_Broken, "drop", ("L", prog.main, off))
    monkeypatch.setattr(tangent, "Activity", _Broken)
    bad = observe(prog, "out", ["z"], [{}], {"z": 1.0}, native.compile_tangent(prog, lanes=False))
    assert bad[0][0][0] != good[0][0][0]              # the Hessian
    assert bad[0][1][0] != good[0][1][0]              # H v
    assert bad[0][-1][0] != good[0][-1][0]            # the forward run's tangents


def test_the_generated_code_leaves_out_the_constants():
    """besselj_rec's tangent library: no rule reads or writes a dual of fact[] (the frame's
    cells 128 to 160, reached by index), c or v, and their duals are never cleared."""
    prog = rvm.assemble(ROOT / "programs" / "besselj_rec.rasm")
    src = tangent.generate(prog)[0]
    main = prog.functions[prog.main]
    rules = [ln for ln in src.splitlines() if "rvm_ad_" in ln or "rvm_dual" in ln]
    assert len(rules) > 20
    fact = next(loc for loc in main.locals if loc.name == "fact")
    names = [f"{arr}[fp + {fact.offset} + " for arr in ("T", "A", "AT")]
    for name in ("c", "v"):
        k = next(loc for loc in main.locals if loc.name == name).offset
        names += [f"{arr}[fp + {k}]" for arr in ("T", "A", "AT")] + \
            [f"{pre}L{k}" for pre in "tde"]
    for ln in rules:
        assert not [x for x in names if x in ln], ln
    # the entries clear two runs (a and q; h, x and p) of each dual array
    for arr in ("tan", "adj", "adjt"):
        clears = [ln for ln in src.splitlines() if f"memset(st->{arr} + " in ln]
        assert clears and all(ln.count("memset(") == 2 for ln in clears), clears


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(programs(floats=True), st.booleans(), st.data())
def test_random_programs_agree(src, floats, data):
    """Random programs of int, fixed (or float), lns and float updates (any data instruction
    of the table), branches, loops and with blocks: the Hessian, H v, each column by a scalar
    sweep and a forward run's tangents, for a drawn loss and wrt subset, from the defaults and
    from drawn inputs, by code built for any global or for the wrt cells alone."""
    for name, v in zip(FIXEDS, ("0.7", "-1.3", "0.4", "2.1")):       # nonzero derivatives
        src = src.replace(f"inout {name}: fixed\n", f"inout {name}: fixed = {v}\n")
    if floats:
        src = src.replace(".fixed 24", "").replace("fixed", "float")
    try:
        prog = rvm.assemble(src)
        tangent.generate(prog)
    except (RVMError, native.Unsupported):
        assume(False)
    ins = {n: data.draw(st.integers(-(1 << 20), 1 << 20)) for n in INTS}
    if floats:
        ins.update({n: data.draw(st.floats(-100, 100)) for n in FIXEDS})
    wrt = data.draw(st.lists(st.sampled_from(FIXEDS), min_size=1, max_size=3, unique=True))
    agree(prog, data.draw(st.sampled_from(FIXEDS)), wrt, [{}, ins],
          direction_of(prog, wrt, data.draw(st.integers(0, 99))),
          data.draw(st.sampled_from([None, "wrt"])), bails=True)
