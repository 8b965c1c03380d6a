"""ZDT problems (against pymoo), hypervolume, Tchebycheff MosT-E, update rules, zero-gradient rule."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import most
from most.metrics import best_hypervolume_2d, hypervolume, worst_fraction_mean
from most.problems import ZDT_REFERENCE_POINTS, zdt, zdt_front

pymoo_problems = pytest.importorskip("pymoo.problems", reason="pymoo is a test-only dependency (pip install -e .[dev])")


# ------------------------------------------------------------------ ZDT against pymoo
@pytest.mark.parametrize("name", ["zdt1", "zdt2", "zdt3"])
def test_zdt_values_match_pymoo(name):
    rng = np.random.default_rng(0)
    x = rng.random((20, 30))
    x[:3, 0] = [0.0, 1.0, 0.5]  # include the ends of the box
    expected = pymoo_problems.get_problem(name).evaluate(x)
    ours = zdt(name).loss_matrix(torch.as_tensor(x)).T.numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["zdt1", "zdt2", "zdt3"])
def test_zdt_front_matches_pymoo(name):
    ours = zdt_front(name)
    theirs = pymoo_problems.get_problem(name).pareto_front()
    d = np.linalg.norm(ours[:, None, :] - theirs[None, :, :], axis=-1)  # [ours, theirs]
    assert d.min(0).max() < 0.005  # every pymoo front point lies on our (denser) front
    spacing = np.linalg.norm(np.diff(theirs[np.argsort(theirs[:, 0])], axis=0), axis=1).max()
    assert d.min(1).max() < spacing  # and ours has no piece that pymoo's front lacks
    # our front is non-dominated
    dominated = ((ours[None, :, :] <= ours[:, None, :]).all(-1) & (ours[None, :, :] < ours[:, None, :]).any(-1)).any(1)
    assert not dominated.any()


def test_zdt_gradients_are_finite_on_the_whole_box():
    problem = zdt("zdt1")
    x = torch.rand(4, 30, dtype=torch.float64)
    x[0] = 0.0  # f1 = 0: sqrt(f1 / g) has an unbounded derivative there
    losses, jac = problem.jacobian(x)
    assert torch.isfinite(losses).all() and torch.isfinite(jac).all()


def test_zdt_rejects_unknown_names():
    with pytest.raises(ValueError, match="zdt1"):
        zdt("zdt7")


# ------------------------------------------------------------------ hypervolume
def test_hypervolume_pinned_and_outside_points_counted():
    hv = hypervolume(np.array([[0.0, 1.0], [0.5, 0.5], [2.0, 0.0]]), (1.0, 2.0))
    assert float(hv) == pytest.approx(1.0 * 1.0 + 0.5 * 0.5)  # the third point lies outside
    assert hv.outside == 1


def test_hypervolume_of_degenerate_set_warns_and_is_exact():
    with pytest.warns(UserWarning, match="degenerate"):
        hv = hypervolume(torch.tensor([[0.5, 0.5], [0.5, 0.5]]), (1.0, 1.0))
    assert float(hv) == pytest.approx(0.25)


def test_hypervolume_bad_input():
    with pytest.raises(ValueError, match="shape"):
        hypervolume(np.zeros((3, 3)), (1.0, 1.0))
    with pytest.raises(ValueError, match="NaN"):
        hypervolume(np.array([[np.nan, 0.0]]), (1.0, 1.0))


def test_best_hypervolume_matches_the_known_limits():
    # The physical limits of k points on the ZDT fronts for the paper's reference points.
    expected5 = {"zdt1": 5.900, "zdt2": 6.895, "zdt3": 6.420}
    for name, value in expected5.items():
        assert best_hypervolume_2d(zdt_front(name), ZDT_REFERENCE_POINTS[name], 5) == pytest.approx(value, abs=2e-3)
    # brute force on a coarse sample agrees with the dynamic programme
    import itertools

    front = zdt_front("zdt1", 41)
    ref = ZDT_REFERENCE_POINTS["zdt1"]
    brute = max(float(hypervolume(front[list(c)], ref)) for c in itertools.combinations(range(len(front)), 3))
    assert best_hypervolume_2d(front, ref, 3) == pytest.approx(brute, rel=1e-12)


def test_worst_fraction_mean():
    assert worst_fraction_mean([1, 2, 3, 4, 5], 0.4) == pytest.approx(4.5)
    assert worst_fraction_mean([0.9, 0.5, 0.7, 0.1], 0.25, larger_is_worse=False) == pytest.approx(0.1)


# ------------------------------------------------------------------ Tchebycheff MosT-E
def _two_quadratics():
    a, b = torch.tensor([0.0, 0.0]), torch.tensor([4.0, 0.0])
    return most.Problem.from_function(
        lambda t: torch.stack([((t - a) ** 2).sum(), ((t - b) ** 2).sum()]), dim=2, n_objectives=2)


def test_tchebycheff_objectives_values():
    problem = _two_quadratics()
    ext = most.TchebycheffExtension(n_extra=3, ideal=(1.0, 2.0), augment=0.1)
    extended = ext.apply(problem, torch.Generator().manual_seed(0))
    w = extended.metadata["extension_weights"]
    theta = torch.tensor([[1.0, 1.0]])
    base = problem.loss_matrix(theta).squeeze(1)  # (2, 10)
    shifted = w * (base - torch.tensor([1.0, 2.0]))
    expected = torch.cat([base, shifted.max(1).values + 0.1 * (base - torch.tensor([1.0, 2.0])).sum()])
    torch.testing.assert_close(extended.loss_matrix(theta).squeeze(1), expected)
    smooth = most.TchebycheffExtension(n_extra=3, smoothing=0.01).apply(problem, torch.Generator().manual_seed(0))
    hard = most.TchebycheffExtension(n_extra=3).apply(problem, torch.Generator().manual_seed(0))
    # the smooth max is within mu * log(n) above the max
    diff = smooth.loss_matrix(theta) - hard.loss_matrix(theta)
    assert (diff >= -1e-5).all() and (diff <= 0.01 * math.log(2) + 1e-5).all()


def test_tchebycheff_grid_rays_are_evenly_spread():
    w = most.TchebycheffExtension(n_extra=7, spread="grid").preference_weights(2, torch.Generator())
    angles = torch.atan2(w[:, 0], w[:, 1])  # the ray of w points along (1 / w1, 1 / w2) = (w2, w1) / (w1 w2)
    torch.testing.assert_close(angles, torch.arange(7, dtype=angles.dtype) * math.pi / 12, atol=1e-6, rtol=0)
    torch.testing.assert_close(w[[0, -1]], torch.tensor([[0.0, 1.0], [1.0, 0.0]]), atol=1e-7, rtol=0)
    with pytest.raises(ValueError, match="two objectives"):
        most.TchebycheffExtension(spread="grid").preference_weights(3, torch.Generator())


def test_tchebycheff_most_e_reaches_the_concave_zdt2_front():
    # A linear mixture is minimised only at the ends of a concave front; Tchebycheff
    # mixtures are not. Two seeds: near the 5-point hypervolume limit (6.895).
    import dataclasses

    problem = dataclasses.replace(zdt("zdt2"), init=lambda m, g: torch.rand(m, 30, generator=g, dtype=torch.float64))
    ref = problem.metadata["reference_point"]
    for seed in (0, 1):
        method = most.MosT(n_models=5, rounds=1000, lr=0.01, seed=seed, optimizer=most.optim.Adam(),
                           extension=most.TchebycheffExtension(n_extra=20, augment=0.05))
        F = problem.loss_matrix(method.fit(problem).params).T
        assert float(hypervolume(F, ref)) > 6.8  # the single point (0, 1) gives 6.650
        assert (F[:, 0] > 0.3).sum() >= 2, "solutions must spread into the concave part of the front"


def test_tchebycheff_bad_input():
    with pytest.raises(ValueError, match="ideal"):
        most.TchebycheffExtension(ideal=(0.0,)).apply(_two_quadratics(), torch.Generator())
    with pytest.raises(ValueError, match="smoothing"):
        most.TchebycheffExtension(smoothing=0.0)
    with pytest.raises(ValueError, match="spread"):
        most.TchebycheffExtension(spread="lattice")


# ------------------------------------------------------------------ update rules
def test_adam_matches_torch_optim_adam():
    g = torch.Generator().manual_seed(0)
    params = torch.randn(3, 4, generator=g, dtype=torch.float64)
    reference = params.clone().requires_grad_(True)
    opt = torch.optim.Adam([reference], lr=0.01)
    rule = most.optim.Adam()
    state = rule.init(params)
    for _ in range(5):
        direction = torch.randn(3, 4, generator=g, dtype=torch.float64)
        params, state = rule.step(params, direction, state, 0.01)
        reference.grad = direction.clone()
        opt.step()
    torch.testing.assert_close(params, reference.detach())


def test_sgd_is_algorithm_one_line_eight():
    params = torch.ones(2, 3)
    new, _ = most.optim.SGD().step(params, torch.full((2, 3), 2.0), None, 0.25)
    torch.testing.assert_close(new, torch.full((2, 3), 0.5))
    with pytest.raises(ValueError, match="betas"):
        most.optim.Adam(beta1=1.0)


# ------------------------------------------------------------------ the zero-gradient rule
def test_min_norm_ignores_objectives_with_zero_gradient():
    jac = torch.tensor([[[0.0, 0.0], [1.0, 2.0], [1.0, -1.0]]], dtype=torch.float64)  # objective 0 is stationary
    weights = torch.ones(1, 3, dtype=torch.float64)
    direction, lam = most.MinNorm()(jac, weights)
    expected = most.mgda.min_norm_direction(jac[0, 1:])
    torch.testing.assert_close(direction[0], expected)
    assert lam[0, 0] == 0 and direction.norm() > 0.1
    # all gradients zero: the model is stationary
    direction, _ = most.MinNorm()(torch.zeros(1, 2, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64))
    assert torch.equal(direction, torch.zeros(1, 2, dtype=torch.float64))


def test_mgda_on_a_box_does_not_stall_at_a_weakly_pareto_point():
    # f1 = x1 reaches its minimum on the wall x1 = 0 while g (the other coordinates) is large;
    # MGDA must keep decreasing f2 instead of stopping there.
    problem = zdt("zdt1", n_var=5)
    init = torch.tensor([[0.0, 0.9, 0.9, 0.9, 0.9]], dtype=torch.float64)
    problem = most.Problem.from_function(problem.fn, dim=5, n_objectives=2, bounds=(0.0, 1.0), init=init)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = most.MGDA(n_models=1, rounds=300, lr=0.05).fit(problem)
    assert float(result.params[0, 1:].max()) < 0.05  # g -> 1: on the Pareto set


def test_zero_gradient_rule_looks_at_the_gradient_not_the_weight():
    # A row with a tiny weight but a real gradient stays in the min-norm problem.
    jac = torch.tensor([[[1.0, 0.0], [-1.0, 0.1]]], dtype=torch.float64)
    weights = torch.tensor([[1.0, 1e-20]], dtype=torch.float64)
    _, lam = most.MinNorm()(jac, weights)
    assert lam[0, 1] > 0.5  # the short row dominates the min-norm point, as MGDA prescribes
