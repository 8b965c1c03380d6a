"""Reports and figures of results folders (several experiments, corrupt files), experiment
names that stay inside --out, experiment files that are not UTF-8, checks a dry run makes, and
the atomic writes of reports, figures and bench files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from most.config import ConfigError
from most.experiments import load_experiment, parse_experiment, plot, report, run_experiment

import tests._tables as tables
from tests._tables import with_

FED = with_(tables.FED, seeds=[0, 1])
CENTRAL = with_(tables.CENTRAL, seeds=[0], methods={"MosT": {"n_models": 3, "rounds": 8, "lr": 0.1},
                                                     "Linearization": {"n_models": 3, "rounds": 8, "lr": 0.1}})
_with = with_


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A results root holding two finished experiments: ``fed`` (accuracies) and ``central`` (losses)."""
    root = tmp_path_factory.mktemp("results")
    for table in (FED, CENTRAL):
        run_experiment(parse_experiment(table), root, progress=False, echo=lambda s: None)
    return root


@pytest.fixture
def results(stored, tmp_path) -> Path:
    """A copy of ``stored`` that a test may damage."""
    shutil.copytree(stored, tmp_path / "r")
    return tmp_path / "r"


# ----------------------------------------------------------------------------- several experiments
def test_report_on_a_root_of_two_experiments_gives_one_titled_table_each(results):
    text = report(results)
    assert "# fed" in text and "# central" in text
    fed, central = text.split("# central")[0], "# central" + text.split("# central")[1]
    if text.index("# central") < text.index("# fed"):
        central, fed = text.split("# fed")[0], "# fed" + text.split("# fed")[1]
    assert "Accuracies in %" in fed and "lower is better" not in fed
    assert "lower is better" in central and "Accuracies" not in central
    assert "worst20 |" not in central.split("| run |")[1].splitlines()[0] + "|"  # no accuracy columns mixed in
    assert "| loss |" in central and "| loss |" not in fed
    for name in ("fed", "central"):  # each experiment's files in its own folder
        assert (results / name / "report.md").is_file() and (results / name / "report.csv").is_file()
        assert report(results / name, write=False).startswith(f"# {name}")


def test_a_report_before_any_run_finished_says_so_and_names_the_runs(results):
    for result in (results / "central").rglob("result.json"):
        result.unlink()
    text = report(results / "central", write=False)
    assert "No run has finished yet, so there is no table." in text and "| run |" not in text
    assert "Unfinished runs (not in the table): runs/Linearization/seed0, runs/MosT/seed0." in text

def test_summary_table_of_a_root_of_two_experiments_names_them(results):
    from most.experiments import summary_table

    with pytest.raises(ValueError, match=r"2 experiments \((central, fed|fed, central)\)"):
        summary_table(results)
    assert summary_table(results / "fed")["kind"] == "federated"


def test_plot_on_a_root_of_two_experiments_draws_each_into_its_own_folder(results):
    files = plot(results, formats=("png",))
    assert any("/fed/" in f and f.endswith("worst_k.png") for f in files)
    assert any("/central/" in f and f.endswith("training_loss.png") for f in files)
    assert all(Path(f).is_file() and Path(f).stat().st_size > 1000 for f in files)


def test_swept_values_with_decimals_get_a_figure_each(tmp_path):
    """Before, base.with_suffix(".png") turned "lr=0.1" and "lr=0.15" both into "lr=0.png"."""
    table = _with(CENTRAL, methods={"MosT": {"n_models": 3, "rounds": 4}}, sweep={"methods.MosT.lr": [0.1, 0.15]})
    root = run_experiment(parse_experiment(table), tmp_path, progress=False, echo=lambda s: None)
    files = plot(root, formats=("png",))
    heatmaps = [Path(f).name for f in files if Path(f).name.startswith("assignment_most")]
    assert sorted(heatmaps) == ["assignment_most_lr_0_1.png", "assignment_most_lr_0_15.png"], heatmaps
    assert not [f for f in files if "=" in Path(f).name or " " in Path(f).name]  # plain file names


def test_figure_file_names_are_plain_and_apart():
    from most.experiments.figures import _file_names

    assert _file_names(["MosT server_lr=3", "MosT [weighting=GammaWeights]", "IFCA", "a-b", "a_b", "=="]) == {
        "MosT server_lr=3": "most_server_lr_3", "MosT [weighting=GammaWeights]": "most_weighting_gammaweights",
        "IFCA": "ifca", "a-b": "a_b", "a_b": "a_b_2", "==": "group"}


