"""Where small dense work runs when the models live on an accelerator.

A federated round or an optimisation step does two kinds of arithmetic: work that grows with the
models (local training, evaluation, Gram matrices of updates) and work on small matrices (the
plan's ``n x m`` losses, a ``k x k`` min-norm problem, a capped QP). On a GPU the second kind is
a few hundred tiny kernels with a host read between many of them, each paying a launch and a
synchronisation: slower than the same arithmetic on the CPU (the documentation's Benchmarks → The CUDA path).
So a problem of at most :data:`HOST_SOLVE_MAX` numbers is moved to the host once, solved there,
and its answer moved back once.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: The largest dense problem (numbers in its matrix) solved on the host when the inputs live on
#: an accelerator: a batch of five 228 x 228 Gram matrices, a plan of 52 000 clients x 5 models.
#: A smaller solve costs fewer host cycles than the device's launches of its iterations; larger
#: problems stay on the device, where their work pays for the launches (the timings that set the
#: bound: docs/development.md, "Speed, threads and GPUs").
HOST_SOLVE_MAX = 2 ** 18


def solve_device(device: torch.device, numel: int) -> torch.device:
    """The device a small dense solve of ``numel`` numbers runs on: the CPU for MPS (no float64)
    and for problems of at most :data:`HOST_SOLVE_MAX` numbers on any accelerator; else ``device``."""
    if device.type == "cpu":
        return device
    if device.type == "mps" or numel <= HOST_SOLVE_MAX:
        return torch.device("cpu")
    return device


def to_host(tensors: list[Tensor]) -> list[Tensor]:
    """``tensors`` on the CPU, with one device-to-host copy (tensors of one dtype) for all of them (one synchronisation,
    not one per tensor); CPU tensors are returned as they are."""
    if all(t.device.type == "cpu" for t in tensors):
        return list(tensors)
    on_device = [t for t in tensors if t.device.type != "cpu"]
    if len({t.dtype for t in on_device}) > 1:
        return [t.cpu() for t in tensors]
    flat = torch.cat([t.reshape(-1) for t in on_device]).cpu()
    parts = iter(flat.split([t.numel() for t in on_device]))
    return [t if t.device.type == "cpu" else next(parts).view(t.shape) for t in tensors]


def to_device(t: Tensor, device: torch.device) -> Tensor:
    """``t`` on ``device`` without waiting for the device's queue: a host tensor is staged by the
    driver as the call returns, so the host goes on launching work (``.to(device)`` would wait
    for every kernel already queued)."""
    return t.to(device, non_blocking=True)
