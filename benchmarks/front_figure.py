"""The README's picture: objectives in groups of unequal size, and where each method puts its models.

Sixty objectives ||θ − cᵢ||² in the plane, their centres cᵢ in five groups of 4 to 22; five models.
MosT (the default) puts one model in each group; linear scalarisation and MGDA train every model on
the same average and end together in the middle. Writes ``docs/img/front.png``::

    python benchmarks/front_figure.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import most  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZES = (22, 14, 10, 6, 4)  # objectives per group: unequal on purpose


def centres(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    means = torch.tensor([[0.0, 0.0], [9.0, 2.0], [3.0, 9.0], [-7.0, 6.0], [-5.0, -6.0]])
    labels = torch.arange(len(SIZES)).repeat_interleave(torch.tensor(SIZES))
    return means[labels] + 1.2 * torch.randn(len(labels), 2, generator=g), labels


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "front.png")
    args = p.parse_args()
    c, labels = centres()
    problem = most.Problem.from_function(lambda theta: ((theta - c) ** 2).sum(-1), dim=2, n_objectives=len(c))
    methods = {"MosT (default)": most.MosT(n_models=5, rounds=200, lr=0.05, seed=0),
               "linear scalarisation": most.Linearization(n_models=5, rounds=200, lr=0.05, seed=0),
               "MGDA": most.MGDA(n_models=5, rounds=200, lr=0.05, seed=0)}
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8), sharex=True, sharey=True)
    for ax, (name, method) in zip(axes, methods.items()):
        r = method.fit(problem)
        best = r.best_losses()
        owner = r.losses.argmin(1)
        for i, (x, y) in enumerate(c.tolist()):
            mx, my = r.params[owner[i]].tolist()
            ax.plot([x, mx], [y, my], color="0.8", lw=0.7, zorder=1)
        ax.scatter(c[:, 0], c[:, 1], c=labels, cmap="tab10", vmin=0, vmax=9, s=18, zorder=2,
                   label="an objective's optimum cᵢ")
        ax.scatter(r.params[:, 0], r.params[:, 1], marker="*", s=260, c="k", edgecolors="w", zorder=3,
                   label="a model θⱼ")
        ax.set_title(f"{name}\nmean loss {float(best.mean()):.1f}", fontsize=10)
        ax.set_aspect("equal")
        ax.set_xticks([]), ax.set_yticks([])
    axes[0].legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.suptitle("60 objectives ‖θ − cᵢ‖² in five groups of 4 to 22, five models; grey: each objective to its best model",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"Wrote {args.out}")


if __name__ == "__main__":
    main()
