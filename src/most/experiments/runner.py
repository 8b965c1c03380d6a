"""Runs an experiment's runs into the results store, skipping finished ones and resuming
interrupted ones from their checkpoints."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence, cast

import numpy as np
import torch

from .._kernels import cpu_kernels
from ..checkpoint import atomic_write_text
from ..config import ConfigError, to_plain
from .spec import CENTRALISED, FEDERATED, Experiment, RunSpec, check_runs, data_key, reads_files
from .._json import dumps
from .store import (DATA_DIGEST, DATA_PATH, SETTING_KEYS, BusyFolderError, RunFolder, WriterLock, check_no_links,
                    check_not_linked, describe_data, group_differences, is_run_config, missing_folders, on_other_data,
                    remove_leftovers, remove_unwritten)

if TYPE_CHECKING:
    from ..federated import FederatedResult
    from ..solver import Result

__all__ = ["run_experiment", "execute", "execute_batch", "batch_groups", "fingerprint", "InterruptedRunsError"]


class InterruptedRunsError(RuntimeError):
    """Some runs have checkpoints from an interrupted run; the caller must choose resume or restart."""


def _versions() -> dict:
    import most

    return {"most": most.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "cpu_kernels": cpu_kernels()}


def _owners(plan: torch.Tensor) -> list[int]:
    # the curriculum can leave an objective without mass in a round: -1
    owners = plan.argmax(1)
    return torch.where(plan.sum(1) > 0, owners, torch.full_like(owners, -1)).tolist()


def _plan_stats(plan: torch.Tensor | None, previous: torch.Tensor | None) -> dict:
    from ..federated import evaluation as ev

    if plan is None:
        return {}
    out = {"gamma_sparsity": ev.gamma_sparsity(plan), "owners": _owners(plan)}
    if previous is not None and previous.shape == plan.shape:
        out["gamma_drift"] = ev.gamma_drift(previous, plan, skip_empty=True)
    return out


def execute(run: RunSpec, folder: RunFolder, *, checkpoint_every: int = 10, progress: bool = True,
            data_cache: dict | None = None) -> dict:
    """Runs one run into ``folder`` (resuming from its checkpoint if there is one) and returns
    its result (also written to ``result.json``)."""
    objects, checkpoint, start, previous = _prepare(run, folder, checkpoint_every, data_cache)
    state = _clock({"previous": previous}, folder, start)
    if run.kind == FEDERATED:
        result = _federated(run, objects, folder, checkpoint, progress, state)
    else:
        result = _centralised(run, objects, folder, checkpoint, progress, state)
    return _finish(run, folder, checkpoint, result, start, _elapsed(state))


def execute_batch(items: list[tuple[RunSpec, RunFolder]], *, checkpoint_every: int = 10, progress: bool = True,
                  data_cache: dict | None = None) -> list[dict]:
    """Runs the runs of a group of :func:`batch_groups` as one batched job, each into its own
    folder, resuming each from its own checkpoint; returns their results (each also written to
    its ``result.json``), in order. Federated runs that share their data, model and the settings
    of :data:`~most.federated.runtime.BATCH_SHARED` train together
    (:func:`~most.federated.run_batch`); centralised runs on the same problem go in step
    (:func:`~most.fit_batch`). A run whose training diverged does not stop the others: their
    results are written, then its error is raised (its folder keeps its checkpoint). Each run's
    seconds are the batch's, shared equally."""
    prepared = [_prepare(run, folder, checkpoint_every, data_cache) for run, folder in items]
    objects = prepared[0][0]
    states = [_clock({"previous": previous}, folder, start, share=len(items))
              for (_, folder), (_, _, start, previous) in zip(items, prepared)]
    checkpoints = [c for _, c, _, _ in prepared]
    results: Sequence[FederatedResult | Result | Exception]
    if items[0][0].kind == FEDERATED:
        from ..federated.runtime import run_batch

        def on_round(r, log, params):
            _append_round(items[r][1], log, states[r])

        results = run_batch(objects["data"], objects["model"], [(o["method"], o["config"]) for o, _, _, _ in prepared],
                            progress=progress, callback=on_round, checkpoints=checkpoints,
                            description=f"{len(items)} runs of {objects['data'].name}", errors="return")
        finish = lambda run, o, folder, result: _federated_result(run, o["data"], folder, result,  # noqa: E731
                                                                  o["method"])
    else:
        from ..solver import fit_batch

        source, train = _centralised_problem(objects)
        results = fit_batch(train, [o["method"] for o, _, _, _ in prepared], progress=progress, errors="return",
                            callbacks=[_centralised_round(folder, state) for (_, folder), state in zip(items, states)],
                            checkpoints=checkpoints)
        finish = lambda run, o, folder, result: _centralised_result(source, train, folder, result)  # noqa: E731
    out, failed = [], None
    for (run, folder), (o, checkpoint, start, _), result, state in zip(items, prepared, results, states):
        if isinstance(result, Exception):
            failed = failed or result
            continue
        out.append(_finish(run, folder, checkpoint, finish(run, o, folder, result), start, _elapsed(state)))
    if failed is not None:
        raise failed
    return out


