"""Native code for gradients: a program's forward run and adjoint sweep compiled to C.

rvm.grad_fn calls a program many times with new inputs; for small programs the interpreter's
dispatch, not the arithmetic, is then most of the time.  `compile_program` translates the
program (rvm/native/codegen.py: the instruction table's semantics and adjoint rules, calling
the interpreter's own arithmetic headers), builds it with the system C compiler into a shared
library cached on disk (rvm/native/build.py), and hands the two entry points to the Core
(`Core.set_native`), whose `gradient` then runs them instead of the interpreter.  Results are
bit for bit the interpreter's; anything the interpreter would trap on makes the native code
give up and the interpreter run the call from the start, reporting as usual.  See docs/ad.md.
`compile_tangent` does the same for the tangent modes (rvm/native/tangent.py: the forward run
with tangents and the sweep with the adjoint-tangent rules), which `Core.gradient` with
tangents (Hessian-vector products, Hessians) and `Core.tangent_run` (rvm.jvp) run.
"""
from __future__ import annotations

import ctypes
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import codegen, lanes, nested, tangent
from .build import BuildError, build, cache_dir, compiler
from .codegen import ABI, Unsupported

__all__ = ["Native", "BuildError", "Unsupported", "compile_program", "compile_tangent",
           "compile_tangent_scalar", "compile_lanes", "compile_run_lanes", "for_program",
           "cache_dir", "compiler", "generate"]


@dataclass
class Native:
    """A loaded native library for one program."""
    lib: ctypes.CDLL
    path: Path
    forward: int          # address of rvm_native_forward (also the forward run)
    backward: int         # address of rvm_native_backward (the adjoint sweep)
    built: bool           # compiled by this call (False: found in the cache)
    seconds: float        # time to generate, compile (or find) and load
    kind: str = "gradient"    # or "tangent": forward/backward are rvm_native_forward_t and
                              # rvm_native_backward_at
    run_backward: int = 0     # "gradient": address of rvm_native_run_backward (a backward run)
    lanes: tuple[int, int] = (0, 0)     # "tangent": rvm_native_forward_vt, _backward_vat
    # the addresses of the cells whose derivatives its code gives (compile_program's and
    # compile_tangent's wrt); None: any differentiable global's
    wrt: frozenset[int] | None = None
    width: int = 0            # "lanes": the batch rows per group (forward/backward are
                              # rvm_native_forward_w and rvm_native_backward_wa; "run lanes":
                              # forward is rvm_native_run_w)

    def install(self, core) -> bool:
        """Make `core.gradient` (for "tangent": with tangents, and `core.tangent_run`) run
        this code (False: its frame region is too small)."""
        if self.kind == "tangent":
            return core.set_native_tangent(self.lib, self.forward, self.backward, *self.lanes)
        return core.set_native(self.lib, self.forward, self.backward)

    def install_runs(self, core) -> bool:
        """Make `core.native_run` (Machine.run's runs from a boundary) run this code (False:
        its frame region is too small)."""
        return core.set_native_runs(self.lib, self.forward, self.run_backward)


def _entries(lib, path, names: Iterable[str]) -> list[int]:
    """The addresses of the loaded library's entry points `names`, once it is checked to be
    built for this rvm (its ABI number); BuildError if not."""
    if lib.rvm_native_abi() != ABI:
        raise BuildError(f"{path}: built for another rvm (ABI {lib.rvm_native_abi()})")
    return [ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in names]


# the runs of a program with derivative statements are native (nested.py); its gradients not
STATEMENT_GRADIENTS = Unsupported("derivative statements: the program's gradients run "
                                  "interpreted (its runs have native code)")


def generate(program, wrt: Iterable[int] | None = None) -> str:
    """The C of `program`'s forward run, adjoint sweep and backward run (codegen.py; with
    derivative statements, nested.py).  Raises Unsupported for what it does not cover."""
    if nested.has_statements(program):
        return nested.generate(program)
    return codegen.generate(program, wrt)


