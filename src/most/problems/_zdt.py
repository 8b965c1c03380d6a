from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from .._validation import check_positive_int
from ..problem import Problem

#: The reference points used for ZDT hypervolumes in the MosT paper's benchmark.
ZDT_REFERENCE_POINTS = {
    "zdt1": (0.99022638, 6.39358545),
    "zdt2": (0.99022638, 7.71577261),
    "zdt3": (0.99022638, 6.54635266),
}

#: Below this, sqrt(r) is continued linearly (exact at 0 and above the floor): the derivative
#: of sqrt is unbounded at 0, which would give an infinite gradient on the wall f1 = 0.
_SQRT_FLOOR = 1e-10


def _safe_sqrt(r: Tensor) -> Tensor:
    root = r.clamp_min(_SQRT_FLOOR).sqrt()
    return torch.where(r > _SQRT_FLOOR, root, r / math.sqrt(_SQRT_FLOOR))


def _h(name: str, ratio: Tensor, f1: Tensor) -> Tensor:
    if name == "zdt1":
        return 1.0 - _safe_sqrt(ratio)
    if name == "zdt2":
        return 1.0 - ratio**2
    return 1.0 - _safe_sqrt(ratio) - ratio * torch.sin(10 * math.pi * f1)


def _zdt_name(name) -> str:
    """``name`` as one of ``zdt1``, ``zdt2``, ``zdt3`` (any case)."""
    if not isinstance(name, str) or name.lower() not in ZDT_REFERENCE_POINTS:
        raise ValueError(f"Unknown ZDT problem {name!r}; choose 'zdt1', 'zdt2' or 'zdt3'.")
    return name.lower()


def zdt_front(name: str, n_points: int = 2001) -> np.ndarray:
    """The true Pareto front of ZDT1/2/3 (g = 1), ``[k, 2]``, sorted by f1."""
    name = _zdt_name(name)
    f1 = np.linspace(0.0, 1.0, check_positive_int(n_points, name="n_points", minimum=2))
    if name == "zdt1":
        return np.stack([f1, 1 - np.sqrt(f1)], 1)
    if name == "zdt2":
        return np.stack([f1, 1 - f1**2], 1)
    if name != "zdt3":
        raise ValueError(f"Unknown ZDT problem {name!r}; choose 'zdt1', 'zdt2' or 'zdt3'.")
    f = np.stack([f1, 1 - np.sqrt(f1) - f1 * np.sin(10 * np.pi * f1)], 1)
    # ZDT3's front is the non-dominated part of the g = 1 curve (five disconnected pieces).
    keep = np.minimum.accumulate(f[:, 1]) == f[:, 1]
    return f[keep]


def zdt(name: str = "zdt1", n_var: int = 30) -> Problem:
    """ZDT1, ZDT2 or ZDT3 (Zitzler, Deb & Thiele 2000): two objectives of x in [0, 1]^n_var.

    ``f1 = x_1``, ``g = 1 + 9 / (n - 1) * sum_{i>1} x_i``, ``f2 = g * h(f1 / g)`` with
    ``h = 1 - sqrt(r)`` (ZDT1, convex front), ``1 - r^2`` (ZDT2, concave) or
    ``1 - sqrt(r) - r sin(10 pi f1)`` (ZDT3, disconnected). The Pareto set is
    ``x_2 = ... = x_n = 0``. The box is enforced through ``bounds`` (projected gradients).
    ``metadata``: ``front`` (true Pareto front, ``[k, 2]`` numpy), ``reference_point`` and
    ``ideal`` (the smallest value of each objective on the front, which
    :class:`~most.methods.TchebycheffExtension` takes as its ideal point by default).

    Examples:
        >>> import torch
        >>> problem = zdt("zdt1")
        >>> x = torch.zeros(1, 30); x[0, 0] = 0.25
        >>> problem.loss_matrix(x).squeeze(1)   # on the front: (0.25, 1 - 0.5)
        tensor([0.2500, 0.5000])
    """
    name = _zdt_name(name)
    check_positive_int(n_var, name="n_var", minimum=2)

    front = zdt_front(name)

    def fn(x: Tensor) -> Tensor:
        f1 = x[0]
        g = 1.0 + 9.0 / (n_var - 1) * x[1:].sum()
        return torch.stack([f1, g * _h(name, f1 / g, f1)])

    return Problem.from_function(
        fn,
        dim=n_var,
        n_objectives=2,
        bounds=(0.0, 1.0),
        names=("f1", "f2"),
        metadata={"front": front, "reference_point": ZDT_REFERENCE_POINTS[name], "name": name,
                  "ideal": tuple(float(v) for v in front.min(0))},
    )