def batch_groups(items: list[tuple[RunSpec, RunFolder]]) -> list[list[tuple[RunSpec, RunFolder]]]:
    """``items`` in groups that can train as one batch (:func:`execute_batch`): in-process
    federated runs with the same data, model and shared settings, and centralised runs on the
    same problem; every other run alone. Groups come in the order of their first run."""
    from ..federated.runtime import batch_key

    groups: dict[object, list] = {}
    for k, (run, folder) in enumerate(items):
        key: object = k
        if run.kind == FEDERATED and run.config.get("engine", "in-process") == "in-process":
            key = (data_key(run), batch_key(run.build_without_data()["config"]))
        elif run.kind == CENTRALISED:
            key = (CENTRALISED, data_key(run))
        groups.setdefault(key, []).append((run, folder))
    return list(groups.values())


def _prepare(run: RunSpec, folder: RunFolder, checkpoint_every: int, data_cache: dict | None):
    """A run's folder made ready (its checkpoint found, or the folder reset; its config
    written) and its objects built: ``(objects, checkpoint, start round, previous plan)``."""
    folder.path.mkdir(parents=True, exist_ok=True)
    folder.check_no_legacy_checkpoint()
    checkpoint = folder.checkpoint(checkpoint_every, fingerprint=fingerprint(run))
    start, previous = 0, None
    if checkpoint.exists():  # checked against this run's configuration and seed before anything is loaded
        saved = cast(dict, checkpoint.load(torch.Generator()))  # a dict: the file exists
        start, history = int(saved["round"]), saved["history"]
        previous = history[-1]["plan"] if history else None  # for the first resumed round's gamma_drift
        folder.keep_metrics_before(start)
    else:
        folder.reset()
    objects = _load(run, data_cache if data_cache is not None else {})
    config = dict(run.config, label=run.label, group=run.group, kind=run.kind, sweep=run.sweep,
                  run_seed_in=list(run.run_seed_in),
                  **(_data_identity(run, *_identity_of(objects["data"])) if "data" in objects
                     else _data_identity(run, None)),
                  resolved=to_plain({k: v for k, v in objects.items() if k in ("method", "config")}),
                  versions=_versions())
    folder.write_config(config)
    return objects, checkpoint, start, previous


def _clock(state: dict, folder: RunFolder, start: int, share: int = 1) -> dict:
    """``state`` with the run's clock: the seconds of its earlier segments (a resumed run's, up to
    its checkpoint's round), the start of this one, and the number of runs sharing its wall time."""
    state.update(prior=folder.elapsed_before(start), tic=time.perf_counter(), share=share)
    return state


def _elapsed(state: dict) -> float:
    """The seconds a run has taken, across its resumed segments (a batch's time shared equally)."""
    return state["prior"] + (time.perf_counter() - state["tic"]) / state["share"]


def _finish(run: RunSpec, folder: RunFolder, checkpoint, result: dict, start: int, seconds: float) -> dict:
    result.update(seconds=seconds, resumed_from_round=start, label=run.label, group=run.group,
                  seed=run.seed, sweep=run.sweep)
    folder.write_result(result)
    checkpoint.remove()
    return result


