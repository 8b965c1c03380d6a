"""Problem.from_datasets (most._datasets): many objectives with data of their own, vectorised.

The builder must compute what the one-callable-per-objective problem (Problem.from_module)
computes, for every evaluation the round loop asks; draw mini-batches reproducibly from the
run's generator (resumable, batched runs equal to their fits); and refuse bad data before
any work, naming the objective."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import most
from most.evaluators import _datasets
from tests._shared import stopped_then_resumed


def _squared(out, y):
    return ((out - y) ** 2).sum(-1)


def _cross_entropy(out, y):
    return F.cross_entropy(out, y, reduction="none")


def _regression(lengths=(7, 20, 3, 12, 9), features=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(k, features, generator=g), torch.randn(k, 2, generator=g)) for k in lengths]


def _classification(lengths=(15, 6, 22, 10), features=5, classes=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(k, features, generator=g), torch.randint(0, classes, (k,), generator=g)) for k in lengths]


def _per_objective(tasks, loss):
    return [lambda f, x=x, y=y: loss(f(x), *y if isinstance(y, tuple) else (y,)).mean() for x, y in tasks]


def _mlp(features=4, out=2):
    return lambda: nn.Sequential(nn.Linear(features, 6), nn.Tanh(), nn.Linear(6, out))


def _images(lengths=(9, 14, 5), seed=2):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(k, 2, 3, generator=g), torch.randint(0, 3, (k,), generator=g)) for k in lengths]


def _sequences(lengths=(4, 7, 6), seed=3):  # nn.Linear over the last axis of [rows, 5, 4]: not one affine map a row
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(k, 5, 4, generator=g), torch.randn(k, 5, 2, generator=g)) for k in lengths]


CASES = {
    "regression": (_regression, _squared, _mlp(4, 2)),
    "classification": (_classification, _cross_entropy, _mlp(5, 3)),
    "linear": (_regression, _squared, lambda: nn.Linear(4, 2)),  # the affine path: one product for all models
    "flatten-linear": (_images, _cross_entropy, lambda: nn.Sequential(nn.Flatten(), nn.Linear(6, 3))),
    "linear-on-sequences": (_sequences, lambda out, y: ((out - y) ** 2).sum((-2, -1)), lambda: nn.Linear(4, 2)),
}


#: the cases whose module is one affine map of each row: every model's outputs from one product
AFFINE = {"linear", "flatten-linear"}


@pytest.fixture(params=sorted(CASES))
def pair(request):
    data, loss, model = CASES[request.param]
    tasks = data()
    fast = most.Problem.from_datasets(model, tasks, loss)
    assert (fast.evaluation._affine is not None) == (request.param in AFFINE)
    return fast, most.Problem.from_module(model, _per_objective(tasks, loss))


def _params(problem, m=3, seed=0):
    return problem.initial_params(m, torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- equal to from_module
def test_every_evaluation_equals_the_one_callable_per_objective_problem(pair):
    fast, slow = pair
    assert (fast.n_objectives, fast.dim) == (slow.n_objectives, slow.dim)
    params = _params(fast)
    torch.testing.assert_close(fast.loss_matrix(params), slow.loss_matrix(params))
    w = torch.rand(3, fast.n_objectives, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(fast.weighted_gradients(params, w)[1], slow.weighted_gradients(params, w)[1])
    n = fast.n_objectives
    rows = torch.tensor([[0, 2 % n, 4 % n], [1, 1, 3 % n], [3 % n, 0, 0]])
    for a, b in zip(fast.active_jacobian(params, rows), slow.active_jacobian(params, rows)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(fast.active_gradients(params, rows), slow.active_gradients(params, rows))
    for a, b in zip(fast.jacobian(params), slow.jacobian(params)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(fast.fn(params[0]), slow.fn(params[0]))


@pytest.mark.parametrize("method", [most.MosT, most.MGDA, most.Linearization])
def test_a_fit_ends_where_the_one_callable_per_objective_fit_ends(pair, method):
    fast, slow = pair
    a = method(n_models=2, rounds=15, lr=0.05, seed=3).fit(fast)
    b = method(n_models=2, rounds=15, lr=0.05, seed=3).fit(slow)
    torch.testing.assert_close(a.params, b.params, atol=1e-5, rtol=1e-4)
    assert torch.equal(a.assignment.argmax(1), b.assignment.argmax(1))


def test_stacked_rows_with_an_objective_index_equal_the_list_of_datasets():
    tasks = _regression()
    x = torch.cat([t[0] for t in tasks])
    y = torch.cat([t[1] for t in tasks])
    index = torch.cat([torch.full((len(t[0]),), i) for i, t in enumerate(tasks)])
    shuffle = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    stacked = most.Problem.from_datasets(_mlp(), (x[shuffle], y[shuffle]), _squared, objective_index=index[shuffle])
    listed = most.Problem.from_datasets(_mlp(), tasks, _squared)
    params = _params(listed)
    torch.testing.assert_close(stacked.loss_matrix(params), listed.loss_matrix(params))
    rows = torch.tensor([[4, 0], [2, 2], [1, 3]])
    torch.testing.assert_close(stacked.active_gradients(params, rows), listed.active_gradients(params, rows))


def test_the_mean_weighs_every_row_of_its_own_dataset_once():
    # per-row loss = the target itself: objective i's loss is the mean of dataset i's targets
    tasks = [(torch.zeros(k, 1), torch.arange(k, dtype=torch.float32) + 10 * i) for i, k in enumerate((1, 4, 9))]
    problem = most.Problem.from_datasets(lambda: nn.Linear(1, 1), tasks, lambda out, y: out[:, 0] * 0 + y)
    losses = problem.loss_matrix(torch.zeros(2, 2))
    torch.testing.assert_close(losses[:, 0], torch.tensor([0.0, 11.5, 24.0]))


def test_evaluations_in_pieces_equal_one_pass(monkeypatch):
    fast = most.Problem.from_datasets(_mlp(), _regression(), _squared)
    params = _params(fast)
    w = torch.rand(3, fast.n_objectives, generator=torch.Generator().manual_seed(1))
    whole = fast.loss_matrix(params), fast.weighted_gradients(params, w)[1]
    rows = torch.arange(fast.n_objectives).expand(3, -1)
    jac = fast.active_gradients(params, rows)
    monkeypatch.setattr(_datasets, "_PASS_VALUES", 64)  # a few rows a piece
    assert len(fast.evaluator._chunks(3, fast.evaluator.all)) > 3
    torch.testing.assert_close(fast.loss_matrix(params), whole[0])
    torch.testing.assert_close(fast.weighted_gradients(params, w)[1], whole[1])
    torch.testing.assert_close(fast.active_gradients(params, rows), jac)


def test_token_inputs_are_counted_through_the_embedding_so_large_passes_run_in_pieces(monkeypatch):
    # the chunk size comes from a pass over two zero inputs of the data's dtype: float zeros
    # would fail in nn.Embedding and leave only the input ids counted (one pass for all rows)
    class Tokens(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 2)

        def forward(self, x):
            return self.head(self.embed(x).mean(1))

    g = torch.Generator().manual_seed(0)
    tasks = [(torch.randint(0, 50, (40, 8), generator=g), torch.randint(0, 2, (40,), generator=g)) for _ in range(3)]
    problem = most.Problem.from_datasets(Tokens, tasks, lambda out, y: F.cross_entropy(out, y, reduction="none"))
    assert problem.evaluator._values_per_row() == 2 * (8 * 16 + 2)  # the embeddings and the logits, twice
    params = _params(problem)
    whole = problem.loss_matrix(params)
    monkeypatch.setattr(_datasets, "_PASS_VALUES", 3 * 10 * 260)  # ten rows a piece
    assert len(problem.evaluator._chunks(3, problem.evaluator.all)) == 12
    torch.testing.assert_close(problem.loss_matrix(params), whole)


def test_a_double_precision_module_is_counted_through_its_layers():
    # the pass that sizes the pieces runs the module with zeros of its parameters' dtype and the
    # data's: float32 parameters against float64 data would fail and count the inputs alone
    net = lambda: nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Flatten(), nn.Linear(4 * 36, 2)).double()  # noqa: E731
    g = torch.Generator().manual_seed(0)
    tasks = [(torch.randn(5, 1, 6, 6, generator=g, dtype=torch.float64), torch.randint(0, 2, (5,), generator=g))
             for _ in range(2)]
    problem = most.Problem.from_datasets(net, tasks, lambda out, y: F.cross_entropy(out, y, reduction="none"))
    assert problem.evaluator._values_per_row() == 2 * (4 * 36 + 4 * 36 + 2)  # conv, flatten, logits; twice


# ----------------------------------------------------------------------------- mini-batches
def _marked(lengths=(5, 8, 6)):
    """Objective i's rows have targets 100 i + r (r their row): a loss equal to the target shows the rows drawn."""
    return [(torch.zeros(k, 1), 100.0 * i + torch.arange(k, dtype=torch.float32)) for i, k in enumerate(lengths)]


