"""The .rbc format: exact round trips, and every kind of damaged file is a FormatError with a
clear message (never another exception, never a hang, never a huge allocation)."""
from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assembler import rbc
from isa.functions import CMP_ALWAYS, CMP_LT, cond_word
from isa.table import OP_BY_NAME, ROW_WIDTH
from isa.types import FIXED, FLOAT, INT, LNS
from rvm.errors import FormatError, InvalidBytecode
from rvm.program import (
    INOUT,
    INPUT,
    OUTPUT,
    Arg,
    CallSite,
    Const,
    Function,
    Global,
    Local,
    Param,
    Program,
    Trace,
    XEntry,
    operand,
)


# ---- a small valid program (local helper: no dependency on the assembler) -------------------
def ins(name, *ops):
    row = [OP_BY_NAME[name].code, *ops]
    return row + [0] * (ROW_WIDTH - len(row))


G = lambda a: operand(0, a)     # noqa: E731
L = lambda o: operand(1, o)     # noqa: E731
P = lambda i: operand(2, i)     # noqa: E731
X = lambda i: operand(3, i)     # noqa: E731
N = lambda i: operand(4, i)     # noqa: E731
ALWAYS = cond_word(CMP_ALWAYS, INT)
LT = cond_word(CMP_LT, INT)


def program(with_lines: bool = True) -> Program:
    """g(a: int written, v: float[] written) over globals n:int, w:float[2], s:lns, and
    constants k:int, half:fixed.  Uses every operand mode and side table."""
    code = np.array([
        ins("begin", 0),                              # 0  func g
        ins("alloc", L(0)),                           # 1
        ins("add.i", L(0), N(1)),                     # 2  t += len(v)
        ins("jmp", LT, P(0), G(4), 6),                # 3  if a < k
        ins("addi.f", X(0), 0x3FF0000000000000),      # 4    v[t] += 1.0
        ins("jmp", ALWAYS, 0, 0, 8),                  # 5
        ins("join", ALWAYS, 0, 0, 3),                 # 6
        ins("neg.f", X(0)),                           # 7
        ins("join", LT, P(0), G(4), 5),               # 8
        ins("sub.i", L(0), N(1)),                     # 9
        ins("free", L(0)),                            # 10
        ins("end", 0),                                # 11
        ins("begin", 1),                              # 12 func main
        ins("call", 0),                               # 13
        ins("trace", 0),                              # 14
        ins("neg.l", G(3)),                           # 15
        ins("neg.l", G(3)),                           # 16
        ins("end", 1),                                # 17
    ], dtype=np.int64)
    lines = None
    if with_lines:
        lines = np.array([[i % 2, 10 + i, 1 + i % 5] for i in range(len(code))], dtype=np.int32)
    return Program(
        fraction_bits=24,
        code=code,
        globals=[Global("n", INT, 0, None, INPUT, [-7]),
                 Global("w", FLOAT, 1, 2, INOUT, [0, 0x4000000000000000]),
                 Global("s", LNS, 3, None, OUTPUT)],
        consts=[Const("k", INT, 4, None, [-(1 << 63)]),
                Const("half", FIXED, 5, 3, [1 << 23, (1 << 63) - 1, -1])],
        functions=[Function("g", 0, 11, [Param("a", INT, False, True),
                                         Param("v", FLOAT, True, True)],
                            [Local("t", INT, 0, None), Local("tmp", FIXED, 1, 4)], 5),
                   Function("main", 12, 17, [], [], 0)],
        main=1,
        xtab=[XEntry(P(1), -1, L(0))],
        callsites=[CallSite(0, [Arg(G(0)), Arg(G(1), 2)])],
        traces=[Trace("n and w[1] = \u00e9\u4e2d \"q\"", [G(0), G(2)])],
        lines=lines,
        files=["main.rasm", "lib/\u00fcber.rasm"],
        labels={3: "top", 12: "main", 17: "fin"},
    )


