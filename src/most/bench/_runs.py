"""The finished runs of a ``most bench`` call, in the results store of ``most run``.

Every finished run is a run folder of :mod:`most.experiments.store` under ``OUT/runs``::

    OUT/
        results.json, table.md, *.png   the suite's outputs, written once every run is done
        runs/FOLDER/                    one per run; the suite names it (``MosT/seed0``, ...)
            config.json                 the suite, the run's key and the call's settings
            result.json                 the run's numbers (written atomically); marks the run done

Resuming works as for ``most run``: a stopped call leaves its finished runs; a call with
``resume`` keeps and skips those made with the same settings and makes only the missing ones;
finished runs made with other settings are refused, naming what differs (:class:`RunStore`).
The settings include torch's CPU kernels (:func:`cpu_kernels`): where a run's choice is tied or
nearly so (between optimal transport plans, or a client's best models), it can follow the last
bits of the losses, which another kernel set (AVX2 or AVX-512) rounds differently.

A run that reads data records a digest of the data it read (:data:`DATA_DIGEST`,
:func:`data_digest`), and the data is compared by that digest, not by the path it was read
from: the same files reached by another path (a link, a relative path) resume, other data
under the same path does not.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import weakref
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, cast

import numpy as np

from .._env import environ
from .._kernels import cpu_kernels
from ..checkpoint import differing_paths, fingerprint
from ..experiments.spec import safe_name
from .._json import dumps
from . import RUNS_DIR
from ..experiments.store import CorruptFileError, RunFolder, WriterLock, check_no_links

#: the one file of finished runs that versions before the results store wrote; never read
LEGACY_RUNS_FILE = "runs.jsonl"


#: the setting under which the run store records torch's CPU kernels
KERNELS = "cpu_kernels"

#: the setting under which a run records a digest of the data it read (:func:`data_digest`); the
#: federated runs also record it with their numbers (``result.json``)
DATA_DIGEST = "data_digest"


def data_digest(*parts) -> str:
    """A short hex digest (sha256) of data: tensors and arrays by dtype, shape and bytes; strings,
    numbers, ``None``; lists, tuples and dicts of them, in order. Equal data give the same digest
    wherever it was read from; another order of the rows, another value or another dtype give
    another."""
    import torch

    h = hashlib.sha256()

    def add(value) -> None:
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().contiguous().numpy()
        if isinstance(value, np.ndarray):
            h.update(f"array{value.dtype.str}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, Mapping):
            h.update(f"dict{len(value)}".encode())
            for k, v in value.items():
                add(k)
                add(v)
        elif isinstance(value, (list, tuple)):
            h.update(f"list{len(value)}".encode())
            for v in value:
                add(v)
        elif value is None or isinstance(value, (str, bool, int, float)):
            text = repr(value)
            h.update(f"{type(value).__name__}{len(text)}:{text}".encode())
        else:
            raise TypeError(f"data_digest cannot read a {type(value).__name__}")

    add(parts)
    return h.hexdigest()[:16]


def _plain(value):
    """``value`` as it reads back from a run's ``config.json`` (tuples as lists, paths as strings, ...)."""
    return json.loads(dumps(fingerprint(value)))


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def folder_name(*parts) -> str:
    """A run folder's path from its parts: each part a name made safe for a file name, or a
    ``(name, value)`` pair, written ``name=value`` (``lr=0.01``); the pairs of one part are joined
    by ``_``. ``folder_name("zdt1", ("MGDA", ("lr", 0.01)), "seed0")`` is ``zdt1/MGDA_lr=0.01/seed0``."""
    def one(part) -> str:
        if isinstance(part, str):
            return safe_name(part)
        return "_".join(one(p) if isinstance(p, str) else safe_name(f"{p[0]}={_value(p[1])}") for p in part)

    return "/".join(one(part) for part in parts)


def _value(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_value(v) for v in value)
    return repr(value)


