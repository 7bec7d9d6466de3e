# rvm/_core.pyx includes this file: batches (issue 16): many gradient rows on one Core by the
# native code, without the GIL (Core.grad_rows; rvm/ad/engine.py GradFn.batch spreads the rows
# over threads, one Core each).
# (Text included into the one extension module: it shares the core's names.)

cdef void _row_start(VM* vm, i64* image, i64* da, i64* dw, i64 nd, i64* ra, i64* rw, i64 nr,
                     int duals, bint back) noexcept nogil:
    """The state one row of a batch starts from, as Core._gradient makes it: the duals
    cleared (duals 0: none, the machine may have none; 1: the adjoints; 2: the tangent duals
    too), the static image, zero frames, the words dw at da (defaults, shared values) and rw
    at ra (the row's); at the start, or with `back` at the end for a backward run."""
    cdef i64 used = min(vm.n_static + max(vm.peak_frame, vm.ftop - vm.n_static), vm.n_mem)
    cdef i64 n = max(vm.peak_sp, vm.sp) + 1
    if duals >= 1:
        memset(vm.adj, 0, used * sizeof(double))
        memset(vm.sadj, 0, n * sizeof(double))
    if duals >= 2:
        memset(vm.tan, 0, used * sizeof(double))
        memset(vm.adjt, 0, used * sizeof(double))
        memset(vm.stan, 0, n * sizeof(double))
        memset(vm.sadjt, 0, n * sizeof(double))
    used = min(vm.n_static + vm.peak_frame, vm.n_mem)
    memcpy(vm.mem, image, vm.n_static * sizeof(i64))
    memset(vm.mem + vm.n_static, 0, (used - vm.n_static) * sizeof(i64))
    vm.ftop = vm.n_static
    vm.sp = vm.ptop = vm.depth = vm.t = 0
    vm.came = vm.trace_ack = vm.trap = 0
    vm.steps = vm.peak_sp = vm.peak_frame = vm.peak_depth = 0
    vm.status = _S_END if back else _S_START
    vm.D = -1 if back else 1
    vm.pc = vm.fn_end[vm.main] if back else vm.fn_begin[vm.main]
    vm.ad = 0
    vm.grad_clean = 0
    _scatter(vm.mem, da, dw, nd)
    _scatter(vm.mem, ra, rw, nr)
    vm.peak_frame = max(vm.peak_frame, vm.fn_fsize[vm.main])
    vm.peak_depth = max(vm.peak_depth, 1)


cdef void _row_state(VM* vm, NativeState* st) noexcept nogil:
    """The native code's view of the machine at the start of a run (the state _row_start or a
    reset made): its memory, duals, stack and limits, every counter zero."""
    memset(st, 0, sizeof(NativeState))
    st.mem = vm.mem
    st.adj = vm.adj
    st.tan = vm.tan
    st.adjt = vm.adjt
    st.n_mem = vm.n_mem
    st.max_depth = vm.max_depth
    st.pt_cap = vm.pt_cap
    st.peak_ftop = vm.n_static + vm.fn_fsize[vm.main]
    st.peak_depth = 1
    st.stack = vm.stack
    st.sadj = vm.sadj
    st.stan = vm.stan
    st.sadjt = vm.sadjt
    st.stack_cap = vm.stack_cap
    st.peak_sp = vm.peak_sp
    st.rel_pc = -1
    st.budget = 1 << 16
    st.poll = native_poll
    native_nest(vm, st)


cdef inline void _row_peaks(VM* vm, NativeState* st) noexcept nogil:
    vm.peak_frame = max(vm.peak_frame, st.peak_ftop - vm.n_static)
    vm.peak_depth = max(vm.peak_depth, st.peak_depth)
    vm.peak_sp = max(vm.peak_sp, st.peak_sp)