def assert_same(a: Program, b: Program) -> None:
    assert a.fraction_bits == b.fraction_bits and a.main == b.main
    assert a.code.dtype == b.code.dtype == np.int64
    assert a.code.shape == b.code.shape and np.array_equal(a.code, b.code)
    if a.lines is None:
        assert b.lines is None
    else:
        assert b.lines is not None and b.lines.dtype == np.int32
        assert np.array_equal(a.lines, b.lines)
    for name in ("globals", "consts", "functions", "xtab", "callsites", "traces", "files",
                 "labels"):
        assert getattr(a, name) == getattr(b, name), name
    for ga, gb in zip(a.globals + a.consts, b.globals + b.consts):
        assert type(gb.type) is type(ga.type)


def reseal(data: bytes, meta=None, meta_bytes: bytes | None = None, arrays: bytes | None = None,
           version: int = 2, flags: int = 0) -> bytes:
    """Rebuild a file around new metadata / arrays with correct sizes and checksum."""
    _, _, _, ml, dl = struct.unpack_from("<6sHHQQ", data)
    old_meta = data[26:26 + ml]
    old_arrays = data[26 + ml:26 + ml + dl]
    if meta_bytes is None:
        meta_bytes = old_meta if meta is None else json.dumps(meta).encode()
    if arrays is None:
        arrays = old_arrays
    body = struct.pack("<6sHHQQ", b"RVMBC\x00", version, flags, len(meta_bytes),
                       len(arrays)) + meta_bytes + arrays
    return body + struct.pack("<I", zlib.crc32(body))


def meta_of(data: bytes) -> dict:
    ml = struct.unpack_from("<Q", data, 10)[0]
    return json.loads(data[26:26 + ml])


DATA = rbc.dump(program())
SMALL = rbc.dump(Program(0, np.array([ins("begin", 0), ins("nop"), ins("end", 0)]), [], [],
                         [Function("main", 0, 2, [], [], 0)], 0))


def format_error(data: bytes, *fragments) -> str:
    with pytest.raises(FormatError) as ei:
        rbc.load_bytes(data, name="t.rbc")
    msg = str(ei.value)
    assert msg.startswith("t.rbc: ")
    for f in fragments:
        assert f in msg, msg
    return msg


# ---- round trips ---------------------------------------------------------------------------
@pytest.mark.parametrize("with_lines", [True, False])
def test_round_trip(with_lines):
    p = program(with_lines)
    data = rbc.dump(p)
    q = rbc.load_bytes(data)
    assert_same(p, q)
    assert rbc.dump(q) == data                     # deterministic
    q.code[1, 0] = OP_BY_NAME["nop"].code          # loaded arrays are writable copies
    q.code[1, 1] = 0


def test_dump_is_deterministic_and_starts_with_header():
    assert rbc.dump(program()) == DATA
    magic, version, flags, ml, dl = struct.unpack_from("<6sHHQQ", DATA)
    assert (magic, version, flags) == (b"RVMBC\x00", 2, 0)
    assert len(DATA) == 26 + ml + dl + 4
    assert dl == 18 * 6 * 8 + 18 * 3 * 4
    assert struct.unpack_from("<I", DATA, len(DATA) - 4)[0] == zlib.crc32(DATA[:-4])
    meta = meta_of(DATA)
    assert meta["arrays"]["code"] == {"dtype": "<i8", "shape": [18, 6], "offset": 0,
                                      "nbytes": 864}
    assert meta["arrays"]["lines"]["offset"] == 864
    # arrays are little endian, raw
    assert np.array_equal(np.frombuffer(DATA, "<i8", 18 * 6, 26 + ml).reshape(18, 6),
                          program().code)


def test_write_and_read(tmp_path):
    path = tmp_path / "prog.rbc"
    rbc.write(program(), path)
    assert path.read_bytes() == DATA
    assert_same(program(), rbc.read(path))
    assert_same(program(), rbc.read(str(path)))
    assert [x.name for x in tmp_path.iterdir()] == ["prog.rbc"]     # no temp file left


def test_read_bad_file_names_the_path(tmp_path):
    path = tmp_path / "bad.rbc"
    path.write_bytes(b"hello world, not bytecode")
    with pytest.raises(FormatError, match="bad.rbc: not an rvm bytecode file"):
        rbc.read(path)


def test_load_accepts_bytearray_and_memoryview():
    assert_same(program(), rbc.load_bytes(bytearray(DATA)))
    assert_same(program(), rbc.load_bytes(memoryview(DATA)))


