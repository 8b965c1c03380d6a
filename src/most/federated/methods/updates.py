"""Combining the clients' updates into each model's direction, FedMGDA+'s box-constrained
min-norm, and the grouping of updates that splits one model into m."""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from ... import transport
from ..._host import to_device, to_host
from ..._validation import check_non_negative, check_positive_int
from ...methods import (
    Combiner,
    MinNorm,
    WeightedSum,
)


def combine_updates(combiner: Combiner, m: int, deltas: Tensor, pair_model: Tensor, pair_weight: Tensor) -> Tensor:
    """The direction ``[m, d]`` of each model from its pairs' updates: the pairs of model j
    (``pair_model == j``, in their order) are packed into ``updates [m, k, d]`` and ``weights [m, k]``
    (padding has weight 0) and handed to ``combiner``, as the centralised loop hands it the
    served objectives' gradients. A model without pairs gets a zero direction."""
    P, d = deltas.shape
    # the packing is index arithmetic on ``pair_model``'s device (the host, in the runtime), then
    # one copy of the indices and one of the weights to the updates' device
    order = torch.sort(pair_model, stable=True).indices  # the pairs of each model, in their order
    pair_model = pair_model[order]
    count = torch.bincount(pair_model, minlength=m)
    k = max(1, int(count.max())) if P else 1
    start = torch.cumsum(count, 0) - count
    slot = torch.arange(P, device=pair_model.device) - start[pair_model]
    order, model_at, slot = to_device(torch.stack([order, pair_model, slot]), deltas.device)
    packed = deltas.new_zeros(m, k, d)
    packed[model_at, slot] = deltas[order]
    weights = torch.zeros(m, k, dtype=torch.float64, device=deltas.device)
    weights[model_at, slot] = to_device(pair_weight.to(dtype=torch.float64), deltas.device)[order]
    direction, _ = combiner(packed, weights)
    return direction.to(deltas.dtype)


@dataclass(frozen=True)
class BoxMinNorm(Combiner):
    """FedMGDA+'s combination (Hu et al. 2022): each model's rows normalised to unit length,
    then the min-norm point of their hull with the weights in the box ``|lambda_i - 1/k| <= eps``
    (:func:`min_norm_box`; ``k`` = the model's rows with a positive weight)."""

    eps: float = 0.1
    active_only: ClassVar[bool] = True

    def __post_init__(self):
        check_non_negative(self.eps, name="eps")

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        m, n, _ = jacobian.shape
        device = jacobian.device
        direction = jacobian.new_zeros(m, jacobian.shape[-1])
        lam = torch.zeros(m, n, dtype=jacobian.dtype, device=device)
        # the models' unit rows and Gram matrices on the rows' device, then the m small QPs on the
        # host: one read of the active rows and one of the Gram matrices, not one per model
        (active,) = to_host([weights > 0])
        units = []
        for j in range(m):
            rows = to_device(torch.nonzero(active[j]).squeeze(1), device)
            if len(rows):
                u = jacobian[j, rows] / jacobian[j, rows].norm(dim=1, keepdim=True).clamp_min(1e-12)
                units.append((j, rows, u, u.double() @ u.double().T))
        for (j, rows, u, _), gram in zip(units, to_host([g for *_, g in units])):
            w = to_device(min_norm_box(gram, self.eps), device)
            direction[j] = (w.to(u)[:, None] * u).sum(0)
            lam[j, rows] = w.to(lam)
        return direction, lam


@functools.lru_cache(maxsize=1)
def _blas():
    """The BLAS libraries NumPy and SciPy loaded (SciPy's wheels bring their own), once."""
    import scipy.optimize  # noqa: F401  (loads SciPy's BLAS before the controller looks)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def min_norm_box(G: Tensor, eps: float) -> Tensor:
    """``argmin lambda^T G lambda`` over ``{lambda in simplex, |lambda_i - 1/k| <= eps}``.

    FedMGDA+'s capped min-norm problem, a small dense QP (k = clients of one model), solved
    with SciPy's SLSQP from the uniform weights (which are feasible). ``G`` is ``[k, k]``.

    The solve runs on one BLAS thread. SLSQP's answer changes in its last bits with the number
    of BLAS threads, and over a run those bits change the trajectory: with the machine's default
    thread count a table made on 2 cores would not repeat on 16, nor in a process pinned to one
    core. At these sizes more threads only cost (oversubscribed worker processes made the solve
    seven times slower).
    """
    from scipy.optimize import minimize

    k = G.shape[0]
    Gn = G.detach().double().cpu().numpy()
    Gn = 0.5 * (Gn + Gn.T)
    start = np.full(k, 1.0 / k)
    with _blas().limit(limits=1, user_api="blas"):
        res = minimize(lambda v: v @ Gn @ v, start, jac=lambda v: 2 * Gn @ v, method="SLSQP",
                       bounds=[(max(0.0, 1.0 / k - eps), min(1.0, 1.0 / k + eps))] * k,
                       constraints=[{"type": "eq", "fun": lambda v: v.sum() - 1.0, "jac": lambda v: np.ones(k)}],
                       options={"ftol": 1e-12, "maxiter": 500})
    lam = np.clip(res.x, max(0.0, 1.0 / k - eps), min(1.0, 1.0 / k + eps))
    return torch.as_tensor(lam / lam.sum(), dtype=torch.float64)


