"""How a problem's objectives are evaluated at the m models: one protocol, one evaluator per kind.

Every :class:`most.Problem` hands its evaluations to an :class:`Evaluator`: the loss matrix
``[n, m]``, the reverse pass of weighted losses (linear combiners), the gradients of the
objectives each model serves (min-norm combiners), whether those come in forward mode, and a
key that tells which runs of :func:`most.fit_batch` can share an evaluation. The round loop
uses the protocol alone. One evaluator per kind of problem, each in its own module:

* :class:`FunctionEvaluator` -- ``fn(theta) -> losses [n]`` (:meth:`most.Problem.from_function`);
* :class:`ModuleEvaluator` -- one callable per objective over a module (:meth:`most.Problem.from_module`);
* :class:`InstancesEvaluator` -- one objective per instance (:meth:`most.Problem.from_instances`);
* :class:`DatasetsEvaluator` -- each objective a mean loss on a dataset of its own
  (:meth:`most.Problem.from_datasets`), all objectives in one vectorised pass, with mini-batches
  drawn from the run's generator;
* :class:`MappedEvaluator` -- objectives made from another evaluator's losses
  (:meth:`most.Problem.map_objectives`, MosT-E's extensions), through that evaluator's passes;
  :class:`PenalisedEvaluator` -- another evaluator's objectives plus a ridge on the parameters.

Each keeps the memory budget of its own passes (its chunk sizes) to itself. Beside them,
:class:`RunningStatistics` keeps each model's running statistics of batch normalisation for a
:meth:`most.Problem.from_module` problem (run state, updated once per round).

Examples:
    >>> import torch, most
    >>> problem = most.Problem.from_function(lambda theta: (theta ** 2).sum(-1, keepdim=True), dim=2, n_objectives=1)
    >>> type(problem.evaluation).__name__, problem.evaluation.forward_rows(3)
    ('FunctionEvaluator', True)
"""

from ._base import Evaluator, active_rows, check_weights
from ._checks import objective_loss, tracked
from ._datasets import DatasetsEvaluator, check_batch_size, check_loss, random_layers, run_rng, stack_datasets
from ._function import FunctionEvaluator
from ._instances import InstancesEvaluator, instance_losses
from ._mapped import MappedEvaluator, PenalisedEvaluator
from ._module import ModuleEvaluator, PerObjective
from ._statistics import RunningStatistics

# active_rows ... stack_datasets: the helpers most.problem builds problems with (not in __all__)

__all__ = ["Evaluator", "FunctionEvaluator", "ModuleEvaluator", "InstancesEvaluator", "DatasetsEvaluator", "MappedEvaluator",
           "PenalisedEvaluator", "RunningStatistics"]
