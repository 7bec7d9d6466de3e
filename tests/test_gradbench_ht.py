"""GradBench's ht eval (hand tracking) as an rvm program (programs/gradbench/ht.rasm,
benchmarks/gradbench_rvm/programs.py's ht): the objective against a numpy transcription of
the C++ reference (cpp/gradbench/evals/ht.hpp) and the Jacobian against central finite
differences of it, on a random hand (always) and on the eval's smallest data files (hand1,
complicated and simple, when a GradBench checkout is found: $GRADBENCH or /tmp/gb/gradbench;
skipped otherwise).  Native code is off: the interpreter gives the same numbers."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gradbench_rvm import programs  # noqa: E402

GRADBENCH = Path(os.environ.get("GRADBENCH", "/tmp/gb/gradbench"))
DATA = GRADBENCH / "evals" / "ht" / "data"


def euler(xzy: np.ndarray) -> np.ndarray:
    tx, ty, tz = xzy[0], xzy[2], xzy[1]
    rx = np.array([[1, 0, 0], [0, np.cos(tx), -np.sin(tx)], [0, np.sin(tx), np.cos(tx)]])
    ry = np.array([[np.cos(ty), 0, np.sin(ty)], [0, 1, 0], [-np.sin(ty), 0, np.cos(ty)]])
    rz = np.array([[np.cos(tz), -np.sin(tz), 0], [np.sin(tz), np.cos(tz), 0], [0, 0, 1]])
    return rz @ ry @ rx


def angle_axis(a: np.ndarray) -> np.ndarray:
    n = np.sqrt(a @ a)
    if n < 1e-4:
        return np.eye(3)
    x, y, z = a / n
    s, c = np.sin(n), np.cos(n)
    return np.array([[x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s],
                     [x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s],
                     [x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c]])


def reference(theta: np.ndarray, us: np.ndarray, inp: dict[str, Any]) -> np.ndarray:
    """The residuals as the C++ reference computes them (every vertex, every bone)."""
    m = inp["data"]["model"]
    nb = len(m["parents"])
    pose = np.zeros((3, nb + 3))
    pose[:, 0], pose[:, 1], pose[:, 2] = theta[:3], 1.0, theta[3:6]
    it, ip = 6, 5
    for _finger in range(5):
        for i in range(2, 5):
            pose[0, ip] = theta[it]
            it += 1
            if i == 2:
                pose[1, ip] = theta[it]
                it += 1
            ip += 1
        ip += 1
    br, iba = np.array(m["base_relatives"]), np.array(m["inverse_base_absolutes"])
    absolutes: list[np.ndarray] = []
    for b in range(nb):
        t = np.eye(4)
        t[:3, :3] = euler(pose[:, b + 3])
        rel = br[b] @ t
        absolutes.append(rel if m["parents"][b] < 0 else absolutes[m["parents"][b]] @ rel)
    base, w = np.array(m["base_positions"]).T, np.array(m["weights"]).T
    pos = np.zeros((3, base.shape[1]))
    for b in range(nb):
        pos += ((absolutes[b] @ iba[b]) @ base)[:3] * w[b]
    if m["is_mirrored"]:
        pos[0] *= -1
    pos = angle_axis(pose[:, 0]) @ pos + pose[:, 2:3]
    corr, pts = inp["data"]["correspondences"], np.array(inp["data"]["points"])
    if len(us) == 0:
        return (pts - pos[:, corr].T).ravel()
    us = us.reshape(-1, 2)
    tris = np.array(m["triangles"])[corr]
    hp = (us[:, :1] * pos[:, tris[:, 0]].T + us[:, 1:] * pos[:, tris[:, 1]].T +
          (1 - us[:, :1] - us[:, 1:]) * pos[:, tris[:, 2]].T)
    return (pts - hp).ravel()


def random_hand(seed: int, complicated: bool, mirrored: bool = False) -> dict[str, Any]:
    """A hand of 22 bones (the eval's pose map needs them), 12 vertices and 5 triangles, 7
    correspondences: random rigid base transforms, 1-3 bones of nonzero weight a vertex."""
    rng = np.random.default_rng(seed)
    nb, nv = 22, 12

    def rigid() -> list:
        t = np.eye(4)
        t[:3, :3] = euler(rng.uniform(-1, 1, 3))
        t[:3, 3] = rng.uniform(-0.5, 0.5, 3)
        return t.tolist()
    weights = np.zeros((nv, nb))
    for v in range(nv):
        bones = rng.choice(nb, rng.integers(1, 4), replace=False)
        weights[v, bones] = rng.dirichlet(np.ones(len(bones)))
    tris = rng.integers(0, nv, (5, 3))
    npts = 7
    corr = rng.integers(0, 5 if complicated else nv, npts)
    theta = rng.uniform(-0.6, 0.6, 26)
    return {"theta": theta.tolist(),
            "us": rng.uniform(0, 0.5, (npts, 2)).tolist() if complicated else [],
            "data": {"model": {
                "bone_count": nb, "bone_names": [f"b{i}" for i in range(nb)],
                "parents": [-1] + [int(rng.integers(0, b)) for b in range(1, nb)],
                "base_relatives": [rigid() for _ in range(nb)],
                "inverse_base_absolutes": [rigid() for _ in range(nb)],
                "base_positions": np.hstack([rng.uniform(-1, 1, (nv, 3)),
                                             np.ones((nv, 1))]).tolist(),
                "weights": weights.tolist(), "triangles": tris.tolist(),
                "is_mirrored": mirrored},
                "correspondences": corr.tolist(),
                "points": rng.uniform(-1, 1, (npts, 3)).tolist()}}


def read_hand(variant: str, i: int) -> dict[str, Any]:
    """The eval's input (gradbench/evals/ht/io.py's read_hand_instance, as JSON) of
    evals/ht/data/{variant}_small/hand{i}_*.txt."""
    folder = DATA / f"{variant}_small"
    model = folder / "model"
    bones = [line.strip().split(":") for line in open(model / "bones.txt")]
    nb = len(bones)
    rel = np.array([[float(x) for x in b[2:18]] for b in bones]).reshape(nb, 4, 4)
    inv = np.array([[float(x) for x in b[18:34]] for b in bones]).reshape(nb, 4, 4)
    pos, weights = [], []
    for line in open(model / "vertices.txt"):
        a = line.split(":")
        pos.append([float(x) for x in a[:3]] + [1.0])
        w = [0.0] * nb
        for k in range(int(a[8])):
            w[int(a[9 + 2 * k])] = float(a[10 + 2 * k])
        weights.append(w)
    tris = [[int(x) for x in line.split(":")] for line in open(model / "triangles.txt")]
    fn = next(folder.glob(f"hand{i}_*.txt"))
    lines = fn.read_text().split("\n")
    npts, ntheta = map(int, lines[0].split())
    rows = [line.split() for line in lines[1:1 + npts]]
    at = 1 + npts
    us: list = []
    if variant == "complicated":
        us = [[float(x) for x in line.split()] for line in lines[at:at + npts]]
        at += npts
    theta = [float(x) for x in lines[at:at + ntheta]]
    return {"theta": theta, "us": us, "data": {
        "model": {"bone_count": nb, "bone_names": [b[0] for b in bones],
                  "parents": [int(b[1]) for b in bones], "base_relatives": rel.tolist(),
                  "inverse_base_absolutes": inv.tolist(), "base_positions": pos,
                  "weights": weights, "triangles": tris, "is_mirrored": False},
        "correspondences": [int(r[0]) for r in rows],
        "points": [[float(x) for x in r[1:]] for r in rows]}}


def check(inp: dict[str, Any], h: float = 1e-6) -> None:
    theta, us = np.array(inp["theta"]), np.array(inp["us"], dtype=float).ravel()
    ref = reference(theta, us, inp)
    got = np.array(programs.prepare("ht", "objective", inp, native=False)())
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
    jac = np.array(programs.prepare("ht", "jacobian", inp, native=False)())
    cols = []
    if len(us):                         # the reference's layout: d/du0, d/du1, d/dtheta
        for c in range(2):
            d = np.zeros(len(us))
            d[c::2] = h
            cols.append((reference(theta, us + d, inp) - reference(theta, us - d, inp)) / (2 * h))
    for e in np.eye(26):
        cols.append((reference(theta + h * e, us, inp) - reference(theta - h * e, us, inp)) /
                    (2 * h))
    fd = np.stack(cols, axis=1)
    assert jac.shape == fd.shape
    np.testing.assert_allclose(jac, fd, rtol=0, atol=1e-7 * max(1.0, np.abs(fd).max()))


@pytest.mark.parametrize("complicated", [True, False], ids=["complicated", "simple"])
def test_ht_random_hand(complicated):
    check(random_hand(1, complicated))


def test_ht_mirrored_and_identity_rotation():
    """A mirrored model, and a global rotation below the reference's 1e-4 (the identity)."""
    inp = random_hand(2, True, mirrored=True)
    check(inp)
    inp["theta"][:3] = [1e-5, -2e-5, 0.0]
    theta, us = np.array(inp["theta"]), np.array(inp["us"]).ravel()
    got = np.array(programs.prepare("ht", "objective", inp, native=False)())
    np.testing.assert_allclose(got, reference(theta, us, inp), rtol=0, atol=1e-12)


