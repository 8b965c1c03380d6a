r"""Few objectives (n = 2 < m = 5): ZDT1-3 and fairness-accuracy trade-offs (paper Appendix C).

Every method trains m = 5 solutions; the score is the hypervolume (moocore) of the
**final** iterate, never the best over rounds.

* ZDT: 1000 rounds, Adam (lr 5e-3) for every method, the paper's reference points. ZDT has no
  data split, so its settings were fixed once (on seeds 0-2) and are the same for every run.
* Fairness (Zafar synthetic, German credit): one train / validation / test split 60/20/20 (seed 0);
  the seeds vary the models. Every method's
  learning rate (and MosT-E's extension) is chosen by the hypervolume of the 5 solutions on
  the validation split; the test hypervolume of that choice is reported, with one reference
  point per data set shared by all methods: the upper bounds of the test objective values
  over all methods' solutions (the paper's rule).

Methods (:data:`METHODS`):

* ``MosT-E (Tchebycheff)`` -- the library's recommended few-objective setting: n' = m smooth
  augmented Tchebycheff scalarisations on evenly spaced rays that include both ends
  (:class:`~most.methods.TchebycheffExtension` with ``spread="grid"``), with Adam clipped at three
  root mean squares and a second-moment memory of 100 steps (:class:`~most.optim.Adam`
  ``clip=3.0, beta2=0.99``); every other row uses plain Adam.
* ``MosT-E (Tchebycheff, n'=20)`` -- 20 Dirichlet-drawn Tchebycheff rays plus the originals.
* ``MosT-E (paper)`` -- the paper's MosT-E: 20 linear Dirichlet(1) mixtures plus the originals.
* ``MosT (n=2)`` -- plain MosT on the two objectives (``most.MosT`` refuses m > n, so this row
  composes :func:`most.run` directly), to show why the extension is needed.
* ``Linearization``, ``MGDA``, ``EPO``, ``MOO-SVGD`` -- the baselines.

Run it with ``most bench few-objective --out DIR`` (see ``--help``). Every finished run is kept in
its own folder under ``OUT/runs/`` (the results store of ``most run``); a call that was stopped
continues with ``--resume``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from .. import plots
from .._validation import check_positive_int
from . import STORED_MOST, SuiteConfig, check_unique, write_results
from .._kernels import software
from ._runs import DATA_DIGEST, RunStore, data_digest, folder_name
from .rows import BuiltRow, MethodRow
from ..registry import CENTRALISED
from ..methods import DirichletExtension, MajorityShare, MinNorm, TchebycheffExtension, TransportAssignment
from ..metrics import best_hypervolume_2d, hypervolume
from ..optim import Adam
from ..problem import Problem
from ..problems import FairnessData, load_german_credit, zafar_synthetic, zdt
from ..problems import german_credit_file
from ..solver import MosT, Method, Result, fit_batch

__all__ = ["FewObjectiveConfig", "METHODS", "run_benchmark", "ZDT_PROBLEMS", "FAIRNESS_PROBLEMS"]

ZDT_PROBLEMS = ("zdt1", "zdt2", "zdt3")
FAIRNESS_PROBLEMS = ("synthetic", "german")

#: Tchebycheff ideal points z*: at or below the smallest value of each objective on the front
#: (ZDT3's f2 goes down to -0.773).
_IDEAL = {"zdt1": (0.0, 0.0), "zdt2": (0.0, 0.0), "zdt3": (0.0, -0.8), "synthetic": (0.0, 0.0), "german": (0.0, 0.0)}


def _most_tch_grid(n_models, rounds, lr, seed, ideal, extra=None):
    ext = TchebycheffExtension(n_extra=n_models, spread="grid", smoothing=0.05, augment=0.01, ideal=ideal,
                               include_original=False)
    return MosT(n_models=n_models, rounds=rounds, lr=lr, seed=seed, optimizer=Adam(clip=3.0, beta2=0.99),
                extension=ext)


# The stored rows with n' > m objectives use STORED_MOST; with n' = m rays (the first row) it and the
# default agree: every model serves one ray, and seeding and re-seeding wait for two objectives per model.


def _most_tch_dirichlet(n_models, rounds, lr, seed, ideal, extra=None):
    ext = TchebycheffExtension(n_extra=20, augment=0.05, ideal=ideal)
    return MosT(n_models=n_models, rounds=rounds, lr=lr, seed=seed, optimizer=Adam(), extension=ext, **STORED_MOST)


def _most_paper(n_models, rounds, lr, seed, ideal, extra=None):
    n_extra, concentration = extra or (20, 1.0)
    ext = DirichletExtension(n_extra=n_extra, concentration=concentration)
    return MosT(n_models=n_models, rounds=rounds, lr=lr, seed=seed, optimizer=Adam(), extension=ext, **STORED_MOST)


@dataclass(frozen=True)
class _PlainMosT(Method):
    """MosT on the problem's own objectives, without the check that refuses m > n (the row that
    shows why the extension is needed): the exact transport, majority shares, min-norm."""

    def components(self):
        return TransportAssignment(), MajorityShare(), MinNorm()


def _most_plain(n_models, rounds, lr, seed, ideal, extra=None):
    return _PlainMosT(n_models=n_models, rounds=rounds, lr=lr, seed=seed, optimizer=Adam())


_ADAM = {"optimizer": {"type": "Adam"}}

#: label -> the method it builds (a registry name and its settings, or code for the MosT-E rows,
#: whose extension takes the problem's ideal point); the fairness search also tries each row's ``extras``
METHODS: dict[str, MethodRow | BuiltRow] = {
    "MosT-E (Tchebycheff)": BuiltRow(_most_tch_grid),
    "MosT-E (Tchebycheff, n'=20)": BuiltRow(_most_tch_dirichlet),
    "MosT-E (paper)": BuiltRow(_most_paper, extras=((10, 1.0), (20, 1.0), (20, 0.1))),
    "MosT (n=2)": BuiltRow(_most_plain),
    "Linearization": MethodRow("Linearization", _ADAM, kind=CENTRALISED),
    "MGDA": MethodRow("MGDA", _ADAM, kind=CENTRALISED),
    "EPO": MethodRow("EPO", _ADAM, kind=CENTRALISED),
    "MOO-SVGD": MethodRow("MOOSVGD", _ADAM, kind=CENTRALISED),
}


#: the folder of the run folders in ``OUT`` (``most.cli`` names it when a call is stopped)


@dataclass(frozen=True)
class FewObjectiveConfig(SuiteConfig):
    """Settings of the few-objective benchmark (``most bench few-objective``).

    Args:
        methods: names from :data:`METHODS` (default: all).
        seeds: one run per seed (fairness: the data and its split are fixed, seed 0).
        out: folder for ``results.json``, ``table.md`` and the figures.
        problems: any of ``zdt1, zdt2, zdt3, synthetic, german``.
        n_models: m, the number of solutions.
        zdt_rounds, zdt_lr: the ZDT budget (Adam).
        fairness_rounds, fairness_lrs: the fairness budget and the learning rates searched on
            validation (Adam).
        german_path: folder with ``german.data`` (default: the ``MOST_GERMAN_CREDIT`` variable).
        progress: show progress bars.
    """

    out: Path = Path("bench_out/few_objective")
    problems: tuple[str, ...] = ZDT_PROBLEMS + FAIRNESS_PROBLEMS
    n_models: int = 5
    zdt_rounds: int = 1000
    zdt_lr: float = 5e-3
    fairness_rounds: int = 300
    fairness_lrs: tuple[float, ...] = (0.01, 0.05)
    german_path: Path | None = None
    progress: bool = True

    _known = METHODS
    resume_free = SuiteConfig.resume_free + ("problems",)  # a resumed call may add problems

    def __post_init__(self):
        super().__post_init__()
        unknown = [p for p in self.problems if p not in ZDT_PROBLEMS + FAIRNESS_PROBLEMS]
        if unknown:
            raise ValueError(f"Unknown problem(s) {unknown}; choose from {list(ZDT_PROBLEMS + FAIRNESS_PROBLEMS)}.")
        check_unique(self.problems, "problem")
        if self.n_models < 2:
            raise ValueError(f"n_models must be at least 2 to trade objectives off; got {self.n_models}.")


def _random_init(problem: Problem) -> Problem:
    # Fairness problems start every model at theta = 0; multi-solution baselines start from
    # m random initialisations (as in the paper), so all methods get the same random starts.
    dim = problem.dim
    return dataclasses.replace(
        problem, init=lambda m, g: 0.1 * torch.randn(m, dim, generator=g, dtype=torch.get_default_dtype()))


def _hv(points: np.ndarray, ref) -> tuple[float, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate set still gets its true hypervolume
        r = hypervolume(points, ref)
    return float(r), int(r.outside)


def _zdt_method(config: FewObjectiveConfig, name: str, method: str, seed: int) -> Method:
    return METHODS[method].build(None, n_models=config.n_models, rounds=config.zdt_rounds, lr=config.zdt_lr,
                                 seed=seed, ideal=_IDEAL[name])


def _zdt_record(problem: Problem, seed: int, params: torch.Tensor, seconds: float) -> dict:
    F = problem.loss_matrix(params).T.double().numpy()  # the original two objectives
    value, outside = _hv(F, problem.metadata["reference_point"])
    return {"seed": seed, "hv": value, "outside": outside, "seconds": seconds, "points": F.tolist()}


def _fairness_data(name: str, config: FewObjectiveConfig, german: FairnessData | None = None):
    """``(parts, train, val, test)``: the data split and the problems of the fairness search
    (``german``: the German credit data if already loaded).

    One data set and one split per problem (seed 0), as in the paper: the seeds vary the
    models' initialisation and draws, so that one reference point serves every run."""
    if name == "synthetic":
        data = zafar_synthetic(2000, seed=0)
    else:
        data = german if german is not None else load_german_credit(config.german_path)
    parts = data.split(seed=0)
    return parts, _random_init(parts["train"].problem()), parts["val"].problem(), parts["test"].problem()


