"""rvm: a reversible virtual machine.

Assemble `.rasm` programs, run them forward and backward, and read their results:

    import rvm
    prog = rvm.assemble("programs/rfib.rasm")
    rvm.run(prog, {"n": 10}).outputs          # {'out': 55}
    rvm.grad("programs/accumulate.rasm", of="x", wrt=["x", "one"], inputs={"n": 1000})

The machine (the compiled core) and the gradient engine load on first use, so that tools that
only read programs (the assembler, `rvm dis`) never load them.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

from .errors import InvalidBytecode, PathDivergence, RVMError, Trap
from .program import Program

_LAZY_ASSEMBLER = ("AssemblyError", "Diagnostic")

_LAZY = {"assemble": "api", "load": "api", "run": "api", "roundtrip": "api", "Result": "api",
         "run_batch": "api", "compile_run_batch": "api", "run_batch_native": "api",
         "BatchError": "api", "run_fn": "api", "RunFn": "api",
         "RoundTrip": "api", "Machine": "machine", "derivatives": "ad", "grad": "ad",
         "grad_fn": "ad", "hessian": "ad", "hvp": "ad", "jvp": "ad", "jvp_batch": "ad",
         "hessian_batch": "ad"}

__all__ = ["assemble", "load", "run", "run_fn", "RunFn", "run_batch", "compile_run_batch",
           "run_batch_native", "BatchError", "roundtrip",
           "Result",
           "RoundTrip", "Machine", "Program",
           "RVMError", "Trap", "PathDivergence", "InvalidBytecode", "AssemblyError", "Diagnostic",
           "grad", "jvp", "hessian", "hvp", "grad_fn", "derivatives", "jvp_batch",
           "hessian_batch"]
__version__ = "0.1.0"


_SUBMODULES = ("api", "machine", "ad", "native", "debug", "trace", "hw", "cli", "values",
               "verify")


def __getattr__(name: str) -> Any:
    if name in _LAZY_ASSEMBLER:
        value = getattr(import_module("assembler"), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return import_module(f".{name}", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rvm' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ip: Any) -> None:
    """`%load_ext rvm`: the %%rasm and %rvm magics and rich displays (rvm/jupyter.py)."""
    from .jupyter import load_ipython_extension as load
    load(ip)
