"""Every differentiation rule of the instruction table against finite differences.

For each data instruction that writes a float, fixed or lns cell (and each function of addfn
and addfn2), a one-instruction program is differentiated at three points, run as it is and
under `uncall` (which executes the inverse instruction): the Jacobian from tangent mode and the
one from adjoint mode must match central finite differences of the interpreter, and for float
and lns (the derivatives of the value an lns cell represents) the Hessian from
tangent-over-adjoint mode must match finite differences of the gradient.  A new
instruction without a correct rule fails here.  The programs are built from the table
directly (tests/builder.py), so every opcode is exercised whatever the assembler emits.
"""
import zlib

import numpy as np
import pytest
from builder import ProgramBuilder

import rvm
from isa.cgen import has_body
from isa.derivatives import DIFFERENTIABLE, RULES
from isa.functions import FN1, FN2
from isa.program import INOUT
from isa.table import OPS
from isa.types import FLOAT, INT, LNS
from rvm.values import encode

DIFF_KINDS = ("update", "neg", "swap", "rot", "scale")


def cases():
    for op in OPS:
        rule = RULES[op.name]
        if rule is None or rule.kind not in DIFF_KINDS:
            continue
        if rule.fn:
            for f in (FN1 if rule.fn == "fn1" else FN2):
                if op.type in f.types:
                    yield pytest.param(op, f, id=f"{op.name}-{f.name}")
        else:
            yield pytest.param(op, None, id=op.name)


def test_every_differentiable_instruction_has_a_rule():
    """Any data instruction writing a float/fixed/lns cell is covered by the cases below
    (derivative statements run their rule themselves: tests/test_nested_ad.py)."""
    covered = {p.values[0].name for p in cases()}
    for op in OPS:
        if has_body(op) and op.types and op.types[0] in DIFFERENTIABLE:
            assert RULES[op.name] is not None, op.name
            if RULES[op.name].kind != "update" or RULES[op.name].partials or RULES[op.name].fn:
                assert op.name in covered, op.name


def program(op, fn, uncall: bool, F: int = 32):
    """A program running `op` once (under uncall: its inverse) on cells c0, c1, ..."""
    types = op.operand_types
    pb = ProgramBuilder(F)
    words, names = [], []
    for k, kind in enumerate(op.operands):
        if kind in ("y", "a"):
            words.append(pb.glob(f"c{k}", types[k], role=INOUT))
            names.append(f"c{k}")
        elif kind == "imm":
            words.append(encode(types[k], 0.75, F))
        elif kind == "fn":
            words.append(fn.id)
        else:
            raise AssertionError(f"{op.name}: operand kind {kind}")
    pb.func("f").op(op.name, *words)
    pb.func("main").call("f", uncall=uncall)
    return pb.build(), names, types


def point(op, fn, cells, types, rng):
    """A point to difference at: sources drawn at least 0.02 apart, so that no central
    difference (h <= 1e-3) straddles a kink where two sources meet (min, max)."""
    while True:
        vals = _draw(op, cells, types, rng)
        src = sorted(v for name, v in vals.items()
                     if op.operands[int(name[1:])] == "a" and types[int(name[1:])] in DIFFERENTIABLE)
        if all(b - a >= 0.02 for a, b in zip(src, src[1:])):
            return vals


def _draw(op, cells, types, rng):
    vals = {}
    for name in cells:
        t = types[int(name[1:])]
        k = int(name[1:])
        if t == INT:
            vals[name] = 3
        elif t not in DIFFERENTIABLE:
            vals[name] = 1.5
        elif op.operands[k] == "y" and RULES[op.name].kind in ("update", "scale"):
            vals[name] = float(rng.uniform(-1, 1))
        else:
            vals[name] = float(rng.uniform(0.4, 1.2))
    return vals


def run_map(m, vals, cells):
    m.reset(vals)
    m.run()
    return np.array([float(m.read(c)) for c in cells])


@pytest.mark.parametrize("uncall", [False, True], ids=["run", "uncall"])
@pytest.mark.parametrize("op, fn", list(cases()))
def test_rule_matches_finite_differences(op, fn, uncall):
    prog, cells, types = program(op, fn, uncall)
    diff = [c for c in cells if types[int(c[1:])] in DIFFERENTIABLE]
    is_float = all(t == FLOAT for t in op.types)    # any fixed cell: coarser differences
    h, tol = (1e-6, 2e-6) if is_float else (1e-3, 2e-4)
    # lns values are exact products: smooth to 2^-32 relative, so their Hessians are checked
    smooth = is_float or all(t in (FLOAT, LNS, INT) for t in op.types) and LNS in op.types
    m = rvm.Machine(prog, frame_cells=64, stack_cells=16)
    # (a seed of its own per case, the same in every process: str hashes are salted per run)
    rng = np.random.default_rng(zlib.crc32(f"{op.name}/{fn and fn.name}".encode()))
    for _ in range(3):
        vals = point(op, fn, cells, types, rng)
        fd = np.zeros((len(diff), len(diff)))
        for j, c in enumerate(diff):
            up, dn = dict(vals), dict(vals)
            up[c] += h
            dn[c] -= h
            fd[:, j] = (run_map(m, up, diff) - run_map(m, dn, diff)) / (2 * h)
        # tangent mode: one column per input cell
        tan = np.zeros_like(fd)
        for j, c in enumerate(diff):
            t = rvm.jvp(prog, vals, {c: 1.0}, machine=m)
            tan[:, j] = [t[o] for o in diff]
        np.testing.assert_allclose(tan, fd, rtol=tol, atol=tol, err_msg=f"tangent {op.name} {vals}")
        # adjoint mode: one row per output cell
        adj = np.zeros_like(fd)
        for i, c in enumerate(diff):
            g = rvm.grad(prog, of=c, wrt=diff, inputs=vals, machine=m)
            adj[i] = [g[w] for w in diff]
        np.testing.assert_allclose(adj, fd, rtol=tol, atol=tol, err_msg=f"adjoint {op.name} {vals}")
        if smooth:
            for c in diff:
                hess = rvm.hessian(prog, of=c, wrt=diff, inputs=vals, machine=m)
                hd, fdh = 1e-4, np.zeros_like(hess)
                for j, w in enumerate(diff):
                    up, dn = dict(vals), dict(vals)
                    up[w] += hd
                    dn[w] -= hd
                    gu = rvm.grad(prog, of=c, wrt=diff, inputs=up, machine=m)
                    gd = rvm.grad(prog, of=c, wrt=diff, inputs=dn, machine=m)
                    fdh[:, j] = [(gu[x] - gd[x]) / (2 * hd) for x in diff]
                np.testing.assert_allclose(hess, fdh, rtol=1e-5 if is_float else 1e-4,
                                           atol=1e-6 if is_float else 1e-5,
                                           err_msg=f"hessian of {c} {op.name} {vals}")
