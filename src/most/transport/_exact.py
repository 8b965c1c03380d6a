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

    ``a`` and ``b`` must be positive (the caller removes zero-mass rows/columns). The cost
    is shifted and scaled to ``[0, 1]`` before the call (the optimal plan of an affine
    image ``α C + β``, ``α > 0``, is the same, since every feasible plan has total mass 1),
    so costs of any magnitude are handled alike. ``n_iter`` is 1 (one simplex call: POT
    does not report its pivot count). ``converged`` is ``log["result_code"] == 1``; when
    it is ``False`` (pivot cap hit) the plan is rounded onto the feasible set.
    """
    import ot  # local import: POT is slow to import

    n, m = cost.shape
    if n == 1 or m == 1:  # the marginals determine the plan
        return torch.outer(a, b) / b.sum(), 1, True
    c = cost.detach().cpu().numpy()
    lo, hi = c.min(), c.max()
    c = (c - lo) / (hi - lo) if hi > lo else np.zeros_like(c)  # a new float64 array
    a_np = a.detach().cpu().numpy()
    b_np = b.detach().cpu().numpy()
    b_np = b_np * (a_np.sum() / b_np.sum())  # POT wants equal masses to ~1e-6; make them exact
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # we raise our own ConvergenceWarning instead
        # The masses are made equal above, and the duals are not used: skip POT's checks.
        plan, log = ot.emd(a_np, b_np, c, numItermax=int(max_iter), log=True,
                           check_marginals=False, center_dual=False)
    converged = int(log.get("result_code", 0)) == 1
    out = torch.as_tensor(np.asarray(plan), dtype=torch.float64, device=cost.device)
    if not converged:  # an interrupted simplex may still route mass through artificial arcs
        out = round_to_feasible(out, a, b * (a.sum() / b.sum()))
    return out, 1, converged
