"""The `.rbc` file format: a Program stored as bytes (spec: docs/rbc.md).

    header    magic b"RVMBC\\0", u16 version, u16 flags, u64 metadata length, u64 data length
    metadata  UTF-8 JSON object (every Program field but the arrays, plus the arrays' layout)
    data      raw little-endian arrays: code int64 (n, 6), then lines int32 (n, 3) if present
    trailer   u32 CRC-32 (zlib.crc32) of every byte before it

`load_bytes` never trusts the file: sizes are checked against the file's length before anything
is read, the checksum before the metadata is parsed, every metadata value by type before a
Program is built, and the Program is verified (rvm.verify) before it is returned.  Every problem
with the file raises `FormatError` (a subclass of `InvalidBytecode`); a well-formed file whose
program fails verification raises `InvalidBytecode` with the verifier's problems, and so does a
program the .rasm language cannot express (`disasm.rasm_problems`), so that every file this
loader accepts disassembles, in time and memory proportional to the file.
"""
from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np

from isa.errors import FormatError, InvalidBytecode
from isa.program import Arg, CallSite, Const, Function, Global, Local, Param, Program, Trace, XEntry
from isa.table import OPS, ROW_WIDTH
from isa.types import INT64_MAX, INT64_MIN, TYPE_BY_NAME, TYPE_NAMES, NumType
from isa.verify import verify

from .disasm import rasm_problems

__all__ = ["dump", "load_bytes", "write", "read", "MAGIC", "FORMAT_VERSION",
           "SUPPORTED_VERSIONS"]

MAGIC = b"RVMBC\x00"
FORMAT_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)     # 2 adds stacks and the names/lengths/style of traces
_HEADER = struct.Struct("<6sHHQQ")       # magic, version, flags, metadata length, data length
_TRAILER = struct.Struct("<I")           # CRC-32
HEADER_SIZE = _HEADER.size               # 26
TRAILER_SIZE = _TRAILER.size             # 4

_CODE_DTYPE = "<i8"
_LINES_DTYPE = "<i4"
_META_KEYS = ("fraction_bits", "isa_opcodes", "main", "globals", "consts", "functions", "xtab",
              "callsites", "traces", "files", "labels", "arrays")


# ---- writing ---------------------------------------------------------------------------------
def _tn(t) -> str:
    return TYPE_NAMES[NumType(int(t))]


def _ints(xs) -> list[int] | None:
    return None if xs is None else [int(x) for x in xs]


def _opt_int(x) -> int | None:
    return None if x is None else int(x)


def _trace_meta(t: Trace) -> dict:
    out = {"message": t.message, "operands": _ints(t.operands)}
    if t.names is not None:
        out["names"] = list(t.names)
    if t.lengths is not None:
        out["lengths"] = [_opt_int(n) for n in t.lengths]
    if t.style != "trace":
        out["style"] = t.style
    return out


