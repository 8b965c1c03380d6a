r"""The pieces a multi-solution method is made of.

Every method in this library -- MosT, its ablations and the plain baselines -- runs the
same round loop (:func:`most.solver.run`) and differs only in four small objects:

1. an **assignment** ``loss matrix L [n, m] -> plan Gamma [n, m]`` (which objective is
   served by which model, paper Eq. 6), usually an optimal-transport problem whose
   **marginals** (alpha, beta) may change with the round (the curriculum, Section 3.3);
2. a **weighting** ``Gamma -> W [m, n]``: how much objective i counts in model j's step;
3. a **combiner** ``(Jacobian [m, n, d], W) -> direction [m, d]``: the min-norm (MGDA)
   direction of the weighted gradients (Eqs. 7-9), or their weighted mean;
4. an optional **extension** that turns n objectives into n' > n (MosT-E, Section 3.2).

Why the default weighting is :class:`MajorityShare` and not the paper's literal
:class:`GammaWeights`
-----------------------------------------------------------------------------------
Pareto stationarity is invariant to positive rescaling of the objectives: ``theta`` is
Pareto stationary for ``(c_1 L_1, ..., c_n L_n)`` with all ``c_i > 0`` exactly when it is
for ``(L_1, ..., L_n)``. So in Eq. 1 the values Gamma_ij can only decide *which*
objectives model j must not worsen (its support) and bias *where along* the set of
stationary points MGDA stops. Two consequences hurt the literal algorithm:

* **Split objectives stop models.** An exact plan has up to n + m - 1 non-zeros, so some
  objectives are shared by two models, and iterative solvers (Sinkhorn, IPOT) give every
  model a tiny share of every objective. With Gamma-scaled gradients, an objective that
  model j holds only a sliver of still enters j's min-norm problem; when its gradient
  opposes the others, the convex hull contains the origin and model j stops for good --
  at a point that *is* Pareto stationary for its (too large) support. The short vector
  ``Gamma_ij * grad`` even makes this worse: min-norm solutions are pulled towards short
  rows. The documentation's Benchmarks → The split-objective trap measures it.
* **The step shrinks with n.** Gamma_ij = O(1/n), so a Gamma-scaled direction is O(1/n).

:class:`MajorityShare` keeps what Gamma says and drops what it cannot mean: the share
``s_ij = Gamma_ij / alpha_i`` is the fraction of objective i's mass that model j holds
(independent of n and of non-uniform alpha). Objective i enters the min-norm problem of
the model holding its largest share (one owner per objective, ties to the lowest index),
with weight ``s_ij`` in ``[1/m, 1]``. A hard assignment gives unit weights, so the
direction has the scale of one objective's gradient whatever n is. This is also the
quantity the diversity regulariser R(Gamma) = -sum_i max_j Gamma_ij rewards: R pushes each
row's mass onto its argmax, which is exactly the owner. A model that owns no objective
(possible only in tiny or degenerate problems) falls back to all objectives it holds
mass of, weighted by share.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, Literal, NamedTuple

import torch
from torch import Tensor

from . import transport
from ._random import dirichlet
from ._validation import check_non_negative, check_positive, check_positive_int
from .mgda import FLOAT32_TOL, ZERO_GRADIENT_RTOL, combine_min_norm  # noqa: F401 (re-exported)
from .problem import Problem

__all__ = [
    "Assignment",
    "TransportAssignment",
    "CappedTransportAssignment",
    "RandomAssignment",
    "EqualAssignment",
    "Marginals",
    "Uniform",
    "LoadBounds",
    "ShareBounds",
    "ObjectivesSelectModels",
    "ModelsSelectObjectives",
    "Curriculum",
    "Weighting",
    "MajorityShare",
    "Shares",
    "GammaWeights",
    "Support",
    "RelativeWeights",
    "Combiner",
    "MinNorm",
    "WeightedSum",
    "SmoothMax",
    "DirichletExtension",
    "TchebycheffExtension",
]


def _uniform(k: int, like: Tensor) -> Tensor:
    return torch.full((k,), 1.0 / k, dtype=like.dtype, device=like.device)


# ============================================================================ marginals
class Marginals(ABC):
    """A schedule ``(loss matrix, round, total rounds) -> (alpha, beta)``.

    ``None`` for alpha (or beta) drops that constraint (a semi-relaxed transport).
    """

    @abstractmethod
    def __call__(self, losses: Tensor, round: int, total: int) -> tuple[Tensor | None, Tensor | None]: ...

    def check_sizes(self, n: int, m: int) -> None:
        """Refuses ``n`` objectives over ``m`` models when no plan can meet this schedule (called
        before any work; no refusal by default)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclass(frozen=True)
