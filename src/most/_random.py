"""Randomness derived from a run's ``torch.Generator`` (one seed drives every draw)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def derive_seed(generator: torch.Generator) -> int:
    """A fresh integer seed drawn from ``generator`` (for numpy or a forked torch RNG)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator))


def dirichlet(generator: torch.Generator, concentration: float, n: int, size: int,
              dtype: torch.dtype | None = None) -> Tensor:
    """``size`` draws from Dirichlet(concentration * 1_n), shape ``[size, n]``."""
    w = np.random.default_rng(derive_seed(generator)).dirichlet(np.full(n, concentration), size=size)
    return torch.as_tensor(w, dtype=dtype or torch.get_default_dtype())
