# rvm/_core.pyx includes this file: one-shot calls in C (issue 16): RunCall, the repeated
# `rvm.run(prog, values)` on the calling thread's reused machine of a compiled Program, with
# the Result's fields decoded lazily (RunResultBase); HessCall, the repeated `rvm.hessian`.
# (Text included into the one extension module: it shares the core's names.)

cimport cython
from libc.stdlib cimport malloc, free
from cpython.ref cimport Py_REFCNT
from cpython.object cimport PyObject, PyObject_RichCompareBool, Py_EQ, PyTypeObject

cdef extern from "numpy/arrayobject.h":
    object PyArray_EMPTY(int nd, cnp.npy_intp* dims, int typenum, int fortran)


cdef inline cnp.ndarray _words_copy(i64* src, i64 n):
    """A fresh int64 vector of n words copied from src."""
    cdef cnp.npy_intp d = n
    cdef cnp.ndarray a = PyArray_EMPTY(1, &d, cnp.NPY_INT64, 0)
    if n:
        memcpy(cnp.PyArray_DATA(a), src, n * sizeof(i64))
    return a


@cython.auto_pickle(False)
cdef class OneShotSlot:
    """rvm.oneshot.Slot: a cached machine and how many one-shot calls have used it (a
    Result's lease), busy while a call uses it (fields the C calls read directly)."""
    cdef public object machine
    cdef public bint busy, cached
    cdef public long gen

    def __init__(self, machine, bint cached):
        self.machine, self.busy, self.gen, self.cached = machine, False, 0, cached


cdef tuple _NO_ARGS = ()


cdef enum:
    _INLINE_WORDS = 16          # a Result keeps this many words in itself (2 x the globals)


@cython.auto_pickle(False)
cdef class RunResultBase:
    """The fields of rvm.api.Result (its base class).  A Result that RunCall made holds the
    globals' words at the start and at the end of the run (in itself for a small program:
    no array is made per call) and decodes `inputs`, `outputs`, `stats` and `garbage` from
    them when first read (the values the machine's read gives, bit for bit); a Result made
    in Python gets them set."""
    cdef public object _machine
    cdef object _lease_t
    cdef object _inputs, _outputs, _stats, _garbage
    cdef i64* _w                       # RunCall's: the globals' words at the start, then at
    cdef i64 _ng                       # the end (2 x _ng), else NULL
    cdef i64 _inline[_INLINE_WORDS]
    cdef cnp.ndarray _end_words        # the end's words as an array, made when first asked
    cdef RunCall _call
    cdef OneShotSlot _slot             # RunCall's lease: the slot and its gen after the run
    cdef long _gen
    cdef i64 _steps, _peak_sp, _peak_frame, _peak_depth
    cdef bint _dirty                   # a global the contract wants zero is not
    cdef bint _reverse                 # a backward run (garbage: the non-inputs at the start)

    def __dealloc__(self):
        if self._w != NULL and self._w != &self._inline[0]:
            free(self._w)

    cdef int _hold(self, i64 ng) except -1:
        """Room for 2 x ng words."""
        if self._w != NULL and self._ng == ng:
            return 0                        # a reused Result (RunCall.spare)
        if self._w != NULL and self._w != &self._inline[0]:
            free(self._w)
            self._w = NULL
        if 2 * ng <= _INLINE_WORDS:
            self._w = &self._inline[0]
        else:
            self._w = <i64*>malloc(2 * ng * sizeof(i64))
            if self._w == NULL:
                raise MemoryError()
        self._ng = ng
        return 0

    @property
    def _lease(self):
        """(slot, gen, start words, reverse, options) of a run on a reused machine, else None
        (rvm.api.Result.machine)."""
        if self._lease_t is None and self._slot is not None:
            self._lease_t = (self._slot, self._gen, _words_copy(self._w, self._ng),
                             self._reverse, self._call.options)
            self._slot = None
        return self._lease_t

    @_lease.setter
    def _lease(self, v):
        self._lease_t, self._slot = v, None

    cdef object _end(self):
        if self._end_words is None:
            self._end_words = _words_copy(self._w + self._ng, self._ng)
        return self._end_words

    @property
    def inputs(self):
        if self._inputs is None and self._w != NULL:
            self._inputs = self._call.decode(self._end(), self._call.in_plan)
        return self._inputs

    @inputs.setter
    def inputs(self, v):
        self._inputs = v

    @property
    def outputs(self):
        if self._outputs is None and self._w != NULL:
            self._outputs = self._call.decode(self._end(), self._call.out_plan)
        return self._outputs

    @outputs.setter
    def outputs(self, v):
        self._outputs = v

    @property
    def stats(self):
        if self._stats is None and self._w != NULL:
            self._stats = dict(steps=self._steps, peak_stack=self._peak_sp,
                               peak_frame_cells=self._peak_frame, peak_depth=self._peak_depth)
        return self._stats

    @stats.setter
    def stats(self, v):
        self._stats = v

    @property
    def garbage(self):
        if self._garbage is None and self._w != NULL:
            self._garbage = self._call.garbage_names(self._end(), self._reverse) \
                if self._dirty else []
        return self._garbage

    @garbage.setter
    def garbage(self, v):
        self._garbage = v


