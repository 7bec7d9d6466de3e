"""Compile generated C into a shared library, cached on disk by the hash of everything that
goes into it (the source, the headers it includes, the compiler and its flags)."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from .cflags import ARCH, CFLAGS

HEADERS = Path(__file__).resolve().parent.parent      # rvm/: _arith.h, _deriv.h, _dual.h
FLAGS = CFLAGS + ["-shared", "-fPIC", "-Wno-unused-label", "-Wno-unused-variable"]


class BuildError(Exception):
    """No C compiler, or it failed (the message has its output)."""


class UnsafeCache(BuildError):
    """The cache directory or a cached library could have been written by someone else: rvm
    does not load it (loading a library runs its code)."""


def _check_private(path: Path, what: str) -> None:
    """The trust model: a library is loaded only from a directory and a file that belong to
    this user and that no one else can write (not a symlink either), since whoever can write
    there chooses the code rvm runs."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeCache(f"refusing the native {what} {path}: it is a symbolic link")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise UnsafeCache(f"refusing the native {what} {path}: it belongs to user {st.st_uid}, "
                          f"not to you ({os.getuid()})")
    if st.st_mode & 0o022:
        who = ("group and others" if st.st_mode & 0o022 == 0o022 else
               "group" if st.st_mode & 0o020 else "others")
        raise UnsafeCache(f"refusing the native {what} {path}: it is writable by {who} "
                          f"(mode {stat.S_IMODE(st.st_mode):o}); `chmod go-w` it, or set "
                          f"RVM_CACHE_DIR to a private directory")


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


@cache
def arch_flags(cc: str) -> tuple[list[str], str]:
    """(ARCH, what it means on this machine: the compiler's expansion of it, for the cache
    key), or ([], "") when the compiler does not take it or RVM_NATIVE_ARCH=0 asks for the
    portable build (for valgrind, which knows no AVX-512, or a library to copy elsewhere)."""
    if os.environ.get("RVM_NATIVE_ARCH") == "0":
        return [], ""
    try:
        r = subprocess.run([cc, *ARCH, "-E", "-v", "-"], input="", capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return [], ""
    lines = [ln for ln in r.stderr.splitlines() if " -march=" in ln or " -mcpu=" in ln]
    if r.returncode != 0 or not lines:
        return [], ""
    return list(ARCH), lines[0].split(" -", 1)[-1]


def _key(source: str, cc: str, flags: list[str] | None = None, arch: str = "") -> str:
    flags = FLAGS if flags is None else flags
    h = hashlib.sha256()
    h.update(source.encode())
    for name in sorted(os.listdir(HEADERS)):
        if name.endswith(".h"):
            h.update(name.encode() + (HEADERS / name).read_bytes())
    h.update(" ".join([cc] + flags).encode())
    h.update(arch.encode())
    return h.hexdigest()[:24]


def build(source: str | list[str], for_cpu: bool | Sequence[bool] = False,
          extra: Sequence[str] = ()) -> tuple[ctypes.CDLL, Path, bool]:
    """(the loaded library, its path, whether it was compiled now rather than cached).
    source: the C, or the C of several translation units, compiled at once (one compiler
    process each: a big library builds in about the time of its biggest part, given the
    cores) and linked into one library.  for_cpu: built for this machine's CPU
    (cflags.ARCH), where the compiler takes it; one flag for every part, or one per part (the
    tangent library's lanes gain from AVX; its scalar modes ran 2x slower VEX-encoded on T2).
    extra: more compiler flags for every part (in the cache key too)."""
    cc = compiler()
    if cc is None:
        raise BuildError("no C compiler found (set CC)")
    parts = [source] if isinstance(source, str) else source
    cpu = [for_cpu] * len(parts) if isinstance(for_cpu, bool) else list(for_cpu)
    if len(cpu) != len(parts):
        raise ValueError("for_cpu: one flag per part")
    arch_list, arch = arch_flags(cc) if any(cpu) else ([], "")
    flags = FLAGS + list(extra) + (arch_list if all(cpu) else [])
    part_flags = [FLAGS + list(extra) + (arch_list if c else []) for c in cpu]
    if arch and not all(cpu):
        arch += " parts " + "".join("1" if c else "0" for c in cpu)
    out_dir = cache_dir()
    if not out_dir.exists():
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(out_dir, 0o700)             # whatever the umask
    _check_private(out_dir, "cache directory")
    path = out_dir / f"rvm_{_key(chr(0).join(parts), cc, flags, arch)}.so"
    if os.path.lexists(path):
        _check_private(path, "library")
        try:
            return ctypes.CDLL(str(path)), path, False
        except OSError:                     # corrupt (a crash mid-write elsewhere): rebuild
            path.unlink()
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        obj = Path(tmp) / "prog.so"
        if len(parts) == 1:
            src = Path(tmp) / "prog.c"
            src.write_text(parts[0])
            _run([[cc, *part_flags[0], f"-I{HEADERS}", str(src), "-o", str(obj), "-lm"]], cc)
        else:
            objs = [Path(tmp) / f"part{i}.o" for i in range(len(parts))]
            for i, part in enumerate(parts):
                (Path(tmp) / f"part{i}.c").write_text(part)
            _run([[cc, *part_flags[i], f"-I{HEADERS}", "-c", str(Path(tmp) / f"part{i}.c"),
                   "-o", str(o)] for i, o in enumerate(objs)], cc)
            _run([[cc, *flags, *map(str, objs), "-o", str(obj), "-lm"]], cc)
        os.chmod(obj, 0o700)
        os.replace(obj, path)           # atomic: a concurrent build of the same key is fine
    return ctypes.CDLL(str(path)), path, True


def _run(commands: list[list[str]], cc: str) -> None:
    """Run the compiler commands at once; BuildError with the output of the first that
    fails."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in commands]
    outs = [p.communicate() for p in procs]
    for p, (_out, err) in zip(procs, outs):
        if p.returncode != 0:
            raise BuildError(f"{cc} failed:\n{err[-4000:]}")
