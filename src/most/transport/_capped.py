"""Transport with a cap on each objective's share of a model, or on each model's load.

:func:`solve_capped` solves the capacitated transportation problem::

    min_Γ <C, Γ>   s.t.  Γ 1_m = a,  Γᵀ 1_n = b,  0 ≤ Γ_ij ≤ s · a_i

with ``s = max_share``: no model may hold more than the fraction ``s`` of an objective, so
each objective is spread over at least ``⌈1/s⌉`` models. With ``s = 1/k``, uniform ``a`` and
``n k / m`` a whole number, the constraint matrix is totally unimodular and the vertex plan
gives every objective exactly k models with ``a_i / k`` each, and every model ``n k / m``
objectives: a balanced "k models per objective" assignment. ``s = 1`` is the plain problem.

It is a linear program (``n m`` variables, ``n + m`` equalities with two nonzeros per
variable), passed to SciPy's HiGHS dual simplex as a sparse matrix, so its memory grows with
``n m``, not with ``(n + m) n m``; HiGHS returns a vertex.

:func:`solve_capacity` bounds the columns instead: every objective is placed in full, and
model ``j`` takes at most ``c · b_j`` (``c = 1`` is the balanced plan, a large ``c`` sends each
objective to its cheapest model)::

    min_Γ <C, Γ>   s.t.  Γ 1_m = a,  Γᵀ 1_n ≤ c · b,  Γ ≥ 0

It is the balanced problem with one more, zero-cost objective of mass ``(c - 1) / c`` that takes
up the unused capacity, solved exactly by the network simplex.
"""

from __future__ import annotations

import math
import sys
import warnings

import numpy as np
import torch

from .._validation import as_number, as_tensor, host_marginal, matrix_range
from .._warnings import ConvergenceWarning
from ._exact import DEFAULT_MAX_ITER, exact_transport
from ._result import TransportResult


