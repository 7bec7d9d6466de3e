# rvm/_core.pyx includes this file: differentiation rules: the AD drivers the dispatch loop and the kernels call.
# (Text included into the one extension module: it shares the core's names.)

# ---- differentiation rules (isa/derivatives.py; docs/ad.md) ------------------------------------

cdef inline double real_of(i64 w, int ty, int F) noexcept nogil:
    """The real value of a cell (the unit a float, fixed or lns cell's duals are measured in;
    an int cell's value is a constant factor of an lns scale rule)."""
    if ty == TY_FLOAT:
        return rvm_w2f(w)
    if ty == TY_LNS:
        return rvm_lns_to_real(w, F)
    if ty == TY_INT:
        return <double>w
    return ldexp(<double>w, -F)


cdef inline void ad_release(VM* vm, double t, i64 pc) noexcept nogil:
    """A tangent is dropped: a cell leaves scope or is overwritten by a move.  Nonzero means
    the value is zero here but not as a function of the inputs (see docs/ad.md)."""
    if t != 0.0:
        if vm.ev_release == 0:
            vm.ev_release_pc = pc
        vm.ev_release += 1
        if fabs(t) > vm.ev_release_max or t != t:
            vm.ev_release_max = fabs(t)


cdef inline void ad_check(VM* vm, double x, i64 pc) noexcept nogil:
    if not isfinite(x):
        if vm.ev_nonfinite == 0:
            vm.ev_nonfinite_pc = pc
        vm.ev_nonfinite += 1


cdef inline void ad_bad(VM* vm, int n, i64 pc) noexcept nogil:
    """n derivatives a rule of rvm/_adrules.h just made are not finite."""
    if n:
        if vm.ev_nonfinite == 0:
            vm.ev_nonfinite_pc = pc
        vm.ev_nonfinite += n


cdef inline void ad_rot(VM* vm, int s, int ty, i64 iy, i64 ia, i64 ib, double cs, double sn,
                        i64* mem, i64 pc) noexcept nogil:
    """The rule of an executed rotation (x, y) <- R(phi)(x, y), phi = s*theta, of the cells
    iy, ia by the angle in ib, with cs = cos(theta) and sn = s*sin(theta); the values now
    are the results (rvm/_adrules.h: rvm_rot_tangent, rvm_rot_adjoint and its tangent)."""
    cdef bint tan_on = (vm.ad & _AD_TAN) != 0
    cdef bint adj_on = (vm.ad & _AD_ADJ) != 0 and vm.D < 0
    cdef double* T = vm.tan
    cdef double* A = vm.adj
    cdef double* AT = vm.adjt
    cdef double xa, ya, xp, yp, txb, tyb, tth, ax, ay
    xa = real_of(mem[iy], ty, vm.F)
    ya = real_of(mem[ia], ty, vm.F)
    txb = T[iy] if tan_on else 0.0
    tyb = T[ia] if tan_on else 0.0
    tth = T[ib] if tan_on else 0.0
    if tan_on:
        ad_bad(vm, rvm_rot_tangent(s, cs, sn, xa, ya, tth, &T[iy], &T[ia]), pc)
    if adj_on:
        rvm_rot_adjoint(s, cs, sn, xa, ya, &A[iy], &A[ia], &A[ib], &xp, &yp, &ax, &ay)
        if tan_on:
            ad_bad(vm, rvm_rot_adjoint_tangent(s, cs, sn, txb, tyb, tth, xp, yp, ax, ay, A[iy],
                                               A[ia], &AT[iy], &AT[ia], &AT[ib]), pc)
        ad_check(vm, A[ib], pc)


