"""most.plots: the sorted per-objective profile, the grouped Γ heat map, method styles and legends."""

import matplotlib
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


# ----------------------------------------------------------------------------- shared axes, bands, missing values
def _panel_points(ax) -> np.ndarray:
    return np.concatenate([c.get_offsets() for c in ax.collections if c.get_offsets().shape[0]
                           and not isinstance(c, PolyCollection)])


@pytest.mark.parametrize("order", [("MosT", "Linearization"), ("Linearization", "MosT")])
def test_dominated_area_panels_share_limits_that_hold_every_panels_points_whatever_the_order(order):
    pts = {"MosT": [[0.0, 1.0], [0.25, 0.5], [0.64, 0.2], [1.0, 0.0]],
           "Linearization": [[0.3, 0.7], [0.5, 0.6], [0.7, 0.5]]}
    fig = plots.hypervolume_areas({name: pts[name] for name in order}, reference=[1.1, 1.1])
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_visible()]
    for ax in panels:
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        assert x0 < x1 and y0 < y1
        for other in panels:  # every panel's points inside every panel's limits
            p = _panel_points(other)
            assert (p[:, 0] >= x0).all() and (p[:, 0] <= x1).all() and (p[:, 1] >= y0).all() and (p[:, 1] <= y1).all()
        assert x1 >= 1.1 and y1 >= 1.1  # the reference point too
        areas = [c for c in ax.collections if isinstance(c, PolyCollection)]
        # each method's area in its own colour, the one method_style gives it
        want = plots.method_style(order.index(ax.get_title()))["color"]
        assert areas and all(matplotlib.colors.same_color(a.get_facecolor()[0][:3], want) for a in areas)
    plt.close(fig)


def test_a_method_without_a_point_in_the_reference_box_leaves_every_panel_drawn_and_says_so():
    fig = plots.hypervolume_areas({"MosT": [[0.2, 0.8], [0.8, 0.2]], "B": [[2.0, 2.0]]}, reference=[1.1, 1.1])
    a, b = fig.axes[:2]
    for ax in (a, b):
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        assert x0 < 0.2 and x1 > 2.0 and y0 < 0.2 and y1 > 2.0  # not inverted, every point shown
    assert any("no point inside" in t.get_text() for t in b.texts) and not a.texts


def test_dominated_area_axes_start_near_the_data_not_at_zero():
    fig = plots.hypervolume_areas({"a": [[10.0, 12.0], [11.0, 10.5]]}, reference=[12.0, 13.0])
    x0, x1 = fig.axes[0].get_xlim()
    assert 9.0 < x0 < 10.0 and x1 > 12.0
    plt.close(fig)


def test_a_std_band_on_a_log_axis_stays_above_zero_and_is_symmetric_in_log_space():
    v, s = np.array([1.0, 0.5, 0.2, 0.1]), np.array([0.5, 0.6, 0.3, 0.2])
    fig = plots.curves({"MosT": v}, std={"MosT": s}, log=True)
    band = next(c for c in fig.axes[0].collections if isinstance(c, PolyCollection))
    y = band.get_paths()[0].vertices[:, 1]
    assert y.min() > 0
    assert y.min() == pytest.approx(min(v / (1 + s / v)))
    assert y.max() == pytest.approx(max(v + s))
    plt.close(fig)
    linear = plots.curves({"MosT": v}, std={"MosT": s})  # linear: mean ± std as before
    y = next(c for c in linear.axes[0].collections if isinstance(c, PolyCollection)).get_paths()[0].vertices[:, 1]
    assert y.min() == pytest.approx(min(v - s))
    plt.close(linear)


def test_curves_take_each_methods_index_so_that_its_colour_does_not_depend_on_the_others_drawn():
    index = {"MosT": 0, "IFCA": 1, "FedAvg": 2}
    both = plots.curves({"MosT": [1, 2], "FedAvg": [2, 3]}, method_index=index)
    alone = plots.curves({"FedAvg": [2, 3]}, method_index=index)
    assert both.axes[0].get_lines()[1].get_color() == alone.axes[0].get_lines()[0].get_color() \
        == plots.method_style(2)["color"]
    plt.close(both), plt.close(alone)


