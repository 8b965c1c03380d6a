"""SuperGLUE text-pair tasks for the mixture-of-soft-prompts benchmark (most.problems._superglue)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests._shared import SHARED_DATA
import torch

from most.problems import SUPERGLUE_ENV, TextTask, load_superglue

SUPERGLUE_DIR = SHARED_DATA / "superglue"
needs_data = pytest.mark.skipif(
    not SUPERGLUE_DIR.is_dir(), reason=f"needs the SuperGLUE jsonl files in {SUPERGLUE_DIR} (not shipped)"
)
TASKS = ("boolq", "multirc", "wic")
# Labelled validation instances in the SuperGLUE files (MultiRC: answers, one repeat dropped).
N_VALIDATION = {"boolq": 3270, "multirc": 4847, "wic": 638}


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def loaded():
    """``loaded(task, n_train=128, seed=0)``, each combination read once per module."""
    cache: dict = {}

    def get(task: str, n_train: int = 128, seed: int = 0) -> TextTask:
        key = (task, n_train, seed)
        if key not in cache:
            cache[key] = load_superglue(task, SUPERGLUE_DIR, n_train=n_train, seed=seed)
        return cache[key]

    return get


# ---------------------------------------------------------------------- real data
@needs_data
@pytest.mark.parametrize("task", TASKS)
def test_counts_labels_and_format(loaded, task):
    t = loaded(task)
    assert t.name == task and t.n_labels == 2
    assert len(t.train_texts) == 128 and t.train_labels.shape == (128,)
    for split in ("train", "val", "test"):
        texts, labels = t.split(split)
        assert labels.dtype == torch.int64 and labels.shape == (len(texts),)
        assert set(labels.unique().tolist()) == {0, 1}
        assert all(isinstance(p, tuple) and len(p) == 2 and all(isinstance(s, str) and s for s in p) for p in texts)
    n_eval = len(t.val_texts) + len(t.test_texts)
    borrowed = t.info["train_from_validation"]
    assert n_eval + borrowed == N_VALIDATION[task]
    if task == "boolq":  # no BoolQ/train.jsonl here: the 64 FewGLUE examples, then 64 validation ones
        assert t.info["train_pool"] == 64 and borrowed == 64
        assert len(t.val_texts) == len(t.test_texts) == 1603
    if task == "wic":
        assert len(t.val_texts) == len(t.test_texts) == 319
        assert all(": " in a for a, _ in t.train_texts)
    if task == "multirc":  # halved by paragraph: each half is about half of the answers
        assert abs(len(t.val_texts) - len(t.test_texts)) <= 132
        assert t.info["val_paragraphs"] + t.info["test_paragraphs"] == 83
    summary = t.summary()
    assert summary.startswith(f"{task}: 2 labels")
    for split in ("train", "val", "test"):
        assert f"{split}" in summary and str(len(t.split(split)[0])) in summary


@needs_data
@pytest.mark.parametrize("task", TASKS)
def test_splits_disjoint_and_validation_halved(loaded, task):
    t = loaded(task)
    train, val, test = (set(t.split(s)[0]) for s in ("train", "val", "test"))
    assert len(train) == 128 and len(val) == len(t.val_texts) and len(test) == len(t.test_texts)
    assert not (train & val) and not (train & test) and not (val & test)
    if task == "multirc":  # no paragraph in two splits
        paragraphs = [{b for _, b in s} for s in (train, val, test)]
        assert not (paragraphs[0] & paragraphs[1]) and not (paragraphs[0] & paragraphs[2])
        assert not (paragraphs[1] & paragraphs[2])
    if task == "wic":  # val + test are exactly the validation file
        records = _read(SUPERGLUE_DIR / "WiC" / "val.jsonl")
        pairs = {(f"{r['word']}: {r['sentence1']}", r["sentence2"]): int(r["label"]) for r in records}
        assert val | test == set(pairs)
        got = dict(zip(t.val_texts + t.test_texts, (t.val_labels.tolist() + t.test_labels.tolist())))
        assert got == pairs
    if task == "boolq":  # the FewGLUE examples are all in train; validation = train rest + val + test
        few = {(r["question"], r["passage"]) for f in ("fewglue_train32", "fewglue_dev32")
               for r in _read(SUPERGLUE_DIR / "BoolQ" / f"{f}.jsonl")}
        validation = {(r["question"], r["passage"]) for r in _read(SUPERGLUE_DIR / "BoolQ" / "val.jsonl")}
        assert few <= train and train - few <= validation
        assert (train - few) | val | test == validation


@needs_data
@pytest.mark.parametrize("task", TASKS)
def test_deterministic_by_seed(loaded, task):
    a, b = loaded(task), load_superglue(task, SUPERGLUE_DIR, seed=0)
    for split in ("train", "val", "test"):
        assert a.split(split)[0] == b.split(split)[0]
        assert torch.equal(a.split(split)[1], b.split(split)[1])
    other = loaded(task, seed=1)
    assert set(other.train_texts) != set(a.train_texts)
    assert set(other.val_texts) != set(a.val_texts)


@needs_data
def test_training_sets_nested_and_halves_independent_of_n_train(loaded, monkeypatch):
    small, big = loaded("wic", n_train=16), loaded("wic")
    assert small.train_texts == big.train_texts[:16]
    assert small.val_texts == big.val_texts and small.test_texts == big.test_texts
    # BoolQ: n_train <= 64 is drawn from FewGLUE only, so the whole validation split is halved.
    few = loaded("boolq", n_train=64)
    assert few.info["train_from_validation"] == 0 and len(few.val_texts) == len(few.test_texts) == 1635
    assert set(few.train_texts) == set(loaded("boolq").train_texts[:64])
    # the environment variable stands in for `path`
    monkeypatch.setenv(SUPERGLUE_ENV, str(SUPERGLUE_DIR))
    assert load_superglue("WiC", n_train=16).train_texts == small.train_texts


@needs_data
def test_n_train_larger_than_pool():
    with pytest.raises(ValueError, match=r"`n_train` = 5429 is larger than the 5428 available for wic"):
        load_superglue("wic", SUPERGLUE_DIR, n_train=5429)
    with pytest.raises(ValueError, match=r"3332 available for boolq: .*64 FewGLUE .*3270 validation"):
        load_superglue("boolq", SUPERGLUE_DIR, n_train=3333)
    assert len(load_superglue("boolq", SUPERGLUE_DIR, n_train=3332).test_texts) == 1


# ---------------------------------------------------------------------- tiny files
def _write(path: Path, records: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _boolq(i: int, label: bool = True) -> dict:
    return {"question": f"is {i} even", "passage": f"Number -- {i} is a number.", "idx": i, "label": label}


def _wic(i: int, label: bool = False) -> dict:
    return {"word": f"w{i}", "sentence1": f"a w{i} here.", "sentence2": f"another w{i}.", "idx": i, "label": label}


def _multirc(p: int, n_questions: int = 2, n_answers: int = 3) -> dict:
    questions = [
        {"question": f"q{p}.{q}?", "idx": q,
         "answers": [{"text": f"a{a}", "idx": a, "label": int(a == 0)} for a in range(n_answers)]}
        for q in range(n_questions)
    ]
    return {"idx": p, "version": 1.1, "passage": {"text": f"Paragraph {p}.", "questions": questions}}


def test_tiny_files_each_task(tmp_path):
    _write(tmp_path / "WiC" / "train.jsonl", [_wic(i, i % 2 == 0) for i in range(10)])
    _write(tmp_path / "WiC" / "val.jsonl", [_wic(100 + i, i % 3 == 0) for i in range(7)])
    t = load_superglue("wic", tmp_path, n_train=4)
    assert len(t.train_texts) == 4 and (len(t.val_texts), len(t.test_texts)) == (3, 4)
    assert t.train_texts[0][0].startswith("w") and ": a w" in t.train_texts[0][0]

    # BoolQ with its full training split: FewGLUE files are not needed and validation is not used for train.
    _write(tmp_path / "BoolQ" / "train.jsonl", [_boolq(i) for i in range(5)])
    _write(tmp_path / "BoolQ" / "val.jsonl", [_boolq(10 + i, i % 2 == 0) for i in range(6)])
    t = load_superglue("boolq", tmp_path, n_train=5)
    assert t.info["train_from_validation"] == 0 and (len(t.val_texts), len(t.test_texts)) == (3, 3)
    assert t.train_texts[0] == (t.train_texts[0][0], f"Number -- {t.train_texts[0][0].split()[1]} is a number.")
    with pytest.raises(ValueError, match=r"larger than the 5 available for boolq: the training split .*train\.jsonl"):
        load_superglue("boolq", tmp_path, n_train=6)

    # MultiRC: one instance per answer; the validation paragraphs are not split between val and test.
    _write(tmp_path / "MultiRC" / "train.jsonl", [_multirc(p) for p in range(3)])
    _write(tmp_path / "MultiRC" / "val.jsonl", [_multirc(10 + p, n_questions=1 + p % 2) for p in range(6)])
    t = load_superglue("multirc", tmp_path, n_train=18)
    assert len(t.train_texts) == 18 and t.train_labels.sum() == 6
    assert ("q0.0? a1", "Paragraph 0.") in t.train_texts
    assert len(t.val_texts) + len(t.test_texts) == 27
    assert not ({b for _, b in t.val_texts} & {b for _, b in t.test_texts})


def test_duplicates_dropped(tmp_path):
    train = [_wic(i) for i in range(6)] + [_wic(0), _wic(1, label=True), _wic(100)]  # repeat, conflict, in val
    _write(tmp_path / "WiC" / "train.jsonl", train)
    _write(tmp_path / "WiC" / "val.jsonl", [_wic(100 + i) for i in range(4)] + [_wic(100)])
    t = load_superglue("wic", tmp_path, n_train=4)
    assert t.info["dropped"] == {"train_repeats": 1, "train_conflicting_labels": 2, "train_in_validation": 1,
                                 "validation_repeats": 1, "validation_conflicting_labels": 0}
    assert t.info["train_pool"] == 5 and len(t.val_texts) + len(t.test_texts) == 4


# ---------------------------------------------------------------------- errors
def test_unknown_task_and_bad_arguments_before_any_work(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError, match=r"Unknown SuperGLUE task 'boolk' \(did you mean 'boolq'\?\)"):
        load_superglue("boolk", missing)
    with pytest.raises(ValueError, match=r"Unknown SuperGLUE task 'rte'.*'boolq', 'multirc', 'wic'"):
        load_superglue("rte", missing)
    with pytest.raises(ValueError, match=r"`task` must be one of"):
        load_superglue(None, missing)
    for bad in (0, -3, 1.5, True, "128"):
        with pytest.raises(ValueError, match=r"`n_train` must be an int >= 1"):
            load_superglue("wic", missing, n_train=bad)
    for bad in (-1, 1.0, None):
        with pytest.raises(ValueError, match=r"`seed` must be an int in \[0, 2\*\*64\)"):
            load_superglue("wic", missing, seed=bad)


def test_missing_directory_names_argument_and_env(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    pattern = rf"directory .*nowhere \(the `path` argument\) does not exist.*{SUPERGLUE_ENV}"
    with pytest.raises(FileNotFoundError, match=pattern):
        load_superglue("wic", missing)
    monkeypatch.delenv(SUPERGLUE_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match=rf"no `path` given and {SUPERGLUE_ENV} is not set"):
        load_superglue("wic")
    monkeypatch.setenv(SUPERGLUE_ENV, str(missing))
    with pytest.raises(FileNotFoundError, match=rf"nowhere \(from {SUPERGLUE_ENV}\) does not exist"):
        load_superglue("wic")


def test_missing_files_named(tmp_path):
    _write(tmp_path / "WiC" / "train.jsonl", [_wic(0)])
    with pytest.raises(FileNotFoundError, match=r"SuperGLUE WiC: missing .*/WiC/val\.jsonl in the data directory"):
        load_superglue("wic", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"missing .*/MultiRC/train\.jsonl, .*/MultiRC/val\.jsonl"):
        load_superglue("multirc", tmp_path)
    _write(tmp_path / "BoolQ" / "val.jsonl", [_boolq(0)])
    _write(tmp_path / "BoolQ" / "fewglue_train32.jsonl", [_boolq(1)])
    with pytest.raises(FileNotFoundError, match=r"missing .*/BoolQ/fewglue_dev32\.jsonl .*either train\.jsonl or both"):
        load_superglue("boolq", tmp_path)


def test_malformed_and_unlabelled_files(tmp_path):
    _write(tmp_path / "WiC" / "train.jsonl", [_wic(i) for i in range(4)])
    val = tmp_path / "WiC" / "val.jsonl"
    val.write_text(json.dumps(_wic(10)) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"WiC/val\.jsonl, line 2: not valid JSON"):
        load_superglue("wic", tmp_path)
    unlabelled = {k: v for k, v in _wic(11).items() if k != "label"}
    _write(val, [_wic(10), unlabelled])
    with pytest.raises(ValueError, match=r"line 2: missing the field 'label' \(an unlabelled file"):
        load_superglue("wic", tmp_path)
    _write(val, [_wic(10), {**_wic(11), "label": "yes"}])
    with pytest.raises(ValueError, match=r"line 2: 'label' must be true/false or 0/1; got 'yes'"):
        load_superglue("wic", tmp_path)
    _write(val, [_wic(10), {**_wic(11), "sentence2": 3}])
    with pytest.raises(ValueError, match=r"line 2: 'sentence2' must be a str; got int"):
        load_superglue("wic", tmp_path)


def test_text_task_validation():
    ok = dict(name="t", label_names=("a", "b"), train_texts=[("x", "y")], train_labels=torch.tensor([1]),
              val_texts=[], val_labels=torch.zeros(0, dtype=torch.int64), test_texts=[("u", "v")],
              test_labels=[0])
    t = TextTask(**ok)
    assert t.test_labels.dtype == torch.int64 and t.label_counts("train") == [0, 1]
    assert t.summary().splitlines() == ["t: 2 labels (a, b)", "  train 1: a 0 (0.0%), b 1 (100.0%)",
                                        "  val   0: a 0, b 0", "  test  1: a 1 (100.0%), b 0 (0.0%)"]
    assert repr(t) == "TextTask(name='t', label_names=('a', 'b'), n_train=1, n_val=0, n_test=1)"
    with pytest.raises(ValueError, match=r"`train_texts` has 1 instances but `train_labels` has 2"):
        TextTask(**{**ok, "train_labels": torch.tensor([0, 1])})
    with pytest.raises(ValueError, match=r"`train_labels` must be in 0\.\.1"):
        TextTask(**{**ok, "train_labels": torch.tensor([2])})
    with pytest.raises(ValueError, match=r"`train_labels` must be a vector \[N\] of integer labels"):
        TextTask(**{**ok, "train_labels": torch.tensor([1.0])})
    with pytest.raises(ValueError, match=r"`train_texts\[0\]` must be a pair of strings"):
        TextTask(**{**ok, "train_texts": [("x",)]})
    with pytest.raises(ValueError, match=r"`split` must be one of .*did you mean 'test'"):
        t.split("tset")