cdef int grad_row(VM* vm, i64* image, native_fn fwd, native_fn bwd, i64 of_addr,
                  i64* da, i64* dw, i64 nd, i64* ra, i64* rw, i64 nr, i64* wa, i64 nwrt,
                  double* g, i64* loss, i64* ws, i64 nw, i64* ex, i64 nex) noexcept nogil:
    """One gradient (Core.gradient's native path) from the start state: the static image, the
    words dw at da (defaults and the inputs all rows share) and rw at ra (this row's inputs);
    g gets the gradient at wa, loss the loss's word at the end of the forward run.  0: done;
    1: the interpreter must run this row (a trap, a path that did not retrace, a non-finite
    gradient); 2: a signal stopped it (its exception is set)."""
    cdef NativeState st
    cdef i64 i, n_fwd
    cdef i64 rc
    _row_start(vm, image, da, dw, nd, ra, rw, nr, 1, False)
    memcpy(ws, vm.mem, nw * sizeof(i64))
    _row_state(vm, &st)
    rc = fwd(&st)
    n_fwd = st.steps
    if rc == RVM_NATIVE_DONE:
        loss[0] = vm.mem[of_addr]
        vm.adj[of_addr] = 1.0
        st.steps = 0
        st.budget = 1 << 16
        rc = bwd(&st)
    _row_peaks(vm, &st)
    if rc == RVM_NATIVE_STOPPED:
        return 2
    if rc != RVM_NATIVE_DONE:
        return 1
    vm.steps = n_fwd + st.steps
    vm.t = n_fwd - st.steps
    vm.ad = _AD_ADJ
    vm.D = -1
    vm.status = _S_START
    vm.pc = vm.fn_begin[vm.main]
    if vm.t != 0:
        return 1
    for i in range(nex):
        if ws[ex[i]] != vm.mem[ex[i]]:
            return 1
    for i in range(nwrt):
        g[i] = vm.adj[wa[i]]
        if not isfinite(g[i]):
            return 1
    return 0


cdef int run_row(VM* vm, i64* image, native_fn f, i64* da, i64* dw, i64 nd, i64* ra, i64* rw,
                 i64 nr, i64* out, i64 nw, bint back) noexcept nogil:
    """One whole run (Core.native_run's) from the start state of grad_row, forward, or with
    `back` from the end state (the same words: the static image, dw at da, rw at ra) backward
    by f, the backward run's native code; out gets the first nw words (the globals) where the
    run ends.  0 done, 1 the interpreter must run the row, 2 a signal stopped it."""
    cdef NativeState st
    cdef i64 rc
    _row_start(vm, image, da, dw, nd, ra, rw, nr, 0, back)
    _row_state(vm, &st)
    rc = f(&st)
    _row_peaks(vm, &st)
    if rc == RVM_NATIVE_STOPPED:
        return 2
    if rc != RVM_NATIVE_DONE:
        return 1
    vm.sp = st.sp
    vm.steps = st.steps
    vm.t = st.nest_steps - st.steps if back else st.steps - st.nest_steps
    vm.status = _S_START if back else _S_END
    vm.pc = vm.fn_begin[vm.main] if back else vm.fn_end[vm.main]
    memcpy(out, vm.mem, nw * sizeof(i64))
    return 0


# lane groups (rvm/native/lanes.py): buffers of BATCH_FRAME frame cells and BATCH_STACK value
# stack slots per lane (a group that needs more gives up: its rows run one by one)
DEF BATCH_FRAME = 1 << 15
DEF BATCH_STACK = 1 << 12


cdef struct LaneGroup:
    i64* mem               # the lanes of every cell (cell c's row j at c * W + j), adjoints,
    double* adj            # value stack and its adjoints
    i64* stack
    double* sadj
    i64* image             # the static image with the defaults, W lanes (lane memory's start)
    i64* ws                # the globals' lanes at a group's start (the retrace check)
    i64 W, cells, scap     # lanes; capacity in cells and stack slots
    i64 dirty, sdirty      # words of mem/adj (stack/sadj) a group may have written


def _aligned(i64 n):
    """n zero words starting at a multiple of 64 bytes: a cell's 8 lanes are one cache line
    (a vector load across two lines costs two)."""
    cdef cnp.ndarray raw = np.zeros(n + 8, dtype=np.int64)
    cdef i64 at = (<i64>cnp.PyArray_DATA(raw)) & 63
    cdef i64 off = ((64 - at) & 63) // 8
    return raw[off:off + n]


