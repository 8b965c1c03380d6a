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

import numbers
from typing import Any, Callable, Literal, cast

import numpy as np
import torch

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
    from sklearn.dummy import DummyClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, r2_score
    from sklearn.utils import check_random_state
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, column_or_1d
except ImportError as exc:  # pragma: no cover - the optional extra is missing
    raise ImportError(
        "most.sklearn needs scikit-learn, an optional dependency: pip install 'most-transport[sklearn]' "
        "(or pip install scikit-learn)."
    ) from exc
from torch import Tensor
from torch.func import vmap

from . import optim
from .problem import Problem
from .solver import MosT

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn

    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)


__all__ = ["MosTClassifier", "MosTRegressor"]

_DTYPE = torch.float64
#: Seeds are drawn below this bound from ``random_state`` (numpy's int32 limit).
_MAX_SEED = np.iinfo(np.int32).max
_Transport = Literal["exact", "sinkhorn", "newton", "ipot"]
_TRANSPORTS = ("exact", "sinkhorn", "newton", "ipot")
_OPTIMIZERS = {"adam": optim.Adam, "sgd": optim.SGD}
_ROUTINGS = ("average", "dispatcher")


# ---------------------------------------------------------------------- the model
def _layer_sizes(n_features: int, hidden: tuple[int, ...], n_outputs: int) -> list[tuple[int, int]]:
    sizes = [n_features, *hidden, n_outputs]
    return list(zip(sizes[:-1], sizes[1:]))


def _n_params(layers: list[tuple[int, int]]) -> int:
    return sum(fan_in * fan_out + fan_out for fan_in, fan_out in layers)


def _forward(theta: Tensor, X: Tensor, layers: list[tuple[int, int]]) -> Tensor:
    """The MLP (ReLU between layers; linear when there is one layer) with flat parameters
    ``theta [dim]`` on ``X [N, d]``: outputs ``[N, n_outputs]``."""
    out, start = X, 0
    for k, (fan_in, fan_out) in enumerate(layers):
        weight = theta[start : start + fan_in * fan_out].reshape(fan_in, fan_out)
        start += fan_in * fan_out
        bias = theta[start : start + fan_out]
        start += fan_out
        out = out @ weight + bias
        if k < len(layers) - 1:
            out = torch.relu(out)
    return out


def _weight_penalty(theta: Tensor, layers: list[tuple[int, int]]) -> Tensor:
    """``0.5 * ||W||^2`` over the weight matrices (biases are not penalised)."""
    total, start = theta.new_zeros(()), 0
    for fan_in, fan_out in layers:
        total = total + 0.5 * (theta[start : start + fan_in * fan_out] ** 2).sum()
        start += fan_in * fan_out + fan_out
    return total


def _initializer(layers: list[tuple[int, int]]) -> Callable[[int, torch.Generator], Tensor]:
    """``(m, generator) -> [m, dim]``: every weight and bias of a layer uniform in
    ``+-1/sqrt(fan_in)`` (the default of ``torch.nn.Linear``), drawn from the run's generator."""

    def init(m: int, generator: torch.Generator) -> Tensor:
        parts = []
        for fan_in, fan_out in layers:
            bound = 1.0 / np.sqrt(fan_in)
            size = fan_in * fan_out + fan_out
            parts.append((2 * torch.rand(m, size, generator=generator, dtype=_DTYPE) - 1) * bound)
        return torch.cat(parts, dim=1)

    return init


def _all_models(params: Tensor, X: Tensor, layers: list[tuple[int, int]]) -> Tensor:
    """Outputs of every model: ``params [m, dim]``, ``X [N, d]`` -> ``[m, N, n_outputs]``."""
    with torch.no_grad():
        return vmap(_forward, in_dims=(0, None, None))(params, X, layers)


