r"""Few-for-many baselines: m solutions that together serve n >> m objectives.

All three minimise a *set* scalarisation of the loss matrix ``F[k, i] = f_i(x_k)`` (model
k, objective i) in which each objective is judged by its best solution,
``min_k F[k, i]``; they differ in how the n per-objective values are aggregated.

**TCH-Set** -- :class:`TCHSet`, Tchebycheff set scalarisation (Lin, Liu, Zhang, Zhang,
"Few for Many: Tchebycheff Set Scalarization for Many-Objective Optimization", ICLR 2025)::

    g_TCH(X) = max_i  lambda_i (min_k F[k, i] - z*_i)

the worst (preference-weighted, ideal-shifted) objective. Its subgradient has a single
non-zero coefficient: ``lambda_i*`` on ``(k*, i*)``, with ``i*`` the argmax objective and
``k*`` its best solution (ties: lowest index). So one step moves one model, along one
objective's gradient.

**STCH-Set** -- :class:`STCHSet`, its smooth version (same paper), with both the max and
the min replaced by log-sum-exp of smoothing ``mu``::

    smin_i    = -mu log sum_k exp(-F[k, i] / mu)
    g_STCH(X) =  mu log sum_i exp(lambda_i (smin_i - z*_i) / mu)

Its gradient is ``sum_{k,i} c[k, i] grad f_i(x_k)`` with
``c[k, i] = p_i lambda_i q[k, i]``, ``p = softmax_i(lambda_i (smin_i - z*_i) / mu)`` (which
objectives are worst) and ``q[:, i] = softmax_k(-F[:, i] / mu)`` (which model serves
objective i); both are computed with log-sum-exp, in float64. As ``mu -> 0``,
``g_TCH <= g_STCH + mu max_i lambda_i log m`` and ``g_STCH <= g_TCH + mu log n``.

**SoM** -- :class:`SumOfMinimum`, sum-of-minimum optimisation (Ding, Chen, Wang & Yin,
"Efficient Algorithms for Sum-of-Minimum Optimization", ICML 2024)::

    F_SoM(X) = sum_i min_k F[k, i]

Two algorithms (field ``algorithm``):

* ``"gradient"``: plain (sub)gradient descent on ``F_SoM / n``: coefficient ``1 / n`` on
  ``(argmin_k F[k, i], i)`` for every i, re-evaluated at every inner step. (The ``1 / n``
  keeps the meaning of ``lr`` independent of n; the direction is that of ``F_SoM``.)
  Starts from the problem's own initial models.
* ``"lloyd"``: the paper's k-means-like method: careful seeding, then Lloyd alternation.

  - *Seeding* (k-means++ style; :func:`kmeanspp_seeding`). Objective ``i_1`` is drawn
    uniformly and ``x_1`` is (an approximation of) ``argmin f_{i_1}``. For
    ``l = 2..m``, objective ``i_l`` is drawn with probability proportional to
    ``v_i = min_{j < l} ||grad f_i(x_j)||^2`` and ``x_l ~ argmin f_{i_l}``. For k-means
    (``f_i = ||x - y_i||^2``) this is exactly k-means++ (``||grad f_i||^2 = 4 D(y_i)^2``).
    The natural generalisation weights by the value gap ``min_j f_i(x_j) - f_i^*``; we
    use the squared gradient norm because the minimum values ``f_i^*`` are not known for
    a general problem. For mu-strongly convex, L-smooth ``f_i`` the two weights agree up
    to the factors ``2 mu`` and ``2 L`` (``2 mu (f - f*) <= ||grad f||^2 <= 2 L (f - f*)``),
    but they are not identical, so this is a variant, not a copy, of the paper's
    seeding. Each ``argmin f_i`` is
    approximated by ``seed_steps`` gradient steps of size ``seed_lr`` on ``f_i`` alone,
    from one draw of the problem's own initial point (projected after every step). Cost,
    outside the rounds: ``m * seed_steps`` single-objective gradients and ``m - 1``
    Jacobians. The draws use the run's generator, so a seed fixes the seeding.
  - *Lloyd alternation* (one round each): assign every objective to its best model
    (:class:`BestModelAssignment`, a hard plan, ties to the lowest index), then re-fit each
    model on its cluster with ``inner_steps`` gradient steps on the *mean* loss of the
    cluster (``GammaWeights`` + ``WeightedSum``; same minimiser as the cluster's sum). For
    ``lr <= 1 / L`` (L the smoothness constant of the ``f_i``) a round never increases
    ``F_SoM``: the steps do not increase any cluster's sum, and the re-assignment can only
    lower each objective's minimum. A model whose cluster is empty stays where it is (it
    may win objectives back in a later round); unlike k-means, it is not re-seeded.

  ``ridge = rho > 0`` adds ``(rho / 2) ||x||^2`` to every objective (to both algorithms,
  seeding included), the ridge term the SoM paper adds in mixed linear regression so that
  every ``f_i`` has a unique minimiser. ``Result.losses`` and ``Result.problem`` then
  include it; evaluate the original problem's ``loss_matrix(result.params)`` for the plain
  losses.

All three are :class:`~most.Method` dataclasses run by :func:`most.solver.run`;
each round's plan (``Result.assignment``) is the best-model plan of
:class:`BestModelAssignment`. The TCH / STCH / SoM-gradient combiners ignore the weights
and work from the losses the loop passes them. The values of the three scalarisations are
:func:`tch_set`, :func:`stch_set` and :func:`sum_of_minimum` (differentiable, for checks).

Examples:
    >>> import torch, most
    >>> from most.baselines import TCHSet, STCHSet, SumOfMinimum
    >>> centres = torch.tensor([[0.0, 0.0], [0.2, 0.0], [5.0, 5.0], [5.0, 5.2]])
    >>> problem = most.Problem.from_function(
    ...     lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=4)
    >>> som = SumOfMinimum(n_models=2, rounds=20, inner_steps=5, lr=0.2, seed=0).fit(problem)
    >>> sorted(som.best_model().tolist())  # one model per pair of centres
    [0, 0, 1, 1]
    >>> bool(most.metrics.worst_objective(som.losses) < 0.02)
    True
    >>> STCHSet(n_models=2, rounds=5, lr=0.1, smoothing=0.1).fit(problem).params.shape
    torch.Size([2, 2])
    >>> TCHSet(n_models=2, rounds=5, lr=0.1, preference=[1.0, 1.0, 2.0, 2.0]).fit(problem).losses.shape
    torch.Size([4, 2])
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from dataclasses import dataclass, replace
from typing import ClassVar, Literal, Sequence

import numpy as np
import torch
from torch import Tensor

from .._validation import as_tensor, check_non_negative, check_positive, check_positive_int, holds_bool, short_repr
from ..evaluators import PenalisedEvaluator, run_rng
from ..methods import Assignment, Combiner, GammaWeights, WeightedSum
from ..problem import Problem
from ..solver import Method

__all__ = [
    "TCHSet",
    "STCHSet",
    "SumOfMinimum",
    "BestModelAssignment",
    "SetCombiner",
    "TCHSetCombiner",
    "STCHSetCombiner",
    "SumOfMinimumCombiner",
    "tch_set",
    "stch_set",
    "sum_of_minimum",
    "kmeanspp_seeding",
]


# ============================================================================ validation
def _as_vector(values, *, name: str, non_negative: bool = False) -> tuple[float, ...]:
    """A 1-D finite vector as a tuple of floats (so the methods stay immutable and comparable)."""
    if holds_bool(values):
        raise ValueError(f"`{name}` must be a vector of numbers, one per objective; got {short_repr(values)}, which "
                         "holds a bool (True is not a weight or a loss): pass the numbers themselves.")
    try:
        v = np.asarray(values.detach().cpu() if isinstance(values, Tensor) else values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"`{name}` must be a vector of numbers, one per objective; got {type(values).__name__}."
        ) from exc
    if v.ndim != 1 or v.shape[0] == 0:
        raise ValueError(
            f"`{name}` must be a 1-D vector with one entry per objective (shape [n]); got shape {v.shape}."
        )
    if not np.isfinite(v).all():
        raise ValueError(f"`{name}` contains NaN or inf; every entry must be a finite number.")
    if non_negative:
        if (v < 0).any():
            i = int(np.flatnonzero(v < 0)[0])
            raise ValueError(
                f"`{name}` must be non-negative: entry {i} is {v[i]:.3g}. A preference says how much an "
                "objective counts; use positive weights (default: all ones)."
            )
        if not (v > 0).any():
            raise ValueError(f"`{name}` is all zeros: no objective would count. Use positive weights.")
    return tuple(float(x) for x in v)


def _check_length(vector: tuple[float, ...] | None, n: int, *, name: str, method: str) -> None:
    if vector is not None and len(vector) != n:
        raise ValueError(
            f"{method}: `{name}` has {len(vector)} entries but the problem has {n} objectives; "
            f"give one value per objective (shape [{n}]), or None for the default."
        )


def _vector(values: tuple[float, ...] | None, n: int, default: float, like: Tensor, *, name: str) -> Tensor:
    if values is None:
        return torch.full((n,), default, dtype=like.dtype, device=like.device)
    if len(values) != n:
        raise ValueError(
            f"`{name}` has {len(values)} entries but there are {n} objectives; give one value per objective."
        )
    return torch.tensor(values, dtype=like.dtype, device=like.device)


def _check_losses(losses: Tensor, *, name: str = "losses") -> Tensor:
    if not isinstance(losses, Tensor):
        losses = torch.as_tensor(np.asarray(losses, dtype=np.float64))
    # integer and bool losses in the default float dtype: the preference and ideal vectors take
    # the losses' dtype, and an integer one would truncate them
    losses = as_tensor(losses, name=name)
    if losses.ndim != 2 or 0 in losses.shape:
        raise ValueError(f"`{name}` must be a loss matrix of shape [n, m] (objectives x models); got shape "
                         f"{tuple(losses.shape)}.")
    return losses


# ============================================================================ values
def tch_set(losses: Tensor, preference=None, ideal=None) -> Tensor:
    """TCH-Set value ``max_i lambda_i (min_k L[i, k] - z*_i)`` of a loss matrix ``[n, m]``.

    ``preference`` (lambda, default ones) and ``ideal`` (z*, default zeros) have one entry
    per objective. Returns a 0-d tensor (differentiable almost everywhere).

    >>> import torch
    >>> L = torch.tensor([[1.0, 3.0], [4.0, 2.0], [0.5, 0.1]])  # [n = 3, m = 2]
    >>> float(tch_set(L)), float(tch_set(L, preference=[1.0, 0.25, 1.0]))
    (2.0, 1.0)
    """
    losses = _check_losses(losses)
    n = losses.shape[0]
    lam = _vector(None if preference is None else _as_vector(preference, name="preference", non_negative=True),
                  n, 1.0, losses, name="preference")
    z = _vector(None if ideal is None else _as_vector(ideal, name="ideal"), n, 0.0, losses, name="ideal")
    return (lam * (losses.min(1).values - z)).max()


def stch_set(losses: Tensor, preference=None, ideal=None, smoothing: float = 0.1) -> Tensor:
    """STCH-Set value of a loss matrix ``[n, m]`` (see the module docstring); a 0-d tensor.

    >>> import torch
    >>> L = torch.tensor([[1.0, 3.0], [4.0, 2.0], [0.5, 0.1]])
    >>> abs(float(stch_set(L, smoothing=1e-3)) - float(tch_set(L))) < 1e-2
    True
    """
    losses = _check_losses(losses)
    mu = check_positive(smoothing, name="smoothing")
    n = losses.shape[0]
    lam = _vector(None if preference is None else _as_vector(preference, name="preference", non_negative=True),
                  n, 1.0, losses, name="preference")
    z = _vector(None if ideal is None else _as_vector(ideal, name="ideal"), n, 0.0, losses, name="ideal")
    smin = -mu * torch.logsumexp(-losses / mu, dim=1)
    return mu * torch.logsumexp(lam * (smin - z) / mu, dim=0)


def sum_of_minimum(losses: Tensor) -> Tensor:
    """SoM value ``sum_i min_k L[i, k]`` of a loss matrix ``[n, m]``; a 0-d tensor.

    >>> import torch
    >>> round(float(sum_of_minimum(torch.tensor([[1.0, 3.0], [4.0, 2.0], [0.5, 0.1]]))), 6)
    3.1
    """
    return _check_losses(losses).min(1).values.sum()


# ============================================================================ coefficients
# All take the model-major losses [m, n] the loop passes to combiners and return the
# coefficients c [m, n] of the gradient  sum_{k, i} c[k, i] grad f_i(x_k).
def _tch_coefficients(losses: Tensor, lam: Tensor, z: Tensor) -> Tensor:
    best = losses.min(0)  # over models
    worst = int((lam * (best.values - z)).argmax())
    coeff = torch.zeros_like(losses)
    coeff[int(best.indices[worst]), worst] = lam[worst]
    return coeff


def _stch_coefficients(losses: Tensor, lam: Tensor, z: Tensor, mu: float) -> Tensor:
    smin = -mu * torch.logsumexp(-losses / mu, dim=0)  # [n]
    p = torch.softmax(lam * (smin - z) / mu, dim=0)  # [n]: which objectives are worst
    q = torch.softmax(-losses / mu, dim=0)  # [m, n]: which model serves objective i
    return q * (p * lam).unsqueeze(0)


def _som_coefficients(losses: Tensor) -> Tensor:
    m, n = losses.shape
    return torch.nn.functional.one_hot(losses.argmin(0), m).T.to(losses) / n


# ============================================================================ components
@dataclass(frozen=True)
class BestModelAssignment(Assignment):
    """Each objective goes, whole, to its lowest-loss model: ``Gamma[i, argmin_k L[i, k]] = 1/n``.

    Ties go to the lowest model index. The hard plan of Lloyd's algorithm (and of MosT(O)
    without a transport solver); column sums are the cluster sizes divided by n.

    >>> import torch
    >>> BestModelAssignment()(torch.tensor([[1.0, 0.0], [2.0, 3.0], [1.0, 1.0]]), 0, 1) * 3
    tensor([[0., 1.],
            [1., 0.],
            [1., 0.]])
    """

    def __call__(self, losses, round, total, previous=None):
        n, m = losses.shape
        # min(1) chooses as argmin does (the lowest index on ties) at a tenth of its time on the loss
        # matrix's column-major layout
        return torch.nn.functional.one_hot(losses.min(1).indices, m).to(losses) / n


class SetCombiner(Combiner):
    """A set scalarisation's gradient as coefficients on the Jacobian rows: model j moves along
    ``sum_i c[j, i] grad L_i(theta_j)`` with ``c = coefficients(losses)`` from the model-major
    losses ``[m, n]`` alone (the weights are ignored). The federated
    :class:`most.federated.methods.SetScalarization` plans with :meth:`coefficients`."""

    linear: ClassVar[bool] = True  # coefficients from the losses
    centralised_only: ClassVar[bool] = True

    @abstractmethod
    def coefficients(self, losses: Tensor) -> Tensor:
        """``c [m, n]`` for the model-major losses ``[m, n]``."""

    def linear_coefficients(self, weights, losses):
        return self.coefficients(losses)


def _check_set_vectors(combiner) -> None:
    """A set combiner's ``preference`` (non-negative) and ``ideal`` (finite), as tuples of floats."""
    if combiner.preference is not None:
        object.__setattr__(combiner, "preference",
                           _as_vector(combiner.preference, name="preference", non_negative=True))
    if combiner.ideal is not None:
        object.__setattr__(combiner, "ideal", _as_vector(combiner.ideal, name="ideal"))


