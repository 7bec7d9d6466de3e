"""The lane forms of the table's instructions (isa/cgen.py: rvm_lop_<name>, which the batch
lanes of rvm/native/lanes.py run): on the same words as rvm_op_<name>, the scalar form that
the interpreter and the native code run, a lane form flags a failure exactly when the scalar
form traps, and otherwise writes the same target words bit for bit.  Every instruction with a
body, on words that include the edge cases (zeros of both signs, infinities, NaN, numbers
that overflow when added or multiplied, a division by zero, the int extremes)."""
from __future__ import annotations

import ctypes
import math
import struct

import numpy as np
import pytest

from isa.cgen import func_name, has_body, lane_name, operand_names
from isa.functions import FN1, FN2
from isa.table import OPS
from isa.types import ALL_TYPES, FIXED, FLOAT, INT
from rvm import native

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

BODIES = [op for op in OPS if has_body(op)]


def _w(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


FLOATS = [_w(x) for x in (0.0, -0.0, 1.0, -2.5, 0.5, 3.75, 1e308, -1e308, 1e154, 5e-324,
                          math.inf, -math.inf, math.nan, 1e-300)]
INTS = [0, 1, -1, 2, 7, -8, 63, 64, 2 ** 62, -(2 ** 63), 2 ** 63 - 1, 3 << 32, -(1 << 32)]
POOL = {FLOAT: FLOATS, INT: INTS, FIXED: INTS}


def harness() -> str:
    """C: run(op, lane, ys, o, F): op's scalar (lane 0) or lane form on the targets ys and
    the other operands o (operand order); the return code, or the lane form's flag."""
    out = ['#include "_isa.h"',
           "int run(int op, int lane, i64* ys, const i64* o, int F) {",
           "  double cs[2] = {0.0, 0.0}; (void)o;", "  switch (op) {"]
    for op in BODIES:
        args = ["&ys[0]" if n == "y" else "&ys[1]" if n == "y2" else f"o[{i}]"
                for i, n in enumerate(operand_names(op))] + ["F", "cs"]
        a = ", ".join(args)
        out.append(f"  case {op.code}: return lane ? {lane_name(op)}({a}) : {func_name(op)}({a});")
    out += ["  default: return -1;", "  }", "}"]
    return "\n".join(out) + "\n"


def operand_words(op, rng) -> list[int]:
    out = []
    types = op.operand_types
    for i, kind in enumerate(op.operands):
        if kind in ("y", "a", "imm"):
            out.append(int(rng.choice(POOL.get(types[i], INTS))))
        elif kind == "k":
            out.append(int(rng.choice([0, 1, 5, 63])))
        elif kind == "fn":
            fns = FN2 if op.family.endswith("fn2") else FN1
            out.append(int(rng.choice([f.id for f in fns])))
        elif kind == "cc":
            out.append(int(rng.integers(0, 7)) | (int(op.types[1]) << 4))
        else:
            raise AssertionError(kind)
    return out


@pytest.fixture(scope="module")
def run():
    lib, _path, _built = native.build(harness())
    f = lib.run
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                  ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
    return f


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_a_lane_form_fails_exactly_where_its_scalar_form_traps(run, t):
    rng = np.random.default_rng(16 + int(t))
    ops = [op for op in BODIES if op.operand_types[0] == t]
    assert ops
    traps = ok = 0
    for op in ops:
        ys_of = [i for i, k in enumerate(op.operands) if k == "y"]
        for _ in range(60):
            o = operand_words(op, rng)
            words = (ctypes.c_int64 * len(o))(*o)
            for F in (32, 8):
                y0 = [o[i] for i in ys_of] + [0] * (2 - len(ys_of))
                ys, yl = (ctypes.c_int64 * 2)(*y0), (ctypes.c_int64 * 2)(*y0)
                rc = run(op.code, 0, ys, words, F)
                flag = run(op.code, 1, yl, words, F)
                assert rc >= 0 and flag >= 0
                assert (rc != 0) == (flag != 0), (op.name, o, F, rc, flag)
                if rc == 0:
                    assert list(ys) == list(yl), (op.name, o, F)
                    ok += 1
                else:
                    traps += 1
    assert traps > 0 and ok > 0            # both sides of every type's forms were seen


def test_a_float_update_checks_its_result_alone_where_that_implies_its_pre_check():
    """addsum/adddif's finite sum and a float division's nonzero divisor are implied by the
    update's finite result (isa/cgen.py: implied_by_result), so their lane forms check the
    result alone; int and fixed divisions keep their checks (their quotient is no float)."""
    from isa.cgen import lane_function
    from isa.table import OP_BY_NAME
    for name in ("adddif.f", "subsum.f", "adddiv.f", "subdiv.f"):
        text = lane_function(OP_BY_NAME[name])
        assert text.count("isfinite") == 1 and "== 0.0" not in text, name
    assert "TRY(rvm_fixed_div(" in lane_function(OP_BY_NAME["adddiv.x"])
    assert "TRY(rvm_int_div(" in lane_function(OP_BY_NAME["adddiv.i"])
