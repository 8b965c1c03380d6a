"""The centralised round engine: the loop of Algorithm 1 that every centralised method runs.

- :mod:`~most.engine.loop`: :func:`run`, a run's state between rounds and one round;
- :mod:`~most.engine.paths`: how a round gets the gradients its combiner reads;
- :mod:`~most.engine.requests`: the evaluations a round asks of its problem, as typed requests,
  and the driver of one run;
- :mod:`~most.engine.batch`: the driver of several runs in step (:func:`most.fit_batch`);
- :mod:`~most.engine.records`: what a run records (:class:`RoundRecord`, :class:`Result`);
- :mod:`~most.engine.checks`: what the loop refuses in the objectives' numbers.

The methods (:class:`~most.MosT` and the baselines) live apart, in :mod:`most.solver` and
:mod:`most.baselines`: a method only chooses the components the engine runs.
"""

from .batch import drive_batch, objectives_key
from .loop import Job, Loop, run
from .paths import AllRowsPath, GradientPath, LinearPath, ServedRowsPath, gradient_path
from .records import Result, RoundRecord
from .requests import drive

__all__ = ["run", "Job", "Loop", "drive", "drive_batch", "objectives_key", "GradientPath", "LinearPath",
           "ServedRowsPath", "AllRowsPath", "gradient_path", "RoundRecord", "Result"]
