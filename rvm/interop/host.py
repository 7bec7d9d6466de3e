"""The host side of jax_function and torch_function: an rvm program's value, gradient,
tangent and Hessian-vector product as numpy in, numpy out, with a loop over batch dimensions
(rvm has no batch mode yet)."""
from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..ad.engine import GradFn, derivatives, grad_fn
from ..machine import Machine

__all__ = ["Host"]

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


