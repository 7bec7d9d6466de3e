"""Diagnostics: every error code E001..E014 with its exact position, message and caret, and
all the errors of a file reported at once."""
from __future__ import annotations

import pytest

from assembler import AssemblyError, Diagnostic, assemble, assemble_file


def errors(src: str, filename: str = "t.rasm", **kw) -> list[Diagnostic]:
    with pytest.raises(AssemblyError) as e:
        assemble(src, filename, **kw)
    assert str(e.value) == "\n".join(str(d) for d in e.value.diagnostics)
    return e.value.diagnostics


def only(src: str, **kw) -> Diagnostic:
    ds = errors(src, **kw)
    assert len(ds) == 1, "\n".join(map(str, ds))
    return ds[0]


def where(d: Diagnostic) -> tuple:
    return d.code, d.line, d.col, d.message


def test_diagnostic_text_has_location_source_line_and_caret():
    d = only("inout x: int\nfunc main() {\n    x += y\n}\n")
    assert str(d) == ("t.rasm:3:10: error[E002]: undefined name `y`\n"
                      "      x += y\n"
                      "           ^")
    assert (d.file, d.source_line) == ("t.rasm", "    x += y")


def test_caret_follows_tabs():
    d = only("inout x: int\nfunc main() {\n\tx += y\n}\n")
    assert d.col == 7
    assert str(d).splitlines()[2] == "  \t     ^"


# ---- one test per code ------------------------------------------------------------------------

@pytest.mark.parametrize("src, expected", [
    ("inout x: int\nfunc main() {\n    x += += 3\n}\n",
     ("E001", 3, 10, "expected an operand, found `+=`")),
    ("inout x int\nfunc main() {\n}\n",
     ("E001", 1, 9, "expected `:`, found `int`")),
    ("inout x: int\nfunc main() {\n    inc x y\n}\n",
     ("E001", 3, 11, "expected end of statement, found `y`")),
    ("inout x: int\nfunc main() {\n    if x == 0 {\n        inc x\n    } fi\n}\n",
     ("E001", 5, 9, "expected an operand, found end of line")),
    ("inout if: int\nfunc main() {\n}\n",
     ("E001", 1, 7, "`if` is a keyword, not a name")),
    ("inout x: int\nfunc main() {\n    x += 1 @\n}\n",
     ("E001", 3, 12, "unexpected character '@'")),
    ("inout x: int\n.fixed 16\nfunc main() {\n}\n",
     ("E001", 2, 1, "`.fixed` must come before every declaration")),
    ("output o: int = 3\nfunc main() {\n}\n",
     ("E001", 1, 17, "an output starts at zero: it takes no value")),
])
def test_e001_syntax(src, expected):
    assert where(only(src)) == expected


def test_e002_undefined_name():
    assert where(only("inout x: int\nfunc main() {\n    x += y\n}\n")) == \
        ("E002", 3, 10, "undefined name `y`")
    assert where(only("inout a: int[2]\nfunc main() {\n    inc a[k]\n}\n")) == \
        ("E002", 3, 11, "undefined name `k`")


@pytest.mark.parametrize("src, expected", [
    ("inout x: int\nglobal x: fixed\nfunc main() {\n}\n",
     ("E003", 2, 8, "`x` is already declared (t.rasm:1)")),
    ("func main() {\n    local t: int\n    local t: int\n}\n",
     ("E003", 3, 11, "`t` is already declared in `main` (line 2)")),
    ("func main() {\na:  nop\na:  nop\n}\n",
     ("E003", 3, 1, "label `a` is already defined (line 2)")),
    ("func f(p: int, p: int) {\n}\nfunc main() {\n}\n",
     ("E003", 1, 16, "`p` is already declared (t.rasm:1)")),
    ("func main() {\n}\nfunc main() {\n}\n",
     ("E003", 3, 6, "`main` is already declared (t.rasm:1)")),
])
def test_e003_duplicate(src, expected):
    assert where(only(src)) == expected


