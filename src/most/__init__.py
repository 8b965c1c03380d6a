"""MosT: Many-Objective Multi-Solution Transport."""

from ._warnings import ConvergenceWarning

__version__ = "0.1.0"
