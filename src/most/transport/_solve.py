""":func:`solve`: the checks, the host-side fast path of MosT's plan, the general path
(``τ = 0`` solvers and the diversity loop), and the convergence report."""

from __future__ import annotations

import math
import warnings
from functools import partial
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from .._validation import (
    as_tensor,
    check_non_negative,
    check_positive,
    check_positive_int,
    host_marginal,
    matrix_range,
    simplex_atol,
    simplex_stats,
)
from .._warnings import ConvergenceWarning
from . import _exact, _ipot, _newton, _sinkhorn
from ._diversity import minimise_with_diversity, objective
from ._exact import exact_transport
from ._ipot import solve_ipot
from ._newton import solve_newton
from ._relaxed import solve_relaxed
from ._result import TransportResult
from ._sinkhorn import solve_sinkhorn

__all__ = ["solve", "METHODS", "INIT_ATOL"]

METHODS = ("exact", "sinkhorn", "newton", "ipot")
#: Tolerance on the marginals of a user-supplied ``init``.
INIT_ATOL = 1e-6

_DEFAULTS = {
    # method: (reg, max_iter, tol)
    "exact": (None, _exact.DEFAULT_MAX_ITER, None),
    "sinkhorn": (_sinkhorn.DEFAULT_REG, _sinkhorn.DEFAULT_MAX_ITER, _sinkhorn.DEFAULT_TOL),
    "newton": (_sinkhorn.DEFAULT_REG, _newton.DEFAULT_MAX_ITER, _newton.DEFAULT_TOL),
    "ipot": (_ipot.DEFAULT_BETA, _ipot.DEFAULT_MAX_ITER, _ipot.DEFAULT_TOL),
}


