"""Tests of the min-norm (MGDA) solver: optimality against a QP solver, KKT, descent, batching."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from most import ConvergenceWarning
from most.mgda import MinNormResult, min_norm, min_norm_direction

F64 = torch.float64


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #


def qp_reference(G: torch.Tensor) -> tuple[np.ndarray, float]:
    """min λᵀGλ on the simplex by quadprog (an independent dual active-set QP solver).

    G is normalised by max G_ii and a tiny ridge (1e-12 trace) makes it positive
    definite; the returned objective is evaluated on the original G.
    """
    quadprog = pytest.importorskip("quadprog")
    Gn = G.detach().to(F64).numpy()
    n = Gn.shape[0]
    s = max(float(np.max(np.diag(Gn))), 1e-300)
    P = Gn / s
    P = 0.5 * (P + P.T) + (1e-12 * max(np.trace(P), 1.0)) * np.eye(n)
    C = np.hstack([np.ones((n, 1)), np.eye(n)])  # Cᵀx >= b; first column is the equality
    b = np.r_[1.0, np.zeros(n)]
    x = quadprog.solve_qp(P, np.zeros(n), C, b, 1)[0]
    x = np.clip(x, 0.0, None)
    x /= x.sum()
    return x, float(x @ Gn @ x)


def scale_of(G: torch.Tensor) -> float:
    return max(float(torch.diagonal(G.to(F64), dim1=-2, dim2=-1).max()), 1e-300)


def assert_kkt(G: torch.Tensor, lam: torch.Tensor, *, rtol: float = 1e-8) -> None:
    """λ on the simplex, (Gλ)_i ≥ λᵀGλ for all i, with equality on the support (relative to max G_ii)."""
    G = G.to(F64)
    lam = lam.to(F64)
    s = scale_of(G)
    assert (lam >= 0).all()
    assert abs(float(lam.sum()) - 1.0) <= 1e-9
    Gl = G @ lam
    f = float(lam @ Gl)
    assert (Gl >= f - rtol * s).all(), (Gl - f).min() / s
    support = lam > 1e-8
    assert ((Gl[support] - f).abs() <= rtol * s).all(), (Gl[support] - f).abs().max() / s


def random_jacobian(n: int, d: int, seed: int, *, row_scales=None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    J = torch.randn(n, d, generator=g, dtype=F64)
    if row_scales is not None:
        J = J * torch.as_tensor(row_scales, dtype=F64)[:, None]
    return J


def gram_cases() -> dict[str, torch.Tensor]:
    """Jacobians covering the regimes the solver must handle."""
    g = torch.Generator().manual_seed(1234)
    cases: dict[str, torch.Tensor] = {}
    cases["full_rank"] = torch.randn(6, 10, generator=g, dtype=F64)
    # Shared component: the solution lies in the interior of a face, not at a vertex.
    cases["full_rank_shifted"] = torch.randn(8, 12, generator=g, dtype=F64) + 2.0
    cases["rank_deficient_d_lt_n"] = torch.randn(10, 3, generator=g, dtype=F64) + 0.5
    cases["origin_in_hull"] = torch.randn(20, 5, generator=g, dtype=F64)
    base = torch.randn(3, 6, generator=g, dtype=F64) + 1.0
    cases["duplicate_rows"] = torch.cat([base, base[:2], base[1:2]])
    v = torch.randn(1, 7, generator=g, dtype=F64)
    cases["g_and_minus_g"] = torch.cat([v, -v, torch.randn(2, 7, generator=g, dtype=F64)])
    cases["mixed_scales"] = torch.randn(7, 5, generator=g, dtype=F64) * torch.logspace(-4, 4, 7, dtype=F64)[:, None]
    cases["tiny_1e-10"] = (torch.randn(6, 4, generator=g, dtype=F64) + 1.0) * 1e-10
    cases["huge_1e10"] = (torch.randn(6, 4, generator=g, dtype=F64) + 1.0) * 1e10
    cases["n40_d15"] = torch.randn(40, 15, generator=g, dtype=F64) + 0.3
    return cases


CASES = gram_cases()


# --------------------------------------------------------------------------- #
# pinned values and analytic cases
# --------------------------------------------------------------------------- #


def test_pinned_orthogonal_unit_gradients():
    J = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=F64)
    r = min_norm(J @ J.T)
    assert isinstance(r, MinNormResult)
    torch.testing.assert_close(r.weights, torch.tensor([0.5, 0.5], dtype=F64), atol=1e-12, rtol=0)
    assert float(r.norm_sq) == pytest.approx(0.5, abs=1e-12)
    assert r.converged
    u = min_norm_direction(J)
    torch.testing.assert_close(u, torch.tensor([0.5, 0.5], dtype=F64), atol=1e-12, rtol=0)


def test_pinned_three_gradients_one_inactive():
    # hull of (1,0), (0,1), (1,1): min-norm point (1/2, 1/2), the third gradient gets weight 0.
    J = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=F64)
    r = min_norm(J @ J.T)
    torch.testing.assert_close(r.weights, torch.tensor([0.5, 0.5, 0.0], dtype=F64), atol=1e-10, rtol=0)
    assert float(r.norm_sq) == pytest.approx(0.5, abs=1e-12)
    torch.testing.assert_close(min_norm_direction(J), torch.tensor([0.5, 0.5], dtype=F64), atol=1e-10, rtol=0)


def test_pinned_vertex_solution():
    # g1 = (1, 0), g2 = (1, 1): the segment's closest point to 0 is g1 itself.
    J = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=F64)
    r = min_norm(J @ J.T)
    torch.testing.assert_close(r.weights, torch.tensor([1.0, 0.0], dtype=F64), atol=1e-12, rtol=0)
    torch.testing.assert_close(min_norm_direction(J), torch.tensor([1.0, 0.0], dtype=F64), atol=1e-12, rtol=0)


def test_n_equals_one():
    G = torch.tensor([[3.5]], dtype=F64)
    r = min_norm(G)
    assert r.weights.shape == (1,)
    assert float(r.weights[0]) == 1.0
    assert float(r.norm_sq) == pytest.approx(3.5)
    assert r.n_iter == 0 and r.converged
    J = torch.tensor([[2.0, -1.0, 0.5]], dtype=F64)
    torch.testing.assert_close(min_norm_direction(J), J[0])
    torch.testing.assert_close(min_norm_direction(J, torch.tensor([0.25], dtype=F64)), 0.25 * J[0])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("d", [1, 2, 5])
def test_n_equals_two_analytic(seed, d):
    g = torch.Generator().manual_seed(seed)
    scale = 10.0 ** (seed - 4)
    g1, g2 = torch.randn(2, d, generator=g, dtype=F64) * scale
    if seed % 3 == 0:
        g2 = g2 + 3 * g1  # make the vertex solution likely
    a = float(torch.clamp((g2 - g1) @ g2 / ((g1 - g2) @ (g1 - g2)), 0.0, 1.0))
    J = torch.stack([g1, g2])
    G = J @ J.T
    r = min_norm(G)
    expected = torch.tensor([a, 1 - a], dtype=F64)
    f_exp = float(expected @ G @ expected)
    s = scale_of(G)
    assert abs(float(r.norm_sq) - f_exp) <= 1e-12 * s
    if d >= 2:  # unique λ unless g1 == g2 (not for continuous random data)
        torch.testing.assert_close(r.weights, expected, atol=1e-7, rtol=0)
    torch.testing.assert_close(min_norm_direction(J), expected @ J, atol=1e-7 * s**0.5, rtol=0)


def solve_against_qp(G):
    """Solves with min_norm and quadprog; checks convergence and that ours is never worse."""
    r = min_norm(G)
    assert r.converged
    s = scale_of(G)
    _, f_qp = qp_reference(G)
    f = float(r.norm_sq)
    assert f <= f_qp + 1e-10 * s
    return r, f, f_qp, s


# --------------------------------------------------------------------------- #
# optimality: QP solver and KKT
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_qp_and_kkt(name):
    J = CASES[name]
    G = J @ J.T
    r, f, f_qp, s = solve_against_qp(G)
    # Never worse than the QP solution, and equal to it within 1e-9 of the problem's scale.
    assert abs(f - f_qp) <= 1e-9 * s
    assert f == pytest.approx(float(r.weights @ G @ r.weights), abs=1e-12 * s)
    assert_kkt(G, r.weights)


def test_origin_in_hull_gives_zero_direction():
    g = torch.tensor([[0.3, -2.0, 1.0]], dtype=F64)
    J = torch.cat([g, -g])
    r = min_norm(J @ J.T)
    torch.testing.assert_close(r.weights, torch.tensor([0.5, 0.5], dtype=F64), atol=1e-10, rtol=0)
    assert float(r.norm_sq) <= 1e-12
    assert float(min_norm_direction(J).norm()) <= 1e-8
    # Many random gradients in low dimension: the hull contains the origin.
    J = CASES["origin_in_hull"]
    r = min_norm(J @ J.T)
    assert float(r.norm_sq) <= 1e-10 * scale_of(J @ J.T)


def test_duplicate_rows_same_objective():
    base = CASES["duplicate_rows"][:3]
    J = CASES["duplicate_rows"]
    r_base = min_norm(base @ base.T)
    r_dup = min_norm(J @ J.T)
    assert float(r_dup.norm_sq) == pytest.approx(float(r_base.norm_sq), abs=1e-10 * scale_of(base @ base.T))
    torch.testing.assert_close(min_norm_direction(J), min_norm_direction(base), atol=1e-7, rtol=0)


def test_scale_invariance_huge_and_tiny():
    J = CASES["full_rank_shifted"]
    G = J @ J.T
    r = min_norm(G)
    for c in (1e-20, 1e-10, 1e10, 1e20):
        rc = min_norm(G * c)
        assert rc.converged
        torch.testing.assert_close(rc.weights, r.weights, atol=1e-8, rtol=0)
        assert float(rc.norm_sq) == pytest.approx(c * float(r.norm_sq), rel=1e-8)


def test_tiny_negative_eigenvalues_are_tolerated():
    J = random_jacobian(12, 4, seed=5) + 1.0  # rank 4 < 12
    G = J @ J.T
    g = torch.Generator().manual_seed(0)
    N = torch.randn(12, 12, generator=g, dtype=F64) * 1e-13 * scale_of(G)
    Gp = G + 0.5 * (N + N.T)
    assert float(torch.linalg.eigvalsh(Gp).min()) < 0
    r = min_norm(Gp)
    assert r.converged
    _, f_qp = qp_reference(G)
    assert abs(float(r.norm_sq) - f_qp) <= 1e-9 * scale_of(G)


def test_float32_gram_with_roundoff_negative_eigenvalues_converges():
    """A float32 Gramian of rank-deficient gradients is indefinite at ~1e-7, far above tol."""
    found = 0
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        J = torch.randn(12, 3, generator=g) * 10.0 ** (seed % 7 - 3)
        G32 = J @ J.T
        G = G32.double()
        if float(torch.linalg.eigvalsh(0.5 * (G + G.T)).min()) > -1e-9 * scale_of(G):
            continue
        found += 1
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            r = min_norm(G)  # float64 copy of the float32 Gramian: still repaired
            r32 = min_norm(G32)
        assert r.converged and r32.converged and r32.weights.dtype == torch.float32
        G_exact = J.double() @ J.double().T
        _, f_qp = qp_reference(G_exact)
        for lam in (r.weights, r32.weights.double()):
            assert float(lam @ G_exact @ lam) - f_qp <= 1e-6 * scale_of(G_exact)
            assert abs(float(lam.sum()) - 1.0) <= 1e-6 and (lam >= 0).all()
    assert found >= 5  # the regime is actually exercised


def test_grossly_indefinite_gram_is_rejected():
    with pytest.raises(ValueError, match="positive semi-definite"):
        min_norm(-torch.eye(3, dtype=F64))
    with pytest.raises(ValueError, match="positive semi-definite"):
        min_norm(torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=F64))


def test_genuinely_iterates():
    """Regression test against solvers that stop after a single Frank-Wolfe step (on a problem
    larger than those the uniform start plus a face correction often solves outright)."""
    J = CASES["n40_d15"]
    G = J @ J.T
    _, f_qp = qp_reference(G)
    s = scale_of(G)
    with pytest.warns(ConvergenceWarning):
        one = min_norm(G, max_iter=1)
    assert float(one.norm_sq) - f_qp > 1e-5 * s  # one step is far from optimal here
    r = min_norm(G)
    assert r.n_iter > 1
    assert abs(float(r.norm_sq) - f_qp) <= 1e-9 * s
    assert_kkt(G, r.weights)


def test_small_problems_start_uniform_and_solve_by_face_correction():
    # Full-rank gradients with a common component: the optimum uses every vertex, and the
    # uniform start's face correction lands on it without a Frank-Wolfe iteration.
    J = CASES["full_rank_shifted"]
    G = J @ J.T
    _, f_qp = qp_reference(G)
    r = min_norm(G)
    assert r.n_iter <= 1
    assert abs(float(r.norm_sq) - f_qp) <= 1e-9 * scale_of(G)
    assert_kkt(G, r.weights)


def test_max_iter_warns_and_reports_not_converged():
    J = CASES["n40_d15"]
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        r = min_norm(J @ J.T, max_iter=1)
    assert r.converged is False
    assert r.n_iter == 1
    # still a valid point of the simplex
    assert (r.weights >= 0).all() and float(r.weights.sum()) == pytest.approx(1.0, abs=1e-12)


def test_converged_run_does_not_warn():
    J = CASES["n40_d15"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        r = min_norm(J @ J.T)
    assert r.converged and 1 < r.n_iter < 1000


def test_looser_tol_stops_earlier_but_stays_near_optimal():
    J = CASES["n40_d15"]
    G = J @ J.T
    _, f_qp = qp_reference(G)
    r = min_norm(G, tol=1e-3)
    r_tight = min_norm(G)
    assert r.n_iter <= r_tight.n_iter
    # the FW gap bounds the suboptimality: f - f* <= tol * max G_ii / 2
    assert float(r.norm_sq) - f_qp <= 0.5e-3 * scale_of(G) + 1e-12 * scale_of(G)


# --------------------------------------------------------------------------- #
# the MGDA direction
# --------------------------------------------------------------------------- #


def assert_common_descent(J: torch.Tensor, w: torch.Tensor, u: torch.Tensor) -> None:
    """For every row with w_i > 0: w_i <J_i, -u> <= -||u||^2 (the KKT condition), up to tolerance."""
    wJ = w[:, None] * J
    s = max(float((wJ * wJ).sum(-1).max()), 1e-300)
    d = -u
    dd = float(d @ d)
    slopes = wJ @ d
    kept = w > 0
    assert (slopes[kept] <= -0.5 * dd + 1e-8 * s).all()
    assert (slopes[kept] <= -dd + 1e-8 * s).all()


@pytest.mark.parametrize("seed", range(6))
def test_descent_lemma(seed):
    n, d = 3 + seed, 2 + (seed * 3) % 7
    J = random_jacobian(n, d, seed) + (seed % 2)
    g = torch.Generator().manual_seed(100 + seed)
    w = torch.rand(n, generator=g, dtype=F64) * 3
    w[seed % n] = 0.0
    u = min_norm_direction(J, w)
    assert u.shape == (d,)
    assert_common_descent(J, w, u)
    # u is Jᵀ(λ ⊙ w) for the min-norm λ of the weighted Gramian
    wJ = w[:, None] * J
    r = min_norm(wJ @ wJ.T, mask=w > 0)
    torch.testing.assert_close(u, r.weights @ wJ, atol=1e-10, rtol=0)
    assert float(u @ u) == pytest.approx(float(r.norm_sq), abs=1e-10 * scale_of(wJ @ wJ.T))


def test_zero_weight_row_is_dropped():
    J = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-5.0, -5.0]], dtype=F64)
    # With the third row in play the origin is in the hull: no common descent direction.
    assert float(min_norm_direction(J).norm()) <= 1e-8
    # With weight 0 it is dropped (not kept as a zero vector, which would also give u = 0).
    u = min_norm_direction(J, torch.tensor([1.0, 1.0, 0.0], dtype=F64))
    torch.testing.assert_close(u, torch.tensor([0.5, 0.5], dtype=F64), atol=1e-12, rtol=0)
    u2 = min_norm_direction(J[:2])
    torch.testing.assert_close(u, u2, atol=1e-12, rtol=0)


def test_weights_rescale_rows():
    J = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=F64)
    u = min_norm_direction(J, torch.tensor([2.0, 1.0], dtype=F64))
    # rows (2, 0) and (0, 1): λ = (1/5, 4/5), u = (2/5, 4/5)
    torch.testing.assert_close(u, torch.tensor([0.4, 0.8], dtype=F64), atol=1e-12, rtol=0)


def test_all_zero_weights_give_zero_direction():
    J = random_jacobian(4, 3, seed=0)
    u = min_norm_direction(J, torch.zeros(4, dtype=F64))
    assert u.shape == (3,) and torch.equal(u, torch.zeros(3, dtype=F64))


def test_permutation_invariance():
    J = random_jacobian(5, 8, seed=11) + 0.7  # n <= d: G positive definite, λ unique
    G = J @ J.T
    r = min_norm(G)
    u = min_norm_direction(J)
    for seed in range(3):
        p = torch.randperm(5, generator=torch.Generator().manual_seed(seed))
        rp = min_norm(G[p][:, p])
        torch.testing.assert_close(rp.weights, r.weights[p], atol=1e-7, rtol=0)
        torch.testing.assert_close(min_norm_direction(J[p]), u, atol=1e-9, rtol=0)


# --------------------------------------------------------------------------- #
# masks and batching
# --------------------------------------------------------------------------- #


def test_mask_excludes_objectives():
    J = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], dtype=F64)
    G = J @ J.T
    r = min_norm(G, mask=torch.tensor([True, True, False]))
    assert float(r.weights[2]) == 0.0
    torch.testing.assert_close(r.weights, torch.tensor([0.5, 0.5, 0.0], dtype=F64), atol=1e-12, rtol=0)
    # a masked objective is never selected, even when it alone would be optimal
    J2 = torch.tensor([[1.0, 1.0], [2.0, 2.0], [0.0, 0.0]], dtype=F64)
    r2 = min_norm(J2 @ J2.T, mask=torch.tensor([False, True, False]))
    torch.testing.assert_close(r2.weights, torch.tensor([0.0, 1.0, 0.0], dtype=F64))


def test_all_false_mask():
    G = torch.eye(3, dtype=F64)
    r = min_norm(G, mask=torch.zeros(3, dtype=torch.bool))
    assert torch.equal(r.weights, torch.zeros(3, dtype=F64))
    assert float(r.norm_sq) == 0.0
    assert r.converged


def test_batched_matches_per_problem():
    g = torch.Generator().manual_seed(7)
    B, n, d = 4, 9, 5
    J = torch.randn(B, n, d, generator=g, dtype=F64) + torch.tensor([0.0, 1.0, 3.0, -0.5], dtype=F64)[:, None, None]
    J[2] *= 1e6  # different scales within the batch
    G = J @ J.mT
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[1, :4] = False
    mask[2, ::2] = False
    mask[3, 5] = False
    rb = min_norm(G, mask=mask)
    assert rb.weights.shape == (B, n) and rb.norm_sq.shape == (B,)
    iters = []
    for b in range(B):
        r = min_norm(G[b], mask=mask[b])
        iters.append(r.n_iter)
        s = scale_of(G[b])
        assert float(rb.norm_sq[b]) == pytest.approx(float(r.norm_sq), abs=1e-10 * s)
        torch.testing.assert_close(rb.weights[b], r.weights, atol=1e-6, rtol=0)
        assert torch.all(rb.weights[b][~mask[b]] == 0)
        assert_kkt(G[b][mask[b]][:, mask[b]], rb.weights[b][mask[b]])
    assert rb.n_iter == max(iters)
    assert rb.converged


def test_batched_with_shared_mask_and_empty_problem():
    J = torch.randn(3, 4, 6, generator=torch.Generator().manual_seed(3), dtype=F64)
    G = J @ J.mT
    shared = torch.tensor([True, False, True, True])
    rb = min_norm(G, mask=shared)
    for b in range(3):
        torch.testing.assert_close(rb.weights[b], min_norm(G[b], mask=shared).weights, atol=1e-6, rtol=0)
    per = torch.ones(3, 4, dtype=torch.bool)
    per[1] = False
    rb = min_norm(G, mask=per)
    assert torch.equal(rb.weights[1], torch.zeros(4, dtype=F64)) and float(rb.norm_sq[1]) == 0.0
    torch.testing.assert_close(rb.weights[0], min_norm(G[0]).weights, atol=1e-6, rtol=0)


def test_batched_direction_matches_per_problem():
    g = torch.Generator().manual_seed(9)
    B, n, d = 4, 6, 3
    J = torch.randn(B, n, d, generator=g, dtype=F64) + 1.0
    w = torch.rand(B, n, generator=g, dtype=F64)
    w[0, 0] = 0.0
    w[3] = 0.0
    u = min_norm_direction(J, w)
    assert u.shape == (B, d)
    for b in range(B):
        torch.testing.assert_close(u[b], min_norm_direction(J[b], w[b]), atol=1e-9, rtol=0)
    assert torch.equal(u[3], torch.zeros(d, dtype=F64))
    # shared [n] weights broadcast over the batch
    ws = torch.rand(n, generator=g, dtype=F64)
    u = min_norm_direction(J, ws)
    for b in range(B):
        torch.testing.assert_close(u[b], min_norm_direction(J[b], ws), atol=1e-9, rtol=0)


# --------------------------------------------------------------------------- #
# dtypes and result type
# --------------------------------------------------------------------------- #


def test_float32_in_float32_out():
    J = CASES["full_rank_shifted"]
    G64 = J @ J.T
    r32 = min_norm(G64.float())
    assert r32.weights.dtype == torch.float32 and r32.norm_sq.dtype == torch.float32
    r64 = min_norm(G64)
    assert r64.weights.dtype == torch.float64
    assert float(r32.norm_sq) == pytest.approx(float(r64.norm_sq), rel=1e-4)
    u32 = min_norm_direction(J.float(), torch.ones(8))
    assert u32.dtype == torch.float32 and u32.shape == (12,)
    torch.testing.assert_close(u32.double(), min_norm_direction(J), atol=1e-4, rtol=1e-4)


def test_array_like_inputs_and_requires_grad():
    r = min_norm([[1.0, 0.0], [0.0, 1.0]])
    assert r.weights.dtype == torch.get_default_dtype()
    J = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    u = min_norm_direction(J)
    assert not u.requires_grad
    torch.testing.assert_close(u, torch.tensor([0.5, 0.5]))


def test_outputs_are_ordinary_tensors_usable_in_autograd_and_in_place():
    # The solve runs in inference mode; its outputs must not be inference tensors, or
    # weighting a differentiable loss by them, or updating them in place, would fail.
    G = torch.tensor([[2.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 3.0]], dtype=F64)
    r = min_norm(G)
    rb = min_norm(G.expand(2, 3, 3))
    u = min_norm_direction(torch.eye(3, dtype=F64))
    for t in (r.weights, r.norm_sq, rb.weights, u):
        assert not t.is_inference()
    losses = torch.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)
    (r.weights * losses).sum().backward()
    torch.testing.assert_close(losses.grad, r.weights)
    u.mul_(2.0)
    rb.weights.add_(1.0)


def test_result_is_frozen():
    r = min_norm(torch.eye(2, dtype=F64))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.n_iter = 3  # type: ignore[misc]
    assert isinstance(r.n_iter, int) and isinstance(r.converged, bool)


# --------------------------------------------------------------------------- #
# input validation
# --------------------------------------------------------------------------- #


def test_bad_gram():
    G = torch.eye(3, dtype=F64)
    bad = G.clone()
    bad[0, 1] = float("nan")
    with pytest.raises(ValueError, match="gram.*non-finite"):
        min_norm(bad)
    bad[0, 1] = float("inf")
    with pytest.raises(ValueError, match="gram.*non-finite"):
        min_norm(bad)
    with pytest.raises(ValueError, match="gram.*square"):
        min_norm(torch.ones(3, 2, dtype=F64))
    with pytest.raises(ValueError, match="gram.*shape"):
        min_norm(torch.ones(3, dtype=F64))
    with pytest.raises(ValueError, match="gram.*shape"):
        min_norm(torch.ones(2, 2, 3, 3, dtype=F64))
    with pytest.raises(ValueError, match="at least one objective"):
        min_norm(torch.ones(0, 0, dtype=F64))
    asym = torch.tensor([[1.0, 0.5], [0.0, 1.0]], dtype=F64)
    with pytest.raises(ValueError, match="symmetric"):
        min_norm(asym)
    with pytest.raises(ValueError, match="symmetric"):
        min_norm(torch.stack([G[:2, :2], asym]))
    with pytest.raises(ValueError, match="max_iter"):
        min_norm(G, max_iter=0)
    with pytest.raises(ValueError, match="tol"):
        min_norm(G, tol=-1.0)


def test_bad_mask():
    G = torch.eye(3, dtype=F64)
    with pytest.raises(ValueError, match=r"mask.*\[3\]"):
        min_norm(G, mask=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        min_norm(G, mask=torch.ones(1, 3, dtype=torch.bool))  # [B, n] needs a batched gram
    with pytest.raises(ValueError, match=r"mask.*\[2, 3\]"):
        min_norm(torch.stack([G, G]), mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask.*boolean"):
        min_norm(G, mask=torch.ones(3))


def test_bad_jacobian_and_weights():
    J = torch.ones(3, 2, dtype=F64)
    bad = J.clone()
    bad[1, 0] = float("nan")
    with pytest.raises(ValueError, match="jacobian.*non-finite"):
        min_norm_direction(bad)
    with pytest.raises(ValueError, match=r"jacobian.*\(3,\)"):
        min_norm_direction(torch.ones(3, dtype=F64))
    with pytest.raises(ValueError, match="jacobian"):
        min_norm_direction(torch.ones(0, 2, dtype=F64))
    with pytest.raises(ValueError, match="non-negative"):
        min_norm_direction(J, torch.tensor([1.0, -0.5, 1.0], dtype=F64))
    with pytest.raises(ValueError, match=r"weights.*\[3\].*\(3, 2\).*\(2,\)"):
        min_norm_direction(J, torch.ones(2, dtype=F64))
    with pytest.raises(ValueError, match=r"weights.*\(2, 3\)"):
        min_norm_direction(J, torch.ones(2, 3, dtype=F64))  # [B, n] needs a batched jacobian
    with pytest.raises(ValueError, match=r"weights.*\[2, 3\]"):
        min_norm_direction(torch.ones(2, 3, 2, dtype=F64), torch.ones(4, 3, dtype=F64))
    with pytest.raises(ValueError, match="weights.*non-finite"):
        min_norm_direction(J, torch.tensor([1.0, float("nan"), 1.0], dtype=F64))


# --------------------------------------------------------------------------- #
# property tests
# --------------------------------------------------------------------------- #


@st.composite
def jacobians(draw):
    n = draw(st.integers(1, 12))
    d = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    log_scale = draw(st.floats(-6.0, 6.0))
    spread = draw(st.floats(0.0, 3.0))  # per-row scales within 10^±spread
    shift = draw(st.floats(-2.0, 2.0))
    g = torch.Generator().manual_seed(seed)
    J = torch.randn(n, d, generator=g, dtype=F64) + shift
    row = 10.0 ** (log_scale + spread * (2 * torch.rand(n, generator=g, dtype=F64) - 1))
    return J * row[:, None]


@settings(max_examples=30, deadline=None)
@given(jacobians())
def test_property_optimal_and_kkt(J):
    G = J @ J.T
    r, f, f_qp, s = solve_against_qp(G)
    assert abs(f - f_qp) <= 1e-8 * s
    assert_kkt(G, r.weights)


@settings(max_examples=30, deadline=None)
@given(jacobians(), st.integers(0, 2**31 - 1))
def test_property_common_descent(J, seed):
    n = J.shape[0]
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(n, generator=g, dtype=F64) * (torch.rand(n, generator=g) > 0.25)
    u = min_norm_direction(J, w)
    assert torch.isfinite(u).all()
    if (w > 0).any():
        assert_common_descent(J, w, u)
    else:
        assert torch.equal(u, torch.zeros_like(u))


def test_one_allowed_objective_per_problem_returns_that_vertex_without_iterating():
    J = torch.randn(3, 4, 6, generator=torch.Generator().manual_seed(0), dtype=F64)
    G = J @ J.mT
    mask = torch.tensor([[False, True, False, False], [False, False, False, False], [True, False, False, False]])
    r = min_norm(G, mask=mask)
    torch.testing.assert_close(r.weights, mask.to(F64))
    torch.testing.assert_close(r.norm_sq, torch.stack([G[0, 1, 1], torch.zeros((), dtype=F64), G[2, 0, 0]]))
    assert r.converged and r.n_iter == 0


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("offset", [0.3, 3.0])  # origin inside the hull / a common descent direction
@pytest.mark.parametrize("solver", ["nnls", "working sets", "wrong nnls"])
def test_many_rows_in_few_coordinates_are_solved_without_the_gramian_to_the_same_point_and_kkt(
        seed, offset, solver, monkeypatch):
    import scipy.optimize

    from most import mgda
    from most.mgda import _direction, _nnls

    if solver == "working sets":  # what answers when NNLS stops
        def stops(*args, **kwargs):
            raise RuntimeError("too many iterations")

        monkeypatch.setattr(scipy.optimize, "nnls", stops)
    fallbacks = []
    if solver == "wrong nnls":  # an answer off the optimum: the check on every row hands over to the fallback
        exact = scipy.optimize.nnls

        def off(*args, **kwargs):
            mu, res = exact(*args, **kwargs)
            mu = mu.copy()
            mu[mu.argmin()] += mu.sum()  # weight on a row the optimum leaves out
            return mu, res

        monkeypatch.setattr(scipy.optimize, "nnls", off)
        fallback = _nnls.working_set_min_norm
        monkeypatch.setattr(_direction, "working_set_min_norm",  # where combine_min_norm's host path reads it
                            lambda *a, **k: fallbacks.append(1) or fallback(*a, **k))

    g = torch.Generator().manual_seed(seed)
    B, k, d = 3, 600, 6
    J = torch.randn(B, k, d, generator=g, dtype=torch.float64) + offset * torch.randn(B, 1, d, generator=g,
                                                                                       dtype=torch.float64)
    w = torch.rand(B, k, generator=g, dtype=torch.float64)
    w[:, ::5] = 0
    w[2] = 0  # a problem without rows
    rows = w[..., None] * J
    assert _nnls.low_rank(rows)
    u, lam = mgda.combine_min_norm(J, w)
    gram = rows @ rows.transpose(1, 2)
    full = min_norm(gram, mask=w > 0).weights  # the full-Gramian solver
    torch.testing.assert_close(u[:2], torch.einsum("bk,bkd->bd", full * w, J)[:2], atol=1e-9, rtol=0)
    assert bool((u[2] == 0).all()) and bool((lam[2] == 0).all())
    # KKT on every row: <g_i, u> >= |u|^2 up to the solver's tolerance, equality where lambda > 0
    scores, norm = torch.einsum("bkd,bd->bk", rows, u), (u * u).sum(-1, keepdim=True)
    slack = 1e-10 * (rows * rows).sum(-1).amax(-1, keepdim=True)
    assert bool((scores[w > 0] >= (norm - slack).expand_as(scores)[w > 0]).all())
    on = lam > 0
    assert bool(((scores - norm).abs()[on] <= slack.expand_as(scores)[on] + 1e-12).all())
    assert bool((lam[:2].sum(-1) - 1).abs().max() < 1e-12)
    if offset > 1:  # a nonzero min-norm point lies on a face of at most d + 1 rows (Caratheodory)
        assert int(on[0].sum()) <= d + 1
    assert len(fallbacks) == (solver == "wrong nnls")


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("offset", [0.3, 3.0])  # origin inside the hull / a common descent direction
@pytest.mark.parametrize("d", [60, 150])  # more coordinates than a quarter of the rows, fewer than them
def test_many_rows_in_fewer_coordinates_are_solved_by_nnls_to_the_same_point_and_kkt(seed, offset, d):
    from most import mgda
    from most.mgda import _nnls

    g = torch.Generator().manual_seed(seed)
    B, k = 3, 200
    J = torch.randn(B, k, d, generator=g, dtype=F64) + offset * torch.randn(B, 1, d, generator=g, dtype=F64)
    w = torch.rand(B, k, generator=g, dtype=F64)
    w[:, ::7] = 0
    w[2, 150:] = 0  # at d = 150, fewer live rows than coordinates in this problem
    rows = w[..., None] * J
    assert _nnls.low_rank(rows)
    u, lam = mgda.combine_min_norm(J, w)
    full = min_norm(rows @ rows.transpose(1, 2), mask=w > 0).weights  # Frank-Wolfe on the Gramian
    torch.testing.assert_close(u, torch.einsum("bk,bkd->bd", full * w, J), atol=1e-7, rtol=1e-7)
    scores, norm = torch.einsum("bkd,bd->bk", rows, u), (u * u).sum(-1, keepdim=True)
    slack = 1e-10 * (rows * rows).sum(-1).amax(-1, keepdim=True)
    assert bool((scores[w > 0] >= (norm - slack).expand_as(scores)[w > 0]).all())
    on = lam > 0
    assert bool(((scores - norm).abs()[on] <= slack.expand_as(scores)[on] + 1e-12).all())
    assert bool((lam.sum(-1) - 1).abs().max() < 1e-12) and not bool(lam[w == 0].any())


def test_the_power_of_two_rescaling_is_ldexp_bit_for_bit_and_the_finiteness_test_sees_nan_and_inf():
    from most.mgda import _scaling

    x = torch.randn(5, 40, 30, dtype=F64) * torch.logspace(-300, 300, 5, dtype=F64)[:, None, None]
    for e in (torch.tensor([-900, -600, 0, 600, 1000]), torch.tensor([-1073, -600, 0, 600, 1024])):
        assert torch.equal(_scaling.divide_pow2(x, e), torch.ldexp(x, -e[:, None, None]))
    assert _scaling.all_finite(x) and _scaling.all_finite(torch.zeros(0, 3))
    # the host path's NumPy rescaling gives the same numbers (a zero problem stays zero; no problem at all)
    for y in (x, torch.cat([x, torch.zeros(1, 40, 30, dtype=F64)]), x * 2.0 ** -60):
        assert torch.equal(torch.from_numpy(_scaling.host_divide_pow2(y.numpy())),
                           _scaling.divide_pow2(y, _scaling.pow2_scale(y, (-2, -1))))
    assert _scaling.host_divide_pow2(np.zeros((0, 4, 3))).shape == (0, 4, 3)
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[3, 7, 2] = bad
        assert not _scaling.all_finite(y)


@pytest.mark.parametrize("scale", [1e-200, 1e200])
def test_many_rows_in_fewer_coordinates_of_any_scale_get_the_weights_of_the_unscaled_rows(scale):
    # rows of ~1e-200 or ~1e200 (squares under- or overflowing float64) are solved after an exact
    # rescaling; gradients times weights that overflow float64 are refused with the cause
    from most import mgda

    g = torch.Generator().manual_seed(3)
    J = torch.randn(2, 300, 10, generator=g, dtype=F64) + 2.0
    w = torch.rand(2, 300, generator=g, dtype=F64)
    u, lam = mgda.combine_min_norm(J, w)
    u_s, lam_s = mgda.combine_min_norm(J * scale, w)
    assert torch.equal(lam_s, lam) and torch.equal(lam, mgda.combine_min_norm(J, w * scale)[1])
    torch.testing.assert_close(u_s, u * scale, rtol=1e-12, atol=0)
    big = J.clone()
    big[1, 5] = 1e300  # a huge row with a tiny weight: its norm overflows, its weighted row does not
    w_tiny = w.clone()
    w_tiny[1, 5] = 1e-300
    assert bool(torch.isfinite(mgda.combine_min_norm(big, w_tiny)[0]).all())
    with pytest.raises(ValueError, match="overflow float64: the iterates are diverging"):
        mgda.combine_min_norm(J * 1e200, w * 1e200)


def test_the_smallest_scores_come_in_the_order_of_a_stable_sort():
    # the working sets grow by the rows a stable argsort would pick: ties (by index), inf and NaN included
    from most.mgda import _nnls

    rng = np.random.default_rng(0)
    for trial in range(400):
        n, count = int(rng.integers(1, 600)), int(rng.integers(1, 30))
        v = rng.standard_normal(n)
        if trial % 4 == 1:
            v = np.round(v, 1)  # many ties
        elif trial % 4 == 2:
            v[rng.integers(0, n, size=max(1, n // 5))] = np.inf
        elif trial % 4 == 3:
            v = rng.integers(0, 3, size=n).astype(float)
            v[rng.integers(0, n, size=max(1, n // 2))] = np.nan
        assert np.array_equal(_nnls._smallest(v, count), np.argsort(v, kind="stable")[:count])


def test_many_float32_rows_near_the_origin_get_the_exact_direction():
    # Frank-Wolfe stops at the float32 tolerance (1e-6 of the largest squared norm), which leaves
    # |u| ~ 1e-2 |g| off by a large fraction; the NNLS path answers to round-off
    from most import mgda

    g = torch.Generator().manual_seed(0)
    k, d = 200, 100
    c = 3 * torch.randn(k, d, generator=g)
    J = 2 * (torch.randn(2, 1, d, generator=g) - c[None])  # float32, the hull close to the origin
    w = torch.rand(2, k, generator=g)
    u, lam = mgda.combine_min_norm(J, w)
    rows = (w[..., None] * J).double()
    exact = torch.einsum("bk,bkd->bd", min_norm(rows @ rows.transpose(1, 2), tol=1e-14, max_iter=200_000).weights,
                         rows)
    assert float((exact.norm(dim=1) / rows.norm(dim=-1).amax(-1)).max()) < 0.05  # |u| small against the rows
    error = (torch.einsum("bk,bkd->bd", lam.double(), rows) - exact).norm(dim=1) / exact.norm(dim=1)
    assert float(error.max()) < 1e-6


def _kkt_holds(rows: torch.Tensor, w: torch.Tensor, u: torch.Tensor, lam: torch.Tensor, tol: float) -> bool:
    """The min-norm optimality conditions on every live row, within the solver's slack."""
    scores, norm = torch.einsum("bkd,bd->bk", rows, u), (u * u).sum(-1, keepdim=True)
    slack = 0.5 * tol * (rows * rows).sum(-1).amax(-1, keepdim=True) + 1e-12 * norm
    live, on = w > 0, lam > 0
    return (bool((scores[live] >= (norm - slack).expand_as(scores)[live]).all())
            and bool(((scores - norm).abs()[on] <= slack.expand_as(scores)[on]).all()))


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("offset", [0.0, 3.0])  # rows around the origin / a common descent direction
@pytest.mark.parametrize("d", [200, 1000])  # as many coordinates as rows, more
def test_many_rows_in_as_many_coordinates_are_solved_by_nnls_on_the_gramian_to_the_same_point_and_kkt(
        seed, offset, d, monkeypatch):
    from most import mgda
    from most.mgda import _direction, _nnls

    fallbacks = []
    full_solver = mgda.min_norm
    for module in (_direction, _nnls):  # where combine_min_norm and the NNLS solvers read it
        monkeypatch.setattr(module, "min_norm", lambda *a, **k: fallbacks.append(1) or full_solver(*a, **k))
    g = torch.Generator().manual_seed(seed)
    B, k = 3, 200
    J = torch.randn(B, k, d, generator=g, dtype=F64) + offset * torch.randn(B, 1, d, generator=g, dtype=F64)
    w = torch.rand(B, k, generator=g, dtype=F64)
    w[:, ::7] = 0
    w[2] = 0  # a problem without rows
    rows = w[..., None] * J
    assert not _nnls.low_rank(rows) and k > _nnls.GRAM_NNLS_MIN_ROWS
    u, lam = mgda.combine_min_norm(J, w)
    assert not fallbacks  # every problem answered by NNLS and certified by its check
    exact = full_solver(rows @ rows.transpose(1, 2), mask=w > 0, tol=1e-14, max_iter=100_000).weights
    gram = rows @ rows.transpose(1, 2)
    objective = torch.einsum("bk,bkl,bl->b", lam, gram, lam)
    best = torch.einsum("bk,bkl,bl->b", exact, gram, exact)
    assert bool((objective <= best * (1 + 1e-12) + 1e-15).all())  # as low as Frank-Wolfe at 1e-14
    torch.testing.assert_close(lam, exact, atol=1e-8, rtol=0)
    torch.testing.assert_close(u, torch.einsum("bk,bkd->bd", exact * w, J), atol=1e-8, rtol=1e-8)
    assert _kkt_holds(rows, w, u, lam, 1e-10)
    assert bool((lam[:2].sum(-1) - 1).abs().max() < 1e-12) and not bool(lam[w == 0].any())
    assert bool((u[2] == 0).all()) and bool((lam[2] == 0).all())


