"""Built-in problems with known structure.

* :func:`quadratic_clusters` -- ``L_i(theta) = ||theta - c_i||^2`` with the centres in a
  few well-separated clusters; the Pareto set of a cluster is the convex hull of its
  centres, so "each cluster ends with its own model inside its hull" is checkable.
* :func:`mixed_regression` -- n least-squares objectives, each on its own data drawn from
  one of a few ground-truth linear models (the many-objective problem of the demo).
"""

from ._synthetic import MixedRegression, mixed_regression, quadratic_clusters

__all__ = ["MixedRegression", "mixed_regression", "quadratic_clusters"]
