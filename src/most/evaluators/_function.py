"""Objectives given as one function ``fn(theta [dim]) -> losses [n]`` (:meth:`most.Problem.from_function`).

The m models are evaluated at once with :func:`torch.func.vmap` (or one after another with
``vectorize=False``). Per-objective gradients come from the function as a whole: reverse mode,
one pass per wanted objective (``vjp`` with one-hot cotangents), or forward mode, one pass per
parameter, whichever is fewer. Each pass's intermediates hold about ``n x dim`` values, and the
passes go in chunks that hold about :data:`JACOBIAN_VALUES` of them.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.func import jacrev, jvp, vjp, vmap

from ._base import Evaluator, check_weights
from ._checks import NO_GRADIENT, NOT_FLOAT, tracked, vmap_errors

#: The values a Jacobian evaluation may hold at once: its vectorised passes are chunked so that their
#: n x dim intermediates stay about this size, and the round loop holds a whole m x n x dim Jacobian only
#: up to it (2^24 values, 64 MiB in float32).
JACOBIAN_VALUES = 2**24


class FunctionEvaluator(Evaluator):
    """The evaluations of a problem given as ``fn(theta [dim]) -> losses [n]``.

    Args:
        fn: the loss function, written with torch operations.
        dim: the length of ``theta``.
        n_objectives: n.
        vectorize: evaluate the m models with one :func:`torch.func.vmap` call (``False``: a loop).
    """

    def __init__(self, fn: Callable[[Tensor], Tensor], dim: int, n_objectives: int, vectorize: bool = True):
        self.fn, self.dim, self.n_objectives, self.vectorize = fn, dim, n_objectives, vectorize

    def call(self, theta: Tensor) -> Tensor:
        """``fn(theta)``, checked: a floating tensor of ``n`` losses that depends on ``theta``
        whenever ``theta`` is differentiated."""
        out = self.fn(theta)
        if not isinstance(out, Tensor):
            hint = (" A Python number has no gradient: did the function call `.item()` or `float()`? "
                    "Return the losses as a tensor, e.g. `torch.stack([loss_0, loss_1])`."
                    if isinstance(out, (int, float)) else
                    " Stack the losses into one tensor, e.g. `torch.stack([loss_0, loss_1])`.")
            raise TypeError(
                f"The problem's function must return a tensor of {self.n_objectives} losses; got "
                f"{type(out).__name__}." + hint
            )
        if out.shape != (self.n_objectives,):
            raise ValueError(
                f"The problem's function returned shape {tuple(out.shape)}; it must return one loss per "
                f"objective, shape [{self.n_objectives}]."
            )
        if not out.is_floating_point():
            raise TypeError(NOT_FLOAT.format(what="The problem's function", dtype=out.dtype))
        if tracked(theta) and not tracked(out):
            raise ValueError(NO_GRADIENT.format(
                what="The problem's losses do not",
                hint="or return constants",
            ))
        return out

    def map_models(self, fn, params: Tensor, *per_model: Tensor):
        """``fn(theta_j, *(a_j for a in per_model))`` for every model, stacked (a tensor, or a
        tuple of them): vectorised with ``vmap`` (``vectorize=True``) or one model at a time."""
        if self.vectorize:
            with vmap_errors():
                return vmap(fn, randomness="same")(params, *per_model)
        outs = [fn(*args) for args in zip(params, *per_model)]
        if isinstance(outs[0], tuple):
            return tuple(torch.stack(parts) for parts in zip(*outs))
        return torch.stack(outs)

    # ------------------------------------------------------------------ the protocol
    def loss_matrix(self, params: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        with torch.no_grad(), vmap_errors():
            if self.vectorize:
                losses = vmap(self.call, randomness="same")(params)
            else:
                losses = torch.stack([self.call(p) for p in params])
        return losses.T

    def jacobian(self, params: Tensor, *, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        n, dim = self.n_objectives, self.dim
        # d tangents (forward) or n cotangents (reverse), whichever is fewer, mapped in chunks whose
        # passes hold at most about 2^24 values of n x dim intermediates
        chunk = max(1, JACOBIAN_VALUES // (n * dim))

        def value_and_jac(theta: Tensor) -> tuple[Tensor, Tensor]:
            if dim < n:
                value, columns = forward_columns(self.call, theta, min(chunk, dim))
                return value, columns.T

            def with_aux(t: Tensor) -> tuple[Tensor, Tensor]:
                out = self.call(t)
                return out, out.detach()

            jac, value = jacrev(with_aux, has_aux=True, chunk_size=min(chunk, n))(theta)
            return value, jac

        values, jac = self.map_models(value_and_jac, params)
        return values.T, jac

    def losses_with_pullback(self, params: Tensor, *, generator: torch.Generator | None = None
                             ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        m, n = params.shape[0], self.n_objectives

        def stacked(thetas: Tensor) -> Tensor:
            if self.vectorize:
                return vmap(self.call, randomness="same")(thetas)
            return torch.stack([self.call(theta) for theta in thetas])

        # the reverse pass of the scalar sum(w * L) by plain autograd: the cotangent reaching the
        # losses is w exactly, as with torch.func.vjp, without the one-off imports (torch._dynamo for
        # torch.func's reverse mode, sympy for a tensor `grad_outputs`) that cost about 1 s in a
        # fresh process
        with vmap_errors(), torch.enable_grad():
            leaf = params.detach().requires_grad_(True)
            forward = stacked(leaf)
        values = forward.detach()

        def pullback(w: Tensor) -> Tensor:
            check_weights(w, m, n)
            if not forward.requires_grad:  # the losses do not depend on the parameters
                return torch.zeros_like(leaf)
            with vmap_errors(), torch.enable_grad():
                (grads,) = torch.autograd.grad((forward * w.to(values.dtype)).sum(), leaf, allow_unused=True)
            return torch.zeros_like(leaf) if grads is None else grads

        return values.T, pullback

    def active_jacobian(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                        ) -> tuple[Tensor, Tensor]:
        n = self.n_objectives
        k, dim = int(rows.shape[1]), self.dim
        if self.forward_rows(k):  # fewer tangents than rows: forward mode, dim passes instead of k
            # tangents in chunks of ``chunk``: each gives [chunk, n] directional derivatives, cut
            # to the served rows at once; a chunk's passes hold about 2^24 values of n x dim
            # intermediates, as in :meth:`jacobian`
            chunk = max(1, min(dim, JACOBIAN_VALUES // (n * dim)))

            def value_and_columns(theta: Tensor, idx: Tensor) -> tuple[Tensor, Tensor]:
                value, columns = forward_columns(self.call, theta, chunk, idx)
                return value, columns.T

            values, jac = self.map_models(value_and_columns, params, rows)
            return values.T, jac.detach()

        # Each pullback needs a length-n cotangent, built inside the map, and its backward pass
        # intermediates of about n x dim values: rows go in chunks that hold about 2^24 of them.
        chunk = max(1, min(k, JACOBIAN_VALUES // (n * dim)))
        positions = torch.arange(n, device=params.device)

        def value_and_rows(theta: Tensor, idx: Tensor) -> tuple[Tensor, Tensor]:
            out, pullback = vjp(self.call, theta)

            def row(i: Tensor) -> Tensor:
                return pullback((positions == i).to(out.dtype))[0]

            return out.detach(), vmap(row, chunk_size=chunk if chunk < k else None)(idx)

        values, jac = self.map_models(value_and_rows, params, rows)
        return values.T, jac

    def forward_rows(self, k: int) -> bool:
        """Forward mode for ``k`` rows a model when the parameters are fewer (``dim < k``): one pass
        per parameter, each giving the derivatives of all ``n`` losses, so the rows of every
        objective cost the same as the selected ones (:meth:`active_jacobian` then equals
        :meth:`jacobian` cut to the rows, value for value)."""
        return self.dim < k

    def jacobian_first(self, m: int) -> bool:
        """Forward mode is sure to be taken for the rows of some model (``d < n / m``: every
        objective is served, so some model serves at least ``n / m``), and the whole Jacobian of
        ``m`` models (``m n d`` values) fits the chunks' budget :data:`JACOBIAN_VALUES`."""
        n = self.n_objectives
        return m * n * self.dim <= JACOBIAN_VALUES and self.forward_rows(-(-n // m))

    def key(self) -> tuple:
        return (id(self.fn), self.vectorize, self.n_objectives, self.dim)


def forward_columns(call: Callable[[Tensor], Tensor], theta: Tensor, chunk: int,
                    idx: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``call(theta)`` and its derivatives along every basis vector of the parameters,
    ``[dim, n]`` (or only the entries ``idx`` of each, ``[dim, k]``): forward mode, ``dim``
    passes mapped ``chunk`` at a time."""
    def column(e: Tensor) -> tuple[Tensor, Tensor]:
        out, tangent = jvp(call, (theta,), (e,))
        return out.detach(), tangent if idx is None else tangent[idx]

    basis = torch.eye(theta.shape[-1], dtype=theta.dtype, device=theta.device)
    # one chunk is one plain vmap call (the same values, without the chunking's splits and concatenation)
    values, columns = vmap(column, randomness="same", chunk_size=chunk if chunk < basis.shape[0] else None)(basis)
    return values[0], columns
