"""Typed configuration from plain tables (TOML files, dicts): no second config system.

A table maps onto the library's own dataclasses and functions: its keys are their field or
parameter names, checked against the type annotations. Unknown keys and wrong types raise
:class:`ConfigError` naming the key's path and what is allowed, before any work starts.

Components (marginals, weightings, combiners, update rules, extensions) are written as the
class name, or as a table with a ``type`` key and the class's own fields::

    [methods.MosT]
    n_models = 5
    marginals = { type = "Curriculum", end = 0.3 }
    weighting = "GammaWeights"

Examples:
    >>> from most.config import build
    >>> from most.federated import FederatedConfig
    >>> build(FederatedConfig, {"rounds": 20, "lr": 0.1}, path="federated")
    FederatedConfig(rounds=20, local_epochs=1, batch_size=10, lr=0.1, participation=1.0, seed=0, eval_every=10, loss_samples=None, device=None, pair_seeds=False)
    >>> build(FederatedConfig, {"round": 20}, path="federated")
    Traceback (most recent call last):
    ...
    most.config.ConfigError: federated.round: unknown key (did you mean 'rounds'?). Allowed keys: rounds, local_epochs, batch_size, lr, participation, seed, eval_every, loss_samples, device, pair_seeds.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import os
import types
import typing
from pathlib import Path
from typing import Any, Callable, Literal, Union, cast

from ._validation import did_you_mean

__all__ = ["ConfigError", "build", "call", "check_call", "component", "did_you_mean", "to_plain"]


class ConfigError(ValueError):
    """A configuration value is missing, unknown or of the wrong type; the message names its path."""


@functools.lru_cache(maxsize=None)
def _registry() -> dict[str, type]:
    from .registry import components

    return components()


def _allowed(names) -> str:
    return ", ".join(names) if names else "(none)"


def _unknown(path: str, key: str, allowed: list[str]) -> ConfigError:
    return ConfigError(f"{_join(path, key)}: unknown key{did_you_mean(key, allowed)}. "
                       f"Allowed keys: {_allowed(allowed)}.")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(tp) -> str:
    origin = typing.get_origin(tp)
    if tp is type(None):
        return "none"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        text = " or ".join(_describe(a) for a in typing.get_args(tp) if a is not type(None))
        optional = type(None) in typing.get_args(tp) and any(
            isinstance(a, type) and _subclasses(a) for a in typing.get_args(tp))
        return text + (' or "none"' if optional else "")
    if origin in (list, tuple, collections.abc.Sequence):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"a list of {_describe(args[0])}" if args else "a list"
    if tp is float:
        return "a number"
    if tp is int:
        return "an integer"
    if tp is bool:
        return "true or false"
    if tp is str:
        return "a string"
    if isinstance(tp, type) and _subclasses(tp):
        return "one of " + ", ".join(_subclasses(tp))
    return getattr(tp, "__name__", str(tp))


def _subclasses(tp) -> list[str]:
    return [name for name, cls in _registry().items() if isinstance(tp, type) and issubclass(cls, tp)]


def _wrong(path: str, value, tp) -> ConfigError:
    return ConfigError(f"{path}: expected {_describe(tp)}; got {value!r}.")


def component(value, path: str, allowed: list[str] | None = None):
    """A component from its name (``"GammaWeights"``) or a table (``{type = "Curriculum", ...}``)."""
    allowed = list(_registry()) if allowed is None else allowed
    if isinstance(value, str):
        name, table = value, {}
    elif isinstance(value, dict):
        if "type" not in value:
            raise ConfigError(f"{path}: a component table needs a `type` key, one of {_allowed(allowed)}.")
        table = dict(value)
        name = table.pop("type")
        if not isinstance(name, str):
            raise ConfigError(f"{path}.type: expected a string, one of {_allowed(allowed)}; got {name!r}.")
    else:
        raise ConfigError(f"{path}: expected a component name or a table with `type`, one of {_allowed(allowed)}; "
                          f"got {value!r}.")
    if name not in allowed:
        raise ConfigError(f"{path}.type: unknown component {name!r}{did_you_mean(name, allowed)}. "
                          f"Allowed: {_allowed(allowed)}.")
    return build(_registry()[name], table, path=path)


def _coerce(value, tp, path: str):
    if tp is Any or tp is object or tp is inspect.Parameter.empty:
        if isinstance(value, (str, dict)) and (
                (isinstance(value, str) and value in _registry()) or (isinstance(value, dict) and "type" in value)):
            return component(value, path)
        return value
    origin = typing.get_origin(tp)
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise _wrong(path, value, tp)
        return value
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        classes = [a for a in members if isinstance(a, type) and _subclasses(a)]
        if type(None) in typing.get_args(tp) and (value is None or (value == "none" and str not in members)):
            return None  # TOML has no null: "none" spells it
        if classes and isinstance(value, (str, dict)) and not (str in members and isinstance(value, str)):
            names = [n for c in classes for n in _subclasses(c)]
            return component(value, path, names)
        for member in members:
            try:
                return _coerce(value, member, path)
            except ConfigError:
                pass
        raise _wrong(path, value, tp)
    if origin in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, (list, tuple)):
            raise _wrong(path, value, tp)
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ConfigError(f"{path}: expected a list of {len(args)} values; got {value!r}.")
            return tuple(_coerce(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        inner = args[0] if args else Any
        items = [_coerce(v, inner, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is bool:
        if not isinstance(value, bool):
            raise _wrong(path, value, tp)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong(path, value, tp)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _wrong(path, value, tp)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _wrong(path, value, tp)
        return value
    if tp in (Path, os.PathLike) or (isinstance(tp, type) and issubclass(tp, os.PathLike)):
        if not isinstance(value, str):
            raise _wrong(path, value, tp)
        return Path(value).expanduser()
    if isinstance(tp, type) and _subclasses(tp):
        return component(value, path, _subclasses(tp))
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return build(cast(type, tp), value, path=path)  # a field's type: a dataclass, not an instance
    if isinstance(tp, type) and not isinstance(value, tp):
        raise _wrong(path, value, tp)
    return value


def _hints(obj) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # unresolvable forward references: check nothing rather than fail
        return {}


def _check(name: str, path: str, value, fields: dict[str, Any], defaults: set[str], hidden=()):
    unknown = [k for k in value if k not in fields]
    if unknown:
        raise _unknown(path, unknown[0], [k for k in fields if k not in hidden])
    missing = [k for k in fields if k not in value and k not in defaults]
    if missing:
        raise ConfigError(f"{_join(path, missing[0])}: required by {name} and missing.")
    return {k: _coerce(v, fields[k], _join(path, k)) for k, v in value.items()}


def build(cls: type, table: dict, *, path: str = "", hidden=()):
    """``cls(**table)`` for a dataclass ``cls``, each value checked against its field's type.

    Raises :class:`ConfigError` for unknown keys, missing required keys, wrong types, and for
    the errors the class itself raises on bad values (with the path prefixed). ``hidden``: fields
    the caller sets itself, left out of the keys an unknown key's error lists.
    """
    if not isinstance(table, dict):
        raise ConfigError(f"{path or cls.__name__}: expected a table of {cls.__name__}'s fields; got {table!r}.")
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"build() takes a dataclass; got {cls!r}.")
    hints = _hints(cls)
    fields = {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}
    defaults = {f.name for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    kwargs = _check(cls.__name__, path, table, fields, defaults, hidden)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc


def _signature(fn: Callable, exclude=()) -> tuple[dict[str, Any], set[str]]:
    hints = _hints(fn)
    params = {name: p for name, p in inspect.signature(fn).parameters.items()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in exclude}
    fields = {name: hints.get(name, Any) for name in params}
    defaults = {name for name, p in params.items() if p.default is not p.empty}
    return fields, defaults


def call(fn: Callable, table: dict, *, path: str = "", fixed: dict | None = None):
    """``fn(**fixed, **table)``, each key of ``table`` checked against ``fn``'s signature."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: expected a table of {fn.__name__}'s parameters; got {table!r}.")
    fixed = fixed or {}
    fields, defaults = _signature(fn, exclude=fixed)
    kwargs = _check(fn.__name__, path, table, fields, defaults)
    try:
        return fn(**fixed, **kwargs)
    except (ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, OverflowError) or "Overflow when unpacking" in str(exc):  # torch's text for a huge size
            big = [f"{k} = {v}" for k, v in kwargs.items()
                   if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**31]
            raise ConfigError(f"{path or fn.__name__}: a size or count is too large for torch"
                              f"{' (' + ', '.join(big) + ')' if big else ''}; use smaller values.") from None
        raise ConfigError(f"{path or fn.__name__}: {exc}") from exc


def check_call(fn: Callable, table: dict, path: str = "", inferred: tuple[str, ...] = ()) -> None:
    """Checks ``table`` against ``fn``'s signature as :func:`call` would, without calling ``fn``
    (so nothing is loaded); ``inferred`` names parameters the caller will fill in."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: expected a table of {fn.__name__}'s parameters; got {table!r}.")
    fields, defaults = _signature(fn)
    _check(fn.__name__, path, table, fields, defaults | set(inferred))


def to_plain(obj):
    """A JSON-ready form of a config object: dataclasses become ``{"type": name, **fields}``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {"type": type(obj).__name__}
        for f in dataclasses.fields(obj):
            if f.init and not f.name.startswith("_"):
                out[f.name] = to_plain(getattr(obj, f.name))
        return out
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)
