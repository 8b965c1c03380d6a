"""What a user can get wrong at the command line gets one line naming the key, path or option
(the CLI and the experiment files it reads), and every accepted seed gives its own run."""

from __future__ import annotations

import errno
import io
import tomllib

import pytest
import torch
from typer.testing import CliRunner

import most
import most.federated as fl
from most.checkpoint import Checkpoint, CheckpointError
from most.cli import app
from most.config import ConfigError
from most.experiments import parse_experiment
from most.flower.credentials import check_host
from tests.test_cli import CENTRAL, FED, _one_line_error


def _dry(tmp_path, text: str, *extra: str):
    path = tmp_path / "e.toml"
    path.write_text(text, encoding="utf-8")
    return CliRunner().invoke(app, ["run", str(path), "--dry-run", *extra])


# ----------------------------------------------------------------------------- values of the wrong kind
@pytest.mark.parametrize("text, needle", [
    ("seeds = [0]\nproblem = 3\n[methods.MosT]\nn_models = 2\n", "problem: expected a table"),
    ("seeds = [0]\nproblem = {name = [\"x\"]}\n[methods.MosT]\nn_models = 2\n", "problem.name: expected a string"),
    ("seeds = [0]\ndata = 5\n[model]\nname = \"cnn\"\n[methods.MosT]\nn_models = 2\n", "data: expected a table"),
    ("seeds = [0]\ndata = {name = {a = 1}}\n[model]\nname = \"cnn\"\n[methods.MosT]\nn_models = 2\n",
     "data.name: expected a string"),
    ("seeds = [0]\nmethods = [1]\n[problem]\nname = \"zdt1\"\n", "methods: expected a table"),
    ("seeds = [0]\nsweep = 3\n[problem]\nname = \"zdt1\"\n[methods.MosT]\nn_models = 2\n", "sweep: expected a table"),
    ("seeds = [0]\n[problem]\nname = \"zdt1\"\n[methods.M]\ntype = [\"MosT\"]\nn_models = 2\n",
     "methods.M.type: expected a string naming a method"),
    ("seeds = [0]\n[problem]\nname = \"zdt1\"\n[methods.MosT]\nn_models = 2\n[methods.MosT.marginals]\ntype = [1]\n",
     "methods.MosT.marginals.type: expected a string"),
    ("seeds = [-1]\n[problem]\nname = \"zdt1\"\n[methods.MosT]\nn_models = 2\n", "seeds: each seed must be an int in [0, 2**64)"),
    ("seeds = [0]\n[problem]\nname = \"mixed_regression\"\nnoise = nan\n[methods.MosT]\nn_models = 2\n",
     "`noise` must be a non-negative finite number"),
])
def test_values_of_the_wrong_kind_name_their_key(tmp_path, text, needle):
    _one_line_error(_dry(tmp_path, text), needle, code=2)


def test_a_byte_order_mark_is_read_as_the_editor_meant(tmp_path):
    res = _dry(tmp_path, "\ufeff" + CENTRAL)
    assert res.exit_code == 0, res.output


def test_a_label_too_long_for_a_folder_is_refused_in_the_dry_run(tmp_path):
    label = "x" * 300
    res = _dry(tmp_path, CENTRAL.replace("[methods.MosT]", f'[methods."{label}"]\ntype = "MosT"'))
    err = _one_line_error(res, "at most 200 fit in a folder name", "Shorten the label", code=2)
    assert len(err) < 400


# ----------------------------------------------------------------------------- the operating system's refusals
@pytest.mark.parametrize("code, needle", [
    (errno.ENOSPC, "free some space"), (errno.EROFS, "read-only"), (errno.ENAMETOOLONG, "too long"),
    (errno.EACCES, "may not write there"),
])
def test_an_operating_system_refusal_is_one_line_naming_the_path(tmp_path, monkeypatch, code, needle):
    import most.checkpoint as checkpoint

    def refuse(path, data):
        raise OSError(code, os_strerror(code), str(path))

    monkeypatch.setattr(checkpoint, "atomic_write_bytes", refuse)
    (tmp_path / "e.toml").write_text(CENTRAL)
    res = CliRunner().invoke(app, ["run", str(tmp_path / "e.toml"), "--out", str(tmp_path / "out"), "--quiet"])
    _one_line_error(res, os_strerror(code), str(tmp_path / "out"), needle, code=2)


