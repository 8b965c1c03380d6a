"""A user's mistake in the federated runtime is a clear error before any work (never a torch
internal error mid-run), and a client with an empty split never turns into a NaN or an
arbitrary number passed off as a result."""

import math
import warnings

import pytest
import torch

import most
import most.federated as fl
from most.federated.methods import FedAvg

CFG = fl.FederatedConfig(rounds=2, eval_every=1)


@pytest.fixture(scope="module")
def data():
    """3 clients, 5 features, 3 classes."""
    return fl.fedprox_synthetic(0, 0, n_clients=3, dim=5, n_classes=3, samples_per_client=20, seed=0)


def _with(data, k, **splits):
    """``data`` with client ``k``'s splits replaced (e.g. ``val=0``: its validation split emptied)."""
    clients = list(data.clients)
    c = clients[k]
    parts = {s: (getattr(c, f"x_{s}"), getattr(c, f"y_{s}")) for s in ("train", "val", "test")}
    for s, n in splits.items():
        parts[s] = (parts[s][0][:n], parts[s][1][:n])
    clients[k] = fl.ClientData(*parts["train"], *parts["val"], *parts["test"])
    return fl.FederatedDataset(data.name, tuple(clients), data.n_classes, data.input_shape, data.client_ids)


# ------------------------------------------------------------------ model vs data (A1, A2, A5)
def test_a_model_for_another_input_size_is_refused_naming_both_sizes(data):
    with pytest.raises(ValueError, match=r"expects inputs of 7 features.*shape \(5,\).*taken from the data"):
        fl.run_federated(data, fl.logistic_regression(7, 3), FedAvg(n_models=1), CFG)
    with pytest.raises(ValueError, match="expects inputs of 7 features"):
        fl.check_inputs(data, fl.logistic_regression(7, 3), FedAvg(n_models=1), CFG)


def test_images_without_a_channel_dimension_are_refused_naming_the_fix(data):
    images = fl.FederatedDataset.from_clients(
        [fl.ClientData(torch.rand(6, 28, 28), torch.arange(6) % 3, torch.rand(2, 28, 28), torch.arange(2),
                       torch.rand(2, 28, 28), torch.arange(2)) for _ in range(3)], name="images", n_classes=3)
    with pytest.raises(ValueError, match=r"takes samples with a channel dimension first \(it runs on samples of "
                                         r"shape \(1, 28, 28\)\).*shape \(28, 28\), without one.*x\[:, None\]"):
        fl.run_federated(images, fl.cnn(3, channels=(2, 2)), FedAvg(n_models=1), CFG)
    # a model that flattens its samples and fails for another reason is not told to flatten them
    double = fl.FlatModel(lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 3)).double())
    with pytest.raises(ValueError, match=r"float64 parameters") as err:
        fl.run_federated(images, double, FedAvg(n_models=1), CFG)
    assert "Flatten each sample" not in str(err.value)


def test_a_cnn_on_flat_features_is_refused_naming_model_and_data_shapes(data):
    with pytest.raises(ValueError, match=r"cnn.*channel.*shape \(5,\).*conv2d"):
        fl.run_federated(data, fl.cnn(3, channels=(2, 2)), FedAvg(n_models=1), CFG)


def test_a_model_with_fewer_outputs_than_classes_is_refused(data):
    with pytest.raises(ValueError, match=r"has 2 outputs, but .* has 3 classes"):
        fl.run_federated(data, fl.logistic_regression(5, 2), FedAvg(n_models=1), CFG)


def test_check_inputs_accepts_valid_inputs_and_leaves_the_model_and_random_state_alone(data):
    model = fl.logistic_regression(5, 3)
    before = [p.clone() for p in model._template.parameters()]
    state = torch.random.get_rng_state()
    assert fl.check_inputs(data, model, fl.methods.MosT(n_models=2), CFG) is None
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(before, model._template.parameters()))