def dump(program: Program) -> bytes:
    """The .rbc bytes of `program` (deterministic: equal programs give equal bytes)."""
    p = program
    code = np.ascontiguousarray(p.code, dtype=_CODE_DTYPE).reshape(-1, ROW_WIDTH)
    blobs = [code.tobytes()]
    arrays = {"code": {"dtype": _CODE_DTYPE, "shape": [len(code), ROW_WIDTH], "offset": 0,
                       "nbytes": code.nbytes}}
    if p.lines is not None:
        lines = np.ascontiguousarray(p.lines, dtype=_LINES_DTYPE).reshape(-1, 3)
        arrays["lines"] = {"dtype": _LINES_DTYPE, "shape": [len(lines), 3],
                           "offset": code.nbytes, "nbytes": lines.nbytes}
        blobs.append(lines.tobytes())
    meta = {
        "fraction_bits": int(p.fraction_bits),
        "isa_opcodes": len(OPS),
        "main": int(p.main),
        "globals": [{"name": g.name, "type": _tn(g.type), "addr": int(g.addr),
                     "length": _opt_int(g.length), "role": g.role, "default": _ints(g.default),
                     **({"stack": True} if g.stack else {})}
                    for g in p.globals],
        "consts": [{"name": c.name, "type": _tn(c.type), "addr": int(c.addr),
                    "length": _opt_int(c.length), "values": _ints(c.values)}
                   for c in p.consts],
        "functions": [{"name": f.name, "begin": int(f.begin), "end": int(f.end),
                       "params": [{"name": q.name, "type": _tn(q.type),
                                   "is_array": bool(q.is_array), "written": bool(q.written),
                                   "length": _opt_int(q.length),
                                   **({"stack": True} if q.stack else {})}
                                  for q in f.params],
                       "locals": [{"name": v.name, "type": _tn(v.type), "offset": int(v.offset),
                                   "length": _opt_int(v.length),
                                   **({"stack": True} if v.stack else {})} for v in f.locals],
                       "frame_size": int(f.frame_size)}
                      for f in p.functions],
        "xtab": [[int(x.base), int(x.length), int(x.index)] for x in p.xtab],
        "callsites": [{"func": int(c.func), "args": [[int(a.word), _opt_int(a.length)]
                                                     for a in c.args]}
                      for c in p.callsites],
        "traces": [_trace_meta(t) for t in p.traces],
        "files": list(p.files),
        "labels": [[int(pc), name] for pc, name in sorted(p.labels.items())],
        "arrays": arrays,
    }
    mbytes = json.dumps(meta, separators=(",", ":"), ensure_ascii=True,
                        allow_nan=False).encode("ascii")
    data = b"".join(blobs)
    body = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(mbytes), len(data)) + mbytes + data
    return body + _TRAILER.pack(zlib.crc32(body))


def write(program: Program, path: str | os.PathLike) -> None:
    """Write `program` to `path` as .rbc (through a temporary file, then renamed)."""
    data = dump(program)
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---- reading ---------------------------------------------------------------------------------
class _Bad(Exception):
    """A metadata problem (path, message): becomes a FormatError."""


def _fail(path: str, what: str, v) -> None:
    shown = repr(v)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise _Bad(f"{path}: expected {what}, got {shown}")


def _int(v, path, lo=INT64_MIN, hi=INT64_MAX) -> int:
    if type(v) is not int or not lo <= v <= hi:
        _fail(path, f"an integer in {lo}..{hi}", v)
    return v


def _word(v, path) -> int:
    return _int(v, path)


def _opt(conv, v, path, *a):
    return None if v is None else conv(v, path, *a)


def _str(v, path) -> str:
    if type(v) is not str:
        _fail(path, "a string", v)
    return v


def _bool(v, path) -> bool:
    if type(v) is not bool:
        _fail(path, "true or false", v)
    return v


def _list(v, path) -> list:
    if type(v) is not list:
        _fail(path, "a list", v)
    return v


def _words(v, path) -> list[int]:
    return [_word(x, f"{path}[{i}]") for i, x in enumerate(_list(v, path))]


def _type(v, path) -> NumType:
    if type(v) is not str or v not in TYPE_BY_NAME:
        _fail(path, "a type name (" + ", ".join(TYPE_BY_NAME) + ")", v)
    return TYPE_BY_NAME[v]


def _obj(v, path, keys, optional=()) -> dict:
    if type(v) is not dict:
        _fail(path, "an object", v)
    missing = [k for k in keys if k not in v]
    extra = [k for k in v if k not in keys and k not in optional]
    if missing:
        raise _Bad(f"{path}: missing key(s) {', '.join(missing)}")
    if extra:
        raise _Bad(f"{path}: unknown key(s) {', '.join(repr(k)[:40] for k in extra[:5])}")
    return v


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise _Bad(f"duplicate key {k[:40]!r} in an object")
        d[k] = v
    return d


