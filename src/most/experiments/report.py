"""Tables from a results folder: mean ± std over seeds, per run group, in markdown and CSV.

A folder that holds several experiments (``most report results``) gives one table per
experiment, each titled with its name and written to its own folder: an experiment of
accuracies is never merged with one of losses.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from pathlib import Path

import numpy as np

from ..checkpoint import atomic_write_text
from .spec import FEDERATED, safe_name
from .store import (CorruptFileError, RunFolder, check_not_linked, describe_data, group_differences, load_runs,
                    on_other_data)

__all__ = ["report", "summary_table"]

_PERCENT = {"mean", "worst20", "worst40", "worst60", "worst80", "oracle"}

#: What each column of a report means (printed under the table).
COLUMNS = {
    "mean": "mean test accuracy over the clients, each with its model chosen on validation (or as its method "
            "picks, said above)",
    **{f"worst{k}": f"mean test accuracy of the worst {k} % of clients" for k in (20, 40, 60, 80)},
    "oracle": "mean test accuracy if each client used its best model on test (an upper bound)",
    "prediction_kl": "mean pairwise symmetric KL divergence between the models' predictions on the test "
                     "inputs (0: the models predict alike)",
    "diversity": "prediction_kl under its former name, in results folders written by earlier versions",
    "seconds": "wall time of a run",
    "loss": "mean over objectives of the best model's loss",
    "worst20_loss": "the same over the worst 20 % of objectives",
    "test_loss": "mean test loss over objectives, each with its model chosen on validation",
    "worst20_test_loss": "the same over the worst 20 % of objectives",
    "train_loss": "mean over objectives of the best model's training loss",
    "hypervolume": "hypervolume of the models' objective vectors from the problem's reference point",
}

Run = tuple[RunFolder, dict, "dict | None"]


def _index(root: Path) -> dict:
    """``root/experiment.json`` (the experiment's name, kind, groups and seeds in the file's
    order), or ``{}`` where it is missing or unreadable (an edited file: the folders' order then)."""
    index = root / "experiment.json"
    if not index.is_file():
        return {}
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def group_order(root: Path, groups: list[str]) -> list[str]:
    """Groups in the order of the experiment (methods, then sweep values), else as found."""
    order = _index(root).get("groups")
    order = [g for g in order if isinstance(g, str)] if isinstance(order, list) else []
    return [g for g in order if g in groups] + [g for g in groups if g not in order]


def seed_order(root: Path) -> list[int]:
    """The seeds of the experiment in its file's order (empty for a folder written before
    ``experiment.json`` listed them)."""
    seeds = _index(root).get("seeds")
    return [s for s in seeds if isinstance(s, int) and not isinstance(s, bool)] if isinstance(seeds, list) else []


def _checked(run: Run) -> Run:
    """``run`` with its result checked: a result.json without a ``metrics`` table of numbers
    (edited, or not written by ``most run``) is named, not reported as a KeyError."""
    folder, config, result = run
    if result is not None:
        metrics = result.get("metrics")
        if not isinstance(metrics, dict) or not all(
                v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in metrics.values()):
            raise CorruptFileError(folder.result_file, "no `metrics` table of numbers in it")
        if any(isinstance(v, float) and not math.isfinite(v) for v in metrics.values()):
            # `most run` writes NaN and inf as null: a non-finite number was put there by hand
            raise CorruptFileError(folder.result_file, "a metric is NaN or infinite, which `most run` never writes")
        seconds = result.get("seconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))):
            raise CorruptFileError(folder.result_file, f"`seconds` is {seconds!r}, not a number")
        per = result.get("per_objective")
        if per is not None and not (isinstance(per, list) and all(
                v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in per)):
            raise CorruptFileError(folder.result_file, "`per_objective` is not a list of numbers")
        names = result.get("objective_names")
        if isinstance(per, list) and isinstance(names, list) and len(per) != len(names):
            raise CorruptFileError(folder.result_file, f"{len(per)} per-objective values for {len(names)} objectives")
        if result.get("status", "done") != "done":
            raise CorruptFileError(folder.result_file, f"its status is {result.get('status')!r}, not 'done'")
    return folder, config, result


def group_of(run: Run) -> str:
    folder, config, result = run
    group = config.get("group")
    if isinstance(group, str) and folder.path.parent.parent.name == "runs" and safe_name(group) != folder.path.parent.name:
        raise CorruptFileError(folder.config_file, f"it is the configuration of group {group!r}, but it lies in "
                               f"the folder of {folder.path.parent.name!r} (copied from another run?)")
    seed, named = config.get("seed"), re.fullmatch(r"seed(\d+)", folder.path.name)
    if named and isinstance(seed, int) and not isinstance(seed, bool) and int(named.group(1)) != seed:
        raise CorruptFileError(folder.config_file, f"it is the configuration of seed {seed}, but it lies in the "
                               f"folder {folder.path.name!r} (copied from another run?)")
    for key, value in (("group", group), ("seed", seed)):  # the result, of the run its folder holds
        if isinstance(result, dict) and key in result and value is not None and result[key] != value:
            raise CorruptFileError(folder.result_file, f"it is the result of {key} {result[key]!r}, but its run is "
                                   f"{key} {value!r} (copied from another run?)")
    return group if isinstance(group, str) else folder.path.parent.name


def _check_group_configs(group: str, runs: list[Run]) -> None:
    """Refuses a group whose runs were made with different configurations (other than the seed),
    or on other data: their mean over seeds would mix two settings. The rule is the one
    ``most run`` applies before a run joins the folder (:func:`~most.experiments.store.group_views`)."""
    diffs = group_differences([config for _, config, _ in runs])
    for (folder, config, _), found in zip(runs, diffs):
        if found:
            first, first_config = runs[0][0], runs[0][1]
            keys = sorted({path.split(".")[0] for path in found})
            data = (f" {first.path.name} ran on {describe_data(first_config)}, {folder.path.name} on "
                    f"{describe_data(config)}." if on_other_data(found) else "")
            raise ValueError(
                f"The runs of group {group!r} were made with different configurations ({first.path.name} and "
                f"{folder.path.name} differ in: {', '.join(keys)}); a mean over them would mix two settings.{data} "
                "Delete the runs that do not belong, or move them to another experiment."
            )


def check_groups(runs: list[Run]) -> None:
    """Refuses any group of ``runs`` (one experiment's) whose runs do not belong together
    (:func:`_check_group_configs`): what a table or a figure averages over seeds."""
    by_group: dict[str, list[Run]] = {}
    for run in runs:
        by_group.setdefault(group_of(run), []).append(run)
    for group, members in by_group.items():
        _check_group_configs(group, members)


def experiments_of(results_dir: str | os.PathLike) -> dict[Path, list[Run]]:
    """The runs under ``results_dir`` by experiment folder (the folder holding ``runs/``), in the
    order found; one entry for an experiment's folder (or a folder inside one, keyed by
    ``results_dir`` itself), and one per experiment for a folder holding experiments, even one."""
    root = Path(results_dir)
    out: dict[Path, list[Run]] = {}
    for run in load_runs(root):
        path = run[0].path
        home = path.parent.parent.parent if path.parent.parent.name == "runs" else root
        if root in home.parents or home == root:
            out.setdefault(home, []).append(_checked(run))
        else:  # ``results_dir`` is inside an experiment (a group's folder): that part of it
            out.setdefault(root, []).append(_checked(run))
    return out


def summary_table(results_dir: str | os.PathLike) -> dict:
    """``{"kind", "groups": {group: {metric: (mean, std, n)}}, "metrics": [...], "unfinished": [...]}``.

    ``std`` is the sample standard deviation over seeds (NaN with one seed). ``results_dir`` is
    one experiment's folder (``results/NAME``) or a folder holding one; for a folder of several, a
    ``ValueError`` lists them.
    """
    root = Path(results_dir)
    found = experiments_of(root)
    if len(found) > 1:
        names = ", ".join(str(home.relative_to(root)) for home in found)
        raise ValueError(f"{root} holds {len(found)} experiments ({names}); make the table of one of them.")
    ((home, runs),) = found.items()
    return _summary(home, runs)


def _summary(root: Path, runs: list[Run]) -> dict:
    values: dict[str, dict[str, list[float]]] = {}
    picks: dict[str, str] = {}
    metrics: list[str] = []
    unfinished, kinds = [], set()
    check_groups(runs)
    for run in runs:
        folder, config, result = run
        group = group_of(run)
        kinds.add(config.get("kind"))
        if result is None:
            unfinished.append(str(folder.path.relative_to(root)))
            continue
        row = values.setdefault(group, {})
        if isinstance(result.get("pick"), str):
            picks[group] = result["pick"]
        for key, value in {**result["metrics"], "seconds": result.get("seconds")}.items():
            if key not in metrics:
                metrics.append(key)
            row.setdefault(key, []).append(math.nan if value is None else float(value))
    groups: dict[str, dict[str, tuple[float, float, int]]] = {}
    for group in group_order(root, list(values)):
        groups[group] = {}
        for key in metrics:
            v = np.asarray(values[group].get(key, []), dtype=float)
            if v.size:
                std = float(v.std(ddof=1)) if v.size > 1 else math.nan
                groups[group][key] = (float(v.mean()), std, int(v.size))
    return {"kind": kinds.pop() if len(kinds) == 1 else None, "groups": groups, "metrics": metrics,
            "unfinished": unfinished, "picks": {g: picks[g] for g in groups if g in picks}}


def _cell(kind, key, stats) -> str:
    if stats is None:
        return ""
    mean, std, _ = stats
    if math.isnan(mean):  # a metric the method has no value of (the oracle of one model per client)
        return "–"
    # percentages to one decimal, other numbers to three significant digits (no float noise)
    scale, fmt = (100.0, "{:.1f}") if kind == FEDERATED and key in _PERCENT else (1.0, "{:.3g}")
    if key == "seconds":
        fmt = "{:.1f}"
    text = fmt.format(mean * scale)
    return text if math.isnan(std) else f"{text} ± {fmt.format(std * scale)}"


def _picks(picks: dict[str, str]) -> str:
    """The groups whose method picks each client's model otherwise (its cluster's, its own, its
    mixture), as the caption's exception; empty when every group picks on validation."""
    from ..federated.methods import FederatedMethod

    other = {g: p for g, p in picks.items() if p != FederatedMethod.pick}
    return "" if not other else " (except: " + "; ".join(f"{g}, {p}" for g, p in other.items()) + ")"


def report(results_dir: str | os.PathLike, *, write: bool = True) -> str:
    """The markdown table of ``results_dir`` (mean ± std over seeds); with ``write``, also
    ``report.md`` and ``report.csv`` in that folder. Returns the markdown.

    A folder that holds experiments (``OUT`` rather than ``OUT/NAME``), however many, gives one
    table per experiment (the same as ``report`` of each): titled with its name, its rows in its
    file's order, and written to its experiment's folder."""
    found = experiments_of(results_dir)
    return "\n".join(_report(home, _summary(home, runs), write=write) for home, runs in found.items())


def _report(root: Path, table: dict, *, write: bool) -> str:
    kind, groups, metrics = table["kind"], table["groups"], table["metrics"]
    seeds = sorted({s[2] for g in groups.values() for s in g.values()})
    lines = [f"# {root.name}", "",
             f"Mean ± sample std over seeds ({', '.join(map(str, seeds)) or 0} per group). "
             + ("Accuracies in %, each client using its model chosen on validation" + _picks(table.get("picks", {}))
                + "." if kind == FEDERATED else "Losses: lower is better."), "",
             "| run | " + " | ".join(metrics) + " |",
             "|---|" + "---:|" * len(metrics)]
    for group, row in groups.items():
        lines.append(f"| {group} | " + " | ".join(_cell(kind, k, row.get(k)) for k in metrics) + " |")
    if not groups:  # no run has finished: no columns to show
        lines = [f"# {root.name}", "", "No run has finished yet, so there is no table."]
    defined = [f"**{k}**: {COLUMNS[k]}" for k in metrics if k in COLUMNS]
    if defined:
        lines += ["", "Columns: " + "; ".join(defined) + "."]
    if table["unfinished"]:
        lines += ["", f"Unfinished runs (not in the table): {', '.join(table['unfinished'])}. "
                      "Continue them with `most run EXPERIMENT.toml --resume`."]
    lines += ["", f"Made by `most report {root}` from the stored run folders."]
    text = "\n".join(lines) + "\n"
    if write:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["run", *[f"{k}_{s}" for k in metrics for s in ("mean", "std")], "seeds"])
        for group, row in groups.items():
            cells = []
            for k in metrics:
                mean, std, _ = row.get(k, (math.nan, math.nan, 0))
                cells += [mean, std]
            writer.writerow([group, *cells, max((s[2] for s in row.values()), default=0)])
        for name in ("report.md", "report.csv"):
            check_not_linked(root, root / name)
        atomic_write_text(root / "report.md", text)
        atomic_write_text(root / "report.csv", buffer.getvalue())
    return text