def balanced_update_groups(deltas: Tensor, m: int, generator: torch.Generator, max_iter: int = 50) -> Tensor:
    """Balanced spherical k-means of client updates: a group in ``0..m-1`` for each row of ``deltas``.

    The updates are scaled to unit norm (their direction, not their size, says which clients
    pull the same way). Centres are seeded by k-means++ from ``generator``; then, until the
    groups stop changing (at most ``max_iter`` times), the rows are assigned by the exact
    transport plan with uniform marginals on the squared distances to the centres (each group
    gets ``n/m`` rows; a row the plan splits goes to its largest share) and each centre becomes
    its group's normalised mean. With ``n <= m`` each row is a group of its own.
    """
    return update_groups(deltas, m, generator, balanced=True, max_iter=max_iter)


def update_groups(deltas: Tensor, m: int, generator: torch.Generator, *, balanced: bool,
                  max_iter: int = 50) -> Tensor:
    """Spherical k-means of client updates, balanced (:func:`balanced_update_groups`) or not
    (``balanced=False``: each row joins its nearest centre, so the groups take the sizes the
    updates show; a group left empty keeps its centre)."""
    n = deltas.shape[0]
    check_positive_int(m, name="m")
    if n == 0:
        raise ValueError("balanced_update_groups needs at least one client update; got none.")
    if not torch.isfinite(deltas).all():
        raise ValueError("balanced_update_groups: the client updates contain NaN or inf; training diverged. "
                         "Try a smaller local `lr` or server step.")
    if n <= m:
        return torch.arange(n, device=deltas.device)
    u = deltas.double()
    u = u / u.norm(dim=1, keepdim=True).clamp_min(1e-300)
    first = int(torch.randint(n, (1,), generator=generator))
    centres = [u[first]]
    for _ in range(1, m):  # k-means++: the next centre with probability proportional to D^2
        d2 = torch.cdist(u, torch.stack(centres)).min(1).values.square()
        p = d2 / d2.sum() if d2.sum() > 0 else torch.full_like(d2, 1.0 / n)
        centres.append(u[int(torch.multinomial(p.cpu().float(), 1, generator=generator))])
    c = torch.stack(centres)
    a = torch.full((n,), 1.0 / n, dtype=torch.float64)
    b = torch.full((m,), 1.0 / m, dtype=torch.float64)
    labels = None
    for _ in range(max_iter):
        if balanced:
            plan = transport.solve(torch.cdist(u, c).square().cpu(), a, b, method="exact").plan
            new = plan.argmax(1).to(deltas.device)
        else:
            new = torch.cdist(u, c).argmin(1)
        if labels is not None and torch.equal(new, labels):
            break
        labels = new
        for j in range(m):
            if (labels == j).any():  # an empty group keeps its centre
                mean = u[labels == j].sum(0)
                c[j] = mean / mean.norm().clamp_min(1e-300)
    return labels



def weighted_mean(params: Tensor, deltas: Tensor, pair_model: Tensor, weight: Tensor, server_lr: float) -> Tensor:
    """Deprecated: ``params - server_lr * combine_updates(WeightedSum(), ...)``."""
    warnings.warn("most.federated.methods.weighted_mean is deprecated; use combine_updates(most.WeightedSum(), ...) "
                  "and the update rule.", DeprecationWarning, stacklevel=2)
    return params - server_lr * combine_updates(WeightedSum(), params.shape[0], deltas, pair_model, weight)


def min_norm_combination(params: Tensor, deltas: Tensor, pair_model: Tensor, weight: Tensor, server_lr: float,
                         tol: float = 1e-6, coordinates: slice | None = None) -> Tensor:
    """Deprecated: ``params - server_lr * combine_updates(MinNorm(...), ...)`` (which also
    leaves out zero updates, so that they cannot stop a model)."""
    warnings.warn("most.federated.methods.min_norm_combination is deprecated; use combine_updates(most.MinNorm(), "
                  "...) and the update rule.", DeprecationWarning, stacklevel=2)
    coords = None if coordinates is None else (coordinates.start or 0, coordinates.stop)
    combiner = MinNorm(tol=tol, coordinates=coords)
    return params - server_lr * combine_updates(combiner, params.shape[0], deltas, pair_model, weight)
