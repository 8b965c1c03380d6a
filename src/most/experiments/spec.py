"""Experiment files: a TOML file -> the runs it stands for, every value checked before any work.

An experiment is either *federated* (tables ``[data]``, ``[model]``, ``[federated]``) or
*centralised* (a table ``[problem]``), plus one table per method under ``[methods]``::

    name = "synthetic"            # the results folder's name (default: the file's stem)
    seeds = [0, 1, 2]             # one run per seed and method
    checkpoint_every = 10         # rounds between checkpoints

    [data]                        # most.federated.fedprox_synthetic(model_shift=0, feature_shift=0)
    name = "fedprox_synthetic"
    model_shift = 0.0
    feature_shift = 0.0

    [model]                       # most.federated.logistic_regression(dim, n_classes)
    name = "logistic_regression"  # input and class sizes come from the data

    [federated]                   # most.federated.FederatedConfig
    rounds = 100

    [methods.MosT]                # most.federated.methods.MosT (the label names the class)
    n_models = 5
    server_lr = 5.0

    [methods."MosT paper"]        # any label, with `type` naming the class
    type = "MosT"
    n_models = 5
    combiner = { type = "MinNorm" }

    [sweep]                       # lists of values: every combination is a run
    "methods.MosT.server_lr" = [2.0, 5.0]
    "federated.lr" = [0.05, 0.1]

Tables map onto the library's own dataclasses and functions (:mod:`most.config`): unknown
keys and wrong types are rejected with the key's path and the allowed values. The run seed
goes to the method (centralised) or to ``FederatedConfig.seed`` (federated), and to the data
or problem generator unless the file fixes its ``seed``.
"""

from __future__ import annotations

import copy
import inspect
import dataclasses
import itertools
import json
import os
import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .._random import seeded
from ..config import ConfigError, build, call, check_call, did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Experiment", "RunSpec", "load_experiment", "parse_experiment", "apply_overrides", "check_runs",
           "data_key", "reads_files", "FEDERATED", "CENTRALISED"]


def _federated_registry():
    from .. import registry

    return registry.datasets(), registry.models(), registry.methods(registry.FEDERATED)


def _centralised_registry():
    from .. import registry

    return registry.problems(), registry.methods(registry.CENTRALISED)


FEDERATED = "federated"
CENTRALISED = "centralised"

_TOP = {"name", "seeds", "checkpoint_every", "engine", "data", "model", "federated", "problem", "methods", "sweep"}
#: Runtimes of a federated experiment: the in-process loop, or Flower's simulation engine
#: (``most-transport[flower]``; one virtual SuperNode per client, not checkpointed).
ENGINES = ("in-process", "flower")
# fields a method table may not set: the experiment sets them
_RESERVED = {"seed": "set by the experiment's `seeds` list", "progress": "set by `most run` (use --quiet)"}


@dataclass(frozen=True)
class RunSpec:
    """One run: a method, a seed and the values of the swept keys.

    ``config`` is the run's resolved table (what ``config.json`` stores);
    :meth:`build_without_data` and :meth:`load_data` return the typed objects the run needs.
    """

    kind: str
    label: str
    seed: int
    sweep: dict
    config: dict
    #: the tables of ``config`` (``"data"`` or ``"problem"``) whose ``seed`` is the run seed, filled in
    #: because the file leaves it unset; a seed the file (or a sweep) fixes is not listed
    run_seed_in: tuple[str, ...] = ()
    #: the objects built (and so checked) when the file was read, handed to the run itself
    _objects: dict | None = dataclasses.field(default=None, init=False, compare=False, repr=False)

    @property
    def group(self) -> str:
        """The method label plus the swept values: runs of one group differ only in the seed."""
        if not self.sweep:
            return self.label
        return self.label + " [" + ", ".join(f"{_short(k)}={v}" for k, v in self.sweep.items()) + "]"

    @property
    def folder(self) -> str:
        """``group/seedN`` with characters safe in file names."""
        return f"{safe_name(self.group)}/seed{self.seed}"

    def build_without_data(self) -> dict[str, Any]:
        """The typed objects that need no data: ``method``, and ``config`` (federated). Built once,
        when the experiment is read: the checks and the run use the same objects (a method's
        state is reset by the loop at the start of every run)."""
        objects = self._objects
        if objects is None:
            objects = _build(self)
            object.__setattr__(self, "_objects", objects)
        return objects

    def load_data(self) -> dict[str, Any]:
        """``data`` and ``model`` (federated) or ``problem`` (centralised)."""
        return _load_data(self)


