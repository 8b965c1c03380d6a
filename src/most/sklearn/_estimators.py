"""The scikit-learn estimators: :class:`MosTClassifier` (cross-entropy) and :class:`MosTRegressor`
(squared error on standardised targets)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from ._base import MosTEstimator
from ._checks import finite_predictions, moments, validate_data
from ._model import DTYPE


class MosTClassifier(ClassifierMixin, MosTEstimator):
    """MosT classifier: ``n_models`` classifiers that together serve the groups of a data set.

    Each group (a distinct label of ``groups``) is one objective, its mean cross-entropy;
    :class:`most.MosT` trains the models on the n group losses, and each group is then
    served by its best model. See :mod:`most.sklearn` for the routing of unseen groups and
    for ``groups=None``.

    Args:
        n_models: m, the number of models (default 3; at most the number of groups).
        hidden_layer_sizes: widths of the hidden ReLU layers, as in
            :class:`~sklearn.neural_network.MLPClassifier`; ``()`` (default) is a linear
            (multinomial logistic) model.
        rounds: MosT rounds, each one transport plan and one step per model (default 200).
        lr: step size of the optimizer (default 0.1).
        optimizer: ``"adam"`` (default, :class:`most.optim.Adam`) or ``"sgd"``
            (:class:`most.optim.SGD`, Algorithm 1 as written).
        diversity: tau, the weight of the transport's diversity regulariser (Eq. 3;
            default 0).
        transport: the transport solver: ``"exact"`` (default), ``"sinkhorn"``,
            ``"newton"`` or ``"ipot"``.
        alpha: L2 penalty ``alpha/2 ||W||^2`` on the weights (not the biases), added to
            every group's loss (default 1e-4).
        routing: how samples of unseen groups (and ``groups=None``) choose a model:
            ``"average"`` (default) or ``"dispatcher"`` (see :mod:`most.sklearn`).
        random_state: seeds the initial models (an int for reproducible fits).
        verbose: show a progress bar during fit.

    Attributes:
        classes_: the class labels, ``[n_classes]``.
        n_features_in_: number of features seen in fit.
        feature_names_in_: feature names, when ``X`` had string column names.
        mean_, scale_: the feature standardisation, ``[n_features]``.
        models_: the m trained models as flat parameter vectors, ``[m, dim]``, acting on
            standardised features (layer by layer: weight ``[fan_in, fan_out]`` row-major,
            then bias).
        groups_: the training group labels, sorted, ``[n_groups]`` (``[None]`` when fit
            had ``groups=None``).
        assignment_: the last transport plan Gamma, ``[n_groups, m]``.
        group_losses_: each model's mean training loss on each group, ``[n_groups, m]``.
        group_model_: the model serving each training group (lowest loss), ``[n_groups]``.
        average_model_: the model with the lowest loss averaged over the groups.
        dispatcher_: with ``routing="dispatcher"``, the classifier that picks a model per
            sample of an unseen group.
        loss_curve_: per round, the mean over groups of the best model's loss (with penalty).
        n_outputs_: number of output units (the number of classes).

    Examples:
        >>> import numpy as np
        >>> from sklearn.base import clone
        >>> from most.sklearn import MosTClassifier
        >>> clf = MosTClassifier(n_models=2, rounds=20, random_state=0)
        >>> clone(clf).get_params()["n_models"]
        2
    """

    def fit(self, X: Any, y: Any, *, groups: Any = None) -> "MosTClassifier":
        """Trains the models; one objective per distinct label of ``groups``.

        Args:
            X: features, ``[n_samples, n_features]``.
            y: class labels, ``[n_samples]``.
            groups: group label of each sample, ``[n_samples]``; ``None`` is one group.
                Keyword-only: in scikit-learn a third positional argument of ``fit`` is
                ``sample_weight``, which must not be taken for group labels.

        Returns:
            self
        """
        with self._unchanged_on_failure():
            X, y = validate_data(self, X, y, reset=True, dtype=np.float64, y_numeric=False)
            y = column_or_1d(y, warn=True)
            check_classification_targets(y)
            self._set_fitted(self._fit(X, y, groups))
        return self

    def _encode_targets(self, y):
        classes, codes = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"MosTClassifier needs samples of at least 2 classes; got 1 class ({classes[0]!r}).")
        return torch.as_tensor(codes.reshape(-1)), len(classes), {"classes_": classes}

    @staticmethod
    def _sample_loss(outputs, targets):
        return torch.nn.functional.cross_entropy(outputs, targets, reduction="none")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags

    def decision_function(self, X: Any, groups: Any = None) -> np.ndarray:
        """Logits of each sample's routed model: ``[N, n_classes]``, or ``[N]`` (the log-odds
        of ``classes_[1]``) for two classes."""
        logits = self._outputs(X, groups)
        if len(self.classes_) != 2:
            return logits
        # two finite logits near the float range can differ by more than it holds: kept finite
        with np.errstate(over="ignore"):
            return np.clip(logits[:, 1] - logits[:, 0], -np.finfo(logits.dtype).max, np.finfo(logits.dtype).max)

    def predict_proba(self, X: Any, groups: Any = None) -> np.ndarray:
        """Class probabilities of each sample's routed model, ``[N, n_classes]``."""
        return torch.softmax(torch.as_tensor(self._outputs(X, groups)), dim=1).numpy()

    def predict_log_proba(self, X: Any, groups: Any = None) -> np.ndarray:
        """Log class probabilities, ``[N, n_classes]``."""
        return torch.log_softmax(torch.as_tensor(self._outputs(X, groups)), dim=1).numpy()

    def predict(self, X: Any, groups: Any = None) -> np.ndarray:
        """Class labels from each sample's routed model, ``[N]``."""
        labels = self._outputs(X, groups).argmax(1)
        return self.classes_[labels]

    def score(self, X: Any, y: Any, sample_weight: Any = None, *, groups: Any = None) -> float:
        """Accuracy of :meth:`predict` with ``groups``, weighted by ``sample_weight``.

        ``sample_weight`` is the third positional argument, as in scikit-learn; ``groups`` is
        keyword-only, so that weights are never taken for group labels."""
        return float(accuracy_score(y, self.predict(X, groups=groups), sample_weight=sample_weight))


