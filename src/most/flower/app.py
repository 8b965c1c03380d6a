"""A ready-made Flower app: MosT (or a baseline) on FedProx's synthetic data, FEMNIST or
Fashion-MNIST, with logistic regression or the paper's CNN.

Reference it from a Flower app's ``pyproject.toml`` (``examples/flower/pyproject.toml``)::

    [tool.flwr.app.components]
    serverapp = "most.flower.app:server_app"
    clientapp = "most.flower.app:client_app"

and run it with ``flwr run examples/flower <federation>``, in simulation or on a deployment
(the docs' Flower page, "Deployment"). Settings come from the run config
(``[tool.flwr.app.config]``, overridable with ``--run-config``); see :class:`AppSettings`.
Each SuperNode holds one client: its ``partition-id`` node config (``0 .. num-clients - 1``)
selects which, and every node builds the same data from ``data-seed``. The ServerApp writes
``result.json`` and ``final.pt`` into ``out``: the final models, the accuracies and each client's
choice, and, where the method has them, what says which predictor a client's accuracy is of
(FedEM's ``mixture``, FineTuning's ``fine_tuned_from``) and the pick by loss (``selection_loss``,
``loss_choice``).

The ServerApp checks the run config, ``out`` included, before it sends a message. An error of
the run config (or one at the end, where ``out`` cannot be written: the results then go to a new
temporary folder, which the error names) is an :class:`AppError`, which Flower's log shows as
one line, ``ServerApp raised an exception: <the message>``, without a traceback, followed by
Flower's ``Exit Code: 201``; the run's status is ``finished:failed``.

For your own data, build the two objects the same way: a :class:`~most.flower.MostStrategy`
in a ``ServerApp``'s main, and :func:`~most.flower.make_client_app` with a ``load(context)``
that returns the node's :class:`~most.flower.ClientSpec`.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import logging
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from flwr.serverapp import ServerApp

from ..checkpoint import atomic_write_bytes, atomic_write_text
from .._validation import check_non_negative, check_positive, check_positive_int, check_seed
from ..config import ConfigError, build, did_you_mean
from .._json import dumps
from .. import registry
from ..federated import methods as _methods
from ..federated.config import FederatedConfig
from ..federated.data import FederatedDataset, split_counts
from .client import ClientSpec, make_client_app
from .strategy import MostStrategy

__all__ = ["AppSettings", "AppError", "RunConfigError", "server_app", "client_app", "METHODS", "SAMPLES"]


class AppError(Exception):
    """An error of the app whose message says all there is to fix: Flower's log of the
    ServerApp shows it as one line, without a traceback (:class:`_OneLineAppErrors`)."""


class RunConfigError(AppError, ValueError):
    """A run-config value the app cannot run with; the message names its dashed key."""

#: Each data set the app can run (``dataset`` in the run config, a name of the registry): the shape
#: of its samples and its number of classes, from which the server builds the model without
#: reading the data (the SuperLink's machine need not hold it). A test checks them against the
#: loaders.
SAMPLES: dict[str, tuple[tuple[int, ...], int]] = {
    "fedprox_synthetic": ((60,), 10),
    "femnist": ((1, 28, 28), 62),
    "fashion_mnist": ((1, 28, 28), 10),
}

#: Methods the app can run, by name (``method`` in the run config): the registry's federated
#: methods built from ``(n_models, server_lr)`` (and MosT's warm-up, FineTuning's epochs); not
#: SetScalarization, which needs a combiner, the Oracle, which needs the groups, or local
#: training, which has no models to choose.
METHODS = {name: cls for name, cls in registry.methods(registry.FEDERATED).items()
           if name not in ("SetScalarization", "Oracle", "LocalOnly")}


def _library_default(cls, name: str):
    """The default of field ``name`` of the library's dataclass ``cls``: the app's settings that
    the library also has default to the library's value, so the two cannot disagree."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


