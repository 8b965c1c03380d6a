"""What the round loop refuses in the objectives' numbers (most.engine.checks)."""

from __future__ import annotations

import pytest
import torch

from most.engine.checks import check_finite
from most.problems import quadratic_clusters


def test_nan_gradient_error_names_the_objective_not_its_packed_position():
    problem = quadratic_clusters(2, 3, seed=0)
    rows = torch.tensor([[0, 1, 2], [3, 5, 5]])
    jac = torch.zeros(2, 3, 2)
    jac[1, 1, 0] = float("nan")  # model 1's second served objective is objective 5
    with pytest.raises(ValueError, match="Gradient of objective 5 for model 1 is not finite at round 4, inner step 1"):
        check_finite(torch.zeros(6, 2), jac, problem, 4, 1, rows)


# ------------------------------------------------------------------ bad input
