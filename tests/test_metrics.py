"""most.metrics: the hypervolume's result survives copying and pickling; the recovery error of
models whose distances overflow float64."""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch

from most.metrics import HypervolumeResult, hypervolume, recovery_error

_ROUND_TRIPS = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "deepcopy in a dict": lambda x: copy.deepcopy({"hv": x})["hv"],
    "pickle": lambda x: pickle.loads(pickle.dumps(x)),
    "pickle protocol 0": lambda x: pickle.loads(pickle.dumps(x, protocol=0)),
}


@pytest.mark.parametrize("round_trip", list(_ROUND_TRIPS.values()), ids=list(_ROUND_TRIPS))
def test_a_hypervolume_keeps_its_value_and_outside_count_through_copy_and_pickle(round_trip):
    hv = hypervolume([[0.5, 0.5], [2.0, 0.1], [0.25, 0.75]], [1.0, 1.0])  # one point outside the box
    assert hv.outside == 1
    again = round_trip(hv)
    assert type(again) is HypervolumeResult
    assert float(again) == float(hv) == 0.3125 and again.outside == 1


@pytest.mark.parametrize("scale", [1e160, 1e300, 1e-160, 1e-200, 1e-300])
def test_the_recovery_error_of_models_whose_distances_overflow_or_underflow_float64_scales_with_them(scale):
    est = np.array([[1.0, 0.0], [0.0, 0.5], [3.0, 3.0]])
    true = np.array([[0.0, 0.0], [-1.0, 0.5]])
    small = recovery_error(est, true)
    assert small == pytest.approx(1.0)  # est 0 -> true 0 (distance 1), est 1 -> true 1 (distance 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either: the distances are rescaled
        big = recovery_error(est * scale, true * scale)
        # fewer estimates than true models: the unmatched one is charged its nearest estimate's distance
        fewer = recovery_error(est[:1] * scale, true * scale)
    assert big == pytest.approx(small * scale, rel=1e-12, abs=0)
    assert fewer == pytest.approx(recovery_error(est[:1], true) * scale, rel=1e-12, abs=0)


def test_a_recovery_error_too_large_for_float64_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"recovery error overflows float64.*Rescale `estimated` and `true`"):
        recovery_error([[1.7e308, 0.0]], [[-1.7e308, 0.0]])


def test_worst_fraction_mean_refuses_a_string_for_larger_is_worse():
    from most.metrics import worst_fraction_mean

    assert worst_fraction_mean([1.0, 5.0, 2.0, 4.0], 0.5, larger_is_worse=False) == 1.5
    with pytest.raises(TypeError, match="`larger_is_worse` must be True or False"):
        worst_fraction_mean([1.0, 5.0, 2.0, 4.0], 0.5, larger_is_worse="false")


@pytest.mark.parametrize("values", [torch.tensor([[True, False]]), np.array([[True, False]]),
                                    torch.tensor([[1 + 1j, 2.0]])])
def test_a_metric_refuses_bool_and_complex_values_whether_tensor_or_array(values):
    from most.metrics import worst_objective

    with pytest.raises(ValueError, match="must be a tensor or array of real numbers"):
        hypervolume(values, reference=[2.0, 2.0])
    with pytest.raises(ValueError, match="must be a tensor or array of real numbers"):
        worst_objective(values)