# ----------------------------------------------------------------------------- corrupt results files
@pytest.mark.parametrize("name", ["result.json", "config.json"])
def test_a_truncated_json_file_is_named_in_the_error(results, name):
    from most.experiments.store import CorruptFileError

    bad = results / "fed" / "runs" / "FedAvg" / "seed0" / name
    bad.write_text(bad.read_text()[:40])
    for call in (lambda: report(results / "fed"), lambda: plot(results / "fed", formats=("png",))):
        with pytest.raises(CorruptFileError, match=str(bad).replace("\\", "\\\\")):
            call()


def test_a_result_without_metrics_is_named(results):
    from most.experiments.store import CorruptFileError

    bad = results / "fed" / "runs" / "FedAvg" / "seed0" / "result.json"
    bad.write_text("{}")
    with pytest.raises(CorruptFileError, match="result.json"):
        report(results / "fed")


def test_a_corrupt_final_pt_is_named(results):
    from most.experiments.store import CorruptFileError

    bad = results / "fed" / "runs" / "MosT" / "seed0" / "final.pt"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(CorruptFileError, match="final.pt"):
        plot(results / "fed", formats=("png",))


def test_a_truncated_metrics_file_is_named_not_another_group(results):
    """A finished run whose metrics.jsonl lost its last rounds: before, the figure's x axis came
    from the first group and the error named another group (FedAvg)."""
    from most.experiments.store import CorruptFileError

    for seed in (0, 1):
        f = results / "fed" / "runs" / "MosT" / f"seed{seed}" / "metrics.jsonl"
        f.write_text("".join(f.read_text().splitlines(keepends=True)[:4]))
    with pytest.raises(CorruptFileError) as info:
        plot(results / "fed", formats=("png",))
    message = str(info.value)
    assert "MosT" in message and "metrics.jsonl" in message and "FedAvg" not in message
    assert "4 of its 6 rounds" in message


# ----------------------------------------------------------------------------- names
@pytest.mark.parametrize("name", ["../../x", "../x", "/tmp/abs", "a/b", "a\\b", ".", "..", "", "  ", "a\x00b",
                                  "a\nb", "C:x"])
def test_an_experiment_name_that_is_not_a_folder_name_is_refused(name):
    with pytest.raises(ConfigError, match="name: ") as info:
        parse_experiment(_with(CENTRAL, name=name))
    assert "letters, digits" in str(info.value)


def test_ordinary_names_are_kept():
    for name in ("syn00", "my experiment (v2)", "rho=0.5,0.5", "expérience", ".hidden"):
        assert parse_experiment(_with(CENTRAL, name=name)).name == name


def test_a_name_with_dots_writes_inside_out(tmp_path):
    with pytest.raises(ConfigError):
        run_experiment(parse_experiment(_with(CENTRAL, name="../escaped")), tmp_path / "out", progress=False,
                       echo=lambda s: None)
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("label", [".", ".."])
def test_a_method_label_of_dots_gets_a_folder_inside_runs(label):
    exp = parse_experiment(_with(CENTRAL, methods={label: {"type": "MosT", "n_models": 3, "rounds": 2}}))
    folder = exp.runs[0].folder
    assert ".." not in Path(folder).parts and "." not in Path(folder).parts and not Path(folder).is_absolute()


def test_a_file_that_is_not_utf8_is_a_config_error_naming_the_byte(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"exp\.toml.*UTF-8.*byte 11"):
        load_experiment(path)


# ----------------------------------------------------------------------------- checks before any work
def test_check_runs_refuses_more_models_than_clients():
    from most.experiments.spec import check_runs

    exp = parse_experiment(_with(FED, seeds=[0], methods={"MosT": {"n_models": 9}}))  # 8 clients
    with pytest.raises(ValueError, match="at least as many clients as models"):
        check_runs(exp)


def test_check_runs_refuses_more_models_than_objectives():
    from most.experiments.spec import check_runs

    exp = parse_experiment(_with(CENTRAL, methods={"MosT": {"n_models": 20, "rounds": 2}}))  # 12 objectives
    with pytest.raises(ValueError, match="at least as many objectives as models"):
        check_runs(exp)


def test_run_experiment_makes_the_checks_before_any_run_or_file(tmp_path):
    from most.experiments import run_experiment

    table = _with(FED, seeds=[0], methods={"FedAvg": {"n_models": 2}, "MosT": {"n_models": 9}})  # 8 clients
    with pytest.raises(ValueError, match=r"methods\.MosT.*at least as many clients as models"):
        run_experiment(parse_experiment(table), tmp_path, progress=False, echo=lambda s: None)
    assert not any(tmp_path.iterdir())  # FedAvg, listed first, did not run: nothing was written


