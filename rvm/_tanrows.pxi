# rvm/_core.pyx includes this file: batches of tangents and Hessians (issue 16: rvm.jvp_batch,
# rvm.hessian_batch; rvm/ad/batches.py spreads the rows over threads, one Core each).  The
# rows run the tangent library's native code (rvm/native/tangent.py) without the GIL, as
# grad_row runs the gradient's, from the same row start (_row_start, _row_state: _batch.pxi).
# (Text included into the one extension module: it shares the core's names.)

cdef int jvp_row(VM* vm, i64* image, native_fn fwd_t, i64* da, i64* dw, i64 nd, i64* ra,
                 i64* rw, i64 nr, i64* sa, double* sv, i64 ns, i64* oa, double* out,
                 i64 no) noexcept nogil:
    """One forward run with tangents (JvpCall's) from the row's start state, the tangents sv
    seeded at the cells sa; out gets the tangents of the cells oa.  0: done; 1: the
    interpreter must run this row (a trap, a tangent released nonzero, a non-finite tangent);
    2: a signal stopped it."""
    cdef NativeState st
    cdef i64 i
    cdef i64 rc
    _static_duals(vm, False, True, False)       # the forward run reads no other dual
    _row_start(vm, image, da, dw, nd, ra, rw, nr, 0, False)
    for i in range(ns):
        vm.tan[sa[i]] = sv[i]
    vm.ad = _AD_TAN
    _row_state(vm, &st)
    rc = fwd_t(&st)
    _row_peaks(vm, &st)
    if rc == RVM_NATIVE_STOPPED:
        return 2
    if rc != RVM_NATIVE_DONE or st.rel_n != 0:
        return 1
    vm.sp = st.sp
    vm.steps = vm.t = st.steps
    vm.status = _S_END
    vm.pc = vm.fn_end[vm.main]
    for i in range(no):
        out[i] = vm.tan[oa[i]]
        if not isfinite(out[i]):
            return 1
    return 0


cdef struct LaneBufs:
    double* tan            # lane tangents, `cells` x LANES, and of the adjoints; the stack's
    double* adjt
    double* stan
    double* sadjt
    i64 cells, stack       # their capacity in cells and stack slots
    i64 sdirty             # doubles of the stack's a lane run may have written
    i64 w                  # the lanes of the last lane run (0: none yet)


cdef int _hess_check(VM* vm, NativeState* st, i64 n_fwd, i64* ws, i64* ex, i64 nex,
                     i64* wa, i64 n) noexcept nogil:
    """After a pass's sweep back: 0 when it came back to the start (the path retraced and the
    cells that must come back exactly did) with a finite gradient, else 1."""
    cdef i64 i
    if n_fwd - st.steps != 0:
        return 1
    for i in range(nex):
        if ws[ex[i]] != vm.mem[ex[i]]:
            return 1
    for i in range(n):
        if not isfinite(vm.adj[wa[i]]):
            return 1
    return 0


