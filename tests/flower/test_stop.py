"""Stopping a Flower run from another thread: :meth:`MostStrategy.stop`, and an interrupt
(Ctrl-C) of :func:`most.flower.run_simulation`, whose ServerApp runs in a thread of Flower's.

The grid is ``tests/flower/_grid.py``'s ``PolledGrid``: replies are pulled as from Flower's
grids, and a node in ``down`` never answers (the simulation engine stopped by the interrupt),
so without the stop each exchange would wait for its full timeout.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
import torch

pytest.importorskip("flwr", reason="Flower is an optional extra: pip install 'most-transport[flower]'")

import most.federated as fl  # noqa: E402
from most.federated import methods as F  # noqa: E402
from most.flower import MostStrategy, RunStopped, make_client_app  # noqa: E402
from most.flower.nodes import StoppableGrid  # noqa: E402

from tests.flower._grid import LocalGrid, PolledGrid, client_app as _app  # noqa: E402

N = 4


@pytest.fixture(scope="module")
def data():
    return fl.fedprox_synthetic(0.0, 0.0, n_clients=N, samples_per_client=40, seed=0)


@pytest.fixture(scope="module")
def model():
    return fl.logistic_regression(60, 10)


def _config(**kw):
    return fl.FederatedConfig(**{"rounds": 50, "eval_every": 1, "seed": 0, "pair_seeds": True, **kw})


def test_the_polled_grid_gives_the_local_grids_run(data, model):
    """The strategy's own polling (push, then pull) gives the run that whole exchanges give."""
    config = _config(rounds=2)
    polled = MostStrategy(F.MosT(2, warmup=None), model, config, n_clients=N).run(PolledGrid(_app(data, model), N))
    local = MostStrategy(F.MosT(2, warmup=None), model, config, n_clients=N).run(LocalGrid(_app(data, model), N))
    torch.testing.assert_close(polled.params, local.params, rtol=0, atol=0)


def test_stop_ends_a_run_that_waits_for_replies(data, model):
    """After round 0 no node answers; stop() from another thread ends the wait (timeout 600 s)
    at once, and run() raises RunStopped."""
    grid = PolledGrid(_app(data, model), N)
    strategy = MostStrategy(F.MosT(2, warmup=None), model, _config(), n_clients=N, timeout=600)
    stopped = {}

    def after_round(log, params):
        if log.round == 0:
            grid.down.update(grid.nodes)

            def stop():
                time.sleep(0.3)
                stopped["at"] = time.monotonic()
                strategy.stop()

            threading.Thread(target=stop, daemon=True).start()

    with pytest.raises(RunStopped):
        strategy.run(grid, callback=after_round)
    assert time.monotonic() - stopped["at"] < 2.0
    assert len(strategy.history) == 1


def test_a_stopped_run_sends_no_further_message(data, model):
    """A stop asked between exchanges (a grid that delivers whole exchanges): nothing more is sent."""
    grid = LocalGrid(_app(data, model), N)
    strategy = MostStrategy(F.FedAvg(1), model, _config(), n_clients=N)
    sent = {}

    def after_round(log, params):
        if log.round == 1:
            strategy.stop()
            sent["n"] = len(grid.delivered)

    with pytest.raises(RunStopped):
        strategy.run(grid, callback=after_round)
    assert len(grid.delivered) == sent["n"] and len(strategy.history) == 2
    assert strategy.stop(wait=0)  # run() has returned


def test_a_strategy_stopped_before_it_runs_waits_for_no_client(model):
    strategy = MostStrategy(F.FedAvg(1), model, _config(), n_clients=N, wait_for_clients=600)
    strategy.stop()
    grid = PolledGrid(make_client_app(lambda ctx: None), N)
    grid.down.update(grid.nodes[1:])  # three clients never connect: the run would wait 600 s for them
    tic = time.monotonic()
    with pytest.raises(RunStopped):
        strategy.run(grid)
    assert time.monotonic() - tic < 2.0


def test_an_interrupted_run_simulation_ends_the_serverapps_thread(data, model, monkeypatch):
    """Flower's engine stand-in runs the ServerApp in a non-daemon thread, as Flower does; the
    caller's thread is interrupted (Ctrl-C) after round 0, when the engine stops answering: the
    interrupt is re-raised and the ServerApp's thread has ended, the run's 49 other rounds unrun."""
    import flwr.simulation
    from flwr.app import Context, RecordDict

    from most.flower import run_simulation

    threads, rounds = [], []

    def engine(server_app, client_app, *, num_supernodes, **kwargs):
        grid = PolledGrid(client_app, num_supernodes)
        context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
        errors = []

        def serve():  # as Flower's ServerApp thread: an exception is kept for the caller
            try:
                server_app(grid=grid, context=context)
            except Exception as exc:
                errors.append(exc)

        # Flower's thread is no daemon; this one is, so that a failing test cannot keep pytest from exiting
        thread = threading.Thread(target=serve, daemon=True)
        threads.append(thread)
        thread.start()
        while not rounds:
            time.sleep(0.01)
        grid.down.update(grid.nodes)  # the engine stops with the interrupt: no more replies
        raise KeyboardInterrupt

    monkeypatch.setattr(flwr.simulation, "run_simulation", engine)
    with pytest.raises(KeyboardInterrupt):
        run_simulation(data, model, F.MosT(2, warmup=None), _config(), callback=lambda log, p: rounds.append(log))
    assert not threads[0].is_alive()
    assert len(rounds) <= 2


SCRIPT = textwrap.dedent("""
    import sys
    import most.federated as fl
    from most.flower import run_simulation

    data = fl.fedprox_synthetic(0.0, 0.0, n_clients=3, samples_per_client=40, seed=0)
    config = fl.FederatedConfig(rounds=300, eval_every=1, seed=0, pair_seeds=True)
    try:
        run_simulation(data, fl.logistic_regression(60, 10), fl.methods.MosT(n_models=2, warmup=None), config,
                       num_cpus=1, callback=lambda log, params: print("round", log.round, flush=True))
    except KeyboardInterrupt:
        print("interrupted", flush=True)
""")


@pytest.mark.slow
def test_ctrl_c_ends_a_flower_simulation(tmp_path):
    """A real SIGINT to a process in run_simulation, after its second round: it exits promptly."""
    script = tmp_path / "sim.py"
    script.write_text(SCRIPT)
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths live below it
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "RAY_TMPDIR": temp})
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("round 1"):
                break
        assert lines and lines[-1].startswith("round 1"), "".join(lines)
        proc.send_signal(signal.SIGINT)
        tic = time.monotonic()
        rest, _ = proc.communicate(timeout=60)
        assert time.monotonic() - tic < 30, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)
    assert "interrupted" in rest
    # a round or two may end while the interrupt reaches the thread, not the 298 left
    assert sum(line.startswith("round") for line in rest.splitlines()) <= 3, rest


def test_the_stoppable_grid_asks_the_wrapped_grid_for_its_nodes(data, model):
    """Grid defines get_nodes itself, so the wrapper must pass it on (attribute lookup would not)."""
    grid = PolledGrid(_app(data, model), N)
    grid.get_nodes = lambda: ["the wrapped grid's own"]
    assert list(StoppableGrid(grid, threading.Event()).get_nodes()) == ["the wrapped grid's own"]
