"""The time of a run of each clustered-FL and personalisation peer against FedAvg's, side by side.

On Syn(0,0) (30 clients of 100 samples, logistic regression, the federated table's protocol: 1
local epoch, batch 10, lr 0.05), one process and one torch thread, the methods alternating in
each repeat: FedAvg with m = 5 (the table's m) and with m = 1, CFL (m = 5, thresholds that split),
local training only, FedAvg (m = 1) + 5 epochs of fine-tuning, and FedEM (m = 5). Each method's time is the
median over the repeats; the ratio is to FedAvg's (m = 5) time in the same process.

    python benchmarks/federated_peers_time.py              # 100 rounds, 5 repeats (about 3 minutes)
    python benchmarks/federated_peers_time.py --quick      # 5 rounds, 1 repeat (a smoke test)

writes ``benchmarks/results/federated_peers_time.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import most
import most.federated as fl
from most.federated import methods as F

RESULTS = Path(__file__).resolve().parent / "results"

#: name -> method builder; CFL's thresholds split Syn(0,0)'s single cluster after round 20
METHODS = {
    "FedAvg (m = 5)": lambda: F.FedAvg(5, server_lr=1.0),
    "FedAvg (m = 1)": lambda: F.FedAvg(1, server_lr=1.0),
    "CFL (m = 5)": lambda: F.CFL(5, eps1=0.4, eps2=0.4),
    "Local only": lambda: F.LocalOnly(),
    "FedAvg + fine-tuning (m = 1, 5 epochs)": lambda: F.FineTuning(1, server_lr=1.0, epochs=5),
    "FedEM (m = 5)": lambda: F.FedEM(5, server_lr=1.0),
}


def measure(rounds: int, repeats: int) -> dict:
    data = fl.fedprox_synthetic(0.0, 0.0, seed=0)
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=rounds, seed=0)
    seconds: dict[str, list[float]] = {name: [] for name in METHODS}
    accuracy: dict[str, float] = {}
    for _ in range(repeats):
        for name, build in METHODS.items():
            method = build()
            tic = time.perf_counter()
            result = fl.run_federated(data, model, method, config)
            seconds[name].append(time.perf_counter() - tic)
            accuracy[name] = result.mean_accuracy
            if isinstance(method, F.CFL):
                accuracy["CFL clusters"] = int(method.clusters.max()) + 1
    median = {name: statistics.median(v) for name, v in seconds.items()}
    base = median["FedAvg (m = 5)"]
    return {"rounds": rounds, "repeats": repeats, "seconds": seconds, "median": median,
            "ratio_to_fedavg": {name: t / base for name, t in median.items()}, "accuracy": accuracy}


def markdown(out: dict) -> str:
    lines = ["# Federated peers: time of a run against FedAvg's", "",
             f"Syn(0,0), 30 clients, logistic regression, {out['rounds']} rounds, one torch thread, the methods "
             f"alternating; median of {out['repeats']} repeats. Command: `{out['command']}` "
             f"(most {out['most']}, torch {out['torch']}, {out['machine']}).", "",
             "| method | seconds / run | × FedAvg (m = 5) | mean test accuracy |", "|---|---|---|---|"]
    for name, t in out["median"].items():
        lines.append(f"| {name} | {t:.2f} | {out['ratio_to_fedavg'][name]:.2f} | "
                     f"{100 * out['accuracy'][name]:.1f} % |")
    lines += ["", f"CFL made {out['accuracy']['CFL clusters']} clusters. Local only holds one model per "
              "client and evaluates each client on its own (n evaluations a round, not n × n); the "
              "fine-tuning is 5 more local epochs per client after the last round, and its m = 1 FedAvg "
              "trains a fifth of the pairs of m = 5. FedEM trains every model on every client, as FedAvg with "
              "m = 5 does, and adds each round the m models' losses on every training sample (its E-step) "
              "and the weights of each sample in the local loss."]
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
        handle.write(text)
    os.replace(handle.name, path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds, 1 repeat: a smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS / "federated_peers_time.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = measure(5, 1) if args.quick else measure(100, 5)
    out.update(command="python benchmarks/federated_peers_time.py" + (" --quick" if args.quick else ""),
               most=most.__version__, torch=torch.__version__, machine=f"{platform.machine()}, {os.cpu_count()} cores",
               python=sys.version.split()[0])
    write_atomic(args.out, json.dumps(out, indent=1) + "\n")
    write_atomic(args.out.with_suffix(".md"), markdown(out))
    print(markdown(out))


if __name__ == "__main__":
    main()
