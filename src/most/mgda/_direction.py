"""The MGDA common descent direction (Eq. 9): :func:`min_norm_direction` checks its arguments and
:func:`combine_min_norm` solves for the weights, from the Gramian of the weighted gradients or, for
problems of more than 128 rows, by the exact host solvers of :mod:`most.mgda._nnls`."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .._host import solve_device, to_device, to_host
from .._validation import check_positive_int
from ._checks import FLOAT32_TOL, ZERO_GRADIENT_RTOL, check_direction_args, compute_device
from ._frank_wolfe import min_norm
from ._nnls import (GRAM_NNLS_MIN_ROWS, gram_nnls_min_norm, gramian, low_rank, low_rank_min_norm,
                    working_set_min_norm)
from ._scaling import all_finite, divide_pow2, host_divide_pow2, pow2_scale

#: A Gramian whose largest entry is below this (rows below ~1e-75) is formed again from rescaled rows.
_TINY_GRAM = 2.0**-500


def min_norm_direction(
    jacobian, weights=None, *, coordinates: tuple[int, int] | slice | None = None, max_iter: int | None = None,
    tol: float | None = None, return_weights: bool = False,
):
    r"""MGDA common descent direction :math:`u = \sum_i \lambda^\star_i w_i J_i` (Eq. 9).

    This is the one place where the library forms Eq. 9: the centralised combiner
    :class:`most.MinNorm` and the federated methods (on client updates) call it.

    The rows of the (weighted) Jacobian are :math:`w_i J_i`. Rows with weight exactly 0 are
    dropped before the solve (they do not take part in the convex hull), and so are rows
    whose gradient is zero (below ``ZERO_GRADIENT_RTOL`` times the largest): such an
    objective is stationary and cannot change to first order, so it must not put the origin
    in the hull and stop the others (a client whose update is zero, an objective at its
    minimum on the boundary of a box). With :math:`\tilde J = \operatorname{diag}(w) J` and
    :math:`\lambda^\star = \arg\min_{\lambda\in\Delta} \lambda^\top \tilde J \tilde J^\top \lambda`
    (see :func:`~most.mgda.min_norm`), the update :math:`\theta \leftarrow \theta - \eta u`
    satisfies :math:`w_i \langle J_i, -u\rangle \le -\|u\|^2` for every kept row,
    so it decreases every weighted objective whenever :math:`u \ne 0`.

    Args:
        jacobian: ``[n, d]`` (``n`` gradients of dimension ``d``) or ``[B, n, d]`` (a batch
            of ``B`` independent problems, e.g. one per model).
        weights: Optional non-negative weights, ``[n]`` (shared by the batch) or
            ``[B, n]``; default all ones. If all weights of a problem are zero its
            direction is the zero vector.
        coordinates: ``(start, stop)``: solve for the weights on the Gram matrix of those coordinates of
            the gradients only (the paper's "MGDA on a subset of model parameters like the final
            layer's bias", Section 6) and combine the full gradients with them. The direction is
            then a common descent direction for those coordinates, not necessarily for all. Two ints
            (Python, NumPy or 0-d integer tensors) with ``0 <= start < stop <= d``, as a pair (tuple,
            list, array, tensor) or as ``slice(start, stop)`` (what ``FlatModel.coordinates(name)`` returns).
        max_iter, tol: Passed to :func:`~most.mgda.min_norm`. ``tol=None`` matches the tolerance to the gradients'
            precision: :data:`~most.mgda.FLOAT32_TOL` for float32 (or lower) Jacobians, :data:`~most.mgda.DEFAULT_TOL`
            otherwise.
        return_weights: Also return :math:`\lambda^\star` (``[n]`` or ``[B, n]``, the Jacobian's dtype).

    Returns:
        Tensor: ``u`` of shape ``[d]`` (or ``[B, d]``), in the Jacobian's dtype and device (and
            ``lambda`` with ``return_weights=True``). It is computed in float64 from detached
            inputs: no gradient flows through it (it is an update direction, to be applied under
            ``torch.no_grad()``). An empty batch (``B = 0``) gives ``u`` of shape ``[0, d]`` and
            ``lambda`` of shape ``[0, n]``, as :func:`~most.mgda.min_norm` does for an empty batch.

    Raises:
        ValueError: On a malformed Jacobian or weights, or ``coordinates`` that are not two ints
            ``0 <= start < stop <= d``.

    Examples:
        >>> import torch
        >>> min_norm_direction(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        tensor([0.5000, 0.5000])
        >>> min_norm_direction(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))  # Pareto-stationary
        tensor([0., 0.])
        >>> min_norm_direction(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))  # a zero row does not stop the other
        tensor([1., 0.])
    """
    J, w = check_direction_args(jacobian, weights)
    if coordinates is not None:
        coordinates = _check_coordinates(coordinates, J.shape[-1])
    batched = J.ndim == 3
    J3 = J if batched else J.unsqueeze(0)
    w3 = w.expand(J3.shape[0], J3.shape[1]) if w.ndim == 1 else w
    u, lam = combine_min_norm(J3, w3, coordinates=coordinates, max_iter=max_iter, tol=tol)
    if not batched:
        u, lam = u[0], lam[0]
    return (u, lam) if return_weights else u


def _check_coordinates(coordinates, d: int) -> tuple[int, int]:
    """``coordinates`` of :func:`min_norm_direction` as ``(start, stop)``, two ints with
    ``0 <= start < stop <= d``: a pair (any iterable of two ints: tuple, list, array, tensor) or a
    ``slice(start, stop)`` (``FlatModel.coordinates(name)``; a missing start is 0, a missing stop ``d``)."""
    usage = (f"`coordinates` must be (start, stop), two ints with 0 <= start < stop <= {d} (the gradients' "
             "dimension), or slice(start, stop); take them from problem.coordinates(name) or "
             f"model.coordinates(name); got {coordinates!r}")
    if isinstance(coordinates, slice):
        if coordinates.step not in (None, 1):
            raise ValueError(f"{usage}: a slice with a step selects no contiguous block of coordinates.")
        pair: tuple = (0 if coordinates.start is None else coordinates.start,
                       d if coordinates.stop is None else coordinates.stop)
    elif isinstance(coordinates, (str, bytes)):
        raise ValueError(f"{usage}.")
    else:
        try:
            pair = tuple(coordinates)
        except TypeError:  # not iterable, e.g. a single int
            raise ValueError(f"{usage}.") from None
    if len(pair) != 2:
        raise ValueError(f"{usage}: {len(pair)} values instead of 2.")
    try:
        start, stop = (check_positive_int(v, name="coordinates", minimum=0) for v in pair)
    except ValueError:  # a float, None, a bool or a negative int
        raise ValueError(f"{usage}.") from None
    if stop > d:
        raise ValueError(f"`coordinates` {(start, stop)} lie outside the {d} parameters of a model; take them from "
                         "problem.coordinates(name) or model.coordinates(name).")
    if start >= stop:
        raise ValueError(f"{usage}: start must be below stop (the block holds stop - start coordinates).")
    return start, stop


def combine_min_norm(jacobian: Tensor, weights: Tensor, *, coordinates: tuple[int, int] | None = None,
                     max_iter: int | None = None, tol: float | None = None) -> tuple[Tensor, Tensor]:
    """Eq. 9 on a batch, without the argument checks of :func:`~most.mgda.min_norm_direction`:
    ``jacobian [B, n, d]`` and non-negative ``weights [B, n]`` -> ``(u [B, d], lambda [B, n])``
    in the Jacobian's dtype. Rows with weight 0 or a zero gradient are left out (see
    :func:`~most.mgda.min_norm_direction`); a problem without a row gets ``u = 0``, ``lambda = 0``."""
    if jacobian.shape[0] == 0:  # no problem to solve (min_norm returns the same empty weights)
        return jacobian.new_zeros(0, jacobian.shape[-1]), jacobian.new_zeros(0, jacobian.shape[-2])
    # The Gramian is formed in float64: literal Gamma weights can be ~1e-30, which float32
    # would flush to denormals and turn the Gramian into noise.
    jac64 = jacobian.detach().to(dtype=torch.float64, device=compute_device(jacobian.device))
    w64 = weights.detach().to(device=jac64.device, dtype=torch.float64)
    sub = jac64
    if coordinates is not None:
        start, stop = coordinates
        if stop > jacobian.shape[-1]:
            raise ValueError(f"`coordinates` {tuple(coordinates)} lie outside the {jacobian.shape[-1]} parameters of a "
                             "model; take them from problem.coordinates(name) or model.coordinates(name).")
        sub = jac64[..., start:stop]
    if tol is None and jacobian.dtype in (torch.float32, torch.float16, torch.bfloat16):
        tol = FLOAT32_TOL
    if low_rank(sub):  # more rows than coordinates: solved on small subsets of rows, no k x k Gramian
        lam = _low_rank_weights(sub, w64, max_iter=max_iter, tol=tol)
    else:
        lam = _gram_weights(sub, w64, max_iter=max_iter, tol=tol)
    direction = torch.bmm((lam * w64).unsqueeze(1), jac64).squeeze(1)
    return (direction.to(dtype=jacobian.dtype, device=jacobian.device),
            lam.to(dtype=jacobian.dtype, device=jacobian.device))


def _gram_weights(sub: Tensor, w64: Tensor, *, max_iter: int | None, tol: float | None) -> Tensor:
    """:func:`combine_min_norm`'s weights ``lambda [B, k]`` (float64, on ``sub``'s device) for
    gradients ``sub [B, k, d]`` (float64) weighted by ``w64 [B, k]``, from their Gramian."""
    rows = w64.unsqueeze(-1) * sub
    gram = gramian(rows)
    norms = sub.norm(dim=-1)
    small = w64
    if solve_device(gram.device, gram.numel()) != gram.device:
        gram, norms, small = to_host([gram, norms, w64])  # the k x k problem on the host, in one copy
    if not torch.isfinite(gram).all() or bool(gram.diagonal(dim1=-2, dim2=-1).amax() < _TINY_GRAM):
        # rows of ~1e200 (or ~1e-200): the Gramian of the rows divided by a power of two per problem
        # (exact; the weights do not depend on a common scale of the rows), so it neither overflows
        # nor underflows
        if not all_finite(rows):
            raise ValueError("The gradients times their weights overflow float64: the iterates are diverging; "
                             "try a smaller `lr`.")
        rows = divide_pow2(rows, pow2_scale(rows, (-2, -1)))
        sub = divide_pow2(sub, pow2_scale(sub, (-2, -1)))
        gram, norms = (t.to(gram.device) for t in (gramian(rows), sub.norm(dim=-1)))
    gram = 0.5 * (gram + gram.transpose(1, 2))
    if not torch.isfinite(norms).all():  # huge rows with tiny weights: their norms after an exact rescaling
        norms = divide_pow2(sub, pow2_scale(sub, (-2, -1))).norm(dim=-1).to(norms.device)
    live = norms > ZERO_GRADIENT_RTOL * norms.amax(-1, keepdim=True)
    mask = (small > 0) & live
    if gram.shape[-1] > GRAM_NNLS_MIN_ROWS and gram.device.type == "cpu":  # many rows, as many coordinates
        return to_device(gram_nnls_min_norm(gram, mask, max_iter=max_iter, tol=tol), sub.device)
    return to_device(min_norm(gram, mask=mask, max_iter=max_iter, tol=tol).weights, sub.device)


def _low_rank_weights(sub: Tensor, weights: Tensor, *, max_iter: int | None, tol: float | None) -> Tensor:
    """:func:`combine_min_norm`'s weights ``lambda [B, k]`` (float64, on ``sub``'s device) for
    gradients ``sub [B, k, d]`` (float64, ``d < k``) weighted by ``weights [B, k]``, on the host.

    The rows ``weights * sub`` are checked, rescaled by a power of two per problem (exact, so the
    weights do not change) and masked (weight 0 or a zero gradient) in NumPy after one copy to
    the host, where :func:`low_rank_min_norm` solves them: on the CPU a dozen small tensor
    operations cost more than the arithmetic (a fifth of the solve at k ~ 300, d = 10), and on
    an accelerator each check was a synchronisation."""
    s, w = (t.numpy() for t in to_host([sub.detach(), weights.detach()]))
    with np.errstate(over="ignore", invalid="ignore"):  # refused just below, with the cause
        rows = w[..., None] * s
    if not np.isfinite(rows).all():
        raise ValueError("The gradients times their weights overflow float64: the iterates are diverging; "
                         "try a smaller `lr`.")
    rows = host_divide_pow2(rows)
    scaled = host_divide_pow2(s)  # the gradients' norms neither overflow nor underflow (their ratios are exact)
    norms = np.sqrt(np.einsum("bkd,bkd->bk", scaled, scaled))
    live = norms > ZERO_GRADIENT_RTOL * norms.max(-1, keepdims=True)
    mask = (w > 0) & live
    lam = low_rank_min_norm(rows, mask, max_iter=max_iter, tol=tol)
    if lam is None:  # the exact solve's check failed (or NNLS stopped): Frank-Wolfe on working sets
        return working_set_min_norm(torch.from_numpy(rows), torch.from_numpy(mask), max_iter=max_iter,
                                    tol=tol).to(sub.device)
    return torch.from_numpy(lam).to(sub.device)
