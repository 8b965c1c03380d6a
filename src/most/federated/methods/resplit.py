"""The re-split of federated MosT: a model that duplicates another's clients is moved to split a
model that serves two groups of clients, or, when no model is free, the group that belongs
elsewhere is handed over to the model that serves it next best.

:class:`Resplit` decides when, and which model moves or takes the group; what tells that a
model serves two groups, and which of its clients form the second, is a component of its own:

* :class:`SplitByLosses` -- the clients' losses on the other models: clients of two groups
  that share a model are told apart by which of the other models serves them better;
* :class:`SplitByUpdates` -- the directions of the clients' updates (CFL's bipartition): the two
  halves pull apart.

The default tries the losses first and the updates after.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import Tensor

from ..._host import to_device
from ..._validation import check_bool, check_component, check_non_negative, check_positive_int
from .clustered import bipartition

__all__ = ["Proposal", "Resplit", "SplitSignal", "SplitByLosses", "SplitByUpdates"]


def _check_in_range(value, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"`{name}` must be a number in [{low:g}, {high:g}]; got {value!r}.")
    return float(value)


class SplitSignal(ABC):
    """What tells the re-split that a model serves two groups of clients.

    :meth:`find` looks at each model with at least ``min_clients`` trained pairs and returns the
    model whose clients part most clearly, with the pairs of the half that is to leave it."""

    @abstractmethod
    def find(self, deltas: Tensor, pair_model: Tensor, clients: Tensor, losses: Tensor,
             min_clients: int) -> tuple[int, Tensor] | None:
        """``(j, pairs)``: the model to split and the pairs (indices into ``deltas`` and
        ``pair_model``) of the half that goes to the moved model; ``None`` if no model parts.

        ``deltas [P, d]`` are the round's pair updates, ``pair_model [P]`` their models,
        ``clients [P]`` their clients (indices among all n) and ``losses [n, m]`` the round's."""


@dataclass(frozen=True)
class SplitByLosses(SplitSignal):
    """Splits a model's clients by their losses on the other models.

    Two groups of clients that share model j usually differ in which other model serves them
    next best: each client's row of losses relative to its loss on j,
    ``L[i, k] - L[i, j]``, is split in two by 2-means (started from the sign of the rows'
    first principal component), and the model parts when the two halves' mean rows differ by
    more than ``min_gap`` times the median client's best loss on some model, the halves stand
    apart (along the line through their means, the distance between the means is at least
    ``min_separation`` times the clients' spread about their half's mean: 2-means cuts a single
    Gaussian cloud into halves about 2.7 spreads apart, two distinct groups far more), and each
    half has at least ``min_half`` clients (one client apart from the rest is not a group).
    Halves only ``shift_separation`` spreads apart part too when they differ by a shift: their
    mean losses on model j differ by more than the gap, and on every other model (at least two)
    by at most half as much, so model j serves one half worse and the other models serve both
    alike -- a group held on a model fitted to another group, which models fitted to neither
    cannot tell apart -- and both halves have at least ``min_clients`` clients.
    Relative rows leave out how hard a client is on every model (a hard client loses more
    everywhere), so clients of one group that differ only in difficulty do not part. Of the
    models that part, the one with the largest gap is split, and its smaller half leaves. It
    needs only the losses the plan already has.
    """

    min_gap: float = 0.5
    min_separation: float = 8.0
    min_half: int = 2
    shift_separation: float = 4.0

    def __post_init__(self) -> None:
        check_non_negative(self.min_gap, name="min_gap", allow_inf=True)
        check_non_negative(self.min_separation, name="min_separation", allow_inf=True)
        check_positive_int(self.min_half, name="min_half")
        check_non_negative(self.shift_separation, name="shift_separation", allow_inf=True)

    def find(self, deltas: Tensor, pair_model: Tensor, clients: Tensor, losses: Tensor,
             min_clients: int) -> tuple[int, Tensor] | None:
        L = losses.detach().double().cpu()
        pair_model, clients = pair_model.cpu(), clients.cpu()
        scale = _loss_scale(L)
        best: tuple[float, int, Tensor] | None = None
        for j in range(L.shape[1]):
            mine = (pair_model == j).nonzero().squeeze(1)
            if len(mine) < min_clients:
                continue
            rows = _relative(L, clients[mine], j)
            half = _two_means(rows)
            smaller = 0 if half is None else min(int(half.sum()), int((~half).sum()))
            if half is None or smaller < self.min_half:
                continue
            diff = rows[half].mean(0) - rows[~half].mean(0)
            gap = float(diff.abs().max()) / scale
            if gap <= self.min_gap:
                continue
            separation = _separation(rows, half, diff)
            if separation < self.min_separation and (
                    separation < self.shift_separation or smaller < min_clients
                    or not self._shifted(L[clients[mine], j], half, diff, j, scale)):
                continue
            if best is None or gap > best[0]:
                leaves = half if int(half.sum()) == smaller else ~half
                best = (gap, j, mine[leaves])
        return None if best is None else best[1:]

    def _shifted(self, on_j: Tensor, half: Tensor, diff: Tensor, j: int, scale: float) -> bool:
        """Whether the halves' losses on model ``j`` (``on_j``) differ by more than the gap and,
        on every other model (at least two), by at most half as much. ``diff`` is the halves'
        difference in loss relative to model j, so their difference in loss on model k is
        ``diff[k]`` plus their difference on j."""
        own = float(on_j[half].mean() - on_j[~half].mean())
        other = (torch.cat([diff[:j], diff[j + 1:]]) + own).abs() / scale
        own = abs(own) / scale
        return len(other) >= 2 and own > self.min_gap and bool((other <= own / 2).all())


