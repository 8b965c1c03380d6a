"""EPO and MOO-SVGD baselines: known answers on quadratics, step properties, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import fsolve, nnls

import most
from most.baselines import EPO, MOOSVGD, EPOCombiner, PreferenceAssignment, SVGDCombiner
from most.baselines._epo import _non_uniformity, default_preferences, epo_coefficients
from most.baselines._svgd import median_bandwidth

A = torch.tensor([0.0, 0.0], dtype=torch.float64)
B = torch.tensor([4.0, 0.0], dtype=torch.float64)


def two_quadratics(init, scale: float = 1.0) -> most.Problem:
    """L_i = scale * ||theta - c_i||^2 with c = (A, B): the Pareto set is the segment [A, B]."""
    centres = torch.stack([A, B])
    return most.Problem.from_function(
        lambda t: scale * ((t - centres) ** 2).sum(-1), dim=2, n_objectives=2, init=init
    )


def segment_distance(params: torch.Tensor) -> torch.Tensor:
    """Distance of each row of ``params`` to the segment [A, B] (on the x-axis, x in [0, 4])."""
    x = params[:, 0].clamp(float(A[0]), float(B[0]))
    return torch.sqrt((params[:, 0] - x) ** 2 + params[:, 1] ** 2)


def hull_distance(point: torch.Tensor, vertices: torch.Tensor) -> float:
    V = vertices.double().numpy().T
    big = 1e4
    mu, _ = nnls(np.vstack([V, big * np.ones((1, V.shape[1]))]), np.concatenate([point.double().numpy(), [big]]))
    return float(np.linalg.norm(V @ mu - point.double().numpy()))


def preferences_of(result) -> torch.Tensor:
    """Model j's preference vector, read back from the fixed plan (column j = r_j / m)."""
    plan = result.assignment.T
    return plan / plan.sum(1, keepdim=True)


# ====================================================================== EPO, end to end
@pytest.mark.parametrize(
    "start",
    [
        pytest.param(lambda m, g: 3.0 * torch.randn(m, 2, generator=g, dtype=torch.float64), id="random"),
        # All models start beyond A, where both gradients point the same way: the paper's
        # rule for J = {} descends into A and keeps every model there (see _epo docstring).
        pytest.param(torch.tensor([-1.0, 0.5], dtype=torch.float64), id="beyond-a"),
    ],
)
def test_epo_puts_each_model_on_its_preference_ray_and_the_pareto_set(start):
    m = 5
    result = EPO(n_models=m, rounds=150, inner_steps=4, lr=0.01, seed=0).fit(two_quadratics(start))
    r = preferences_of(result)
    torch.testing.assert_close(r, default_preferences(2, m), atol=1e-12, rtol=0)
    # Pareto optimal: on the segment [A, B].
    assert segment_distance(result.params).max() < 1e-3
    # On the preference ray: r_1 l_1 = r_2 l_2 (EPO stops balancing at mu <= eps = 1e-4, ~3%).
    rl = r * result.losses.T
    ratio = rl[:, 0] / rl[:, 1]
    assert ((ratio - 1).abs() < 0.04).all(), f"r1 l1 / r2 l2 = {ratio.tolist()}"
    # ... hence at the analytic point: r_1 t^2 = r_2 (1 - t)^2 on theta = t * B.
    t = r[:, 1].sqrt() / (r[:, 0].sqrt() + r[:, 1].sqrt())
    torch.testing.assert_close(result.params[:, 0], 4.0 * t, atol=0.03, rtol=0)
    # Distinct, ordered like the preferences (more weight on L_2 -> closer to B).
    assert (result.params[:, 0].diff() > 0.25).all(), f"not distinct/ordered: {result.params[:, 0].tolist()}"


def test_epo_three_objectives_equalises_relative_losses_inside_the_triangle():
    centres = torch.tensor([[0.0, 0.0], [3.0, 0.0], [1.5, 1.5 * math.sqrt(3)]], dtype=torch.float64)
    prefs = torch.tensor([[0.4, 0.35, 0.25], [0.25, 0.4, 0.35]], dtype=torch.float64)
    problem = most.Problem.from_function(
        lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=3,
        init=lambda m, g: 3.0 * torch.randn(m, 2, generator=g, dtype=torch.float64),
    )
    result = EPO(n_models=2, rounds=150, inner_steps=4, lr=0.01, seed=1, preferences=prefs).fit(problem)
    rl = prefs * result.losses.T
    spread = rl / rl.mean(1, keepdim=True)
    assert ((spread - 1).abs() < 0.03).all(), f"r_i l_i / mean = {spread.tolist()}"
    for j in range(2):
        assert hull_distance(result.params[j], centres) < 1e-3  # Pareto set = the triangle
        # The exact point: r_1 l_1 = r_2 l_2 = r_3 l_3, solved directly.
        p, c = prefs[j].numpy(), centres.numpy()
        rel = lambda x: p * ((x - c) ** 2).sum(1)  # noqa: E731
        exact = fsolve(lambda x: [rel(x)[0] - rel(x)[1], rel(x)[1] - rel(x)[2]], c.mean(0))
        assert np.abs(rel(exact) / rel(exact).mean() - 1).max() < 1e-8
        np.testing.assert_allclose(result.params[j].numpy(), exact, atol=0.03)
    assert torch.dist(result.params[0], result.params[1]) > 0.2


