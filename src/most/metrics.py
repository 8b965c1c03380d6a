"""Metrics: hypervolume (moocore), best-of-k hypervolume on a 2-D front, per-objective summaries,
and many-objective summaries of a loss matrix (worst / average best loss, model recovery)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from ._validation import check_bool, check_has_data, check_positive, check_positive_int

__all__ = [
    "HypervolumeResult",
    "hypervolume",
    "best_hypervolume_2d",
    "worst_fraction_mean",
    "worst_objective",
    "average_objective",
    "recovery_error",
]


class HypervolumeResult(float):
    """A float (the hypervolume) that also says how many points lay outside the reference box.

    It can be copied, deep-copied and pickled (e.g. sent to a worker process or stored in a
    checkpoint) with its value and ``outside``."""

    outside: int

    def __new__(cls, value: float, outside: int):
        obj = super().__new__(cls, value)
        obj.outside = outside
        return obj

    def __reduce__(self):
        # copy and pickle rebuild the object as HypervolumeResult(value, outside); float's own recipe
        # passes the value alone, which __new__ (it needs `outside` too) refuses
        return type(self), (float(self), self.outside)


def hypervolume(points, reference) -> HypervolumeResult:
    """Hypervolume dominated by ``points`` ``[k, n]`` (minimisation) and bounded by ``reference``.

    Computed by :func:`moocore.hypervolume`. Points not strictly inside the reference box add
    nothing; their number is returned in ``.outside``. A set whose points are all equal gets
    its true hypervolume, with a warning that the set is degenerate. A hypervolume too large
    for float64 (e.g. a reference point of ``1e200``) is refused with a ``ValueError`` rather
    than returned as ``inf``.
    """
    import moocore

    ref = _reference(reference)
    pts = _array(points, name="points")
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
    _check_finite_volume(value, ref, pts[inside])
    return HypervolumeResult(value, outside)


def _check_finite_volume(value: float, ref: np.ndarray, pts: np.ndarray) -> None:
    """Refuses a hypervolume that overflowed float64 (finite inputs, infinite or NaN volume)."""
    if not math.isfinite(value):
        span = (ref - pts.min(0)) if len(pts) else ref
        raise ValueError(
            f"The hypervolume overflows float64 (it is {value}): the box between the points and the reference "
            f"point is too large (its sides reach {float(np.max(np.abs(span))):.3g}). Rescale the objectives "
            "and the reference point (e.g. divide both by the reference point's size) or use a reference point "
            "closer to the points."
        )


def best_hypervolume_2d(front, reference, k: int) -> float:
    """The largest hypervolume of ``k`` points chosen on a sampled 2-D front (exact DP on the sample).

    ``front`` is ``[N, 2]`` (non-dominated, any order). With points sorted by f1, the
    hypervolume is ``sum_t (f1_{t+1} - f1_t)(r2 - f2_t)`` with ``f1_{k+1} = r1``; a dynamic
    programme over the sample maximises it in ``O(k N^2)``. This is the physical limit that a
    k-solution method can reach (up to the sampling resolution).

    ``reference`` is a finite point ``[2]`` and ``k`` an int >= 1. Points not strictly inside
    the reference box add nothing; an empty front, or one with no point inside, gives 0.0.
    ``k`` larger than the number N of points inside the box is the same as ``k = N`` (k points
    cannot do better than all N), so the cost is ``O(min(k, N) N^2)``. A hypervolume too large
    for float64 is refused with a ``ValueError``, as in :func:`hypervolume`.

    >>> best_hypervolume_2d([[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]], [2.0, 2.0], k=1)
    2.25
    >>> best_hypervolume_2d([[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]], [2.0, 2.0], k=3)
    3.25
    """
    k = check_positive_int(k, name="k")
    r = _reference(reference)
    if r.shape != (2,):
        raise ValueError(f"`reference` must be a point of 2 objectives for a 2-D front; got shape {r.shape}.")
    f = _array(front, name="front")
    if f.ndim != 2 or f.shape[1] != 2:
        raise ValueError(
            f"`front` must have shape [N, 2] (N points of 2 objectives); got shape {f.shape}. For more "
            "objectives use `hypervolume` on a chosen set of points."
        )
    if not np.isfinite(f).all():
        raise ValueError("`front` contains NaN or inf; the hypervolume is undefined.")
    f = f[(f < r).all(1)]
    if len(f) == 0:
        return 0.0
    f = f[np.argsort(f[:, 0])]
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, with its reason
        height = r[1] - f[:, 1]
        value = (r[0] - f[:, 0]) * height  # one point: V1[i]
        best = value.max()
        gap = f[None, :, 0] - f[:, None, 0]  # [i, j]: f1_j - f1_i
        valid = gap > 0
        for _ in range(1, min(k, len(f))):  # k > N points cannot do better than all N
            cand = np.where(valid, gap * height[:, None] + value[None, :], -np.inf)
            value = cand.max(1)
            best = max(best, value.max())
    _check_finite_volume(float(best), r, f)
    return float(best)


def worst_fraction_mean(values, fraction: float, *, larger_is_worse: bool = True) -> float:
    """Mean of the worst ``fraction`` of ``values`` (e.g. the worst 20 % of clients).

    ``values`` is a non-empty vector of finite numbers and ``fraction`` a number in (0, 1]; at
    least one value is averaged.

    >>> worst_fraction_mean([1.0, 5.0, 2.0, 4.0], 0.5)
    4.5
    """
    fraction = check_positive(fraction, name="fraction")
    if fraction > 1:
        raise ValueError(f"`fraction` must be in (0, 1] (e.g. 0.2 for the worst 20 %); got {fraction!r}.")
    larger_is_worse = check_bool(larger_is_worse, name="larger_is_worse")  # "false" is a true string
    v = _array(values, name="values")
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"`values` must be a non-empty vector (one value per client or objective); got shape {v.shape}.")
    if not np.isfinite(v).all():
        raise ValueError("`values` contains NaN or inf; the mean is undefined.")
    v = np.sort(v)
    if larger_is_worse:
        v = v[::-1]
    k = max(1, int(round(fraction * len(v))))
    return float(v[:k].mean())


def _array(x, *, name: str) -> np.ndarray:
    """``x`` (a tensor or array-like of real numbers) as a float64 NumPy array, or a ValueError naming it."""
    if isinstance(x, torch.Tensor):
        check_has_data(x, name=name)
        if x.is_complex() or x.dtype == torch.bool:  # as a NumPy array of these dtypes is refused below
            raise ValueError(f"`{name}` must be a tensor or array of real numbers; got dtype {x.dtype}.")
        return x.detach().cpu().double().numpy()
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as exc:  # e.g. a ragged list
        raise ValueError(f"`{name}` must be a tensor or array of real numbers; got {type(x).__name__}.") from exc
    if a.dtype.kind not in "iuf":
        raise ValueError(f"`{name}` must be a tensor or array of real numbers; got {type(x).__name__} of dtype {a.dtype}.")
    return a.astype(float)


def _reference(reference) -> np.ndarray:
    r = _array(reference, name="reference")
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"`reference` must be a point, a vector with one value per objective; got shape {r.shape}.")
    if not np.isfinite(r).all():
        raise ValueError(f"`reference` must be finite; got {r.tolist()}.")
    return r


def _best_losses(losses) -> np.ndarray:
    L = _array(losses, name="losses")
    if L.ndim != 2 or 0 in L.shape:
        raise ValueError(
            f"`losses` must be a loss matrix of shape [n, m] (objectives x models, like Result.losses); "
            f"got shape {L.shape}."
        )
    if not np.isfinite(L).all():
        raise ValueError("`losses` contains NaN or inf; the metric is undefined.")
    return L.min(1)


def worst_objective(losses) -> float:
    """``max_i min_j L[i, j]``: the loss of the worst-served objective, each by its best model.

    ``losses`` is ``[n, m]`` (objectives x models, as :attr:`most.Result.losses`).

    >>> import torch
    >>> worst_objective(torch.tensor([[1.0, 3.0], [4.0, 2.0], [0.5, 0.1]]))
    2.0
    """
    return float(_best_losses(losses).max())


def average_objective(losses) -> float:
    """``mean_i min_j L[i, j]``: the mean loss of the objectives, each by its best model.

    >>> import torch
    >>> round(average_objective(torch.tensor([[1.0, 3.0], [4.0, 2.0], [0.5, 0.1]])), 6)
    1.033333
    """
    return float(_best_losses(losses).mean())


#: below this largest coordinate the squares in a distance may underflow float64 (the norm of a
#: difference of 1e-200 squares it to 0), so :func:`recovery_error` computes in rescaled units
_TINY_COORDINATES = 1e-140


def recovery_error(estimated, true) -> float:
    """How well m estimated models recover k ground-truth models (e.g. mixed regression).

    Definition: with ``D[j, l] = ||estimated_j - true_l||`` (Euclidean), the estimated
    models are matched one-to-one to the true ones by the assignment that minimises the
    total distance (:func:`scipy.optimize.linear_sum_assignment`, so the labels of the
    estimates do not matter). The error is the mean, over the k true models, of the
    distance to the matched estimate. If m > k the m - k unmatched estimates are ignored
    (spare models cost nothing); if m < k the k - m true models left unmatched are charged
    their distance to the nearest estimate. 0 means every true model is recovered exactly.
    Distances too large for float64 (coordinates of ~1e160), or whose squares are too small for
    it (coordinates of ~1e-160), are computed in rescaled units; an
    error too large for float64 is refused with a ``ValueError``.

    Args:
        estimated: ``[m, d]`` (e.g. ``Result.params``).
        true: ``[k, d]`` (e.g. ``MixedRegression.betas``).

    >>> import torch
    >>> true = torch.tensor([[0.0, 0.0], [10.0, 0.0]])
    >>> recovery_error(torch.tensor([[10.0, 1.0], [0.0, 0.0], [5.0, 5.0]]), true)
    0.5
    """
    def as_array(x, name):
        a = _array(x, name=name)
        if a.ndim != 2 or 0 in a.shape:
            raise ValueError(f"`{name}` must be a matrix of models, shape [count, dim]; got shape {a.shape}.")
        if not np.isfinite(a).all():
            raise ValueError(f"`{name}` contains NaN or inf.")
        return a

    est, tru = as_array(estimated, "estimated"), as_array(true, "true")
    if est.shape[1] != tru.shape[1]:
        raise ValueError(
            f"`estimated` and `true` must have the same parameter dimension; got {est.shape[1]} and {tru.shape[1]}."
        )
    largest = float(max(np.abs(est).max(), np.abs(tru).max()))
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is handled below
        dist = np.linalg.norm(est[:, None, :] - tru[None, :, :], axis=-1)  # [m, k]
        error = _matched_mean(dist) if np.isfinite(dist).all() else math.inf
    if math.isfinite(error) and largest >= _TINY_COORDINATES:
        return error
    if largest == 0.0:
        return 0.0
    # The distances (or their sum) overflow float64 (coordinates of ~1e160), or their squares
    # underflow (coordinates of ~1e-160): they are computed in units of a power of two near the
    # largest coordinate (dividing by it is exact), where they are at most 2 sqrt(d) and the
    # assignment is that of the true distances up to rounding, then scaled back.
    unit = float(np.ldexp(1.0, int(np.frexp(largest)[1]) - 1))
    with np.errstate(over="ignore"):  # an error too large for float64 is refused just below
        error = _matched_mean(np.linalg.norm(est[:, None, :] / unit - tru[None, :, :] / unit, axis=-1)) * unit
    if not math.isfinite(error):
        raise ValueError(
            f"The recovery error overflows float64 (the models' coordinates reach {largest:.3g}). Rescale "
            "`estimated` and `true` (divide both by the same constant: the error is divided by it too)."
        )
    return error


def _matched_mean(dist: np.ndarray) -> float:
    """The mean over the true models (columns of ``dist [m, k]``) of the distance to the estimate matched to
    each by the assignment of least total distance, or to the nearest estimate for those left unmatched."""
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(dist)
    per_true = dist.min(0)  # used only for true models left unmatched (m < k)
    per_true[cols] = dist[rows, cols]
    return float(per_true.mean())
