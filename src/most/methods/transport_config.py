"""The configuration of MosT's assignment, shared by the centralised and the federated MosT.

:class:`TransportConfig` declares the eight fields that choose a MosT run's plan and how the plan
weights each model's step (the transport, its diversity term and marginals, the weighting and
the combiner, or an assignment of one's own), their checks, and the assignment they make. Both
:class:`most.MosT` and :class:`most.federated.methods.MosT` inherit it; the federated one keeps
its own default marginals (:class:`~most.methods.ShareBounds` with a price, where the centralised
default is :class:`~most.methods.LoadBounds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Literal, cast

from .._validation import check_bool, check_component
from .assignments import Assignment, TransportAssignment
from .combiners import Combiner, WeightedSum
from .marginals import LoadBounds, Marginals
from .weightings import MajorityShare, Weighting

__all__ = ["TransportConfig"]

#: the transport fields that an ``assignment`` of one's own replaces, with their defaults
_REPLACED = dict(transport="exact", diversity=0.0, reg=None, warm_start=False)


@dataclass(frozen=True)
class TransportConfig:
    """MosT's plan and step configuration (a base of both MosT dataclasses).

    Args:
        diversity: tau, the weight of R(Gamma) (Eq. 3).
        transport: ``"exact"`` (network simplex), ``"sinkhorn"``, ``"newton"`` (entropic, for
            large n) or ``"ipot"``.
        marginals: the (alpha, beta) schedule (:class:`~most.methods.LoadBounds`,
            :class:`~most.methods.Uniform`, :class:`~most.methods.Curriculum`, ...).
        weighting: how Gamma weights the objectives in each model's step.
        combiner: how each model combines its weighted objectives' gradients or updates.
        reg: strength of the iterative transport solvers.
        warm_start: start each round's transport from the previous plan.
        assignment: instead of the transport fields above, any
            :class:`~most.methods.Assignment`.
    """

    diversity: float = 0.0
    transport: Literal["exact", "sinkhorn", "newton", "ipot"] = "exact"
    marginals: Marginals = field(default_factory=LoadBounds)
    weighting: Weighting = field(default_factory=MajorityShare)
    combiner: Combiner = field(default_factory=WeightedSum)
    reg: float | None = None
    warm_start: bool = False
    assignment: Assignment | None = None

    def __post_init__(self) -> None:
        post_init = getattr(super(), "__post_init__", None)
        if post_init is not None:  # the other base's checks (Method, FederatedMethod) come first
            post_init()
        check_component(self.marginals, name="marginals", example="most.methods.Uniform()", base=Marginals)
        check_component(self.weighting, name="weighting", example="most.methods.MajorityShare()", base=Weighting)
        check_component(self.combiner, name="combiner", example="most.MinNorm()", base=Combiner)
        object.__setattr__(self, "warm_start", check_bool(self.warm_start, name="warm_start"))
        self.transport_assignment()  # the transport assignment validates `transport` and `diversity`

    def transport_assignment(self) -> Assignment:
        """The run's assignment: ``assignment`` if given, else the
        :class:`~most.methods.TransportAssignment` of the transport fields (a new one per call)."""
        if self.assignment is None:
            return TransportAssignment(method=self.transport, diversity=self.diversity, marginals=self.marginals,
                                       reg=self.reg, warm_start=self.warm_start)
        if not isinstance(self.assignment, Assignment):
            raise TypeError(f"`assignment` must be a most.methods.Assignment (e.g. "
                            f"most.methods.CappedTransportAssignment(shares=2)); got {self.assignment!r}.")
        changed = [k for k, v in _REPLACED.items() if getattr(self, k) != v]
        marginals = next(f for f in fields(self) if f.name == "marginals")
        default = cast("Callable[[], Marginals]", marginals.default_factory)()  # the field has a default_factory
        changed += [] if self.marginals == default else ["marginals"]
        if changed:
            raise ValueError(f"`assignment` replaces the transport fields, so {', '.join(changed)} must keep their "
                             "defaults; set them on the assignment itself.")
        return self.assignment
