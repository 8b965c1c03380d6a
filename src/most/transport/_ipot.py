"""Exact transport by the inexact proximal point method (IPOT).

Xie, Wang, Wang & Zha, *A fast proximal point method for computing exact Wasserstein
distance*, UAI 2020. Each outer step solves, approximately, the proximal problem::

    Γ^{t+1} = argmin_{Γ ∈ U(a, b)} <C, Γ> + β KL(Γ ‖ Γ^t)

whose solution is ``diag(u) (exp(-C/β) ⊙ Γ^t) diag(v)``; the scalings ``u``, ``v`` are
updated by ``L`` Sinkhorn steps per outer step, with ``v`` carried over from one outer
step to the next (Algorithm 1 of the paper). Unlike entropic Sinkhorn, the fixed point is
the *unregularised* optimum, so IPOT converges to the exact LP solution with a moderate
``β``. Everything is done in the log domain (``log Γ``, ``log u``, ``log v``), so neither
the kernel nor the plan ever underflows during the iterations.

Warm start: a multiplicative method can never revive an entry that is zero in its start
(``Γ^{t+1}_ij ∝ Γ^t_ij``), so starting from a hard assignment would freeze the support
forever. A user ``init`` is therefore mixed with the independent coupling::

    Γ^0 = (1 - δ) init + δ a bᵀ,   δ = 0.5,

which is strictly positive (where ``a_i b_j > 0``) yet still biased towards ``init``.
The final plan is rounded onto ``U(a, b)`` (Altschuler et al. 2017), so its marginals are
exact even when the iterations stop early.

Defaults: ``β = 0.3`` times the cost range (a small ``β`` can stall: entries pushed to
``exp(-80)`` during the transient take practically forever to come back; a large one is
accurate but slow), ``L = 1`` inner step, ``tol = 1e-6`` on the L1 change of the plan,
``max_iter = 5000``. A tighter ``tol`` is rarely reachable within a few thousand steps, because
the linear rate is set by the smallest reduced cost over ``β``. How they were chosen, and the
accuracy they give: docs/solvers/transport.md.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._rounding import round_to_feasible

#: Default proximal step, relative to the cost range: ``β = reg · (max C - min C)``.
DEFAULT_BETA = 0.3
#: Default cap on the number of proximal (outer) steps.
DEFAULT_MAX_ITER = 5_000
#: Default tolerance on the L1 change of the plan between two outer steps.
DEFAULT_TOL = 1e-6
#: Sinkhorn scalings per proximal step (the paper's ``L``; 1 is the paper's choice).
INNER_ITER = 1
#: Weight of the independent coupling ``a bᵀ`` mixed into a warm start.
WARM_START_MIX = 0.5


def solve_ipot(
    cost: Tensor,
    a: Tensor,
    b: Tensor,
    *,
    scale: float,
    beta: float,
    max_iter: int,
    tol: float,
    init: Tensor | None = None,
    inner_iter: int = INNER_ITER,
) -> tuple[Tensor, int, bool]:
    """Returns ``(plan, n_iter, converged)``; the plan is rounded onto ``U(a, b)``.

    ``cost`` is float64 ``[n, m]``, ``a`` ``[n]`` and ``b`` ``[m]`` positive with equal
    mass, ``init`` an optional feasible ``[n, m]`` plan. The cost is measured in units of
    ``scale`` (``β = beta · scale``). ``n_iter`` is the number of proximal steps;
    ``converged`` means the L1 change of the plan fell to ``≤ tol``.
    """
    c = (cost - cost.min()) / scale
    indep = torch.outer(a, b) / b.sum()
    start = indep if init is None else (1.0 - WARM_START_MIX) * init.clamp_min(0.0) + WARM_START_MIX * indep
    log_plan = start.log()
    plan = start
    log_a, log_b = a.log(), b.log()
    g = torch.zeros_like(b)
    step = c / beta
    converged = False
    it = 0
    while it < max_iter:
        k = log_plan - step
        for _ in range(inner_iter):
            f = log_a - torch.logsumexp(k + g[None, :], dim=1)
            g = log_b - torch.logsumexp(k + f[:, None], dim=0)
        log_plan = k + f[:, None] + g[None, :]
        new_plan = log_plan.exp()
        it += 1
        change = float((new_plan - plan).abs().sum())
        plan = new_plan
        if change <= tol:
            converged = True
            break
    return round_to_feasible(plan, a, b), it, converged