def fingerprint(run: RunSpec) -> dict:
    """What identifies a run for resuming: its whole configuration as written in the file
    (defaults included by the loop's own settings), its group and its seed. The data itself is
    compared by its digest: by the loop's own settings when it loads the checkpoint, and before
    any work by the digest each run's ``config.json`` records (:func:`_check_stored`)."""
    return {"config": json.loads(dumps(run.config)), "group": run.group, "seed": run.seed}


def _data_identity(run: RunSpec, digest: str | None, source: str | None = None) -> dict:
    """What ``config.json`` records of the data beside its table: the loaded data's ``digest``
    (where known) and the folder it was read from: ``data.path`` resolved (from the working
    folder, for a relative one), else the loaded data's ``source`` (the folder its loader found
    through an environment variable)."""
    out: dict = {}
    path = run.config.get("data", {}).get("path") if run.kind == FEDERATED else None
    if isinstance(path, str):
        out[DATA_PATH] = os.path.realpath(os.path.expanduser(path))
    elif isinstance(source, str):
        out[DATA_PATH] = source
    if digest is not None:
        out[DATA_DIGEST] = digest
    return out


def _identity_of(data) -> tuple[str, str | None]:
    """``(digest, source)`` of a loaded federated data set: what :func:`_data_identity` records."""
    return data.digest(), data.source



def _load(run: RunSpec, cache: dict) -> dict:
    key = data_key(run)
    objects = run.build_without_data()
    if key not in cache:
        cache.clear()  # one data set in memory at a time
        cache[key] = run.load_data()
    objects.update(cache[key])
    return objects


def _append_round(folder: RunFolder, log, state: dict) -> None:
    """Appends a federated round's line to the run's ``metrics.jsonl``; ``state["previous"]``
    carries the last plan (for the drift of Γ)."""
    line = {"round": log.round, "train_loss": log.train_loss, "val_accuracy": log.val_accuracy,
            **_plan_stats(log.plan, state["previous"]), "seconds": log.seconds, "elapsed": _elapsed(state)}
    state["previous"] = log.plan
    folder.append_metrics(line)


def _federated(run, objects, folder, checkpoint, progress, state: dict) -> dict:
    from ..federated.runtime import run_federated

    def on_round(log, params):
        _append_round(folder, log, state)

    data, model = objects["data"], objects["model"]
    description = f"{run.group} seed {run.seed}"
    result: FederatedResult
    if run.config.get("engine") == "flower":  # Flower runs are not checkpointed: an interrupted one starts again
        from ..flower import run_simulation

        result = run_simulation(data, model, objects["method"], objects["config"], progress=progress,
                                callback=on_round, description=description)
    else:
        result = run_federated(data, model, objects["method"], objects["config"], progress=progress,
                               callback=on_round, description=description, checkpoint=checkpoint)
    return _federated_result(run, data, folder, result, objects["method"])


def _federated_result(run, data, folder, result, method) -> dict:
    """A finished federated run's summary (and its final arrays, written to the folder), with how
    each client's model was picked (the method's ``pick``: its best on validation, or the model
    its method assigns it, its own, or its mixture)."""
    from ..federated import evaluation as ev

    # clients without test samples have no accuracy: left out of the summary, not counted as 0 %
    tested = result.tested
    val, test = result.val_accuracy[tested].nan_to_num(-1.0), result.test_accuracy[tested]
    summary = ev.summarise(val, test, choice=result.choice[tested])
    plans = [log.plan for log in result.history if log.plan is not None]
    final = {"params": result.params, "assignment": plans[-1] if plans else None,
             "val_accuracy": result.val_accuracy, "test_accuracy": result.test_accuracy, "choice": result.choice}
    if result.mixture is not None:
        final["mixture"] = result.mixture
    folder.write_final(final)
    metrics = {k: summary[k] for k in ("mean", "worst20", "worst40", "worst60", "worst80", "oracle")}
    if method.personal or result.mixture is not None:
        metrics["oracle"] = None  # one model per client, or a mixture: no best single model on test
    metrics["prediction_kl"] = result.prediction_diversity()
    return {"status": "done", "kind": FEDERATED, "metrics": metrics, "choice_counts": summary["choice_counts"],
            "per_objective": result.client_accuracy.tolist(), "objective_names": list(data.client_ids),
            "tested_clients": result.n_tested,
            "per_objective_metric": f"test accuracy (each client's model: {method.pick})", "pick": method.pick,
            "timings": result.timings(),
            "rounds": len(result.history)}


