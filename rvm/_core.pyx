# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The machine core: memory, stacks and the interpreter loop of rvm (see docs/machine.md).

`Core` owns the machine state in a C struct (`VM`) over numpy buffers and runs instructions in a
`nogil` loop over raw pointers: no Python object is touched per instruction.  The loop stops on a
trap, at a program boundary, when the step budget is used up, or at a `trace` instruction (the
rare path: Python reports the trace and resumes).  Traps leave every cell unchanged and record a
code plus a few words; rvm/machine.py turns them into the named exceptions of rvm/errors.py.

Constructing a Core checks the Program for everything the loop relies on to stay inside its
buffers (operand words, side-table indices, jump targets, constant cells never written), so no
Program can crash the interpreter.  What still goes wrong at run time is a BytecodeTrap.
"""
from libc.stdint cimport int64_t, uint64_t, uint8_t, INT64_MIN, INT64_MAX, UINT64_MAX
from libc.string cimport memset, memcpy
from cpython.exc cimport PyErr_CheckSignals
from cpython.pythread cimport PyThread_get_thread_ident
from cpython.long cimport PyLong_AsLongLongAndOverflow

import numpy as np
cimport numpy as cnp

from isa.derivatives import KINDS, RULES, pf_id
from isa.functions import FN1, FN2
from isa.cgen import distinct_pairs, has_body, operand_names
from isa.table import INVERSE, LAW_ADD, OPS, ROW_WIDTH, positive_family
from isa.types import FLOAT, INT
from isa.types import MAX_FRACTION_BITS

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    object PyArray_Scalar(void* data, cnp.dtype descr, object base)    # a numpy scalar

include "_opcodes.pxi"
from isa.build import check_build

ctypedef int64_t i64
ctypedef uint64_t u64

cdef extern from "_arith.h" nogil:
    enum:
        AK_OK
        AK_DIV0
        AK_DOMAIN
        AK_RANGE
    double rvm_w2f(i64 w)
    i64 rvm_f2w(double d)
    i64 rvm_fixed_mul(i64 a, i64 b, int F)
    int rvm_fixed_div(i64 a, i64 b, int F, i64* out)
    int rvm_int_div(i64 a, i64 b, i64* out)
    int rvm_lns_mul(i64 y, i64 a, int sign, i64* out)
    int rvm_fn1_value(int fn, int t, i64 x, int F, i64* out)
    int rvm_fn2_value(int fn, int t, i64 a, i64 b, int F, i64* out)
    int rvm_float_add(i64 y, double d, int sign, i64* out)
    int rvm_float_sum(i64 y, i64 a, i64 b, int dif, int sign, i64* out)
    int rvm_convert(int dst, int src, i64 x, int F, i64* out)
    int rvm_rot_fixed(i64* x, i64* y, i64 theta, int F, int inverse)
    int rvm_rot_float(i64* x, i64* y, i64 theta, int inverse, double* cs)
    int rvm_compare(i64 cc, i64 a, i64 b)
    const unsigned char RVM_CMP_MASK[8]
    bint RVM_LIKELY(bint cond)
    # function ids as _arith.h numbers them (checked against isa/functions.py below)
    enum:
        RF_SQRT, RF_EXP, RF_LOG, RF_SIN, RF_COS, RF_TAN, RF_ATAN, RF_TANH, RF_ABS, RF_SIGMOID
        RF_WRAP32
        RF2_POW, RF2_ATAN2, RF2_HYPOT, RF2_MIN, RF2_MAX, RF2_MOD, RF2_SHL, RF2_SHR, RF2_BITAND
        RF2_BITOR, RF2_BITXOR

_C_FN1 = dict(sqrt=RF_SQRT, exp=RF_EXP, log=RF_LOG, sin=RF_SIN, cos=RF_COS, tan=RF_TAN,
              atan=RF_ATAN, tanh=RF_TANH, abs=RF_ABS, sigmoid=RF_SIGMOID, wrap32=RF_WRAP32)
_C_FN2 = dict(pow=RF2_POW, atan2=RF2_ATAN2, hypot=RF2_HYPOT, min=RF2_MIN, max=RF2_MAX,
              mod=RF2_MOD, shl=RF2_SHL, shr=RF2_SHR, bitand=RF2_BITAND, bitor=RF2_BITOR,
              bitxor=RF2_BITXOR)
# the build must match the table before any per-opcode array below is filled from it
check_build(TABLE_HASH)
if {f.name: f.id for f in FN1} != _C_FN1 or {f.name: f.id for f in FN2} != _C_FN2:
    raise ImportError("the function ids of rvm/_arith.h (RF_*, RF2_*) differ from "
                      "isa/functions.py: give every function its C case, then rebuild")

cdef extern from "_isa.h" nogil:
    # every data instruction's value semantics, generated from isa/table.py (isa/cgen.py)
    enum:
        RVM_NO_CASE
    int rvm_exec(int op, i64* p0, i64* p1, i64* p2, const i64* c, int F, double* cs)
    ctypedef struct rvm_incv:
        int err
        i64 w
        double d
    rvm_incv rvm_incr(int op, i64 a, i64 b, const i64* c, int F)

cdef extern from "_adrules.h" nogil:
    void rvm_rot_adjoint(double s, double cs, double sn, double xa, double ya, double* ax,
                         double* ay, double* ath, double* xp, double* yp, double* ax0,
                         double* ay0)

cdef extern from "_deriv.h" nogil:
    ctypedef struct rvm_dual:
        double v
        double t
    enum:
        PF_NONE
        PF_ONE
        PF_MUL
        PF_FN1
        PF_FN2
    int rvm_partials(int pf, rvm_dual a, rvm_dual b, rvm_dual* da, rvm_dual* db)

cdef extern from "<math.h>" nogil:
    double cos(double)
    double sin(double)
    double ldexp(double, int)
    bint isfinite(double)
    double fabs(double)

# ---- codes shared with rvm/machine.py ----------------------------------------------------------

cdef enum:
    # why run() returned
    _R_BOUNDARY = 0
    _R_BUDGET = 1
    _R_TRAP = 2
    _R_TRACE = 3
    _R_BREAK = 4          # stopped before an instruction whose pc has a breakpoint
    _R_WATCH = 5          # stopped after an instruction that changed a watched cell
    # machine status
    _S_START = 0
    _S_END = 1
    _S_RUNNING = 2
    # trap codes; T_DIV0..T_RANGE are AK_* + 8 (see ak_trap)
    _T_COMEFROM = 1
    _T_ANCILLA = 2
    _T_POP = 3
    _T_UNDERFLOW = 4
    _T_OVERFLOW = 5
    _T_ALIAS = 6
    _T_READONLY = 7
    _T_BOUNDS = 8
    _T_DIV0 = 9
    _T_DOMAIN = 10
    _T_RANGE = 11
    _T_ASSERT = 12
    _T_BYTECODE = 13
    # which resource overflowed (trap word 0 of T_OVERFLOW)
    _OV_VALUE_STACK = 0
    _OV_CONTROL_STACK = 1
    _OV_FRAMES = 2
    _OV_PARAMS = 3
    # trap word 3 of a trap raised while binding call argument i is IN_CALL + i
    _IN_CALL = 1
    # trap word 3 of an alias trap whose cell is an index (see check_index_alias/do_return)
    _IDX_ALIAS = 1000
    _IDX_RETURN = 2000
    # trap word 3 of a bytecode trap: a kernel row whose op kernel_row has no case for
    _NO_KERNEL_CASE = 3000
    # ... and an opcode the dispatch loop has no case for
    _NO_DISPATCH_CASE = 3001
    ARG_SCALAR = -2       # arg_len of a scalar call argument
    MODE_G = 0
    MODE_L = 1
    MODE_P = 2
    MODE_X = 3
    MODE_N = 4
    TY_INT = 0
    TY_FIXED = 1
    TY_LNS = 2
    TY_FLOAT = 3
    # AD mode bits (Core.set_ad) and rule kinds (isa/derivatives.py KINDS)
    _AD_TAN = 1
    _AD_ADJ = 2
    ADK_NONE = 0
    ADK_UPDATE = 1
    ADK_NEG = 2
    ADK_SWAP = 3
    ADK_ROT = 4
    ADK_MOVE = 5
    ADK_SCOPE = 6

R_BOUNDARY, R_BUDGET, R_TRAP, R_TRACE = _R_BOUNDARY, _R_BUDGET, _R_TRAP, _R_TRACE
R_BREAK, R_WATCH = _R_BREAK, _R_WATCH
S_START, S_END, S_RUNNING = _S_START, _S_END, _S_RUNNING
T_COMEFROM, T_ANCILLA, T_POP, T_UNDERFLOW, T_OVERFLOW = range(1, 6)
T_ALIAS, T_READONLY, T_BOUNDS, T_DIV0, T_DOMAIN, T_RANGE, T_ASSERT, T_BYTECODE = range(6, 14)
OV_VALUE_STACK, OV_CONTROL_STACK, OV_FRAMES, OV_PARAMS = range(4)
IN_CALL = _IN_CALL
IDX_ALIAS, IDX_RETURN, NO_KERNEL_CASE = _IDX_ALIAS, _IDX_RETURN, _NO_KERNEL_CASE
NO_DISPATCH_CASE = _NO_DISPATCH_CASE
AD_TAN, AD_ADJ = _AD_TAN, _AD_ADJ


cdef struct VM:
    # program (read-only while running)
    i64* code
    i64* code_inv         # the same rows with every opcode replaced by its inverse
    i64 n_code
    int F
    i64 main
    i64* fn_begin
    i64* fn_end
    i64* fn_fsize
    i64* fn_nparams
    i64* fn_poff          # offset of the function's params in p_written and p_length
    i64* p_length         # declared length of a `p: T[n]` parameter, -1 for any
    uint8_t* p_written
    i64* xt_base
    i64* xt_len
    i64* xt_index
    i64* cs_func
    i64* cs_off           # offset of the site's args in arg_word / arg_len
    i64* arg_word
    i64* arg_len          # ARG_SCALAR, a static array length, or -1 (the caller's parameter)
    i64 const_lo
    i64 const_hi
    uint8_t* xflag        # per pc: an operand of the row is indexed (X): check index aliasing
    # memory: [globals | consts | frame region]
    i64* mem
    i64 n_mem
    i64 n_static
    i64 ftop              # first free cell of the frame region
    # value stack
    i64* stack
    i64 stack_cap
    i64 sp
    # parameter table: absolute address and length of each bound parameter
    i64* pt_addr
    i64* pt_len
    i64 pt_cap
    i64 ptop
    # control stack
    i64* fr_func
    i64* fr_fp
    i64* fr_pp
    i64* fr_ret
    i64* fr_fdir
    i64 max_depth
    i64 depth
    # state between instructions
    i64 pc
    int came
    int D
    i64 t
    int status
    int trace_ack         # the trace at pc was reported: run it instead of stopping again
    # debugging: per-pc breakpoint flags (NULL: none) and watched cells with their last values
    uint8_t* brk
    int brk_skip          # the next run does not stop at a breakpoint at its first pc
    i64* watch_addr
    i64* watch_val
    i64 n_watch
    i64 watch_hit         # index of the watched cell that changed
    i64 watch_pc          # the instruction that changed it
    # loop kernels (run_kernel): per direction and pc of a back-edge jmp, its kernel or -1
    i64* kern
    i64* k_len
    i64* k_join
    i64* k_jmp
    i64* k_rows
    i64* k_shape          # run_reduce's counter row of the kernel, or -1
    i64* k_induct         # else 1 when run_induct can run it
    int use_kernels
    # automatic differentiation (docs/ad.md): mode bits, dual arrays parallel to mem and to
    # the value stack (NULL until set_ad), and the events the rules noticed
    int ad
    double* tan
    double* adj
    double* adjt
    double* stan
    double* sadj
    double* sadjt
    i64 ev_release        # a cell left scope (or was overwritten) with a nonzero tangent
    double ev_release_max
    i64 ev_release_pc
    i64 ev_nonfinite      # a derivative became inf or nan
    i64 ev_nonfinite_pc
    i64 rot_w             # the angle word of the last float rotation, with its cos and sin
    double rot_cs[2]
    # statistics since reset
    i64 steps
    i64 peak_sp
    i64 peak_frame
    i64 peak_depth
    # trap record: code, where, the opcode it ran as, its effective direction, 4 words
    int trap
    i64 trap_pc
    int trap_op
    int trap_e
    i64 tv[4]


# op -> (type of its cells, conversion source type); filled from isa.table at import
cdef int OP_TYPE[N_OPCODES]
cdef int CVT_SRC[N_OPCODES]
# bit s set: slot s of the row is a cell the instruction writes (Y) / reads (A)
cdef int OP_YMASK[N_OPCODES]
cdef int OP_AMASK[N_OPCODES]
for _op in OPS:
    OP_TYPE[_op.code] = int(_op.types[0]) if _op.types else -1
    CVT_SRC[_op.code] = int(_op.types[1]) if len(_op.types) > 1 else -1
    OP_YMASK[_op.code] = sum(1 << (s + 1) for s, k in enumerate(_op.operands) if k == "y")
    OP_AMASK[_op.code] = sum(1 << (s + 1) for s, k in enumerate(_op.operands) if k == "a")

# op -> differentiation rule kind, sign and partial-function id (isa/derivatives.py)
cdef int AD_KIND[N_OPCODES]
cdef int AD_SIGN[N_OPCODES]
cdef int AD_PF[N_OPCODES]
for _op in OPS:
    _rule = RULES[_op.name]
    AD_KIND[_op.code] = 0 if _rule is None else KINDS.index(_rule.kind)
    AD_SIGN[_op.code] = 1 if _rule is None else _rule.sign
    AD_PF[_op.code] = pf_id(_op)
    if AD_KIND[_op.code] == ADK_UPDATE and AD_PF[_op.code] == PF_NONE:
        AD_KIND[_op.code] = ADK_NONE       # a constant increment: no dual changes


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
    OP_ROTW[_op.code] = _op.family in ("rot", "irot") and _op.types == (FLOAT,)


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


# ---- loop kernels: a simple loop runs without the dispatch loop (docs/machine.md) --------------
#
# A loop whose back edge is a jmp to its paired join, with a body of plain cell updates on
# direct operands (global, local, parameter), is compiled when the Core is built (per direction
# of execution) into a kernel: once the loop has been entered, whole iterations run here with
# the operands resolved once and the loop's jmp and join checked in place.  The steps, the
# order of the updates, the traps and the state are exactly those of the dispatch loop (a
# trap stops at the same instruction with nothing changed); only the bookkeeping per
# instruction is gone.  Breakpoints and watched cells disable kernels; AD rules still run.

DEF KMAX = 8              # body rows of a kernel
# opcodes a kernel body may contain (their operands resolved once per entry): every instruction
# with a body in isa/table.py, which kernel_row runs as the dispatch loop does (rvm_exec)
KERNEL_OPS = frozenset(_op.name for _op in OPS if has_body(_op))
assert KERNEL_OPS <= {_op.name for _op in OPS}, KERNEL_OPS - {_op.name for _op in OPS}
_KERNEL_CODES = frozenset(OPS[i].code for i in range(len(OPS)) if OPS[i].name in KERNEL_OPS)
_TWO_TARGETS = frozenset(OPS[i].code for i in range(len(OPS)) if len(OPS[i].targets) == 2)

def _kernel_row(row) -> bool:
    """A row a kernel can run: a plain update or rotation whose operands are distinct words
    (the same word twice is an alias, which the dispatch loop traps on); indexed (X) operands
    are resolved per iteration."""
    op = int(row[0])
    if op not in _KERNEL_CODES:
        return False
    words = [int(row[CSLOT[op][k]]) for k in range(NCELL[op])]
    if any((w & 7) not in (MODE_G, MODE_L, MODE_P, MODE_X) for w in words):
        return False
    if words[0] in words[1:]:
        return False
    # rot/irot write two cells: the second target is neither the first nor the angle
    return not (op in _TWO_TARGETS and words[1] in words[2:])


def _direct_cond(row) -> bool:
    return (int(row[1]) & 15) == 0 or all((int(row[s]) & 7) in (MODE_G, MODE_L, MODE_P)
                                          for s in (2, 3))


cdef enum:
    # (all nonzero: -_K_EXIT is also back_edge's "stop", where 0 means "go on")
    _K_EXIT = 1           # the loop ended: pc is past its jmp
    _K_BUDGET = 2         # not enough budget for another iteration: pc at the body's start
    _K_DECLINED = 3       # operands alias at run time: the dispatch loop runs it instead


cdef void x_operand(VM* vm, i64 w, i64* mem, i64* fpm, i64* pa, i64** base, i64* length,
                    i64** idxcell) noexcept nogil:
    """The array base, length and index cell of the indexed operand word w in this frame (as
    opnd_slow finds them; fixed while a loop kernel runs)."""
    cdef i64 q = w >> 3, bw = vm.xt_base[q], bp = bw >> 3, n = vm.xt_len[q]
    cdef i64* pl = vm.pt_len + (pa - vm.pt_addr)
    if (bw & 7) == MODE_G:
        base[0] = mem + bp
    elif (bw & 7) == MODE_L:
        base[0] = fpm + bp
    else:
        base[0] = mem + pa[bp]
        if n < 0 or n > pl[bp]:
            n = pl[bp]
    length[0] = n
    idxcell[0] = index_cell(vm, w, mem, fpm, pa)


cdef inline i64* x_cell(VM* vm, i64* base, i64 n, i64 q, i64 v) noexcept nogil:
    """Cell v of the array of indexed-operand entry q (base, length n), or NULL with the
    bounds trap's values recorded in vm.tv (as opnd_slow's caller reports them)."""
    if <u64>v >= <u64>n:
        vm.tv[0] = q
        vm.tv[1] = v
        vm.tv[2] = n
        vm.tv[3] = 0
        return NULL
    return base + v


# per op: which of its cells (in operand order: y, a, b as kernel rows name them) must differ,
# as the dispatch loop checks them (isa/cgen.py distinct_pairs): bit 0 y/a, bit 1 y/b, bit 2 a/b
cdef int KALIAS[N_OPCODES]
for _op in OPS:
    KALIAS[_op.code] = 0
    if has_body(_op):
        _cells = [n for n, k in zip(operand_names(_op), _op.operands) if k in ("y", "a")]
        for _p, _q in distinct_pairs(_op):
            _i, _j = sorted((_cells.index(_p), _cells.index(_q)))
            KALIAS[_op.code] |= {(0, 1): 1, (0, 2): 2, (1, 2): 4}[(_i, _j)]


cdef inline bint kernel_alias(int op, i64* y, i64* a, i64* b) noexcept nogil:
    """The operand aliasing the dispatch loop traps on, for a kernel op (KALIAS): a source that
    is a target, or two targets that must differ (a swap may swap a cell with itself).  (Two
    equal sources, y += a*a, are fine.)"""
    cdef int m = KALIAS[op]
    return ((m & 1) and y == a) or ((m & 2) and y == b) or ((m & 4) and a == b)


# A two-row body of one update `y op= f(sources)` and one counter step `i += d`, with the loop's
# conditions reading only i and cells the body does not write (a sum, a dot product, T1's
# accumulate), runs with y and i held in registers: one update, one add and two compares per
# iteration.  The arithmetic and its order are those of the dispatch loop, so the results
# are bit-identical; a body whose cells alias at run time goes to the general kernel.
# The updates it runs, by family: how the increment is formed (a source, the immediate, the
# product of two sources) and its sign; the eligible opcodes are derived from this map, so an
# update run_reduce has no form for cannot be eligible.
cdef enum:
    RD_NONE = 0
    RD_SRC = 1
    RD_IMM = 2
    RD_MUL = 3
# (by the family of the pair's + law; the sign is the table's)
_REDUCE_FORMS = {"add": RD_SRC, "addi": RD_IMM, "addmul": RD_MUL}
cdef int REDUCE_FORM[N_OPCODES]
cdef int REDUCE_SIGN[N_OPCODES]
for _op in OPS:
    REDUCE_FORM[_op.code] = _REDUCE_FORMS.get(positive_family(_op), RD_NONE) \
        if _op.law == LAW_ADD else RD_NONE
    REDUCE_SIGN[_op.code] = _op.sign
    if REDUCE_FORM[_op.code] != RD_NONE:
        assert len(_op.types) == 1 and int(_op.types[0]) in (TY_INT, TY_FIXED, TY_FLOAT), _op
_REDUCE_UPDATES = frozenset(_op.code for _op in OPS if REDUCE_FORM[_op.code] != RD_NONE)
# counter rows: an int update y +/-= 1 or an immediate (inc, dec, addi, subi), from the table
cdef bint IS_COUNTER[N_OPCODES]
for _op in OPS:
    IS_COUNTER[_op.code] = _op.law == LAW_ADD and _op.types == (INT,) \
        and _op.operands in (("y",), ("y", "imm"))
_COUNTERS = frozenset(_op.code for _op in OPS if IS_COUNTER[_op.code])


cdef inline i64 counter_step(int op, i64* c, int F) noexcept nogil:
    """What a counter row (IS_COUNTER) adds to its cell: f of its entry in isa/table.py
    (rvm_incr), with the table's sign."""
    cdef i64 d = rvm_incr(op, 0, 0, c, F).w
    return d if REDUCE_SIGN[op] > 0 else <i64>(0 - <u64>d)


