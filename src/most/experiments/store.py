"""The results store: one self-describing folder per run.

::

    RESULTS/NAME/
        experiment.toml            the experiment file as last run
        experiment.json            its name, kind, run groups and seeds in the file's order
        runs/GROUP/seedN/
            config.json            the run's resolved configuration, seed, the tables whose seed is the
                                   run's (``run_seed_in``), the data's digest and resolved path
                                   (``data_digest``, ``data_path``), library and torch versions
            metrics.jsonl          one JSON line per round
            checkpoint.pt          while the run is unfinished (tensors and plain values, loaded with
                                   torch.load(weights_only=True): nothing in it can run code; see most.checkpoint)
            result.json            final metrics, per-objective values, timings; its presence marks the run done
            final.pt               final models, plan Gamma and evaluation matrices (tensors only)

A table or a figure is rebuilt from these files alone (``most report``, ``most plot``).
"""

from __future__ import annotations

import io
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from .._json import dumps
from .._locks import HeldElsewhere, open_locked, sign, unlock
from ..checkpoint import Checkpoint, atomic_write_bytes, atomic_write_text, differing_paths
from ..config import ConfigError

__all__ = ["RunFolder", "load_runs", "CorruptFileError", "WriterLock", "BusyFolderError"]

#: The checkpoint file of an unfinished run, and the pickle an older version wrote, which is
#: never loaded (unpickling a file from a shared results folder could run arbitrary code).
CHECKPOINT = "checkpoint.pt"
LEGACY_CHECKPOINT = "checkpoint.pkl"


class CorruptFileError(ValueError):
    """A results file that cannot be read (cut short by a crash, edited, or not one of ours).

    The message names the file and what to do about it.
    """

    def __init__(self, path: Path, problem: str, remedy: str | None = None):
        self.path = Path(path)
        remedy = remedy or (f"Delete the run's folder {self.path.parent} and run the experiment again "
                            "(finished runs elsewhere are kept).")
        super().__init__(f"{self.path} is corrupt ({problem}). {remedy}")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"not UTF-8 text at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise CorruptFileError(path, f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(data, dict):
        raise CorruptFileError(path, f"expected a JSON object, found a {type(data).__name__}")
    return data


def _file(name: str) -> property:
    """The property of a run folder's file ``name``."""
    return property(lambda folder: folder.path / name, doc=f"The run's ``{name}``.")


