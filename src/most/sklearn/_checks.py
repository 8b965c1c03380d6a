"""The checks on the estimators' parameters, data and group labels, and scikit-learn's ``validate_data``
for every version."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from .. import optim

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data
except ImportError:  # pragma: no cover - older scikit-learn

    def validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)


_TRANSPORTS = ("exact", "sinkhorn", "newton", "ipot")
OPTIMIZERS = {"adam": optim.Adam, "sgd": optim.SGD}
_ROUTINGS = ("average", "dispatcher")


def moments(a: np.ndarray, *, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and standard deviation (1 for a constant column) used to standardise ``a``
    ``[n_samples, k]``; a column whose values overflow them in float64 is refused.

    A column is constant when its standard deviation is within the rounding error of its mean,
    ``n_samples * eps * |mean|`` (the bound of scikit-learn's ``StandardScaler``): in float64 a
    column of 0.1 has a tiny standard deviation, not 0, and dividing by it would blow up any
    later change of that feature.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        mean, scale = a.mean(axis=0), a.std(axis=0)
    bad = ~(np.isfinite(mean) & np.isfinite(scale))
    if bad.any():
        col = int(np.argmax(bad))
        raise ValueError(
            f"`{name}` is too large to standardise in float64: column {col} (largest magnitude "
            f"{float(np.abs(a[:, col]).max()):.3g}) overflows its mean or standard deviation. Rescale it "
            f"before fit, e.g. divide by a constant such as `np.abs({name}).max()`"
            + (" (and multiply the predictions by it)." if name == "y" else " (and X at predict time too).")
        )
    constant = scale <= a.shape[0] * np.finfo(np.float64).eps * np.abs(mean)
    return mean, np.where(constant, 1.0, scale)


def finite_predictions(out: np.ndarray) -> np.ndarray:
    """``out`` unchanged when finite; a sample whose prediction overflowed is refused, never returned."""
    bad = ~np.isfinite(out)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(
            f"The prediction for sample {row} is not finite (it overflows float64): its features lie far "
            "outside the range of the training data. Check that X is in the units used in fit."
        )
    return out


def _param_error(estimator: BaseEstimator, name: str, must: str, value: Any) -> ValueError:
    return ValueError(
        f"The '{name}' parameter of {type(estimator).__name__} must be {must}. Got {value!r} instead."
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)


def check_params(est: BaseEstimator) -> tuple[int, ...]:
    """Validates the constructor parameters of a MosT estimator; returns ``hidden_layer_sizes`` as a tuple."""
    if not _is_int(est.n_models) or est.n_models < 1:
        raise _param_error(est, "n_models", "an int in the range [1, inf)", est.n_models)
    if not _is_int(est.rounds) or est.rounds < 1:
        raise _param_error(est, "rounds", "an int in the range [1, inf)", est.rounds)
    if not _is_real(est.lr) or est.lr <= 0:
        raise _param_error(est, "lr", "a float in the range (0, inf)", est.lr)
    if not _is_real(est.diversity) or est.diversity < 0:
        raise _param_error(est, "diversity", "a float in the range [0, inf)", est.diversity)
    if not _is_real(est.alpha) or est.alpha < 0:
        raise _param_error(est, "alpha", "a float in the range [0, inf)", est.alpha)
    if est.optimizer not in OPTIMIZERS:
        raise _param_error(est, "optimizer", f"a str among {set(OPTIMIZERS)}", est.optimizer)
    if est.transport not in _TRANSPORTS:
        raise _param_error(est, "transport", f"a str among {set(_TRANSPORTS)}", est.transport)
    if est.routing not in _ROUTINGS:
        raise _param_error(est, "routing", f"a str among {set(_ROUTINGS)}", est.routing)
    hidden: Any = est.hidden_layer_sizes  # as set (an int, an iterable, anything), checked here
    hidden = (hidden,) if _is_int(hidden) else hidden
    sizes: tuple[int, ...] | None
    try:
        sizes = tuple(hidden)
    except TypeError:
        sizes = None
    if sizes is None or not all(_is_int(h) and h >= 1 for h in sizes):
        raise _param_error(
            est, "hidden_layer_sizes", "a tuple of ints >= 1 (() for a linear model)", est.hidden_layer_sizes
        )
    return sizes


def _is_missing(label: Any) -> bool:
    """Whether a group label is missing: None, or a value unequal to itself (NaN, NaT), or one whose
    equality is neither true nor false (pandas' NA)."""
    if label is None:
        return True
    try:
        return bool(label != label)
    except TypeError:
        return True


def check_groups(groups: Any, n_samples: int, *, where: str) -> np.ndarray:
    groups = np.asarray(groups)
    if groups.ndim != 1:
        raise ValueError(
            f"groups in {where} must be a 1-D array with one group label per sample; got shape {groups.shape}."
        )
    if groups.shape[0] != n_samples:
        raise ValueError(
            f"groups in {where} has {groups.shape[0]} labels but X has {n_samples} samples; "
            "pass one group label per sample."
        )
    if groups.dtype.kind == "f" and np.isnan(groups).any():
        raise ValueError(f"groups in {where} contains NaN; every sample needs a group label.")
    if groups.dtype.kind in "mM" and np.isnat(groups).any():
        raise ValueError(f"groups in {where} contains NaT; every sample needs a group label.")
    if groups.dtype.kind == "O":
        # A missing label (NaN, None) is not a group: NaN is unequal to everything, itself included,
        # so np.unique would make each NaN sample a group of its own and leave the labels unsorted.
        if any(_is_missing(g) for g in groups):
            raise ValueError(f"groups in {where} contains NaN or None; every sample needs a group label.")
        try:
            np.unique(groups)
        except TypeError as exc:
            raise ValueError(
                f"groups in {where} mixes labels that cannot be compared ({exc}); use labels of one type."
            ) from exc
    return groups


def label_kind(labels: np.ndarray) -> str:
    """``"number"``, ``"string"`` or ``"other"``: the kind of the group labels, for telling
    labels that can never match (numbers against strings) from new groups."""
    kind = labels.dtype.kind
    if kind in "biuf":
        return "number"
    if kind in "US":
        return "string"
    if kind == "O" and len(labels):
        if all(isinstance(g, (int, float, np.number)) and not isinstance(g, bool) for g in labels):
            return "number"
        if all(isinstance(g, str) for g in labels):
            return "string"
    return "other"