def test_round_trip_of_assembled_programs():
    """Every example program survives dump -> load unchanged."""
    from pathlib import Path

    from assembler import assemble_file
    paths = sorted((Path(__file__).resolve().parent.parent / "programs").glob("*.rasm"))
    assert len(paths) >= 8
    for path in paths:
        p = assemble_file(path)
        assert_same(p, rbc.load_bytes(rbc.dump(p)))


# ---- header problems -----------------------------------------------------------------------
def test_bad_magic():
    format_error(b"PK\x03\x04" + DATA[4:], "not an rvm bytecode file", "bad magic")
    format_error(b"", "truncated file: 0 bytes")
    format_error(b"X", "not an rvm bytecode file")
    format_error(b"rvmbc\x00" + DATA[6:], "bad magic")


def test_unsupported_version():
    msg = format_error(reseal(DATA, version=3), "unsupported .rbc format version 3",
                       "reads versions 1, 2")
    assert "0x" not in msg
    format_error(reseal(DATA, version=0), "version 0")
    format_error(DATA[:6] + b"\xff\xff", "unsupported .rbc format version 65535")


def test_unsupported_flags():
    format_error(reseal(DATA, flags=1), "unsupported flags 0x0001")


def test_truncation_at_every_offset():
    for data in (SMALL, DATA):
        for cut in range(len(data)):
            with pytest.raises(FormatError) as ei:
                rbc.load_bytes(data[:cut])
            assert "truncated" in str(ei.value), (cut, str(ei.value))


def test_trailing_bytes():
    format_error(DATA + b"\x00", "size fields do not match", "1 extra bytes")


def test_every_single_bit_flip_is_detected():
    data = bytearray(SMALL)
    for i in range(len(data)):
        for bit in range(8):
            data[i] ^= 1 << bit
            with pytest.raises(FormatError):
                rbc.load_bytes(bytes(data))
            data[i] ^= 1 << bit
    rbc.load_bytes(bytes(data))          # the loop restored the file


def test_bit_flips_in_the_body_are_checksum_errors():
    data = bytearray(DATA)
    for i in range(26, len(data) - 4, 7):
        data[i] ^= 0x10
        format_error(bytes(data), "checksum mismatch")
        data[i] ^= 0x10


def test_huge_declared_sizes_are_rejected_without_allocating():
    for ml, dl in ((1 << 63, 0), (0, (1 << 64) - 1), ((1 << 64) - 1, (1 << 64) - 1),
                   (10 ** 12, 10 ** 12)):
        data = struct.pack("<6sHHQQ", b"RVMBC\x00", 2, 0, ml, dl) + b"\x00" * 8
        format_error(data, "truncated file or wrong size fields", f"declares {ml} bytes")


def test_huge_array_shape_in_metadata_is_rejected():
    meta = meta_of(SMALL)
    meta["arrays"]["code"]["shape"] = [10 ** 15, 6]
    meta["arrays"]["code"]["nbytes"] = 10 ** 15 * 48
    format_error(reseal(SMALL, meta), "arrays: the arrays take 48000000000000000 bytes but "
                                      "the data block has 144")


# ---- metadata problems (files with a valid checksum) --------------------------------------
def test_metadata_not_json():
    format_error(reseal(SMALL, meta_bytes=b"{not json"), "malformed metadata",
                 "not valid UTF-8 JSON")
    format_error(reseal(SMALL, meta_bytes=b"\xff\xfe{}"), "not valid UTF-8 JSON")
    format_error(reseal(SMALL, meta_bytes=b""), "malformed metadata")


def test_metadata_deep_nesting():
    format_error(reseal(SMALL, meta_bytes=b"[" * 100000 + b"]" * 100000), "malformed metadata")


def test_metadata_huge_number():
    meta = json.dumps(meta_of(SMALL)).replace('"main": 0', '"main": ' + "9" * 5000)
    format_error(reseal(SMALL, meta_bytes=meta.encode()), "malformed metadata")


def test_metadata_not_an_object():
    format_error(reseal(SMALL, [1, 2]), "metadata: expected an object")


def test_metadata_missing_and_unknown_keys():
    meta = meta_of(SMALL)
    del meta["functions"]
    format_error(reseal(SMALL, meta), "metadata: missing key(s) functions")
    meta = meta_of(SMALL)
    meta["extra"] = 1
    format_error(reseal(SMALL, meta), "metadata: unknown key(s) 'extra'")
    meta = meta_of(SMALL)
    del meta["functions"][0]["frame_size"]
    format_error(reseal(SMALL, meta), "functions[0]: missing key(s) frame_size")


