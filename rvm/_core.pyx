# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The machine core: memory, stacks and the interpreter loop of rvm (see docs/machine.md).

`Core` owns the machine state in a C struct (`VM`) over numpy buffers and runs instructions in a
`nogil` loop over raw pointers: no Python object is touched per instruction.  The loop stops on a
trap, at a program boundary, when the step budget is used up, or at a `trace` instruction (the
rare path: Python reports the trace and resumes).  Traps leave every cell unchanged and record a
code plus a few words; rvm/machine.py turns them into the named exceptions of rvm/errors.py.

Constructing a Core checks the Program with the bytecode verifier (isa/verify.py) for
everything the loop relies on to stay inside its buffers (operand words, side-table indices,
jump targets, constant cells never written), so no Program can crash the interpreter.  What still goes wrong at run time is a BytecodeTrap.
"""
from libc.stdint cimport int64_t, uint64_t, uint8_t, INT64_MIN, INT64_MAX, UINT64_MAX
from libc.string cimport memset, memcpy
from cpython.exc cimport PyErr_CheckSignals
from cpython.pythread cimport PyThread_get_thread_ident
from cpython.long cimport PyLong_AsLongLongAndOverflow

import numpy as np
cimport numpy as cnp

from isa.derivatives import KINDS, RULES, pf_id
from isa.effects import merge, static_refs, static_writes
from isa.verify import _Verifier
from isa.cgen import distinct_pairs, has_body, leaves_cos_sin, operand_names
from isa.table import INVERSE, LAW_ADD, OPS, ROW_WIDTH, positive_family
from isa.types import FLOAT, INT
from isa.types import MAX_FRACTION_BITS

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    object PyArray_Scalar(void* data, cnp.dtype descr, object base)    # a numpy scalar

include "_opcodes.pxi"
from isa.build import check_build

# The core is one extension module, written in files by job (Cython includes, in this order;
# docs/internals.md lists them):
include "_decls.pxi"      # C declarations, shared codes, the VM struct, per-opcode tables
include "_operands.pxi"   # operand words to cells; bounds and index-alias checks
include "_ad.pxi"         # the AD rules (ad_rule, ad_inline, ad_rot, ad_apply)
include "_kernels.pxi"    # loop kernels (run_kernel, run_reduce, run_induct)
include "_calls.pxi"      # calls, returns and frames
include "_vm_run.pxi"     # the dispatch loop (generated from rvm/_vm_run.pxi.in)
include "_nested.pxi"     # derivative statements: nested runs on scratch duals (nested AD)


# ---- the Python-facing core --------------------------------------------------------------------

def _offsets(sizes: list) -> list:
    """Start offset of each run in a concatenation of runs of the given sizes."""
    out, at = [], 0
    for n in sizes:
        out.append(at)
        at += n
    return out


cdef inline i64* _ptr(cnp.ndarray arr):
    return <i64*>cnp.PyArray_DATA(arr)


cdef inline void _scatter(i64* mem, const i64* addrs, const i64* words, i64 n) noexcept nogil:
    """mem[addrs[i]] = words[i] for i < n: an input's words (defaults, rows) into memory."""
    cdef i64 i
    for i in range(n):
        mem[addrs[i]] = words[i]


def _ranges(rs) -> np.ndarray:
    """Ranges [(lo, hi), ...] as a C-contiguous (k, 2) int64 array."""
    return np.ascontiguousarray(np.array(list(rs), dtype=np.int64).reshape(-1, 2))


