r"""The round loop of Algorithm 1: a run from its start to its :class:`~most.engine.records.Result`.

Each round (:meth:`Loop.round_steps`):

1. evaluate the loss matrix ``L[i, j] = L_i(theta_j)`` of all m models at once;
2. ``Gamma <- assignment(L)`` (Eq. 6);
3. ``W <- weighting(Gamma)``;
4. K times: the gradients the combiner reads (its :mod:`~most.engine.paths`),
   ``d_j <- combiner(J_j, W_j)`` (Eqs. 7-9), ``theta_j <- project(theta_j - lr * d_j)``
   (:meth:`Loop.step`).

The evaluations are requests (:mod:`most.engine.requests`) that a driver answers: one run's
alone (:func:`run`), or several runs' together (:func:`most.fit_batch`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generator, cast

import torch
from torch import Tensor
from tqdm.auto import tqdm

from .._random import seeded
from .._threads import threads_for
from .._validation import check_callback, check_component, check_positive, check_positive_int, check_seed
from ..checkpoint import Checkpoint, CheckpointError, check_checkpoints, check_encodable, check_same_dtype, fingerprint, holding, restore_into
from ..methods import Assignment, Combiner, Weighting
from ..optim import SGD, UpdateRule
from ..problem import Problem
from ..seeding import KMeansSeeding, Reseed
from .checks import check_finite, first_losses
from .paths import GradientPath, gradient_path
from .records import Result, RoundRecord, keep_every
from .requests import Losses, Request, drive

if TYPE_CHECKING:
    from ..evaluators import RunningStatistics

__all__ = ["Loop", "Job", "run"]


@dataclass
class Loop:
    """The state of a run between rounds, and one round of Algorithm 1."""

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
    path: GradientPath
    reseed: Reseed | None = None
    generator: torch.Generator | None = None
    plan: Tensor | None = None
    history: list[RoundRecord] = field(default_factory=list)
    keep_every: int = 1  # rounds whose record keeps its tensors (records.HISTORY_NUMBERS)
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
        check_same_dtype(state["params"], self.params)
        if self.statistics is not None and "statistics" not in state:
            raise CheckpointError("The checkpoint holds no running statistics of the module's batch normalisation, "
                                  "which this run keeps; it was saved by another problem. Remove it or use "
                                  "another checkpoint folder.")
        try:
            opt_state, history = state["opt_state"], [RoundRecord(**record) for record in state["history"]]
            for name, obj in self.components.items():
                restore_into(obj, state[name], generator)
            start = int(state["round"])
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # a part missing or of another form: an edited or damaged file, or another version's
            what = f"its {exc.args[0]!r} is missing" if isinstance(exc, KeyError) else " ".join(str(exc).split())[:200]
            raise CheckpointError(f"The checkpoint is damaged or was written by another version ({what}). Delete it "
                                  "(or use --restart) to start the run over.") from None
        self.params, self.opt_state, self.plan, self.history = state["params"], opt_state, state["plan"], history
        if self.statistics is not None:
            self.statistics = state["statistics"]
        return start

    def step(self, direction: Tensor) -> None:
        """``theta <- project(update(theta, direction))``: the update rule's step of size ``lr``
        along ``direction [m, dim]``, then the problem's projection."""
        self.params, self.opt_state = self.optimizer.step(self.params.detach(), direction, self.opt_state, self.lr)
        self.params = self.problem.apply_projection(self.params)

    def round_steps(self, t: int, first: bool = False) -> Generator[Request, tuple, RoundRecord]:
        """One round: the loss matrix, the plan (Eq. 6), the weights, then K combined steps; its
        evaluations are requests, and it returns the round's record."""
        start = self.params
        (losses, jac), grad_s = yield from self.path.round_losses(self, first)
        tic = time.perf_counter()
        check_finite(losses, jac if self.path.checks_round_jacobian else None, self.problem, t, None)
        grad_s += time.perf_counter() - tic

        tic = time.perf_counter()
        try:
            self.plan = self.assignment(losses.detach(), t, self.rounds, previous=self.plan)
        except ValueError as exc:
            raise ValueError(f"At round {t}, in the assignment: {exc}") from exc
        weights = self.weighting(self.plan)
        transport_s = time.perf_counter() - tic

        lam, min_norm_s, step_grad_s = yield from self.path.steps(self, t, losses, jac, weights)
        if self.statistics is not None:  # the forward passes of the round's models over the objectives they serve
            keeper = cast("RunningStatistics", self.problem.statistics)  # the problem whose statistics these are
            self.statistics = keeper.update(start, self.statistics, weights > 0, self.generator)
        moved = self._reseed(t)
        record = RoundRecord(round=t, plan=self.plan.detach().cpu(), losses=losses.detach().cpu(),
                             weights=lam.detach().cpu(), transport_seconds=transport_s, min_norm_seconds=min_norm_s,
                             gradient_seconds=grad_s + step_grad_s, moved=moved)
        if self.history and self.history[-1].round % self.keep_every:  # the last round keeps its tensors
            self.history[-1] = self.history[-1].thinned()
        self.history.append(record)
        return record

    def _reseed(self, t: int) -> int | None:
        """After round ``t``: the model the re-seeding moved, if it is due and moved one."""
        if self.reseed is None or not self.reseed.due(t, self.rounds):
            return None
        # the plan and the round, for Reseed's spread over an extended problem's original objectives
        spread = isinstance(self.reseed, Reseed)
        context = dict(plan=cast(Tensor, self.plan).detach(), round=t, total=self.rounds) if spread else {}
        self.params, moved = self.reseed(self.problem, self.params.detach(), self.generator, lr=self.lr,
                                         optimizer=self.optimizer, **context)
        if moved is not None:
            self.opt_state = self.optimizer.restart(self.opt_state, moved)
            if self.statistics is not None:
                keeper = cast("RunningStatistics", self.problem.statistics)
                self.statistics = keeper.reset(self.statistics, moved)
        return moved