def _fairness_method(config: FewObjectiveConfig, name: str, method: str, seed: int, lr: float, variant) -> Method:
    return METHODS[method].build(variant, n_models=config.n_models, rounds=config.fairness_rounds, lr=lr, seed=seed,
                                 ideal=_IDEAL[name])


def _fairness_record(data, method: str, seed: int, lr: float, variant, params: torch.Tensor, seconds: float) -> dict:
    parts, train, val, test = data
    return {
        "method": method, "seed": seed, "lr": lr, "variant": variant, "seconds": seconds,
        "val": val.loss_matrix(params).T.double().tolist(),
        "test": test.loss_matrix(params).T.double().tolist(),
        "accuracy": parts["test"].accuracy(params).tolist(),
    }


def _tasks(config: FewObjectiveConfig) -> list[tuple]:
    """Every run of the call, as its key in the run store: ``(problem, method, seed)`` on ZDT,
    ``(problem, method, seed, lr, variant)`` for each candidate of the fairness search."""
    tasks: list[tuple] = []
    for name in config.problems:
        if name in ZDT_PROBLEMS:
            tasks += [(name, method, seed) for method in config.methods for seed in config.seeds]
        else:
            tasks += [(name, method, seed, float(lr), variant) for seed in config.seeds for method in config.methods
                      for lr in config.fairness_lrs for variant in METHODS[method].extras]
    return tasks


