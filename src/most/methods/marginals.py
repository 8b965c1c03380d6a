"""Marginals: the schedules ``(loss matrix, round, total rounds) -> (alpha, beta)`` of the transport.

alpha is the mass of each objective, beta that of each model (or :class:`Bounds` on it); a
schedule may change with the round (the curriculum, Section 3.3).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from .._validation import as_number, check_non_negative, check_positive


def _uniform(k: int, like: Tensor) -> Tensor:
    return torch.full((k,), 1.0 / k, dtype=like.dtype, device=like.device)


class Marginals(ABC):
    """A schedule ``(loss matrix, round, total rounds) -> (alpha, beta)``.

    ``None`` for alpha (or beta) drops that constraint (a semi-relaxed transport).
    """

    #: Whether the schedule has a balance point that :meth:`at_loads` can move (the loads it
    #: pulls the models towards; :class:`ShareBounds`).
    has_balance: ClassVar[bool] = False

    @abstractmethod
    def __call__(self, losses: Tensor, round: int, total: int) -> tuple[Tensor | None, Tensor | None]: ...

    def at_loads(self, loads) -> "Marginals":
        """The same schedule with its balance point at ``loads`` (each model's share of the
        objectives' mass, summing to 1) instead of the fair load 1/m each; for a schedule with
        :attr:`has_balance`."""
        raise NotImplementedError(f"{type(self).__name__} has no balance point to move (has_balance is False).")

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
    the mass (``upper=None``: no upper bound); with ``price > 0``, each unit of mass above
    ``target[j]`` costs ``price`` more (a soft balance, :func:`most.transport.solve_bounded`)."""

    lower: Tensor
    upper: Tensor | None = None
    target: Tensor | None = None
    price: float = 0.0


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
    >>> from most.methods import TransportAssignment
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
                "or add objectives with an extension (MosT-E; with one already, give it more objectives).")
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
    upper bound.

    ``price`` makes the balance soft within the bounds: a model's load above ``n/m`` costs
    ``price`` times the median, over objectives, of their lowest loss, per objective, so an
    objective leaves its place in the balance only for a model on which its loss is lower by
    that much (a fraction of the typical loss, so the rule does not depend on the loss's units).
    Where the models are close for most objectives (no groups in the data) the loads stay near
    ``n/m``; where groups differ by more than the price they are served whole within the bounds.
    The federated MosT's default is ``ShareBounds(0.5, 2.0, price=0.5)`` (how the price was set:
    ``docs/methods/departures.md``).

    ``loads`` moves the balance point from the fair load ``1/m`` each to the given shares (one
    per model, summing to 1): the price is then paid above ``loads[j]``, and the bounds lie at
    ``low`` and ``high`` times ``loads[j]`` where that is wider than around the fair load. The
    federated MosT sets it (:meth:`at_loads`) when its re-split hands a group of clients to
    another model, so the plan keeps the groups the losses showed instead of pulling them back
    towards even loads.

    >>> import torch
    >>> from most.methods import TransportAssignment
    >>> L = torch.tensor([[0.0, 5.0]] * 7 + [[5.0, 0.0]])  # groups of 7 and 1; the fair load is 4
    >>> (TransportAssignment(marginals=ShareBounds(0.5, 2.0))(L, 0, 1) * 8).sum(0).tolist()  # at least 2 each
    [6.0, 2.0]
    >>> L = torch.tensor([[1.0, 1.1]] * 6 + [[1.1, 1.0]] * 2)  # small gaps: the price keeps the balance
    >>> (TransportAssignment(marginals=ShareBounds(0.5, 2.0, price=0.5))(L, 0, 1) * 8).sum(0).tolist()
    [4.0, 4.0]
    """

    low: float = 0.5
    high: float | None = 2.0
    price: float = 0.0
    loads: tuple[float, ...] | None = None

    has_balance: ClassVar[bool] = True

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
        check_non_negative(self.price, name="price")
        if self.loads is not None:
            object.__setattr__(self, "loads", _check_loads(self.loads))

    def at_loads(self, loads) -> "ShareBounds":
        return replace(self, loads=tuple(float(x) for x in torch.as_tensor(loads).reshape(-1).tolist()))

    def __call__(self, losses, round, total):
        n, m = losses.shape
        lower = torch.full((m,), self.low / m, dtype=losses.dtype, device=losses.device)
        upper = None if self.high is None else torch.full_like(lower, min(self.high / m, 1.0))
        point = _uniform(m, losses)
        if self.loads is not None:
            if len(self.loads) != m:
                raise ValueError(f"ShareBounds has loads for {len(self.loads)} models, but the loss matrix has {m}.")
            point = torch.tensor(self.loads, dtype=losses.dtype, device=losses.device)
            lower = torch.minimum(lower, self.low * point)
            if upper is not None and self.high is not None:
                upper = torch.maximum(upper, (self.high * point).clamp_max(1.0))
        if not self.price:
            return _uniform(n, losses), Bounds(lower, upper)
        scale = float(losses.detach().min(1).values.abs().median())
        return _uniform(n, losses), Bounds(lower, upper, target=point, price=self.price * scale)


def _check_loads(loads) -> tuple[float, ...]:
    """``loads`` as a tuple of shares summing to 1 (refused: not a sequence of finite
    non-negative numbers with a positive sum)."""
    if isinstance(loads, (str, bytes)) or not hasattr(loads, "__iter__"):
        raise TypeError(f"`loads` must be a sequence of numbers, one share per model; got {loads!r}.")
    values = [check_non_negative(x, name="loads") for x in loads]
    total = sum(values)
    if not total > 0:
        raise ValueError(f"`loads` must be shares with a positive sum, one per model; got {loads!r}.")
    return tuple(x / total for x in values)


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
            v = as_number(getattr(self, name), name=name, kind="a number in [0, 1]")
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"Curriculum `{name}` must lie in [0, 1]; got {v!r}.")
            object.__setattr__(self, name, float(v))

    def coefficient(self, round: int, total: int) -> float:
        """The coefficient at ``round`` of ``total``: ``start`` at round 0, ``end`` at the last
        round, linear between (and held at ``start`` or ``end`` outside those rounds)."""
        return self.start + (self.end - self.start) * min(max(round / max(total - 1, 1), 0.0), 1.0)

    def __call__(self, losses, round, total):
        n, m = losses.shape
        s = self.coefficient(round, total)
        alpha_m = torch.bincount(losses.argmin(0), minlength=n).to(losses) / m
        beta_o = torch.bincount(losses.argmin(1), minlength=m).to(losses) / n
        a = s * alpha_m + (1.0 - s) / n
        b = s / m + (1.0 - s) * beta_o
        return a / a.sum(), b / b.sum()
