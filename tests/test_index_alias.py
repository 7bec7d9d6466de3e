"""A cell used as an index must not be written by the instruction or call that indexes with
it: run backward, the inverse would select another element and reversibility would break
silently.  The assembler rejects the cases it can see (E005); the machine traps the rest."""
import numpy as np
import pytest

import rvm
from assembler import AssemblyError
from rvm.errors import AliasError


def trapped_then_back(src, inputs):
    prog = rvm.assemble(src)
    m = rvm.Machine(prog)
    m.reset(inputs)
    start = m.mem[: prog.n_static].copy()
    with pytest.raises(AliasError) as e:
        m.run()
    m.run(direction=-1)
    np.testing.assert_array_equal(m.mem[: prog.n_static], start)
    return e.value


def test_instruction_writing_its_own_index_traps():
    e = trapped_then_back("inout a: int[4]\nfunc main() {\n    inc a[a[0]]\n}\n", {})
    assert "a[0] is written by this instruction but is the index of a[a[0]]" in e.detail
    assert e.location[1:] == (3, 5) and e.step == 1


def test_callee_changing_an_argument_index_traps_at_return():
    e = trapped_then_back("""
inout a: int[4]
inout i: int
func f(p: int) {
    inc p
    inc i
}
func main() {
    call f(a[i])
}
""", {"a": [10, 20, 30, 40], "i": 0})
    assert "f changed the index of its argument a[i]" in e.detail
    assert "bound to a[0], now the index names a[1]" in e.detail
    assert e.instruction == "end f"


def test_index_bound_to_a_written_parameter_traps_at_the_call():
    # h writes q; q is bound (through g's k) to i, the index of h's first argument
    e = trapped_then_back("""
inout a: int[4]
inout i: int
func h(p: int, q: int) {
    inc p
    inc q
}
func g(x: int[], k: int) {
    call h(x[i], k)
}
func main() {
    call g(a, i)
}
""", {})
    assert "index of argument 0 (x[i]) is i, which h writes through parameter q" in e.detail


@pytest.mark.parametrize("stmt, message", [
    ("i += a[i]", "`i` is the index of `a[i]`"),
    ("swap a[i], i", "`i` is the index of `a[i]`"),
    ("call f(a[i], i)", "`i` is the index of argument `a[i]`, and `f` writes `q`"),
])
def test_assembler_rejects_visible_index_writes(stmt, message):
    src = f"""
inout a: int[4]
inout i: int
func f(p: int, q: int) {{
    inc p
    inc q
}}
func main() {{
    {stmt}
}}
"""
    with pytest.raises(AssemblyError) as e:
        rvm.assemble(src)
    d = e.value.diagnostics[0]
    assert d.code == "E005" and message in d.message and d.line == 9
