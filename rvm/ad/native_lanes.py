"""When GradFn.batch runs W rows at once (the batch lanes, rvm/native/lanes.py).

The lane library of a Program (its gradient over W batch rows, every cell a vector of W
values) is built once per Program and shared by every GradFn and thread of it.  It is built
lazily: the first `f.batch` of a program with at least MIN_ROWS rows starts the build in a
thread (a few seconds of gcc; the disk cache makes later processes find it at once) and runs
its rows one at a time, as batches do without it; once the library is there, batches run W
rows at a time.
`GradFn.compile_batch()` builds it now (or waits for the build under way).  RVM_NATIVE=0 or
RVM_NATIVE_LANES=0 turns the lanes off; results are bit for bit the same either way.

`rvm.run_batch` has lane libraries of its own, built the same way (kind "run": the forward
run over W rows, without rules or adjoints; "back": the backward run from main's end, for
reverse=True), which `rvm.compile_run_batch` builds now and `rvm.run_batch_native` reports.
"""
from __future__ import annotations

import os
from typing import Any

from .native_builds import Builds

# a batch of fewer rows does not start the build (a few whole groups at most gain little)
MIN_ROWS = 64


# by kind: the gradient's (GradFn.batch), rvm.run_batch's forward and backward runs
_builds = {"grad": Builds("compile_lanes", "one row at a time", "rvm-native-lanes-build"),
           "run": Builds("compile_run_lanes", "one row at a time", "rvm-native-run-lanes-build"),
           "back": Builds("compile_run_lanes", "one row at a time",
                          "rvm-native-run-lanes-build", (True,))}


def off() -> bool:
    """The lanes are turned off (RVM_NATIVE=0 or RVM_NATIVE_LANES=0)."""
    return os.environ.get("RVM_NATIVE") == "0" or os.environ.get("RVM_NATIVE_LANES") == "0"


def ready(program: Any, rows: int, kind: str = "grad") -> Any:
    """The program's lane library (rvm.native.Native) of `kind` if it is built, else None;
    the first call for a batch of `rows` >= MIN_ROWS rows starts its build in the
    background."""
    if off():
        return None
    builds = _builds[kind]
    st = builds.state(program)
    if st.native is None and st.why is None and rows >= MIN_ROWS:
        with builds.lock:
            builds.start(program, st)
    return st.native


def build_now(program: Any, kind: str = "grad") -> Any:
    """The program's lane library of `kind`, built now (or the background build waited for);
    raises rvm.native.Unsupported or BuildError when it cannot be built."""
    builds = _builds[kind]
    st = builds.state(program)
    with builds.lock:
        thread = st.thread
    if thread is not None:
        thread.join()
    if st.native is None:
        st.native = builds.compile(program)
        st.why = None
    return st.native


def status(program: Any, kind: str = "grad") -> str:
    """How GradFn.batch (kind "run", "back": rvm.run_batch) runs the program's rows: "W lanes
    (library, built/cached in s)", "not built yet", "off" or "one row at a time: why"."""
    if off():
        return "off"
    st = _builds[kind].state(program)
    if st.native is not None:
        n = st.native
        return (f"{n.width} lanes ({n.path.name}, {'built' if n.built else 'cached'} in "
                f"{n.seconds:.2f} s)")
    return st.why or "not built yet"


def bounds(b: list[int], width: int) -> list[int]:
    """Thread chunk bounds (api.chunks) moved down to multiples of the lane width, so that
    every chunk but the last is whole groups of rows."""
    out = [b[0]] + [x - x % width for x in b[1:-1]] + [b[-1]]
    return [x for i, x in enumerate(out) if i == 0 or x > out[i - 1]]
