"""Which vector instructions torch's CPU kernels use in this process.

Kernels for other instruction sets (AVX2, AVX-512) round in other last bits, and a run whose
choices are tied or nearly so (between optimal transport plans, or a client's best models) can
then take another path; results files record the set so that a re-run can choose the same one
(torch's ``ATEN_CPU_CAPABILITY`` environment variable, e.g. ``ATEN_CPU_CAPABILITY=avx2``).
"""

from __future__ import annotations

import torch

__all__ = ["cpu_kernels", "software"]


def cpu_kernels() -> str:
    """The instruction set of torch's CPU kernels in this process: ``"AVX512"``, ``"AVX2"``,
    ``"DEFAULT"``, ... (``ATEN_CPU_CAPABILITY`` chooses a lower one)."""
    return str(torch.backends.cpu.get_cpu_capability())


def software() -> dict[str, str]:
    """What a results file records of the software that made it: torch's version and its CPU
    kernels' instruction set (:func:`cpu_kernels`), the pair a bit-for-bit re-run must match."""
    return {"torch": torch.__version__, "cpu_kernels": cpu_kernels()}
