r"""Server-side methods for the federated runtimes: MosT and the FL baselines.

A federated method is the same components as a centralised one (:mod:`most.methods`), applied
to clients instead of objectives and to client updates instead of gradients:

1. an **assignment** ``losses [n, m] -> plan Gamma [n, m]`` (which client trains which model;
   MosT: optimal transport, Eq. 6), with its **marginals**;
2. a **weighting** ``Gamma -> W [m, n]`` (a pair (client i, model j) trains when ``W[j, i] > 0``);
3. a **combiner** ``(updates [m, k, d], weights [m, k]) -> direction [m, d]`` applied to the
   pseudo-gradients ``Delta_ij = theta_j - theta_ij`` of each model's clients: the very objects
   of the centralised loop (:class:`~most.methods.MinNorm`, Eqs. 7-9, formed by
   :func:`most.mgda.min_norm_direction`; :class:`~most.methods.WeightedSum`);
4. an **update rule** for the server step, ``theta_j <- rule(theta_j, d_j, lr=server_lr)``
   (:class:`~most.optim.SGD` by default, :class:`~most.optim.Adam` possible);

plus, for MosT, a **warm-up** (:class:`WarmUp`): rounds of one shared model before the m
models split. The round itself (sample, plan, pairs, combine, update, log) is
:class:`most.federated.server.Server`, shared by the in-process runtime and Flower.

* :class:`MosT` -- Gamma by optimal transport on the clients' losses.
* :class:`FedAvg`, :class:`FedProx` -- m independent runs (McMahan et al. 2017; Li et al. 2020).
* :class:`MGDA` -- m independent runs of federated MGDA (min-norm of all client updates).
* :class:`WeightedMGDA` -- MGDA on client updates reweighted by a fixed random plan.
* :class:`Linearization` -- model j averages client updates with fixed random simplex weights.
* :class:`FedMGDAPlus` -- Hu et al. 2022: normalised client updates, min-norm with the box
  ``|lambda_i - 1/n| <= eps`` (:class:`BoxMinNorm`).
* :class:`IFCA` -- Ghosh et al. 2020: each client joins its lowest-loss model, each model
  averages its clients' updates.
* :class:`SetScalarization` -- TCH-Set, STCH-Set and sum-of-minimum on clients.
* :class:`CFL` -- Sattler et al. 2020: FedAvg within clusters, a cluster split in two by its
  updates' cosine similarities when they stop agreeing (:mod:`most.federated.clustered`).
* :class:`Oracle` -- FedAvg within the clients' true groups, where the data has them.
* :class:`LocalOnly`, :class:`FineTuning` -- local training alone, and FedAvg then local
  fine-tuning: one model per client (:mod:`most.federated.personal`).
* :class:`FedEM` -- Marfoq et al. 2021: m shared models, each client's mixture weights learned
  by EM; a client predicts with its mixture (:mod:`most.federated.mixture`).
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field, fields
from typing import Callable, ClassVar, Literal

import numpy as np
import torch
from torch import Tensor

from .. import transport
from .._host import to_device, to_host
from .._random import derive_seed
from .._validation import check_bool, check_component, check_non_negative, check_positive, check_positive_int
from ..methods import (
    Assignment,
    CappedTransportAssignment,
    Combiner,
    EqualAssignment,
    GammaWeights,
    MajorityShare,
    Marginals,
    MinNorm,
    ShareBounds,
    Shares,
    RandomAssignment,
    RelativeWeights,
    Support,
    WeightedSum,
    Weighting,
)
from ..optim import SGD, UpdateRule

__all__ = ["FederatedMethod", "MosT", "FedAvg", "FedProx", "MGDA", "WeightedMGDA", "Linearization", "FedMGDAPlus",
           "IFCA", "SetScalarization", "Resplit", "CFL", "Oracle", "LocalOnly", "FineTuning", "FedEM", "WarmUp", "GroupedWarmUp", "BoxMinNorm", "combine_updates", "min_norm_box",
           "balanced_update_groups", "update_groups", "weighted_mean", "min_norm_combination"]


# ----------------------------------------------------------------------------- combining client updates
def combine_updates(combiner: Combiner, m: int, deltas: Tensor, pair_model: Tensor, pair_weight: Tensor) -> Tensor:
    """The direction ``[m, d]`` of each model from its pairs' updates: the pairs of model j
    (``pair_model == j``, in their order) are packed into ``updates [m, k, d]`` and ``weights [m, k]``
    (padding has weight 0) and handed to ``combiner``, as the centralised loop hands it the
    served objectives' gradients. A model without pairs gets a zero direction."""
    P, d = deltas.shape
    # the packing is index arithmetic on ``pair_model``'s device (the host, in the runtime), then
    # one copy of the indices and one of the weights to the updates' device
    order = torch.sort(pair_model, stable=True).indices  # the pairs of each model, in their order
    pair_model = pair_model[order]
    count = torch.bincount(pair_model, minlength=m)
    k = max(1, int(count.max())) if P else 1
    start = torch.cumsum(count, 0) - count
    slot = torch.arange(P, device=pair_model.device) - start[pair_model]
    order, model_at, slot = to_device(torch.stack([order, pair_model, slot]), deltas.device)
    packed = deltas.new_zeros(m, k, d)
    packed[model_at, slot] = deltas[order]
    weights = torch.zeros(m, k, dtype=torch.float64, device=deltas.device)
    weights[model_at, slot] = to_device(pair_weight.to(dtype=torch.float64), deltas.device)[order]
    direction, _ = combiner(packed, weights)
    return direction.to(deltas.dtype)


