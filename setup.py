"""Build the Cython extensions.  Their instruction tables (rvm/_opcodes.pxi and the other files
in GENERATED) are generated here from isa/, the one source of truth, so they cannot drift from
the assembler."""
import os
import runpy
import sys
import sysconfig

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from isa.build import GENERATED  # noqa: E402

for rel, generate in GENERATED.items():
    path = os.path.join(HERE, rel)
    text = generate()
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as fh:
            fh.write(text)

# one set of flags for the extensions and the native code (rvm/native/cflags.py)
COMPILE_ARGS = runpy.run_path(os.path.join(HERE, "rvm/native/cflags.py"))["CFLAGS"]
# gcc inlines within a budget for the whole file (inline-unit-growth, 40% at -O2).  With the
# generated cases the core's file outgrew it: the dispatch loop called opnd, rvm_convert and
# rvm_compare instead of inlining them (+17% instructions per dispatched instruction, callgrind,
# issue 15's audit).  The core gets a larger budget (gcc only: clang has no such parameter).
CORE_ARGS = ["--param=inline-unit-growth=100"] if "gcc" in (
    os.environ.get("CC") or sysconfig.get_config_var("CC") or "") else []
DIRECTIVES = {"boundscheck": False, "wraparound": False, "cdivision": True,
              "initializedcheck": False}

core = Extension(
    "rvm._core",
    ["rvm/_core.pyx"],
    depends=["rvm/_abi.h", "rvm/_arith.h", "rvm/_dual.h", "rvm/_deriv.h", "rvm/_isa.h",
             "rvm/_adrules.h",
             "rvm/_opcodes.pxi", "rvm/_decls.pxi", "rvm/_operands.pxi", "rvm/_ad.pxi",
             "rvm/_kernels.pxi", "rvm/_calls.pxi", "rvm/_native.pxi",
             "rvm/_gradfast.pxi", "rvm/_batch.pxi",
             "rvm/_vm_run.pxi.in", "rvm/_vm_run.pxi", "rvm/_nested.pxi"],
    include_dirs=[numpy.get_include(), os.path.join(HERE, "rvm")],
    # -fwrapv: int cells wrap by definition; -ffp-contract=off: no fused multiply-add, so float
    # results match isa/arith.py bit for bit.
    extra_compile_args=COMPILE_ARGS + CORE_ARGS,
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

hw_sim = Extension("rvm.hw._sim", ["rvm/hw/_sim.pyx"], include_dirs=[numpy.get_include()],
                   extra_compile_args=COMPILE_ARGS,
                   define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])

EXTENSIONS = [core, hw_sim]

setup(ext_modules=cythonize(EXTENSIONS, language_level=3, compiler_directives=DIRECTIVES))
