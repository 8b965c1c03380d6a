"""Exact transport by the network simplex (POT's ``ot.emd``).

Solves the linear program of paper Eq. 4 (``τ = 0``)::

    min_Γ <C, Γ>   s.t.  Γ ≥ 0,  Γ 1_m = a,  Γᵀ 1_n = b

with ``C`` ``[n, m]``. The network simplex returns a vertex of the transport polytope, so
the plan has at most ``n + m - 1`` non-zeros (paper Proposition 1).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor

from ._rounding import round_to_feasible

#: Default cap on network-simplex pivots.
DEFAULT_MAX_ITER = 10_000_000


def solve_exact(cost: Tensor, a: Tensor, b: Tensor, *, max_iter: int) -> tuple[Tensor, int, bool]:
    """Returns ``(plan, n_iter, converged)`` for float64 ``cost`` ``[n, m]``, ``a`` ``[n]``, ``b`` ``[m]``.

    ``a`` and ``b`` must be positive (the caller removes zero-mass rows/columns); see
    :func:`exact_plan`, which this wraps for tensors. When ``converged`` is ``False`` (pivot
    cap hit) the plan is rounded onto the feasible set.
    """
    n, m = cost.shape
    if n == 1 or m == 1:  # the marginals determine the plan
        return torch.outer(a, b) / b.sum(), 1, True
    plan, converged = exact_plan(cost.detach().cpu().numpy(), a.detach().cpu().numpy(),
                                 b.detach().cpu().numpy(), max_iter=max_iter)
    out = torch.as_tensor(plan, dtype=torch.float64, device=cost.device)
    if not converged:  # an interrupted simplex may still route mass through artificial arcs
        out = round_to_feasible(out, a, b * (a.sum() / b.sum()))
    return out, 1, converged


def exact_plan(cost: np.ndarray, a: np.ndarray, b: np.ndarray, *, max_iter: int,
               bounds: tuple[float, float] | None = None) -> tuple[np.ndarray, bool]:
    """The network-simplex plan of float64 NumPy ``cost`` ``[n, m]`` with positive ``a``, ``b``:
    returns ``(plan, converged)``. ``bounds``: ``(min, max)`` of ``cost`` when the caller has them.

    The cost is shifted and scaled to ``[0, 1]`` before the call (the optimal plan of an
    affine image ``α C + β``, ``α > 0``, is the same, since every feasible plan has total
    mass 1), so costs of any magnitude are handled alike. ``converged`` is
    ``log["result_code"] == 1``; when it is ``False`` the plan may violate the marginals
    and the caller rounds it.
    """
    import ot  # local import: POT is slow to import

    lo, hi = (cost.min(), cost.max()) if bounds is None else bounds
    c = (cost - lo) / (hi - lo) if hi > lo else np.zeros_like(cost)  # a new float64 array
    b = b * (a.sum() / b.sum())  # POT wants equal masses to ~1e-6; make them exact
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # we raise our own ConvergenceWarning instead
        # The masses are made equal above, and the duals are not used: skip POT's checks.
        plan, log = ot.emd(a, b, c, numItermax=int(max_iter), log=True,
                           check_marginals=False, center_dual=False)
    return np.asarray(plan), int(log.get("result_code", 0)) == 1
