"""The value returned by :func:`most.transport.solve`."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class TransportResult:
    """Solution of one (possibly regularised, possibly semi-relaxed) transport problem.

    Attributes:
        plan: Transport plan Γ, a ``[n, m]`` tensor (n objectives × m models) with the dtype and
            device of the ``cost`` passed to :func:`~most.transport.solve`. Its row sums are
            ``a`` and its column sums ``b`` (each only when that marginal is constrained).
        cost: Objective value ``<C, Γ> + diversity · R(Γ)`` of ``plan`` (paper Eq. 6, with
            ``R(Γ) = -Σ_i max_j Γ_ij`` of Eq. 3), computed in float64 on the returned plan.
            The entropic / proximal terms of the iterative methods are *not* included.
        n_iter: Work done. With ``diversity == 0``: ``1`` for ``"exact"`` (one network-simplex
            call) and for the closed-form semi-relaxed problems, the total number of Sinkhorn
            iterations for ``"sinkhorn"``, and the number of proximal-point steps for
            ``"ipot"``. With ``diversity > 0``: the number of linearisation (majorise-minimise)
            steps after the initial ``diversity = 0`` solve.
        converged: ``True`` when every inner solve reached its tolerance (or optimality) and, with
            ``diversity > 0``, the linearisation loop stopped before its cap.
    """

    plan: Tensor
    cost: float
    n_iter: int
    converged: bool

    def __repr__(self) -> str:  # keeps the repr short: the plan can be large
        shape = tuple(self.plan.shape)
        return (
            f"TransportResult(plan=<{shape[0]}x{shape[1]} {self.plan.dtype}>, cost={self.cost:.6g}, "
            f"n_iter={self.n_iter}, converged={self.converged})"
        )
