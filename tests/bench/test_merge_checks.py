"""The checks of the federated post-processing tools (merge, compare, rescore, held): pick rules that
differ, runs that lack a key the others have, and results files that are cut short or of another suite."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from most.bench import _compare, _merge, _rescore
from most.bench import federated as fb
from most.bench._curves import ResultsFileError, load_results, read_json
from most.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _bench(out, *seeds):
    res = runner.invoke(app, ["bench", "federated", "--dataset", "synthetic", "--rounds", "8", "--server-lr", "1",
                              "--method", "MosT", "--method", "FedAvg", "--out", str(out), "--quiet",
                              *[a for s in seeds for a in ("--seed", str(s))]])
    assert res.exit_code == 0, res.output
    return load_results(out)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge_checks")
    _bench(root / "a", 0, 1)
    _bench(root / "b", 2, 3)
    return root


def _copy(results):
    return json.loads(json.dumps(results))


def test_folders_scored_under_other_pick_rules_are_not_joined_nor_compared(folders):
    a, b = load_results(folders / "a"), load_results(folders / "b")
    rescored = _copy(b)
    rescored["pick_rule"] = "loss"
    with pytest.raises(_merge.MergeError, match=r"source 1 .*'loss', the destination under 'validation' "
                                                r"\(the paper's\).*rescore"):
        _merge.merge(_copy(a), [rescored])
    # a folder without the key is the paper's rule: old folders join folders that name it
    named = _copy(b)
    named["pick_rule"] = "validation"
    assert _merge.merge(_copy(a), [named]) == ["seeds [2, 3]"]
    variant = _copy(a)
    variant["pick_rule"] = "loss"
    with pytest.raises(_compare.CompareError, match=r"'loss', the main table under 'validation'.*--pick validation"):
        _compare.compare(variant, a, "FedAvg")
    # both rescored under one rule: compared, and the header names that rule, not the paper's pick
    main = _copy(a)
    main["pick_rule"] = "loss"
    report = _compare.compare(variant, main, "FedAvg")
    assert "pick rule 'loss' (95 % CI)" in report and "paper's pick (95 % CI)" not in report
    assert "paper's pick (95 % CI)" in _compare.compare(_copy(a), a, "FedAvg")


def test_a_join_drops_the_summaries_that_not_every_run_supports(folders):
    a, old = load_results(folders / "a"), load_results(folders / "b")
    for entry in a["methods"].values():  # the destination has "groups held", the older source neither it
        for run in entry["runs"]:  # nor the loss pick
            run["group_ari_plan"] = 1.0
    fb.add_summaries(a)
    for entry in old["methods"].values():
        for run in entry["runs"]:
            for key in [k for k in run if k.endswith("_loss_pick")]:
                del run[key]
        for key in [k for k in entry if k.endswith("_loss_pick") or k == "group_ari_plan"]:
            del entry[key]
    old.pop("paired_vs_most_loss_pick", None)
    assert "mean_loss_pick" in a["methods"]["FedAvg"] and "paired_vs_most_loss_pick" in a
    _merge.merge(a, [old])
    for entry in a["methods"].values():
        assert "mean_loss_pick" not in entry and "group_ari_plan" not in entry
        assert entry["mean"]["mean"] == pytest.approx(sum(r["mean"] for r in entry["runs"]) / 4)
    assert "paired_vs_most_loss_pick" not in a and a["paired_vs_most"]["FedAvg"]["n"] == 4
    table = fb.table_markdown(a)  # no KeyError for the runs without the key
    assert "loss pick" not in table and "groups held" not in table


def test_a_merge_that_fails_writes_nothing(folders, tmp_path, monkeypatch):
    before = {f: (folders / "a" / f).read_bytes() for f in ("results.json", "table.md", "curves.json")}

    def broken(results):
        raise KeyError("group_ari_plan")

    monkeypatch.setattr(_merge.fb, "table_markdown", broken)
    with pytest.raises(KeyError):
        _merge.merge_folders(folders / "a", [folders / "b"])
    assert {f: (folders / "a" / f).read_bytes() for f in before} == before


def _bad_folders(folders, tmp_path):
    good = json.loads((folders / "a" / "results.json").read_text())
    (tmp_path / "trunc").mkdir()
    (tmp_path / "trunc" / "results.json").write_text(json.dumps(good)[:300])
    (tmp_path / "curves").mkdir()
    (tmp_path / "curves" / "results.json").write_text(json.dumps(good))
    (tmp_path / "curves" / "curves.json").write_text('{"methods": ')
    (tmp_path / "structure").mkdir()  # what `most bench structure` writes: no methods
    (tmp_path / "structure" / "results.json").write_text(json.dumps({"config": {}, "settings": {}}))
    return {"trunc": "trunc/results.json is not valid JSON", "curves": "curves/curves.json is not valid JSON",
            "structure": "structure/results.json has no 'methods'"}


def test_a_file_cut_short_or_of_another_suite_is_refused_in_one_line(folders, tmp_path):
    for name, said in _bad_folders(folders, tmp_path).items():
        with pytest.raises(_merge.MergeError, match=said):
            _merge.merge_folders(folders / "a", [tmp_path / name], out=tmp_path / "x")
        with pytest.raises(_rescore.RescoreError, match=said):
            _rescore.rescore_folder(tmp_path / name, tmp_path / "x", "loss")
        with pytest.raises(ResultsFileError, match=said):
            load_results(tmp_path / name)
    assert not (tmp_path / "x").exists()
    with pytest.raises(ResultsFileError, match="no 'methods'"):
        read_json(tmp_path / "structure" / "results.json")
    tools = [sys.executable, str(ROOT / "benchmarks" / "federated_tools.py")]
    for args in (["compare", folders / "a", tmp_path / "structure", "--method", "FedAvg"], ["held", tmp_path / "trunc"]):
        res = subprocess.run(tools + [str(a) for a in args], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert ("has no 'methods'" if args[0] == "compare" else "is not valid JSON") in res.stderr


def test_held_says_it_cannot_recompute_the_groups_of_other_data_sets():
    # runs scored against the data set's planted groups when they ran ("groups found")
    results = {"config": {"dataset": "mixture-reference"}, "methods": {"IFCA": {"runs": [{"seed": 0, "group_ari": 0.5}]}}}
    with pytest.raises(ValueError, match="only of the fashion and femnist loaders.*'mixture-reference'"):
        _compare.add_groups_held(results)
    for config in ({"dataset": "fashion", "rotations": 1}, {"dataset": "synthetic"}):  # no groups at all
        with pytest.raises(ValueError, match="no planted client groups"):
            _compare.add_groups_held({"config": config, "methods": {"FedAvg": {"runs": [{"seed": 0}]}}})
