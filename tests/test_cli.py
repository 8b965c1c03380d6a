"""A user's mistake on the command line is one line on stderr and a non-zero exit, never a
traceback, for every command; ``most --debug ...`` shows the traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from most.cli import app
from most.experiments import parse_experiment, run_experiment

runner = CliRunner()

CENTRAL = """
name = "central"
seeds = [0]

[problem]
name = "quadratic_clusters"
n_clusters = 3
per_cluster = 4

[methods.MosT]
n_models = 3
rounds = 8
lr = 0.1
"""

FED = """
name = "fed"
seeds = [0]

[data]
name = "fedprox_synthetic"
model_shift = 0.0
feature_shift = 0.0
n_clients = 8
samples_per_client = 40

[model]
name = "logistic_regression"

[federated]
rounds = 4

[methods.MosT]
n_models = 9
"""


def _one_line_error(res, *needles: str, code: int | None = None) -> str:
    """Checks that ``res`` failed with one line on stderr (and no traceback) holding ``needles``."""
    assert res.exit_code != 0, res.output
    assert isinstance(res.exception, SystemExit), repr(res.exception)  # handled, not raised
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("Error: "), err
    assert "Traceback" not in res.output
    for needle in needles:
        assert needle in err, (needle, err)
    if code is not None:
        assert res.exit_code == code, res.exit_code
    return err


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    import tomllib

    run_experiment(parse_experiment(tomllib.loads(CENTRAL)), root, progress=False, echo=lambda s: None)
    return root / "central"


@pytest.fixture
def results(stored, tmp_path) -> Path:
    shutil.copytree(stored, tmp_path / "central")
    return tmp_path / "central"


def test_pretty_exceptions_do_not_show_locals():
    assert app.pretty_exceptions_show_locals is False


# ----------------------------------------------------------------------------- most run
def test_run_errors_are_one_line(tmp_path):
    _one_line_error(runner.invoke(app, ["run", str(tmp_path / "missing.toml")]), "No experiment file", code=2)
    path = tmp_path / "exp.toml"
    path.write_text(CENTRAL.replace("lr = 0.1", "lr = -1.0"))
    _one_line_error(runner.invoke(app, ["run", str(path)]), "methods.MosT", code=2)
    path.write_text(CENTRAL.replace("lr = 0.1", "diversty = 1.0"))
    _one_line_error(runner.invoke(app, ["run", str(path)]), "did you mean 'diversity'", code=2)
    path.write_bytes(CENTRAL.replace('"central"', '"caf\xe9"').encode("latin-1"))
    _one_line_error(runner.invoke(app, ["run", str(path), "--dry-run"]), str(path), "UTF-8", "byte 12 (line 2)", code=2)
    path.write_text(CENTRAL.replace('"central"', '"../../escaped"'))
    _one_line_error(runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out")]), "name:", code=2)
    assert not (tmp_path / "escaped").exists()
    path.write_text("name = \n")
    _one_line_error(runner.invoke(app, ["run", str(path)]), "not valid TOML", code=2)


def test_set_overrides_the_file_and_is_checked_as_the_file_is(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text(CENTRAL)
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(path), "--out", str(out), "--quiet", "--set", "methods.MosT.rounds=3",
                                 "--set", "seeds=[0, 1]", "--set", 'name="changed"'])
    assert result.exit_code == 0, result.output
    runs = sorted(p.name for p in (out / "changed" / "runs" / "MosT").iterdir())
    assert runs == ["seed0", "seed1"]
    resolved = json.loads((out / "changed" / "runs" / "MosT" / "seed0" / "config.json").read_text())
    assert resolved["method"]["rounds"] == 3
    stored = (out / "changed" / "experiment.toml").read_text()
    assert stored.startswith(CENTRAL.rstrip()) and "#   methods.MosT.rounds=3" in stored
    # the same messages as a file with those values
    _one_line_error(runner.invoke(app, ["run", str(path), "--set", "methods.MosT.diversty=1.0"]),
                    "did you mean 'diversity'", code=2)
    _one_line_error(runner.invoke(app, ["run", str(path), "--set", "methods.MosT.lr=-1"]), "methods.MosT", code=2)
    _one_line_error(runner.invoke(app, ["run", str(path), "--set", "methods.MosT.lr"]), "expected KEY=VALUE", code=2)
    _one_line_error(runner.invoke(app, ["run", str(path), "--set", "seeds.first=1"]), "not a table", code=2)
    _one_line_error(runner.invoke(app, ["run", str(path), "--set", "seeds=[0,"]), "is not a TOML value", code=2)
    _one_line_error(runner.invoke(app, ["run", str(path), "--set", "methods.MosT (paper).lr=1"]),
                    "part that has spaces in quotes", code=2)


def test_an_interrupted_run_names_the_command_that_resumes_it_with_every_setting(tmp_path, monkeypatch):
    import shlex

    import most.experiments

    def interrupted(experiment, *args, **kwargs):
        assert experiment.name == "changed"  # the --set values were applied
        raise KeyboardInterrupt

    monkeypatch.setattr(most.experiments, "run_experiment", interrupted)
    path = tmp_path / "exp.toml"
    path.write_text(CENTRAL)
    out = tmp_path / "with space"
    result = runner.invoke(app, ["run", str(path), "--out", str(out), "--quiet", "--no-batch", "--set",
                                 'name="changed"', "--set", "methods.MosT.lr=0.05"])
    assert result.exit_code == 130
    hint = result.output.split("with: ", 1)[1].strip()
    assert shlex.split(hint) == ["most", "run", str(path), "--out", str(out), "--resume", "--no-batch", "--quiet",
                                 "--set", 'name="changed"', "--set", "methods.MosT.lr=0.05"]


def test_dry_run_makes_the_checks_of_the_run(tmp_path):
    path = tmp_path / "fed.toml"
    path.write_text(FED)  # 9 models, 8 clients
    _one_line_error(runner.invoke(app, ["run", str(path), "--dry-run"]), "at least as many clients as models",
                    code=2)
    _one_line_error(runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out")]),
                    "at least as many clients as models", code=2)
    assert not (tmp_path / "out").exists()  # refused before any run started
    path.write_text(CENTRAL.replace("n_models = 3", "n_models = 20"))  # 12 objectives
    _one_line_error(runner.invoke(app, ["run", str(path), "--dry-run"]), "at least as many objectives as models")
    path.write_text(CENTRAL)
    res = runner.invoke(app, ["run", str(path), "--dry-run"])
    assert res.exit_code == 0 and "MosT/seed0" in res.output


def test_a_mistake_in_the_command_line_itself_is_one_line(tmp_path):
    _one_line_error(runner.invoke(app, ["demo", "--n-models", "0"]), "--n-models", "--help", code=2)
    _one_line_error(runner.invoke(app, ["run"]), "Missing argument", code=2)
    _one_line_error(runner.invoke(app, ["report", "--nope", str(tmp_path)]), "No such option", code=2)
    _one_line_error(runner.invoke(app, ["bench", "nope"]), "No such command", code=2)
    for args, name in ((["bench", "fedrated"], "'federated'"), (["choose"], "'choose-m'")):
        err = _one_line_error(runner.invoke(app, args), "No such command", f"Did you mean {name}?", code=2)
        assert err.count("Did you mean") == 1, err  # click and typer each add the suggestion
    res = runner.invoke(app, ["bench"])  # no command: the help, as before
    assert res.exit_code == 2 and "few-objective" in res.stdout and not res.stderr.strip()
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0 and "--debug" in res.stdout


# ----------------------------------------------------------------------------- report and plot
def test_report_and_plot_of_a_missing_folder(tmp_path):
    for command in ("report", "plot"):
        _one_line_error(runner.invoke(app, [command, str(tmp_path / "nothing")]), "No results folder", code=2)


@pytest.mark.parametrize("name", ["result.json", "config.json"])
def test_a_truncated_json_file_is_named(results, name):
    bad = results / "runs" / "MosT" / "seed0" / name
    bad.write_text(bad.read_text()[:50])
    for command in ("report", "plot"):
        _one_line_error(runner.invoke(app, [command, str(results)]), str(bad), "run the experiment again", code=2)


def test_a_truncated_metrics_file_is_named(results):
    bad = results / "runs" / "MosT" / "seed0" / "metrics.jsonl"
    bad.write_text("".join(bad.read_text().splitlines(keepends=True)[:4]))
    _one_line_error(runner.invoke(app, ["plot", str(results), "--format", "png"]), str(bad), "4 of its 8 rounds")


def test_a_corrupt_final_pt_is_named(results):
    bad = results / "runs" / "MosT" / "seed0" / "final.pt"
    bad.write_bytes(bad.read_bytes()[:64])
    _one_line_error(runner.invoke(app, ["plot", str(results), "--format", "png"]), str(bad))


def test_plot_bad_format(results):
    _one_line_error(runner.invoke(app, ["plot", str(results), "--format", "gif"]), "--format 'gif'", code=2)


@pytest.mark.parametrize("error", [
    json.JSONDecodeError("Expecting value", "{", 1),
    UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    TypeError("an unexpected type"),
    ValueError("a bad value\non two lines"),
])
def test_other_user_errors_are_one_line(results, monkeypatch, error):
    import most.experiments

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(most.experiments, "report", fail)
    _one_line_error(runner.invoke(app, ["report", str(results)]))
    res = runner.invoke(app, ["--debug", "report", str(results)])
    assert res.exception is error  # re-raised, so its traceback is shown


def test_a_bug_is_not_dressed_as_a_user_error(results, monkeypatch):
    import most.experiments

    def fail(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(most.experiments, "report", fail)
    res = runner.invoke(app, ["report", str(results)])
    assert isinstance(res.exception, ZeroDivisionError)


# ----------------------------------------------------------------------------- demo, bench, flower
def test_demo_error_is_one_line(tmp_path):
    _one_line_error(runner.invoke(app, ["demo", "--n-objectives", "3", "--n-models", "5", "--out", str(tmp_path)]),
                    "must not exceed", code=2)


def test_bench_errors_are_one_line(tmp_path):
    _one_line_error(runner.invoke(app, ["bench", "few-objective", "--method", "Nope", "--out", str(tmp_path)]),
                    "Unknown method", code=2)
    (tmp_path / "runs.jsonl").write_text("not json\n")
    _one_line_error(runner.invoke(app, ["bench", "few-objective", "--problem", "zdt1", "--seed", "0", "--resume",
                                        "--out", str(tmp_path), "--quiet"]), str(tmp_path / "runs.jsonl"), code=2)
    # refused after the folder was made and locked, before any run: the new folders go again
    new = tmp_path / "new" / "structure"
    _one_line_error(runner.invoke(app, ["bench", "structure", "--lr", "1e9", "--seed", "0", "--out", str(new),
                                        "--quiet"]), "smaller `lr`")
    assert not (tmp_path / "new").exists()
    # through a folder the call makes and "..": only what the call made goes, never a folder that was there
    (tmp_path / "kept" / "empty").mkdir(parents=True)
    around = tmp_path / "made" / ".." / "kept" / "sub"
    _one_line_error(runner.invoke(app, ["bench", "structure", "--lr", "1e9", "--seed", "0", "--out", str(around),
                                        "--quiet"]), "smaller `lr`")
    assert (tmp_path / "kept" / "empty").is_dir() and not (tmp_path / "kept" / "sub").exists()


def test_flower_credentials_error_is_one_line(tmp_path):
    pytest.importorskip("cryptography")
    (tmp_path / "server.key").write_text("x")
    _one_line_error(runner.invoke(app, ["flower", "credentials", str(tmp_path)]), "already holds credentials",
                    code=2)


# ----------------------------------------------------------------------------- the real command
def _most(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="100")
    return subprocess.run([sys.executable, "-m", "most.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_the_command_prints_one_line_and_with_debug_the_traceback(results):
    bad = results / "runs" / "MosT" / "seed0" / "result.json"
    bad.write_text(bad.read_text()[:50])
    res = _most("report", str(results))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and str(bad) in res.stderr, res.stderr
    res = _most("--debug", "report", str(results))
    assert res.returncode != 0 and "Traceback" in res.stderr and "CorruptFileError" in res.stderr
    assert len(res.stderr.splitlines()) < 200  # no locals


# ----------------------------------------------------------------------------- paths and counts a user can get wrong
def test_an_out_path_that_is_a_file_is_one_line_naming_the_option(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    experiment = tmp_path / "exp.toml"
    experiment.write_text('seeds = [0]\n[problem]\nname = "quadratic_clusters"\n[methods.MosT]\nn_models = 2\n'
                          'rounds = 2\n')
    for args in (["run", str(experiment), "--out", str(afile)], ["demo", "--out", str(afile)],
                 ["bench", "few-objective", "--out", str(afile)]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert f"--out {afile} is a file, not a folder" in res.stderr and "Traceback" not in res.output
    from most.experiments import parse_experiment, run_experiment
    from most.experiments.spec import tomllib

    with pytest.raises(ValueError, match="is a file, not a folder"):
        run_experiment(parse_experiment(tomllib.loads(experiment.read_text())), afile, progress=False)
    dangling = tmp_path / "link"
    dangling.symlink_to(tmp_path / "nowhere")
    for args in (["run", str(experiment), "--out", str(dangling)], ["bench", "few-objective", "--out", str(dangling)]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and f"is a symbolic link to {tmp_path / 'nowhere'}, which does not exist" in res.stderr


def test_threads_far_above_the_cores_are_refused(tmp_path):
    experiment = tmp_path / "exp.toml"
    experiment.write_text('seeds = [0]\n[problem]\nname = "quadratic_clusters"\n[methods.MosT]\nn_models = 2\n'
                          'rounds = 2\n')
    res = CliRunner().invoke(app, ["run", str(experiment), "--out", str(tmp_path / "r"), "--threads", "100000"])
    assert res.exit_code == 2 and "--threads 100000: this machine has" in res.stderr
    assert not (tmp_path / "r").exists()


def test_a_seed_out_of_range_is_one_line():
    res = CliRunner().invoke(app, ["demo", "--seed", "99999999999999999999999"])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1 and "--seed" in res.stderr


def test_an_experiment_that_is_not_a_table_is_refused():
    from most.config import ConfigError
    from most.experiments import parse_experiment

    with pytest.raises(ConfigError, match="An experiment is a table"):
        parse_experiment([1, 2])


def test_a_checkpoint_path_that_is_a_folder_is_refused_before_any_round(tmp_path):
    from most.checkpoint import Checkpoint

    with pytest.raises(ValueError, match="is a folder; give a file path inside it"):
        Checkpoint(tmp_path)


def test_sizes_too_large_for_memory_are_one_line(tmp_path):
    experiment = tmp_path / "big.toml"
    experiment.write_text('seeds = [0]\n[problem]\nname = "quadratic_clusters"\nn_clusters = 1000000000000\n'
                          '[methods.MosT]\nn_models = 2\nrounds = 2\n')
    for args in (["run", str(experiment), "--dry-run"], ["demo", "--n-objectives", "100000000000", "--n-models", "2",
                                                          "--rounds", "1", "--out", str(tmp_path / "d")]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert len(res.stderr.strip().splitlines()) == 1 and "out of memory" in res.stderr


def test_a_warning_for_the_user_is_one_line(tmp_path):
    experiment = tmp_path / "fed.toml"
    experiment.write_text('seeds = [0]\n[data]\nname = "fedprox_synthetic"\nmodel_shift = 0.0\nfeature_shift = 0.0\nn_clients = 6\n'
                          'samples_per_client = 30\n[model]\nname = "logistic_regression"\n[federated]\nrounds = 2\n'
                          '[methods.MosT]\nn_models = 2\n')
    res = subprocess.run([sys.executable, "-m", "most.cli", "run", str(experiment), "--out", str(tmp_path / "r"),
                          "--quiet"], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if "WarmUp(rounds=5)" in line]
    assert lines and all(line.startswith("Warning: MosT(warmup=WarmUp(rounds=5)) with rounds=2") for line in lines)
    assert ".py:" not in res.stderr  # no file and line of the library or of typer


@pytest.mark.parametrize("code, words", [(13, "Permission denied"), (30, "Read-only file system")])
def test_report_of_a_folder_this_user_may_only_read_prints_the_table_and_says_why_no_file(results, monkeypatch,
                                                                                          code, words):
    import most.checkpoint

    def refused(path, data):
        raise OSError(code, words, str(path))

    monkeypatch.setattr(most.checkpoint, "atomic_write_bytes", refused)
    res = runner.invoke(app, ["report", str(results)])
    assert res.exit_code == 0 and res.stdout.startswith("# central") and "| MosT |" in res.stdout
    assert f"Note: report.md and report.csv were not written ({words}: " in res.stderr


def test_a_warning_raised_by_the_checks_and_again_by_the_run_is_shown_once_per_command(tmp_path):
    path = tmp_path / "fed.toml"
    path.write_text(FED.replace("n_models = 9", "n_models = 2"))  # 4 rounds, all in MosT's 5-round warm-up
    res = subprocess.run([sys.executable, "-m", "most.cli", "run", str(path), "--out", str(tmp_path / "a"), "--quiet"],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("every round is a warm-up round") == 1, res.stderr
    assert res.stderr.startswith("Warning: MosT(warmup=WarmUp(rounds=5)) with rounds=4")


def test_a_bench_refused_by_another_writer_leaves_its_folder_and_lock(tmp_path, monkeypatch):
    """A bench call whose folder was made and locked by another call meanwhile is refused, and
    touches nothing; one refused for its own input removes the folder it made."""
    from most.bench import structure
    from most.experiments.store import BusyFolderError

    out = tmp_path / "new" / "structure"

    def taken(config, **kwargs):  # another process made the folder and holds its lock
        out.mkdir(parents=True)
        (out / ".lock").write_text("process 1 on host: most bench structure\n")
        raise BusyFolderError(f"{out} is being written by another process (process 1 on host).")

    monkeypatch.setattr(structure, "run_benchmark", taken)
    _one_line_error(runner.invoke(app, ["bench", "structure", "--seed", "0", "--out", str(out), "--quiet"]),
                    "another process")
    assert (out / ".lock").is_file()


# ----------------------------------------------------------------------------- bench choices, checked before any run
class _Reached(Exception):
    """Raised by a suite's ``run_benchmark`` replaced in a test: the command got past its checks."""