def _reveal(out, y):
    return out[:, 0] * 0 + y


def test_mini_batches_are_rows_of_the_objective_drawn_without_replacement_from_the_generator():
    tasks = _marked()
    problem = most.Problem.from_datasets(lambda: nn.Linear(1, 1), tasks, _reveal, batch_size=4)
    assert problem.stochastic
    evaluator = problem.evaluator
    draw = evaluator.draw(torch.Generator().manual_seed(0))
    for i, (_, y) in enumerate(tasks):
        picked = torch.cat(evaluator.data[1:])[draw.slots[i]]
        assert len(set(picked.tolist())) == 4 and all(100 * i <= v < 100 * i + len(y) for v in picked.tolist())
    one = problem.loss_matrix(torch.zeros(1, 2), generator=torch.Generator().manual_seed(5))
    again = problem.loss_matrix(torch.zeros(1, 2), generator=torch.Generator().manual_seed(5))
    other = problem.loss_matrix(torch.zeros(1, 2), generator=torch.Generator().manual_seed(6))
    assert torch.equal(one, again) and not torch.equal(one, other)
    exact = torch.tensor([[2.0], [103.5], [202.5]])
    torch.testing.assert_close(problem.loss_matrix(torch.zeros(1, 2)), exact)  # no generator: every row