def os_strerror(code: int) -> str:
    import os

    return os.strerror(code)


def test_an_out_folder_name_too_long_is_one_line(tmp_path):
    (tmp_path / "e.toml").write_text(CENTRAL)
    res = CliRunner().invoke(app, ["run", str(tmp_path / "e.toml"), "--out", str(tmp_path / ("o" * 300)), "--quiet"])
    _one_line_error(res, "File name too long", code=2)


# ----------------------------------------------------------------------------- other commands
def test_choose_m_over_a_huge_range_says_so_in_a_short_line(tmp_path):
    (tmp_path / "e.toml").write_text(CENTRAL)
    res = CliRunner().invoke(app, ["choose-m", str(tmp_path / "e.toml"), "--n-models", "1:1000",
                                   "--out", str(tmp_path / "c")])
    err = _one_line_error(res, "and 983 more (up to 1000)", code=2)
    assert len(err) < 500
    # a range of more counts than choose-m fits is refused before its list is made
    res = CliRunner().invoke(app, ["choose-m", str(tmp_path / "e.toml"), "--n-models", "1:1000000000",
                                   "--out", str(tmp_path / "c")])
    _one_line_error(res, "asks for 1000000000 fits, one per count; give at most 1000 counts", code=2)
    assert not (tmp_path / "c").exists()


def test_demo_refuses_an_out_folder_that_takes_no_files_before_any_fit(tmp_path, monkeypatch):
    import builtins
    import errno

    import most.checkpoint as checkpoint_module

    def read_only(file, mode="r", *args, **kwargs):  # as a read-only file system answers
        if any(c in mode for c in "wxa"):
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return builtins.open(file, mode, *args, **kwargs)

    def no_fit(*args, **kwargs):
        raise AssertionError("a fit ran before the folder was checked")

    monkeypatch.setattr(checkpoint_module, "open", read_only, raising=False)
    monkeypatch.setattr(most.MosT, "fit", no_fit)
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--quiet"])
    _one_line_error(res, "Read-only file system", str(tmp_path / "d"), "write to another --out", code=2)


def test_plot_errors_other_than_the_seed_do_not_name_the_seed(tmp_path):
    res = CliRunner().invoke(app, ["plot", str(tmp_path)])
    err = _one_line_error(res, code=2)
    assert "--seed" not in err


@pytest.mark.parametrize("host, needle", [
    ("10.0.0.5:9092", "holds a port"), ("https://superlink.lab", "URL"), ("superlink.lab/x", "path"),
    ("999.1.1.1", "not a valid IP address"), ("bad_host!", "neither an IP address nor a DNS name"),
    ("-lead.lab", "neither"),
])
def test_flower_credentials_refuse_a_host_no_client_could_match(tmp_path, host, needle):
    with pytest.raises(ValueError, match=needle):
        check_host(host)
    res = CliRunner().invoke(app, ["flower", "credentials", str(tmp_path / "c"), "--host", host])
    _one_line_error(res, needle, code=2)
    assert not (tmp_path / "c").exists()


def test_flower_credentials_refuse_a_validity_past_the_last_date_before_making_the_folder(tmp_path):
    res = CliRunner().invoke(app, ["flower", "credentials", str(tmp_path / "c"), "--valid-days", "3000000"])
    _one_line_error(res, "--valid-days: `valid_days` must be at most", "9999-12-31", code=2)
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("host", ["10.0.0.5", "::1", "superlink.lab", "localhost", "node-1.example.org."])
def test_flower_credentials_take_ip_addresses_and_dns_names(host):
    assert check_host(host) == host