@dataclass(frozen=True)
class BoxMinNorm(Combiner):
    """FedMGDA+'s combination (Hu et al. 2022): each model's rows normalised to unit length,
    then the min-norm point of their hull with the weights in the box ``|lambda_i - 1/k| <= eps``
    (:func:`min_norm_box`; ``k`` = the model's rows with a positive weight)."""

    eps: float = 0.1
    active_only: ClassVar[bool] = True

    def __post_init__(self):
        check_non_negative(self.eps, name="eps")

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        m, n, _ = jacobian.shape
        device = jacobian.device
        direction = jacobian.new_zeros(m, jacobian.shape[-1])
        lam = torch.zeros(m, n, dtype=jacobian.dtype, device=device)
        # the models' unit rows and Gram matrices on the rows' device, then the m small QPs on the
        # host: one read of the active rows and one of the Gram matrices, not one per model
        (active,) = to_host([weights > 0])
        units = []
        for j in range(m):
            rows = to_device(torch.nonzero(active[j]).squeeze(1), device)
            if len(rows):
                u = jacobian[j, rows] / jacobian[j, rows].norm(dim=1, keepdim=True).clamp_min(1e-12)
                units.append((j, rows, u, u.double() @ u.double().T))
        for (j, rows, u, _), gram in zip(units, to_host([g for *_, g in units])):
            w = to_device(min_norm_box(gram, self.eps), device)
            direction[j] = (w.to(u)[:, None] * u).sum(0)
            lam[j, rows] = w.to(lam)
        return direction, lam


@functools.lru_cache(maxsize=1)
def _blas():
    """The BLAS libraries NumPy and SciPy loaded (SciPy's wheels bring their own), once."""
    import scipy.optimize  # noqa: F401  (loads SciPy's BLAS before the controller looks)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def min_norm_box(G: Tensor, eps: float) -> Tensor:
    """``argmin lambda^T G lambda`` over ``{lambda in simplex, |lambda_i - 1/k| <= eps}``.

    FedMGDA+'s capped min-norm problem, a small dense QP (k = clients of one model), solved
    with SciPy's SLSQP from the uniform weights (which are feasible). ``G`` is ``[k, k]``.

    The solve runs on one BLAS thread. SLSQP's answer changes in its last bits with the number
    of BLAS threads, and over a run those bits change the trajectory: with the machine's default
    thread count a table made on 2 cores would not repeat on 16, nor in a process pinned to one
    core. At these sizes more threads only cost (oversubscribed worker processes made the solve
    seven times slower).
    """
    from scipy.optimize import minimize

    k = G.shape[0]
    Gn = G.detach().double().cpu().numpy()
    Gn = 0.5 * (Gn + Gn.T)
    start = np.full(k, 1.0 / k)
    with _blas().limit(limits=1, user_api="blas"):
        res = minimize(lambda v: v @ Gn @ v, start, jac=lambda v: 2 * Gn @ v, method="SLSQP",
                       bounds=[(max(0.0, 1.0 / k - eps), min(1.0, 1.0 / k + eps))] * k,
                       constraints=[{"type": "eq", "fun": lambda v: v.sum() - 1.0, "jac": lambda v: np.ones(k)}],
                       options={"ftol": 1e-12, "maxiter": 500})
    lam = np.clip(res.x, max(0.0, 1.0 / k - eps), min(1.0, 1.0 / k + eps))
    return torch.as_tensor(lam / lam.sum(), dtype=torch.float64)


def balanced_update_groups(deltas: Tensor, m: int, generator: torch.Generator, max_iter: int = 50) -> Tensor:
    """Balanced spherical k-means of client updates: a group in ``0..m-1`` for each row of ``deltas``.

    The updates are scaled to unit norm (their direction, not their size, says which clients
    pull the same way). Centres are seeded by k-means++ from ``generator``; then, until the
    groups stop changing (at most ``max_iter`` times), the rows are assigned by the exact
    transport plan with uniform marginals on the squared distances to the centres (each group
    gets ``n/m`` rows; a row the plan splits goes to its largest share) and each centre becomes
    its group's normalised mean. With ``n <= m`` each row is a group of its own.
    """
    return update_groups(deltas, m, generator, balanced=True, max_iter=max_iter)


