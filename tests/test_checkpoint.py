"""Checkpoints (most.checkpoint): nothing in a checkpoint file runs, a resume is refused when
the run differs from the one that wrote it, and every method resumes to its uninterrupted result."""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib
import pickle
import random
import shutil

import numpy as np
import pytest
import torch

import most
import most.federated as fl
from most.checkpoint import Checkpoint, CheckpointError, CheckpointMismatchError
from most.experiments import parse_experiment, run_experiment
from most.experiments.runner import execute
from most.experiments.spec import _centralised_registry, _federated_registry
from most.experiments.store import CorruptFileError, RunFolder


class _Touch:
    """Unpickling this creates a file: the proof that a loader ran code from the file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.path),)


# ----------------------------------------------------------------------------- nothing runs
@pytest.mark.parametrize("write", ["pickle", "torch.save"])
def test_a_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path, write):
    marker = tmp_path / "pwned"
    ckpt = Checkpoint(tmp_path / "c.pt")
    payload = {"format": 2, "state": {"round": 1, "x": _Touch(marker)}}
    if write == "pickle":
        ckpt.path.write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, ckpt.path)
    with pytest.raises(CheckpointError, match="cannot be read safely"):
        ckpt.load(torch.Generator())
    assert not marker.exists()


def test_a_legacy_pickle_checkpoint_in_a_results_folder_is_refused_not_loaded(tmp_path):
    exp = parse_experiment(_FED)
    root = run_experiment(exp, tmp_path, progress=False, echo=lambda s: None)
    folder = RunFolder(root / "runs" / "MosT" / "seed0")
    folder.result_file.unlink()
    marker = tmp_path / "pwned"
    (folder.path / "checkpoint.pkl").write_bytes(pickle.dumps({"round": 1, "x": _Touch(marker)}))
    with pytest.raises(CorruptFileError, match=r"checkpoint\.pkl is corrupt \(a checkpoint in the pickle format.*"
                                               r"--restart"):
        run_experiment(exp, tmp_path, resume=True, progress=False, echo=lambda s: None)
    assert not marker.exists()
    run_experiment(exp, tmp_path, restart=True, progress=False, echo=lambda s: None)  # --restart starts over
    assert folder.result()["resumed_from_round"] == 0 and not (folder.path / "checkpoint.pkl").exists()
    assert not marker.exists()


def test_the_file_holds_only_tensors_and_plain_values(tmp_path):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    ckpt = Checkpoint(tmp_path / "c", every=5)
    most.MosT(n_models=2, rounds=10, lr=0.1, optimizer=most.optim.Adam()).fit(problem, checkpoint=ckpt)
    plain = torch.load(ckpt.path, weights_only=True)  # would raise on any other object

    def walk(value):
        if isinstance(value, dict):
            for k, v in value.items():
                assert isinstance(k, (str, int)), k
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        else:
            assert value is None or isinstance(value, (bool, int, float, str, torch.Tensor)), type(value)

    walk(plain)


def test_a_component_saved_under_its_package_name_restores_into_todays_class(tmp_path):
    """A component named by its package (``most.methods.TransportAssignment`` and its marginals
    ``most.methods.LoadBounds``, as checkpoints of earlier versions name them) restores into the
    classes of those names in the package's modules; another module's name is refused."""
    from most.checkpoint import restore_into
    from most.methods import LoadBounds, TransportAssignment

    ckpt = Checkpoint(tmp_path / "c")
    ckpt.save({"assignment": TransportAssignment(diversity=0.5, marginals=LoadBounds(min_objectives=2.0))})
    saved = ckpt.load()["assignment"]
    assert saved["type"] == "most.methods.assignments.TransportAssignment"
    assert saved["state"]["marginals"]["type"] == "most.methods.marginals.LoadBounds"
    saved["type"], saved["state"]["marginals"]["type"] = "most.methods.TransportAssignment", "most.methods.LoadBounds"

    restored = TransportAssignment(marginals=LoadBounds())  # the run's settings, then the saved state
    restore_into(restored, saved)
    assert restored == TransportAssignment(diversity=0.5, marginals=LoadBounds(min_objectives=2.0))
    saved["type"] = "most.solver.TransportAssignment"
    with pytest.raises(ValueError, match="holds a TransportAssignment at TransportAssignment where this run has a "
                                         "TransportAssignment"):
        restore_into(TransportAssignment(marginals=LoadBounds()), saved)


# ----------------------------------------------------------------------------- same run only
def test_python_api_resume_with_other_settings_is_refused_naming_them(tmp_path):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    ckpt = Checkpoint(tmp_path / "c", every=5)
    most.MosT(n_models=2, rounds=10, lr=0.1).fit(problem, checkpoint=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"lr \(0\.1 in the checkpoint, 0\.2 now\)"):
        most.MosT(n_models=2, rounds=10, lr=0.2).fit(problem, checkpoint=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"seed \(0 in the checkpoint, 1 now\)"):
        most.MosT(n_models=2, rounds=10, lr=0.1, seed=1).fit(problem, checkpoint=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"combiner\.type \('WeightedSum' in the checkpoint, 'MinNorm'"):
        most.MosT(n_models=2, rounds=10, lr=0.1, combiner=most.MinNorm()).fit(problem, checkpoint=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"reseed"):
        most.MosT(n_models=2, rounds=10, lr=0.1, reseed=None).fit(problem, checkpoint=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"assignment\.diversity"):
        most.MosT(n_models=2, rounds=10, lr=0.1, diversity=0.5).fit(problem, checkpoint=ckpt)


@pytest.mark.parametrize("make, other, name", [
    (lambda: most.baselines.EPO(n_models=2, rounds=6, lr=0.05, preferences=[[0.9, 0.1, 0.0], [0.1, 0.9, 0.0]]),
     lambda: most.baselines.EPO(n_models=2, rounds=6, lr=0.05, preferences=[[0.5, 0.5, 0.0], [0.1, 0.9, 0.0]]),
     "method.preferences"),
    (lambda: most.Linearization(n_models=2, rounds=6, lr=0.05, concentration=0.5),
     lambda: most.Linearization(n_models=2, rounds=6, lr=0.05, concentration=5.0), "method.concentration"),
    (lambda: most.baselines.SumOfMinimum(n_models=2, rounds=6, lr=0.05, ridge=0.0),
     lambda: most.baselines.SumOfMinimum(n_models=2, rounds=6, lr=0.05, ridge=1.0), "method.ridge"),
])
def test_a_method_setting_the_loop_does_not_see_is_part_of_the_checkpoint(tmp_path, make, other, name):
    """Settings that act through a fixed plan (preferences, a Dirichlet concentration), the problem
    (a ridge) or the seeding are not among the loop's components: the method's own settings
    are kept in the checkpoint, so that resuming with another value is refused, not run with the
    saved one; its progress bar is not a setting."""
    problem = most.Problem.from_function(lambda t: torch.stack([(t ** 2).sum(), ((t - 1) ** 2).sum(),
                                                                ((t + 1) ** 2).sum()]), dim=2, n_objectives=3)
    ckpt = Checkpoint(tmp_path / "c", every=2)
    whole = make().fit(problem)
    with pytest.raises(KeyboardInterrupt):
        def stop(record, params):
            if record.round == 3:
                raise KeyboardInterrupt
        make().fit(problem, callback=stop, checkpoint=ckpt)
    with pytest.raises(CheckpointMismatchError, match=name.replace(".", r"\.")):
        other().fit(problem, checkpoint=ckpt)
    # with a loop setting changed too, both are named, each once
    with pytest.raises(CheckpointMismatchError, match=r"settings: lr \(0\.05 in the checkpoint, 0\.01 now\); "
                       + name.replace(".", r"\.") + r" \([^;]*\)\. Resume"):
        dataclasses.replace(other(), lr=0.01).fit(problem, checkpoint=ckpt)
    resumed = dataclasses.replace(make(), progress=True).fit(problem, checkpoint=ckpt)
    assert torch.equal(resumed.params, whole.params)


def test_a_checkpoint_without_the_methods_settings_still_resumes(tmp_path):
    """A checkpoint written before the method's settings were kept resumes on the loop's alone."""
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    method = most.MosT(n_models=2, rounds=6, lr=0.1)
    whole = method.fit(problem)
    path = tmp_path / "c"
    with pytest.raises(KeyboardInterrupt):
        def stop(record, params):
            if record.round == 3:
                raise KeyboardInterrupt
        method.fit(problem, callback=stop, checkpoint=Checkpoint(path, every=2))
    payload = torch.load(path, weights_only=True)
    assert "method" in payload["settings"]
    del payload["settings"]["method"]
    torch.save(payload, path)
    assert torch.equal(method.fit(problem, checkpoint=Checkpoint(path, every=2)).params, whole.params)


def test_federated_resume_with_other_settings_is_refused(tmp_path):
    data = fl.fedprox_synthetic(0.5, 0.5, n_clients=6, samples_per_client=30, seed=0)
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=4, seed=0)
    ckpt = Checkpoint(tmp_path / "c", every=2)
    fl.run_federated(data, model, fl.methods.MosT(n_models=2, server_lr=5.0), config, checkpoint=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"method\.server_lr \(5\.0 in the checkpoint, 1\.0 now\)"):
        fl.run_federated(data, model, fl.methods.MosT(n_models=2, server_lr=1.0), config, checkpoint=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"config\.lr"):
        fl.run_federated(data, model, fl.methods.MosT(n_models=2, server_lr=5.0),
                         fl.FederatedConfig(rounds=4, seed=0, lr=0.01), checkpoint=ckpt)



def test_federated_resume_on_other_data_or_layers_is_refused_and_an_earlier_checkpoint_resumes(tmp_path):
    from torch import nn

    data, other = (fl.fedprox_synthetic(0.5, 0.5, n_clients=6, samples_per_client=30, seed=s) for s in (0, 1))
    relu, tanh = (fl.FlatModel(lambda a=a: nn.Sequential(nn.Linear(60, 4), a(), nn.Linear(4, 10)), name="mlp")
                  for a in (nn.ReLU, nn.Tanh))
    method, config = fl.methods.FedAvg(n_models=2), fl.FederatedConfig(rounds=4, seed=0)
    whole = fl.run_federated(data, relu, method, config)
    path = tmp_path / "c"

    def stop(log, params):
        if log.round == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fl.run_federated(data, relu, method, config, checkpoint=Checkpoint(path, every=1), callback=stop)
    # the same client ids and sizes, other samples; the same parameter count, other layers
    with pytest.raises(CheckpointMismatchError, match=rf"data \('{data.digest()}' in the checkpoint, "
                                                      rf"'{other.digest()}' now\)"):
        fl.run_federated(other, relu, method, config, checkpoint=Checkpoint(path, every=1))
    with pytest.raises(CheckpointMismatchError, match=r"architecture\.1 \('ReLU\(\)' in the checkpoint, 'Tanh\(\)' now\)"):
        fl.run_federated(data, tanh, method, config, checkpoint=Checkpoint(path, every=1))
    # a checkpoint of a version that kept neither resumes to the uninterrupted result
    payload = torch.load(path, weights_only=True)
    del payload["settings"]["data"], payload["settings"]["architecture"]
    torch.save(payload, path)
    assert torch.equal(fl.run_federated(data, relu, method, config, checkpoint=Checkpoint(path, every=1)).params,
                       whole.params)

_FED = {
    "name": "fed",
    "seeds": [0, 1],
    "checkpoint_every": 2,
    "data": {"name": "fedprox_synthetic", "alpha": 0.0, "beta": 0.0, "n_clients": 8, "samples_per_client": 40},
    "model": {"name": "logistic_regression"},
    "federated": {"rounds": 8, "eval_every": 4},
    "methods": {"MosT": {"n_models": 2, "server_lr": 5.0, "warmup": {"type": "WarmUp", "rounds": 1}}},
}


class _Kill(Exception):
    pass


def _interrupt(monkeypatch, run, folder, at_round):
    """Runs ``run`` into ``folder`` until it has written the metrics of ``at_round``, then stops it."""
    original = RunFolder.append_metrics

    def append(self, line):
        original(self, line)
        if line["round"] == at_round:
            raise _Kill

    monkeypatch.setattr(RunFolder, "append_metrics", append)
    with pytest.raises(_Kill):
        execute(run, folder, checkpoint_every=2, progress=False)
    monkeypatch.undo()


def _edited(**method):
    table = json.loads(json.dumps(_FED))
    table["methods"]["MosT"].update(method)
    return parse_experiment(table)


def test_resume_after_the_experiment_file_changed_is_refused_naming_the_key(tmp_path, monkeypatch):
    exp = parse_experiment(_FED)
    root = tmp_path / "fed"
    folder = RunFolder(root / "runs" / "MosT" / "seed0")
    _interrupt(monkeypatch, exp.runs[0], folder, at_round=4)
    stored = folder.stored_config()
    with pytest.raises(CheckpointMismatchError, match=r"server_lr \(5\.0 in the checkpoint, 1\.0 now\)"):
        run_experiment(_edited(server_lr=1.0), tmp_path, resume=True, progress=False, echo=lambda s: None)
    assert folder.stored_config() == stored  # config.json was not rewritten with the refused values
    assert folder.result() is None


def test_a_checkpoint_copied_into_another_seeds_folder_is_refused(tmp_path, monkeypatch):
    exp = parse_experiment(_FED)
    root = tmp_path / "fed"
    seed0, seed1 = (RunFolder(root / "runs" / "MosT" / f"seed{s}") for s in (0, 1))
    _interrupt(monkeypatch, exp.runs[0], seed0, at_round=4)
    seed1.path.mkdir(parents=True)
    for name in ("checkpoint.pt", "metrics.jsonl"):
        shutil.copy(seed0.path / name, seed1.path / name)
    with pytest.raises(CheckpointMismatchError, match=r"seed \(0 in the checkpoint, 1 now\)"):
        run_experiment(exp, tmp_path, resume=True, progress=False, echo=lambda s: None)


def test_a_resumed_run_logs_what_an_uninterrupted_one_does(tmp_path, monkeypatch):
    exp = parse_experiment(_FED)
    reference = RunFolder(tmp_path / "ref")
    execute(exp.runs[0], reference, checkpoint_every=2, progress=False)
    folder = RunFolder(tmp_path / "resumed")
    _interrupt(monkeypatch, exp.runs[0], folder, at_round=4)  # the checkpoint holds rounds 0-3
    result = execute(exp.runs[0], folder, checkpoint_every=2, progress=False)
    assert result["resumed_from_round"] == 4

    def strip(lines):
        return [{k: v for k, v in line.items() if k not in ("seconds", "elapsed")} for line in lines]

    assert "gamma_drift" in reference.metrics()[4]
    assert "gamma_drift" in folder.metrics()[4]  # the first round after the resume has its drift
    assert strip(folder.metrics()) == strip(reference.metrics())
    assert torch.equal(folder.final()["params"], reference.final()["params"])


def test_a_metrics_file_that_lost_rounds_stops_the_resume_naming_it(tmp_path, monkeypatch):
    exp = parse_experiment(_FED)
    folder = RunFolder(tmp_path / "run")
    _interrupt(monkeypatch, exp.runs[0], folder, at_round=4)
    lines = folder.metrics_file.read_text().splitlines()
    folder.metrics_file.write_text("\n".join(lines[:2]) + "\n" + lines[3][:10])  # rounds 2-3 lost, then a cut line
    with pytest.raises(CorruptFileError, match=r"metrics\.jsonl is corrupt \(it holds rounds 0-1 but the "
                                               r"checkpoint is at round 4\).*--restart"):
        execute(exp.runs[0], folder, checkpoint_every=2, progress=False)
    assert folder.result() is None


# ----------------------------------------------------------------------------- every method
def _every_centralised():
    _, methods = _centralised_registry()
    for name, cls in methods.items():
        yield pytest.param(cls, id=name)


@pytest.mark.parametrize("cls", list(_every_centralised()))
def test_every_centralised_method_resumes_to_its_uninterrupted_result(tmp_path, cls):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    method = cls(n_models=2, rounds=8, lr=0.05)
    reference = method.fit(problem)
    ckpt = Checkpoint(tmp_path / "c", every=3)

    def kill(record, params):
        if record.round == 4:
            raise _Kill

    with pytest.raises(_Kill):
        method.fit(problem, callback=kill, checkpoint=ckpt)
    resumed = method.fit(problem, checkpoint=ckpt)
    assert torch.equal(resumed.params, reference.params)
    assert len(resumed.history) == 8


def _every_federated():
    _, _, methods = _federated_registry()
    for name, cls in methods.items():
        yield pytest.param(cls, id=name)


@pytest.mark.parametrize("cls", list(_every_federated()))
def test_every_federated_method_resumes_to_its_uninterrupted_result(tmp_path, cls):
    data = fl.fedprox_synthetic(0.5, 0.5, n_clients=6, samples_per_client=30, seed=0)
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=6, participation=0.5, seed=0)
    build = {  # the methods whose constructor is not (n_models) alone; CFL with thresholds that split early
        fl.methods.SetScalarization: lambda: cls(n_models=2, combiner=most.baselines.STCHSetCombiner()),
        fl.methods.Oracle: lambda: cls([0, 1, 0, 1, 0, 1]),
        fl.methods.LocalOnly: lambda: cls(),
        fl.methods.CFL: lambda: cls(n_models=2, eps1=10.0, eps2=0.01, min_rounds=1),
    }.get(cls, lambda: cls(n_models=2))
    reference = fl.run_federated(data, model, build(), config)
    ckpt = Checkpoint(tmp_path / "c", every=2)

    def kill(log, params):
        if log.round == 3:
            raise _Kill

    with pytest.raises(_Kill):
        fl.run_federated(data, model, build(), config, callback=kill, checkpoint=ckpt)
    resumed = fl.run_federated(data, model, build(), config, checkpoint=ckpt)
    assert torch.equal(resumed.params, reference.params)
    assert torch.equal(resumed.choice, reference.choice)


def test_the_flower_app_writes_valid_json_atomically(tmp_path, monkeypatch):
    pytest.importorskip("flwr")
    import os

    from most.flower.app import _write_result

    _write_result(tmp_path, {"mean_accuracy": float("nan"), "x": [1.0]}, {"params": torch.ones(2)})
    assert json.loads((tmp_path / "result.json").read_text()) == {"mean_accuracy": None, "x": [1.0]}
    assert torch.equal(torch.load(tmp_path / "final.pt", weights_only=True)["params"], torch.ones(2))

    def crash(*args):  # killed between writing the temporary file and the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        _write_result(tmp_path, {"x": [2.0]}, {"params": torch.zeros(2)})
    monkeypatch.undo()
    assert json.loads((tmp_path / "result.json").read_text())["x"] == [1.0]  # the previous files are intact
    assert torch.equal(torch.load(tmp_path / "final.pt", weights_only=True)["params"], torch.ones(2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final.pt", "result.json"]


def test_adding_a_seed_after_editing_the_file_is_refused(tmp_path):
    """Seeds of one group share a configuration: a report must not average two settings."""
    table = json.loads(json.dumps(_FED))
    run_experiment(parse_experiment(dict(table, seeds=[0])), tmp_path, progress=False, echo=lambda s: None)
    table["methods"]["MosT"]["server_lr"] = 1.0
    with pytest.raises(ValueError, match=r"seed0 is a finished run of 'MosT' made with a different configuration "
                                         r"\(differs in: method\.server_lr\)"):
        run_experiment(parse_experiment(dict(table, seeds=[1])), tmp_path, progress=False, echo=lambda s: None)
    assert not (tmp_path / "fed" / "runs" / "MosT" / "seed1").exists()
    table["methods"]["MosT"]["server_lr"] = 5.0  # the same settings: a new seed joins the group
    run_experiment(parse_experiment(dict(table, seeds=[1])), tmp_path, progress=False, echo=lambda s: None)
    assert RunFolder(tmp_path / "fed" / "runs" / "MosT" / "seed1").result() is not None


def test_most_run_refuses_a_changed_resume_in_one_line_with_the_users_exit_code(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from most.cli import app

    exp = parse_experiment(_FED)
    _interrupt(monkeypatch, exp.runs[0], RunFolder(tmp_path / "fed" / "runs" / "MosT" / "seed0"), at_round=4)
    table = json.loads(json.dumps(_FED))
    table["methods"]["MosT"]["server_lr"] = 1.0
    lines = [f"{k} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for name in ("data", "model", "federated"):
        lines += [f"[{name}]"] + [f"{k} = {json.dumps(v)}" for k, v in table[name].items()]
    inline = lambda v: ("{ " + ", ".join(f"{k} = {json.dumps(x)}" for k, x in v.items()) + " }"  # noqa: E731
                        if isinstance(v, dict) else json.dumps(v))
    lines += ["[methods.MosT]"] + [f"{k} = {inline(v)}" for k, v in table["methods"]["MosT"].items()]
    (tmp_path / "fed.toml").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["run", str(tmp_path / "fed.toml"), "--out", str(tmp_path), "--resume", "--quiet"])
    assert res.exit_code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1
    assert "server_lr (5.0 in the checkpoint, 1.0 now)" in res.stderr and "--restart" in res.stderr


@pytest.mark.parametrize("round_", [-3, 0, 99, 2.5])
def test_a_checkpoint_whose_round_was_edited_is_refused(tmp_path, round_):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    ckpt = Checkpoint(tmp_path / "c", every=2)
    method = most.MosT(n_models=2, rounds=6, lr=0.1)
    method.fit(problem, checkpoint=ckpt)
    payload = torch.load(ckpt.path, weights_only=True)
    payload["state"]["round"] = round_
    torch.save(payload, ckpt.path)
    with pytest.raises(CheckpointError, match=r"is inconsistent \(round .* of 6, with 6 rounds of history\)"):
        method.fit(problem, checkpoint=ckpt)


@pytest.mark.parametrize("edit, found", [
    (lambda state: state.pop("opt_state"), "its 'opt_state' is missing"),
    (lambda state: state.pop("combiner"), "its 'combiner' is missing"),
    (lambda state: [part.append(v) for part, v in zip(  # a round's record with a field of another version
        (state["history"]["items"][0]["keys"], state["history"]["items"][0]["values"]), ("new_field", 1))],
     "unexpected keyword argument 'new_field'"),
])
def test_a_checkpoint_missing_a_part_or_of_another_version_is_a_checkpoint_error(tmp_path, edit, found):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    ckpt = Checkpoint(tmp_path / "c", every=2)
    method = most.MosT(n_models=2, rounds=6, lr=0.1)
    with pytest.raises(KeyboardInterrupt):
        def stop(record, params):
            if record.round == 3:
                raise KeyboardInterrupt
        method.fit(problem, callback=stop, checkpoint=ckpt)
    payload = torch.load(ckpt.path, weights_only=True)
    edit(payload["state"])
    torch.save(payload, ckpt.path)
    with pytest.raises(CheckpointError, match=r"damaged or was written by another version \(.*" + found):
        method.fit(problem, checkpoint=ckpt)


@pytest.mark.parametrize("where", ["run folder", "group folder", "file"])
def test_a_run_never_writes_through_a_symbolic_link(tmp_path, where):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "metrics.jsonl").write_text("")
    runs = tmp_path / "out" / "fed" / "runs"
    runs.mkdir(parents=True)
    if where == "run folder":
        (runs / "MosT").mkdir()
        (runs / "MosT" / "seed0").symlink_to(victim)
    elif where == "group folder":
        (runs / "MosT").symlink_to(victim)
    else:
        (runs / "MosT" / "seed0").mkdir(parents=True)
        (runs / "MosT" / "seed0" / "metrics.jsonl").symlink_to(victim / "metrics.jsonl")
    with pytest.raises(ValueError, match="is a symbolic link; .* writes only inside"):
        run_experiment(parse_experiment(dict(_FED, seeds=[0])), tmp_path / "out", restart=True, progress=False,
                       echo=lambda s: None)
    assert sorted(p.name for p in victim.iterdir()) == ["metrics.jsonl"]
    assert (victim / "metrics.jsonl").read_text() == ""


def test_a_path_given_as_the_checkpoint_is_refused_naming_the_wrapper(tmp_path):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    path = str(tmp_path / "run.ckpt")
    method = most.MosT(n_models=2, rounds=3, lr=0.1)
    wrap = r"must be a most\.checkpoint\.Checkpoint or None; got the path '.*'\. Wrap it: most\.checkpoint\.Checkpoint\('"
    with pytest.raises(TypeError, match="`checkpoint` " + wrap):
        method.fit(problem, checkpoint=path)
    with pytest.raises(TypeError, match=r"`checkpoints\[1\]` " + wrap):
        most.fit_batch(problem, [method, method.replace(seed=1)], checkpoints=[None, path])
    with pytest.raises(TypeError, match=r"`checkpoint` must be a most\.checkpoint\.Checkpoint or None; got int"):
        method.fit(problem, checkpoint=5)
    data = fl.fedprox_synthetic(0.5, 0.5, n_clients=4, samples_per_client=30, seed=0)
    with pytest.raises(TypeError, match="`checkpoint` " + wrap):
        fl.run_federated(data, fl.logistic_regression(60, 10), fl.methods.FedAvg(n_models=1),
                         fl.FederatedConfig(rounds=2), checkpoint=tmp_path / "fl.ckpt")
    assert not (tmp_path / "run.ckpt").exists() and not (tmp_path / "fl.ckpt").exists()


# ----------------------------------------------------------------------------- atomic writes
def test_a_checkpoint_path_that_is_a_link_is_written_through_and_stays_a_link(tmp_path):
    from most.checkpoint import atomic_write_bytes

    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "run.ckpt").symlink_to(store / "run.ckpt")  # dangling until the first save
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    method = most.MosT(n_models=2, rounds=6, lr=0.1)
    whole = method.fit(problem)
    with pytest.raises(KeyboardInterrupt):
        def stop(record, params):
            if record.round == 3:
                raise KeyboardInterrupt
        method.fit(problem, callback=stop, checkpoint=Checkpoint(tmp_path / "run.ckpt", every=2))
    assert (tmp_path / "run.ckpt").is_symlink() and (store / "run.ckpt").is_file()
    assert torch.equal(method.fit(problem, checkpoint=Checkpoint(tmp_path / "run.ckpt", every=2)).params, whole.params)
    assert (tmp_path / "run.ckpt").is_symlink()
    atomic_write_bytes(tmp_path / "run.ckpt", b"new")
    assert (store / "run.ckpt").read_bytes() == b"new" and not list(tmp_path.glob(".*.tmp"))


def test_writers_in_two_threads_never_share_a_temporary_file(tmp_path):
    import threading

    from most.checkpoint import atomic_write_bytes

    target, errors = tmp_path / "f.bin", []
    payloads = [bytes([i]) * 200_000 for i in range(2)]

    def write(i):
        try:
            for _ in range(20):
                atomic_write_bytes(target, payloads[i])
        except OSError as exc:  # a temporary file replaced or removed by the other writer
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and target.read_bytes() in payloads
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_checkpoint_folder_that_takes_no_files_is_refused_before_the_first_round(tmp_path, monkeypatch):
    import builtins
    import errno

    import most.checkpoint as checkpoint_module

    def read_only(file, mode="r", *args, **kwargs):  # as a read-only file system answers
        if any(c in mode for c in "wxa"):
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return builtins.open(file, mode, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module, "open", read_only, raising=False)
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    rounds = []
    with pytest.raises(OSError, match=f"Read-only file system: '{tmp_path / 'ck'}'"):
        most.MosT(n_models=2, rounds=50, lr=0.1).fit(problem, checkpoint=Checkpoint(tmp_path / "ck" / "run", every=100),
                                                     callback=lambda record, params: rounds.append(record.round))
    assert rounds == []
    data = fl.fedprox_synthetic(0.5, 0.5, n_clients=4, samples_per_client=30, seed=0)
    with pytest.raises(OSError, match="Read-only file system"):
        fl.run_federated(data, fl.logistic_regression(60, 10), fl.methods.FedAvg(n_models=1),
                         fl.FederatedConfig(rounds=2), checkpoint=Checkpoint(tmp_path / "fl" / "run"),
                         callback=lambda log, params: rounds.append(log))
    assert rounds == []


# ----------------------------------------------------------------------------- one run per file
def _hold_in_another_process(path):
    """A process that holds ``path``'s checkpoint lock until its stdin closes."""
    import subprocess
    import sys

    code = ("import sys; from most.checkpoint import Checkpoint, holding\n"
            f"with holding([Checkpoint({str(path)!r})]):\n    print('held', flush=True); sys.stdin.read()\n")
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_checkpoint_another_process_uses_is_refused_before_the_first_round(tmp_path):
    from most.checkpoint import CheckpointBusyError

    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    method, rounds = most.MosT(n_models=2, rounds=6, lr=0.1), []
    process = _hold_in_another_process(tmp_path / "run.ckpt")
    try:
        with pytest.raises(CheckpointBusyError, match=rf"run.ckpt is in use by another run \(process {process.pid} "):
            method.fit(problem, checkpoint=Checkpoint(tmp_path / "run.ckpt"),
                       callback=lambda record, params: rounds.append(record.round))
        with pytest.raises(CheckpointBusyError):
            most.fit_batch(problem, [method, dataclasses.replace(method, lr=0.2)],
                           checkpoints=[Checkpoint(tmp_path / "other.ckpt"), Checkpoint(tmp_path / "run.ckpt")])
        data = fl.fedprox_synthetic(0.5, 0.5, n_clients=4, samples_per_client=30, seed=0)
        with pytest.raises(CheckpointBusyError):
            fl.run_federated(data, fl.logistic_regression(60, 10), fl.methods.FedAvg(n_models=1),
                             fl.FederatedConfig(rounds=2), checkpoint=Checkpoint(tmp_path / "run.ckpt"),
                             callback=lambda log, params: rounds.append(log))
    finally:
        process.communicate("")
    assert rounds == [] and not (tmp_path / "run.ckpt").exists()
    assert not (tmp_path / "other.ckpt").exists()  # the batch held its first file and let it go unwritten
    # once the other process is gone, the run goes ahead and its lock file goes with it
    result = method.fit(problem, checkpoint=Checkpoint(tmp_path / "run.ckpt"))
    assert torch.equal(result.params, method.fit(problem).params)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]