@cython.auto_pickle(False)
cdef class RunCall:
    """`rvm.run(program, values)` (reverse or not, no other option) on one thread's reused
    machine, in C: reset, the values stored, the native run, a Result that decodes lazily.
    call() returns None when the general path must run: another thread, the machine busy or
    without native code, a breakpoint or watch, a value the core does not store itself, or a
    run the native code hands back (a trap: the interpreter's run reports it)."""
    cdef Core core
    cdef OneShotSlot slot              # the rvm.oneshot.Slot of the machine
    cdef type cls                      # rvm.api.Result
    cdef readonly object machine
    cdef object options
    cdef unsigned long owner
    cdef dict cells                    # {global name: (addr, kind, size)} (_store_inputs)
    cdef cnp.ndarray def_addrs, def_words
    cdef cnp.ndarray junk_end, junk_start    # addresses that should be zero at the end/start
    cdef public list in_plan, out_plan       # (name, kind 0 int / 1 float / 2 read, addr)
    cdef object reader                 # reader(words, name): a global's value (Machine's read)
    cdef object names                  # names(words, at_end): the garbage globals' names
    cdef RunResultBase spare           # the last Result made, reused once nobody else holds it
    cdef KeyCache keys                 # the cells of the last call's names (_store_inputs)

    def __dealloc__(self):
        keycache_clear(&self.keys)

    def __init__(self, Core core, OneShotSlot slot, type cls, machine, dict cells,
                 cnp.ndarray def_addrs,
                 cnp.ndarray def_words, cnp.ndarray junk_end, cnp.ndarray junk_start,
                 list in_plan, list out_plan, reader, names):
        self.core, self.slot, self.cls, self.machine = core, slot, cls, machine
        self.options = {}
        self.owner = PyThread_get_thread_ident()
        self.cells = cells
        self.def_addrs = np.ascontiguousarray(def_addrs, dtype=np.int64)
        self.def_words = np.ascontiguousarray(def_words, dtype=np.int64)
        self.junk_end = np.ascontiguousarray(junk_end, dtype=np.int64)
        self.junk_start = np.ascontiguousarray(junk_start, dtype=np.int64)
        self.in_plan, self.out_plan = in_plan, out_plan
        self.reader, self.names = reader, names

    @property
    def bound_slot(self):
        return self.slot

    def __call__(self, values=None, reverse=False):
        return self.call(values, reverse)

    cdef object call(self, object values, bint reverse):
        cdef Core core = self.core
        cdef VM* vm = &core.vm
        cdef i64 ng = vm.const_lo, i, nj
        cdef i64* junk
        cdef OneShotSlot slot = self.slot
        cdef RunResultBase r
        if PyThread_get_thread_ident() != self.owner:
            return None
        if (core.run_bwd if reverse else core.run_fwd) == NULL or vm.brk != NULL or \
                vm.n_watch != 0 or vm.ad != 0:
            return None
        if values is None:
            values = _NO_INPUTS
        elif type(values) is not dict:
            return None
        if slot.busy:
            return None
        core._reset(reverse)
        if not reverse:
            _scatter(vm.mem, _ptr(self.def_addrs), _ptr(self.def_words),
                     self.def_addrs.shape[0])
        if _store_inputs(vm, <dict>values, self.cells, &self.keys) != 0:
            return None
        r = self.spare
        if r is not None and Py_REFCNT(r) == 2:
            # the caller dropped the last Result (only self.spare and r hold it): reuse it
            # (a loop of runs then allocates nothing); a Result still held is never touched
            r._machine = r._lease_t = r._inputs = r._outputs = r._stats = r._garbage = None
            r._end_words = None
            r._dirty = False
        else:
            r = <RunResultBase>(<PyTypeObject*>self.cls).tp_new(self.cls, <PyObject*>_NO_ARGS,
                                                                 NULL)
            self.spare = r
        r._hold(ng)
        memcpy(r._w, vm.mem, ng * sizeof(i64))              # the start's words
        slot.gen += 1
        if core._native_run(1 << 62) != 0:
            return None
        memcpy(r._w + ng, vm.mem, ng * sizeof(i64))         # the end's
        r._call = self
        r._reverse = reverse
        r._slot, r._gen = slot, slot.gen
        r._steps, r._peak_sp = vm.steps, vm.peak_sp
        r._peak_frame, r._peak_depth = vm.peak_frame, vm.peak_depth
        if reverse:
            junk, nj = _ptr(self.junk_start), self.junk_start.shape[0]
        else:
            junk, nj = _ptr(self.junk_end), self.junk_end.shape[0]
        for i in range(nj):
            if vm.mem[junk[i]] != 0:
                r._dirty = True
                break
        return r

    def decode(self, cnp.ndarray words, list plan):
        """{name: value} of the plan's globals in `words` (Machine._read_all's values)."""
        cdef dict out = {}
        cdef i64* w = _ptr(words)
        cdef int kind
        cdef i64 addr
        for item in plan:
            name = (<tuple>item)[0]
            kind = (<tuple>item)[1]
            addr = (<tuple>item)[2]
            if kind == 0:
                out[name] = w[addr]
            elif kind == 1:
                out[name] = rvm_w2f(w[addr])
            else:
                out[name] = self.reader(words, name)
        return out

    def garbage_names(self, cnp.ndarray words, bint reverse):
        return self.names(words, not reverse)


