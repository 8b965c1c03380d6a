r"""Federated learning (paper Section 6.2, Table 2, Appendix E Table 7): MosT against FL baselines.

Each client picks its best model on its validation split (the paper's protocol); the table
reports the clients' mean test accuracy, the worst 20/40/60/80 % client groups, the oracle
(best model on test), the models' prediction KL (mean pairwise symmetric KL divergence on test inputs)
and, for transport-based methods, the sparsity of Gamma and its drift between rounds. Beside
it, the same models scored when each client picks its lowest-loss model on its training and
validation data pooled (``*_loss_pick``; ``FederatedResult.loss_choice``), the lower-variance
rule of the documentation's Benchmarks → Pick rules.

Every method gets the same local work (K local epochs of mini-batch SGD with the same
learning rate and batch size) and m models from m random initialisations (MosT's default
starts them from a 5-round shared warm-up instead, counted in the same round budget). The
server step ``eta_s`` of every method (and FedProx's ``mu``) is chosen per seed on the
clients' validation accuracy; the test numbers of that choice are reported.

Run with ``most bench federated`` (see ``--help``). Every finished candidate run (a method, seed,
server step and extra value) is kept in its own folder under ``OUT/runs/`` as it ends
(``METHOD_server_lr=ETA[_extra=X]/seedN``, the results store of ``most run``); an interrupted
table continues with ``--resume`` (``run_benchmark(config, resume=True)``), taking the runs kept
there instead of running them again, and ends with the same results as an uninterrupted call.

This module makes the runs; the summaries, the table and the figures are those of
:mod:`most.bench._federated_report`, whose names are importable from here too.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from .._validation import check_positive_int
from . import SuiteConfig, check_unique, write_results
from ._curves import split_curves
from .._kernels import software
from ._runs import DATA_DIGEST, RunStore, folder_name, worker_count
from .rows import BuiltRow, MethodRow
from ..federated import evaluation as ev
from ..federated.data import fedprox_synthetic, load_fashion_mnist, load_femnist, mixture_synthetic
from ..federated.models import FlatModel, cnn, logistic_regression
from ..federated.config import FederatedConfig
from ..federated.runtime import run_batch, run_federated
from ._federated_report import GROUP_KEYS as _GROUP_KEYS, KEYS as _KEYS, LOSS_PICK_KEYS as _LOSS_PICK_KEYS
from ._federated_report import POOLED_KEYS as _POOLED_KEYS
from ._federated_report import add_summaries, draw_figures, method_grids, paired_cell, table_markdown
# the report's helpers, also under the private names the tests import from this module
from ._federated_report import grid_edge_note as _grid_edge_note, main_methods as _main_methods  # noqa: F401

__all__ = ["FederatedBenchConfig", "METHODS", "add_summaries", "draw_figures", "method_grids", "paired_cell",
           "run_benchmark", "table_markdown"]

#: tau of R(Gamma) in the paper-style variants (losses are cross-entropies of order 1).
_TAU = 0.1
#: the balanced transport and no re-split (the federated default before the share bounds): the
#: base of the ablation rows of the stored tables, which were made with it
_BALANCED = {"marginals": {"type": "Uniform"}, "resplit": "none"}
_PAPER = {"diversity": _TAU}  # then the registry's variant "paper", and the ablations after it
#: the warm-up without the grouping by the clients' gradients per class (the default's before it)
_PLAIN_WARMUP = {"type": "WarmUp", "rounds": 5, "groups": "none"}
#: the re-split judged by the clients' updates alone (the default's re-split before it read the losses)
_BY_UPDATES = {"type": "Resplit", "signals": [{"type": "SplitByUpdates"}], "hand_over": False}


def _balanced(**changes) -> MethodRow:
    return MethodRow("MosT", {**_BALANCED, **changes})


#: label -> the method it builds (a registry name and its settings; the values searched on validation)
METHODS: dict[str, MethodRow | BuiltRow] = {
    "MosT": MethodRow("MosT"),
    "MosT (balanced)": _balanced(),
    "MosT (min-norm)": _balanced(combiner={"type": "MinNorm"}),
    "MosT (min-norm, last-layer bias)": _balanced(combiner={"type": "MinNorm", "coordinates": "last"}),
    "MosT (update split)": _balanced(warmup={"type": "GroupedWarmUp", "rounds": 5}),
    "MosT (2 shares)": MethodRow("MosT", {"assignment": {"type": "CappedTransportAssignment", "shares": 2},
                                          "weighting": {"type": "Shares"}, "resplit": "none"}),
    # the centralised default's marginals: each model serves at least one client, otherwise its closest
    "MosT (load bounds)": _balanced(marginals={"type": "LoadBounds"}),
    # a redundant model moved to split a model whose clients' updates pull apart (the re-split as the
    # stored rows were made: split by the updates' directions)
    "MosT (balanced, resplit)": MethodRow("MosT", {"marginals": {"type": "Uniform"}, "resplit": _BY_UPDATES}),
    "MosT (load bounds, resplit)": MethodRow("MosT", {"marginals": {"type": "LoadBounds"}, "resplit": _BY_UPDATES}),
    # the share bounds without the price (the federated default before the price), with and without the re-split
    "MosT (share bounds)": MethodRow("MosT", {"marginals": {"type": "ShareBounds"}, "resplit": _BY_UPDATES}),
    # the default's marginals with the re-split that splits by the updates (the default before the loss split)
    "MosT (update re-split)": MethodRow("MosT", {"resplit": _BY_UPDATES}),
    # the default's re-split without the hand-over (the default before the hand-over)
    "MosT (no hand-over)": MethodRow("MosT", {"resplit": {"type": "Resplit", "hand_over": False}}),
    # the default's re-split weighing a move before any hand-over (the default before a group's half
    # went to its group's model first), and that with a hand-over that always leaves min_clients on
    # the split model (the default before a smaller group of its own kept its model)
    "MosT (move first)": MethodRow("MosT", {"resplit": {"type": "Resplit", "hand_over_first": False}}),
    "MosT (no own group)": MethodRow("MosT", {"resplit": {"type": "Resplit", "own_group_gap": math.inf,
                                                          "hand_over_first": False}}),
    # each client scores the models with its own class frequencies added to their logits (for
    # label skew), with the default's marginals and with the share bounds alone (no price)
    "MosT (prior-adjusted)": MethodRow("MosT", {"client_loss": {"type": "PriorAdjusted"}}),
    "MosT (prior-adjusted, share bounds)": MethodRow("MosT", {"client_loss": {"type": "PriorAdjusted"},
                                                              "marginals": {"type": "ShareBounds"}}),
    "MosT (share bounds, no resplit)": MethodRow("MosT", {"marginals": {"type": "ShareBounds"}, "resplit": "none"}),
    # a shared warm-up of 30 % of the rounds: 15 of the image sets' 50, 30 of Syn's 100
    "MosT (warm-up 15)": _balanced(warmup={"type": "WarmUp", "rounds": 15, "groups": "none"}),
    "MosT (warm-up 30)": _balanced(warmup={"type": "WarmUp", "rounds": 30, "groups": "none"}),
    "MosT + R": _balanced(diversity=_TAU),
    "MosT (paper)": MethodRow("MosT", _PAPER, variants=("paper",)),
    "MosT w/o R": MethodRow("MosT", _PAPER, variants=("paper", "no-R")),
    "MosT w/o curriculum": MethodRow("MosT", _PAPER, variants=("paper", "no-curriculum")),
    "MosT(O)": MethodRow("MosT", _PAPER, variants=("paper", "O")),
    "MosT(M)": MethodRow("MosT", _PAPER, variants=("paper", "M")),
    "MosT(L)": MethodRow("MosT", _PAPER, variants=("paper", "L")),
    "IFCA": MethodRow("IFCA"),
    "FedAvg": MethodRow("FedAvg"),
    "FedProx": MethodRow("FedProx", extras=(0.001, 0.01, 0.1, 1.0), extra={"mu": 1.0}),
    "FedMGDA+": MethodRow("FedMGDAPlus", {"eps": 0.05}),
    "MGDA": MethodRow("MGDA"),
    "w-MGDA": MethodRow("WeightedMGDA"),
    "Linearization": MethodRow("Linearization"),
    "TCH-Set": MethodRow("SetScalarization", {"combiner": {"type": "TCHSetCombiner"}}),
    "STCH-Set": MethodRow("SetScalarization", {"combiner": {"type": "STCHSetCombiner"}}),
    "SoM (gradient)": MethodRow("SetScalarization", {"combiner": {"type": "SumOfMinimumCombiner"}}),
    # the clustered-FL and personalisation references; CFL's extra scales its thresholds (eps1, eps2) =
    # x * (0.4, 1.6), the reference code's, since update norms depend on the problem
    "CFL": MethodRow("CFL", extras=(0.25, 0.5, 1.0), extra={"eps1": 0.4, "eps2": 1.6}),
    "FedAvg + fine-tuning": MethodRow("FineTuning", {"n_models": 1}, extras=(1, 5), extra={"epochs": 1}),
    "Local only": MethodRow("LocalOnly"),
    # m shared models, each client's mixture of them learned by EM
    "FedEM": MethodRow("FedEM"),
    # the clients' true groups, from the data
    "Oracle": MethodRow("Oracle", groups=True),
    # the default before its warm-up grouped the clients by their gradients per class
    "MosT (no class groups)": MethodRow("MosT", {"warmup": dict(_PLAIN_WARMUP)}),
    # the default before its models started apart along the spectral groups where no class groups
    # stand apart but every spectral group holds together
    "MosT (no start apart)": MethodRow("MosT", {"warmup": {"type": "WarmUp", "rounds": 5,
                                                           "groups": {"type": "ClassGroups", "start_apart": False}}}),
    # the models started apart along the spectral groups whatever those show
    "MosT (always start apart)": MethodRow("MosT", {"warmup": {
        "type": "WarmUp", "rounds": 5, "groups": {"type": "ClassGroups", "start_margin": None}}}),
}
# Every other MosT row was measured with the plain warm-up (before the default's grouped it by the
# clients' gradients per class): it keeps that warm-up, so the stored tables' commands still make
# their numbers.
for _label, _row in METHODS.items():
    if isinstance(_row, MethodRow) and _row.method == "MosT" and _label != "MosT" and "warmup" not in _row.settings:
        METHODS[_label] = dataclasses.replace(_row, settings={**_row.settings, "warmup": dict(_PLAIN_WARMUP)})
#: the data sets of ``--dataset``
DATASETS = ("synthetic", "femnist", "fashion", "mixture", "mixture-reference")
#: methods without a server step: one run per seed (at step 1), not one per step of the grid
FIXED_STEP = frozenset({"Local only"})
#: the data sets of images, on which ``model`` may be ``cnn``
IMAGE_DATASETS = ("femnist", "fashion")
#: the settings that apply to some data sets only: field -> (its default, what it sets, those data
#: sets); with another data set a value other than the default is refused: it would be recorded in
#: the results, not used
DATASET_ONLY: dict[str, tuple[Any, str, tuple[str, ...]]] = {
    "rho": ((0.0, 0.0), "the synthetic data's model and feature shifts", ("synthetic",)),
    "sizes": ("equal", "the synthetic clients' sizes", ("synthetic",)),
    "data_path": (None, "the folder FEMNIST or Fashion-MNIST is read from", IMAGE_DATASETS),
    "cnn_channels": ((8, 16), "the widths of the CNN on the images", IMAGE_DATASETS),
    "concentration": (0.3, "Fashion-MNIST's label skew", ("fashion",)),
    "samples_per_client": (100, "Fashion-MNIST's client sizes", ("fashion",)),
}


def _groups(data) -> tuple[int, ...]:
    if data.groups is None:
        raise ValueError(f"The Oracle needs the clients' planted groups, which {data.name} does not have; use a data "
                         "set with groups (--label-group or --rotation-group / --rotations).")
    return data.groups


DEFAULT_METHODS = ("MosT", "MosT (min-norm)", "MosT (paper)", "IFCA", "FedAvg", "FedProx", "FedMGDA+", "MGDA",
                   "w-MGDA", "Linearization")


@dataclass(frozen=True)
class FederatedBenchConfig(SuiteConfig):
    """Settings of ``most bench federated``.

    Args:
        methods: names from :data:`METHODS` (default: :data:`DEFAULT_METHODS`).
        seeds: one run per seed (data, models and batches).
        dataset: ``synthetic`` (FedProx synthetic(rho1, rho2), 30 clients), ``femnist`` (LEAF
            directory), ``fashion`` (Fashion-MNIST, 100 clients, Dirichlet(0.3) label skew) or
            ``mixture`` (FedEM's synthetic mixture of 3 linear tasks, 300 clients,
            :func:`~most.federated.mixture_synthetic`; ``mixture-reference`` with its reference
            generator's labels).
        rho: (rho1, rho2) of the synthetic data, the paper's Syn(rho1, rho2): fedprox_synthetic's
            (model_shift, feature_shift).
        sizes: synthetic client sizes: ``equal`` (100 samples each) or ``power_law`` (FedProx's
            recipe: lognormal(4, 2) + 50 samples).
        n_models: m, the number of models.
        protocol: the FL protocol shared by every method (:class:`~most.federated.FederatedConfig`:
            rounds, local epochs, batch size, local lr, participation, loss probe); its seed is
            replaced by each run's seed.
        server_lrs: server steps searched on validation for every method (the default, {1, 3, 5, 7},
            is the grid of the synthetic tables in the documentation's Benchmarks → Federated).
        model: ``auto`` (logistic regression on synthetic data, the CNN on images), ``cnn`` (images
            only) or ``linear`` (multinomial logistic regression on the pixels: a CPU-sized
            stand-in; on the synthetic data sets, their logistic regression).
        cnn_channels: width of the CNN (FEMNIST, Fashion-MNIST); the paper's is (32, 64).
        samples_per_client: Fashion-MNIST average client size (keeps CPU runs short).
        rotation_groups: Fashion-MNIST only, instead of ``rotations``: the sizes of 1 to 4 groups
            of clients (summing to 100), turned by 0, 90, 180, 270 degrees: groups of unequal size.
        label_groups: Fashion-MNIST or FEMNIST: the sizes of 2 or more groups of clients whose
            labels are relabelled by a permutation of their own (concept shift,
            :func:`~most.federated.data.load_fashion_mnist`, :func:`~most.federated.data.load_femnist`);
            Fashion-MNIST's clients are their sum, FEMNIST's writers must be (105 in the LEAF subset).
        concentration: Fashion-MNIST's Dirichlet label skew (default 0.3; a large value such
            as 100 gives each client nearly every class, as concept-shift tests usually do).
        rotations: Fashion-MNIST only: r in 1..4 groups of clients whose images are turned by
            0, 90, 180, 270 degrees (:func:`~most.federated.data.load_fashion_mnist`), a known
            cluster structure on top of the label skew; 1 (default) turns nothing.
        data_path: FEMNIST / Fashion-MNIST directory (default: their environment variables).
        keep_matrices: also keep, for every run, each client's validation and test accuracy and
            selection loss on every model (``matrices``, in ``curves.json``), so that the table
            can be scored again under another pick rule without running it again
            (:func:`most.bench._rescore.rescore`; ``federated_tools.py rescore``).
        out: folder for results.json, table.md and the figures.

    A setting that applies to other data sets only (:data:`DATASET_ONLY`: ``rho`` and ``sizes``
    to ``synthetic``, ``data_path`` and ``cnn_channels`` to the images, ``concentration`` and
    ``samples_per_client`` to ``fashion``; ``model="cnn"`` to the images) is refused unless
    left at its default.
    """

    dataset: str = "synthetic"
    rho: tuple[float, float] = (0.0, 0.0)
    sizes: str = "equal"
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    n_models: int = 5
    protocol: FederatedConfig = field(default_factory=lambda: FederatedConfig(eval_every=5))
    server_lrs: tuple[float, ...] = (1.0, 3.0, 5.0, 7.0)
    model: str = "auto"
    cnn_channels: tuple[int, int] = (8, 16)
    samples_per_client: int = 100
    rotations: int = 1
    rotation_groups: tuple[int, ...] = ()
    label_groups: tuple[int, ...] = ()
    concentration: float = 0.3
    data_path: Path | None = None
    keep_matrices: bool = False
    out: Path = Path("bench_out/federated")
    progress: bool = True

    _known = METHODS
    _default_methods = DEFAULT_METHODS
    resume_free = SuiteConfig.resume_free + ("server_lrs",)  # a resumed call may add server steps

    def __post_init__(self):
        super().__post_init__()
        if self.dataset not in DATASETS:
            raise ValueError(f"Unknown dataset {self.dataset!r}; choose one of {', '.join(map(repr, DATASETS))}.")
        if self.sizes not in ("equal", "power_law"):
            raise ValueError(f"Unknown sizes {self.sizes!r}; choose 'equal' or 'power_law'.")
        if self.model not in ("auto", "cnn", "linear"):
            raise ValueError(f"Unknown model {self.model!r}; choose 'auto', 'cnn' or 'linear'.")
        if len(self.cnn_channels) != 2 or min(self.cnn_channels) < 1:
            raise ValueError(f"`cnn_channels` must be two positive widths such as (32, 64); got {self.cnn_channels}.")
        if isinstance(self.rotations, bool) or not isinstance(self.rotations, int) or not 1 <= self.rotations <= 4:
            raise ValueError(f"`rotations` must be a whole number from 1 to 4; got {self.rotations!r}.")
        if self.rotation_groups:
            if self.rotations > 1:
                raise ValueError("Give `rotations` (equal groups) or `rotation_groups` (their sizes), not both.")
            if self.dataset != "fashion":
                raise ValueError(f"`rotation_groups` turns Fashion-MNIST's images; it does not apply to "
                                 f"{self.dataset!r} (use --dataset fashion).")
            from ..federated.data import quarter_turns

            quarter_turns(tuple(self.rotation_groups), 100)  # the loader's check, before any work
        if self.label_groups:
            if self.dataset not in ("fashion", "femnist"):
                raise ValueError(f"`label_groups` relabels Fashion-MNIST's or FEMNIST's clients; it does not apply "
                                 f"to {self.dataset!r} (use --dataset fashion or femnist).")
            if self.rotations > 1 or self.rotation_groups:
                raise ValueError("Give rotation groups (image groups) or `label_groups` (concept groups), not both.")
            from ..federated.data import label_groups_of

            label_groups_of(tuple(self.label_groups), sum(self.label_groups), 0)  # the loader's check, before any work
        if not (isinstance(self.concentration, (int, float)) and not isinstance(self.concentration, bool)
                and math.isfinite(self.concentration) and self.concentration > 0):
            raise ValueError(f"`concentration` must be a positive number; got {self.concentration!r}.")
        self._check_dataset_only()  # after the values' own checks: a bad value is named as such
        if self.rotations > 1 and self.dataset != "fashion":
            raise ValueError(f"`rotations` turns Fashion-MNIST's images; it does not apply to {self.dataset!r} "
                             "(use --dataset fashion, or leave rotations at 1).")
        if not self.server_lrs or min(self.server_lrs) <= 0:
            raise ValueError(f"`server_lrs` must be positive numbers; got {self.server_lrs}.")
        check_unique(self.server_lrs, "server step")
        if not isinstance(self.keep_matrices, bool):
            raise ValueError(f"`keep_matrices` must be True or False; got {self.keep_matrices!r}.")

    def _check_dataset_only(self) -> None:
        """Refuses a setting that does not apply to ``dataset`` (:data:`DATASET_ONLY`), naming
        the data sets it applies to."""
        if self.model == "cnn" and self.dataset not in IMAGE_DATASETS:
            raise ValueError(f"`model` 'cnn' trains a CNN on the images of FEMNIST or Fashion-MNIST; it does not "
                             f"apply to {self.dataset!r}, whose model is logistic regression (use --dataset femnist "
                             "or fashion, or leave `model` out).")
        for name, (default, what, datasets) in DATASET_ONLY.items():
            value = getattr(self, name)
            if self.dataset not in datasets and (tuple(value) if isinstance(value, list) else value) != default:
                raise ValueError(f"`{name}` sets {what}; it does not apply to {self.dataset!r} (use --dataset "
                                 f"{' or '.join(datasets)}, or leave `{name}` out).")

    def plain(self) -> dict:
        """As :meth:`SuiteConfig.plain`; ``rotation_groups``, ``label_groups``, ``concentration``
        and ``keep_matrices`` only when given, so that results and run folders written before the
        settings existed keep the same settings."""
        out = super().plain()
        for key, default in (("rotation_groups", []), ("label_groups", []), ("concentration", 0.3),
                             ("keep_matrices", False)):
            if out[key] == default or out[key] == ():
                del out[key]
        return out

    @property
    def label(self) -> str:
        if self.dataset == "synthetic":
            return f"Syn({self.rho[0]:g},{self.rho[1]:g})" + (", power-law sizes" if self.sizes == "power_law" else "")
        if self.dataset == "fashion" and self.rotation_groups:
            return "Fashion-MNIST, rotated groups of " + "/".join(map(str, self.rotation_groups)) + " clients"
        if self.dataset == "fashion" and self.label_groups:
            return "Fashion-MNIST, concept shift in groups of " + "/".join(map(str, self.label_groups)) + " clients"
        if self.dataset == "femnist" and self.label_groups:
            return "FEMNIST, concept shift in groups of " + "/".join(map(str, self.label_groups)) + " writers"
        if self.dataset == "fashion" and self.rotations > 1:
            return f"Fashion-MNIST, {self.rotations} rotations"
        return {"femnist": "FEMNIST", "fashion": "Fashion-MNIST", "mixture": "FedEM's synthetic mixture",
                "mixture-reference": "FedEM's synthetic mixture, reference labels"}[self.dataset]


def _data(config: FederatedBenchConfig, seed: int):
    if config.dataset == "synthetic":
        sizes: dict[str, Any] = (dict(size_distribution="power_law", samples_per_client=50)
                                 if config.sizes == "power_law" else {})
        data = fedprox_synthetic(config.rho[0], config.rho[1], seed=seed, **sizes)
        return data, logistic_regression(int(data.input_shape[0]), data.n_classes)
    if config.dataset.startswith("mixture"):
        data = mixture_synthetic(seed=seed, reference_labels=config.dataset == "mixture-reference")
        return data, logistic_regression(int(data.input_shape[0]), data.n_classes)
    if config.dataset == "femnist":
        # LEAF stores a white background (1.0); models train better on ink = 1 - value
        data = load_femnist(config.data_path, seed=seed, ink=True, label_groups=tuple(config.label_groups))
    else:
        groups = dict(label_groups=tuple(config.label_groups)) if config.label_groups else dict(
            rotations=tuple(config.rotation_groups) or config.rotations)
        data = load_fashion_mnist(config.data_path, n_clients=sum(config.label_groups) or 100,
                                  concentration=config.concentration, samples_per_client=config.samples_per_client,
                                  seed=seed, **groups)
    if config.model == "linear":
        return data, FlatModel(lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(
            int(np.prod(data.input_shape)), data.n_classes)), name="logreg")
    return data, cnn(data.n_classes, channels=cast(tuple[int, int], tuple(config.cnn_channels)))  # two: checked


def _device_name(device: str | None) -> str:
    if device is not None and torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"


def _run_one(config, data, model, method_name, seed, eta, extra):
    fed = dataclasses.replace(config.protocol, seed=seed)
    tic = time.perf_counter()
    try:
        method = _method(config, method_name, eta, extra, data)
        result = run_federated(data, model, method, fed)
    except ValueError as exc:
        if "diverged" not in str(exc):
            raise
        result = exc
    return _record(data, result, seed, eta, extra, time.perf_counter() - tic, method, keep=config.keep_matrices)


def _method(config, name, eta, extra, data):
    row = METHODS[name]
    return row.build(extra, _groups(data) if row.groups else None, n_models=config.n_models, server_lr=eta)


def _steps(config, name) -> tuple[float, ...]:
    """The server steps a method's candidates take: the grid, or 1 for a method without one."""
    return (1.0,) if name in FIXED_STEP else tuple(config.server_lrs)


def _run_batch(config, data, model, tasks: list[tuple]) -> list[dict]:
    """The runs of ``tasks`` (one seed's ``(seed, method, eta, extra)``) as one batched job
    (:func:`~most.federated.run_batch`); each run's seconds are the batch's, shared equally."""
    runs = [(_method(config, name, eta, extra, data), dataclasses.replace(config.protocol, seed=seed))
            for seed, name, eta, extra in tasks]
    tic = time.perf_counter()
    results = run_batch(data, model, runs, errors="return")
    seconds = (time.perf_counter() - tic) / len(tasks)
    out = []
    for (seed, _, eta, extra), (method, _), result in zip(tasks, runs, results):
        if isinstance(result, ValueError) and "diverged" not in str(result):
            raise result
        out.append(_record(data, result, seed, eta, extra, seconds, method, keep=config.keep_matrices))
    return out


def _record(data, result, seed, eta, extra, seconds, method=None, *, keep: bool = False) -> dict:
    """A run's entry in the results: its summary, or, for a run whose training diverged, a
    failed candidate that is never chosen. A method that assigns each client its model
    (``result.assigned``) is scored on it under both picks; where the data has planted groups,
    ``group_ari`` is the adjusted Rand index of the clients' models against them, and
    ``group_ari_plan`` that of the method's own last assignment (the groups it holds), where it
    has one. ``data_digest`` (:meth:`~most.federated.data.FederatedDataset.digest`) lets a join of
    results check that its runs of a seed read the same data. With ``keep`` a run also records
    ``matrices`` (:func:`_matrices`), from which another pick rule can score it again."""
    if isinstance(result, Exception):
        # a candidate of the search that diverged is recorded and never chosen
        nan = float("nan")
        return {"seed": seed, "data_digest": data.digest(), "server_lr": eta, "extra": extra, "seconds": seconds,
                "val_accuracy": -math.inf, "failed": str(result),
                **{k: nan for k in _KEYS + _LOSS_PICK_KEYS + _POOLED_KEYS
                   + (_GROUP_KEYS if data.groups is not None else ())},
                "choice_counts": [], "per_client": [], "val_curve": [], "loss_curve": [], "sparsity": [],
                "drift": [], "plans": [], "timing": {}}
    # clients without test samples have no accuracy: left out of the summary, not counted as 0 %
    tested = result.tested
    val_acc, test_acc = result.val_accuracy[tested].nan_to_num(-1.0), result.test_accuracy[tested]
    sizes = [len(c.y_test) for c, t in zip(data.clients, tested.tolist()) if t]
    summary = ev.summarise(val_acc, test_acc, choice=result.choice[tested], sizes=sizes)
    mixes = result.mixture is not None  # scored on the client's mixture: one column
    assigns = result.assigned  # a cluster, a group, its own model or its mixture: the method's, not a pick
    loss_choice = result.loss_choice  # the assigned model itself where the method assigns one
    by_loss = ev.summarise(val_acc, test_acc, choice=loss_choice[tested], sizes=sizes)
    personal = method is not None and method.personal
    # a mixing client's group is its largest weight's model
    found = (result.mixture.argmax(1),) * 2 if mixes else (result.choice, loss_choice)
    groups = {} if data.groups is None or personal else {
        "group_ari": ev.adjusted_rand_index(found[0].tolist(), data.groups),
        "group_ari_loss_pick": ev.adjusted_rand_index(found[1].tolist(), data.groups)}
    kept = [log for log in result.history if log.plan is not None]
    plans, plan_rounds = [log.plan for log in kept], [log.round for log in kept]
    # a long run's history keeps every k-th plan (RoundLog): the drift between kept plans would
    # span several rounds, so it is recorded only where the plans are those of consecutive rounds
    consecutive = all(b - a == 1 for a, b in zip(plan_rounds, plan_rounds[1:]))
    if groups:
        # the method's own grouping: its last assignment (a plan's largest share, a cluster, a
        # group, a mixture's largest weight), whatever each client then picks on validation
        held = found[0] if assigns else _last_plan_owner(result.history, len(data.clients))
        if held is not None:
            groups["group_ari_plan"] = ev.adjusted_rand_index(held.tolist(), data.groups)
    val = result.val_accuracy.nan_to_num(-1.0)
    # the candidates of a method that assigns models are compared on the models it assigns
    val_mean = float((val.gather(1, result.choice[:, None]) if assigns else val.max(1).values).mean())
    return {
        "seed": seed, "data_digest": data.digest(), "server_lr": eta, "extra": extra, "seconds": seconds,
        "val_accuracy": val_mean,
        **{k: v for k, v in summary.items()},
        **{f"{k}_loss_pick": by_loss[k] for k in _KEYS[:5] + ("pooled",)},
        "choice_counts_loss_pick": by_loss["choice_counts"],
        # one model per client: no best model on test to speak of, nor a diversity of a few models
        **({"oracle": float("nan"), "prediction_kl": float("nan")} if personal else
           {"prediction_kl": result.prediction_diversity()}),
        # a mixture has no best single model on test to compare with
        **({"oracle": float("nan")} if mixes else {}),
        **groups,
        "per_client": result.client_accuracy.tolist(),
        "val_curve": [(log.round, log.val_accuracy) for log in result.history if log.val_accuracy is not None],
        "loss_curve": [log.train_loss for log in result.history],
        "sparsity": [ev.gamma_sparsity(p) for p in plans],
        "drift": [ev.gamma_drift(a, b, skip_empty=True) for a, b in zip(plans[:-1], plans[1:])] if consecutive
        else None,
        "plans": [p.argmax(1).tolist() for p in plans],  # each client's largest-share model per round
        "plan_rounds": plan_rounds,
        "timing": result.timings(),
        **({"matrices": _matrices(data, result, assigns)} if keep else {}),
    }


def _matrices(data, result, assigned: bool) -> dict:
    """What a pick rule needs to score a run again (:mod:`most.bench._rescore`): each client's
    ``val_accuracy``, ``test_accuracy`` and ``selection_loss`` (its training and validation data
    pooled; ``None`` where the engine did not measure it) on every model (``[n, m]``; one column
    for a mixture, NaN where a client has no sample of the split), its ``choice``, ``assigned``
    (the method gives each client its model, so no rule re-picks), each client's number of
    ``test_sizes`` and the planted ``groups`` (``None`` where the data has none)."""
    loss = result.selection_loss
    return {"val_accuracy": result.val_accuracy.tolist(), "test_accuracy": result.test_accuracy.tolist(),
            "selection_loss": None if loss is None else loss.tolist(), "choice": result.choice.tolist(),
            "assigned": bool(assigned), "test_sizes": [len(c.y_test) for c in data.clients],
            "groups": None if data.groups is None else list(data.groups)}


def _last_plan_owner(history, n: int) -> torch.Tensor | None:
    """``[n]`` each client's largest-share model in the last plan it took part in (of those the
    history keeps: every plan, or every k-th of a long run's), or ``None`` when the method logs no
    plan or a client never took part in one."""
    owner = torch.full((n,), -1, dtype=torch.long)
    for log in reversed(history):
        if log.plan is None:
            continue
        rows = log.plan.argmax(1).long()
        clients = log.clients.long()
        fresh = owner[clients] < 0
        owner[clients[fresh]] = rows[fresh]
        if bool((owner >= 0).all()):
            return owner
    return None


def _folder(task: tuple) -> str:
    """A candidate run's folder in ``OUT/runs``: ``METHOD_server_lr=ETA[_extra=X]/seedN``."""
    seed, name, eta, extra = task
    extras = (("extra", float(extra)),) if extra is not None else ()
    return folder_name((name, ("server_lr", float(eta))) + extras, f"seed{int(seed)}")


def run_benchmark(config: FederatedBenchConfig, *, resume: bool = False, restart: bool = False, jobs: int = 1,
                  batch: bool = True) -> dict:
    """Runs the benchmark; writes ``results.json``, ``table.md`` and figures to ``config.out``.

    Each finished candidate run is kept in its folder under ``config.out / RUNS_DIR``
    (:mod:`most.bench._runs`); with ``resume`` the runs kept there by an earlier call with the same
    settings are reused (the methods, seeds and server steps may differ: only the missing runs are
    made); ``restart`` removes them first, and without either finished runs are refused.

    ``jobs`` > 1 makes the runs in that many worker processes (each with as many torch threads
    as this one; at most one per run and one per CPU core, :func:`~most.bench._runs.worker_count`);
    every run draws from its own seed, so the results are those of ``jobs=1`` (only the seconds
    differ). Methods added to :data:`METHODS` at run time (by a script) are not known to the
    workers and need ``jobs=1``.

    ``batch`` (the default) makes the runs of one seed (every method, server step and extra
    value: they share the data) as one batched job (:func:`~most.federated.run_batch`), split
    into one part per worker so that the workers share the work; the results equal those of
    ``batch=False``, run by run (only the seconds differ: each run's are its batch's, shared
    equally). A batch's runs are recorded when it ends; a stopped call loses the batches in
    progress, never a finished one."""
    check_positive_int(jobs, name="jobs")
    if jobs > 1 and (late := [m for m in config.methods if m not in _IMPORTED_METHODS]):
        raise ValueError(f"Method(s) {late} were added to METHODS at run time, which worker processes do not see; "
                         "run them with jobs=1.")
    loaded = [config.seeds[0], _data(config, config.seeds[0])]  # fail before any work if the data is missing
    results: dict[str, Any] = {"config": config.plain(), "label": config.label, **software(),
                               "device_name": _device_name(config.protocol.device), "methods": {m: {"runs": []} for m in config.methods}}
    results["picks"] = {name: type(_method(config, name, 1.0, METHODS[name].extras[0], loaded[1][0])).pick
                        for name in config.methods}
    runs = RunStore(config.out, _settings(config, results, loaded), suite="federated", folder=_folder, resume=resume,
                    restart=restart, paths=("data_path",), required=_RUN_KEYS)  # checked before any work
    tasks = [(seed, name, eta, extra) for seed in config.seeds for name in config.methods
             for eta in _steps(config, name) for extra in METHODS[name].extras]
    if batch:
        by_seed = [[task for task in tasks if task[0] == seed] for seed in config.seeds]
        split = worker_count(jobs, len(tasks))  # one part of each seed per worker that makes them
        parts = [part[i::split] for part in by_seed for i in range(split) if part[i::split]]  # methods mixed
        runs.make_batches(parts, jobs, here=lambda part: _make_batch(config, part, loaded), worker=_worker_batch,
                          config=config, desc=f"federated {config.label}", postfix=lambda task: {"seed": task[0]})
    else:
        runs.make(tasks, jobs, here=lambda task: _make(config, task, loaded), worker=_worker_run, config=config,
                  desc=f"federated {config.label}", postfix=lambda task: {"method": task[1], "seed": task[0]})
    for seed in config.seeds:
        for name in config.methods:
            candidates = [cast(dict, runs.get((seed, name, eta, extra)))  # a dict: every run was made
                          for eta in _steps(config, name) for extra in METHODS[name].extras]
            best = dict(max(candidates, key=lambda r: r["val_accuracy"]))  # chosen on validation only
            best["candidates_val"] = [(c["server_lr"], c["extra"], c["val_accuracy"]) for c in candidates]
            results["methods"][name]["runs"].append(best)
    add_summaries(results)
    return write_results(results, config.out, draw_figures, table_markdown, split=split_curves)


#: the keys of a run's result that the table reads (a failed candidate has them too)
_RUN_KEYS = ("seed", "server_lr", "extra", "seconds", "val_accuracy") + _KEYS


def _settings(config: FederatedBenchConfig, results: dict, loaded: list):
    """The settings of a candidate run by its key ``(seed, method, eta, extra)``: the call's, and
    the data of its seed by its digest (:meth:`~most.federated.data.FederatedDataset.digest`, the
    one each run records with its numbers), not by the path it was read from; ``None`` for a seed
    this call does not run (its stored runs are not read). A seed's data is loaded, and kept in
    ``loaded`` (``[seed, (data, model)]``, as :func:`_make` keeps it), only when its digest is
    first asked for and not already known."""
    common = config.settings(torch=results["torch"], device_name=results["device_name"])
    digests: dict = {}

    def of(key: tuple) -> dict | None:
        seed = key[0]
        if seed not in config.seeds:
            return None
        if seed not in digests:
            if loaded[0] != seed:
                loaded[:] = [seed, _data(config, seed)]
            digests[seed] = loaded[1][0].digest()
        return {**common, DATA_DIGEST: digests[seed]}

    return of


def _make(config: FederatedBenchConfig, task: tuple, loaded: list) -> dict:
    """The run of ``task = (seed, method, eta, extra)``; ``loaded`` is ``[seed, (data, model)]``,
    the last seed's data, replaced when the seed changes (the tasks come seed by seed)."""
    seed, name, eta, extra = task
    if loaded[0] != seed:
        loaded[:] = [seed, _data(config, seed)]
    data, model = loaded[1]
    return _run_one(config, data, model, name, seed, eta, extra)


def _make_batch(config: FederatedBenchConfig, tasks: list[tuple], loaded: list) -> list[dict]:
    """The runs of ``tasks`` (all of one seed) as one batch; ``loaded`` as for :func:`_make`."""
    seed = tasks[0][0]
    if loaded[0] != seed:
        loaded[:] = [seed, _data(config, seed)]
    data, model = loaded[1]
    return _run_batch(config, data, model, [tuple(task) for task in tasks])


def _worker_batch(job):
    config, tasks = job
    return tasks, _make_batch(config, tasks, _worker_data)


#: the methods every worker process knows (those defined when this module is imported)
_IMPORTED_METHODS = frozenset(METHODS)
#: a worker's data of its last seed, ``[seed, (data, model)]``
_worker_data: list = [None, None]


def _worker_run(job):
    config, task = job
    return task, _make(config, task, _worker_data)