@pytest.mark.parametrize("src, expected", [
    ("inout x: int\ninout y: fixed\nfunc main() {\n    x += y\n}\n",
     ("E004", 4, 10, "type mismatch: `y` is fixed, expected int")),
    ("inout x: int\nfunc main() {\n    x += 1.5\n}\n",
     ("E004", 3, 10, "real literal `1.5` needs a fixed, float or lns cell, not int")),
    ("inout l: lns\nfunc main() {\n    l += 1\n}\n",
     ("E004", 3, 5, "`y += a` does not exist for lns cells (lns cells take *= and /=)")),
    ("inout x: fixed\ninout y: fixed\nfunc main() {\n    x += fixed(y)\n}\n",
     ("E004", 4, 16, "`y` is already fixed: no conversion needed")),
    ("inout x: int\nfunc main() {\n    x += exp(x)\n}\n",
     ("E004", 3, 10, "`exp` does not exist for int cells")),
    ("inout x: int\ninout f: float\nfunc main() {\n    if x < f {\n    }\n}\n",
     ("E004", 4, 12, "type mismatch: `f` is float, `x` is int (convert one with int(...) or "
                     "float(...))")),
    ("inout v: float[2]\nfunc f(a: fixed[]) {\n}\nfunc main() {\n    call f(v)\n}\n",
     ("E004", 5, 12, "`v` is float[], parameter `a` of `f` is fixed[]")),
    ("inout v: int[2]\nfunc f(a: int[3]) {\n}\nfunc main() {\n    call f(v)\n}\n",
     ("E004", 5, 12, "`v` has 2 cells, parameter `a` of `f` takes 3")),
])
def test_e004_type_mismatch(src, expected):
    assert where(only(src)) == expected


@pytest.mark.parametrize("src, expected", [
    ("inout x: int\nfunc main() {\n    x += x\n}\n",
     ("E005", 3, 10, "`x` is also the target `x`: a source may not alias the target")),
    ("inout a: int[3]\nfunc main() {\n    a[1] ^= a[1] & a[0]\n}\n",
     ("E005", 3, 13, "`a[1]` is also the target `a[1]`: a source may not alias the target")),
    ("inout x: int\nfunc main() {\n    swap x, x\n}\n",
     ("E005", 3, 13, "`x` and `x` are the same cell")),
    ("inout x: int\nfunc f(a: int, b: int) {\n    a += b\n}\nfunc main() {\n    call f(x, x)\n}\n",
     ("E005", 6, 15, "`x` and `x` are the same cell, and `f` writes `a`")),
    ("inout v: int[2]\nfunc f(a: int[], b: int) {\n    b += a[0]\n}\n"
     "func main() {\n    call f(v, v[1])\n}\n",
     ("E005", 6, 15, "`v[1]` and `v` are the same cell, and `f` writes `b`")),
])
def test_e005_aliasing(src, expected):
    assert where(only(src)) == expected


def test_e005_not_reported_when_the_callee_only_reads():
    assemble("inout x: int\ninout y: int\nfunc f(a: int, b: int, c: int) {\n    c += a * b\n}\n"
             "func main() {\n    call f(x, x, y)\n}\n")


@pytest.mark.parametrize("src, expected", [
    ("inout x: int\nfunc main() {\n    x += 99999999999999999999\n}\n",
     ("E006", 3, 10, "literal `99999999999999999999` does not fit in an int")),
    ("inout a: int[3]\nfunc main() {\n    inc a[3]\n}\n",
     ("E006", 3, 11, "index 3 is out of bounds for `a` (length 3)")),
    ("global a: int[0]\nfunc main() {\n}\n",
     ("E006", 1, 15, "array length 0 is not in 1..4294967296")),
    ("inout x: int\nfunc main() {\n    rotl x, 64\n}\n",
     ("E006", 3, 13, "bit count `64` is not in 0..63")),
    (".fixed 62\ninput x: fixed = 2\nfunc main() {\n}\n",
     ("E006", 2, 18, "literal `2` does not fit in a fixed cell (1 integer bits)")),
    (".fixed 63\nfunc main() {\n}\n",
     ("E006", 1, 1, "fraction bits 63 not in 0..62")),
    ("inout s: int\nfunc main() {\n    for i in 5..2 {\n    }\n}\n",
     ("E006", 3, 14, "empty range 5..2: the lower bound must not exceed the upper")),
    ("inout x: float\nfunc main() {\n    x += 1e400\n}\n",
     ("E006", 3, 10, "literal `1e400` overflows a float")),
])
def test_e006_out_of_range(src, expected):
    assert where(only(src)) == expected


@pytest.mark.parametrize("src, expected", [
    ("inout i: int\nfunc main() {\n    jmp nowhere\n}\n",
     ("E007", 3, 9, "undefined label `nowhere`")),
    ("inout i: int\nfunc main() {\nl1: jmp l2 if i == 0\nl2: inc i\n}\n",
     ("E007", 3, 9, "`l2` must label a `join` that names this jmp")),
    ("inout i: int\nfunc main() {\nl1: nop\nl2: join l1 if i == 0\n}\n",
     ("E007", 4, 10, "`l1` must label a `jmp` that targets this join")),
])
def test_e007_pairing(src, expected):
    assert where(only(src)) == expected


