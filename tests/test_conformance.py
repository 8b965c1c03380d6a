"""One conformance suite for every component kind of the library.

Each kind (marginals, assignments, weightings, combiners, update rules, MosT-E extensions)
has a module-level registry below: a list of ``case(component, id, **traits)``. Every test
of a kind runs on every entry of its registry, so a new component is covered by adding one
line. The traits say which documented contract a component follows where components of the
same kind legitimately differ (e.g. which marginals an assignment meets); each registry
lists its traits and their defaults above it.

The properties are the documented contracts of :mod:`most.methods`, :mod:`most.optim`,
:mod:`most.transport`, :mod:`most.mgda` and :mod:`most.baselines`. Sizes are tiny: the
whole file runs in seconds.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from most.seeding import KMeansSeeding, Reseed

import most
from most.baselines import (
    BestModelAssignment,
    EPOCombiner,
    PreferenceAssignment,
    STCHSetCombiner,
    SumOfMinimumCombiner,
    SVGDCombiner,
    TCHSetCombiner,
    stch_set,
    sum_of_minimum,
    tch_set,
)
from most.methods import (
    SmoothMax,
    Assignment,
    CappedTransportAssignment,
    Combiner,
    Curriculum,
    DirichletExtension,
    EqualAssignment,
    GammaWeights,
    MajorityShare,
    Marginals,
    MinNorm,
    ModelsSelectObjectives,
    ObjectivesSelectModels,
    RandomAssignment,
    RelativeWeights,
    Shares,
    Support,
    TchebycheffExtension,
    TransportAssignment,
    LoadBounds,
    ShareBounds,
    Uniform,
    WeightedSum,
    Weighting,
)
from most.federated.methods.clustered import ClusterAssignment
from most.federated.methods import (BoxMinNorm, ClassGroups, ClientLoss, CrossEntropy, PriorAdjusted, SplitByLosses,
                                   SplitByUpdates,
                                   SplitSignal, min_norm_box)
from most.optim import SGD, Adam, UpdateRule
from most.transport import diversity_regularizer

F32, F64 = torch.float32, torch.float64
DTYPES = [pytest.param(F32, id="float32"), pytest.param(F64, id="float64")]
DEVICES = [pytest.param("cpu", id="cpu")] + (
    [pytest.param("cuda", id="cuda")] if torch.cuda.is_available() else []
)
#: Small sizes used throughout: n objectives, m models, d parameters.
N, M, D = 7, 3, 5
SEEDS = [0, 1, 2]


def case(component, id: str, **traits):
    """A registry entry: the component, the traits that select its contracts, and a test id."""
    return pytest.param(component, traits, id=id)


def having(registry, trait, default=None):
    """The entries of ``registry`` whose ``trait`` is set (not None / False / 0)."""
    return [p for p in registry if p.values[1].get(trait, default)]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rand(*shape, seed: int, dtype=F64, device="cpu", low=0.0, high=1.0) -> torch.Tensor:
    x = torch.rand(*shape, generator=_gen(seed), dtype=F64) * (high - low) + low
    return x.to(dtype=dtype, device=device)


def _uniform(k: int) -> torch.Tensor:
    return torch.full((k,), 1.0 / k, dtype=F64)


def _close(actual, expected, *, atol, rtol=0.0, msg=""):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, check_dtype=False, msg=msg or None)


# =============================================================================== registries
# ---------------------------------------------------------------------------- marginals
# traits:
#   drops: None (both marginals given), "alpha" or "beta" (that one is None: semi-relaxed).
#   reference: callable (losses [n, m], round, total) -> the documented (alpha, beta).
def _curriculum_reference(start, end):
    """Section 3.3 as documented: s moves linearly from start to end over the rounds;
    alpha = s alpha_M + (1 - s) / n, beta = s / m + (1 - s) beta_O (then normalised)."""

    def reference(losses, round, total):
        n, m = losses.shape
        s = start + (end - start) * round / max(total - 1, 1)
        alpha_m = torch.zeros(n, dtype=F64)  # each model puts 1/m on its lowest-loss objective
        beta_o = torch.zeros(m, dtype=F64)  # each objective puts 1/n on its lowest-loss model
        for j in range(m):
            alpha_m[min(range(n), key=lambda i: float(losses[i, j]))] += 1.0 / m
        for i in range(n):
            beta_o[min(range(m), key=lambda j: float(losses[i, j]))] += 1.0 / n
        a, b = s * alpha_m + (1 - s) / n, s / m + (1 - s) * beta_o
        return a / a.sum(), b / b.sum()

    return reference


MARGINALS = [
    case(Uniform(), "Uniform", reference=lambda L, t, T: (_uniform(L.shape[0]), _uniform(L.shape[1]))),
    case(ObjectivesSelectModels(), "ObjectivesSelectModels", drops="beta",
         reference=lambda L, t, T: (_uniform(L.shape[0]), None)),
    case(ModelsSelectObjectives(), "ModelsSelectObjectives", drops="alpha",
         reference=lambda L, t, T: (None, _uniform(L.shape[1]))),
    case(Curriculum(), "Curriculum", reference=_curriculum_reference(1.0, 0.0)),
    case(Curriculum(start=0.3, end=0.8), "Curriculum-0.3-0.8", reference=_curriculum_reference(0.3, 0.8)),
]

# ---------------------------------------------------------------------------- assignments
# traits:
#   marginals: a Marginals whose (alpha, beta) the plan meets; default: the component's own
#       ``marginals`` field (TransportAssignment).
#   tol: tolerance on the plan's float64 marginals (default EXACT_TOL); float32 plans get at
#       least FLOAT32_TOL. most.transport promises every method's marginals "up to float
#       error" (the iterative plans are rounded onto the polytope), so even the looser
#       ITERATIVE_TOL fails for an unrounded plan (whose violation is the solver's 1e-5).
#   equivariant: permuting the objectives (or models) of L permutes the plan (default True;
#       False for plans that do not depend on L).
#   concentrates: with diversity > 0, R(Gamma) is at most that of the tau = 0 plan (the exact
#       solver's guarantee, most.transport._diversity) (default False).
#   max_share: every share is capped, Gamma_ij <= max_share * alpha_i (also a bound of the
#       linprog reference) (default None).
#   gap: the plan minimises <L, Gamma> over its marginals' polytope, to within this gap
#       relative to the cost range (``scipy.optimize.linprog`` is the reference); None when
#       the plan is not an optimiser of <L, Gamma> (default None).
# A component with a ``diversity`` field > 0 is also checked to never be worse, in the
# regularised objective, than its own plan without diversity.
@dataclasses.dataclass(frozen=True)
class LossProportional(Marginals):
    """Test marginals: alpha_i, beta_j proportional to 1/2 + the mean loss of row i / column j.

    Non-uniform (so that the diversity regulariser has splits to undo; with uniform
    marginals the tau = 0 vertex is already as concentrated as it can be) and equivariant."""

    def __call__(self, losses, round, total):
        a, b = 0.5 + losses.mean(1), 0.5 + losses.mean(0)
        return a / a.sum(), b / b.sum()


_LOSS_MARGINALS = LossProportional()
EXACT_TOL, ITERATIVE_TOL, FLOAT32_TOL = 1e-12, 1e-9, 1e-6
ASSIGNMENTS = [
    case(TransportAssignment("exact"), "Transport-exact", gap=1e-9),
    case(TransportAssignment("sinkhorn"), "Transport-sinkhorn", tol=ITERATIVE_TOL, gap=5e-3),
    case(TransportAssignment("newton"), "Transport-newton", tol=ITERATIVE_TOL, gap=5e-3),
    case(TransportAssignment("ipot"), "Transport-ipot", tol=ITERATIVE_TOL, gap=5e-3),
    case(TransportAssignment("exact", diversity=0.2, marginals=_LOSS_MARGINALS), "Transport-exact-diversity",
         concentrates=True),
    case(TransportAssignment("sinkhorn", diversity=0.2, marginals=_LOSS_MARGINALS),
         "Transport-sinkhorn-diversity", tol=ITERATIVE_TOL),
    case(TransportAssignment("newton", diversity=0.2, marginals=_LOSS_MARGINALS), "Transport-newton-diversity",
         tol=ITERATIVE_TOL),
    case(TransportAssignment("ipot", diversity=0.2, marginals=_LOSS_MARGINALS), "Transport-ipot-diversity",
         tol=ITERATIVE_TOL),
    case(TransportAssignment("sinkhorn", diversity=0.2, reg=0.1), "Transport-sinkhorn-reg0.1-diversity",
         tol=ITERATIVE_TOL),
    case(CappedTransportAssignment(shares=2), "CappedTransport-2", max_share=0.5, gap=1e-9),
    case(CappedTransportAssignment(shares=3), "CappedTransport-3", max_share=1 / 3, gap=1e-9),
    case(CappedTransportAssignment(shares=2, marginals=_LOSS_MARGINALS), "CappedTransport-2-nonuniform",
         max_share=0.5, gap=1e-9),
    case(TransportAssignment("exact", marginals=ObjectivesSelectModels()), "Transport-exact-O", gap=1e-9),
    case(TransportAssignment("exact", marginals=ModelsSelectObjectives()), "Transport-exact-M", gap=1e-9),
    case(TransportAssignment("sinkhorn", marginals=ObjectivesSelectModels()), "Transport-sinkhorn-O",
         tol=ITERATIVE_TOL, gap=5e-3),
    case(TransportAssignment("exact", marginals=Curriculum()), "Transport-exact-curriculum", gap=1e-9),
    case(TransportAssignment("sinkhorn", marginals=Curriculum()), "Transport-sinkhorn-curriculum",
         tol=ITERATIVE_TOL, gap=5e-3),
    # drawn once in the default dtype (float32): its columns sum to 1/m to float32 precision
    case(RandomAssignment(), "Random", marginals=ModelsSelectObjectives(), equivariant=False, tol=1e-7),
    case(RandomAssignment(concentration=0.3), "Random-0.3", marginals=ModelsSelectObjectives(), equivariant=False,
         tol=1e-7),
    case(EqualAssignment(), "Equal", marginals=Uniform()),
    case(BestModelAssignment(), "BestModel", marginals=ObjectivesSelectModels(), gap=1e-9),
    case(PreferenceAssignment(), "Preference", marginals=ModelsSelectObjectives(), equivariant=False),
    # CFL's clusters as a plan: every objective whole to its cluster (all in cluster 0 after reset)
    case(ClusterAssignment(), "Cluster", marginals=ObjectivesSelectModels(), equivariant=False),
]

# ---------------------------------------------------------------------------- weightings
# traits:
#   homogeneity: W(c * Gamma) = c**k W(Gamma) for c > 0 (0: shares, 1: linear in Gamma).
#   reference: callable (plan [n, m]) -> the documented W [m, n], written entry by entry.
def _shares_reference(plan):
    n, m = plan.shape
    w = torch.zeros(m, n, dtype=F64)
    for i in range(n):
        mass = float(plan[i].sum())
        for j in range(m):
            w[j, i] = float(plan[i, j]) / mass if mass > 0 else 0.0
    return w


def _majority_share_reference(plan):
    """Objective i counts, with weight s_ij = Gamma_ij / alpha_i, for the model j holding its
    largest share (ties: lowest index); a model owning nothing falls back to all its shares."""
    n, m = plan.shape
    shares = _shares_reference(plan)
    w = torch.zeros(m, n, dtype=F64)
    for i in range(n):
        if float(plan[i].sum()) > 0:
            owner = max(range(m), key=lambda j: (float(shares[j, i]), -j))
            w[owner, i] = shares[owner, i]
    for j in range(m):
        if not bool((w[j] > 0).any()):
            w[j] = shares[j]
    return w


WEIGHTINGS = [
    case(MajorityShare(), "MajorityShare", homogeneity=0, reference=_majority_share_reference),
    case(Shares(), "Shares", homogeneity=0, reference=_shares_reference),
    case(GammaWeights(), "GammaWeights", homogeneity=1, reference=lambda plan: plan.shape[0] * plan.T.to(F64)),
    case(Support(), "Support", homogeneity=0, reference=lambda plan: (plan.T > 0).to(F64)),
    case(RelativeWeights(), "RelativeWeights", homogeneity=0, reference=lambda plan: plan.T.to(F64) / plan.max()),
]

# ---------------------------------------------------------------------------- combiners
# traits:
#   uses_weights: lambda is 0 where W is 0 (default True); False: the weights are ignored
#       (the outputs do not change with them).
#   simplex: "model": each model's lambda lies on the simplex over its served objectives;
#       "total": all m * n coefficients sum to 1; None: no constraint (default "model").
#   direction: how the direction is made from lambda: "lambda" (sum_i lambda_ji g_i),
#       "lambda*weights" (sum_i lambda_ji W_ji g_i) or None (something else).
#   weight_scale: scaling model j's weights by c_j > 0 scales its direction by c_j**k
#       (lambda unchanged) (default 0).
#   kkt: lambda solves the min-norm problem over the rows W_ji g_i (on the component's
#       ``coordinates`` if it has them): "direction" checks the KKT conditions on the
#       returned direction itself (a common descent direction), "lambda" on sum_i lambda W g.
#   idle: a model that serves no objective (weights all 0) gets direction 0 and lambda 0
#       (default False: e.g. SVGD still moves such a particle by the kernel terms).
#   reference: callable (jacobian, weights, losses, params) -> the documented direction.
#   epo_eps: lambda solves EPO's linear program (Mahapatra & Rajan, Eq. 24) with this
#       non-uniformity threshold: feasible, and at least as good as the min-norm point.
#   gradient_of: callable (loss matrix [n, m]) -> scalar: with the true Jacobian, the
#       direction is that scalarisation's gradient with respect to the m models' parameters.
def _weighted_mean(jac, weights, losses, params):
    out = torch.zeros(jac.shape[0], jac.shape[2], dtype=F64)
    for j in range(jac.shape[0]):
        w = weights[j].to(F64)
        if w.sum() > 0:
            out[j] = sum(w[i] * jac[j, i].to(F64) for i in range(jac.shape[1])) / w.sum()
    return out


def _svgd_reference(bandwidth, alpha):
    """MOO-SVGD as documented: phi_j = (1/m) sum_k [K(x_k, x_j) g_k - alpha grad_{x_k} K(x_k, x_j)]
    with K(x, y) = exp(-||x - y||^2 / h), g_k particle k's MGDA direction (weights divided by
    their largest entry) and h the bandwidth or med^2 / log(m + 1)."""

    def reference(jac, weights, losses, params):
        m = params.shape[0]
        x = params.to(F64)
        w = weights.to(F64) / weights.to(F64).amax(1, keepdim=True)
        g = torch.stack([most.mgda.min_norm_direction(jac[k].to(F64), w[k]) for k in range(m)])
        dist = [float((x[k] - x[j]).norm()) for k in range(m) for j in range(k + 1, m)]
        h = bandwidth or float(np.median(dist)) ** 2 / np.log(m + 1)
        phi = torch.zeros_like(x)
        for j in range(m):
            for k in range(m):
                kern = torch.exp(-((x[k] - x[j]) ** 2).sum() / h)
                grad_k = -(2.0 / h) * (x[k] - x[j]) * kern  # grad of K(x_k, x_j) in x_k
                phi[j] += (kern * g[k] - alpha * grad_k) / m
        return phi

    return reference


def _box_min_norm(eps):
    """FedMGDA+ as documented: each model's served rows scaled to unit length, then the min-norm
    point of their hull with every weight within eps of uniform (here by SciPy's SLSQP from the
    uniform start, as most.federated.methods.min_norm_box solves it)."""

    def reference(jac, weights, losses, params):
        out = torch.zeros(jac.shape[0], jac.shape[2], dtype=F64)
        for j in range(jac.shape[0]):
            rows = (weights[j] > 0).nonzero().squeeze(1)
            if len(rows):
                u = jac[j, rows].to(F64)
                u = u / u.norm(dim=1, keepdim=True)
                out[j] = (min_norm_box(u @ u.T, eps)[:, None] * u).sum(0)
        return out

    return reference


def _smooth_max_objective(smoothing):
    """sum_j mu_j log sum_i exp(L[i, j] / mu_j), the temperature mu_j = smoothing * (max - min) of
    column j held fixed (SmoothMax's objective when every model serves every objective)."""

    def objective(L):
        mu = (smoothing * (L.amax(0) - L.amin(0))).detach()
        return (mu * torch.logsumexp(L / mu, dim=0)).sum()

    return objective


COMBINERS = [
    case(MinNorm(), "MinNorm", direction="lambda*weights", weight_scale=1, kkt="direction", idle=True),
    case(MinNorm(coordinates=(1, 4)), "MinNorm-coordinates", direction="lambda*weights", weight_scale=1,
         kkt="lambda", idle=True),
    case(WeightedSum(), "WeightedSum", direction="lambda", reference=_weighted_mean, idle=True),
    case(SmoothMax(), "SmoothMax", direction="lambda", idle=True, gradient_of=_smooth_max_objective(0.1)),
    case(SmoothMax(smoothing=1.0), "SmoothMax-1", direction="lambda", idle=True,
         gradient_of=_smooth_max_objective(1.0)),
    case(EPOCombiner(), "EPO", direction="lambda", idle=True, epo_eps=1e-4),
    case(SVGDCombiner(), "SVGD", kkt="lambda", reference=_svgd_reference(None, 1.0)),
    case(SVGDCombiner(bandwidth=2.0, alpha=0.5), "SVGD-h2-a0.5", kkt="lambda", reference=_svgd_reference(2.0, 0.5)),
    case(TCHSetCombiner(), "TCHSet", uses_weights=False, simplex="total", direction="lambda",
         gradient_of=lambda L: tch_set(L)),
    case(STCHSetCombiner(smoothing=0.1), "STCHSet", uses_weights=False, simplex="total", direction="lambda",
         gradient_of=lambda L: stch_set(L, smoothing=0.1)),
    case(SumOfMinimumCombiner(), "SumOfMinimum", uses_weights=False, simplex="total", direction="lambda",
         gradient_of=lambda L: sum_of_minimum(L) / L.shape[0]),
    case(BoxMinNorm(eps=0.1), "BoxMinNorm", direction=None, idle=True, reference=_box_min_norm(0.1)),
    case(BoxMinNorm(eps=1.0), "BoxMinNorm-eps1", direction=None, idle=True, reference=_box_min_norm(1.0)),
]

# ---------------------------------------------------------------------------- update rules
# traits:
#   first_step: callable (params, direction, lr) -> params after one step from ``init``.
#   torch_optim: callable (list of tensors, lr) -> the torch.optim optimizer it equals when
#       the direction is fed as the gradient.
UPDATE_RULES = [
    case(SGD(), "SGD", first_step=lambda p, d, lr: p - lr * d,
         torch_optim=lambda ps, lr: torch.optim.SGD(ps, lr=lr)),
    case(Adam(), "Adam", first_step=lambda p, d, lr: p - lr * d / (d.abs() + 1e-8),
         torch_optim=lambda ps, lr: torch.optim.Adam(ps, lr=lr)),
    case(Adam(beta1=0.5, beta2=0.9, eps=1e-3), "Adam-0.5-0.9",
         first_step=lambda p, d, lr: p - lr * d / (d.abs() + 1e-3),
         torch_optim=lambda ps, lr: torch.optim.Adam(ps, lr=lr, betas=(0.5, 0.9), eps=1e-3)),
    # a clip no random direction here reaches: Adam itself (the clipping is tested in test_optim)
    case(Adam(clip=1e3), "Adam-clip", first_step=lambda p, d, lr: p - lr * d / (d.abs() + 1e-8),
         torch_optim=lambda ps, lr: torch.optim.Adam(ps, lr=lr)),
]

# ---------------------------------------------------------------------------- extensions
# traits:
#   n: number of objectives of the base problem (default 3).
#   convex: the added objectives are convex combinations of the originals (default False).
EXTENSIONS = [
    case(DirichletExtension(n_extra=4), "Dirichlet", convex=True),
    case(DirichletExtension(n_extra=3, concentration=0.5, include_original=False), "Dirichlet-no-original",
         convex=True),
    case(TchebycheffExtension(n_extra=4), "Tchebycheff"),
    case(TchebycheffExtension(n_extra=3, smoothing=0.1, augment=0.01, include_original=False),
         "Tchebycheff-smooth-augmented"),
    case(TchebycheffExtension(n_extra=4, ideal=(-0.5, 0.0, 0.25)), "Tchebycheff-ideal"),
    case(TchebycheffExtension(n_extra=5, spread="grid"), "Tchebycheff-grid", n=2),
]


# =============================================================================== completeness
#: Modules whose public components must each have a registry entry (add a module here when
#: it starts exporting components).
SCANNED_MODULES = ["most.methods", "most.optim", "most.baselines", "most.federated.methods", "most.seeding"]

# ---------------------------------------------------------------------------- placement
# Seedings (problem, m, generator, lr=, optimizer=) -> [m, dim] and re-seedings
# (problem, params, generator, lr=, optimizer=) -> (params, moved).
SEEDINGS = [
    case(KMeansSeeding(), "KMeans"),
    case(KMeansSeeding(steps=5, candidates=1), "KMeans-5-steps-1-candidate"),
]
RESEEDS = [
    case(Reseed(), "Reseed"),
    case(Reseed(candidates=1, steps=5, min_gain=0.0), "Reseed-1-candidate-no-gain"),
]
# ---------------------------------------------------------------------------- re-split signals
# What tells federated MosT's re-split that a model serves two groups of clients:
# find(deltas, pair_model, clients, losses, min_clients) -> (model, pairs of the leaving half) | None.
SPLIT_SIGNALS = [
    case(SplitByLosses(), "SplitByLosses"),
    case(SplitByLosses(min_gap=0.1), "SplitByLosses-0.1"),
    case(SplitByUpdates(), "SplitByUpdates"),
    case(SplitByUpdates(max_similarity=0.0), "SplitByUpdates-0"),
]
# ---------------------------------------------------------------------------- client losses
# How a client scores each model for the plan: (logits [m, n, N, C], y [n, N], w [n, N]) -> [n, m];
# traits: prior (None: the mean cross-entropy; else the pseudo-count of the class frequencies
# added to the logits).
CLIENT_LOSSES = [
    case(CrossEntropy(), "CrossEntropy", prior=None),
    case(PriorAdjusted(), "PriorAdjusted", prior=2.0),
    case(PriorAdjusted(0.5), "PriorAdjusted-0.5", prior=0.5),
]
# ---------------------------------------------------------------------------- groupings
# How federated MosT's warm-up groups the clients from their gradients per class:
# find(grads [n, C, s], counts [n, C], m) -> [n] groups 0..k-1 (k <= m) | None.
GROUPINGS = [
    case(ClassGroups(), "ClassGroups"),
    case(ClassGroups(min_margin=0.5, min_size=3), "ClassGroups-0.5-3"),
    case(ClassGroups(start_apart=False), "ClassGroups-no-start-apart"),  # find is the default's; no start
    case(ClassGroups(start_margin=None), "ClassGroups-always-start-apart"),
]
# ---------------------------------------------------------------------------- bounded marginals
# Marginals whose beta is a most.methods.Bounds (lower, upper) instead of a vector; traits:
#   lower, upper: callables (n) -> the documented per-model bounds (upper None: unbounded).
BOUNDED_MARGINALS = [
    case(LoadBounds(), "LoadBounds", lower=lambda n: 1.0 / n, upper=None, refuses_few=True),
    case(LoadBounds(min_objectives=2.0, max_objectives=3.0), "LoadBounds-2-3", lower=lambda n: 2.0 / n,
         upper=lambda n: 3.0 / n, refuses_few=True),
    case(LoadBounds(min_objectives=0.0), "LoadBounds-0", lower=lambda n: 0.0, upper=None),
    # in shares of the fair load n/m: between low / M and high / M of the mass per model
    case(ShareBounds(), "ShareBounds", lower=lambda n: 0.5 / M, upper=lambda n: 2.0 / M),
    case(ShareBounds(0.0, None), "ShareBounds-free", lower=lambda n: 0.0, upper=None),
    # a soft balance: the load above n/m costs 0.5 x the median lowest loss per unit
    case(ShareBounds(price=0.5), "ShareBounds-priced", lower=lambda n: 0.5 / M, upper=lambda n: 2.0 / M),
    # the balance moved to (0.6, 0.3, 0.1) of the mass (a hand-over's): the price is paid above those
    # loads, and the bounds widen to 0.5 / 2 times them where that is wider than around n/m
    case(ShareBounds(price=0.5, loads=(0.6, 0.3, 0.1)), "ShareBounds-moved",
         lower=lambda n: [0.5 / M, 0.15, 0.05], upper=lambda n: [1.0, 2.0 / M, 2.0 / M]),
]

KINDS = {KMeansSeeding: SEEDINGS, Reseed: RESEEDS, SplitSignal: SPLIT_SIGNALS, ClientLoss: CLIENT_LOSSES,
         ClassGroups: GROUPINGS, Marginals: MARGINALS + BOUNDED_MARGINALS, Assignment: ASSIGNMENTS, Weighting: WEIGHTINGS, Combiner: COMBINERS,
         UpdateRule: UPDATE_RULES}


@pytest.mark.parametrize("module", SCANNED_MODULES)
def test_every_public_component_is_registered(module):
    mod = importlib.import_module(module)
    for name in mod.__all__:
        obj = getattr(mod, name)
        if not isinstance(obj, type) or inspect.isabstract(obj):
            continue
        registries = [reg for kind, reg in KINDS.items() if issubclass(obj, kind)]
        if name.endswith("Extension"):
            registries.append(EXTENSIONS)
        for registry in registries:
            assert any(type(p.values[0]) is obj for p in registry), f"{module}.{name} has no registry entry"


# =============================================================================== client losses
def _client_batch(seed, dtype=F64, m=3, n=4, N=7, C=5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, n, N, C, generator=g).to(dtype)
    y = torch.randint(0, C, (n, N), generator=g)
    w = torch.ones(n, N, dtype=dtype)
    w[1, 5:] = 0.0  # client 1 has padding
    return logits, y, w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("loss, traits", CLIENT_LOSSES)
def test_client_loss_matches_its_definition(loss, traits, dtype):
    """Each entry against a per-sample loop: the mean over the client's real samples of
    -log softmax(z + log p_i)[y], p_i its smoothed class frequencies (none for the cross-entropy)."""
    logits, y, w = _client_batch(0, dtype)
    m, n, N, C = logits.shape
    got = loss(logits, y, w)
    assert got.shape == (n, m) and got.dtype == dtype and bool((got > 0).all())
    for i in range(n):
        real = w[i] > 0
        shift = torch.zeros(C, dtype=dtype)
        if traits["prior"] is not None:
            counts = torch.bincount(y[i][real], minlength=C).to(dtype) + traits["prior"]
            shift = (counts / counts.sum()).log()
        for j in range(m):
            z = logits[j, i][real] + shift
            expected = -(z.log_softmax(-1).gather(1, y[i][real][:, None])).mean()
            torch.testing.assert_close(got[i, j], expected)


@pytest.mark.parametrize("loss, traits", CLIENT_LOSSES)
def test_client_loss_ignores_padding_and_is_model_and_client_equivariant(loss, traits):
    logits, y, w = _client_batch(1)
    base = loss(logits, y, w)
    noisy = logits.clone()
    noisy[:, 1, 5:] = 100.0 * torch.randn_like(noisy[:, 1, 5:])  # what padding holds does not count
    y2 = y.clone()
    y2[1, 5:] = 0
    torch.testing.assert_close(loss(noisy, y2, w), base)
    models, clients = torch.tensor([2, 0, 1]), torch.tensor([3, 1, 0, 2])
    torch.testing.assert_close(loss(logits[models][:, clients], y[clients], w[clients]), base[clients][:, models])


@pytest.mark.parametrize("loss, traits", CLIENT_LOSSES)
def test_client_loss_of_a_client_with_balanced_classes_is_the_cross_entropy(loss, traits):
    """A constant added to every logit changes nothing: a client holding each class equally often."""
    logits, _, _ = _client_batch(2, N=10)
    y = torch.arange(10).remainder(5).expand(4, 10).clone()
    w = torch.ones(4, 10, dtype=F64)
    torch.testing.assert_close(loss(logits, y, w), CrossEntropy()(logits, y, w))


@pytest.mark.parametrize("loss, traits", CLIENT_LOSSES)
def test_prior_adjusted_loss_prefers_the_balanced_model_to_one_fitted_to_the_clients_classes(loss, traits):
    """Gaussian classes (means 0, 1, 2), a client with class frequencies (0.7, 0.2, 0.1). Model A's
    logits are the class log-likelihoods (right for balanced classes), model B's add the client's log
    prior (right for this client). The cross-entropy prefers B; the prior-adjusted loss, which adds the
    prior itself, prefers A (B would count it twice)."""
    g = torch.Generator().manual_seed(3)
    prior = torch.tensor([0.7, 0.2, 0.1], dtype=F64)
    y = torch.multinomial(prior, 4000, replacement=True, generator=g)
    x = y.to(F64) + torch.randn(4000, generator=g, dtype=F64)
    loglik = -0.5 * (x[:, None] - torch.arange(3, dtype=F64)) ** 2
    logits = torch.stack([loglik, loglik + prior.log()])[:, None]  # [2, 1, N, 3]
    got = loss(logits, y[None], torch.ones(1, 4000, dtype=F64))[0]
    if traits["prior"] is None:
        assert got[1] < got[0]
    else:
        assert got[0] < got[1]


def test_prior_adjusted_refuses_a_pseudo_count_that_is_not_positive():
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="pseudo_count"):
            PriorAdjusted(bad)


