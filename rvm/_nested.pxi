# rvm/_core.pyx includes this file: derivative statements, nested AD (docs/ad.md, "Derivatives
# inside a program").  (Text included into the one extension module: it shares the core's names.)
#
# `g += grad f(args) wrt x` and `d += jvp f(args) wrt x along v` run their callee f (its first
# argument a scratch float cell f adds its value into) forward and back again, as one
# instruction, on a set of dual arrays of their own: the outer run's duals are untouched.  The
# inner mode is the adjoint sweep (grad) or the tangent run (jvp) when nothing outside is
# differentiated.  Under an outer mode the statement also supplies its own derivative, from a
# second-order mode of the same machine:
#   outer tangent (x' the outer tangents):  grad: g' += H x'  (inner tangent-over-adjoint with
#     the tangents x', the gradient from the same sweep); jvp: d' += x'.(H v) + grad f . v'
#   outer adjoint sweep (the inverse runs):  grad: xbar += H gbar for every cell f reads
#     (inner tangents gbar on the wrt cells); jvp: xbar += dbar H v, vbar += dbar grad f
# A statement under an outer tangent-over-adjoint mode (third order), or a third nesting level,
# traps by name.

cdef enum:
    NEST_LEVELS = 2         # dual sets beside the machine's own: two levels of statements
    NEST_POLL = 1 << 22     # nested instructions between two polls for Ctrl-C (~20 ms)
    _NEST_DEEP = 3002       # tv[3] of a bytecode trap: a derivative statement nested too deep
    _NEST_SHAPE = 3003      # ... its target, wrt and along operands differ in length
    _NEST_RESIDUE = 3004    # ... its scratch output did not come back to zero
    _NEST_START = 3005      # ... its scratch output was not zero at the start


cdef int deriv_span(VM* vm, i64 w, i64 L, i64* mem, i64* fpm, i64* pa, i64* addr,
                    i64* n) noexcept nogil:
    """The cells of a derivative operand: one cell (L = ARG_SCALAR), a parameter array (-1:
    its bound length) or L cells from the array word w."""
    cdef i64* cell
    cdef i64* pl = vm.pt_len + (pa - vm.pt_addr)
    cdef i64 q = w >> 3, m = w & 7
    if L == ARG_SCALAR:
        cell = opnd(vm, w, mem, fpm, pa)
        if cell == NULL:
            return _T_BOUNDS
        addr[0] = cell - mem
        n[0] = 1
        return 0
    if m == MODE_G:
        addr[0] = q
        n[0] = L
    elif m == MODE_L:
        addr[0] = (fpm - mem) + q
        n[0] = L
    elif m == MODE_P:
        addr[0] = pa[q]
        n[0] = pl[q]
        if L >= 0:
            if L != pl[q]:
                vm.tv[0] = -1
                vm.tv[1] = L
                vm.tv[2] = pl[q]
                vm.tv[3] = 0
                return _T_BOUNDS
            n[0] = L
    else:
        vm.tv[0] = w
        vm.tv[1] = 0
        vm.tv[2] = 0
        vm.tv[3] = _NO_DISPATCH_CASE
        return _T_BYTECODE
    return 0


cdef extern from "Python.h":
    int _nest_check_signals "PyErr_CheckSignals" ()     # no Cython error check: Core raises


cdef int nest_signalled() noexcept nogil:
    """Poll for signals between nested slices, taking the GIL (whether or not the caller holds
    it): other threads get a turn, and a signal handler's exception (KeyboardInterrupt on
    Ctrl-C) stays set for Core to raise.  1 when one was raised."""
    with gil:
        with nogil:
            pass
        return _nest_check_signals() != 0


