"""The parts of :class:`most.Problem` that act on models' parameters, as bases of the class.

:class:`ParameterSpace` is where the models start and the set they stay in (``init``, ``bounds``,
``project``); :class:`Evaluations` evaluates the objectives and their derivatives at m models, by
the problem's :class:`~most.evaluators.Evaluator`; :class:`ModuleAccess` maps the flat
parameters of a problem built from a module back to the module. Each declares the fields of
:class:`~most.Problem` it reads; their methods are documented as :class:`~most.Problem`'s.
"""

from __future__ import annotations

from typing import Callable, Mapping, cast

import torch
from torch import Tensor, nn

from .._modules import ModuleLayout
from .._validation import check_has_data
from ..evaluators import Evaluator, check_weights
from .builders import Initializer, Projection, float_init

__all__ = ["ParameterSpace", "Evaluations", "ModuleAccess"]


class ParameterSpace:
    """Where a problem's models start and the set they stay in: ``init``, ``bounds`` and ``project``."""

    dim: int
    init: Tensor | Initializer | None
    project: Projection | None
    bounds: tuple[Tensor | float, Tensor | float] | None

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
            params = float_init(torch.as_tensor(self.init(n_models, generator)), what="`init(m, generator)`")
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


class Evaluations:
    """The objectives and their derivatives at m models, by the problem's evaluator."""

    dim: int
    n_objectives: int
    #: the evaluation the problem runs: set by :class:`~most.Problem` when it is made
    _evaluation: Evaluator

    @property
    def evaluation(self) -> Evaluator:
        """How the objectives are evaluated (:class:`~most.evaluators.Evaluator`): given to the
        problem (:meth:`from_datasets`), or the one of its kind (function, module, instances)."""
        return self._evaluation

    @property
    def stochastic(self) -> bool:
        """Whether evaluations given a generator draw from it: mini-batches (:meth:`from_datasets`
        with a ``batch_size``) or the masks of random layers in training mode (dropout, in
        :meth:`from_datasets` and :meth:`from_module`); without one they are exact (random
        layers from a fixed seed)."""
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

    @property
    def rows_alone(self) -> bool:
        """Whether :meth:`active_gradients` takes a selected objective's gradient from its own
        data alone (problems per instance, from datasets): selecting a few objectives then
        costs their data, not every objective's."""
        return self._evaluation.rows_alone

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
        if not isinstance(params, Tensor):
            raise TypeError(f"params must be a tensor [m, {self.dim}] (one row per model); got {type(params).__name__}.")
        if params.ndim != 2 or params.shape[1] != self.dim:
            hint = " (one model's parameters: pass params[None])" if params.shape == (self.dim,) else ""
            raise ValueError(f"params must have shape [m, {self.dim}]{hint}; got {tuple(params.shape)}.")
        if params.shape[0] == 0:
            raise ValueError(f"params has no model (shape {tuple(params.shape)}); give at least one row.")
        layout = getattr(self, "layout", None)
        if layout is not None and layout.names:
            # the flat vector's dtype: that of the module's trainable parameters, promoted as the
            # models' initial parameters are (torch.cat of them)
            dtypes = {layout.template.get_parameter(k).dtype for k in layout.names}
            dtype = dtypes.pop() if len(dtypes) == 1 else params.dtype  # mixed: any promotion is the module's
            if params.dtype != dtype:
                raise ValueError(f"params are {str(params.dtype).removeprefix('torch.')} but the module's parameters "
                                 f"are {str(dtype).removeprefix('torch.')}; convert them with params.to({dtype}).")
        return params


class ModuleAccess:
    """For a problem built from a module: its parameters by name, and modules holding them."""

    layout: ModuleLayout | None

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
        check = getattr(self, "_check_params", None)  # the shape, kind and dtype a problem's evaluations take
        if check is not None:
            params = check(params)
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