def test_e007_unconditional_jumps_must_not_be_fallen_into():
    ds = errors("inout i: int\nfunc main() {\na: jmp b\n   inc i\nb: join a\n}\n")
    assert [where(d) for d in ds] == [
        ("E007", 3, 4, "an unconditional `jmp` must be followed by a `join` or the end of the "
                       "function"),
        ("E007", 5, 4, "an unconditional `join` must come right after a `jmp` or the start of "
                       "the function")]
    assemble("inout i: int\nfunc main() {\na: jmp b\nb: join a\n}\n")


def test_e007_both_sides_of_a_mismatched_pair():
    ds = errors("inout i: int\nfunc main() {\na: jmp c if i == 0\nb: nop\nc: join b if i == 0\n}\n")
    assert [where(d) for d in ds] == [
        ("E007", 3, 8, "`c` must label a `join` that names this jmp"),
        ("E007", 5, 9, "`b` must label a `jmp` that targets this join")]


@pytest.mark.parametrize("src, expected", [
    ("const c: int = 1\nfunc main() {\n    inc c\n}\n",
     ("E008", 3, 9, "cannot write constant `c`")),
    ("inout a: int[2]\ninout x: int\nfunc main() {\n    x += a\n}\n",
     ("E008", 4, 10, "array `a` needs an index here")),
    ("inout x: int\nfunc main() {\n    inc x[0]\n}\n",
     ("E008", 3, 9, "`x` is not an array")),
    ("inout x: int\ninout y: int\nfunc main() {\n    rotl x, y\n}\n",
     ("E008", 4, 13, "the bit count of `rotl y, a` must be a literal, not `y`")),
    ("inout x: int\nfunc main() {\n    3 += x\n}\n",
     ("E008", 3, 5, "cannot write to literal `3`")),
    ("inout x: int\nfunc f(a: int) {\n    inc a\n}\nfunc main() {\n    call f(3)\n}\n",
     ("E008", 6, 12, "constant `3` is passed to parameter `a`, which `f` writes")),
    ("inout x: int\nfunc main() {\n    delocal x\n}\n",
     ("E008", 3, 13, "`x` is not a local of `main`")),
    ("inout x: int\nfunc main() {\n    trace \"v\", 3\n}\n",
     ("E008", 3, 16, "trace takes cells, not the literal `3`")),
])
def test_e008_operand_kind(src, expected):
    assert where(only(src)) == expected


@pytest.mark.parametrize("src, expected", [
    ("inout x: int\nfunc f(a: int) {\n    inc a\n}\nfunc main() {\n    call f(x, x)\n}\n",
     ("E009", 6, 10, "`f` takes 1 argument, not 2")),
    ("inout x: fixed\ninout y: fixed\nfunc main() {\n    x += pow(y)\n}\n",
     ("E009", 4, 10, "`pow` takes 2 arguments")),
    ("input v: int[3] = [1, 2]\nfunc main() {\n}\n",
     ("E009", 1, 19, "`v` has 3 cells, the initializer gives 2 values")),
])
def test_e009_arity(src, expected):
    assert where(only(src)) == expected


def test_e010_include_not_found():
    assert where(only('include "nonexistent.rasm"\nfunc main() {\n}\n')) == \
        ("E010", 1, 1, "cannot find include `nonexistent.rasm`")


def test_e010_include_cycle(tmp_path):
    (tmp_path / "a.rasm").write_text('include "b.rasm"\nfunc main() {\n}\n')
    (tmp_path / "b.rasm").write_text('global g: int\ninclude "a.rasm"\n')
    with pytest.raises(AssemblyError) as e:
        assemble_file(tmp_path / "a.rasm")
    [d] = e.value.diagnostics
    assert where(d) == ("E010", 2, 1, "`a.rasm` includes itself (include cycle)")
    assert d.file.endswith("b.rasm") and d.source_line == 'include "a.rasm"'


@pytest.mark.parametrize("src, expected", [
    ("func helper() {\n}\n", ("E011", 1, 1, "no `main` function: declare `func main() { ... }`")),
    ("func main(x: int) {\n}\n", ("E011", 1, 6, "`main` must have no parameters")),
])
def test_e011_main(src, expected):
    assert where(only(src)) == expected


