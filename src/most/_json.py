"""One JSON encoder for every file the library writes (results, metrics, reports, Flower's
summaries): tensors as lists, paths as strings, NaN and inf as null."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

__all__ = ["dumps"]


def _json_default(obj):
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _clean(obj):
    """NaN and inf become null: JSON has no such numbers."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def dumps(obj, *, keep_nonfinite: bool = False, **kwargs) -> str:
    """``obj`` as JSON (tensors as lists, paths as strings); NaN and inf become null unless
    ``keep_nonfinite``, which writes them as ``NaN``/``Infinity`` (as :func:`json.dumps` does)."""
    return json.dumps(obj if keep_nonfinite else _clean(obj), default=_json_default, **kwargs)