def _centralised_problem(objects: dict) -> tuple:
    """``(source, train)``: the loaded problem and the problem the methods fit (a mixed
    regression's training split)."""
    from ..problems import MixedRegression

    source = objects["problem"]
    return source, source.problem("train") if isinstance(source, MixedRegression) else source


def _centralised_round(folder: RunFolder, state: dict):
    """A centralised run's ``fit`` callback: appends each round's line to ``metrics.jsonl``;
    ``state["previous"]`` carries the last plan (for the drift of Γ)."""
    from .. import metrics as M

    def on_round(record, params):
        best = record.losses.min(1).values
        line = {"round": record.round, "train_loss": float(best.mean()),
                "worst20_train_loss": M.worst_fraction_mean(best, 0.2),
                **_plan_stats(record.plan, state["previous"]),
                "seconds": {"transport": record.transport_seconds, "min_norm": record.min_norm_seconds,
                            "gradients": record.gradient_seconds}, "elapsed": _elapsed(state)}
        state["previous"] = record.plan
        folder.append_metrics(line)

    return on_round


def _centralised(run, objects, folder, checkpoint, progress, state: dict) -> dict:
    source, train = _centralised_problem(objects)
    method = objects["method"]
    if progress:
        method = dataclasses.replace(method, progress=True)
    result = method.fit(train, callback=_centralised_round(folder, state), checkpoint=checkpoint)
    return _centralised_result(source, train, folder, result)


def _centralised_result(source, train, folder: RunFolder, result) -> dict:
    """A centralised run's result: test (or best-model) losses, and its final models saved."""
    from .. import metrics as M
    from ..problems import MixedRegression

    splits = isinstance(source, MixedRegression)
    out = {"status": "done", "kind": CENTRALISED, "timings": result.timings(), "rounds": len(result.history)}
    if splits:
        per = source.test_losses(result.params)
        out["metrics"] = {"test_loss": float(per.mean()), "worst20_test_loss": M.worst_fraction_mean(per, 0.2),
                          "train_loss": float(train.loss_matrix(result.params).min(1).values.mean())}
        out["per_objective_metric"] = "test loss (model chosen on validation)"
    else:
        losses = train.loss_matrix(result.params)  # the original objectives (MosT-E trains on mixtures)
        per = losses.min(1).values
        out["metrics"] = {"loss": float(per.mean()), "worst20_loss": M.worst_fraction_mean(per, 0.2)}
        out["per_objective_metric"] = "loss of the best model"
        if train.n_objectives == 2:
            points = losses.T  # [m, 2]: each model's two objective values
            out["points"] = points.tolist()
            ref = train.metadata.get("reference_point") if train.metadata else None
            if ref is not None:
                out["metrics"]["hypervolume"] = float(M.hypervolume(points, ref))
                out["reference_point"] = [float(r) for r in ref]
    out["per_objective"] = per.tolist()
    out["objective_names"] = list(train.names) if train.names else [str(i) for i in range(len(per))]
    folder.write_final({"params": result.params, "assignment": result.assignment, "losses": result.losses})
    return out


def _made(run: RunSpec, digests: dict, seed=None) -> dict:
    """``run``'s configuration as its file makes the run of ``seed`` (default: ``run``'s own),
    as ``config.json`` records it: with its kind, ``seed`` as the seed of the tables that take the
    run's (:attr:`RunSpec.run_seed_in`), and the data's identity (its digest where it is loaded in
    ``digests``, or the same for every seed; the folder it was read from, which is every seed's).
    A stored run of that seed made from the same file, on the same data, has the same."""
    config = dict(json.loads(dumps(run.config)), kind=run.kind)
    if seed is not None and seed != run.seed:
        config["seed"] = seed
        for table in run.run_seed_in:
            config[table] = dict(config[table], seed=seed)
    same_data = seed is None or seed == run.seed or "data" not in run.run_seed_in
    digest, source = digests.get(data_key(run), (None, None))
    config.update(_data_identity(run, digest if same_data else None, source))
    return config


