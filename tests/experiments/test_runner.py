"""Experiment files, the results store, checkpoints and resume, reports and figures."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import most
import most.federated as fl
from most.checkpoint import Checkpoint, atomic_write_bytes, restore_into
from most.cli import app
from most.config import ConfigError, build, component
from most.experiments import (InterruptedRunsError, load_experiment, parse_experiment, plot, report,
                              run_experiment)
from most.experiments.store import RunFolder

from tests._tables import CENTRAL, FED, with_  # noqa: E402

_with = with_


def _toml(table: dict) -> str:
    """A minimal TOML writer for the tables of these tests."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        return repr(v)

    lines, tables = [], []
    for k, v in table.items():
        if isinstance(v, dict):
            tables.append((k, v))
        else:
            lines.append(f"{k} = {value(v)}")
    for k, v in tables:
        if k == "methods":
            for label, t in v.items():
                lines.append(f"\n[methods.{json.dumps(label)}]")
                lines += [f"{kk} = {value(vv)}" for kk, vv in t.items()]
        else:
            lines.append(f"\n[{k}]")
            lines += [f"{json.dumps(kk)} = {value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- config validation
def test_build_rejects_unknown_keys_with_path_and_suggestion():
    with pytest.raises(ConfigError, match=r"federated\.round: unknown key \(did you mean 'rounds'\?\)\. "
                                          r"Allowed keys: rounds, local_epochs"):
        build(fl.FederatedConfig, {"round": 3}, path="federated")


@pytest.mark.parametrize("table, message", [
    ({"rounds": "ten"}, r"federated\.rounds: expected an integer; got 'ten'"),
    ({"rounds": 2.5}, r"federated\.rounds: expected an integer; got 2\.5"),
    ({"lr": True}, r"federated\.lr: expected a number; got True"),
    ({"rounds": 0}, r"federated: `rounds` must be"),  # the class's own check, with the path
])
def test_build_rejects_wrong_types_and_values(table, message):
    with pytest.raises(ConfigError, match=message):
        build(fl.FederatedConfig, table, path="federated")


def test_optional_components_are_left_out_by_the_string_none():
    method = build(most.MosT, {"n_models": 2, "seeding": "none", "reseed": "none"}, path="m")
    assert method.seeding is None and method.reseed is None
    with pytest.raises(ConfigError, match=r'm\.seeding: expected one of KMeansSeeding or "none"; got 3\.'):
        build(most.MosT, {"n_models": 2, "seeding": 3}, path="m")


def test_an_optional_number_takes_none_or_the_string_none():
    for value in (None, "none"):
        groups = build(fl.methods.ClassGroups, {"start_margin": value}, path="g")
        assert groups.start_margin is None
    assert build(fl.methods.ClassGroups, {"start_margin": 0.1}, path="g").start_margin == 0.1
    with pytest.raises(ConfigError, match=r"g\.start_margin"):
        build(fl.methods.ClassGroups, {"start_margin": "wide"}, path="g")


def test_literal_and_component_fields():
    method = build(most.MosT, {"n_models": 2, "transport": "sinkhorn", "marginals": {"type": "Curriculum"},
                               "weighting": "GammaWeights", "optimizer": {"type": "Adam", "beta1": 0.8}})
    assert method.transport == "sinkhorn"
    assert isinstance(method.marginals, most.Curriculum) and isinstance(method.weighting, most.GammaWeights)
    assert method.optimizer == most.optim.Adam(beta1=0.8)
    with pytest.raises(ConfigError, match=r"m\.transport: expected one of 'exact', 'sinkhorn', 'newton', 'ipot'; "
                                          r"got 'emd'"):
        build(most.MosT, {"n_models": 2, "transport": "emd"}, path="m")
    with pytest.raises(ConfigError, match=r"m\.marginals\.type: unknown component 'Curiculum' \(did you mean "
                                          r"'Curriculum'\?\)\. Allowed: Uniform, LoadBounds, ShareBounds, Curriculum"):
        build(most.MosT, {"n_models": 2, "marginals": "Curiculum"}, path="m")
    # a weighting where a combiner is expected is refused: only the field's own kinds are allowed
    with pytest.raises(ConfigError, match=r"m\.combiner\.type: unknown component 'GammaWeights'"):
        build(most.MosT, {"n_models": 2, "combiner": "GammaWeights"}, path="m")
    with pytest.raises(ConfigError, match=r"m\.n_models: required by MosT and missing"):
        build(most.MosT, {}, path="m")
    with pytest.raises(ConfigError, match=r"x: a component table needs a `type` key"):
        component({"warmup": 0.3}, "x")


def test_experiment_errors_name_the_key():
    cases = [
        (_with(FED, federated={"rounds": 5, "lr": "fast"}), r"federated\.lr: expected a number; got 'fast'"),
        (_with(FED, data={"name": "fedprox_synthetic", "alpha": 0.0, "betta": 0.0}),
         r"data\.betta: unknown key \(did you mean 'beta'\?\)"),
        (_with(FED, data={"name": "femnst"}), r"data\.name: unknown data 'femnst' \(did you mean 'femnist'\?\)"),
        (_with(FED, model={"name": "cnn", "channels": [8]}), r"model\.channels: expected a list of 2 values"),
        (_with(FED, methods={"MosT": {"n_models": 2, "diversty": 0.1}}),
         r"methods\.MosT\.diversty: unknown key \(did you mean 'diversity'\?\)"),
        (_with(FED, methods={"Ours": {"n_models": 2}}), r"methods\.Ours: unknown method 'Ours'.*needs `type"),
        (_with(FED, methods={"MosT": {"n_models": 2, "seed": 3}}), r"methods\.MosT\.seed: not allowed here"),
        (_with(FED, sweep={"methods.MosT.server_lr": 3.0}), r"sweep\.\"methods\.MosT\.server_lr\": expected a "
                                                            r"non-empty list"),
        (_with(FED, sweep={"methods.Nope.lr": [1.0]}), r"no method labelled 'Nope'"),
        (_with(FED, sweep={"methods.MosT": [1.0]}), r"name the field of 'MosT' to sweep too, such as "
                                                    r"\"methods\.MosT\.lr\""),
        (_with(FED, sweep={"methods.MosT.server_lr": [1.0, 1.0]}), r"the sweep repeats the value"),
        (_with(FED, methods={"ü": {"type": "MosT", "n_models": 2}, "é": {"type": "MosT", "n_models": 2}}),
         r"the labels 'ü' and 'é' give one folder name"),
        (_with(FED, methods={"MosT": {"n_models": 2, "fo": 1}}), r"unknown key\. Allowed keys: n_models, server_lr, "
                                                                r"(?!.*\bseed\b)"),
        (_with(FED, sweep={"methods.MosT.server_lr": [1.0, "big"]}), r"methods\.MosT\.server_lr: expected a number"),
        (_with(FED, seeds=[0, 0]), r"seeds: repeated"),
        (_with(FED, problem={"name": "zdt"}), r"federated .* or centralised .* not both"),
        (_with(FED, extra=1), r"extra: unknown top-level key"),
        (_with(CENTRAL, methods={"MosT": {"n_models": 3, "progress": True}}), r"methods\.MosT\.progress: not "
                                                                              r"allowed here"),
    ]
    for table, message in cases:
        with pytest.raises(ConfigError, match=message):
            parse_experiment(table)


def test_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="No experiment file"):
        load_experiment(tmp_path / "nope.toml")
    (tmp_path / "bad.toml").write_text("name = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_experiment(tmp_path / "bad.toml")


def test_sweep_expands_to_runs_and_seeds_reach_data_and_method():
    exp = parse_experiment(_with(FED, seeds=[0, 1], sweep={"methods.MosT.server_lr": [1.0, 2.0],
                                                           "federated.lr": [0.05, 0.1]}))
    # MosT: 2 x 2 sweep x 2 seeds; FedAvg: only the global key, 2 x 2 seeds
    assert len(exp) == 8 + 4
    groups = {r.group for r in exp.runs}
    assert "MosT [server_lr=2.0, federated.lr=0.1]" in groups and "FedAvg [federated.lr=0.05]" in groups
    run = next(r for r in exp.runs if r.label == "MosT" and r.seed == 1 and r.sweep["methods.MosT.server_lr"] == 2.0)
    built = run.build_without_data()
    assert built["method"].server_lr == 2.0 and built["config"].seed == 1
    assert run.config["data"]["seed"] == 1  # the data follow the run seed unless the file fixes it
    fixed = parse_experiment(_with(FED, data=dict(FED["data"], seed=7)))
    assert {r.config["data"]["seed"] for r in fixed.runs} == {7}
    central = parse_experiment(CENTRAL)
    assert [r.build_without_data()["method"].seed for r in central.runs if r.label == "MosT"] == [0, 1]


def test_example_files_parse():
    for path in sorted(Path(__file__).parents[2].joinpath("examples").glob("*.toml")):
        exp = load_experiment(path)
        assert len(exp) >= 1, path


# ----------------------------------------------------------------------------- checkpoints
def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    ckpt = Checkpoint(tmp_path / "c.pkl", every=1)
    gen = torch.Generator().manual_seed(0)
    ckpt.save({"round": 1, "x": torch.arange(3)}, gen)

    def crash(*args):  # the process dies after writing the temporary file, before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save({"round": 2, "x": torch.arange(5)}, gen)
    monkeypatch.undo()
    state = ckpt.load(torch.Generator())
    assert state["round"] == 1 and torch.equal(state["x"], torch.arange(3))  # the old checkpoint is intact
    assert not list(tmp_path.glob(".c.pkl.*.tmp"))  # the temporary file is removed when the write fails

    atomic_write_bytes(ckpt.path, ckpt.path.read_bytes()[:20])  # a truncated file: a clear error
    with pytest.raises(ValueError, match="cannot be read safely.*delete it"):
        ckpt.load(torch.Generator())


def test_checkpoint_restores_generator_and_shared_references(tmp_path):
    gen = torch.Generator().manual_seed(3)
    method = fl.methods.Linearization(n_models=2)
    run = method.start(5, 2, gen)
    ckpt = Checkpoint(tmp_path / "c", every=1)
    ckpt.save({"method_state": run}, gen)
    expected = torch.rand(4, generator=gen)
    other = torch.Generator().manual_seed(99)
    state = ckpt.load(other)
    assert torch.equal(torch.rand(4, generator=other), expected)
    resumed = method.start(5, 2, torch.Generator().manual_seed(7))  # another draw: the restore must replace it
    restore_into(resumed, state["method_state"], other)
    assert torch.equal(resumed.components[0]._plan, run.components[0]._plan)

    class Holder:  # an object that keeps a reference to the run's generator
        def __init__(self, generator):
            self.generator = generator

    ckpt.save({"holder": Holder(gen)}, gen)
    live = torch.Generator().manual_seed(5)
    restored = Holder(torch.Generator())
    restore_into(restored, ckpt.load(live)["holder"], live)
    assert restored.generator is live  # the reference points at the live generator, not a copy


class _Kill(Exception):
    pass


def _kill_at(round_):
    def callback(record, params):
        if record.round == round_:
            raise _Kill

    return callback


@pytest.mark.parametrize("method", [
    most.MosT(n_models=3, rounds=25, lr=0.05, optimizer=most.optim.Adam(), marginals=most.Curriculum()),
    most.WeightedMGDA(n_models=3, rounds=25, lr=0.05),
])
def test_resume_equals_uninterrupted_run_centralised(tmp_path, method):
    problem = most.problems.quadratic_clusters(n_clusters=3, per_cluster=3, seed=0)
    reference = method.fit(problem)
    ckpt = Checkpoint(tmp_path / "c", every=4)
    with pytest.raises(_Kill):
        method.fit(problem, callback=_kill_at(13), checkpoint=ckpt)
    assert ckpt.load()["round"] == 12
    resumed = method.fit(problem, checkpoint=ckpt)
    assert torch.equal(resumed.params, reference.params)
    assert torch.equal(resumed.assignment, reference.assignment)
    assert len(resumed.history) == 25
    with pytest.raises(ValueError, match=r"other settings: rounds \(25 in the checkpoint, 30 now\)"):
        method.replace(rounds=30).fit(problem, checkpoint=ckpt) if hasattr(method, "replace") else \
            most.WeightedMGDA(n_models=3, rounds=30, lr=0.05).fit(problem, checkpoint=ckpt)


@pytest.mark.parametrize("split", [
    dict(warmup=fl.methods.WarmUp(2)),
    dict(warmup=fl.methods.GroupedWarmUp(7)),  # the split (round 6) falls between the checkpoint (5) and the kill (7)
])
def test_resume_equals_uninterrupted_run_federated(tmp_path, split):
    data = fl.fedprox_synthetic(0.5, 0.5, n_clients=10, samples_per_client=40, seed=0)
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=12, participation=0.5, seed=0, eval_every=4)

    def make():
        return fl.methods.MosT(n_models=3, server_lr=3.0, **split)

    reference = fl.run_federated(data, model, make(), config)
    ckpt = Checkpoint(tmp_path / "c", every=5)
    with pytest.raises(_Kill):
        fl.run_federated(data, model, make(), config, callback=_kill_at(7), checkpoint=ckpt)
    resumed = fl.run_federated(data, model, make(), config, checkpoint=ckpt)
    assert torch.equal(resumed.params, reference.params)
    assert [log.round for log in resumed.history] == list(range(12))
    assert [log.val_accuracy for log in resumed.history] == [log.val_accuracy for log in reference.history]


