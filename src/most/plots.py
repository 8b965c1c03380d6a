"""Figures (matplotlib, Agg backend; every function returns the Figure and can save it).

* :func:`curves` -- a metric per round, one line per method, optional ± std bands;
  :func:`training_curves` is the same on a log scale.
* :func:`assignment_heatmap` -- the plan Gamma [n, m] as an image.
* :func:`per_objective_bars` -- per-objective values of several methods, sorted.
* :func:`pareto_fronts` -- solutions of each method over the true front (one panel each).
* :func:`hypervolume_areas` -- the area each method's solutions dominate (2-D).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def _save(fig, path: str | Path | None):
    """Saves ``fig`` to ``path`` (if given; the format from its suffix, PNG without one, as
    matplotlib does) whole or not at all: drawn into memory, then written to a temporary file
    that replaces ``path`` (a stopped call never leaves half a figure)."""
    if path is not None:
        from .checkpoint import atomic_write_bytes

        path = Path(path)
        fmt = path.suffix[1:].lower()
        if not fmt:
            fmt = matplotlib.rcParams["savefig.format"]
            path = path.with_name(f"{path.name}.{fmt}")
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=120, bbox_inches="tight")
        atomic_write_bytes(path, buffer.getvalue())
    return fig


#: line styles taking turns after every ten colours, so that up to 40 methods stay apart
_LINESTYLES = ("-", "--", ":", "-.")
_HATCHES = ("", "//", "..", "xx")


def method_style(k: int) -> dict:
    """Colour and line style of the ``k``-th method of a figure: ``C0`` .. ``C9`` with solid lines,
    then the same colours dashed, dotted, dash-dotted (a figure of 15 methods has no two alike)."""
    return {"color": f"C{k % 10}", "linestyle": _LINESTYLES[(k // 10) % len(_LINESTYLES)]}


def method_hatch(k: int) -> str:
    """The bar hatch matching :func:`method_style` (none for the first ten methods)."""
    return _HATCHES[(k // 10) % len(_HATCHES)]


def _legend(ax, n: int, **kwargs) -> None:
    """A legend inside the axes for a few entries, beside them for more than six (where it would
    hide the lines)."""
    if n > 6:
        kwargs = {**kwargs, "loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}
    ax.legend(frameon=False, **kwargs)


def _values(v, name: str) -> np.ndarray:
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu().double().numpy()
    a = np.asarray(v, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"`{name}` must be a non-empty sequence of numbers; got shape {a.shape}.")
    return a


def _nonempty(mapping: Mapping, name: str) -> None:
    if not mapping:
        raise ValueError(f"`{name}` must map at least one method name to its values; got an empty mapping.")


def curves(series: Mapping[str, Sequence[float]], *, ylabel: str = "accuracy", title: str = "",
           std: Mapping[str, Sequence[float]] | None = None, x: Sequence[float] | None = None,
           xlabel: str = "round", log: bool = False, path=None):
    """A metric (accuracy or loss) per round, one line per method, with optional ± std bands.

    Args:
        series: method name -> values per round.
        std: method name -> standard deviation per round (same length as the series); a band
            ``mean ± std`` is shaded. Methods missing from ``std`` get no band.
        x: shared x values (e.g. the rounds at which the metric was evaluated), or a mapping
            method name -> its own x values; default ``0 .. len - 1`` per method.
        log: logarithmic y axis (e.g. for losses).
    """
    _nonempty(series, "series")
    fig, ax = plt.subplots(figsize=(5.8, 3.8))
    for k, (name, values) in enumerate(series.items()):
        v = _values(values, f"series[{name!r}]")
        own = isinstance(x, Mapping)
        if own and name not in x:
            raise ValueError(f"`x` has no entry for {name!r}.")
        xs = np.arange(len(v)) if x is None else _values(x[name], f"x[{name!r}]") if own else _values(x, "x")
        if len(xs) != len(v):
            where = f"x[{name!r}]" if own else "x"
            raise ValueError(f"`{where}` has {len(xs)} entries but `series[{name!r}]` has {len(v)}.")
        style = method_style(k)
        color = style["color"]
        ax.plot(xs, v, lw=1.6, label=name, **style)
        if std is not None and name in std:
            s = _values(std[name], f"std[{name!r}]")
            if len(s) != len(v):
                raise ValueError(f"`std[{name!r}]` has {len(s)} entries but `series[{name!r}]` has {len(v)}.")
            ax.fill_between(xs, v - s, v + s, color=color, alpha=0.2, lw=0)
    ax.set_xlabel(xlabel)
    if x is None:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _legend(ax, len(series))
    fig.tight_layout()
    return _save(fig, path)


def training_curves(series: Mapping[str, Sequence[float]], *, ylabel: str, title: str = "",
                    log: bool = True, path=None):
    """A metric per round, one line per method, on a log scale by default (see :func:`curves`)."""
    return curves(series, ylabel=ylabel, title=title, log=log, path=path)


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


def _grid(k: int):
    cols = min(4, k)
    rows = int(np.ceil(k / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.9 * rows), squeeze=False, sharex=True, sharey=True)
    for ax in axes.ravel()[k:]:
        ax.set_visible(False)
    return fig, axes.ravel()


def _finish_panels(fig, axes, labels, title, path):
    axes[0].set_xlabel(labels[0])
    axes[0].set_ylabel(labels[1])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def pareto_fronts(points: Mapping[str, Sequence[Sequence[float]]], *, front=None, reference=None,
                  labels=("objective 1", "objective 2"), title: str = "", path=None):
    """One panel per method: its solutions (two objectives) over the true front, if known.

    ``points`` maps a method name to its ``[k, 2]`` objective values; ``reference`` draws the
    hypervolume reference box.
    """
    fig, axes = _grid(len(points))
    for ax, (name, pts) in zip(axes, points.items()):
        pts = np.asarray(pts, dtype=float)
        if front is not None:
            f = np.asarray(front, dtype=float)
            ax.plot(f[:, 0], f[:, 1], ".", ms=1.2, color="0.6", label="true front")
        if reference is not None:
            ax.axvline(reference[0], color="0.8", lw=0.8, ls="--")
            ax.axhline(reference[1], color="0.8", lw=0.8, ls="--")
        ax.scatter(pts[:, 0], pts[:, 1], s=28, color="C3", zorder=3, label="solutions")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    return _finish_panels(fig, axes, labels, title, path)


def hypervolume_areas(points: Mapping[str, Sequence[Sequence[float]]], *, reference, front=None,
                      labels=("objective 1", "objective 2"), title: str = "", path=None):
    """One panel per method: the region its solutions dominate inside the reference box (2-D)."""
    fig, axes = _grid(len(points))
    r = np.asarray(reference, dtype=float)
    for k, (ax, (name, pts)) in enumerate(zip(axes, points.items())):
        pts = np.asarray(pts, dtype=float)
        inside = pts[(pts < r).all(1)]
        inside = inside[np.argsort(inside[:, 0])]
        # staircase of the non-dominated points: each adds the rectangle up to the next point's f1
        best = np.inf
        for i, (x, y) in enumerate(inside):
            if y >= best:
                continue
            best = y
            nxt = next((q[0] for q in inside[i + 1:] if q[1] < y), r[0])
            ax.fill_between([x, nxt], [y, y], [r[1], r[1]], color=f"C{k % 10}", alpha=0.35, lw=0)
        if front is not None:
            f = np.asarray(front, dtype=float)
            ax.plot(f[:, 0], f[:, 1], ".", ms=1.0, color="0.5")
        ax.scatter(pts[:, 0], pts[:, 1], s=18, color="k", zorder=3)
        ax.set_xlim(min(pts[:, 0].min(), 0.0) - 0.02, r[0] * 1.05 if r[0] > 0 else r[0] + 0.05)
        ax.set_ylim(min(pts[:, 1].min(), front[:, 1].min() if front is not None else np.inf) - 0.05, r[1])
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    return _finish_panels(fig, axes, labels, title, path)
