"""Native tangent modes (rvm/native/tangent.py): rvm.jvp, rvm.hvp and rvm.hessian run as
compiled C give the interpreter's results bit for bit, agree with finite differences, and hand
anything the interpreter traps on back to it."""
from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import rvm
from isa.derivatives import DERIVATIVE_FAMILIES
from isa.types import FIXED, FLOAT
from rvm import native
from rvm.ad import native_tangent
from rvm.ad.engine import ReleasedTangentWarning, derivatives

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def _examples() -> list[tuple[str, str, list[str]]]:
    """(path, of, wrt) of every example program with a differentiable input and output: of
    is the first scalar output that is not an input (else the first scalar output), wrt
    every differentiable input."""
    out = []
    for path in sorted(ROOT.glob("programs/**/*.rasm")) + sorted(ROOT.glob("programs/**/*.ja")):
        if path.parent.name == "lib":               # included by others, no main
            continue
        prog = rvm.assemble(path)
        diff = [g for g in prog.globals if g.type in (FLOAT, FIXED)]
        wrt = [g.name for g in diff if g.is_input]
        outs = [g for g in diff if g.is_output and g.length is None]
        outs.sort(key=lambda g: g.is_input)
        if wrt and outs:
            out.append((str(path.relative_to(ROOT)), outs[0].name, wrt))
    return out


EXAMPLES = _examples()


def _run(prog, of, wrt, nat: bool, **kw):
    m = rvm.Machine(prog)
    return derivatives(prog, of, wrt, machine=m, native=nat, **kw), m


def test_the_examples_are_found():
    names = {Path(p).name for p, _, _ in EXAMPLES}
    assert {"besselj_rec.rasm", "petersen.rasm", "oscillator.rasm", "qr.rasm",
            "umm.rasm"} <= names


@pytest.mark.parametrize("path, of, wrt", EXAMPLES, ids=[p for p, _, _ in EXAMPLES])
def test_every_example_native_equals_interpreted(path, of, wrt):
    prog = rvm.assemble(ROOT / path)
    try:
        native.tangent.generate(prog)
    except native.Unsupported as e:     # `trace`, derivative statements: stay interpreted
        assert any(f"`{fam}" in str(e) for fam in ("trace", *DERIVATIVE_FAMILIES)), str(e)
        with pytest.raises(native.Unsupported):
            _run(prog, of, wrt, True, gradient=False, hessian=True)
        return
    n = sum(g.length or 1 for g in prog.globals if g.name in wrt)
    v = np.random.default_rng(3).standard_normal(n)
    direction, at = {}, 0
    for g in prog.globals:
        if g.name in wrt:
            direction[g.name] = v[at:at + (g.length or 1)] if g.length else float(v[at])
            at += g.length or 1
    res = {}
    for nat in (False, True):
        h, m = _run(prog, of, wrt, nat, gradient=False, hessian=True)
        d, _ = _run(prog, of, wrt, nat, gradient=False, direction=direction)
        t, mt = _run(prog, None, (), nat, gradient=False, tangents=direction)
        res[nat] = (h, d, t)
        if nat:
            assert m.core.native_tangent and mt.core.native_tangent
            assert m.core.native_bails == 0 and mt.core.native_bails == 0
    (hi, di, ti), (hn, dn, tn) = res[False], res[True]
    assert hi.hessian.shape == (n, n)
    assert np.array_equal(hi.hessian, hn.hessian)
    assert hi.value == hn.value and hi.steps == hn.steps
    for k in hi.gradient:
        assert np.array_equal(hi.gradient[k], hn.gradient[k])
        assert np.array_equal(di.hvp[k], dn.hvp[k])
    assert hi.drift == hn.drift
    assert ti.tangent.keys() == tn.tangent.keys()
    for k in ti.tangent:
        assert np.array_equal(ti.tangent[k], tn.tangent[k])
    assert ti.steps == tn.steps and ti.outputs.keys() == tn.outputs.keys()
    for k in ti.outputs:
        assert np.array_equal(ti.outputs[k], tn.outputs[k])