def _make(config: FewObjectiveConfig, task: tuple, data: dict) -> dict:
    """The run of ``task`` alone (a batch of one runs as its ``fit``)."""
    return _make_batch(config, [task], data)[0]


def _make_batch(config: FewObjectiveConfig, tasks: list[tuple], data: dict) -> list[dict]:
    """The runs of ``tasks`` (one problem's) as one :func:`~most.fit_batch`; each run's seconds are
    the batch's, shared equally. ``data`` keeps each fairness problem's data once loaded."""
    name = tasks[0][0]
    if name in ZDT_PROBLEMS:
        problem = zdt(name)
        methods = [_zdt_method(config, *task) for task in tasks]
    else:
        if name not in data:
            data[name] = _fairness_data(name, config)
        problem = data[name][1]
        methods = [_fairness_method(config, *task) for task in tasks]
    tic = time.perf_counter()
    results = cast(list[Result], fit_batch(problem, methods))  # errors="raise": no exception is returned
    seconds = (time.perf_counter() - tic) / len(tasks)
    if name in ZDT_PROBLEMS:
        return [_zdt_record(problem, task[2], result.params, seconds) for task, result in zip(tasks, results)]
    # mypy counts a *args of unknown length as filling every parameter, the arguments after it as too many
    return [_fairness_record(data[name], *task[1:], result.params, seconds)  # type: ignore[call-arg]
            for task, result in zip(tasks, results)]


