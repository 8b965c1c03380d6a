"""The options of the min-norm solver (its tolerances and iteration cap) and the checks on its inputs:
the Gramian and mask of :func:`most.mgda.min_norm`, the Jacobian and weights of
:func:`most.mgda.min_norm_direction`."""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import as_tensor, check_has_data, check_non_negative, check_positive_int

#: Default stopping tolerance on the duality gaps, relative to ``max_i G_ii``.
#: 1e-10 is far below float32 resolution (so the weights are exact for any
#: float32 use) yet well above float64 round-off, and it costs only a few extra
#: iterations (linear convergence, plus the face corrections).
DEFAULT_TOL = 1e-10

#: Default iteration cap: a safety net; typical problems need 0-50 iterations
#: (n <= 50) and a few hundred at most for n in the hundreds.
DEFAULT_MAX_ITER = 10_000

#: Rows whose norm is below this fraction of the largest row are treated as zero gradients.
ZERO_GRADIENT_RTOL = 1e-12

#: Min-norm duality-gap tolerance (relative to the largest squared gradient norm) for float32
#: gradients. Their Gram entries are good to ~1e-7 relative, so a tighter gap asks Frank-Wolfe
#: to resolve rounding noise. Measured: MosT-E's linear mixtures make nearly collinear rows
#: (a 4 x 4 Gramian of rank 2 up to float32 noise); with the float64 default (1e-10), or even
#: 1e-8, the gap plateaued at 1e-9..4e-7 and each call ran to ``max_iter``, while 1e-6
#: converges in one iteration to the same norm (to 1e-11).
FLOAT32_TOL = 1e-6

#: Relative tolerance of the symmetry check on ``gram`` (scaled by the dtype's eps).
_SYM_RTOL_FLOAT64 = 1e-6


def compute_device(device: torch.device) -> torch.device:
    # MPS has no float64: a Jacobian is combined on the CPU there.
    return torch.device("cpu") if device.type == "mps" else device


def real_tensor(value, *, name: str, real: str, shape: str) -> Tensor:
    """``value`` as a real tensor of 2 or 3 dimensions (a problem or a batch of them)."""
    if isinstance(value, Tensor) and value.is_complex():
        raise ValueError(f"`{name}` must be {real}; got a complex tensor.")
    t = as_tensor(value, name=name)
    if t.ndim not in (2, 3):
        raise ValueError(f"`{name}` must have shape {shape}; got shape {tuple(t.shape)}.")
    return t


def check_gram(g: Tensor) -> Tensor:
    """``g`` (a real tensor of 2 or 3 dimensions, :func:`real_tensor`): square, with an
    objective, finite."""
    if g.shape[-1] != g.shape[-2]:
        raise ValueError(f"`gram` must be square in its last two dimensions; got shape {tuple(g.shape)}.")
    if g.shape[-1] == 0:
        raise ValueError(f"`gram` has shape {tuple(g.shape)}: there must be at least one objective (n >= 1).")
    if not torch.isfinite(g).all():
        bad = (~torch.isfinite(g)).nonzero()[0].tolist()
        raise ValueError(f"`gram` contains a non-finite value (NaN or inf) at index {tuple(bad)}.")
    return g


def check_symmetric(g64: Tensor, dtype: torch.dtype) -> None:
    """``g64``: [B, n, n] float64. Symmetric within a tolerance relative to max |G|."""
    if g64.numel() == 0:
        return
    rtol = max(_SYM_RTOL_FLOAT64, 1e3 * torch.finfo(dtype).eps) if dtype.is_floating_point else _SYM_RTOL_FLOAT64
    mag = g64.abs().amax(dim=(-2, -1))  # [B]
    asym = (g64 - g64.transpose(-2, -1)).abs().amax(dim=(-2, -1))  # [B]
    bad = asym > rtol * mag
    if bad.any():
        b = int(bad.nonzero()[0])
        raise ValueError(
            "`gram` must be symmetric (a Gramian G = J Jᵀ); "
            f"max |G - Gᵀ| is {float(asym[b]):.3g} vs max |G| = {float(mag[b]):.3g}"
            + (f" in problem {b} of the batch" if g64.shape[0] > 1 else "")
            + f" (allowed relative asymmetry {rtol:.1g}). Symmetrise it with (G + G.mT) / 2."
        )


