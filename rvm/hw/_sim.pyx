# cython: language_level=3
"""Bit-sliced gate simulation and the ASAP depth pass over the flat gate arrays of
rvm/hw/circuit.py.

A state is a uint64 array [n_wires, n_blocks]: bit l of state[w, j] is wire w of input
number 64*j + l, so one pass over the gates simulates 64 independent inputs per block and an
8-bit instruction with 2**16 or 2**24 inputs runs in milliseconds.
"""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t

import numpy as np

cdef enum:
    K_NOT = 0
    K_CNOT = 1
    K_TOFFOLI = 2
    K_MCX = 3
    K_FREDKIN = 4
    K_ALLOC = 5
    K_FREE = 6


@cython.boundscheck(False)
@cython.wraparound(False)
def run(const int32_t[:, ::1] gates, const int32_t[::1] controls, uint64_t[:, ::1] state):
    """Apply every gate to every block.  Returns -1, or the index of the first ALLOC/FREE
    whose wire is not zero in some input (the state is then left as it was after the gates
    before it)."""
    cdef Py_ssize_t g, j, k, nb = state.shape[1]
    cdef int32_t kind, t, c1, c2, off, cnt, cw
    cdef uint64_t m, v
    cdef uint64_t ALL = <uint64_t>0xFFFFFFFFFFFFFFFF
    with nogil:
        for g in range(gates.shape[0]):
            kind = gates[g, 0]
            t = gates[g, 1]
            c1 = gates[g, 2]
            c2 = gates[g, 3]
            if kind == K_NOT:
                for j in range(nb):
                    state[t, j] ^= ALL
            elif kind == K_CNOT:
                for j in range(nb):
                    state[t, j] ^= state[c1, j]
            elif kind == K_TOFFOLI:
                for j in range(nb):
                    state[t, j] ^= state[c1, j] & state[c2, j]
            elif kind == K_MCX:
                off = c1
                cnt = c2
                for j in range(nb):
                    m = ALL
                    for k in range(cnt):
                        cw = controls[off + k]
                        if cw >= 0:
                            m &= state[cw, j]
                        else:
                            m &= ~state[~cw, j]
                    state[t, j] ^= m
            elif kind == K_FREDKIN:
                # t = first target, c1 = second target, c2 = control
                for j in range(nb):
                    v = (state[t, j] ^ state[c1, j]) & state[c2, j]
                    state[t, j] ^= v
                    state[c1, j] ^= v
            else:   # ALLOC / FREE: the wire must be zero in every input
                for j in range(nb):
                    if state[t, j] != 0:
                        with gil:
                            return g
    return -1


