"""The checks :func:`most.federated.run_federated` makes before any work: the method, the data,
the model and the configuration, each alone and together (a model that cannot take the data's
samples is refused with torch's reason and how to fix it)."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .._validation import public_path
from .data import FederatedDataset
from .config import FederatedConfig
from .models import FlatModel, NotLogits

if TYPE_CHECKING:
    from types import FrameType


def _describe_type(obj) -> str:
    return public_path(obj if isinstance(obj, type) else type(obj))


def _check_method(method) -> None:
    from . import methods as federated_methods

    if isinstance(method, type):
        name = method.__name__
        raise TypeError(f"`method` must be a method object, not the class {_describe_type(method)}: call it, "
                        f"e.g. `{name}(n_models=3)`.")
    if isinstance(method, federated_methods.FederatedMethod):
        return
    name = type(method).__name__
    module = type(method).__module__ or ""
    if module.startswith("most.") and not module.startswith("most.federated"):
        hint = (f" {_describe_type(method)} is a centralised method (for most.Problem objectives); "
                + (f"for federated clients use most.federated.methods.{name}(n_models=...)."
                   if name in federated_methods.__all__ else
                   f"the federated methods are {', '.join(_federated_method_names())}."))
    else:
        hint = " A method of one's own subclasses most.federated.methods.FederatedMethod."
    raise TypeError(f"`method` must be a federated method of most.federated.methods (e.g. "
                    f"most.federated.methods.MosT(n_models=3)); got {_describe_type(method)}.{hint}")


def _federated_method_names() -> list[str]:
    from . import methods as F

    return [n for n in F.__all__ if isinstance(getattr(F, n), type) and issubclass(getattr(F, n), F.FederatedMethod)
            and n != "FederatedMethod"]


def _check_batch(dataset: FederatedDataset, batch_size: int) -> Tensor:
    """Training samples as :func:`local_train` batches them: ``min(batch_size, N)`` rows, ``N``
    the largest client's training samples (a batch is padded to that width; a layer with batch
    statistics, such as BatchNorm, fails on a batch of one and works on more), taken from the
    first clients, in the dtype the runtime stacks the clients' data in (:func:`pad_split`)."""
    want = max(1, min(batch_size, max(c.n_train for c in dataset.clients)))
    parts, have = [], 0
    for c in dataset.clients:
        if have >= want:
            break
        part = c.x_train[: want - have]
        parts.append(part)
        have += len(part)
    return torch.cat(parts).to(torch.get_default_dtype())


def check_inputs(dataset: FederatedDataset, model: FlatModel, method, config: FederatedConfig) -> None:
    """The checks :func:`run_federated` makes before any work, for the four arguments together.

    Cheap (no training; one forward pass of the model, without gradients, on a batch of
    ``min(batch_size, N)`` training samples, as wide as training's batches), so a driver can
    check every run before it starts any (``most run`` does). Raises ``TypeError`` for an
    argument of the wrong kind (a module instead of a :class:`FlatModel`, a method class instead
    of an instance, a centralised method, a dict instead of a :class:`FederatedConfig`; a
    ``dataset`` that is not a :class:`FederatedDataset` is a ``ValueError``, as it has always
    been) and ``ValueError`` for arguments that do not fit together, each saying how to fix it:

    * ``method.check(n_clients)`` (e.g. MosT refuses more models than clients);
    * a data set where no client has validation samples (each client's model is chosen on them)
      or no client has test samples (nothing to score);
    * a model that cannot take the data's samples (input size or shape, dtype, or any other
      failure of its forward pass, with torch's reason), or that has fewer outputs than the data
      has classes.

    It warns (``UserWarning``) when MosT's warm-up takes every round (``rounds <=
    warmup_rounds``): the run is then FedAvg with m copies of one model.

    A client with an empty validation or test split is allowed (see :class:`FederatedResult`
    for how it is chosen and scored), as long as some client has each split.
    """
    if not isinstance(dataset, FederatedDataset):
        raise ValueError(f"`dataset` must be a most.federated.FederatedDataset; got {_describe_type(dataset)}.")
    if not isinstance(model, FlatModel):
        if isinstance(model, torch.nn.Module):
            raise TypeError(f"`model` must be a most.federated.FlatModel, which holds the m models as flat vectors; "
                            f"got the module {type(model).__name__}. Wrap its architecture: "
                            f"`fl.FlatModel(lambda: {type(model).__name__}(...))` (a function that builds a new "
                            "module), or use fl.logistic_regression(dim, n_classes) / fl.cnn(n_classes).")
        raise TypeError(f"`model` must be a most.federated.FlatModel (e.g. fl.logistic_regression(dim, n_classes) or "
                        f"fl.FlatModel(lambda: Net())); got {_describe_type(model)}.")
    _check_method(method)
    if not isinstance(config, FederatedConfig):
        if isinstance(config, dict):
            raise TypeError("`config` must be a most.federated.FederatedConfig, not a dict: build it with "
                            f"`FederatedConfig(**d)` (keys {', '.join(map(str, config)) or 'none'}).")
        raise TypeError(f"`config` must be a most.federated.FederatedConfig; got {_describe_type(config)}.")
    method.check(dataset.n_clients)
    _check_parameter_names(method, model)

    for split, use in (("val", "each client's model is chosen on its validation samples"),
                       ("test", "the models are scored on the clients' test samples")):
        if not any(getattr(c, f"n_{split}") for c in dataset.clients):
            raise ValueError(f"{dataset.name!r}: no client has {'validation' if split == 'val' else 'test'} samples, "
                             f"but {use}. Give the clients a {split} split (e.g. the loaders' "
                             "split=(0.6, 0.2, 0.2)), or more samples per client.")

    _warn_if_most_never_leaves_its_warmup(method, config)
    _check_normalisation(model)
    _check_model_on_data(dataset, model, config.batch_size)


