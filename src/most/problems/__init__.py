"""Built-in problems with known structure.

* :func:`quadratic_clusters` -- ``L_i(theta) = ||theta - c_i||^2`` with the centres in a
  few well-separated clusters; the Pareto set of a cluster is the convex hull of its
  centres, so "each cluster ends with its own model inside its hull" is checkable.
* :func:`mixed_regression` -- n least-squares objectives, each on its own data drawn from
  one of a few ground-truth linear models (the many-objective problem of the demo).
* :func:`zafar_synthetic`, :func:`load_german_credit` -- fairness-accuracy data
  (:class:`FairnessData`: logistic loss and the disparate-impact proxy of Zafar et al.).
* :func:`load_office_caltech10` -- Office-Caltech10 (:class:`OfficeCaltech10`): 10-class
  recognition in 4 domains (SURF features or images), one objective per domain.
* :func:`load_superglue` -- SuperGLUE BoolQ, MultiRC, WiC as :class:`TextTask` text pairs,
  split as in the mixture-of-soft-prompts benchmark (one objective per training instance).
* :func:`zdt` -- ZDT1, ZDT2, ZDT3: two objectives in [0, 1]^30 with known Pareto fronts.
"""

from ._fairness import FairnessData, german_credit_file, load_german_credit, zafar_synthetic
from ._office_caltech import OFFICE_CALTECH10_ENV, OfficeCaltech10, load_office_caltech10
from ._superglue import SUPERGLUE_ENV, TextTask, load_superglue
from ._synthetic import MixedRegression, mixed_regression, quadratic_clusters
from ._zdt import ZDT_REFERENCE_POINTS, zdt, zdt_front

__all__ = [
    "FairnessData",
    "load_german_credit",
    "german_credit_file",
    "zafar_synthetic",
    "OFFICE_CALTECH10_ENV",
    "OfficeCaltech10",
    "load_office_caltech10",
    "SUPERGLUE_ENV",
    "TextTask",
    "load_superglue",
    "MixedRegression", "ZDT_REFERENCE_POINTS", "mixed_regression", "quadratic_clusters", "zdt", "zdt_front"]
