"""SuperGLUE text-pair tasks for the mixture-of-soft-prompts benchmark (BoolQ, MultiRC, WiC).

:func:`load_superglue` reads a task from the SuperGLUE jsonl files (not shipped) and returns a
:class:`TextTask`: the input text pairs and int64 labels of a ``train``, a ``val`` and a
``test`` split. The splits follow the few-shot protocol of the MosT benchmark (Section 6.4,
Appendix D.5), where every training instance is one objective:

* ``train`` -- ``n_train`` (default 128) instances sampled at random (``seed``) from the
  task's training split;
* ``val`` and ``test`` -- the original SuperGLUE *validation* split, halved at random
  (``seed``); the two halves are disjoint. (The SuperGLUE test labels are hidden.)

No text pair is in two splits. Exceptions to the plain protocol, each forced by the data:

* **BoolQ** -- the full training split (``BoolQ/train.jsonl``, 9427 questions) is often not
  at hand; when it is missing, the training instances come first from the 64 FewGLUE
  examples (``fewglue_train32.jsonl`` + ``fewglue_dev32.jsonl``, both drawn from the
  SuperGLUE training split) and, for ``n_train > 64``, from the validation split; the rest
  of the validation split is then halved into ``val`` and ``test``. With the default
  ``n_train = 128`` that is all 64 FewGLUE examples, 64 validation examples, and two halves
  of 1603 of the remaining 3206. When ``BoolQ/train.jsonl`` is present it is used as for the
  other tasks (and the FewGLUE files are not read).
* **MultiRC** -- an instance of SuperGLUE's MultiRC is a paragraph, a question and one
  candidate answer with a binary label ("is this answer correct?"); the nested jsonl is
  flattened into one instance per answer. The validation split is halved *by paragraph*
  (every question and answer of a paragraph goes to the same half), so no paragraph is in
  both ``val`` and ``test``; the halves then hold about half of the answers each (paragraphs
  are shuffled and each is given to the half with fewer answers so far, so the halves differ
  by at most one paragraph's answers, 132 at most; 2409 / 2438 answers from 44 / 39
  paragraphs on the SuperGLUE files for seed 0).
  Training answers are sampled one by one from the training split, whose paragraphs are not
  in the validation split, so no paragraph is in both ``train`` and ``val``/``test`` either.
* **WiC** -- as the plain protocol. The SuperGLUE files have labelled ``train`` (5428) and
  ``val`` (638) splits, which is all the protocol needs; the test gold labels of the original
  WiC release are not used.

Input texts (a pair ``(text_a, text_b)`` per instance, as a sentence encoder or a
cross-encoder takes a sentence pair; every part is stripped of surrounding whitespace):

* ``boolq`` -- ``(question, passage)``; label 1 = the answer is yes; label names
  ``("no", "yes")``. (The passage starts with its Wikipedia title: ``"Title -- text"``.)
* ``multirc`` -- ``(question + " " + answer, paragraph)``; label 1 = the candidate answer is
  correct; ``("incorrect", "correct")``.
* ``wic`` -- ``(word + ": " + sentence1, sentence2)``; label 1 = the word has the same sense
  in both sentences; ``("different_sense", "same_sense")``.

Duplicates: within the training pool and within the validation split, instances with the
same text pair are kept once (the first), and a text pair that occurs with both labels is
dropped; training-pool instances whose text pair (MultiRC: whose paragraph) is in the
validation split are dropped. On the SuperGLUE files this removes 8 of the 27243 MultiRC
training answers (6 repeats, and the two copies of one pair given both labels: 27235 remain)
and 1 of the 4848 validation answers (a repeat: 4847 remain); nothing in BoolQ or WiC.
:attr:`TextTask.info` records the counts.

Layout expected under the data directory (the SuperGLUE zip's folder names)::

    BoolQ/val.jsonl      + BoolQ/train.jsonl, or else BoolQ/fewglue_train32.jsonl and BoolQ/fewglue_dev32.jsonl
    MultiRC/train.jsonl  MultiRC/val.jsonl
    WiC/train.jsonl      WiC/val.jsonl

Example (needs the data)::

    >>> from most.problems import load_superglue
    >>> task = load_superglue("wic", "/data/superglue", seed=0)  # doctest: +SKIP
    >>> len(task.train_texts), task.train_labels.dtype  # doctest: +SKIP
    (128, torch.int64)
    >>> print(task.summary())  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import Tensor

from .._validation import check_positive_int
from .._paths import resolve_dir
from .._validation import did_you_mean
from .._validation import check_seed as _check_seed

__all__ = ["TextTask", "load_superglue", "SUPERGLUE_ENV"]

#: Environment variable read by :func:`load_superglue` when no path is given.
SUPERGLUE_ENV = "MOST_SUPERGLUE"

_SPLITS = ("train", "val", "test")
_TASKS = ("boolq", "multirc", "wic")
_FOLDERS = {"boolq": "BoolQ", "multirc": "MultiRC", "wic": "WiC"}
_LABEL_NAMES = {
    "boolq": ("no", "yes"),
    "multirc": ("incorrect", "correct"),
    "wic": ("different_sense", "same_sense"),
}
_FEWGLUE = ("fewglue_train32.jsonl", "fewglue_dev32.jsonl")

Pair = tuple[str, str]


# ---------------------------------------------------------------------- container
@dataclass(frozen=True, eq=False)
class TextTask:
    """A text-pair classification task split into ``train``, ``val`` and ``test``.

    Attributes:
        name: the task (``"boolq"``, ``"multirc"``, ``"wic"``).
        label_names: the name of each label; label ``k`` is ``label_names[k]``.
        train_texts, val_texts, test_texts: a list with one ``(text_a, text_b)`` pair of
            strings per instance (the format of each task is in the module docstring).
        train_labels, val_labels, test_labels: ``[N]`` int64 labels in
            ``range(len(label_names))``, aligned with the texts.
        info: provenance -- the files read, pool sizes, dropped duplicates, the protocol.

    The lists and tensors are not copied; treat them as read-only.
    """

    name: str
    label_names: tuple[str, ...]
    train_texts: list[Pair]
    train_labels: Tensor
    val_texts: list[Pair]
    val_labels: Tensor
    test_texts: list[Pair]
    test_labels: Tensor
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = tuple(str(n) for n in self.label_names)
        if len(names) < 2:
            raise ValueError(f"`label_names` must name at least two labels; got {names!r}.")
        object.__setattr__(self, "label_names", names)
        for split in _SPLITS:
            texts = [tuple(pair) for pair in getattr(self, f"{split}_texts")]
            for i, pair in enumerate(texts):
                if len(pair) != 2 or not all(isinstance(t, str) for t in pair):
                    raise ValueError(f"`{split}_texts[{i}]` must be a pair of strings (text_a, text_b); got {pair!r}.")
            labels = torch.as_tensor(getattr(self, f"{split}_labels"))
            if labels.is_floating_point() or labels.dtype == torch.bool or labels.ndim != 1:
                raise ValueError(
                    f"`{split}_labels` must be a vector [N] of integer labels; "
                    f"got dtype {labels.dtype}, shape {tuple(labels.shape)}."
                )
            labels = labels.to(torch.int64)
            if labels.shape[0] != len(texts):
                raise ValueError(
                    f"`{split}_texts` has {len(texts)} instances but `{split}_labels` has {labels.shape[0]}."
                )
            if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= len(names)):
                raise ValueError(f"`{split}_labels` must be in 0..{len(names) - 1} (one per label name).")
            object.__setattr__(self, f"{split}_texts", texts)
            object.__setattr__(self, f"{split}_labels", labels)
        object.__setattr__(self, "info", dict(self.info))

    def split(self, split: str) -> tuple[list[Pair], Tensor]:
        """``(texts, labels)`` of ``split`` (``"train"``, ``"val"`` or ``"test"``)."""
        if split not in _SPLITS:
            raise ValueError(
                f"`split` must be one of 'train', 'val', 'test'; got {split!r}{did_you_mean(split, _SPLITS)}."
            )
        return getattr(self, f"{split}_texts"), getattr(self, f"{split}_labels")

    @property
    def n_labels(self) -> int:
        return len(self.label_names)

    def label_counts(self, split: str) -> list[int]:
        """Number of instances of each label in ``split``."""
        _, labels = self.split(split)
        return torch.bincount(labels, minlength=self.n_labels).tolist()

    def summary(self) -> str:
        """A few lines: the task, then per split the number of instances and of each label."""
        lines = [f"{self.name}: {self.n_labels} labels ({', '.join(self.label_names)})"]
        width = max(len(str(len(self.split(s)[0]))) for s in _SPLITS)
        for split in _SPLITS:
            n = len(self.split(split)[0])
            counts = self.label_counts(split)
            balance = ", ".join(
                f"{name} {c} ({100.0 * c / n:.1f}%)" if n else f"{name} 0" for name, c in zip(self.label_names, counts)
            )
            lines.append(f"  {split:<5} {n:>{width}}: {balance}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        sizes = ", ".join(f"n_{s}={len(self.split(s)[0])}" for s in _SPLITS)
        return f"TextTask(name={self.name!r}, label_names={self.label_names!r}, {sizes})"


# ---------------------------------------------------------------------- reading
@dataclass
class _Instance:
    text: Pair
    label: int
    group: str  # MultiRC: the paragraph; otherwise the text pair itself


def _records(file: Path):
    with open(file, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{file}, line {lineno}: not valid JSON ({err.msg}).") from None
            if not isinstance(record, dict):
                raise ValueError(f"{file}, line {lineno}: expected a JSON object; got {type(record).__name__}.")
            yield lineno, record


def _field(record: Mapping, key: str, where: str, *, kind: type = str):
    if key not in record:
        hint = " (an unlabelled file, e.g. the SuperGLUE test split?)" if key == "label" else ""
        raise ValueError(f"{where}: missing the field {key!r}{hint}.")
    value = record[key]
    if kind is int:  # a label: JSON true/false or 0/1
        if value in (0, 1) and isinstance(value, (bool, int)):
            return int(value)
        raise ValueError(f"{where}: {key!r} must be true/false or 0/1; got {value!r}.")
    if not isinstance(value, kind):
        raise ValueError(f"{where}: {key!r} must be a {kind.__name__}; got {type(value).__name__}.")
    return value


def _read_pairs(file: Path, pair) -> list[_Instance]:
    """One labelled instance per line; ``pair(record, where)`` gives its text pair."""
    out = []
    for lineno, r in _records(file):
        where = f"{file}, line {lineno}"
        text = pair(r, where)
        out.append(_Instance(text, _field(r, "label", where, kind=int), "\0".join(text)))
    return out


def _read_boolq(file: Path) -> list[_Instance]:
    return _read_pairs(file, lambda r, where: (_field(r, "question", where).strip(),
                                               _field(r, "passage", where).strip()))


def _read_wic(file: Path) -> list[_Instance]:
    return _read_pairs(file, lambda r, where: (f"{_field(r, 'word', where).strip()}: "
                                               f"{_field(r, 'sentence1', where).strip()}",
                                               _field(r, "sentence2", where).strip()))


def _read_multirc(file: Path) -> list[_Instance]:
    out = []
    for lineno, r in _records(file):
        where = f"{file}, line {lineno}"
        passage = _field(r, "passage", where, kind=dict)
        paragraph = _field(passage, "text", f"{where}, passage").strip()
        for qi, q in enumerate(_field(passage, "questions", f"{where}, passage", kind=list)):
            qwhere = f"{where}, question {qi}"
            if not isinstance(q, dict):
                raise ValueError(f"{qwhere}: expected a JSON object; got {type(q).__name__}.")
            question = _field(q, "question", qwhere).strip()
            for ai, a in enumerate(_field(q, "answers", qwhere, kind=list)):
                awhere = f"{qwhere}, answer {ai}"
                if not isinstance(a, dict):
                    raise ValueError(f"{awhere}: expected a JSON object; got {type(a).__name__}.")
                text = (f"{question} {_field(a, 'text', awhere).strip()}", paragraph)
                out.append(_Instance(text, _field(a, "label", awhere, kind=int), paragraph))
    return out


_READERS: dict[str, Callable[[Path], list[_Instance]]] = {
    "boolq": _read_boolq,
    "multirc": _read_multirc,
    "wic": _read_wic,
}


def _dedupe(items: list[_Instance]) -> tuple[list[_Instance], int, int]:
    """Keeps the first of each text pair; drops pairs seen with both labels. Returns (kept, repeats, conflicts)."""
    labels: dict[Pair, set[int]] = {}
    for it in items:
        labels.setdefault(it.text, set()).add(it.label)
    seen: set[Pair] = set()
    kept = []
    conflicts = {t for t, ls in labels.items() if len(ls) > 1}
    for it in items:
        if it.text in conflicts or it.text in seen:
            continue
        seen.add(it.text)
        kept.append(it)
    n_conflict = sum(it.text in conflicts for it in items)
    return kept, len(items) - len(kept) - n_conflict, n_conflict


# ---------------------------------------------------------------------- locating files
_HOW = (
    "Expected the SuperGLUE jsonl files (https://super.gluebenchmark.com/tasks, the zip of each task) under one "
    "directory with the subfolders BoolQ/, MultiRC/, WiC/. Pass that directory as `load_superglue(task, path)` "
    f"or set the environment variable {SUPERGLUE_ENV} to it."
)


def _resolve_dir(path) -> tuple[Path, str]:
    return resolve_dir(path, SUPERGLUE_ENV, "SuperGLUE data", _HOW)


def _task_files(task: str, directory: Path, source: str) -> dict[str, list[Path]]:
    """``{"train": [...], "val": [...]}``; raises naming every missing file."""
    folder = directory / _FOLDERS[task]
    train = [folder / "train.jsonl"]
    if task == "boolq" and not train[0].is_file():
        train = [folder / name for name in _FEWGLUE]
    files = {"train": train, "val": [folder / "val.jsonl"]}
    missing = [f for fs in files.values() for f in fs if not f.is_file()]
    if missing:
        extra = (
            " (BoolQ needs val.jsonl and either train.jsonl or both FewGLUE files "
            f"{' and '.join(_FEWGLUE)})" if task == "boolq" else ""
        )
        raise FileNotFoundError(
            f"SuperGLUE {_FOLDERS[task]}: missing {', '.join(os.path.abspath(f) for f in missing)} in the data "
            f"directory {os.path.abspath(directory)}{source}{extra}. {_HOW}"
        )
    return files


# ---------------------------------------------------------------------- splitting
def _halve(items: list[_Instance], rng: np.random.Generator, *, by_group: bool) -> tuple[list[int], list[int]]:
    """Indices (sorted) of the ``val`` and ``test`` halves of ``items``."""
    if not by_group:
        perm = rng.permutation(len(items))
        half = len(items) // 2
        return sorted(perm[:half].tolist()), sorted(perm[half:].tolist())
    groups: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault(it.group, []).append(i)
    members = list(groups.values())
    val: list[int] = []
    test: list[int] = []
    # Shuffled groups, each to the half that has fewer instances so far (ties: val first).
    for g in rng.permutation(len(members)).tolist():
        (val if len(val) <= len(test) else test).extend(members[g])
    return sorted(val), sorted(test)


def load_superglue(
    task: str,
    path: str | os.PathLike | None = None,
    *,
    n_train: int = 128,
    seed: int = 0,
) -> TextTask:
    """A SuperGLUE task (BoolQ, MultiRC or WiC) split as in the mixture-of-soft-prompts benchmark.

    Args:
        task: ``"boolq"``, ``"multirc"`` or ``"wic"`` (case-insensitive).
        path: the directory holding the subfolders ``BoolQ/``, ``MultiRC/``, ``WiC/`` of
            SuperGLUE jsonl files (see the module docstring for the files each task needs).
            ``None`` reads the environment variable ``MOST_SUPERGLUE``.
        n_train: the number of training instances (objectives), sampled without replacement
            from the training pool. For a fixed ``seed`` the training sets are nested: the
            instances for a smaller ``n_train`` are the first ones for a larger one.
        seed: a non-negative int; the sampling of ``train`` and the halving of the
            validation split use two independent streams derived from it, so except for
            BoolQ without its training split (where the training instances beyond the 64
            FewGLUE ones are taken out of the validation split) the ``val``/``test`` halves do
            not depend on ``n_train``.

    Returns:
        a :class:`TextTask`: ``train`` in sampling order; ``val`` and ``test`` in file order
        (MultiRC: the answers of a question stay together). ``info`` holds the files read,
        the pool sizes and the duplicates dropped.

    Protocol (details and per-task exceptions in the module docstring): ``train`` =
    ``n_train`` instances of the training split; ``val``, ``test`` = the validation split
    halved at random (the first half is ``val``; for an odd count ``test`` has one more;
    MultiRC: halved by paragraph, so only about half); no text pair is in two splits.

    Raises, before reading any file, ``ValueError`` for an unknown task (suggesting the
    closest), an ``n_train`` that is not a positive int or a bad ``seed``, and
    ``FileNotFoundError`` naming the path for a missing directory (and
    ``MOST_SUPERGLUE`` / the ``path`` argument) or file; after reading, ``ValueError`` naming
    the file and line for malformed or unlabelled records, and for an ``n_train`` larger than
    the training pool (saying how many instances are available).
    """
    key = _check_task(task)
    n_train = check_positive_int(n_train, name="n_train")
    seed = _check_seed(seed)
    directory, source = _resolve_dir(path)
    files = _task_files(key, directory, source)
    pool, val_items, dropped = _read_pools(key, files)
    # BoolQ without its training split: FewGLUE first, then validation instances.
    borrow = key == "boolq" and files["train"][0].name != "train.jsonl"
    _check_n_train(n_train, key, len(pool), len(val_items), borrow, files["train"][0])
    train_rng, split_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    train, val_items, n_borrowed = _draw_train(pool, val_items, n_train, borrow, train_rng)
    val_idx, test_idx = _halve(val_items, split_rng, by_group=key == "multirc")
    val, test = [val_items[i] for i in val_idx], [val_items[i] for i in test_idx]
    info = {
        "files": {s: [str(f) for f in fs] for s, fs in files.items()},
        "train_pool": len(pool),
        "train_from_validation": n_borrowed,
        "validation_pool": len(val_items),
        "dropped": dropped,
        "seed": seed,
        "text_format": _TEXT_FORMATS[key],
    }
    if key == "multirc":
        info["val_paragraphs"] = len({it.group for it in val})
        info["test_paragraphs"] = len({it.group for it in test})
    return TextTask(key, _LABEL_NAMES[key], *_pack(train), *_pack(val), *_pack(test), info=info)


_TEXT_FORMATS = {
    "boolq": "(question, passage)",
    "multirc": '(question + " " + answer, paragraph)',
    "wic": '(word + ": " + sentence1, sentence2)',
}


def _check_task(task) -> str:
    """The task's key (``"boolq"``, ``"multirc"``, ``"wic"``)."""
    if not isinstance(task, str):
        raise ValueError(f"`task` must be one of {', '.join(map(repr, _TASKS))}; got {task!r}.")
    key = task.strip().lower()
    if key not in _TASKS:
        raise ValueError(
            f"Unknown SuperGLUE task {task!r}{did_you_mean(key, _TASKS)}. "
            f"Available: {', '.join(map(repr, _TASKS))}."
        )
    return key


