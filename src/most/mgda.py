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
norms stay accurate), see ``_psd_repair``. ``norm_sq`` is still evaluated on the
Gramian as given.

Everything runs in float64 on the input's device, vectorised over a batch of
independent problems (``gram`` of shape ``[B, n, n]``): no Python loop over the
batch and no NumPy round trip.

:func:`combine_min_norm` (every combiner's and federated method's Eq. 9) solves problems of
more than 128 rows exactly on the host instead: by non-negative least squares on working sets
of rows when they are more than their coordinates (``_low_rank_min_norm``), else on the Cholesky
factor of ``G / s + 1 1^T`` (``_gram_nnls_min_norm``); each answer is checked against the
guarantee above on every row, and Frank-Wolfe answers what fails the check.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ._host import solve_device, to_device, to_host
from ._validation import as_tensor, check_has_data, check_non_negative, check_positive_int
from ._warnings import ConvergenceWarning

__all__ = ["MinNormResult", "min_norm", "min_norm_direction", "combine_min_norm", "DEFAULT_TOL", "DEFAULT_MAX_ITER",
           "FLOAT32_TOL", "ZERO_GRADIENT_RTOL"]

#: Default stopping tolerance on the duality gaps, relative to ``max_i G_ii``.
#: 1e-10 is far below float32 resolution (so the weights are exact for any
#: float32 use) yet well above float64 round-off, and it costs only a few extra
#: iterations (linear convergence, plus the face corrections).
DEFAULT_TOL = 1e-10

#: Default iteration cap: a safety net; typical problems need 0-50 iterations
#: (n <= 50) and a few hundred at most for n in the hundreds.
DEFAULT_MAX_ITER = 10_000

#: ``G λ`` is recomputed from scratch (and ``λ`` renormalised) this often.
_REFRESH_EVERY = 50

#: Every this many Frank-Wolfe iterations, a face-correction step (Wolfe's minor cycle:
#: jump to the minimiser over the affine hull of the active face, dropping vertices that
#: would turn negative) is taken. Pure away-step FW converges linearly but its rate can be
#: poor (e.g. when the origin is inside the hull, n > d): it then needs > 10 000 iterations
#: for a 1e-10 gap, whereas with the correction it stops after tens of iterations.
_CORRECT_EVERY = 5

#: Problems with at most this many objectives start from the uniform weights and a face
#: correction (each minor cycle drops one vertex, so larger problems start from a vertex).
_UNIFORM_START_MAX_N = 32

#: Face corrections solve by Cholesky when the smallest pivot is at least this fraction of the
#: largest (condition number below ~1e12), and by the pseudo-inverse otherwise.
_CHOL_MIN_PIVOT = 1e-6

#: Relative tolerance of the symmetry check on ``gram`` (scaled by the dtype's eps).
_SYM_RTOL_FLOAT64 = 1e-6


@dataclass(frozen=True)
class MinNormResult:
    """Result of :func:`min_norm`.

    Attributes:
        weights: ``λ``, a point of the simplex, shape ``[n]`` (or ``[B, n]`` for a batch),
            in ``gram``'s dtype and device. Masked-out objectives have weight exactly
            0; a problem whose mask is all False has all-zero weights.
        norm_sq: ``λᵀ G λ`` (the squared norm of the min-norm element ``u = Jᵀλ``), a
            0-d tensor (or shape ``[B]``); 0 for an all-False mask.
        n_iter: Number of Frank-Wolfe iterations taken (the maximum over the batch).
        converged: Whether every problem met the tolerance before ``max_iter``.
    """

    weights: Tensor
    norm_sq: Tensor
    n_iter: int
    converged: bool


# --------------------------------------------------------------------------- #
# validation
# --------------------------------------------------------------------------- #


def _compute_device(device: torch.device) -> torch.device:
    # MPS has no float64: a Jacobian is combined on the CPU there.
    return torch.device("cpu") if device.type == "mps" else device


def _real_tensor(value, *, name: str, real: str, shape: str) -> Tensor:
    """``value`` as a real tensor of 2 or 3 dimensions (a problem or a batch of them)."""
    if isinstance(value, Tensor) and value.is_complex():
        raise ValueError(f"`{name}` must be {real}; got a complex tensor.")
    t = as_tensor(value, name=name)
    if t.ndim not in (2, 3):
        raise ValueError(f"`{name}` must have shape {shape}; got shape {tuple(t.shape)}.")
    return t


def _check_gram(g: Tensor) -> Tensor:
    """``g`` (a real tensor of 2 or 3 dimensions, :func:`_real_tensor`): square, with an
    objective, finite."""
    if g.shape[-1] != g.shape[-2]:
        raise ValueError(f"`gram` must be square in its last two dimensions; got shape {tuple(g.shape)}.")
    if g.shape[-1] == 0:
        raise ValueError(f"`gram` has shape {tuple(g.shape)}: there must be at least one objective (n >= 1).")
    if not torch.isfinite(g).all():
        bad = (~torch.isfinite(g)).nonzero()[0].tolist()
        raise ValueError(f"`gram` contains a non-finite value (NaN or inf) at index {tuple(bad)}.")
    return g


def _check_symmetric(g64: Tensor, dtype: torch.dtype) -> None:
    """``g64``: [B, n, n] float64. Symmetric within a tolerance relative to max |G|."""
    if g64.numel() == 0:
        return
    rtol = max(_SYM_RTOL_FLOAT64, 1e3 * torch.finfo(dtype).eps) if dtype.is_floating_point else _SYM_RTOL_FLOAT64
    mag = g64.abs().amax(dim=(-2, -1))  # [B]
    asym = (g64 - g64.transpose(-2, -1)).abs().amax(dim=(-2, -1))  # [B]
    bad = asym > rtol * mag
    if bad.any():
        b = int(bad.nonzero()[0])
        raise ValueError(
            "`gram` must be symmetric (a Gramian G = J Jᵀ); "
            f"max |G - Gᵀ| is {float(asym[b]):.3g} vs max |G| = {float(mag[b]):.3g}"
            + (f" in problem {b} of the batch" if g64.shape[0] > 1 else "")
            + f" (allowed relative asymmetry {rtol:.1g}). Symmetrise it with (G + G.mT) / 2."
        )


def _check_diagonal(g64: Tensor, dtype: torch.dtype) -> None:
    """``g64``: [B, n, n] float64. A Gramian's diagonal holds squared norms: it cannot be negative
    (beyond round-off relative to max |G|)."""
    if g64.numel() == 0:
        return
    rtol = max(_SYM_RTOL_FLOAT64, 1e3 * torch.finfo(dtype).eps) if dtype.is_floating_point else _SYM_RTOL_FLOAT64
    diag = torch.diagonal(g64, dim1=-2, dim2=-1)
    mag = g64.abs().amax(dim=(-2, -1))
    bad = diag < -rtol * mag[:, None]
    if bad.any():
        b, i = bad.nonzero()[0].tolist()
        raise ValueError(
            "`gram` is not positive semi-definite (it must be a Gramian G = J Jᵀ, whose diagonal holds "
            f"squared gradient norms): G[{i}, {i}] = {float(g64[b, i, i]):.3g} < 0"
            + (f" in problem {b} of the batch" if g64.shape[0] > 1 else "")
            + ". Pass J @ J.T for a Jacobian J."
        )