def test_a_batch_as_large_as_every_dataset_is_the_exact_loss():
    tasks = _regression(lengths=(6, 6, 6))
    full = most.Problem.from_datasets(_mlp(), tasks, _squared)
    batched = most.Problem.from_datasets(_mlp(), tasks, _squared, batch_size=6)
    params = _params(full)
    torch.testing.assert_close(batched.loss_matrix(params, generator=torch.Generator().manual_seed(0)),
                               full.loss_matrix(params))


def test_a_mini_batch_run_is_reproducible_and_resumes_to_its_uninterrupted_result(tmp_path):
    problem = most.Problem.from_datasets(_mlp(), _regression(), _squared, batch_size=3)
    method = most.MosT(n_models=2, rounds=8, lr=0.05, seed=0)
    reference = method.fit(problem)
    assert torch.equal(method.fit(problem).params, reference.params)
    assert torch.equal(stopped_then_resumed(method, problem, tmp_path / "c", every=3, at=4).params, reference.params)
    # the final losses are exact (every row), as the selection of a model per objective needs
    torch.testing.assert_close(reference.losses, problem.loss_matrix(reference.params))


def test_mini_batch_runs_in_a_batch_end_as_their_own_fits():
    problem = most.Problem.from_datasets(_mlp(), _regression(), _squared, batch_size=2)
    runs = [most.MosT(n_models=2, rounds=6, lr=0.05, seed=s) for s in range(3)] + [
        most.MGDA(n_models=2, rounds=6, lr=0.05, seed=7)]
    for method, result in zip(runs, most.fit_batch(problem, runs)):
        assert torch.equal(result.params, method.fit(problem).params), method


# ----------------------------------------------------------------------------- real networks
def test_frozen_parameters_are_not_trained_and_not_counted():
    def model():
        net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
        net[0].requires_grad_(False)
        return net

    tasks = _regression()
    for problem in (most.Problem.from_datasets(model, tasks, _squared),
                    most.Problem.from_module(model, _per_objective(tasks, _squared))):
        assert problem.dim == 6 * 2 + 2
        assert problem.coordinates("last") == (12, 14)
        with pytest.raises(ValueError, match="'0.weight'.*requires_grad=False"):
            problem.coordinates("0.weight")
        result = most.MosT(n_models=2, rounds=5, lr=0.1, seed=0).fit(problem)
        modules = problem.to_modules(result.params)
        for module in modules:
            assert torch.equal(module[0].weight, problem.template[0].weight)  # the template's, unchanged
        assert not torch.equal(modules[0][2].weight, modules[1][2].weight)
        x, y = tasks[1]
        torch.testing.assert_close(_squared(modules[1](x), y).mean(), result.losses[1, 1])


