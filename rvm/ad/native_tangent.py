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
import threading
import weakref
from typing import Any

NATIVE_AFTER = 3


class _State:
    """One Program's tangent-mode native code: calls seen, the built code or why not."""

    def __init__(self) -> None:
        self.calls = 0
        self.native: Any = None             # rvm.native.Native (kind "tangent")
        self.why: str | None = None         # why there is none (Unsupported, BuildError)
        self.thread: threading.Thread | None = None


_states: dict[int, _State] = {}
_lock = threading.Lock()


def _state(program: Any) -> _State:
    with _lock:
        st = _states.get(id(program))
        if st is None:
            st = _states[id(program)] = _State()
            weakref.finalize(program, _states.pop, id(program), None)
        return st


def _build(program: Any, st: _State) -> None:
    from .. import native
    try:
        st.native = native.compile_tangent(program)
    except (native.Unsupported, native.BuildError, OSError) as e:
        st.why = f"interpreted: {e}"


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
    st = _state(program)
    if st.native is None:
        if native:
            from .. import native as nat
            st.native = nat.compile_tangent(program)      # raises when it cannot
            st.why = None
        elif st.why is None:
            with _lock:
                st.calls += 1
                if st.calls >= NATIVE_AFTER and st.thread is None:
                    st.thread = threading.Thread(target=_build, args=(program, st), daemon=True,
                                                 name="rvm-native-tangent-build")
                    st.thread.start()
    if st.native is None:
        return st.why or "not compiled"
    if not core.native_tangent and not st.native.install(core):
        return "interpreted: the entry frame does not fit the machine's frame region"
    return "native"
