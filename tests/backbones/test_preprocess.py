"""The backbone's preprocessing (most.backbones.Preprocess): sizes, the centre crop, the scaling."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from most.backbones import Preprocess


@pytest.mark.parametrize("size", [(400, 300), (300, 400), (256, 256), (1000, 257)])
def test_the_centre_of_the_image_is_the_centre_of_the_crop(size):
    w, h = size
    image = Image.new("RGB", size, (0, 0, 255))
    image.paste((255, 0, 0), (w // 2 - 10, h // 2 - 10, w // 2 + 10, h // 2 + 10))  # a red square in the middle
    x = Preprocess()(image)
    assert x.shape == (3, 224, 224) and x.dtype == torch.float32
    torch.testing.assert_close(x[:, 112, 112], torch.tensor([1.0, -1.0, -1.0]), atol=0.02, rtol=0)
    torch.testing.assert_close(x[:, 0, 0], torch.tensor([-1.0, -1.0, 1.0]), atol=0.02, rtol=0)


def test_the_shorter_side_becomes_resize_before_the_crop():
    # 512 x 256: resized to 512 x 256 (the shorter side already 256), cropped from column 144;
    # a white column band 0..143 in the original must be cut off entirely.
    image = Image.new("RGB", (512, 256), (0, 0, 0))
    image.paste((255, 255, 255), (0, 0, 140, 256))
    x = Preprocess()(image)
    assert float(x.max()) < -0.95  # nothing of the band is left (bicubic ringing aside)


def test_greyscale_becomes_rgb_and_settings_are_checked(tmp_path):
    path = tmp_path / "grey.jpg"
    Image.new("L", (300, 300), 255).save(path)
    x = Preprocess().load(path)
    assert x.shape == (3, 224, 224)
    torch.testing.assert_close(x.mean((1, 2)), torch.ones(3), atol=0.01, rtol=0)
    with pytest.raises(ValueError, match="crop"):
        Preprocess(resize=200, crop=224)
    with pytest.raises(ValueError, match="interpolation"):
        Preprocess(interpolation="nearest")
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    with pytest.raises(ValueError, match="broken.jpg: cannot be read as an image"):
        Preprocess().load(tmp_path / "broken.jpg")
