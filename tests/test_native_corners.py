"""The native code at its corners (rvm/native/codegen.py, Core.set_native/_native_sweeps):
aimed at the corners of the translation, each run by a native and an interpreted grad_fn over
the same calls.  Everything a caller sees must agree bit for bit: the gradients, the loss,
`f.last.steps`, the drift, the words snapshots `f.runner.words`, and where the interpreter
traps, the error's type and text (the native code bails out and the interpreter reports).

Covered here: fixed-point rules (ldexp real_of, rvm_fixed_mul/div, every fn and fn2, rot/irot
with the cos/sin rule), float rules (every fn and fn2, rot/irot with the rotation's own cos and
sin, y += a/b), neg and swap of every differentiable type, cvt/uncvt between int, fixed,
float and lns, lns mul/div, int floor division, indexed operands (bounds, a swap of a cell
with itself, an index that is an array element, a row writing its own index cell), local
arrays, `local` ancillas, with/do, if/fi and from/until joins, assert, loops longer than the
first native slice (1 << 16 steps) with a trap or a come-from failure after the resume, a
fixed loss, the loss also in wrt, and a sample of random float/fixed programs."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

import rvm
from rvm import native

pytestmark = [pytest.mark.skipif(native.compiler() is None, reason="no C compiler"),
              pytest.mark.filterwarnings("ignore::rvm.ad.ReleasedTangentWarning")]


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("RVM_CACHE_DIR", str(tmp_path_factory.mktemp("native_corners")))
    yield
    mp.undo()


def bits(v) -> list:
    return np.asarray(v, dtype=np.float64).reshape(-1).view(np.int64).tolist()


def observe(prog, of: str, wrt: list[str], inputs: list[dict], use_native: bool):
    """Per call: the gradient's bits, the loss's bits, steps, drift and the words snapshots
    (or the error's type and text); and the GradFn."""
    f = rvm.grad_fn(prog, of=of, wrt=wrt, native=use_native)
    assert f.runner.core.native == use_native
    out = []
    for inp in inputs:
        try:
            g = f(dict(inp))
        except Exception as e:                      # noqa: BLE001 - compared as a value
            out.append(("error", type(e).__name__, str(e)))
            continue
        d = f.last
        words = getattr(f.runner, "words", None)
        out.append(({k: bits(v) for k, v in g.items()}, bits(d.value), d.steps, d.drift,
                    None if words is None else words.tolist()))
    return out, f


def same(src, of: str, wrt: list[str], inputs: list[dict]):
    """Native and interpreted agree on every call; returns the native observations and the
    native GradFn (the first input must run cleanly: the fast path starts after it)."""
    prog = rvm.assemble(src) if isinstance(src, str) else src
    nat, f = observe(prog, of, wrt, inputs, True)
    ref, _ = observe(prog, of, wrt, inputs, False)
    for k, (a, b) in enumerate(zip(nat, ref)):
        assert a == b, f"call {k} {inputs[k]}:\n native      {a[:3]}\n interpreted {b[:3]}"
    assert nat[0][0] != "error", nat[0]
    return nat, f


def ok(obs) -> list:
    return [o for o in obs if o[0] != "error"]


def errors(obs) -> set:
    return {o[1] for o in obs if o[0] == "error"}


FN1 = ["sqrt", "exp", "log", "sin", "cos", "tan", "atan", "tanh", "abs", "sigmoid"]
FN2 = ["pow", "atan2", "hypot"]


# ---- fixed point ------------------------------------------------------------------------------

FIXED = """
.fixed 26
inout x: float = 0.7
inout y: float = 0.4
inout p: fixed
inout q: fixed = 0.6
inout th: fixed = 0.3
inout w: fixed
inout z: float
func main() {
    p += fixed(x)
    q -= fixed(y)
    w += p * q
    w -= q / p
""" + "".join(f"    w += {f}(p)\n" for f in FN1) + \
    "".join(f"    w -= {f}(p, q)\n    w += {f}(q, q)\n" for f in FN2) + """
    rot p, q, th
    w += p * q
    irot q, p, th
    neg p
    w += p / th
    swap p, q
    w -= p * th
    neg w
    z += float(w)
    z += float(p)
}
"""


def test_fixed_rules_agree_and_traps_are_the_interpreters():
    ins = [{}, {}, {"x": 1.9}, {"x": 0.25, "y": -0.5}, {"x": 3.3}, {"y": 0.0},
           {"x": -0.3},                 # sqrt/log of a negative fixed: a domain trap
           {"x": 0.0},                  # q / p with p == 0: division by zero
           {"x": 1e300}]                # cvt.xf out of range
    obs, f = same(FIXED, "w", ["x", "y", "w", "th"], ins)   # a fixed loss, also in wrt
    assert len(ok(obs)) >= 5
    assert {"DomainError", "DivisionByZero", "RangeError"} <= errors(obs)
    assert "native" in f.native
    obs, _ = same(FIXED, "z", ["x", "y", "z", "q"], ins[:6])
    assert len(ok(obs)) >= 5


def test_fixed_gradient_values():
    src = """
.fixed 32
inout x: float = 0.75
inout p: fixed
inout w: fixed
func main() {
    p += fixed(x)
    w += p * p
    w += sin(p)
}
"""
    f = rvm.grad_fn(src, of="w", wrt=["x", "p", "w"], native=True)
    f({"x": 0.75})
    g = f({"x": 0.75})
    assert f.runner.core.native and f.runner.core.native_bails == 0
    # dw/dp = 2p + cos(p) at p = 0.75 (exact in fixed point), dw/dx the same through cvt,
    # p and w themselves: 0 (p is recomputed from x, w is the loss and an inout cell: 1)
    assert bits(g["x"]) == bits(1.5 + math.cos(0.75))
    assert bits(g["w"]) == bits(1.0)
    assert f.last.steps == 5                  # entering main, 3 rows, the return
    assert f.last.value == pytest.approx(0.5625 + math.sin(0.75), abs=1e-9)


# ---- floats -------------------------------------------------------------------------------

FLOAT = """
inout x: float = 0.7
inout y: float = -1.3
inout th: float = 0.4
inout xs: float[4] = [1.0, 2.0, 3.0, 4.0]
inout i: int = 1
inout j: int = 2
inout z: float
func main() {
""" + "".join(f"    z += {f}(x)\n" for f in FN1) + \
    "".join(f"    z -= {f}(x, th)\n" for f in FN2) + """
    z += x / y
    z -= y / th
    rot x, y, th
    z += x * y
    irot y, xs[i], th
    swap xs[i], xs[j]
    z += xs[i] * xs[j]
    neg x
    z += x * xs[3]
    neg z
    z += float(i)
}
"""


def test_float_rules_agree_and_traps_are_the_interpreters():
    ins = [{}, {}, {"x": 1.9}, {"th": -2.5}, {"y": 0.0},        # y == 0: division by zero
           {"x": -0.5},                                          # sqrt/log: domain
           {"i": 2, "j": 2},                                     # a swap of a cell with itself
           {"j": 4},                                             # bounds
           {"i": -1},
           {"x": 1e200},                                         # overflow
           {"xs": [0.5, -1.5, 2.5, 0.25], "i": 3, "j": 0},
           {"th": float("inf")},                                 # cos/sin of inf: domain
           {"x": 0.3, "xs": np.array([1.0, 1.5, -2.0, 0.0])}]
    obs, f = same(FLOAT, "z", ["x", "y", "th", "xs", "z"], ins)
    assert len(ok(obs)) >= 6
    assert {"DivisionByZero", "DomainError", "BoundsError", "RangeError"} <= errors(obs)
    assert obs[6][0] != "error"                                  # swap xs[2], xs[2] is legal
    assert f.runner.core.native_bails >= 5


def test_float_gradient_values():
    src = """
inout x: float = 0.7
inout th: float = 0.4
inout y: float
inout z: float
func main() {
    y += x * x
    rot y, z, th
    z += cos(x)
}
"""
    f = rvm.grad_fn(src, of="z", wrt=["x", "th"], native=True)
    f({})
    g = f({"x": 0.5})
    assert f.runner.core.native and f.runner.core.native_bails == 0
    # z = sin(th) x^2 + cos(x): dz/dx = 2 x sin(th) - sin(x), dz/dth = x^2 cos(th)
    assert float(g["x"]) == pytest.approx(2 * 0.5 * math.sin(0.4) - math.sin(0.5), rel=1e-15)
    assert float(g["th"]) == pytest.approx(0.25 * math.cos(0.4), rel=1e-15)
    assert f.last.value == pytest.approx(0.25 * math.sin(0.4) + math.cos(0.5), rel=1e-15)
    assert f.last.steps == 5


# ---- int, lns and the conversions -------------------------------------------------------------

LNS = """
.fixed 28
inout x: float = 0.7
inout n: int = -7
inout k: int = 2
inout z: float
inout L: lns = 1.0
inout M: lns = 2.0
inout p: fixed
inout j: int
func main() {
    M *= lns(x)
    L *= M
    L /= lns(n)
    L *= lns(k)
    p += fixed(L)
    z += float(L)
    z += float(M)
    z += float(p)
    j += n / k
    j -= k / n
    j += int(L)
    j += int(x)
    z += float(j)
    p += fixed(j)
    neg L
    z -= float(L)
    swap L, M
    M /= lns(p)
    z += float(M)
    neg j
    j += sqrt(k)
    j += abs(n)
    z += float(j)
    if L < M {
        z += x
    } fi z > 1000.0
}
"""


def test_int_lns_and_conversions_agree():
    ins = [{}, {}, {"x": -0.3}, {"x": 0.0}, {"n": 7, "k": -2}, {"k": 0},
           {"n": -(1 << 63), "k": -1}, {"n": 5, "k": 3}, {"x": 1e300}, {"x": 2.5e-300},
           {"n": -9, "k": 4}, {"n": 9, "k": -4}]
    obs, _ = same(LNS, "z", ["x", "z"], ins)
    assert len(ok(obs)) >= 5
    assert {"ComeFromError", "DomainError", "RangeError"} <= errors(obs)


# ---- indexed operands, locals, ancillas, joins, asserts -----------------------------------------

SCOPES = """
inout x: float = 0.7
inout m: int
inout k: int = 2
inout j: int = 1
inout ks: int[4] = [0, 1, 2, 3]
inout xs: float[4] = [1.0, 2.0, 3.0, 4.0]
inout z: float
func main() {
    ks[0] += m
    inc ks[ks[0]]              ; writes its own index cell iff ks[0] == 0: an alias trap
    var a: float[4]
    a[k] += xs[j] * x
    z += a[k] * a[k]
    a[k] -= xs[j] * x
    local t: float
    t += x * x
    z += t * x
    t -= x * x
    free t
    with {
        local u: float
        u += sin(x)
    } do {
        z += u * xs[k]
    }
    assert k < 3
    if x < 1.0 {
        z += x * x
    } else {
        z -= x * x
    } fi z > 0.0
    from k == 2 {
        xs[k] += x
    } until k == 2
}
"""


def test_indexed_operands_scopes_and_joins_agree():
    ins = [{"m": 1}, {"m": 1}, {"m": 0},                # alias: inc ks[ks[0]] with ks[0] == 0
           {"m": 2, "x": 1.5},                          # the else branch, then the fi fails
           {"m": 3, "x": -0.5}, {"m": 4},               # ks[4]: bounds
           {"m": 1, "k": 3},                            # assert fails
           {"m": 1, "j": 2, "k": 2}, {"m": 1, "k": 4},  # a[4]: bounds in a local array
           {"m": 1, "x": 0.25}]
    obs, f = same(SCOPES, "z", ["x", "xs", "z"], ins)
    assert [o[1] for o in obs if o[0] == "error"] == [
        "AliasError", "ComeFromError", "ComeFromError", "BoundsError", "AssertionTrap",
        "BoundsError"]
    assert f.runner.core.native_bails == 6


def test_a_local_left_nonzero_is_the_interpreters_ancilla_error():
    src = """
inout x: float = 0.5
inout y: float = 0.5
inout z: float
func main() {
    local t: float
    t += x * y
    z += t * t
    t -= x * x
    free t
}
"""
    obs, f = same(src, "z", ["x", "y"], [{}, {}, {"y": 0.75}, {"x": 0.25, "y": 0.25}])
    assert obs[2][0] == "error" and obs[3][0] != "error"
    assert f.runner.core.native_bails == 1


def test_a_come_from_failure_only_in_the_adjoint_sweep_is_the_interpreters():
    """x + 0.1 - 0.1 rounds back across the if's test: the sweep's re-check fails."""
    src = """
inout x: float = 0.25
inout z: float
func main() {
    if x < 0.5 {
        x += 0.1
    } fi x < 0.7
    z += x * x
}
"""
    below = float(np.nextafter(0.5, 0.0))
    obs, f = same(src, "z", ["x", "z"], [{}, {"x": below}, {"x": 0.3}, {"x": 0.8}])
    assert obs[1][:2] == ("error", "ComeFromError") and "running backward" in obs[1][2]
    assert obs[2][0]["x"] == bits(2 * (0.3 + 0.1)) and obs[3][0]["x"] == bits(1.6)
    assert f.runner.core.native_bails == 1


# ---- long runs: the native code returns at its budget and resumes -----------------------------

LONG = """
inout x: float = 0.5
inout h: float = 1e303
inout n: int = 3
inout k: int = 3
inout k2: int = 3
inout s: float
inout z: float
inout w: fixed
inout p: fixed = 0.001
func main() {
    for i in 0..n {
        s += h
        z += x * x
        w += p * p
        if i < k {
            z += x
        } fi i < k2
        x += 0.001
    }
}
"""


def test_long_runs_resume_and_trap_after_the_first_slice():
    ins = [{}, {}, {"n": 100_000, "k": 100_000, "k2": 100_000},
           {"n": 200_000, "k": 200_000, "k2": 200_000},       # s overflows at i ~ 179769
           {"n": 150_000, "k": 100_000, "k2": 100_001},       # come-from fails at i = 100000
           {"n": 90_000, "k": 40_000, "k2": 40_000, "h": 1.0}]
    obs, f = same(LONG, "z", ["x", "z", "h"], ins)
    assert obs[4][0] == "error" and "ComeFromError" == obs[4][1]
    assert obs[3][0] == "error" and obs[3][1] == "RangeError"
    assert obs[2][2] == 10 * 100_000 + 8 and obs[5][2] == 850_008   # past 1 << 16
    assert f.runner.core.native_bails == 2
    obs, _ = same(LONG, "w", ["p", "w"], ins[:3])
    assert ok(obs)[-1][2] == obs[2][2]


# ---- a sample of random float and fixed programs ----------------------------------------------

RAND_HEAD = """
.fixed 30
inout a: float = 0.7
inout b: float = -0.4
inout c: float = 1.3
inout d: float
inout xs: float[4] = [0.5, 1.5, -0.25, 2.0]
inout p: fixed
inout q: fixed = 0.6
inout r: fixed = -0.2
inout qs: fixed[4] = [0.5, 0.25, -1.5, 0.75]
inout i: int = 1
inout j: int = 2
inout n: int = 3
"""
FV = ["a", "b", "c", "d", "xs[i]", "xs[j]", "xs[0]", "xs[3]"]
XV = ["p", "q", "r", "qs[i]", "qs[j]", "qs[1]"]


def _stmt(R: random.Random, depth: int = 0) -> str:
    k = R.randrange(16)
    if k < 5 or k in (13, 14, 15):
        T = FV if R.random() < 0.6 else XV
        y, s1, s2 = R.sample(T, 3)
        if R.random() < 0.3:
            s2 = s1
        op = R.choice(["+=", "-="])
        form = R.randrange(7) if k < 5 else 1
        return [f"{y} {op} {s1}", f"{y} {op} {s1} * {s2}", f"{y} {op} {s1} / {s2}",
                f"{y} {op} {R.choice(FN1)}({s1})", f"{y} {op} {R.choice(FN2)}({s1}, {s2})",
                f"{y} {op} 0.375",
                f"{y} {op} {'float' if T is FV else 'fixed'}({R.choice(XV if T is FV else FV)})"
                ][form]
    if k == 5:
        u, v = R.sample(FV, 2)
        return f"swap {u}, {v}"
    if k == 6:
        return f"neg {R.choice(FV + XV)}"
    if k == 7:
        u, v, w = R.sample(FV if R.random() < 0.5 else XV, 3)
        return f"{R.choice(['rot', 'irot'])} {u}, {v}, {w}"
    if k == 8:
        return R.choice(["inc i", "dec i", "i ^= 1", "j += i", "swap i, j"])
    block = lambda m: "\n".join(_stmt(R, depth + 1) for _ in range(R.randrange(1, m)))  # noqa
    if k == 9 and depth < 2:
        return f"for m{depth} in 0..n {{\n{block(4)}\n}}"
    if k == 10 and depth < 2:
        v = R.choice(FV)
        return f"if {v} < 0.5 {{\n{block(3)}\n}} fi {v} < 0.5"
    if k == 11 and depth < 2:
        return f"with {{\n{block(3)}\n}} do {{\n{block(3)}\n}}"
    return "assert i < 4"


def _random_program(seed: int) -> str | None:
    R = random.Random(seed)
    src = RAND_HEAD + "func main() {\n" + \
        "\n".join(_stmt(R) for _ in range(R.randrange(3, 10))) + "\n}\n"
    try:
        rvm.assemble(src)
    except Exception:                                  # noqa: BLE001 - an invalid draw
        return None
    return src


RAND_INPUTS = [{}, {}, {"a": 0.3, "i": 0}, {"b": 2.5, "j": 3}, {"n": 5, "c": -0.7},
               {"i": 2, "j": 2}, {"n": 0}, {"a": -1.1, "b": 0.0}, {"i": 3, "j": 0, "n": 2},
               {"xs": [1.0, -2.0, 0.5, 0.125]}, {"n": 300}]


@pytest.mark.parametrize("seed", [3, 11, 17, 26, 42, 57, 64, 77, 93, 118])
def test_random_float_and_fixed_programs_agree(seed):
    src = _random_program(seed)
    if src is None:
        pytest.skip("the draw does not assemble")
    prog = rvm.assemble(src)
    for of, wrt in (("d", ["a", "b", "c", "d", "xs", "p"]), ("p", ["a", "c", "xs", "q"])):
        nat, _ = observe(prog, of, wrt, RAND_INPUTS, True)
        ref, _ = observe(prog, of, wrt, RAND_INPUTS, False)
        assert nat == ref


# ---- non-finite adjoints ----------------------------------------------------------------------

SQRT_AT_ZERO = """
inout x: float = 0.5
inout t: float
inout z: float
func main() {
    z += sqrt(t)            ; t == 0: t's adjoint is inf, but t is not differentiated
    z += x * x
}
"""


def test_an_infinite_adjoint_off_the_gradient_gives_the_interpreters_values():
    """What the two agree on when a cell outside wrt gets an infinite adjoint."""
    ins = [{}, {"x": 1.5}, {"x": -0.25}]
    nat, _ = observe(rvm.assemble(SQRT_AT_ZERO), "z", ["x"], ins, True)
    ref, _ = observe(rvm.assemble(SQRT_AT_ZERO), "z", ["x"], ins, False)
    assert [o[:4] for o in nat] == [o[:4] for o in ref]         # all but the words
    assert nat[1][0] == {"x": bits(3.0)} and nat[1][1] == bits(2.25) and nat[1][2] == 4
    # with t in wrt the gradient is not finite: the general path's NonFiniteDerivative
    obs, f = same(SQRT_AT_ZERO.replace("inout t: float", "inout t: float = 1.0"), "z",
                  ["x", "t"], [{}, {"t": 0.0}, {"t": 4.0}])
    assert obs[1][:2] == ("error", "NonFiniteDerivative") and obs[2][0]["t"] == bits(0.25)


def test_an_infinite_adjoint_off_the_gradient_keeps_the_words_and_the_native_path():
    """Found in review (6ac43f2): the native sweep bailed out on any non-finite adjoint, also
    one of a cell outside wrt, where the interpreter's fast path completes (it checks only the
    wrt adjoints); the general path that reran the call does not write f.runner.words[2], so
    the words back at the start were the previous call's, and every such call ran twice."""
    snaps = {}
    for use_native in (True, False):
        f = rvm.grad_fn(SQRT_AT_ZERO, of="z", wrt=["x"], native=use_native)
        f({})
        f({"x": 1.5})
        snaps[use_native] = (f.runner.words.tolist(), f.runner.core.native_bails)
    assert snaps[True][0] == snaps[False][0]          # native: words[2] == [0, 0, 0]
    assert snaps[True][1] == 0


def wait_native(f, inputs: dict, seconds: float = 120.0) -> None:
    """Call f until its automatic native build is installed."""
    import time
    end = time.monotonic() + seconds
    while not f.runner.core.native:
        assert time.monotonic() < end, f.native
        f(dict(inputs))
        time.sleep(0.005)
    assert "native" in f.native


def test_the_automatic_compile_changes_nothing_a_caller_sees(monkeypatch):
    monkeypatch.delenv("RVM_NATIVE", raising=False)
    prog = rvm.assemble(FLOAT)
    ins = [{"x": 0.1 * k, "i": k % 3} for k in range(1, 13)] + [{"j": 4}, {"x": 0.9}]
    ref, _ = observe(prog, "z", ["x", "th", "xs"], ins, False)
    f = rvm.grad_fn(prog, of="z", wrt=["x", "th", "xs"])          # native=None
    seen = []
    for inp in ins:
        try:
            g = f(dict(inp))
            seen.append(({k: bits(v) for k, v in g.items()}, bits(f.last.value), f.last.steps,
                         f.last.drift, f.runner.words.tolist()))
        except Exception as e:                                      # noqa: BLE001
            seen.append(("error", type(e).__name__, str(e)))
    assert seen[1:] == ref[1:]
    wait_native(f, ins[0])                  # the automatic build runs in a thread
    g = f(dict(ins[0]))
    assert ({k: bits(v) for k, v in g.items()}, bits(f.last.value), f.last.steps,
            f.last.drift) == ref[0][:4]     # (ref's first call ran the general path: no words)