def _reduce_shape(code, rows) -> int:
    """The body's counter row (0 or 1) when run_reduce can run the loop, else -1."""
    if len(rows) != 2:
        return -1
    for ci in (0, 1):
        cr, ur = code[rows[ci]], code[rows[1 - ci]]
        if int(cr[0]) in _COUNTERS and int(ur[0]) in _REDUCE_UPDATES \
                and (int(cr[1]) & 7) != MODE_X and (int(ur[1]) & 7) != MODE_X:
            return ci
    return -1


cdef struct CounterTest:
    # a loop condition as a test of the counter: true iff (u64)(cnt - lo) <= span, xor neg
    i64 lo
    u64 span
    bint neg


cdef inline int back_edge(CounterTest jmp, CounterTest join, i64 jv, i64 tv) noexcept nogil:
    """After an iteration, with the values of the counters the two conditions test: 0 to go
    on, -_K_EXIT when the loop's jmp falls through, _T_COMEFROM when its join's come-from
    check fails."""
    if ((<u64>(jv - jmp.lo) <= jmp.span) == jmp.neg):
        return -_K_EXIT
    if ((<u64>(tv - join.lo) <= join.span) == join.neg):
        return _T_COMEFROM
    return 0


cdef bint counter_cond(i64 cc, bint a_cnt, bint b_cnt, i64 a, i64 b,
                       CounterTest* out) noexcept nogil:
    """An int condition `a REL b` of a loop, where a and/or b may be the counter and the other
    operand is fixed, as a CounterTest (in what follows `a` is the fixed operand).  Returns 0
    when the condition is not on int words (the caller then declines)."""
    cdef int m, t = <int>((cc >> 4) & 3)
    cdef i64* lo = &out.lo
    cdef u64* span = &out.span
    cdef bint* neg = &out.neg
    lo[0] = INT64_MIN
    span[0] = UINT64_MAX
    neg[0] = 0
    if (cc & 15) == 0:
        return 1
    if not a_cnt and not b_cnt:
        neg[0] = not rvm_compare(cc, a, b)
        return 1
    if t != TY_INT and t != TY_FIXED:
        return 0
    m = RVM_CMP_MASK[cc & 7]
    if a_cnt and b_cnt:                   # cnt REL cnt: always ==
        neg[0] = not (m & 2)
        return 1
    if b_cnt:                             # v REL cnt is cnt REL' v: swap < and >
        m = (m & 2) | ((m & 1) << 2) | ((m >> 2) & 1)
    else:                                 # cnt REL v
        a = b
    m &= 7
    if m == 7 or m == 0:
        neg[0] = m == 0
    elif m == 2 or m == 5:                # == and !=
        lo[0] = a
        span[0] = 0
        neg[0] = m == 5
    elif m == 1 or m == 3:                # < and <=: [MIN, a - 1] or [MIN, a]
        if m == 1 and a == INT64_MIN:
            neg[0] = 1
        else:
            span[0] = <u64>a - <u64>INT64_MIN - (m == 1)
    else:                                 # > and >=: [a + 1, MAX] or [a, MAX]
        if m == 4 and a == INT64_MAX:
            neg[0] = 1
        else:
            lo[0] = <i64>(<u64>a + (m == 4))
            span[0] = <u64>INT64_MAX - <u64>lo[0]
    return 1


