"""Entropic transport: log-domain Sinkhorn with ε-scaling.

Solves the entropic approximation of paper Eq. 4::

    min_Γ <C, Γ> - ε H(Γ)   s.t.  Γ ≥ 0,  Γ 1_m = a,  Γᵀ 1_n = b,   H(Γ) = -Σ Γ_ij (log Γ_ij - 1)

whose solution is ``Γ_ij = exp((f_i + g_j - C_ij) / ε)`` for dual potentials ``f`` ``[n]``
and ``g`` ``[m]``. The potentials are updated with log-sum-exp, never with the kernel
``exp(-C/ε)`` itself, so tiny ``ε`` does not underflow. ``ε`` is decreased geometrically
from the cost range down to its target, warm-starting the potentials (ε-scaling), which
keeps the number of iterations small at small ``ε``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._rounding import round_to_feasible

#: Default regularisation, relative to the cost range: ``ε = reg · (max C - min C)``.
DEFAULT_REG = 1e-3
#: Default cap on the total number of Sinkhorn iterations (all ε stages together).
DEFAULT_MAX_ITER = 10_000
#: Default tolerance on the L1 violation of the row marginal (columns are exact after each step).
#: The final rounding makes the marginals exact anyway; how close the cost comes to the exact
#: optimum at this tolerance: docs/solvers/transport.md.
DEFAULT_TOL = 1e-5

#: ε is divided by this factor from one stage to the next.
EPS_FACTOR = 4.0
#: Intermediate ε stages stop at this marginal violation (only the last stage uses ``tol``).
STAGE_TOL = 1e-3
#: The marginal violation is measured every this many iterations.
CHECK_EVERY = 10


def _row_error(f: Tensor, g: Tensor, cost: Tensor, eps: float, a: Tensor) -> float:
    plan_rows = torch.logsumexp((f[:, None] + g[None, :] - cost) / eps, dim=1).exp()
    return float((plan_rows - a).abs().sum())


def solve_sinkhorn(
    cost: Tensor, a: Tensor, b: Tensor, *, scale: float, reg: float, max_iter: int, tol: float
) -> tuple[Tensor, int, bool]:
    """Returns ``(plan, n_iter, converged)``; the plan is rounded onto ``U(a, b)``.

    ``cost`` is float64 ``[n, m]``; ``a`` ``[n]`` and ``b`` ``[m]`` are positive with equal
    mass. The cost is measured in units of ``scale`` (so ``ε = reg · scale``); callers pass
    the range of the user's cost. ``n_iter`` counts Sinkhorn iterations (one row and one
    column update each) over all ε stages; ``converged`` means the last stage (target ε)
    was reached with a row-marginal L1 violation ``≤ tol`` before the rounding.
    """
    c = (cost - cost.min()) / scale
    top = max(float(c.max()), reg)
    n_stages = max(1, math.ceil(math.log(top / reg) / math.log(EPS_FACTOR)) + 1) if top > reg else 1
    eps_list = [max(reg, top / EPS_FACTOR**k) for k in range(n_stages)]
    eps_list[-1] = reg
    log_a, log_b = a.log(), b.log()
    f = torch.zeros_like(a)
    g = torch.zeros_like(b)
    it = 0
    eps = eps_list[0]
    stage = -1
    for k, eps_k in enumerate(eps_list):
        if it >= max_iter:
            break
        stage, eps = k, eps_k
        stage_tol = tol if k == len(eps_list) - 1 else max(tol, STAGE_TOL)
        err = math.inf
        while it < max_iter:
            f = eps * (log_a - torch.logsumexp((g[None, :] - c) / eps, dim=1))
            g = eps * (log_b - torch.logsumexp((f[:, None] - c) / eps, dim=0))
            it += 1
            if it % CHECK_EVERY == 0 or it == max_iter:
                err = _row_error(f, g, c, eps, a)
                if err <= stage_tol:
                    break
        if err > stage_tol:  # budget spent in this stage
            break
    err = _row_error(f, g, c, eps, a)
    converged = stage == len(eps_list) - 1 and err <= tol
    plan = ((f[:, None] + g[None, :] - c) / eps).exp()
    return round_to_feasible(plan, a, b), it, converged
