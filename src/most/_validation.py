"""Input checks shared by the solvers.

Every public entry point validates its inputs once, up front, and raises a
``ValueError`` that says what is wrong and how to fix it, before any work is done.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

#: Absolute tolerance for "sums to one" checks on marginals.
SIMPLEX_ATOL = 1e-6


def as_tensor(x, *, name: str, like: Tensor | None = None) -> Tensor:
    """Converts array-likes to a floating tensor (dtype/device follow ``like`` when given)."""
    if isinstance(x, Tensor):
        t = x
    else:
        try:
            t = torch.as_tensor(x)
        except Exception as exc:  # pragma: no cover - message only
            raise ValueError(f"`{name}` must be a tensor or array-like of numbers; got {type(x).__name__}.") from exc
    if like is not None:
        t = t.to(dtype=like.dtype, device=like.device)
    elif not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    return t


def matrix_range(x: Tensor | np.ndarray, *, name: str) -> tuple[float, float]:
    """Checks that ``x`` is a finite, non-empty ``[n, m]`` matrix and returns ``(min, max)``
    (one device sync: a NaN or inf shows in the extremes, so finiteness needs no pass of its own).
    ``x`` is a tensor or a NumPy array (the exact transport solver checks on the host)."""
    if x.ndim != 2:
        raise ValueError(f"`{name}` must be a 2-D matrix of shape [n, m]; got shape {tuple(x.shape)}.")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(
            f"`{name}` has shape {tuple(x.shape)}: there must be at least one objective (row) "
            "and one model (column)."
        )
    if isinstance(x, np.ndarray):
        lo, hi = float(x.min()), float(x.max())
    else:
        lo, hi = (float(v) for v in torch.stack(torch.aminmax(x)).tolist())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        bad = (~torch.isfinite(torch.as_tensor(x))).nonzero()[0].tolist()
        raise ValueError(
            f"`{name}` contains a non-finite value (NaN or inf), first at row {bad[0]}, column {bad[1]}."
        )
    return lo, hi


def simplex_stats(x: Tensor, *, name: str, size: int, atol: float = SIMPLEX_ATOL) -> tuple[float, float]:
    """Checks that ``x`` is a length-``size`` probability vector and returns ``(min, sum)`` (one device sync)."""
    if x.ndim != 1 or x.shape[0] != size:
        raise ValueError(f"`{name}` must be a vector of length {size}; got shape {tuple(x.shape)}.")
    if x.device.type == "cpu":
        lo, total = float(x.min()), float(x.sum())
    else:
        lo, total = (float(v) for v in torch.stack([x.min(), x.sum()]).tolist())  # one sync
    if not (math.isfinite(lo) and math.isfinite(total)):
        raise ValueError(f"`{name}` contains NaN or inf; it must be a probability vector.")
    if lo < 0:
        i = int((x < 0).nonzero()[0])
        raise ValueError(
            f"`{name}` must be non-negative (a probability vector); entry {i} is {float(x[i]):.3g}."
        )
    if abs(total - 1.0) > atol:
        raise ValueError(
            f"`{name}` must sum to 1 (a probability vector); it sums to {total:.8g}. "
            f"Divide it by its sum, e.g. `{name} / {name}.sum()`."
        )
    return lo, total


def host_marginal(x, *, name: str, size: int) -> np.ndarray:
    """The validated marginal as a float64 NumPy vector, rescaled to sum to 1 (a new array),
    for the transport solvers that run on the host.

    The sum is torch's, as in ``most.transport._marginal`` (NumPy's pairwise sum can differ in
    the last bit, which is enough to change the simplex's choice between tied optimal plans)."""
    t = as_tensor(x, name=name).detach().to("cpu", torch.float64)
    _, total = simplex_stats(t, name=name, size=size)
    return t.numpy() / total


def check_positive_int(value, *, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}; got {value!r}.")
    return value


def check_non_negative(value, *, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"`{name}` must be a non-negative number; got {value!r}.")
    return float(value)


def check_positive(value, *, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"`{name}` must be a positive number; got {value!r}.")
    return float(value)