@cython.auto_pickle(False)
cdef class RunFlat:
    """RunFn.flat's call in C (rvm.run_fn): a forward run on the RunFn's own machine with
    the float input cells' words taken from a float64 vector (after every input's default)
    and the float output cells' words given back as one, by the native code: call(x, out) ->
    the output vector, or None when the general path must run (another thread, no native
    code on the machine, a breakpoint or watch, a run the native code hands back: a trap,
    which the general path's interpreted run reports).  flat(x, out) is RunFn.flat's call
    once this object exists: this call, else `general(x, out)` (RunFn._flat_general), with
    no Python frame between the caller and the C call."""
    cdef Core core
    cdef unsigned long owner
    cdef i64 nd, n, m
    cdef cnp.ndarray addrs, words_in, out_addrs
    cdef i64 in_run                        # the input cells' first address when consecutive
    cdef object general

    def __init__(self, Core core, cnp.ndarray def_addrs, cnp.ndarray def_words,
                 cnp.ndarray in_addrs, cnp.ndarray out_addrs, general=None):
        self.core = core
        self.general = general
        self.owner = PyThread_get_thread_ident()
        self.nd, self.n, self.m = def_addrs.shape[0], in_addrs.shape[0], out_addrs.shape[0]
        self.addrs = np.ascontiguousarray(np.concatenate([def_addrs, in_addrs]), dtype=np.int64)
        self.words_in = np.zeros(self.nd + self.n, dtype=np.int64)
        self.words_in[:self.nd] = def_words
        self.out_addrs = np.ascontiguousarray(out_addrs, dtype=np.int64)
        self.in_run = int(in_addrs[0]) if self.n and \
            (np.diff(in_addrs) == 1).all() else -1

    def __call__(self, x, out=None):
        return self.call(x, out)

    def flat(self, x, out=None):
        """The output cells' values after a forward run from the input cells' values x."""
        cdef object r = self.call(x, out)
        if r is None:
            return self.general(x, out)
        return r

    cdef object call(self, object x, object out):
        cdef Core core = self.core
        cdef VM* vm = &core.vm
        cdef cnp.ndarray xa, oa
        cdef cnp.npy_intp d = self.m
        cdef i64 i
        cdef i64* oaddr
        cdef i64* ow
        if PyThread_get_thread_ident() != self.owner or core.run_fwd == NULL or \
                vm.brk != NULL or vm.n_watch != 0 or vm.ad != 0:
            return None
        if _f64(x):
            xa = <cnp.ndarray>x
        else:
            xa = np.ascontiguousarray(x, dtype=np.float64)
        if xa.ndim != 1 or xa.shape[0] != self.n:
            raise ValueError(f"flat: x must be a vector of {self.n} values (the input cells), "
                             f"got shape {np.shape(x)}")
        if out is None:
            oa = cnp.PyArray_EMPTY(1, &d, cnp.NPY_DOUBLE, 0)
        elif _f64_out(out, 1) and (<cnp.ndarray>out).shape[0] == self.m:
            oa = <cnp.ndarray>out
        else:
            raise ValueError(f"flat: out must be a contiguous float64 vector of {self.m} "
                             "(writeable, in this machine's byte order)")
        core._reset(False)
        if self.in_run >= 0:                # the defaults, then x's words in one copy
            _scatter(vm.mem, _ptr(self.addrs), _ptr(self.words_in), self.nd)
            memcpy(vm.mem + self.in_run, cnp.PyArray_DATA(xa), self.n * sizeof(double))
        else:
            memcpy(_ptr(self.words_in) + self.nd, cnp.PyArray_DATA(xa),
                   self.n * sizeof(double))
            _scatter(vm.mem, _ptr(self.addrs), _ptr(self.words_in), self.nd + self.n)
        if core._native_run(1 << 62) != 0:
            return None
        oaddr, ow = _ptr(self.out_addrs), <i64*>cnp.PyArray_DATA(oa)
        for i in range(self.m):
            ow[i] = vm.mem[oaddr[i]]
        return oa


cdef inline bint _same_items(object a, object b):
    """a and b are lists of the same objects (a call's fresh `wrt=["z"]`: its strings are the
    interned constants of the call site), without the general comparison."""
    cdef Py_ssize_t i, n
    if type(a) is not list or type(b) is not list:
        return False
    n = len(<list>a)
    if n != len(<list>b):
        return False
    for i in range(n):
        if <PyObject*>(<list>a)[i] != <PyObject*>(<list>b)[i]:
            return False
    return True