def _read_pools(key: str, files: dict[str, list[Path]]) -> tuple[list[_Instance], list[_Instance], dict[str, int]]:
    """``(training pool, validation split, what was dropped)``, each deduplicated, and nothing of
    the validation split in the training pool (MultiRC: by paragraph, else by text pair)."""
    read = _READERS[key]
    pool_raw = [it for f in files["train"] for it in read(f)]
    val_raw = read(files["val"][0])
    val_items, val_repeats, val_conflicts = _dedupe(val_raw)
    pool, pool_repeats, pool_conflicts = _dedupe(pool_raw)
    held = {it.group for it in val_items} if key == "multirc" else {it.text for it in val_items}
    n_before = len(pool)
    pool = [it for it in pool if (it.group if key == "multirc" else it.text) not in held]
    dropped = {
        "train_repeats": pool_repeats,
        "train_conflicting_labels": pool_conflicts,
        "train_in_validation": n_before - len(pool),
        "validation_repeats": val_repeats,
        "validation_conflicting_labels": val_conflicts,
    }
    return pool, val_items, dropped


def _check_n_train(n_train: int, key: str, n_pool: int, n_val: int, borrow: bool, train_file: Path) -> None:
    available = n_pool + (n_val - 2 if borrow else 0)
    if n_train > available:
        if borrow:
            detail = (
                f"the training pool is the {n_pool} FewGLUE instances plus the {n_val} validation "
                f"instances, less 2 that must remain for the val/test halves"
            )
        else:
            detail = f"the training split {os.path.abspath(train_file)} has {n_pool} usable instances"
        raise ValueError(f"`n_train` = {n_train} is larger than the {available} available for {key}: {detail}.")


def _draw_train(pool: list[_Instance], val_items: list[_Instance], n_train: int, borrow: bool,
                rng: np.random.Generator) -> tuple[list[_Instance], list[_Instance], int]:
    """``(train, what is left of the validation split, instances borrowed from it)``: ``n_train``
    instances of the pool in random order, then (``borrow``) validation instances."""
    order = rng.permutation(len(pool)).tolist()
    train = [pool[i] for i in order[:n_train]]
    n_borrowed = 0
    if borrow and n_train > len(pool):
        n_borrowed = n_train - len(pool)
        taken = rng.permutation(len(val_items))[:n_borrowed].tolist()
        train += [val_items[i] for i in taken]
        gone = set(taken)
        val_items = [it for i, it in enumerate(val_items) if i not in gone]
    return train, val_items, n_borrowed


def _pack(items: list[_Instance]) -> tuple[list[Pair], Tensor]:
    """``(texts, labels)`` of ``items``."""
    return [it.text for it in items], torch.tensor([it.label for it in items], dtype=torch.int64)