def test_ht_dense_gives_the_same(monkeypatch):
    """RVM_HT_DENSE=1 (every vertex, every bone, as the reference computes) gives the same
    objective and Jacobian."""
    inp = random_hand(3, True)
    sparse = [programs.prepare("ht", f, inp, native=False)() for f in ("objective", "jacobian")]
    monkeypatch.setenv("RVM_HT_DENSE", "1")
    dense = [programs.prepare("ht", f, inp, native=False)() for f in ("objective", "jacobian")]
    np.testing.assert_allclose(dense[0], sparse[0], rtol=0, atol=1e-14)
    np.testing.assert_allclose(dense[1], sparse[1], rtol=0, atol=1e-13)


def test_ht_pose_map():
    """theta's 20 finger angles: two of each finger's second bone, one of its third and
    fourth (the reference's to_pose_params); the first bone of each finger and the wrist
    stay zero."""
    amap = programs.ht_pose_map(22).reshape(22, 3)
    assert amap[2].tolist() == [6, 7, -1] and amap[3].tolist() == [8, -1, -1]
    assert amap[4].tolist() == [9, -1, -1] and amap[6].tolist() == [10, 11, -1]
    assert sorted(amap[amap >= 0].tolist()) == list(range(6, 26))


@pytest.mark.skipif(not DATA.is_dir(), reason=f"no GradBench checkout at {GRADBENCH}")
@pytest.mark.parametrize("variant", ["complicated", "simple"])
def test_ht_smallest_data_file(variant):
    """hand1 (100 correspondences) of the eval's own data, small model (544 vertices)."""
    check(read_hand(variant, 1))
