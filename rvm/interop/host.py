"""The host side of jax_function and torch_function: an rvm program's value, gradient,
tangent and Hessian-vector product on flat float64 operands; a batch of gradients goes to
rvm's batch mode (GradFn.batch) where it applies, else a loop."""
from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..ad.engine import GradFn, derivatives, grad_fn, jvp_call
from ..machine import Machine
from ..values import FLOAT

__all__ = ["Host"]

_ELEMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[\s*(\d+)\s*\])?\s*$")


class Host:
    """The host side of a jax_function (and of torch_function).

    vg(*xs)          (loss, gradient per wrt) by rvm's adjoint: one GradFn call per element
    grad(*xs)        the gradient alone
    tangent(*xs, *ts)  (d loss along ts,) by rvm's tangent mode
    hvp(*xs, *vs)    (H v per wrt) by rvm's tangent-over-adjoint pass

    The operands are flat: a float for a scalar cell without a batch, else a flat float64
    array (or its bytes) of B cells back to back, the same B for every operand; the results
    are a float or a flat array of B results.  A batch of gradients is rvm's batch mode,
    tangents and HVPs a loop (HVPs along basis vectors at one point: one Hessian)."""

    def __init__(self, program: Any, of: str, wrt: str | Sequence[str],
                 inputs: Mapping[str, Any] | None = None, native: bool | None = None):
        self.gf: GradFn = grad_fn(program, of, wrt, native=native)
        self.native = native
        self.program, self.of = self.gf.program, of
        self.cells = self.gf.runner.wrt
        self.shapes = [tuple(c.shape) for c in self.cells]
        self.names = [c.name for c in self.cells]
        self.inputs = dict(inputs or {})
        self._start: dict[str, Any] | None = None
        self._whole = not any("[" in c.name for c in self.cells)
        self._machines = threading.local()
        self._loss_words: np.ndarray | None = None
        self._loss_at = 0
        self._sizes = [c.size for c in self.cells]
        self._scalars = all(not s for s in self.shapes)
        self._single = self.names[0] if len(self.cells) == 1 and self._whole and \
            not self.inputs else None
        m = _ELEMENT.match(of)
        self._of_name, self._of_index = m.group(1), None if m.group(2) is None else int(m.group(2))
        self._batch_lock = threading.Lock()

    # ---- one evaluation ------------------------------------------------------------------
    def _inputs(self, xs: Sequence[np.ndarray]) -> dict[str, Any]:
        """The program's inputs with the wrt cells set to xs (Python floats for scalars, so
        that GradFn takes its fast path)."""
        ins = dict(self.inputs)
        if self._whole:
            for c, x in zip(self.cells, xs):
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
        elif gf.fast_grad is not None and self._loss_words is not None:
            return self._loss_words[self._loss_at]         # a float loss: read in place
        if gf.fast_grad is not None:
            r = gf.runner
            if gf is self.gf and r.of_type == FLOAT and getattr(r, "words", None) is not None:
                # the fast pass writes the end state's words here (the same array each call)
                self._loss_words, self._loss_at = r.words[1].view(np.float64), r.of.addr
            return r.fast_loss()
        return gf.last.value

    def tangent1(self, xs: Sequence[Any], ts: Sequence[Any]) -> float:
        if not self._whole:
            # tangent mode seeds whole globals: for an element, contract the gradient
            g = self._vg_one(xs)[1:]
            return float(sum(np.vdot(gi, ti) for gi, ti in zip(g, ts)))
        tangents = {c.name: (float(t) if not c.shape else
                             np.ascontiguousarray(t, np.float64).reshape(-1))
                    for c, t in zip(self.cells, ts)}
        inputs = self._inputs(xs)
        call = getattr(self._machines, "jvp", None)       # the pass in C (rvm.ad.engine)
        got = call(inputs, tangents) if call is not None else None
        if got is None:
            got = derivatives(self.program, None, (), inputs, gradient=False,
                              tangents=tangents, check_ancillas=False, machine=self._machine(),
                              native=self.native).tangent
            if call is None and self.native is not False:
                self._machines.jvp = jvp_call(self._machine(), list(tangents))
        t = got[self._of_name]
        return float(t if self._of_index is None else t[self._of_index])

    def hvp1(self, xs: Sequence[Any], vs: Sequence[Any]) -> list[np.ndarray]:
        direction = {c.name: (float(v) if not c.shape else np.asarray(v, np.float64))
                     for c, v in zip(self.cells, vs)}
        d = derivatives(self.program, self.of, self.gf.wrt, self._inputs(xs), gradient=False,
                        direction=direction, check_ancillas=False, machine=self._machine(),
                        native=self.native)
        return [np.asarray(d.hvp[n], np.float64) for n in self.names]

    def hessian1(self, xs: Sequence[Any]) -> np.ndarray:
        """The Hessian over the wrt cells flattened in order, (n, n): one pass per column,
        all in one core call (native code once it is built)."""
        return derivatives(self.program, self.of, self.gf.wrt, self._inputs(xs),
                           gradient=False, hessian=True, check_ancillas=False,
                           machine=self._machine(), native=self.native).hessian

    # ---- flat operands (jax_function's host calls) -------------------------------------------
    # Each operand is a float (one scalar cell, no batch) or a flat float64 array (or bytes of
    # one) holding B cells of its wrt argument back to back; every operand has the same B.
    # Results: a float per scalar result without a batch, else flat float64 arrays.

    def _flat(self, xs: Sequence[Any], sizes: Sequence[int]) -> tuple[int, list]:
        """(the batch count B; the operands, bytes read as arrays).  Without a batch B is 1
        (a scalar cell's operand is then a float, an array cell's an array of its size): the
        results of one element serve a result with and without a batch dimension alike."""
        vals = [x if type(x) is float else np.frombuffer(x, np.float64)
                if type(x) is bytes else np.asarray(x, np.float64).ravel() for x in xs]
        v0 = vals[0]
        if type(v0) is float:
            return 1, vals
        return (v0.shape[0] // sizes[0] if sizes[0] else 0), vals

    def _one(self, vals: list, k: int) -> list:
        """Batch element k of flat operands (wrt values, then as many again for tangents):
        floats for scalar cells, arrays (views) for array cells."""
        rep = len(vals) // len(self.cells)
        return [v if type(v) is float else float(v[k]) if not shape else v[k * s:(k + 1) * s]
                for v, s, shape in zip(vals, self._sizes * rep, self.shapes * rep)]

    def vg(self, *xs: Any) -> tuple:
        """(loss, gradient per wrt) of flat operands: one GradFn call, or for a batch rvm's
        batch mode (GradFn.batch, its losses in last_batch_loss)."""
        if self._scalars and type(xs[0]) is float:          # the short way: scalars, no batch
            return self._vg_one(xs)
        b, vals = self._flat(xs, self._sizes)
        if b == 1:
            return self._vg_one(self._one(vals, 0))
        with self._batch_lock:
            grads = self._batch_grads(b, vals)
            if grads is not None:
                return (self.gf.last_batch_loss.copy(), *grads)
        loss = np.empty(b)
        grads = [np.empty(b * s) for s in self._sizes]
        for k in range(b):
            one = self._vg_one(self._one(vals, k))
            loss[k] = one[0]
            for g, s, gk in zip(grads, self._sizes, one[1:]):
                g[k * s:(k + 1) * s] = np.ravel(gk)
        return (loss, *grads)

    def grad(self, *xs: Any) -> tuple:
        """(gradient per wrt) of flat operands (vg without the loss)."""
        if self._scalars and type(xs[0]) is float:
            return self._vg_one(xs)[1:]
        b, vals = self._flat(xs, self._sizes)
        with self._batch_lock:
            grads = self._batch_grads(b, vals) if b != 1 else None
        return tuple(grads) if grads is not None else self.vg(*xs)[1:]

    def _batch_inputs(self, b: int, vals: list) -> dict[str, Any]:
        """The inputs of a batch of b rows: the wrt values with a leading axis b, the fixed
        inputs shared."""
        ins = dict(self.inputs)
        for name, v, shape in zip(self.names, vals[:len(self.cells)], self.shapes):
            ins[name] = np.reshape(v, (b, *shape))
        return ins

    def _batch_grads(self, b: int, vals: list) -> list[np.ndarray] | None:
        """The gradients of a batch by rvm's batch mode, flat per wrt, the losses left in
        gf.last_batch_loss (None: the batch is a loop here; an element wrt, or an empty
        batch).  One batch at a time (the caller holds _batch_lock): a GradFn's batch
        machines serve one batch."""
        if not self._whole or b < 2:
            return None
        g = self.gf.batch(self._batch_inputs(b, vals))
        return [np.ascontiguousarray(g[n]).ravel() for n in self.names]

    def _vg_one(self, vals: Sequence[Any]) -> tuple:
        if self._single is not None:            # one whole wrt cell and no other inputs
            name = self._single
            if type(vals[0]) is float:
                g = self.gf({name: vals[0]})
                return self._loss_of_last(), g[name]
            return self.gf.flat(vals[0])        # an array cell: the flat call
        if self._whole:
            ins = dict(self.inputs)
            ins.update(zip(self.names, vals))
        else:
            ins = self._inputs(vals)
        g = self.gf(ins)
        return (self._loss_of_last(), *[g[n] for n in self.names])

    def tangent(self, *xts: Any) -> tuple:
        """(d loss along the tangents,) of flat operands (wrt values, then their tangents), by
        rvm's tangent mode."""
        n = len(self.cells)
        b, vals = self._flat(xts, self._sizes * 2)
        if b == 1:
            one = self._one(vals, 0)
            return (self.tangent1(one[:n], one[n:]),)
        out = np.empty(b)
        for k in range(b):
            one = self._one(vals, k)
            out[k] = self.tangent1(one[:n], one[n:])
        return (out,)

    def hvp(self, *xvs: Any) -> tuple:
        """(H v per wrt) of flat operands (wrt values, then the direction v), by rvm's
        tangent-over-adjoint pass."""
        n = len(self.cells)
        b, vals = self._flat(xvs, self._sizes * 2)
        if b == 1:
            one = self._one(vals, 0)
            return tuple(np.ascontiguousarray(h, np.float64).ravel()
                         for h in self.hvp1(one[:n], one[n:]))
        columns = self._hessian_columns(b, vals)
        if columns is not None:
            return columns
        outs = [np.empty(b * s) for s in self._sizes]
        for k in range(b):
            one = self._one(vals, k)
            for o, s, h in zip(outs, self._sizes, self.hvp1(one[:n], one[n:])):
                o[k * s:(k + 1) * s] = np.ravel(h)
        return tuple(outs)

    def _hessian_columns(self, b: int, vals: list) -> tuple | None:
        """H v for a batch of basis vectors v at one point (jax.hessian, jacrev(grad f)): the
        columns of rvm's Hessian, all of them in one call, bit for bit the Hessian-vector
        products of those vectors; None for any other batch."""
        n = len(self.cells)
        xs = [np.reshape(v, (b, s)) for v, s in zip(vals[:n], self._sizes)]
        if b < 2 or any(not np.array_equal(x, np.broadcast_to(x[0], x.shape)) for x in xs):
            return None
        v = np.concatenate([np.reshape(x, (b, s)) for x, s in zip(vals[n:], self._sizes)], 1)
        nonzero = v != 0
        if not (np.all(nonzero.sum(axis=1) == 1) and np.all(v[nonzero] == 1.0)):
            return None
        cols = self.hessian1(self._one(vals[:n], 0))[:, nonzero.argmax(axis=1)].T
        at = np.cumsum([0, *self._sizes])
        return tuple(np.ascontiguousarray(cols[:, at[i]:at[i + 1]]).ravel() for i in range(n))
