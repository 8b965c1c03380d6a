"""A benchmark table's methods as data: a registry name and its settings, built as experiment files are.

A suite's table maps each label it prints ("MosT (balanced)", "FedProx") to a :class:`MethodRow`:
the registry name of the method (:func:`most.registry.methods`), its settings written as the
method table of an experiment file (components as ``{"type": ...}`` tables, ``"none"`` for
``None``), the named variants applied after it (:func:`most.registry.variant`), and the values
the suite searches on validation. :meth:`MethodRow.build` builds it with
:func:`most.config.build`, the builder of experiment files, so a row and the same table in an
experiment file make the same method. Code that builds a method no registry name describes
(a probe's own assignment) gives a :class:`BuiltRow` instead.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .._validation import did_you_mean
from ..config import build
from ..registry import CENTRALISED, FEDERATED, methods, variant

__all__ = ["MethodRow", "BuiltRow"]


@dataclass(frozen=True)
class MethodRow:
    """One method of a benchmark table.

    Args:
        method: a method's registry name (``"MosT"``, ``"FedProx"``, ...) in ``kind``.
        settings: its fields, as an experiment file's method table gives them.
        variants: named variants applied to the built method, in order (``("paper", "no-R")``).
        extras: the values searched on validation (``(None,)``: none).
        extra: for a searched value ``x``, the fields it sets: ``{field: c}`` sets ``field = c * x``.
        groups: whether the method takes the data's planted groups as ``groups`` (the oracle).
        kind: ``"federated"`` or ``"centralised"``, the registry the name is looked up in.
    """

    method: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    variants: tuple[str, ...] = ()
    extras: tuple = (None,)
    extra: Mapping[str, float] = field(default_factory=dict)
    groups: bool = False
    kind: str = FEDERATED

    def __post_init__(self) -> None:  # a table's typo fails when the table is made, not at its first run
        if self.kind not in (FEDERATED, CENTRALISED):
            raise ValueError(f"`kind` must be {FEDERATED!r} or {CENTRALISED!r}; got {self.kind!r}.")
        known = methods(self.kind)
        if self.method not in known:
            raise ValueError(f"Unknown {self.kind} method {self.method!r}{did_you_mean(self.method, known)}; "
                             f"choose from {', '.join(known)}.")

    def build(self, extra: Any = None, groups: Any = None, **run: Any) -> Any:
        """The method with the suite's settings of the run ``run`` (``n_models``, ``server_lr``;
        ``rounds``, ``lr``, ``seed``: each for a method that has the field, and a row's setting
        overrides it), the searched value ``extra`` and, for a row with :attr:`groups`, the
        data's ``groups``."""
        cls = methods(self.kind)[self.method]
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        table: dict[str, Any] = {k: v for k, v in run.items() if k in init}
        table.update(copy.deepcopy(dict(self.settings)))
        if extra is not None:
            table.update({name: c * extra for name, c in self.extra.items()})
        if self.groups:
            table["groups"] = groups
        method = build(cls, table, path=self.method)
        return variant(self.variants[0], method, *self.variants[1:]) if self.variants else method


@dataclass(frozen=True)
class BuiltRow:
    """A method of a table built by code, ``make(**run)`` (``make(**run, extra=x)`` for a
    searched value ``x`` of ``extras``)."""

    make: Callable[..., Any]
    extras: tuple = (None,)
    groups: bool = False

    def build(self, extra: Any = None, groups: Any = None, **run: Any) -> Any:
        """The method ``make`` builds for the run's settings (and the searched value)."""
        return self.make(**run) if extra is None else self.make(**run, extra=extra)
