"""Digests of data: a tensor added to a hash by its dtype, shape and bytes."""

from __future__ import annotations

import torch


def add_tensor(h, t: torch.Tensor) -> None:
    """Adds ``t`` to the hash ``h`` (a ``hashlib`` object): its dtype and shape, then its bytes in
    row-major order (any dtype, 0-d and empty tensors too), so that equal tensors read from
    anywhere add the same and another value, order, shape or dtype adds another."""
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    flat = torch.empty(t.numel(), dtype=t.dtype).copy_(t.detach().cpu().reshape(-1))  # stride 1, even expanded
    h.update(flat.view(torch.uint8).numpy().tobytes())
