r"""Choosing the number of models m: fit a range of m and pick on validation.

:func:`choose_n_models` fits one configured method for every m of a range. For each m, every
objective is served by its best model *on the training objectives* (the model a user would
deploy for it), and the fit is scored by the mean, over objectives, of that model's loss on
*validation* objectives: the same n objectives evaluated on held-out data. Two rules pick m:

* ``"elbow"`` (default): the smallest m whose score is within ``tolerance`` (relative) of the
  best score -- the fewest models that serve the objectives almost as well as any m does;
* ``"best"``: the m with the lowest score.

Without validation objectives the training losses score the fits; they tend to fall as m
grows (more models can fit the training objectives at least as well), down to zero with one
model per objective, so the elbow rule is then the one to use, and its tolerance is relative to
the drop of the curve (the highest score minus the lowest) instead of to the lowest score,
which would demand an exact fit; the result says that it was scored on training losses.

Examples:
    >>> import torch, most
    >>> centres = torch.tensor([[0.0, 0.0], [0.1, 0.0], [6.0, 6.0], [6.0, 6.1]])   # two pairs
    >>> held_out = centres + torch.tensor([[0.5, 0.0], [0.0, 0.5], [-0.5, 0.0], [0.0, -0.5]])
    >>> train = most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=4)
    >>> val = most.Problem.from_function(lambda t: ((t - held_out) ** 2).sum(-1), dim=2, n_objectives=4)
    >>> choice = most.choose_n_models(most.MosT(n_models=1, rounds=50, lr=0.2), train, val, n_models=range(1, 5))
    >>> choice.n_models
    2
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from ._validation import check_bool, check_non_negative, check_positive_int
from .problem import Problem
from .solver import Method, Result

__all__ = ["ModelCountSelection", "choose_n_models", "elbow_threshold", "RULES"]

#: The rules that pick m from the scores (see :func:`choose_n_models`).
RULES = ("elbow", "best")


@dataclass(frozen=True)
class ModelCountSelection:
    """The outcome of :func:`choose_n_models`.

    Attributes:
        n_models: the chosen m.
        scores: m -> the mean over objectives of the validation loss of each objective's best
            model on train (the training loss itself when ``on_validation`` is False).
        worst: m -> the same loss of the worst-served objective.
        train_scores: m -> the mean over objectives of the best training loss.
        results: m -> the :class:`~most.Result` of the fit with m models.
        rule: ``"elbow"`` or ``"best"``.
        tolerance: the relative tolerance of the elbow rule.
        on_validation: whether validation objectives scored the fits (else the training ones).
    """

    n_models: int
    scores: dict[int, float]
    worst: dict[int, float]
    train_scores: dict[int, float]
    results: dict[int, Result] = field(repr=False)
    rule: str = "elbow"
    tolerance: float = 0.05
    on_validation: bool = True

    @property
    def best(self) -> int:
        """The m with the lowest score (the ``"best"`` rule's choice)."""
        return _lowest(self.scores)

    @property
    def threshold(self) -> float:
        """The highest score the elbow rule accepts (see :func:`elbow_threshold`)."""
        return elbow_threshold(self.scores, self.tolerance, on_validation=self.on_validation)

    @property
    def at_edge(self) -> bool:
        """Whether the chosen m is the largest of several counts tried while more models were
        possible (fewer than the fitted problem's objectives): a wider range may choose more."""
        ms = sorted(self.scores)
        if len(ms) < 2 or self.n_models != ms[-1]:
            return False
        result = self.results.get(self.n_models)
        return result is None or self.n_models < result.problem.n_objectives

    def _what(self) -> str:
        return "validation" if self.on_validation else "train"

    def table(self) -> str:
        """The scores against m as a Markdown table; the chosen m is marked."""
        what = self._what()
        train = self.on_validation  # a column of its own only when the scores are not the training losses
        lines = [f"| m | mean {what} loss | worst objective |" + (" mean train loss |" if train else "") + " |",
                 "|---:|---:|---:|" + ("---:|" if train else "") + ":---|"]
        for m, score in self.scores.items():
            mark = f"**chosen** ({self.rule})" if m == self.n_models else "lowest" if m == self.best else ""
            extra = f" {self.train_scores[m]:.3g} |" if train else ""
            lines.append(f"| {m} | {score:.3g} | {self.worst[m]:.3g} |{extra} {mark} |")
        relative = "relative" if self.on_validation else "of the curve's drop"
        rule = (f"the smallest m within {self.tolerance:.4g} ({relative}) of the lowest mean {what} loss"
                if self.rule == "elbow" else f"the lowest mean {what} loss")
        note = "" if self.on_validation else (" Scored on the training objectives (no validation objectives "
                                              "were given), whose loss tends to fall as m grows.")
        if self.at_edge:
            note += (f" m = {self.n_models} is the largest count tried: more models may score lower, so try a "
                     "range that goes further.")
        return "\n".join(lines) + f"\n\nChosen: m = {self.n_models}, {rule}.{note}\n"

    def to_dict(self) -> dict:
        """The selection as plain numbers (JSON), without the fitted models."""
        return {"n_models": self.n_models, "rule": self.rule, "tolerance": self.tolerance,
                "on_validation": self.on_validation, "best": self.best, "at_edge": self.at_edge,
                "scores": {str(m): v for m, v in self.scores.items()},
                "worst": {str(m): v for m, v in self.worst.items()},
                "train_scores": {str(m): v for m, v in self.train_scores.items()}}

    def plot(self, path: str | Path | None = None, *, title: str = ""):
        """The score (and the worst objective's loss) against m, the chosen m marked; a log y axis
        when the values span more than a decade. Saved to ``path`` if given; returns the Figure."""
        from . import plots  # matplotlib, loaded when first needed

        plt = plots.plt
        ms = list(self.scores)
        mean = [self.scores[m] for m in ms]
        worst = [self.worst[m] for m in ms]
        what = self._what()
        fig, ax = plt.subplots(figsize=(5.8, 3.8))
        ax.plot(ms, mean, "o-", lw=1.6, color="C0", label=f"mean {what} loss")
        ax.plot(ms, worst, "s--", lw=1.0, color="C1", alpha=0.8, label="worst objective")
        if self.rule == "elbow":
            # the threshold of elbow_threshold: a share of the lowest mean on validation, of the
            # curve's drop (highest minus lowest mean) on training scores
            share = f"{100 * self.tolerance:.4g} %"
            ax.axhline(self.threshold, color="C0", lw=0.8, ls=":",
                       label=f"within {share} of the lowest mean" if self.on_validation
                       else f"within {share} of the curve's drop above the lowest mean")
        ax.plot([self.n_models], [self.scores[self.n_models]], "*", ms=16, color="C3", zorder=3,
                label=f"chosen m = {self.n_models} ({self.rule})")
        ax.axvline(self.n_models, color="C3", lw=0.8, ls=":")
        finite = [v for v in mean + worst if math.isfinite(v)]
        if finite and min(finite) > 0 and max(finite) / min(finite) > 10:
            ax.set_yscale("log")
        ax.set_xticks(ms)
        ax.set_xlabel("number of models m")
        ax.set_ylabel(f"{what} loss (best model on train)")
        ax.set_title(title or f"choosing m on {what}")
        ax.grid(alpha=0.3)
        ax.legend(frameon=False)
        fig.tight_layout()
        return plots.save_figure(fig, path)


def elbow_threshold(scores: dict[int, float], tolerance: float, *, on_validation: bool = True) -> float:
    """The highest score the elbow rule accepts. On validation scores:
    ``low + tolerance * max(|low|, 1e-6 * span)``, with ``low`` the lowest finite score and
    ``span`` the range of the finite scores (the floor keeps a best score of zero up to rounding
    from demanding an exact tie). On training scores (``on_validation=False``), which fall to
    zero as m nears n: ``low + tolerance * span``, a share of the curve's drop."""
    tolerance = check_non_negative(tolerance, name="tolerance")
    finite = [v for v in scores.values() if math.isfinite(v)]
    if not finite:
        raise ValueError("`scores` holds no finite score: the elbow rule needs at least one.")
    low = min(finite)
    span = max(finite) - low
    return low + tolerance * (span if not on_validation else max(abs(low), 1e-6 * span))


def _lowest(scores: dict[int, float]) -> int:
    finite = {m: v for m, v in scores.items() if math.isfinite(v)}
    return min(finite, key=lambda m: (finite[m], m))


def _check_method(method) -> None:
    if not isinstance(method, Method):
        raise TypeError(f"`method` must be a configured method (a most.Method), e.g. "
                        f"most.MosT(n_models=1, rounds=100, lr=0.1); got {method!r}.")


def _listed(values: list[int]) -> str:
    """``values`` as a short list: the first few, then how many more (an error names a range of
    a million counts in one line)."""
    shown = ", ".join(map(str, values[:5]))
    return shown if len(values) <= 5 else f"{shown} and {len(values) - 5} more (up to {values[-1]})"


def _check_range(n_models, n: int, extension) -> list[int]:
    if isinstance(n_models, numbers.Number) or (isinstance(n_models, torch.Tensor) and n_models.ndim == 0) \
            or not isinstance(n_models, Iterable):
        raise TypeError(f"`n_models` must be a range or list of model counts, e.g. range(1, 9); got {n_models!r}. "
                        "For the counts 1 to k pass range(1, k + 1).")
    ms = sorted({check_positive_int(m, name="n_models (each count)") for m in n_models})
    if not ms:
        raise ValueError("`n_models` is empty: give at least one model count, e.g. n_models=range(1, 9).")
    if ms[-1] > n and extension is None:
        above = [m for m in ms if m > n]
        raise ValueError(
            f"`n_models` holds {_listed(above)} > n = {n} objectives: more models than objectives "
            f"leave models with nothing of their own to serve. Use counts up to {n} (e.g. "
            f"n_models=range(1, {n + 1})), or a method with an extension (MosT-E: "
            "most.MosT(..., extension=most.DirichletExtension(n_extra=20))).")
    return ms


def _check_problems(train, validation) -> None:
    if not isinstance(train, Problem):
        raise TypeError(f"`train` must be a most.Problem; got {type(train).__name__}. For built-in data with "
                        "splits use e.g. data.problem('train') and data.problem('val').")
    if validation is None:
        return
    if not isinstance(validation, Problem):
        raise TypeError(f"`validation` must be a most.Problem (the same objectives on held-out data) or None; "
                        f"got {type(validation).__name__}.")
    if validation.n_objectives != train.n_objectives:
        raise ValueError(
            f"`validation` has {validation.n_objectives} objectives but `train` has {train.n_objectives}: it must "
            "hold the same objectives, in the same order, evaluated on held-out data.")
    if validation.dim != train.dim:
        raise ValueError(
            f"`validation` takes parameters of size {validation.dim} but `train` of size {train.dim}: both must "
            "evaluate the same models (the same `dim`).")


def choose_n_models(method, train: Problem, validation: Problem | None = None, *,
                    n_models: Iterable[int] = range(1, 9), rule: Literal["elbow", "best"] = "elbow",
                    tolerance: float = 0.05, progress: bool = False) -> ModelCountSelection:
    """Fits ``method`` with every m of ``n_models`` and picks m on validation.

    For each m: ``dataclasses.replace(method, n_models=m).fit(train)``; each objective is served
    by its best model on ``train`` (:meth:`~most.Result.best_model`; with MosT-E, the best on the
    original objectives), and the fit scores the mean over objectives of that model's loss on
    ``validation`` (``validation.loss_matrix(params)``), and the worst objective's.

    Args:
        method: a configured method, e.g. ``most.MosT(n_models=1, rounds=100, lr=0.1)``; its
            ``n_models`` is replaced, every other field (seed included) kept.
        train: the objectives the models are fitted on.
        validation: the same n objectives on held-out data (same order, same ``dim``), or
            ``None``: then the training losses score the fits (``on_validation`` is False).
        n_models: the model counts to try (at most n, unless the method has an ``extension``).
        rule: ``"elbow"``: the smallest m whose score is at most ``best + tolerance * |best|``
            on validation, ``best + tolerance * (worst - best)`` on training losses
            (:func:`elbow_threshold`; on validation a best score of zero is allowed a
            millionth of the curve's range); ``"best"``: the m with the lowest score.
        tolerance: the elbow rule's relative tolerance (>= 0).
        progress: a progress bar over the counts.

    Returns:
        A :class:`ModelCountSelection` with the chosen m, the scores, and every fit.

    Raises:
        ValueError: an empty range, counts above n without an extension, a validation problem
            with other objectives or another ``dim``, an unknown rule, or no finite score.
    """
    _check_method(method)
    _check_problems(train, validation)
    if rule not in RULES:
        raise ValueError(f"`rule` must be one of {', '.join(repr(r) for r in RULES)}; got {rule!r}.")
    tolerance = check_non_negative(tolerance, name="tolerance")
    progress = check_bool(progress, name="progress")
    ms = _check_range(n_models, train.n_objectives, method.added_objectives())
    for m in ms:  # every count's own checks (e.g. load bounds no plan of m models can meet), before any fit
        dataclasses.replace(method, n_models=m)._prepared(train)
    from tqdm.auto import tqdm

    scores, worst, train_scores, results = {}, {}, {}, {}
    bar = tqdm(ms, desc="choosing m", disable=not progress, leave=False)
    for m in bar:
        bar.set_postfix(m=m, refresh=False)
        result = dataclasses.replace(method, n_models=m).fit(train)
        own = result.losses if result.problem is train else train.loss_matrix(result.params)  # MosT-E: originals
        best = own.argmin(1)  # [n]: each objective's model, chosen on train
        per = own.gather(1, best[:, None]).squeeze(1) if validation is None else \
            validation.loss_matrix(result.params).gather(1, best[:, None]).squeeze(1)
        scores[m], worst[m] = float(per.mean()), float(per.max())
        train_scores[m] = float(own.min(1).values.mean())
        results[m] = result
    finite = [m for m in ms if math.isfinite(scores[m])]
    if not finite:
        raise ValueError("No fit has a finite score (every validation loss is inf or NaN); check the validation "
                         "objectives, or the method's settings (e.g. a smaller `lr`).")
    lowest = _lowest(scores)
    if rule == "best":
        chosen = lowest
    else:
        limit = elbow_threshold(scores, tolerance, on_validation=validation is not None)
        chosen = min(m for m in finite if scores[m] <= limit)
    return ModelCountSelection(n_models=chosen, scores=scores, worst=worst, train_scores=train_scores,
                               results=results, rule=rule, tolerance=tolerance, on_validation=validation is not None)
