"""Checkpoints of a run, written atomically, in a format that cannot run code.

A checkpoint holds everything the round loop needs to continue as if it had never
stopped: the models, the optimiser and method state, the previous plan, the history and
the state of the run's random generator. :func:`most.solver.run` and
:func:`most.federated.run_federated` take a :class:`Checkpoint`; resuming from it gives
the same final models as an uninterrupted run with the same seed.

**Safe to load.** The file is a :func:`torch.save` archive of tensors and plain values
(numbers, strings, lists, dicts), read back with ``torch.load(weights_only=True)``, which
refuses anything else: a checkpoint from a shared results folder cannot run code. The state
of the method objects is stored as their attribute values and copied *into* the objects of
the resumed run (:func:`restore_into`); no object is ever built from the file. Checkpoints
written by older versions as pickles are refused with a message, never unpickled.

**Same run only.** A checkpoint records a fingerprint: the loop's settings (sizes, rounds,
seed, step size, every component's constructor arguments), the method's own settings but its
progress bar (those the loop does not see, such as a ridge or preference vectors), and
whatever the caller adds (``Checkpoint(..., fingerprint=...)``; ``most run`` adds the run's
whole resolved configuration). Resuming with any of these changed raises :class:`CheckpointMismatchError`
naming the keys that differ.

**One run per file.** While a run uses a checkpoint it holds an advisory lock of the operating
system on ``.NAME.lock`` beside it (:func:`holding`); a second run given the same file, in
this process or another, is refused with :class:`CheckpointBusyError` before its first round,
instead of the two overwriting each other's state. The lock file is removed when the run
ends, and the system drops the lock of a process that is killed.

**Atomic.** The state goes to a temporary file in the same folder, is flushed to disk, and
then replaces the old checkpoint with :func:`os.replace`. A crash mid-write leaves the
previous checkpoint intact (and at worst a stray ``*.tmp`` file, ignored on load).

Examples:
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

import contextlib
import dataclasses
import errno
import functools
import hashlib
import io
import os
import pickle
import random
import secrets
import types
import warnings
from pathlib import Path

import numpy as np
import torch

from ._locks import HeldElsewhere, open_locked, sign, unlock
from ._validation import check_positive_int, short_repr

__all__ = ["Checkpoint", "CheckpointBusyError", "CheckpointError", "CheckpointMismatchError", "atomic_write_bytes",
           "atomic_write_text", "differing_paths", "fingerprint", "holding", "restore_into"]

_CODE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, functools.partial, type)
_KIND = "__checkpoint_kind__"  # tags the values that are not plain data
_FORMAT = 2  # 1 was the pickle of versions before 0.2
#: settings that checkpoints of earlier versions do not hold: the method's own settings, and a
#: federated run's data digest and architecture; compared only where both sides have them
_LATER_KEYS = ("method", "data", "architecture")


class CheckpointError(ValueError):
    """A checkpoint that cannot be read safely (cut short, not a checkpoint, or holding objects)."""


class CheckpointBusyError(CheckpointError):
    """Another run, in this process or another, is using the same checkpoint file."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint was written by a run with other settings than the one resuming from it."""


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
    """Writes ``data`` to ``path`` so that readers see the old file or the new one, never a part.

    The data go to a temporary file of a name of its own (``.NAME.*.tmp``: two writers, threads
    or processes, never share one) beside the file, which then replaces it. A ``path`` that is a
    symbolic link is written through, as ``open`` would: its target is replaced, the link kept."""
    given = Path(path)
    _refuse_link_loop(given)
    path = Path(os.path.realpath(given))
    path.parent.mkdir(parents=True, exist_ok=True)
    # a name of its own ("x": created here, never another writer's), with the usual permissions
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename in (None, str(tmp), str(path.parent)):  # a write refused (a full disk, a read-only
            raise OSError(exc.errno, exc.strerror, str(given)) from exc  # folder): the file named, not its temporary
        raise
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # a read-only folder: the error above already says why
            pass
    _fsync_dir(path.parent)


