"""Choosing the number of models m (most.choose_n_models and `most choose-m`)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import most
from most.cli import app

from .test_cli import FED, _one_line_error

MEANS = torch.tensor([[-6.0, 0.0], [6.0, 0.0], [0.0, 9.0]])


def _clusters(per_cluster: int = 4, spread: float = 0.05, held_out: float = 0.5, seed: int = 0):
    """3 well-separated clusters of quadratics: the train centres tight around the cluster means,
    the validation centres the same ones perturbed (held-out data)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(3).repeat_interleave(per_cluster)
    centres = MEANS[labels] + spread * torch.randn(len(labels), 2, generator=g)
    val_centres = centres + held_out * torch.randn(len(labels), 2, generator=g)
    n = len(labels)
    train = most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=n)
    val = most.Problem.from_function(lambda t: ((t - val_centres) ** 2).sum(-1), dim=2, n_objectives=n)
    return train, val


METHOD = most.MosT(n_models=1, rounds=30, lr=0.1)


@pytest.fixture(scope="module")
def clusters():
    return _clusters()


@pytest.fixture(scope="module")
def selection(clusters):
    train, val = clusters
    return most.choose_n_models(METHOD, train, val, n_models=range(1, 6))


def test_the_curve_drops_to_the_number_of_clusters_and_flattens(selection):
    s = selection.scores
    assert list(s) == [1, 2, 3, 4, 5]
    assert s[1] > s[2] > 10 * s[3]  # a model per cluster is what the objectives need
    assert all(s[m] < 1.5 * s[3] for m in (4, 5))  # more models hardly help on held-out data
    assert selection.n_models == 3 and selection.rule == "elbow"
    assert selection.best >= 3
    assert all(selection.worst[m] >= s[m] for m in s)
    assert set(selection.results) == set(s) and selection.results[3].params.shape == (3, 2)
    assert selection.on_validation


def test_the_score_is_the_validation_loss_of_each_objectives_best_model_on_train(clusters, selection):
    train, val = clusters
    result = selection.results[3]
    pick = result.best_model()
    expected = val.loss_matrix(result.params).gather(1, pick[:, None]).squeeze(1)
    assert selection.scores[3] == pytest.approx(float(expected.mean()))
    assert selection.worst[3] == pytest.approx(float(expected.max()))
    assert selection.train_scores[3] == pytest.approx(float(result.best_losses().mean()))


def test_best_picks_the_lowest_score(clusters):
    train, val = clusters
    chosen = most.choose_n_models(METHOD, train, val, n_models=[4, 3, 2, 3], rule="best")
    assert list(chosen.scores) == [2, 3, 4]  # sorted, each count once
    assert chosen.n_models >= 3 and chosen.n_models == min(chosen.scores, key=chosen.scores.get)
    assert chosen.rule == "best"


def test_a_choice_at_the_largest_count_tried_is_flagged(clusters, selection):
    train, val = clusters
    cut = most.choose_n_models(METHOD, train, val, n_models=[1, 2])  # the planted 3 clusters lie beyond the range
    assert cut.n_models == 2 and cut.at_edge and cut.to_dict()["at_edge"]
    assert "m = 2 is the largest count tried" in cut.table()
    assert selection.n_models == 3 and not selection.at_edge  # chosen inside 1..5
    assert "largest count tried" not in selection.table()
    one = most.choose_n_models(METHOD, train, val, n_models=[2])
    assert not one.at_edge  # a single count is no range
    few = most.Problem.from_function(lambda x: torch.stack([(x ** 2).sum(), ((x - 4) ** 2).sum()]), dim=1,
                                     n_objectives=2)
    every = most.choose_n_models(METHOD, few, n_models=[1, 2])
    assert every.n_models == 2 and not every.at_edge  # one model per objective: no more models are possible


def test_a_large_tolerance_picks_fewer_models(clusters):
    train, val = clusters
    assert most.choose_n_models(METHOD, train, val, n_models=[1, 2, 3], tolerance=1e6).n_models == 1


def test_without_validation_the_training_losses_score_and_the_result_says_so(clusters):
    train, _ = clusters
    chosen = most.choose_n_models(METHOD, train, n_models=[2, 3])
    assert not chosen.on_validation
    assert chosen.scores == chosen.train_scores
    assert chosen.n_models == 3
    assert "training objectives" in chosen.table() and "mean validation loss" not in chosen.table()


