"""rvm inside the Python scientific stack (docs/interop.md).

    rvm.interop.jax_function(program, of=..., wrt=[...])     a JAX function (jit, grad, jvp,
                                                               hessian, vmap)
    rvm.interop.torch_function(program, of=..., wrt=[...])   a torch.autograd.Function layer
    rvm.interop.pickling                                     pickles by value (Program, GradFn,
                                                               Result, Derivatives)

JAX and torch load only when their function is first used (`pip install -e '.[interop]'`).
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

from .pickling import PICKLE_VERSION, IncompatiblePickle

__all__ = ["jax_function", "torch_function", "PICKLE_VERSION", "IncompatiblePickle"]

_LAZY = {"jax_function": "jax", "torch_function": "torch"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rvm.interop' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
