"""Client models as flat parameter vectors, so that m models (and many clients) train at once.

A :class:`FlatModel` wraps an ``nn.Module`` architecture: parameters live in one vector
``theta [d]`` and :meth:`FlatModel.logits` runs the module with ``torch.func.functional_call``,
so ``torch.func.vmap`` batches any number of (model, client) pairs.

* :func:`logistic_regression` -- multinomial logistic regression (the FedProx synthetic model).
* :func:`cnn` -- the paper's CNN for 28x28 images: two 5x5 conv layers with ReLU and 2x2
  max-pooling, then a linear layer to the classes.

Examples:
    >>> import torch
    >>> model = logistic_regression(60, 10)
    >>> theta = model.init(3, torch.Generator().manual_seed(0))
    >>> theta.shape, model.logits(theta[0], torch.zeros(4, 60)).shape
    (torch.Size([3, 610]), torch.Size([4, 10]))
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from .._digest import add_tensor
from .._modules import affine_shape, parameter_range, values_per_sample
from .._random import derive_seed

__all__ = ["FlatModel", "logistic_regression", "cnn"]


class NotLogits(ValueError):
    """A model whose forward returns something else than one tensor of logits (a tuple, say)."""


@dataclass(frozen=True, eq=False)
class FlatModel:
    """An architecture whose parameters are handled as flat vectors ``[d]``.

    The vector holds the module's trainable parameters. Parameters with ``requires_grad=False``
    (a frozen, pretrained part) are not in it: every model uses the template's values of them
    (the module ``factory()`` returns first), none trains them and no federated round sends them.

    Args:
        factory: ``() -> nn.Module``; called once for the template and once per model in
            :meth:`init` (under a seed derived from the generator).
        name: a label for reports.
    """

    factory: Callable[[], nn.Module]
    name: str = "model"

    if TYPE_CHECKING:  # set by __post_init__ (the dataclass is frozen); not fields at run time
        _template: nn.Module = field(init=False)
        _names: list[str] = field(init=False)
        _shapes: list[torch.Size] = field(init=False)
        _sizes: list[int] = field(init=False)
        _buffers: dict[str, Tensor] = field(init=False)
        _affine: tuple[int, int] | None = field(init=False)

    def __post_init__(self):
        if isinstance(self.factory, nn.Module):
            raise TypeError(f"`factory` must be a function that returns a new module, not a module; pass e.g. "
                            f"`lambda: {type(self.factory).__name__}(...)` so that each model gets its own weights.")
        if not callable(self.factory):
            raise TypeError(f"`factory` must be a function that returns an nn.Module; got {type(self.factory).__name__}.")
        template = self.factory()
        if not isinstance(template, nn.Module):
            raise ValueError(f"`factory()` must return an nn.Module; got {type(template).__name__}.")
        named = list(template.named_parameters())
        if not named:
            raise ValueError("The module has no parameters to train.")
        trainable = [(n, p) for n, p in named if p.requires_grad]
        if not trainable:
            raise ValueError(f"The module has no trainable parameter: all {len(named)} of its parameters have "
                             "requires_grad=False. Leave the part to train trainable, e.g. "
                             "`for p in net.head.parameters(): p.requires_grad_(True)` in the factory.")
        frozen = {n: p.detach() for n, p in named if not p.requires_grad}
        object.__setattr__(self, "_template", template)
        object.__setattr__(self, "_names", [n for n, _ in trainable])
        object.__setattr__(self, "_shapes", [p.shape for _, p in trainable])
        object.__setattr__(self, "_sizes", [math.prod(p.shape) for _, p in trainable])
        # what every model shares: the buffers and the frozen parameters, the template's
        object.__setattr__(self, "_buffers", {**frozen, **dict(template.named_buffers())})
        object.__setattr__(self, "_affine", None if frozen else affine_shape(template))

    @property
    def dim(self) -> int:
        return sum(self._sizes)

    def fixed_digest(self) -> int:
        """A digest (a 56-bit int) of what every model shares and no round sends: the template's
        frozen parameters and buffers. Two processes that build the model from one factory (a
        Flower server and its nodes) hold the same network only if their digests agree."""
        h = hashlib.sha256()
        for name, value in sorted(self._buffers.items()):
            h.update(f"{name}:".encode())
            add_tensor(h, value)
        return int.from_bytes(h.digest()[:7], "big")

    @property
    def parameter_names(self) -> list[str]:
        """The module's trainable parameter names, in the order of the flat vector."""
        return list(self._names)

    @property
    def frozen(self) -> list[str]:
        """The names of the parameters that are not trained (``requires_grad=False``)."""
        return [n for n, p in self._template.named_parameters() if not p.requires_grad]

    def coordinates(self, name: str) -> slice:
        """The slice of the flat vector ``theta [d]`` holding parameter ``name``; ``"last"`` is the
        module's last parameter (e.g. the final layer's bias).

        >>> logistic_regression(60, 10).coordinates("bias")
        slice(600, 610, None)
        """
        return slice(*parameter_range(self._template, name, owner=self.name, trainable_only=True))

    def init(self, m: int, generator: torch.Generator) -> Tensor:
        """``[m, d]`` initial parameters: the module's own initialisation of its trainable
        parameters, m times."""
        wanted = set(self._names)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(generator))
            return torch.stack([torch.cat([p.detach().reshape(-1) for n, p in self.factory().named_parameters()
                                           if n in wanted]) for _ in range(m)])

    def template_parameters(self) -> list[Tensor]:
        """The template module's trainable parameters (its dtypes and devices), detached, in the
        order of the flat vector."""
        wanted = set(self._names)
        return [p.detach() for n, p in self._template.named_parameters() if n in wanted]

    def template_logits(self, x: Tensor) -> Tensor:
        """The model's logits on ``x`` with its template's parameters, batched as the runtime batches
        them (``vmap`` over one model); no gradient, no random draw and no buffer of the model is
        touched. The runtime's check that a model runs on the data's samples."""
        theta = torch.cat([p.reshape(-1) for p in self.template_parameters()])[None]
        buffers = {k: b.clone() for k, b in self._buffers.items()}

        def logits(t, inputs):
            return functional_call(self._template, {**buffers, **self.unflatten(t)}, (inputs,))

        with torch.random.fork_rng(devices=[]), torch.no_grad():
            out = vmap(logits, in_dims=(0, None))(theta, x)
        if not isinstance(out, Tensor):
            raise NotLogits(f"The model {self.name} must return one tensor of logits [batch, n_classes]; its forward "
                            f"returned a {type(out).__name__}. Return the logits alone (e.g. `return self.head(h)`, "
                            "not `return logits, h`).")
        return out[0]

    def input_mismatch(self, shape: tuple[int, ...]) -> str | None:
        """What the module's first layer takes, in words, when that differs from samples of
        ``shape`` (``None`` when the sizes agree, or the first layer is not a Linear or Conv)."""
        for module in self._template.modules():
            if isinstance(module, nn.Linear):
                if module.in_features in (shape[-1] if shape else 1, math.prod(shape)):
                    return None
                return f"inputs of {module.in_features} features"
            if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                                   nn.ConvTranspose3d)):
                dims = len(module.kernel_size)
                if len(shape) in (dims, dims + 1) and (len(shape) == dims or shape[0] == module.in_channels):
                    return None
                return f"inputs of {module.in_channels} channel(s) and {dims} spatial dimension(s)"
        return None

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        parts = torch.split(theta, self._sizes)
        return {n: p.reshape(s) for n, p, s in zip(self._names, parts, self._shapes)}

    def logits(self, theta: Tensor, x: Tensor) -> Tensor:
        """Runs the module with parameters ``theta [d]`` on inputs ``x [B, ...]``."""
        return functional_call(self._template, {**self._buffers, **self.unflatten(theta)}, (x,))

    def batched_logits(self, theta: Tensor, x: Tensor, *, shared_inputs: bool = False) -> Tensor:
        """The logits of P models at once: ``theta [P, d]`` on their own inputs ``x [P, B, ...]``
        (or, with ``shared_inputs``, all on the same ``x [B, ...]``); ``[P, B, C]``.

        ``vmap`` of :meth:`logits` over the models, except for a module that is one affine map
        (an ``nn.Linear``, or ``nn.Flatten`` then ``nn.Linear``), which is one batched matrix
        product: the same numbers with a few tensor operations instead of a module call per step,
        which is what a small model's training loop spends its time on."""
        if self._affine is None or shared_inputs:  # shared inputs: vmap makes one product for all models
            return vmap(self.logits, in_dims=(0, None if shared_inputs else 0))(theta, x)
        x = x.reshape(*x.shape[:2], -1) if x.dim() != 3 else x
        return _Affine.apply(theta, x, *self._affine)

    def values_per_sample(self, input_shape: tuple[int, ...]) -> int:
        """About how many numbers one input of shape ``input_shape`` makes in a forward pass:
        twice the outputs of the module's leaf submodules (for the functional steps between
        them), counted once per shape on the meta device (no memory, no arithmetic). The
        runtime sizes its evaluation and training chunks with it, so a convolutional model is
        evaluated in pieces that fit where a linear one goes in one."""
        cache = self.__dict__.setdefault("_values_per_sample", {})
        shape = tuple(int(v) for v in input_shape)
        if shape not in cache:
            zeros = {name: torch.zeros(s) for name, s in zip(self._names, self._shapes)}
            zeros.update({name: b.detach().to("cpu").clone() for name, b in self._buffers.items()})
            cache[shape] = values_per_sample(self._template, zeros, shape)
        return cache[shape]

    def to_module(self, theta: Tensor) -> nn.Module:
        """A fresh ``nn.Module`` holding ``theta`` (for deployment), and the template's frozen
        parameters and buffers, the values the models were trained with (a factory that draws
        them, e.g. a random projection, gives each call its own)."""
        module = self.factory()
        template = dict(self._template.named_parameters())
        with torch.no_grad():
            for name, value in self.unflatten(theta.detach()).items():
                module.get_parameter(name).copy_(value)
            for name in self.frozen:
                module.get_parameter(name).copy_(template[name])
            for name, value in self._template.named_buffers():
                module.get_buffer(name).copy_(value)
        return module