@dataclass(frozen=True)
class AppSettings:
    """The run config of the app (Flower's keys use dashes: ``num-clients``, ``server-lr``...).

    Args:
        method: a name from :data:`METHODS`.
        n_models: m.
        server_lr: the server step eta_s.
        warmup_rounds: MosT's shared warm-up rounds (ignored by the other methods).
        class_groups: whether MosT's warm-up asks the clients for their gradients per class in
            its last round and starts the models one per group where those show groups
            (:class:`~most.federated.methods.ClassGroups`, the library's default); ``false``:
            the clients send their losses and updates alone.
        fine_tune_epochs: FineTuning's local epochs after the last round (ignored by the others).
        rounds, local_epochs, batch_size, lr, eval_every, seed: the protocol
            (:class:`~most.federated.FederatedConfig`).

    The settings the library also has (``server_lr``, ``warmup_rounds`` and the protocol's)
    default to the library's values; ``examples/flower/pyproject.toml`` sets every key, with
    the server step and rounds of the synthetic table.
        dataset: a name from :data:`SAMPLES`: ``fedprox_synthetic`` (FedProx's synthetic(rho1,
            rho2)), ``femnist`` (LEAF FEMNIST, one client per writer) or ``fashion_mnist``
            (Fashion-MNIST with a Dirichlet label skew).
        data_path: the folder of FEMNIST or Fashion-MNIST on each SuperNode ("": the loader's
            environment variable or default folder).
        model: ``logistic_regression`` or ``cnn`` (the paper's), sized from the data set.
        num_clients: the clients (one per SuperNode); for FEMNIST, its number of writers.
        rho1, rho2, samples_per_client, data_seed: the data: synthetic(rho1, rho2)'s parameters;
            samples per client (synthetic and Fashion-MNIST); the seed of the data's draws.
        timeout: seconds to wait for one step's replies; clients that have not answered by
            then are left out of that round.
        wait_for_clients: seconds to wait at the start for all clients to connect.
        out: folder for ``result.json`` and ``final.pt`` ("" writes nothing), on the ServerApp's
            machine: the ServerApp refuses, before the first message, a path at or under a file
            or in a folder it may not write in; a folder that does not exist yet is made.
    """

    method: str = "MosT"
    n_models: int = 3
    server_lr: float = _library_default(_methods.FederatedMethod, "server_lr")
    warmup_rounds: int = _library_default(_methods.WarmUp, "rounds")
    class_groups: bool = True
    fine_tune_epochs: int = _library_default(_methods.FineTuning, "epochs")
    rounds: int = _library_default(FederatedConfig, "rounds")
    local_epochs: int = _library_default(FederatedConfig, "local_epochs")
    batch_size: int = _library_default(FederatedConfig, "batch_size")
    lr: float = _library_default(FederatedConfig, "lr")
    eval_every: int = _library_default(FederatedConfig, "eval_every")
    seed: int = _library_default(FederatedConfig, "seed")
    dataset: str = "fedprox_synthetic"
    data_path: str = ""
    model: str = "logistic_regression"
    num_clients: int = 30
    rho1: float = 0.0
    rho2: float = 0.0
    samples_per_client: int = 100
    data_seed: int = 0
    timeout: float = 600.0
    wait_for_clients: float = 120.0
    out: str = ""

    @classmethod
    def from_run_config(cls, run_config) -> "AppSettings":
        """The settings of a Flower run config (dashed keys), each value checked as an experiment
        file's are (:func:`most.config.build`: unknown keys with a suggestion, wrong types), and
        every number the app reads checked for its range under its run-config key. Raises
        :class:`RunConfigError` naming the dashed key (``run-config.n-models: expected an integer ...``
        for a wrong kind, ```n-models` must be an int >= 1 ...`` for a value out of range)."""
        try:
            return cls._from_run_config(run_config)
        except RunConfigError:
            raise
        except ValueError as exc:
            raise RunConfigError(str(exc)) from None

    @classmethod
    def _from_run_config(cls, run_config) -> "AppSettings":
        keys = {f.name: f.name.replace("_", "-") for f in dataclasses.fields(cls)}  # field -> run-config key
        values = {}
        for key, value in dict(run_config).items():
            name = str(key).replace("-", "_")
            if name not in keys:
                raise RunConfigError(f"run-config.{key}: unknown key{did_you_mean(str(key), list(keys.values()))}. "
                                     f"Allowed keys: {', '.join(keys.values())}.")
            values[name] = value
        try:
            settings = build(cls, values, path="run-config")
        except ConfigError as exc:  # it names the field ("run-config.n_models: ..."): name the key instead
            raise RunConfigError(re.sub(r"^run-config\.(\w+)", lambda m: f"run-config.{keys.get(m[1], m[1])}",
                                        str(exc))) from None
        # The library checks these again under its own names (n_models, model_shift, seed, ...), and
        # the data's only on the SuperNodes, where a bad value fails every client's load: checked here,
        # on the ServerApp before any message, under the key the run config spells.
        for key, minimum in (("n-models", 1), ("warmup-rounds", 0), ("fine-tune-epochs", 1), ("rounds", 1),
                             ("local-epochs", 1), ("batch-size", 1), ("eval-every", 0), ("num-clients", 1),
                             ("samples-per-client", 1)):
            check_positive_int(settings._value(key), name=key, minimum=minimum)
        for key in ("seed", "data-seed"):
            check_seed(settings._value(key), name=key)
        for key in ("server-lr", "lr", "timeout"):
            check_positive(settings._value(key), name=key)
        for key in ("rho1", "rho2", "wait-for-clients"):
            check_non_negative(settings._value(key), name=key)
        for key, value, known in (("method", settings.method, METHODS), ("dataset", settings.dataset, SAMPLES),
                                  ("model", settings.model, registry.models())):
            if value not in known:
                raise ValueError(f"Unknown {key} {value!r}{did_you_mean(value, known)}; choose from "
                                 f"{', '.join(known)}.")
        if settings.dataset == "fedprox_synthetic":
            _check_synthetic_size(settings.samples_per_client)
        return settings

    def _value(self, key: str):
        """The setting of the run-config key ``key`` (dashed)."""
        return getattr(self, key.replace("-", "_"))

    def build(self):
        """``(method, model, FederatedConfig)``: the protocol fields are FederatedConfig's own; the
        model is sized from :data:`SAMPLES`, so the server builds it without the data."""
        groups = _methods.ClassGroups() if self.class_groups else None
        extra = ({"warmup": _methods.WarmUp(self.warmup_rounds, groups=groups)} if self.method == "MosT" else
                 {"epochs": self.fine_tune_epochs} if self.method == "FineTuning" else {})
        method = METHODS[self.method](self.n_models, server_lr=self.server_lr, **extra)
        protocol = {f.name: getattr(self, f.name) for f in dataclasses.fields(FederatedConfig) if hasattr(self, f.name)}
        return method, self._model(), FederatedConfig(**protocol, pair_seeds=True)

    def _model(self):
        shape, n_classes = SAMPLES[self.dataset]
        if self.model == "cnn":
            if len(shape) != 3:
                raise ValueError(f"model = 'cnn' takes images; the {self.dataset} data set has samples of shape "
                                 f"{shape}: use model = 'logistic_regression'.")
            return registry.models()["cnn"](n_classes, in_channels=shape[0], side=shape[1])
        return registry.models()["logistic_regression"](math.prod(shape), n_classes, input_shape=shape)

    def data(self) -> FederatedDataset:
        """The federation's data, the same on every node (from ``data_seed``); a FEMNIST folder
        whose writers are not ``num_clients`` is refused."""
        load = registry.datasets()[self.dataset]
        path = self.data_path or None
        if self.dataset == "fedprox_synthetic":
            data = load(self.rho1, self.rho2, n_clients=self.num_clients, samples_per_client=self.samples_per_client,
                        seed=self.data_seed)
        elif self.dataset == "fashion_mnist":
            data = load(path, n_clients=self.num_clients, samples_per_client=self.samples_per_client,
                        seed=self.data_seed)
        else:
            data = load(path, seed=self.data_seed)
        if data.n_clients != self.num_clients:
            raise ValueError(f"The {self.dataset} data has {data.n_clients} clients, but num-clients is "
                             f"{self.num_clients}: set num-clients = {data.n_clients} and start that many SuperNodes.")
        return data


