"""MosT on clients, with its warm-up (one shared model before the m models split); the
re-split of a model that serves two groups is :mod:`~most.federated.methods.resplit`."""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field, replace
from typing import ClassVar, cast

import torch
from torch import Tensor

from ..._host import to_device
from ..._random import derive_seed
from ..._validation import check_bool, check_component, check_positive_int
from ...methods import (
    CappedTransportAssignment,
    Marginals,
    MinNorm,
    ShareBounds,
    Shares,
    TransportAssignment,
    TransportConfig,
    WeightedSum,
)
from .base import FederatedMethod, MethodState
from .grouping import ClassGroups
from .losses import ClientLoss, CrossEntropy
from .resplit import Proposal, Resplit
from .updates import combine_updates, update_groups


# ----------------------------------------------------------------------------- warm-up
@dataclass(frozen=True)
class WarmUp:
    """``rounds`` rounds of FedAvg on one shared model before the m models part.

    The m models start as copies of one initialisation; in a warm-up round every client trains
    model 0 and all m models take the same sample-size-weighted mean step, so they stay equal.

    With ``groups`` (default :class:`~most.federated.methods.ClassGroups`), the last warm-up
    round also asks every client for its gradient of each class at the shared model; where
    those show groups of clients (clients whose inputs map to labels alike, whatever classes
    each holds), model j takes group j's mean step, so the models start apart, one per group,
    each group's share of the clients becomes the plan's balance point (for marginals with
    one, :attr:`most.methods.Marginals.has_balance`), and for ``groups.hold`` rounds each
    group's clients train their group's model alone. Where no groups stand apart but the
    clients still fall into m groups (every spectral group's typical client closer to its
    group than to the rest, :attr:`ClassGroups.start_apart`), model j takes the mean step of
    the j-th of them (not held, no balance point), so the models start apart there too. Where
    not even those show (clients without groups), and with ``groups=None``, the first plan
    after the warm-up is a tie on m equal models that the transport solver breaks, and the
    specialisation of the following rounds decides the groups."""

    rounds: int = 5
    groups: ClassGroups | None = field(default_factory=ClassGroups, kw_only=True)

    def __post_init__(self):
        object.__setattr__(self, "rounds", check_positive_int(self.rounds, name="rounds", minimum=0))
        if self.groups is not None:
            check_component(self.groups, name="groups", example="most.federated.methods.ClassGroups()",
                            base=ClassGroups)

    def active(self, round: int) -> bool:
        return round < self.rounds

    def signal(self, round: int) -> ClassGroups | None:
        """The grouping that asks the clients for their gradients per class in ``round`` (the
        last warm-up round), else ``None``."""
        return self.groups if self.groups is not None and self.rounds and round == self.rounds - 1 else None

    def seed(self, generator: torch.Generator) -> int | None:
        """What the warm-up draws from the run's generator before the first round (kept in the
        run's state, so a resumed run splits the same way); ``None``: nothing."""
        return None

    def direction(self, deltas: Tensor, pair_model: Tensor, counts: Tensor, m: int, round: int,
                  seed: int | None = None, groups: Tensor | None = None) -> Tensor:
        """The warm-up step of the m models ``[m, d]``: the shared sample-weighted mean; with
        ``groups [P]`` (each pair's group, -1 for none), model j takes group j's mean step and a
        model without a group the shared one."""
        shared = combine_updates(WeightedSum(), 1, deltas, torch.zeros_like(pair_model), counts)
        if groups is None:
            return shared.expand(m, -1)
        return _group_steps(deltas, groups, counts, m, shared)


def _group_steps(deltas: Tensor, groups: Tensor, counts: Tensor, m: int, shared: Tensor) -> Tensor:
    """``[m, d]``: model j's step is the weighted mean of the updates of group j's pairs
    (``groups [P]``, -1 for a pair without a group), ``shared [1, d]`` for a model without one."""
    groups = groups.to(deltas.device)
    member = groups >= 0
    split = combine_updates(WeightedSum(), m, deltas[member], groups[member], counts[member.to(counts.device)])
    has = torch.zeros(m, dtype=torch.bool, device=deltas.device)
    has[groups[member]] = True
    return torch.where(has[:, None], split, shared.expand(m, -1))


