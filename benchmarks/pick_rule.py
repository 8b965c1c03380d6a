"""How should a client pick its model? Rules compared on validation data only.

The paper's protocol has each client pick the model that is most accurate on its validation
split: about 20 samples on Fashion-MNIST, FEMNIST and the synthetic data, so the pick is noisy.
This script compares that rule with rules that also use the client's training data, without
looking at any test split: each client's validation split is cut into two halves; a rule picks
with the training data and one half, and is scored by the accuracy of its pick on the other half
(and the other way round, averaged). The pick is made with the final models of one run per seed
(server step ``--server-lr``), the protocol of ``most bench federated``.

Rules:

* ``validation accuracy`` — the paper's: best accuracy on the (half) validation split;
* ``pooled loss`` — lowest mean loss on training + (half) validation samples
  (:func:`most.federated.evaluation.pooled_loss`; ``FederatedResult.loss_choice`` on the full split);
* ``pooled accuracy`` — best accuracy on training + (half) validation samples;
* ``training loss`` — lowest training loss;
* ``Γ owner`` — the model holding the client's largest share of the last plan (MosT, IFCA).

Writes ``benchmarks/results/pick_rule.json`` and ``pick_rule.md`` (one section per dataset;
later runs add sections).

    .venv/bin/python benchmarks/pick_rule.py --dataset fashion --method MosT --method IFCA --method FedAvg
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from most.bench.federated import METHODS, FederatedBenchConfig, _data
from most.federated import FederatedConfig, run_federated
from most.federated.evaluation import paired_difference, pooled_loss, select_by_loss, select_models
from most.federated.runtime import Padded, evaluate, pad_split

RESULTS = Path(__file__).parent / "results"
RULES = ("validation accuracy", "pooled loss", "pooled accuracy", "training loss", "Γ owner")


def _halves(val: Padded) -> tuple[Padded, Padded]:
    """Each client's validation samples, alternately into two halves."""
    rank = val.w.cumsum(1) - 1
    out = []
    for parity in (0, 1):
        w = val.w * (rank % 2 == parity)
        out.append(Padded(val.x, val.y, w, w.sum(1).long()))
    return out[0], out[1]


def _picks(train_loss, train_acc, n_train, sel_loss, sel_acc, n_sel, owner) -> dict:
    picks = {
        "validation accuracy": select_models(sel_acc.nan_to_num(-1.0)),
        "pooled loss": select_by_loss(pooled_loss(train_loss, sel_loss, n_train, n_sel)),
        "pooled accuracy": select_models(pooled_loss(train_acc, sel_acc, n_train, n_sel).nan_to_num(-1.0)),
        "training loss": select_by_loss(train_loss),
    }
    if owner is not None:
        picks["Γ owner"] = owner
    return picks


def _score(choice, acc, counts) -> float:
    """Mean over the clients that have samples in the scoring half."""
    has = counts > 0
    return float(acc.gather(1, choice[:, None]).squeeze(1)[has].mean())


def run(dataset: str, methods: list[str], seeds: list[int], server_lr: float, data_path: str | None) -> dict:
    bench = FederatedBenchConfig(dataset=dataset, model="linear", data_path=data_path, progress=False)
    protocol = (FederatedConfig(rounds=100, batch_size=10, eval_every=0) if dataset == "synthetic"
                else FederatedConfig(rounds=50, batch_size=20, eval_every=0))
    out = {name: [] for name in methods}
    for seed in seeds:
        data, model = _data(bench, seed)
        train, val = pad_split(data, "train"), pad_split(data, "val")
        a, b = _halves(val)
        for name in methods:
            tic = time.perf_counter()
            method = METHODS[name][0](bench.n_models, server_lr, None)
            res = run_federated(data, model, method, dataclasses.replace(protocol, seed=seed))
            tr_loss, tr_acc, _ = evaluate(model, res.params, train)
            (a_loss, a_acc, _), (b_loss, b_acc, _) = evaluate(model, res.params, a), evaluate(model, res.params, b)
            plans = [log.plan for log in res.history if log.plan is not None]
            owner = plans[-1].argmax(1) if plans else None
            scores = {}
            for (sl, sa, sn), (ol, oa, on) in (((a_loss, a_acc, a.counts), (b_loss, b_acc, b.counts)),
                                               ((b_loss, b_acc, b.counts), (a_loss, a_acc, a.counts))):
                for rule, choice in _picks(tr_loss, tr_acc, train.counts, sl, sa, sn, owner).items():
                    scores.setdefault(rule, []).append(_score(choice, oa.nan_to_num(0.0), on))
            row = {"seed": seed, "seconds": time.perf_counter() - tic,
                   **{rule: float(np.mean(v)) for rule, v in scores.items()}}
            out[name].append(row)
            print(f"{dataset} {name} seed {seed}: " + ", ".join(f"{r} {100 * row[r]:.2f}" for r in RULES if r in row),
                  file=sys.stderr, flush=True)
    return out


