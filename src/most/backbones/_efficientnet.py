"""EfficientNet-Lite0 (Tan & Le, 2019; the "Lite" variant of the TensorFlow TPU repository),
written so that the ImageNet weights converted from TensorFlow load into it unchanged.

What the converted weights need, and what this module therefore does:

* **TF "same" padding.** TensorFlow pads a convolution so that the output has
  ``ceil(size / stride)`` positions, and when the padding is odd it puts the extra row and
  column at the bottom and right. PyTorch's symmetric ``padding=k // 2`` shifts every
  stride-2 layer by one pixel, and the outputs drift away from the weights' training.
  :class:`Conv2dSame` pads as TensorFlow does, for any input size.
* **BatchNorm eps 1e-3** (TensorFlow's default; PyTorch's is 1e-5), momentum 0.01 (TF 0.99).
* **ReLU6**, no squeeze-and-excitation, stem (32 channels) and head (1280) not scaled: the
  Lite changes to EfficientNet-B0, made for integer inference.

The parameter and buffer names are those of the converted state dict (``_conv_stem``,
``_bn0``, ``_blocks.N._expand_conv`` ...), so ``load_state_dict(strict=True)`` checks that
every tensor has a place and the right shape.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["Conv2dSame", "EfficientNetLite0", "same_padding"]

#: TensorFlow's BatchNorm epsilon and (as PyTorch's momentum) 1 - its decay 0.99.
BN_EPS = 1e-3
BN_MOMENTUM = 0.01


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TensorFlow's "same" padding of one spatial axis: ``(before, after)``.

    The output has ``ceil(size / stride)`` positions; the padding they need in total is
    ``max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)``, of which the smaller
    half goes before (top / left) and the larger after (bottom / right).

    Args:
        size: the input's length along the axis.
        kernel: the kernel's length along the axis.
        stride: the stride along the axis.
        dilation: the dilation along the axis.

    Returns:
        The zeros to add before and after the input.

    >>> same_padding(224, 3, 2)   # even size, stride 2: the one extra row goes after
    (0, 1)
    >>> same_padding(7, 3, 2), same_padding(8, 5, 2), same_padding(8, 5, 1)
    ((1, 1), (1, 2), (2, 2))
    """
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


class Conv2dSame(nn.Conv2d):
    """A bias-free ``nn.Conv2d`` padded as TensorFlow's ``padding="SAME"`` (:func:`same_padding`).

    The padding depends on the input size, so it is computed in :meth:`forward`; the module
    holds only ``weight`` (shape ``[out, in / groups, k, k]``), as the converted weights do.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, groups: int = 1):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=0, groups=groups, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """``x [N, C, H, W] -> [N, out, ceil(H / s), ceil(W / s)]``."""
        top, bottom = same_padding(x.shape[-2], self.kernel_size[0], self.stride[0], self.dilation[0])
        left, right = same_padding(x.shape[-1], self.kernel_size[1], self.stride[1], self.dilation[1])
        if top or bottom or left or right:
            x = F.pad(x, (left, right, top, bottom))
        return super().forward(x)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)


class _Stage(NamedTuple):
    repeats: int
    kernel: int
    stride: int
    expand: int
    in_channels: int
    out_channels: int


#: EfficientNet-B0's seven stages, which Lite0 keeps (width and depth multipliers 1.0).
STAGES: tuple[_Stage, ...] = (
    _Stage(1, 3, 1, 1, 32, 16),
    _Stage(2, 3, 2, 6, 16, 24),
    _Stage(2, 5, 2, 6, 24, 40),
    _Stage(3, 3, 2, 6, 40, 80),
    _Stage(3, 5, 1, 6, 80, 112),
    _Stage(4, 5, 2, 6, 112, 192),
    _Stage(1, 3, 1, 6, 192, 320),
)


class MBConvBlock(nn.Module):
    """Inverted residual block without squeeze-and-excitation: 1x1 expansion (absent when the
    expansion ratio is 1), k x k depthwise, 1x1 projection; ReLU6 after the first two; the
    input is added back when the block keeps the shape (stride 1, same channels)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int, expand: int):
        super().__init__()
        hidden = in_channels * expand
        if expand != 1:
            self._expand_conv = Conv2dSame(in_channels, hidden, 1)
            self._bn0 = _bn(hidden)
        self._depthwise_conv = Conv2dSame(hidden, hidden, kernel, stride=stride, groups=hidden)
        self._bn1 = _bn(hidden)
        self._project_conv = Conv2dSame(hidden, out_channels, 1)
        self._bn2 = _bn(out_channels)
        self.expand = expand != 1
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, x: Tensor) -> Tensor:
        """``[N, in, H, W] -> [N, out, ceil(H / stride), ceil(W / stride)]``."""
        h = F.relu6(self._bn0(self._expand_conv(x))) if self.expand else x
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        h = self._bn2(self._project_conv(h))
        return h + x if self.residual else h


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0: 3x3 stem (32), 16 MBConv blocks in 7 stages, 1x1 head (1280),
    global average pooling, dropout 0.2, a linear classifier.

    296 state-dict tensors, 4,694,024 values for 1000 classes (BatchNorm's running statistics
    and step counters included). Built with random weights; :func:`most.backbones.efficientnet_lite0`
    returns it with the ImageNet weights.

    Args:
        n_classes: outputs of the classifier ``_fc`` (ImageNet: 1000).
        dropout: dropout before ``_fc`` in training mode.

    >>> import torch
    >>> model = EfficientNetLite0().eval()
    >>> model.features(torch.zeros(2, 3, 64, 64)).shape
    torch.Size([2, 1280])
    """

    #: channels of the pooled features
    n_features = 1280

    def __init__(self, n_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        self._conv_stem = Conv2dSame(3, STAGES[0].in_channels, 3, stride=2)
        self._bn0 = _bn(STAGES[0].in_channels)
        self._blocks = nn.ModuleList()
        for stage in STAGES:
            for r in range(stage.repeats):
                first = r == 0
                self._blocks.append(MBConvBlock(stage.in_channels if first else stage.out_channels, stage.out_channels,
                                                stage.kernel, stage.stride if first else 1, stage.expand))
        self._conv_head = Conv2dSame(STAGES[-1].out_channels, self.n_features, 1)
        self._bn1 = _bn(self.n_features)
        self._dropout = nn.Dropout(dropout)
        self._fc = nn.Linear(self.n_features, n_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # He initialisation for the convolutions, as the TensorFlow model is built (fan-out).
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                fan_out = module.out_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
                nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_out))

    def stem(self, x: Tensor) -> Tensor:
        """``[N, 3, H, W] -> [N, 32, ceil(H / 2), ceil(W / 2)]``."""
        return F.relu6(self._bn0(self._conv_stem(x)))

    def head(self, x: Tensor) -> Tensor:
        """The last blocks' output ``[N, 320, h, w]`` -> pooled features ``[N, 1280]``."""
        return F.relu6(self._bn1(self._conv_head(x))).mean((-2, -1))

    def features(self, x: Tensor) -> Tensor:
        """Images ``[N, 3, H, W]`` (preprocessed, see :class:`~most.backbones.Preprocess`) ->
        the pooled 1280-d features ``[N, 1280]``, the classifier's input."""
        x = self.stem(x)
        for block in self._blocks:
            x = block(x)
        return self.head(x)

    def forward(self, x: Tensor) -> Tensor:
        """Images ``[N, 3, H, W]`` -> logits ``[N, n_classes]``."""
        return self._fc(self._dropout(self.features(x)))
