"""An rvm program as a PyTorch layer (docs/interop.md).

    f = rvm.interop.torch_function(prog, of="out", wrt=["z"])
    z = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    f(z).backward()                     # z.grad == J_2'(3)

Built on `torch.autograd.Function`: the forward pass is one GradFn call per input (the value
and rvm's adjoint gradient together, the gradient kept for backward), backward scales that
gradient by the incoming gradient, and backward is itself differentiable through rvm's
Hessian-vector product, so second derivatives (gradgradcheck, a Hessian) work too.  A leading
batch dimension (any number of them) is one host call over the whole batch (Host.vg: rvm's
batch mode, GradFn.batch).  The tensors stay on the CPU; results take
the inputs' dtype (use float64).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .host import Host

__all__ = ["torch_function"]


def _flat(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as a flat float64 array (Host's flat operands)."""
    return np.ascontiguousarray(t.detach().cpu().numpy(), np.float64).ravel()


def _shaped(values: Any, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, np.float64).reshape(shape), dtype=like.dtype)


def _batch(host: Host, xs: Sequence[torch.Tensor]) -> tuple[int, ...]:
    return tuple(xs[0].shape[:xs[0].dim() - len(host.shapes[0])])


class _Gradient(torch.autograd.Function):
    """xs -> rvm's gradient per wrt; its backward is the Hessian-vector product."""

    @staticmethod
    def forward(ctx, host: Host, *xs: torch.Tensor):
        ctx.host = host
        ctx.save_for_backward(*xs)
        b = _batch(host, xs)
        g = host.grad(*map(_flat, xs))
        return tuple(_shaped(gi, b + s, x) for gi, s, x in zip(g, host.shapes, xs))

    @staticmethod
    def backward(ctx, *cts: torch.Tensor):
        xs, host = ctx.saved_tensors, ctx.host
        b = _batch(host, xs)
        # H is symmetric: the vector-Jacobian product of the gradient is H ct
        hv = host.hvp(*map(_flat, xs), *map(_flat, cts))
        return (None, *(_shaped(h, b + s, x) for h, s, x in zip(hv, host.shapes, xs)))


class _Loss(torch.autograd.Function):
    """xs -> the loss; backward: the incoming gradient times rvm's gradient."""

    @staticmethod
    def forward(ctx, host: Host, *xs: torch.Tensor):
        b = _batch(host, xs)
        loss, *g = host.vg(*map(_flat, xs))
        ctx.host = host
        ctx.save_for_backward(*xs)
        ctx.grads = [_shaped(gi, b + s, x) for gi, s, x in zip(g, host.shapes, xs)]
        return _shaped(loss, b, xs[0])

    @staticmethod
    def backward(ctx, ct: torch.Tensor):
        xs = ctx.saved_tensors
        if torch.is_grad_enabled():         # create_graph: differentiate the gradient too
            grads = _Gradient.apply(ctx.host, *xs)
        else:
            grads = ctx.grads
        out = []
        for g, shape in zip(grads, ctx.host.shapes):
            out.append(ct.reshape(ct.shape + (1,) * len(shape)) * g)
        return (None, *out)


def torch_function(program: Any, of: str, wrt: str | Sequence[str],
                   inputs: Mapping[str, Any] | None = None, *,
                   native: bool | None = None) -> Callable[..., torch.Tensor]:
    """A torch function f(*wrt_tensors) -> loss tensor of `program` (a Program or a path).

    `of` is the loss cell, `wrt` the differentiable inputs that become f's arguments in
    order (a scalar cell takes a 0-d tensor, an array cell a tensor of its length, each with
    the same optional leading batch dimensions, which the loss gets); the other inputs keep
    the values of `inputs`.  Gradients are rvm's adjoint (torch.autograd.gradcheck and
    gradgradcheck pass in float64).  `f.host` is the Host (rvm/interop/host.py)."""
    host = Host(program, of, wrt, inputs, native)
    n = len(host.cells)

    def f(*args: Any) -> torch.Tensor:
        if len(args) != n:
            raise TypeError(f"this rvm function takes {n} argument{'s' * (n != 1)} "
                            f"({', '.join(host.names)}), got {len(args)}")
        xs = [a if isinstance(a, torch.Tensor) else torch.as_tensor(a, dtype=torch.float64)
              for a in args]
        batch = None
        for x, s, name in zip(xs, host.shapes, host.names):
            if x.dim() < len(s) or tuple(x.shape[x.dim() - len(s):]) != s:
                raise ValueError(f"{name}: expected shape {s} after the batch dimensions, "
                                 f"got {tuple(x.shape)}")
            b = tuple(x.shape[:x.dim() - len(s)])
            if batch is not None and b != batch:
                raise ValueError(f"{name}: batch dimensions {b} differ from {batch}")
            batch = b
        return _Loss.apply(host, *xs)

    f.host = host                 # type: ignore[attr-defined]
    return f
