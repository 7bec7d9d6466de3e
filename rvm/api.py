"""The Python API: assemble or load a Program, run it forward or backward, read the results.

    import rvm
    prog = rvm.assemble("programs/rfib.rasm")
    res = rvm.run(prog, {"n": 10})            # res.outputs == {"out": 55}
    back = rvm.run(prog, res.outputs, reverse=True)   # back.inputs == {"n": 10}
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from isa.types import FLOAT, INT

from . import _core, oneshot
from .errors import RVMError
from .machine import Machine, UnknownName, print_trace, store_cells
from .program import Program
from .values import ValueEncodingError, decode_array, encode_array


def assemble(source: str | os.PathLike, filename: str | None = None,
             include_paths: tuple[str, ...] = ()) -> Program:
    """Assemble `.rasm` text, or the file at a path (a `.rbc` path is loaded instead).

    A str is taken as a path when it names an existing file and has no newline."""
    from assembler import assemble as asm_text

    if isinstance(source, os.PathLike) or ("\n" not in source and (
            os.path.exists(source) or source.strip().endswith((".rasm", ".ja", ".rbc")))):
        # a path (one that names a program file must exist: no parsing it as source)
        return load(source, include_paths=include_paths)
    return asm_text(source, filename or "<string>", include_paths)


def load(path: str | os.PathLike, include_paths: tuple[str, ...] = (), **janus: Any) -> Program:
    """Load a program file: `.rbc` bytecode (checked), Janus source `.ja` (compiled; `janus`
    takes `modular=True` for jana's -m and `stack_capacity`) or `.rasm` source (assembled)."""
    from assembler import assemble_file, rbc

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"cannot read {os.fspath(path)}: "
                                f"{'it is a directory' if p.is_dir() else 'no such file'}")
    if p.suffix == ".rbc":
        return rbc.read(p)
    if p.suffix == ".ja":
        from assembler.janus import assemble_janus
        return assemble_janus(p.read_text(encoding="utf-8"), str(p), **janus)
    return assemble_file(p, include_paths)


_C: Any = _core                   # the core's C classes (untyped to mypy)
_RunResultBase: Any = _C.RunResultBase


