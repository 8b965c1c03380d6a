r"""The server side of MosT on Flower: a ``flwr.serverapp.strategy.Strategy`` for m models.

:class:`MostStrategy` runs any method of :mod:`most.federated.methods` (MosT, FedAvg, FedProx,
MGDA, IFCA, ...) over a Flower ``Grid`` with the round of the in-process runtime
(:func:`most.federated.run_federated`): both are built on one :class:`most.federated.server.Server`,
whose typed :class:`~most.federated.server.RoundState` this strategy carries between Flower's hooks:

1. ``configure_train``: ``server.sample``, then ``query`` every participating client for its
   losses on the m models (``L [n, m]``), then ``server.plan`` (the losses checked, Gamma, the
   per-pair weights and the pairs); each client receives **only the models it is assigned**;
2. ``aggregate_train``: the pairs' pseudo-gradients go to ``server.update`` (the method's combiner,
   then its update rule);
3. ``aggregate_evaluate``: ``server.log`` records the round (its validation accuracy: the mean
   over the clients that answered the evaluation of each one's best of the m models, also in the
   last round, where a mixing or fine-tuning client scores a predictor of its own); the last one
   chooses each client's model as the in-process runtime does
   (:meth:`most.federated.server.Server.choose`).

**Faults.** Nodes that connect after the start (or come back under a new node id) are
asked which client they hold and join from the next round. A client that errors or does
not answer within ``timeout`` is left out of the round: without its loss row, Gamma is solved over the clients that answered, whose
marginals the method renormalises (Uniform alpha is ``1/n'`` over the ``n'`` that
answered); a missing training update drops its pairs from the aggregation; a missing
evaluation leaves the client out of that round's logged validation accuracy (the mean over the
clients that answered). The run goes on and :attr:`FlowerResult.missing` says which clients were
missing in which round, whichever step they missed. A round in which fewer clients than MosT's m
answered leaves the models unchanged.

**Stopping.** :meth:`MostStrategy.stop` (called by :func:`most.flower.run_simulation` when the
caller's thread is interrupted, e.g. by Ctrl-C) ends a run from another thread: the exchange in
progress stops waiting and :meth:`MostStrategy.run` raises :class:`~most.flower.nodes.RunStopped`.

Use it through :func:`most.flower.run_simulation` (Flower's simulation engine) or a ServerApp
(:mod:`most.flower.app`) in a real deployment.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from flwr.app import MessageType, MetricRecord
from flwr.serverapp.strategy import Strategy
from torch import Tensor

from .._validation import check_non_negative, check_positive
from ..federated.methods import FederatedMethod
from ..federated.models import FlatModel
from ..federated.config import FederatedConfig, FederatedResult, RoundLog
from ..federated.server import RoundState, Server
from . import protocol as P
from .nodes import ClientNodes, RunStopped, StoppableGrid, message

__all__ = ["MostStrategy", "FlowerResult", "RunStopped"]

log = logging.getLogger("most.flower")


@dataclass(frozen=True)
class FlowerResult(FederatedResult):
    """:class:`~most.federated.FederatedResult` of a Flower run.

    The clients keep their predictions: ``test_probs`` is empty and
    :meth:`prediction_diversity` (the field ``prediction_kl``) is the pooled mean the clients
    reported as sums: the m models' diversity on each client's test inputs, as in process. It is
    NaN for a personal method (:class:`~most.federated.methods.LocalOnly`,
    :class:`~most.federated.methods.FineTuning`): in process it compares the n clients' own
    models on every client's test inputs, and on Flower no client holds another's model, so it
    is not measured (a client alone would report 0, a diversity it never had the means to see).
    ``missing`` maps a round to the ids of the clients that did not answer in it, whether they
    missed its query, its training or its evaluation (``"final"`` for the last evaluation); a
    round's logged ``val_accuracy`` is the mean over the clients that answered its evaluation.
    ``accuracy`` rows of clients missing at the end are NaN. ``selection_loss`` (for :attr:`loss_choice`) is what the clients reported at the
    final evaluation: NaN rows for the missing ones, who then get model 0, as with ``choice``.
    A client that answered but has no validation sample is chosen by its lowest training loss,
    as in :func:`~most.federated.run_federated`.

    A fine-tuning method's clients (:class:`~most.federated.methods.FineTuning`) keep their
    fine-tuned models: ``params`` are the m models they started from, the accuracies, losses and
    ``selection_loss`` are ``[n, 1]`` (each client's fine-tuned model), ``choice`` is 0 for every
    client, and ``fine_tuned_from [n]`` says which of the m models each client fine-tuned (-1: it
    did not answer). ``None`` for other methods.

    ``assigned`` is as :func:`~most.federated.run_federated`'s: true where the method gives each
    client its predictor (a cluster, a group, its own model, its mixture or fine-tuned model), so
    :attr:`loss_choice` is ``choice``.
    """

    missing: dict = field(default_factory=dict)
    prediction_kl: float = float("nan")
    fine_tuned_from: Tensor | None = None

    def prediction_diversity(self) -> float:
        return self.prediction_kl


class MostStrategy(Strategy):
    """A Flower strategy that trains ``method.n_models`` models with a most method.

    Args:
        method: a :mod:`most.federated.methods` object (``MosT(n_models=5)``, ``FedAvg(5)``, ...).
        model: the architecture (its ``init`` gives the initial models, from ``config.seed``).
        config: the protocol (rounds, local epochs, batch size, lr, participation,
            ``loss_samples``, ``eval_every``, seed), as for the in-process runtime. Batch orders
            are always per pair (``pair_seeds``).
        n_clients: n, the number of clients; each ClientApp reports its index ``0 .. n - 1``.
        client_ids: names for reports (default ``"0" .. "n-1"``).
        timeout: seconds to wait for the replies of one step (query, train or evaluate), a
            positive number; clients not answered by then are missing for that step. ``None``
            waits for all.
        wait_for_clients: seconds to wait at the start for all n clients to connect, a
            non-negative number; the run starts with those that did (at least m for MosT), and
            fails if none did.
        progress: a tqdm bar over the rounds.

    :meth:`stop`, from another thread, ends a run in progress (:class:`RunStopped`).
    """

    def __init__(self, method, model: FlatModel, config: FederatedConfig, *, n_clients: int,
                 client_ids: Sequence[str] | None = None, timeout: float | None = 600.0,
                 wait_for_clients: float = 120.0, progress: bool = False):
        if not isinstance(method, FederatedMethod):
            raise ValueError(f"`method` must be a most.federated.methods object; got {type(method).__name__}.")
        if not isinstance(model, FlatModel):
            raise ValueError(f"`model` must be a most.federated.FlatModel; got {type(model).__name__}.")
        if not isinstance(config, FederatedConfig):
            raise ValueError(f"`config` must be a most.federated.FederatedConfig; got {type(config).__name__}.")
        if not isinstance(n_clients, int) or n_clients < 1:
            raise ValueError(f"`n_clients` must be a positive int; got {n_clients!r}.")
        if client_ids is not None and len(client_ids) != n_clients:
            raise ValueError(f"{len(client_ids)} client ids for {n_clients} clients.")
        # checked here: a string or a negative number would otherwise fail, or wait for ever, mid-run
        if timeout is not None:
            try:
                timeout = check_positive(timeout, name="timeout", allow_inf=True)
            except ValueError as exc:
                raise ValueError(f"{exc} It is seconds, or None to wait for every reply.") from None
        wait_for_clients = check_non_negative(wait_for_clients, name="wait_for_clients", allow_inf=True)
        method.check(n_clients)
        self._loss_config = P.loss_config(method.plan_loss())  # refuses a loss the clients cannot compute
        self.method, self.model, self.config, self.n = method, model, config, n_clients
        self.m = method.models_for(n_clients)
        self.client_ids = list(client_ids) if client_ids is not None else [str(i) for i in range(n_clients)]
        self.timeout, self.wait_for_clients, self.progress = timeout, wait_for_clients, progress
        # the clients report their sample counts when they describe themselves
        self.server = Server(method, model, config, torch.zeros(n_clients, dtype=torch.long))
        self.server.params = self.server.params.float()
        self.missing: dict = {}
        self.messages: list = []  # (round, kind, client, model indices sent) for audits
        self._stop = threading.Event()  # set by stop(): the run ends at its next exchange
        self._idle = threading.Event()  # clear while run() runs
        self._idle.set()
        self.nodes = ClientNodes(n_clients, model.dim, timeout, wait_for_clients, fixed=model.fixed_digest(),
                                 stop=self._stop)
        self._round: RoundState | None = None
        self._sent: dict[int, list[int]] = {}  # client -> models sent to train this round
        self._evaluated: list[int] = []  # the clients sent this round's evaluation
        self._tic = 0.0
        self._final: dict | None = None
        self._grid = None

    @property
    def params(self) -> Tensor:
        """The m models, ``[m, d]``."""
        return self.server.params

    @params.setter
    def params(self, value: Tensor) -> None:
        self.server.params = value

    @property
    def history(self) -> list[RoundLog]:
        return self.server.history

    # ------------------------------------------------------------------ helpers
    def _record(self, round: int, kind: str, client: int, models: list[int]):
        self.messages.append((round, kind, client, tuple(models)))

    def _models_record(self, params: Tensor):
        return P.models_record(params)

    def _asked_models(self, client: int) -> list[int]:
        """The models a client evaluates: all m, or, for a method with one model per client
        (``own_model_losses``), its own alone (no client sees another client's model)."""
        return [client] if self.method.own_model_losses else list(range(self.m))

    def _record_mixtures(self, replies: dict) -> None:
        """Stores the mixture weights that mixing clients sent back (their E-step's)."""
        got = {c: list(r[P.METRICS][P.MIXTURE]) for c, r in replies.items() if P.MIXTURE in r[P.METRICS]}
        if got:
            clients = sorted(got)
            self.server.update_mixture(torch.tensor(clients), torch.tensor([got[c] for c in clients]))

    def _update_nodes(self, grid) -> None:
        """Maps new nodes to their clients (:meth:`ClientNodes.update`) and records their sample
        counts; at the start, reports the clients that did not connect."""
        first = not self.nodes.node_of
        for client, count in self.nodes.update(grid).items():
            self.server.counts[client] = count
        if first and len(self.nodes.node_of) < self.n:
            absent = [self.client_ids[c] for c in range(self.n) if c not in self.nodes.node_of]
            log.warning("Starting with %d of %d clients; missing: %s", len(self.nodes.node_of), self.n, absent)
            self.missing["start"] = absent

    # ------------------------------------------------------------------ the Strategy API
    def summary(self) -> None:
        log.info("MostStrategy: %s, m=%d models, n=%d clients, %s", type(self.method).__name__, self.m, self.n,
                 self.config)

    def configure_train(self, server_round, arrays, config, grid):
        t = server_round - 1
        self._update_nodes(grid)
        tic = time.perf_counter()
        sampled = self.server.sample(t)
        asked = [int(c) for c in sampled if int(c) in self.nodes.node_of]
        probe = {P.LOSS_SAMPLES: self.config.loss_samples or 0, P.ROUND: t, **self._loss_config}
        grouping = self.server.class_signal(t)
        if grouping is not None:  # the clients also send their gradients per class at model 0
            probe[P.CLASS_SKETCH] = grouping.sketch
        msgs = []
        for c in asked:
            models = self._asked_models(c)
            msgs.append(message(P.LOSSES, self.nodes.node_of[c],
                                      {P.CONFIG: probe, P.MODELS: self._models_record(self.params[models])}))
            self._record(t, "query", c, models)
        good = self.nodes.send(grid, msgs)
        clients = torch.tensor(sorted(good), dtype=torch.long)
        losses = (torch.tensor([list(good[int(c)][P.METRICS][P.LOSS]) for c in clients], dtype=torch.float32)
                  if len(clients) else None)
        if grouping is not None and len(clients):
            signals = [P.read_class_signal(good[int(c)][P.UPDATES]) for c in clients]
            self.server.observe_class_signal(clients, torch.stack([g for g, _ in signals]),
                                             torch.stack([n for _, n in signals]))
        evaluate_s = time.perf_counter() - tic
        state = self._round = self.server.plan(t, sampled, clients, losses, self.client_ids)
        state.seconds["evaluate"] = evaluate_s
        if state.skipped:
            log.warning("Round %d: only %d clients answered; the models stay as they are.", t, len(clients))
            return []
        self._tic = time.perf_counter()
        self._sent = {}
        msgs = []
        # a mixing method's weights, read once: each client's E-step needs its row
        mixture = self.server.mixture() if self.method.sample_weights else None
        for c in clients.tolist():
            models = state.models_of(c)
            if not models:
                continue
            record = P.train_models_record(self.params, models)
            cfg = {P.ROUND: t, P.SEED: self.config.seed, P.TRAIN_MODELS: models, P.EPOCHS: self.config.local_epochs,
                   P.BATCH_SIZE: self.config.batch_size, P.LR: self.config.lr, P.PROX_MU: float(self.method.prox_mu)}
            if mixture is not None:
                cfg[P.MIXTURE] = mixture[c].tolist()
            msgs.append(message(MessageType.TRAIN, self.nodes.node_of[c], {P.CONFIG: cfg, P.MODELS: record}))
            self._sent[c] = models
            self._record(t, "train", c, models)
        return msgs

    def aggregate_train(self, server_round, replies):
        state = self._round
        if state.skipped:
            state.seconds.update(local_training=0.0, aggregate=0.0)
            return None, None
        good = {}  # client -> its reply's content
        for reply in replies:
            if reply.has_error():
                log.warning("Training on node %s failed: %s", reply.metadata.src_node_id, reply.error.reason)
                continue
            good[int(reply.content[P.METRICS][P.CLIENT])] = reply.content
        failed = sorted(set(self._sent) - set(good))
        state.missing = sorted(set(state.missing) | set(failed))
        state.seconds["local_training"] = time.perf_counter() - self._tic
        pair_clients = state.pair_clients.tolist()
        keep = torch.tensor([c in good for c in pair_clients], dtype=torch.bool)
        deltas = [P.read_update(good[c][P.UPDATES], j)
                  for c, j, k in zip(pair_clients, state.pair_model.tolist(), keep.tolist()) if k]
        self.server.update(state, torch.stack(deltas) if deltas else torch.zeros(0, self.model.dim), keep)
        self._record_mixtures(good)
        metrics = MetricRecord({"train-loss": float(state.losses.min(1).values.mean()), "clients": len(state.clients),
                                "missing": len(state.missing)})
        return P.models_record(self.params), metrics

    def configure_evaluate(self, server_round, arrays, config, grid):
        t = server_round - 1
        self._evaluated = []
        if not self.server.evaluate_due(t):
            return []
        msgs = []
        final = t + 1 == self.config.rounds
        # a mixing client scores its mixture at the end, with its weights fitted to the final models
        mixture = self.server.mixture() if final and self.method.sample_weights else None
        # a fine-tuning client fine-tunes its best model at the end and scores it (the model stays with it)
        fine_tune = ({P.FINE_TUNE_EPOCHS: self.method.fine_tune_epochs, P.SEED: self.config.seed,
                      P.BATCH_SIZE: self.config.batch_size, P.LR: self.config.lr}
                     if final and self.method.fine_tune_epochs else {})
        for c, node in sorted(self.nodes.node_of.items()):
            models = self._asked_models(c)
            cfg = {P.ROUND: t, P.FINAL: final, **fine_tune}
            if mixture is not None:
                cfg[P.MIXTURE] = mixture[c].tolist()
            msgs.append(message(MessageType.EVALUATE, node, {P.CONFIG: cfg,
                                                                  P.MODELS: self._models_record(self.params[models])}))
            self._record(t, "evaluate", c, models)
            self._evaluated.append(c)
        return msgs

    def aggregate_evaluate(self, server_round, replies):
        state = self._round
        t = state.round
        val_acc = None
        out = None
        missing = set(state.missing)
        if self.server.evaluate_due(t):
            nan = float("nan")
            final = t + 1 == self.config.rounds
            mixes = self.method.sample_weights and final
            # one column at the end: each client's mixture, or its fine-tuned model
            one_column = final and (mixes or bool(self.method.fine_tune_epochs))
            width = 1 if one_column else self.m
            val = torch.full((self.n, width), nan)
            test = torch.full((self.n, width), nan)
            test_loss = torch.full((self.n, width), nan)
            selection = torch.full((self.n, width), nan)
            # the round's log: each client's best of the m models on validation, as every round's (with one
            # column, the clients report the m models' scores apart from their own predictor's)
            models_val = torch.full((self.n, self.m), nan) if one_column else val
            div_sum, div_count = 0.0, 0
            answered = set()
            tuned_from = torch.full((self.n,), -1, dtype=torch.long)
            for reply in replies:
                if reply.has_error():
                    log.warning("Evaluation on node %s failed: %s", reply.metadata.src_node_id, reply.error.reason)
                    continue
                r = reply.content[P.METRICS]
                c = int(r[P.CLIENT])
                answered.add(c)
                at = [0] if one_column else self._asked_models(c)  # the columns of the models the client was sent
                val[c, at] = torch.tensor(list(r[P.VAL_ACCURACY]))
                test[c, at] = torch.tensor(list(r[P.TEST_ACCURACY]))
                test_loss[c, at] = torch.tensor(list(r[P.TEST_LOSS]))
                if P.SELECTION_LOSS in r:
                    selection[c, at] = torch.tensor(list(r[P.SELECTION_LOSS]))
                if one_column and P.MODELS_VAL_ACCURACY in r:
                    models_val[c, self._asked_models(c)] = torch.tensor(list(r[P.MODELS_VAL_ACCURACY]))
                div_sum += float(r[P.DIVERSITY_SUM])
                div_count += int(r[P.TEST_COUNT])
                if P.FINE_TUNED_FROM in r:
                    tuned_from[c] = int(r[P.FINE_TUNED_FROM])
            if mixes:
                self._record_mixtures({int(reply.content[P.METRICS][P.CLIENT]): reply.content for reply in replies
                                       if not reply.has_error()})
            self._final = {"val": val, "test": test, "test_loss": test_loss, "selection": selection,
                           "mixture": self.server.mixture() if mixes else None, "one_column": one_column,
                           "fine_tuned_from": tuned_from if final and self.method.fine_tune_epochs else None,
                           "missing": sorted(set(range(self.n)) - answered),
                           # a personal method's predictors are the n clients' own models, which no
                           # client sees together: their diversity is not measured (not a 0 from one model)
                           "prediction_kl": nan if self.method.personal or not div_count else div_sum / div_count}
            # the round's accuracy is the mean over the clients that answered (those with a score);
            # the others are missing for this round. The last evaluation's are missing["final"].
            unanswered = sorted(set(self._evaluated) - answered)
            if unanswered and not final:
                missing.update(unanswered)
                log.warning("Round %d: %d clients did not answer the evaluation, %s; the round's validation "
                            "accuracy is the mean over the %d that did.", t, len(unanswered),
                            [self.client_ids[c] for c in unanswered], len(answered))
            val_acc = float(models_val.nan_to_num(-1.0).max(1).values[~models_val.isnan().all(1)].mean())
            out = MetricRecord({"val-accuracy": val_acc, "clients": len(answered)})
        self.server.log(state, val_acc)
        if missing:
            self.missing[t] = [self.client_ids[c] for c in sorted(missing)]
            log.warning("Round %d: missing clients %s", t, self.missing[t])
        if self._callback is not None:
            self._callback(self.history[-1], self.params)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix({"loss": f"{self.history[-1].train_loss:.3f}", "missing": len(missing)},
                                  refresh=False)
        return out

    # ------------------------------------------------------------------ running
    _bar = None
    _callback = None

    def run(self, grid, *, callback: Callable[[RoundLog, Tensor], None] | None = None,
            description: str | None = None) -> FlowerResult:
        """Runs ``config.rounds`` rounds over ``grid`` (in a ServerApp's ``main``) and returns
        the result; ``callback(log, params)`` after every round, as in ``run_federated``.
        Raises :class:`RunStopped` when :meth:`stop` ends the run."""
        from tqdm.auto import tqdm

        self._callback = callback
        self._bar = tqdm(total=self.config.rounds, desc=description or f"{type(self.method).__name__} on Flower",
                         disable=not self.progress, leave=False)
        self._idle.clear()
        try:
            self.start(StoppableGrid(grid, self._stop), self._models_record(self.params),
                       num_rounds=self.config.rounds, timeout=self.timeout if self.timeout is not None else 3600.0)
        finally:
            self._bar.close()
            self._bar = None
            self._idle.set()
        return self.result()

    def stop(self, wait: float = 0.0) -> bool:
        """Asks the run to stop, from any thread: the run ends at its next exchange with the
        clients, or at once if it is waiting for replies (:meth:`run` raises :class:`RunStopped`);
        a run not started yet stops at its first. Waits up to ``wait`` seconds for :meth:`run` to
        return; returns whether no run is in progress."""
        self._stop.set()
        return self._idle.wait(wait)

    def result(self) -> FlowerResult:
        """The result of a finished run."""
        if self._final is None:
            raise RuntimeError("The run has not finished: no final evaluation yet.")
        f = self._final
        if f["missing"]:
            self.missing["final"] = [self.client_ids[c] for c in f["missing"]]
        # a client that answered but has no validation sample: its lowest training loss chooses, as in
        # run_federated (a missing client has no loss either and keeps model 0)
        if f.get("one_column"):  # each client's mixture or fine-tuned model is its one column
            choice = torch.zeros(self.n, dtype=torch.long)
        else:
            choice, _ = self.server.choose(f["val"], f["selection"])
        # as run_federated's: the method gives each client its predictor (a cluster, a group, its own
        # model, its mixture or fine-tuned model), so loss_choice is that too
        assigned = bool(f.get("one_column")) or self.server.assigned() is not None
        return FlowerResult(params=self.params.cpu(), val_accuracy=f["val"], test_accuracy=f["test"],
                            test_loss=f["test_loss"], choice=choice, history=list(self.history),
                            selection_loss=f["selection"],
                            test_probs=torch.empty(self.m, self.n, 0, 0), test_weight=torch.empty(self.n, 0),
                            missing=dict(self.missing), prediction_kl=f["prediction_kl"], mixture=f.get("mixture"),
                            assigned=assigned, fine_tuned_from=f.get("fine_tuned_from"))
