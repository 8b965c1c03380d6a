"""The evaluations a round asks of a problem, as one protocol.

A problem's objectives are evaluated at the m models ``params [m, dim]`` in a few ways: the
loss matrix, the reverse pass of weighted losses (linear combiners), and the gradients of
selected objectives (min-norm combiners). :class:`Evaluator` declares them once; a kind of
problem that computes them in its own way (:meth:`most.Problem.from_datasets`) implements it,
and :class:`most.Problem` hands its evaluations to it.

Every method takes the run's ``generator``: an evaluator whose objectives are estimated on
mini-batches, or whose module has random layers such as dropout (``stochastic``), draws them
from it, so a run is reproducible and resumes from a checkpoint (which holds the generator's
state). Without a generator it evaluates the objectives exactly (on all data, random layers
from a fixed seed).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


class Evaluator:
    """How a problem's objectives are evaluated at ``params [m, dim]``.

    Shapes are those of :class:`most.Problem`'s methods of the same names, which check
    ``params`` and ``rows`` before they call these.
    """

    #: the number of objectives n
    n_objectives: int
    #: whether evaluations with a generator draw from it (mini-batches, random layers' masks):
    #: runs of :func:`most.fit_batch` then keep their evaluations apart, each with its own draws
    stochastic: bool = False
    #: whether :meth:`active_gradients` computes a selected objective's gradient from that
    #: objective's own data alone (per instance, per dataset), which is cheaper than a reverse pass
    #: of the weighted losses over every objective when few objectives are selected
    rows_alone: bool = False

    def loss_matrix(self, params: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        """``L[i, j] = L_i(theta_j)``, ``[n, m]``."""
        raise NotImplementedError

    def losses_with_pullback(self, params: Tensor, *, generator: torch.Generator | None = None
                             ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        """The loss matrix ``[n, m]`` and ``pullback(w [m, n]) -> sum_i w[j, i] grad L_i(theta_j)``,
        ``[m, dim]``, from the same evaluation."""
        raise NotImplementedError

    def active_jacobian(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                        ) -> tuple[Tensor, Tensor]:
        """The loss matrix ``[n, m]`` and the gradients of objectives ``rows [m, k]``, ``[m, k, dim]``."""
        raise NotImplementedError

    def jacobian(self, params: Tensor, *, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """The loss matrix ``[n, m]`` and every objective's gradient, ``[m, n, dim]``."""
        rows = torch.arange(self.n_objectives, device=params.device).expand(params.shape[0], -1)
        return self.active_jacobian(params, rows, generator=generator)

    def active_gradients(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                         ) -> Tensor:
        """The gradients of :meth:`active_jacobian` alone."""
        return self.active_jacobian(params, rows, generator=generator)[1]

    def forward_rows(self, k: int) -> bool:
        """Whether :meth:`active_jacobian` computes ``k`` rows a model in forward mode: passes that
        give the derivatives of every objective, so :meth:`jacobian` cut to the rows equals them,
        value for value, at the same cost."""
        return False

    def jacobian_first(self, m: int) -> bool:
        """Whether a round of ``m`` models whose combiner reads the served rows only should ask for
        :meth:`jacobian` instead of the loss matrix: when its passes are sure to give every
        objective's derivatives anyway (:meth:`forward_rows`), they also give the losses, and one
        evaluation replaces two."""
        return False

    def key(self) -> tuple:
        """Evaluators with equal keys compute the same losses from the same parameters (runs of
        :func:`most.fit_batch` on them share one evaluation)."""
        return (id(self),)


def check_weights(w: Tensor, m: int, n: int) -> Tensor:
    """``w`` if it is a tensor of combination weights ``[m, n]`` (one row per model); otherwise a
    ``ValueError`` that names the shape wanted and the one given."""
    if not isinstance(w, Tensor) or w.shape != (m, n):
        raise ValueError(f"weights must have shape [m={m}, n={n}]; got "
                         f"{tuple(w.shape) if isinstance(w, Tensor) else type(w).__name__}.")
    return w


def active_rows(active: Tensor) -> tuple[Tensor, Tensor]:
    """``active [m, n]`` (bool) -> ``(rows [m, k], valid [m, k])``: each model's active objectives,
    in index order, padded to the longest list with copies of the model's first one."""
    k = max(1, int(active.sum(1).max()))
    # stable sort puts the active objectives first, in index order
    order = torch.sort((~active).to(torch.uint8), dim=1, stable=True).indices[:, :k]
    valid = active.gather(1, order)
    return torch.where(valid, order, order[:, :1]), valid
