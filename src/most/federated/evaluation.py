"""Evaluation of m models serving n federated clients (pure functions on tensors/arrays).

Protocol of the MosT paper: each client picks the model that is most accurate on its
*validation* split (:func:`select_models`; models equally accurate there go to the lowest index,
or, when asked, to the lowest loss on the client's own data), and is scored by that model's accuracy on its
*test* split (:func:`client_accuracy`). A second, lower-variance rule picks the model with the
lowest loss on the client's training and validation data pooled (:func:`pooled_loss`,
:func:`select_by_loss`); the federated benchmark reports both. The clients' accuracies are summarised by their mean
and by the mean of the worst k % of clients (:func:`worst_k_percent`); the
:func:`oracle_accuracy` (each client's best model on test) is an upper bound on the selection.

Diagnostics of the models and of the transport plan Gamma ``[n, m]``:

* :func:`pairwise_symmetric_kl` / :func:`prediction_diversity` -- how differently the m
  models predict on the same samples;
* :func:`gamma_sparsity` -- fraction of zero entries of the plan;
* :func:`gamma_drift` -- symmetric KL between successive plans (rows normalised to shares).

:func:`summarise` collects the per-run numbers, and :func:`paired_difference` compares two
methods over seeds with a paired t interval.

Inputs may be tensors (any device) or array-likes; matrices are ``[n_clients, m_models]``.
Arrays returned per client follow the input: a tensor for a tensor, a NumPy array otherwise.
Scalars are Python floats. An accuracy of NaN marks a client without samples in that split, as
:class:`~most.federated.FederatedResult` writes it: a NaN validation accuracy counts below any
other (the client takes its first model, or its lowest loss), and a client whose test accuracy
is NaN is left out of the summaries (:func:`worst_k_percent`, :func:`oracle_accuracy`,
:func:`summarise`). Other bad input (wrong or mismatched shapes, inf) raises a ``ValueError``
that names the argument and its shape.

Examples:
    >>> val = [[0.6, 0.8], [0.9, 0.5], [0.7, 0.7]]
    >>> test = [[0.5, 0.9], [0.8, 0.4], [0.6, 0.3]]
    >>> s = summarise(val, test)
    >>> round(s["mean"], 4), round(s["worst20"], 4), round(s["oracle"], 4), s["choice_counts"]
    (0.7667, 0.6, 0.7667, [2, 1])
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from ..metrics import worst_fraction_mean

__all__ = [
    "WORST_FRACTIONS",
    "adjusted_rand_index",
    "select_models",
    "pooled_loss",
    "select_by_loss",
    "client_accuracy",
    "worst_k_percent",
    "oracle_accuracy",
    "pooled_accuracy",
    "pairwise_symmetric_kl",
    "prediction_diversity",
    "gamma_sparsity",
    "gamma_drift",
    "summarise",
    "paired_difference",
]

#: Fractions of clients reported as "worst20" .. "worst80".
WORST_FRACTIONS: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)

#: Probabilities (and plan shares) are clamped below at this value before taking logs.
EPS = 1e-12


# --------------------------------------------------------------------------- helpers


def _array(x, name: str) -> np.ndarray:
    """``x`` as a float64 NumPy array (tensors are detached and moved to the CPU)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    try:
        return np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be a tensor or array-like of numbers; got {type(x).__name__}.") from exc


def _check(a: np.ndarray, name: str, ndim: int, what: str, *, finite: bool = True) -> np.ndarray:
    if a.ndim != ndim or 0 in a.shape:
        raise ValueError(f"`{name}` must be {what} (non-empty, {ndim}-D); got shape {a.shape}.")
    if finite and not np.isfinite(a).all():
        first = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
        raise ValueError(f"`{name}` (shape {a.shape}) contains NaN or inf, first at index {first}.")
    return a


