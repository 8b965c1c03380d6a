"""``performance.md`` from the parts' JSON, keeping the growth sections already in the file."""

from __future__ import annotations

import os
from pathlib import Path

from .harness import (
    COMMAND,
    END_MARK,
    GPU_END_MARK,
    GPU_START_MARK,
    INSTANCES_END_MARK,
    INSTANCES_START_MARK,
    START_MARK,
)
from .rounds import rounds_markdown
from .solvers import solvers_markdown
from .targets import notes, targets_markdown


def machine_line(machine: dict) -> str:
    """The machine of a run, in one line of the report."""
    kernels = f" ({machine['cpu_kernels']} CPU kernels)" if machine.get("cpu_kernels") else ""
    return (f"{machine.get('processor', '?')}, {machine.get('cpu_count', '?')} cores; torch {machine.get('torch')}{kernels}, "
            f"POT {machine.get('pot')}, Python {machine.get('python')}; measured {machine.get('date', '?')}")


def _remeasured(results: dict) -> str:
    """Sections measured by a later ``--resume`` run (e.g. after deleting them from the JSON to
    measure a code change; ``solvers/min_norm`` can be deleted alone), with when."""
    again = dict(results["rounds"].get("remeasured", {}))
    again.update({f"solvers/{k}": v for k, v in results.get("solvers", {}).get("remeasured", {}).items()})
    if not again:
        return ""
    kernels = results["rounds"].get("remeasured_kernels", {})
    names = ", ".join(f"`{k}` at {v}" + (f" ({kernels[k]} kernels)" if k in kernels else "")
                      for k, v in sorted(again.items()))
    return (f" Sections measured later, by `--resume` on a machine of the same model: {names}. The kernels are "
            "torch's CPU kernels (`ATEN_CPU_CAPABILITY`), where recorded.")


def render(results: dict) -> str:
    """The text of ``performance.md`` above the growth sections.

    Args:
        results: the suite's JSON (``performance.json``).

    Returns:
        The report: targets, the target cases, the notes, the end-to-end and solver tables.
    """
    m = results["machine"]
    cases = results.get("target_cases", [])
    out = ["# Performance", "",
           f"Machine: {machine_line(m)}. The CPU alone: the GPU's timings are on [the CUDA path](cuda.md).", "",
           f"Command: `{COMMAND}{' --quick' if results.get('quick') else ''}` "
           f"(about {results['seconds'] / 60:.0f} minutes). Every figure is a median of several runs on an "
           "otherwise idle machine; the solver tables use "
           f"{results.get('solver_threads')} thread(s), the end-to-end runs {results['rounds'].get('threads')}."
           + _remeasured(results) + " Timings on this shared two-core machine drift by up to a third between "
           "runs an hour apart (IFCA's unchanged Syn(0,0) round measured between 8.6 and 11.9 ms on one day): "
           "the targets stated as ratios within one run are robust to that, the absolute ones are not.", "",
           "## Targets", "", targets_markdown(results), "",
           "### The target transport cases", "",
           "| n | m | method | median s | iterations | converged |", "|---|---|---|---|---|---|"]
    for r in cases:
        if r.get("status") == "ok":
            out.append(f"| {r['n']:,} | {r['m']} | {r['method']} | {r['median_s']:.3f} | {r.get('n_iter')} | "
                       f"{'yes' if r.get('converged') else 'no'} |")
        else:
            out.append(f"| {r['n']:,} | {r['m']} | {r['method']} | {r.get('status')} | – | – |")
    out += ["", "## What bounds the targets that are not met", "", notes(results), "",
            "## End to end", "", rounds_markdown(results["rounds"]), "",
            "## Solvers", "", solvers_markdown(results["solvers"]), ""]
    return "\n".join(out)


#: The growth part keeps its sections at the end of performance.md between these lines.
GROWTH_MARKS = ((START_MARK, END_MARK), (GPU_START_MARK, GPU_END_MARK), (INSTANCES_START_MARK, INSTANCES_END_MARK))


def growth_block(text: str) -> str:
    """The growth sections of a performance.md text (with their marks, one blank line apart), or ``""``."""
    blocks = []
    for start, end in GROWTH_MARKS:
        i, j = text.find(start), text.find(end)
        if 0 <= i < j:
            blocks.append(text[i:j + len(end)])
    return "\n\n".join(blocks)


def _write_keeping_growth(path: Path, report: str) -> None:
    """Writes ``report`` to ``path`` (atomically), keeping the growth section already there."""
    block = growth_block(path.read_text()) if path.exists() else ""
    text = report if not block else report.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


