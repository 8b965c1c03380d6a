"""How many torch threads a run uses: one for small work, torch's own count for large work.

Torch's intra-op threads spin while they wait. On tensors of a few thousand numbers (a
logistic model's step, a two-objective problem) more threads only add that waiting, and beside
another busy process the spinning threads fight it for the cores: the federated example of the
README took 25-44 s instead of 2 s next to other work. So the library's loops (``fit``,
``run_federated``, ``run_batch``) run small work on one thread and leave large work (a CNN's
local training, transport over 10^5 objectives) to torch's count; :func:`set_threads` changes
the rule.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import torch

__all__ = ["set_threads", "get_threads", "SMALL_WORK"]

#: The work of a step (about the numbers it touches: models x objectives x parameters for the
#: centralised loop, pairs x batch x parameters for federated local training) below which a run
#: uses one torch thread under ``"auto"``. Syn's logistic model (150 pairs x 10 x 610) and the
#: few-objective problems are far below it; FEMNIST's logistic regression (525 pairs x 20 x
#: 48 670) and CNN, and transport over 10^5 objectives x 50 models, are above it.
SMALL_WORK = 2 ** 24

_CHOICE: int | str | None = "auto"


def set_threads(threads: int | str | None = "auto") -> None:
    """The torch threads of the library's runs (``fit``, ``run_federated``, ``run_batch``).

    Args:
        threads: ``"auto"`` (the default): one thread when a run's work per step is below
            :data:`SMALL_WORK`, torch's own count otherwise (and torch's count whenever the
            environment sets ``OMP_NUM_THREADS``); an ``int``: that many threads for every run;
            ``None``: torch's count, whatever the work (``torch.set_num_threads`` decides).

    The count is set for the length of a run and restored after it. One thread also makes a
    small run's numbers the same on every machine (reductions do not depend on a thread count).

    >>> import most
    >>> most.set_threads(2); most.get_threads()
    2
    >>> most.set_threads()  # back to the default
    >>> most.get_threads()
    'auto'
    """
    global _CHOICE
    if threads is None or threads == "auto":
        _CHOICE = threads
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"`threads` must be 'auto', None or a positive int; got {threads!r}.")
    _CHOICE = threads


def get_threads() -> int | str | None:
    """The rule :func:`set_threads` set: ``"auto"``, a thread count, or ``None``."""
    return _CHOICE


@contextmanager
def threads_for(work: int) -> Iterator[None]:
    """Torch's thread count for a run whose steps touch about ``work`` numbers (see
    :func:`set_threads`), restored when the block ends."""
    choice = _CHOICE
    if choice is None or (choice == "auto" and (work >= SMALL_WORK or "OMP_NUM_THREADS" in os.environ)):
        yield
        return
    wanted = 1 if choice == "auto" else int(choice)
    before = torch.get_num_threads()
    if wanted == before:
        yield
        return
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(before)
