"""Build the Cython core.  The opcode enum (rvm/_opcodes.pxi) is generated here from
isa/table.py, the one source of truth, so it cannot drift from the assembler."""
import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from isa.table import generate_pxi  # noqa: E402

pxi = os.path.join(HERE, "rvm", "_opcodes.pxi")
text = generate_pxi()
if not os.path.exists(pxi) or open(pxi).read() != text:
    with open(pxi, "w") as fh:
        fh.write(text)

ext = Extension(
    "rvm._core",
    ["rvm/_core.pyx"],
    include_dirs=[numpy.get_include(), os.path.join(HERE, "rvm")],
    # -fwrapv: int cells wrap by definition; -ffp-contract=off: no fused multiply-add, so float
    # results match isa/arith.py bit for bit.
    extra_compile_args=["-O2", "-fwrapv", "-ffp-contract=off", "-fno-strict-aliasing"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

setup(ext_modules=cythonize([ext], language_level=3,
                            compiler_directives={"boundscheck": False, "wraparound": False,
                                                 "cdivision": True, "initializedcheck": False}))
