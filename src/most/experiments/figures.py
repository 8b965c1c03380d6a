"""Figures from a results folder (PNG and PDF), rebuilt from the stored files alone.

* ``training_loss`` -- mean best-model training loss per round, mean ± std over seeds;
* ``val_accuracy`` -- validation accuracy per round (federated);
* ``radar`` -- per-objective test accuracy (federated) or loss of each group, mean over seeds;
* ``worst_k`` -- worst-20 .. 80 % client accuracy per group (federated);
* ``assignment_GROUP`` -- the final plan Gamma of the group's first seed;
* ``assignment_stack_GROUP`` -- objectives per largest-share model over the rounds;
* ``sparsity_drift`` -- Gamma sparsity and drift per round;
* ``pareto`` -- each group's models in objective space (two-objective problems).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from .report import _experiments, _group_of, _group_order
from .spec import FEDERATED
from .spec import _safe as _safe_name
from .store import CorruptFileError, RunFolder

__all__ = ["plot"]


def _save(fig, base: Path, formats, written: list[str]) -> None:
    import matplotlib.pyplot as plt

    from ..plots import _save as save

    for fmt in formats:
        path = base.with_name(f"{base.name}.{fmt}")  # not with_suffix: "lr=2.0" and "lr=2.5" stay apart
        save(fig, path)  # written whole or not at all
        written.append(str(path))
    plt.close(fig)


def _stack(series: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std over seeds of per-round series (cut to the shortest)."""
    k = min(len(s) for s in series)
    a = np.asarray([s[:k] for s in series], dtype=float)
    return np.nanmean(a, 0), (np.nanstd(a, 0, ddof=1) if len(a) > 1 else np.zeros(k))


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
         formats: tuple[str, ...] = ("png", "pdf")) -> list[str]:
    """Draws the figures of ``results_dir`` into ``out`` (default ``results_dir/figures``) and
    returns the files written.

    A folder of several experiments gives each experiment's figures apart: into its own
    ``figures`` folder, or ``out/NAME`` with ``out``."""
    root = Path(results_dir)
    found = _experiments(root)
    if len(found) == 1:
        return _plot(root, next(iter(found.values())), root / "figures" if out is None else Path(out), formats)
    written: list[str] = []
    for home, runs in found.items():
        if any(r is not None for _, _, r in runs):
            written += _plot(home, runs, home / "figures" if out is None else Path(out) / home.relative_to(root),
                             formats)
    if not written:
        raise FileNotFoundError(f"{root} holds no finished runs yet; nothing to plot.")
    return written


def _plot(root: Path, all_runs: list, out: Path, formats: tuple[str, ...]) -> list[str]:
    from .. import plots
    from ..federated import figures

    runs = [(f, c, r) for f, c, r in all_runs if r is not None]
    if not runs:
        raise FileNotFoundError(f"{root} holds no finished runs yet; nothing to plot.")
    kind = runs[0][1].get("kind")
    by_group: dict[str, list[tuple[RunFolder, dict, dict]]] = {}
    for run in runs:
        by_group.setdefault(_group_of(run), []).append(run)
    by_group = {g: by_group[g] for g in _group_order(root, list(by_group))}
    metrics = {g: [_metrics(f, r) for f, _, r in rs] for g, rs in by_group.items()}
    written: list[str] = []

    loss = {g: _stack([[m.get("train_loss") for m in ms] for ms in per_seed]) for g, per_seed in metrics.items()
            if all(per_seed)}
    if loss:
        fig = plots.curves({g: v[0] for g, v in loss.items()}, std={g: v[1] for g, v in loss.items()},
                           ylabel="mean best-model training loss", title=f"{root.name}: training", log=True)
        _save(fig, out / "training_loss", formats, written)

    val = {}
    for g, per_seed in metrics.items():
        points = [[(m["round"], m["val_accuracy"]) for m in ms if m.get("val_accuracy") is not None]
                  for ms in per_seed]
        if points and all(points):
            mean, std = _stack([[v for _, v in p] for p in points])
            val[g] = (mean, std, [r + 1 for r, _ in points[0][: len(mean)]])
    if val:
        fig = plots.curves({g: v[0] for g, v in val.items()}, std={g: v[1] for g, v in val.items()},
                           x={g: v[2] for g, v in val.items()},  # each group's own rounds
                           ylabel="validation accuracy (best model per client)", title=f"{root.name}")
        _save(fig, out / "val_accuracy", formats, written)

    per_obj = {g: np.mean([r["per_objective"] for _, _, r in rs], 0) for g, rs in by_group.items()
               if all(isinstance(r.get("per_objective"), list) for _, _, r in rs)
               and len({len(r["per_objective"]) for _, _, r in rs}) == 1}
    if per_obj and len({len(v) for v in per_obj.values()}) == 1 and len(next(iter(per_obj.values()))) >= 3:
        metric = next(iter(by_group.values()))[0][2].get("per_objective_metric", "")
        fig = figures.radar(per_obj, title=f"{root.name}: per-objective {metric}")
        _save(fig, out / "radar", formats, written)

    table = {g: {k: float(np.mean([r["metrics"][k] for _, _, r in rs])) for k in figures.WORST_KEYS}
             for g, rs in by_group.items() if all(r["metrics"].get(k) is not None for _, _, r in rs
                                                  for k in figures.WORST_KEYS)}
    if kind == FEDERATED and table:
        fig = figures.worst_k_bars(table, title=f"{root.name}: worst-k % clients", annotate=len(table) <= 4)
        _save(fig, out / "worst_k", formats, written)

    sparsity, drift = {}, {}
    for g, rs in by_group.items():
        folder = rs[0][0]
        history = metrics[g][0]
        owners = [m["owners"] for m in history if "owners" in m]
        final = folder.final() if folder.final_file.is_file() else {}
        if "assignment" in final and owners:
            fig = plots.assignment_heatmap(final["assignment"], title=f"{g}: final Γ (seed {rs[0][1].get('seed')})")
            _save(fig, out / f"assignment_{_safe_name(g)}", formats, written)
            m = final["assignment"].shape[1]
            plans = [torch.nn.functional.one_hot(torch.tensor(o).clamp_min(0), m) * (torch.tensor(o) >= 0)[:, None]
                     for o in owners]
            fig = figures.assignment_stack(plans, title=f"{g}: objectives per model",
                                           rounds=[mm["round"] for mm in history if "owners" in mm])
            _save(fig, out / f"assignment_stack_{_safe_name(g)}", formats, written)
            sparsity[g] = [m["gamma_sparsity"] for m in history if "gamma_sparsity" in m]
            drift[g] = [m["gamma_drift"] for m in history if "gamma_drift" in m]
    if sparsity and all(len(d) for d in drift.values()):
        fig = figures.sparsity_drift(sparsity, drift, title=f"{root.name}: Γ over rounds")
        _save(fig, out / "sparsity_drift", formats, written)

    points = {g: rs[0][2]["points"] for g, rs in by_group.items() if "points" in rs[0][2]}
    if points:
        ref = next((rs[0][2].get("reference_point") for rs in by_group.values()), None)
        fig = plots.pareto_fronts(points, reference=ref, title=f"{root.name}: final models (first seed)")
        _save(fig, out / "pareto", formats, written)
    return written
