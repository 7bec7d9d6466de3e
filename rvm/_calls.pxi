# rvm/_core.pyx includes this file: calls, returns and frames.
# (Text included into the one extension module: it shares the core's names.)

# ---- calls and returns -------------------------------------------------------------------------

cdef int do_call(VM* vm, i64 site, int e_callee, i64 pc) noexcept nogil:
    """Bind the arguments of call site `site` in the top frame, check them, push the callee's
    frame and set pc to its first instruction.  Returns a trap code; on a trap nothing but
    scratch entries above the parameter table's top has been written."""
    cdef i64 f = vm.cs_func[site], off = vm.cs_off[site]
    cdef i64 np_ = vm.fn_nparams[f], fs = vm.fn_fsize[f], d = vm.depth
    cdef i64 caller_fp = vm.fr_fp[d - 1]
    cdef i64* mem = vm.mem
    cdef i64* pa = vm.pt_addr + vm.fr_pp[d - 1]
    cdef i64* pl = vm.pt_len + vm.fr_pp[d - 1]
    cdef i64* na = vm.pt_addr + vm.ptop
    cdef i64* nl = vm.pt_len + vm.ptop
    cdef uint8_t* pw = vm.p_written + vm.fn_poff[f]
    cdef i64* pln = vm.p_length + vm.fn_poff[f]
    cdef i64 i, j, w, L, q, addr, length
    cdef i64* cell
    if d >= vm.max_depth:
        vm.tv[0] = _OV_CONTROL_STACK
        vm.tv[1] = vm.max_depth
        return _T_OVERFLOW
    if fs > vm.n_mem - vm.ftop:
        vm.tv[0] = _OV_FRAMES
        vm.tv[1] = vm.n_mem - vm.n_static
        return _T_OVERFLOW
    if np_ > vm.pt_cap - vm.ptop:
        vm.tv[0] = _OV_PARAMS
        vm.tv[1] = vm.pt_cap
        return _T_OVERFLOW
    for i in range(np_):
        w = vm.arg_word[off + i]
        L = vm.arg_len[off + i]
        if L == ARG_SCALAR:
            cell = opnd(vm, w, mem, mem + caller_fp, pa)
            if cell == NULL:
                vm.tv[3] = _IN_CALL + i
                return _T_BOUNDS
            na[i] = cell - mem
            nl[i] = 1
            continue
        q = w >> 3
        if (w & 7) == MODE_G:
            addr = q
            length = L
        elif (w & 7) == MODE_L:
            addr = caller_fp + q
            length = L
        else:
            addr = pa[q]
            length = pl[q]
            if L >= 0:
                if L > length:     # a static length longer than the array bound to the param
                    vm.tv[0] = -1
                    vm.tv[1] = L
                    vm.tv[2] = length
                    vm.tv[3] = _IN_CALL + i
                    return _T_BOUNDS
                length = L
        if pln[i] >= 0 and length != pln[i]:    # `p: T[n]` takes arrays of exactly n cells
            vm.tv[0] = -1
            vm.tv[1] = pln[i]
            vm.tv[2] = length
            vm.tv[3] = _IN_CALL + i
            return _T_BOUNDS
        na[i] = addr
        nl[i] = length
    for i in range(np_):
        # an indexed argument's index cell must not be written by the callee through another
        # argument: the return (and the run backward) would find a different element
        w = vm.arg_word[off + i]
        if vm.arg_len[off + i] == ARG_SCALAR and (w & 7) == MODE_X:
            cell = index_cell(vm, w, mem, mem + caller_fp, pa)
            for j in range(np_):
                if pw[j] and na[j] <= cell - mem < na[j] + nl[j]:
                    vm.tv[0] = j
                    vm.tv[1] = i
                    vm.tv[2] = cell - mem
                    vm.tv[3] = _IDX_ALIAS
                    return _T_ALIAS
    for i in range(np_):
        if pw[i] and nl[i] > 0 and na[i] < vm.const_hi and na[i] + nl[i] > vm.const_lo:
            vm.tv[0] = i
            vm.tv[1] = na[i]
            vm.tv[3] = _IN_CALL
            return _T_READONLY
    for i in range(np_):
        for j in range(i + 1, np_):
            if ((pw[i] or pw[j]) and nl[i] > 0 and nl[j] > 0
                    and na[i] < na[j] + nl[j] and na[j] < na[i] + nl[i]):
                vm.tv[0] = i
                vm.tv[1] = j
                vm.tv[2] = na[i] if na[i] > na[j] else na[j]     # first shared cell
                vm.tv[3] = _IN_CALL
                return _T_ALIAS
    vm.fr_func[d] = f
    vm.fr_fp[d] = vm.ftop
    vm.fr_pp[d] = vm.ptop
    vm.fr_ret[d] = pc
    vm.fr_fdir[d] = e_callee * vm.D
    vm.depth = d + 1
    if vm.ad:
        ad_frame(vm, vm.ftop, fs)
    vm.ftop += fs
    vm.ptop += np_
    if vm.depth > vm.peak_depth:
        vm.peak_depth = vm.depth
    if vm.ftop - vm.n_static > vm.peak_frame:
        vm.peak_frame = vm.ftop - vm.n_static
    vm.pc = vm.fn_begin[f] + 1 if e_callee > 0 else vm.fn_end[f] - 1
    vm.came = 0
    return 0


