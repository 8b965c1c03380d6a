"""Several runs in step: the requests of runs on the same objectives answered by one call.

:func:`drive_batch` is the driver of :func:`most.fit_batch`: at each point, the requests of the
runs whose objectives are the same (:func:`objectives_key`) and whose requests group together
(:meth:`~most.engine.requests.Request.group`) are answered by one evaluation of all their models;
the rest of a round (plan, weights, combination, update) stays each run's own.
"""

from __future__ import annotations

import time
from typing import Callable, Generator, TypeVar

import torch

from ..problem import Problem
from .requests import Pull, Request, SharedPullback, answer

__all__ = ["objectives_key", "drive_batch"]

R = TypeVar("R")


def objectives_key(problem: Problem, generator: torch.Generator) -> tuple:
    """Problems with equal keys compute the same losses from the same parameters (the same
    function and instances): their runs' evaluations can be one call. The runs of a
    :attr:`~most.Problem.stochastic` problem draw their mini-batches (or dropout masks) from
    their own generators, so each keeps its evaluations."""
    return problem.evaluation.key() + ((id(generator),) if problem.stochastic else ())


def drive_batch(jobs: list[tuple[Problem, Generator[Request, tuple, R], torch.Generator]],
                on_error: Callable[[int, Exception], None] | None = None) -> list[R | None]:
    """Runs several runs' rounds (``(problem, steps, generator)`` each) in step to their results.

    A group's seconds are shared equally among its runs. A run's error is raised, or with
    ``on_error(index, error)`` passed to it and the run left out (its entry ``None``).
    """
    results: list[R | None] = [None] * len(jobs)
    requests: dict[int, Request] = {}
    shared: dict[int, SharedPullback] = {}  # the runs holding an unpulled shared reverse pass

    def advance(i: int, value: tuple | None) -> None:
        steps = jobs[i][1]
        try:
            request = next(steps) if value is None else steps.send(value)
        except StopIteration as stop:
            results[i] = stop.value
            requests.pop(i, None)
        except Exception as exc:
            requests.pop(i, None)
            if on_error is None:
                raise
            on_error(i, exc)
        else:
            requests[i] = request
            return
        if i in shared:  # it ended without its reverse pass: the others pull without it
            shared.pop(i).holders.discard(i)

    for i in range(len(jobs)):
        advance(i, None)
    while requests:
        groups: dict[tuple, list[int]] = {}
        for i, request in requests.items():
            groups.setdefault(request.group(objectives_key(jobs[i][0], jobs[i][2])), []).append(i)
        answered = False
        for members in groups.values():
            first = requests[members[0]]
            problem, generator = jobs[members[0]][0], jobs[members[0]][2]
            if isinstance(first, Pull) and isinstance(first.pullback, SharedPullback):
                if not first.pullback.ready(set(members)):
                    continue  # a run holding this pass has not asked for it yet
                for i in members:
                    shared.pop(i, None)
            elif len(members) == 1:
                advance(members[0], answer(problem, first, generator))
                answered = True
                continue
            tic = time.perf_counter()
            try:
                values = first.together(problem, members, [requests[i] for i in members], generator)
            except Exception as exc:  # the shared objectives failed: every run of the group
                if on_error is None:
                    raise
                for i in members:
                    requests.pop(i, None)
                    if i in shared:
                        shared.pop(i).holders.discard(i)
                    on_error(i, exc)
                answered = True
                continue
            seconds = (time.perf_counter() - tic) / len(members)
            for i, value in zip(members, values):
                if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], SharedPullback):
                    shared[i] = value[1]
                advance(i, (value, seconds))
            answered = True
        if not answered:  # cannot happen: a pass waits only on runs that ask for something else
            raise RuntimeError("The runs of a batch wait on each other; please report this as a bug.")
    return results