@pytest.mark.parametrize("case", ["nnls stops", "wrong nnls", "repeated rows", "origin in the hull", "float32"])
def test_the_gramian_nnls_hands_what_it_cannot_certify_to_frank_wolfe(case, monkeypatch):
    import scipy.optimize

    from most import mgda
    from most.mgda import _direction, _nnls

    if case == "nnls stops":
        def stops(*args, **kwargs):
            raise RuntimeError("too many iterations")

        monkeypatch.setattr(scipy.optimize, "nnls", stops)
    if case == "wrong nnls":  # an answer off the optimum: the check on every row hands over to Frank-Wolfe
        exact_nnls = scipy.optimize.nnls

        def off(*args, **kwargs):
            mu, res = exact_nnls(*args, **kwargs)
            mu = mu.copy()
            mu[mu.argmin()] += mu.sum()
            return mu, res

        monkeypatch.setattr(scipy.optimize, "nnls", off)
    fallbacks = []
    full_solver = mgda.min_norm
    for module in (_direction, _nnls):  # where combine_min_norm and the NNLS solvers read it
        monkeypatch.setattr(module, "min_norm",
                            lambda *a, **k: fallbacks.append(a[0].shape[0]) or full_solver(*a, **k))
    g = torch.Generator().manual_seed(0)
    B, k, d = 2, 160, 400
    J = torch.randn(B, k, d, generator=g, dtype=F64) + 2.0 * torch.randn(B, 1, d, generator=g, dtype=F64)
    if case == "repeated rows":
        J[:, 80:] = J[:, :80]
    if case == "origin in the hull":  # each row's opposite is a row too: the min-norm point is 0
        J[:, 80:] = -J[:, :80]
    w = torch.ones(B, k, dtype=F64)
    tol = 1e-10
    if case == "float32":
        J, w, tol = J.float(), w.float(), mgda.FLOAT32_TOL
    u, lam = mgda.combine_min_norm(J, w)
    rows = (w[..., None] * J).double()
    assert _kkt_holds(rows, w.double(), u.double(), lam.double(), tol)
    assert bool((lam.double().sum(-1) - 1).abs().max() < 1e-6) and bool((lam >= 0).all())
    if case in ("nnls stops", "wrong nnls"):
        assert fallbacks == [B]  # both problems, in one batched call
    if case == "origin in the hull":
        assert float(u.norm(dim=-1).max()) < 1e-4 * float(rows.norm(dim=-1).max())
    if case == "float32":
        assert u.dtype == lam.dtype == torch.float32 and not fallbacks


