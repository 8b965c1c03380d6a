"""Fairness--accuracy trade-offs: binary classification with a sensitive attribute.

A :class:`FairnessData` holds features ``X [N, p]``, labels ``y [N]`` and a sensitive
attribute ``z [N]`` (both in {0, 1}). :meth:`FairnessData.problem` turns it into a
two-objective :class:`~most.Problem` over a linear classifier ``theta = [w (p), b]``:

1. ``logistic_loss`` -- mean binary cross-entropy of ``sigmoid(X w + b)``, computed as
   ``softplus(s) - y s`` with ``s = X w + b`` (finite for every ``theta``);
2. ``covariance_proxy`` -- the decision-boundary covariance of Zafar, Valera,
   Gomez-Rodriguez & Gummadi, "Fairness Constraints: Mechanisms for Fair Classification"
   (AISTATS 2017): ``|(1/N) sum_i (z_i - mean(z)) (w^T x_i + b)|``, the absolute
   empirical covariance between the sensitive attribute and the signed distance to the
   boundary. It is a convex proxy of disparate impact; as in the paper it uses the plain
   absolute value, so its gradient is not continuous: it flips sign where the covariance
   crosses 0 (torch takes the subgradient 0 exactly at 0). That is harmless for MGDA, which
   only needs one (sub)gradient per objective per step. The proxy grows linearly with the
   scale of ``theta`` and is 0 at ``theta = 0`` (where the loss is ``log 2``), so here it is
   traded off against the loss rather than imposed as the paper's constraint.

Data sets:

* :func:`zafar_synthetic` -- the two-Gaussian generator of Zafar et al.'s public code, with
  the sensitive attribute drawn from the class posterior at rotated features.
* :func:`load_german_credit` -- UCI Statlog German credit (``german.data``, not shipped);
  sensitive attribute: sex (from attribute 9, which is then not a feature).

Report metrics on held-out splits with :meth:`FairnessData.accuracy` and
:meth:`FairnessData.disparate_impact` (demographic-parity difference; the p%-rule ratio is
:meth:`FairnessData.p_rule`).

Examples:
    >>> import torch
    >>> from most.problems._fairness import zafar_synthetic
    >>> data = zafar_synthetic(200, seed=1)
    >>> parts = data.split(seed=0)
    >>> problem = parts["train"].problem()
    >>> problem.dim, problem.n_objectives
    (3, 2)
    >>> problem.loss_matrix(torch.zeros(4, 3)).shape
    torch.Size([2, 4])
    >>> parts["test"].accuracy(torch.zeros(4, 3)).shape
    torch.Size([4])
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor
from torch.nn.functional import softplus

from .._random import stratified_split
from .._validation import as_number, check_path, check_positive_int, check_seed
from ..problem import Problem

__all__ = ["FairnessData", "load_german_credit", "zafar_synthetic", "GERMAN_CREDIT_ENV"]

#: Environment variable read by :func:`load_german_credit` when no path is given.
GERMAN_CREDIT_ENV = "MOST_GERMAN_CREDIT"

_SPLITS = ("train", "val", "test")


def _as_binary(values, *, name: str, dtype: torch.dtype) -> Tensor:
    t = torch.as_tensor(values).to(dtype)
    if t.ndim != 1:
        raise ValueError(f"`{name}` must be a vector [N]; got shape {tuple(t.shape)}.")
    if not ((t == 0) | (t == 1)).all():
        raise ValueError(f"`{name}` must contain only 0 and 1.")
    return t


@dataclass(frozen=True, eq=False)
class FairnessData:
    """A binary classification data set with a binary sensitive attribute.

    Attributes:
        X: ``[N, p]`` features (standardised numeric and one-hot categorical columns); no
            bias column -- the bias is the last parameter of a model.
        y: ``[N]`` labels in {0, 1} (float).
        z: ``[N]`` sensitive attribute in {0, 1} (float).
        feature_names: ``p`` column names.
        name: a label for reports (splits append ``[train]`` etc.).

    Models are rows ``theta = [w (p), b]`` of a ``[m, p + 1]`` tensor; the prediction of a
    model is ``1`` where ``X w + b > 0``.
    """

    X: Tensor
    y: Tensor
    z: Tensor
    feature_names: tuple[str, ...]
    name: str = "fairness"

    def __post_init__(self) -> None:
        X = torch.as_tensor(self.X)
        if not X.is_floating_point():
            X = X.to(torch.get_default_dtype())
        if X.ndim != 2:
            raise ValueError(f"`X` must be a matrix [N, p]; got shape {tuple(X.shape)}.")
        if not torch.isfinite(X).all():
            raise ValueError("`X` contains NaN or inf.")
        y = _as_binary(self.y, name="y", dtype=X.dtype)
        z = _as_binary(self.z, name="z", dtype=X.dtype)
        if not (y.shape[0] == z.shape[0] == X.shape[0]):
            raise ValueError(
                f"`X`, `y` and `z` must have the same number of rows; got {X.shape[0]}, {y.shape[0]}, {z.shape[0]}."
            )
        names = tuple(str(n) for n in self.feature_names)
        if len(names) != X.shape[1]:
            raise ValueError(f"`feature_names` has {len(names)} entries but `X` has {X.shape[1]} columns.")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "z", z)
        object.__setattr__(self, "feature_names", names)

    # ------------------------------------------------------------------ shape
    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def dim(self) -> int:
        """Length of a model's parameter vector, ``p + 1`` (weights, then bias)."""
        return self.n_features + 1

    def __repr__(self) -> str:
        return (
            f"FairnessData(name={self.name!r}, n_samples={self.n_samples}, n_features={self.n_features}, "
            f"positive_rate={float(self.y.mean()) if self.n_samples else float('nan'):.3f}, "
            f"z_rate={float(self.z.mean()) if self.n_samples else float('nan'):.3f})"
        )

    # ------------------------------------------------------------------ splits
    def split_indices(self, seed: int = 0, fractions: Sequence[float] = (0.6, 0.2, 0.2)) -> dict[str, Tensor]:
        """Row indices of a ``train``/``val``/``test`` split (see :meth:`split`)."""
        if isinstance(fractions, (str, bytes)) or not hasattr(fractions, "__iter__"):
            raise ValueError(f"`fractions` must be three positive numbers (train, val, test); got {fractions!r}.")
        fractions = tuple(float(as_number(f, name="fractions", kind="three positive numbers (train, val, test)"))
                          for f in (fractions.tolist() if hasattr(fractions, "tolist") else fractions))
        if len(fractions) != 3 or not all(f > 0 and math.isfinite(f) for f in fractions):
            raise ValueError(f"`fractions` must be three positive numbers (train, val, test); got {fractions!r}.")
        if abs(sum(fractions) - 1.0) > 1e-6:
            raise ValueError(f"`fractions` must sum to 1; they sum to {sum(fractions):.8g}.")
        rng = np.random.default_rng(check_seed(seed))
        y = self.y.cpu().numpy().astype(np.int64)
        z = self.z.cpu().numpy().astype(np.int64)
        # strata (y, z) shuffled and dealt out in the fractions (most._random.stratified_split)
        parts = stratified_split(2 * y + z, fractions, rng)
        return {name: torch.from_numpy(p) for name, p in zip(_SPLITS, parts)}

    def split(self, seed: int = 0, fractions: Sequence[float] = (0.6, 0.2, 0.2)) -> dict[str, "FairnessData"]:
        """Splits the rows into ``train``, ``val`` and ``test``.

        Stratified by ``(y, z)``; deterministic for a given ``seed``; the three parts are
        disjoint, cover every row, and have sizes within 1 of ``N * fractions`` (rows keep
        their original order inside each part). Features are *not* re-standardised on the
        training part: standardisation is a fixed preprocessing of the whole data set.
        """
        return {
            name: FairnessData(
                X=self.X[idx],
                y=self.y[idx],
                z=self.z[idx],
                feature_names=self.feature_names,
                name=f"{self.name}[{name}]",
            )
            for name, idx in self.split_indices(seed, fractions).items()
        }

    # ------------------------------------------------------------------ problem
    def problem(self) -> Problem:
        """``[logistic_loss, covariance_proxy]`` of a linear classifier on this data.

        ``theta = [w (p), b]``; ``s = X w + b``. ``logistic_loss = mean(softplus(s) - y s)``
        (mean binary cross-entropy of ``sigmoid(s)``, finite for any ``theta``);
        ``covariance_proxy = |mean((z - mean(z)) s)|`` (Zafar et al. 2017; its gradient
        flips sign where the covariance crosses 0). ``metadata["data"]`` is this object.
        """
        if self.n_samples == 0:
            raise ValueError(f"{self.name!r} has no rows; a problem needs at least one sample.")
        X, y = self.X, self.y
        zc = self.z - self.z.mean()
        p = self.n_features

        def fn(theta: Tensor) -> Tensor:
            s = X @ theta[:p] + theta[p]
            loss = (softplus(s) - y * s).mean()
            proxy = (zc * s).mean().abs()
            return torch.stack([loss, proxy])

        return Problem.from_function(
            fn,
            dim=self.dim,
            n_objectives=2,
            init=torch.zeros(self.dim, dtype=X.dtype),
            names=("logistic_loss", "covariance_proxy"),
            metadata={
                "data": self,
                "name": self.name,
                "feature_names": self.feature_names,
                "n_samples": self.n_samples,
            },
        )

    # ------------------------------------------------------------------ metrics
    def _check_params(self, params: Tensor) -> Tensor:
        params = torch.as_tensor(params)
        if params.ndim == 1:
            params = params.unsqueeze(0)
        if params.ndim != 2 or params.shape[1] != self.dim:
            raise ValueError(
                f"`params` must have shape [m, {self.dim}] (p = {self.n_features} weights, then the bias); "
                f"got {tuple(params.shape)}."
            )
        if self.n_samples == 0:
            raise ValueError(f"{self.name!r} has no rows to evaluate on.")
        return params.detach().to(self.X.dtype)

    def predict(self, params: Tensor) -> Tensor:
        """``[m, N]`` predictions in {0, 1} (``1`` where ``X w + b > 0``)."""
        params = self._check_params(params)
        scores = params[:, :-1] @ self.X.T + params[:, -1:]
        return (scores > 0).to(self.X.dtype)

    def accuracy(self, params: Tensor) -> Tensor:
        """``[m]`` accuracy of each model (rows of ``params [m, p + 1]``; a ``[p + 1]`` vector is one model)."""
        return (self.predict(params) == self.y).to(self.X.dtype).mean(-1)

    def _positive_rates(self, params: Tensor) -> tuple[Tensor, Tensor]:
        pred = self.predict(params)
        g0, g1 = self.z == 0, self.z == 1
        if not g0.any() or not g1.any():
            raise ValueError(
                f"{self.name!r} has no rows with z = {0 if not g0.any() else 1}; "
                "disparate impact compares the two groups, so both must be present."
            )
        return pred[:, g0].mean(-1), pred[:, g1].mean(-1)

    def disparate_impact(self, params: Tensor) -> Tensor:
        """``[m]`` demographic-parity difference ``|P(yhat=1 | z=0) - P(yhat=1 | z=1)|`` in [0, 1].

        0 is perfectly fair. (The ratio form is :meth:`p_rule`.)
        """
        r0, r1 = self._positive_rates(params)
        return (r0 - r1).abs()

    def p_rule(self, params: Tensor) -> Tensor:
        """``[m]`` p%-rule ratio ``min(r0 / r1, r1 / r0)`` in [0, 1] of the positive rates of the groups.

        1 is perfectly fair (also when both rates are 0); Zafar et al. report ``100 *`` this.
        """
        r0, r1 = self._positive_rates(params)
        hi, lo = torch.maximum(r0, r1), torch.minimum(r0, r1)
        return torch.where(hi > 0, lo / hi.clamp_min(torch.finfo(hi.dtype).tiny), torch.ones_like(hi))


