"""Figures for federated experiments (matplotlib, Agg backend, PNG).

Every function returns the :class:`matplotlib.figure.Figure` and saves it when ``path`` is
given (via :func:`most.plots._save`; parent folders are created). A method keeps the same
colour and line style (:func:`most.plots.method_style`, in insertion order) within a figure.

* :func:`radar` -- per-client accuracy of each method on a polar plot (Figure 1 of MosT).
* :func:`curves` -- a metric per round, one line per method, optional ± std bands.
* :func:`worst_k_bars` -- grouped bars of worst-20 .. worst-80 % accuracy per method.
* :func:`assignment_stack` -- clients per largest-share model over rounds (Figure 9).
* :func:`sparsity_drift` -- Gamma sparsity and successive-Gamma symmetric KL per round (Figure 2).

Call ``matplotlib.pyplot.close(fig)`` after saving when making many figures.

Examples:
    >>> import matplotlib.pyplot as plt
    >>> fig = radar({"FedAvg": [0.7, 0.5, 0.9], "MosT": [0.8, 0.7, 0.9]}, title="accuracy")
    >>> type(fig).__name__, len(fig.axes)
    ('Figure', 1)
    >>> plt.close(fig)
"""

from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from ..plots import _legend, _nonempty, _save, _values, curves, method_hatch, method_style  # noqa: E402

__all__ = ["radar", "curves", "worst_k_bars", "assignment_stack", "sparsity_drift"]

WORST_KEYS: tuple[str, ...] = ("worst20", "worst40", "worst60", "worst80")


def radar(per_client: Mapping[str, Sequence[float]], *, title: str = "", client_labels: Sequence[str] | None = None,
          ylim: tuple[float, float] | None = None, fill: bool = True, path=None):
    """Per-client accuracy of each method on a polar plot (MosT, Figure 1).

    Clients are spaced around the circle (in the given order), one closed line per method.

    Args:
        per_client: method name -> ``[n_clients]`` accuracies (same clients, same order, for all).
        client_labels: tick labels for the clients (default ``0 .. n-1``; with more than 24
            clients only about 24 labels are shown).
        ylim: radial range (default ``(0, max)`` rounded up to 1 when the values look like
            fractions).
        fill: shade each method's polygon lightly.
    """
    _nonempty(per_client, "per_client")
    data = {name: _values(v, f"per_client[{name!r}]") for name, v in per_client.items()}
    n = {len(v) for v in data.values()}
    if len(n) != 1:
        raise ValueError(
            f"every method in `per_client` must have one value per client (same length); got lengths "
            f"{ {k: len(v) for k, v in data.items()} }."
        )
    n = n.pop()
    if client_labels is not None and len(client_labels) != n:
        raise ValueError(f"`client_labels` must have {n} entries (one per client); got {len(client_labels)}.")
    theta = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    closed = np.append(theta, theta[:1])

    fig, ax = plt.subplots(figsize=(5.6, 5.6), subplot_kw={"projection": "polar"})
    for k, (name, v) in enumerate(data.items()):
        style = method_style(k)
        ax.plot(closed, np.append(v, v[:1]), lw=1.6, label=name, marker="o" if n <= 30 else None, ms=3, **style)
        if fill:
            ax.fill(closed, np.append(v, v[:1]), color=style["color"], alpha=0.08)
    labels = list(client_labels) if client_labels is not None else [str(i) for i in range(n)]
    step = max(1, int(np.ceil(n / 24)))
    ax.set_xticks(theta[::step])
    ax.set_xticklabels(labels[::step], fontsize=8)
    if ylim is None:
        top = max(float(v.max()) for v in data.values())
        bottom = min(0.0, min(float(v.min()) for v in data.values()))
        ylim = (bottom, 1.0 if 0.0 <= top <= 1.0 else top * 1.05)
    ax.set_ylim(*ylim)
    ax.set_rlabel_position(180.0 / n)  # radial tick labels between the first two clients
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(alpha=0.35)
    ax.set_title(title, pad=18)
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return _save(fig, path)


def worst_k_bars(table: Mapping[str, Mapping[str, float]], *, title: str = "", keys: Sequence[str] = WORST_KEYS,
                 ylabel: str = "mean accuracy of the worst k % clients", annotate: bool = False, path=None):
    """Grouped bars: one group per k (``worst20`` .. ``worst80``), one bar per method.

    Args:
        table: method name -> ``{"worst20": ..., "worst40": ..., ...}`` (e.g. from
            :func:`most.federated.evaluation.summarise`; other keys are ignored).
        keys: the groups, in order.
        annotate: write each bar's value above it.
    """
    _nonempty(table, "table")
    for name, row in table.items():
        missing = [k for k in keys if k not in row]
        if missing:
            raise ValueError(f"`table[{name!r}]` lacks {missing}; it must have every key in {list(keys)}.")
    methods = list(table)
    groups = np.arange(len(keys))
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(min(14.0, max(5.0, 1.2 + 0.45 * len(keys) * len(methods))), 3.8))
    for k, name in enumerate(methods):
        vals = np.array([float(table[name][key]) for key in keys])
        bars = ax.bar(groups - 0.4 + width * (k + 0.5), vals, width, color=method_style(k)["color"],
                      hatch=method_hatch(k), edgecolor="white", linewidth=0, label=name)
        if annotate:
            ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=1)
    ax.set_xticks(groups)
    ax.set_xticklabels([key.replace("worst", "worst ") + " %" if key.startswith("worst") else key for key in keys])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    _legend(ax, len(methods), fontsize=8, **({} if len(methods) > 6 else {"ncols": min(len(methods), 4)}))
    fig.tight_layout()
    return _save(fig, path)