def _array_spec(v, path, dtype, width, offset) -> int:
    """Rows of the array described by v (checked: dtype, shape, offset, nbytes)."""
    a = _obj(v, path, ("dtype", "shape", "offset", "nbytes"))
    if a["dtype"] != dtype:
        _fail(f"{path}.dtype", repr(dtype), a["dtype"])
    shape = _list(a["shape"], f"{path}.shape")
    if len(shape) != 2:
        _fail(f"{path}.shape", f"[rows, {width}]", shape)
    rows = _int(shape[0], f"{path}.shape[0]", 0)
    _int(shape[1], f"{path}.shape[1]", width, width)
    if _int(a["offset"], f"{path}.offset", 0) != offset:
        _fail(f"{path}.offset", f"{offset} (arrays are stored back to back)", a["offset"])
    nbytes = _int(a["nbytes"], f"{path}.nbytes", 0)
    if nbytes != rows * width * np.dtype(dtype).itemsize:
        raise _Bad(f"{path}: nbytes {nbytes} does not match shape {shape} of {dtype}")
    return rows


def _build(meta, data: bytes, version: int = FORMAT_VERSION) -> Program:
    def v2(*keys: str) -> tuple[str, ...]:
        """Keys a version 2 file may have (and a version 1 file may not)."""
        return keys if version >= 2 else ()

    m = _obj(meta, "metadata", _META_KEYS)
    n_ops = _int(m["isa_opcodes"], "isa_opcodes", 0)
    if n_ops > len(OPS):
        raise _Bad(f"the file was written for an instruction set of {n_ops} opcodes; this rvm "
                   f"knows {len(OPS)}")
    arrays = m["arrays"]
    if type(arrays) is not dict:
        _fail("arrays", "an object", arrays)
    _obj(arrays, "arrays", ("code", "lines") if "lines" in arrays else ("code",))
    n = _array_spec(arrays["code"], "arrays.code", _CODE_DTYPE, ROW_WIDTH, 0)
    code_bytes = n * ROW_WIDTH * 8
    total = code_bytes
    lines = None
    if "lines" in arrays:
        nl = _array_spec(arrays["lines"], "arrays.lines", _LINES_DTYPE, 3, code_bytes)
        if nl != n:
            raise _Bad(f"arrays.lines: {nl} rows for {n} instructions")
        total += nl * 12
    if total != len(data):
        raise _Bad(f"arrays: the arrays take {total} bytes but the data block has {len(data)}")
    code = np.frombuffer(data, dtype=_CODE_DTYPE, count=n * ROW_WIDTH, offset=0) \
        .reshape(n, ROW_WIDTH).astype(np.int64)
    if "lines" in arrays:
        lines = np.frombuffer(data, dtype=_LINES_DTYPE, count=n * 3, offset=code_bytes) \
            .reshape(n, 3).astype(np.int32)

    globals_ = []
    for i, g in enumerate(_list(m["globals"], "globals")):
        p = f"globals[{i}]"
        g = _obj(g, p, ("name", "type", "addr", "length", "role", "default"), v2("stack"))
        globals_.append(Global(_str(g["name"], p + ".name"), _type(g["type"], p + ".type"),
                               _int(g["addr"], p + ".addr", 0),
                               _opt(_int, g["length"], p + ".length", 0),
                               _str(g["role"], p + ".role"),
                               _opt(_words, g["default"], p + ".default"),
                               _bool(g.get("stack", False), p + ".stack")))
    consts = []
    for i, c in enumerate(_list(m["consts"], "consts")):
        p = f"consts[{i}]"
        c = _obj(c, p, ("name", "type", "addr", "length", "values"))
        consts.append(Const(_str(c["name"], p + ".name"), _type(c["type"], p + ".type"),
                            _int(c["addr"], p + ".addr", 0),
                            _opt(_int, c["length"], p + ".length", 0),
                            _words(c["values"], p + ".values")))
    functions = []
    for i, f in enumerate(_list(m["functions"], "functions")):
        p = f"functions[{i}]"
        f = _obj(f, p, ("name", "begin", "end", "params", "locals", "frame_size"))
        params = []
        for j, q in enumerate(_list(f["params"], p + ".params")):
            pq = f"{p}.params[{j}]"
            q = _obj(q, pq, ("name", "type", "is_array", "written", "length"), v2("stack"))
            params.append(Param(_str(q["name"], pq + ".name"), _type(q["type"], pq + ".type"),
                                _bool(q["is_array"], pq + ".is_array"),
                                _bool(q["written"], pq + ".written"),
                                _opt(_int, q["length"], pq + ".length", 0),
                                _bool(q.get("stack", False), pq + ".stack")))
        locals_ = []
        for j, v in enumerate(_list(f["locals"], p + ".locals")):
            pv = f"{p}.locals[{j}]"
            v = _obj(v, pv, ("name", "type", "offset", "length"), v2("stack"))
            locals_.append(Local(_str(v["name"], pv + ".name"), _type(v["type"], pv + ".type"),
                                 _int(v["offset"], pv + ".offset", 0),
                                 _opt(_int, v["length"], pv + ".length", 0),
                                 _bool(v.get("stack", False), pv + ".stack")))
        functions.append(Function(_str(f["name"], p + ".name"), _int(f["begin"], p + ".begin", 0),
                                  _int(f["end"], p + ".end", 0), params, locals_,
                                  _int(f["frame_size"], p + ".frame_size", 0)))
    xtab = []
    for i, x in enumerate(_list(m["xtab"], "xtab")):
        x = _words(x, f"xtab[{i}]")
        if len(x) != 3:
            _fail(f"xtab[{i}]", "[base, length, index]", x)
        xtab.append(XEntry(*x))
    callsites = []
    for i, c in enumerate(_list(m["callsites"], "callsites")):
        p = f"callsites[{i}]"
        c = _obj(c, p, ("func", "args"))
        args = []
        for j, a in enumerate(_list(c["args"], p + ".args")):
            a = _list(a, f"{p}.args[{j}]")
            if len(a) != 2:
                _fail(f"{p}.args[{j}]", "[word, length or null]", a)
            args.append(Arg(_word(a[0], f"{p}.args[{j}][0]"),
                            _opt(_int, a[1], f"{p}.args[{j}][1]", -1)))
        callsites.append(CallSite(_int(c["func"], p + ".func", 0), args))
    traces = []
    for i, t in enumerate(_list(m["traces"], "traces")):
        p = f"traces[{i}]"
        t = _obj(t, p, ("message", "operands"), v2("names", "lengths", "style"))
        ops = _words(t["operands"], p + ".operands")
        names = t.get("names")
        if names is not None:
            names = [_str(x, f"{p}.names[{j}]") for j, x in enumerate(_list(names, p + ".names"))]
            if names and len(names) != len(ops):       # none (an assert's own), or one each
                raise _Bad(f"{p}.names: {len(names)} names for {len(ops)} operands")
        lengths = t.get("lengths")
        if lengths is not None:
            lengths = [_opt(_int, x, f"{p}.lengths[{j}]", -1)
                       for j, x in enumerate(_list(lengths, p + ".lengths"))]
            if len(lengths) != len(ops):
                raise _Bad(f"{p}.lengths: {len(lengths)} lengths for {len(ops)} operands")
        style = _str(t.get("style", "trace"), p + ".style")
        if style not in ("trace", "show", "print", "printf"):
            _fail(p + ".style", "trace, show, print or printf", style)
        traces.append(Trace(_str(t["message"], p + ".message"), ops, names, lengths, style))
    files = [_str(s, f"files[{i}]") for i, s in enumerate(_list(m["files"], "files"))]
    labels = {}
    for i, pair in enumerate(_list(m["labels"], "labels")):
        pair = _list(pair, f"labels[{i}]")
        if len(pair) != 2:
            _fail(f"labels[{i}]", "[pc, name]", pair)
        pc = _int(pair[0], f"labels[{i}][0]", 0)
        if pc in labels:
            raise _Bad(f"labels[{i}]: a second label at pc {pc}")
        labels[pc] = _str(pair[1], f"labels[{i}][1]")
    return Program(fraction_bits=_int(m["fraction_bits"], "fraction_bits", 0, 62), code=code,
                   globals=globals_, consts=consts, functions=functions,
                   main=_int(m["main"], "main", 0), xtab=xtab, callsites=callsites,
                   traces=traces, lines=lines, files=files, labels=labels)


