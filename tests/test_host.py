"""most._host: where small dense work runs when the models live on an accelerator."""

from __future__ import annotations

import pytest
import torch

from most import _host
from most.mgda import min_norm


def test_solve_device_keeps_the_cpu_and_sends_small_accelerator_problems_to_the_host():
    cpu, cuda, mps = torch.device("cpu"), torch.device("cuda"), torch.device("mps")
    assert _host.solve_device(cpu, 10**9) == cpu
    assert _host.solve_device(cuda, _host.HOST_SOLVE_MAX) == cpu
    assert _host.solve_device(cuda, _host.HOST_SOLVE_MAX + 1) == cuda
    assert _host.solve_device(mps, 10**9) == cpu  # MPS has no float64


def test_to_host_moves_every_tensor_with_its_values_and_shapes():
    a, b = torch.arange(6.0).view(2, 3), torch.tensor([[1.5]])
    out = _host.to_host([a, b])
    assert out[0] is a and out[1] is b  # on the CPU already: the same tensors
    assert _host.to_host([]) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_host_and_to_device_round_trip_on_a_gpu():
    cpu = [torch.randn(3, 4, dtype=torch.float64), torch.randn(5, dtype=torch.float64)]
    gpu = [t.cuda() for t in cpu]
    back = _host.to_host([gpu[0], cpu[1], gpu[1]])
    assert [t.device.type for t in back] == ["cpu"] * 3
    assert torch.equal(back[0], cpu[0]) and torch.equal(back[2], cpu[1])
    mixed = _host.to_host([gpu[0], gpu[0].float()])  # two dtypes: one copy each, values kept
    assert mixed[1].dtype == torch.float32 and torch.equal(mixed[0], cpu[0])
    assert torch.equal(_host.to_device(cpu[0], torch.device("cuda")).cpu(), cpu[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("batch, k", [(5, 30), (50, 100)])  # on the host, on the device
def test_min_norm_on_a_gpu_matches_the_cpu_on_either_side_of_the_threshold(batch, k):
    g = torch.randn(batch, k, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.3
    gram = g @ g.transpose(1, 2)
    cpu, gpu = min_norm(gram), min_norm(gram.cuda())
    assert gpu.weights.device.type == "cuda"
    torch.testing.assert_close(gpu.weights.cpu(), cpu.weights, rtol=0, atol=1e-9)
    torch.testing.assert_close(gpu.norm_sq.cpu(), cpu.norm_sq, rtol=1e-9, atol=1e-12)
