"""A federated table scored again under another pick rule, from the runs' matrices.

Each client of a federated table is scored on one of the m models: the paper's protocol takes
its most accurate model on validation, the first of them where several are equally accurate.
With ``most bench federated --keep-matrices`` every run keeps each client's validation and test
accuracy and selection loss on every model (``matrices``; :func:`most.bench.federated._matrices`),
and :func:`rescore` scores the same runs under another rule of :data:`PICK_RULES`, so that a
change of protocol needs no run made again. The server step of each seed stays the one chosen
on validation accuracy (the mean over the clients of their best model's, which no tie-break
changes). Runs of methods that assign each client its model (a cluster, a group, a mixture, a
model of its own) keep their scores: no rule re-picks for them.

    python benchmarks/federated_tools.py rescore bench_out/fed --pick validation-then-loss \\
        --out bench_out/fed_ties
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

import numpy as np

from ..federated import evaluation as ev
from ._federated_report import PICK_RULE_WORDS, add_summaries

__all__ = ["PICK_RULES", "RescoreError", "rescore", "rescore_folder", "repick"]


def _validation(val, loss):
    # as the runtime picks (most.federated.server.choose_models): a client without validation
    # samples (an all-NaN row) takes its lowest-loss model where it has a loss
    choice = ev.select_models(val)
    if loss is not None:
        by_loss = np.isnan(val).all(1) & ~np.isnan(loss).any(1)
        choice = np.where(by_loss, ev.select_by_loss(loss), choice)
    return choice


def _validation_then_loss(val, loss):
    return ev.select_models(val, loss=loss)


def _loss(val, loss):
    return ev.select_by_loss(loss)


#: name -> (rule, what the table says of it): ``rule(val_accuracy, selection_loss) -> [n]``
#: indices, with NaN where a client has no validation sample (or no loss)
PICK_RULES: dict[str, tuple[Callable, str]] = {
    name: (rule, PICK_RULE_WORDS[name])
    for name, rule in (("validation", _validation), ("validation-then-loss", _validation_then_loss), ("loss", _loss))}


class RescoreError(ValueError):
    """Results that cannot be scored again: no matrices kept, or an unknown rule."""


def repick(run: dict, pick: str) -> dict:
    """The entry of one run (a record of :func:`most.bench.federated._record` with ``matrices``)
    with each client's model picked by ``pick`` and every accuracy of the pick scored again:
    ``mean``, the worst-k %, ``pooled``, ``choice_counts``, ``per_client`` and, with planted
    groups, ``group_ari``. The loss pick's columns, the oracle and the rest are kept. ``run``
    itself is not changed."""
    rule = _rule(pick)
    out = copy.deepcopy(run)
    if "failed" in run:  # every candidate failed: nothing to pick from
        return out
    if "matrices" not in run:
        raise RescoreError(f"The run of seed {run.get('seed')} keeps no per-client, per-model matrices; make the "
                           "table with `most bench federated --keep-matrices` to score it under another pick rule.")
    mats = run["matrices"]
    if mats["assigned"]:  # the method gives each client its model
        return out
    val = _array(mats["val_accuracy"])
    test = _array(mats["test_accuracy"])
    loss = None if mats["selection_loss"] is None else _array(mats["selection_loss"])
    if loss is None and pick != "validation":
        raise RescoreError(f"The run of seed {run.get('seed')} has no selection loss (its engine did not measure "
                           f"the final models' training loss), so the rule {pick!r} cannot score it.")
    choice = np.asarray(rule(val, loss), dtype=np.int64)
    # a client without test samples (NaN) is left out of the summary, as the bench leaves it out
    summary = ev.summarise(val, test, choice=choice, sizes=mats["test_sizes"])
    out.update({k: v for k, v in summary.items() if k != "oracle"})
    out["per_client"] = ev.client_accuracy(test, choice).tolist()
    if mats.get("groups") is not None and "group_ari" in run:
        out["group_ari"] = ev.adjusted_rand_index(choice.tolist(), mats["groups"])
    out["matrices"]["choice"] = choice.tolist()
    return out


def rescore(results: dict, pick: str) -> dict:
    """``results`` (a federated results dict, joined with its ``curves.json``:
    :func:`most.bench._curves.load_results`) with every method's runs scored under ``pick``
    (:func:`repick`), the summaries over seeds and MosT's paired intervals made again, and
    ``pick_rule`` set to ``pick``. ``results`` itself is not changed.

    Raises :class:`RescoreError` for an unknown rule, or where a run keeps no matrices."""
    _rule(pick)
    missing = [name for name, e in results["methods"].items()
               if any("matrices" not in r and "failed" not in r for r in e["runs"])]
    if missing:
        raise RescoreError(f"The runs of {missing} keep no per-client, per-model matrices (their curves.json, where "
                           "they are kept, is missing, or the table was made without them); make the table with "
                           "`most bench federated --keep-matrices` to score it under another pick rule.")
    out = copy.deepcopy(results)
    for entry in out["methods"].values():
        entry["runs"] = [repick(r, pick) for r in entry["runs"]]  # add_summaries makes their summaries again
    for key in ("paired_vs_most", "paired_vs_most_loss_pick"):
        out.pop(key, None)
    out["pick_rule"] = pick
    add_summaries(out)
    return out


def rescore_folder(src: str | Path, out: str | Path, pick: str) -> dict:
    """Reads the results folder ``src`` (``results.json`` and its ``curves.json``), scores it under
    ``pick`` (:func:`rescore`) and writes ``results.json``, ``curves.json``, ``table.md`` and the
    figures to ``out``, which must be another folder (the measured folder is never rewritten).
    Returns the rescored results."""
    from . import write_results
    from ._curves import ResultsFileError, load_results, split_curves
    from ._federated_report import draw_figures, table_markdown

    src, out = Path(src), Path(out)
    _rule(pick)
    if not (src / "results.json").is_file():
        raise RescoreError(f"{src} holds no results.json; give the output folder of a `most bench federated` call.")
    if out.resolve() == src.resolve():
        raise RescoreError(f"--out is the folder read ({src}); give another folder, so that the measured table "
                           "stays as it is.")
    if out.exists() and not out.is_dir():
        raise RescoreError(f"--out {out} is a file; give a folder.")
    try:
        loaded = load_results(src)
    except ResultsFileError as exc:  # cut short, or another suite's folder
        raise RescoreError(str(exc)) from None
    results = rescore(loaded, pick)
    return write_results(results, out, draw_figures, table_markdown, split=split_curves)


def _rule(pick: str) -> Callable:
    if pick not in PICK_RULES:
        raise RescoreError(f"Unknown pick rule {pick!r}; choose one of {', '.join(map(repr, PICK_RULES))}.")
    return PICK_RULES[pick][0]


def _array(rows) -> np.ndarray:
    """A stored ``[n, m]`` matrix (JSON: null for NaN) as floats."""
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)