class Uniform(Marginals):
    """alpha = 1/n, beta = 1/m: every objective served, every model used (paper default)."""

    def __call__(self, losses, round, total):
        n, m = losses.shape
        return _uniform(n, losses), _uniform(m, losses)


class Bounds(NamedTuple):
    """A model marginal given as bounds: model j takes between ``lower[j]`` and ``upper[j]`` of
    the mass (``upper=None``: no upper bound)."""

    lower: Tensor
    upper: Tensor | None = None


@dataclass(frozen=True)
class LoadBounds(Marginals):
    """alpha = 1/n; each model serves between ``min_objectives`` and ``max_objectives``
    objectives' worth of mass instead of exactly n/m (:func:`most.transport.solve_bounded`).

    So groups of any size are each served by one model, and no model is left with nothing to
    train on. ``min_objectives = max_objectives = n / m`` is the paper's balanced transport
    (:class:`Uniform`); ``min_objectives = 0`` with no upper bound sends each objective to its
    best model (:class:`ObjectivesSelectModels`). The library default, with
    ``min_objectives = 1`` (see ``docs/methods/departures.md``).

    >>> import torch
    >>> L = torch.tensor([[0.0, 5.0], [0.1, 5.0], [0.2, 5.0], [9.0, 0.0]])
    >>> (TransportAssignment(marginals=LoadBounds())(L, 0, 1) * 4).round().int().tolist()
    [[1, 0], [1, 0], [1, 0], [0, 1]]
    """

    min_objectives: float = 1.0
    max_objectives: float | None = None

    def __post_init__(self):
        check_non_negative(self.min_objectives, name="min_objectives")
        if self.max_objectives is not None:
            check_positive(self.max_objectives, name="max_objectives")
            if self.max_objectives < self.min_objectives:
                raise ValueError(f"`max_objectives` ({self.max_objectives}) must be at least `min_objectives` "
                                 f"({self.min_objectives}).")

    def check_sizes(self, n: int, m: int) -> None:
        """Refuses bounds that no plan of ``n`` objectives over ``m`` models can meet."""
        if self.min_objectives * m > n * (1 + 1e-9):
            raise ValueError(
                f"Each of the {m} models must serve at least min_objectives={self.min_objectives:g} objectives, "
                f"but there are only {n}: use fewer models, a smaller `min_objectives` (at most n/m = {n / m:.4g}), "
                "or add objectives with an extension (MosT-E).")
        if self.max_objectives is not None and self.max_objectives * m < n * (1 - 1e-9):
            raise ValueError(
                f"{m} models serving at most max_objectives={self.max_objectives:g} objectives each cannot serve all "
                f"{n}: raise `max_objectives` to at least n/m = {n / m:.4g}, or use more models.")

    def __call__(self, losses, round, total):
        n, m = losses.shape
        self.check_sizes(n, m)
        lower = torch.full((m,), self.min_objectives / n, dtype=losses.dtype, device=losses.device)
        upper = None if self.max_objectives is None else torch.full_like(lower, min(self.max_objectives / n, 1.0))
        return _uniform(n, losses), Bounds(lower, upper)


@dataclass(frozen=True)
class ShareBounds(Marginals):
    """alpha = 1/n; each model serves between ``low`` and ``high`` times its fair load ``n/m``
    (:class:`LoadBounds` in shares of the balance instead of objective counts).

    Between the balance (``low = high = 1``: :class:`Uniform`) and free loads: a model may take
    a group smaller or larger than ``n/m``, within a factor, so groups of unequal size are
    served whole or nearly, while with no groups in the data the loads stay close to even (a
    model does not collapse onto a few objectives, nor gather most of them). ``high=None``: no
    upper bound. The federated MosT's default, with ``low = 0.5`` and ``high = 2``.

    >>> import torch
    >>> L = torch.tensor([[0.0, 5.0]] * 7 + [[5.0, 0.0]])  # groups of 7 and 1; the fair load is 4
    >>> (TransportAssignment(marginals=ShareBounds(0.5, 2.0))(L, 0, 1) * 8).sum(0).tolist()  # at least 2 each
    [6.0, 2.0]
    """

    low: float = 0.5
    high: float | None = 2.0

    def __post_init__(self):
        check_non_negative(self.low, name="low")
        if self.low > 1:
            raise ValueError(f"`low` must be at most 1 (a share of the fair load n/m that every model can meet); "
                             f"got {self.low}.")
        if self.high is not None:
            check_positive(self.high, name="high")
            if self.high < 1:
                raise ValueError(f"`high` must be at least 1 (a share of the fair load n/m that lets the models "
                                 f"serve all objectives), or None; got {self.high}.")

    def __call__(self, losses, round, total):
        n, m = losses.shape
        lower = torch.full((m,), self.low / m, dtype=losses.dtype, device=losses.device)
        upper = None if self.high is None else torch.full_like(lower, min(self.high / m, 1.0))
        return _uniform(n, losses), Bounds(lower, upper)


