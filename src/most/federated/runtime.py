r"""The in-process federated runtime: pure client and server steps, and the round loop.

Each round (:func:`run_federated`):

1. **Evaluate** (client side, :func:`evaluate`): every participating client reports the loss
   of each of the m models on its training data, ``L [n, m]``.
2. **Plan** (server, the method): which client trains which model, and with what weight,
   ``W [m, n]`` (for MosT: Gamma from ``L`` by optimal transport, then the weighting).
3. **Local training** (client side, :func:`local_train`): every pair (client i, model j) with
   ``W[j, i] > 0`` runs K local epochs of mini-batch SGD from ``theta_j`` (plus FedProx's
   proximal term when asked) and returns ``theta_ij``. All pairs train at once:
   ``torch.func.vmap`` over pairs, clients padded to a common size with zero-weight rows.
4. **Aggregate** (server, the method): from the pseudo-gradients
   ``Delta_ij = theta_j - theta_ij`` (Eqs. 7-9 for MosT: the min-norm combination of the
   Gamma-weighted updates of each model's clients), ``theta_j <- theta_j - eta_s d_j``.

The client steps (:func:`evaluate`, :func:`local_train`) and the server steps (the methods
in :mod:`most.federated.methods`) are pure functions of tensors, so another engine (Flower)
can run the same steps across machines.
"""

from __future__ import annotations

import bisect
import math
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import torch
from torch import Tensor
from torch.nn.functional import cross_entropy

from .._host import HOST_SOLVE_MAX, to_device, to_host
from .._threads import threads_for
from .._validation import check_bool, check_positive, check_positive_int, check_seed
from ..checkpoint import Checkpoint
from .data import FederatedDataset
from .evaluation import pooled_loss, select_by_loss
from .models import FlatModel
from .server import RoundLog, RoundState, Server, choose_models, pair_seed

__all__ = ["Padded", "pad_split", "evaluate", "local_train", "pair_seed", "FederatedConfig", "FederatedResult",
           "RoundLog", "check_inputs", "run_federated", "run_batch",
           "batch_groups", "batch_orders", "BATCH_SHARED"]


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


def _to(data: Padded, device: torch.device) -> Padded:
    return Padded(data.x.to(device), data.y.to(device), data.w.to(device), data.counts.to(device))


def _chunks(total: int, size: int):
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
    return _evaluate(model, params, data, clients, max_samples, return_probs)


