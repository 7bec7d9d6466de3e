"""Source text the assembler cannot trust: every input is bounded in cost, reported as
diagnostics (never a traceback), and never echoes a file that is not a program."""
from __future__ import annotations

from fractions import Fraction

import pytest

import rvm
from assembler import AssemblyError, assemble, assemble_file
from assembler.diagnostics import MAX_DIAGNOSTICS
from rvm.cli import UsageError, _parse_value


def diagnostics(src: str) -> AssemblyError:
    with pytest.raises(AssemblyError) as e:
        assemble(src, "t.rasm")
    return e.value


def test_a_huge_exponent_is_out_of_range_without_expanding_it():
    e = diagnostics("inout x: fixed = 1e999999999\nfunc main() {\n}\n")
    assert e.diagnostics[0].code == "E006" and "1e999999999" in e.diagnostics[0].message
    p = assemble("inout x: fixed = 1e-999999999\ninout y: float = 1e-999999999\n"
                 "func main() {\n}\n")
    assert p.globals[0].default == [0] and p.globals[1].default == [0]


def test_an_integer_literal_too_long_to_read_is_an_error_with_a_short_message():
    digits = "9" * 5000
    for src in (f"inout x: int = {digits}\nfunc main() {{\n}}\n",
                f"inout x: float = {digits}\nfunc main() {{\n}}\n",
                f"inout a: int[{digits}]\nfunc main() {{\n}}\n",
                f"inout a: int[4]\nfunc main() {{\n    a[{digits}] += 1\n}}\n"):
        d = diagnostics(src).diagnostics[0]
        assert d.code == "E006", str(d)
        assert len(d.message) < 200
        assert all(len(line) < 200 for line in str(d).splitlines())


def test_diagnostics_are_capped_and_long_lines_clipped():
    e = diagnostics("}" * 20_000 + "\n")
    assert len(e.diagnostics) == MAX_DIAGNOSTICS and e.more > 19_000
    text = str(e)
    assert text.endswith(f"... and {e.more} more errors")
    assert max(len(line) for line in text.splitlines()) < 200


def test_include_reads_program_sources_only(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password: hunter2\n")
    src = tmp_path / "main.rasm"
    src.write_text(f'include "{secret}"\ninclude "/etc/passwd"\nfunc main() {{\n}}\n')
    with pytest.raises(AssemblyError) as e:
        assemble_file(src)
    assert [d.code for d in e.value.diagnostics] == ["E010", "E010"]
    assert "hunter2" not in str(e.value) and "root:" not in str(e.value)


def test_a_deep_include_chain_is_an_error_not_a_recursion_crash(tmp_path):
    for i in range(200):
        (tmp_path / f"f{i}.rasm").write_text(f'include "f{i + 1}.rasm"\n')
    (tmp_path / "f200.rasm").write_text("func main() {\n}\n")
    with pytest.raises(AssemblyError) as e:
        assemble_file(tmp_path / "f0.rasm")
    assert any(d.code == "E010" and "nested more than" in d.message
               for d in e.value.diagnostics)


def test_a_binary_file_or_a_directory_says_so(tmp_path):
    blob = tmp_path / "blob.rasm"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00")
    with pytest.raises(AssemblyError) as e:
        assemble_file(blob)
    assert "not UTF-8 text" in str(e.value) and str(blob) in str(e.value)
    with pytest.raises(FileNotFoundError) as e2:
        rvm.assemble(str(tmp_path))
    assert "directory" in str(e2.value)


def test_a_path_that_names_a_program_must_exist():
    with pytest.raises(FileNotFoundError):
        rvm.assemble("programs/nosuch.rasm")
    with pytest.raises(FileNotFoundError):
        rvm.assemble("nosuch.ja")


def test_assembly_errors_are_rvm_errors():
    assert issubclass(rvm.AssemblyError, rvm.RVMError)
    with pytest.raises(rvm.RVMError):
        rvm.assemble("func main() {\n    x += 1\n}\n")


@pytest.mark.parametrize("text, value", [
    ("0x10", 16), ("1_000", 1000), ("007", 7), ("-0b101", -5),
    ("[1, 2,3]", [1, 2, 3]), ("[]", []), ("1.5", Fraction(3, 2)), ("-2.5e-3", Fraction(-1, 400)),
])
def test_command_line_values_read_as_the_language_writes_them(text, value):
    assert _parse_value(text) == value


@pytest.mark.parametrize("text", ["true", "null", "abc", "", "1e", "[1, x]", "9" * 500])
def test_command_line_values_that_are_not_numbers_are_refused_with_the_forms_that_work(text):
    with pytest.raises(UsageError, match="value"):
        _parse_value(text)


def test_a_constant_join_condition_is_a_real_test_not_an_unverifiable_join():
    """Found by fuzzing: `fi 1 > 0` made an unconditional join after a fall-through."""
    for body, v in (("    if v < 0 {\n        inc v\n    } else {\n        dec v\n    } fi 1 > 0"
                     "\n    inc v\n", -1),
                    ("    from v == 0 {\n        inc v\n    } until 1 > 0\n", 0)):
        p = assemble(f"inout v: int\nfunc main() {{\n{body}}}\n", "t.rasm")
        m = rvm.Machine(p)
        m.reset({"v": v})
        assert m.run() == "end"             # the path the constant condition allows
    m.reset({"v": 1})
    with pytest.raises(rvm.Trap):           # the entry with v != 0 contradicts `from v == 0`
        m.run()


def test_a_condition_where_a_value_is_expected_is_an_error():
    e = diagnostics("inout odd: int\nfunc main() {\n    inc odd == 0\n}\n")
    assert e.diagnostics[0].code == "E004" and "is a condition, not a value" in str(e)
    e = diagnostics("inout n: int\nfunc main() {\n    for i in 0..(n < 3) {\n    }\n}\n")
    assert e.diagnostics[0].code == "E004" and "is a condition, not an int" in str(e)


def test_janus_literals_and_array_sizes_are_bounded(tmp_path):
    from assembler import assemble_janus

    with pytest.raises(AssemblyError, match="E006"):
        assemble_janus("procedure main()\n    int x\n    x += " + "9" * 5000 + "\n", "t.ja")
    with pytest.raises(AssemblyError, match=r"array size 0xffffffffffffffff is not in"):
        assemble_janus("procedure main()\n    int a[0xffffffffffffffff]\n    skip\n", "t.ja")
    p = assemble_janus("procedure main()\n    int a[2147483648]\n    a[1] += 2\n", "t.ja")
    assert p.globals[0].length == 2147483648          # assembled without a list per cell