@cython.auto_pickle(False)
cdef class HessCall:
    """`rvm.hessian(program, of, wrt, inputs)` repeated on one thread's reused AD machine
    whose runner an earlier call made (cells resolved, paths checked) and whose tangent
    modes run as native code: one core call (Core._gradient with the identity's rows as
    tangents) and a fresh (n, n) array, or None when the general path must run (another
    thread, another (of, wrt), the machine busy, inputs the core does not store, a trap, a
    path that did not retrace, a non-finite value).  HvpCall is the same for rvm.hvp."""
    cdef Core core
    cdef OneShotSlot slot
    cdef object of, wrt
    cdef unsigned long owner
    cdef i64 of_addr, n, rows
    cdef dict cells
    cdef cnp.ndarray def_addrs, def_words, wrt_addrs, g, seeds, h, words, exact
    cdef cnp.ndarray spare              # the last Hessian returned (reused once dropped)
    cdef KeyCache keys                  # the cells of the last call's input names

    def __dealloc__(self):
        keycache_clear(&self.keys)

    def __init__(self, Core core, OneShotSlot slot, of, wrt, i64 of_addr, dict cells,
                 cnp.ndarray def_addrs, cnp.ndarray def_words, cnp.ndarray wrt_addrs,
                 cnp.ndarray exact, bint one_row=False):
        self.core, self.slot, self.of, self.wrt = core, slot, of, wrt
        self.owner = PyThread_get_thread_ident()
        self.of_addr, self.cells = of_addr, cells
        self.def_addrs = np.ascontiguousarray(def_addrs, dtype=np.int64)
        self.def_words = np.ascontiguousarray(def_words, dtype=np.int64)
        self.wrt_addrs = np.ascontiguousarray(wrt_addrs, dtype=np.int64)
        self.n = wrt_addrs.shape[0]
        self.rows = 1 if one_row else self.n
        self.g = np.zeros(self.n)
        self.seeds = np.zeros((1, self.n)) if one_row else np.eye(self.n)
        self.h = np.zeros((self.rows, self.n))
        self.words = np.zeros((3, core.program.n_globals), dtype=np.int64)
        self.exact = np.ascontiguousarray(exact, dtype=np.int64)

    def __call__(self, of, wrt, inputs=None):
        return self.call(of, wrt, inputs)

    cdef bint ready(self, object of, object wrt, object inputs):
        """The call is this object's, on its thread, with inputs it may take."""
        if PyThread_get_thread_ident() != self.owner:
            return False
        if of is not self.of and not PyObject_RichCompareBool(of, self.of, Py_EQ):
            return False
        if wrt is not self.wrt and not _same_items(wrt, self.wrt) and \
                not PyObject_RichCompareBool(wrt, self.wrt, Py_EQ):
            return False
        if inputs is not None and type(inputs) is not dict:
            return False
        return self.core.nat_fwd_t != NULL and not self.slot.busy

    cdef int passes(self, object inputs) except -1:
        """The tangent passes of the seeds' rows into h: 0, or 1 for the general path."""
        cdef i64 k, nw
        cdef i64* ws
        cdef i64* ex
        if self.core._tangent_rows(self.of_addr, _NO_INPUTS if inputs is None else <dict>inputs,
                                   self.cells, self.def_addrs, self.def_words, self.wrt_addrs,
                                   self.g, self.words, <double*>cnp.PyArray_DATA(self.seeds),
                                   <double*>cnp.PyArray_DATA(self.h), self.rows,
                                   &self.keys) != 0:
            return 1
        if self.core.vm.t != 0:
            return 1
        ws, ex = _ptr(self.words), _ptr(self.exact)
        nw = self.words.shape[1]
        for k in range(self.exact.shape[0]):
            if ws[ex[k]] != ws[2 * nw + ex[k]]:
                return 1
        return 0

    cdef object call(self, object of, object wrt, object inputs):
        cdef i64 i, j, n = self.n
        cdef double* src
        cdef double* dst
        cdef cnp.npy_intp dims[2]
        cdef cnp.ndarray res
        if not self.ready(of, wrt, inputs) or self.passes(inputs) != 0:
            return None
        res = self.spare
        if res is None or Py_REFCNT(res) != 2 or not cnp.PyArray_ISWRITEABLE(res):
            # a fresh array unless the caller dropped the last one (only self.spare and res
            # hold it, no view of it lives): then it is reused, as RunCall reuses a Result
            # (a loop of calls makes no array; an array still held is never touched)
            dims[0] = dims[1] = n
            res = PyArray_EMPTY(2, dims, cnp.NPY_DOUBLE, 0)
            self.spare = res
        src = <double*>cnp.PyArray_DATA(self.h)
        dst = <double*>cnp.PyArray_DATA(res)
        for i in range(n):                  # the transpose of the rows the passes made
            for j in range(n):
                dst[i * n + j] = src[j * n + i]
        return res


