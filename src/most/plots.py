"""Figures (matplotlib, Agg backend; every function returns the Figure and can save it).

* :func:`curves` -- a metric per round, one line per method, optional ± std bands;
  :func:`training_curves` is the same on a log scale.
* :func:`profile` -- each method's per-objective values sorted worst to best, against the
  objective's rank (a quantile, 0 .. 100 %); log scale where the values span decades;
  :func:`measured_rows` leaves out objectives without a value first.
* :func:`assignment_heatmap` -- the plan Gamma [n, m] as an image, objectives grouped by model.
* :func:`grouped_bars` -- one group of bars per key, one bar per method, error bars over seeds.
* :func:`per_objective_bars` -- per-objective values of several methods, sorted.
* :func:`pareto_fronts` -- solutions of each method over the true front (one panel each).
* :func:`hypervolume_areas` -- the area each method's solutions dominate (2-D).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Mapping, Sequence, Union

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from ._validation import check_bool  # noqa: E402

#: the values of one method's line: a sequence of numbers, a NumPy array or a 1-D tensor
Series = Union[Sequence[float], np.ndarray, torch.Tensor]
#: one bar of a grouped bar chart: a value, the values of several seeds (the bar their mean, the
#: error bar their standard deviation), or ``{"mean": ..., "std": ...}``
BarValue = Union[float, Sequence[float], Mapping[str, float]]


def save_figure(fig, path: str | Path | None):
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


#: twenty colours, none alike: matplotlib's ten (``C0`` .. ``C9``), then ten darker or brighter
#: ones unlike them, so that a figure of up to 20 methods repeats no colour
PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#000000", "#000075", "#800000", "#469990", "#f032e6", "#e6b400", "#556b2f", "#4b0082", "#9acd32", "#fa8072",
)
#: line styles, markers and hatches taking turns after every ten colours
_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
_HATCHES = ("", "//", "..", "xx")


def method_style(k: int) -> dict:
    """Colour, line style and marker of the ``k``-th method of a figure: the first ten methods get
    ``C0`` .. ``C9`` with solid lines, the next ten ten other colours (:data:`PALETTE`) dashed,
    then the palette again dotted, dash-dotted; every method also gets its own marker, so that
    lines lying on top of each other stay apart (draw the markers every few points, staggered by
    method: :func:`mark_positions`)."""
    return {"color": PALETTE[k % len(PALETTE)], "linestyle": _LINESTYLES[(k // 10) % len(_LINESTYLES)],
            "marker": _MARKERS[k % len(_MARKERS)]}


def style_index(name: str, k: int, method_index: Mapping[str, int] | None = None) -> int:
    """The index (for :func:`method_style`, :func:`method_hatch`, :func:`mark_positions` and
    :func:`line_order`) of method ``name``, the ``k``-th of a figure: its entry in
    ``method_index`` (each method's position in the full list of methods of a results folder or
    report, so that a method keeps its colour in every figure, whichever methods a figure leaves
    out), else ``k``; a name missing from ``method_index`` comes after all of its entries."""
    if method_index is None:
        return k
    if name in method_index:
        return int(method_index[name])
    return len(method_index) + k


def method_hatch(k: int) -> str:
    """The bar hatch matching :func:`method_style` (none for the first ten methods)."""
    return _HATCHES[(k // 10) % len(_HATCHES)]


def mark_positions(k: int, n_points: int, n_marks: int = 10):
    """Where the ``k``-th method's markers go on a line of ``n_points``: about ``n_marks`` of them,
    each method's shifted by a different tenth of the spacing (3/10 more for each method: ten
    methods, ten shifts), so that the markers of lines on top of each other alternate instead of
    hiding one another."""
    step = max(1, int(np.ceil(n_points / n_marks)))
    return (int((3 * k) % 10 * step / 10), step)


def line_order(k: int) -> float:
    """Drawing order of the ``k``-th method's line: the first methods (the main ones, listed
    first) on top, where lines coincide."""
    return 2.0 + 1.0 / (k + 1)


def legend_outside(ax, **kwargs) -> None:
    """The legend beside the axes (upper right, outside), so that it never covers a line or a bar,
    whatever the number of entries (``kwargs`` go to ``ax.legend``: ``handles``, ``labels``, ...)."""
    kwargs = {"fontsize": 8, **kwargs, "loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0}
    ax.legend(frameon=False, **kwargs)


def widen_for_legend(fig, ax) -> None:
    """Widens ``fig`` by the width of ``ax``'s legend (drawn beside the axes by
    :func:`legend_outside`), so that long method names take room of their own instead of
    squashing the axes when the layout is tightened."""
    legend = ax.get_legend()
    if legend is None:
        return
    width = legend.get_window_extent().width / fig.dpi  # the figure's own renderer, whatever the backend
    w, h = fig.get_size_inches()
    fig.set_size_inches(w + width, h)


def _plain(v):
    """``v`` as NumPy reads it: a tensor detached and on the host (one that requires grad, or
    lives on a GPU, cannot be read as it is); anything else as given."""
    return v.detach().cpu().double().numpy() if isinstance(v, torch.Tensor) else v


def as_series(v, name: str) -> np.ndarray:
    """``v`` (a sequence of numbers or a 1-D tensor) as a float array; ``name`` is the argument's
    name in the error for anything else."""
    a = np.asarray(_plain(v), dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"`{name}` must be a non-empty sequence of numbers; got shape {a.shape}.")
    return a


def check_nonempty(mapping: Mapping, name: str) -> None:
    """Refuses an empty mapping of methods to values (a figure of nothing)."""
    if not mapping:
        raise ValueError(f"`{name}` must map at least one method name to its values; got an empty mapping.")


def curves(series: Mapping[str, Series], *, ylabel: str = "accuracy", title: str = "",
           std: Mapping[str, Series] | None = None,
           x: Series | Mapping[str, Series] | None = None,
           xlabel: str = "round", log: bool = False, method_index: Mapping[str, int] | None = None, path=None):
    """A metric (accuracy or loss) per round, one line per method, with optional ± std bands.

    Args:
        series: method name -> values per round.
        std: method name -> standard deviation per round (same length as the series); a band
            ``mean ± std`` is shaded. Methods missing from ``std`` get no band. On a log axis
            (``log``) the band is symmetric in log space, from ``v / (1 + s / v)`` to ``v + s``
            (a factor ``1 + s / v`` either way), so that it stays above 0 however large the std;
            where ``v`` is not positive no band is drawn.
        x: shared x values (e.g. the rounds at which the metric was evaluated), or a mapping
            method name -> its own x values; default ``0 .. len - 1`` per method. Where every x
            value is a whole number (rounds), the ticks are whole numbers too.
        log: logarithmic y axis (e.g. for losses).
        method_index: method name -> its index for :func:`method_style` (see
            :func:`style_index`); default: its position in ``series``.
    """
    log = check_bool(log, name="log")  # "no" is a true string
    check_nonempty(series, "series")
    fig, ax = plt.subplots(figsize=(5.8, 3.8))
    whole = True  # every x value a whole number: integer ticks
    for k, (name, values) in enumerate(series.items()):
        v = as_series(values, f"series[{name!r}]")
        own = isinstance(x, Mapping)
        if isinstance(x, Mapping):
            if name not in x:
                raise ValueError(f"`x` has no entry for {name!r}.")
            xs = as_series(x[name], f"x[{name!r}]")
        else:
            xs = np.arange(len(v)) if x is None else as_series(x, "x")
        if len(xs) != len(v):
            where = f"x[{name!r}]" if own else "x"
            raise ValueError(f"`{where}` has {len(xs)} entries but `series[{name!r}]` has {len(v)}.")
        finite_x = xs[np.isfinite(xs)]
        whole = whole and bool(np.all(finite_x == np.round(finite_x)))
        i = style_index(name, k, method_index)
        style = method_style(i)
        color = style["color"]
        ax.plot(xs, v, lw=1.6, ms=4, markevery=mark_positions(i, len(v)), zorder=line_order(i), label=name, **style)
        if std is not None and name in std:
            s = as_series(std[name], f"std[{name!r}]")
            if len(s) != len(v):
                raise ValueError(f"`std[{name!r}]` has {len(s)} entries but `series[{name!r}]` has {len(v)}.")
            if log:  # symmetric in log space: v times or divided by (1 + s / v), above 0
                with np.errstate(divide="ignore", invalid="ignore"):
                    positive = v > 0
                    low = np.where(positive, v / (1.0 + np.abs(s) / v), np.nan)
                    high = np.where(positive, v + np.abs(s), np.nan)
            else:
                low, high = v - s, v + s
            ax.fill_between(xs, low, high, color=color, alpha=0.2, lw=0)
    ax.set_xlabel(xlabel)
    if whole:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    widen_for_legend(fig, ax)
    fig.tight_layout()
    return save_figure(fig, path)


def training_curves(series: Mapping[str, Sequence[float]], *, ylabel: str, title: str = "",
                    log: bool = True, path=None):
    """A metric per round, one line per method, on a log scale by default (see :func:`curves`)."""
    return curves(series, ylabel=ylabel, title=title, log=log, path=path)


def assignment_heatmap(plan: torch.Tensor, *, title: str = "assignment Γ", sort: bool = True, path=None):
    """The plan Gamma ``[n, m]`` as an image: row i is objective i's shares ``Γᵢⱼ / αᵢ`` over the
    models.

    With ``sort`` (the default) the rows are grouped by the model holding their largest share
    (ties to the lowest index), largest share first within a group, so that each model's block of
    objectives shows; white lines part the groups, the model ticks say how many objectives each
    holds, and (for up to 60 objectives) the row ticks give the objectives' own indices.
    """
    sort = check_bool(sort, name="sort")
    plan = torch.as_tensor(plan).detach().cpu().double()
    if plan.ndim != 2 or 0 in plan.shape:
        raise ValueError(f"`plan` must be a plan Gamma of shape [n, m]; got shape {tuple(plan.shape)}.")
    share = (plan / plan.sum(1, keepdim=True).clamp_min(1e-300)).numpy()
    n, m = share.shape
    owner = share.argmax(1)
    order = np.lexsort((np.arange(n), -share[np.arange(n), owner], owner)) if sort else np.arange(n)
    counts = np.bincount(owner, minlength=m)
    # at least 4.6 x 3.8 inches: room for the axis labels however few the models and objectives
    fig, ax = plt.subplots(figsize=(max(4.6, 1.8 + 0.5 * m), max(3.8, 1.4 + min(0.12 * n, 9))))
    im = ax.imshow(share[order], aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    ax.set_xticks(range(m))
    ax.set_xticklabels([f"{j}\n({c})" for j, c in enumerate(counts)], fontsize=8)
    ax.set_xlabel("model j (objectives with their largest share on it)")
    if sort:
        for edge in np.cumsum(counts)[:-1]:
            if 0 < edge < n:
                ax.axhline(edge - 0.5, color="white", lw=1.2)
        ax.set_ylabel("objective i\n(grouped by largest-share model)")
    else:
        ax.set_ylabel("objective i")
    if n <= 60:
        ax.set_yticks(range(n))
        ax.set_yticklabels([str(i) for i in order], fontsize=6 if n > 30 else 7)
    else:
        ax.set_yticks([])
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="share Γᵢⱼ / αᵢ")
    return save_figure(fig, path)


def _profile_data(v, name: str, higher_is_better: bool) -> np.ndarray:
    """``[seeds, n]`` values, each row sorted worst to best."""
    a = np.asarray(_plain(v), dtype=float)
    if a.ndim == 1:
        a = a[None]
    if a.ndim != 2 or a.size == 0:
        raise ValueError(f"`{name}` must be a non-empty sequence of per-objective values, or one such "
                         f"sequence per seed ([seeds, n]); got shape {a.shape}.")
    if not np.isfinite(a).all():
        raise ValueError(f"`{name}` (shape {a.shape}) contains NaN or inf.")
    a = np.sort(a, axis=1)
    return a if higher_is_better else a[:, ::-1]


def measured_rows(rows) -> list[np.ndarray]:
    """Seeds' per-objective values for :func:`profile` without the objectives that have no value
    (``NaN`` or ``None``: a client without a test sample has no accuracy), each row sorted. Where
    the seeds then differ in their number of values, each is read at the ranks of the longest
    as quantiles (linear interpolation of its sorted values), so that the profile averages them
    rank by rank; rows left empty are dropped.

    Examples:
        >>> [r.tolist() for r in measured_rows([[0.5, None, 0.1, 0.3], [0.4, 0.2, 0.3]])]
        [[0.1, 0.3, 0.5], [0.2, 0.3, 0.4]]
    """
    kept = [np.sort(a[np.isfinite(a)]) for a in (np.asarray(r, dtype=float) for r in rows)]
    kept = [a for a in kept if a.size]
    if not kept:
        return []
    n = max(a.size for a in kept)
    ranks = (np.arange(n) + 0.5) / n
    return [a if a.size == n else np.interp(ranks, (np.arange(a.size) + 0.5) / a.size, a) for a in kept]


def profile(values: Mapping[str, Series | Sequence[Series]], *, ylabel: str = "", title: str = "",
            higher_is_better: bool = True, percent: bool = False, log: bool | None = None,
            max_decades: float = 1.5, xlabel: str = "objectives ranked worst → best (percentile)",
            method_index: Mapping[str, int] | None = None, path=None):
    """The sorted per-objective profile: each method's per-objective values sorted worst to best,
    drawn against the objective's rank as a quantile (0 .. 100 %), one line per method.

    Readable for any number of objectives (a radar of 30 spokes is not), and the left end reads as
    the worst-k %: the line's mean left of x = 20 is the mean of the worst 20 % objectives. Lines
    of different numbers of objectives share the axis.

    Args:
        values: method name -> ``[n]`` per-objective values, or ``[seeds, n]``, one row per seed:
            each seed's values are sorted apart and the line is their mean at each rank (the k-th
            worst objective's value, on average), with a band of ± one standard deviation over
            the seeds.
        higher_is_better: accuracies (``True``) are sorted ascending, losses (``False``)
            descending, so that the worst objectives are on the left either way.
        percent: multiply by 100 (accuracies given as fractions; say "%" in ``ylabel``).
        log: logarithmic y axis; ``None`` (default) chooses it when every value is positive and
            they span more than ``max_decades`` decades (losses of 0.6 against 40, say), where a
            linear axis would squash the small ones into a flat line.
        method_index: method name -> its index for :func:`method_style` (see
            :func:`style_index`); default: its position in ``values``.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = profile({"MosT": [0.5, 0.4, 0.7], "FedAvg": [[0.3, 0.5, 0.6], [0.4, 0.4, 0.8]]},
        ...               ylabel="accuracy (%)", percent=True)
        >>> fig.axes[0].get_lines()[0].get_ydata().tolist()  # sorted, worst first
        [40.0, 50.0, 70.0]
        >>> plt.close(fig)
    """
    higher_is_better, percent = check_bool(higher_is_better, name="higher_is_better"), check_bool(percent, name="percent")
    log = None if log is None else check_bool(log, name="log")
    check_nonempty(values, "values")
    data = {name: _profile_data(v, f"values[{name!r}]", higher_is_better) * (100.0 if percent else 1.0)
            for name, v in values.items()}
    lo = min(float(a.min()) for a in data.values())
    hi = max(float(a.max()) for a in data.values())
    if log is None:
        log = lo > 0 and hi / lo > 10 ** max_decades
    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    for k, (name, a) in enumerate(data.items()):
        n = a.shape[1]
        x = 100.0 * (np.arange(n) + 0.5) / n
        mean = a.mean(0)
        i = style_index(name, k, method_index)
        style = method_style(i)
        ax.plot(x, mean, drawstyle="steps-mid", lw=1.6, ms=4, markevery=mark_positions(i, n, 12), label=name,
                zorder=line_order(i), **style)
        if len(a) > 1:
            std = a.std(0, ddof=1)
            # within the values' range: a band past 100 % or below the smallest value means nothing
            low, high = np.clip(mean - std, lo, hi), np.clip(mean + std, lo, hi)
            ax.fill_between(x, low, high, step="mid", color=style["color"], alpha=0.12, lw=0)
    if log:
        ax.set_yscale("log")
    else:
        bottom, top = ax.get_ylim()
        if lo >= 0 > bottom:  # a non-negative quantity: the axis does not go below 0
            ax.set_ylim(0, top)
    ax.set_xlim(0, 100)
    ax.set_xticks(range(0, 101, 20))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    seeds = {len(a) for a in data.values()}
    if seeds != {1}:
        title = f"{title}\n(mean at each rank over seeds, band ± std)" if title else "mean over seeds, band ± std"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both" if log else "major")
    legend_outside(ax)
    widen_for_legend(fig, ax)
    fig.tight_layout()
    return save_figure(fig, path)


def _mean_std(v, where: str) -> tuple[float, float]:
    """A bar's height and error: a number (no error), ``{"mean", "std"}``, or per-seed values
    (their mean and sample standard deviation)."""
    if isinstance(v, Mapping):
        if "mean" not in v:
            raise ValueError(f"`{where}` must be a number, per-seed values or {{'mean', 'std'}}; got keys {list(v)}.")
        mean = v["mean"]  # None: missing (NaN, drawn as n/a)
        return float("nan") if mean is None else float(mean), float(v.get("std") or 0.0)
    a = np.asarray(_plain(v), dtype=float)
    if a.ndim == 0:
        return float(a), 0.0
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"`{where}` must be a number, per-seed values or {{'mean', 'std'}}; got shape {a.shape}.")
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def grouped_bars(table: Mapping[str, Mapping[str, BarValue]], keys: Sequence[str], *, labels: Sequence[str] | None = None,
                 ylabel: str = "", title: str = "", annotate: bool = False, percent: bool = False,
                 method_index: Mapping[str, int] | None = None, path=None):
    """Grouped bars: one group per key (a domain, a task, a worst-k share), one bar per method,
    with error bars (± one standard deviation over seeds) where the table gives several seeds.

    Every bar keeps its place: a value that is missing or not finite (NaN, inf, ``None``, or a
    seed's such value among per-seed values) draws no bar but an ``n/a`` at its base. The axis
    starts at 0 when every value is >= 0, and goes below 0 otherwise.

    Args:
        table: method name -> ``{key: v}`` for every key (other keys are ignored), each ``v`` a
            number, per-seed values (bar: their mean, error bar: their sample std) or
            ``{"mean": ..., "std": ...}``.
        keys: the groups, in order; ``labels``: their tick labels, one per key (default: the keys).
        annotate: write each bar's value above it.
        percent: the values are fractions, drawn in %.
        method_index: method name -> its index for :func:`method_style` (see
            :func:`style_index`); default: its position in ``table``.
    """
    annotate, percent = check_bool(annotate, name="annotate"), check_bool(percent, name="percent")
    check_nonempty(table, "table")
    if not len(keys):
        raise ValueError("`keys` is empty: give the groups to draw, e.g. the domains or tasks of the table.")
    labels = None if labels is None else list(labels)
    if labels is not None and len(labels) != len(keys):
        raise ValueError(f"`labels` has {len(labels)} entries but `keys` has {len(keys)}: give one tick label per "
                         "key, in the order of `keys` (or leave `labels` out to label the groups by their keys).")
    for name, row in table.items():
        missing = [k for k in keys if k not in row]
        if missing:
            raise ValueError(f"`table[{name!r}]` lacks {missing}; it must have every key in {list(keys)}.")
    scale = 100.0 if percent else 1.0
    stats = {name: np.array([_mean_std(table[name][key], f"table[{name!r}][{key!r}]") for key in keys]) * scale
             for name in table}
    known = {name: np.isfinite(s[:, 0]) for name, s in stats.items()}
    errors = any((np.nan_to_num(s[:, 1]) > 0).any() for s in stats.values())
    methods = list(table)
    groups = np.arange(len(keys))
    width = 0.8 / len(methods)
    # at least 2.6 inches per group (tick labels apart however few the groups), and 5 in all
    fig, ax = plt.subplots(figsize=(min(14.0, max(5.0, 2.6 * len(keys), 1.2 + 0.45 * len(keys) * len(methods))), 3.8))
    gaps = []  # (x, method index) of the bars without a value
    for k, name in enumerate(methods):
        i = style_index(name, k, method_index)
        ok = known[name]
        vals = np.where(ok, stats[name][:, 0], 0.0)  # no value: a bar of height 0 (its place kept)
        errs = np.where(ok & np.isfinite(stats[name][:, 1]), stats[name][:, 1], np.nan)  # NaN: no error bar
        xs = groups - 0.4 + width * (k + 0.5)
        bars = ax.bar(xs, vals, width, color=method_style(i)["color"],
                      hatch=method_hatch(i), edgecolor="white", linewidth=0, label=name,
                      yerr=errs if errors else None,
                      error_kw={"ecolor": "0.2", "elinewidth": 0.8, "capsize": 1.5 if len(methods) > 6 else 3})
        gaps += [(x, i) for x, good in zip(xs, ok) if not good]
        if annotate:
            fmt = "%.1f" if percent else "%.3f"
            ax.bar_label(bars, labels=[fmt % v if good else "" for v, good in zip(vals, ok)], fontsize=7, padding=1)
    ax.set_xticks(groups)
    ax.set_xticklabels(list(keys) if labels is None else labels)
    ax.set_ylabel(ylabel)
    if errors:
        title = f"{title} (mean ± std over seeds)" if title else "mean ± std over seeds"
    if gaps:
        title = f"{title}\n(n/a: no value, missing or not finite)" if title else "n/a: no value, missing or not finite"
    ax.set_title(title)
    finite = np.concatenate([s[:, 0][known[n]] for n, s in stats.items()])
    if not len(finite) or finite.min() >= 0:  # a non-negative quantity: the axis starts at 0
        ax.set_ylim(bottom=0)
    for x, i in gaps:  # a missing value: no bar, "n/a" at its base
        ax.text(x, 0.0, "n/a", rotation=90, ha="center", va="bottom", fontsize=8, color=method_style(i)["color"],
                fontweight="bold", clip_on=True)
    ax.grid(alpha=0.3, axis="y")
    legend_outside(ax)
    fig.tight_layout()
    return save_figure(fig, path)


def per_objective_bars(values: Mapping[str, Sequence[float]], *, ylabel: str, title: str = "", path=None):
    """Per-objective losses of several methods, each sorted worst (largest) to best, on a log
    axis against the objective's rank (:func:`profile` draws the same against the rank as a
    quantile, with seeds and accuracies)."""
    check_nonempty(values, "values")
    values = {name: _plain(v) for name, v in values.items()}
    for name, v in values.items():
        a = np.asarray(v, dtype=float)
        if a.ndim != 1 or not len(a) or not np.isfinite(a).all():
            raise ValueError(f"`values[{name!r}]` must be a non-empty list of finite losses (one per objective); "
                             f"got shape {a.shape}" + ("" if a.ndim != 1 or not len(a) else " with NaN or inf") + ".")
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for k, (name, v) in enumerate(values.items()):
        v = np.sort(np.asarray(v, dtype=float))[::-1]
        ax.plot(np.arange(len(v)), v, drawstyle="steps-mid", label=name, lw=1.6, ms=4,
                markevery=mark_positions(k, len(v)), zorder=line_order(k), **method_style(k))
    ax.set_xlabel("objectives, worst to best")
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return save_figure(fig, path)


def _grid(k: int):
    cols = min(4, k)
    rows = int(np.ceil(k / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.9 * rows), squeeze=False, sharex=True, sharey=True)
    for ax in axes.ravel()[k:]:
        ax.set_visible(False)
    return fig, axes.ravel()


def _points(points: Mapping, front=None) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The panels' points (method -> ``[k, 2]``, k >= 1) and the front (``[K, 2]``) as arrays."""
    check_nonempty(points, "points")
    out = {}
    for name, pts in points.items():
        a = np.asarray(_plain(pts), dtype=float)
        if a.ndim != 2 or a.shape[1] != 2 or not len(a):
            raise ValueError(f"`points[{name!r}]` must be [k, 2] objective values (k >= 1); got shape {a.shape}.")
        out[name] = a
    f = None if front is None else np.asarray(_plain(front), dtype=float)
    if f is not None and (f.ndim != 2 or f.shape[1] != 2 or not len(f)):
        raise ValueError(f"`front` must be [K, 2] points of the true front (K >= 1); got shape {f.shape}.")
    return out, f


