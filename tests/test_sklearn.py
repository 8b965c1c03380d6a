"""The scikit-learn estimators: the estimator contract, what MosT buys over one model, errors."""

import pickle
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, r2_score
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from most.sklearn import MosTClassifier, MosTRegressor

#: Rounds for the scikit-learn checks: enough for their accuracy thresholds on easy data.
CHECK_ROUNDS = 30




# ---------------------------------------------------------------------- synthetic data
# Three hidden linear rules; rule 1 is rule 0 with the labels flipped, rule 2 is orthogonal.
RULES = np.array([[2.0, 1.0, 0.0, 0.0], [-2.0, -1.0, 0.0, 0.0], [0.0, 0.0, 2.0, -1.0]])
N_GROUPS = 9


def rule_data(seed: int, per_group: int):
    """Group k follows rule k % 3; features unscaled (scale 3, offset 1)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(N_GROUPS), per_group)
    rule = groups % 3
    X = rng.normal(size=(len(groups), 4)) * 3 + 1
    y = ((X - 1) * RULES[rule]).sum(1) + 0.5 * rng.normal(size=len(groups)) > 0
    return X, y, groups


def mean_group_accuracy(pred, y, groups) -> float:
    return float(np.mean([np.mean(pred[groups == k] == y[groups == k]) for k in np.unique(groups)]))


@pytest.fixture(scope="module")
def rules_fit():
    X, y, groups = rule_data(0, per_group=40)
    return MosTClassifier(n_models=3, rounds=120, random_state=0).fit(X, y, groups=groups)


# ---------------------------------------------------------------------- scikit-learn contract
@parametrize_with_checks(
    [
        MosTClassifier(n_models=2, rounds=CHECK_ROUNDS, random_state=0),
        MosTRegressor(n_models=2, rounds=CHECK_ROUNDS, random_state=0),
    ]
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_params_stored_verbatim_and_clone_round_trip():
    hidden = [4]  # a list stays the very object passed (no validation or copy in __init__)
    est = MosTClassifier(n_models=0, hidden_layer_sizes=hidden, optimizer="nope", random_state=3)
    assert est.get_params()["hidden_layer_sizes"] is hidden
    assert est.get_params()["n_models"] == 0 and est.optimizer == "nope"

    est.set_params(n_models=4, optimizer="sgd", routing="dispatcher")
    twin = clone(est)
    assert twin is not est and twin.get_params() == est.get_params()
    assert repr(twin) == repr(est)


def test_clone_of_fitted_estimator_is_unfitted(rules_fit):
    twin = clone(rules_fit)
    assert not hasattr(twin, "models_")
    with pytest.raises(NotFittedError):
        twin.predict(np.zeros((2, 4)))


def test_fitted_attributes(rules_fit):
    clf = rules_fit
    assert clf.models_.shape == (3, 4 * 2 + 2)  # linear: [4 features x 2 classes] + 2 biases
    assert clf.assignment_.shape == (N_GROUPS, 3)
    np.testing.assert_allclose(clf.assignment_.sum(), 1.0, atol=1e-6)
    np.testing.assert_array_equal(clf.groups_, np.arange(N_GROUPS))
    np.testing.assert_array_equal(clf.group_model_, clf.group_losses_.argmin(1))
    np.testing.assert_array_equal(clf.classes_, [False, True])
    assert clf.n_features_in_ == 4 and clf.n_outputs_ == 2
    assert len(clf.loss_curve_) == 120 and clf.loss_curve_[-1] < 0.5 * clf.loss_curve_[0]
    assert clf.mean_.shape == clf.scale_.shape == (4,)


# ---------------------------------------------------------------------- what MosT buys
def test_classifier_serves_three_hidden_rules(rules_fit):
    X, y, groups = rule_data(0, per_group=40)
    Xt, yt, gt = rule_data(1, per_group=100)  # held out, same groups

    most_acc = mean_group_accuracy(rules_fit.predict(Xt, groups=gt), yt, gt)
    single = MosTClassifier(n_models=1, rounds=120, random_state=0).fit(X, y, groups=groups)
    single_acc = mean_group_accuracy(single.predict(Xt, groups=gt), yt, gt)
    pooled_acc = mean_group_accuracy(LogisticRegression().fit(X, y).predict(Xt), yt, gt)

    assert most_acc > 0.9, most_acc
    assert single_acc < 0.7 and pooled_acc < 0.7, (single_acc, pooled_acc)
    # each rule is served by its own model: groups of one rule share a model, rules do not
    served = rules_fit.group_model_.reshape(-1, 3)  # rows: repetitions, columns: rules
    assert (served == served[0]).all() and len(set(served[0])) == 3
    # and the transport plan agrees with the routing
    np.testing.assert_array_equal(rules_fit.assignment_.argmax(1), rules_fit.group_model_)


def test_regressor_recovers_hidden_linear_models():
    rng = np.random.default_rng(0)
    weights = np.array([[1.0, -2.0, 0.5], [-1.0, 0.0, 2.0], [3.0, 1.0, -1.0]])
    biases = np.array([5.0, -5.0, 0.0])
    groups = np.repeat(np.arange(N_GROUPS), 30)
    rule = groups % 3
    # unscaled features: the estimator's standardisation must handle scales 10, 1, 0.1
    X = rng.normal(size=(len(groups), 3)) * [10.0, 1.0, 0.1] + [50.0, 0.0, -3.0]
    y = (X * weights[rule]).sum(1) + biases[rule] + 0.01 * rng.normal(size=len(groups))

    reg = MosTRegressor(n_models=3, rounds=250, alpha=0.0, random_state=0).fit(X, y, groups=groups)

    model_of_rule = reg.group_model_[:3]
    assert len(set(model_of_rule)) == 3
    np.testing.assert_array_equal(reg.group_model_, np.tile(model_of_rule, 3))
    assert np.abs(reg.coef_[model_of_rule, 0] - weights).max() < 0.05
    assert np.abs(reg.intercept_[model_of_rule, 0] - biases).max() < 0.2
    # held-out predictions against the noise-free truth
    Xt = rng.normal(size=(len(groups), 3)) * [10.0, 1.0, 0.1] + [50.0, 0.0, -3.0]
    truth = (Xt * weights[rule]).sum(1) + biases[rule]
    assert np.abs(reg.predict(Xt, groups=groups) - truth).max() < 0.5
    assert reg.score(Xt, truth, groups=groups) > 0.999


def test_regressor_multi_output_shapes():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    groups = np.repeat(np.arange(3), 20)
    Y = np.stack([X[:, 0], -X[:, 1] + groups], axis=1)
    reg = MosTRegressor(n_models=2, rounds=20, random_state=0).fit(X, Y, groups=groups)
    assert reg.predict(X, groups=groups).shape == (60, 2)
    assert reg.coef_.shape == (2, 2, 2) and reg.intercept_.shape == (2, 2)


def test_mlp_fits_what_a_linear_model_cannot():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(200, 2))
    y = (X[:, 0] * X[:, 1]) > 0  # XOR
    groups = np.repeat(np.arange(2), 100)
    kwargs = dict(n_models=1, rounds=200, random_state=0)
    linear = MosTClassifier(**kwargs).fit(X, y, groups=groups)
    mlp = MosTClassifier(hidden_layer_sizes=(16,), **kwargs).fit(X, y, groups=groups)
    assert linear.score(X, y, groups=groups) < 0.75
    assert mlp.score(X, y, groups=groups) > 0.9
    assert mlp.models_.shape == (1, 2 * 16 + 16 + 16 * 2 + 2)


# ---------------------------------------------------------------------- routing
def side_data(seed: int, sides, per_group: int = 40):
    """Groups centred at x1 = 3 * side; the label rule flips with the side."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(len(sides)), per_group)
    side = np.asarray(sides)[groups]
    X = rng.normal(size=(len(groups), 2))
    X[:, 1] += 3 * side
    return X, (X[:, 0] > 0) ^ (side > 0), groups