def _matrix(x, name: str, *, finite: bool = True) -> np.ndarray:
    """``[n_clients, m_models]``; ``finite=False`` lets NaN through (a client with no data in a split)."""
    return _check(_array(x, name), name, 2, "a matrix of shape [n_clients, m_models]", finite=finite)


def _vector(x, name: str) -> np.ndarray:
    return _check(_array(x, name), name, 1, "a vector of shape [n_clients]")


def _accuracies(x, name: str, ndim: int = 2) -> np.ndarray:
    """Accuracies (``[n_clients, m_models]``, or ``[n_clients]`` with ``ndim=1``) where NaN marks a
    client without samples in the split; inf is refused."""
    what = "a matrix of shape [n_clients, m_models]" if ndim == 2 else "a vector of shape [n_clients]"
    a = _check(_array(x, name), name, ndim, what, finite=False)
    if np.isinf(a).any():
        first = tuple(int(i) for i in np.argwhere(np.isinf(a))[0])
        raise ValueError(f"`{name}` (shape {a.shape}) contains inf, first at index {first}; accuracies lie in [0, 1] "
                         "(NaN marks a client without samples in the split).")
    return a


def _measured(a: np.ndarray, name: str) -> np.ndarray:
    """The clients (rows) of ``a`` with an accuracy; a ``ValueError`` when none has one."""
    keep = ~np.isnan(a) if a.ndim == 1 else ~np.isnan(a).all(axis=1)
    if not keep.any():
        raise ValueError(f"`{name}` is NaN for every client: no client has samples in the split to be scored on.")
    return a[keep]


def _same_shape(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"`{name_a}` and `{name_b}` must have the same shape; got {a.shape} and {b.shape}.")


def _like(values: np.ndarray, ref, dtype=None):
    """``values`` as a tensor on ``ref``'s device when ``ref`` is a tensor, else as a NumPy array."""
    if isinstance(ref, torch.Tensor):
        t = torch.as_tensor(values, device=ref.device)
        if dtype is not None:
            t = t.to(dtype)
        elif t.is_floating_point() and ref.is_floating_point():
            t = t.to(ref.dtype)
        return t
    return values


def _nonnegative(a: np.ndarray, name: str) -> None:
    if (a < 0).any():
        first = tuple(int(i) for i in np.argwhere(a < 0)[0])
        raise ValueError(
            f"`{name}` (shape {a.shape}) must be non-negative; entry {first} is {a[first]:.3g}."
        )


# --------------------------------------------------------------------------- accuracy


def select_models(val_accuracy, loss=None):
    """Index of each client's best model on its validation split.

    Models equally accurate on validation (frequent where a client has a few validation
    samples) are told apart by ``loss`` where it is given -- the lowest loss among them wins,
    e.g. the loss on the client's training and validation data pooled (:func:`pooled_loss`) --
    and otherwise, or where their losses are equal too, by the lowest index. Without a loss a
    tie always goes to model 0, 1, ... in that order, which favours whichever model happens to
    come first.

    Args:
        val_accuracy: ``[n_clients, m]`` validation accuracy of every model on every client
            (NaN: no validation sample, below any accuracy).
        loss: optional ``[n_clients, m]`` loss of every model on every client that breaks the
            ties; NaN counts as the highest loss.

    Returns:
        ``[n_clients]`` integer indices (``int64``): a tensor for a tensor input, else a NumPy array.

    >>> select_models([[0.5, 0.7, 0.7], [0.9, 0.1, 0.9]])
    array([1, 0])
    >>> select_models([[0.5, 0.7, 0.7], [0.9, 0.1, 0.9]], loss=[[0.1, 0.9, 0.4], [2.0, 0.1, 1.0]])
    array([2, 2])
    >>> import torch
    >>> select_models(torch.tensor([[0.2, 0.4]]))
    tensor([1])
    """
    a = _accuracies(val_accuracy, "val_accuracy")
    a = np.where(np.isnan(a), -np.inf, a)  # no validation sample: below any accuracy
    choice = np.argmax(a, axis=1)  # argmax returns the first maximum
    if loss is not None:
        b = _matrix(loss, "loss", finite=False)
        _same_shape(a, b, "val_accuracy", "loss")
        # the tied models' losses, every other model's +inf (argmin returns the first minimum);
        # where no tied model has a finite loss, the first of them stays
        among = np.where(a == a.max(axis=1, keepdims=True), np.nan_to_num(b, nan=np.inf), np.inf)
        choice = np.where(np.isfinite(among).any(axis=1), np.argmin(among, axis=1), choice)
    return _like(choice.astype(np.int64), val_accuracy, dtype=torch.int64)


