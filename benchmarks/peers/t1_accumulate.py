"""T1: the accumulate loop `for i in 1..n: x += one`, loss = x, gradient wrt x and one.

Exact answer: d loss/dx = 1, d loss/d one = n.  rvm runs programs/accumulate.rasm (inputs x,
one, n).  Every peer starts from x = 0.0, one = 1.0 in float64.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from . import rvm_side
from .common import Impl, Skip, c_lib
from .engine import Ctx, Row, run_case

PROGRAM = "programs/accumulate.rasm"
X0, ONE = 0.0, 1.0


def sizes(quick: bool) -> list[int]:
    return [10**3, 10**4, 10**6] if quick else [10**3, 10**4, 10**5, 10**6, 10**7]


def exact(n: int) -> dict[str, float]:
    return {"x": 1.0, "one": float(n)}


def rvm_impl(n: int) -> Impl:
    if rvm_side.program_path(PROGRAM) is None:
        raise Skip(f"{PROGRAM} not found")
    prog = rvm_side.program(PROGRAM)
    return rvm_side.impl(prog, {"x": X0, "one": ONE, "n": n}, of="x", wrt=["x", "one"])


def c_impl(n: int) -> Impl:
    lib = c_lib("t1_accumulate")
    lib.t1_forward.restype = ctypes.c_double
    lib.t1_forward.argtypes = [ctypes.c_long, ctypes.c_double, ctypes.c_double, ctypes.c_long]
    lib.t1_grad.restype = ctypes.c_double
    lib.t1_grad.argtypes = [ctypes.c_long, ctypes.c_double, ctypes.c_double,
                            ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                            ctypes.c_long]
    gx, gone = ctypes.c_double(), ctypes.c_double()
    px, pone = ctypes.byref(gx), ctypes.byref(gone)

    def grad_loop(k: int) -> None:
        lib.t1_grad(n, X0, ONE, px, pone, k)

    def grad() -> dict[str, float]:
        grad_loop(1)
        return {"x": gx.value, "one": gone.value}

    return Impl(lambda: lib.t1_forward(n, X0, ONE, 1), grad,
                forward_loop=lambda k: lib.t1_forward(n, X0, ONE, k), grad_loop=grad_loop)


def python_impl(n: int) -> Impl:
    def forward() -> float:
        x, one = X0, ONE
        for _ in range(n):
            x += one
        return x

    def grad() -> dict[str, float]:
        x, one = X0, ONE
        for _ in range(n):
            x += one
        g_x, g_one = 1.0, 0.0          # seed d loss / d x_n
        for _ in range(n):             # reverse sweep of x += one
            g_one += g_x
        return {"x": g_x, "one": g_one}

    return Impl(forward, grad)


def autograd_impl(n: int) -> Impl:
    import autograd

    def f(p: tuple[Any, Any]) -> Any:
        x, one = p
        for _ in range(n):
            x = x + one
        return x

    g = autograd.grad(f)

    def grad() -> dict[str, float]:
        gx, gone = g((X0, ONE))
        return {"x": gx, "one": gone}

    return Impl(lambda: f((X0, ONE)), grad, note="forward = the untraced Python function")


def torch_impl(n: int) -> Impl:
    import torch
    x = torch.tensor(X0, dtype=torch.float64, requires_grad=True)
    one = torch.tensor(ONE, dtype=torch.float64, requires_grad=True)

    def f() -> Any:
        y = x
        for _ in range(n):
            y = y + one
        return y

    def forward() -> Any:
        with torch.no_grad():
            return f()

    def grad() -> dict[str, Any]:
        gx, gone = torch.autograd.grad(f(), (x, one))
        return {"x": gx, "one": gone}

    return Impl(forward, grad)


def jax_impl(n: int) -> Impl:
    import jax
    import jax.numpy as jnp
    from jax import lax

    def f(x: Any, one: Any) -> Any:
        # static trip count: lax lowers it to a scan, which jax.grad can reverse
        return lax.fori_loop(0, n, lambda i, y: y + one, x)

    fwd = jax.jit(f)
    g = jax.jit(jax.grad(f, argnums=(0, 1)))
    x, one = jnp.float64(X0), jnp.float64(ONE)

    def grad() -> dict[str, Any]:
        gx, gone = jax.block_until_ready(g(x, one))
        return {"x": gx, "one": gone}

    return Impl(lambda: fwd(x, one).block_until_ready(), grad, jit=True)


NOTES = ["numpy: no vectorized form of T1 (a serial chain of n dependent adds)",
         "jax: the loop is linear, so its gradient needs no forward values and XLA drops the "
         "forward scan (grad ~ forward); rvm, C and Python run the forward sweep too"]

FACTORIES: dict[str, Callable[[int], Impl]] = {
    "rvm": rvm_impl, "C": c_impl, "python": python_impl, "autograd": autograd_impl,
    "torch": torch_impl, "jax": jax_impl,
}


def run(ctx: Ctx) -> list[Row]:
    rows: list[Row] = []
    for n in sizes(ctx.quick):
        facs = {p: (lambda f=f, n=n: f(n)) for p, f in FACTORIES.items()}
        rows += run_case(ctx, "T1", f"n=10^{int(np.log10(n))}", n, facs, exact=exact(n),
                         rtol=1e-12, atol=0.0, iterations=n)
    return rows