cdef void lane_image(LaneGroup* lg, i64* image, i64 n_static, i64* da, i64* dw,
                     i64 nd) noexcept nogil:
    """lg.image: the static image with the shared (default) words dw at da, in every lane."""
    cdef i64 W = lg.W, c, j
    for c in range(n_static):
        for j in range(W):
            lg.image[c * W + j] = image[c]
    for c in range(nd):
        for j in range(W):
            lg.image[da[c] * W + j] = dw[c]


cdef void lane_start(VM* vm, LaneGroup* lg, i64* ra, i64* rw, i64 nr,
                     NativeState* st) noexcept nogil:
    """A group's start, shared by grad_group and run_group: the lane memory as lg.image with
    the W rows' words rw at ra (row after row) and the frames a run before dirtied cleared,
    and the native state st over the lane buffers."""
    cdef i64 W = lg.W, j, k
    cdef i64 ns = vm.n_static * W
    cdef i64* M = lg.mem
    memcpy(M, lg.image, ns * sizeof(i64))
    if lg.dirty > ns:
        memset(M + ns, 0, (lg.dirty - ns) * sizeof(i64))
    for j in range(W):
        for k in range(nr):
            M[ra[k] * W + j] = rw[j * nr + k]
    memset(st, 0, sizeof(NativeState))
    st.mem = M
    st.adj = lg.adj
    st.n_mem = lg.cells
    st.max_depth = vm.max_depth
    st.pt_cap = vm.pt_cap
    st.peak_ftop = vm.n_static + vm.fn_fsize[vm.main]
    st.peak_depth = 1
    st.stack = lg.stack
    st.sadj = lg.sadj
    st.stack_cap = lg.scap
    st.rel_pc = -1
    st.budget = 1 << 16
    st.poll = native_poll


cdef int grad_group(VM* vm, LaneGroup* lg, native_fn fwd, native_fn bwd, i64 of_addr,
                    i64* ra, i64* rw, i64 nr, i64* wa, i64 nwrt, double* g, i64* loss,
                    i64* status, i64 nw, i64* ex, i64 nex) noexcept nogil:
    """The gradients of W rows at once (rw: their words at ra, row after row) by the lane
    code: the lane state as grad_row's start state in each lane, the forward run, the seed,
    the sweep.  0: done (status[j] 1 for a row whose retrace or gradient grad_row would hand
    to the interpreter, g and loss hold the others'); 1: the group gave up (lanes that
    branched apart, a non-uniform index, a trap in some lane, buffers too small): its rows
    must run one by one; 2: a signal stopped it."""
    cdef NativeState st
    cdef i64 W = lg.W, i, j, k, n_fwd, rc, a
    cdef i64 ns = vm.n_static * W
    cdef i64* M = lg.mem
    cdef double* A = lg.adj
    cdef double x
    cdef bint ok
    memset(A, 0, max(lg.dirty, ns) * sizeof(double))
    memset(lg.sadj, 0, lg.sdirty * sizeof(double))
    lane_start(vm, lg, ra, rw, nr, &st)
    for i in range(nex):                # the start words of the cells the retrace checks
        memcpy(lg.ws + ex[i] * W, M + ex[i] * W, W * sizeof(i64))
    rc = fwd(&st)
    n_fwd = st.steps
    if rc == RVM_NATIVE_DONE:
        for j in range(W):
            loss[j] = M[of_addr * W + j]
            A[of_addr * W + j] = 1.0
        st.steps = 0
        st.budget = 1 << 16
        rc = bwd(&st)
    lg.dirty = max(lg.dirty, min(st.peak_ftop, lg.cells) * W)
    lg.sdirty = max(lg.sdirty, min(st.peak_sp + 1, lg.scap) * W)
    if rc == RVM_NATIVE_STOPPED:
        return 2
    if rc != RVM_NATIVE_DONE or n_fwd - st.steps != 0:
        return 1
    for j in range(W):
        ok = True
        for i in range(nex):
            a = ex[i] * W + j
            if lg.ws[a] != M[a]:
                ok = False
        for i in range(nwrt):
            x = A[wa[i] * W + j]
            g[j * nwrt + i] = x
            if not isfinite(x):
                ok = False
        status[j] = 0 if ok else 1
    return 0


