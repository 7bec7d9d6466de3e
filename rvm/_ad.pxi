# rvm/_core.pyx includes this file: differentiation rules: the AD drivers the dispatch loop and the kernels call.
# (Text included into the one extension module: it shares the core's names.)

# ---- differentiation rules (isa/derivatives.py; docs/ad.md) ------------------------------------

cdef inline double real_of(i64 w, int ty, int F) noexcept nogil:
    """The real value of a float or fixed cell (the unit its duals are measured in)."""
    if ty == TY_FLOAT:
        return rvm_w2f(w)
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


cdef inline void ad_rot(VM* vm, int s, int ty, i64 iy, i64 ia, i64 ib, double cs, double sn,
                        i64* mem, i64 pc) noexcept nogil:
    """The rule of an executed rotation (x, y) <- R(phi)(x, y), phi = s*theta, of the cells
    iy, ia by the angle in ib, with cs = cos(theta) and sn = s*sin(theta); the values now
    are the results."""
    cdef bint tan_on = (vm.ad & _AD_TAN) != 0
    cdef bint adj_on = (vm.ad & _AD_ADJ) != 0 and vm.D < 0
    cdef double* T = vm.tan
    cdef double* A = vm.adj
    cdef double* AT = vm.adjt
    cdef double xa, ya, xp, yp, txb, tyb, tth, ax, ay, atx, aty, nax, nay
    xa = real_of(mem[iy], ty, vm.F)
    ya = real_of(mem[ia], ty, vm.F)
    txb = T[iy] if tan_on else 0.0
    tyb = T[ia] if tan_on else 0.0
    tth = T[ib] if tan_on else 0.0
    if tan_on:
        # t_after = R(phi) t_before + s theta' J v_after,  J (x, y) = (-y, x)
        T[iy] = cs * txb - sn * tyb - s * tth * ya
        T[ia] = sn * txb + cs * tyb + s * tth * xa
        ad_check(vm, T[iy] + T[ia], pc)
    if adj_on:
        # the adjoint rule, shared with the native code (rvm/_adrules.h)
        rvm_rot_adjoint(s, cs, sn, xa, ya, &A[iy], &A[ia], &A[ib], &xp, &yp, &ax, &ay)
        nax = A[iy]
        nay = A[ia]
        if tan_on:
            atx = AT[iy]
            aty = AT[ia]
            AT[iy] = cs * atx - sn * aty - s * tth * nay
            AT[ia] = sn * atx + cs * aty + s * tth * nax
            AT[ib] -= s * (-tyb * ax + txb * ay - yp * atx + xp * aty)
            ad_check(vm, AT[iy] + AT[ia] + AT[ib], pc)
        ad_check(vm, A[ib], pc)