@dataclass(frozen=True)
class ObjectivesSelectModels(Marginals):
    """Drop beta: each objective goes to its best model (ablation MosT(O), Appendix E)."""

    def __call__(self, losses, round, total):
        return _uniform(losses.shape[0], losses), None


@dataclass(frozen=True)
class ModelsSelectObjectives(Marginals):
    """Drop alpha: each model takes its best objectives (ablation MosT(M), Appendix E)."""

    def __call__(self, losses, round, total):
        return None, _uniform(losses.shape[1], losses)


@dataclass(frozen=True)
class Curriculum(Marginals):
    r"""The solution-specialisation curriculum of Section 3.3 / Appendix E.

    A coefficient ``s`` moves linearly from ``start`` (round 0) to ``end`` (last round).
    With ``alpha_M`` the row marginal of the "models select objectives" plan (each model
    puts its mass on its lowest-loss objective) and ``beta_O`` the column marginal of the
    "objectives select models" plan (each objective goes to its lowest-loss model)::

        alpha = s * alpha_M + (1 - s) / n        beta = s / m + (1 - s) * beta_O

    At ``s = 1`` the transport *is* "models select objectives" (beta uniform, alpha free);
    at ``s = 0`` it *is* "objectives select models" (alpha uniform, beta free): the paper's
    move from the first to the second as training proceeds.
    """

    start: float = 1.0
    end: float = 0.0

    def __post_init__(self):
        for name in ("start", "end"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"Curriculum `{name}` must lie in [0, 1]; got {v!r}.")

    def coefficient(self, round: int, total: int) -> float:
        return self.start + (self.end - self.start) * (round / max(total - 1, 1))

    def __call__(self, losses, round, total):
        n, m = losses.shape
        s = self.coefficient(round, total)
        alpha_m = torch.bincount(losses.argmin(0), minlength=n).to(losses) / m
        beta_o = torch.bincount(losses.argmin(1), minlength=m).to(losses) / n
        a = s * alpha_m + (1.0 - s) / n
        b = s / m + (1.0 - s) * beta_o
        return a / a.sum(), b / b.sum()


# ============================================================================ assignments
class Assignment(ABC):
    """``(loss matrix [n, m], round, total rounds, previous plan) -> plan Gamma [n, m]``.

    ``previous`` is the plan of the last round (``None`` in the first); assignments that
    can warm-start from it may, the others ignore it.
    """

    #: Whether the plan never depends on the round's losses (a draw made once per run, known
    #: groups, clusters the method sets); :meth:`rows` then gives the plan of a round in which
    #: only some objectives take part (federated clients sampled by participation).
    fixed: ClassVar[bool] = False

    def reset(self, n: int, m: int, generator: torch.Generator) -> None:
        """Called once before the first round (draws any fixed randomness)."""

    def check_models(self, m: int) -> None:
        """Refuses a number of models this assignment cannot serve (before any work; no refusal
        by default)."""

    def rows(self, objectives: Tensor) -> Tensor:
        """For a :attr:`fixed` plan: its rows of ``objectives`` (indices among all n)."""
        raise NotImplementedError(f"{type(self).__name__} has no fixed plan (fixed is False).")

    @abstractmethod
    def __call__(self, losses: Tensor, round: int, total: int, previous: Tensor | None = None) -> Tensor: ...


@dataclass(frozen=True)
class TransportAssignment(Assignment):
    """Gamma = argmin over the transport polytope of <L, Gamma> + tau R(Gamma) (Eq. 6).

    Args:
        method: transport solver, ``"exact"``, ``"sinkhorn"``, ``"newton"`` or ``"ipot"``.
        diversity: tau, the weight of R(Gamma) = -sum_i max_j Gamma_ij (Eq. 3).
        marginals: the (alpha, beta) schedule.
        reg: entropic / proximal strength of the iterative solvers (see
            :func:`most.transport.solve`).
        warm_start: pass the previous round's plan as ``init``. Warm starts never
            freeze the plan (the solvers keep it feasible and able to change).
    """

    method: Literal["exact", "sinkhorn", "newton", "ipot"] = "exact"
    diversity: float = 0.0
    marginals: Marginals = Uniform()
    reg: float | None = None
    warm_start: bool = False

    def __post_init__(self):
        if self.method not in transport.METHODS:
            raise ValueError(
                f"transport method must be one of {', '.join(repr(x) for x in transport.METHODS)}; got {self.method!r}."
            )
        check_non_negative(self.diversity, name="diversity")
        if self.reg is not None:
            check_positive(self.reg, name="reg")
        if not isinstance(self.marginals, Marginals):
            raise TypeError(f"`marginals` must be a most.methods.Marginals (e.g. Uniform()); got {self.marginals!r}.")

    def __call__(self, losses, round, total, previous: Tensor | None = None):
        a, b = self.marginals(losses, round, total)
        if isinstance(b, Bounds):
            return transport.solve_bounded(losses, a, lower=b.lower, upper=b.upper, method=self.method,
                                           diversity=self.diversity, reg=self.reg).plan
        init = previous if (self.warm_start and a is not None and b is not None) else None
        if init is not None:
            # A previous plan is a valid warm start only for the same marginals.
            if not (torch.allclose(init.sum(1), a, atol=1e-6) and torch.allclose(init.sum(0), b, atol=1e-6)):
                init = None
        return transport.solve(
            losses, a, b, method=self.method, diversity=self.diversity, reg=self.reg, init=init
        ).plan