def test_curves_at_whole_rounds_get_whole_ticks():
    fig = plots.curves({"a": [0.1, 0.5, 0.9]}, x=[1, 3, 5])
    fig.canvas.draw()
    ticks = fig.axes[0].get_xticks()
    assert np.allclose(ticks, np.round(ticks))
    plt.close(fig)


def _bars(ax):
    from matplotlib.container import BarContainer

    return [c for c in ax.containers if isinstance(c, BarContainer)]


def test_grouped_bars_keep_their_places_and_mark_missing_values_as_na():
    fig = plots.grouped_bars({"MosT": {"a": [0.5, float("nan"), 0.6], "b": 0.7},
                              "FedAvg": {"a": 0.4, "b": float("inf")}}, ["a", "b"], annotate=True)
    ax = fig.axes[0]
    most, fedavg = _bars(ax)
    width = most[0].get_width()
    # the bars stay at their places: MosT left of FedAvg in each group
    assert most[0].get_x() == pytest.approx(-0.4) and fedavg[0].get_x() == pytest.approx(-0.4 + width)
    assert most[1].get_x() == pytest.approx(0.6) and fedavg[1].get_x() == pytest.approx(0.6 + width)
    assert most[0].get_height() == 0 and fedavg[1].get_height() == 0  # no bar where there is no value
    assert most[1].get_height() == pytest.approx(0.7) and fedavg[0].get_height() == pytest.approx(0.4)
    na = [t for t in ax.texts if t.get_text() == "n/a"]
    xs = sorted(t.get_position()[0] for t in na)
    assert xs == pytest.approx([-0.4 + width / 2, 0.6 + 1.5 * width])
    assert np.isfinite(ax.get_ylim()).all() and ax.get_ylim()[0] == 0
    plt.close(fig)


def test_grouped_bars_go_below_zero_only_for_negative_values():
    fig = plots.grouped_bars({"MosT": {"a": -0.5, "b": 0.7}, "FedAvg": {"a": 0.4, "b": 0.2}}, ["a", "b"])
    assert fig.axes[0].get_ylim()[0] <= -0.5
    plt.close(fig)
    fig = plots.grouped_bars({"MosT": {"a": 0.5, "b": 0.7}}, ["a", "b"])
    assert fig.axes[0].get_ylim()[0] == 0
    plt.close(fig)


def test_a_front_panel_without_a_finite_point_says_so():
    fig = plots.pareto_fronts({"MosT": [[0.1, 0.9], [0.9, 0.1]], "MGDA": [[float("inf"), float("nan")]]})
    a, b = fig.axes[:2]
    assert [t.get_text() for t in b.texts] == ["no finite point"] and not a.texts
    plt.close(fig)


def test_small_figures_have_room_for_their_labels():
    fig = plots.assignment_heatmap(torch.tensor([[0.5, 0.5], [0.2, 0.8], [1.0, 0.0]]))
    fig.canvas.draw()
    label = fig.axes[0].yaxis.label.get_window_extent()
    assert label.height <= fig.bbox.height and label.y0 >= 0
    plt.close(fig)
    # one or two groups: a minimum width per group, so that long tick labels stay apart
    long = ["lr=0.1, momentum=0.9, warm-up=15", "lr=0.3, momentum=0.5, warm-up=30"]
    fig = plots.grouped_bars({"a": {"x": 1.0, "y": 2.0}, "b": {"x": 1.5, "y": 2.5}}, ["x", "y"], labels=long)
    assert fig.get_size_inches()[0] / 2 >= 2.5
    plt.close(fig)


@pytest.mark.parametrize("on_validation", [True, False])
def test_the_model_count_figure_says_what_its_threshold_line_is(on_validation):
    from most.selection import ModelCountSelection, elbow_threshold

    scores = {1: 10.0, 2: 4.0, 3: 2.0, 4: 1.9}
    selection = ModelCountSelection(n_models=3, scores=scores, worst={m: 2 * v for m, v in scores.items()},
                                    train_scores=dict(scores), results={}, on_validation=on_validation)
    fig = selection.plot()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    line = next(ln for ln in ax.get_lines() if ln.get_label().startswith("within"))
    assert line.get_ydata()[0] == pytest.approx(elbow_threshold(scores, 0.05, on_validation=on_validation))
    want = ("within 5 % of the lowest mean" if on_validation
            else "within 5 % of the curve's drop above the lowest mean")
    assert want in labels
    plt.close(fig)


