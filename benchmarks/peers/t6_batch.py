"""T6: gradients of the Petersen loss (T5's program) at B = 10^4 random points, in one call.

X holds B points, each a 40-vector x ~ N(0, 1) from a fixed seed; every peer returns the
(B, 40) array of d loss / d x at every point.  Peers: C (t5_grad in a loop over the points,
one thread), numpy (the hand adjoint vectorized over points and pairs),
jax.jit(jax.vmap(jax.grad(f))) and torch.func.vmap(torch.func.grad(f)).  rvm: `f.batch` of a
grad_fn when rvm has it (lanes spread over the cores), else a loop of grad_fn calls (native
code, one thread).  The "1 thread" case times rvm on one thread, for the per-point ratio to C
and the speed-up from the second core.
"""
from __future__ import annotations

import ctypes
import inspect
import time
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from . import rvm_side
from .common import Impl, Skip, c_lib, dptr
from .engine import Ctx, Row, run_case
from .t5_petersen import EDGES, NON_EDGES, NV, PROGRAM, RVM_OUT, RVM_X, K, _loss, _pairs

N = NV * K
ALL, ONE = "B=10^4", "B=10^4, 1 thread"


def size(quick: bool) -> int:
    return 10**4


@cache
def points(b: int) -> np.ndarray:
    return np.random.default_rng(6).standard_normal((b, N))


def _batch_threads(f: Any) -> str | None:
    """The keyword of f.batch that sets its thread count, if it has one."""
    try:
        params = inspect.signature(f.batch).parameters
    except (TypeError, ValueError):
        return None
    return next((p for p in ("threads", "workers", "n_threads") if p in params), None)


def rvm_impl(b: int, one_thread: bool) -> Impl:
    if rvm_side.program_path(PROGRAM) is None:
        raise Skip(f"rvm: {PROGRAM} not written yet")
    import rvm
    prog = rvm_side.program(PROGRAM)
    X = points(b)
    f = rvm.grad_fn(prog, of=RVM_OUT, wrt=[RVM_X], native=False)
    t0 = time.perf_counter()            # the native build (or the disk cache's) -> compile
    try:
        f.compile()
        how = f"{f.native}"
        if hasattr(f, "compile_batch"):     # the batch lanes' library (rvm/native/lanes.py)
            how += f"; batch: {f.compile_batch()}"
    except (rvm.native.Unsupported, rvm.native.BuildError) as e:
        how = f"interpreted ({e})"
    compile_s = time.perf_counter() - t0
    if one_thread and not hasattr(f, "batch"):
        raise Skip("rvm: no f.batch yet (the row above is one thread already)")
    f({RVM_X: X[0]})                       # the first (general) call
    if hasattr(f, "batch"):
        kw = _batch_threads(f)
        if one_thread and kw is None:
            raise Skip("rvm: f.batch has no thread-count argument")
        opts = {kw: 1} if one_thread and kw else {}

        def grad() -> dict[str, np.ndarray]:
            return {RVM_X: np.asarray(f.batch({RVM_X: X}, **opts)[RVM_X])}

        note = f"f.batch, {'1 thread' if one_thread else 'all cores'}, {how}"
    else:
        rows = list(X)

        def grad() -> dict[str, np.ndarray]:
            return {RVM_X: np.array([f({RVM_X: x})[RVM_X] for x in rows])}

        note = f"a loop of grad_fn calls (no f.batch yet), 1 thread, {how}"
    return Impl(None, grad, note=note, compile_s=compile_s)


def c_impl(b: int) -> Impl:
    lib = c_lib("t5_petersen")
    lib.t6_grad_points.restype = None
    lib.t5_forward.restype = ctypes.c_double
    a, bb = _pairs()
    X = points(b)
    G = np.empty_like(X)
    pa, pb = ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(bb.ctypes.data)
    args = (ctypes.c_int(K), ctypes.c_int(NV), ctypes.c_int(len(EDGES)),
            ctypes.c_int(len(NON_EDGES)), pa, pb, dptr(X), dptr(G), ctypes.c_long(b))

    def grad() -> dict[str, np.ndarray]:
        lib.t6_grad_points(*args, ctypes.c_long(1))
        return {RVM_X: G.copy()}

    return Impl(None, grad, grad_loop=lambda k: lib.t6_grad_points(*args, ctypes.c_long(k)),
                note="t5_grad in a loop over the points, 1 thread", extra={"keep": (a, bb, X, G)})


def numpy_impl(b: int) -> Impl:
    X = points(b)
    sets = []
    for pairs in (EDGES, NON_EDGES):
        sets.append((np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])))

    def grad() -> dict[str, np.ndarray]:
        P = X.reshape(b, NV, K)
        g = np.zeros_like(P)
        for a, bb in sets:
            diff = P[:, a] - P[:, bb]                               # (B, n, K)
            d = np.sqrt(np.einsum("bij,bij->bi", diff, diff))      # (B, n)
            n = d.shape[1]
            gm = -2.0 * d.mean(axis=1, keepdims=True) * n / (n - 1)
            t = (2.0 * (1.0 / (n - 1) + gm / n * 0.5 / d))[:, :, None] * diff
            for j in range(n):          # scatter per pair (a vertex occurs in several)
                g[:, a[j]] += t[:, j]
                g[:, bb[j]] -= t[:, j]
        return {RVM_X: g.reshape(b, N)}

    return Impl(None, grad, note="hand adjoint vectorized over points")


def torch_impl(b: int) -> Impl:
    import torch
    import torch.func

    class _T:
        reshape = staticmethod(torch.reshape)
        sqrt = staticmethod(torch.sqrt)

        @staticmethod
        def sum(t: Any, axis: int | None = None) -> Any:
            return t.sum() if axis is None else t.sum(dim=axis)

    X = torch.tensor(points(b))
    g = torch.func.vmap(torch.func.grad(lambda v: _loss(_T, v)))
    return Impl(None, lambda: {RVM_X: g(X)}, note="torch.func.vmap(torch.func.grad(f))")


def jax_impl(b: int) -> Impl:
    import jax
    import jax.numpy as jnp
    X = jnp.asarray(points(b))
    g = jax.jit(jax.vmap(jax.grad(lambda v: _loss(jnp, v))))
    return Impl(None, lambda: {RVM_X: g(X).block_until_ready()}, jit=True,
                note="jax.jit(jax.vmap(jax.grad(f)))")


NOTES = ["B points x ~ N(0, 1)^40 from a fixed seed; every peer returns the (B, 40) gradients; "
         "the gradient column is the time for all B"]


def run(ctx: Ctx) -> list[Row]:
    b = size(ctx.quick)
    facs: dict[str, Callable[[], Impl]] = {
        "rvm": lambda: rvm_impl(b, False), "C": lambda: c_impl(b),
        "numpy": lambda: numpy_impl(b), "torch": lambda: torch_impl(b),
        "jax": lambda: jax_impl(b)}
    rows = run_case(ctx, "T6", ALL, b, facs, rtol=1e-9, atol=1e-12)
    one = {"rvm": lambda: rvm_impl(b, True), "C": lambda: c_impl(b)}
    rows += run_case(ctx, "T6", ONE, b, one, rtol=1e-9, atol=1e-12)
    return rows