@pytest.mark.parametrize("name, of, wrt, inputs", [
    ("besselj_rec.rasm", "out", ["z"], {"z": 3.0}),
    ("besselj.rasm", "out", ["z"], {"z": 1.7}),
    ("norm.rasm", "res", ["x"], {"x": [0.5, -2.0, 1.25]}),
    ("umm.rasm", "loss", ["x", "theta"], {}),
    ("qr.rasm", "loss", ["A"], {}),
])
def test_native_hessian_and_jvp_match_finite_differences(name, of, wrt, inputs):
    prog = rvm.assemble(ROOT / "programs" / name)
    h = rvm.hessian(prog, of=of, wrt=wrt, inputs=inputs, native=True)
    cells = [(g.name, k) for g in prog.globals if g.name in wrt for k in range(g.length or 1)]
    m = rvm.Machine(prog)
    m.reset(inputs)                              # the start state: the point itself
    base = {w: np.asarray(m.read(w), dtype=float) for w in wrt}
    eps = 1e-5

    def shifted(j: int, e: float) -> dict:
        x = {k: v.copy() for k, v in base.items()}
        name_, k = cells[j]
        if x[name_].ndim:
            x[name_][k] += e
        else:
            x[name_] = x[name_] + e
        return {**inputs, **{k: (v if v.ndim else float(v)) for k, v in x.items()}}

    def flat_grad(x: dict) -> np.ndarray:
        g = rvm.grad(prog, of=of, wrt=wrt, inputs=x)
        return np.concatenate([np.atleast_1d(g[w]) for w in wrt])

    fd = np.column_stack([(flat_grad(shifted(j, eps)) - flat_grad(shifted(j, -eps))) / (2 * eps)
                          for j in range(len(cells))])
    assert np.allclose(h, fd, rtol=1e-5, atol=1e-6)
    # forward mode: d of / d cell 0 along e_0
    name0, k0 = cells[0]
    seed = {w: np.zeros_like(base[w]) if base[w].ndim else 0.0 for w in wrt}
    if base[name0].ndim:
        seed[name0][k0] = 1.0
    else:
        seed[name0] = 1.0
    t = rvm.jvp(prog, {**inputs}, seed, native=True)[of]

    def loss(x: dict) -> float:
        return float(rvm.run(prog, x).outputs[of])

    assert t == pytest.approx((loss(shifted(0, eps)) - loss(shifted(0, -eps))) / (2 * eps),
                              rel=1e-6, abs=1e-8)


def test_a_full_hessian_is_one_core_call_of_all_columns():
    prog = rvm.assemble(ROOT / "programs" / "petersen.rasm")
    m = rvm.Machine(prog)
    d = derivatives(prog, "loss", ["x"], machine=m, gradient=False, hessian=True, native=True)
    r = m._ad_runners[("loss", ("x",))]
    cells, def_addrs, def_words, wrt_addrs = r._fast_args()
    V = np.ascontiguousarray(np.eye(40)[[3, 17, 29]])
    H = np.zeros_like(V)
    assert m.core.gradient(r.of.addr, {}, cells, def_addrs, def_words, wrt_addrs, r.g, r.words,
                           V, H) == 0
    assert np.array_equal(H, d.hessian[:, [3, 17, 29]].T)
    # more rows than one lane run takes (LANES = 64): 64 at once, then 6, each row as a
    # single pass gives it
    V = np.ascontiguousarray(np.random.default_rng(7).standard_normal((70, 40)))
    H = np.zeros_like(V)
    assert m.core.gradient(r.of.addr, {}, cells, def_addrs, def_words, wrt_addrs, r.g, r.words,
                           V, H) == 0
    for k in (0, 33, 63, 64, 69):
        h = np.zeros(40)
        assert m.core.gradient(r.of.addr, {}, cells, def_addrs, def_words, wrt_addrs, r.g,
                               r.words, np.ascontiguousarray(V[k]), h) == 0
        assert np.array_equal(h, H[k])
    assert m.core.native_bails == 0
    with pytest.raises(ValueError, match="tangent and out_t"):
        m.core.gradient(r.of.addr, {}, cells, def_addrs, def_words, wrt_addrs, r.g, r.words,
                        V, np.zeros((2, 40)))


TRAPS = """\
inout x: float = 1.0
inout d: float = 2.0
output y: float
func main() {
    y += x * x / d
}
"""