def pooled_loss(train_loss, val_loss, train_counts, val_counts):
    """Each model's mean loss on each client's training and validation samples together.

    ``(n_t L_train + n_v L_val) / (n_t + n_v)`` per client and model. A split with no sample
    (count 0) is left out, so its NaN loss does not spread; a client with no sample in either
    split gets NaN.

    Args:
        train_loss, val_loss: ``[n_clients, m]`` mean losses of every model on each split.
        train_counts, val_counts: ``[n_clients]`` samples per client in each split.

    Returns:
        ``[n_clients, m]``: a tensor when ``train_loss`` is a tensor, else a NumPy array.

    >>> pooled_loss([[1.0, 2.0]], [[3.0, 0.0]], [3], [1]).tolist()
    [[1.5, 1.5]]
    >>> pooled_loss([[1.0, 2.0]], [[float("nan"), float("nan")]], [4], [0]).tolist()
    [[1.0, 2.0]]
    """
    t, v = _matrix(train_loss, "train_loss", finite=False), _matrix(val_loss, "val_loss", finite=False)
    nt, nv = _vector(train_counts, "train_counts"), _vector(val_counts, "val_counts")
    _same_shape(t, v, "train_loss", "val_loss")
    for name, c in (("train_counts", nt), ("val_counts", nv)):
        if c.shape != (t.shape[0],):
            raise ValueError(f"`{name}` must have shape [n_clients] = ({t.shape[0]},); got shape {c.shape}.")
        _nonnegative(c, name)
    for name, a, c in (("train_loss", t, nt), ("val_loss", v, nv)):
        bad = ~np.isfinite(a[c > 0])
        if bad.any():
            raise ValueError(f"`{name}` (shape {a.shape}) is NaN or inf for a client that has samples in that split.")
    wt, wv = nt[:, None], nv[:, None]
    with np.errstate(invalid="ignore"):  # 0 / 0 = NaN for a client with no sample in either split
        pooled = (np.where(wt > 0, t * wt, 0.0) + np.where(wv > 0, v * wv, 0.0)) / (wt + wv)
    return _like(pooled, train_loss)


def select_by_loss(loss):
    """Index of each client's lowest-loss model (ties go to the lowest index).

    Args:
        loss: ``[n_clients, m]`` loss of every model on every client, e.g. from
            :func:`pooled_loss`. A client whose row is all NaN (no data) gets model 0.

    Returns:
        ``[n_clients]`` integer indices (``int64``): a tensor for a tensor input, else a NumPy array.

    >>> select_by_loss([[0.5, 0.3, 0.3], [0.1, 0.4, 0.1]])
    array([1, 0])
    """
    a = _matrix(loss, "loss", finite=False)
    choice = np.argmin(np.nan_to_num(a, nan=np.inf), axis=1).astype(np.int64)
    return _like(choice, loss, dtype=torch.int64)