def test_metadata_duplicate_key():
    text = json.dumps(meta_of(SMALL))
    text = text.replace('"main": 0', '"main": 0, "main": 0')
    format_error(reseal(SMALL, meta_bytes=text.encode()), "duplicate key 'main'")


@pytest.mark.parametrize("path,value,fragment", [
    (("main",), True, "main: expected an integer"),
    (("main",), 0.0, "main: expected an integer"),
    (("main",), "0", "main: expected an integer"),
    (("fraction_bits",), 63, "fraction_bits: expected an integer in 0..62"),
    (("functions", 0, "name"), 5, "functions[0].name: expected a string"),
    (("functions", 0, "begin"), -1, "functions[0].begin: expected an integer in 0.."),
    (("functions", 0, "params"), {}, "functions[0].params: expected a list"),
    (("files",), ["a", 3], "files[1]: expected a string"),
    (("labels",), [[1]], "labels[0]: expected [pc, name]"),
    (("labels",), [[1, "a"], [1, "b"]], "labels[1]: a second label at pc 1"),
    (("xtab",), [[1, 2]], "xtab[0]: expected [base, length, index]"),
    (("xtab",), [[1, 2, 1 << 63]], "xtab[0][2]: expected an integer"),
    (("isa_opcodes",), 100000, "instruction set of 100000 opcodes"),
    (("arrays", "code", "dtype"), ">i8", "arrays.code.dtype: expected '<i8'"),
    (("arrays", "code", "shape"), [3], "arrays.code.shape: expected [rows, 6]"),
    (("arrays", "code", "shape"), [3, 5], "arrays.code.shape[1]: expected an integer in 6..6"),
    (("arrays", "code", "nbytes"), 143, "nbytes 143 does not match shape"),
    (("arrays", "code", "offset"), 8, "arrays.code.offset: expected 0"),
    (("arrays",), {}, "arrays: missing key(s) code"),
    (("arrays",), {"code": None, "more": 1}, "arrays: unknown key(s) 'more'"),
])
def test_metadata_wrong_types(path, value, fragment):
    meta = meta_of(SMALL)
    node = meta
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    format_error(reseal(SMALL, meta), "malformed metadata", fragment)


def test_metadata_wrong_types_in_full_program():
    for mutate, fragment in [
        (lambda m: m["globals"][0].__setitem__("type", "complex"), "globals[0].type: expected "
                                                                   "a type name"),
        (lambda m: m["globals"][1].__setitem__("default", [1, "2"]), "globals[1].default[1]"),
        (lambda m: m["consts"][0].__setitem__("values", [1 << 64]), "consts[0].values[0]"),
        (lambda m: m["callsites"][0]["args"].__setitem__(0, [1, 2, 3]),
         "callsites[0].args[0]: expected [word, length or null]"),
        (lambda m: m["functions"][0]["params"][0].__setitem__("written", 1),
         "functions[0].params[0].written: expected true or false"),
        (lambda m: m["functions"][0]["locals"][0].__setitem__("length", -3),
         "functions[0].locals[0].length"),
        (lambda m: m["traces"][0].__setitem__("message", None), "traces[0].message"),
        (lambda m: m["arrays"]["lines"].__setitem__("shape", [17, 3]), "arrays.lines"),
    ]:
        meta = meta_of(DATA)
        mutate(meta)
        format_error(reseal(DATA, meta), "malformed metadata", fragment)


def test_lines_rows_must_match_code():
    meta = meta_of(DATA)
    meta["arrays"]["lines"]["shape"] = [17, 3]
    meta["arrays"]["lines"]["nbytes"] = 17 * 12
    ml = struct.unpack_from("<Q", DATA, 10)[0]
    data = reseal(DATA, meta, arrays=DATA[26 + ml:-4 - 12])
    format_error(data, "arrays.lines: 17 rows for 18 instructions")


def test_arrays_must_fill_the_data_block():
    format_error(reseal(SMALL, arrays=b"\x00" * 152), "the arrays take 144 bytes but the data "
                                                      "block has 152")