# ---------------------------------------------------------------------- generators
def _standardise(a: np.ndarray) -> np.ndarray:
    """Columns to mean 0, (population) standard deviation 1; constant columns are only centred."""
    mean = a.mean(0)
    std = a.std(0)
    return (a - mean) / np.where(std > 0, std, 1.0)


def zafar_synthetic(n_samples: int = 2000, *, disc_factor: float = math.pi / 4, seed: int = 0) -> FairnessData:
    """The synthetic data of Zafar et al. (AISTATS 2017), as in their public code.

    Follows ``disparate_impact/synthetic_data_demo/generate_synthetic_data.py`` of
    ``mbilalzafar/fair-classification``: ``n_samples / 2`` points per class; class +1 (label
    ``y = 1``) ~ N([2, 2], [[5, 1], [1, 5]]), class -1 (``y = 0``) ~ N([-2, -2], [[10, 1],
    [1, 3]]); rows shuffled. The sensitive attribute: rotate the features,
    ``x' = x R(disc_factor)`` with ``x`` a row and ``R(phi) = [[cos, -sin], [sin, cos]]``
    exactly as that code does (``np.dot(X, rotation_mult)``; for column vectors this is
    ``R(phi)^T x``), then ``z ~ Bernoulli(p1 / (p1 + p2))`` with ``p1``, ``p2`` the two
    class densities at ``x'``. A smaller ``disc_factor`` makes ``z`` more correlated with
    the label (more discrimination); at 0, ``z`` is drawn from the class posterior itself.

    Randomness comes from one ``np.random.default_rng(seed)`` (class draws, shuffle, then
    the uniforms for ``z``), so the result is deterministic per seed, and for a fixed seed
    changing ``disc_factor`` changes only ``z``. The two features are standardised (after
    ``z`` is drawn on the raw features). Feature names: ``("x1", "x2")``.
    """
    from scipy.stats import multivariate_normal

    check_positive_int(n_samples, name="n_samples", minimum=2)
    if n_samples % 2:
        raise ValueError(f"`n_samples` must be even (n_samples / 2 points per class); got {n_samples}.")
    try:
        disc_factor = float(as_number(disc_factor, name="disc_factor"))
    except ValueError:
        raise ValueError(f"`disc_factor` must be a finite number (an angle in radians); got {disc_factor!r}.") from None
    if not math.isfinite(disc_factor):
        raise ValueError(f"`disc_factor` must be a finite number (an angle in radians); got {disc_factor!r}.")
    rng = np.random.default_rng(check_seed(seed))
    half = n_samples // 2
    nv1 = multivariate_normal(mean=[2.0, 2.0], cov=[[5.0, 1.0], [1.0, 5.0]])
    nv2 = multivariate_normal(mean=[-2.0, -2.0], cov=[[10.0, 1.0], [1.0, 3.0]])
    X1 = np.asarray(nv1.rvs(half, random_state=rng)).reshape(half, 2)
    X2 = np.asarray(nv2.rvs(half, random_state=rng)).reshape(half, 2)
    X = np.vstack([X1, X2])
    y = np.concatenate([np.ones(half), np.zeros(half)])
    perm = rng.permutation(n_samples)
    X, y = X[perm], y[perm]

    c, s = math.cos(disc_factor), math.sin(disc_factor)
    X_aux = X @ np.array([[c, -s], [s, c]])
    p1 = np.atleast_1d(nv1.pdf(X_aux))
    p2 = np.atleast_1d(nv2.pdf(X_aux))
    total = p1 + p2
    # Far in the tails both densities can underflow to 0; the posterior is then 1/2.
    post = np.divide(p1, total, out=np.full_like(p1, 0.5), where=total > 0)
    z = (rng.uniform(size=n_samples) < post).astype(np.float64)

    dtype = torch.get_default_dtype()
    return FairnessData(
        X=torch.as_tensor(_standardise(X), dtype=dtype),
        y=torch.as_tensor(y, dtype=dtype),
        z=torch.as_tensor(z, dtype=dtype),
        feature_names=("x1", "x2"),
        name="zafar_synthetic",
    )


