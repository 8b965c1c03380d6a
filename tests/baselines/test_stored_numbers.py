"""The baselines' numeric settings, given as NumPy scalars, 0-d or one-element arrays or
tensors, are stored as the plain Python numbers they were checked as: the methods stay
hashable, compare equal to the same method built from plain numbers, and fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import most
from most.baselines import EPO, MOOSVGD, EPOCombiner, STCHSet, STCHSetCombiner, SumOfMinimum, SVGDCombiner

CENTRES = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 2.0]], dtype=torch.float64)
PROBLEM = most.Problem.from_function(lambda t: ((t - CENTRES) ** 2).sum(-1), dim=2, n_objectives=3)

FLOAT_WRAPS = {
    "np.float32": np.float32,
    "np.array(v)": np.array,
    "np.array([v])": lambda v: np.array([v]),
    "torch.tensor(v)": torch.tensor,
    "torch.tensor([v])": lambda v: torch.tensor([v]),
}
INT_WRAPS = {"np.int64": np.int64, "np.array(v)": np.array, "torch.tensor(v)": torch.tensor}

METHODS = [  # (class, field, plain value)
    (EPO, "eps", 1e-3),
    (MOOSVGD, "bandwidth", 1.0),
    (MOOSVGD, "alpha", 0.5),
    (STCHSet, "smoothing", 0.25),
    (SumOfMinimum, "seed_lr", 0.125),
    (SumOfMinimum, "ridge", 0.125),
    (SumOfMinimum, "seed_steps", 3),
]
COMBINERS = [
    (EPOCombiner, "eps", 1e-3),
    (SVGDCombiner, "bandwidth", 1.0),
    (SVGDCombiner, "alpha", 0.5),
    (STCHSetCombiner, "smoothing", 0.25),
]


def cases(table):
    return [pytest.param(cls, name, value, wrap, id=f"{cls.__name__}.{name}-{wrap_name}")
            for cls, name, value in table
            for wrap_name, wrap in (INT_WRAPS if isinstance(value, int) else FLOAT_WRAPS).items()]


@pytest.mark.parametrize("cls, name, value, wrap", cases(METHODS))
def test_methods_store_array_settings_as_plain_numbers_and_fit(cls, name, value, wrap):
    method = cls(n_models=2, rounds=2, lr=0.01, **{name: wrap(value)})
    stored = getattr(method, name)
    assert type(stored) is type(value)
    assert stored == pytest.approx(value, rel=1e-6)  # np.float32 rounds the value
    plain = cls(n_models=2, rounds=2, lr=0.01, **{name: stored})
    assert method == plain and hash(method) == hash(plain)
    result = method.fit(PROBLEM)
    assert result.params.shape == (2, 2) and torch.isfinite(result.params).all()


@pytest.mark.parametrize("cls, name, value, wrap", cases(COMBINERS))
def test_combiners_store_array_settings_as_plain_numbers(cls, name, value, wrap):
    combiner = cls(**{name: wrap(value)})
    stored = getattr(combiner, name)
    assert type(stored) is type(value) and stored == pytest.approx(value, rel=1e-6)
    assert combiner == cls(**{name: stored}) and hash(combiner) == hash(cls(**{name: stored}))
