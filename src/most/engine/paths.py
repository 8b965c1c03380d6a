"""How a run's rounds get the gradients its combiner reads: one path per kind of need.

A combiner declares what it reads (:attr:`most.methods.Combiner.reads`), and :func:`gradient_path`
chooses the path once per run:

- ``"linear"`` (:class:`LinearPath`): a direction linear in the gradients, formed by one reverse
  pass over the models; no Jacobian is built;
- ``"served"`` (:class:`ServedRowsPath`): the gradients of the objectives each model serves,
  packed, asked for after the plan;
- ``"all"`` (:class:`AllRowsPath`): every objective's gradient at every model.

A path asks for the round's loss matrix (:meth:`GradientPath.round_losses`) and runs the K
inner steps under the round's plan (:meth:`GradientPath.steps`); each step ends in the loop's one
update (:meth:`most.engine.loop.Loop.step`).
"""

from __future__ import annotations

import time
from typing import Callable, Generator, Protocol

import torch
from torch import Tensor

from ..methods import Combiner
from ..problem import Problem, active_rows, check_weights
from .checks import check_finite
from .requests import Jacobian, Losses, LossesWithPullback, Pull, Request, ServedGradients, ServedJacobian, \
    SharedPullback

__all__ = ["Run", "GradientPath", "LinearPath", "ServedRowsPath", "AllRowsPath", "PATHS", "gradient_path"]

#: what a round's path returns: ((losses [n, m], jacobian or None), seconds)
RoundLosses = Generator[Request, tuple, tuple[tuple[Tensor, "Tensor | None"], float]]
#: what the inner steps return: (the last coefficients lambda [m, n], min-norm seconds, gradient seconds)
Steps = Generator[Request, tuple, tuple[Tensor, float, float]]


class Run(Protocol):
    """What a path reads of a run and the one thing it does to it (:class:`most.engine.loop.Loop`)."""

    problem: Problem
    combiner: Combiner
    params: Tensor
    m: int
    inner_steps: int

    def step(self, direction: Tensor) -> None:
        """The update along ``direction [m, dim]`` and the projection."""


class GradientPath:
    """The evaluations of one run's rounds for one kind of combiner need."""

    #: whether the round's loss-matrix Jacobian, if any, is checked with the losses (a path that
    #: reads only the served rows checks them once they are chosen)
    checks_round_jacobian: bool = True

    def round_losses(self, loop: Run, first: bool) -> RoundLosses:
        """Asks for the round's loss matrix (and what else the same evaluation gives this path)."""
        raise NotImplementedError

    def steps(self, loop: Run, t: int, losses: Tensor, jac: Tensor | None, weights: Tensor) -> Steps:
        """The K inner steps of round ``t`` under the weights ``W [m, n]``."""
        raise NotImplementedError


class LinearPath(GradientPath):
    """A combiner whose direction is a linear combination of the gradients
    (:class:`~most.methods.WeightedSum`, TCH-Set, ...): one forward and one reverse pass over the
    models per step, with the coefficients taken from the step's losses; the round's loss matrix
    and its first step's gradients come from one forward pass."""

    def __init__(self) -> None:
        # the reverse pass from the round's loss matrix, used by its first step (then dropped); in a
        # batch (fit_batch), the pass it shares with other runs
        self.pending: Callable[[Tensor], Tensor] | SharedPullback | None = None

    def round_losses(self, loop, first):
        (losses, self.pending), seconds = yield LossesWithPullback(loop.params, first=first)
        return (losses, None), seconds

    def steps(self, loop, t, losses, jac, weights):
        problem, combiner = loop.problem, loop.combiner
        grad_s, lam = 0.0, None
        for k in range(loop.inner_steps):
            if k == 0 and self.pending is not None:  # at the parameters of the round's loss matrix
                step_losses, pullback, self.pending = losses, self.pending, None
            else:
                (step_losses, pullback), seconds = yield LossesWithPullback(loop.params)
                grad_s += seconds
            tic = time.perf_counter()
            # checked here, before a reverse pass that other runs of a batch may share
            lam = check_weights(combiner.linear_coefficients(weights, step_losses.T), *step_losses.T.shape)
            grad_s += time.perf_counter() - tic
            direction, seconds = yield Pull(pullback, lam)
            grad_s += seconds
            check_finite(step_losses, None, problem, t, k)
            bad = ~torch.isfinite(direction).all(-1)
            if bad.any():
                raise ValueError(f"The gradient of model {int(bad.nonzero()[0])}'s objectives is not finite at round "
                                 f"{t}, inner step {k}. Try a smaller `lr` or check the loss for operations without "
                                 "a gradient here.")
            loop.step(problem.tangent_jacobian(loop.params, direction.detach()[:, None])[:, 0])
        assert lam is not None  # inner_steps >= 1
        return lam.to(loop.params.dtype), 0.0, grad_s


