"""Which seed is a run's, and where reports and figures go: a data or problem seed the file fixes
(even one equal to a run seed) against one each run fills in, config.json folders written without
``run_seed_in``, the first seed of the one-run figures, figure files that never share a path, and
a results folder that holds one experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from most.config import ConfigError
from most.experiments import parse_experiment, plot, report, run_experiment, summary_table
from most.experiments.figures import _file_names
from most.experiments.store import load_runs

import tests._tables as tables
from tests._tables import with_

#: a centralised experiment of one quick method; its problem takes a seed
QUICK = with_(tables.CENTRAL, name="quick", seeds=[0, 1],
              methods={"MosT": {"n_models": 3, "rounds": 4, "lr": 0.1}})


def _run(table: dict, out: Path) -> Path:
    return run_experiment(parse_experiment(table), out, progress=False, echo=lambda s: None)


def _seeded(table: dict, source: str, seed: int | None, seeds: list[int]) -> dict:
    """``table`` with its seeds, and its ``source`` table's seed fixed to ``seed`` (None: unset)."""
    out = with_(table, seeds=seeds)
    out[source].pop("seed", None)
    if seed is not None:
        out[source]["seed"] = seed
    return out


def _configs(root: Path, group: str = "MosT") -> dict[int, dict]:
    return {int(p.parent.name[4:]): json.loads(p.read_text())
            for p in (root / "runs" / group).glob("seed*/config.json")}


def _without_marker(root: Path) -> None:
    """Makes ``root``'s config.json files as a version that did not write ``run_seed_in`` did."""
    for path in (root / "runs").glob("*/seed*/config.json"):
        config = json.loads(path.read_text())
        del config["run_seed_in"]
        path.write_text(json.dumps(config))


_KINDS = [pytest.param(QUICK, "problem", id="centralised"),
          pytest.param(with_(tables.FED, methods={"FedAvg": {"n_models": 2}}), "data", id="federated")]


# ----------------------------------------------------------------------------- fixed and run-filled seeds
@pytest.mark.parametrize("table, source", _KINDS)
@pytest.mark.parametrize("marker", [True, False], ids=["config.json now", "config.json without run_seed_in"])
def test_a_fixed_data_or_problem_seed_equal_to_a_run_seed_is_one_setting_over_the_seeds(tmp_path, table, source,
                                                                                           marker):
    root = _run(_seeded(table, source, 0, [0, 1]), tmp_path)
    configs = _configs(root, next(iter(table["methods"])))
    assert {s: c[source]["seed"] for s, c in configs.items()} == {0: 0, 1: 0}
    assert all(c["run_seed_in"] == [] for c in configs.values())
    if not marker:
        _without_marker(root)
    group = next(iter(summary_table(root)["groups"].values()))
    assert group["seconds"][2] == 2  # a mean over both seeds, with its std
    assert " ± " in report(root, write=False).split("\n| ")[2]
    _run(_seeded(table, source, 0, [1, 2]), tmp_path)  # more seeds on the same data join the group
    assert next(iter(summary_table(root)["groups"].values()))["seconds"][2] == 3
    with pytest.raises(ConfigError, match=rf"seed\d is a finished run of .* \(differs in: {source}\.seed\)"):
        _run(_seeded(table, source, None, [3]), tmp_path)  # seed 3's own data: not the runs' data


@pytest.mark.parametrize("table, source", _KINDS)
@pytest.mark.parametrize("marker", [True, False], ids=["config.json now", "config.json without run_seed_in"])
def test_a_data_or_problem_seed_the_run_fills_in_differs_per_run_and_is_reported(tmp_path, table, source, marker):
    root = _run(_seeded(table, source, None, [0, 1]), tmp_path)
    configs = _configs(root, next(iter(table["methods"])))
    assert {s: c[source]["seed"] for s, c in configs.items()} == {0: 0, 1: 1}
    assert all(c["run_seed_in"] == [source] for c in configs.values())
    if not marker:
        _without_marker(root)
    assert next(iter(summary_table(root)["groups"].values()))["seconds"][2] == 2
    _run(_seeded(table, source, None, [2]), tmp_path)
    assert next(iter(summary_table(root)["groups"].values()))["seconds"][2] == 3
    with pytest.raises(ConfigError, match=rf"seed1 is a finished run of .* \(differs in: {source}\.seed\)"):
        _run(_seeded(table, source, 0, [3]), tmp_path)  # seed 1 ran on its own data, not seed 0's


def test_other_groups_on_a_fixed_problem_may_join_the_folder_but_not_on_another(tmp_path):
    _run(_seeded(QUICK, "problem", 0, [0, 1]), tmp_path)
    other = _seeded(with_(QUICK, methods={"MGDA": {"n_models": 3, "rounds": 4}}), "problem", 0, [0, 1])
    root = _run(other, tmp_path)
    assert list(summary_table(root)["groups"]) == ["MGDA", "MosT"]
    with pytest.raises(ConfigError, match=r"finished runs of '(MosT|MGDA)' made on another problem.*problem\.seed"):
        _run(_seeded(with_(other, methods={"Linearization": {"n_models": 3, "rounds": 4}}), "problem", None, [0, 1]),
             tmp_path)  # each run on its seed's problem: seed 1's is not the one the others ran on