def test_normalisation_in_evaluation_mode_uses_its_stored_statistics_as_a_plain_module_does():
    def model():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
        with torch.no_grad():
            net[1].running_mean.uniform_(-1, 1)
            net[1].running_var.uniform_(0.5, 2)
        net[1].eval()
        return net

    tasks = _regression()
    problem = most.Problem.from_datasets(model, tasks, _squared)
    result = most.MosT(n_models=2, rounds=5, lr=0.1, seed=0).fit(problem)
    for j, module in enumerate(problem.to_modules(result.params)):
        assert not module[1].training
        for i, (x, y) in enumerate(tasks):
            torch.testing.assert_close(_squared(module(x), y).mean(), result.losses[i, j])


# ----------------------------------------------------------------------------- bad input
def _bad(match, *args, **kwargs):
    with pytest.raises((ValueError, TypeError), match=match):
        most.Problem.from_datasets(*args, **kwargs)


def test_bad_datasets_are_refused_naming_the_objective_and_the_fix():
    tasks = _regression()
    _bad(r"dataset 2's inputs have shape \[rows, 5\] and dataset 0's have \[rows, 4\]", _mlp(),
         tasks[:2] + [(torch.randn(3, 5), torch.randn(3, 2))], _squared)
    _bad(r"dataset 1 is empty", _mlp(), [tasks[0], (torch.randn(0, 4), torch.randn(0, 2))], _squared)
    _bad(r"different numbers of rows \[3, 4\]", _mlp(), [tasks[0], (torch.randn(3, 4), torch.randn(4, 2))], _squared)
    _bad(r"`datasets` is empty", _mlp(), [], _squared)
    _bad(r"one dataset per objective", _mlp(), torch.randn(3, 4), _squared)
    _bad(r"dataset 1 has 1 tensors and dataset 0 has 2", _mlp(), [tasks[0], (torch.randn(3, 4),)], _squared)
    _bad(r"dataset 1's inputs are torch.float64 on cpu and dataset 0's are torch.float32", _mlp(),
         [tasks[0], (tasks[1][0].double(), tasks[1][1])], _squared)
    doubles = [(x.double(), y.double()) for x, y in tasks]
    _bad(r"module's parameters are torch.float32.*give the inputs the same dtype", _mlp(), doubles, _squared)
    assert most.Problem.from_datasets(lambda: _mlp()().double(), doubles, _squared).loss_matrix(
        torch.zeros(2, 44, dtype=torch.float64)).dtype == torch.float64


def test_labels_outside_the_classes_are_refused_naming_the_objective():
    tasks = _classification()
    x, y = tasks[2]
    y = y.clone()
    y[4] = 3
    _bad(r"objective 2 \('c'\) has the class label 3, outside the model's 3 outputs", _mlp(5, 3),
         tasks[:2] + [(x, y)] + tasks[3:], _cross_entropy, names=["a", "b", "c", "d"])


def test_a_loss_that_is_not_one_number_per_row_is_refused():
    _bad(r"one loss per row, shape \[rows\] \(here \[10\]\); got \[\]", _mlp(), _regression(),
         lambda out, y: ((out - y) ** 2).mean())
    # with one objective too (the check runs on two rows at least): a mean, and [rows, 1] against
    # [rows] targets, which broadcasts to [rows, rows]
    one = [(torch.randn(6, 4), torch.randint(0, 3, (6,)))]
    _bad(r"one loss per row, shape \[rows\] \(here \[2\]\); got \[\]", _mlp(4, 3), one,
         lambda out, y: F.cross_entropy(out, y))
    _bad(r"one loss per row, shape \[rows\] \(here \[2\]\); got \[2, 2\]", lambda: nn.Linear(4, 1),
         [(torch.randn(6, 4), torch.randn(6))], lambda out, y: (out - y) ** 2)
    _bad(r"got \[2, 2\]", lambda: nn.Linear(4, 1), [(torch.randn(1, 4), torch.randn(1))], lambda out, y: (out - y) ** 2)
    _bad(r"`loss` must be callable", _mlp(), _regression(), "mse")