def test_without_validation_the_elbow_is_a_share_of_the_curves_drop():
    """Training losses fall to zero with one model per objective: relative to the lowest score
    the elbow would ask for an exact fit and pick the largest count."""
    centres = torch.tensor([[0.0, 0.0], [0.1, 0.0], [6.0, 6.0], [6.0, 6.1]])  # two pairs
    train = most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=4)
    chosen = most.choose_n_models(most.MosT(n_models=1, rounds=50, lr=0.2), train, n_models=range(1, 5))
    assert chosen.scores[4] < 1e-6 and chosen.n_models == 2
    assert chosen.threshold == pytest.approx(min(chosen.scores.values()) + 0.05 * (max(chosen.scores.values())
                                                                                 - min(chosen.scores.values())))
    assert "(of the curve's drop)" in chosen.table()
    with pytest.raises(ValueError, match="holds no finite score"):
        most.selection.elbow_threshold({1: float("inf")}, 0.05)


def test_an_extension_allows_more_models_than_objectives():
    train = most.Problem.from_function(lambda t: torch.stack([(t ** 2).sum(), ((t - 1) ** 2).sum()]), dim=2,
                                       n_objectives=2)
    method = most.MosT(n_models=1, rounds=5, lr=0.1, extension=most.DirichletExtension(n_extra=6))
    chosen = most.choose_n_models(method, train, n_models=[2, 3])
    assert list(chosen.scores) == [2, 3]
    assert chosen.results[3].losses.shape[0] == 8  # trained on the extended problem, scored on the two originals
    own = train.loss_matrix(chosen.results[3].params)
    assert chosen.train_scores[3] == pytest.approx(float(own.min(1).values.mean()))


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(n_models=[]), ValueError, "empty"),
    (dict(n_models=range(1, 14)), ValueError, "13 > n = 12 objectives"),
    (dict(n_models=[0, 1]), ValueError, "n_models"),
    (dict(n_models=5), TypeError, "range(1, k + 1)"),
    (dict(rule="median"), ValueError, "'elbow', 'best'"),
    (dict(tolerance=-0.1), ValueError, "tolerance"),
])
def test_bad_settings_are_refused_before_any_fit(clusters, kwargs, error, needle):
    train, val = clusters
    with pytest.raises(error) as info:
        most.choose_n_models(METHOD, train, val, **kwargs)
    assert needle in str(info.value)


def test_a_validation_problem_must_hold_the_same_objectives_and_dim(clusters):
    train, _ = clusters
    fewer = most.Problem.from_function(lambda t: (t ** 2).sum(-1, keepdim=True).expand(5), dim=2, n_objectives=5)
    with pytest.raises(ValueError, match="5 objectives but `train` has 12"):
        most.choose_n_models(METHOD, train, fewer, n_models=[1])
    wider = most.Problem.from_function(lambda t: (t ** 2).sum().expand(12), dim=3, n_objectives=12)
    with pytest.raises(ValueError, match="size 3 but `train` of size 2"):
        most.choose_n_models(METHOD, train, wider, n_models=[1])
    with pytest.raises(TypeError, match="most.Problem"):
        most.choose_n_models(METHOD, train, "val", n_models=[1])
    with pytest.raises(TypeError, match="configured method"):
        most.choose_n_models(most.MosT, train, n_models=[1])