# German credit: (1-based attribute number, short name, codes or None for numerical),
# as documented in german.doc. Attribute 9 is the sensitive attribute.
_GERMAN_ATTRIBUTES: tuple[tuple[int, str, tuple[str, ...] | None], ...] = (
    (1, "checking_account", ("A11", "A12", "A13", "A14")),
    (2, "duration_months", None),
    (3, "credit_history", ("A30", "A31", "A32", "A33", "A34")),
    (4, "purpose", ("A40", "A41", "A42", "A43", "A44", "A45", "A46", "A47", "A48", "A49", "A410")),
    (5, "credit_amount", None),
    (6, "savings", ("A61", "A62", "A63", "A64", "A65")),
    (7, "employment_since", ("A71", "A72", "A73", "A74", "A75")),
    (8, "installment_rate", None),
    (9, "personal_status_sex", ("A91", "A92", "A93", "A94", "A95")),
    (10, "other_debtors", ("A101", "A102", "A103")),
    (11, "residence_since", None),
    (12, "property", ("A121", "A122", "A123", "A124")),
    (13, "age", None),
    (14, "other_installment_plans", ("A141", "A142", "A143")),
    (15, "housing", ("A151", "A152", "A153")),
    (16, "existing_credits", None),
    (17, "job", ("A171", "A172", "A173", "A174")),
    (18, "people_liable", None),
    (19, "telephone", ("A191", "A192")),
    (20, "foreign_worker", ("A201", "A202")),
)
_GERMAN_SENSITIVE = 9
_GERMAN_FEMALE = ("A92", "A95")
_GERMAN_FILE = "german.data"


