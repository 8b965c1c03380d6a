r"""The client side of MosT on Flower: three pure steps on one client's data, and the ClientApp.

A Flower client holds one objective (its own data) and answers three kinds of message:

* ``query.describe`` -- its client index, sample count and model size (once, at the start).
* ``query.losses`` -- the loss of each of the m models on its training data (what the server plans
  Gamma with): :func:`client_losses`.
* ``train`` -- K local epochs from each model it is assigned, returning the pseudo-gradients
  ``Delta_ij = theta_j - theta_ij``: :func:`client_train`. It receives only those models. For a
  method whose clients mix the models (FedEM) it also receives its mixture weights, runs the
  E-step on its training data (:func:`client_weigh`), weighs its samples by the
  responsibilities in training, and returns its new weights.
* ``evaluate`` -- validation and test accuracy of every model, and the models' prediction
  diversity on its test inputs (as sums, so the server's average equals the pooled one); at the
  final evaluation also each model's loss on its training and validation data pooled (for
  ``FederatedResult.loss_choice``): :func:`client_evaluate`. A mixing client's final evaluation
  first fits its weights to the final models and scores its mixture; a fine-tuning client's
  first fine-tunes its best model (:func:`client_fine_tune`) and scores that model alone. Both
  also report the m models' validation accuracies (:func:`client_val_accuracy`), from which the
  server logs the round, as every other round.

The steps call the in-process runtime's own :func:`~most.federated.evaluate` and
:func:`~most.federated.local_train` on a one-client batch, so both runtimes compute the same
numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import Tensor

from ..federated.data import ClientData
from ..federated.evaluation import pairwise_symmetric_kl, pooled_loss
from ..federated.models import FlatModel
from ..federated.methods.losses import ClientLoss
from ..federated.methods.grouping import class_gradients
from ..federated.methods.mixture import responsibilities
from ..federated.clients import (Padded, evaluate, local_train, mixture_scores, plan_losses, sample_losses,
                                selection_scores)
from ..federated.server import choose_models, pair_seed
from . import protocol as P

__all__ = ["ClientSpec", "client_losses", "client_train", "client_weigh", "client_evaluate", "client_val_accuracy",
           "client_fine_tune", "make_client_app"]


#: marks a client's refusal of its own data, which stops the server (a fault of the deployment,
#: not a client that dropped out)
CLIENT_DATA_ERROR = "[most: client data]"


@dataclass(frozen=True, eq=False)
class ClientSpec:
    """What a ClientApp needs to know about its node: the model architecture, the client's
    data, and its index among the federation's clients (``0 .. n - 1``; the server's Gamma
    row)."""

    model: FlatModel
    data: ClientData
    client: int

    def __post_init__(self):
        if not isinstance(self.model, FlatModel):
            raise ValueError(f"`model` must be a most.federated.FlatModel; got {type(self.model).__name__}.")
        if not isinstance(self.data, ClientData):
            raise ValueError(f"`data` must be a most.federated.ClientData; got {type(self.data).__name__}.")
        if not isinstance(self.client, int) or self.client < 0:
            raise ValueError(f"`client` must be a non-negative int (the client's index); got {self.client!r}.")
        labels = [y for y in (self.data.y_train, self.data.y_val, self.data.y_test) if len(y)]
        if labels:  # the model's outputs cover the client's labels (the in-process runtime checks the same)
            outputs = int(self.model.template_logits(self.data.x_train[:64]).shape[-1])  # a batch: a layer may need two
            top = max(int(y.max()) for y in labels)
            if top >= outputs:
                raise ValueError(f"{CLIENT_DATA_ERROR} client {self.client} has the class label {top}, but the model "
                                 f"{self.model.name} has {outputs} outputs (labels 0..{outputs - 1}). Check the "
                                 "client's labels, or give the model one output per class.")


def _split(data: ClientData, split: str, limit: int | None = None) -> Padded:
    x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
    if limit is not None:
        x, y = x[:limit], y[:limit]
    if len(y) == 0:  # as pad_split: one padding row, NaN results
        return Padded(torch.zeros(1, 1, *x.shape[1:]), torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1),
                      torch.tensor([0]))
    return Padded(x[None], y[None], torch.ones(1, len(y)), torch.tensor([len(y)]))


def _check_params(model: FlatModel, params: Tensor) -> Tensor:
    params = torch.as_tensor(params, dtype=torch.float32)
    if params.ndim != 2 or params.shape[1] != model.dim:
        raise ValueError(f"Expected models of shape [k, {model.dim}] for {model.name}; got {tuple(params.shape)}.")
    return params


def client_losses(model: FlatModel, params: Tensor, data: ClientData, *, loss_samples: int | None = None,
                  loss: ClientLoss | None = None) -> Tensor:
    """``[m]``: the mean training cross-entropy of each model (on the first ``loss_samples``
    training samples if given, as :class:`~most.federated.FederatedConfig` ``loss_samples``),
    or the method's ``loss`` (:class:`~most.federated.methods.PriorAdjusted`) on them."""
    params, split = _check_params(model, params), _split(data, "train", loss_samples)
    if loss is not None and not loss.plain:
        return plan_losses(model, params, split, None, loss)[0]
    return evaluate(model, params, split)[0][0]