def table(dataset: str, rows: dict, command: str) -> str:
    lines = [f"## {dataset}", "", "```", command, "```", "",
             "Accuracy (%) of each rule's pick on the held-out validation half, mean ± std over seeds; "
             "in brackets, the rule minus `validation accuracy`, paired 95 % interval.", "",
             "| method | " + " | ".join(RULES) + " |", "|---" * (len(RULES) + 1) + "|"]
    for name, runs in rows.items():
        cells = []
        base = [r["validation accuracy"] for r in runs]
        for rule in RULES:
            if rule not in runs[0]:
                cells.append("–")
                continue
            v = np.array([r[rule] for r in runs])
            cell = f"{100 * v.mean():.2f} ± {100 * v.std(ddof=1):.2f}" if len(v) > 1 else f"{100 * v.mean():.2f}"
            if rule != "validation accuracy" and len(v) > 1:
                p = paired_difference(v, base)
                cell += f" ({100 * p['mean']:+.2f} [{100 * p['low']:+.2f}, {100 * p['high']:+.2f}])"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=("synthetic", "fashion", "femnist"), required=True)
    parser.add_argument("--method", action="append", required=True, choices=sorted(METHODS))
    parser.add_argument("--seed", type=int, action="append")
    parser.add_argument("--server-lr", type=float, default=3.0)
    parser.add_argument("--data-path", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    seeds = args.seed or [0, 1, 2, 3, 4]
    rows = run(args.dataset, args.method, seeds, args.server_lr, args.data_path)
    label = {"synthetic": "Syn(0,0)", "fashion": "Fashion-MNIST", "femnist": "FEMNIST"}[args.dataset]
    command = ".venv/bin/python benchmarks/pick_rule.py " + " ".join(sys.argv[1:] if argv is None else argv)
    path = RESULTS / "pick_rule.json"
    store = json.loads(path.read_text()) if path.exists() else {}
    store[label] = {"command": command, "server_lr": args.server_lr, "methods": rows}
    path.write_text(json.dumps(store, indent=1))
    render(store)


def render(store: dict) -> None:
    """Writes ``pick_rule.md`` from the stored results (every dataset measured so far)."""
    sections = [table(k, v["methods"], v["command"]) for k, v in store.items()]
    (RESULTS / "pick_rule.md").write_text(_HEADER + "\n\n" + "\n\n".join(sections) + "\n")


_HEADER = """# Which model should a client use? Pick rules on validation data

Made by `benchmarks/pick_rule.py` (its docstring describes the protocol). No test split is read:
each client's validation split is halved, a rule picks with the training data and one half, and
its pick is scored on the other half (both ways, averaged). The federated tables report the paper's
rule (`validation accuracy`) and, beside it, the `pooled loss` rule chosen here.

The rules that use the training data beat the paper's for MosT on every data set (pooled loss: +1.4,
+2.3 and +2.7 points on Syn(0,0), Fashion-MNIST and FEMNIST, each interval excluding 0), and for IFCA
and linearization wherever measured (significant except IFCA on Syn(0,0)). For FedAvg, whose m models
are near-copies, the pick hardly matters on Syn(0,0) (±0.1) and gains 1.6 points on Fashion-MNIST (an
interval just containing 0). `pooled loss` and `pooled accuracy` are at most half a point apart everywhere; the loss
was taken because it is continuous (with tens of samples, several models often have the same
accuracy). The Γ owner (MosT's own assignment) equals the pooled-loss pick on Syn(0,0) and FEMNIST and
is worse on Fashion-MNIST, where the balanced plan puts some clients on their second-best model. An
exploratory run before this script also printed test accuracies of these rules; the choice rests on
the validation numbers below."""


if __name__ == "__main__":
    main()
