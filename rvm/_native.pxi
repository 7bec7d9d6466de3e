# rvm/_core.pyx includes this file: the native entry: NativeState (the native code's ABI) and native_run.
# (Text included into the one extension module: it shares the core's names.)

# ---- native code (rvm/native): a program's forward run and adjoint sweep compiled to C -------

cdef extern from "_abi.h" nogil:
    # rvm_ns, the state a native entry point runs on, is generated from isa/cgen.py (its layout
    # is the header's; these are the fields the core reads and sets, checked by the C compiler)
    ctypedef struct NativeState "rvm_ns":
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
        double* tan           # tangent modes (rvm/native/tangent.py): the cells' tangents and
        double* adjt          # adjoints' tangents, and those of the value stack
        double* stan
        double* sadjt
        i64 rel_n             # tangents dropped nonzero (ad_release): count, first pc, largest
        i64 rel_pc
        double rel_max
        double* vtan          # the lane modes: `lanes` tangents per cell and stack slot
        double* vadjt
        double* vstan
        double* vsadjt
        i64 lanes
        double* n_tan[3]      # derivative statements (rvm/native/nested.py): a dual set per
        double* n_adj[3]      # nesting level (index 0 unused), the level running, its mode
        double* n_adjt[3]     # and the nested runs' steps (in `steps`; t counts a statement 1)
        double* n_stan[3]
        double* n_sadj[3]
        double* n_sadjt[3]
        i64 nest
        i64 ad
        i64 nest_steps
ctypedef i64 (*native_fn)(NativeState*) noexcept nogil     # rvm_native_fn

cdef extern from "Python.h":
    int _check_signals "PyErr_CheckSignals" ()      # no Cython error check: poll reports it


cdef inline void native_nest(VM* vm, NativeState* st) noexcept nogil:
    """The native code's derivative statements: the machine's dual set per nesting level
    (NULL in a program without statements).  (The level, mode and nested steps every entry
    point sets itself: codegen.entries.)"""
    cdef int k
    for k in range(3):
        st.n_tan[k] = vm.n_tan[k]
        st.n_adj[k] = vm.n_adj[k]
        st.n_adjt[k] = vm.n_adjt[k]
        st.n_stan[k] = vm.n_stan[k]
        st.n_sadj[k] = vm.n_sadj[k]
        st.n_sadjt[k] = vm.n_sadjt[k]


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
    if rc == RVM_NATIVE_STOPPED:
        return -1
    return <int>rc


cdef struct RunState:
    # a NativeState (first: the native code sees only it) with a step cap: Core.native_run
    NativeState st
    i64 cap               # stop (and let the interpreter run) once this many steps have run
    int capped


cdef int native_poll_capped(NativeState* st) noexcept with gil:
    """native_poll, and a stop once the run has used up its step cap (the POLL macro has
    just set budget = steps + 2^24)."""
    cdef RunState* rs = <RunState*>st
    cdef i64 n = st.budget - (1 << 24)
    if n >= rs.cap:
        rs.capped = 1
        return 1
    if st.budget > rs.cap:
        st.budget = rs.cap
    with nogil:
        pass
    return _check_signals() != 0


cdef int native_run_capped(native_fn f, RunState* rs) except -1:
    """Run f as native_run does, with the cap: RVM_NATIVE_DONE, or RVM_NATIVE_BAIL (the
    interpreter must run: a trap or the cap); raises what a signal handler raised."""
    cdef i64 rc
    rs.st.budget = rs.st.steps + min(<i64>1 << 16, rs.cap)
    rs.st.poll = native_poll_capped
    rc = f(&rs.st)
    if rc == RVM_NATIVE_STOPPED:
        if rs.capped:
            return RVM_NATIVE_BAIL
        return -1
    return <int>rc


# ---- inputs into memory (the one-shot calls, Core._gradient) ------------------------------

from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.object cimport PyObject

cdef extern from "Python.h":
    bint PyDict_Next(object d, Py_ssize_t* pos, PyObject** key, PyObject** value)


cdef enum:
    _KEYS = 8                   # a KeyCache remembers this many names


cdef struct KeyCache:
    # the cells of the names a caller passed last, by position in its dict: a call that
    # passes the same name objects again (a dict literal's keys are the same interned
    # strings every time) finds its cells by a pointer compare, without hashing or lookup
    PyObject* key[_KEYS]        # strong references (keycache_clear drops them)
    i64 addr[_KEYS]
    i64 size[_KEYS]
    int kind[_KEYS]


cdef void keycache_clear(KeyCache* kc) noexcept:
    cdef int i
    for i in range(_KEYS):
        Py_XDECREF(kc.key[i])
        kc.key[i] = NULL


