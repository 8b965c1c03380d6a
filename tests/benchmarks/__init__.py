"""Tests of the scripts in ``benchmarks/``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def script_module(name: str):
    """``benchmarks/NAME.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"_{name}_under_test", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