@cython.auto_pickle(False)
cdef class HvpCall(HessCall):
    """`rvm.hvp(program, of, wrt, v, inputs)` repeated, as HessCall: the direction v ({wrt
    name: a Python float for a scalar cell, a contiguous float64 array of the cell's size for
    an array}) is the one tangent row; returns {wrt name: np.float64 or a fresh array of the
    cell's shape}, or None for the general path."""
    cdef list parts                     # (name, offset, size, shape or None for a scalar)

    def __init__(self, Core core, OneShotSlot slot, of, wrt, i64 of_addr, dict cells,
                 cnp.ndarray def_addrs, cnp.ndarray def_words, cnp.ndarray wrt_addrs,
                 cnp.ndarray exact, list parts):
        HessCall.__init__(self, core, slot, of, wrt, of_addr, cells, def_addrs, def_words,
                          wrt_addrs, exact, True)
        self.parts = parts

    def __call__(self, of, wrt, v, inputs=None):
        return self.hvp(of, wrt, v, inputs)

    cdef object hvp(self, object of, object wrt, object v, object inputs):
        cdef double* sd = <double*>cnp.PyArray_DATA(self.seeds)
        cdef double* hd = <double*>cnp.PyArray_DATA(self.h)
        cdef i64 at, size
        cdef cnp.ndarray a
        cdef dict res = {}
        if type(v) is not dict or not self.ready(of, wrt, inputs):
            return None
        for name, at, size, shape in self.parts:
            x = (<dict>v).get(name)
            if shape is None:
                if type(x) is not float:
                    return None
                sd[at] = <double>x
            else:
                if type(x) is not cnp.ndarray:
                    return None
                a = <cnp.ndarray>x
                if not _f64(a) or a.shape[0] != size:
                    return None
                memcpy(sd + at, cnp.PyArray_DATA(a), size * sizeof(double))
        if self.passes(inputs) != 0:
            return None
        for name, at, size, shape in self.parts:
            if shape is None:
                res[name] = PyArray_Scalar(&hd[<i64>at], self.h.descr, None)
            else:
                res[name] = self.h[0, at:at + size].reshape(shape).copy()
        return res


@cython.auto_pickle(False)
cdef class JvpCall:
    """`rvm.jvp(program, inputs, tangents)` repeated on one thread's reused AD machine whose
    runner for these tangents' names an earlier call made, with native tangent modes: reset,
    inputs and tangents stored, the native forward run with tangents, {output: tangent} of
    every differentiable output (np.float64 or a fresh array), or None for the general path
    (another thread, the machine busy, other names or values it does not store, a trap, a
    non-finite tangent, a tangent released nonzero: the general path reports them)."""
    cdef Core core
    cdef OneShotSlot slot
    cdef unsigned long owner
    cdef dict cells
    cdef cnp.ndarray def_addrs, def_words
    cdef list seeds                     # (name, address, size, scalar?) of the tangents
    cdef list outs                      # (name, address, size, shape or None)
    cdef object f64
    cdef KeyCache keys                  # the cells of the last call's input names

    def __dealloc__(self):
        keycache_clear(&self.keys)

    def __init__(self, Core core, OneShotSlot slot, dict cells, cnp.ndarray def_addrs,
                 cnp.ndarray def_words, list seeds, list outs):
        self.core, self.slot = core, slot
        self.owner = PyThread_get_thread_ident()
        self.cells = cells
        self.def_addrs = np.ascontiguousarray(def_addrs, dtype=np.int64)
        self.def_words = np.ascontiguousarray(def_words, dtype=np.int64)
        self.seeds, self.outs = seeds, outs
        self.f64 = np.dtype(np.float64)

    def __call__(self, inputs, tangents):
        return self.call(inputs, tangents)

    cdef object call(self, object inputs, object tangents):
        cdef Core core = self.core
        cdef VM* vm = &core.vm
        cdef i64 i, addr, size
        cdef cnp.ndarray a
        cdef cnp.npy_intp d
        cdef dict res = {}
        if PyThread_get_thread_ident() != self.owner or core.nat_fwd_t == NULL or \
                self.slot.busy or core._duals is None or vm.brk != NULL or vm.n_watch != 0:
            return None
        if inputs is None:
            inputs = _NO_INPUTS
        elif type(inputs) is not dict:
            return None
        if type(tangents) is not dict or len(<dict>tangents) != len(self.seeds):
            return None
        vm.ad = _AD_TAN
        core._reset(False)                  # (the duals too)
        _scatter(vm.mem, _ptr(self.def_addrs), _ptr(self.def_words), self.def_addrs.shape[0])
        if _store_inputs(vm, <dict>inputs, self.cells, &self.keys) != 0:
            return None
        for name, addr, size, scalar in self.seeds:
            x = (<dict>tangents).get(name)
            if scalar:
                if type(x) is not float:
                    return None
                vm.tan[addr] = <double>x
            else:
                if type(x) is not cnp.ndarray:
                    return None
                a = <cnp.ndarray>x
                if not _f64(a) or a.shape[0] != size:
                    return None
                memcpy(vm.tan + addr, cnp.PyArray_DATA(a), size * sizeof(double))
        if core.tangent_run() != 0 or vm.ev_release != 0:
            return None
        for name, addr, size, shape in self.outs:
            for i in range(size):
                if not isfinite(vm.tan[addr + i]):
                    return None
            if shape is None:
                res[name] = PyArray_Scalar(&vm.tan[addr], self.f64, None)
            else:
                d = size
                a = PyArray_EMPTY(1, &d, cnp.NPY_DOUBLE, 0)
                memcpy(cnp.PyArray_DATA(a), vm.tan + addr, size * sizeof(double))
                res[name] = a if len(shape) == 1 else a.reshape(shape)
        return res