def _pow2_scale(x: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Per-problem exponents ``e`` with ``max |x| * 2**-e`` in ``[0.5, 1)`` (0 where ``x`` is all zero):
    dividing by a power of two is exact, so a solve on ``ldexp(x, -e)`` gives the same weights
    bit for bit, without overflowing (entries ~1e200, whose squares are inf) or underflowing."""
    mag = x.abs().amax(dim=dims)
    return torch.where(mag > 0, torch.frexp(mag).exponent, 0)


def _divide_pow2(x: Tensor, e: Tensor) -> Tensor:
    """``x / 2**e`` exactly, ``e [B]`` (from :func:`_pow2_scale`) per problem of ``x [B, ...]``:
    ``torch.ldexp(x, -e)`` bit for bit, by one multiplication when every power is a normal number
    (a tenth of ldexp's time on a large ``x``)."""
    e = e.reshape(-1, *([1] * (x.ndim - 1)))
    if bool(e.abs().max() <= 1000):
        return x * torch.pow(2.0, -e.to(x.dtype))
    return torch.ldexp(x, -e)


def _all_finite(x: Tensor) -> bool:
    """Whether every entry of ``x`` is finite, from its extremes (a NaN propagates into both):
    one reduction instead of an elementwise test."""
    if x.numel() == 0:
        return True
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def _check_mask(mask, *, batch: int | None, n: int, device: torch.device) -> Tensor:
    """Returns a bool mask of shape [B, n] (B = 1 when unbatched)."""
    m = torch.as_tensor(check_has_data(mask, name="mask"), device=device)
    if m.dtype != torch.bool:
        raise ValueError(f"`mask` must be a boolean tensor; got dtype {m.dtype}.")
    expected = f"[{n}]" if batch is None else f"[{n}] or [{batch}, {n}]"
    if m.ndim == 1 and m.shape[0] == n:
        return m.unsqueeze(0).expand(1 if batch is None else batch, n)
    if batch is not None and m.ndim == 2 and tuple(m.shape) == (batch, n):
        return m
    raise ValueError(f"`mask` must have shape {expected} to match `gram`; got shape {tuple(m.shape)}.")


def _resolve_options(max_iter, tol) -> tuple[int, float]:
    max_iter = DEFAULT_MAX_ITER if max_iter is None else check_positive_int(max_iter, name="max_iter")
    tol = DEFAULT_TOL if tol is None else check_non_negative(tol, name="tol")
    return max_iter, tol


# --------------------------------------------------------------------------- #
# solver
# --------------------------------------------------------------------------- #


def _face_correction(
    G: Tensor, lam: Tensor, Glam: Tensor, live: Tensor, pos: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """One corrective step towards the minimiser of λᵀGλ over the affine hull of the active face.

    With ``S = {i: λ_i > 0}`` and a reference vertex ``r ∈ S``, points of the affine hull are
    ``y = e_r + Σ_{i∈S∖r} t_i (e_i - e_r)``; the best ``t`` solves the (Jacobi-scaled, pseudo-inverted)
    normal equations ``M t = -c`` with ``M_ij = G_ij - G_ir - G_rj + G_rr`` and ``c_i = G_ir - G_rr``.
    The step ``λ + γ (y - λ)`` then uses the exact line search, clipped where a coordinate hits 0
    (which is dropped), so it never increases the objective and keeps ``λ`` on the simplex even
    when the solve is inaccurate. Problems with ``live`` False are left unchanged.
    ``pos`` is ``arange(n)`` on G's device.
    Returns the new ``(λ, Gλ)`` and which problems dropped a vertex (their minor cycle continues).

    At the sizes MosT meets (a few problems of tens of objectives) the cost is the number of
    tensor operations, not their arithmetic: gathers replace advanced indexing, scalars replace
    filled tensors, and masks replace data-dependent assignments, with the same arithmetic.
    """
    B, n, _ = G.shape
    dt = G.dtype
    tiny = torch.finfo(dt).tiny
    act = lam > 0
    cnt = act.sum(dim=-1)
    k = int((cnt * live).max())
    # Gather the active face, reference vertex r = argmax λ first: work on [B, k, k], not [B, n, n].
    r = lam.argmax(dim=-1)
    key = torch.where(act, (pos[None, :] != r[:, None]).to(torch.int8), 2)
    order = torch.argsort(key, dim=-1, stable=True)[:, :k]  # [B, k]
    slot = pos[None, :k]
    free = (slot < cnt[:, None]) & (slot > 0)  # [B, k]
    Gs = G.reshape(B, n * n).gather(1, (order[:, :, None] * n + order[:, None, :]).reshape(B, k * k))
    Gs = Gs.reshape(B, k, k)
    Gr = Gs[:, 0, :]  # [B, k]
    Grr = Gr[:, :1]  # [B, 1]
    pair = free[:, :, None] & free[:, None, :]
    M = (Gs - Gr[:, :, None] - Gr[:, None, :] + Grr[:, :, None]) * pair
    c = (Gr - Grr) * free
    dg = torch.diagonal(M, dim1=-2, dim2=-1)
    D = torch.where(dg > 0, dg.clamp_min(tiny).rsqrt(), 1.0)
    Ms = D[:, :, None] * M * D[:, None, :] + torch.diag_embed((~free).to(dt))
    rhs = (D * c).unsqueeze(-1)
    # A Cholesky solve where the face's (scaled) normal matrix is safely positive definite --
    # an order of magnitude cheaper than the pseudo-inverse on faces of hundreds of vertices --
    # and the pseudo-inverse where it is (nearly) singular, e.g. more active gradients than d + 1.
    L, info = torch.linalg.cholesky_ex(Ms)
    dL = torch.diagonal(L, dim1=-2, dim2=-1)
    ok = (info == 0) & (dL.amin(-1) > _CHOL_MIN_PIVOT * dL.amax(-1).clamp_min(tiny))
    if bool(ok.all()):
        sol = torch.cholesky_solve(rhs, L)
    else:
        sol = torch.zeros_like(rhs)
        if bool(ok.any()):
            sol[ok] = torch.cholesky_solve(rhs[ok], L[ok])
        try:
            sol[~ok] = torch.linalg.pinv(Ms[~ok], hermitian=True, rtol=1e-13) @ rhs[~ok]
        except RuntimeError:  # eigensolver failure (pathological input): skip the correction
            return lam, Glam, torch.zeros_like(live)
    t = -D * sol.squeeze(-1)
    t = t * free
    t[:, 0] = 1.0 - t.sum(dim=-1)
    y = torch.zeros_like(lam).scatter_(1, order, t)
    d = y - lam
    ratio = torch.where(d < 0, lam / (-d).clamp_min(tiny), float("inf"))
    tmax, j = ratio.min(dim=-1)
    Gd = torch.bmm(G, d.unsqueeze(-1)).squeeze(-1)
    dGl = (d * Glam).sum(dim=-1)
    dGd = (d * Gd).sum(dim=-1)
    gamma = torch.where(dGd > 0, -dGl / dGd, torch.where(dGl < 0, float("inf"), 0.0))
    gamma = torch.minimum(gamma.clamp_min(0.0), tmax.clamp_max(1.0))
    gamma = torch.where(live & torch.isfinite(gamma), gamma, 0.0)
    lam = lam + gamma[:, None] * d
    drop = live & (gamma > 0) & (gamma >= tmax)
    lam = torch.where(drop[:, None] & (pos[None, :] == j[:, None]), 0.0, lam)
    lam = lam.clamp_min(0.0)
    lam = lam / lam.sum(dim=-1, keepdim=True).clamp_min(tiny)
    Glam = torch.bmm(G, lam.unsqueeze(-1)).squeeze(-1)
    return lam, Glam, drop


def _minor_cycles(G: Tensor, lam: Tensor, Glam: Tensor, live: Tensor) -> tuple[Tensor, Tensor]:
    """Face corrections of the ``live`` problems, repeated while they drop a vertex (so at
    most n of them): Wolfe's minor cycle. Returns the new ``(λ, Gλ)``."""
    n = G.shape[-1]
    pos = torch.arange(n, device=G.device)
    for _ in range(n):
        lam, Glam, dropped = _face_correction(G, lam, Glam, live, pos)
        live = live & dropped
        if not bool(live.any()):
            break
    return lam, Glam


def _pick(x: Tensor, idx: Tensor) -> Tensor:
    """``x[b, idx[b]]`` for every problem ``b`` (``x``: [B, n], ``idx``: [B]), as one gather."""
    return x.gather(1, idx[:, None]).squeeze(1)


def _start(G: Tensor, mask: Tensor, diag: Tensor, has_any: Tensor) -> tuple[Tensor, Tensor]:
    """The first iterate ``(lambda, G lambda)`` of :func:`_away_step_frank_wolfe`."""
    B, n, _ = G.shape
    dev, dt = G.device, G.dtype
    if n <= _UNIFORM_START_MAX_N and bool(has_any.any()):
        # Small problems: start from the uniform weights over the allowed objectives and take
        # the minor cycles of a face correction at once. The minimiser over the affine hull of
        # all of them, clipped to the simplex, is often the optimum already, where starting
        # from one vertex costs at least one iteration per vertex of the optimal face.
        lam = mask.to(dt) / mask.sum(dim=-1, keepdim=True).clamp_min(1).to(dt)
        Glam = torch.bmm(G, lam.unsqueeze(-1)).squeeze(-1)
        return _minor_cycles(G, lam, Glam, has_any)
    # Start at the (allowed) vertex with the smallest G_ii.
    i0 = diag.masked_fill(~mask, float("inf")).argmin(dim=-1)  # [B]
    live = has_any.to(dt)
    lam = torch.zeros(B, n, dtype=dt, device=dev)
    lam[torch.arange(B, device=dev), i0] = live
    Glam = G[torch.arange(B, device=dev), i0] * live[:, None]  # row i0 == column i0 (G symmetric)
    return lam, Glam


def _pairwise_step(G, diag, lam, Glam, f, s, gs, v, gv, fw, step, pos) -> tuple[Tensor, Tensor]:
    """One Frank-Wolfe (``fw``) or away step with exact line search, for the problems in ``step``."""
    B, n, _ = G.shape
    inf = float("inf")
    # FW step:   d = e_s - λ, γ ∈ [0, 1];            -dᵀGλ = f - (Gλ)_s; dᵀGd = G_ss - 2(Gλ)_s + f
    # Away step: d = λ - e_v, γ ∈ [0, λ_v/(1-λ_v)];  -dᵀGλ = (Gλ)_v - f; dᵀGd = G_vv - 2(Gλ)_v + f
    idx = torch.where(fw, s, v)
    g_idx = torch.where(fw, gs, gv)
    num = torch.where(fw, f - gs, gv - f)
    den = _pick(diag, idx) - 2.0 * g_idx + f
    lam_v = _pick(lam, v)
    gmax = torch.where(fw, 1.0, lam_v / (1.0 - lam_v))
    gamma = torch.where(den > 0, num / den, inf)
    gamma = torch.minimum(gamma.clamp_min(0.0), gmax)
    gamma = torch.where(step, gamma, 0.0)

    a = torch.where(fw, 1.0 - gamma, 1.0 + gamma)  # λ ← a λ + c e_idx
    c = torch.where(fw, gamma, -gamma)
    lam = (a[:, None] * lam).scatter_add_(1, idx[:, None], c[:, None])
    G_idx = G.gather(1, idx[:, None, None].expand(B, 1, n)).squeeze(1)
    Glam = a[:, None] * Glam + c[:, None] * G_idx
    # Drop steps remove the away vertex exactly; guard against -0.0-ish round-off.
    drop = step & ~fw & (gamma >= gmax)
    lam = torch.where(drop[:, None] & (pos[None, :] == v[:, None]), 0.0, lam)
    return lam.clamp_min(0.0), Glam


def _away_step_frank_wolfe(
    G: Tensor, mask: Tensor, *, max_iter: int, tol: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Batched away-step Frank-Wolfe with exact line search (and periodic face corrections).

    G: [B, n, n] float64 symmetric; mask: [B, n] bool.
    Returns (lam [B, n], n_iter [B] long, converged [B] bool, max(FW gap, away gap) / max_i G_ii [B]).
    """
    B, n, _ = G.shape
    dev, dt = G.device, G.dtype
    inf = float("inf")
    tiny = torch.finfo(dt).tiny
    pos = torch.arange(n, device=dev)

    diag = torch.diagonal(G, dim1=-2, dim2=-1)  # [B, n]
    has_any = mask.any(dim=-1)  # [B]
    # Tolerance relative to the largest squared gradient norm of the problem.
    scale = diag.masked_fill(~mask, -inf).amax(dim=-1).clamp_min(tiny)
    thr = tol * scale  # [B]

    lam, Glam = _start(G, mask, diag, has_any)

    done = ~has_any
    n_iter = torch.zeros(B, dtype=torch.long, device=dev)
    gap = torch.zeros(B, dtype=dt, device=dev)
    it = 0
    while True:
        if it > 0 and it % _REFRESH_EVERY == 0:
            lam = lam / lam.sum(dim=-1, keepdim=True).clamp_min(tiny)
            Glam = torch.bmm(G, lam.unsqueeze(-1)).squeeze(-1)

        f = (lam * Glam).sum(dim=-1)  # λᵀGλ, [B]
        # Frank-Wolfe vertex: most negative gradient coordinate among allowed objectives.
        s = Glam.masked_fill(~mask, inf).argmin(dim=-1)
        gs = _pick(Glam, s)
        # Away vertex: largest gradient coordinate among the active set {λ_i > 0}.
        v = Glam.masked_fill(lam <= 0, -inf).argmax(dim=-1)
        gv = _pick(Glam, v)
        gap_fw = 2.0 * (f - gs)
        gap_aw = 2.0 * (gv - f)
        gap = torch.where(has_any, torch.maximum(gap_fw, gap_aw), 0.0)
        done = done | (gap <= thr)
        if it >= max_iter or bool(done.all()):
            break

        step = ~done
        n_iter += step
        lam, Glam = _pairwise_step(G, diag, lam, Glam, f, s, gs, v, gv, gap_fw >= gap_aw, step, pos)
        it += 1
        if _CORRECT_EVERY and it % _CORRECT_EVERY == 0:
            lam, Glam = _minor_cycles(G, lam, Glam, ~done)

    lam = lam / lam.sum(dim=-1, keepdim=True).clamp_min(tiny)
    lam = lam * has_any[:, None].to(dt)
    return lam, n_iter, done, gap / scale


def _psd_repair(G: Tensor, in_dtype: torch.dtype) -> Tensor:
    """Makes a symmetric float64 [B, n, n] Gramian positive semi-definite up to float64 round-off.

    A Gramian rounded to its storage precision (e.g. computed in float32) can have negative
    eigenvalues far above float64 round-off; the problem is then slightly non-convex at a level
    above the default ``tol`` and Frank-Wolfe can stall. Each problem is Jacobi-scaled
    (``Ĝ = D G D``, ``D = diag(G)^-1/2``: unit diagonal, which preserves the inertia and keeps
    rows of very different norms equally accurate); if ``Ĝ + 1e-12 I`` has no Cholesky factor,
    the negative eigenvalues of ``Ĝ`` are set to 0 and the result is scaled back. Eigenvalues
    of ``Ĝ`` below ``-max(1e-2, 100 eps)`` are not round-off: a ValueError is raised.
    """
    B, n, _ = G.shape
    if B == 0:
        return G
    dg = torch.diagonal(G, dim1=-2, dim2=-1)
    D = torch.where(dg > 0, dg.clamp_min(1e-300).rsqrt(), torch.ones_like(dg))
    Gh = D[:, :, None] * G * D[:, None, :]
    eye = torch.eye(n, dtype=G.dtype, device=G.device)
    _, info = torch.linalg.cholesky_ex(Gh + 1e-12 * eye)
    bad = info != 0
    if not bool(bad.any()):
        return G
    evals, V = torch.linalg.eigh(Gh[bad])
    limit = max(1e-2, 100 * torch.finfo(in_dtype).eps) if in_dtype.is_floating_point else 1e-2
    worst = float(evals[:, 0].min())
    if worst < -limit:
        raise ValueError(
            "`gram` is not positive semi-definite (it must be a Gramian G = J Jᵀ): the smallest "
            f"eigenvalue of its diagonally scaled form D G D (unit diagonal) is {worst:.3g}, "
            "far beyond round-off."
        )
    Gfix = (V * evals.clamp_min(0.0)[:, None, :]) @ V.transpose(-2, -1)
    Gfix = 0.5 * (Gfix + Gfix.transpose(-2, -1))
    Db = D[bad]
    G = G.clone()
    G[bad] = Gfix / (Db[:, :, None] * Db[:, None, :])
    return G


def _solve(G64: Tensor, mask: Tensor, *, max_iter: int, tol: float, repair_dtype=None, stacklevel: int = 3):
    """Validated float64 [B, n, n] symmetric Gramians and [B, n] masks -> (λ, λᵀGλ, n_iter, converged)."""
    # Solved on G / 2^e with max |G / 2^e| in [0.5, 1): exact, and safe from overflow and underflow.
    e = _pow2_scale(G64, (-2, -1))
    G64 = _divide_pow2(G64, e)
    Gs = G64 if repair_dtype is None else _psd_repair(G64, repair_dtype)
    lam, n_iter, done, gap_rel = _away_step_frank_wolfe(Gs, mask, max_iter=max_iter, tol=tol)
    # Reported objective on the caller's Gramian (identical unless it was repaired).
    norm_sq = (lam * torch.bmm(G64, lam.unsqueeze(-1)).squeeze(-1)).sum(dim=-1).clamp_min(0.0)
    norm_sq = torch.ldexp(norm_sq, e)
    converged = bool(done.all())
    if not converged:
        bad = ~done
        worst = float(gap_rel[bad].max())
        warnings.warn(
            f"min_norm did not converge in max_iter={max_iter} iterations for {int(bad.sum())} of "
            f"{G64.shape[0]} problem(s): largest relative duality gap {worst:.3g} > tol={tol:.3g}. "
            "Increase `max_iter` or `tol`.",
            ConvergenceWarning,
            stacklevel=stacklevel,
        )
    n_it = int(n_iter.max()) if n_iter.numel() else 0
    return lam, norm_sq, n_it, converged


def min_norm(gram, *, mask=None, max_iter: int | None = None, tol: float | None = None) -> MinNormResult:
    r"""Solves the min-norm problem :math:`\min_{\lambda \in \Delta^n} \lambda^\top G \lambda` (Eqs. 7-8).

    Args:
        gram: The Gramian :math:`G = J J^\top` of ``n`` gradients, shape ``[n, n]``, or a
            batch of ``B`` independent problems, shape ``[B, n, n]``. Must be finite and
            symmetric (up to round-off; it is symmetrised internally). Positive
            semi-definiteness is not checked strictly: negative eigenvalues at the
            level of the input's round-off are fine (if they exceed float64 round-off,
            e.g. for a float32 Gramian, the matrix is first projected onto the PSD
            cone, see the module docstring); a grossly indefinite matrix (smallest
            eigenvalue of ``D G D`` below -1e-2, ``D = diag(G)^-1/2``) raises
            ``ValueError``.
        mask: Optional boolean tensor, shape ``[n]`` (shared by the batch) or ``[B, n]``.
            Objectives with ``mask == False`` are excluded: their weight is exactly 0
            and they are never selected. A problem whose mask is all False gets
            all-zero weights and ``norm_sq == 0`` (there is nothing to descend on).
        max_iter: Iteration cap, default :data:`DEFAULT_MAX_ITER` (10 000). Reaching it
            raises a :class:`~most.ConvergenceWarning` and sets ``converged=False``.
        tol: Stopping tolerance on the Frank-Wolfe and away duality gaps, *relative*
            to :math:`\max_i G_{ii}` (the largest squared gradient norm), so results do
            not depend on the scale of the gradients. Default :data:`DEFAULT_TOL`
            (1e-10). On return :math:`\lambda^\top G\lambda - \min_\Delta \le`
            ``tol * max_i G_ii / 2`` and :math:`|(G\lambda)_i - \lambda^\top G\lambda| \le`
            ``tol * max_i G_ii / 2`` for every ``i`` with :math:`\lambda_i > 0`.

    Returns:
        MinNormResult: ``weights`` (``[n]`` or ``[B, n]``, gram's dtype and device),
            ``norm_sq`` (0-d or ``[B]``), ``n_iter`` (max over the batch) and
            ``converged`` (all problems).

    Notes:
        Away-step Frank-Wolfe with exact line search (plus a face correction every
        few iterations), computed in float64 on detached inputs (not differentiable);
        see the module docstring. On MPS, which has no float64, the solve runs on the
        CPU and the result is moved back. The optimal ``λ`` need not be unique when ``G`` is
        singular (e.g. duplicated gradients); the optimal value always is.

    Examples:
        Two orthogonal unit gradients: the min-norm point is their midpoint.

        >>> import torch
        >>> r = min_norm(torch.eye(2, dtype=torch.float64))
        >>> r.weights
        tensor([0.5000, 0.5000], dtype=torch.float64)
        >>> float(r.norm_sq)
        0.5
    """
    g = _real_tensor(gram, name="gram", real="a real matrix",
                     shape="[n, n] (one problem) or [B, n, n] (a batch of B problems)")
    out_dtype, out_device = g.dtype, g.device
    # a small problem on an accelerator is solved on the host: one copy there and one back
    # instead of a launch and a host read per iteration (most._host)
    g = _check_gram(g.detach().to(solve_device(out_device, g.numel())))
    max_iter, tol = _resolve_options(max_iter, tol)
    batched = g.ndim == 3
    n = g.shape[-1]
    g3 = g if batched else g.unsqueeze(0)
    # The solve runs in inference mode (a few hundred tiny operations: autograd's bookkeeping
    # is a fifth of their cost); the outputs are cloned out of it into ordinary tensors.
    with torch.inference_mode():
        G64 = g3.to(dtype=torch.float64)
        _check_symmetric(G64, out_dtype)
        _check_diagonal(G64, out_dtype)
        G64 = 0.5 * G64 + 0.5 * G64.transpose(-2, -1)  # (G + Gᵀ) / 2 without overflow at 1e308
        if mask is None:
            m = torch.ones(G64.shape[0], n, dtype=torch.bool, device=G64.device)
        else:
            m = _check_mask(mask, batch=g.shape[0] if batched else None, n=n, device=G64.device)

        if bool((m.sum(-1) <= 1).all()):
            # at most one allowed objective per problem: the answer is that vertex (no iteration)
            lam = m.to(torch.float64)
            norm_sq = (torch.diagonal(G64, dim1=-2, dim2=-1) * lam).sum(-1).clamp_min(0.0)
            n_it, converged = 0, True
        else:
            lam, norm_sq, n_it, converged = _solve(G64, m, max_iter=max_iter, tol=tol, repair_dtype=out_dtype)
        lam = to_device(lam.to(dtype=out_dtype), out_device)
        norm_sq = to_device(norm_sq.to(dtype=out_dtype), out_device)
    lam, norm_sq = lam.clone(), norm_sq.clone()
    if not batched:
        lam, norm_sq = lam[0], norm_sq[0]
    return MinNormResult(weights=lam, norm_sq=norm_sq, n_iter=n_it, converged=converged)


def min_norm_direction(
    jacobian, weights=None, *, coordinates: tuple[int, int] | None = None, max_iter: int | None = None,
    tol: float | None = None, return_weights: bool = False,
):
    r"""MGDA common descent direction :math:`u = \sum_i \lambda^\star_i w_i J_i` (Eq. 9).

    This is the one place where the library forms Eq. 9: the centralised combiner
    :class:`most.MinNorm` and the federated methods (on client updates) call it.

    The rows of the (weighted) Jacobian are :math:`w_i J_i`. Rows with weight exactly 0 are
    dropped before the solve (they do not take part in the convex hull), and so are rows
    whose gradient is zero (below ``ZERO_GRADIENT_RTOL`` times the largest): such an
    objective is stationary and cannot change to first order, so it must not put the origin
    in the hull and stop the others (a client whose update is zero, an objective at its
    minimum on the boundary of a box). With :math:`\tilde J = \operatorname{diag}(w) J` and
    :math:`\lambda^\star = \arg\min_{\lambda\in\Delta} \lambda^\top \tilde J \tilde J^\top \lambda`
    (see :func:`min_norm`), the update :math:`\theta \leftarrow \theta - \eta u`
    satisfies :math:`w_i \langle J_i, -u\rangle \le -\|u\|^2` for every kept row,
    so it decreases every weighted objective whenever :math:`u \ne 0`.

    Args:
        jacobian: ``[n, d]`` (``n`` gradients of dimension ``d``) or ``[B, n, d]`` (a batch
            of ``B`` independent problems, e.g. one per model).
        weights: Optional non-negative weights, ``[n]`` (shared by the batch) or
            ``[B, n]``; default all ones. If all weights of a problem are zero its
            direction is the zero vector.
        coordinates: ``(start, stop)``: solve for the weights on the Gram matrix of those coordinates of
            the gradients only (the paper's "MGDA on a subset of model parameters like the final
            layer's bias", Section 6) and combine the full gradients with them. The direction is
            then a common descent direction for those coordinates, not necessarily for all.
        max_iter, tol: Passed to :func:`min_norm`. ``tol=None`` matches the tolerance to the gradients'
            precision: :data:`FLOAT32_TOL` for float32 (or lower) Jacobians, :data:`DEFAULT_TOL`
            otherwise.
        return_weights: Also return :math:`\lambda^\star` (``[n]`` or ``[B, n]``, the Jacobian's dtype).

    Returns:
        Tensor: ``u`` of shape ``[d]`` (or ``[B, d]``), in the Jacobian's dtype and device (and
            ``lambda`` with ``return_weights=True``). It is computed in float64 from detached
            inputs: no gradient flows through it (it is an update direction, to be applied under
            ``torch.no_grad()``).

    Examples:
        >>> import torch
        >>> min_norm_direction(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        tensor([0.5000, 0.5000])
        >>> min_norm_direction(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))  # Pareto-stationary
        tensor([0., 0.])
        >>> min_norm_direction(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))  # a zero row does not stop the other
        tensor([1., 0.])
    """
    J, w = _check_direction_args(jacobian, weights)
    batched = J.ndim == 3
    J3 = J if batched else J.unsqueeze(0)
    w3 = w.expand(J3.shape[0], J3.shape[1]) if w.ndim == 1 else w
    u, lam = combine_min_norm(J3, w3, coordinates=coordinates, max_iter=max_iter, tol=tol)
    if not batched:
        u, lam = u[0], lam[0]
    return (u, lam) if return_weights else u


def _check_direction_args(jacobian, weights) -> tuple[Tensor, Tensor]:
    """The Jacobian as a tensor and the weights as float64 ``[n]`` or ``[B, n]`` (ones by default)."""
    J = _real_tensor(jacobian, name="jacobian", real="real", shape="[n, d] (n gradients of dimension d) or [B, n, d]")
    if J.shape[-2] == 0 or J.shape[-1] == 0:
        raise ValueError(
            f"`jacobian` has shape {tuple(J.shape)}: it needs at least one gradient (n >= 1) of dimension d >= 1."
        )
    if not torch.isfinite(J).all():
        bad = (~torch.isfinite(J)).nonzero()[0].tolist()
        raise ValueError(f"`jacobian` contains a non-finite value (NaN or inf) at index {tuple(bad)}.")
    batched, n = J.ndim == 3, J.shape[-2]
    if weights is None:
        return J, torch.ones(n, dtype=torch.float64, device=J.device)
    if isinstance(weights, Tensor) and weights.is_complex():
        raise ValueError("`weights` must be real; got a complex tensor.")
    w = as_tensor(weights, name="weights").detach().to(device=J.device, dtype=torch.float64)
    B = J.shape[0] if batched else 1
    if not ((w.ndim == 1 and w.shape[0] == n) or (batched and w.ndim == 2 and tuple(w.shape) == (B, n))):
        expected = f"[{n}]" if not batched else f"[{n}] or [{B}, {n}]"
        raise ValueError(
            f"`weights` must have shape {expected} to match `jacobian` of shape {tuple(J.shape)}; "
            f"got shape {tuple(w.shape)}."
        )
    if not torch.isfinite(w).all():
        raise ValueError("`weights` contains a non-finite value (NaN or inf).")
    if (w < 0).any():
        bad = tuple((w < 0).nonzero()[0].tolist())
        raise ValueError(
            f"`weights` must be non-negative; entry {bad if len(bad) > 1 else bad[0]} is {float(w[bad]):.3g}."
        )
    return J, w


#: Rows whose norm is below this fraction of the largest row are treated as zero gradients.
ZERO_GRADIENT_RTOL = 1e-12

#: Min-norm duality-gap tolerance (relative to the largest squared gradient norm) for float32
#: gradients. Their Gram entries are good to ~1e-7 relative, so a tighter gap asks Frank-Wolfe
#: to resolve rounding noise. Measured: MosT-E's linear mixtures make nearly collinear rows
#: (a 4 x 4 Gramian of rank 2 up to float32 noise); with the float64 default (1e-10), or even
#: 1e-8, the gap plateaued at 1e-9..4e-7 and each call ran to ``max_iter`` (137 s for a
#: 300-round fairness run), while 1e-6 converges in one iteration to the same norm (to 1e-11).
FLOAT32_TOL = 1e-6


#: A Gramian whose largest entry is below this (rows below ~1e-75) is formed again from rescaled rows.
_TINY_GRAM = 2.0**-500


#: Row counts above which, with fewer coordinates than rows, the min-norm problem is solved
#: exactly by non-negative least squares on the host, without the ``k x k`` Gramian
#: (:func:`_low_rank_min_norm`, with :func:`_working_set_min_norm` as its fallback).
_WORKING_SET_MIN_ROWS = 128


def _gram(rows: Tensor) -> Tensor:
    return rows @ rows.transpose(1, 2)


def _low_rank(rows: Tensor) -> bool:
    """Whether the Gramian of ``rows [B, k, d]`` has low rank (``d < k``) and is large."""
    k, d = rows.shape[-2], rows.shape[-1]
    return k > _WORKING_SET_MIN_ROWS and d < k


def _low_rank_weights(sub: Tensor, weights: Tensor, *, max_iter: int | None, tol: float | None) -> Tensor:
    """:func:`combine_min_norm`'s weights ``lambda [B, k]`` (float64, on ``sub``'s device) for
    gradients ``sub [B, k, d]`` (float64, ``d < k``) weighted by ``weights [B, k]``, on the host.

    The rows ``weights * sub`` are checked, rescaled by a power of two per problem (exact, so the
    weights do not change) and masked (weight 0 or a zero gradient) in NumPy after one copy to
    the host, where :func:`_low_rank_min_norm` solves them: on the CPU a dozen small tensor
    operations cost more than the arithmetic (a fifth of the solve at k ~ 300, d = 10), and on
    an accelerator each check was a synchronisation."""
    s, w = (t.numpy() for t in to_host([sub.detach(), weights.detach()]))
    with np.errstate(over="ignore", invalid="ignore"):  # refused just below, with the cause
        rows = w[..., None] * s
    if not np.isfinite(rows).all():
        raise ValueError("The gradients times their weights overflow float64: the iterates are diverging; "
                         "try a smaller `lr`.")
    rows = _host_divide_pow2(rows)
    scaled = _host_divide_pow2(s)  # the gradients' norms neither overflow nor underflow (their ratios are exact)
    norms = np.sqrt(np.einsum("bkd,bkd->bk", scaled, scaled))
    live = norms > ZERO_GRADIENT_RTOL * norms.max(-1, keepdims=True)
    mask = (w > 0) & live
    lam = _low_rank_min_norm(rows, mask, max_iter=max_iter, tol=tol)
    if lam is None:  # the exact solve's check failed (or NNLS stopped): Frank-Wolfe on working sets
        return _working_set_min_norm(torch.from_numpy(rows), torch.from_numpy(mask), max_iter=max_iter,
                                     tol=tol).to(sub.device)
    return torch.from_numpy(lam).to(sub.device)


def _host_divide_pow2(x: np.ndarray) -> np.ndarray:
    """:func:`_divide_pow2` of :func:`_pow2_scale` over the last two axes, in NumPy: ``x [B, k, d]``
    divided per problem by the power of two that brings its largest entry into ``[0.5, 1)``
    (exact: the same numbers bit for bit)."""
    mag = np.abs(x).max(axis=(-2, -1))
    e = np.where(mag > 0, np.frexp(mag)[1], 0)
    if e.size == 0 or np.abs(e).max() <= 1000:
        return x * np.ldexp(1.0, -e)[:, None, None]
    return np.ldexp(x, -e[:, None, None])


def _smallest(values: np.ndarray, count: int) -> np.ndarray:
    """``np.argsort(values, kind="stable")[:count]`` (ties in index order) without sorting every
    value: the candidates up to the ``count``-th smallest value (``np.partition``), then a stable
    sort of those. On 2000 scores it is a seventh of the full sort's time."""
    if values.size <= 4 * count:
        return np.argsort(values, kind="stable")[:count]
    cut = np.partition(values, count - 1)[count - 1]
    if np.isnan(cut):  # NaN sorts last in both; keep the full sort's order for them
        return np.argsort(values, kind="stable")[:count]
    candidates = np.flatnonzero(values <= cut)
    return candidates[np.argsort(values[candidates], kind="stable")[:count]]


def _low_rank_min_norm(host: np.ndarray, live: np.ndarray, *, max_iter: int | None,
                       tol: float | None) -> np.ndarray | None:
    """The min-norm weights of ``host [B, k, d]`` (float64 rows, ``d < k``) over the ``live [B, k]``
    rows, without the ``k x k`` Gramian; ``None`` when the answer fails its check.

    The optimum lies on a face of at most ``d + 1`` rows, so each problem is solved on a working
    set of rows (Wolfe's major cycle): SciPy's non-negative least squares (Lawson-Hanson, an exact
    active-set method) on the set's ``(d + 1) x s`` system
    ``min_{mu >= 0} |P^T mu|^2 + (1^T mu - 1)^2``, whose solution is ``lambda* / (1 + |u*|^2)``
    (so ``lambda* = mu / 1^T mu``), then the ``d + 1`` rows that break the optimality conditions
    ``<g_i, u> >= |u|^2`` most join the rows with weight, until none breaks them by more than
    :func:`min_norm`'s tolerance. Each added row lowers the norm, so it ends; a cycle costs
    ``O(k d)`` for the scores and a solve on ``O(d)`` rows. The last cycle's scores check the
    result against that guarantee on every row (``<g_i, u> >= |u|^2 - slack`` everywhere and
    ``<= |u|^2 + slack`` on the rows with weight); if that fails (or NNLS stops), the caller
    answers with :func:`_working_set_min_norm`.
    """
    from scipy.optimize import nnls  # imported at the first large solve: `import most` stays light

    _, tol_ = _resolve_options(max_iter, tol)
    B, k, d = host.shape
    lam = np.zeros((B, k))
    rhs = np.zeros(d + 1)
    rhs[-1] = 1.0
    try:
        for b in range(B):
            idx = np.flatnonzero(live[b])
            if idx.size == 0:
                continue
            p = host[b, idx]
            norms = np.einsum("kd,kd->k", p, p)
            slack = 0.5 * tol_ * norms.max()
            # the rows most against the rows' mean (the uniform weights' point): on problems of the default's
            # rounds they hold most of the optimal face (2.2 cycles a problem where the rows most against the
            # shortest row took 3.8)
            work = _smallest(p @ p.mean(0), d + 1)
            for _ in range(idx.size):
                mu = nnls(np.vstack([p[work].T, np.ones((1, work.size))]), rhs, maxiter=max(50 * work.size, 1000))[0]
                if not mu.sum() > 0:
                    raise RuntimeError("no weight")
                weights, work = mu[mu > 0] / mu.sum(), work[mu > 0]
                u = weights @ p[work]
                scores, level = p @ u, u @ u
                gaps = scores[work] - level
                scores[work] = np.inf
                bad = np.flatnonzero(scores < level - slack)
                if bad.size == 0:
                    break
                work = np.concatenate([work, bad[_smallest(scores[bad], d + 1)]])
            else:
                raise RuntimeError("no convergence")
            if not np.all(np.abs(gaps) <= slack):  # the rows with weight: <g_i, u> = |u|^2 within the slack
                raise RuntimeError("not optimal")
            lam[b, idx[work]] = weights
    except RuntimeError:  # also SciPy's "too many iterations" (older versions raise it)
        return None
    return lam


def _working_set_min_norm(rows: Tensor, mask: Tensor, *, max_iter: int | None, tol: float | None) -> Tensor:
    """The min-norm weights of ``rows [B, k, d]`` (float64, ``d < k``) over the ``mask [B, k]``
    rows, without forming the ``k x k`` Gramian: Wolfe's major cycle with batches of rows.

    The hull's min-norm point lies in a face of at most ``d + 1`` rows. The solver keeps a
    working set of rows, solves the min-norm problem on it (:func:`min_norm`, the same solver and
    tolerance), and adds the ``d + 1`` rows that break the optimality conditions
    ``<g_i, u> >= |u|^2`` most; it stops when no row breaks them by more than the solver's own
    tolerance (``tol * max_i |g_i|^2 / 2``), the guarantee :func:`min_norm` gives on the full
    problem. Each added row lowers the norm, so it ends; it costs ``O(k d)`` per cycle.
    """
    B, k, d = rows.shape
    _, tol = _resolve_options(max_iter, tol)
    diag = (rows * rows).sum(-1)
    slack = 0.5 * tol * torch.where(mask, diag, torch.zeros_like(diag)).amax(-1)  # [B]
    add = min(k, d + 1)
    start = torch.where(mask, diag, torch.full_like(diag, float("inf"))).argmin(-1)  # [B]
    index, valid = start[:, None], mask.gather(1, start[:, None])
    lam = valid.to(rows.dtype)
    for _ in range(k):
        picked = rows.gather(1, index[..., None].expand(-1, -1, d))  # [B, s, d]
        u = torch.einsum("bs,bsd->bd", lam, picked)
        scores = torch.einsum("bkd,bd->bk", rows, u)
        bad = mask & (scores < (u * u).sum(-1, keepdim=True) - slack[:, None])
        bad.scatter_(1, index, False)
        counts = bad.sum(-1)
        if not bool(counts.any()):
            break
        worst = torch.where(bad, scores, torch.full_like(scores, float("inf"))).topk(add, dim=1, largest=False)
        new_valid = torch.isfinite(worst.values)
        index = torch.cat([index, torch.where(new_valid, worst.indices, index[:, :1])], 1)
        valid = torch.cat([valid, new_valid], 1)
        picked = rows.gather(1, index[..., None].expand(-1, -1, d))
        gram = _gram(picked)
        lam = min_norm(0.5 * (gram + gram.transpose(1, 2)), mask=valid, max_iter=max_iter, tol=tol).weights
    out = torch.zeros(B, k, dtype=rows.dtype, device=rows.device)
    return out.scatter_add_(1, index, lam * valid)


#: Row counts above which the min-norm problem on a Gramian (as many coordinates as rows, or more) is solved
#: exactly by non-negative least squares on its Cholesky factor (:func:`_gram_nnls_min_norm`) instead of by
#: Frank-Wolfe, which adds one row per iteration: such problems' optima hold most of their rows.
_GRAM_NNLS_MIN_ROWS = _WORKING_SET_MIN_ROWS


def _gram_nnls_min_norm(gram: Tensor, mask: Tensor, *, max_iter: int | None, tol: float | None) -> Tensor:
    """The min-norm weights of the symmetric Gramians ``gram [B, k, k]`` (float64) over the ``mask [B, k]``
    rows, exactly: an active-set method on each problem's live rows, on the host.

    With ``A = G / s + 1 1^T`` (``s`` the largest squared row norm) and its Cholesky factor ``A = L L^T``,
    ``|L^T mu - b|^2`` with ``L b = 1`` equals ``mu^T G mu / s + (1^T mu - 1)^2`` up to a constant, the
    objective of :func:`_low_rank_min_norm`'s NNLS: SciPy's non-negative least squares (Lawson-Hanson) on
    the ``k x k`` system gives ``mu``, and ``lambda* = mu / 1^T mu``. The result is checked against
    :func:`min_norm`'s guarantee on every row (``(G lambda)_i >= lambda^T G lambda - slack``, with equality
    within the slack where ``lambda_i > 0``, ``slack = tol * max_i G_ii / 2``); a problem that fails the
    check (or whose ``A`` is not positive definite to working precision, as with repeated rows) is
    solved by :func:`min_norm`. Its time against Frank-Wolfe's: docs/solvers/min-norm.md.
    """
    from scipy.linalg import solve_triangular  # imported at the first large solve: `import most` stays light
    from scipy.optimize import nnls

    _, tol_ = _resolve_options(max_iter, tol)
    B, k, _ = gram.shape
    host, live = gram.detach().cpu().numpy(), mask.cpu().numpy()
    lam = np.zeros((B, k))
    unsolved = []
    for b in range(B):
        idx = np.flatnonzero(live[b])
        if idx.size == 0:
            continue
        g = host[b][np.ix_(idx, idx)]
        scale = float(g.diagonal().max())
        try:
            if not scale > 0:
                raise np.linalg.LinAlgError("no row")
            low = np.linalg.cholesky(g / scale + 1.0)
            rhs = solve_triangular(low, np.ones(idx.size), lower=True)
            mu = nnls(low.T, rhs, maxiter=max(50 * idx.size, 1000))[0]
        except (np.linalg.LinAlgError, RuntimeError):  # also SciPy's "too many iterations" (older versions)
            unsolved.append(b)
            continue
        weights = mu / mu.sum() if mu.sum() > 0 else mu
        scores = g @ weights
        level, slack = float(weights @ scores), 0.5 * tol_ * scale
        on = weights > 0
        if (not on.any() or scores.min() < level - slack
                or np.abs(scores[on] - level).max() > slack):
            unsolved.append(b)
            continue
        lam[b, idx] = weights
    out = torch.from_numpy(lam)
    if unsolved:
        rest = torch.tensor(unsolved)
        out[rest] = min_norm(gram[rest.to(gram.device)], mask=mask[rest.to(mask.device)], max_iter=max_iter,
                             tol=tol).weights.cpu()
    return out


def combine_min_norm(jacobian: Tensor, weights: Tensor, *, coordinates: tuple[int, int] | None = None,
                     max_iter: int | None = None, tol: float | None = None) -> tuple[Tensor, Tensor]:
    """Eq. 9 on a batch, without the argument checks of :func:`min_norm_direction`:
    ``jacobian [B, n, d]`` and non-negative ``weights [B, n]`` -> ``(u [B, d], lambda [B, n])``
    in the Jacobian's dtype. Rows with weight 0 or a zero gradient are left out (see
    :func:`min_norm_direction`); a problem without a row gets ``u = 0``, ``lambda = 0``."""
    # The Gramian is formed in float64: literal Gamma weights can be ~1e-30, which float32
    # would flush to denormals and turn the Gramian into noise.
    jac64 = jacobian.detach().to(dtype=torch.float64, device=_compute_device(jacobian.device))
    w64 = weights.detach().to(device=jac64.device, dtype=torch.float64)
    sub = jac64
    if coordinates is not None:
        start, stop = coordinates
        if stop > jacobian.shape[-1]:
            raise ValueError(f"`coordinates` {tuple(coordinates)} lie outside the {jacobian.shape[-1]} parameters of a "
                             "model; take them from problem.coordinates(name) or model.coordinates(name).")
        sub = jac64[..., start:stop]
    if tol is None and jacobian.dtype in (torch.float32, torch.float16, torch.bfloat16):
        tol = FLOAT32_TOL
    if _low_rank(sub):  # more rows than coordinates: solved on small subsets of rows, no k x k Gramian
        lam = _low_rank_weights(sub, w64, max_iter=max_iter, tol=tol)
    else:
        lam = _gram_weights(sub, w64, max_iter=max_iter, tol=tol)
    direction = torch.bmm((lam * w64).unsqueeze(1), jac64).squeeze(1)
    return (direction.to(dtype=jacobian.dtype, device=jacobian.device),
            lam.to(dtype=jacobian.dtype, device=jacobian.device))


def _gram_weights(sub: Tensor, w64: Tensor, *, max_iter: int | None, tol: float | None) -> Tensor:
    """:func:`combine_min_norm`'s weights ``lambda [B, k]`` (float64, on ``sub``'s device) for
    gradients ``sub [B, k, d]`` (float64) weighted by ``w64 [B, k]``, from their Gramian."""
    rows = w64.unsqueeze(-1) * sub
    gram = _gram(rows)
    norms = sub.norm(dim=-1)
    small = w64
    if solve_device(gram.device, gram.numel()) != gram.device:
        gram, norms, small = to_host([gram, norms, w64])  # the k x k problem on the host, in one copy
    if not torch.isfinite(gram).all() or bool(gram.diagonal(dim1=-2, dim2=-1).amax() < _TINY_GRAM):
        # rows of ~1e200 (or ~1e-200): the Gramian of the rows divided by a power of two per problem
        # (exact; the weights do not depend on a common scale of the rows), so it neither overflows
        # nor underflows
        if not _all_finite(rows):
            raise ValueError("The gradients times their weights overflow float64: the iterates are diverging; "
                             "try a smaller `lr`.")
        rows = _divide_pow2(rows, _pow2_scale(rows, (-2, -1)))
        sub = _divide_pow2(sub, _pow2_scale(sub, (-2, -1)))
        gram, norms = (t.to(gram.device) for t in (_gram(rows), sub.norm(dim=-1)))
    gram = 0.5 * (gram + gram.transpose(1, 2))
    if not torch.isfinite(norms).all():  # huge rows with tiny weights: their norms after an exact rescaling
        norms = _divide_pow2(sub, _pow2_scale(sub, (-2, -1))).norm(dim=-1).to(norms.device)
    live = norms > ZERO_GRADIENT_RTOL * norms.amax(-1, keepdim=True)
    mask = (small > 0) & live
    if gram.shape[-1] > _GRAM_NNLS_MIN_ROWS and gram.device.type == "cpu":  # many rows, as many coordinates
        return to_device(_gram_nnls_min_norm(gram, mask, max_iter=max_iter, tol=tol), sub.device)
    return to_device(min_norm(gram, mask=mask, max_iter=max_iter, tol=tol).weights, sub.device)
