"""T5: the Petersen graph embedding loss, k = 4 (NiLang paper, section IV E): one gradient,
and the full 40 x 40 Hessian.

x places the 10 vertices in k dimensions (vertex-major: x[v*k + r]).  D1 / D2 are the
Euclidean distances over the 15 edges / 30 non-edges, v = their sample variances, computed as
(sum D^2 - (sum D)^2 / n) / (n - 1):   loss = v1 + v2,  exactly as programs/petersen.rasm
(which leaves out the paper's exp(relu(m1 - m2 + 0.1)) - 1 term).  x from a fixed seed.
"""
from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from . import rvm_side
from .common import Impl, Skip, c_lib, dptr
from .engine import Ctx, Row, run_case

PROGRAM = "programs/petersen.rasm"
K, NV = 4, 10
RVM_X, RVM_OUT = "x", "loss"
RVM_EXTRA: dict[str, Any] = {}

# outer 5-cycle, spokes, inner pentagram (vertices 0..9)
EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (0, 4), (0, 5), (1, 6), (2, 7), (3, 8), (4, 9),
         (5, 7), (7, 9), (6, 9), (6, 8), (5, 8)]
NON_EDGES = [(i, j) for i in range(NV) for j in range(i + 1, NV)
             if (i, j) not in EDGES and (j, i) not in EDGES]


@cache
def data() -> np.ndarray:
    return np.random.default_rng(5).standard_normal(NV * K)


def _pairs() -> tuple[np.ndarray, np.ndarray]:
    a = np.array([p[0] for p in EDGES + NON_EDGES], dtype=np.int32)
    b = np.array([p[1] for p in EDGES + NON_EDGES], dtype=np.int32)
    return a, b


def rvm_impl() -> Impl:
    if rvm_side.program_path(PROGRAM) is None:
        raise Skip(f"rvm: {PROGRAM} not written yet")
    prog = rvm_side.program(PROGRAM)
    return rvm_side.impl(prog, {RVM_X: data(), **RVM_EXTRA}, of=RVM_OUT, wrt=[RVM_X])


def c_impl() -> Impl:
    lib = c_lib("t5_petersen")
    lib.t5_forward.restype = lib.t5_grad.restype = ctypes.c_double
    a, b = _pairs()
    x = data()
    gx = np.empty_like(x)
    n1, n2 = len(EDGES), len(NON_EDGES)
    pa, pb = ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(b.ctypes.data)
    fargs = (ctypes.c_int(K), ctypes.c_int(n1), ctypes.c_int(n2), pa, pb, dptr(x))
    gargs = (ctypes.c_int(K), ctypes.c_int(NV), ctypes.c_int(n1), ctypes.c_int(n2), pa, pb,
             dptr(x), dptr(gx))

    def grad() -> dict[str, np.ndarray]:
        lib.t5_grad(*gargs, ctypes.c_long(1))
        return {RVM_X: gx.copy()}

    return Impl(lambda: lib.t5_forward(*fargs, ctypes.c_long(1)), grad,
                forward_loop=lambda k: lib.t5_forward(*fargs, ctypes.c_long(k)),
                grad_loop=lambda k: lib.t5_grad(*gargs, ctypes.c_long(k)),
                extra={"keep": (a, b, x, gx)})   # the C side holds raw pointers


def python_impl() -> Impl:
    x0 = data().tolist()
    sets = (EDGES, NON_EDGES)

    def stats(x: list[float]) -> tuple[list[list[float]], list[float], list[float]]:
        dist, ms, vs = [], [], []
        for pairs in sets:
            ds = []
            for a, b in pairs:
                s = 0.0
                for r in range(K):
                    t = x[a * K + r] - x[b * K + r]
                    s += t * t
                ds.append(math.sqrt(s))
            n = len(ds)
            m = sum(ds) / n
            vs.append((sum(d * d for d in ds) / n - m * m) * n / (n - 1))
            ms.append(m)
            dist.append(ds)
        return dist, ms, vs

    def forward() -> float:
        _, _, vs = stats(x0)
        return vs[0] + vs[1]

    def grad() -> dict[str, np.ndarray]:
        x = x0
        dist, ms, _ = stats(x)
        g = [0.0] * (NV * K)
        for si, pairs in enumerate(sets):
            n = len(pairs)
            gm = -2.0 * ms[si] * n / (n - 1)             # d v / d mean
            for (a, b), d in zip(pairs, dist[si]):
                gd2 = 1.0 / (n - 1) + gm / n * 0.5 / d      # d loss / d (squared distance)
                for r in range(K):
                    t = 2.0 * gd2 * (x[a * K + r] - x[b * K + r])
                    g[a * K + r] += t
                    g[b * K + r] -= t
        return {RVM_X: np.array(g)}

    return Impl(forward, grad)


def _loss(np_: Any, x: Any) -> Any:
    """The loss in an array library's vectorized ops (numpy API: autograd.numpy, jax.numpy)."""
    p = np_.reshape(x, (NV, K))
    out = 0.0
    for pairs in (EDGES, NON_EDGES):
        a = np.array([q[0] for q in pairs])
        b = np.array([q[1] for q in pairs])
        diff = p[a] - p[b]
        d2 = np_.sum(diff * diff, axis=1)
        d = np_.sqrt(d2)
        n = len(pairs)
        m = np_.sum(d) / n
        out = out + (np_.sum(d2) / n - m * m) * n / (n - 1)
    return out