def test_resume_inside_the_rounds_that_hold_the_warm_ups_groups_equals_an_uninterrupted_run(tmp_path):
    from tests.federated._groups import skewed_groups

    data = skewed_groups(seed=1)
    model = fl.logistic_regression(20, 10)
    config = fl.FederatedConfig(rounds=12, lr=0.1, seed=0, eval_every=4)

    def make():  # the groups are found in round 1 and hold rounds 2-6
        return fl.methods.MosT(n_models=3, warmup=fl.methods.WarmUp(2))

    reference = fl.run_federated(data, model, make(), config)
    ckpt = Checkpoint(tmp_path / "c", every=4)
    with pytest.raises(_Kill):
        fl.run_federated(data, model, make(), config, callback=_kill_at(6), checkpoint=ckpt)
    assert ckpt.load()["round"] == 4
    resumed = fl.run_federated(data, model, make(), config, checkpoint=ckpt)
    assert torch.equal(resumed.params, reference.params)
    assert [log.plan.tolist() for log in resumed.history[4:]] == [log.plan.tolist() for log in reference.history[4:]]


# ----------------------------------------------------------------------------- runs, store, report, plots
def test_run_store_report_and_plot_centralised(tmp_path):
    exp = parse_experiment(CENTRAL, source=_toml(CENTRAL))
    lines = []
    root = run_experiment(exp, tmp_path, progress=False, echo=lines.append)
    assert root == tmp_path / "central" and "4 to run" in lines[0]
    folder = RunFolder(root / "runs" / "MosT" / "seed1")
    config, result, metrics = folder.stored_config(), folder.result(), folder.metrics()
    assert config["seed"] == 1 and config["versions"]["torch"] == torch.__version__
    assert config["versions"]["cpu_kernels"] == str(torch.backends.cpu.get_cpu_capability())
    assert config["resolved"]["method"]["type"] == "MosT" and config["resolved"]["method"]["seed"] == 1
    assert [m["round"] for m in metrics] == list(range(30))
    assert {"train_loss", "gamma_sparsity", "owners"} <= set(metrics[0]) and "gamma_drift" in metrics[1]
    final = folder.final()
    assert final["params"].shape == (3, 2) and final["assignment"].shape == (12, 3)
    assert not folder.checkpoint_file.exists()
    # the stored result matches the models: MosT finds the 3 clusters (loss ~ within-cluster spread)
    problem = most.problems.quadratic_clusters(n_clusters=3, per_cluster=4, seed=1)
    assert result["metrics"]["loss"] == pytest.approx(float(problem.loss_matrix(final["params"]).min(1).values.mean()),
                                                      rel=1e-5)

    lines.clear()
    run_experiment(exp, tmp_path, progress=False, echo=lines.append)  # finished runs are skipped
    assert lines == [f"central: 4 runs, 4 already done, 0 to run -> {root}"]

    text = report(root)
    losses = [RunFolder(root / "runs" / "MosT" / f"seed{s}").result()["metrics"]["loss"] for s in (0, 1)]
    row = next(line for line in text.splitlines() if line.startswith("| MosT |"))
    assert f"{np.mean(losses):.3g} ± {np.std(losses, ddof=1):.3g}" in row
    with open(root / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == ["MosT", "Linearization"]
    assert float(rows[0]["loss_mean"]) == pytest.approx(np.mean(losses))
    mosT, lin = (float(r["loss_mean"]) for r in rows)
    assert mosT < lin / 10  # three models on three clusters, against three averages of all of them

    files = plot(root, formats=("png",))
    names = {Path(f).name for f in files}
    assert {"training_loss.png", "per_objective.png", "assignment_most.png", "sparsity_drift.png"} <= names
    assert all(re.fullmatch(r"[a-z0-9_]+\.png", n) for n in names), names  # plain names: no "=", no capitals
    assert all(Path(f).stat().st_size > 5000 for f in files)

    changed = _with(CENTRAL, methods={"MosT": {"n_models": 3, "rounds": 30, "lr": 0.2}})
    with pytest.raises(ConfigError, match=r"different configuration \(differs in: method\.lr\)"):
        run_experiment(parse_experiment(changed), tmp_path, progress=False, echo=lines.append)


def test_two_objective_problem_gets_hypervolume_and_pareto_plot(tmp_path):
    table = {
        "name": "zdt", "seeds": [0],
        "problem": {"name": "zdt1", "n_var": 5},
        "methods": {"MosT": {"n_models": 3, "rounds": 20, "lr": 0.01,
                             "extension": {"type": "TchebycheffExtension", "n_extra": 3, "spread": "grid",
                                           "include_original": False}}},
    }
    with pytest.raises(ConfigError, match=r"problem\.name: unknown problem"):
        parse_experiment(_with(table, problem={"name": "zdt9"}))
    root = run_experiment(parse_experiment(table), tmp_path, progress=False, echo=lambda s: None)
    result = RunFolder(root / "runs" / "MosT" / "seed0").result()
    assert result["metrics"]["hypervolume"] > 0 and len(result["points"]) == 3
    assert "pareto.png" in {Path(f).name for f in plot(root, formats=("png",))}


def test_a_federated_experiment_on_images_with_logistic_regression_runs_reports_and_plots(tmp_path):
    """[model] name = "logistic_regression" on image data: the model flattens its samples (it
    failed on the first batch before), and clients without a test sample (small clients, written
    as null) are left out of the per-objective figure."""
    from tests.federated.test_data import _tiny_fashion

    (tmp_path / "fashion").mkdir()
    _tiny_fashion(tmp_path / "fashion", n_train=300, n_test=60)
    table = with_(FED, data={"name": "fashion_mnist", "path": str(tmp_path / "fashion"), "n_clients": 30,
                             "samples_per_client": 8}, methods={"FedAvg": {"n_models": 2}})
    root = run_experiment(parse_experiment(table, source=_toml(table)), tmp_path / "out", progress=False,
                          echo=lambda s: None)
    result = RunFolder(root / "runs" / "FedAvg" / "seed0").result()
    assert len(result["per_objective"]) == 30 and None in result["per_objective"]
    assert "| FedAvg |" in report(root)
    assert "per_objective.png" in {Path(f).name for f in plot(root, formats=("png",))}


def test_federated_run_report_and_interrupted_runs(tmp_path):
    exp = parse_experiment(FED, source=_toml(FED))
    root = run_experiment(exp, tmp_path, progress=False, echo=lambda s: None)
    result = RunFolder(root / "runs" / "MosT" / "seed0").result()
    assert set(result["metrics"]) == {"mean", "worst20", "worst40", "worst60", "worst80", "oracle", "prediction_kl"}
    assert len(result["per_objective"]) == 8 and result["objective_names"][0].startswith("f_")
    metrics = RunFolder(root / "runs" / "MosT" / "seed0").metrics()
    assert [m["val_accuracy"] is not None for m in metrics] == [False, False, True, False, False, True]
    assert "| MosT |" in report(root)
    assert {"worst_k.png", "val_accuracy.png"} <= {Path(f).name for f in plot(root, formats=("png",))}

    # a leftover checkpoint without a result: the run must be resumed or restarted explicitly
    folder = RunFolder(root / "runs" / "FedAvg" / "seed0")
    folder.result_file.unlink()
    folder.checkpoint(1).save({"round": 0, "history": []})
    with pytest.raises(InterruptedRunsError, match=r"1 run\(s\) .* interrupted \(runs/FedAvg/seed0\).*--resume"):
        run_experiment(exp, tmp_path, progress=False, echo=lambda s: None)
    run_experiment(exp, tmp_path, restart=True, progress=False, echo=lambda s: None)
    assert folder.result()["resumed_from_round"] == 0


def _stored_results(root: Path, key: str) -> dict:
    """Every run's stored metrics, per-objective values and ``key``, by result file."""
    out = {}
    for f in sorted((root / "runs").rglob("result.json")):
        r = json.loads(f.read_text())
        out[str(f.relative_to(root))] = (r["metrics"], r["per_objective"], r[key])
    return out


def _stored_metrics(root: Path) -> list[dict]:
    """Every run's per-round lines without their seconds."""
    return [{k: v for k, v in m.items() if k not in ("seconds", "elapsed")}
            for f in sorted((root / "runs").rglob("metrics.jsonl")) for m in RunFolder(f.parent).metrics()]


def _stopped_then_resumed(monkeypatch, target: str, killed, exp, out: Path) -> Path:
    """Runs ``exp()`` with ``target`` replaced by ``killed`` (which stops the batch midway), checks
    that a plain call then refuses the interrupted runs, and resumes them; returns the results root."""
    monkeypatch.setattr(target, killed)
    with pytest.raises(_Kill):
        run_experiment(exp(), out, progress=False, echo=lambda s: None)
    monkeypatch.undo()
    with pytest.raises(InterruptedRunsError):
        run_experiment(exp(), out, progress=False, echo=lambda s: None)
    return run_experiment(exp(), out, resume=True, progress=False, echo=lambda s: None)


def _resumed_from(root: Path) -> list[int]:
    return sorted(json.loads(f.read_text())["resumed_from_round"] for f in (root / "runs").rglob("result.json"))


def test_a_batched_sweep_equals_runs_one_by_one_and_a_stopped_batch_resumes(tmp_path, monkeypatch):
    """``most run`` trains the federated runs that share data, model and protocol as one batch
    (here the methods and the swept server steps of each seed): the same result files as one by
    one; a batch killed midway leaves each run its checkpoint, and --resume ends where an
    uninterrupted batch ends."""
    from most.experiments import runner

    table = _with(FED, seeds=[0, 1], sweep={"methods.MosT.server_lr": [1.0, 3.0]}, checkpoint_every=3,
                  federated={"rounds": 6, "eval_every": 3})
    exp = lambda: parse_experiment(table, source=_toml(table))  # noqa: E731 (fresh method objects per call)
    alone = run_experiment(exp(), tmp_path / "alone", progress=False, echo=lambda s: None, batch=False)
    groups = runner.batch_groups([(run, None) for run in exp().runs])
    assert [len(g) for g in groups] == [3, 3]  # per seed (the data's seed): MosT at 2 steps, FedAvg
    batched = run_experiment(exp(), tmp_path / "batched", progress=False, echo=lambda s: None)

    results = lambda root: _stored_results(root, "choice_counts")  # noqa: E731
    assert len(results(alone)) == 6 and results(batched) == results(alone)
    assert _stored_metrics(batched) == _stored_metrics(alone)

    real = fl.run_batch

    def killed_at_round_4(*args, callback=None, **kwargs):
        def stop(r, log, params):
            callback(r, log, params)
            if log.round == 4:
                raise _Kill
        return real(*args, callback=stop, **kwargs)

    root = _stopped_then_resumed(monkeypatch, "most.federated.runtime.run_batch", killed_at_round_4, exp,
                                 tmp_path / "cut")
    assert results(root) == results(alone) and _stored_metrics(root) == _stored_metrics(alone)
    assert _resumed_from(root) == [0, 0, 0, 3, 3, 3]  # seed 0's batch from its checkpoints; seed 1's from the start


def test_centralised_runs_on_one_problem_go_in_step_and_a_stopped_batch_resumes(tmp_path, monkeypatch):
    """``most run`` makes the centralised runs on the same problem (here the methods and swept
    values of each seed: the problem is drawn with the seed) as one ``most.fit_batch``: the same
    result files as one by one (these quadratics batch bit for bit); a batch stopped midway leaves
    each run its checkpoint, and --resume ends where an uninterrupted batch ends."""
    from most.experiments import runner

    table = _with(CENTRAL, sweep={"methods.MosT.weighting": ["MajorityShare", "GammaWeights"]}, checkpoint_every=10)
    exp = lambda: parse_experiment(table, source=_toml(table))  # noqa: E731 (fresh method objects per call)
    groups = runner.batch_groups([(run, None) for run in exp().runs])
    assert [len(g) for g in groups] == [3, 3]  # per seed: MosT with two weightings, linearization
    alone = run_experiment(exp(), tmp_path / "alone", progress=False, echo=lambda s: None, batch=False)
    batched = run_experiment(exp(), tmp_path / "batched", progress=False, echo=lambda s: None)

    results = lambda root: _stored_results(root, "rounds")  # noqa: E731
    assert len(results(alone)) == 6 and results(batched) == results(alone)
    assert _stored_metrics(batched) == _stored_metrics(alone)

    real = most.solver.fit_batch

    def killed_at_round_14(problem, methods, *, callbacks, **kwargs):
        def stop(callback):
            def on_round(record, params):
                callback(record, params)
                if record.round == 14:
                    raise _Kill
            return on_round
        return real(problem, methods, callbacks=[stop(c) for c in callbacks], **kwargs)

    root = _stopped_then_resumed(monkeypatch, "most.solver.fit_batch", killed_at_round_14, exp, tmp_path / "cut")
    assert results(root) == results(alone) and _stored_metrics(root) == _stored_metrics(alone)
    assert _resumed_from(root) == [0, 0, 0, 10, 10, 10]  # seed 0's batch from its checkpoints; seed 1's from the start


# ----------------------------------------------------------------------------- the command line
def test_cli_run_report_plot_and_errors(tmp_path):
    runner = CliRunner()
    path = tmp_path / "exp.toml"
    path.write_text(_toml(_with(CENTRAL, seeds=[0])))
    res = runner.invoke(app, ["run", str(path), "--dry-run"])
    assert res.exit_code == 0 and "central (centralised): 2 runs" in res.output and "MosT/seed0" in res.output
    res = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "r"), "--quiet"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", str(tmp_path / "r" / "central")])
    assert res.exit_code == 0 and "| Linearization |" in res.output
    res = runner.invoke(app, ["plot", str(tmp_path / "r" / "central"), "--format", "png"])
    assert res.exit_code == 0 and "training_loss.png" in res.output

    path.write_text(_toml(_with(CENTRAL, methods={"MosT": {"n_models": 3, "lr": -1.0}})))
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 2 and "methods.MosT: `lr` must be a positive number; got -1.0" in res.output
    res = runner.invoke(app, ["report", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "No results folder" in res.output
    for command in ("run", "report", "plot"):
        res = runner.invoke(app, [command, "--help"])
        assert res.exit_code == 0 and "Example" in res.output


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_uninterrupted_result(tmp_path):
    table = _with(FED, name="kill", methods={"MosT": {"n_models": 3, "server_lr": 3.0}},
                  federated={"rounds": 400, "eval_every": 50}, checkpoint_every=5)
    path = tmp_path / "kill.toml"
    path.write_text(_toml(table))
    command = [sys.executable, "-m", "most.cli", "run", str(path), "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS="1")

    reference = subprocess.run(command + ["--out", str(tmp_path / "ref")], env=env, capture_output=True, text=True)
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "killed"
    proc = subprocess.Popen(command + ["--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ckpt = Checkpoint(out / "kill" / "runs" / "MosT" / "seed0" / "checkpoint.pt")
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if ckpt.exists() and ckpt.load(torch.Generator())["round"] >= 50:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = ckpt.load(torch.Generator())["round"]
    assert 50 <= killed_at < 400

    again = subprocess.run(command + ["--out", str(out)], env=env, capture_output=True, text=True)
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = subprocess.run(command + ["--out", str(out), "--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr

    a, b = (RunFolder(root / "kill" / "runs" / "MosT" / "seed0") for root in (tmp_path / "ref", out))
    assert torch.equal(a.final()["params"], b.final()["params"])
    assert a.result()["metrics"] == b.result()["metrics"]
    assert b.result()["resumed_from_round"] >= killed_at
    assert [m["round"] for m in b.metrics()] == list(range(400))  # no round lost or repeated
    assert [m["train_loss"] for m in a.metrics()] == [m["train_loss"] for m in b.metrics()]


def test_documented_experiment_file_parses_and_expands():
    page = (Path(__file__).parents[2] / "docs" / "experiments.md").read_text()
    blocks = [b.split("```", 1)[0] for b in page.split("```toml\n")[1:]]
    assert blocks, "the experiments page shows an experiment file"
    from most.experiments.spec import tomllib

    exp = parse_experiment(tomllib.loads(blocks[0]))
    groups = {r.group for r in exp.runs}
    # MosT: 2 server steps x 2 lrs; the others: 2 lrs each; every group over 3 seeds
    assert {"MosT [server_lr=3.0, federated.lr=0.05]", "MosT paper [federated.lr=0.1]", "FedAvg [federated.lr=0.05]"} <= groups
    assert len(exp) == (4 + 2 + 2) * 3


def test_missing_data_folder_fails_before_any_run(tmp_path):
    table = _with(FED, data={"name": "femnist", "path": str(tmp_path / "no_femnist")})
    lines = []
    with pytest.raises(FileNotFoundError, match=r"data\.path: no such folder .*no_femnist"):
        run_experiment(parse_experiment(table), tmp_path, progress=False, echo=lines.append)
    assert lines == [] and not (tmp_path / "fed").exists()


def test_problem_with_splits_reports_test_loss_of_the_validation_choice(tmp_path):
    table = {"name": "reg", "seeds": [0],
             "problem": {"name": "mixed_regression", "n_objectives": 8, "n_groups": 2},
             "methods": {"MosT": {"n_models": 2, "rounds": 20, "lr": 0.05}}}
    root = run_experiment(parse_experiment(table), tmp_path, progress=False, echo=lambda s: None)
    folder = RunFolder(root / "runs" / "MosT" / "seed0")
    result, params = folder.result(), folder.final()["params"]
    expected = most.problems.mixed_regression(n_objectives=8, n_groups=2, seed=0).test_losses(params)
    assert result["per_objective"] == pytest.approx(expected.tolist())
    assert result["metrics"]["test_loss"] == pytest.approx(float(expected.mean()))
    assert result["objective_names"][:2] == ["task0", "task1"]


def test_a_parameter_name_a_centralised_problem_cannot_resolve_is_refused_before_any_run(tmp_path):
    table = {"name": "names", "seeds": [0],
             "problem": {"name": "mixed_regression", "n_objectives": 8, "n_groups": 2},
             "methods": {"MosT": {"n_models": 2, "rounds": 5, "combiner": {"type": "MinNorm", "coordinates": "last"}}}}
    with pytest.raises(ValueError, match=r"methods\.MosT .*coordinates\(\) needs a problem built with "
                                         r"Problem\.from_module"):
        run_experiment(parse_experiment(table), tmp_path, progress=False, echo=lambda s: None)
    assert not (tmp_path / "names").exists()


def test_plot_shows_the_chosen_seed_in_the_one_run_figures(tmp_path, monkeypatch):
    root = run_experiment(parse_experiment(CENTRAL, source=_toml(CENTRAL)), tmp_path, progress=False,
                          echo=lambda line: None)
    import most.plots

    titles = []
    drawn = most.plots.assignment_heatmap
    monkeypatch.setattr(most.plots, "assignment_heatmap",
                        lambda plan, title="", **kw: (titles.append(title), drawn(plan, title=title, **kw))[1])
    plot(root, formats=("png",), out=tmp_path / "first")
    plot(root, formats=("png",), out=tmp_path / "one", seed=1)
    assert titles == ["MosT: final Γ (seed 0)", "Linearization: final Γ (seed 0)",
                      "MosT: final Γ (seed 1)", "Linearization: final Γ (seed 1)"]
    with pytest.raises(ValueError, match="MosT has no finished run of seed 7; its seeds are 0, 1"):
        plot(root, formats=("png",), out=tmp_path / "none", seed=7)
    res = CliRunner().invoke(app, ["plot", str(root), "--format", "png", "--seed", "7", "--out", str(tmp_path / "c")])
    assert res.exit_code == 2 and "--seed 7: MosT has no finished run of seed 7" in res.output
    assert "Traceback" not in res.output
