r"""Where the models start, and how a model that serves its objectives badly moves.

Spreading m models over groups of objectives is a clustering problem (the sum of each
objective's best loss is the k-means cost in the objectives' own geometry), and it has the
same traps: two models that start in one group leave another group to a model stranded
between groups, and a model can end up serving nothing. Two components, used by the default
:class:`most.MosT`, take the remedies of k-means over to any objectives:

* :class:`KMeansSeeding` starts the models the way greedy k-means++ starts centres (Arthur &
  Vassilvitskii 2007; the greedy variant of scikit-learn): each new model is the minimiser of one
  objective, drawn with probability growing with its current best loss, the best of a few
  draws.
* :class:`Reseed` moves a model at fixed rounds when that lowers the summed best loss: the
  model whose objectives lose least by its removal is moved to the minimiser of an objective
  that is served badly (drawn the same way), and the move is kept only if the summed best loss
  falls by at least ``min_gain`` (a "swap" of k-means local search, Kanungo et al. 2004).
  With fewer than two objectives per model on an extended problem (MosT-E with one ray per
  model), it spreads the models over the original objectives' front instead: see
  :class:`Reseed`.

A minimiser of one objective is approximated by ``steps`` steps of the run's update rule on
that objective alone, from the parameters of the model that serves it best (for seeding, from
a draw of the problem's initial point of its own); the candidates of one draw are minimised together,
as one batch. Every draw comes from the run's generator, so a run is deterministic under its
seed and under resume.

>>> import torch, most
>>> centres = torch.tensor([[0.0, 0.0], [0.2, 0.1], [8.0, 0.0], [8.1, 0.2], [0.0, 8.0], [0.1, 8.1]])
>>> problem = most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=6)
>>> start = KMeansSeeding()(problem, 3, torch.Generator().manual_seed(0), lr=0.1)
>>> owner = problem.loss_matrix(start).argmin(1)  # each objective's best model
>>> len(set(owner[[0, 2, 4]].tolist())), bool(owner[0] == owner[1]), bool(owner[2] == owner[3])
(3, True, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ._validation import check_non_negative, check_positive, check_positive_int
from .methods import MajorityShare
from .optim import SGD, UpdateRule
from .problem import Problem

__all__ = ["KMeansSeeding", "Reseed", "minimise_each"]


def _descend(problem: Problem, starts: Tensor, weights: Tensor, *, steps: int, lr: float,
             optimizer: UpdateRule | None, rows: Tensor | None = None,
             snapshot: int | None = None) -> tuple[Tensor, Tensor]:
    """``steps`` steps of ``optimizer`` (default SGD) on ``sum_i weights[t, i] L_i`` from
    ``starts[t]``, all ``t`` at once; returns the parameters after ``snapshot`` steps (default:
    all of them) and after all of them. ``rows``: where each row of ``weights`` is one objective
    (one-hot), its index, so that a problem whose objectives have data of their own
    (:attr:`~most.Problem.rows_alone`: instances, datasets) takes that objective's gradient alone.
    A start whose parameters become non-finite stays non-finite, for the caller to handle."""
    optimizer = SGD() if optimizer is None else optimizer
    params = problem.apply_projection(starts.detach().clone())
    state = optimizer.init(params)
    weights = weights.to(device=params.device, dtype=params.dtype)
    early = None
    for k in range(steps):
        if k == snapshot:
            early = params
        if rows is None or not problem.rows_alone:  # one reverse pass, the weights as cotangent
            grads = problem.weighted_gradients(params, weights)[1][:, None]
        else:
            grads = problem.active_gradients(params, rows[:, None])  # [t, 1, dim]
        grads = problem.tangent_jacobian(params, grads.detach())[:, 0]
        params, state = optimizer.step(params, grads, state, lr)
        params = problem.apply_projection(params)
    params = params.detach()
    return (params if early is None else early.detach()), params


class SeedingDiverged(ValueError):
    """A gradient became non-finite while the seeding moved a model to one objective's minimiser
    (a step size too large for the objectives)."""


def minimise_each(problem: Problem, starts: Tensor, objectives: Tensor, *, steps: int, lr: float,
                  optimizer: UpdateRule | None = None) -> Tensor:
    """``steps`` steps of ``optimizer`` (default SGD) on objective ``objectives[t]`` alone from
    ``starts[t]``, for every ``t`` at once; returns ``[t, dim]``.

    ``objectives`` holds one objective index in ``[0, problem.n_objectives)`` per start (an
    integer tensor or array-like); anything else is refused with a ``ValueError`` before any step."""
    rows = _objective_indices(objectives, n=problem.n_objectives, count=starts.shape[0]).to(device=starts.device)
    one_hot = torch.nn.functional.one_hot(rows, problem.n_objectives).to(starts.dtype)  # [t, n]
    _, params = _descend(problem, starts, one_hot, steps=steps, lr=lr, optimizer=optimizer, rows=rows)
    if not torch.isfinite(params).all():
        raise SeedingDiverged("While moving a model to the minimiser of one objective (seeding), a gradient became "
                         "non-finite; try a smaller `lr`, or `seeding=None` to start from the problem's `init`.")
    return params


def _objective_indices(objectives, *, n: int, count: int) -> Tensor:
    """``objectives`` as a flat integer tensor of ``count`` indices in ``[0, n)``, or a ``ValueError``
    (one_hot would fail later with an index error that names neither the argument nor the bound)."""
    try:
        rows = torch.as_tensor(objectives)
    except (TypeError, ValueError, RuntimeError):  # e.g. a ragged list or a string
        rows = None
    if rows is None or rows.is_floating_point() or rows.is_complex() or rows.dtype == torch.bool:
        raise ValueError(f"`objectives` must be integer objective indices (one per start), e.g. torch.tensor([0, 2]); "
                         f"got {objectives!r}" + ("" if rows is None else f" of dtype {rows.dtype}") + ".")
    rows = rows.reshape(-1)
    if rows.numel() != count:
        raise ValueError(f"`objectives` has {rows.numel()} indices but `starts` has {count} rows: give one objective "
                         "per start.")
    outside = (rows < 0) | (rows >= n)
    if bool(outside.any()):
        bad = int(rows[outside][0])
        raise ValueError(f"`objectives` holds the index {bad}, outside the problem's {n} objectives: every index "
                         f"must be in [0, {n}).")
    return rows


def _draw(weights: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """``k`` distinct indices drawn with probability proportional to ``weights`` (uniform when all
    are zero), on the host."""
    w = weights.detach().to("cpu", torch.float64).clamp_min(0)
    w = torch.where(torch.isfinite(w), w, torch.zeros_like(w))
    if float(w.sum()) <= 0:
        w = torch.ones_like(w)
    k = min(k, int((w > 0).sum()))
    return torch.multinomial(w / w.sum(), k, replacement=False, generator=generator)


def _excess(best: Tensor) -> Tensor:
    """How badly each objective is served: its best loss above the best-served objective's."""
    return best - best.min()


