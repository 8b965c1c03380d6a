"""Small experiment tables shared by the tests of experiment files, results folders and resume."""

from __future__ import annotations

import json

#: a federated experiment of two methods on 8 synthetic clients, 6 rounds
FED = {
    "name": "fed",
    "seeds": [0],
    "data": {"name": "fedprox_synthetic", "alpha": 0.0, "beta": 0.0, "n_clients": 8, "samples_per_client": 40},
    "model": {"name": "logistic_regression"},
    "federated": {"rounds": 6, "eval_every": 3},
    "methods": {"MosT": {"n_models": 2, "server_lr": 3.0, "warmup": {"type": "WarmUp", "rounds": 1}}, "FedAvg": {"n_models": 2}},
}

#: a centralised experiment of two methods on 12 clustered quadratic objectives
CENTRAL = {
    "name": "central",
    "seeds": [0, 1],
    "problem": {"name": "quadratic_clusters", "n_clusters": 3, "per_cluster": 4},
    "methods": {"MosT": {"n_models": 3, "rounds": 30, "lr": 0.1},
                "Linearization": {"n_models": 3, "rounds": 30, "lr": 0.1}},
}


def with_(base: dict, **changes) -> dict:
    """A deep copy of ``base`` with top-level keys replaced."""
    out = json.loads(json.dumps(base))
    out.update(changes)
    return out
