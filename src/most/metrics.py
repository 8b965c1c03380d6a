"""Metrics: hypervolume (moocore), best-of-k hypervolume on a 2-D front, and per-objective summaries."""

from __future__ import annotations

import warnings

import numpy as np
import torch

__all__ = ["HypervolumeResult", "hypervolume", "best_hypervolume_2d", "worst_fraction_mean"]


class HypervolumeResult(float):
    """A float (the hypervolume) that also says how many points lay outside the reference box."""

    outside: int

    def __new__(cls, value: float, outside: int):
        obj = super().__new__(cls, value)
        obj.outside = outside
        return obj


def hypervolume(points, reference) -> HypervolumeResult:
    """Hypervolume dominated by ``points`` ``[k, n]`` (minimisation) and bounded by ``reference``.

    Computed by :func:`moocore.hypervolume`. Points not strictly inside the reference box add
    nothing; their number is returned in ``.outside``. A set whose points are all equal gets
    its true hypervolume, with a warning that the set is degenerate.
    """
    import moocore

    pts = np.asarray(torch.as_tensor(points).detach().cpu().double().numpy() if isinstance(points, torch.Tensor)
                     else points, dtype=float)
    ref = np.asarray(reference, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != ref.shape[0]:
        raise ValueError(f"points must have shape [k, {ref.shape[0]}] to match the reference point; got {pts.shape}.")
    if not np.isfinite(pts).all():
        raise ValueError("points contain NaN or inf; the hypervolume is undefined.")
    inside = (pts < ref).all(1)
    outside = int((~inside).sum())
    if len(pts) > 1 and np.ptp(pts, axis=0).max() == 0:
        warnings.warn("All solutions are equal: the set is degenerate (its hypervolume is that of one point).",
                      stacklevel=2)
    value = float(moocore.hypervolume(pts[inside], ref=ref)) if inside.any() else 0.0
    return HypervolumeResult(value, outside)


def best_hypervolume_2d(front, reference, k: int) -> float:
    """The largest hypervolume of ``k`` points chosen on a sampled 2-D front (exact DP on the sample).

    ``front`` is ``[N, 2]`` (non-dominated, any order). With points sorted by f1, the
    hypervolume is ``sum_t (f1_{t+1} - f1_t)(r2 - f2_t)`` with ``f1_{k+1} = r1``; a dynamic
    programme over the sample maximises it in ``O(k N^2)``. This is the physical limit that a
    k-solution method can reach (up to the sampling resolution).
    """
    f = np.asarray(front, dtype=float)
    r = np.asarray(reference, dtype=float)
    f = f[(f < r).all(1)]
    f = f[np.argsort(f[:, 0])]
    height = r[1] - f[:, 1]
    value = (r[0] - f[:, 0]) * height  # one point: V1[i]
    best = value.max()
    gap = f[None, :, 0] - f[:, None, 0]  # [i, j]: f1_j - f1_i
    valid = gap > 0
    for _ in range(1, k):
        cand = np.where(valid, gap * height[:, None] + value[None, :], -np.inf)
        value = cand.max(1)
        best = max(best, value.max())
    return float(best)


def worst_fraction_mean(values, fraction: float, *, larger_is_worse: bool = True) -> float:
    """Mean of the worst ``fraction`` of ``values`` (e.g. the worst 20 % of clients)."""
    v = np.sort(np.asarray(values, dtype=float))
    if larger_is_worse:
        v = v[::-1]
    k = max(1, int(round(fraction * len(v))))
    return float(v[:k].mean())