class _Affine(torch.autograd.Function):
    """``x W^T + b`` for P models at once, from their flat parameters ``theta [P, out*in + out]``
    (``W`` row-major, then ``b``) and inputs ``x [P, B, in]``. The reverse pass forms the
    gradient in ``theta``'s layout at once (``W``'s as ``g^T x``, one batched product, and
    ``b``'s as ``g`` summed over the batch), where autograd would form ``x^T g``, transpose it
    and scatter both parts into zeros: the same numbers, in a third less time per step."""

    # forward(ctx, ...) without setup_context: apply() then binds no signature per call (a
    # measurable share of a small model's step); the function is not called under vmap

    @staticmethod
    def forward(ctx, theta, x, out_features, in_features):
        split = out_features * in_features
        weight = theta[:, :split].reshape(-1, out_features, in_features)
        ctx.save_for_backward(theta, x)
        ctx.shape = (out_features, in_features)
        return torch.baddbmm(theta[:, None, split:], x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad):
        theta, x = ctx.saved_tensors
        out_features, in_features = ctx.shape
        grad_theta = grad_x = None
        if ctx.needs_input_grad[0]:
            grad_weight = torch.bmm(grad.transpose(1, 2), x)
            grad_theta = torch.cat([grad_weight.reshape(len(grad), -1), grad.sum(1)], 1)
        if ctx.needs_input_grad[1]:
            weight = theta[:, : out_features * in_features].reshape(-1, out_features, in_features)
            grad_x = torch.bmm(grad, weight)
        return grad_theta, grad_x, None, None