cdef int nest_pass(VM* vm, i64 site, i64 pc, int e) noexcept nogil:
    """Run the callee of `site` from the top frame until it returns: forward (e = +1) or
    backward (e = -1, the machine's direction too, so that adjoints accumulate); by the plain
    loop when vm.ad is 0 (a pass no rule acts in).  The run goes in slices that end when the
    run's cap (vm.cap) is used up or NEST_POLL nested instructions (all levels) have run since
    the last poll for Ctrl-C.  Returns a binding trap code, -1 after a trap inside the run
    (recorded by vm_run), -2 when it stopped on the cap or a signal (vm.nest_stop), else 0."""
    cdef i64 executed = 0, old_stop = vm.stop_depth, n
    cdef int rc, tc
    cdef Instrumented iv
    cdef Plain pv
    vm.D = e
    tc = do_call(vm, site, e, pc)
    if tc:
        return tc
    vm.stop_depth = vm.depth - 1
    while True:
        n = vm.cap if vm.cap < vm.poll_left else vm.poll_left
        if vm.ad:
            rc = vm_run(vm, n, &executed, &iv)
        else:
            rc = vm_run(vm, n, &executed, &pv)
        vm.poll_left -= executed
        if rc == _R_TRACE:          # a trace inside a nested run is not reported
            vm.trace_ack = 1
            continue
        if rc == _R_BUDGET:
            if vm.cap <= 0:
                vm.nest_stop = _NEST_STOP_LIMIT
                break
            if vm.poll_left <= 0:
                vm.poll_left = NEST_POLL
                if nest_signalled():
                    vm.nest_stop = _NEST_STOP_SIGNAL
                    break
            continue
        break
    vm.stop_depth = old_stop
    if rc == _R_TRAP:
        return -1
    if rc == _R_BUDGET or rc == _R_NESTED:
        return -2
    return 0


cdef enum:
    _DERIV_TRAPPED = -1     # deriv_step: a trap inside the nested run (recorded there)
    _DERIV_STOPPED = -2     # ... the cap or a signal stopped it (vm.nest_stop)
    _DERIV_NO_ROOM = -3     # ... the cap leaves no room for one nested instruction


cdef int deriv_step(VM* vm, i64* c, int op, i64 pc, i64* mem, i64* fpm, i64* pa, i64* left,
                    i64* budget, i64* executed) noexcept nogil:
    """The derivative statement at pc as a step of vm_run, whose *budget and *left it
    adjusts: the statement is one step, and its nested runs' instructions count against the
    run's cap (vm.cap), off which the steps vm_run has run so far (this one too) are taken
    first.  On success (0) those steps are counted (t, steps, *executed: do_deriv put t back)
    and vm_run goes on with a budget the nested runs' use of the cap may have cut.  Else a
    trap code (nothing changed), _DERIV_NO_ROOM (stop before the statement: the cap is used
    up), or _DERIV_TRAPPED / _DERIV_STOPPED: the machine is left inside the nested run, f's
    frame on top, the steps so far counted.  Out of line: the dispatch loop's registers stay
    its own."""
    cdef i64 done = budget[0] - left[0]
    cdef int tc
    if vm.cap - done < 2:
        vm.cap = done               # vm_run takes `done` off as it returns: none is left
        return _DERIV_NO_ROOM
    vm.cap -= done + 1
    tc = do_deriv(vm, c, op, pc, mem, fpm, pa)
    if tc < 0:
        vm.cap += 1
        vm.t += done * vm.D
        vm.steps += done
        executed[0] += done
        return tc
    if tc:
        vm.cap += done + 1
        return tc
    vm.t += (done + 1) * vm.D
    vm.steps += done + 1
    executed[0] += done + 1
    if vm.cap < left[0] - 1:
        left[0] = vm.cap + 1
    budget[0] = left[0] - 1         # after vm_run's own left -= 1, nothing uncounted
    return 0


cdef int deriv_trap(VM* vm, int op, i64 w0, i64 w1, i64 w2, int why) noexcept nogil:
    vm.tv[0] = w0
    vm.tv[1] = w1
    vm.tv[2] = w2
    vm.tv[3] = why
    return _T_BYTECODE


