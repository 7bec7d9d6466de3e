"""The compiled core checks at import that it was built from the instruction table isa/ declares
now (isa/build.py): a table edited without a rebuild is an ImportError naming the fix."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import rvm._core as core
from isa import build
from isa.table import OPS

ROOT = Path(__file__).resolve().parent.parent
MESSAGE = r"built from a different instruction table; rebuild: pip install -e \."


def test_the_core_matches_the_table():
    build.check_build(core.TABLE_HASH)
    assert core.TABLE_HASH == build.table_hash()


@pytest.mark.parametrize("change", ["inverse", "appended", "operands", "flags"])
def test_a_changed_table_is_refused(change):
    ops = list(OPS)
    if change == "inverse":
        ops[0] = dataclasses.replace(OPS[0], inverse=OPS[0].name)
    elif change == "appended":
        ops.append(dataclasses.replace(OPS[-1], code=len(OPS), name="cswap.i"))
    elif change == "operands":
        ops[5] = dataclasses.replace(OPS[5], operands=OPS[5].operands + ("a",))
    else:
        ops[7] = dataclasses.replace(OPS[7], flags=OPS[7].flags | {"reads-only"})
    assert build.table_hash(tuple(ops)) != build.table_hash()
    with pytest.raises(ImportError, match=MESSAGE):
        build.check_build(core.TABLE_HASH, tuple(ops))


def test_the_hash_does_not_depend_on_the_process():
    """Flags are a frozenset: their order varies with PYTHONHASHSEED, the hash must not."""
    code = "from isa.build import table_hash; print(table_hash())"
    seen = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                           text=True, check=True, env={"PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2", "3")}
    assert seen == {build.table_hash() + "\n"}


def test_importing_a_stale_core_fails_and_names_the_fix():
    """The table as loaded differs from the one the core was built from (an opcode appended):
    importing the core raises before it fills its per-opcode arrays."""
    code = ("import dataclasses, isa.build as b, isa.table as t\n"
            "b.OPS = t.OPS + (dataclasses.replace(t.OPS[-1], code=len(t.OPS), name='new.i'),)\n"
            "import rvm._core\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0
    assert "ImportError: rvm's compiled core was built from a different instruction table; " \
           "rebuild: pip install -e ." in r.stderr


def test_a_data_instruction_without_a_body_stops_the_build():
    """A table entry without C semantics cannot reach an executor: the generator refuses it
    by name (setup.py runs it before compiling)."""
    from isa import cgen
    from isa.table import OP_BY_NAME

    bare = dataclasses.replace(OP_BY_NAME["xorand.i"], law="", f="", body="")
    with pytest.raises(cgen.MissingBody, match=r"xorand.i is a data instruction without C "
                                               r"semantics: give its family a law and f, or a "
                                               r"body, in isa/table.py"):
        cgen.function(bare)
    assert "rvm_op_cswap_i" in cgen.generate_isa_header()
