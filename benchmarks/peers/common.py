"""Shared machinery of the peer benchmarks: peer detection, the C reference build, timing,
peak-memory probes and gradient checks.

Every peer of a case is given as an `Impl` (forward and gradient closures over prepared
inputs); `engine.run_case` warms it up, checks its gradient against the reference and times it.
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
C_DIR = HERE / "c"

# Peers in table order: rvm first (the subject), C next (the physical-limit reference).
PEERS = ("rvm", "C", "python", "numpy", "autograd", "torch", "jax")

# Single-threaded everything: the machine has 2 shared cores, the tasks are scalar loops, and
# idle BLAS/OpenMP/XLA worker threads spinning on the other core only add noise.
THREAD_ENV = {
    "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}


def set_thread_env() -> None:
    """Call before numpy, torch or jax is imported."""
    for k, v in THREAD_ENV.items():
        os.environ.setdefault(k, v)


class Skip(Exception):
    """A peer cannot run this case; the message is the note printed in its place."""


GradDict = dict[str, Any]


@dataclass
class Impl:
    """One peer's version of one case.

    `grad()` returns {name: value} like rvm.grad; `grad_loop(k)` (optional) runs k gradients
    with less call overhead than a Python loop (the C kernels loop internally, since a ctypes
    call costs about as much as a whole small kernel).  `jit` marks a peer whose first call
    compiles (its compile time is reported apart).  `forward` may be None (no separate
    forward); `grad` may be None (only the forward exists, e.g. rvm before its AD lands)."""
    forward: Callable[[], Any] | None
    grad: Callable[[], GradDict] | None
    forward_loop: Callable[[int], Any] | None = None
    grad_loop: Callable[[int], Any] | None = None
    jit: bool = False
    compile_s: float | None = None   # a compile done before the first call (the rvm peer's)
    note: str = ""
    describe: Callable[[Any], str] | None = None   # after timing: more for the note (a Row)
    flat: Callable[[], Any] | None = None   # rvm: the same gradient by f.flat(x, out), timed too
    forward_flat: Callable[[], Any] | None = None   # rvm: the forward by run_fn(...).flat(x, out)
    extra: dict[str, Any] = field(default_factory=dict)


# ---- peer availability -----------------------------------------------------------------------

_avail: dict[str, str | None] = {}


def peer_missing(peer: str) -> str | None:
    """None if the peer can run here, else the reason (printed as the skip note)."""
    if peer in _avail:
        return _avail[peer]
    why: str | None = None
    try:
        if peer == "rvm":
            _import_rvm()
        elif peer == "C":
            if cc() is None:
                why = "no C compiler (gcc/cc) on PATH"
        elif peer == "autograd":
            import autograd  # noqa: F401
        elif peer == "torch":
            import torch
            torch.set_num_threads(1)
        elif peer == "jax":
            import jax
            jax.config.update("jax_enable_x64", True)   # float64 like every other peer
            jax.config.update("jax_platforms", "cpu")
    except Exception as e:   # an import can fail in many ways (missing, broken build)
        why = f"not installed ({type(e).__name__}: {e})".splitlines()[0][:100]
    _avail[peer] = why
    return why


def _import_rvm(tries: int = 4, wait: float = 5.0) -> Any:
    """import rvm, retrying: another engineer may be rebuilding the extension right now."""
    import importlib
    for i in range(tries):
        try:
            return importlib.import_module("rvm")
        except ImportError:
            if i == tries - 1:
                raise
            for name in [m for m in sys.modules if m == "rvm" or m.startswith("rvm.")]:
                del sys.modules[name]     # a half-imported package would stick
            time.sleep(wait)
    return None


def versions() -> dict[str, str]:
    """Versions of the peers that import, for the JSON record."""
    out = {"python": sys.version.split()[0], "numpy": np.__version__}
    from importlib import metadata
    for name in ("torch", "jax", "jaxlib", "autograd"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    c = cc()
    if c:
        try:
            out["cc"] = subprocess.run([c, "--version"], capture_output=True, text=True,
                                       check=True).stdout.splitlines()[0]
        except Exception:
            out["cc"] = c
    return out


def rvm_grad_missing() -> str | None:
    """None once the lead's gradient API (rvm.grad / grad_fn / hessian) is importable."""
    try:
        rvm = _import_rvm()
    except Exception as e:
        return f"rvm does not import ({type(e).__name__}: {e})"
    if not all(hasattr(rvm, f) for f in ("grad", "grad_fn")):
        return "rvm gradient: not available (rvm.grad / rvm.grad_fn missing)"
    return None