def test_check_runs_passes_a_good_experiment():
    from most.experiments.spec import check_runs

    check_runs(parse_experiment(_with(FED, seeds=[0])))
    check_runs(parse_experiment(CENTRAL))


# ----------------------------------------------------------------------------- atomic writes
def _replaced(monkeypatch) -> list[str]:
    """The names of the files written by renaming a finished temporary file (os.replace)."""
    names, real = [], os.replace

    def replace(src, dst, *args, **kwargs):
        names.append(Path(dst).name)
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return names


def _no_partial_files(folder: Path) -> None:
    assert not [p for p in folder.rglob("*.tmp")]


def test_report_and_figures_are_written_atomically(results, monkeypatch):
    written = _replaced(monkeypatch)
    report(results / "central")
    plot(results / "central", formats=("png",))
    assert {"report.md", "report.csv", "training_loss.png"} <= set(written)
    _no_partial_files(results)


def test_a_figure_is_not_left_half_written_when_saving_fails(tmp_path, monkeypatch):
    from most import plots

    target = tmp_path / "fig.png"
    target.write_bytes(b"old figure")
    fig = plt.figure()

    def broken(fname, *args, **kwargs):  # the disk fills up half way through the file
        if hasattr(fname, "write"):
            fname.write(b"half a figure")
        else:
            Path(fname).write_bytes(b"half a figure")
        raise OSError("disk full")

    monkeypatch.setattr(fig, "savefig", broken)
    with pytest.raises(OSError):
        plots.save_figure(fig, target)
    assert target.read_bytes() == b"old figure"
    plt.close(fig)


def test_a_figure_path_without_suffix_gets_the_default_format(tmp_path):
    from most import plots

    fig = plt.figure()
    plots.save_figure(fig, tmp_path / "fig")
    plt.close(fig)
    assert (tmp_path / "fig.png").stat().st_size > 100


def test_bench_results_and_table_are_written_atomically(tmp_path, monkeypatch):
    from most.bench import write_results

    written = _replaced(monkeypatch)
    write_results({"x": 1}, tmp_path, lambda r, out: [], lambda r: "| table |")
    assert {"results.json", "table.md"} <= set(written)
    assert json.loads((tmp_path / "results.json").read_text())["x"] == 1


def test_bench_results_are_written_when_a_figure_fails(tmp_path):
    from most.bench import write_results

    def broken(results, out):
        raise ValueError("no figure")

    with pytest.raises(ValueError, match="no figure"):
        write_results({"x": 2}, tmp_path, broken, lambda r: "| table |")
    assert json.loads((tmp_path / "results.json").read_text()) == {"x": 2, "figures": []}
    assert (tmp_path / "table.md").read_text() == "| table |\n"


# ----------------------------------------------------------------------------- runs that do not belong together
def test_report_refuses_a_group_whose_seeds_were_made_with_different_settings(results):
    config_file = results / "fed" / "runs" / "MosT" / "seed1" / "config.json"
    config = json.loads(config_file.read_text())
    config["method"]["server_lr"] = 1.0  # as if made by an edited file before the runner checked this
    config_file.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"group 'MosT' were made with different configurations \(seed0 and "
                                         r"seed1 differ in: method\)"):
        report(results / "fed")


def test_plot_refuses_the_group_the_report_refuses(results):
    config_file = results / "fed" / "runs" / "MosT" / "seed1" / "config.json"
    config = json.loads(config_file.read_text())
    config["federated"]["rounds"] = 3  # a shorter run: its curve would cut the group's to its rounds
    config_file.write_text(json.dumps(config))
    message = r"group 'MosT' were made with different configurations \(seed0 and seed1 differ in: federated\)"
    with pytest.raises(ValueError, match=message):
        report(results / "fed", write=False)
    with pytest.raises(ValueError, match=message):
        plot(results / "fed", formats=("png",))
    assert not (results / "fed" / "figures").exists()


def test_report_names_a_config_copied_from_another_group(results):
    runs = results / "fed" / "runs"
    shutil.copy(runs / "FedAvg" / "seed0" / "config.json", runs / "MosT" / "seed0" / "config.json")
    with pytest.raises(ValueError, match=r"MosT/seed0/config\.json is corrupt \(it is the configuration of group "
                                         r"'FedAvg', but it lies in the folder of 'MosT'"):
        report(results / "fed")