@dataclass(frozen=True)
class TCHSetCombiner(SetCombiner):
    """The TCH-Set subgradient as coefficients on the Jacobian rows (the weights are ignored).

    ``preference`` / ``ideal``: tuples with one value per objective, or ``None`` for ones /
    zeros. Returns ``(direction [m, d], c [m, n])`` with a single non-zero coefficient.
    """

    preference: tuple[float, ...] | None = None
    ideal: tuple[float, ...] | None = None

    def __post_init__(self):
        _check_set_vectors(self)

    def coefficients(self, losses: Tensor) -> Tensor:
        """``c [m, n]`` for the model-major losses ``[m, n]``."""
        losses = losses.detach().to(torch.float64)
        n = losses.shape[1]
        lam = _vector(self.preference, n, 1.0, losses, name="preference")
        z = _vector(self.ideal, n, 0.0, losses, name="ideal")
        return _tch_coefficients(losses, lam, z)

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        if losses is None:
            raise ValueError("TCHSetCombiner needs the losses [m, n] (the round loop passes them as `losses=`).")
        coeff = self.coefficients(losses).to(jacobian)
        return torch.einsum("mn,mnd->md", coeff, jacobian), coeff


@dataclass(frozen=True)
class STCHSetCombiner(SetCombiner):
    """The STCH-Set gradient as coefficients on the Jacobian rows (the weights are ignored).

    ``smoothing`` is mu > 0; see the module docstring for the coefficients.
    """

    preference: tuple[float, ...] | None = None
    ideal: tuple[float, ...] | None = None
    smoothing: float = 0.1

    def __post_init__(self):
        _check_set_vectors(self)
        object.__setattr__(self, "smoothing", check_positive(self.smoothing, name="smoothing"))

    def coefficients(self, losses: Tensor) -> Tensor:
        """``c [m, n]`` for the model-major losses ``[m, n]``."""
        losses = losses.detach().to(torch.float64)
        n = losses.shape[1]
        lam = _vector(self.preference, n, 1.0, losses, name="preference")
        z = _vector(self.ideal, n, 0.0, losses, name="ideal")
        return _stch_coefficients(losses, lam, z, self.smoothing)

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        if losses is None:
            raise ValueError("STCHSetCombiner needs the losses [m, n] (the round loop passes them as `losses=`).")
        coeff = self.coefficients(losses)
        direction = torch.einsum("mn,mnd->md", coeff, jacobian.to(torch.float64))
        return direction.to(jacobian.dtype), coeff.to(jacobian.dtype)


