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

import time
import warnings
from dataclasses import replace
from typing import Callable, cast

import numpy as np
import torch
from torch import Tensor
from torch.nn.functional import cross_entropy

from .._host import HOST_SOLVE_MAX, to_device, to_host
from .._threads import threads_for
from .._validation import check_callback
from ..checkpoint import Checkpoint, check_checkpoints, check_encodable, holding
from .data import FederatedDataset
from .evaluation import pooled_loss
from .models import FlatModel
from .checks import check_inputs
from .clients import (CHUNK_VALUES, Padded, batch_orders, chunk_slices, evaluate, evaluate_unchecked, mixture_scores,
                      pad_split, plan_losses, sample_losses, selection_scores, train_pairs)
from .config import FederatedConfig, FederatedResult
from .server import RoundLog, RoundState, Server, choose_models, pair_seed
from .methods.grouping import class_gradients

__all__ = ["run_federated", "run_batch", "batch_groups", "batch_key", "BATCH_SHARED"]


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
    check_callback(callback, signature="callback(log, params)")
    on_round = None if callback is None else (lambda r, log, params: callback(log, params))
    result = run_batch(dataset, model, [(method, config)], progress=progress, callback=on_round,
                       description=description or type(method).__name__, checkpoints=[checkpoint])[0]
    return cast(FederatedResult, result)  # errors="raise": a failed run raises instead of returning its error


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
    loss probe, device); :func:`batch_groups` splits a list of runs into such groups. Runs may
    share one method object: a method is configuration, and each run's state is its server's.

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
    check_callback(callback, signature="callback(r, log, params)")
    checkpoints = [None] * len(runs) if checkpoints is None else list(checkpoints)
    if len(checkpoints) != len(runs):
        raise ValueError(f"`checkpoints` must give one Checkpoint (or None) per run: {len(checkpoints)} for "
                         f"{len(runs)} runs.")
    check_checkpoints(checkpoints)
    from tqdm.auto import tqdm

    for method, config in runs:
        check_inputs(dataset, model, method, config)
    _check_batch_shares(runs)
    config = runs[0][1]
    device = torch.device(config.device or "cpu")
    # one torch thread when a local step is small work, torch's count otherwise (most.set_threads)
    pairs = min(sum(dataset.n_clients * method.n_models for method, _ in runs), _batch_pairs(device, len(runs)))
    work = pairs * config.batch_size * max(model.dim, model.values_per_sample(dataset.input_shape))
    with holding(checkpoints), threads_for(work):
        train, val, test = (pad_split(dataset, s).to(device) for s in ("train", "val", "test"))
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
                ck = checkpoints[r]
                if ck is not None and ck.due(t, config.rounds):
                    ck.save(servers[r].state(t + 1), servers[r].generator,
                            settings=_settings(servers[r], dataset, runs[r][1]))
        out: list[FederatedResult | Exception] = []
        for r, server in enumerate(servers):
            if r in failed:
                out.append(failed[r])
                continue
            try:
                out.append(_final_checked(server, dataset, model, train, val, test))
            except ValueError as exc:  # the last round diverged
                if errors == "raise":
                    raise
                out.append(exc)
        return out


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
    # the data by digest and the architecture by its layers: a checkpoint of other samples or
    # other layers of the same sizes is refused, not continued on what it was not trained on
    return dict(n=server.n, m=server.m, dim=int(server.params.shape[1]), config=replace(config, device=None),
                method=server.method, model=server.model, clients=list(dataset.client_ids), data=dataset.digest(),
                architecture={name or "(module)": f"{type(module).__name__}({module.extra_repr()})"
                              for name, module in server.model._template.named_modules()})


def _resume(server: Server, dataset, config, checkpoint: Checkpoint | None) -> int:
    """The round to start from: 0, or the checkpoint's (its state restored into ``server``)."""
    if checkpoint is None:
        return 0
    # the method's state no checkpoint can hold is refused now, not at the first save
    check_encodable({"method_state": server.method_state}, server.generator)
    state = checkpoint.load(server.generator, settings=_settings(server, dataset, config), rounds=config.rounds)
    return 0 if state is None else server.restore(state)


