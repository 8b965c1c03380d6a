"""most.flower.app's ServerApp main and ClientApp over an in-process Flower grid
(``tests/flower/_grid.py``): what a run config is refused for, and what the run saves."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr", reason="needs the flower extra: pip install 'most-transport[flower]'")

import torch  # noqa: E402
from flwr.app import Context, RecordDict  # noqa: E402

from most.flower import app  # noqa: E402
from most.flower.client import client_val_accuracy  # noqa: E402

from tests.flower._grid import LocalGrid  # noqa: E402

BASE = {"num-clients": 3, "n-models": 2, "rounds": 2, "warmup-rounds": 0, "samples-per-client": 30,
        "fine-tune-epochs": 1, "wait-for-clients": 0.0}


def _run(run_config: dict) -> LocalGrid:
    """Runs the app's ServerApp main over a grid of ``num-clients`` of its ClientApps."""
    grid = LocalGrid(app.client_app, run_config["num-clients"], run_config=run_config)
    app._main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config))
    return grid


@pytest.mark.parametrize("key, value", [("data-seed", -1), ("rho1", -1.0), ("samples-per-client", 1)])
def test_a_bad_data_setting_is_refused_by_the_server_before_any_message(key, value):
    """The data's settings are read only by the SuperNodes; the ServerApp refuses a bad one under
    its run-config key before it sends a message (each client would otherwise fail to load)."""
    grid = LocalGrid(app.client_app, 3, run_config={**BASE, key: value})
    with pytest.raises(ValueError, match=f"`{key}`"):
        app._main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                run_config={**BASE, key: value}))
    assert grid.delivered == []


@pytest.mark.parametrize("method", ["FedEM", "FineTuning", "MosT"])
def test_the_saved_result_says_which_predictor_each_accuracy_is_of(method, tmp_path):
    """final.pt and result.json hold FedEM's mixture weights and the model each FineTuning client
    fine-tuned, with the selection loss and the pick by it; methods without them save none."""
    settings = app.AppSettings.from_run_config({**BASE, "method": method})
    _run({**BASE, "method": method, "out": str(tmp_path)})
    final = torch.load(tmp_path / "final.pt")
    summary = json.loads((tmp_path / "result.json").read_text())
    n, m = settings.num_clients, settings.n_models
    assert final["params"].shape[0] == m
    for key in ("selection_loss", "loss_choice"):
        assert torch.equal(torch.as_tensor(summary[key]), final[key])
    assert ("mixture" in final) == ("mixture" in summary) == (method == "FedEM")
    assert ("fine_tuned_from" in final) == ("fine_tuned_from" in summary) == (method == "FineTuning")
    if method == "FedEM":  # each client's weights of the m models: its accuracy is its mixture's
        assert final["mixture"].shape == (n, m) and final["val_accuracy"].shape == (n, 1)
        torch.testing.assert_close(final["mixture"].sum(1), torch.ones(n, dtype=final["mixture"].dtype))
        torch.testing.assert_close(torch.as_tensor(summary["mixture"], dtype=final["mixture"].dtype),
                                   final["mixture"])
    if method == "FineTuning":  # each client fine-tuned its best of the m saved models on validation
        _, model, _ = settings.build()
        data = settings.data()
        best = [int(torch.tensor(client_val_accuracy(model, final["params"], c)).argmax()) for c in data.clients]
        assert final["fine_tuned_from"].tolist() == summary["fine_tuned_from"] == best
    if method == "MosT":  # one of the m models per client: the pick by loss indexes them; Gamma of the last round
        assert final["selection_loss"].shape == (n, m) and final["assignment"].shape == (n, m)
    else:  # no transport plan
        assert final["assignment"] is None