@pytest.mark.parametrize("marker", [True, False], ids=["config.json now", "config.json without run_seed_in"])
def test_the_report_refuses_a_group_whose_seeds_ran_on_different_fixed_problems(tmp_path, marker):
    root = _run(_seeded(QUICK, "problem", 0, [0, 1, 2]), tmp_path)
    if not marker:
        _without_marker(root)
    path = root / "runs" / "MosT" / "seed2" / "config.json"
    config = json.loads(path.read_text())
    config["problem"]["seed"] = 2  # as if seed 2 had run on a problem fixed to another seed
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"group 'MosT' were made with different configurations \(seed0 and "
                                         r"seed2 differ in: problem\)"):
        report(root, write=False)


# ----------------------------------------------------------------------------- the first seed
def _heatmap_titles(monkeypatch) -> list[str]:
    import most.plots

    titles: list[str] = []
    drawn = most.plots.assignment_heatmap
    monkeypatch.setattr(most.plots, "assignment_heatmap",
                        lambda plan, title="", **kw: (titles.append(title), drawn(plan, title=title, **kw))[1])
    return titles


@pytest.mark.parametrize("seeds, first", [([2, 10], 2), ([10, 2], 10), ([11, 3, 100], 11)])
def test_the_one_run_figures_show_the_first_seed_of_the_file(tmp_path, monkeypatch, seeds, first):
    root = _run(with_(QUICK, seeds=seeds), tmp_path)
    titles = _heatmap_titles(monkeypatch)
    plot(root, formats=("png",))
    assert titles == [f"MosT: final Γ (seed {first})"]


def test_without_the_files_seed_order_the_one_run_figures_show_the_smallest_seed(tmp_path, monkeypatch):
    root = _run(with_(QUICK, seeds=[10, 2]), tmp_path)
    index = json.loads((root / "experiment.json").read_text())
    assert index["seeds"] == [10, 2]
    del index["seeds"]  # as written by a version that did not record them
    (root / "experiment.json").write_text(json.dumps(index))
    titles = _heatmap_titles(monkeypatch)
    plot(root, formats=("png",))
    assert titles == ["MosT: final Γ (seed 2)"]


def test_runs_are_loaded_in_the_order_of_their_seeds_as_numbers(tmp_path):
    root = _run(with_(QUICK, seeds=[10, 2, 1]), tmp_path)
    assert [folder.path.name for folder, _, _ in load_runs(root)] == ["seed1", "seed2", "seed10"]


# ----------------------------------------------------------------------------- figure files
def test_groups_whose_figures_would_share_a_file_get_names_apart():
    assert _file_names(["MosT", "Stack MosT"]) == {"MosT": "most", "Stack MosT": "stack_most_2"}
    assert _file_names(["Stack MosT", "MosT"]) == {"Stack MosT": "stack_most", "MosT": "most_2"}
    labels = ["a", "stack a", "stack stack a", "A", "stack_a_2", "a 2", "stack-a", "x", "stack x 2", "x_2"]
    names = _file_names(labels)
    files = [f"{prefix}{names[g]}" for g in labels for prefix in ("assignment_", "assignment_stack_")]
    assert len(set(files)) == len(files), files


def test_no_two_figures_of_a_plot_share_a_file(tmp_path, monkeypatch):
    import most.federated.figures

    monkeypatch.setattr(most.federated.figures, "counts_change", lambda owners: True)  # every stack plot drawn
    method = {"n_models": 3, "rounds": 4, "lr": 0.1}
    root = _run(with_(QUICK, seeds=[0], methods={"MosT": method, "Stack MosT": dict(method, type="MosT")}),
                tmp_path)
    files = plot(root, formats=("png",))
    names = sorted(Path(f).name for f in files)
    assert len(set(files)) == len(files), names
    assert sorted(p.name for p in (root / "figures").iterdir()) == names  # each written file is a figure of its own
    assert {"assignment_most.png", "assignment_stack_most.png", "assignment_stack_most_2.png",
            "assignment_stack_stack_most_2.png"} <= set(names)


# ----------------------------------------------------------------------------- a folder holding one experiment
def test_a_folder_holding_one_experiment_reports_and_plots_it_as_a_folder_of_several_does(tmp_path):
    table = with_(QUICK, seeds=[0], methods={"MosT": {"n_models": 3, "rounds": 4, "lr": 0.1},
                                             "Linearization": {"n_models": 3, "rounds": 4, "lr": 0.1}})
    root = _run(table, tmp_path)  # tmp_path/quick; the folders sort Linearization first, the file MosT first
    text = report(tmp_path)
    assert text.startswith("# quick\n")
    rows = [line.split(" |")[0] for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows == ["| run", "| MosT", "| Linearization"]
    assert text == report(root, write=False)  # the table of the experiment's own folder
    assert (root / "report.md").read_text() == text and (root / "report.csv").is_file()
    assert not (tmp_path / "report.md").exists() and not (tmp_path / "report.csv").exists()
    assert list(summary_table(tmp_path)["groups"]) == ["MosT", "Linearization"]

    files = plot(tmp_path, formats=("png",))
    assert files and all(Path(f).parent == root / "figures" for f in files)
    assert not (tmp_path / "figures").exists()
    elsewhere = plot(tmp_path, formats=("png",), out=tmp_path / "figs")
    assert elsewhere and all(Path(f).parent == tmp_path / "figs" / "quick" for f in elsewhere)
    assert all(Path(f).parent == tmp_path / "figs2" for f in plot(root, formats=("png",), out=tmp_path / "figs2"))