# ------------------------------------------------------------------ argument types (A6)
@pytest.mark.parametrize("bad, match", [
    (dict(model=torch.nn.Linear(5, 3)), r"`model` must be a most.federated.FlatModel.*fl\.FlatModel\(lambda: Linear"),
    (dict(model="logreg"), r"`model` must be a most.federated.FlatModel"),
    (dict(method=FedAvg), r"not the class .*FedAvg: call it, e.g. `FedAvg\(n_models=3\)`"),
    (dict(method=most.MosT(n_models=2)), r"centralised method.*use most\.federated\.methods\.MosT"),
    (dict(method=object()), r"`method` must be a federated method of most.federated.methods"),
    (dict(config={"rounds": 2}), r"not a dict: build it with `FederatedConfig\(\*\*d\)`"),
])
def test_arguments_of_the_wrong_kind_are_refused_saying_what_to_pass(data, bad, match):
    args = dict(dataset=data, model=fl.logistic_regression(5, 3), method=FedAvg(n_models=1), config=CFG) | bad
    with pytest.raises(TypeError, match=match):
        fl.run_federated(**args)
    with pytest.raises(TypeError, match=match):
        fl.check_inputs(**args)


def test_a_dataset_of_the_wrong_kind_is_refused(data):
    with pytest.raises(ValueError, match=r"`dataset` must be a most.federated.FederatedDataset; got builtins.list"):
        fl.check_inputs([1, 2], fl.logistic_regression(5, 3), FedAvg(n_models=1), CFG)


def test_more_models_than_clients_is_refused_by_check_inputs(data):
    with pytest.raises(ValueError, match="3 clients < 4 models"):
        fl.check_inputs(data, fl.logistic_regression(5, 3), fl.methods.MosT(n_models=4), CFG)


# ------------------------------------------------------------------ devices (A3)
@pytest.mark.parametrize("device, match", [
    ("meta", "meta tensors hold no data"),
    ("cuda:99", "CUDA"),
    ("xpu:7", "xpu"),
])
def test_a_device_that_cannot_hold_the_run_is_refused_by_the_config(device, match):
    with pytest.raises(ValueError, match=match):
        fl.FederatedConfig(device=device)
    assert fl.FederatedConfig(device="cpu").device == "cpu"


# ------------------------------------------------------------------ empty splits (B3)
def test_a_client_without_test_samples_is_left_out_of_the_mean(data):
    no_test = _with(data, 1, test=0)
    result = fl.run_federated(no_test, fl.logistic_regression(5, 3), FedAvg(n_models=2), CFG)
    assert result.test_accuracy[1].isnan().all() and result.client_accuracy[1].isnan()
    assert result.n_tested == 2 and result.tested.tolist() == [True, False, True]
    assert math.isfinite(result.mean_accuracy)
    assert result.mean_accuracy == pytest.approx(float(result.client_accuracy[[0, 2]].mean()))


def test_a_client_without_validation_samples_is_chosen_on_its_training_loss_with_a_warning(data):
    no_val = _with(data, 2, val=0)
    with pytest.warns(UserWarning, match=r"1 of 3 clients have no validation samples.*training loss.*f_00002"):
        result = fl.run_federated(no_val, fl.logistic_regression(5, 3), FedAvg(n_models=3), CFG)
    assert result.val_accuracy[2].isnan().all()
    assert int(result.choice[2]) == int(result.loss_choice[2])
    assert math.isfinite(result.mean_accuracy)
    assert all(math.isfinite(log.val_accuracy) for log in result.history)


def test_no_warning_when_every_client_has_validation_samples(data):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fl.run_federated(data, fl.logistic_regression(5, 3), FedAvg(n_models=2), CFG)


@pytest.mark.parametrize("split, match", [("val", "no client has validation samples"),
                                          ("test", "no client has test samples")])
def test_a_data_set_without_any_validation_or_test_sample_is_refused_up_front(data, split, match):
    empty = data
    for k in range(data.n_clients):
        empty = _with(empty, k, **{split: 0})
    for call in (fl.check_inputs, fl.run_federated):
        with pytest.raises(ValueError, match=match + ".*Give the clients a"):
            call(empty, fl.logistic_regression(5, 3), FedAvg(n_models=2), CFG)