@dataclass(frozen=True)
class SumOfMinimumCombiner(SetCombiner):
    """The gradient of ``F_SoM / n``: coefficient ``1/n`` on ``(argmin_k F[k, i], i)``; weights ignored."""

    def coefficients(self, losses: Tensor) -> Tensor:
        """``c [m, n]`` for the model-major losses ``[m, n]``."""
        return _som_coefficients(losses.detach())

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        if losses is None:
            raise ValueError("SumOfMinimumCombiner needs the losses [m, n] (the round loop passes them as `losses=`).")
        coeff = self.coefficients(losses).to(jacobian)
        return torch.einsum("mn,mnd->md", coeff, jacobian), coeff


# ============================================================================ seeding
def _minimise_one(problem: Problem, i: int, start: Tensor, steps: int, lr: float) -> Tensor:
    """``steps`` projected gradient steps on objective i alone, from ``start`` ``[d]``."""
    theta = start.detach().clone()
    for _ in range(steps):
        theta.requires_grad_(True)
        value = problem.fn(theta)[i]
        (grad,) = torch.autograd.grad(value, theta)
        if not torch.isfinite(grad).all():
            raise ValueError(
                f"Seeding: the gradient of objective {i} is not finite while approximating its minimiser; "
                "try a smaller `seed_lr` (or `lr`)."
            )
        theta = problem.apply_projection((theta.detach() - lr * grad).unsqueeze(0))[0]
    return theta.detach()