# ====================================================================== EPO, one step
def random_instance(seed, n=3, d=5, m=4):
    g = torch.Generator().manual_seed(seed)
    jac = torch.randn(m, n, d, generator=g, dtype=torch.float64)
    losses = torch.rand(m, n, generator=g, dtype=torch.float64) * 4 + 0.1
    return jac, losses


@pytest.mark.parametrize("seed", range(5))
def test_epo_direction_on_the_ray_is_a_common_descent_direction(seed):
    jac, losses = random_instance(seed)
    r = (1 / losses) / (1 / losses).sum(1, keepdim=True)  # losses on the ray: mu = 0
    direction, beta = EPOCombiner()(jac, 7.0 * r, losses=losses)  # any positive scale of r
    inner = torch.einsum("mnd,md->mn", jac, direction)  # <g_i, d>: l_i changes by -lr * this
    assert (inner >= -1e-10).all(), inner
    assert (direction.norm(dim=1) > 1e-3).all()  # d > n: not Pareto stationary, so it moves
    torch.testing.assert_close(beta.sum(1), torch.ones(4, dtype=torch.float64))
    assert (beta >= 0).all()
    torch.testing.assert_close(direction, torch.einsum("mn,mnd->md", beta, jac))
    for j in range(4):  # the instance really is on the ray, so this was the descent program
        beta_j, mode = epo_coefficients(jac[j].numpy(), losses[j].numpy(), r[j].numpy())
        assert mode == "descent" and _non_uniformity(r[j].numpy(), losses[j].numpy())[1] < 1e-12


@pytest.mark.parametrize("seed", range(5))
def test_epo_balance_step_never_increases_the_worst_relative_loss(seed):
    jac, losses = random_instance(seed, n=4, d=3, m=1)
    r = torch.softmax(torch.randn(4, generator=torch.Generator().manual_seed(seed + 100), dtype=torch.float64), 0)
    G, l, rv = jac[0].numpy(), losses[0].numpy(), r.numpy()
    beta, mode = epo_coefficients(G, l, rv)
    assert mode in ("balance", "worst-descent")
    worst = np.argmax(rv * l)
    assert G[worst] @ (G.T @ beta) >= -1e-10  # the objective furthest above the ray does not rise


def test_epo_small_step_moves_towards_the_ray_on_quadratics():
    problem = two_quadratics(None)
    params = torch.tensor([[1.0, 0.5], [3.5, -0.5]], dtype=torch.float64)  # between A and B
    r = default_preferences(2, 2)
    losses, jac = problem.jacobian(params)
    direction, _ = EPOCombiner()(jac, r, losses=losses.T)
    after = problem.loss_matrix(params - 1e-3 * direction)
    mu_before = [_non_uniformity(r[j].numpy(), losses[:, j].numpy())[1] for j in range(2)]
    mu_after = [_non_uniformity(r[j].numpy(), after[:, j].numpy())[1] for j in range(2)]
    assert all(b < a for a, b in zip(mu_before, mu_after)), (mu_before, mu_after)


def test_epo_leaves_out_objectives_with_zero_preference():
    jac, losses = random_instance(0, n=3, d=4, m=2)
    w = torch.tensor([[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]], dtype=torch.float64)
    direction, beta = EPOCombiner()(jac, w, losses=losses)
    assert beta[0, 1] == 0 and beta[1, 0] == 0 and beta[1, 2] == 0
    torch.testing.assert_close(direction[1], jac[1, 1])  # a single objective: its gradient


# ====================================================================== MOO-SVGD
def svgd_start(m, g):
    return torch.tensor([2.0, 1.5], dtype=torch.float64) + 0.1 * torch.randn(m, 2, generator=g, dtype=torch.float64)