@pytest.fixture
def no_runs(monkeypatch) -> list:
    """Every suite's ``run_benchmark`` replaced by one that records its config and stops (``_Reached``)."""
    from most.bench import federated, few_objective, mtl, prompts, structure

    configs: list = []

    def reached(config, **options):
        configs.append(config)
        raise _Reached

    for suite in (federated, few_objective, mtl, prompts, structure):
        monkeypatch.setattr(suite, "run_benchmark", reached)
    return configs


@pytest.mark.parametrize("args, words", [
    (["few-objective", "--method", "MGDA", "--method", "EPO", "--method", "MGDA"], "Repeated method(s) ['MGDA']"),
    (["few-objective", "--seed", "0", "--seed", "0"], "Repeated seed(s) [0]"),
    (["few-objective", "--problem", "zdt1", "--problem", "zdt1"], "Repeated problem(s) ['zdt1']"),
    (["structure", "--method", "MosT (default)", "--method", "MosT (default)"], "Repeated method(s)"),
    (["structure", "--seed", "3", "--seed", "3"], "Repeated seed(s) [3]"),
    (["structure", "--setting", "quadratic-equal", "--setting", "quadratic-equal"], "Repeated setting(s)"),
    (["mtl", "--method", "MosT", "--method", "MosT"], "Repeated method(s) ['MosT']"),
    (["mtl", "--seed", "1", "--seed", "2", "--seed", "1"], "Repeated seed(s) [1]"),
    (["prompts", "--task", "wic", "--task", "wic"], "Repeated task(s) ['wic']"),
    (["prompts", "--method", "MGDA", "--method", "MGDA"], "Repeated method(s) ['MGDA']"),
    (["prompts", "--seed", "0", "--seed", "0"], "Repeated seed(s) [0]"),
    (["federated", "--method", "MosT", "--method", "MosT", "--method", "FedAvg"], "Repeated method(s) ['MosT']"),
    (["federated", "--seed", "0", "--seed", "0"], "Repeated seed(s) [0]"),
    (["federated", "--server-lr", "1", "--server-lr", "1"], "Repeated server step(s) [1.0]"),
])
def test_a_bench_choice_given_twice_is_refused_before_any_run(tmp_path, no_runs, args, words):
    # made twice, a run would count twice in the table ("± 0.00", a zero-width interval) or
    # break it after every run was made
    out = tmp_path / "out"
    _one_line_error(runner.invoke(app, ["bench", *args, "--out", str(out), "--quiet"]), words, "once", code=2)
    assert no_runs == [] and not out.exists()