def update_groups(deltas: Tensor, m: int, generator: torch.Generator, *, balanced: bool,
                  max_iter: int = 50) -> Tensor:
    """Spherical k-means of client updates, balanced (:func:`balanced_update_groups`) or not
    (``balanced=False``: each row joins its nearest centre, so the groups take the sizes the
    updates show; a group left empty keeps its centre)."""
    n = deltas.shape[0]
    check_positive_int(m, name="m")
    if n == 0:
        raise ValueError("balanced_update_groups needs at least one client update; got none.")
    if not torch.isfinite(deltas).all():
        raise ValueError("balanced_update_groups: the client updates contain NaN or inf; training diverged. "
                         "Try a smaller local `lr` or server step.")
    if n <= m:
        return torch.arange(n, device=deltas.device)
    u = deltas.double()
    u = u / u.norm(dim=1, keepdim=True).clamp_min(1e-300)
    first = int(torch.randint(n, (1,), generator=generator))
    centres = [u[first]]
    for _ in range(1, m):  # k-means++: the next centre with probability proportional to D^2
        d2 = torch.cdist(u, torch.stack(centres)).min(1).values.square()
        p = d2 / d2.sum() if d2.sum() > 0 else torch.full_like(d2, 1.0 / n)
        centres.append(u[int(torch.multinomial(p.cpu().float(), 1, generator=generator))])
    c = torch.stack(centres)
    a = torch.full((n,), 1.0 / n, dtype=torch.float64)
    b = torch.full((m,), 1.0 / m, dtype=torch.float64)
    labels = None
    for _ in range(max_iter):
        if balanced:
            plan = transport.solve(torch.cdist(u, c).square().cpu(), a, b, method="exact").plan
            new = plan.argmax(1).to(deltas.device)
        else:
            new = torch.cdist(u, c).argmin(1)
        if labels is not None and torch.equal(new, labels):
            break
        labels = new
        for j in range(m):
            if (labels == j).any():  # an empty group keeps its centre
                mean = u[labels == j].sum(0)
                c[j] = mean / mean.norm().clamp_min(1e-300)
    return labels


# ----------------------------------------------------------------------------- warm-up
@dataclass
class WarmUp:
    """``rounds`` rounds of FedAvg on one shared model before the m models part.

    The m models start as copies of one initialisation; in a warm-up round every client trains
    model 0 and all m models take the same sample-size-weighted mean step, so they stay equal.
    After the warm-up, the first plan (on m equal models) is a tie that the transport solver
    breaks, and the specialisation of the following rounds decides the groups."""

    rounds: int = 5

    def __post_init__(self):
        self.rounds = check_positive_int(self.rounds, name="rounds", minimum=0)

    def active(self, round: int) -> bool:
        return round < self.rounds

    def reset(self, generator: torch.Generator) -> None:
        """Called once before the first round."""

    def direction(self, deltas: Tensor, pair_model: Tensor, counts: Tensor, m: int, round: int) -> Tensor:
        """The warm-up step of the m models ``[m, d]``: the shared sample-weighted mean."""
        shared = combine_updates(WeightedSum(), 1, deltas, torch.zeros_like(pair_model), counts)
        return shared.expand(m, -1)


@dataclass
class GroupedWarmUp(WarmUp):
    """A :class:`WarmUp` whose last round splits the models by groups of client updates.

    The last warm-up round's updates are grouped by :func:`balanced_update_groups` (balanced
    spherical k-means, seeded by the run's generator) and model j takes its group's mean step,
    so the m models start apart, each from the clients that pull the same way (the clustering
    of FL+HC, Briggs et al. 2020, balanced by transport); a model without a group takes the
    shared step. Needs ``rounds >= 1``. With ``balanced=False`` the groups are those of plain
    spherical k-means (:func:`update_groups`), of the sizes the updates show."""

    rounds: int = 5
    balanced: bool = True

    def __post_init__(self):
        super().__post_init__()
        self.balanced = check_bool(self.balanced, name="balanced")
        if not self.rounds:
            raise ValueError("GroupedWarmUp groups the clients' updates of the last warm-up round: it needs "
                             "rounds >= 1.")
        self._seed: int | None = None

    def reset(self, generator):
        # drawn now, kept with the method, so a run resumed from a checkpoint splits the same way
        self._seed = derive_seed(generator)

    def direction(self, deltas, pair_model, counts, m, round):
        shared = super().direction(deltas, pair_model, counts, m, round)
        if round != self.rounds - 1:
            return shared
        if self._seed is None:
            raise RuntimeError("GroupedWarmUp draws its seed in reset(generator), which the federated server calls "
                               "before the first round.")
        group = update_groups(deltas, m, torch.Generator().manual_seed(self._seed), balanced=self.balanced)
        split = combine_updates(WeightedSum(), m, deltas, group, counts)
        has = torch.zeros(m, dtype=torch.bool, device=deltas.device)
        has[group] = True
        return torch.where(has[:, None], split, shared)


