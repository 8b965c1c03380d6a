"""Update rules: how a model moves along its direction (optax-style, explicit state).

The loop calls ``state = rule.init(params)`` once and then
``params, state = rule.step(params, direction, state, lr)`` after every combiner call, for
all m models at once (``params`` and ``direction`` are ``[m, d]``). The direction is the
combiner's (the min-norm direction for MosT), so Adam here rescales a common descent
direction per coordinate; it is what the few-objective benchmarks of the literature use.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["UpdateRule", "SGD", "Adam"]


class UpdateRule(ABC):
    def init(self, params: Tensor) -> Any:
        return None

    @abstractmethod
    def step(self, params: Tensor, direction: Tensor, state: Any, lr: float) -> tuple[Tensor, Any]: ...

    def restart(self, state: Any, model: int) -> Any:
        """The state with model ``model``'s part set as :meth:`init` sets it (the model was moved)."""
        return state


@dataclass(frozen=True)
class SGD(UpdateRule):
    """``theta <- theta - lr * direction`` (Algorithm 1, line 8)."""

    def step(self, params, direction, state, lr):
        return params - lr * direction, state


@dataclass(frozen=True)
class Adam(UpdateRule):
    r"""Adam (Kingma & Ba 2015) applied to the direction, per model and coordinate.

    ``clip``: when set, each coordinate of the direction is first clipped to ``clip`` times its
    running root mean square (the square root of the bias-corrected second moment), so that a
    single steep step -- a model touching a wall where a gradient is near infinite, such as
    :math:`\sqrt{f_1}` of ZDT1/ZDT3 at :math:`f_1 = 0` -- cannot inflate the second moment and
    leave the model all but frozen for the next ~:math:`1/(1-\beta_2)` steps. Coordinates with no
    history yet (the first step, a restarted model) are not clipped. ``None`` is Adam as
    published. The recommended few-objective call uses ``Adam(clip=3.0, beta2=0.99)`` (see the
    MosT-E page of the docs): the shorter memory of the second moment (about 100 steps) also lets
    a model whose gradients shrink by orders of magnitude (a model that reached the end of a
    front, where only a small augmentation term still pulls it) keep a normal step length.
    """

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    clip: float | None = None

    def __post_init__(self):
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ValueError(f"Adam betas must lie in [0, 1); got {self.beta1}, {self.beta2}.")
        if self.clip is not None and (isinstance(self.clip, bool) or not isinstance(self.clip, (int, float))
                                      or not self.clip > 0 or self.clip == float("inf")):
            raise ValueError(f"Adam's `clip` must be a positive number of root mean squares (e.g. 3.0), or None "
                             f"for no clipping; got {self.clip!r}.")

    def init(self, params):
        return (torch.zeros_like(params), torch.zeros_like(params), 0)

    def restart(self, state, model):
        m, v, t = state
        m, v = m.clone(), v.clone()
        m[model], v[model] = 0.0, 0.0
        return (m, v, t)

    def step(self, params, direction, state, lr):
        m, v, t = state
        if self.clip is not None and t > 0:
            bound = self.clip * (v / (1 - self.beta2**t)).sqrt()
            direction = torch.where(v > 0, torch.minimum(torch.maximum(direction, -bound), bound), direction)
        t += 1
        m = self.beta1 * m + (1 - self.beta1) * direction
        v = self.beta2 * v + (1 - self.beta2) * direction**2
        m_hat = m / (1 - self.beta1**t)
        v_hat = v / (1 - self.beta2**t)
        return params - lr * m_hat / (v_hat.sqrt() + self.eps), (m, v, t)