def _refusal(folder: RunFolder, what: str, diffs: list[str], stored: dict, made: dict) -> ConfigError:
    """The one-line refusal of a stored run that does not belong with this file's runs."""
    if on_other_data(diffs):
        digest = DATA_DIGEST in diffs  # else the data is each run's own (its seed's): judged by its path
        how = "" if digest else (" (the data follows the run seed, so runs of other seeds are compared by the folder "
                                 "the data was read from: the same files under another path count as other data)")
        return ConfigError(
            f"{folder.path} {what} made on other data than this file's runs read now (then {describe_data(stored, digest)}; "
            f"now {describe_data(made, digest)}){how}. Give data.path the data the runs were made with (a relative path "
            "is read from the working folder), or write to another --out, or rename the experiment (`name = ...`).")
    return ConfigError(
        f"{folder.path} {what} made with a different configuration (differs in: {', '.join(diffs[:5])}); the "
        "report would average it with this file's runs. Rename the experiment (`name = ...`), write to another "
        "--out, or delete that folder.")


def _check_stored(experiment: Experiment, root: Path, folders: list[tuple[RunSpec, RunFolder]], digests: dict, *,
                  data: bool, resume: bool) -> None:
    """Refuses the stored runs that do not belong with this file's runs, by the rule of the report
    (:func:`~most.experiments.store.group_views`): a finished run of this file's (kept, not made
    again) made otherwise than the file makes it now; an interrupted one that ``resume`` would
    continue; and, group by group, the runs the folder will hold once these are made (the runs of
    other seeds the file does not list, the finished ones kept, the others as made now) where a
    report would refuse to average them. ``data=False``: the checks that need no loaded data."""
    listed = {run.folder for run in experiment.runs}
    for run, folder in folders:
        stored = folder.stored_config()
        if stored is None or not (folder.status == "done" or (resume and folder.status == "interrupted")):
            continue
        made = _made(run, digests)
        diffs = group_differences([made, stored], data=data)[1]
        if diffs:
            what = "holds a finished run" if folder.status == "done" else "holds an interrupted run"
            raise _refusal(folder, what, diffs, stored, made)
    groups: dict[str, list[tuple[RunSpec, RunFolder]]] = {}
    for run, folder in folders:
        groups.setdefault(run.group, []).append((run, folder))
    for name, members in groups.items():
        new = [_made(run, digests) for run, folder in members if folder.status != "done"]
        kept: list[tuple[RunFolder, dict]] = [(folder, config) for _, folder in members
                                              if folder.status == "done" and (config := folder.stored_config())]
        home = root / "runs" / members[0][1].path.parent.name
        for config_file in sorted(home.glob("seed*/config.json")) if home.is_dir() else []:
            folder = RunFolder(config_file.parent)
            other = folder.stored_config()
            if f"{home.name}/{folder.path.name}" not in listed and other is not None and is_run_config(other):
                kept.append((folder, other))
        if not kept:
            continue
        for (folder, config), found in zip(kept, group_differences([*new, *(c for _, c in kept)], data=data)[len(new):]):
            if found:
                what = f"is a {'finished' if folder.status == 'done' else 'unfinished'} run of {name!r}"
                raise _refusal(folder, what, found, config, _made(members[0][0], digests))


def _check_other_groups(experiment: Experiment, root: Path, digests: dict, *, data: bool) -> None:
    """Refuses finished runs in the folder, of groups this file does not have, made on another
    problem or data: the report would set their rows beside this file's as if comparable (two
    files with one ``name``). A stored run of seed N is compared with this file's runs as the
    file makes them for seed N, by the rule of :func:`~most.experiments.store.group_views` on
    :data:`~most.experiments.store.SETTING_KEYS`."""
    ours = {run.group for run in experiment.runs}
    runs = root / "runs"
    for config_file in sorted(runs.glob("*/seed*/config.json")) if runs.is_dir() else []:
        folder = RunFolder(config_file.parent)
        stored = folder.stored_config()
        if folder.status != "done" or not isinstance(stored, dict) or stored.get("group") in ours:
            continue
        found = []
        for run in experiment.runs:
            made = _made(run, digests, stored.get("seed"))
            found.append((group_differences([made, stored], SETTING_KEYS, data=data)[1], made))
            if not found[-1][0]:
                break
        else:
            diffs, made = found[0]
            if on_other_data(diffs):
                raise _refusal(folder, f"is a finished run of {stored.get('group')!r}", diffs, stored, made)
            raise ConfigError(
                f"{root} holds finished runs of {stored.get('group')!r} made on another problem or data than this "
                f"file's (differs in: {', '.join(diffs[:5]) or 'kind'}); the report would set them side by side. "
                "Rename the experiment (`name = ...`), write to another --out, or delete that group's folder."
            )


