"""MosT on Flower: a multi-model strategy and client app for a real federated engine.

Needs the optional extra: ``pip install 'most-transport[flower]'`` (``flwr[simulation]``). The rest of
the library never imports Flower.

* :class:`MostStrategy` -- a Flower ``Strategy`` running any :mod:`most.federated.methods`
  object (MosT, FedAvg, FedProx, MGDA, ...) with the in-process runtime's pure functions;
  clients that fail or time out are left out of the round and reported.
* :func:`make_client_app` -- the ClientApp: losses, local training of the assigned models
  only, evaluation.
* :func:`run_simulation` -- the same on Flower's simulation engine (one virtual SuperNode per
  client).
* :mod:`most.flower.app` -- a ready-made ServerApp/ClientApp pair on FedProx's synthetic data
  for ``flwr run`` (simulation or deployment; see the docs' Flower page, Deployment).

Example (Flower's simulation engine, a few seconds to start Ray):

    >>> import most.federated as fl                                      # doctest: +SKIP
    >>> from most.flower import run_simulation                           # doctest: +SKIP
    >>> data = fl.fedprox_synthetic(0.0, 0.0, n_clients=10, seed=0)      # doctest: +SKIP
    >>> result = run_simulation(data, fl.logistic_regression(60, 10),    # doctest: +SKIP
    ...                         fl.methods.MosT(n_models=3), fl.FederatedConfig(rounds=5))
"""

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "most.flower needs Flower, an optional extra: pip install 'most-transport[flower]' "
        "(or pip install 'flwr[simulation]>=1.20')."
    ) from exc

from .client import ClientSpec, client_evaluate, client_losses, client_train, client_weigh, make_client_app
from .simulation import OFFLINE_ENV, run_simulation
from .strategy import FlowerResult, MostStrategy, RunStopped

__all__ = ["ClientSpec", "client_losses", "client_train", "client_weigh", "client_evaluate", "make_client_app",
           "MostStrategy", "FlowerResult", "RunStopped", "run_simulation", "OFFLINE_ENV"]