def solve(cost, a, b, *, method: str = "exact", diversity: float = 0.0, reg: float | None = None,
          max_iter: int | None = None, tol: float | None = None, init=None) -> TransportResult:
    """Solves the (diversity-regularised, possibly semi-relaxed) transport problem.

    Computes (paper Eqs. 2–4 and 6)::

        min_{Γ ≥ 0, Γ 1_m = a, Γᵀ 1_n = b}  <C, Γ> + τ R(Γ),    R(Γ) = -Σ_i max_j Γ_ij

    Args:
        cost: ``C``, shape ``[n, m]`` (n objectives × m models), finite. Tensor or array-like.
            The returned plan has its dtype and device; all computation is in float64.
        a: Objective weights ``[n]`` on the simplex, or ``None`` to drop the row constraint
            (semi-relaxed "model selects objective": column ``j`` puts ``b_j`` on its
            lowest-cost row).
        b: Model weights ``[m]`` on the simplex, or ``None`` to drop the column constraint
            (semi-relaxed "objective selects model": row ``i`` puts ``a_i`` on its lowest-cost
            column). ``a`` and ``b`` cannot both be ``None``.
        method: ``"exact"`` (network simplex, vertex plan), ``"sinkhorn"`` (log-domain entropic
            OT with ε-scaling), ``"newton"`` (the same entropic plan by Newton's method on the
            semi-dual; fastest for large n and few models) or ``"ipot"`` (inexact proximal
            point, converges to the exact plan). For a semi-relaxed problem
            ``"exact"``/``"ipot"`` give the hard argmin plan (ties: first index) and
            ``"sinkhorn"``/``"newton"`` the softmax ``a_i softmax_j(-C_ij / ε)``.
        diversity: ``τ ≥ 0``, weight of the diversity regulariser ``R`` (paper Eq. 3). ``τ > 0``
            is solved by repeated linearisation; see :mod:`most.transport._diversity`.
        reg: Relative regularisation: ``ε = reg · (max C - min C)`` for ``"sinkhorn"`` and
            ``"newton"`` (default ``1e-3``) and the proximal step ``β = reg · (max C - min C)``
            for ``"ipot"`` (default ``0.3``). Ignored by ``"exact"``. Relative to the cost
            range, so one value works for costs of any scale.
        max_iter: ``"exact"``: network-simplex pivots (default ``10_000_000``); ``"sinkhorn"``:
            total iterations over all ε stages (default ``10_000``); ``"newton"``: Newton steps
            over all ε stages (default ``500``); ``"ipot"``: proximal steps (default ``5_000``).
        tol: ``"sinkhorn"`` / ``"newton"``: L1 violation of the row / column marginal before
            rounding (default ``1e-5``); ``"ipot"``: L1 change of the plan between steps
            (default ``1e-6``). The returned plan is rounded onto the feasible set either way,
            so these trade optimality (about 1e-4 relative at the defaults), never
            feasibility. Ignored by ``"exact"``.
        init: Optional feasible plan ``[n, m]`` (non-negative, marginals ``a``/``b`` within
            ``1e-6``). ``"ipot"`` warm-starts from ``(1 - δ) init + δ a bᵀ`` with ``δ = 0.5``
            (a zero entry could never be revived otherwise). With ``diversity > 0`` every
            method also uses it as the starting point of the linearisation loop when its
            objective is lower than that of the ``τ = 0`` solution. Otherwise ``"exact"``
            and ``"sinkhorn"`` only validate it.

    Returns:
        TransportResult: ``plan`` ``[n, m]``, ``cost = <C, plan> + τ R(plan)``, ``n_iter``,
        ``converged``. A :class:`~most.ConvergenceWarning` is emitted when ``converged`` is
        ``False``; the plan still satisfies the marginals.

    Raises:
        ValueError: On a malformed cost, marginals off the simplex or of the wrong length, an
            unknown method, a negative ``diversity``, an infeasible ``init``, or ``a = b = None``.

    Examples:
        A 3 × 2 problem whose optimum is known by hand: each objective goes to its cheaper
        model, except that model 1 must take half the mass:

        >>> import torch
        >>> C = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.2, 0.4]])
        >>> res = solve(C, [0.5, 0.25, 0.25], [0.5, 0.5])
        >>> res.plan.tolist()
        [[0.5, 0.0], [0.0, 0.25], [0.0, 0.25]]
        >>> sol = solve(C, [0.5, 0.25, 0.25], [0.5, 0.5], method="sinkhorn")
        >>> torch.allclose(sol.plan.sum(0), torch.tensor([0.5, 0.5]))
        True
        >>> solve(C, [0.5, 0.25, 0.25], None).plan.tolist()   # each objective picks its best model
        [[0.5, 0.0], [0.0, 0.25], [0.25, 0.0]]
    """
    c_in = as_tensor(cost, name="cost")
    settings = _check_settings(method, a, b, diversity=diversity, reg=reg, max_iter=max_iter, tol=tol)
    if method == "exact" and settings.tau == 0.0 and a is not None and b is not None and init is None:
        plan, value, converged = _exact_on_host(c_in, a, b, max_iter=settings.max_iter)
        n_iter = 1
    else:
        plan, value, n_iter, converged = _solve_general(c_in, a, b, init, settings)
    _check_outcome(value, converged, settings, c_in, relaxed=a is None or b is None)
    return TransportResult(plan=plan.to(dtype=c_in.dtype, device=c_in.device), cost=value, n_iter=int(n_iter),
                           converged=bool(converged))


class _Settings(NamedTuple):
    """The checked settings of one :func:`solve`, the method's defaults filled in."""

    method: str
    tau: float
    reg: float
    max_iter: int
    tol: float


def _check_settings(method, a, b, *, diversity, reg, max_iter, tol) -> _Settings:
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"`method` must be one of {', '.join(repr(x) for x in METHODS)}; got {method!r}.")
    if a is None and b is None:
        raise ValueError(
            "`a` and `b` cannot both be None: drop at most one marginal constraint "
            "(a=None: each model selects objectives; b=None: each objective selects a model)."
        )
    tau = check_non_negative(diversity, name="diversity")
    default_reg, default_max_iter, default_tol = _DEFAULTS[method]
    if default_reg is None:  # "exact" has no regularisation; keep a valid placeholder
        default_reg = _sinkhorn.DEFAULT_REG
    return _Settings(
        method=method,
        tau=tau,
        reg=default_reg if reg is None else check_positive(reg, name="reg"),
        max_iter=default_max_iter if max_iter is None else check_positive_int(max_iter, name="max_iter"),
        tol=(default_tol or 0.0) if tol is None else check_non_negative(tol, name="tol"),
    )