def _short(key: str) -> str:
    parts = key.split(".")
    return parts[-1] if parts[0] == "methods" else ".".join(parts[-2:]) if len(parts) > 1 else key


def safe_name(text: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("_")
    return safe if safe.strip(".") else "run"  # never "", "." or "..": a folder inside runs/


@dataclass(frozen=True)
class Experiment:
    """A parsed experiment file: its name, kind, and the runs it expands to."""

    name: str
    kind: str
    runs: tuple[RunSpec, ...]
    checkpoint_every: int
    source: str  # the file's text, stored with the results

    def __len__(self) -> int:
        return len(self.runs)


def load_experiment(path: str | os.PathLike, overrides: Sequence[str] = ()) -> Experiment:
    """Reads and checks an experiment file; every run is built once (without data) so that a
    bad value anywhere is reported before any run starts. ``overrides`` are ``KEY=VALUE``
    settings applied over the file's values first (:func:`apply_overrides`; ``most run --set``),
    and checked with them."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No experiment file at {path}. Write one (see `most run --help` for an example).")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark, as some editors write, is not part of the TOML
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: not UTF-8 text: byte {exc.start} (line {line}) is {raw[exc.start]:#04x}. "
                          "Save the file as UTF-8.") from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    if overrides:
        table = apply_overrides(table, overrides)
        text = text.rstrip("\n") + "\n\n# Applied over this file by `most run --set`:\n" + "".join(
            f"#   {item}\n" for item in overrides)
    return parse_experiment(table, default_name=path.stem, source=text)


def apply_overrides(table: dict, overrides: Sequence[str]) -> dict:
    """``table`` (a copy) with each ``KEY=VALUE`` of ``overrides`` set: ``KEY`` a dotted TOML
    key (``methods.MosT.server_lr``; quote a part with spaces, ``methods."MosT (paper)".lr``),
    ``VALUE`` a TOML value (``3``, ``0.5``, ``"cuda"``, ``[0, 1]``, ``true``) or a bare word,
    taken as a string (``federated.device=cuda``). Missing tables on the way are created; the
    result is checked as a file is, so a misspelt key gets the file's message.

    >>> apply_overrides({"methods": {"MosT": {"server_lr": 5.0}}}, ["methods.MosT.server_lr=3", "seeds=[0, 1]"])
    {'methods': {'MosT': {'server_lr': 3}}, 'seeds': [0, 1]}
    """
    out = copy.deepcopy(table)
    for item in overrides:
        key, sep, value = str(item).partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set methods.MosT.server_lr=3.")
        try:
            path = _key_path(tomllib.loads(f"{key} = 0"))
        except tomllib.TOMLDecodeError:
            raise ConfigError(f"--set {item!r}: {key!r} is not a key of the file; write it as in TOML, with a "
                              "part that has spaces in quotes: methods.\"MosT (paper)\".server_lr=3.") from None
        try:
            parsed = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            if not _BARE_WORD.fullmatch(value):  # e.g. "[1," : not taken for a string by mistake
                raise ConfigError(f"--set {item!r}: {value!r} is not a TOML value; write a number, true/false, "
                                  "a list [0, 1], or a string in quotes (a single word needs none).") from None
            parsed = value  # a bare word: a string
        node = out
        for depth, part in enumerate(path[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(path[:depth + 1])} is {node!r} in the file, not a "
                                  "table; set it as a whole instead.")
        node[path[-1]] = parsed
    return out


#: a value ``--set`` takes as a string without quotes: one word (cuda, femnist, cuda:1, ./data)
_BARE_WORD = re.compile(r"[A-Za-z_./][\w.\-/:]*")


def _key_path(table: dict) -> list[str]:
    """The parts of the one key of a parsed ``KEY = 0``: ``{"a": {"b": 0}}`` -> ``["a", "b"]``."""
    path = []
    while isinstance(table, dict):
        ((part, table),) = table.items()
        path.append(part)
    return path


def parse_experiment(table: dict, *, default_name: str = "experiment", source: str = "") -> Experiment:
    """:func:`load_experiment` for a table already read."""
    kind, engine = _check_kind(table)
    name = _check_name(table.get("name", default_name), given="name" in table)
    seeds = table.get("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise ConfigError(f"seeds: expected a non-empty list of integers; got {seeds!r}.")
    wrong = [s for s in seeds if not 0 <= s < 2**64]
    if wrong:
        raise ConfigError(f"seeds: each seed must be an int in [0, 2**64); got {wrong[0]}.")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds: repeated seeds in {seeds!r}.")
    every = table.get("checkpoint_every", 10)
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ConfigError(f"checkpoint_every: expected a positive integer; got {every!r}.")
    methods = table.get("methods")
    if not isinstance(methods, dict) or not methods:
        raise ConfigError("methods: missing. Add at least one table [methods.LABEL], e.g. [methods.MosT] "
                          "n_models = 5.")
    for label, m in methods.items():
        if not label.strip():  # a label names the runs' folder and the report's row
            raise ConfigError(f"methods.{label!r}: a method's label names its runs' folder and its row in the report, "
                              "so it may not be empty or blank; write one, e.g. [methods.MosT] or "
                              "[methods.\"MosT (paper)\"] with type = \"MosT\".")
        if not isinstance(m, dict):
            raise ConfigError(f"methods.{label}: expected a table of the method's fields; got {m!r}.")
    sweep = _check_sweep(table, methods)
    runs = _runs(table, kind, engine, methods, sweep, seeds)
    for run in runs:  # a folder name longer than a file system takes fails only when the run writes it
        part = run.folder.split("/")[0]
        if len(part.encode("utf-8")) > _FOLDER_BYTES:
            label = run.label if len(run.label) <= 60 else run.label[:57] + "..."
            raise ConfigError(
                f"methods.{label}: its runs go to a folder named after the label"
                f"{' and the swept values' if run.sweep else ''}, {len(part.encode('utf-8'))} characters long; at "
                f"most {_FOLDER_BYTES} fit in a folder name. Shorten the label{' or the swept values' if run.sweep else ''}.")
    folders = [r.folder for r in runs]
    if len(set(folders)) != len(folders):
        dup = next(f for f in folders if folders.count(f) > 1)
        a, b = [r for r in runs if r.folder == dup][:2]
        if a.label != b.label:
            why = (f"the labels {a.label!r} and {b.label!r} give one folder name (folder names keep ASCII letters, "
                   "digits and . _ -); rename one")
        elif a.sweep == b.sweep:
            why = f"the sweep repeats the value(s) {a.sweep}; give each value once"
        else:
            why = (f"the swept values {a.sweep} and {b.sweep} of {a.label!r} are written alike in a folder name; "
                   "give distinct values")
        raise ConfigError(f"methods: two runs would share the folder {dup!r}: {why}.")
    return Experiment(name=name, kind=kind, runs=tuple(runs), checkpoint_every=every, source=source)


def _check_kind(table) -> tuple[str, str]:
    """The experiment's kind (federated or centralised) and engine, from its top-level keys."""
    if not isinstance(table, dict):
        raise ConfigError(f"An experiment is a table of keys such as name, seeds, methods (a dict); got a "
                          f"{type(table).__name__}.")
    unknown = [k for k in table if k not in _TOP]
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown top-level key{did_you_mean(unknown[0], sorted(_TOP))}. "
                          f"Allowed: {', '.join(sorted(_TOP))}.")
    for key in ("problem", "data", "model", "federated", "methods", "sweep"):
        if key in table and not isinstance(table[key], dict):
            raise ConfigError(f"{key}: expected a table ([{key}] with its keys below it); got {table[key]!r}.")
    if "problem" in table and ("data" in table or "federated" in table or "model" in table):
        raise ConfigError("An experiment is federated ([data], [model], [federated]) or centralised ([problem]), "
                          "not both; remove one set of tables.")
    if "problem" in table:
        kind = CENTRALISED
    elif "data" in table:
        kind = FEDERATED
        if "model" not in table:
            raise ConfigError("model: missing. A federated experiment needs a [model] table, e.g. "
                              "[model] name = \"logistic_regression\".")
    else:
        raise ConfigError("An experiment needs a [problem] table (centralised) or [data] and [model] tables "
                          "(federated).")
    engine = table.get("engine", "in-process")
    if engine not in ENGINES:
        raise ConfigError(f"engine: unknown engine {engine!r}{did_you_mean(engine, ENGINES)}; "
                          f"choose from {', '.join(ENGINES)}.")
    if "engine" in table and kind != FEDERATED:
        raise ConfigError("engine: only a federated experiment ([data], [model]) runs on an engine; remove it.")
    if engine == "flower":
        import importlib.util

        if importlib.util.find_spec("flwr") is None:
            raise ConfigError("engine = \"flower\" needs Flower: pip install 'most-transport[flower]'.")
    return kind, engine


