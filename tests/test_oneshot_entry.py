"""The public one-shot calls' own entry (issue 16, rvm/_runcall.pxi: oneshot_public): the
repeated call reads its arguments from the vectorcall in any form a user writes them
(by position, by keyword, a fresh `wrt` list) and runs the bound C call; every other call
(another option, a wrong argument) goes through the function's own parsing, with the same
results and the same errors as before."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import rvm
from rvm import oneshot

T2 = "programs/besselj_rec.rasm"


def data(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def interpreted(of, wrt, inputs):
    """The interpreter's Hessian, on a Program of its own (native=False on `prog` would turn
    its machine's native code off until the next call)."""
    return rvm.hessian(rvm.assemble(T2), of=of, wrt=wrt, inputs=inputs, native=False)


@pytest.fixture(scope="module")
def prog():
    p = rvm.assemble(T2)
    rvm.hessian(p, of="out", wrt=["z"], inputs={"z": 3.0}, native=True)
    for _ in range(3):
        rvm.hessian(p, of="out", wrt=["z"], inputs={"z": 3.0})
    assert oneshot.entry(p).hess_call is not None
    return p


def test_every_form_of_the_repeated_hessian_takes_the_c_call(prog):
    wrt = ["z"]
    want = interpreted("out", wrt, {"z": 2.5})
    # the interpreter's Hessian of J_2 at 2.5, which the native passes give bit for bit
    assert want.shape == (1, 1) and want[0, 0] != 0.0
    forms = [
        lambda: rvm.hessian(prog, "out", ["z"], {"z": 2.5}),
        lambda: rvm.hessian(prog, "out", ["z"], inputs={"z": 2.5}),
        lambda: rvm.hessian(prog, "out", wrt=["z"], inputs={"z": 2.5}),
        lambda: rvm.hessian(prog, of="out", wrt=["z"], inputs={"z": 2.5}),
        lambda: rvm.hessian(prog, inputs={"z": 2.5}, wrt=["z"], of="out"),
        lambda: rvm.hessian(program=prog, of="out", wrt=wrt, inputs={"z": 2.5}),
    ]
    for form in forms:
        a = form()
        assert a.tobytes() == want.tobytes()
        at = data(a)
        del a
        b = form()
        # the C call hands back the array the caller dropped (the general path makes one)
        assert data(b) == at and b.tobytes() == want.tobytes()
        del b
    # no inputs: the program's defaults (z = 3.0)
    assert rvm.hessian(prog, "out", ["z"]).tobytes() == \
        interpreted("out", ["z"], {"z": 3.0}).tobytes()


def test_other_forms_run_as_before(prog):
    want = interpreted("out", ["z"], {"z": 2.5})
    # another option, a tuple of names: the general path, the same Hessian
    for got in (rvm.hessian(prog, "out", ("z",), {"z": 2.5}),
                rvm.hessian(prog, "out", "z", {"z": 2.5}),
                rvm.hessian(prog, "out", ["z"], {"z": 2.5}, native=None)):
        assert got.tobytes() == want.tobytes()
    with pytest.raises(TypeError, match="multiple values for keyword argument 'of'"):
        rvm.hessian(prog, "out", ["z"], {"z": 2.5}, of="out")
    with pytest.raises(TypeError, match="positional arguments"):
        rvm.hessian(prog, "out", ["z"], {"z": 2.5}, 7)
    with pytest.raises(TypeError, match="at least 3 positional arguments"):
        rvm.hessian(prog, of="out", inputs={"z": 2.5})
    with pytest.raises(TypeError):
        rvm.hessian()
    with pytest.raises(rvm.ad.engine.NotDifferentiable):
        rvm.hessian(prog, "out", ["nu"], {"z": 2.5})
    # and the C call still serves the next repeated call
    a = rvm.hessian(prog, "out", ["z"], {"z": 2.5})
    at = data(a)
    del a
    assert data(rvm.hessian(prog, "out", ["z"], {"z": 2.5})) == at