@dataclass(frozen=True)
class CappedTransportAssignment(Assignment):
    """The exact transport with every share capped: ``Gamma_ij <= alpha_i / shares``
    (:func:`most.transport.solve_capped`), so each objective is served by at least ``shares``
    models under the balance. With :class:`Shares` as the weighting each model combines about
    ``n * shares / m`` objectives, weighted by their shares (``shares = m``: every model
    serves every objective, as in FedAvg)."""

    shares: int = 2
    marginals: Marginals = Uniform()

    def __post_init__(self):
        object.__setattr__(self, "shares", check_positive_int(self.shares, name="shares"))
        if not isinstance(self.marginals, Marginals):
            raise TypeError(f"`marginals` must be a most.methods.Marginals (e.g. Uniform()); got {self.marginals!r}.")

    def check_models(self, m: int) -> None:
        """Refuses more shares than models (each objective would need more models than there are)."""
        if self.shares > m:
            raise ValueError(f"`shares`={self.shares} asks each objective (each client, in federated learning) to be "
                             f"served by more models than there are ({m}); use 1 <= shares <= n_models.")

    def __call__(self, losses, round, total, previous=None):
        self.check_models(losses.shape[1])
        a, b = self.marginals(losses, round, total)
        return transport.solve_capped(losses, a, b, max_share=1.0 / self.shares).plan


class RandomAssignment(Assignment):
    """A fixed random plan: column j is a Dirichlet(c) draw over objectives, scaled to 1/m.

    The plan is drawn once per run (in :meth:`reset`, from the run's seed). With
    :class:`MinNorm` this is w-MGDA (Appendix E); with :class:`WeightedSum` it is linear
    scalarisation with m random preference vectors.
    """

    def __init__(self, concentration: float = 1.0):
        self.concentration = check_positive(concentration, name="concentration")
        self._plan: Tensor | None = None

    def reset(self, n, m, generator):
        self._plan = dirichlet(generator, self.concentration, n, m).T / m  # column j: model j's draw

    def __call__(self, losses, round, total, previous=None):
        if self._plan is None or self._plan.shape != losses.shape:
            raise RuntimeError("RandomAssignment.reset(n, m, generator) must be called before the first round.")
        return self._plan.to(losses)

    fixed: ClassVar[bool] = True

    def rows(self, objectives: Tensor) -> Tensor:
        """The fixed plan's rows of ``objectives`` (indices among all n): the plan of a round in
        which only those objectives take part (federated clients sampled by participation)."""
        if self._plan is None:
            raise RuntimeError("RandomAssignment.reset(n, m, generator) must be called before the first round.")
        return self._plan[objectives.to(self._plan.device)]

    def __repr__(self):
        return f"RandomAssignment(concentration={self.concentration!r})"


@dataclass(frozen=True)
class EqualAssignment(Assignment):
    """Every model serves every objective equally (Gamma = 1/(nm)): plain MGDA, m times."""

    def __call__(self, losses, round, total, previous=None):
        n, m = losses.shape
        return torch.full((n, m), 1.0 / (n * m), dtype=losses.dtype, device=losses.device)


# ============================================================================ weightings
class Weighting(ABC):
    """``plan Gamma [n, m] -> W [m, n]``: weight of objective i in model j's step (0 = left out)."""

    @abstractmethod
    def __call__(self, plan: Tensor) -> Tensor: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclass(frozen=True)
class MajorityShare(Weighting):
    """Objective i counts for the model holding its largest share Gamma_ij / alpha_i.

    The library default; see the module docstring for the reason. Returns
    ``W[j, i] = s_ij`` if j owns i, else 0.
    """

    def __call__(self, plan):
        # Kept to a few tensor operations: this runs once per round on the server, where the
        # federated benchmark's rounds take a few milliseconds (performance.md).
        n, m = plan.shape
        mass = plan.sum(1)
        top, owner = plan.max(1)  # the largest share: each row is scaled by its own mass > 0
        own_share = (top / mass).nan_to_num_(0.0)  # a row without mass (0 / 0) gives nothing
        weights = plan.new_zeros(m, n).scatter_(0, owner[None], own_share[None])
        top_weight = weights.amax(1)
        if not bool(top_weight.min() > 0):  # models that own nothing fall back to everything they hold
            owned, held = top_weight > 0, mass > 0  # a held row's owner has a positive share of it
            weights[~owned] = torch.where(held[None, :], Shares()(plan)[~owned], 0.0)
        return weights


