"""Assignments: ``(loss matrix [n, m], round, total rounds, previous plan) -> plan Gamma [n, m]``.

Which objective is served by which model (paper Eq. 6): an optimal transport under a schedule of
marginals (:mod:`most.methods.marginals`), a fixed random plan, or every model serving every
objective.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor

from .. import transport
from .._random import dirichlet
from .._validation import check_non_negative, check_positive, check_positive_int
from .marginals import Bounds, Marginals, Uniform


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
                                           diversity=self.diversity, reg=self.reg, target=b.target,
                                           price=b.price).plan
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
    models under the balance. With :class:`~most.methods.Shares` as the weighting each model
    combines about ``n * shares / m`` objectives, weighted by their shares (``shares = m``: every
    model serves every objective, as in FedAvg)."""

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


class FixedPlanAssignment(Assignment):
    """The base of a plan set once per run in :meth:`reset` (``self._plan``, ``[n, m]``), the same
    every round: a round in which only some objectives take part (federated clients sampled by
    participation) uses its :meth:`rows`."""

    fixed: ClassVar[bool] = True
    _plan: Tensor | None = None

    def _fixed_plan(self) -> Tensor:
        if self._plan is None:
            raise RuntimeError(f"{type(self).__name__}.reset(n, m, generator) must be called before the first round.")
        return self._plan

    def __call__(self, losses, round, total, previous=None):
        plan = self._fixed_plan()
        if plan.shape != losses.shape:
            raise ValueError(f"{type(self).__name__}'s plan is for {tuple(plan.shape)} (objectives, models); the "
                             f"losses are {tuple(losses.shape)}. Where only some objectives take part in a round "
                             "(federated clients sampled by participation), the round's plan is rows(objectives).")
        return plan.to(losses)

    def rows(self, objectives: Tensor) -> Tensor:
        """The fixed plan's rows of ``objectives`` (indices among all n): the plan of a round in
        which only those objectives take part (federated clients sampled by participation)."""
        plan = self._fixed_plan()
        return plan[objectives.to(plan.device)]


class RandomAssignment(FixedPlanAssignment):
    """A fixed random plan: column j is a Dirichlet(c) draw over objectives, scaled to 1/m.

    The plan is drawn once per run (in :meth:`reset`, from the run's seed). With
    :class:`~most.methods.MinNorm` this is w-MGDA (Appendix E); with
    :class:`~most.methods.WeightedSum` it is linear scalarisation with m random preference vectors.
    """

    def __init__(self, concentration: float = 1.0):
        self.concentration = check_positive(concentration, name="concentration")
        self._plan = None

    def reset(self, n, m, generator):
        self._plan = dirichlet(generator, self.concentration, n, m).T / m  # column j: model j's draw

    def __repr__(self):
        return f"RandomAssignment(concentration={self.concentration!r})"


@dataclass(frozen=True)
class EqualAssignment(Assignment):
    """Every model serves every objective equally (Gamma = 1/(nm)): plain MGDA, m times."""

    def __call__(self, losses, round, total, previous=None):
        n, m = losses.shape
        return torch.full((n, m), 1.0 / (n * m), dtype=losses.dtype, device=losses.device)