def german_credit_file(path: str | os.PathLike | None = None) -> Path:
    """The ``german.data`` file :func:`load_german_credit` reads for ``path`` (a folder, the file,
    or ``None``: the environment variable ``MOST_GERMAN_CREDIT``); ``FileNotFoundError`` naming
    what is missing."""
    how = (
        f"Download the UCI Statlog (German Credit Data) files (https://archive.ics.uci.edu/dataset/144) "
        f"and pass the directory holding {_GERMAN_FILE!r} as `load_german_credit(path)` or set the "
        f"environment variable {GERMAN_CREDIT_ENV} to it."
    )
    if path is None:
        env = os.environ.get(GERMAN_CREDIT_ENV, "")
        if not env:
            raise FileNotFoundError(
                f"German credit data: no path given and {GERMAN_CREDIT_ENV} is not set, so there is no "
                f"{_GERMAN_FILE!r} to read. {how}"
            )
        path, source = env, f" (from {GERMAN_CREDIT_ENV})"
    else:
        check_path(path, what=f"the directory holding {_GERMAN_FILE!r} (or the file itself)")
        source = ""
    p = Path(path).expanduser()
    file = p if p.is_file() else p / _GERMAN_FILE
    if not file.is_file():
        raise FileNotFoundError(
            f"German credit data not found: {os.path.abspath(file)}{source} does not exist; expected the file "
            f"{_GERMAN_FILE!r} in the directory {os.path.abspath(p)}. {how}"
        )
    return file