def test_a_second_run_in_the_same_process_is_refused_and_the_first_goes_on(tmp_path):
    from most.checkpoint import CheckpointBusyError

    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    method, refused = most.MosT(n_models=2, rounds=6, lr=0.1), []

    def nested(record, params):
        if record.round == 1:
            with pytest.raises(CheckpointBusyError, match=f"process {__import__('os').getpid()} "):
                method.fit(problem, checkpoint=Checkpoint(tmp_path / "link.ckpt"))  # the same file, through a link
            refused.append(record.round)

    (tmp_path / "link.ckpt").symlink_to(tmp_path / "run.ckpt")
    result = method.fit(problem, checkpoint=Checkpoint(tmp_path / "run.ckpt", every=2), callback=nested)
    assert refused == [1] and torch.equal(result.params, method.fit(problem).params)
    assert Checkpoint(tmp_path / "run.ckpt").load()["round"] == 6
    assert not list(tmp_path.glob(".*.lock"))


def test_a_lock_file_left_by_a_killed_run_does_not_block_the_next(tmp_path):
    import signal

    process = _hold_in_another_process(tmp_path / "run.ckpt")
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (tmp_path / ".run.ckpt.lock").is_file()  # a killed process removes nothing; the system dropped its lock
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    most.MosT(n_models=2, rounds=4, lr=0.1).fit(problem, checkpoint=Checkpoint(tmp_path / "run.ckpt"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]


def test_a_file_system_without_locks_runs_with_a_warning_and_busy_files_are_still_refused(tmp_path, monkeypatch):
    import errno

    import most._locks as locks

    def unsupported(fd):  # what flock answers on a mount that keeps no locks
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(locks, "_take", unsupported)
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    method = most.MosT(n_models=2, rounds=4, lr=0.1)
    with pytest.warns(UserWarning, match="keeps no file locks"):
        result = method.fit(problem, checkpoint=Checkpoint(tmp_path / "run.ckpt"))
    assert torch.equal(result.params, method.fit(problem).params)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]

    def busy(fd):
        raise BlockingIOError(errno.EWOULDBLOCK, "Resource temporarily unavailable")

    monkeypatch.setattr(locks, "_take", busy)
    from most.checkpoint import CheckpointBusyError

    with pytest.raises(CheckpointBusyError):
        method.fit(problem, checkpoint=Checkpoint(tmp_path / "other.ckpt"))