def _refuse_link_loop(path: Path) -> None:
    """An ``OSError`` (ELOOP) naming ``path`` when it is a symbolic link that leads back to itself:
    ``realpath`` would give the link itself, and the write would replace the link by a file."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link that leads back to itself (a loop); point it at a file "
                                       "or give another path", str(path)) from None


def check_writable_folder(folder: str | os.PathLike) -> None:
    """Creates ``folder`` (and its parents) if missing and checks that a file can be made there,
    so that a run refuses a read-only or unwritable place before any work instead of at its
    first save; an ``OSError`` naming the folder otherwise."""
    folder = Path(os.path.realpath(folder))
    probe = folder / f".most-write-check.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(probe, "xb"):
            pass
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(folder)) from exc
    try:
        probe.unlink()
    except OSError:  # made but not removable: the folder still takes the run's files
        pass


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` for text (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))


# --- state as plain data -------------------------------------------------------------------

def _encode(value, generator, where: str = "state"):
    """``value`` as tensors and plain data that ``torch.load(weights_only=True)`` accepts; a
    ``TypeError`` naming where in the state (``where``) a value is that no checkpoint can hold."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return value
    if isinstance(value, torch.Generator):
        if value is generator:  # the run's generator is saved once, by state; references are re-linked
            return {_KIND: "run-generator"}
        return {_KIND: "generator", "state": value.get_state()}
    if isinstance(value, random.SystemRandom):  # the system's entropy: no state to save or restore
        return {_KIND: "unsaved", "repr": repr(value)}
    if isinstance(value, random.Random):  # its state lies outside __dict__
        return {_KIND: "python-random", "state": _encode(value.getstate(), generator, where)}
    if isinstance(value, np.random.Generator):
        return {_KIND: "numpy-generator", "state": _encode(value.bit_generator.state, generator, where)}
    if isinstance(value, np.random.RandomState):
        return {_KIND: "numpy-randomstate", "state": _encode(value.get_state(legacy=False), generator, where)}
    if isinstance(value, np.ndarray):
        return {_KIND: "ndarray", "data": torch.from_numpy(np.ascontiguousarray(value))}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.dtype):
        return {_KIND: "dtype", "name": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {_KIND: "device", "name": str(value)}
    if isinstance(value, torch.Size):
        return {_KIND: "size", "items": list(value)}
    if type(value) in (list, tuple):
        return {_KIND: type(value).__name__,
                "items": [_encode(v, generator, f"{where}[{k}]") for k, v in enumerate(value)]}
    if isinstance(value, dict):
        return {_KIND: "dict", "keys": [_encode(k, generator, where) for k in value],
                "values": [_encode(v, generator, f"{where}[{k!r}]") for k, v in value.items()]}
    if isinstance(value, _CODE):  # functions, classes, modules: configuration, never state
        return {_KIND: "unsaved", "repr": repr(value)}
    if hasattr(value, "__dict__") and not isinstance(value, (list, tuple)):  # a list or tuple subclass: refused
        return {_KIND: "object", "type": _qualname(value), "state": _encode_attrs(value, generator, where)}
    raise TypeError(f"A checkpoint cannot hold the {type(value).__name__} at {where}: it holds tensors, plain "
                    "values (numbers, strings, lists, tuples, dicts), generators and objects made of them, and "
                    "would not give this one back as it was. Keep that state in one of those (e.g. a list for a set, "
                    "a tuple or dict for a named tuple).")


def _encode_attrs(obj, generator, where: str = "state") -> dict:
    return {name: _encode(v, generator, f"{where}.{name}") for name, v in vars(obj).items()}


def check_encodable(state: dict, generator: torch.Generator | None = None) -> None:
    """Raises the ``TypeError`` a save of ``state`` would, before the first round: a component
    whose state no checkpoint can hold is refused before any work, not at the first save."""
    for name, value in state.items():
        _encode(value, generator, name)


def _qualname(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


#: the module a checkpoint may name for a class of one of the library's packages -> that package.
#: ``most.methods`` and ``most.federated.methods`` were single modules and the old federated
#: modules' classes are now in ``most.federated.methods``, so a checkpoint of an earlier version
#: names e.g. ``most.methods.TransportAssignment``: the class of that name in a module of the
#: package (``most.methods.assignments.TransportAssignment``)
_MOVED_INTO_PACKAGE = {
    "most.methods": "most.methods",
    "most.federated.methods": "most.federated.methods",
    "most.federated.clustered": "most.federated.methods",
    "most.federated.personal": "most.federated.methods",
    "most.federated.mixture": "most.federated.methods",
}


def _same_type(current, stored: str) -> bool:
    """Whether ``current`` is of the class a checkpoint stored as ``stored`` (module.qualname):
    the same module and name, or a module of ``_MOVED_INTO_PACKAGE`` and a class of that name in
    a module of the package it maps to."""
    if _qualname(current) == stored:
        return True
    module, _, name = stored.rpartition(".")
    package = _MOVED_INTO_PACKAGE.get(module)
    return (package is not None and type(current).__qualname__ == name
            and type(current).__module__.startswith(package + "."))


def _decode(value, generator, current=None, where="state"):
    """The inverse of :func:`_encode`; tagged objects are restored into ``current``, never built."""
    if not isinstance(value, dict) or _KIND not in value:
        return value
    kind = value[_KIND]
    if kind == "run-generator":
        if generator is None:
            raise ValueError(f"This checkpoint's {where} refers to the run's generator; pass it to load().")
        return generator
    if kind == "generator":
        g = current if isinstance(current, torch.Generator) else torch.Generator()
        g.set_state(value["state"])
        return g
    if kind == "python-random":
        r = current if isinstance(current, random.Random) else random.Random()
        r.setstate(_decode(value["state"], generator, where=where))
        return r
    if kind in ("numpy-generator", "numpy-randomstate"):
        state = _decode(value["state"], generator, where=where)
        if kind == "numpy-randomstate":
            rs = current if isinstance(current, np.random.RandomState) else np.random.RandomState()
            rs.set_state(state)
            return rs
        bits = getattr(np.random, state["bit_generator"])
        g = current if isinstance(current, np.random.Generator) and isinstance(current.bit_generator, bits) \
            else np.random.Generator(bits())
        g.bit_generator.state = state
        return g
    if kind == "size":
        return torch.Size(value["items"])
    if kind == "ndarray":
        return value["data"].numpy()
    if kind == "dtype":
        return getattr(torch, value["name"])
    if kind == "device":
        return torch.device(value["name"])
    if kind in ("list", "tuple"):
        currents = current if isinstance(current, (list, tuple)) and len(current) == len(value["items"]) else None
        items = [_decode(v, generator, None if currents is None else currents[k], f"{where}[{k}]")
                 for k, v in enumerate(value["items"])]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        keys = [_decode(k, generator) for k in value["keys"]]
        cur = current if isinstance(current, dict) else {}
        items = {k: _decode(v, generator, cur.get(k), f"{where}[{k!r}]") for k, v in zip(keys, value["values"])}
        if isinstance(current, dict) and type(current) is not dict:  # a defaultdict, Counter, OrderedDict: kept as
            current.clear()  # the run made it (a defaultdict keeps its default), its items restored
            current.update(items)
            return current
        return items
    if kind == "unsaved":
        return current
    if kind == "object":
        if current is None or not _same_type(current, value["type"]):
            raise ValueError(
                f"The checkpoint holds a {value['type'].rsplit('.', 1)[-1]} at {where} where this run has "
                f"{'nothing' if current is None else 'a ' + type(current).__name__}: it was written by a "
                "different configuration. Start over (--restart, or delete the checkpoint)."
            )
        _restore_attrs(current, value["state"], generator, where)
        return current
    raise ValueError(f"The checkpoint's {where} has an unknown entry {kind!r}; it was written by another version.")


def _restore_attrs(obj, state: dict, generator, where: str) -> None:
    attrs = vars(obj)  # frozen dataclasses too: their __dict__ is written directly
    for name, saved in state.items():
        attrs[name] = _decode(saved, generator, attrs.get(name), f"{where}.{name}")


def restore_into(obj, saved, generator: torch.Generator | None = None) -> None:
    """Copies saved state (``Checkpoint.load()[name]`` for an object saved under ``name``)
    into ``obj`` in place, re-linking references to the run's ``generator``."""
    if not (isinstance(saved, dict) and saved.get(_KIND) == "object"):
        raise ValueError(f"Expected the saved state of an object; got {type(saved).__name__}.")
    _decode(saved, generator, obj, type(obj).__name__)


# --- fingerprints --------------------------------------------------------------------------

def fingerprint(value):
    """A plain, comparable description of a setting: numbers and strings as they are, tensors
    by shape, dtype and a digest of their values, dataclasses by type and constructor fields,
    other objects by type."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (torch.Tensor, np.ndarray)):
        t = torch.as_tensor(value).detach().cpu().contiguous()
        digest = hashlib.sha256(t.to(torch.float64 if t.is_floating_point() else t.dtype).numpy().tobytes())
        return f"tensor{list(t.shape)}:{digest.hexdigest()[:16]}"
    if isinstance(value, (list, tuple)):
        return [fingerprint(v) for v in value]
    if isinstance(value, dict):
        return {str(k): fingerprint(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {"type": type(value).__qualname__}
        out.update({f.name: fingerprint(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init})
        return out
    if isinstance(value, (Path, torch.dtype, torch.device)):
        return str(value)
    return getattr(type(value), "__qualname__", type(value).__name__)


_fingerprint = fingerprint


def differing_paths(old, new, path: str = "") -> list[tuple[str, object, object]]:
    """``(dotted path, old value, new value)`` for every leaf where two nested dicts differ
    (a key missing on one side counts as ``None``; NaN equals NaN)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += differing_paths(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
        return out
    if old != new and not (isinstance(old, float) and isinstance(new, float) and old != old and new != new):
        return [(path or "value", old, new)]
    return []


def _repeated(field: str, loop_paths: set[str]) -> bool:
    """Whether the method's setting ``field`` differs where a loop setting of the same name does
    (``rounds``; ``n_models`` as ``m``; a component's ``eps`` as ``combiner.eps``)."""
    name = "m" if field == "n_models" else field
    return any(path == name or path.split(".")[0] == name or path.endswith("." + name) for path in loop_paths)


def _described(found: list[tuple[str, object, object]]) -> list[str]:
    """Each difference of :func:`differing_paths` as the mismatch message names it."""
    return [f"{path} ({short_repr(a)} in the checkpoint, {short_repr(b)} now)" for path, a, b in found]


def _differences(old, new) -> list[str]:
    return _described(differing_paths(old, new))


def check_same_dtype(saved: torch.Tensor, current: torch.Tensor, what: str = "parameters") -> None:
    """Refuses a checkpoint whose ``saved`` tensor has another dtype than the run's ``current``
    one: a run of another problem (a float64 model resumed into a float32 one would go on in
    float64, unlike the run it resumes)."""
    if saved.dtype != current.dtype:
        old, new = (str(t.dtype).removeprefix("torch.") for t in (saved, current))
        raise CheckpointMismatchError(
            f"The checkpoint holds {old} {what} and this run's are {new}: it was written by a run of another "
            "problem or model. Resume with the same one, or start over (--restart, or delete the checkpoint).")


class Checkpoint:
    """Where and how often a run saves its state, and what identifies the run.

    Args:
        path: the checkpoint file (its folder is created).
        every: rounds between checkpoints; the last round is always saved.
        fingerprint: plain data (numbers, strings, lists, dicts) identifying the run beyond
            the loop's own settings, e.g. its resolved configuration; a resume with a
            different fingerprint is refused.
    """

    def __init__(self, path: str | os.PathLike, every: int = 10, fingerprint: dict | None = None):
        self.path = Path(path)
        if self.path.is_dir():
            raise ValueError(f"The checkpoint path {self.path} is a folder; give a file path inside it, e.g. "
                             f"{self.path / 'run.ckpt'}.")
        self.every = check_positive_int(every, name="every")
        self.fingerprint = _fingerprint(fingerprint) if fingerprint is not None else None

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.path)!r}, every={self.every})"

    def due(self, round: int, rounds: int) -> bool:
        """Whether to save after round ``round`` (0-based) of ``rounds``."""
        return (round + 1) % self.every == 0 or round + 1 == rounds

    def exists(self) -> bool:
        return self.path.is_file()

    def check_writable(self) -> None:
        """Creates the checkpoint's folder if missing and checks that it takes files: called by a
        run before its first round, so that a place it cannot save to is refused before any work."""
        _refuse_link_loop(self.path)
        check_writable_folder(Path(os.path.realpath(self.path)).parent)

    def save(self, state: dict, generator: torch.Generator | None = None, *, settings: dict | None = None) -> None:
        """Saves ``state`` atomically, with ``generator``'s state and the run's fingerprint
        (``settings``, the loop's own, and the checkpoint's ``fingerprint``)."""
        payload = {
            "format": _FORMAT,
            "settings": fingerprint(settings or {}),
            "fingerprint": self.fingerprint,
            "generator_state": None if generator is None else generator.get_state(),
            "state": {k: _encode(v, generator) for k, v in state.items()},
        }
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        atomic_write_bytes(self.path, buffer.getvalue())

    def _read(self) -> dict:
        try:
            payload = torch.load(self.path, weights_only=True, map_location="cpu")
        except PermissionError as exc:  # the operating system's refusal: the file is kept, not called damaged
            raise PermissionError(exc.errno, f"{exc.strerror}; the checkpoint cannot be read (it is kept: give this "
                                             "user access to it, then resume)", str(self.path)) from None
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as exc:
            raise self._unreadable(exc) from None
        if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
            raise CheckpointError(f"The checkpoint {self.path} is not a checkpoint of this version; delete it (or "
                                  "use --restart) to start the run over.")
        state, generator_state = payload.get("state"), payload.get("generator_state")
        fresh = torch.Generator().get_state()
        problem = None
        if not isinstance(state, dict) or not isinstance(payload.get("settings"), dict) \
                or not isinstance(payload.get("fingerprint"), (dict, type(None))):
            problem = "its parts (state, settings, fingerprint) are missing or of the wrong kind"
        elif generator_state is not None and (not isinstance(generator_state, torch.Tensor)
                                              or generator_state.dtype != fresh.dtype
                                              or generator_state.shape != fresh.shape):
            problem = "its generator state is not one torch's generator can take"
        if problem is not None:
            raise CheckpointError(f"The checkpoint {self.path} is damaged ({problem}). Delete it (or use --restart) "
                                  "to start the run over.")
        return payload

    def _unreadable(self, exc: BaseException) -> CheckpointError:
        if isinstance(exc, pickle.UnpicklingError) and "weights only" in str(exc).lower():
            why = "it holds objects other than tensors and plain values, which are never loaded"
        else:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            why = f"not a checkpoint archive: {first[:120]}"
        return CheckpointError(
            f"The checkpoint {self.path} cannot be read safely ({why}). It was written by an older version "
            "(a pickle, which is never loaded because unpickling can run code), was cut short, or is not a "
            "checkpoint; delete it (or use --restart) to start the run over."
        )

    def check(self, *, settings: dict | None = None) -> None:
        """Raises what :meth:`load` would for a checkpoint that cannot be read or was written with
        other settings (:class:`CheckpointError`, :class:`CheckpointMismatchError`), restoring
        nothing: a caller checks every run it will resume before it writes anything."""
        if self.path.is_file():
            self._check_fingerprint(self._read(), settings)

    def _check_fingerprint(self, payload: dict, settings: dict | None) -> None:
        diffs = []
        if self.fingerprint is not None:
            diffs += _differences(payload["fingerprint"], self.fingerprint)
        if settings is not None:
            old, new = payload["settings"], fingerprint(settings)
            for key in _LATER_KEYS:
                if isinstance(old, dict) and (key not in old or key not in new):
                    # a checkpoint written before the key was kept, or a run of the loop alone
                    # (most.solver.run, no method): compared on the settings both hold
                    old, new = {k: v for k, v in old.items() if k != key}, {k: v for k, v in new.items() if k != key}
            found = differing_paths(old, new)
            # the method's settings repeat the loop's (rounds, lr, a combiner's eps): each difference
            # is named once, by the loop's setting where it has one
            loop = {path for path, _, _ in found if not path.startswith("method.")}
            diffs += _described([(path, a, b) for path, a, b in found
                                 if not (path.startswith("method.") and path != "method.type"
                                         and _repeated(path.split(".")[1], loop))])
        # a different method (or component) first: its many settings would otherwise hide it
        diffs.sort(key=lambda d: (d.split(" (", 1)[0] != "method.type", not d.split(" (", 1)[0].endswith("type")))
        if diffs:
            raise CheckpointMismatchError(
                f"The checkpoint {self.path} was written by a run with other settings: {'; '.join(diffs[:6])}"
                f"{f' and {len(diffs) - 6} more' if len(diffs) > 6 else ''}. Resume with the same settings, or "
                "start over (--restart, or delete the checkpoint)."
            )

    def load(self, generator: torch.Generator | None = None, *, settings: dict | None = None,
             rounds: int | None = None) -> dict | None:
        """The saved state (``None`` if there is none); restores ``generator``'s state.

        Raises :class:`CheckpointMismatchError` if the checkpoint's fingerprint differs from
        this checkpoint's ``fingerprint``, or, when given, its loop ``settings`` from these.
        Objects saved in the state come back as saved state, for :func:`restore_into`. With
        ``rounds``, the saved ``round`` must lie in ``1 .. rounds`` with one ``history`` entry
        per round done (a file edited by hand is refused, not resumed into a wrong history).
        """
        if not self.path.is_file():
            return None
        payload = self._read()
        self._check_fingerprint(payload, settings)
        if rounds is not None:
            done, history = payload["state"].get("round"), payload["state"].get("history")
            if isinstance(history, dict) and history.get(_KIND) == "list":
                history = history["items"]
            if (isinstance(done, bool) or not isinstance(done, int) or not 1 <= done <= rounds
                    or not isinstance(history, list) or len(history) != done):
                raise CheckpointError(
                    f"The checkpoint {self.path} is inconsistent (round {done!r} of {rounds}, with "
                    f"{len(history) if isinstance(history, list) else 'no'} rounds of history): it was edited or "
                    "damaged. Delete it (or use --restart) to start the run over."
                )
        try:
            if generator is not None and payload["generator_state"] is not None:
                generator.set_state(payload["generator_state"])
            return {k: v if isinstance(v, dict) and v.get(_KIND) == "object" else _decode(v, generator, where=k)
                    for k, v in payload["state"].items()}
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
            raise CheckpointError(f"The checkpoint {self.path} is damaged ({type(exc).__name__}: "
                                  f"{' '.join(str(exc).split())[:120]}). Delete it (or use --restart) to start the "
                                  "run over.") from None

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def check_checkpoint(value, *, name: str = "checkpoint") -> None:
    """Refuses a ``checkpoint`` that is neither ``None`` nor a :class:`Checkpoint`, naming the fix
    (a path is wrapped: ``Checkpoint(path, every=10)``)."""
    if value is None or isinstance(value, Checkpoint):
        return
    wanted = f"`{name}` must be a most.checkpoint.Checkpoint or None"
    if isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{wanted}; got the path {str(value)!r}. Wrap it: "
                        f"most.checkpoint.Checkpoint({str(value)!r}, every=10).")
    raise TypeError(f"{wanted}; got {type(value).__name__} {short_repr(value)}.")


