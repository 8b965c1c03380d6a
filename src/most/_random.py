"""Randomness derived from a run's ``torch.Generator`` (one seed drives every draw)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def torch_seed(seed: int) -> int:
    """The seed torch's generator gets for the library's ``seed`` (an int >= 0): a seed below
    2**32 as it is; a larger one through NumPy's :class:`~numpy.random.SeedSequence` of the whole
    integer. torch's CPU generator keeps 32 bits of its seed, so seeds 2**32 apart would otherwise
    give one stream."""
    seed = int(seed)
    if 0 <= seed < 2**32:
        return seed
    return int(np.random.SeedSequence(abs(seed)).generate_state(1, np.uint32)[0])


def seeded(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`torch_seed` of ``seed``."""
    return torch.Generator().manual_seed(torch_seed(seed))


def derive_seed(generator: torch.Generator) -> int:
    """A fresh integer seed drawn from ``generator`` (for numpy or a forked torch RNG)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator))


def dirichlet(generator: torch.Generator, concentration: float, n: int, size: int,
              dtype: torch.dtype | None = None) -> Tensor:
    """``size`` draws from Dirichlet(concentration * 1_n), shape ``[size, n]``."""
    w = np.random.default_rng(derive_seed(generator)).dirichlet(np.full(n, concentration), size=size)
    return torch.as_tensor(w, dtype=dtype or torch.get_default_dtype())


def stratified_split(labels: np.ndarray, fractions, rng: np.random.Generator) -> list[np.ndarray]:
    """Train/val/test row indices (each sorted), stratified by class.

    Each class (stratum) is shuffled, the classes are laid end to end, and the rows are dealt
    out so that every prefix is as close as possible to the fractions (largest deficit first):
    the part sizes are within 1 of ``N * fraction`` and every class, being a contiguous block,
    is split in (nearly) the same proportions. Used by the Office-Caltech10 loader and
    :meth:`~most.problems.FairnessData.split_indices`.
    """
    order = np.concatenate([rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)])
    f = np.asarray(fractions, dtype=np.float64)
    counts = np.zeros(3)
    part: np.ndarray = np.empty(len(order), dtype=np.int64)
    for t in range(len(order)):
        k = int(np.argmax((t + 1) * f - counts))
        part[t] = k
        counts[k] += 1
    return [np.sort(order[part == k]) for k in range(3)]
