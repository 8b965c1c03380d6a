"""The results store: one self-describing folder per run.

::

    RESULTS/NAME/
        experiment.toml            the experiment file as last run
        experiment.json            its name, kind and run groups in the file's order
        runs/GROUP/seedN/
            config.json            the run's resolved configuration, seed, library and torch versions
            metrics.jsonl          one JSON line per round
            checkpoint.pkl         while the run is unfinished (atomic writes; see most.checkpoint)
            result.json            final metrics, per-objective values, timings; its presence marks the run done
            final.pt               final models, plan Gamma and evaluation matrices (tensors only)

A table or a figure is rebuilt from these files alone (``most report``, ``most plot``).
"""

from __future__ import annotations

import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint import Checkpoint, atomic_write_bytes, atomic_write_text

__all__ = ["RunFolder", "load_runs"]


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


def dumps(obj, **kwargs) -> str:
    return json.dumps(_clean(obj), default=_json_default, **kwargs)


@dataclass(frozen=True)
class RunFolder:
    """The files of one run."""

    path: Path

    @property
    def config_file(self) -> Path:
        return self.path / "config.json"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def result_file(self) -> Path:
        return self.path / "result.json"

    @property
    def final_file(self) -> Path:
        return self.path / "final.pt"

    def checkpoint(self, every: int) -> Checkpoint:
        return Checkpoint(self.path / "checkpoint.pkl", every=every)

    @property
    def status(self) -> str:
        """``"done"``, ``"interrupted"`` (a checkpoint and no result) or ``"new"``."""
        if self.result_file.is_file():
            return "done"
        if (self.path / "checkpoint.pkl").is_file():
            return "interrupted"
        return "new"

    def stored_config(self) -> dict | None:
        if not self.config_file.is_file():
            return None
        return json.loads(self.config_file.read_text())

    def write_config(self, config: dict) -> None:
        atomic_write_text(self.config_file, dumps(config, indent=2) + "\n")

    def metrics(self) -> list[dict]:
        """The per-round lines (a line cut short by a crash is skipped)."""
        if not self.metrics_file.is_file():
            return []
        out = []
        for line in self.metrics_file.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def keep_metrics_before(self, round: int) -> None:
        """Drops the lines of rounds >= ``round`` (written after the checkpoint a resume starts from)."""
        kept = [m for m in self.metrics() if m.get("round", -1) < round]
        atomic_write_text(self.metrics_file, "".join(dumps(m) + "\n" for m in kept))

    def append_metrics(self, line: dict) -> None:
        with open(self.metrics_file, "a") as f:
            f.write(dumps(line) + "\n")
            f.flush()

    def write_final(self, tensors: dict[str, torch.Tensor | None]) -> None:
        buffer = io.BytesIO()
        torch.save({k: v for k, v in tensors.items() if v is not None}, buffer)
        atomic_write_bytes(self.final_file, buffer.getvalue())

    def final(self) -> dict[str, torch.Tensor]:
        return torch.load(self.final_file, weights_only=True)

    def write_result(self, result: dict) -> None:
        atomic_write_text(self.result_file, dumps(result, indent=2) + "\n")

    def result(self) -> dict | None:
        if not self.result_file.is_file():
            return None
        return json.loads(self.result_file.read_text())

    def reset(self) -> None:
        """Removes what an unfinished run left (checkpoint, metrics)."""
        for f in (self.path / "checkpoint.pkl", self.metrics_file):
            f.unlink(missing_ok=True)


def load_runs(results_dir: str | os.PathLike) -> list[tuple[RunFolder, dict, dict | None]]:
    """Every run under ``results_dir``: ``(folder, config, result or None)``, sorted by folder."""
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"No results folder at {root}. Run an experiment first: most run EXPERIMENT.toml.")
    runs = []
    for config_file in sorted(root.rglob("config.json")):
        folder = RunFolder(config_file.parent)
        runs.append((folder, json.loads(config_file.read_text()), folder.result()))
    if not runs:
        raise FileNotFoundError(
            f"{root} holds no runs (no */config.json below it). Point to the folder `most run` wrote, "
            "e.g. results/NAME."
        )
    return runs
