"""The codes and the native state the core, the arithmetic and the native code share are
written once, in isa/ (rvm/_abi.h is generated from it): the header on disk says what isa/
says, and no hand-written file defines any of them again."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from isa import cgen
from isa.build import GENERATED
from isa.derivatives import KINDS
from isa.functions import CMP_GE, FN1, FN2
from isa.program import MODE_X
from isa.types import LNS

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "rvm" / "_abi.h"


def header_codes(text: str) -> dict[str, int]:
    codes: dict[str, int] = {}
    for body in re.findall(r"enum\s*\{([^}]*)\}", text):
        for name, value in re.findall(r"(\w+)\s*=\s*(-?\d+)", body):
            codes[name] = int(value)
    return codes


def test_the_built_header_has_isas_codes():
    text = HEADER.read_text()
    assert text == cgen.generate_abi_header()
    codes = header_codes(text)
    assert codes == cgen.abi_codes()
    # spot checks against the definitions themselves
    assert codes["MODE_X"] == MODE_X and codes["RC_GE"] == CMP_GE
    assert codes["TY_LNS"] == int(LNS)
    assert {codes[f"RF_{f.name.upper()}"] for f in FN1} == {f.id for f in FN1}
    assert [codes[f"RF2_{f.name.upper()}"] for f in FN2] == [f.id for f in FN2]
    assert [codes[f"ADK_{k.upper()}"] for k in KINDS] == list(range(len(KINDS)))
    assert "typedef struct rvm_ns" in text


def hand_written() -> list[Path]:
    """The sources of the core and the native code that are not generated."""
    generated = {ROOT / name for name in GENERATED}
    files = [*ROOT.glob("rvm/*.h"), *ROOT.glob("rvm/*.pxi"), *ROOT.glob("rvm/*.pyx"),
             ROOT / "rvm" / "_vm_run.pxi.in", *ROOT.glob("rvm/*.py"),
             *ROOT.glob("rvm/native/*.py")]
    return sorted(f for f in files if f not in generated)


def definitions(text: str, names: set[str]) -> list[str]:
    """Lines of `text` that give one of `names` a value: `NAME = 3` (C enum, Cython enum,
    Python), `#define NAME`, or a Python unpacking `A, NAME, B = range(5)` / `= 0, 2, 3`."""
    found = []
    for line in text.splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#define") else line
        for name in re.findall(r"\b([A-Z][A-Z0-9_]*)\s*=\s*-?\d", code):
            if name in names:
                found.append(line.strip())
        m = re.match(r"\s*#define\s+(\w+)\s", line)        # not a macro with arguments
        if m and m.group(1) in names:
            found.append(line.strip())
        m = re.match(r"\s*([A-Z_][A-Z0-9_, ]*?)\s*=\s*(range\(|-?\d+\s*,)", code)
        if m and {n.strip() for n in m.group(1).split(",")} & names:
            found.append(line.strip())
    return found


def test_no_hand_written_mirror():
    names = set(cgen.abi_codes())
    # the same codes under the names their mirrors used to have
    names |= {"RT_INT", "RT_FIXED", "RT_LNS", "RT_FLOAT", "DONE", "BAIL", "STOPPED"}
    files = hand_written()
    assert ROOT / "rvm" / "_arith.h" in files and ROOT / "rvm" / "_decls.pxi" in files
    assert ROOT / "rvm" / "native" / "codegen.py" in files
    mirrors = {str(f.relative_to(ROOT)): d for f in files
               if (d := definitions(f.read_text(), names))}
    assert mirrors == {}, "define these in isa/ (rvm/_abi.h is generated from it)"
    for f in files:
        text = f.read_text()
        assert not re.search(r"struct\s+rvm_ns\s*\{|cdef struct NativeState", text), f


@pytest.mark.parametrize("line", ["    MODE_X = 3", "MODE_G, MODE_L, MODE_P, MODE_X, MODE_N = range(5)",
                                  "enum { RT_INT = 0, RT_FIXED = 1 };",
                                  "DONE, BAIL, STOPPED = 0, 2, 3", "#define RF_SQRT 0"])
def test_the_mirror_check_finds_a_mirror(line):
    names = set(cgen.abi_codes()) | {"RT_INT", "DONE"}
    assert definitions(line, names) == [line.strip()]


def test_the_abi_number_is_the_headers_hash(monkeypatch):
    from rvm.native import codegen
    assert codegen.ABI == cgen.abi_number()
    # one translation unit of each library defines it (the tangent library has two units)
    assert f"int rvm_native_abi(void) {{ return {cgen.abi_number()}; }}" in codegen.ABI_FN
    assert "rvm_native_abi" not in codegen.PRELUDE
    assert '#include "_abi.h"' in codegen.PRELUDE and "struct rvm_ns {" not in codegen.PRELUDE
    before = cgen.abi_number()
    monkeypatch.setattr(cgen, "NATIVE_STATE",
                        cgen.NATIVE_STATE.replace("int64_t pc;", "int64_t pc, x;"))
    assert cgen.abi_number() != before