# ---- the C reference ---------------------------------------------------------------------------

def cc() -> str | None:
    return shutil.which("gcc") or shutil.which("cc")


_tmp: str | None = None
_libs: dict[str, ctypes.CDLL] = {}


def c_lib(name: str) -> ctypes.CDLL:
    """Compile peers/c/<name>.c with -O2 into a temp dir (once per process) and load it."""
    global _tmp
    if name in _libs:
        return _libs[name]
    why = peer_missing("C")
    if why:
        raise Skip(why)
    if _tmp is None:
        _tmp = tempfile.mkdtemp(prefix="rvm-peers-")
        atexit.register(shutil.rmtree, _tmp, True)
    so = os.path.join(_tmp, f"{name}.so")
    cmd = [cc(), "-O2", "-shared", "-fPIC", str(C_DIR / f"{name}.c"), "-o", so, "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise Skip(f"C build failed: {r.stderr.strip().splitlines()[-1] if r.stderr else r.returncode}")
    _libs[name] = ctypes.CDLL(so)
    return _libs[name]


def dptr(a: np.ndarray) -> ctypes.c_void_p:
    assert a.dtype == np.float64 and a.flags.c_contiguous
    return ctypes.c_void_p(a.ctypes.data)


# ---- timing --------------------------------------------------------------------------------------

@dataclass
class Timing:
    median: float            # seconds per call
    samples: int
    calls_per_sample: int


def measure(call: Callable[[], Any], loop: Callable[[int], Any] | None, *, repeat: int,
            min_sample: float, max_total: float, first: float) -> Timing:
    """Median over `repeat` samples of the time per call; each sample runs enough calls to
    last `min_sample` seconds (so clock resolution and loop overhead vanish).  The caller has
    already warmed up (its first call took `first` seconds).  Long calls get fewer samples so a
    case stays within `max_total` seconds."""
    k = max(1, int(min_sample / max(first, 1e-9)))
    if loop is None:
        def loop(kk: int) -> None:
            for _ in range(kk):
                call()
    if first < min_sample:
        # calibrate once more: the first call includes warm-up effects (caches, allocator)
        t0 = time.perf_counter()
        loop(k)
        per = (time.perf_counter() - t0) / k
        k = max(1, int(min_sample / max(per, 1e-9)))
    samples: list[float] = []
    spent = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        loop(k)
        dt = time.perf_counter() - t0
        samples.append(dt / k)
        spent += dt
        if spent > max_total and len(samples) >= 1:
            break
    return Timing(statistics.median(samples), len(samples), k)


# ---- memory ---------------------------------------------------------------------------------------

def _status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)   # hand freed heap back, so growth is visible
    except (OSError, AttributeError):
        pass


def peak_growth(call: Callable[[], Any]) -> int | None:
    """Bytes by which the resident set's peak rose above its level before `call`, or None
    where /proc/self/clear_refs cannot reset the peak (not Linux).  Freed heap memory is
    trimmed first, else a peer reusing its allocator pool would look free of cost."""
    _trim()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")   # reset VmHWM to the current RSS
    except OSError:
        return None
    base = _status_kb("VmRSS")
    call()
    peak = _status_kb("VmHWM")
    if base is None or peak is None:
        return None
    return max(0, peak - base) * 1024


def maxrss_bytes() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---- gradient checks ----------------------------------------------------------------------------

def to_numpy(v: Any) -> np.ndarray:
    if hasattr(v, "detach"):          # torch
        v = v.detach().numpy()
    return np.asarray(v, dtype=np.float64)


def compare(got: GradDict, ref: GradDict, rtol: float, atol: float) -> str | None:
    """None if `got` matches `ref` for every name of `ref`, else what differs."""
    for name, r in ref.items():
        if name not in got:
            return f"no gradient for {name}"
        g, r = to_numpy(got[name]), to_numpy(r)
        if g.shape != r.shape:
            return f"{name}: shape {g.shape} != {r.shape}"
        if not np.allclose(g, r, rtol=rtol, atol=atol):
            err = np.max(np.abs(g - r) / (atol + rtol * np.abs(r)))
            return f"{name}: off by {err:.3g} x tolerance"
    return None