def _check_sweep(table: dict, methods: dict) -> dict:
    """The table ``[sweep]`` (dotted keys into the file, each to a non-empty list of values)."""
    sweep = table.get("sweep", {})
    if not isinstance(sweep, dict):
        raise ConfigError(f"sweep: expected a table of dotted keys to lists of values; got {sweep!r}.")
    for key, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"sweep.\"{key}\": expected a non-empty list of values; got {values!r}.")
        head = key.split(".")
        if head[0] not in ("data", "model", "federated", "problem", "methods") or len(head) < 2:
            raise ConfigError(f"sweep.\"{key}\": a swept key is a dotted path into the file, such as "
                              "\"methods.MosT.diversity\" or \"federated.lr\".")
        if head[0] == "methods" and head[1] not in methods:
            raise ConfigError(f"sweep.\"{key}\": no method labelled {head[1]!r}; labels: {', '.join(methods)}.")
        if head[0] == "methods" and len(head) < 3:
            raise ConfigError(f"sweep.\"{key}\": name the field of {head[1]!r} to sweep too, such as "
                              f"\"methods.{head[1]}.lr\".")
        if head[0] in ("data", "model", "federated", "problem") and head[0] not in table:
            raise ConfigError(f"sweep.\"{key}\": this experiment has no [{head[0]}] table.")
    return sweep