def test_the_assignment_stack_draws_steps_and_names_the_rows():
    from most.federated import figures

    plans = [np.eye(2)[[0, 0, 0, 1]], np.eye(2)[[0, 1, 1, 1]], np.eye(2)[[0, 1, 1, 1]]]  # model 0: 3, 1, 1
    fig = figures.assignment_stack(plans, rounds=[4, 5, 6], noun="objectives")
    ax = fig.axes[0]
    assert ax.get_ylabel().startswith("objectives")
    bottom = ax.collections[0].get_paths()[0].vertices
    top = bottom[bottom[:, 1] > 0]  # model 0's upper edge: flat over each round, a jump between rounds
    corners = {(round(float(x), 2), float(y)) for x, y in top}
    # round 4's count over 3.5 .. 4.5, then a jump to round 5's: no gradual slope between rounds
    assert {(3.5, 3.0), (4.5, 3.0), (4.5, 1.0), (5.5, 1.0), (6.5, 1.0)} <= corners
    assert ax.get_xlim()[0] <= 3.5 and ax.get_xlim()[1] >= 6.5
    plt.close(fig)
    assert figures.assignment_stack(plans).axes[0].get_ylabel().startswith("clients")


def test_long_method_names_widen_the_figure_instead_of_squashing_the_axes():
    def axes_width(names, draw):
        fig = draw({name: [0.3 + 0.1 * k, 0.5, 0.7] for k, name in enumerate(names)})
        fig.canvas.draw()
        width = fig.axes[0].get_window_extent().width / fig.dpi
        plt.close(fig)
        return width

    long = ["MosT (prior-adjusted, share bounds, warm-up 15 rounds)", "FedAvg + fine-tuning on each client"]
    for draw in (plots.curves, plots.profile):
        short = axes_width(["a", "b"], draw)
        assert axes_width(long, draw) >= 0.9 * short


def test_widening_for_the_legend_works_on_any_backends_canvas():
    from matplotlib.backends.backend_pdf import FigureCanvasPdf

    from most.plots import legend_outside, widen_for_legend

    fig, ax = plt.subplots(figsize=(4.0, 3.0))
    ax.plot([0, 1], [0, 1], label="a method with a long name")
    legend_outside(ax)
    FigureCanvasPdf(fig)  # a canvas without get_renderer()
    widen_for_legend(fig, ax)
    assert fig.get_size_inches()[0] > 4.0



@pytest.mark.parametrize("draw", [
    lambda v: plots.curves({"A": v}, log="no"),
    lambda v: plots.profile({"A": v}, percent="no"),
    lambda v: plots.profile({"A": v}, higher_is_better="false"),
    lambda v: plots.assignment_heatmap(torch.eye(3) / 3, sort="no"),
    lambda v: plots.grouped_bars({"A": {"x": 1.0}}, ["x"], percent="no"),
])
def test_a_string_for_an_on_off_setting_is_refused(draw):
    # "no" and "false" are true strings: taken as given they draw the opposite of what was meant
    with pytest.raises(TypeError, match="must be True or False"):
        draw([1.0, 2.0, 3.0])


def test_tensors_that_require_grad_are_drawn_as_their_values():
    v = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
    pts = torch.tensor([[0.2, 0.8], [0.7, 0.3]], requires_grad=True)
    for fig in (plots.per_objective_bars({"A": v}, ylabel="loss"), plots.pareto_fronts({"A": pts}),
                plots.hypervolume_areas({"A": pts}, reference=[1.1, 1.1])):
        plt.close(fig)


def test_hypervolume_areas_refuses_a_range_too_wide_to_draw_before_drawing():
    with pytest.raises(ValueError, match="too wide for float64 axes; rescale"):
        plots.hypervolume_areas({"A": [[1e300, -1e300]]}, reference=[1.7e308, 1.0])
    plt.close(plots.hypervolume_areas({"A": [[1e200, -1e200]]}, reference=[1e300, 1.0]))  # wide, but drawable
