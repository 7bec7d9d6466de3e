"""rvm.interop.torch_function: gradcheck and gradgradcheck in float64, a batch dimension,
and the training example."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rvm

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install -e '.[interop]'")

from rvm.interop import torch_function  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MIXED = """
input  a: float[3]
input  w: float
output out: float
func main() {
    for i in 0..3 {
        out += w * sin(a[i]) * a[i]
    }
}
"""


@pytest.fixture(scope="module")
def mixed():
    return rvm.assemble(MIXED)


def t64(x, grad=True):
    return torch.tensor(x, dtype=torch.float64, requires_grad=grad)


def test_value_and_gradient_are_rvms(mixed):
    f = torch_function(mixed, of="out", wrt=["a", "w"])
    a, w = t64([0.3, -1.2, 2.0]), t64(1.7)
    loss = f(a, w)
    d = rvm.derivatives(mixed, of="out", wrt=["a", "w"],
                        inputs={"a": [0.3, -1.2, 2.0], "w": 1.7})
    assert loss.item() == d.value and loss.dtype == torch.float64
    loss.backward()
    assert np.array_equal(a.grad.numpy(), d.gradient["a"]) and w.grad.item() == d.gradient["w"]


def test_gradcheck_and_gradgradcheck(mixed):
    f = torch_function(mixed, of="out", wrt=["a", "w"])
    a, w = t64([0.3, -1.2, 2.0]), t64(1.7)
    assert torch.autograd.gradcheck(f, (a, w))
    assert torch.autograd.gradgradcheck(f, (a, w))


def test_batch_dimension(mixed):
    f = torch_function(mixed, of="out", wrt=["a", "w"])
    a = t64(np.random.default_rng(0).normal(size=(4, 3)))
    w = t64([0.5, 1.0, -2.0, 3.0])
    loss = f(a, w)
    assert loss.shape == (4,)
    for k in range(4):
        assert loss[k].item() == rvm.derivatives(
            mixed, of="out", wrt="a", inputs={"a": a[k].tolist(), "w": w[k].item()}).value
    loss.sum().backward()
    for k in range(4):
        g = rvm.grad(mixed, of="out", wrt=["a", "w"], inputs={"a": a[k].tolist(),
                                                              "w": w[k].item()})
        assert np.array_equal(a.grad[k].numpy(), g["a"]) and w.grad[k].item() == g["w"]
    assert torch.autograd.gradcheck(f, (a, w))
    assert torch.autograd.gradgradcheck(f, (a, w))


def test_two_batch_dimensions_equal_the_loop(mixed):
    f = torch_function(mixed, of="out", wrt=["a", "w"])
    rng = np.random.default_rng(1)
    a, w = t64(rng.normal(size=(2, 3, 3))), t64(rng.normal(size=(2, 3)))
    loss = f(a, w)
    assert loss.shape == (2, 3)
    loss.sum().backward()
    for i in range(2):
        for j in range(3):
            ins = {"a": a[i, j].tolist(), "w": w[i, j].item()}
            d = rvm.derivatives(mixed, of="out", wrt=["a", "w"], inputs=ins)
            assert loss[i, j].item() == d.value
            assert np.array_equal(a.grad[i, j].numpy(), d.gradient["a"])
            assert w.grad[i, j].item() == d.gradient["w"]


def test_hessian_matches_rvm(mixed):
    f = torch_function(mixed, of="out", wrt=["a", "w"], native=False)
    a, w = t64([0.3, -1.2, 2.0]), t64(1.7)
    H = torch.autograd.functional.hessian(f, (a, w))
    d = rvm.derivatives(mixed, of="out", wrt=["a", "w"], inputs={"a": [0.3, -1.2, 2.0],
                                                                 "w": 1.7}, hessian=True)
    np.testing.assert_allclose(H[0][0].numpy(), d.hessian[:3, :3], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(H[0][1].numpy(), d.hessian[:3, 3], rtol=1e-13)


def test_scalar_program_bessel():
    f = torch_function(ROOT / "programs" / "besselj_rec.rasm", of="out", wrt="z")
    z = t64(3.0)
    f(z).backward()
    assert z.grad.item() == rvm.grad(ROOT / "programs" / "besselj_rec.rasm", of="out",
                                     wrt="z")["z"]


def test_shape_errors(mixed):
    f = torch_function(mixed, of="out", wrt=["a", "w"])
    with pytest.raises(ValueError, match="expected shape"):
        f(t64([1.0, 2.0]), t64(1.0))
    with pytest.raises(ValueError, match="batch dimensions"):
        f(t64([[1.0, 2.0, 3.0]]), t64([1.0, 2.0]))


def test_training_example_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "train_torch_layer.py"),
                          "--steps", "30", "--every", "10"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "final loss" in out.stdout
