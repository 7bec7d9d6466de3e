"""docs/isa.md is generated from isa/table.py and must not go stale."""
from isa import docs
from isa.table import INVERSE, OPS


def test_isa_md_is_fresh():
    assert docs.DOC_PATH.read_text() == docs.render(), "run `python -m isa.docs`"


def test_every_opcode_documented():
    text = docs.render()
    for op in OPS:
        assert f"`{op.name}`" in text


def test_inverse_is_an_involution():
    for op in OPS:
        assert INVERSE[INVERSE[op.code]] == op.code, op.name
        assert OPS[INVERSE[op.code]].operands == op.operands, op.name