def _runs(table: dict, kind: str, engine: str, methods: dict, sweep: dict, seeds: list[int]) -> list[RunSpec]:
    """One run per method, combination of swept values and seed; every value checked now, before any work."""
    runs = []
    for label, method_table in methods.items():
        keys = [k for k in sweep if not k.startswith("methods.") or k.split(".")[1] == label]
        for values in itertools.product(*(sweep[k] for k in keys)):
            for seed in seeds:
                resolved = {k: copy.deepcopy(table[k]) for k in ("data", "model", "federated", "problem") if k in table}
                resolved["method"] = copy.deepcopy(method_table)
                if "engine" in table:
                    resolved["engine"] = engine
                for key, value in zip(keys, values):
                    _set(resolved, key, value, label)
                config, run_seed_in = _with_seed(kind, resolved, seed)
                run = RunSpec(kind=kind, label=label, seed=seed, sweep=dict(zip(keys, values)), config=config,
                              run_seed_in=run_seed_in)
                run.build_without_data()  # every value checked now, before any work (and built once)
                runs.append(run)
    return runs


#: the longest run folder name (bytes): file systems take 255, and the library's temporary files add to a name
_FOLDER_BYTES = 200

#: characters a name may not hold: path separators and those Windows forbids in file names
_NOT_IN_NAMES = set('/\\:*?"<>|')
_NAME_RULE = ("A name is a folder name: letters, digits, spaces and punctuation other than "
              "/ \\ : * ? \" < > |, no control characters, not '.' or '..'.")


def _check_name(name, *, given: bool) -> str:
    """The experiment's name, which names its folder under --out: refused unless it is one plain
    folder name (so results never land outside --out, and --restart never deletes files there)."""
    where = "name" if given else "name (from the file's name; set `name = \"...\"` in the file)"
    if not isinstance(name, str):
        raise ConfigError(f"{where}: expected a string; got {name!r}. {_NAME_RULE}")
    bad = sorted({c for c in name if c in _NOT_IN_NAMES or unicodedata.category(c) == "Cc"})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise ConfigError(f"{where}: {name!r} holds {shown}, not allowed in a name. {_NAME_RULE}")
    if not name.strip() or name.strip(".") == "" or name != name.strip():
        raise ConfigError(f"{where}: {name!r} is not a usable folder name (empty, only dots, or leading or "
                          f"trailing spaces). {_NAME_RULE}")
    if len(name.encode("utf-8")) > 200:
        raise ConfigError(f"{where}: {len(name.encode('utf-8'))} bytes; at most 200. {_NAME_RULE}")
    return name