def kmeanspp_seeding(problem: Problem, n_models: int, generator: torch.Generator, *, steps: int = 100,
                     lr: float = 0.1) -> Tensor:
    """k-means++-style seeding for sum-of-minimum (see the module docstring); ``[n_models, dim]``.

    The first objective is drawn uniformly, each later one with probability proportional to
    ``min_j ||grad f_i(x_j)||^2`` over the models chosen so far (uniformly if that is zero
    for every objective); each model is ``steps`` gradient steps of size ``lr`` on its
    objective alone, from one draw of the problem's own initial point.
    """
    check_positive_int(n_models, name="n_models")
    steps = check_positive_int(steps, name="steps")  # with 0 steps every model would be the same start
    lr = check_positive(lr, name="lr")
    n = problem.n_objectives
    if isinstance(problem.init, Tensor) and problem.init.ndim == 2:  # fixed [m, d] starts: take the first
        start = problem.apply_projection(problem.init[:1].detach().clone())[0]
    else:
        start = problem.initial_params(1, generator)[0]
    first = int(torch.randint(n, (1,), generator=generator))
    # a problem whose evaluations draw at random (dropout) draws here from the run's generator too
    with run_rng(generator, start.device) if problem.stochastic else contextlib.nullcontext():
        return _kmeanspp_from(problem, n_models, generator, start, first, steps, lr)


