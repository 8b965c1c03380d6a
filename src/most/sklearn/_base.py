"""What the two estimators share: the parameters, fit (the group losses as a :class:`most.Problem`
trained by :class:`most.MosT`), the routing of samples to models and the outputs of the routed models."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Literal, cast

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.dummy import DummyClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted
from torch import Tensor
from torch.func import vmap

from ..problem import Problem
from ..solver import MosT
from ..seeding import SeedingDiverged
from ._checks import OPTIMIZERS, check_groups, check_params, finite_predictions, label_kind, moments, validate_data
from ._model import DTYPE, all_models, forward, initializer, layer_sizes, n_params, weight_penalty

#: Seeds are drawn below this bound from ``random_state`` (numpy's int32 limit).
_MAX_SEED = np.iinfo(np.int32).max
_Transport = Literal["exact", "sinkhorn", "newton", "ipot"]
#: What ``validate_data(..., reset=True)`` sets on the estimator, before the fit's own checks run.
_INPUT_ATTRIBUTES = ("n_features_in_", "feature_names_in_")


class MosTEstimator(BaseEstimator):
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
        hidden = check_params(self)
        n_samples = X.shape[0]
        if groups is None:
            seen, group_index = np.array([None], dtype=object), np.zeros(n_samples, dtype=np.int64)
        else:
            groups = check_groups(groups, n_samples, where="fit")
            seen, group_index = np.unique(groups, return_inverse=True)
            if len(seen) < self.n_models:
                raise ValueError(
                    f"n_models={self.n_models} but groups has only {len(seen)} distinct labels: "
                    "MosT gives every model a share of the groups (the objectives), so it needs at least as "
                    f"many groups as models. Lower n_models to at most {len(seen)}, or split the data "
                    "into more groups."
                )
        n_groups = len(seen)
        mean, scale = moments(X, name="X")
        Xt = torch.as_tensor((X - mean) / scale, dtype=DTYPE)
        targets, n_outputs, fitted = self._encode_targets(y)
        layers = layer_sizes(X.shape[1], hidden, n_outputs)
        names = None if groups is None else tuple(str(g) for g in seen)
        problem = self._problem(Xt, targets, group_index, n_groups, layers, names)

        seed = int(check_random_state(self.random_state).randint(_MAX_SEED))
        solver = MosT(
            n_models=self.n_models,
            rounds=self.rounds,
            lr=float(self.lr),
            diversity=float(self.diversity),
            transport=cast(_Transport, self.transport),  # checked by check_params
            optimizer=OPTIMIZERS[self.optimizer](),
            seed=seed,
            progress=bool(self.verbose),
        )
        try:
            result = solver.fit(problem)
        except SeedingDiverged:  # its advice names the method's `seeding`, which the estimators do not take
            raise ValueError(f"While the models were spread over the groups (seeding), a gradient became non-finite "
                             f"with lr={self.lr!r}: try a smaller `lr`.") from None
        params = result.params

        # Routing is decided on the data loss only (without the L2 penalty).
        sample_losses = vmap(self._sample_loss, in_dims=(0, None))(all_models(params, Xt, layers), targets)
        index = torch.as_tensor(group_index)
        counts = torch.bincount(index, minlength=n_groups).to(DTYPE)
        group_losses = torch.zeros(self.n_models, n_groups, dtype=DTYPE).index_add(1, index, sample_losses)
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

    @contextmanager
    def _unchanged_on_failure(self) -> Iterator[None]:
        """Around a whole fit: when it fails, puts back the ``n_features_in_`` and
        ``feature_names_in_`` that ``validate_data(..., reset=True)`` replaced (or removes them
        on a first fit), so that a failed fit leaves the estimator as it was."""
        saved = {name: vars(self)[name] for name in _INPUT_ATTRIBUTES if name in vars(self)}
        try:
            yield
        except BaseException:
            for name in _INPUT_ATTRIBUTES:
                if name in saved:
                    setattr(self, name, saved[name])
                elif name in vars(self):
                    delattr(self, name)
            raise

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
        weights = (1.0 / torch.bincount(index, minlength=n_groups).to(DTYPE))[index]  # [N]: 1 / |group|
        n_objectives = self.n_models if replicate else n_groups
        objective_group = torch.zeros(n_objectives, dtype=torch.long) if replicate else torch.arange(n_groups)

        def fn(theta: Tensor) -> Tensor:
            losses = sample_loss(forward(theta, Xt, layers), targets) * weights
            group = torch.zeros(n_groups, dtype=theta.dtype).index_add(0, index, losses)
            if alpha > 0:
                group = group + alpha * weight_penalty(theta, layers)
            return group[objective_group]

        return Problem.from_function(fn, dim=n_params(layers), n_objectives=n_objectives,
                                     init=initializer(layers), names=names)

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
        groups = check_groups(groups, n_samples, where="predict")
        given, fitted = label_kind(groups), label_kind(self.groups_)
        if {given, fitted} == {"number", "string"}:  # e.g. labels read back from a CSV file as text
            raise ValueError(
                f"groups in predict are {given}s but the estimator was fitted with {fitted} labels "
                f"(e.g. {np.asarray(self.groups_[0]).tolist()!r}): none would match, and every sample would take the model of a new "
                "group. Pass the labels as in fit (e.g. `groups.astype(int)`), one type for every sample.")
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
        X = validate_data(self, X, reset=False, dtype=np.float64)
        Xs = (X - self.mean_) / self.scale_
        route = self._route(Xs, groups)
        outputs = all_models(torch.as_tensor(self.models_), torch.as_tensor(Xs), self._layers)
        return finite_predictions(outputs[torch.as_tensor(route), torch.arange(Xs.shape[0])].numpy())