def test_unseen_groups_use_the_average_model(rules_fit):
    Xt, _, _ = rule_data(2, per_group=10)
    unseen = np.full(len(Xt), 100)
    expected = rules_fit.predict_proba(Xt)  # groups=None
    assert rules_fit.average_model_ == int(rules_fit.group_losses_.mean(0).argmin())
    np.testing.assert_allclose(rules_fit.predict_proba(Xt, groups=unseen), expected)
    # labels of another kind (text read back from a file, or one string among numbers) can never
    # match: refused, not routed to the average model
    for other in (unseen.astype(str), list(range(len(Xt) - 1)) + ["new"]):
        with pytest.raises(ValueError, match="groups in predict are strings but the estimator was fitted with number "
                                             "labels \\(e.g. 0\\)"):
            rules_fit.predict_proba(Xt, groups=other)
    # a seen group in the same call keeps its own model
    mixed = unseen.copy()
    mixed[:5] = 1
    proba = rules_fit.predict_proba(Xt, groups=mixed)
    np.testing.assert_allclose(proba[5:], expected[5:])
    if rules_fit.group_model_[1] != rules_fit.average_model_:
        assert not np.allclose(proba[:5], expected[:5])


def test_dispatcher_routes_unseen_groups_by_their_features():
    X, y, groups = side_data(0, [-1, 1, -1, 1, -1, 1])
    Xn, yn, gn = side_data(1, [-1, 1, -1, 1])
    gn = gn + 100  # groups never seen in fit
    kwargs = dict(n_models=2, rounds=100, random_state=0)
    average = MosTClassifier(**kwargs).fit(X, y, groups=groups)
    dispatcher = MosTClassifier(routing="dispatcher", **kwargs).fit(X, y, groups=groups)

    np.testing.assert_array_equal(dispatcher.models_, average.models_)  # routing does not change training
    assert not hasattr(average, "dispatcher_")
    assert average.score(Xn, yn, groups=gn) < 0.7  # one model for both sides
    assert dispatcher.score(Xn, yn, groups=gn) > 0.9
    np.testing.assert_array_equal(dispatcher.dispatcher_.classes_, [0, 1])


