"""The client side of a federated round, as pure functions of tensors: the clients' data padded
to one stack (:class:`Padded`), each model's loss and accuracy on each client (:func:`evaluate`),
and local training of many (client, model) pairs at once (:func:`local_train`, ``vmap`` over
pairs). The in-process runtime and Flower's client app both call them."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor
from torch.nn.functional import cross_entropy

from .._host import to_device
from .._validation import check_bool, check_non_negative, check_positive_int
from .data import FederatedDataset
from .evaluation import pooled_loss
from .models import FlatModel


#: the numbers (about) that one chunk of evaluation or training makes in its forward pass
#: (:meth:`FlatModel.values_per_sample`): the paper's CNN evaluates five models on about 1400
#: inputs at a time and trains about 350 pairs at a time; a linear model is not split by it
CHUNK_VALUES = 2 ** 29


@dataclass(frozen=True)
class Padded:
    """One split of every client, stacked: ``x [n, N, ...]``, ``y [n, N]``, ``w [n, N]``
    (1 for a real sample, 0 for padding) and ``counts [n]``."""

    x: Tensor
    y: Tensor
    w: Tensor
    counts: Tensor

    @property
    def n_clients(self) -> int:
        return int(self.x.shape[0])

    def to(self, device: torch.device) -> "Padded":
        """The same split on ``device``."""
        return Padded(self.x.to(device), self.y.to(device), self.w.to(device), self.counts.to(device))


def pad_split(dataset: FederatedDataset, split: str) -> Padded:
    """Stacks one split (``"train"``, ``"val"`` or ``"test"``) of all clients, zero-padded."""
    if split not in ("train", "val", "test"):
        raise ValueError(f"`split` must be 'train', 'val' or 'test'; got {split!r}.")
    xs = [getattr(c, f"x_{split}") for c in dataset.clients]
    ys = [getattr(c, f"y_{split}") for c in dataset.clients]
    counts = torch.tensor([len(y) for y in ys])
    N = max(1, int(counts.max()))
    n = len(xs)
    x = torch.zeros(n, N, *dataset.input_shape)
    y = torch.zeros(n, N, dtype=torch.long)
    w = torch.zeros(n, N)
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        x[i, : len(yi)] = xi
        y[i, : len(yi)] = yi
        w[i, : len(yi)] = 1.0
    return Padded(x, y, w, counts)


def chunk_slices(total: int, size: int):
    """Slices of ``range(total)`` of ``size`` each (the last may be shorter)."""
    for start in range(0, total, size):
        yield slice(start, min(total, start + size))


@torch.no_grad()
def evaluate(model: FlatModel, params: Tensor, data: Padded, *, clients: Tensor | None = None,
             max_samples: int = 8192, return_probs: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """Client side: loss and accuracy of every model on every client's data.

    Returns ``loss [n, m]`` (mean cross-entropy), ``accuracy [n, m]`` and, with
    ``return_probs=True``, ``probs`` of shape ``[m, n, N, C]`` (the predictive distributions;
    padding rows are meaningless; otherwise ``None``). Clients with
    no sample in this split get NaN. Evaluated in chunks of about ``max_samples`` inputs per
    model, so memory stays bounded.

    Raises ``TypeError`` for arguments of the wrong kind and ``ValueError`` for ``params`` that
    are not ``[m, model.dim]``.
    """
    _check_evaluate_args(model, params, data, clients, max_samples, return_probs)
    return evaluate_unchecked(model, params, data, clients, max_samples, return_probs)


def selection_scores(model: FlatModel, params: Tensor, train: Padded, val: Padded) -> tuple[Tensor, Tensor]:
    """What each client's final model is picked by, on the host: ``val_accuracy [n, m]`` and the
    selection loss ``[n, m]``, each model's loss on the client's training and validation data
    pooled (:func:`~most.federated.evaluation.pooled_loss`); both feed
    :func:`~most.federated.server.choose_models`."""
    val_loss, val_acc, _ = evaluate(model, params, val)
    train_loss, _, _ = evaluate(model, params, train)
    return val_acc.cpu(), pooled_loss(train_loss.cpu(), val_loss.cpu(), train.counts.cpu(), val.counts.cpu())


def evaluate_unchecked(model: FlatModel, params: Tensor, data: Padded, clients: Tensor | None, max_samples: int = 8192,
              return_probs: bool = False, accuracy: bool = True) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """:func:`evaluate` without its checks; ``accuracy=False`` leaves the accuracy out (None)."""
    logits, y, w = _logits(model, params, data, clients, max_samples)
    denom = w.sum(1)  # [n]
    loss = (sample_cross_entropy(logits, y, w).sum(-1) / denom).T  # [n, m]; NaN for an empty split
    if not accuracy:
        return loss, None, (logits.softmax(-1) if return_probs else None)
    correct = (logits.argmax(-1) == y).float()
    acc = ((correct * w).sum(-1) / denom).T
    return loss, acc, (logits.softmax(-1) if return_probs else None)


def sample_losses(model: FlatModel, params: Tensor, data: Padded, clients: Tensor | None) -> tuple[Tensor, Tensor]:
    """Every model's loss on every sample of the clients asked: ``(loss [k, m], per_sample
    [k, m, N])`` (the mean over each client's real samples, and each sample's cross-entropy,
    0 on padding), for a method that weighs the samples
    (:attr:`~most.federated.methods.FederatedMethod.sample_weights`)."""
    logits, y, w = _logits(model, params, data, clients)
    ce = sample_cross_entropy(logits, y, w)  # [m, n, N]
    return (ce.sum(-1) / w.sum(1)).T, ce.transpose(0, 1)


def sample_cross_entropy(logits: Tensor, y: Tensor, w: Tensor) -> Tensor:
    """``[m, n, N]``: each sample's cross-entropy under each model, times its weight (0 on
    padding), from ``logits [m, n, N, C]``, ``y [n, N]`` and ``w [n, N]``."""
    m, (n, N) = logits.shape[0], y.shape
    return cross_entropy(logits.permute(0, 3, 1, 2), y.expand(m, n, N), reduction="none") * w


def plan_losses(model: FlatModel, params: Tensor, data: Padded, clients: Tensor | None, loss) -> Tensor:
    """``[k, m]``: every model's loss on the clients asked (all by default) as ``loss`` scores it
    (a :class:`~most.federated.methods.losses.ClientLoss`), for a method whose plan reads another
    loss than the mean cross-entropy."""
    logits, y, w = _logits(model, params, data, clients)
    return loss(logits, y, w)


def _logits(model: FlatModel, params: Tensor, data: Padded, clients: Tensor | None,
            max_samples: int = 8192) -> tuple[Tensor, Tensor, Tensor]:
    """``(logits [m, n, N, C], y [n, N], w [n, N])`` of every model on the clients asked (all by
    default); padding rows are 0."""
    x, y, w = (data.x, data.y, data.w) if clients is None else (data.x[clients], data.y[clients], data.w[clients])
    n, N = y.shape
    flat_x = x.reshape(n * N, *x.shape[2:])
    # Only real samples go through the models (clients of very different sizes are mostly
    # padding); at least one, so that an all-empty split still gives logits of the right width.
    real = w.reshape(-1) > 0
    real[0] = True
    padded = not bool(real.all())  # clients of equal sizes have no padding: no selection, no scatter
    xr = flat_x[real] if padded else flat_x
    per_chunk = min(max_samples, CHUNK_VALUES // (params.shape[0] * model.values_per_sample(x.shape[2:])))
    outs = [model.batched_logits(params, xr[sl], shared_inputs=True) for sl in chunk_slices(len(xr), max(1, per_chunk))]
    out_real = torch.cat(outs, 1) if len(outs) > 1 else outs[0]  # [m, R, C]
    if padded:
        logits = out_real.new_zeros(params.shape[0], n * N, out_real.shape[-1])
        logits[:, real] = out_real
    else:
        logits = out_real
    return logits.reshape(params.shape[0], n, N, -1), y, w  # [m, n, N, C]; padding rows are 0


def _check_model_params(model, params, rows: str, what: str) -> None:
    """A :class:`FlatModel` and ``params [rows, d]`` of it (``what`` says what the rows are)."""
    if not isinstance(model, FlatModel):
        raise TypeError(f"`model` must be a most.federated.FlatModel (e.g. fl.logistic_regression(dim, n_classes)); "
                        f"got {type(model).__name__}.")
    if not isinstance(params, Tensor):
        raise TypeError(f"`params` must be a tensor [{rows}, d] of flat model parameters (e.g. model.init(m, "
                        f"generator)); got {type(params).__name__}.")
    if params.ndim != 2 or params.shape[1] != model.dim:
        raise ValueError(f"`params` must have shape [{rows}, {model.dim}] ({what}, {model.dim} parameters of "
                         f"{model.name} each); got {tuple(params.shape)}.")


def _check_evaluate_args(model, params, data, clients, max_samples, return_probs) -> None:
    _check_model_params(model, params, "m", "m models")
    if not isinstance(data, Padded):
        raise TypeError(f"`data` must be a most.federated.clients.Padded split (e.g. fl.pad_split(dataset, 'val')); "
                        f"got {type(data).__name__}.")
    if clients is not None and not (isinstance(clients, Tensor) and not clients.is_floating_point()
                                    and clients.dtype != torch.bool and clients.ndim == 1):
        raise TypeError("`clients` must be None (every client) or an integer tensor [k] of client indices; got "
                        + (f"a {clients.dtype} tensor of shape {tuple(clients.shape)}." if isinstance(clients, Tensor)
                           else f"{type(clients).__name__}."))
    check_positive_int(max_samples, name="max_samples")
    check_bool(return_probs, name="return_probs")


def local_train(model: FlatModel, params: Tensor, x: Tensor, y: Tensor, w: Tensor, *, epochs: int,
                batch_size: int, lr: float, prox_mu: float = 0.0, generator: torch.Generator | None = None,
                seeds: list[int] | None = None, max_pairs: int = 4096, sample_weight: Tensor | None = None) -> Tensor:
    """Client side: K epochs of mini-batch SGD for P (client, model) pairs at once.

    Args:
        params: ``[P, d]`` starting models (also the anchor of the proximal term).
        x, y, w: ``[P, N, ...]``, ``[P, N]``, ``[P, N]``: each pair's client data, zero-padded
            (``w`` = 1 for real samples).
        epochs, batch_size, lr: local SGD. Each epoch visits each client's real samples once in
            a fresh random order, in ``ceil(n_i / batch_size)`` steps; a pair stops stepping when
            its samples are used up (padding never makes a step).
        prox_mu: FedProx's ``mu / 2 ||theta - theta_start||^2``.
        generator: draws every pair's batch order (default: seed 0).
        seeds: instead of ``generator``, one seed per pair (:func:`pair_seed`): pair p's order
            comes from its own generator and depends only on its seed and its own samples
            (which must come first in its rows of ``w``), so a client that trains its pairs
            alone draws the same batches as a runtime that trains all pairs together.
        max_pairs: pairs trained together (memory bound).
        sample_weight: ``[P, N]`` a weight of each sample in its pair's loss (the loss of a
            batch is ``sum_b q_b l_b / |batch|``; FedEM's responsibilities); None: 1 each.

    Returns:
        ``[P, d]`` the locally trained models.
    """
    _check_train_args(model, params, x, y, w, epochs, batch_size, lr, prox_mu)
    if seeds is not None and len(seeds) != len(y):
        raise ValueError(f"`seeds` must have one seed per pair: {len(seeds)} seeds for {len(y)} pairs.")
    if sample_weight is not None and tuple(sample_weight.shape) != tuple(w.shape):
        raise ValueError(f"`sample_weight` must have the shape of `w`, {tuple(w.shape)} (one weight per sample of "
                         f"each pair); got {tuple(sample_weight.shape)}.")
    keys = batch_orders(w, epochs, generator=generator, seeds=seeds, max_pairs=max_pairs)
    return train_pairs(model, params, x, y, w, keys, batch_size=batch_size, lr=lr, prox_mu=prox_mu, max_pairs=max_pairs,
                sample_weight=sample_weight)


def _check_train_args(model, params, x, y, w, epochs, batch_size, lr, prox_mu) -> None:
    """:func:`local_train`'s arguments: the model, ``params [P, d]``, the pairs' data with ``P``
    rows of ``N`` samples each, and the settings of local SGD."""
    _check_model_params(model, params, "P", "the starting models of the P pairs")
    for name, t in (("x", x), ("y", y), ("w", w)):
        if not isinstance(t, Tensor):
            raise TypeError(f"`{name}` must be a tensor; got {type(t).__name__}.")
    pairs = params.shape[0]
    if w.ndim != 2 or y.shape != w.shape or x.ndim < 2 or tuple(x.shape[:2]) != tuple(w.shape) or w.shape[0] != pairs:
        raise ValueError(f"`x`, `y` and `w` must hold the P = {pairs} pairs' padded samples, [P, N, ...], [P, N] and "
                         f"[P, N] (one row per row of `params`); got {tuple(x.shape)}, {tuple(y.shape)} and "
                         f"{tuple(w.shape)}.")
    check_positive_int(epochs, name="epochs")
    check_positive_int(batch_size, name="batch_size")
    check_non_negative(lr, name="lr")
    check_non_negative(prox_mu, name="prox_mu")


def batch_orders(w: Tensor, epochs: int, *, generator: torch.Generator | None = None, seeds: list[int] | None = None,
                 max_pairs: int = 4096) -> list[Tensor]:
    """The sort keys of every pair's batch order, one ``[P, N]`` tensor per epoch (real samples
    first, in random order; padding last), drawn as :func:`local_train` draws them: from
    ``generator`` in chunks of ``max_pairs`` pairs, epoch by epoch within a chunk, or from each
    pair's own seed. Drawing them apart from the training lets several runs, each with its own
    generator, train their pairs together and draw what each would draw alone."""
    generator = torch.Generator().manual_seed(0) if generator is None else generator  # a CPU generator
    P = w.shape[0]
    chunks: list[list[Tensor]] = [[] for _ in range(epochs)]
    sizes = w.sum(1).long().tolist() if seeds is not None else None
    pair_gens = None if seeds is None else [torch.Generator().manual_seed(int(s)) for s in seeds]
    for sl in chunk_slices(P, max_pairs):
        ws = w[sl]
        for e in range(epochs):
            if pair_gens is None:
                keys = torch.rand(ws.shape, generator=generator).to(ws.device) + 2.0 * (ws == 0)
            else:
                keys = torch.full(ws.shape, 3.0)
                for p, (g, k) in enumerate(zip(pair_gens[sl], cast("list[int]", sizes)[sl])):  # seeds: sizes too
                    keys[p, :k] = torch.rand(k, generator=g)
                keys = keys.to(ws.device)
            chunks[e].append(keys)
    return [torch.cat(parts) if len(parts) != 1 else parts[0] for parts in chunks]


def train_pairs(model: FlatModel, params: Tensor, x: Tensor, y: Tensor, w: Tensor, keys: list[Tensor], *, batch_size: int,
         lr: float | Tensor, prox_mu: float | Tensor, max_pairs: int, rows: Tensor | None = None,
         sizes: Tensor | None = None, sample_weight: Tensor | None = None) -> Tensor:
    """Mini-batch SGD of P pairs, one epoch per entry of ``keys`` (:func:`batch_orders`).

    ``x, y, w`` hold the data of the pairs' clients, ``rows [P]`` naming each pair's row (None:
    row p for pair p), so pairs of one client share its data instead of copying it. ``lr`` and
    ``prox_mu`` are numbers, or ``[P]`` tensors (one per pair: runs with different settings
    trained together). Each step is one forward pass of the pairs that still have samples and
    one reverse pass of the sum of their losses: pair p's loss depends only on its own
    parameters, so the gradient of the sum is every pair's own gradient. ``sizes [P]``, each
    pair's number of samples on the host (None: read from ``w``), plans the steps without a
    read from the device. ``sample_weight [P, N]`` (None: 1) weighs each pair's samples in its
    loss, ``sum_b q_b l_b / |batch|`` (FedEM's responsibilities)."""
    def loss(theta, xb, yb, wb, qb):  # the sum over pairs of each pair's mean loss
        logits = model.batched_logits(theta, xb)
        ce = cross_entropy(logits.flatten(0, 1), yb.flatten(), reduction="none").view(yb.shape)
        weighted = ce * wb if qb is None else ce * wb * qb
        return (weighted.sum(1) / wb.sum(1).clamp_min(1.0)).sum()

    P, device = params.shape[0], params.device
    rows = torch.arange(P, device=w.device) if rows is None else rows.to(w.device)
    # the step plan (sizes, order, FedProx's pairs) is host work: no read from the device per chunk
    sizes = (w.sum(1)[rows] if sizes is None else sizes).cpu()
    mu = (prox_mu if isinstance(prox_mu, Tensor) else torch.full((P,), float(prox_mu))).cpu().to(params.dtype)
    step = to_device(lr.to(params.dtype), device)[:, None] if isinstance(lr, Tensor) else lr
    n_samples = w.shape[1]
    max_pairs = max(1, min(max_pairs, CHUNK_VALUES // (batch_size * model.values_per_sample(x.shape[2:]))))
    flat = [v.reshape(v.shape[0] * n_samples, *v.shape[2:]) for v in (y, w)]  # a sample per row
    # the samples' rows (and below the pairs' parameters) start at 64-byte boundaries, so every
    # pair's block has the same alignment wherever it sits in a step's batch (_aligned_rows)
    features = math.prod(x.shape[2:])
    x_rows = _aligned_rows(x.reshape(x.shape[0] * n_samples, features))
    out = []
    with torch.enable_grad():
        for sl in chunk_slices(P, max_pairs):
            # pairs by size, largest first: the pairs still stepping at step s are a prefix (one
            # host read of the sizes per call, none per step), so a step costs only its active pairs
            perm_host = sizes[sl].argsort(descending=True, stable=True)
            counts = sizes[sl][perm_host].long().tolist()
            left = [-c for c in counts]  # ascending, for bisect
            perm = to_device(perm_host, device)
            anchor = params[sl][perm].detach()
            theta = _aligned_rows(anchor, copy=True)[:, : anchor.shape[1]]
            pair_rows = rows[sl][perm][:, None]
            lr_sl = step[sl][perm] if isinstance(step, Tensor) else step
            # FedProx's mu/2 ||theta - anchor||^2 adds mu (theta - anchor) to the gradient (the
            # numbers autograd forms), only where mu > 0
            mu_sl = mu[sl][perm_host]
            prox_host = mu_sl.nonzero().squeeze(1)
            prox_at = prox_host.tolist()
            prox, prox_mu = to_device(prox_host, device), to_device(mu_sl[prox_host][:, None], device)
            n_steps = math.ceil(counts[0] / batch_size)
            q_sl = None if sample_weight is None else sample_weight[sl][perm]
            for epoch_keys in keys:
                order = epoch_keys[sl][perm].argsort(1)
                for s in range(n_steps):
                    k = bisect.bisect_left(left, -s * batch_size)  # pairs with samples left
                    b = order[:k, s * batch_size:(s + 1) * batch_size]
                    at = (pair_rows[:k] * n_samples + b).flatten()  # the batch's rows of the flat data
                    xb = x_rows.index_select(0, at)[:, :features].view(*b.shape, *x.shape[2:])
                    yb, wb = (v.index_select(0, at).view(*b.shape) for v in flat)
                    qb = None if q_sl is None else q_sl[:k].gather(1, b).to(wb.dtype)
                    leaf = theta[:k].detach().requires_grad_()
                    (g,) = torch.autograd.grad(loss(leaf, xb, yb, wb, qb), leaf)
                    j = bisect.bisect_left(prox_at, k)  # the pairs with mu > 0 among the active ones
                    if j:
                        p = prox[:j]
                        g.index_copy_(0, p, g.index_select(0, p) + prox_mu[:j] * (
                            theta.index_select(0, p) - anchor.index_select(0, p)))
                    theta[:k] = theta[:k] - (lr_sl[:k] if isinstance(lr_sl, Tensor) else lr_sl) * g
            out.append(theta[perm.argsort()])
    return torch.cat(out)


def _aligned_rows(t: Tensor, *, copy: bool = False) -> Tensor:
    """``t [R, F]`` with zero columns appended so that each row starts at a multiple of 64 bytes
    (``t`` itself when its rows already do, unless ``copy``); ``[:, :F]`` gives ``t`` back.

    Why: a batched matrix product's kernel may take another path, and so round otherwise, for an
    operand at another alignment (MKL on an AVX-512 CPU, torch 2.13: ``baddbmm`` of a one-sample
    step depends on where each pair's weights start, and with 33 input features that of any step
    on where its inputs start). A pair's block in a step's batch starts at its position times
    the block's length, so unpadded, a pair's numbers depend on its position among the pairs
    (on the other runs' pairs in :func:`run_batch`), not only on its own data; 64 bytes is a
    cache line and the widest vector, so every block starts at the same alignment."""
    pad = -t.shape[1] % max(1, 64 // t.element_size())
    if pad:
        return torch.nn.functional.pad(t, (0, pad))
    return t.clone() if copy else t




def mixture_scores(model: FlatModel, params: Tensor, mixture: Tensor, data: Padded) -> tuple[Tensor, Tensor, Tensor]:
    """Each client's mixture of the models on its data: ``(loss [n, 1], accuracy [n, 1], probs
    [m, n, N, C])``, client i predicting ``sum_k mixture[i, k] p_k(y | x)`` (``mixture [n, m]``);
    the loss is the mixture's mean negative log-likelihood, and ``probs`` the models' own
    distributions. NaN for a client without samples."""
    logits, y, w = _logits(model, params, data, None)
    probs = logits.softmax(-1)
    p = torch.einsum("nk,knsc->nsc", mixture.to(probs), probs)  # [n, N, C]
    nll = -p.gather(-1, y[..., None]).squeeze(-1).clamp_min(torch.finfo(p.dtype).tiny).log()
    denom = w.sum(1)
    loss = ((nll * w).sum(1) / denom)[:, None]
    acc = (((p.argmax(-1) == y).to(w.dtype) * w).sum(1) / denom)[:, None]
    return loss, acc, probs