def load_german_credit(path: str | os.PathLike | None = None) -> FairnessData:
    """UCI Statlog German credit (1000 applicants) with sex as the sensitive attribute.

    Args:
        path: the directory holding ``german.data`` (space-separated, 20 attributes and the
            label per line; a path to the file itself also works). ``None`` reads the
            environment variable ``MOST_GERMAN_CREDIT``.

    Preprocessing (attribute numbers are those of ``german.doc``):

    * numerical attributes 2, 5, 8, 11, 13, 16, 18 are standardised (mean 0, population
      standard deviation 1);
    * the other categorical attributes are one-hot encoded over *all* codes that
      ``german.doc`` lists (so the columns do not depend on the file; a code absent from
      the data, e.g. ``A47``, gives a zero column), named ``"<attribute>=<code>"``;
    * attribute 9 (personal status and sex) is not a feature: it gives
      ``z = 1`` for female (``A92``, ``A95``) and ``0`` for male (``A91``, ``A93``, ``A94``);
    * ``y = 1`` for good credit (label 1), ``0`` for bad (label 2).

    Blank lines are skipped. Raises ``FileNotFoundError`` (before reading anything) when
    the file cannot be found, and ``ValueError`` naming the line for a line with the wrong
    number of columns, an unknown code, a non-numeric number or a label other than 1/2.
    """
    file = german_credit_file(path)
    numeric, codes, labels, sensitive = _read_german(file)
    X, names = _german_features(numeric, codes)
    dtype = torch.get_default_dtype()
    return FairnessData(
        X=torch.as_tensor(X, dtype=dtype),
        y=torch.as_tensor(labels, dtype=dtype),
        z=torch.as_tensor(sensitive, dtype=dtype),
        feature_names=tuple(names),
        name="german_credit",
    )


