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
