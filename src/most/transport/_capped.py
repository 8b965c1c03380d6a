"""Transport with a cap on each objective's share of a model.

Solves the capacitated transportation problem::

    min_Γ <C, Γ>   s.t.  Γ 1_m = a,  Γᵀ 1_n = b,  0 ≤ Γ_ij ≤ s · a_i

with ``s = max_share``: no model may hold more than the fraction ``s`` of an objective, so
each objective is spread over at least ``⌈1/s⌉`` models. With ``s = 1/k``, uniform ``a`` and
``n k / m`` a whole number, the constraint matrix is totally unimodular and the vertex plan
gives every objective exactly k models with ``a_i / k`` each, and every model ``n k / m``
objectives: a balanced "k models per objective" assignment. ``s = 1`` is the plain problem.

It is a linear program (``n m`` variables, ``n + m`` equalities with two nonzeros per
variable), passed to SciPy's HiGHS dual simplex as a sparse matrix, so its memory grows with
``n m``, not with ``(n + m) n m``; HiGHS returns a vertex.
"""

from __future__ import annotations

import numpy as np
import torch

from .._validation import as_number, as_tensor, host_marginal, matrix_range
from ._result import TransportResult


def solve_capped(cost, a, b, *, max_share: float) -> TransportResult:
    """The exact transport plan under the cap ``Γ_ij ≤ max_share · a_i``.

    Parameters
    ----------
    cost:
        ``C`` ``[n, m]``, finite (tensor or array-like). The plan has its dtype and device.
    a, b:
        Objective weights ``[n]`` and model weights ``[m]``, each on the simplex.
    max_share:
        ``s`` in ``(0, 1]``: the largest share of an objective one model may hold. The problem
        is feasible exactly when ``s ≥ max_j b_j`` (a model can hold at most ``s`` in all;
        for uniform ``b``, ``s ≥ 1/m``).

    Returns
    -------
    TransportResult
        ``plan`` (marginals ``a``, ``b`` and the cap hold to float error), ``cost = <C, plan>``,
        ``n_iter`` (simplex iterations), ``converged``.

    Raises
    ------
    ValueError
        On a malformed cost, marginals off the simplex or of the wrong length, or a cap
        outside ``(0, 1]`` or below ``max(b)`` (infeasible).

    Examples
    --------
    Three objectives on two models each of the three, every model serving two of them
    (each objective's two cheapest models):

    >>> import torch
    >>> C = torch.tensor([[0.0, 1.0, 2.0], [0.0, 2.0, 1.0], [2.0, 0.0, 1.0]])
    >>> res = solve_capped(C, torch.full((3,), 1 / 3), torch.full((3,), 1 / 3), max_share=0.5)
    >>> (res.plan * 6).round().int().tolist()   # in units of a_i / 2
    [[1, 1, 0], [1, 0, 1], [0, 1, 1]]
    >>> round(res.cost, 6)
    0.5
    """
    from scipy import sparse  # local imports, as POT's
    from scipy.optimize import linprog

    c_in = as_tensor(cost, name="cost")
    c = c_in.detach().to("cpu", torch.float64)
    lo, hi = matrix_range(c, name="cost")  # checks shape and finiteness too
    n, m = c.shape
    share = as_number(max_share, name="max_share", kind="a number in (0, 1]")
    if not 0 < share <= 1:
        raise ValueError(f"`max_share` must be a number in (0, 1]; got {max_share!r}.")
    max_share = float(share)
    a64 = host_marginal(a, name="a", size=n)
    b64 = host_marginal(b, name="b", size=m)
    if b64.max() > max_share * (1 + 1e-9):  # the cap lets a model hold at most max_share in all
        j = int(b64.argmax())
        raise ValueError(
            f"`max_share`={max_share:g} is infeasible: model {j} must receive b[{j}]={b64[j]:.4g} of the mass, "
            f"but a cap of max_share on each objective's share lets a model hold at most {max_share:g}. "
            f"Use max_share >= max(b) (>= 1/m = {1 / m:.4g} for uniform b)."
        )
    scaled = ((c - lo) / (hi - lo) if hi > lo else torch.zeros_like(c)).numpy()  # same plan, better conditioned
    # Γ 1_m = a and Γᵀ 1_n = b on the row-major Γ: variable i m + j sits in row i and in row n + j
    # (the last equality is implied by the others and dropped)
    var = np.arange(n * m)
    A = sparse.csr_array((np.ones(2 * n * m), (np.concatenate([var // m, n + var % m]), np.tile(var, 2))),
                         shape=(n + m, n * m))[:-1]
    upper = np.repeat(a64 * max_share, m)
    res = linprog(scaled.ravel(), A_eq=A, b_eq=np.concatenate([a64, b64])[:-1],
                  bounds=np.stack([np.zeros(n * m), upper], 1), method="highs-ds")
    if res.status != 0:  # cannot happen for a feasible cap; kept as a guard with a clear message
        raise RuntimeError(f"capped transport: HiGHS failed ({res.message}).")
    plan = torch.from_numpy(np.clip(res.x, 0.0, upper).reshape(n, m))
    return TransportResult(plan=plan.to(dtype=c_in.dtype, device=c_in.device), cost=float((c * plan).sum()),
                           n_iter=int(getattr(res, "nit", 0) or 0), converged=True)
