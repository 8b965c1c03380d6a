"""Exact rescaling by powers of two: a problem divided by a power of two has the same min-norm weights,
bit for bit, and neither overflows nor underflows float64 (rows of ~1e200 or ~1e-200)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def pow2_scale(x: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Per-problem exponents ``e`` with ``max |x| * 2**-e`` in ``[0.5, 1)`` (0 where ``x`` is all zero):
    dividing by a power of two is exact, so a solve on ``ldexp(x, -e)`` gives the same weights
    bit for bit, without overflowing (entries ~1e200, whose squares are inf) or underflowing."""
    mag = x.abs().amax(dim=dims)
    return torch.where(mag > 0, torch.frexp(mag).exponent, 0)


def divide_pow2(x: Tensor, e: Tensor) -> Tensor:
    """``x / 2**e`` exactly, ``e [B]`` (from :func:`pow2_scale`) per problem of ``x [B, ...]``:
    ``torch.ldexp(x, -e)`` bit for bit, by one multiplication when every power is a normal number
    (a tenth of ldexp's time on a large ``x``)."""
    e = e.reshape(-1, *([1] * (x.ndim - 1)))
    if bool(e.abs().max() <= 1000):
        return x * torch.pow(2.0, -e.to(x.dtype))
    return torch.ldexp(x, -e)


def all_finite(x: Tensor) -> bool:
    """Whether every entry of ``x`` is finite, from its extremes (a NaN propagates into both):
    one reduction instead of an elementwise test."""
    if x.numel() == 0:
        return True
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))



def host_divide_pow2(x: np.ndarray) -> np.ndarray:
    """:func:`divide_pow2` of :func:`pow2_scale` over the last two axes, in NumPy: ``x [B, k, d]``
    divided per problem by the power of two that brings its largest entry into ``[0.5, 1)``
    (exact: the same numbers bit for bit)."""
    mag = np.abs(x).max(axis=(-2, -1))
    e = np.where(mag > 0, np.frexp(mag)[1], 0)
    if e.size == 0 or np.abs(e).max() <= 1000:
        return x * np.ldexp(1.0, -e)[:, None, None]
    return np.ldexp(x, -e[:, None, None])