@dataclass
class Job:
    """A run of :func:`run` from its start (validated, seeded, resumed) to its result."""

    problem: Problem
    loop: Loop
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
              seeding: KMeansSeeding | None, reseed: Reseed | None, method: object | None = None) -> "Job":
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
            check_finite(first_losses(problem, params), None, problem, 0, None)
            # a bar of its own: on many objectives the seeding takes a while before the first round's bar
            with tqdm(total=1, desc=f"{description}: seeding", disable=not progress, leave=False) as bar:
                params = seeding(problem, m, generator, lr=lr, optimizer=optimizer, run_steps=rounds * inner_steps)
                bar.update()
        # the run's own copy: an assignment that keeps state from reset (a fixed plan) may be the
        # same object in several runs (methods made by replace), which fit_batch runs together
        assignment = copy.copy(assignment)
        assignment.reset(n, m, generator)
        combiner = combiner.resolve(problem.coordinates)  # a parameter name in MinNorm(coordinates=...)
        statistics = None if problem.statistics is None else problem.statistics.init(m, params.device)
        loop = Loop(problem, m, rounds, inner_steps, lr, assignment, weighting, combiner, optimizer,
                    params=params, opt_state=optimizer.init(params), path=gradient_path(combiner), reseed=reseed,
                    generator=generator, keep_every=keep_every(rounds, n, m), statistics=statistics)
        settings = dict(n=n, m=m, rounds=rounds, dim=problem.dim, inner_steps=inner_steps, lr=lr, seed=seed,
                        optimizer=optimizer, **loop.components)
        if seeding is not None or reseed is not None:  # named only when used, so that the settings of runs without them stay as they are
            settings.update(seeding=seeding, reseed=reseed)
        if method is not None:  # every setting of the method, also those the loop does not see (a ridge, a preference)
            settings["method"] = {k: v for k, v in fingerprint(method).items() if k != "progress"}
        start = 0
        if checkpoint is not None:  # a component's state no checkpoint can hold: refused now, not at the first save
            check_encodable(dict(opt_state=loop.opt_state, **loop.components), generator)
        state = None if checkpoint is None else checkpoint.load(generator, settings=settings, rounds=rounds)
        if state is not None:
            start = loop.restore(state, generator)
        return cls(problem, loop, settings, generator, start, progress, description, callback, checkpoint)

    def steps(self, on_round: Callable[[], None] | None = None) -> Generator[Request, tuple, Result]:
        """The rounds left and the final evaluation, as requests; returns the :class:`Result`.
        ``on_round()`` is called after each round."""
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
        final, _ = yield Losses(loop.params, exact=True)
        check_finite(final, None, problem, rounds, None)
        plan = cast(Tensor, loop.plan)  # set by a round, or restored with the rounds made (rounds >= 1)
        return Result(params=loop.params.detach(), assignment=plan.detach(), losses=final, history=loop.history,
                      problem=problem, statistics=loop.statistics)


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
    method: object | None = None,
) -> Result:
    """Runs the round loop of Algorithm 1 with the given components.

    Most users call a method's ``fit`` instead (:class:`~most.MosT`, :class:`~most.Linearization`,
    :class:`~most.MGDA`, :class:`~most.WeightedMGDA`). ``callback(record, params)`` is called after
    every round. With a :class:`~most.checkpoint.Checkpoint`, the state is saved every
    ``checkpoint.every`` rounds, and a run that finds a checkpoint continues from it (the
    final models equal those of an uninterrupted run: mini-batches of a
    :meth:`~most.Problem.from_datasets` problem come from the run's generator, which the checkpoint
    holds; objectives that draw their own, e.g. with torch's global generator, are theirs to
    restore). ``seeding`` places the
    initial models (:class:`~most.seeding.KMeansSeeding`; ``None``: the problem's ``init``);
    ``reseed`` moves a badly placed model at fixed rounds (:class:`~most.seeding.Reseed`).
    ``method``: the method whose run this is (a dataclass); its settings, but ``progress``, join
    the loop's in the checkpoint, so that resuming with another setting is refused.
    """
    check_positive_int(n_models, name="n_models")
    check_positive_int(rounds, name="rounds")
    check_positive_int(inner_steps, name="inner_steps")
    check_positive(lr, name="lr")
    seed = check_seed(seed)
    check_callback(callback)
    check_checkpoints([checkpoint])  # fit_batch checks and holds its own list before its jobs start
    # the checkpoint is held for the run; one torch thread for small problems, torch's count for large ones (most.set_threads)
    with holding([checkpoint]), threads_for(n_models * problem.n_objectives * problem.dim):
        job = Job.start(problem, n_models=n_models, rounds=rounds, inner_steps=inner_steps, lr=lr,
                        assignment=assignment, weighting=weighting, combiner=combiner, seed=seed, progress=progress,
                        description=description, callback=callback, optimizer=optimizer, checkpoint=checkpoint,
                        seeding=seeding, reseed=reseed, method=method)
        return drive(job.steps(), problem, job.generator)
