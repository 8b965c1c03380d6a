r"""The round loop of Algorithm 1, and the methods built on it.

One loop serves every method (:func:`run`); a method only chooses its assignment,
weighting and combiner (see :mod:`most.methods`). Each round:

1. evaluate the loss matrix ``L[i, j] = L_i(theta_j)`` of all m models at once;
2. ``Gamma <- assignment(L)`` (Eq. 6);
3. ``W <- weighting(Gamma)``;
4. K times: gradients at every model (one vectorised Jacobian; for the min-norm and mean
   combiners only of the objectives the model serves, ``W_ji > 0``),
   ``d_j <- combiner(J_j, W_j)`` (Eqs. 7-9), ``theta_j <- project(theta_j - lr * d_j)``.

Examples:
    >>> import torch, most
    >>> centres = torch.tensor([[0.0, 0.0], [0.3, 0.0], [9.0, 9.0], [9.0, 9.3]])
    >>> problem = most.Problem.from_function(
    ...     lambda theta: ((theta - centres) ** 2).sum(-1), dim=2, n_objectives=4)
    >>> result = most.MosT(n_models=2, rounds=60, lr=0.2, seed=0).fit(problem)
    >>> result.params.shape, result.assignment.shape
    (torch.Size([2, 2]), torch.Size([4, 2]))
    >>> sorted(result.best_model().tolist()) in ([0, 0, 1, 1],)
    True
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Callable, Generator, Iterator, Literal, Sequence, cast

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ._random import seeded
from ._threads import threads_for
from ._validation import check_component, check_positive, check_positive_int, check_seed
from .checkpoint import Checkpoint, CheckpointError, restore_into
from .methods import (
    Assignment,
    Combiner,
    DirichletExtension,
    EqualAssignment,
    TchebycheffExtension,
    GammaWeights,
    LoadBounds,
    MajorityShare,
    Marginals,
    MinNorm,
    RandomAssignment,
    TransportAssignment,
    WeightedSum,
    Weighting,
)
from .optim import SGD, UpdateRule
from .problem import Problem, active_rows, check_weights
from .seeding import KMeansSeeding, Reseed

if TYPE_CHECKING:
    from .evaluators import RunningStatistics

__all__ = ["RoundRecord", "Result", "run", "fit_batch", "MosT", "Linearization", "MGDA", "WeightedMGDA"]


@dataclass(frozen=True)
class RoundRecord:
    """What happened in one round.

    Attributes:
        round: round index (0-based).
        plan: the assignment Gamma ``[n, m]`` used in this round.
        losses: the loss matrix ``[n, m]`` at the start of the round.
        weights: the combiner's coefficients ``lambda [m, n]`` at the last inner step
            (min-norm weights for MGDA-type methods).
        transport_seconds: time spent in the assignment.
        min_norm_seconds: time spent in the combiner.
        gradient_seconds: time spent evaluating losses and gradients.
        moved: the model :class:`~most.seeding.Reseed` moved after this round, if any.
        mean_best_loss: the mean over objectives of the best model's loss at the start of the
            round (kept for every round).

    In a :class:`Result`'s history of a large run (more than :data:`HISTORY_NUMBERS` numbers of
    plans, losses and weights over all rounds) only every k-th round and the last keep
    ``plan``, ``losses`` and ``weights``; the others have ``None`` there and keep their times
    and ``mean_best_loss``. A ``callback`` always gets the round's full record.
    """

    round: int
    plan: Tensor | None
    losses: Tensor | None
    weights: Tensor | None
    transport_seconds: float
    min_norm_seconds: float
    gradient_seconds: float
    moved: int | None = None
    mean_best_loss: float | None = None

    def __post_init__(self):
        if self.mean_best_loss is None and self.losses is not None:  # records of older checkpoints
            object.__setattr__(self, "mean_best_loss", float(self.losses.min(1).values.double().mean()))

    def thinned(self) -> "RoundRecord":
        """This record without its tensors (what a large run's history keeps of most rounds)."""
        return replace(self, plan=None, losses=None, weights=None)

    def __repr__(self) -> str:
        size = "" if self.plan is None else f"{self.plan.shape[0]} objectives x {self.plan.shape[1]} models, "
        return (f"RoundRecord(round={self.round}, {size}mean best loss {self.mean_best_loss:.3g}"
                + (f", moved model {self.moved}" if self.moved is not None else "") + ")")


#: The numbers (plans, losses and weights over all rounds) up to which a run's history keeps
#: every round's tensors; above, every k-th round and the last keep them (k the smallest that
#: fits). 2^25 float64 numbers are 256 MiB: a 100-round run keeps every round up to n * m of
#: about 110 000 (10^4 objectives and 10 models), every 45th at 10^5 objectives and 50 models.
HISTORY_NUMBERS = 2 ** 25


@dataclass(frozen=True)
class Result:
    """The outcome of a run.

    Attributes:
        params: the m final models, ``[m, dim]``.
        assignment: the last plan Gamma, ``[n, m]``.
        losses: the loss matrix ``[n, m]`` of the final models.
        history: one :class:`RoundRecord` per round (in a large run, most without their
            tensors: see :class:`RoundRecord`).
        problem: the problem that was solved (the extended one for MosT-E).
        statistics: the models' running statistics of batch normalisation,
            ``{buffer name: [m, ...]}``, for a module with such layers in training mode
            (:meth:`Problem.from_module`); else ``None``.
    """

    params: Tensor
    assignment: Tensor
    losses: Tensor
    history: list[RoundRecord]
    problem: Problem = field(repr=False)
    statistics: dict[str, Tensor] | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        """One line: the sizes and the final losses (the tensors are attributes)."""
        m, dim = self.params.shape
        best = self.best_losses().double()
        return (f"Result({m} models of {dim} parameters, {self.losses.shape[0]} objectives, {len(self.history)} "
                f"rounds; best-model loss mean {float(best.mean()):.3g}, worst {float(best.max()):.3g})")

    def to_modules(self) -> list[nn.Module]:
        """For a problem built from a module: the m final models as ``nn.Module`` objects, each
        with its parameters and its running statistics (:meth:`Problem.to_modules`)."""
        return self.problem.to_modules(self.params, self.statistics)

    def best_model(self) -> Tensor:
        """For each objective, the index of its lowest-loss final model, ``[n]``."""
        return self.losses.argmin(1)

    def best_losses(self) -> Tensor:
        """For each objective, the loss of its best final model, ``[n]``."""
        return self.losses.min(1).values

    def timings(self) -> dict[str, float]:
        """Total seconds spent in transport, min-norm and gradient evaluation."""
        return {
            "transport": sum(r.transport_seconds for r in self.history),
            "min_norm": sum(r.min_norm_seconds for r in self.history),
            "gradients": sum(r.gradient_seconds for r in self.history),
        }


def _active_rows(weights: Tensor) -> tuple[Tensor, Tensor]:
    """``weights [m, n]`` -> ``(rows [m, k], valid [m, k])``: each model's objectives with a
    positive weight, padded to the longest list with copies of the model's first one."""
    return active_rows(weights > 0)


def _check_finite(losses: Tensor, jacobian: Tensor | None, problem: Problem, round: int, step: int | None,
                  rows: Tensor | None = None) -> None:
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


def run(
    problem: Problem,
    *,
    n_models: int,
    rounds: int,
    inner_steps: int,
    lr: float,
    assignment: Assignment,
    weighting: Weighting,
    combiner: Combiner,
    seed: int = 0,
    progress: bool = False,
    description: str = "MosT",
    callback: Callable[[RoundRecord, Tensor], None] | None = None,
    optimizer: UpdateRule | None = None,
    checkpoint: Checkpoint | None = None,
    seeding: KMeansSeeding | None = None,
    reseed: Reseed | None = None,
) -> Result:
    """Runs the round loop of Algorithm 1 with the given components.

    Most users call a method's ``fit`` instead (:class:`MosT`, :class:`Linearization`,
    :class:`MGDA`, :class:`WeightedMGDA`). ``callback(record, params)`` is called after
    every round. With a :class:`~most.checkpoint.Checkpoint`, the state is saved every
    ``checkpoint.every`` rounds, and a run that finds a checkpoint continues from it (the
    final models equal those of an uninterrupted run: mini-batches of a
    :meth:`~most.Problem.from_datasets` problem come from the run's generator, which the checkpoint
    holds; objectives that draw their own, e.g. with torch's global generator, are theirs to
    restore). ``seeding`` places the
    initial models (:class:`~most.seeding.KMeansSeeding`; ``None``: the problem's ``init``);
    ``reseed`` moves a badly placed model at fixed rounds (:class:`~most.seeding.Reseed`).
    """
    check_positive_int(n_models, name="n_models")
    check_positive_int(rounds, name="rounds")
    check_positive_int(inner_steps, name="inner_steps")
    check_positive(lr, name="lr")
    seed = check_seed(seed)
    # one torch thread for small problems, torch's count for large ones (most.set_threads)
    with threads_for(n_models * problem.n_objectives * problem.dim):
        job = _Job.start(problem, n_models=n_models, rounds=rounds, inner_steps=inner_steps, lr=lr,
                         assignment=assignment, weighting=weighting, combiner=combiner, seed=seed, progress=progress,
                         description=description, callback=callback, optimizer=optimizer, checkpoint=checkpoint,
                         seeding=seeding, reseed=reseed)
        return _drive(job.steps(), problem, job.generator)


@contextmanager
def _objective_errors(problem: Problem, params: Tensor) -> Iterator[None]:
    """Torch's error inside the user's objectives becomes a ``ValueError`` that says what they
    were given (used around a run's first evaluation)."""
    try:
        yield
    except (RuntimeError, IndexError) as exc:  # IndexError: e.g. a function written for a batch of models
        raise ValueError(
            f"The objectives fail on the models' parameters (a tensor of shape [{problem.dim}] each, "
            f"{params.dtype}): {' '.join(str(exc).split())[:300]}. Check that every objective takes parameters "
            "of that size and dtype (and, for modules, inputs of the module's size and dtype)."
        ) from exc


def _first_losses(problem: Problem, params: Tensor) -> Tensor:
    """The loss matrix ``[n, m]`` of a first evaluation of the user's objectives (see
    :func:`_objective_errors`)."""
    with _objective_errors(problem, params):
        return problem.loss_matrix(params)


#: what an :class:`_Ask` of each kind calls on the problem
_EVALUATIONS = {"losses": "loss_matrix", "pullback": "losses_with_pullback", "jacobian": "jacobian",
                "active_gradients": "active_gradients", "active_jacobian": "active_jacobian"}


@dataclass(frozen=True, eq=False)
class _Ask:
    """An evaluation a round asks of its problem. A round is a generator that yields these and
    receives ``(value, seconds)``: :func:`_drive` answers one run's asks directly, and
    :func:`_drive_batch` answers those of several runs on the same objectives with one call.

    ``kind`` is a key of :data:`_EVALUATIONS` (the problem method called with ``params`` and, for
    the ``active_*`` kinds, ``rows``), or ``"pull"``: the reverse pass ``pullback(weights)`` of an
    earlier ``"pullback"`` ask. ``first`` marks a run's first evaluation (:func:`_objective_errors`);
    ``exact`` one that draws no mini-batch from the run's generator (the final losses).
    """

    kind: str
    params: Tensor | None = None
    rows: Tensor | None = None
    first: bool = False
    exact: bool = False
    pullback: Callable[[Tensor], Tensor] | _SharedPullback | None = None
    weights: Tensor | None = None


def _evaluate(problem: Problem, ask: _Ask, params: Tensor, rows: Tensor | None,
              generator: torch.Generator | None):
    call = getattr(problem, _EVALUATIONS[ask.kind])
    args = (params,) if rows is None else (params, rows)
    generator = None if ask.exact else generator
    if not ask.first:
        return call(*args, generator=generator)
    with _objective_errors(problem, params):
        return call(*args, generator=generator)


def _answer(problem: Problem, ask: _Ask, generator: torch.Generator | None) -> tuple[object, float]:
    """One run's ask, answered directly (mini-batches, if any, from the run's ``generator``):
    ``(value, seconds)``."""
    tic = time.perf_counter()
    if ask.kind == "pull":  # a run's own reverse pass (a shared one is pulled by _answer_together)
        value = cast("Callable[[Tensor], Tensor]", ask.pullback)(ask.weights)
    else:
        value = _evaluate(problem, ask, ask.params, ask.rows, generator)
    return value, time.perf_counter() - tic


def _drive(steps: Generator[_Ask, tuple, Result], problem: Problem, generator: torch.Generator | None) -> Result:
    """Runs one run's rounds (the generator of :meth:`_Job.steps`) to its result."""
    try:
        ask = next(steps)
        while True:
            ask = steps.send(_answer(problem, ask, generator))
    except StopIteration as stop:
        return stop.value


def _objectives_key(problem: Problem, generator: torch.Generator) -> tuple:
    """Problems with equal keys compute the same losses from the same parameters (the same
    function and instances): their runs' evaluations can be one call. The runs of a
    :attr:`~most.Problem.stochastic` problem draw their mini-batches from their own generators,
    so each keeps its evaluations."""
    return problem.evaluation.key() + ((id(generator),) if problem.stochastic else ())


class _SharedPullback:
    """The reverse pass of one evaluation of several runs' models (a ``"pullback"`` ask answered
    together): each run pulls its own weights, and the pass runs once, when every run that got
    it has asked (a run that ended without asking adds weight 0)."""

    def __init__(self, pullback: Callable[[Tensor], Tensor], spans: dict[int, tuple[int, int]], n: int):
        self.pullback, self.spans, self.n = pullback, spans, n
        self.holders = set(spans)

    def ready(self, asking: set[int]) -> bool:
        return self.holders <= asking

    def pull(self, weights: dict[int, Tensor]) -> dict[int, Tensor]:
        """Each asking run's direction ``[m_run, dim]`` from its weights ``[m_run, n]`` (checked by
        the run before it asks)."""
        n, like = self.n, next(iter(weights.values()))
        parts = [weights[i] if i in weights else like.new_zeros(b - a, n)
                 for i, (a, b) in sorted(self.spans.items(), key=lambda item: item[1])]
        grads = self.pullback(torch.cat([w.to(like) for w in parts]))
        self.holders.clear()
        return {i: grads[a:b] for i, (a, b) in self.spans.items() if i in weights}


def _columns(values: Tensor, a: int, b: int) -> Tensor:
    """Columns ``a:b`` of a loss matrix ``[n, M]`` in storage of their own (a run's history keeps
    its losses), laid out as a run's own loss matrix."""
    return values[:, a:b].clone()


def _answer_together(problem: Problem, members: list[int], asks: list[_Ask],
                     generator: torch.Generator) -> list[object]:
    """The asks of runs ``members`` (one kind, the same objectives) answered with one evaluation
    of all their models (mini-batches, if any, from the first member's ``generator``: runs share
    an evaluation of a stochastic problem only when they share a generator); the values in the
    members' order."""
    ask = asks[0]
    if ask.kind == "pull":
        # runs share a "pull" only through a _SharedPullback (each run's own pass is answered alone)
        pulled = cast(_SharedPullback, ask.pullback).pull({i: a.weights for i, a in zip(members, asks)})
        return [pulled[i] for i in members]
    sizes = [int(cast(Tensor, a.params).shape[0]) for a in asks]  # every ask but "pull" has its models
    bounds = [(sum(sizes[:i]), sum(sizes[:i + 1])) for i in range(len(sizes))]
    rows = None if ask.rows is None else torch.cat([a.rows for a in asks])
    value = _evaluate(problem, ask, torch.cat([a.params for a in asks]), rows, generator)
    if ask.kind == "losses":
        return [_columns(value, a, b) for a, b in bounds]
    if ask.kind == "pullback":
        values, pullback = value
        shared = _SharedPullback(pullback, dict(zip(members, bounds)), problem.n_objectives)
        return [(_columns(values, a, b), shared) for a, b in bounds]
    if ask.kind == "active_gradients":
        return [value[a:b] for a, b in bounds]
    losses, jac = value  # jacobian, active_jacobian
    return [(_columns(losses, a, b), jac[a:b]) for a, b in bounds]


def _drive_batch(jobs: list[tuple[Problem, Generator[_Ask, tuple, Result], torch.Generator]],
                 on_error: Callable[[int, Exception], None] | None = None) -> list[Result | None]:
    """Runs several runs' rounds in step: at each point, the asks of the runs whose objectives are
    the same (:func:`_objectives_key`), of one kind (and, for gradients of selected rows, as many
    rows each), are answered by one evaluation of all their models; the rest of a round (plan,
    weights, combination, update) stays each run's own. A group's seconds are shared equally
    among its runs. A run's error is raised, or with ``on_error(index, error)`` passed to it and
    the run left out (its entry ``None``)."""
    results: list[Result | None] = [None] * len(jobs)
    asks: dict[int, _Ask] = {}
    shared: dict[int, _SharedPullback] = {}  # the runs holding an unpulled shared reverse pass

    def advance(i: int, answer: tuple | None) -> None:
        steps = jobs[i][1]
        try:
            ask = next(steps) if answer is None else steps.send(answer)
        except StopIteration as stop:
            results[i] = stop.value
            asks.pop(i, None)
        except Exception as exc:
            asks.pop(i, None)
            if on_error is None:
                raise
            on_error(i, exc)
        else:
            asks[i] = ask
            return
        if i in shared:  # it ended without its reverse pass: the others pull without it
            shared.pop(i).holders.discard(i)

    for i in range(len(jobs)):
        advance(i, None)
    while asks:
        groups: dict[tuple, list[int]] = {}
        for i, ask in asks.items():
            key: tuple
            if ask.kind == "pull":
                key = ("pull", id(ask.pullback))
            else:
                params = cast(Tensor, ask.params)  # every ask but "pull" has its models
                key = (ask.kind, ask.first, _objectives_key(jobs[i][0], jobs[i][2]), params.dtype, params.device,
                       None if ask.rows is None else int(ask.rows.shape[1]))
            groups.setdefault(key, []).append(i)
        answered = False
        for key, members in groups.items():
            first = asks[members[0]]
            if first.kind == "pull" and isinstance(first.pullback, _SharedPullback):
                if not first.pullback.ready(set(members)):
                    continue  # a run holding this pass has not asked for it yet
                for i in members:
                    shared.pop(i, None)
            elif len(members) == 1:
                answer = _answer(jobs[members[0]][0], first, jobs[members[0]][2])
                advance(members[0], answer)
                answered = True
                continue
            tic = time.perf_counter()
            try:
                values = _answer_together(jobs[members[0]][0], members, [asks[i] for i in members],
                                          jobs[members[0]][2])
            except Exception as exc:  # the shared objectives failed: every run of the group
                if on_error is None:
                    raise
                for i in members:
                    asks.pop(i, None)
                    if i in shared:
                        shared.pop(i).holders.discard(i)
                    on_error(i, exc)
                answered = True
                continue
            seconds = (time.perf_counter() - tic) / len(members)
            for i, value in zip(members, values):
                if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], _SharedPullback):
                    shared[i] = value[1]
                advance(i, (value, seconds))
            answered = True
        if not answered:  # cannot happen: a pass waits only on runs that ask for something else
            raise RuntimeError("The runs of a batch wait on each other; please report this as a bug.")
    return results


