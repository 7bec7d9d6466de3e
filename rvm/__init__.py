"""rvm: a reversible virtual machine.

Assemble `.rasm` programs, run them forward and backward, and read their results:

    import rvm
    prog = rvm.assemble("programs/rfib.rasm")
    rvm.run(prog, {"n": 10}).outputs          # {'out': 55}
    rvm.grad("programs/accumulate.rasm", of="x", wrt=["x", "one"], inputs={"n": 1000})
"""
from .api import Result, RoundTrip, assemble, load, roundtrip, run
from .ad import derivatives, grad, grad_fn, hessian, hvp, jvp
from .errors import InvalidBytecode, RVMError, Trap
from .machine import Machine
from .program import Program

__all__ = ["assemble", "load", "run", "roundtrip", "Result", "RoundTrip", "Machine", "Program", "RVMError", "Trap",
           "InvalidBytecode", "grad", "jvp", "hessian", "hvp", "grad_fn", "derivatives"]
__version__ = "0.1.0"
