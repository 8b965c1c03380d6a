"""`import most` and `import most.federated` stay light: the heavy optional modules (SciPy's
optimiser for EPO, matplotlib for figures, Flower) are imported when first used, not at import.
(Import time is measured in benchmarks, not asserted here; what is asserted is what gets loaded.)"""

import subprocess
import sys


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "; import sys; print(' '.join(sorted(sys.modules)))"],
                         check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_import_most_loads_neither_scipy_optimize_nor_matplotlib_nor_flower():
    loaded = _loaded_after("import most, most.federated")
    assert not {"scipy.optimize", "matplotlib", "matplotlib.pyplot", "flwr"} & loaded


def test_what_was_left_out_still_loads_when_used():
    loaded = _loaded_after("import most.federated as fl; fl.figures.radar; import most; most.baselines.EPO")
    assert {"matplotlib.pyplot", "most.federated.figures"} <= loaded
    code = ("import torch, most; c = torch.tensor([[0.0, 0.0], [3.0, 3.0]]); "
            "p = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=2, n_objectives=2); "
            "most.baselines.EPO(n_models=2, rounds=2).fit(p)")
    assert "scipy.optimize" in _loaded_after(code)  # EPO's linear programs load it on their first solve


_HEAVY = {"torch._dynamo", "sympy"}  # torch's compiler stack: about 1 s to import in a fresh process


def test_a_first_default_fit_and_federated_run_do_not_import_the_compiler_stack():
    # what torch and most import themselves is left out, so a torch that loads these on import passes
    base = _loaded_after("import torch, most, most.federated as fl")
    fit = ("import torch, most; c = torch.randn(40, 3); "
           "p = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=3, n_objectives=40); "
           "most.MosT(n_models=4, rounds=30, lr=0.05).fit(p)")
    run = ("import warnings; warnings.simplefilter('ignore'); import most.federated as fl; "
           "data = fl.fedprox_synthetic(model_shift=0.0, feature_shift=0.0, seed=0); "
           "fl.run_federated(data, fl.logistic_regression(60, 10), fl.methods.MosT(n_models=5), "
           "fl.FederatedConfig(rounds=7)); fl.cnn(10, channels=(4, 8)).values_per_sample((1, 28, 28))")
    for code in (fit, run):
        assert not (_loaded_after(code) - base) & _HEAVY, code