def _loss_scale(L: Tensor) -> float:
    """The loss's units: the median client's best loss over the models of ``L [n, m]``."""
    return float(L.min(1).values.median().clamp_min(1e-12))


def _relative(L: Tensor, clients: Tensor, j: int) -> Tensor:
    """The ``clients``' rows of losses relative to model ``j``: ``L[i, k] - L[i, j]``."""
    rows = L[clients]
    return rows - rows[:, j:j + 1]


def _separation(rows: Tensor, half: Tensor, diff: Tensor) -> float:
    """The distance between the two halves' means over the rows' spread about their half's
    mean (root mean square), both along the line through the means."""
    norm = diff.norm()
    if float(norm) == 0.0:
        return 0.0
    p = rows @ (diff / norm)
    spread = torch.cat([p[half] - p[half].mean(), p[~half] - p[~half].mean()]).pow(2).mean().sqrt()
    return math.inf if float(spread) == 0.0 else float(norm / spread)


def _two_means(rows: Tensor, iterations: int = 10) -> Tensor | None:
    """A 2-means split ``[k]`` (bool) of ``rows [k, m]``, started from the sign of the centred
    rows' first principal component; ``None`` when one side is empty."""
    half = torch.linalg.svd(rows - rows.mean(0), full_matrices=False)[0][:, 0] > 0
    for _ in range(iterations):
        if bool(half.all()) or not bool(half.any()):
            return None
        a, b = rows[half].mean(0), rows[~half].mean(0)
        new = (rows - a).pow(2).sum(1) < (rows - b).pow(2).sum(1)
        if bool((new == half).all()):
            break
        half = new
    if bool(half.all()) or not bool(half.any()):
        return None
    return half


@dataclass(frozen=True)
class SplitByUpdates(SplitSignal):
    """Splits a model's clients by the directions of their updates (CFL's split).

    Each model's pair updates are split in two by
    :func:`~most.federated.methods.clustered.bipartition`; the model whose halves pull most
    against each other, with a mean cosine similarity across the halves below
    ``max_similarity``, is split, and the half without its first pair leaves. Updates separate
    groups when the clients' gradients differ more than their sampling noise; with few local
    steps on small clients they often do not, which :class:`SplitByLosses` does not depend on.
    """

    max_similarity: float = -0.25

    def __post_init__(self) -> None:
        _check_in_range(self.max_similarity, "max_similarity", -1.0, 1.0)

    def find(self, deltas: Tensor, pair_model: Tensor, clients: Tensor, losses: Tensor,
             min_clients: int) -> tuple[int, Tensor] | None:
        pair_model = pair_model.cpu()
        best: tuple[float, int, Tensor] | None = None
        for j in range(losses.shape[1]):
            mine = (pair_model == j).nonzero().squeeze(1)
            if len(mine) < min_clients:
                continue
            rows = deltas[to_device(mine, deltas.device)].double()
            half = bipartition(rows)
            if bool(half.all()) or not bool(half.any()):
                continue
            u = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-300)
            cross = float((u[to_device(half == 0, u.device)] @ u[to_device(half == 1, u.device)].T).mean())
            if cross < self.max_similarity and (best is None or cross < best[0]):
                best = (cross, j, mine[half == 1])
        return None if best is None else best[1:]


