# rvm/_core.pyx includes this file: gradient fast paths: GradCall and GradFnBase (rvm.grad_fn's call in C).
# (Text included into the one extension module: it shares the core's names.)

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
    cdef KeyCache keys                     # the cells of the last call's names

    def __dealloc__(self):
        keycache_clear(&self.keys)

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
                               self.words, NULL, NULL, 0, &self.keys) != 0:
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
    cdef public object flat_call               # a FlatCall, set with `fast` when it applies
    # hessian_flat over more than one cell runs in C once the lane modes are on the core, or
    # once they cannot come (`lanes_settled`, set by _flat_tangent_general from
    # native_tangent.lanes_pending); until then it goes through _flat_tangent_general, whose
    # native_tangent.prepare counts the calls, builds the full library and installs it (an
    # hvp_flat or jvp_flat before it installs the scalar modes alone)
    cdef public bint lanes_settled

    def flat(self, x, out=None):
        """(loss, gradient) with the wrt cells' values from the vector x, in the order of
        `wrt_cells` (GradFn.flat): the fast path's call in C, else self._flat_general."""
        cdef object r
        cdef unsigned long me = PyThread_get_thread_ident()
        if me != self.owner:
            if self.owner != 0:
                return self._lane_flat(x, out)
            self.owner = me
        if self.flat_call is not None:
            if self.countdown > 0:
                self.countdown -= 1
                if self.countdown == 0:
                    self._countdown_done()
            r = (<FlatCall>self.flat_call).call(x, out)
            if r is not None:
                self.fast_grad = None
                return r
        return self._flat_general(x, out)

    cdef object _flat_tangent(self, int kind, object x, object v, object out):
        """hvp_flat (0), hessian_flat (1), jvp_flat (2): the FlatCall's pass in C once the
        core has native tangent modes, else self._flat_tangent_general in Python (the first
        calls, the automatic build of the tangent modes, what the C pass hands back)."""
        cdef object r = None
        cdef unsigned long me = PyThread_get_thread_ident()
        if me != self.owner:
            if self.owner != 0:
                return self._lane_flat_tangent(kind, x, v, out)
            self.owner = me
        if self.fast_grad is not None:
            # `last` of the call before, built while the machine still holds its state
            self.last
        if self.flat_call is not None and (
                kind != 1 or self.lanes_settled or (<FlatCall>self.flat_call).n <= 1 or
                (<FlatCall>self.flat_call).core.nat_fwd_vt != NULL):
            if kind == 0:
                r = (<FlatCall>self.flat_call)._hvp(x, v, out)
            elif kind == 1:
                r = (<FlatCall>self.flat_call)._hessian(x, out)
            else:
                r = (<FlatCall>self.flat_call)._jvp(x, v)
            if r is not None:
                return r
        return self._flat_tangent_general(kind, x, v, out)

    def hvp_flat(self, x, v, out=None):
        """(loss, H v) at x (GradFn.hvp_flat)."""
        return self._flat_tangent(0, x, v, out)

    def hessian_flat(self, x, out=None):
        """(loss, H) at x (GradFn.hessian_flat)."""
        return self._flat_tangent(1, x, None, out)

    def jvp_flat(self, x, v):
        """(loss, the loss's tangent along v) at x (GradFn.jvp_flat)."""
        return self._flat_tangent(2, x, v, None)

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


cdef class RowsCall:
    """GradFn.jacobian_flat's call in C: the gradients of k loss cells (the rows of a
    Jacobian) with the wrt cells' values from a float64 vector, by Core.gradient_rows (one
    forward run, k sweeps): call(x, out) -> (values, out), or None when the general path
    must run (rvm/ad/engine.py builds it, for float wrt cells and float or fixed losses)."""
    cdef Core core
    cdef i64 n, nd, F
    cdef cnp.ndarray seeds, floats, addrs, words_in, wrt_addrs, words, loss

    def __init__(self, Core core, cnp.ndarray seeds, cnp.ndarray floats,
                 cnp.ndarray def_addrs, cnp.ndarray def_words, cnp.ndarray wrt_addrs,
                 cnp.ndarray words):
        self.core = core
        self.seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        self.floats = np.ascontiguousarray(floats, dtype=np.uint8)
        self.F = core.program.fraction_bits
        self.n, self.nd = wrt_addrs.shape[0], def_addrs.shape[0]
        self.addrs = np.ascontiguousarray(np.concatenate([def_addrs, wrt_addrs]), dtype=np.int64)
        self.words_in = np.zeros(self.nd + self.n, dtype=np.int64)
        self.words_in[:self.nd] = def_words
        self.wrt_addrs = np.ascontiguousarray(wrt_addrs, dtype=np.int64)
        self.words = words
        self.loss = np.zeros(self.seeds.shape[0], dtype=np.int64)

    def __call__(self, x, out):
        return self.call(x, out)

    cdef object call(self, object x, cnp.ndarray out):
        cdef cnp.ndarray xa = np.ascontiguousarray(x, dtype=np.float64)
        cdef i64 k = self.seeds.shape[0], j
        cdef cnp.ndarray vals
        cdef double* v
        cdef i64* lw
        cdef uint8_t* fl
        if xa.ndim != 1 or xa.shape[0] != self.n:
            raise ValueError(f"jacobian_flat: x must be a vector of {self.n} values (the wrt "
                             f"cells), got shape {np.shape(x)}")
        memcpy(_ptr(self.words_in) + self.nd, cnp.PyArray_DATA(xa), self.n * sizeof(double))
        if self.core.gradient_rows(self.seeds, self.addrs, self.words_in, self.wrt_addrs, out,
                                   self.loss, self.words) != 0:
            return None
        vals = np.empty(k)
        v = <double*>cnp.PyArray_DATA(vals)
        lw, fl = _ptr(self.loss), <uint8_t*>cnp.PyArray_DATA(self.floats)
        for j in range(k):
            v[j] = rvm_w2f(lw[j]) if fl[j] else ldexp(<double>lw[j], -self.F)
        return vals, out
