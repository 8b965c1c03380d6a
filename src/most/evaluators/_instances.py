"""Objectives that are single instances, ``L_i(theta) = loss(theta, *row_i)`` (:meth:`most.Problem.from_instances`).

The losses of all instances come from one vectorised call; the gradient of an instance is one
backward pass through that instance alone (:func:`torch.func.grad`, vectorised over the
instances a model serves), instead of a reverse pass through the whole batch per objective.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.func import grad_and_value, vmap

from ._base import active_rows
from ._checks import scalar_loss, vmap_errors
from ._function import FunctionEvaluator

#: A linear pullback runs one reverse pass per model through its weighted losses when the models'
#: padded per-instance gradients would hold this many values per model or more (rows x dim); below
#: it, the per-instance gradients of all models in one vectorised call cost less than a pass per
#: model (the Performance page of the benchmarks measures both sides).
PULLBACK_LOOP_VALUES = 2**19


def instance_losses(loss: Callable[..., Tensor], data: tuple[Tensor, ...]) -> Callable[[Tensor], Tensor]:
    """``theta -> [n]``: every instance's loss in one vectorised call (each checked to be a scalar)."""
    in_dims = (None,) + (0,) * len(data)

    def losses(theta: Tensor) -> Tensor:
        return vmap(scalar_loss(loss), in_dims=in_dims)(theta, *data)

    return losses


class InstancesEvaluator(FunctionEvaluator):
    """The evaluations of a problem given per instance.

    Args:
        loss: ``loss(theta [dim], *row) -> scalar``.
        data: the instances' tensors, one row per instance.
        dim: the length of ``theta``.
        fn: the losses of all instances, ``theta -> [n]`` (:func:`instance_losses`).
        vectorize: as :class:`~most.evaluators.FunctionEvaluator`'s.
    """

    rows_alone = True

    def __init__(self, loss: Callable[..., Tensor], data: tuple[Tensor, ...], dim: int,
                 fn: Callable[[Tensor], Tensor], vectorize: bool = True):
        super().__init__(fn, dim, int(data[0].shape[0]), vectorize)
        self.loss, self.data, self.in_dims = loss, data, (None,) + (0,) * len(data)

    def jacobian(self, params: Tensor, *, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        rows = torch.arange(self.n_objectives, device=params.device).expand(params.shape[0], -1)
        values, jac = self._instance_gradients(params, rows)
        return values.T, jac

    def losses_with_pullback(self, params: Tensor, *, generator: torch.Generator | None = None
                             ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        """Differentiates only the instances with a nonzero weight."""
        values = self.loss_matrix(params)

        def instance_pullback(w: Tensor) -> Tensor:
            served = w != 0
            if max(1, int(served.sum(1).max())) * self.dim >= PULLBACK_LOOP_VALUES:  # the padded rows x dim
                return self._instance_weighted_gradients(params, w)
            rows, valid = active_rows(served)
            _, grads = self._instance_gradients(params, rows)  # padding rows get weight 0 below
            return torch.einsum("mk,mkd->md", (w.gather(1, rows) * valid).to(grads), grads)

        return values, instance_pullback

    def active_jacobian(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                        ) -> tuple[Tensor, Tensor]:
        return self.loss_matrix(params), self._instance_gradients(params, rows)[1]

    def active_gradients(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                         ) -> Tensor:
        """Skips the forward pass over the instances a model does not serve."""
        return self._instance_gradients(params, rows)[1]

    def forward_rows(self, k: int) -> bool:
        return False

    def jacobian_first(self, m: int) -> bool:
        return False

    def key(self) -> tuple:
        return super().key() + (id(self.loss), id(self.data))

    def _instance_gradients(self, params: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
        """``(losses [m, k], gradients [m, k, dim])`` of the instances ``rows [m, k]``."""
        data, in_dims = self.data, self.in_dims
        per_instance = grad_and_value(scalar_loss(self.loss))

        def one_model(theta: Tensor, idx: Tensor) -> tuple[Tensor, Tensor]:
            grads, values = vmap(per_instance, in_dims=in_dims)(theta, *(t[idx] for t in data))
            return values, grads

        if self.vectorize:
            with vmap_errors():
                values, jac = vmap(one_model)(params, rows)
        else:
            pairs = [one_model(theta, idx) for theta, idx in zip(params, rows)]
            values, jac = torch.stack([v for v, _ in pairs]), torch.stack([j for _, j in pairs])
        return values.detach(), jac.detach()

    def _instance_weighted_gradients(self, params: Tensor, w: Tensor) -> Tensor:
        """``sum_i w[j, i] * grad L_i(theta_j)``, ``[m, dim]``: per model, one reverse pass through
        the weighted sum of the losses of the instances it weighs (the model's parameters shared
        by them), without the per-instance gradients or the padding of the models' rows to the
        longest."""
        data, loss, in_dims = self.data, scalar_loss(self.loss), self.in_dims
        out = torch.zeros_like(params)
        for j in range(params.shape[0]):
            idx = w[j].nonzero().squeeze(1)
            if idx.numel() == 0:
                continue
            weights, batch = w[j, idx], tuple(t[idx] for t in data)

            def weighted(theta: Tensor) -> Tensor:
                losses = vmap(loss, in_dims=in_dims)(theta, *batch)
                return (losses * weights.to(losses.dtype)).sum()

            with vmap_errors():
                out[j] = torch.func.grad(weighted)(params[j].detach())
        return out
