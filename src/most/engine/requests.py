"""The evaluations a round asks of its problem, as typed requests.

A round is a generator: it yields a request and receives ``(value, seconds)``. Each request knows
the one call of :class:`~most.Problem` that answers it (:meth:`Request.compute`), how it groups
with other runs' requests (:meth:`Request.group`) and how one batched answer splits back into
each run's (:meth:`Request.together`). :func:`drive` answers one run's requests directly;
:func:`most.engine.batch.drive_batch` answers several runs' requests on the same objectives with
one call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Generator, TypeVar, cast

import torch
from torch import Tensor

from ..problem import Problem
from .checks import objective_errors

__all__ = ["Request", "Evaluation", "Losses", "LossesWithPullback", "Jacobian", "ServedGradients",
           "ServedJacobian", "Pull", "SharedPullback", "answer", "drive"]

R = TypeVar("R")


class SharedPullback:
    """The reverse pass of one evaluation of several runs' models (a :class:`LossesWithPullback`
    answered together): each run pulls its own weights, and the pass runs once, when every run
    that got it has asked (a run that ended without asking adds weight 0)."""

    def __init__(self, pullback: Callable[[Tensor], Tensor], spans: dict[int, tuple[int, int]], n: int):
        self.pullback, self.spans, self.n = pullback, spans, n
        self.holders = set(spans)

    def ready(self, asking: set[int]) -> bool:
        """Whether every run holding this pass is among ``asking``."""
        return self.holders <= asking

    def pull(self, weights: dict[int, Tensor]) -> dict[int, Tensor]:
        """Each asking run's direction ``[m_run, dim]`` from its weights ``[m_run, n]`` (checked by
        the run before it asks)."""
        n, like = self.n, next(iter(weights.values()))
        parts = [weights[i] if i in weights else like.new_zeros(b - a, n)
                 for i, (a, b) in sorted(self.spans.items(), key=lambda item: item[1])]
        grads = self.pullback(torch.cat([w.to(like) for w in parts]))
        self.holders.clear()
        return {i: grads[a:b] for i, (a, b) in self.spans.items() if i in weights}


def columns(values: Tensor, a: int, b: int) -> Tensor:
    """Columns ``a:b`` of a loss matrix ``[n, M]`` in storage of their own (a run's history keeps
    its losses), laid out as a run's own loss matrix."""
    return values[:, a:b].clone()


