r"""EPO: Exact Pareto Optimal search (Mahapatra & Rajan, ICML 2020).

Each model j has a preference vector ``r_j`` (positive, on the simplex). Its target is
the *exact Pareto optimal* point of its preference: a Pareto optimal point whose losses
lie on the ray ``r_1 l_1 = r_2 l_2 = ... = r_n l_n`` (the losses are inversely
proportional to the preferences). The distance from that ray is measured by the
*non-uniformity*

.. math::

    \mu_r(l) = \mathrm{KL}(\hat l \,\|\, \mathbf 1/n) = \sum_i \hat l_i \log(n \hat l_i),
    \qquad \hat l_i = \frac{r_i l_i}{\sum_k r_k l_k},

which is 0 exactly on the ray. With ``G`` the ``[n, d]`` Jacobian of the losses,
``C = G G^T`` and the *adjustment* vector ``a_i = r_i (\log(n \hat l_i) - \mu_r)`` (so that
``\nabla_\theta \mu_r = G^T a / r^T l``), EPO moves along ``d = G^T \beta`` with ``\beta``
on the simplex, the solution of a linear program (the paper's Eq. 24; the authors' code,
``epo_lp.py``, is followed for the details). To first order a step
``\theta \leftarrow \theta - \eta d`` changes ``l_i`` by ``-\eta (C\beta)_i`` and
``\mu_r`` by ``-\eta\, a^T C \beta / r^T l``, so:

* **Balance mode** (``\mu_r > \epsilon``): maximise ``(Ca)^T \beta`` (the decrease of the
  non-uniformity) subject to

  - ``(C\beta)_i \ge 0`` for the objectives ``J^*`` with the largest relative loss
    ``r_i l_i`` (they must not increase),
  - ``(C\beta)_i \ge (Ca)_i`` for the objectives with ``(Ca)_i \le 0`` outside ``J^*``
    (a *controlled ascent*: they may increase, but no faster than along ``a``),
  - nothing for the objectives with ``(Ca)_i > 0`` (the set ``J``), outside ``J^*``;

  ``J`` empty is the one case where we depart from the paper (below).
* **Descent mode** (``\mu_r \le \epsilon``): maximise ``1^T C \beta`` (the total decrease)
  subject to ``(C\beta)_i \ge 0`` for every i (no objective increases: a common descent
  direction, as in MGDA) and ``(Ca)^T\beta \ge \min(\max_i (Ca)_i, 0)`` (the
  non-uniformity does not grow, to first order, whenever that is possible).
* **One departure from the paper.** When every ``(Ca)_i \le 0`` (``J`` empty: no
  convex combination of the gradients reduces the non-uniformity to first order), the
  paper keeps the balance objective under ``(C\beta)_i \ge 0`` for all i, i.e. takes the
  descent step that *increases* ``\mu_r`` the least. That can trap a model: for
  ``L_1 = ||theta - a||^2``, ``L_2 = ||theta - b||^2`` started beyond ``a`` (so that both
  gradients point the same way), the least-harmful step is a descent on ``L_1`` alone,
  which leads straight into ``theta = a`` -- the end of the Pareto set, far from the ray --
  and stays there, so models with different preferences end at the same point. We keep
  the constraints but maximise ``\sum_{i \in J^*} (C\beta)_i`` instead (the decrease of
  the largest relative losses): a descent step on ``\max_i r_i l_i``, whose minimiser
  over the Pareto front is the exact Pareto optimal point when the ray meets the front.
  The step moves towards the region where the gradients conflict, where balancing
  resumes. (Mode ``"worst-descent"`` in :func:`epo_coefficients`.)

The programs are always feasible: the min-norm (MGDA) coefficients ``\beta^*`` satisfy
``(C\beta^*)_i \ge \beta^{*T} C \beta^* \ge 0`` for all i. They are solved with HiGHS
(:func:`scipy.optimize.linprog`) in float64 with ``C`` divided by its largest diagonal
entry (each LP is invariant to that scaling). The m models' LPs are independent, so one
step solves them as a single block-diagonal LP (its optimum is optimal block by block);
if HiGHS fails on it they are solved one by one, and a model whose LP still fails takes
the min-norm coefficients.

Sign convention: the library steps ``theta <- theta - lr * direction``, and the returned
``direction = G^T beta`` is a *descent* combination, exactly like the authors' code,
which minimises ``sum_i beta_i l_i``. An objective with preference 0 is left out (its
coefficient is 0 and it is not constrained), as zero weights are everywhere in the
library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence, cast

import numpy as np
import torch
from torch import Tensor

from .._validation import check_positive, holds_bool, short_repr
from .._random import dirichlet
from ..methods import Combiner
from ..methods.assignments import FixedPlanAssignment
from ..mgda import min_norm

__all__ = ["PreferenceAssignment", "EPOCombiner", "check_preferences", "default_preferences", "epo_coefficients"]


def check_preferences(preferences, *, name: str = "preferences") -> Tensor:
    """Validates an explicit ``[m, n]`` preference matrix and returns it as a float64 tensor."""
    if holds_bool(preferences):
        raise ValueError(f"`{name}` must be a [m, n] matrix of numbers (one preference vector per model); got "
                         f"{short_repr(preferences)}, which holds a bool: pass the numbers themselves.")
    if isinstance(preferences, Tensor):
        p = preferences.detach().to("cpu", torch.float64)
    else:
        try:
            p = torch.as_tensor(np.asarray(preferences, dtype=np.float64))
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"`{name}` must be a [m, n] tensor of preference vectors (one row per model); "
                f"got {type(preferences).__name__}."
            ) from exc
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] == 0:
        raise ValueError(
            f"`{name}` must have shape [m, n]: one preference vector over the n objectives for each "
            f"of the m models; got shape {tuple(p.shape)}."
        )
    if not torch.isfinite(p).all():
        raise ValueError(f"`{name}` contains NaN or inf.")
    if (p < 0).any():
        j, i = (int(v) for v in (p < 0).nonzero()[0])
        raise ValueError(
            f"`{name}` must be non-negative: entry [{j}, {i}] (model {j}, objective {i}) is {float(p[j, i]):.3g}. "
            "A preference vector says how much each objective matters; use positive entries."
        )
    zero = p.sum(1) <= 0
    if zero.any():
        j = int(zero.nonzero()[0])
        raise ValueError(f"`{name}` row {j} is all zeros: model {j} would have no objective to follow.")
    return p


def default_preferences(n: int, m: int, generator: torch.Generator | None = None) -> Tensor:
    """m preference vectors on the simplex, ``[m, n]`` float64.

    For two objectives, rays ``(cos phi_j, sin phi_j)`` with ``phi_j = (j + 1/2) (pi/2) / m``,
    evenly spread strictly inside the quadrant, normalised to sum to 1; row j gives more
    weight to objective 2 as j grows. For n > 2, Dirichlet(1) draws from ``generator``.
    """
    if n == 1:
        return torch.ones(m, 1, dtype=torch.float64)
    if n == 2:
        phi = (torch.arange(m, dtype=torch.float64) + 0.5) * (math.pi / 2) / m
        p = torch.stack([phi.cos(), phi.sin()], dim=1)
        return p / p.sum(1, keepdim=True)
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    return dirichlet(generator, 1.0, n, m, dtype=torch.float64)


class PreferenceAssignment(FixedPlanAssignment):
    """A fixed plan whose column j is model j's preference vector ``r_j``, scaled by 1/m.

    Args:
        preferences: ``None`` (default) for :func:`default_preferences` (evenly spread
            rays for two objectives, Dirichlet(1) draws from the run's seed for more), or
            an explicit ``[m, n]`` non-negative matrix, one preference vector per model
            (rows are normalised to sum to 1).

    The plan sums to 1, so :class:`~most.methods.GammaWeights` turns it into
    ``W[j] = n r_j / m``, from which :class:`EPOCombiner` reads ``r_j`` back (up to scale).
    """

    def __init__(self, preferences: Tensor | Sequence[Sequence[float]] | None = None):
        self.preferences = None if preferences is None else check_preferences(preferences)
        self._plan: Tensor | None = None

    def reset(self, n, m, generator):
        if self.preferences is None:
            r = default_preferences(n, m, generator)
        else:
            if tuple(self.preferences.shape) != (m, n):
                raise ValueError(
                    f"`preferences` must have shape [m, n] = [{m}, {n}] (one preference vector over the "
                    f"{n} objectives for each of the {m} models); got {tuple(self.preferences.shape)}."
                )
            r = self.preferences
        r = r / r.sum(1, keepdim=True)
        self._plan = (r.T / m).contiguous()  # float64; cast to the losses' dtype when used

    def __repr__(self):
        pref = None if self.preferences is None else self.preferences.tolist()
        return f"PreferenceAssignment(preferences={pref!r})"

    def __eq__(self, other):
        if not isinstance(other, PreferenceAssignment):
            return NotImplemented
        if self.preferences is None or other.preferences is None:
            return self.preferences is None and other.preferences is None
        return torch.equal(self.preferences, other.preferences)

    __hash__ = None  # type: ignore[assignment]  # unhashable (it defines __eq__); typeshed types it a method


def _non_uniformity(r: np.ndarray, l: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """(r * l, mu_r(l), adjustments a) for positive r and l (float64, length k)."""
    k = len(l)
    rl = r * l
    l_hat = rl / rl.sum()
    log_term = np.log(k * l_hat)
    mu = float(np.sum(l_hat * log_term))
    return rl, mu, r * (log_term - mu)


@dataclass
class _Program:
    """One model's LP: maximise ``objective . beta`` over the simplex with ``A beta >= b``.

    ``A`` and ``objective`` are in units of the scaled Gramian ``C`` (largest diagonal 1).
    ``beta`` is set directly (no LP) when the answer is trivial.
    """

    mode: str
    C: np.ndarray
    objective: np.ndarray | None = None
    A: np.ndarray | None = None
    b: np.ndarray | None = None
    beta: np.ndarray | None = None


def _program(C: np.ndarray, l: np.ndarray, r: np.ndarray, eps: float) -> _Program:
    """One model's program from its Gramian ``C = G G^T`` [k, k], losses and preferences."""
    k = len(l)
    r = r / r.sum()
    C = 0.5 * (C + C.T)
    scale = float(np.max(np.diag(C))) if k else 0.0
    if not scale > 0 or not math.isfinite(scale):
        return _Program("zero", C, beta=r.copy())
    C = C / scale
    if k == 1:
        return _Program("descent", C, beta=np.ones(1))
    l = np.maximum(l, np.finfo(np.float64).tiny ** 0.5)
    rl, mu, a = _non_uniformity(r, l)
    Ca = C @ a
    if mu <= eps:
        # Descent: maximise the total decrease 1^T C beta, no objective increases, and mu
        # does not increase to first order when some combination allows it.
        A = np.vstack([C, Ca[None, :]])
        b = np.concatenate([np.zeros(k), [min(float(Ca.max()), 0.0)]])
        return _Program("descent", C, C.sum(1), A, b)
    J = Ca > 0
    J_star = rl >= rl.max() * (1.0 - 1e-12)
    if J.any():
        # Balance (paper Eq. 24): maximise the decrease of mu, (Ca)^T beta. The worst
        # relative losses J* must not increase; objectives outside J with (Ca)_i <= 0 may
        # increase, but no faster than along the adjustment a (controlled ascent).
        rhs = np.where(J, -np.inf, Ca)
        rhs[J_star] = 0.0
        rows = np.isfinite(rhs)
        return _Program("balance", C, Ca, C[rows], rhs[rows])
    # No convex combination of the gradients reduces mu to first order (every (Ca)_i <= 0).
    # The paper then asks every objective not to increase (C beta >= 0) and still maximises
    # (Ca)^T beta, i.e. takes the step that increases mu the least. That step can drive a
    # model into the minimiser of its relatively smallest loss and keep it there (see the
    # module docstring). We keep the constraints but maximise the decrease of the worst
    # relative losses J* instead: a descent step on max_i r_i l_i, the quantity that the
    # exact Pareto optimal point minimises over the Pareto front.
    return _Program("worst-descent", C, C[J_star].sum(0), C, np.zeros(k))


def _solve(programs: list[_Program]) -> list[np.ndarray | None]:
    """Solves independent programs as one block-diagonal LP (separable, so each block of
    the joint optimum is optimal for its own program). ``None`` where HiGHS failed."""
    if not programs:
        return []
    from scipy import sparse  # imported when EPO first solves: `import most` stays light
    from scipy.optimize import linprog

    sizes = [len(cast(np.ndarray, p.objective)) for p in programs]  # a program without beta has its LP
    c = -np.concatenate([p.objective for p in programs])
    A_ub = -sparse.block_diag([sparse.csr_matrix(p.A) for p in programs], format="csr")
    b_ub = -np.concatenate([p.b for p in programs])
    A_eq = sparse.block_diag([sparse.csr_matrix(np.ones((1, s))) for s in sizes], format="csr")
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=np.ones(len(programs)), bounds=(0, None), method="highs")
    if res.status != 0 or res.x is None or not np.all(np.isfinite(res.x)):
        if len(programs) == 1:
            return [None]
        return [beta for p in programs for beta in _solve([p])]
    out = []
    for x in np.split(res.x, np.cumsum(sizes)[:-1]):
        x = np.clip(x, 0.0, None)
        out.append(x / x.sum() if x.sum() > 0 else None)
    return out