def _digests_of_kept_runs(folders: list[tuple[RunSpec, RunFolder]], todo: list[RunSpec], cache: dict) -> dict:
    """The ``(digest, source)`` of the data read from files by this file's finished runs (kept, not made
    again), where their ``config.json`` records the digest of the data they were made on: each
    such data set loaded once, one at a time (the data of the runs to make is loaded by
    :func:`~most.experiments.spec.check_runs`)."""
    pending = {data_key(run) for run in todo}
    digests: dict = {}
    for run, folder in folders:
        key = data_key(run)
        if key in pending or key in digests or not reads_files(run):
            continue
        stored = folder.stored_config()
        if not isinstance(stored, dict) or not isinstance(stored.get(DATA_DIGEST), str):
            continue
        if key not in cache:
            cache.clear()  # one data set in memory at a time
            cache[key] = run.load_data()
        digests[key] = _identity_of(cache[key]["data"])
    return digests


def run_experiment(experiment: Experiment, out: str | os.PathLike, *, resume: bool = False, restart: bool = False,
                   progress: bool = True, echo: Callable[[str], None] = print, batch: bool = True) -> Path:
    """Runs every unfinished run of ``experiment`` into ``out/NAME`` and returns that folder.

    With ``batch`` (the default), in-process federated runs that share their data, model and
    local protocol (seeds, methods and swept values of one file) train as one batched job, and
    centralised runs on the same problem go in step with one evaluation of all their models
    (:func:`execute_batch`); their results are those of ``batch=False``, which makes the runs
    one by one (to round-off where torch orders a batched product or sum differently).

    Finished runs are skipped (their stored configuration must match, and the data they were
    made on, read from files, must have the digest of the data read now; else a
    :class:`~most.config.ConfigError` names the differing keys or the two data sets). The runs a
    group's folder will hold must belong together by the rule the report applies
    (:func:`~most.experiments.store.group_views`). Interrupted runs (a
    checkpoint and no result) continue with ``resume=True`` or start over with
    ``restart=True``; with neither, :class:`InterruptedRunsError` is raised before any work.

    ``progress`` shows each run's progress bar; ``echo`` receives the one-line summaries (how
    many runs there are, then one line per finished run); it is ``print`` by default, and
    ``echo=lambda line: None`` keeps a script quiet.
    """
    if Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"The results root {out} is a file, not a folder; choose a folder (it is created if missing).")
    root = Path(out) / experiment.name
    check_not_linked(Path(out), root / "runs")
    created = missing_folders(root)
    root.mkdir(parents=True, exist_ok=True)
    lock = WriterLock(root)
    try:
        lock.__enter__()
    except BusyFolderError:
        raise  # another process holds the folder (it may have made it a moment ago): nothing here is touched
    except BaseException:
        remove_unwritten(created)
        raise
    try:
        return _run_locked(experiment, root, resume=resume, restart=restart, progress=progress, echo=echo,
                           batch=batch)
    except BaseException:
        remove_unwritten(created)  # still holding the lock: no other process is in the folder
        raise
    finally:
        lock.__exit__(None, None, None)