class Request:
    """An evaluation a round asks for (the base of the request types)."""

    def answer(self, problem: Problem, generator: torch.Generator | None) -> object:
        """This run's request answered alone (mini-batches, if any, from the run's ``generator``)."""
        raise NotImplementedError

    def group(self, objectives: tuple) -> tuple:
        """The key under which requests of several runs are answered by one call: equal keys ask
        the same question of the same objectives (``objectives``, see
        :func:`most.engine.batch.objectives_key`)."""
        raise NotImplementedError

    def together(self, problem: Problem, members: list[int], requests: list["Request"],
                 generator: torch.Generator) -> list[object]:
        """The ``requests`` of runs ``members`` (this one first, all of one group) answered by one
        call; the values in the members' order."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Evaluation(Request):
    """A request that evaluates the objectives at the run's models ``params [m, dim]``.

    ``first`` marks a run's first evaluation (errors of the user's objectives are named as such,
    :func:`~most.engine.checks.objective_errors`); ``exact`` one that draws no mini-batch from the
    run's generator (the final losses).
    """

    params: Tensor
    first: bool = field(default=False, kw_only=True)
    exact: bool = field(default=False, kw_only=True)

    @property
    def rows(self) -> Tensor | None:
        """The objectives each model asks about, ``[m, k]`` (``None``: all)."""
        return None

    def compute(self, problem: Problem, params: Tensor, rows: Tensor | None,
                generator: torch.Generator | None) -> object:
        """The one call of ``problem`` that answers this request for ``params`` (and ``rows``)."""
        raise NotImplementedError

    def split(self, value, bounds: list[tuple[int, int]], members: list[int], problem: Problem) -> list[object]:
        """Each run's part of a value computed for all runs' models (run ``k``'s models are rows
        ``bounds[k]`` of the joint parameters)."""
        raise NotImplementedError

    def evaluate(self, problem: Problem, params: Tensor, rows: Tensor | None,
                 generator: torch.Generator | None) -> object:
        """:meth:`compute`, with the run's generator unless ``exact``, and the user's errors named
        on a first evaluation."""
        generator = None if self.exact else generator
        if not self.first:
            return self.compute(problem, params, rows, generator)
        with objective_errors(problem, params):
            return self.compute(problem, params, rows, generator)

    def answer(self, problem, generator):
        return self.evaluate(problem, self.params, self.rows, generator)

    def group(self, objectives):
        rows = self.rows
        return (type(self), self.first, objectives, self.params.dtype, self.params.device,
                None if rows is None else int(rows.shape[1]))

    def together(self, problem, members, requests, generator):
        evaluations = [r for r in requests if isinstance(r, Evaluation)]  # one group: all of this type
        sizes = [int(r.params.shape[0]) for r in evaluations]
        bounds = [(sum(sizes[:i]), sum(sizes[:i + 1])) for i in range(len(sizes))]
        rows = None if self.rows is None else torch.cat([cast(Tensor, r.rows) for r in evaluations])
        value = self.evaluate(problem, torch.cat([r.params for r in evaluations]), rows, generator)
        return self.split(value, bounds, members, problem)


@dataclass(frozen=True, eq=False)
class Losses(Evaluation):
    """The loss matrix ``[n, m]`` (:meth:`~most.Problem.loss_matrix`)."""

    def compute(self, problem, params, rows, generator):
        return problem.loss_matrix(params, generator=generator)

    def split(self, value, bounds, members, problem):
        return [columns(value, a, b) for a, b in bounds]


@dataclass(frozen=True, eq=False)
class LossesWithPullback(Evaluation):
    """The loss matrix and the reverse pass from it (:meth:`~most.Problem.losses_with_pullback`);
    answered together, the runs share one pass (:class:`SharedPullback`)."""

    def compute(self, problem, params, rows, generator):
        return problem.losses_with_pullback(params, generator=generator)

    def split(self, value, bounds, members, problem):
        values, pullback = value
        shared = SharedPullback(pullback, dict(zip(members, bounds)), problem.n_objectives)
        return [(columns(values, a, b), shared) for a, b in bounds]


@dataclass(frozen=True, eq=False)
class Jacobian(Evaluation):
    """The loss matrix and every objective's gradient at every model,
    ``(losses [n, m], jacobian [m, n, dim])`` (:meth:`~most.Problem.jacobian`)."""

    def compute(self, problem, params, rows, generator):
        return problem.jacobian(params, generator=generator)

    def split(self, value, bounds, members, problem):
        losses, jac = value
        return [(columns(losses, a, b), jac[a:b]) for a, b in bounds]


@dataclass(frozen=True, eq=False)
class ServedGradients(Evaluation):
    """The gradients of each model's served objectives ``served [m, k]``, ``[m, k, dim]``, at the
    parameters of the round's loss matrix (:meth:`~most.Problem.active_gradients`)."""

    served: Tensor

    @property
    def rows(self):
        return self.served

    def compute(self, problem, params, rows, generator):
        return problem.active_gradients(params, rows, generator=generator)

    def split(self, value, bounds, members, problem):
        return [value[a:b] for a, b in bounds]


@dataclass(frozen=True, eq=False)
class ServedJacobian(ServedGradients):
    """The loss matrix and the gradients of each model's served objectives,
    ``(losses [n, m], jacobian [m, k, dim])`` (:meth:`~most.Problem.active_jacobian`)."""

    def compute(self, problem, params, rows, generator):
        return problem.active_jacobian(params, rows, generator=generator)

    def split(self, value, bounds, members, problem):
        losses, jac = value
        return [(columns(losses, a, b), jac[a:b]) for a, b in bounds]


@dataclass(frozen=True, eq=False)
class Pull(Request):
    """The reverse pass ``pullback(weights)`` of an earlier :class:`LossesWithPullback`: the
    direction ``[m, dim]``. A run's own pass is answered alone; a :class:`SharedPullback` once for
    all runs that hold it."""

    pullback: Callable[[Tensor], Tensor] | SharedPullback
    weights: Tensor

    def answer(self, problem, generator):
        if isinstance(self.pullback, SharedPullback):  # pulled for all its runs by together()
            raise RuntimeError("A shared reverse pass is pulled by the batch driver; please report this as a bug.")
        return self.pullback(self.weights)

    def group(self, objectives):
        return (Pull, id(self.pullback))

    def together(self, problem, members, requests, generator):
        shared = self.pullback
        if not isinstance(shared, SharedPullback):  # runs share a pass only through a SharedPullback
            raise RuntimeError("Only a shared reverse pass is pulled together; please report this as a bug.")
        pulled = shared.pull({i: r.weights for i, r in zip(members, requests) if isinstance(r, Pull)})
        return [pulled[i] for i in members]


def answer(problem: Problem, request: Request, generator: torch.Generator | None) -> tuple[object, float]:
    """One run's request, answered directly: ``(value, seconds)``."""
    tic = time.perf_counter()
    value = request.answer(problem, generator)
    return value, time.perf_counter() - tic


def drive(steps: Generator[Request, tuple, R], problem: Problem, generator: torch.Generator | None) -> R:
    """Runs one run's rounds (a generator of requests, e.g. :meth:`most.engine.loop.Job.steps`) to
    its result."""
    try:
        request = next(steps)
        while True:
            request = steps.send(answer(problem, request, generator))
    except StopIteration as stop:
        return stop.value
