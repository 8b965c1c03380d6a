r"""Personalisation references: each client ends with a model of its own.

* :class:`LocalOnly` -- every client trains its own model on its own data, with no
  communication: the floor any federated method should beat where clients share something.
* :class:`FineTuning` -- FedAvg, then each client trains its picked model for a few more local
  epochs (the simplest personalisation, and a strong one; e.g. Yu, Bagdasaryan and
  Shmatikov 2020, Cheng, Chadha and Duchi 2021).

Both are scored on each client's own model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from ..._validation import check_positive_int
from ...methods import Assignment, Support, WeightedSum
from ...optim import SGD, UpdateRule
from .base import FederatedMethod
from .baselines import FedAvg

__all__ = ["LocalOnly", "FineTuning", "OwnModelAssignment"]


class OwnModelAssignment(Assignment):
    """Client i, whole, to model i (``Gamma = I / n``): one model per client."""

    fixed: ClassVar[bool] = True

    def __init__(self):
        self._n = 0

    def reset(self, n, m, generator):
        if m != n:
            raise ValueError(f"OwnModelAssignment gives each of the {n} clients its own model; the server holds {m}.")
        self._n = n

    def __call__(self, losses, round, total, previous=None):
        # the losses may be one column (each client's own model's): only their rows count
        return self.rows(torch.arange(losses.shape[0], device=losses.device)).to(losses)

    def rows(self, objectives: Tensor) -> Tensor:
        """The plan's rows of ``objectives`` (indices among all n)."""
        if not self._n:
            raise RuntimeError("OwnModelAssignment.reset(n, m, generator) must be called before the first round.")
        return torch.nn.functional.one_hot(objectives.long(), self._n).double() / self._n

    def __repr__(self):
        return "OwnModelAssignment()"


@dataclass(frozen=True, init=False)
class LocalOnly(FederatedMethod):
    """Local training only: client i trains model i on its own data, and nothing is shared.

    The server holds one model per client (:meth:`models_for`); each round, each participating
    client runs the protocol's local epochs on its model, and the model becomes the client's
    result (the server step is the identity: SGD with step 1 on ``Delta_i``). Each client is
    scored on its own model. ``n_models`` is the number of clients once the run starts.

    Args:
        optimizer: the server's update rule; the default (SGD, step 1) keeps each client's
            locally trained model as it is.
    """

    logs_plan: ClassVar[bool] = False
    pick: ClassVar[str] = "its own model"
    assigns: ClassVar[bool] = True
    personal: ClassVar[bool] = True
    own_model_losses: ClassVar[bool] = True
    # set by the method, not by its caller (an experiment file names no n_models or server step)
    n_models: int = field(default=1, init=False)
    server_lr: float = field(default=1.0, init=False)

    def __init__(self, optimizer: UpdateRule | None = None):
        object.__setattr__(self, "n_models", 1)  # the server holds one model per client (models_for)
        object.__setattr__(self, "server_lr", 1.0)
        object.__setattr__(self, "optimizer", SGD() if optimizer is None else optimizer)
        self.__post_init__()

    def components(self):
        return OwnModelAssignment(), Support(), WeightedSum()

    def models_for(self, n_clients):
        return n_clients

    def assigned(self, state, n_clients):
        return torch.arange(n_clients)


@dataclass(frozen=True)
class FineTuning(FedAvg):
    """FedAvg, then local fine-tuning: after the last round each client takes its best model on
    validation and trains it for ``epochs`` local epochs (the protocol's batch size and
    learning rate) on its own training data; each client is scored on that model.

    With ``n_models`` > 1 the FedAvg runs are m independent ones, as for :class:`FedAvg`.
    The in-process runtime (:func:`most.federated.run_federated`) fine-tunes on its copy of the
    clients' data; on Flower (:class:`most.flower.MostStrategy`) each client fine-tunes and keeps
    its model.

    Args:
        n_models, server_lr, optimizer: FedAvg's.
        epochs: the local epochs of fine-tuning (at least 1).
    """

    epochs: int = field(default=5, metadata={"check": lambda v, name: check_positive_int(v, name=name)})

    pick: ClassVar[str] = "its own model, fine-tuned from its best on validation"
    assigns: ClassVar[bool] = True
    personal: ClassVar[bool] = True

    @property
    def fine_tune_epochs(self) -> int:
        return self.epochs

    def assigned(self, state, n_clients):
        return torch.arange(n_clients)  # the fine-tuned models are one per client
