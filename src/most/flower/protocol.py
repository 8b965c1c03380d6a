"""The messages between :class:`most.flower.MostStrategy` and the ClientApp
(:func:`most.flower.make_client_app`): their kinds, the names of their records and keys, and
how models and updates are packed. Both sides use these names and nothing else, so a message
cannot be written under one spelling and read under another.

Every message's content has a ``config`` ConfigRecord; models travel in the ``models``
ArrayRecord (:data:`PARAMS` ``[m, d]`` for query and evaluate, :func:`model_key` ``[d]`` for
each model a client trains); replies carry a ``metrics`` MetricRecord with :data:`CLIENT` and
:data:`NUM_EXAMPLES` and, for train, the ``updates`` ArrayRecord (:func:`delta_key`).
"""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, MessageType
from torch import Tensor

from ..federated.methods.losses import ClientLoss, CrossEntropy, PriorAdjusted

# ----------------------------------------------------------------------------- message kinds
#: the two queries' actions (a ClientApp's ``@app.query(action)``): a client's index, sample count
#: and model size, once at the start; the loss of each model it is sent on its training data
DESCRIBE_ACTION, LOSSES_ACTION = "describe", "losses"
#: their message types
DESCRIBE, LOSSES = f"{MessageType.QUERY}.{DESCRIBE_ACTION}", f"{MessageType.QUERY}.{LOSSES_ACTION}"

# ----------------------------------------------------------------------------- records
CONFIG = "config"
MODELS = "models"
METRICS = "metrics"
UPDATES = "updates"

# ----------------------------------------------------------------------------- keys of ``models``
#: the models ``[m, d]`` of a query or an evaluation
PARAMS = "params"


def model_key(j: int) -> str:
    """The key of model ``j`` ``[d]`` in a train message's ``models``."""
    return f"model.{j}"


def delta_key(j: int) -> str:
    """The key of model ``j``'s update ``theta_j - theta_ij`` ``[d]`` in a train reply's ``updates``."""
    return f"delta.{j}"


#: a loss reply's class signal, in its ``updates`` record: the gradients per class ``[C, s]`` and
#: the counts of each class ``[C]``
CLASS_GRADIENTS, CLASS_COUNTS = "class-gradients", "class-counts"


# ----------------------------------------------------------------------------- keys of ``config``
ROUND = "round"
SEED = "seed"
#: the models a client trains (their indices), in the order of its updates
TRAIN_MODELS = "models"
EPOCHS = "epochs"
BATCH_SIZE = "batch-size"
LR = "lr"
PROX_MU = "prox-mu"
#: the training samples a loss query reads (0: all)
LOSS_SAMPLES = "loss-samples"
#: the pseudo-count of a loss query scored with the client's class frequencies added to the
#: logits (:class:`~most.federated.methods.PriorAdjusted`); absent: the mean cross-entropy
LOSS_PRIOR = "loss-prior"
#: the sketch length of a loss query that also asks for the client's gradient of each class at
#: model 0 (:class:`~most.federated.methods.ClassGroups`, MosT's warm-up); absent: losses alone
CLASS_SKETCH = "class-sketch"
#: whether an evaluation is the last one (it then also asks for the selection loss)
FINAL = "final"
#: a mixing client's weights of the models (FedEM), sent with train and the final evaluation
#: and returned, updated, in its reply's metrics
MIXTURE = "mixture"
#: a fine-tuning method's local epochs after the last round, sent with the final evaluation: the
#: client fine-tunes its best model on validation and is scored on that model alone
FINE_TUNE_EPOCHS = "fine-tune-epochs"