def _evaluate(model: FlatModel, params: Tensor, data: Padded, clients: Tensor | None, max_samples: int = 8192,
              return_probs: bool = False, accuracy: bool = True) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """:func:`evaluate` without its checks; ``accuracy=False`` leaves the accuracy out (None)."""
    logits, y, w = _logits(model, params, data, clients, max_samples)
    n, N = y.shape
    ce = cross_entropy(logits.permute(0, 3, 1, 2), y.expand(params.shape[0], n, N), reduction="none")
    denom = w.sum(1)  # [n]
    loss = ((ce * w).sum(-1) / denom).T  # [n, m]; NaN for an empty split
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
    m, (n, N) = params.shape[0], y.shape
    ce = cross_entropy(logits.permute(0, 3, 1, 2), y.expand(m, n, N), reduction="none") * w  # [m, n, N]
    return (ce.sum(-1) / w.sum(1)).T, ce.transpose(0, 1)


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
    per_chunk = min(max_samples, _CHUNK_VALUES // (params.shape[0] * model.values_per_sample(x.shape[2:])))
    outs = [model.batched_logits(params, xr[sl], shared_inputs=True) for sl in _chunks(len(xr), max(1, per_chunk))]
    out_real = torch.cat(outs, 1) if len(outs) > 1 else outs[0]  # [m, R, C]
    if padded:
        logits = out_real.new_zeros(params.shape[0], n * N, out_real.shape[-1])
        logits[:, real] = out_real
    else:
        logits = out_real
    return logits.reshape(params.shape[0], n, N, -1), y, w  # [m, n, N, C]; padding rows are 0


def _check_evaluate_args(model, params, data, clients, max_samples, return_probs) -> None:
    if not isinstance(model, FlatModel):
        raise TypeError(f"`model` must be a most.federated.FlatModel (e.g. fl.logistic_regression(dim, n_classes)); "
                        f"got {type(model).__name__}.")
    if not isinstance(params, Tensor):
        raise TypeError(f"`params` must be a tensor [m, d] of flat model parameters (e.g. model.init(m, generator)); "
                        f"got {type(params).__name__}.")
    if params.ndim != 2 or params.shape[1] != model.dim:
        raise ValueError(f"`params` must have shape [m, {model.dim}] (m models of the {model.dim} parameters of "
                         f"{model.name}); got {tuple(params.shape)}.")
    if not isinstance(data, Padded):
        raise TypeError(f"`data` must be a most.federated.runtime.Padded split (e.g. fl.pad_split(dataset, 'val')); "
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
    if seeds is not None and len(seeds) != len(y):
        raise ValueError(f"`seeds` must have one seed per pair: {len(seeds)} seeds for {len(y)} pairs.")
    if sample_weight is not None and tuple(sample_weight.shape) != tuple(w.shape):
        raise ValueError(f"`sample_weight` must have the shape of `w`, {tuple(w.shape)} (one weight per sample of "
                         f"each pair); got {tuple(sample_weight.shape)}.")
    keys = batch_orders(w, epochs, generator=generator, seeds=seeds, max_pairs=max_pairs)
    return _sgd(model, params, x, y, w, keys, batch_size=batch_size, lr=lr, prox_mu=prox_mu, max_pairs=max_pairs,
                sample_weight=sample_weight)


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
    for sl in _chunks(P, max_pairs):
        ws = w[sl]
        for e in range(epochs):
            if pair_gens is None:
                keys = torch.rand(ws.shape, generator=generator).to(ws.device) + 2.0 * (ws == 0)
            else:
                keys = torch.full(ws.shape, 3.0)
                for p, (g, k) in enumerate(zip(pair_gens[sl], sizes[sl])):
                    keys[p, :k] = torch.rand(k, generator=g)
                keys = keys.to(ws.device)
            chunks[e].append(keys)
    return [torch.cat(parts) if len(parts) != 1 else parts[0] for parts in chunks]


def _sgd(model: FlatModel, params: Tensor, x: Tensor, y: Tensor, w: Tensor, keys: list[Tensor], *, batch_size: int,
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
    max_pairs = max(1, min(max_pairs, _CHUNK_VALUES // (batch_size * model.values_per_sample(x.shape[2:]))))
    flat = [v.reshape(v.shape[0] * n_samples, *v.shape[2:]) for v in (y, w)]  # a sample per row
    # the samples' rows (and below the pairs' parameters) start at 64-byte boundaries, so every
    # pair's block has the same alignment wherever it sits in a step's batch (_aligned_rows)
    features = math.prod(x.shape[2:])
    x_rows = _aligned_rows(x.reshape(x.shape[0] * n_samples, features))
    out = []
    with torch.enable_grad():
        for sl in _chunks(P, max_pairs):
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


@dataclass(frozen=True)
class FederatedConfig:
    """Settings shared by every method (the same local work for all).

    Args:
        rounds: communication rounds T.
        local_epochs: K, local epochs per round.
        batch_size, lr: local mini-batch SGD.
        participation: fraction of clients sampled each round (1 = full participation).
        seed: seeds the initial models, the client sampling and the local batches.
        eval_every: rounds between validation evaluations recorded in the history (0: never).
        loss_samples: if set, the round-start losses (what the server plans with) are measured
            on each client's first ``loss_samples`` training samples (the loaders shuffle each
            client's data), which bounds the evaluation cost on large clients.
        device: where the models and the clients' data live during the run (``"cpu"``,
            ``"cuda"``, ``"cuda:1"``, ...; default the CPU). Random draws (initial models, client
            sampling, batch order) come from a CPU generator, so a seed gives the same draws on
            every device. The returned :class:`FederatedResult` is on the CPU.
        pair_seeds: draw each (round, client, model) pair's batch order from its own seed
            (:func:`pair_seed`) rather than from the run's generator. A distributed runtime
            (:mod:`most.flower`) must do so, since each client draws its own batches; set it
            to compare the two runtimes run for run.
    """

    rounds: int = 100
    local_epochs: int = 1
    batch_size: int = 10
    lr: float = 0.05
    participation: float = 1.0
    seed: int = 0
    eval_every: int = 10
    loss_samples: int | None = None
    device: str | None = None
    pair_seeds: bool = False

    def __post_init__(self):
        from .._validation import as_number

        # each setting is stored as the plain number it was checked as (NumPy scalars, 0-d tensors accepted)
        checks = {"rounds": check_positive_int, "local_epochs": check_positive_int, "batch_size": check_positive_int,
                  "lr": check_positive, "seed": check_seed,
                  "eval_every": lambda v, name: check_positive_int(v, name=name, minimum=0),
                  "loss_samples": lambda v, name: None if v is None else check_positive_int(v, name=name)}
        for name, check in checks.items():
            object.__setattr__(self, name, check(getattr(self, name), name=name))
        participation = as_number(self.participation, name="participation", kind="a number in (0, 1]")
        if not 0 < participation <= 1:
            raise ValueError(f"`participation` must be in (0, 1]; got {self.participation}.")
        object.__setattr__(self, "participation", float(participation))
        object.__setattr__(self, "pair_seeds", check_bool(self.pair_seeds, name="pair_seeds"))
        if self.device is not None:
            _check_device(self.device)


def _check_device(name) -> None:
    """Refuses a device the runtime cannot train on: not a torch device, ``meta`` (tensors
    without data), a CUDA device that is not there, or one torch cannot allocate on."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"`device` must name a torch device such as 'cpu' or 'cuda'; got {name!r}.") from exc
    if device.type == "meta":
        raise ValueError(f"`device` is {name!r}: meta tensors hold no data, so nothing can be trained or "
                         "evaluated on them; use device='cpu' or 'cuda'.")
    if device.type == "cpu":
        return
    if device.type == "cuda":  # no CUDA context is made here (a process may fork workers later)
        if not torch.cuda.is_available():
            raise ValueError(f"`device` is {name!r} but CUDA is not available here; use device='cpu'.")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"`device` is {name!r} but this machine has {torch.cuda.device_count()} CUDA "
                             f"device(s) (0 .. {torch.cuda.device_count() - 1}); use one of them or device='cpu'.")
        return
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"`device` is {name!r} but MPS is not available here; use device='cpu'.")
        return
    try:
        torch.empty(1, device=device)
    except Exception as exc:  # noqa: BLE001 (any backend's error: the device cannot be used)
        raise ValueError(f"`device` is {name!r} but torch cannot allocate tensors there "
                         f"({type(exc).__name__}: {exc}); use device='cpu' or 'cuda'.") from None


@dataclass(frozen=True)
class FederatedResult:
    """Final models and their evaluation.

    ``val_accuracy`` / ``test_accuracy`` are ``[n, m]``; ``choice [n]`` is each client's best
    model on validation; ``history`` one :class:`RoundLog` per round; ``test_probs`` the
    models' predictive distributions on the test split ``[m, n, N, C]`` (for diversity).

    Clients with an empty split (allowed by :class:`~most.federated.ClientData`; the loaders
    give one to a client with very few samples): a client with no validation sample has a NaN
    row in ``val_accuracy``, and its ``choice`` is its model with the lowest training loss
    (:func:`run_federated` warns, naming those clients). A client with no test sample has a NaN
    row in ``test_accuracy`` and ``test_loss`` and a NaN :attr:`client_accuracy`; it is left
    out of :attr:`mean_accuracy`, and :attr:`n_tested` counts the clients that are not.
    ``selection_loss [n, m]`` is each final model's mean loss on the client's training and
    validation samples pooled (:func:`~most.federated.evaluation.pooled_loss`; ``None`` when
    the engine did not measure it); :attr:`loss_choice` picks by it.

    A method whose clients predict with a mixture of the models (:class:`~most.federated.methods.FedEM`)
    has ``mixture [n, m]``, each client's weights of the models; its ``val_accuracy``,
    ``test_accuracy``, ``test_loss`` and ``selection_loss`` are then ``[n, 1]``, the client's
    mixture, and ``choice`` is 0 for every client (the mixture's column). ``None`` otherwise.
    """

    params: Tensor
    val_accuracy: Tensor
    test_accuracy: Tensor
    test_loss: Tensor
    choice: Tensor
    history: list[RoundLog]
    test_probs: Tensor = field(repr=False)
    test_weight: Tensor = field(repr=False)
    selection_loss: Tensor | None = field(default=None, repr=False)
    mixture: Tensor | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        """One line: the sizes and the mean test accuracy (the tensors are attributes)."""
        m, dim = self.params.shape
        acc = f"{100 * self.mean_accuracy:.1f} %" if self.n_tested else "none"
        return (f"FederatedResult({self.choice.shape[0]} clients, {m} models of {dim} parameters, "
                f"{len(self.history)} rounds; mean test accuracy {acc})")

    @property
    def client_accuracy(self) -> Tensor:
        """``[n]`` test accuracy of each client with its validation-chosen model."""
        return self.test_accuracy.gather(1, self.choice[:, None]).squeeze(1)

    @property
    def loss_choice(self) -> Tensor:
        """``[n]`` each client's model with the lowest loss on its training and validation data."""
        if self.selection_loss is None:
            raise ValueError("This result has no `selection_loss` (its engine did not measure the final models' "
                             "training loss); pick with `choice` (validation accuracy) instead.")
        return select_by_loss(self.selection_loss)

    @property
    def tested(self) -> Tensor:
        """``[n]`` bool: the clients with a test accuracy (those with test samples)."""
        return ~self.client_accuracy.isnan()

    @property
    def n_tested(self) -> int:
        """How many clients :attr:`mean_accuracy` averages over (those with test samples)."""
        return int(self.tested.sum())

    @property
    def mean_accuracy(self) -> float:
        """Mean :attr:`client_accuracy` over the clients with test samples (:attr:`n_tested` of
        them); a client without test samples has no accuracy and is left out."""
        acc = self.client_accuracy
        if not self.n_tested:
            raise ValueError("No client has a test accuracy (no test samples, or no client answered): there is no "
                             "mean accuracy to report.")
        return float(acc[self.tested].mean())

    def prediction_diversity(self) -> float:
        """Mean pairwise symmetric KL between the models' predictions on the real test inputs
        (:func:`~most.federated.evaluation.prediction_diversity`; padding rows left out)."""
        from .evaluation import prediction_diversity

        probs = self.test_probs
        real = self.test_weight.reshape(-1) > 0
        return prediction_diversity(probs.reshape(probs.shape[0], -1, probs.shape[-1])[:, real])

    def timings(self) -> dict[str, float]:
        """Total seconds per phase (evaluate, plan, local_training, aggregate) over the rounds."""
        return {k: sum(log.seconds[k] for log in self.history) for k in self.history[0].seconds}


def _describe_type(obj) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_method(method) -> None:
    from . import methods as federated_methods

    if isinstance(method, type):
        name = method.__name__
        raise TypeError(f"`method` must be a method object, not the class {_describe_type(method)}: call it, "
                        f"e.g. `{name}(n_models=3)`.")
    if isinstance(method, federated_methods.FederatedMethod):
        return
    name = type(method).__name__
    module = type(method).__module__ or ""
    if module.startswith("most.") and not module.startswith("most.federated"):
        hint = (f" {_describe_type(method)} is a centralised method (for most.Problem objectives); "
                + (f"for federated clients use most.federated.methods.{name}(n_models=...)."
                   if name in federated_methods.__all__ else
                   f"the federated methods are {', '.join(_federated_method_names())}."))
    else:
        hint = " A method of one's own subclasses most.federated.methods.FederatedMethod."
    raise TypeError(f"`method` must be a federated method of most.federated.methods (e.g. "
                    f"most.federated.methods.MosT(n_models=3)); got {_describe_type(method)}.{hint}")


def _federated_method_names() -> list[str]:
    from . import methods as F

    return [n for n in F.__all__ if isinstance(getattr(F, n), type) and issubclass(getattr(F, n), F.FederatedMethod)
            and n != "FederatedMethod"]


def _check_batch(dataset: FederatedDataset, batch_size: int) -> Tensor:
    """Training samples as :func:`local_train` batches them: ``min(batch_size, N)`` rows, ``N``
    the largest client's training samples (a batch is padded to that width; a layer with batch
    statistics, such as BatchNorm, fails on a batch of one and works on more), taken from the
    first clients, in the dtype the runtime stacks the clients' data in (:func:`pad_split`)."""
    want = max(1, min(batch_size, max(c.n_train for c in dataset.clients)))
    parts, have = [], 0
    for c in dataset.clients:
        if have >= want:
            break
        part = c.x_train[: want - have]
        parts.append(part)
        have += len(part)
    return torch.cat(parts).to(torch.get_default_dtype())


def check_inputs(dataset: FederatedDataset, model: FlatModel, method, config: FederatedConfig) -> None:
    """The checks :func:`run_federated` makes before any work, for the four arguments together.

    Cheap (no training; one forward pass of the model, without gradients, on a batch of
    ``min(batch_size, N)`` training samples, as wide as training's batches), so a driver can
    check every run before it starts any (``most run`` does). Raises ``TypeError`` for an
    argument of the wrong kind (a module instead of a :class:`FlatModel`, a method class instead
    of an instance, a centralised method, a dict instead of a :class:`FederatedConfig`; a
    ``dataset`` that is not a :class:`FederatedDataset` is a ``ValueError``, as it has always
    been) and ``ValueError`` for arguments that do not fit together, each saying how to fix it:

    * ``method.check(n_clients)`` (e.g. MosT refuses more models than clients);
    * a data set where no client has validation samples (each client's model is chosen on them)
      or no client has test samples (nothing to score);
    * a model that cannot take the data's samples (input size or shape, dtype, or any other
      failure of its forward pass, with torch's reason), or that has fewer outputs than the data
      has classes.

    It warns (``UserWarning``) when MosT's warm-up takes every round (``rounds <=
    warmup_rounds``): the run is then FedAvg with m copies of one model.

    A client with an empty validation or test split is allowed (see :class:`FederatedResult`
    for how it is chosen and scored), as long as some client has each split.
    """
    if not isinstance(dataset, FederatedDataset):
        raise ValueError(f"`dataset` must be a most.federated.FederatedDataset; got {_describe_type(dataset)}.")
    if not isinstance(model, FlatModel):
        if isinstance(model, torch.nn.Module):
            raise TypeError(f"`model` must be a most.federated.FlatModel, which holds the m models as flat vectors; "
                            f"got the module {type(model).__name__}. Wrap its architecture: "
                            f"`fl.FlatModel(lambda: {type(model).__name__}(...))` (a function that builds a new "
                            "module), or use fl.logistic_regression(dim, n_classes) / fl.cnn(n_classes).")
        raise TypeError(f"`model` must be a most.federated.FlatModel (e.g. fl.logistic_regression(dim, n_classes) or "
                        f"fl.FlatModel(lambda: Net())); got {_describe_type(model)}.")
    _check_method(method)
    if not isinstance(config, FederatedConfig):
        if isinstance(config, dict):
            raise TypeError("`config` must be a most.federated.FederatedConfig, not a dict: build it with "
                            f"`FederatedConfig(**d)` (keys {', '.join(map(str, config)) or 'none'}).")
        raise TypeError(f"`config` must be a most.federated.FederatedConfig; got {_describe_type(config)}.")
    method.check(dataset.n_clients)
    _check_parameter_names(method, model)

    for split, use in (("val", "each client's model is chosen on its validation samples"),
                       ("test", "the models are scored on the clients' test samples")):
        if not any(getattr(c, f"n_{split}") for c in dataset.clients):
            raise ValueError(f"{dataset.name!r}: no client has {'validation' if split == 'val' else 'test'} samples, "
                             f"but {use}. Give the clients a {split} split (e.g. the loaders' "
                             "split=(0.6, 0.2, 0.2)), or more samples per client.")

    _warn_if_most_never_leaves_its_warmup(method, config)
    _check_model_on_data(dataset, model, config.batch_size)


def _check_parameter_names(method, model: FlatModel) -> None:
    """A component that names a parameter of the model (``MinNorm(coordinates="last")``) is
    resolved now, so a name the model lacks, or a range past its parameters, is refused before
    any work."""
    _, _, combiner = method.components()
    combiner.resolve(model.coordinates).check_dim(model.dim, model=model.name)


def _check_model_on_data(dataset: FederatedDataset, model: FlatModel, batch_size: int) -> None:
    """One forward pass of ``model`` on a training batch: a model that cannot take the data's
    samples, or has too few outputs, is refused with torch's reason and how to fix it."""
    x = _check_batch(dataset, batch_size)
    shape, size = dataset.input_shape, math.prod(dataset.input_shape)
    batch = f"a batch of {len(x)} training sample{'s' if len(x) > 1 else ''} of shape {shape}, as training batches them"
    fix = (f"Build the model for the data (input size {size}, {dataset.n_classes} classes, "
           f"e.g. fl.logistic_regression({size}, {dataset.n_classes}) for flat features); in "
           "an experiment file, leave the model's sizes (`dim`, `n_classes`, ...) out of [model]: they are taken "
           "from the data.")
    try:
        out = model.template_logits(x)
    except Exception as exc:  # noqa: BLE001 (any error of the user's module on the data)
        reason = (str(exc).strip().splitlines() or [""])[0].rstrip(".")
        reason = f"{type(exc).__name__}: {reason}"
        expects = model.input_mismatch(shape)
        if expects is not None:
            raise ValueError(f"The model {model.name} expects {expects}, but the data {dataset.name!r} has samples of "
                             f"shape {shape} ({size} values): on {batch} it fails with {reason}. " + fix) from exc
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.template_parameters()
                         if p.is_floating_point() and p.dtype != x.dtype})
        if dtypes:
            data_dtype = str(x.dtype).removeprefix("torch.")
            raise ValueError(f"The model {model.name} has {' and '.join(dtypes)} parameters, but the runtime gives it "
                             f"the data {dataset.name!r} as {data_dtype} (torch's default dtype): on {batch} it fails "
                             f"with {reason}. Build the model in {data_dtype} (e.g. leave out `.double()`), or convert "
                             "the inputs inside its forward.") from exc
        raise ValueError(f"The model {model.name} fails on the data {dataset.name!r} ({batch}): {reason}. Fix the "
                         "module so that it runs on such a batch (its sizes fit the data: input size "
                         f"{size}, {dataset.n_classes} classes)."
                         + (" A layer with batch statistics (BatchNorm) cannot train on batches of one sample: use "
                            "batch_size >= 2." if len(x) == 1 else "")) from exc
    if out.ndim != 2 or out.shape[0] != len(x):
        raise ValueError(f"The model {model.name} must return logits of shape [batch, n_classes]; on {batch} "
                         f"it returned shape {tuple(out.shape)}.")
    if out.shape[1] < dataset.n_classes:
        raise ValueError(f"The model {model.name} has {out.shape[1]} outputs, but {dataset.name!r} has "
                         f"{dataset.n_classes} classes (labels 0 .. {dataset.n_classes - 1}); it needs one output per "
                         "class. " + fix)


def _warn_if_most_never_leaves_its_warmup(method, config: FederatedConfig) -> None:
    """MosT's warm-up trains one shared model; with no round after it, the m models stay copies."""
    from .methods import MosT

    if not isinstance(method, MosT) or method.n_models < 2 or not method.warmup_rounds:
        return
    from .methods import GroupedWarmUp

    split_by_updates = isinstance(method.warmup, GroupedWarmUp)
    if config.rounds > method.warmup_rounds or (split_by_updates and config.rounds == method.warmup_rounds):
        return
    warnings.warn(
        f"MosT(warmup={method.warmup!r}) with rounds={config.rounds}: every round is a warm-up round, "
        f"so MosT never assigns clients to models and the run is FedAvg with {method.n_models} copies of one model "
        "(the m models end identical). Use a shorter warm-up (e.g. warmup=WarmUp(rounds=1), or warmup=None) or more "
        f"rounds (more than {method.warmup_rounds - int(split_by_updates)}).", UserWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside this package (the
    user's call of run_federated or check_inputs), whichever driver of the package it came through."""
    import os
    import sys

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def run_federated(dataset: FederatedDataset, model: FlatModel, method, config: FederatedConfig, *,
                  progress: bool = False, callback: Callable[[RoundLog, Tensor], None] | None = None,
                  description: str | None = None, checkpoint: Checkpoint | None = None) -> FederatedResult:
    """Trains ``method.n_models`` models on ``dataset`` with the runtime above.

    ``method`` is one of :mod:`most.federated.methods` (``MosT``, ``FedAvg``, ``IFCA``, ...).
    The arguments are checked first, before any work (:func:`check_inputs`).
    ``callback(log, params)`` is called after every round. With a
    :class:`~most.checkpoint.Checkpoint`, the state (models, method state, random generator,
    history) is saved every ``checkpoint.every`` rounds, and a run that finds a checkpoint
    continues from it, ending with the same models as an uninterrupted run.

    It is :func:`run_batch` with one run.
    """
    on_round = None if callback is None else (lambda r, log, params: callback(log, params))
    return run_batch(dataset, model, [(method, config)], progress=progress, callback=on_round,
                     description=description or type(method).__name__, checkpoints=[checkpoint])[0]


#: what every run of one batch must share (the runs' pairs train in the same steps)
BATCH_SHARED = ("rounds", "local_epochs", "batch_size", "loss_samples", "device")


def run_batch(dataset: FederatedDataset, model: FlatModel, runs, *, progress: bool = False,
              callback: Callable[[int, RoundLog, Tensor], None] | None = None, description: str | None = None,
              checkpoints: list[Checkpoint | None] | None = None,
              errors: str = "raise") -> list[FederatedResult | Exception]:
    """Several runs on one data set and architecture as one batched job: the run axis.

    ``runs`` is a list of ``(method, config)`` pairs: different methods, seeds, server steps,
    FedProx ``mu`` or local learning rates. Each run keeps its own models, generator, plan,
    combination and update rule (the server side, cheap), while the pairs of all runs train in
    the same vectorised local steps and the models of all runs are evaluated in the same passes
    (the client side, where the time goes). Each run draws exactly what it would draw alone,
    so the results equal those of :func:`run_federated` on each run: bit for bit on the CPU for
    an affine model (the logistic regression; tested), to float tolerance for a model whose
    kernels depend on the number of pairs, such as a convolution (tested to 1e-5). Returns one
    :class:`FederatedResult` per run, in order.

    The runs must share the settings of :data:`BATCH_SHARED` (rounds, local epochs, batch size,
    loss probe, device); :func:`batch_groups` splits a list of runs into such groups. Each run
    needs its own method object (a method holds its run's state).

    ``callback(r, log, params)`` is called after every round for run ``r``. ``checkpoints``
    gives each run its own :class:`~most.checkpoint.Checkpoint` (or None): a stopped batch
    continues each run from its own checkpoint, so runs saved at different rounds catch up.
    A round's phase times are the batch's, shared equally among the runs that took part.

    ``errors="return"`` keeps the batch going when a run fails (its training diverged: a
    ``ValueError`` at its plan): that run stops, and its entry in the returned list is the
    error instead of a result. With ``"raise"`` (the default) the error stops the batch.
    """
    if errors not in ("raise", "return"):
        raise ValueError(f"`errors` must be 'raise' (a failed run stops the batch) or 'return' (its error is "
                         f"returned in its place); got {errors!r}.")
    runs = _check_batch_runs(runs)
    checkpoints = [None] * len(runs) if checkpoints is None else list(checkpoints)
    if len(checkpoints) != len(runs):
        raise ValueError(f"`checkpoints` must give one Checkpoint (or None) per run: {len(checkpoints)} for "
                         f"{len(runs)} runs.")
    from tqdm.auto import tqdm

    for method, config in runs:
        check_inputs(dataset, model, method, config)
    _check_batch_shares(runs)
    config = runs[0][1]
    device = torch.device(config.device or "cpu")
    # one torch thread when a local step is small work, torch's count otherwise (most.set_threads)
    pairs = min(sum(dataset.n_clients * method.n_models for method, _ in runs), _batch_pairs(device, len(runs)))
    work = pairs * config.batch_size * max(model.dim, model.values_per_sample(dataset.input_shape))
    with threads_for(work):
        train, val, test = (_to(pad_split(dataset, s), device) for s in ("train", "val", "test"))
        probe = train if config.loss_samples is None else Padded(
            train.x[:, : config.loss_samples], train.y[:, : config.loss_samples], train.w[:, : config.loss_samples],
            train.counts.clamp(max=config.loss_samples))
        servers = [Server(method, model, cfg, train.counts.cpu(), device=device) for method, cfg in runs]
        host_w = train.w.cpu()
        starts = [_resume(server, dataset, cfg, ck) for server, (_, cfg), ck in zip(servers, runs, checkpoints)]
        first = min(starts)
        label = description or (type(runs[0][0]).__name__ if len(runs) == 1 else f"{len(runs)} runs")
        bar = tqdm(range(first, config.rounds), desc=label, disable=not progress, leave=False, initial=first,
                   total=config.rounds)
        failed: dict[int, Exception] = {}
        for t in bar:
            active = [r for r, start in enumerate(starts) if start <= t and r not in failed]
            if not active:
                break
            now: dict[int, Exception] | None = {} if errors == "return" else None
            logs = _round([servers[r] for r in active], t, model, train, probe, val, dataset.client_ids, now, host_w)
            failed.update({active[i]: exc for i, exc in (now or {}).items()})
            if progress and any(log is not None for log in logs):
                bar.set_postfix(_postfix([log for log in logs if log is not None]), refresh=False)
            for r, log in zip(active, logs):
                if log is None:
                    continue
                if callback is not None:
                    callback(r, log, servers[r].params)
                if checkpoints[r] is not None and checkpoints[r].due(t, config.rounds):
                    checkpoints[r].save(servers[r].state(t + 1), servers[r].generator,
                                        settings=_settings(servers[r], dataset, runs[r][1]))
        return [failed[r] if r in failed else _final(server, dataset, model, train, val, test)
                for r, server in enumerate(servers)]


def batch_groups(runs) -> list[list[int]]:
    """The indices of ``runs`` (``(method, config)`` pairs) in groups that can share a batch
    (the same :data:`BATCH_SHARED` settings), in order of first appearance."""
    groups: dict[tuple, list[int]] = {}
    for r, (_, config) in enumerate(runs):
        groups.setdefault(batch_key(config), []).append(r)
    return list(groups.values())


def batch_key(config: FederatedConfig) -> tuple:
    """The settings of ``config`` that the runs of one batch share (:data:`BATCH_SHARED`)."""
    return tuple(getattr(config, k) for k in BATCH_SHARED)


def _check_batch_runs(runs) -> list[tuple]:
    if isinstance(runs, tuple) and len(runs) == 2 and isinstance(runs[1], FederatedConfig):
        raise TypeError("`runs` must be a list of (method, config) pairs; got one pair: wrap it in a list, "
                        "[(method, config)], or call run_federated(dataset, model, method, config).")
    try:
        runs = [tuple(run) for run in runs]
    except TypeError:
        raise TypeError(f"`runs` must be a list of (method, config) pairs; got {type(runs).__name__}.") from None
    if not runs:
        raise ValueError("`runs` is empty: give at least one (method, config) pair.")
    for r, run in enumerate(runs):
        if len(run) != 2:
            raise TypeError(f"Run {r} must be a (method, FederatedConfig) pair; got "
                            f"({', '.join(type(v).__name__ for v in run)}).")
    return runs


def _check_batch_shares(runs: list[tuple]) -> None:
    seen: dict[int, int] = {}
    for r, (method, _) in enumerate(runs):
        other = seen.setdefault(id(method), r)
        if other != r:
            raise ValueError(f"Runs {other} and {r} share one method object, which holds its run's state (models' "
                             "plans, warm starts): build one method per run.")
    base = runs[0][1]
    for r, (_, config) in enumerate(runs[1:], 1):
        differ = [k for k in BATCH_SHARED if getattr(config, k) != getattr(base, k)]
        if differ:
            raise ValueError(f"Run {r} differs from run 0 in {', '.join(differ)} "
                             f"({', '.join(f'{k}={getattr(config, k)!r} vs {getattr(base, k)!r}' for k in differ)}); "
                             "the runs of one batch train in the same steps and must share "
                             f"{', '.join(BATCH_SHARED)}. Split them with batch_groups(runs).")


def _postfix(logs: list[RoundLog]) -> dict:
    post = {"loss": f"{np.mean([log.train_loss for log in logs]):.3f}"}
    plans = [log.plan for log in logs if log.plan is not None]
    if plans:
        post["gamma_zeros"] = f"{float(np.mean([(p <= 1e-12).double().mean() for p in plans])):.0%}"
    return post


def _settings(server: Server, dataset: FederatedDataset, config: FederatedConfig) -> dict:
    return dict(n=server.n, m=server.m, dim=int(server.params.shape[1]), config=replace(config, device=None),
                method=server.method, model=server.model, clients=list(dataset.client_ids))


def _resume(server: Server, dataset, config, checkpoint: Checkpoint | None) -> int:
    """The round to start from: 0, or the checkpoint's (its state restored into ``server``)."""
    if checkpoint is None:
        return 0
    state = checkpoint.load(server.generator, settings=_settings(server, dataset, config), rounds=config.rounds)
    return 0 if state is None else server.restore(state)


def _evaluate_runs(model: FlatModel, params: list[Tensor], data: Padded, clients: list[Tensor | None],
                   max_values: int = 2 ** 25, accuracy: bool = True) -> list[tuple]:
    """``evaluate``'s losses and accuracies for several runs: the runs asked on the same clients
    are evaluated in one pass over their models together (as many models at a time as keep the
    logits within about ``max_values`` numbers); returns ``(loss, accuracy)`` per run."""
    out: list = [None] * len(params)
    groups: dict[tuple, list[int]] = {}
    for r, c in enumerate(clients):
        groups.setdefault(None if c is None else tuple(c.tolist()), []).append(r)
    for key, members in groups.items():
        idx = None if key is None else clients[members[0]]
        stacked = torch.cat([params[r] for r in members])
        rows = (data.n_clients if idx is None else len(idx)) * data.x.shape[1] * 64  # up to 64 classes
        at_once = max(max(params[r].shape[0] for r in members), max_values // max(1, rows))
        parts = [_evaluate(model, stacked[sl], data, idx, accuracy=accuracy)[:2]
                 for sl in _chunks(len(stacked), at_once)]
        sizes = [params[r].shape[0] for r in members]
        loss = torch.cat([p[0] for p in parts], 1).split(sizes, 1)
        acc = torch.cat([p[1] for p in parts], 1).split(sizes, 1) if accuracy else [None] * len(members)
        for r, l, a in zip(members, loss, acc):
            out[r] = (l, a)
    return out


def _evaluate_own(model: FlatModel, params: Tensor, data: Padded, clients: Tensor | None,
                  accuracy: bool = True) -> tuple[Tensor, Tensor | None]:
    """Each client's loss (and accuracy) on its own model, client i on ``params[i]``: ``[k, 1]``
    for the ``k`` clients asked (all by default), for a method with one model per client
    (:attr:`~most.federated.methods.FederatedMethod.own_model_losses`), so a round costs n
    evaluations, not n x n."""
    idx = torch.arange(data.n_clients, device=params.device) if clients is None else clients
    x, y, w = data.x[idx], data.y[idx], data.w[idx]
    theta = params[idx]
    n, N = y.shape
    per_chunk = max(1, _CHUNK_VALUES // max(1, N * model.values_per_sample(x.shape[2:])))
    logits = torch.cat([model.batched_logits(theta[sl], x[sl]) for sl in _chunks(n, per_chunk)])  # [k, N, C]
    ce = cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(n, N)
    denom = w.sum(1)
    loss = ((ce * w).sum(1) / denom)[:, None]
    if not accuracy:
        return loss, None
    acc = (((logits.argmax(-1) == y).to(w.dtype) * w).sum(1) / denom)[:, None]
    return loss, acc


def _evaluate_servers(model: FlatModel, servers: list[Server], data: Padded, clients: list[Tensor | None],
                      accuracy: bool = True) -> list[tuple]:
    """:func:`_evaluate_runs` for the servers' runs, each client of a run whose method asks for
    its own model's losses evaluated on its own model alone (:func:`_evaluate_own`)."""
    own = [s.method.own_model_losses for s in servers]
    shared = [r for r, o in enumerate(own) if not o]
    out: list = [None] * len(servers)
    if shared:
        scores = _evaluate_runs(model, [servers[r].params for r in shared], data, [clients[r] for r in shared],
                                accuracy=accuracy)
        for r, score in zip(shared, scores):
            out[r] = score
    for r in (r for r, o in enumerate(own) if o):
        out[r] = _evaluate_own(model, servers[r].params, data, clients[r], accuracy=accuracy)
    return out


def _round(servers: list[Server], t: int, model: FlatModel, train: Padded, probe: Padded, val: Padded,
           client_ids, failures: dict[int, Exception] | None, host_w: Tensor) -> list[RoundLog | None]:
    """One round of every run in ``servers`` in this process: every client answers, and the
    pairs of all runs train at once. Each run draws from its own generator, in the order a run
    alone draws (clients, plan, batch orders). With ``failures`` (a dict), a run whose plan
    fails (diverged losses) is recorded there by its index and left out of the round (its log
    is None); without (None), the error is raised. ``host_w`` is ``train.w`` on the CPU.

    On an accelerator the models, the data, local training and evaluation stay on the device;
    the plans, the combination weights and the random draws are small host work (the losses
    come to the host in one copy per round, the pairs' indices go to the device without waiting
    for its queue)."""
    shared: dict[str, float] = {}
    device, share = servers[0].params.device, 1.0 / len(servers)
    tic = time.perf_counter()
    sampled = [server.sample(t) for server in servers]  # on the host, as the plans are
    full = [None if len(c) == probe.n_clients else to_device(c, device) for c in sampled]  # every client: no gather
    # a method that weighs samples sees every model's loss on each training sample
    weighing = [r for r, server in enumerate(servers) if server.method.sample_weights]
    per_sample = {r: sample_losses(model, servers[r].params, train, full[r]) for r in weighing}
    plain = [r for r in range(len(servers)) if r not in per_sample]
    scores = _evaluate_servers(model, [servers[r] for r in plain], probe, [full[r] for r in plain], accuracy=False)
    by_run = dict(zip(plain, (loss for loss, _ in scores)))
    losses = [per_sample[r][0] if r in per_sample else by_run[r] for r in range(len(servers))]
    if sum(loss.numel() for loss in losses) <= HOST_SOLVE_MAX * len(losses):
        losses = to_host(losses)  # every run's n x m losses in one copy: the plans are small host work
    shared["evaluate"] = time.perf_counter() - tic
    states: list[RoundState | None] = []
    for i, (server, c, loss) in enumerate(zip(servers, sampled, losses)):
        try:
            states.append(server.plan(t, c, c, loss, client_ids))
        except ValueError as exc:
            if failures is None:
                raise
            failures[i] = exc
            states.append(None)

    tic = time.perf_counter()
    config = servers[0].config
    weights: dict[int, Tensor] = {}  # each weighing run's pairs' sample weights [P, N]
    for r in weighing:
        state = states[r]
        if state is not None and not state.skipped:
            clients = to_device(state.clients, device)
            q = servers[r].method.weigh_samples(per_sample[r][1], train.w[clients], state.clients)
            weights[r] = q[to_device(state.pair_client, device), to_device(state.pair_model, device)]
    training = [(r, server, state) for r, (server, state) in enumerate(zip(servers, states))
                if state is not None and not state.skipped]
    sample_weight = None
    if weights:
        sample_weight = torch.cat([weights[r] if r in weights else train.w.new_ones(len(state.pair_model),
                                                                                    train.w.shape[1])
                                   for r, _, state in training])
    training = [(server, state) for _, server, state in training]
    if training:
        cidx = [state.pair_clients.cpu() for _, state in training]
        rows = torch.cat(cidx)
        starts = [server.params[to_device(state.pair_model, device)] for server, state in training]
        # the batch orders are drawn on the host (a CPU generator) and moved in one copy per epoch
        orders = [batch_orders(host_w[c], config.local_epochs, generator=server.generator,
                               seeds=server.pair_seeds(state)) for c, (server, state) in zip(cidx, training)]
        counts = [len(c) for c in cidx]
        lr = _per_pair([server.config.lr for server, _ in training], counts)
        mu = _per_pair([server.method.prox_mu for server, _ in training], counts)
        local = _sgd(model, torch.cat(starts), train.x, train.y, train.w,
                     [to_device(torch.cat([o[e] for o in orders]), device) for e in range(config.local_epochs)],
                     batch_size=config.batch_size, lr=lr, prox_mu=mu, rows=to_device(rows, device),
                     max_pairs=_batch_pairs(device, len(training)), sizes=host_w.sum(1)[rows],
                     sample_weight=sample_weight)
        deltas = (torch.cat(starts) - local).split(counts)
    shared["local_training"] = time.perf_counter() - tic
    for (server, state), delta in zip(training, deltas if training else ()):
        server.update(state, delta)

    due = [r for r, server in enumerate(servers)
           if states[r] is not None and server.config.eval_every and server.evaluate_due(t)]
    val_acc: dict[int, float] = {}
    if due:
        scores = _evaluate_servers(model, [servers[r] for r in due], val, [None] * len(due))
        means = torch.stack([acc.max(1).values.nanmean() for _, acc in scores]).tolist()  # one host read
        val_acc = dict(zip(due, means))
    logs = []
    for r, (server, state) in enumerate(zip(servers, states)):
        if state is None:
            logs.append(None)
            continue
        state.seconds.update({k: v * share for k, v in shared.items()})
        logs.append(server.log(state, val_acc.get(r)))
    return logs


#: the numbers (about) that one chunk of evaluation or training makes in its forward pass
#: (:meth:`FlatModel.values_per_sample`): the paper's CNN evaluates five models on about 1400
#: inputs at a time and trains about 350 pairs at a time; a linear model is not split by it
_CHUNK_VALUES = 2 ** 29

#: the pairs a batch of runs trains at a time: thousands of small models' parameters and batches
#: at once leave the cache (measured on Syn's logistic model, 5400 pairs: a round 16 % faster in
#: chunks of 1024 than of 4096, the same numbers); a single run keeps local_train's 4096
_BATCH_PAIRS = 1024


def _batch_pairs(device: torch.device, runs: int) -> int:
    """The pairs trained together: on the CPU a single run's 4096 and a batch's
    :data:`_BATCH_PAIRS` (cache-sized chunks); on an accelerator as many as memory allows
    (:data:`_CHUNK_VALUES`), since each chunk repeats every step's launches (on an H100 a
    seed's batch of the Syn table trained in chunks of 1024 pairs is launch-bound)."""
    if device.type != "cpu":
        return 1 << 20
    return 4096 if runs == 1 else _BATCH_PAIRS


def _per_pair(values: list[float], counts: list[int]) -> float | Tensor:
    """One number when every run has the same, else a ``[P]`` tensor of each pair's run's."""
    if len(set(values)) == 1:
        return values[0]
    return torch.tensor(values, dtype=torch.get_default_dtype()).repeat_interleave(torch.tensor(counts))


def _final(server: Server, dataset: FederatedDataset, model: FlatModel, train: Padded, val: Padded,
           test: Padded) -> FederatedResult:
    """The final evaluation: each client's model chosen on validation (or by training loss), or
    the one its method assigns it; a fine-tuning method's models are first fine-tuned, one per
    client (:func:`_fine_tune`)."""
    params = server.params
    if server.method.sample_weights:
        return _final_mixture(server, model, train, val, test)
    if server.method.fine_tune_epochs:
        params = _fine_tune(server, model, train, val)
    val_acc, selection = _selection(model, params, train, val)
    test_loss, test_acc, probs = evaluate(model, params, test, return_probs=True)
    choice, by_loss = server.choose(val_acc, selection)
    if by_loss.any():
        ids = [dataset.client_ids[i] for i in by_loss.nonzero().squeeze(1).tolist()]
        warnings.warn(f"{dataset.name}: {len(ids)} of {server.n} clients have no validation samples; their model was "
                      f"chosen by the lowest training loss instead: {', '.join(ids[:10])}"
                      + (f" and {len(ids) - 10} more." if len(ids) > 10 else "."), UserWarning, stacklevel=3)
    return FederatedResult(params=params.cpu(), val_accuracy=val_acc.cpu(), test_accuracy=test_acc.cpu(),
                           test_loss=test_loss.cpu(), choice=choice.cpu(), history=server.history,
                           test_probs=probs.cpu(), test_weight=test.w.cpu(), selection_loss=selection)


def _final_mixture(server: Server, model: FlatModel, train: Padded, val: Padded, test: Padded) -> FederatedResult:
    """The final evaluation of a method whose clients mix the models (FedEM): one last E-step
    on every client's training data fits the mixture weights to the final models, then each
    client predicts with ``sum_k pi_ik p_k(y | x)``. The accuracies and losses are ``[n, 1]``
    (the client's mixture; ``choice`` is 0 for every client); ``test_probs`` are the models'
    own distributions."""
    params, n = server.params, server.n
    clients = torch.arange(n)
    _, per_sample = sample_losses(model, params, train, None)
    server.method.weigh_samples(per_sample, train.w, clients)
    pi = server.method.mixture(n).to(params.device)
    train_loss, _, _ = mixture_scores(model, params, pi, train)
    val_loss, val_acc, _ = mixture_scores(model, params, pi, val)
    test_loss, test_acc, probs = mixture_scores(model, params, pi, test)
    selection = pooled_loss(train_loss.cpu(), val_loss.cpu(), train.counts.cpu(), val.counts.cpu())
    return FederatedResult(params=params.cpu(), val_accuracy=val_acc.cpu(), test_accuracy=test_acc.cpu(),
                           test_loss=test_loss.cpu(), choice=torch.zeros(n, dtype=torch.long), history=server.history,
                           test_probs=probs.cpu(), test_weight=test.w.cpu(), selection_loss=selection,
                           mixture=pi.cpu())


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


def _selection(model: FlatModel, params: Tensor, train: Padded, val: Padded) -> tuple[Tensor, Tensor]:
    """What each client's model is picked by, on the host: ``val_accuracy [n, m]`` and the
    selection loss ``[n, m]`` (training and validation data pooled, :func:`pooled_loss`)."""
    val_loss, val_acc, _ = evaluate(model, params, val)
    train_loss, _, _ = evaluate(model, params, train)
    return val_acc.cpu(), pooled_loss(train_loss.cpu(), val_loss.cpu(), train.counts.cpu(), val.counts.cpu())


def _fine_tune(server: Server, model: FlatModel, train: Padded, val: Padded) -> Tensor:
    """``[n, d]``: each client's best model on validation (by training loss where it has no
    validation sample), trained for the method's ``fine_tune_epochs`` local epochs on the
    client's training data with the protocol's batch size and learning rate. The batch orders
    come from the run's generator after the last round, so a resumed run fine-tunes alike."""
    params, config = server.params, server.config
    choice, _ = choose_models(*_selection(model, params, train, val))
    host_w = train.w.cpu()
    keys = batch_orders(host_w, server.method.fine_tune_epochs, generator=server.generator)
    device = params.device
    return _sgd(model, params[to_device(choice, device)], train.x, train.y, train.w, [to_device(k, device) for k in keys],
                batch_size=config.batch_size, lr=config.lr, prox_mu=0.0, max_pairs=_batch_pairs(device, 1),
                sizes=host_w.sum(1))
