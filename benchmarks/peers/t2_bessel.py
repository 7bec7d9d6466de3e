"""T2: Bessel J_2(3.0) by the series, first and second derivative in z.

Every peer evaluates the same recurrence:  h = z/2,  a_0 = h^nu / nu!,
a_k = -a_{k-1} h^2 / (k (k+nu)),  J = a_0 + ... + a_K,  with the same number of terms K.
rvm runs programs/besselj_rec.rasm, which computes the coefficients h^2 / (k (k+nu)) and the
terms into frame arrays inside a `with` block, sums them into out and uncomputes them (clean,
505 instructions per forward run at 18 terms; programs/besselj.rasm, the NiLang paper's form
with pow and carried factorials per term, runs 1463).  The hand-written peers (C, Python)
differentiate by a reverse sweep of the recurrence; their second derivative is the termwise
closed form a_k'' = a_k (2k+nu)(2k+nu-1)/z^2.  Exact values (mpmath) check the reference.
"""
from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import rvm_side
from .common import ROOT, Impl, Skip, c_lib
from .engine import Ctx, Row, run_case

PROGRAM = "programs/besselj_rec.rasm"
Z, NU = 3.0, 2


def _program_nterms(default: int = 18) -> int:
    """The program's default number of terms (`inout nterms: int = N`), so every peer sums
    exactly the terms rvm sums (k = 0 .. nterms-1)."""
    import re
    try:
        text = (ROOT / PROGRAM).read_text()
    except OSError:
        return default
    m = re.search(r"^\s*inout\s+nterms\s*:\s*int\s*=\s*(\d+)", text, re.M)
    return int(m.group(1)) if m else default


NTERMS = _program_nterms()
TERMS = NTERMS - 1   # K, the last term's index
RVM_INPUTS: dict[str, Any] = {"z": Z, "nu": NU, "nterms": NTERMS}
RVM_OUT, RVM_WRT = "out", "z"

FIRST, SECOND = "dJ/dz", "d2J/dz2"


def exact(order: int) -> dict[str, float] | None:
    try:
        import mpmath
    except ImportError:
        return None
    return {"z": float(mpmath.besselj(NU, Z, derivative=order))}


def rvm_impl(order: int) -> Impl:
    if rvm_side.program_path(PROGRAM) is None:
        raise Skip(f"rvm: {PROGRAM} not written yet")
    prog = rvm_side.program(PROGRAM)
    return rvm_side.impl(prog, dict(RVM_INPUTS), of=RVM_OUT, wrt=[RVM_WRT], second=order == 2,
                         forward_api=True)