# ---- a well-formed file whose program is invalid ------------------------------------------
def test_invalid_program_in_a_well_formed_file():
    p = program()
    p.code[4, 1] = G(99)          # outside static memory
    data = rbc.dump(p)            # dump does not verify
    with pytest.raises(InvalidBytecode) as ei:
        rbc.load_bytes(data, name="bad.rbc")
    assert not isinstance(ei.value, FormatError)
    assert str(ei.value).startswith("bad.rbc: program failed verification")
    assert any("pc 4 (addi.f)" in s and "G address 99" in s for s in ei.value.problems)


def test_write_then_read_invalid_program(tmp_path):
    p = program()
    p.main = 0                    # main with parameters
    rbc.write(p, tmp_path / "x.rbc")
    with pytest.raises(InvalidBytecode, match="has parameters"):
        rbc.read(tmp_path / "x.rbc")


# ---- garbage --------------------------------------------------------------------------------
def _loads_or_clean_error(data: bytes) -> None:
    try:
        rbc.load_bytes(data)
    except InvalidBytecode as e:
        assert str(e)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_garbage_bytes(data):
    _loads_or_clean_error(data)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_garbage_after_magic_and_version(tail):
    with pytest.raises(FormatError):
        rbc.load_bytes(b"RVMBC\x00\x01\x00" + tail)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.binary(max_size=200))
def test_garbage_with_valid_header_and_checksum(meta, arrays):
    _loads_or_clean_error(reseal(SMALL, meta_bytes=meta, arrays=arrays))


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) |
                     st.floats(allow_nan=False) | st.text(max_size=4),
                     lambda ch: st.lists(ch, max_size=3) |
                     st.dictionaries(st.text(max_size=3), ch, max_size=3), max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


_META = meta_of(DATA)
_META_PATHS = [p for p in _paths(_META) if p]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_META_PATHS), _JSON)
def test_fuzz_metadata_values(path, value):
    """Any value anywhere in the metadata: a Program, FormatError or InvalidBytecode."""
    meta = json.loads(json.dumps(_META))
    node = meta
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    _loads_or_clean_error(reseal(DATA, meta))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 18 * 6 - 1), st.integers(-(1 << 63), (1 << 63) - 1)),
                min_size=1, max_size=4))
def test_fuzz_code_words_in_file(changes):
    ml = struct.unpack_from("<Q", DATA, 10)[0]
    arrays = bytearray(DATA[26 + ml:-4])
    for i, v in changes:
        struct.pack_into("<q", arrays, 8 * i, v)
    _loads_or_clean_error(reseal(DATA, arrays=bytes(arrays)))


def test_version_1_files_still_load_and_may_not_use_version_2_keys():
    """A version 1 file (no stacks, no trace names) reads as before; the keys that version 2
    added are refused in it (a version 1 writer never wrote them)."""
    v1 = reseal(DATA, version=1)
    assert_same(program(), rbc.load_bytes(v1))
    meta = meta_of(DATA)
    meta["globals"][0]["stack"] = True
    format_error(reseal(DATA, meta=meta, version=1), "unknown key(s) 'stack'")


def test_version_2_keys_round_trip():
    """Stacks, trace value names, whole-array operands and output styles survive a file."""
    from assembler import assemble
    p = assemble("""
inout s: stack[4] = [3, 4]
inout a: int[2]
inout t: int = 5
func main() {
    local u: int = t * 2
    push u, s
    show s, a, t + 1
    printf "t is %d", t
    pop u, s
    delocal u = t * 2
}
""")
    q = rbc.load_bytes(rbc.dump(p))
    assert q.globals == p.globals and q.globals[0].stack
    assert q.traces == p.traces
    assert {t.style for t in q.traces} >= {"show", "printf"}
    assert any(t.lengths for t in q.traces) and any(t.names for t in q.traces)
    assert np.array_equal(q.code, p.code)


# ---- every file the loader accepts disassembles (issue 19) ------------------------------------
def _with(p: Program, **changes) -> Program:
    return Program(**{**{k: getattr(p, k) for k in ("fraction_bits", "code", "globals", "consts",
                                                    "functions", "main", "xtab", "callsites",
                                                    "traces", "lines", "files", "labels")},
                      **changes})


