"""GradBench's evals as rvm programs: each eval's .rasm program (programs/gradbench/) resized
to an input's dimensions, and the eval's functions computed with rvm's modes.

GradBench's inputs fix array lengths that a .rasm program declares statically, so `sized`
rewrites the declarations of one program text (lengths and size constants; the initializers
of the small default inputs are dropped) and `Prepared` assembles it once per size (and the
native gradient is built once per program, cached on disk by rvm.native).  `prepare(module,
function, input)` does everything that depends only on the input (parse, assemble, compile,
store), and returns a callable that evaluates the function once and returns its JSON output;
tool.py times that callable only.

Modes: `primal`/`objective`/`cost` run the program forward (`Machine(native=True)`: native
code); gradients are one adjoint sweep (`rvm.grad_fn`, native code);
kmeans's gradient and Hessian diagonal are one tangent-over-adjoint sweep (`rvm.derivatives`
with a direction, native code too); ht's Jacobian is tangent runs, one per column
(`rvm.jvp_batch`, native code); saddle and particle are forward runs whose derivative
statements run nested modes (native code too)."""
from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

import assembler
import rvm

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "programs" / "gradbench"
EVALS = ("lse", "llsq", "det", "ode", "kmeans", "gmm", "ba", "ht", "saddle", "particle")

_DECL = re.compile(r"^(?P<head>(input|inout|output|global|const)\s+(?P<name>\w+)\s*:\s*\w+)"
                   r"(?P<len>\[\d+\])?(?P<init>\s*=\s*[^;]*?)?(?P<tail>\s*(;.*)?)$", re.M)


def sized(text: str, lengths: dict[str, int], consts: dict[str, int] | None = None) -> str:
    """`text` with the arrays named in `lengths` declared with those lengths (their
    initializers dropped) and the int constants in `consts` given those values."""
    consts = consts or {}
    seen: set[str] = set()

    def repl(m: re.Match) -> str:
        name = m["name"]
        if name in lengths and m["len"]:
            seen.add(name)
            return f"{m['head']}[{lengths[name]}]{m['tail']}"
        if name in consts and not m["len"]:
            seen.add(name)
            return f"{m['head']} = {consts[name]}{m['tail']}"
        return m.group(0)

    out = _DECL.sub(repl, text)
    missing = (set(lengths) | set(consts)) - seen
    if missing:
        raise ValueError(f"no declaration to resize for {sorted(missing)}")
    return out


@lru_cache(maxsize=4)
def program(name: str, lengths: tuple = (), consts: tuple = ()) -> rvm.Program:
    """programs/gradbench/NAME.rasm assembled at the given sizes (cached)."""
    path = PROGRAMS / f"{name}.rasm"
    text = sized(path.read_text(), dict(lengths), dict(consts))
    return assembler.assemble(text, str(path))


_GRADS: dict[tuple, tuple[rvm.Program, Any]] = {}


def _grad(prog: rvm.Program, of: str, wrt: tuple[str, ...], native: bool) -> Any:
    """One GradFn per program, output and inputs (native: compiled now)."""
    key = (id(prog), of, wrt, native)
    if key not in _GRADS:
        # keep only the current program's (each holds machines of 4 arrays over all its
        # cells: at ba's larger sizes, several GB; the previous sizes' filled the memory)
        for k in [k for k in _GRADS if k[0] != id(prog)]:
            del _GRADS[k]
        _GRADS[key] = (prog, rvm.grad_fn(prog, of=of, wrt=list(wrt), native=native))
    return _GRADS[key][1]


class Runner:
    """A program with its inputs stored: forward runs and gradients on demand."""

    def __init__(self, prog: rvm.Program, inputs: dict[str, Any], native: bool = True):
        self.prog, self.inputs, self.native = prog, inputs, native
        self._m: Any = None

    def forward(self, *names: str) -> Callable[[], list[Any]]:
        """A forward run reading `names` at the end (one run done now, as the first call)."""
        m = rvm.Machine(self.prog, native=self.native)

        def run() -> list[Any]:
            m.reset(self.inputs)
            m.run()
            return [m.read(n) for n in names]
        run()
        return run

    def grad_fn(self, of: str, wrt: tuple[str, ...]) -> Callable[[], dict[str, Any]]:
        f = _grad(self.prog, of, wrt, self.native)
        inputs = self.inputs
        f(inputs)                       # the first call: the general path, with its checks
        return lambda: f(inputs)

    def grad_flat(self, of: str, wrt: str) -> Callable[[], np.ndarray]:
        """The gradient with respect to the one float array `wrt`, by GradFn.flat: its values
        from the input, the program's other inputs at their declared defaults (the caller
        sized them so), the result in one array kept across calls (as the C++ tools keep
        their output vector)."""
        f = _grad(self.prog, of, (wrt,), self.native)
        x = self.inputs[wrt]
        out = np.empty(len(x))
        f(self.inputs)                  # the first call: the general path, with its checks
        return lambda: f.flat(x, out)[1]


