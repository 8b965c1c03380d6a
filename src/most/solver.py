r"""The centralised methods: :class:`MosT`, :class:`Linearization`, :class:`MGDA`,
:class:`WeightedMGDA`, their base :class:`Method`, and :func:`fit_batch`.

A method only chooses its assignment, weighting and combiner (see :mod:`most.methods`), its
seeding and its extension; every method runs the same round loop of Algorithm 1, the engine
(:func:`most.engine.run`, re-exported here as :func:`run`).

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

from dataclasses import dataclass, field, replace
from typing import Callable, Literal, Sequence, cast

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ._random import seeded
from ._threads import threads_for
from ._validation import check_bool, check_callback, check_component, check_positive, check_positive_int, check_seed
from .checkpoint import Checkpoint, check_checkpoints, holding
from .engine import Job, Result, RoundRecord, drive_batch, run
from .methods import (
    Assignment,
    Combiner,
    DirichletExtension,
    EqualAssignment,
    GammaWeights,
    MinNorm,
    RandomAssignment,
    Support,
    TchebycheffExtension,
    TransportConfig,
    WeightedSum,
    Weighting,
)
from .optim import SGD, UpdateRule
from .problem import Problem
from .seeding import KMeansSeeding, Reseed

__all__ = ["RoundRecord", "Result", "run", "fit_batch", "MosT", "Linearization", "MGDA", "WeightedMGDA"]


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
    draw one for all runs of an evaluation; a :attr:`~most.Problem.stochastic` problem (a
    :meth:`~most.Problem.from_datasets` problem with a ``batch_size``, or a module with dropout)
    draws each run's batches and masks from the run's own generator, so those runs keep their
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
    for k, callback in enumerate(callbacks):
        check_callback(callback, name=f"callbacks[{k}]")
    check_checkpoints(checkpoints)
    failures: dict[int, Exception] = {}
    work = sum(method.n_models for method in methods) * problem.n_objectives * problem.dim
    with holding(checkpoints), threads_for(work):
        prepared: list[tuple] = []  # (extension, mixtures, problem) made so far, to share equal ones
        jobs: list[Job | None] = []
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
        results = drive_batch([(job.problem, job.steps(on_round=bar.update), job.generator)
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
        object.__setattr__(self, "progress", check_bool(self.progress, name="progress"))
        check_component(self.optimizer, name="optimizer", example="most.optim.Adam()", base=UpdateRule)
        if type(self).components is not Method.components:  # the components' own checks, before any fit
            self.components()

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
             checkpoint: Checkpoint | None = None) -> Job:
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
        return Job.start(problem, progress=False, callback=callback, checkpoint=checkpoint, method=self,
                         **self._arguments())

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
                   method=self, **self._arguments())


@dataclass(frozen=True)
class MosT(TransportConfig, Method):
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

    extension: DirichletExtension | TchebycheffExtension | None = None
    seeding: KMeansSeeding | None = field(default_factory=KMeansSeeding)
    reseed: Reseed | None = field(default_factory=Reseed)

    def __post_init__(self):
        super().__post_init__()  # Method's checks, then the transport configuration's
        if self.extension is not None:
            check_component(self.extension, name="extension", example="most.DirichletExtension(n_extra=20)")
            if not isinstance(self.extension, (DirichletExtension, TchebycheffExtension)):
                raise TypeError("`extension` must be a most.DirichletExtension or most.TchebycheffExtension (e.g. "
                                f"most.DirichletExtension(n_extra=20)), or None; got {self.extension!r}.")
        for name, kind in (("seeding", KMeansSeeding), ("reseed", Reseed)):
            value = getattr(self, name)
            if value is not None:
                check_component(value, name=name, example=f"most.seeding.{kind.__name__}()")
                if not callable(value):
                    raise TypeError(f"`{name}` must be a most.seeding.{kind.__name__} (or None); got {value!r}.")

    def components(self):
        return self.transport_assignment(), self.weighting, self.combiner

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
class _RandomPlanMethod(Method):
    """The fields of the methods whose plan is a fixed random draw (:class:`RandomAssignment`)."""

    concentration: float = 1.0

    def __post_init__(self):
        # stored as the plain number it was checked as (a NumPy scalar or 0-d tensor is accepted)
        object.__setattr__(self, "concentration", check_positive(self.concentration, name="concentration"))
        super().__post_init__()


@dataclass(frozen=True)
class Linearization(_RandomPlanMethod):
    """Linear scalarisation: model j minimises ``w_j . L`` for a random ``w_j ~ Dir(c)``."""

    def components(self):
        return RandomAssignment(self.concentration), GammaWeights(), WeightedSum()


@dataclass(frozen=True)
class MGDA(Method):
    """MGDA (Desideri 2012; Sener & Koltun 2018) run m times from m random starts.

    Every model serves every objective with weight 1 (:class:`~most.methods.Support` of the
    equal plan), so each run steps by ``lr`` times the min-norm element of all n gradients,
    whatever m: a model's path is that of MGDA run alone from its start."""

    max_iter: int | None = None
    tol: float | None = None

    def __post_init__(self):
        # stored as the plain numbers they were checked as (hashable, as the method is)
        if self.max_iter is not None:
            object.__setattr__(self, "max_iter", check_positive_int(self.max_iter, name="max_iter"))
        if self.tol is not None:
            object.__setattr__(self, "tol", check_positive(self.tol, name="tol"))
        super().__post_init__()

    def components(self):
        return EqualAssignment(), Support(), MinNorm(self.max_iter, self.tol)


@dataclass(frozen=True)
class WeightedMGDA(_RandomPlanMethod):
    """w-MGDA (Appendix E): MGDA on objectives reweighted by a fixed random plan."""

    def components(self):
        return RandomAssignment(self.concentration), GammaWeights(), MinNorm()