@dataclass(frozen=True)
class Shares(Weighting):
    """Objective i counts for every model j by its share Gamma_ij / alpha_i: ``W[j, i] = s_ij``.

    :class:`MajorityShare` keeps each objective's largest share only; with a plan whose rows
    each sit on one model (the exact transport's, mostly) the two agree. Federated
    ``MosT(shares=k)`` caps every share at 1/k and weights each (client, model) pair by this.
    A row without mass gives nothing."""

    def __call__(self, plan):
        mass = plan.sum(1, keepdim=True)
        return (plan / mass.clamp_min(torch.finfo(plan.dtype).tiny)).T.contiguous()


@dataclass(frozen=True)
class GammaWeights(Weighting):
    """The paper as written: W[j, i] = n * Gamma_ij (Eq. 7's Gamma-scaled objectives).

    The factor n only rescales every direction by the same constant (so the learning rate
    keeps its meaning as n changes); the direction itself is the paper's.
    """

    def __call__(self, plan):
        return (plan.shape[0] * plan).T.contiguous()


@dataclass(frozen=True)
class Support(Weighting):
    """Every objective the plan gives mass to counts fully: ``W[j, i] = 1`` where ``Gamma_ij > 0``.

    With :class:`EqualAssignment` every model serves every objective with weight 1 (federated
    FedAvg and MGDA); with a hard plan each objective counts for its model."""

    def __call__(self, plan):
        return (plan > 0).T.to(plan.dtype).contiguous()


@dataclass(frozen=True)
class RelativeWeights(Weighting):
    """The plan's proportions with the largest weight 1: ``W[j, i] = Gamma_ij / max Gamma``
    (federated w-MGDA: a fixed random plan reweighting the client updates)."""

    def __call__(self, plan):
        return (plan / plan.max().clamp_min(torch.finfo(plan.dtype).tiny)).T.contiguous()


# ============================================================================ combiners
class Combiner(ABC):
    """``(jacobian [m, n, d], W [m, n]) -> (direction [m, d], lambda [m, n])``.

    The update is ``theta_j <- theta_j - lr * direction_j``. The loop also passes, as
    keywords, ``losses`` (``[m, n]``, model-major: ``losses[j, i] = L_i(theta_j)``) and
    ``params`` (``[m, d]``), for combiners that need them (EPO, SVGD); others ignore them.

    A combiner with ``active_only = True`` reads only the rows of objectives with a positive
    weight; the loop then passes just those rows, packed: ``jacobian [m, k, d]`` and
    ``weights [m, k]`` (padding rows have weight 0), so a model never holds the gradients
    of objectives it does not serve (memory ``O(m k d)``, ``k`` = most objectives of any
    model, instead of ``O(m n d)``). The one exception is the loop's: where forward mode
    computes every objective's derivatives anyway (``d < n / m``), the round's first Jacobian
    (at most 2^24 values) comes with the loss matrix and the rows are cut from it.

    A combiner with ``linear = True`` has a direction linear in the gradients,
    ``direction_j = sum_i c[j, i] grad L_i(theta_j)``, with coefficients
    ``c = linear_coefficients(weights, losses)`` (``[m, n]``; ``losses`` model-major, at the
    step's parameters). The loop then forms the direction by one reverse pass over the models
    (:meth:`most.Problem.weighted_gradients`) and never builds a Jacobian.

    A combiner with ``centralised_only = True`` reads ``losses`` or ``params``, which the
    federated runtime (it combines the clients' updates) does not have; the federated MosT
    refuses it.
    """

    active_only: ClassVar[bool] = False
    linear: ClassVar[bool] = False
    centralised_only: ClassVar[bool] = False

    @abstractmethod
    def __call__(
        self, jacobian: Tensor, weights: Tensor, *, losses: Tensor | None = None, params: Tensor | None = None
    ) -> tuple[Tensor, Tensor]: ...

    @property
    def reads(self) -> Literal["linear", "served", "all"]:
        """What the centralised loop gives this combiner, from the flags above: ``"linear"``
        (coefficients; the direction by one reverse pass), ``"served"`` (the served objectives'
        rows, packed) or ``"all"`` (every objective's row). The loop chooses its gradient path by
        it, once per run (:mod:`most.engine.paths`)."""
        return "linear" if self.linear else "served" if self.active_only else "all"

    def linear_coefficients(self, weights: Tensor, losses: Tensor) -> Tensor:
        """The coefficients ``c [m, n]`` of a linear combiner (see the class docstring)."""
        raise NotImplementedError(f"{type(self).__name__} is not linear in the gradients.")

    def resolve(self, lookup: Callable[[str], "slice | tuple[int, int]"]) -> "Combiner":
        """This combiner with any parameter named in its settings replaced by its coordinates,
        from ``lookup(name)`` (a problem's or a federated model's ``coordinates``). The loops call
        it once before the first round; a combiner that names no parameter returns itself."""
        return self

    def check_dim(self, dim: int, *, model: str = "the model") -> None:
        """Refuses settings that address parameters past the ``dim`` of ``model`` (called before
        any work, after :meth:`resolve`; no refusal by default)."""