@dataclass(frozen=True)
class RunFolder:
    """The files of one run."""

    path: Path

    config_file = _file("config.json")
    metrics_file = _file("metrics.jsonl")
    result_file = _file("result.json")
    final_file = _file("final.pt")
    checkpoint_file = _file(CHECKPOINT)

    def checkpoint(self, every: int, fingerprint: dict | None = None) -> Checkpoint:
        return Checkpoint(self.checkpoint_file, every=every, fingerprint=fingerprint)

    @property
    def status(self) -> str:
        """``"done"``, ``"interrupted"`` (a checkpoint and no result) or ``"new"``."""
        if self.result_file.is_file():
            return "done"
        if self.checkpoint_file.is_file() or (self.path / LEGACY_CHECKPOINT).is_file():
            return "interrupted"
        return "new"

    def check_no_legacy_checkpoint(self) -> None:
        """Raises :class:`CorruptFileError` for a checkpoint in the pickle format of older
        versions, which is never loaded (``reset`` removes it)."""
        legacy = self.path / LEGACY_CHECKPOINT
        if legacy.is_file():
            raise CorruptFileError(
                legacy, "a checkpoint in the pickle format of an older version, which is not loaded because "
                "unpickling a file can run arbitrary code",
                "Start this run over with --restart (or delete the file); finished runs are kept.")

    def stored_config(self) -> dict | None:
        if not self.config_file.is_file():
            return None
        return _read_json(self.config_file)

    def write_config(self, config: dict) -> None:
        atomic_write_text(self.config_file, dumps(config, indent=2) + "\n")

    def metrics(self) -> list[dict]:
        """The per-round lines, in order of rounds.

        The last line may be cut short by a crash mid-write: it is dropped. Any other line that
        is not a JSON object with a ``round``, or rounds that are not 0, 1, 2, ... in order,
        raise :class:`CorruptFileError`, since a table or a resume built on them would be
        silently wrong.
        """
        if not self.metrics_file.is_file():
            return []
        try:
            lines = self.metrics_file.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as exc:
            raise CorruptFileError(self.metrics_file, f"not UTF-8 text at byte {exc.start}") from None
        out: list[dict] = []
        for k, line in enumerate(lines):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                if k == len(lines) - 1:  # the write a crash cut short
                    break
                raise CorruptFileError(self.metrics_file, f"line {k + 1} is not valid JSON") from None
            if not isinstance(entry, dict) or entry.get("round") != len(out):
                raise CorruptFileError(
                    self.metrics_file, f"line {k + 1} should hold round {len(out)}; found "
                    f"{entry.get('round') if isinstance(entry, dict) else entry!r}")
            out.append(entry)
        return out

    def keep_metrics_before(self, round: int) -> list[dict]:
        """Keeps the lines of rounds < ``round`` (a resume starts from the checkpoint of that round).

        Raises :class:`CorruptFileError` if some of those rounds are missing, so a resumed run
        never reports "done" with rounds lost.
        """
        kept = [m for m in self.metrics() if m["round"] < round]
        if len(kept) < round:
            raise CorruptFileError(
                self.metrics_file, f"it holds rounds 0-{len(kept) - 1} but the checkpoint is at round {round}",
                "Start this run over with --restart; finished runs are kept.")
        atomic_write_text(self.metrics_file, "".join(dumps(m) + "\n" for m in kept))
        return kept

    def elapsed_before(self, round: int) -> float:
        """The seconds the run had taken when it finished round ``round - 1`` (its metrics line's
        ``elapsed``; 0 for round 0 or lines without it): what a resume from that round adds to."""
        if round <= 0:
            return 0.0
        lines = [m for m in self.metrics() if m["round"] == round - 1]
        value = lines[0].get("elapsed") if lines else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0.0

    def append_metrics(self, line: dict) -> None:
        try:
            with open(self.metrics_file, "a") as f:
                f.write(dumps(line) + "\n")
                f.flush()
        except OSError as exc:
            if exc.filename is None:  # a write refused (a full disk, a file-size limit): name the file
                raise OSError(exc.errno, exc.strerror, str(self.metrics_file)) from exc
            raise

    def write_final(self, tensors: dict[str, torch.Tensor | None]) -> None:
        buffer = io.BytesIO()
        torch.save({k: v for k, v in tensors.items() if v is not None}, buffer)
        atomic_write_bytes(self.final_file, buffer.getvalue())

    def final(self) -> dict[str, torch.Tensor]:
        """The final tensors (loaded with ``weights_only=True``: nothing in the file runs)."""
        try:
            out = torch.load(self.final_file, weights_only=True, map_location="cpu")
        except FileNotFoundError:
            raise
        except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for a bad file
            raise CorruptFileError(self.final_file, f"cannot be read as tensors: {str(exc).splitlines()[0]}") from None
        if not isinstance(out, dict):
            raise CorruptFileError(self.final_file, f"expected a dict of tensors, found a {type(out).__name__}")
        return out

    def write_result(self, result: dict, *, keep_nonfinite: bool = False) -> None:
        """Writes ``result.json`` atomically, which marks the run done. ``keep_nonfinite`` keeps
        NaN and inf (the bench suites record a failed candidate's numbers as they are); ``most run``
        writes them as null."""
        atomic_write_text(self.result_file, dumps(result, keep_nonfinite=keep_nonfinite, indent=2) + "\n")

    def result(self) -> dict | None:
        if not self.result_file.is_file():
            return None
        return _read_json(self.result_file)

    def reset(self) -> None:
        """Removes what an unfinished run left (checkpoint, a legacy checkpoint, metrics)."""
        for f in (self.checkpoint_file, self.path / LEGACY_CHECKPOINT, self.metrics_file):
            f.unlink(missing_ok=True)


