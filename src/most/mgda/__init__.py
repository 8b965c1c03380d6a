r"""Min-norm solver and the MGDA common descent direction (paper Eqs. 7-9).

Given ``n`` gradients :math:`g_1, \dots, g_n \in \mathbb{R}^d` stacked as the rows
of a Jacobian :math:`J \in \mathbb{R}^{n \times d}`, the *multiple-gradient descent
algorithm* (MGDA) looks for the element of minimal norm in their convex hull:

.. math::

    \lambda^\star \in \operatorname*{arg\,min}_{\lambda \in \Delta^n}
        \lambda^\top G \lambda, \qquad G = J J^\top \in \mathbb{R}^{n \times n},
    \qquad u = J^\top \lambda^\star = \sum_i \lambda^\star_i g_i,

where :math:`\Delta^n = \{\lambda \ge 0, \sum_i \lambda_i = 1\}` is the
probability simplex and :math:`G` the Gramian of the gradients. The KKT
conditions of this problem read, for every objective ``i``,

.. math::

    (G\lambda^\star)_i = \langle g_i, u \rangle \ \ge\ \|u\|^2 = \lambda^{\star\top} G \lambda^\star,
    \qquad \text{with equality where } \lambda^\star_i > 0,

so the step :math:`\theta \leftarrow \theta - \eta u` is a *common descent
direction*: it decreases every objective to first order whenever :math:`u \ne 0`
(:math:`\langle g_i, -u\rangle \le -\|u\|^2 < 0`). When :math:`u = 0` the origin
lies in the convex hull, i.e. the point is Pareto-stationary.

Solver
------
:func:`min_norm` runs the **away-step Frank-Wolfe** algorithm (Lacoste-Julien &
Jaggi, 2015), which converges *linearly* on the simplex for objectives of the
form :math:`\|J^\top\lambda\|^2` (even when :math:`G` is singular), with an
**exact line search**: along a segment :math:`\lambda + \gamma d` the objective is
quadratic, so the best step is
:math:`\gamma^\star = -d^\top G\lambda / d^\top G d`, clipped to
:math:`[0, \gamma_{\max}]`. The iteration starts at the vertex with the smallest
:math:`G_{ii}` and stops when both the Frank-Wolfe duality gap
:math:`2(\lambda^\top G\lambda - \min_i (G\lambda)_i)` (an upper bound on the
suboptimality) and the away gap
:math:`2(\max_{i:\lambda_i>0} (G\lambda)_i - \lambda^\top G\lambda)` are at most
``tol * max_i G_ii``. The second condition certifies complementary slackness, so
on return the KKT conditions above hold to within ``tol * max_i G_ii / 2`` for
every objective. :math:`G\lambda` is updated in :math:`O(n)` per iteration and
recomputed exactly every 50 iterations.

Away-step Frank-Wolfe alone converges linearly, but with a rate that can be very
poor at high accuracy (e.g. when the origin lies inside the hull with ``n > d``,
or with very different gradient norms, 10 000 iterations may leave a relative gap
of 1e-7..1e-5). So every 5 iterations the solver also takes a *face correction*
(the minor cycle of Wolfe's min-norm-point algorithm): it jumps towards the
minimiser of :math:`\lambda^\top G\lambda` over the affine hull of the current
active face, with the same exact line search clipped at the boundary (dropping
the vertex that reaches 0), repeated while vertices are dropped. This never
increases the objective and keeps :math:`\lambda` on the simplex, so all the
guarantees above are unchanged; once the optimal face is found it lands on the
optimum, typically after 2-50 iterations for ``n <= 50`` (up to ~200 for
``n = 200``). ``n_iter`` counts the Frank-Wolfe iterations.

A Gramian stored in low precision (e.g. computed in float32) can have negative
eigenvalues far above float64 round-off, which makes the problem slightly
non-convex; :func:`min_norm` then first projects it onto the positive
semi-definite cone (after a diagonal scaling, so that rows of very different
norms stay accurate), see ``_frank_wolfe._psd_repair``. ``norm_sq`` is still evaluated on the
Gramian as given.

Everything runs in float64 on the input's device, vectorised over a batch of
independent problems (``gram`` of shape ``[B, n, n]``): no Python loop over the
batch and no NumPy round trip.

:func:`combine_min_norm` (every combiner's and federated method's Eq. 9) solves problems of
more than 128 rows exactly on the host instead: by non-negative least squares on working sets
of rows when they are more than their coordinates (``_nnls.low_rank_min_norm``), else on the Cholesky
factor of ``G / s + 1 1^T`` (``_nnls.gram_nnls_min_norm``); each answer is checked against the
guarantee above on every row, and Frank-Wolfe answers what fails the check.
"""

from __future__ import annotations

# in the order the API page (docs/solvers/min-norm.md) lists them: it renders re-exports in import order
from ._frank_wolfe import MinNormResult, min_norm
from ._direction import min_norm_direction, combine_min_norm
from ._checks import DEFAULT_MAX_ITER, DEFAULT_TOL, FLOAT32_TOL, ZERO_GRADIENT_RTOL

__all__ = ["MinNormResult", "min_norm", "min_norm_direction", "combine_min_norm", "DEFAULT_TOL", "DEFAULT_MAX_ITER",
           "FLOAT32_TOL", "ZERO_GRADIENT_RTOL"]
