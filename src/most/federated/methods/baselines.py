"""The federated baselines built from the components: FedAvg, FedProx, MGDA, FedMGDA+,
linearization, w-MGDA, IFCA and the set scalarisations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar


from ..._validation import check_component, check_non_negative, check_positive
from ...methods import (
    Assignment,
    Combiner,
    EqualAssignment,
    GammaWeights,
    MinNorm,
    RandomAssignment,
    RelativeWeights,
    Support,
    WeightedSum,
)
from .base import FederatedMethod
from .updates import BoxMinNorm

if TYPE_CHECKING:
    from typing import Self


@dataclass(frozen=True)
class _EveryPair(FederatedMethod):
    """Every client trains every model (:class:`~most.methods.EqualAssignment`, weight 1 each);
    a subclass names the combination of the updates."""

    logs_plan: ClassVar[bool] = False
    #: the combination of each model's updates, built from the method's fields
    combination: ClassVar[Callable[[Self], Combiner]]

    def components(self):
        return EqualAssignment(), Support(), self.combination()


@dataclass(frozen=True)
class FedAvg(_EveryPair):
    """m independent FedAvg runs: every client trains every model; sample-size-weighted mean."""

    by_samples: ClassVar[bool] = True
    combination = lambda self: WeightedSum()  # noqa: E731


@dataclass(frozen=True)
class FedProx(FedAvg):
    """FedAvg with the local proximal term ``mu / 2 ||w - w_t||^2`` (Li et al. 2020)."""

    mu: float = field(default=0.01, metadata={"check": check_non_negative})

    @property
    def prox_mu(self) -> float:
        return self.mu


@dataclass(frozen=True)
class MGDA(_EveryPair):
    """m independent runs of federated MGDA: the min-norm element of the hull of all client
    updates (:class:`~most.methods.MinNorm`, unit weights)."""

    combination = lambda self: MinNorm()  # noqa: E731


@dataclass(frozen=True)
class FedMGDAPlus(_EveryPair):
    """FedMGDA+ (Hu et al. 2022): normalised client updates, min-norm within ``|lambda_i - 1/n| <= eps``."""

    eps: float = field(default=0.1, metadata={"check": check_non_negative})
    combination = lambda self: BoxMinNorm(self.eps)  # noqa: E731


@dataclass(frozen=True)
class Linearization(FederatedMethod):
    """Model j minimises a fixed random convex combination of the client losses
    (:class:`~most.methods.RandomAssignment`, the weighted mean of the updates)."""

    concentration: float = field(default=1.0, metadata={"check": check_positive})

    def components(self):
        return RandomAssignment(self.concentration), GammaWeights(), WeightedSum()


@dataclass(frozen=True)
class WeightedMGDA(Linearization):
    """w-MGDA (Appendix E): MGDA on client updates reweighted by a fixed random plan (the largest
    weight scaled to 1)."""

    def components(self):
        return RandomAssignment(self.concentration), RelativeWeights(), MinNorm()


@dataclass(frozen=True)
class IFCA(FederatedMethod):
    """IFCA (Ghosh et al. 2020): each client trains its lowest-loss model; each model averages
    its clients' updates (sample-size weighted)."""

    by_samples: ClassVar[bool] = True

    def components(self):
        from ...baselines import BestModelAssignment

        return BestModelAssignment(), Support(), WeightedSum()


@dataclass(frozen=True)
class _CoefficientPlan(Assignment):
    """A set scalarisation's coefficients ``c [m, n]`` (of the model-major losses) as the plan ``c^T``."""

    scalarization: object

    def __call__(self, losses, round, total, previous=None):
        return self.scalarization.coefficients(losses.T.double()).double().T


@dataclass(frozen=True)
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
        from ...baselines import SetCombiner

        check_component(self.combiner, name="combiner", example="most.baselines.STCHSetCombiner()")
        if not isinstance(self.combiner, SetCombiner):
            raise ValueError(f"`combiner` must be a most.baselines.SetCombiner (coefficients from the losses [m, n]), "
                             f"e.g. most.baselines.STCHSetCombiner(); got {self.combiner!r}.")

    def components(self):
        return _CoefficientPlan(self.combiner), GammaWeights(), WeightedSum()