class BusyFolderError(ValueError):
    """Another process is writing into the same results folder (it holds the folder's lock)."""


class WriterLock:
    """One writer per results folder: an advisory lock of the operating system on ``ROOT/.lock``,
    held while a command writes there.

    A second process that asks for it gets :class:`BusyFolderError` naming the holder (its
    process id, machine and command, which the holder writes into the file). The system drops
    the lock when its process ends, however it ends, so a run killed with ``kill -9`` leaves
    nothing that blocks a resume.
    """

    #: the folders this process holds, with how many holders each (the lock is per process: a
    #: command that opens one folder twice, e.g. a suite's store inside a run, is one writer)
    _held: dict[str, list[int]] = {}  # key -> [holders, file descriptor]

    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = self.root / ".lock"
        self._key: str | None = None

    def __enter__(self) -> "WriterLock":
        key = os.path.realpath(self.path)
        if key in WriterLock._held:
            WriterLock._held[key][0] += 1
            self._key = key
            return self
        if self.path.is_symlink():
            raise ConfigError(f"{self.path} is a symbolic link; a run writes only inside {self.root}. Delete it.")
        try:
            fd, locked = open_locked(self.path)
        except HeldElsewhere as held:
            holder = held.holder or "a process that has not said which"
            raise BusyFolderError(
                f"{self.root} is being written by another process ({holder}). Wait for it to finish, or stop it "
                "(e.g. `kill PID`) and continue its runs with --resume."
            ) from None
        if not locked:
            warnings.warn(f"The file system of {self.root} keeps no file locks, so a second process writing there is "
                          "not refused; run one command at a time on this folder.", UserWarning, stacklevel=2)
        sign(fd)
        self._key = key
        WriterLock._held[key] = [1, fd]
        return self

    def __exit__(self, *exc) -> None:
        if self._key is None:
            return
        held = WriterLock._held[self._key]
        held[0] -= 1
        if held[0] == 0:
            del WriterLock._held[self._key]
            os.ftruncate(held[1], 0)
            unlock(held[1])
            os.close(held[1])
        self._key = None


def check_not_linked(base: Path, path: Path) -> None:
    """Refuses ``path`` when it, or a folder between ``base`` (excluded) and it, is a symbolic
    link: what the library writes below ``--out`` lands only there (a link in a shared results
    folder could point its writes anywhere). ``base`` itself may be a link: the user chose it."""
    base, path = Path(base), Path(path)
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        parts = path.parts
        base = Path(parts[0]) if parts else base
        parts = parts[1:]
    current = base
    for part in parts:
        current = current / part
        if current.is_symlink():
            raise ConfigError(f"{current} is a symbolic link; the library writes only inside {base} and never through "
                              "a link. Replace it with a real folder or file, or choose another output folder.")