cdef int do_return(VM* vm) noexcept nogil:
    """Pop the top frame if its locals are zero; continue in the caller or halt."""
    cdef i64 d = vm.depth - 1
    cdef i64 f = vm.fr_func[d], fp = vm.fr_fp[d], fs = vm.fn_fsize[f], k
    cdef i64 site, off, w
    cdef i64* cell
    cdef i64* cpa
    for k in range(fs):
        if vm.mem[fp + k] != 0:
            vm.tv[0] = k
            vm.tv[1] = vm.mem[fp + k]
            vm.tv[2] = f
            vm.tv[3] = 0
            return _T_ANCILLA
    if vm.ad & _AD_TAN:
        for k in range(fs):
            ad_release(vm, vm.tan[fp + k], vm.pc)
    if d > 0:
        # an indexed argument must still name the cell it was bound to (the callee may have
        # changed its index through a global): else the caller's inverse would bind another
        site = vm.code[vm.fr_ret[d] * 6 + 1]
        off = vm.cs_off[site]
        cpa = vm.pt_addr + vm.fr_pp[d - 1]
        for k in range(vm.fn_nparams[f]):
            w = vm.arg_word[off + k]
            if vm.arg_len[off + k] == ARG_SCALAR and (w & 7) == MODE_X:
                cell = opnd(vm, w, vm.mem, vm.mem + vm.fr_fp[d - 1], cpa)
                if cell == NULL or cell - vm.mem != vm.pt_addr[vm.fr_pp[d] + k]:
                    vm.tv[0] = k
                    vm.tv[1] = vm.pt_addr[vm.fr_pp[d] + k]
                    vm.tv[2] = -1 if cell == NULL else cell - vm.mem
                    vm.tv[3] = _IDX_RETURN
                    return _T_ALIAS
    vm.ftop = fp
    vm.ptop = vm.fr_pp[d]
    vm.depth = d
    vm.came = 0
    if d == 0:
        vm.status = _S_END if vm.D > 0 else _S_START
        vm.pc = vm.fn_end[f] if vm.D > 0 else vm.fn_begin[f]
    else:
        vm.pc = vm.fr_ret[d] + vm.fr_fdir[d - 1] * vm.D
    return 0


cdef int enter_main(VM* vm) noexcept nogil:
    """Enter the entry function from the start (forward) or the end (backward): one step."""
    cdef i64 f = vm.main, fs = vm.fn_fsize[f]
    if fs > vm.n_mem - vm.ftop:
        vm.tv[0] = _OV_FRAMES
        vm.tv[1] = vm.n_mem - vm.n_static
        return _T_OVERFLOW
    vm.fr_func[0] = f
    vm.fr_fp[0] = vm.ftop
    vm.fr_pp[0] = vm.ptop
    vm.fr_ret[0] = -1
    vm.fr_fdir[0] = 1
    vm.depth = 1
    if vm.ad:
        ad_frame(vm, vm.ftop, fs)
    vm.ftop += fs
    if vm.peak_depth < 1:
        vm.peak_depth = 1
    if vm.ftop - vm.n_static > vm.peak_frame:
        vm.peak_frame = vm.ftop - vm.n_static
    vm.pc = vm.fn_begin[f] + 1 if vm.D > 0 else vm.fn_end[f] - 1
    vm.came = 0
    vm.status = _S_RUNNING
    return 0