def fit_batch(problem: Problem, methods: Sequence["Method"], *, progress: bool = False,
              errors: Literal["raise", "return"] = "raise",
              callbacks: Sequence[Callable[[RoundRecord, Tensor], None] | None] | None = None,
              checkpoints: Sequence[Checkpoint | None] | None = None) -> list[Result | Exception]:
    """Fits several methods (or one method with several seeds) on one problem as one job.

    The runs go round by round together: at each step, the evaluations of runs on the same
    objectives (the loss matrix, the reverse pass of a linear combiner, the Jacobians of a
    min-norm one) are one vectorised call over all their models, and each run keeps its own plan,
    weights, combination and update. Each result equals that of ``method.fit(problem)`` to
    round-off: the batched passes compute each model's numbers from its own parameters, but torch
    may block a matrix product or order a reduction differently for more models. Often bit for bit
    (every ZDT run of the few-objective table; every registered method on the tests' quadratics);
    where a run's plan follows the last bits (a tie between models), its path can part from the
    unbatched one as it would on another machine. Objectives that draw a mini-batch at each call
    draw one for all runs of an evaluation; a :meth:`~most.Problem.from_datasets` problem with a
    ``batch_size`` draws each run's from the run's own generator, so those runs keep their
    evaluations and end as their fits.

    Runs share evaluations when their prepared problems compute the same function: the same
    problem, or MosT-E with the same extension and the same mixtures (a ``spread="grid"``
    :class:`~most.methods.TchebycheffExtension`); other runs still go in step, each evaluated on
    its own. On small problems a round is a few hundred small tensor operations, and a batch of S
    runs makes the evaluation's share of them once instead of S times.

    Args:
        problem: the problem every method fits.
        methods: the runs, e.g. ``[most.MosT(n_models=5, seed=s) for s in range(5)]``; any of
            the library's centralised methods.
        progress: one progress bar over all runs' rounds (the methods' own bars are not shown).
        errors: ``"raise"`` stops at a run's error; ``"return"`` puts the error in the run's place
            and lets the others finish.
        callbacks: one per method (or ``None``), each called as ``fit``'s ``callback`` after each
            of its run's rounds.
        checkpoints: one :class:`~most.checkpoint.Checkpoint` per method (or ``None``): each run
            saves its state there and, when it finds one, continues from it, as with ``fit``; a
            stopped batch loses no run's saved rounds.

    Returns:
        One :class:`Result` (or, with ``errors="return"``, an exception) per method, in order.

    Examples:
        >>> import torch, most
        >>> centres = torch.tensor([[0.0, 0.0], [0.3, 0.0], [9.0, 9.0], [9.0, 9.3]])
        >>> problem = most.Problem.from_function(
        ...     lambda theta: ((theta - centres) ** 2).sum(-1), dim=2, n_objectives=4)
        >>> runs = [most.MosT(n_models=2, rounds=60, lr=0.2, seed=s) for s in range(3)]
        >>> results = most.fit_batch(problem, runs)
        >>> bool(torch.equal(results[1].params, runs[1].fit(problem).params))
        True
    """
    if not isinstance(problem, Problem):
        raise ValueError(
            f"fit_batch() takes a most.Problem; got {type(problem).__name__}. Build one with "
            "most.Problem.from_function(...) or most.Problem.from_module(...)."
        )
    if isinstance(methods, Method) or not isinstance(methods, Sequence) or not methods:
        raise ValueError("`methods` must be a non-empty list of methods, e.g. "
                         "[most.MosT(n_models=5, seed=s) for s in range(5)].")
    for k, method in enumerate(methods):
        if not isinstance(method, Method):
            raise TypeError(f"methods[{k}] is a {type(method).__name__}; fit_batch takes the library's centralised "
                            "methods (most.MosT, most.Linearization, most.MGDA, the baselines in most.baselines).")
    if errors not in ("raise", "return"):
        raise ValueError(f"`errors` must be 'raise' or 'return'; got {errors!r}.")
    for name, given in (("callbacks", callbacks), ("checkpoints", checkpoints)):
        if given is not None and (not isinstance(given, Sequence) or len(given) != len(methods)):
            raise ValueError(f"`{name}` must be a list with one entry (or None) per method: {len(methods)} "
                             f"methods, got {len(given) if isinstance(given, Sequence) else type(given).__name__}.")
    callbacks = [None] * len(methods) if callbacks is None else list(callbacks)
    checkpoints = [None] * len(methods) if checkpoints is None else list(checkpoints)
    failures: dict[int, Exception] = {}
    work = sum(method.n_models for method in methods) * problem.n_objectives * problem.dim
    with threads_for(work):
        prepared: list[tuple] = []  # (extension, mixtures, problem) made so far, to share equal ones
        jobs: list[_Job | None] = []
        bar = tqdm(total=sum(method.rounds for method in methods), desc="fit_batch", disable=not progress,
                   leave=False)
        for k, method in enumerate(methods):
            try:
                job = method._job(problem, prepared, callback=callbacks[k], checkpoint=checkpoints[k])
            except Exception as exc:
                if errors == "raise":
                    raise
                failures[k] = exc
                job = None
            jobs.append(job)
        live = [k for k, job in enumerate(jobs) if job is not None]
        running = [job for job in jobs if job is not None]  # the jobs of `live`, in its order
        bar.update(sum(job.first_round for job in running))  # the rounds resumed runs had made
        results = _drive_batch([(job.problem, job.steps(on_round=bar.update), job.generator)
                                for job in running],
                               on_error=None if errors == "raise" else
                               lambda i, exc: failures.__setitem__(live[i], exc))
        bar.close()
    out: list[Result | Exception | None] = [None] * len(methods)
    for i, k in enumerate(live):
        out[k] = results[i]
    for k, error in failures.items():
        out[k] = error
    return cast("list[Result | Exception]", out)  # a run without a result failed: its error is there


