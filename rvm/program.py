"""The Program format lives in isa/program.py (below both the assembler and the machine); this
module keeps `rvm.program` working for code written against it."""
from isa.program import *  # noqa: F401,F403
from isa.program import MODE_NAMES  # noqa: F401
