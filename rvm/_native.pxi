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
ctypedef i64 (*native_fn)(NativeState*) noexcept nogil     # rvm_native_fn

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