def _stored_federated_commands() -> list[list[str]]:
    """The arguments of every whole `most bench federated` command in benchmarks/results/federated.md."""
    import re
    import shlex

    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "federated.md").read_text()
    text = re.sub(r"\\\n\s*", " ", text)  # a command continued over lines is one
    commands = []
    for line in text.splitlines():
        for rest in line.split("most bench federated")[1:]:
            rest = rest.split("`")[0].split(" #")[0]  # the end of inline code, a comment
            if "..." not in rest:  # an abridged command
                commands.append(shlex.split(rest))
    return commands


@pytest.mark.parametrize("args, words", [
    (["--model", "cnn"], ["`model` 'cnn'", "'synthetic'", "femnist or fashion"]),
    (["--dataset", "mixture", "--model", "cnn"], ["`model` 'cnn'", "'mixture'"]),
    (["--data-path", "somewhere"], ["`data_path`", "'synthetic'", "--dataset femnist or fashion"]),
    (["--dataset", "mixture", "--cnn-channels", "32", "64"], ["`cnn_channels`", "'mixture'"]),
    (["--dataset", "fashion", "--rho", "0.5", "0"], ["`rho`", "'fashion'", "--dataset synthetic"]),
    (["--dataset", "femnist", "--sizes", "power_law"], ["`sizes`", "'femnist'", "--dataset synthetic"]),
    (["--concentration", "100"], ["`concentration`", "'synthetic'", "--dataset fashion"]),
    (["--dataset", "femnist", "--samples-per-client", "50"], ["`samples_per_client`", "'femnist'",
                                                             "--dataset fashion"]),
])
def test_a_federated_option_of_another_data_set_is_refused_before_any_run(tmp_path, no_runs, args, words):
    # it would be recorded in results.json, and not used
    out = tmp_path / "out"
    _one_line_error(runner.invoke(app, ["bench", "federated", *args, "--out", str(out), "--quiet"]),
                    "does not apply to", *words, code=2)
    assert no_runs == [] and not out.exists()