def client_class_gradients(model: FlatModel, params: Tensor, data: ClientData, *, sketch: int) -> tuple[Tensor, Tensor]:
    """``(grads [C, s], counts [C])``: the client's gradient of its mean loss on each class's
    training samples at model 0 of ``params [m, d]``, sketched to ``s = min(d, sketch)``
    numbers (:func:`~most.federated.methods.class_gradients`), and its count of each class."""
    params, split = _check_params(model, params), _split(data, "train")
    grads, counts = class_gradients(model, params[0], split.x, split.y, split.w, sketch=sketch)
    return grads[0], counts[0]


def client_train(model: FlatModel, params: Tensor, models: list[int], data: ClientData, *, seed: int, round: int,
                 client: int, epochs: int, batch_size: int, lr: float, prox_mu: float = 0.0,
                 sample_weight: Tensor | None = None) -> Tensor:
    """``[k, d]`` pseudo-gradients ``theta_j - theta_ij`` of the k assigned models ``models``
    (their parameters ``params [k, d]``) after local training; each pair draws its batches
    from :func:`~most.federated.server.pair_seed` ``(seed, round, client, j)``.
    ``sample_weight [k, n_train]`` weighs each model's training samples in its loss (FedEM)."""
    params = _check_params(model, params)
    if len(models) != params.shape[0]:
        raise ValueError(f"{len(models)} model indices for {params.shape[0]} models.")
    k, x, y = params.shape[0], data.x_train, data.y_train
    local = local_train(model, params, x[None].expand(k, *x.shape), y[None].expand(k, -1), torch.ones(k, len(y)),
                        epochs=epochs, batch_size=batch_size, lr=lr, prox_mu=prox_mu,
                        seeds=[pair_seed(seed, round, client, j) for j in models], sample_weight=sample_weight)
    return params - local


def client_weigh(model: FlatModel, params: Tensor, data: ClientData, mixture: Tensor) -> tuple[Tensor, Tensor]:
    """FedEM's E-step on this client's training data: ``(q [m, n_train], mixture [m])``, each
    sample's responsibilities under the m models ``params`` and the client's weights
    ``mixture [m]``, and the new weights (:func:`~most.federated.methods.mixture.responsibilities`)."""
    params = _check_params(model, params)
    train = _split(data, "train")
    _, per_sample = sample_losses(model, params, train, None)
    q, new = responsibilities(per_sample.double(), torch.as_tensor(mixture, dtype=torch.float64)[None],
                              train.w.double())
    return q[0, :, : len(data.y_train)], new[0]


def client_evaluate(model: FlatModel, params: Tensor, data: ClientData, *, selection: bool = False,
                    mixture: Tensor | None = None) -> dict:
    """Validation and test results of every model on this client.

    Returns ``val_accuracy``, ``test_accuracy``, ``test_loss`` (lists of m floats; NaN for an
    empty split), ``test_count`` and ``diversity_sum``: the sum over the client's test inputs of
    the mean pairwise symmetric KL between the models' predictions (0 for one model). With
    ``selection`` (the final evaluation) also ``selection_loss``: each model's mean loss on the
    client's training and validation data pooled (:func:`~most.federated.evaluation.pooled_loss`),
    by which :attr:`~most.federated.FederatedResult.loss_choice` picks a model.

    With ``mixture [m]`` (a client that mixes the models, FedEM), the accuracies and losses are
    those of its mixture (lists of one float), and the diversity that of the m models.
    """
    params = _check_params(model, params)
    if mixture is not None:
        return _mixture_evaluate(model, params, data, torch.as_tensor(mixture, dtype=torch.float64)[None])
    val = _split(data, "val")
    val_loss, val_acc, _ = evaluate(model, params, val)
    out = {}
    if selection:
        train = _split(data, "train")
        train_loss, _, _ = evaluate(model, params, train)
        out["selection_loss"] = pooled_loss(train_loss, val_loss, train.counts, val.counts)[0].tolist()
    test = _split(data, "test")
    test_loss, test_acc, probs = evaluate(model, params, test, return_probs=True)
    count = int(test.counts[0])
    return {"val_accuracy": val_acc[0].tolist(), "test_accuracy": test_acc[0].tolist(),
            "test_loss": test_loss[0].tolist(), "test_count": count, "diversity_sum": _diversity_sum(probs, count),
            **out}