def test_run_and_hvp_and_grad_take_their_arguments_in_every_form():
    p = rvm.assemble(T2)
    rvm.run(p, {"z": 2.0})
    oneshot.entry(p).local.slots[("run", ())].machine.compile()
    rvm.run(p, {"z": 2.0})
    m = oneshot.entry(p).run_call.machine
    want = rvm.run(p, {"z": 2.5}, max_steps=10**9).outputs      # (an option: the general path)
    runs = m.core.native_runs
    for res in (rvm.run(p, {"z": 2.5}), rvm.run(p, values={"z": 2.5}),
                rvm.run(program=p, values={"z": 2.5}, reverse=False)):
        assert res.outputs == want
    assert m.core.native_runs == runs + 3
    back = rvm.run(p, res.inputs | res.outputs, reverse=True)
    assert back.inputs["z"] == 2.5 and m.core.native_runs == runs + 4
    with pytest.raises(TypeError, match="positional"):
        rvm.run(p, {"z": 2.5}, True)
    assert rvm.run(p, {"z": 2.5}, reverse=0).outputs == want     # not a bool: as before

    v = {"z": 1.0}
    hv = [rvm.hvp(p, "out", ["z"], v, {"z": 2.5}, native=True)]
    hv += [rvm.hvp(p, "out", ["z"], v, {"z": 2.5}) for _ in range(3)]
    assert oneshot.entry(p).hvp_call is not None
    for got in (rvm.hvp(p, "out", ["z"], v, {"z": 2.5}),
                rvm.hvp(p, of="out", wrt=["z"], v=v, inputs={"z": 2.5}),
                rvm.hvp(p, "out", ["z"], inputs={"z": 2.5}, v=v)):
        assert list(got) == ["z"] and got["z"].tobytes() == hv[0]["z"].tobytes()
    g = [rvm.grad(p, "out", ["z"], {"z": 2.5}, check_ancillas=False) for _ in range(3)]
    for got in (rvm.grad(p, of="out", wrt=["z"], inputs={"z": 2.5}, check_ancillas=False),
                rvm.grad(p, "out", "z", {"z": 2.5}, check_ancillas=False),
                rvm.grad(p, "out", ["z"], {"z": 2.5})):
        assert got == g[0]
    with pytest.raises(TypeError, match="positional"):
        rvm.grad(p, "out", ["z"], {"z": 2.5}, False)


def test_inputs_in_a_mapping_that_is_not_a_dict():
    """An OrderedDict, a defaultdict or a read-only mapping of the inputs gives what the same
    dict gives, first call and repeated (the core's fast pass takes an exact dict; anything
    else goes through the general path, which reads any Mapping), not the core's
    `TypeError: Argument 'inputs' has incorrect type`."""
    import collections
    import types
    p = rvm.assemble(T2)
    want = {"h": rvm.hessian(rvm.assemble(T2), "out", ["z"], {"z": 2.5}).tobytes(),
            "v": rvm.hvp(rvm.assemble(T2), "out", ["z"], {"z": 1.0}, {"z": 2.5})["z"].tobytes(),
            "d": rvm.derivatives(rvm.assemble(T2), "out", ["z"], inputs={"z": 2.5},
                                 hessian=True).hessian.tobytes()}
    for make in (collections.OrderedDict, lambda **kw: collections.defaultdict(float, kw),
                 lambda **kw: types.MappingProxyType(kw)):
        for _ in range(4):
            assert rvm.hessian(p, "out", ["z"], make(z=2.5)).tobytes() == want["h"]
            assert rvm.hvp(p, "out", ["z"], {"z": 1.0}, make(z=2.5))["z"].tobytes() == want["v"]
            assert rvm.derivatives(p, "out", ["z"], inputs=make(z=2.5),
                                   hessian=True).hessian.tobytes() == want["d"]


def test_keywords_by_value_and_misspelled_options(prog):
    """A keyword's name built at run time or given as a str subclass is not the interned
    parameter name: the call goes through the function's own parsing, with the same result;
    a misspelled option is the general path's TypeError, never dropped by the entry."""
    class Name(str):
        pass
    want = interpreted("out", ["z"], {"z": 2.5}).tobytes()
    inputs = "".join(["inp", "uts"])
    assert inputs == "inputs" and inputs is not sys.intern("inputs")
    assert rvm.hessian(prog, "out", ["z"], **{inputs: {"z": 2.5}}).tobytes() == want
    assert rvm.hessian(prog, "out", **{Name("wrt"): ["z"]}, inputs={"z": 2.5}).tobytes() == want
    with pytest.raises(TypeError, match="unexpected keyword argument 'inptus'"):
        rvm.hessian(prog, "out", ["z"], {"z": 2.5}, inptus={"z": 1.0})
    with pytest.raises(TypeError, match="unexpected keyword argument 'revers'"):
        rvm.run(prog, {"z": 2.5}, revers=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tangent'"):
        rvm.jvp(prog, {"z": 2.5}, {"z": 1.0}, tangent={"z": 1.0})
    with pytest.raises(TypeError, match="unexpected keyword argument 'chek'"):
        rvm.grad(prog, "out", ["z"], {"z": 2.5}, check_ancillas=False, chek=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'inptus'"):
        rvm.hvp(prog, "out", ["z"], {"z": 1.0}, {"z": 2.5}, inptus=None)
