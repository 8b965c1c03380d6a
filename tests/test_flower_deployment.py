"""MosT on a real multi-process Flower deployment: a SuperLink and three SuperNodes on 127.0.0.1.

The deployment (``_flower_deploy.Deployment``) runs with TLS (a CA and a server certificate
made in the test) and SuperNode authentication (each SuperNode's public key registered with
the SuperLink); the app is ``examples/flower`` (``most.flower.app``). The tests share one
deployment, in this order: a MosT run checked against the in-process runtime, a stranger's
SuperNode refused, then a SuperNode killed mid-run. Slow (about four minutes), run in CI.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr", reason="Flower is an optional extra: pip install 'most[flower]'")

sys.path.insert(0, os.path.dirname(__file__))
from _flower_deploy import deployment  # noqa: E402

import most.federated as fl  # noqa: E402
from most.flower.app import AppSettings  # noqa: E402

APP = Path(__file__).resolve().parents[1] / "examples" / "flower"
N_CLIENTS = 3
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("flower-deployment")]


@pytest.fixture(scope="module")
def dep():
    # heartbeats every 10 s (Flower's minimum) so that a killed SuperNode is noticed in ~20 s
    with deployment(N_CLIENTS, heartbeat_interval=10) as d:
        yield d


def _run(dep, tmp_path, **config):
    run_config = {"num-clients": N_CLIENTS, "n-models": 2, "warmup-rounds": 0, "rounds": 2, "eval-every": 2,
                  "samples-per-client": 60, "timeout": 90.0, "out": str(tmp_path), **config}
    result = dep.run_app(APP, run_config=run_config, timeout=600)
    assert result.status == "finished:completed", dep.format_logs()
    return run_config, json.loads((tmp_path / "result.json").read_text())


def test_the_superlink_speaks_only_tls(dep):
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP is not served
        urllib.request.urlopen(f"http://{dep.superlink_address}/", timeout=5)
    with pytest.raises(urllib.error.URLError) as info:  # and a client that does not trust our CA refuses it
        urllib.request.urlopen(f"https://{dep.superlink_address}/", timeout=5, context=ssl.create_default_context())
    assert isinstance(info.value.reason, ssl.SSLError)


def test_most_runs_on_an_authenticated_tls_deployment(dep, tmp_path):
    run_config, out = _run(dep, tmp_path)
    assert out["rounds"] == 2 and out["missing"] == {}
    # the same run in process (pair_seeds: each client's batches from its own seed)
    settings = AppSettings.from_run_config({k: v for k, v in run_config.items() if k != "out"})
    method, model, config = settings.build()
    reference = fl.run_federated(settings.data(), model, method, config)
    assert out["mean_accuracy"] == pytest.approx(reference.mean_accuracy, abs=1e-6)
    for ours, log in zip(out["plans"], reference.history):
        torch.testing.assert_close(torch.tensor(ours, dtype=log.plan.dtype), log.plan, rtol=0, atol=1e-9)
    # each client received, for training, exactly the models its row of Gamma gives it
    sent = [(t, client, models) for t, kind, client, models in out["sent"] if kind == "train"]
    assert len(sent) == 2 * N_CLIENTS
    for t, client, models in sent:
        weights = method.weighting(torch.tensor(out["plans"][t], dtype=torch.float64))  # [m, n]
        assert models == weights[:, client].nonzero().squeeze(1).tolist()


def test_a_supernode_with_an_unknown_key_is_refused(dep):
    k = dep.start_unregistered_supernode("partition-id=1 num-partitions=3")
    assert dep.supernode_refused(k, timeout=60), dep.supernode_log(k)
    assert len(dep.online_node_ids()) == N_CLIENTS


def test_a_killed_supernode_is_left_out_and_the_run_finishes(dep, tmp_path):
    killed = {}

    def kill_on_first_train():
        deadline = time.monotonic() + 300
        while "Receiving: train" not in dep.supernode_log(2) and time.monotonic() < deadline:
            time.sleep(0.05)
        killed["at"] = time.monotonic()
        dep.kill_supernode(2)

    threading.Thread(target=kill_on_first_train, daemon=True).start()
    _, out = _run(dep, tmp_path, rounds=3, **{"eval-every": 3})
    assert "at" in killed
    assert out["rounds"] == 3
    # client 2 answered the first query, then its SuperNode died: missing from then on
    assert out["missing"]["0"] == ["2"]  # its training update never came
    assert out["missing"]["1"] == ["2"] and out["missing"]["2"] == ["2"] and out["missing"]["final"] == ["2"]
    for t in (1, 2):
        plan = torch.tensor(out["plans"][t])
        assert plan.shape == (N_CLIENTS - 1, 2)  # Gamma over the two clients that answered
        torch.testing.assert_close(plan.sum(1), torch.full((2,), 0.5, dtype=plan.dtype))
    assert out["client_accuracy"][2] != out["client_accuracy"][2]  # NaN: never evaluated