def _main_only(*rows, globals_=(), frame_size=0, locals_=(), **more) -> Program:
    code = np.array([ins("begin", 0), *rows, ins("end", 0)], dtype=np.int64)
    return Program(0, code, list(globals_), [],
                   [Function("main", 0, len(code) - 1, [], list(locals_), frame_size)], 0, **more)


def _no_rasm_form(p: Program, *fragments) -> str:
    """A file of `p` is refused at load, naming what has no .rasm form."""
    with pytest.raises(InvalidBytecode) as ei:
        rbc.load_bytes(rbc.dump(p), name="t.rbc")
    assert not isinstance(ei.value, FormatError)
    msg = str(ei.value)
    assert msg.startswith("t.rbc: the program has no .rasm form"), msg
    for f in fragments:
        assert f in msg, msg
    return msg


def test_huge_frame_disassembles_in_time_and_memory_of_the_file():
    """A 2**32-cell frame (the verifier's limit) in a file of a few hundred bytes: one `var`
    line, at once (it used to take 18 s and 5.5 GB per 2**28 cells, then a MemoryError)."""
    import time

    from assembler import assemble, disassemble
    from rvm.verify import MAX_CELLS
    p = _main_only(ins("inc.i", L(5)), ins("dec.i", L(MAX_CELLS - 1)), frame_size=MAX_CELLS,
                   locals_=[Local("t", INT, 5, 3), Local("u", INT, MAX_CELLS - 1, None)])
    data = rbc.dump(p)
    assert len(data) < 1000
    t0 = time.perf_counter()
    text = disassemble(rbc.load_bytes(data))
    assert time.perf_counter() - t0 < 1.0
    assert len(text) < 500 and text.count("var ") == 4, text
    q = assemble(text)
    assert np.array_equal(q.code, p.code) and q.functions[0].frame_size == MAX_CELLS


def test_huge_global_array_disassembles_in_time_and_memory_of_the_file():
    import time

    from assembler import disassemble
    p = _main_only(ins("inc.i", G((1 << 31) + 1)), globals_=[Global("a", INT, 0, 1 << 32, INOUT)])
    t0 = time.perf_counter()
    text = disassemble(rbc.load_bytes(rbc.dump(p)))
    assert time.perf_counter() - t0 < 1.0
    assert "inout  a: int[4294967296]" in text and "inc a[2147483649]" in text


def test_many_labels_of_one_name_disassemble_in_linear_time():
    """Names are made unique without retrying every suffix taken before (that was quadratic)."""
    import time

    from assembler import assemble, disassemble
    n = 4000
    p = _main_only(*[ins("nop")] * n, labels={pc: "x" for pc in range(1, n + 1)})
    t0 = time.perf_counter()
    text = disassemble(rbc.load_bytes(rbc.dump(p)))
    assert time.perf_counter() - t0 < 2.0
    assert f"x_{n - 1}: nop" in text
    assert np.array_equal(assemble(text).code, p.code)


def test_assert_without_a_condition_is_refused_at_load():
    _no_rasm_form(_main_only(ins("assert", ALWAYS, 0, 0, 0)),
                  "pc 1: an `assert` without a condition")


def test_comparison_without_a_condition_is_refused_at_load():
    """`y ^= a < b` (xorcmp) with the condition `always` (found by fuzzing: a KeyError)."""
    _no_rasm_form(_main_only(ins("xorcmp.ii", G(0), ALWAYS, 0, G(0)),
                             globals_=[Global("y", INT, 0, None, INOUT)]),
                  "pc 1: a `xorcmp` without a condition")


@pytest.mark.parametrize("role", [OUTPUT, "global"])
def test_start_value_of_an_output_or_global_is_refused_at_load(role):
    """An output or global starts at zero (found by fuzzing: the text did not assemble); a
    start value of zeros is left out of the text."""
    from assembler import assemble, disassemble
    _no_rasm_form(_main_only(ins("nop"), globals_=[Global("y", INT, 0, 2, role, [0, 3])]),
                  f"{role} 'y': a start value")
    p = _main_only(ins("nop"), globals_=[Global("y", INT, 0, 2, role, [0, 0])])
    text = disassemble(rbc.load_bytes(rbc.dump(p)))
    assert f"{role:<6} y: int[2]\n" in text
    assemble(text)


