# rvm/_core.pyx includes this file: operand access: decoding operand words to cells, bounds and index-alias checks.
# (Text included into the one extension module: it shares the core's names.)

# ---- operand access ----------------------------------------------------------------------------

cdef i64* opnd_slow(VM* vm, i64 w, i64* mem, i64* fpm, i64* pa) noexcept nogil:
    """X and N operands (kept out of line: the hot path is G/L/P).  NULL = bounds trap."""
    cdef i64 p = w >> 3, m = w & 7
    cdef i64* pl = vm.pt_len + (pa - vm.pt_addr)     # the frame's parameter lengths
    cdef i64 bw, bp, length, iw, ip, idx
    cdef i64* base
    if m == MODE_N:
        return pl + p
    bw = vm.xt_base[p]
    bp = bw >> 3
    length = vm.xt_len[p]
    if (bw & 7) == MODE_G:
        base = mem + bp
    elif (bw & 7) == MODE_L:
        base = fpm + bp
    else:
        base = mem + pa[bp]
        if length < 0 or length > pl[bp]:
            length = pl[bp]
    iw = vm.xt_index[p]
    ip = iw >> 3
    if (iw & 7) == MODE_G:
        idx = mem[ip]
    elif (iw & 7) == MODE_L:
        idx = fpm[ip]
    elif (iw & 7) == MODE_P:
        idx = mem[pa[ip]]
    else:
        idx = pl[ip]
    if <u64>idx >= <u64>length:
        vm.tv[0] = p
        vm.tv[1] = idx
        vm.tv[2] = length
        vm.tv[3] = 0
        return NULL
    return base + idx


cdef inline i64* opnd(VM* vm, i64 w, i64* mem, i64* fpm, i64* pa) noexcept nogil:
    """The cell an operand word names in the current frame (NULL: index out of bounds)."""
    cdef i64 m = w & 7
    if RVM_LIKELY(m == MODE_G):
        return mem + (w >> 3)
    if RVM_LIKELY(m == MODE_L):
        return fpm + (w >> 3)
    if m == MODE_P:
        return mem + pa[w >> 3]
    return opnd_slow(vm, w, mem, fpm, pa)


cdef inline int ak_trap(int err) noexcept nogil:
    return err + 8 if err else 0


cdef int no_case(VM* vm, int op, int where) noexcept nogil:
    """An executor (where: _NO_KERNEL_CASE, _NO_DISPATCH_CASE) has no case for op: a bytecode
    trap that names it, nothing changed.  Every executor ends its cases with this, never with
    a default that would run the op as another."""
    vm.tv[0] = op
    vm.tv[1] = 0
    vm.tv[2] = 0
    vm.tv[3] = where
    return _T_BYTECODE


cdef i64* index_cell(VM* vm, i64 w, i64* mem, i64* fpm, i64* pa) noexcept nogil:
    """The cell holding the index of the X operand word w (a parameter length for N)."""
    cdef i64 iw = vm.xt_index[w >> 3], ip = iw >> 3
    if (iw & 7) == MODE_G:
        return mem + ip
    if (iw & 7) == MODE_L:
        return fpm + ip
    if (iw & 7) == MODE_P:
        return mem + pa[ip]
    return vm.pt_len + (pa - vm.pt_addr) + ip


cdef int check_index_alias(VM* vm, i64* c, int op, i64* mem, i64* fpm, i64* pa) noexcept nogil:
    """An instruction must not write a cell that one of its indexed operands uses as index:
    run backward, the inverse would select a different element.  (Rows flagged in xflag
    only; a bounds problem is left to the instruction itself.)  Returns _T_ALIAS or 0."""
    cdef i64* ys[5]
    cdef i64* p
    cdef int s, t, ny = 0, ym = OP_YMASK[op], xm = OP_YMASK[op] | OP_AMASK[op]
    for s in range(1, 6):
        if ym & (1 << s):
            p = opnd(vm, c[s], mem, fpm, pa)
            if p == NULL:
                return 0
            ys[ny] = p
            ny += 1
    for s in range(1, 6):
        if (xm & (1 << s)) and (c[s] & 7) == MODE_X:
            p = index_cell(vm, c[s], mem, fpm, pa)
            for t in range(ny):
                if ys[t] == p:
                    vm.tv[0] = s
                    vm.tv[1] = p - mem
                    vm.tv[2] = 0
                    vm.tv[3] = _IDX_ALIAS
                    return _T_ALIAS
    return 0


# number of cell operands of each opcode, the row slot of each (they come first in the row,
# slots 1..NCELL, except xorcmp's: y, cc, a, b) and which of them it writes (bit k: cell k)
cdef int NCELL[N_OPCODES]
cdef int CSLOT[N_OPCODES][3]
cdef int CTMASK[N_OPCODES]
for _op in OPS:
    _slots = [s + 1 for s, k in enumerate(_op.operands) if k in ("y", "a")]
    assert len(_slots) <= 3, _op.name
    NCELL[_op.code] = len(_slots)
    CTMASK[_op.code] = sum(1 << k for k, s in enumerate(_slots) if _op.operands[s - 1] == "y")
    for _k in range(3):
        CSLOT[_op.code][_k] = _slots[_k] if _k < len(_slots) else 1


# the instruction leaves cos and sin of its angle in vm.rot_cs (float rotations; see ad_rule)
cdef int OP_ROTW[N_OPCODES]
for _op in OPS:
    OP_ROTW[_op.code] = leaves_cos_sin(_op)
