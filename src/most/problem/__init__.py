"""Problems: n objectives as a function of one flat parameter vector.

A :class:`Problem` is the contract between a user's objectives and the solvers. Every
model is a flat vector ``theta`` of length ``dim``; the problem maps it to the vector of
``n_objectives`` losses ``L(theta) = (L_1(theta), ..., L_n(theta))``. The solvers hold the
m models as one ``[m, dim]`` tensor and evaluate all of them at once with
:func:`torch.func.vmap`, and take per-objective gradients with :func:`torch.func.jacrev`,
so the m models are advanced together rather than in a Python loop.

Three ways to build one:

* :meth:`Problem.from_function` -- ``fn(theta[d]) -> losses[n]`` written with torch ops.
* :meth:`Problem.from_module` -- an ``nn.Module`` factory and one loss callable per
  objective; each callable receives the model (as a function ``x -> output``) and returns
  a scalar loss, drawing its own mini-batch if it wants to.
* :meth:`Problem.from_instances` -- every objective is one training instance,
  ``L_i(theta) = loss(theta, x_i, y_i)``; per-instance gradients are taken one instance at a
  time (vectorised), so a model's step costs one backward pass per instance it serves.

The builders' work is in :mod:`most.problem.builders`; what a problem does with the models'
parameters (start them, keep them in the box, evaluate the objectives and their derivatives,
map them to modules) is in the bases of :class:`Problem`, in :mod:`most.problem.mixins`.

Examples:
    >>> import torch, most
    >>> centres = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    >>> problem = most.Problem.from_function(
    ...     lambda theta: ((theta - centres) ** 2).sum(-1), dim=2, n_objectives=3)
    >>> problem.loss_matrix(torch.zeros(2, 2)).shape   # [n, m]
    torch.Size([3, 2])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, cast

from torch import Tensor, nn

from .._modules import ModuleLayout
from .._validation import check_positive_int
from ..evaluators import (Evaluator, FunctionEvaluator, InstancesEvaluator, MappedEvaluator, ModuleEvaluator,
                         PerObjective, RunningStatistics, active_rows, check_weights)
from .builders import (Initializer, LossFunction, Projection, check_bounds, check_names, datasets_fields,
                               float_init, instances_fields, module_fields)
from .mixins import Evaluations, ModuleAccess, ParameterSpace

__all__ = ["Problem", "active_rows", "check_weights"]


@dataclass(frozen=True)
class Problem(ModuleAccess, Evaluations, ParameterSpace):
    """n objectives of a flat parameter vector.

    Attributes:
        fn: ``theta [dim] -> losses [n_objectives]``, written with torch operations so that
            it can be differentiated and vectorised over models.
        dim: length of the parameter vector of one model.
        n_objectives: number of objectives n.
        init: how to initialise m models: a tensor ``[dim]`` (every model starts there),
            a tensor ``[m, dim]``, or a callable ``(m, generator) -> [m, dim]``. ``None``
            draws each coordinate from N(0, 1) with the solver's seed (uniformly in the
            box when ``bounds`` are given). An integer tensor is converted to the default
            float dtype (``torch.get_default_dtype()``); a bool or complex one is refused.
        project: optional map ``[m, dim] -> [m, dim]`` applied after every step. Identity
            when ``None``.
        bounds: optional box ``(lower, upper)`` (scalars or ``[dim]`` tensors). Models start
            inside it and are clamped to it after every step; before each step, gradient
            components that push a coordinate held at a bound further out are zeroed
            (projected gradients), so the min-norm direction is computed in the box's
            tangent cone instead of being pulled against a wall.
        names: optional objective names, used in reports and error messages.
        vectorize: evaluate the m models with :func:`torch.func.vmap` (default). Set
            ``False`` for functions that vmap cannot trace (they are then evaluated in a
            loop over models).
        metadata: free-form information about the problem (ground truth, data, ...).
    """

    fn: LossFunction
    dim: int
    n_objectives: int
    init: Tensor | Initializer | None = None
    project: Projection | None = None
    names: tuple[str, ...] | None = None
    vectorize: bool = True
    bounds: tuple[Tensor | float, Tensor | float] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    layout: ModuleLayout | None = field(default=None, repr=False)
    evaluator: "Evaluator | None" = field(default=None, repr=False)
    instance_loss: Callable[..., Tensor] | None = field(default=None, repr=False)
    instances: tuple[Tensor, ...] | None = field(default=None, repr=False)
    #: each model's running statistics of batch normalisation, for a module with such layers in
    #: training mode (:meth:`from_module`); ``None`` otherwise
    statistics: RunningStatistics | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ValueError(f"`fn` must be callable theta[dim] -> losses[n]; got {type(self.fn).__name__}.")
        object.__setattr__(self, "dim", check_positive_int(self.dim, name="dim"))
        try:
            n = check_positive_int(self.n_objectives, name="n_objectives")
        except ValueError:
            raise ValueError(
                f"`n_objectives` must be an int >= 1; got {self.n_objectives!r}. A problem needs at least one objective."
            ) from None
        object.__setattr__(self, "n_objectives", n)
        if isinstance(self.init, nn.Module) or (self.init is not None and not isinstance(self.init, Tensor)
                                                and not callable(self.init)):
            raise TypeError(
                "`init` must be a tensor [dim] or [m, dim] of initial parameters, a callable "
                f"(m, generator) -> [m, dim], or None; got {type(self.init).__name__}."
            )
        if isinstance(self.init, Tensor):
            object.__setattr__(self, "init", float_init(self.init))
        if self.project is not None and not callable(self.project):
            raise TypeError(
                "`project` must be a callable params [m, dim] -> [m, dim] applied after every step, or None; "
                f"got {type(self.project).__name__} {self.project!r}."
            )
        object.__setattr__(self, "names", check_names(self.names))
        if self.names is not None and len(self.names) != self.n_objectives:
            raise ValueError(
                f"`names` has {len(self.names)} entries but there are {self.n_objectives} objectives; "
                "give one name per objective."
            )
        if self.bounds is not None:
            check_bounds(self.bounds, self.dim, init_given=self.init is not None)
        # declared on Evaluations; set past the frozen dataclass's __setattr__
        object.__setattr__(self, "_evaluation", self._evaluation_of_kind())

    def _evaluation_of_kind(self) -> Evaluator:
        """The given ``evaluator`` (checked), or the evaluation of the problem's kind."""
        if self.evaluator is not None:
            if not isinstance(self.evaluator, Evaluator):
                raise TypeError(f"`evaluator` must be a most.evaluators.Evaluator; got {type(self.evaluator).__name__}.")
            if self.evaluator.n_objectives != self.n_objectives:
                raise ValueError(f"`evaluator` evaluates {self.evaluator.n_objectives} objectives; the problem has "
                                 f"{self.n_objectives}.")
            return self.evaluator
        if self.instances is not None:
            # from_instances sets instance_loss with instances
            loss = cast("Callable[..., Tensor]", self.instance_loss)
            return InstancesEvaluator(loss, self.instances, self.dim, self.fn, self.vectorize)
        if isinstance(self.fn, PerObjective):
            return ModuleEvaluator(self.fn, self.dim, self.n_objectives, self.vectorize)
        return FunctionEvaluator(self.fn, self.dim, self.n_objectives, self.vectorize)

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_function(
        cls,
        fn: LossFunction,
        dim: int,
        n_objectives: int,
        init: Tensor | Initializer | None = None,
        *,
        project: Projection | None = None,
        names: Sequence[str] | None = None,
        vectorize: bool = True,
        bounds: tuple[Tensor | float, Tensor | float] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> "Problem":
        """A problem given as ``fn(theta[dim]) -> losses[n_objectives]``."""
        return cls(
            fn=fn,
            dim=dim,
            n_objectives=n_objectives,
            init=init,
            project=project,
            names=check_names(names),
            vectorize=vectorize,
            bounds=bounds,
            metadata=dict(metadata or {}),
        )

    @classmethod
    def from_module(
        cls,
        model: Callable[[], nn.Module],
        objectives: Sequence[Callable[[Callable[..., Tensor]], Tensor]],
        *,
        names: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        vectorize: bool = True,
    ) -> "Problem":
        """A problem over the parameters of an ``nn.Module``.

        Args:
            model: a factory ``() -> nn.Module``. It is called once for the template
                (architecture, buffers) and once per model for the initial parameters,
                under the solver's seed.
            objectives: one callable per objective, ``objective(forward) -> scalar``,
                where ``forward(*inputs)`` runs the module with the parameters of the
                model being evaluated (keyword inputs, ``forward(x, mask=m)``, go to the
                module's ``forward`` too). A callable may draw a fresh mini-batch each time it
                is called; the same batch is used for all m models of one evaluation.
            vectorize: evaluate the m models with :func:`torch.func.vmap` (default); ``False``
                evaluates them one after another, for modules with operations vmap cannot
                batch (recurrent layers such as ``nn.LSTM``).

        Parameters with ``requires_grad=False`` are not trained (they keep the template's
        values). Random layers in training mode (dropout) draw their masks from torch's
        generator, seeded for each evaluation from the run's generator (a fixed seed without
        it), so a run with them repeats under its seed and resumes from checkpoints. Mini-batches
        that the callables draw themselves come from torch's generator: seed it
        (``torch.manual_seed``) before a fit to repeat it, or use :meth:`from_datasets` with a
        ``batch_size``, whose batches come from the run's generator. Batch normalisation in
        training mode normalises each forward pass by its batch's statistics, and every model
        keeps its own running statistics, updated once per round over the objectives it serves
        (:attr:`Result.statistics`; ``result.to_modules()`` returns modules holding them); a
        layer in evaluation mode keeps its stored statistics.

        Examples:
            >>> import torch, most
            >>> from torch import nn
            >>> xs = [torch.randn(8, 3) for _ in range(4)]
            >>> ys = [x.sum(1, keepdim=True) * (i + 1) for i, x in enumerate(xs)]
            >>> objectives = [lambda f, x=x, y=y: ((f(x) - y) ** 2).mean() for x, y in zip(xs, ys)]
            >>> problem = most.Problem.from_module(lambda: nn.Linear(3, 1), objectives)
            >>> problem.dim, problem.n_objectives
            (4, 4)
        """
        return cls(**module_fields(model, objectives, names=names, metadata=metadata, vectorize=vectorize))

    @classmethod
    def from_datasets(
        cls,
        model: Callable[[], nn.Module],
        datasets: Sequence[Sequence[Tensor]] | Sequence[Tensor],
        loss: Callable[..., Tensor],
        *,
        objective_index: Tensor | None = None,
        n_objectives: int | None = None,
        batch_size: int | None = None,
        names: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> "Problem":
        r"""Many objectives with their own data: objective i is a model's mean loss on dataset i.

        .. math::

            L_i(\theta) = \frac{1}{|D_i|} \sum_{(x, y) \in D_i} \ell(f_\theta(x), y)

        The common case of many tasks, domains or clients, each with a dataset of its own (of any
        length). Every objective at every model is one vectorised pass over the stacked rows
        (the m models at once, the per-objective means by a segment sum), where
        :meth:`from_module` calls one Python function per objective: the same losses, many
        times faster when the objectives are many.

        Args:
            model: a factory ``() -> nn.Module`` (as in :meth:`from_module`). Parameters with
                ``requires_grad=False`` stay as the template has them and are not trained.
                Batch normalisation must be in evaluation mode (the objectives' rows are
                evaluated together, so batch statistics would mix them; :meth:`from_module`
                keeps one batch per objective). Random layers in training mode (dropout) draw
                their masks from a seed each evaluation draws from the run's generator (a fixed
                one without it): a run with them is reproducible and resumes from checkpoints.
            datasets: one tuple of tensors per objective, ``(inputs, *targets)``, each with one
                row per sample (lengths may differ between objectives); or, with
                ``objective_index``, one tuple of stacked tensors of all objectives' rows.
            loss: ``loss(output, *targets) -> [rows]``, one loss per row (not reduced), e.g.
                ``lambda out, y: F.cross_entropy(out, y, reduction="none")``. A class label of
                -100 (torch's ``ignore_index``) is accepted: such a row's loss is 0 and it still
                counts in its objective's mean.
            objective_index: ``[N]`` integers, the objective of each stacked row.
            n_objectives: with ``objective_index``: n (default: its largest value + 1).
            batch_size: rows per objective drawn without replacement at each evaluation of a run
                (from the run's generator: reproducible, resumed from checkpoints); ``None``
                uses every row. Evaluations without a generator (the final losses, selection)
                use every row.
            names: optional objective names.
            metadata: free-form information.

        Examples:
            >>> import torch, most
            >>> from torch import nn
            >>> tasks = [(torch.randn(n, 3), torch.randn(n, 1)) for n in (20, 35, 12)]
            >>> problem = most.Problem.from_datasets(
            ...     lambda: nn.Linear(3, 1), tasks, lambda out, y: ((out - y) ** 2).sum(-1))
            >>> problem.n_objectives, problem.dim, problem.loss_matrix(torch.zeros(2, 4)).shape
            (3, 4, torch.Size([3, 2]))
        """
        return cls(**datasets_fields(model, datasets, loss, objective_index=objective_index,
                                     n_objectives=n_objectives, batch_size=batch_size, names=names,
                                     metadata=metadata))

    @classmethod
    def from_instances(
        cls,
        loss: Callable[..., Tensor],
        data: Tensor | Sequence[Tensor],
        dim: int,
        init: Tensor | Initializer | None = None,
        *,
        names: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> "Problem":
        """A problem whose objectives are single instances (paper Section 6.4).

        ``L_i(theta) = loss(theta, *row_i)`` where ``row_i`` is the i-th entry of every tensor
        in ``data`` (all share the leading dimension n). ``loss`` takes one instance, written
        with torch operations, and returns a scalar. The losses of all instances come from one
        vectorised call, and the gradients of the instances a model serves from one vectorised
        backward pass per instance (:func:`torch.func.grad`), instead of the n reverse passes
        through the whole batch that a generic :meth:`from_function` Jacobian takes.

        Examples:
            >>> import torch, most
            >>> x = torch.randn(6, 3); y = x @ torch.tensor([1.0, -2.0, 0.5])
            >>> problem = most.Problem.from_instances(
            ...     lambda theta, xi, yi: (xi @ theta - yi) ** 2, (x, y), dim=3)
            >>> problem.n_objectives, problem.loss_matrix(torch.zeros(2, 3)).shape
            (6, torch.Size([6, 2]))
        """
        return cls(**instances_fields(loss, data, dim, init, names=names, metadata=metadata))

    # ------------------------------------------------------------------ derived problems
    def with_objectives(self, weights: Tensor, *, names: Sequence[str] | None = None, **metadata: Any) -> "Problem":
        """A problem whose objectives are ``weights @ L(theta)`` (``weights``: [n', n])."""
        if weights.ndim != 2 or weights.shape[1] != self.n_objectives:
            raise ValueError(
                f"`weights` must have shape [n', {self.n_objectives}]; got {tuple(weights.shape)}."
            )
        return self.map_objectives(lambda losses: weights.to(losses) @ losses, int(weights.shape[0]),
                                   names=names, **metadata)

    def kept_evaluator(self) -> Evaluator | None:
        """The evaluator a problem derived from this one (new objectives, a penalty) must go
        through: the one given to it (:meth:`from_datasets`), or its own when its evaluations
        draw from the run's generator (:attr:`stochastic`: random layers of a :meth:`from_module`
        model); ``None`` when the derived problem's function evaluates it alike."""
        if self.evaluator is not None:
            return self.evaluator
        return self._evaluation if self._evaluation.stochastic else None

    def map_objectives(
        self, transform: Callable[[Tensor], Tensor], n_objectives: int, *, names: Sequence[str] | None = None,
        **metadata: Any,
    ) -> "Problem":
        """A problem whose objectives are ``transform(L(theta))`` (``[n] -> [n_objectives]``).

        A problem with an evaluator of its own (:meth:`from_datasets`), or whose evaluations
        draw from the run's generator (a :meth:`from_module` model with dropout), keeps it: the
        new objectives are evaluated through its passes (its mini-batches and random layers,
        drawn from the run's generator, and its chunks; :class:`~most.evaluators.MappedEvaluator`)."""
        base = self.fn
        kept = self.kept_evaluator()

        def fn(theta: Tensor) -> Tensor:
            return transform(base(theta))

        return Problem(
            fn=fn,
            dim=self.dim,
            n_objectives=n_objectives,
            init=self.init,
            project=self.project,
            names=check_names(names),
            vectorize=self.vectorize,
            bounds=self.bounds,
            metadata={**self.metadata, **metadata},
            layout=self.layout,
            evaluator=None if kept is None else MappedEvaluator(kept, transform, n_objectives),
            statistics=None if self.statistics is None else self.statistics.everywhere(),
        )