def test_clients_without_a_test_sample_are_left_out_of_the_per_objective_figure(results):
    # `most run` writes a client without a test sample (no accuracy) as null
    path = results / "fed" / "runs" / "MosT" / "seed0" / "result.json"
    result = json.loads(path.read_text())
    result["per_objective"][2] = None
    path.write_text(json.dumps(result))
    files = plot(results / "fed", formats=("png",))
    assert any(Path(f).name == "per_objective.png" for f in files)
    assert "| MosT |" in report(results / "fed")


@pytest.mark.parametrize("edit, message", [
    ({"status": "running"}, r"its status is 'running', not 'done'"),
    ({"per_objective": [1.0, 2.0]}, r"2 per-objective values for 8 objectives"),
])
def test_a_result_edited_out_of_shape_is_named(results, edit, message):
    path = results / "fed" / "runs" / "MosT" / "seed0" / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    with pytest.raises(ValueError, match=r"result\.json is corrupt \(" + message):
        report(results / "fed")


def test_a_metric_that_most_run_never_writes_is_named(results):
    path = results / "fed" / "runs" / "MosT" / "seed0" / "result.json"
    result = json.loads(path.read_text())
    result["metrics"]["mean"] = 1e400  # JSON for inf: `most run` writes NaN and inf as null
    path.write_text(json.dumps(result).replace("Infinity", "1e400"))
    with pytest.raises(ValueError, match=r"result\.json is corrupt \(a metric is NaN or infinite"):
        report(results / "fed")


def test_the_report_says_which_groups_pick_their_clients_models_otherwise(tmp_path):
    """A method that scores each client on its mixture (FedEM) or its own model is named in the
    caption with its pick, and its best-model-on-test column, which it has not, reads '–'."""
    from typer.testing import CliRunner

    from most.cli import app

    spec = tmp_path / "exp.toml"
    spec.write_text('name = "picks"\nseeds = [0]\n[data]\nname = "fedprox_synthetic"\nmodel_shift = 0.0\n'
                    'feature_shift = 0.0\nn_clients = 6\nsamples_per_client = 30\n[model]\n'
                    'name = "logistic_regression"\n[federated]\nrounds = 2\n[methods.IFCA]\nn_models = 2\n'
                    '[methods.FedEM]\nn_models = 2\n[methods.LocalOnly]\n')
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "out"), "--quiet"])
    assert res.exit_code == 0, res.output
    text = report(tmp_path / "out" / "picks")
    assert ("(except: FedEM, its mixture of the models (weights by EM); LocalOnly, its own model)." in text)
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in text.splitlines() if line.startswith("| ")}
    assert rows["FedEM"][6] == "–" and rows["LocalOnly"][6] == "–" and rows["IFCA"][6] != "–"


def test_the_gamma_figure_draws_the_groups_with_a_drift_when_another_has_one_plan(tmp_path, monkeypatch):
    """A group with a single plan (no drift yet) leaves the others' Γ-over-rounds figure drawn."""
    from most.federated import figures

    table = with_(tables.CENTRAL, seeds=[0], methods={"MosT": {"n_models": 3, "rounds": 1, "lr": 0.1},
                                                       "MosT (longer)": {"type": "MosT", "n_models": 3, "rounds": 6,
                                                                         "lr": 0.1}})
    run_experiment(parse_experiment(table), tmp_path, progress=False, echo=lambda s: None)
    drawn: list[list[str]] = []
    real = figures.sparsity_drift

    def spy(sparsity, drift, **kwargs):
        drawn.append(list(drift))
        return real(sparsity, drift, **kwargs)

    monkeypatch.setattr(figures, "sparsity_drift", spy)
    names = {Path(f).name for f in plot(tmp_path / "central", formats=("png",))}
    assert "sparsity_drift.png" in names and drawn == [["MosT (longer)"]]


def test_a_run_folder_copied_under_another_seed_or_group_is_named_not_averaged(results):
    from most.experiments.store import CorruptFileError

    runs = results / "central" / "runs"
    shutil.copytree(runs / "MosT" / "seed0", runs / "MosT" / "seed5")  # one run would count as two seeds
    with pytest.raises(CorruptFileError, match=r"configuration of seed 0, but it lies in the folder 'seed5'"):
        report(results / "central", write=False)
    shutil.rmtree(runs / "MosT" / "seed5")
    shutil.copy(runs / "MosT" / "seed0" / "result.json", runs / "Linearization" / "seed0" / "result.json")
    with pytest.raises(CorruptFileError, match=r"result of group 'MosT', but its run is group 'Linearization'"):
        report(results / "central", write=False)