def _read_german(file: Path) -> tuple[list[list[float]], list[list[str]], list[float], list[float]]:
    """Per data line of ``german.data``: the numerical attributes, the categorical codes (but
    attribute 9's), the label (1 good, 0 bad) and the sensitive attribute (1 female)."""
    n_fields = len(_GERMAN_ATTRIBUTES) + 1
    numeric: list[list[float]] = []
    codes: list[list[str]] = []
    labels: list[float] = []
    sensitive: list[float] = []
    with open(file, encoding="ascii", errors="replace") as handle:
        for lineno, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            where = f"{file}, line {lineno}"
            if len(fields) != n_fields:
                raise ValueError(
                    f"{where}: expected {n_fields} space-separated columns (20 attributes, then the label); "
                    f"got {len(fields)}."
                )
            row_num, row_cat = [], []
            for (number, attr, levels), value in zip(_GERMAN_ATTRIBUTES, fields):
                if levels is None:
                    try:
                        parsed = float(value)
                    except ValueError:
                        parsed = math.nan
                    if not math.isfinite(parsed):  # "nan", "inf" and "1e400" parse, but are no amount
                        raise ValueError(
                            f"{where}: attribute {number} ({attr}) must be a finite number; got {value!r}."
                        ) from None
                    row_num.append(parsed)
                elif value not in levels:
                    raise ValueError(
                        f"{where}: attribute {number} ({attr}) must be one of {', '.join(levels)}; got {value!r}."
                    )
                elif number == _GERMAN_SENSITIVE:
                    sensitive.append(1.0 if value in _GERMAN_FEMALE else 0.0)
                else:
                    row_cat.append(value)
            if fields[-1] not in ("1", "2"):
                raise ValueError(f"{where}: the label (column 21) must be 1 (good) or 2 (bad); got {fields[-1]!r}.")
            labels.append(1.0 if fields[-1] == "1" else 0.0)
            numeric.append(row_num)
            codes.append(row_cat)
    if not labels:
        raise ValueError(f"{file} contains no data lines.")
    return numeric, codes, labels, sensitive


def _german_features(numeric: list[list[float]], codes: list[list[str]]) -> tuple[np.ndarray, list[str]]:
    """The feature matrix (standardised numbers, one-hot codes, in attribute order) and its column names."""
    columns: list[np.ndarray] = []
    names: list[str] = []
    num = _standardise(np.asarray(numeric, dtype=np.float64))
    cat = np.asarray(codes, dtype=object)
    i_num = i_cat = 0
    for number, attr, levels in _GERMAN_ATTRIBUTES:
        if levels is None:
            columns.append(num[:, i_num : i_num + 1])
            names.append(attr)
            i_num += 1
        elif number != _GERMAN_SENSITIVE:
            col = cat[:, i_cat]
            columns.append(np.stack([(col == code).astype(np.float64) for code in levels], axis=1))
            names.extend(f"{attr}={code}" for code in levels)
            i_cat += 1
    return np.concatenate(columns, axis=1), names