def missing_folders(path: str | os.PathLike) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first: the folders a
    ``mkdir(parents=True)`` of it makes. Absolute and normalised, so that ``a/new/../b`` names
    the folders it reaches (``a/b``), never one that existed before."""
    where = Path(os.path.abspath(path))
    return [p for p in (where, *where.parents) if not p.exists()]


def remove_unwritten(made: list[Path]) -> None:
    """Removes the folders ``made`` (:func:`missing_folders`, taken before they were made),
    deepest first, that hold nothing but lock files and empty folders: a call refused before any
    work leaves no trace. It stops at the first folder that holds a file. A removal that fails
    (an open lock file on Windows) is left as it is, so that a cleanup never hides the refusal
    it follows."""
    try:
        for folder in made:
            if not folder.is_dir():
                continue
            entries = list(folder.rglob("*"))
            if any(e.name != ".lock" and not e.is_dir() for e in entries):
                return
            for entry in sorted(entries, key=lambda e: len(e.parts), reverse=True):
                entry.rmdir() if entry.is_dir() else entry.unlink()
            folder.rmdir()
    except OSError:
        pass


def remove_leftovers(folder: Path) -> None:
    """Removes what an interrupted write can leave in a run folder: the temporary files of an
    atomic write (``.NAME.*.tmp``), the lock file of a checkpoint whose run was killed
    (``.NAME.lock``; no run holds it while the folder's lock is held) and, once ``result.json``
    marks the run done, its checkpoint. Called under the folder's :class:`WriterLock`, when no write is under way."""
    if not folder.is_dir():
        return
    for entry in (*folder.glob(".*.tmp"), *folder.glob(".*.lock")):  # a checkpoint's lock left by a killed run
        if entry.is_file() and not entry.is_symlink():
            entry.unlink(missing_ok=True)
    if (folder / "result.json").is_file():
        (folder / CHECKPOINT).unlink(missing_ok=True)


def check_no_links(root: Path, folder: Path) -> None:
    """Refuses a run folder reached through a symbolic link, or holding one: a run writes only
    inside the results root (a shared results folder could point a run's writes elsewhere)."""
    check_not_linked(root, folder)
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.is_symlink():
            raise ConfigError(f"{entry} is a symbolic link; a run writes only inside {root}. Delete it, or write "
                              "to another --out.")


#: the tables of a run's configuration whose generator may take the run seed
SEEDED_TABLES = ("data", "problem")


#: what a run's ``config.json`` records of the data it was trained on, beside the ``[data]`` table
#: as the file wrote it: the digest of the loaded data set
#: (:meth:`~most.federated.data.FederatedDataset.digest`), and ``data.path`` resolved to an
#: absolute path (a relative one is read from the working folder, so one file run from two
#: folders reads two data sets)
DATA_DIGEST = "data_digest"
DATA_PATH = "data_path"

#: the keys of a run's configuration that the runs of one group share (all but the seed)
GROUP_KEYS = ("kind", "engine", "method", "data", "model", "federated", "problem")

#: the keys of a run's configuration that say what it is trained and measured on (the problem or
#: the data, and the model); the groups of one experiment share them
SETTING_KEYS = ("kind", "data", "model", "problem")

_UNSET = object()


def _table_seed(config: dict, table: str):
    value = config.get(table)
    return value.get("seed", _UNSET) if isinstance(value, dict) else _UNSET


def run_seeded(configs: Sequence[dict], table: str) -> bool:
    """Whether the ``seed`` of ``table`` (``"data"`` or ``"problem"``) is each run's own seed in
    ``configs``: it differs between them, and in each equals the run's seed. A seed that is the
    same in every run is one the file fixed (or one run alone): it is compared as any value."""
    seeds = [_table_seed(c, table) for c in configs]
    return any(s != seeds[0] for s in seeds) and all(
        isinstance(s, int) and not isinstance(s, bool) and s == c.get("seed") for s, c in zip(seeds, configs))


def group_views(configs: Sequence[dict], keys: Sequence[str] = GROUP_KEYS, *, data: bool = True) -> list[dict]:
    """The parts of ``configs`` (run configurations as ``config.json`` holds them) that must be
    equal for the runs to belong together, one per config: the runs of one group (``keys``
    :data:`GROUP_KEYS`), or runs on one setting (:data:`SETTING_KEYS`).

    The rule, one for ``most run`` (which runs join a results folder) and ``most report`` and
    ``most plot`` (which runs a mean is over): the values of ``keys``, but for

    * the ``seed`` of a data or problem table that is each run's own (:func:`run_seeded`): a set
      of runs some file makes, whether it fixed that seed or left it to the runs;
    * the data, judged by its digest (:data:`DATA_DIGEST`) where every config records one and
      the data tables are alike (a copy of the data read from another path is the same data),
      else by ``data.path`` resolved (:data:`DATA_PATH`) where every config records it, else
      (runs recorded without either) by ``data.path`` as written.

    ``data=False`` leaves the data's path and identity out: the check that can be made before
    the data is loaded."""
    configs = list(configs)
    seeded = [t for t in SEEDED_TABLES if t in keys and run_seeded(configs, t)]
    identity: str | None = None
    if "data" in keys:
        if not data:
            identity = ""
        elif "data" not in seeded and all(isinstance(c.get(DATA_DIGEST), str) for c in configs):
            identity = DATA_DIGEST
        elif all(isinstance(c.get(DATA_PATH), str) for c in configs):
            identity = DATA_PATH
    views = []
    for config in configs:
        view = {k: config.get(k) for k in keys}
        for table in seeded:
            view[table] = {k: v for k, v in config[table].items() if k != "seed"}  # a dict: run_seeded
        data_table = view.get("data")
        if identity is not None and isinstance(data_table, dict):
            view["data"] = {k: v for k, v in data_table.items() if k != "path"}
        if identity:
            view[identity] = config.get(identity)
        views.append(view)
    return views


def group_differences(configs: Sequence[dict], keys: Sequence[str] = GROUP_KEYS, *,
                      data: bool = True) -> list[list[str]]:
    """For each of ``configs``, the dotted keys in which it differs from the first under the rule
    of :func:`group_views` (empty: it belongs with the first)."""
    views = group_views(configs, keys, data=data)
    return [[path for path, _, _ in differing_paths(views[0], view)] for view in views]


def describe_data(config: dict, digest: bool = True) -> str:
    """The data a run configuration names, for a message: its name, where it was read from and
    (with ``digest``) its digest, as far as the configuration records them."""
    table = config["data"] if isinstance(config.get("data"), dict) else {}
    where = config.get(DATA_PATH) or table.get("path")
    text = repr(table.get("name", "?")) + (f" from {where}" if where else "")
    return text + (f" (digest {config[DATA_DIGEST]})" if digest and isinstance(config.get(DATA_DIGEST), str) else "")


def on_other_data(diffs: Sequence[str]) -> bool:
    """Whether ``diffs`` (of :func:`group_differences`) say that two runs read other data."""
    return any(d in (DATA_DIGEST, DATA_PATH) for d in diffs)


def _run_order(config_file: Path) -> tuple:
    """The order of run folders: by group folder, then by seed as a number (``seed2`` before
    ``seed10``); a folder not named ``seedN`` after those that are."""
    folder = config_file.parent
    named = re.fullmatch(r"seed(\d+)", folder.name)
    return folder.parent.parts, (0, int(named.group(1)), "") if named else (1, 0, folder.name)


def load_runs(results_dir: str | os.PathLike) -> list[tuple[RunFolder, dict, dict | None]]:
    """Every run under ``results_dir``: ``(folder, config, result or None)``, sorted by group folder
    and, within a group, by seed (as numbers)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"No results folder at {root}. Run an experiment first: most run EXPERIMENT.toml.")
    runs = []
    for config_file in sorted(root.rglob("config.json"), key=_run_order):
        folder = RunFolder(config_file.parent)
        if not folder.path.parent.parent.name == "runs":  # not a run folder of `most run` (OUT/NAME/runs/GROUP/seedN)
            continue
        config = _read_json(config_file)
        if not is_run_config(config):
            continue
        runs.append((folder, config, folder.result()))
    if not runs:
        raise FileNotFoundError(
            f"{root} holds no runs written by `most run` (no runs/GROUP/seedN/config.json below it). Point to the "
            "folder `most run` wrote, e.g. results/NAME."
        )
    return runs


def is_run_config(config: object) -> bool:
    """Whether ``config`` is a ``config.json`` that ``most run`` wrote (its kind, group and versions)."""
    return (isinstance(config, dict) and config.get("kind") in ("centralised", "federated")
            and isinstance(config.get("group"), str) and isinstance(config.get("versions"), dict))
