"""A user's bad input gets a ValueError/TypeError that names what is wrong, before any work is
done: never a NaN result, a negative norm, a silent no-op or a raw torch/numpy traceback.
One regression test per finding; tests/test_properties_inputs.py explores the same entry points
with generated inputs."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import most
import most.federated
import most.federated.methods
from most import transport
from most._validation import check_non_negative, check_positive, check_positive_int
from most.mgda import min_norm, min_norm_direction

C = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.2, 0.4]])
A = [0.5, 0.25, 0.25]
B = [0.5, 0.5]


# ---------------------------------------------------------------- 1. numeric settings
@pytest.mark.parametrize("check", [check_positive, check_non_negative])
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, np.float64("inf"), torch.tensor(math.nan)])
def test_numeric_checks_refuse_inf_and_nan(check, bad):
    with pytest.raises(ValueError, match=r"`lr` must be a (positive|non-negative) finite number; got"):
        check(bad, name="lr")


def test_numeric_checks_allow_inf_only_when_asked():
    assert check_positive(math.inf, name="cap", allow_inf=True) == math.inf
    with pytest.raises(ValueError, match="got nan"):
        check_positive(math.nan, name="cap", allow_inf=True)


@pytest.mark.parametrize("value", [np.float32(0.25), np.float64(0.25), torch.tensor(0.25), np.array(0.25)])
def test_numeric_checks_accept_numpy_and_0d_tensor_scalars(value):
    assert check_positive(value, name="x") == pytest.approx(0.25)
    assert check_non_negative(value, name="x") == pytest.approx(0.25)


@pytest.mark.parametrize("value", [np.int64(3), np.int32(3), torch.tensor(3)])
def test_int_check_accepts_numpy_and_0d_tensor_integers(value):
    assert check_positive_int(value, name="n") == 3 and type(check_positive_int(value, name="n")) is int


@pytest.mark.parametrize("bad", [True, np.bool_(True), "0.1", None, 1j, torch.tensor([0.1, 0.2])])
def test_numeric_checks_refuse_non_numbers(bad):
    with pytest.raises(ValueError, match="`x` must be a positive finite number"):
        check_positive(bad, name="x")


def test_numpy_scalar_settings_reach_the_solvers():
    res = transport.solve(C, A, B, diversity=np.float32(0.1), method="sinkhorn", reg=np.float64(0.01))
    assert torch.isfinite(res.plan).all()
    most.MosT(n_models=2, lr=np.float32(0.1), rounds=np.int64(2), diversity=np.float32(0.1))


@pytest.mark.parametrize(
    "build",
    [
        lambda: most.MosT(n_models=2, lr=math.inf),
        lambda: most.MosT(n_models=2, diversity=math.inf),
        lambda: most.MosT(n_models=2, reg=math.inf, transport="sinkhorn"),
        lambda: most.MosT(n_models=2, reg=-1.0, transport="sinkhorn"),
        lambda: most.DirichletExtension(concentration=math.inf),
        lambda: most.TchebycheffExtension(smoothing=math.nan),
    ],
)
def test_method_settings_refuse_non_finite(build):
    with pytest.raises(ValueError, match="must be a (positive|non-negative)"):
        build()


@pytest.mark.parametrize("kwargs, match", [
    (dict(optimizer="adam"), r"`optimizer` must be a most.optim.UpdateRule \(e.g. most.optim.Adam\(\)\); got 'adam'"),
    (dict(optimizer=most.optim.Adam), r"`optimizer` must be an instance, not the class most.optim.Adam"),
    (dict(extension=3), r"`extension` must be a most.DirichletExtension or most.TchebycheffExtension"),
    (dict(extension=most.DirichletExtension), r"`extension` must be an instance"),
    (dict(progress="no"), r"`progress` must be True or False; got 'no'"),
    (dict(seeding=most.KMeansSeeding), r"`seeding` must be an instance, not the class"),
    (dict(reseed=most.Reseed), r"`reseed` must be an instance, not the class"),
])
def test_method_components_of_the_wrong_kind_are_refused_when_the_method_is_built(kwargs, match):
    with pytest.raises(TypeError, match=match):
        most.MosT(n_models=2, **kwargs)
    if not {"extension", "seeding", "reseed"} & set(kwargs):  # every method shares these fields
        with pytest.raises(TypeError, match=match):
            most.Linearization(n_models=2, **kwargs)
    assert most.MosT(n_models=2, progress=np.bool_(True)).progress is True
    for until in ("0.5", True):
        with pytest.raises(ValueError, match="`until` must be a non-negative finite number"):
            most.Reseed(until=until)


# ---------------------------------------------------------------- 2. transport
def test_sinkhorn_refuses_infinite_reg():
    with pytest.raises(ValueError, match=r"`reg` must be a positive finite number; got inf"):
        transport.solve(C, A, B, method="sinkhorn", reg=float("inf"))


def test_transport_refuses_infinite_diversity():
    with pytest.raises(ValueError, match=r"`diversity` must be a non-negative finite number; got inf"):
        transport.solve(C, A, B, diversity=float("inf"))


def test_transport_never_returns_a_non_finite_plan(monkeypatch):
    from most.transport import _sinkhorn

    def broken(cost, a, b, **kw):  # a solver that breaks down
        return torch.full_like(cost, float("nan")), 1, False

    monkeypatch.setattr(transport._solve, "solve_sinkhorn", broken)  # where solve looks it up
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no "the plan satisfies the marginals" warning first
        with pytest.raises(ValueError, match=r"non-finite plan.*`reg`"):
            transport.solve(C, A, B, method="sinkhorn")
    assert _sinkhorn.solve_sinkhorn is not broken


def test_transport_refuses_complex_costs():
    with pytest.raises(TypeError, match=r"`cost` must be real; got complex"):
        transport.solve(C.to(torch.complex64) + 1j, A, B)
    with pytest.raises(TypeError, match=r"`a` must be real"):
        transport.solve(C, np.array(A, dtype=complex), B, method="sinkhorn")


@pytest.mark.parametrize("method", transport.METHODS)
def test_float16_marginals_that_sum_to_one_in_float16_are_accepted(method):
    a = torch.full((3,), 1 / 3, dtype=torch.float16)
    a = a / a.sum()  # the fix the error message suggests, in float16
    plan = transport.solve(C, a, B, method=method).plan
    assert torch.allclose(plan.sum(0), torch.tensor(B), atol=1e-6)
    assert torch.allclose(plan.sum(1).double(), torch.full((3,), 1 / 3, dtype=torch.float64), atol=1e-3)


def test_transport_cost_whose_range_overflows_is_refused():
    with pytest.raises(ValueError, match="range overflows float64"):
        transport.solve([[-1e308, 1e308], [0.0, 1.0]], [0.5, 0.5], [0.5, 0.5], method="sinkhorn")


def test_capped_transport_accepts_numpy_share():
    res = transport.solve_capped(C, A, B, max_share=np.float32(1.0))
    assert torch.isfinite(res.plan).all()


# ---------------------------------------------------------------- 3. min-norm
def test_min_norm_refuses_a_negative_diagonal():
    with pytest.raises(ValueError, match=r"not positive semi-definite.*G\[0, 0\] = -1"):
        min_norm([[-1.0]])
    with pytest.raises(ValueError, match="not positive semi-definite"):
        min_norm([[1.0, 0.0], [0.0, -1.0]])


def test_min_norm_refuses_an_indefinite_gram():
    with pytest.raises(ValueError, match="not positive semi-definite"):
        min_norm([[0.0, 1.0], [1.0, 0.0]])


@pytest.mark.parametrize("scale", [1e200, 1e300, 1e-200, 1e-310])
def test_min_norm_direction_works_at_extreme_scales(scale):
    J = torch.tensor([[scale, 0.0], [0.0, scale]], dtype=torch.float64)
    u = min_norm_direction(J)
    assert torch.allclose(u / scale, torch.tensor([0.5, 0.5], dtype=torch.float64))
    r = min_norm(J @ J.T if scale < 1e150 else torch.eye(2, dtype=torch.float64) * scale)
    assert torch.allclose(r.weights, torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert float(r.norm_sq) >= 0


def test_min_norm_direction_from_a_list_of_huge_values():
    u = min_norm_direction([[1e200, 0.0], [0.0, 1e200]])  # inf in float32: computed in float64
    assert torch.isfinite(u).all() and float(u[0]) == pytest.approx(5e199)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_min_norm_direction_refuses_non_finite_entries(bad):
    with pytest.raises(ValueError, match="non-finite value"):
        min_norm_direction(torch.tensor([[1.0, bad], [0.0, 1.0]]))


# ---------------------------------------------------------------- 4. problems
def _fit(problem, n_models=1):
    return most.MosT(n_models=n_models, rounds=2, lr=0.1).fit(problem)


_X = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    "fn, dim, n",
    [
        (lambda t: ((t - 1) ** 2).sum(-1, keepdim=True).detach(), 2, 1),  # reverse mode (jacrev)
        (lambda t: torch.cat([t, t]).detach(), 1, 2),  # forward mode (jacfwd: dim < n)
        (lambda t: torch.tensor([1.0, 2.0]), 2, 2),  # a constant
    ],
)
def test_from_function_without_gradient_path_is_refused(fn, dim, n):
    with pytest.raises(ValueError, match=r"do not depend on the parameters.*\.detach\(\)"):
        _fit(most.Problem.from_function(fn, dim=dim, n_objectives=n))


def test_from_function_calling_item_is_refused():
    problem = most.Problem.from_function(lambda t: torch.stack([(t ** 2).sum() * 0 + (t ** 2).sum().item()]),
                                         dim=2, n_objectives=1)
    with pytest.raises(ValueError, match=r"calls `\.item\(\)`"):
        _fit(problem)
    loop = most.Problem.from_function(lambda t: torch.tensor([(t ** 2).sum().item()]), dim=2, n_objectives=1,
                                      vectorize=False)
    with pytest.raises(ValueError, match="do not depend on the parameters"):
        _fit(loop)
    as_float = most.Problem.from_function(lambda t: (t ** 2).sum().item(), dim=2, n_objectives=1, vectorize=False)
    with pytest.raises(TypeError, match=r"got float.*\.item\(\)"):
        _fit(as_float)


def test_from_module_objective_without_gradient_path_is_named():
    objectives = [lambda f: f(_X).square().mean(), lambda f: f(_X).square().mean().detach()]
    problem = most.Problem.from_module(lambda: nn.Linear(3, 1), objectives, names=["ok", "frozen"])
    with pytest.raises(ValueError, match=r"objective 1 \('frozen'\)'s loss does not depend on the parameters"):
        _fit(problem)


def test_from_module_non_scalar_objective_names_objective_and_shape():
    problem = most.Problem.from_module(lambda: nn.Linear(3, 1), [lambda f: f(_X).mean(), lambda f: f(_X)])
    with pytest.raises(ValueError, match=r"objective 1 returned a tensor of shape \(8, 1\).*\.mean\(\)"):
        problem.loss_matrix(torch.zeros(1, problem.dim))


def test_from_instances_detached_loss_is_refused():
    problem = most.Problem.from_instances(lambda th, xi: (xi @ th).detach() ** 2, _X, dim=3)
    with pytest.raises(ValueError, match="instance loss does not depend on the parameters"):
        _fit(problem)


def test_integer_init_is_cast_to_float():
    problem = most.Problem.from_function(lambda t: (t - 1.0) ** 2, dim=1, n_objectives=1, init=torch.tensor([3]))
    assert problem.init.dtype == torch.get_default_dtype()
    result = _fit(problem)
    assert result.params.is_floating_point() and float(result.params[0, 0]) < 3.0


@pytest.mark.parametrize("init, err", [(torch.tensor([True]), TypeError), (torch.tensor([float("nan")]), ValueError),
                                       ("zeros", TypeError)])
def test_bad_init_is_refused_when_the_problem_is_built(init, err):
    with pytest.raises(err, match="init"):
        most.Problem.from_function(lambda t: t ** 2, dim=1, n_objectives=1, init=init)


def test_module_instance_instead_of_factory_is_refused():
    with pytest.raises(TypeError, match=r"factory.*not a module instance.*lambda: Linear"):
        most.Problem.from_module(nn.Linear(3, 1), [lambda f: f(_X).mean()])


def test_numpy_datasets_are_refused_naming_the_conversion():
    datasets = [(np.zeros((4, 3)), np.zeros(4)), (np.ones((5, 3)), np.ones(5))]
    with pytest.raises(TypeError, match=r"dataset 0 must be a tuple of tensors.*holding ndarray, ndarray\. Convert "
                                        r"arrays to tensors first.*torch\.as_tensor\(x, dtype=torch\.float32\)"):
        most.Problem.from_datasets(lambda: nn.Linear(3, 1), datasets,
                                   lambda out, y: (out.squeeze(-1) - y) ** 2)
    with pytest.raises(TypeError, match=r"holding list\.$"):  # no arrays: no word on converting them
        most.Problem.from_datasets(lambda: nn.Linear(3, 1), [([1.0],)], lambda out, y: out)


def test_single_objective_instead_of_a_list_is_refused():
    with pytest.raises(TypeError, match="sequence of callables"):
        most.Problem.from_module(lambda: nn.Linear(3, 1), lambda f: f(_X).mean())


# ---------------------------------------------------------------- 5. federated data
def _client(x, y):
    return most.federated.ClientData(x, y, x, y, x, y)


@pytest.mark.parametrize(
    "y, match",
    [
        (np.array(["cat", "dog", "cat"]), r"non-numeric values \('cat'"),
        (np.array(["cat", 1, 2], dtype=object), "non-numeric values"),
        (np.array([0.0, 0.5, 1.0]), "non-integer label 0.5"),
        ([0.0, float("nan"), 1.0], "non-integer label nan"),
    ],
)
def test_federated_labels_must_be_class_indices(y, match):
    with pytest.raises(ValueError, match=match + r".*integer class indices 0 \.\. C-1.*np\.unique"):
        _client(np.zeros((3, 2)), y)


def test_federated_object_labels_holding_integers_are_accepted():
    assert _client(np.zeros((3, 2)), np.array([0, 1, 2], dtype=object)).y_train.tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "x, match",
    [
        (np.array([["a", "b"]] * 3), "must hold numbers; got dtype <U1"),
        ([[1.0, 2.0], [3.0], [4.0, 5.0]], "ragged"),
        (np.array([[1.0, 2.0], [np.nan, 0.0], [0.0, 0.0]]), r"NaN or inf \(first in sample 1\)"),
    ],
)
def test_federated_features_must_be_finite_numbers(x, match):
    with pytest.raises(ValueError, match=match):
        _client(x, np.zeros(3, dtype=np.int64))


# ---------------------------------------------------------------- 6. federated settings
@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: most.federated.FederatedConfig(lr=math.inf), r"`lr` must be a positive finite number; got inf"),
        (lambda: most.federated.FederatedConfig(participation=True), "`participation` must be a number in"),
        (lambda: most.federated.FederatedConfig(participation="0.5"), "`participation` must be a number in"),
        (lambda: most.federated.FederatedConfig(eval_every=-1), "`eval_every` must be an int >= 0"),
        (lambda: most.federated.methods.FedAvg(n_models=2, server_lr=math.inf), "`server_lr` must be a positive finite"),
        (lambda: most.federated.methods.MosT(n_models=2, server_lr=math.nan), "`server_lr` must be a positive finite"),
        (lambda: most.federated.methods.WarmUp(rounds=1.5), "`rounds` must be an int >= 0"),
        (lambda: most.federated.methods.Linearization(n_models=2, concentration=math.inf), "`concentration`"),
    ],
)
def test_federated_settings_are_refused_at_construction(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_federated_toml_with_infinite_server_lr_is_refused_when_loaded(tmp_path):
    from most.config import ConfigError
    from most.experiments.spec import load_experiment

    path = tmp_path / "exp.toml"
    path.write_text('[data]\nname = "fedprox_synthetic"\nmodel_shift = 0.0\nfeature_shift = 0.0\n[model]\n'
                    'name = "logistic_regression"\n[federated]\nrounds = 2\nlr = inf\n'
                    '[methods.MosT]\nn_models = 2\nserver_lr = 1.0\n')
    with pytest.raises(ConfigError, match=r"`lr` must be a positive finite number; got inf"):
        load_experiment(path)
    path.write_text(path.read_text().replace("lr = inf", "lr = 0.1").replace("server_lr = 1.0", "server_lr = inf"))
    with pytest.raises(ConfigError, match=r"`server_lr` must be a positive finite number; got inf"):
        load_experiment(path)


@pytest.mark.parametrize("method", ["sinkhorn", "newton", "ipot"])
def test_non_convergence_warning_is_truthful(method):
    with pytest.warns(most.ConvergenceWarning, match="the plan satisfies the marginals"):
        plan = transport.solve(C, A, B, method=method, max_iter=1, reg=1e-4).plan
    assert torch.isfinite(plan).all() and (plan >= 0).all()
    assert torch.allclose(plan.sum(1), torch.tensor(A), atol=1e-6)
    assert torch.allclose(plan.sum(0), torch.tensor(B), atol=1e-6)


# ----------------------------------------------------------------------------- seeds and model factories
@pytest.mark.parametrize("seed", [1.5, "3", True, 2**64, None, -1])
def test_a_seed_that_torch_cannot_take_is_refused_up_front(seed):
    import most.federated as fl

    with pytest.raises(ValueError, match="`seed` must be an int"):
        most.MosT(n_models=2, seed=seed)
    with pytest.raises(ValueError, match="`seed` must be an int"):
        fl.FederatedConfig(seed=seed)


def test_federated_model_refuses_a_module_instance_for_its_factory():
    import most.federated as fl

    with pytest.raises(TypeError, match=r"not a module; pass e\.g\. `lambda: Linear\(\.\.\.\)`"):
        fl.FlatModel(torch.nn.Linear(3, 2))
    with pytest.raises(TypeError, match="must be a function that returns an nn.Module"):
        fl.FlatModel(3)


# ----------------------------------------------------------------------------- meta tensors, bounds, project, losses
def _quad(t):
    return ((t - torch.arange(6.0).unsqueeze(1) / 3) ** 2).sum(-1)


@pytest.mark.parametrize(
    "call",
    [
        lambda: transport.solve(C.to("meta"), A, B),
        lambda: transport.solve(C, torch.tensor(A).to("meta"), B, method="sinkhorn"),
        lambda: min_norm(torch.eye(3).to("meta")),
        lambda: min_norm_direction(torch.randn(3, 4).to("meta")),
        lambda: min_norm(torch.eye(3), mask=torch.ones(3, dtype=torch.bool, device="meta")),
        lambda: _fit(most.Problem.from_function(_quad, 3, 6, init=torch.zeros(3, device="meta"))),
        lambda: _fit(most.Problem.from_function(_quad, 3, 6, init=lambda m, g: torch.zeros(m, 3, device="meta"))),
        lambda: most.Problem.from_instances(lambda th, xi: (xi @ th) ** 2, _X.to("meta"), dim=3),
        lambda: most.Problem.from_function(_quad, 3, 6, bounds=(torch.zeros(3, device="meta"), 1.0)),
    ],
)
def test_meta_tensors_are_refused_by_name(call):
    with pytest.raises(ValueError, match=r"on the 'meta' device.*holds no values"):
        call()


@pytest.mark.parametrize(
    "bounds, match",
    [
        ((torch.zeros(2), torch.ones(2)), r"`bounds\[0\]` \(the lower bound\) must be a number or a tensor of shape \[3\].*got shape \[2\]"),
        (("a", "b"), r"`bounds\[0\]`.*got 'a' \(a str"),
        (1.0, r"`bounds` must be a pair \(lower, upper\).*got 1\.0"),
        ((0.0, 1.0, 2.0), r"pair.*with 3 entries"),
        ((math.nan, 1.0), r"`bounds\[0\]` \(the lower bound\) contains NaN"),
        ((0.0, torch.tensor([1.0, math.nan, 1.0])), r"`bounds\[1\]` \(the upper bound\) contains NaN"),
        ((1.0, 0.0), r"lower <= upper.*coordinate 0 has lower 1 > upper 0"),
        ((-math.inf, 1.0), r"infinite bound and no `init`"),
    ],
)
def test_bad_bounds_are_refused_when_the_problem_is_built(bounds, match):
    with pytest.raises(ValueError, match=match):
        most.Problem.from_function(_quad, 3, 6, bounds=bounds)


def test_good_bounds_are_accepted():
    most.Problem.from_function(_quad, 3, 6, bounds=(torch.zeros(3), 1.0))
    most.Problem.from_function(_quad, 3, 6, bounds=(-math.inf, 1.0), init=torch.zeros(3))
    result = _fit(most.Problem.from_function(_quad, 3, 6, bounds=(np.zeros(3), torch.ones(1))), n_models=2)
    assert ((result.params >= 0) & (result.params <= 1)).all()


@pytest.mark.parametrize("method", [most.MosT, most.MGDA, most.Linearization])
@pytest.mark.parametrize("fn", [lambda t: (_quad(t) * 100).long(), lambda t: _quad(t) > 1])
def test_integer_or_bool_losses_are_refused_naming_the_dtype(method, fn):
    with pytest.raises(TypeError, match=r"losses of dtype torch\.(int64|bool); losses must be floating point"):
        method(n_models=2, rounds=2).fit(most.Problem.from_function(fn, 3, 6))


def test_integer_losses_of_module_and_instance_problems_are_refused():
    problem = most.Problem.from_module(lambda: nn.Linear(3, 1), [lambda f: f(_X).mean(), lambda f: f(_X).mean() > 0],
                                       names=["ok", "flag"])
    with pytest.raises(TypeError, match=r"Objective 1 \('flag'\) returned losses of dtype torch\.bool"):
        _fit(problem)
    problem = most.Problem.from_instances(lambda th, xi: (xi @ th).round().long(), _X, dim=3)
    with pytest.raises(TypeError, match=r"instance loss returned losses of dtype torch\.int64"):
        _fit(problem)


@pytest.mark.parametrize(
    "project, err, match",
    [
        (lambda x: None, TypeError, r"`project` must return a tensor.*got NoneType.*forget to `return`"),
        (lambda x: x * math.nan, ValueError, r"`project` returned NaN or inf"),
        (lambda x: x[:1], ValueError, r"`project` must return the shape it was given, \[m, dim\] = \[2, 3\].*got \[1, 3\]"),
        (lambda x: x.long(), TypeError, r"`project` must return floating-point parameters; got dtype torch\.int64"),
    ],
)
@pytest.mark.parametrize("method", [most.MosT, most.MGDA])
def test_what_project_returns_is_checked(project, err, match, method):
    with pytest.raises(err, match=match):
        method(n_models=2, rounds=2).fit(most.Problem.from_function(_quad, 3, 6, project=project))


def test_project_that_is_not_callable_is_refused_when_the_problem_is_built():
    with pytest.raises(TypeError, match=r"`project` must be a callable.*got int 5"):
        most.Problem.from_function(_quad, 3, 6, project=5)


def test_module_with_batch_norm_trains_with_or_without_running_stats():
    tracked = most.Problem.from_module(lambda: nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)),
                                       [lambda f: f(_X).square().mean(), lambda f: (f(_X) - 1).square().mean()])
    assert set(_fit(tracked, n_models=2).statistics) == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    ok = most.Problem.from_module(lambda: nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2, track_running_stats=False)),
                                  [lambda f: f(_X).square().mean(), lambda f: (f(_X) - 1).square().mean()])
    assert torch.isfinite(_fit(ok, n_models=2).losses).all()


@pytest.mark.parametrize(
    "names, match",
    [
        ("abcdef", r"got the single string 'abcdef'"),
        ([1, 2, 3, 4, 5, 6], r"`names` must hold strings; entry 0 is 1 \(int\)"),
        (["a", "b"], r"`names` has 2 entries but there are 6 objectives"),
        (5, r"`names` must be a sequence of strings.*got int"),
    ],
)
def test_names_must_be_one_string_per_objective(names, match):
    with pytest.raises(ValueError, match=match):
        most.Problem.from_function(_quad, 3, 6, names=names)


def test_module_and_instance_problems_check_their_names():
    with pytest.raises(ValueError, match=r"got the single string 'ab'"):
        most.Problem.from_module(lambda: nn.Linear(3, 1), [lambda f: f(_X).mean()] * 2, names="ab")
    with pytest.raises(ValueError, match=r"entry 1 is None"):
        most.Problem.from_instances(lambda th, xi: (xi @ th) ** 2, _X[:2], dim=3, names=["a", None])


# ----------------------------------------------------------------------------- variants and metrics
@pytest.mark.parametrize("base", [most.Linearization(n_models=2), most.MGDA(n_models=2)])
def test_a_variant_of_another_method_than_most_is_refused(base):
    with pytest.raises(TypeError, match=rf"variants apply to a MosT configuration.*got {type(base).__name__}"):
        most.variants.apply("L", base)
    with pytest.raises(ValueError, match="Unknown variant"):
        most.variants.apply(["L"], most.MosT(n_models=2))


_FRONT = torch.tensor([[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]])


@pytest.mark.parametrize(
    "front, reference, k, match",
    [
        (_FRONT, [2, 2], 0, r"`k` must be an int >= 1; got 0"),
        (_FRONT, [2, 2], -1, r"`k` must be an int >= 1"),
        (_FRONT, [2, 2], 2.5, r"`k` must be an int >= 1; got 2\.5"),
        (torch.rand(5, 3), [1, 1, 1], 2, r"`reference` must be a point of 2 objectives"),
        (torch.rand(5, 3), [1, 1], 2, r"`front` must have shape \[N, 2\].*got shape \(5, 3\)"),
        (torch.zeros(4), [1, 1], 2, r"`front` must have shape \[N, 2\]"),
        (_FRONT, [2, math.nan], 2, r"`reference` must be finite"),
        (_FRONT * math.nan, [2, 2], 2, r"`front` contains NaN or inf"),
        ([["a", "b"]], [2, 2], 2, r"`front` must be a tensor or array of real numbers"),
    ],
)
def test_best_hypervolume_2d_checks_its_inputs(front, reference, k, match):
    with pytest.raises(ValueError, match=match):
        most.metrics.best_hypervolume_2d(front, reference, k)


def test_best_hypervolume_2d_of_an_empty_front_or_one_outside_the_box_is_zero():
    assert most.metrics.best_hypervolume_2d(torch.zeros(0, 2), [1, 1], 2) == 0.0
    assert most.metrics.best_hypervolume_2d(_FRONT + 5, [1, 1], 2) == 0.0
    assert most.metrics.best_hypervolume_2d(_FRONT, [2, 2], 1) == pytest.approx(2.25)
    assert most.metrics.best_hypervolume_2d(_FRONT, [2, 2], 5) == pytest.approx(3.25)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: most.metrics.worst_fraction_mean([], 0.2), r"`values` must be a non-empty vector"),
        (lambda: most.metrics.worst_fraction_mean([[1.0, 2.0]], 0.5), r"`values` must be a non-empty vector"),
        (lambda: most.metrics.worst_fraction_mean([1.0, 2.0], 0), r"`fraction` must be a positive"),
        (lambda: most.metrics.worst_fraction_mean([1.0, 2.0], 1.5), r"`fraction` must be in \(0, 1\]"),
        (lambda: most.metrics.worst_fraction_mean([1.0, math.nan], 0.5), r"`values` contains NaN"),
        (lambda: most.metrics.hypervolume([[0.5, 0.5]], [1.0, math.nan]), r"`reference` must be finite"),
        (lambda: most.metrics.hypervolume([[0.5, 0.5]], [[1.0, 1.0]]), r"`reference` must be a point"),
        (lambda: most.metrics.worst_objective(torch.zeros(0, 2)), r"`losses` must be a loss matrix"),
    ],
)
def test_metrics_refuse_empty_or_misshapen_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------- scikit-learn scale
def _sk_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    g = np.repeat(np.arange(3), 10)
    return X, X[:, 0] + g, g


@pytest.mark.parametrize("what, kind", [("X", "regressor"), ("y", "regressor"), ("X", "classifier")])
def test_sklearn_fit_refuses_data_whose_scale_overflows(what, kind):
    from most.sklearn import MosTClassifier, MosTRegressor

    X, y, g = _sk_data()
    if kind == "classifier":  # class labels are not standardised: only X can overflow
        est, y = MosTClassifier(n_models=2, rounds=2, random_state=0), y > 1
    else:
        est = MosTRegressor(n_models=2, rounds=2, random_state=0)
    X, y = (X * 1e200, y) if what == "X" else (X, y * 1e200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow RuntimeWarning either
        with pytest.raises(ValueError, match=rf"`{what}` is too large to standardise in float64: column 0.*Rescale it"):
            est.fit(X, y, groups=g)


def test_sklearn_predict_never_returns_non_finite_values():
    from most.sklearn import MosTRegressor

    X, y, g = _sk_data()
    est = MosTRegressor(n_models=2, rounds=2, random_state=0).fit(X, y * 1e150, groups=g)
    assert np.isfinite(est.predict(X[:3], groups=g[:3])).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"prediction for sample 1 is not finite.*units used in fit"):
            est.predict(np.array([[0.0, 0.0], [1e200, -1e200]]), groups=g[:2])


def test_best_hypervolume_2d_caps_k_at_the_front_size():
    # k far above the number of points used to loop k times (a hang for k = 10**9)
    front = [[0.1, 0.9], [0.9, 0.1]]
    expected = most.metrics.best_hypervolume_2d(front, [1, 1], 2)
    assert most.metrics.best_hypervolume_2d(front, [1, 1], 10**9) == expected
    assert most.metrics.best_hypervolume_2d(_FRONT, [2, 2], 10**12) == pytest.approx(3.25)


@pytest.mark.parametrize("call", [
    lambda: most.metrics.hypervolume(np.array([[0.0, 0.0]]), [1e200, 1e200]),
    lambda: most.metrics.best_hypervolume_2d([[0.0, 0.0]], [1e200, 1e200], 1),
])
def test_a_hypervolume_that_overflows_float64_is_refused_not_returned_as_inf(call):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow RuntimeWarning either
        with pytest.raises(ValueError, match=r"hypervolume overflows float64.*Rescale the objectives"):
            call()


@pytest.mark.parametrize("kind, value", [
    ("assignment", lambda losses, round, total, previous=None: losses),
    ("weighting", lambda plan: plan.T),
    ("combiner", lambda jacobian, weights, **kw: (jacobian.sum(1), weights)),
])
def test_run_refuses_a_component_that_does_not_subclass_its_base(kind, value):
    """The loop calls hooks declared on the component bases (``reset``, ``resolve``, ...), so a
    plain callable is refused before any work, naming the base to subclass."""
    problem = most.Problem.from_function(lambda x: (x - torch.arange(3.0)[:, None]).pow(2).sum(1), dim=2,
                                         n_objectives=3)
    parts = dict(assignment=most.methods.TransportAssignment(), weighting=most.MajorityShare(),
                 combiner=most.WeightedSum())
    parts[kind] = value
    with pytest.raises(TypeError, match=rf"`{kind}` must be a most\.methods\.{kind.title()}"):
        most.run(problem, n_models=2, rounds=1, inner_steps=1, lr=0.1, **parts)


def test_a_module_on_two_devices_is_refused_naming_a_tensor_on_each_and_the_fix():
    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(3, 4)
            self.head = nn.Linear(4, 1, device="meta")  # as a layer added after .to(device)

        def forward(self, x):
            return self.head(self.body(x))

    xs = [torch.randn(5, 3) for _ in range(2)]
    with pytest.raises(ValueError, match=r"2 devices \('body.weight' on cpu; 'head.weight' on meta.*"
                                         r"lambda: Net\(\).to\(device\)"):
        most.Problem.from_module(Split, [lambda f, x=x: f(x).pow(2).mean() for x in xs])
    with pytest.raises(ValueError, match="2 devices"):
        most.Problem.from_datasets(Split, [(x, torch.zeros(5, 1)) for x in xs],
                                   lambda out, y: (out - y).pow(2).sum(-1))


def test_problems_and_baselines_refuse_bad_values_where_they_are_given():
    from most.baselines import STCHSetCombiner, TCHSetCombiner
    from most.problems import mixed_regression, quadratic_clusters, zafar_synthetic, zdt, zdt_front

    for build in (quadratic_clusters, mixed_regression):
        for seed in (1.5, True, -1, 2**64):
            with pytest.raises(ValueError, match=r"`seed` must be an int in \[0, 2\*\*64\)"):
                build(seed=seed)
    with pytest.raises(ValueError, match=r"`n_groups` \(3\) must be at most `n_objectives` \(2\)"):
        mixed_regression(n_objectives=2, n_groups=3)  # group 2 would hold a hidden model no data comes from
    assert mixed_regression(n_objectives=3, n_groups=3).betas.shape[0] == 3
    assert torch.equal(quadratic_clusters(seed=np.int64(3)).loss_matrix(torch.zeros(1, 2)),
                       quadratic_clusters(seed=3).loss_matrix(torch.zeros(1, 2)))
    a, b = zafar_synthetic(50, disc_factor=np.float32(0.5), seed=1), zafar_synthetic(50, disc_factor=0.5, seed=1)
    assert torch.equal(a.X, b.X) and torch.equal(a.z, b.z)
    for seed in (None, -1, 1.5):
        with pytest.raises(ValueError, match=r"`seed` must be an int"):
            zafar_synthetic(50, seed=seed)
    with pytest.raises(ValueError, match=r"`seed` must be an int"):
        b.split(seed=-1)
    for name in (1, None):
        with pytest.raises(ValueError, match="Unknown ZDT problem"):
            zdt(name)
    assert zdt_front("ZDT1").shape == zdt_front("zdt1").shape
    with pytest.raises(ValueError, match="`n_points` must be an int >= 2"):
        zdt_front("zdt1", -3)
    for combiner in (TCHSetCombiner, STCHSetCombiner):
        with pytest.raises(ValueError, match="`preference` must be non-negative"):
            combiner(preference=(-1.0, -1.0))
        with pytest.raises(ValueError, match="`ideal` contains NaN or inf"):
            combiner(ideal=(float("nan"), 0.0))
    # the centralised baselines' components are built (and checked) with the method
    with pytest.raises(ValueError, match="`concentration` must be a positive number"):
        most.Linearization(n_models=2, concentration=-1)
    with pytest.raises(ValueError, match="`concentration` must be a positive number"):
        most.WeightedMGDA(n_models=2, concentration=0)
    with pytest.raises(ValueError, match="max_iter"):
        most.MGDA(n_models=2, max_iter=-5)


@pytest.mark.parametrize("bad", ["print", [], 42])
def test_a_callback_that_cannot_be_called_is_refused_before_the_first_round(bad):
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    method = most.MosT(n_models=2, rounds=3, lr=0.1)
    data = most.federated.fedprox_synthetic(0, 0, n_clients=4, samples_per_client=20, seed=0)
    model, fed = most.federated.logistic_regression(60, 10), most.federated.methods.FedAvg(1)
    config = most.federated.FederatedConfig(rounds=1)
    calls = [(lambda: method.fit(problem, callback=bad), r"`callback` must be a function called as "
                                                        r"callback\(record, params\)"),
             (lambda: most.fit_batch(problem, [method, method], callbacks=[None, bad]), r"`callbacks\[1\]`"),
             (lambda: most.federated.run_federated(data, model, fed, config, callback=bad), r"callback\(log, params\)"),
             (lambda: most.federated.run_batch(data, model, [(fed, config)], callback=bad),
              r"callback\(r, log, params\)")]
    for call, message in calls:
        with pytest.raises(TypeError, match=message + f".*; got {re.escape(repr(bad))} \\({type(bad).__name__}\\)"):
            call()


def test_extension_and_curriculum_settings_are_checked_when_made():
    from most import Curriculum, DirichletExtension, TchebycheffExtension

    for bad in ((0.0, math.nan), (0.0, math.inf), "ab", 0.0, ()):
        with pytest.raises(ValueError, match="`ideal` must give one finite number per objective"):
            TchebycheffExtension(ideal=bad)
    # an array or tensor is a setting like a tuple: equal ones compare equal (fit_batch shares the extended problem)
    for same in (np.zeros(2), torch.zeros(2), [0, 0], (np.float32(0), 0.0)):
        assert TchebycheffExtension(ideal=same) == TchebycheffExtension(ideal=(0.0, 0.0))
    for cls in (DirichletExtension, TchebycheffExtension):
        with pytest.raises(TypeError, match="`include_original` must be True or False"):
            cls(include_original="false")
    for bad in ("0.5", None, True):
        with pytest.raises(ValueError, match="`start` must be a number in \\[0, 1\\]"):
            Curriculum(start=bad)
    with pytest.raises(ValueError, match="must lie in \\[0, 1\\]"):
        Curriculum(end=1.5)
    assert Curriculum(start=np.float32(0.5)).start == 0.5


def test_fairness_split_fractions_are_three_numbers():
    data = most.problems.zafar_synthetic(n_samples=200, seed=0)
    for bad in (0.6, "0.6", ("0.6", "0.2", "0.2")):
        with pytest.raises(ValueError, match="`fractions` must be three positive numbers"):
            data.split_indices(fractions=bad)
    same = data.split_indices(seed=1, fractions=np.array([0.6, 0.2, 0.2]))
    assert all(torch.equal(same[k], v) for k, v in data.split_indices(seed=1).items())


@pytest.mark.parametrize("module, name, args", [
    ("most.federated.data", "load_fashion_mnist", ()),
    ("most.federated.data", "load_femnist", ()),
    ("most.problems", "load_superglue", ("boolq",)),
    ("most.problems", "load_german_credit", ()),
    ("most.problems", "load_office_caltech10", ()),
    ("most.prompts", "load_encoder", ()),
])
@pytest.mark.parametrize("bad", [5, ["data"], b"data"])
def test_loaders_refuse_a_path_that_is_not_a_path_by_name(module, name, args, bad):
    import importlib

    if name == "load_encoder":
        pytest.importorskip("transformers")
    load = getattr(importlib.import_module(module), name)
    with pytest.raises(TypeError, match=r"`path` must be the path of .* \(a str or pathlib.Path\); got"):
        load(*args, bad)