# ----------------------------------------------------------------------------- what the figures show
def _drawn(monkeypatch, folder: Path) -> dict:
    """The figures `plot` draws of ``folder``, by file name (without suffix)."""
    import most.plots

    figs: dict = {}
    real = most.plots.save_figure

    def spy(fig, path):
        if path is not None:
            figs[Path(path).stem] = fig
        return real(fig, path)

    monkeypatch.setattr(most.plots, "save_figure", spy)
    monkeypatch.setattr(plt, "close", lambda fig=None: None)  # kept open to be read
    plot(folder, formats=("png",))
    return figs


def _colours(fig) -> dict[str, tuple]:
    """Each method's colour in ``fig``: of its line, or of its bars."""
    from matplotlib.colors import to_rgb

    out = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                out.setdefault(line.get_label(), to_rgb(line.get_color()))
        for bars in ax.containers:
            if getattr(bars, "patches", None) and not bars.get_label().startswith("_"):
                out.setdefault(bars.get_label(), to_rgb(bars.patches[0].get_facecolor()))
    return out


def _set_metric(results: Path, group: str, seed: int, key: str, value) -> None:
    path = results / "fed" / "runs" / group / f"seed{seed}" / "result.json"
    result = json.loads(path.read_text())
    result["metrics"][key] = value
    path.write_text(json.dumps(result))


def test_a_group_keeps_its_colour_in_every_figure_even_where_an_earlier_group_is_left_out(results, monkeypatch):
    for seed in (0, 1):  # MosT without worst-k values: left out of the worst-k bars only
        for key in ("worst20", "worst40", "worst60", "worst80"):
            _set_metric(results, "MosT", seed, key, None)
    figs = _drawn(monkeypatch, results / "fed")
    assert "MosT" not in _colours(figs["worst_k"])
    colours: dict[str, set] = {}
    for fig in figs.values():
        for name, colour in _colours(fig).items():
            colours.setdefault(name, set()).add(colour)
    assert colours["FedAvg"] == {plots_colour(1)} and colours["MosT"] == {plots_colour(0)}


def plots_colour(k: int) -> tuple:
    from matplotlib.colors import to_rgb

    from most.plots import method_style

    return to_rgb(method_style(k)["color"])


def test_a_group_with_one_missing_worst_k_value_stays_in_the_bars_with_it_marked(results, monkeypatch):
    _set_metric(results, "MosT", 1, "worst20", None)  # `most run` writes NaN as null
    figs = _drawn(monkeypatch, results / "fed")
    ax = figs["worst_k"].axes[0]
    bars = {c.get_label(): c for c in ax.containers if getattr(c, "patches", None)}
    assert set(bars) == {"MosT", "FedAvg"}
    assert bars["MosT"].patches[0].get_height() == 0 and bars["MosT"].patches[1].get_height() > 0
    marks = [t for t in ax.texts if t.get_text() == "n/a"]
    assert len(marks) == 1 and marks[0].get_position()[0] == pytest.approx(
        bars["MosT"].patches[0].get_x() + bars["MosT"].patches[0].get_width() / 2)


def test_validation_accuracy_is_drawn_at_the_rounds_as_stored(results, monkeypatch):
    figs = _drawn(monkeypatch, results / "fed")
    lines = {ln.get_label(): ln for ln in figs["val_accuracy"].axes[0].get_lines()}
    metrics = [json.loads(line) for line in
               (results / "fed" / "runs" / "MosT" / "seed0" / "metrics.jsonl").read_text().splitlines()]
    rounds = [m["round"] for m in metrics if m.get("val_accuracy") is not None]
    assert list(lines["MosT"].get_xdata()) == rounds
    # the same rounds as the Γ figure, which starts at the first plan's stored round
    first_plan = next(m["round"] for m in metrics if "gamma_sparsity" in m)
    assert figs["sparsity_drift"].axes[0].get_lines()[0].get_xdata()[0] == first_plan


def test_the_figures_of_a_centralised_experiment_speak_of_objectives(results, monkeypatch):
    figs = _drawn(monkeypatch, results / "central")
    labels = [ax.get_ylabel() for name, fig in figs.items() if name.startswith(("sparsity", "assignment_stack"))
              for ax in fig.axes]
    assert labels and not any("clients" in label for label in labels)
    assert any(label.startswith("objectives") for label in labels)
