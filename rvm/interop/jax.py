"""An rvm program as a JAX function (docs/interop.md).

    f = rvm.interop.jax_function(prog, of="out", wrt=["z"])
    jax.jit(jax.grad(f))(3.0)           # J_2'(3)

The program runs on the host through `jax.pure_callback`; its derivatives are rvm's:

* the value: one GradFn call (native code once it is built) in a `jax.pure_callback`;
* `jax.grad` / `jax.vjp`: f is a `custom_jvp` whose tangent is <gradient, t>, linear in t, so
  reverse mode transposes it into exactly rvm's adjoint gradient (jit(grad(f)) is one
  callback: one GradFn call);
* `jax.jvp` / `jax.jacfwd`: the same contraction of rvm's gradient with the tangents (equal
  to rvm's tangent mode, rvm.jvp, to rounding; one gradient serves every direction of a
  jacfwd).  A tangent from rvm's tangent mode that reverse mode could still transpose needs
  `jax.custom_derivatives.linear_call`, which has no batching rule (vmap, jacfwd fail);
* `jax.hessian` (jacfwd over jacrev) and forward-over-reverse HVPs: the gradient is itself a
  `custom_jvp` function whose tangent is rvm's Hessian-vector product (tangent over
  adjoint).  Reverse over reverse (jacrev(grad(f))) is not supported (JAX cannot transpose
  a callback);
* `jax.vmap`: rvm has no batch mode yet, so the callback gets the whole batch
  (`vmap_method="broadcast_all"`) and loops over it on the host.

Arguments and results use JAX's default float type: float32 unless `jax_enable_x64` is on
(rvm computes in float64 and rounds the results to float32 then; turn x64 on for rvm's
precision).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .host import Host

__all__ = ["jax_function"]

def jax_function(program: Any, of: str, wrt: str | Sequence[str],
                 inputs: Mapping[str, Any] | None = None, *,
                 native: bool | None = None) -> Callable[..., jax.Array]:
    """A JAX function f(*wrt_values) -> loss of `program` (a Program or a path).

    `of` is the loss cell, `wrt` the differentiable inputs that become f's arguments, in
    order (a scalar cell takes a scalar, an array cell an array of its length); the other
    inputs keep the values of `inputs` (or the program's defaults).  f works under jax.jit,
    jax.grad / vjp (rvm's adjoint), jax.jvp / jacfwd (the adjoint gradient contracted with the
    tangents), jax.hessian (rvm's Hessian-vector products) and jax.vmap (a loop over the batch
    on the host).
    `native` is grad_fn's (None: compile to C after a few calls).  `f.host` is the Host."""
    host = Host(program, of, wrt, inputs, native)
    n = len(host.cells)

    def dtype() -> np.dtype:
        return jax.dtypes.canonicalize_dtype(np.float64)

    def struct(shape: tuple[int, ...]) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, dtype())

    def batch_of(xs) -> tuple[int, ...]:
        return tuple(np.shape(xs[0])[:np.ndim(xs[0]) - len(host.shapes[0])])

    def as_out(out):
        if isinstance(out, (tuple, list)):
            return tuple(np.asarray(a, dtype()) for a in out)
        return np.asarray(out, dtype())

    # ---- the callbacks ---------------------------------------------------------------------
    def loss_cb(*xs):
        b = batch_of(xs)
        return jax.pure_callback(
            lambda *a: as_out(host.batched(lambda x: host.value_and_grad1(x)[0], a)),
            struct(b), *xs, vmap_method="broadcast_all")

    def grad_host(*a):
        if len(a[0].shape) == len(host.shapes[0]):           # no batch: the short way
            dt = dtype()
            return tuple(np.asarray(g, dt) for g in host.grad1(a))
        return as_out(tuple(host.batched(host.grad1, a)))

    def grad_cb(*xs):
        b = batch_of(xs)
        return tuple(jax.pure_callback(
            grad_host, tuple(struct(b + s) for s in host.shapes), *xs,
            vmap_method="broadcast_all"))

    def hvp_cb(xs, vs):
        b = batch_of(xs)
        return tuple(jax.pure_callback(
            lambda *a: as_out(tuple(host.batched(host.hvp1, a[:n], a[n:]))),
            tuple(struct(b + s) for s in host.shapes), *xs, *vs,
            vmap_method="broadcast_all"))

    # ---- the gradient, differentiable once more through rvm's HVP ----------------------------
    @jax.custom_jvp
    def gradient(*xs):
        return grad_cb(*xs)

    @gradient.defjvp
    def _gradient_jvp(xs, vs):
        vs = tuple(_zeros_if_symbolic(v, x) for v, x in zip(vs, xs))
        return gradient(*xs), hvp_cb(xs, vs)

    # ---- the function ------------------------------------------------------------------------
    @jax.custom_jvp
    def f(*xs):
        return loss_cb(*xs)

    @f.defjvp
    def _f_jvp(xs, ts):
        # linear in ts through jnp ops, so that reverse mode transposes it to the gradient
        # (jax.custom_derivatives.linear_call, which could run rvm's tangent mode here and
        # still transpose to the adjoint, has no batching rule: vmap and jacfwd fail with it)
        g = gradient(*xs)
        t_out = sum(_contract(gi, _zeros_if_symbolic(t, x), len(s))
                    for gi, t, x, s in zip(g, ts, xs, host.shapes))
        return f(*xs), t_out

    def call(*args):
        if len(args) != n:
            raise TypeError(f"this rvm function takes {n} argument{'s' * (n != 1)} "
                            f"({', '.join(host.names)}), got {len(args)}")
        xs = tuple(jnp.asarray(a, dtype()) for a in args)
        for x, s, name in zip(xs, host.shapes, host.names):
            if x.shape[x.ndim - len(s):] != s or x.ndim < len(s):
                raise ValueError(f"{name}: expected shape {s}, got {x.shape}")
        return f(*xs)

    call.host = host              # type: ignore[attr-defined]
    call.__doc__ = f"rvm: {of} of {host.program!r} as a function of {', '.join(host.names)}"
    return call


def _zeros_if_symbolic(t: Any, x: Any) -> Any:
    """A symbolic zero tangent (jax.custom_derivatives.SymbolicZero) as an array."""
    return jnp.zeros_like(x) if type(t).__name__ == "SymbolicZero" else t


def _contract(g: jax.Array, t: jax.Array, ndim: int) -> jax.Array:
    """<g, t> over the cell's dimensions (the last ndim)."""
    return jnp.sum(g * t, axis=tuple(range(-ndim, 0))) if ndim else g * t