def test_table_and_plot(selection, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    table = selection.table()
    assert table.splitlines()[0].startswith("| m | mean validation loss | worst objective | mean train loss |")
    assert "| 3 |" in table and "**chosen** (elbow)" in table.splitlines()[4]
    assert "Chosen: m = 3" in table
    fig = selection.plot(tmp_path / "m.png")
    assert (tmp_path / "m.png").stat().st_size > 0
    assert fig.axes[0].get_yscale() == "log"  # the scores span more than a decade
    data = selection.to_dict()
    assert json.loads(json.dumps(data))["n_models"] == 3 and set(data["scores"]) == {"1", "2", "3", "4", "5"}


# ----------------------------------------------------------------------------- most choose-m
runner = CliRunner()

CLUSTERS = """
name = "clusters"
seeds = [0, 1]

[problem]
name = "quadratic_clusters"
n_clusters = 3
per_cluster = 3

[methods.MosT]
n_models = 2
rounds = 20
lr = 0.1
"""

REGRESSION = """
name = "regression"

[problem]
name = "mixed_regression"
n_objectives = 12
n_groups = 2
dim = 3

[methods.MosT]
n_models = 2
rounds = 30
lr = 0.05

[methods.MGDA]
n_models = 2
rounds = 5
"""


def test_cli_choose_m_on_validation(tmp_path):
    path = tmp_path / "regression.toml"
    path.write_text(REGRESSION)
    out = tmp_path / "out"
    res = runner.invoke(app, ["choose-m", str(path), "--method", "MosT", "--n-models", "1:3", "--out", str(out),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    assert "mean validation loss" in res.output and "Note" not in res.output
    stored = json.loads((out / "choose_m.json").read_text())
    assert stored["on_validation"] and stored["method"] == "MosT" and set(stored["scores"]) == {"1", "2", "3"}
    assert stored["n_models"] >= 2  # two hidden models: one model is far worse on validation
    assert "**chosen**" in (out / "choose_m.md").read_text()
    assert (out / "choose_m.png").stat().st_size > 0


def test_cli_choose_m_without_a_validation_split_says_so(tmp_path):
    path = tmp_path / "clusters.toml"
    path.write_text(CLUSTERS)
    res = runner.invoke(app, ["choose-m", str(path), "--n-models", "2,3", "--rule", "best", "--out",
                              str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "no validation split" in res.output and "uses the first, 0" in res.output
    assert not json.loads((tmp_path / "o" / "choose_m.json").read_text())["on_validation"]


def test_cli_choose_m_errors_are_one_line(tmp_path):
    clusters, regression, fed = tmp_path / "c.toml", tmp_path / "r.toml", tmp_path / "f.toml"
    clusters.write_text(CLUSTERS)
    regression.write_text(REGRESSION)
    fed.write_text(FED)
    out = ["--out", str(tmp_path / "o"), "--quiet"]
    _one_line_error(runner.invoke(app, ["choose-m", str(clusters), "--n-models", "1:12", *out]),
                    "> n = 9 objectives", code=2)
    _one_line_error(runner.invoke(app, ["choose-m", str(clusters), "--n-models", "a:b", *out]), "--n-models", code=2)
    _one_line_error(runner.invoke(app, ["choose-m", str(clusters), "--n-models", "3:1", *out]), "at least one",
                    code=2)
    _one_line_error(runner.invoke(app, ["choose-m", str(clusters), "--rule", "worst", *out]), "--rule", code=2)
    _one_line_error(runner.invoke(app, ["choose-m", str(regression), *out]), "--method", "MosT, MGDA", code=2)
    _one_line_error(runner.invoke(app, ["choose-m", str(regression), "--method", "EPO", *out]), "no such method",
                    code=2)
    _one_line_error(runner.invoke(app, ["choose-m", str(fed), *out]), "federated", code=2)
    _one_line_error(runner.invoke(app, ["choose-m", str(tmp_path / "missing.toml"), *out]), "No experiment file",
                    code=2)


def test_the_elbow_threshold_is_relative_with_a_floor_for_a_zero_best():
    from most.selection import elbow_threshold

    assert elbow_threshold({1: 10.0, 2: 2.0, 3: 1.9}, 0.1) == pytest.approx(1.9 * 1.1)
    assert elbow_threshold({1: 10.0, 2: -2.0}, 0.5) == pytest.approx(-1.0)  # negative losses: |best|
    # an exact fit: 1e-13 is zero up to rounding, not 10x worse than 1e-14
    assert elbow_threshold({1: 40.0, 2: 1e-13, 3: 1e-14}, 0.05) > 1e-13


def test_a_count_no_plan_can_serve_is_refused_before_any_fit(monkeypatch):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    method = most.MosT(n_models=1, rounds=5, lr=0.1, marginals=most.LoadBounds(min_objectives=2))
    fits = []
    monkeypatch.setattr(most.MosT, "fit", lambda self, *a, **k: fits.append(self.n_models))
    with pytest.raises(ValueError, match=r"Each of the 4 models must serve at least min_objectives=2"):
        most.choose_n_models(method, problem, n_models=[1, 2, 3, 4])
    assert fits == []  # refused before the fits of m = 1, 2, 3 were made (and lost)


@pytest.mark.parametrize("tolerance, error", [(-0.5, ValueError), (float("nan"), ValueError), ("0.1", ValueError)])
def test_elbow_threshold_checks_its_tolerance(tolerance, error):
    from most.selection import elbow_threshold

    assert elbow_threshold({1: 2.0, 2: 1.0}, 0.1) == pytest.approx(1.1)
    with pytest.raises(error, match="`tolerance` must be a non-negative"):
        elbow_threshold({1: 2.0, 2: 1.0}, tolerance)