def client_accuracy(test_accuracy, choice):
    """Each client's test accuracy under its chosen model: ``test_accuracy[i, choice[i]]``.

    Args:
        test_accuracy: ``[n_clients, m]`` test accuracy of every model on every client.
        choice: ``[n_clients]`` model index per client (e.g. from :func:`select_models`).

    Returns:
        ``[n_clients]`` accuracies: a tensor when ``test_accuracy`` is a tensor, else a NumPy array.

    >>> client_accuracy([[0.5, 0.9], [0.8, 0.4]], [1, 0])
    array([0.9, 0.8])
    """
    a = _accuracies(test_accuracy, "test_accuracy")
    c = _array(choice, "choice")
    if c.shape != (a.shape[0],):
        raise ValueError(
            f"`choice` must have shape [n_clients] = ({a.shape[0]},) to match `test_accuracy` "
            f"of shape {a.shape}; got shape {c.shape}."
        )
    if not np.isfinite(c).all() or (c != np.round(c)).any() or (c < 0).any() or (c >= a.shape[1]).any():
        raise ValueError(
            f"`choice` (shape {c.shape}) must hold integer model indices in 0 .. {a.shape[1] - 1} "
            f"(`test_accuracy` has shape {a.shape}); got values {np.unique(c)[:10].tolist()}."
        )
    acc = a[np.arange(a.shape[0]), c.astype(np.int64)]
    return _like(acc, test_accuracy)


def _key(fraction: float) -> str:
    return f"worst{round(100 * fraction):d}"


def worst_k_percent(acc, fractions: Sequence[float] = WORST_FRACTIONS) -> dict[str, float]:
    """Mean accuracy of the worst k % of clients, for each fraction.

    k % of the clients is rounded to the nearest count (at least one client), as in
    :func:`most.metrics.worst_fraction_mean`. Keys are ``"worst20"`` for 0.2, etc.

    >>> worst_k_percent([0.9, 0.1, 0.5, 0.3, 0.7])
    {'worst20': 0.1, 'worst40': 0.2, 'worst60': 0.3, 'worst80': 0.4}
    >>> worst_k_percent([0.9, 0.1, 0.5], fractions=(0.1,))
    {'worst10': 0.1}
    """
    a = _measured(_accuracies(acc, "acc", ndim=1), "acc")  # a NaN client (no test sample) is left out
    out: dict[str, float] = {}
    for f in fractions:
        f = float(f)
        if not 0.0 < f <= 1.0:
            raise ValueError(f"`fractions` must lie in (0, 1]; got {f}.")
        out[_key(f)] = worst_fraction_mean(a, f, larger_is_worse=False)
    return out


def oracle_accuracy(test_accuracy) -> float:
    """Mean over clients of the best model's test accuracy (an upper bound on any selection).

    >>> round(oracle_accuracy([[0.5, 0.9], [0.8, 0.4], [0.6, 0.3]]), 4)
    0.7667
    """
    a = _measured(_accuracies(test_accuracy, "test_accuracy"), "test_accuracy")  # clients with test samples
    return float(np.nanmax(a, axis=1).mean())


def pooled_accuracy(client_accuracy, sizes) -> float:
    """Accuracy over all test samples, ``sum_i sizes_i acc_i / sum_i sizes_i``: the metric FedProx
    reports, where a client counts for its test-set size (the mean over clients when the sizes are
    equal).

    >>> pooled_accuracy([1.0, 0.5], sizes=[10, 30])
    0.625
    """
    acc: np.ndarray = _array(client_accuracy, "client_accuracy").astype(np.float64)
    n: np.ndarray = _array(sizes, "sizes").astype(np.float64)
    if n.shape != acc.shape or not np.isfinite(n).all() or (n < 0).any() or n.sum() <= 0:
        raise ValueError(f"`sizes` must hold one non-negative test-set size per client ({acc.shape[0]}), not all "
                         f"zero; got shape {n.shape}.")
    scored = ~np.isnan(acc)  # a client without test samples (NaN, size 0) counts for nothing
    return float((n[scored] * acc[scored]).sum() / n[scored].sum())


# --------------------------------------------------------------------------- diversity


