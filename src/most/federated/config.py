"""What a federated run is given and what it returns: :class:`FederatedConfig` (the settings
shared by every method), :class:`RoundLog` (one round's record) and :class:`FederatedResult`
(the final models, their evaluation and the rounds' records)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .._validation import check_bool, check_positive, check_positive_int, check_seed
from .evaluation import select_by_loss


@dataclass(frozen=True)
class RoundLog:
    """One round: the clients that took part, the plan, mean best-model training loss,
    validation accuracy (if evaluated this round) and timings.

    In the history of a large run (more than :data:`~most.engine.records.HISTORY_NUMBERS`
    numbers of plans over all rounds) only every k-th round and the last keep ``plan``; the
    others have ``None`` there. A ``callback`` always gets the round's full log."""

    round: int
    clients: Tensor
    plan: Tensor | None
    train_loss: float
    val_accuracy: float | None
    seconds: dict

    def __repr__(self) -> str:
        val = "" if self.val_accuracy is None else f", validation accuracy {100 * self.val_accuracy:.1f} %"
        return (f"RoundLog(round={self.round}, {len(self.clients)} clients, best-model training loss "
                f"{self.train_loss:.3g}{val})")


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
    the engine did not measure it); :attr:`loss_choice` picks by it. ``assigned`` is ``True``
    when ``choice`` is the model the method gives each client (a cluster, a group, its own
    model, its mixture: CFL, the oracle, local training, fine-tuning, FedEM) rather than a pick
    on validation; :attr:`loss_choice` is then ``choice`` too.

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
    assigned: bool = field(default=False, repr=False)

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
        """``[n]`` each client's model with the lowest loss on its training and validation data;
        :attr:`choice` where the method assigns each client its model (``assigned``)."""
        if self.assigned:
            return self.choice
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
