"""Figures (matplotlib, Agg backend; every function returns the Figure and can save it).

* :func:`training_curves` -- a metric per round, one line per method.
* :func:`assignment_heatmap` -- the plan Gamma [n, m] as an image.
* :func:`per_objective_bars` -- per-objective values of several methods, sorted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def _save(fig, path: str | Path | None):
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def training_curves(curves: Mapping[str, Sequence[float]], *, ylabel: str, title: str = "",
                    log: bool = True, path=None):
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, values in curves.items():
        ax.plot(np.arange(len(values)), np.asarray(values, dtype=float), label=name, lw=1.6)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return _save(fig, path)


def assignment_heatmap(plan: torch.Tensor, *, title: str = "assignment Γ", path=None):
    plan = torch.as_tensor(plan).detach().cpu().double()
    share = plan / plan.sum(1, keepdim=True).clamp_min(1e-300)
    n, m = share.shape
    fig, ax = plt.subplots(figsize=(1.2 + 0.45 * m, 1.2 + min(0.12 * n, 9)))
    im = ax.imshow(share.numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    ax.set_xlabel("model j")
    ax.set_ylabel("objective i")
    ax.set_xticks(range(m))
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="share Γᵢⱼ / αᵢ")
    return _save(fig, path)


def per_objective_bars(values: Mapping[str, Sequence[float]], *, ylabel: str, title: str = "", path=None):
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for name, v in values.items():
        v = np.sort(np.asarray(v, dtype=float))[::-1]
        ax.plot(np.arange(len(v)), v, drawstyle="steps-mid", label=name, lw=1.6)
    ax.set_xlabel("objectives, worst to best")
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return _save(fig, path)