cdef int hess_row(VM* vm, i64* image, native_fn fwd_t, native_fn bwd_at, native_fn fwd_vt,
                  native_fn bwd_vat, LaneBufs* lb, i64 of_addr, i64* da, i64* dw, i64 nd,
                  i64* ra, i64* rw, i64 nr, i64* wa, i64 n, double* h, i64* ws, i64 nw,
                  i64* ex, i64 nex) noexcept nogil:
    """The n x n Hessian of the cell of_addr over the cells wa (HessCall's passes) for one
    row: h[i * n + j] = d2 of / d wa[i] d wa[j].  Directions go LANES at a time through the
    lane modes where they are there (one at a time otherwise, or when a lane pass gives up).
    0: done; 1: the interpreter must run this row; 2: a signal stopped it."""
    cdef NativeState st
    cdef i64 k = 0, w, c, i, j, n_fwd
    cdef i64 rc
    cdef double x
    cdef bint lanes
    while k < n:
        w = min(n - k, LANES)
        lanes = w > 1 and fwd_vt != NULL and \
            vm.n_static + vm.fn_fsize[vm.main] <= lb.cells
        if lanes:
            # the static cells' duals and lanes only, as Core._native_lane_sweeps clears them
            _static_duals(vm, True, False, False)
            _row_start(vm, image, da, dw, nd, ra, rw, nr, 0, False)
            memcpy(ws, vm.mem, nw * sizeof(i64))
            memset(lb.tan, 0, (vm.const_lo if w == lb.w else vm.n_static) * w * sizeof(double))
            memset(lb.adjt, 0, vm.n_static * w * sizeof(double))
            memset(lb.stan, 0, lb.sdirty * sizeof(double))
            memset(lb.sadjt, 0, lb.sdirty * sizeof(double))
            lb.w = w
            for c in range(w):
                lb.tan[wa[k + c] * w + c] = 1.0
            _row_state(vm, &st)
            st.n_mem = lb.cells
            st.stack_cap = lb.stack
            st.vtan = lb.tan
            st.vadjt = lb.adjt
            st.vstan = lb.stan
            st.vsadjt = lb.sadjt
            st.lanes = w
            rc = fwd_vt(&st)
            n_fwd = st.steps
            if rc == RVM_NATIVE_DONE:
                vm.adj[of_addr] = 1.0
                st.steps = 0
                st.budget = 1 << 16
                rc = bwd_vat(&st)
            _row_peaks(vm, &st)
            lb.sdirty = max(lb.sdirty, min(st.peak_sp + 1, lb.stack) * w)
            if rc == RVM_NATIVE_STOPPED:
                return 2
            if rc == RVM_NATIVE_DONE and _hess_check(vm, &st, n_fwd, ws, ex, nex, wa, n) == 0:
                for c in range(w):
                    for i in range(n):
                        x = lb.adjt[wa[i] * w + c]
                        if not isfinite(x):
                            return 1
                        h[i * n + k + c] = x
                k += w
                continue
        for j in range(k, k + w):           # one direction at a time (the scalar modes)
            _static_duals(vm, True, True, True)
            _row_start(vm, image, da, dw, nd, ra, rw, nr, 0, False)
            memcpy(ws, vm.mem, nw * sizeof(i64))
            vm.tan[wa[j]] = 1.0
            _row_state(vm, &st)
            rc = fwd_t(&st)
            n_fwd = st.steps
            if rc == RVM_NATIVE_DONE:
                vm.adj[of_addr] = 1.0
                st.steps = 0
                st.budget = 1 << 16
                rc = bwd_at(&st)
            _row_peaks(vm, &st)
            if rc == RVM_NATIVE_STOPPED:
                return 2
            if rc != RVM_NATIVE_DONE or _hess_check(vm, &st, n_fwd, ws, ex, nex, wa, n) != 0:
                return 1
            for i in range(n):
                x = vm.adjt[wa[i]]
                if not isfinite(x):
                    return 1
                h[i * n + j] = x
        k += w
    return 0


def _rows_ok(str what, list arrays) -> None:
    for a, dtype, ndim in arrays:
        if not (isinstance(a, np.ndarray) and a.dtype == dtype and a.ndim == ndim and
                a.flags.c_contiguous):
            raise ValueError(f"{what}: arrays of the wrong shape or type")


def jvp_rows(Core core, cnp.ndarray def_addrs, cnp.ndarray def_words, cnp.ndarray row_addrs,
             cnp.ndarray rows, cnp.ndarray seed_addrs, cnp.ndarray seeds,
             cnp.ndarray out_addrs, cnp.ndarray out, cnp.ndarray status) -> bool:
    """Forward runs with tangents of many rows by the tangent library's native code, the GIL
    released: row b starts as in Core.grad_rows (rows[b] at row_addrs), its tangents seeds[b]
    (float64 (B, ns)) at seed_addrs; out[b] (float64 (B, no)) gets the tangents of the cells
    out_addrs, status[b] 0, or 1 when the interpreter must run that row (it reports why).
    False (nothing run) without the native tangent modes or with a breakpoint or watch set.
    A signal's exception (Ctrl-C) is raised."""
    cdef VM* vm = &core.vm
    cdef i64 B = rows.shape[0], b, nr = row_addrs.shape[0], ns = seed_addrs.shape[0]
    cdef i64 no = out_addrs.shape[0], nd = def_addrs.shape[0]
    cdef int rc = 0
    cdef native_fn fwd_t = core.nat_fwd_t
    if fwd_t == NULL or vm.brk != NULL or vm.n_watch != 0:
        return False
    _rows_ok("jvp_rows", [(def_addrs, np.int64, 1), (def_words, np.int64, 1),
                          (row_addrs, np.int64, 1), (rows, np.int64, 2),
                          (seed_addrs, np.int64, 1), (seeds, np.float64, 2),
                          (out_addrs, np.int64, 1), (out, np.float64, 2),
                          (status, np.int64, 1)])
    if rows.shape[1] != nr or seeds.shape[0] != B or seeds.shape[1] != ns or \
            out.shape[0] != B or out.shape[1] != no or status.shape[0] != B:
        raise ValueError("jvp_rows: arrays of the wrong shape or type")
    if core._duals is None:
        core.set_ad(_AD_TAN)
    cdef i64* image = _ptr(core.static_image)
    cdef i64* da = _ptr(def_addrs)
    cdef i64* dw = _ptr(def_words)
    cdef i64* ra = _ptr(row_addrs)
    cdef i64* rp = _ptr(rows)
    cdef i64* sa = _ptr(seed_addrs)
    cdef double* sv = <double*>cnp.PyArray_DATA(seeds)
    cdef i64* oa = _ptr(out_addrs)
    cdef double* op = <double*>cnp.PyArray_DATA(out)
    cdef i64* sp = _ptr(status)
    with nogil:
        for b in range(B):
            rc = jvp_row(vm, image, fwd_t, da, dw, nd, ra, rp + b * nr, nr, sa, sv + b * ns, ns,
                         oa, op + b * no, no)
            if rc == 2:
                break
            sp[b] = rc
    if rc == 2:
        PyErr_CheckSignals()
        raise KeyboardInterrupt
    return True


