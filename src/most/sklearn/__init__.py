r"""scikit-learn estimators: MosT for people who do not write training loops.

:class:`MosTClassifier` and :class:`MosTRegressor` train ``n_models`` small models (linear
by default, an MLP with ``hidden_layer_sizes=(h1, ...)``) that together serve the groups
of a data set. Each distinct label of ``groups`` is one objective, the mean loss of a model
on that group's samples plus an optional L2 penalty on the weight matrices ``W``::

    L_i(theta) = 1/|G_i| sum_{s in G_i} loss(f_theta(x_s), y_s) + alpha/2 ||W||^2

with the cross-entropy as ``loss`` for the classifier and the squared error for the
regressor. The n group losses form a :class:`most.Problem` (evaluated for all m models at
once with :func:`torch.func.vmap`) and :class:`most.MosT` trains the models on it: each
round an optimal-transport plan Gamma assigns groups to models (paper Eq. 6) and each
model follows the min-norm (MGDA) common descent direction of its groups (Eqs. 7-9).

Routing. After ``fit``, every training group is routed to the model with the lowest
training loss on it (``group_model_``). ``predict(X, groups=g)`` uses that model for
samples of a seen group. Samples of an unseen group, and every sample when
``groups=None``, use

* ``routing="average"`` (default): the model whose loss, averaged over the training
  groups (each group counts once), is lowest (``average_model_``);
* ``routing="dispatcher"``: a per-sample choice made by ``dispatcher_``, a
  :class:`~sklearn.linear_model.LogisticRegression` on the standardised features trained
  to predict, for each training sample, the model routed to its group. It helps when the
  groups differ in where their features lie; when all training groups go to one model it
  is a constant (:class:`~sklearn.dummy.DummyClassifier`).

Without groups. ``fit(X, y)`` treats all samples as one group. One objective cannot be
shared out among several models, so the ``n_models`` models are then ``n_models`` random
restarts of the same training problem (each model is given its own copy of the
objective), and predictions use the one with the lowest training loss. Diversity needs
groups; with explicit ``groups`` there must be at least ``n_models`` distinct labels.

Scaling. Features are standardised internally (``mean_``, ``scale_``), and so are the
regressor's targets, so the default learning rate works on unscaled data. Training is
full-batch: every round evaluates each group's loss on all of its samples.

In model selection, ``groups`` reaches ``fit`` and ``score`` through scikit-learn's
metadata routing: with ``sklearn.set_config(enable_metadata_routing=True)``, use
``est.set_fit_request(groups=True).set_score_request(groups=True)`` and
``cross_val_score(est, X, y, params={"groups": groups})``.

Examples:
    >>> import numpy as np
    >>> from most.sklearn import MosTClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(240, 2))
    >>> groups = np.repeat(np.arange(6), 40)            # 6 groups of 40 samples
    >>> flip = groups >= 3                              # groups 3-5 follow the opposite rule
    >>> y = (X[:, 0] > 0) ^ flip
    >>> clf = MosTClassifier(n_models=2, rounds=60, random_state=0).fit(X, y, groups=groups)
    >>> clf.group_model_.tolist() in ([0, 0, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0])
    True
    >>> bool(clf.score(X, y, groups=groups) > 0.9)      # one model alone gets about 0.5
    True
    >>> clf.predict(X[:3], groups=[0, 5, 99]).shape     # group 99 is new: the average model
    (3,)
"""

from __future__ import annotations

try:
    import sklearn  # noqa: F401 - the optional dependency, checked before the estimators import from it
except ImportError as exc:  # pragma: no cover - the optional extra is missing
    raise ImportError(
        "most.sklearn needs scikit-learn, an optional dependency: pip install 'most-transport[sklearn]' "
        "(or pip install scikit-learn)."
    ) from exc

from ._estimators import MosTClassifier, MosTRegressor

__all__ = ["MosTClassifier", "MosTRegressor"]