class Proposal(NamedTuple):
    """What the re-split does in a round: model ``split`` loses the clients of ``pairs`` (indices
    into the round's pair updates) to model ``to``.

    ``moves``: ``to`` is moved (it restarts as a copy of ``split`` and takes the mean step of
    those pairs' updates); otherwise the clients are handed over: ``split`` leaves their updates
    out of this round's step, and the plan's balance point moves their share from ``split`` to
    ``to`` (:meth:`most.methods.Marginals.at_loads`)."""

    split: int
    to: int
    pairs: Tensor
    moves: bool


@dataclass(frozen=True)
class Resplit:
    """Moves a redundant model to split a model that serves two groups of clients: the federated
    counterpart of the centralised default's re-seeding (:class:`most.seeding.Reseed`), judged
    from the round's losses and the clients' updates instead of extra gradient steps.

    Every ``every`` rounds (until the fraction ``until`` of the rounds after the warm-up), the
    ``signals`` look, in order, at each model with at least ``min_clients`` trained pairs; the
    first that names a model decides the model to split and the half that is to leave it. By
    default :class:`SplitByLosses` (the clients' losses on the other models, where groups show
    clearly) and then :class:`SplitByUpdates` (the directions of their updates). The model to
    move is the one whose removal raises the clients' summed best loss the least (its clients'
    second-best loss minus their best, from the round's losses), and it moves only when that
    cost is below the split model's excess loss (its clients' loss above the mean best loss of
    the other clients). The moved model restarts as a copy of the split one and takes the mean
    step of the leaving half's updates (its own clients' updates of this round, made from the
    model it no longer is, are left out); the split model takes the rest. So a model that
    duplicates another one's group is freed for a group that shares a model, the failure the
    balance and the load bounds alone cannot undo.

    With ``hand_over`` (default), the half whose clients another model serves nearly as well
    (the lowest mean loss relative to the split model) is handed over to that model, if it is
    their group's model: their mean loss there is at most ``hand_over_gap`` times the median
    client's best loss above their loss on the split model, and at least that
    much below the other half's, and the other half keeps at least ``min_clients`` clients (a
    few clients apart from the rest are not a group worth a model) or is a group of its own:
    every other model serves it at least ``own_group_gap`` times the median client's best loss
    worse than the split model (a group smaller than ``min_clients`` that no other model can
    serve, held with other clients only by the share bounds' lower bound). A half of at least
    ``min_clients`` clients is handed over before a move is weighed (its group has a model: a
    moved model would give the group a second one and drop the moved model's own clients); a
    smaller one only when no model is free to move (the move costs more than it gains, e.g.
    with as many models as groups); ``hand_over_first=False`` weighs the move first for every
    half. The plan's balance point then moves their share there, so the balance no longer holds a part of a large group in a
    model of another group, and a group smaller than the fair load keeps a model of its own
    (:class:`Proposal`). Clients whom the other model serves much worse than the split one, or
    no better than the rest, are not a part of its group. A named model none of whose clients it
    serves best has no group to keep (it is itself free to move): the re-split looks past it to
    the next model the signals name.

    Deterministic (no draw). It needs the losses of every client (full participation): in a
    round with sampled clients it does nothing.
    """

    every: int = 5
    until: float = 0.6
    min_clients: int = 4
    signals: tuple[SplitSignal, ...] = field(default_factory=lambda: (SplitByLosses(), SplitByUpdates()))
    hand_over: bool = True
    hand_over_gap: float = 0.5
    own_group_gap: float = 1.0
    hand_over_first: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "hand_over", check_bool(self.hand_over, name="hand_over"))
        object.__setattr__(self, "hand_over_first", check_bool(self.hand_over_first, name="hand_over_first"))
        check_non_negative(self.hand_over_gap, name="hand_over_gap")
        check_non_negative(self.own_group_gap, name="own_group_gap", allow_inf=True)
        check_positive_int(self.every, name="every")
        check_positive_int(self.min_clients, name="min_clients", minimum=2)
        _check_in_range(self.until, "until", 0.0, 1.0)
        if isinstance(self.signals, SplitSignal):
            raise TypeError("`signals` is a sequence of signals, tried in order; "
                            f"write signals=({self.signals!r},).")
        if not isinstance(self.signals, (tuple, list)) or not self.signals:
            raise TypeError("`signals` must be a non-empty sequence of signals, e.g. "
                            f"(most.federated.methods.SplitByLosses(),); got {self.signals!r}.")
        for signal in self.signals:
            check_component(signal, name="signals", example="most.federated.methods.SplitByLosses()",
                            base=SplitSignal)
        object.__setattr__(self, "signals", tuple(self.signals))

    def propose(self, round: int, total: int, deltas: Tensor, pair_model: Tensor, losses: Tensor,
                clients: Tensor, *, hand_over: bool | None = None) -> Proposal | None:
        """The round's :class:`Proposal` (a move, or a hand-over); ``None`` for neither.
        ``round`` and ``total`` count after the warm-up; ``losses [n, m]`` are the round's and
        ``clients [P]`` the client (among all n) of each pair. ``hand_over``: whether the caller
        can carry out a hand-over (``None``: :attr:`hand_over`; a plan without a balance point
        cannot), so that a move is not passed over for a hand-over that would not happen."""
        can_hand_over = self.hand_over if hand_over is None else bool(hand_over) and self.hand_over
        m = losses.shape[1]
        if m < 2 or (round + 1) % self.every or round >= self.until * total:
            return None
        L = losses.double().cpu()
        two = L.topk(2, dim=1, largest=False)
        owner = two.indices[:, 0]
        passed: list[int] = []
        while True:
            found = self._find(deltas, pair_model, losses, clients, passed)
            if found is None:
                return None
            split, pairs = found
            if bool((owner == split).any()):
                break
            # a model none of whose clients it serves best has no group to keep: it is itself
            # free to move, so the model to split is the next one the signals name
            passed.append(split)
        handed = None
        if can_hand_over:
            handed = _hand_over(L, split, pair_model.cpu(), clients.cpu(), pairs.cpu(), self.hand_over_gap,
                                self.min_clients, self.own_group_gap)
            # a group of at least min_clients whose own model serves it nearly as well goes there:
            # moving a model to take it would give the group two models and cost the moved one's
            if self.hand_over_first and handed is not None and len(handed.pairs) >= self.min_clients:
                return handed
        cost = torch.zeros(m, dtype=torch.float64).index_add_(0, owner, two.values[:, 1] - two.values[:, 0])
        cost[split] = math.inf
        moved = int(cost.argmin())
        mine, others = owner == split, owner != split
        if not others.any():
            return None
        excess = float((L[mine, split] - L[others].min(1).values.mean()).clamp_min(0).sum())
        if float(cost[moved]) < excess:
            return Proposal(split, moved, pairs, True)
        return handed

    def _find(self, deltas: Tensor, pair_model: Tensor, losses: Tensor, clients: Tensor,
              passed: list[int]) -> tuple[int, Tensor] | None:
        """The first signal's ``(model, pairs)``, looking past the models in ``passed``."""
        keep = ~torch.isin(pair_model.cpu(), torch.tensor(passed, dtype=torch.long))
        index = keep.nonzero().squeeze(1)
        if passed:
            deltas = deltas[to_device(index, deltas.device)]
            pair_model = pair_model[to_device(index, pair_model.device)]
            clients = clients[to_device(index, clients.device)]
        for signal in self.signals:
            found = signal.find(deltas, pair_model, clients, losses, self.min_clients)
            if found is not None:
                return found[0], index[found[1].cpu()]
        return None