cdef inline bint _inside(i64* p, i64* base, i64 n) noexcept nogil:
    return base <= p < base + n


cdef int kernel_exit(VM* vm, int tc, i64 lft, i64 at, i64 J, i64 T, int e, int op,
                     i64* left, i64* pc_out, int* op_out) noexcept nogil:
    """Where a specialized kernel leaves the machine (as run_kernel does): past the jmp, at
    the join that traps, at the row `at` of the body that trapped (op) after `at` rows of
    the iteration ran, or at the body's start when the budget is used up."""
    if tc == -_K_EXIT:
        left[0] = lft - 1
        pc_out[0] = J + e
    elif tc == _T_COMEFROM:
        left[0] = lft - 1                 # the jmp ran; the join traps
        vm.tv[0] = 0
        vm.tv[1] = 1
        pc_out[0] = T
        op_out[0] = OP_JOIN
    elif tc > 0:
        left[0] = lft - at
        pc_out[0] = (T + e) + at * e
        op_out[0] = op
    else:
        left[0] = lft
        pc_out[0] = T + e
    return tc


cdef struct ReduceLoop:
    # the state run_reduce's tight loops carry in registers
    i64 cnt
    i64 delta
    i64 lft
    CounterTest jmp
    CounterTest join


ctypedef fused Acc:
    double                # a float target
    i64                   # an int or fixed target (wrapping)


cdef int reduce_loop(ReduceLoop* L, Acc* acc, Acc d, double* ga, double gy) noexcept nogil:
    """acc += d (d signed) every iteration, and ga -= gy (the rule's one changing dual, in a
    register; dropped when unused): the update with a loop-invariant increment.  Returns
    run_reduce's code; a float result that is not finite traps before acc changes."""
    cdef Acc a = acc[0], r
    cdef double g = ga[0]
    cdef i64 cnt = L.cnt, lft = L.lft, delta = L.delta
    cdef CounterTest jt = L.jmp, tt = L.join
    cdef int tc = -_K_BUDGET, t
    while lft >= 4:
        if Acc is double:
            r = a + d
            if not isfinite(r):
                tc = ak_trap(AK_RANGE)
                break
        else:
            r = <i64>(<u64>a + <u64>d)
        a = r
        g -= gy
        cnt = <i64>(<u64>cnt + <u64>delta)
        lft -= 2
        t = back_edge(jt, tt, cnt, cnt)
        if t:
            tc = t
            break
        lft -= 2
    acc[0] = a
    ga[0] = g
    L.cnt = cnt
    L.lft = lft
    return tc


