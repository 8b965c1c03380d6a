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

from ._rounding import round_to_feasible

#: Default cap on network-simplex pivots.
DEFAULT_MAX_ITER = 10_000_000


def exact_transport(cost: np.ndarray, a: np.ndarray, b: np.ndarray, *, max_iter: int,
                    bounds: tuple[float, float] | None = None) -> tuple[np.ndarray, bool]:
    """The exact plan of float64 NumPy ``cost`` ``[n, m]`` with validated marginals ``a`` ``[n]``,
    ``b`` ``[m]`` (non-negative, summing to 1): returns ``(plan, converged)``, a new array.

    Zero-mass rows and columns get nothing and are left out of the solve; when one row or one
    column is left, the marginals determine the plan; otherwise :func:`exact_plan` runs the
    network simplex. When ``converged`` is ``False`` (pivot cap hit) the plan is rounded onto
    the feasible set. ``bounds``: ``(min, max)`` of ``cost`` when the caller has them.
    Sums of the marginals are torch's (NumPy's pairwise sum can differ in the last bit, which
    is enough to change the simplex's choice between tied optimal plans).
    """
    rows, cols = a > 0, b > 0
    full = bool(rows.all() and cols.all())
    sub_a, sub_b = (a, b) if full else (a[rows], b[cols])
    sub_c = cost if full else cost[np.ix_(rows, cols)]
    ta, tb = torch.from_numpy(sub_a), torch.from_numpy(sub_b)
    if sub_c.shape[0] == 1 or sub_c.shape[1] == 1:  # the marginals determine the plan
        sub, converged = (torch.outer(ta, tb) / tb.sum()).numpy(), True
    else:
        sub, converged = exact_plan(sub_c, sub_a, sub_b, max_iter=max_iter, bounds=bounds if full else None)
        if not converged:  # an interrupted simplex may still route mass through artificial arcs
            sub = round_to_feasible(torch.from_numpy(sub), ta, tb * (ta.sum() / tb.sum())).numpy()
    if full:
        return sub, converged
    plan = np.zeros_like(cost)
    plan[np.ix_(rows, cols)] = sub
    return plan, converged


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
