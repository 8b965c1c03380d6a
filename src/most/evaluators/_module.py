"""Objectives given as one callable each over a module (:meth:`most.Problem.from_module`).

The losses of all objectives come from calling each objective in turn (the m models at once
inside each call). The gradients of the objectives a model serves are taken objective by
objective, each at every model that serves it: about two evaluations of all objectives, where a
pass through the whole loss function per row (or per parameter) costs ``min(k, dim)``.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch import Tensor
from torch.func import grad_and_value

from ._datasets import run_rng
from ._function import FunctionEvaluator


class PerObjective:
    """A loss function ``theta -> [n]`` that can also evaluate objective ``k`` alone,
    ``one(k, theta) -> scalar`` (built by :meth:`most.Problem.from_module`); ``random``: whether
    the module has random layers in training mode (dropout), whose passes are then seeded."""

    def __init__(self, losses: Callable[[Tensor], Tensor], one: Callable[[int, Tensor], Tensor],
                 random: bool = False):
        self._losses, self.one, self.random = losses, one, random

    def __call__(self, theta: Tensor) -> Tensor:
        return self._losses(theta)


class ModuleEvaluator(FunctionEvaluator):
    """The evaluations of a problem whose objectives can be evaluated one at a time (``fn`` a
    :class:`PerObjective`).

    A module with random layers in training mode (dropout) draws their masks from torch's
    generator, forked and seeded for each evaluation from a seed drawn from the run's generator
    (a fixed one without it), as :class:`~most.evaluators.DatasetsEvaluator` does: a run with
    them is reproducible and resumes from a checkpoint, and so are the mini-batches that
    objectives draw with torch's generator in such a run."""

    fn: PerObjective

    def __init__(self, fn: PerObjective, dim: int, n_objectives: int, vectorize: bool = True):
        super().__init__(fn, dim, n_objectives, vectorize)
        self.stochastic = fn.random

    def _rng(self, generator: torch.Generator | None, device: torch.device):
        """The context of one evaluation: torch's generator seeded from ``generator`` for a module
        with random layers; a no-op otherwise (the run's generator is not drawn from)."""
        if not self.fn.random:
            return contextlib.nullcontext()
        return run_rng(generator, device)

    def loss_matrix(self, params: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        with self._rng(generator, params.device):
            return super().loss_matrix(params)

    def jacobian(self, params: Tensor, *, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        with self._rng(generator, params.device):
            return super().jacobian(params)

    def losses_with_pullback(self, params: Tensor, *, generator: torch.Generator | None = None
                             ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        with self._rng(generator, params.device):  # the pullback reuses this pass's masks (its graph)
            return super().losses_with_pullback(params)

    def active_jacobian(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                        ) -> tuple[Tensor, Tensor]:
        with self._rng(generator, params.device):
            if min(int(rows.shape[1]), self.dim) > 1:
                return self._objective_gradients(params, rows)
            return super().active_jacobian(params, rows)

    def forward_rows(self, k: int) -> bool:
        return min(k, self.dim) <= 1 and super().forward_rows(k)

    def _objective_gradients(self, params: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Losses ``[n, m]`` and the rows ``[m, k, dim]``: objective by objective, in order, its loss
        at every model and, where a model serves it, its gradient. Each objective is called once,
        as by the loss function, so an objective that draws a mini-batch draws it once for all
        models."""
        one, m = self.fn.one, params.shape[0]
        served = torch.zeros(m, self.n_objectives, dtype=torch.bool, device=params.device)
        served.scatter_(1, rows, True)
        wanted = served.any(0).tolist()
        jac = torch.zeros(*rows.shape, self.dim, dtype=params.dtype, device=params.device)
        values = []
        for i in range(self.n_objectives):
            def loss(theta: Tensor, i: int = i) -> Tensor:
                return one(i, theta)

            if wanted[i]:
                g, v = self.map_models(grad_and_value(loss), params)
                hit = rows == i  # [m, k]
                jac[hit] = g.detach()[hit.nonzero()[:, 0]]
            else:
                with torch.no_grad():
                    v = self.map_models(loss, params)
            values.append(v.detach())
        return torch.stack(values), jac
