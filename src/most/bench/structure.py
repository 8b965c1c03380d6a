r"""Structure recovery: objectives in known groups, each method scored against an oracle.

Two kinds of problems with a planted group structure (:func:`clustered_quadratics`,
:func:`clustered_regressions`), equal and unequal group sizes (the smallest group 1/6 of the
largest), and m models below, at and above the number of groups k = 6 (:data:`SETTINGS`).
Every seed draws a new problem and the methods' starts.

The **oracle** (:func:`oracle`) is the best structured solution: with m >= k, one model per group
at the group's optimum (the minimiser of the group's mean loss); with m < k, the best partition
of the k groups into m sets (all of them are tried), each set served at its pooled optimum. The
oracle uses k models when m > k, so a method that splits a group can beat it (a ratio below 1).

Metrics of a run (:func:`score`), on the training losses the methods minimise:

* *ratio to the oracle* -- ``mean_i min_j L_i(theta_j) / mean_i min_j L_i(oracle_j)``;
* *groups recovered* -- a group (with m < k: a set of the oracle's partition) is recovered when
  one model is the best model of >= 90 % of its objectives and is the best model of at most
  10 % as many objectives outside it;
* *worst* and *average objective* -- ``max_i`` and ``mean_i`` of ``min_j L_i(theta_j)``;
* the seconds of the fit (seeding included).

Methods (:data:`METHODS`), one budget of gradient steps per model (``rounds`` x 1 step, SGD,
step ``lr``) unless stated: the default MosT, the paper's MosT and the default with the min-norm
combiner; sum-of-minimum (Lloyd: ``rounds / 10`` rounds of 10 steps after k-means++ seeding; and
its gradient algorithm), TCH-Set, STCH-Set, and IFCA-style hard assignment (each objective to its
best model, each model a step on the mean loss of its objectives, from the problem's random
starts).

Run it with ``most bench structure --out DIR`` (see ``--help``). Every finished run is kept in its
own folder under ``OUT/runs/`` (the results store of ``most run``); a call that was stopped
continues with ``--resume``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, cast

import numpy as np
import torch
from torch import Tensor

from .. import plots
from .._random import seeded
from .._validation import check_non_negative, check_positive, check_positive_int
from ..baselines import BestModelAssignment, SumOfMinimum
from ..methods import Support, WeightedSum
from ..problem import Problem
from ..registry import CENTRALISED
from ..solver import Method
from . import SuiteConfig, check_unique, mean_std, write_results
from .._kernels import software
from ._runs import RunStore, folder_name
from .rows import BuiltRow, MethodRow

__all__ = ["StructureConfig", "METHODS", "SETTINGS", "THRESHOLD", "Structured", "Oracle", "clustered_quadratics",
           "clustered_regressions", "oracle", "score", "run_benchmark", "table_markdown"]

#: a run "reaches" the oracle when its ratio to the oracle is at most this
THRESHOLD = 1.25

_EQUAL = (15,) * 6
_UNEQUAL = (5, 10, 15, 20, 25, 30)

#: name -> (kind, group sizes, m)
SETTINGS: dict[str, tuple[str, tuple[int, ...], int]] = {
    f"{kind}-{name}": (kind, sizes, m)
    for kind in ("quadratic", "regression")
    for name, sizes, m in (("equal", _EQUAL, 6), ("unequal", _UNEQUAL, 6), ("above", _EQUAL, 8),
                           ("above-unequal", _UNEQUAL, 8), ("below", _EQUAL, 4))
}

#: redraws of the group means before a generator gives up on the separation asked for
_MAX_DRAWS = 10_000


@dataclass(frozen=True)
class Structured:
    """A problem with planted groups, and the data the oracle needs.

    Attributes:
        kind: ``"quadratic"`` or ``"regression"``.
        problem: the objectives, in torch's default dtype.
        labels: each objective's group, ``[n]`` (groups in order, ``sizes[0]`` objectives first).
        centres: quadratics: each objective's centre ``c_i``, ``[n, dim]`` (float64).
        X, y: regressions: each objective's samples, ``[n, samples, dim]`` and ``[n, samples]`` (float64).
        means: the groups' means (quadratics) or coefficient vectors (regressions), ``[k, dim]`` (float64).
    """

    kind: str
    problem: Problem
    labels: Tensor
    means: Tensor
    centres: Tensor | None = None
    X: Tensor | None = None
    y: Tensor | None = None

    @property
    def n_groups(self) -> int:
        """k, the number of groups."""
        return self.means.shape[0]

    def losses(self, params: Tensor) -> Tensor:
        """The loss of every objective under every model, ``[n, m]``, in float64 (``params [m, dim]``)."""
        theta = params.detach().to("cpu", torch.float64)
        if self.kind == "quadratic":
            return torch.cdist(self.centres, theta) ** 2
        X, y = cast(Tensor, self.X), cast(Tensor, self.y)  # a regression's samples
        residual = X @ theta.T - y[..., None]  # [n, samples, m]
        return (residual ** 2).mean(1)

    def pooled_optimum(self, objectives) -> Tensor:
        """The minimiser of the mean loss of ``objectives`` (indices or a mask), ``[dim]`` (float64):
        the centroid of their centres, or the least-squares fit of their pooled samples.

        The fit solves the normal equations ``X^T X beta = X^T y`` by a Cholesky factorisation,
        with ``X^T X`` and ``X^T y`` summed elementwise: the same bits on every call, whatever
        the thread count (``torch.linalg.lstsq`` on MKL returns other last bits from call to
        call, which a resumed or parallel call would then show). Pooled samples that do not
        determine every coefficient (fewer independent samples than dimensions) get the
        minimum-norm fit of :func:`numpy.linalg.lstsq` instead (also where they barely do, so that
        the normal equations would lose digits)."""
        if self.kind == "quadratic":
            return cast(Tensor, self.centres)[objectives].mean(0)  # a quadratic's centres
        samples, targets = cast(Tensor, self.X), cast(Tensor, self.y)  # a regression's samples
        X = samples[objectives].reshape(-1, samples.shape[-1]).double()
        y = targets[objectives].reshape(-1).double()
        gram = (X[:, :, None] * X[:, None, :]).sum(0)
        factor, info = torch.linalg.cholesky_ex(gram)
        diagonal = factor.diagonal()
        # a well-conditioned system (condition number of X^T X below about 1e8): the normal equations
        # lose no more digits than a float64 result can spare
        if int(info) == 0 and float(diagonal.min()) > 1e-4 * float(diagonal.max()):
            return torch.cholesky_solve((X * y[:, None]).sum(0)[:, None], factor)[:, 0]
        return torch.from_numpy(np.linalg.lstsq(X.numpy(), y.numpy(), rcond=None)[0])


def _labels(sizes) -> Tensor:
    sizes = tuple(sizes)
    if not sizes:
        raise ValueError("Give at least one group size.")
    for s in sizes:
        check_positive_int(s, name="group size")
    return torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes))


def _separated(draw: Callable[[], Tensor], separation: float) -> Tensor:
    """``draw()`` again until every pair of its rows is at least ``separation`` apart."""
    for _ in range(_MAX_DRAWS):
        means = draw()
        if len(means) < 2 or float(torch.pdist(means).min()) >= separation:
            return means
    raise ValueError(f"No draw of the group means was {separation} apart in {_MAX_DRAWS} tries; ask for a smaller "
                     "separation or fewer groups.")


def clustered_quadratics(sizes, *, dim: int = 5, seed: int, separation: float = 8.0,
                         spread: float = 0.5) -> Structured:
    """Quadratic objectives ``L_i(theta) = ||theta - c_i||^2`` in groups of the given sizes.

    The k = ``len(sizes)`` group means are drawn ``6 N(0, I)`` (float64, from
    ``torch.Generator().manual_seed(seed)``), again until every pair is at least
    ``separation`` apart; objective i of group g has its centre ``c_i = mu_g + spread N(0, I)``.
    A group's optimum is the centroid of its centres; the problem starts its models at
    ``N(0, I)`` (the problem's own ``init``).
    """
    labels = _labels(sizes)
    check_positive_int(dim, name="dim")
    check_positive(separation, name="separation")
    check_non_negative(spread, name="spread")
    g = seeded(seed)
    k = len(sizes)
    means = _separated(lambda: 6.0 * torch.randn(k, dim, generator=g, dtype=torch.float64), separation)
    centres = means[labels] + spread * torch.randn(len(labels), dim, generator=g, dtype=torch.float64)
    c = centres.to(torch.get_default_dtype())

    def fn(theta: Tensor) -> Tensor:
        return ((theta - c) ** 2).sum(-1)

    names = [f"g{int(label)}.{i}" for i, label in enumerate(labels)]
    problem = Problem.from_function(fn, dim=dim, n_objectives=len(labels), names=names,
                                    metadata={"labels": labels, "centres": c, "means": means.to(c.dtype)})
    return Structured(kind="quadratic", problem=problem, labels=labels, means=means, centres=centres)


def clustered_regressions(sizes, *, dim: int = 10, samples: int = 30, noise: float = 0.5, individual: float = 0.1,
                          seed: int, separation: float = 4.0) -> Structured:
    """Linear regressions (mean squared error, no intercept) in groups of the given sizes, as
    :func:`most.problems.mixed_regression` draws them.

    The k group coefficient vectors are drawn ``2 N(0, I)`` (float64, from
    ``torch.Generator().manual_seed(seed)``), again until every pair is at least ``separation``
    apart; objective i of group g has its own coefficients ``beta_g + individual N(0, I)``,
    ``samples`` inputs ``X ~ N(0, I)`` and targets ``y = X beta_i + noise N(0, 1)``. A group's
    optimum is the least-squares fit of its pooled samples.
    """
    labels = _labels(sizes)
    for value, name in ((dim, "dim"), (samples, "samples")):
        check_positive_int(value, name=name)
    check_non_negative(noise, name="noise")
    check_non_negative(individual, name="individual")
    check_positive(separation, name="separation")
    g = seeded(seed)
    k, n = len(sizes), len(labels)
    means = _separated(lambda: 2.0 * torch.randn(k, dim, generator=g, dtype=torch.float64), separation)
    own = means[labels] + individual * torch.randn(n, dim, generator=g, dtype=torch.float64)
    X = torch.randn(n, samples, dim, generator=g, dtype=torch.float64)
    y = (X @ own[..., None])[..., 0] + noise * torch.randn(n, samples, generator=g, dtype=torch.float64)
    Xd, yd = X.to(torch.get_default_dtype()), y.to(torch.get_default_dtype())

    def fn(theta: Tensor) -> Tensor:
        return ((Xd @ theta - yd) ** 2).mean(-1)

    names = [f"g{int(label)}.{i}" for i, label in enumerate(labels)]
    problem = Problem.from_function(fn, dim=dim, n_objectives=n, names=names,
                                    metadata={"labels": labels, "betas": means.to(Xd.dtype)})
    return Structured(kind="regression", problem=problem, labels=labels, means=means, X=X, y=y)


def partitions(items: list, blocks: int) -> Iterator[list[list]]:
    """Every partition of ``items`` into exactly ``blocks`` non-empty sets (each once)."""
    if blocks < 1 or blocks > len(items):
        return
    if blocks == len(items):
        yield [[x] for x in items]
        return
    if blocks == 1:
        yield [list(items)]
        return
    first, rest = items[0], items[1:]
    for p in partitions(rest, blocks - 1):  # the first item alone
        yield [[first]] + p
    for p in partitions(rest, blocks):  # the first item joins one of the sets
        for i in range(len(p)):
            yield p[:i] + [[first] + p[i]] + p[i + 1:]


@dataclass(frozen=True)
class Oracle:
    """The best structured solution of a :class:`Structured` problem for m models.

    Attributes:
        partition: the groups each oracle model serves (one group each when m >= k).
        params: the oracle's models, ``[min(m, k), dim]`` (float64).
        losses: each objective's loss under its best oracle model, ``[n]`` (float64).
        units: each objective's set in the partition, ``[n]``: the units that "groups recovered"
            counts (the groups when m >= k).
    """

    partition: tuple[tuple[int, ...], ...]
    params: Tensor
    losses: Tensor
    units: Tensor


def oracle(structured: Structured, n_models: int) -> Oracle:
    """The oracle for ``n_models`` models: with m >= k, each group's optimum; with m < k, the
    partition of the groups into m sets, each served at its pooled optimum, whose mean best loss
    is lowest (every partition is tried: S(6, 4) = 65 for k = 6, m = 4)."""
    check_positive_int(n_models, name="n_models")
    k = structured.n_groups
    best = None
    for partition in partitions(list(range(k)), min(n_models, k)):
        members = [torch.isin(structured.labels, torch.tensor(block)) for block in partition]
        params = torch.stack([structured.pooled_optimum(mask) for mask in members])
        losses = structured.losses(params).min(1).values
        if best is None or float(losses.mean()) < float(best.losses.mean()):
            units = torch.zeros_like(structured.labels)
            for u, mask in enumerate(members):
                units[mask] = u
            best = Oracle(partition=tuple(tuple(b) for b in partition), params=params, losses=losses, units=units)
    return cast(Oracle, best)  # k >= 1 groups: at least one partition was tried


def recovered(best_model: Tensor, units: Tensor) -> int:
    """How many units (groups, or the oracle's sets) are recovered: one model is the best model
    of >= 90 % of the unit's objectives, and of at most 10 % as many objectives outside it."""
    count = 0
    for u in units.unique():
        inside = units == u
        counts = torch.bincount(best_model[inside])
        j = int(counts.argmax())
        outside = int(((best_model == j) & ~inside).sum())
        if counts[j] >= 0.9 * int(inside.sum()) and outside <= 0.1 * int(counts[j]):
            count += 1
    return count


def score(structured: Structured, reference: Oracle, params: Tensor) -> dict:
    """The metrics of a run's final models ``params [m, dim]`` against the oracle ``reference``
    (see the module's docstring), as plain numbers."""
    losses = structured.losses(params)
    best, model = losses.min(1)
    return {
        "ratio": float(best.mean() / reference.losses.mean()),
        "recovered": recovered(model, reference.units),
        "units": int(reference.units.max()) + 1,
        "worst": float(best.max()),
        "average": float(best.mean()),
        "oracle_worst": float(reference.losses.max()),
        "oracle_average": float(reference.losses.mean()),
        "best_model": model.tolist(),
    }


# ---------------------------------------------------------------------------------- methods

@dataclass(frozen=True)
class HardAssignment(Method):
    """IFCA-style hard assignment: each objective to its best model, each model a step on the
    mean loss of its objectives, from the problem's random starts."""

    def components(self):
        return BestModelAssignment(), Support(), WeightedSum()


#: label -> the method it builds (a registry name and its settings, or code); each is fitted
#: with ``n_models`` (the setting's m), ``rounds``, ``lr`` and ``seed``
METHODS: dict[str, MethodRow | BuiltRow] = {
    "MosT (default)": MethodRow("MosT", kind=CENTRALISED),
    "MosT (paper)": MethodRow("MosT", variants=("paper",), kind=CENTRALISED),
    "MosT (min-norm)": MethodRow("MosT", variants=("min-norm",), kind=CENTRALISED),
    # Lloyd's algorithm: rounds / 10 rounds of 10 steps
    "SoM (Lloyd)": BuiltRow(lambda n_models, rounds, lr, seed: SumOfMinimum(
        n_models=n_models, rounds=max(1, rounds // 10), inner_steps=10, lr=lr, seed=seed)),
    "SoM (gradient)": MethodRow("SumOfMinimum", {"algorithm": "gradient"}, kind=CENTRALISED),
    "TCH-Set": MethodRow("TCHSet", kind=CENTRALISED),
    "STCH-Set": MethodRow("STCHSet", kind=CENTRALISED),
    "IFCA (hard assignment)": BuiltRow(lambda n_models, rounds, lr, seed: HardAssignment(
        n_models=n_models, rounds=rounds, lr=lr, seed=seed)),
}


@dataclass(frozen=True)
class StructureConfig(SuiteConfig):
    """Settings of the structure benchmark (``most bench structure``).

    Args:
        methods: names from :data:`METHODS` (default: all).
        seeds: one run per seed; the seed draws the problem and the method's starts.
        out: folder for ``results.json``, ``table.md`` and the figure.
        cases: names from :data:`SETTINGS` (default: all ten). (``settings`` is the name of what
            the runs depend on, :meth:`SuiteConfig.settings`.)
        rounds: the budget: gradient steps per model (SoM (Lloyd): ``rounds // 10`` Lloyd rounds
            of 10 steps).
        lr: the SGD step size of every method.
        progress: show a progress bar.
    """

    seeds: tuple[int, ...] = tuple(range(20))
    out: Path = Path("bench_out/structure")
    cases: tuple[str, ...] = tuple(SETTINGS)
    rounds: int = 300
    lr: float = 0.05
    progress: bool = True

    _known = METHODS
    resume_free = SuiteConfig.resume_free + ("cases",)  # a resumed call may add settings

    def __post_init__(self):
        super().__post_init__()
        unknown = [c for c in self.cases if c not in SETTINGS]
        if unknown:
            raise ValueError(f"Unknown setting(s) {unknown}; choose from {list(SETTINGS)}.")
        if not self.cases:
            raise ValueError("Give at least one setting.")
        check_unique(self.cases, "setting")
        check_positive_int(self.rounds, name="rounds")
        check_positive(self.lr, name="lr")


def make_problem(name: str, seed: int) -> Structured:
    """The problem of setting ``name`` drawn with ``seed``."""
    kind, sizes, _ = SETTINGS[name]
    make = clustered_quadratics if kind == "quadratic" else clustered_regressions
    return make(sizes, seed=seed)


def _run(config: StructureConfig, task: tuple, cache: dict) -> dict:
    name, method, seed = task
    if (name, seed) not in cache:
        structured = make_problem(name, seed)
        cache[(name, seed)] = structured, oracle(structured, SETTINGS[name][2])
    structured, reference = cache[(name, seed)]
    fitted = METHODS[method].build(n_models=SETTINGS[name][2], rounds=config.rounds, lr=config.lr, seed=seed)
    tic = time.perf_counter()
    result = fitted.fit(structured.problem)
    seconds = time.perf_counter() - tic
    return {"seed": seed, **score(structured, reference, result.params), "seconds": seconds,
            "params": result.params.detach().double().tolist()}


#: a worker process's problems and oracles, by (setting, seed)
_worker_cache: dict = {}


def _worker_run(job):
    config, task = job
    return task, _run(config, task, _worker_cache)


#: the keys of a run's result that the table and the figure read
_RUN_KEYS = ("seed", "ratio", "recovered", "worst", "average", "oracle_worst", "oracle_average", "seconds")


def _tasks(config: StructureConfig) -> list[tuple]:
    """Every run of the call, as its key in the run store: ``(setting, method, seed)``."""
    return [(name, method, seed) for name in config.cases for seed in config.seeds for method in config.methods]


def _folder(task: tuple) -> str:
    """A run's folder in ``OUT/runs``: ``SETTING/METHOD/seedN``."""
    name, method, seed = task
    return folder_name(name, method, f"seed{seed}")


def _summarise(entry: dict) -> None:
    runs = entry["runs"]
    ratio = np.array([r["ratio"] for r in runs])
    entry.update(
        within=int((ratio <= THRESHOLD).sum()), ratio_median=float(np.median(ratio)), ratio_min=float(ratio.min()),
        ratio_max=float(ratio.max()), recovered_mean=float(np.mean([r["recovered"] for r in runs])),
        worst_mean=float(np.mean([r["worst"] for r in runs])),
        average_mean=float(np.mean([r["average"] for r in runs])),
        seconds_mean=float(np.mean([r["seconds"] for r in runs])),
        missed=[r["seed"] for r in runs if r["ratio"] > THRESHOLD],
    )


def _describe(name: str) -> str:
    kind, sizes, m = SETTINGS[name]
    shown = f"{sizes[0]}×{len(sizes)}" if len(set(sizes)) == 1 else ", ".join(map(str, sizes))
    return f"{kind}, group sizes {shown} (k = {len(sizes)}, n = {sum(sizes)}), m = {m}"


def table_markdown(results: dict) -> str:
    """The results as markdown: how many seeds each method brings within :data:`THRESHOLD` of the
    oracle in every setting, then one table per setting."""
    settings = results["settings"]
    methods = list(next(iter(settings.values()))["methods"])
    seeds = len(results["config"]["seeds"])
    lines = [f"**Within {THRESHOLD}× of the oracle** (seeds out of {seeds})", "",
             "| method | " + " | ".join(settings) + " |", "|" + "---|" * (len(settings) + 1)]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(str(s["methods"][m]["within"]) for s in settings.values()) + " |")
    for name, block in settings.items():
        units = "groups" if block["m"] >= block["k"] else "oracle sets"
        lines += ["", f"## {name}", "", f"{_describe(name)}; {units} recovered out of {block['units']}.", "",
                  f"| method | within {THRESHOLD}× | ratio to oracle, median [min, max] | {units} recovered | "
                  "worst objective | average objective | seconds |", "|---|---|---|---|---|---|---|"]
        for m, e in block["methods"].items():
            runs = e["runs"]
            lines.append(
                f"| {m} | {e['within']} / {len(runs)} | {e['ratio_median']:.3f} [{e['ratio_min']:.3f}, "
                f"{e['ratio_max']:.3f}] | {e['recovered_mean']:.2f} | {mean_std([r['worst'] for r in runs])} | "
                f"{mean_std([r['average'] for r in runs])} | {e['seconds_mean']:.2f} |")
        first = next(iter(block["methods"].values()))["runs"]
        lines.append(f"| *oracle* | | 1 | {block['units']} | {mean_std([r['oracle_worst'] for r in first])} | "
                     f"{mean_std([r['oracle_average'] for r in first])} | |")
        # the seeds a method misses when it reaches the oracle on most of them
        missed = {m: e["missed"] for m, e in block["methods"].items()
                  if e["missed"] and e["within"] >= len(e["runs"]) / 2}
        if missed:
            lines += ["", "Seeds above " + f"{THRESHOLD}×: " + "; ".join(
                f"{m}: {', '.join(map(str, seeds))}" for m, seeds in missed.items()) + "."]
    return "\n".join(lines)


def _figures(results: dict, out: Path) -> list[str]:
    """``ratio.png``: every run's ratio to the oracle, one panel per setting, log axis."""
    import matplotlib.pyplot as plt

    settings = results["settings"]
    cols = min(5, len(settings))
    rows = math.ceil(len(settings) / cols)
    methods = list(next(iter(settings.values()))["methods"])
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols + 1, 3.4 * rows), squeeze=False, sharey=True)
    jitter = np.random.default_rng(0)
    for ax, (name, block) in zip(axes.flat, settings.items()):
        for k, m in enumerate(methods):
            ratio = [r["ratio"] for r in block["methods"][m]["runs"]]
            ax.scatter(k + jitter.uniform(-0.2, 0.2, len(ratio)), ratio, s=8, alpha=0.6,
                       color=plots.method_style(k)["color"])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(THRESHOLD, color="k", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels(methods, rotation=90, fontsize=7)
    for ax in axes.flat[len(settings):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("ratio to the oracle")
    fig.suptitle(f"Mean best loss / the oracle's (dashed: {THRESHOLD}×), one point per seed", fontsize=10)
    fig.tight_layout()
    plots.save_figure(fig, out / "ratio.png")
    plt.close(fig)
    return ["ratio.png"]


def run_benchmark(config: StructureConfig, *, resume: bool = False, restart: bool = False, jobs: int = 1) -> dict:
    """Runs the benchmark, writes ``results.json``, ``table.md`` and ``ratio.png`` to ``config.out``.

    Each finished run is kept in its folder under ``config.out / RUNS_DIR``
    (:mod:`most.bench._runs`); with ``resume`` the runs kept there by an earlier call with the
    same settings are reused (the settings, methods and seeds may differ: only the missing runs
    are made); ``restart`` removes them first, and without either finished runs are refused.

    ``jobs`` > 1 makes the runs in that many worker processes (each with as many torch threads
    as this one; at most one per run and one per CPU core, :func:`~most.bench._runs.worker_count`);
    every run draws from its own seed, so the results are those of ``jobs=1`` (only the seconds
    differ)."""
    check_positive_int(jobs, name="jobs")
    results: dict[str, Any] = {"config": config.plain(), **software(), "threshold": THRESHOLD, "settings": {}}
    runs = RunStore(config.out, config.settings(torch=results["torch"]), suite="structure", folder=_folder,
                    resume=resume, restart=restart, required=_RUN_KEYS)  # checked before any work
    cache: dict = {}
    runs.make(_tasks(config), jobs, here=lambda task: _run(config, task, cache), worker=_worker_run, config=config,
              desc="structure", postfix=lambda task: {"setting": task[0], "method": task[1]})
    for name in config.cases:
        kind, sizes, m = SETTINGS[name]
        methods: dict[str, dict] = {}
        block = {"kind": kind, "sizes": list(sizes), "m": m, "k": len(sizes), "units": min(m, len(sizes)),
                 "methods": methods}
        for method in config.methods:
            entry = {"runs": [runs.get((name, method, seed)) for seed in config.seeds]}
            _summarise(entry)
            methods[method] = entry
        results["settings"][name] = block
    return write_results(results, config.out, _figures, table_markdown, json_default=_json_default)


def _json_default(v):
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")
