"""MosT: Many-Objective Multi-Solution Transport.

Train a few models (m) that together serve many objectives (n >> m): each round an
optimal-transport plan assigns objectives to models, and each model takes steps along
the common descent direction (MGDA) of the objectives it is responsible for.

    >>> import torch, most
    >>> centres = torch.tensor([[0.0, 0.0], [0.3, 0.0], [9.0, 9.0], [9.0, 9.3]])
    >>> problem = most.Problem.from_function(
    ...     lambda theta: ((theta - centres) ** 2).sum(-1), dim=2, n_objectives=4)
    >>> result = most.MosT(n_models=2, rounds=60, lr=0.2).fit(problem)
    >>> result.assignment.shape
    torch.Size([4, 2])

Modules: :mod:`most.transport` (Eqs. 2-4, 6), :mod:`most.mgda` (Eqs. 7-9),
:mod:`most.methods` (assignments, weightings, combiners, MosT-E, curriculum),
:mod:`most.solver` (Algorithm 1), :mod:`most.variants` (ablations),
:mod:`most.problems` (built-in problems), :mod:`most.selection` (choosing m on validation).
"""

from ._warnings import ConvergenceWarning
from . import mgda, transport
from .methods import (
    Curriculum,
    DirichletExtension,
    GammaWeights,
    LoadBounds,
    ShareBounds,
    MajorityShare,
    MinNorm,
    ModelsSelectObjectives,
    TchebycheffExtension,
    ObjectivesSelectModels,
    SmoothMax,
    Uniform,
    WeightedSum,
)
from .problem import Problem
from .seeding import KMeansSeeding, Reseed
from .solver import MGDA, Linearization, Method, MosT, Result, RoundRecord, WeightedMGDA, fit_batch, run
from .selection import ModelCountSelection, choose_n_models
from ._threads import get_threads, set_threads
from . import baselines, metrics, optim, problems, variants

__version__ = "0.1.0"

__all__ = [
    "ConvergenceWarning",
    "Curriculum",
    "DirichletExtension",
    "KMeansSeeding",
    "LoadBounds",
    "ShareBounds",
    "GammaWeights",
    "Linearization",
    "MajorityShare",
    "MGDA",
    "Method",
    "MinNorm",
    "ModelCountSelection",
    "ModelsSelectObjectives",
    "MosT",
    "ObjectivesSelectModels",
    "Problem",
    "Reseed",
    "Result",
    "TchebycheffExtension",
    "RoundRecord",
    "SmoothMax",
    "Uniform",
    "WeightedMGDA",
    "WeightedSum",
    "baselines",
    "choose_n_models",
    "fit_batch",
    "get_threads",
    "mgda",
    "optim",
    "problems",
    "run",
    "set_threads",
    "transport",
    "variants",
]
