"""Tangents and Hessians of many inputs in one call (issue 16): `rvm.jvp_batch` and
`rvm.hessian_batch`, the batch forms of `rvm.jvp` and `rvm.hessian` as `rvm.run_batch` is
`rvm.run`'s and `GradFn.batch` a gradient's.

Each value (of the inputs, and of the tangents) either has a leading batch axis of length B or
is shaped as the single call's value, in which case every row shares it.  Row b of the result
is bit for bit the single call on row b's values.  The rows run as the tangent library's
native code (rvm/native/tangent.py; compiled on the first batch) without the GIL, in
contiguous chunks over `threads` threads (default: the cores, at most one per 64 rows), each
on a machine of its own kept on the Program; a Hessian's directions go 64 at a time through
the lane modes.  A row the native code hands back runs through the single call; rows that
fail raise BatchError with the first one's index (`lane`), every failed row's error and the
other rows' results (nan in the failed rows)."""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import _core, oneshot
from ..api import (
    assemble,
    batch_axes,
    batch_failed,
    batch_row,
    batch_size,
    batch_words,
    chunks,
    in_threads,
)
from ..errors import RVMError
from ..machine import Machine
from ..program import Program
from . import native_tangent
from .engine import _loss_name, _wrt_list, derivatives, hessian, jvp, tangent_outputs


def _machines(program: Program, key: tuple, k: int) -> list[Machine]:
    e = oneshot.entry(program)
    ms = e.batch_machines.setdefault(key, [])
    while len(ms) < k:
        ms.append(Machine(program))
    return ms


def _native(core: Any, program: Program, lanes: bool) -> bool:
    """The tangent library installed on `core` (compiled now if need be; `lanes`: the full
    library with the lane modes, else the scalar modes will do); False when the program has
    none (RVM_NATIVE=0, a program the generator does not cover, no compiler)."""
    from .. import native
    if os.environ.get("RVM_NATIVE") == "0":
        return False
    try:
        return native_tangent.prepare(core, program, True, lanes=lanes) == "native"
    except (native.Unsupported, native.BuildError):
        return False


def _runners(ms: list[Machine], key: tuple, make: Callable[[Machine], Any]) -> list[Any]:
    """Each machine's AD runner for `key` (of, wrt names), made by make(m) (a first call on
    that machine: it resolves the cells and checks the paths) where the machine has none."""
    out = []
    for m in ms:
        if key not in m.__dict__.get("_ad_runners", {}):
            make(m)
        out.append(m.__dict__["_ad_runners"][key])
    return out


def jvp_batch(program: Program | str | os.PathLike, inputs: Mapping[str, Any] | None,
              tangents: Mapping[str, Any], *, threads: int | None = None) -> dict[str, Any]:
    """`rvm.jvp` over B rows in one call: `inputs` and `tangents` as the single call's, any
    value with a leading batch axis B (the others shared by every row).  Returns {output:
    tangent with a leading axis B} for every differentiable output; row b is bit for bit
    `rvm.jvp(program, row b's inputs, row b's tangents)`.  See the module docstring."""
    if not isinstance(program, Program):
        program = assemble(program)
    sizes: set[int] = set()
    rows, shared = batch_axes(program, inputs or {}, sizes, "inputs")
    trows, tshared = batch_axes(program, tangents, sizes, "tangents")
    B = batch_size(sizes, "value")
    key = (None, tuple(tangents))
    e = oneshot.entry(program)
    results: dict[str, np.ndarray] | None = None
    status = np.ones(B, dtype=np.int64)
    with e.lock:
        bounds = chunks(B, threads)
        k = len(bounds) - 1
        ms = _machines(program, ("jvp", key[1]), k)
        try:
            runners = _runners(ms[:k], key, lambda m: derivatives(
                program, None, (), batch_row(rows, shared, 0), gradient=False,
                tangents=batch_row(trows, tshared, 0), machine=m))
        except RVMError:                # row 0 traps: every row goes the single call's way
            runners = []
        if runners and all(_native(r.core, program, False) for r in runners):
            r0 = runners[0]
            outs = tangent_outputs(ms[0])
            results = {name: np.full((B, *(shape or ())), np.nan)
                       for name, _, _, shape in outs}
            out_addrs = np.array([a + j for _, a, size, _ in outs for j in range(size)],
                                 dtype=np.int64)
            in_addrs, def_words, row_addrs, rw = batch_words(ms[0], rows, shared, B)
            seed_addrs = np.array([c.addr + j for c in r0.wrt for j in range(c.size)],
                                  dtype=np.int64)
            seeds = np.empty((B, len(seed_addrs)))
            at = 0
            for c in r0.wrt:
                v = trows.get(c.name, tshared.get(c.name))
                seeds[:, at:at + c.size] = np.asarray(v, dtype=np.float64).reshape(
                    (B, c.size) if c.name in trows else (1, c.size))
                at += c.size
            flat = np.zeros((B, len(out_addrs)))

            def work(i: int) -> None:
                lo, hi = bounds[i], bounds[i + 1]
                _core.jvp_rows(  # type: ignore[attr-defined]
                    runners[i].core, in_addrs, def_words, row_addrs, rw[lo:hi],
                    seed_addrs, seeds[lo:hi], out_addrs, flat[lo:hi], status[lo:hi])

            in_threads(work, k)
            at = 0
            for name, _, size, shape in outs:
                results[name][...] = flat[:, at:at + size].reshape((B, *(shape or ())))
                results[name][status != 0] = np.nan       # (until the single call runs)
                at += size
    errors: dict[int, Exception] = {}
    for b in np.nonzero(status)[0].tolist():
        try:
            t = jvp(program, batch_row(rows, shared, b), batch_row(trows, tshared, b))
        except RVMError as err:
            errors[b] = err
            continue
        if results is None:
            results = {name: np.full((B, *np.shape(v)), np.nan) for name, v in t.items()}
        for name, v in t.items():
            results[name][b] = v
    if errors:
        raise batch_failed(errors, B, results or {})
    return results or {}


