"""The step programs in programs/trace/: bit-exact against a Python reference, reversible, and
physically sensible over many steps."""
from pathlib import Path

import numpy as np
import pytest

import rvm
from isa.arith import fixed_from_real, fixed_mul, fixed_to_real, wrap
from rvm.trace.machine_run import StepProgram

TRACE_PROGRAMS = Path(__file__).resolve().parent.parent / "programs" / "trace"
F = 32


def step_program(name):
    return StepProgram(rvm.load(TRACE_PROGRAMS / name))


def q(x):
    return fixed_from_real(x, F)


def diffusion_reference(u):
    r, two_r = q(0.25), q(0.5)
    n = len(u)
    out = []
    for j in range(n):
        v = u[j] - fixed_mul(two_r, u[j], F)
        if j > 0:
            v += fixed_mul(r, u[j - 1], F)
        if j < n - 1:
            v += fixed_mul(r, u[j + 1], F)
        out.append(wrap(v))
    return out


def leapfrog_reference(x, v):
    dt, h, hb = q(0.0625), q(0.03125), q(0.03125)
    n = len(x)

    def kick(v, x):
        d = [x[0]] + [wrap(x[b] - x[b - 1]) for b in range(1, n)] + [wrap(-x[n - 1])]
        c = [fixed_mul(fixed_mul(e, e, F), e, F) for e in d]
        return [wrap(v[j] + fixed_mul(h, d[j + 1], F) - fixed_mul(h, d[j], F)
                     + fixed_mul(hb, c[j + 1], F) - fixed_mul(hb, c[j], F)) for j in range(n)]

    v = kick(v, x)
    x = [wrap(x[j] + fixed_mul(dt, v[j], F)) for j in range(n)]
    v = kick(v, x)
    return x, v


def test_every_trace_program_has_a_test():
    assert {p.stem for p in TRACE_PROGRAMS.glob("*.rasm")} == {"diffusion", "leapfrog"}


def test_diffusion_step_is_bit_exact():
    sp = step_program("diffusion.rasm")
    assert [r.name for r in sp.state] == ["u"] and sp.state_cells == 16 and sp.params == []
    s = sp.initial
    for _ in range(20):
        nxt, instructions = sp.forward(s)
        assert list(nxt) == diffusion_reference([int(w) for w in s])
        s = nxt
    assert instructions == 226


def test_diffusion_conserves_heat_until_it_reaches_the_walls():
    sp = step_program("diffusion.rasm")
    s0 = sp.initial
    heat0 = sum(fixed_to_real(int(w), F) for w in s0)
    s = sp.direct(5)                                    # spreads one cell per step
    u = sp.decode(s)["u"]
    assert sum(u) == pytest.approx(heat0, abs=1e-6)     # nothing has reached the ends yet
    assert max(u) < 1.0 and np.allclose(u, u[::-1])     # smoother, still symmetric
    s = sp.direct(400)
    assert sum(sp.decode(s)["u"]) < 0.5 * heat0         # the walls absorb heat


def test_leapfrog_step_is_bit_exact():
    sp = step_program("leapfrog.rasm")
    assert [r.name for r in sp.state] == ["x", "v"] and sp.state_cells == 16
    s = sp.initial
    x, v = [int(w) for w in s[:8]], [int(w) for w in s[8:]]
    for _ in range(10):
        s, _ = sp.forward(s)
        x, v = leapfrog_reference(x, v)
        assert list(s) == x + v


def energy(state):
    x, v = [fixed_to_real(int(w), F) for w in state[:8]], \
        [fixed_to_real(int(w), F) for w in state[8:]]
    d = [x[0]] + [x[b] - x[b - 1] for b in range(1, 8)] + [-x[7]]
    return 0.5 * sum(w * w for w in v) + sum(e * e / 2 + e ** 4 / 4 for e in d)


def test_leapfrog_keeps_the_energy():
    sp = step_program("leapfrog.rasm")
    e0 = energy(sp.initial)
    e = [energy(sp.direct(n)) for n in (50, 300)]
    assert all(abs(x - e0) < 2e-3 * e0 for x in e)


@pytest.mark.parametrize("name", ["diffusion.rasm", "leapfrog.rasm"])
def test_step_runs_back_to_zero(name):
    prog = rvm.load(TRACE_PROGRAMS / name)
    trip = rvm.roundtrip(prog)
    assert trip.exact
    res = rvm.run(prog)
    assert res.garbage == []
    back = rvm.run(prog, res.outputs, reverse=True)
    assert all(not np.any(back.machine.read_raw(g.name)) for g in prog.globals
               if g.name.endswith("_next"))