def test_frame_cell_in_no_local_is_refused_at_load():
    """A frame cell no local declares has no type in .rasm (found by fuzzing: `pad[0]` is int)."""
    _no_rasm_form(_main_only(ins("neg.f", L(1)), frame_size=2, locals_=[Local("t", INT, 0, None)]),
                  "pc 1: frame cell 1 of 'main' is in no declared local")


@pytest.mark.parametrize("args, fragment", [
    ([Arg(G(0)), Arg(G(0))], "call arguments 0 and 1 are the same cell"),
    ([Arg(G(1), 2), Arg(G(2))], "call arguments 0 and 1 are the same cell"),
    ([Arg(G(0)), Arg(X(0))], "call argument 0 is the index of another"),
])
def test_aliased_call_arguments_are_refused_at_load(args, fragment):
    """Two arguments that are one cell, or one the index of the other, when the callee writes
    one (found by fuzzing: E005 on the text)."""
    code = np.array([ins("begin", 0), ins("inc.i", P(0)), ins("end", 0),
                     ins("begin", 1), ins("call", 0), ins("end", 1)], dtype=np.int64)
    second = Param("b", INT, args[1].length is not None, False)
    first = Param("a", INT, args[0].length is not None, True)
    if first.is_array:
        code[1] = ins("inc.i", X(1))
    p = Program(0, code, [Global("i", INT, 0, None, INOUT), Global("w", INT, 1, 2, INOUT)], [],
                [Function("f", 0, 2, [first, second], [], 0), Function("main", 3, 5, [], [], 0)],
                1, xtab=[XEntry(G(1), 2, G(0)), XEntry(P(0), -1, G(0))],
                callsites=[CallSite(0, args)])
    _no_rasm_form(p, fragment)


@pytest.mark.parametrize("word, length", [(G(1), 2), (G(0), 2), (G(4), 1)])
def test_array_argument_that_is_not_a_whole_array_is_refused_at_load(word, length):
    """Part of an array, an array of another length, a scalar as an array: .rasm has no form."""
    code = np.array([ins("begin", 0), ins("nop"), ins("end", 0),
                     ins("begin", 1), ins("call", 0), ins("end", 1)], dtype=np.int64)
    p = Program(0, code, [Global("w", INT, 0, 4, INOUT), Global("s", INT, 4, None, INOUT)], [],
                [Function("h", 0, 2, [Param("v", INT, True, False)], [], 0),
                 Function("main", 3, 5, [], [], 0)], 1,
                callsites=[CallSite(0, [Arg(word, length)])])
    _no_rasm_form(p, "pc 4: call argument 0", f"[{word >> 3}, {(word >> 3) + length})",
                  "not a whole declared array")


def test_traced_part_of_an_array_is_refused_at_load():
    p = _main_only(ins("trace", 0), globals_=[Global("w", INT, 0, 4, INOUT)],
                   traces=[Trace("", [G(1)], None, [3], "show")])
    _no_rasm_form(p, "pc 1: traced array 0 is cells [1, 4) of static memory")


def test_indexed_part_of_a_local_array_is_refused_at_load():
    p = _main_only(ins("inc.i", X(0)), frame_size=5,
                   locals_=[Local("t", INT, 0, 4), Local("i", INT, 4, None)],
                   xtab=[XEntry(L(1), 3, L(4))])
    _no_rasm_form(p, "indexed operand xtab[0]", "the frame of 'main'")


@pytest.mark.parametrize("row", [ins("add.i", G(0), G(0)), ins("swap.i", G(1), G(1)),
                                 ins("add.i", G(2), X(0))])
def test_source_that_is_the_target_is_refused_at_load(row):
    p = _main_only(row, globals_=[Global("a", INT, 0, None, INOUT), Global("b", INT, 1, None, INOUT),
                                  Global("i", INT, 2, None, INOUT), Global("w", INT, 3, 2, INOUT)],
                   xtab=[XEntry(G(3), 2, G(2))])
    p.code[1] = row
    _no_rasm_form(p, "is its target")


def test_global_array_of_no_cells_is_refused_at_load():
    _no_rasm_form(_main_only(ins("nop"), globals_=[Global("e", INT, 0, 0, INOUT)]),
                  "global 'e': an array of 0 cells")


