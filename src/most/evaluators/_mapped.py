"""Objectives made from another problem's losses, evaluated by that problem's own evaluator.

:meth:`most.Problem.map_objectives` (MosT-E's extensions, ``with_objectives``) makes objectives
``transform(L(theta))``. For a problem whose evaluator has its own passes (a
:meth:`most.Problem.from_datasets` problem: its mini-batches drawn from the run's generator, its
rows in memory-sized chunks), :class:`MappedEvaluator` keeps them: it asks the base evaluator for
the losses, their reverse pass or their gradients, and applies the transform and its derivatives
(the chain rule) to them, model by model.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.func import jacrev, vjp, vmap

from ._base import Evaluator


class MappedEvaluator(Evaluator):
    """The objectives ``transform(L(theta))`` of a base evaluator's ``L``.

    Args:
        base: the evaluator of the n base objectives.
        transform: ``losses [n] -> [n_objectives]``, written with torch operations (it is
            vectorised over the models and differentiated).
        n_objectives: the number of objectives the transform gives.
    """

    def __init__(self, base: Evaluator, transform: Callable[[Tensor], Tensor], n_objectives: int):
        self.base, self.transform, self.n_objectives = base, transform, int(n_objectives)
        self.stochastic = base.stochastic

    def _map(self, losses: Tensor) -> Tensor:
        """``[n, m]`` base losses -> ``[n_objectives, m]``."""
        return vmap(self.transform)(losses.T).T

    def loss_matrix(self, params: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        return self._map(self.base.loss_matrix(params, generator=generator))

    def losses_with_pullback(self, params: Tensor, *, generator: torch.Generator | None = None
                             ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        losses, pullback = self.base.losses_with_pullback(params, generator=generator)
        mapped, back = vjp(vmap(self.transform), losses.detach().T)  # [m, n_objectives]

        def mapped_pullback(weights: Tensor) -> Tensor:
            return pullback(back(weights.to(mapped))[0])  # the base objectives' weights, [m, n]

        return mapped.T, mapped_pullback

    def active_jacobian(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                        ) -> tuple[Tensor, Tensor]:
        losses, grads = self.base.jacobian(params, generator=generator)  # [n, m], [m, n, dim]
        inner = vmap(jacrev(self.transform))(losses.detach().T)  # [m, n_objectives, n]
        picked = inner.gather(1, rows[:, :, None].expand(-1, -1, inner.shape[2]))  # [m, k, n]
        return self._map(losses), torch.bmm(picked.to(grads), grads)

    def key(self) -> tuple:
        return (id(self),)


class PenalisedEvaluator(Evaluator):
    """A base evaluator's objectives, each plus ``(rho / 2) ||theta||^2`` (a ridge on the
    parameters, :class:`~most.baselines.SumOfMinimum`'s ``ridge``), through the base's own
    passes: the penalty's value and gradient ``rho theta`` are added to the base's.

    Args:
        base: the evaluator of the objectives without the penalty.
        rho: the penalty's weight (>= 0).
    """

    def __init__(self, base: Evaluator, rho: float):
        self.base, self.rho, self.n_objectives = base, float(rho), base.n_objectives
        self.stochastic = base.stochastic

    def _penalty(self, params: Tensor, like: Tensor) -> Tensor:
        """``[1, m]``: each model's penalty, in ``like``'s dtype."""
        return (0.5 * self.rho * params.detach().pow(2).sum(1)).to(like)[None]

    def loss_matrix(self, params: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        losses = self.base.loss_matrix(params, generator=generator)
        return losses + self._penalty(params, losses)

    def losses_with_pullback(self, params: Tensor, *, generator: torch.Generator | None = None
                             ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        losses, pullback = self.base.losses_with_pullback(params, generator=generator)
        theta = params.detach()

        def penalised(weights: Tensor) -> Tensor:
            return pullback(weights) + self.rho * weights.sum(1, keepdim=True).to(theta) * theta

        return losses + self._penalty(params, losses), penalised

    def active_jacobian(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                        ) -> tuple[Tensor, Tensor]:
        losses, grads = self.base.active_jacobian(params, rows, generator=generator)
        return losses + self._penalty(params, losses), grads + self.rho * params.detach()[:, None, :].to(grads)

    def active_gradients(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                         ) -> Tensor:
        grads = self.base.active_gradients(params, rows, generator=generator)
        return grads + self.rho * params.detach()[:, None, :].to(grads)

    def key(self) -> tuple:
        return (id(self),)
