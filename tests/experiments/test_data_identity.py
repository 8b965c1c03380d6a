"""The data a run was made on: its digest and resolved path in ``config.json``; a relative
``[data] path`` read from two working folders is two data sets, never one group; folders written
before the digest still skip, resume and report; and the one rule of which runs belong together,
applied alike by ``most run``, ``most report`` and ``most plot``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from most.config import ConfigError
from most.experiments import parse_experiment, plot, report, run_experiment, summary_table
from most.experiments.store import DATA_DIGEST, DATA_PATH, group_differences

from tests._tables import CENTRAL, with_

#: a federated experiment on LEAF files under a relative path, its data fixed to seed 0
FEMNIST = {
    "name": "relative",
    "seeds": [0],
    "checkpoint_every": 1,
    "data": {"name": "femnist", "path": "data/femnist", "seed": 0},
    "model": {"name": "logistic_regression"},
    "federated": {"rounds": 3, "eval_every": 1},
    "methods": {"FedAvg": {"n_models": 2}},
}


def _leaf(folder: Path, offset: int) -> None:
    """Three writers of LEAF JSON under ``folder/train`` and ``folder/test``; ``offset`` changes
    every pixel and label (another data set under the same layout)."""
    for split, n in (("train", 10), ("test", 3)):
        users = [f"w{k}" for k in range(3)]
        blob = {"users": users, "num_samples": [n] * 3,
                "user_data": {u: {"x": [[(i + k + offset) % 10 / 10] * 784 for i in range(n)],
                                  "y": [(i + k + offset) % 62 for i in range(n)]} for k, u in enumerate(users)}}
        (folder / split).mkdir(parents=True, exist_ok=True)
        (folder / split / "all_data.json").write_text(json.dumps(blob))


@pytest.fixture
def places(tmp_path, monkeypatch) -> dict[str, Path]:
    """Working folders A and B holding other data under one relative path, C a copy of A's, and
    the results root ``out``."""
    out = {name: tmp_path / name for name in ("A", "B", "C")}
    _leaf(out["A"] / "data" / "femnist", 0)
    _leaf(out["B"] / "data" / "femnist", 5)
    shutil.copytree(out["A"] / "data", out["C"] / "data")
    out["out"] = tmp_path / "out"
    return out


def _run_in(monkeypatch, folder: Path, table: dict, out: Path, **kwargs) -> Path:
    monkeypatch.chdir(folder)
    return run_experiment(parse_experiment(table), out, progress=False, echo=lambda s: None, **kwargs)


def _configs(root: Path, group: str = "FedAvg") -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((root / "runs" / group).glob("seed*/config.json"))}


def test_config_json_records_the_datas_digest_and_its_resolved_path(places, monkeypatch):
    root = _run_in(monkeypatch, places["A"], FEMNIST, places["out"])
    config = _configs(root)["seed0"]
    assert config["data"]["path"] == "data/femnist"  # as written, so that the file still resumes
    assert config[DATA_PATH] == str((places["A"] / "data" / "femnist").resolve())
    assert isinstance(config[DATA_DIGEST], str) and len(config[DATA_DIGEST]) == 16


@pytest.mark.parametrize("seeds", [[0, 1], [1]], ids=["the finished seed listed", "another seed"])
def test_a_relative_data_path_run_from_another_folder_on_other_data_is_refused(places, monkeypatch, seeds):
    root = _run_in(monkeypatch, places["A"], FEMNIST, places["out"])
    with pytest.raises(ConfigError, match=r"seed0 (holds|is) a finished run.* made on other data than this file's "
                                          r"runs read now \(then 'femnist' from .*A/data/femnist \(digest \w+\); now "
                                          r"'femnist' from .*B/data/femnist \(digest \w+\)\)\. Give data\.path"):
        _run_in(monkeypatch, places["B"], with_(FEMNIST, seeds=seeds), places["out"])
    assert list(_configs(root)) == ["seed0"]  # nothing run, nothing written
    assert summary_table(root)["groups"]["FedAvg"]["mean"][2] == 1


def test_a_copy_of_the_same_data_read_from_another_folder_joins_the_group(places, monkeypatch):
    root = _run_in(monkeypatch, places["A"], FEMNIST, places["out"])
    _run_in(monkeypatch, places["C"], with_(FEMNIST, seeds=[0, 1]), places["out"])
    configs = _configs(root)
    assert configs["seed0"][DATA_DIGEST] == configs["seed1"][DATA_DIGEST]
    assert configs["seed0"][DATA_PATH] != configs["seed1"][DATA_PATH]
    assert summary_table(root)["groups"]["FedAvg"]["mean"][2] == 2


def test_data_that_follows_the_run_seed_is_compared_by_its_resolved_path(places, monkeypatch):
    table = with_(FEMNIST, data={"name": "femnist", "path": "data/femnist"})  # each run's own validation split
    root = _run_in(monkeypatch, places["A"], table, places["out"])
    with pytest.raises(ConfigError, match=r"seed0 is a finished run of 'FedAvg' made on other data .*then 'femnist' "
                                          r"from .*A/data/femnist; now 'femnist' from .*B/data/femnist\) \(the data follows the run "
                                          r"seed, so runs of other seeds are compared by the folder"):
        _run_in(monkeypatch, places["B"], with_(table, seeds=[1]), places["out"])
    _run_in(monkeypatch, places["A"], with_(table, seeds=[1]), places["out"])  # the same folder: joins
    assert summary_table(root)["groups"]["FedAvg"]["mean"][2] == 2


def _as_before_the_digest(root: Path) -> None:
    """Makes ``root``'s config.json files as a version that recorded neither digest nor path did."""
    for path in (root / "runs").glob("*/seed*/config.json"):
        config = json.loads(path.read_text())
        del config[DATA_DIGEST], config[DATA_PATH]
        path.write_text(json.dumps(config))