def test_fit_without_groups_trains_restarts_of_one_objective():
    X, y, _ = side_data(0, [-1, -1])
    clf = MosTClassifier(n_models=3, rounds=30, random_state=0).fit(X, y)
    assert clf.models_.shape[0] == 3 and not np.allclose(clf.models_[0], clf.models_[1])
    assert clf.group_losses_.shape == (1, 3) and clf.assignment_.shape == (1, 3)
    np.testing.assert_allclose(clf.assignment_, [[1 / 3, 1 / 3, 1 / 3]], atol=1e-6)
    assert clf.group_model_[0] == clf.average_model_ == int(clf.group_losses_.argmin())
    np.testing.assert_array_equal(clf.predict(X, groups=np.zeros(len(X))), clf.predict(X))


# ---------------------------------------------------------------------- reproducibility
def test_fixed_random_state_is_reproducible_and_pinned():
    X, y, groups = side_data(0, [-1, 1, -1, 1], per_group=20)
    fit = lambda seed: MosTClassifier(n_models=2, rounds=40, random_state=seed).fit(X, y, groups=groups)
    first, second, other = fit(0), fit(0), fit(1)
    np.testing.assert_array_equal(first.models_, second.models_)
    np.testing.assert_array_equal(first.predict(X, groups=groups), second.predict(X, groups=groups))
    assert not np.allclose(first.models_, other.models_)  # the seed is used
    # pinned: the two sides are served by different models, and the training accuracy (40 rounds:
    # the seeding takes 5 steps per candidate, its 40 % budget; 1.0 from 60 rounds on)
    np.testing.assert_array_equal(first.group_model_, [1, 0, 1, 0])
    assert first.score(X, y, groups=groups) == pytest.approx(0.975)