#: a worker process's fairness data, by problem
_worker_data: dict = {}


def _worker_run(job):
    config, task = job
    return task, _make(config, task, _worker_data)


def _worker_batch(job):
    config, tasks = job
    return tasks, _make_batch(config, [tuple(task) for task in tasks], _worker_data)


#: the settings of the ZDT runs, and of the fairness runs (German credit's also :data:`_GERMAN_SETTINGS`)
_ZDT_SETTINGS = ("zdt_rounds", "zdt_lr")
_FAIRNESS_SETTINGS = ("fairness_rounds", "fairness_lrs")
#: where the German credit data was read from: the path given (``None``: ``MOST_GERMAN_CREDIT``) and
#: the file it resolved to; for information, the data being compared by its digest
_GERMAN_SETTINGS = ("german_path", "german_file")


def _settings(config: FewObjectiveConfig, torch_version: str, german: FairnessData | None):
    """The settings of a run by its key: those of its problem (ZDT's budget, or the fairness
    search's, and German credit's data by its digest), or ``None`` for a problem this call does
    not run (its stored runs are neither read nor judged)."""
    common = {k: v for k, v in config.settings(torch=torch_version).items()
              if k not in _ZDT_SETTINGS + _FAIRNESS_SETTINGS + _GERMAN_SETTINGS}
    plain = config.plain()
    german_data: dict = {}
    if german is not None:
        german_data = {"german_path": plain["german_path"], "german_file": os.path.realpath(german_credit_file(
            config.german_path)), DATA_DIGEST: data_digest(german.X, german.y, german.z, german.feature_names)}

    def of(key: tuple) -> dict | None:
        name = key[0]
        if name not in config.problems:
            return None
        if name in ZDT_PROBLEMS:
            return {**common, **{k: plain[k] for k in _ZDT_SETTINGS}}
        return {**common, **{k: plain[k] for k in _FAIRNESS_SETTINGS}, **(german_data if name == "german" else {})}

    return of


#: the keys of a run's result that the tables read: a ZDT run's and a fairness candidate's
_ZDT_KEYS = ("seed", "hv", "outside", "seconds", "points")
_FAIRNESS_KEYS = ("method", "seed", "lr", "seconds", "val", "test", "accuracy")


def _folder(task: tuple) -> str:
    """A run's folder in ``OUT/runs``: ``PROBLEM/METHOD/seedN`` on ZDT,
    ``PROBLEM/METHOD_lr=LR[_variant=...]/seedN`` for a candidate of the fairness search."""
    name, method, seed = task[:3]
    if len(task) == 3:
        return folder_name(name, method, f"seed{seed}")
    lr, variant = task[3:]
    return folder_name(name, (method, ("lr", lr)) + ((("variant", variant),) if variant is not None else ()),
                       f"seed{seed}")


def _zdt_results(name: str, config: FewObjectiveConfig, runs: RunStore) -> dict:
    problem = zdt(name)
    ref = problem.metadata["reference_point"]
    return {"reference_point": list(ref), "limit": best_hypervolume_2d(problem.metadata["front"], ref, config.n_models),
            "limit_points": config.n_models,
            "methods": {method: {"runs": [runs.get((name, method, seed)) for seed in config.seeds]}
                        for method in config.methods}}


