"""An rvm program as a JAX function (docs/interop.md).

    f = rvm.interop.jax_function(prog, of="out", wrt=["z"])
    jax.jit(jax.grad(f))(3.0)           # J_2'(3)

The program runs on the host; its derivatives are rvm's:

* the host calls: an XLA FFI custom call (rvm/interop/jax_ffi.py: a C handler, built once,
  that calls the host function with the operands as floats or float64 bytes), or, where it
  cannot be built (no C compiler), `jax.pure_callback`; `f.mechanism` says which and why;
* the value: one GradFn call (native code once it is built) that returns the loss and the
  gradient together (`vg`);
* `jax.jvp` / `jax.jacfwd`: rvm's tangent mode (`rvm.jvp`'s pass), through the primitive
  `rvm_tangent`, linear in the tangents; its transpose is the tangent times rvm's adjoint
  gradient, so `jax.grad` / `jax.vjp` get exactly rvm's adjoint gradient, and
  jit(grad(f)) is one host call (one GradFn call);
* second order: the gradient is itself a `custom_jvp` function whose tangent is rvm's
  Hessian-vector product (the primitive `rvm_hvp`, linear in the direction and its own
  transpose, H being symmetric), so `jax.hessian` (jacfwd over jacrev), forward over
  reverse and reverse over reverse (`jax.jacrev(jax.grad(f))`) all work; third derivatives
  raise NotImplementedError;
* `jax.vmap`: the host call gets the whole batch (every operand broadcast to it): rvm's
  batch mode (GradFn.batch: native code, rows spread over the cores; the losses from the
  same runs), a loop of single calls for an element wrt.

Arguments and results use JAX's default float type: float32 unless `jax_enable_x64` is on
(rvm computes in float64 and rounds the results to float32 then; turn x64 on for rvm's
precision).  Leading batch dimensions of the arguments broadcast against each other.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from .host import Host

__all__ = ["jax_function", "JaxFunction"]


class JaxFunction:
    """f(*wrt_values) -> loss: an rvm program as a JAX function (see jax_function)."""

    def __init__(self, host: Host, ffi: bool | None):
        self.host = host
        self.n = len(host.cells)
        self.mechanism = "jax.pure_callback"
        self._target: str | None = None
        # the host functions, kept alive here (the FFI registry holds weak references)
        self._ops: dict[str, Callable[..., tuple]] = {
            "vg": host.vg, "grad": host.grad, "tangent": host.tangent, "hvp": host.hvp}
        self._keys: dict[str, np.int64] = {}
        if ffi is not False and os.environ.get("RVM_JAX_FFI") != "0":
            try:
                from . import jax_ffi
            except ImportError as e:            # a JAX without jax.ffi
                if ffi:
                    raise
                self.mechanism = f"jax.pure_callback (no jax.ffi: {e})"
            else:
                try:
                    self._target = jax_ffi.target()
                except jax_ffi.Unavailable as e:
                    if ffi:
                        raise
                    self.mechanism = f"jax.pure_callback (the XLA FFI call is unavailable: {e})"
                else:
                    self.mechanism = "XLA FFI custom call"
                    self._keys = {op: np.int64(jax_ffi.register(fn))
                                  for op, fn in self._ops.items()}
        elif ffi is False:
            self.mechanism = "jax.pure_callback (ffi=False)"
        else:
            self.mechanism = "jax.pure_callback (RVM_JAX_FFI=0)"

        @jax.custom_jvp
        def gradient(*xs):
            # an FFI call returns the loss too: XLA merges it with value's identical call
            # (jit(value_and_grad(f)) is one call); a pure_callback result costs ~7 µs more
            if self._target is not None:
                return tuple(self._call("vg", xs)[1:])
            return tuple(self._call("grad", xs))

        @gradient.defjvp
        def _gradient_jvp(xs, vs):
            vs = tuple(_tangent(v, x) for v, x in zip(vs, xs))
            return gradient(*xs), tuple(hvp_p.bind(*xs, *vs, fn=self))

        @jax.custom_jvp
        def value(*xs):
            return self._call("vg", xs)[0]

        @value.defjvp
        def _value_jvp(xs, ts):
            ts = tuple(_tangent(t, x) for t, x in zip(ts, xs))
            return value(*xs), tangent_p.bind(*xs, *ts, fn=self)

        self.gradient, self.value = gradient, value
        self.__doc__ = f"rvm: {host.of} of {host.program!r} as a function of " \
                       f"{', '.join(host.names)}"

    # ---- the host calls --------------------------------------------------------------------
    def dtype(self) -> np.dtype:
        return jax.dtypes.canonicalize_dtype(np.float64)

    def batch_of(self, xs: Sequence[Any]) -> tuple[int, ...]:
        x = xs[0]
        return tuple(x.shape[:x.ndim - len(self.host.shapes[0])])

    def results(self, op: str, xs: Sequence[Any]) -> list[jax.ShapeDtypeStruct]:
        """The shapes of op's results for operands xs (the wrt values first)."""
        b, dt = self.batch_of(xs), xs[0].dtype
        cells = [jax.ShapeDtypeStruct(b + s, dt) for s in self.host.shapes]
        return {"vg": [jax.ShapeDtypeStruct(b, dt), *cells], "grad": cells,
                "tangent": [jax.ShapeDtypeStruct(b, dt)], "hvp": cells}[op]

    def _call(self, op: str, args: Sequence[Any]) -> list[jax.Array]:
        """One host call of op: operands and results with the same leading batch dims."""
        outs = self.results(op, args)
        if self._target is not None:
            return list(jax.ffi.ffi_call(self._target, outs, vmap_method="broadcast_all")(
                *args, key=self._keys[op]))
        fn, nd, dt = self._ops[op], len(self.host.shapes[0]), outs[0].dtype
        plain = [(o.shape, o.dtype) for o in outs] if not self.batch_of(args) else None

        def callback(*raw):
            a = [np.asarray(x) for x in raw]
            vals = [float(x) if x.ndim == 0 else x.astype(np.float64).ravel() for x in a]
            res = fn(*vals)
            if plain is not None and a[0].ndim == nd:      # no batch: the shapes traced
                return tuple(np.asarray(r, d).reshape(s) for r, (s, d) in zip(res, plain))
            return tuple(np.asarray(r, dt).reshape(o.shape)
                         for r, o in zip(res, self.results(op, a)))
        return list(jax.pure_callback(callback, outs, *args, vmap_method="broadcast_all"))

    # ---- the function ------------------------------------------------------------------------
    def __call__(self, *args: Any) -> jax.Array:
        host, n = self.host, self.n
        if len(args) != n:
            raise TypeError(f"this rvm function takes {n} argument{'s' * (n != 1)} "
                            f"({', '.join(host.names)}), got {len(args)}")
        xs = [jnp.asarray(a, self.dtype()) for a in args]
        batches = []
        for x, s, name in zip(xs, host.shapes, host.names):
            if x.ndim < len(s) or x.shape[x.ndim - len(s):] != s:
                raise ValueError(f"{name}: expected shape {s}, got {x.shape}")
            batches.append(x.shape[:x.ndim - len(s)])
        batch = np.broadcast_shapes(*batches)
        xs = [x if b == batch else jnp.broadcast_to(x, batch + s)
              for x, b, s in zip(xs, batches, host.shapes)]
        return self.value(*xs)


