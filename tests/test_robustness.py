"""Garbage text, huge inputs and runaway programs give clear errors, never a crash or a hang."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rvm
from assembler import AssemblyError, assemble
from rvm.errors import RVMError, StepLimit

KEYWORDS = ["func", "main", "(", ")", "{", "}", "input", "output", "int", "fixed", ":", "=",
            "+=", "-=", "*", "/", "if", "fi", "else", "from", "loop", "until", "for", "in", "..",
            "with", "do", "call", "uncall", "jmp", "join", "x", "y", "1", "2.5", "[", "]", ",",
            "\n", ";", "local", "include", '"', "#", "<", "==", "swap", "push", "pop"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_random_text_never_crashes_the_assembler(text):
    try:
        assemble(text)                   # text, always (rvm.assemble takes "/" for a path)
    except AssemblyError as e:
        assert all(d.code.startswith("E") for d in e.diagnostics)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(KEYWORDS), max_size=60))
def test_random_token_soup_never_crashes_the_assembler(tokens):
    try:
        prog = assemble(" ".join(tokens))
    except AssemblyError as e:
        assert e.diagnostics
        return
    # whatever assembled must also run under a step limit without crashing
    m = rvm.Machine(prog)
    m.reset({})
    try:
        m.run(max_steps=10_000)
    except RVMError:
        pass


def test_huge_array_is_a_clear_error():
    with pytest.raises(AssemblyError) as e:
        rvm.assemble("global x: int[10000000000000]\nfunc main() {\n}\n")
    assert e.value.diagnostics[0].code == "E006"


def test_huge_literal_is_a_clear_error():
    with pytest.raises(AssemblyError) as e:
        rvm.assemble("global x: int\nfunc main() {\n    x += 99999999999999999999999\n}\n")
    assert e.value.diagnostics[0].code == "E006"


def test_huge_input_value_is_a_clear_error():
    prog = rvm.assemble("input n: int\nfunc main() {\n}\n")
    m = rvm.Machine(prog)
    with pytest.raises((ValueError, OverflowError, RVMError)) as e:
        m.reset({"n": 1 << 70})
    assert "n" in str(e.value)


def test_long_program_assembles():
    body = "\n".join(f"    x += {i % 7}" for i in range(20_000))
    prog = rvm.assemble(f"inout x: int\nfunc main() {{\n{body}\n}}\n")
    assert rvm.run(prog, {"x": 0}).outputs["x"] == sum(i % 7 for i in range(20_000))


def test_deep_recursion_is_a_trap_not_a_crash():
    src = """
inout n: int = 100000
func down(n: int) {
    dec n
    call down(n)
}
func main() {
    call down(n)
}
"""
    with pytest.raises(RVMError) as e:
        rvm.run(rvm.assemble(src), max_steps=10_000_000)
    assert type(e.value).__name__ == "StackOverflow"


def test_infinite_loop_stops_at_the_step_limit():
    src = """
inout x: int
func main() {
    from x == 0 {
        inc x
    } until x == 0
}
"""
    with pytest.raises(StepLimit) as e:
        rvm.run(rvm.assemble(src), max_steps=100_000)
    assert e.value.step == 100_000


@pytest.mark.parametrize("sep", ["\x85", "\u2028", "\u2029", "\x1c"])
def test_unicode_line_separators_stay_inside_comments(sep):
    """Only \\n ends a line: text after U+2028 & co. in a comment is still comment."""
    src = f"input n: int = 3\noutput out: int\nfunc main() {{\n    out += n ; x{sep} inc out\n}}\n"
    assert rvm.run(rvm.assemble(src)).outputs == {"out": 3}


def test_crlf_sources_assemble():
    src = "input n: int = 3\r\noutput out: int\r\nfunc main() {\r\n    out += n\r\n}\r\n"
    assert rvm.run(rvm.assemble(src)).outputs == {"out": 3}


def test_step_counts_must_be_integers():
    m = rvm.Machine(rvm.assemble("inout x: int\nfunc main() {\n    inc x\n}\n"))
    m.reset({})
    with pytest.raises(TypeError):
        m.step(2.5)
    with pytest.raises(TypeError):
        m.run(max_steps=10.5)
    with pytest.raises(ValueError):
        m.run(max_steps=-5)


def test_big_python_ints_in_mixed_lists_stay_exact():
    p = rvm.assemble(".fixed 0\ninout ai: int[2]\ninout ax: fixed[2]\nfunc main() {\n}\n")
    m = rvm.Machine(p)
    m.reset({"ai": [2**53 + 1, 2.0], "ax": [2**53 + 1, 2.0]})
    assert list(m.read_raw("ai")) == [2**53 + 1, 2] and list(m.read_raw("ax")) == [2**53 + 1, 2]
    m.reset({"ai": [2**63 - 1, 0.0]})
    assert list(m.read_raw("ai")) == [2**63 - 1, 0]


def test_a_float_array_rounds_python_ints_like_a_float_cell():
    p = rvm.assemble("inout af: float[3]\ninout f: float\nfunc main() {\n}\n")
    m = rvm.Machine(p)
    m.reset({"af": [2**53 + 1, 0.5, 2**64 + 3], "f": 2**53 + 1})
    assert list(m.read("af")) == [float(2**53 + 1), 0.5, float(2**64 + 3)]
    assert m.read_raw("af")[0] == m.read_raw("f")
