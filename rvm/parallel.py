"""Many evaluations at once: rvm.parallel.map on a dask.distributed cluster, or locally
(docs/interop.md).

    f = rvm.grad_fn(prog, of="out", wrt=["z"])
    grads = rvm.parallel.map(f, [{"z": z} for z in zs], client=client)

`f` is any callable of one input: a GradFn, `functools.partial(rvm.run, prog)`, a lambda
(cloudpickle sends it).  It is sent to the cluster once (pickled by value: a GradFn travels
as its program, and each worker takes native code from its cache or compiles it) and the
inputs go in chunks, one task per chunk.  Results come back in input order; an input whose
evaluation raised (a trap, PathDivergence, NonFiniteDerivative, ...) gets that exception as
its result, the others are unaffected (errors="raise": raise the first one instead, after
the whole map).
"""
from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

from .interop.pickling import portable

__all__ = ["map", "run_chunk"]

_builtin_map = map


def run_chunk(f: Callable[[Any], Any], chunk: Sequence[Any]) -> list[tuple[bool, Any]]:
    """[(ok, result or exception)] of f on every input of the chunk, in order."""
    out = []
    for x in chunk:
        try:
            out.append((True, f(x)))
        except Exception as e:          # noqa: BLE001 - returned as that input's result
            out.append((False, portable(e)))
    return out


def _chunks(items: list, size: int) -> list[list]:
    return [items[k:k + size] for k in range(0, len(items), size)]


def map(f: Callable[[Any], Any], inputs: Iterable[Any], client: Any = None, *,
        chunk_size: int | None = None, local: str = "threads", max_workers: int | None = None,
        errors: str = "return") -> list[Any]:
    """[f(x) for x in inputs], in order, on `client` (a dask.distributed.Client) or locally.

    chunk_size: inputs per task (default: about 4 tasks per worker thread).
    local: without a client, "threads" (a thread pool: a GradFn gives each thread its own
    machine), "processes" (a process pool: f is pickled by value) or "serial".
    errors: "return" (an input that raised gets its exception as its result) or "raise"."""
    if errors not in ("return", "raise"):
        raise ValueError(f"errors={errors!r}: expected 'return' or 'raise'")
    items = list(inputs)
    if not items:
        return []
    if client is not None:
        workers = max(1, sum(client.nthreads().values()))
    elif local == "serial":
        workers = 1
    elif local in ("threads", "processes"):
        workers = max_workers or os.cpu_count() or 1
    else:
        raise ValueError(f"local={local!r}: expected 'threads', 'processes' or 'serial'")
    size = chunk_size or max(1, math.ceil(len(items) / (4 * workers)))
    chunks = _chunks(items, size)
    if client is not None:
        [remote_f] = client.scatter([f], broadcast=True, hash=False)
        futures = client.map(run_chunk, [remote_f] * len(chunks), chunks, pure=False)
        parts = client.gather(futures)
    elif local == "serial":
        parts = [run_chunk(f, c) for c in chunks]
    else:
        if local == "threads":
            ex = ThreadPoolExecutor(max_workers=workers)
        else:
            # spawned, not forked: a fork of a process with threads (JAX's, Dask's, a GradFn's
            # native build) can deadlock; f travels by pickle either way
            ex = ProcessPoolExecutor(max_workers=workers,
                                     mp_context=multiprocessing.get_context("spawn"))
        with ex:
            parts = list(ex.map(run_chunk, [f] * len(chunks), chunks))
    results = [r for part in parts for r in part]
    if errors == "raise":
        for ok, r in results:
            if not ok:
                raise r
    return [r for _, r in results]