def _reference_point(reference) -> np.ndarray:
    """``reference`` (a sequence, array or tensor) as a finite point ``[2]``: the corner of the
    hypervolume's reference box in the two objectives."""
    try:
        r = np.asarray(_plain(reference), dtype=float)
    except (TypeError, ValueError):  # e.g. a ragged list or a string
        raise ValueError("`reference` must be a point of two objective values, e.g. [1.1, 1.1]; got "
                         f"{reference!r}.") from None
    if r.shape != (2,):
        raise ValueError(f"`reference` must be a point of two objective values, e.g. [1.1, 1.1]; got {reference!r} "
                         f"(shape {r.shape}).")
    if not np.isfinite(r).all():
        raise ValueError(f"`reference` must be finite (the corner of the reference box); got {r.tolist()}.")
    return r


def _finish_panels(fig, axes, labels, title, path):
    axes[0].set_xlabel(labels[0])
    axes[0].set_ylabel(labels[1])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def _panel_note(ax, text: str) -> None:
    """``text`` in the middle of a panel (a panel with nothing of its own to draw says why)."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.35",
            wrap=True, bbox={"facecolor": "white", "edgecolor": "0.8", "alpha": 0.85, "pad": 3})


def pareto_fronts(points: Mapping[str, Sequence[Sequence[float]]], *, front=None, reference=None,
                  labels=("objective 1", "objective 2"), title: str = "",
                  method_index: Mapping[str, int] | None = None, path=None):
    """One panel per method: its solutions (two objectives) over the true front, if known.

    ``points`` maps a method name to its ``[k, 2]`` objective values; ``reference`` (a finite
    point ``[2]``) draws the hypervolume reference box. Points with a NaN or inf value (e.g. a
    model whose training diverged) are not drawn; a panel with no finite point says so. Each
    method's points have its colour (:func:`method_style`; ``method_index``: method name -> its
    index, see :func:`style_index`).
    """
    arrays, f = _points(points, front)
    ref = None if reference is None else _reference_point(reference)
    fig, axes = _grid(len(arrays))
    for k, (ax, (name, pts)) in enumerate(zip(axes, arrays.items())):
        if f is not None:
            ax.plot(f[:, 0], f[:, 1], ".", ms=1.2, color="0.6", label="true front")
        if ref is not None:
            ax.axvline(ref[0], color="0.8", lw=0.8, ls="--")
            ax.axhline(ref[1], color="0.8", lw=0.8, ls="--")
        color = method_style(style_index(name, k, method_index))["color"]
        ax.scatter(pts[:, 0], pts[:, 1], s=28, color=color, edgecolor="k", linewidth=0.4, zorder=3, label="solutions")
        if not np.isfinite(pts).all(1).any():
            _panel_note(ax, "no finite point")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    return _finish_panels(fig, axes, labels, title, path)


def _limits(values: np.ndarray, margin: float = 0.05) -> tuple[float, float]:
    """An axis range holding every one of ``values`` (finite), with a margin of ``margin`` of
    their span on either side (of the magnitude, or 0.05, where they are all equal)."""
    lo, hi = float(values.min()), float(values.max())
    with np.errstate(over="ignore"):
        span = (hi - lo) * (1 + 2 * margin)
    if not np.isfinite(span):  # matplotlib's transforms divide by the axis' width
        raise ValueError(f"The values to draw span {lo:.3g} to {hi:.3g}, a range too wide for float64 axes; "
                         "rescale them (and the reference point) before drawing.")
    pad = margin * (hi - lo) if hi > lo else margin * max(abs(lo), 1.0)
    return lo - pad, hi + pad


def hypervolume_areas(points: Mapping[str, Sequence[Sequence[float]]], *, reference, front=None,
                      labels=("objective 1", "objective 2"), title: str = "",
                      method_index: Mapping[str, int] | None = None, path=None):
    """One panel per method: the region its solutions dominate inside the reference box (2-D).

    ``reference`` is a finite point ``[2]``; the points (and ``front``, if given) must be finite,
    as the area, and the axes drawn around it, are undefined otherwise. The panels share their
    axes, whose ranges hold every panel's points, the reference point and the front (with a small
    margin), so that every method is drawn on the same scale and none is cut off; a method with
    no point inside the reference box (no area) says so in its panel. Each area has its method's
    colour (:func:`method_style`; ``method_index``: method name -> its index, see
    :func:`style_index`)."""
    arrays, f = _points(points, front)
    r = _reference_point(reference)
    for name, pts in arrays.items():
        if not np.isfinite(pts).all():
            raise ValueError(f"`points[{name!r}]` contains NaN or inf, so its dominated area is undefined; leave "
                             "out the non-finite points, e.g. `pts[np.isfinite(pts).all(1)]`.")
    if f is not None and not np.isfinite(f).all():
        raise ValueError("`front` contains NaN or inf; pass the finite points of the true front.")
    # the axes are shared: one range for all panels, from every panel's points (checked before
    # any drawing: a range too wide for float64 fails in matplotlib's transforms)
    every = np.concatenate([*arrays.values(), r[None], *([f] if f is not None else [])])
    xlim, ylim = _limits(every[:, 0]), _limits(every[:, 1])
    fig, axes = _grid(len(arrays))
    for k, (ax, (name, pts)) in enumerate(zip(axes, arrays.items())):
        color = method_style(style_index(name, k, method_index))["color"]
        inside = pts[(pts < r).all(1)]
        inside = inside[np.argsort(inside[:, 0])]
        # staircase of the non-dominated points: each adds the rectangle up to the next point's f1
        best = np.inf
        for i, (x, y) in enumerate(inside):
            if y >= best:
                continue
            best = y
            nxt = next((q[0] for q in inside[i + 1:] if q[1] < y), r[0])
            ax.fill_between([x, nxt], [y, y], [r[1], r[1]], color=color, alpha=0.35, lw=0)
        if f is not None:
            ax.plot(f[:, 0], f[:, 1], ".", ms=1.0, color="0.5")
        ax.axvline(r[0], color="0.6", lw=0.8, ls="--")  # the reference box's edges
        ax.axhline(r[1], color="0.6", lw=0.8, ls="--")
        ax.scatter(pts[:, 0], pts[:, 1], s=18, color="k", zorder=3)
        if not len(inside):
            _panel_note(ax, "no point inside the\nreference box (no area)")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_xlim(*xlim)
    axes[0].set_ylim(*ylim)
    return _finish_panels(fig, axes, labels, title, path)
