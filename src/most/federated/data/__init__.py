"""Federated data (the package's modules: :mod:`._dataset`)."""

from ._dataset import *  # noqa: F401,F403
from ._dataset import __all__, _split_counts  # noqa: F401
