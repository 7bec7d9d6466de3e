"""GradBench's evals as rvm programs (programs/gradbench/, benchmarks/gradbench_rvm/, issue
20): each eval's functions at small sizes against numpy references of the evals' READMEs
(objectives) and finite differences or closed forms (derivatives).  No GradBench checkout is
needed; native code is off (the interpreter gives the same numbers bit for bit, see
tests/test_native.py) so that the tests build nothing."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rvm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gradbench_rvm import programs  # noqa: E402


def run(module, function, inp):
    return programs.prepare(module, function, inp, native=False)()


def fd_grad(f, x, h=1e-6):
    x = np.array(x, dtype=float)
    g = np.zeros_like(x)
    for i in range(len(x)):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


# ---- references (the evals' definitions) -------------------------------------------------

def lse_ref(x):
    a = np.max(x)
    return a + math.log(np.sum(np.exp(x - a)))


def llsq_ref(x, n):
    t = -1 + np.arange(n) * 2 / (n - 1)
    r = np.sign(t) - sum(x[j] * t ** j for j in range(len(x)))
    return 0.5 * np.sum(r * r)


def det_ref(A, ell):
    return float(np.linalg.det(np.asarray(A).reshape(ell, ell)))


def ode_ref(x, s):
    n, h = len(x), 2.0 / s
    y = np.zeros(n)

    def f(y):
        z = np.empty(n)
        z[0] = x[0]
        z[1:] = x[1:] * y[:-1]
        return z
    for _ in range(s):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        y = y + h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
    return y


def kmeans_ref(P, C):
    d2 = ((P[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return float(d2.min(1).sum()), d2.argmin(1)


def gmm_ref(inp):
    d, k, n, m, gamma = inp["d"], inp["k"], inp["n"], inp["m"], inp["gamma"]
    alpha, mu, q = np.array(inp["alpha"]), np.array(inp["mu"]), np.array(inp["q"])
    l, x = np.array(inp["l"]), np.array(inp["x"])
    Qs = []
    for c in range(k):
        Q = np.diag(np.exp(q[c]))
        at = 0
        for col in range(d):
            for row in range(col + 1, d):
                Q[row, col] = l[c][at]
                at += 1
        Qs.append(Q)
    def lse(v):
        a = v.max()
        return a + math.log(np.exp(v - a).sum())
    total = 0.0
    for i in range(n):
        beta = np.array([alpha[c] + q[c].sum() - 0.5 * np.sum((Qs[c] @ (x[i] - mu[c])) ** 2)
                         for c in range(k)])
        total += lse(beta)
    fro = sum(np.sum(Q ** 2) for Q in Qs)
    return (programs.gmm_constant(d, k, n, m, gamma) + total - n * lse(alpha)
            - 0.5 * gamma * gamma * fro + m * q.sum())


# ---- the tests -----------------------------------------------------------------------------

def test_lse():
    x = np.random.default_rng(1).uniform(-3, 3, 7)
    assert run("lse", "primal", {"x": x.tolist()}) == pytest.approx(lse_ref(x), rel=1e-14)
    g = np.array(run("lse", "gradient", {"x": x.tolist()}))
    assert np.allclose(g, np.exp(x - lse_ref(x)), rtol=1e-13)


def test_llsq():
    x = np.random.default_rng(2).random(4)
    inp = {"x": x.tolist(), "n": 9}
    assert run("llsq", "primal", inp) == pytest.approx(llsq_ref(x, 9), rel=1e-13)
    g = np.array(run("llsq", "gradient", inp))
    assert np.allclose(g, fd_grad(lambda v: llsq_ref(v, 9), x), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("ell", [1, 2, 4])
def test_det(ell):
    A = np.random.default_rng(ell).random(ell * ell)
    inp = {"A": A.tolist(), "ell": ell}
    assert run("det", "primal", inp) == pytest.approx(det_ref(A, ell), rel=1e-12, abs=1e-14)
    g = np.array(run("det", "gradient", inp))
    # d det / d A = det(A) A^-T, the cofactor matrix
    M = A.reshape(ell, ell)
    assert np.allclose(g, (np.linalg.det(M) * np.linalg.inv(M).T).ravel(), rtol=1e-10)


@pytest.mark.parametrize("n,s", [(1, 1), (5, 3), (9, 2)])
def test_ode(n, s):
    x = np.random.default_rng(n).random(n)
    inp = {"x": x.tolist(), "s": s}
    assert np.allclose(run("ode", "primal", inp), ode_ref(x, s), rtol=1e-13, atol=1e-15)
    g = np.array(run("ode", "gradient", inp))
    assert np.allclose(g, fd_grad(lambda v: ode_ref(v, s)[-1], x), rtol=1e-6, atol=1e-9)


def test_kmeans():
    rng = np.random.default_rng(4)
    P = rng.random((12, 3))
    C = P[-4:].copy()
    inp = {"points": P.tolist(), "centroids": C.tolist()}
    cost, arg = kmeans_ref(P, C)
    assert run("kmeans", "cost", inp) == pytest.approx(cost, rel=1e-13)
    # J_j = sum over the points closest to j of 2 (C_j - P_i); H_j = 2 (their count)
    J = np.array([2 * (C[j] - P[arg == j]).sum(0) for j in range(4)])
    H = np.array([2.0 * (arg == j).sum() for j in range(4)])[:, None]
    assert np.allclose(run("kmeans", "dir", inp), J / H, rtol=1e-12, atol=1e-14)


def gmm_input(d, k, n, seed=5):
    rng = np.random.default_rng(seed)
    return {"d": d, "k": k, "n": n, "m": 2, "gamma": 1.5,
            "x": rng.normal(size=(n, d)).tolist(), "alpha": rng.normal(size=k).tolist(),
            "mu": rng.uniform(size=(k, d)).tolist(), "q": rng.normal(size=(k, d)).tolist(),
            "l": rng.normal(size=(k, d * (d - 1) // 2)).tolist()}


@pytest.mark.parametrize("d,k,n", [(1, 2, 3), (3, 2, 4)])
def test_gmm(d, k, n):
    inp = gmm_input(d, k, n)
    assert run("gmm", "objective", inp) == pytest.approx(gmm_ref(inp), rel=1e-12)
    jac = run("gmm", "jacobian", inp)
    for name in ("alpha", "mu", "q", "l"):
        flat = np.array(inp[name], dtype=float).ravel()
        shape = np.shape(inp[name])

        def f(v, name=name, shape=shape):
            return gmm_ref(inp | {name: v.reshape(shape).tolist()})
        if flat.size:
            assert np.allclose(np.ravel(jac[name]), fd_grad(f, flat), rtol=1e-6, atol=1e-7), name


def test_gmm_constant_is_scipy_multigammaln():
    scipy_special = pytest.importorskip("scipy.special")
    d, k, n, m, gamma = 4, 3, 10, 2, 1.5
    nn = d + m + 1
    C = nn * d * (math.log(gamma) - 0.5 * math.log(2)) - scipy_special.multigammaln(0.5 * nn, d)
    assert programs.gmm_constant(d, k, n, m, gamma) == \
        pytest.approx(-n * d * 0.5 * math.log(2 * math.pi) + k * C, rel=1e-14)


def test_sized_rewrites_declarations_and_refuses_unknown_names():
    text = "const  d: int = 2\ninput  x: float[3] = [1, 2, 3]   ; comment\nglobal y: float\n"
    out = programs.sized(text, {"x": 5}, {"d": 7})
    assert out == "const  d: int = 7\ninput  x: float[5]   ; comment\nglobal y: float\n"
    with pytest.raises(ValueError, match=r"\['z'\]"):
        programs.sized(text, {"z": 1})


def test_tool_speaks_the_protocol():
    """tool.py over pipes: start, define (known and unknown eval), an evaluation with its
    timings, and a failed evaluation reported as a response."""
    msgs = [{"id": 0, "kind": "start", "eval": "lse"},
            {"id": 1, "kind": "define", "module": "lse"},
            {"id": 2, "kind": "evaluate", "module": "lse", "function": "primal",
             "input": {"x": [1.0, 2.0], "min_runs": 3, "min_seconds": 0}},
            {"id": 3, "kind": "define", "module": "nosuch"},
            {"id": 4, "kind": "evaluate", "module": "lse", "function": "primal",
             "input": {"min_runs": 1, "min_seconds": 0}}]
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/gradbench_rvm/tool.py")],
                         input="".join(json.dumps(m) + "\n" for m in msgs), text=True,
                         capture_output=True, timeout=120, check=True)
    res = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["id"] for r in res] == [0, 1, 2, 3, 4]
    assert res[0]["tool"] == "rvm" and res[1]["success"] is True
    assert res[2]["output"] == pytest.approx(math.log(math.exp(1) + math.exp(2)), rel=1e-15)
    names = [t["name"] for t in res[2]["timings"]]
    assert names == ["prepare", "evaluate", "evaluate", "evaluate"]
    assert res[3]["success"] is False and "nosuch" in res[3]["error"]
    assert res[4]["success"] is False and "KeyError: 'x'" in res[4]["error"]


def ba_ref(cam, X, w, feat):
    """ADBench's projection (the C++ reference's computeReprojError) and weight error."""
    rot, C, f, x0, rad = cam[:3], cam[3:6], cam[6], cam[7:9], cam[9:11]
    Xo = X - C
    th = np.sqrt(np.sum(rot ** 2))
    if th != 0:
        k = rot / th
        Xc = Xo * np.cos(th) + np.cross(k, Xo) * np.sin(th) + k * (k @ Xo) * (1 - np.cos(th))
    else:
        Xc = Xo + np.cross(rot, Xo)
    proj = Xc[:2] / Xc[2]
    rsq = proj @ proj
    proj = proj * (1 + rad[0] * rsq + rad[1] * rsq * rsq) * f + x0
    return w * (proj - feat), 1 - w * w


@pytest.mark.parametrize("rot", [[0.3, -0.2, 0.1], [0.0, 0.0, 0.0]])
def test_ba(rot):
    rng = np.random.default_rng(6)
    cam = np.concatenate([rot, rng.normal(size=3), [300.0], rng.normal(size=2), [0.01, 0.001]])
    x, w, feat = rng.normal(size=3) + [0, 0, 10], 0.7, rng.normal(size=2)
    inp = {"n": 2, "m": 3, "p": 5, "cam": cam.tolist(), "x": x.tolist(), "w": w,
           "feat": feat.tolist()}
    err, werr = ba_ref(cam, x, w, feat)
    obj = run("ba", "objective", inp)
    assert np.allclose(obj["reproj_error"]["elements"], err, rtol=1e-12)
    assert obj["reproj_error"]["repeated"] == 5 and obj["w_err"]["repeated"] == 5
    assert obj["w_err"]["element"] == pytest.approx(werr, rel=1e-15)
    jac = run("ba", "jacobian", inp)
    # observation 0's two rows: camera 0's 11 columns, point 0's 3, w_0; the last w row
    J = np.array([fd_grad(lambda v, r=r: ba_ref(v[:11], v[11:14], v[14], feat)[0][r],
                          np.concatenate([cam, x, [w]]), h=1e-7) for r in (0, 1)])
    assert np.allclose(jac["vals"][:30], J.ravel(), rtol=1e-5, atol=1e-6)
    assert jac["vals"][30] == pytest.approx(-2 * w, rel=1e-15)
    ncols = 11 * 2 + 3 * 3
    assert jac["cols"][:30] == (list(range(11)) + [22, 23, 24, ncols]) * 2
    assert jac["cols"][30] == ncols + 4
    assert jac["rows"][:3] == [0, 15, 30] and jac["rows"][-1] == 2 * 5 * 15 + 5


@pytest.mark.parametrize("name, out, expected", [
    ("lse.rasm", "r", lse_ref(np.array([1.0, 2.0, 3.0, 4.0]))),
    ("llsq.rasm", "y", llsq_ref(np.array([0.5, 0.25, 0.125]), 5)),
    ("det.rasm", "r", 4.0),
    ("ode.rasm", "y", ode_ref(np.array([0.5, 0.25, 0.75, 0.125]), 2)),
    ("kmeans.rasm", "cost", 3.5),
    ("gmm.rasm", "F", None),
    ("ba.rasm", ("err0", "err1"), ba_ref(np.array([-0.758453, -1.109613, -0.845551, 34.556073, 39.676747,
                                         53.881673, 419.194514, 5.864426, -8.518870, 0.087812,
                                         0.002739]), np.array([7.203245, 0.001144, 3.023326]),
                               0.417022, np.array([271.760969, 834.209256]))[0])])
def test_the_programs_as_they_are(name, out, expected):
    """Each program file at its own small default inputs (`rvm run programs/gradbench/...`)."""
    res = rvm.run(rvm.assemble(ROOT / "programs" / "gradbench" / name))
    if expected is None:            # gmm: its defaults through the reference
        prog = (ROOT / "programs" / "gradbench" / name).read_text()
        assert "input  m: int = 0" in prog and "input  c0: float = 0.0" in prog
        inp = {"d": 2, "k": 2, "n": 3, "m": 0, "gamma": 1.0, "alpha": [0.5, -0.25],
               "mu": [[0.0, 0.5], [1.0, -0.5]], "q": [[0.1, -0.2], [0.3, 0.05]],
               "l": [[0.4], [-0.3]], "x": [[0.2, 0.1], [-0.3, 0.8], [1.1, -0.6]]}
        expected = gmm_ref(inp) - programs.gmm_constant(2, 2, 3, 0, 1.0)
    got = (np.concatenate([res.outputs[o] for o in out]) if isinstance(out, tuple)
           else res.outputs[out])
    assert np.allclose(got, expected, rtol=1e-13)


@pytest.mark.parametrize("omode, imode", [(0, 0), (1, 1), (1, 0), (0, 1)],
                         ids=["rr", "ff", "fr", "rf"])
def test_saddle_nested_ad_gives_the_evals_answer(omode, imode):
    """saddle.rasm: the outer argmin's gradient differentiates the inner argmax's gradients
    (derivative statements, docs/ad.md), each level in forward or reverse mode; GradBench's
    expected output (evals/saddle/run.py) is 8.246324826140356e-06 four times."""
    prog = rvm.assemble(ROOT / "programs" / "gradbench" / "saddle.rasm")
    out = rvm.run(prog, {"omode": omode, "imode": imode}).outputs
    assert np.allclose(np.concatenate([out["r1"], out["r2"]]), 8.246324826140356e-06,
                       rtol=1e-9, atol=0)


@pytest.mark.parametrize("omode, imode", [(0, 0), (1, 1), (1, 0), (0, 1)],
                         ids=["rr", "ff", "fr", "rf"])
def test_particle_nested_ad_gives_the_evals_answer(omode, imode):
    """particle.rasm: the outer descent's gradient differentiates an Euler run whose steps
    take the potential's gradient; GradBench's expected w (evals/particle/run.py)."""
    prog = rvm.assemble(ROOT / "programs" / "gradbench" / "particle.rasm")
    w = rvm.run(prog, {"omode": omode, "imode": imode}).outputs["w"]
    assert w == pytest.approx(0.2071918746486116, rel=1e-12)


def test_the_tool_answers_the_nested_evals():
    """The GradBench tool's saddle and particle functions: the JSON outputs the evals check."""
    out = programs.prepare("saddle", "fr", {"start": [1.0, 1.0]})()
    assert len(out) == 4 and all(abs(v - 8.246324826140356e-06) < 1e-12 for v in out)
    w = programs.prepare("particle", "rf", {"w": 0.0})()
    assert isinstance(w, float) and abs(w - 0.2071918746486116) < 1e-12
    with pytest.raises(KeyError):
        programs.prepare("saddle", "fx", {"start": [1.0, 1.0]})


