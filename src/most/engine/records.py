"""What a centralised run records: one :class:`RoundRecord` per round, and its :class:`Result`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from torch import Tensor, nn

from ..problem import Problem

__all__ = ["RoundRecord", "Result", "HISTORY_NUMBERS", "keep_every"]


@dataclass(frozen=True)
class RoundRecord:
    """What happened in one round.

    Attributes:
        round: round index (0-based).
        plan: the assignment Gamma ``[n, m]`` used in this round.
        losses: the loss matrix ``[n, m]`` at the start of the round.
        weights: the combiner's coefficients ``lambda [m, n]`` at the last inner step
            (min-norm weights for MGDA-type methods).
        transport_seconds: time spent in the assignment.
        min_norm_seconds: time spent in the combiner.
        gradient_seconds: time spent evaluating losses and gradients.
        moved: the model :class:`~most.seeding.Reseed` moved after this round, if any.
        mean_best_loss: the mean over objectives of the best model's loss at the start of the
            round (kept for every round).

    In a :class:`Result`'s history of a large run (more than :data:`HISTORY_NUMBERS` numbers of
    plans, losses and weights over all rounds) only every k-th round and the last keep
    ``plan``, ``losses`` and ``weights``; the others have ``None`` there and keep their times
    and ``mean_best_loss``. A ``callback`` always gets the round's full record.
    """

    round: int
    plan: Tensor | None
    losses: Tensor | None
    weights: Tensor | None
    transport_seconds: float
    min_norm_seconds: float
    gradient_seconds: float
    moved: int | None = None
    mean_best_loss: float | None = None

    def __post_init__(self):
        if self.mean_best_loss is None and self.losses is not None:  # a record restored without it
            object.__setattr__(self, "mean_best_loss", float(self.losses.min(1).values.double().mean()))

    def thinned(self) -> "RoundRecord":
        """This record without its tensors (what a large run's history keeps of most rounds)."""
        return replace(self, plan=None, losses=None, weights=None)

    def __repr__(self) -> str:
        size = "" if self.plan is None else f"{self.plan.shape[0]} objectives x {self.plan.shape[1]} models, "
        return (f"RoundRecord(round={self.round}, {size}mean best loss {self.mean_best_loss:.3g}"
                + (f", moved model {self.moved}" if self.moved is not None else "") + ")")


#: The numbers (plans, losses and weights over all rounds) up to which a run's history keeps
#: every round's tensors; above, every k-th round and the last keep them (k the smallest that
#: fits). 2^25 float64 numbers are 256 MiB: a 100-round run keeps every round up to n * m of
#: about 110 000 (10^4 objectives and 10 models), every 45th at 10^5 objectives and 50 models.
HISTORY_NUMBERS = 2 ** 25


@dataclass(frozen=True)
class Result:
    """The outcome of a run.

    Attributes:
        params: the m final models, ``[m, dim]``.
        assignment: the last plan Gamma, ``[n, m]``.
        losses: the loss matrix ``[n, m]`` of the final models.
        history: one :class:`RoundRecord` per round (in a large run, most without their
            tensors: see :class:`RoundRecord`).
        problem: the problem that was solved (the extended one for MosT-E).
        statistics: the models' running statistics of batch normalisation,
            ``{buffer name: [m, ...]}``, for a module with such layers in training mode
            (:meth:`Problem.from_module`); else ``None``.
    """

    params: Tensor
    assignment: Tensor
    losses: Tensor
    history: list[RoundRecord]
    problem: Problem = field(repr=False)
    statistics: dict[str, Tensor] | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        """One line: the sizes and the final losses (the tensors are attributes)."""
        m, dim = self.params.shape
        best = self.best_losses().double()
        return (f"Result({m} models of {dim} parameters, {self.losses.shape[0]} objectives, {len(self.history)} "
                f"rounds; best-model loss mean {float(best.mean()):.3g}, worst {float(best.max()):.3g})")

    def to_modules(self) -> list[nn.Module]:
        """For a problem built from a module: the m final models as ``nn.Module`` objects, each
        with its parameters and its running statistics (:meth:`Problem.to_modules`)."""
        return self.problem.to_modules(self.params, self.statistics)

    def best_model(self) -> Tensor:
        """For each objective, the index of its lowest-loss final model, ``[n]``."""
        return self.losses.argmin(1)

    def best_losses(self) -> Tensor:
        """For each objective, the loss of its best final model, ``[n]``."""
        return self.losses.min(1).values

    def timings(self) -> dict[str, float]:
        """Total seconds spent in transport, min-norm and gradient evaluation."""
        return {
            "transport": sum(r.transport_seconds for r in self.history),
            "min_norm": sum(r.min_norm_seconds for r in self.history),
            "gradients": sum(r.gradient_seconds for r in self.history),
        }


def keep_every(rounds: int, n: int, m: int) -> int:
    """The k of a run's history: every k-th round (and the last) keeps its plan, losses and
    weights, the smallest k that keeps at most :data:`HISTORY_NUMBERS` numbers over ``rounds``
    rounds of ``n`` objectives and ``m`` models."""
    return max(1, math.ceil(rounds * 3 * n * m / HISTORY_NUMBERS))
