"""Figures from a results folder (PNG and PDF), rebuilt from the stored files alone.

* ``training_loss`` -- mean best-model training loss per round, mean ± std over seeds;
* ``val_accuracy`` -- validation accuracy (%) per round (federated), at the rounds as stored
  (0-based, as in every other figure);
* ``per_objective`` -- each group's per-objective test accuracy (%, federated) or loss sorted
  worst to best against the objective's rank, mean over seeds at each rank with a ± std band;
  log scale where the values span decades (:func:`most.plots.profile`);
* ``worst_k`` -- worst-20 .. 80 % client accuracy (%) per group, mean ± std over seeds (federated);
  a value missing for a seed (null in ``result.json``) leaves its bar out, marked ``n/a``;
* ``assignment_GROUP`` -- the final plan Gamma of the group's first seed (its first in the file's
  ``seeds``, or ``seed``), objectives grouped by model;
* ``assignment_stack_GROUP`` -- objectives per largest-share model over the rounds, only where
  those counts change (a constant split says nothing);
* ``sparsity_drift`` -- Gamma sparsity, drift summed over the rounds and the share of objectives
  changing model, per round (first seed, or ``seed``);
* ``pareto`` -- each group's models in objective space (two-objective problems).

A group keeps one colour, line style and marker in every figure: its place in the folder's
full list of groups (:func:`most.plots.style_index`), whichever groups a figure leaves out. The
figures of a centralised experiment speak of objectives, those of a federated one of clients.

File names are plain: ``GROUP`` is the group's name in lower case with every run of other
characters than letters and digits made one ``_`` (``MosT server_lr=3`` ->
``most_server_lr_3``), with ``_2``, ``_3`` .. added where two groups' figures would otherwise
share a file (groups ``a-b`` and ``a_b``, or ``MosT`` and ``Stack MosT``, whose
``assignment_stack_most`` would be both ``MosT``'s stack plot and ``Stack MosT``'s Γ).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from .report import check_groups, experiments_of, group_of, group_order, seed_order
from .spec import FEDERATED
from .store import CorruptFileError, RunFolder, check_not_linked

__all__ = ["plot"]


def _save(fig, base: Path, formats, written: list[str]) -> None:
    import matplotlib.pyplot as plt

    from ..plots import save_figure as save

    for fmt in formats:
        path = base.with_name(f"{base.name}.{fmt}")  # not with_suffix: "lr=2.0" and "lr=2.5" stay apart
        save(fig, path)  # written whole or not at all
        written.append(str(path))
    plt.close(fig)


#: the figures drawn once per group, ``PREFIX + GROUP``; a group's part of the name never makes
#: one of them another group's (``assignment_`` + ``stack_most`` is ``assignment_stack_`` + ``most``)
_PER_GROUP = ("assignment_", "assignment_stack_")


def _file_names(groups: list[str]) -> dict[str, str]:
    """Each group's part of a figure's file name: lower case letters, digits and single ``_``
    (``MosT [server_lr=3.0]`` -> ``most_server_lr_3_0``), ``_2``, ``_3`` .. added where a group's
    figure would otherwise have the file name of another group's: the same name, or one of the
    :data:`_PER_GROUP` prefixes plus it equal to another prefix plus the other's name."""
    names: dict[str, str] = {}
    taken: set[str] = set()  # the per-group figures' names so far
    for g in groups:
        base = re.sub(r"[^a-z0-9]+", "_", g.lower()).strip("_") or "group"
        name, k = base, 2
        while any(prefix + name in taken for prefix in _PER_GROUP):
            name, k = f"{base}_{k}", k + 1
        names[g] = name
        taken.update(prefix + name for prefix in _PER_GROUP)
    return names