def _check_synthetic_size(samples: int) -> None:
    """Refuses a ``samples-per-client`` that leaves each synthetic client (all of one size) without
    a validation or a test sample under the loader's split: every client's load would fail."""
    split = inspect.signature(registry.datasets()["fedprox_synthetic"]).parameters["split"].default
    fewest = next(n for n in range(1, 1000) if min(split_counts(n, split)[1:]) > 0)
    if samples < fewest:
        train, val, test = split_counts(samples, split)
        raise ValueError(f"`samples-per-client` = {samples} gives each fedprox_synthetic client {train} training, "
                         f"{val} validation and {test} test samples (split {tuple(split)}), but each client's model is "
                         f"chosen on its validation samples and scored on its test samples: set samples-per-client "
                         f">= {fewest}.")


def _load(context) -> ClientSpec:
    settings = AppSettings.from_run_config(context.run_config)
    if "partition-id" not in context.node_config:
        raise ValueError("This SuperNode has no partition-id: start it with "
                         "--node-config \"partition-id=K num-partitions=N\".")
    pid = int(context.node_config["partition-id"])
    if not 0 <= pid < settings.num_clients:
        raise ValueError(f"partition-id {pid} is outside 0..{settings.num_clients - 1} (num-clients).")
    _, model, _ = settings.build()
    return ClientSpec(model=model, data=settings.data().clients[pid], client=pid)