@dataclass
class Evaluation:
    """One function at one input: `run` computes (it is what a tool times), `post` turns its
    result into the JSON output (once, untimed, as GradBench's Python tools do:
    gradbench.wrap's `post`).  Calling it does both."""
    run: Callable[[], Any]
    post: Callable[[Any], Any]

    def __call__(self) -> Any:
        return self.post(self.run())


def _f64(v: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(v, dtype=np.float64).ravel())


# ---- the evals ---------------------------------------------------------------------------

def lse(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    x = _f64(inp["x"])
    n = len(x)
    r = Runner(program("lse", (("x", n), ("XS", n))), {"x": x}, native)
    if function == "primal":
        fw = r.forward("r")
        return Evaluation(fw, lambda o: float(o[0]))
    return Evaluation(r.grad_flat("r", "x"), lambda g: g.tolist())


def llsq(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    x, n = _f64(inp["x"]), int(inp["n"])
    # n is also the program's default for n, so that the gradient can be a flat call
    r = Runner(program("llsq", (("x", len(x)), ("P", len(x)), ("res", n)), (("n", n),)),
               {"x": x, "n": n}, native)
    if function == "primal":
        fw = r.forward("y")
        return Evaluation(fw, lambda o: float(o[0]))
    return Evaluation(r.grad_flat("y", "x"), lambda g: g.tolist())


def det(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    A, ell = _f64(inp["A"]), int(inp["ell"])
    r = Runner(program("det", (("A", ell * ell), ("cols", (ell + 1) * ell)), (("ell", ell),)),
               {"A": A}, native)
    if function == "primal":
        fw = r.forward("r")
        return Evaluation(fw, lambda o: float(o[0]))
    g = r.grad_fn("r", ("A",))
    return Evaluation(g, lambda res: res["A"].tolist())


def ode(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    x, s = _f64(inp["x"]), int(inp["s"])
    n = len(x)
    # s is also the program's default for s, so that the gradient can be a flat call
    r = Runner(program("ode", (("x", n), ("y", n)) + tuple(
        (a, n + 9) for a in ("xr", "yr", "HX2", "HX", "K1", "D2", "K2", "D3", "K3", "D4")),
        (("s", s),)), {"x": x, "s": s}, native)
    if function == "primal":
        fw = r.forward("y")
        return Evaluation(fw, lambda o: np.asarray(o[0]).tolist())
    return Evaluation(r.grad_flat(f"y[{n - 1}]", "x"), lambda g: g.tolist())


def kmeans(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    P, C = np.asarray(inp["points"], dtype=np.float64), np.asarray(inp["centroids"],
                                                                   dtype=np.float64)
    (n, d), k = P.shape, C.shape[0]
    prog = program("kmeans", (("P", n * d), ("C", k * d), ("CC", k), ("HC", k), ("D", n * k), ("best", n),
                              ("arg", n)), (("d", d), ("k", k)))
    r = Runner(prog, {"P": _f64(P), "C": _f64(C)}, native)
    if function == "cost":
        fw = r.forward("cost")
        return Evaluation(fw, lambda o: float(o[0]))
    # one tangent-over-adjoint sweep, tangent 1 on every C: its adjoint is J, its tangent
    # H 1 = diag H (H is diagonal).  As a flat call (GradFn.hvp_flat: one C call, only the
    # cells a run may write put back between calls), C from a vector and P the program's
    # default: a Program of its own with P's words as the default (the cached one is
    # shared with `cost`).  hvp_flat gives H 1; J is the adjoint the same sweep leaves at C,
    # read from the machine's adjoint array (Core.adjoint: a view of the dual array, which
    # the machine allocates once and keeps).
    pg = next(g for g in prog.globals if g.name == "P")
    prog = dataclasses.replace(prog, globals=[
        dataclasses.replace(g, default=_f64(P).view(np.int64).tolist()) if g is pg else g
        for g in prog.globals])
    c = next(g for g in prog.globals if g.name == "C")
    f = rvm.grad_fn(prog, of="cost", wrt=["C"], native=native)
    x, v, h = _f64(C), np.ones(k * d), np.empty(k * d)
    f({"C": x})                         # the first call: the general path, with its checks
    core = f.runner.core
    if native:
        # the tangent modes' code for tangents seeded at C and derivatives asked of C alone
        # (rvm/native/activity.py then leaves out P's tangents and adjoints, which the code
        # built for any differentiable global carries: a load and a test per element)
        rvm.native.compile_tangent(prog, range(c.addr, c.addr + c.size),
                                   lanes=False).install(core)
    adj = core.adjoint

    def both() -> Any:
        f.hvp_flat(x, v, h)
        return adj[c.addr:c.addr + c.size] / h
    # the flat call against the dict call of rvm.derivatives on the same machine and code,
    # bit for bit
    got = both()
    ref = rvm.derivatives(prog, "cost", ["C"], {"C": x}, gradient=False, direction={"C": v},
                          check_ancillas=False, native=native, machine=f.runner.m)
    if not np.array_equal(got, ref.gradient["C"] / ref.hvp["C"]):
        raise RuntimeError("kmeans: hvp_flat and the machine's adjoints disagree with "
                           "rvm.derivatives")
    return Evaluation(both, lambda v: v.reshape(k, d).tolist())


def gmm_constant(d: int, k: int, n: int, m: int, gamma: float) -> float:
    """c0 of programs/gradbench/gmm.rasm: the terms that depend on the sizes and the prior
    only (the C++ reference's CONSTANT and k C), log Gamma_d by math.lgamma."""
    nn = d + m + 1
    lgd = 0.25 * d * (d - 1) * math.log(math.pi) + sum(math.lgamma(0.5 * nn + 0.5 * (1 - j))
                                                          for j in range(1, d + 1))
    C = nn * d * (math.log(gamma) - 0.5 * math.log(2)) - lgd
    return -n * d * 0.5 * math.log(2 * math.pi) + k * C


def gmm(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    d, k, n = int(inp["d"]), int(inp["k"]), int(inp["n"])
    ls = d * (d - 1) // 2
    lengths = (("alpha", k), ("mu", k * d), ("q", k * d), ("l", max(ls * k, 1)),
               ("x", n * d), ("qd", k * d), ("sq", k), ("XC", n * k * d), ("QX", n * k * d),
               ("H", n * k), ("B", n * k), ("PM", n * k), ("E", n * k), ("S", n), ("PA", k))
    prog = program("gmm", lengths, (("d", d), ("k", k), ("n", n), ("kl", ls * k)))
    inputs = {"alpha": _f64(inp["alpha"]), "mu": _f64(inp["mu"]), "q": _f64(inp["q"]),
              "l": _f64(inp["l"]) if ls else np.zeros(1), "x": _f64(inp["x"]),
              "m": int(inp["m"]), "gamma": float(inp["gamma"]),
              "c0": gmm_constant(d, k, n, int(inp["m"]), float(inp["gamma"]))}
    r = Runner(prog, inputs, native)
    if function == "objective":
        fw = r.forward("F")
        return Evaluation(fw, lambda o: float(o[0]))
    g = r.grad_fn("F", ("alpha", "mu", "q", "l"))

    def jac(res: Any) -> Any:
        return {"alpha": res["alpha"].tolist(), "mu": res["mu"].reshape(k, d).tolist(),
                "q": res["q"].reshape(k, d).tolist(),
                "l": res["l"][:ls * k].reshape(k, ls).tolist()}
    return Evaluation(g, jac)


NCAM = 11
# programs/gradbench/ba.rasm's arrays, one per camera parameter and point coordinate, and its
# per-observation intermediates
BA_CAM = ("r0", "r1", "r2", "c0", "c1", "c2", "f", "u0", "v0", "k1", "k2")
BA_PT = ("X0", "X1", "X2")
BA_SCRATCH = ("xo0", "xo1", "xo2", "sqt", "th", "ct", "st", "omc", "rw0", "rw1", "rw2", "cr0",
              "cr1", "cr2", "dt", "tmp", "rp0", "rp1", "rp2", "pj0", "pj1", "rsq", "rq2", "dl",
              "pd0", "pd1", "g0", "g1")


def ba(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    """The eval's duplication (the C++ reference's from_json: n cameras, m points, p
    observations of camera o % n and point o % m), each observation's camera and point
    gathered into its own copy, one array per parameter (r0[o] .. k2[o], X0[o] .. X2[o]), the
    weights given twice (w for the reprojection errors, ww for the weight errors); the
    Jacobian from two adjoint sweeps after one forward run (programs/gradbench/ba.rasm), laid
    out as the reference's sparse matrix (CSR rows, cols, vals) and sent as the eval asks: its
    first 30 entries and its last."""
    n, m, p = int(inp["n"]), int(inp["m"]), int(inp["p"])
    cams = np.tile(_f64(inp["cam"]), n).reshape(n, NCAM)
    X = np.tile(_f64(inp["x"]), m).reshape(m, 3)
    ci, pi = np.arange(p) % n, np.arange(p) % m
    feat = _f64(inp["feat"])
    inputs: dict[str, Any] = {name: np.ascontiguousarray(cams[ci, j])
                              for j, name in enumerate(BA_CAM)}
    inputs.update({name: np.ascontiguousarray(X[pi, j]) for j, name in enumerate(BA_PT)})
    inputs.update({"w": np.full(p, float(inp["w"])), "ww": np.full(p, float(inp["w"])),
                   "fx": np.full(p, feat[0]), "fy": np.full(p, feat[1])})
    arrays = BA_CAM + BA_PT + ("w", "ww", "fx", "fy", "err0", "err1", "werr") + BA_SCRATCH
    prog = program("ba", tuple((name, p) for name in arrays))
    r = Runner(prog, inputs, native)
    if function == "objective":
        fw = r.forward("err0", "err1", "werr")

        def objective(out: Any) -> Any:
            err0, err1, werr = out
            return {"reproj_error": {"elements": [float(err0[0]), float(err1[0])],
                                     "repeated": p},
                    "w_err": {"element": float(werr[0]), "repeated": p}}
        return Evaluation(fw, objective)
    wrt = BA_CAM + BA_PT + ("w",)
    # every input is a wrt cell, so that each sweep is a flat call (its values from one
    # vector, its gradient into one array kept across runs, as the C++ tools keep their
    # output): per call no gradient array is allocated (sixteen fresh arrays of p floats each
    # sweep, the kernel clearing their pages, were 14% of a profile).  The features' adjoints
    # are two more updates per observation.
    flat = wrt + ("ww", "fx", "fy")
    xv = np.concatenate([inputs[name] for name in flat])
    # both rows from one GradFn: GradFn.jacobian_flat runs the forward run once and the two
    # sweeps from its end state (each row bit for bit a single-seed flat call's)
    gf = _grad(prog, "l0", flat, native)
    gf(inputs)                      # the first call: the general path, with its checks
    J = np.empty((2, len(xv)))
    gf.jacobian_flat(xv, ("l0", "l1w"), J)      # (compiles: untimed, as prepare)
    # the sparsity pattern: per observation two rows of 11 + 3 + 1 entries, then p w rows
    per = NCAM + 3 + 1
    cols = np.empty((p, 2, per), dtype=np.int64)
    cols[:, :, :NCAM] = (NCAM * ci)[:, None, None] + np.arange(NCAM)
    cols[:, :, NCAM:NCAM + 3] = (NCAM * n + 3 * pi)[:, None, None] + np.arange(3)
    cols[:, :, per - 1] = (NCAM * n + 3 * m + np.arange(p))[:, None]
    cols_all = np.concatenate([cols.ravel(), NCAM * n + 3 * m + np.arange(p)])
    rows_all = np.concatenate([np.arange(2 * p + 1) * per, 2 * p * per + np.arange(1, p + 1)])

    # the output's storage, allocated once (as the C++ tools' output, which their runs reuse)
    vals_all = np.empty(2 * p * per + p)
    vals = vals_all[:2 * p * per].reshape(p, 2, per)

    def jacobian() -> Any:
        gf.jacobian_flat(xv, ("l0", "l1w"), J)
        for row in range(2):
            vals[:, row, :] = J[row, :per * p].reshape(per, p).T
        vals_all[2 * p * per:] = J[1, per * p:(per + 1) * p]
        return vals_all

    def sparse(v: Any) -> Any:
        k = 2 * per
        return {"rows": rows_all[:k].tolist() + [int(rows_all[-1])],
                "cols": cols_all[:k].tolist() + [int(cols_all[-1])],
                "vals": v[:k].tolist() + [float(v[-1])]}
    return Evaluation(jacobian, sparse)


def ht_pose_map(n_bones: int) -> np.ndarray:
    """Per bone b and Euler angle c, the theta index of pose_params(c, b + 3) in the C++
    reference's to_pose_params, or -1 where it is zero (ht.rasm's amap)."""
    amap = np.full(3 * n_bones, -1, dtype=np.int64)
    i_theta, i_pose = 6, 5
    for _finger in range(5):
        for i in range(2, 5):
            if not 3 <= i_pose < n_bones + 3:
                raise ValueError(f"ht: {n_bones} bones are too few for the 20 finger angles")
            amap[3 * (i_pose - 3)] = i_theta
            i_theta += 1
            if i == 2:
                amap[3 * (i_pose - 3) + 1] = i_theta
                i_theta += 1
            i_pose += 1
        i_pose += 1
    return amap


def ht(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    """The posed hand's residuals at the correspondences (programs/gradbench/ht.rasm), only
    the vertices the correspondences use (each once) and only their bones of nonzero weight
    given to the program, as entries sorted by bone (the reference skins every vertex with
    every bone's weight, zeros included: the same sums, in the same order).  The Jacobian:
    one tangent run per column (`rvm.jvp_batch`, native code), seeded at one theta each and,
    for complicated inputs, at every u0 (every u1) at once: a residual depends on its own
    correspondence's u only, so those two runs give the two u columns (the reference's
    layout: [d/du0, d/du1, d/dtheta...] per residual row).  RVM_HT_DENSE=1 gives the program
    every vertex and every bone, as the reference computes (a like-for-like measurement: at
    hand1 and hand2 of the eval's default big model, 10,000 vertices, with --interleave 3 the
    objective took 2.6-2.8x manual's and the Jacobian 19-20x, manual's Jacobian propagating
    each finger angle through its own bones only; as the tool runs by default, 0.09-0.12x)."""
    model, data = inp["data"]["model"], inp["data"]
    theta = _f64(inp["theta"])
    parents = np.asarray(model["parents"], dtype=np.int64)
    nb = len(parents)
    if len(theta) != 26 or any(p >= b for b, p in enumerate(parents)):
        raise ValueError("ht: theta must have 26 values and each bone's parent come before it")
    br, iba = _f64(model["base_relatives"]), _f64(model["inverse_base_absolutes"])
    base = np.asarray(model["base_positions"], dtype=np.float64)      # (vertices, 4)
    weights = np.asarray(model["weights"], dtype=np.float64)          # (vertices, bones)
    if not np.all(base[:, 3] == 1.0):
        raise ValueError("ht: base positions must be homogeneous (fourth coordinate 1)")
    corr = np.asarray(data["correspondences"], dtype=np.int64)
    points = np.asarray(data["points"], dtype=np.float64).reshape(len(corr), 3)
    us = np.asarray(inp["us"], dtype=np.float64).reshape(-1, 2)
    tri = len(us) > 0
    npts = len(corr)
    verts = np.asarray(model["triangles"], dtype=np.int64)[corr] if tri else corr[:, None]
    if os.environ.get("RVM_HT_DENSE") == "1":
        # the reference's work, for a like-for-like measurement: every vertex skinned with
        # every bone's weight, zeros included
        used, slot = np.arange(len(base)), verts
        eb, ek = np.repeat(np.arange(nb), len(base)), np.tile(np.arange(len(base)), nb)
        wu = weights
    else:
        used, slot = np.unique(verts, return_inverse=True)
        slot = slot.reshape(verts.shape)
        wu = weights[used]                                            # (used, bones)
        eb, ek = np.nonzero(wu.T)                                     # sorted by bone, vertex
    bs = np.searchsorted(eb, np.arange(nb + 1))
    ne = max(len(eb), 1)
    pad = ne - len(eb)                                                # (no entry at all)
    inputs: dict[str, Any] = {
        "theta": theta, "amap": ht_pose_map(nb), "parent": parents, "br": br, "iba": iba,
        "rowsign": np.array([-1.0 if model["is_mirrored"] else 1.0, 1.0, 1.0]),
        "bs": bs.astype(np.int64),
        "ek": np.concatenate([ek, np.zeros(pad, np.int64)]),
        "ew": np.concatenate([wu[ek, eb], np.zeros(pad)])}
    for j, name in enumerate(("bx", "by", "bz")):
        inputs[name] = np.concatenate([base[used[ek], j], np.zeros(pad)])
    inputs.update({"tri": int(tri), "ia": slot[:, 0], "ib": slot[:, 1 if tri else 0],
                   "ic": slot[:, 2 if tri else 0],
                   "u0": np.ascontiguousarray(us[:, 0]) if tri else np.zeros(npts),
                   "u1": np.ascontiguousarray(us[:, 1]) if tri else np.zeros(npts)})
    inputs.update({f"pt{j}": np.ascontiguousarray(points[:, j]) for j in range(3)})
    nu = len(used)
    lengths = {"amap": 3 * nb, "parent": nb, "br": 16 * nb, "iba": 16 * nb, "bs": nb + 1,
               "ang": 3 * nb, "rr": 9 * nb, "rel": 16 * nb, "ab": 16 * nb, "tr": 12 * nb}
    lengths.update({n: nb for n in ("cx", "sx", "cy", "sy", "cz", "sz")})
    lengths.update({n: ne for n in ("ek", "ew", "bx", "by", "bz", "q0", "q1", "q2")})
    lengths.update({n: nu for n in ("sk0", "sk1", "sk2", "g0", "g1", "g2")})
    lengths.update({n: npts for n in ("ia", "ib", "ic", "u0", "u1", "pt0", "pt1", "pt2",
                                       "err0", "err1", "err2", "w2", "hp0", "hp1", "hp2")})
    prog = program("ht", tuple(sorted(lengths.items())))
    outs = ("err0", "err1", "err2")
    if function == "objective":
        r = Runner(prog, inputs, native)
        fw = r.forward(*outs)

        def objective(o: Any) -> Any:
            return np.stack(o, axis=1).ravel().tolist()
        return Evaluation(fw, objective)
    # the tangent seeds, one row per column of the Jacobian
    ncols = 26 + 2 * tri
    seeds: dict[str, np.ndarray] = {"theta": np.zeros((ncols, 26))}
    seeds["theta"][2 * tri:, :] = np.eye(26)
    if tri:
        seeds["u0"], seeds["u1"] = np.zeros((ncols, npts)), np.zeros((ncols, npts))
        seeds["u0"][0], seeds["u1"][1] = 1.0, 1.0
    J = np.empty((npts, 3, ncols))
    if not native:
        def interpreted() -> Any:
            for c in range(ncols):      # (rvm.jvp_batch would build native code)
                tc = rvm.jvp(prog, inputs, {n: v[c] for n, v in seeds.items()}, native=False)
                for j, name in enumerate(outs):
                    J[:, j, c] = tc[name]
            return J
        return Evaluation(interpreted, lambda J: J.reshape(3 * npts, ncols).tolist())
    # The tangent modes' code for tangents seeded at theta, u0 and u1 alone
    # (rvm/native/activity.py then leaves out the tangents of the model's and the data's
    # cells, which the code built for any differentiable global carries: 5-7% of a run),
    # installed on the machine rvm.jvp_batch runs on (as kmeans installs its own), and the
    # first call (jvp_batch: it checks the paths and leaves the machine's runner).
    from rvm import _core
    from rvm.ad import batches, engine
    from rvm.api import batch_words
    key = tuple(seeds)
    m = batches._machines(prog, ("jvp", key), 1)[0]
    cells = [a for g in prog.globals if g.name in seeds for a in range(g.addr, g.addr + g.size)]
    rvm.native.compile_tangent(prog, cells, lanes=False).install(m.core)
    ref = rvm.jvp_batch(prog, inputs, seeds, threads=1)
    # Then each run is jvp_batch's native call alone (rvm/_tanrows.pxi's jvp_rows: the
    # ncols tangent runs one after the other, in C): the inputs' words, the seeds and the
    # outputs' addresses, which depend on the input only, are made here once (jvp_batch
    # makes them at every call: 0.8 of its 2.6 ms at hand2), as the C++ tools keep their
    # parsed input.
    core = m.__dict__["_ad_runners"][(None, key)].core
    in_addrs, def_words, row_addrs, rw = batch_words(m, {}, inputs, ncols)
    rw = np.zeros((ncols, 0), dtype=np.int64)
    seed_addrs = np.array(cells, dtype=np.int64)
    seed_rows = np.ascontiguousarray(np.concatenate([seeds[g.name] for g in prog.globals
                                                     if g.name in seeds], axis=1))
    out_cells = engine.tangent_outputs(m)
    if [o[0] for o in out_cells] != list(outs):
        raise RuntimeError(f"ht: unexpected tangent outputs {out_cells}")
    out_addrs = np.array([a + j for _, a, size, _ in out_cells for j in range(size)],
                         dtype=np.int64)
    flat = np.zeros((ncols, 3, npts))
    status = np.ones(ncols, dtype=np.int64)

    def jacobian() -> Any:
        status[:] = 1
        if not _core.jvp_rows(core, in_addrs, def_words, row_addrs, rw, seed_addrs,  # type: ignore[attr-defined]
                              seed_rows, out_addrs, flat.reshape(ncols, 3 * npts), status) \
                or status.any():
            t = rvm.jvp_batch(prog, inputs, seeds, threads=1)   # (it reports what failed)
            flat[:] = np.stack([t[name] for name in outs], axis=1)
        J[...] = flat.transpose(2, 1, 0)
        return J
    # the cached call against jvp_batch's, bit for bit
    jacobian()
    if not all(np.array_equal(J[:, j, :], ref[name].T) for j, name in enumerate(outs)):
        raise RuntimeError("ht: the cached jvp_rows call and rvm.jvp_batch disagree")
    return Evaluation(jacobian, lambda J: J.reshape(3 * npts, ncols).tolist())


# GradBench's nested-AD variants: (outer mode, inner mode) of the programs, 1 forward, 0 reverse
NESTED_MODES = {"ff": (1, 1), "fr": (1, 0), "rf": (0, 1), "rr": (0, 0)}


def _nested(name: str, inputs: dict[str, Any], function: str,
            native: bool = True) -> Callable[[], Any]:
    """A forward run of a nested-AD program (its derivatives are derivative statements: native
    code, rvm/native/nested.py) in the variant `function`."""
    omode, imode = NESTED_MODES[function]
    m = rvm.Machine(program(name), native=native)
    if native:
        m.compile()
    values = dict(inputs, omode=omode, imode=imode)

    def run() -> Any:
        m.reset(values)
        m.run()
        return m
    run()
    return run


def saddle(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    """min_x max_y f(x, y) and then max_y f(x, y) by gradient descent, the outer gradient
    differentiating the inner descent's gradients (programs/gradbench/saddle.rasm: derivative
    statements in both levels, forward or reverse as `function` says)."""
    run = _nested("saddle", {"start": _f64(inp["start"])}, function, native)
    return Evaluation(run, lambda m: [float(v) for v in m.read("r1")] +
                      [float(v) for v in m.read("r2")])


def particle(function: str, inp: dict[str, Any], native: bool = True) -> Evaluation:
    """argmin_w of where the particle crosses the axis, by gradient descent over an Euler run
    whose steps take the potential's gradient (programs/gradbench/particle.rasm)."""
    run = _nested("particle", {"w0": float(inp["w"])}, function, native)
    return Evaluation(run, lambda m: float(m.read("w")))


MODULES: dict[str, Callable[..., Evaluation]] = {
    "lse": lse, "llsq": llsq, "det": det, "ode": ode, "kmeans": kmeans, "gmm": gmm, "ba": ba, "ht": ht,
    "saddle": saddle, "particle": particle}


def prepare(module: str, function: str, inp: dict[str, Any],
            native: bool = True) -> Evaluation:
    """A callable that evaluates `function` of eval `module` at `inp` once (JSON output)."""
    return MODULES[module](function, inp, native)
