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
    """Adam (Kingma & Ba 2015) applied to the direction, per model and coordinate."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self):
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ValueError(f"Adam betas must lie in [0, 1); got {self.beta1}, {self.beta2}.")

    def init(self, params):
        return (torch.zeros_like(params), torch.zeros_like(params), 0)

    def restart(self, state, model):
        m, v, t = state
        m, v = m.clone(), v.clone()
        m[model], v[model] = 0.0, 0.0
        return (m, v, t)

    def step(self, params, direction, state, lr):
        m, v, t = state
        t += 1
        m = self.beta1 * m + (1 - self.beta1) * direction
        v = self.beta2 * v + (1 - self.beta2) * direction**2
        m_hat = m / (1 - self.beta1**t)
        v_hat = v / (1 - self.beta2**t)
        return params - lr * m_hat / (v_hat.sqrt() + self.eps), (m, v, t)