def _kmeanspp_from(problem: Problem, n_models: int, generator: torch.Generator, start: Tensor, first: int,
                   steps: int, lr: float) -> Tensor:
    n = problem.n_objectives
    chosen = [_minimise_one(problem, first, start, steps, lr)]
    for _ in range(1, n_models):
        _, jac = problem.jacobian(torch.stack(chosen))
        jac = problem.tangent_jacobian(torch.stack(chosen), jac.detach())
        weight = jac.to(torch.float64).pow(2).sum(-1).min(0).values  # [n]
        if not torch.isfinite(weight).all() or float(weight.sum()) <= 0:
            weight = torch.ones(n, dtype=torch.float64)
        # drawn on the host: the generator is a CPU generator wherever the models live
        i = int(torch.multinomial((weight / weight.sum()).cpu(), 1, generator=generator))
        chosen.append(_minimise_one(problem, i, start, steps, lr))
    return torch.stack(chosen)


def _with_ridge(problem: Problem, rho: float) -> Problem:
    base = problem.fn

    def fn(theta: Tensor) -> Tensor:
        return base(theta) + 0.5 * rho * theta.pow(2).sum()

    # a problem with an evaluator of its own (from_datasets: its mini-batches and chunks), or whose
    # evaluations draw from the run's generator (dropout in from_module), keeps it
    kept = problem.kept_evaluator()
    evaluator = None if kept is None else PenalisedEvaluator(kept, rho)
    return replace(problem, fn=fn, evaluator=evaluator, metadata={**problem.metadata, "ridge": rho})