# ----------------------------------------------------------------------------- damaged checkpoints
@pytest.mark.parametrize("damage", ["no state", "short generator", "state of the wrong kind", "bad entry"])
def test_a_damaged_checkpoint_of_the_current_format_is_one_clear_error(tmp_path, damage):
    problem = most.Problem.from_function(lambda t: (t - torch.arange(4.0)[:, None]).pow(2).sum(-1), 2, 4)
    checkpoint = Checkpoint(tmp_path / "c.pt", every=1)
    with pytest.raises(KeyboardInterrupt):
        def stop(record, params):
            if record.round == 2:  # after the checkpoints of rounds 0 and 1
                raise KeyboardInterrupt
        most.MosT(n_models=2, rounds=5).fit(problem, callback=stop, checkpoint=checkpoint)
    payload = torch.load(tmp_path / "c.pt", weights_only=True)
    if damage == "no state":
        del payload["state"]
    elif damage == "short generator":
        payload["generator_state"] = payload["generator_state"][:100]
    elif damage == "state of the wrong kind":
        payload["state"] = [1, 2]
    else:
        payload["state"]["params"] = {"__most__": "ndarray"}
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    (tmp_path / "c.pt").write_bytes(buffer.getvalue())
    with pytest.raises(CheckpointError, match="damaged"):
        most.MosT(n_models=2, rounds=5).fit(problem, checkpoint=checkpoint)


# ----------------------------------------------------------------------------- seeds
def test_every_accepted_seed_gives_its_own_run_up_to_2_to_the_64():
    problem = most.problems.quadratic_clusters(n_clusters=3, per_cluster=3)
    fits = {s: most.MosT(n_models=2, rounds=3, seed=s).fit(problem).params for s in (5, 5 + 2**32, 2**64 - 1)}
    assert not torch.equal(fits[5], fits[5 + 2**32]) and not torch.equal(fits[5], fits[2**64 - 1])
    assert torch.equal(fits[5], most.MosT(n_models=2, rounds=3, seed=5).fit(problem).params)
    data = fl.fedprox_synthetic(0, 0, n_clients=4, samples_per_client=30, seed=2**64 - 1)
    model = fl.logistic_regression(data.clients[0].x_train.shape[1], data.n_classes)
    runs = [fl.run_federated(data, model, fl.methods.FedAvg(n_models=1), fl.FederatedConfig(rounds=2, seed=s)).params
            for s in (7, 7 + 2**32, 2**64 - 1)]
    assert not torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_a_seed_outside_the_promised_range_is_refused_naming_the_range(seed):
    with pytest.raises(ValueError, match=r"`seed` must be an int in \[0, 2\*\*64\)"):
        most.MosT(n_models=2, seed=seed)
    for make in (lambda: fl.fedprox_synthetic(0, 0, n_clients=4, samples_per_client=30, seed=seed),
                 lambda: fl.mixture_synthetic(n_clients=4, seed=seed)):
        with pytest.raises(ValueError, match=r"`seed` must be an int in \[0, 2\*\*64\)"):
            make()
    with pytest.raises(ConfigError, match=r"seeds: each seed must be an int in \[0, 2\*\*64\)"):
        parse_experiment(tomllib.loads(CENTRAL.replace("seeds = [0]", f"seeds = [{seed}]")))


def test_the_largest_seed_runs_from_the_command_line(tmp_path):
    (tmp_path / "e.toml").write_text(FED)
    res = CliRunner().invoke(app, ["run", str(tmp_path / "e.toml"), "--out", str(tmp_path / "o"), "--quiet",
                                   "--set", f"seeds=[{2**64 - 1}]", "--set", "methods.MosT.n_models=2"])
    assert res.exit_code == 0, res.output


def test_a_damaged_federated_checkpoint_is_one_clear_error(tmp_path):
    data = fl.fedprox_synthetic(0, 0, n_clients=4, samples_per_client=30, seed=0)
    model = fl.logistic_regression(data.clients[0].x_train.shape[1], data.n_classes)
    config = fl.FederatedConfig(rounds=4, seed=0)
    checkpoint = Checkpoint(tmp_path / "c.pt", every=1)

    def stop(log, params):
        if log.round == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fl.run_federated(data, model, fl.methods.FedAvg(n_models=2), config, callback=stop, checkpoint=checkpoint)
    payload = torch.load(tmp_path / "c.pt", weights_only=True)
    payload["state"]["params"] = payload["state"]["params"][:1]
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    (tmp_path / "c.pt").write_bytes(buffer.getvalue())
    with pytest.raises(CheckpointError, match="damaged: its models should be a tensor of shape"):
        fl.run_federated(data, model, fl.methods.FedAvg(n_models=2), config, checkpoint=checkpoint)
