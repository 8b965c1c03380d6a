"""The models of the estimators: MLPs (linear with no hidden layer) on one flat parameter vector each,
their initialisation, the L2 penalty on their weights, and their outputs for all models at once."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

DTYPE = torch.float64


def layer_sizes(n_features: int, hidden: tuple[int, ...], n_outputs: int) -> list[tuple[int, int]]:
    sizes = [n_features, *hidden, n_outputs]
    return list(zip(sizes[:-1], sizes[1:]))


def n_params(layers: list[tuple[int, int]]) -> int:
    return sum(fan_in * fan_out + fan_out for fan_in, fan_out in layers)


def forward(theta: Tensor, X: Tensor, layers: list[tuple[int, int]]) -> Tensor:
    """The MLP (ReLU between layers; linear when there is one layer) with flat parameters
    ``theta [dim]`` on ``X [N, d]``: outputs ``[N, n_outputs]``."""
    out, start = X, 0
    for k, (fan_in, fan_out) in enumerate(layers):
        weight = theta[start : start + fan_in * fan_out].reshape(fan_in, fan_out)
        start += fan_in * fan_out
        bias = theta[start : start + fan_out]
        start += fan_out
        out = out @ weight + bias
        if k < len(layers) - 1:
            out = torch.relu(out)
    return out


def weight_penalty(theta: Tensor, layers: list[tuple[int, int]]) -> Tensor:
    """``0.5 * ||W||^2`` over the weight matrices (biases are not penalised)."""
    total, start = theta.new_zeros(()), 0
    for fan_in, fan_out in layers:
        total = total + 0.5 * (theta[start : start + fan_in * fan_out] ** 2).sum()
        start += fan_in * fan_out + fan_out
    return total


def initializer(layers: list[tuple[int, int]]) -> Callable[[int, torch.Generator], Tensor]:
    """``(m, generator) -> [m, dim]``: every weight and bias of a layer uniform in
    ``+-1/sqrt(fan_in)`` (the default of ``torch.nn.Linear``), drawn from the run's generator."""

    def init(m: int, generator: torch.Generator) -> Tensor:
        parts = []
        for fan_in, fan_out in layers:
            bound = 1.0 / np.sqrt(fan_in)
            size = fan_in * fan_out + fan_out
            parts.append((2 * torch.rand(m, size, generator=generator, dtype=DTYPE) - 1) * bound)
        return torch.cat(parts, dim=1)

    return init


def all_models(params: Tensor, X: Tensor, layers: list[tuple[int, int]]) -> Tensor:
    """Outputs of every model: ``params [m, dim]``, ``X [N, d]`` -> ``[m, N, n_outputs]``."""
    with torch.no_grad():
        return vmap(forward, in_dims=(0, None, None))(params, X, layers)