def jax_function(program: Any, of: str, wrt: str | Sequence[str],
                 inputs: Mapping[str, Any] | None = None, *,
                 native: bool | None = None, ffi: bool | None = None) -> JaxFunction:
    """A JAX function f(*wrt_values) -> loss of `program` (a Program or a path).

    `of` is the loss cell, `wrt` the differentiable inputs that become f's arguments, in
    order (a scalar cell takes a scalar, an array cell an array of its length, each with
    optional leading batch dimensions, which broadcast); the other inputs keep the values of
    `inputs` (or the program's defaults).  f works under jax.jit, jax.grad / vjp (rvm's
    adjoint), jax.jvp / jacfwd (rvm's tangent mode), jax.hessian and jacrev(grad(f)) (rvm's
    Hessian-vector products) and jax.vmap (rvm's batch mode).
    `native` is grad_fn's (None: compile to C after a few calls).  `ffi`: call the host by
    an XLA FFI custom call (True: or raise; None: where it can be built, else
    jax.pure_callback; False: always jax.pure_callback).  `f.mechanism` says which runs and
    why; `f.host` is the Host (rvm/interop/host.py)."""
    return JaxFunction(Host(program, of, wrt, inputs, native), ffi)


def _tangent(t: Any, x: Any) -> Any:
    """A tangent as an array of x's dtype (a symbolic zero, SymbolicZero, as zeros)."""
    return jnp.zeros_like(x) if type(t).__name__ == "SymbolicZero" else jnp.asarray(t, x.dtype)


def _contract(g: jax.Array, t: jax.Array, ndim: int) -> jax.Array:
    """<g, t> over the cell's dimensions (the last ndim)."""
    return jnp.sum(g * t, axis=tuple(range(-ndim, 0))) if ndim else g * t


def _scale(ct: jax.Array, g: jax.Array, ndim: int) -> jax.Array:
    """ct (batch shape) times g (batch + cell shape)."""
    return ct.reshape(ct.shape + (1,) * ndim) * g


# ---- rvm_tangent: d loss along ts by rvm's tangent mode, linear in ts ------------------------

tangent_p = Primitive("rvm_tangent")
hvp_p = Primitive("rvm_hvp")
hvp_p.multiple_results = True