cdef int do_deriv(VM* vm, i64* c, int op, i64 pc, i64* mem, i64* fpm, i64* pa) noexcept nogil:
    """Execute the derivative statement at pc (see the top of this file).  Returns a trap code
    (nothing changed), -1 after a trap inside a nested run, -2 when a nested run stopped on
    the cap or a signal (the machine is left inside it, as after a trap), or 0."""
    cdef bint jvp = op == OP_ADDJVP_F or op == OP_SUBJVP_F
    cdef int s = 1 if (op == OP_ADDGRAD_F or op == OP_ADDJVP_F) else -1
    cdef i64 site = c[1], L = c[5] if jvp else c[4]
    cdef i64 ya = 0, yn = 0, wa = 0, wn = 0, va = 0, vn = 0, oa, i, top, w, sp0
    cdef int outer = vm.ad, tc, mode, lvl, err
    cdef bint need_tan = (outer & _AD_TAN) != 0
    cdef bint need_adj = (outer & _AD_ADJ) != 0 and vm.D < 0
    cdef i64* cell
    cdef double* T
    cdef double* A
    cdef double* AT
    cdef double* o_tan = vm.tan
    cdef double* o_adj = vm.adj
    cdef double* o_adjt = vm.adjt
    cdef double* o_stan = vm.stan
    cdef double* o_sadj = vm.sadj
    cdef double* o_sadjt = vm.sadjt
    cdef uint8_t* o_brk = vm.brk
    cdef i64 o_watch = vm.n_watch, o_t = vm.t
    cdef int o_D = vm.D
    cdef double r = 0.0, rd, yb
    if jvp:
        cell = opnd(vm, c[2], mem, fpm, pa)
        if cell == NULL:
            return _T_BOUNDS
        ya = cell - mem
        yn = 1
        tc = deriv_span(vm, c[3], L, mem, fpm, pa, &wa, &wn)
        if tc:
            return tc
        tc = deriv_span(vm, c[4], L, mem, fpm, pa, &va, &vn)
        if tc:
            return tc
        if vn != wn:
            return deriv_trap(vm, op, wn, vn, 0, _NEST_SHAPE)
    else:
        tc = deriv_span(vm, c[2], L, mem, fpm, pa, &ya, &yn)
        if tc:
            return tc
        tc = deriv_span(vm, c[3], L, mem, fpm, pa, &wa, &wn)
        if tc:
            return tc
        if yn != wn:
            return deriv_trap(vm, op, yn, wn, 0, _NEST_SHAPE)
    cell = opnd(vm, vm.arg_word[vm.cs_off[site]], mem, fpm, pa)
    if cell == NULL:
        return _T_BOUNDS
    oa = cell - mem
    if mem[oa] != 0:
        return deriv_trap(vm, op, mem[oa], 0, 0, _NEST_START)
    if (need_tan and (outer & _AD_ADJ)) or vm.nest >= NEST_LEVELS or vm.n_tan[vm.nest + 1] == NULL:
        return deriv_trap(vm, op, outer, vm.nest, 0, _NEST_DEEP)
    lvl = vm.nest + 1
    top = vm.ftop
    T = vm.n_tan[lvl]
    A = vm.n_adj[lvl]
    AT = vm.n_adjt[lvl]
    memset(T, 0, top * sizeof(double))
    memset(A, 0, top * sizeof(double))
    memset(AT, 0, top * sizeof(double))
    # and the duals of the values on the value stack, when f may pop one it did not push
    # (Program.pops_below_entry): as the cells below its frame they start at zero; left as an
    # earlier statement's nested run left them, they made a value the caller pushed carry that
    # run's tangent or adjoint.  (Every slot f does reach it writes first otherwise: clearing
    # them all made saddle's and particle's statements 200 times slower.)
    if vm.fn_pops_below[vm.cs_func[site]]:
        memset(vm.n_stan[lvl], 0, vm.sp * sizeof(double))
        memset(vm.n_sadj[lvl], 0, vm.sp * sizeof(double))
        memset(vm.n_sadjt[lvl], 0, vm.sp * sizeof(double))
    if jvp:
        mode = _AD_TAN | (_AD_ADJ if (need_tan or need_adj) else 0)
        for i in range(wn):
            T[wa + i] = rvm_w2f(mem[va + i])
    else:
        mode = _AD_ADJ | (_AD_TAN if (need_tan or need_adj) else 0)
        if need_tan:
            memcpy(T, o_tan, top * sizeof(double))
        elif need_adj:
            for i in range(wn):
                T[wa + i] = o_adj[ya + i]
    vm.tan = T
    vm.adj = A
    vm.adjt = AT
    vm.stan = vm.n_stan[lvl]
    vm.sadj = vm.n_sadj[lvl]
    vm.sadjt = vm.n_sadjt[lvl]
    vm.ad = mode
    vm.brk = NULL
    vm.n_watch = 0
    vm.nest = lvl
    sp0 = vm.sp
    if mode == _AD_ADJ:
        vm.ad = 0                       # an adjoint sweep's forward run applies no rule
    tc = nest_pass(vm, site, pc, 1)
    if tc == 0:
        if jvp:
            r = T[oa]
        if mode & _AD_ADJ:
            A[oa] = 1.0
        if mode == _AD_ADJ:
            # the values f left on the value stack carry a zero adjoint into the sweep (the
            # plain forward run moved no duals)
            for i in range(sp0, vm.sp):
                vm.sadj[i] = 0.0
        vm.ad = mode if mode != _AD_TAN else 0      # a tangent run's way back needs no rule
        tc = nest_pass(vm, site, pc, -1)
    vm.tan = o_tan
    vm.adj = o_adj
    vm.adjt = o_adjt
    vm.stan = o_stan
    vm.sadj = o_sadj
    vm.sadjt = o_sadjt
    vm.ad = outer
    vm.brk = o_brk
    vm.n_watch = o_watch
    vm.nest = lvl - 1
    vm.D = o_D
    if tc:
        if tc < 0:                  # stopped inside: name the outermost statement
            if vm.nest_stop == 0:
                vm.nest_stop = _NEST_STOP_TRAP
            vm.nest_pc = pc
        return tc
    vm.t = o_t
    vm.pc = pc
    vm.came = 0
    if mem[oa] != 0:
        return deriv_trap(vm, op, mem[oa], 0, 0, _NEST_RESIDUE)
    # the value: g += s * R, checked for every cell before any is written
    for i in range(yn):
        if not jvp:
            r = A[wa + i]
        err = rvm_float_add(mem[ya + i], r, s, &w)
        if err:
            vm.tv[0] = ya + i
            vm.tv[1] = 0
            vm.tv[2] = 0
            vm.tv[3] = 0
            return ak_trap(err)
    for i in range(yn):
        if not jvp:
            r = A[wa + i]
        rvm_float_add(mem[ya + i], r, s, &mem[ya + i])
    # its own derivative for the outer mode
    if need_tan:
        if jvp:
            rd = 0.0
            for i in range(top):
                if AT[i] != 0.0:
                    rd += AT[i] * o_tan[i]
            for i in range(wn):
                rd += A[wa + i] * o_tan[va + i]
            o_tan[ya] += s * rd
            ad_check(vm, o_tan[ya], pc)
        else:
            for i in range(yn):
                o_tan[ya + i] += s * AT[wa + i]
                ad_check(vm, o_tan[ya + i], pc)
    if need_adj:
        if jvp:
            yb = o_adj[ya]
            if yb != 0.0:
                for i in range(top):
                    if AT[i] != 0.0:
                        o_adj[i] -= s * yb * AT[i]
                        ad_check(vm, o_adj[i], pc)
                for i in range(wn):
                    o_adj[va + i] -= s * yb * A[wa + i]
                    ad_check(vm, o_adj[va + i], pc)
        else:
            for i in range(top):
                if AT[i] != 0.0:
                    o_adj[i] -= s * AT[i]
                    ad_check(vm, o_adj[i], pc)
    return 0
