"""The exact solvers of min-norm problems of more than 128 rows, on the host: non-negative least squares
on working sets of rows when the rows are more than their coordinates (without the ``k x k``
Gramian), with Frank-Wolfe on working sets as its fallback, and non-negative least squares on the
Cholesky factor of the Gramian otherwise. Each answer is checked against :func:`most.mgda.min_norm`'s
guarantee on every row."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ._checks import resolve_options
from ._frank_wolfe import min_norm

#: Row counts above which, with fewer coordinates than rows, the min-norm problem is solved
#: exactly by non-negative least squares on the host, without the ``k x k`` Gramian
#: (:func:`low_rank_min_norm`, with :func:`working_set_min_norm` as its fallback).
_WORKING_SET_MIN_ROWS = 128


def gramian(rows: Tensor) -> Tensor:
    """The Gramians ``[B, k, k]`` of ``rows [B, k, d]``."""
    return rows @ rows.transpose(1, 2)


def low_rank(rows: Tensor) -> bool:
    """Whether the Gramian of ``rows [B, k, d]`` has low rank (``d < k``) and is large."""
    k, d = rows.shape[-2], rows.shape[-1]
    return k > _WORKING_SET_MIN_ROWS and d < k


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


def low_rank_min_norm(host: np.ndarray, live: np.ndarray, *, max_iter: int | None,
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
    answers with :func:`working_set_min_norm`.
    """
    from scipy.optimize import nnls  # imported at the first large solve: `import most` stays light

    _, tol_ = resolve_options(max_iter, tol)
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


def working_set_min_norm(rows: Tensor, mask: Tensor, *, max_iter: int | None, tol: float | None) -> Tensor:
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
    _, tol = resolve_options(max_iter, tol)
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
        gram = gramian(picked)
        lam = min_norm(0.5 * (gram + gram.transpose(1, 2)), mask=valid, max_iter=max_iter, tol=tol).weights
    out = torch.zeros(B, k, dtype=rows.dtype, device=rows.device)
    return out.scatter_add_(1, index, lam * valid)


#: Row counts above which the min-norm problem on a Gramian (as many coordinates as rows, or more) is solved
#: exactly by non-negative least squares on its Cholesky factor (:func:`gram_nnls_min_norm`) instead of by
#: Frank-Wolfe, which adds one row per iteration: such problems' optima hold most of their rows.
GRAM_NNLS_MIN_ROWS = _WORKING_SET_MIN_ROWS


def gram_nnls_min_norm(gram: Tensor, mask: Tensor, *, max_iter: int | None, tol: float | None) -> Tensor:
    """The min-norm weights of the symmetric Gramians ``gram [B, k, k]`` (float64) over the ``mask [B, k]``
    rows, exactly: an active-set method on each problem's live rows, on the host.

    With ``A = G / s + 1 1^T`` (``s`` the largest squared row norm) and its Cholesky factor ``A = L L^T``,
    ``|L^T mu - b|^2`` with ``L b = 1`` equals ``mu^T G mu / s + (1^T mu - 1)^2`` up to a constant, the
    objective of :func:`low_rank_min_norm`'s NNLS: SciPy's non-negative least squares (Lawson-Hanson) on
    the ``k x k`` system gives ``mu``, and ``lambda* = mu / 1^T mu``. The result is checked against
    :func:`min_norm`'s guarantee on every row (``(G lambda)_i >= lambda^T G lambda - slack``, with equality
    within the slack where ``lambda_i > 0``, ``slack = tol * max_i G_ii / 2``); a problem that fails the
    check (or whose ``A`` is not positive definite to working precision, as with repeated rows) is
    solved by :func:`min_norm`. Its time against Frank-Wolfe's: docs/solvers/min-norm.md.
    """
    from scipy.linalg import solve_triangular  # imported at the first large solve: `import most` stays light
    from scipy.optimize import nnls

    _, tol_ = resolve_options(max_iter, tol)
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
