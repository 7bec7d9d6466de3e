"""Compile generated C into a shared library, cached on disk by the hash of everything that
goes into it (the source, the headers it includes, the compiler and its flags)."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .cflags import CFLAGS

HEADERS = Path(__file__).resolve().parent.parent      # rvm/: _arith.h, _deriv.h, _dual.h
FLAGS = CFLAGS + ["-shared", "-fPIC", "-Wno-unused-label", "-Wno-unused-variable"]


class BuildError(Exception):
    """No C compiler, or it failed (the message has its output)."""


def compiler() -> str | None:
    """The C compiler: $CC, else cc, gcc or clang on PATH."""
    for name in filter(None, [os.environ.get("CC"), "cc", "gcc", "clang"]):
        path = shutil.which(name.split()[0])
        if path:
            return path
    return None


def cache_dir() -> Path:
    """$RVM_CACHE_DIR, else $XDG_CACHE_HOME/rvm/native (~/.cache/rvm/native)."""
    env = os.environ.get("RVM_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rvm" / "native"


def _key(source: str, cc: str) -> str:
    h = hashlib.sha256()
    h.update(source.encode())
    for name in sorted(os.listdir(HEADERS)):
        if name.endswith(".h"):
            h.update(name.encode() + (HEADERS / name).read_bytes())
    h.update(" ".join([cc] + FLAGS).encode())
    return h.hexdigest()[:24]


def build(source: str) -> tuple[ctypes.CDLL, Path, bool]:
    """(the loaded library, its path, whether it was compiled now rather than cached)."""
    cc = compiler()
    if cc is None:
        raise BuildError("no C compiler found (set CC)")
    out_dir = cache_dir()
    path = out_dir / f"rvm_{_key(source, cc)}.so"
    fresh = not path.exists()
    if fresh:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            src = Path(tmp) / "prog.c"
            src.write_text(source)
            obj = Path(tmp) / "prog.so"
            r = subprocess.run([cc, *FLAGS, f"-I{HEADERS}", str(src), "-o", str(obj), "-lm"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise BuildError(f"{cc} failed:\n{r.stderr[-4000:]}")
            os.replace(obj, path)           # atomic: a concurrent build of the same key is fine
    return ctypes.CDLL(str(path)), path, fresh