def client_val_accuracy(model: FlatModel, params: Tensor, data: ClientData) -> list[float]:
    """The validation accuracy of each of the m models ``params`` on this client (NaN for an
    empty validation split). A mixing or fine-tuning client's final evaluation reports these with
    its own predictor's scores: the server logs the round from the m models, as the in-process
    runtime does."""
    return evaluate(model, _check_params(model, params), _split(data, "val"))[1][0].tolist()


def client_fine_tune(model: FlatModel, params: Tensor, data: ClientData, *, seed: int, round: int, client: int,
                     epochs: int, batch_size: int, lr: float) -> tuple[int, Tensor]:
    """Local fine-tuning after the last round (:class:`~most.federated.methods.FineTuning`):
    ``(j, theta [1, d])``, the client's best of the m models ``params`` on validation (by its
    lowest loss on training and validation data pooled when it has no validation sample, as
    :func:`~most.federated.server.choose_models`), trained for ``epochs`` local epochs on its
    training data with batches from :func:`~most.federated.server.pair_seed` ``(seed, round,
    client, j)``, as the in-process runtime fine-tunes under ``pair_seeds``."""
    params = _check_params(model, params)
    j = int(choose_models(*selection_scores(model, params, _split(data, "train"), _split(data, "val")))[0][0])
    x, y = data.x_train, data.y_train
    tuned = local_train(model, params[j][None], x[None], y[None], torch.ones(1, len(y)), epochs=epochs,
                        batch_size=batch_size, lr=lr, seeds=[pair_seed(seed, round, client, j)])
    return j, tuned


def _diversity_sum(probs: Tensor, count: int) -> float:
    """The sum over the client's ``count`` test inputs of the mean pairwise symmetric KL between
    the m models' predictions ``probs [m, 1, N, C]`` (0 for one model or no input)."""
    m = probs.shape[0]
    if m < 2 or not count:
        return 0.0
    kl = torch.as_tensor(pairwise_symmetric_kl(probs[:, 0, :count]))
    return float(kl[torch.triu_indices(m, m, 1).unbind()].mean()) * count


def _mixture_evaluate(model: FlatModel, params: Tensor, data: ClientData, mixture: Tensor) -> dict:
    val, test, train = _split(data, "val"), _split(data, "test"), _split(data, "train")
    val_loss, val_acc, _ = mixture_scores(model, params, mixture, val)
    train_loss, _, _ = mixture_scores(model, params, mixture, train)
    test_loss, test_acc, probs = mixture_scores(model, params, mixture, test)
    count = int(test.counts[0])
    return {"val_accuracy": val_acc[0].tolist(), "test_accuracy": test_acc[0].tolist(),
            "test_loss": test_loss[0].tolist(), "test_count": count, "diversity_sum": _diversity_sum(probs, count),
            "selection_loss": pooled_loss(train_loss, val_loss, train.counts, val.counts)[0].tolist()}


