"""Figures for federated experiments (matplotlib, Agg backend, PNG).

Every function returns the :class:`matplotlib.figure.Figure` and saves it when ``path`` is
given (via :func:`most.plots.save_figure`; parent folders are created). A method keeps the same
colour, line style and marker (:func:`most.plots.method_style`, in insertion order) within a
figure, no two methods alike, and across figures where ``method_index`` gives each method its
place in the full list of methods (:func:`most.plots.style_index`); legends sit beside the axes,
never over a line.

* :func:`profile` -- per-client values of each method sorted worst to best, against the client's
  rank (:func:`most.plots.profile`); what the drivers draw instead of the radar.
* :func:`radar` -- per-client accuracy of each method on a polar plot (Figure 1 of MosT; kept for
  a few clients, unreadable for 30 or more).
* :func:`curves` -- a metric per round, one line per method, optional ± std bands.
* :func:`worst_k_bars` -- grouped bars of worst-20 .. worst-80 % accuracy per method, in %, with
  error bars over seeds.
* :func:`assignment_stack` -- clients per largest-share model over rounds (Figure 9).
* :func:`sparsity_drift` -- Gamma sparsity, successive-Gamma symmetric KL and (optionally) the
  share of clients changing model, per round (Figure 2).
* :func:`switch_share` -- that share, from each round's largest-share models.

Call ``matplotlib.pyplot.close(fig)`` after saving when making many figures.

Examples:
    >>> import matplotlib.pyplot as plt
    >>> fig = radar({"FedAvg": [0.7, 0.5, 0.9], "MosT": [0.8, 0.7, 0.9]}, title="accuracy")
    >>> type(fig).__name__, len(fig.axes)
    ('Figure', 1)
    >>> plt.close(fig)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from ..plots import (  # noqa: E402
    PALETTE, BarValue, Series, as_series, check_nonempty, curves, grouped_bars, legend_outside, line_order, mark_positions, method_style,
    profile, save_figure, style_index)

if TYPE_CHECKING:
    from matplotlib.lines import Line2D

__all__ = ["profile", "radar", "curves", "worst_k_bars", "assignment_stack", "sparsity_drift", "switch_share",
           "counts_change"]

WORST_KEYS: tuple[str, ...] = ("worst20", "worst40", "worst60", "worst80")


def radar(per_client: Mapping[str, Sequence[float]], *, title: str = "", client_labels: Sequence[str] | None = None,
          ylim: tuple[float, float] | None = None, fill: bool = True, path=None):
    """Per-client accuracy of each method on a polar plot (MosT, Figure 1).

    Readable for a dozen clients or so; with more, or values spanning decades (losses), use
    :func:`profile`, which the drivers draw instead. Clients are spaced around the circle (in
    the given order), one closed line per method.

    Args:
        per_client: method name -> ``[n_clients]`` accuracies (same clients, same order, for all).
        client_labels: tick labels for the clients (default ``0 .. n-1``; with more than 24
            clients only about 24 labels are shown).
        ylim: radial range (default ``(0, max)`` rounded up to 1 when the values look like
            fractions).
        fill: shade each method's polygon lightly.
    """
    check_nonempty(per_client, "per_client")
    data = {name: as_series(v, f"per_client[{name!r}]") for name, v in per_client.items()}
    lengths = {len(v) for v in data.values()}
    if len(lengths) != 1:
        raise ValueError(
            f"every method in `per_client` must have one value per client (same length); got lengths "
            f"{ {k: len(v) for k, v in data.items()} }."
        )
    n = lengths.pop()
    if client_labels is not None and len(client_labels) != n:
        raise ValueError(f"`client_labels` must have {n} entries (one per client); got {len(client_labels)}.")
    theta = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    closed: np.ndarray = np.append(theta, theta[:1])

    fig, ax = plt.subplots(figsize=(5.6, 5.6), subplot_kw={"projection": "polar"})
    for k, (name, v) in enumerate(data.items()):
        style = method_style(k)
        style["marker"] = style["marker"] if n <= 30 else None
        ax.plot(closed, np.append(v, v[:1]), lw=1.6, label=name, ms=3, **style)
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
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.08, 1.0))
    return save_figure(fig, path)


def worst_k_bars(table: Mapping[str, Mapping[str, BarValue]], *, title: str = "", keys: Sequence[str] = WORST_KEYS,
                 ylabel: str | None = None, annotate: bool = False, percent: bool = True,
                 method_index: Mapping[str, int] | None = None, path=None):
    """Grouped bars (:func:`most.plots.grouped_bars`): one group per k (``worst20`` .. ``worst80``),
    one bar per method, with error bars (± one standard deviation over seeds) where the table gives
    several seeds.

    Args:
        table: method name -> ``{"worst20": v, "worst40": v, ...}`` (e.g. from
            :func:`most.federated.evaluation.summarise`; other keys are ignored), each ``v`` a
            number, per-seed values (bar: their mean, error bar: their sample std) or
            ``{"mean": ..., "std": ...}`` (the bench's summaries).
        keys: the groups, in order.
        annotate: write each bar's value above it.
        percent: the values are fractions, drawn in % (the tables print %).
        ylabel: default "accuracy of the worst k % clients (%)" (without "(%)" when not
            ``percent``).
        method_index: method name -> its index for :func:`most.plots.method_style` (see
            :func:`most.plots.style_index`); default: its position in ``table``.
    """
    if ylabel is None:
        ylabel = "accuracy of the worst k % clients" + (" (%)" if percent else "")
    labels = [key.replace("worst", "worst ") + " %" if key.startswith("worst") else key for key in keys]
    return grouped_bars(table, keys, labels=labels, ylabel=ylabel, title=title, annotate=annotate,
                        percent=percent, method_index=method_index, path=path)


def assignment_stack(plans: Sequence, *, title: str = "", rounds: Sequence[float] | None = None,
                     noun: str = "clients", path=None):
    """Clients per largest-share model over rounds, as a stacked area (MosT, Figure 9).

    For each round's plan Gamma ``[n, m]``, each client (row) counts for the model holding its
    largest entry (ties to the lowest index); the m counts are stacked, so the total is n. The
    counts are drawn as steps, each round's over the width of a round centred on it: they change
    at a round, not gradually between two.

    Args:
        plans: one ``[n, m]`` plan per round (tensors or arrays, all the same shape).
        rounds: x values (default ``0 .. len(plans) - 1``).
        noun: what the rows are, for the axis label: ``"clients"`` (federated) or
            ``"objectives"`` (a centralised problem).
    """
    if len(plans) == 0:
        raise ValueError("`plans` must hold at least one plan Gamma of shape [n, m]; got none.")
    mats: list[np.ndarray] = []
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
    xs = np.arange(len(mats)) if rounds is None else as_series(rounds, "rounds")
    if len(xs) != len(mats):
        raise ValueError(f"`rounds` has {len(xs)} entries but there are {len(mats)} plans.")

    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    colors = [PALETTE[j % len(PALETTE)] for j in range(m)]
    if len(mats) == 1:  # a single round: a stacked bar
        bottom = 0
        for j in range(m):
            ax.bar(xs, counts[j], bottom=bottom, color=colors[j], label=f"model {j}", width=0.6)
            bottom = bottom + counts[j]
    else:
        # steps: round t's counts from halfway to the previous round to halfway to the next
        mids = (xs[1:] + xs[:-1]) / 2
        edges = np.concatenate([[xs[0] - (mids[0] - xs[0])], mids, [xs[-1] + (xs[-1] - mids[-1])]])
        ax.stackplot(np.repeat(edges, 2)[1:-1], np.repeat(counts, 2, axis=1), colors=colors,
                     labels=[f"model {j}" for j in range(m)], alpha=0.85)
        ax.set_xlim(edges[0], edges[-1])
    ax.set_ylim(0, n)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel(f"{noun} (largest-share model)")
    ax.set_title(title)
    legend_outside(ax)
    fig.tight_layout()
    return save_figure(fig, path)


def _owners(plans, where: str) -> np.ndarray:
    """``[T, n]`` largest-share model per round: from plans ``[T, n, m]`` or the indices themselves."""
    a = np.asarray([p.detach().cpu().numpy() if isinstance(p, torch.Tensor) else np.asarray(p) for p in plans])
    if a.ndim == 3:
        a = a.argmax(2)
    if a.ndim != 2:
        raise ValueError(f"`{where}` must hold one plan [n, m] or one list of n model indices per round; "
                         f"got shape {a.shape}.")
    return a


def counts_change(plans) -> bool:
    """Whether the number of objectives per largest-share model ever changes over the rounds:
    where it does not (a balanced plan under uniform capacities, say), :func:`assignment_stack`
    is a constant split and says nothing; :func:`switch_share` still tells whether objectives
    trade places. ``plans``: one plan ``[n, m]`` or list of model indices per round."""
    owners = _owners(plans, "plans")
    if len(owners) < 2:
        return False
    m = int(owners.max()) + 1
    counts = np.stack([np.bincount(o[o >= 0], minlength=m) for o in owners])
    return bool((counts != counts[0]).any())


def switch_share(plans) -> np.ndarray:
    """The fraction of objectives whose largest-share model changed since the previous round,
    one value per round after the first: ``plans`` is one plan ``[n, m]`` or one list of the n
    objectives' model indices per round. Constant counts per model (:func:`counts_change`) can
    hide objectives trading places; this shows them.

    Examples:
        >>> switch_share([[0, 1, 1], [0, 1, 0], [0, 1, 0]]).tolist()
        [0.3333333333333333, 0.0]
    """
    owners = _owners(plans, "plans")
    return (owners[1:] != owners[:-1]).mean(1)


def sparsity_drift(sparsity: Mapping[str, Sequence[float]], drift: Mapping[str, Sequence[float]], *,
                   title: str = "", log_drift: bool = False, cumulative: bool = False,
                   switches: Mapping[str, Series] | None = None, start: Mapping[str, int] | None = None,
                   noun: str = "clients", method_index: Mapping[str, int] | None = None, path=None):
    r"""Panels per round: Gamma sparsity (in %) and successive-Gamma symmetric KL (MosT, Figure 2),
    and, with ``switches``, the share of clients changing largest-share model (in %).

    Each method has its own colour, line style and marker (markers staggered, so that methods
    with the same values stay visible); the axes start at 0 (every quantity is non-negative) and
    one legend beside the last panel names them all.

    Args:
        sparsity: method/variant -> :func:`~most.federated.evaluation.gamma_sparsity` per round
            (fractions; rounds ``start .. start + T - 1``).
        drift: method/variant -> :func:`~most.federated.evaluation.gamma_drift` between
            successive plans; a series one shorter than the method's sparsity series is drawn at
            rounds ``start + 1 ..`` (drift at round t compares $\Gamma_{t-1}$ with $\Gamma_t$),
            otherwise from ``start``.
        log_drift: logarithmic y axis for the drift (zeros are not drawn).
        cumulative: draw the drift summed over the rounds so far: a staircase per method whose
            height is the total change and which is flat once Gamma settles (reads better than
            spikes at a few rounds among many zeros).
        switches: method/variant -> fraction of clients whose largest-share model changed, per
            round (:func:`switch_share`), aligned like ``drift``.
        start: method/variant -> the round of its first plan (default 0), so that methods with a
            warm-up line up with the others.
        noun: what the plan's rows are, for the axis label: ``"clients"`` (federated) or
            ``"objectives"`` (a centralised problem).
        method_index: method/variant -> its index for :func:`most.plots.method_style` (see
            :func:`most.plots.style_index`); default: its position among the names.
    """
    check_nonempty(sparsity, "sparsity")
    check_nonempty(drift, "drift")
    switches = switches or {}
    start = start or {}
    names = list(dict.fromkeys([*sparsity, *drift, *switches]))
    panels = 3 if switches else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels + 0.6, 3.8))
    ax_s, ax_d = axes[0], axes[1]
    handles: dict[str, Line2D] = {}
    for position, name in enumerate(names):
        k = style_index(name, position, method_index)
        style = method_style(k)
        first = int(start.get(name, 0))
        n_s = None

        def draw(ax, values, where, shift=0, scale=1.0):
            v = as_series(values, where) * scale
            xs = np.arange(first + shift, first + shift + len(v))
            keep = v > 0 if ax is ax_d and log_drift else np.ones(len(v), bool)
            (line,) = ax.plot(xs[keep], v[keep], lw=1.4, ms=4, markevery=mark_positions(k, int(keep.sum())),
                              label=name, clip_on=False, zorder=line_order(k), **style)
            handles.setdefault(name, line)

        if name in sparsity:
            n_s = len(as_series(sparsity[name], f"sparsity[{name!r}]"))
            draw(ax_s, sparsity[name], f"sparsity[{name!r}]", scale=100.0)
        for ax, series, what in ((ax_d, drift, "drift"), (axes[-1] if switches else None, switches, "switches")):
            if ax is None or name not in series:
                continue
            v = as_series(series[name], f"{what}[{name!r}]")
            shift = 1 if n_s is not None and len(v) == n_s - 1 else 0
            if what == "drift" and cumulative:
                v = np.cumsum(v)
                if shift == 1:  # from 0 at the first plan's round
                    v, shift = np.concatenate([[0.0], v]), 0
            draw(ax, v, f"{what}[{name!r}]", shift=shift, scale=100.0 if what == "switches" else 1.0)
    ax_s.set_ylim(0, 100)
    ax_s.set_ylabel("Γ entries that are zero (%)")
    what = r"symmetric KL($\Gamma_{t-1}$, $\Gamma_t$)"
    ax_d.set_ylabel(f"{what}, summed over rounds" if cumulative else what)
    if log_drift:
        ax_d.set_yscale("log")
    else:
        ax_d.set_ylim(0, max(ax_d.get_ylim()[1], 1e-3))
    if switches:
        axes[-1].set_ylim(0, 100)
        axes[-1].set_ylabel(f"{noun} changing largest-share model (%)")
    for ax in axes:
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    legend_outside(axes[-1], handles=list(handles.values()), labels=list(handles))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)