def test_pickle_round_trip(rules_fit):
    Xt, _, gt = rule_data(3, per_group=5)
    restored = pickle.loads(pickle.dumps(rules_fit))
    np.testing.assert_array_equal(restored.predict(Xt, groups=gt), rules_fit.predict(Xt, groups=gt))


def test_metadata_routing_passes_groups_through_cross_validation():
    from sklearn import config_context
    from sklearn.model_selection import KFold, cross_val_score

    X, y, groups = side_data(0, [-1, 1, -1, 1], per_group=30)
    with config_context(enable_metadata_routing=True):
        est = MosTClassifier(n_models=2, rounds=60, random_state=0)
        est = est.set_fit_request(groups=True).set_score_request(groups=True)
        scores = cross_val_score(est, X, y, cv=KFold(2, shuffle=True, random_state=0), params={"groups": groups})
    assert scores.min() > 0.9


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "params, message",
    [
        (dict(n_models=0), "The 'n_models' parameter of MosTClassifier must be an int in the range [1, inf). Got 0"),
        (dict(rounds=2.5), "The 'rounds' parameter of MosTClassifier must be an int"),
        (dict(lr=-1.0), "The 'lr' parameter of MosTClassifier must be a float in the range (0, inf)"),
        (dict(optimizer="rmsprop"), "The 'optimizer' parameter of MosTClassifier must be a str among"),
        (dict(routing="nearest"), "The 'routing' parameter"),
        (dict(transport="emd"), "The 'transport' parameter"),
        (dict(hidden_layer_sizes=(8, 0)), "The 'hidden_layer_sizes' parameter of MosTClassifier must be a tuple"),
        (dict(alpha=float("nan")), "The 'alpha' parameter"),
    ],
)
def test_invalid_parameters_are_reported_at_fit(params, message):
    X, y, groups = side_data(0, [-1, 1, -1], per_group=5)
    est = MosTClassifier(**{"n_models": 2, "rounds": 1, **params})  # __init__ accepts anything
    with pytest.raises(ValueError, match=re.escape(message)):
        est.fit(X, y, groups=groups)


def test_bad_inputs_say_what_to_do():
    X, y, groups = side_data(0, [-1, 1], per_group=10)
    reg = MosTRegressor(n_models=3, rounds=1)
    with pytest.raises(ValueError, match=r"n_models=3 but groups has only 2 distinct labels.*Lower n_models"):
        reg.fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="groups in fit has 19 labels but X has 20 samples"):
        reg.fit(X, y, groups=groups[:-1])
    with pytest.raises(ValueError, match="groups in fit contains NaN"):
        reg.fit(X, y, groups=np.where(groups == 0, np.nan, groups))
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        reg.fit(bad, y, groups=groups)
    with pytest.raises(ValueError, match="at least 2 classes; got 1 class"):
        MosTClassifier(n_models=1, rounds=1).fit(X, np.ones(len(X)), groups=groups)

    clf = MosTClassifier(n_models=2, rounds=5, random_state=0).fit(X, y, groups=groups)
    models = clf.models_
    with pytest.raises(ValueError, match="groups in fit has 19 labels"):
        clf.fit(X, y, groups=groups[:-1])
    assert clf.models_ is models  # a failed fit leaves the fitted state as it was
    with pytest.raises(ValueError, match="X has 3 features, but MosTClassifier is expecting 2 features"):
        clf.predict(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="groups in predict has 3 labels but X has 4 samples"):
        clf.predict(np.zeros((4, 2)), groups=[0, 1, 2])
    clf.set_params(routing="dispatcher")
    with pytest.raises(ValueError, match="routing='dispatcher' was set after fit.*call fit again"):
        clf.predict(np.zeros((4, 2)))


