"""Automatic differentiation by running bytecode backward over dual cells (docs/ad.md)."""
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
           "ReleasedTangentWarning", "derivatives", "grad", "grad_fn", "hessian", "hvp", "jvp"]
