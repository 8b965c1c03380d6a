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
