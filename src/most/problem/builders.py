"""The fields of the problems :class:`most.Problem`'s builders make, and the checks of its fields.

:meth:`~most.Problem.from_module`, :meth:`~most.Problem.from_datasets` and
:meth:`~most.Problem.from_instances` return ``cls(**fields)`` with the fields built here from
their arguments (documented on those methods). The checks of a problem's own fields
(:func:`check_names`, :func:`check_bounds`, :func:`float_init`) are here as well, so that the
builders and :class:`~most.Problem` apply the same ones. This module does not import
:mod:`most.problem`, which imports it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from .._modules import BATCH_STATISTICS, BATCH_STATISTICS_WAYS, ModuleLayout, batch_statistics_layers, check_factory
from .._validation import as_tensor, check_bool, check_has_data
from ..evaluators import (DatasetsEvaluator, PerObjective, RunningStatistics, check_batch_size, check_loss,
                         instance_losses, objective_loss, random_layers, stack_datasets, tracked)

__all__ = ["LossFunction", "Initializer", "Projection", "module_fields", "datasets_fields", "instances_fields",
           "check_names", "check_bounds", "check_module_objectives", "float_init"]

LossFunction = Callable[[Tensor], Tensor]
Initializer = Callable[[int, torch.Generator], Tensor]
Projection = Callable[[Tensor], Tensor]


def module_fields(
    model: Callable[[], nn.Module],
    objectives: Sequence[Callable[[Callable[..., Tensor]], Tensor]],
    *,
    names: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    vectorize: bool = True,
) -> dict[str, Any]:
    """The fields of :meth:`most.Problem.from_module`'s problem: one loss callable per objective of
    a module's forward pass at the flat parameters."""
    objectives = check_module_objectives(model, objectives)
    names = check_names(names)
    labels = list(names) if names is not None else None
    layout = ModuleLayout(model)

    def forward_of(theta: Tensor) -> Callable[..., Tensor]:
        def forward(*inputs: Tensor, **kwargs) -> Tensor:
            return layout.forward(theta, *inputs, **kwargs)

        return forward

    def losses(theta: Tensor) -> Tensor:
        forward, differentiated = forward_of(theta), tracked(theta)
        return torch.stack([objective_loss(obj(forward), k, labels, differentiated)
                            for k, obj in enumerate(objectives)])

    def one(k: int, theta: Tensor) -> Tensor:
        return objective_loss(objectives[k](forward_of(theta)), k, labels, tracked(theta))

    fn = PerObjective(losses, one, random=bool(random_layers(layout.template)))
    vectorize = check_bool(vectorize, name="vectorize")
    statistics = RunningStatistics(layout, objectives, vectorize=vectorize) if layout.statistics_names else None
    return dict(fn=fn, dim=layout.dim, n_objectives=len(objectives), init=layout.init, names=names,
                metadata=dict(metadata or {}), layout=layout, statistics=statistics, vectorize=vectorize)


def datasets_fields(
    model: Callable[[], nn.Module],
    datasets: Sequence[Sequence[Tensor]] | Sequence[Tensor],
    loss: Callable[..., Tensor],
    *,
    objective_index: Tensor | None = None,
    n_objectives: int | None = None,
    batch_size: int | None = None,
    names: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The fields of :meth:`most.Problem.from_datasets`'s problem: the module's mean loss on each
    objective's rows, evaluated by a :class:`~most.evaluators.DatasetsEvaluator`."""
    if not callable(loss):
        raise TypeError("`loss` must be callable loss(output, *targets) -> [rows], one loss per row.")
    check_factory(model)
    data, owner, n = stack_datasets(datasets, objective_index, n_objectives)
    names = check_names(names)
    if names is not None and len(names) != n:
        raise ValueError(f"`names` has {len(names)} entries but there are {n} objectives; give one name per objective.")

    def label(i: int) -> str:
        return f"objective {i}" + (f" ({names[i]!r})" if names is not None else "")

    layout = ModuleLayout(model)
    batch_layers = batch_statistics_layers(layout.template)
    if batch_layers:
        layer = layout.template.get_submodule(batch_layers[0])
        how, fix = BATCH_STATISTICS_WAYS["training" if layer.training else "no running statistics"]
        raise ValueError(BATCH_STATISTICS.format(
            where=f"The module's layer {batch_layers[0]!r} ({type(layer).__name__})", how=how, fix=fix))
    counts = torch.bincount(owner.cpu(), minlength=n)
    batch_size = check_batch_size(batch_size, counts, label)
    evaluator = DatasetsEvaluator(layout, data, owner, n, loss, batch_size)
    check_loss(evaluator, torch.cat([p.detach().reshape(-1) for p in
                                     (layout.template.get_parameter(k) for k in layout.names)]), label)
    every_row = evaluator.all

    def fn(theta: Tensor) -> Tensor:  # exact losses of one model, for code that calls fn directly
        return evaluator.mean_losses(theta, every_row)
    return dict(fn=fn, dim=layout.dim, n_objectives=n, init=layout.init, names=names,
                metadata=dict(metadata or {}), layout=layout, evaluator=evaluator)


def instances_fields(
    loss: Callable[..., Tensor],
    data: Tensor | Sequence[Tensor],
    dim: int,
    init: Tensor | Initializer | None = None,
    *,
    names: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The fields of :meth:`most.Problem.from_instances`'s problem: one objective per row of
    ``data``, ``L_i(theta) = loss(theta, *row_i)``."""
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
    return dict(fn=fn, dim=dim, n_objectives=n, init=init, names=check_names(names), metadata=dict(metadata or {}),
                instance_loss=loss, instances=data)


def check_names(names) -> tuple[str, ...] | None:
    """``names`` as a tuple of strings (their count is checked against the objectives by
    :class:`~most.Problem`); a single string or entries that are not strings are refused."""
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


def check_bounds(bounds, dim: int, *, init_given: bool) -> None:
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


def check_module_objectives(model, objectives) -> list:
    """:meth:`most.Problem.from_module`'s ``model`` (a factory) and ``objectives`` (callables) checked;
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


def float_init(init: Tensor, what: str = "`init`") -> Tensor:
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