#: The spread's reference point lies this fraction of the models' range beyond their worst value
#: in each original objective (so that the extreme models count).
SPREAD_MARGIN = 0.1
#: A point has settled when, over the last fifth of the spread's steps, it moved by less than this
#: fraction of the models' range in every original objective.
SPREAD_SETTLED = 0.01


def _hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """The hypervolume (moocore) of ``points [k, d]`` (minimisation) below ``reference``; points
    not strictly inside the reference box add nothing."""
    import moocore

    points = points[(points < reference).all(1)]
    return float(moocore.hypervolume(points, ref=reference)) if len(points) else 0.0


def _extent(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(high, scale)`` per objective of ``points [k, d]``: the worst value and the range (for a
    flat objective, its magnitude, at least 1), the unit of the spread's tolerances."""
    low, high = points.min(0), points.max(0)
    return high, np.where(high > low, high - low, np.maximum(np.abs(high), 1.0))


def _neighbours(points: np.ndarray) -> list[tuple[int, int]]:
    """The pairs of models adjacent in the order of some objective (for two objectives on a front:
    the models on either side of each gap)."""
    pairs: set[tuple[int, int]] = set()
    for column in points.T:
        order = np.argsort(column, kind="stable")
        pairs.update((int(min(a, b)), int(max(a, b))) for a, b in zip(order[:-1], order[1:]))
    return sorted(pairs)


def _ends(points: np.ndarray) -> list[tuple[int, int]]:
    """The model at each end of some objective's order, with the nearest model in that order
    whose point differs from its own by more than :data:`SPREAD_SETTLED` of the models' range
    (so that a start reflected through it lands past the end)."""
    scale = _extent(points)[1]
    pairs: set[tuple[int, int]] = set()
    for column in points.T:
        order = np.argsort(column, kind="stable")
        for ranked in (order, order[::-1]):
            end = int(ranked[0])
            far = [int(b) for b in ranked[1:] if (np.abs(points[b] - points[end]) / scale > SPREAD_SETTLED).any()]
            if far:
                pairs.add((end, far[0]))
    return sorted(pairs)


@dataclass(frozen=True)
class KMeansSeeding:
    """Greedy k-means++ starts: model ``k`` minimises one objective, drawn (``candidates`` times,
    the best kept) with probability proportional to its best loss over models ``0..k-1`` above the
    lowest such loss.

    With fewer than two objectives per model (``n < 2m``) there are no groups to spread the
    models over, and the models start from the problem's ``init`` (on ZDT1-3 with one
    Tchebycheff ray per model, the seeded starts were no better: 96.8-99.6 % against 96.8-99.6 %
    of the 5-point limit over seeds 0-3).

    Args:
        steps: update-rule steps that approximate each drawn objective's minimiser.
        candidates: draws per model; the one that lowers the summed best loss most is kept.
            ``None``: ``2 + floor(ln m)``, as in scikit-learn's greedy k-means++.
        budget: the seeding's steps (``m x candidates x steps``, each on one objective) are at
            most this fraction of the run's (``m x rounds x inner_steps``): a short run takes
            fewer steps per candidate (at least one). With the defaults, runs of 300 steps per
            model or more (and m < 20) take all 30.
    """

    steps: int = 30
    candidates: int | None = None
    budget: float = 0.4

    def __post_init__(self):
        check_positive_int(self.steps, name="steps", minimum=0)
        if self.candidates is not None:
            check_positive_int(self.candidates, name="candidates")
        check_positive(self.budget, name="budget")

    def __call__(self, problem: Problem, m: int, generator: torch.Generator, *, lr: float,
                 optimizer: UpdateRule | None = None, run_steps: int | None = None) -> Tensor:
        """``[m, dim]`` starting models for ``problem`` (its own ``init`` when ``n < 2m``).
        ``run_steps``: the run's gradient steps per model, for ``budget`` (``None``: no cap)."""
        m = check_positive_int(m, name="m")  # at least one model to start (ln m sets the draws per model)
        n = problem.n_objectives
        if n < 2 * m:  # few objectives per model: no groups to spread over (MosT-E with n' = m rays, say)
            return problem.initial_params(m, generator)
        tries = self.candidates if self.candidates is not None else 2 + int(math.log(m))
        steps = self.steps if run_steps is None else min(self.steps, max(1, int(self.budget * run_steps / tries)))
        chosen, best = [], None
        for _ in range(m):
            weights = torch.ones(n) if best is None else _excess(best)
            picks = _draw(weights, tries, generator)
            starts = problem.initial_params(len(picks), generator)  # each from its own draw of the start
            cands = minimise_each(problem, starts, picks.to(starts.device), steps=steps, lr=lr, optimizer=optimizer)
            losses = problem.loss_matrix(cands)  # [n, t]
            if best is not None:
                losses = torch.minimum(losses, best[:, None])
            k = int(losses.sum(0).argmin())
            chosen.append(cands[k])
            best = losses[:, k]
        return torch.stack(chosen)


@dataclass(frozen=True)
class Reseed:
    """Moves the least useful model to a badly served objective when that pays (see the module
    docstring).

    Args:
        every: an attempt after every ``every`` rounds.
        until: no attempt after this fraction of the rounds (the last rounds settle the moved models).
        candidates: objectives drawn per attempt (``None``: ``2 + floor(ln m)``).
        steps: update-rule steps that move a model to a drawn objective's minimiser.
        min_gain: a move is kept only if it lowers the summed best loss (the spread: raises the
            hypervolume) by this fraction.
        spread: with fewer than two objectives per model on an extended problem, spread the
            models over the original objectives' front (below); ``False``: no move there.
        spread_steps: update-rule steps of each of the spread's candidates.
        spread_start: the spread makes no attempt before this fraction of the rounds (the models
            first settle on their objectives).

    The move is judged as if each objective went to its best model, so it is tried only with at
    least two objectives per model (n >= 2m). With fewer, each model keeps the objectives the
    transport gives it, and on a problem extended from fewer original objectives (MosT-E, such
    as one :class:`~most.methods.TchebycheffExtension` ray per model) the **spread** acts
    instead. A scalarisation of a disconnected front has local minimisers on several pieces,
    and the global one of two rays can lie on the same piece; the summed best loss cannot see
    that, the set of points in the original objectives can. In an attempt:

    1. every model, and one candidate per model and start, take ``spread_steps`` steps of the
       run's update rule on that model's objectives (those it holds the largest share of in the
       plan): the model from where it is, the candidates from the midpoint of the parameters of
       two models adjacent in some original objective's order (the two sides of a gap) and from
       past each end of that order (the end model reflected through its nearest distinct
       neighbour, then projected), where the front may go on beyond the models;
    2. a point has settled when, over the last fifth of those steps, it moved by less than
       :data:`SPREAD_SETTLED` of the models' range in every original objective;
    3. the hypervolume of the models' points in the original objectives, from a reference point
       :data:`SPREAD_MARGIN` of the range beyond the worst values of the models and the settled
       candidates (so that a point past the models' range counts), decides: a settled model is
       replaced by a settled candidate of its own when that raises it the most, by at least
       ``min_gain``.

    So a model moves only to a local minimiser of its own objectives, and only when that
    minimiser serves the set better. On a connected front every candidate returns to the model's
    own minimiser, and nothing moves. An attempt is deterministic (no draw) and holds
    ``m (1 + g + e)`` models' parameters, ``g <= n (m - 1)`` gaps and ``e <= 2 n`` ends.
    """

    every: int = 20
    until: float = 0.6
    candidates: int | None = None
    steps: int = 20
    min_gain: float = 0.01
    spread: bool = True
    spread_steps: int = 50
    spread_start: float = 0.4

    def __post_init__(self):
        check_positive_int(self.every, name="every")
        check_positive_int(self.steps, name="steps", minimum=0)
        if self.candidates is not None:
            check_positive_int(self.candidates, name="candidates")
        check_non_negative(self.min_gain, name="min_gain")
        check_non_negative(self.until, name="until")  # a number (not a string or a bool) ...
        if not 0.0 <= self.until <= 1.0:  # ... in [0, 1]
            raise ValueError(f"Reseed `until` must lie in [0, 1] (a fraction of the rounds); got {self.until!r}.")
        if not isinstance(self.spread, bool):
            raise TypeError(f"Reseed `spread` must be True or False; got {self.spread!r}.")
        check_positive_int(self.spread_steps, name="spread_steps", minimum=2)
        check_non_negative(self.spread_start, name="spread_start")
        if not 0.0 <= self.spread_start <= 1.0:
            raise ValueError(f"Reseed `spread_start` must lie in [0, 1] (a fraction of the rounds); "
                             f"got {self.spread_start!r}.")

    def due(self, round: int, total: int) -> bool:
        """Whether an attempt follows round ``round`` (0-based) of ``total``."""
        return (round + 1) % self.every == 0 and round + 1 <= self.until * total and round + 1 < total

    def __call__(self, problem: Problem, params: Tensor, generator: torch.Generator, *, lr: float,
                 optimizer: UpdateRule | None = None, plan: Tensor | None = None, round: int | None = None,
                 total: int | None = None) -> tuple[Tensor, int | None]:
        """``(params, moved)``: the models after the attempt and the index of the model moved
        (``None`` when no move pays; ``params`` is then returned unchanged).

        ``plan`` (``[n, m]``), ``round`` and ``total`` come from the round loop, for the spread:
        the plan says which objectives each model serves (without it, each objective goes to its
        best model), and the spread waits for ``spread_start`` of the ``total`` rounds."""
        m = params.shape[0]
        if m < 2:
            return params, None
        if problem.n_objectives < 2 * m:  # few objectives per model: no group to leave or to split
            base = problem.metadata.get("base_problem")
            if not self.spread or not isinstance(base, Problem):
                return params, None
            if round is not None and total is not None and round + 1 <= self.spread_start * total:
                return params, None
            return self._spread(problem, base, params, lr=lr, optimizer=optimizer, plan=plan)
        losses = problem.loss_matrix(params)  # [n, m]
        two = losses.topk(2, dim=1, largest=False)
        best, owner, second = two.values[:, 0], two.indices[:, 0], two.values[:, 1]
        current = float(best.sum())  # the objectives' total loss at their best models
        tries = self.candidates if self.candidates is not None else 2 + int(math.log(m))
        picks = _draw(_excess(best), tries, generator).to(owner.device)
        cands = minimise_each(problem, params[owner[picks]], picks, steps=self.steps, lr=lr, optimizer=optimizer)
        new = problem.loss_matrix(cands)  # [n, t]
        # without model j, objective i falls back to its second-best model if j was its best
        without = torch.where(owner[:, None] == torch.arange(m, device=owner.device), second[:, None], best[:, None])
        totals = torch.minimum(without[:, :, None], new[:, None, :]).sum(0)  # [m, t]
        flat = int(totals.argmin())
        j, t = divmod(flat, totals.shape[1])
        if not float(totals[j, t]) < current - self.min_gain * abs(current):
            return params, None
        params = params.clone()
        params[j] = cands[t]
        return params, j

    def _spread(self, problem: Problem, base: Problem, params: Tensor, *, lr: float,
                optimizer: UpdateRule | None, plan: Tensor | None) -> tuple[Tensor, int | None]:
        """The spread of an extended problem with fewer than two objectives per model (see the
        class docstring)."""
        m = params.shape[0]
        if plan is None:  # each objective to its best model
            best = problem.loss_matrix(params).argmin(1)
            plan = torch.nn.functional.one_hot(best, m).to(params.dtype)
        weights = MajorityShare()(plan.to(params.device))  # [m, n]: model j's own objectives
        weights = weights / weights.sum(1, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)
        serving = (weights.sum(1) > 0).tolist()
        points = base.loss_matrix(params).T.detach().to("cpu", torch.float64).numpy()  # [m, n_base]
        if not np.isfinite(points).all():
            return params, None
        gaps = [(a, b) for a, b in _neighbours(points) if not np.array_equal(points[a], points[b])]
        movable = [j for j in range(m) if serving[j]]
        if not gaps or not movable:
            return params, None
        # a start in the middle of every gap, and one beyond each end of every objective's order
        # (the end model reflected through its neighbour), where the front may go on past the models
        beyond = _ends(points)
        middles = torch.stack([0.5 * (params[a] + params[b]) for a, b in gaps]
                              + [2.0 * params[a] - params[b] for a, b in beyond])  # [g + e, dim]
        middles = problem.apply_projection(middles)
        owner = list(range(m)) + [j for j in movable for _ in range(len(middles))]  # whose objectives each descends
        starts = torch.cat([params] + [middles] * len(movable))
        early, late = _descend(problem, starts, weights[owner], steps=self.spread_steps, lr=lr,
                               optimizer=optimizer, snapshot=self.spread_steps - max(1, self.spread_steps // 5))
        end = base.loss_matrix(late).T.to("cpu", torch.float64).numpy()  # [m + candidates, n_base]
        before = base.loss_matrix(early).T.to("cpu", torch.float64).numpy()
        finite = np.isfinite(end).all(1) & np.isfinite(before).all(1)
        if not finite[:m].all():
            return params, None
        current = end[:m]  # the models, advanced as their candidates were
        scale = _extent(current)[1]
        with np.errstate(invalid="ignore"):
            settled = finite & (np.abs(end - before) / scale < SPREAD_SETTLED).all(1)
        # the reference lies beyond the worst of the models and of the settled candidates, so that a
        # candidate past the models' range (a piece of the front beyond the end models) counts
        high, scale = _extent(end[settled | (np.arange(len(end)) < m)])
        reference = high + SPREAD_MARGIN * scale
        volume = _hypervolume(current, reference)
        best, pick = volume, None
        for t in range(m, len(owner)):
            j = owner[t]
            if not (settled[j] and settled[t]):
                continue
            trial = current.copy()
            trial[j] = end[t]
            value = _hypervolume(trial, reference)
            if value > best:
                best, pick = value, t
        if pick is None or not best > volume + self.min_gain * abs(volume):
            return params, None
        j = owner[pick]
        params = params.clone()
        params[j] = late[pick].to(params)
        return params, j