def test_a_trap_goes_back_to_the_interpreter():
    prog = rvm.assemble(TRAPS)
    m = rvm.Machine(prog)
    ok = derivatives(prog, "y", ["x", "d"], machine=m, gradient=False, hessian=True, native=True)
    assert ok.hessian == pytest.approx(np.array([[1.0, -0.5], [-0.5, 0.25]]))
    assert m.core.native_bails == 0
    errors = []
    for nat in (False, True):
        m = rvm.Machine(prog)
        with pytest.raises(rvm.errors.RVMError) as e:
            derivatives(prog, "y", ["x", "d"], {"d": 0.0}, machine=m, gradient=False,
                        hessian=True, native=nat)
        errors.append((type(e.value), str(e.value)))
        if nat:
            assert m.core.native_bails > 0
    assert errors[0] == errors[1]


RELEASED = """\
inout x: float = 1.0
inout y: float = 1.0
output z: float
func main() {
    local t: float
    t += x
    z += t
    t -= y
}
"""


def test_a_released_tangent_is_reported_as_by_the_interpreter():
    prog = rvm.assemble(RELEASED)
    msgs = []
    for nat in (False, True):
        m = rvm.Machine(prog)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            d = derivatives(prog, None, (), machine=m, gradient=False, tangents={"x": 1.0},
                            native=nat)
        msgs.append([str(x.message) for x in w if x.category is ReleasedTangentWarning])
        assert d.released is not None and d.released["max"] == 1.0
        assert d.tangent["z"] == 1.0
    assert msgs[0] == msgs[1] and len(msgs[0]) == 1


def test_tangent_modes_compile_after_repeated_calls(monkeypatch):
    monkeypatch.setattr(native_tangent, "NATIVE_AFTER", 2)
    prog = rvm.assemble(ROOT / "programs" / "besselj_rec.rasm")
    m = rvm.Machine(prog)
    first = derivatives(prog, "out", ["z"], machine=m, gradient=False, hessian=True).hessian
    assert not m.core.native_tangent
    deadline = time.time() + 120
    while not m.core.native_tangent and time.time() < deadline:
        h = derivatives(prog, "out", ["z"], machine=m, gradient=False, hessian=True).hessian
        assert np.array_equal(h, first)
        time.sleep(0.05)
    assert m.core.native_tangent
    h = derivatives(prog, "out", ["z"], machine=m, gradient=False, hessian=True).hessian
    assert np.array_equal(h, first) and h[0, 0] == pytest.approx(-0.2750500730, abs=1e-9)
    off = rvm.Machine(prog)
    derivatives(prog, "out", ["z"], machine=off, gradient=False, hessian=True, native=False)
    assert not off.core.native_tangent


SAME_CELL_SOURCES = """\
inout x: float[3] = [0.7, -1.3, 2.1]
output out: float
global y: float

func main() {
    with {
        y += x[0] * x[0]
        y += x[1] - x[1]
        y += x[1] * x[2]
        y -= x[2] / x[0]
    } do {
        out += y * y
    }
}
"""


def test_lane_rules_with_one_cell_as_both_sources():
    """The lane modes update the target's tangents and each source's adjoint tangents in a
    loop per array: where both sources are one cell (x*x, x - x) its second loop must read
    what the first wrote, as the scalar rule's two updates do."""
    prog = rvm.assemble(SAME_CELL_SOURCES)
    out = {}
    for nat in (False, True):
        d, m = _run(prog, "out", ["x"], nat, gradient=True, hessian=True)
        if nat:
            assert m.core.native_tangent and m.core.native_bails == 0
        out[nat] = d
    assert np.array_equal(out[True].hessian, out[False].hessian)
    assert np.array_equal(out[True].gradient["x"], out[False].gradient["x"])
    x0, x1, x2 = 0.7, -1.3, 2.1
    # out = y^2 with y = x0^2 + x1 x2 - x2 / x0: H = 2 (grad y grad y^T + y Hess y)
    y = x0 * x0 + x1 * x2 - x2 / x0
    gy = np.array([2 * x0 + x2 / x0 ** 2, x2, x1 - 1 / x0])
    hy = np.array([[2 - 2 * x2 / x0 ** 3, 0, 1 / x0 ** 2], [0, 0, 1], [1 / x0 ** 2, 1, 0]])
    np.testing.assert_allclose(out[True].hessian, 2 * (np.outer(gy, gy) + y * hy), rtol=1e-12)


