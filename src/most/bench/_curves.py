"""A federated results folder in two files: ``results.json`` and ``curves.json``.

``results.json`` holds what the tables and comparisons read: the settings, each run's scalars,
its per-client accuracies and its final assignment, the summaries over seeds and the paired
intervals. ``curves.json`` holds the per-round series that only the figures draw (validation and
loss curves, Γ sparsity and drift, every round's assignment) and, where the table was made with
``--keep-matrices``, each run's per-client, per-model ``matrices`` that :mod:`most.bench._rescore`
scores again under another pick rule; it is about ten times larger, and
a results folder kept in version control can leave it out and redraw the figures by running its
command again. :func:`load_results` joins the two where ``curves.json`` is present.
"""

from __future__ import annotations

import json
from pathlib import Path

#: per-run series that only the figures draw (``plans`` keeps its last round in ``results.json``),
#: and the per-client, per-model matrices a table made with ``--keep-matrices`` keeps
CURVES = ("val_curve", "loss_curve", "sparsity", "drift", "plans", "plan_rounds", "matrices")


def split_curves(results: dict) -> tuple[dict, dict]:
    """``(compact, curves)``: ``results`` without the per-run :data:`CURVES` (each run keeps the
    last round of ``plans``, its final assignment) and those series, method by method and run by
    run in the same order. ``results`` itself is not changed."""
    compact = {**results, "methods": {}}
    curves: dict[str, list[dict]] = {}
    for name, entry in results["methods"].items():
        runs, series = [], []
        for run in entry["runs"]:
            kept = {k: v for k, v in run.items() if k not in CURVES}
            if "plans" in run:
                kept["plans"] = run["plans"][-1:]
            runs.append(kept)
            series.append({k: run[k] for k in CURVES if k in run})
        compact["methods"][name] = {**entry, "runs": runs}
        curves[name] = series
    return compact, {"methods": curves}


def load_results(folder: str | Path) -> dict:
    """The results of ``folder``: its ``results.json``, with each run's series from
    ``curves.json`` where that file is there (a folder without it gives the compact results)."""
    folder = Path(folder)
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    path = folder / "curves.json"
    if not path.is_file():
        return results
    curves = json.loads(path.read_text(encoding="utf-8")).get("methods", {})
    for name, entry in results["methods"].items():
        series = curves.get(name, [])
        if len(series) != len(entry["runs"]):  # a curves.json of another call: not joined
            continue
        for run, more in zip(entry["runs"], series):
            run.update(more)
    return results