class RunStore:
    """The finished runs of one ``most bench SUITE`` call, kept in ``out / RUNS_DIR``.

    Args:
        out: the suite's output folder.
        settings: what the runs depend on; a call that reuses finished runs must give the same.
            A dict (the same for every run), or a function of a run's key giving that run's
            settings (those of the problem or the data it uses), or ``None`` for a key this call
            neither makes nor reads: such a stored run is not compared.
        suite: the command's name (``mtl``, ``federated``, ...), written into every run folder.
        folder: a run's folder, relative to ``out / RUNS_DIR``, from its key (:func:`folder_name`).
        resume: keep the finished runs of an earlier call and make only the missing ones.
        restart: remove the runs of an earlier call first.
        paths: the settings that say where the data was read from (``data_path``): never compared
            where the run identifies its data by :data:`DATA_DIGEST` (in its settings, or, as the
            federated runs, in its ``result.json``); for a run stored without a digest (the
            earlier format) those it recorded are compared instead, as before.
        scoped: the settings only some runs use (ZDT's rounds, the fairness problems' rounds, the
            CNN's image size): a stored run's value is not compared where this call's settings of
            that run leave the setting out (the earlier format recorded every setting for every run).
        required: the keys a run's ``result.json`` must hold for the suite to read it (or a
            function of the run's key giving them); :meth:`get` refuses one without them as a
            damaged file.

    Raises ``ValueError`` before any work: when finished runs were made with other settings
    (naming what differs), when the folder holds finished runs but neither ``resume`` nor
    ``restart`` is given (a forgotten ``--resume`` never costs the finished runs), when it holds
    folders that are not runs of this suite (``restart`` never removes them), and when it holds
    the ``runs.jsonl`` of an earlier version (``restart`` removes it). A stored file that cannot be
    read raises :class:`~most.experiments.store.CorruptFileError`. Keys are tuples of JSON
    values, built the same way on every call (``float(lr)``, not ``1`` in one call and ``1.0``
    in the next)."""

    def __init__(self, out, settings: dict | Callable[[tuple], dict | None], *, suite: str,
                 folder: Callable[[tuple], str], resume: bool = False, restart: bool = False,
                 paths: Iterable[str] = (), scoped: Iterable[str] = (),
                 required: Iterable[str] | Callable[[tuple], Iterable[str]] = ()):
        if resume and restart:
            raise ValueError("--resume and --restart exclude each other; choose one.")
        self.out, self.root = Path(out), Path(out) / RUNS_DIR
        self.suite, self._folder = suite, folder
        self._settings = settings
        self._kernels = cpu_kernels()
        self._paths, self._scoped = frozenset(paths), frozenset(scoped)
        self._required = required
        legacy = self.out / LEGACY_RUNS_FILE
        if legacy.exists() and not restart:
            raise ValueError(f"{legacy} holds runs in the format of an earlier version, which is no longer read; "
                             "start over with --restart (which removes it), or choose another --out.")
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"{self.root} is a file, not the folder of the runs; remove it, or choose another --out.")
        if self.root.exists():
            check_no_links(self.out, self.root)  # the runs are written, and removed, only inside out
        # one writer: the suite's output folder is locked while this store lives (released with it
        # or when the process ends)
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock = WriterLock(self.out).__enter__()
        weakref.finalize(self, self._lock.__exit__, None, None, None)
        stored = self._stored()
        if restart:
            legacy.unlink(missing_ok=True)
            self._remove([folder for folder, _ in stored])
            return
        finished = [(folder, config) for folder, config in stored if folder.status == "done"]
        self._check_settings(finished)
        if finished and not resume:
            raise ValueError(f"{self.root} holds {len(finished)} finished run(s) of an earlier call: reuse them "
                             "with --resume (only the missing runs are made), or start over with --restart.")

    def _stored(self) -> list[tuple[RunFolder, dict]]:
        """Every run folder below the root, with its ``config.json``; refuses folders that are
        not runs of this suite."""
        out: list[tuple[RunFolder, dict]] = []
        for config_file in sorted(self.root.rglob("config.json")) if self.root.is_dir() else ():
            folder = RunFolder(config_file.parent)
            config = cast(dict, folder.stored_config())  # a dict: rglob found its config.json
            if config.get("suite") != self.suite or not isinstance(config.get("settings"), dict):
                what = f"`most bench {config['suite']}`" if isinstance(config.get("suite"), str) else "another command"
                raise ValueError(f"{folder.path} is not a run of `most bench {self.suite}` (it is one of {what}); "
                                 "choose another --out.")
            out.append((folder, config))
        return out

    def settings_of(self, key) -> dict | None:
        """The settings of the run of ``key`` as its ``config.json`` records them (with torch's CPU
        kernels), or ``None`` for a run this call neither makes nor reads."""
        settings = self._settings(tuple(key)) if callable(self._settings) else self._settings
        return None if settings is None else _plain({**settings, KERNELS: self._kernels})

    def _check_settings(self, finished: list[tuple[RunFolder, dict]]) -> None:
        differ: dict[str, tuple] = {}
        for folder, config in finished:
            key = config.get("key")
            new = self.settings_of(key) if isinstance(key, list) else None
            if new is None:  # a run this call does not use: its settings are not this call's to judge
                continue
            for path, old, now in self._differences(folder, config["settings"], new):
                differ.setdefault(path, (old, now))
        if differ:
            named = "; ".join(f"{path} ({_short(old)} then, {_short(new)} now)"
                              for path, (old, new) in list(differ.items())[:6])
            more = f" and {len(differ) - 6} more" if len(differ) > 6 else ""
            hint = (f" (torch's CPU kernels: set ATEN_CPU_CAPABILITY={str(differ[KERNELS][0]).lower()} in the "
                    "environment to make the runs with the earlier ones)" if KERNELS in differ else "")
            if DATA_DIGEST in differ:
                hint += (" (the data read now is not the data the runs were made with, whatever path it was "
                         "read from: give the earlier data)")
            raise ValueError(f"{self.root} holds runs made with other settings: {named}{more}{hint}. Repeat the call "
                             "with those settings to reuse them, start over with --restart, or choose another --out.")

    def _differences(self, folder: RunFolder, old: dict, new: dict) -> list[tuple[str, object, object]]:
        """``(setting, then, now)`` for every setting in which the stored run ``old`` differs from
        this call's settings of it, ``new``: the data by its digest where the run has one, by the
        :attr:`paths` it recorded where it has none (the earlier format); not the :attr:`scoped`
        settings ``new`` leaves out, nor the kernels of a run recorded before them."""
        digest = old.get(DATA_DIGEST)
        if digest is None and new.get(DATA_DIGEST) is not None:
            recorded = (folder.result() or {}).get(DATA_DIGEST)  # federated runs record it with their numbers
            if isinstance(recorded, str):
                old = {**old, DATA_DIGEST: recorded}
                digest = recorded
        found = []
        for path, then, now in differing_paths(old, new):
            name = path.split(".")[0]
            if name == KERNELS and then is None:  # recorded before the kernels were: not known to differ
                continue
            if name in self._scoped and name not in new:  # a setting this run does not use
                continue
            if name in self._paths and (digest is not None or name not in old):  # the data is judged by its digest
                continue
            if name == DATA_DIGEST and then is None:  # recorded before the digest: its paths are compared
                continue
            found.append((path, then, now))
        return found

    def _remove(self, folders: list[RunFolder]) -> None:
        for folder in folders:
            check_no_links(self.root, folder.path)
            shutil.rmtree(folder.path)
        for path in sorted((p for p in self.root.rglob("*") if p.is_dir()), reverse=True) if self.root.is_dir() else ():
            if not any(path.iterdir()):
                path.rmdir()
        if self.root.is_dir() and not any(self.root.iterdir()):
            self.root.rmdir()

    def folder(self, key) -> RunFolder:
        """The run folder of ``key``."""
        return RunFolder(self.root / self._folder(tuple(key)))

    def missing(self, keys: list) -> list:
        """The keys without a finished run, in order; refuses two keys with one folder."""
        seen: dict = {}
        for key in keys:
            other = seen.setdefault(self.folder(key).path, key)
            if other != key:
                raise ValueError(f"The runs {other} and {key} would share the folder {self.folder(key).path}; give "
                                 "the methods names that differ in more than punctuation.")
        return [key for key in keys if not self.done(key)]

    def make(self, keys: list, jobs: int, *, here: Callable, worker: Callable, config, desc: str,
             postfix: Callable[[tuple], dict] | None = None) -> None:
        """Makes the runs of ``keys`` that are not finished (:func:`make_runs`: ``here(key)`` in this
        process, or ``worker((config, key))`` in up to ``jobs`` worker processes) and records each one as
        it ends, under a progress bar (``desc``; ``postfix(key)`` names the last run; off unless
        ``config.progress``)."""
        from tqdm.auto import tqdm

        missing = self.missing(keys)
        with tqdm(total=len(keys), initial=len(keys) - len(missing), desc=desc, disable=not config.progress) as bar:
            for key, run in make_runs(missing, jobs, here=here, worker=worker, config=config):
                self.add(key, run)
                if postfix is not None:
                    bar.set_postfix(**postfix(key), refresh=False)
                bar.update(1)

    def make_batches(self, batches: list[list], jobs: int, *, here: Callable, worker: Callable, config, desc: str,
                     postfix: Callable[[tuple], dict] | None = None) -> None:
        """As :meth:`make`, for runs made together: each batch of keys is one job (its unfinished
        keys; ``here(keys)`` returns their runs in order, ``worker((config, keys))`` returns
        ``(keys, runs)``), and every run of a batch is recorded as the batch ends, so a stopped
        call loses at most the batches in progress."""
        from tqdm.auto import tqdm

        keys = [key for batch in batches for key in batch]
        missing = {tuple(key) for key in self.missing(keys)}
        todo = [part for part in ([key for key in batch if tuple(key) in missing] for batch in batches) if part]
        with tqdm(total=len(keys), initial=len(keys) - len(missing), desc=desc, disable=not config.progress) as bar:
            for batch, runs in make_runs(todo, jobs, here=here, worker=worker, config=config):
                for key, run in zip(batch, runs, strict=True):
                    self.add(key, run)
                if postfix is not None:
                    bar.set_postfix(**postfix(batch[-1]), refresh=False)
                bar.update(len(batch))

    def done(self, key) -> bool:
        """Whether the run of ``key`` is finished (its folder holds ``result.json``, and its
        ``config.json`` names this key)."""
        folder = self.folder(key)
        if folder.status != "done":
            return False
        remedy = _remedy(folder)
        config = folder.stored_config()
        if config is None:
            raise CorruptFileError(folder.result_file, "a result without the run's config.json", remedy)
        if config.get("key") != _plain(list(key)):
            raise CorruptFileError(folder.config_file, f"it holds the run {config.get('key')}, not {list(key)}", remedy)
        return True

    def get(self, key) -> dict | None:
        """The finished run of ``key``, read from its ``result.json``, or None. A result without
        the keys the suite reads (``required``) is refused as damaged, naming the file."""
        if not self.done(key):
            return None
        folder = self.folder(key)
        run = cast(dict, folder.result())  # a dict: the run is done
        required = self._required(tuple(key)) if callable(self._required) else self._required
        missing = [name for name in required if name not in run]
        if missing:
            raise CorruptFileError(folder.result_file, f"it lacks {', '.join(map(repr, missing))}, which the "
                                   f"`most bench {self.suite}` table reads", _remedy(folder))
        return run

    def add(self, key, run: dict) -> dict:
        """Records a finished run in its folder (``config.json``, then ``result.json``, each
        written atomically) and returns it as read back, as a resumed call reads it."""
        settings = self.settings_of(key)
        if settings is None:
            raise ValueError(f"The run {list(key)} is not one of this call's runs.")
        folder = self.folder(key)
        check_no_links(self.root, folder.path)
        folder.path.mkdir(parents=True, exist_ok=True)
        folder.write_config({"suite": self.suite, "key": list(key), "settings": settings})
        folder.write_result(run, keep_nonfinite=True)
        return cast(dict, self.get(key))  # a dict: both files were just written