def test_driver_table_gives_closed_form_evals_the_derivative_over_manuals_objective(capsys):
    """benchmarks/gradbench.py: for ode and kmeans (manual's derivative is a closed form) the
    rows give the tool's best derivative over manual's best objective, both interleaved."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gb_driver", ROOT / "benchmarks" /
                                                  "gradbench.py")
    drv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drv)

    def entry(function, mean, tool_best, manual_best):
        return {"function": function, "description": "n=1000,s=10", "mean": mean,
                "prepare": 0.0, "valid": True, "success": True,
                "interleaved": {"rounds": 3, "tool": tool_best, "manual": manual_best}}
    rvm_log = {"evaluations": [entry("primal", 2e-4, 1.2e-4, 2.5e-5),
                               entry("gradient", 4e-4, 3.5e-4, 2e-6)]}
    rows = drv.table("ode", {"rvm": rvm_log})
    assert rows[0]["x_manual_interleaved"] == pytest.approx(175.0)
    assert rows[0]["objective_x_manual_interleaved"] == pytest.approx(4.8)
    assert rows[0]["x_manual_objective_interleaved"] == pytest.approx(14.0)
    drv.print_table("ode", rows)
    assert "[derivative / manual's objective 14.00]" in capsys.readouterr().out
    drv.print_table("lse", drv.table("lse", {"rvm": rvm_log}))
    assert "manual's objective" not in capsys.readouterr().out
