"""The min-norm solver on Gramians: away-step Frank-Wolfe with exact line search and face corrections
(Wolfe's minor cycle), batched over problems, after the repair of a Gramian that is not positive
semi-definite beyond round-off; :func:`min_norm` checks the inputs and runs it (the package docstring
of :mod:`most.mgda` describes the algorithm and its guarantee)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from .._host import solve_device, to_device
from .._warnings import ConvergenceWarning
from ._checks import check_diagonal, check_gram, check_mask, check_symmetric, real_tensor, resolve_options
from ._scaling import divide_pow2, pow2_scale

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


@dataclass(frozen=True)
class MinNormResult:
    """Result of :func:`~most.mgda.min_norm`.

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
    e = pow2_scale(G64, (-2, -1))
    G64 = divide_pow2(G64, e)
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
            cone, see :mod:`most.mgda`); a grossly indefinite matrix (smallest
            eigenvalue of ``D G D`` below -1e-2, ``D = diag(G)^-1/2``) raises
            ``ValueError``.
        mask: Optional boolean tensor, shape ``[n]`` (shared by the batch) or ``[B, n]``.
            Objectives with ``mask == False`` are excluded: their weight is exactly 0
            and they are never selected. A problem whose mask is all False gets
            all-zero weights and ``norm_sq == 0`` (there is nothing to descend on).
        max_iter: Iteration cap, default :data:`~most.mgda.DEFAULT_MAX_ITER` (10 000). Reaching it
            raises a :class:`~most.ConvergenceWarning` and sets ``converged=False``.
        tol: Stopping tolerance on the Frank-Wolfe and away duality gaps, *relative*
            to :math:`\max_i G_{ii}` (the largest squared gradient norm), so results do
            not depend on the scale of the gradients. Default :data:`~most.mgda.DEFAULT_TOL`
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
        see :mod:`most.mgda`. On MPS, which has no float64, the solve runs on the
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
    g = real_tensor(gram, name="gram", real="a real matrix",
                     shape="[n, n] (one problem) or [B, n, n] (a batch of B problems)")
    out_dtype, out_device = g.dtype, g.device
    # a small problem on an accelerator is solved on the host: one copy there and one back
    # instead of a launch and a host read per iteration (most._host)
    g = check_gram(g.detach().to(solve_device(out_device, g.numel())))
    max_iter, tol = resolve_options(max_iter, tol)
    batched = g.ndim == 3
    n = g.shape[-1]
    g3 = g if batched else g.unsqueeze(0)
    # The solve runs in inference mode (a few hundred tiny operations: autograd's bookkeeping
    # is a fifth of their cost); the outputs are cloned out of it into ordinary tensors.
    with torch.inference_mode():
        G64 = g3.to(dtype=torch.float64)
        check_symmetric(G64, out_dtype)
        check_diagonal(G64, out_dtype)
        G64 = 0.5 * G64 + 0.5 * G64.transpose(-2, -1)  # (G + Gᵀ) / 2 without overflow at 1e308
        if mask is None:
            m = torch.ones(G64.shape[0], n, dtype=torch.bool, device=G64.device)
        else:
            m = check_mask(mask, batch=g.shape[0] if batched else None, n=n, device=G64.device)

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