def _fairness_results(name: str, config: FewObjectiveConfig, runs: RunStore) -> dict:
    # 1) every candidate (method x lr x variant x seed) was trained once;
    # 2) the validation reference point is shared by all candidates (upper bounds of their values);
    # 3) per method and seed, the candidate with the best validation hypervolume is kept;
    # 4) the test reference point is shared by all kept runs of all methods (the paper's rule).
    candidates = []
    for task in (t for t in _tasks(config) if t[0] == name):
        candidate = dict(cast(dict, runs.get(task)))  # a dict: every run was made
        candidate.update(variant=task[4], val=np.asarray(candidate["val"]), test=np.asarray(candidate["test"]))
        candidates.append(candidate)
    val_ref = np.max([c["val"].max(0) for c in candidates], 0)
    for c in candidates:
        c["val_hv"] = _hv(c["val"], val_ref)[0]
    chosen = [max((c for c in candidates if c["method"] == m and c["seed"] == seed), key=lambda c: c["val_hv"])
              for m in config.methods for seed in config.seeds]
    test_ref = np.max([c["test"].max(0) for c in chosen], 0)
    out = {"reference_point": test_ref.tolist(), "validation_reference_point": val_ref.tolist(),
           "methods": {m: {"runs": []} for m in config.methods}}
    for c in chosen:
        value, outside = _hv(c["test"], test_ref)
        out["methods"][c["method"]]["runs"].append({
            "seed": c["seed"], "hv": value, "outside": outside, "seconds": c["seconds"], "lr": c["lr"],
            "variant": c["variant"], "val_hv": c["val_hv"], "points": c["test"].tolist(),
            "test_accuracy": c["accuracy"],
        })
    return out


def _summarise(results: dict) -> None:
    for block in results["problems"].values():
        for entry in block["methods"].values():
            hv = np.array([r["hv"] for r in entry["runs"]])
            sec = np.array([r["seconds"] for r in entry["runs"]])
            entry["hv_mean"], entry["hv_std"] = float(hv.mean()), float(hv.std(ddof=1)) if len(hv) > 1 else 0.0
            entry["seconds_mean"] = float(sec.mean())
            entry["outside_total"] = int(sum(r["outside"] for r in entry["runs"]))


def table_markdown(results: dict) -> str:
    """The results as a markdown table: hypervolume mean ± std over seeds (fairness ×100)."""
    problems = list(results["problems"])
    methods = list(next(iter(results["problems"].values()))["methods"])
    scale = {p: (100.0 if p in FAIRNESS_PROBLEMS else 1.0) for p in problems}
    head = "| method | " + " | ".join(p + (" (HV×100)" if scale[p] != 1 else "") for p in problems) + " | s / run |"
    lines = [head, "|" + "---|" * (len(problems) + 2)]
    for m in methods:
        cells, secs = [], []
        for p in problems:
            e = results["problems"][p]["methods"][m]
            cells.append(f"{e['hv_mean'] * scale[p]:.3f} ± {e['hv_std'] * scale[p]:.3f}"
                         + (f" ({e['outside_total']} out)" if e["outside_total"] else ""))
            secs.append(e["seconds_mean"])
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {np.mean(secs):.2f} |")
    limits = [f"{results['problems'][p]['limit']:.3f}" if "limit" in results["problems"][p] else "–" for p in problems]
    # the best hypervolume of n_models points on the true front (results stored before this key: 5 models)
    points = {results["problems"][p].get("limit_points", 5) for p in problems if "limit" in results["problems"][p]}
    label = f"*{points.pop()}-point limit*" if len(points) == 1 else "*limit (best points on the front)*"
    lines.append(f"| {label} | " + " | ".join(limits) + " | |")
    return "\n".join(lines)


