"""The XLA FFI target behind rvm.interop.jax_function (docs/interop.md).

`jax.pure_callback` costs about 70-90 µs a call on its own (it moves the operands into JAX
arrays, calls through JAX's Python machinery and checks the results); an XLA FFI custom call
(`jax.ffi`) reaches Python in well under a microsecond.  `_jax_ffi.c` is such a handler: it
takes the GIL and calls the Python host function registered under the call's `key`
attribute with the operands (a float, or float64 bytes), and copies the results back.

`target()` compiles it once with the system C compiler against jaxlib's FFI headers (cached
like rvm's native code, in `rvm.native.cache_dir()`), registers it with JAX and returns the
target's name; without a compiler, headers or `jax.ffi` it raises `Unavailable` and
jax_function falls back to `jax.pure_callback`.  RVM_JAX_FFI=0 turns the FFI path off.
"""
from __future__ import annotations

import ctypes
import hashlib
import itertools
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

import jax
import jax.ffi

from ..native.build import _check_private, cache_dir, compiler

__all__ = ["Unavailable", "TARGET", "target", "register"]

TARGET = "rvm_host_call"
SOURCE = Path(__file__).resolve().parent / "_jax_ffi.c"
FLAGS = ["-O2", "-shared", "-fPIC", "-std=c99", "-Wall"]

_registry: dict[int, weakref.ref] = {}
_keys = itertools.count(1)
_lock = threading.Lock()
_state: dict[str, object] = {}          # "lib" once registered, "error" once refused


class Unavailable(Exception):
    """The FFI target cannot be built or registered here (the reason is the message)."""


def target() -> str:
    """The registered target's name (built, or loaded from the cache, at the first call)."""
    with _lock:
        if "lib" in _state:
            return TARGET
        if "error" in _state:
            raise Unavailable(str(_state["error"]))
        try:
            lib = _load()
            if lib.rvm_jax_init(ctypes.py_object(_registry)) != 0:
                raise Unavailable("rvm_jax_init refused the registry")
            jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.rvm_jax_call),
                                        platform="cpu")
        except Unavailable as e:
            _state["error"] = e
            raise
        except Exception as e:          # a failed compile or registration: say why, once
            _state["error"] = e
            raise Unavailable(f"{type(e).__name__}: {e}") from e
        _state["lib"] = lib
        return TARGET


def register(fn: Callable) -> int:
    """A key under which the handler finds `fn` while fn lives (a weak reference: the caller
    keeps fn alive as long as anything may call it)."""
    key = next(_keys)

    def gone(_ref: weakref.ref, key: int = key) -> None:
        _registry.pop(key, None)
    _registry[key] = weakref.ref(fn, gone)
    return key


def _load() -> ctypes.PyDLL:
    if os.environ.get("RVM_JAX_FFI") == "0":
        raise Unavailable("turned off (RVM_JAX_FFI=0)")
    cc = compiler()
    if cc is None:
        raise Unavailable("no C compiler found (set CC)")
    include = Path(jax.ffi.include_dir())
    if not (include / "xla" / "ffi" / "api" / "c_api.h").exists():
        raise Unavailable(f"jaxlib's FFI headers are missing from {include}")
    flags = [*FLAGS, f"-I{include}", f"-I{sysconfig.get_paths()['include']}"]
    source = SOURCE.read_bytes()
    h = hashlib.sha256(source)
    h.update((include / "xla" / "ffi" / "api" / "c_api.h").read_bytes())
    h.update(" ".join([cc, *flags, sys.version, jax.__version__]).encode())
    out_dir = cache_dir()
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_private(out_dir, "cache directory")
    path = out_dir / f"rvm_jax_ffi_{h.hexdigest()[:24]}.so"
    if os.path.lexists(path):
        _check_private(path, "library")
        try:
            return ctypes.PyDLL(str(path))
        except OSError:
            path.unlink()
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        obj = Path(tmp) / "ffi.so"
        r = subprocess.run([cc, *flags, str(SOURCE), "-o", str(obj)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise Unavailable(f"{cc} failed on {SOURCE.name}:\n{r.stderr[-2000:]}")
        os.chmod(obj, 0o700)
        os.replace(obj, path)
    return ctypes.PyDLL(str(path))