# ------------------------------------------------------------------ loaders' splits (A15)
@pytest.mark.parametrize("split, match", [
    ((1.0, 0.0, 0.0), "no client validation or test samples"),
    ((0.8, 0.2, 0.0), "no client test samples"),
    ((0.8, 0.0, 0.2), "no client validation samples"),
])
def test_a_split_without_validation_or_test_is_refused_by_the_loaders(tmp_path, split, match):
    with pytest.raises(ValueError, match=match + r".*split = \(0.6, 0.2, 0.2\)"):
        fl.fedprox_synthetic(0, 0, n_clients=2, samples_per_client=10, split=split)
    with pytest.raises(ValueError, match=match):  # checked before the files are looked for
        fl.load_fashion_mnist(tmp_path / "nowhere", split=split)


def test_fractions_too_small_for_the_clients_are_refused(tmp_path):
    with pytest.raises(ValueError, match="leaves every client without validation samples .*10 to 10 samples"):
        fl.fedprox_synthetic(0, 0, n_clients=2, samples_per_client=10, split=(0.98, 0.01, 0.01))
    with pytest.raises(ValueError, match=r"`val_fraction` must be a number in \(0, 1\)"):
        fl.load_femnist(tmp_path, val_fraction=0)


# ------------------------------------------------------------------ the drivers score clients as the runtime does
def test_most_run_leaves_clients_without_test_samples_out_of_its_metrics(data, tmp_path, monkeypatch):
    from most.experiments import parse_experiment, run_experiment, spec
    from most.experiments.store import RunFolder

    no_test = _with(data, 1, test=0)
    monkeypatch.setattr(spec, "_load_data", lambda run: {"data": no_test, "model": fl.logistic_regression(5, 3)})
    table = {"name": "t", "seeds": [0], "data": {"name": "fedprox_synthetic", "alpha": 0, "beta": 0},
             "model": {"name": "logistic_regression"},
             "federated": {"rounds": 2}, "methods": {"FedAvg": {"n_models": 2}}}
    root = run_experiment(parse_experiment(table), tmp_path, progress=False, echo=lambda s: None)
    result = RunFolder(root / "runs" / "FedAvg" / "seed0").result()
    expected = fl.run_federated(no_test, fl.logistic_regression(5, 3), FedAvg(n_models=2), fl.FederatedConfig(rounds=2))
    assert result["tested_clients"] == 2
    assert result["metrics"]["mean"] == pytest.approx(expected.mean_accuracy)  # not counting client 1 as 0 %


def test_flower_chooses_a_client_without_validation_samples_as_the_runtime_does(data):
    pytest.importorskip("flwr")
    from most.flower.strategy import MostStrategy

    strategy = MostStrategy(FedAvg(n_models=2), fl.logistic_regression(5, 3), CFG, n_clients=3)
    nan = float("nan")
    strategy._final = {"val": torch.tensor([[0.2, 0.8], [nan, nan], [nan, nan]]),
                       "test": torch.tensor([[0.5, 0.5], [0.4, 0.6], [nan, nan]]),
                       "test_loss": torch.zeros(3, 2), "prediction_kl": 0.0, "missing": [2],
                       "selection": torch.tensor([[1.0, 2.0], [3.0, 0.5], [nan, nan]])}
    strategy.params = torch.zeros(2, 18)
    result = strategy.result()
    assert result.choice.tolist() == [1, 1, 0]  # validation; lowest training loss; missing keeps model 0


# ------------------------------------------------------------------ components and flags of the methods
def test_a_component_class_instead_of_an_instance_is_refused():
    import most.methods as mm

    with pytest.raises(TypeError, match=r"`combiner` must be an instance.*pass an instance, e\.g\. STCHSetCombiner\(\)"):
        fl.methods.SetScalarization(n_models=2, combiner=most.baselines.STCHSetCombiner)
    with pytest.raises(TypeError, match=r"`marginals` must be an instance.*e\.g\. Uniform\(\)"):
        fl.methods.MosT(n_models=2, marginals=mm.Uniform)
    with pytest.raises(TypeError, match=r"`weighting` must be an instance.*e\.g\. MajorityShare\(\)"):
        fl.methods.MosT(n_models=2, weighting=mm.MajorityShare)
    fl.methods.SetScalarization(n_models=2, combiner=most.baselines.STCHSetCombiner())  # an instance is fine