@pytest.mark.parametrize("src, expected", [
    ("inout x: int\nfunc main() {\n    frob x\n}\n", ("E012", 3, 5, "unknown instruction `frob`")),
    ("inout x: int\nfunc main() {\n    call nothing(x)\n}\n",
     ("E012", 3, 10, "unknown function `nothing`")),
    ("inout x: float\ninout y: float\nfunc main() {\n    x += cbrt(y)\n}\n",
     ("E012", 4, 10, "unknown function `cbrt`")),
])
def test_e012_unknown(src, expected):
    assert where(only(src)) == expected


@pytest.mark.parametrize("src, expected", [
    ("inout n: int\nfunc main() {\n    for i in 0..n {\n        inc i\n    }\n}\n",
     ("E013", 4, 13, "the body of `for i` must not write `i` (its counter or a bound)")),
    ("inout n: int\nfunc main() {\n    for i in 0..n {\n        dec n\n    }\n}\n",
     ("E013", 4, 13, "the body of `for i` must not write `n` (its counter or a bound)")),
    ("inout a: int[2]\ninout j: int\nfunc main() {\n    for i in 0..a[j] {\n"
     "        inc j\n    }\n}\n",
     ("E013", 5, 13, "the body of `for i` must not write `j` (its counter or a bound)")),
    ("inout n: int\nfunc bump(k: int) {\n    inc k\n}\nfunc main() {\n    for i in 0..n {\n"
     "        call bump(n)\n    }\n}\n",
     ("E013", 7, 19, "`n` is passed to parameter `k`, which `bump` writes, inside the `for i` "
                     "loop that depends on it")),
])
def test_e013_for_body_writes(src, expected):
    assert where(only(src)) == expected


def test_e014_with_block_and_cross_function_labels():
    ds = errors("inout i: int\nfunc main() {\n    with {\nout: jmp back if i == 0\n"
                "    } do {\n    }\nback: join out if i == 0\n}\n")
    msg = "`{}` is across the boundary of a `with` block: control flow cannot leave or enter one"
    assert [where(d) for d in ds] == [("E014", 4, 10, msg.format("back")),
                                      ("E014", 7, 12, msg.format("out"))]
    assert where(only("func f() {\nl: nop\n}\nfunc main() {\n    jmp l\n}\n")) == \
        ("E014", 5, 9, "label `l` is in function `f`: jumps stay inside their function")


# ---- recovery ---------------------------------------------------------------------------------

def test_all_errors_of_a_file_are_reported_in_order():
    src = """inout x: int
inout x: fixed
func main() {
    x += += 1
    y += 1
    if x == 0 {
        x += 1.5
        frob
    } fi x == 0
    call missing(x)
    inc x
}
func helper(a: int) {
    a += a
}
"""
    ds = errors(src)
    assert [(d.code, d.line) for d in ds] == [
        ("E003", 2), ("E001", 4), ("E002", 5), ("E004", 7), ("E012", 8), ("E012", 10),
        ("E005", 14)]


def test_errors_inside_a_broken_block_header_are_still_found():
    ds = errors("inout x: int\nfunc main() {\n    if x = 1 {\n        inc y\n    }\n    dec z\n}\n")
    assert [(d.code, d.line) for d in ds] == [("E001", 3), ("E002", 4), ("E002", 6)]


def test_errors_in_included_files_name_that_file(tmp_path):
    (tmp_path / "lib.rasm").write_text("func f(a: int) {\n    a += b\n}\n")
    main = tmp_path / "main.rasm"
    main.write_text('include "lib.rasm"\nfunc main() {\n    nop q\n}\n')
    with pytest.raises(AssemblyError) as e:
        assemble_file(main)
    ds = e.value.diagnostics
    assert [(d.file, d.line, d.code) for d in ds] == [
        (str(main), 3, "E001"), (str(tmp_path / "lib.rasm"), 2, "E002")]


def test_errors_inside_a_with_block_are_diagnostics_not_crashes():
    src = """inout n: int = 3
inout m: fixed = 0
func main() {
    with {
        from n == 3 {
            inc n
        } until n > m
    } do {
    }
    with {
        if n < 2 {
            inc n
        } fi n < q
    } do {
    }
}
"""
    with pytest.raises(AssemblyError) as e:
        assemble(src, "w.rasm")
    got = [(d.line, d.code) for d in e.value.diagnostics]
    assert got == [(7, "E004"), (13, "E002")]
