"""A federated results folder in two files: ``results.json`` and ``curves.json``.

``results.json`` holds what the tables and comparisons read: the settings, each run's scalars,
its per-client accuracies and its final assignment, the summaries over seeds and the paired
intervals. ``curves.json`` holds the per-round series that only the figures draw (validation and
loss curves, Γ sparsity and drift, every round's assignment) and, where the table was made with
``--keep-matrices``, each run's per-client, per-model ``matrices`` that :mod:`most.bench._rescore`
scores again under another pick rule; it is about ten times larger, and
a results folder kept in version control can leave it out and redraw the figures by running its
command again. :func:`load_results` joins the two where ``curves.json`` is present, and
:func:`read_json` reads one of them, refusing in one line (:class:`ResultsFileError`) a file that is
not JSON (cut short, say) or a ``results.json`` of another suite (no ``methods``).
"""

from __future__ import annotations

import json
from pathlib import Path

#: per-run series that only the figures draw (``plans`` keeps its last round in ``results.json``),
#: and the per-client, per-model matrices a table made with ``--keep-matrices`` keeps
CURVES = ("val_curve", "loss_curve", "sparsity", "drift", "plans", "plan_rounds", "matrices")


class ResultsFileError(ValueError):
    """A ``results.json`` or ``curves.json`` the federated tools cannot read (the message names the
    file and says what is wrong with it)."""


def read_json(path: str | Path) -> dict:
    """The JSON object of ``path``, a ``results.json`` or ``curves.json`` of a federated results
    folder. Raises :class:`ResultsFileError` where the file is not JSON (a copy or a write cut
    short), or holds no ``methods`` object (another suite's folder, e.g. ``most bench structure``),
    so that a tool given it says so in one line instead of failing later on a missing key."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                               "the file may be cut short: restore it or run its command again.") from None
    except UnicodeDecodeError:
        raise ResultsFileError(f"{path} is not a UTF-8 text file; restore it or run its command again.") from None
    if not isinstance(data, dict) or not isinstance(data.get("methods"), dict):
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ResultsFileError(f"{path} has no 'methods' (it holds {keys}): not a folder written by "
                               "`most bench federated`; pass the output folder of a federated table.")
    return data


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
    ``curves.json`` where that file is there (a folder without it gives the compact results).
    Raises :class:`ResultsFileError` for a file that is not JSON or holds no ``methods``
    (:func:`read_json`)."""
    folder = Path(folder)
    results = read_json(folder / "results.json")
    path = folder / "curves.json"
    if not path.is_file():
        return results
    curves = read_json(path)["methods"]
    for name, entry in results["methods"].items():
        series = curves.get(name, [])
        if len(series) != len(entry["runs"]):  # a curves.json of another call: not joined
            continue
        for run, more in zip(entry["runs"], series):
            run.update(more)
    return results