def check_checkpoints(checkpoints: list) -> None:
    """Refuses entries that are neither ``None`` nor a :class:`Checkpoint`, and two that are the
    same file (each run saves its own state there: one would overwrite the other's)."""
    seen: dict[str, int] = {}
    for i, checkpoint in enumerate(checkpoints):
        check_checkpoint(checkpoint, name="checkpoint" if len(checkpoints) == 1 else f"checkpoints[{i}]")
        if checkpoint is None:
            continue
        checkpoint.check_writable()
        key = os.path.realpath(checkpoint.path)
        if key in seen:
            raise ValueError(f"`checkpoints` {seen[key]} and {i} are the same file ({checkpoint.path}): each run "
                             "saves its own state there, so one would overwrite the other; give each its own path.")
        seen[key] = i


def _lock_path(checkpoint: Checkpoint) -> Path:
    """``.NAME.lock`` beside the file the checkpoint writes (through links, as its saves do)."""
    real = Path(os.path.realpath(checkpoint.path))
    return real.parent / f".{real.name}.lock"


def _claim(checkpoint: Checkpoint) -> tuple[Path, int] | None:
    """Takes ``checkpoint``'s lock: ``(lock file, its descriptor)``; :class:`CheckpointBusyError`
    when another run holds it; ``None``, with a warning, where the file system keeps no locks."""
    path = _lock_path(checkpoint)
    for _ in range(100):
        try:
            fd, locked = open_locked(path)
        except HeldElsewhere as held:
            holder = held.holder or "a run that has not said which"
            raise CheckpointBusyError(
                f"The checkpoint {checkpoint.path} is in use by another run ({holder}); two runs saving to one file "
                "would overwrite each other's state. Wait for that run to end, or give this one another path."
            ) from None
        if not locked:
            os.close(fd)
            path.unlink(missing_ok=True)
            warnings.warn(f"The file system of {checkpoint.path} keeps no file locks, so a second run given the same "
                          "checkpoint is not refused there; give each run its own file.", UserWarning, stacklevel=4)
            return None
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(os.fstat(fd), current):
            sign(fd)
            return path, fd
        # the holder before removed the file between our open and our lock: take the new one
        unlock(fd)
        os.close(fd)
    raise CheckpointBusyError(f"The checkpoint {checkpoint.path}'s lock file {path} keeps being replaced by "
                              "other runs; give this run another path.")


def _release(path: Path, fd: int) -> None:
    """Removes the lock file and lets its lock go. On POSIX the file goes while still held: a run
    that opened it meanwhile finds it gone after its lock and makes a new one (:func:`_claim`).
    Windows removes no file that is open, so there it is closed first."""
    if os.name == "nt":
        unlock(fd)
        os.close(fd)
    try:
        path.unlink()
    except OSError:  # removed by hand, or open in another run on Windows: the next run takes it over
        pass
    if os.name != "nt":
        unlock(fd)
        os.close(fd)


@contextlib.contextmanager
def holding(checkpoints: list):
    """Holds the lock of each of ``checkpoints`` (``None`` entries skipped; checked first with
    :func:`check_checkpoints`) while the block runs, so that no other run, in this process or
    another, saves to the same file meanwhile (:class:`CheckpointBusyError` for the run that
    comes second)."""
    with contextlib.ExitStack() as stack:
        for checkpoint in checkpoints:
            claimed = None if checkpoint is None else _claim(checkpoint)
            if claimed is not None:
                stack.callback(_release, *claimed)
        yield
