"""The file of a suite's finished runs, so that an interrupted ``most bench`` call can resume.

Every finished run is appended as one JSON line, ``{"key": [...], "run": {...}}``, to
``OUT/runs.jsonl``, under a first line with the call's settings. A call with ``resume`` reuses
the runs recorded by an earlier call with the same settings and makes only the missing ones;
the file is removed once ``results.json`` is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

from .._env import environ
from ..checkpoint import atomic_write_text

#: the file of finished runs in a suite's output folder (removed once results.json is written)
RUNS_FILE = "runs.jsonl"


def _key(key) -> str:
    return json.dumps(list(key))


class RunLog:
    """The finished runs of one ``most bench SUITE`` call, kept in ``out / RUNS_FILE``.

    Args:
        out: the suite's output folder.
        settings: what the runs depend on (JSON-able); a resumed call must give the same.
        suite: the command's name, for messages.
        resume: reuse the runs recorded by an earlier call.
        restart: start the file again even if it holds runs of an earlier call.

    Raises ``ValueError``, before any work, when resuming from a file that was written with other
    settings or is not a runs file, and when the file holds runs but neither ``resume`` nor
    ``restart`` is given (so that a forgotten ``--resume`` does not throw hours of runs away).
    Keys are sequences of JSON values; a suite builds them the same way on every call
    (``float(lr)``, not ``1`` in one call and ``1.0`` in the next)."""

    def __init__(self, out, settings: dict, *, suite: str, resume: bool = False, restart: bool = False):
        self.path = Path(out) / RUNS_FILE
        self.settings = json.loads(json.dumps(settings))
        self.suite = suite
        if resume and restart:
            raise ValueError("--resume and --restart exclude each other; choose one.")
        if not (resume or restart) and self.path.is_file():
            held = len(self._text().splitlines()) - 1
            if held > 0:
                raise ValueError(f"{self.path} holds {held} finished run(s) of a call that was stopped: continue "
                                 "them with --resume, or start over with --restart.")
        self.done: dict[str, dict] = self._read() if resume else {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not (resume and self.path.is_file()):
            atomic_write_text(self.path, json.dumps({"settings": self.settings}) + "\n")

    def _text(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.path} is not a runs file written by `most bench {self.suite}` (not UTF-8 text "
                             f"at byte {exc.start}); remove it, or choose another --out.") from None

    def _read(self) -> dict:
        """The runs in the file. A last line cut short by an interruption is dropped from the file,
        so that the runs appended next start on a line of their own; a bad line before the last
        one raises ``ValueError`` naming the file and the line (the file was damaged, and the runs
        after that line would be lost silently)."""
        if not self.path.is_file():
            return {}
        text = self._text()
        lines = text.splitlines()
        try:
            header = json.loads(lines[0])["settings"]
        except (IndexError, json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{self.path} is not a runs file written by `most bench {self.suite}`; remove it, or "
                             "choose another --out.") from None
        if header != self.settings:
            differ = sorted(k for k in header.keys() | self.settings.keys() if header.get(k) != self.settings.get(k))
            raise ValueError(f"{self.path} holds runs made with other settings ({', '.join(differ)} differ); resume "
                             "with those settings, choose another --out, or leave out --resume to start again.")
        done, kept = {}, lines[:1]
        for number, line in enumerate(lines[1:], 2):
            try:
                record = json.loads(line)
                key, run = _key(record["key"]), record["run"]
                if not isinstance(run, dict):
                    raise TypeError
            except (json.JSONDecodeError, KeyError, TypeError):
                if number == len(lines):  # the line being written when the call was stopped
                    break
                raise ValueError(
                    f"{self.path}, line {number} of {len(lines)}: not a finished run (the file was damaged). Delete "
                    "that line to keep the other runs and repeat the command with --resume, or start over with "
                    "--restart.") from None
            done[key] = run
            kept.append(line)
        if len(kept) < len(lines) or not text.endswith("\n"):
            atomic_write_text(self.path, "\n".join(kept) + "\n")
        return done

    def get(self, key) -> dict | None:
        """The run recorded under ``key``, or None."""
        return self.done.get(_key(key))

    def add(self, key, run: dict) -> dict:
        """Records a finished run (written out at once: a run takes seconds, an append far less)
        and returns it."""
        with self.path.open("a") as handle:
            handle.write(json.dumps({"key": list(key), "run": run}) + "\n")
        self.done[_key(key)] = run
        return run

    def run(self, key, make) -> dict:
        """The run recorded under ``key``, else ``make()``'s, recorded."""
        found = self.get(key)
        return found if found is not None else self.add(key, make())

    def remove(self) -> None:
        """Removes the file (once the results are written)."""
        self.path.unlink(missing_ok=True)


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


def make_runs(tasks: list, jobs: int, *, here: Callable, worker: Callable, config) -> Iterator:
    """Yields ``(task, run)`` for every task: ``here(task)`` in this process, in order (``jobs=1``),
    or ``worker((config, task))``, which returns ``(task, run)``, in ``jobs`` worker processes
    (:func:`in_workers`, with this process's torch thread count), in the order they finish."""
    if jobs == 1:
        for task in tasks:
            yield task, here(task)
        return
    import torch

    yield from in_workers(worker, [(config, task) for task in tasks], jobs, torch.get_num_threads())


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