def _check_not_a_bench(root: Path) -> None:
    """Refuses an experiment folder that holds the runs of a `most bench` suite (a bench's output
    folder whose name is the experiment's): the runs of the two would mix, and neither could
    resume."""
    runs = root / "runs"
    if not runs.is_dir() or runs.is_symlink():
        return
    for config_file in runs.rglob("config.json"):
        suite = RunFolder(config_file.parent).stored_config() or {}
        if isinstance(suite.get("suite"), str):
            raise ConfigError(f"{root} holds the runs of `most bench {suite['suite']}` ({config_file.parent}); an "
                              "experiment's runs would mix with them. Write to another --out, or rename the "
                              "experiment (`name = ...`).")
        return  # the first run folder tells whose folder it is


def _run_locked(experiment: Experiment, root: Path, *, resume: bool, restart: bool, progress: bool,
                echo: Callable[[str], None], batch: bool) -> Path:
    """:func:`run_experiment` once it holds the folder's lock."""
    _check_not_a_bench(root)
    folders = [(run, RunFolder(root / "runs" / run.folder)) for run in experiment.runs]
    for _, folder in folders:
        check_not_linked(root, folder.path)
        remove_leftovers(folder.path)
    interrupted = [folder for _, folder in folders if folder.status == "interrupted"]
    _check_stored(experiment, root, folders, {}, data=False, resume=False)  # before any data is loaded
    _check_other_groups(experiment, root, {}, data=False)
    for run, _ in folders:  # a data folder that is not there fails now, not after hours of other runs
        path = run.config.get("data", {}).get("path")
        if path is not None and not Path(path).expanduser().exists():
            raise FileNotFoundError(f"data.path: no such folder {path} (needed by the runs of {run.group}).")
    if interrupted and not (resume or restart):
        names = ", ".join(str(f.path.relative_to(root)) for f in interrupted[:5])
        raise InterruptedRunsError(
            f"{len(interrupted)} run(s) of {root} were interrupted ({names}). Continue them from their "
            "checkpoints with --resume, or start them over with --restart."
        )
    cache: dict = {}
    todo = [(run, folder) for run, folder in folders if folder.status != "done"]
    for run, folder in todo:
        check_no_links(root, folder.path)
        if resume and folder.status == "interrupted":  # a resume refused for other settings changes no file
            folder.check_no_legacy_checkpoint()
            folder.checkpoint(experiment.checkpoint_every, fingerprint=fingerprint(run)).check()
    digests = _digests_of_kept_runs(folders, [run for run, _ in todo], cache)
    # data-dependent checks, before any run starts
    check_runs(experiment, [run for run, _ in todo], cache=cache, digests=digests)
    _check_stored(experiment, root, folders, digests, data=True, resume=resume)  # the data, by its digest
    _check_other_groups(experiment, root, digests, data=True)
    for name in ("experiment.toml", "experiment.json"):
        check_not_linked(root, root / name)
    if experiment.source:
        atomic_write_text(root / "experiment.toml", experiment.source)
    groups = list(dict.fromkeys(run.group for run in experiment.runs))
    seeds = list(dict.fromkeys(run.seed for run in experiment.runs))
    atomic_write_text(root / "experiment.json", dumps({"name": experiment.name, "kind": experiment.kind,
                                                       "groups": groups, "seeds": seeds}, indent=2) + "\n")
    echo(f"{experiment.name}: {len(folders)} runs, {len(folders) - len(todo)} already done, {len(todo)} to run "
         f"-> {root}")
    k = 0
    for group in batch_groups(todo) if batch else [[item] for item in todo]:
        if restart:
            for _, folder in group:
                folder.reset()
        resumed = [folder.status == "interrupted" for _, folder in group]
        tic = time.perf_counter()
        if len(group) == 1:
            results = [execute(*group[0], checkpoint_every=experiment.checkpoint_every, progress=progress,
                               data_cache=cache)]
        else:
            results = execute_batch(group, checkpoint_every=experiment.checkpoint_every, progress=progress,
                                    data_cache=cache)
        took = f"{time.perf_counter() - tic:.1f} s" + (f" for a batch of {len(group)}" if len(group) > 1 else "")
        for (run, _), result, again in zip(group, results, resumed):
            k += 1
            main = next(iter(result["metrics"].items()))
            echo(f"[{k}/{len(todo)}] {run.group} seed {run.seed}{' (resumed)' if again else ''}: "
                 f"{main[0]} = {main[1]:.4g} ({took})")
    return root