# ----------------------------------------------------------------------------- re-splitting
@dataclass(frozen=True)
class Resplit:
    """Moves a redundant model to split a model whose clients pull apart: the federated
    counterpart of the centralised default's re-seeding (:class:`most.seeding.Reseed`), judged
    from the round's losses and the clients' updates instead of extra gradient steps.

    Every ``every`` rounds (until the fraction ``until`` of the rounds after the warm-up), each
    model with at least ``min_clients`` trained pairs has its pairs' updates split in two by
    :func:`~most.federated.clustered.bipartition` (CFL's split); the model whose two halves pull
    most against each other, with a mean cosine similarity across the halves below
    ``max_similarity``, is the one to split (a model serving two groups of clients: their updates
    point apart). The model to move is the one whose removal raises the clients' summed best
    loss the least (its clients' second-best loss minus their best, from the round's losses),
    and it moves only when that cost is below the split model's excess loss (its clients' loss
    above the mean best loss of the other clients). The moved model restarts as a copy of the
    split one and takes the mean step of the second half's updates (its own clients' updates of
    this round, made from the model it no longer is, are left out); the split model takes the
    first half's. So a model that duplicates another one's group is freed for a group that
    shares a model, the failure the balance and the load bounds alone cannot undo.

    Deterministic (no draw). It needs the losses of every client (full participation): in a
    round with sampled clients it does nothing.
    """

    every: int = 5
    until: float = 0.6
    min_clients: int = 4
    max_similarity: float = -0.25

    def __post_init__(self):
        check_positive_int(self.every, name="every")
        check_positive_int(self.min_clients, name="min_clients", minimum=2)
        for name, low, high in (("until", 0.0, 1.0), ("max_similarity", -1.0, 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ValueError(f"`{name}` must be a number in [{low:g}, {high:g}]; got {value!r}.")

    def propose(self, round: int, total: int, deltas: Tensor, pair_model: Tensor, losses: Tensor
                ) -> tuple[int, int, Tensor] | None:
        """``(split, moved, pairs)``: the model to split, the model to move and the pairs (indices
        into ``deltas``) of the half that goes to the moved model; ``None`` for no move.
        ``round`` and ``total`` count after the warm-up; ``losses [n, m]`` are the round's."""
        from .clustered import bipartition

        m = losses.shape[1]
        if m < 2 or (round + 1) % self.every or round >= self.until * total:
            return None
        pair_model = pair_model.cpu()
        best = None
        for j in range(m):
            mine = (pair_model == j).nonzero().squeeze(1)
            if len(mine) < self.min_clients:
                continue
            rows = deltas[to_device(mine, deltas.device)].double()
            half = bipartition(rows)
            if bool(half.all()) or not bool(half.any()):
                continue
            u = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-300)
            cross = float((u[to_device(half == 0, u.device)] @ u[to_device(half == 1, u.device)].T).mean())
            if cross < self.max_similarity and (best is None or cross < best[0]):
                best = (cross, j, mine[half == 1])
        if best is None:
            return None
        _, split, pairs = best
        L = losses.double().cpu()
        two = L.topk(2, dim=1, largest=False)
        owner = two.indices[:, 0]
        cost = torch.zeros(m, dtype=torch.float64).index_add_(0, owner, two.values[:, 1] - two.values[:, 0])
        cost[split] = math.inf
        moved = int(cost.argmin())
        mine, others = owner == split, owner != split
        if not mine.any() or not others.any():
            return None
        excess = float((L[mine, split] - L[others].min(1).values.mean()).clamp_min(0).sum())
        if float(cost[moved]) >= excess:
            return None
        return split, moved, pairs


# ----------------------------------------------------------------------------- methods
@dataclass
class FederatedMethod:
    """A federated method: components for the server's round.

    Subclasses set :meth:`components`; the server (:class:`most.federated.server.Server`) calls
    :meth:`check`, :meth:`initial_params`, :meth:`reset` once, then every round :meth:`plan`
    and :meth:`aggregate`.

    Args:
        n_models: m.
        server_lr: eta_s, the step of the update rule on the combined direction.
        optimizer: the server's update rule (:class:`~most.optim.SGD`: ``theta - eta_s d``).
    """

    n_models: int
    server_lr: float = 1.0
    optimizer: UpdateRule = field(default_factory=SGD)

    #: FedProx's proximal weight in local training (0: none).
    prox_mu: float = field(default=0.0, init=False, repr=False)
    #: Whether each pair's update is weighted by its client's sample count (FedAvg's mean).
    by_samples: ClassVar[bool] = False
    #: Whether the plan is a transport plan worth logging (and reporting Gamma metrics of).
    logs_plan: ClassVar[bool] = True
    #: How each client's final model is picked, in words (the benchmark tables say it):
    #: the default is its best model on validation; a method that assigns each client a model
    #: (:meth:`assigned`) says which.
    pick: ClassVar[str] = "best on validation"
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

    def __post_init__(self):  # stored as the plain numbers they were checked as
        self.n_models = check_positive_int(self.n_models, name="n_models")
        self.server_lr = check_positive(self.server_lr, name="server_lr")
        for f in fields(self):  # a subclass's numeric fields name their check
            if "check" in f.metadata:
                setattr(self, f.name, f.metadata["check"](getattr(self, f.name), name=f.name))
        check_component(self.optimizer, name="optimizer", example="most.optim.SGD()", base=UpdateRule)
        self._opt_state = None
        self._parts: tuple[Assignment, Weighting, Combiner] | None = None

    def components(self) -> tuple[Assignment, Weighting, Combiner]:
        raise NotImplementedError

    @property
    def min_clients(self) -> int:
        """The fewest answering clients a round needs (fewer: the round leaves the models as they are)."""
        return 1

    def check(self, n_clients: int) -> None:
        """Refuses a number of clients the method cannot serve (before any work)."""

    def models_for(self, n_clients: int) -> int:
        """The number of models the server holds for ``n_clients`` clients (``n_models``; one
        per client for :class:`~most.federated.personal.LocalOnly`)."""
        return self.n_models

    def assigned(self, n_clients: int) -> Tensor | None:
        """``[n]`` the model each client is scored on, for a method that assigns one (a cluster,
        a group, its own model); ``None`` (the default): each client picks its best on validation."""
        return None

    @property
    def fine_tune_epochs(self) -> int:
        """Local epochs each client trains its picked model for after the last round (0: none;
        :class:`~most.federated.personal.FineTuning`)."""
        return 0

    def weigh_samples(self, losses: Tensor, mask: Tensor, clients: Tensor) -> Tensor:
        """For a method with :attr:`sample_weights`: ``[k, m, N]`` the weight of each sample in
        each model's local loss, from ``losses [k, m, N]`` (each model's loss on each training
        sample of the ``k`` clients, 0 on padding), ``mask [k, N]`` (1 for a real sample) and
        ``clients [k]`` (their indices among all n). Called once per round before local training,
        and once after the last round before the final evaluation."""
        raise NotImplementedError(f"{type(self).__name__} does not weigh samples (sample_weights is False).")

    def update_mixture(self, clients: Tensor, weights: Tensor) -> None:
        """For a method with :attr:`sample_weights` whose clients compute their own weights (on
        Flower, each client runs the E-step on its data): records ``weights [k, m]`` of the
        ``clients [k]`` (indices among all n)."""
        raise NotImplementedError(f"{type(self).__name__} has no mixture weights (sample_weights is False).")

    def mixture(self, n_clients: int) -> Tensor | None:
        """``[n, m]`` each client's weights of the models' predictions, for a method whose clients
        predict with a mixture (:class:`FedEM`); ``None`` (the default): one model per client."""
        return None

    def initial_params(self, model, m: int, generator: torch.Generator) -> Tensor:
        return model.init(m, generator)

    def reset(self, n: int, m: int, generator: torch.Generator, model=None) -> None:
        """Called once before the first round: fixes the components' randomness and resolves a
        combiner's parameter name against ``model``."""
        assignment, weighting, combiner = self.components()
        if model is not None:
            combiner = combiner.resolve(model.coordinates)
        assignment.reset(n, m, generator)
        self._parts = (assignment, weighting, combiner)
        self._opt_state = None

    def _components(self):
        if self._parts is None:
            raise RuntimeError(f"{type(self).__name__}.reset(n, m, generator) must be called before the first round; "
                               "run_federated and the Flower strategy do so.")
        return self._parts

    def plan(self, losses: Tensor, round: int, total: int, previous: Tensor | None = None, *,
             clients: Tensor | None = None) -> tuple[Tensor | None, Tensor]:
        """``(plan [n, m] or None, W [m, n])`` for the participating clients (rows of ``losses``;
        ``clients`` are their indices among all n, for assignments fixed for the run)."""
        assignment, weighting, _ = self._components()
        losses = losses.double()
        if clients is not None and assignment.fixed:
            plan = assignment.rows(clients).to(losses)
        else:
            plan = assignment(losses, round, total, previous=previous)
        return (plan if self.logs_plan else None), weighting(plan).double()

    def pair_weights(self, weights: Tensor, counts: Tensor, round: int) -> Tensor:
        """Each trained pair's weight in its model's combination: ``W[j, i]``, or the client's
        sample count for sample-weighted methods."""
        return counts.double() if self.by_samples else weights.double()

    def direction(self, deltas: Tensor, pair_model: Tensor, pair_weight: Tensor, m: int, round: int) -> Tensor:
        return combine_updates(self._components()[2], m, deltas, pair_model, pair_weight)

    def aggregate(self, params: Tensor, deltas: Tensor, pair_model: Tensor, pair_weight: Tensor, *,
                  round: int, clients: Tensor | None = None) -> Tensor:
        """The server step: the combined direction of each model's pair updates, then the update
        rule with ``lr = server_lr``; a model without pairs stays where it is. ``clients`` (the
        client, among all n, of each pair) is for methods that track clients (:class:`CFL`)."""
        m = params.shape[0]
        direction = self.direction(deltas, pair_model, pair_weight, m, round)
        if self._opt_state is None:
            self._opt_state = self.optimizer.init(params)
        new, self._opt_state = self.optimizer.step(params, direction.to(params), self._opt_state, self.server_lr)
        return torch.where(to_device(self.moved(pair_model, m, round), params.device)[:, None], new, params)

    def moved(self, pair_model: Tensor, m: int, round: int) -> Tensor:
        """``[m]``: the models this round's step moves (those with a trained pair)."""
        has = torch.zeros(m, dtype=torch.bool, device=pair_model.device)
        has[pair_model] = True
        return has


@dataclass
class _EveryPair(FederatedMethod):
    """Every client trains every model (:class:`~most.methods.EqualAssignment`, weight 1 each);
    a subclass names the combination of the updates."""

    logs_plan: ClassVar[bool] = False
    #: the combination of each model's updates, built from the method's fields
    combination: ClassVar[Callable[["_EveryPair"], Combiner]]

    def components(self):
        return EqualAssignment(), Support(), self.combination()


@dataclass
class FedAvg(_EveryPair):
    """m independent FedAvg runs: every client trains every model; sample-size-weighted mean."""

    by_samples: ClassVar[bool] = True
    combination = lambda self: WeightedSum()  # noqa: E731


@dataclass
class FedProx(FedAvg):
    """FedAvg with the local proximal term ``mu / 2 ||w - w_t||^2`` (Li et al. 2020)."""

    mu: float = field(default=0.01, metadata={"check": check_non_negative})

    def __post_init__(self):
        super().__post_init__()
        self.prox_mu = self.mu


@dataclass
class MGDA(_EveryPair):
    """m independent runs of federated MGDA: the min-norm element of the hull of all client
    updates (:class:`~most.methods.MinNorm`, unit weights)."""

    combination = lambda self: MinNorm()  # noqa: E731


@dataclass
class FedMGDAPlus(_EveryPair):
    """FedMGDA+ (Hu et al. 2022): normalised client updates, min-norm within ``|lambda_i - 1/n| <= eps``."""

    eps: float = field(default=0.1, metadata={"check": check_non_negative})
    combination = lambda self: BoxMinNorm(self.eps)  # noqa: E731


@dataclass
class Linearization(FederatedMethod):
    """Model j minimises a fixed random convex combination of the client losses
    (:class:`~most.methods.RandomAssignment`, the weighted mean of the updates)."""

    concentration: float = field(default=1.0, metadata={"check": check_positive})

    def components(self):
        return RandomAssignment(self.concentration), GammaWeights(), WeightedSum()


@dataclass
class WeightedMGDA(Linearization):
    """w-MGDA (Appendix E): MGDA on client updates reweighted by a fixed random plan (the largest
    weight scaled to 1)."""

    def components(self):
        return RandomAssignment(self.concentration), RelativeWeights(), MinNorm()


@dataclass
class IFCA(FederatedMethod):
    """IFCA (Ghosh et al. 2020): each client trains its lowest-loss model; each model averages
    its clients' updates (sample-size weighted)."""

    by_samples: ClassVar[bool] = True

    def components(self):
        from ..baselines import BestModelAssignment

        return BestModelAssignment(), Support(), WeightedSum()


@dataclass(frozen=True)
class _CoefficientPlan(Assignment):
    """A set scalarisation's coefficients ``c [m, n]`` (of the model-major losses) as the plan ``c^T``."""

    scalarization: object

    def __call__(self, losses, round, total, previous=None):
        return self.scalarization.coefficients(losses.T.double()).double().T


@dataclass
class SetScalarization(FederatedMethod):
    """Few-for-many set scalarisations on clients: TCH-Set, STCH-Set, sum-of-minimum.

    ``combiner`` is one of :class:`most.baselines.TCHSetCombiner`,
    :class:`~most.baselines.STCHSetCombiner` or :class:`~most.baselines.SumOfMinimumCombiner`:
    its ``coefficients(losses [m, n])`` give the weight ``c_ji`` of client i in the gradient of
    the set objective with respect to model j. Clients with ``c_ji > 0`` train model j; the
    model moves along ``sum_i c_ji Delta_ij / sum_i c_ji`` (the set gradient's direction for
    that model, normalised per model so that ``server_lr`` means the same as for FedAvg).
    Sum-of-minimum's Lloyd algorithm on clients is :class:`IFCA`.
    """

    combiner: object = None
    logs_plan: ClassVar[bool] = False

    def __post_init__(self):
        super().__post_init__()
        from ..baselines import SetCombiner

        check_component(self.combiner, name="combiner", example="most.baselines.STCHSetCombiner()")
        if not isinstance(self.combiner, SetCombiner):
            raise ValueError(f"`combiner` must be a most.baselines.SetCombiner (coefficients from the losses [m, n]), "
                             f"e.g. most.baselines.STCHSetCombiner(); got {self.combiner!r}.")

    def components(self):
        return _CoefficientPlan(self.combiner), GammaWeights(), WeightedSum()


@dataclass
class MosT(FederatedMethod):
    """MosT on clients: Gamma from the clients' losses, per-model combination of the
    Gamma-weighted client updates; the same components as :class:`most.MosT`.

    Args:
        n_models: m.
        server_lr: eta_s, the step of the update rule on the combined direction.
        diversity, transport, marginals, reg, warm_start: the transport
            (:class:`most.methods.TransportAssignment`). The default marginals are
            :class:`most.methods.ShareBounds` ``(0.5, 2)``: each model serves between half and
            twice the fair load n/m, so groups of clients of unequal size are served whole or
            nearly; :class:`most.methods.Uniform` is the paper's balance (every model n/m).
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
            before it is copied to the m models; :class:`GroupedWarmUp` splits the models by
            groups of the last warm-up round's updates; ``None`` starts from m random
            initialisations, as the paper does.
        resplit: :class:`Resplit` (default): now and then a model that duplicates another's
            clients is moved to split a model whose clients' updates pull apart; ``None``
            never moves a model.

    Why the defaults depart from the paper (measured in the documentation's Benchmarks →
    Federated): within one model's group the clients still disagree, and the min-norm
    direction shrinks to the little they agree on, so the mean of the updates trains better;
    a shared warm-up gives the models a common start; and the paper's balance makes every
    model train on n/m clients, so a group of clients smaller than that is trained together
    with clients of another group and a larger one is split, which the share bounds and the
    re-split avoid. Because the tie after the warm-up is decided by the last bits of the losses,
    the same seed can split the clients differently on another engine or machine; use
    ``warmup=None`` when runs must match across engines.
    """

    diversity: float = 0.0
    transport: Literal["exact", "sinkhorn", "newton", "ipot"] = "exact"
    marginals: Marginals = field(default_factory=ShareBounds)
    weighting: Weighting = field(default_factory=MajorityShare)
    combiner: Combiner = field(default_factory=WeightedSum)
    warmup: WarmUp | None = field(default_factory=WarmUp)
    reg: float | None = None
    warm_start: bool = False
    assignment: Assignment | None = None
    resplit: Resplit | None = field(default_factory=Resplit)

    def __post_init__(self):
        super().__post_init__()
        from ..solver import transport_assignment

        check_component(self.marginals, name="marginals", example="most.methods.Uniform()", base=Marginals)
        check_component(self.weighting, name="weighting", example="most.methods.MajorityShare()", base=Weighting)
        self.warm_start = check_bool(self.warm_start, name="warm_start")
        check_component(self.combiner, name="combiner", example="most.MinNorm()", base=Combiner)
        if self.combiner.centralised_only:
            raise ValueError(f"`combiner={type(self.combiner).__name__}(...)` reads the losses or parameters at the "
                             "models, which the federated runtime does not have (it combines the clients' updates); "
                             "use most.WeightedSum() or most.MinNorm(). For a set objective over clients use "
                             "most.federated.methods.SetScalarization.")
        if self.warmup is not None:
            check_component(self.warmup, name="warmup", example="most.federated.methods.WarmUp(rounds=5)", base=WarmUp)
        if self.resplit is not None:
            check_component(self.resplit, name="resplit", example="most.federated.methods.Resplit()", base=Resplit)
        self._assignment = transport_assignment(self)
        self._round_losses: Tensor | None = None
        self._total = 0

    @property
    def warmup_rounds(self) -> int:
        """The rounds of the warm-up (0 without one)."""
        return 0 if self.warmup is None else self.warmup.rounds

    @property
    def min_clients(self) -> int:
        return self.n_models

    def components(self):
        return self._assignment, self.weighting, self.combiner

    def check(self, n_clients):
        if n_clients < self.n_models:
            raise ValueError(
                f"MosT needs at least as many clients as models: {n_clients} clients < {self.n_models} models. "
                "Use fewer models (n_models) or more clients."
            )
        self._assignment.check_models(self.n_models)  # e.g. a capped transport's shares against m

    def initial_params(self, model, m, generator):
        if self.warmup_rounds:
            return model.init(1, generator).repeat(m, 1)  # one shared start, split after the warm-up
        return model.init(m, generator)

    def reset(self, n, m, generator, model=None):
        super().reset(n, m, generator, model)
        if self.warmup is not None:
            self.warmup.reset(generator)

    def plan(self, losses, round, total, previous=None, *, clients=None):
        w0 = self.warmup_rounds
        # the round's losses of every client, for a re-split in this round's aggregation
        self._round_losses = losses if clients is None else None
        self._total = total
        if round < w0:
            w = torch.zeros(self.n_models, losses.shape[0], dtype=torch.float64, device=losses.device)
            w[0] = 1.0
            return None, w
        return super().plan(losses, round - w0, total - w0, previous, clients=clients)

    def pair_weights(self, weights, counts, round):
        return counts.double() if round < self.warmup_rounds else weights.double()

    def direction(self, deltas, pair_model, pair_weight, m, round):
        if round < self.warmup_rounds:
            return self.warmup.direction(deltas, pair_model, pair_weight, m, round)
        return super().direction(deltas, pair_model, pair_weight, m, round)

    def aggregate(self, params, deltas, pair_model, pair_weight, *, round, clients=None):
        w0 = self.warmup_rounds
        if self.resplit is not None and round >= w0 and self._round_losses is not None:
            move = self.resplit.propose(round - w0, self._total - w0, deltas, pair_model, self._round_losses)
            if move is not None:
                split, moved, pairs = move
                params = params.clone()
                params[moved] = params[split]
                # the moved model's own pairs trained the model it no longer is: they are left out
                keep = pair_model != moved
                pair_model = pair_model.clone()
                pair_model[to_device(pairs, pair_model.device)] = moved
                deltas, pair_model, pair_weight = deltas[to_device(keep, deltas.device)], pair_model[keep], \
                    pair_weight[to_device(keep, pair_weight.device)]
                clients = None if clients is None else clients[keep.to(clients.device)]
                if self._opt_state is not None:  # the moved model restarts its optimiser state
                    self._opt_state = self.optimizer.restart(self._opt_state, moved)
        return super().aggregate(params, deltas, pair_model, pair_weight, round=round, clients=clients)

    def moved(self, pair_model, m, round):
        if round < self.warmup_rounds:  # every model takes the shared (or its group's) step
            return torch.ones(m, dtype=torch.bool, device=pair_model.device)
        return super().moved(pair_model, m, round)


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


def weighted_mean(params: Tensor, deltas: Tensor, pair_model: Tensor, weight: Tensor, server_lr: float) -> Tensor:
    """Deprecated: ``params - server_lr * combine_updates(WeightedSum(), ...)``."""
    warnings.warn("most.federated.methods.weighted_mean is deprecated; use combine_updates(most.WeightedSum(), ...) "
                  "and the update rule.", DeprecationWarning, stacklevel=2)
    return params - server_lr * combine_updates(WeightedSum(), params.shape[0], deltas, pair_model, weight)


def min_norm_combination(params: Tensor, deltas: Tensor, pair_model: Tensor, weight: Tensor, server_lr: float,
                         tol: float = 1e-6, coordinates: slice | None = None) -> Tensor:
    """Deprecated: ``params - server_lr * combine_updates(MinNorm(...), ...)`` (which also
    leaves out zero updates, so that they cannot stop a model)."""
    warnings.warn("most.federated.methods.min_norm_combination is deprecated; use combine_updates(most.MinNorm(), "
                  "...) and the update rule.", DeprecationWarning, stacklevel=2)
    coords = None if coordinates is None else (coordinates.start or 0, coordinates.stop)
    combiner = MinNorm(tol=tol, coordinates=coords)
    return params - server_lr * combine_updates(combiner, params.shape[0], deltas, pair_model, weight)


# the methods of their own modules, reachable here with the others (``most.federated.methods.CFL``)
from .clustered import CFL, Oracle  # noqa: E402
from .mixture import FedEM  # noqa: E402
from .personal import FineTuning, LocalOnly  # noqa: E402