def _remedy(folder: RunFolder) -> str:
    """What to do about a damaged file of the run folder ``folder``."""
    return f"Delete the folder {folder.path} (its run is made again with --resume)."


#: environment variables that set the thread pools of the BLAS and OpenMP libraries a process loads
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def in_workers(worker: Callable, jobs: list, processes: int, threads: int) -> Iterator:
    """Yields ``worker(job)`` for every job, made in ``processes`` spawned worker processes with
    ``threads`` threads each, in the order the jobs finish.

    ``threads`` bounds torch's thread pool and those of the BLAS libraries NumPy and SciPy load
    (through the environment the workers start with, so a library loaded late is bounded too):
    with the machine's default, every worker would start one BLAS thread per core, and the
    workers would crowd each other out. ``worker`` must be a module-level function and the jobs
    picklable. Spawn, not fork: a forked child of a process that has run torch's thread pool
    can hang. A stopped call (Ctrl-C, which the workers ignore) or a failed job stops the
    workers' jobs too."""
    import multiprocessing

    with environ({name: str(threads) for name in _THREAD_VARIABLES}):  # the workers start with it
        pool = multiprocessing.get_context("spawn").Pool(processes, initializer=_worker_init, initargs=(threads,))
    try:
        yield from pool.imap_unordered(worker, jobs)
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.close()
        pool.join()


