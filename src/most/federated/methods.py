r"""Server-side methods for :func:`most.federated.run_federated`: MosT and the FL baselines.

A method decides, each round, which client trains which model (``plan``) and how the
returned pseudo-gradients ``Delta_ij = theta_j - theta_ij`` update the models (``aggregate``).
Every method trains m models from m random initialisations with the same local work.

* :class:`MosT` -- Gamma by optimal transport on the clients' losses (Eq. 6), then per model
  the min-norm combination of its clients' Gamma-weighted updates (Eqs. 7-9), or their
  weighted mean (``combine="mean"``, the paper's MosT(L) ablation).
* :class:`FedAvg`, :class:`FedProx` -- m independent runs (McMahan et al. 2017; Li et al. 2020).
* :class:`MGDA` -- m independent runs of federated MGDA (min-norm of all client updates).
* :class:`WeightedMGDA` -- MGDA on client updates reweighted by a fixed random plan.
* :class:`Linearization` -- model j averages client updates with fixed random simplex weights.
* :class:`FedMGDAPlus` -- Hu et al. 2022: normalised client updates, min-norm with the box
  ``|lambda_i - 1/n| <= eps``.
* :class:`IFCA` -- Ghosh et al. 2020: each client joins its lowest-loss model, each model
  averages its clients' updates.

The aggregation rules are pure functions (:func:`weighted_mean`, :func:`min_norm_combination`,
:func:`min_norm_box`) shared with the Flower strategy.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from .. import transport
from .._random import derive_seed, dirichlet
from .._validation import check_bool, check_component, check_non_negative, check_positive, check_positive_int
from ..methods import MajorityShare, Marginals, Shares, TransportAssignment, Uniform, Weighting
from ..mgda import min_norm

__all__ = ["MosT", "FedAvg", "FedProx", "MGDA", "WeightedMGDA", "Linearization", "FedMGDAPlus", "IFCA", "SetScalarization",
           "weighted_mean", "min_norm_combination", "min_norm_box", "balanced_update_groups"]


# ----------------------------------------------------------------------------- aggregation rules
def weighted_mean(params: Tensor, deltas: Tensor, pair_model: Tensor, weight: Tensor, server_lr: float) -> Tensor:
    """``theta_j <- theta_j - eta_s * sum_i w_ij Delta_ij / sum_i w_ij`` (models with no pair unchanged)."""
    m = params.shape[0]
    total = torch.zeros(m, dtype=weight.dtype, device=weight.device).index_add_(0, pair_model, weight)
    step = torch.zeros_like(params).index_add_(0, pair_model, weight[:, None].to(deltas) * deltas)
    has = (total > 0)[:, None]
    step = torch.where(has, step / torch.where(has, total[:, None], 1.0).to(step), torch.zeros_like(step))
    return params - server_lr * step


def _per_model_gram(rows: Tensor, pair_model: Tensor, m: int,
                    coordinates: slice | None = None) -> tuple[Tensor, Tensor, list[Tensor]]:
    """Each model's float64 Gramian of its rows (padded to ``[m, k, k]``; on ``coordinates`` of
    the rows only, when given), the mask of real entries and each model's full rows (one
    gather, reused for the combination)."""
    groups = [rows[torch.nonzero(pair_model == j).squeeze(1)] for j in range(m)]
    k = max(1, max(len(g) for g in groups))
    G = torch.zeros(m, k, k, dtype=torch.float64, device=rows.device)
    mask = torch.zeros(m, k, dtype=torch.bool, device=rows.device)
    for j, r in enumerate(groups):
        if len(r):
            r64 = (r if coordinates is None else r[:, coordinates]).double()
            G[j, : len(r), : len(r)] = r64 @ r64.T
            mask[j, : len(r)] = True
    return G, mask, groups


def min_norm_combination(params: Tensor, deltas: Tensor, pair_model: Tensor, weight: Tensor,
                         server_lr: float, tol: float = 1e-6, coordinates: slice | None = None) -> Tensor:
    """MGDA on client updates: ``d_j`` = min-norm element of the hull of ``{w_ij Delta_ij}``
    (Frank-Wolfe to convergence, all models in one batched solve), ``theta_j <- theta_j - eta_s d_j``.
    Only the ``[P, d]`` updates are kept, never a dense ``[m, n, d]`` array.

    ``coordinates``: solve for the weights on these coordinates of the updates only (the paper's
    "MGDA on a subset of model parameters like the final layer's bias", Section 6), then combine
    the full updates with them. The direction is then a common descent direction for those
    coordinates, not necessarily for all."""
    m = params.shape[0]
    rows = weight[:, None].to(deltas) * deltas
    G, mask, groups = _per_model_gram(rows, pair_model, m, coordinates)
    lam = min_norm(G, mask=mask, tol=tol).weights  # [m, k] (min_norm symmetrises G itself)
    step = torch.zeros_like(params)
    for j, r in enumerate(groups):
        if len(r):
            step[j] = (lam[j, : len(r)].to(r)[:, None] * r).sum(0)
    return params - server_lr * step


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
        plan = transport.solve(torch.cdist(u, c).square().cpu(), a, b, method="exact").plan
        new = plan.argmax(1).to(deltas.device)
        if labels is not None and torch.equal(new, labels):
            break
        labels = new
        for j in range(m):
            if (labels == j).any():  # an empty group keeps its centre
                mean = u[labels == j].sum(0)
                c[j] = mean / mean.norm().clamp_min(1e-300)
    return labels


# ----------------------------------------------------------------------------- methods
@dataclass
class _FederatedMethod:
    n_models: int
    server_lr: float = 1.0

    prox_mu: float = field(default=0.0, init=False)

    def __post_init__(self):  # stored as the plain numbers they were checked as
        object.__setattr__(self, "n_models", check_positive_int(self.n_models, name="n_models"))
        object.__setattr__(self, "server_lr", check_positive(self.server_lr, name="server_lr"))

    def check(self, n_clients: int) -> None:
        pass

    def initial_params(self, model, m: int, generator: torch.Generator) -> Tensor:
        return model.init(m, generator)

    def reset(self, n: int, m: int, generator: torch.Generator) -> None:
        self._generator = generator

    def plan(self, losses: Tensor, round: int, total: int, previous, *, counts: Tensor,
             clients: Tensor | None = None) -> tuple[Tensor | None, Tensor]:
        """``(plan [n, m] or None, W [m, n])`` for the participating clients."""
        raise NotImplementedError

    def aggregate(self, params, deltas, pair_model, pair_client, pair_weight, *, counts, round) -> Tensor:
        raise NotImplementedError


@dataclass
class FedAvg(_FederatedMethod):
    """m independent FedAvg runs: every client trains every model; sample-size-weighted mean."""

    def plan(self, losses, round, total, previous, *, counts, clients=None):
        return None, torch.ones(self.n_models, losses.shape[0], device=losses.device)

    def aggregate(self, params, deltas, pair_model, pair_client, pair_weight, *, counts, round):
        return weighted_mean(params, deltas, pair_model, counts.double(), self.server_lr)


@dataclass
class FedProx(FedAvg):
    """FedAvg with the local proximal term ``mu / 2 ||w - w_t||^2`` (Li et al. 2020)."""

    mu: float = 0.01

    def __post_init__(self):
        super().__post_init__()
        check_non_negative(self.mu, name="mu")
        self.prox_mu = self.mu


@dataclass
class MGDA(FedAvg):
    """m independent runs of federated MGDA: min-norm of all client updates."""

    def aggregate(self, params, deltas, pair_model, pair_client, pair_weight, *, counts, round):
        return min_norm_combination(params, deltas, pair_model, torch.ones_like(pair_weight, dtype=torch.float64),
                                    self.server_lr)


@dataclass
class FedMGDAPlus(FedAvg):
    """FedMGDA+ (Hu et al. 2022): normalised client updates, min-norm within ``|lambda_i - 1/n| <= eps``."""

    eps: float = 0.1

    def __post_init__(self):
        super().__post_init__()
        check_non_negative(self.eps, name="eps")

    def aggregate(self, params, deltas, pair_model, pair_client, pair_weight, *, counts, round):
        new = params.clone()
        for j in range(params.shape[0]):
            g = torch.nonzero(pair_model == j).squeeze(1)
            if not len(g):
                continue
            u = deltas[g] / deltas[g].norm(dim=1, keepdim=True).clamp_min(1e-12)
            lam = min_norm_box(u.double() @ u.double().T, self.eps)
            new[j] = params[j] - self.server_lr * (lam.to(u)[:, None] * u).sum(0)
        return new


@dataclass
class _FixedRandomPlan(_FederatedMethod):
    concentration: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        check_positive(self.concentration, name="concentration")

    def reset(self, n, m, generator):
        super().reset(n, m, generator)
        # model j's weights over the n clients: a Dirichlet(c) draw, fixed for the run
        self._weights = dirichlet(generator, self.concentration, n, m).T.double()  # [n, m] -> columns sum to 1

    def plan(self, losses, round, total, previous, *, counts, clients=None):
        w = self._weights.to(losses.device)
        w = w if clients is None else w[clients]
        return w, w.T.clone()


@dataclass
class Linearization(_FixedRandomPlan):
    """Model j minimises a fixed random convex combination of the client losses."""

    def aggregate(self, params, deltas, pair_model, pair_client, pair_weight, *, counts, round):
        return weighted_mean(params, deltas, pair_model, pair_weight.double(), self.server_lr)


@dataclass
class WeightedMGDA(_FixedRandomPlan):
    """w-MGDA (Appendix E): MGDA on client updates reweighted by a fixed random plan."""

    def aggregate(self, params, deltas, pair_model, pair_client, pair_weight, *, counts, round):
        w = pair_weight.double()
        return min_norm_combination(params, deltas, pair_model, w / w.max().clamp_min(1e-300), self.server_lr)


@dataclass
class IFCA(_FederatedMethod):
    """IFCA (Ghosh et al. 2020): each client trains its lowest-loss model; each model averages
    its clients' updates (sample-size weighted)."""

    def plan(self, losses, round, total, previous, *, counts, clients=None):
        hard = torch.nn.functional.one_hot(losses.argmin(1), self.n_models).double()
        return hard, hard.T.clone()

    def aggregate(self, params, deltas, pair_model, pair_client, pair_weight, *, counts, round):
        return weighted_mean(params, deltas, pair_model, counts.double(), self.server_lr)


