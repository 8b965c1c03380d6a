r"""MOO-SVGD: multi-objective Stein variational gradient descent (Liu, Tong & Liu, NeurIPS 2021).

The m models are particles ``theta_1..theta_m``. Each particle k has its MGDA direction
``g_k`` (the min-norm element of the convex hull of its objectives' gradients, so
``-g_k`` decreases every objective). SVGD replaces the score of a target density by
``-g`` and moves every particle along the kernel-smoothed driving force plus a repulsion:

.. math::

    \phi_j = \frac1m \sum_{k=1}^m \Big[ K(\theta_k, \theta_j)\, g_k
             - \alpha\, \nabla_{\theta_k} K(\theta_k, \theta_j) \Big],
    \qquad \theta_j \leftarrow \theta_j - \eta\, \phi_j ,

with the RBF kernel ``K(x, y) = exp(-||x - y||^2 / h)``. This is the paper's update
``theta <- theta + eta * E[-K g + alpha * grad K]`` written in the library's
``theta - lr * direction`` convention. Since
``grad_{theta_k} K(theta_k, theta_j) = -(2/h) (theta_k - theta_j) K``, the second term of
``phi_j`` is ``+(2 alpha / h) (theta_k - theta_j) K / m`` and the step ``-eta phi_j`` moves
``theta_j`` *away* from ``theta_k``: it repels. ``alpha = 0`` leaves m independent, only
kernel-smoothed MGDA runs. Without a ``bandwidth``, ``h`` follows the median heuristic
``h = med^2 / log(m + 1)`` (``med`` the median pairwise distance of the particles), as in
SVGD (Liu & Wang, 2016), recomputed at every step.

The kernel lives in parameter space, as in the paper's derivation. (The authors' ZDT code
measures distances between the particles' loss vectors instead.)

The weights ``W`` of the loop choose, per particle, the objectives of its min-norm problem
(zero = left out, as :class:`~most.methods.MinNorm`); they are divided by their largest
entry first, so that with :class:`~most.methods.EqualAssignment` every objective has weight
1 and ``g`` has the scale of the gradients whatever m and n are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from .._validation import check_non_negative, check_positive
from ..methods import Combiner, MinNorm

__all__ = ["SVGDCombiner", "median_bandwidth"]


def median_bandwidth(params: Tensor) -> float:
    """The median heuristic ``h = med^2 / log(m + 1)`` for ``[m, d]`` particles.

    ``med`` is the median of the ``m (m - 1) / 2`` pairwise distances (the mean of the two
    middle ones for an even count). Falls back to ``h = 1`` when it is not positive (a
    single particle, or all particles at the same point, where the repulsion vanishes
    whatever ``h`` is).
    """
    x = params.detach().to(torch.float64)
    m = x.shape[0]
    if m < 2:
        return 1.0
    dist = torch.pdist(x)
    med = float(torch.quantile(dist, 0.5))
    h = med**2 / math.log(m + 1)
    return h if h > 0 and math.isfinite(h) else 1.0


@dataclass(frozen=True)
class SVGDCombiner(Combiner):
    """The MOO-SVGD update direction of every particle (see the module docstring).

    Args:
        bandwidth: ``h`` of the RBF kernel ``exp(-||x - y||^2 / h)``; ``None`` (default)
            for the median heuristic, recomputed at every step.
        alpha: strength of the repulsion (the paper's alpha); 0 turns it off.

    Needs the ``params`` ``[m, d]`` the round loop passes. Returns ``(phi [m, d],
    lambda [m, n])`` with ``lambda`` the particles' min-norm (MGDA) coefficients.
    """

    bandwidth: float | None = None
    alpha: float = 1.0

    centralised_only: ClassVar[bool] = True

    def __post_init__(self):
        if self.bandwidth is not None:
            object.__setattr__(self, "bandwidth", check_positive(self.bandwidth, name="bandwidth"))
        object.__setattr__(self, "alpha", check_non_negative(self.alpha, name="alpha"))

    def kernel_bandwidth(self, params: Tensor) -> float:
        """The bandwidth used for these particles: ``bandwidth`` or the median heuristic."""
        return float(self.bandwidth) if self.bandwidth is not None else median_bandwidth(params)

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        if params is None:
            raise ValueError("SVGDCombiner needs the particles' parameters (the round loop passes them as `params=`).")
        m, n, d = jacobian.shape
        if tuple(params.shape) != (m, d):
            raise ValueError(f"`params` must have shape [m, d] = [{m}, {d}]; got {tuple(params.shape)}.")
        w = weights.detach().to(device=jacobian.device, dtype=torch.float64)
        top = w.amax(1, keepdim=True)
        w = torch.where(top > 0, w / top.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(w))
        g, lam = MinNorm()(jacobian.detach(), w)  # each particle's MGDA direction, [m, d]
        g = g.to(torch.float64)

        x = params.detach().to(device=jacobian.device, dtype=torch.float64)
        h = self.kernel_bandwidth(x)
        K = torch.exp(-torch.cdist(x, x).pow(2) / h)  # K[k, j] = K(theta_k, theta_j), symmetric
        drive = K.T @ g  # sum_k K(theta_k, theta_j) g_k
        # -alpha * grad_{theta_k} K(theta_k, theta_j) = alpha * (2 / h) * (theta_k - theta_j) * K[k, j];
        # summed over k without forming the [m, m, d] differences.
        repulse = (2.0 * self.alpha / h) * (K.T @ x - K.sum(0)[:, None] * x)
        phi = (drive + repulse) / m
        return phi.to(jacobian.dtype), lam.to(jacobian.dtype)