def _figures(results: dict, out: Path) -> list[str]:
    written = []
    for name, block in results["problems"].items():
        first = {m: np.asarray(e["runs"][0]["points"]) for m, e in block["methods"].items()}
        ref = block["reference_point"]
        front = zdt(name).metadata["front"] if name in ZDT_PROBLEMS else None
        plots.pareto_fronts(first, front=front, reference=ref, title=f"{name}: final solutions (seed "
                            f"{next(iter(block['methods'].values()))['runs'][0]['seed']})",
                            path=out / f"pareto_{name}.png")
        plots.hypervolume_areas(first, reference=ref, front=front, title=f"{name}: dominated area",
                                path=out / f"hv_area_{name}.png")
        written += [f"pareto_{name}.png", f"hv_area_{name}.png"]
    return written


def run_benchmark(config: FewObjectiveConfig, *, resume: bool = False, restart: bool = False, jobs: int = 1,
                  batch: bool = True) -> dict:
    """Runs the benchmark, writes ``results.json``, ``table.md`` and the figures to ``config.out``.

    Each finished run (on the fairness problems: each candidate of the search) is kept in its
    folder under ``config.out / RUNS_DIR`` (:mod:`most.bench._runs`); with ``resume`` the runs kept
    there by an earlier call with the same settings are reused (the problems, methods and seeds may
    differ: only the missing runs are made); ``restart`` removes them first, and without either
    finished runs are refused.

    ``jobs`` > 1 makes the runs in that many worker processes (each with as many torch threads
    as this one; at most one per run and one per CPU core, :func:`~most.bench._runs.worker_count`);
    every run draws from its own seed, so the results are those of ``jobs=1`` (only the seconds
    differ).

    ``batch`` (the default) makes the runs of one method on one problem (its seeds and, on the
    fairness problems, its learning rates and variants) as one :func:`~most.fit_batch`: the runs
    go in step and their evaluations are one call. The results equal those of ``batch=False``, run
    by run: bit for bit on ZDT, to round-off on the fairness data, whose losses multiply the data by
    all models' parameters at once (a product the backend blocks by the number of models). Each
    run's seconds are its batch's, shared equally. A batch's runs are recorded when it
    ends; a stopped call loses the batches in progress, never a finished one."""
    check_positive_int(jobs, name="jobs")
    # fail before any work if the data is missing; its digest identifies it in the runs' settings
    german = load_german_credit(config.german_path) if "german" in config.problems else None
    results: dict[str, Any] = {"config": config.plain(), **software(), "problems": {}}
    runs = RunStore(config.out, _settings(config, results["torch"], german), suite="few-objective", folder=_folder,
                    resume=resume, restart=restart, paths=_GERMAN_SETTINGS,
                    scoped=_ZDT_SETTINGS + _FAIRNESS_SETTINGS + _GERMAN_SETTINGS,
                    required=lambda key: _ZDT_KEYS if len(key) == 3 else _FAIRNESS_KEYS)  # checked before any work
    data: dict = {}  # this process's fairness data, by problem
    if german is not None:
        data["german"] = _fairness_data("german", config, german)  # the data the digest was taken of
    tasks = _tasks(config)
    postfix = lambda task: {"problem": task[0], "method": task[1]}  # noqa: E731
    if batch:
        groups: dict[tuple, list[tuple]] = {}
        for task in tasks:
            groups.setdefault(task[:2], []).append(task)
        # the largest batches first, so that the workers end together (a fairness search's batch
        # of 18 runs is several ZDT batches' work)
        rounds = lambda part: config.zdt_rounds if part[0][0] in ZDT_PROBLEMS else config.fairness_rounds  # noqa: E731
        batches = sorted(groups.values(), key=lambda part: -len(part) * rounds(part))
        runs.make_batches(batches, jobs, here=lambda part: _make_batch(config, part, data),
                          worker=_worker_batch, config=config, desc="few-objective", postfix=postfix)
    else:
        runs.make(tasks, jobs, here=lambda task: _make(config, task, data), worker=_worker_run, config=config,
                  desc="few-objective", postfix=postfix)
    for name in config.problems:
        assemble = _zdt_results if name in ZDT_PROBLEMS else _fairness_results
        results["problems"][name] = assemble(name, config, runs)
    _summarise(results)
    return write_results(results, config.out, _figures, table_markdown, json_default=_json_default)


def _json_default(v):
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")
