"""Automatic differentiation by running bytecode backward over dual cells (docs/ad.md)."""
from .batches import hessian_batch, jvp_batch
from .engine import (
                     BatchError,
                     Derivatives,
                     NonDifferentiablePath,
                     NonDifferentiablePathWarning,
                     NonFiniteDerivative,
                     NotDifferentiable,
                     ReleasedTangentError,
                     ReleasedTangentWarning,
                     derivatives,
                     grad,
                     grad_fn,
                     hessian,
                     hvp,
                     jvp,
)

__all__ = ["BatchError", "Derivatives", "NonDifferentiablePath", "NonDifferentiablePathWarning",
           "NonFiniteDerivative", "NotDifferentiable", "ReleasedTangentError",
           "ReleasedTangentWarning", "derivatives", "grad", "grad_fn", "hessian", "hessian_batch",
           "hvp", "jvp", "jvp_batch"]