def _check_out(out: str) -> None:
    """Refuses an ``out`` folder the ServerApp could not write at the end of the run: a path
    at or under a file, or under a folder it may not write in (the folders that do not exist yet
    are made at the end). Checked in the ServerApp, before any message: the SuperNodes read the
    run config too, and ``out`` is a path on the ServerApp's machine."""
    path = Path(out).expanduser().absolute()
    existing = path
    while not existing.exists() and existing.parent != existing:  # the nearest part that exists
        existing = existing.parent
    if path.exists() and not path.is_dir():
        raise RunConfigError(f"`out` = {out!r} is a file, not a folder: choose a folder for result.json and "
                             "final.pt.")
    if not existing.is_dir():
        raise RunConfigError(f"`out` = {out!r} is under {str(existing)!r}, which is a file, not a folder: choose "
                             "a folder for result.json and final.pt.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunConfigError(f"`out` = {out!r}: this ServerApp may not write in {str(existing)!r}; choose a folder "
                             "it can write in.")


def _main(grid, context) -> None:
    _OneLineAppErrors.install()
    settings = AppSettings.from_run_config(context.run_config)
    if settings.out:
        _check_out(settings.out)
    try:
        method, model, config = settings.build()
        strategy = MostStrategy(method, model, config, n_clients=settings.num_clients, timeout=settings.timeout,
                                wait_for_clients=settings.wait_for_clients)
    except ValueError as exc:  # the settings, each valid, do not make a run (more models than clients, ...)
        raise RunConfigError(f"The run config does not make a run: {exc}") from None
    tic = time.perf_counter()
    result = strategy.run(grid)
    seconds = time.perf_counter() - tic
    predictors = _predictors(result)
    summary = {
        "settings": dataclasses.asdict(settings), "seconds": seconds, "rounds": len(result.history),
        "mean_accuracy": float(result.client_accuracy.nanmean()),  # clients missing at the end are NaN
        "client_accuracy": result.client_accuracy.tolist(), "choice": result.choice.tolist(),
        "missing": {str(k): v for k, v in result.missing.items()},
        "prediction_kl": result.prediction_diversity(), "timings": result.timings(),
        "plans": [None if log.plan is None else log.plan.tolist() for log in result.history],
        "sent": [list(x) for x in strategy.messages],
        **{key: value.tolist() for key, value in predictors.items()},
    }
    print(f"most: {settings.method} finished {len(result.history)} rounds in {seconds:.1f} s; "
          f"mean client accuracy {summary['mean_accuracy']:.4f}; missing clients: {summary['missing'] or 'none'}",
          flush=True)
    if settings.out:  # final.pt: the arrays the experiment runner saves for an in-process run, and the predictors
        plans = [log.plan for log in result.history if log.plan is not None]
        tensors = {"params": result.params, "assignment": plans[-1] if plans else None,
                   "val_accuracy": result.val_accuracy, "test_accuracy": result.test_accuracy,
                   "choice": result.choice, **predictors}
        try:
            _write_result(Path(settings.out), summary, tensors)
        except OSError as exc:  # checked at the start, but the folder can change in a long run: keep the results
            kept = Path(tempfile.mkdtemp(prefix="most-flower-result-"))
            _write_result(kept, summary, tensors)
            raise AppError(f"Could not write the results to `out` = {settings.out!r} ({exc.strerror or exc}); they "
                           f"were written to {str(kept)!r} instead.") from None


def _predictors(result) -> dict:
    """What says which predictor each client's accuracy belongs to, where the result has it: a
    mixing method's weights (``mixture [n, m]``), the model each fine-tuning client started from
    (``fine_tuned_from [n]``), and each model's loss on the client's training and validation data
    (``selection_loss``) with the pick by it (``loss_choice [n]``)."""
    out = {key: getattr(result, key) for key in ("mixture", "fine_tuned_from", "selection_loss")
           if getattr(result, key) is not None}
    if result.selection_loss is not None or result.assigned:
        out["loss_choice"] = result.loss_choice
    return out


def _write_result(out: Path, summary: dict, tensors: dict) -> None:
    """``result.json`` (NaN as null: valid JSON) and ``final.pt``, each written atomically."""
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    atomic_write_bytes(out / "final.pt", buffer.getvalue())
    atomic_write_text(out / "result.json", dumps(summary, indent=1) + "\n")


class _OneLineAppErrors(logging.Filter):
    """On Flower's logger: a record that carries an :class:`AppError` (Flower logs the exception
    a ServerApp raised with its traceback) shows the error's message on its line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, AppError):
            record.msg, record.args = f"{record.getMessage()}: {exc}", ()
            record.exc_info, record.exc_text = None, None
        return True

    @classmethod
    def install(cls) -> None:
        flower = logging.getLogger("flwr")
        if not any(isinstance(f, cls) for f in flower.filters):
            flower.addFilter(cls())


def _apps():
    server = ServerApp()
    server.main()(_main)
    return server, make_client_app(_load)


server_app, client_app = _apps()