@cython.boundscheck(False)
@cython.wraparound(False)
def depth(const int32_t[:, ::1] gates, const int32_t[::1] controls, Py_ssize_t n_wires,
          int64_t[::1] lv=None, int64_t[::1] tl=None):
    """(depth, Toffoli depth) by ASAP scheduling: a gate starts after the last gate on any of
    its wires.  The Toffoli depth counts, along the worst path, the gates with two or more
    controls (Toffoli, multi-controlled NOT with >= 2 controls, Fredkin).

    `lv` and `tl` (length n_wires) give each wire's level and Toffoli level on entry and are
    updated in place, so a program's circuits can be scheduled one after another on shared
    wires; without them every wire starts at 0 and the result is the circuit's own depth."""
    cdef Py_ssize_t g, k, i = 0
    cdef int32_t kind, t, c1, c2, w
    cdef int32_t ws[3]
    cdef int64_t d, td, heavy
    cdef int64_t best = 0, tbest = 0
    if lv is None:
        lv = np.zeros(n_wires, dtype=np.int64)
    if tl is None:
        tl = np.zeros(n_wires, dtype=np.int64)
    if lv.shape[0] < n_wires or tl.shape[0] < n_wires:
        raise ValueError("level arrays shorter than the wire count")
    for w in range(n_wires):
        if lv[w] > best:
            best = lv[w]
        if tl[w] > tbest:
            tbest = tl[w]
    for g in range(gates.shape[0]):
        kind = gates[g, 0]
        if kind == K_ALLOC or kind == K_FREE:
            continue
        t = gates[g, 1]
        c1 = gates[g, 2]
        c2 = gates[g, 3]
        d = lv[t]
        td = tl[t]
        heavy = 0
        if kind == K_MCX:
            heavy = 1 if c2 >= 2 else 0
            for k in range(c2):
                w = controls[c1 + k]
                if w < 0:
                    w = ~w
                if lv[w] > d:
                    d = lv[w]
                if tl[w] > td:
                    td = tl[w]
        else:
            # the wires besides t: CNOT c1; Toffoli c1, c2; Fredkin t2 = c1 and control c2
            ws[0] = c1
            ws[1] = c2
            i = 0 if kind == K_NOT else 1 if kind == K_CNOT else 2
            heavy = 1 if i == 2 else 0
            for k in range(i):
                w = ws[k]
                if lv[w] > d:
                    d = lv[w]
                if tl[w] > td:
                    td = tl[w]
        d += 1
        td += heavy
        lv[t] = d
        tl[t] = td
        if kind == K_MCX:
            for k in range(c2):
                w = controls[c1 + k]
                if w < 0:
                    w = ~w
                lv[w] = d
                tl[w] = td
        else:
            for k in range(i):
                lv[ws[k]] = d
                tl[ws[k]] = td
        if d > best:
            best = d
        if td > tbest:
            tbest = td
    return best, tbest


cdef inline void transpose64(uint64_t* a) noexcept nogil:
    """In-place transpose of a 64x64 bit matrix (row i = a[i], column j = bit j): bit j of
    a[i] and bit i of a[j] trade places.  Six rounds of block swaps (Hacker's Delight 7-3),
    about 400 word operations instead of 4096 single-bit moves."""
    cdef int j = 32, k
    cdef uint64_t m = 0x00000000FFFFFFFF, t
    while j:
        k = 0
        while k < 64:
            t = ((a[k] >> j) ^ a[k | j]) & m
            a[k | j] ^= t
            a[k] ^= t << j
            k = ((k | j) + 1) & ~j
        j >>= 1
        m ^= m << j


@cython.boundscheck(False)
@cython.wraparound(False)
def scatter(const uint64_t[::1] values, const int32_t[::1] wires, uint64_t[:, ::1] state):
    """Bit-slice values onto wires: bit j of values[i] goes to lane i % 64 of block i // 64 of
    wire wires[j] (those rows are overwritten; lanes past the last value are zero)."""
    cdef Py_ssize_t i, j, b, nbits = wires.shape[0], count = values.shape[0]
    cdef Py_ssize_t nb = state.shape[1], lanes
    cdef uint64_t buf[64]
    if nbits > 64:
        raise ValueError("a register has at most 64 wires")
    with nogil:
        for b in range(nb):
            lanes = count - 64 * b
            if lanes > 64:
                lanes = 64
            for i in range(64):
                buf[i] = values[64 * b + i] if i < lanes else 0
            transpose64(buf)
            for j in range(nbits):
                state[wires[j], b] = buf[j]


@cython.boundscheck(False)
@cython.wraparound(False)
def gather(const uint64_t[:, ::1] state, const int32_t[::1] wires, uint64_t[::1] out):
    """The inverse of scatter: out[i] gets bit j from lane i % 64 of block i // 64 of wire
    wires[j]."""
    cdef Py_ssize_t i, j, b, nbits = wires.shape[0], count = out.shape[0], lanes
    cdef uint64_t buf[64]
    if nbits > 64:
        raise ValueError("a register has at most 64 wires")
    with nogil:
        for b in range((count + 63) // 64):
            for j in range(64):
                buf[j] = state[wires[j], b] if j < nbits else 0
            transpose64(buf)
            lanes = count - 64 * b
            if lanes > 64:
                lanes = 64
            for i in range(lanes):
                out[64 * b + i] = buf[i]