def test_a_batch_larger_than_a_dataset_and_a_module_without_trainable_parameters_are_refused():
    _bad(r"`batch_size` = 5 is larger than objective 2's dataset \(3 rows\).*batch_size <= 3", _mlp(),
         _regression(), _squared, batch_size=5)

    def frozen():
        net = _mlp()()
        net.requires_grad_(False)
        return net

    _bad(r"no trainable parameter: all 4 of its parameters have requires_grad=False", frozen, _regression(), _squared)


def test_a_bad_objective_index_is_refused():
    x, y = torch.randn(6, 4), torch.randn(6, 2)
    _bad(r"objective 1 has no rows", _mlp(), (x, y), _squared, objective_index=torch.tensor([0, 0, 2, 2, 2, 0]))
    _bad(r"one entry per row, shape \[6\]", _mlp(), (x, y), _squared, objective_index=torch.tensor([0, 1]))
    _bad(r"must hold integers", _mlp(), (x, y), _squared, objective_index=torch.zeros(6))
    _bad(r"`n_objectives` goes with `objective_index`", _mlp(), _regression(), _squared, n_objectives=5)
    _bad(r"must lie in \[0, n_objectives = 2\)", _mlp(), (x, y), _squared,
         objective_index=torch.tensor([0, 1, 2, 0, 1, 2]), n_objectives=2)


def test_integer_targets_of_a_single_output_are_not_taken_for_class_labels():
    tasks = [(torch.randn(6, 4), torch.randint(0, 9, (6,))) for _ in range(3)]  # counts, regressed
    problem = most.Problem.from_datasets(lambda: nn.Linear(4, 1), tasks, lambda out, y: (out[:, 0] - y) ** 2)
    assert problem.n_objectives == 3


def test_dropout_draws_from_the_runs_generator_so_runs_repeat_and_resume(tmp_path):
    """Dropout in training mode: each evaluation's masks come from a seed drawn from the run's
    generator, so a seeded run repeats, a resumed one equals it, and exact losses are fixed."""
    g = torch.Generator().manual_seed(0)
    tasks = [(torch.randn(20, 5, generator=g), torch.randint(0, 2, (20,), generator=g)) for _ in range(6)]
    net = lambda: nn.Sequential(nn.Linear(5, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 2))  # noqa: E731
    for batch_size in (None, 5):
        problem = most.Problem.from_datasets(net, tasks, lambda o, y: F.cross_entropy(o, y, reduction="none"),
                                             batch_size=batch_size)
        method = most.MosT(n_models=2, rounds=6, lr=0.1, seed=0)
        first = method.fit(problem)
        assert torch.equal(first.params, method.fit(problem).params)
        params = first.params
        assert torch.equal(problem.loss_matrix(params), problem.loss_matrix(params))
        # the masks differ between evaluations of a run: each draws its own seed
        run = torch.Generator().manual_seed(4)
        assert not torch.equal(problem.loss_matrix(params, generator=run), problem.loss_matrix(params, generator=run))
        resumed = stopped_then_resumed(method, problem, tmp_path / f"run{batch_size}.ckpt", every=2, at=3)
        assert torch.equal(resumed.params, first.params)
        # batched with another run, each keeps its own evaluations and draws
        assert problem.stochastic
        assert torch.equal(most.fit_batch(problem, [method, method.replace(seed=1)])[0].params, first.params)
    state = torch.get_rng_state()
    problem.loss_matrix(params)
    assert torch.equal(torch.get_rng_state(), state)  # torch's own generator is left as it was


