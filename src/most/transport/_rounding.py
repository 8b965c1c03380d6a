"""Projection of an approximate plan onto the transport polytope.

Implements Algorithm 2 ("ROUND") of Altschuler, Weed & Rigollet, *Near-linear time
approximation algorithms for optimal transport via Sinkhorn iteration*, NeurIPS 2017:

1. scale each row down so that its sum is at most ``a_i``;
2. scale each column down so that its sum is at most ``b_j``;
3. add the rank-one correction ``err_a err_bᵀ / ‖err_a‖₁`` where ``err_a = a - Γ1`` and
   ``err_b = b - Γᵀ1`` (both non-negative after steps 1–2).

The result is non-negative with marginals exactly ``a`` and ``b`` (up to float error) and
``‖round(F) - F‖₁ ≤ 2 (‖F1 - a‖₁ + ‖Fᵀ1 - b‖₁)``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def round_to_feasible(plan: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Altschuler–Weed–Rigollet rounding of ``plan`` ``[n, m]`` onto ``U(a, b)``.

    ``a`` (``[n]``) and ``b`` (``[m]``) must have the same total mass. Rows / columns whose
    current sum is zero are left untouched by the scaling steps (their deficit is filled
    by the rank-one correction).

    >>> import torch
    >>> F = torch.tensor([[0.5, 0.5], [0.0, 0.2]], dtype=torch.float64)
    >>> a = torch.tensor([0.5, 0.5], dtype=torch.float64)
    >>> b = torch.tensor([0.3, 0.7], dtype=torch.float64)
    >>> P = round_to_feasible(F, a, b)
    >>> bool(torch.allclose(P.sum(1), a) and torch.allclose(P.sum(0), b))
    True
    """
    plan = plan.clamp_min(0.0)  # a copy: the caller's tensor is never modified
    row = plan.sum(1)
    x = torch.where(row > a, a / torch.where(row > 0, row, torch.ones_like(row)), torch.ones_like(row))
    plan.mul_(x[:, None])
    col = plan.sum(0)
    y = torch.where(col > b, b / torch.where(col > 0, col, torch.ones_like(col)), torch.ones_like(col))
    plan.mul_(y[None, :])
    err_a = (a - plan.sum(1)).clamp_min(0.0)
    err_b = (b - plan.sum(0)).clamp_min(0.0)
    total = err_a.sum()
    if float(total) > 0.0:
        plan.addr_(err_a, err_b, alpha=1.0 / float(total))
    return plan