def numpy_impl() -> Impl:
    x = data()
    a1, b1 = (np.array(v) for v in zip(*EDGES))
    a2, b2 = (np.array(v) for v in zip(*NON_EDGES))

    def grad() -> dict[str, np.ndarray]:
        p = x.reshape(NV, K)
        g = np.zeros_like(p)
        res = []
        for a, b in ((a1, b1), (a2, b2)):
            diff = p[a] - p[b]
            d = np.sqrt(np.einsum("ij,ij->i", diff, diff))
            res.append((a, b, diff, d, d.mean()))
        for a, b, diff, d, m in res:
            n = len(d)
            gm = -2.0 * m * n / (n - 1)
            t = (2.0 * (1.0 / (n - 1) + gm / n * 0.5 / d))[:, None] * diff
            np.add.at(g, a, t)
            np.subtract.at(g, b, t)
        return {RVM_X: g.reshape(-1)}

    return Impl(lambda: _loss(np, x), grad, note="vectorized hand adjoint")


def autograd_impl() -> Impl:
    import autograd
    import autograd.numpy as anp
    x = data()
    g = autograd.grad(lambda v: _loss(anp, v))
    return Impl(lambda: _loss(np, x), lambda: {RVM_X: g(x)},
                note="vectorized; forward = untraced")


def torch_impl() -> Impl:
    import torch

    class _T:   # the numpy names _loss uses, in torch
        reshape = staticmethod(torch.reshape)
        sqrt = staticmethod(torch.sqrt)

        @staticmethod
        def sum(t: Any, axis: int | None = None) -> Any:
            return t.sum() if axis is None else t.sum(dim=axis)


    x = torch.tensor(data(), requires_grad=True)

    def forward() -> Any:
        with torch.no_grad():
            return _loss(_T, x)

    def grad() -> dict[str, Any]:
        (gx,) = torch.autograd.grad(_loss(_T, x), x)
        return {RVM_X: gx}

    return Impl(forward, grad, note="vectorized tensor ops")


def jax_impl() -> Impl:
    import jax
    import jax.numpy as jnp
    x = jnp.asarray(data())
    fwd = jax.jit(lambda v: _loss(jnp, v))
    g = jax.jit(jax.grad(lambda v: _loss(jnp, v)))
    return Impl(lambda: fwd(x).block_until_ready(),
                lambda: {RVM_X: g(x).block_until_ready()}, jit=True, note="vectorized")


FACTORIES: dict[str, Callable[[], Impl]] = {
    "rvm": rvm_impl, "C": c_impl, "python": python_impl, "numpy": numpy_impl,
    "autograd": autograd_impl, "torch": torch_impl, "jax": jax_impl,
}
NOTES = [f"x: {NV} vertices x k = {K} coordinates from a fixed seed; 15 edges, 30 non-edges",
         "the Hessian rows time the full 40 x 40 Hessian (rvm: rvm.hessian; C: closed form) "
         "in the gradient column"]

HESSIAN = "Hessian 40x40"


def rvm_hessian_impl() -> Impl:
    """rvm.hessian(prog, of, wrt, inputs) called as a user would, every call."""
    if rvm_side.program_path(PROGRAM) is None:
        raise Skip(f"rvm: {PROGRAM} not written yet")
    import rvm
    prog = rvm_side.program(PROGRAM)
    inputs = {RVM_X: data(), **RVM_EXTRA}

    def grad() -> dict[str, np.ndarray]:
        return {"H": rvm.hessian(prog, of=RVM_OUT, wrt=[RVM_X], inputs=inputs)}

    compile_s, how = rvm_side.build_tangent(prog, lambda: rvm.hessian(
        prog, of=RVM_OUT, wrt=[RVM_X], inputs=inputs, native=True))
    return Impl(None, grad, note=f"rvm.hessian(prog, ...) per call, {how}", compile_s=compile_s)


def c_hessian_impl() -> Impl:
    lib = c_lib("t5_petersen")
    lib.t5_hessian.restype = ctypes.c_double
    a, b = _pairs()
    x = data()
    H = np.empty((NV * K, NV * K))
    pa, pb = ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(b.ctypes.data)
    args = (ctypes.c_int(K), ctypes.c_int(NV), ctypes.c_int(len(EDGES)),
            ctypes.c_int(len(NON_EDGES)), pa, pb, dptr(x), dptr(H))

    def grad() -> dict[str, np.ndarray]:
        lib.t5_hessian(*args, ctypes.c_long(1))
        return {"H": H.copy()}

    return Impl(None, grad, grad_loop=lambda k: lib.t5_hessian(*args, ctypes.c_long(k)),
                note="closed form", extra={"keep": (a, b, x, H)})


def torch_hessian_impl() -> Impl:
    import torch
    import torch.func

    class _T:
        reshape = staticmethod(torch.reshape)
        sqrt = staticmethod(torch.sqrt)

        @staticmethod
        def sum(t: Any, axis: int | None = None) -> Any:
            return t.sum() if axis is None else t.sum(dim=axis)

    x = torch.tensor(data())
    h = torch.func.hessian(lambda v: _loss(_T, v))
    return Impl(None, lambda: {"H": h(x)}, note="torch.func.hessian (eager)")


def jax_hessian_impl() -> Impl:
    import jax
    import jax.numpy as jnp
    x = jnp.asarray(data())
    h = jax.jit(jax.hessian(lambda v: _loss(jnp, v)))
    return Impl(None, lambda: {"H": h(x).block_until_ready()}, jit=True,
                note="jax.jit(jax.hessian(f))")


HESSIAN_FACTORIES: dict[str, Callable[[], Impl]] = {
    "rvm": rvm_hessian_impl, "C": c_hessian_impl, "torch": torch_hessian_impl,
    "jax": jax_hessian_impl,
}


def run(ctx: Ctx) -> list[Row]:
    return run_case(ctx, "T5", f"k={K}", K, dict(FACTORIES), rtol=1e-9, atol=1e-12) + \
        run_case(ctx, "T5", HESSIAN, K, dict(HESSIAN_FACTORIES), rtol=1e-8, atol=1e-10)
