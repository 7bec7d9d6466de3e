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
    vm.t = -st.steps if back else st.steps
    vm.status = _S_START if back else _S_END
    vm.pc = vm.fn_begin[vm.main] if back else vm.fn_end[vm.main]
    memcpy(out, vm.mem, nw * sizeof(i64))
    return 0


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
        if type(x) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_DOUBLE and \
                (<cnp.ndarray>x).ndim == 1 and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x):
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
        if not (type(out) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>out) ==
                cnp.NPY_DOUBLE and (<cnp.ndarray>out).ndim == 1 and
                (<cnp.ndarray>out).shape[0] == n and
                cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>out)):
            raise ValueError(f"{what}: out must be a contiguous float64 vector of {n}")
        return <cnp.ndarray>out

    def hvp(self, x, v, out=None):
        """(loss, H v) at x: one pass with v as the tangent of the wrt cells (v and H v in
        the wrt cells' order, H v into `out` if given); None for the general path (no
        native tangent modes on the core, a trap, a path that did not retrace, a
        non-finite value)."""
        cdef cnp.ndarray va, oa
        if self.core.nat_fwd_t == NULL:
            return None
        self._load_x(x, "hvp_flat")
        va = np.ascontiguousarray(v, dtype=np.float64)
        if va.ndim != 1 or va.shape[0] != self.n:
            raise ValueError(f"hvp_flat: v must be a vector of {self.n} values (the wrt "
                             f"cells), got shape {np.shape(v)}")
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
        elif type(out) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>out) == \
                cnp.NPY_DOUBLE and (<cnp.ndarray>out).ndim == 2 and \
                (<cnp.ndarray>out).shape[0] == n and (<cnp.ndarray>out).shape[1] == n and \
                cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>out):
            oa = <cnp.ndarray>out
        else:
            raise ValueError(f"hessian_flat: out must be a C-contiguous float64 array of "
                             f"shape ({n}, {n})")
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
        va = np.ascontiguousarray(v, dtype=np.float64)
        if va.ndim != 1 or va.shape[0] != self.n:
            raise ValueError(f"jvp_flat: v must be a vector of {self.n} values (the wrt "
                             f"cells), got shape {np.shape(v)}")
        vm.ad = _AD_TAN
        core._reset(False)                  # (the duals too)
        _scatter(vm.mem, _ptr(self.addrs), _ptr(self.words_in), self.addrs.shape[0])
        wa, vd = _ptr(self.wrt_addrs), <double*>cnp.PyArray_DATA(va)
        for i in range(self.n):
            vm.tan[wa[i]] = vd[i]
        if core.tangent_run() != 0 or vm.ev_release != 0:
            return None
        t = vm.tan[self.of_addr]
        if not isfinite(t):
            return None
        i = vm.mem[self.of_addr]
        return (rvm_w2f(i) if self.of_float else ldexp(<double>i, -self.F)), t

    cdef object call(self, object x, object out):
        cdef cnp.ndarray oa
        self._load_x(x, "flat")
        if self.core._gradient(self.of_addr, _NO_INPUTS, _NO_INPUTS, self.addrs, self.words_in,
                               self.wrt_addrs, self.g, self.words, NULL, NULL, 0) != 0 or \
                not self._retraced():
            return None
        oa = self._vec_out(out, "flat", self.n)
        memcpy(cnp.PyArray_DATA(oa), cnp.PyArray_DATA(self.g), self.n * sizeof(double))
        return self._loss(), oa
