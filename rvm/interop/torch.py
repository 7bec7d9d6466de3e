"""An rvm program as a PyTorch layer (docs/interop.md).

    f = rvm.interop.torch_function(prog, of="out", wrt=["z"])
    z = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    f(z).backward()                     # z.grad == J_2'(3)

Built on `torch.autograd.Function`: the forward pass is one GradFn call per input (the value
and rvm's adjoint gradient together, the gradient kept for backward), backward scales that
gradient by the incoming gradient, and backward is itself differentiable through rvm's
Hessian-vector product, so second derivatives (gradgradcheck, a Hessian) work too.  A leading
batch dimension (any number of them) is a loop over the batch on the host: rvm has no batch
mode yet.  The tensors stay on the CPU; results take the inputs' dtype (use float64).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .host import Host

__all__ = ["torch_function"]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64, copy=False)


class _Gradient(torch.autograd.Function):
    """xs -> rvm's gradient per wrt; its backward is the Hessian-vector product."""

    @staticmethod
    def forward(ctx, host: Host, *xs: torch.Tensor):
        ctx.host = host
        ctx.save_for_backward(*xs)
        g = host.batched(host.grad1, [_np(x) for x in xs])
        return tuple(torch.as_tensor(np.asarray(gi), dtype=x.dtype) for gi, x in zip(g, xs))

    @staticmethod
    def backward(ctx, *cts: torch.Tensor):
        xs = ctx.saved_tensors
        # H is symmetric: the vector-Jacobian product of the gradient is H ct
        hv = ctx.host.batched(ctx.host.hvp1, [_np(x) for x in xs], [_np(c) for c in cts])
        return (None, *(torch.as_tensor(np.asarray(h), dtype=x.dtype) for h, x in zip(hv, xs)))


class _Loss(torch.autograd.Function):
    """xs -> the loss; backward: the incoming gradient times rvm's gradient."""

    @staticmethod
    def forward(ctx, host: Host, *xs: torch.Tensor):
        out = host.batched(host.value_and_grad1, [_np(x) for x in xs])
        loss, g = out
        ctx.host = host
        ctx.save_for_backward(*xs)
        ctx.grads = [torch.as_tensor(np.asarray(gi), dtype=x.dtype) for gi, x in zip(g, xs)]
        return torch.as_tensor(np.asarray(loss), dtype=xs[0].dtype)

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