def solve_capped(cost, a, b, *, max_share: float) -> TransportResult:
    """The exact transport plan under the cap ``Γ_ij ≤ max_share · a_i``.

    Args:
        cost: ``C`` ``[n, m]``, finite (tensor or array-like). The plan has its dtype and device.
        a, b: Objective weights ``[n]`` and model weights ``[m]``, each on the simplex.
        max_share: ``s`` in ``(0, 1]``: the largest share of an objective one model may hold. The problem
            is feasible exactly when ``s ≥ max_j b_j`` (a model can hold at most ``s`` in all;
            for uniform ``b``, ``s ≥ 1/m``).

    Returns:
        TransportResult: ``plan`` (marginals ``a``, ``b`` and the cap hold to float error), ``cost = <C, plan>``,
            ``n_iter`` (simplex iterations), ``converged``.

    Raises:
        ValueError: On a malformed cost, marginals off the simplex or of the wrong length, or a cap
            outside ``(0, 1]`` or below ``max(b)`` (infeasible).

    Examples:
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
    upper: np.ndarray = np.repeat(a64 * max_share, m)
    res = linprog(scaled.ravel(), A_eq=A, b_eq=np.concatenate([a64, b64])[:-1],
                  bounds=np.stack([np.zeros(n * m), upper], 1), method="highs-ds")
    if res.status != 0:  # cannot happen for a feasible cap; kept as a guard with a clear message
        raise RuntimeError(f"capped transport: HiGHS failed ({res.message}).")
    plan = torch.from_numpy(np.clip(res.x, 0.0, upper).reshape(n, m))
    return TransportResult(plan=plan.to(dtype=c_in.dtype, device=c_in.device), cost=float((c * plan).sum()),
                           n_iter=int(getattr(res, "nit", 0) or 0), converged=True)


def solve_capacity(cost, a, b, *, capacity: float) -> TransportResult:
    """The exact transport plan in which model ``j`` takes at most ``capacity · b_j``.

    Solves ``min <C, Γ>`` over ``Γ ≥ 0`` with row sums ``a`` (every objective placed in full)
    and column sums at most ``capacity · b``. With uniform ``b = 1/m`` each model serves at most
    ``capacity · n / m`` objectives: ``capacity = 1`` is the balanced plan of
    :func:`most.transport.solve` (``method="exact"``, the same plan bit for bit), and
    ``capacity ≥ m`` drops the balance (each objective goes to its cheapest model). Between the
    two, the models that suit many objectives may take up to ``capacity`` times their share.

    The problem is solved as a balanced one: the rows ``a / capacity`` and one more, zero-cost
    row of mass ``1 - 1 / capacity`` that takes up the capacity left unused, against the
    columns ``b``; the network simplex (POT's ``ot.emd``) gives an exact vertex, and the plan is
    its first ``n`` rows times ``capacity``.

    Args:
        cost, a, b: As for :func:`solve_capped`: ``C`` ``[n, m]`` (the plan has its dtype and device), the
            objective weights ``[n]`` and the model weights ``[m]``, each on the simplex.
        capacity: ``c ≥ 1``, finite: how many times its weight ``b_j`` model ``j`` may take. Values past
            ``1 / min_j b_j`` (over ``b_j > 0``) constrain nothing more and are solved as that value.

    Returns:
        TransportResult: ``plan`` (rows ``a``, columns at most ``capacity · b``, to float error),
            ``cost = <C, plan>``, ``n_iter = 1`` (one network-simplex call), ``converged`` (the
            simplex reached optimality; otherwise a :class:`~most.ConvergenceWarning` is raised and
            the plan is rounded onto the feasible set).

    Raises:
        ValueError: On a malformed cost, marginals off the simplex or of the wrong length, or a capacity
            that is not a finite number ``≥ 1``.

    Examples:
        Four objectives, two models; model 0 is the cheaper for all of them. Balanced, each model
        takes two; with capacity 1.5, model 0 takes three:

        >>> import torch
        >>> C = torch.tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0], [0.0, 4.0]])
        >>> a, b = torch.full((4,), 0.25), torch.full((2,), 0.5)
        >>> (solve_capacity(C, a, b, capacity=1.0).plan * 4).round().int().tolist()
        [[0, 1], [0, 1], [1, 0], [1, 0]]
        >>> (solve_capacity(C, a, b, capacity=1.5).plan * 4).round().int().tolist()
        [[0, 1], [1, 0], [1, 0], [1, 0]]
    """
    c_in = as_tensor(cost, name="cost")
    c = c_in.detach().to("cpu", torch.float64).numpy()
    lo, hi = matrix_range(c, name="cost")  # checks shape and finiteness too
    n, m = c.shape
    cap = as_number(capacity, name="capacity", kind="a finite number >= 1")
    if isinstance(cap, int) and cap > sys.float_info.max:
        # an int too large for a float is finite and past any 1 / min(b): as loose as the largest float
        cap = sys.float_info.max
    if not (math.isfinite(cap) and cap >= 1):
        raise ValueError(f"`capacity` must be a finite number >= 1 (1 is the balanced plan, 1 / min(b) or more "
                         f"sends each objective to its cheapest model); got {capacity!r}.")
    a64 = host_marginal(a, name="a", size=n)
    b64 = host_marginal(b, name="b", size=m)
    if cap == 1:  # the balanced problem, solved as most.transport.solve solves it
        plan, converged = exact_transport(c, a64, b64, max_iter=DEFAULT_MAX_ITER, bounds=(lo, hi))
    else:
        loosest = 1.0 / float(b64[b64 > 0].min())  # every column can then take all the mass
        cap = float(min(cap, loosest)) if cap > loosest * (1 + 1e-9) else float(cap)
        # the extra row's cost is a constant (its mass is fixed): lo keeps the cost's range
        ext_c = np.vstack([c, np.full((1, m), lo)])
        ext_a = np.concatenate([a64 / cap, [1.0 - 1.0 / cap]])
        ext, converged = exact_transport(ext_c, ext_a, b64, max_iter=DEFAULT_MAX_ITER, bounds=(lo, hi))
        plan = ext[:n] * cap
    if not converged:
        warnings.warn(f"solve_capacity: the network simplex did not converge (max_iter={DEFAULT_MAX_ITER}); the "
                      "plan is rounded onto the feasible set but may be suboptimal.", ConvergenceWarning, stacklevel=2)
    return TransportResult(plan=torch.from_numpy(plan).to(dtype=c_in.dtype, device=c_in.device),
                           cost=float(np.vdot(c, plan)), n_iter=1, converged=bool(converged))
