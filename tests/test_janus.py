"""The Janus front end against jana: every program of tests/janus/ runs to jana's printed
output and final values (tests/janus/README.md says how they were made), runs backward to
main's zero start, and every error case is an rvm diagnostic at the Janus source line."""
from __future__ import annotations

import glob
import os
import re

import pytest

import rvm
from assembler import AssemblyError, assemble_janus, disassemble

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "janus")
PROGRAMS = sorted(glob.glob(os.path.join(HERE, "*.ja")))
ERRORS = sorted(glob.glob(os.path.join(HERE, "errors", "*.ja")))


def compile_janus(path: str):
    with open(path, encoding="utf-8") as fh:
        return assemble_janus(fh.read(), path, modular=path.endswith(".m.ja"))


# ---- jana's output, in rvm's notation -----------------------------------------------------------

def _list(body: str) -> str:
    return "[" + body + "]"


def rvm_notation(line: str) -> str:
    """A line jana printed, written as rvm prints it: arrays `{1, 2}` -> `[1, 2]`, stacks
    `<top, ..., bottom]` -> `[bottom, ..., top]`, `nil` -> `[]`, `a[3] = ` -> `a = `."""
    line = re.sub(r"<([^\]]*)\]", lambda m: _list(", ".join(reversed(m.group(1).split(", ")))),
                  line)
    line = re.sub(r"\{([^}]*)\}", lambda m: _list(m.group(1)), line)
    line = re.sub(r"\bnil\b", "[]", line)
    return re.sub(r"(\w+)\[\d+\] = ", r"\1 = ", line)


