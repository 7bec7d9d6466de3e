"""The NiLang paper's examples in programs/: values against references, gradients, round trips.

besselj.rasm, besselj_rec.rasm, besselj_fixed.rasm, norm.rasm, umm.rasm, qr.rasm, petersen.rasm, petersen3.rasm,
lns_exp.rasm
"""
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm.ad import derivatives

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "programs"
sys.path.insert(0, str(ROOT / "benchmarks"))
import gen_programs  # noqa: E402

J2_3 = 0.486091260585891            # J_2(3)
DJ2_3 = 0.0149981181353424          # J_2'(3)
D2J2_3 = -0.275050073037276         # J_2''(3)


def load(name):
    return rvm.assemble(PROGRAMS / name)


def run(prog, inputs, of):
    return rvm.run(prog, inputs).outputs[of]


def fd(prog, of, inputs, name, h=1e-6):
    """Central finite differences of output `of` over every cell of input `name`."""
    base = np.array(inputs[name], dtype=float)
    g = np.zeros(base.shape)
    for i in np.ndindex(base.shape):
        vals = []
        for s in (h, -h):
            x = base.copy()
            x[i] += s
            vals.append(run(prog, {**inputs, name: x if x.shape else float(x)}, of))
        g[i] = (vals[0] - vals[1]) / (2 * h)
    return g


def assert_roundtrip(prog, inputs, exact):
    """Forward then backward gives the inputs back: bit for bit, or within float rounding."""
    rt = rvm.roundtrip(prog, inputs)
    if exact:
        assert rt.exact, rt.drift
    else:
        assert rt.exact_broken == [] and all(d < 1e-12 for d in rt.drift.values()), rt.drift
    return rt.outputs


# ---- norm.rasm ----------------------------------------------------------------------------

def test_norm_value_and_roundtrip():
    prog = load("norm.rasm")
    out = assert_roundtrip(prog, {}, exact=True)
    assert out["res"] == pytest.approx(np.sqrt(14), rel=1e-15)
    assert rvm.run(prog).garbage == []


def test_norm_gradient():
    x = np.array([1.0, 2.0, 3.0])
    d = derivatives(load("norm.rasm"), of="res", wrt=["x"], inputs={"x": x}, strict=True)
    np.testing.assert_allclose(d.gradient["x"], x / np.sqrt(14), rtol=1e-15)
    assert d.drift == {}
    h = rvm.hessian(load("norm.rasm"), of="res", wrt=["x"], inputs={"x": x})
    np.testing.assert_allclose(h, (np.eye(3) - np.outer(x, x) / 14) / np.sqrt(14), atol=1e-15)


# ---- besselj.rasm (float) -----------------------------------------------------------------

@pytest.mark.parametrize("z, nu, ref", [(3.0, 2, J2_3), (1.5, 0, 0.5118276717359181),
                                        (0.5, 1, 0.2422684576748739),
                                        (5.0, 2, 0.0465651162777522), (0.0, 0, 1.0)])
def test_besselj_value(z, nu, ref):
    res = rvm.run(load("besselj.rasm"), {"z": z, "nu": nu})
    assert res.outputs["out"] == pytest.approx(ref, abs=1e-15)
    assert res.garbage == []


def test_besselj_negative_z_and_term_limit():
    prog = load("besselj.rasm")
    assert run(prog, {"z": -2.0, "nu": 3, "nterms": 17}, "out") == pytest.approx(
        -0.1289432494744021, abs=1e-16)
    with pytest.raises(rvm.errors.AssertionTrap):
        rvm.run(prog, {"nu": 3, "nterms": 18})          # 21! does not fit int64


def test_besselj_roundtrip():
    assert_roundtrip(load("besselj.rasm"), {}, exact=False)


def test_besselj_derivatives():
    prog = load("besselj.rasm")
    g = rvm.grad(prog, of="out", wrt=["z"], inputs={"z": 3.0})
    assert g["z"] == pytest.approx(DJ2_3, abs=1e-7)
    assert g["z"] == pytest.approx(DJ2_3, abs=1e-14)                # in fact to rounding
    h = rvm.hessian(prog, of="out", wrt=["z"], inputs={"z": 3.0})
    assert h.shape == (1, 1) and round(h[0, 0], 5) == -0.27505
    assert h[0, 0] == pytest.approx(D2J2_3, abs=1e-13)
    assert fd(prog, "out", {"z": 3.0}, "z", h=1e-5) == pytest.approx(g["z"], abs=1e-9)