def test_one_column_calls_build_the_scalar_modes_alone(tmp_path, monkeypatch):
    """rvm.jvp, rvm.hvp and a Hessian over one cell build the scalar modes only (the lane
    modes take most of the compile time); a Hessian of more columns builds the full library
    and installs it in place of the scalar one; results stay the interpreter's."""
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    prog = rvm.assemble(TRAPS)
    m = rvm.Machine(prog)
    ref = derivatives(prog, "y", ["x", "d"], machine=rvm.Machine(prog), hessian=True,
                      direction={"x": 0.5, "d": -1.0}, native=False)
    d = derivatives(prog, "y", ["x", "d"], machine=m, gradient=False,
                    direction={"x": 0.5, "d": -1.0}, native=True)
    assert m.core.native_tangent and not m.core.native_tangent_lanes
    assert len(list(tmp_path.glob("*.so"))) == 1
    t = derivatives(prog, None, (), machine=m, gradient=False, tangents={"x": 1.0}, native=True)
    assert t.tangent["y"] == 2.0 / 2.0 and len(list(tmp_path.glob("*.so"))) == 1
    h = derivatives(prog, "y", ["x", "d"], machine=m, hessian=True,
                    direction={"x": 0.5, "d": -1.0}, native=True)
    assert m.core.native_tangent_lanes and len(list(tmp_path.glob("*.so"))) == 2
    assert np.array_equal(h.hessian, ref.hessian) and np.array_equal(h.hvp["x"], ref.hvp["x"])
    assert np.array_equal(d.hvp["d"], ref.hvp["d"]) and m.core.native_bails == 0
    # a one-column call keeps the full library installed; nothing more is built
    derivatives(prog, "y", ["x", "d"], machine=m, gradient=False, direction={"x": 1.0, "d": 0.0},
                native=True)
    assert m.core.native_tangent_lanes
    other = rvm.Machine(prog)
    derivatives(prog, None, (), machine=other, gradient=False, tangents={"x": 1.0}, native=True)
    assert other.core.native_tangent and len(list(tmp_path.glob("*.so"))) == 2


def test_a_built_full_library_serves_one_column_calls(tmp_path, monkeypatch):
    """Once the full library is there, a one-column call takes it instead of building the
    scalar modes again."""
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    prog = rvm.assemble(TRAPS)
    m = rvm.Machine(prog)
    derivatives(prog, "y", ["x", "d"], machine=m, gradient=False, hessian=True, native=True)
    assert m.core.native_tangent_lanes and len(list(tmp_path.glob("*.so"))) == 1
    other = rvm.Machine(prog)
    t = derivatives(prog, None, (), machine=other, gradient=False, tangents={"d": 1.0},
                    native=True)
    assert other.core.native_tangent_lanes and len(list(tmp_path.glob("*.so"))) == 1
    assert t.tangent["y"] == -0.25 and other.core.native_bails == 0


IROT_ALL_WRT = """\
inout x0: float = 0.3
inout x1: float = -1.2
inout x2: float = 0.7
output y: float
func main() {
    irot x0, x1, x2
    y += x0 * x1
    y += x1 * x2
    y += x2 * x0
}
"""


def test_lane_modes_of_a_rotation_keep_out_fused_multiply_adds(tmp_path, monkeypatch):
    """The lane modes, built for this CPU, give the interpreter's Hessian through irot bit for
    bit: gcc's straight-line vectorizer had paired the rotation's c*x - s*y and s*x + c*y into
    one fused vfmaddsub despite -ffp-contract=off (2 ulps off in H[0,2])."""
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    prog = rvm.assemble(IROT_ALL_WRT)
    wrt = ["x0", "x1", "x2"]
    ref, _ = _run(prog, "y", wrt, False, hessian=True)
    d, m = _run(prog, "y", wrt, True, hessian=True)
    assert m.core.native_tangent_lanes and m.core.native_bails == 0
    assert np.array_equal(d.hessian.view(np.int64), ref.hessian.view(np.int64))
