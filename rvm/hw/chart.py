"""Gate counts against width, drawn with matplotlib to a file (PNG, SVG or PDF by suffix)."""
from __future__ import annotations

from pathlib import Path

DEFAULT_OPS = ("add.i", "addi.i", "neg.i", "addmul.i", "addmul.x", "cvt.ix", "jmp<", "jmp==")
DEFAULT_WIDTHS = (4, 8, 12, 16, 24, 32, 48, 64)


def chart_data(ops: list[str], widths: list[int], F: int | None = None
               ) -> dict[str, list[tuple[int, int, int]]]:
    """{label: [(width, total gates, Toffoli-class gates)]}; `jmp<` and `jmp==` stand for the
    signed less-than and equality conditions; fixed products use F = n/2 unless F is given."""
    from isa.functions import CMP_EQ, CMP_LT, cond_word
    from isa.types import INT

    from .build import circuit
    from .report import gate_counts

    out: dict[str, list[tuple[int, int, int]]] = {}
    for label in ops:
        name, cc = label, 0
        if label.startswith("jmp") and label != "jmp":
            name, cc = "jmp", cond_word(CMP_EQ if label.endswith("==") else CMP_LT, INT)
        elif label == "jmp":
            cc = cond_word(CMP_LT, INT)
        rows = []
        for n in widths:
            c = circuit(name, n, F=(n // 2 if F is None else F), cc=cc, imm=1)
            g = gate_counts(c)
            rows.append((n, sum(g.values()), g["toffoli"] + g["mcx"] + g["fredkin"]))
        out[label] = rows
    return out


def plot_counts(path: str | Path, ops: list[str] | None = None,
                widths: list[int] | None = None, F: int | None = None) -> Path:
    """Draw total gates (solid) and Toffoli-class gates (dashed) of each opcode against the
    width on log-log axes and write the figure to `path`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = list(ops or DEFAULT_OPS)
    widths = list(widths or DEFAULT_WIDTHS)
    data = chart_data(ops, widths, F)
    fig, ax = plt.subplots(figsize=(8, 5.2), dpi=120)
    for i, (label, rows) in enumerate(data.items()):
        color = f"C{i % 10}"
        xs = [r[0] for r in rows]
        ax.plot(xs, [r[1] for r in rows], "o-", color=color, label=f"{label}", lw=1.8, ms=4)
        ax.plot(xs, [max(r[2], 0.8) for r in rows], "--", color=color, lw=1, alpha=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(widths)
    ax.set_xticklabels([str(w) for w in widths])
    ax.set_xlabel("width n (bits)")
    ax.set_ylabel("gates")
    ax.set_title("rvm hw: gates per instruction (solid: all, dashed: Toffoli and MCX)"
                 + ("" if F is not None else "\nfixed point with F = n/2"), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="upper left")
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p)
    plt.close(fig)
    return p
