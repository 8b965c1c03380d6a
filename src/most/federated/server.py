r"""The server's round, shared by the in-process runtime and the Flower strategy.

One :class:`Server` holds the m models, the run's generator and the method, and states each
round in the same steps whatever carries the messages::

    clients = server.sample(t)                        # participation
    losses  = <each client's loss on the m models>    # the engine asks the clients
    state   = server.plan(t, answered, losses)        # check losses -> Gamma -> W -> pairs
    deltas  = <local training of state's pairs>       # the engine trains (client, model) pairs
    server.update(state, deltas)                      # combine -> update rule
    server.log(state, val_accuracy)                   # one RoundLog

:func:`most.federated.run_federated` runs these steps in one process;
:class:`most.flower.MostStrategy` runs them across Flower's three hooks, carrying a typed
:class:`RoundState` between them. Client sampling, the non-finite-loss check, the warm-start
rule, the evaluation schedule, the pair weights and the final choice of each client's model
are written here once, so the two runtimes cannot drift.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np
import torch
from torch import Tensor

from .._random import seeded
from ..engine.records import HISTORY_NUMBERS
from .config import FederatedConfig, RoundLog
from .evaluation import select_by_loss

__all__ = ["RoundLog", "RoundState", "Server", "choose_models", "pair_seed"]


def pair_seed(seed: int, round: int, client: int, model: int) -> int:
    """The seed of one (round, client, model) pair's batch order under ``pair_seeds=True``:
    a function of the four integers alone, so any process (a Flower client) can draw it."""
    return int(np.random.SeedSequence([seed, round, client, model]).generate_state(1, np.uint64)[0] >> 1)


@dataclass
class RoundState:
    """One round between its steps.

    Attributes:
        round: the round index t.
        sampled: the clients asked this round (indices among all n).
        clients: those whose losses arrived (the rows of ``losses`` and the columns of ``weights``).
        losses: ``[len(clients), m]`` their losses on the m models (None for a skipped round).
        plan: the method's plan Gamma (None when it has none to log, or the round is skipped).
        weights: ``W [m, len(clients)]`` (None: the round is skipped, too few clients answered).
        pair_model, pair_client: the trained pairs (model j, local client index), model-major.
        missing: clients asked that did not answer a step.
        seconds: time per phase (evaluate, plan, local_training, aggregate).
    """

    round: int
    sampled: Tensor
    clients: Tensor
    losses: Tensor | None = None
    plan: Tensor | None = None
    weights: Tensor | None = None
    pair_model: Tensor | None = None
    pair_client: Tensor | None = None
    missing: list[int] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def skipped(self) -> bool:
        return self.weights is None

    @property
    def pair_clients(self) -> Tensor:
        """The client (among all n) of each pair (of a planned round: a skipped one has no pairs)."""
        return self.clients[cast(Tensor, self.pair_client).to(self.clients.device)]

    def models_of(self, client: int) -> list[int]:
        """The models ``client`` (among all n) trains this round."""
        local = (self.clients == client).nonzero()
        if self.skipped or not len(local):
            return []
        return cast(Tensor, self.pair_model)[self.pair_client == int(local[0, 0])].tolist()  # planned: not skipped


class Server:
    """The server side of a federated run: the m models and the steps of a round.

    Args:
        method: a :mod:`most.federated.methods` object.
        model: the architecture; its ``init`` gives the initial models (from ``config.seed``).
        config: the protocol (:class:`~most.federated.FederatedConfig`).
        counts: ``[n]`` each client's number of training samples (for sample-weighted means;
            an engine that learns them later sets :attr:`counts` before the first round).
        device: where the models live.
    """

    def __init__(self, method, model, config: "FederatedConfig", counts: Tensor, *, device=None):
        self.method, self.model, self.config = method, model, config
        self.n = len(counts)
        self.m = method.models_for(self.n)
        self.counts = counts.clone()
        self.generator = seeded(config.seed)
        self.params = method.initial_params(model, self.m, self.generator).to(device or "cpu")
        #: the run's state of its method (the method itself is configuration), saved by checkpoints
        self.method_state = method.start(self.n, self.m, self.generator, model)
        self.previous: Tensor | None = None
        self.history: list[RoundLog] = []
        # rounds whose log keeps its plan: every k-th and the last, so that the history (and every
        # checkpoint, which holds it) stays within HISTORY_NUMBERS numbers of plans however long the run
        self.keep_every = max(1, math.ceil(config.rounds * self.n * self.m / HISTORY_NUMBERS))

    # ------------------------------------------------------------------ the steps of a round
    def sample(self, t: int) -> Tensor:
        """The participating clients of round ``t``, sorted (all of them at full participation)."""
        k = max(1, round(self.config.participation * self.n))
        if k == self.n:
            return torch.arange(self.n)
        return torch.randperm(self.n, generator=self.generator)[:k].sort().values

    def plan(self, t: int, sampled: Tensor, clients: Tensor, losses: Tensor | None,
             client_ids: list[str] | None = None) -> RoundState:
        """Checks the losses of the clients that answered and plans the round: Gamma, W and the
        pairs to train. Fewer answers than the method needs (MosT: m) skip the round."""
        state = RoundState(round=t, sampled=sampled.cpu(), clients=clients.cpu(),
                           missing=sorted(set(sampled.tolist()) - set(clients.tolist())))
        if len(clients) < min(self.method.min_clients, len(sampled)):  # sampled is never empty
            state.seconds["plan"] = 0.0
            return state
        losses = cast(Tensor, losses)  # enough clients answered: their losses are there
        _check_losses(t, clients, losses, client_ids)
        tic = time.perf_counter()
        full = len(clients) == self.n
        previous = self.previous if full else None  # a warm start needs the same clients
        plan, weights = self.method.phase(t).plan(self.method_state, losses, t, self.config.rounds, previous,
                                                  clients=None if full else clients.to(losses.device))
        self.previous = plan if full else None
        state.losses, state.plan, state.weights = losses, plan, weights
        state.pair_model, state.pair_client = weights.nonzero(as_tuple=True)  # by model, then client
        state.seconds["plan"] = time.perf_counter() - tic
        return state

    def class_signal(self, t: int):
        """The grouping whose class signal the clients send in round ``t`` (:meth:`~most.federated.
        methods.FederatedMethod.class_signal`), or ``None``."""
        return self.method.class_signal(t)

    def observe_class_signal(self, clients: Tensor, grads: Tensor, counts: Tensor) -> None:
        """Hands the ``clients``' gradients per class ``[k, C, s]`` and class counts ``[k, C]`` to the run's method."""
        self.method.observe_class_signal(self.method_state, clients.cpu(), grads, counts)

    def pair_seeds(self, state: RoundState) -> list[int] | None:
        """One batch-order seed per pair (:func:`pair_seed`) under ``config.pair_seeds``, else None."""
        if not self.config.pair_seeds:
            return None
        return [pair_seed(self.config.seed, state.round, int(c), int(j))
                for c, j in zip(state.pair_clients.tolist(), cast(Tensor, state.pair_model).tolist())]

    def update(self, state: RoundState, deltas: Tensor, keep: Tensor | None = None) -> Tensor:
        """Combines the pairs' updates ``deltas [P, d]`` (``Delta_ij = theta_j - theta_ij``, in the
        order of the state's pairs, or of the pairs where ``keep`` is True) and takes the server
        step; returns the new models."""
        tic = time.perf_counter()
        # the state of a planned round (a skipped one is not updated): its pairs and weights are there
        pair_model, pair_client = cast(Tensor, state.pair_model), cast(Tensor, state.pair_client)
        if keep is not None:
            pair_model, pair_client = pair_model[keep], pair_client[keep]
        if len(pair_model):
            cidx = state.clients[pair_client.cpu()]
            weights = cast(Tensor, state.weights)
            phase = self.method.phase(state.round)
            weight = phase.pair_weights(weights[pair_model, pair_client], self.counts[cidx].to(weights.device),
                                        state.round)
            # the pairs' models and weights stay where the plan was made (the host, for a small
            # plan): the combination moves what it needs to the device in one go
            params = phase.aggregate(self.method_state, self.params, deltas.to(self.params), pair_model, weight,
                                     round=state.round, clients=cidx)
            self.params = params.to(self.params.dtype)
        state.seconds["aggregate"] = time.perf_counter() - tic
        return self.params

    def evaluate_due(self, t: int) -> bool:
        """Whether round ``t`` ends with a validation evaluation (every ``eval_every`` rounds, and the last)."""
        return t + 1 == self.config.rounds or bool(self.config.eval_every and (t + 1) % self.config.eval_every == 0)

    def log(self, state: RoundState, val_accuracy: float | None) -> RoundLog:
        """Records the round (one :class:`RoundLog`) and returns it."""
        losses = state.losses
        log = RoundLog(round=state.round, clients=state.clients.cpu(),
                       plan=None if state.plan is None else state.plan.detach().cpu(),
                       train_loss=float("nan") if losses is None else float(losses.min(1).values.mean()),
                       val_accuracy=val_accuracy if self.config.eval_every else None,
                       seconds={k: state.seconds.get(k, 0.0) for k in ("evaluate", "plan", "local_training",
                                                                       "aggregate")})
        last = self.history[-1] if self.history else None
        if last is not None and last.plan is not None and last.round % self.keep_every:
            self.history[-1] = replace(last, plan=None)  # its round's callback has had the full log
        self.history.append(log)
        return log

    def choose(self, val_accuracy: Tensor, selection_loss: Tensor | None) -> tuple[Tensor, Tensor]:
        """Each client's final model: the one the method assigns it
        (:meth:`~most.federated.methods.FederatedMethod.assigned`), else :func:`choose_models`.
        Returns ``(choice [n], chosen_by_loss [n] bool)``."""
        assigned = self.assigned()
        if assigned is not None:
            return assigned.cpu().long(), torch.zeros(self.n, dtype=torch.bool)
        return choose_models(val_accuracy, selection_loss)

    def assigned(self) -> Tensor | None:
        """``[n]`` the model the method assigns each client so far (a cluster, a group, its own
        model), or ``None`` when each client picks its best on validation."""
        return self.method.assigned(self.method_state, self.n)

    # ------------------------------------------------------------------ a mixture method's weights
    def weigh_samples(self, losses: Tensor, mask: Tensor, clients: Tensor) -> Tensor:
        """The method's weights of each training sample in each model's local loss
        (:meth:`~most.federated.methods.FederatedMethod.weigh_samples`, with the run's state)."""
        return self.method.weigh_samples(self.method_state, losses, mask, clients)

    def update_mixture(self, clients: Tensor, weights: Tensor) -> None:
        """Records mixture weights ``[k, m]`` the ``clients`` computed themselves (on Flower)."""
        self.method.update_mixture(self.method_state, clients, weights)

    def mixture(self) -> Tensor | None:
        """``[n, m]`` each client's weights of the models' predictions (a mixture method), else ``None``."""
        return self.method.mixture(self.method_state, self.n)

    # ------------------------------------------------------------------ checkpoints
    def state(self, round: int) -> dict:
        """What a checkpoint holds after ``round`` rounds (tensors on the CPU)."""
        return dict(round=round, params=self.params.cpu(), previous=None if self.previous is None else self.previous.cpu(),
                    history=[vars(log) for log in self.history], method_state=self.method_state)

    def restore(self, state: dict) -> int:
        """Continues from a checkpoint's state; returns the round to start from."""
        from ..checkpoint import CheckpointError, check_same_dtype, restore_into

        device = self.params.device
        params, previous = state.get("params"), state.get("previous")
        if not isinstance(params, Tensor) or params.shape != self.params.shape \
                or not (previous is None or isinstance(previous, Tensor)) or not isinstance(state.get("history"), list):
            got = tuple(params.shape) if isinstance(params, Tensor) else type(params).__name__
            raise CheckpointError(f"The checkpoint is damaged: its models should be a tensor of shape "
                                  f"{list(self.params.shape)} with a history; found {got}. Delete it (or use "
                                  "--restart) to start the run over.")
        check_same_dtype(params, self.params, "models")
        self.params = params.to(device)
        self.previous = None if previous is None else previous.to(device)
        try:
            self.history = [RoundLog(**log) for log in state["history"]]
        except TypeError as exc:
            raise CheckpointError(f"The checkpoint is damaged: a round of its history cannot be read ({exc}). Delete "
                                  "it (or use --restart) to start the run over.") from None
        if "method_state" not in state:
            raise CheckpointError("The checkpoint holds the method's run state in the form of an earlier version of "
                                  "the library, which this one does not read. Start the run over (--restart, or "
                                  "delete the checkpoint).")
        restore_into(self.method_state, state["method_state"], self.generator)
        return int(state["round"])


def _check_losses(t: int, clients: Tensor, losses: Tensor, client_ids: list[str] | None) -> None:
    if torch.isfinite(losses).all():
        return
    i, j = (int(v) for v in (~torch.isfinite(losses)).nonzero()[0])
    c = int(clients[i])
    name = client_ids[c] if client_ids is not None else str(c)
    raise ValueError(f"At round {t}, the training loss of client {name} on model {j} is {float(losses[i, j])}: "
                     "training diverged. Try a smaller local `lr`, or a smaller server step.")


def choose_models(val_accuracy: Tensor, selection_loss: Tensor | None) -> tuple[Tensor, Tensor]:
    """Each client's model: its best on validation accuracy; a client with no validation
    accuracy (an all-NaN row) but a selection loss takes its lowest-loss model. Returns
    ``(choice [n], chosen_by_loss [n] bool)``."""
    choice = torch.nan_to_num(val_accuracy, nan=-1.0).argmax(1)
    if selection_loss is None:
        return choice, torch.zeros_like(choice, dtype=torch.bool)
    by_loss = val_accuracy.isnan().all(1) & ~selection_loss.isnan().any(1)
    if by_loss.any():
        choice = torch.where(by_loss, select_by_loss(selection_loss).to(choice.device), choice)
    return choice, by_loss
