"""Checkpoints of a run, written atomically, so a killed run can resume.

A checkpoint holds everything the round loop needs to continue as if it had never
stopped: the models, the optimiser and method state, the previous plan, the history and
the state of the run's random generator. :func:`most.solver.run` and
:func:`most.federated.run_federated` take a :class:`Checkpoint`; resuming from it gives
the same final models as an uninterrupted run with the same seed.

Writes are atomic: the state goes to a temporary file in the same folder, is flushed to
disk, and then replaces the old checkpoint with :func:`os.replace`. A crash mid-write leaves
the previous checkpoint intact (and at worst a stray ``*.tmp`` file, ignored on load).

Checkpoints are pickles (they hold the method objects); load only checkpoints you wrote.

Example:
    >>> import tempfile, most
    >>> from most.checkpoint import Checkpoint
    >>> problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    >>> folder = tempfile.mkdtemp()
    >>> ckpt = Checkpoint(f"{folder}/run.ckpt", every=10)
    >>> first = most.MosT(n_models=2, rounds=30, lr=0.1).fit(problem, checkpoint=ckpt)
    >>> ckpt.load()["round"]  # rounds done when the last checkpoint was written
    30
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import torch

from ._validation import check_positive_int

__all__ = ["Checkpoint", "atomic_write_bytes", "atomic_write_text"]

_GENERATOR = "most.run-generator"


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` to ``path`` so that readers see the old file or the new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` for text (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))


class _Pickler(pickle.Pickler):
    def __init__(self, file, generator):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._generator = generator

    def persistent_id(self, obj):
        # the run's generator is saved once, by state, and every reference to it (methods hold
        # one) is restored to the caller's generator, so the objects keep sharing it
        if obj is self._generator:
            return _GENERATOR
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, generator):
        super().__init__(file)
        self._generator = generator

    def persistent_load(self, pid):
        if pid == _GENERATOR:
            if self._generator is None:
                raise pickle.UnpicklingError("This checkpoint refers to a run generator; pass one to load().")
            return self._generator
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


class Checkpoint:
    """Where and how often a run saves its state.

    Args:
        path: the checkpoint file (its folder is created).
        every: rounds between checkpoints; the last round is always saved.
    """

    def __init__(self, path: str | os.PathLike, every: int = 10):
        self.path = Path(path)
        self.every = check_positive_int(every, name="every")

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.path)!r}, every={self.every})"

    def due(self, round: int, rounds: int) -> bool:
        """Whether to save after round ``round`` (0-based) of ``rounds``."""
        return (round + 1) % self.every == 0 or round + 1 == rounds

    def exists(self) -> bool:
        return self.path.is_file()

    def save(self, state: dict, generator: torch.Generator | None = None) -> None:
        """Saves ``state`` atomically; ``generator``'s state is saved with it."""
        buffer = io.BytesIO()
        payload = dict(state)
        if generator is not None:
            payload["_generator_state"] = generator.get_state()
        _Pickler(buffer, generator).dump(payload)
        atomic_write_bytes(self.path, buffer.getvalue())

    def load(self, generator: torch.Generator | None = None) -> dict | None:
        """The saved state (``None`` if there is none); restores ``generator``'s state."""
        if not self.path.is_file():
            return None
        try:
            with open(self.path, "rb") as f:
                state = _Unpickler(f, generator).load()
        except (pickle.UnpicklingError, EOFError, AttributeError, ModuleNotFoundError) as exc:
            raise ValueError(
                f"The checkpoint {self.path} cannot be read ({exc}). It was written by another version of the "
                "library or is not a checkpoint; delete it to start the run over."
            ) from exc
        gen_state = state.pop("_generator_state", None)
        if generator is not None and gen_state is not None:
            generator.set_state(gen_state)
        return state

    def check(self, state: dict, **expected) -> None:
        """Raises if ``state`` was written by a run whose settings differ from ``expected``."""
        for key, value in expected.items():
            if state.get(key) != value:
                raise ValueError(
                    f"The checkpoint {self.path} was written by a run with {key} = {state.get(key)}, but this run "
                    f"has {key} = {value}. Resume with the same settings, or delete the checkpoint to start over."
                )

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def restore_into(obj, saved) -> None:
    """Copies the state of ``saved`` (an unpickled copy of ``obj``) into ``obj`` in place."""
    if type(obj) is not type(saved):
        raise ValueError(
            f"The checkpoint holds a {type(saved).__name__} where this run has a {type(obj).__name__}: it was "
            "written by a different configuration. Delete it to start over."
        )
    vars(obj).update(vars(saved))