class Result(_RunResultBase):
    """What a run produced.  `inputs` and `outputs` are read from the final state: after a
    forward run `outputs` are the results; after a reverse run `inputs` are.  `machine` is
    the machine in that final state (see `run` for how it is kept).  `garbage` lists the
    globals left nonzero that the contract wants zero.

    (The fields live in the C base class: a repeated `run` makes its Result in C and decodes
    `inputs`, `outputs`, `stats` and `garbage` from the end state's words when first read.
    No instance dict: a Result costs one small allocation.)"""

    if not TYPE_CHECKING:       # (mypy does not see the base's fields)
        __slots__ = ()

    def __init__(self, inputs: dict[str, Any], outputs: dict[str, Any], stats: dict[str, int],
                 machine: Machine | None, garbage: list[str] | None = None) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.stats = stats
        self._machine = machine
        self.garbage = [] if garbage is None else garbage   # globals left nonzero
        self._lease: tuple | None = None      # (slot, gen, start words, reverse, options)

    def __repr__(self) -> str:
        return (f"Result(inputs={self.inputs!r}, outputs={self.outputs!r}, "
                f"stats={self.stats!r}, garbage={self.garbage!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Result):
            return NotImplemented
        return (self.inputs, self.outputs, self.stats, self.garbage) == \
            (other.inputs, other.outputs, other.stats, other.garbage)

    __hash__ = None       # type: ignore[assignment]

    @property
    def machine(self) -> Machine | None:
        """The machine in the run's final state.  A run of `rvm.run` used the calling
        thread's reused machine of the Program: while no later one-shot call has used it,
        this hands that machine over (later calls build another); otherwise the run is made
        again, from the same start state, on a machine of its own (the machine is
        deterministic: the same final state, bit for bit; trace output is not repeated)."""
        if self._machine is None and self._lease is not None:
            slot, gen, start, reverse, options = self._lease
            m = slot.machine
            if slot.gen == gen and not slot.busy:
                oneshot.detach(m.program, slot)
                m._set_origin(-1 if reverse else +1)    # as its last reset left it
                m._origin_words = start
            else:
                m = Machine(m.program, trace=lambda event: None, **options)
                if reverse:
                    m.reset_end()
                else:
                    m.reset()
                m.mem[:len(start)] = start
                m._set_origin(-1 if reverse else +1)
                m.run(direction=-1 if reverse else +1)
            self._machine, self._lease = m, None
        return self._machine

    @machine.setter
    def machine(self, m: Machine | None) -> None:
        self._machine, self._lease = m, None

    def __getstate__(self) -> dict:
        """Pickled by value and versioned (rvm.interop.pickling); `machine` is None on the
        receiving side (a machine is live state: run the program again for one)."""
        from .interop.pickling import result_state
        return result_state(self)

    def __setstate__(self, state: dict) -> None:
        from .interop.pickling import set_result_state
        set_result_state(self, state)


def _run(program: Program | str | os.PathLike, values: Mapping[str, Any] | None = None, *,
         reverse: bool = False, max_steps: int | None = None,
         trace: Callable[..., None] | None = None, **machine_options: Any) -> Result:
    """Run `program` forward from `values` (its inputs), or with reverse=True backward from
    `values` (its outputs).  Traps raise rvm.errors.Trap subclasses.

    Called again on the same Program object, it reuses the machine it built (one per thread
    and set of machine options, rvm/oneshot.py): no bytecode check or machine set-up per
    call, and once that machine has native code the repeated call (values and reverse
    only) is one C function from the call to the Result (rvm/_runcall.pxi), with no Python
    frame.  A path is assembled anew each time: assemble it once to reuse it."""
    if not isinstance(program, Program):
        program = assemble(program)
    slot = oneshot.acquire(program, machine_options)
    m = slot.machine
    try:
        m.trace_handler = trace or print_trace
        if reverse:
            m.reset_end(values or {})
            m.run(direction=-1, max_steps=max_steps)
        else:
            m.reset(values or {})
            m.run(direction=+1, max_steps=max_steps)
        res = Result(m.inputs(), m.outputs(), m.stats, None,
                     garbage_cells(m, at_end=not reverse))
        if slot.cached:
            res._lease = (slot, slot.gen, m._origin_words, reverse, machine_options)
            if not machine_options and m.core.native_runs_on:
                _bind_run_call(program, slot)
        else:
            res._machine = m
        return res
    finally:
        oneshot.release(slot)


if TYPE_CHECKING:
    run = _run
else:   # the C function (rvm/_runcall.pxi) whose general path is _run
    run = _C.oneshot_public("run", _run)


def _bind_run_call(program: Program, slot: oneshot.Slot) -> None:
    """Make the Program's RunCall on this thread's machine (slot), unless it has one."""
    e = oneshot.entry(program)
    if e.run_call is not None:
        return
    m = slot.machine
    prog = m.program
    addrs, words = m._defaults()
    cells = store_cells(prog)

    def plan(inputs: bool) -> list[tuple[str, int, int]]:
        return [(g.name, 0 if g.length is None and g.type == INT else
                 1 if g.length is None and g.type == FLOAT else 2, g.addr)
                for g in prog.globals if (g.is_input if inputs else g.is_output)]

    def junk(at_end: bool) -> np.ndarray:
        return np.array([g.addr + k for g in prog.globals
                         if not (g.is_output if at_end else g.is_input)
                         for k in range(g.size)], dtype=np.int64)

    def names(words: np.ndarray, at_end: bool) -> list[str]:
        return [g.name for g in prog.globals if not (g.is_output if at_end else g.is_input)
                and words[g.addr:g.addr + g.size].any()]

    e.run_call = _C.RunCall(m.core, slot, Result, m, cells, addrs, words, junk(True),
                            junk(False), plan(True), plan(False), m.read_in, names)


def out_array(out: Any, shape: tuple[int, ...]) -> bool:
    """out can take a flat call's results as the C calls write them: a writeable
    C-contiguous float64 array of `shape` in this machine's byte order (np.float64 compares
    unequal to the other byte order's dtype)."""
    return isinstance(out, np.ndarray) and out.dtype == np.float64 and out.shape == shape and \
        out.flags.c_contiguous and out.flags.writeable


class RunFn:
    """`rvm.run_fn(program, inputs, outputs)`: forward runs as a flat, array-in/array-out
    call, for loops and sweeps that call a program with the same cells again and again.

    `f.flat(x, out=None)` stores the float64 vector `x` into the input cells (`inputs`, in
    `f.input_cells` order: each name flattened, x, a[0], a[1], ...; every other input at
    its default), runs the program forward and returns the output cells' values (`outputs`,
    in `f.output_cells` order) as a float64 vector (into `out` if given), bit for bit
    `rvm.run(program, {...}).outputs` flattened.  `inputs` default to every float input
    global, `outputs` to every float output global; both must be float cells.

    The RunFn keeps one Machine.  Its runs compile to native code as `Machine.run`'s do (at
    the NATIVE_AFTER-th run, in a thread; `native=True` at once, `native=False` never), and
    from then on a call is one C call (rvm/_runcall.pxi, RunFlat) with no dict, no Result
    and no per-value object.  A trap raises as `rvm.run` raises it (the interpreter runs
    the call again and reports it).  Calls from another thread than the first caller's run
    through `rvm.run` (its own machine per thread), with the same results."""

    def __init__(self, program: Program | str | os.PathLike,
                 inputs: list[str] | str | None = None, outputs: list[str] | str | None = None,
                 *, native: bool | None = None) -> None:
        if not isinstance(program, Program):
            program = assemble(program)
        self.program = program
        by_name = {g.name: g for g in program.globals}

        def pick(names: list[str] | str | None, what: str, ok: Callable[[Any], bool]) -> list:
            if names is None:
                return [g for g in program.globals if ok(g) and g.type == FLOAT]
            if isinstance(names, str):
                names = [n.strip() for n in names.split(",") if n.strip()]
            out = []
            for n in names:
                g = by_name.get(n)
                if g is None:
                    known = ", ".join(g.name for g in program.globals) or "none"
                    raise UnknownName(f"no global named {n!r} (the globals are: {known})")
                if not ok(g):
                    raise ValueError(f"run_fn: {n!r} is not an {what} global")
                if g.type != FLOAT:
                    raise ValueError(f"run_fn: {n!r} is a {g.type.name.lower()} global; the "
                                     f"flat call takes float cells only")
                if g in out:
                    raise ValueError(f"run_fn: {n!r} is named twice")
                out.append(g)
            return out

        self._in = pick(inputs, "input", lambda g: g.is_input)
        self._out = pick(outputs, "output", lambda g: g.is_output)
        self.machine = Machine(program, native=native)
        self._flat: Any = None
        self._owner: int | None = None

    @staticmethod
    def _cells(gs: list) -> list[str]:
        return [g.name if g.length is None else f"{g.name}[{k}]"
                for g in gs for k in range(g.size)]

    @property
    def input_cells(self) -> list[str]:
        """The input cells in the order of flat's x: x, a[0], a[1], ..."""
        return self._cells(self._in)

    @property
    def output_cells(self) -> list[str]:
        """The output cells in the order of flat's result."""
        return self._cells(self._out)

    @property
    def native(self) -> str:
        """Whether the runs are native code, and if not, why (Machine.native)."""
        return self.machine.native

    def flat(self, x: Any, out: np.ndarray | None = None) -> np.ndarray:
        """The output cells' values after a forward run from the input cells' values x."""
        f = self._flat
        if f is not None:
            r = f(x, out)
            if r is not None:
                return r
        return self._flat_general(x, out)

    def _flat_general(self, x: Any, out: np.ndarray | None) -> np.ndarray:
        xa = np.ascontiguousarray(x, dtype=np.float64)
        n = sum(g.size for g in self._in)
        if xa.shape != (n,):
            raise ValueError(f"flat: x must be a vector of {n} values (the input cells), got "
                             f"shape {xa.shape}")
        values: dict[str, Any] = {}
        at = 0
        for g in self._in:
            values[g.name] = float(xa[at]) if g.length is None else xa[at:at + g.size].copy()
            at += g.size
        me = threading.get_ident()
        if self._owner is None:
            self._owner = me
        m_out = sum(g.size for g in self._out)
        if out is not None and not out_array(out, (m_out,)):
            raise ValueError(f"flat: out must be a contiguous float64 vector of {m_out} "
                             "(writeable, in this machine's byte order)")
        res = out if out is not None else np.empty(m_out)
        if me != self._owner:
            words = run(self.program, values)
            outs = words.outputs
            vals = [np.atleast_1d(np.asarray(outs[g.name], dtype=np.float64)).ravel()
                    for g in self._out]
        else:
            m = self.machine
            m.reset(values)
            m.run()
            mem = m.core.mem
            vals = [mem[g.addr:g.addr + g.size].view(np.float64) for g in self._out]
            if self._flat is None and m.core.native_runs_on:
                addrs, words_ = m._defaults()
                self._flat = _C.RunFlat(m.core, addrs.astype(np.int64), words_,
                                        np.array([g.addr + k for g in self._in
                                                  for k in range(g.size)], dtype=np.int64),
                                        np.array([g.addr + k for g in self._out
                                                  for k in range(g.size)], dtype=np.int64),
                                        self._flat_general)
                # from here on f.flat is the C method itself (no Python frame per call);
                # it falls back to _flat_general as this method does
                self.__dict__["flat"] = self._flat.flat
        if m_out:
            res[:] = np.concatenate(vals)
        return res


def run_fn(program: Program | str | os.PathLike, inputs: list[str] | str | None = None,
           outputs: list[str] | str | None = None, *, native: bool | None = None) -> RunFn:
    """A RunFn of `program`: `run_fn(prog, ["z"], ["out"]).flat(np.array([3.0]))` is
    `rvm.run(prog, {"z": 3.0}).outputs["out"]` as a vector, as one C call once the runs are
    native (see RunFn)."""
    return RunFn(program, inputs, outputs, native=native)


class BatchError(RVMError):
    """Rows of a batch failed: `lane` is the first failed row, `errors` maps every failed row
    to its error (a Trap, as the single call raises it) and `results` holds the batch's
    results with every other row filled in (nan, or 0 for int values, in the failed rows)."""

    def __init__(self, message: str, lane: int, errors: dict[int, Exception],
                 results: dict[str, Any]):
        super().__init__(message)
        self.lane, self.errors, self.results = lane, errors, results


def batch_failed(errors: dict[int, Exception], B: int, results: dict[str, Any]) -> BatchError:
    first = min(errors)
    more = f" (and {len(errors) - 1} more rows)" if len(errors) > 1 else ""
    return BatchError(f"row {first} of {B}: {errors[first]}{more}", lane=first, errors=errors,
                      results=results)


def split_batch(program: Program, inputs: Mapping[str, Any],
                outputs: bool = False) -> tuple[dict, dict, int]:
    """A batch's inputs (with `outputs`, a backward batch's outputs) as ({name: values with
    the batch axis}, {name: shared value}, B): a value with one more axis than the single
    call's value is batched."""
    sizes: set[int] = set()
    rows, shared = batch_axes(program, inputs, sizes, outputs=outputs)
    return rows, shared, batch_size(sizes, "output" if outputs else "input")


def batch_axes(program: Program, values: Mapping[str, Any], sizes: set[int],
               what: str = "", outputs: bool = False) -> tuple[dict, dict]:
    """({name: values with the batch axis}, {name: shared value}) of input values (`what`
    they are, for messages: inputs, tangents; with `outputs`, output values); the batch
    axes' lengths go into `sizes`."""
    rows, shared = {}, {}
    of = f" ({what})" if what else ""
    for name, v in values.items():
        g = next((g for g in program.globals if g.name == name), None)
        if g is None or not (g.is_output if outputs else g.is_input):
            raise UnknownName(f"{name!r}{of} is not an {'output' if outputs else 'input'} "
                              "of the program")
        if g.stack:
            raise ValueError(f"{name}: a named stack cannot be batched")
        arr = np.asarray(v)
        single = 0 if g.length is None else 1
        if arr.ndim == single + 1:
            rows[name] = arr
            sizes.add(arr.shape[0])
        elif arr.ndim == single:
            shared[name] = v
        else:
            raise ValueError(f"{name}{of}: expected shape {(g.length,) if single else ()} "
                             f"(shared) or that with a leading batch axis, got {arr.shape}")
    return rows, shared


def batch_size(sizes: set[int], what: str = "input") -> int:
    """B, the one length of the batch axes seen."""
    if len(sizes) != 1:
        raise ValueError(f"batched {what}s must share one leading axis B" if sizes else
                         f"no {what} has a batch axis: give some value a leading axis B")
    return sizes.pop()


def batch_row(rows: dict, shared: dict, b: int) -> dict[str, Any]:
    """Row b's inputs as the single call takes them."""
    d = dict(shared)
    for name, arr in rows.items():
        v = arr[b]
        d[name] = v.item() if v.ndim == 0 else v
    return d


def batch_words(m: Machine, rows: dict, shared: dict, B: int, reverse: bool = False) -> tuple:
    """(input addresses, their start words with the shared inputs, the batched cells'
    addresses, their words per row (B, k)), in the machine's encoding; with `reverse`, the
    end state's: every global's address and word with the shared outputs."""
    prog = m.program
    if reverse:
        m.reset_end(shared)
        in_addrs = np.arange(prog.n_globals, dtype=np.int64)
    else:
        m.reset(shared)
        in_addrs = np.array([g.addr + k for g in prog.globals if g.is_input
                             for k in range(g.size)], dtype=np.int64)
    def_words = m.mem[in_addrs].copy()
    row_addrs: list[int] = []
    cols: list[np.ndarray] = []
    for name, arr in rows.items():
        g = prog.global_named(name)
        try:
            cols.append(encode_array(g.type, arr.reshape(B * g.size), prog.fraction_bits,
                                     B * g.size).reshape(B, g.size))
        except (ValueEncodingError, TypeError, OverflowError) as e:
            raise ValueEncodingError(f"{name}: {e}") from None
        row_addrs.extend(range(g.addr, g.addr + g.size))
    words = cols[0] if len(cols) == 1 else \
        np.concatenate(cols, axis=1) if cols else np.zeros((B, 0))
    return (in_addrs, def_words, np.array(row_addrs, dtype=np.int64),
            np.ascontiguousarray(words, dtype=np.int64))


def chunks(B: int, threads: int | None) -> list[int]:
    """Row bounds of the threads of a batch: contiguous chunks, at most one thread per 64
    rows and per core (or `threads`)."""
    k = max(1, min(threads or os.cpu_count() or 1, -(-B // 64)))
    return [B * i // k for i in range(k + 1)]


def in_threads(work: Callable[[int], None], k: int) -> None:
    """work(0) .. work(k - 1), on this thread and k - 1 others."""
    pool = [threading.Thread(target=work, args=(i,), name=f"rvm-batch-{i}") for i in range(1, k)]
    for t in pool:
        t.start()
    try:
        work(0)
    finally:
        for t in pool:
            t.join()


def run_batch(program: Program | str | os.PathLike, inputs: Mapping[str, Any], *,
              reverse: bool = False, threads: int | None = None,
              **machine_options: Any) -> dict[str, np.ndarray]:
    """Forward runs of B rows in one call: each value of `inputs` with a leading batch axis
    of length B (a value shaped as the single run's is the same for every row).  Returns
    {output name: array with a leading axis B}, row b bit for bit
    `run(program, row b's inputs).outputs` (a named stack comes back as its cells, the size
    first).  With reverse=True, backward runs: `inputs` are the rows' outputs and the
    result is {input name: array with a leading axis B}, row b bit for bit
    `run(program, row b's outputs, reverse=True).inputs`.

    The rows run as native code (compiled on the first batch; a program with `trace` runs
    row by row, interpreted) without the GIL, in contiguous chunks over `threads` threads
    (default: the cores, at most one per 64 rows), each on a machine of its own kept on the
    Program (rvm/oneshot.py).  Once the program's run lane library is built (the first
    batch of 64 rows or more starts its build in the background, one per direction;
    `compile_run_batch` builds it now), each thread runs its rows W at a time, every cell a
    vector of W values (rvm/native/lanes.py; `run_batch_native` says how rows run); a group
    of W rows whose branches, indices or traps differ runs one row at a time.  A row the
    native code hands back runs interpreted; rows that trap raise BatchError with the first
    one's index (`lane`), every failed row's error and the other rows' results."""
    from . import native
    from .ad import native_lanes
    if not isinstance(program, Program):
        program = assemble(program)
    rows, shared, B = split_batch(program, inputs, outputs=reverse)
    e = oneshot.entry(program)
    nw = program.n_globals
    words = np.zeros((B, nw), dtype=np.int64)
    status = np.ones(B, dtype=np.int64)
    with e.lock:
        machines = e.batch_machines.setdefault(oneshot.options_key(machine_options) or (),
                                               [])
        if not machines:
            machines.append(Machine(program, native=False, **machine_options))
        m0 = machines[0]
        try:
            nat = native.for_program(program) if os.environ.get("RVM_NATIVE") != "0" else None
        except (native.Unsupported, native.BuildError):
            nat = None
        if nat is not None:
            bounds = chunks(B, threads)
            lanes = native_lanes.ready(program, B, "back" if reverse else "run")
            if lanes is not None:           # W rows at a time (issue 16)
                bounds = native_lanes.bounds(bounds, lanes.width)
            k = len(bounds) - 1
            while len(machines) < k:
                machines.append(Machine(program, native=False, **machine_options))
            for x in machines[:k]:
                if not x.core.native_runs_on:
                    nat.install_runs(x.core)
            by = [x.core for x in machines[:k]] if lanes is None else \
                _run_lanes(e, machine_options, reverse, lanes, k)
            in_addrs, def_words, row_addrs, rw = batch_words(m0, rows, shared, B, reverse)

            def work(i: int) -> None:
                lo, hi = bounds[i], bounds[i + 1]
                args = (in_addrs, def_words, row_addrs, rw[lo:hi], words[lo:hi],
                        status[lo:hi], reverse)
                if lanes is None:
                    machines[i].core.run_rows(*args)
                else:
                    by[i].run_rows(machines[i].core, *args)

            in_threads(work, k)
        errors: dict[int, Exception] = {}
        for b in np.nonzero(status)[0].tolist():
            try:
                m0.trace_handler = print_trace
                if reverse:
                    m0.reset_end(batch_row(rows, shared, b))
                    m0.run(direction=-1)
                else:
                    m0.reset(batch_row(rows, shared, b))
                    m0.run()
            except RVMError as err:
                errors[b] = err
                continue
            words[b] = m0.mem[:nw]
    F = program.fraction_bits
    res = {}
    for g in program.globals:
        if g.is_input if reverse else g.is_output:
            vals = decode_array(g.type, words[:, g.addr:g.addr + g.size].reshape(-1), F)
            if errors and vals.dtype.kind == "f":
                vals.reshape(B, g.size)[sorted(errors)] = np.nan
            res[g.name] = vals.reshape((B,) if g.length is None else (B, g.size))
    if errors:
        raise batch_failed(errors, B, res)
    return res


def _run_lanes(e: Any, options: dict[str, Any], reverse: bool, lanes: Any, k: int) -> list:
    """The lane runners (_core.LaneRows: lane buffers) of run_batch's first k threads, kept on
    the Program's entry beside their machines (the caller holds e.lock)."""
    got = e.batch_lanes.setdefault((oneshot.options_key(options) or (), reverse), [])
    while len(got) < k:
        got.append(_C.LaneRows(lanes.lib, lanes.forward, 0, lanes.width))
    return got[:k]


def compile_run_batch(program: Program, reverse: bool = False) -> str:
    """Build run_batch's lane library now (rvm/native/lanes.py: the forward run, or with
    `reverse` the backward run, over W rows at once), or wait for the build a batch started;
    returns how run_batch runs rows (`run_batch_native`).  Raises rvm.native.Unsupported or
    BuildError when it cannot be built (batches then run a row at a time, as without it)."""
    from .ad import native_lanes
    native_lanes.build_now(program, "back" if reverse else "run")
    return run_batch_native(program, reverse)


def run_batch_native(program: Program, reverse: bool = False) -> str:
    """How run_batch (`reverse`: its backward runs) runs the native rows: W at a time
    ("8 lanes (...)"), or why a row at a time ("not built yet", "off", "one row at a time:
    why")."""
    from .ad import native_lanes
    return native_lanes.status(program, "back" if reverse else "run")


def garbage_cells(m: Machine, at_end: bool = True) -> list[str]:
    """Globals that the program's contract says should be zero now but are not: at the end,
    every global that is not an output; at the start, every global that is not an input."""
    plans = m.__dict__.setdefault("_garbage_plans", {})
    cells = plans.get(at_end)
    if cells is None:
        cells = plans[at_end] = np.array(
            [g.addr + k for g in m.program.globals if not (g.is_output if at_end else g.is_input)
             for k in range(g.size)], dtype=np.intp)
    if not m.mem[cells].any():                   # the common case, in one test
        return []
    out = []
    for g in m.program.globals:
        keep = g.is_output if at_end else g.is_input
        if not keep and m.mem[g.addr:g.addr + g.size].any():
            out.append(g.name)
    return out


@dataclass
class RoundTrip:
    """Forward to the end, then backward to the start: how well the start came back.

    `drift` maps every global whose words differ to the largest absolute difference of its
    values (float cells drift within rounding; an int, fixed or lns cell never should)."""
    outputs: dict[str, Any]
    steps: int
    drift: dict[str, float]
    exact_broken: list[str]     # non-float globals that did not come back bit for bit

    @property
    def exact(self) -> bool:
        return not self.drift


def roundtrip(program: Program | str | os.PathLike, inputs: Mapping[str, Any] | None = None, *,
              max_steps: int | None = None, **machine_options: Any) -> RoundTrip:
    """Run `program` forward from `inputs` and back again, and measure the drift.  Reuses
    the machine of earlier one-shot calls on the same Program object, as `run` does."""
    if not isinstance(program, Program):
        program = assemble(program)
    slot = oneshot.acquire(program, machine_options)
    m = slot.machine
    try:
        m.trace_handler = print_trace
        m.reset(inputs or {})
        snap = snapshot(m)
        m.run(direction=+1, max_steps=max_steps)
        outputs, steps = m.outputs(), m.stats["steps"]
        m.run(direction=-1, max_steps=max_steps)     # raises PathDivergence on another path
        m.check_restored()
        return RoundTrip(outputs, steps, *drift_since(m, snap))
    finally:
        oneshot.release(slot)


def snapshot(m: Machine) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The globals' words and values now (to compare with after a round trip)."""
    return (m.mem[:m.program.n_globals].copy(),
            {g.name: np.asarray(m.read(g.name), dtype=float) for g in m.program.globals})


def drift_since(m: Machine, snap) -> tuple[dict[str, float], list[str]]:
    """(drift, exact_broken) of the globals now against a snapshot (see RoundTrip)."""
    words, values = snap
    drift, broken = {}, []
    for g in m.program.globals:
        if np.array_equal(m.mem[g.addr:g.addr + g.size], words[g.addr:g.addr + g.size]):
            continue
        with np.errstate(invalid="ignore"):
            drift[g.name] = float(np.nanmax(np.abs(np.asarray(m.read(g.name), dtype=float)
                                                   - values[g.name])))
        if g.type != FLOAT:
            broken.append(g.name)
    return drift, broken
