"""Transport with a lower and an upper bound on each model's load.

:func:`solve_bounded` solves::

    min_Γ <C, Γ>   s.t.  Γ 1_m = a,  l ≤ Γᵀ 1_n ≤ u,  Γ ≥ 0

Every objective is placed in full; model ``j`` takes at least ``l_j`` and at most ``u_j``. With
``l = u = b`` it is the balanced problem of :func:`most.transport.solve`; with ``l = 0`` and no
upper bound each objective goes to its cheapest model ("objectives select models"). Between
the two, models may serve groups of any size while none is left with less than ``l_j``.

It is solved exactly as a balanced problem by the network simplex: each model is split into a
*required* column of mass ``l_j`` and an *optional* column of mass ``u_j - l_j`` (both with
model ``j``'s costs), and one more zero-cost row of mass ``Σ u - 1`` takes up the optional
capacity left unused (it may not enter a required column). The plan is the first ``n`` rows
with the two columns of each model added. When every objective's cheapest model already meets the
bounds (the usual case once the models have settled), that plan is the optimum and no solve runs.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from .._validation import as_tensor, check_non_negative, host_marginal, matrix_range
from .._warnings import ConvergenceWarning
from ._exact import DEFAULT_MAX_ITER, exact_transport
from ._result import TransportResult

__all__ = ["solve_bounded"]


def _bound(x, *, name: str, m: int, default: float) -> np.ndarray:
    if x is None:
        return np.full(m, default)
    if isinstance(x, torch.Tensor):
        v = x.detach().to("cpu", torch.float64).reshape(-1).numpy()
    else:
        try:
            v = np.asarray(x, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"`{name}` must be a non-negative finite number or one per model ({m}); got {x!r}.")
    if v.size == 1:
        v = np.full(m, float(v[0]))
    if v.shape != (m,) or not np.isfinite(v).all() or (v < 0).any():
        raise ValueError(f"`{name}` must be a non-negative finite number or one per model ({m}); got {x!r}.")
    return v


def _greedy(c: torch.Tensor, a: torch.Tensor, low: np.ndarray, up: np.ndarray) -> TransportResult | None:
    """The plan that puts each row's whole mass ``a`` (float64, on ``c``'s device) at its cheapest
    column (the lowest index on ties), or ``None`` when its column sums leave the bounds. That
    plan is optimal without the column constraints, so when it meets them it is optimal for the
    bounded problem: O(n m) tensor operations on the cost's device (one sync, for the loads), no
    solve. The plan has ``c``'s dtype and layout (column-major, as the loss matrix comes, or not)."""
    # min(1) picks the lowest index on ties, as argmin does, at a tenth of argmin's time on the loss matrix's
    # column-major layout; the float64 host copy would give the same owners (the conversion is exact)
    values, owner = c.min(1)
    loads = torch.bincount(owner, weights=a, minlength=c.shape[1]).cpu().numpy()
    if (loads < low * (1 - 1e-12)).any() or (loads > up * (1 + 1e-12)).any():
        return None
    mass = a.to(c.dtype)
    if c.stride(0) == 1:  # column-major: the plan too
        plan = c.new_zeros(c.shape[::-1]).scatter_(0, owner[None], mass[None]).T
    else:
        plan = c.new_zeros(c.shape).scatter_(1, owner[:, None], mass[:, None])
    cost = float((values.to(torch.float64) * a).sum())
    return TransportResult(plan=plan, cost=cost, n_iter=1, converged=True)