def test_a_folder_written_before_the_digest_skips_adds_seeds_and_reports_as_before(places, monkeypatch):
    root = _run_in(monkeypatch, places["A"], FEMNIST, places["out"])
    _as_before_the_digest(root)
    lines: list[str] = []
    monkeypatch.chdir(places["A"])
    run_experiment(parse_experiment(with_(FEMNIST, seeds=[0, 1])), places["out"], progress=False, echo=lines.append)
    assert "1 already done, 1 to run" in lines[0]
    assert summary_table(root)["groups"]["FedAvg"]["mean"][2] == 2
    assert "| FedAvg |" in report(root, write=False)


class _Kill(Exception):
    pass


def _interrupted(monkeypatch, folder: Path, table: dict, out: Path) -> Path:
    """Runs ``table`` from ``folder`` and stops it after its second round's checkpoint."""
    import most.experiments.runner as runner

    append = runner._append_round

    def stop(run_folder, log, state):
        append(run_folder, log, state)
        if log.round == 1:
            raise _Kill

    monkeypatch.setattr(runner, "_append_round", stop)
    with pytest.raises(_Kill):
        _run_in(monkeypatch, folder, table, out)
    monkeypatch.setattr(runner, "_append_round", append)
    return out / table["name"]


def test_an_interrupted_run_resumes_on_its_data_and_is_refused_on_other_data_before_any_work(places, monkeypatch):
    root = _interrupted(monkeypatch, places["A"], FEMNIST, places["out"])
    checkpoint = root / "runs" / "FedAvg" / "seed0" / "checkpoint.pt"
    before = checkpoint.read_bytes()
    with pytest.raises(ConfigError, match=r"seed0 holds an interrupted run made on other data .*B/data/femnist"):
        _run_in(monkeypatch, places["B"], FEMNIST, places["out"], resume=True)
    assert checkpoint.read_bytes() == before  # the refusal touched nothing
    _run_in(monkeypatch, places["C"], FEMNIST, places["out"], resume=True)  # the same data, copied
    assert json.loads((root / "runs" / "FedAvg" / "seed0" / "result.json").read_text())["resumed_from_round"] > 0


def test_an_interrupted_run_written_before_the_digest_still_resumes(places, monkeypatch):
    root = _interrupted(monkeypatch, places["A"], FEMNIST, places["out"])
    _as_before_the_digest(root)
    _run_in(monkeypatch, places["A"], FEMNIST, places["out"], resume=True)
    assert json.loads((root / "runs" / "FedAvg" / "seed0" / "result.json").read_text())["resumed_from_round"] > 0


def test_report_and_plot_refuse_a_group_of_runs_on_two_data_sets(places, monkeypatch):
    root = _run_in(monkeypatch, places["A"], with_(FEMNIST, seeds=[0, 1]), places["out"])
    path = root / "runs" / "FedAvg" / "seed1" / "config.json"
    config = json.loads(path.read_text())
    config[DATA_DIGEST] = "0123456789abcdef"  # as if seed 1 had read other files under the same path
    path.write_text(json.dumps(config))
    message = (r"group 'FedAvg' were made with different configurations \(seed0 and seed1 differ in: data_digest\); "
               r"a mean over them would mix two settings\. seed0 ran on 'femnist' from .*A/data/femnist \(digest \w+\), "
               r"seed1 on 'femnist' from .*A/data/femnist \(digest 0123456789abcdef\)\.")
    with pytest.raises(ValueError, match=message):
        report(root, write=False)
    with pytest.raises(ValueError, match=message):
        plot(root, formats=("png",))