@pytest.mark.parametrize("z, nu", [(1.0, 0), (2.5, 1), (4.0, 3), (-2.0, 3)])
def test_besselj_gradient_matches_finite_differences(z, nu):
    prog = load("besselj.rasm")
    inputs = {"z": z, "nu": nu, "nterms": 16}
    d = derivatives(prog, of="out", wrt=["z"], inputs=inputs, hessian=True, strict=True)
    assert d.gradient["z"] == pytest.approx(fd(prog, "out", inputs, "z", h=1e-5), abs=1e-9)
    gp, gm = (rvm.grad(prog, of="out", wrt="z", inputs={**inputs, "z": z + s})["z"]
              for s in (1e-5, -1e-5))
    assert d.hessian[0, 0] == pytest.approx((gp - gm) / 2e-5, abs=1e-8)
    assert set(d.drift) <= {"z"} and d.drift.get("z", 0) < 1e-15


@pytest.mark.parametrize("nu, want", [(0, 0.0), (1, 0.5), (2, 0.0)])
def test_besselj_gradient_at_zero(nu, want):
    assert rvm.grad(load("besselj.rasm"), of="out", wrt="z", inputs={"z": 0.0, "nu": nu})["z"] \
        == want


# ---- besselj_rec.rasm (float, the recurrence) -------------------------------------------

def besselj_recurrence(z, nu, nterms):
    """The peers' recurrence (benchmarks/peers/t2_bessel.py) in Python floats."""
    h = 0.5 * z
    a = h ** nu / math.factorial(nu)
    s = a
    for k in range(1, nterms):
        a = a * h * h * (-1.0 / (k * (k + nu)))
        s += a
    return s


@pytest.mark.parametrize("z, nu, ref", [(3.0, 2, 0.48609126058589108),
                                        (1.5, 0, 0.5118276717359181),
                                        (0.5, 1, 0.2422684576748739),
                                        (5.0, 2, 0.0465651162777522), (0.0, 0, 1.0)])
def test_besselj_rec_value(z, nu, ref):
    res = rvm.run(load("besselj_rec.rasm"), {"z": z, "nu": nu})
    assert res.outputs["out"] == pytest.approx(ref, abs=1e-15)
    assert res.garbage == []


@pytest.mark.parametrize("nu", [0, 1, 3, 7])
def test_besselj_rec_matches_the_recurrence(nu):
    prog = load("besselj_rec.rasm")
    for nterms in (1, 2, 3, 4, 17, 18, 31, 64):
        for z in (3.0, -2.0, 0.7, 0.0):
            out = run(prog, {"z": z, "nu": nu, "nterms": nterms}, "out")
            assert out == pytest.approx(besselj_recurrence(z, nu, nterms), rel=1e-14, abs=1e-300)
    assert run(prog, {"z": 3.0, "nu": 2, "nterms": 18}, "out") == \
        run(load("besselj.rasm"), {"z": 3.0, "nu": 2, "nterms": 18}, "out")


def test_besselj_rec_limits():
    prog = load("besselj_rec.rasm")
    assert run(prog, {"z": -2.0, "nu": 3, "nterms": 17}, "out") == pytest.approx(
        -0.1289432494744021, abs=1e-16)
    assert run(prog, {"nu": 32, "nterms": 64}, "out") == pytest.approx(    # the largest
        besselj_recurrence(3.0, 32, 64), rel=1e-14)
    for bad in ({"nterms": 0}, {"nterms": 65}, {"nu": -1}, {"nu": 33}):
        with pytest.raises(rvm.errors.AssertionTrap):
            rvm.run(prog, bad)