def assignment_stack(plans: Sequence, *, title: str = "", rounds: Sequence[float] | None = None, path=None):
    """Clients per largest-share model over rounds, as a stacked area (MosT, Figure 9).

    For each round's plan Gamma ``[n, m]``, each client (row) counts for the model holding its
    largest entry (ties to the lowest index); the m counts are stacked, so the total is n.

    Args:
        plans: one ``[n, m]`` plan per round (tensors or arrays, all the same shape).
        rounds: x values (default ``0 .. len(plans) - 1``).
    """
    if len(plans) == 0:
        raise ValueError("`plans` must hold at least one plan Gamma of shape [n, m]; got none.")
    mats = []
    for t, p in enumerate(plans):
        a = p.detach().cpu().double().numpy() if isinstance(p, torch.Tensor) else np.asarray(p, dtype=float)
        if a.ndim != 2 or 0 in a.shape:
            raise ValueError(f"`plans[{t}]` must be a plan of shape [n, m]; got shape {a.shape}.")
        if mats and a.shape != mats[0].shape:
            raise ValueError(f"all plans must have the same shape; `plans[0]` is {mats[0].shape}, "
                             f"`plans[{t}]` is {a.shape}.")
        if not np.isfinite(a).all():
            raise ValueError(f"`plans[{t}]` (shape {a.shape}) contains NaN or inf.")
        mats.append(a)
    n, m = mats[0].shape
    counts = np.stack([np.bincount(a.argmax(1), minlength=m) for a in mats], axis=1)  # [m, T]
    xs = np.arange(len(mats)) if rounds is None else _values(rounds, "rounds")
    if len(xs) != len(mats):
        raise ValueError(f"`rounds` has {len(xs)} entries but there are {len(mats)} plans.")

    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    colors = [f"C{j % 10}" for j in range(m)]
    if len(mats) == 1:  # a single round: a stacked bar
        bottom = 0
        for j in range(m):
            ax.bar(xs, counts[j], bottom=bottom, color=colors[j], label=f"model {j}", width=0.6)
            bottom = bottom + counts[j]
    else:
        ax.stackplot(xs, counts, colors=colors, labels=[f"model {j}" for j in range(m)], alpha=0.85)
        ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(0, n)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("clients (largest-share model)")
    ax.set_title(title)
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return _save(fig, path)


def sparsity_drift(sparsity: Mapping[str, Sequence[float]], drift: Mapping[str, Sequence[float]], *,
                   title: str = "", log_drift: bool = False, path=None):
    """Two panels per round: Gamma sparsity and successive-Gamma symmetric KL (MosT, Figure 2).

    Args:
        sparsity: method/variant -> :func:`~most.federated.evaluation.gamma_sparsity` per round
            (rounds ``0 .. T-1``).
        drift: method/variant -> :func:`~most.federated.evaluation.gamma_drift` between
            successive plans; a series one shorter than the method's sparsity series is drawn at
            rounds ``1 .. T-1`` (drift at round t compares Gamma_{t-1} with Gamma_t), otherwise
            at ``0 .. len - 1``.
        log_drift: logarithmic y axis for the drift (zeros are not drawn).
    """
    _nonempty(sparsity, "sparsity")
    _nonempty(drift, "drift")
    names = list(dict.fromkeys([*sparsity, *drift]))
    fig, (ax_s, ax_d) = plt.subplots(1, 2, figsize=(10.0, 3.8))
    for k, name in enumerate(names):
        style = method_style(k)
        n_s = None
        if name in sparsity:
            s = _values(sparsity[name], f"sparsity[{name!r}]")
            n_s = len(s)
            ax_s.plot(np.arange(n_s), s, lw=1.6, label=name, **style)
        if name in drift:
            d = _values(drift[name], f"drift[{name!r}]")
            start = 1 if n_s is not None and len(d) == n_s - 1 else 0
            ax_d.plot(np.arange(start, start + len(d)), d, lw=1.6, label=name, **style)
    ax_s.set_ylim(-0.02, 1.02)
    ax_s.set_ylabel("Γ sparsity (fraction of zeros)")
    ax_d.set_ylabel(r"symmetric KL($\Gamma_{t-1}$, $\Gamma_t$)")
    if log_drift:
        ax_d.set_yscale("log")
    for ax in (ax_s, ax_d):
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    if any(name not in sparsity for name in drift):
        ax_s.legend(frameon=False, fontsize=8)
        _legend(ax_d, len(names), fontsize=8)
    else:
        _legend(ax_s if len(names) <= 6 else ax_d, len(names), fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)
