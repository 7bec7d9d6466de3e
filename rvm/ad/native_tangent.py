"""When the tangent modes (rvm.jvp, rvm.hvp, rvm.hessian) run native code.

The native code of the tangent modes (rvm/native/tangent.py) is built once per Program and
shared by every machine of it, in two forms: the scalar modes alone (a forward run with
tangents, a sweep with the adjoint-tangent rules: rvm.jvp, rvm.hvp and a Hessian over one
cell, or column by column), and the full library, which adds the lane modes (many columns
of a Hessian in one run) and takes most of the compile time (their vector loops at -O3).  A
caller says which it wants (`lanes`: a Hessian of more than one column); a call that wants
the lanes runs on the scalar library while the full one is not there yet.

native=None (the default, unless RVM_NATIVE=0): the NATIVE_AFTER-th such call on a Program
starts the build in a thread; the calls go on interpreted until it is ready, and later calls
run native code.  native=True: build now (or take it from the disk cache) and raise
rvm.native.Unsupported or BuildError when that cannot be done.  native=False: never.  Results
are the interpreter's either way (docs/ad.md).
"""
from __future__ import annotations

import os
from typing import Any

from .native_builds import Builds

NATIVE_AFTER = 3


_builds = Builds("compile_tangent", "interpreted", "rvm-native-tangent-build")
_scalar = Builds("compile_tangent_scalar", "interpreted", "rvm-native-tangent-scalar-build")


def prepare(core: Any, program: Any, native: bool | None, lanes: bool = True) -> str:
    """Install the program's tangent-mode native code on `core` (a Core of `program`) when
    it is ready, following `native` (see the module docstring); `lanes`: the caller would
    use the lane modes (the full library; else the scalar one will do).  Returns how the
    tangent modes will run: "native", "interpreted: why", "not compiled" or "off"."""
    if native is not False and core.native_tangent and (not lanes or core.native_tangent_lanes):
        return "native"                         # installed by an earlier call
    if native is False or (native is None and os.environ.get("RVM_NATIVE") == "0"):
        if core.native_tangent:
            core.set_native_tangent()
        return "off"
    full, scalar = _builds.state(program), _scalar.state(program)
    # (a built full library serves the scalar calls too: no second build for them)
    builds, st = (_builds, full) if lanes or full.native is not None else (_scalar, scalar)
    if st.native is None:
        if native:
            st.native = builds.compile(program)       # raises when it cannot
            st.why = None
        elif st.why is None:
            with builds.lock:
                st.calls += 1
                if st.calls >= NATIVE_AFTER:
                    builds.start(program, st)
    # the library asked for, else the other (the full one serves every call; the scalar one
    # every call, column by column); never the scalar one in place of an installed full one
    for got in ((full, scalar) if lanes else (scalar, full)):
        if got.native is None:
            continue
        if (got is full or not core.native_tangent) and not got.native.install(core):
            return "interpreted: the entry frame does not fit the machine's frame region"
        return "native"
    return st.why or "not compiled"


def lanes_pending(core: Any, program: Any, native: bool | None) -> bool:
    """The lane modes are not on `core` but may still come (`native` allows them, and the
    full library is neither built nor refused): a call that wants them goes through
    `prepare`, which counts it, starts the build and installs the library once it is there,
    rather than run on the scalar modes alone for good."""
    if core.native_tangent_lanes:
        return False
    if native is False or (native is None and os.environ.get("RVM_NATIVE") == "0"):
        return False
    full = _builds.state(program)
    return full.native is None and full.why is None
