# rvm/_core.pyx includes this file: loop kernels: run_kernel, run_reduce and run_induct.
# (Text included into the one extension module: it shares the core's names.)

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
    """acc += d (d signed) every iteration, and the rule rvm_ad_one(1, gy, ga) with the
    sign folded into the loop-invariant gy = s*src (the rule's one changing dual, in a
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
        rvm_ad_one(1.0, gy, &g)
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
    # the rule of y += s*a with a a direct cell, as ad_inline runs it (rvm_ad_one), in a
    # register: in the adjoint sweep abar -= s*ybar with ybar constant, in tangent mode
    # y' -= -s*a' (y' += s*a') with a' constant.  The source and its sign are loop-invariant:
    # gy = s*src once, then rvm_ad_one(1, gy) (the same number as rvm_ad_one(s, src); gcc
    # does not hoist the product out of the loop itself)
    if AD_KIND[op] and pf == PF_ONE and inv:
        if ad == _AD_ADJ and backward:
            reg_adj = 1
            gcell = sp[0]
            gy = AD_SIGN[op] * A[yp - mem]
        elif ad == _AD_TAN:
            reg_adj = 1
            gcell = yp
            gy = -AD_SIGN[op] * Tn[sp[0] - mem]
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
                rvm_ad_one(1.0, gy, &ga)
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