cdef int run_reduce(VM* vm, i64 k, i64* code, int e, i64* mem, i64* fpm, i64* pa, i64* left,
                    i64* pc_out, int* op_out, int ad) noexcept nogil:
    """run_kernel for a counted update (see _reduce_shape); -_K_DECLINED when the cells alias
    at run time."""
    cdef i64 J = vm.k_jmp[k], T = vm.k_join[k]
    cdef i64* rows = vm.k_rows + k * KMAX
    cdef int ci = <int>vm.k_shape[k]
    cdef i64 urow = rows[1 - ci], crow = rows[ci]
    cdef i64* cu = code + urow * 6
    cdef i64* cc = code + crow * 6
    cdef int op = <int>cu[0], cop = <int>cc[0], ty = OP_TYPE[op], F = vm.F
    cdef int nsrc = NCELL[op] - 1, s, sg = REDUCE_SIGN[op], pf = AD_PF[op], form = REDUCE_FORM[op]
    cdef bint isf = ty == TY_FLOAT, mul = form == RD_MUL, inv = 1, backward = vm.D < 0
    cdef bint reg_adj = 0       # the rule's one changing dual is in a register (ga)
    cdef i64* gcell = NULL
    cdef i64* yp = opnd(vm, cu[1], mem, fpm, pa)
    cdef i64* ip = opnd(vm, cc[1], mem, fpm, pa)
    cdef i64* sp[2]
    cdef i64* xb[2]
    cdef i64 xl[2]
    cdef i64 xq[2]
    cdef bint isx[2]
    cdef i64* xi
    cdef i64* p
    cdef i64* cp[4]
    cdef i64 jcc, tcc, delta, cnt, acc, di = 0, av, bv, w
    cdef double accf, df = 0.0, gy = 0.0, ga = 0.0, r
    cdef double* A = vm.adj
    cdef double* Tn = vm.tan
    cdef i64 lft = left[0]
    cdef int tc, t
    cdef ReduceLoop RL
    if form == RD_NONE or nsrc != (2 if form == RD_MUL else 1 if form == RD_SRC else 0):
        # (not eligible by construction) no register form: the general kernel, whose
        # kernel_row runs the op or traps naming it
        return -_K_DECLINED
    delta = 1 if cop == OP_INC_I else -1 if cop == OP_DEC_I else \
        cc[2] if cop == OP_ADDI_I else <i64>(0 - <u64>cc[2])
    if yp == ip:
        return -_K_DECLINED
    # the sources: a direct cell (read once: the body writes only y and i) or an array cell
    # indexed by the counter
    for s in range(nsrc):
        w = cu[2 + s]
        isx[s] = (w & 7) == MODE_X
        sp[s] = yp
        if isx[s]:
            xq[s] = w >> 3
            x_operand(vm, w, mem, fpm, pa, &xb[s], &xl[s], &xi)
            if xi != ip or _inside(yp, xb[s], xl[s]) or _inside(ip, xb[s], xl[s]):
                return -_K_DECLINED
            inv = 0
        else:
            sp[s] = opnd(vm, w, mem, fpm, pa)
            if sp[s] == yp or sp[s] == ip:
                return -_K_DECLINED
    # the conditions of the back edge (jmp) and of its join
    jcc = code[J * 6 + 1]
    tcc = code[T * 6 + 1]
    for s in range(4):
        cp[s] = ip
        if ((jcc if s < 2 else tcc) & 15) != 0:
            cp[s] = opnd(vm, code[(J if s < 2 else T) * 6 + 2 + (s & 1)], mem, fpm, pa)
        if cp[s] == yp:
            return -_K_DECLINED
    if not counter_cond(jcc, cp[0] == ip, cp[1] == ip, cp[0][0], cp[1][0], &RL.jmp) \
            or not counter_cond(tcc, cp[2] == ip, cp[3] == ip, cp[2][0], cp[3][0], &RL.join):
        return -_K_DECLINED
    # the increment when it is loop-invariant.  (Written out for the three forms rather than
    # through rvm_incr of rvm/_isa.h: with that switch inlined twice gcc stops inlining
    # run_reduce into run_kernel and keeps the accumulator in memory, 2-3x slower on T1.
    # REDUCE_FORM restricts the ops to these forms; test_every_opcode_is_covered compares
    # the result with the dispatch loop's for each.)
    if nsrc == 0:
        di = cu[2]
    elif inv:
        av = sp[0][0]
        bv = sp[nsrc - 1][0]
        if isf:
            df = rvm_w2f(av) * rvm_w2f(bv) if mul else rvm_w2f(av)
        else:
            di = rvm_fixed_mul(av, bv, F) if (mul and ty == TY_FIXED) else \
                <i64>(<u64>av * <u64>bv) if mul else av
    if isf and nsrc == 0:
        df = rvm_w2f(di)
    # the rule of y += s*a with a a direct cell, as ad_inline runs it, in a register: in the
    # adjoint sweep abar -= s*ybar with ybar constant, in tangent mode y' += s*a' (written
    # y' -= -(s*a'), the same number) with a' constant
    if AD_KIND[op] and pf == PF_ONE and inv:
        if ad == _AD_ADJ and backward:
            reg_adj = 1
            gcell = sp[0]
            gy = AD_SIGN[op] * A[yp - mem]
        elif ad == _AD_TAN:
            reg_adj = 1
            gcell = yp
            gy = -(AD_SIGN[op] * Tn[sp[0] - mem])
        if reg_adj:
            ga = (A if ad == _AD_ADJ else Tn)[gcell - mem]
    cnt = ip[0]
    acc = yp[0]
    accf = (<double*>yp)[0]           # a float target as a double: it stays in a float
    tc = -_K_BUDGET
    if inv and (ad == 0 or reg_adj):
        RL.cnt = cnt
        RL.delta = delta
        RL.lft = lft
        if isf:
            tc = reduce_loop(&RL, &accf, df if sg > 0 else -df, &ga, gy)
        else:
            tc = reduce_loop(&RL, &acc, <i64>(di if sg > 0 else <i64>(0 - <u64>di)), &ga,
                             gy)
        cnt = RL.cnt
        lft = RL.lft
        if tc > 0 and ci == 0:            # the counter ran before the update trapped
            cnt = <i64>(<u64>cnt + <u64>delta)
    while lft >= 4 and not (inv and (ad == 0 or reg_adj)):
        if ci == 0:
            cnt = <i64>(<u64>cnt + <u64>delta)
        if not inv:
            # as the dispatch loop: the last operand out of bounds names the trap
            for s in range(nsrc):
                if isx[s]:
                    p = x_cell(vm, xb[s], xl[s], xq[s], cnt)
                    if p == NULL:
                        tc = _T_BOUNDS
                    else:
                        sp[s] = p
            if tc > 0:
                break
            av = sp[0][0]
            bv = sp[nsrc - 1][0]
            if isf:
                df = rvm_w2f(av) * rvm_w2f(bv) if mul else rvm_w2f(av)
            else:
                di = rvm_fixed_mul(av, bv, F) if (mul and ty == TY_FIXED) else \
                    <i64>(<u64>av * <u64>bv) if mul else av
        if isf:
            r = accf + df if sg > 0 else accf - df
            if not isfinite(r):
                tc = ak_trap(AK_RANGE)
                break
            accf = r
        else:
            acc = <i64>(<u64>acc + <u64>di) if sg > 0 else <i64>(<u64>acc - <u64>di)
        if ad:
            if reg_adj:
                ga -= gy
            elif AD_KIND[op]:
                if isf:
                    yp[0] = rvm_f2w(accf)
                else:
                    yp[0] = acc
                if not ad_inline(op, yp, sp[0], mem, ad, backward, A, Tn):
                    ad_rule(vm, op, cu, yp, sp[0], sp[1] if nsrc == 2 else yp, mem, urow)
        if ci == 1:
            cnt = <i64>(<u64>cnt + <u64>delta)
        lft -= 2
        t = back_edge(RL.jmp, RL.join, cnt, cnt)
        if t:
            tc = t
            break
        lft -= 2
    ip[0] = cnt
    if isf:                               # register through the tight loop
        (<double*>yp)[0] = accf
    else:
        yp[0] = acc
    if reg_adj:
        (A if ad == _AD_ADJ else Tn)[gcell - mem] = ga
    # a trapped update ran after the counter or not
    return kernel_exit(vm, tc, lft, 1 - ci, J, T, e, op, left, pc_out, op_out)


# A body of up to IMAX counter steps (inc/dec/addi/subi of int cells no other row touches)
# and other kernel rows (the main rows, e.g. a rotation of indexed cells), with the loop's
# conditions on a counter and on cells the body does not write, runs with the counters in
# registers: an indexed operand is the array base plus a register (bounds checked per
# iteration), or a cell fixed for the loop when its index cell is not written in the body.
DEF IMAX = 3


def _induct_shape(code, rows) -> int:
    """1 when run_induct can run the loop (1 to IMAX counter rows and at least one other row),
    else -1."""
    counters = sum(1 for r in rows
                   if int(code[r][0]) in _COUNTERS and (int(code[r][1]) & 7) != MODE_X)
    return 1 if 1 <= counters <= IMAX and counters < len(rows) else -1


cdef inline bint _written(i64* cell, int nm, int* mops, bint* isx, i64** fixed, i64** xb,
                          i64* xl) noexcept nogil:
    """A target of one of the nm main rows is, or may be (an indexed target whose array holds
    it), `cell`."""
    cdef int m, t
    for m in range(nm):
        for t in range(NCELL[mops[m]]):
            if CTMASK[mops[m]] & (1 << t):
                if isx[m * 3 + t]:
                    if _inside(cell, xb[m * 3 + t], xl[m * 3 + t]):
                        return 1
                elif fixed[m * 3 + t] == cell:
                    return 1
    return 0


cdef inline int row_cells(VM* vm, int m, int nc, int* xi, i64* reg, i64** xb, i64* xl,
                          i64* xq, i64** fixed, i64** p) noexcept nogil:
    """The cells of main row m this iteration (p): fixed ones, or an array base plus its
    counter, bounds checked (the last operand out of bounds names the trap)."""
    cdef int s, q, tc = 0
    cdef i64* cell
    for s in range(nc):
        q = m * 3 + s
        if xi[q] >= 0:
            cell = x_cell(vm, xb[q], xl[q], xq[q], reg[xi[q]])
            if cell == NULL:
                tc = _T_BOUNDS
            else:
                p[s] = cell
        else:
            p[s] = fixed[q]
    return tc