@dataclass
class _Job:
    """A run of :func:`run` from its start (validated, seeded, resumed) to its result."""

    problem: Problem
    loop: "_Loop"
    settings: dict
    generator: torch.Generator
    first_round: int
    progress: bool
    description: str
    callback: Callable[[RoundRecord, Tensor], None] | None
    checkpoint: Checkpoint | None

    @classmethod
    def start(cls, problem: Problem, *, n_models: int, rounds: int, inner_steps: int, lr: float,
              assignment: Assignment, weighting: Weighting, combiner: Combiner, seed: int, progress: bool,
              description: str, callback, optimizer: UpdateRule | None, checkpoint: Checkpoint | None,
              seeding: KMeansSeeding | None, reseed: Reseed | None) -> "_Job":
        """Everything before the first round: the initial models, their seeding and, with a
        checkpoint, the state to continue from (arguments as :func:`run`'s, checked)."""
        for value, name, base, example in ((assignment, "assignment", Assignment, "most.methods.TransportAssignment()"),
                                           (weighting, "weighting", Weighting, "most.methods.MajorityShare()"),
                                           (combiner, "combiner", Combiner, "most.methods.WeightedSum()")):
            check_component(value, name=name, example=example, base=base)
        n, m = problem.n_objectives, n_models
        generator = seeded(seed)
        optimizer = SGD() if optimizer is None else optimizer
        params = problem.initial_params(m, generator)
        if not torch.isfinite(params).all():
            raise ValueError("The initial parameters contain NaN or inf; check the problem's `init`.")
        if seeding is not None:  # the objectives are checked where the user's errors show first
            _check_finite(_first_losses(problem, params), None, problem, 0, None)
            params = seeding(problem, m, generator, lr=lr, optimizer=optimizer, run_steps=rounds * inner_steps)
        assignment.reset(n, m, generator)
        combiner = combiner.resolve(problem.coordinates)  # a parameter name in MinNorm(coordinates=...)
        statistics = None if problem.statistics is None else problem.statistics.init(m, params.device)
        loop = _Loop(problem, m, rounds, inner_steps, lr, assignment, weighting, combiner, optimizer,
                     params=params, opt_state=optimizer.init(params), reseed=reseed, generator=generator,
                     keep_every=max(1, math.ceil(rounds * 3 * n * m / HISTORY_NUMBERS)), statistics=statistics)
        settings = dict(n=n, m=m, rounds=rounds, dim=problem.dim, inner_steps=inner_steps, lr=lr, seed=seed,
                        optimizer=optimizer, **loop.components)
        if seeding is not None or reseed is not None:  # older checkpoints (without these) keep resuming
            settings.update(seeding=seeding, reseed=reseed)
        start = 0
        state = None if checkpoint is None else checkpoint.load(generator, settings=settings, rounds=rounds)
        if state is not None:
            start = loop.restore(state, generator)
        return cls(problem, loop, settings, generator, start, progress, description, callback, checkpoint)

    def steps(self, on_round: Callable[[], None] | None = None) -> Generator[_Ask, tuple, Result]:
        """The rounds left and the final evaluation, as asks (see :class:`_Ask`); returns the
        :class:`Result`. ``on_round()`` is called after each round."""
        loop, problem, rounds, checkpoint = self.loop, self.problem, self.loop.rounds, self.checkpoint
        bar = tqdm(range(self.first_round, rounds), desc=self.description, disable=not self.progress, leave=False,
                   initial=self.first_round, total=rounds)
        for t in bar:
            record = yield from loop.round_steps(t, first=t == self.first_round)
            if self.progress:
                sparsity = float((cast(Tensor, record.plan) <= 1e-12).float().mean())  # a new record's plan
                bar.set_postfix(best_loss=f"{record.mean_best_loss:.4g}", gamma_zeros=f"{sparsity:.0%}", refresh=False)
            if self.callback is not None:
                self.callback(record, loop.params)
            if checkpoint is not None and checkpoint.due(t, rounds):
                checkpoint.save(loop.state(t + 1), self.generator, settings=self.settings)
            if on_round is not None:
                on_round()
        final, _ = yield _Ask("losses", loop.params, exact=True)
        _check_finite(final, None, problem, rounds, None)
        plan = cast(Tensor, loop.plan)  # set by a round, or restored with the rounds made (rounds >= 1)
        return Result(params=loop.params.detach(), assignment=plan.detach(), losses=final, history=loop.history,
                      problem=problem, statistics=loop.statistics)