def test_components_and_methods_that_do_not_subclass_their_base_are_refused():
    """Capabilities are declared on the base classes, so a look-alike is refused with the base to
    subclass (not accepted and failed in the middle of a run)."""
    with pytest.raises(ValueError, match=r"must be a most\.baselines\.SetCombiner"):
        fl.methods.SetScalarization(n_models=2, combiner=most.WeightedSum())

    class LookAlike:  # every method a federated method has, but not the base
        def __getattr__(self, name):
            return lambda *a, **k: None

    data = fl.fedprox_synthetic(0.0, 0.0, n_clients=4, seed=0)
    model = fl.logistic_regression(data.input_shape[0], data.n_classes)
    with pytest.raises(TypeError, match=r"subclasses most\.federated\.methods\.FederatedMethod"):
        fl.run_federated(data, model, LookAlike(), fl.FederatedConfig(rounds=1))


@pytest.mark.parametrize("make", [
    lambda v: fl.methods.MosT(n_models=2, warm_start=v),
    lambda v: fl.FederatedConfig(pair_seeds=v),
])
def test_bool_settings_must_be_bools(make):
    import numpy as np

    for bad in ("no", "false", 1, None):
        with pytest.raises(TypeError, match=r"must be True or False"):
            make(bad)
    assert make(np.bool_(True)) is not None and make(False) is not None


