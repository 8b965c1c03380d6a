"""Each model's running statistics of batch normalisation (:meth:`most.Problem.from_module`).

A module with ``nn.BatchNorm*d`` layers in training mode normalises each forward pass by its
batch's statistics and keeps running estimates of them for evaluation mode. The problem's
evaluations train the m models with the batches' statistics and write nothing; the models'
running statistics are run state, ``{buffer name: [m, ...]}``, updated once per round by
:meth:`RunningStatistics.update`: a pass without gradients over the objectives each model serves,
in objective order, at the parameters the round started from, with torch's own update rule (the
layer's ``momentum``, or the cumulative average when it is ``None``). That is what a plain PyTorch
loop does whose models run a forward pass in training mode over each objective they train on,
once per round. The statistics go to checkpoints, to :attr:`most.Result.statistics` and, through
:meth:`most.Result.to_modules`, into the modules a run returns.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor
from torch.func import vmap

from .._modules import ModuleLayout, check_statistics
from ._datasets import random_layers, run_rng


class RunningStatistics:
    """The running statistics of a :meth:`most.Problem.from_module` problem's models.

    Args:
        layout: the module's layout (its ``statistics_names`` are the buffers kept per model).
        objectives: the problem's objectives, ``objective(forward) -> scalar``.
        masked: whether :meth:`update` reads which objectives each model serves (``False`` for a
            problem whose objectives are mixtures of these, e.g. MosT-E's: every model then
            updates its statistics on every objective).
        vectorize: update the models' statistics under :func:`torch.func.vmap` where the layers
            allow it (``False``: one model after another, as the problem's evaluations).
    """

    def __init__(self, layout: ModuleLayout, objectives: Sequence[Callable[[Callable[..., Tensor]], Tensor]],
                 masked: bool = True, vectorize: bool = True):
        self.layout, self.objectives, self.masked = layout, list(objectives), masked
        self.vectorize = vectorize
        # a layer with momentum=None takes the cumulative average, whose factor 1 / batches counted
        # is a Python number: its models are updated one after another instead of under vmap, as are
        # those of a problem evaluated model by model (vectorize=False: a module vmap cannot batch)
        self._vectorize = vectorize and all(layout.template.get_submodule(name).momentum is not None
                                            for name in layout.statistics_layers)
        self._random = bool(random_layers(layout.template))

    @property
    def names(self) -> list[str]:
        """The buffers each model keeps, e.g. ``['1.running_mean', '1.running_var', '1.num_batches_tracked']``."""
        return list(self.layout.statistics_names)

    def everywhere(self) -> "RunningStatistics":
        """These statistics, updated on every objective whichever a model serves."""
        return RunningStatistics(self.layout, self.objectives, masked=False, vectorize=self.vectorize)

    def init(self, m: int, device: torch.device | None = None) -> dict[str, Tensor]:
        """The statistics of ``m`` fresh models: the template's, ``{name: [m, ...]}``."""
        return self.layout.init_statistics(m, device)

    def reset(self, statistics: dict[str, Tensor], model: int) -> dict[str, Tensor]:
        """``statistics`` with model ``model``'s set back to the template's (the model was moved)."""
        fresh = self.layout.init_statistics(1)
        out = {k: v.clone() for k, v in statistics.items()}
        for k, v in out.items():
            v[model] = fresh[k][0].to(v)
        return out

    def update(self, params: Tensor, statistics: dict[str, Tensor], served: Tensor | None = None,
               generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """The statistics after a forward pass in training mode of each model ``params [m, dim]``
        over each objective it serves (``served [m, n]`` bool; ``None`` or an unmasked instance:
        every objective), in objective order. The m models of one objective run at once (one
        after another for a layer with ``momentum=None``); an
        objective that draws a mini-batch at each call draws one for this pass, as for an
        evaluation. Random layers (dropout) draw from torch's generator seeded from ``generator``
        (the run's; a fixed seed without it), as the evaluations do."""
        if self._random:
            with run_rng(generator, params.device):
                return self._update(params, statistics, served)
        return self._update(params, statistics, served)

    def _update(self, params: Tensor, statistics: dict[str, Tensor], served: Tensor | None) -> dict[str, Tensor]:
        m = int(params.shape[0])
        check_statistics(statistics, self.names, m)
        if served is None or not self.masked:
            served = torch.ones(m, len(self.objectives), dtype=torch.bool, device=params.device)
        current = {k: v.clone() for k, v in statistics.items()}
        params = params.detach()
        for i, objective in enumerate(self.objectives):
            who = served[:, i]
            if not bool(who.any()):
                continue
            trial = current if bool(who.all()) else {k: v.clone() for k, v in current.items()}

            def run(theta: Tensor, buffers: dict[str, Tensor], objective=objective) -> Tensor:
                out = objective(lambda *inputs, **kwargs: self.layout.tracking_forward(theta, buffers, *inputs, **kwargs))
                return out if isinstance(out, Tensor) else torch.zeros(())

            with torch.no_grad():
                if self._vectorize:
                    vmap(run, randomness="same")(params, trial)
                else:  # each model's rows of the stacked statistics, updated in place
                    for j in range(m):
                        run(params[j], {k: v[j] for k, v in trial.items()})
            if trial is not current:
                current = {k: torch.where(who.view(-1, *[1] * (v.ndim - 1)).to(v.device), trial[k], v)
                           for k, v in current.items()}
        return current
