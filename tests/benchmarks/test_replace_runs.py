"""``benchmarks/replace_runs.py`` joins a re-run of one method into a stored mtl or prompts
folder: the method's runs are replaced, the other rows keep theirs, and folders of other
settings or other seeds are refused before a file is written."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from tests.benchmarks import script_module

tool = script_module("replace_runs")
STORED = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "prompts"


@pytest.fixture
def folders(tmp_path):
    stored, rerun = tmp_path / "stored", tmp_path / "rerun"
    shutil.copytree(STORED, stored)
    results = json.loads((stored / "results.json").read_text())
    again = copy.deepcopy(results)
    again["runs"] = [dict(r, accuracy=0.5) for r in again["runs"] if r["method"] == "MGDA"]
    rerun.mkdir()
    (rerun / "results.json").write_text(json.dumps(again))
    return stored, rerun, results


def test_the_methods_runs_are_replaced_and_the_others_kept(folders):
    stored, rerun, before = folders
    table = tool.replace_runs("prompts", stored, rerun, "MGDA")
    after = json.loads((stored / "results.json").read_text())
    assert [r["accuracy"] for r in after["runs"] if r["method"] == "MGDA"] == [0.5] * 9
    assert [r for r in after["runs"] if r["method"] != "MGDA"] == [r for r in before["runs"] if r["method"] != "MGDA"]
    assert "| boolq | MGDA | 50.00 ± 0.00 |" in table and (stored / "table.md").read_text().strip() == table


def test_other_settings_or_seeds_are_refused_before_a_file_is_written(folders):
    stored, rerun, _ = folders
    results = json.loads((rerun / "results.json").read_text())
    written = (stored / "results.json").read_bytes()
    for change, message in ((lambda r: r["config"].update(rounds=99), "differ in rounds"),
                            (lambda r: r.update(runs=r["runs"][:-1]), "must hold 'MGDA'")):
        other = copy.deepcopy(results)
        change(other)
        (rerun / "results.json").write_text(json.dumps(other))
        with pytest.raises(SystemExit, match=message):
            tool.replace_runs("prompts", stored, rerun, "MGDA")
        assert (stored / "results.json").read_bytes() == written
