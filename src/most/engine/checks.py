"""What the round loop refuses in the numbers the user's objectives give: a loss or gradient that
is not finite (named by objective, model, round and step), and objectives that fail on the models'
parameters (named as the cause, at a run's first evaluation)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import Tensor

from ..problem import Problem

__all__ = ["check_finite", "objective_errors", "first_losses"]


def check_finite(losses: Tensor, jacobian: Tensor | None, problem: Problem, round: int, step: int | None,
                 rows: Tensor | None = None) -> None:
    """Raises a ``ValueError`` naming the first objective and model whose loss (``losses [n, m]``)
    or gradient (``jacobian [m, n, d]``, or ``[m, k, d]`` for the packed ``rows [m, k]``) is not
    finite at ``round`` (and inner ``step``), before the run uses it."""
    bad = ~torch.isfinite(losses)
    where = f"round {round}" + (f", inner step {step}" if step is not None else "")
    if bad.any():
        i, j = (int(v) for v in bad.nonzero()[0])
        name = f" ('{problem.names[i]}')" if problem.names else ""
        raise ValueError(
            f"Loss of objective {i}{name} for model {j} is {float(losses[i, j])} at {where}. "
            "The run stopped before using it. Common causes: a learning rate too large for this "
            "problem (try a smaller `lr`), or a loss that is undefined at these parameters."
        )
    if jacobian is not None:
        bad = ~torch.isfinite(jacobian).all(-1)  # [m, n], or [m, k] for packed rows
        if bad.any():
            j, i = (int(v) for v in bad.nonzero()[0])
            i = i if rows is None else int(rows[j, i])
            raise ValueError(
                f"Gradient of objective {i} for model {j} is not finite at {where}. "
                "Try a smaller `lr` or check the loss for operations without a gradient here."
            )


@contextmanager
def objective_errors(problem: Problem, params: Tensor) -> Iterator[None]:
    """Torch's error inside the user's objectives becomes a ``ValueError`` that says what they
    were given (used around a run's first evaluation)."""
    try:
        yield
    except (RuntimeError, IndexError) as exc:  # IndexError: e.g. a function written for a batch of models
        message = " ".join(str(exc).split())[:300]
        if "Batching rule not implemented" in message and problem.vectorize:
            advice = ("torch.func.vmap, which evaluates the models together, cannot batch an operation of the "
                      "objectives (a recurrent layer such as nn.LSTM, say): build the problem with vectorize=False "
                      "(Problem.from_module(..., vectorize=False), Problem.from_function(..., vectorize=False)) "
                      "to evaluate the models one after another.")
        else:
            advice = ("Check that every objective takes parameters of that size and dtype (and, for modules, "
                      "inputs of the module's size and dtype).")
        raise ValueError(
            f"The objectives fail on the models' parameters (a tensor of shape [{problem.dim}] each, "
            f"{params.dtype}): {message}. {advice}"
        ) from exc


def first_losses(problem: Problem, params: Tensor) -> Tensor:
    """The loss matrix ``[n, m]`` of a first evaluation of the user's objectives (see
    :func:`objective_errors`)."""
    with objective_errors(problem, params):
        return problem.loss_matrix(params)