def test_local_array_of_no_cells_disassembles_without_it():
    from assembler import assemble, disassemble
    p = _main_only(ins("inc.i", L(0)), frame_size=1,
                   locals_=[Local("e", INT, 0, 0), Local("t", INT, 0, None)])
    text = disassemble(rbc.load_bytes(rbc.dump(p)))
    assert "var e" not in text
    assert np.array_equal(assemble(text).code, p.code)


def test_stack_with_values_above_its_items_is_refused_at_load():
    p = _main_only(ins("nop"), globals_=[Global("s", INT, 0, 4, INOUT, [1, 7, 0, 5], True)])
    _no_rasm_form(p, "stack 's': its start value has nonzero cells above its 1 items")


def test_janus_programs_round_trip():
    """An assert message of the Janus front end has operands and an empty list of names (the
    loader refused it: `0 names for 2 operands`); found by fuzzing."""
    from pathlib import Path

    from assembler import AssemblyError, assemble_janus
    root = Path(__file__).resolve().parent
    done = 0
    for path in sorted((root / "janus").glob("**/*.ja")):
        try:
            p = assemble_janus(path.read_text(), str(path))
        except AssemblyError:
            continue
        assert_same(p, rbc.load_bytes(rbc.dump(p)))
        done += 1
    assert done >= 20


def test_parameter_array_of_no_cells_is_refused_at_load():
    code = np.array([ins("begin", 0), ins("nop"), ins("end", 0),
                     ins("begin", 1), ins("nop"), ins("end", 1)], dtype=np.int64)
    p = Program(0, code, [], [], [Function("f", 0, 2, [Param("r", INT, True, False, 0)], [], 0),
                                  Function("main", 3, 5, [], [], 0)], 1)
    _no_rasm_form(p, "function 'f': parameter 'r' is an array of 0 cells")


def test_parameter_array_passed_on_to_a_parameter_of_another_length_is_refused_at_load():
    """`f(x: int[8]) { call g(x) }` with `g(y: int[15])` (found by fuzzing: E004 on the text)."""
    code = np.array([ins("begin", 0), ins("nop"), ins("end", 0),
                     ins("begin", 1), ins("call", 0), ins("end", 1),
                     ins("begin", 2), ins("nop"), ins("end", 2)], dtype=np.int64)
    p = Program(0, code, [], [],
                [Function("g", 0, 2, [Param("y", INT, True, False, 15)], [], 0),
                 Function("f", 3, 5, [Param("x", INT, True, False, 8)], [], 0),
                 Function("main", 6, 8, [], [], 0)], 2,
                callsites=[CallSite(0, [Arg(P(0), -1)])])
    _no_rasm_form(p, "pc 4: call argument 0 is an array of 8 cells for a parameter of 15")


def _callee_and_main(callee_params, callee_rows, args, globals_=(), xtab=()) -> Program:
    code = np.array([ins("begin", 0), *callee_rows, ins("end", 0),
                     ins("begin", 1), ins("call", 0), ins("end", 1)], dtype=np.int64)
    n = len(callee_rows)
    return Program(0, code, list(globals_), [],
                   [Function("f", 0, n + 1, callee_params, [], 0),
                    Function("main", n + 2, n + 4, [], [], 0)], 1, xtab=list(xtab),
                   callsites=[CallSite(0, args)])


def test_array_for_a_stack_parameter_is_refused_at_load():
    """A stack parameter takes a stack, an array parameter an array (found by fuzzing)."""
    p = _callee_and_main([Param("s", INT, True, False, None, True)], [ins("nop")],
                         [Arg(G(0), 4)], [Global("w", INT, 0, 4, INOUT)])
    _no_rasm_form(p, "call argument 0 is no stack for a parameter that is one")


def test_index_by_a_declared_length_out_of_bounds_is_refused_at_load():
    """`v[len(v)]` where v is `T[4]`: .rasm reads len(v) as 4, out of bounds (found by
    fuzzing)."""
    p = _callee_and_main([Param("v", INT, True, True, 4)], [ins("inc.i", X(0))],
                         [Arg(G(0), 4)], [Global("w", INT, 0, 4, INOUT)],
                         [XEntry(P(0), -1, N(0))])
    _no_rasm_form(p, "indexes an array of 4 cells by the length 4")