def _probs(probs) -> np.ndarray:
    p = _check(_array(probs, "probs"), "probs", 3, "predictive distributions of shape [m, N, C]")
    _nonnegative(p, "probs")
    sums = p.sum(-1)
    if np.abs(sums - 1.0).max() > 1e-3:
        j, i = (int(v) for v in np.argwhere(np.abs(sums - 1.0) > 1e-3)[0])
        raise ValueError(
            f"`probs` (shape {p.shape}) must hold probability vectors over the last axis (classes); "
            f"model {j}, sample {i} sums to {sums[j, i]:.6g}. Pass softmax outputs, not logits."
        )
    return p


def pairwise_symmetric_kl(probs):
    """``[m, m]`` matrix of mean symmetric KL divergences between the models' predictions.

    Entry ``(a, b)`` is ``mean_n [KL(p_a(n) || p_b(n)) + KL(p_b(n) || p_a(n))]`` over the N
    samples, i.e. ``mean_n sum_c (p_a - p_b)(log p_a - log p_b)`` with probabilities clamped
    below at ``1e-12``. Symmetric, zero diagonal, non-negative.

    Args:
        probs: ``[m, N, C]`` predictive distributions (softmax outputs) of m models on the same
            N samples.

    Returns:
        ``[m, m]`` float64: a tensor for a tensor input, else a NumPy array.

    >>> import numpy as np
    >>> d = pairwise_symmetric_kl([[[0.5, 0.5]], [[0.9, 0.1]]])
    >>> bool(np.isclose(d[0, 1], 0.4 * np.log(9)))  # (-0.4) ln(5/9) + 0.4 ln 5
    True
    """
    p = np.clip(_probs(probs), EPS, None)
    logp = np.log(p)
    n = p.shape[1]
    cross = np.einsum("anc,bnc->ab", p, logp) / n  # mean_n sum_c p_a log p_b
    self_term = np.diag(cross)
    d = self_term[:, None] + self_term[None, :] - cross - cross.T
    d = np.clip((d + d.T) / 2, 0.0, None)
    np.fill_diagonal(d, 0.0)
    return _like(d, probs, dtype=torch.float64)


def prediction_diversity(probs) -> float:
    """Mean pairwise symmetric KL between the m models' predictions (0 when m = 1).

    The average, over the ``m (m - 1) / 2`` pairs of models, of :func:`pairwise_symmetric_kl`
    (itself averaged over samples). Larger means more diverse models.

    >>> round(prediction_diversity([[[0.5, 0.5]], [[0.9, 0.1]], [[0.5, 0.5]]]), 6)
    0.585927
    >>> prediction_diversity([[[0.2, 0.8]]])
    0.0
    """
    d = _array(pairwise_symmetric_kl(probs), "probs")
    m = d.shape[0]
    if m < 2:
        return 0.0
    return float(d[np.triu_indices(m, k=1)].mean())


# --------------------------------------------------------------------------- plan diagnostics


def gamma_sparsity(plan, atol: float = 1e-12) -> float:
    """Fraction of the entries of the plan Gamma ``[n, m]`` that are zero (``|x| <= atol``).

    >>> gamma_sparsity([[0.5, 0.0], [0.0, 0.5]])
    0.5
    """
    a = _matrix(plan, "plan")
    return float((np.abs(a) <= atol).mean())


def _shares(plan, name: str) -> np.ndarray:
    a = _matrix(plan, name)
    _nonnegative(a, name)
    rows = a.sum(1, keepdims=True)
    if (rows <= 0).any():
        i = int(np.argwhere(rows[:, 0] <= 0)[0, 0])
        raise ValueError(f"`{name}` (shape {a.shape}) has an all-zero row {i}; every objective needs mass.")
    return a / rows