def _finish(programs: list[_Program]) -> list[tuple[np.ndarray, str]]:
    pending = [p for p in programs if p.beta is None]
    for p, beta in zip(pending, _solve(pending)):
        if beta is None:  # both programs are feasible in exact arithmetic; guard round-off
            p.mode, beta = "fallback", min_norm(torch.as_tensor(p.C)).weights.numpy()
        p.beta = beta
    return [(cast(np.ndarray, p.beta), p.mode) for p in programs]  # every beta is set now


def epo_coefficients(G: np.ndarray, l: np.ndarray, r: np.ndarray, eps: float = 1e-4) -> tuple[np.ndarray, str]:
    """EPO's LP for one model: the simplex coefficients ``beta`` of ``direction = G^T beta``.

    Args:
        G: ``[k, d]`` gradients of the k objectives with positive preference (float64).
        l: ``[k]`` their losses (non-negative; clamped away from 0).
        r: ``[k]`` positive preferences.
        eps: the non-uniformity below which the step is a descent step.

    Returns:
        ``(beta [k], mode)``, mode one of ``"balance"``, ``"worst-descent"`` (balance mode
        where no combination reduces the non-uniformity), ``"descent"``, ``"zero"`` (all
        gradients vanish) or ``"fallback"`` (HiGHS failed; min-norm coefficients).
    """
    G, l, r = (np.asarray(v, dtype=np.float64) for v in (G, l, r))
    return _finish([_program(G @ G.T, l, r, eps)])[0]


