"""Input checks shared by the soft-prompt modules (labels of instances, targets of the dispatcher)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import check_has_data


def class_indices(values, *, name: str, size: int, classes: int, what: str) -> Tensor:
    """``values`` as an int64 vector ``[size]`` of class indices in ``0..classes-1``.

    Floating, complex and bool values are refused (``TypeError``): casting 0.3 and 0.9 to ``long``
    would read both as class 0 without a word. ``what`` names the values in the messages
    (``"class labels"``, ``"prompt indices"``)."""
    try:
        t = values if isinstance(values, Tensor) else torch.as_tensor(values)
    except Exception as exc:
        raise TypeError(f"`{name}` must be a vector of {what} (integers); got {type(values).__name__}.") from exc
    check_has_data(t, name=name)
    if t.numel() == 0:  # no values to misread (``torch.as_tensor([])`` is float)
        t = t.to(torch.int64)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(
            f"`{name}` must hold {what} (integers in 0..{classes - 1}); got dtype {t.dtype}. Convert them "
            f"explicitly (e.g. `{name}.long()` for whole numbers): they are not rounded or truncated silently."
        )
    if t.shape != (size,):
        raise ValueError(f"`{name}` must have shape [{size}] (one per instance); got {tuple(t.shape)}.")
    t = t.to(torch.int64)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= classes):
        raise ValueError(
            f"`{name}` must hold {what} in 0..{classes - 1}; got values from {int(t.min())} to {int(t.max())}."
        )
    return t