def gamma_drift(prev, plan, *, skip_empty: bool = False) -> float:
    """Symmetric KL between two successive plans, per objective, averaged over objectives.

    Each row is normalised to the objective's shares over the models (``Gamma_i / alpha_i``),
    clamped below at ``1e-12``; the drift is
    ``mean_i sum_j (s_ij - s'_ij)(log s_ij - log s'_ij)``. 0 for identical plans, > 0 otherwise
    (large when an objective moves its mass to a model it did not use before).

    An objective without mass in a plan has no shares: an error, or with ``skip_empty=True``
    (the curriculum's marginals can give an objective no mass in a round) it is left out, and
    the drift is 0 when no objective has mass in both plans.

    >>> gamma_drift([[0.5, 0.0], [0.0, 0.5]], [[1.0, 0.0], [0.0, 2.0]])  # same shares
    0.0
    >>> round(gamma_drift([[0.25, 0.25]], [[0.45, 0.05]]), 6)  # 0.4 ln 9
    0.87889
    >>> round(gamma_drift([[0.25, 0.25], [0.0, 0.0]], [[0.45, 0.05], [0.3, 0.2]], skip_empty=True), 6)
    0.87889
    """
    if skip_empty:
        a, b = _matrix(prev, "prev"), _matrix(plan, "plan")
        _same_shape(a, b, "prev", "plan")
        keep = (a.sum(1) > 0) & (b.sum(1) > 0)
        if not keep.any():
            return 0.0
        prev, plan = a[keep], b[keep]
    p = _shares(prev, "prev")
    q = _shares(plan, "plan")
    _same_shape(p, q, "prev", "plan")
    p, q = np.clip(p, EPS, None), np.clip(q, EPS, None)
    per_row = ((p - q) * (np.log(p) - np.log(q))).sum(1)
    return float(max(per_row.mean(), 0.0))


# --------------------------------------------------------------------------- summaries


def summarise(val_acc, test_acc, *, choice=None, sizes=None) -> dict:
    """Per-run summary: select on validation, score on test (clients whose chosen model's test
    accuracy is NaN, without test samples, left out).

    Returns a dict with ``mean`` (mean client accuracy), ``worst20`` .. ``worst80``,
    ``oracle`` (:func:`oracle_accuracy`) and ``choice_counts`` (a list: how many clients chose
    each model, length m). ``choice`` (``[n_clients]`` model indices, e.g. from
    :func:`select_by_loss`) replaces the validation pick when given. With ``sizes``
    (``[n_clients]`` test-set sizes) it also has ``pooled``: the accuracy over all test samples
    (:func:`pooled_accuracy`, equal to ``mean`` when the clients are of equal size).

    >>> s = summarise([[0.1, 0.2], [0.3, 0.2]], [[0.0, 1.0], [0.5, 0.5]], sizes=[10, 30])
    >>> s["mean"], s["worst20"], s["oracle"], s["choice_counts"], s["pooled"]
    (0.75, 0.5, 0.75, [1, 1], 0.625)
    """
    v = _accuracies(val_acc, "val_acc")
    t = _accuracies(test_acc, "test_acc")
    _same_shape(v, t, "val_acc", "test_acc")
    if choice is None:
        choice = select_models(v)
    acc = client_accuracy(t, choice)  # validates a given choice (integer indices in 0 .. m - 1)
    tested = ~np.isnan(acc)  # the clients with test samples; the others are left out
    if not tested.any():
        raise ValueError("`test_acc` is NaN for every client's chosen model: no client has test samples to be "
                         "scored on.")
    choice = _array(choice, "choice").astype(np.int64)[tested]
    acc, t = acc[tested], t[tested]
    out: dict = {"mean": float(acc.mean())}
    out.update(worst_k_percent(acc))
    out["oracle"] = oracle_accuracy(t)
    out["choice_counts"] = np.bincount(choice, minlength=v.shape[1]).astype(int).tolist()
    if sizes is not None:
        n = _array(sizes, "sizes")
        if n.shape != tested.shape:
            raise ValueError(f"`sizes` must hold one test-set size per client ({tested.shape[0]}); got shape {n.shape}.")
        out["pooled"] = pooled_accuracy(acc, n[tested])
    return out