def test_svgd_spreads_particles_along_the_pareto_set_and_repulsion_is_what_spreads_them():
    # Steep objectives (scale 10) so that the MGDA pull onto the segment beats the repulsion
    # at the segment's ends; with scale 1 and alpha = 1 the particles settle ~0.3-0.75 off it.
    problem = two_quadratics(svgd_start, scale=10.0)
    spread = MOOSVGD(n_models=5, rounds=300, lr=0.1, alpha=0.25, seed=0).fit(problem)
    assert segment_distance(spread.params).max() < 0.05
    assert torch.pdist(spread.params).min() > 0.5, spread.params
    xs = spread.params[:, 0]
    assert xs.max() - xs.min() > 3.0  # covers most of the segment (length 4)

    collapsed = MOOSVGD(n_models=5, rounds=300, lr=0.1, alpha=0.0, seed=0).fit(problem)
    assert segment_distance(collapsed.params).max() < 1e-3  # plain (smoothed) MGDA: on the set
    assert torch.pdist(collapsed.params).max() < 0.5  # ... but where they started: together
    assert torch.pdist(collapsed.params).max() < torch.pdist(spread.params).max() / 5


def test_svgd_kernel_term_repels_and_single_particle_is_mgda():
    params = torch.tensor([[0.0, 0.0], [0.5, 0.0]], dtype=torch.float64)
    zero = torch.zeros(2, 2, 2, dtype=torch.float64)
    ones = torch.ones(2, 2, dtype=torch.float64)
    phi, _ = SVGDCombiner(alpha=1.0)(zero, ones, params=params)
    moved = params - 0.1 * phi
    assert torch.dist(moved[0], moved[1]) > torch.dist(params[0], params[1])  # repelled
    phi0, _ = SVGDCombiner(alpha=0.0)(zero, ones, params=params)
    assert torch.equal(phi0, torch.zeros_like(phi0))
    # One particle: K = 1 and no repulsion, so phi is the MGDA direction.
    jac = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [-1.0, 3.0]]], dtype=torch.float64)
    w = torch.ones(1, 3, dtype=torch.float64)
    phi1, lam = SVGDCombiner()(jac, w, params=torch.zeros(1, 2, dtype=torch.float64))
    mgda, lam_ref = most.MinNorm()(jac, w)
    torch.testing.assert_close(phi1, mgda)
    torch.testing.assert_close(lam, lam_ref)
    # Zero weights drop objectives, as in MinNorm (weights are rescaled to max 1 first).
    w2 = torch.tensor([[0.2, 0.0, 0.2]], dtype=torch.float64)
    phi2, lam2 = SVGDCombiner()(jac, w2, params=torch.zeros(1, 2, dtype=torch.float64))
    assert lam2[0, 1] == 0
    torch.testing.assert_close(phi2, most.MinNorm()(jac, w2 / 0.2)[0])


def test_median_bandwidth():
    line = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)  # distances 1, 1, 2: median 1
    assert median_bandwidth(line) == pytest.approx(1.0 / math.log(4))
    rand = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    assert median_bandwidth(rand) > 0
    assert median_bandwidth(torch.zeros(4, 3)) == 1.0  # coincident particles: fallback
    assert median_bandwidth(torch.zeros(1, 3)) == 1.0
    assert SVGDCombiner(bandwidth=2.5).kernel_bandwidth(rand) == 2.5
    assert SVGDCombiner().kernel_bandwidth(rand) == median_bandwidth(rand)