def solve_bounded(cost, a, lower=None, upper=None, *, method: str = "exact", diversity: float = 0.0,
                  reg: float | None = None, target=None, price: float = 0.0) -> TransportResult:
    """The exact plan in which model ``j`` takes between ``lower[j]`` and ``upper[j]`` of the mass.

    Args:
        cost: ``C`` ``[n, m]`` (the plan has its dtype and device).
        a: The objective weights ``[n]``, on the simplex.
        lower, upper: Each model's least and largest mass: a number (the same for every model) or one value
            per model. ``None``: 0 and 1 (no bound). Feasible when ``Σ lower ≤ 1 ≤ Σ upper`` and
            ``lower ≤ upper``.
        method, diversity, reg: As for :func:`most.transport.solve`, which solves the split problem when ``method`` is
            not ``"exact"`` or ``diversity > 0`` (the diversity term then acts on the split
            columns, pushing each row onto one of them, and so onto one model).
        target, price: A soft balance within the bounds: each unit of mass a model takes above its
            ``target`` (a number or one per model, e.g. ``1/m``) costs ``price`` more (in the cost's
            units), so an objective leaves its place in the balance only for a model that costs it
            at least ``price`` less. With the loads summing to 1 this is the transport whose model
            marginal is penalised by ``price / 2`` times its total-variation distance to ``target``
            (unbalanced transport with a TV penalty). ``price = 0``: hard bounds alone.

    Returns:
        TransportResult: ``plan`` with rows ``a`` and column sums within the bounds (to float error),
            ``cost = <C, plan>``, ``n_iter = 1``, ``converged`` (otherwise a
            :class:`~most.ConvergenceWarning` is raised and the plan rounded onto the feasible set).

    Raises:
        ValueError: On a malformed cost or ``a``, bounds that no plan can meet (the message says which), or
            a ``diversity`` or ``price`` that is not a non-negative finite number.

    Examples:
        Model 0 is the cheaper for all four objectives; when each model must keep at least a
        quarter, model 1 takes the objective it costs least extra to move:

        >>> import torch
        >>> C = torch.tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0], [0.0, 4.0]])
        >>> a = torch.full((4,), 0.25)
        >>> (solve_bounded(C, a, lower=0.25).plan * 4).round().int().tolist()
        [[0, 1], [1, 0], [1, 0], [1, 0]]
        >>> (solve_bounded(C, a).plan * 4).round().int().tolist()
        [[1, 0], [1, 0], [1, 0], [1, 0]]
    """
    c_in = as_tensor(cost, name="cost").detach()
    lo, hi = matrix_range(c_in, name="cost")
    n, m = c_in.shape
    a64 = host_marginal(a, name="a", size=n)
    low = _bound(lower, name="lower", m=m, default=0.0)
    up = np.minimum(_bound(upper, name="upper", m=m, default=1.0), 1.0)
    if (low > up * (1 + 1e-6)).any():
        j = int(np.argmax(low - up))
        raise ValueError(f"`lower` exceeds `upper` for model {j} ({low[j]:.6g} > {up[j]:.6g}).")
    if low.sum() > 1 + 1e-6:
        raise ValueError(f"The lower bounds ask for {low.sum():.6g} of the mass, more than the whole (1): lower "
                         f"them (with uniform weights each model can be promised at most 1/m = {1 / m:.6g}).")
    if up.sum() < 1 - 1e-6:
        raise ValueError(f"The upper bounds leave room for only {up.sum():.6g} of the mass (< 1): raise them.")
    low = low * min(1.0, 1.0 / low.sum()) if low.sum() > 1 else low
    price = check_non_negative(price, name="price")
    diversity = check_non_negative(diversity, name="diversity")  # as most.transport.solve checks it
    if price > 0 and target is None:
        raise ValueError("`price` charges the load above `target`: give `target` too (e.g. 1/m for the balance).")
    if method == "exact" and diversity == 0 and price == 0:
        greedy = _greedy(c_in, torch.from_numpy(a64).to(c_in.device), low, up)
        if greedy is not None:  # every objective at its cheapest model already meets the bounds
            return greedy
    c = c_in.to("cpu", torch.float64).numpy()
    spare = max(up.sum() - 1.0, 0.0)
    # never worth entering: moving mass between real rows changes the cost by at most hi - lo (+ price) per unit
    big = hi + (hi - lo) + price + 1.0
    if price > 0:  # a third block: the load above the target, at the price
        cut = np.clip(_bound(target, name="target", m=m, default=0.0), low, up)
        cols = np.concatenate([low, cut - low, up - cut])
        offsets = np.concatenate([np.zeros(2 * m), np.full(m, price)])
    else:
        cols = np.concatenate([low, up - low])
        offsets = np.zeros(2 * m)
    blocks = len(cols) // m
    dummy = np.concatenate([np.full(m, big), np.full(len(cols) - m, lo)])
    ext_c = np.vstack([np.tile(c, blocks) + offsets, dummy[None]])
    ext_a = np.concatenate([a64, [spare]])
    total = ext_a.sum()

    def fold(ext: np.ndarray) -> np.ndarray:  # the blocks of each model added
        return ext[:n].reshape(n, blocks, m).sum(1) * total

    if method == "exact":
        def split_plan(costs: np.ndarray) -> tuple[np.ndarray, bool]:
            ext_c[:n] = np.tile(costs, blocks) + offsets
            ext, ok = exact_transport(ext_c, ext_a / total, cols / cols.sum(), max_iter=DEFAULT_MAX_ITER,
                                      bounds=(min(lo, float(costs.min())), big))
            return fold(ext), ok

        plan, converged = split_plan(c)
        # tau R(plan), R = -sum_i max_j plan_ij, is concave: minimise by linearising at the current plan (the
        # objective never increases) until the rows' largest entries stop moving
        for _ in range(100 if diversity > 0 else 0):
            owner = plan.argmax(1)
            step, ok = split_plan(c - diversity * (np.arange(m)[None] == owner[:, None]))
            converged = converged and ok
            if (step.argmax(1) == owner).all():
                plan = step
                break
            plan = step
    else:
        from ._solve import solve  # an iterative solver on the split problem

        res = solve(torch.from_numpy(ext_c), torch.from_numpy(ext_a / total), torch.from_numpy(cols / cols.sum()),
                    method=method, diversity=diversity, reg=reg)
        plan, converged = fold(res.plan.numpy()), res.converged
    if not converged:
        warnings.warn(f"solve_bounded: the {method} transport solver did not converge; the plan is rounded onto "
                      "the feasible set but may be suboptimal.", ConvergenceWarning, stacklevel=2)
    return TransportResult(plan=torch.from_numpy(plan).to(dtype=c_in.dtype, device=c_in.device),
                           cost=float(np.vdot(c, plan)), n_iter=1, converged=bool(converged))