def test_federated_options_at_their_defaults_and_the_stored_commands_are_accepted(tmp_path, no_runs):
    for args in (["--dataset", "fashion", "--rho", "0", "0", "--sizes", "equal"],
                 ["--data-path", str(tmp_path), "--dataset", "femnist", "--model", "cnn"],
                 ["--model", "linear", "--concentration", "0.3", "--samples-per-client", "100"]):
        res = runner.invoke(app, ["bench", "federated", *args, "--out", str(tmp_path / "out"), "--quiet"])
        assert isinstance(res.exception, _Reached), (args, res.output)
    commands = _stored_federated_commands()
    assert len(commands) >= 30
    for args in commands:
        res = runner.invoke(app, ["bench", "federated", *args, "--out", str(tmp_path / "out")])
        assert isinstance(res.exception, _Reached), (args, res.output)
    assert len(no_runs) == 3 + len(commands)


def test_an_interrupted_bench_says_to_resume_only_when_runs_were_kept(tmp_path, monkeypatch):
    from most.bench import RUNS_DIR, structure

    out = tmp_path / "new" / "structure"
    finished = out / RUNS_DIR / "quadratic-equal" / "MosT" / "seed0" / "result.json"

    def stopped(keep: bool):
        def run_benchmark(config, **options):
            out.mkdir(parents=True)
            (out / ".lock").write_text("")
            if keep:
                finished.parent.mkdir(parents=True)
                finished.write_text("{}")
            raise KeyboardInterrupt

        return run_benchmark

    args = ["bench", "structure", "--seed", "0", "--out", str(out), "--quiet"]
    monkeypatch.setattr(structure, "run_benchmark", stopped(keep=False))
    res = runner.invoke(app, args)
    assert res.exit_code == 130 and "Interrupted before any run finished; nothing was kept." in res.stderr
    assert "--resume" not in res.stderr and not (tmp_path / "new").exists()  # the folders it made go
    monkeypatch.setattr(structure, "run_benchmark", stopped(keep=True))
    res = runner.invoke(app, args)
    assert res.exit_code == 130 and "--resume" in res.stderr and f"{out / RUNS_DIR}" in " ".join(res.stderr.split())
    assert finished.is_file()


def test_a_bare_memory_error_is_one_line_without_empty_parentheses():
    from most.cli._app import _user_error

    message, code = _user_error(MemoryError())
    assert code == 2 and "()" not in message and message.startswith("out of memory")
    message, _ = _user_error(MemoryError("cannot allocate 9 GB"))
    assert "(cannot allocate 9 GB)" in message