def test_labels_params_and_data_of_the_wrong_kind_are_refused_with_the_fix_named():
    x = torch.randn(10, 5)
    y = (x[:, 0] > 0).to(torch.uint8)
    ce = lambda o, t: F.cross_entropy(o, t, reduction="none")  # noqa: E731
    # uint8 labels run in the loss alone but not vectorised over the models: refused up front
    with pytest.raises(ValueError, match=r"gather\(\).*labels of dtype uint8.*`y.long\(\)`"):
        most.Problem.from_datasets(lambda: nn.Linear(5, 2), [(x[:4], y[:4]), (x[4:], y[4:])], ce)
    problem = most.Problem.from_datasets(lambda: nn.Linear(5, 2), [(x[:4], y[:4].long()), (x[4:], y[4:].long())], ce)
    theta = problem.initial_params(2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"one model's parameters: pass params\[None\]"):
        problem.to_modules(theta[0])
    with pytest.raises(ValueError, match=r"params has no model"):
        problem.loss_matrix(theta[:0])
    with pytest.raises(ValueError, match=r"params are float64 but the module's parameters are float32"):
        problem.loss_matrix(theta.double())
    with pytest.raises(TypeError, match=r"params must be a tensor"):
        problem.loss_matrix(theta.tolist())
    assert len(problem.to_modules(theta[:1])) == 1
    with pytest.raises(ValueError, match=r"on the 'meta' device"):
        most.Problem.from_datasets(lambda: nn.Linear(5, 2), [(x.to("meta"), y.long().to("meta"))], ce)


def test_torchs_ignore_index_marks_rows_the_loss_skips_and_other_negative_labels_are_refused():
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    y[0] = -100
    loss = lambda o, t: F.cross_entropy(o, t, reduction="none", ignore_index=-100)  # noqa: E731
    problem = most.Problem.from_datasets(lambda: nn.Linear(4, 3), [(x[:3], y[:3]), (x[3:], y[3:])], loss)
    theta = problem.initial_params(1, torch.Generator().manual_seed(0))
    module = problem.to_modules(theta)[0]
    with torch.no_grad():
        expected = loss(module(x[:3]), y[:3]).mean()  # the ignored row counts as a loss of 0
    torch.testing.assert_close(problem.loss_matrix(theta)[0, 0], expected)
    y[0] = -1
    with pytest.raises(ValueError, match=r"class label -1, outside the model's 3 outputs.*-100 for a row the loss "
                                         r"ignores"):
        most.Problem.from_datasets(lambda: nn.Linear(4, 3), [(x[:3], y[:3]), (x[3:], y[3:])], loss)


def test_a_recurrent_module_runs_model_by_model_and_from_module_takes_vectorize_false():
    """vmap cannot batch a recurrent layer: from_datasets runs such a module model by model (both
    combiners), and from_module takes vectorize=False, which its batch-norm statistics follow."""
    g = torch.Generator().manual_seed(0)

    class Recurrent(nn.Module):
        def __init__(self, norm=False):
            super().__init__()
            self.rnn, self.head = nn.GRU(4, 5, batch_first=True), nn.Linear(5, 2)
            self.norm = nn.BatchNorm1d(5) if norm else nn.Identity()

        def forward(self, x, scale=1.0):
            return self.head(self.norm(self.rnn(x)[0][:, -1])) * scale

    tasks = [(torch.randn(n, 3, 4, generator=g), torch.randint(0, 2, (n,), generator=g)) for n in (5, 9, 3)]
    ce = lambda o, t: F.cross_entropy(o, t, reduction="none")  # noqa: E731
    problem = most.Problem.from_datasets(Recurrent, tasks, ce)
    assert not problem.evaluation.vmappable
    for combiner in (most.WeightedSum(), most.MinNorm()):
        result = most.MosT(n_models=2, rounds=2, lr=0.1, combiner=combiner, seed=0).fit(problem)
        module = result.to_modules()[0]
        with torch.no_grad():  # the module given back computes the losses the run reports
            torch.testing.assert_close(result.losses[:, 0], torch.stack([ce(module(x), y).mean() for x, y in tasks]))
    # keyword inputs reach the module's forward
    objectives = [lambda f, x=x, y=y: ce(f(x, scale=2.0), y).mean() for x, y in tasks]
    with pytest.raises(ValueError, match=r"cannot batch an operation of the objectives.*vectorize=False"):
        most.MosT(n_models=2, rounds=2, lr=0.1).fit(most.Problem.from_module(Recurrent, objectives))
    for norm in (False, True):
        build = lambda norm=norm: Recurrent(norm)  # noqa: E731
        problem = most.Problem.from_module(build, objectives, vectorize=False)
        result = most.MosT(n_models=2, rounds=2, lr=0.1, combiner=most.MinNorm(), seed=0).fit(problem)
        assert torch.isfinite(result.losses).all() and (result.statistics is not None) == norm
    with pytest.raises(TypeError, match="`vectorize` must be True or False"):
        most.Problem.from_module(Recurrent, objectives, vectorize="no")


