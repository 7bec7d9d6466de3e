"""The folders show the architecture: isa -> assembler -> Program -> machine -> tools, with no
import running back up (DESIGN.md).  Checked in fresh interpreters."""
from __future__ import annotations

import subprocess
import sys


def loaded_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\n"
                          "print(' '.join(sorted(m for m in sys.modules if m == 'rvm' or "
                          "m.startswith(('rvm.', 'assembler')))))"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_isa_imports_nothing_above_it():
    mods = loaded_after("import isa.table, isa.program, isa.arith, isa.derivatives, "
                        "isa.functions, isa.gates, isa.expr, isa.docs, isa.build, isa.cgen")
    assert mods == []


def test_the_assembler_loads_nothing_of_rvm():
    mods = loaded_after("import assembler; assembler.assemble_file('programs/rfib.rasm')")
    assert [m for m in mods if not m.startswith("assembler")] == []     # nothing of rvm


def test_import_rvm_loads_the_machine_and_ad_on_first_use():
    mods = loaded_after("import rvm; rvm.Program")
    assert not {"rvm._core", "rvm.machine", "rvm.ad", "rvm.native"} & set(mods)
    assert "rvm.ad.engine" in loaded_after("import rvm; rvm.grad")