def compile_program(program, wrt: Iterable[int] | None = None) -> Native:
    """Generate, build (or find in the cache) and load `program`'s native code.  wrt: the
    addresses of the only cells whose gradient its adjoint sweep must give (the sweep then
    leaves out the adjoints that cannot reach them: rvm/native/activity.py); None: any
    differentiable global's.  Raises Unsupported when the generator does not cover the
    program, BuildError without a working C compiler."""
    t0 = time.perf_counter()
    cells = None if wrt is None else frozenset(int(a) for a in wrt)
    if cells is not None and nested.has_statements(program):
        raise STATEMENT_GRADIENTS
    lib, path, built = build(generate(program, cells))
    addr = _entries(lib, path, ("rvm_native_forward", "rvm_native_backward",
                                "rvm_native_run_backward"))
    return Native(lib, path, addr[0], addr[1], built, time.perf_counter() - t0, "gradient",
                  addr[2], wrt=cells)


def compile_tangent(program, wrt: Iterable[int] | None = None, lanes: bool = True) -> Native:
    """compile_program for the tangent modes (rvm/native/tangent.py).  wrt: the addresses of
    the only cells the tangents are seeded at and the derivatives asked of (the scalar modes
    then leave out what cannot depend on them: rvm/native/activity.py); None: any
    differentiable global, so any call's (what rvm.jvp, rvm.hvp and rvm.hessian build).
    lanes=False: the scalar modes alone (jvp, hvp and Hessians column by column), without the
    lane modes, which take most of the compile time (their vector loops at -O3)."""
    t0 = time.perf_counter()
    cells = None if wrt is None else frozenset(int(a) for a in wrt)
    # the lanes for this CPU (AVX: wider vectors, T5's Hessian about 1.6x faster); the scalar
    # modes portable (VEX-encoded, T2's jvp ran 2.1x slower: 3.7 against 1.75 µs)
    parts = tangent.generate(program, cells)
    if lanes:
        lib, path, built = build(parts, for_cpu=(False, True))
    else:
        lib, path, built = build(parts[0])
    names = ("rvm_native_forward_t", "rvm_native_backward_at") + \
        (("rvm_native_forward_vt", "rvm_native_backward_vat") if lanes else ())
    addr = _entries(lib, path, names) + [0, 0]
    return Native(lib, path, addr[0], addr[1], built, time.perf_counter() - t0, "tangent",
                  lanes=(addr[2], addr[3]), wrt=cells)


def compile_tangent_scalar(program) -> Native:
    """compile_tangent(program, lanes=False): the tangent modes without the lane modes."""
    return compile_tangent(program, lanes=False)


def compile_lanes(program) -> Native:
    """compile_program for batches (rvm/native/lanes.py): the gradient over W rows at once,
    built for this machine's CPU (its vector width)."""
    t0 = time.perf_counter()
    lib, path, built = build(lanes.generate(program), for_cpu=True, extra=lanes.FLAGS)
    addr = _entries(lib, path, ("rvm_native_forward_w", "rvm_native_backward_wa"))
    return Native(lib, path, addr[0], addr[1], built, time.perf_counter() - t0, "lanes",
                  width=lib.rvm_lanes_width())


def compile_run_lanes(program, reverse: bool = False) -> Native:
    """compile_lanes for rvm.run_batch: the forward run (reverse: the backward run from main's
    end) over W rows at once, without rules or adjoints; `forward` is its entry
    (rvm_native_run_w), `backward` 0."""
    t0 = time.perf_counter()
    lib, path, built = build(lanes.generate(program, -1 if reverse else 1), for_cpu=True,
                             extra=lanes.FLAGS)
    addr = _entries(lib, path, ("rvm_native_run_w",))
    return Native(lib, path, addr[0], 0, built, time.perf_counter() - t0, "run lanes",
                  width=lib.rvm_lanes_width())


def for_program(program) -> Native:
    """`compile_program(program)`, once per Program object (kept on it, as `_native`, which
    pickles leave out; an Unsupported or BuildError is kept and raised again)."""
    got = program.__dict__.get("_native")
    if got is None:                 # (two threads may both build: the disk cache is atomic)
        try:
            got = compile_program(program)
        except (Unsupported, BuildError) as e:
            got = e
        program.__dict__["_native"] = got
    if isinstance(got, Exception):
        raise got
    return got