# =============================================================================== marginals
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("marginals, traits", MARGINALS)
def test_marginals_shapes_dtypes_and_simplex(marginals, traits, dtype, device):
    losses = _rand(N, M, seed=0, dtype=dtype, device=device)
    total = 4
    for t in range(total):
        alpha, beta = marginals(losses, t, total)
        drops = traits.get("drops")
        assert (alpha is None) == (drops == "alpha")
        assert (beta is None) == (drops == "beta")
        for vec, size in ((alpha, N), (beta, M)):
            if vec is None:
                continue
            assert vec.shape == (size,)
            assert vec.dtype == dtype and vec.device.type == device
            assert bool((vec >= 0).all())
            assert float(vec.sum()) == pytest.approx(1.0, abs=1e-6 if dtype == F32 else 1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("marginals, traits", having(MARGINALS, "reference"))
def test_marginals_match_their_definition(marginals, traits, seed):
    losses = _rand(N, M, seed=seed)
    total = 4
    for t in range(total):
        for got, want in zip(marginals(losses, t, total), traits["reference"](losses, t, total)):
            assert (got is None) == (want is None)
            if want is not None:
                _close(got, want, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("marginals, traits", MARGINALS)
def test_marginals_permutation_equivariance(marginals, traits, seed):
    losses = _rand(N, M, seed=seed)
    rows = torch.randperm(N, generator=_gen(seed + 100))
    cols = torch.randperm(M, generator=_gen(seed + 200))
    for t in (0, 1, 3):
        alpha, beta = marginals(losses, t, 4)
        alpha_p, beta_p = marginals(losses[rows][:, cols], t, 4)
        if alpha is not None:
            _close(alpha_p, alpha[rows], atol=1e-12)
        if beta is not None:
            _close(beta_p, beta[cols], atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", ["exact", "sinkhorn", "ipot"])
@pytest.mark.parametrize("marginals, traits", BOUNDED_MARGINALS)
def test_bounded_marginals_give_feasible_optimal_plans(marginals, traits, method, seed):
    # the plan places every objective, keeps each model's load within the documented bounds, and
    # minimises <L, Gamma> over that set (linprog with the load bounds as inequalities), plus, for a
    # priced balance, the price of each model's load above its target (an excess variable per model)
    n, m = 9, 3
    losses = _rand(n, m, seed=seed)
    alpha, bounds = marginals(losses, 0, 1)
    _close(alpha, _uniform(n), atol=1e-15)
    lower, upper = np.broadcast_to(traits["lower"](n), (m,)), traits["upper"]  # one per model, or one for all
    _close(bounds.lower, torch.tensor(lower, dtype=F64), atol=1e-15)
    assert (bounds.upper is None) == (upper is None)
    plan = TransportAssignment(method, marginals=marginals)(losses, 0, 1)
    tol = EXACT_TOL if method == "exact" else 1e-6
    _close(plan.sum(1), alpha, atol=tol)
    hi = np.broadcast_to(1.0 if upper is None else upper(n), (m,))
    if upper is not None:
        _close(bounds.upper, torch.tensor(hi, dtype=F64), atol=1e-15)
    assert bool((plan.sum(0).numpy() >= lower - tol).all()) and bool((plan.sum(0).numpy() <= hi + tol).all())
    rows = np.hstack([np.kron(np.eye(n), np.ones(m)), np.zeros((n, m))])
    cols = np.hstack([np.kron(np.ones(n), np.eye(m)), np.zeros((m, m))])
    excess = cols - np.hstack([np.zeros((m, n * m)), np.eye(m)])  # load_j - e_j <= target_j
    target = np.zeros(m) if bounds.target is None else bounds.target.numpy()
    ref = linprog(np.concatenate([losses.numpy().ravel(), np.full(m, bounds.price)]), A_eq=rows, b_eq=alpha.numpy(),
                  A_ub=np.vstack([cols, -cols, excess]),
                  b_ub=np.concatenate([hi, -lower, target]), bounds=(0, None), method="highs")
    value = float((plan * losses).sum()) + bounds.price * float((plan.sum(0).numpy() - target).clip(0).sum())
    gap = value - ref.fun
    assert gap <= (1e-9 if method == "exact" else 5e-3), f"{method}: {gap}"


@pytest.mark.parametrize("marginals, traits", BOUNDED_MARGINALS)
def test_bounded_marginals_refuse_bounds_no_plan_meets(marginals, traits):
    losses = _rand(2, 3, seed=0)  # 2 objectives cannot give 3 models one (or two) each
    if traits.get("refuses_few"):
        with pytest.raises(ValueError, match="must serve at least"):
            marginals(losses, 0, 1)
    else:  # bounds in shares of n/m (or none): any number of objectives meets them
        plan = TransportAssignment("exact", marginals=marginals)(losses, 0, 1)
        _close(plan.sum(1), _uniform(2), atol=EXACT_TOL)


# =============================================================================== placement
def _grouped_problem(n_per_group=4, groups=3, seed=0):
    g = _gen(seed)
    centres = (8.0 * torch.randn(groups, D, generator=g, dtype=F64)).repeat_interleave(n_per_group, 0)
    centres = centres + 0.3 * torch.randn(centres.shape, generator=g, dtype=F64)
    return most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=D, n_objectives=len(centres),
                                      init=lambda m, gen: torch.randn(m, D, generator=gen, dtype=F64))


@pytest.mark.parametrize("seeding, traits", SEEDINGS)
def test_seeding_shape_dtype_determinism_and_fallback(seeding, traits):
    problem = _grouped_problem()
    starts = seeding(problem, 3, _gen(1), lr=0.1)
    assert starts.shape == (3, D) and starts.dtype == F64 and bool(torch.isfinite(starts).all())
    _close(seeding(problem, 3, _gen(1), lr=0.1), starts, atol=0.0)  # the generator decides everything
    assert not torch.equal(seeding(problem, 3, _gen(2), lr=0.1), starts)
    assert torch.pdist(starts).min() > 0  # distinct models
    # the summed best loss of the starts is below that of the problem's own starts (draws of init)
    ref = problem.loss_matrix(problem.initial_params(3, _gen(1))).min(1).values.sum()
    assert problem.loss_matrix(starts).min(1).values.sum() < ref
    few = _grouped_problem(n_per_group=1, groups=5)  # n = 5 < 2m: the problem's starts
    _close(seeding(few, 3, _gen(1), lr=0.1), few.initial_params(3, _gen(1)), atol=0.0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("reseed, traits", RESEEDS)
def test_reseed_moves_at_most_one_model_and_only_when_it_pays(reseed, traits, seed):
    problem = _grouped_problem(seed=seed)
    params = problem.initial_params(3, _gen(seed + 10))
    before = float(problem.loss_matrix(params).min(1).values.sum())
    out, moved = reseed(problem, params, _gen(seed), lr=0.1)
    changed = (out != params).any(1)
    if moved is None:
        assert torch.equal(out, params)
    else:
        assert changed.nonzero().flatten().tolist() == [moved]
        after = float(problem.loss_matrix(out).min(1).values.sum())
        assert after <= before * (1 - reseed.min_gain) + 1e-12
    again, moved_again = reseed(problem, params, _gen(seed), lr=0.1)
    assert moved_again == moved and torch.equal(again, out)
    # due: every `every` rounds, never after the `until` fraction or in the last round
    due = [t for t in range(100) if reseed.due(t, 100)]
    assert all((t + 1) % reseed.every == 0 and t + 1 <= reseed.until * 100 and t < 99 for t in due)


# =============================================================================== re-split signals
def _two_groups_on_one_model(seed, mixed=True):
    """Three models. Model 0's first pairs are clients of group A (their updates point along +u,
    model 1 serves them next best), its last ones of group B (along -u, model 2 next); models 1
    and 2 serve one group each. Without ``mixed`` model 0's clients are all of group A. Client
    difficulty (a per-client offset on every loss) and noise vary with the seed."""
    g = _gen(seed)
    d, sizes = 30, (7, 5, 6, 6)  # model 0: A (7) + B (5); models 1 and 2: 6 each
    u = torch.randn(d, generator=g, dtype=F64)
    u /= u.norm()
    group = torch.tensor([0] * 7 + [1 if mixed else 0] * 5 + [0] * 6 + [1] * 6)
    pair_model = torch.tensor([0] * 12 + [1] * 6 + [2] * 6)
    direction = torch.where(group[:, None] == 0, u, -u)
    deltas = direction + 0.05 * torch.randn(len(group), d, generator=g, dtype=F64)
    own = torch.tensor([[1.0, 1.4, 3.0], [1.0, 3.0, 1.4]], dtype=F64)  # group A's row, group B's
    losses = own[group] + 0.05 * torch.rand(len(group), 3, generator=g, dtype=F64)
    losses[12:18, 1] -= 0.6  # models 1 and 2 serve their own clients best
    losses[18:, 2] -= 0.6
    losses += 2.0 * torch.rand(len(group), 1, generator=g, dtype=F64)  # difficulty: every model alike
    clients = torch.randperm(len(group), generator=g)  # pairs are not in client order
    full = torch.empty_like(losses)
    full[clients] = losses
    assert sum(sizes) == len(group)
    return deltas, pair_model, clients, full, group


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("signal, traits", SPLIT_SIGNALS)
def test_split_signal_finds_the_model_serving_two_groups_and_one_whole_half(signal, traits, seed):
    deltas, pair_model, clients, losses, group = _two_groups_on_one_model(seed)
    found = signal.find(deltas, pair_model, clients, losses, 4)
    assert found is not None
    model, pairs = found
    assert model == 0 and pairs.dtype == torch.long
    assert bool((pair_model[pairs] == 0).all())  # the leaving half is the split model's
    leaving = group[pairs]
    assert len(set(leaving.tolist())) == 1  # one whole group leaves, the other stays
    assert len(pairs) == int((group[:12] == leaving[0]).sum())
    # the same pairs listed in another order: the same model parts into the same two halves
    # (which half leaves may follow the order, as the first pair's half stays for SplitByUpdates)
    order = torch.randperm(len(pair_model), generator=_gen(seed + 1))
    again = signal.find(deltas[order], pair_model[order], clients[order], losses, 4)
    assert again is not None and again[0] == 0
    halves = {frozenset(clients[pairs].tolist()), frozenset(clients[:12].tolist()) - set(clients[pairs].tolist())}
    assert frozenset(clients[order][again[1]].tolist()) in halves


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("signal, traits", SPLIT_SIGNALS)
def test_split_signal_leaves_single_groups_and_small_models_alone(signal, traits, seed):
    deltas, pair_model, clients, losses, group = _two_groups_on_one_model(seed, mixed=False)
    assert signal.find(deltas, pair_model, clients, losses, 4) is None  # every model serves one group
    mixed = _two_groups_on_one_model(seed)
    assert signal.find(*mixed[:4], 13) is None  # no model has 13 pairs


# =============================================================================== groupings
def _class_signal(sizes, seed, C=10, s=30, held=4, noise=0.3):
    """Gradients per class of clients in groups of ``sizes``: within a group, a class's gradient is
    the group's direction for it plus noise; every client holds ``held`` random classes (label
    skew), so clients of one group hold different classes and share only some."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.randn(len(sizes), C, s, generator=g, dtype=F64)
    grads, counts, groups = [], [], []
    for k, size in enumerate(sizes):
        for _ in range(size):
            mine = torch.zeros(C, dtype=F64)
            mine[torch.randperm(C, generator=g)[:held]] = torch.randint(5, 40, (held,), generator=g).to(F64)
            grads.append((centre[k] + noise * torch.randn(C, s, generator=g, dtype=F64)) * (mine > 0)[:, None])
            counts.append(mine)
            groups.append(k)
    return torch.stack(grads), torch.stack(counts), groups


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("grouping, traits", GROUPINGS)
def test_grouping_recovers_planted_groups_of_unequal_size_under_label_skew(grouping, traits, seed):
    from most.federated.evaluation import adjusted_rand_index
    grads, counts, groups = _class_signal((3, 6, 12), seed)
    found = grouping.find(grads, counts, 3)
    assert found is not None and adjusted_rand_index(found.tolist(), groups) == 1.0
    # more models than groups: the groups themselves (a model is left over), not a split group
    more = grouping.find(grads, counts, 5)
    assert more is not None and int(more.max()) + 1 == 3 and adjusted_rand_index(more.tolist(), groups) == 1.0
    # the clients in another order: the same groups, in that order
    perm = torch.randperm(len(groups), generator=torch.Generator().manual_seed(seed))
    again = grouping.find(grads[perm], counts[perm], 3)
    assert adjusted_rand_index(again.tolist(), [groups[i] for i in perm.tolist()]) == 1.0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("grouping, traits", GROUPINGS)
def test_grouping_finds_nothing_where_clients_have_no_groups(grouping, traits, seed):
    # every client its own direction per class: no structure to follow
    grads, counts, _ = _class_signal((1,) * 20, seed)
    assert grouping.find(grads, counts, 4) is None
    # one group: nothing to split
    grads, counts, _ = _class_signal((20,), seed)
    assert grouping.find(grads, counts, 4) is None


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("grouping, traits", GROUPINGS)
def test_grouping_split_is_find_where_groups_stand_apart_and_the_start_elsewhere(grouping, traits, seed):
    grads, counts, _ = _class_signal((3, 6, 12), seed)
    groups, stood = grouping.split(grads, counts, 3)
    assert stood and torch.equal(groups, grouping.find(grads, counts, 3))
    # no structure: the start's groups where start_apart is set and they clear start_margin, else none
    grads, counts, _ = _class_signal((1,) * 20, seed)
    groups, stood = grouping.split(grads, counts, 4)
    start = grouping.start(grads, counts, 4) if grouping.start_apart else None
    assert not stood and (groups is None) == (start is None)
    assert start is None or torch.equal(groups, start)
    if grouping.start_margin is None and grouping.start_apart:
        assert groups is not None and int(groups.max()) + 1 == 4  # whatever they show


@pytest.mark.parametrize("grouping, traits", GROUPINGS)
def test_grouping_refuses_a_diverged_or_mismatched_signal(grouping, traits):
    grads, counts, _ = _class_signal((4, 4), 0)
    with pytest.raises(ValueError, match="do not match"):
        grouping.find(grads, counts[:, :5], 2)
    grads[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="diverged"):
        grouping.find(grads, counts, 2)


# =============================================================================== assignments
def _plan(assignment, losses, round=1, total=3, previous=None):
    n, m = losses.shape
    assignment.reset(n, m, _gen(7))  # the loop calls reset once per run; a no-op for most
    return assignment(losses, round, total, previous=previous)


def _plan_marginals(assignment, traits, losses, round=1, total=3):
    marginals = traits.get("marginals") or assignment.marginals
    return marginals(losses.to(F64), round, total)


@pytest.mark.parametrize("assignment, traits", ASSIGNMENTS)
def test_assignment_rows_of_a_fixed_plan_are_its_plan(assignment, traits):
    """An assignment marked ``fixed`` gives, for any subset of the objectives, the rows of the
    plan it gives for all of them (a federated round with some clients absent plans with them);
    any other says it has no fixed plan."""
    losses = _rand(N, M, seed=0)
    plan = _plan(assignment, losses)
    subset = torch.tensor([5, 0, 3])
    if not type(assignment).fixed:
        with pytest.raises(NotImplementedError, match="no fixed plan"):
            assignment.rows(subset)
        return
    _close(assignment.rows(torch.arange(N)).to(plan), plan, atol=0.0)
    _close(assignment.rows(subset).to(plan), plan[subset], atol=0.0)
    _close(_plan(assignment, _rand(N, M, seed=1)), plan, atol=0.0, msg="a fixed plan ignores the losses")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("assignment, traits", ASSIGNMENTS)
def test_assignment_shape_dtype_device(assignment, traits, dtype, device):
    losses = _rand(N, M, seed=0, dtype=dtype, device=device)
    plan = _plan(assignment, losses)
    assert plan.shape == (N, M)
    assert plan.dtype == dtype and plan.device.type == device
    assert bool(torch.isfinite(plan).all())


@pytest.mark.parametrize("round", [0, 1, 2])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("assignment, traits", ASSIGNMENTS)
def test_assignment_plan_is_feasible(assignment, traits, seed, round):
    for dtype in (F32, F64):
        losses = _rand(N, M, seed=seed, dtype=dtype)
        plan = _plan(assignment, losses, round=round)
        alpha, beta = _plan_marginals(assignment, traits, losses, round=round)
        tol = max(traits.get("tol", EXACT_TOL), FLOAT32_TOL if dtype == F32 else 0.0)
        assert bool((plan >= 0).all()), "a plan has no negative mass"
        assert float(plan.double().sum()) == pytest.approx(1.0, abs=tol * max(N, M))
        if alpha is not None:
            _close(plan.double().sum(1), alpha, atol=tol, msg="row sums (objectives) must equal alpha")
        if beta is not None:
            _close(plan.double().sum(0), beta, atol=tol, msg="column sums (models) must equal beta")
        if traits.get("max_share") is not None:
            cap = traits["max_share"] * alpha[:, None]
            assert bool((plan.double() <= cap + tol).all()), "a share above the cap"


def _lp_optimum(cost: np.ndarray, a, b, max_share=None) -> float:
    """min <cost, Gamma> over Gamma >= 0 with the given row / column sums (None: free) and,
    with ``max_share``, Gamma_ij <= max_share * a_i."""
    n, m = cost.shape
    A, rhs = [], []
    if a is not None:
        for i in range(n):
            row = np.zeros((n, m))
            row[i, :] = 1.0
            A.append(row.ravel())
            rhs.append(float(a[i]))
    if b is not None:
        for j in range(m):
            col = np.zeros((n, m))
            col[:, j] = 1.0
            A.append(col.ravel())
            rhs.append(float(b[j]))
    bounds = (0, None) if max_share is None else [(0, max_share * float(a[i])) for i in range(n) for _ in range(m)]
    res = linprog(cost.ravel(), A_eq=np.array(A), b_eq=np.array(rhs), bounds=bounds, method="highs")
    assert res.status == 0
    return float(res.fun)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("assignment, traits", ASSIGNMENTS)
def test_assignment_cost_against_linprog(assignment, traits, seed):
    """No feasible plan beats the LP optimum; an optimiser of <L, Gamma> reaches it."""
    for shape in ((N, M), (4, 4), (9, 3)):
        losses = _rand(*shape, seed=seed)
        plan = _plan(assignment, losses)
        alpha, beta = _plan_marginals(assignment, traits, losses)
        best = _lp_optimum(losses.numpy(), None if alpha is None else alpha.numpy(),
                           None if beta is None else beta.numpy(), traits.get("max_share"))
        cost = float((losses * plan).sum())
        scale = float(losses.max() - losses.min())
        tol = traits.get("tol", EXACT_TOL) * scale * sum(shape)
        assert cost >= best - tol - 1e-12
        gap = traits.get("gap")
        if gap is not None:
            assert cost <= best + gap * scale + 1e-12, f"cost {cost} is not optimal (LP optimum {best})"


@pytest.mark.parametrize("assignment, traits", [p for p in ASSIGNMENTS if getattr(p.values[0], "diversity", 0)])
def test_assignment_diversity_never_worse_than_without(assignment, traits):
    """Eq. 6: with tau > 0 the plan's <L, Gamma> + tau R(Gamma) is at most that of the tau = 0
    plan it starts from (the linearisation never increases it)."""
    tau = assignment.diversity
    changed = False
    for seed in SEEDS:
        losses = _rand(N, M, seed=seed)
        plan = _plan(assignment, losses)
        base = _plan(dataclasses.replace(assignment, diversity=0.0), losses)

        def objective(p):
            return float((losses * p).sum() + tau * diversity_regularizer(p))

        assert objective(plan) <= objective(base) + 1e-10
        if traits.get("concentrates"):
            # from an LP-optimal tau = 0 plan, R can only improve: mass moves onto one model per objective
            assert float(diversity_regularizer(plan)) <= float(diversity_regularizer(base)) + 1e-12
        changed |= not torch.allclose(plan, base, atol=1e-4)
    assert changed, "the regulariser never changed the plan: the test data do not exercise it"


@pytest.mark.parametrize("axis", ["objectives", "models"])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("assignment, traits", having(ASSIGNMENTS, "equivariant", True))
def test_assignment_permutation_equivariance(assignment, traits, seed, axis):
    """Permuting the objectives (rows of L) or the models (columns) permutes the plan alike.

    Random continuous losses, so the optimum is unique and there are no ties."""
    losses = _rand(N, M, seed=seed)
    plan = _plan(assignment, losses)
    if axis == "objectives":
        perm = torch.randperm(N, generator=_gen(seed + 10))
        permuted = _plan(assignment, losses[perm])
        _close(permuted, plan[perm], atol=1e-7)
    else:
        perm = torch.randperm(M, generator=_gen(seed + 20))
        permuted = _plan(assignment, losses[:, perm])
        _close(permuted, plan[:, perm], atol=1e-7)


# =============================================================================== weightings
def _plans(seed: int) -> dict[str, torch.Tensor]:
    """Plans of the shapes the loop produces: dense, sparse (a row without mass, a model
    owning nothing) and an exact transport vertex."""
    dense = _rand(N, M, seed=seed, low=0.05)
    sparse = _rand(N, M, seed=seed + 1) * (_rand(N, M, seed=seed + 2) > 0.4)
    sparse[0] = 0.0  # an objective without mass
    sparse[:, 2] = 0.0
    sparse[1, 2] = 0.01 * sparse[1].sum() + 1e-3  # model 2 holds a sliver only: it owns nothing
    vertex = TransportAssignment("exact")(_rand(N, M, seed=seed + 3), 0, 1)
    return {name: p / p.sum() for name, p in (("dense", dense), ("sparse", sparse), ("vertex", vertex))}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weighting, traits", WEIGHTINGS)
def test_weighting_shape_dtype_support(weighting, traits, dtype, device):
    for seed in SEEDS:
        for name, plan in _plans(seed).items():
            plan = plan.to(dtype=dtype, device=device)
            w = weighting(plan)
            assert w.shape == (M, N), name
            assert w.dtype == dtype and w.device.type == device
            assert bool(torch.isfinite(w).all()) and bool((w >= 0).all()), name
            # W[j, i] > 0 only where model j holds mass of objective i
            assert not bool(((w > 0) & (plan.T == 0)).any()), f"{name}: weight where the plan is 0"
            # every objective with mass counts somewhere; one without mass counts nowhere
            held = plan.sum(1) > 0
            assert torch.equal(w.sum(0) > 0, held), name


@pytest.mark.parametrize("weighting, traits", WEIGHTINGS)
def test_weighting_permutation_equivariance(weighting, traits):
    for seed in SEEDS:
        rows = torch.randperm(N, generator=_gen(seed + 30))
        cols = torch.randperm(M, generator=_gen(seed + 40))
        for name, plan in _plans(seed).items():
            w = weighting(plan)
            _close(weighting(plan[rows]), w[:, rows], atol=1e-12, msg=f"{name}: objectives")
            _close(weighting(plan[:, cols]), w[cols], atol=1e-12, msg=f"{name}: models")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weighting, traits", having(WEIGHTINGS, "reference"))
def test_weighting_matches_its_definition(weighting, traits, dtype):
    for seed in SEEDS:
        for name, plan in _plans(seed).items():
            plan = plan.to(dtype)
            _close(weighting(plan), traits["reference"](plan.double()), atol=1e-6 if dtype == F32 else 1e-12,
                   rtol=1e-6 if dtype == F32 else 1e-12, msg=name)


@pytest.mark.parametrize("weighting, traits", WEIGHTINGS)
def test_weighting_homogeneity(weighting, traits):
    k = traits["homogeneity"]
    for seed in SEEDS:
        for name, plan in _plans(seed).items():
            for c in (0.5, 3.0):
                _close(weighting(c * plan), c**k * weighting(plan), atol=1e-12, rtol=1e-12, msg=name)


# =============================================================================== combiners
def _combiner_inputs(seed: int, dtype=F64, device="cpu", m=M, n=6, d=D):
    """jacobian [m, n, d], weights [m, n] (each model serves 2..4 objectives), positive
    losses [m, n] (EPO needs non-negative ones) and params [m, d]."""
    g = _gen(seed)
    jac = torch.randn(m, n, d, generator=g, dtype=F64)
    weights = torch.rand(m, n, generator=g, dtype=F64) * 0.8 + 0.2
    for j in range(m):
        off = torch.randperm(n, generator=g)[: 2 + (j + seed) % 3]
        weights[j, off] = 0.0
    losses = torch.rand(m, n, generator=g, dtype=F64) * 1.5 + 0.5
    params = torch.randn(m, d, generator=g, dtype=F64)
    return tuple(x.to(dtype=dtype, device=device) for x in (jac, weights, losses, params))


def _combine(combiner, jac, weights, losses, params):
    return combiner(jac, weights, losses=losses, params=params)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("combiner, traits", COMBINERS)
def test_combiner_shapes_dtypes_and_lambda(combiner, traits, dtype, device):
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed, dtype, device)
        direction, lam = _combine(combiner, jac, weights, losses, params)
        assert direction.shape == (M, D) and lam.shape == (M, jac.shape[1])
        for out in (direction, lam):
            assert out.dtype == dtype and out.device.type == device
            assert bool(torch.isfinite(out).all())
        assert bool((lam >= 0).all())
        if traits.get("uses_weights", True):
            assert bool((lam[weights == 0] == 0).all()), "an objective a model does not serve has lambda 0"
        tol = 1e-5 if dtype == F32 else 1e-10
        simplex = traits.get("simplex", "model")
        if simplex == "model":
            _close(lam.double().sum(1), torch.ones(M, dtype=F64, device=device), atol=tol)
        elif simplex == "total":
            assert float(lam.double().sum()) == pytest.approx(1.0, abs=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("combiner, traits", having(COMBINERS, "idle"))
def test_combiner_idle_model_stays(combiner, traits, dtype):
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed, dtype)
        weights[1] = 0.0
        direction, lam = _combine(combiner, jac, weights, losses, params)
        assert bool((direction[1] == 0).all()) and bool((lam[1] == 0).all())
        assert bool((direction[[0, 2]] != 0).any(1).all()), "the other models still move"


@pytest.mark.parametrize("combiner, traits", having(COMBINERS, "direction"))
def test_combiner_direction_is_the_lambda_combination(combiner, traits):
    how = traits["direction"]
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed)
        direction, lam = _combine(combiner, jac, weights, losses, params)
        coeff = lam * weights if how == "lambda*weights" else lam
        _close(direction, torch.einsum("mn,mnd->md", coeff, jac), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("combiner, traits", [p for p in COMBINERS if type(p.values[0]).linear])
def test_linear_combiner_coefficients_are_its_lambda(combiner, traits):
    """A combiner marked ``linear`` gives the loop (which forms the direction by one reverse pass)
    the coefficients of its own direction: ``linear_coefficients(weights, losses)`` is its lambda
    and the direction their combination of the rows."""
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed)
        direction, lam = _combine(combiner, jac, weights, losses, params)
        coeff = combiner.linear_coefficients(weights, losses)
        _close(coeff.to(lam), lam, atol=1e-12, rtol=1e-12)
        _close(direction, torch.einsum("mn,mnd->md", coeff.to(jac), jac), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("combiner, traits", [p for p in COMBINERS if not type(p.values[0]).linear])
def test_non_linear_combiner_says_so(combiner, traits):
    jac, weights, losses, params = _combiner_inputs(0)
    with pytest.raises(NotImplementedError, match="not linear"):
        combiner.linear_coefficients(weights, losses)


@pytest.mark.parametrize("combiner, traits", COMBINERS)
def test_combiner_resolve_and_check_dim_hooks(combiner, traits):
    """Every combiner answers the loops' two set-up calls: ``resolve`` (a combiner that names no
    parameter returns itself, unlooked-up) and ``check_dim`` (settings within the model pass)."""
    def lookup(name):
        raise AssertionError(f"{type(combiner).__name__} looked up {name!r} but names no parameter")

    assert combiner.resolve(lookup) is combiner
    combiner.check_dim(10**6)


def test_a_named_parameter_resolves_and_coordinates_past_the_model_are_refused():
    named = MinNorm(coordinates="bias")
    resolved = named.resolve(lambda name: {"bias": slice(2, 5)}[name])
    assert resolved == MinNorm(coordinates=(2, 5))
    resolved.check_dim(5)
    with pytest.raises(ValueError, match=r"\(2, 5\) lie outside the 4 parameters of net"):
        resolved.check_dim(4, model="net")


@pytest.mark.parametrize("combiner, traits", COMBINERS)
def test_combiner_permutation_invariance(combiner, traits):
    """Permuting the objectives leaves each direction unchanged (and permutes lambda);
    permuting the models permutes the directions."""
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed)
        direction, lam = _combine(combiner, jac, weights, losses, params)
        perm = torch.randperm(jac.shape[1], generator=_gen(seed + 50))
        d_p, lam_p = _combine(combiner, jac[:, perm], weights[:, perm], losses[:, perm], params)
        _close(d_p, direction, atol=1e-8, rtol=1e-8, msg="objectives permuted: direction changed")
        _close(lam_p, lam[:, perm], atol=1e-8, msg="objectives permuted: lambda not permuted alike")
        perm = torch.randperm(M, generator=_gen(seed + 60))
        d_p, lam_p = _combine(combiner, jac[perm], weights[perm], losses[perm], params[perm])
        _close(d_p, direction[perm], atol=1e-8, rtol=1e-8, msg="models permuted: directions not permuted")
        _close(lam_p, lam[perm], atol=1e-8, msg="models permuted: lambda not permuted")


@pytest.mark.parametrize("combiner, traits", COMBINERS)
def test_combiner_weight_scaling(combiner, traits):
    """Scaling model j's weights by c_j leaves lambda unchanged and scales its direction by
    c_j ** weight_scale (0 for all but the min-norm direction of the weighted rows)."""
    k = traits.get("weight_scale", 0)
    c = torch.tensor([0.25, 1.0, 8.0], dtype=F64)[:, None]
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed)
        direction, lam = _combine(combiner, jac, weights, losses, params)
        d_s, lam_s = _combine(combiner, jac, c * weights, losses, params)
        _close(lam_s, lam, atol=1e-8)
        _close(d_s, c**k * direction, atol=1e-8, rtol=1e-8)


@pytest.mark.parametrize("combiner, traits", COMBINERS)
def test_combiner_weights_matter_only_as_documented(combiner, traits):
    jac, weights, losses, params = _combiner_inputs(0)
    other = _combiner_inputs(1)[1]
    d1, lam1 = _combine(combiner, jac, weights, losses, params)
    d2, lam2 = _combine(combiner, jac, other, losses, params)
    if traits.get("uses_weights", True):
        assert not torch.allclose(lam1, lam2), "lambda ignores which objectives each model serves"
    else:
        assert torch.equal(d1, d2) and torch.equal(lam1, lam2), "the weights are documented as ignored"


@pytest.mark.parametrize("combiner, traits", [p for p in COMBINERS if type(p.values[0]).active_only])
def test_active_only_combiner_reads_only_the_served_rows(combiner, traits):
    """``active_only`` combiners get the served rows packed (padding rows weight 0, any
    gradient); the result must equal the one from the full Jacobian."""
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed)
        direction, lam = _combine(combiner, jac, weights, losses, params)
        active = weights > 0
        k = int(active.sum(1).max())
        g = _gen(seed + 70)
        packed_jac = torch.randn(M, k, D, generator=g, dtype=F64) * 3  # padding: junk gradients
        packed_w = torch.zeros(M, k, dtype=F64)
        packed_loss = torch.rand(M, k, generator=g, dtype=F64) + 0.5
        index = torch.zeros(M, k, dtype=torch.long)
        for j in range(M):
            idx = active[j].nonzero()[:, 0]
            packed_jac[j, : len(idx)] = jac[j, idx]
            packed_w[j, : len(idx)] = weights[j, idx]
            packed_loss[j, : len(idx)] = losses[j, idx]
            index[j, : len(idx)] = idx
        d_p, lam_p = _combine(combiner, packed_jac, packed_w, packed_loss, params)
        _close(d_p, direction, atol=1e-9, rtol=1e-9)
        back = torch.zeros_like(lam).scatter_add_(1, index, lam_p * (packed_w > 0))
        _close(back, lam, atol=1e-9)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("combiner, traits", having(COMBINERS, "kkt"))
def test_combiner_min_norm_kkt(combiner, traits, dtype):
    """lambda solves min ||sum_i lambda_i W_ji g_i||^2 over the simplex of served objectives:
    with u = sum_i lambda_i W_ji g_i, <W_ji g_i, u> >= ||u||^2 - tol for every served i, with
    equality where lambda_i > 0. For a common-descent combiner u is the returned direction,
    so -direction decreases every served objective to first order."""
    kkt = traits["kkt"]
    rtol = 1e-5 if dtype == F32 else 1e-8
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed, dtype)
        direction, lam = _combine(combiner, jac, weights, losses, params)
        start, stop = getattr(combiner, "coordinates", None) or (0, D)
        for j in range(M):
            served = weights[j] > 0
            rows = weights[j, :, None].double() * jac[j, :, start:stop].double()  # [n, d']
            u = direction[j].double() if kkt == "direction" else lam[j].double() @ rows
            if kkt == "direction":
                _close(u, lam[j].double() @ rows, atol=1e-5 if dtype == F32 else 1e-10)
            scale = float((rows[served] ** 2).sum(1).max())
            inner, sq = rows @ u, float(u @ u)
            assert bool((inner[served] >= sq - rtol * scale).all()), (inner[served] - sq) / scale
            support = lam[j] > 1e-6
            assert bool(((inner[support] - sq).abs() <= rtol * scale).all())
            if kkt == "direction" and sq > rtol * scale:
                # a common descent direction: every served objective decreases along -u
                assert bool((jac[j, served].double() @ u > 0).all())


@pytest.mark.parametrize("on_ray", [False, True], ids=["balance", "descent"])
@pytest.mark.parametrize("combiner, traits", having(COMBINERS, "epo_eps"))
def test_combiner_solves_the_epo_program(combiner, traits, on_ray):
    """With r_j = W[j] / sum W[j], C = G G^T, rl = r * l, mu = KL(rl / sum rl || 1/n) and
    a = r (log(n rl / sum rl) - mu), beta (lambda) must be feasible for EPO's program and score
    at least as well as the min-norm coefficients beta*, which are always feasible:
    balance (mu > eps): the worst relative losses do not increase ((C beta)_i >= 0 on J*), the
    others outside J ascend no faster than along a, and (Ca)^T beta >= (Ca)^T beta*;
    descent (mu <= eps, losses on the preference ray): no loss increases and
    1^T C beta >= 1^T C beta*."""
    eps = traits["epo_eps"]
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed)
        if on_ray:  # r_i l_i equal for every objective a model serves: mu = 0
            losses = torch.where(weights > 0, 1.0 / weights.clamp_min(1e-12), losses)
        _, lam = _combine(combiner, jac, weights, losses, params)
        for j in range(M):
            on = weights[j] > 0
            G = jac[j, on]
            C = G @ G.T
            C = C / C.diagonal().max()
            r = weights[j, on] / weights[j, on].sum()
            rl = r * losses[j, on]
            share = rl / rl.sum()
            mu = float((share * torch.log(len(share) * share)).sum())
            a = r * (torch.log(len(share) * share) - mu)
            beta, star = lam[j, on], most.mgda.min_norm(C).weights
            Cb, Cs, Ca = C @ beta, C @ star, C @ a
            tol = 1e-7
            assert float(beta.sum()) == pytest.approx(1.0, abs=1e-9) and bool((beta >= 0).all())
            assert (mu <= eps) == on_ray
            if on_ray:
                assert bool((Cb >= -tol).all()), "descent mode: an objective increases"
                assert float(Cb.sum()) >= float(Cs.sum()) - tol
                continue
            worst = rl >= rl.max() * (1 - 1e-12)
            assert bool((Cb[worst] >= -tol).all()), "the worst relative loss increases"
            if bool((Ca > 0).any()):  # balance: maximise the decrease of the non-uniformity
                controlled = (Ca <= 0) & ~worst
                assert bool((Cb[controlled] >= Ca[controlled] - tol).all()), "uncontrolled ascent"
                assert float(Ca @ beta) >= float(Ca @ star) - tol
            else:  # worst-descent: no loss increases, the worst relative losses decrease most
                assert bool((Cb >= -tol).all())
                assert float(Cb[worst].sum()) >= float(Cs[worst].sum()) - tol


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("combiner, traits", having(COMBINERS, "reference"))
def test_combiner_matches_its_reference(combiner, traits, dtype):
    reference = traits["reference"]
    for seed in SEEDS:
        jac, weights, losses, params = _combiner_inputs(seed, dtype)
        direction, _ = _combine(combiner, jac, weights, losses, params)
        tol = 1e-6 if dtype == F32 else 1e-13
        _close(direction, reference(jac, weights, losses, params), atol=tol, rtol=tol)


@pytest.mark.parametrize("combiner, traits", having(COMBINERS, "gradient_of"))
def test_combiner_is_the_gradient_of_its_scalarisation(combiner, traits):
    scalarisation = traits["gradient_of"]
    n = 6
    for seed in SEEDS:
        centres = torch.randn(n, D, generator=_gen(seed), dtype=F64)
        params = torch.randn(M, D, generator=_gen(seed + 1), dtype=F64).requires_grad_(True)
        losses = ((params[:, None, :] - centres[None]) ** 2).sum(-1)  # [m, n]
        jac = 2 * (params[:, None, :] - centres[None])  # [m, n, d]
        (grad,) = torch.autograd.grad(scalarisation(losses.T), params)
        weights = torch.ones(M, n, dtype=F64)
        direction, _ = _combine(combiner, jac.detach(), weights, losses.detach(), params.detach())
        _close(direction, grad, atol=1e-10, rtol=1e-10)


# =============================================================================== update rules
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rule, traits", UPDATE_RULES)
def test_update_rule_shapes_first_step_and_purity(rule, traits, dtype, device):
    params = torch.randn(M, D, generator=_gen(0), dtype=F64).to(dtype=dtype, device=device)
    direction = torch.randn(M, D, generator=_gen(1), dtype=F64).to(dtype=dtype, device=device)
    p0, d0 = params.clone(), direction.clone()
    state = rule.init(params)
    for leaf in (state if isinstance(state, tuple) else ()):
        if isinstance(leaf, torch.Tensor):
            assert leaf.shape == params.shape and leaf.dtype == dtype and leaf.device.type == device
    new, _ = rule.step(params, direction, state, 0.1)
    assert new.shape == (M, D) and new.dtype == dtype and new.device.type == device
    assert torch.equal(params, p0) and torch.equal(direction, d0), "step must not modify its inputs"
    _close(new, traits["first_step"](p0, d0, 0.1), atol=1e-6 if dtype == F32 else 1e-14)
    # the step goes against the direction, coordinate by coordinate
    assert bool(((new - params) * direction <= 0).all())


@pytest.mark.parametrize("rule, traits", UPDATE_RULES)
def test_update_rule_zero_direction_leaves_params(rule, traits):
    params = torch.randn(M, D, generator=_gen(0), dtype=F64)
    state = rule.init(params)
    for _ in range(3):
        new, state = rule.step(params, torch.zeros_like(params), state, 0.5)
        assert torch.equal(new, params)


@pytest.mark.parametrize("rule, traits", UPDATE_RULES)
def test_update_rule_matches_torch_optim(rule, traits):
    params = torch.randn(M, D, generator=_gen(0), dtype=F64)
    reference = params.clone().requires_grad_(True)
    opt = traits["torch_optim"]([reference], 0.05)
    state = rule.init(params)
    for t in range(6):
        direction = torch.randn(M, D, generator=_gen(10 + t), dtype=F64)
        params, state = rule.step(params, direction, state, 0.05)
        reference.grad = direction.clone()
        opt.step()
        _close(params, reference.detach(), atol=1e-12, rtol=1e-12, msg=f"step {t}")


@pytest.mark.parametrize("rule, traits", UPDATE_RULES)
def test_update_rule_models_are_independent(rule, traits):
    """Each model (row) moves on its own: permuting the models permutes the result."""
    params = torch.randn(M, D, generator=_gen(0), dtype=F64)
    perm = torch.randperm(M, generator=_gen(3))
    s, s_p = rule.init(params), rule.init(params[perm])
    p, p_p = params, params[perm]
    for t in range(3):
        direction = torch.randn(M, D, generator=_gen(20 + t), dtype=F64)
        p, s = rule.step(p, direction, s, 0.1)
        p_p, s_p = rule.step(p_p, direction[perm], s_p, 0.1)
        _close(p_p, p[perm], atol=1e-14)


# =============================================================================== extensions
def _base_problem(n: int, fn=None) -> most.Problem:
    """Losses ``theta ** 2`` (dim = n): the extended objectives can be probed directly."""
    return most.Problem.from_function(fn or (lambda t: t**2), dim=n, n_objectives=n,
                                      names=[f"base{i}" for i in range(n)])


def _extended_count(extension, n: int) -> int:
    return extension.n_extra + (n if extension.include_original else 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("extension, traits", EXTENSIONS)
def test_extension_count_order_and_names(extension, traits, dtype):
    n = traits.get("n", 3)
    base = _base_problem(n)
    ext = extension.apply(base, _gen(0))
    n_ext = _extended_count(extension, n)
    assert ext.n_objectives == n_ext and ext.dim == base.dim
    assert base.n_objectives == n, "the base problem is left unchanged"
    assert ext.names is not None and len(ext.names) == n_ext
    params = torch.randn(4, n, generator=_gen(1), dtype=F64).to(dtype)
    losses, extended = base.loss_matrix(params), ext.loss_matrix(params)
    assert extended.shape == (n_ext, 4) and extended.dtype == dtype
    if extension.include_original:
        assert ext.names[:n] == base.names, "originals first"
        assert torch.equal(extended[:n], losses), "the original objectives come first, unchanged"
        _, jac = ext.jacobian(params)
        _, base_jac = base.jacobian(params)
        torch.testing.assert_close(jac[:, :n], base_jac)
    else:
        assert not set(ext.names) & set(base.names)


@pytest.mark.parametrize("extension, traits", EXTENSIONS)
def test_extension_is_reproducible_and_a_function_of_the_losses(extension, traits):
    n = traits.get("n", 3)
    base = _base_problem(n)
    params = torch.randn(3, n, generator=_gen(1), dtype=F64)
    first = extension.apply(base, _gen(5)).loss_matrix(params)
    assert torch.equal(extension.apply(base, _gen(5)).loss_matrix(params), first), "same seed, same problem"
    # theta and -theta have the same losses (theta ** 2): so must every added objective
    assert torch.equal(extension.apply(base, _gen(5)).loss_matrix(-params), first)


@pytest.mark.parametrize("extension, traits", EXTENSIONS)
def test_extension_objectives_are_monotone_in_the_originals(extension, traits):
    """Each added objective is a scalarisation with non-negative weights: raising any
    original loss never lowers it (so a Pareto improvement improves every mixture)."""
    n = traits.get("n", 3)
    base = _base_problem(n, fn=lambda t: t)  # losses = theta
    ext = extension.apply(base, _gen(0))
    g = _gen(2)
    low = torch.rand(8, n, generator=g, dtype=F64)
    high = low + torch.rand(8, n, generator=g, dtype=F64) * (torch.rand(8, n, generator=g) > 0.5)
    before, after = ext.loss_matrix(low), ext.loss_matrix(high)
    assert bool((after >= before - 1e-12).all())
    if traits.get("convex"):
        # convex combinations of the originals: between their smallest and largest value
        added = after[_extended_count(extension, n) - extension.n_extra:]
        assert bool((added >= high.min(1).values - 1e-12).all() and (added <= high.max(1).values + 1e-12).all())


# =============================================================================== centralised == federated
# One core: a federated run whose clients take one full-batch gradient step is the centralised
# loop on the clients' losses, to float tolerance, for the same components.
# 
# With one local epoch, a batch as large as every client and local step eta, client i's update of
# model j is ``Delta_ij = eta * grad L_i(theta_j)`` (L_i its mean cross-entropy); every combiner
# here is linear in a common scale of its rows (WeightedSum) or gives weights that do not depend
# on it (MinNorm), so the server step ``theta_j - eta_s d_j`` is the centralised step with
# ``lr = eta * eta_s``. The plan is solved on the same losses in both loops.
import most.federated as fl  # noqa: E402
from torch.nn.functional import cross_entropy  # noqa: E402

from most.federated import methods as FM  # noqa: E402

ETA, SERVER_LR, ROUNDS, M = 0.5, 0.6, 6, 3


@pytest.fixture(scope="module")
def setting():
    data = fl.fedprox_synthetic(1.0, 1.0, n_clients=9, samples_per_client=24, seed=4)
    model = fl.logistic_regression(60, 10)
    xs = [c.x_train for c in data.clients]
    ys = [c.y_train for c in data.clients]

    def losses(theta):
        return torch.stack([cross_entropy(model.logits(theta, x), y) for x, y in zip(xs, ys)])

    problem = most.Problem.from_function(losses, dim=model.dim, n_objectives=data.n_clients,
                                         init=lambda m, generator: model.init(m, generator))
    batch = max(len(y) for y in ys)
    config = fl.FederatedConfig(rounds=ROUNDS, local_epochs=1, batch_size=batch, lr=ETA, seed=3, eval_every=0)
    return data, model, problem, config


FEDERATED_PAIRS = [
    pytest.param(dict(combiner=WeightedSum()), id="MosT-mean"),
    pytest.param(dict(combiner=MinNorm()), id="MosT-min-norm"),
    pytest.param(dict(combiner=MinNorm(), weighting=GammaWeights()), id="MosT-literal"),
    pytest.param(dict(combiner=WeightedSum(), marginals=Curriculum()), id="MosT-curriculum"),
    pytest.param(dict(combiner=MinNorm(), weighting=MajorityShare(), marginals=Uniform(), diversity=0.05),
                 id="MosT-diversity"),
    pytest.param(dict(combiner=WeightedSum(), marginals=most.LoadBounds()), id="MosT-load-bounds"),
]

#: the federated runtime starts every model from the model's init; the loops are compared on the
#: balanced marginals unless a case names others (bounded loads leave ties between plans of equal
#: cost, which float32 and float64 losses can break differently). The federated re-split has no
#: centralised counterpart, so the federated runs here go without it, and the centralised ones
#: without their re-seeding
_AS_FEDERATED = dict(marginals=Uniform(), seeding=None, reseed=None)


@pytest.mark.parametrize("components", FEDERATED_PAIRS)
def test_federated_most_equals_the_centralised_loop(setting, components):
    data, model, problem, config = setting
    federated = fl.run_federated(data, model, FM.MosT(M, server_lr=SERVER_LR, warmup=None, resplit=None,
                                                      **{"marginals": Uniform(), **components}), config)
    centralised = most.MosT(n_models=M, rounds=ROUNDS, lr=ETA * SERVER_LR, seed=config.seed,
                            **{**_AS_FEDERATED, **components}).fit(problem)
    for log, record in zip(federated.history, centralised.history):
        torch.testing.assert_close(log.plan.float(), record.plan.float(), atol=1e-6, rtol=0)
    torch.testing.assert_close(federated.params, centralised.params, atol=2e-5, rtol=1e-4)
    assert not torch.allclose(federated.params, model.init(M, torch.Generator().manual_seed(config.seed)))


def test_federated_linearization_equals_the_centralised_one(setting):
    data, model, problem, config = setting
    federated = fl.run_federated(data, model, FM.Linearization(M, server_lr=SERVER_LR), config)
    centralised = most.Linearization(n_models=M, rounds=ROUNDS, lr=ETA * SERVER_LR, seed=config.seed).fit(problem)
    torch.testing.assert_close(federated.params, centralised.params, atol=2e-5, rtol=1e-4)


def test_the_server_step_is_the_update_rule(setting):
    # Adam on the server: the same rule object as the centralised loop's optimizer
    data, model, problem, config = setting
    federated = fl.run_federated(data, model, FM.MosT(M, server_lr=0.05, warmup=None, resplit=None,
                                                      marginals=Uniform(), optimizer=most.optim.Adam()), config)
    centralised = most.MosT(n_models=M, rounds=ROUNDS, lr=0.05, seed=config.seed, combiner=WeightedSum(),
                            optimizer=most.optim.Adam(), **_AS_FEDERATED).fit(problem)
    # Adam divides by the running scale of the direction, so the local step eta cancels (up to eps)
    torch.testing.assert_close(federated.params, centralised.params, atol=1e-4, rtol=1e-3)
