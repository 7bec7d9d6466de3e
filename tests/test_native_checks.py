"""The checks of the generated code (rvm/native/codegen.py) where it makes them cheaper than
row by row: each test runs a program whose check must fail at a chosen place, natively and
interpreted, and wants the same error (type and text, the interpreter reports it after the
native code bails out) and the same results where nothing fails.

* The frame check at a return: the cells kept in C locals are checked on the locals (a -0.0
  is a nonzero word), the others on the memory, a long run of them 16 bytes at a time from
  the first aligned pair: a cell left nonzero anywhere in the frame, at either alignment of
  the frame, is the interpreter's ancilla error.
* Two cells of one array are one cell when their indexes are equal: the alias check of a
  row compares the indexes, and a row reading the cell it writes is still the
  interpreter's AliasError at that row (an index out of range its BoundsError).
"""
from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import native

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("RVM_CACHE_DIR", str(tmp_path_factory.mktemp("native_checks")))
    yield
    mp.undo()


def bits(v) -> list:
    return np.asarray(v, dtype=np.float64).reshape(-1).view(np.int64).tolist()


def observe(prog, of: str, wrt: list[str], inputs: list[dict], use_native: bool):
    f = rvm.grad_fn(prog, of=of, wrt=wrt, native=use_native)
    assert f.runner.core.native == use_native
    out = []
    for inp in inputs:
        try:
            g = f(dict(inp))
        except Exception as e:                      # noqa: BLE001 - compared as a value
            out.append(("error", type(e).__name__, str(e)))
            continue
        out.append(({k: bits(v) for k, v in g.items()}, bits(f.last.value), f.last.steps))
    return out, f


def same(src: str, of: str, wrt: list[str], inputs: list[dict]):
    """Native and interpreted grad_fn agree on every call (the first must run cleanly);
    returns the native observations and GradFn."""
    prog = rvm.assemble(src)
    nat, f = observe(prog, of, wrt, inputs, True)
    ref, _ = observe(prog, of, wrt, inputs, False)
    for k, (a, b) in enumerate(zip(nat, ref)):
        assert a == b, f"call {k} {inputs[k]}:\n native      {a}\n interpreted {b}"
    assert nat[0][0] != "error", nat[0]
    return nat, f


def frame_program(pad: int) -> str:
    """main's frame: a 37-cell array (in memory: indexed), a promoted scalar t and a
    3-cell array; a[i] += x * m leaves a[i] nonzero when m != 0, b[j] += x * mb b[j] when
    mb != 0, `neg t` leaves t = -0.0
    when u > 0.5.  `pad` extra globals shift the frame by that many words."""
    pads = "".join(f"inout p{k}: int\n" for k in range(pad))
    return pads + """
inout x: float = 0.5
inout m: float
inout mb: float
inout u: float
inout i: int
inout j: int
inout z: float
func main() {
    var a: float[37]
    var t: float
    var b: float[3]
    a[i] += x * m
    b[j] += x * mb
    z += x * x
    t += x * m
    t -= x * m
    if u > 0.5 {
        neg t
    } fi u > 0.5
}
"""


@pytest.mark.parametrize("pad", [0, 1])
def test_a_frame_cell_left_nonzero_anywhere_is_the_ancilla_error(pad):
    ins = [{"i": 0}] + [{"m": 1.0, "i": i} for i in range(37)] + \
        [{"mb": 1.0, "i": 5, "j": j} for j in range(3)] + [{"u": 1.0}, {"i": 36}]
    obs, f = same(frame_program(pad), "z", ["x"], ins)
    errs = [o for o in obs if o[0] == "error"]
    assert len(errs) == 37 + 3 + 1, [o for o in obs if o[0] != "error"]
    assert {o[1] for o in errs} == {"AncillaError"}
    assert obs[-1][0] == {"x": bits(1.0)} and obs[-1][1] == bits(0.25)
    assert f.runner.core.native_bails == 41


def test_the_native_runs_check_the_frame_too():
    """Machine.run's native forward and backward runs: a dirty frame is the interpreter's
    error, a clean run the interpreter's end state."""
    prog = rvm.assemble(frame_program(1))
    for inputs in ({"m": 1.0, "i": 0}, {"m": 1.0, "i": 1}, {"m": 1.0, "i": 36}, {"u": 1.0},
                   {"mb": 1.0, "j": 2}):
        m = rvm.Machine(prog)
        m.compile()
        ref = rvm.Machine(prog)
        m.reset(inputs)
        ref.reset(inputs)
        with pytest.raises(rvm.Trap) as e1:
            m.run()
        with pytest.raises(rvm.Trap) as e2:
            ref.run()
        assert type(e1.value).__name__ == "AncillaError" and str(e1.value) == str(e2.value)
        assert m.core.native_run_bails == 1
    m, ref = rvm.Machine(prog), rvm.Machine(prog)
    m.compile()
    for mm in (m, ref):
        mm.reset({"x": 0.75})
        mm.run()
    assert "native" in str(m.native)
    assert m.outputs() == ref.outputs() and m.outputs()["z"] == 0.75 * 0.75
    assert m.stats == ref.stats and m.stats["steps"] == 9
    assert m.core.native_runs >= 1 and m.core.native_run_bails == 0


ALIAS = """
inout x: float = 0.5
inout i: int
inout j: int = 1
inout z: float
inout a: float[5]
func main() {
    a[j] += x * x
    a[i] += a[j] * x
    z += a[i] * x
    a[i] -= a[j] * x
    a[j] -= x * x
}
"""


def test_one_arrays_cells_alias_when_their_indexes_are_equal():
    # a global array: a row that ran through an alias would leave no dirty frame behind
    ins = [{}, {"i": 1}, {"i": 3, "j": 3}, {"i": 4, "j": 2, "x": 0.75}, {"i": 5}, {"j": -1},
           {"i": 2, "j": 0}]
    obs, f = same(ALIAS, "z", ["x"], ins)
    assert [o[1] for o in obs if o[0] == "error"] == ["AliasError", "AliasError", "BoundsError",
                                                      "BoundsError"]
    assert all("at pc 2: addmul.f a[i], a[j], x" in obs[k][2] for k in (1, 2))
    # z = (x*x) * x * x: dz/dx = 4 x^3
    assert obs[3][0] == {"x": bits(4 * 0.75 ** 3)} and obs[6][1] == bits(0.5 ** 4)
    assert f.runner.core.native_bails == 4