def _stack(series: Sequence[Sequence[float | None]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std over seeds of per-round series (cut to the shortest; None: NaN)."""
    k = min(len(s) for s in series)
    a = np.asarray([s[:k] for s in series], dtype=float)
    return np.nanmean(a, 0), (np.nanstd(a, 0, ddof=1) if len(a) > 1 else np.zeros(k))


def _number(v) -> float:
    """A stored metric as a float: ``None`` (``most run`` writes NaN and inf as null) is NaN."""
    return float("nan") if v is None else float(v)


def _metrics(folder: RunFolder, result: dict) -> list[dict]:
    """The per-round lines of a finished run, all of them: a file that lost rounds (cut short, or
    emptied) would silently shorten the curves of its whole group, so it is named instead."""
    lines = folder.metrics()
    rounds = result.get("rounds")
    if isinstance(rounds, int) and not isinstance(rounds, bool) and len(lines) < rounds:
        what = "is missing" if not folder.metrics_file.is_file() else f"holds {len(lines)} of its {rounds} rounds"
        raise CorruptFileError(folder.metrics_file, f"the run finished but the file {what}")
    return lines


def plot(results_dir: str | os.PathLike, *, out: str | os.PathLike | None = None,
         formats: tuple[str, ...] = ("png", "pdf"), seed: int | None = None) -> list[str]:
    """Draws the figures of ``results_dir`` into ``out`` (default ``results_dir/figures``) and
    returns the files written.

    The figures of one run per method (the final Γ, the assignment stack, Γ's sparsity and drift,
    the Pareto front) show each method's run of ``seed``; ``None``: its first seed, in the order
    of the experiment file's ``seeds``. The others are over every seed; a group whose runs were
    made with different configurations, or on other data, is refused as ``most report`` refuses
    it (``ValueError``). A folder that holds
    experiments (``OUT`` rather than ``OUT/NAME``), however many, gives each experiment's figures
    apart: into its own ``figures`` folder, or ``out/NAME`` with ``out``."""
    root = Path(results_dir)
    found = experiments_of(root)
    written: list[str] = []
    for home, runs in found.items():
        if len(found) == 1 or any(r is not None for _, _, r in runs):
            folder = home / "figures" if out is None else Path(out) / home.relative_to(root)
            check_not_linked(root if out is None else Path(out), folder)
            written += _plot(home, runs, folder, formats, seed)
    if not written:
        raise FileNotFoundError(f"{root} holds no finished runs yet; nothing to plot.")
    return written


def _shown(by_group: dict[str, list], seed: int | None, order: Sequence[int] = ()) -> dict[str, int]:
    """Each group's index of the run of ``seed``; ``None``: of its first seed in ``order`` (the
    experiment file's seeds), else of its smallest seed."""
    shown = {}
    for g, rs in by_group.items():
        seeds = [c.get("seed") for _, c, _ in rs]
        if seed is None:
            numbers = [s for s in seeds if isinstance(s, int) and not isinstance(s, bool)]
            first = next((s for s in order if s in numbers), min(numbers, default=None))
            shown[g] = seeds.index(first) if first is not None else 0
            continue
        if seed not in seeds:
            raise ValueError(f"{g} has no finished run of seed {seed}; its seeds are "
                             f"{', '.join(str(s) for s in sorted(x for x in seeds if x is not None))}.")
        shown[g] = seeds.index(seed)
    return shown


def _plot(root: Path, all_runs: list, out: Path, formats: tuple[str, ...], seed: int | None = None) -> list[str]:
    from .. import plots
    from ..federated import figures

    check_groups(all_runs)  # the report's check: a curve over seeds is a mean of runs that belong together
    runs = [(f, c, r) for f, c, r in all_runs if r is not None]
    if not runs:
        raise FileNotFoundError(f"{root} holds no finished runs yet; nothing to plot.")
    kind = runs[0][1].get("kind")
    by_group: dict[str, list[tuple[RunFolder, dict, dict]]] = {}
    for run in runs:
        by_group.setdefault(group_of(run), []).append(run)
    by_group = {g: by_group[g] for g in group_order(root, list(by_group))}
    metrics = {g: [_metrics(f, r) for f, _, r in rs] for g, rs in by_group.items()}
    shown = _shown(by_group, seed, seed_order(root))
    index = {g: i for i, g in enumerate(by_group)}  # one colour per group in every figure
    who = "clients" if kind == FEDERATED else "objectives"
    which = "first seed" if seed is None else f"seed {seed}"
    written: list[str] = []

    loss = {g: _stack([[m.get("train_loss") for m in ms] for ms in per_seed]) for g, per_seed in metrics.items()
            if all(per_seed)}
    if loss:
        fig = plots.curves({g: v[0] for g, v in loss.items()},
                           std={g: v[1] for g, v in loss.items()},
                           ylabel="mean best-model training loss", title=f"{root.name}: training", log=True,
                           method_index=index)
        _save(fig, out / "training_loss", formats, written)

    val = {}
    for g, per_seed in metrics.items():
        points = [[(m["round"], m["val_accuracy"]) for m in ms if m.get("val_accuracy") is not None]
                  for ms in per_seed]
        if points and all(points):
            mean, std = _stack([[100 * v for _, v in p] for p in points])
            val[g] = (mean, std, [r for r, _ in points[0][: len(mean)]])  # the rounds as stored
    if val:
        fig = plots.curves({g: v[0] for g, v in val.items()},
                           std={g: v[1] for g, v in val.items()},
                           x={g: v[2] for g, v in val.items()},  # each group's own rounds
                           ylabel="validation accuracy (%), best model per client", title=f"{root.name}",
                           method_index=index)
        _save(fig, out / "val_accuracy", formats, written)

    # each seed's values, sorted apart by the profile: the mean k-th worst objective over seeds
    # (a client without a test sample has no value, None: left out by measured_rows)
    per_obj = {g: plots.measured_rows(r["per_objective"] for _, _, r in rs) for g, rs in by_group.items()
               if all(isinstance(r.get("per_objective"), list) for _, _, r in rs)}
    per_obj = {g: rows for g, rows in per_obj.items() if rows}
    if per_obj and min(len(v[0]) for v in per_obj.values()) >= 3:
        metric = next(iter(by_group.values()))[0][2].get("per_objective_metric", "")
        accuracy = "accuracy" in metric  # in %, higher is better; else a loss
        head = metric.split(" (")[0] or ("accuracy" if kind == FEDERATED else "loss")
        fig = plots.profile(per_obj, ylabel=f"{head} (%)" if accuracy else head, percent=accuracy,
                            higher_is_better=accuracy, xlabel=f"{who} ranked worst → best (percentile)",
                            title=f"{root.name}: per-objective {metric}".rstrip(), method_index=index)
        _save(fig, out / "per_objective", formats, written)

    # per seed: error bars; a value missing for a seed (null) is NaN, its bar drawn as n/a
    table = {g: {k: [_number(r["metrics"].get(k)) for _, _, r in rs] for k in figures.WORST_KEYS}
             for g, rs in by_group.items()}
    table = {g: row for g, row in table.items() if any(np.isfinite(v).any() for v in row.values())}
    if kind == FEDERATED and table:
        fig = figures.worst_k_bars(table, title=f"{root.name}: worst-k % clients",
                                   annotate=len(table) <= 4, method_index=index)
        _save(fig, out / "worst_k", formats, written)

    files = _file_names(list(by_group))
    sparsity: dict[str, list[float]] = {}
    drift: dict[str, list[float]] = {}
    switches: dict[str, np.ndarray | list[float]] = {}
    start: dict[str, int] = {}
    for g, rs in by_group.items():
        folder = rs[shown[g]][0]
        history = metrics[g][shown[g]]
        owners = [m["owners"] for m in history if "owners" in m]
        final = folder.final() if folder.final_file.is_file() else {}
        if "assignment" in final and owners:
            fig = plots.assignment_heatmap(final["assignment"],
                                           title=f"{g}: final Γ (seed {rs[shown[g]][1].get('seed')})")
            _save(fig, out / f"assignment_{files[g]}", formats, written)
            if figures.counts_change(owners):  # else a constant split: nothing to see
                m = final["assignment"].shape[1]
                plans = [torch.nn.functional.one_hot(torch.tensor(o).clamp_min(0), m) * (torch.tensor(o) >= 0)[:, None]
                         for o in owners]
                fig = figures.assignment_stack(plans, title=f"{g}: {who} per model", noun=who,
                                               rounds=[mm["round"] for mm in history if "owners" in mm])
                _save(fig, out / f"assignment_stack_{files[g]}", formats, written)
            sparsity[g] = [m["gamma_sparsity"] for m in history if "gamma_sparsity" in m]
            drift[g] = [m["gamma_drift"] for m in history if "gamma_drift" in m]
            switches[g] = figures.switch_share(owners) if len(owners) >= 2 else []
            start[g] = next(m["round"] for m in history if "gamma_sparsity" in m) if sparsity[g] else 0
    moving = [g for g in sparsity if len(drift.get(g, []))]  # groups with two plans or more (a drift to draw)
    if moving:
        fig = figures.sparsity_drift({g: sparsity[g] for g in moving}, {g: drift[g] for g in moving}, cumulative=True,
                                     start={g: start[g] for g in moving},
                                     switches={g: switches[g] for g in moving if len(switches.get(g, []))},
                                     title=f"{root.name}: Γ over the rounds ({which})", noun=who,
                                     method_index=index)
        _save(fig, out / "sparsity_drift", formats, written)

    fronts = {g: rs[shown[g]][2]["points"] for g, rs in by_group.items() if "points" in rs[shown[g]][2]}
    if fronts:
        ref = next((rs[shown[g]][2].get("reference_point") for g, rs in by_group.items()), None)
        fig = plots.pareto_fronts(fronts, reference=ref, title=f"{root.name}: final models ({which})",
                                  method_index=index)
        _save(fig, out / "pareto", formats, written)
    return written