# ----------------------------------------------------------------------------- keys of ``metrics``
CLIENT = "client"
NUM_EXAMPLES = "num-examples"
DIM = "dim"
FIXED = "fixed-digest"  # the digest of the model's frozen parameters and buffers (FlatModel.fixed_digest)
LOSS = "loss"
VAL_ACCURACY = "val-accuracy"
TEST_ACCURACY = "test-accuracy"
TEST_LOSS = "test-loss"
TEST_COUNT = "test-count"
DIVERSITY_SUM = "diversity-sum"
SELECTION_LOSS = "selection-loss"
#: the model a fine-tuning client started its fine-tuning from (its best on validation)
FINE_TUNED_FROM = "fine-tuned-from"
#: the validation accuracy of each of the m models a client was sent, in a final evaluation that
#: scores one predictor of the client's own (its mixture, or its fine-tuned model): the round's log
#: is of the m models, as every other round's
MODELS_VAL_ACCURACY = "models-val-accuracy"
#: :func:`most.flower.client_evaluate`'s result keys and the metric each travels as
EVALUATION_METRICS = {"val_accuracy": VAL_ACCURACY, "test_accuracy": TEST_ACCURACY, "test_loss": TEST_LOSS,
                      "test_count": TEST_COUNT, "diversity_sum": DIVERSITY_SUM}
#: the keys an evaluation reply carries only sometimes (the final one, a mixing or fine-tuning client)
OPTIONAL_EVALUATION_METRICS = {"selection_loss": SELECTION_LOSS, "mixture": MIXTURE,
                               "fine_tuned_from": FINE_TUNED_FROM, "models_val_accuracy": MODELS_VAL_ACCURACY}


# ----------------------------------------------------------------------------- packing
def models_record(params: Tensor) -> ArrayRecord:
    """The ``models`` record of a query or an evaluation: ``params [k, d]``."""
    return ArrayRecord({PARAMS: params.detach().cpu().contiguous()})


def read_models(record) -> Tensor:
    """The models ``[k, d]`` of a query's or an evaluation's ``models`` record."""
    return torch.from_numpy(record[PARAMS].numpy())


def train_models_record(params: Tensor, models: list[int]) -> ArrayRecord:
    """The ``models`` record of a train message: model ``j`` of ``params [m, d]`` for each ``j`` in ``models``."""
    return ArrayRecord({model_key(j): params[j].contiguous() for j in models})


def read_train_models(record, models: list[int]) -> Tensor:
    """The models ``[len(models), d]`` of a train message, in the order of ``models``."""
    return torch.stack([torch.from_numpy(record[model_key(j)].numpy()) for j in models])


def updates_record(models: list[int], deltas) -> ArrayRecord:
    """A train reply's ``updates``: the update of each trained model, by its index."""
    return ArrayRecord({delta_key(j): d for j, d in zip(models, deltas)})


def read_update(record, j: int) -> Tensor:
    """Model ``j``'s update ``[d]`` from a train reply's ``updates``."""
    return torch.from_numpy(record[delta_key(j)].numpy())


def class_signal_record(grads: Tensor, counts: Tensor) -> ArrayRecord:
    """A loss reply's ``updates`` with the client's class signal: ``grads [C, s]``, ``counts [C]``."""
    return ArrayRecord({CLASS_GRADIENTS: grads.detach().cpu().contiguous(),
                        CLASS_COUNTS: counts.detach().cpu().contiguous()})


def read_class_signal(record) -> tuple[Tensor, Tensor]:
    """``(grads [C, s], counts [C])`` of a loss reply's ``updates`` (:func:`class_signal_record`)."""
    return (torch.from_numpy(record[CLASS_GRADIENTS].numpy()), torch.from_numpy(record[CLASS_COUNTS].numpy()))


def loss_config(loss: ClientLoss) -> dict:
    """The ``config`` entries that tell a client how to score the models in a loss query, for a
    method's :meth:`~most.federated.methods.FederatedMethod.plan_loss`; a loss the clients cannot
    compute is refused (before any round)."""
    if loss.plain:
        return {}
    if type(loss) is PriorAdjusted:
        return {LOSS_PRIOR: float(loss.pseudo_count)}
    raise ValueError(f"Flower clients score the models by the mean cross-entropy or by "
                     f"most.federated.methods.PriorAdjusted; `client_loss={type(loss).__name__}(...)` "
                     "runs in the in-process runtime only (most.federated.run_federated).")


def read_loss(config) -> ClientLoss:
    """The client's loss of a loss query's ``config`` (:func:`loss_config`)."""
    return PriorAdjusted(float(config[LOSS_PRIOR])) if LOSS_PRIOR in config else CrossEntropy()
