"""The image preprocessing an ImageNet backbone's weights were trained with.

For EfficientNet-Lite0: RGB scaled to ``[0, 1]``, the shorter side resized to 256 with
bicubic interpolation, the centre 224 x 224 cropped, then ``(x - 0.5) / 0.5`` per channel.
The steps follow torchvision's ``Resize(256) -> CenterCrop(224) -> ToTensor() ->
Normalize(0.5, 0.5)`` on Pillow images (the same size and crop arithmetic), without needing
torchvision.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["Preprocess"]

_INTERPOLATIONS = ("bicubic", "bilinear")


@dataclass(frozen=True)
class Preprocess:
    """Image file or Pillow image -> ``float32 [3, crop, crop]`` tensor for the backbone.

    Args:
        resize: the shorter side after resizing (the longer keeps the aspect ratio, rounded down).
        crop: the side of the centre crop (at most ``resize``).
        mean: per-channel value subtracted after scaling to ``[0, 1]``.
        std: per-channel divisor after the mean.
        interpolation: ``"bicubic"`` or ``"bilinear"`` (Pillow's, antialiased when shrinking).

    The defaults are EfficientNet-Lite0's. The fields are part of the feature cache's key
    (:func:`most.backbones.feature_key`), so features made with other settings are never mixed up.

    >>> from PIL import Image
    >>> x = Preprocess()(Image.new("RGB", (320, 240), (255, 0, 128)))
    >>> tuple(x.shape), [round(float(v), 3) for v in x[:, 0, 0]]
    ((3, 224, 224), [1.0, -1.0, 0.004])
    """

    resize: int = 256
    crop: int = 224
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    interpolation: str = "bicubic"

    def __post_init__(self):
        for name in ("resize", "crop"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Preprocess: `{name}` must be a positive int; got {value!r}.")
        if self.crop > self.resize:
            raise ValueError(f"Preprocess: `crop` ({self.crop}) must be at most `resize` ({self.resize}).")
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(f"Preprocess: `mean` and `std` must be three numbers, std positive; got "
                             f"{self.mean} and {self.std}.")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(f"Preprocess: `interpolation` must be one of {_INTERPOLATIONS}; got {self.interpolation!r}.")

    def key(self) -> dict:
        """The settings as plain values (for the feature cache's key)."""
        return asdict(self)

    def __call__(self, image) -> Tensor:
        """A Pillow image -> ``float32 [3, crop, crop]``."""
        from PIL import Image

        image = image.convert("RGB")
        w, h = image.size
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(self.resize * long / short)
        size = (self.resize, new_long) if w <= h else (new_long, self.resize)
        resample = Image.Resampling.BICUBIC if self.interpolation == "bicubic" else Image.Resampling.BILINEAR
        image = image.resize(size, resample)
        top = int(round((size[1] - self.crop) / 2.0))
        left = int(round((size[0] - self.crop) / 2.0))
        image = image.crop((left, top, left + self.crop, top + self.crop))
        x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
        mean = torch.tensor(self.mean).reshape(3, 1, 1)
        std = torch.tensor(self.std).reshape(3, 1, 1)
        return ((x - mean) / std).contiguous()

    def load(self, file: str | os.PathLike) -> Tensor:
        """An image file -> ``float32 [3, crop, crop]``.

        Raises:
            ValueError: the file cannot be read as an image (the message names it).
        """
        from PIL import Image

        try:
            with Image.open(file) as image:
                return self(image)
        except OSError as exc:
            raise ValueError(f"{file}: cannot be read as an image ({exc}).") from exc