cdef int run_induct(VM* vm, i64 k, i64* code, int e, i64* mem, i64* fpm, i64* pa, i64* left,
                    i64* pc_out, int* op_out, int ad) noexcept nogil:
    """run_kernel for a body of counter rows and main rows (see _induct_shape);
    -_K_DECLINED when cells alias at run time, or an index fixed for the loop is out of bounds
    (the general kernel then traps at the right step)."""
    cdef i64 L = vm.k_len[k], J = vm.k_jmp[k], T = vm.k_join[k]
    cdef i64* rows = vm.k_rows + k * KMAX
    cdef int F = vm.F, nI = 0, nm = 0, r, s, j, m, q, cop, op, nc, tc = -_K_BUDGET, at = 0
    cdef bint backward = vm.D < 0
    cdef int role[KMAX]         # per row: counter j (>= 0) or main row -1 - m
    cdef i64* ip[IMAX]          # the counters' cells, their values and steps
    cdef i64 reg[IMAX]
    cdef i64 dl[IMAX]
    cdef int mops[KMAX]         # the main rows: op and row
    cdef i64 mrow[KMAX]
    # per main row and operand slot: the counter indexing it or -1 (a fixed cell)
    cdef int xi[KMAX * 3]
    cdef bint fixed_row[KMAX]   # every cell of the main row is fixed for the loop
    cdef bint isx[KMAX * 3]
    cdef i64* fixed[KMAX * 3]
    cdef i64* xb[KMAX * 3]
    cdef i64 xl[KMAX * 3]
    cdef i64 xq[KMAX * 3]
    cdef i64* xc[KMAX * 3]
    cdef i64* p[3]
    cdef i64* cp[4]
    cdef int cj[4]
    cdef int ct[2]              # the counter each condition tests
    cdef CounterTest ctest[2]
    cdef i64 cc_, v, w, vx, vy
    cdef i64* c
    cdef i64* y
    cdef i64* a
    cdef i64* b
    cdef double* A = vm.adj
    cdef double* Tn = vm.tan
    cdef i64 lft = left[0]
    for r in range(L):
        c = code + rows[r] * 6
        cop = <int>c[0]
        if IS_COUNTER[cop] and (c[1] & 7) != MODE_X:
            ip[nI] = opnd(vm, c[1], mem, fpm, pa)
            dl[nI] = counter_step(cop, c, F)
            for j in range(nI):
                if ip[j] == ip[nI]:
                    return -_K_DECLINED
            role[r] = nI
            nI += 1
        else:
            mops[nm] = cop
            mrow[nm] = rows[r]
            role[r] = -1 - nm
            nm += 1
    # the main rows' cells: a counter (or an array holding one) is read and written only
    # through its register
    for m in range(nm):
        c = code + mrow[m] * 6
        for s in range(NCELL[mops[m]]):
            q = m * 3 + s
            w = c[CSLOT[mops[m]][s]]
            isx[q] = (w & 7) == MODE_X
            xi[q] = -1
            if isx[q]:
                xq[q] = w >> 3
                x_operand(vm, w, mem, fpm, pa, &xb[q], &xl[q], &xc[q])
                for j in range(nI):
                    if _inside(ip[j], xb[q], xl[q]):
                        return -_K_DECLINED
                    if xc[q] == ip[j]:
                        xi[q] = j
            else:
                fixed[q] = opnd(vm, w, mem, fpm, pa)
                for j in range(nI):
                    if fixed[q] == ip[j]:
                        return -_K_DECLINED
    # an index fixed for the loop: its cell is not written in the body and it is in bounds
    for q in range(nm * 3):
        if q % 3 < NCELL[mops[q // 3]] and isx[q] and xi[q] < 0:
            if _written(xc[q], nm, mops, isx, fixed, xb, xl):
                return -_K_DECLINED
            v = xc[q][0]
            if <u64>v >= <u64>xl[q]:
                return -_K_DECLINED
            fixed[q] = xb[q] + v
    # the conditions: on one counter, or on cells the body does not write
    for q in range(2):
        c = code + (J if q == 0 else T) * 6
        cc_ = c[1]
        for s in range(2):
            cp[2 * q + s] = ip[0]
            if (cc_ & 15) != 0:
                cp[2 * q + s] = opnd(vm, c[2 + s], mem, fpm, pa)
            cj[2 * q + s] = -1
            for j in range(nI):
                if cp[2 * q + s] == ip[j]:
                    cj[2 * q + s] = j
            if cj[2 * q + s] < 0 and _written(cp[2 * q + s], nm, mops, isx, fixed, xb, xl):
                return -_K_DECLINED
        if cj[2 * q] >= 0 and cj[2 * q + 1] >= 0 and cj[2 * q] != cj[2 * q + 1]:
            return -_K_DECLINED
        ct[q] = cj[2 * q] if cj[2 * q] >= 0 else cj[2 * q + 1] if cj[2 * q + 1] >= 0 else 0
        if not counter_cond(cc_, cj[2 * q] >= 0, cj[2 * q + 1] >= 0, cp[2 * q][0],
                            cp[2 * q + 1][0], &ctest[q]):
            return -_K_DECLINED
    # a main row whose cells are all fixed for the loop: resolved and alias-checked once
    for m in range(nm):
        fixed_row[m] = 1
        for s in range(NCELL[mops[m]]):
            if xi[m * 3 + s] >= 0:
                fixed_row[m] = 0
        if fixed_row[m]:
            y = fixed[m * 3]
            a = fixed[m * 3 + 1] if NCELL[mops[m]] > 1 else y
            b = fixed[m * 3 + 2] if NCELL[mops[m]] > 2 else a
            if kernel_alias(mops[m], y, a, b):
                return -_K_DECLINED
    for j in range(nI):
        reg[j] = ip[j][0]
    while lft >= L + 2:
        for r in range(L):
            if role[r] >= 0:
                reg[role[r]] = <i64>(<u64>reg[role[r]] + <u64>dl[role[r]])
                continue
            m = -1 - role[r]
            op = mops[m]
            nc = NCELL[op]
            if fixed_row[m]:              # cells fixed for the loop, checked at entry
                y = fixed[m * 3]
                a = fixed[m * 3 + 1] if nc > 1 else y
                b = fixed[m * 3 + 2] if nc > 2 else a
            else:
                # the row's cells, as the dispatch loop checks them: the last operand out
                # of bounds names the trap, then aliasing
                tc = row_cells(vm, m, nc, xi, reg, xb, xl, xq, fixed, p)
                if tc > 0:
                    break
                y = a = b = p[0]
                if nc > 1:
                    a = b = p[1]
                    if nc > 2:
                        b = p[2]
                if kernel_alias(op, y, a, b):
                    tc = _T_ALIAS
                    break
            if op == OP_ROT_F or op == OP_IROT_F:
                # a float rotation and its rule without a dispatch (Givens sweeps)
                vx = y[0]
                vy = a[0]
                tc = rvm_rot_float(&vx, &vy, b[0], op == OP_IROT_F, vm.rot_cs)
                if tc:
                    tc = ak_trap(tc)
                    break
                y[0] = vx
                a[0] = vy
                vm.rot_w = b[0]
                tc = -_K_BUDGET
                if ad:
                    ad_rot(vm, AD_SIGN[op], TY_FLOAT, y - mem, a - mem, b - mem, vm.rot_cs[0],
                           AD_SIGN[op] * vm.rot_cs[1], mem, mrow[m])
                continue
            tc = kernel_row(vm, op, y, a, b, code + mrow[m] * 6, F)
            if tc:
                break
            tc = -_K_BUDGET
            if ad and AD_KIND[op] and not ad_inline(op, y, a, mem, ad, backward, A, Tn):
                ad_rule(vm, op, code + mrow[m] * 6, y, a, b, mem, mrow[m])
        if tc > 0:
            at = r
            break
        lft -= L
        q = back_edge(ctest[0], ctest[1], reg[ct[0]], reg[ct[1]])
        if q:
            tc = q
            break
        lft -= 2
    for j in range(nI):
        ip[j][0] = reg[j]
    return kernel_exit(vm, tc, lft, at, J, T, e, mops[-1 - role[at]] if tc > 0 else 0, left,
                       pc_out, op_out)


cdef inline int exec_trap(VM* vm, int op, int tc, int where) noexcept nogil:
    """The trap code of rvm_exec's result tc: an AK_* code, or no case for op (where)."""
    if tc == RVM_NO_CASE:
        return no_case(vm, op, where)
    return ak_trap(tc)


cdef inline int kernel_row(VM* vm, int op, i64* y, i64* a, i64* b, i64* c,
                           int F) noexcept nogil:
    """Run one kernel body row (c) on resolved cells (the instruction's body of isa/table.py,
    as the dispatch loop runs it); returns a trap code, with nothing changed."""
    cdef int tc = rvm_exec(op, y, a, b, c, F, vm.rot_cs)
    if tc:
        return exec_trap(vm, op, tc, _NO_KERNEL_CASE)
    if OP_ROTW[op]:
        vm.rot_w = b[0]                   # the angle whose cos and sin rot_cs holds
    return 0


cdef int run_kernel(VM* vm, i64 k, i64* code, int e, i64* mem, i64* fpm, i64* pa, i64* left,
                    i64* pc_out, int* op_out, int ad) noexcept nogil:
    """Run whole iterations of kernel k, entered with pc at the body's first row.  Returns a
    trap code (pc_out/op_out: the faulting row) or -_K_EXIT/-_K_BUDGET/-_K_DECLINED."""
    cdef i64 L = vm.k_len[k], T = vm.k_join[k], J = vm.k_jmp[k], r
    cdef i64* rows = vm.k_rows + k * KMAX
    cdef i64* ys[KMAX]
    cdef i64* as_[KMAX]
    cdef i64* bs[KMAX]
    cdef int ops[KMAX]
    cdef bint dyn[KMAX]           # the row has an indexed (X) operand: resolved per iteration
    # per row and operand slot: the cell (direct operands), or for an indexed operand its
    # array base, length and index cell, fixed while the loop runs (see x_operand)
    cdef i64* sp[KMAX * 3]
    cdef i64* xbase[KMAX * 3]
    cdef i64 xlen[KMAX * 3]
    cdef i64* xidx[KMAX * 3]
    cdef i64 xtab[KMAX * 3]
    cdef bint isx[KMAX * 3]
    cdef i64* p3[3]
    cdef int s3, t3, bad, nc, ym
    cdef i64 w
    cdef i64* c
    cdef i64* ja
    cdef i64* jb
    cdef i64* ta
    cdef i64* tb
    cdef i64 jcc, tcc
    cdef int op, tc
    cdef double* A = vm.adj
    cdef double* Tn = vm.tan
    # in locals: a write through a cell pointer could alias anything reached by a pointer
    cdef i64 lft = left[0]
    cdef int F = vm.F
    cdef bint backward = vm.D < 0
    if vm.k_shape[k] >= 0:
        tc = run_reduce(vm, k, code, e, mem, fpm, pa, left, pc_out, op_out, ad)
        if tc != -_K_DECLINED:
            return tc
    elif vm.k_induct[k] > 0:
        tc = run_induct(vm, k, code, e, mem, fpm, pa, left, pc_out, op_out, ad)
        if tc != -_K_DECLINED:
            return tc
    for r in range(L):
        c = code + rows[r] * 6
        ops[r] = <int>c[0]
        dyn[r] = vm.xflag[rows[r]] != 0
        if dyn[r]:
            for s3 in range(NCELL[ops[r]]):
                w = c[CSLOT[ops[r]][s3]]
                isx[r * 3 + s3] = (w & 7) == MODE_X
                if isx[r * 3 + s3]:
                    xtab[r * 3 + s3] = w >> 3
                    x_operand(vm, w, mem, fpm, pa, &xbase[r * 3 + s3], &xlen[r * 3 + s3],
                              &xidx[r * 3 + s3])
                else:
                    sp[r * 3 + s3] = opnd(vm, w, mem, fpm, pa)
            continue
        ys[r] = opnd(vm, c[CSLOT[ops[r]][0]], mem, fpm, pa)
        as_[r] = bs[r] = ys[r]
        if NCELL[ops[r]] > 1:
            as_[r] = opnd(vm, c[CSLOT[ops[r]][1]], mem, fpm, pa)
            if NCELL[ops[r]] > 2:
                bs[r] = opnd(vm, c[CSLOT[ops[r]][2]], mem, fpm, pa)
        # parameters can alias (the verifier checked the static operands): let the dispatch
        # loop trap on it
        if kernel_alias(ops[r], ys[r], as_[r], bs[r]):
            return -_K_DECLINED
    c = code + J * 6
    jcc = c[1]
    ja = jb = mem
    if (jcc & 15) != 0:
        ja = opnd(vm, c[2], mem, fpm, pa)
        jb = opnd(vm, c[3], mem, fpm, pa)
    c = code + T * 6
    tcc = c[1]
    ta = tb = mem
    if (tcc & 15) != 0:
        ta = opnd(vm, c[2], mem, fpm, pa)
        tb = opnd(vm, c[3], mem, fpm, pa)

    while lft >= L + 2:
        for r in range(L):
            op = ops[r]
            if dyn[r]:
                # as the dispatch loop does it: the index-alias check (when the targets
                # resolve), the bounds (vm.tv from the last operand out of bounds), aliasing
                nc = NCELL[op]
                bad = 0
                tc = 0
                for s3 in range(nc):
                    if isx[r * 3 + s3]:
                        p3[s3] = x_cell(vm, xbase[r * 3 + s3], xlen[r * 3 + s3],
                                        xtab[r * 3 + s3], xidx[r * 3 + s3][0])
                        if p3[s3] == NULL:
                            bad = 1
                    else:
                        p3[s3] = sp[r * 3 + s3]
                ym = CTMASK[op]
                if not (((ym & 1) and p3[0] == NULL) or ((ym & 2) and p3[1] == NULL)):
                    for s3 in range(nc):
                        if tc == 0 and isx[r * 3 + s3]:
                            for t3 in range(2):
                                if (ym & (1 << t3)) and p3[t3] == xidx[r * 3 + s3]:
                                    vm.tv[0] = CSLOT[op][s3]
                                    vm.tv[1] = xidx[r * 3 + s3] - mem
                                    vm.tv[2] = 0
                                    vm.tv[3] = _IDX_ALIAS
                                    tc = _T_ALIAS
                                    break
                if tc == 0 and bad:
                    tc = _T_BOUNDS
                if tc == 0:
                    ys[r] = p3[0]
                    as_[r] = bs[r] = p3[0]
                    if nc > 1:
                        as_[r] = p3[1]
                        if nc > 2:
                            bs[r] = p3[2]
                    if kernel_alias(op, ys[r], as_[r], bs[r]):
                        tc = _T_ALIAS
                if tc:
                    left[0] = lft - r
                    pc_out[0] = rows[r]
                    op_out[0] = op
                    return tc
            tc = kernel_row(vm, op, ys[r], as_[r], bs[r], code + rows[r] * 6, F)
            if tc:
                left[0] = lft - r
                pc_out[0] = rows[r]
                op_out[0] = op
                return tc
            if ad and AD_KIND[op] and not ad_inline(op, ys[r], as_[r], mem, ad, backward, A, Tn):
                ad_rule(vm, op, code + rows[r] * 6, ys[r], as_[r], bs[r], mem, rows[r])
        lft -= L
        # the back edge: fall out of the loop, or the paired join's come-from check
        if (jcc & 15) != 0 and not rvm_compare(jcc, ja[0], jb[0]):
            left[0] = lft - 1
            pc_out[0] = J + e
            return -_K_EXIT
        if (tcc & 15) != 0 and not rvm_compare(tcc, ta[0], tb[0]):
            left[0] = lft - 1             # the jmp ran; the join traps
            vm.tv[0] = 0
            vm.tv[1] = 1
            pc_out[0] = T
            op_out[0] = OP_JOIN
            return _T_COMEFROM
        lft -= 2
    left[0] = lft
    pc_out[0] = T + e
    return -_K_BUDGET


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


# ---- the interpreter loop (rvm/_vm_run.pxi.in; its data cases are generated) ------------------

include "_vm_run.pxi"


# ---- validation: what the loop relies on -------------------------------------------------------

class _Checker:
    """Collects the problems that would let a Program escape the machine's buffers."""

    def __init__(self, program, n_static: int, n_globals: int):
        self.p = program
        self.n_static = n_static
        self.n_globals = n_globals
        self.problems: list[str] = []

    def bad(self, pc, msg: str) -> None:
        self.problems.append(f"pc {pc}: {msg}" if pc is not None else msg)

    def cell(self, pc, f, word: int, write: bool, what: str) -> None:
        """A scalar cell operand (kinds y / a, call args, trace operands, indices)."""
        mode, q = word & 7, word >> 3
        if q < 0:
            self.bad(pc, f"{what}: negative payload in operand {word}")
        elif mode == MODE_G:
            if q >= (self.n_globals if write else self.n_static):
                self.bad(pc, f"{what}: address {q} is not a {'global' if write else 'static'} cell")
        elif mode == MODE_L:
            if q >= f.frame_size:
                self.bad(pc, f"{what}: local offset {q} outside the frame of {f.name} "
                             f"({f.frame_size} cells)")
        elif mode == MODE_P:
            if q >= len(f.params):
                self.bad(pc, f"{what}: {f.name} has no parameter {q}")
            elif f.params[q].is_array:
                self.bad(pc, f"{what}: array parameter {f.params[q].name} used as a cell")
            elif write and not f.params[q].written:
                self.bad(pc, f"{what}: writes parameter {f.params[q].name} not declared written")
        elif mode == MODE_X:
            if q >= len(self.p.xtab):
                self.bad(pc, f"{what}: no xtab entry {q}")
            else:
                self.xentry(pc, f, self.p.xtab[q], write, what)
        elif mode == MODE_N:
            if write:
                self.bad(pc, f"{what}: an array length cannot be written")
            elif q >= len(f.params) or not f.params[q].is_array:
                self.bad(pc, f"{what}: len() of {q}, not an array parameter of {f.name}")
        else:
            self.bad(pc, f"{what}: operand mode {mode} does not exist")

    def array(self, pc, f, word: int, length, write: bool, what: str) -> None:
        """An array base (xtab base, array call argument): G/L with a static length, or P."""
        mode, q = word & 7, word >> 3
        if q < 0:
            self.bad(pc, f"{what}: negative payload in array word {word}")
        elif mode == MODE_P:
            if q >= len(f.params) or not f.params[q].is_array:
                self.bad(pc, f"{what}: {q} is not an array parameter of {f.name}")
            elif write and not f.params[q].written:
                self.bad(pc, f"{what}: writes parameter {f.params[q].name} not declared written")
        elif mode in (MODE_G, MODE_L):
            if length is None or length < 0:
                self.bad(pc, f"{what}: array without a static length")
            elif mode == MODE_G and q + length > (self.n_globals if write else self.n_static):
                self.bad(pc, f"{what}: array {q}..{q + length} outside the "
                             f"{'globals' if write else 'static cells'}")
            elif mode == MODE_L and q + length > f.frame_size:
                self.bad(pc, f"{what}: local array {q}..{q + length} outside the frame of "
                             f"{f.name}")
        else:
            self.bad(pc, f"{what}: array word of mode {mode}")

    def xentry(self, pc, f, x, write: bool, what: str) -> None:
        self.array(pc, f, x.base, x.length, write, what)
        if (x.index & 7) == MODE_X:
            self.bad(pc, f"{what}: an index cannot itself be indexed")
        else:
            self.cell(pc, f, x.index, False, what + " index")


def validate(program, n_static: int, n_globals: int) -> list:
    """Problems that make `program` unsafe to run (empty if none)."""
    ck = _Checker(program, n_static, n_globals)
    code = program.code
    n = len(code)
    if not 0 <= program.fraction_bits <= MAX_FRACTION_BITS:
        ck.bad(None, f"fraction bits {program.fraction_bits} outside 0..{MAX_FRACTION_BITS}")
    if code.ndim != 2 or code.shape[1] != ROW_WIDTH:
        ck.bad(None, f"code is not an (n, {ROW_WIDTH}) array")
        return ck.problems
    bad_ops = np.nonzero((code[:, 0] < 0) | (code[:, 0] >= N_OPCODES))[0]
    for pc in bad_ops[:10]:
        ck.bad(int(pc), f"opcode {int(code[pc, 0])} does not exist")
    if len(bad_ops):
        return ck.problems
    nf = len(program.functions)
    if not 0 <= program.main < nf:
        ck.bad(None, f"entry function {program.main} does not exist")
        return ck.problems
    if program.functions[program.main].params:
        ck.bad(None, "the entry function takes parameters")
    for c in program.consts:
        size = 1 if c.length is None else c.length
        if not (n_globals <= c.addr and c.addr + size <= n_static and len(c.values) == size):
            ck.bad(None, f"constant {c.name} at {c.addr} outside the constant cells")
    for fi, f in enumerate(program.functions):
        if not (0 <= f.begin < f.end < n) or f.frame_size < 0:
            ck.bad(None, f"function {f.name}: bad range {f.begin}..{f.end} or frame size")
            continue
        for pc, op_name in ((f.begin, "begin"), (f.end, "end")):
            row = code[pc]
            if OPS[int(row[0])].name != op_name or int(row[1]) != fi:
                ck.bad(pc, f"function {f.name} does not start/end with {op_name} {fi}")
        for pc in range(f.begin + 1, f.end):
            row = [int(w) for w in code[pc]]
            op = OPS[row[0]]
            if op.name in ("begin", "end"):
                ck.bad(pc, f"{op.name} inside the body of {f.name}")
                continue
            always = False
            for slot, kind in enumerate(op.operands, start=1):
                w = row[slot]
                what = f"{op.name} operand {slot}"
                if kind == "cc":
                    if not (0 <= w < 64 and (w & 15) <= 6):
                        ck.bad(pc, f"{what}: bad condition word {w}")
                    elif op.family == "xorcmp" and (w >> 4) != int(op.types[1]):
                        ck.bad(pc, f"{what}: condition on type {w >> 4}, the sources have "
                                   f"type {int(op.types[1])}")
                    always = (w & 15) == 0
                elif kind in ("y", "a"):
                    if not (always and op.name in ("jmp", "join", "assert")):
                        ck.cell(pc, f, w, kind == "y", what)
                elif kind == "k":
                    if not 0 <= w < 64:
                        ck.bad(pc, f"{what}: rotation count {w} outside 0..63")
                elif kind == "fn":
                    table = FN2 if op.family in ("addfn2", "subfn2") else FN1
                    if not 0 <= w < len(table):
                        ck.bad(pc, f"{what}: function id {w} does not exist")
                    elif op.types[0] not in table[w].types:
                        ck.bad(pc, f"{what}: function {table[w].name} does not exist for "
                                   f"this type")
                elif kind == "msg":
                    if not 0 <= w <= len(program.traces):
                        ck.bad(pc, f"{what}: no message entry {w}")
                    elif w:
                        check_trace(ck, pc, f, program.traces[w - 1])
                elif kind == "pc":
                    partner = "join" if op.name == "jmp" else "jmp"
                    if not f.begin < w < f.end:
                        ck.bad(pc, f"{what}: target {w} outside the body of {f.name}")
                    elif OPS[int(code[w, 0])].name != partner:
                        ck.bad(pc, f"{what}: target {w} is not a {partner}")
                elif kind == "callsite":
                    check_callsite(ck, pc, f, w)
                elif kind == "trace":
                    if not 0 <= w < len(program.traces):
                        ck.bad(pc, f"{what}: no trace entry {w}")
                    else:
                        check_trace(ck, pc, f, program.traces[w])
            if len(ck.problems) > 200:
                return ck.problems
    return ck.problems


def check_trace(ck, pc, f, tr) -> None:
    """A trace's (or an assert message's) operands: cells, or arrays where `lengths` says."""
    lengths = tr.lengths or [None] * len(tr.operands)
    if len(lengths) != len(tr.operands):
        ck.bad(pc, f"trace {tr.message!r}: {len(lengths)} lengths for "
                   f"{len(tr.operands)} operands")
        return
    for word, length in zip(tr.operands, lengths):
        if length is None:
            ck.cell(pc, f, word, False, "trace operand")
        else:
            ck.array(pc, f, word, length if length >= 0 else None, False, "trace array")


def check_callsite(ck, pc, f, k: int) -> None:
    program = ck.p
    if not 0 <= k < len(program.callsites):
        ck.bad(pc, f"call site {k} does not exist")
        return
    site = program.callsites[k]
    if not 0 <= site.func < len(program.functions):
        ck.bad(pc, f"call site {k}: function {site.func} does not exist")
        return
    g = program.functions[site.func]
    if len(site.args) != len(g.params):
        ck.bad(pc, f"call of {g.name}: {len(site.args)} arguments for {len(g.params)} parameters")
        return
    for i, (arg, par) in enumerate(zip(site.args, g.params)):
        what = f"argument {i} of {g.name}"
        if par.is_array != (arg.length is not None):
            ck.bad(pc, f"{what}: {'an array' if par.is_array else 'a cell'} is expected")
        elif arg.length is None:
            if (arg.word & 7) == MODE_N:
                ck.bad(pc, f"{what}: an array length cannot be passed by reference")
            else:
                # checked as a read: the call checks at run time that no constant is bound
                # to a written parameter (ReadOnlyError), at every level of calls
                ck.cell(pc, f, arg.word, False, what)
        elif arg.length < -1:
            ck.bad(pc, f"{what}: array length {arg.length}")
        else:
            ck.array(pc, f, arg.word, arg.length if arg.length >= 0 else None, False, what)


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


# ---- native code (rvm/native): a program's forward run and adjoint sweep compiled to C -------

cdef struct NativeState:
    # rvm/native/codegen.py's rvm_ns: keep in step (its ABI number)
    i64* mem
    double* adj
    i64 steps
    i64 budget            # the native code calls poll when its steps reach it
    int (*poll)(NativeState*) noexcept
    i64 n_mem
    i64 max_depth
    i64 pt_cap
    i64 peak_ftop         # the deepest frame top and call depth the run reached
    i64 peak_depth
    i64 pc                # where a signal stopped it
    char* stack_low       # the native calls' stack limit (the native code sets it)
    i64* stack            # the value stack, its adjoints, top, capacity and peak
    double* sadj
    i64 sp
    i64 stack_cap
    i64 peak_sp
ctypedef i64 (*native_fn)(NativeState*) noexcept nogil

cdef extern from "Python.h":
    int _check_signals "PyErr_CheckSignals" ()      # no Cython error check: poll reports it


cdef int native_poll(NativeState* st) noexcept with gil:
    """Called by the native code every 2^24 steps: a Ctrl-C (or any signal handler's
    exception) stops the run and stays set for native_run to raise; other threads get a turn."""
    with nogil:
        pass
    return _check_signals() != 0


cdef int native_run(native_fn f, NativeState* st) except -1:
    """Run f (holding the GIL; native_poll lets go of it between slices).  Returns 0, or 2:
    the interpreter must run instead; raises what a signal handler raised."""
    cdef i64 rc
    st.budget = st.steps + (1 << 16)
    st.poll = native_poll
    rc = f(st)
    if rc == 3:
        return -1
    return <int>rc


cdef class Core:
    """Machine state and interpreter of one Program.  rvm.machine.Machine is the public API."""

    cdef VM vm
    cdef readonly object program
    cdef readonly cnp.ndarray mem          # int64 [globals | consts | frame region]
    cdef readonly cnp.ndarray static_image
    cdef readonly cnp.ndarray code          # the (n, 6) code the loop runs (a read-only copy)
    cdef readonly i64 last_n               # instructions run by the last run()
    cdef list _keep                        # buffers the VM points into
    cdef object _brk                       # breakpoint flags and watch buffers the VM uses
    cdef object _watch
    cdef object _duals                     # (tan, adj, adjt) over mem and over the value stack
    cdef object _kernels
    cdef native_fn nat_fwd                 # Core.gradient's native code (set_native) or NULL
    cdef native_fn nat_bwd
    cdef object _native
    cdef readonly i64 native_bails         # gradient() calls the native code handed back

    def __init__(self, program, *, i64 stack_cells=1 << 20, i64 frame_cells=1 << 22,
                 i64 max_depth=1 << 16):
        cdef VM* vm
        from rvm.errors import InvalidBytecode
        if stack_cells < 0 or frame_cells < 0 or max_depth < 1:
            raise ValueError("stack_cells and frame_cells must be >= 0, max_depth >= 1")
        self.program = program
        n_globals, n_static = program.n_globals, program.n_static
        problems = validate(program, n_static, n_globals)
        if problems:
            raise InvalidBytecode("the program cannot run", problems)
        memset(&self.vm, 0, sizeof(VM))
        self.vm.rot_cs[0] = 1.0             # cos and sin of the angle word 0
        self._keep = []
        self.static_image = np.ascontiguousarray(program.static_image(), dtype=np.int64)
        self.mem = np.zeros(n_static + frame_cells, dtype=np.int64)
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
        vm.mem = _ptr(self.mem)
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
        self._build_kernels()
        vm.use_kernels = 1
        self.reset(False)

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

    def set_native(self, lib=None, size_t forward=0, size_t backward=0) -> bool:
        """Let gradient() (without a tangent) run the forward run and the adjoint sweep by
        native code (rvm/native: the addresses of rvm_native_forward/backward in the loaded
        library `lib`, kept alive here); no arguments: by the interpreter again.  False when
        the entry frame does not fit the frame region (the interpreter reports that)."""
        cdef VM* vm = &self.vm
        self.nat_fwd = self.nat_bwd = NULL
        self._native = None
        if lib is None:
            return True
        if forward == 0 or backward == 0:
            raise ValueError("set_native needs both function addresses")
        if vm.fn_fsize[vm.main] > vm.n_mem - vm.n_static:
            return False
        self._native = lib
        self.nat_fwd = <native_fn>forward
        self.nat_bwd = <native_fn>backward
        return True

    @property
    def native(self) -> bool:
        """gradient() runs native code (set_native)."""
        return self.nat_fwd != NULL

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
        cdef VM* vm = &self.vm
        cdef i64 used = vm.n_static + vm.peak_frame
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
        if self._duals is not None:
            self.clear_duals()
        vm.steps = vm.peak_sp = vm.peak_frame = vm.peak_depth = 0
        vm.status = _S_END if at_end else _S_START
        vm.D = -1 if at_end else 1
        vm.pc = vm.fn_end[vm.main] if at_end else vm.fn_begin[vm.main]
        self.refresh_watch()

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
        adjoints' tangents: out_t[k] = (H tangent)[k].  words (3, n) gets the first n globals'
        words at the start, at the end and back at the start.  Returns 0, or 1 when the
        general path must run instead (an input it does not store, a trap, a trace, a
        breakpoint, a non-finite derivative): that path reports it."""
        return self._gradient(of_addr, inputs, input_cells, def_addrs, def_words, wrt_addrs,
                              out, words, tangent, out_t)

    cdef int _gradient(self, i64 of_addr, dict inputs, dict input_cells, cnp.ndarray def_addrs,
                       cnp.ndarray def_words, cnp.ndarray wrt_addrs, cnp.ndarray out,
                       cnp.ndarray words, cnp.ndarray tangent, cnp.ndarray out_t) except -1:
        cdef VM* vm = &self.vm
        cdef i64 i, n, used, addr, iv
        cdef int kind, overflow
        cdef i64* da = _ptr(def_addrs)
        cdef i64* dw = _ptr(def_words)
        cdef i64* wa = _ptr(wrt_addrs)
        cdef double* g = <double*>cnp.PyArray_DATA(out)
        cdef i64* ws = _ptr(words)
        cdef i64 nw = words.shape[1]
        cdef bint hvp = tangent is not None
        if vm.brk != NULL or vm.n_watch != 0 or nw > vm.n_static:
            return 1
        if self._duals is None:
            self.set_ad(_AD_ADJ)
        # the start state (reset(False) and clear_duals() without Python objects)
        used = min(vm.n_static + max(vm.peak_frame, vm.ftop - vm.n_static), vm.n_mem)
        n = max(vm.peak_sp, vm.sp) + 1
        memset(vm.adj, 0, used * sizeof(double))
        memset(vm.sadj, 0, n * sizeof(double))
        if self.nat_fwd == NULL or hvp:
            # (the native code reads no other dual; every interpreted run zeroes them first)
            memset(vm.tan, 0, used * sizeof(double))
            memset(vm.adjt, 0, used * sizeof(double))
            memset(vm.stan, 0, n * sizeof(double))
            memset(vm.sadjt, 0, n * sizeof(double))
        vm.ev_release = vm.ev_nonfinite = 0
        vm.ev_release_max = 0.0
        vm.ev_release_pc = vm.ev_nonfinite_pc = -1
        used = min(vm.n_static + vm.peak_frame, vm.n_mem)
        memcpy(vm.mem, _ptr(self.static_image), vm.n_static * sizeof(i64))
        memset(vm.mem + vm.n_static, 0, (used - vm.n_static) * sizeof(i64))
        vm.ftop = vm.n_static
        vm.sp = vm.ptop = vm.depth = vm.t = 0
        vm.came = vm.trace_ack = vm.trap = 0
        vm.steps = vm.peak_sp = vm.peak_frame = vm.peak_depth = 0
        vm.status = _S_START
        vm.D = 1
        vm.pc = vm.fn_begin[vm.main]
        vm.ad = 0
        for i in range(def_addrs.shape[0]):
            vm.mem[da[i]] = dw[i]
        for name, v in inputs.items():
            cell = input_cells.get(name)
            if cell is None:
                return 1
            addr = cell[0]
            kind = cell[1]
            if kind == 1:                               # float
                if type(v) is not float:
                    return 1
                vm.mem[addr] = rvm_f2w(<double>v)
            elif kind == 0:                             # int
                if type(v) is not int:
                    return 1
                iv = PyLong_AsLongLongAndOverflow(v, &overflow)
                if overflow:
                    return 1
                vm.mem[addr] = iv
            elif type(v) is list:                       # float[n] from Python floats
                if len(<list>v) != cell[2]:
                    return 1
                for i in range(cell[2]):
                    x = (<list>v)[i]
                    if type(x) is not float:
                        return 1
                    vm.mem[addr + i] = rvm_f2w(<double>x)
            else:                                       # float[n] from a float64 array
                if not (type(v) is np.ndarray and v.dtype == np.float64 and v.ndim == 1
                        and v.shape[0] == cell[2] and v.flags.c_contiguous):
                    return 1
                memcpy(vm.mem + addr, cnp.PyArray_DATA(<cnp.ndarray>v), <i64>cell[2] * 8)
        memcpy(ws, vm.mem, nw * sizeof(i64))
        # forward, then the adjoint sweep back (in slices, so that Ctrl-C can stop a long run)
        if self.nat_fwd != NULL and not hvp:
            if self._native_sweeps(of_addr, ws, nw) != 0:
                return 1
        else:
            if hvp:
                vm.ad = _AD_TAN
                for i in range(wrt_addrs.shape[0]):
                    vm.tan[wa[i]] = (<double*>cnp.PyArray_DATA(tangent))[i]
            if self._sweep(hvp) != _R_BOUNDARY:
                return 1
            self.last_n = vm.steps
            memcpy(ws + nw, vm.mem, nw * sizeof(i64))
            vm.ad = _AD_ADJ | (_AD_TAN if hvp else 0)
            vm.trace_ack = 0
            vm.D = -1
            vm.adj[of_addr] = 1.0
            if self._sweep(True) != _R_BOUNDARY:
                return 1
        memcpy(ws + 2 * nw, vm.mem, nw * sizeof(i64))
        for i in range(wrt_addrs.shape[0]):
            g[i] = vm.adj[wa[i]]
            if not isfinite(g[i]):
                return 1
            if hvp:
                (<double*>cnp.PyArray_DATA(out_t))[i] = vm.adjt[wa[i]]
                if not isfinite(vm.adjt[wa[i]]):
                    return 1
        return 0

    cdef int _native_sweeps(self, i64 of_addr, i64* ws, i64 nw) except -1:
        """gradient()'s forward run and adjoint sweep by the native code, leaving the machine
        as the interpreter would.  1: the interpreter must run instead (it reports why)."""
        cdef VM* vm = &self.vm
        cdef NativeState st
        cdef i64 fs = vm.fn_fsize[vm.main], n_fwd
        cdef int rc
        # first, so that a reset after a bail out clears the whole frame
        vm.peak_frame = max(vm.peak_frame, fs)
        vm.peak_depth = max(vm.peak_depth, 1)
        st.mem = vm.mem
        st.adj = vm.adj
        st.n_mem = vm.n_mem
        st.max_depth = vm.max_depth
        st.pt_cap = vm.pt_cap
        st.peak_ftop = vm.n_static + fs
        st.peak_depth = 1
        st.stack = vm.stack
        st.sadj = vm.sadj
        st.sp = 0
        st.stack_cap = vm.stack_cap
        st.peak_sp = vm.peak_sp
        st.steps = 0
        try:
            rc = native_run(self.nat_fwd, &st)
            n_fwd = st.steps
            if rc == 0:
                self.last_n = n_fwd
                memcpy(ws + nw, vm.mem, nw * sizeof(i64))
                vm.adj[of_addr] = 1.0
                st.steps = 0
                rc = native_run(self.nat_bwd, &st)
        finally:
            # the frames the calls used (dirty after a bail out or a Ctrl-C: the next reset
            # clears them)
            vm.peak_frame = max(vm.peak_frame, st.peak_ftop - vm.n_static)
            vm.peak_depth = max(vm.peak_depth, st.peak_depth)
            vm.peak_sp = max(vm.peak_sp, st.peak_sp)
        if rc != 0:
            self.native_bails += 1
            return 1
        vm.steps = n_fwd + st.steps
        vm.t = n_fwd - st.steps
        vm.ad = _AD_ADJ
        vm.D = -1
        vm.status = _S_START
        vm.pc = vm.fn_begin[vm.main]
        return 0

    cdef int _sweep(self, bint instrumented) except -1:
        """Run to the boundary in the current direction and return the R_* code: a first
        short slice holding the GIL (a small program never pays for releasing it), then
        slices without it, with a check for Ctrl-C between slices."""
        cdef VM* vm = &self.vm
        cdef i64 executed, budget = 1 << 14
        cdef int rc
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
            if rc != _R_BUDGET:
                return rc
            PyErr_CheckSignals()
            budget = 1 << 24

    def clear_duals(self) -> None:
        """Zero the duals of the static cells, the frame region and the value stack used
        since the last reset, and the event counters."""
        cdef VM* vm = &self.vm
        if self._duals is not None:
            used = min(vm.n_static + max(vm.peak_frame, vm.ftop - vm.n_static), vm.n_mem)
            for k in range(3):
                self._duals[k][:used] = 0.0
                self._duals[3 + k][:max(vm.peak_sp, vm.sp) + 1] = 0.0
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

    def run(self, i64 budget) -> int:
        """Run up to `budget` instructions in the current direction; returns an R_* code."""
        cdef i64 executed = 0
        cdef int rc
        with nogil:
            if self.vm.brk == NULL and self.vm.n_watch == 0 and self.vm.ad == 0:
                rc = vm_run(&self.vm, budget, &executed, <Plain*>NULL)
            else:
                rc = vm_run(&self.vm, budget, &executed, <Instrumented*>NULL)
        self.last_n = executed
        return rc

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
        v = self.mem[a]
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
        ck = _Checker(self.program, vm.n_static, vm.const_lo)
        if not 0 <= level < vm.depth:
            if (word & 7) != MODE_G:
                raise IndexError("no frame to decode the operand in")
            ck.cell(None, None, word, False, "operand")
        else:
            ck.cell(None, self.program.functions[vm.fr_func[level]], word, False, "operand")
        if ck.problems:
            raise ValueError(ck.problems[0])
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


cdef class GradCall:
    """Core.gradient with everything but the inputs bound: call(inputs) -> {wrt name:
    gradient} (np.float64 for a scalar, a fresh array for an array), or None when the general
    path must run.  The fast path of rvm.grad_fn, so that a call from Python costs one call
    into the core (rvm/ad/engine.py builds it)."""
    cdef Core core
    cdef i64 of_addr
    cdef dict cells
    cdef cnp.ndarray def_addrs, def_words, wrt_addrs, out, words
    cdef list parts                        # (name, offset, shape or None for a scalar)
    cdef cnp.ndarray exact                 # addresses of the globals that never round

    def __init__(self, Core core, i64 of_addr, dict cells, cnp.ndarray def_addrs,
                 cnp.ndarray def_words, cnp.ndarray wrt_addrs, cnp.ndarray out,
                 cnp.ndarray words, list parts, cnp.ndarray exact):
        self.core, self.of_addr, self.cells = core, of_addr, cells
        self.def_addrs, self.def_words, self.wrt_addrs = def_addrs, def_words, wrt_addrs
        self.out, self.words, self.parts = out, words, parts
        self.exact = exact

    def __call__(self, inputs):
        return self.call(inputs)

    cdef object call(self, object inputs):
        cdef dict res = {}
        if type(inputs) is not dict:
            if inputs is not None:
                return None                # another Mapping: the general path reads it
            inputs = {}
        if self.core._gradient(self.of_addr, inputs, self.cells,
                               self.def_addrs, self.def_words, self.wrt_addrs, self.out,
                               self.words, None, None) != 0:
            return None
        # the way back must retrace the run: the step count back at 0 and every cell that
        # never rounds restored; else the general path runs and raises PathDivergence
        if self.core.vm.t != 0:
            return None
        cdef i64* ws = <i64*>cnp.PyArray_DATA(self.words)
        cdef i64* ex = <i64*>cnp.PyArray_DATA(self.exact)
        cdef i64 nw = self.words.shape[1], k
        for k in range(self.exact.shape[0]):
            if ws[ex[k]] != ws[2 * nw + ex[k]]:
                return None
        cdef double* g = <double*>cnp.PyArray_DATA(self.out)
        for name, at, shape in self.parts:
            if shape is None:
                res[name] = PyArray_Scalar(&g[<i64>at], self.out.descr, None)
            else:
                res[name] = self.out[at:at + _size(shape)].reshape(shape).copy()
        return res


cdef class GradFnBase:
    """The call of rvm.ad.engine.GradFn (its base class), in C: once `fast` holds a GradCall,
    a call runs it (counting `countdown` down to 0, when it calls self._countdown_done()), and
    only a call it cannot take, or any call before, goes to self._general(inputs) in Python.
    `fast_grad` is the last call's gradient if the fast path made it, else None.
    The object's machine belongs to one thread, `owner` (the first caller's); a call from any
    other thread goes to self._lane(inputs), which runs it on that thread's own machine, so
    that one object can be shared by threads (the check is a compare, done under the GIL)."""
    cdef public object fast
    cdef public int countdown
    cdef public object fast_grad
    cdef public unsigned long owner           # thread ident; 0 until the first call

    def __call__(self, inputs=None):
        cdef object g
        cdef unsigned long me = PyThread_get_thread_ident()
        if me != self.owner:
            if self.owner != 0:
                return self._lane(inputs)
            self.owner = me
        if self.fast is not None:
            if self.countdown > 0:
                self.countdown -= 1
                if self.countdown == 0:
                    self._countdown_done()
            g = (<GradCall>self.fast).call(inputs)
            if g is not None:
                self.fast_grad = g
                return g
        self.fast_grad = None
        return self._general(inputs)


cdef i64 _size(tuple shape):
    cdef i64 n = 1
    for k in shape:
        n *= <i64>k
    return n