def jana_output(path: str, n_vars: int) -> tuple[list[str], list[str]]:
    """(lines printed while running, final store lines) of a program's .out file."""
    with open(path[:-3] + ".out", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    assert lines[-1] == ""
    lines = lines[:-1]
    if n_vars == 0:
        return lines[:-1], []
    return lines[:-n_vars], lines[-n_vars:]


def run(prog):
    """Run forward; (lines printed, final `name = value` lines, the machine)."""
    printed: list[str] = []

    def handler(event):
        if event.style != "trace":
            printed.extend(str(event).split("\n"))
    m = rvm.Machine(prog, trace=handler)
    m.reset()
    m.run()
    store = [f"{g.name} = {_value(m.read(g.name))}" for g in prog.globals]
    return printed, store, m


def _value(v) -> str:
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


@pytest.mark.parametrize("path", PROGRAMS, ids=[os.path.basename(p) for p in PROGRAMS])
def test_program_matches_jana_and_runs_back(path):
    prog = compile_janus(path)
    want_printed, want_store = jana_output(path, len(prog.globals))
    printed, store, m = run(prog)
    assert store == [rvm_notation(x) for x in want_store]
    assert printed == [rvm_notation(x) for x in want_printed]
    m.run(direction=-1)                            # back to main's start: everything zero
    for g in prog.globals:
        v = m.read(g.name)
        assert (list(v) == [] if g.stack else not any(map(int, [v] if g.length is None else v))), \
            g.name


def test_the_corpus_is_large_enough():
    assert len(PROGRAMS) >= 25 and len(ERRORS) >= 15


def test_output_orientation_and_json(tmp_path):
    """`rvm run prog.ja` prints main's variables in name order, stacks bottom first; --json
    gives {"outputs": ...} with stacks as lists the same way round."""
    import json
    import subprocess
    import sys
    src = tmp_path / "s.ja"
    src.write_text("procedure main()\n    stack s\n    int b\n    int a\n    local int x = 1\n"
                   "    push(x, s)\n    x += 2\n    push(x, s)\n    delocal int x = 0\n"
                   "    b += top(s)\n    a += size(s)\n")
    cmd = [sys.executable, "-m", "rvm.cli", "run", str(src)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert out == "a = 2\nb = 2\ns = [1, 2]\n"
    doc = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert doc == {"outputs": {"a": 2, "b": 2, "s": [1, 2]}}


def test_janus_programs_run_backward_from_their_results():
    prog = compile_janus(os.path.join(HERE, "fib_pairs.ja"))
    r = rvm.run(prog)
    back = rvm.run(prog, r.outputs, reverse=True)
    assert all(v == 0 for v in back.inputs.values() if not hasattr(v, "__len__"))


def test_modular_reduces_expression_values_to_32_bits():
    src = ("procedure main()\n    int x\n    int y\n    x += 2147483647\n    y += x + 1\n")
    assert rvm.run(assemble_janus(src)).outputs["y"] == 2147483648
    assert rvm.run(assemble_janus(src, modular=True)).outputs["y"] == -2147483648


def test_janus_programs_disassemble_and_debug_at_janus_lines():
    prog = compile_janus(os.path.join(HERE, "fib_pairs.ja"))
    text = disassemble(prog)
    assert "func main()" in text
    # every instruction's line points into the Janus file
    assert {prog.files[int(f)] for f in prog.lines[:, 0]} == {prog.files[0]}
    assert prog.files[0].endswith("fib_pairs.ja")


# ---- errors -------------------------------------------------------------------------------------

# (kind, line): "E..." an assembly diagnostic of that code, else the name of the Trap class.
# jana's message for each is in the .err file next to the program.
ERROR_KINDS = {
    "alias_args": ("E005", 9), "alias_element": ("AliasError", 9), "alias_index": ("AliasError", 4),
    "alias_self": ("E005", 5), "arg_count": ("E009", 7), "arg_type": ("E004", 7),
    "array_size_mismatch": ("E004", 7), "array_zero_size": ("E006", 3),
    "delocal_mismatch": ("AssertionTrap", 7), "delocal_order": ("E001", 8),
    "div_zero": ("DivisionByZero", 6), "fi_assert_bwd": ("ComeFromError", 5),
    "fi_assert_else": ("ComeFromError", 8), "fi_assert_fwd": ("ComeFromError", 6),
    "from_entry_initial": ("ComeFromError", 5), "from_reentry_fwd": ("ComeFromError", 6),
    "index_negative": ("E004", 5), "index_read_oob": ("E006", 5),
    "index_write_oob": ("BoundsError", 6), "local_shadow": ("E003", 4),
    "mod_zero": ("DivisionByZero", 7), "mod_zero_late": ("DivisionByZero", 8),
    "parse_call_expr_arg": ("E001", 7), "parse_unary_minus": ("E001", 6),
    "pop_empty": ("AssertionTrap", 5), "pop_nonzero": ("AssertionTrap", 8),
    "size_of_int": ("E004", 5), "swap_types": ("E004", 5), "top_empty": ("AssertionTrap", 5),
    "type_bitand_precedence": ("E004", 7), "type_int_condition": ("E004", 5),
    "type_not_int": ("E004", 4), "type_stack_in_expr": ("E008", 5), "uncall_main": ("E012", 5),
    "undeclared": ("E002", 4), "undefined_proc": ("E012", 4),
    "until_bwd_entry": ("ComeFromError", 6), "until_bwd_reentry": ("ComeFromError", 7),
    "user_error": ("AssertionTrap", 6),
}
# what jana rejects and rvm's Janus accepts (documented in docs/rasm.md)
ACCEPTED = {"parse_element_swap": "a[0] <=> a[1] (elements swap)",
            "printf_percent_last": "printf with %% after the last argument",
            "type_bool_compare": "conditions compared as 0/1",
            "type_bool_value": "a condition used as the int 0/1"}


def test_every_error_case_is_listed():
    names = {os.path.basename(p)[:-3] for p in ERRORS}
    assert names == set(ERROR_KINDS) | set(ACCEPTED)


@pytest.mark.parametrize("name", sorted(ERROR_KINDS))
def test_error_cases_are_rvm_diagnostics_at_the_janus_line(name):
    path = os.path.join(HERE, "errors", name + ".ja")
    kind, line = ERROR_KINDS[name]
    try:
        prog = compile_janus(path)
    except AssemblyError as e:
        d = e.diagnostics[0]
        assert (d.code, d.line) == (kind, line), str(d)
        assert d.file == path and str(d).startswith(f"{path}:{line}:")
        return
    assert not kind.startswith("E"), f"{name}: assembled, but jana rejects it statically"
    with pytest.raises(rvm.errors.Trap) as e:
        run(prog)
    assert type(e.value).__name__ == kind, str(e.value)
    assert e.value.location[0] == path and e.value.location[1] == line, str(e.value)


def test_delocal_mismatch_names_expected_and_actual_values():
    with pytest.raises(rvm.errors.AssertionTrap) as e:
        run(compile_janus(os.path.join(HERE, "errors", "delocal_mismatch.ja")))
    assert e.value.values == {"t": 5, "4": 4}
    assert "`t` must equal `4`" in str(e.value)


def test_stack_errors_say_what_went_wrong():
    for name, text in (("pop_empty", "the stack `s` is empty"),
                       ("pop_nonzero", "`v` is not zero: a pop needs a zero cell"),
                       ("top_empty", "top(s): the stack `s` is empty"),
                       ("user_error", "error: ")):
        with pytest.raises(rvm.errors.AssertionTrap) as e:
            run(compile_janus(os.path.join(HERE, "errors", name + ".ja")))
        assert text in str(e.value), (name, str(e.value))


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_what_rvm_accepts_beyond_jana_runs(name):
    run(compile_janus(os.path.join(HERE, "errors", name + ".ja")))


def test_the_janus_examples_in_programs():
    root = os.path.join(os.path.dirname(HERE), "..", "programs", "janus")
    fib = rvm.run(compile_janus(os.path.join(root, "fib.ja")))
    assert fib.outputs == {"n": 0, "x1": 5, "x2": 8}
    rle = rvm.run(compile_janus(os.path.join(root, "rle.ja")))
    assert list(rle.outputs["runs"]) == [7, 3, 4, 1, 9, 2] and list(rle.outputs["src"]) == []
    back = rvm.run(compile_janus(os.path.join(root, "rle.ja")), rle.outputs, reverse=True)
    assert list(back.inputs["src"]) == [] and list(back.inputs["runs"]) == []


QUIRKS = os.path.join(HERE, "quirks")
# jana behaviours rvm's Janus copies (the program runs to jana's output) ...
QUIRKS_MATCHED = ["empty_main", "invert_flag", "literal_forms", "mod_store_unwrapped.m"]
# ... and the ones it declines, with what it does instead (docs/rasm.md, "The Janus front end")
QUIRKS_DECLINED = {
    "array_swap_sizes": "E004",      # whole arrays swap only with arrays of the same length
    "bignum": "E006",                # ints are 64 bits
    "dup_procedure": "E003",         # an error (jana prints one but exits 0)
    "index_alias_hole": "E005",      # x += a[x] cannot be undone: refused
    "local_copies": "E008",          # a local is an int, not an array copy
    "same_arg_twice": "E005",        # a cell passed twice to a procedure that writes it
    "mod_intermediate.m": "values",  # intermediate values are 64-bit words, not unbounded
    "mod_delocal.m": "AssertionTrap",  # the same failure as jana's, at the same line
}


@pytest.mark.parametrize("name", QUIRKS_MATCHED)
def test_jana_quirks_rvm_copies(name):
    path = os.path.join(QUIRKS, name + ".ja")
    prog = compile_janus(path)
    want_printed, want_store = jana_output(path, len(prog.globals))
    printed, store, _ = run(prog)
    assert store == [rvm_notation(x) for x in want_store]
    assert printed == [rvm_notation(x) for x in want_printed if x or prog.globals]


@pytest.mark.parametrize("name", sorted(QUIRKS_DECLINED))
def test_jana_quirks_rvm_declines(name):
    path = os.path.join(QUIRKS, name + ".ja")
    kind = QUIRKS_DECLINED[name]
    if kind.startswith("E"):
        with pytest.raises(AssemblyError) as e:
            compile_janus(path)
        assert e.value.diagnostics[0].code == kind
    elif kind == "values":
        prog = compile_janus(path)
        _, store, _ = run(prog)
        _, want = jana_output(path, len(prog.globals))
        assert store != [rvm_notation(x) for x in want]
    else:
        with pytest.raises(rvm.errors.Trap) as e:
            run(compile_janus(path))
        assert type(e.value).__name__ == kind


def test_every_quirk_is_listed():
    names = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(QUIRKS, "*.ja"))}
    assert names == set(QUIRKS_MATCHED) | set(QUIRKS_DECLINED)