def _set(resolved: dict, key: str, value, label: str) -> None:
    parts = key.split(".")
    if parts[0] == "methods":
        parts = ["method", *parts[2:]]
    node = resolved
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"sweep.\"{key}\": {p} is not a table.")
    node[parts[-1]] = value


def _with_seed(kind: str, resolved: dict, seed: int) -> tuple[dict, tuple[str, ...]]:
    """``resolved`` with the run's ``seed``, also given to the data or problem generator when it
    takes one and the file does not fix it; and the tables that got it (:attr:`RunSpec.run_seed_in`)."""
    resolved = dict(resolved, seed=seed)
    source = "problem" if kind == CENTRALISED else "data"
    if "seed" not in resolved[source]:
        fn = _source_fn(kind, resolved[source])
        if fn is not None and "seed" in inspect.signature(fn).parameters:
            resolved[source] = dict(resolved[source], seed=seed)
            return resolved, (source,)
    return resolved, ()


def _named(registry: dict, table: dict, path: str) -> tuple[Callable, dict]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: expected a table; got {table!r}.")
    if "name" not in table:
        raise ConfigError(f"{path}.name: missing; one of {', '.join(registry)}.")
    name = table["name"]
    if not isinstance(name, str):
        raise ConfigError(f"{path}.name: expected a string, one of {', '.join(registry)}; got {name!r}.")
    if name not in registry:
        raise ConfigError(f"{path}.name: unknown {path} {name!r}{did_you_mean(name, registry)}. "
                          f"Allowed: {', '.join(registry)}.")
    rest = {k: v for k, v in table.items() if k != "name"}
    return registry[name], rest


def _source_fn(kind: str, table: dict):
    registry = _centralised_registry()[0] if kind == CENTRALISED else _federated_registry()[0]
    if isinstance(table, dict) and isinstance(table.get("name"), str) and table["name"] in registry:
        return registry[table["name"]]
    return None


def _method(registry: dict, label: str, table: dict, seed: int | None):
    table = dict(table)
    type_name = table.pop("type", label)
    if not isinstance(type_name, str):
        raise ConfigError(f"methods.{label}.type: expected a string naming a method, one of {', '.join(registry)}; "
                          f"got {type_name!r}.")
    if type_name not in registry:
        where = f"methods.{label}.type" if type_name != label else f"methods.{label}"
        raise ConfigError(f"{where}: unknown method {type_name!r}{did_you_mean(type_name, registry)}. Allowed: {', '.join(registry)}; "
                          "a table whose label is not a method name needs `type = \"...\"`.")
    for key, why in _RESERVED.items():
        if key in table:
            raise ConfigError(f"methods.{label}.{key}: not allowed here ({why}).")
    cls = registry[type_name]
    if seed is not None and any(f.name == "seed" for f in dataclasses.fields(cls)):
        table["seed"] = seed
    return build(cls, table, path=f"methods.{label}", hidden=tuple(_RESERVED))


def _build(run: RunSpec) -> dict[str, Any]:
    """The method (and the federated config); checks the data/model/problem tables without loading."""
    cfg = run.config
    if run.kind == FEDERATED:
        from ..federated import FederatedConfig

        data_fns, model_fns, methods = _federated_registry()
        fed = cfg.get("federated", {})
        if not isinstance(fed, dict):
            raise ConfigError(f"federated: expected a table of FederatedConfig's fields; got {fed!r}.")
        if "seed" in fed:
            raise ConfigError("federated.seed: not allowed here (set by the experiment's `seeds` list).")
        out = {"config": build(FederatedConfig, dict(fed, seed=run.seed), path="federated"),
               "method": _method(methods, run.label, cfg["method"], None)}
        check_call(*_named(data_fns, cfg["data"], "data"), "data")
        check_call(*_named(model_fns, cfg["model"], "model"), "model", inferred=("dim", "n_classes"))
        return out
    problem_fns, methods = _centralised_registry()
    check_call(*_named(problem_fns, cfg["problem"], "problem"), "problem")
    return {"method": _method(methods, run.label, cfg["method"], run.seed)}


