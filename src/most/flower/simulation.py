"""Run a most method on Flower's simulation engine: one virtual SuperNode per client.

The ServerApp runs :class:`~most.flower.MostStrategy`, the ClientApp
:func:`~most.flower.make_client_app`, and Flower's Ray backend runs the clients'
messages; the result is the same :class:`~most.flower.FlowerResult` as a deployment.

Flower runs the ServerApp in a thread of its own, which an interrupt (Ctrl-C) of the caller's
thread does not reach: :func:`run_simulation` then stops the strategy
(:meth:`~most.flower.MostStrategy.stop`) before it re-raises, so that the thread ends and the
process can exit.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from flwr.serverapp import ServerApp

from .._validation import check_positive_int
from ..federated.data import FederatedDataset
from ..federated.models import FlatModel
from ..federated.checks import check_inputs
from ..federated.config import FederatedConfig
from .client import ClientSpec, make_client_app
from .strategy import FlowerResult, MostStrategy

__all__ = ["run_simulation", "OFFLINE_ENV", "STOP_WAIT"]

#: Seconds an interrupted :func:`run_simulation` waits for the ServerApp's thread to end before it
#: re-raises (the thread checks for the stop at least every pull interval, 0.1 s in simulation).
STOP_WAIT = 30.0

#: Environment for running Flower without a network and without telemetry.
OFFLINE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}


def _client_loader(dataset: FederatedDataset, model: FlatModel):
    def load(context) -> ClientSpec:
        pid = int(context.node_config["partition-id"])
        return ClientSpec(model=model, data=dataset.clients[pid], client=pid)

    return load


def run_simulation(dataset: FederatedDataset, model: FlatModel, method, config: FederatedConfig, *,
                   num_cpus: int | None = None, timeout: float | None = 600.0, progress: bool = False,
                   callback=None, description: str | None = None, verbose: bool = False) -> FlowerResult:
    """Trains ``method.n_models`` models on ``dataset`` through Flower's simulation engine.

    Args:
        dataset, model, method, config: as for :func:`most.federated.run_federated`.
        num_cpus: CPUs given to Ray, a positive int (``None``, the default: all); each virtual
            client uses one.
        timeout: seconds to wait for one step's replies, a positive number or ``None`` (see
            :class:`MostStrategy`).
        progress, callback, description: as for ``run_federated`` (``callback(log, params)``
            after every round).
        verbose: keep Flower's and Ray's INFO logs (default: warnings only).

    Returns:
        the :class:`FlowerResult`; with the same data, seed and settings its Gamma and
        accuracies match ``run_federated(..., FederatedConfig(pair_seeds=True, ...))``
        (``tests/flower/test_strategy.py`` checks this).

    An interrupt (``KeyboardInterrupt``) while it runs stops the rounds in Flower's ServerApp
    thread and is re-raised once that thread has ended (or after :data:`STOP_WAIT` seconds).
    """
    # imported here: flwr.simulation costs about a second, which every ClientApp process of a
    # deployment would otherwise pay through `import most.flower`
    from flwr.simulation import run_simulation as flwr_run_simulation

    check_inputs(dataset, model, method, config)  # the in-process runtime's checks, before Flower starts
    if num_cpus is not None:  # Ray would fail to start with a message naming neither the argument nor its value
        try:
            num_cpus = check_positive_int(num_cpus, name="num_cpus")
        except ValueError as exc:
            raise ValueError(f"{exc} Pass None to give Ray all of this machine's CPUs.") from None
    strategy = MostStrategy(method, model, config, n_clients=dataset.n_clients, client_ids=dataset.client_ids,
                            timeout=timeout, progress=progress)
    outcome: dict = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid, context) -> None:
        try:
            outcome["result"] = strategy.run(grid, callback=callback, description=description)
        except BaseException as exc:  # re-raised in the caller's thread below
            outcome["error"] = exc
            raise

    client_app = make_client_app(_client_loader(dataset, model))
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    cpus = num_cpus if num_cpus is not None else os.cpu_count() or 1
    # Ray's session files go to a folder of this run, removed after it (RAY_TMPDIR: the user's
    # own, kept); a short path in the system's temporary folder, since Ray's sockets live there
    # and a socket's path is limited to about 100 characters
    own_temp = None if os.environ.get("RAY_TMPDIR") else tempfile.mkdtemp(prefix="most-ray-")
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               "init_args": {"num_cpus": cpus, "num_gpus": 0, "include_dashboard": False,
                             "_temp_dir": own_temp or os.environ["RAY_TMPDIR"]}}
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    if not verbose:
        flwr_logger.setLevel(logging.WARNING)
    try:
        flwr_run_simulation(server_app, client_app, num_supernodes=dataset.n_clients, backend_config=backend,
                            verbose_logging=verbose)
    except BaseException:
        # an interrupt (or a failure of the engine) reaches this thread alone: Flower's ServerApp
        # thread, which is not a daemon, would go on with the rounds and keep the process alive
        strategy.stop(wait=STOP_WAIT)
        raise
    finally:
        flwr_logger.setLevel(level)
        if own_temp is not None:
            shutil.rmtree(own_temp, ignore_errors=True)
    if "error" in outcome:
        raise outcome["error"]
    if "result" not in outcome:
        raise RuntimeError("The Flower simulation ended without a result; run with verbose=True to see its logs.")
    return outcome["result"]
