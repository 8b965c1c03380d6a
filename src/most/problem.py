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

import torch
from torch import Tensor, nn

from ._modules import BATCH_STATISTICS, ModuleLayout, batch_statistics_layers, check_factory
from ._validation import as_tensor, check_has_data, check_positive_int
from .evaluators import (DatasetsEvaluator, Evaluator, FunctionEvaluator, InstancesEvaluator, ModuleEvaluator,
                         PerObjective, RunningStatistics, active_rows, check_batch_size, check_loss, check_weights,
                         instance_losses, objective_loss, stack_datasets, tracked)

__all__ = ["Problem", "active_rows", "check_weights"]

LossFunction = Callable[[Tensor], Tensor]
Initializer = Callable[[int, torch.Generator], Tensor]
Projection = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Problem:
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
            object.__setattr__(self, "init", _float_init(self.init))
        if self.project is not None and not callable(self.project):
            raise TypeError(
                "`project` must be a callable params [m, dim] -> [m, dim] applied after every step, or None; "
                f"got {type(self.project).__name__} {self.project!r}."
            )
        object.__setattr__(self, "names", _check_names(self.names))
        if self.names is not None and len(self.names) != self.n_objectives:
            raise ValueError(
                f"`names` has {len(self.names)} entries but there are {self.n_objectives} objectives; "
                "give one name per objective."
            )
        if self.bounds is not None:
            _check_bounds(self.bounds, self.dim, init_given=self.init is not None)
        self._evaluation: Evaluator  # declared for the type checker; set past the frozen dataclass's __setattr__
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
            names=_check_names(names),
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
    ) -> "Problem":
        """A problem over the parameters of an ``nn.Module``.

        Args:
            model: a factory ``() -> nn.Module``. It is called once for the template
                (architecture, buffers) and once per model for the initial parameters,
                under the solver's seed.
            objectives: one callable per objective, ``objective(forward) -> scalar``,
                where ``forward(*inputs)`` runs the module with the parameters of the
                model being evaluated. A callable may draw a fresh mini-batch each time it
                is called; the same batch is used for all m models of one evaluation.

        Parameters with ``requires_grad=False`` are not trained (they keep the template's
        values). Batch normalisation in training mode normalises each forward pass by its
        batch's statistics, and every model keeps its own running statistics, updated once per
        round over the objectives it serves (:attr:`Result.statistics`; ``result.to_modules()``
        returns modules holding them); a layer in evaluation mode keeps its stored statistics.

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
        objectives = _check_module_objectives(model, objectives)
        names = _check_names(names)
        labels = list(names) if names is not None else None
        layout = ModuleLayout(model)

        def forward_of(theta: Tensor) -> Callable[..., Tensor]:
            def forward(*inputs: Tensor) -> Tensor:
                return layout.forward(theta, *inputs)

            return forward

        def losses(theta: Tensor) -> Tensor:
            forward, differentiated = forward_of(theta), tracked(theta)
            return torch.stack([objective_loss(obj(forward), k, labels, differentiated)
                                for k, obj in enumerate(objectives)])

        def one(k: int, theta: Tensor) -> Tensor:
            return objective_loss(objectives[k](forward_of(theta)), k, labels, tracked(theta))

        fn = PerObjective(losses, one)
        statistics = RunningStatistics(layout, objectives) if layout.statistics_names else None
        return cls(fn=fn, dim=layout.dim, n_objectives=len(objectives), init=layout.init, names=names,
                   metadata=dict(metadata or {}), layout=layout, statistics=statistics)

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
                keeps one batch per objective).
            datasets: one tuple of tensors per objective, ``(inputs, *targets)``, each with one
                row per sample (lengths may differ between objectives); or, with
                ``objective_index``, one tuple of stacked tensors of all objectives' rows.
            loss: ``loss(output, *targets) -> [rows]``, one loss per row (not reduced), e.g.
                ``lambda out, y: F.cross_entropy(out, y, reduction="none")``.
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
        if not callable(loss):
            raise TypeError("`loss` must be callable loss(output, *targets) -> [rows], one loss per row.")
        check_factory(model)
        data, owner, n = stack_datasets(datasets, objective_index, n_objectives)
        names = _check_names(names)
        if names is not None and len(names) != n:
            raise ValueError(f"`names` has {len(names)} entries but there are {n} objectives; give one name per objective.")

        def label(i: int) -> str:
            return f"objective {i}" + (f" ({names[i]!r})" if names is not None else "")

        layout = ModuleLayout(model)
        batch_layers = batch_statistics_layers(layout.template)
        if batch_layers:
            layer = layout.template.get_submodule(batch_layers[0])
            raise ValueError(BATCH_STATISTICS.format(
                where=f"The module's layer {batch_layers[0]!r} ({type(layer).__name__})"))
        counts = torch.bincount(owner.cpu(), minlength=n)
        batch_size = check_batch_size(batch_size, counts, label)
        evaluator = DatasetsEvaluator(layout, data, owner, n, loss, batch_size)
        check_loss(evaluator, torch.cat([p.detach().reshape(-1) for p in
                                         (layout.template.get_parameter(k) for k in layout.names)]), label)
        every_row = evaluator.all

        def fn(theta: Tensor) -> Tensor:  # exact losses of one model, for code that calls fn directly
            return evaluator.mean_losses(theta, every_row)

        return cls(fn=fn, dim=layout.dim, n_objectives=n, init=layout.init, names=names,
                   metadata=dict(metadata or {}), layout=layout, evaluator=evaluator)

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
        if not callable(loss):
            raise ValueError("`loss` must be callable (theta[dim], *instance) -> scalar.")
        data = (data,) if isinstance(data, Tensor) else tuple(data)
        if not data or not all(isinstance(t, Tensor) for t in data):
            raise ValueError("`data` must be a tensor or a sequence of tensors with one row per instance.")
        for k, t in enumerate(data):
            check_has_data(t, name="data" if len(data) == 1 else f"data[{k}]")
        sizes = {int(t.shape[0]) if t.ndim else 0 for t in data}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(
                f"Every tensor in `data` needs the same leading dimension n >= 1 (one row per instance); "
                f"got leading sizes {sorted(sizes)}."
            )
        (n,) = sizes
        fn = instance_losses(loss, data)

        return cls(
            fn=fn,
            dim=dim,
            n_objectives=n,
            init=init,
            names=_check_names(names),
            metadata=dict(metadata or {}),
            instance_loss=loss,
            instances=data,
        )

    # ------------------------------------------------------------------ evaluation
    def initial_params(self, n_models: int, generator: torch.Generator) -> Tensor:
        """The ``[n_models, dim]`` starting parameters."""
        if self.init is None and self.bounds is not None:
            lo, hi = self._bounds_like(torch.zeros(self.dim))
            params = lo + (hi - lo) * torch.rand(n_models, self.dim, generator=generator)
        elif self.init is None:
            params = torch.randn(n_models, self.dim, generator=generator)
        elif isinstance(self.init, Tensor):
            if self.init.shape == (self.dim,):
                params = self.init.detach().clone().expand(n_models, self.dim).clone()
            elif self.init.shape == (n_models, self.dim):
                params = self.init.detach().clone()
            else:
                raise ValueError(
                    f"`init` must have shape [{self.dim}] or [{n_models}, {self.dim}]; got {tuple(self.init.shape)}."
                )
        else:
            params = _float_init(torch.as_tensor(self.init(n_models, generator)), what="`init(m, generator)`")
            if params.shape != (n_models, self.dim):
                raise ValueError(
                    f"`init(m, generator)` must return shape [{n_models}, {self.dim}]; got {tuple(params.shape)}."
                )
        return self.apply_projection(params, check_finite=True)

    def apply_projection(self, params: Tensor, *, check_finite: bool = False) -> Tensor:
        """Clamps to ``bounds`` (if any), then applies ``project`` (if any).

        What ``project`` returns is checked: a floating tensor of the shape it was given (one row
        per model); with ``check_finite`` (the initial parameters), also finite."""
        if self.bounds is not None:
            lo, hi = self._bounds_like(params)
            params = torch.maximum(torch.minimum(params, hi), lo)
        if self.project is None:
            return params
        out = self.project(params)
        shape = list(params.shape)
        if not isinstance(out, Tensor):
            raise TypeError(
                f"`project` must return a tensor of the shape it was given, [m, dim] = {shape}; got "
                f"{type(out).__name__}." + (" Did it forget to `return` the projected parameters?" if out is None else "")
            )
        check_has_data(out, name="project(params)")
        if out.shape != params.shape:
            raise ValueError(
                f"`project` must return the shape it was given, [m, dim] = {shape} (one row per model); got "
                f"{list(out.shape)}. Project every row; do not add, drop or reshape models."
            )
        if not out.is_floating_point():
            raise TypeError(
                f"`project` must return floating-point parameters; got dtype {out.dtype}. Keep the dtype of its "
                f"input ({params.dtype}), e.g. `x.round()` rather than `x.long()`."
            )
        if check_finite and not bool(torch.isfinite(out).all()):
            raise ValueError(
                "`project` returned NaN or inf for finite initial parameters; it must map finite parameters to "
                "finite ones. Check the function given as `project`."
            )
        return out

    def tangent_jacobian(self, params: Tensor, jacobian: Tensor) -> Tensor:
        """Zeroes gradient components that would push a coordinate held at a bound outwards.

        A step is ``theta - lr * d``: at a lower bound a positive component of a gradient
        asks to decrease the coordinate further, at an upper bound a negative one asks to
        increase it. ``jacobian`` is ``[m, n, dim]``; returned unchanged without ``bounds``.
        """
        if self.bounds is None:
            return jacobian
        lo, hi = self._bounds_like(params)
        at_lo = (params <= lo).unsqueeze(1)  # [m, 1, d]
        at_hi = (params >= hi).unsqueeze(1)
        blocked = (at_lo & (jacobian > 0)) | (at_hi & (jacobian < 0))
        return jacobian.masked_fill(blocked, 0.0)

    def _bounds_like(self, params: Tensor) -> tuple[Tensor, Tensor]:
        lo, hi = cast("tuple[Tensor | float, Tensor | float]", self.bounds)  # called only with bounds
        return (torch.as_tensor(lo).to(params).expand(params.shape[-1]),
                torch.as_tensor(hi).to(params).expand(params.shape[-1]))

    @property
    def evaluation(self) -> Evaluator:
        """How the objectives are evaluated (:class:`~most.evaluators.Evaluator`): given to the
        problem (:meth:`from_datasets`), or the one of its kind (function, module, instances)."""
        return self._evaluation

    @property
    def stochastic(self) -> bool:
        """Whether evaluations given a generator estimate the objectives on mini-batches drawn from
        it (:meth:`from_datasets` with a ``batch_size``); without one they are exact."""
        return self._evaluation.stochastic

    def loss_matrix(self, params: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        """The loss matrix ``L[i, j] = L_i(theta_j)``, shape ``[n, m]`` (paper Eq. 2's cost).

        ``generator``: the run's, from which a :attr:`stochastic` problem draws its mini-batches
        (the other problems ignore it)."""
        return self._evaluation.loss_matrix(self._check_params(params), generator=generator)

    def jacobian(self, params: Tensor, *, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Losses ``[n, m]`` and per-objective gradients ``[m, n, dim]`` at every model."""
        return self._evaluation.jacobian(self._check_params(params), generator=generator)

    def weighted_gradients(self, params: Tensor, weights: Tensor | Callable[[Tensor], Tensor], *,
                           return_weights: bool = False, generator: torch.Generator | None = None):
        """Losses ``[n, m]`` and, for each model, the gradient of its weighted sum of the losses,
        ``sum_i weights[j, i] * grad L_i(theta_j)``, ``[m, dim]``.

        One forward and one reverse pass over the models (a ``vjp`` with the weights as
        cotangent), whatever the number of objectives a model serves: a linear combination of
        the gradients without any per-objective gradient. ``weights`` is a tensor ``[m, n]``, or
        a function of the model-major losses at ``params`` (``[m, n]``, detached, from the same
        forward pass) that returns it -- for coefficients that depend on the losses, such as
        TCH-Set's. ``return_weights=True`` also returns the weights used (a third element).
        """
        params = self._check_params(params)
        m, n = params.shape[0], self.n_objectives

        if not callable(weights):
            check_weights(weights, m, n)
        values, pullback = self.losses_with_pullback(params, generator=generator)
        w = check_weights(weights(values.T) if callable(weights) else weights, m, n)
        out = values, pullback(w)
        return (*out, w) if return_weights else out

    def losses_with_pullback(self, params: Tensor, *, generator: torch.Generator | None = None
                             ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        """The loss matrix ``[n, m]`` and the reverse pass from it: ``pullback(w)`` with ``w [m, n]``
        returns ``sum_i w[j, i] * grad L_i(theta_j)``, ``[m, dim]``, from the same forward pass.

        :meth:`weighted_gradients` is this with the weights known when the losses are; the round
        loop calls it directly when the weights come from a plan of these losses, so a round of a
        linear combiner is one forward and one reverse pass. The forward's graph lives until the
        pullback is called (once) or dropped. Problems given per instance
        (:meth:`from_instances`) differentiate only the instances with a nonzero weight instead.
        """
        params = self._check_params(params)
        m, n = params.shape[0], self.n_objectives
        values, pullback = self._evaluation.losses_with_pullback(params, generator=generator)

        def checked(w: Tensor) -> Tensor:
            return pullback(check_weights(w, m, n))

        return values, checked

    def active_jacobian(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                        ) -> tuple[Tensor, Tensor]:
        """Losses ``[n, m]`` and the gradients of selected objectives only, ``[m, k, dim]``.

        ``rows [m, k]`` holds, for each model, the indices of the objectives whose gradients
        are wanted (row ``j`` of the result's ``[j, r]`` is ``grad L_{rows[j, r]}(theta_j)``).
        One reverse pass per selected objective (``vjp`` with one-hot cotangents, vectorised in
        chunks), or, when the parameters are fewer than the rows (``dim < k``), one forward pass
        per parameter (``jvp`` with the basis vectors as tangents); either way memory is
        ``O(m k dim)`` instead of the ``O(m n dim)`` of :meth:`jacobian` (and its ``n x n``
        identity of cotangents): a model never holds the gradients of objectives it does not
        serve. Problems built per objective, per instance or from datasets take each row from
        that objective alone.
        """
        params = self._check_params(params)
        self._check_rows(params, rows)
        return self._evaluation.active_jacobian(params, rows, generator=generator)

    def active_gradients(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        """The gradients of :meth:`active_jacobian` without the losses, ``[m, k, dim]``.

        The round loop calls this for a step taken at the parameters where it has just
        evaluated the loss matrix. For :meth:`from_instances` problems it skips the forward
        pass over the instances a model does not serve; for the others it equals
        ``active_jacobian(params, rows)[1]`` (same computation, same random draws).
        """
        params = self._check_params(params)
        self._check_rows(params, rows)
        return self._evaluation.active_gradients(params, rows, generator=generator)

    def forward_rows(self, k: int) -> bool:
        """Whether :meth:`active_jacobian` computes ``k`` selected rows a model in forward mode:
        passes (one per parameter, ``dim < k``) that each give the derivatives of all ``n``
        losses, so that it equals :meth:`jacobian` cut to the rows, value for value, at the same
        cost. Problems given per objective (``k, dim > 1``), per instance or from datasets take
        each row from its objective alone: ``False``."""
        return self._evaluation.forward_rows(k)

    def jacobian_first(self, n_models: int) -> bool:
        """Whether a round of ``n_models`` models whose combiner reads only the served objectives'
        gradients should evaluate :meth:`jacobian` instead of :meth:`loss_matrix`: when the served
        rows are sure to come from forward-mode passes (:meth:`forward_rows`; some model serves at
        least n / m objectives), whose derivatives of every objective also give the losses, and
        the Jacobian fits the evaluation's memory budget. One evaluation instead of two."""
        return self._evaluation.jacobian_first(n_models)

    def _check_rows(self, params: Tensor, rows: Tensor) -> None:
        if rows.ndim != 2 or rows.shape[0] != params.shape[0]:
            raise ValueError(f"rows must have shape [m={params.shape[0]}, k]; got {tuple(rows.shape)}.")

    def _check_params(self, params: Tensor) -> Tensor:
        if params.ndim != 2 or params.shape[1] != self.dim:
            raise ValueError(f"params must have shape [m, {self.dim}]; got {tuple(params.shape)}.")
        return params

    def coordinates(self, name: str) -> tuple[int, int]:
        """For :meth:`from_module` problems: the range ``(start, stop)`` of the flat parameter
        vector that holds parameter ``name`` of the module; ``"last"`` is its last parameter
        (e.g. the final layer's bias). For :class:`~most.methods.MinNorm`'s ``coordinates``.

        Examples:
            >>> import torch, most
            >>> from torch import nn
            >>> net = lambda: nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
            >>> problem = most.Problem.from_module(net, [lambda f: f(torch.ones(1, 3)).sum()])
            >>> problem.coordinates("last"), problem.coordinates("0.bias")
            ((24, 26), (12, 16))
            >>> combiner = most.MinNorm(coordinates=problem.coordinates("last"))  # the paper's speed-up
        """
        if self.layout is None:
            raise ValueError("coordinates() needs a problem built with Problem.from_module or "
                             "Problem.from_datasets (from a module).")
        return self.layout.coordinates(name)

    def to_modules(self, params: Tensor, statistics: Mapping[str, Tensor] | None = None) -> list[nn.Module]:
        """For problems built from a module (:meth:`from_module`, :meth:`from_datasets`): one
        ``nn.Module`` per row of ``params``, holding its trainable parameters (frozen ones and
        buffers as in the template) and, given ``statistics`` (:attr:`Result.statistics`), its
        running statistics of batch normalisation. ``result.to_modules()`` passes both."""
        if self.layout is None:
            raise ValueError("to_modules() needs a problem built with Problem.from_module or "
                             "Problem.from_datasets (from a module).")
        return self.layout.to_modules(params, None if statistics is None else dict(statistics))

    @property
    def template(self) -> nn.Module | None:
        """The template module of a problem built from a module, else ``None``."""
        return None if self.layout is None else self.layout.template

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """For problems built from a module: the trainable parameters held by ``theta [dim]``, by name."""
        if self.layout is None:
            raise ValueError("unflatten() needs a problem built with Problem.from_module or "
                             "Problem.from_datasets (from a module).")
        return self.layout.unflatten(theta)

    def with_objectives(self, weights: Tensor, *, names: Sequence[str] | None = None, **metadata: Any) -> "Problem":
        """A problem whose objectives are ``weights @ L(theta)`` (``weights``: [n', n])."""
        if weights.ndim != 2 or weights.shape[1] != self.n_objectives:
            raise ValueError(
                f"`weights` must have shape [n', {self.n_objectives}]; got {tuple(weights.shape)}."
            )
        return self.map_objectives(lambda losses: weights.to(losses) @ losses, int(weights.shape[0]),
                                   names=names, **metadata)

    def map_objectives(
        self, transform: Callable[[Tensor], Tensor], n_objectives: int, *, names: Sequence[str] | None = None,
        **metadata: Any,
    ) -> "Problem":
        """A problem whose objectives are ``transform(L(theta))`` (``[n] -> [n_objectives]``)."""
        base = self.fn

        def fn(theta: Tensor) -> Tensor:
            return transform(base(theta))

        return Problem(
            fn=fn,
            dim=self.dim,
            n_objectives=n_objectives,
            init=self.init,
            project=self.project,
            names=_check_names(names),
            vectorize=self.vectorize,
            bounds=self.bounds,
            metadata={**self.metadata, **metadata},
            layout=self.layout,
            statistics=None if self.statistics is None else self.statistics.everywhere(),
        )


def _check_names(names) -> tuple[str, ...] | None:
    """``names`` as a tuple of strings (their count is checked against the objectives by
    :class:`Problem`); a single string or entries that are not strings are refused."""
    if names is None:
        return None
    if isinstance(names, (str, bytes)):
        raise ValueError(
            f"`names` must be a sequence of strings, one per objective; got the single string {names!r}. "
            "Pass a list, e.g. `names=['loss_a', 'loss_b']`."
        )
    try:
        names = tuple(names)
    except TypeError:
        raise ValueError(
            f"`names` must be a sequence of strings, one per objective; got {type(names).__name__}."
        ) from None
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise ValueError(
                f"`names` must hold strings; entry {i} is {name!r} ({type(name).__name__}). Convert them, "
                "e.g. `names=[str(x) for x in names]`."
            )
    return names


def _check_bounds(bounds, dim: int, *, init_given: bool) -> None:
    """Checks a box ``(lower, upper)``: two numbers or ``[dim]`` tensors, no NaN, lower <= upper;
    infinite bounds only with an ``init`` (models are otherwise drawn uniformly in the box)."""
    got = f"got {bounds!r}" if isinstance(bounds, (int, float, str, bytes)) else f"got {type(bounds).__name__}"
    pair = None
    if not isinstance(bounds, (str, bytes, Mapping)):
        try:
            pair = list(bounds)
        except TypeError:
            pass
    if pair is None or len(pair) != 2:
        raise ValueError(
            "`bounds` must be a pair (lower, upper) of numbers or tensors of shape "
            f"[{dim}], e.g. `bounds=(0.0, 1.0)`; {got}" + (f" with {len(pair)} entries" if pair is not None else "")
            + "."
        )
    sides = []
    for i, (side, b) in enumerate(zip(("lower", "upper"), pair)):
        name = f"bounds[{i}]"
        if isinstance(b, (str, bytes, bool)) or (isinstance(b, Tensor) and b.dtype == torch.bool):
            raise ValueError(
                f"`{name}` (the {side} bound) must be a number or a tensor of shape [{dim}]; got {b!r}"
                + (" (a str; pass a number, not a string)." if isinstance(b, str) else ".")
            )
        t = as_tensor(b, name=name).detach().to("cpu", torch.float64)
        if not (t.ndim <= 1 and t.numel() == 1) and tuple(t.shape) != (dim,):
            raise ValueError(
                f"`{name}` (the {side} bound) must be a number or a tensor of shape [{dim}] (one per "
                f"coordinate); got shape {list(t.shape)}."
            )
        if bool(t.isnan().any()):
            raise ValueError(f"`{name}` (the {side} bound) contains NaN; bounds must be numbers (inf for no bound).")
        sides.append(t.reshape(-1).expand(dim))
    lo, hi = sides
    if bool((lo > hi).any()):
        k = int((lo > hi).nonzero()[0])
        raise ValueError(
            f"`bounds` must satisfy lower <= upper in every coordinate; coordinate {k} has lower "
            f"{float(lo[k]):.6g} > upper {float(hi[k]):.6g}."
        )
    if not init_given and not bool(torch.isfinite(lo).all() and torch.isfinite(hi).all()):
        raise ValueError(
            "`bounds` has an infinite bound and no `init` is given: models are drawn uniformly in the box, "
            "which needs finite bounds. Give finite bounds or an `init`."
        )


def _check_module_objectives(model, objectives) -> list:
    """:meth:`Problem.from_module`'s ``model`` (a factory) and ``objectives`` (callables) checked;
    the objectives as a list."""
    check_factory(model)
    if isinstance(objectives, nn.Module) or callable(objectives):
        raise TypeError(
            "`objectives` must be a sequence of callables, one per objective, e.g. `[loss_0, loss_1]`; "
            f"got a single {type(objectives).__name__}."
        )
    objectives = list(objectives)
    if not objectives:
        raise ValueError("`objectives` is empty: a problem needs at least one objective.")
    for k, obj in enumerate(objectives):
        if not callable(obj):
            raise TypeError(
                f"objective {k} must be a callable objective(forward) -> scalar loss; got {type(obj).__name__}."
            )
    return objectives


def _float_init(init: Tensor, what: str = "`init`") -> Tensor:
    """Initial parameters as a floating tensor: integers are converted to the default float dtype;
    bool and complex tensors and non-finite values are refused."""
    if init.dtype == torch.bool or init.is_complex():
        raise TypeError(
            f"{what} must hold real initial parameters; got dtype {init.dtype}. Pass a float tensor, "
            "e.g. `torch.zeros(dim)`."
        )
    if not init.is_floating_point():
        init = init.to(torch.get_default_dtype())
    check_has_data(init, name=what.strip("`"))
    if not bool(torch.isfinite(init).all()):
        raise ValueError(f"{what} contains NaN or inf; initial parameters must be finite.")
    return init