# ----------------------------------------------------------------------------- one rule for run, report and plot
QUICK = with_(CENTRAL, name="quick", seeds=[0], methods={"MosT": {"n_models": 3, "rounds": 4, "lr": 0.1}})


def _fixed(seed: int | None, seeds: list[int]) -> dict:
    table = with_(QUICK, seeds=seeds)
    if seed is not None:
        table["problem"]["seed"] = seed
    return table


def test_runs_with_and_without_a_fixed_problem_seed_that_are_the_same_runs_are_run_and_reported(tmp_path):
    root = run_experiment(parse_experiment(_fixed(0, [0])), tmp_path, progress=False, echo=lambda s: None)
    run_experiment(parse_experiment(_fixed(None, [0, 1])), tmp_path, progress=False, echo=lambda s: None)
    assert summary_table(root)["groups"]["MosT"]["loss"][2] == 2  # seed 0's run is the same either way
    assert plot(root, formats=("png",))


def test_runs_on_a_problem_fixed_to_another_seed_are_refused_by_run_and_by_report(tmp_path):
    root = run_experiment(parse_experiment(_fixed(5, [0])), tmp_path, progress=False, echo=lambda s: None)
    with pytest.raises(ConfigError, match=r"seed0 is a finished run of 'MosT' made with a different configuration "
                                          r"\(differs in: problem\.seed\)"):
        run_experiment(parse_experiment(_fixed(None, [1])), tmp_path, progress=False, echo=lambda s: None)
    other = tmp_path / "other"
    run_experiment(parse_experiment(_fixed(None, [1])), other, progress=False, echo=lambda s: None)
    shutil.copytree(root / "runs" / "MosT" / "seed0", other / "quick" / "runs" / "MosT" / "seed0")
    with pytest.raises(ValueError, match=r"seed0 and seed1 differ in: problem\)"):
        report(other / "quick", write=False)


@pytest.mark.parametrize("seeds, run_seeds, same", [
    ([0, 0, 0], [0, 1, 2], True),     # fixed by the file
    ([0, 1, 2], [0, 1, 2], True),     # each run's own
    ([0, 1, 0], [0, 1, 2], False),    # neither
    ([5, 1], [0, 1], False),
])
def test_the_rule_takes_a_problem_seed_for_fixed_or_for_each_runs_own_never_a_mix(seeds, run_seeds, same):
    configs = [{"kind": "centralised", "seed": r, "problem": {"name": "quadratic_clusters", "seed": s},
                "method": {"n_models": 3}} for s, r in zip(seeds, run_seeds)]
    found = group_differences(configs)
    assert (not any(found)) == same
    if not same:
        assert "problem.seed" in next(d for d in found if d)


def test_data_read_through_the_environment_variable_records_its_folder_and_is_compared_by_it(places, monkeypatch):
    # no [data] path and no [data] seed: each run's data follows its seed, so runs of other seeds
    # are compared by the folder the loader read, here found through MOST_FEMNIST
    table = with_(FEMNIST, data={"name": "femnist"})
    monkeypatch.setenv("MOST_FEMNIST", str(places["A"] / "data" / "femnist"))
    root = _run_in(monkeypatch, places["A"], table, places["out"])
    stored = json.loads((root / "runs" / "FedAvg" / "seed0" / "config.json").read_text())
    assert stored[DATA_PATH] == str((places["A"] / "data" / "femnist").resolve())
    monkeypatch.setenv("MOST_FEMNIST", str(places["B"] / "data" / "femnist"))
    with pytest.raises(ConfigError, match=r"made on other data .*from .*A/data/femnist; now 'femnist' from "
                                          r".*B/data/femnist"):
        _run_in(monkeypatch, places["B"], with_(table, seeds=[1]), places["out"])
    monkeypatch.setenv("MOST_FEMNIST", str(places["A"] / "data" / "femnist"))
    _run_in(monkeypatch, places["B"], with_(table, seeds=[1]), places["out"])  # the same folder: joins
    assert summary_table(root)["groups"]["FedAvg"]["mean"][2] == 2
