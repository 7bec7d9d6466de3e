"""Native calls and double promotion (rvm/native/codegen.py `_Fn.call`, Ref.f,
rvm_float_add_d; Core._native_sweeps): programs aimed at call binding, nested and mutual
recursion, uncall of callers, promoted globals changed through parameters, and float cells
kept as C doubles (swap/neg/rot/compare with NaN payloads, -0.0, inf).  A native and an
interpreted grad_fn run the same inputs; every gradient bit, loss bit, step count, drift, words
snapshot and error (type and text) must agree, and the native bail count is checked.

The review found one discrepancy, fixed since: native calls are C recursion on the thread's
stack, and bounded only by depth (2000) a recursion the interpreter runs fine (its frames are
on the heap) killed the process with SIGSEGV: in the main thread (8 MiB) a recursive function
with ~200 promoted locals at depth 1990; in a thread with a 256 KiB stack, a three-parameter
recursion of depth 1990.  The native code now gives up near the end of the thread's stack."""
from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_native_corners import bits, observe

import rvm
from rvm import native

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.skipif(native.compiler() is None, reason="no C compiler"),
              pytest.mark.filterwarnings("ignore::rvm.ad.ReleasedTangentWarning")]


def w2f(w: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", w))[0]


def same(src, of, wrt, inputs, bails):
    prog = rvm.assemble(src)
    nat, f = observe(prog, of, wrt, inputs, True)
    ref, _ = observe(prog, of, wrt, inputs, False)
    for k, (a, b) in enumerate(zip(nat, ref)):
        assert a == b, f"call {k} {inputs[k]}:\n native      {a[:4]}\n interpreted {b[:4]}"
    assert nat[0][0] != "error"
    assert f.runner.core.native_bails == bails
    return nat


def kinds(obs) -> list:
    return [o[1] if o[0] == "error" else "ok" for o in obs]


NESTED = """
inout xs: float[4] = [1.0, 2.0, 3.0, 4.0]
inout z: float = 0.5
inout i: int = 1
output y: float
func leaf(a: float, v: float[], k: int) {
    a += v[k] * v[k]
    a += float(k)
}
func mid(a: float, v: float[], k: int, w: float[]) {
    local t: float
    local loc: float[3]
    local m: int
    m += len(v)
    dec m
    call leaf(t, v, k)
    call leaf(loc[k], w, m)
    a += t * loc[k]
    uncall leaf(loc[k], w, m)
    uncall leaf(t, v, k)
    m += 1
    m -= len(v)
    call leaf(a, v, k)
    call leaf(w[k], v, k)
}
func top(a: float, v: float[4], k: int) {
    local loc: float[4]
    call mid(a, v, k, loc)
    uncall mid(a, v, k, loc)
    call mid(a, v, k, loc)
    uncall leaf(loc[k], v, k)
}
func main() {
    call top(y, xs, i)
    y += z * z
    uncall top(z, xs, i)
}
"""


def test_nested_calls_with_every_argument_kind():
    """3 deep: parameters passed on, len() of parameter arrays, indexed arguments on local and
    parameter arrays, a local array bound to a `T[]` parameter, uncall of callers; a bounds
    trap of an indexed argument at depth 3 and of an operand at depth 4."""
    out = same(NESTED, "y", ["xs", "z"],
               [{}, {}, {"i": 0}, {"i": 3}, {"i": 2, "z": -1.5}, {"i": 4}, {"i": 1}], bails=2)
    assert kinds(out) == ["ok", "ok", "ok", "BoundsError", "ok", "BoundsError", "ok"]


RECURSION = """
inout x: float = 0.5
inout xs: float[3] = [1.0, 2.0, 3.0]
inout n: int = 5
inout j: int = 0
inout k: int = 1
inout big: int = 10
output y: float
func loop(acc: float, v: float, m: int) {
    for i in 0..m {
        acc += v * v
    }
}
func even(y: float, x: float, n: int) {
    local m: int
    with {
        m += n
        dec m
    } do {
        if n > 0 {
            call odd(y, x, m)
        } fi n > 0
    }
    y += x
}
func odd(y: float, x: float, n: int) {
    local m: int
    with {
        m += n
        dec m
    } do {
        if n > 0 {
            call even(y, x, m)
        } else {
            y += x * x
        } fi n > 0
    }
}
func pair(a: float, b: float) {
    a += b
}
func deep(v: float[], i: int, k: int, d: int) {
    local m: int
    with {
        m += d
        dec m
    } do {
        if d > 0 {
            call deep(v, i, k, m)
        } else {
            call pair(v[i], v[k])
        } fi d > 0
    }
}
func main() {
    call even(y, x, n)
    uncall odd(y, x, n)
    call even(y, x, n)
    call loop(y, x, big)
    call deep(xs, j, k, n)
    y += xs[0] * xs[1]
}
"""


def test_mutual_recursion_long_callee_loops_and_traps_deep_down():
    """Mutual recursion called and uncalled; a 100000-iteration loop in a callee (past the
    first slice and a poll); an alias and a bounds trap of a call binding at depth n + 2."""
    out = same(RECURSION, "y", ["x", "xs"],
               [{}, {"n": 6}, {"big": 100_000}, {"j": 1}, {"k": 3}, {"j": 2, "k": 0, "n": 30},
                {"n": -1}, {}], bails=2)
    assert kinds(out) == ["ok", "ok", "ok", "AliasError", "BoundsError", "ok", "ok", "ok"]
    assert out[2][2] > 400_000


PROMOTED = """
inout g: float = 1.5
inout h: float = -0.5
inout cnt: int = 0
inout xs: float[4] = [1.0, 2.0, 3.0, 4.0]
inout ys: float[5] = [1.0, 2.0, 3.0, 4.0, 5.0]
inout m: int = 4
inout bad: int = 0
output y: float
func bump() {
    g += h * h
    inc cnt
    neg h
}
func via(p: float, q: float, c: int) {
    p += q
    call bump()
    inc c
    q += p * p
}
func four(v: float[4], a: float) {
    a += v[0] * v[3]
}
func pass(v: float[], a: float, k: int) {
    if k >= 4 {
        call four(v, a)
    } fi k >= 4
    local s: float
    s += float(k)
    if bad == 1 {
        s += 1.0
    } fi bad == 1
    s -= float(k)
    delocal s
}
func main() {
    call via(g, h, cnt)
    y += g * h
    y += float(cnt)
    call bump()
    y += g * h
    uncall via(h, g, cnt)
    y += g * h
    call pass(xs, g, m)
    if m == 5 {
        call pass(ys, h, m)
    } fi m == 5
    y += g
}
"""


def test_promoted_globals_changed_by_callees_through_parameters():
    """main keeps g, h, cnt in registers (g, h as doubles); callees change them through
    parameters and directly (a parameterless callee keeps them in its own registers); main
    reads them after.  Traps at depth 3: a `T[4]` parameter bound to 5 cells, an ancilla."""
    out = same(PROMOTED, "y", ["g", "h", "xs"],
               [{}, {"g": -0.0}, {"m": 3}, {"m": 5}, {"bad": 1}, {"cnt": 7, "h": 2.0}, {}],
               bails=2)
    assert kinds(out) == ["ok", "ok", "ok", "BoundsError", "AncillaError", "ok", "ok"]
    assert out[1][3] == {"g": 0.0}                  # -0.0 in, +0.0 out: the drift says so


DOUBLES = """
inout a: float = 1.0
inout b: float = 2.0
inout c: float = 0.25
inout th: float = 0.3
output y: float
func main() {
    swap a, b
    neg a
    if a < b {
        y += c
        neg c
    } else {
        y -= c
    } fi a < b
    if c != b {
        neg b
    } fi c != b
    swap b, c
    rot a, c, th
    neg th
    y += a * th
}
"""

NAN = float("nan")
INF = float("inf")
QNAN = w2f(0x7FF8000000000123)
NQNAN = w2f(0xFFF8000000000ABC)
SNAN = w2f(0x7FF0000000000001)
NSNAN = w2f(0xFFF4000000000001)


@pytest.mark.parametrize("of", ["y", "b"])
def test_double_promoted_cells_swapped_negated_rotated_compared(of):
    """Float cells kept as C doubles through swap, neg, rot and float conditions, with signed
    zeros, infinities and NaNs (conditions on NaN: come-from traps; rot by inf; sums that are
    not finite)."""
    ins = [{}, {"a": -0.0}, {"b": -0.0, "c": 0.0}, {"c": NAN, "a": 0.5}, {"b": QNAN},
           {"b": NQNAN}, {"th": INF}, {"b": SNAN}, {"a": -0.0, "b": 0.0}, {"a": 0.0, "b": -0.0},
           {"c": -0.0}, {"c": INF}, {}]
    out = same(DOUBLES, of, ["a", "b", "c", "th"], ins, bails=6)
    assert kinds(out) == ["ok", "ok", "ok", "RangeError", "ComeFromError", "ComeFromError",
                          "DomainError", "ComeFromError", "ok", "ok", "ok", "RangeError", "ok"]


NAN_CALLS = """
inout a: float = 1.0
inout b: float = 2.0
inout c: float = 0.25
func flip(p: float, q: float) {
    swap p, q
    neg q
    if p != q {
        neg p
    } fi p != q
}
func main() {
    swap a, b
    neg a
    call flip(a, c)
    if a == a {
        neg b
    } fi a == a
    swap b, c
    neg c
    uncall flip(c, b)
    neg a
}
"""


@pytest.mark.parametrize("of", ["a", "b", "c"])
def test_nan_payloads_survive_double_cells_and_calls(of):
    """NaN payloads (quiet and signalling, both signs), -0.0 and -inf through double cells
    written back for a call and reloaded after, a NaN condition (`a == a`), and a NaN loss."""
    ins = [{}, {"a": QNAN}, {"b": NQNAN}, {"c": SNAN}, {"a": NSNAN, "b": SNAN},
           {"a": -0.0, "c": -INF}, {"c": NAN}, {}]
    out = same(NAN_CALLS, of, ["a", "b", "c"], ins, bails=0)
    if of == "a":
        assert out[3][1] == [0x7FF0000000000001]          # the signalling NaN, bit for bit


# ---- discrepancies --------------------------------------------------------------------------

def run_native_in_subprocess(script: str, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, RVM_CACHE_DIR=str(tmp_path),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, preexec_fn=stack_8mib)


def stack_8mib() -> None:
    """The usual Linux main-thread stack (ulimit -s 8192), whatever the test runner has."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    want = 8 << 20
    if hard == resource.RLIM_INFINITY or hard >= want:
        resource.setrlimit(resource.RLIMIT_STACK, (want, hard))


def many_locals(k: int) -> str:
    decls = "\n".join(f"    local t{i}: float" for i in range(k))
    return f"""
inout x: float = 0.5
inout n: int = 3
output y: float
func rec(y: float, x: float, n: int) {{
{decls}
    local m: int
    with {{
        m += n
        dec m
    }} do {{
        if n > 0 {{
            call rec(y, x, m)
        }} fi n > 0
    }}
    y += x * x
}}
func main() {{
    call rec(y, x, n)
}}
"""


def test_deep_recursion_with_many_locals_does_not_crash(tmp_path):
    src = many_locals(200)
    f = rvm.grad_fn(rvm.assemble(src), of="y", wrt=["x"], native=False)
    f({})
    want = bits(f({"n": 1990})["x"])
    assert want == bits(1991.0)
    r = run_native_in_subprocess(f"""
        import rvm
        f = rvm.grad_fn(rvm.assemble({src!r}), of="y", wrt=["x"], native=True)
        f({{}}); f({{}})
        g = f({{"n": 1990}})
        print(float(g["x"]).hex())
        """, tmp_path)
    assert r.returncode == 0, f"returncode {r.returncode}: {r.stderr[-500:]}"
    assert r.stdout.split() == [(1991.0).hex()]


RECURSIVE3 = """
inout x: float = 0.5
inout n: int = 3
output y: float
func down(y: float, x: float, n: int) {
    local n1: int
    with {
        n1 += n
        dec n1
    } do {
        if n > 0 {
            call down(y, x, n1)
        } fi n > 0
    }
    y += x * x
}
func main() {
    call down(y, x, n)
}
"""


def call_in_thread(use_native: bool, stack: int, tmp_path) -> subprocess.CompletedProcess:
    return run_native_in_subprocess(f"""
        import threading, rvm
        f = rvm.grad_fn(rvm.assemble({RECURSIVE3!r}), of="y", wrt=["x"], native={use_native})
        threading.stack_size({stack})
        res = []
        def work():                 # the thread owns f: its calls run on f's own machine
            f({{}}); f({{}})
            res.append(f({{"n": 1990}}))
        t = threading.Thread(target=work)
        t.start(); t.join()
        print(float(res[0]["x"]).hex(), f.runner.core.native_bails)
        """, tmp_path)


def test_interpreter_recurses_1990_deep_in_a_small_thread_stack(tmp_path):
    r = call_in_thread(False, 1 << 18, tmp_path)
    assert r.returncode == 0 and r.stdout.split() == [(1991.0).hex(), "0"]


def test_deep_recursion_in_a_thread_with_a_small_stack_does_not_crash(tmp_path):
    r = call_in_thread(True, 1 << 18, tmp_path)
    assert r.returncode == 0, f"returncode {r.returncode}: {r.stderr[-500:]}"
    # the native code gives up near the end of the thread's stack: the interpreter computes it
    assert r.stdout.split() == [(1991.0).hex(), "1"]


THROUGH_PARAM = """
inout x: float = 2.0
inout b: int = 1
global acc: float
global other: float
output y: float
func f(p: float, v: float) {
    p += v
    y += acc * v
    p -= v
}
func g(q: float) {
    call f(q, x)
}
func main() {
    if b == 1 {
        call g(acc)
    } else {
        call f(other, x)
    } fi b == 1
}
"""


def test_a_global_bound_to_a_parameter_is_read_from_memory():
    """f reads the global acc directly and writes it through its parameter p when g passes acc
    on (b = 1): the native code must not keep acc in a register in f (param_reach: p's cells
    include acc, through g's parameter).  y = acc * x = x^2 after p += x, so dy/dx = 2x; with
    b = 0 the parameter is `other` and y = 0.  f and g are inlined into main's code."""
    from rvm.native.codegen import param_reach
    prog = rvm.assemble(THROUGH_PARAM)
    acc = next(v.addr for v in prog.globals if v.name == "acc")
    other = next(v.addr for v in prog.globals if v.name == "other")
    names = [fn.name for fn in prog.functions]
    reach = param_reach(prog)
    lo, hi = reach[names.index("f")][0]
    assert lo <= acc < hi and lo <= other < hi
    assert reach[names.index("g")][0] == (acc, acc + 1)
    out = same(THROUGH_PARAM, "y", ["x"], [{}, {"x": -1.5}, {"b": 0}, {"x": 3.0}], bails=0)
    assert kinds(out) == ["ok"] * 4
    f = rvm.grad_fn(prog, of="y", wrt=["x"], native=True)
    assert f({"x": 3.0})["x"] == 6.0
    assert rvm.run(prog, {"x": 3.0}).outputs["y"] == 9.0
    # every callee variant is compiled into main's; a recursive one stays a C function
    def heads(src: str) -> list[str]:          # the callee variants' definitions
        return [ln for ln in src.splitlines() if re.match(r"static .*\bi64 f\d+_\w+\(.*\{$", ln)]

    assert len(heads(native.generate(prog))) == 6
    assert all("always_inline" in h for h in heads(native.generate(prog)))
    rprog = rvm.assemble(RECURSION)
    ix = {fn.name: i for i, fn in enumerate(rprog.functions)}
    rec = heads(native.generate(rprog))
    for name, inline in (("even", False), ("odd", False), ("loop", True)):
        mine = [h for h in rec if f"i64 f{ix[name]}_" in h]
        assert mine and all(("always_inline" in h) == inline for h in mine), name