def test_a_failed_fit_leaves_the_estimator_as_it_was():
    X, y, groups = side_data(0, [-1, 1], per_group=10)
    clf = MosTClassifier(n_models=3, rounds=5)  # 3 models, 2 groups: refused
    with pytest.raises(ValueError, match="n_models=3 but groups has only 2 distinct labels"):
        clf.fit(X, y, groups=groups)
    assert not [name for name in vars(clf) if name.endswith("_")]
    with pytest.raises(NotFittedError):
        clf.predict(X)

    clf.set_params(n_models=2, random_state=0).fit(X, y, groups=groups)
    before, pred = dict(vars(clf)), clf.predict(X, groups=groups)
    X3 = np.c_[X, X[:, :1]]  # refits on 3 features, each refused after X itself was accepted
    for fit in (
        lambda: clf.fit(X3, y, groups=groups[:-1]),
        lambda: clf.fit(X3, y, groups=np.zeros(len(X))),
        lambda: clf.fit(X3, np.ones(len(X)), groups=groups),
        lambda: clf.fit(X3 * 1e200, y, groups=groups),
    ):
        with pytest.raises(ValueError):
            fit()
        assert vars(clf).keys() == before.keys()
        assert all(vars(clf)[name] is value for name, value in before.items())
        np.testing.assert_array_equal(clf.predict(X, groups=groups), pred)

    reg = MosTRegressor(n_models=2, rounds=5, random_state=0).fit(X, y * 1.0, groups=groups)
    with pytest.raises(ValueError, match="groups in fit has 19 labels"):
        reg.fit(X3, y * 1.0, groups=groups[:-1])
    assert reg.n_features_in_ == 2 and reg.predict(X).shape == (len(X),)


def test_a_feature_constant_in_training_is_left_unscaled_like_standard_scaler():
    # 0.1 is not exact in float64, so its column's standard deviation is rounding error, not 0
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=60)
    X = np.c_[x0, np.full(60, 0.1), np.zeros(60)]
    groups = np.repeat(np.arange(3), 20)
    reg = MosTRegressor(n_models=1, rounds=100, random_state=0).fit(X, 2 * x0 + 1, groups=groups)
    np.testing.assert_array_equal(reg.scale_[1:], [1.0, 1.0])
    np.testing.assert_allclose(reg.scale_, StandardScaler().fit(X).scale_)
    # changing the constant feature moves the predictions a little, not by 1 / rounding error
    Xt = np.array([[1.0, 0.1, 0.0], [1.0, 0.1 + 1e-9, 0.0], [1.0, 0.2, 0.0], [1.0, 0.1, 0.1]])
    np.testing.assert_allclose(reg.predict(Xt), 3.0, atol=0.05)

    clf = MosTClassifier(n_models=1, rounds=100, random_state=0).fit(X, x0 > 0, groups=groups)
    Xc = np.array([[1.0, 0.1, 0.0], [1.0, 0.0, 0.0], [-1.0, 0.1, 0.0], [-1.0, 0.2, 0.0]])
    np.testing.assert_array_equal(clf.predict(Xc), [True, True, False, False])

    flat = MosTRegressor(n_models=1, rounds=5, random_state=0).fit(X, np.full(60, 0.1), groups=groups)
    assert flat.y_scale_[0] == 1.0


@pytest.mark.parametrize("missing", [np.nan, None])
def test_missing_group_labels_in_object_arrays_are_refused(missing):
    X, y, groups = side_data(0, [-1, 1, -1], per_group=10)
    labels = groups.astype(object)
    labels[10:15] = missing  # e.g. a pandas column with gaps
    with pytest.raises(ValueError, match="groups in fit contains NaN or None; every sample needs a group label"):
        MosTClassifier(n_models=2, rounds=5).fit(X, y, groups=labels)
    clf = MosTClassifier(n_models=2, rounds=5, random_state=0).fit(X, y, groups=groups.astype(object))
    with pytest.raises(ValueError, match="groups in predict contains NaN or None"):
        clf.predict(X, groups=labels)