@dataclass(frozen=True)
class MinNorm(Combiner):
    """MGDA: the min-norm element of the hull of the rows ``W[j, i] * grad L_i(theta_j)``.

    Solved to convergence, all m models in one batched solve: by Frank-Wolfe
    (:func:`most.mgda.min_norm`), or exactly by non-negative least squares on the host for
    problems of more than 128 rows (see ``docs/solvers/min-norm.md``). Objectives with zero
    weight are left out, and so are objectives whose gradient is zero (they are stationary and
    cannot change to first order, so they must not stop the others -- e.g. an objective at its
    minimum on the boundary of a box).

    ``tol=None`` matches the tolerance to the precision of the gradients:
    :data:`FLOAT32_TOL` for float32 Jacobians, :data:`most.mgda.DEFAULT_TOL` otherwise.

    ``coordinates=(start, stop)`` solves for the weights on the Gram matrix of those
    coordinates of the gradients only -- the paper's speed-up, "MGDA on a subset of model
    parameters like the final layer's bias" (Section 6) -- and combines the full gradients with
    them. ``coordinates`` may also name a parameter of the model (``"last"``, e.g. the final
    layer's bias, or a name such as ``"0.bias"``): the loop resolves it before the first round,
    against :meth:`most.Problem.coordinates` (a problem built with ``from_module``) or
    :meth:`most.federated.FlatModel.coordinates`. The direction is then a common descent
    direction for those coordinates, not necessarily for all; the Gram matrix costs
    ``O(n^2 (stop - start))`` instead of ``O(n^2 d)``.

    Eq. 9 itself is formed by :func:`most.mgda.min_norm_direction`, for every caller.
    """

    max_iter: int | None = None
    tol: float | None = None
    coordinates: tuple[int, int] | str | None = None
    active_only: ClassVar[bool] = True

    def __post_init__(self):
        c = self.coordinates
        if c is None or (isinstance(c, str) and c):
            return
        if (not isinstance(c, (tuple, list)) or len(c) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in c) or not 0 <= c[0] < c[1]):
            raise ValueError(f"`coordinates` must be (start, stop) with 0 <= start < stop, or the name of a "
                             f"parameter such as 'last'; got {c!r}.")
        object.__setattr__(self, "coordinates", tuple(c))

    def resolve(self, lookup) -> "MinNorm":
        """This combiner with a parameter name in ``coordinates`` replaced by its ``(start, stop)``,
        from ``lookup(name)`` (a problem's or a federated model's ``coordinates``)."""
        if not isinstance(self.coordinates, str):
            return self
        found = lookup(self.coordinates)
        found = (found.start, found.stop) if isinstance(found, slice) else tuple(found)
        return dataclasses.replace(self, coordinates=found)

    def check_dim(self, dim, *, model="the model"):
        c = self.coordinates
        if isinstance(c, tuple) and c[1] > dim:
            raise ValueError(f"`coordinates` {c} lie outside the {dim} parameters of {model}; take them from "
                             "model.coordinates(name), or name the parameter (e.g. 'last').")

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        if isinstance(self.coordinates, str):
            raise RuntimeError(f"MinNorm(coordinates={self.coordinates!r}) names a parameter: resolve it first "
                               "(combiner.resolve(problem.coordinates)); MosT's loops do so before the first round.")
        return combine_min_norm(jacobian, weights, coordinates=self.coordinates, max_iter=self.max_iter,
                                tol=self.tol)


@dataclass(frozen=True)
class WeightedSum(Combiner):
    """The weighted mean of the gradients, ``sum_i W_ji grad L_i / sum_i W_ji``.

    With :class:`GammaWeights` this is MosT(L); with :class:`RandomAssignment` it is linear
    scalarisation.
    """

    active_only: ClassVar[bool] = True
    linear: ClassVar[bool] = True  # coefficients from the weights alone

    def coefficients(self, weights: Tensor) -> Tensor:
        """``lambda [m, n]``: each model's weights divided by their sum (0 for a model without any)."""
        total = weights.sum(1, keepdim=True)
        return torch.where(total > 0, weights / total.clamp_min(torch.finfo(weights.dtype).tiny),
                           torch.zeros_like(weights))

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        lam = self.coefficients(weights.to(jacobian))
        return torch.einsum("mn,mnd->md", lam, jacobian), lam

    def linear_coefficients(self, weights, losses):
        return self.coefficients(weights.to(losses.dtype))


