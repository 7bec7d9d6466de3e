"""An rvm program as a PyTorch layer, trained with torch.optim (docs/interop.md).

programs/petersen.rasm computes var(edge lengths) + var(non-edge lengths) of 10 points in
4 dimensions; as a torch module whose parameter is the 10 x 4 points, Adam drives it to a
two-distance embedding of the Petersen graph (loss -> 0), the gradients coming from rvm's
adjoint sweep.  Vertices 0 and 1 stay fixed, as in examples/train_petersen.py.

    python examples/train_torch_layer.py                   # 3000 steps
    python examples/train_torch_layer.py --steps 500 --every 100
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rvm  # noqa: E402
from rvm.interop import torch_function  # noqa: E402


class PetersenLoss(torch.nn.Module):
    """Learnable points (10 x k) -> the rvm program's loss."""

    def __init__(self, k: int = 4, seed: int = 2):
        super().__init__()
        self.rvm_loss = torch_function(rvm.assemble(ROOT / "programs" / "petersen.rasm"),
                                       of="loss", wrt=["x"])
        g = torch.Generator().manual_seed(seed)
        self.fixed = torch.randn(2, k, generator=g, dtype=torch.float64)
        self.free = torch.nn.Parameter(torch.randn(8, k, generator=g, dtype=torch.float64))

    def forward(self) -> torch.Tensor:
        return self.rvm_loss(torch.cat([self.fixed, self.free]).reshape(-1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--every", type=int, default=500)
    a = ap.parse_args()
    model = PetersenLoss()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    t0 = time.perf_counter()
    for step in range(a.steps):
        opt.zero_grad()
        loss = model()
        loss.backward()
        opt.step()
        if step % a.every == 0:
            print(f"step {step:5d}  loss = {loss.item():.3e}")
    with torch.no_grad():
        final = model().item()
    print(f"final loss = {final:.3e} after {a.steps} steps "
          f"({(time.perf_counter() - t0) / a.steps * 1e6:.0f} us per step)")


if __name__ == "__main__":
    main()