def _solve_general(c_in: Tensor, a, b, init, settings: _Settings) -> tuple[Tensor, float, int, bool]:
    """Every case but :func:`_exact_on_host`'s: ``(plan, objective, n_iter, converged)``."""
    lo, hi = matrix_range(c_in, name="cost")  # checks shape and finiteness too
    c = c_in.detach().to(torch.float64)
    n, m = c.shape
    a64, a_min = (None, 1.0) if a is None else _marginal(a, name="a", size=n, like=c)
    b64, b_min = (None, 1.0) if b is None else _marginal(b, name="b", size=m, like=c)
    init64 = None if init is None else _feasible_init(init, a64, b64, like=c)

    value_range = hi - lo
    linear = partial(_solve_linear, a=a64, b=b64, settings=settings, user_range=value_range,
                     positive=a_min > 0 and b_min > 0)
    if settings.tau == 0.0:
        plan, n_iter, converged = linear(c, init64, cost_range=value_range)
    else:
        plan, n_iter, converged = minimise_with_diversity(linear, c, settings.tau, init64)
    return plan, objective(c, plan, settings.tau), n_iter, converged


def _check_outcome(value: float, converged: bool, settings: _Settings, cost: Tensor, *, relaxed: bool) -> None:
    """Refuses a non-finite result; warns (for the caller of :func:`solve`) when not converged."""
    method, tau = settings.method, settings.tau
    if not math.isfinite(value):  # a NaN or inf anywhere in the plan shows here (no extra pass)
        raise ValueError(_non_finite_message(method, value, settings.reg, tau, cost))
    if not converged:
        described = f"max_iter={settings.max_iter}" + ("" if method == "exact" else f", tol={settings.tol:g}")
        described += "" if tau == 0 else f", diversity={tau:g}"
        warnings.warn(
            f"transport method {method!r} did not converge ({described}); the plan satisfies the "
            + ("constrained marginal" if relaxed else "marginals")
            + " but may be suboptimal. Increase `max_iter`"
            + ("." if method == "exact" else ", or loosen `tol`, or increase `reg`."),
            ConvergenceWarning,
            stacklevel=3,
        )


def _non_finite_message(method: str, value: float, reg: float, tau: float, cost: Tensor) -> str:
    """Why a solve ended with a non-finite plan or objective, and what to change."""
    lo, hi = (float(v) for v in torch.stack(torch.aminmax(cost.detach().double())).tolist())
    causes = []
    if method in ("sinkhorn", "newton", "ipot"):
        causes.append(f"`reg`={reg:g} (try a value between 1e-4 and 1)")
    if tau > 0:
        causes.append(f"`diversity`={tau:g} against costs in [{lo:.3g}, {hi:.3g}] (try a diversity of the "
                      "order of the cost range)")
    causes.append(f"the cost scale [{lo:.3g}, {hi:.3g}] (try dividing `cost` by `abs(cost).max()`)")
    return (
        f"transport method {method!r} produced a non-finite plan or objective ({value!r}); no plan is returned. "
        "Likely cause: " + "; or ".join(causes) + "."
    )


def _marginal(x, *, name: str, size: int, like: Tensor) -> tuple[Tensor, float]:
    """The validated marginal, rescaled to sum to 1, and its smallest entry (a new tensor)."""
    src = as_tensor(x, name=name)
    t = src.to(dtype=like.dtype, device=like.device)
    lo, total = simplex_stats(t, name=name, size=size, atol=simplex_atol(src.dtype))
    return t / total, lo


def _exact_on_host(cost: Tensor, a, b, *, max_iter: int) -> tuple[Tensor, float, bool]:
    """``"exact"`` with ``τ = 0``, both marginals and no ``init`` (MosT's plan every round):
    returns ``(plan, <C, plan>, converged)``, the plan float64 on the CPU.

    The network simplex runs on the host, so the checks around it run there too, in NumPy:
    one copy of each input in and of the plan out, where the general path's small tensor
    operations (and, on a GPU, their syncs) cost several times more than the 30 x 5 solve
    itself (the documentation's Benchmarks → Performance). Same checks, same messages and, through
    the same :func:`exact_transport`, the same plan bit for bit as the general path."""
    c = cost.detach().to("cpu", torch.float64).numpy()
    bounds = matrix_range(c, name="cost")  # checks shape and finiteness too
    n, m = c.shape
    a64, b64 = host_marginal(a, name="a", size=n), host_marginal(b, name="b", size=m)
    plan, converged = exact_transport(c, a64, b64, max_iter=max_iter, bounds=bounds)
    return torch.from_numpy(plan), float(np.vdot(c, plan)), converged


