"""Property-based: whatever an experiment file or a ``--set`` holds, ``most run --dry-run`` ends in
one of two ways: success, or one line that names what is wrong. Never a traceback, never
Python's own text about its internals."""

from __future__ import annotations

import math
import re
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from most.config import ConfigError
from most.experiments import parse_experiment
from most.experiments.spec import check_runs
from tests.test_cli import CENTRAL, FED

#: Python's wording for a type error inside the library: a message a user should never see
INTERNAL = re.compile(r"unhashable type|argument of type|not subscriptable|has no attribute|is not iterable|"
                      r"not supported between instances|required positional argument|unexpected keyword argument|"
                      r"NoneType|Overflow|object cannot be interpreted|can't multiply|unsupported operand")

_scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.text(max_size=12), st.sampled_from(["MosT", "cuda", "zdt1", "femnist", "Adam", "", "nan"]),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                       max_leaves=6)


def _paths(table: dict, prefix=()) -> list[tuple]:
    out = []
    for key, value in table.items():
        out.append(prefix + (key,))
        if isinstance(value, dict):
            out += _paths(value, prefix + (key,))
    return out


def _mutate(table: dict, path: tuple, value) -> dict:
    import copy

    table = copy.deepcopy(table)
    node = table
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return table


def _check_outcome(table: dict) -> None:
    try:
        experiment = parse_experiment(table)
        check_runs(experiment)
    # MemoryError: sizes too large for the machine, one line at the command line
    except (ConfigError, ValueError, TypeError, FileNotFoundError, ImportError, MemoryError) as exc:
        message = str(exc)
        assert message.strip(), repr(exc)  # the command line shows it as one line (whitespace joined)
        assert not INTERNAL.search(message), message


@pytest.mark.parametrize("base", [CENTRAL, FED], ids=["centralised", "federated"])
@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_value_at_any_key_is_taken_or_named(base, data):
    table = tomllib.loads(base)
    path = data.draw(st.sampled_from(_paths(table)), label="key")
    value = data.draw(_values, label="value")
    _check_outcome(_mutate(table, path, value))


@pytest.mark.parametrize("base", [CENTRAL, FED], ids=["centralised", "federated"])
@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_new_key_anywhere_is_taken_or_named(base, data):
    table = tomllib.loads(base)
    parent = data.draw(st.sampled_from([()] + [p for p in _paths(table) if isinstance(_get(table, p), dict)]))
    key = data.draw(st.one_of(st.text(min_size=1, max_size=10),
                              st.sampled_from(["seed", "type", "name", "n_models", "rounds", "marginals", "engine"])))
    _check_outcome(_mutate(table, parent + (key,), data.draw(_values)))


def _get(table, path):
    for part in path:
        table = table[part]
    return table


def _toml(value) -> str:
    """``value`` as a TOML value for ``--set`` (numbers, strings, booleans, lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["seeds", "name", "checkpoint_every", "problem.name", "problem.n_clusters",
                            "problem.per_cluster", "methods.MosT.n_models", "methods.MosT.lr", "methods.MosT.rounds",
                            "methods.MosT.marginals", "methods.MosT.optimizer", "methods.MosT.type",
                            "methods.MosT.seed", "problem", "methods", "sweep", "problem.name.x"]),
       value=st.one_of(_scalars, st.lists(_scalars, max_size=3)), raw=st.booleans())
def test_any_set_on_the_command_line_is_taken_or_one_line(tmp_path, key, value, raw):
    path = tmp_path / "e.toml"
    path.write_text(CENTRAL)
    text = str(value) if raw else _toml(value)
    res = CliRunner().invoke(__import__("most.cli", fromlist=["app"]).app,
                             ["run", str(path), "--dry-run", "--set", f"{key}={text}"])
    assert res.exit_code in (0, 2), (res.exit_code, res.output)
    assert "Traceback" not in res.output
    if res.exit_code:
        err = res.stderr.strip()
        assert err.startswith("Error: ") and len(err.splitlines()) == 1, err
        assert not INTERNAL.search(err), err