@dataclass
class MosT(_FederatedMethod):
    """MosT on clients: Gamma from the clients' losses, per-model aggregation of the
    Gamma-weighted client updates.

    Args:
        n_models: m.
        server_lr: eta_s, the server step on the aggregated update.
        diversity, transport, marginals, reg, warm_start: the transport
            (:class:`most.methods.TransportAssignment`).
        weighting: Gamma -> per-pair weights (default :class:`most.methods.MajorityShare`:
            each client trains only the model holding its largest share;
            :class:`most.methods.GammaWeights` is the paper as written).
        combine: ``"mean"`` (default: the share-weighted mean of each model's client updates,
            as in the paper's MosT(L)) or ``"min_norm"`` (Eqs. 7-9: MGDA within each model's
            clients, the paper as written).
        warmup_rounds: FedAvg rounds of one shared model before it is copied to the m models
            (default 5; 0 starts from m random initialisations, as the paper does). 30 % of the
            rounds was better than IFCA on Fashion-MNIST (paper's pick, two sets of 5 seeds),
            level elsewhere, and short of the rule for a new default (``federated.md``).
        split: how the warm-up ends. ``"losses"`` (default): the last warm-up round gives every
            model the same FedAvg step, and the first plan, on m equal models, is a tie that the
            transport solver breaks. ``"updates"``: the last warm-up round's client updates are
            grouped by :func:`balanced_update_groups` (balanced spherical k-means, seeded by the
            run's generator) and model j takes its group's mean step, so the m models start
            apart, each from the clients that pull the same way (the clustering of FL+HC,
            Briggs et al. 2020, balanced by transport).
        shares: k, how many models each client trains after the warm-up. ``1`` (default): the
            exact plan, each client on its largest share. ``k > 1``: the plan caps each
            client's share of a model at ``1/k`` (:func:`most.transport.solve_capped`), so
            every client trains its k best models under the balance, and each model
            combines the updates of about ``n k / m`` clients, weighted by their shares: more
            data per model, less specialisation (``k = m``: every client trains every model,
            as in FedAvg). Needs the default transport, marginals and weighting (exact, uniform,
            no diversity term). Measured with ``shares=2`` (runs fixed in advance,
            ``federated.md``): level with IFCA in every setting, its validation accuracy at
            least the default's in 2 of 5, so not the default.
        gram_on: with ``combine="min_norm"``, a parameter of the model (a name of
            :attr:`FlatModel.parameter_names`, or ``"last"``, e.g. the final layer's bias) on
            which the min-norm weights are solved, the paper's "MGDA on a subset of model
            parameters" (Section 6); the weights then combine the full updates. ``None``
            (default): all parameters, Eqs. 7-9 exactly. Resolved against the model in
            :meth:`initial_params`, before any training.

    Why the defaults depart from the paper (``benchmarks/results/federated.md``): on Syn(0,0),
    3 seeds, validation accuracy, 100 rounds, the min-norm combination reached 81.1-82.1 for
    every server step in {1, 2, 3, 5} with or without warm-up, against 83.0-85.3 for the
    mean (best: server step 5 and a 5-round warm-up, test 84.3 +- 1.4, the paper's 84.25).
    Within one model's group the clients still disagree, and the min-norm direction then
    shrinks to the little they agree on. The warm-up gives all models a trained common start;
    at its end the models are equal, so the first split of the clients is a tie broken by the
    transport solver, and the specialisation of the following rounds decides the groups (on
    Syn(0,0) they then stayed fixed; on Syn(1,1) owners changed in 29 % of the rounds).
    Because that tie is decided by the last bits of the losses, the same seed can split the
    clients differently on another engine or machine (e.g. Flower's clients, which train one
    model at a time, against this runtime, which trains every pair at once); use
    ``warmup_rounds=0`` when runs must match across engines. ``split="updates"`` replaces the tie
    by a seeded grouping of the updates; with its runs fixed in advance it was level with the
    default and with IFCA in every setting, so it is not the default.
    """

    diversity: float = 0.0
    transport: Literal["exact", "sinkhorn", "newton", "ipot"] = "exact"
    marginals: Marginals = field(default_factory=Uniform)
    weighting: Weighting = field(default_factory=MajorityShare)
    combine: Literal["min_norm", "mean"] = "mean"
    warmup_rounds: int = 5
    split: Literal["losses", "updates"] = "losses"
    reg: float | None = None
    warm_start: bool = False
    gram_on: str | None = None
    shares: int = 1

    def __post_init__(self):
        super().__post_init__()
        check_component(self.marginals, name="marginals", example="most.methods.Uniform()", base=Marginals)
        check_component(self.weighting, name="weighting", example="most.methods.MajorityShare()")
        if not callable(self.weighting):
            raise TypeError("`weighting` must map the plan Gamma to per-pair weights (e.g. most.methods.MajorityShare() "
                            f"or most.methods.GammaWeights()); got {self.weighting!r}.")
        self.warm_start = check_bool(self.warm_start, name="warm_start")
        check_positive_int(self.shares, name="shares")
        if self.shares > self.n_models:
            raise ValueError(f"`shares`={self.shares} asks each client to train more models than there are "
                             f"({self.n_models}); use 1 <= shares <= n_models.")
        if self.shares > 1 and (self.transport != "exact" or self.diversity or type(self.marginals) is not Uniform
                                or not isinstance(self.weighting, MajorityShare)):
            raise ValueError("shares > 1 solves the exact transport with capped shares and weights each pair by "
                             "its share: it needs transport='exact', diversity=0, uniform marginals and the default "
                             f"weighting; got transport={self.transport!r}, diversity={self.diversity!r}, "
                             f"marginals={self.marginals!r}, weighting={self.weighting!r}.")
        if self.combine not in ("min_norm", "mean"):
            raise ValueError(f"`combine` must be 'min_norm' or 'mean'; got {self.combine!r}.")
        if self.gram_on is not None and (self.combine != "min_norm" or not isinstance(self.gram_on, str)):
            raise ValueError("`gram_on` names the model parameter the min-norm weights are solved on: a string, "
                             f"with combine='min_norm'; got gram_on={self.gram_on!r} with combine={self.combine!r}.")
        self._gram_coordinates: slice | None = None
        self._split_seed: int | None = None
        check_positive_int(self.warmup_rounds, name="warmup_rounds", minimum=0)
        if self.split not in ("losses", "updates"):
            raise ValueError(f"`split` must be 'losses' or 'updates'; got {self.split!r}.")
        if self.split == "updates" and not self.warmup_rounds:
            raise ValueError("split='updates' groups the clients' updates of the last warm-up round: "
                             "it needs warmup_rounds >= 1.")
        self._assignment = TransportAssignment(method=self.transport, diversity=self.diversity,
                                               marginals=self.marginals, reg=self.reg, warm_start=self.warm_start)

    def check(self, n_clients):
        if n_clients < self.n_models:
            raise ValueError(
                f"MosT needs at least as many clients as models: {n_clients} clients < {self.n_models} models. "
                "Use fewer models (n_models) or more clients."
            )

    def initial_params(self, model, m, generator):
        if self.gram_on is not None:
            self._gram_coordinates = model.coordinates(self.gram_on)
        if self.warmup_rounds:
            return model.init(1, generator).repeat(m, 1)  # one shared start, split after the warm-up
        return model.init(m, generator)

    def reset(self, n, m, generator):
        super().reset(n, m, generator)
        self._assignment.reset(n, m, generator)
        # drawn now, kept with the method, so a run resumed from a checkpoint splits the same way
        self._split_seed = derive_seed(generator) if self.split == "updates" else None

    def plan(self, losses, round, total, previous, *, counts, clients=None):
        n = losses.shape[0]
        if round < self.warmup_rounds:
            w = torch.zeros(self.n_models, n, dtype=torch.float64, device=losses.device)
            w[0] = 1.0
            return None, w
        r, t = round - self.warmup_rounds, total - self.warmup_rounds
        if self.shares > 1:
            return self._capped_plan(losses.double(), r, t)
        gamma = self._assignment(losses.double(), r, t, previous=previous)
        return gamma, self.weighting(gamma).double()

    def _capped_plan(self, losses, round, total):
        """``shares > 1``: the transport with each share capped at ``1/shares``; W = the shares."""
        a, b = self.marginals(losses, round, total)
        gamma = transport.solve_capped(losses, a, b, max_share=1.0 / self.shares).plan
        return gamma, Shares()(gamma)

    def aggregate(self, params, deltas, pair_model, pair_client, pair_weight, *, counts, round):
        if round < self.warmup_rounds:
            if self.split == "updates" and round == self.warmup_rounds - 1:
                return self._split_by_updates(params, deltas, pair_model, counts)
            shared = weighted_mean(params[:1], deltas, pair_model, counts.double(), self.server_lr)
            return shared.repeat(params.shape[0], 1)
        if self.combine == "mean":
            return weighted_mean(params, deltas, pair_model, pair_weight.double(), self.server_lr)
        w = pair_weight.double()
        if self.gram_on is not None and self._gram_coordinates is None:
            raise RuntimeError("MosT(gram_on=...) resolves the parameter against the model in initial_params(model, "
                               "m, generator), which run_federated and the Flower strategy call first.")
        return min_norm_combination(params, deltas, pair_model, w, self.server_lr, coordinates=self._gram_coordinates)


    def _split_by_updates(self, params, deltas, pair_model, counts):
        """The last warm-up round: model j takes the mean step of its group of clients (groups
        of updates, :func:`balanced_update_groups`); a model with no group takes the shared step."""
        m = params.shape[0]
        if self._split_seed is None:
            raise RuntimeError("MosT(split='updates') draws its split seed in reset(n, m, generator), which "
                               "run_federated and the Flower strategy call before the first round.")
        group = balanced_update_groups(deltas, m, torch.Generator().manual_seed(self._split_seed))
        shared = weighted_mean(params[:1], deltas, pair_model, counts.double(), self.server_lr)
        split = weighted_mean(params, deltas, group, counts.double(), self.server_lr)
        has = torch.zeros(m, dtype=torch.bool, device=params.device)
        has[group] = True
        return torch.where(has[:, None], split, shared)


@dataclass
class SetScalarization(_FederatedMethod):
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

    def __post_init__(self):
        super().__post_init__()
        check_component(self.combiner, name="combiner", example="most.baselines.STCHSetCombiner()")
        if not hasattr(self.combiner, "coefficients"):
            raise ValueError("`combiner` must have coefficients(losses [m, n]), e.g. most.baselines.STCHSetCombiner().")

    def plan(self, losses, round, total, previous, *, counts, clients=None):
        return None, self.combiner.coefficients(losses.T.double()).double()

    def aggregate(self, params, deltas, pair_model, pair_client, pair_weight, *, counts, round):
        return weighted_mean(params, deltas, pair_model, pair_weight.double(), self.server_lr)