@dataclass(frozen=True)
class GroupedWarmUp(WarmUp):
    """A :class:`WarmUp` whose last round splits the models by groups of client updates.

    The last warm-up round's updates are grouped by :func:`balanced_update_groups` (balanced
    spherical k-means, seeded by the run's generator) and model j takes its group's mean step,
    so the m models start apart, each from the clients that pull the same way (the clustering
    of FL+HC, Briggs et al. 2020, balanced by transport); a model without a group takes the
    shared step. Needs ``rounds >= 1``. With ``balanced=False`` the groups are those of plain
    spherical k-means (:func:`update_groups`), of the sizes the updates show. With ``groups``
    (:class:`~most.federated.methods.ClassGroups`; none by default), the groups of the clients'
    gradients per class come first where they are found; where none stand apart the update
    groups start the models, so ``ClassGroups.start_apart`` is turned off here."""

    rounds: int = 5
    balanced: bool = True
    groups: ClassGroups | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "balanced", check_bool(self.balanced, name="balanced"))
        if not self.rounds:
            raise ValueError("GroupedWarmUp groups the clients' updates of the last warm-up round: it needs "
                             "rounds >= 1.")
        if self.groups is not None and self.groups.start_apart:
            # its update groups start the models apart where the class groups find none
            object.__setattr__(self, "groups", replace(self.groups, start_apart=False))

    def seed(self, generator):
        return derive_seed(generator)

    def direction(self, deltas, pair_model, counts, m, round, seed=None, groups=None):
        shared = super().direction(deltas, pair_model, counts, m, round, groups=groups)
        if round != self.rounds - 1 or groups is not None:
            return shared
        if seed is None:
            raise RuntimeError("GroupedWarmUp groups the updates with the seed it draws before the first round "
                               "(MosT.start); pass it.")
        group = update_groups(deltas, m, torch.Generator().manual_seed(seed), balanced=self.balanced)
        return _group_steps(deltas, group, counts, m, shared[:1])