cdef inline bint _f64(object x) noexcept:
    """x is a C-contiguous float64 vector in this machine's byte order: its bytes are the
    doubles (an array in the other byte order has the float64 type number too)."""
    return type(x) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_DOUBLE and \
        cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>x) and (<cnp.ndarray>x).ndim == 1 and \
        cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x)


cdef inline bint _f64_out(object out, int ndim) noexcept:
    """out can take doubles written through its data pointer: a writeable C-contiguous
    float64 array of ndim dimensions in this machine's byte order."""
    return type(out) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>out) == cnp.NPY_DOUBLE \
        and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>out) and \
        cnp.PyArray_ISWRITEABLE(<cnp.ndarray>out) and (<cnp.ndarray>out).ndim == ndim and \
        cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>out)


cdef int _store_inputs(VM* vm, dict values, dict cells, KeyCache* kc=NULL) except -1:
    """Write `values` ({global name: value}) into memory as Machine.write would, for the
    values that need no conversion beyond a word's bits: a Python float into a float scalar,
    a Python int into an int scalar, a contiguous float64 (int64) vector of the right length
    into a float (int) array, a list of Python floats of the right length into a float
    array.  `cells`: {name: (address, kind 0 int / 1 float / 2 float array / 3 int array,
    size)}.  1 (nothing trustworthy written: the general path must run it)
    for any other name or value.  `kc` (optional) remembers the names' cells."""
    cdef i64 addr, iv, n, i
    cdef int kind, overflow, at = -1
    cdef cnp.ndarray a
    cdef PyObject* k
    cdef PyObject* pv
    cdef Py_ssize_t pos = 0
    # the dict's own iteration (borrowed references: nothing here runs Python code that could
    # change it, and a str key's lookup in `cells` cannot either)
    while PyDict_Next(values, &pos, &k, &pv):
        at += 1
        v = <object>pv
        if kc != NULL and at < _KEYS and kc.key[at] == k:
            addr, kind, n = kc.addr[at], kc.kind[at], kc.size[at]
        else:
            name = <object>k
            cell = cells.get(name)
            if cell is None:
                return 1
            addr = (<tuple>cell)[0]
            kind = (<tuple>cell)[1]
            n = (<tuple>cell)[2]
            if kc != NULL and at < _KEYS:
                Py_XDECREF(kc.key[at])
                Py_INCREF(name)
                kc.key[at] = k
                kc.addr[at], kc.kind[at], kc.size[at] = addr, kind, n
        if kind == 1:                               # float scalar
            if type(v) is not float:
                return 1
            vm.mem[addr] = rvm_f2w(<double>v)
        elif kind == 0:                             # int scalar
            if type(v) is not int:
                return 1
            iv = PyLong_AsLongLongAndOverflow(v, &overflow)
            if overflow:
                return 1
            vm.mem[addr] = iv
        elif kind == 2 and type(v) is list:         # float array from Python floats
            if len(<list>v) != n:
                return 1
            for i in range(n):
                x = (<list>v)[i]
                if type(x) is not float:
                    return 1
                vm.mem[addr + i] = rvm_f2w(<double>x)
        else:                                       # 2: float array, 3: int array
            if type(v) is not cnp.ndarray:
                return 1
            a = <cnp.ndarray>v
            if a.ndim != 1 or a.shape[0] != n or not cnp.PyArray_IS_C_CONTIGUOUS(a) or \
                    cnp.PyArray_TYPE(a) != (cnp.NPY_DOUBLE if kind == 2 else cnp.NPY_INT64) or \
                    not cnp.PyArray_ISNOTSWAPPED(a):
                return 1
            memcpy(vm.mem + addr, cnp.PyArray_DATA(a), n * sizeof(i64))
    return 0


cdef void _static_duals(VM* vm, bint adj, bint tan, bint adjt) noexcept nogil:
    """Clear the static cells' and the value stack's adjoints (adj), tangents (tan) and
    adjoints' tangents (adjt): what a native pass leaves behind for the next.  Native code
    clears main's frame duals as it enters main and a callee's at its call (ad_frame), so a
    pass that runs native code needs no more (the interpreter's needs _row_start's)."""
    cdef i64 n = min(max(vm.peak_sp, vm.sp) + 1, max(vm.stack_cap, 1))
    if adj:
        memset(vm.adj, 0, vm.n_static * sizeof(double))
        memset(vm.sadj, 0, n * sizeof(double))
    if tan:
        memset(vm.tan, 0, vm.n_static * sizeof(double))
        memset(vm.stan, 0, n * sizeof(double))
    if adjt:
        memset(vm.adjt, 0, vm.n_static * sizeof(double))
        memset(vm.sadjt, 0, n * sizeof(double))