class MosTRegressor(RegressorMixin, MosTEstimator):
    """MosT regressor: ``n_models`` regressors that together serve the groups of a data set.

    Each group (a distinct label of ``groups``) is one objective, its mean squared error on
    standardised targets; ``y`` may have several columns. Parameters are those of
    :class:`~most.sklearn.MosTClassifier`.

    Besides the attributes below, it has those of :class:`~most.sklearn.MosTClassifier` except
    ``classes_``: ``n_features_in_``, ``feature_names_in_``, ``mean_``, ``scale_``,
    ``models_``, ``groups_``, ``assignment_``, ``group_losses_``, ``group_model_``,
    ``average_model_``, ``dispatcher_`` and ``loss_curve_``.

    Attributes:
        y_mean_, y_scale_: the target standardisation, ``[n_outputs]``.
        n_outputs_: number of targets.
        coef_, intercept_: for linear models (``hidden_layer_sizes=()``), each model in the
            original units: ``y = X @ coef_[j].T + intercept_[j]``, shapes
            ``[m, n_outputs, n_features]`` and ``[m, n_outputs]``.

    Examples:
        >>> import numpy as np
        >>> from most.sklearn import MosTRegressor
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 1))
        >>> groups = np.repeat(np.arange(4), 50)
        >>> y = np.where(groups < 2, 3.0, -3.0) * X[:, 0] + 1.0   # two hidden slopes
        >>> reg = MosTRegressor(n_models=2, rounds=150, alpha=0.0, random_state=0)
        >>> reg = reg.fit(X, y, groups=groups)
        >>> sorted(np.round(reg.coef_[:, 0, 0], 1).tolist())
        [-3.0, 3.0]
    """

    def fit(self, X: Any, y: Any, *, groups: Any = None) -> "MosTRegressor":
        """Trains the models; one objective per distinct label of ``groups``.

        Args:
            X: features, ``[n_samples, n_features]``.
            y: targets, ``[n_samples]`` or ``[n_samples, n_outputs]``.
            groups: group label of each sample, ``[n_samples]``; ``None`` is one group.
                Keyword-only: in scikit-learn a third positional argument of ``fit`` is
                ``sample_weight``, which must not be taken for group labels.

        Returns:
            self
        """
        with self._unchanged_on_failure():
            X, y = validate_data(self, X, y, reset=True, dtype=np.float64, y_numeric=True, multi_output=True)
            if y.dtype.kind in "USb":  # scikit-learn's y_numeric converts object arrays only
                try:
                    y = y.astype(np.float64)
                except ValueError as exc:
                    raise ValueError(f"y must hold numbers (the regression targets); got {y.dtype} values that are "
                                     f"not numbers ({exc}).") from None
            fitted = self._fit(X, y, groups)
            if not fitted["_layers"][1:]:  # one layer: a linear model
                fitted.update(self._linear_coefficients(fitted))
            self._set_fitted(fitted)
        return self

    def _encode_targets(self, y):
        y2 = y.reshape(len(y), -1)
        mean, scale = moments(y2, name="y")
        fitted = {"y_mean_": mean, "y_scale_": scale, "_single_output": y.ndim == 1}
        return torch.as_tensor((y2 - mean) / scale, dtype=DTYPE), y2.shape[1], fitted

    @staticmethod
    def _sample_loss(outputs, targets):
        return ((outputs - targets) ** 2).mean(-1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    @staticmethod
    def _linear_coefficients(fitted: dict[str, Any]) -> dict[str, np.ndarray]:
        """``coef_`` and ``intercept_`` of linear models, in the original units of X and y."""
        (d, k), = fitted["_layers"]
        models, x_mean, x_scale = fitted["models_"], fitted["mean_"], fitted["scale_"]
        weight = models[:, : d * k].reshape(-1, d, k)  # [m, d, k], standardised units
        bias = models[:, d * k :]  # [m, k]
        coef = weight / x_scale[None, :, None] * fitted["y_scale_"][None, None, :]  # [m, d, k]
        intercept = bias * fitted["y_scale_"] + fitted["y_mean_"] - np.einsum("d,mdk->mk", x_mean, coef)
        return {"coef_": coef.transpose(0, 2, 1), "intercept_": intercept}

    def predict(self, X: Any, groups: Any = None) -> np.ndarray:
        """Predictions of each sample's routed model, ``[N]`` (or ``[N, n_outputs]``)."""
        with np.errstate(over="ignore", invalid="ignore"):
            out = finite_predictions(self._outputs(X, groups) * self.y_scale_ + self.y_mean_)
        return out[:, 0] if self._single_output else out

    def score(self, X: Any, y: Any, sample_weight: Any = None, *, groups: Any = None) -> float:
        """R^2 of :meth:`predict` with ``groups``, weighted by ``sample_weight``.

        ``sample_weight`` is the third positional argument, as in scikit-learn; ``groups`` is
        keyword-only, so that weights are never taken for group labels."""
        return float(r2_score(y, self.predict(X, groups=groups), sample_weight=sample_weight))