# ----------------------------------------------------------------------------- the ClientApp
def make_client_app(load: Callable[[Context], ClientSpec]) -> ClientApp:
    """A ``flwr.clientapp.ClientApp`` running the three steps above.

    ``load(context) -> ClientSpec`` gives this node's model, data and client index, typically
    from ``context.node_config`` (e.g. ``partition-id``) and ``context.run_config``. It is
    called once per run and node in a process and cached.

    Messages: :mod:`most.flower.protocol` (their kinds, records and keys, which the strategy
    uses too).
    """
    cache: dict = {}

    def spec(context) -> ClientSpec:
        key = (context.run_id, context.node_id)
        if key not in cache:
            torch.set_num_threads(1)  # many clients share the machine's cores
            loaded = load(context)
            if not isinstance(loaded, ClientSpec):
                raise ValueError(f"`load(context)` must return a most.flower.ClientSpec; got {type(loaded).__name__}.")
            cache[key] = loaded
        return cache[key]

    def _reply(message, s: ClientSpec, metrics: dict, arrays: dict | None = None):
        content = RecordDict({P.METRICS: MetricRecord({P.CLIENT: s.client, P.NUM_EXAMPLES: len(s.data.y_train),
                                                        **metrics})})
        if arrays is not None:
            content[P.UPDATES] = arrays
        return Message(content=content, reply_to=message)

    app = ClientApp()

    @app.query(P.DESCRIBE_ACTION)
    def describe(message, context):
        s = spec(context)
        return _reply(message, s, {P.DIM: s.model.dim, P.FIXED: s.model.fixed_digest()})

    @app.query(P.LOSSES_ACTION)
    def losses(message, context):
        s = spec(context)
        cfg = message.content[P.CONFIG]
        params = P.read_models(message.content[P.MODELS])
        limit = int(cfg.get(P.LOSS_SAMPLES, 0)) or None
        losses = client_losses(s.model, params, s.data, loss_samples=limit, loss=P.read_loss(cfg))
        signal = None
        if P.CLASS_SKETCH in cfg:  # the warm-up's last round also asks for the gradients per class
            signal = P.class_signal_record(*client_class_gradients(s.model, params, s.data,
                                                                   sketch=int(cfg[P.CLASS_SKETCH])))
        return _reply(message, s, {P.LOSS: losses.tolist()}, signal)

    @app.train()
    def train(message, context):
        s = spec(context)
        cfg = message.content[P.CONFIG]
        models = [int(j) for j in cfg[P.TRAIN_MODELS]]
        params = P.read_train_models(message.content[P.MODELS], models)
        weights, metrics = None, {}
        if P.MIXTURE in cfg:  # a mixing client: its E-step, then training on the weighted samples
            weights, mixture = client_weigh(s.model, params, s.data, torch.tensor(list(cfg[P.MIXTURE])))
            metrics[P.MIXTURE] = mixture.tolist()
        deltas = client_train(s.model, params, models, s.data, seed=int(cfg[P.SEED]), round=int(cfg[P.ROUND]),
                              client=s.client, epochs=int(cfg[P.EPOCHS]), batch_size=int(cfg[P.BATCH_SIZE]),
                              lr=float(cfg[P.LR]), prox_mu=float(cfg[P.PROX_MU]), sample_weight=weights)
        return _reply(message, s, metrics, P.updates_record(models, deltas))

    @app.evaluate()
    def evaluate_(message, context):
        s = spec(context)
        params = P.read_models(message.content[P.MODELS])
        cfg = message.content[P.CONFIG]
        mixture, tuned_from, models_val = None, None, None
        if P.MIXTURE in cfg or P.FINE_TUNE_EPOCHS in cfg:
            # the client scores a predictor of its own below; the round's log is of the m models it was sent
            models_val = client_val_accuracy(s.model, params, s.data)
        if P.MIXTURE in cfg:  # a mixing client's final evaluation: its weights fitted to the final models
            _, mixture = client_weigh(s.model, params, s.data, torch.tensor(list(cfg[P.MIXTURE])))
        if P.FINE_TUNE_EPOCHS in cfg:  # a fine-tuning client's final evaluation: its own model, fine-tuned
            tuned_from, params = client_fine_tune(s.model, params, s.data, seed=int(cfg[P.SEED]),
                                                  round=int(cfg[P.ROUND]) + 1, client=s.client,
                                                  epochs=int(cfg[P.FINE_TUNE_EPOCHS]),
                                                  batch_size=int(cfg[P.BATCH_SIZE]), lr=float(cfg[P.LR]))
        out = client_evaluate(s.model, params, s.data, selection=bool(cfg.get(P.FINAL, False)), mixture=mixture)
        if mixture is not None:
            out["mixture"] = mixture.tolist()
        if tuned_from is not None:
            out["fine_tuned_from"] = tuned_from
        if models_val is not None:
            out["models_val_accuracy"] = models_val
        metrics = {key: out[name] for name, key in P.EVALUATION_METRICS.items()}
        metrics.update({key: out[name] for name, key in P.OPTIONAL_EVALUATION_METRICS.items() if name in out})
        return _reply(message, s, metrics)

    return app
