"""Train the Petersen graph embedding of programs/petersen.rasm (k = 4) and petersen3.rasm
(k = 3) with Adam on gradients from rvm, as in the NiLang paper's section IV E.

The loss is var(edge lengths) + var(non-edge lengths); it reaches zero only for a two-distance
embedding, which exists in 4 dimensions but not in 3.  Two adjacent vertices (0 and 1) stay
fixed at their random start, as in the paper, so the points cannot all collapse to one.

    python examples/train_petersen.py                     # k = 3 and k = 4, 5000 steps each
    python examples/train_petersen.py --k 4 --steps 3000 --every 500 --plot petersen.png
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rvm  # noqa: E402

PROGRAMS = {4: ROOT / "programs" / "petersen.rasm", 3: ROOT / "programs" / "petersen3.rasm"}


def program(k: int) -> rvm.Program:
    """petersen.rasm / petersen3.rasm, or the generated program for another k."""
    if k in PROGRAMS:
        return rvm.assemble(PROGRAMS[k])
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gen_programs import petersen
    return rvm.assemble(petersen(k))


def train(k: int, steps: int = 5000, lr: float = 0.01, seed: int = 2, every: int = 500,
          log=print) -> tuple[np.ndarray, list[tuple[int, float]]]:
    """Adam from x ~ N(0, 1) (10 x k, seeded) with vertices 0 and 1 fixed; returns the final
    points and the loss history [(step, loss)] of every step; logs every `every` steps."""
    prog = program(k)
    grad = rvm.grad_fn(prog, of="loss", wrt=["x"])
    x = np.random.default_rng(seed).normal(size=(10, k))
    free = np.ones((10, k))
    free[:2] = 0.0                                      # vertices 0 and 1 stay put
    m, v = np.zeros_like(x), np.zeros_like(x)
    b1, b2, eps = 0.9, 0.999, 1e-8
    history = []
    t0 = time.perf_counter()
    for t in range(1, steps + 1):
        g = grad({"x": x.ravel()})["x"].reshape(10, k) * free
        loss = grad.last.value                          # the loss at x, before this step
        history.append((t - 1, loss))
        if (t - 1) % every == 0:
            log(f"k = {k}  step {t - 1:6d}  loss = {loss:.3e}")
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        x = x - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    loss = float(rvm.run(prog, {"x": x.ravel()}).outputs["loss"])
    history.append((steps, loss))
    log(f"k = {k}  step {steps:6d}  loss = {loss:.3e}  (final)")
    # grad_fn compiles the program to C after a few calls (rvm/native, docs/ad.md)
    log(f"k = {k}  {steps} steps in {time.perf_counter() - t0:.2f} s; gradients: {grad.native}")
    return x, history


def lengths(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edge and non-edge lengths of an embedding (for the report)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gen_programs import PETERSEN_EDGES, PETERSEN_NON_EDGES
    d = lambda pairs: np.array([np.linalg.norm(x[a] - x[b]) for a, b in pairs])  # noqa: E731
    return d(PETERSEN_EDGES), d(PETERSEN_NON_EDGES)


def plot(histories: dict[int, list[tuple[int, float]]], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, h in sorted(histories.items()):
        steps, losses = zip(*h)
        ax.semilogy(steps, np.maximum(losses, 1e-16), label=f"k = {k}")
    ax.set_xlabel("Adam step")
    ax.set_ylabel("loss (floored at 1e-16)")
    ax.set_title("Petersen graph embedding: gradients from rvm")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", default="3,4", help="dimensions to train, comma-separated (default 3,4)")
    ap.add_argument("--steps", type=int, default=5000, help="Adam steps (default 5000)")
    ap.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    ap.add_argument("--seed", type=int, default=2, help="seed of the random start (default 2)")
    ap.add_argument("--every", type=int, default=500, help="print the loss every N steps")
    ap.add_argument("--plot", metavar="PNG", help="draw the loss curves to this file")
    args = ap.parse_args(argv)
    histories = {}
    for k in (int(s) for s in args.k.split(",")):
        x, histories[k] = train(k, args.steps, args.lr, args.seed, args.every)
        e, n = lengths(x)
        print(f"k = {k}  edges {e.mean():.6f} +- {e.std():.1e}, non-edges {n.mean():.6f} +- "
              f"{n.std():.1e}, ratio {e.mean() / n.mean():.6f} (sqrt 2 = 1.414214)")
    if args.plot:
        plot(histories, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