@dataclass(frozen=True)
class MosT(TransportConfig, FederatedMethod):
    """MosT on clients: Gamma from the clients' losses, per-model combination of the
    Gamma-weighted client updates; the same components as :class:`most.MosT`.

    Args:
        n_models: m.
        server_lr: eta_s, the step of the update rule on the combined direction.
        diversity, transport, marginals, reg, warm_start: the transport
            (:class:`most.methods.TransportAssignment`). The default marginals are
            :class:`most.methods.ShareBounds` ``(0.5, 2, price=0.5)``: each model serves between
            half and twice the fair load n/m, and a client leaves its place in the balance only
            for a model on which its loss is lower by half the median client's best loss, so
            groups of clients of unequal size are served whole or nearly while clients without
            groups keep even loads; :class:`most.methods.Uniform` is the paper's balance (every
            model n/m), ``ShareBounds(0.5, 2)`` the bounds without the price.
        assignment: instead of those, any assignment, e.g.
            :class:`most.methods.CappedTransportAssignment` ``(shares=2)`` with
            ``weighting=most.methods.Shares()``: every client trains its 2 best models.
        weighting: Gamma -> per-pair weights (default :class:`most.methods.MajorityShare`:
            each client trains only the model holding its largest share;
            :class:`most.methods.GammaWeights` is the paper as written).
        combiner: :class:`most.methods.WeightedSum` (default: the share-weighted mean of each
            model's client updates, as in the paper's MosT(L)) or :class:`most.methods.MinNorm`
            (Eqs. 7-9: MGDA within each model's clients, the paper as written;
            ``MinNorm(coordinates="last")`` solves the weights on the final layer's bias, the
            paper's "MGDA on a subset of model parameters", Section 6).
        optimizer: the server's update rule (:class:`~most.optim.SGD` by default).
        warmup: :class:`WarmUp` ``(rounds=5)`` (default): FedAvg rounds of one shared model
            before it is copied to the m models; in its last round the clients also send their
            gradients per class, and where those show groups of clients
            (:class:`~most.federated.methods.ClassGroups`, found under label skew too) the models
            start apart, one per group, each group's share the balance point, the groups held
            for a few rounds; ``WarmUp(groups=None)`` never groups; :class:`GroupedWarmUp` splits
            the models by groups of the last warm-up round's updates; ``None`` starts from m
            random initialisations, as the paper does.
        resplit: :class:`Resplit` (default): now and then a model that duplicates another's
            clients is moved to split a model that serves two groups of clients (told apart by
            their losses on the other models, :class:`SplitByLosses`, or by their updates,
            :class:`SplitByUpdates`); when no model is free, the group that belongs elsewhere
            is handed over to the model that serves it next best, and the marginals' balance
            point follows (for marginals with one, :attr:`most.methods.Marginals.has_balance`);
            ``None`` never moves a model.
        client_loss: how each client scores the models for the plan (and so for the re-split):
            :class:`~most.federated.methods.CrossEntropy` (default) or
            :class:`~most.federated.methods.PriorAdjusted`, the cross-entropy with the client's
            own class frequencies added to the logits, for clients with a few classes each
            (label skew) that also differ in how their inputs map to labels: the plan then
            follows that difference, not the clients' classes.

    Why the defaults depart from the paper (measured in the documentation's Benchmarks →
    Federated): within one model's group the clients still disagree, and the min-norm
    direction shrinks to the little they agree on, so the mean of the updates trains better;
    a shared warm-up gives the models a common start; and the paper's balance makes every
    model train on n/m clients, so a group of clients smaller than that is trained together
    with clients of another group and a larger one is split, which the share bounds and the
    re-split avoid; the price keeps the loads even where the clients' losses show no groups
    (uneven loads cost accuracy there). Because the tie after the warm-up is decided by the last bits of the losses,
    the same seed can split the clients differently on another engine or machine; use
    ``warmup=None`` when runs must match across engines. ``WarmUp(groups=ClassGroups(start_apart=True))``
    starts the models apart along the spectral groups of the clients' gradients per class
    instead of from that tie.
    """

    marginals: Marginals = field(default_factory=lambda: ShareBounds(0.5, 2.0, price=0.5))  # the federated default
    warmup: WarmUp | None = field(default_factory=WarmUp)
    resplit: Resplit | None = field(default_factory=Resplit)
    client_loss: ClientLoss = field(default_factory=CrossEntropy)

    def __post_init__(self) -> None:
        super().__post_init__()  # FederatedMethod's checks, then the transport configuration's
        if self.combiner.centralised_only:
            raise ValueError(f"`combiner={type(self.combiner).__name__}(...)` reads the losses or parameters at the "
                             "models, which the federated runtime does not have (it combines the clients' updates); "
                             "use most.WeightedSum() or most.MinNorm(). For a set objective over clients use "
                             "most.federated.methods.SetScalarization.")
        if self.warmup is not None:
            check_component(self.warmup, name="warmup", example="most.federated.methods.WarmUp(rounds=5)", base=WarmUp)
        if self.resplit is not None:
            check_component(self.resplit, name="resplit", example="most.federated.methods.Resplit()", base=Resplit)
        check_component(self.client_loss, name="client_loss", example="most.federated.methods.PriorAdjusted()",
                        base=ClientLoss)

    def plan_loss(self) -> ClientLoss:
        return self.client_loss

    def class_signal(self, round):
        return None if self.warmup is None else self.warmup.signal(round)

    def observe_class_signal(self, state, clients, grads, counts):
        cast(MosTState, state).class_signal = (clients, grads, counts)

    @property
    def warmup_rounds(self) -> int:
        """The rounds of the warm-up (0 without one)."""
        return 0 if self.warmup is None else self.warmup.rounds

    @property
    def min_clients(self) -> int:
        return self.n_models

    def components(self):
        return self.transport_assignment(), self.weighting, self.combiner

    def check(self, n_clients):
        if n_clients < self.n_models:
            raise ValueError(
                f"MosT needs at least as many clients as models: {n_clients} clients < {self.n_models} models. "
                "Use fewer models (n_models) or more clients."
            )
        self.components()[0].check_models(self.n_models)  # e.g. a capped transport's shares against m

    def initial_params(self, model, m, generator):
        if self.warmup_rounds:
            return model.init(1, generator).repeat(m, 1)  # one shared start, split after the warm-up
        return model.init(m, generator)

    def start(self, n, m, generator, model=None):
        base = super().start(n, m, generator, model)
        warmup_seed = None if self.warmup is None else self.warmup.seed(generator)
        return MosTState(base.components, warmup_seed, n)

    def phase(self, round):
        if round < self.warmup_rounds:
            return WarmUpPhase(self.n_models, self.server_lr, self.optimizer, cast(WarmUp, self.warmup))
        return self

    def plan(self, state, losses, round, total, previous=None, *, clients=None):
        state = cast(MosTState, state)
        w0 = self.warmup_rounds
        if state.groups is not None and self.warmup is not None and self.warmup.groups is not None \
                and round - w0 < self.warmup.groups.hold:
            # the groups the warm-up found train their models alone for a few rounds
            state.round_losses, state.round_plan = None, None
            rows = torch.arange(losses.shape[0]) if clients is None else clients.cpu()
            group = state.groups[rows]
            free = group < 0  # a client the warm-up did not hear from: its best model
            group[free] = losses.detach().cpu()[free].argmin(1)
            plan = torch.nn.functional.one_hot(group, self.n_models).to(losses.device, torch.float64) / len(rows)
            return plan, state.components[1](plan).double()
        # the round's losses of every client, for a re-split in this round's aggregation
        state.round_losses = losses if clients is None else None
        state.total = total
        plan, weights = super().plan(state, losses, round - w0, total - w0, previous, clients=clients)
        state.round_plan = None if clients is not None else plan
        return plan, weights

    def round_assignment(self, state):
        """The run's assignment, with its marginals' balance point where a hand-over moved it."""
        assignment = state.components[0]
        loads = cast(MosTState, state).loads
        if loads is None:
            return assignment
        assignment = cast(TransportAssignment, assignment)
        return replace(assignment, marginals=assignment.marginals.at_loads(loads))

    def hands_over(self, state: MethodState) -> bool:
        """Whether a hand-over can move this run's balance point: the re-split hands over, and the
        run's assignment is a transport whose marginals have a balance point."""
        assignment = state.components[0]
        return (self.resplit is not None and self.resplit.hand_over and isinstance(assignment, TransportAssignment)
                and assignment.marginals.has_balance)

    def aggregate(self, state, params, deltas, pair_model, pair_weight, *, round, clients=None):
        state = cast(MosTState, state)
        w0 = self.warmup_rounds
        if self.resplit is not None and state.round_losses is not None and clients is not None:
            can_hand_over = self.hands_over(state) and state.round_plan is not None
            move = self.resplit.propose(round - w0, state.total - w0, deltas, pair_model, state.round_losses, clients,
                                        hand_over=can_hand_over)
            if move is not None and not move.moves and can_hand_over:
                # the half leaves its model's step this round and the balance point follows it
                half = clients[to_device(move.pairs, clients.device)]
                state.loads = _loads_after(state.round_plan, state.round_losses, half, move)
                keep = torch.ones(len(pair_model), dtype=torch.bool, device=pair_model.device)
                keep[to_device(move.pairs, keep.device)] = False
                deltas, pair_model, pair_weight = deltas[to_device(keep, deltas.device)], pair_model[keep], \
                    pair_weight[to_device(keep, pair_weight.device)]
                clients = clients[keep.to(clients.device)]
            elif move is not None and move.moves:
                split, moved, pairs = move.split, move.to, move.pairs
                if state.loads is not None and state.round_plan is not None:  # the balance point follows the move
                    half = clients[to_device(pairs, clients.device)]
                    state.loads = _loads_after(state.round_plan, state.round_losses, half, move)
                params = params.clone()
                params[moved] = params[split]
                # the moved model's own pairs trained the model it no longer is: they are left out
                keep = pair_model != moved
                pair_model = pair_model.clone()
                pair_model[to_device(pairs, pair_model.device)] = moved
                deltas, pair_model, pair_weight = deltas[to_device(keep, deltas.device)], pair_model[keep], \
                    pair_weight[to_device(keep, pair_weight.device)]
                clients = None if clients is None else clients[keep.to(clients.device)]
                if state.opt_state is not None:  # the moved model restarts its optimiser state
                    state.opt_state = self.optimizer.restart(state.opt_state, moved)
        return super().aggregate(state, params, deltas, pair_model, pair_weight, round=round, clients=clients)