# ====================================================================== API and bad input
def test_default_preferences():
    r = default_preferences(2, 5)
    torch.testing.assert_close(r.sum(1), torch.ones(5, dtype=torch.float64))
    assert (r > 0).all() and (r[:, 1].diff() > 0).all()  # strictly inside, evenly turning
    phi = torch.atan2(r[:, 1], r[:, 0])
    torch.testing.assert_close(phi, (torch.arange(5, dtype=torch.float64) + 0.5) * math.pi / 10)
    r3 = default_preferences(4, 3, torch.Generator().manual_seed(0))
    assert r3.shape == (3, 4) and (r3 > 0).all()
    torch.testing.assert_close(r3.sum(1), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(r3, default_preferences(4, 3, torch.Generator().manual_seed(0)))


def test_preference_assignment_plan():
    assignment = PreferenceAssignment([[3.0, 1.0], [1.0, 1.0]])
    assignment.reset(2, 2, torch.Generator().manual_seed(0))
    plan = assignment(torch.ones(2, 2, dtype=torch.float64), 0, 1)
    torch.testing.assert_close(plan, torch.tensor([[0.375, 0.25], [0.125, 0.25]], dtype=torch.float64))
    weights = most.GammaWeights()(plan)  # n * Gamma^T = n r_j / m
    torch.testing.assert_close(weights / weights.sum(1, keepdim=True),
                               torch.tensor([[0.75, 0.25], [0.5, 0.5]], dtype=torch.float64))
    assert assignment == PreferenceAssignment(torch.tensor([[3.0, 1.0], [1.0, 1.0]]))
    assert assignment != PreferenceAssignment()
    assert "preferences=[[3.0, 1.0], [1.0, 1.0]]" in repr(assignment)


def test_dataclasses_repr_and_equality():
    prefs = torch.tensor([[0.2, 0.8], [0.6, 0.4]], dtype=torch.float64)
    epo = EPO(n_models=2, rounds=3, preferences=prefs)
    assert epo == EPO(n_models=2, rounds=3, preferences=[[0.2, 0.8], [0.6, 0.4]])
    assert epo != EPO(n_models=2, rounds=3)
    assert hash(epo) == hash(EPO(n_models=2, rounds=3, preferences=prefs.tolist()))
    assert repr(epo).startswith("EPO(n_models=2, rounds=3,") and "preferences=((0.2" in repr(epo)
    assignment, weighting, combiner = epo.components()
    assert isinstance(assignment, PreferenceAssignment) and isinstance(weighting, most.GammaWeights)
    assert combiner == EPOCombiner(1e-4)
    svgd = MOOSVGD(n_models=4, alpha=0.5, bandwidth=2.0)
    assert svgd == MOOSVGD(n_models=4, alpha=0.5, bandwidth=2.0) != MOOSVGD(n_models=4)
    assert "alpha=0.5" in repr(svgd) and "bandwidth=2.0" in repr(svgd)
    assert svgd.components()[2] == SVGDCombiner(bandwidth=2.0, alpha=0.5)
    assert repr(SVGDCombiner()) == "SVGDCombiner(bandwidth=None, alpha=1.0)"


@pytest.mark.parametrize(
    "prefs, match",
    [
        ([[0.5, -0.1], [0.5, 0.5]], r"non-negative: entry \[0, 1\]"),
        ([0.5, 0.5], r"shape \[m, n\]"),
        ([[0.5, 0.5]], "one row per model"),
        ([[0.0, 0.0], [0.5, 0.5]], "row 0 is all zeros"),
        ([[float("nan"), 1.0], [0.5, 0.5]], "NaN or inf"),
        ([[True, False], [0.5, 0.5]], "holds a bool"),
        (torch.ones(2, 2, dtype=torch.bool), "holds a bool"),
    ],
)
def test_bad_preferences_are_rejected(prefs, match):
    with pytest.raises(ValueError, match=match):
        EPO(n_models=2, preferences=prefs)


def test_bad_input_at_fit_and_in_combiners():
    problem = two_quadratics(None)
    with pytest.raises(ValueError, match=r"shape \[m, n\] = \[2, 2\]"):
        EPO(n_models=2, rounds=1, preferences=[[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]]).fit(problem)
    shifted = most.Problem.from_function(lambda t: ((t - A) ** 2).sum().reshape(1).repeat(2) - 100.0,
                                         dim=2, n_objectives=2)
    with pytest.raises(ValueError, match="At round 0.*non-negative losses"):
        EPO(n_models=2, rounds=1).fit(shifted)
    jac = torch.zeros(2, 2, 3)
    with pytest.raises(ValueError, match="needs the losses"):
        EPOCombiner()(jac, torch.ones(2, 2))
    with pytest.raises(ValueError, match="needs the particles"):
        SVGDCombiner()(jac, torch.ones(2, 2))
    for bad in (dict(alpha=-1.0), dict(bandwidth=0.0)):
        with pytest.raises(ValueError, match="must be a"):
            MOOSVGD(n_models=2, **bad)
    with pytest.raises(ValueError, match="eps"):
        EPO(n_models=2, eps=0.0)


def test_epo_takes_its_preferences_as_a_tensor_quietly_and_stores_them_as_tuples():
    """The preferences are stored as nested tuples before the base builds the components, so a
    tensor given by the user is not copied from a tensor (torch's copy-construct warning)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        method = EPO(n_models=2, preferences=torch.tensor([[0.5, 0.5], [0.25, 0.75]]))
    assert method.preferences == ((0.5, 0.5), (0.25, 0.75))
    assert method == EPO(n_models=2, preferences=[[0.5, 0.5], [0.25, 0.75]])
    with pytest.raises(ValueError, match="one row per model.*n_models = 3; got 2 rows"):
        EPO(n_models=3, preferences=[[0.5, 0.5], [0.25, 0.75]])
