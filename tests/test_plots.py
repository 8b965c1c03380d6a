"""most.plots: the sorted per-objective profile, the grouped Γ heat map, method styles and legends."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.collections import PolyCollection

from most import plots


def _close(fig):
    plt.close(fig)


def test_profile_sorts_each_seed_worst_first_and_draws_the_mean_by_rank_in_percent(tmp_path):
    seeds = np.array([[0.9, 0.5, 0.7, 0.6], [0.4, 0.8, 1.0, 0.6]])
    path = tmp_path / "p.png"
    fig = plots.profile({"MosT": seeds, "FedAvg": [0.3, 0.9, 0.6, 0.5]}, ylabel="accuracy (%)", percent=True,
                        path=path)
    ax = fig.axes[0]
    most, fedavg = ax.get_lines()
    # each seed sorted apart, then the mean at each rank (not the mean of each objective, sorted)
    assert most.get_ydata() == pytest.approx(100 * np.sort(seeds, 1).mean(0))
    assert fedavg.get_ydata() == pytest.approx([30, 50, 60, 90])  # accuracies: ascending, worst first
    assert most.get_xdata() == pytest.approx([12.5, 37.5, 62.5, 87.5])  # rank as a quantile
    assert ax.get_xlim() == (0, 100) and ax.get_yscale() == "linear" and ax.get_ylim()[0] >= 0
    # a ± std band over the seeds for MosT alone (FedAvg has one seed)
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1
    assert path.stat().st_size > 5000
    _close(fig)


def test_profile_sorts_losses_descending_and_takes_a_log_axis_when_they_span_decades():
    losses = {"MosT": [0.6, 0.8, 0.7, 0.5], "Linearization": [40.0, 12.0, 25.0, 30.0]}
    fig = plots.profile(losses, higher_is_better=False, ylabel="loss")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"  # 0.5 .. 40: almost two decades
    assert list(ax.get_lines()[1].get_ydata()) == [40.0, 30.0, 25.0, 12.0]  # worst (largest) first
    _close(fig)
    narrow = plots.profile({"a": [1.0, 2.0, 20.0]}, higher_is_better=False)  # 1.3 decades: linear
    assert narrow.axes[0].get_yscale() == "linear"
    _close(narrow)
    forced = plots.profile(losses, higher_is_better=False, log=False)
    assert forced.axes[0].get_yscale() == "linear"
    _close(forced)
    zeros = plots.profile({"a": [0.0, 0.001, 5.0]})  # a zero cannot go on a log axis
    assert zeros.axes[0].get_yscale() == "linear" and zeros.axes[0].get_ylim()[0] == 0
    _close(zeros)


def test_profile_puts_methods_of_different_sizes_on_one_axis_and_rejects_bad_input():
    fig = plots.profile({"a": np.linspace(0, 1, 4), "b": np.linspace(0, 1, 10)})
    xs = [line.get_xdata() for line in fig.axes[0].get_lines()]
    assert xs[0][0] == pytest.approx(12.5) and xs[1][0] == pytest.approx(5.0)
    assert max(x.max() for x in xs) < 100
    _close(fig)
    with pytest.raises(ValueError, match="NaN"):
        plots.profile({"a": [0.1, float("nan")]})
    with pytest.raises(ValueError, match="at least one method"):
        plots.profile({})


def test_every_legend_is_beside_the_axes_never_over_the_lines():
    for fig in (plots.curves({"a": [0.1, 0.9], "b": [0.9, 0.1]}), plots.profile({"a": [1, 2], "b": [2, 3]}),
                plots.per_objective_bars({"a": [1.0, 2.0], "b": [3.0, 4.0]}, ylabel="loss")):
        fig.canvas.draw()
        ax = fig.axes[0]
        legend = ax.get_legend()
        assert legend is not None and len(legend.get_texts()) == 2
        assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # right of the axes
        _close(fig)


def test_method_styles_give_twenty_colours_none_repeated_and_a_marker_each():
    styles = [plots.method_style(k) for k in range(20)]
    assert len({s["color"] for s in styles}) == 20
    assert [s["linestyle"] for s in styles[:10]] == ["-"] * 10 and styles[10]["linestyle"] == "--"
    assert all(s["marker"] for s in styles) and styles[0]["marker"] != styles[1]["marker"]
    # markers of lines lying on one another alternate: different offsets for the first methods
    assert len({plots.mark_positions(k, 100)[0] for k in range(10)}) == 10


def test_assignment_heatmap_groups_objectives_by_largest_share_model(tmp_path):
    plan = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [1.0, 0.0], [0.2, 0.8]])
    fig = plots.assignment_heatmap(plan, path=tmp_path / "g.png")
    ax = fig.axes[0]
    image = ax.get_images()[0].get_array()
    owner = image.argmax(1)
    assert list(owner) == sorted(owner) == [0, 0, 1, 1, 1]  # blocks, model by model
    assert list(image[:2, 0]) == pytest.approx([1.0, 0.8]) and list(image[2:, 1]) == pytest.approx([0.9, 0.8, 0.7])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["3", "1", "0", "4", "2"]  # the objectives' own indices
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0\n(2)", "1\n(3)"]  # objectives per model
    assert "grouped by largest-share model" in ax.get_ylabel() and ax.get_xlabel().startswith("model")
    assert len(ax.get_lines()) == 1  # one line parts the two groups
    assert (tmp_path / "g.png").stat().st_size > 3000
    _close(fig)
    unsorted = plots.assignment_heatmap(plan, sort=False)
    assert unsorted.axes[0].get_images()[0].get_array()[0].tolist() == pytest.approx([0.1, 0.9])
    _close(unsorted)
    with pytest.raises(ValueError, match=r"shape \[n, m\]"):
        plots.assignment_heatmap(torch.ones(3))


def test_measured_rows_leave_out_missing_values_and_read_seeds_of_other_sizes_at_the_same_ranks():
    rows = plots.measured_rows([[0.5, float("nan"), 0.1, 0.9], [0.2, 0.4, 0.6, 0.8], [float("nan")] * 4])
    assert len(rows) == 2 and all(len(r) == 4 for r in rows)
    assert rows[1].tolist() == [0.2, 0.4, 0.6, 0.8]
    # three values at the quantiles 1/6, 1/2, 5/6 read at 1/8, 3/8, 5/8, 7/8 (the ends held)
    assert rows[0] == pytest.approx([0.1, 0.1 + 0.4 * 0.625, 0.5 + 0.4 * 0.375, 0.9])
    assert plots.measured_rows([[float("nan")]]) == []


def test_front_panels_take_lists_and_refuse_empty_or_misshaped_input():
    front = [[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]]
    fig = plots.hypervolume_areas({"a": [[0.2, 0.5], [0.6, 0.1]]}, reference=[1.1, 1.1], front=front)
    assert len(fig.axes[0].collections) >= 2  # the dominated area and the points
    plt.close(fig)
    plt.close(plots.pareto_fronts({"a": [[0.2, 0.5]]}, front=front))
    for draw in (lambda p: plots.pareto_fronts(p), lambda p: plots.hypervolume_areas(p, reference=[1, 1])):
        with pytest.raises(ValueError, match="`points` must map at least one method"):
            draw({})
        with pytest.raises(ValueError, match=r"`points\['a'\]` must be \[k, 2\]"):
            draw({"a": np.zeros((0, 2))})
    with pytest.raises(ValueError, match=r"`front` must be \[K, 2\]"):
        plots.pareto_fronts({"a": [[0.2, 0.5]]}, front=[0.1, 0.2])
    with pytest.raises(ValueError, match="`values` must map at least one method"):
        plots.per_objective_bars({}, ylabel="loss")
    with pytest.raises(ValueError, match=r"`values\['a'\]` must be a non-empty list of finite losses"):
        plots.per_objective_bars({"a": [0.1, float("nan")]}, ylabel="loss")
    with pytest.raises(ValueError, match="`keys` is empty"):
        plots.grouped_bars({"a": {"x": 1.0}}, keys=[])


@pytest.mark.parametrize("reference, match", [
    ([1.1], r"`reference` must be a point of two objective values.*shape \(1,\)"),
    (1.1, r"`reference` must be a point of two objective values.*shape \(\)"),
    ([1.1, 1.1, 1.1], r"shape \(3,\)"),
    ([[1.1, 1.1]], r"shape \(1, 2\)"),
    ("ab", "`reference` must be a point of two objective values"),
    ([float("nan"), 1.1], r"`reference` must be finite .*\[nan, 1\.1\]"),
    ([1.1, float("inf")], "`reference` must be finite"),
])
@pytest.mark.parametrize("draw", [plots.pareto_fronts, plots.hypervolume_areas], ids=["fronts", "areas"])
def test_front_panels_refuse_a_reference_that_is_not_a_finite_point_of_two_objectives(draw, reference, match):
    with pytest.raises(ValueError, match=match):
        draw({"a": [[0.1, 0.9], [0.9, 0.1]]}, reference=reference)


def test_front_panels_take_a_reference_as_an_array_or_a_tensor():
    for reference in (np.array([1.1, 1.2]), torch.tensor([1.1, 1.2]), (1.1, 1.2)):
        fig = plots.pareto_fronts({"a": [[0.1, 0.9]]}, reference=reference)
        assert fig.axes[0].lines[0].get_xdata()[0] == pytest.approx(1.1)  # the box's vertical side
        assert fig.axes[0].lines[1].get_ydata()[0] == pytest.approx(1.2)
        plt.close(fig)
        plt.close(plots.hypervolume_areas({"a": [[0.1, 0.9]]}, reference=reference))


def test_dominated_areas_of_non_finite_points_or_front_are_refused_and_the_front_panels_skip_such_points():
    with pytest.raises(ValueError, match=r"`points\['b'\]` contains NaN or inf, so its dominated area is undefined"):
        plots.hypervolume_areas({"a": [[0.1, 0.9]], "b": [[float("nan"), 0.9]]}, reference=[1.1, 1.1])
    with pytest.raises(ValueError, match="`front` contains NaN or inf"):
        plots.hypervolume_areas({"a": [[0.1, 0.9]]}, reference=[1.1, 1.1], front=[[0.0, float("nan")]])
    # a diverged model (NaN losses) is left out of the scatter, not an error
    fig = plots.pareto_fronts({"a": [[0.1, 0.9], [float("nan"), 0.5]]}, reference=[1.1, 1.1])
    assert np.isfinite(fig.axes[0].get_xlim()).all()
    plt.close(fig)


def test_grouped_bars_refuse_labels_that_are_not_one_per_key():
    with pytest.raises(ValueError, match="`labels` has 2 entries but `keys` has 1: give one tick label per key"):
        plots.grouped_bars({"a": {"x": 1.0}}, ["x"], labels=["x", "y"])
    fig = plots.grouped_bars({"a": {"x": 1.0, "y": 2.0}}, ["x", "y"], labels=(f"domain {k}" for k in "xy"))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["domain x", "domain y"]
    plt.close(fig)