def _loads_after(plan: Tensor, losses: Tensor, half: Tensor, proposal: Proposal) -> Tensor:
    """The models' shares ``[m]`` (summing to 1) once the clients ``half`` go from
    ``proposal.split`` to ``proposal.to``, from the round's ``plan [n, m]``; for a move, the
    moved model's own clients first go to their next best model by ``losses [n, m]``."""
    plan = plan.detach().double().cpu()
    loads = plan.sum(0)
    if proposal.moves:
        others = losses.detach().double().cpu().clone()
        others[:, proposal.to] = math.inf
        loads.index_add_(0, others.argmin(1), plan[:, proposal.to])
        loads[proposal.to] = 0.0
    share = plan[half.cpu(), proposal.split].sum()
    loads[proposal.split] -= share
    loads[proposal.to] += share
    loads = loads.clamp_min(0.0)
    return loads / loads.sum()


class MosTState(MethodState):
    """A federated MosT run's state: the base's, the warm-up's seed, the round's losses and plan
    (for a re-split in the round's aggregation; ``None`` in a round with sampled clients) with
    the run's rounds, the balance point the warm-up's groups or a hand-over set (``None``: the
    fair load), and the class signal of the warm-up's last round until its aggregation."""

    def __init__(self, components, warmup_seed: int | None, n_clients: int = 0):
        super().__init__(components)
        self.n_clients = n_clients
        self.warmup_seed = warmup_seed
        self.round_losses: Tensor | None = None
        self.round_plan: Tensor | None = None
        self.loads: Tensor | None = None
        self.total = 0
        #: the clients' gradients per class of the warm-up's last round, until its aggregation
        self.class_signal: tuple[Tensor, Tensor, Tensor] | None = None
        #: during that aggregation, each pair's group (-1: none), for the warm-up's step
        self.pair_groups: Tensor | None = None
        #: ``[n]`` each client's group the warm-up found (-1: none), or ``None`` (none found)
        self.groups: Tensor | None = None


