"""The suite's shared harness: machine information, threads, peak memory, child processes."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import resource
import subprocess
import time
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[2]
COMMAND = ".venv/bin/python -m benchmarks.performance"
CUDA_COMMAND = "python -m benchmarks.performance cuda --femnist ../shared/data/femnist_leaf_sf005"
#: The growth part's sections of ``performance.md`` lie between these lines: the CPU grid's, the GPU
#: columns', the per-instance problem's (the rest of the file is the suite's report).
START_MARK = "<!-- growth:start -->"
END_MARK = "<!-- growth:end -->"
GPU_START_MARK = "<!-- growth-cuda:start -->"
GPU_END_MARK = "<!-- growth-cuda:end -->"
INSTANCES_START_MARK = "<!-- growth-instances:start -->"
INSTANCES_END_MARK = "<!-- growth-instances:end -->"

#: The scripts folded into this package, and how each is run now.
RESPELLED = (
    ("benchmarks/performance.py", "-m benchmarks.performance"),
    ("benchmarks/growth.py", "-m benchmarks.performance growth"),
    ("benchmarks/threads.py", "-m benchmarks.performance threads"),
    ("benchmarks/run_axis.py", "-m benchmarks.performance run-axis"),
    ("benchmarks/tasks.py", "-m benchmarks.performance tasks"),
)


def respell(command: str, table: tuple[tuple[str, str], ...] = RESPELLED) -> str:
    """``command`` as it is spelled now: a results JSON keeps the command that made it, and its
    report shows how to run that command today (the same options and outputs).

    Args:
        command: a command line recorded in a results file.
        table: ``(old, new)`` spellings, replaced in order (default: this package's scripts).

    Returns:
        The command with each folded script's path replaced by its current entry point.
    """
    for old, new in table:
        command = command.replace(old, new)
    return command


def _cpu_model() -> str:
    """CPU model name from ``lscpu`` (or ``/proc/cpuinfo``), falling back to ``platform``."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(threads: int) -> dict[str, Any]:
    """Platform, CPU, thread count and library versions of this run."""
    import torch

    from most._kernels import cpu_kernels

    try:
        import ot

        pot = ot.__version__
    except ImportError:  # pragma: no cover - POT is a dependency of the library
        pot = None
    return {
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "cpu_kernels": cpu_kernels(),
        "pot": pot,
        "python": platform.python_version(),
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _set_threads(threads: int) -> None:
    """Limits BLAS/OpenMP and torch intra-op threads of this process."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    import torch

    torch.set_num_threads(threads)


def reset_peak_rss() -> None:
    """Resets this process's peak-RSS mark to its current RSS (Linux >= 4.0), so that the peak
    read later covers only what follows. Without it, ``ru_maxrss`` keeps the peak of the import
    phase -- and of the parent process, since it survives fork and exec."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _maxrss_kib() -> int:
    """Peak resident set size of this process since :func:`reset_peak_rss` (KiB; ``VmHWM``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _current_rss_mib() -> float | None:
    """Current resident set size in MiB (Linux only)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def finish_child(proc, recv, out: dict[str, Any] | None, start: float, timeout: float, **extra) -> dict[str, Any]:
    """Joins (or kills) a benchmark child and returns its result ``out`` with its wall time, or a
    ``timeout`` / ``error`` record (with ``extra``) when it reported nothing."""
    proc.join(5.0 if out is not None else 0.0)
    if proc.is_alive():
        proc.kill()
        proc.join()
    recv.close()
    wall = time.time() - start
    if out is None:
        if wall >= timeout:
            return {"status": "timeout", "timeout_s": timeout, "wall_s": wall, **extra}
        return {"status": "error", "error": f"child exited with code {proc.exitcode}", "wall_s": wall, **extra}
    out["wall_s"] = wall
    return out


