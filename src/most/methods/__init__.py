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

The package holds one module per kind: :mod:`most.methods.marginals`,
:mod:`most.methods.assignments`, :mod:`most.methods.weightings`, :mod:`most.methods.combiners` and
:mod:`most.methods.extensions`; every component is importable from here.
"""

from __future__ import annotations

from ..mgda import FLOAT32_TOL, ZERO_GRADIENT_RTOL, combine_min_norm
from .assignments import Assignment, CappedTransportAssignment, EqualAssignment, RandomAssignment, TransportAssignment
from .combiners import Combiner, MinNorm, SmoothMax, WeightedSum
from .extensions import DirichletExtension, TchebycheffExtension
from .marginals import (Bounds, Curriculum, LoadBounds, Marginals, ModelsSelectObjectives, ObjectivesSelectModels,
                        ShareBounds, Uniform)
from .transport_config import TransportConfig
from .weightings import GammaWeights, MajorityShare, RelativeWeights, Shares, Support, Weighting

__all__ = [
    "TransportConfig",
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