def worker_count(jobs: int, tasks: int) -> int:
    """The worker processes that make ``tasks`` jobs when ``jobs`` are asked for: at most one per
    task and one per CPU core (``os.cpu_count()``), at least one. Each worker is a Python process
    holding torch; one more than the tasks would idle, one more than the cores would only wait
    for a core, and ``jobs=1000`` would fill the memory with processes."""
    return max(1, min(jobs, tasks, os.cpu_count() or 1))


def make_runs(tasks: list, jobs: int, *, here: Callable, worker: Callable, config) -> Iterator:
    """Yields ``(task, run)`` for every task: ``here(task)`` in this process, in order (where
    :func:`worker_count` gives one worker: ``jobs=1``, one task or one core), or
    ``worker((config, task))``, which returns ``(task, run)``, in that many worker processes
    (:func:`in_workers`, with this process's torch thread count), in the order they finish."""
    processes = worker_count(jobs, len(tasks))
    if processes == 1:
        for task in tasks:
            yield task, here(task)
        return
    import torch

    yield from in_workers(worker, [(config, task) for task in tasks], processes, torch.get_num_threads())


def _worker_init(threads: int) -> None:
    import signal
    import threading

    import torch
    from tqdm.auto import tqdm

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the main process, which stops the workers
    # tqdm's default lock is a multiprocessing semaphore, which a worker stopped by the main process
    # would leave to the resource tracker (a warning); the workers' bars are off anyway
    tqdm.set_lock(threading.RLock())
    torch.set_num_threads(threads)