def test_besselj_rec_roundtrip_and_clean_frame():
    prog = load("besselj_rec.rasm")
    rt = rvm.roundtrip(prog, {})
    assert rt.exact_broken == [] and rt.drift == {}          # in fact bit for bit here
    m = rvm.Machine(prog)
    m.reset({})
    m.run()
    steps = m.stats["steps"]
    assert steps == 505                                     # docs/examples.md
    n = m.stats["peak_frame_cells"]
    for direction in (+1, -1):                              # one step before main returns
        if direction > 0:
            m.reset({})
        else:
            m.reset_end(m.outputs())
        assert m.step(steps // 2, direction) == steps // 2
        (frame,) = m.frames()
        assert np.any(m.mem[frame["fp"]:frame["fp"] + n] != 0)   # mid-run: terms computed
        assert m.step(steps - 1 - steps // 2, direction) == steps - 1 - steps // 2
        (frame,) = m.frames()
        assert m.format_instruction(m.pc) == ("end main" if direction > 0 else "begin main")
        assert not np.any(m.mem[frame["fp"]:frame["fp"] + n])    # every frame cell is +0.0
    assert m.read("z") == 3.0 and m.read("out") == 0.0


def test_besselj_rec_derivatives():
    prog = load("besselj_rec.rasm")
    g = rvm.grad(prog, of="out", wrt=["z"], inputs={"z": 3.0})
    assert g["z"] == pytest.approx(0.014998118135342464, abs=1e-15)
    h = rvm.hessian(prog, of="out", wrt=["z"], inputs={"z": 3.0})
    assert h.shape == (1, 1)
    assert h[0, 0] == pytest.approx(-0.2750500730372758, abs=1e-13)
    assert fd(prog, "out", {"z": 3.0}, "z", h=1e-5) == pytest.approx(g["z"], abs=1e-9)
    f = rvm.grad_fn(prog, of="out", wrt="z")
    for _ in range(2):                                      # the first call and the fast path
        assert f({"z": 3.0, "nu": 2, "nterms": 18})["z"] == g["z"]


@pytest.mark.parametrize("z, nu", [(1.0, 0), (2.5, 1), (4.0, 3), (-2.0, 3)])
def test_besselj_rec_gradient_matches_finite_differences(z, nu):
    prog = load("besselj_rec.rasm")
    inputs = {"z": z, "nu": nu, "nterms": 16}
    d = derivatives(prog, of="out", wrt=["z"], inputs=inputs, hessian=True, strict=True)
    assert d.gradient["z"] == pytest.approx(fd(prog, "out", inputs, "z", h=1e-5), abs=1e-9)
    assert d.gradient["z"] == pytest.approx(
        rvm.grad(load("besselj.rasm"), of="out", wrt="z", inputs=inputs)["z"], abs=1e-14)
    gp, gm = (rvm.grad(prog, of="out", wrt="z", inputs={**inputs, "z": z + s})["z"]
              for s in (1e-5, -1e-5))
    assert d.hessian[0, 0] == pytest.approx((gp - gm) / 2e-5, abs=1e-8)
    assert d.drift == {}


@pytest.mark.parametrize("nu, want", [(0, 0.0), (1, 0.5), (2, 0.0)])
def test_besselj_rec_gradient_at_zero(nu, want):
    assert rvm.grad(load("besselj_rec.rasm"), of="out", wrt="z",
                    inputs={"z": 0.0, "nu": nu})["z"] == want


# ---- besselj_fixed.rasm -------------------------------------------------------------------

@pytest.mark.parametrize("z, nu, ref", [(3.0, 2, J2_3), (1.5, 0, 0.5118276717359181),
                                        (0.5, 1, 0.2422684576748739),
                                        (2.0, 3, 0.1289432494744021),
                                        (5.0, 2, 0.0465651162777522)])
def test_besselj_fixed_value_and_roundtrip(z, nu, ref):
    prog = load("besselj_fixed.rasm")
    out = assert_roundtrip(prog, {"z": z, "nu": nu}, exact=True)
    assert out["out"] == pytest.approx(ref, abs=1e-11)
    assert rvm.run(prog, {"z": z, "nu": nu}).garbage == []


def test_besselj_fixed_derivatives():
    prog = load("besselj_fixed.rasm")
    d = derivatives(prog, of="out", wrt=["z"], inputs={"z": 3.0}, hessian=True, strict=True)
    assert d.gradient["z"] == pytest.approx(DJ2_3, abs=1e-6)
    assert d.hessian[0, 0] == pytest.approx(D2J2_3, abs=1e-6)
    assert d.drift == {}                                            # z restored bit for bit
    assert fd(prog, "out", {"z": 3.0}, "z", h=1e-4) == pytest.approx(DJ2_3, abs=1e-7)


# ---- umm.rasm and gen_programs.umm --------------------------------------------------------

def umm_ref(x, theta):
    """numpy reference: the Givens rotations of umm in order; returns (x, U)."""
    n = len(x)
    u = np.eye(n)
    idx = 0
    for k in range(n):
        for l in range(k + 1, n):
            c, s = np.cos(theta[idx]), np.sin(theta[idx])
            g = np.eye(n)
            g[k, k], g[k, l], g[l, k], g[l, l] = c, -s, s, c
            u = g @ u
            idx += 1
    return u @ np.asarray(x, dtype=float), u


def test_umm_file_is_generated():
    assert (PROGRAMS / "umm.rasm").read_text() == gen_programs.umm(4)


@pytest.mark.parametrize("n", [2, 4, 7])
def test_umm_value_and_roundtrip(n):
    prog = rvm.assemble(gen_programs.umm(n))
    rng = np.random.default_rng(n)
    x, theta = rng.normal(size=n), rng.normal(size=n * (n - 1) // 2)
    out = assert_roundtrip(prog, {"x": x, "theta": theta}, exact=False)
    want, _ = umm_ref(x, theta)
    np.testing.assert_allclose(out["x"], want, atol=1e-13)
    assert out["loss"] == pytest.approx(want.sum(), abs=1e-13)


def test_umm_gradient():
    prog = load("umm.rasm")
    x, theta = np.arange(1.0, 5.0), 0.1 * np.arange(1, 7)
    inputs = {"x": x, "theta": theta}
    d = derivatives(prog, of="loss", wrt=["x", "theta"], inputs=inputs, strict=True)
    _, u = umm_ref(x, theta)
    np.testing.assert_allclose(d.gradient["x"], u.T @ np.ones(4), rtol=1e-13)
    np.testing.assert_allclose(d.gradient["x"], fd(prog, "loss", inputs, "x"), rtol=1e-6)
    gt = fd(prog, "loss", inputs, "theta")
    np.testing.assert_allclose(d.gradient["theta"], gt, rtol=1e-6)
    assert all(v < 1e-14 for v in d.drift.values()), d.drift
    h = 1e-6
    for j in range(6):          # the reference's own central differences
        tp, tm = theta.copy(), theta.copy()
        tp[j] += h
        tm[j] -= h
        ref = (umm_ref(x, tp)[0].sum() - umm_ref(x, tm)[0].sum()) / (2 * h)
        assert gt[j] == pytest.approx(ref, rel=1e-6, abs=1e-9)


def test_umm10_gradient_matches_finite_differences():
    prog = rvm.assemble(gen_programs.umm(10))
    rng = np.random.default_rng(10)
    inputs = {"x": rng.normal(size=10), "theta": rng.normal(size=45)}
    g = rvm.grad(prog, of="loss", wrt=["x", "theta"], inputs=inputs)
    _, u = umm_ref(inputs["x"], inputs["theta"])
    np.testing.assert_allclose(g["x"], u.T @ np.ones(10), rtol=1e-12)
    np.testing.assert_allclose(g["theta"], fd(prog, "loss", inputs, "theta"), rtol=1e-6, atol=1e-9)


# ---- qr.rasm ------------------------------------------------------------------------------

QR_A = np.array([2.0, -1.0, 0.5, 1.0, 3.0, -2.0, 0.5, 1.0, 4.0])


def assert_qr_matches_numpy(a, q, r):
    q0, r0 = np.linalg.qr(a)
    s = np.sign(np.diag(r0))                    # numpy's column signs; ours: diag(R) > 0
    np.testing.assert_allclose(q, q0 * s, atol=1e-13)
    np.testing.assert_allclose(r, r0 * s[:, None], atol=1e-13)


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_qr_matches_numpy(seed):
    a = QR_A if seed is None else np.random.default_rng(seed).normal(size=9)
    out = assert_roundtrip(load("qr.rasm"), {"A": a}, exact=False)
    q, r = out["Q"].reshape(3, 3), out["R"].reshape(3, 3)
    assert_qr_matches_numpy(a.reshape(3, 3), q, r)
    np.testing.assert_allclose(q @ r, a.reshape(3, 3), atol=1e-13)
    assert out["loss"] == pytest.approx(q.sum() + r.sum(), abs=1e-13)


@pytest.mark.parametrize("seed", [None, 4])
def test_qr_gradient_matches_finite_differences(seed):
    prog = load("qr.rasm")
    a = QR_A if seed is None else np.random.default_rng(seed).normal(size=9)
    d = derivatives(prog, of="loss", wrt=["A"], inputs={"A": a}, strict=True)
    np.testing.assert_allclose(d.gradient["A"], fd(prog, "loss", {"A": a}, "A"), rtol=1e-6)
    assert "A" not in d.drift                   # the input comes back bit for bit
    assert all(v < 1e-13 for v in d.drift.values()), d.drift


# ---- petersen.rasm (k = 4), petersen3.rasm (k = 3), examples/train_petersen.py -----------

def petersen_ref(x, k):
    x = np.asarray(x, dtype=float).reshape(10, k)
    a = [np.linalg.norm(x[i] - x[j]) for i, j in gen_programs.PETERSEN_EDGES]
    b = [np.linalg.norm(x[i] - x[j]) for i, j in gen_programs.PETERSEN_NON_EDGES]
    return np.var(a, ddof=1) + np.var(b, ddof=1)


def test_petersen_graph():
    edges = {frozenset(e) for e in gen_programs.PETERSEN_EDGES}
    assert len(edges) == 15 and len(gen_programs.PETERSEN_NON_EDGES) == 30
    assert all(sum(v in e for e in edges) == 3 for v in range(10))          # 3-regular


@pytest.mark.parametrize("name, k", [("petersen.rasm", 4), ("petersen3.rasm", 3)])
def test_petersen_files_are_generated(name, k):
    assert (PROGRAMS / name).read_text() == gen_programs.petersen(k)


@pytest.mark.parametrize("name, k", [("petersen.rasm", 4), ("petersen3.rasm", 3)])
def test_petersen_value_gradient_roundtrip(name, k):
    prog = load(name)
    assert rvm.run(prog).outputs["loss"] == pytest.approx(
        petersen_ref(gen_programs.petersen_defaults(k), k), abs=1e-14)
    x = np.random.default_rng(k).normal(size=10 * k)
    out = assert_roundtrip(prog, {"x": x}, exact=False)
    assert out["loss"] == pytest.approx(petersen_ref(x, k), abs=1e-13)
    d = derivatives(prog, of="loss", wrt=["x"], inputs={"x": x}, strict=True)
    # h = 1e-5: the loss (~1) rounds to ~1e-16, which central differences at h = 1e-6 turn
    # into ~3e-9 of noise, the size of atol
    np.testing.assert_allclose(d.gradient["x"], fd(prog, "loss", {"x": x}, "x", h=1e-5),
                               rtol=1e-6, atol=1e-9)
    assert "x" not in d.drift


def test_petersen_zero_at_a_two_distance_embedding():
    # vertex v = {i, j} of the Kneser graph K(5, 2) at e_i + e_j, projected to 4 dimensions
    pairs = [(0, 1), (2, 3), (0, 4), (1, 2), (3, 4), (2, 4), (1, 4), (1, 3), (0, 3), (0, 2)]
    edges = {frozenset(e) for e in gen_programs.PETERSEN_EDGES}
    for a, b in edges:          # adjacent iff the 2-sets are disjoint
        assert not set(pairs[a]) & set(pairs[b])
    pts = np.zeros((10, 5))
    for v, (i, j) in enumerate(pairs):
        pts[v, [i, j]] = 1.0
    basis = np.linalg.svd(pts - pts.mean(0))[2][:4]          # the 4-dim affine hull
    x = (pts - pts.mean(0)) @ basis.T
    assert abs(rvm.run(load("petersen.rasm"), {"x": x.ravel()}).outputs["loss"]) < 1e-14


def train_petersen():
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_petersen",
                                                  ROOT / "examples" / "train_petersen.py")
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    return tp


def test_train_petersen_k4_reaches_zero_k3_does_not():
    tp = train_petersen()
    x4, h4 = tp.train(4, steps=1000, seed=2, log=lambda s: None)
    x3, h3 = tp.train(3, steps=1000, seed=2, log=lambda s: None)
    assert h4[-1][1] < 1e-5 and h3[-1][1] > 0.1
    e, n = tp.lengths(x4)
    assert e.mean() / n.mean() == pytest.approx(np.sqrt(2), rel=1e-3)


def test_train_petersen_driver(tmp_path, capsys):
    png = tmp_path / "loss.png"
    assert train_petersen().main(["--k", "3,4", "--steps", "20", "--every", "10",
                                  "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "k = 3  step     10  loss = " in out and "k = 4  step     20" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_nilang_i_exp_through_log_numbers():
    """NiLang's i_exp: exp(x) as a Taylor series whose terms x^k/k! are lns cells; NiLang
    expects d/dx ~ exp(3.5).  The derivative flows through the lns cells (docs/ad.md),
    interpreted and native alike, and so does the second derivative."""
    prog = load("lns_exp.rasm")
    e = math.exp(3.5)
    d = derivatives(prog, "y", ["x"], {"x": 3.5}, hessian=True)
    assert d.value == pytest.approx(e, rel=1e-10)
    assert d.gradient["x"] == pytest.approx(e, rel=1e-10)
    assert d.hessian[0][0] == pytest.approx(e, rel=1e-9)
    assert rvm.jvp(prog, {"x": 3.5}, {"x": 1.0})["y"] == pytest.approx(e, rel=1e-10)
    from rvm import native
    if native.compiler() is not None:
        f = rvm.grad_fn(prog, of="y", wrt="x", native=True)
        g = [f({"x": 3.5}) for _ in range(2)]
        assert f.native.startswith("native") and f.runner.core.native_bails == 0
        assert g[1]["x"] == d.gradient["x"]           # bit for bit the interpreter's