def _check_normalisation(model: FlatModel) -> None:
    """Refuses normalisation layers that use or update the statistics of their batch: the
    runtime evaluates every client's samples in one pass and pads a client's last training batch
    with rows of weight 0, so such a layer would make a client's losses, accuracy and updates
    depend on other clients' data; and running statistics are not kept per model."""
    from .._modules import batch_statistics_layers, running_stats_layers

    template = model._template
    names = batch_statistics_layers(template)
    if names:
        layer = template.get_submodule(names[0])
        how = "in training mode" if layer.training else "without running statistics (track_running_stats=False)"
        raise ValueError(
            f"The model {model.name}'s layer {names[0]!r} ({type(layer).__name__}) is batch normalisation {how}: it "
            "normalises by the statistics of its batch. The federated runtime evaluates the clients' samples in "
            "one pass and pads a client's last training batch, so a client's losses and accuracy would depend on "
            "other clients' data. Put the layer in evaluation mode in the factory (`layer.eval()`, or `net.eval()` "
            "for a pretrained backbone: its stored statistics then stay fixed), or use nn.GroupNorm or "
            "nn.LayerNorm.")
    updating = running_stats_layers(template)  # batch normalisation in training mode is refused above
    if updating:
        layer = template.get_submodule(updating[0])
        raise ValueError(
            f"The model {model.name}'s layer {updating[0]!r} ({type(layer).__name__}) updates running statistics in "
            "training mode, which the federated runtime does not keep per model. Put it in evaluation mode in the "
            "factory (`layer.eval()`: its stored statistics then stay fixed), build it with "
            "track_running_stats=False (it normalises each sample by its own statistics), or use nn.GroupNorm or "
            "nn.LayerNorm.")


def _check_parameter_names(method, model: FlatModel) -> None:
    """A component that names a parameter of the model (``MinNorm(coordinates="last")``) is
    resolved now, so a name the model lacks, or a range past its parameters, is refused before
    any work."""
    _, _, combiner = method.components()
    if getattr(combiner, "centralised_only", False):  # a method of one's own whose components() return it
        raise ValueError(f"{type(method).__name__}'s combiner {type(combiner).__name__}(...) reads the losses or "
                         "parameters at the models, which the federated runtime does not have (it combines the "
                         "clients' updates); return most.WeightedSum() or most.MinNorm() from components(). For a "
                         "set objective over clients use most.federated.methods.SetScalarization.")
    combiner.resolve(model.coordinates).check_dim(model.dim, model=model.name)