cdef int run_group(VM* vm, LaneGroup* lg, native_fn f, i64* ra, i64* rw, i64 nr, i64* out,
                   i64 nw) noexcept nogil:
    """W whole runs at once (rw: their words at ra, row after row) by the lane code f (the
    forward or backward run of lanes.generate(run=...)): the lane state as run_row's start
    state in each lane (lg.image: the static image with the shared words dw at da), the
    run; out gets each row's first nw words (the globals) where the runs end, row after row.
    0: done; 1: the group gave up (lanes that branched apart, a non-uniform index, a trap in
    some lane, buffers too small): its rows must run one by one; 2: a signal stopped it."""
    cdef NativeState st
    cdef i64 W = lg.W, j, k, rc
    cdef i64* M = lg.mem
    cdef i64* o
    lane_start(vm, lg, ra, rw, nr, &st)
    rc = f(&st)
    lg.dirty = max(lg.dirty, min(st.peak_ftop, lg.cells) * W)
    if rc == RVM_NATIVE_STOPPED:
        return 2
    if rc != RVM_NATIVE_DONE:
        return 1
    for j in range(W):
        o = out + j * nw
        for k in range(nw):
            o[k] = M[k * W + j]
    return 0


cdef class LaneRows:
    """The gradient of many rows W at a time (rvm/native/lanes.py's library: the addresses of
    rvm_native_forward_w and rvm_native_backward_wa in the loaded `lib`, kept alive here),
    on lane buffers of its own: one per thread of a batch (GradFn.batch).  With backward 0,
    the whole runs of rvm.run_batch instead (`forward` is the run library's
    rvm_native_run_w, forward or backward: run_rows), and no adjoint buffers."""
    cdef object lib
    cdef native_fn fwd, bwd
    cdef readonly i64 width
    cdef readonly i64 groups               # groups the lanes ran, and groups they gave up
    cdef readonly i64 bails
    cdef object _bufs
    cdef LaneGroup lg

    def __init__(self, lib, size_t forward, size_t backward, i64 width):
        if forward == 0 or width < 1:
            raise ValueError("LaneRows: no lane code")
        self.lib, self.width = lib, width
        self.fwd, self.bwd = <native_fn>forward, <native_fn>backward
        memset(&self.lg, 0, sizeof(LaneGroup))
        self.lg.W = width

    cdef void _alloc(self, VM* vm):
        cdef i64 W = self.width
        cdef cnp.ndarray a
        if self._bufs is not None:
            return
        cdef bint duals = self.bwd != NULL
        self.lg.cells = min(vm.n_mem, vm.n_static + BATCH_FRAME)
        self.lg.scap = min(max(vm.stack_cap, 1), BATCH_STACK)
        self._bufs = [_aligned(self.lg.cells * W),
                      _aligned(self.lg.cells * W if duals else W),
                      _aligned(self.lg.scap * W), _aligned(self.lg.scap * W if duals else W),
                      _aligned(max(vm.n_static, 1) * W), _aligned(max(vm.const_lo, 1) * W)]
        a = self._bufs[0]; self.lg.mem = _ptr(a)
        a = self._bufs[1]; self.lg.adj = <double*>cnp.PyArray_DATA(a)
        a = self._bufs[2]; self.lg.stack = _ptr(a)
        a = self._bufs[3]; self.lg.sadj = <double*>cnp.PyArray_DATA(a)
        a = self._bufs[4]; self.lg.image = _ptr(a)
        a = self._bufs[5]; self.lg.ws = _ptr(a)
        self.lg.dirty = self.lg.sdirty = 0          # (np.zeros: clean)

    def grad_rows(self, Core core, i64 of_addr, cnp.ndarray def_addrs, cnp.ndarray def_words,
                  cnp.ndarray row_addrs, cnp.ndarray rows, cnp.ndarray wrt_addrs,
                  cnp.ndarray out, cnp.ndarray loss, cnp.ndarray status,
                  cnp.ndarray exact) -> bool:
        """Core.grad_rows (the same arguments and results, bit for bit), W rows at a time by
        the lane code; a group that gives up, and the rows after the last whole group, run
        one by one by core's scalar native code.  False (nothing run) as Core.grad_rows."""
        cdef VM* vm = &core.vm
        cdef i64 B = rows.shape[0], b, b0, c, j, nr = row_addrs.shape[0]
        cdef i64 nwrt = wrt_addrs.shape[0], W = self.width
        cdef i64 nw = vm.const_lo
        cdef int rc = 0
        cdef cnp.ndarray ws = np.empty(nw + 1, dtype=np.int64)
        cdef i64* rp = _ptr(rows)
        cdef double* op = <double*>cnp.PyArray_DATA(out)
        cdef i64* lp = _ptr(loss)
        cdef i64* sp = _ptr(status)
        cdef native_fn fwd = core.nat_fwd, bwd = core.nat_bwd
        cdef native_fn lfwd = self.fwd, lbwd = self.bwd
        cdef LaneGroup* lg = &self.lg
        cdef i64* image
        cdef i64* da
        cdef i64* dw
        cdef i64* ra
        cdef i64* wa
        cdef i64* wsp
        cdef i64* ex
        cdef i64 nd = def_addrs.shape[0], nex = exact.shape[0]
        cdef bint lanes
        if lbwd == NULL:
            raise ValueError("grad_rows: a run library (no sweep)")
        if fwd == NULL or vm.brk != NULL or vm.n_watch != 0:
            return False
        if not (rows.flags.c_contiguous and out.flags.c_contiguous and rows.ndim == 2 and
                rows.shape[1] == nr and out.shape[0] == B and out.shape[1] == nwrt and
                loss.shape[0] == B and status.shape[0] == B and rows.dtype == np.int64 and
                out.dtype == np.float64 and loss.dtype == np.int64 and
                status.dtype == np.int64 and def_addrs.dtype == np.int64 and
                def_words.dtype == np.int64 and row_addrs.dtype == np.int64 and
                wrt_addrs.dtype == np.int64 and exact.dtype == np.int64):
            raise ValueError("grad_rows: arrays of the wrong shape or type")
        if core._duals is None:
            core.set_ad(_AD_ADJ)
        self._alloc(vm)
        image, da, dw, ra = _ptr(core.static_image), _ptr(def_addrs), _ptr(def_words), \
            _ptr(row_addrs)
        wa, wsp, ex = _ptr(wrt_addrs), _ptr(ws), _ptr(exact)
        lanes = vm.n_static + vm.fn_fsize[vm.main] <= lg.cells
        with nogil:
            if lanes:                       # the start image with the defaults, in W lanes
                lane_image(lg, image, vm.n_static, da, dw, nd)
            b0 = 0
            while b0 < B:
                if lanes and b0 + W <= B:
                    rc = grad_group(vm, lg, lfwd, lbwd, of_addr, ra, rp + b0 * nr, nr, wa,
                                    nwrt, op + b0 * nwrt, lp + b0, sp + b0, nw, ex, nex)
                    if rc == 2:
                        break
                    if rc == 0:
                        self.groups += 1
                        b0 += W
                        continue
                    self.bails += 1
                for b in range(b0, min(b0 + W, B)):
                    rc = grad_row(vm, image, fwd, bwd, of_addr, da, dw, nd, ra, rp + b * nr, nr,
                                  wa, nwrt, op + b * nwrt, lp + b, wsp, nw, ex, nex)
                    if rc == 2:
                        break
                    sp[b] = rc
                if rc == 2:
                    break
                b0 += W
        if rc == 2:
            PyErr_CheckSignals()
            raise KeyboardInterrupt
        return True

    def run_rows(self, Core core, cnp.ndarray def_addrs, cnp.ndarray def_words,
                 cnp.ndarray row_addrs, cnp.ndarray rows, cnp.ndarray out,
                 cnp.ndarray status, bint reverse=False) -> bool:
        """Core.run_rows (the same arguments and results, bit for bit), W rows at a time by
        the run library (its direction must be `reverse`'s); a group that gives up, and the
        rows after the last whole group, run one by one by core's scalar native code.  False
        (nothing run) as Core.run_rows."""
        cdef VM* vm = &core.vm
        cdef i64 B = rows.shape[0], b, b0, c, j, nr = row_addrs.shape[0], nw = vm.const_lo
        cdef i64 W = self.width
        cdef int rc = 0
        cdef native_fn fwd = core.run_bwd if reverse else core.run_fwd
        cdef native_fn lf = self.fwd
        cdef LaneGroup* lg = &self.lg
        cdef i64* image
        cdef i64* da
        cdef i64* dw
        cdef i64* ra
        cdef i64* rp
        cdef i64* op
        cdef i64* sp
        cdef i64 nd = def_addrs.shape[0]
        cdef bint lanes
        if self.bwd != NULL:
            raise ValueError("run_rows: a gradient library (not a run library)")
        if fwd == NULL or vm.brk != NULL or vm.n_watch != 0:
            return False
        if not (rows.flags.c_contiguous and out.flags.c_contiguous and rows.ndim == 2 and
                rows.shape[1] == nr and out.shape[0] == B and out.shape[1] == nw and
                status.shape[0] == B and rows.dtype == np.int64 and out.dtype == np.int64
                and status.dtype == np.int64 and def_addrs.dtype == np.int64 and
                def_words.dtype == np.int64 and row_addrs.dtype == np.int64):
            raise ValueError("run_rows: arrays of the wrong shape or type")
        self._alloc(vm)
        image, da, dw, ra = _ptr(core.static_image), _ptr(def_addrs), _ptr(def_words), \
            _ptr(row_addrs)
        rp, op, sp = _ptr(rows), _ptr(out), _ptr(status)
        lanes = vm.n_static + vm.fn_fsize[vm.main] <= lg.cells
        with nogil:
            if lanes:                       # the start image with the shared words, W lanes
                lane_image(lg, image, vm.n_static, da, dw, nd)
            b0 = 0
            while b0 < B:
                if lanes and b0 + W <= B:
                    rc = run_group(vm, lg, lf, ra, rp + b0 * nr, nr, op + b0 * nw, nw)
                    if rc == 2:
                        break
                    if rc == 0:
                        for b in range(b0, b0 + W):
                            sp[b] = 0
                        self.groups += 1
                        b0 += W
                        continue
                    self.bails += 1
                for b in range(b0, min(b0 + W, B)):
                    rc = run_row(vm, image, fwd, da, dw, nd, ra, rp + b * nr, nr, op + b * nw,
                                 nw, reverse)
                    if rc == 2:
                        break
                    sp[b] = rc
                if rc == 2:
                    break
                b0 += W
        if rc == 2:
            PyErr_CheckSignals()
            raise KeyboardInterrupt
        return True


