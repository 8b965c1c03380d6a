"""Named variants of MosT for ablations (paper Appendix E, Table 7).

Each variant is a small change of components on a base :class:`~most.MosT` configuration,
centralised or federated (:class:`most.federated.methods.MosT`) -- never a branch inside the
loop. The table itself lives in the one registry (:data:`most.registry.VARIANTS`)::

    >>> import most
    >>> base = most.MosT(n_models=5, diversity=0.1)
    >>> most.variants.apply("no-R", base).diversity
    0.0
    >>> type(most.variants.apply("L", base).combiner).__name__
    'WeightedSum'

* ``paper`` -- the algorithm as written: Gamma-weighted MGDA (GammaWeights, MinNorm) and the
  curriculum of Section 3.3 (federated: no warm-up).
* ``min-norm`` -- the min-norm (MGDA) direction of the served objectives: a Pareto-stationary
  point of each group instead of its optimum.
* ``balanced`` -- the balanced transport: every model serves n/m objectives.
* ``no-seeding`` -- the problem's own starts, and no model moved between rounds (centralised).
* ``no-R`` -- tau = 0 (no diversity regulariser).
* ``no-curriculum`` -- uniform marginals throughout.
* ``curriculum`` -- the alpha/beta curriculum of Section 3.3.
* ``O`` -- "objectives select models": the beta constraint dropped.
* ``M`` -- "models select objectives": the alpha constraint dropped.
* ``worst`` -- each model descends a smooth maximum of its objectives' losses: the few-for-many
  worst objective instead of the average (centralised).
* ``L`` -- Gamma-weighted mean of gradients (or updates): GammaWeights with WeightedSum (the
  paper's ablation of its min-norm direction; on the default, whose combiner is WeightedSum, the
  same as ``literal``).
* ``literal`` -- Gamma-weighting (GammaWeights) instead of the majority share, every other
  component of the base unchanged (Gamma-weighted min-norm on a min-norm base such as ``paper``).
* ``E`` -- MosT-E: 20 Dirichlet(1) mixtures of the objectives added (centralised only).

w-MGDA, linear scalarisation and MGDA are separate methods:
:class:`~most.WeightedMGDA`, :class:`~most.Linearization`, :class:`~most.MGDA`.
"""

from __future__ import annotations

from typing import Callable

from . import registry

__all__ = ["VARIANTS", "apply"]


def _apply_one(name: str) -> Callable:
    return lambda base: registry.variant(name, base)


#: name -> the function that turns a base MosT into the variant.
VARIANTS: dict[str, Callable] = {name: _apply_one(name) for name in registry.VARIANTS}


def apply(name: str, base):
    """The variant ``name`` of ``base`` (a centralised or federated MosT; see the table above)."""
    return registry.variant(name, base)