def _tangent_impl(*xts, fn: JaxFunction):
    return fn._call("tangent", xts)[0]


def _tangent_abstract(*xts, fn: JaxFunction):
    return jax.core.ShapedArray(fn.batch_of(xts), xts[0].dtype)


def _tangent_jvp(primals, tangents, *, fn: JaxFunction):
    n = fn.n
    xs, ts = primals[:n], primals[n:]
    dxs, dts = tangents[:n], tangents[n:]
    out = tangent_p.bind(*xs, *ts, fn=fn)
    terms = []
    if any(type(d) is not ad.Zero for d in dts):
        terms.append(tangent_p.bind(*xs, *map(ad.instantiate_zeros, dts), fn=fn))
    if any(type(d) is not ad.Zero for d in dxs):
        # d/dx <grad(x), t> . dx = <H t, dx>
        hv = hvp_p.bind(*xs, *ts, fn=fn)
        terms += [_contract(h, d, len(s)) for h, d, s in zip(hv, dxs, fn.host.shapes)
                  if type(d) is not ad.Zero]
    if not terms:
        return out, jnp.zeros_like(out)
    return out, sum(terms[1:], terms[0])


def _tangent_transpose(ct, *xts, fn: JaxFunction):
    n = fn.n
    xs, ts = xts[:n], xts[n:]
    if any(ad.is_undefined_primal(x) for x in xs):
        raise NotImplementedError("rvm_tangent is linear in its tangents only")
    if type(ct) is ad.Zero:
        return [None] * (2 * n)
    g = fn.gradient(*xs)
    return [None] * n + [_scale(ct, gi, len(s)) if ad.is_undefined_primal(t) else None
                         for gi, t, s in zip(g, ts, fn.host.shapes)]


def _hvp_impl(*xvs, fn: JaxFunction):
    return fn._call("hvp", xvs)


def _hvp_abstract(*xvs, fn: JaxFunction):
    b = fn.batch_of(xvs)
    return [jax.core.ShapedArray(b + s, xvs[0].dtype) for s in fn.host.shapes]


def _hvp_jvp(primals, tangents, *, fn: JaxFunction):
    n = fn.n
    xs, vs = primals[:n], primals[n:]
    dxs, dvs = tangents[:n], tangents[n:]
    if any(type(d) is not ad.Zero for d in dxs):
        raise NotImplementedError("third derivatives of an rvm function are not supported "
                                  "(rvm gives the gradient and Hessian-vector products)")
    out = hvp_p.bind(*xs, *vs, fn=fn)
    if all(type(d) is ad.Zero for d in dvs):
        return out, [jnp.zeros_like(o) for o in out]
    return out, hvp_p.bind(*xs, *map(ad.instantiate_zeros, dvs), fn=fn)


def _hvp_transpose(cts, *xvs, fn: JaxFunction):
    n = fn.n
    xs, vs = xvs[:n], xvs[n:]
    if any(ad.is_undefined_primal(x) for x in xs):
        raise NotImplementedError("rvm_hvp is linear in its direction only")
    if all(type(c) is ad.Zero for c in cts):
        return [None] * (2 * n)
    cts = [ad.instantiate_zeros(c) for c in cts]
    hv = hvp_p.bind(*xs, *cts, fn=fn)          # H is symmetric: the transpose of H is H
    return [None] * n + [h if ad.is_undefined_primal(v) else None for h, v in zip(hv, vs)]


def _batched(prim: Primitive):
    """A batching rule: every operand gets the batch as its leading dimension (broadcast where
    it has none), the primitive takes any leading batch dimensions."""
    def rule(args, dims, *, fn: JaxFunction):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        moved = [jnp.broadcast_to(a, (size, *jnp.shape(a))) if d is None
                 else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]
        out = prim.bind(*moved, fn=fn)
        return out, ([0] * len(out) if prim.multiple_results else 0)
    return rule


tangent_p.def_impl(_tangent_impl)
tangent_p.def_abstract_eval(_tangent_abstract)
ad.primitive_jvps[tangent_p] = _tangent_jvp
ad.primitive_transposes[tangent_p] = _tangent_transpose
batching.primitive_batchers[tangent_p] = _batched(tangent_p)
mlir.register_lowering(tangent_p, mlir.lower_fun(_tangent_impl, multiple_results=False))

hvp_p.def_impl(_hvp_impl)
hvp_p.def_abstract_eval(_hvp_abstract)
ad.primitive_jvps[hvp_p] = _hvp_jvp
ad.primitive_transposes[hvp_p] = _hvp_transpose
batching.primitive_batchers[hvp_p] = _batched(hvp_p)
mlir.register_lowering(hvp_p, mlir.lower_fun(_hvp_impl, multiple_results=True))
