"""Semi-relaxed transport: one of the two marginal constraints is dropped.

* ``b = None`` ("objective selects model")::

      min_Γ <C, Γ>  s.t.  Γ ≥ 0,  Γ 1_m = a

  decouples over rows: row ``i`` puts its whole mass ``a_i`` on ``argmin_j C_ij``.
* ``a = None`` ("model selects objective")::

      min_Γ <C, Γ>  s.t.  Γ ≥ 0,  Γᵀ 1_n = b

  decouples over columns: column ``j`` puts ``b_j`` on ``argmin_i C_ij``.

The hard version (methods ``"exact"`` and ``"ipot"``) breaks ties by the first index. The
soft version (method ``"sinkhorn"``) is the solution of the entropic problem
``min <C, Γ> - ε H(Γ)`` under the one remaining constraint, i.e. a softmax:
``Γ_ij = a_i softmax_j(-C_ij / ε)`` (rows) or ``b_j softmax_i(-C_ij / ε)`` (columns).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor


def solve_relaxed(
    cost: Tensor, a: Tensor | None, b: Tensor | None, *, soft: bool, eps: float
) -> tuple[Tensor, int, bool]:
    """Returns ``(plan, 1, True)`` for float64 ``cost`` ``[n, m]``; exactly one of ``a``, ``b`` is ``None``.

    ``eps`` is the absolute entropic temperature, used only when ``soft``.

    >>> import torch
    >>> C = torch.tensor([[0.0, 1.0], [2.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    >>> a = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    >>> solve_relaxed(C, a, None, soft=False, eps=0.0)[0]
    tensor([[0.5000, 0.0000],
            [0.0000, 0.2500],
            [0.2500, 0.0000]], dtype=torch.float64)
    """
    dim = 1 if b is None else 0  # the axis along which each constrained line spreads its mass
    mass = cast(Tensor, a)[:, None] if b is None else b[None, :]  # b is None: a is given
    if soft:
        weights = torch.softmax(-cost / eps, dim=dim)
    else:
        idx = cost.argmin(dim=dim, keepdim=True)
        weights = torch.zeros_like(cost).scatter_(dim, idx, 1.0)
    return weights * mass, 1, True
