"""A benchmark table's methods as data (most.bench.rows): registry names and experiment-file settings."""

from __future__ import annotations

import dataclasses

import pytest

import most
import most.federated as fl
from most.bench import federated as fb
from most.bench.rows import BuiltRow, MethodRow
from most.config import ConfigError


def test_every_row_of_the_federated_table_names_a_registry_method_and_builds():
    federated = most.registry.methods(most.registry.FEDERATED)
    for label, row in fb.METHODS.items():
        assert isinstance(row, MethodRow) and row.method in federated, label
        for extra in row.extras:
            method = row.build(extra, (0, 1, 2, 0) if row.groups else None, n_models=3, server_lr=2.0)
            assert isinstance(method, federated[row.method]), label
            if "server_lr" in {f.name for f in dataclasses.fields(method) if f.init}:
                assert method.server_lr == 2.0, label


def test_a_row_builds_what_the_same_experiment_file_table_builds():
    row = MethodRow("MosT", {"marginals": {"type": "Uniform"}, "resplit": "none",
                             "warmup": {"type": "GroupedWarmUp", "rounds": 5}})
    expected = fl.methods.MosT(4, server_lr=3.0, marginals=most.methods.Uniform(), resplit=None,
                               warmup=fl.methods.GroupedWarmUp(5))
    assert row.build(n_models=4, server_lr=3.0) == expected
    # a searched value sets its fields, scaled; variants apply after the settings
    cfl = MethodRow("CFL", extras=(0.5,), extra={"eps1": 0.4, "eps2": 1.6}).build(0.5, n_models=3, server_lr=1.0)
    assert (cfl.eps1, cfl.eps2) == (0.2, 0.8)
    paper = MethodRow("MosT", {"diversity": 0.1}, variants=("paper", "no-R")).build(n_models=3, server_lr=1.0)
    assert paper == most.variants.apply("no-R", most.variants.apply("paper", fl.methods.MosT(3, diversity=0.1)))
    # a method without a server step or model count (local training) takes neither
    assert MethodRow("LocalOnly").build(n_models=3, server_lr=2.0) == fl.methods.LocalOnly()


def test_a_row_with_a_wrong_setting_says_which_field_as_an_experiment_file_would():
    with pytest.raises(ConfigError, match="MosT.marginals.*Uniform"):
        MethodRow("MosT", {"marginals": {"type": "Unifrom"}}).build(n_models=3, server_lr=1.0)
    with pytest.raises(ConfigError, match="unknown"):
        MethodRow("FedAvg", {"mu": 0.1}).build(n_models=3, server_lr=1.0)


def test_a_built_row_builds_with_its_code():
    row = BuiltRow(lambda n_models, server_lr, extra: fl.methods.FedAvg(n_models, server_lr=server_lr * extra),
                   extras=(2.0,))
    assert row.build(2.0, n_models=2, server_lr=1.5) == fl.methods.FedAvg(2, server_lr=3.0)


def test_the_stored_most_settings_build_the_stored_most_arguments():
    from most.bench import STORED_MOST, STORED_MOST_SETTINGS

    built = most.config.build(most.MosT, {"n_models": 3, **STORED_MOST_SETTINGS})
    assert set(STORED_MOST_SETTINGS) == set(STORED_MOST)
    assert built == most.MosT(n_models=3, **STORED_MOST)


@pytest.mark.parametrize("suite", ["mtl", "prompts", "few_objective", "structure"])
def test_the_centralised_tables_rows_name_registry_methods_or_say_they_are_built_by_code(suite):
    import importlib

    table = importlib.import_module(f"most.bench.{suite}").METHODS
    centralised = most.registry.methods(most.registry.CENTRALISED)
    for label, row in table.items():
        if isinstance(row, MethodRow):
            assert row.kind == most.registry.CENTRALISED and row.method in centralised, label
            method = row.build(n_models=3, rounds=5, lr=0.1, seed=1)
            assert (method.n_models, method.rounds, method.seed) == (3, 5, 1)
            # the stored tables train with Adam, except the structure suite's (SGD, the default)
            assert isinstance(method.optimizer, most.optim.SGD if suite == "structure" else most.optim.Adam), label
        else:
            assert isinstance(row, BuiltRow), label


def test_a_row_naming_no_registry_method_is_refused_when_the_table_is_made():
    with pytest.raises(ValueError, match="Unknown federated method 'FedAvgg'.*did you mean 'FedAvg'"):
        MethodRow("FedAvgg")
    with pytest.raises(ValueError, match="`kind` must be 'federated' or 'centralised'"):
        MethodRow("FedAvg", kind="central")