# ============================================================================ methods
@dataclass(frozen=True)
class _SetScalarization(Method):
    """Shared fields and checks of TCH-Set and STCH-Set."""

    preference: Sequence[float] | Tensor | None = None
    ideal: Sequence[float] | Tensor | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.preference is not None:
            object.__setattr__(self, "preference", _as_vector(self.preference, name="preference", non_negative=True))
        if self.ideal is not None:
            object.__setattr__(self, "ideal", _as_vector(self.ideal, name="ideal"))

    def prepare(self, problem, generator):
        n = problem.n_objectives
        _check_length(self.preference, n, name="preference", method=type(self).__name__)
        _check_length(self.ideal, n, name="ideal", method=type(self).__name__)
        return problem


@dataclass(frozen=True)
class TCHSet(_SetScalarization):
    """TCH-Set (Lin et al., ICLR 2025): minimise ``max_i lambda_i (min_k f_i(x_k) - z*_i)``.

    Args:
        n_models, rounds, inner_steps, lr, seed, progress, optimizer: as for every method.
        preference: lambda, one non-negative weight per objective (``None``: all ones).
            Stored as a tuple; any vector (list, array, tensor) is accepted.
        ideal: z*, the ideal point, one value per objective (``None``: zeros, right for
            non-negative losses).
    """

    def components(self):
        return BestModelAssignment(), GammaWeights(), TCHSetCombiner(self.preference, self.ideal)