def logistic_regression(dim: int, n_classes: int, *, input_shape: Sequence[int] | None = None) -> FlatModel:
    """Multinomial logistic regression ``x -> W x + b``.

    ``input_shape``: the shape of one sample, for samples of more than one dimension (images
    ``(1, 28, 28)``, with ``dim = 784``): each is flattened first (``nn.Flatten`` then
    ``nn.Linear``, whose parameters are then named ``1.weight`` and ``1.bias``). Flat features
    need nothing (``nn.Linear`` alone).

    >>> logistic_regression(784, 10, input_shape=(1, 28, 28)).template_logits(torch.zeros(5, 1, 28, 28)).shape
    torch.Size([5, 10])
    """
    shape = None if input_shape is None else tuple(int(v) for v in input_shape)
    if shape is not None and math.prod(shape) != dim:
        raise ValueError(f"`input_shape` {shape} holds {math.prod(shape)} values, but `dim` is {dim}; "
                         "they must agree (or leave `input_shape` out for flat features).")
    if shape is not None and len(shape) > 1:
        return FlatModel(lambda: nn.Sequential(nn.Flatten(), nn.Linear(dim, n_classes)),
                         name=f"logreg({'x'.join(map(str, shape))}->{n_classes})")
    return FlatModel(lambda: nn.Linear(dim, n_classes), name=f"logreg({dim}->{n_classes})")


class _CNN(nn.Module):
    def __init__(self, in_channels: int, n_classes: int, channels: tuple[int, int], side: int):
        super().__init__()
        c1, c2 = channels
        self.conv1 = nn.Conv2d(in_channels, c1, 5, padding=2)
        self.conv2 = nn.Conv2d(c1, c2, 5, padding=2)
        self.fc = nn.Linear(c2 * (side // 4) ** 2, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(-3))


def cnn(n_classes: int, *, in_channels: int = 1, side: int = 28, channels: tuple[int, int] = (32, 64)) -> FlatModel:
    """The paper's CNN: conv5x5(c1)-ReLU-maxpool2, conv5x5(c2)-ReLU-maxpool2, linear.

    ``channels=(32, 64)`` is the paper's width; narrower layers (e.g. ``(8, 16)``) keep CPU
    runs short.
    """
    if side % 4:
        raise ValueError(f"`side` must be a multiple of 4 (two 2x2 poolings); got {side}.")
    return FlatModel(lambda: _CNN(in_channels, n_classes, channels, side), name=f"cnn{channels}")