def hessian_batch(program: Program | str | os.PathLike, of: str, wrt: str | Sequence[str],
                  inputs: Mapping[str, Any], *, threads: int | None = None) -> np.ndarray:
    """`rvm.hessian` over B rows in one call: each value of `inputs` with a leading batch axis
    B or shared by every row.  Returns the (B, n, n) Hessians of `of` over the wrt cells
    flattened in order; row b is bit for bit `rvm.hessian(program, of, wrt, row b's inputs)`.
    See the module docstring."""
    _loss_name(of)
    if not isinstance(program, Program):
        program = assemble(program)
    sizes: set[int] = set()
    rows, shared = batch_axes(program, inputs, sizes, "inputs")
    B = batch_size(sizes, "value")
    key = (of, tuple(_wrt_list(wrt)))
    e = oneshot.entry(program)
    res: np.ndarray | None = None
    status = np.ones(B, dtype=np.int64)
    with e.lock:
        bounds = chunks(B, threads)
        k = len(bounds) - 1
        ms = _machines(program, ("hessian", *key), k)
        try:
            runners = _runners(ms[:k], key, lambda m: derivatives(
                program, of, list(key[1]), batch_row(rows, shared, 0), gradient=False,
                hessian=True, machine=m))
        except RVMError:                # row 0 traps: every row goes the single call's way
            runners = []
        if runners and all(getattr(r, "paths_checked", False) for r in runners) and \
                all(_native(r.core, program, r.n > 1) for r in runners):
            r0 = runners[0]
            out = res = np.full((B, r0.n, r0.n), np.nan)
            in_addrs, def_words, row_addrs, rw = batch_words(ms[0], rows, shared, B)
            wrt_addrs = r0._fast_args()[3]
            exact = r0._exact_addrs()

            def work(i: int) -> None:
                lo, hi = bounds[i], bounds[i + 1]
                _core.hessian_rows(  # type: ignore[attr-defined]
                    runners[i].core, r0.of.addr, in_addrs, def_words, row_addrs,
                    rw[lo:hi], wrt_addrs, out[lo:hi], status[lo:hi], exact)

            in_threads(work, k)
            out[status != 0] = np.nan
    errors: dict[int, Exception] = {}
    for b in np.nonzero(status)[0].tolist():
        try:
            h = hessian(program, of, list(key[1]), batch_row(rows, shared, b))
        except RVMError as err:
            errors[b] = err
            continue
        if res is None:
            res = np.full((B, *h.shape), np.nan)
        res[b] = h
    if errors:
        raise batch_failed(errors, B, {"hessian": res} if res is not None else {})
    assert res is not None
    return res