def _feasible_init(init, a: Tensor | None, b: Tensor | None, *, like: Tensor) -> Tensor:
    n, m = like.shape
    t = as_tensor(init, name="init", like=like)
    if t.shape != (n, m):
        raise ValueError(
            f"init is not a feasible plan: it must have the shape of `cost`, [{n}, {m}]; "
            f"got shape {tuple(t.shape)}."
        )
    if not torch.isfinite(t).all() or (t < 0).any():
        raise ValueError("init is not a feasible plan: its entries must be finite and non-negative.")
    for name, marg, sums in (("a", a, t.sum(1)), ("b", b, t.sum(0))):
        if marg is None:
            continue
        gap = float((sums - marg).abs().max())
        if gap > INIT_ATOL:
            kind = "row" if name == "a" else "column"
            raise ValueError(
                f"init is not a feasible plan: its {kind} sums differ from `{name}` by up to {gap:.3g} "
                f"(tolerance {INIT_ATOL:g}). Pass a plan from a previous `solve` with the same "
                f"marginals, or init=None."
            )
    return t


def _solve_linear(
    cost: Tensor,
    init: Tensor | None,
    *,
    a: Tensor | None,
    b: Tensor | None,
    settings: _Settings,
    user_range: float,
    positive: bool = False,
    cost_range: float | None = None,
) -> tuple[Tensor, int, bool]:
    """The ``τ = 0`` problem with float64 ``cost`` ``[n, m]``: returns ``(plan, n_iter, converged)``.

    ``positive``: the caller knows that every entry of ``a`` and ``b`` is positive;
    ``cost_range``: ``max C - min C`` when the caller has it (saves a pass and a sync)."""
    method, reg, max_iter, tol = settings.method, settings.reg, settings.max_iter, settings.tol
    rng = float(cost.max() - cost.min()) if cost_range is None else cost_range
    # Unit of the relative ``reg``: the user's cost range (kept fixed through the
    # linearisation loop), falling back to this cost's own range, then to 1.
    scale = user_range if user_range > 0 else (rng if rng > 0 else 1.0)
    if a is None or b is None:
        return solve_relaxed(cost, a, b, soft=method in ("sinkhorn", "newton"), eps=reg * scale)

    if method == "exact":  # the host solver, zero-mass rows/columns included
        plan, converged = exact_transport(cost.detach().cpu().numpy(), a.detach().cpu().numpy(),
                                          b.detach().cpu().numpy(), max_iter=max_iter)
        return torch.from_numpy(plan).to(cost.device), 1, converged
    if not positive:  # zero-mass rows/columns get nothing
        rows, cols = a > 0, b > 0
        if not bool(torch.cat([rows, cols]).all()):
            return _solve_on_support(cost, init, a, b, rows, cols, settings=settings, user_range=user_range)

    n, m = cost.shape
    if n == 1 or m == 1 or rng == 0.0:  # the marginals determine the plan / every plan is optimal
        return torch.outer(a, b) / b.sum(), 1, True
    if method == "newton":
        return solve_newton(cost, a, b, scale=scale, reg=reg, max_iter=max_iter, tol=tol)
    if method == "sinkhorn":
        return solve_sinkhorn(cost, a, b, scale=scale, reg=reg, max_iter=max_iter, tol=tol)
    # IPOT's β only sets the speed (its fixed point is the exact optimum whatever β), so it is
    # relative to the range of the cost actually solved, which the diversity loop enlarges.
    return solve_ipot(cost, a, b, scale=rng, beta=reg, max_iter=max_iter, tol=tol, init=init)


def _solve_on_support(cost: Tensor, init: Tensor | None, a: Tensor, b: Tensor, rows: Tensor, cols: Tensor, *,
                      settings: _Settings, user_range: float) -> tuple[Tensor, int, bool]:
    """:func:`_solve_linear` on the rows and columns of positive mass, the plan zero elsewhere."""
    plan = torch.zeros_like(cost)
    sub_init = None if init is None else init[rows][:, cols]
    sub, n_iter, ok = _solve_linear(cost[rows][:, cols], sub_init, a=a[rows], b=b[cols], settings=settings,
                                    user_range=user_range, positive=True)
    plan[rows.nonzero()[:, 0][:, None], cols.nonzero()[:, 0][None, :]] = sub
    return plan, n_iter, ok
