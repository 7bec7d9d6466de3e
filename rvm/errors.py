"""rvm's exceptions: defined in isa/errors.py (below the assembler and the machine, so that
both raise them without loading each other); this module re-exports them."""
from isa.errors import *  # noqa: F401,F403
from isa.errors import TRAPS  # noqa: F401
