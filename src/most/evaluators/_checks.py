"""Checks shared by the evaluators: what the user's losses return, and vmap's refusals as advice."""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
import torch.autograd.forward_ad as _fwad
from torch import Tensor



def scalar_loss(loss: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``loss`` with a check that it returns one number per instance."""

    def checked(theta: Tensor, *row: Tensor) -> Tensor:
        out = loss(theta, *row)
        if not isinstance(out, Tensor) or out.numel() != 1:
            shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(
                f"The instance loss must return a scalar tensor for one instance; got {shape}. "
                + ("A Python number has no gradient: did it call `.item()` or `float()`? "
                   if isinstance(out, (int, float)) else "Reduce over the instance inside `loss` "
                   "(e.g. `.sum()` or `.mean()`).")
            )
        if not out.is_floating_point():
            raise TypeError(NOT_FLOAT.format(what="The instance loss", dtype=out.dtype))
        if tracked(theta) and not tracked(out):
            raise ValueError(NO_GRADIENT.format(what="The instance loss does not", hint="or return a constant"))
        return out.reshape(())

    return checked


NO_GRADIENT = (
    "{what} depend on the parameters: no gradient flows back to theta, so training would change "
    "nothing. Did the loss call `.detach()`, `.item()`, `float()` or `.numpy()`, run under "
    "`torch.no_grad()`, {hint}? Compute the losses from theta (or the model's output) with torch "
    "operations and return them as tensors."
)


NOT_FLOAT = (
    "{what} returned losses of dtype {dtype}; losses must be floating point (e.g. float32), so that they "
    "have gradients and can be compared across models. Did it convert them with `.long()`, `.int()` or "
    "`.bool()`, or return a comparison such as `loss > 1`? Return the float losses (for a 0/1 "
    "error, a smooth surrogate such as the logistic or hinge loss)."
)


def tracked(t: Tensor) -> bool:
    """Whether ``t`` carries a derivative of the transform being computed: reverse mode
    (``jacrev``, ``vjp``, ``grad``: ``requires_grad``) or forward mode (``jacfwd``: a tangent),
    also seen through the ``vmap`` levels inside that transform (``vjp`` of a ``vmap`` over models)."""
    functorch = torch._C._functorch
    while functorch.is_batchedtensor(t):
        t = functorch.get_unwrapped(t)
    return bool(t.requires_grad) or _fwad.unpack_dual(t).tangent is not None


def objective_loss(out, k: int, names, differentiated: bool) -> Tensor:
    """Objective ``k``'s value from a :meth:`Problem.from_module` objective, checked: a scalar
    tensor that depends on the parameters whenever they are differentiated (``differentiated``)."""
    label = f"objective {k}" + (f" ({names[k]!r})" if names is not None and k < len(names) else "")
    if not isinstance(out, Tensor):
        if isinstance(out, (int, float)):
            raise TypeError(
                f"{label} returned a Python {type(out).__name__}, which has no gradient: did it call "
                "`.item()` or `float()`? Return the loss as a scalar tensor."
            )
        raise TypeError(f"{label} must return a scalar tensor (the loss); got {type(out).__name__}.")
    if out.numel() != 1:
        raise ValueError(
            f"{label} returned a tensor of shape {tuple(out.shape)}; an objective must return one scalar "
            "loss. Reduce it, e.g. with `.mean()` or `.sum()`."
        )
    if not out.is_floating_point():
        raise TypeError(NOT_FLOAT.format(what=label[0].upper() + label[1:], dtype=out.dtype))
    if differentiated and not tracked(out):
        raise ValueError(NO_GRADIENT.format(what=f"{label}'s loss does not", hint="or return a constant"))
    return out.reshape(())


@contextlib.contextmanager
def vmap_errors():
    """Turns vmap's refusal of ``.item()`` / value-dependent Python control flow into a
    ValueError that says what to change."""
    try:
        yield
    except RuntimeError as exc:
        text = str(exc)
        if "Batch norm got a batched tensor" in text:
            raise ValueError(
                "A batch-norm layer in the problem's function updates running statistics in training mode, which "
                "the m models evaluated together would all write into. Build the problem with "
                "Problem.from_module (every model then keeps its own running statistics), put the layer in "
                "evaluation mode (`layer.eval()`), or build it with `track_running_stats=False`."
            ) from exc
        if "vmap" in text and (".item()" in text or "data-dependent control flow" in text):
            raise ValueError(
                "The problem's function cannot be evaluated for all models at once: it calls `.item()` "
                "(or `float()`), or uses a tensor's value in Python control flow (`if`, `while`). A loss "
                "converted with `.item()` has no gradient: keep the losses as tensors. If the function must "
                "branch on values, build the problem with vectorize=False (from_function) or use "
                "`torch.where`."
            ) from exc
        raise
