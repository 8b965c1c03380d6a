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


@pytest.mark.parametrize("under", [False, True])
def test_an_out_at_or_under_a_file_is_refused_before_any_message(under, tmp_path):
    """The results would be lost after the last round: the ServerApp refuses such an `out` first."""
    afile = tmp_path / "afile"
    afile.write_text("")
    out = afile / "run" if under else afile
    grid = LocalGrid(app.client_app, 3, run_config={**BASE, "out": str(out)})
    with pytest.raises(app.RunConfigError, match=r"`out` = .*afile.* is (under .*afile.*, which is )?a file, not a "
                                                 r"folder"):
        app._main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                run_config={**BASE, "out": str(out)}))
    assert grid.delivered == []


def test_an_out_that_does_not_exist_yet_is_made(tmp_path):
    _run({**BASE, "rounds": 1, "out": str(tmp_path / "a" / "b")})
    assert (tmp_path / "a" / "b" / "result.json").is_file()


def test_results_that_cannot_be_written_to_out_are_kept_elsewhere(tmp_path, monkeypatch):
    """`out` was fine at the start and is not at the end (a file took its parent's place): the
    results go to a temporary folder, which the error names."""
    monkeypatch.setattr(app.tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    out = tmp_path / "parent" / "run"
    config = {**BASE, "rounds": 1, "out": str(out)}
    grid = LocalGrid(app.client_app, 3, run_config=config)
    grid.on_round = lambda g, msg: (tmp_path / "parent").write_text("") if msg.metadata.message_type == "train" else None
    with pytest.raises(app.AppError, match=r"Could not write the results to `out` = .*parent/run.* \(Not a "
                                           r"directory\); they were written to .*most-flower-result-.* instead"):
        app._main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    (kept,) = (tmp_path / "temp").iterdir()
    assert json.loads((kept / "result.json").read_text())["rounds"] == 1
    assert torch.load(kept / "final.pt")["params"].shape[0] == 2


@pytest.mark.parametrize("config, message", [
    ({"n-models": 2.5}, r"^run-config\.n-models: expected an integer; got 2\.5\.$"),
    ({"server-lr": "fast"}, r"^run-config\.server-lr: expected a number; got 'fast'\.$"),
    ({"class-groups": "yes"}, r"^run-config\.class-groups: expected true or false; got 'yes'\.$"),
    ({"n-modles": 3}, r"^run-config\.n-modles: unknown key \(did you mean 'n-models'\?\)\. Allowed keys: method, "
                      r"n-models, server-lr, warmup-rounds, class-groups, fine-tune-epochs, rounds,"),
    ({"n-models": 0}, r"^`n-models` must be an int >= 1; got 0\.$"),
    ({"n-models": 4}, r"^The run config does not make a run: .*at least as many clients as models"),
])
def test_run_config_errors_name_the_dashed_key(config, message):
    grid = LocalGrid(app.client_app, 3, run_config={**BASE, **config})
    with pytest.raises(app.RunConfigError, match=message):
        app._main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                run_config={**BASE, **config}))
    assert grid.delivered == []


def test_flowers_log_of_a_run_config_error_is_one_line():
    """Flower logs the exception a ServerApp raises with its traceback (``log(ERROR, "%s raised an
    exception", "ServerApp", exc_info=ex)`` in flwr-serverapp); for the app's errors the log is one
    line with the message. Other exceptions keep their traceback."""
    import io
    import logging

    from flwr.supercore.logger import log

    with pytest.raises(app.RunConfigError) as info:
        app._main(LocalGrid(app.client_app, 3), Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                                        run_config={**BASE, "n-models": 2.5}))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    flower = logging.getLogger("flwr")
    flower.addHandler(handler)
    try:
        log(logging.ERROR, "%s raised an exception", "ServerApp", exc_info=info.value)
        assert stream.getvalue() == ("ERROR: ServerApp raised an exception: run-config.n-models: expected an "
                                     "integer; got 2.5.\n")
        try:
            raise KeyError("other")
        except KeyError as exc:
            log(logging.ERROR, "%s raised an exception", "ServerApp", exc_info=exc)
        assert "Traceback" in stream.getvalue()
    finally:
        flower.removeHandler(handler)