def test_a_lock_whose_holder_line_cannot_be_written_is_still_taken_and_let_go(tmp_path, monkeypatch):
    """The holder's line is a courtesy: a full disk at that write neither fails the run nor leaves
    the lock held by this process (which would then refuse its own next run)."""
    import errno

    import most._locks as locks

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    from most.checkpoint import holding

    with monkeypatch.context() as patch:
        patch.setattr(locks.os, "write", full)
        with holding([Checkpoint(tmp_path / "run.ckpt")]):
            assert (tmp_path / ".run.ckpt.lock").read_bytes() == b""
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    most.MosT(n_models=2, rounds=2, lr=0.1).fit(problem, checkpoint=Checkpoint(tmp_path / "run.ckpt"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]


# ----------------------------------------------------------------------------- state of one's own components
def _own_assignment_run(assignment, **kw):
    from most.methods import MajorityShare, WeightedSum

    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    return most.run(problem, n_models=2, rounds=6, inner_steps=1, lr=0.05, assignment=assignment,
                    weighting=MajorityShare(), combiner=WeightedSum(), **kw)


class _RandomTies:
    """An assignment of one's own that breaks ties with generators outside torch (Python's,
    NumPy's), seeded at reset, and keeps a torch.Size and a defaultdict: all restored on resume
    (the system's entropy source has no state and is kept as it is)."""

    def reset(self, n, m, generator):
        self.n, self.m, self.rng = n, m, random.Random(0)
        self.np_rng, self.legacy, self.shape = np.random.default_rng(1), np.random.RandomState(2), torch.Size([n, m])
        self.calls, self.entropy = collections.defaultdict(int), random.SystemRandom()  # no state of its own

    def __call__(self, losses, round, total, previous=None):
        self.calls[round] += 1  # a new key each round: a plain dict would fail after a resume
        noise = torch.tensor([[self.rng.random() + self.np_rng.random() + self.legacy.rand() for _ in range(self.m)]
                              for _ in range(self.n)], dtype=losses.dtype).reshape(self.shape)
        return torch.nn.functional.one_hot((losses + 1e6 * noise).argmin(1), self.m).to(losses.dtype) / self.n


def _assignment(cls):
    from most.methods import Assignment

    return type(cls.__name__, (cls, Assignment), {})()


def test_generators_outside_torch_in_ones_own_component_resume_exactly(tmp_path):
    class Stop(Exception):
        pass

    def stop(record, _params):
        if record.round == 2:
            raise Stop

    whole = _own_assignment_run(_assignment(_RandomTies))
    with pytest.raises(Stop):
        _own_assignment_run(_assignment(_RandomTies), checkpoint=Checkpoint(tmp_path / "c", every=1), callback=stop)
    resumed = _own_assignment_run(_assignment(_RandomTies), checkpoint=Checkpoint(tmp_path / "c", every=1))
    assert torch.equal(resumed.params, whole.params) and torch.equal(resumed.losses, whole.losses)


@pytest.mark.parametrize("state, kind", [(set(), "set"), ("namedtuple", "Stats")])
def test_state_no_checkpoint_gives_back_is_refused_before_the_first_round(tmp_path, state, kind):
    import collections

    value = collections.namedtuple("Stats", "count last")(0, None) if state == "namedtuple" else state

    class Keeps:
        def reset(self, n, m, generator):
            self.n, self.m, self.kept = n, m, value

        def __call__(self, losses, round, total, previous=None):
            return torch.nn.functional.one_hot(losses.argmin(1), self.m).to(losses.dtype) / self.n

    rounds = []
    with pytest.raises(TypeError, match=f"cannot hold the {kind} at assignment.kept"):
        _own_assignment_run(_assignment(Keeps), checkpoint=Checkpoint(tmp_path / "c", every=3),
                            callback=lambda record, _p: rounds.append(record.round))
    assert rounds == [] and not (tmp_path / "c").exists()
    _own_assignment_run(_assignment(Keeps))  # without a checkpoint nothing is saved: it runs


def test_a_checkpoint_of_another_dtype_is_refused(tmp_path):
    centres = torch.tensor([[0.0, 0.0], [0.3, 0.0], [9.0, 9.0], [9.0, 9.3]])

    def problem(dtype):
        c = centres.to(dtype)
        return most.Problem.from_function(lambda th: ((th - c) ** 2).sum(-1), dim=2, n_objectives=4,
                                          init=lambda m, g: torch.randn(m, 2, generator=g, dtype=dtype))

    method = most.MosT(n_models=2, rounds=4, lr=0.1)
    method.replace(rounds=2).fit(problem(torch.float64), checkpoint=Checkpoint(tmp_path / "c", every=1))
    with pytest.raises(CheckpointMismatchError, match="holds float64 parameters and this run's are float32"):
        method.replace(rounds=2).fit(problem(torch.float32), checkpoint=Checkpoint(tmp_path / "c", every=1))
    # federated: the same models saved in float64 (as a float64 model's run would)
    data = fl.fedprox_synthetic(0.5, 0.5, n_clients=6, samples_per_client=30, seed=0)
    cfg = fl.FederatedConfig(rounds=3, seed=0)
    path = tmp_path / "f"
    fl.run_federated(data, fl.logistic_regression(60, 10), fl.methods.FedAvg(n_models=1), cfg,
                     checkpoint=Checkpoint(path, every=1))
    payload = torch.load(path, weights_only=True)
    payload["state"]["params"] = payload["state"]["params"].double()
    torch.save(payload, path)
    with pytest.raises(CheckpointMismatchError, match="holds float64 models and this run's are float32"):
        fl.run_federated(data, fl.logistic_regression(60, 10), fl.methods.FedAvg(n_models=1), cfg,
                         checkpoint=Checkpoint(path, every=1))


def test_a_checkpoint_the_user_may_not_read_is_kept_and_named(tmp_path, monkeypatch):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    path = tmp_path / "c"
    most.MosT(n_models=2, rounds=2).fit(problem, checkpoint=Checkpoint(path))

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(torch, "load", refused)
    with pytest.raises(PermissionError, match="the checkpoint cannot be read \\(it is kept: give this user access"):
        most.MosT(n_models=2, rounds=2).fit(problem, checkpoint=Checkpoint(path))
    assert path.is_file()


def test_a_checkpoint_cut_short_anywhere_is_a_checkpoint_error(tmp_path):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    path = tmp_path / "c"
    most.MosT(n_models=2, rounds=2).fit(problem, checkpoint=Checkpoint(path))
    data = path.read_bytes()
    for share in range(5, 100, 5):  # torch's zip reader names some cuts with an errno: still a cut, not the OS
        path.write_bytes(data[: len(data) * share // 100])
        with pytest.raises(CheckpointError, match="was cut short"):
            Checkpoint(path).check()


def test_a_resume_by_another_method_names_the_methods_first(tmp_path):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    most.MosT(n_models=2, rounds=3).fit(problem, checkpoint=Checkpoint(tmp_path / "c"))
    with pytest.raises(CheckpointMismatchError, match=r"other settings: method.type \('MosT' in the checkpoint, "
                                                      r"'SumOfMinimum' now\)"):
        most.baselines.SumOfMinimum(n_models=2, rounds=3).fit(problem, checkpoint=Checkpoint(tmp_path / "c"))


def test_a_checkpoint_path_that_is_a_link_loop_is_refused(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    with pytest.raises(OSError, match="leads back to itself"):
        most.MosT(n_models=2, rounds=2).fit(problem, checkpoint=Checkpoint(tmp_path / "a"))
    assert (tmp_path / "a").is_symlink()
