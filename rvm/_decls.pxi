# rvm/_core.pyx includes this file: C declarations, the codes shared with rvm/machine.py, the machine state (VM) and the per-opcode tables.
# (Text included into the one extension module: it shares the core's names.)

ctypedef int64_t i64
ctypedef uint64_t u64

cdef extern from "_arith.h" nogil:
    enum:
        AK_OK
        AK_DIV0
        AK_DOMAIN
        AK_RANGE
    double rvm_w2f(i64 w)
    double rvm_lns_to_real(i64 w, int F)
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

# the build must match the table before any per-opcode array below is filled from it (the
# hash covers the generated headers, rvm/_abi.h's codes included)
check_build(TABLE_HASH)

cdef extern from "_abi.h" nogil:
    # the codes shared with isa/ and the native code, generated from isa/ (isa/cgen.py)
    enum:
        MODE_G, MODE_L, MODE_P, MODE_X, MODE_N
        TY_INT, TY_FIXED, TY_LNS, TY_FLOAT
        ADK_NONE, ADK_UPDATE, ADK_NEG, ADK_SWAP, ADK_ROT, ADK_MOVE, ADK_SCOPE, ADK_SCALE
        RVM_NATIVE_DONE, RVM_NATIVE_BAIL, RVM_NATIVE_STOPPED

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
    # the differentiation rules, one function per rule kind, shared with the native code
    void rvm_ad_one(double s, double src, double* dst)
    int rvm_ad_mul(double s, double va, double vb, double yb, double* aa, double* ab)
    int rvm_ad_scale(double e, double av, int da, double yv, int tan_on, int adj_on,
                     double* ty, double* ta, double* ay, double* aa, double* aty, double* ata)
    void rvm_ad_neg(double* d)
    void rvm_ad_swap(double* x, double* y)
    void rvm_ad_push(double* cell, double* slot)
    void rvm_ad_pop(double* slot, double* cell)
    void rvm_ad_scope(double* d)
    int rvm_rot_tangent(double s, double cs, double sn, double xa, double ya, double tth,
                        double* tx, double* ty)
    void rvm_rot_adjoint(double s, double cs, double sn, double xa, double ya, double* ax,
                         double* ay, double* ath, double* xp, double* yp, double* ax0,
                         double* ay0)
    int rvm_rot_adjoint_tangent(double s, double cs, double sn, double txb, double tyb,
                                double tth, double xp, double yp, double ax0, double ay0,
                                double nax, double nay, double* atx, double* aty, double* atth)

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

cdef extern from "_adrules.h" nogil:
    int rvm_ad_update(double s, int n, const rvm_dual* dd, int tan_on, int adj_on, double* ty,
                      double* t0, double* t1, double* ay, double* a0, double* a1, double* aty,
                      double* at0, double* at1)

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
    _R_NESTED = 6         # stopped inside a derivative statement's nested run: vm.nest_stop
    # why (vm.nest_stop), and the statement (vm.nest_pc, the outermost one)
    _NEST_STOP_LIMIT = 1  # the run's step cap (vm.cap) ran out
    _NEST_STOP_SIGNAL = 2 # a signal handler raised (Ctrl-C): the exception is pending
    _NEST_STOP_TRAP = 3   # a trap inside the nested run (recorded as any trap)
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
    # AD mode bits (Core.set_ad)
    _AD_TAN = 1
    _AD_ADJ = 2

R_BOUNDARY, R_BUDGET, R_TRAP, R_TRACE = _R_BOUNDARY, _R_BUDGET, _R_TRAP, _R_TRACE
R_BREAK, R_WATCH, R_NESTED = _R_BREAK, _R_WATCH, _R_NESTED
NEST_STOP_LIMIT, NEST_STOP_SIGNAL, NEST_STOP_TRAP = _NEST_STOP_LIMIT, _NEST_STOP_SIGNAL, \
    _NEST_STOP_TRAP
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
    # derivative statements (rvm/_nested.pxi): the depth a nested run stops at, how many
    # nested runs are under way, and a set of dual arrays per nesting level (index 0 unused)
    i64 stop_depth
    int nest
    double* n_tan[3]
    double* n_adj[3]
    double* n_adjt[3]
    double* n_stan[3]
    double* n_sadj[3]
    double* n_sadjt[3]
    uint8_t* fn_pops_below   # per function: may its run pop a value its caller pushed
    # the run's step cap, nested runs included: the instructions it may still run.  Every
    # vm_run takes its own instructions off as it returns (a derivative statement first takes
    # off those it ran so far), so a nested run reads what is left.  Then the nested
    # instructions until the next poll for signals (Ctrl-C), and why and in which statement
    # (the outermost) the last run stopped inside a nested run (NEST_STOP_*, else 0)
    i64 cap
    i64 poll_left
    int nest_stop
    i64 nest_pc
    i64 rot_w             # the angle word of the last float rotation, with its cos and sin
    double rot_cs[2]
    # the static cells are the state Core._gradient left: its start state but for the cells a
    # run may write (isa/effects.py); anything else that may store into memory clears it
    # (a reset, _row_start, Python's view of mem or of the duals): Core._gradient's next
    # call may then put back only those cells (see _gradient)
    int grad_clean
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
