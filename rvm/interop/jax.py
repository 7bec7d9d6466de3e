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

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..ad.engine import GradFn, derivatives, grad_fn
from ..machine import Machine

__all__ = ["jax_function", "Host"]

_ELEMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[\s*(\d+)\s*\])?\s*$")


class Host:
    """The host side of a jax_function (and of torch_function): numpy in, numpy out.

    value_and_grad(*xs)   (loss, (gradient per wrt)) by rvm's adjoint (a GradFn)
    tangent1(xs, ts)      d loss along ts, by rvm's tangent mode (torch_function's jvp)
    hvp(xs, vs)           (H v per wrt) by rvm's tangent-over-adjoint pass

    Each wrt argument is an array of the cell's shape with any leading batch dimensions (the
    same for all arguments); the results get those batch dimensions too, and the batch is a
    loop on the host."""

    def __init__(self, program: Any, of: str, wrt: str | Sequence[str],
                 inputs: Mapping[str, Any] | None = None, native: bool | None = None):
        self.gf: GradFn = grad_fn(program, of, wrt, native=native)
        self.program, self.of = self.gf.program, of
        self.cells = self.gf.runner.wrt
        self.shapes = [tuple(c.shape) for c in self.cells]
        self.names = [c.name for c in self.cells]
        self.inputs = dict(inputs or {})
        self._start: dict[str, Any] | None = None
        self._whole = not any("[" in c.name for c in self.cells)
        self._machines = threading.local()
        m = _ELEMENT.match(of)
        self._of_name, self._of_index = m.group(1), None if m.group(2) is None else int(m.group(2))

    # ---- one evaluation ------------------------------------------------------------------
    def _inputs(self, xs: Sequence[np.ndarray]) -> dict[str, Any]:
        """The program's inputs with the wrt cells set to xs (Python floats for scalars, so
        that GradFn takes its fast path)."""
        ins = dict(self.inputs)
        if self._whole:
            for c, x in zip(self.cells, xs):
                x = np.asarray(x)       # a jax.Array in a callback: float() on it is slower
                ins[c.name] = float(x) if not c.shape else np.asarray(x, np.float64).ravel()
            return ins
        for c, x in zip(self.cells, xs):
            m = _ELEMENT.match(c.name)
            if m.group(2) is None:
                ins[c.name] = float(x) if not c.shape else np.asarray(x, np.float64).reshape(
                    c.shape)
            else:                   # one element of an array: the rest as the inputs have it
                name, k = m.group(1), int(m.group(2))
                arr = np.array(ins.get(name, self._start_values()[name]), dtype=np.float64)
                arr[k] = float(x)
                ins[name] = arr
        return ins

    def _start_values(self) -> dict[str, Any]:
        if self._start is None:
            m = Machine(self.program)
            m.reset(self.inputs)
            self._start = m.inputs()
        return self._start

    def _machine(self) -> Machine:
        m = getattr(self._machines, "m", None)
        if m is None:
            m = self._machines.m = Machine(self.program)
        return m

    def _loss_of_last(self) -> float:
        gf = self.gf
        if gf.owner not in (0, threading.get_ident()):
            gf = getattr(gf._lanes, "fn", None) or gf
        if gf.fast_grad is not None:
            return gf.runner.fast_loss()
        return gf.last.value

    def value_and_grad1(self, xs: Sequence[np.ndarray]) -> tuple[float, list[np.ndarray]]:
        g = self.gf(self._inputs(xs))
        return self._loss_of_last(), [np.asarray(g[n], np.float64) for n in self.names]

    def grad1(self, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        g = self.gf(self._inputs(xs))
        return [g[n] for n in self.names]

    def tangent1(self, xs: Sequence[np.ndarray], ts: Sequence[np.ndarray]) -> float:
        if any("[" in c.name for c in self.cells):
            # tangent mode seeds whole globals: for an element, contract the gradient
            _, g = self.value_and_grad1(xs)
            return float(sum(np.vdot(gi, ti) for gi, ti in zip(g, ts)))
        tangents = {c.name: (float(t) if not c.shape else np.asarray(t, np.float64))
                    for c, t in zip(self.cells, ts)}
        d = derivatives(self.program, None, (), self._inputs(xs), gradient=False,
                        tangents=tangents, check_ancillas=False, machine=self._machine())
        t = d.tangent[self._of_name]
        return float(t if self._of_index is None else t[self._of_index])

    def hvp1(self, xs: Sequence[np.ndarray], vs: Sequence[np.ndarray]) -> list[np.ndarray]:
        direction = {c.name: (float(v) if not c.shape else np.asarray(v, np.float64))
                     for c, v in zip(self.cells, vs)}
        d = derivatives(self.program, self.of, self.gf.wrt, self._inputs(xs), gradient=False,
                        direction=direction, check_ancillas=False, machine=self._machine())
        return [np.asarray(d.hvp[n], np.float64) for n in self.names]

    # ---- batches ---------------------------------------------------------------------------
    def batch_shape(self, xs: Sequence[np.ndarray]) -> tuple[int, ...]:
        x, shape = np.asarray(xs[0]), self.shapes[0]
        return x.shape[:x.ndim - len(shape)]

    def batched(self, one: Callable, xs: Sequence[np.ndarray], *rest: Sequence[np.ndarray]):
        """Apply `one(xs[, ts])` to every batch element; stack its results."""
        batch = self.batch_shape(xs)
        arrays = [[np.asarray(a, np.float64) for a in group] for group in (xs, *rest)]
        if not batch:
            return one(*arrays)
        outs = [one(*[[a[idx] for a in group] for group in arrays])
                for idx in np.ndindex(*batch)]
        return _stack(outs, batch)


def _stack(outs: list, batch: tuple[int, ...]):
    first = outs[0]
    if isinstance(first, tuple):
        return tuple(_stack([o[k] for o in outs], batch) for k in range(len(first)))
    if isinstance(first, list):
        return [_stack([o[k] for o in outs], batch) for k in range(len(first))]
    arr = np.asarray(outs, dtype=np.float64)
    return arr.reshape(batch + arr.shape[1:])


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