@dataclass
class _Loop:
    """The state of :func:`run` between rounds, and one round of Algorithm 1."""

    problem: Problem
    m: int
    rounds: int
    inner_steps: int
    lr: float
    assignment: Assignment
    weighting: Weighting
    combiner: Combiner
    optimizer: UpdateRule
    params: Tensor
    opt_state: object
    reseed: Reseed | None = None
    generator: torch.Generator | None = None
    plan: Tensor | None = None
    history: list[RoundRecord] = field(default_factory=list)
    keep_every: int = 1  # rounds whose record keeps its tensors (HISTORY_NUMBERS)
    # a linear combiner's reverse pass from the round's loss matrix, used by its first step (then dropped);
    # in a batch (fit_batch), the pass it shares with other runs
    pullback: Callable[[Tensor], Tensor] | _SharedPullback | None = field(default=None, repr=False)
    # the models' running statistics of batch normalisation (Problem.statistics), or None
    statistics: dict[str, Tensor] | None = None

    @property
    def components(self) -> dict:
        return {"assignment": self.assignment, "weighting": self.weighting, "combiner": self.combiner}

    def state(self, round: int) -> dict:
        """What a checkpoint holds after ``round`` rounds."""
        plan = cast(Tensor, self.plan)  # saved after a round
        state = dict(round=round, params=self.params.detach(), opt_state=self.opt_state, plan=plan.detach(),
                     history=[vars(r) for r in self.history], **self.components)
        if self.statistics is not None:
            state["statistics"] = self.statistics
        return state

    def restore(self, state: dict, generator: torch.Generator) -> int:
        """Continues from a checkpoint's state; returns the round to start from."""
        n, dim = self.problem.n_objectives, self.problem.dim
        for key, shape in (("params", (self.m, dim)), ("plan", (n, self.m))):
            value = state.get(key)
            if not isinstance(value, Tensor) or tuple(value.shape) != shape:
                got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise CheckpointError(f"The checkpoint is damaged: its {key} should be a tensor of shape {list(shape)}; "
                                      f"found {got}. Delete it (or use --restart) to start the run over.")
        self.params, self.opt_state, self.plan = state["params"], state["opt_state"], state["plan"]
        self.history = [RoundRecord(**record) for record in state["history"]]
        if self.statistics is not None:
            if "statistics" not in state:
                raise ValueError("The checkpoint holds no running statistics of the module's batch normalisation, "
                                 "which this run keeps; it was saved by another problem. Remove it or use "
                                 "another checkpoint folder.")
            self.statistics = state["statistics"]
        for name, obj in self.components.items():
            restore_into(obj, state[name], generator)
        return int(state["round"])

    def _losses(self, first: bool):
        """Asks for the loss matrix (and the full Jacobian when the combiner reads every row);
        returns ``((losses, jacobian or None), seconds)``."""
        if self.combiner.linear:  # the first step's gradients come from this forward pass
            (losses, self.pullback), seconds = yield _Ask("pullback", self.params, first=first)
            return (losses, None), seconds
        if self.combiner.active_only:  # gradients come after the plan, for the served objectives only
            if self.problem.jacobian_first(self.m):  # ... unless forward mode computes every objective's row anyway
                return (yield _Ask("jacobian", self.params, first=first))
            losses, seconds = yield _Ask("losses", self.params, first=first)
            return (losses, None), seconds
        return (yield _Ask("jacobian", self.params, first=first))

    def round_steps(self, t: int, first: bool = False) -> Generator[_Ask, tuple, RoundRecord]:
        """One round: the loss matrix, the plan (Eq. 6), the weights, then K combined steps; its
        evaluations are asks (:class:`_Ask`), and it returns the round's record."""
        start = self.params
        (losses, jac), grad_s = yield from self._losses(first)
        tic = time.perf_counter()
        # the rows an active_only combiner reads are checked once they are chosen (in _steps)
        _check_finite(losses, None if self.combiner.active_only else jac, self.problem, t, None)
        grad_s += time.perf_counter() - tic

        tic = time.perf_counter()
        try:
            self.plan = self.assignment(losses.detach(), t, self.rounds, previous=self.plan)
        except ValueError as exc:
            raise ValueError(f"At round {t}, in the assignment: {exc}") from exc
        weights = self.weighting(self.plan)
        transport_s = time.perf_counter() - tic

        lam, min_norm_s, step_grad_s = yield from self._steps(t, losses, jac, weights)
        if self.statistics is not None:  # the forward passes of the round's models over the objectives they serve
            keeper = cast("RunningStatistics", self.problem.statistics)  # the problem whose statistics these are
            self.statistics = keeper.update(start, self.statistics, weights > 0)
        moved = None
        if self.reseed is not None and self.reseed.due(t, self.rounds):
            # the plan and the round, for Reseed's spread over an extended problem's original objectives
            spread = isinstance(self.reseed, Reseed)
            context = dict(plan=self.plan.detach(), round=t, total=self.rounds) if spread else {}
            self.params, moved = self.reseed(self.problem, self.params.detach(), self.generator, lr=self.lr,
                                             optimizer=self.optimizer, **context)
            if moved is not None:
                self.opt_state = self.optimizer.restart(self.opt_state, moved)
                if self.statistics is not None:
                    keeper = cast("RunningStatistics", self.problem.statistics)
                    self.statistics = keeper.reset(self.statistics, moved)
        record = RoundRecord(round=t, plan=self.plan.detach().cpu(), losses=losses.detach().cpu(),
                             weights=lam.detach().cpu(), transport_seconds=transport_s, min_norm_seconds=min_norm_s,
                             gradient_seconds=grad_s + step_grad_s, moved=moved)
        if self.history and self.history[-1].round % self.keep_every:  # the last round keeps its tensors
            self.history[-1] = self.history[-1].thinned()
        self.history.append(record)
        return record

    def _linear_steps(self, t: int, losses: Tensor, weights: Tensor):
        """The K inner steps of a combiner whose direction is a linear combination of the gradients
        (``combiner.linear``: :class:`~most.methods.WeightedSum`, TCH-Set, ...): one forward and one
        reverse pass over the models per step, with the coefficients taken from the step's losses."""
        problem, combiner = self.problem, self.combiner
        grad_s, lam = 0.0, None
        for k in range(self.inner_steps):
            if k == 0 and self.pullback is not None:  # at the parameters of the round's loss matrix
                step_losses, pullback, self.pullback = losses, self.pullback, None
            else:
                (step_losses, pullback), seconds = yield _Ask("pullback", self.params)
                grad_s += seconds
            tic = time.perf_counter()
            # checked here, before a reverse pass that other runs of a batch may share
            lam = check_weights(combiner.linear_coefficients(weights, step_losses.T), *step_losses.T.shape)
            grad_s += time.perf_counter() - tic
            direction, seconds = yield _Ask("pull", pullback=pullback, weights=lam)
            grad_s += seconds
            _check_finite(step_losses, None, problem, t, k)
            bad = ~torch.isfinite(direction).all(-1)
            if bad.any():
                raise ValueError(f"The gradient of model {int(bad.nonzero()[0])}'s objectives is not finite at round "
                                 f"{t}, inner step {k}. Try a smaller `lr` or check the loss for operations without "
                                 "a gradient here.")
            direction = problem.tangent_jacobian(self.params, direction.detach()[:, None])[:, 0]
            self.params, self.opt_state = self.optimizer.step(self.params.detach(), direction, self.opt_state, self.lr)
            self.params = problem.apply_projection(self.params)
        return cast(Tensor, lam).to(self.params.dtype), 0.0, grad_s  # inner_steps >= 1: lam is set

    def _steps(self, t: int, losses: Tensor, jac: Tensor | None, weights: Tensor):
        """The K inner steps under one plan; returns the last combiner weights ``[m, n]`` and the
        seconds spent combining and evaluating gradients."""
        if self.combiner.linear:
            return (yield from self._linear_steps(t, losses, weights))
        problem, combiner, n, m = self.problem, self.combiner, self.problem.n_objectives, self.m
        rows = _active_rows(weights) if combiner.active_only else None
        step_weights = weights if rows is None else weights.gather(1, rows[0]) * rows[1]
        min_norm_s = grad_s = 0.0
        lam = torch.zeros(m, n, dtype=self.params.dtype, device=self.params.device)
        step_losses = losses
        for k in range(self.inner_steps):
            if k == 0 and jac is not None and rows is not None:  # every row, from Problem.jacobian_first
                if problem.forward_rows(int(rows[0].shape[1])):  # the served ones, as active_gradients gives them
                    tic = time.perf_counter()
                    jac = jac.gather(1, rows[0][..., None].expand(-1, -1, jac.shape[-1]))
                    _check_finite(step_losses, jac, problem, t, k, rows[0])
                    grad_s += time.perf_counter() - tic
                else:  # too few rows for forward mode: asked for below
                    jac = None
            if k > 0 or jac is None:
                if rows is None:
                    (step_losses, jac), seconds = yield _Ask("jacobian", self.params)
                elif k == 0:  # at the parameters of the loss matrix: only the gradients are new
                    jac, seconds = yield _Ask("active_gradients", self.params, rows[0])
                else:
                    (step_losses, jac), seconds = yield _Ask("active_jacobian", self.params, rows[0])
                tic = time.perf_counter()
                _check_finite(step_losses, jac, problem, t, k, None if rows is None else rows[0])
                grad_s += seconds + time.perf_counter() - tic
            jac = problem.tangent_jacobian(self.params, jac.detach())
            tic = time.perf_counter()
            try:
                direction, lam = combiner(jac, step_weights, losses=step_losses.detach().T, params=self.params.detach())
            except ValueError as exc:
                raise ValueError(f"At round {t}, inner step {k}: {exc}") from exc
            if rows is not None:  # back to [m, n]; padding rows carry weight 0
                lam = torch.zeros(m, n, dtype=lam.dtype, device=lam.device).scatter_add_(
                    1, rows[0], lam * rows[1].to(lam))
            min_norm_s += time.perf_counter() - tic
            # a function with float64 constants gives float64 gradients of float32 models: the models keep their dtype
            direction = direction.to(self.params.dtype)
            self.params, self.opt_state = self.optimizer.step(self.params.detach(), direction, self.opt_state, self.lr)
            self.params = problem.apply_projection(self.params)
        return lam.to(self.params.dtype), min_norm_s, grad_s


