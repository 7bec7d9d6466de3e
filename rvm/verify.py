"""The bytecode verifier: defined in isa/verify.py (below the assembler and the machine);
this module re-exports it."""
from isa.verify import *  # noqa: F401,F403
from isa.verify import MAX_CELLS, check, verify  # noqa: F401