def adjusted_rand_index(labels, truth) -> float:
    """The adjusted Rand index of two partitions of the same items (Hubert and Arabie 1985):
    1 for the same partition up to renaming, about 0 for an unrelated one.

    ``labels`` and ``truth`` are one integer label per item (e.g. each client's chosen model and
    its planted group). Two partitions that are both one group, or both all singletons, score 1.

    >>> adjusted_rand_index([0, 0, 1, 1], [1, 1, 0, 0])
    1.0
    >>> round(adjusted_rand_index([0, 0, 1, 1], [0, 1, 0, 1]), 3)
    -0.5
    """
    a = np.asarray(labels.tolist() if isinstance(labels, torch.Tensor) else labels)
    b = np.asarray(truth.tolist() if isinstance(truth, torch.Tensor) else truth)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"`labels` and `truth` must be two label vectors of one length; got shapes {a.shape} and "
                         f"{b.shape}.")
    n = len(a)
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    table = np.zeros((ai.max(initial=-1) + 1, bi.max(initial=-1) + 1), dtype=np.int64)
    np.add.at(table, (ai, bi), 1)

    def pairs(x):
        return float((x * (x - 1) // 2).sum())

    index, rows, cols = pairs(table), pairs(table.sum(1)), pairs(table.sum(0))
    total = n * (n - 1) / 2
    expected = rows * cols / total if total else 0.0
    top = (rows + cols) / 2
    if top == expected:  # both partitions trivial (one group, or all singletons) and equal in kind
        return 1.0
    return float((index - expected) / (top - expected))


def paired_difference(a, b, confidence: float = 0.95) -> dict:
    """Paired comparison of two methods over seeds: mean of ``a - b`` with a t interval.

    The interval is ``mean ± t_{(1+confidence)/2, n-1} · sd / sqrt(n)`` (``sd`` with ``n - 1``
    degrees of freedom, :data:`scipy.stats.t`). ``significant`` is True only when the interval
    excludes 0: ``a`` is then better (``low > 0``) or worse (``high < 0``) than ``b``.

    Args:
        a, b: ``[seeds]`` the same metric of two methods, seed by seed (same seeds, same order).
        confidence: the interval's confidence level, in (0, 1).

    Returns:
        ``{"mean", "low", "high", "n", "significant"}``.

    >>> r = paired_difference([0.80, 0.82, 0.81], [0.78, 0.79, 0.80])
    >>> round(r["mean"], 4), round(r["low"], 4), round(r["high"], 4), r["n"], r["significant"]
    (0.02, -0.0048, 0.0448, 3, False)
    >>> r = paired_difference([0.80, 0.82, 0.81, 0.83], [0.78, 0.79, 0.79, 0.81])
    >>> round(r["low"], 4), round(r["high"], 4), r["significant"]
    (0.0145, 0.0305, True)
    """
    from scipy import stats

    x = _check(_array(a, "a"), "a", 1, "a vector of shape [seeds]")
    y = _check(_array(b, "b"), "b", 1, "a vector of shape [seeds]")
    _same_shape(x, y, "a", "b")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"`confidence` must lie in (0, 1); got {confidence}.")
    n = x.shape[0]
    if n < 2:
        raise ValueError(
            f"paired_difference needs at least 2 paired seeds to estimate a t interval; got n = {n} "
            f"(`a` and `b` have shape {x.shape})."
        )
    d = x - y
    mean = float(d.mean())
    half = float(stats.t.ppf((1.0 + confidence) / 2.0, n - 1) * d.std(ddof=1) / math.sqrt(n))
    low, high = mean - half, mean + half
    return {"mean": mean, "low": low, "high": high, "n": int(n), "significant": bool(low > 0 or high < 0)}
