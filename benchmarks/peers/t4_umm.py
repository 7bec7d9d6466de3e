"""T4: unitary matrix multiplication by N(N-1)/2 Givens rotations (the NiLang paper's umm!),
loss = sum(x), gradient wrt x and theta.

Rotation r acts on the pair (k_r, l_r), k_r < l_r, with angle theta_r:
    (x_k, x_l) <- (c x_k - s x_l,  s x_k + c x_l),   c = cos theta_r, s = sin theta_r,
in the order of `pairs(N)`, which matches benchmarks/gen_programs.py `umm(n)`.  Inputs: x
~ N(0, 1) and theta ~ U(-pi, pi) from a fixed seed, the same arrays for every peer.
"""
from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from . import rvm_side
from .common import ROOT, Impl, Skip, c_lib, dptr
from .engine import Ctx, Row, run_case

RVM_X, RVM_THETA, RVM_OUT = "x", "theta", "loss"


def sizes(quick: bool) -> list[int]:
    return [10, 100] if quick else [10, 100, 300]


@cache
def pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(k, l) of each rotation in program order: for k < l, k outer."""
    ks, ls = [], []
    for k in range(n):
        for l in range(k + 1, n):
            ks.append(k)
            ls.append(l)
    return np.array(ks, dtype=np.int32), np.array(ls, dtype=np.int32)


@cache
def data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    x = rng.standard_normal(n)
    theta = rng.uniform(-math.pi, math.pi, n * (n - 1) // 2)
    return x, theta


def rvm_impl(n: int) -> Impl:
    try:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import gen_programs
    except ImportError:
        raise Skip("rvm: benchmarks/gen_programs.py (umm) not written yet") from None
    if not hasattr(gen_programs, "umm"):
        raise Skip("rvm: gen_programs.umm not written yet")
    try:
        src = gen_programs.umm(n, defaults=False)   # our x, theta are passed as inputs
    except TypeError:
        src = gen_programs.umm(n)
    prog = rvm_side.program(src) if isinstance(src, str) else src
    x, theta = data(n)
    return rvm_side.impl(prog, {RVM_X: x, RVM_THETA: theta}, of=RVM_OUT, wrt=[RVM_X, RVM_THETA])


def c_impl(n: int) -> Impl:
    lib = c_lib("t4_umm")
    lib.t4_forward.restype = lib.t4_grad.restype = ctypes.c_double
    ks, ls = pairs(n)
    x0, theta = data(n)
    m = len(theta)
    x, gx, gt, cs = np.empty(n), np.empty(n), np.empty(m), np.empty(2 * m)
    pk, pl = ctypes.c_void_p(ks.ctypes.data), ctypes.c_void_p(ls.ctypes.data)
    args = (ctypes.c_int(n), ctypes.c_long(m), pk, pl, dptr(theta), dptr(x0), dptr(x))
    gargs = args + (dptr(gx), dptr(gt), dptr(cs))

    def grad() -> dict[str, np.ndarray]:
        lib.t4_grad(*gargs, ctypes.c_long(1))
        return {RVM_X: gx.copy(), RVM_THETA: gt.copy()}

    return Impl(lambda: lib.t4_forward(*args, ctypes.c_long(1)), grad,
                forward_loop=lambda k: lib.t4_forward(*args, ctypes.c_long(k)),
                grad_loop=lambda k: lib.t4_grad(*gargs, ctypes.c_long(k)),
                extra={"keep": (ks, ls, x0, theta, x, gx, gt, cs)})   # the C side holds raw pointers


def python_impl(n: int) -> Impl:
    ks, ls = (a.tolist() for a in pairs(n))
    x0, theta = (a.tolist() for a in data(n))
    rot = list(zip(ks, ls, theta))

    def forward() -> float:
        x = list(x0)
        for k, l, t in rot:
            c, s = math.cos(t), math.sin(t)
            a, b = x[k], x[l]
            x[k] = c * a - s * b
            x[l] = s * a + c * b
        return sum(x)

    def grad() -> dict[str, Any]:
        x = list(x0)
        cs = []
        for k, l, t in rot:
            c, s = math.cos(t), math.sin(t)
            cs.append((c, s))
            a, b = x[k], x[l]
            x[k] = c * a - s * b
            x[l] = s * a + c * b
        g = [1.0] * n
        gt = [0.0] * len(rot)
        for i in range(len(rot) - 1, -1, -1):    # reverse sweep, uncomputing x
            k, l, _ = rot[i]
            c, s = cs[i]
            a, b = x[k], x[l]
            ga, gb = g[k], g[l]
            gt[i] = gb * a - ga * b
            g[k] = c * ga + s * gb
            g[l] = -s * ga + c * gb
            x[k] = c * a + s * b
            x[l] = -s * a + c * b
        return {RVM_X: np.array(g), RVM_THETA: np.array(gt)}

    return Impl(forward, grad)


def _rotate_list(xs: list[Any], cs: list[Any], ss: list[Any], ks: list[int],
                 ls: list[int]) -> list[Any]:
    """The rotations on a list of scalars of any AD library (autograd, torch)."""
    xs = list(xs)
    for c, s, k, l in zip(cs, ss, ks, ls):
        a, b = xs[k], xs[l]
        xs[k] = c * a - s * b
        xs[l] = s * a + c * b
    return xs


def autograd_impl(n: int) -> Impl:
    import autograd
    import autograd.numpy as anp
    ks, ls = (a.tolist() for a in pairs(n))
    x0, theta = data(n)

    def f(p: tuple[Any, Any]) -> Any:
        x, th = p
        c, s = anp.cos(th), anp.sin(th)
        xs = _rotate_list([x[i] for i in range(n)], [c[i] for i in range(len(ks))],
                          [s[i] for i in range(len(ks))], ks, ls)
        return sum(xs)

    g = autograd.grad(f)

    def grad() -> dict[str, Any]:
        gx, gt = g((x0, theta))
        return {RVM_X: gx, RVM_THETA: gt}

    return Impl(lambda: f((x0, theta)), grad, note="forward = the untraced function")


def torch_impl(n: int) -> Impl:
    import torch
    ks, ls = (a.tolist() for a in pairs(n))
    x0, theta = data(n)
    x = torch.tensor(x0, requires_grad=True)
    th = torch.tensor(theta, requires_grad=True)

    def f() -> Any:
        xs = _rotate_list(list(x.unbind()), list(torch.cos(th).unbind()),
                          list(torch.sin(th).unbind()), ks, ls)
        return torch.stack(xs).sum()

    def forward() -> Any:
        with torch.no_grad():
            return f()

    def grad() -> dict[str, Any]:
        gx, gt = torch.autograd.grad(f(), (x, th))
        return {RVM_X: gx, RVM_THETA: gt}

    return Impl(forward, grad, note="scalar ops on unbound tensors")


def jax_impl(n: int) -> Impl:
    import jax
    import jax.numpy as jnp
    from jax import lax
    ks, ls = (jnp.asarray(a) for a in pairs(n))
    x0, theta = (jnp.asarray(a) for a in data(n))
    m = int(theta.shape[0])

    def f(x: Any, th: Any) -> Any:
        c, s = jnp.cos(th), jnp.sin(th)

        def body(i: Any, x: Any) -> Any:
            k, l = ks[i], ls[i]
            a, b = x[k], x[l]
            return x.at[k].set(c[i] * a - s[i] * b).at[l].set(s[i] * a + c[i] * b)

        return jnp.sum(lax.fori_loop(0, m, body, x))

    fwd = jax.jit(f)
    g = jax.jit(jax.grad(f, argnums=(0, 1)))

    def grad() -> dict[str, Any]:
        gx, gt = jax.block_until_ready(g(x0, theta))
        return {RVM_X: gx, RVM_THETA: gt}

    return Impl(lambda: fwd(x0, theta).block_until_ready(), grad, jit=True)


FACTORIES: dict[str, Callable[[int], Impl]] = {
    "rvm": rvm_impl, "C": c_impl, "python": python_impl, "autograd": autograd_impl,
    "torch": torch_impl, "jax": jax_impl,
}
NOTES = ["numpy: no vectorized form of T4 (a serial chain of rotations, each on two cells)"]


def run(ctx: Ctx) -> list[Row]:
    rows: list[Row] = []
    for n in sizes(ctx.quick):
        facs = {p: (lambda f=f, n=n: f(n)) for p, f in FACTORIES.items()}
        rows += run_case(ctx, "T4", f"N={n}", n, facs, rtol=1e-9, atol=1e-11, growth=2.0,
                         iterations=n * (n - 1) // 2)
    return rows
