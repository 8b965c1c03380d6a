"""The prompts benchmark's run settings (its data by its digest), table and figure names; the
benchmark end to end is in tests/prompts/test_prompts.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests._shared import SHARED_DATA

from most.bench import prompts
from most.bench._runs import DATA_DIGEST
from most.problems import load_superglue

SUPERGLUE = SHARED_DATA / "superglue"


@pytest.mark.skipif(not (SUPERGLUE / "WiC").is_dir(), reason=f"SuperGLUE not found at {SUPERGLUE}")
def test_a_run_identifies_its_data_by_its_digest_not_by_its_path(tmp_path):
    shutil.copytree(SUPERGLUE / "WiC", tmp_path / "copy" / "WiC")
    (tmp_path / "link").symlink_to(tmp_path / "copy")
    config = prompts.PromptsConfig(tasks=("wic",), seeds=(0,), n_train=8)

    def settings(path, seed=0):
        tasks = {"wic": {seed: load_superglue("wic", path, n_train=8, seed=seed)}}
        return prompts._settings(config, "encoder", "torch", tasks)

    here = settings(tmp_path / "copy")(("wic", "MosT", 0))
    assert here is not None and len(here[DATA_DIGEST]) == 16 and here["data_path"] is None  # not the folder read
    assert settings(SUPERGLUE)(("wic", "MGDA", 0)) == here == settings(tmp_path / "link")(("wic", "MosT", 0))
    lines = (tmp_path / "copy" / "WiC" / "val.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "copy" / "WiC" / "val.jsonl").write_text("".join(lines[::-1]))  # other data under the same path
    assert settings(tmp_path / "copy")(("wic", "MosT", 0))[DATA_DIGEST] != here[DATA_DIGEST]
    # the runs of a task or seed this call does not run are not judged
    assert settings(SUPERGLUE)(("boolq", "MosT", 0)) is None and settings(SUPERGLUE)(("wic", "MosT", 1)) is None


def _results(seconds: list[float]) -> dict:
    runs = [{"task": "wic", "method": "MosT", "seed": i, "seconds": s, "accuracy": 0.5, "single_prompt": 0.5,
             "oracle": 0.7, "majority": 0.5} for i, s in enumerate(seconds)]
    return {"runs": runs}


def test_the_seconds_show_two_decimals_as_in_the_other_suites_tables():
    assert "| 0.75 |" in prompts.table_markdown({**_results([1.2, 0.3]), "seconds_decimals": 2})
    assert "| 1 |" in prompts.table_markdown(_results([1.2, 0.3]))  # results stored before the key: whole seconds


def test_the_figure_is_named_by_its_file_name_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p1").mkdir()
    assert prompts._figures(_results([1.0]), Path("p1")) == ["accuracy.png"]  # a folder relative to the cwd
    assert (tmp_path / "p1" / "accuracy.png").is_file()
