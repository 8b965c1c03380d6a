"""An ``nn.Module``'s trainable parameters as one flat vector ``theta [d]``, and what stays fixed.

:class:`ModuleLayout` is shared by the problems built from modules
(:meth:`most.Problem.from_module`, :meth:`most.Problem.from_datasets`): the m models are rows of
one ``[m, d]`` tensor, and a model's forward pass is :func:`torch.func.functional_call` of one
template module with that row's parameters. Parameters with ``requires_grad=False`` (a frozen
backbone) are not part of ``theta``: they keep the template's values, shared by every model, as
do the buffers.

Batch normalisation in training mode that tracks running statistics is the exception among the
buffers: every model keeps its own ``running_mean``, ``running_var`` and ``num_batches_tracked``
(:meth:`ModuleLayout.init_statistics`, stacked ``[m, ...]``). The evaluations that train the
models normalise each forward pass with its batch's statistics, as a module in training mode does,
and write nothing; a separate pass without gradients (:meth:`ModuleLayout.tracking_forward`)
updates each model's statistics with torch's own rule, and :meth:`ModuleLayout.to_modules` puts
them in the modules it returns.
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ._random import derive_seed


def parameter_range(module: nn.Module, name: str, *, owner: str = "The module",
                    trainable_only: bool = False) -> tuple[int, int]:
    """``(start, stop)`` of parameter ``name`` of ``module`` in the flat vector of its parameters
    (``named_parameters()`` order; with ``trainable_only``, of those with ``requires_grad``);
    ``"last"`` is the last one (e.g. the final layer's bias). ``owner`` names the module in the
    error for an unknown name."""
    layout, start = {}, 0
    for key, p in module.named_parameters():
        if trainable_only and not p.requires_grad:
            continue
        layout[key] = (start, start + p.numel())
        start += p.numel()
    if name == "last":
        name = list(layout)[-1]
    if name not in layout:
        frozen = trainable_only and name in dict(module.named_parameters())
        raise ValueError(f"{owner} has no {'trainable ' if frozen else ''}parameter {name!r}"
                         + (" (it has requires_grad=False, so it is not part of the models' parameters)"
                            if frozen else "")
                         + f"; its parameters are {', '.join(repr(n) for n in layout)} (or 'last').")
    return layout[name]


def check_one_device(module: nn.Module) -> None:
    """Refuses a module whose parameters and buffers live on more than one device (a layer added
    after ``.to(device)``, say), naming the first tensor on each and the fix; torch would otherwise
    stop at the first product across devices, without saying which part is elsewhere."""
    where: dict[torch.device, str] = {}
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        where.setdefault(t.device, name)
    if len(where) > 1:
        found = "; ".join(f"{name!r} on {device}" for device, name in where.items())
        raise ValueError(f"The module's parameters and buffers live on {len(where)} devices ({found}, ...): move "
                         "the whole module in the factory, e.g. `lambda: Net().to(device)`, after every layer "
                         "is added.")


class ModuleLayout:
    """Where a module's trainable parameters sit in ``theta [d]``, and its fixed state.

    Args:
        factory: ``() -> nn.Module``, called once here for the template (architecture, buffers,
            frozen parameters) and once per model by :meth:`init`.
    """

    def __init__(self, factory: Callable[[], nn.Module]):
        check_factory(factory)
        template = factory()
        if not isinstance(template, nn.Module):
            raise ValueError(f"`model()` must return an nn.Module; got {type(template).__name__}.")
        named = list(template.named_parameters())
        lazy = [k for k, p in named if nn.parameter.is_lazy(p)]
        if lazy:
            raise ValueError(
                f"The module's parameter {lazy[0]!r} is not initialised yet (a lazy layer such as nn.LazyLinear "
                "learns its shape on its first pass), so its size is unknown. Give the layer its input size "
                "(e.g. nn.Linear(in_features, out)), or run one pass in the factory before returning the module, "
                "e.g. `net(torch.zeros(1, *input_shape))`."
            )
        if not named:
            raise ValueError("The module has no parameters to train.")
        trainable = [(k, p) for k, p in named if p.requires_grad]
        if not trainable:
            raise ValueError(
                f"The module has no trainable parameter: all {len(named)} of its parameters have "
                "requires_grad=False. Leave the part to train trainable, e.g. "
                "`for p in net.head.parameters(): p.requires_grad_(True)` in the factory."
            )
        check_running_stats(template)
        check_one_device(template)
        self.factory, self.template = factory, template
        #: the batch-normalisation layers whose running statistics each model keeps
        self.statistics_layers = batch_norm_layers(template)
        #: their buffers' names (``running_mean``, ``running_var``, ``num_batches_tracked``)
        self.statistics_names = [f"{layer}.{b}" if layer else b for layer in self.statistics_layers
                                 for b, _ in template.get_submodule(layer).named_buffers(recurse=False)]
        # what the training passes run: the template, with those layers normalising by each batch's
        # statistics and updating none (track_running_stats=False in training mode)
        self._batch_template = template
        if self.statistics_layers:
            self._batch_template = copy.deepcopy(template)
            for layer in self.statistics_layers:
                self._batch_template.get_submodule(layer).track_running_stats = False
        self.names = [k for k, _ in trainable]
        self.shapes = [p.shape for _, p in trainable]
        self.sizes = [math.prod(s) for s in self.shapes]
        #: buffers and frozen parameters: the template's, the same for every model
        self.fixed = {k: p.detach() for k, p in named if not p.requires_grad}
        self.fixed.update(template.named_buffers())
        self._values: dict[tuple[tuple[int, ...], torch.dtype], int] = {}
        #: ``(out, in)`` when the module is one affine map of its flattened inputs, every parameter
        #: trained (``theta`` = the weight row-major, then the bias), else ``None``
        self.affine = None if self.frozen else affine_shape(template)

    @property
    def dim(self) -> int:
        return sum(self.sizes)

    @property
    def frozen(self) -> list[str]:
        """The names of the parameters that are not trained (``requires_grad=False``)."""
        return [k for k, p in self.template.named_parameters() if not p.requires_grad]

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """The trainable parameters held by ``theta [d]``, by name."""
        parts = torch.split(theta, self.sizes)
        return {k: p.reshape(s) for k, p, s in zip(self.names, parts, self.shapes)}

    def forward(self, theta: Tensor, *inputs: Tensor, **kwargs) -> Tensor:
        """The template module run on ``inputs`` (and keyword inputs ``kwargs``) with the
        parameters ``theta [d]`` (batch normalisation in training mode with each batch's
        statistics, updating nothing)."""
        return functional_call(self._batch_template, {**self.fixed, **self.unflatten(theta)}, inputs, kwargs)

    def tracking_forward(self, theta: Tensor, statistics: dict[str, Tensor], *inputs: Tensor, **kwargs) -> Tensor:
        """:meth:`forward` that also updates the running statistics ``statistics`` (one model's,
        by name, see :meth:`init_statistics`) in place, as the template module in training mode
        updates its buffers. For passes without gradients."""
        return functional_call(self.template, {**self.fixed, **statistics, **self.unflatten(theta)}, inputs, kwargs)

    def init_statistics(self, m: int, device: torch.device | None = None) -> dict[str, Tensor]:
        """The running statistics of ``m`` models, each the template's: ``{name: [m, ...]}``
        (empty when no layer keeps any)."""
        buffers = dict(self.template.named_buffers())
        return {k: buffers[k].detach().to(device).expand(m, *buffers[k].shape).clone() for k in self.statistics_names}

    def values_per_sample(self, input_shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> int:
        """About how many numbers one input of shape ``input_shape`` and ``dtype`` makes in a
        forward pass (see :func:`values_per_sample`); measured once per shape and dtype."""
        key = (input_shape, dtype)
        if key not in self._values:
            params = dict(self.template.named_parameters())  # zeros of each parameter's own dtype
            state = {k: torch.zeros(s, dtype=params[k].dtype) for k, s in zip(self.names, self.shapes)}
            state.update({k: v.detach().to("cpu").clone() for k, v in self.fixed.items()})
            self._values[key] = values_per_sample(self.template, state, input_shape, dtype)
        return self._values[key]

    def init(self, m: int, generator: torch.Generator) -> Tensor:
        """``[m, d]``: the trainable parameters of ``m`` fresh modules from the factory, built
        under a seed drawn from ``generator``."""
        wanted = set(self.names)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(generator))
            flats = [torch.cat([p.detach().reshape(-1) for k, p in self.factory().named_parameters() if k in wanted])
                     for _ in range(m)]
        return torch.stack(flats)

    def to_modules(self, params: Tensor, statistics: dict[str, Tensor] | None = None) -> list[nn.Module]:
        """One copy of the template per row of ``params [m, d]``, holding that row's parameters
        and, given ``statistics`` (``{name: [m, ...]}``, see :meth:`init_statistics`), that row's
        running statistics."""
        if statistics is not None:
            check_statistics(statistics, self.statistics_names, int(params.shape[0]))
        modules = []
        for j, theta in enumerate(params):
            module = copy.deepcopy(self.template)
            with torch.no_grad():
                for name, value in self.unflatten(theta.detach()).items():
                    module.get_parameter(name).copy_(value)
                for name, value in (statistics or {}).items():
                    module.get_buffer(name).copy_(value[j])
            modules.append(module)
        return modules

    def coordinates(self, name: str) -> tuple[int, int]:
        """``(start, stop)`` of trainable parameter ``name`` in ``theta`` (``"last"``: the last)."""
        return parameter_range(self.template, name, trainable_only=True)


def values_per_sample(template: nn.Module, state: dict[str, Tensor], input_shape: tuple[int, ...],
                      dtype: torch.dtype = torch.float32) -> int:
    """About how many numbers one input of shape ``input_shape`` makes in a forward pass of
    ``template`` with ``state`` (CPU tensors): twice the outputs of its leaf submodules (for the
    functional steps between them), from a pass over two zero inputs of ``dtype`` (the data's:
    token ids for an embedding are integers). Evaluations size their chunks with it, so that a
    convolutional model is evaluated in pieces that fit where a linear one goes in one. A module
    that cannot run so counts its inputs alone."""
    total = 0

    def count(_module, _inputs, output):
        nonlocal total
        if isinstance(output, Tensor):
            total += output.numel()

    leaves = [mod for mod in template.modules() if not any(True for _ in mod.children())]
    hooks = [mod.register_forward_hook(count) for mod in leaves]
    try:
        # two zero samples on the CPU: the meta device would do, but its first use imports
        # torch's decompositions (sympy, torch._dynamo: about 1 s in a fresh process)
        with torch.no_grad():
            functional_call(template, state, (torch.zeros(2, *input_shape, dtype=dtype),))
        total //= 2
    except Exception:
        total = math.prod(input_shape)
    finally:
        for hook in hooks:
            hook.remove()
    return max(1, 2 * total)


def affine_shape(module: nn.Module) -> tuple[int, int] | None:
    """``(out, in)`` when ``module`` is one affine map of flattened inputs with a bias, written as
    ``nn.Linear`` or ``nn.Sequential(nn.Flatten(), nn.Linear)`` (exactly these classes, not
    subclasses, whose forward may differ), else None."""
    if _hooked(module):
        return None
    if type(module) is nn.Sequential and len(module) == 2 and type(module[0]) is nn.Flatten \
            and (module[0].start_dim, module[0].end_dim) == (1, -1) and not _hooked(module[0]):
        module = module[1]
    if type(module) is nn.Linear and module.bias is not None and not _hooked(module):
        return module.out_features, module.in_features
    return None


def _hooked(module: nn.Module) -> bool:
    """Whether a pass through ``module`` runs more than its class's forward: a forward hook or
    pre-hook on it or on every module (torch's global hooks), or a ``forward`` set on the instance."""
    from torch.nn.modules import module as torch_module

    return bool(module._forward_hooks or module._forward_pre_hooks or "forward" in vars(module)
                or torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks)


def check_factory(model) -> None:
    """Refuses a ``model`` that is not a factory ``() -> nn.Module``."""
    if isinstance(model, nn.Module):
        raise TypeError(
            f"`model` must be a factory () -> nn.Module, not a module instance: got a {type(model).__name__} "
            f"instance. Pass a function that builds a new one, e.g. `lambda: {type(model).__name__}(...)` "
            "(it is called once per model, under the solver's seed, so the models start from different "
            "parameters)."
        )
    if not callable(model):
        raise ValueError("`model` must be a factory () -> nn.Module, e.g. `lambda: nn.Linear(3, 1)`.")


def batch_norm_layers(template: nn.Module) -> list[str]:
    """The names of ``template``'s batch-normalisation layers in training mode that track running
    statistics (each model keeps its own)."""
    return [name for name, module in template.named_modules()
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and module.track_running_stats]


def batch_statistics_layers(template: nn.Module) -> list[str]:
    """The names of ``template``'s batch-normalisation layers that normalise a forward pass by
    the statistics of its whole batch: those in training mode, and those without running
    statistics (``track_running_stats=False``), which do so in evaluation mode too."""
    return [name for name, module in template.named_modules()
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and (module.training or module.running_mean is None)]


def running_stats_layers(template: nn.Module) -> list[str]:
    """The names of ``template``'s normalisation layers other than batch normalisation that
    update running statistics in training mode (instance normalisation with
    ``track_running_stats=True``)."""
    base = getattr(nn.modules.batchnorm, "_NormBase", nn.modules.batchnorm._BatchNorm)
    return [name for name, module in template.named_modules()
            if isinstance(module, base) and not isinstance(module, nn.modules.batchnorm._BatchNorm)
            and module.training and getattr(module, "track_running_stats", False)]


def check_running_stats(template: nn.Module) -> None:
    """Refuses normalisation layers other than batch normalisation that update running
    statistics in training mode (instance normalisation with ``track_running_stats=True``): the
    models' statistics are kept for batch normalisation only."""
    updating = running_stats_layers(template)
    if updating:
        module = template.get_submodule(updating[0])
        raise ValueError(RUNNING_STATS.format(where=f"The module's layer {updating[0]!r} ({type(module).__name__})"))


def check_statistics(statistics: dict[str, Tensor], names: list[str], m: int) -> None:
    """Refuses ``statistics`` that are not ``{name: [m, ...]}`` for exactly the buffers ``names``."""
    if not isinstance(statistics, dict) or set(statistics) != set(names):
        got = sorted(statistics) if isinstance(statistics, dict) else type(statistics).__name__
        raise ValueError(f"`statistics` must hold the running statistics {names} (one [m, ...] tensor each, "
                         f"as Result.statistics does); got {got}.")
    for name, value in statistics.items():
        if not isinstance(value, Tensor) or value.ndim < 1 or value.shape[0] != m:
            raise ValueError(f"`statistics[{name!r}]` must have one row per model ({m}); got "
                             f"{tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__}.")


RUNNING_STATS = (
    "{where} updates running statistics (running_mean/running_var) in training mode; the models keep "
    "their own running statistics for batch normalisation only. Choose one: put the layer in evaluation "
    "mode in the factory (`layer.eval()`: every model then normalises with the layer's stored statistics, "
    "which stay fixed); build it with `track_running_stats=False` (it normalises with each sample's "
    "statistics); or use `nn.BatchNorm*d`, `nn.GroupNorm` or `nn.LayerNorm`."
)

BATCH_STATISTICS = (
    "{where} is batch normalisation {how}: it normalises a forward pass by the statistics of "
    "its whole batch. Problem.from_datasets evaluates the objectives' rows together (and in chunks), so an "
    "objective's loss would depend on the other objectives' rows. Choose one: build the problem with "
    "Problem.from_module, one objective per dataset (each objective's forward pass is its own batch, and "
    "every model keeps its own running statistics); {fix}or use `nn.GroupNorm` or `nn.LayerNorm`."
)
#: ``BATCH_STATISTICS``'s ``how`` and ``fix`` for a layer in training mode, and for one without
#: running statistics (``track_running_stats=False``, which uses its batch's in evaluation mode too)
BATCH_STATISTICS_WAYS = {
    "training": ("in training mode", "put the layer in evaluation mode in the factory (`layer.eval()`, or "
                                     "`net.eval()` for a pretrained backbone: its stored statistics stay fixed); "),
    "no running statistics": ("without running statistics (track_running_stats=False: in evaluation mode too)",
                              "build it with running statistics and put it in evaluation mode (`layer.eval()`: its "
                              "stored statistics then stay fixed); "),
}