cdef dict _NO_INPUTS = {}


cdef class FlatCall:
    """Core.gradient with the wrt cells' values taken from a float64 vector: call(x, out) ->
    (loss, gradient vector), or None when the general path must run.  The fast path of
    GradFn.flat (rvm/ad/engine.py builds it, for float wrt cells and a float or fixed loss):
    x's words go after the defaults in the start state's words, so the call costs no dict."""
    cdef Core core
    cdef i64 of_addr, n, nd, F
    cdef bint of_float
    cdef cnp.ndarray addrs, words_in, wrt_addrs, g, words, exact
    cdef cnp.ndarray eye, rows            # the Hessian's seeds and rows (made on first use)

    def __init__(self, Core core, i64 of_addr, bint of_float, cnp.ndarray def_addrs,
                 cnp.ndarray def_words, cnp.ndarray wrt_addrs, cnp.ndarray words,
                 cnp.ndarray exact):
        self.core, self.of_addr, self.of_float = core, of_addr, of_float
        self.F = core.program.fraction_bits
        self.n = wrt_addrs.shape[0]
        self.nd = def_addrs.shape[0]
        self.addrs = np.ascontiguousarray(np.concatenate([def_addrs, wrt_addrs]), dtype=np.int64)
        self.words_in = np.zeros(self.nd + self.n, dtype=np.int64)
        self.words_in[:self.nd] = def_words
        self.wrt_addrs = np.ascontiguousarray(wrt_addrs, dtype=np.int64)
        self.g = np.zeros(self.n)
        self.words, self.exact = words, exact

    def __call__(self, x, out=None):
        return self.call(x, out)

    cdef int _load_x(self, object x, str what) except -1:
        """x (a vector of the n wrt cells' values) into the start state's words."""
        cdef cnp.ndarray xa
        if _f64(x):
            xa = <cnp.ndarray>x
        else:
            xa = np.ascontiguousarray(x, dtype=np.float64)
            if xa.ndim != 1:
                raise ValueError(f"{what}: x must be a vector of {self.n} values, got "
                                 f"{xa.ndim} dimensions")
        if xa.shape[0] != self.n:
            raise ValueError(f"{what}: x must have {self.n} values (the wrt cells), got "
                             f"{xa.shape[0]}")
        memcpy(_ptr(self.words_in) + self.nd, cnp.PyArray_DATA(xa), self.n * sizeof(double))
        return 0

    cdef cnp.ndarray _load_v(self, object v, str what):
        """v (a vector of the n wrt cells' tangents) as a contiguous float64 vector: v itself
        when it is one in the machine's byte order (_f64: no conversion call), else
        np.ascontiguousarray's copy."""
        cdef cnp.ndarray va
        if _f64(v):
            va = <cnp.ndarray>v
        else:
            va = np.ascontiguousarray(v, dtype=np.float64)
        if va.ndim != 1 or va.shape[0] != self.n:
            raise ValueError(f"{what}: v must be a vector of {self.n} values (the wrt "
                             f"cells), got shape {np.shape(v)}")
        return va

    cdef bint _retraced(self):
        """After a pass: the way back retraced the run (step count 0, every cell that never
        rounds restored); else the general path runs and raises PathDivergence."""
        cdef i64* ws = _ptr(self.words)
        cdef i64* ex = _ptr(self.exact)
        cdef i64 nw = self.words.shape[1], k
        if self.core.vm.t != 0:
            return False
        for k in range(self.exact.shape[0]):
            if ws[ex[k]] != ws[2 * nw + ex[k]]:
                return False
        return True

    cdef double _loss(self):
        cdef i64 w = _ptr(self.words)[self.words.shape[1] + self.of_addr]
        return rvm_w2f(w) if self.of_float else ldexp(<double>w, -self.F)

    cdef cnp.ndarray _vec_out(self, object out, str what, i64 n):
        cdef cnp.npy_intp dn = n
        cdef cnp.ndarray oa
        if out is None:
            return cnp.PyArray_EMPTY(1, &dn, cnp.NPY_DOUBLE, 0)
        if not (_f64_out(out, 1) and (<cnp.ndarray>out).shape[0] == n):
            raise ValueError(f"{what}: out must be a contiguous float64 vector of {n} "
                             "(writeable, in this machine's byte order)")
        return <cnp.ndarray>out

    def hvp(self, x, v, out=None):
        """(loss, H v) at x: one pass with v as the tangent of the wrt cells (v and H v in
        the wrt cells' order, H v into `out` if given); None for the general path (no
        native tangent modes on the core, a trap, a path that did not retrace, a
        non-finite value)."""
        return self._hvp(x, v, out)

    cdef object _hvp(self, object x, object v, object out):
        cdef cnp.ndarray va, oa
        if self.core.nat_fwd_t == NULL:
            return None
        self._load_x(x, "hvp_flat")
        va = self._load_v(v, "hvp_flat")
        oa = self._vec_out(out, "hvp_flat", self.n)
        if self.core._tangent_rows(self.of_addr, _NO_INPUTS, _NO_INPUTS, self.addrs,
                                   self.words_in, self.wrt_addrs, self.g, self.words,
                                   <double*>cnp.PyArray_DATA(va),
                                   <double*>cnp.PyArray_DATA(oa), 1) != 0 or \
                not self._retraced():
            return None
        return self._loss(), oa

    def hessian(self, x, out=None):
        """(loss, H) at x, H (n, n) over the wrt cells in their order (into `out`, a
        C-contiguous float64 (n, n) array, if given): the passes of rvm.hessian (the identity's
        rows as tangents, the lane modes many at once) in one core call; None for the
        general path, as hvp."""
        return self._hessian(x, out)

    cdef object _hessian(self, object x, object out):
        cdef cnp.npy_intp dims[2]
        cdef cnp.ndarray oa
        cdef double* src
        cdef double* dst
        cdef i64 i, j, n = self.n
        if self.core.nat_fwd_t == NULL:
            return None
        self._load_x(x, "hessian_flat")
        if out is None:
            dims[0] = dims[1] = n
            oa = PyArray_EMPTY(2, dims, cnp.NPY_DOUBLE, 0)
        elif _f64_out(out, 2) and (<cnp.ndarray>out).shape[0] == n and \
                (<cnp.ndarray>out).shape[1] == n:
            oa = <cnp.ndarray>out
        else:
            raise ValueError(f"hessian_flat: out must be a C-contiguous float64 array of "
                             f"shape ({n}, {n}) (writeable, in this machine's byte order)")
        if self.eye is None:
            self.eye = np.eye(n)
            self.rows = np.zeros((n, n))
        if self.core._tangent_rows(self.of_addr, _NO_INPUTS, _NO_INPUTS, self.addrs,
                                   self.words_in, self.wrt_addrs, self.g, self.words,
                                   <double*>cnp.PyArray_DATA(self.eye),
                                   <double*>cnp.PyArray_DATA(self.rows), n) != 0 or \
                not self._retraced():
            return None
        src = <double*>cnp.PyArray_DATA(self.rows)
        dst = <double*>cnp.PyArray_DATA(oa)
        for i in range(n):                  # the transpose of the rows, as rvm.hessian
            for j in range(n):
                dst[i * n + j] = src[j * n + i]
        return self._loss(), oa

    def jvp(self, x, v):
        """(loss, the loss's tangent) at x for the tangent v of the wrt cells: one native
        forward run with tangents, as rvm.jvp; None for the general path (no native tangent
        modes, a trap, a tangent released nonzero, a non-finite tangent)."""
        return self._jvp(x, v)

    cdef object _jvp(self, object x, object v):
        cdef Core core = self.core
        cdef VM* vm = &core.vm
        cdef cnp.ndarray va
        cdef i64 i
        cdef i64* wa
        cdef double* vd
        cdef double t
        if core.nat_fwd_t == NULL or core._duals is None or vm.brk != NULL or \
                vm.n_watch != 0:
            return None
        self._load_x(x, "jvp_flat")
        va = self._load_v(v, "jvp_flat")
        vm.ad = _AD_TAN
        core._reset(False)                  # (the duals too)
        _scatter(vm.mem, _ptr(self.addrs), _ptr(self.words_in), self.addrs.shape[0])
        wa, vd = _ptr(self.wrt_addrs), <double*>cnp.PyArray_DATA(va)
        for i in range(self.n):
            vm.tan[wa[i]] = vd[i]
        if core._tangent_run() != 0 or vm.ev_release != 0:
            return None
        t = vm.tan[self.of_addr]
        if not isfinite(t):
            return None
        i = vm.mem[self.of_addr]
        return (rvm_w2f(i) if self.of_float else ldexp(<double>i, -self.F)), t

    cdef object call(self, object x, object out):
        cdef cnp.ndarray oa
        self._load_x(x, "flat")
        oa = self._vec_out(out, "flat", self.n)         # the gradient goes straight there
        if self.core._gradient(self.of_addr, _NO_INPUTS, _NO_INPUTS, self.addrs, self.words_in,
                               self.wrt_addrs, oa, self.words, NULL, NULL, 0) != 0 or \
                not self._retraced():
            return None
        return self._loss(), oa