cdef void ad_rule(VM* vm, int op, i64* c, i64* p1, i64* p2, i64* p3, i64* mem, i64 pc) noexcept nogil:
    """Apply the differentiation rule of the instruction `op` (as executed, after the inverse
    map) that has just run at `pc`.  Tangents follow the executed instruction in either
    direction; adjoints accumulate only while the machine runs backward (the adjoint sweep),
    where the executed instruction is the inverse of the one that ran forward, hence the
    sign flip: xbar_k -= s * d_k * ybar for an executed y += s*f(x).  The rules themselves
    are rvm/_adrules.h's, one function per kind, which the native code calls too."""
    cdef int kind = AD_KIND[op], s = AD_SIGN[op], ty = OP_TYPE[op], sty, pf, n, k
    cdef bint tan_on = (vm.ad & _AD_TAN) != 0
    cdef bint adj_on = (vm.ad & _AD_ADJ) != 0 and vm.D < 0
    cdef double* T = vm.tan
    cdef double* A = vm.adj
    cdef double* AT = vm.adjt
    cdef i64 iy, ia, ib
    cdef rvm_dual dx[2]
    cdef rvm_dual dd[2]
    cdef double th

    if kind == ADK_UPDATE:
        iy = p1 - mem
        ia = p2 - mem
        pf = AD_PF[op]
        if pf == PF_ONE:                       # y += a, y += T(a): the common case
            if tan_on and T[ia] != 0.0:
                rvm_ad_one(-s, T[ia], &T[iy])
            if adj_on:
                rvm_ad_one(s, A[iy], &A[ia])
                if tan_on:
                    rvm_ad_one(s, AT[iy], &AT[ia])
            return
        sty = CVT_SRC[op] if CVT_SRC[op] >= 0 else ty
        if pf == PF_MUL and not tan_on:        # y += s*a*b in the adjoint sweep, directly
            if adj_on:                         # (the partials are b and a, as rvm_partials)
                ib = p3 - mem
                ad_bad(vm, rvm_ad_mul(s, real_of(mem[ia], sty, vm.F),
                                      real_of(mem[ib], sty, vm.F), A[iy], &A[ia], &A[ib]), pc)
            return
        ib = ia
        if pf >= PF_FN2:
            ib = p3 - mem
            pf += <int>c[4]
        elif pf >= PF_FN1:
            pf += <int>c[3]
        else:                                  # addmul/adddiv: a second source
            ib = p3 - mem
        dx[0].v = real_of(mem[ia], sty, vm.F)
        dx[0].t = T[ia] if tan_on else 0.0
        dx[1].v = real_of(mem[ib], sty, vm.F)
        dx[1].t = T[ib] if tan_on else 0.0
        n = rvm_partials(pf, dx[0], dx[1], &dd[0], &dd[1])
        ad_bad(vm, rvm_ad_update(s, n, dd, tan_on, adj_on, &T[iy], &T[ia], &T[ib], &A[iy],
                                 &A[ia], &A[ib], &AT[iy], &AT[ia], &AT[ib]), pc)
    elif kind == ADK_SCALE:                    # lns y *= a^s (rvm_ad_scale)
        iy = p1 - mem
        ia = p2 - mem
        sty = CVT_SRC[op] if CVT_SRC[op] >= 0 else ty     # an int x: a constant factor
        ad_bad(vm, rvm_ad_scale(s, real_of(mem[ia], sty, vm.F), sty != TY_INT,
                                real_of(mem[iy], ty, vm.F), tan_on, adj_on, &T[iy], &T[ia],
                                &A[iy], &A[ia], &AT[iy], &AT[ia]), pc)
    elif kind == ADK_NEG:
        iy = p1 - mem
        if tan_on:
            rvm_ad_neg(&T[iy])
        if vm.ad & _AD_ADJ:
            rvm_ad_neg(&A[iy])
            if tan_on:
                rvm_ad_neg(&AT[iy])
    elif kind == ADK_SWAP:
        iy = p1 - mem
        ia = p2 - mem
        if tan_on:
            rvm_ad_swap(&T[iy], &T[ia])
        if vm.ad & _AD_ADJ:
            rvm_ad_swap(&A[iy], &A[ia])
            if tan_on:
                rvm_ad_swap(&AT[iy], &AT[ia])
    elif kind == ADK_ROT:
        th = real_of(p3[0], ty, vm.F)
        if ty == TY_FLOAT and p3[0] == vm.rot_w:
            ad_rot(vm, s, ty, p1 - mem, p2 - mem, p3 - mem, vm.rot_cs[0], s * vm.rot_cs[1],
                   mem, pc)                   # the rotation just computed cos and sin
        else:
            ad_rot(vm, s, ty, p1 - mem, p2 - mem, p3 - mem, cos(th), s * sin(th), mem, pc)
    elif kind == ADK_MOVE:
        # push: the cell's duals go onto the stack and the cell is the constant zero;
        # pop: the stack's duals replace the (dropped) duals of the zero cell
        iy = p1 - mem
        if op == OP_PUSH:
            k = vm.sp - 1
            rvm_ad_push(&T[iy], &vm.stan[k])
            rvm_ad_push(&A[iy], &vm.sadj[k])
            rvm_ad_push(&AT[iy], &vm.sadjt[k])
        else:
            k = vm.sp
            if tan_on:
                ad_release(vm, T[iy], pc)
            rvm_ad_pop(&vm.stan[k], &T[iy])
            rvm_ad_pop(&vm.sadj[k], &A[iy])
            rvm_ad_pop(&vm.sadjt[k], &AT[iy])
    elif kind == ADK_SCOPE:
        iy = p1 - mem
        if tan_on:
            ad_release(vm, T[iy], pc)
        rvm_ad_scope(&T[iy])
        rvm_ad_scope(&A[iy])
        rvm_ad_scope(&AT[iy])


cdef inline bint ad_inline(int op, i64* y, i64* a, i64* mem, int ad, bint backward,
                          double* A, double* T) noexcept nogil:
    """The commonest rule, y += a, without a call: in the adjoint sweep abar -= s * ybar, in
    tangent mode y' += s * a'.  Returns 0 when ad_rule must run instead."""
    if AD_PF[op] != PF_ONE:
        return 0
    if ad == _AD_ADJ and backward:
        rvm_ad_one(AD_SIGN[op], A[y - mem], &A[a - mem])
        return 1
    if ad == _AD_TAN:
        rvm_ad_one(-AD_SIGN[op], T[a - mem], &T[y - mem])
        return 1
    return 0


cdef void ad_apply(VM* vm, int op, i64* c, i64* mem, i64* fpm, i64* pa, i64 pc) noexcept nogil:
    """ad_rule with the instruction's cell operands resolved in the current frame."""
    cdef int n = NCELL[op]
    cdef i64* p1 = opnd(vm, c[CSLOT[op][0]], mem, fpm, pa)
    cdef i64* p2 = p1
    cdef i64* p3 = p1
    if n > 1:
        p2 = opnd(vm, c[CSLOT[op][1]], mem, fpm, pa)
        if n > 2:
            p3 = opnd(vm, c[CSLOT[op][2]], mem, fpm, pa)
    ad_rule(vm, op, c, p1, p2, p3, mem, pc)


cdef void ad_frame(VM* vm, i64 fp, i64 fs) noexcept nogil:
    """A frame is pushed: its cells are constant zeros, so are their duals."""
    memset(vm.tan + fp, 0, fs * sizeof(double))
    memset(vm.adj + fp, 0, fs * sizeof(double))
    memset(vm.adjt + fp, 0, fs * sizeof(double))