# ---- the one-shot public calls (rvm.run, rvm.hessian, rvm.hvp, rvm.jvp) as C functions ------

@cython.auto_pickle(False)
cdef class OneShotEntry:
    """The fields of rvm.oneshot's per-Program entry (its base class; rvm/oneshot.py says
    what each holds), here so that the public calls below read the C calls in it directly."""
    cdef public object local, lock, grad_fns, batch_machines
    cdef public object run_call, hess_call, hvp_call, jvp_call


cdef object _gen_run = None, _gen_hessian = None, _gen_hvp = None, _gen_jvp = None
cdef object _gen_grad = None


cdef extern from "Python.h":
    PyObject** _PyObject_GetDictPtr(object)
    PyObject* PyDict_GetItemWithError(PyObject*, PyObject*)
    PyObject* PyErr_Occurred()
    void PyErr_Clear()


cdef inline OneShotEntry _entry_of(object program):
    """The Program's one-shot entry (rvm.oneshot.entry keeps it in the Program's __dict__),
    or None: one lookup in that dict."""
    cdef PyObject** dp = _PyObject_GetDictPtr(program)
    cdef PyObject* e
    if dp == NULL or dp[0] == NULL:
        return None
    e = PyDict_GetItemWithError(dp[0], <PyObject*>"_oneshot")
    if e == NULL:
        if PyErr_Occurred() != NULL:        # (a key whose comparison raised: not ours)
            PyErr_Clear()
        return None
    if not isinstance(<object>e, OneShotEntry):
        return None
    return <OneShotEntry>e


def oneshot_run(program, values=None, *, reverse=False, max_steps=None, trace=None,
                **machine_options):
    cdef OneShotEntry e
    cdef object r
    if max_steps is None and trace is None and not machine_options:
        e = _entry_of(program)
        if e is not None and e.run_call is not None:
            r = (<RunCall>e.run_call).call(values, reverse)
            if r is not None:
                return r
    return _gen_run(program, values, reverse=reverse, max_steps=max_steps, trace=trace,
                    **machine_options)


def oneshot_hessian(program, of, wrt, inputs=None, **options):
    cdef OneShotEntry e
    cdef object h
    if not options:
        e = _entry_of(program)
        if e is not None and e.hess_call is not None:
            h = (<HessCall>e.hess_call).call(of, wrt, inputs)
            if h is not None:
                return h
    return _gen_hessian(program, of, wrt, inputs, **options)


def oneshot_hvp(program, of, wrt, v, inputs=None, **options):
    cdef OneShotEntry e
    cdef object h
    if not options:
        e = _entry_of(program)
        if e is not None and e.hvp_call is not None:
            h = (<HvpCall>e.hvp_call).hvp(of, wrt, v, inputs)
            if h is not None:
                return h
    return _gen_hvp(program, of, wrt, v, inputs, **options)


def oneshot_jvp(program, inputs, tangents, **options):
    cdef OneShotEntry e
    cdef object t
    if not options:
        e = _entry_of(program)
        if e is not None and e.jvp_call is not None:
            t = (<JvpCall>e.jvp_call).call(inputs, tangents)
            if t is not None:
                return t
    return _gen_jvp(program, inputs, tangents, **options)


cdef inline bint _all_str(tuple names):
    """Every name a str: the grad_fns key then hashes without Python code (anything else goes
    to the general path, which names the error)."""
    cdef object x
    for x in names:
        if type(x) is not str:
            return False
    return True


def oneshot_grad(program, of, wrt, inputs=None, **options):
    cdef OneShotEntry e
    cdef object f, names
    # rvm.grad(..., check_ancillas=False) repeated: the Program's shared grad_fn of (of, wrt)
    # (a GradFn: its call is C too), found by its key without the general path's Python
    if len(options) == 1 and options.get("check_ancillas") is False and type(of) is str:
        e = _entry_of(program)
        if e is not None and type(e.grad_fns) is dict:
            if type(wrt) is list or type(wrt) is tuple:
                names = tuple(wrt)
            elif type(wrt) is str and "," not in <str>wrt:
                names = (wrt,)
            else:
                names = None
            if names is not None and _all_str(names):
                f = (<dict>e.grad_fns).get((of, names, ()))
                if f is not None:
                    return f(inputs)
    return _gen_grad(program, of, wrt, inputs, **options)


