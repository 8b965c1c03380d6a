"""Named variants of MosT for ablations (paper Appendix E, Table 7).

Each variant is a small change of components on a base :class:`~most.MosT`
configuration -- never a branch inside the loop::

    >>> import most
    >>> base = most.MosT(n_models=5, diversity=0.1)
    >>> most.variants.apply("no-R", base).diversity
    0.0
    >>> type(most.variants.apply("L", base).combiner).__name__
    'WeightedSum'

=============== ===========================================================================
name            what changes
=============== ===========================================================================
``paper``       the algorithm as written: Gamma-weighted MGDA (GammaWeights) and the
                curriculum of Section 3.3
``no-R``        tau = 0 (no diversity regulariser)
``no-curriculum`` uniform marginals throughout
``curriculum``  the alpha/beta curriculum of Section 3.3
``O``           "objectives select models": the beta constraint dropped
``M``           "models select objectives": the alpha constraint dropped
``L``           Gamma-weighted mean of gradients instead of the min-norm direction
``literal``     Gamma-weighted min-norm (GammaWeights), everything else unchanged
``E``           MosT-E: 20 Dirichlet(1) mixtures of the objectives added
=============== ===========================================================================

w-MGDA, linear scalarisation and MGDA are separate methods:
:class:`~most.WeightedMGDA`, :class:`~most.Linearization`, :class:`~most.MGDA`.
"""

from __future__ import annotations

from typing import Callable

from .methods import (
    Curriculum,
    DirichletExtension,
    GammaWeights,
    ModelsSelectObjectives,
    ObjectivesSelectModels,
    Uniform,
    WeightedSum,
)
from .solver import MosT

__all__ = ["VARIANTS", "apply"]

VARIANTS: dict[str, Callable[[MosT], MosT]] = {
    "paper": lambda b: b.replace(weighting=GammaWeights(), marginals=Curriculum()),
    "no-R": lambda b: b.replace(diversity=0.0),
    "no-curriculum": lambda b: b.replace(marginals=Uniform()),
    "curriculum": lambda b: b.replace(marginals=Curriculum()),
    "O": lambda b: b.replace(marginals=ObjectivesSelectModels()),
    "M": lambda b: b.replace(marginals=ModelsSelectObjectives()),
    "L": lambda b: b.replace(weighting=GammaWeights(), combiner=WeightedSum()),
    "literal": lambda b: b.replace(weighting=GammaWeights()),
    "E": lambda b: b.replace(extension=DirichletExtension()),
}


def apply(name: str, base: MosT) -> MosT:
    """The variant ``name`` of ``base`` (see the table above); ``base`` is a :class:`~most.MosT`."""
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(f"Unknown variant {name!r}; choose one of {sorted(VARIANTS)}.")
    if not isinstance(base, MosT):
        raise TypeError(
            f"variants apply to a MosT configuration, e.g. `apply({name!r}, most.MosT(n_models=5))`; got "
            f"{type(base).__name__}. Linearization, MGDA and WeightedMGDA are separate methods with no variants."
        )
    return VARIANTS[name](base)
