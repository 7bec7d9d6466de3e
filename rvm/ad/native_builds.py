"""A native library built once per Program, in a background thread or at once: the state
the tangent modes (native_tangent.py) and the batch lanes (native_lanes.py) keep per
Program, dropped with the Program."""
from __future__ import annotations

import threading
import weakref
from typing import Any


class Build:
    """One Program's library: calls seen, the built code, or why there is none."""

    def __init__(self) -> None:
        self.calls = 0
        self.native: Any = None             # rvm.native.Native
        self.why: str | None = None         # why there is none (Unsupported, BuildError)
        self.thread: threading.Thread | None = None


class Builds:
    """The libraries of one kind, one Build per Program: `compile` names the rvm.native
    function that builds one (called with the Program and `args`), `fallback` says how calls
    run when it cannot be built."""

    def __init__(self, compile: str, fallback: str, thread_name: str, args: tuple = ()) -> None:
        self._compile, self._fallback, self._thread_name = compile, fallback, thread_name
        self._args = args
        self._states: dict[int, Build] = {}
        self.lock = threading.Lock()

    def state(self, program: Any) -> Build:
        with self.lock:
            st = self._states.get(id(program))
            if st is None:
                st = self._states[id(program)] = Build()
                weakref.finalize(program, self._states.pop, id(program), None)
            return st

    def compile(self, program: Any) -> Any:
        """Build now (or take it from the disk cache); raises Unsupported or BuildError."""
        from .. import native
        return getattr(native, self._compile)(program, *self._args)

    def start(self, program: Any, st: Build) -> None:
        """Start the background build unless one was started (the caller holds self.lock)."""
        if st.thread is None:
            st.thread = threading.Thread(target=self._run, args=(program, st), daemon=True,
                                         name=self._thread_name)
            st.thread.start()

    def _run(self, program: Any, st: Build) -> None:
        from .. import native
        try:
            st.native = self.compile(program)
        except (native.Unsupported, native.BuildError, OSError) as e:
            st.why = f"{self._fallback}: {e}"
