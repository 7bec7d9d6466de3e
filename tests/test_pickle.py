"""Pickling by value (rvm/interop/pickling.py, Program's methods in isa/program.py): round
trips through pickle and cloudpickle, into a fresh process; versioned; an incompatible pickle
is a clear error."""
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rvm
from assembler import rbc
from rvm.interop import IncompatiblePickle

cloudpickle = pytest.importorskip("cloudpickle", reason="cloudpickle is not installed "
                                  "(pip install -e '.[interop]')")

ROOT = Path(__file__).resolve().parent.parent
BESSEL = ROOT / "programs" / "besselj_rec.rasm"
DUMPERS = {"pickle": pickle.dumps, "cloudpickle": cloudpickle.dumps}


def fresh(blob: bytes, code: str, tmp_path) -> str:
    """Unpickle `blob` as `obj` in a new interpreter, run `code`, return what it prints."""
    path = tmp_path / "obj.pkl"
    path.write_bytes(blob)
    script = "import pickle, sys\nobj = pickle.loads(open(sys.argv[1], 'rb').read())\n" + \
        textwrap.dedent(code)
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                         text=True, cwd=ROOT, env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture(scope="module")
def bessel():
    return rvm.assemble(BESSEL)


def test_program_round_trip(bessel):
    back = pickle.loads(pickle.dumps(bessel))
    assert rbc.dump(back) == rbc.dump(bessel)
    assert back.costs == bessel.costs and back.files == bessel.files
    assert rvm.run(back, {"z": 2.0}).outputs == rvm.run(bessel, {"z": 2.0}).outputs


def test_program_repr_is_one_line(bessel):
    text = repr(bessel)
    assert "\n" not in text and len(text) < 200
    assert text.startswith("Program(") and "73 instructions" in text and "fraction_bits=" in text


@pytest.mark.parametrize("how", DUMPERS)
def test_program_in_fresh_process(bessel, how, tmp_path):
    printed = fresh(DUMPERS[how](bessel), """
        import rvm
        print(repr(rvm.run(obj, {"z": 2.5}).outputs["out"]))
    """, tmp_path)
    assert printed == repr(rvm.run(bessel, {"z": 2.5}).outputs["out"])


@pytest.mark.parametrize("how", DUMPERS)
@pytest.mark.parametrize("native", [False, True])
def test_gradfn_in_fresh_process(bessel, how, native, tmp_path):
    """A GradFn travels as its program and arguments; one that ran native code runs native
    code there too (from the cache the test run shares, or built), bit for bit."""
    f = rvm.grad_fn(bessel, of="out", wrt=["z"], native=native)
    want = [f({"z": z})["z"] for z in (0.5, 1.5, 3.0)]
    printed = fresh(DUMPERS[how](f), """
        print(obj.native.split(" ")[0])
        for z in (0.5, 1.5, 3.0):
            print(obj({"z": z})["z"].hex())
    """, tmp_path)
    lines = printed.splitlines()
    assert lines[0] == ("native" if native else "off")
    assert lines[1:] == [w.hex() for w in want]


def test_gradfn_after_calls_keeps_working(bessel):
    f = rvm.grad_fn(bessel, of="out", wrt="z", native=False)
    g = f({"z": 1.0})
    f2 = pickle.loads(pickle.dumps(f))
    assert f2({"z": 1.0})["z"] == g["z"] and f2.of == "out" and f2.wrt == "z"
    assert f2.last is not None and f2.last.value == f.last.value


@pytest.mark.parametrize("how", DUMPERS)
def test_derivatives_and_result_in_fresh_process(bessel, how, tmp_path):
    d = rvm.derivatives(bessel, of="out", wrt="z", hessian=True)
    res = rvm.run(bessel, {"z": 1.25})
    printed = fresh(DUMPERS[how]((d, res)), """
        d, res = obj
        print(d.gradient["z"].hex(), float(d.hessian[0, 0]).hex(), d.value.hex(), d.steps)
        print(d.outputs["out"].hex(), d.wrt_cells, res.machine)
        print(res.outputs["out"].hex(), res.stats["steps"], res.garbage)
    """, tmp_path)
    assert printed.splitlines() == [
        f"{d.gradient['z'].hex()} {float(d.hessian[0, 0]).hex()} {d.value.hex()} {d.steps}",
        f"{d.outputs['out'].hex()} ['z'] None",
        f"{res.outputs['out'].hex()} {res.stats['steps']} []"]


def test_derivatives_twice(bessel):
    d = rvm.derivatives(bessel, of="out", wrt="z")
    d2 = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(d))))
    assert d2.outputs == d.outputs and d2.gradient == d.gradient and d2.drift == d.drift


def _tamper(obj, old: bytes, new: bytes) -> bytes:
    blob = pickle.dumps(obj, protocol=4)
    assert blob.count(old) >= 1
    return blob.replace(old, new, 1)


def test_other_version_is_a_clear_error(bessel):
    f = rvm.grad_fn(bessel, of="out", wrt="z", native=False)
    for obj in (bessel, f, rvm.derivatives(bessel, of="out", wrt="z"), rvm.run(bessel)):
        # the outer object's version: the int 1 right after the key's first occurrence
        bad = _tamper(obj, b"\x8c\nrvm_pickle\x94K\x01", b"\x8c\nrvm_pickle\x94K\x07")
        with pytest.raises(IncompatiblePickle, match="version 7.*this rvm reads version 1"):
            pickle.loads(bad)


def test_other_instruction_table_is_a_clear_error(bessel):
    from isa.build import table_hash
    h = table_hash().encode()
    bad = _tamper(bessel, h, b"0" * len(h))
    with pytest.raises(pickle.UnpicklingError, match="another instruction table"):
        pickle.loads(bad)
    f = rvm.grad_fn(bessel, of="out", wrt="z", native=False)
    with pytest.raises(IncompatiblePickle, match="another instruction table"):
        pickle.loads(_tamper(f, h, b"0" * len(h)))


def test_unversioned_state_is_a_clear_error(bessel):
    p = object.__new__(type(bessel))
    with pytest.raises(IncompatiblePickle, match="not a versioned rvm Program pickle"):
        p.__setstate__(dict(bessel.__dict__))


def test_traps_pickle():
    """A trap travels too (rvm.parallel returns one per failing input)."""
    prog = rvm.assemble("input x: float\noutput y: float\nfunc main() {\n  y += 1.0 / x\n}\n")
    with pytest.raises(rvm.Trap) as info:
        rvm.run(prog, {})
    from rvm.interop.pickling import portable
    back = pickle.loads(cloudpickle.dumps(portable(info.value)))
    assert type(back) is type(info.value) and str(back) == str(info.value)
    assert back.pc == info.value.pc and back.location == info.value.location
    assert back.step == info.value.step and back.values == info.value.values
