"""Objectives given as one callable each over a module (:meth:`most.Problem.from_module`).

The losses of all objectives come from calling each objective in turn (the m models at once
inside each call). The gradients of the objectives a model serves are taken objective by
objective, each at every model that serves it: about two evaluations of all objectives, where a
pass through the whole loss function per row (or per parameter) costs ``min(k, dim)``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.func import grad_and_value

from ._function import FunctionEvaluator


class PerObjective:
    """A loss function ``theta -> [n]`` that can also evaluate objective ``k`` alone,
    ``one(k, theta) -> scalar`` (built by :meth:`most.Problem.from_module`)."""

    def __init__(self, losses: Callable[[Tensor], Tensor], one: Callable[[int, Tensor], Tensor]):
        self._losses, self.one = losses, one

    def __call__(self, theta: Tensor) -> Tensor:
        return self._losses(theta)


class ModuleEvaluator(FunctionEvaluator):
    """The evaluations of a problem whose objectives can be evaluated one at a time (``fn`` a
    :class:`PerObjective`)."""

    fn: PerObjective

    def active_jacobian(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                        ) -> tuple[Tensor, Tensor]:
        if min(int(rows.shape[1]), self.dim) > 1:
            return self._objective_gradients(params, rows)
        return super().active_jacobian(params, rows, generator=generator)

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