cdef void ad_rule(VM* vm, int op, i64* c, i64* p1, i64* p2, i64* p3, i64* mem, i64 pc) noexcept nogil:
    """Apply the differentiation rule of the instruction `op` (as executed, after the inverse
    map) that has just run at `pc`.  Tangents follow the executed instruction in either
    direction; adjoints accumulate only while the machine runs backward (the adjoint sweep),
    where the executed instruction is the inverse of the one that ran forward, hence the
    sign flip: xbar_k -= s * d_k * ybar for an executed y += s*f(x)."""
    cdef int kind = AD_KIND[op], s = AD_SIGN[op], ty = OP_TYPE[op], sty, pf, n, k
    cdef bint tan_on = (vm.ad & _AD_TAN) != 0
    cdef bint adj_on = (vm.ad & _AD_ADJ) != 0 and vm.D < 0
    cdef double* T = vm.tan
    cdef double* A = vm.adj
    cdef double* AT = vm.adjt
    cdef i64 iy, ia, ib
    cdef i64 src[2]
    cdef rvm_dual dx[2]
    cdef rvm_dual dd[2]
    cdef double v, ab, abt, th

    if kind == ADK_UPDATE:
        iy = p1 - mem
        ia = p2 - mem
        pf = AD_PF[op]
        if pf == PF_ONE:                       # y += a, y += T(a): the common case
            if tan_on and T[ia] != 0.0:
                T[iy] += s * T[ia]
            if adj_on:
                A[ia] -= s * A[iy]
                if tan_on:
                    AT[ia] -= s * AT[iy]
            return
        sty = CVT_SRC[op] if CVT_SRC[op] >= 0 else ty
        if pf == PF_MUL and not tan_on:        # y += s*a*b in the adjoint sweep, directly
            ab = A[iy] if adj_on else 0.0
            if ab != 0.0:                      # (the partials are b and a, as rvm_partials)
                ib = p3 - mem
                A[ia] -= s * real_of(mem[ib], sty, vm.F) * ab
                ad_check(vm, A[ia], pc)
                A[ib] -= s * real_of(mem[ia], sty, vm.F) * ab
                ad_check(vm, A[ib], pc)
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
        src[0] = ia
        src[1] = ib
        if tan_on:
            v = 0.0
            for k in range(n):
                if T[src[k]] != 0.0:
                    v += dd[k].v * T[src[k]]
            if v != 0.0:
                T[iy] += s * v
                ad_check(vm, T[iy], pc)
        if adj_on:
            ab = A[iy]
            abt = AT[iy] if tan_on else 0.0
            for k in range(n):
                if ab != 0.0:
                    A[src[k]] -= s * dd[k].v * ab
                    ad_check(vm, A[src[k]], pc)
                if tan_on and (abt != 0.0 or (ab != 0.0 and dd[k].t != 0.0)):
                    AT[src[k]] -= s * ((dd[k].v * abt if abt != 0.0 else 0.0)
                                       + (dd[k].t * ab if ab != 0.0 else 0.0))
                    ad_check(vm, AT[src[k]], pc)
    elif kind == ADK_NEG:
        iy = p1 - mem
        if tan_on:
            T[iy] = -T[iy]
        if vm.ad & _AD_ADJ:
            A[iy] = -A[iy]
            if tan_on:
                AT[iy] = -AT[iy]
    elif kind == ADK_SWAP:
        iy = p1 - mem
        ia = p2 - mem
        if tan_on:
            v = T[iy]; T[iy] = T[ia]; T[ia] = v
        if vm.ad & _AD_ADJ:
            v = A[iy]; A[iy] = A[ia]; A[ia] = v
            if tan_on:
                v = AT[iy]; AT[iy] = AT[ia]; AT[ia] = v
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
            vm.stan[k] = T[iy]; vm.sadj[k] = A[iy]; vm.sadjt[k] = AT[iy]
        else:
            k = vm.sp
            if tan_on:
                ad_release(vm, T[iy], pc)
            T[iy] = vm.stan[k]; A[iy] = vm.sadj[k]; AT[iy] = vm.sadjt[k]
            vm.stan[k] = 0.0; vm.sadj[k] = 0.0; vm.sadjt[k] = 0.0
            return
        T[iy] = 0.0; A[iy] = 0.0; AT[iy] = 0.0
    elif kind == ADK_SCOPE:
        iy = p1 - mem
        if tan_on:
            ad_release(vm, T[iy], pc)
        T[iy] = 0.0; A[iy] = 0.0; AT[iy] = 0.0


cdef inline bint ad_inline(int op, i64* y, i64* a, i64* mem, int ad, bint backward,
                          double* A, double* T) noexcept nogil:
    """The commonest rule, y += a, without a call: in the adjoint sweep abar -= s * ybar, in
    tangent mode y' += s * a'.  Returns 0 when ad_rule must run instead."""
    if AD_PF[op] != PF_ONE:
        return 0
    if ad == _AD_ADJ and backward:
        A[a - mem] -= AD_SIGN[op] * A[y - mem]
        return 1
    if ad == _AD_TAN:
        T[y - mem] += AD_SIGN[op] * T[a - mem]
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
