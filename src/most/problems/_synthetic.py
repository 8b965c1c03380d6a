from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .._random import seeded
from .._validation import check_non_negative, check_positive, check_positive_int, check_seed
from ..problem import Problem


def quadratic_clusters(n_clusters: int = 4, per_cluster: int = 8, dim: int = 2, *, separation: float = 10.0,
                       spread: float = 1.0, seed: int = 0) -> Problem:
    """``n_clusters * per_cluster`` quadratic objectives ``||theta - c_i||^2``.

    Cluster means sit on a circle (first two coordinates) with ``separation`` between
    neighbours; each centre is its cluster mean plus a uniform draw from the cube
    ``[-spread, spread]^dim``. ``metadata`` holds ``centres [n, dim]``, ``labels [n]`` and
    ``means [n_clusters, dim]``.
    """
    check_positive_int(n_clusters, name="n_clusters")
    check_positive_int(per_cluster, name="per_cluster")
    check_positive_int(dim, name="dim", minimum=2)
    check_positive(separation, name="separation")
    check_non_negative(spread, name="spread")
    g = seeded(check_seed(seed))
    radius = separation / (2 * math.sin(math.pi / n_clusters)) if n_clusters > 1 else 0.0
    angles = 2 * math.pi * torch.arange(n_clusters, dtype=torch.float64) / n_clusters
    means = torch.zeros(n_clusters, dim, dtype=torch.float64)
    means[:, 0], means[:, 1] = radius * torch.cos(angles), radius * torch.sin(angles)
    labels = torch.arange(n_clusters).repeat_interleave(per_cluster)
    noise = (2 * torch.rand(len(labels), dim, generator=g, dtype=torch.float64) - 1) * spread
    centres = (means[labels] + noise).to(torch.get_default_dtype())

    def fn(theta: Tensor) -> Tensor:
        return ((theta - centres) ** 2).sum(-1)

    return Problem.from_function(
        fn,
        dim=dim,
        n_objectives=len(labels),
        names=[f"c{int(k)}.{i % per_cluster}" for i, k in enumerate(labels)],
        metadata={"centres": centres, "labels": labels, "means": means.to(centres.dtype)},
    )


@dataclass(frozen=True)
class MixedRegression:
    """n regression objectives from ``n_groups`` ground-truth models.

    Objective i has its own data ``y = X beta_i + noise`` with ``beta_i`` the model of its
    group plus a small individual perturbation. Splits: ``train``, ``val``, ``test``
    (each ``X [n, samples, dim]``, ``y [n, samples]``).
    """

    X: dict[str, Tensor]
    y: dict[str, Tensor]
    betas: Tensor  # [n_groups, dim]
    groups: Tensor  # [n]

    @property
    def n_objectives(self) -> int:
        """Number of objectives ``n`` (one regression task each)."""
        return self.groups.shape[0]

    @property
    def dim(self) -> int:
        """Length of a model's parameter vector (the regressions have no intercept)."""
        return self.betas.shape[1]

    def problem(self, split: str = "train") -> Problem:
        """Mean squared error of each objective on ``split``, as a :class:`~most.Problem`."""
        if split not in self.X:
            raise ValueError(f"split must be one of {sorted(self.X)}; got {split!r}.")
        X, y = self.X[split], self.y[split]

        def fn(theta: Tensor) -> Tensor:
            return ((X @ theta - y) ** 2).mean(-1)

        return Problem.from_function(
            fn,
            dim=self.dim,
            n_objectives=self.n_objectives,
            names=[f"task{i}" for i in range(self.n_objectives)],
            metadata={"groups": self.groups, "betas": self.betas, "split": split},
        )

    def test_losses(self, params: Tensor) -> Tensor:
        """Each objective's test error with the model it picks on validation, ``[n]``
        (``params [m, dim]``: the m models)."""
        pick = self.problem("val").loss_matrix(params).argmin(1)
        return self.problem("test").loss_matrix(params).gather(1, pick[:, None]).squeeze(1)


def mixed_regression(n_objectives: int = 40, n_groups: int = 4, dim: int = 10, *, samples: int = 30,
                     noise: float = 0.5, individual: float = 0.1, seed: int = 0) -> MixedRegression:
    """Draws a :class:`MixedRegression` (train, val and test each ``samples`` per objective)."""
    check_positive_int(n_objectives, name="n_objectives")
    check_positive_int(n_groups, name="n_groups")
    if n_groups > n_objectives:  # objective i belongs to group i % n_groups: the rest would serve none
        raise ValueError(f"`n_groups` ({n_groups}) must be at most `n_objectives` ({n_objectives}): objective i "
                         "belongs to group i % n_groups, so a group without objectives would hold a hidden model "
                         "that no data comes from (and recovery_error would charge for it).")
    check_positive_int(dim, name="dim")
    check_positive_int(samples, name="samples")
    check_non_negative(noise, name="noise")
    check_non_negative(individual, name="individual")
    g = seeded(check_seed(seed))
    dtype = torch.get_default_dtype()
    betas = 2.0 * torch.randn(n_groups, dim, generator=g, dtype=dtype)
    groups = torch.arange(n_objectives) % n_groups
    own = betas[groups] + individual * torch.randn(n_objectives, dim, generator=g, dtype=dtype)
    X, y = {}, {}
    for split in ("train", "val", "test"):
        X[split] = torch.randn(n_objectives, samples, dim, generator=g, dtype=dtype)
        y[split] = (X[split] @ own.unsqueeze(-1)).squeeze(-1) + noise * torch.randn(
            n_objectives, samples, generator=g, dtype=dtype
        )
    return MixedRegression(X=X, y=y, betas=betas, groups=groups)