@pytest.mark.parametrize("Estimator, metric", [(MosTClassifier, accuracy_score), (MosTRegressor, r2_score)])
def test_score_takes_sample_weight_third_and_groups_by_keyword(Estimator, metric):
    X, y, groups = side_data(0, [-1, 1, -1, 1], per_group=20)
    y = y if Estimator is MosTClassifier else y * 1.0
    est = Estimator(n_models=2, rounds=60, random_state=0).fit(X, y, groups=groups)
    weight = np.where(groups == 0, 3.5, 0.5)  # as labels, values no group has
    weighted = metric(y, est.predict(X), sample_weight=weight)
    assert weighted != pytest.approx(metric(y, est.predict(X)))  # the weights matter here
    assert est.score(X, y, weight) == pytest.approx(weighted)
    assert est.score(X, y, weight, groups=groups) == pytest.approx(
        metric(y, est.predict(X, groups=groups), sample_weight=weight)
    )
    with pytest.raises(TypeError):
        est.score(X, y, weight, groups)
    with pytest.raises(TypeError):  # fit has no sample_weight: a third positional argument is refused
        est.fit(X, y, groups)


def test_the_scores_the_docs_example_comments_are_the_scores_it_prints():
    page = (Path(__file__).resolve().parents[1] / "docs" / "sklearn.md").read_text("utf-8")
    example = page.split("```python\n")[1].split("```")[0]  # the page's first example
    printed: list = []
    exec(example, {"print": printed.append})
    prints = [line for line in example.splitlines() if line.startswith("print(")]
    assert len(prints) == len(printed)
    commented = [(re.search(r"# .*about ([0-9.]+)$", line), out) for line, out in zip(prints, printed)]
    assert [m for m, _ in commented if m], "the example comments no score"
    for m, out in commented:
        if m:
            assert float(out) == pytest.approx(float(m.group(1)), abs=0.01), m.string


def test_nat_groups_numeric_text_targets_and_huge_logits():
    X, y, groups = rule_data(0, per_group=10)
    dates = np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[D]")[groups % 2]
    dates[3] = np.datetime64("NaT")
    with pytest.raises(ValueError, match="groups in fit contains NaT"):
        MosTClassifier(n_models=2, rounds=5, random_state=0).fit(X, y, groups=dates)
    target = X[:, 0] * 2.0
    as_text = MosTRegressor(n_models=1, rounds=20, random_state=0).fit(X, target.astype(str))
    as_numbers = MosTRegressor(n_models=1, rounds=20, random_state=0).fit(X, target)
    np.testing.assert_allclose(as_text.predict(X), as_numbers.predict(X))
    with pytest.raises(ValueError, match="y must hold numbers"):
        MosTRegressor(n_models=1, rounds=5).fit(X, np.array(["a"] * len(X)))
    fit = MosTClassifier(n_models=1, rounds=5, random_state=0).fit(X, y)
    fit.coef_ = None  # not read by decision_function
    huge = np.array([[-1.5e308, 1.6e308]])
    fit._outputs = lambda X, groups: huge  # two finite logits whose difference overflows
    assert np.isfinite(fit.decision_function(X[:1])).all()


def test_a_step_too_large_for_the_seeding_names_lr_not_seeding():
    rng = np.random.default_rng(0)
    X, groups = rng.normal(size=(120, 3)), np.repeat(np.arange(4), 30)
    with pytest.raises(ValueError, match=r"non-finite with lr=1e\+300: try a smaller `lr`\.$"):
        MosTRegressor(n_models=2, rounds=20, lr=1e300, random_state=0).fit(X, X[:, 0], groups=groups)

