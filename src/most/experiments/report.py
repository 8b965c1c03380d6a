"""Tables from a results folder: mean ± std over seeds, per run group, in markdown and CSV."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

import numpy as np

from .spec import FEDERATED
from .store import load_runs

__all__ = ["report", "summary_table"]

_PERCENT = {"mean", "worst20", "worst40", "worst60", "worst80", "oracle"}


def _group_order(root: Path, groups: list[str]) -> list[str]:
    """Groups in the order of the experiment (methods, then sweep values), else as found."""
    order: list[str] = []
    index = root / "experiment.json"
    if index.is_file():
        try:
            order = list(json.loads(index.read_text()).get("groups", []))
        except (json.JSONDecodeError, AttributeError):  # an edited file: fall back to the folders' order
            order = []
    return [g for g in order if g in groups] + [g for g in groups if g not in order]


def summary_table(results_dir: str | os.PathLike) -> dict:
    """``{"kind", "groups": {group: {metric: (mean, std, n)}}, "metrics": [...], "unfinished": [...]}``.

    ``std`` is the sample standard deviation over seeds (NaN with one seed).
    """
    root = Path(results_dir)
    runs = load_runs(root)
    values: dict[str, dict[str, list[float]]] = {}
    metrics: list[str] = []
    unfinished, kinds = [], set()
    for folder, config, result in runs:
        group = config.get("group", folder.path.parent.name)
        kinds.add(config.get("kind"))
        if result is None:
            unfinished.append(str(folder.path.relative_to(root)))
            continue
        row = values.setdefault(group, {})
        for key, value in {**result["metrics"], "seconds": result.get("seconds")}.items():
            if key not in metrics:
                metrics.append(key)
            row.setdefault(key, []).append(math.nan if value is None else float(value))
    groups = {}
    for group in _group_order(root, list(values)):
        groups[group] = {}
        for key in metrics:
            v = np.asarray(values[group].get(key, []), dtype=float)
            if v.size:
                std = float(v.std(ddof=1)) if v.size > 1 else math.nan
                groups[group][key] = (float(v.mean()), std, int(v.size))
    return {"kind": kinds.pop() if len(kinds) == 1 else None, "groups": groups, "metrics": metrics,
            "unfinished": unfinished}


def _cell(kind, key, stats) -> str:
    if stats is None:
        return ""
    mean, std, _ = stats
    scale, fmt = (100.0, "{:.2f}") if kind == FEDERATED and key in _PERCENT else (1.0, "{:.4g}")
    if key == "seconds":
        fmt = "{:.1f}"
    text = fmt.format(mean * scale)
    return text if math.isnan(std) else f"{text} ± {fmt.format(std * scale)}"


def report(results_dir: str | os.PathLike, *, write: bool = True) -> str:
    """The markdown table of ``results_dir`` (mean ± std over seeds); with ``write``, also
    ``report.md`` and ``report.csv`` in that folder. Returns the markdown."""
    root = Path(results_dir)
    table = summary_table(root)
    kind, groups, metrics = table["kind"], table["groups"], table["metrics"]
    seeds = sorted({s[2] for g in groups.values() for s in g.values()})
    lines = [f"# {root.name}", "",
             f"Mean ± sample std over seeds ({', '.join(map(str, seeds)) or 0} per group). "
             + ("Accuracies in %, each client using its model chosen on validation."
                if kind == FEDERATED else "Losses: lower is better."), "",
             "| run | " + " | ".join(metrics) + " |",
             "|---|" + "---:|" * len(metrics)]
    for group, row in groups.items():
        lines.append(f"| {group} | " + " | ".join(_cell(kind, k, row.get(k)) for k in metrics) + " |")
    if table["unfinished"]:
        lines += ["", f"Unfinished runs (not in the table): {', '.join(table['unfinished'])}. "
                      "Continue them with `most run EXPERIMENT.toml --resume`."]
    lines += ["", f"Made by `most report {root}` from the stored run folders."]
    text = "\n".join(lines) + "\n"
    if write:
        (root / "report.md").write_text(text)
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["run", *[f"{k}_{s}" for k in metrics for s in ("mean", "std")], "seeds"])
        for group, row in groups.items():
            cells = []
            for k in metrics:
                mean, std, _ = row.get(k, (math.nan, math.nan, 0))
                cells += [mean, std]
            writer.writerow([group, *cells, max((s[2] for s in row.values()), default=0)])
        (root / "report.csv").write_text(buffer.getvalue())
    return text