# ------------------------------------------------------------------ MosT that never leaves its warm-up
def test_most_whose_warmup_takes_every_round_warns_that_the_run_is_fedavg(data):
    model = fl.logistic_regression(5, 3)
    for rounds in (2, 5):
        with pytest.warns(UserWarning, match=rf"warmup=WarmUp\(rounds=5\)\) with rounds={rounds}.*FedAvg with 2 copies"):
            fl.check_inputs(data, model, fl.methods.MosT(n_models=2), fl.FederatedConfig(rounds=rounds))
    with pytest.warns(UserWarning, match=r"warmup=WarmUp\(rounds=5\)\) with rounds=5.*Use a shorter warm-up"):
        result = fl.run_federated(data, model, fl.methods.MosT(n_models=2), fl.FederatedConfig(rounds=5))
    assert torch.equal(result.params[0], result.params[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for method, rounds in ((fl.methods.MosT(n_models=2), 6), (fl.methods.MosT(n_models=2, warmup=None), 1),
                               (fl.methods.MosT(n_models=2, warmup=fl.methods.GroupedWarmUp(5)), 5)):
            fl.check_inputs(data, model, method, fl.FederatedConfig(rounds=rounds))


# ------------------------------------------------------------------ the model's forward pass on the data
def test_a_model_that_fails_on_the_data_for_another_reason_is_not_called_a_size_mismatch(data):
    from torch import nn

    lstm = fl.FlatModel(lambda: nn.Sequential(nn.Unflatten(1, (1, 5)), nn.LSTM(5, 4, batch_first=True),
                                              _LastStep(), nn.Linear(4, 3)))
    with pytest.raises(ValueError, match=r"fails on the data .*Batching rule not implemented.*with torch.func.vmap, "
                                         r"which has no rule") as info:
        fl.check_inputs(data, lstm, FedAvg(n_models=1), CFG)
    assert "expects" not in str(info.value)  # the LSTM's head takes 4 features: not the cause
    double = fl.FlatModel(lambda: nn.Linear(5, 3).double())
    with pytest.raises(ValueError, match=r"has float64 parameters, but .* as float32") as info:
        fl.check_inputs(data, double, FedAvg(n_models=1), CFG)
    assert "expects" not in str(info.value)


class _LastStep(torch.nn.Module):
    def forward(self, out):
        return out[0][:, -1]


@pytest.mark.parametrize("layer, match", [
    (lambda: torch.nn.BatchNorm1d(3, track_running_stats=False), r"layer '1' \(BatchNorm1d\) is batch normalisation "
                                                                r"in training mode"),
    (lambda: torch.nn.BatchNorm1d(3), r"layer '1' \(BatchNorm1d\) is batch normalisation in training mode"),
    (lambda: torch.nn.BatchNorm1d(3, track_running_stats=False).eval(), r"without running statistics"),
    (lambda: torch.nn.InstanceNorm1d(3, track_running_stats=True), r"layer '1' \(InstanceNorm1d\) updates running "
                                                                   r"statistics"),
], ids=["no running stats", "training", "no running stats, eval", "instance norm"])
def test_normalisation_by_the_batch_is_refused_before_any_work(data, layer, match):
    """The runtime evaluates every client's samples in one pass and pads short batches: a layer
    that normalises by its batch would make a client's numbers depend on other clients' data."""
    from torch import nn

    model = fl.FlatModel(lambda: nn.Sequential(nn.Linear(5, 3), layer(), nn.Linear(3, 3)))
    with pytest.raises(ValueError, match=match + r".*(Put|evaluation mode)"):
        fl.run_federated(data, model, FedAvg(n_models=1), CFG)


def test_batch_normalisation_in_evaluation_mode_is_accepted_and_its_statistics_stay(data):
    from torch import nn

    def factory():
        net = nn.Sequential(nn.Linear(5, 3), nn.BatchNorm1d(3), nn.Linear(3, 3))
        net[1].running_mean.fill_(0.5)
        return net.eval()  # stored statistics, fixed

    bn = fl.FlatModel(factory)
    state = torch.random.get_rng_state()
    fl.check_inputs(data, bn, FedAvg(n_models=1), CFG)
    assert torch.equal(torch.random.get_rng_state(), state)
    result = fl.run_federated(data, bn, FedAvg(n_models=1), CFG)
    assert math.isfinite(result.mean_accuracy)
    assert torch.equal(bn.to_module(result.params[0])[1].running_mean, torch.full((3,), 0.5))


def test_a_deployed_module_holds_the_buffers_the_models_were_trained_with(data):
    """A factory that draws a buffer (a fixed random projection) gives each call its own: the
    deployed module takes the template's, as training and evaluation used."""
    from torch import nn

    class Projected(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("projection", torch.randn(5, 5))
            self.head = nn.Linear(5, 3)

        def forward(self, x):
            return self.head(x @ self.projection)

    model = fl.FlatModel(Projected)
    result = fl.run_federated(data, model, FedAvg(n_models=1), CFG)
    module = model.to_module(result.params[0])
    assert torch.equal(module.projection, model._template.projection)
    x = data.clients[0].x_test
    with torch.no_grad():
        torch.testing.assert_close(module(x), model.logits(result.params[0], x))


# ------------------------------------------------------------------ data helpers and client-side steps
@pytest.mark.parametrize("labels, match", [
    ([0.5, 1.5], r"non-integer label 0\.5"),
    (["a", "b"], r"non-numeric values"),
])
def test_dirichlet_label_split_refuses_labels_that_are_not_integers(labels, match):
    import numpy as np

    with pytest.raises(ValueError, match=r"`labels` must hold integer class labels.*" + match + r".*np\.unique"):
        fl.dirichlet_label_split(np.array(labels), 2, 1.0)
    assert [p.tolist() for p in fl.dirichlet_label_split(np.array([0.0, 1.0, 1.0]), 2, 1.0, seed=0)] == \
        [p.tolist() for p in fl.dirichlet_label_split([0, 1, 1], 2, 1.0, seed=0)]  # integer-valued floats are fine


def test_load_femnist_refuses_a_non_bool_ink(tmp_path):
    with pytest.raises(TypeError, match=r"`ink` must be True or False"):
        fl.load_femnist(tmp_path, ink="yes")


def test_evaluate_checks_the_kinds_of_its_arguments(data):
    model = fl.logistic_regression(5, 3)
    params = model.init(2, torch.Generator().manual_seed(0))
    val = fl.pad_split(data, "val")
    with pytest.raises(TypeError, match=r"`model` must be a most.federated.FlatModel.*got NoneType"):
        fl.evaluate(None, None, None)
    with pytest.raises(TypeError, match=r"`params` must be a tensor \[m, d\]"):
        fl.evaluate(model, params.tolist(), val)
    with pytest.raises(ValueError, match=r"`params` must have shape \[m, 18\].*got \(18,\)"):
        fl.evaluate(model, params[0], val)
    with pytest.raises(TypeError, match=r"`data` must be a most.federated.clients.Padded.*pad_split"):
        fl.evaluate(model, params, data)
    with pytest.raises(TypeError, match=r"`clients` must be None .* integer tensor"):
        fl.evaluate(model, params, val, clients=[0, 1])
    with pytest.raises(TypeError, match=r"`return_probs` must be True or False"):
        fl.evaluate(model, params, val, return_probs="yes")
    loss, acc, probs = fl.evaluate(model, params, val, clients=torch.tensor([0, 2]))
    assert loss.shape == (2, 2) and probs is None


def test_numpy_and_tensor_settings_are_stored_as_plain_numbers(data):
    import numpy as np

    config = fl.FederatedConfig(lr=np.array([0.05]), rounds=np.int64(2), seed=torch.tensor(0))
    method = fl.methods.FedAvg(n_models=np.int64(2), server_lr=np.float32(1.0))
    assert (config.lr, config.rounds, config.seed, method.n_models, method.server_lr) == (0.05, 2, 0, 2, 1.0)
    assert config == fl.FederatedConfig(lr=0.05, rounds=2, seed=0)
    result = fl.run_federated(data, fl.logistic_regression(5, 3), method, config)  # failed in training before
    reference = fl.run_federated(data, fl.logistic_regression(5, 3), fl.methods.FedAvg(n_models=2),
                                 fl.FederatedConfig(lr=0.05, rounds=2, seed=0))
    assert torch.equal(result.params, reference.params)


def test_a_parameter_name_the_model_lacks_is_refused_before_any_work(data):
    from most.methods import MinNorm

    model = fl.logistic_regression(5, 3)
    method = fl.methods.MosT(n_models=2, combiner=MinNorm(coordinates="fc.bias"), warmup=None)
    with pytest.raises(ValueError, match=r"no parameter 'fc.bias'; its parameters are 'weight', 'bias'"):
        fl.check_inputs(data, model, method, CFG)
    fl.check_inputs(data, model, fl.methods.MosT(n_models=2, combiner=MinNorm(coordinates="last"), warmup=None), CFG)
    with pytest.raises(ValueError, match=r"\(0, 999\) lie outside the 18 parameters"):
        fl.check_inputs(data, model, fl.methods.MosT(n_models=2, combiner=MinNorm(coordinates=(0, 999))), CFG)


@pytest.mark.parametrize("combiner", [most.SmoothMax(), most.baselines.STCHSetCombiner(), most.baselines.TCHSetCombiner(),
                                      most.baselines.SumOfMinimumCombiner(), most.baselines.EPOCombiner()])
def test_most_refuses_a_combiner_that_needs_losses_at_the_models(combiner):
    # the runtime combines client updates; a combiner reading losses would fail after the warm-up
    with pytest.raises(ValueError, match="reads the losses or parameters at the models"):
        fl.methods.MosT(n_models=2, combiner=combiner)


def test_the_worst_variant_is_centralised_only():
    with pytest.raises(ValueError, match="reads the losses or parameters at the models"):
        most.variants.apply("worst", fl.methods.MosT(n_models=2))
    assert isinstance(most.variants.apply("worst", most.MosT(n_models=2)).combiner, most.SmoothMax)


def test_a_method_of_ones_own_with_a_combiner_the_runtime_cannot_run_is_refused_before_any_work(data):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class SmoothMaxMethod(fl.methods.FederatedMethod):
        def components(self):
            return most.methods.TransportAssignment(), most.methods.GammaWeights(), most.methods.SmoothMax()

    model = fl.logistic_regression(5, 3)
    with pytest.raises(ValueError, match=r"SmoothMaxMethod's combiner SmoothMax\(...\) reads the losses.*WeightedSum"):
        fl.check_inputs(data, model, SmoothMaxMethod(n_models=2), fl.FederatedConfig(rounds=2))


def test_a_fixed_preference_plan_takes_its_rows_under_partial_participation(data):
    from dataclasses import dataclass

    from most.baselines import PreferenceAssignment

    @dataclass(frozen=True)
    class Preferences(fl.methods.FederatedMethod):
        def components(self):
            return PreferenceAssignment(), most.methods.GammaWeights(), most.methods.WeightedSum()

    config = fl.FederatedConfig(rounds=3, seed=0, participation=0.5, eval_every=0)
    result = fl.run_federated(data, fl.logistic_regression(5, 3), Preferences(n_models=2), config)
    assert math.isfinite(result.mean_accuracy)
    plan = PreferenceAssignment()
    plan.reset(6, 2, torch.Generator().manual_seed(0))
    full = plan(torch.zeros(6, 2, dtype=torch.float64), 0, 1)
    assert torch.equal(plan.rows(torch.tensor([4, 1])), full[[4, 1]])
    with pytest.raises(ValueError, match=r"plan is for \(6, 2\).*the losses are \(3, 2\).*rows\(objectives\)"):
        plan(torch.zeros(3, 2), 0, 1)


def test_local_training_checks_its_arguments(data):
    from most.federated.clients import local_train

    model = fl.logistic_regression(60, 10)
    params = model.init(2, torch.Generator().manual_seed(0))
    x, y, w = torch.randn(3, 5, 60), torch.zeros(3, 5, dtype=torch.long), torch.ones(3, 5)
    with pytest.raises(ValueError, match=r"P = 2 pairs' padded samples.*got \(3, 5, 60\)"):
        local_train(model, params, x, y, w, epochs=1, batch_size=2, lr=0.1)
    for kwargs, match in ((dict(batch_size=0), "batch_size"), (dict(epochs=-1), "epochs"),
                          (dict(lr=float("nan")), "lr")):
        settings = dict(epochs=1, batch_size=2, lr=0.1) | kwargs
        with pytest.raises(ValueError, match=match):
            local_train(model, params, x[:2], y[:2], w[:2], **settings)
    with pytest.raises(ValueError, match=r"`params` must have shape \[P, 610\]"):
        local_train(model, params[0], x[:2], y[:2], w[:2], epochs=1, batch_size=2, lr=0.1)
    assert local_train(model, params, x[:2], y[:2], w[:2], epochs=1, batch_size=2, lr=0.1).shape == (2, 610)


def test_models_that_draw_at_random_or_return_a_tuple_are_refused_naming_the_fix(data):
    from torch import nn

    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(5, 3)

        def forward(self, x):
            return self.linear(x), x

    config = fl.FederatedConfig(rounds=1)
    with pytest.raises(ValueError, match=r"forward returned a tuple. Return the logits alone"):
        fl.run_federated(data, fl.FlatModel(Pair), FedAvg(1), config)
    dropout = fl.FlatModel(lambda: nn.Sequential(nn.Linear(5, 3), nn.Dropout(0.2)))
    with pytest.raises(ValueError, match=r"Dropout layer in training mode.*`layer.eval\(\)`"):
        fl.run_federated(data, dropout, FedAvg(1), config)
    evaluated = fl.FlatModel(lambda: nn.Sequential(nn.Linear(5, 3), nn.Dropout(0.2)).eval())
    assert math.isfinite(fl.run_federated(data, evaluated, FedAvg(1), config).mean_accuracy)


def test_client_features_are_data_not_part_of_a_graph():
    x = torch.randn(10, 4, requires_grad=True)
    client = fl.ClientData(x[:6], torch.zeros(6, dtype=torch.long), x[6:8], torch.zeros(2, dtype=torch.long),
                           x[8:], torch.zeros(2, dtype=torch.long))
    assert not any(t.requires_grad for t in (client.x_train, client.x_val, client.x_test))