def test_dropout_under_a_min_norm_combiner_and_mixed_dtype_modules_run():
    g = torch.Generator().manual_seed(0)
    tasks = [(torch.randn(12, 5, generator=g), torch.randint(0, 2, (12,), generator=g)) for _ in range(3)]
    ce = lambda o, y: F.cross_entropy(o, y, reduction="none")  # noqa: E731
    net = lambda: nn.Sequential(nn.Linear(5, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 2))  # noqa: E731
    problem = most.Problem.from_datasets(net, tasks, ce, batch_size=4)
    method = most.MosT(n_models=2, rounds=3, lr=0.1, combiner=most.MinNorm(), seed=0)
    assert torch.equal(method.fit(problem).params, method.fit(problem).params)

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.t = nn.Parameter(torch.ones((), dtype=torch.float64))

        def forward(self, x):
            return x * self.t

    # a float32 layer and a float64 parameter: the flat vector (the initial parameters) is float64
    x = torch.randn(5, 3, dtype=torch.float64)
    mixed = most.Problem.from_module(lambda: nn.Sequential(nn.Linear(3, 2), Scale()),
                                     [lambda f: f(x).pow(2).mean(), lambda f: (f(x) - 1).pow(2).mean()])
    result = most.MosT(n_models=2, rounds=2, lr=0.1).fit(mixed)
    assert result.params.dtype == torch.float64 and len(mixed.to_modules(result.params)) == 2


class _FunctionalDropout(nn.Module):
    """Dropout called in forward (F.dropout), which no layer of the module shows."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(5, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.b(F.dropout(torch.relu(self.a(x)), 0.5, self.training))


class _Noisy(nn.Module):
    """A sampling step in forward (a variational layer's torch.randn_like)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 2)

    def forward(self, x):
        out = self.a(x)
        return out + 0.1 * torch.randn_like(out)


@pytest.mark.parametrize("net", [
    _FunctionalDropout,
    _Noisy,
    lambda: nn.Sequential(nn.Linear(5, 8), nn.Unflatten(1, (2, 4)), nn.LSTM(4, 4, num_layers=2, dropout=0.5,
                                                                                batch_first=True),
                          _TakeLast(), nn.Linear(4, 2)),
], ids=["F.dropout", "randn_like", "stacked LSTM dropout"])
def test_randomness_no_layer_shows_draws_from_the_runs_generator(net, tmp_path):
    """Randomness inside a forward is found by running the module twice when the problem is
    built: the problem is stochastic, and a seeded run repeats and resumes exactly."""
    g = torch.Generator().manual_seed(0)
    tasks = [(torch.randn(12, 5, generator=g), torch.randint(0, 2, (12,), generator=g)) for _ in range(4)]
    problem = most.Problem.from_datasets(net, tasks, _cross_entropy)
    assert problem.stochastic
    method = most.MosT(n_models=2, rounds=4, lr=0.1, seed=0)
    first = method.fit(problem)
    assert torch.equal(first.params, method.fit(problem).params)
    assert torch.equal(problem.loss_matrix(first.params), problem.loss_matrix(first.params))
    resumed = stopped_then_resumed(method, problem, tmp_path / "run.ckpt", every=1, at=2)
    assert torch.equal(resumed.params, first.params)


class _TakeLast(nn.Module):
    def forward(self, out):
        return out[0][:, -1]


def test_a_deterministic_module_is_not_taken_for_a_random_one():
    problem = most.Problem.from_datasets(lambda: nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2)),
                                         _classification(classes=2), _cross_entropy)
    assert not problem.stochastic


@pytest.mark.parametrize("loss", [
    lambda out, y: F.cross_entropy(out.detach(), y, reduction="none"),
    lambda out, y: (out.argmax(-1) != y).float(),
], ids=["detach", "argmax"])
def test_a_loss_without_a_gradient_path_is_refused_when_built(loss):
    with pytest.raises(ValueError, match=r"`loss\(output, \*targets\)` does not depend on the parameters"):
        most.Problem.from_datasets(lambda: nn.Linear(5, 3), _classification(), loss)


