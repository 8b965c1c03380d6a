r"""More multi-solution baselines: EPO and MOO-SVGD (few objectives), and the few-for-many
methods TCH-Set, STCH-Set and sum-of-minimum (many objectives).

All run the same round loop as every other method (:func:`most.solver.run`); each is a
frozen dataclass with the shared fields ``n_models, rounds, inner_steps, lr, seed,
progress`` and a ``fit(problem)`` that returns a :class:`~most.solver.Result`.

**EPO** -- :class:`EPO`, Exact Pareto Optimal search. Mahapatra & Rajan, "Multi-Task
Learning with User Preferences: Gradient Descent with Controlled Ascent in Pareto
Optimization", ICML 2020. Model j gets a preference vector ``r_j`` and converges to the
Pareto optimal point on its *preference ray* ``r_1 l_1 = ... = r_n l_n`` (losses inversely
proportional to the preferences). Each step solves a small linear program (HiGHS, via
SciPy) that first reduces the non-uniformity ``KL(r*l / <r, l> || 1/n)`` without letting
the worst relative loss grow, then, once on the ray, descends on all objectives while
staying on it. Pieces: :class:`PreferenceAssignment` (fixed plan ``Gamma[:, j] = r_j / m``;
default rays are evenly spread for two objectives, Dirichlet(1) draws for more) and
:class:`EPOCombiner` (the LP). The losses must be non-negative.

**MOO-SVGD** -- :class:`MOOSVGD`. Liu, Tong & Liu, "Profiling Pareto Front With
Multi-Objective Stein Variational Gradient Descent", NeurIPS 2021. The m models are
particles: each is driven by the kernel-weighted MGDA directions of all particles and
repelled from the others by the gradient of an RBF kernel (``alpha`` sets the strength,
``bandwidth`` the kernel width; default the median heuristic). The particles spread along
the Pareto set instead of landing wherever MGDA from their starts would. Piece:
:class:`SVGDCombiner`.

**Few for many** (n >> m; details, formulas and the exact seeding in
:mod:`most.baselines._few_for_many`). Each objective is judged by its best model,
``min_k f_i(x_k)``, and the methods differ in how they aggregate those n values:

* :class:`TCHSet` -- Tchebycheff set scalarisation, ``max_i lambda_i (min_k f_i(x_k) - z*_i)``
  (the worst objective), and :class:`STCHSet`, its smooth version with temperature
  ``smoothing`` (Lin, Liu, Zhang & Zhang, "Few for Many: Tchebycheff Set Scalarization for
  Many-Objective Optimization", ICLR 2025). Pieces: :class:`TCHSetCombiner`,
  :class:`STCHSetCombiner` (the (sub)gradient as coefficients on the Jacobian rows).
* :class:`SumOfMinimum` -- ``sum_i min_k f_i(x_k)`` (Ding, Chen, Wang & Yin, "Efficient
  Algorithms for Sum-of-Minimum Optimization", ICML 2024), by plain subgradient descent
  (``algorithm="gradient"``, :class:`SumOfMinimumCombiner`) or by k-means++-style seeding
  and Lloyd alternation (``algorithm="lloyd"``, :class:`BestModelAssignment` +
  mean-gradient re-fits), with an optional ridge term.

Tuning notes: EPO's balancing steps are full gradient steps, so a fixed ``lr`` must be small
enough that one step does not jump across the ray (for quadratics with curvature c,
``lr * c`` of a few 1e-2 gives relative losses within a few percent of the ray). The SVGD
update averages over the m particles (a particle far from the others moves with
``lr * g / m``), and near the ends of the Pareto set the repulsion pushes particles
slightly past it; reduce ``alpha`` if they must sit on the set.

Examples:
    >>> import torch, most
    >>> from most.baselines import EPO, MOOSVGD
    >>> a, b = torch.tensor([0.0, 0.0]), torch.tensor([2.0, 0.0])
    >>> problem = most.Problem.from_function(
    ...     lambda t: torch.stack([((t - a) ** 2).sum(), ((t - b) ** 2).sum()]), dim=2, n_objectives=2)
    >>> EPO(n_models=3, rounds=5, lr=0.01).fit(problem).params.shape
    torch.Size([3, 2])
    >>> MOOSVGD(n_models=3, rounds=5, lr=0.1).fit(problem).losses.shape
    torch.Size([2, 3])
    >>> from most.baselines import SumOfMinimum, TCHSet
    >>> TCHSet(n_models=2, rounds=5, lr=0.1).fit(problem).assignment.shape
    torch.Size([2, 2])
    >>> SumOfMinimum(n_models=2, rounds=5, lr=0.1, algorithm="gradient").fit(problem).params.shape
    torch.Size([2, 2])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from .._validation import check_non_negative, check_positive
from ..methods import EqualAssignment, GammaWeights
from ..solver import Method
from . import _few_for_many
from ._epo import EPOCombiner, PreferenceAssignment, check_preferences
from ._few_for_many import (
    BestModelAssignment,
    SetCombiner,
    STCHSet,
    STCHSetCombiner,
    SumOfMinimum,
    SumOfMinimumCombiner,
    TCHSet,
    TCHSetCombiner,
    kmeanspp_seeding,
    stch_set,
    sum_of_minimum,
    tch_set,
)
from ._svgd import SVGDCombiner

__all__ = ["EPO", "MOOSVGD", "PreferenceAssignment", "EPOCombiner", "SVGDCombiner", *_few_for_many.__all__]


def _as_nested_tuple(preferences) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in check_preferences(preferences).tolist())


@dataclass(frozen=True)
class EPO(Method):
    """EPO search (Mahapatra & Rajan, 2020): model j converges to the Pareto optimal point
    on its preference ray ``r_j1 l_1 = ... = r_jn l_n``.

    Args:
        n_models, rounds, inner_steps, lr, seed, progress: as for every method.
        preferences: ``None`` for the default preference vectors (see
            :class:`PreferenceAssignment`) or an ``[n_models, n]`` non-negative matrix,
            one preference vector per model. Stored as a tuple of tuples (so the method
            stays immutable and comparable); any tensor or nested sequence is accepted.
        eps: the non-uniformity threshold of :class:`EPOCombiner`.
    """

    preferences: Tensor | Sequence[Sequence[float]] | None = None
    eps: float = 1e-4

    def __post_init__(self):
        # the fields in their stored form first: the base's check builds the components from them
        object.__setattr__(self, "eps", check_positive(self.eps, name="eps"))
        if self.preferences is not None:
            object.__setattr__(self, "preferences", _as_nested_tuple(self.preferences))
        super().__post_init__()
        if self.preferences is not None and len(self.preferences) != self.n_models:
            raise ValueError(
                f"`preferences` must have one row per model: shape [n_models, n] with n_models = "
                f"{self.n_models}; got {len(self.preferences)} rows."
            )

    def components(self):
        prefs = None if self.preferences is None else torch.tensor(self.preferences, dtype=torch.float64)
        return PreferenceAssignment(prefs), GammaWeights(), EPOCombiner(self.eps)


@dataclass(frozen=True)
class MOOSVGD(Method):
    """MOO-SVGD (Liu, Tong & Liu, 2021): the models are SVGD particles driven by MGDA.

    Args:
        n_models, rounds, inner_steps, lr, seed, progress: as for every method.
        bandwidth: RBF kernel width h (``exp(-||x - y||^2 / h)``); ``None`` for the median
            heuristic.
        alpha: strength of the kernel repulsion; 0 gives kernel-smoothed MGDA.
    """

    bandwidth: float | None = None
    alpha: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        if self.bandwidth is not None:
            object.__setattr__(self, "bandwidth", check_positive(self.bandwidth, name="bandwidth"))
        object.__setattr__(self, "alpha", check_non_negative(self.alpha, name="alpha"))

    def components(self):
        return EqualAssignment(), GammaWeights(), SVGDCombiner(self.bandwidth, self.alpha)