# The public calls' own vectorcall (issue 16).  A def function with **options makes a dict
# and parses the keywords by Cython's general routine on every call: about 480 of the 2.7K
# instructions of T2's repeated rvm.hessian (callgrind).  oneshot_public gives each public
# call a C entry that takes the arguments of the repeated call from the vectorcall's array as
# they are (its parameter names, by identity: a call site's keywords are interned), calls the
# bound C call, and otherwise hands the whole call to the function's own vectorcall, which
# runs it as before (errors, other options, the general path).

cdef extern from *:
    """
    typedef PyObject* (*__pyx_rvm_vc)(PyObject*, PyObject* const*, size_t, PyObject*);
    static void* __pyx_rvm_vc_get(PyObject* f) { return (void*)((PyCFunctionObject*)f)->vectorcall; }
    static void __pyx_rvm_vc_set(PyObject* f, void* g) {
        ((PyCFunctionObject*)f)->vectorcall = (__pyx_rvm_vc)g;
    }
    static PyObject* __pyx_rvm_vc_call(void* g, PyObject* f, PyObject** args, size_t nargsf,
                                       PyObject* kwnames) {
        return ((__pyx_rvm_vc)g)(f, (PyObject* const*)args, nargsf, kwnames);
    }
    """
    void* _vc_get "__pyx_rvm_vc_get"(object f)
    void _vc_set "__pyx_rvm_vc_set"(object f, void* g)
    object _vc_call "__pyx_rvm_vc_call"(void* g, object f, PyObject** args, size_t nargsf,
                                        PyObject* kwnames)
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    Py_ssize_t PyTuple_GET_SIZE(PyObject* t)
    PyObject* PyTuple_GET_ITEM(PyObject* t, Py_ssize_t i)


cdef enum:
    _VC_MAX = 5                 # parameters a fast entry reads


cdef struct VcNames:
    # a fast entry's parameter names (the interned str objects of the tuples below, which
    # keep them alive), how many, and how many may come by position
    PyObject* name[_VC_MAX]
    Py_ssize_t n, npos


cdef int _vc_names(VcNames* vn, tuple names, Py_ssize_t npos) except -1:
    cdef Py_ssize_t i
    vn.n, vn.npos = len(names), npos
    for i in range(vn.n):
        vn.name[i] = <PyObject*>names[i]
    return 0


cdef int _vc_args(PyObject** args, size_t nargsf, PyObject* kwnames, VcNames* vn,
                  PyObject** out) noexcept:
    """The arguments of a vectorcall into out[k] (borrowed; NULL where not given) by the
    parameter names vn (the first vn.npos may come by position): 0, or 1 when the call has
    some other argument (more positional ones, another keyword, one given twice), which only
    the function's own parsing may take."""
    cdef Py_ssize_t n = PyVectorcall_NARGS(nargsf), nk, i, j
    cdef PyObject* k
    for i in range(_VC_MAX):
        out[i] = NULL
    if n > vn.npos:
        return 1
    for i in range(n):
        out[i] = args[i]
    if kwnames == NULL:
        return 0
    nk = PyTuple_GET_SIZE(kwnames)
    for i in range(nk):
        k = PyTuple_GET_ITEM(kwnames, i)
        j = 0
        while j < vn.n and vn.name[j] != k:
            j += 1
        if j == vn.n or out[j] != NULL:
            return 1
        out[j] = args[n + i]
    return 0


cdef tuple _N_RUN = ("program", "values", "reverse")
cdef tuple _N_HESSIAN = ("program", "of", "wrt", "inputs")
cdef tuple _N_HVP = ("program", "of", "wrt", "v", "inputs")
cdef tuple _N_JVP = ("program", "inputs", "tangents")
cdef tuple _N_GRAD = ("program", "of", "wrt", "inputs", "check_ancillas")
cdef void* _vc_run = NULL
cdef void* _vc_hessian = NULL
cdef void* _vc_hvp = NULL
cdef void* _vc_jvp = NULL
cdef void* _vc_grad = NULL
cdef VcNames _vn_run, _vn_hessian, _vn_hvp, _vn_jvp, _vn_grad
_vc_names(&_vn_run, _N_RUN, 2)
_vc_names(&_vn_hessian, _N_HESSIAN, 4)
_vc_names(&_vn_hvp, _N_HVP, 5)
_vc_names(&_vn_jvp, _N_JVP, 3)
_vc_names(&_vn_grad, _N_GRAD, 4)


cdef inline object _opt(PyObject* a):
    return None if a == NULL else <object>a


cdef object _fast_run(object f, PyObject** args, size_t nargsf, PyObject* kwnames):
    cdef PyObject* a[_VC_MAX]
    cdef OneShotEntry e
    cdef object r
    if _vc_args(args, nargsf, kwnames, &_vn_run, a) == 0 and a[0] != NULL and \
            (a[2] == NULL or <object>a[2] is True or <object>a[2] is False):
        e = _entry_of(<object>a[0])
        if e is not None and e.run_call is not None:
            r = (<RunCall>e.run_call).call(_opt(a[1]), a[2] != NULL and <object>a[2] is True)
            if r is not None:
                return r
    return _vc_call(_vc_run, f, args, nargsf, kwnames)