@dataclass(frozen=True)
class WarmUpPhase(FederatedMethod):
    """The rounds of MosT's warm-up: every client trains model 0, and all m models take the
    warm-up's step (the shared sample-weighted mean, or in the last round the means of the
    groups its :class:`ClassGroups` found, or for :class:`GroupedWarmUp` its update groups). It
    shares the MosT run's state (the server optimiser's state, the balance point the groups set)."""

    warmup: WarmUp = field(default_factory=WarmUp)
    logs_plan: ClassVar[bool] = False

    def plan(self, state, losses, round, total, previous=None, *, clients=None):
        w = torch.zeros(self.n_models, losses.shape[0], dtype=torch.float64, device=losses.device)
        w[0] = 1.0
        return None, w

    def pair_weights(self, weights, counts, round):
        return counts.double()

    def aggregate(self, state, params, deltas, pair_model, pair_weight, *, round, clients=None):
        state = cast(MosTState, state)
        signal, state.class_signal = state.class_signal, None
        if signal is not None and clients is not None and self.warmup.groups is not None:
            asked, grads, counts = signal
            found, apart = self.warmup.groups.split(grads, counts, self.n_models)
            if found is not None:
                group_of = torch.full((state.n_clients,), -1, dtype=torch.long)
                group_of[asked.cpu()] = found.cpu()
                state.pair_groups = group_of[clients.cpu()]
                # groups that stand apart are also held and set the balance point; the start-apart
                # groups only start the models (state.groups stays None)
                if apart:
                    state.groups = group_of
                    assignment = state.components[0]
                    if isinstance(assignment, TransportAssignment) and assignment.marginals.has_balance:
                        sizes = torch.bincount(found.cpu(), minlength=self.n_models).double()
                        state.loads = sizes / sizes.sum()  # each group's share is the plan's balance point
        try:
            return super().aggregate(state, params, deltas, pair_model, pair_weight, round=round, clients=clients)
        finally:
            state.pair_groups = None

    def direction(self, state, deltas, pair_model, pair_weight, m, round):
        return self.warmup.direction(deltas, pair_model, pair_weight, m, round,
                                     seed=cast(MosTState, state).warmup_seed,
                                     groups=cast(MosTState, state).pair_groups)

    def moved(self, pair_model, m, round):
        return torch.ones(m, dtype=torch.bool, device=pair_model.device)


# ----------------------------------------------------------------------------- deprecated spellings
_DEPRECATED = ("combine", "warmup_rounds", "split", "gram_on", "shares")


def _translate_deprecated(kwargs: dict, old: dict) -> None:
    """``MosT(combine=..., warmup_rounds=..., split=..., gram_on=..., shares=...)``, the spelling
    before the federated methods took components, as the components it meant (with a warning)."""
    warnings.warn(f"MosT({', '.join(f'{k}=...' for k in old)}) is deprecated: pass components instead "
                  "(combiner=most.MinNorm(coordinates=...), warmup=WarmUp(k) / GroupedWarmUp(k) / None, "
                  "assignment=most.methods.CappedTransportAssignment(k) with weighting=most.methods.Shares()); "
                  "see the CHANGELOG.", DeprecationWarning, stacklevel=3)
    combine, gram_on = old.get("combine"), old.get("gram_on")
    if combine not in (None, "mean", "min_norm"):
        raise ValueError(f"`combine` must be 'min_norm' or 'mean'; got {combine!r}.")
    if combine == "min_norm" or gram_on is not None:
        kwargs["combiner"] = MinNorm(coordinates=gram_on)
    elif combine == "mean":
        kwargs["combiner"] = WeightedSum()
    if "warmup_rounds" in old or "split" in old:
        rounds = old.get("warmup_rounds", 5)
        grouped = old.get("split", "losses") == "updates"
        kwargs["warmup"] = GroupedWarmUp(rounds) if grouped else (WarmUp(rounds) if rounds else None)
    if old.get("shares", 1) != 1:
        kwargs["assignment"] = CappedTransportAssignment(old["shares"])
        kwargs.setdefault("weighting", Shares())


def _accept_deprecated(cls):
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        old = {k: kwargs.pop(k) for k in _DEPRECATED if k in kwargs}
        if old:
            _translate_deprecated(kwargs, old)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


_accept_deprecated(MosT)
