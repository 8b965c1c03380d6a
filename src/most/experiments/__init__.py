"""Experiments: TOML files, the runs they expand to, a results store, reports and figures.

* :func:`load_experiment` reads an experiment file (format: :mod:`most.experiments.spec`) and
  checks every value before any work;
* :func:`run_experiment` runs it into a results folder (:mod:`most.experiments.store`),
  skipping finished runs and resuming interrupted ones from their checkpoints;
* :func:`report` rebuilds the table (mean ± std over seeds) and :func:`plot` the figures from
  the stored files alone.

The ``most`` command wraps these: ``most run``, ``most report``, ``most plot``.
"""

from .report import report, summary_table
from .runner import InterruptedRunsError, execute, run_experiment
from .spec import Experiment, RunSpec, load_experiment, parse_experiment
from .figures import plot

__all__ = ["Experiment", "InterruptedRunsError", "RunSpec", "execute", "load_experiment", "parse_experiment",
           "plot", "report", "run_experiment", "summary_table"]
