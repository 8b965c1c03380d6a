"""What the data-set loaders of :mod:`most.problems` share."""

from __future__ import annotations

import numpy as np


def check_seed(seed) -> int:
    """A non-negative integer seed (numpy integers too) as an ``int``; ``ValueError`` otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative int; got {seed!r}.")
    return int(seed)