# --------------------------------------------------------------------------- #
# coordinates and an empty batch in min_norm_direction
# --------------------------------------------------------------------------- #

_J3 = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 2.0], [1.0, 1.0, 0.0]], dtype=F64)


@pytest.mark.parametrize("coordinates", [
    (0, 2), [0, 2], np.array([0, 2]), torch.tensor([0, 2]), (np.int64(0), np.int32(2)),
    (torch.tensor(0), torch.tensor(2)), slice(0, 2), slice(None, 2), slice(0, 2, 1),
], ids=repr)
def test_coordinates_given_as_any_pair_of_ints_or_a_slice_solve_on_that_block(coordinates):
    # on coordinates 0..1 the rows are e1, e2 and (1, 1): the min-norm point is (1/2, 1/2), from rows 0 and 1
    u, lam = min_norm_direction(_J3, coordinates=coordinates, return_weights=True)
    torch.testing.assert_close(lam, torch.tensor([0.5, 0.5, 0.0], dtype=F64), atol=1e-12, rtol=0)
    torch.testing.assert_close(u, torch.tensor([0.5, 0.5, 2.0], dtype=F64), atol=1e-12, rtol=0)
    assert torch.equal(min_norm_direction(_J3, coordinates=slice(1, None)), min_norm_direction(_J3, coordinates=(1, 3)))


