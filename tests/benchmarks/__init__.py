"""Tests of the benchmarks: the package ``benchmarks.performance`` and the scripts in ``benchmarks/``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def script_module(name: str):
    """The script ``benchmarks/NAME.py`` imported as a module (a script is not a module of the package)."""
    spec = importlib.util.spec_from_file_location(f"_{name}_under_test", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
