"""When the tangent modes (rvm.jvp, rvm.hvp, rvm.hessian) run native code.

The native code of the tangent modes (rvm/native/tangent.py) is built once per Program and
shared by every machine of it.  native=None (the default, unless RVM_NATIVE=0): the
NATIVE_AFTER-th tangent-mode call on a Program starts the build in a thread; the calls go on
interpreted until it is ready, and later calls run native code.  native=True: build now (or
take it from the disk cache) and raise rvm.native.Unsupported or BuildError when that cannot
be done.  native=False: never.  Results are the interpreter's either way (docs/ad.md).
"""
from __future__ import annotations

import os
from typing import Any

from .native_builds import Builds

NATIVE_AFTER = 3


_builds = Builds("compile_tangent", "interpreted", "rvm-native-tangent-build")


def prepare(core: Any, program: Any, native: bool | None) -> str:
    """Install the program's tangent-mode native code on `core` (a Core of `program`) when
    it is ready, following `native` (see the module docstring); returns how the tangent
    modes will run: "native", "interpreted: why", "not compiled" or "off"."""
    if native is not False and core.native_tangent:
        return "native"                         # installed by an earlier call
    if native is False or (native is None and os.environ.get("RVM_NATIVE") == "0"):
        if core.native_tangent:
            core.set_native_tangent()
        return "off"
    st = _builds.state(program)
    if st.native is None:
        if native:
            st.native = _builds.compile(program)      # raises when it cannot
            st.why = None
        elif st.why is None:
            with _builds.lock:
                st.calls += 1
                if st.calls >= NATIVE_AFTER:
                    _builds.start(program, st)
    if st.native is None:
        return st.why or "not compiled"
    if not core.native_tangent and not st.native.install(core):
        return "interpreted: the entry frame does not fit the machine's frame region"
    return "native"
