"""most.flower.app's settings: every data set and model of the ready-made Flower app, built as
the server and the clients build them (no Flower process: the app's objects alone)."""

from __future__ import annotations

import math
import os

import pytest

pytest.importorskip("flwr", reason="needs the flower extra: pip install 'most-transport[flower]'")

from most.flower.app import SAMPLES, AppSettings  # noqa: E402
from tests._shared import SHARED_DATA  # noqa: E402

FEMNIST = SHARED_DATA / "femnist_leaf_sf005"
FASHION = os.environ.get("MOST_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def _settings(**values) -> AppSettings:
    return AppSettings.from_run_config({k.replace("_", "-"): v for k, v in values.items()})


def test_the_synthetic_default_matches_the_model_the_server_builds():
    settings = _settings(num_clients=5, samples_per_client=20)
    data = settings.data()
    _, model, _ = settings.build()
    assert (data.input_shape, data.n_classes) == SAMPLES["fedprox_synthetic"]
    assert model.dim == math.prod(data.input_shape) * data.n_classes + data.n_classes
    assert data.n_clients == 5


@pytest.mark.skipif(not (FEMNIST / "train").is_dir(), reason=f"needs the LEAF FEMNIST subset at {FEMNIST}")
def test_femnist_with_the_cnn_and_its_number_of_writers():
    from most.federated import load_femnist

    writers = load_femnist(FEMNIST).n_clients
    with pytest.raises(ValueError, match=rf"The femnist data has {writers} clients, but num-clients is {writers + 1}"):
        _settings(dataset="femnist", data_path=str(FEMNIST), num_clients=writers + 1).data()
    settings = _settings(dataset="femnist", data_path=str(FEMNIST), model="cnn", num_clients=writers)
    data = settings.data()
    _, model, _ = settings.build()
    assert (data.input_shape, data.n_classes) == SAMPLES["femnist"]
    assert model.template_logits(data.clients[0].x_train[:2]).shape == (2, 62)  # the CNN takes its images


@pytest.mark.skipif(not os.path.isdir(FASHION), reason=f"needs Fashion-MNIST at {FASHION} (make data)")
def test_fashion_mnist_matches_its_table_entry():
    data = _settings(dataset="fashion_mnist", data_path=FASHION, num_clients=4, samples_per_client=30).data()
    assert (data.input_shape, data.n_classes) == SAMPLES["fashion_mnist"] and data.n_clients == 4


def test_fashion_mnist_with_logistic_regression_takes_its_images(tmp_path):
    from tests.federated.test_data import _tiny_fashion

    _tiny_fashion(tmp_path, n_train=200, n_test=40)
    settings = _settings(dataset="fashion_mnist", data_path=str(tmp_path), num_clients=4, samples_per_client=30)
    data = settings.data()
    _, model, _ = settings.build()
    assert model.template_logits(data.clients[0].x_train[:3]).shape == (3, 10)  # flattened by the model


def test_unknown_names_and_a_cnn_on_vectors_are_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"Unknown dataset 'femnst' \(did you mean 'femnist'\?\)"):
        _settings(dataset="femnst")
    with pytest.raises(ValueError, match=r"Unknown model 'cnnn'.*choose from logistic_regression, cnn"):
        _settings(model="cnnn")
    with pytest.raises(ValueError, match=r"model = 'cnn' takes images.*use model = 'logistic_regression'"):
        _settings(model="cnn").build()


def test_the_apps_defaults_are_the_librarys_where_the_library_has_one():
    # one default per value: a run config that omits a key gets what the library would use
    import dataclasses

    import most.federated as fl

    settings = AppSettings()
    method, _, config = settings.build()
    library = fl.FederatedConfig()
    for name in ("rounds", "local_epochs", "batch_size", "lr", "eval_every", "seed"):
        assert getattr(config, name) == getattr(library, name), name
    assert method.server_lr == fl.methods.MosT(2).server_lr
    assert method.warmup == fl.methods.MosT(2).warmup
    quiet, _, _ = AppSettings(class_groups=False).build()
    assert quiet.warmup == fl.methods.WarmUp(settings.warmup_rounds, groups=None)
    # the example's config sets every key the app reads
    import tomllib
    from pathlib import Path

    example = tomllib.loads((Path(__file__).parents[2] / "examples/flower/pyproject.toml").read_text())
    keys = {k.replace("-", "_") for k in example["tool"]["flwr"]["app"]["config"]}
    assert keys == {f.name for f in dataclasses.fields(AppSettings)}


@pytest.mark.parametrize("values, message", [
    (dict(warmup_rounds=-1), "`warmup-rounds` must be an int >= 0"),
    (dict(method="FineTuning", fine_tune_epochs=0), "`fine-tune-epochs` must be an int >= 1"),
    (dict(num_clients=0), "`num-clients` must be an int >= 1"),
    (dict(timeout=-5.0), "`timeout` must be a positive number"),
    (dict(wait_for_clients=-1.0), "`wait-for-clients` must be a non-negative number"),
    (dict(n_models=0), "`n-models` must be an int >= 1"),
    (dict(server_lr=0.0), "`server-lr` must be a positive number"),
    (dict(rounds=0), "`rounds` must be an int >= 1"),
    (dict(local_epochs=0), "`local-epochs` must be an int >= 1"),
    (dict(batch_size=0), "`batch-size` must be an int >= 1"),
    (dict(eval_every=-1), "`eval-every` must be an int >= 0"),
    (dict(lr=-0.1), "`lr` must be a positive number"),
    (dict(seed=-1), r"`seed` must be an int in \[0, 2\*\*64\)"),
    # the data's settings, which only the SuperNodes use
    (dict(data_seed=-1), r"`data-seed` must be an int in \[0, 2\*\*64\); got -1"),
    (dict(rho1=-1.0), "`rho1` must be a non-negative number"),
    (dict(rho2=float("nan")), "`rho2` must be a non-negative finite number"),
    (dict(dataset="fashion_mnist", samples_per_client=0), "`samples-per-client` must be an int >= 1"),
    (dict(samples_per_client=3), r"`samples-per-client` = 3 gives each fedprox_synthetic client 2 training, 1 "
                                 r"validation and 0 test samples .* set samples-per-client >= 4"),
])
def test_bad_numbers_are_refused_naming_the_apps_own_setting(values, message):
    with pytest.raises(ValueError, match=message):
        _settings(**values)


def test_the_fewest_synthetic_samples_give_every_split_a_sample():
    data = _settings(num_clients=2, samples_per_client=4).data()
    assert all(min(data.sizes(split)) == 1 for split in ("val", "test"))
