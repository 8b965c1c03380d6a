"""Federated evaluation (most.federated.evaluation) and figures (most.federated.figures)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from scipy import stats

from most.federated import figures
from most.federated.evaluation import (
    client_accuracy,
    gamma_drift,
    gamma_sparsity,
    oracle_accuracy,
    paired_difference,
    pairwise_symmetric_kl,
    prediction_diversity,
    pooled_loss,
    select_by_loss,
    select_models,
    summarise,
    worst_k_percent,
)

# --------------------------------------------------------------------------- selection / accuracy


def test_select_models_picks_best_and_breaks_ties_to_lowest_index():
    val = np.array([[0.1, 0.5, 0.5], [0.9, 0.2, 0.9], [0.3, 0.3, 0.3], [0.0, 0.1, 0.8]])
    assert select_models(val).tolist() == [1, 0, 0, 2]


def test_select_models_breaks_ties_by_the_lowest_loss_among_the_tied_models_alone():
    val = np.array([[0.1, 0.5, 0.5], [0.9, 0.2, 0.9], [0.3, 0.3, 0.3], [0.0, 0.1, 0.8]])
    loss = np.array([[0.0, 0.9, 0.4],    # model 0 has the lowest loss, but is not among the tied
                     [2.0, 0.1, 1.0],    # model 1 likewise: of the tied 0 and 2, 2 wins
                     [0.7, 0.2, 0.2],    # equal losses too: the lower index
                     [0.0, 0.0, 9.0]])   # no tie: the best on validation, whatever its loss
    assert select_models(val, loss).tolist() == [2, 2, 1, 2]
    assert select_models(val, np.zeros_like(loss)).tolist() == select_models(val).tolist()


def test_select_models_counts_a_nan_loss_as_the_highest():
    val = [[0.5, 0.5, 0.5], [0.5, 0.5, 0.1]]
    nan = float("nan")
    assert select_models(val, [[nan, 0.3, nan], [nan, nan, 0.0]]).tolist() == [1, 0]  # no finite tied loss: first


def test_select_models_with_a_loss_follows_the_input_type_and_checks_its_shape():
    out = select_models(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.3, 0.2]]))
    assert isinstance(out, torch.Tensor) and out.tolist() == [1]
    with pytest.raises(ValueError, match=r"`val_accuracy` and `loss` must have the same shape"):
        select_models([[0.5, 0.5]], [[0.3, 0.2, 0.1]])


def test_select_models_returns_tensor_for_tensor():
    out = select_models(torch.tensor([[0.2, 0.4], [0.7, 0.1]]))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.int64
    assert out.tolist() == [1, 0]


def test_client_accuracy_indexes_chosen_model():
    test = np.array([[0.5, 0.9, 0.1], [0.8, 0.4, 0.2]])
    assert client_accuracy(test, [2, 0]).tolist() == [0.1, 0.8]
    t = client_accuracy(torch.tensor(test), torch.tensor([1, 1]))
    assert isinstance(t, torch.Tensor) and t.tolist() == [0.9, 0.4]


def test_worst_k_percent_known_vector():
    acc = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 1.0]  # sorted: .1 .2 .3 ... 1.0
    out = worst_k_percent(acc)
    assert list(out) == ["worst20", "worst40", "worst60", "worst80"]
    assert out["worst20"] == pytest.approx(0.15)  # 2 clients: .1, .2
    assert out["worst40"] == pytest.approx(0.25)  # .1 .. .4
    assert out["worst60"] == pytest.approx(0.35)
    assert out["worst80"] == pytest.approx(0.45)


def test_worst_k_percent_at_least_one_client_and_rounding():
    assert worst_k_percent([0.3, 0.9, 0.6], fractions=(0.05,)) == {"worst5": pytest.approx(0.3)}
    # 3 clients * 0.6 = 1.8 -> 2 clients
    assert worst_k_percent([0.3, 0.9, 0.6], fractions=(0.6,))["worst60"] == pytest.approx(0.45)
    with pytest.raises(ValueError, match="fractions"):
        worst_k_percent([0.3], fractions=(0.0,))


def test_oracle_accuracy():
    test = [[0.5, 0.9], [0.8, 0.4], [0.6, 0.3]]
    assert oracle_accuracy(test) == pytest.approx((0.9 + 0.8 + 0.6) / 3)


def test_summarise_hand_computed():
    val = [[0.6, 0.8], [0.9, 0.5], [0.7, 0.7], [0.1, 0.2], [0.4, 0.3]]
    test = [[0.5, 0.9], [0.8, 0.4], [0.6, 0.3], [0.2, 0.1], [0.7, 0.75]]
    # choice: 1, 0, 0 (tie), 1, 0 -> acc .9 .8 .6 .1 .7
    s = summarise(val, test)
    assert s["choice_counts"] == [3, 2]
    assert s["mean"] == pytest.approx((0.9 + 0.8 + 0.6 + 0.1 + 0.7) / 5)
    assert s["worst20"] == pytest.approx(0.1)
    assert s["worst40"] == pytest.approx(0.35)
    assert s["worst60"] == pytest.approx((0.1 + 0.6 + 0.7) / 3)
    assert s["worst80"] == pytest.approx((0.1 + 0.6 + 0.7 + 0.8) / 4)
    assert s["oracle"] == pytest.approx((0.9 + 0.8 + 0.6 + 0.2 + 0.75) / 5)
    assert s["oracle"] >= s["mean"]
    t = summarise(torch.tensor(val), torch.tensor(test))
    assert t["choice_counts"] == s["choice_counts"]
    assert {k: v for k, v in t.items() if k != "choice_counts"} == pytest.approx(
        {k: v for k, v in s.items() if k != "choice_counts"})
    assert isinstance(t["mean"], float)


def test_pooled_loss_is_the_mean_over_both_splits_samples():
    rng = np.random.default_rng(0)
    train, val = rng.random((6, 3)), rng.random((6, 3))
    nt, nv = rng.integers(1, 50, 6), rng.integers(1, 20, 6)
    pooled = pooled_loss(train, val, nt, nv)
    # the mean over the samples of both splits, written as sums of per-sample losses
    expected = (train * nt[:, None] + val * nv[:, None]) / (nt + nv)[:, None]
    assert np.allclose(pooled, expected)
    assert ((pooled >= np.minimum(train, val) - 1e-12) & (pooled <= np.maximum(train, val) + 1e-12)).all()
    t = pooled_loss(torch.tensor(train), torch.tensor(val), torch.tensor(nt), torch.tensor(nv))
    assert isinstance(t, torch.Tensor) and torch.allclose(t, torch.tensor(expected))


def test_pooled_loss_leaves_out_empty_splits_and_refuses_nan_where_there_is_data():
    nan = float("nan")
    out = pooled_loss([[1.0, 2.0], [nan, nan], [nan, nan]], [[nan, nan], [3.0, 4.0], [nan, nan]],
                      [5, 0, 0], [0, 2, 0])
    assert out[0].tolist() == [1.0, 2.0] and out[1].tolist() == [3.0, 4.0] and np.isnan(out[2]).all()
    with pytest.raises(ValueError, match="`train_loss`.*NaN"):
        pooled_loss([[nan, 1.0]], [[1.0, 1.0]], [3], [1])
    with pytest.raises(ValueError, match="`val_counts`.*shape"):
        pooled_loss([[1.0, 1.0]], [[1.0, 1.0]], [3], [1, 2])
    with pytest.raises(ValueError, match="same shape"):
        pooled_loss([[1.0, 1.0]], [[1.0, 1.0, 1.0]], [3], [1])
    with pytest.raises(ValueError, match="non-negative"):
        pooled_loss([[1.0, 1.0]], [[1.0, 1.0]], [-3], [1])


def test_select_by_loss_takes_the_lowest_and_breaks_ties_to_the_lowest_index():
    assert select_by_loss([[0.5, 0.3, 0.3], [0.1, 0.4, 0.1], [float("nan"), 0.2, 0.9]]).tolist() == [1, 0, 1]
    assert select_by_loss(torch.tensor([[0.4, 0.2]])).dtype == torch.int64
    with pytest.raises(ValueError, match="`loss`"):
        select_by_loss([0.1, 0.2])


def test_summarise_pooled_weights_clients_by_their_test_size():
    val = [[0.9, 0.1], [0.1, 0.9], [0.5, 0.6]]
    test = [[0.8, 0.0], [0.0, 0.4], [0.3, 0.7]]  # picks: 0.8, 0.4, 0.7
    s = summarise(val, test, sizes=[100, 10, 50])
    assert s["pooled"] == pytest.approx((0.8 * 100 + 0.4 * 10 + 0.7 * 50) / 160)
    assert summarise(val, test, sizes=[7, 7, 7])["pooled"] == pytest.approx(s["mean"])
    assert "pooled" not in summarise(val, test)
    for bad in ([1, 2], [1, -2, 3], [0, 0, 0], [1, float("nan"), 1]):
        with pytest.raises(ValueError, match="sizes"):
            summarise(val, test, sizes=bad)


def test_summarise_with_a_given_choice_scores_that_choice():
    val = [[0.6, 0.8], [0.9, 0.5]]
    test = [[0.5, 0.9], [0.8, 0.4]]
    s = summarise(val, test, choice=[0, 1])
    assert s["mean"] == pytest.approx((0.5 + 0.4) / 2) and s["choice_counts"] == [1, 1]
    assert s["oracle"] == pytest.approx((0.9 + 0.8) / 2)
    with pytest.raises(ValueError, match="`choice`"):
        summarise(val, test, choice=[0, 2])
    with pytest.raises(ValueError, match="`choice`.*integer"):
        summarise(val, test, choice=[0, 0.5])


# --------------------------------------------------------------------------- diversity


def test_symmetric_kl_of_known_distributions():
    p, q = np.array([0.5, 0.5]), np.array([0.9, 0.1])
    expected = (p * np.log(p / q)).sum() + (q * np.log(q / p)).sum()
    assert expected == pytest.approx(0.4 * math.log(9))
    d = pairwise_symmetric_kl(np.array([[p], [q]]))
    assert d.shape == (2, 2)
    assert d[0, 1] == pytest.approx(expected) and d[1, 0] == pytest.approx(expected)
    assert d[0, 0] == 0 and d[1, 1] == 0


def test_pairwise_kl_averages_over_samples_and_diversity_over_pairs():
    a = [[0.5, 0.5], [0.2, 0.8]]
    b = [[0.9, 0.1], [0.2, 0.8]]  # second sample identical -> contributes 0
    c = [[0.5, 0.5], [0.2, 0.8]]  # same as a
    probs = torch.tensor([a, b, c], dtype=torch.float64)
    d = pairwise_symmetric_kl(probs)
    assert isinstance(d, torch.Tensor) and d.shape == (3, 3)
    k = 0.4 * math.log(9) / 2
    assert d[0, 1].item() == pytest.approx(k)
    assert d[1, 2].item() == pytest.approx(k)
    assert d[0, 2].item() == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(d, d.T)
    assert prediction_diversity(probs) == pytest.approx(2 * k / 3)


def test_diversity_single_model_is_zero_and_identical_models_zero():
    assert prediction_diversity([[[0.3, 0.7], [1.0, 0.0]]]) == 0.0
    same = np.tile(np.array([[[0.3, 0.7], [1.0, 0.0]]]), (3, 1, 1))
    assert prediction_diversity(same) == pytest.approx(0.0, abs=1e-12)


def test_diversity_clamps_zero_probabilities():
    d = prediction_diversity([[[1.0, 0.0]], [[0.0, 1.0]]])
    # each term: 1 * (log 1 - log 1e-12), twice
    assert math.isfinite(d)
    assert d == pytest.approx(2 * (1 - 1e-12) * math.log(1e12), rel=1e-9)


# --------------------------------------------------------------------------- plan diagnostics


def test_gamma_sparsity():
    plan = np.array([[0.2, 0.0, 0.0], [0.0, 0.1, 1e-13]])
    assert gamma_sparsity(plan) == pytest.approx(4 / 6)
    assert gamma_sparsity(plan, atol=0.0) == pytest.approx(3 / 6)
    assert gamma_sparsity(torch.ones(2, 2)) == 0.0


def test_gamma_drift_zero_for_identical_and_row_rescaled_plans():
    plan = np.array([[0.3, 0.1, 0.0], [0.0, 0.05, 0.05]])
    assert gamma_drift(plan, plan) == 0.0
    assert gamma_drift(plan, plan * np.array([[2.0], [7.0]])) == pytest.approx(0.0, abs=1e-15)


def test_gamma_drift_hand_computed_and_positive():
    prev = np.array([[0.25, 0.25], [0.5, 0.0]])
    plan = np.array([[0.45, 0.05], [0.5, 0.0]])
    # row 0: shares (.5,.5) -> (.9,.1): 0.4 ln 9; row 1 unchanged
    assert gamma_drift(prev, plan) == pytest.approx(0.4 * math.log(9) / 2)
    assert gamma_drift(plan, prev) == pytest.approx(gamma_drift(prev, plan))
    moved = np.array([[0.25, 0.25], [0.0, 0.5]])
    assert gamma_drift(prev, moved) > 10  # mass moved to an unused model: large but finite


def test_gamma_drift_rejects_negative_and_empty_rows():
    with pytest.raises(ValueError, match="`plan`.*non-negative"):
        gamma_drift([[0.5, 0.5]], [[1.0, -0.1]])
    with pytest.raises(ValueError, match="`prev`.*all-zero row 1"):
        gamma_drift([[0.5, 0.5], [0.0, 0.0]], [[0.5, 0.5], [0.5, 0.5]])


# --------------------------------------------------------------------------- paired difference


def test_paired_difference_matches_scipy_t_interval():
    rng = np.random.default_rng(0)
    a = rng.normal(0.8, 0.02, size=6)
    b = a - 0.01 + rng.normal(0, 0.005, size=6)
    r = paired_difference(a, b, confidence=0.9)
    d = a - b
    low, high = stats.t.interval(0.9, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert r["n"] == 6
    assert r["mean"] == pytest.approx(d.mean())
    assert r["low"] == pytest.approx(low) and r["high"] == pytest.approx(high)
    assert r["significant"] == (low > 0 or high < 0)


def test_paired_difference_significance_requires_interval_to_exclude_zero():
    assert paired_difference([0.80, 0.82, 0.81], [0.78, 0.79, 0.80])["significant"] is False
    r = paired_difference([0.80, 0.82, 0.81, 0.83], [0.78, 0.79, 0.79, 0.81])
    assert r["significant"] is True and r["low"] > 0
    worse = paired_difference([0.78, 0.79, 0.79, 0.81], [0.80, 0.82, 0.81, 0.83])
    assert worse["significant"] is True and worse["high"] < 0


def test_paired_difference_needs_two_seeds():
    with pytest.raises(ValueError, match="at least 2"):
        paired_difference([0.8], [0.7])


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: select_models([0.1, 0.2]), r"`val_accuracy`.*\(2,\)"),
        (lambda: select_models([[0.1, float("inf")]]), r"`val_accuracy`.*contains inf"),
        (lambda: worst_k_percent([float("nan"), float("nan")]), r"`acc` is NaN for every client"),
        (lambda: summarise([[0.1, 0.2]], [[float("nan")] * 2]), r"no client has test samples"),
        (lambda: client_accuracy([[0.1, 0.2]], [0, 1]), r"`choice`.*\(1, 2\).*\(2,\)"),
        (lambda: client_accuracy([[0.1, 0.2]], [2]), r"`choice`.*0 \.\. 1"),
        (lambda: summarise([[0.1, 0.2]], [[0.1, 0.2, 0.3]]), r"`val_acc` and `test_acc`.*\(1, 2\).*\(1, 3\)"),
        (lambda: worst_k_percent([[0.1, 0.2]]), r"`acc`.*\(1, 2\)"),
        (lambda: oracle_accuracy(np.zeros((0, 2))), r"`test_accuracy`.*\(0, 2\)"),
        (lambda: pairwise_symmetric_kl([[0.5, 0.5]]), r"`probs`.*\[m, N, C\].*\(1, 2\)"),
        (lambda: pairwise_symmetric_kl([[[2.0, 3.0]]]), r"`probs`.*sums to 5"),
        (lambda: prediction_diversity([[[0.5, float("nan")]]]), r"`probs`.*NaN"),
        (lambda: gamma_sparsity([1.0, 0.0]), r"`plan`.*\(2,\)"),
        (lambda: gamma_drift([[0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]]), r"`prev` and `plan`.*\(1, 2\).*\(2, 2\)"),
        (lambda: gamma_drift([[0.5, float("inf")]], [[0.5, 0.5]]), r"`prev`.*NaN or inf"),
        (lambda: paired_difference([0.1, 0.2], [0.1, 0.2, 0.3]), r"`a` and `b`.*\(2,\).*\(3,\)"),
        (lambda: paired_difference([0.1, float("nan")], [0.1, 0.2]), r"`a`.*NaN"),
        (lambda: paired_difference([0.1, 0.2], [0.1, 0.2], confidence=1.0), r"`confidence`"),
    ],
)
def test_bad_input_raises_value_error_naming_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------- figures


def _png_ok(fig, path):
    assert isinstance(fig, Figure)
    assert path.is_file() and path.stat().st_size > 5000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plt.close(fig)


def test_radar_writes_png(tmp_path):
    path = tmp_path / "sub" / "radar.png"
    rng = np.random.default_rng(1)
    fig = figures.radar({"FedAvg": rng.uniform(0.4, 0.9, 12), "MosT": torch.rand(12)}, title="per client",
                        path=path)
    ax = fig.axes[0]
    assert ax.name == "polar"
    assert len(ax.get_lines()) == 2 and len(ax.get_lines()[0].get_xdata()) == 13  # closed
    _png_ok(fig, path)


def test_radar_rejects_unequal_lengths():
    with pytest.raises(ValueError, match="same length"):
        figures.radar({"a": [0.1, 0.2, 0.3], "b": [0.1, 0.2]})


def test_curves_writes_png_with_bands(tmp_path):
    path = tmp_path / "curves.png"
    fig = figures.curves({"FedAvg": [0.3, 0.5, 0.6], "MosT": [0.3, 0.6, 0.7]}, ylabel="accuracy",
                         title="test accuracy", std={"MosT": [0.01, 0.02, 0.02]}, path=path)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 2 and len(ax.collections) == 1
    _png_ok(fig, path)
    with pytest.raises(ValueError, match="std"):
        figures.curves({"a": [1, 2]}, std={"a": [1]})


def test_fifteen_methods_get_fifteen_distinct_styles_and_a_legend_beside_the_axes(tmp_path):
    names = [f"method {k}" for k in range(15)]
    fig = figures.curves({n: [0.1 * k, 0.2] for k, n in enumerate(names)}, path=tmp_path / "c.png")
    lines = fig.axes[0].get_lines()
    assert len({(ln.get_color(), ln.get_linestyle()) for ln in lines}) == 15
    legend = fig.axes[0].get_legend()
    assert legend.get_bbox_to_anchor().x0 > fig.axes[0].get_window_extent().x1  # right of the axes
    plt.close(fig)
    few = figures.curves({"a": [0.1, 0.2], "b": [0.2, 0.3]})
    assert [ln.get_linestyle() for ln in few.axes[0].get_lines()] == ["-", "-"]
    plt.close(few)
    bars = figures.worst_k_bars({n: {"worst20": 0.1, "worst40": 0.2, "worst60": 0.3, "worst80": 0.4} for n in names})
    patches = bars.axes[0].patches
    assert {(p.get_facecolor(), p.get_hatch()) for p in patches[::4]} == {  # one bar per method and group
        (p.get_facecolor(), p.get_hatch()) for p in patches}
    assert len({(p.get_facecolor(), p.get_hatch()) for p in patches}) == 15
    plt.close(bars)


def test_worst_k_bars_writes_png(tmp_path):
    path = tmp_path / "bars.png"
    table = {"FedAvg": worst_k_percent(np.linspace(0.2, 0.9, 20)),
             "MosT": {"worst20": 0.5, "worst40": 0.6, "worst60": 0.65, "worst80": 0.7, "mean": 0.75}}
    fig = figures.worst_k_bars(table, title="worst k %", path=path)
    assert len(fig.axes[0].patches) == 8
    _png_ok(fig, path)
    with pytest.raises(ValueError, match="worst80"):
        figures.worst_k_bars({"a": {"worst20": 0.1, "worst40": 0.2, "worst60": 0.3}})


def test_assignment_stack_counts_argmax_per_round(tmp_path):
    path = tmp_path / "stack.png"
    plans = [
        torch.tensor([[0.2, 0.1], [0.3, 0.0], [0.1, 0.1]]),  # argmax 0, 0, 0 (tie)
        np.array([[0.0, 0.2], [0.3, 0.0], [0.0, 0.2]]),  # 1, 0, 1
        np.array([[0.0, 0.2], [0.0, 0.3], [0.0, 0.2]]),  # 1, 1, 1
    ]
    fig = figures.assignment_stack(plans, title="assignment", path=path)
    polys = fig.axes[0].collections
    assert len(polys) == 2

    def top(layer):  # upper edge of a stacked layer over rounds 0, 1, 2 (steps: flat within a round)
        verts = polys[layer].get_paths()[0].vertices
        def at(x0):
            return {float(y) for x, y in verts if abs(x - x0) < 1e-9}

        return [max(at(r - 0.5) & at(r + 0.5)) for r in (0, 1, 2)]  # the level held across round r

    assert top(0) == [3, 1, 0]  # clients whose largest share is model 0
    assert top(1) == [3, 3, 3]  # stacked: all n clients
    _png_ok(fig, path)
    with pytest.raises(ValueError, match="same shape"):
        figures.assignment_stack([np.ones((2, 2)), np.ones((3, 2))])


def test_sparsity_drift_writes_two_panels(tmp_path):
    path = tmp_path / "sd.png"
    fig = figures.sparsity_drift({"MosT": [0.0, 0.3, 0.5, 0.5], "MosT (no entropy)": [0.0, 0.1, 0.2, 0.2]},
                                 {"MosT": [0.4, 0.1, 0.0], "MosT (no entropy)": [0.9, 0.5, 0.2]},
                                 title="Γ dynamics", path=path)
    ax_s, ax_d = fig.axes
    assert len(ax_s.get_lines()) == 2 and len(ax_d.get_lines()) == 2
    assert list(ax_d.get_lines()[0].get_xdata()) == [1, 2, 3]  # drift between successive rounds
    assert list(ax_s.get_lines()[0].get_ydata()) == [0, 30, 50, 50]  # sparsity in %
    # non-negative quantities: both axes start at 0 (before, the drift axis went below it)
    assert ax_s.get_ylim() == (0, 100) and ax_d.get_ylim()[0] == 0
    legend = ax_d.get_legend()  # one legend, beside the last panel, naming every method
    assert [t.get_text() for t in legend.get_texts()] == ["MosT", "MosT (no entropy)"]
    fig.canvas.draw()
    assert legend.get_window_extent().x0 >= ax_d.get_window_extent().x1
    # distinguishable where the values coincide: colour, line style or marker differ
    a, b = ax_s.get_lines()
    assert a.get_color() != b.get_color() and a.get_marker() != b.get_marker()
    _png_ok(fig, path)


def test_sparsity_drift_cumulative_switches_and_warm_up_alignment():
    fig = figures.sparsity_drift({"MosT": [0.8, 0.8, 0.8], "IFCA": [0.8, 0.8, 0.8, 0.8, 0.8]},
                                 {"MosT": [0.5, 0.0], "IFCA": [1.0, 0.0, 2.0, 0.0]}, cumulative=True,
                                 switches={"MosT": [0.2, 0.0], "IFCA": [0.5, 0.0, 0.1, 0.0]},
                                 start={"MosT": 2})
    ax_s, ax_d, ax_w = fig.axes
    most_s, ifca_s = ax_s.get_lines()
    assert list(most_s.get_xdata()) == [2, 3, 4] and list(ifca_s.get_xdata()) == [0, 1, 2, 3, 4]  # lined up
    most_d, ifca_d = ax_d.get_lines()
    # summed over the rounds, from 0 at the first plan: a staircase that never goes down
    assert list(most_d.get_xdata()) == [2, 3, 4] and list(most_d.get_ydata()) == [0, 0.5, 0.5]
    assert list(ifca_d.get_ydata()) == [0, 1, 1, 3, 3]
    assert "summed" in ax_d.get_ylabel()
    assert list(ax_w.get_lines()[0].get_ydata()) == [20, 0] and ax_w.get_ylim() == (0, 100)
    assert "%" in ax_w.get_ylabel() and ax_w.get_legend() is not None
    plt.close(fig)


def test_switch_share_and_counts_change():
    constant = [[0, 1, 1, 0], [1, 0, 0, 1], [1, 0, 0, 1]]  # two per model each round, yet all switch once
    assert not figures.counts_change(constant)
    assert figures.switch_share(constant).tolist() == [1.0, 0.0]
    assert figures.counts_change([[0, 0, 1], [0, 1, 1]])
    plans = [np.eye(2)[[0, 0, 1]], np.eye(2)[[0, 1, 1]]]  # plans [n, m] give the same
    assert figures.counts_change(plans) and figures.switch_share(plans).tolist() == pytest.approx([1 / 3])
    assert not figures.counts_change([[0, 1]])  # a single round: nothing changes


def test_worst_k_bars_draw_error_bars_over_seeds_in_percent(tmp_path):
    keys = ("worst20", "worst40", "worst60", "worst80")
    per_seed = {k: [0.5 + 0.1 * i, 0.6 + 0.1 * i, 0.7 + 0.1 * i] for i, k in enumerate(keys)}
    summary = {k: {"mean": 0.4, "std": 0.05} for k in keys}  # the bench's summaries
    path = tmp_path / "bars.png"
    fig = figures.worst_k_bars({"MosT": per_seed, "IFCA": summary}, title="worst k", path=path)
    ax = fig.axes[0]
    most, ifca = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [b.get_height() for b in most] == pytest.approx([60, 70, 80, 90])  # the seeds' mean, in %
    assert [b.get_height() for b in ifca] == pytest.approx([40] * 4)
    for bars, std in ((most, 10.0), (ifca, 5.0)):  # a bar of ± std
        assert bars.errorbar is not None
        segments = bars.errorbar.lines[2][0].get_segments()
        assert [s[1][1] - s[0][1] for s in segments] == pytest.approx([2 * std] * 4)
    assert "(%)" in ax.get_ylabel() and "std over seeds" in ax.get_title()
    assert ax.get_legend() is not None
    _png_ok(fig, path)
    single = figures.worst_k_bars({"a": {k: 0.5 for k in keys}})  # one seed: no error bars
    assert [c.errorbar for c in single.axes[0].containers] == [None]
    plt.close(single)
    with pytest.raises(ValueError, match="mean"):
        figures.worst_k_bars({"a": {k: {"std": 0.1} for k in keys}})


def test_profile_is_the_federated_per_client_figure():
    fig = figures.profile({"MosT": [0.9, 0.4, 0.7], "FedAvg": [0.5, 0.6, 0.8]}, percent=True)
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == pytest.approx([40, 70, 90])
    plt.close(fig)


def test_gamma_drift_skip_empty_leaves_out_rows_without_mass():
    prev = torch.tensor([[0.25, 0.25], [0.0, 0.0], [0.5, 0.0]])
    plan = torch.tensor([[0.45, 0.05], [0.3, 0.2], [0.0, 0.0]])
    # only row 0 has mass in both plans: its drift alone
    assert gamma_drift(prev, plan, skip_empty=True) == pytest.approx(0.4 * math.log(9))
    assert gamma_drift([[0.0, 0.0]], [[0.5, 0.5]], skip_empty=True) == 0.0
    with pytest.raises(ValueError, match="`prev`.*all-zero row 1"):
        gamma_drift(prev, plan)


def test_nan_marks_a_client_without_samples_as_a_federated_result_writes_it():
    """A client with no validation sample takes its lowest-loss (or first) model; one with no test
    sample is left out of every summary, so they equal the result's own numbers."""
    import warnings

    import most.federated as fl
    from most.federated import evaluation

    g = torch.Generator().manual_seed(0)

    def client(n_val, n_test):
        x = torch.randn(20 + n_val + n_test, 8, generator=g)
        y = (x[:, 0] > 0).long()
        a, b = 20, 20 + n_val
        return fl.ClientData(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:])

    data = fl.FederatedDataset.from_clients([client(6, 6) for _ in range(4)] + [client(0, 0), client(0, 5)],
                                            name="toy", n_classes=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some clients have no validation samples
        result = fl.run_federated(data, fl.logistic_regression(8, 2), fl.methods.FedAvg(n_models=2),
                                  fl.FederatedConfig(rounds=2, seed=0))
    s = summarise(result.val_accuracy, result.test_accuracy, choice=result.choice)
    assert s["mean"] == pytest.approx(result.mean_accuracy) and sum(s["choice_counts"]) == result.n_tested == 5
    # without a choice, a client without validation samples takes model 0 (the result's took its lowest training loss)
    assert summarise(result.val_accuracy, result.test_accuracy)["choice_counts"] == [2, 3]
    assert worst_k_percent(result.client_accuracy, fractions=(1.0,))["worst100"] == pytest.approx(result.mean_accuracy)
    nan = float("nan")
    assert select_models([[nan, nan], [0.2, nan]]).tolist() == [0, 0]
    assert select_models([[nan, nan]], loss=[[0.9, 0.1]]).tolist() == [1]  # no validation: the loss decides
    assert oracle_accuracy([[0.5, 0.9], [nan, nan]]) == 0.9
    assert evaluation.pooled_accuracy([1.0, nan], sizes=[10, 0]) == 1.0