cdef object _fast_hessian(object f, PyObject** args, size_t nargsf, PyObject* kwnames):
    cdef PyObject* a[_VC_MAX]
    cdef OneShotEntry e
    cdef object h
    if _vc_args(args, nargsf, kwnames, &_vn_hessian, a) == 0 and a[0] != NULL and \
            a[1] != NULL and a[2] != NULL:
        e = _entry_of(<object>a[0])
        if e is not None and e.hess_call is not None:
            h = (<HessCall>e.hess_call).call(<object>a[1], <object>a[2], _opt(a[3]))
            if h is not None:
                return h
    return _vc_call(_vc_hessian, f, args, nargsf, kwnames)


cdef object _fast_hvp(object f, PyObject** args, size_t nargsf, PyObject* kwnames):
    cdef PyObject* a[_VC_MAX]
    cdef OneShotEntry e
    cdef object h
    if _vc_args(args, nargsf, kwnames, &_vn_hvp, a) == 0 and a[0] != NULL and \
            a[1] != NULL and a[2] != NULL and a[3] != NULL:
        e = _entry_of(<object>a[0])
        if e is not None and e.hvp_call is not None:
            h = (<HvpCall>e.hvp_call).hvp(<object>a[1], <object>a[2], <object>a[3], _opt(a[4]))
            if h is not None:
                return h
    return _vc_call(_vc_hvp, f, args, nargsf, kwnames)


cdef object _fast_jvp(object f, PyObject** args, size_t nargsf, PyObject* kwnames):
    cdef PyObject* a[_VC_MAX]
    cdef OneShotEntry e
    cdef object t
    if _vc_args(args, nargsf, kwnames, &_vn_jvp, a) == 0 and a[0] != NULL and \
            a[1] != NULL and a[2] != NULL:
        e = _entry_of(<object>a[0])
        if e is not None and e.jvp_call is not None:
            t = (<JvpCall>e.jvp_call).call(<object>a[1], <object>a[2])
            if t is not None:
                return t
    return _vc_call(_vc_jvp, f, args, nargsf, kwnames)


cdef object _fast_grad(object f, PyObject** args, size_t nargsf, PyObject* kwnames):
    cdef PyObject* a[_VC_MAX]
    cdef OneShotEntry e
    cdef object g, names, wrt
    # rvm.grad(..., check_ancillas=False) repeated: the Program's shared grad_fn of (of, wrt)
    # (a GradFn: its call is C too), found by its key without the general path's Python
    if _vc_args(args, nargsf, kwnames, &_vn_grad, a) == 0 and a[0] != NULL and \
            a[1] != NULL and a[2] != NULL and a[4] != NULL and <object>a[4] is False and \
            type(<object>a[1]) is str:
        e = _entry_of(<object>a[0])
        if e is not None and type(e.grad_fns) is dict:
            wrt = <object>a[2]
            if type(wrt) is list or type(wrt) is tuple:
                names = tuple(wrt)
            elif type(wrt) is str and "," not in <str>wrt:
                names = (wrt,)
            else:
                names = None
            if names is not None and _all_str(names):
                g = (<dict>e.grad_fns).get((<object>a[1], names, ()))
                if g is not None:
                    return g(_opt(a[3]))
    return _vc_call(_vc_grad, f, args, nargsf, kwnames)


def oneshot_public(str name, general):
    """The public call `name` ("run", "hessian", "hvp", "jvp" or "grad") as its C function:
    the repeated call one C call into the Program's bound C call (its own vectorcall, above),
    anything else (the first calls, options, another thread, a trap) `general(...)`, the
    Python implementation, whose name, docstring and signature (inspect follows __wrapped__)
    the function takes."""
    global _gen_run, _gen_hessian, _gen_hvp, _gen_jvp, _gen_grad
    global _vc_run, _vc_hessian, _vc_hvp, _vc_jvp, _vc_grad
    import functools
    if name == "run":
        f, _gen_run = oneshot_run, general
    elif name == "hessian":
        f, _gen_hessian = oneshot_hessian, general
    elif name == "hvp":
        f, _gen_hvp = oneshot_hvp, general
    elif name == "jvp":
        f, _gen_jvp = oneshot_jvp, general
    elif name == "grad":
        f, _gen_grad = oneshot_grad, general
    else:
        raise ValueError(f"no one-shot call {name!r}")
    functools.update_wrapper(f, general)
    f.__name__ = f.__qualname__ = name
    own = _vc_get(f)
    if name == "run":
        if _vc_run == NULL:
            _vc_run = own
            _vc_set(f, <void*>_fast_run)
    elif name == "hessian":
        if _vc_hessian == NULL:
            _vc_hessian = own
            _vc_set(f, <void*>_fast_hessian)
    elif name == "hvp":
        if _vc_hvp == NULL:
            _vc_hvp = own
            _vc_set(f, <void*>_fast_hvp)
    elif name == "jvp":
        if _vc_jvp == NULL:
            _vc_jvp = own
            _vc_set(f, <void*>_fast_jvp)
    elif _vc_grad == NULL:
        _vc_grad = own
        _vc_set(f, <void*>_fast_grad)
    return f