@dataclass(frozen=True)
class SmoothMax(Combiner):
    r"""Each model descends a smooth maximum of the losses of the objectives it serves.

    For model :math:`j` with served objectives :math:`S_j = \{i : W_{ji} > 0\}` the direction is
    the gradient of :math:`\mu_j \log \sum_{i \in S_j} W_{ji} \exp(L_i(\theta_j) / \mu_j)`,

    .. math::

        \lambda_{ji} = \frac{W_{ji}\, e^{L_i(\theta_j) / \mu_j}}{\sum_{k \in S_j} W_{jk}\, e^{L_k(\theta_j) / \mu_j}},
        \qquad d_j = \sum_i \lambda_{ji} \nabla L_i(\theta_j),

    with the temperature :math:`\mu_j = s\,(\max_{S_j} L - \min_{S_j} L)`, ``s`` =
    ``smoothing``, held fixed within the step: the worst served objective gets weight 1 relative
    to the others, the best about :math:`e^{-1/s}`. As the temperature is a share of the
    losses' spread, the coefficients do not change when the losses are shifted or scaled. A
    model whose served losses are all equal takes their weighted mean.

    Where :class:`WeightedSum` (the default) brings each model to the optimum of its group's
    *average* loss, this brings it towards the point that minimises its group's *worst* loss:
    with the default assignment (each objective to its best model) it is the few-for-many
    goal :math:`\max_i \min_j L_i(\theta_j)` of TCH-Set and STCH-Set. ``most.variants.apply("worst",
    ...)`` sets it. Centralised loop only (the federated runtime combines client updates, not
    gradients at known losses).
    """

    smoothing: float = 0.1

    linear: ClassVar[bool] = True  # coefficients from the weights and the losses
    centralised_only: ClassVar[bool] = True

    def __post_init__(self):
        check_positive(self.smoothing, name="smoothing")

    def linear_coefficients(self, weights: Tensor, losses: Tensor) -> Tensor:
        losses = losses.detach().to(torch.float64)
        w = weights.detach().to(losses)
        served = w > 0
        high = torch.where(served, losses, torch.full_like(losses, -math.inf)).amax(1, keepdim=True)
        low = torch.where(served, losses, torch.full_like(losses, math.inf)).amin(1, keepdim=True)
        spread = torch.where(served.any(1, keepdim=True), high - low, torch.zeros_like(high))
        flat = spread <= 0
        temperature = torch.where(flat, torch.ones_like(spread), self.smoothing * spread)
        shifted = torch.where(served & ~flat, (losses - high) / temperature, torch.zeros_like(losses))
        scores = torch.where(served, w * torch.exp(shifted), torch.zeros_like(w))
        total = scores.sum(1, keepdim=True)
        return torch.where(total > 0, scores / total.clamp_min(torch.finfo(total.dtype).tiny),
                           torch.zeros_like(scores))

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        if losses is None:
            raise ValueError("SmoothMax needs the losses [m, n] (the round loop passes them as `losses=`).")
        coeff = self.linear_coefficients(weights, losses).to(jacobian)
        return torch.einsum("mn,mnd->md", coeff, jacobian), coeff


# ============================================================================ MosT-E
@dataclass(frozen=True)
class DirichletExtension:
    r"""MosT-E (Section 3.2): add ``n_extra`` objectives ``sum_l w_il L_l``, ``w_i ~ Dir(c)``.

    The extended problem has the n originals first (if ``include_original``), then the
    mixtures, so that n' = n + n_extra >> m and the transport can spread m models over
    the trade-offs of few objectives.
    """

    n_extra: int = 20
    concentration: float = 1.0
    include_original: bool = True

    def __post_init__(self):
        check_positive_int(self.n_extra, name="n_extra")
        check_positive(self.concentration, name="concentration")

    def mixture_weights(self, n: int, generator: torch.Generator) -> Tensor:
        w = dirichlet(generator, self.concentration, n, self.n_extra)
        if self.include_original:
            w = torch.cat([torch.eye(n, dtype=w.dtype), w])
        return w

    def apply(self, problem: Problem, generator: torch.Generator) -> Problem:
        w = self.mixture_weights(problem.n_objectives, generator)
        base_names = problem.names or tuple(f"L{i}" for i in range(problem.n_objectives))
        names = (list(base_names) if self.include_original else []) + [
            f"mix{k}" for k in range(self.n_extra)
        ]
        return problem.with_objectives(w, names=names, extension_weights=w, base_problem=problem)


