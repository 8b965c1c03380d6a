"""The diversity regulariser (paper Eq. 3) and the linearisation loop that handles it.

With ``τ > 0`` the transport objective of paper Eq. 6 is::

    f(Γ) = <C, Γ> + τ R(Γ),      R(Γ) = -Σ_i max_j Γ_ij

``R`` is a negative sum of convex functions, hence concave, so ``f`` is concave and its
minimum over the transport polytope is attained at a vertex. It is minimised by repeated
linearisation (a majorise–minimise / DC scheme): with ``s_i = argmax_j Γ_k[i, j]`` and
``S`` the one-hot ``[n, m]`` matrix of ``s``, ``-max_j Γ_ij ≤ -Γ_{i s_i}`` for every
``Γ``, so::

    f(Γ) ≤ <C - τ S, Γ>   with equality at Γ = Γ_k,

and ``Γ_{k+1} = argmin <C - τ S, Γ>`` (an ordinary transport problem) satisfies
``f(Γ_{k+1}) ≤ <C - τ S, Γ_{k+1}> ≤ <C - τ S, Γ_k> = f(Γ_k)``: the objective never
increases. The loop stops when the argmax pattern ``s`` no longer changes (a fixed point),
when a step would increase ``f`` (possible only with the approximate solvers; that step
is rejected), or after :data:`MAX_STEPS` steps.

With the exact solver, starting from the ``τ = 0`` optimum ``Γ_0`` gives
``Σ_i max_j Γ_τ[i, j] ≥ Σ_i max_j Γ_0[i, j]``: ``f(Γ_τ) ≤ f(Γ_0)`` and
``<C, Γ_0> ≤ <C, Γ_τ>`` together give ``τ R(Γ_τ) ≤ τ R(Γ_0)``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .._validation import as_tensor

#: Cap on the number of linearisation steps.
MAX_STEPS = 100
#: A step is rejected when it increases the objective by more than this (relative).
REL_INCREASE_TOL = 1e-12

LinearSolver = Callable[[Tensor, "Tensor | None"], "tuple[Tensor, int, bool]"]


def diversity_regularizer(plan) -> Tensor:
    """``R(Γ) = -Σ_i max_j Γ_ij`` (paper Eq. 3) of a plan ``[n, m]``; a 0-d tensor.

    ``plan`` is a tensor (e.g. ``TransportResult.plan``) or an array-like such as a NumPy
    array or nested lists (converted by :func:`torch.as_tensor`; an integer plan becomes
    floating point). Lower is more diverse in the paper's sense: each objective (row)
    concentrates its mass on one model (column). Differentiable almost everywhere
    (subgradient of the max) when ``plan`` is a tensor that requires grad.

    >>> import torch
    >>> round(float(diversity_regularizer(torch.tensor([[0.3, 0.2], [0.1, 0.4]]))), 6)
    -0.7
    """
    plan = as_tensor(plan, name="plan")
    if plan.ndim != 2:
        raise ValueError(f"`plan` must be a 2-D matrix of shape [n, m]; got shape {tuple(plan.shape)}.")
    if plan.shape[1] == 0:  # a row's largest entry is undefined without a column
        raise ValueError(f"`plan` has shape {tuple(plan.shape)}: it needs at least one model (column, m >= 1).")
    return -plan.max(dim=1).values.sum()


def objective(cost: Tensor, plan: Tensor, tau: float) -> float:
    """``<C, Γ> + τ R(Γ)`` as a Python float (paper Eq. 6)."""
    value = (cost * plan).sum()
    if tau > 0:
        value = value + tau * diversity_regularizer(plan)
    return float(value)


def minimise_with_diversity(
    solve_linear: LinearSolver, cost: Tensor, tau: float, init: Tensor | None
) -> tuple[Tensor, int, bool]:
    """Runs the linearisation loop; returns ``(plan, n_steps, converged)``.

    ``solve_linear(C, warm)`` solves the ``τ = 0`` problem with cost ``C`` (``warm`` is a
    feasible plan that iterative solvers may use as a warm start). The loop starts from
    ``solve_linear(cost, init)``, or from ``init`` when that has a lower objective.
    ``n_steps`` counts linearised problems solved after the initial one; ``converged``
    is ``False`` when an inner solve did not converge or the loop hit :data:`MAX_STEPS`.
    """
    plan, _, inner_ok = solve_linear(cost, init)
    value = objective(cost, plan, tau)
    if init is not None:
        init_value = objective(cost, init, tau)
        if init_value < value:
            plan, value = init, init_value
    slack = REL_INCREASE_TOL * max(float(cost.abs().max()), tau, abs(value))
    m = cost.shape[1]
    pattern = plan.argmax(dim=1)
    steps = 0
    stopped = False
    while steps < MAX_STEPS:
        bonus = torch.nn.functional.one_hot(pattern, m).to(cost.dtype)
        candidate, _, ok = solve_linear(cost - tau * bonus, plan)
        steps += 1
        cand_value = objective(cost, candidate, tau)
        if cand_value > value + slack:  # only an inexact inner solve can do this: keep the last plan
            stopped = True
            break
        inner_ok = inner_ok and ok
        plan, value = candidate, cand_value
        new_pattern = plan.argmax(dim=1)
        if torch.equal(new_pattern, pattern):
            stopped = True
            break
        pattern = new_pattern
    return plan, steps, inner_ok and stopped