def c_impl(order: int) -> Impl:
    lib = c_lib("t2_bessel")
    for f in (lib.t2_forward, lib.t2_grad, lib.t2_grad2):
        f.restype = ctypes.c_double
        f.argtypes = [ctypes.c_double, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    g = lib.t2_grad if order == 1 else lib.t2_grad2
    return Impl(lambda: lib.t2_forward(Z, NU, TERMS, 1), lambda: {"z": g(Z, NU, TERMS, 1)},
                forward_loop=lambda k: lib.t2_forward(Z, NU, TERMS, k),
                grad_loop=lambda k: g(Z, NU, TERMS, k))


def python_impl(order: int) -> Impl:
    nu, K = NU, TERMS
    fact_nu = float(math.factorial(nu))
    coef = [0.0] + [-1.0 / (k * (k + nu)) for k in range(1, K + 1)]

    def forward(z: float = Z) -> float:
        h = 0.5 * z
        h2 = h * h
        a = h ** nu / fact_nu
        s = a
        for k in range(1, K + 1):
            a = a * h2 * coef[k]
            s += a
        return s

    def grad1() -> dict[str, float]:
        z = Z
        h = 0.5 * z
        h2 = h * h
        a = [h ** nu / fact_nu]
        for k in range(1, K + 1):
            a.append(a[-1] * h2 * coef[k])
        gs, ga, gh2 = 1.0, 0.0, 0.0
        for k in range(K, 0, -1):        # reverse sweep: s += a_k; a_k = coef_k a_{k-1} h2
            ga += gs
            gh2 += ga * coef[k] * a[k - 1]
            ga = ga * coef[k] * h2
        ga += gs
        gh = ga * nu * h ** (nu - 1) / fact_nu + gh2 * 2.0 * h
        return {"z": 0.5 * gh}

    def grad2() -> dict[str, float]:
        z = Z
        h = 0.5 * z
        h2 = h * h
        a = h ** nu / fact_nu
        s = a * nu * (nu - 1)
        for k in range(1, K + 1):
            a = a * h2 * coef[k]
            p = 2 * k + nu
            s += a * p * (p - 1)
        return {"z": s / (z * z)}

    return Impl(forward, grad1 if order == 1 else grad2,
                note="" if order == 1 else "termwise closed form")


def numpy_impl(order: int) -> Impl:
    # the series vectorizes over k: J = sum c_k h^(2k+nu) with precomputed coefficients
    k = np.arange(TERMS + 1)
    c = np.array([(-1.0) ** i / (math.factorial(i) * math.factorial(i + NU))
                  for i in range(TERMS + 1)])
    p = 2 * k + NU

    def forward() -> float:
        return float(c @ (0.5 * Z) ** p)

    def grad() -> dict[str, float]:
        h = 0.5 * Z
        if order == 1:
            return {"z": float(c @ (p * h ** (p - 1))) * 0.5}
        return {"z": float(c @ (p * (p - 1) * h ** np.maximum(p - 2, 0))) * 0.25}

    return Impl(forward, grad, note="closed-form power sum (not the recurrence)")


def _series(z: Any, one: Any) -> Any:
    """The recurrence in any array library's arithmetic (autograd, torch)."""
    h = z * 0.5
    h2 = h * h
    a = h ** NU / math.factorial(NU)
    s = a
    for k in range(1, TERMS + 1):
        a = a * h2 * (-1.0 / (k * (k + NU)))
        s = s + a
    return s


def autograd_impl(order: int) -> Impl:
    import autograd
    g = autograd.grad(lambda z: _series(z, 1.0))
    if order == 2:
        g = autograd.grad(g)
    return Impl(lambda: _series(Z, 1.0), lambda: {"z": g(Z)},
                note="forward = the untraced Python function")


def torch_impl(order: int) -> Impl:
    import torch
    z = torch.tensor(Z, dtype=torch.float64, requires_grad=True)

    def forward() -> Any:
        with torch.no_grad():
            return _series(z, 1.0)

    def grad() -> dict[str, Any]:
        (g,) = torch.autograd.grad(_series(z, 1.0), z, create_graph=order == 2)
        if order == 2:
            (g,) = torch.autograd.grad(g, z)
        return {"z": g}

    return Impl(forward, grad)


def jax_impl(order: int) -> Impl:
    import jax
    import jax.numpy as jnp
    from jax import lax

    def f(z: Any) -> Any:
        h = z * 0.5
        h2 = h * h
        a0 = h ** NU / math.factorial(NU)

        def body(k: Any, st: tuple[Any, Any]) -> tuple[Any, Any]:
            a, s = st
            a = a * h2 * (-1.0 / (k * (k + NU)))
            return a, s + a

        return lax.fori_loop(1, TERMS + 1, body, (a0, a0))[1]

    fwd = jax.jit(f)
    d = jax.grad(f)
    g = jax.jit(d if order == 1 else jax.grad(d))
    z = jnp.float64(Z)
    return Impl(lambda: fwd(z).block_until_ready(),
                lambda: {"z": g(z).block_until_ready()}, jit=True)


FACTORIES: dict[str, Callable[[int], Impl]] = {
    "rvm": rvm_impl, "C": c_impl, "python": python_impl, "numpy": numpy_impl,
    "autograd": autograd_impl, "torch": torch_impl, "jax": jax_impl,
}
NOTES = [f"J_{NU}({Z}) by the same recurrence with the same {NTERMS} terms in every peer "
         "(rvm: programs/besselj_rec.rasm, clean: terms computed, summed and uncomputed)",
         "the d2J/dz2 rows time the second derivative (rvm: rvm.hessian) in the gradient column"]


def run(ctx: Ctx) -> list[Row]:
    rows: list[Row] = []
    for order, case in ((1, FIRST), (2, SECOND)):
        facs = {p: (lambda f=f, o=order: f(o)) for p, f in FACTORIES.items()}
        rows += run_case(ctx, "T2", case, order, facs, exact=exact(order),
                         rtol=1e-9, atol=1e-13)
    return rows