_TRANSPORT_DEFAULTS = dict(transport="exact", diversity=0.0, reg=None, warm_start=False)


def transport_assignment(method) -> Assignment:
    """The assignment of a MosT configuration (centralised or federated): its ``assignment`` if
    given, else the :class:`~most.methods.TransportAssignment` of its transport fields."""
    if method.assignment is None:
        return TransportAssignment(method=method.transport, diversity=method.diversity, marginals=method.marginals,
                                   reg=method.reg, warm_start=method.warm_start)
    if not isinstance(method.assignment, Assignment):
        raise TypeError(f"`assignment` must be a most.methods.Assignment (e.g. "
                        f"most.methods.CappedTransportAssignment(shares=2)); got {method.assignment!r}.")
    changed = [k for k, v in _TRANSPORT_DEFAULTS.items() if getattr(method, k) != v]
    marginals = next(f for f in fields(method) if f.name == "marginals")
    default = cast("Callable[[], Marginals]", marginals.default_factory)()  # the field has a default_factory
    changed += [] if method.marginals == default else ["marginals"]
    if changed:
        raise ValueError(f"`assignment` replaces the transport fields, so {', '.join(changed)} must keep their "
                         "defaults; set them on the assignment itself.")
    return method.assignment


@dataclass(frozen=True)
class Method:
    """The base of the centralised methods: the fields every method shares; ``fit`` runs :func:`run`.

    A method of one's own subclasses it (a frozen dataclass) and returns its components from
    :meth:`components`; :meth:`prepare`, :meth:`placement` and :meth:`added_objectives` are hooks
    with defaults (the problem as given, no seeding or re-seeding, no extension).
    """

    n_models: int
    rounds: int = 100
    inner_steps: int = 1
    lr: float = 0.1
    seed: int = 0
    progress: bool = False
    optimizer: UpdateRule = field(default_factory=SGD)

    def __post_init__(self):
        # stored as the plain numbers they were checked as (a NumPy scalar or 0-d tensor is accepted)
        for name, check in (("seed", check_seed), ("n_models", check_positive_int), ("rounds", check_positive_int),
                            ("inner_steps", check_positive_int), ("lr", check_positive)):
            object.__setattr__(self, name, check(getattr(self, name), name=name))

    def components(self) -> tuple[Assignment, Weighting, Combiner]:
        raise NotImplementedError

    def prepare(self, problem: Problem, generator: torch.Generator) -> Problem:
        return problem

    def placement(self) -> tuple[KMeansSeeding | None, Reseed | None]:
        """The seeding of the initial models and the re-seeding between rounds (none by default)."""
        return None, None

    def added_objectives(self) -> DirichletExtension | TchebycheffExtension | None:
        """The extension that :meth:`prepare` adds objectives with (MosT-E; none by default)."""
        return None

    def _prepared(self, problem: Problem) -> Problem:
        """The problem this method fits (:meth:`prepare` with the method's own generator)."""
        return self.prepare(problem, seeded(self.seed + 7919))

    def _arguments(self) -> dict:
        """What :meth:`fit` passes to :func:`run` besides the problem, progress, callback and checkpoint."""
        assignment, weighting, combiner = self.components()
        seeding, reseed = self.placement()
        return dict(n_models=self.n_models, rounds=self.rounds, inner_steps=self.inner_steps, lr=self.lr,
                    assignment=assignment, weighting=weighting, combiner=combiner, seed=self.seed,
                    description=type(self).__name__, optimizer=self.optimizer, seeding=seeding, reseed=reseed)

    def _job(self, problem: Problem, prepared: list[tuple], *, callback=None,
             checkpoint: Checkpoint | None = None) -> _Job:
        """This method's run of :func:`fit_batch` up to its first round. ``prepared`` holds the
        ``(extension, mixtures, problem)`` of the batch's runs so far: a run whose extension and
        mixtures equal an earlier one's takes its problem, so that their evaluations are shared."""
        problem = self._prepared(problem)
        extension = self.added_objectives()
        mixtures = problem.metadata.get("extension_weights") if extension is not None else None
        if isinstance(mixtures, Tensor):
            same = [p for e, w, p in prepared if e == extension and w.shape == mixtures.shape and torch.equal(w, mixtures)]
            if same and same[0].metadata.get("base_problem") is problem.metadata.get("base_problem"):
                problem = same[0]
            else:
                prepared.append((extension, mixtures, problem))
        return _Job.start(problem, progress=False, callback=callback, checkpoint=checkpoint, **self._arguments())

    def fit(self, problem: Problem, *, callback=None, checkpoint: Checkpoint | None = None) -> Result:
        """Trains ``n_models`` models on ``problem`` and returns a :class:`Result`.

        ``callback(record, params)`` is called after every round; with a
        :class:`~most.checkpoint.Checkpoint` the run saves its state and resumes from it.
        """
        if not isinstance(problem, Problem):
            raise ValueError(
                f"fit() takes a most.Problem; got {type(problem).__name__}. Build one with "
                "most.Problem.from_function(...) or most.Problem.from_module(...)."
            )
        return run(self._prepared(problem), progress=self.progress, callback=callback, checkpoint=checkpoint,
                   **self._arguments())