def load_bytes(data: bytes, name: str = "<bytes>") -> Program:
    """The Program stored in `data`.  Raises FormatError for a file that is not a well-formed
    .rbc file of a supported version, InvalidBytecode if its program fails verification."""
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise TypeError(f"load_bytes needs bytes, not {type(data).__name__}")
    size = len(data)
    if size < len(MAGIC):
        if MAGIC.startswith(data):
            raise FormatError(f"{name}: truncated file: {size} bytes, shorter than the "
                              f"{HEADER_SIZE}-byte header")
        raise FormatError(f"{name}: not an rvm bytecode file (bad magic {data!r}, "
                          f"expected {MAGIC!r})")
    if data[:len(MAGIC)] != MAGIC:
        raise FormatError(f"{name}: not an rvm bytecode file (bad magic "
                          f"{data[:len(MAGIC)]!r}, expected {MAGIC!r})")
    if size < 8:
        raise FormatError(f"{name}: truncated file: {size} bytes, shorter than the "
                          f"{HEADER_SIZE}-byte header")
    version = struct.unpack_from("<H", data, len(MAGIC))[0]
    if version not in SUPPORTED_VERSIONS:
        raise FormatError(f"{name}: unsupported .rbc format version {version} (this rvm reads "
                          f"version{'s' if len(SUPPORTED_VERSIONS) > 1 else ''} "
                          f"{', '.join(map(str, SUPPORTED_VERSIONS))})")
    if size < HEADER_SIZE + TRAILER_SIZE:
        raise FormatError(f"{name}: truncated file: {size} bytes, shorter than the "
                          f"{HEADER_SIZE}-byte header and {TRAILER_SIZE}-byte checksum")
    _, _, flags, meta_len, data_len = _HEADER.unpack_from(data, 0)
    if flags != 0:
        raise FormatError(f"{name}: unsupported flags 0x{flags:04x} in a version {version} file "
                          f"(must be 0)")
    expected = HEADER_SIZE + meta_len + data_len + TRAILER_SIZE    # Python ints: no overflow
    if size < expected:
        raise FormatError(f"{name}: truncated file or wrong size fields: the header declares "
                          f"{meta_len} bytes of metadata and {data_len} bytes of data "
                          f"({expected} bytes in all) but the file has {size} bytes")
    if size > expected:
        raise FormatError(f"{name}: size fields do not match the file: the header declares "
                          f"{expected} bytes in all but the file has {size} "
                          f"({size - expected} extra bytes)")
    body_end = size - TRAILER_SIZE
    stored = _TRAILER.unpack_from(data, body_end)[0]
    actual = zlib.crc32(memoryview(data)[:body_end])
    if stored != actual:
        raise FormatError(f"{name}: checksum mismatch (stored CRC-32 0x{stored:08x}, computed "
                          f"0x{actual:08x}): the file is corrupted")
    mstart = HEADER_SIZE
    mbytes = data[mstart:mstart + meta_len]
    block = data[mstart + meta_len:body_end]
    try:
        meta = json.loads(mbytes.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except _Bad as e:
        raise FormatError(f"{name}: malformed metadata: {e}") from None
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as e:
        raise FormatError(f"{name}: malformed metadata: not valid UTF-8 JSON "
                          f"({type(e).__name__}: {str(e)[:120]})") from None
    try:
        program = _build(meta, block, version)
    except _Bad as e:
        raise FormatError(f"{name}: malformed metadata: {e}") from None
    except Exception as e:   # anything unforeseen is still the file's fault
        raise FormatError(f"{name}: malformed metadata ({type(e).__name__}: "
                          f"{str(e)[:120]})") from None
    try:
        verify(program)
    except FormatError:
        raise
    except InvalidBytecode as e:
        raise InvalidBytecode(f"{name}: program failed verification",
                              problems=e.problems) from None
    try:
        problems = rasm_problems(program)
    except Exception as e:   # noqa: BLE001 - still the file's fault, never a traceback
        problems = [f"{type(e).__name__}: {str(e)[:120]}"]
    if problems:
        raise InvalidBytecode(f"{name}: the program has no .rasm form (an rvm assembler never "
                              f"writes it)", problems=problems)
    return program


def read(path: str | os.PathLike) -> Program:
    """The Program stored in the .rbc file at `path` (see load_bytes)."""
    with open(path, "rb") as fh:
        data = fh.read()
    return load_bytes(data, name=os.fspath(path))