def _mask_ranges(mask: np.ndarray) -> list:
    """The runs of True in a bool vector as [lo, hi) ranges."""
    d = np.diff(np.concatenate([[0], mask.view(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def _range_mask(rs, n: int) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    for lo, hi in rs:
        m[lo:hi] = True
    return m


cdef inline void _copy_ranges(i64* dst, const i64* src, cnp.ndarray rs) noexcept:
    """dst[lo:hi] = src[lo:hi] for each range [lo, hi) of the (k, 2) array rs."""
    cdef i64* r = _ptr(rs)
    cdef i64 k
    for k in range(rs.shape[0]):
        memcpy(dst + r[2 * k], src + r[2 * k], (r[2 * k + 1] - r[2 * k]) * sizeof(i64))


cdef inline bint _in_ranges(cnp.ndarray rs, i64 a) noexcept:
    cdef i64* r = _ptr(rs)
    cdef i64 k
    for k in range(rs.shape[0]):
        if r[2 * k] <= a < r[2 * k + 1]:
            return True
    return False


cdef inline void _zero_ranges(double* d, cnp.ndarray rs) noexcept:
    cdef i64* r = _ptr(rs)
    cdef i64 k
    for k in range(rs.shape[0]):
        memset(d + r[2 * k], 0, (r[2 * k + 1] - r[2 * k]) * sizeof(double))


cdef inline int _gather_runs(double* out, const double* src, const i64* runs,
                             i64 nruns) noexcept nogil:
    """out[k] = src[the k-th wrt cell] with the wrt cells given as runs (first address,
    length) of consecutive addresses, in order, as the loop `out[i] = src[wa[i]]` stopping
    after the first value that is not finite (returns 1 then, else 0): the same words
    written, without reading the addresses (ba's Jacobian rows: 573K cells a row)."""
    cdef i64 k, i, m, at = 0
    cdef const double* s
    cdef double x
    for k in range(nruns):
        s = src + runs[2 * k]
        m = runs[2 * k + 1]
        for i in range(m):
            x = s[i]
            out[at + i] = x
            if not isfinite(x):
                return 1
        at += m
    return 0


cdef inline int _gather(double* g, const double* adj, const i64* wa, i64 n, double* t,
                        const double* adjt) noexcept nogil:
    """g[i] = adj[wa[i]] (and t[i] = adjt[wa[i]] when t is not NULL) for i < n, stopping
    after the first value that is not finite (returns 1 then, else 0): _gradient's loop with
    the arrays in locals (not read again through the machine after each store)."""
    cdef i64 i
    cdef double x
    for i in range(n):
        x = adj[wa[i]]
        g[i] = x
        if not isfinite(x):
            return 1
        if t != NULL:
            x = adjt[wa[i]]
            t[i] = x
            if not isfinite(x):
                return 1
    return 0


cdef int _pending_exception() except -1:
    """Raise the exception a signal handler left set (a poll inside a nested run)."""
    return -1


include "_native.pxi"     # the native entry (NativeState, native_run)
include "_batch.pxi"      # many gradient rows by the native code, without the GIL


# the lane modes (rvm/native/tangent.py): at most LANES directions per run, on buffers of
# LANE_FRAME frame cells and LANE_STACK value stack slots per direction
DEF LANES = 64
DEF LANE_FRAME = 1 << 15
DEF LANE_STACK = 1 << 12


cdef class Core:
    """Machine state and interpreter of one Program.  rvm.machine.Machine is the public API."""

    cdef VM vm
    cdef readonly object program
    cdef cnp.ndarray _mem                  # int64 [globals | consts | frame region] (`mem`)
    cdef readonly cnp.ndarray static_image
    cdef readonly cnp.ndarray code          # the (n, 6) code the loop runs (a read-only copy)
    cdef readonly i64 last_n               # instructions run by the last run()
    cdef readonly i64 last_total           # ... and what it took off its cap (nested runs too)
    cdef list _keep                        # buffers the VM points into
    cdef object _brk                       # breakpoint flags and watch buffers the VM uses
    cdef object _watch
    cdef object _verifier                  # isa.verify's checker of this program (resolve)
    cdef object _duals                     # (tan, adj, adjt) over mem and over the value stack
    cdef object _nest_duals                # the dual sets of derivative statements (_nested.pxi)
    cdef object _kernels
    cdef native_fn nat_fwd                 # Core.gradient's native code (set_native) or NULL
    cdef native_fn nat_bwd
    cdef native_fn nat_fwd_t               # the tangent modes' native code (set_native_tangent)
    cdef native_fn nat_bwd_at
    cdef native_fn nat_fwd_vt              # the same over many directions at once (lanes)
    cdef native_fn nat_bwd_vat
    cdef object _lanes                     # the lane modes' tangent buffers (allocated on use)
    cdef double* lv_tan
    cdef double* lv_adjt
    cdef double* lv_stan
    cdef double* lv_sadjt
    cdef i64 lane_cells, lane_stack        # cells and stack slots the lane buffers cover
    cdef i64 lane_sdirty                   # doubles of the stack's a lane run may have written
    cdef i64 lane_w                        # the lanes of the last lane run (0: none yet)
    cdef dict _libs                        # the loaded libraries those point into, by setter
    cdef readonly i64 native_bails         # gradient() calls the native code handed back
    cdef native_fn run_fwd                 # native_run's code (set_native_runs) or NULL
    cdef native_fn run_bwd
    cdef readonly i64 native_runs          # runs native_run made, and runs it handed back
    cdef readonly i64 native_run_bails
    cdef cnp.ndarray _keep_g, _keep_s        # native_run's start state, to put back
    # the gradient call path (_gradient): the static cells a run may write (isa/effects.py)
    # and those whose duals a rule may touch, as (k, 2) [lo, hi) ranges; the written globals
    # that never round (`exact`) and the output globals (what the reports read); per start
    # state (def_addrs and input_cells, by identity: `_eff_key`) the cells a clean start
    # puts back, the written cells stored before the start and the rest of the written ones
    cdef cnp.ndarray _eff_w, _eff_refs, _eff_exact, _eff_out
    cdef cnp.ndarray _eff_reset, _eff_rzero, _eff_z0, _eff_wimg
    cdef cnp.ndarray _eff_runs             # the defaults as runs of consecutive addresses
    cdef object _eff_key
    cdef object _runs_key                  # the wrt addresses (by identity) of _runs
    cdef cnp.ndarray _runs                 # ... as (first address, length) runs (_wrt_runs)
    cdef object _words_ok                  # the words of the last pass that ran to the end
    cdef i64 _steps_ok
    cdef bint _snap_full                   # the pass under way fills its words fully
    # gradient_rows: the forward run's end state, kept for the sweeps after the first
    cdef bint _keep_end
    cdef NativeState _end_st
    cdef i64 _end_fwd
    cdef cnp.ndarray _end_g, _end_f, _end_s
    cdef readonly i64 clean_starts         # _gradient calls that put back only what a run
                                           # may write (the rest put back the whole image)

    def __init__(self, program, *, i64 stack_cells=1 << 20, i64 frame_cells=1 << 22,
                 i64 max_depth=1 << 16):
        cdef VM* vm
        from rvm.errors import InvalidBytecode
        if stack_cells < 0 or frame_cells < 0 or max_depth < 1:
            raise ValueError("stack_cells and frame_cells must be >= 0, max_depth >= 1")
        self._libs = {}
        self.program = program
        n_globals, n_static = program.n_globals, program.n_static
        # the one bytecode verifier (isa/verify.py): everything the loop relies on to stay
        # inside its buffers, and more; kept to check operand words later (resolve)
        self._verifier = _Verifier(program, machine=True)
        problems = self._verifier.run()
        if problems:
            raise InvalidBytecode("the program cannot run", problems)
        memset(&self.vm, 0, sizeof(VM))
        self.vm.rot_cs[0] = 1.0             # cos and sin of the angle word 0
        self.vm.cap = <i64>1 << 62          # no step cap until a run sets one
        self.vm.poll_left = NEST_POLL
        self.vm.nest_pc = -1
        self._keep = []
        self.static_image = np.ascontiguousarray(program.static_image(), dtype=np.int64)
        self._mem = np.zeros(n_static + frame_cells, dtype=np.int64)
        vm = &self.vm
        vm.code = self._buf(program.code)
        self.code = self._keep[len(self._keep) - 1]
        inverse = np.array(INVERSE, dtype=np.int64)
        vm.code_inv = self._buf(np.column_stack([inverse[self.code[:, 0]], self.code[:, 1:]]))
        vm.n_code = len(program.code)
        ymask = np.array([OP_YMASK[i] | OP_AMASK[i] for i in range(N_OPCODES)], dtype=np.int64)
        xflag = np.zeros(max(vm.n_code, 1), dtype=np.uint8)
        for slot in range(1, 6):
            uses = (ymask[self.code[:, 0]] >> slot) & 1
            xflag[:vm.n_code] |= ((uses == 1) & ((self.code[:, slot] & 7) == MODE_X)).astype(np.uint8)
        self._keep.append(xflag)
        vm.xflag = <uint8_t*>cnp.PyArray_DATA(xflag)
        vm.F = program.fraction_bits
        vm.main = program.main
        fns = program.functions
        vm.fn_begin = self._buf([f.begin for f in fns])
        vm.fn_end = self._buf([f.end for f in fns])
        vm.fn_fsize = self._buf([f.frame_size for f in fns])
        vm.fn_nparams = self._buf([len(f.params) for f in fns])
        vm.fn_poff = self._buf(_offsets([len(f.params) for f in fns]))
        written = np.array([p.written for f in fns for p in f.params] + [0], dtype=np.uint8)
        self._keep.append(written)
        vm.p_written = <uint8_t*>cnp.PyArray_DATA(written)
        vm.p_length = self._buf([-1 if p.length is None else p.length
                                 for f in fns for p in f.params] + [-1])
        vm.xt_base = self._buf([x.base for x in program.xtab])
        vm.xt_len = self._buf([x.length for x in program.xtab])
        vm.xt_index = self._buf([x.index for x in program.xtab])
        vm.cs_func = self._buf([s.func for s in program.callsites])
        vm.cs_off = self._buf(_offsets([len(s.args) for s in program.callsites]))
        args = [a for s in program.callsites for a in s.args]
        vm.arg_word = self._buf([a.word for a in args])
        vm.arg_len = self._buf([ARG_SCALAR if a.length is None else a.length for a in args])
        vm.const_lo, vm.const_hi = n_globals, n_static
        vm.mem = _ptr(self._mem)
        vm.n_mem = n_static + frame_cells
        vm.n_static = n_static
        vm.stack = self._work(max(stack_cells, 1))
        vm.stack_cap = stack_cells
        vm.pt_addr = self._work(max(frame_cells, 1))
        vm.pt_len = self._work(max(frame_cells, 1))
        vm.pt_cap = frame_cells
        vm.fr_func = self._work(max_depth)
        vm.fr_fp = self._work(max_depth)
        vm.fr_pp = self._work(max_depth)
        vm.fr_ret = self._work(max_depth)
        vm.fr_fdir = self._work(max_depth)
        vm.max_depth = max_depth
        self._alloc_nest_duals()
        self._build_kernels()
        vm.use_kernels = 1
        self._effects(program)
        self.reset(False)

    def _effects(self, program) -> None:
        """The gradient call path's ranges (isa/effects.py; the fields say what each is)."""
        ng = program.n_globals
        w = [(lo, min(hi, ng)) for lo, hi in static_writes(program) if lo < ng]
        self._eff_w = _ranges(w)
        self._eff_refs = _ranges(static_refs(program))
        exact = _range_mask([(g.addr, g.addr + g.size) for g in program.globals
                             if g.type != FLOAT], ng)
        self._eff_exact = _ranges(_mask_ranges(exact & _range_mask(w, ng)))
        self._eff_out = _ranges(merge([(g.addr, g.addr + g.size) for g in program.globals
                                       if g.is_output]))
        self._eff_key = None

    cdef int _eff_start(self, cnp.ndarray def_addrs, dict input_cells) except -1:
        """The ranges of the start state of _gradient's calls with these defaults and input
        cells: the cells a clean start puts back (every cell a run may write, and every cell
        a store may have written that these defaults do not overwrite), which of those the
        image holds zeros in (cleared, not copied), the written cells a store may write
        (row 0 of the words: their start; with the written cells that never round, which the
        restored-cells check reads) and the rest of the written cells (their start is the
        image's)."""
        program = self.program
        ng = self.vm.const_lo
        w = _range_mask(self._eff_w.tolist(), ng)
        stored = np.zeros(ng, dtype=bool)
        d = def_addrs[(def_addrs >= 0) & (def_addrs < ng)]
        stored[d] = True
        may = _range_mask([(g.addr, g.addr + g.size) for g in program.globals if g.is_input] +
                          [(int(c[0]), int(c[0]) + int(c[2])) for c in input_cells.values()],
                          ng)
        reset = _mask_ranges(w | (may & ~stored))
        image = self.static_image
        self._eff_reset = _ranges(reset)
        self._eff_rzero = np.array([not image[lo:hi].any() for lo, hi in reset], dtype=np.uint8)
        z0 = w & ((may | stored) | _range_mask(self._eff_exact.tolist(), ng))
        self._eff_z0 = _ranges(_mask_ranges(z0))
        self._eff_wimg = _ranges(_mask_ranges(w & ~z0))
        # (first index, length) of each run of consecutive addresses in def_addrs
        cut = np.flatnonzero(np.diff(def_addrs) != 1) + 1 if def_addrs.shape[0] else \
            np.zeros(0, dtype=np.int64)
        first = np.concatenate([[0], cut]) if def_addrs.shape[0] else cut
        self._eff_runs = np.ascontiguousarray(np.stack(
            [first, np.diff(np.concatenate([first, [def_addrs.shape[0]]]))], axis=1),
            dtype=np.int64).reshape(-1, 2)
        self._eff_key = (def_addrs, input_cells)
        return 0

    cdef void _clean_start(self, i64* da, i64* dw, i64 nd) noexcept:
        """_row_start's start state (no row words) from the state the last _gradient left
        (vm.grad_clean, the same defaults and input cells): only the cells a run may write,
        or a store may have written, are put back from the image."""
        cdef VM* vm = &self.vm
        cdef i64 used = min(vm.n_static + vm.peak_frame, vm.n_mem), k, lo, hi
        cdef i64* r = _ptr(self._eff_reset)
        cdef uint8_t* z = <uint8_t*>cnp.PyArray_DATA(self._eff_rzero)
        cdef i64* image = _ptr(self.static_image)
        cdef i64* run = _ptr(self._eff_runs)
        cdef i64 nr = self._eff_runs.shape[0]
        for k in range(self._eff_reset.shape[0]):
            lo, hi = r[2 * k], r[2 * k + 1]
            if z[k]:
                memset(vm.mem + lo, 0, (hi - lo) * sizeof(i64))
            else:
                memcpy(vm.mem + lo, image + lo, (hi - lo) * sizeof(i64))
        memset(vm.mem + vm.n_static, 0, (used - vm.n_static) * sizeof(i64))
        vm.ftop = vm.n_static
        vm.sp = vm.ptop = vm.depth = vm.t = 0
        vm.came = vm.trace_ack = vm.trap = 0
        vm.steps = vm.peak_sp = vm.peak_frame = vm.peak_depth = 0
        vm.status = _S_START
        vm.D = 1
        vm.pc = vm.fn_begin[vm.main]
        vm.ad = 0
        if nr * 8 <= nd:                     # long runs (arrays): a copy each
            for k in range(nr):
                memcpy(vm.mem + da[run[2 * k]], dw + run[2 * k],
                       run[2 * k + 1] * sizeof(i64))
        else:
            _scatter(vm.mem, da, dw, nd)
        vm.peak_frame = max(vm.peak_frame, vm.fn_fsize[vm.main])
        vm.peak_depth = max(vm.peak_depth, 1)

    cdef void _snap_end(self, i64* ws, i64 nw, i64 of_addr) noexcept:
        """Row 1 of the words at the end of the forward run: every global's (a full pass),
        else the outputs' and the loss's (what the reports read)."""
        if self._snap_full:
            memcpy(ws + nw, self.vm.mem, nw * sizeof(i64))
        else:
            _copy_ranges(ws + nw, self.vm.mem, self._eff_out)
            ws[nw + of_addr] = self.vm.mem[of_addr]

    def fill_words(self, cnp.ndarray words) -> bool:
        """After a pass of the C calls (GradCall, FlatCall, HessCall: _gradient fills the
        words only where their checks read them), fill `words` as Core.gradient does: rows 0
        and 2 whole, row 1 at every output and every cell no run writes (the end's words of
        the other written cells are not kept), from memory, which still holds the state the
        pass left, and the static image.  False (nothing filled) when it may not: another
        pass or run since, a reset, a store, Python's view of memory taken."""
        cdef VM* vm = &self.vm
        cdef i64 nw = words.shape[1], prev = 0, k
        cdef i64* ws = _ptr(words)
        cdef i64* r = _ptr(self._eff_w)
        if words is not self._words_ok or not vm.grad_clean or vm.steps != self._steps_ok or \
                vm.t != 0 or vm.status != _S_START:
            return False
        if self._snap_full:
            return True
        memcpy(ws + 2 * nw, vm.mem, nw * sizeof(i64))
        for k in range(self._eff_w.shape[0] + 1):      # the cells no run writes
            lo = r[2 * k] if k < self._eff_w.shape[0] else nw
            memcpy(ws + prev, vm.mem + prev, (lo - prev) * sizeof(i64))
            memcpy(ws + nw + prev, vm.mem + prev, (lo - prev) * sizeof(i64))
            if k < self._eff_w.shape[0]:
                prev = r[2 * k + 1]
        _copy_ranges(ws, _ptr(self.static_image), self._eff_wimg)
        self._snap_full = True
        return True

    @property
    def mem(self) -> np.ndarray:
        """All memory as an int64 array (a live view).  Taking it ends the state the gradient
        call path relies on (vm.grad_clean): its next call puts the whole image back."""
        self.vm.grad_clean = 0
        return self._mem

    def _alloc_nest_duals(self) -> None:
        """A program with derivative statements gets a set of dual arrays per nesting level
        (zeroed pages, touched only where a nested run writes them)."""
        cdef VM* vm = &self.vm
        cdef cnp.ndarray a
        ops = self.code[:, 0] if len(self.code) else np.zeros(0, dtype=np.int64)
        if not np.isin(ops, [OP_ADDGRAD_F, OP_SUBGRAD_F, OP_ADDJVP_F, OP_SUBJVP_F]).any():
            return
        cap = max(vm.stack_cap, 1)
        pops = np.array(self.program.pops_below_entry() + [False], dtype=np.uint8)
        self._nest_duals = [pops]
        vm.fn_pops_below = <uint8_t*>cnp.PyArray_DATA(pops)
        for lvl in range(1, NEST_LEVELS + 1):
            arrs = [np.zeros(vm.n_mem, dtype=np.float64) for _ in range(3)] + \
                [np.zeros(cap, dtype=np.float64) for _ in range(3)]
            self._nest_duals.append(arrs)
            a = arrs[0]; vm.n_tan[lvl] = <double*>cnp.PyArray_DATA(a)
            a = arrs[1]; vm.n_adj[lvl] = <double*>cnp.PyArray_DATA(a)
            a = arrs[2]; vm.n_adjt[lvl] = <double*>cnp.PyArray_DATA(a)
            a = arrs[3]; vm.n_stan[lvl] = <double*>cnp.PyArray_DATA(a)
            a = arrs[4]; vm.n_sadj[lvl] = <double*>cnp.PyArray_DATA(a)
            a = arrs[5]; vm.n_sadjt[lvl] = <double*>cnp.PyArray_DATA(a)

    def _build_kernels(self) -> None:
        """Find the loops a kernel can run (see run_kernel), in both directions of execution."""
        cdef VM* vm = &self.vm
        n = vm.n_code
        fwd = self.code
        inv = np.column_stack([np.array(INVERSE, dtype=np.int64)[fwd[:, 0]], fwd[:, 1:]])
        kern = np.full(2 * max(n, 1), -1, dtype=np.int64)
        found = []
        shape = []
        induct = []
        for d, (code, e) in enumerate(((fwd, 1), (inv, -1))):
            for J in np.nonzero(code[:, 0] == OP_JMP)[0]:
                J = int(J)
                T = int(code[J, 4])
                if code[T, 0] != OP_JOIN or int(code[T, 4]) != J or (J - T) * e <= 0:
                    continue
                rows = list(range(T + e, J, e))
                if 1 <= len(rows) <= KMAX and all(_kernel_row(code[r]) for r in rows) \
                        and _direct_cond(code[J]) and _direct_cond(code[T]):
                    kern[d * n + J] = len(found)
                    found.append((J, T, rows))
                    ci = _reduce_shape(code, rows)
                    shape.append(ci)
                    induct.append(_induct_shape(code, rows) if ci < 0 else -1)
        self._kernels = found
        vm.kern = self._buf(kern)
        vm.k_len = self._buf([len(r) for _, _, r in found])
        vm.k_jmp = self._buf([J for J, _, _ in found])
        vm.k_join = self._buf([T for _, T, _ in found])
        vm.k_rows = self._buf([(r + [0] * KMAX)[:KMAX] for _, _, r in found] or [0])
        vm.k_shape = self._buf(shape)
        vm.k_induct = self._buf(induct)

    def set_kernels(self, bint on) -> None:
        """Run simple loops by their kernels (default) or instruction by instruction."""
        self.vm.use_kernels = on

    cdef bint _bind_native(self, str setter, object lib, size_t forward, size_t backward,
                           native_fn* fwd, native_fn* bwd) except -1:
        """What set_native, set_native_tangent and set_native_runs share: clear the pair of
        entry points (*fwd, *bwd) and drop its library; with a library `lib`, check that both
        addresses are given (ValueError) and that the entry frame fits the frame region, then
        bind them and keep `lib` alive.  False when the frame does not fit (nothing bound)."""
        fwd[0] = bwd[0] = NULL
        self._libs.pop(setter, None)
        if lib is None:
            return True
        if forward == 0 or backward == 0:
            raise ValueError(f"{setter} needs both function addresses")
        if self.vm.fn_fsize[self.vm.main] > self.vm.n_mem - self.vm.n_static:
            return False
        self._libs[setter] = lib
        fwd[0] = <native_fn>forward
        bwd[0] = <native_fn>backward
        return True

    def set_native(self, lib=None, size_t forward=0, size_t backward=0) -> bool:
        """Let gradient() (without a tangent) run the forward run and the adjoint sweep by
        native code (rvm/native: the addresses of rvm_native_forward/backward in the loaded
        library `lib`, kept alive here); no arguments: by the interpreter again.  False when
        the entry frame does not fit the frame region (the interpreter reports that)."""
        return self._bind_native("set_native", lib, forward, backward,
                                 &self.nat_fwd, &self.nat_bwd)

    @property
    def native(self) -> bool:
        """gradient() runs native code (set_native)."""
        return self.nat_fwd != NULL

    def set_native_tangent(self, lib=None, size_t forward=0, size_t backward=0,
                           size_t forward_lanes=0, size_t backward_lanes=0) -> bool:
        """Let gradient() with tangents (Hessian-vector products, Hessians) and tangent_run()
        run native code (rvm/native/tangent.py: the addresses of rvm_native_forward_t and
        rvm_native_backward_at in the loaded library `lib`, kept alive here, and of the lane
        modes rvm_native_forward_vt and rvm_native_backward_vat, which run up to LANES
        columns of a Hessian at once); no arguments: the interpreter again.  False when the
        entry frame does not fit the frame region."""
        self.nat_fwd_vt = self.nat_bwd_vat = NULL
        fits = self._bind_native("set_native_tangent", lib, forward, backward,
                                 &self.nat_fwd_t, &self.nat_bwd_at)
        if self.nat_fwd_t != NULL and forward_lanes != 0 and backward_lanes != 0:
            self.nat_fwd_vt = <native_fn>forward_lanes
            self.nat_bwd_vat = <native_fn>backward_lanes
        return fits

    @property
    def native_tangent(self) -> bool:
        """gradient() with tangents and tangent_run() run native code (set_native_tangent)."""
        return self.nat_fwd_t != NULL

    @property
    def native_tangent_lanes(self) -> bool:
        """... and so do the lane modes (many columns of a Hessian at once)."""
        return self.nat_fwd_vt != NULL

    def set_native_runs(self, lib=None, size_t forward=0, size_t backward=0) -> bool:
        """Let native_run run whole forward and backward runs by native code (rvm/native: the
        addresses of rvm_native_forward and rvm_native_run_backward in the loaded library
        `lib`, kept alive here); no arguments: none.  False when the entry frame does not fit
        the frame region (the interpreter reports that)."""
        return self._bind_native("set_native_runs", lib, forward, backward,
                                 &self.run_fwd, &self.run_bwd)

    @property
    def native_runs_on(self) -> bool:
        """native_run has native code (set_native_runs)."""
        return self.run_fwd != NULL

    def native_run(self, i64 budget) -> int:
        """A whole run from the boundary the machine is at (the start going forward, the end
        going backward) by the native code, leaving the machine as the interpreter's run
        would: 0.  1 (nothing changed: the interpreter must run) when there is no native code,
        the machine is not at that boundary, AD, a breakpoint or a watch is on, or the run
        needs `budget` steps or more; also when the native code gives up (a trap: the start
        state is put back, and the interpreter's run reports it).  A signal's exception (a
        Ctrl-C) is raised with the start state put back."""
        return self._native_run(budget)

    cdef int _native_run(self, i64 budget) except -1:
        cdef VM* vm = &self.vm
        cdef RunState rs
        cdef NativeState* st = &rs.st
        cdef native_fn f
        cdef i64 fs = vm.fn_fsize[vm.main], ng = vm.const_lo, n
        cdef int rc
        cdef cnp.ndarray keep_g, keep_s
        vm.grad_clean = 0
        if vm.D > 0:
            f = self.run_fwd
            if vm.status != _S_START:
                return 1
        else:
            f = self.run_bwd
            if vm.status != _S_END:
                return 1
        if f == NULL or vm.depth != 0 or vm.ad != 0 or vm.brk != NULL or vm.n_watch != 0 \
                or budget <= 1:
            return 1
        # the start state to put back if the native code gives up: the globals and the
        # value stack (constants are never written; frames are zero between runs)
        keep_g = self._keep_g
        if keep_g is None:
            keep_g = self._keep_g = np.empty(ng + 1, dtype=np.int64)
        memcpy(_ptr(keep_g), vm.mem, ng * sizeof(i64))
        keep_s = self._keep_s
        if keep_s is None or keep_s.shape[0] < vm.sp + 1:
            keep_s = self._keep_s = np.empty(vm.sp + 1, dtype=np.int64)
        memcpy(_ptr(keep_s), vm.stack, vm.sp * sizeof(i64))
        vm.peak_frame = max(vm.peak_frame, fs)     # first: a reset clears a dirty frame
        st.mem = vm.mem
        st.adj = NULL
        st.n_mem = vm.n_mem
        st.max_depth = vm.max_depth
        st.pt_cap = vm.pt_cap
        st.peak_ftop = vm.n_static + fs
        st.peak_depth = 1
        st.stack = vm.stack
        st.sadj = NULL
        st.sp = vm.sp
        st.stack_cap = vm.stack_cap
        st.peak_sp = vm.peak_sp
        st.steps = 0
        st.rel_n = st.rel_pc = 0
        st.rel_max = 0.0
        native_nest(vm, st)
        rs.cap = budget
        rs.capped = 0
        try:
            rc = native_run_capped(f, &rs)
        except BaseException:
            self._put_back(keep_g, keep_s, ng, vm.sp, st.peak_ftop)
            raise
        if rc != 0 or st.steps >= budget:
            self._put_back(keep_g, keep_s, ng, vm.sp, st.peak_ftop)
            self.native_run_bails += 1
            return 1
        n = st.steps
        vm.peak_frame = max(vm.peak_frame, st.peak_ftop - vm.n_static)
        vm.peak_depth = max(vm.peak_depth, st.peak_depth)
        vm.peak_sp = max(vm.peak_sp, st.peak_sp)
        vm.sp = st.sp
        vm.steps += n
        vm.t += (n - st.nest_steps) * vm.D     # a derivative statement is one step of t
        vm.ftop = vm.n_static
        vm.ptop = vm.depth = vm.came = 0
        vm.status = _S_END if vm.D > 0 else _S_START
        vm.pc = vm.fn_end[vm.main] if vm.D > 0 else vm.fn_begin[vm.main]
        self.last_n = n
        self.native_runs += 1
        return 0

    def grad_rows(self, i64 of_addr, cnp.ndarray def_addrs, cnp.ndarray def_words,
                  cnp.ndarray row_addrs, cnp.ndarray rows, cnp.ndarray wrt_addrs,
                  cnp.ndarray out, cnp.ndarray loss, cnp.ndarray status,
                  cnp.ndarray exact) -> bool:
        """Gradients of many rows by the native code (set_native), the GIL released: row b
        starts from the static image, the words def_words at def_addrs and rows[b] at
        row_addrs (int64, C order); out[b] (float64 (B, n)) gets the gradient at wrt_addrs,
        loss[b] the loss's word at the end of the forward run, status[b] 0, or 1 when the
        interpreter must run that row (it reports why).  False (nothing run) without native
        code or with a breakpoint or watch set.  A signal's exception (Ctrl-C) is raised."""
        cdef VM* vm = &self.vm
        cdef i64 B = rows.shape[0], b, nr = row_addrs.shape[0], nwrt = wrt_addrs.shape[0]
        cdef i64 nw = vm.const_lo
        cdef int rc = 0
        cdef cnp.ndarray ws = np.empty(nw + 1, dtype=np.int64)
        cdef i64* rp = _ptr(rows)
        cdef double* op = <double*>cnp.PyArray_DATA(out)
        cdef i64* lp = _ptr(loss)
        cdef i64* sp = _ptr(status)
        cdef native_fn fwd = self.nat_fwd, bwd = self.nat_bwd
        cdef i64* image
        cdef i64* da
        cdef i64* dw
        cdef i64* ra
        cdef i64* wa
        cdef i64* wsp
        cdef i64* ex
        cdef i64 nd = def_addrs.shape[0], nex = exact.shape[0]
        if fwd == NULL or vm.brk != NULL or vm.n_watch != 0:
            return False
        if not (rows.flags.c_contiguous and out.flags.c_contiguous and rows.ndim == 2 and
                rows.shape[1] == nr and out.shape[0] == B and out.shape[1] == nwrt and
                loss.shape[0] == B and status.shape[0] == B and rows.dtype == np.int64 and
                out.dtype == np.float64 and loss.dtype == np.int64 and
                status.dtype == np.int64):
            raise ValueError("grad_rows: arrays of the wrong shape or type")
        if self._duals is None:
            self.set_ad(_AD_ADJ)
        image, da, dw, ra = _ptr(self.static_image), _ptr(def_addrs), _ptr(def_words), \
            _ptr(row_addrs)
        wa, wsp, ex = _ptr(wrt_addrs), _ptr(ws), _ptr(exact)
        with nogil:
            for b in range(B):
                rc = grad_row(vm, image, fwd, bwd, of_addr, da, dw, nd, ra, rp + b * nr, nr,
                              wa, nwrt, op + b * nwrt, lp + b, wsp, nw, ex, nex)
                if rc == 2:
                    break
                sp[b] = rc
        if rc == 2:
            PyErr_CheckSignals()
            raise KeyboardInterrupt
        return True

    def run_rows(self, cnp.ndarray def_addrs, cnp.ndarray def_words, cnp.ndarray row_addrs,
                 cnp.ndarray rows, cnp.ndarray out, cnp.ndarray status,
                 bint reverse=False) -> bool:
        """Forward runs of many rows by the native code (set_native_runs), the GIL released:
        row b starts as in grad_rows; out[b] (int64 (B, n_globals)) gets the globals' words
        at the end, status[b] 0, or 1 when the interpreter must run that row.  With
        `reverse`, backward runs: the same words make the end state, and out[b] gets the
        globals' words back at the start.  False (nothing run) without native code or with
        a breakpoint or watch set."""
        cdef VM* vm = &self.vm
        cdef i64 B = rows.shape[0], b, nr = row_addrs.shape[0], nw = vm.const_lo
        cdef int rc = 0
        cdef native_fn fwd = self.run_bwd if reverse else self.run_fwd
        cdef i64* image
        cdef i64* da
        cdef i64* dw
        cdef i64* ra
        cdef i64* rp
        cdef i64* op
        cdef i64* sp
        cdef i64 nd = def_addrs.shape[0]
        if fwd == NULL or vm.brk != NULL or vm.n_watch != 0:
            return False
        if not (rows.flags.c_contiguous and out.flags.c_contiguous and rows.ndim == 2 and
                rows.shape[1] == nr and out.shape[0] == B and out.shape[1] == nw and
                status.shape[0] == B and rows.dtype == np.int64 and out.dtype == np.int64
                and status.dtype == np.int64 and def_addrs.dtype == np.int64 and
                def_words.dtype == np.int64 and row_addrs.dtype == np.int64):
            raise ValueError("run_rows: arrays of the wrong shape or type")
        image, da, dw, ra = _ptr(self.static_image), _ptr(def_addrs), _ptr(def_words), \
            _ptr(row_addrs)
        rp, op, sp = _ptr(rows), _ptr(out), _ptr(status)
        with nogil:
            for b in range(B):
                rc = run_row(vm, image, fwd, da, dw, nd, ra, rp + b * nr, nr, op + b * nw, nw,
                             reverse)
                if rc == 2:
                    break
                sp[b] = rc
        if rc == 2:
            PyErr_CheckSignals()
            raise KeyboardInterrupt
        return True

    cdef void _put_back(self, cnp.ndarray keep_g, cnp.ndarray keep_s, i64 ng, i64 sp,
                        i64 peak_ftop):
        """native_run gave up: the globals, the value stack and zero frames as they were."""
        cdef VM* vm = &self.vm
        cdef i64 top = min(max(peak_ftop, vm.n_static + vm.peak_frame), vm.n_mem)
        memcpy(vm.mem, _ptr(keep_g), ng * sizeof(i64))
        memcpy(vm.stack, _ptr(keep_s), sp * sizeof(i64))
        memset(vm.mem + vm.n_static, 0, (top - vm.n_static) * sizeof(i64))
        vm.peak_frame = max(vm.peak_frame, peak_ftop - vm.n_static)

    @property
    def kernels(self) -> list:
        """(jmp pc, join pc, body pcs) of every loop kernel, forward then backward."""
        return list(self._kernels)

    @property
    def kernel_forms(self) -> list:
        """How each kernel runs: "reduce" (run_reduce), "induct" (run_induct) or "general"
        (every row through run_kernel's loop); a specialized form that finds its cells
        aliased at run time falls back to the general one."""
        cdef VM* vm = &self.vm
        return ["reduce" if vm.k_shape[i] >= 0 else "induct" if vm.k_induct[i] > 0
                else "general" for i in range(len(self._kernels))]

    cdef i64* _buf(self, values):
        """Keep a private int64 copy of `values` alive and return its data pointer (never
        NULL).  A copy, so that changing the Program afterwards cannot undo the validation."""
        arr = np.array(values, dtype=np.int64, order="C", copy=True)
        if arr.size == 0:
            arr = np.zeros(1, dtype=np.int64)
        arr.setflags(write=False)
        self._keep.append(arr)
        return _ptr(arr)

    cdef i64* _work(self, i64 n):
        """A zeroed int64 work buffer of n cells (calloc'ed: pages are touched on use)."""
        arr = np.zeros(n, dtype=np.int64)
        self._keep.append(arr)
        return _ptr(arr)

    # ---- state -------------------------------------------------------------------------

    def reset(self, bint at_end):
        """Static image in memory, empty stacks, status start (D = +1) or end (D = -1)."""
        self._reset(at_end)

    def load(self, dict values, dict cells, cnp.ndarray def_addrs=None,
             cnp.ndarray def_words=None) -> bool:
        """Store the words def_words at def_addrs (int64; the inputs' defaults), then `values`
        ({name: value}) at the cells {name: (address, kind, size)} (Machine.write's words
        for the values that need no conversion: see _store_inputs).  False when some value
        needs Machine.write (or names no such cell): the caller stores them all again."""
        cdef VM* vm = &self.vm
        vm.grad_clean = 0
        if def_addrs is not None:
            _scatter(vm.mem, _ptr(def_addrs), _ptr(def_words), def_addrs.shape[0])
        return _store_inputs(vm, values, cells) == 0

    def globals_words(self) -> np.ndarray:
        """A copy of the globals' words."""
        return _words_copy(self.vm.mem, self.vm.const_lo)

    cdef int _reset(self, bint at_end) except -1:
        cdef VM* vm = &self.vm
        cdef i64 used = vm.n_static + vm.peak_frame
        vm.grad_clean = 0
        memcpy(vm.mem, _ptr(self.static_image), vm.n_static * sizeof(i64))
        if used > vm.n_mem:
            used = vm.n_mem
        memset(vm.mem + vm.n_static, 0, (used - vm.n_static) * sizeof(i64))
        vm.ftop = vm.n_static
        vm.sp = 0
        vm.ptop = 0
        vm.depth = 0
        vm.came = 0
        vm.t = 0
        vm.trace_ack = 0
        vm.trap = 0
        vm.nest = 0
        vm.stop_depth = 0
        vm.nest_stop = 0
        vm.nest_pc = -1
        if self._duals is not None:
            self._clear_duals()
        vm.steps = vm.peak_sp = vm.peak_frame = vm.peak_depth = 0
        vm.status = _S_END if at_end else _S_START
        vm.D = -1 if at_end else 1
        vm.pc = vm.fn_end[vm.main] if at_end else vm.fn_begin[vm.main]
        if vm.n_watch != 0:
            self.refresh_watch()
        return 0

    # ---- automatic differentiation (rvm/ad/engine.py drives these) -------------------

    def set_ad(self, int mode) -> None:
        """Differentiate while running: mode = AD_TAN | AD_ADJ bits, 0 to stop.  The dual
        arrays are allocated on first use (zeroed pages, touched only where used) and kept."""
        cdef VM* vm = &self.vm
        cdef cnp.ndarray a
        if mode & ~(_AD_TAN | _AD_ADJ):
            raise ValueError(f"AD mode {mode}")
        if mode and self._duals is None:
            cap = max(vm.stack_cap, 1)
            self._duals = tuple(np.zeros(vm.n_mem, dtype=np.float64) for _ in range(3)) + \
                tuple(np.zeros(cap, dtype=np.float64) for _ in range(3))
            a = self._duals[0]; vm.tan = <double*>cnp.PyArray_DATA(a)
            a = self._duals[1]; vm.adj = <double*>cnp.PyArray_DATA(a)
            a = self._duals[2]; vm.adjt = <double*>cnp.PyArray_DATA(a)
            a = self._duals[3]; vm.stan = <double*>cnp.PyArray_DATA(a)
            a = self._duals[4]; vm.sadj = <double*>cnp.PyArray_DATA(a)
            a = self._duals[5]; vm.sadjt = <double*>cnp.PyArray_DATA(a)
        vm.ad = mode

    @property
    def ad_mode(self) -> int:
        return self.vm.ad

    @property
    def tangent(self) -> np.ndarray:
        """Tangents of every cell (a view: write seeds into it)."""
        return self._dual(0)

    @property
    def adjoint(self) -> np.ndarray:
        """Adjoints of every cell (a view)."""
        return self._dual(1)

    @property
    def adjoint_tangent(self) -> np.ndarray:
        """Tangents of the adjoints (Hessian-vector products; a view)."""
        return self._dual(2)

    def _dual(self, int k):
        self.vm.grad_clean = 0              # a view that can be written (see `mem`)
        if self._duals is None:
            raise RuntimeError("no dual arrays: call set_ad first")
        return self._duals[k]

    def gradient(self, i64 of_addr, dict inputs, dict input_cells, cnp.ndarray def_addrs,
                 cnp.ndarray def_words, cnp.ndarray wrt_addrs, cnp.ndarray out,
                 cnp.ndarray words, cnp.ndarray tangent=None,
                 cnp.ndarray out_t=None) -> int:
        """One reverse-mode gradient in one call (the fast path of rvm.grad_fn and of the
        Hessian passes): the start state with the input defaults (def_addrs, def_words) and
        `inputs` (name -> a Python float or int, or for a float array a list of Python floats
        or a float64 array, stored where input_cells says: name -> (address, 0 int / 1 float /
        2 float array, length)), a forward run, the adjoint of of_addr seeded with 1, the
        adjoint sweep back to the start, and out[k] = the adjoint of cell wrt_addrs[k].  With
        `tangent` (one per wrt cell) the forward run carries those tangents and the sweep the
        adjoints' tangents: out_t[k] = (H tangent)[k]; a (c, n) `tangent` runs c such passes,
        one per row, into the rows of a (c, n) out_t (a full Hessian in one call; out, words
        and last_n are the last pass's).  words (3, n) gets the first n globals'
        words at the start, at the end and back at the start.  Returns 0, or 1 when the
        general path must run instead (an input it does not store, a trap, a trace, a
        breakpoint, a non-finite derivative): that path reports it."""
        cdef i64 cols, nwrt = wrt_addrs.shape[0]
        cdef double* tin
        cdef double* tout
        if tangent is None:
            return self._gradient(of_addr, inputs, input_cells, def_addrs, def_words,
                                  wrt_addrs, out, words, NULL, NULL, 0, NULL, True)
        cols = 1 if tangent.ndim == 1 else tangent.shape[0]
        if not (tangent.dtype == np.float64 and tangent.flags.c_contiguous and out_t is not None
                and out_t.dtype == np.float64 and out_t.flags.c_contiguous and
                tangent.ndim in (1, 2) and tangent.shape[tangent.ndim - 1] == nwrt and
                out_t.size == tangent.size):
            raise ValueError("gradient: tangent and out_t must be C-contiguous float64 arrays "
                             "of one shape, (n) or (columns, n) for the n wrt cells")
        tin = <double*>cnp.PyArray_DATA(tangent)
        tout = <double*>cnp.PyArray_DATA(out_t)
        return self._tangent_rows(of_addr, inputs, input_cells, def_addrs, def_words,
                                  wrt_addrs, out, words, tin, tout, cols, NULL, True)

    cdef int _tangent_rows(self, i64 of_addr, dict inputs, dict input_cells,
                           cnp.ndarray def_addrs, cnp.ndarray def_words, cnp.ndarray wrt_addrs,
                           cnp.ndarray out, cnp.ndarray words, double* tin, double* tout,
                           i64 cols, KeyCache* kc=NULL, bint full=False) except -1:
        """gradient's passes for `cols` tangent rows tin (cols, n) into tout (lanes at once
        where the lane modes' native code is there); `full`: as _gradient's."""
        cdef i64 k, j, w, nwrt = wrt_addrs.shape[0]
        cdef int rc
        k = 0
        while k < cols:
            w = min(cols - k, LANES)
            if w > 1 and self.nat_fwd_vt != NULL and \
                    self._gradient(of_addr, inputs, input_cells, def_addrs, def_words, wrt_addrs,
                                   out, words, tin + k * nwrt, tout + k * nwrt, w, kc,
                                   full) == 0:
                k += w                          # w columns in one run (the lane modes)
                continue
            for j in range(k, k + w):
                rc = self._gradient(of_addr, inputs, input_cells, def_addrs, def_words,
                                    wrt_addrs, out, words, tin + j * nwrt, tout + j * nwrt, 0, kc,
                                    full)
                if rc != 0:
                    return rc
            k += w
        return 0

    cdef int _gradient(self, i64 of_addr, dict inputs, dict input_cells, cnp.ndarray def_addrs,
                       cnp.ndarray def_words, cnp.ndarray wrt_addrs, cnp.ndarray out,
                       cnp.ndarray words, double* tan_in, double* tan_out,
                       i64 lanes=0, KeyCache* kc=NULL, bint full=False) except -1:
        """gradient's pass (see there).  Without `full` (the C calls: GradCall, FlatCall,
        HessCall), the words are filled only where their checks and reports read them: row 1
        at the outputs and the loss, rows 0 and 2 at the written cells that never round
        (rows 0 and 2 agree everywhere else: nothing writes those cells), row 0 also at the
        written cells a store may write; fill_words fills the rest afterwards.
        The start state: the whole static image, except when the last pass on this machine
        was one of these with the same defaults and input cells and nothing else has touched
        memory since (vm.grad_clean): then only the cells a run may write (isa/effects.py)
        and the inputs a store may have written are put back, and only the duals a rule may
        have touched are cleared: the same start state, bit for bit."""
        cdef VM* vm = &self.vm
        cdef i64 i
        cdef i64* wa = _ptr(wrt_addrs)
        cdef double* g = <double*>cnp.PyArray_DATA(out)
        cdef i64* ws = _ptr(words)
        cdef i64 nw = words.shape[1], ns
        cdef bint hvp = tan_in != NULL
        cdef bint native = (self.nat_fwd != NULL and not hvp) or lanes > 0 or \
            (self.nat_fwd_t != NULL and hvp)
        cdef bint clean
        cdef cnp.ndarray runs
        if vm.brk != NULL or vm.n_watch != 0 or nw > vm.n_static:
            return 1
        if self._duals is None:
            self.set_ad(_AD_ADJ)
        self._words_ok = None
        self._snap_full = full or nw != vm.const_lo
        key = self._eff_key
        clean = native and vm.grad_clean and key is not None and \
            <object>(<tuple>key)[0] is def_addrs and <object>(<tuple>key)[1] is input_cells
        if not clean and (key is None or <object>(<tuple>key)[0] is not def_addrs or
                          <object>(<tuple>key)[1] is not input_cells):
            self._eff_start(def_addrs, input_cells)
        if clean:
            # the duals a rule may have touched (and the loss's, seeded), the value stack's
            ns = min(max(vm.peak_sp, vm.sp) + 1, max(vm.stack_cap, 1))
            _zero_ranges(vm.adj, self._eff_refs)
            vm.adj[of_addr] = 0.0
            memset(vm.sadj, 0, ns * sizeof(double))
            if hvp and lanes == 0:
                _zero_ranges(vm.tan, self._eff_refs)
                _zero_ranges(vm.adjt, self._eff_refs)
                memset(vm.stan, 0, ns * sizeof(double))
                memset(vm.sadjt, 0, ns * sizeof(double))
        elif native:
            # only the static cells' and the stack's duals (_static_duals); the lane modes keep
            # their tangents in the lane buffers (_native_lane_sweeps clears those) and the
            # gradient reads no tangent
            _static_duals(vm, True, hvp and lanes == 0, hvp and lanes == 0)
        vm.ev_release = vm.ev_nonfinite = 0
        vm.ev_release_max = 0.0
        vm.ev_release_pc = vm.ev_nonfinite_pc = -1
        # the start state: the static image, zero frames, the defaults (and for the
        # interpreter every dual cleared)
        if clean:
            self._clean_start(_ptr(def_addrs), _ptr(def_words), def_addrs.shape[0])
            self.clean_starts += 1
        else:
            _row_start(vm, _ptr(self.static_image), _ptr(def_addrs), _ptr(def_words),
                       def_addrs.shape[0], NULL, NULL, 0, 0 if native else 2, False)
        vm.grad_clean = 1                   # from here on only runs write memory
        if inputs and _store_inputs(vm, inputs, input_cells, kc) != 0:
            return 1
        if self._snap_full:
            memcpy(ws, vm.mem, nw * sizeof(i64))
        else:
            _copy_ranges(ws, vm.mem, self._eff_z0)
        # forward, then the adjoint sweep back (in slices, so that Ctrl-C can stop a long run)
        if self.nat_fwd != NULL and not hvp:
            if self._native_sweeps(of_addr, ws, nw) != 0:
                return 1
        elif lanes > 0:
            if self._native_lane_sweeps(of_addr, ws, nw, wa, wrt_addrs.shape[0], tan_in, tan_out,
                                        lanes) != 0:
                return 1
        elif self.nat_fwd_t != NULL and hvp:
            for i in range(wrt_addrs.shape[0]):
                vm.tan[wa[i]] = tan_in[i]
            if self._native_tangent_sweeps(of_addr, ws, nw) != 0:
                return 1
        else:
            if hvp:
                vm.ad = _AD_TAN
                for i in range(wrt_addrs.shape[0]):
                    vm.tan[wa[i]] = tan_in[i]
            if self._sweep(hvp) != _R_BOUNDARY:
                return 1
            self.last_n = vm.steps
            self._snap_end(ws, nw, of_addr)
            vm.ad = _AD_ADJ | (_AD_TAN if hvp else 0)
            vm.trace_ack = 0
            vm.D = -1
            vm.adj[of_addr] = 1.0
            if self._sweep(True) != _R_BOUNDARY:
                return 1
        if self._snap_full:
            memcpy(ws + 2 * nw, vm.mem, nw * sizeof(i64))
        else:
            _copy_ranges(ws + 2 * nw, vm.mem, self._eff_exact)
        if not hvp and wrt_addrs.shape[0] > 64:
            runs = self._wrt_runs(wrt_addrs)
            if _gather_runs(g, vm.adj, _ptr(runs), runs.shape[0]) != 0:
                return 1
            self._words_ok = words
            self._steps_ok = vm.steps
            return 0
        if _gather(g, vm.adj, wa, wrt_addrs.shape[0],
                   tan_out if hvp and lanes == 0 else NULL, vm.adjt) != 0:
            return 1
        self._words_ok = words
        self._steps_ok = vm.steps
        return 0

    cdef int _native_sweeps(self, i64 of_addr, i64* ws, i64 nw) except -1:
        """gradient()'s forward run and adjoint sweep by the native code, leaving the machine
        as the interpreter would.  1: the interpreter must run instead (it reports why)."""
        cdef VM* vm = &self.vm
        cdef NativeState st
        cdef i64 n_fwd
        cdef int rc
        self._native_state(&st)
        try:
            rc = native_run(self.nat_fwd, &st)
            n_fwd = st.steps
            if rc == RVM_NATIVE_DONE:
                self.last_n = n_fwd
                self._snap_end(ws, nw, of_addr)
                if self._keep_end:
                    self._save_end(&st, n_fwd)
                vm.adj[of_addr] = 1.0
                st.steps = 0
                rc = native_run(self.nat_bwd, &st)
        finally:
            self._native_peaks(&st)
        if rc != RVM_NATIVE_DONE:
            self.native_bails += 1
            return 1
        vm.steps = n_fwd + st.steps
        vm.t = n_fwd - st.steps
        vm.ad = _AD_ADJ
        vm.D = -1
        vm.status = _S_START
        vm.pc = vm.fn_begin[vm.main]
        return 0

    cdef void _save_end(self, NativeState* st, i64 n_fwd) noexcept:
        """gradient_rows: keep the end state of the forward run (the written globals, the
        frames, the value stack, the native state) for the sweeps after the first."""
        cdef VM* vm = &self.vm
        cdef i64 nf = st.peak_ftop - vm.n_static
        if self._end_g is None:
            self._end_g = np.empty(max(vm.const_lo, 1), dtype=np.int64)
        if self._end_f is None or self._end_f.shape[0] < nf:
            self._end_f = np.empty(max(nf, 1), dtype=np.int64)
        if self._end_s is None or self._end_s.shape[0] < st.sp + 1:
            self._end_s = np.empty(st.sp + 1, dtype=np.int64)
        _copy_ranges(_ptr(self._end_g), vm.mem, self._eff_w)
        memcpy(_ptr(self._end_f), vm.mem + vm.n_static, nf * sizeof(i64))
        memcpy(_ptr(self._end_s), vm.stack, st.sp * sizeof(i64))
        self._end_st = st[0]
        self._end_fwd = n_fwd

    def gradient_rows(self, cnp.ndarray seeds, cnp.ndarray def_addrs, cnp.ndarray def_words,
                      cnp.ndarray wrt_addrs, cnp.ndarray out, cnp.ndarray loss,
                      cnp.ndarray words) -> int:
        """The gradients of several loss cells (int64 addresses `seeds`, k of them: the rows
        of a Jacobian) from one forward run: the start state of `gradient` (the words
        def_words at def_addrs, no other inputs), the native forward run, then per seed the
        forward run's end state (kept after the first: the written cells, frames and value
        stack put back), the duals cleared, that seed's adjoint set to 1 and the native sweep;
        out[j] (float64 (k, n), C order) gets the gradient at wrt_addrs, loss[j] the seed's
        word at the end of the forward run.  Each row is bit for bit the single-seed
        gradient's, as each sweep starts from the same state.  words: as for the C calls
        (_gradient without `full`).  Returns 0, or 1 when the caller must compute the rows
        another way (no native code, a trap, a path that did not retrace, a non-finite
        derivative)."""
        cdef VM* vm = &self.vm
        cdef i64 k = seeds.shape[0], n = wrt_addrs.shape[0], j, i, ns, nf, lo, hi, r
        cdef i64* sd = _ptr(seeds)
        cdef i64* wa = _ptr(wrt_addrs)
        cdef i64* lw = _ptr(loss)
        cdef i64* ws = _ptr(words)
        cdef i64* ex
        cdef i64 nw = words.shape[1]
        cdef double* o = <double*>cnp.PyArray_DATA(out)
        cdef NativeState st
        cdef int rc
        cdef cnp.ndarray runs = self._wrt_runs(wrt_addrs)
        if k == 0 or self.nat_fwd == NULL or not (
                out.dtype == np.float64 and out.flags.c_contiguous and out.ndim == 2 and
                out.shape[0] == k and out.shape[1] == n and loss.shape[0] == k and
                loss.dtype == np.int64 and seeds.dtype == np.int64 and nw == vm.const_lo):
            return 1
        self._keep_end = True
        try:
            rc = self._gradient(sd[0], _NO_INPUTS, _NO_INPUTS, def_addrs, def_words, wrt_addrs,
                                out[0], words, NULL, NULL, 0)
        finally:
            self._keep_end = False
        if rc != 0 or vm.t != 0 or not self._exact_back(ws, nw):
            return 1
        for j in range(k):
            lw[j] = self._end_g[sd[j]] if _in_ranges(self._eff_w, sd[j]) else vm.mem[sd[j]]
        for j in range(1, k):
            # the forward run's end state back, the duals a sweep touched cleared
            _copy_ranges(vm.mem, _ptr(self._end_g), self._eff_w)
            nf = self._end_st.peak_ftop - vm.n_static
            memcpy(vm.mem + vm.n_static, _ptr(self._end_f), nf * sizeof(i64))
            memcpy(vm.stack, _ptr(self._end_s), self._end_st.sp * sizeof(i64))
            ns = min(max(vm.peak_sp, vm.sp) + 1, max(vm.stack_cap, 1))
            _zero_ranges(vm.adj, self._eff_refs)
            vm.adj[sd[j - 1]] = 0.0
            memset(vm.sadj, 0, ns * sizeof(double))
            st = self._end_st
            st.steps = 0
            vm.adj[sd[j]] = 1.0
            try:
                rc = native_run(self.nat_bwd, &st)
            finally:
                self._native_peaks(&st)
            if rc != RVM_NATIVE_DONE:
                self.native_bails += 1
                return 1
            vm.steps = self._end_fwd + st.steps
            vm.t = self._end_fwd - st.steps
            vm.sp = st.sp
            if vm.t != 0 or not self._exact_back(ws, nw):
                return 1
            if _gather_runs(o + j * n, vm.adj, _ptr(runs), runs.shape[0]) != 0:
                return 1
        self._steps_ok = vm.steps
        return 0

    cdef cnp.ndarray _wrt_runs(self, cnp.ndarray wrt_addrs):
        """wrt_addrs as runs of consecutive addresses ((k, 2) int64: first, length), kept for
        the last array asked (the fast calls pass the same one every time)."""
        if self._runs_key is not wrt_addrs:
            a = np.asarray(wrt_addrs, dtype=np.int64)
            cut = np.flatnonzero(np.diff(a) != 1) + 1 if a.shape[0] else np.zeros(0, np.int64)
            first = np.concatenate([[0], cut]).astype(np.int64) if a.shape[0] else cut
            lens = np.diff(np.concatenate([first, [a.shape[0]]]))
            self._runs = np.ascontiguousarray(np.stack([a[first], lens], axis=1),
                                              dtype=np.int64).reshape(-1, 2)
            self._runs_key = wrt_addrs
        return self._runs

    cdef bint _exact_back(self, i64* ws, i64 nw):
        """Every written cell that never rounds is back at its start word (row 0)."""
        cdef i64* r = _ptr(self._eff_exact)
        cdef i64 k, a
        for k in range(self._eff_exact.shape[0]):
            for a in range(r[2 * k], r[2 * k + 1]):
                if ws[a] != self.vm.mem[a]:
                    return False
        return True

    cdef void _native_state(self, NativeState* st) noexcept:
        """The native code's view of the machine at the start of a run (_native_sweeps)."""
        cdef VM* vm = &self.vm
        # first, so that a reset after a bail out clears the whole frame
        vm.peak_frame = max(vm.peak_frame, vm.fn_fsize[vm.main])
        vm.peak_depth = max(vm.peak_depth, 1)
        _row_state(vm, st)

    cdef void _native_peaks(self, NativeState* st) noexcept:
        """The frames and stack the native calls used (dirty after a bail out or a Ctrl-C:
        the next reset clears them)."""
        _row_peaks(&self.vm, st)

    cdef int _native_tangent_sweeps(self, i64 of_addr, i64* ws, i64 nw) except -1:
        """gradient()'s forward run with tangents and its sweep with the adjoint-tangent
        rules by the native code (rvm/native/tangent.py), leaving the machine as the
        interpreter would.  1: the interpreter must run instead (it reports why)."""
        cdef VM* vm = &self.vm
        cdef NativeState st
        cdef i64 n_fwd
        cdef int rc
        self._native_state(&st)
        try:
            rc = native_run(self.nat_fwd_t, &st)
            n_fwd = st.steps
            if rc == RVM_NATIVE_DONE:
                self.last_n = n_fwd
                self._snap_end(ws, nw, of_addr)
                vm.adj[of_addr] = 1.0
                st.steps = 0
                rc = native_run(self.nat_bwd_at, &st)
        finally:
            self._native_peaks(&st)
        if rc != RVM_NATIVE_DONE:
            self.native_bails += 1
            return 1
        vm.steps = n_fwd + st.steps
        vm.t = n_fwd - st.steps
        vm.ad = _AD_ADJ | _AD_TAN
        vm.D = -1
        vm.status = _S_START
        vm.pc = vm.fn_begin[vm.main]
        return 0

    cdef int _native_lane_sweeps(self, i64 of_addr, i64* ws, i64 nw, i64* wa, i64 nwrt,
                                 double* tan_in, double* tan_out, i64 W) except -1:
        """_native_tangent_sweeps over W directions at once (rows of tan_in, (W, nwrt)):
        the lane modes of rvm/native/tangent.py, on lane buffers of LANE_FRAME frame cells
        and LANE_STACK stack slots (a run that needs more gives up: the scalar mode runs
        it).  The rows of tan_out get the W Hessian-vector products.  1: run another way."""
        cdef VM* vm = &self.vm
        cdef NativeState st
        cdef i64 n_fwd, i, c
        cdef int rc
        cdef double x
        if self._lanes is None:
            self.lane_cells = min(vm.n_mem, vm.n_static + LANE_FRAME)
            self.lane_stack = min(max(vm.stack_cap, 1), LANE_STACK)
            self._lanes = (np.zeros(self.lane_cells * LANES), np.zeros(self.lane_cells * LANES),
                           np.zeros(self.lane_stack * LANES), np.zeros(self.lane_stack * LANES))
            self.lv_tan = <double*>cnp.PyArray_DATA(<cnp.ndarray>self._lanes[0])
            self.lv_adjt = <double*>cnp.PyArray_DATA(<cnp.ndarray>self._lanes[1])
            self.lv_stan = <double*>cnp.PyArray_DATA(<cnp.ndarray>self._lanes[2])
            self.lv_sadjt = <double*>cnp.PyArray_DATA(<cnp.ndarray>self._lanes[3])
        if W > LANES or vm.n_static + vm.fn_fsize[vm.main] > self.lane_cells:
            return 1
        # the static cells' lanes (W per cell); every function clears its own frame's lanes
        # as it is entered (ad_frame), so the frames' need nothing here.  No instruction
        # writes a constant cell (Core checks it), nor its tangents: those stay zero while W
        # stays the same (with another W the last run's frames may lie over them)
        memset(self.lv_tan, 0, (vm.const_lo if W == self.lane_w else vm.n_static) * W *
               sizeof(double))
        self.lane_w = W
        memset(self.lv_adjt, 0, vm.n_static * W * sizeof(double))
        memset(self.lv_stan, 0, self.lane_sdirty * sizeof(double))
        memset(self.lv_sadjt, 0, self.lane_sdirty * sizeof(double))
        for c in range(W):
            for i in range(nwrt):
                self.lv_tan[wa[i] * W + c] = tan_in[c * nwrt + i]
        self._native_state(&st)
        st.n_mem = self.lane_cells
        st.stack_cap = self.lane_stack
        st.vtan = self.lv_tan
        st.vadjt = self.lv_adjt
        st.vstan = self.lv_stan
        st.vsadjt = self.lv_sadjt
        st.lanes = W
        try:
            rc = native_run(self.nat_fwd_vt, &st)
            n_fwd = st.steps
            if rc == RVM_NATIVE_DONE:
                self.last_n = n_fwd
                self._snap_end(ws, nw, of_addr)
                vm.adj[of_addr] = 1.0
                st.steps = 0
                rc = native_run(self.nat_bwd_vat, &st)
        finally:
            self._native_peaks(&st)
            self.lane_sdirty = max(self.lane_sdirty, min(st.peak_sp + 1, self.lane_stack) * W)
        if rc != RVM_NATIVE_DONE:
            self.native_bails += 1
            return 1
        vm.steps = n_fwd + st.steps
        vm.t = n_fwd - st.steps
        vm.ad = _AD_ADJ | _AD_TAN
        vm.D = -1
        vm.status = _S_START
        vm.pc = vm.fn_begin[vm.main]
        for c in range(W):
            for i in range(nwrt):
                x = self.lv_adjt[wa[i] * W + c]
                if not isfinite(x):
                    return 1
                tan_out[c * nwrt + i] = x
        return 0

    def tangent_run(self) -> int:
        """The forward run with tangents (rvm.jvp) by the native code, from the start state
        the caller set up (reset, inputs, tangents seeded, set_ad(AD_TAN)): the machine ends
        at the end as the interpreter's run leaves it, with its tangents and released-tangent
        events.  Returns 0, or 1 when the caller must reset and run the interpreter (no native
        code, not at the start, a breakpoint or watch, anything the interpreter traps on)."""
        return self._tangent_run()

    cdef int _tangent_run(self) except -1:
        """tangent_run, as a C call (FlatCall.jvp: no method lookup)."""
        cdef VM* vm = &self.vm
        cdef NativeState st
        cdef int rc
        vm.grad_clean = 0
        if self.nat_fwd_t == NULL or vm.status != _S_START or vm.D != 1 or vm.ad != _AD_TAN \
                or vm.brk != NULL or vm.n_watch != 0 or vm.depth != 0 or vm.sp != 0:
            return 1
        self._native_state(&st)
        try:
            rc = native_run(self.nat_fwd_t, &st)
        finally:
            self._native_peaks(&st)
        if rc != RVM_NATIVE_DONE:
            self.native_bails += 1
            return 1
        self.last_n = vm.steps = st.steps
        vm.t = st.steps
        vm.sp = st.sp
        vm.status = _S_END
        vm.pc = vm.fn_end[vm.main]
        vm.ev_release = st.rel_n
        vm.ev_release_pc = st.rel_pc
        vm.ev_release_max = st.rel_max
        return 0

    cdef int _sweep(self, bint instrumented) except -1:
        """Run to the boundary in the current direction and return the R_* code: a first
        short slice holding the GIL (a small program never pays for releasing it), then
        slices without it, with a check for Ctrl-C between slices."""
        cdef VM* vm = &self.vm
        cdef i64 executed, budget = 1 << 14
        cdef int rc
        vm.cap = <i64>1 << 62
        vm.nest_stop = 0
        while True:
            if budget == 1 << 14:
                if instrumented:
                    rc = vm_run(vm, budget, &executed, <Instrumented*>NULL)
                else:
                    rc = vm_run(vm, budget, &executed, <Plain*>NULL)
            else:
                with nogil:
                    if instrumented:
                        rc = vm_run(vm, budget, &executed, <Instrumented*>NULL)
                    else:
                        rc = vm_run(vm, budget, &executed, <Plain*>NULL)
            if rc == _R_NESTED and vm.nest_stop == _NEST_STOP_SIGNAL:
                return _pending_exception()
            if rc != _R_BUDGET:
                return rc
            PyErr_CheckSignals()
            budget = 1 << 24

    def clear_duals(self) -> None:
        """Zero the duals of the static cells, the frame region and the value stack used
        since the last reset, and the event counters."""
        self._clear_duals()

    cdef void _clear_duals(self) noexcept:
        cdef VM* vm = &self.vm
        cdef i64 used, ns
        if self._duals is not None:
            used = min(vm.n_static + max(vm.peak_frame, vm.ftop - vm.n_static), vm.n_mem)
            ns = min(max(vm.peak_sp, vm.sp) + 1, max(vm.stack_cap, 1))
            memset(vm.tan, 0, used * sizeof(double))
            memset(vm.adj, 0, used * sizeof(double))
            memset(vm.adjt, 0, used * sizeof(double))
            memset(vm.stan, 0, ns * sizeof(double))
            memset(vm.sadj, 0, ns * sizeof(double))
            memset(vm.sadjt, 0, ns * sizeof(double))
        vm.ev_release = vm.ev_nonfinite = 0
        vm.ev_release_max = 0.0
        vm.ev_release_pc = vm.ev_nonfinite_pc = -1

    @property
    def ad_events(self) -> dict:
        """What the differentiation rules noticed since the last clear_duals()."""
        cdef VM* vm = &self.vm
        return dict(released=vm.ev_release, released_max=vm.ev_release_max,
                    released_pc=vm.ev_release_pc, nonfinite=vm.ev_nonfinite,
                    nonfinite_pc=vm.ev_nonfinite_pc)

    def refresh_watch(self) -> None:
        """Take the watched cells' current values as the reference (after a write from
        outside the loop)."""
        cdef i64 i
        for i in range(self.vm.n_watch):
            self.vm.watch_val[i] = self.vm.mem[self.vm.watch_addr[i]]

    def run(self, i64 budget, i64 cap=<i64>1 << 62) -> int:
        """Run up to `budget` instructions in the current direction (a derivative statement
        is one) and at most `cap` counting its nested runs' instructions; returns an R_*
        code.  last_n is the instructions run, last_total what came off the cap (the nested
        ones too).  R_NESTED: it stopped inside a nested run (nest_stop says why); a signal
        handler's exception raised there (Ctrl-C) is raised here."""
        cdef i64 executed = 0
        cdef int rc
        self.vm.cap = cap
        self.vm.grad_clean = 0
        with nogil:
            if self.vm.brk == NULL and self.vm.n_watch == 0 and self.vm.ad == 0:
                rc = vm_run(&self.vm, budget, &executed, <Plain*>NULL)
            else:
                rc = vm_run(&self.vm, budget, &executed, <Instrumented*>NULL)
        self.last_n = executed
        self.last_total = cap - self.vm.cap
        if rc == _R_NESTED and self.vm.nest_stop == _NEST_STOP_SIGNAL:
            _pending_exception()
        return rc

    @property
    def nest_stop(self) -> tuple:
        """(why, pc): why the machine stopped inside the nested run of a derivative statement
        (NEST_STOP_LIMIT, NEST_STOP_SIGNAL, NEST_STOP_TRAP; 0 if it did not since the last
        reset) and the pc of that statement (the outermost one)."""
        return self.vm.nest_stop, self.vm.nest_pc

    def flip(self) -> None:
        """Reverse the direction between two instructions (docs/machine.md)."""
        cdef VM* vm = &self.vm
        vm.trace_ack = 0
        if vm.depth > 0:
            if vm.came:
                vm.pc = vm.code[vm.pc * 6 + 4]
            else:
                vm.pc -= vm.fr_fdir[vm.depth - 1] * vm.D
        vm.D = -vm.D

    def set_breakpoints(self, pcs) -> None:
        """Stop before running an instruction at any of `pcs` (either direction); an empty
        collection clears them.  A run that starts at a breakpoint with `skip_breakpoint()`
        runs that instruction first."""
        cdef cnp.ndarray flags
        pcs = [int(p) for p in pcs]
        if any(not 0 <= p < self.vm.n_code for p in pcs):
            raise IndexError("breakpoint pc out of range")
        if not pcs:
            self.vm.brk = NULL
            self._brk = None
            return
        flags = np.zeros(self.vm.n_code, dtype=np.uint8)
        flags[pcs] = 1
        self._brk = flags
        self.vm.brk = <uint8_t*>cnp.PyArray_DATA(flags)

    def skip_breakpoint(self) -> None:
        """The next run() does not stop at a breakpoint at the current pc (resume from it)."""
        self.vm.brk_skip = 1

    def set_watch(self, addrs) -> None:
        """Stop after any instruction that changes one of the cells at `addrs` (absolute
        addresses into mem); their current values are the reference.  Empty: no watch."""
        cdef cnp.ndarray a, v
        addrs = [int(x) for x in addrs]
        if any(not 0 <= x < self.vm.n_mem for x in addrs):
            raise IndexError("watched address out of range")
        a = np.array(addrs + [0], dtype=np.int64)
        v = self._mem[a]
        self._watch = (a, v)
        self.vm.watch_addr = _ptr(a)
        self.vm.watch_val = _ptr(v)
        self.vm.n_watch = len(addrs)

    @property
    def watch_hit(self) -> tuple:
        """(index into the watched addresses, pc of the instruction that changed it)."""
        return self.vm.watch_hit, self.vm.watch_pc

    def ack_trace(self) -> None:
        """The trace at pc has been reported: the next run() executes it."""
        self.vm.trace_ack = 1

    @property
    def pc(self) -> int:
        return self.vm.pc

    @property
    def came(self) -> bool:
        return bool(self.vm.came)

    @property
    def direction(self) -> int:
        return self.vm.D

    @property
    def t(self) -> int:
        return self.vm.t

    @property
    def status(self) -> int:
        return self.vm.status

    @property
    def depth(self) -> int:
        return self.vm.depth

    @property
    def effective_direction(self) -> int:
        """e = fdir * D of the top frame (D at a boundary)."""
        if self.vm.depth == 0:
            return self.vm.D
        return self.vm.fr_fdir[self.vm.depth - 1] * self.vm.D

    @property
    def sp(self) -> int:
        return self.vm.sp

    @property
    def frame_top(self) -> int:
        return self.vm.ftop

    @property
    def stats(self) -> dict:
        return dict(steps=self.vm.steps, peak_stack=self.vm.peak_sp,
                    peak_frame_cells=self.vm.peak_frame, peak_depth=self.vm.peak_depth)

    @property
    def trap(self) -> tuple:
        """(code, pc, opcode it ran as, effective direction, (w0, w1, w2, w3))."""
        cdef VM* vm = &self.vm
        return (vm.trap, vm.trap_pc, vm.trap_op, vm.trap_e,
                (vm.tv[0], vm.tv[1], vm.tv[2], vm.tv[3]))

    def stack(self) -> np.ndarray:
        """A copy of the value stack, bottom first."""
        cdef cnp.ndarray out = np.empty(self.vm.sp, dtype=np.int64)
        if self.vm.sp:
            memcpy(_ptr(out), self.vm.stack, self.vm.sp * sizeof(i64))
        return out

    def frame(self, i64 level) -> tuple:
        """(func, fp, pp, ret_pc, fdir) of frame `level` (0 = the entry function)."""
        if not 0 <= level < self.vm.depth:
            raise IndexError(level)
        cdef VM* vm = &self.vm
        return (vm.fr_func[level], vm.fr_fp[level], vm.fr_pp[level], vm.fr_ret[level],
                vm.fr_fdir[level])

    def param(self, i64 level, i64 p) -> tuple:
        """(address, length) bound to parameter p of frame `level`."""
        if not 0 <= level < self.vm.depth:
            raise IndexError(level)
        cdef VM* vm = &self.vm
        cdef i64 f = vm.fr_func[level], k
        if not 0 <= p < vm.fn_nparams[f]:
            raise IndexError(p)
        k = vm.fr_pp[level] + p
        return vm.pt_addr[k], vm.pt_len[k]

    def call_binding(self, i64 p) -> tuple:
        """(address, length) that the failed call's argument p was bound to (scratch entries
        above the parameter table's top, valid right after an argument trap)."""
        cdef VM* vm = &self.vm
        if not 0 <= p < vm.pt_cap - vm.ptop:
            raise IndexError(p)
        return vm.pt_addr[vm.ptop + p], vm.pt_len[vm.ptop + p]

    def resolve(self, i64 word, i64 level=-1) -> tuple:
        """Decode an operand word in frame `level` (default: the top frame):
        ("cell", address) | ("len", length) | ("bounds", xtab index, index, length)."""
        cdef VM* vm = &self.vm
        cdef i64* fpm
        cdef i64* pa
        cdef i64* p
        if level < 0:
            level = vm.depth - 1
        # the word may come from anywhere (a debugger): check it like the loop's own operands
        if not 0 <= level < vm.depth:
            if (word & 7) != MODE_G:
                raise IndexError("no frame to decode the operand in")
            problem = self._verifier.cell(-1, word, False)[0]
        else:
            problem = self._verifier.cell(vm.fr_func[level], word, False)[0]
        if problem:
            raise ValueError(f"operand: {problem}")
        if not 0 <= level < vm.depth:
            fpm = pa = vm.mem
        else:
            fpm = vm.mem + vm.fr_fp[level]
            pa = vm.pt_addr + vm.fr_pp[level]
        p = opnd(vm, word, vm.mem, fpm, pa)
        if p == NULL:
            return ("bounds", vm.tv[0], vm.tv[1], vm.tv[2])
        if (word & 7) == MODE_N:
            return ("len", p[0])
        return ("cell", p - vm.mem)


include "_gradfast.pxi"   # gradient fast paths (GradCall, GradFnBase)
include "_runcall.pxi"    # one-shot calls in C: RunCall (rvm.run), HessCall (rvm.hessian)
include "_tanrows.pxi"    # batches of tangents and Hessians without the GIL (rvm.jvp_batch, ...)