def combine(loop: Run, t: int, k: int, jac: Tensor, weights: Tensor, losses: Tensor) -> tuple[Tensor, Tensor]:
    """The combiner's direction and coefficients at inner step ``k`` of round ``t``, with its
    errors named by round and step."""
    try:
        return loop.combiner(jac, weights, losses=losses.detach().T, params=loop.params.detach())
    except ValueError as exc:
        raise ValueError(f"At round {t}, inner step {k}: {exc}") from exc


class AllRowsPath(GradientPath):
    """A combiner that reads every objective's gradient: the round's loss matrix comes with the
    full Jacobian, and each further step asks for both again."""

    def round_losses(self, loop, first):
        return (yield Jacobian(loop.params, first=first))

    def steps(self, loop, t, losses, jac, weights):
        problem, min_norm_s, grad_s = loop.problem, 0.0, 0.0
        lam, step_losses = None, losses
        for k in range(loop.inner_steps):
            if k > 0 or jac is None:
                (step_losses, jac), seconds = yield Jacobian(loop.params)
                tic = time.perf_counter()
                check_finite(step_losses, jac, problem, t, k)
                grad_s += seconds + time.perf_counter() - tic
            jac = problem.tangent_jacobian(loop.params, jac.detach())
            tic = time.perf_counter()
            direction, lam = combine(loop, t, k, jac, weights, step_losses)
            min_norm_s += time.perf_counter() - tic
            # a function with float64 constants gives float64 gradients of float32 models: the models keep their dtype
            loop.step(direction.to(loop.params.dtype))
        assert lam is not None  # inner_steps >= 1
        return lam.to(loop.params.dtype), min_norm_s, grad_s


class ServedRowsPath(GradientPath):
    """A combiner that reads only the rows of the objectives each model serves (``W_ji > 0``):
    after the plan, the served rows are asked for, packed ``[m, k, dim]`` (padding rows weight 0),
    so a model never holds the gradients of objectives it does not serve. Where forward mode
    computes every objective's derivatives anyway (:meth:`~most.Problem.jacobian_first`), the
    round's first Jacobian comes with the loss matrix and the rows are cut from it."""

    checks_round_jacobian = False

    def round_losses(self, loop, first):
        if loop.problem.jacobian_first(loop.m):
            return (yield Jacobian(loop.params, first=first))
        losses, seconds = yield Losses(loop.params, first=first)
        return (losses, None), seconds

    def steps(self, loop, t, losses, jac, weights):
        problem, n, m = loop.problem, loop.problem.n_objectives, loop.m
        rows, valid = active_rows(weights > 0)
        step_weights = weights.gather(1, rows) * valid
        min_norm_s = grad_s = 0.0
        lam, step_losses = None, losses
        for k in range(loop.inner_steps):
            if k == 0 and jac is not None:  # every row, from Problem.jacobian_first
                if problem.forward_rows(int(rows.shape[1])):  # the served ones, as active_gradients gives them
                    tic = time.perf_counter()
                    jac = jac.gather(1, rows[..., None].expand(-1, -1, jac.shape[-1]))
                    check_finite(step_losses, jac, problem, t, k, rows)
                    grad_s += time.perf_counter() - tic
                else:  # too few rows for forward mode: asked for below
                    jac = None
            if k > 0 or jac is None:
                if k == 0:  # at the parameters of the loss matrix: only the gradients are new
                    jac, seconds = yield ServedGradients(loop.params, rows)
                else:
                    (step_losses, jac), seconds = yield ServedJacobian(loop.params, rows)
                tic = time.perf_counter()
                check_finite(step_losses, jac, problem, t, k, rows)
                grad_s += seconds + time.perf_counter() - tic
            jac = problem.tangent_jacobian(loop.params, jac.detach())
            tic = time.perf_counter()
            direction, lam = combine(loop, t, k, jac, step_weights, step_losses)
            # back to [m, n]; padding rows carry weight 0
            lam = torch.zeros(m, n, dtype=lam.dtype, device=lam.device).scatter_add_(1, rows, lam * valid.to(lam))
            min_norm_s += time.perf_counter() - tic
            # a function with float64 constants gives float64 gradients of float32 models: the models keep their dtype
            loop.step(direction.to(loop.params.dtype))
        assert lam is not None  # inner_steps >= 1
        return lam.to(loop.params.dtype), min_norm_s, grad_s


#: the path of each value of :attr:`most.methods.Combiner.reads`
PATHS: dict[str, type[GradientPath]] = {"linear": LinearPath, "served": ServedRowsPath, "all": AllRowsPath}


def gradient_path(combiner: Combiner) -> GradientPath:
    """A new path for a run of ``combiner`` (chosen by what it reads)."""
    return PATHS[combiner.reads]()
