"""Optimal transport between objectives and models (paper Eqs. 2–4 and 6).

MosT matches ``n`` objectives (rows) with ``m`` models (columns). Given a cost matrix
``C`` ``[n, m]`` (e.g. the loss of model ``j`` on objective ``i``), objective weights
``a ∈ Δ^n`` and model weights ``b ∈ Δ^m``, :func:`solve` computes the transport plan::

    Γ* = argmin_{Γ ≥ 0, Γ 1_m = a, Γᵀ 1_n = b}  <C, Γ> + τ R(Γ),   R(Γ) = -Σ_i max_j Γ_ij

``Γ_ij`` is how much objective ``i`` is assigned to model ``j``; ``τ = diversity`` pushes
each objective onto a single model.

Quick start
-----------
>>> import torch
>>> from most.transport import solve
>>> C = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.2, 0.4]])
>>> a = torch.tensor([0.5, 0.25, 0.25])
>>> b = torch.tensor([0.5, 0.5])
>>> res = solve(C, a, b)                      # exact LP (network simplex)
>>> res.plan
tensor([[0.5000, 0.0000],
        [0.0000, 0.2500],
        [0.0000, 0.2500]])
>>> round(res.cost, 6)
0.1

Choosing a method
-----------------
* ``"exact"`` (default): POT's network simplex. The plan is a vertex with at most
  ``n + m - 1`` non-zeros (Proposition 1). Not differentiable; best for small ``m``.
* ``"sinkhorn"``: entropic OT in the log domain with ε-scaling,
  ``ε = reg · (max C - min C)``, default ``reg = 1e-3``. A smooth, dense plan.
* ``"newton"``: the same entropic problem as ``"sinkhorn"``, solved by Newton's method on
  the m-dimensional semi-dual. Far fewer passes over the data when ``m ≪ n`` and ``ε`` is
  small: the method for large n (n = 10⁵, m = 50 in well under a second on two cores).
* ``"ipot"``: inexact proximal point (Xie et al. 2020). Converges to the exact plan; warm
  startable with ``init`` (e.g. the previous round's plan).

Every method returns a plan whose marginals match ``a`` and ``b`` up to float error (the
iterative ones are rounded onto the feasible set, Altschuler et al. 2017).

Semi-relaxed problems
---------------------
``b=None`` drops the model constraint (each objective picks its best model); ``a=None``
drops the objective constraint (each model picks its best objectives).

Diversity
---------
``diversity=τ > 0`` adds ``τ R(Γ)``; the concave problem is solved by repeated
linearisation from the ``τ = 0`` plan, never increasing the objective.
:func:`diversity_regularizer` evaluates ``R``.
"""

from __future__ import annotations

# The solvers stay importable from here (most.transport.solve_sinkhorn, ...), as before.
from . import _exact, _ipot, _newton, _sinkhorn
from ._diversity import diversity_regularizer, minimise_with_diversity, objective
from ._exact import exact_transport
from ._ipot import solve_ipot
from ._newton import solve_newton
from ._relaxed import solve_relaxed
from ._capped import solve_capped
from ._capped import solve_capacity
from ._bounded import solve_bounded
from ._result import TransportResult
from ._rounding import round_to_feasible
from ._sinkhorn import solve_sinkhorn
from ._solve import INIT_ATOL, METHODS, solve

__all__ = ["solve", "solve_capped", "solve_capacity", "solve_bounded", "TransportResult", "diversity_regularizer"]