def check_diagonal(g64: Tensor, dtype: torch.dtype) -> None:
    """``g64``: [B, n, n] float64. A Gramian's diagonal holds squared norms: it cannot be negative
    (beyond round-off relative to max |G|)."""
    if g64.numel() == 0:
        return
    rtol = max(_SYM_RTOL_FLOAT64, 1e3 * torch.finfo(dtype).eps) if dtype.is_floating_point else _SYM_RTOL_FLOAT64
    diag = torch.diagonal(g64, dim1=-2, dim2=-1)
    mag = g64.abs().amax(dim=(-2, -1))
    bad = diag < -rtol * mag[:, None]
    if bad.any():
        b, i = bad.nonzero()[0].tolist()
        raise ValueError(
            "`gram` is not positive semi-definite (it must be a Gramian G = J Jᵀ, whose diagonal holds "
            f"squared gradient norms): G[{i}, {i}] = {float(g64[b, i, i]):.3g} < 0"
            + (f" in problem {b} of the batch" if g64.shape[0] > 1 else "")
            + ". Pass J @ J.T for a Jacobian J."
        )


def check_mask(mask, *, batch: int | None, n: int, device: torch.device) -> Tensor:
    """Returns a bool mask of shape [B, n] (B = 1 when unbatched)."""
    m = torch.as_tensor(check_has_data(mask, name="mask"), device=device)
    if m.dtype != torch.bool:
        raise ValueError(f"`mask` must be a boolean tensor; got dtype {m.dtype}.")
    expected = f"[{n}]" if batch is None else f"[{n}] or [{batch}, {n}]"
    if m.ndim == 1 and m.shape[0] == n:
        return m.unsqueeze(0).expand(1 if batch is None else batch, n)
    if batch is not None and m.ndim == 2 and tuple(m.shape) == (batch, n):
        return m
    raise ValueError(f"`mask` must have shape {expected} to match `gram`; got shape {tuple(m.shape)}.")


def resolve_options(max_iter, tol) -> tuple[int, float]:
    max_iter = DEFAULT_MAX_ITER if max_iter is None else check_positive_int(max_iter, name="max_iter")
    tol = DEFAULT_TOL if tol is None else check_non_negative(tol, name="tol")
    return max_iter, tol

def check_direction_args(jacobian, weights) -> tuple[Tensor, Tensor]:
    """The Jacobian as a tensor and the weights as float64 ``[n]`` or ``[B, n]`` (ones by default)."""
    J = real_tensor(jacobian, name="jacobian", real="real", shape="[n, d] (n gradients of dimension d) or [B, n, d]")
    if J.shape[-2] == 0 or J.shape[-1] == 0:
        raise ValueError(
            f"`jacobian` has shape {tuple(J.shape)}: it needs at least one gradient (n >= 1) of dimension d >= 1."
        )
    if not torch.isfinite(J).all():
        bad = (~torch.isfinite(J)).nonzero()[0].tolist()
        raise ValueError(f"`jacobian` contains a non-finite value (NaN or inf) at index {tuple(bad)}.")
    batched, n = J.ndim == 3, J.shape[-2]
    if weights is None:
        return J, torch.ones(n, dtype=torch.float64, device=J.device)
    if isinstance(weights, Tensor) and weights.is_complex():
        raise ValueError("`weights` must be real; got a complex tensor.")
    w = as_tensor(weights, name="weights").detach().to(device=J.device, dtype=torch.float64)
    B = J.shape[0] if batched else 1
    if not ((w.ndim == 1 and w.shape[0] == n) or (batched and w.ndim == 2 and tuple(w.shape) == (B, n))):
        expected = f"[{n}]" if not batched else f"[{n}] or [{B}, {n}]"
        raise ValueError(
            f"`weights` must have shape {expected} to match `jacobian` of shape {tuple(J.shape)}; "
            f"got shape {tuple(w.shape)}."
        )
    if not torch.isfinite(w).all():
        raise ValueError("`weights` contains a non-finite value (NaN or inf).")
    if (w < 0).any():
        bad = tuple((w < 0).nonzero()[0].tolist())
        raise ValueError(
            f"`weights` must be non-negative; entry {bad if len(bad) > 1 else bad[0]} is {float(w[bad]):.3g}."
        )
    return J, w