def data_key(run: RunSpec) -> str:
    """What ``run`` loads (its data and model, or its problem), as a key: runs with one key share
    their loaded objects."""
    return json.dumps({k: run.config.get(k) for k in ("data", "model", "problem")}, sort_keys=True, default=str)


def reads_files(run: RunSpec) -> bool:
    """Whether ``run``'s data is read from files (its loader takes a ``path``): data that the
    table alone does not determine, since the files may differ from one call to the next."""
    if run.kind != FEDERATED:
        return False
    fn = _source_fn(run.kind, run.config["data"])
    return fn is not None and "path" in inspect.signature(fn).parameters


def check_runs(experiment: Experiment, runs=None, *, cache: dict | None = None,
               digests: dict | None = None) -> None:
    """The checks of ``runs`` (default: all the experiment's) that need the data: a federated
    method's ``check(n_clients)`` (e.g. MosT refuses more models than clients), a centralised
    method's ``prepare`` and its assignment's ``reset`` on the problem (e.g. MosT refuses more
    models than objectives), and the model built for the data. The same checks the run makes at
    its start, made for every run before any starts.

    Each distinct data set or problem is loaded once, one at a time. Raises :class:`ConfigError`
    naming the run's group and the method's table. With ``cache`` (the runner's one-entry data
    cache), a data set found there is not loaded again, and the last one loaded is left there.
    With ``digests``, each federated data set's ``(digest, source)`` is recorded there, by
    :func:`data_key`.
    """
    by_source: dict[str, list[RunSpec]] = {}
    for run in experiment.runs if runs is None else runs:
        by_source.setdefault(data_key(run), []).append(run)
    for key, group in by_source.items():
        loaded = cache[key] if cache is not None and key in cache else group[0].load_data()
        if digests is not None and "data" in loaded:
            digests[key] = (loaded["data"].digest(), loaded["data"].source)
        for run in group:
            objects = {**run.build_without_data(), **loaded}
            try:
                _check_sizes(run, objects)
            except ConfigError:
                raise
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"methods.{run.label} ({run.group}, seed {run.seed}): {exc}") from exc
        if cache is not None:  # one data set in memory at a time, as the runner keeps it
            cache.clear()
            cache[key] = loaded
        del loaded


def _check_sizes(run: RunSpec, objects: dict) -> None:
    method = objects["method"]
    if run.kind == FEDERATED:  # the runtime's own checks: sizes, model vs data, splits, argument kinds
        from ..federated.checks import check_inputs

        check_inputs(objects["data"], objects["model"], method, objects["config"])
        return
    from ..problems import MixedRegression

    source = objects["problem"]
    train = source.problem("train") if isinstance(source, MixedRegression) else source
    problem = method.prepare(train, seeded(method.seed + 7919))
    assignment, _, combiner = method.components()
    assignment.reset(problem.n_objectives, method.n_models, seeded(method.seed))
    combiner.resolve(problem.coordinates)  # a parameter's name, e.g. MinNorm(coordinates="last")


def _load_data(run: RunSpec) -> dict[str, Any]:
    """Loads the data and builds the model (federated), or builds the problem (centralised)."""
    cfg = run.config
    if run.kind == FEDERATED:
        data_fns, model_fns, _ = _federated_registry()
        data = call(*_named(data_fns, cfg["data"], "data"), path="data")
        model_fn, model_args = _named(model_fns, cfg["model"], "model")
        return {"data": data, "model": call(model_fn, model_args, path="model",
                                            fixed=_model_sizes(model_fn, data, model_args))}
    problem_fns, _ = _centralised_registry()
    return {"problem": call(*_named(problem_fns, cfg["problem"], "problem"), path="problem")}


def _model_sizes(model_fn, data, args: dict) -> dict:
    """The model's input and output sizes, from the data unless the table sets them."""
    import math

    sizes = {"dim": math.prod(data.input_shape), "n_classes": data.n_classes, "input_shape": data.input_shape}
    if len(data.input_shape) == 3:  # images: (channels, side, side)
        sizes.update(in_channels=data.input_shape[0], side=data.input_shape[1])
    params = inspect.signature(model_fn).parameters
    return {k: v for k, v in sizes.items() if k in params and k not in args}