def test_the_fast_path_of_an_affine_module_keeps_its_hooks():
    """`nn.Sequential(nn.Flatten(), nn.Linear)` is evaluated by one matrix product, unless a hook
    (on the Sequential, the Flatten or the Linear) or a forward set on the instance changes it."""
    g = torch.Generator().manual_seed(0)
    tasks = [(torch.randn(k, 3, 4, generator=g), torch.randint(0, 3, (k,), generator=g)) for k in (6, 9)]

    def hooked(where):
        def factory():
            net = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
            net[where].register_forward_hook(lambda mod, inp, out: out / 10.0) if where is not None else \
                net.register_forward_hook(lambda mod, inp, out: out / 10.0)
            return net
        return factory

    for where in (None, 0, 1):
        problem = most.Problem.from_datasets(hooked(where), tasks, _cross_entropy)
        params = problem.initial_params(2, torch.Generator().manual_seed(0))
        with torch.no_grad():
            hand = torch.stack([torch.stack([_cross_entropy(m(x), y).mean() for m in problem.to_modules(params)])
                                for x, y in tasks])
        assert torch.allclose(problem.loss_matrix(params), hand, atol=1e-6), where


def test_only_the_first_target_is_checked_as_class_labels():
    """`(x, y, count)`: an integer per-row weight beside the labels is not a label."""
    g = torch.Generator().manual_seed(0)
    tasks = [(torch.randn(8, 5, generator=g), torch.randint(0, 3, (8,), generator=g),
              torch.randint(1, 10, (8,), generator=g)) for _ in range(3)]
    problem = most.Problem.from_datasets(lambda: nn.Linear(5, 3), tasks,
                                         lambda out, y, count: _cross_entropy(out, y) * count)
    assert problem.n_objectives == 3


@pytest.mark.parametrize("wrap", [lambda out: {"logits": out}, lambda out: (out,)], ids=["dict", "tuple"])
def test_class_labels_are_checked_against_scores_inside_a_dict_or_tuple_output(wrap):
    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(5, 4)

        def forward(self, x):
            return wrap(self.a(x))

    tasks = _classification(classes=4)
    tasks[0][1][4] = 9
    scores = (lambda out: out["logits"]) if isinstance(wrap(torch.zeros(1)), dict) else (lambda out: out[0])
    with pytest.raises(ValueError, match="objective 0 has the class label 9, outside the model's 4 outputs"):
        most.Problem.from_datasets(Wrapped, tasks, lambda out, y: _cross_entropy(scores(out), y))


def test_lazy_layers_and_dataset_objects_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"parameter '0.weight' is not initialised yet \(a lazy layer"):
        most.Problem.from_datasets(lambda: nn.Sequential(nn.LazyLinear(3)), _classification(), _cross_entropy)
    x, y = _classification()[0]
    with pytest.raises(TypeError, match=r"got a TensorDataset\. Pass its tensors, `dataset.tensors`"):
        most.Problem.from_datasets(lambda: nn.Linear(5, 3), [torch.utils.data.TensorDataset(x, y)], _cross_entropy)
    with pytest.raises(ValueError, match=r"read as one dataset per tensor.*pass `objective_index` too"):
        most.Problem.from_datasets(lambda: nn.Linear(5, 3), (x, y), _cross_entropy)


def test_a_problem_built_under_inference_mode_is_refused_naming_it():
    with torch.inference_mode(), pytest.raises(ValueError, match=r"built under torch.inference_mode\(\)"):
        most.Problem.from_datasets(lambda: nn.Linear(5, 3), _classification(), _cross_entropy)
    with torch.no_grad():  # no_grad is fine: the checks take their gradient themselves
        most.Problem.from_datasets(lambda: nn.Linear(5, 3), _classification(), _cross_entropy)


def test_per_objective_gradients_of_many_models_are_taken_in_groups_within_the_pass_budget(monkeypatch):
    net = lambda: nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))  # noqa: E731
    problem = most.Problem.from_datasets(net, _classification(), _cross_entropy)
    params = problem.initial_params(5, torch.Generator().manual_seed(0))
    rows = torch.tensor([[0], [1], [2], [3], [0]])
    whole = problem.active_gradients(params, rows)
    monkeypatch.setattr(_datasets, "_PASS_VALUES", 600)  # about two models' pass of one objective at a time
    torch.testing.assert_close(problem.active_gradients(params, rows), whole, rtol=1e-6, atol=1e-7)