# ---------------------------------------------------------------------- validation
def _moments(a: np.ndarray, *, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and standard deviation (1 where it is 0) used to standardise ``a``
    ``[n_samples, k]``; a column whose values overflow them in float64 is refused."""
    with np.errstate(over="ignore", invalid="ignore"):
        mean, scale = a.mean(axis=0), a.std(axis=0)
    bad = ~(np.isfinite(mean) & np.isfinite(scale))
    if bad.any():
        col = int(np.argmax(bad))
        raise ValueError(
            f"`{name}` is too large to standardise in float64: column {col} (largest magnitude "
            f"{float(np.abs(a[:, col]).max()):.3g}) overflows its mean or standard deviation. Rescale it "
            f"before fit, e.g. divide by a constant such as `np.abs({name}).max()`"
            + (" (and multiply the predictions by it)." if name == "y" else " (and X at predict time too).")
        )
    return mean, np.where(scale > 0, scale, 1.0)


def _finite_predictions(out: np.ndarray) -> np.ndarray:
    """``out`` unchanged when finite; a sample whose prediction overflowed is refused, never returned."""
    bad = ~np.isfinite(out)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(
            f"The prediction for sample {row} is not finite (it overflows float64): its features lie far "
            "outside the range of the training data. Check that X is in the units used in fit."
        )
    return out


def _param_error(estimator: BaseEstimator, name: str, must: str, value: Any) -> ValueError:
    return ValueError(
        f"The '{name}' parameter of {type(estimator).__name__} must be {must}. Got {value!r} instead."
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)


def _check_params(est: "_MosTEstimator") -> tuple[int, ...]:
    """Validates the constructor parameters; returns ``hidden_layer_sizes`` as a tuple."""
    if not _is_int(est.n_models) or est.n_models < 1:
        raise _param_error(est, "n_models", "an int in the range [1, inf)", est.n_models)
    if not _is_int(est.rounds) or est.rounds < 1:
        raise _param_error(est, "rounds", "an int in the range [1, inf)", est.rounds)
    if not _is_real(est.lr) or est.lr <= 0:
        raise _param_error(est, "lr", "a float in the range (0, inf)", est.lr)
    if not _is_real(est.diversity) or est.diversity < 0:
        raise _param_error(est, "diversity", "a float in the range [0, inf)", est.diversity)
    if not _is_real(est.alpha) or est.alpha < 0:
        raise _param_error(est, "alpha", "a float in the range [0, inf)", est.alpha)
    if est.optimizer not in _OPTIMIZERS:
        raise _param_error(est, "optimizer", f"a str among {set(_OPTIMIZERS)}", est.optimizer)
    if est.transport not in _TRANSPORTS:
        raise _param_error(est, "transport", f"a str among {set(_TRANSPORTS)}", est.transport)
    if est.routing not in _ROUTINGS:
        raise _param_error(est, "routing", f"a str among {set(_ROUTINGS)}", est.routing)
    hidden: Any = est.hidden_layer_sizes  # as set (an int, an iterable, anything), checked here
    hidden = (hidden,) if _is_int(hidden) else hidden
    sizes: tuple[int, ...] | None
    try:
        sizes = tuple(hidden)
    except TypeError:
        sizes = None
    if sizes is None or not all(_is_int(h) and h >= 1 for h in sizes):
        raise _param_error(
            est, "hidden_layer_sizes", "a tuple of ints >= 1 (() for a linear model)", est.hidden_layer_sizes
        )
    return sizes


def _check_groups(groups: Any, n_samples: int, *, where: str) -> np.ndarray:
    groups = np.asarray(groups)
    if groups.ndim != 1:
        raise ValueError(
            f"groups in {where} must be a 1-D array with one group label per sample; got shape {groups.shape}."
        )
    if groups.shape[0] != n_samples:
        raise ValueError(
            f"groups in {where} has {groups.shape[0]} labels but X has {n_samples} samples; "
            "pass one group label per sample."
        )
    if groups.dtype.kind == "f" and np.isnan(groups).any():
        raise ValueError(f"groups in {where} contains NaN; every sample needs a group label.")
    if groups.dtype.kind == "O":
        try:
            np.unique(groups)
        except TypeError as exc:
            raise ValueError(
                f"groups in {where} mixes labels that cannot be compared ({exc}); use labels of one type."
            ) from exc
    return groups


# ---------------------------------------------------------------------- shared estimator
class _MosTEstimator(BaseEstimator):
    """What the classifier and the regressor share: fit, routing, and the parameters.

    A subclass defines how targets are encoded (``_encode_targets``), the number of outputs,
    and the per-sample loss ``_sample_loss(outputs [N, k], targets) -> [N]``.
    """

    def __init__(
        self,
        n_models: int = 3,
        *,
        hidden_layer_sizes: tuple[int, ...] = (),
        rounds: int = 200,
        lr: float = 0.1,
        optimizer: str = "adam",
        diversity: float = 0.0,
        transport: str = "exact",
        alpha: float = 1e-4,
        routing: str = "average",
        random_state: int | np.random.RandomState | None = None,
        verbose: bool = False,
    ):
        self.n_models = n_models
        self.hidden_layer_sizes = hidden_layer_sizes
        self.rounds = rounds
        self.lr = lr
        self.optimizer = optimizer
        self.diversity = diversity
        self.transport = transport
        self.alpha = alpha
        self.routing = routing
        self.random_state = random_state
        self.verbose = verbose

    # -- subclass hooks
    def _encode_targets(self, y: np.ndarray) -> tuple[Tensor, int, dict[str, Any]]:  # pragma: no cover
        """``y`` -> (training targets, number of outputs, fitted attributes to set)."""
        raise NotImplementedError

    @staticmethod
    def _sample_loss(outputs: Tensor, targets: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- fitting
    def _fit(self, X: np.ndarray, y: np.ndarray, groups: Any) -> dict[str, Any]:
        """Trains the models and returns the fitted attributes; sets nothing on ``self``, so
        that a fit that fails leaves the estimator as it was."""
        hidden = _check_params(self)
        n_samples = X.shape[0]
        if groups is None:
            seen, group_index = np.array([None], dtype=object), np.zeros(n_samples, dtype=np.int64)
        else:
            groups = _check_groups(groups, n_samples, where="fit")
            seen, group_index = np.unique(groups, return_inverse=True)
            if len(seen) < self.n_models:
                raise ValueError(
                    f"n_models={self.n_models} but groups has only {len(seen)} distinct labels: "
                    "MosT gives every model a share of the groups (the objectives), so it needs at least as "
                    f"many groups as models. Lower n_models to at most {len(seen)}, or split the data "
                    "into more groups."
                )
        n_groups = len(seen)
        mean, scale = _moments(X, name="X")
        Xt = torch.as_tensor((X - mean) / scale, dtype=_DTYPE)
        targets, n_outputs, fitted = self._encode_targets(y)
        layers = _layer_sizes(X.shape[1], hidden, n_outputs)
        names = None if groups is None else tuple(str(g) for g in seen)
        problem = self._problem(Xt, targets, group_index, n_groups, layers, names)

        seed = int(check_random_state(self.random_state).randint(_MAX_SEED))
        solver = MosT(
            n_models=self.n_models,
            rounds=self.rounds,
            lr=float(self.lr),
            diversity=float(self.diversity),
            transport=cast(_Transport, self.transport),  # checked against _TRANSPORTS
            optimizer=_OPTIMIZERS[self.optimizer](),
            seed=seed,
            progress=bool(self.verbose),
        )
        result = solver.fit(problem)
        params = result.params

        # Routing is decided on the data loss only (without the L2 penalty).
        sample_losses = vmap(self._sample_loss, in_dims=(0, None))(_all_models(params, Xt, layers), targets)
        index = torch.as_tensor(group_index)
        counts = torch.bincount(index, minlength=n_groups).to(_DTYPE)
        group_losses = torch.zeros(self.n_models, n_groups, dtype=_DTYPE).index_add(1, index, sample_losses)
        group_losses = ((group_losses / counts).T).numpy().copy()  # [n_groups, m]
        plan = result.assignment
        if groups is None:  # the m copies of the single objective -> one row
            plan = plan.sum(0, keepdim=True)
        group_model = group_losses.argmin(1)

        fitted.update(
            mean_=mean,
            scale_=scale,
            groups_=seen,
            models_=params.numpy().copy(),
            assignment_=plan.numpy().copy(),
            group_losses_=group_losses,
            group_model_=group_model,
            average_model_=int(group_losses.mean(0).argmin()),
            loss_curve_=[r.mean_best_loss for r in result.history],
            n_outputs_=n_outputs,
            _layers=layers,
            _one_group=groups is None,
        )
        if self.routing == "dispatcher":
            fitted["dispatcher_"] = self._fit_dispatcher(Xt.numpy(), group_model[group_index], seed)
        return fitted

    def _set_fitted(self, fitted: dict[str, Any]) -> None:
        for stale in ("dispatcher_", "coef_", "intercept_"):
            if stale not in fitted and hasattr(self, stale):
                delattr(self, stale)
        for name, value in fitted.items():
            setattr(self, name, value)

    def _problem(self, Xt: Tensor, targets: Tensor, group_index: np.ndarray, n_groups: int,
                 layers: list[tuple[int, int]], names: tuple[str, ...] | None) -> Problem:
        """The n per-group mean losses (plus the L2 penalty) as a :class:`most.Problem`.

        Without ``names`` (``groups=None``), the one group's loss is given ``n_models``
        times, one copy per model, so that every model trains on all samples.
        """
        alpha, sample_loss, replicate = float(self.alpha), self._sample_loss, names is None
        index = torch.as_tensor(group_index)
        weights = (1.0 / torch.bincount(index, minlength=n_groups).to(_DTYPE))[index]  # [N]: 1 / |group|
        n_objectives = self.n_models if replicate else n_groups
        objective_group = torch.zeros(n_objectives, dtype=torch.long) if replicate else torch.arange(n_groups)

        def fn(theta: Tensor) -> Tensor:
            losses = sample_loss(_forward(theta, Xt, layers), targets) * weights
            group = torch.zeros(n_groups, dtype=theta.dtype).index_add(0, index, losses)
            if alpha > 0:
                group = group + alpha * _weight_penalty(theta, layers)
            return group[objective_group]

        return Problem.from_function(fn, dim=_n_params(layers), n_objectives=n_objectives,
                                     init=_initializer(layers), names=names)

    @staticmethod
    def _fit_dispatcher(Xt: np.ndarray, model_of_sample: np.ndarray, seed: int):
        if len(np.unique(model_of_sample)) == 1:
            return DummyClassifier(strategy="most_frequent").fit(Xt, model_of_sample)
        return LogisticRegression(max_iter=1000, random_state=seed).fit(Xt, model_of_sample)

    # -- prediction
    def _route(self, Xt: np.ndarray, groups: Any) -> np.ndarray:
        """The model index for each sample, ``[N]``."""
        n_samples = Xt.shape[0]
        if self.routing == "dispatcher":
            if not hasattr(self, "dispatcher_"):
                raise ValueError(
                    "routing='dispatcher' was set after fit, so no dispatcher was trained; call fit again."
                )
            fallback = self.dispatcher_.predict(Xt).astype(np.int64)
        else:
            fallback = np.full(n_samples, self.average_model_, dtype=np.int64)
        if groups is None:
            return fallback
        groups = _check_groups(groups, n_samples, where="predict")
        seen = self.groups_[:0] if self._one_group else self.groups_
        try:
            known = np.isin(groups, seen)
        except TypeError:  # labels of another type than in fit: none of them were seen
            known = np.zeros(n_samples, dtype=bool)
        route = fallback.copy()
        if known.any():
            route[known] = self.group_model_[np.searchsorted(seen, groups[known])]
        return route

    def _outputs(self, X: Any, groups: Any) -> np.ndarray:
        """Raw outputs of each sample's routed model, ``[N, n_outputs]`` (standardised units)."""
        check_is_fitted(self)
        X = _validate_data(self, X, reset=False, dtype=np.float64)
        Xs = (X - self.mean_) / self.scale_
        route = self._route(Xs, groups)
        outputs = _all_models(torch.as_tensor(self.models_), torch.as_tensor(Xs), self._layers)
        return _finite_predictions(outputs[torch.as_tensor(route), torch.arange(Xs.shape[0])].numpy())


class MosTClassifier(ClassifierMixin, _MosTEstimator):
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

    def fit(self, X: Any, y: Any, groups: Any = None) -> "MosTClassifier":
        """Trains the models; one objective per distinct label of ``groups``.

        Args:
            X: features, ``[n_samples, n_features]``.
            y: class labels, ``[n_samples]``.
            groups: group label of each sample, ``[n_samples]``; ``None`` is one group.

        Returns:
            self
        """
        X, y = _validate_data(self, X, y, reset=True, dtype=np.float64, y_numeric=False)
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
        return logits[:, 1] - logits[:, 0] if len(self.classes_) == 2 else logits

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

    def score(self, X: Any, y: Any, groups: Any = None, sample_weight: Any = None) -> float:
        """Accuracy of :meth:`predict` with ``groups``."""
        return float(accuracy_score(y, self.predict(X, groups=groups), sample_weight=sample_weight))


class MosTRegressor(RegressorMixin, _MosTEstimator):
    """MosT regressor: ``n_models`` regressors that together serve the groups of a data set.

    Each group (a distinct label of ``groups``) is one objective, its mean squared error on
    standardised targets; ``y`` may have several columns. Parameters are those of
    :class:`MosTClassifier`.

    Besides the attributes below, it has those of :class:`MosTClassifier` except
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

    def fit(self, X: Any, y: Any, groups: Any = None) -> "MosTRegressor":
        """Trains the models; one objective per distinct label of ``groups``.

        Args:
            X: features, ``[n_samples, n_features]``.
            y: targets, ``[n_samples]`` or ``[n_samples, n_outputs]``.
            groups: group label of each sample, ``[n_samples]``; ``None`` is one group.

        Returns:
            self
        """
        X, y = _validate_data(self, X, y, reset=True, dtype=np.float64, y_numeric=True, multi_output=True)
        fitted = self._fit(X, y, groups)
        if not fitted["_layers"][1:]:  # one layer: a linear model
            fitted.update(self._linear_coefficients(fitted))
        self._set_fitted(fitted)
        return self

    def _encode_targets(self, y):
        y2 = y.reshape(len(y), -1)
        mean, scale = _moments(y2, name="y")
        fitted = {"y_mean_": mean, "y_scale_": scale, "_single_output": y.ndim == 1}
        return torch.as_tensor((y2 - mean) / scale, dtype=_DTYPE), y2.shape[1], fitted

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
            out = _finite_predictions(self._outputs(X, groups) * self.y_scale_ + self.y_mean_)
        return out[:, 0] if self._single_output else out

    def score(self, X: Any, y: Any, groups: Any = None, sample_weight: Any = None) -> float:
        """R^2 of :meth:`predict` with ``groups``."""
        return float(r2_score(y, self.predict(X, groups=groups), sample_weight=sample_weight))
