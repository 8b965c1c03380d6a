"""Property-based checks of experiment files (most.experiments.spec): any table, however
wrong, gives a ConfigError (or ValueError/TypeError) with a message, or an experiment whose
runs stay inside the results folder and whose numeric settings are finite."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from most.experiments import parse_experiment  # noqa: E402

BASES = {
    "centralised": {
        "name": "central",
        "seeds": [0],
        "problem": {"name": "quadratic_clusters", "n_clusters": 2, "per_cluster": 3},
        "methods": {"MosT": {"n_models": 2, "rounds": 5, "lr": 0.1}},
    },
    "federated": {
        "name": "fed",
        "seeds": [0],
        "data": {"name": "fedprox_synthetic", "alpha": 0.0, "beta": 0.0, "n_clients": 4, "samples_per_client": 20},
        "model": {"name": "logistic_regression"},
        "federated": {"rounds": 3},
        "methods": {"MosT": {"n_models": 2, "server_lr": 1.0}},
    },
}

# where a mutation lands: top-level keys, and keys inside the tables a user edits most
PATHS = {
    "centralised": [("name",), ("seeds",), ("checkpoint_every",), ("problem", "n_clusters"), ("problem", "name"),
                    ("methods", "MosT", "lr"), ("methods", "MosT", "rounds"), ("methods", "MosT", "n_models"),
                    ("methods", "MosT", "diversity"), ("methods", "MosT", "combiner"), ("methods", "MosT", "marginals"),
                    ("methods", "MosT", "optimizer"), ("methods", "MosT", "inner_steps"), ("methods", "MosT"),
                    ("sweep",), ("methods", "../x"), ("problem",)],
    "federated": [("name",), ("seeds",), ("federated", "lr"), ("federated", "rounds"), ("federated", "participation"),
                  ("federated", "batch_size"), ("federated", "eval_every"), ("data", "n_clients"), ("data", "alpha"),
                  ("data", "name"), ("model", "name"), ("methods", "MosT", "server_lr"),
                  ("methods", "MosT", "n_models"), ("methods", "MosT", "diversity"), ("methods", "MosT", "transport"),
                  ("methods", "MosT", "warmup_rounds"), ("engine",), ("sweep",), ("methods", "/abs")],
}

scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 0.0, 1e-300, 1e300, float("inf"), float("-inf"), float("nan"), True, False]),
    st.text(max_size=12),
    st.sampled_from(["../../x", "/tmp/x", "a/b", "..", ".", "", "MinNorm", "WeightedSum", "Adam", "exact",
                     "sinkhorn", "Curriculum", "x\x00y", "é"]),
)
plausible = st.one_of(
    st.integers(min_value=1, max_value=6),
    st.floats(min_value=1e-4, max_value=10.0),
    st.sampled_from([0, 0.0, 0.5, 1, [0, 1], "MinNorm", "WeightedSum", "Adam", "exact", "Curriculum", "GammaWeights",
                     {"type": "Adam"}, {"type": "Curriculum", "warmup": 0.3}, "central", "my-run_2", "zdt1"]),
)
wild = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["type", "name", "lr", "x", "warmup"]), inner,
                                                 max_size=3)), max_leaves=6)
values = st.one_of(plausible, plausible, wild)  # about two draws in three are plausible, to reach valid files


def _set(table: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(table)
    node = out
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            return out
    node[path[-1]] = value
    return out


def _finite_fields(obj, where: str) -> None:
    """Every float field of a built dataclass (and nested components) is finite."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, float):
            assert math.isfinite(value), f"{where}.{f.name} = {value} was accepted"
        _finite_fields(value, f"{where}.{f.name}")


def _check(table: dict, tmp: Path) -> None:
    try:
        exp = parse_experiment(table)
    except (ValueError, TypeError) as exc:  # ConfigError is a ValueError
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        event("refused")
        return
    event("accepted")
    root = (tmp / "out").resolve()
    home = (root / exp.name).resolve()
    assert home.parent == root, f"experiment name {exp.name!r} leaves the results folder"
    for run in exp.runs:
        folder = (home / "runs" / run.folder).resolve()
        assert folder.is_relative_to(home / "runs") and folder != home / "runs", run.folder
        for name, obj in run.build_without_data().items():
            _finite_fields(obj, name)


@pytest.mark.parametrize("kind", sorted(BASES))
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_edit_of_an_experiment_file_is_refused_clearly_or_valid(kind, data, tmp_path):
    table = BASES[kind]
    for _ in range(data.draw(st.integers(1, 2))):
        path = data.draw(st.sampled_from(PATHS[kind]))
        table = _set(table, path, data.draw(values))
    _check(table, tmp_path)


@pytest.mark.parametrize("name", ["../../x", "/tmp/abs", "a/b", "..", ".", "a\\b", "x\x00", "con\ntrol"])
def test_experiment_names_that_would_leave_the_results_folder_are_refused(name, tmp_path):
    table = dict(BASES["centralised"], name=name)
    with pytest.raises(ValueError, match="name"):
        parse_experiment(table)