@dataclass(frozen=True)
class EPOCombiner(Combiner):
    """EPO's direction for every model (see the module docstring for the LP).

    Model j's preference vector is its row of weights, ``r_j = W[j] / sum(W[j])``
    (objectives with weight 0 are left out). Needs the ``losses`` the round loop passes
    (non-negative: EPO compares relative losses ``r_i l_i``).

    Args:
        eps: non-uniformity threshold: above it the step balances the relative losses,
            below it the step is a common descent step that keeps them balanced. The
            default ``1e-4`` (the authors') stops balancing once ``r_i l_i`` agree within
            roughly 3% for two objectives; with a fixed learning rate, a step must be small
            enough not to jump across that band (relative loss changes per step of about
            ``lr`` times the curvature).

    Returns ``(direction [m, d], beta [m, n])``: ``direction_j = sum_i beta_ji grad L_i``.
    """

    eps: float = 1e-4

    centralised_only: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "eps", check_positive(self.eps, name="eps"))

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        if losses is None:
            raise ValueError("EPOCombiner needs the losses [m, n] (the round loop passes them as `losses=`).")
        m, n, d = jacobian.shape
        if tuple(losses.shape) != (m, n) or tuple(weights.shape) != (m, n):
            raise ValueError(
                f"EPOCombiner expects weights and losses of shape [m, n] = [{m}, {n}]; got "
                f"{tuple(weights.shape)} and {tuple(losses.shape)}."
            )
        L = losses.detach().to("cpu", torch.float64).numpy()
        if (L < 0).any():
            j, i = (int(v) for v in np.argwhere(L < 0)[0])
            raise ValueError(
                f"EPO needs non-negative losses (it balances the relative losses r_i * l_i); the loss of "
                f"objective {i} for model {j} is {L[j, i]:.4g}. Shift that objective by a constant."
            )
        W = weights.detach().to("cpu", torch.float64).numpy()
        jac64 = jacobian.detach().to(torch.float64)
        # Only the [m, n, n] Gramians leave the device; the LPs are tiny.
        gram = (jac64 @ jac64.transpose(1, 2)).cpu().numpy()
        if not np.isfinite(gram).all():
            raise ValueError(
                "The gradients are too large: their Gram matrix overflows. The iterates are diverging; "
                "try a smaller `lr`."
            )
        beta = np.zeros((m, n))
        models, programs = [], []
        for j in range(m):
            keep = W[j] > 0
            if keep.any():
                models.append((j, keep))
                programs.append(_program(gram[j][np.ix_(keep, keep)], L[j, keep], W[j, keep], self.eps))
        for (j, keep), (b, _) in zip(models, _finish(programs)):
            beta[j, keep] = b
        beta_t = torch.as_tensor(beta)
        direction = torch.einsum("mn,mnd->md", beta_t.to(jacobian.device), jac64)
        return direction.to(jacobian.dtype), beta_t.to(device=jacobian.device, dtype=jacobian.dtype)