@pytest.mark.parametrize("coordinates, why", [
    ((2, 1), "start must be below stop"), ((1, 1), "start must be below stop"), ((-1, 3), r"got \(-1, 3\)\.$"),
    (1, r"got 1\.$"), ((0, 1, 2), "3 values instead of 2"), ((0.0, 1.0), r"got \(0\.0, 1\.0\)\.$"),
    ((0, None), r"got \(0, None\)\.$"), ((True, 2), r"got \(True, 2\)\.$"), ("01", r"got '01'\.$"),
    (slice(0, 3, 2), "a slice with a step"), (slice(-1, 3), r"got slice\(-1, 3, None\)\.$"),
], ids=repr)
def test_coordinates_that_are_not_two_ints_in_order_inside_the_gradients_are_refused(coordinates, why):
    with pytest.raises(ValueError, match=r"`coordinates` must be \(start, stop\), two ints with 0 <= start < stop "
                                         r"<= 3 .*" + why):
        min_norm_direction(_J3, coordinates=coordinates)


def test_coordinates_past_the_gradients_are_refused_naming_the_dimension():
    with pytest.raises(ValueError, match=r"`coordinates` \(1, 4\) lie outside the 3 parameters of a model"):
        min_norm_direction(_J3, coordinates=(1, 4))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_an_empty_batch_gives_empty_directions_and_weights_like_min_norm(dtype):
    J = torch.ones(0, 2, 3, dtype=dtype)
    u, lam = min_norm_direction(J, return_weights=True)
    assert u.shape == (0, 3) and lam.shape == (0, 2) and u.dtype == lam.dtype == dtype
    assert lam.shape == min_norm(torch.ones(0, 2, 2, dtype=dtype)).weights.shape
    u, lam = min_norm_direction(J, torch.ones(0, 2), coordinates=(1, 3), return_weights=True)
    assert u.shape == (0, 3) and lam.shape == (0, 2)
    assert min_norm_direction(J, torch.ones(2)).shape == (0, 3)