def hessian_rows(Core core, i64 of_addr, cnp.ndarray def_addrs, cnp.ndarray def_words,
                 cnp.ndarray row_addrs, cnp.ndarray rows, cnp.ndarray wrt_addrs,
                 cnp.ndarray out, cnp.ndarray status, cnp.ndarray exact) -> bool:
    """Full Hessians of many rows by the tangent library's native code, the GIL released:
    row b starts as in Core.grad_rows; out[b] (float64 (B, n, n)) gets the Hessian of the
    cell of_addr over the n cells wrt_addrs, status[b] 0 or 1 (the interpreter must run the
    row).  `exact`: addresses whose words must come back exactly (Core.gradient's check).
    False (nothing run) without the native tangent modes or with a breakpoint or watch set."""
    cdef VM* vm = &core.vm
    cdef i64 B = rows.shape[0], b, nr = row_addrs.shape[0], n = wrt_addrs.shape[0]
    cdef i64 nd = def_addrs.shape[0], nex = exact.shape[0], nw = vm.const_lo
    cdef int rc = 0
    cdef LaneBufs lb
    if core.nat_fwd_t == NULL or vm.brk != NULL or vm.n_watch != 0:
        return False
    _rows_ok("hessian_rows", [(def_addrs, np.int64, 1), (def_words, np.int64, 1),
                              (row_addrs, np.int64, 1), (rows, np.int64, 2),
                              (wrt_addrs, np.int64, 1), (out, np.float64, 3),
                              (status, np.int64, 1), (exact, np.int64, 1)])
    if rows.shape[1] != nr or out.shape[0] != B or out.shape[1] != n or out.shape[2] != n or \
            status.shape[0] != B:
        raise ValueError("hessian_rows: arrays of the wrong shape or type")
    if core._duals is None:
        core.set_ad(_AD_ADJ)
    cdef cnp.ndarray ws = np.empty(nw + 1, dtype=np.int64)
    cdef list bufs = []
    memset(&lb, 0, sizeof(LaneBufs))
    if core.nat_fwd_vt != NULL:
        lb.cells = min(vm.n_mem, vm.n_static + LANE_FRAME)
        lb.stack = min(max(vm.stack_cap, 1), LANE_STACK)
        bufs = [np.zeros(lb.cells * LANES), np.zeros(lb.cells * LANES),
                np.zeros(lb.stack * LANES), np.zeros(lb.stack * LANES)]
        lb.tan = <double*>cnp.PyArray_DATA(<cnp.ndarray>bufs[0])
        lb.adjt = <double*>cnp.PyArray_DATA(<cnp.ndarray>bufs[1])
        lb.stan = <double*>cnp.PyArray_DATA(<cnp.ndarray>bufs[2])
        lb.sadjt = <double*>cnp.PyArray_DATA(<cnp.ndarray>bufs[3])
    cdef native_fn fwd_t = core.nat_fwd_t, bwd_at = core.nat_bwd_at
    cdef native_fn fwd_vt = core.nat_fwd_vt, bwd_vat = core.nat_bwd_vat
    cdef i64* image = _ptr(core.static_image)
    cdef i64* da = _ptr(def_addrs)
    cdef i64* dw = _ptr(def_words)
    cdef i64* ra = _ptr(row_addrs)
    cdef i64* rp = _ptr(rows)
    cdef i64* wa = _ptr(wrt_addrs)
    cdef double* op = <double*>cnp.PyArray_DATA(out)
    cdef i64* sp = _ptr(status)
    cdef i64* wsp = _ptr(ws)
    cdef i64* ex = _ptr(exact)
    with nogil:
        for b in range(B):
            rc = hess_row(vm, image, fwd_t, bwd_at, fwd_vt, bwd_vat, &lb, of_addr, da, dw, nd,
                          ra, rp + b * nr, nr, wa, n, op + b * n * n, wsp, nw, ex, nex)
            if rc == 2:
                break
            sp[b] = rc
    if rc == 2:
        PyErr_CheckSignals()
        raise KeyboardInterrupt
    return True