def _evaluate_runs(model: FlatModel, params: list[Tensor], data: Padded, clients: list[Tensor | None],
                   max_values: int = 2 ** 25, accuracy: bool = True) -> list[tuple]:
    """``evaluate``'s losses and accuracies for several runs: the runs asked on the same clients
    are evaluated in one pass over their models together (as many models at a time as keep the
    logits within about ``max_values`` numbers); returns ``(loss, accuracy)`` per run."""
    out: list = [None] * len(params)
    groups: dict[tuple | None, list[int]] = {}
    for r, c in enumerate(clients):
        groups.setdefault(None if c is None else tuple(c.tolist()), []).append(r)
    for key, members in groups.items():
        idx = None if key is None else clients[members[0]]
        stacked = torch.cat([params[r] for r in members])
        rows = (data.n_clients if idx is None else len(idx)) * data.x.shape[1] * 64  # up to 64 classes
        at_once = max(max(params[r].shape[0] for r in members), max_values // max(1, rows))
        parts = [evaluate_unchecked(model, stacked[sl], data, idx, accuracy=accuracy)[:2]
                 for sl in chunk_slices(len(stacked), at_once)]
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
    per_chunk = max(1, CHUNK_VALUES // max(1, N * model.values_per_sample(x.shape[2:])))
    logits = torch.cat([model.batched_logits(theta[sl], x[sl]) for sl in chunk_slices(n, per_chunk)])  # [k, N, C]
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
    # a method whose plan reads another loss than the mean cross-entropy scores the models itself
    plan_loss = {r: server.method.plan_loss() for r, server in enumerate(servers) if r not in per_sample}
    scored = {r: plan_losses(model, servers[r].params, probe, full[r], loss)
              for r, loss in plan_loss.items() if not loss.plain}
    plain = [r for r in range(len(servers)) if r not in per_sample and r not in scored]
    scores = _evaluate_servers(model, [servers[r] for r in plain], probe, [full[r] for r in plain], accuracy=False)
    by_run = dict(zip(plain, (loss for loss, _ in scores)))
    by_run.update(scored)
    losses = [per_sample[r][0] if r in per_sample else by_run[r] for r in range(len(servers))]
    if sum(loss.numel() for loss in losses) <= HOST_SOLVE_MAX * len(losses):
        losses = to_host(losses)  # every run's n x m losses in one copy: the plans are small host work
    for server, c in zip(servers, sampled):  # a method's class signal (MosT's warm-up, its last round)
        grouping = server.class_signal(t)
        if grouping is not None:
            at = to_device(c, device)
            grads, counts = class_gradients(model, server.params[0], train.x[at], train.y[at], train.w[at],
                                            sketch=grouping.sketch)
            server.observe_class_signal(c, grads, counts)
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
            q = servers[r].weigh_samples(per_sample[r][1], train.w[clients], state.clients)
            weights[r] = q[to_device(state.pair_client, device), to_device(state.pair_model, device)]
    planned = [(r, server, state) for r, (server, state) in enumerate(zip(servers, states))
               if state is not None and not state.skipped]
    sample_weight = None
    if weights:  # a planned (not skipped) round has its pairs
        sample_weight = torch.cat([weights[r] if r in weights
                                   else train.w.new_ones(len(cast(Tensor, state.pair_model)), train.w.shape[1])
                                   for r, _, state in planned])
    training = [(server, state) for _, server, state in planned]
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
        local = train_pairs(model, torch.cat(starts), train.x, train.y, train.w,
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
    logs: list[RoundLog | None] = []
    for r, (server, state) in enumerate(zip(servers, states)):
        if state is None:
            logs.append(None)
            continue
        state.seconds.update({k: v * share for k, v in shared.items()})
        logs.append(server.log(state, val_acc.get(r)))
    return logs


#: the pairs a batch of runs trains at a time: thousands of small models' parameters and batches
#: at once leave the cache, so a batch trains in cache-sized chunks (the same numbers in any
#: chunking; the timing: docs/development.md); a single run keeps local_train's 4096
_BATCH_PAIRS = 1024


def _batch_pairs(device: torch.device, runs: int) -> int:
    """The pairs trained together: on the CPU a single run's 4096 and a batch's
    :data:`_BATCH_PAIRS` (cache-sized chunks); on an accelerator as many as memory allows
    (:data:`~most.federated.clients.CHUNK_VALUES`), since each chunk repeats every step's launches."""
    if device.type != "cpu":
        return 1 << 20
    return 4096 if runs == 1 else _BATCH_PAIRS


def _per_pair(values: list[float], counts: list[int]) -> float | Tensor:
    """One number when every run has the same, else a ``[P]`` tensor of each pair's run's."""
    if len(set(values)) == 1:
        return values[0]
    return torch.tensor(values, dtype=torch.get_default_dtype()).repeat_interleave(torch.tensor(counts))


def _final_checked(server: Server, dataset: FederatedDataset, model: FlatModel, train: Padded, val: Padded,
                   test: Padded) -> FederatedResult:
    """:func:`_final`; where it fails because the last round's models have a loss that is NaN or
    inf (the rounds before check theirs when they plan), the error says that training diverged."""
    try:
        return _final(server, dataset, model, train, val, test)
    except ValueError:
        loss, _, _ = evaluate_unchecked(model, server.params, train, None, accuracy=False)
        bad = ~torch.isfinite(loss) & (train.counts > 0).to(loss.device)[:, None]
        if not bad.any():
            raise
        i, j = (int(v) for v in bad.nonzero()[0])
        raise ValueError(f"After the last round ({server.config.rounds}), the training loss of client "
                         f"{dataset.client_ids[i]} on model {j} is {float(loss[i, j])}: training diverged. Try a "
                         "smaller local `lr`, or a smaller server step.") from None


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
    val_acc, selection = selection_scores(model, params, train, val)
    test_loss, test_acc, probs = evaluate(model, params, test, return_probs=True)
    choice, by_loss = server.choose(val_acc, selection)
    assigned = server.assigned() is not None
    if by_loss.any():
        ids = [dataset.client_ids[i] for i in by_loss.nonzero().squeeze(1).tolist()]
        warnings.warn(f"{dataset.name}: {len(ids)} of {server.n} clients have no validation samples; their model was "
                      f"chosen by the lowest training loss instead: {', '.join(ids[:10])}"
                      + (f" and {len(ids) - 10} more." if len(ids) > 10 else "."), UserWarning, stacklevel=3)
    return FederatedResult(params=params.cpu(), val_accuracy=val_acc.cpu(), test_accuracy=test_acc.cpu(),
                           test_loss=test_loss.cpu(), choice=choice.cpu(), history=server.history,
                           test_probs=probs.cpu(), test_weight=test.w.cpu(), selection_loss=selection,
                           assigned=assigned)


def _final_mixture(server: Server, model: FlatModel, train: Padded, val: Padded, test: Padded) -> FederatedResult:
    """The final evaluation of a method whose clients mix the models (FedEM): one last E-step
    on every client's training data fits the mixture weights to the final models, then each
    client predicts with ``sum_k pi_ik p_k(y | x)``. The accuracies and losses are ``[n, 1]``
    (the client's mixture; ``choice`` is 0 for every client); ``test_probs`` are the models'
    own distributions."""
    params, n = server.params, server.n
    clients = torch.arange(n)
    _, per_sample = sample_losses(model, params, train, None)
    server.weigh_samples(per_sample, train.w, clients)
    pi = cast(Tensor, server.mixture()).to(params.device)
    train_loss, _, _ = mixture_scores(model, params, pi, train)
    val_loss, val_acc, _ = mixture_scores(model, params, pi, val)
    test_loss, test_acc, probs = mixture_scores(model, params, pi, test)
    selection = pooled_loss(train_loss.cpu(), val_loss.cpu(), train.counts.cpu(), val.counts.cpu())
    return FederatedResult(params=params.cpu(), val_accuracy=val_acc.cpu(), test_accuracy=test_acc.cpu(),
                           test_loss=test_loss.cpu(), choice=torch.zeros(n, dtype=torch.long), history=server.history,
                           test_probs=probs.cpu(), test_weight=test.w.cpu(), selection_loss=selection,
                           mixture=pi.cpu(), assigned=True)


def _fine_tune(server: Server, model: FlatModel, train: Padded, val: Padded) -> Tensor:
    """``[n, d]``: each client's best model on validation (by training loss where it has no
    validation sample), trained for the method's ``fine_tune_epochs`` local epochs on the
    client's training data with the protocol's batch size and learning rate. The batch orders
    come from the run's generator after the last round, so a resumed run fine-tunes alike, or,
    under ``pair_seeds``, from :func:`pair_seed` ``(seed, rounds, client, j)``, which a Flower
    client draws alone."""
    params, config = server.params, server.config
    choice, _ = choose_models(*selection_scores(model, params, train, val))
    host_w = train.w.cpu()
    seeds = ([pair_seed(config.seed, config.rounds, i, int(j)) for i, j in enumerate(choice.tolist())]
             if config.pair_seeds else None)
    keys = batch_orders(host_w, server.method.fine_tune_epochs, generator=server.generator, seeds=seeds)
    device = params.device
    return train_pairs(model, params[to_device(choice, device)], train.x, train.y, train.w, [to_device(k, device) for k in keys],
                batch_size=config.batch_size, lr=config.lr, prox_mu=0.0, max_pairs=_batch_pairs(device, 1),
                sizes=host_w.sum(1))