@dataclass(frozen=True)
class STCHSet(_SetScalarization):
    """STCH-Set (Lin et al., ICLR 2025): the smooth TCH-Set (see the module docstring).

    Args:
        n_models, rounds, inner_steps, lr, seed, progress, optimizer: as for every method.
        preference, ideal: as for :class:`TCHSet`.
        smoothing: mu > 0, the temperature of both log-sum-exps; ``mu -> 0`` gives TCH-Set.
    """

    smoothing: float = 0.1

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "smoothing", check_positive(self.smoothing, name="smoothing"))

    def components(self):
        return BestModelAssignment(), GammaWeights(), STCHSetCombiner(self.preference, self.ideal, self.smoothing)


@dataclass(frozen=True)
class SumOfMinimum(Method):
    """Sum-of-minimum optimisation (Ding et al., ICML 2024): minimise ``sum_i min_k f_i(x_k)``.

    Args:
        n_models, rounds, inner_steps, lr, seed, progress, optimizer: as for every method.
            With ``"lloyd"``, a round is one Lloyd iteration: re-assign, then
            ``inner_steps`` gradient steps on each cluster's mean loss.
        algorithm: ``"lloyd"`` (default; seeding + Lloyd alternation) or ``"gradient"``
            (plain subgradient descent on the mean of the minima).
        seeding: ``"kmeans++"`` (:func:`kmeanspp_seeding`) or ``"init"`` (the problem's own
            initial models); ``None`` picks ``"kmeans++"`` for Lloyd and ``"init"`` for the
            gradient algorithm.
        seed_steps: gradient steps that approximate each seeded objective's minimiser; at
            least 1 with ``"kmeans++"`` (with none, every model would start at the same
            point). Unused with ``"init"``.
        seed_lr: their step size (``None``: ``lr``); unused with ``"init"``.
        ridge: rho >= 0; adds ``(rho / 2) ||x||^2`` to every objective.
    """

    algorithm: Literal["lloyd", "gradient"] = "lloyd"
    seeding: Literal["kmeans++", "init"] | None = None
    seed_steps: int = 100
    seed_lr: float | None = None
    ridge: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        if self.algorithm not in ("lloyd", "gradient"):
            raise ValueError(f"`algorithm` must be 'lloyd' or 'gradient'; got {self.algorithm!r}.")
        if self.seeding not in (None, "kmeans++", "init"):
            raise ValueError(f"`seeding` must be 'kmeans++', 'init' or None (the algorithm's default); "
                             f"got {self.seeding!r}.")
        # stored as the plain numbers they were checked as (a NumPy scalar or 0-d tensor is accepted)
        object.__setattr__(self, "seed_steps", check_positive_int(self.seed_steps, name="seed_steps", minimum=0))
        if self.seed_steps == 0 and self.resolved_seeding == "kmeans++":
            # without steps every seeded model is the same draw of the initial point: the ties then
            # give every objective to model 0 and the copies sit unused
            raise ValueError(
                "`seed_steps` must be >= 1 with k-means++ seeding: with 0 steps every model starts at the "
                "same point, so Lloyd's first assignment gives every objective to one model. Pass "
                "seed_steps >= 1, or seeding='init' to start from the problem's own initial models."
            )
        if self.seed_lr is not None:
            object.__setattr__(self, "seed_lr", check_positive(self.seed_lr, name="seed_lr"))
        object.__setattr__(self, "ridge", check_non_negative(self.ridge, name="ridge"))

    @property
    def resolved_seeding(self) -> str:
        """The seeding actually used (``seeding``, or the algorithm's default)."""
        if self.seeding is not None:
            return self.seeding
        return "kmeans++" if self.algorithm == "lloyd" else "init"

    def prepare(self, problem, generator):
        if self.ridge > 0:
            problem = _with_ridge(problem, self.ridge)
        if self.resolved_seeding == "kmeans++":
            original = problem
            steps, lr = self.seed_steps, self.seed_lr if self.seed_lr is not None else self.lr

            def init(m: int, gen: torch.Generator) -> Tensor:
                return kmeanspp_seeding(original, m, gen, steps=steps, lr=lr)

            problem = replace(problem, init=init)
        return problem

    def components(self):
        if self.algorithm == "lloyd":
            return BestModelAssignment(), GammaWeights(), WeightedSum()
        return BestModelAssignment(), GammaWeights(), SumOfMinimumCombiner()
