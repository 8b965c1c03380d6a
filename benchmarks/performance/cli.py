"""The command line of the performance suite: ``python -m benchmarks.performance [PART] ...``."""

from __future__ import annotations

import importlib
import sys

#: Each part's name on the command line -> (its module, its entry function).
PARTS = {
    "solvers": ("solvers", "solvers_main"),
    "rounds": ("rounds", "rounds_main"),
    "cuda": ("cuda", "cuda_main"),
    "growth": ("growth", "main"),
    "threads": ("threads", "main"),
    "run-axis": ("run_axis", "main"),
    "tasks": ("tasks", "main"),
}


def main(argv: list[str] | None = None) -> int:
    """Runs one part (``PART ...``) or, without a part's name, the whole suite.

    Args:
        argv: the command line's arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in PARTS:
        module, function = PARTS[argv[0]]
        # imported only when asked for: a part loads torch and the library as it needs them
        entry = getattr(importlib.import_module(f"{__package__}.{module}"), function)
        return entry(argv[1:]) or 0
    from .suite import suite_main

    return suite_main(argv)
