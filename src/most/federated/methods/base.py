"""The base of the federated methods: the components and hooks the server's round calls.

A method is frozen configuration; what a run changes (the components' state, the server
optimiser's state, a method's clusters or mixture weights) is a :class:`MethodState` that
:meth:`FederatedMethod.start` makes, the :class:`~most.federated.server.Server` holds and its
checkpoint saves, and that every hook of a round is given. One method object may so serve any
number of runs, in turn or at once.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import ClassVar

import torch
from torch import Tensor

from ..._host import to_device
from ..._validation import check_component, check_positive, check_positive_int
from ...methods import (
    Assignment,
    Combiner,
    Weighting,
)
from ...optim import SGD, UpdateRule
from .losses import ClientLoss, CrossEntropy
from .updates import combine_updates

_CROSS_ENTROPY = CrossEntropy()


class MethodState:
    """One run's state of its method: the components (reset for the run; e.g. a cluster
    assignment's labels live in them) and the server optimiser's state. A method with more run
    state subclasses it (:class:`~most.federated.methods.CFL`'s clusters, FedEM's mixture
    weights, MosT's round losses).

    Attributes:
        components: ``(assignment, weighting, combiner)`` of this run.
        opt_state: the update rule's state (``None`` before the first step).
    """

    def __init__(self, components: tuple[Assignment, Weighting, Combiner]):
        self.components = components
        self.opt_state: object = None


@dataclass(frozen=True)
class FederatedMethod:
    """A federated method: components for the server's round (frozen configuration).

    Subclasses set :meth:`components`; the server (:class:`most.federated.server.Server`) calls
    :meth:`check`, :meth:`initial_params`, :meth:`start` once (the run's :class:`MethodState`),
    then every round the hooks of the round's :meth:`phase`: :meth:`plan` and :meth:`aggregate`.

    Args:
        n_models: m.
        server_lr: eta_s, the step of the update rule on the combined direction.
        optimizer: the server's update rule (:class:`~most.optim.SGD`: ``theta - eta_s d``).
    """

    n_models: int
    server_lr: float = 1.0
    optimizer: UpdateRule = field(default_factory=SGD)

    #: Whether each pair's update is weighted by its client's sample count (FedAvg's mean).
    by_samples: ClassVar[bool] = False
    #: Whether the plan is a transport plan worth logging (and reporting Gamma metrics of).
    logs_plan: ClassVar[bool] = True
    #: How each client's final model is picked, in words (the benchmark tables say it):
    #: the default is its best model on validation; a method that assigns each client a model
    #: (:meth:`assigned`) says which.
    pick: ClassVar[str] = "best on validation"
    #: Whether :meth:`assigned` gives each client its model (a cluster, a group, its own model).
    assigns: ClassVar[bool] = False
    #: Whether each client ends with a model of its own (local training, fine-tuning): the
    #: models are then one per client, and group recovery or the best model on test mean nothing.
    personal: ClassVar[bool] = False
    #: Whether the round-start losses are each client's loss on its own model (model i of client
    #: i: an ``[n, 1]`` column) rather than on every model (``[n, m]``); for a method with one
    #: model per client, which plans without the losses (:class:`LocalOnly`).
    own_model_losses: ClassVar[bool] = False
    #: Whether each pair's local loss weighs the client's samples (:class:`FedEM`'s
    #: responsibilities): the round-start losses are then every model's loss on every training
    #: sample, :meth:`weigh_samples` turns them into the weights, and each client predicts with
    #: its mixture of the models (:meth:`mixture`).
    sample_weights: ClassVar[bool] = False

    def __post_init__(self) -> None:  # stored as the plain numbers they were checked as
        object.__setattr__(self, "n_models", check_positive_int(self.n_models, name="n_models"))
        object.__setattr__(self, "server_lr", check_positive(self.server_lr, name="server_lr"))
        for f in fields(self):  # a subclass's numeric fields name their check
            if "check" in f.metadata:
                object.__setattr__(self, f.name, f.metadata["check"](getattr(self, f.name), name=f.name))
        check_component(self.optimizer, name="optimizer", example="most.optim.SGD()", base=UpdateRule)

    def components(self) -> tuple[Assignment, Weighting, Combiner]:
        raise NotImplementedError

    def plan_loss(self) -> ClientLoss:
        """How each client scores the models for the plan (the round-start losses ``[n, m]``):
        their mean cross-entropy by default; MosT's ``client_loss``."""
        return _CROSS_ENTROPY

    def class_signal(self, round: int):
        """The :class:`~most.federated.methods.ClassGroups` whose signal the clients send before
        round ``round``'s aggregation (each client's gradient per class at model 0, sketched),
        or ``None`` (the default: none); MosT's warm-up asks for it in its last round."""
        return None

    def observe_class_signal(self, state: MethodState, clients: Tensor, grads: Tensor, counts: Tensor) -> None:
        """Records the clients' gradients per class ``grads [k, C, s]`` and class counts
        ``counts [k, C]`` of ``clients [k]`` (indices among all n), in a round where
        :meth:`class_signal` asked for them."""
        raise NotImplementedError(f"{type(self).__name__} asks for no class signal (class_signal is None).")

    @property
    def prox_mu(self) -> float:
        """FedProx's proximal weight in local training (0: none)."""
        return 0.0

    def phase(self, round: int) -> "FederatedMethod":
        """The method whose hooks run round ``round``: itself, or the method of a phase of the
        run (MosT's warm-up rounds are FedAvg rounds of one shared model)."""
        return self

    @property
    def min_clients(self) -> int:
        """The fewest answering clients a round needs (fewer: the round leaves the models as they are)."""
        return 1

    def check(self, n_clients: int) -> None:
        """Refuses a number of clients the method cannot serve (before any work)."""

    def models_for(self, n_clients: int) -> int:
        """The number of models the server holds for ``n_clients`` clients (``n_models``; one
        per client for :class:`~most.federated.methods.personal.LocalOnly`)."""
        return self.n_models

    def assigned(self, state: MethodState, n_clients: int) -> Tensor | None:
        """``[n]`` the model each client is scored on, for a method that assigns one (a cluster,
        a group, its own model); ``None`` (the default): each client picks its best on validation."""
        return None

    @property
    def fine_tune_epochs(self) -> int:
        """Local epochs each client trains its picked model for after the last round (0: none;
        :class:`~most.federated.methods.personal.FineTuning`)."""
        return 0

    def weigh_samples(self, state: MethodState, losses: Tensor, mask: Tensor, clients: Tensor) -> Tensor:
        """For a method with :attr:`sample_weights`: ``[k, m, N]`` the weight of each sample in
        each model's local loss, from ``losses [k, m, N]`` (each model's loss on each training
        sample of the ``k`` clients, 0 on padding), ``mask [k, N]`` (1 for a real sample) and
        ``clients [k]`` (their indices among all n). Called once per round before local training,
        and once after the last round before the final evaluation."""
        raise NotImplementedError(f"{type(self).__name__} does not weigh samples (sample_weights is False).")

    def update_mixture(self, state: MethodState, clients: Tensor, weights: Tensor) -> None:
        """For a method with :attr:`sample_weights` whose clients compute their own weights (on
        Flower, each client runs the E-step on its data): records ``weights [k, m]`` of the
        ``clients [k]`` (indices among all n)."""
        raise NotImplementedError(f"{type(self).__name__} has no mixture weights (sample_weights is False).")

    def mixture(self, state: MethodState, n_clients: int) -> Tensor | None:
        """``[n, m]`` each client's weights of the models' predictions, for a method whose clients
        predict with a mixture (:class:`FedEM`); ``None`` (the default): one model per client."""
        return None

    def initial_params(self, model, m: int, generator: torch.Generator) -> Tensor:
        return model.init(m, generator)

    def start(self, n: int, m: int, generator: torch.Generator, model=None) -> MethodState:
        """A run's state, made once before the first round: the run's own copy of the components,
        their randomness fixed by ``generator``, a combiner's parameter name resolved against
        ``model``."""
        assignment, weighting, combiner = copy.deepcopy(self.components())
        if model is not None:
            combiner = combiner.resolve(model.coordinates)
        assignment.reset(n, m, generator)
        return MethodState((assignment, weighting, combiner))

    def plan(self, state: MethodState, losses: Tensor, round: int, total: int, previous: Tensor | None = None, *,
             clients: Tensor | None = None) -> tuple[Tensor | None, Tensor]:
        """``(plan [n, m] or None, W [m, n])`` for the participating clients (rows of ``losses``;
        ``clients`` are their indices among all n, for assignments fixed for the run)."""
        assignment, weighting = self.round_assignment(state), state.components[1]
        losses = losses.double()
        if clients is not None and assignment.fixed:
            plan = assignment.rows(clients).to(losses)
        else:
            plan = assignment(losses, round, total, previous=previous)
        return (plan if self.logs_plan else None), weighting(plan).double()

    def round_assignment(self, state: MethodState) -> Assignment:
        """The assignment that plans this round: the run's (``state.components[0]``), or one a
        method derives from it and its run state (MosT's moved balance point)."""
        return state.components[0]

    def pair_weights(self, weights: Tensor, counts: Tensor, round: int) -> Tensor:
        """Each trained pair's weight in its model's combination: ``W[j, i]``, or the client's
        sample count for sample-weighted methods."""
        return counts.double() if self.by_samples else weights.double()

    def direction(self, state: MethodState, deltas: Tensor, pair_model: Tensor, pair_weight: Tensor, m: int,
                  round: int) -> Tensor:
        """The combined direction ``[m, d]`` of each model's pair updates (the run's combiner)."""
        return combine_updates(state.components[2], m, deltas, pair_model, pair_weight)

    def aggregate(self, state: MethodState, params: Tensor, deltas: Tensor, pair_model: Tensor, pair_weight: Tensor,
                  *, round: int, clients: Tensor | None = None) -> Tensor:
        """The server step: the combined direction of each model's pair updates, then the update
        rule with ``lr = server_lr``; a model without pairs stays where it is. ``clients`` (the
        client, among all n, of each pair) is for methods that track clients (:class:`CFL`)."""
        m = params.shape[0]
        direction = self.direction(state, deltas, pair_model, pair_weight, m, round)
        if state.opt_state is None:
            state.opt_state = self.optimizer.init(params)
        new, state.opt_state = self.optimizer.step(params, direction.to(params), state.opt_state, self.server_lr)
        return torch.where(to_device(self.moved(pair_model, m, round), params.device)[:, None], new, params)

    def moved(self, pair_model: Tensor, m: int, round: int) -> Tensor:
        """``[m]``: the models this round's step moves (those with a trained pair)."""
        has = torch.zeros(m, dtype=torch.bool, device=pair_model.device)
        has[pair_model] = True
        return has