@dataclass(frozen=True)
class TchebycheffExtension:
    r"""MosT-E with Tchebycheff mixtures: ``max_k w_ik (L_k - z*_k)``, ``w_i ~ Dir(c)``.

    A linear mixture ``w . L`` is minimised only at the ends of a concave front, so the
    paper's :class:`DirichletExtension` cannot spread models along one (ZDT2). The
    Tchebycheff scalarisation reaches every Pareto-optimal point: its minimiser lies where
    the ray ``z* + t / w`` meets the front. With ``smoothing = mu`` the max is replaced by
    ``mu * log sum_k exp(w_ik (L_k - z*_k) / mu)`` (smooth Tchebycheff), which has
    informative gradients in every objective.

    Args:
        n_extra: number of mixtures added.
        concentration: Dirichlet concentration c of the preference weights.
        smoothing: ``None`` for the plain max, or mu > 0 for the smooth version.
        ideal: the ideal point z* (one value per original objective); ``None`` takes the
            problem's ``metadata["ideal"]`` when it has one (the ZDT problems do), else 0, right
            for non-negative losses.
        include_original: keep the n original objectives first.
        spread: ``"dirichlet"`` draws the weights; ``"grid"`` (two objectives only) places
            the rays ``z* + t (1 / w)`` at evenly spaced angles from 0 to 90 degrees, both
            ends included: the end rays minimise one objective each (with ``augment > 0``,
            the two ends of the front), which a hypervolume with a distant reference point
            rewards most.
        augment: rho >= 0 adds ``rho * sum_k (L_k - z*_k)`` (augmented Tchebycheff, Steuer &
            Choo 1983). The plain max is only weakly Pareto: where one term is active the
            others get no gradient, and a model can stop with the inactive objectives far
            from optimal. A small rho makes every minimiser Pareto optimal, including those
            of the end rays, whose weight on the other objective is zero.
    """

    n_extra: int = 20
    concentration: float = 1.0
    smoothing: float | None = None
    ideal: tuple[float, ...] | None = None
    include_original: bool = True
    spread: Literal["dirichlet", "grid"] = "dirichlet"
    augment: float = 0.0

    def __post_init__(self):
        check_positive_int(self.n_extra, name="n_extra")
        check_positive(self.concentration, name="concentration")
        if self.smoothing is not None:
            check_positive(self.smoothing, name="smoothing")
        check_non_negative(self.augment, name="augment")
        if self.spread not in ("dirichlet", "grid"):
            raise ValueError(f"`spread` must be 'dirichlet' or 'grid'; got {self.spread!r}.")

    def preference_weights(self, n: int, generator: torch.Generator) -> Tensor:
        if self.spread == "grid":
            if n != 2:
                raise ValueError("spread='grid' is defined for two objectives; use 'dirichlet' for more.")
            if self.n_extra < 2:
                raise ValueError("spread='grid' needs n_extra >= 2 (its rays include both ends).")
            angle = torch.arange(self.n_extra, dtype=torch.float64) * (math.pi / 2) / (self.n_extra - 1)
            # the ray z* + t (cos a, sin a) is where w1 (L1 - z1) = w2 (L2 - z2): w ∝ (sin a, cos a)
            w = torch.stack([angle.sin(), angle.cos()], 1)
            return (w / w.sum(1, keepdim=True)).to(torch.get_default_dtype())
        return dirichlet(generator, self.concentration, n, self.n_extra)

    def apply(self, problem: Problem, generator: torch.Generator) -> Problem:
        n = problem.n_objectives
        w = self.preference_weights(n, generator)
        ideal = self.ideal if self.ideal is not None else problem.metadata.get("ideal")
        if ideal is not None and len(ideal) != n:
            where = "`ideal`" if self.ideal is not None else "The problem's metadata['ideal']"
            raise ValueError(f"{where} has {len(ideal)} values but the problem has {n} objectives.")
        z = torch.zeros(n) if ideal is None else torch.as_tensor(ideal, dtype=torch.get_default_dtype())
        mu, keep, rho = self.smoothing, self.include_original, self.augment

        def transform(losses: Tensor) -> Tensor:
            scaled = w.to(losses) * (losses - z.to(losses))  # [n_extra, n]
            mixed = scaled.max(1).values if mu is None else mu * torch.logsumexp(scaled / mu, dim=1)
            if rho:
                mixed = mixed + rho * (losses - z.to(losses)).sum()
            return torch.cat([losses, mixed]) if keep else mixed

        base_names = problem.names or tuple(f"L{i}" for i in range(n))
        names = (list(base_names) if keep else []) + [f"tch{k}" for k in range(self.n_extra)]
        return problem.map_objectives(transform, (n if keep else 0) + self.n_extra, names=names,
                                      extension_weights=w, base_problem=problem)