@dataclass(frozen=True)
class MosT(Method):
    """Many-Objective Multi-Solution Transport (Algorithm 1).

    Args:
        n_models: m, the number of models.
        rounds: T, outer rounds (one assignment each).
        inner_steps: K, descent steps per model per round under the same Gamma.
        lr: eta, the step size.
        diversity: tau, the weight of R(Gamma) (Eq. 3).
        transport: ``"exact"`` (network simplex), ``"sinkhorn"``, ``"newton"`` (entropic, for
            large n) or ``"ipot"``.
        seed: seeds the initial models and any random draw of the run.
        marginals: the (alpha, beta) schedule: :class:`~most.methods.LoadBounds` (default:
            every model serves at least one objective, groups of any size),
            :class:`~most.methods.Uniform` (the paper's balanced transport),
            :class:`~most.methods.Curriculum`, or a semi-relaxed one (ablations O and M).
        weighting: how Gamma weights the objectives in each model's step. Default
            :class:`~most.methods.MajorityShare`; :class:`~most.methods.GammaWeights` is
            the paper as written (see :mod:`most.methods` for why the default differs).
        combiner: :class:`~most.methods.WeightedSum` (default: each model moves to the
            optimum of the objectives it serves) or :class:`~most.methods.MinNorm` (MGDA, the
            paper: a Pareto-stationary point of them).
        extension: :class:`~most.methods.DirichletExtension` for MosT-E (n < m).
        reg: strength of the iterative transport solvers.
        warm_start: start each round's transport from the previous plan.
        assignment: instead of the transport fields above, any
            :class:`~most.methods.Assignment` (e.g.
            :class:`~most.methods.CappedTransportAssignment`).
        progress: show a progress bar.
        optimizer: the update rule, :class:`~most.optim.SGD` (default, Algorithm 1) or
            :class:`~most.optim.Adam`.
        seeding: where the models start: :class:`~most.seeding.KMeansSeeding` (default, at
            the minimisers of well-spread objectives) or ``None`` (the problem's ``init``).
        reseed: :class:`~most.seeding.Reseed` (default) moves a model that serves its
            objectives badly, or none, when that lowers the summed best loss (with an
            extension of fewer than two objectives per model: when that raises the
            hypervolume of the original objectives); ``None`` never.

    The paper's algorithm as written is ``most.variants.apply("paper", MosT(...))``; each
    departure of the defaults is measured in ``docs/methods/departures.md``.
    """

    diversity: float = 0.0
    transport: Literal["exact", "sinkhorn", "newton", "ipot"] = "exact"
    marginals: Marginals = field(default_factory=LoadBounds)
    weighting: Weighting = field(default_factory=MajorityShare)
    combiner: Combiner = field(default_factory=WeightedSum)
    extension: DirichletExtension | TchebycheffExtension | None = None
    reg: float | None = None
    warm_start: bool = False
    assignment: Assignment | None = None
    seeding: KMeansSeeding | None = field(default_factory=KMeansSeeding)
    reseed: Reseed | None = field(default_factory=Reseed)

    def __post_init__(self):
        super().__post_init__()
        self.components()  # the transport assignment validates `transport` and `diversity`
        for name, kind in (("seeding", KMeansSeeding), ("reseed", Reseed)):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"`{name}` must be a most.seeding.{kind.__name__} (or None); got {value!r}.")

    def components(self):
        return transport_assignment(self), self.weighting, self.combiner

    def placement(self):
        return self.seeding, self.reseed

    def added_objectives(self):
        return self.extension

    def prepare(self, problem, generator):
        problem = self._extended(problem, generator)
        self.marginals.check_sizes(problem.n_objectives, self.n_models)  # e.g. load bounds no plan can meet
        return problem

    def _extended(self, problem, generator):
        if self.extension is not None:
            return self.extension.apply(problem, generator)
        if problem.n_objectives < self.n_models:
            raise ValueError(
                f"MosT needs at least as many objectives as models: n = {problem.n_objectives} objectives "
                f"< m = {self.n_models} models, so the transport would pair models with copies of the same "
                "objectives (paper Section 3.2). Use MosT-E, which adds Dirichlet mixtures of the objectives: "
                "MosT(..., extension=most.DirichletExtension(n_extra=20))."
            )
        return problem

    def replace(self, **changes) -> "MosT":
        """A copy with some fields changed (``dataclasses.replace``)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class Linearization(Method):
    """Linear scalarisation: model j minimises ``w_j . L`` for a random ``w_j ~ Dir(c)``."""

    concentration: float = 1.0

    def components(self):
        return RandomAssignment(self.concentration), GammaWeights(), WeightedSum()


@dataclass(frozen=True)
class MGDA(Method):
    """MGDA (Desideri 2012; Sener & Koltun 2018) run m times from m random starts."""

    max_iter: int | None = None
    tol: float | None = None

    def components(self):
        return EqualAssignment(), GammaWeights(), MinNorm(self.max_iter, self.tol)


@dataclass(frozen=True)
class WeightedMGDA(Method):
    """w-MGDA (Appendix E): MGDA on objectives reweighted by a fixed random plan."""

    concentration: float = 1.0

    def components(self):
        return RandomAssignment(self.concentration), GammaWeights(), MinNorm()