def _hand_over(L: Tensor, split: int, pair_model: Tensor, clients: Tensor, pairs: Tensor,
               gap: float, min_stay: int, own_gap: float) -> Proposal | None:
    """The hand-over of one half of model ``split``'s pairs (``pairs`` or the rest): the half
    whose clients' mean loss relative to ``split``, ``L[i, k] - L[i, split]``, is lowest on some
    other model k goes to that k, if that mean is at most ``gap`` median best losses, the other
    half's at least ``gap`` above it, and the other half has at least ``min_stay`` pairs or its
    mean relative loss is at least ``own_gap`` median best losses on every other model."""
    mine = (pair_model == split).nonzero().squeeze(1)
    leaves = torch.zeros(len(pair_model), dtype=torch.bool)
    leaves[pairs] = True
    halves = [mine[leaves[mine]], mine[~leaves[mine]]]
    if any(len(h) == 0 for h in halves):
        return None
    rel = []
    for half in halves:
        r = _relative(L, clients[half], split).mean(0)
        r[split] = math.inf
        rel.append(r)
    h = 0 if float(rel[0].min()) <= float(rel[1].min()) else 1
    k = int(rel[h].argmin())
    scale = _loss_scale(L)
    own_group = float(rel[1 - h].min()) >= own_gap * scale  # rel[.][split] is inf
    if (len(halves[1 - h]) < min_stay and not own_group) or float(rel[h][k]) > gap * scale \
            or float(rel[1 - h][k] - rel[h][k]) < gap * scale:
        return None
    return Proposal(split, k, halves[h], False)