def _check_model_on_data(dataset: FederatedDataset, model: FlatModel, batch_size: int) -> None:
    """One forward pass of ``model`` on a training batch: a model that cannot take the data's
    samples, or has too few outputs, is refused with torch's reason and how to fix it."""
    x = _check_batch(dataset, batch_size)
    shape, size = dataset.input_shape, math.prod(dataset.input_shape)
    batch = f"a batch of {len(x)} training sample{'s' if len(x) > 1 else ''} of shape {shape}, as training batches them"
    example = (f"fl.logistic_regression({size}, {dataset.n_classes})" if len(shape) <= 1 else
               f"fl.logistic_regression({size}, {dataset.n_classes}, input_shape={shape}), which flattens each sample")
    fix = (f"Build the model for the data (input size {size}, {dataset.n_classes} classes, e.g. {example}); in "
           "an experiment file, leave the model's sizes (`dim`, `n_classes`, ...) out of [model]: they are taken "
           "from the data.")
    try:
        out = model.template_logits(x)
    except NotLogits:
        raise
    except Exception as exc:  # noqa: BLE001 (any error of the user's module on the data)
        reason = (str(exc).strip().splitlines() or [""])[0].rstrip(".")
        reason = f"{type(exc).__name__}: {reason}"
        if "batching rule" in reason.lower():
            raise ValueError(f"The model {model.name} fails on the data {dataset.name!r} ({batch}): {reason}. The "
                             "runtime trains the (client, model) pairs together with torch.func.vmap, which has no "
                             "rule for one of the module's operations (a recurrent layer such as nn.LSTM, say). Use "
                             "layers vmap can batch (linear, convolution, attention, normalisation).") from exc
        expects = model.input_mismatch(shape)
        # two common mismatches, each diagnosed by running the model on the samples made as it takes them
        if len(shape) > 1 and _runs_on(model, x.flatten(1)):
            raise ValueError(f"The model {model.name} takes flat inputs of {size} features, but the data "
                             f"{dataset.name!r} has samples of shape {shape}: on {batch} it fails with {reason}. "
                             f"Flatten each sample first: use {example}, or start the module with nn.Flatten()."
                             ) from exc
        if len(shape) > 1 and _runs_on(model, x[:, None]):
            raise ValueError(f"The model {model.name} takes samples with a channel dimension first (it runs on samples "
                             f"of shape {(1, *shape)}), but the data {dataset.name!r} has samples of shape {shape}, "
                             f"without one: on {batch} it fails with {reason}. Give the features a channel dimension "
                             f"(e.g. x[:, None] for an array of [N, {', '.join(map(str, shape))}] images), or add it "
                             "at the start of the module's forward.") from exc
        if expects is not None:
            raise ValueError(f"The model {model.name} expects {expects}, but the data {dataset.name!r} has samples of "
                             f"shape {shape} ({size} values): on {batch} it fails with {reason}. " + fix) from exc
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.template_parameters()
                         if p.is_floating_point() and p.dtype != x.dtype})
        if dtypes:
            data_dtype = str(x.dtype).removeprefix("torch.")
            raise ValueError(f"The model {model.name} has {' and '.join(dtypes)} parameters, but the runtime gives it "
                             f"the data {dataset.name!r} as {data_dtype} (torch's default dtype): on {batch} it fails "
                             f"with {reason}. Build the model in {data_dtype} (e.g. leave out `.double()`), or convert "
                             "the inputs inside its forward.") from exc
        raise ValueError(f"The model {model.name} fails on the data {dataset.name!r} ({batch}): {reason}. Fix the "
                         "module so that it runs on such a batch (its sizes fit the data: input size "
                         f"{size}, {dataset.n_classes} classes)."
                         + (" A layer with batch statistics (BatchNorm) cannot train on batches of one sample: use "
                            "batch_size >= 2." if len(x) == 1 else "")
                         + (" The module draws at random (a Dropout layer in training mode, say), which the runtime, "
                            "training the (client, model) pairs together, does not support: put such layers in "
                            "evaluation mode in the factory (`layer.eval()`, or `net.eval()`)."
                            if "random" in reason.lower() else "")) from exc
    if out.ndim != 2 or out.shape[0] != len(x):
        raise ValueError(f"The model {model.name} must return logits of shape [batch, n_classes]; on {batch} "
                         f"it returned shape {tuple(out.shape)}.")
    if out.shape[1] < dataset.n_classes:
        raise ValueError(f"The model {model.name} has {out.shape[1]} outputs, but {dataset.name!r} has "
                         f"{dataset.n_classes} classes (labels 0 .. {dataset.n_classes - 1}); it needs one output per "
                         "class. " + fix)


def _runs_on(model: FlatModel, x: Tensor) -> bool:
    """Whether ``model`` gives one row of logits per sample of ``x``."""
    try:
        out = model.template_logits(x)
    except Exception:  # noqa: BLE001 (a diagnosis: any error means no)
        return False
    return out.ndim == 2 and out.shape[0] == len(x)


def _warn_if_most_never_leaves_its_warmup(method, config: FederatedConfig) -> None:
    """MosT's warm-up trains one shared model; with no round after it, the m models stay copies."""
    from .methods import MosT

    if not isinstance(method, MosT) or method.n_models < 2 or not method.warmup_rounds:
        return
    from .methods import GroupedWarmUp

    split_by_updates = isinstance(method.warmup, GroupedWarmUp)
    if config.rounds > method.warmup_rounds or (split_by_updates and config.rounds == method.warmup_rounds):
        return
    warmup = f"{type(method.warmup).__name__}(rounds={method.warmup_rounds})"
    warnings.warn(
        f"MosT(warmup={warmup}) with rounds={config.rounds}: every round is a warm-up round, "
        f"so MosT never assigns clients to models and the run is FedAvg with {method.n_models} copies of one model "
        "(the m models end identical, or one step apart where the warm-up's last round splits them). Use a shorter "
        "warm-up (e.g. warmup=WarmUp(rounds=1), or warmup=None; in an experiment file "
        "warmup = { type = \"WarmUp\", rounds = 1 }, or warmup = \"none\") or more "
        f"rounds (more than {method.warmup_rounds - int(split_by_updates)}).", UserWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside this package (the
    user's call of run_federated or check_inputs), whichever driver of the package it came through."""
    import os
    import sys

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level
