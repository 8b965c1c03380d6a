"""MosT on Flower: the synthetic table through Flower's simulation engine, and its overhead.

For each method and seed, the same run (FedProx Syn(0,0), 30 clients, the protocol of
``examples/synthetic.toml``) goes through

* the in-process runtime, ``run_federated(..., FederatedConfig(pair_seeds=True))``, and
* Flower's simulation engine (``most.flower.run_simulation``: 30 virtual SuperNodes on Ray),

and the script records both accuracies (they agree to float precision: same Gamma, same
models), the wall time of each, Ray's start-up and the per-round overhead of Flower. With
``--deployment`` it also times a real local deployment (SuperLink + 3 SuperNodes, TLS and
SuperNode authentication, ``tests/flower/_deploy.py``).

Writes ``benchmarks/results/flower.md`` and ``flower.json`` (each phase updates its part)::

    .venv/bin/python benchmarks/flower.py --phase table    # 3 methods x 3 seeds x 100 rounds, ~45 min on 2 cores
    .venv/bin/python benchmarks/flower.py --phase timing --deployment   # on an idle machine, ~6 min
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from most._kernels import cpu_kernels
from most.bench import mean_std
from most.federated import methods as F

ROOT = Path(__file__).resolve().parents[1]

#: name -> builder: the library's methods with the server steps of examples/synthetic.toml.
METHODS = {
    "MosT": lambda: F.MosT(5, server_lr=5.0),
    "IFCA": lambda: F.IFCA(5, server_lr=3.0),
    "FedAvg": lambda: F.FedAvg(5, server_lr=3.0),
}


def _one(name: str, seed: int, rounds: int) -> dict:
    import most.federated as fl
    from most.flower import run_simulation

    data = fl.fedprox_synthetic(0.0, 0.0, n_clients=30, seed=seed)
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=rounds, local_epochs=1, batch_size=10, lr=0.05, eval_every=5, seed=seed,
                                pair_seeds=True)
    tic = time.perf_counter()
    ref = fl.run_federated(data, model, METHODS[name](), config)
    in_process = time.perf_counter() - tic
    ends = []  # when each round ended

    tic = time.perf_counter()
    res = run_simulation(data, model, METHODS[name](), config, callback=lambda log, params: ends.append(time.perf_counter()))
    flower = time.perf_counter() - tic
    round_seconds = (ends[-1] - ends[0]) / (rounds - 1) if rounds > 1 else ends[0] - tic
    return {
        "method": name, "seed": seed, "rounds": rounds,
        "in_process": {"accuracy": ref.mean_accuracy, "accuracy_loss_pick": _loss_pick_accuracy(ref),
                       "seconds": in_process, "per_round": in_process / rounds},
        "flower": {"accuracy": res.mean_accuracy, "accuracy_loss_pick": _loss_pick_accuracy(res),
                   "seconds": flower, "per_round": round_seconds,
                   "startup": ends[0] - tic - round_seconds, "missing": res.missing},
        "max_param_diff": float((res.params - ref.params).abs().max()),
        "max_gamma_diff": max([float((a.plan - b.plan).abs().max()) for a, b in zip(res.history, ref.history)
                               if a.plan is not None] or [0.0]),
    }


def _loss_pick_accuracy(result) -> float:
    """Mean test accuracy when each client uses its lowest-loss model (``result.loss_choice``)."""
    from most.federated.evaluation import client_accuracy

    return float(client_accuracy(result.test_accuracy, result.loss_choice).mean())


def _flower_deploy():
    """The module ``tests/flower/_deploy.py``, loaded from its path (the tests' folder is not a
    package, and nothing is added to ``sys.path``)."""
    import importlib.util

    name = "_most_flower_deploy"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "flower" / "_deploy.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before running it: its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def _deployment(rounds: int) -> dict:
    """A MosT run on a local TLS + authentication deployment (the tests' harness,
    ``tests/flower/_deploy.py``, loaded from its file)."""
    deployment = _flower_deploy().deployment

    out = Path(tempfile.mkdtemp(prefix="most_flower_"))
    tic = time.perf_counter()
    with deployment(3) as dep:
        up = time.perf_counter() - tic
        run = dep.run_app(ROOT / "examples" / "flower", run_config={
            "num-clients": 3, "n-models": 2, "warmup-rounds": 0, "rounds": rounds, "eval-every": rounds,
            "samples-per-client": 60, "timeout": 300.0, "out": str(out)})
    if run.status != "finished:completed":
        raise RuntimeError(f"The deployment run ended {run.status}:\n{run.output[-3000:]}")
    result = json.loads((out / "result.json").read_text())
    return {"supernodes": 3, "clients": 3, "models": 2, "rounds": rounds, "start_seconds": up,
            "seconds": run.wall_s, "per_round": result["seconds"] / rounds, "accuracy": result["mean_accuracy"]}


def _kernels(part: dict, lead: str = " (", end: str = ")") -> str:
    """The torch CPU kernels a part was run with, where recorded (``ATEN_CPU_CAPABILITY`` chooses them)."""
    return f"{lead}torch's {part['cpu_kernels']} CPU kernels{end}" if part.get("cpu_kernels") else ""


def write(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "flower.json").write_text(json.dumps(results, indent=1))
    lines = ["# MosT on Flower: the synthetic table and the engine's overhead", "",
             f"Machine: {results['machine']}; torch {results['torch']}, flwr {results['flwr']}."]
    table = results.get("table")
    if table:
        runs = table["runs"]
        loss_pick = all("accuracy_loss_pick" in r["flower"] for r in runs)  # tables made before it lack it
        lines += [
            "", "## The synthetic table through Flower", "", f"Command: `{table['command']}`{_kernels(table)}", "",
            "FedProx Syn(0,0), 30 clients (30 virtual SuperNodes), 5 models, K = 1 local epoch, batch 10, lr 0.05, "
            f"{runs[0]['rounds']} rounds; server steps of `examples/synthetic.toml` (not tuned here). "
            "Mean test accuracy (%) of the clients with their validation-chosen model, mean ± std over seeds "
            f"{sorted({r['seed'] for r in runs})}. The in-process column is `run_federated` with `pair_seeds=True`."
            + (" The loss pick: each client uses its model with the lowest loss on its training and validation data "
               "(`result.loss_choice`; the Flower clients report those losses at the final evaluation)."
               if loss_pick else ""),
        ]
        head = "| method | in-process | Flower simulation |" + (
            " in-process, loss pick | Flower, loss pick |" if loss_pick else "")
        lines += ["", head + " max abs. Γ difference | max abs. parameter difference |",
                  "|---|---|---|" + ("---|---|" if loss_pick else "") + "---|---|"]
        for name in dict.fromkeys(r["method"] for r in runs):
            rs = [r for r in runs if r["method"] == name]
            keys = ("accuracy", "accuracy_loss_pick") if loss_pick else ("accuracy",)
            cells = [mean_std([r[side][k] for r in rs], 100) for k in keys for side in ("in_process", "flower")]
            lines.append(f"| {name} | {' | '.join(cells)} | "
                         f"{max(r['max_gamma_diff'] for r in rs):.1e} | {max(r['max_param_diff'] for r in rs):.1e} |")
        lines += ["", "The accuracies are the same because the runs are: with `pair_seeds=True` both runtimes draw "
                  "the same batches, and Γ and the models agree to float precision. (These runs shared the machine "
                  "with other work; their times are not the overhead measurement below.)"]
    timing = results.get("timing")
    if timing:
        r = timing["run"]
        a, b = r["in_process"]["per_round"], r["flower"]["per_round"]
        lines += [
            "", "## Overhead of Flower's simulation engine", "",
            f"Command: `{timing['command']}` (idle machine{_kernels(timing, ', ', '')})", "",
            f"MosT, Syn(0,0), 30 clients, 5 models, {r['rounds']} rounds, seed {r['seed']}:", "",
            "| runtime | seconds per round | start-up (s) | total (s) |", "|---|---|---|---|",
            f"| in-process (`run_federated`) | {a:.3f} | – | {r['in_process']['seconds']:.1f} |",
            f"| Flower simulation (Ray, 30 virtual SuperNodes, {os.cpu_count()} actors) | {b:.3f} | "
            f"{r['flower']['startup']:.1f} | {r['flower']['seconds']:.1f} |",
            "", f"Flower adds **{b - a:.2f} s per round** ({b / a:.0f}x the in-process round) plus "
            f"{r['flower']['startup']:.0f} s to start Ray and connect the clients. The cost is messaging, not "
            "learning: each round sends a query and a train message to every client (and every 5 rounds an "
            "evaluate message) through Ray actors, while the in-process runtime trains all (client, model) "
            "pairs in one vectorised call. Accuracy {:.2f} in both.".format(100 * r["flower"]["accuracy"]),
        ]
        if "deployment" in timing:
            d = timing["deployment"]
            lines += ["", "## A local deployment", "",
                      f"A SuperLink and {d['supernodes']} SuperNodes as separate processes on 127.0.0.1, with TLS and "
                      f"SuperNode authentication; {d['clients']} clients (one per SuperNode), MosT with {d['models']} "
                      f"models, {d['rounds']} rounds: {d['start_seconds']:.0f} s to start the processes and register "
                      f"the keys, then {d['seconds']:.1f} s from `flwr run` to the result, **{d['per_round']:.1f} s per "
                      "round** in the ServerApp. Every message starts a fresh ClientApp process (which imports torch), "
                      "and the SuperNodes and the ServerApp poll the SuperLink every 3 s: a round of a real deployment "
                      "costs seconds whatever the model, which matters little when clients train for minutes."]
    (out / "flower.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=("table", "timing", "all"), default="all",
                        help="table: the methods x seeds runs; timing: one run on an idle machine (+ --deployment)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--timing-rounds", type=int, default=50)
    parser.add_argument("--deployment", action="store_true", help="timing: also time a local TLS deployment")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    torch.set_num_threads(1)
    import flwr

    cmd = "python benchmarks/flower.py " + " ".join(sys.argv[1:] if argv is None else argv)
    path = args.out / "flower.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results.update(machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                   torch=torch.__version__, flwr=flwr.__version__)
    if args.phase in ("table", "all"):
        # the stored runs of the methods not asked for are kept (a default that changed is re-run alone)
        runs = [r for r in results.get("table", {}).get("runs", []) if r["method"] not in args.methods]
        for name in args.methods:
            for seed in args.seeds:
                r = _one(name, seed, args.rounds)
                print(f"{name} seed {seed}: in-process {100 * r['in_process']['accuracy']:.2f} "
                      f"({r['in_process']['seconds']:.1f} s), Flower {100 * r['flower']['accuracy']:.2f} "
                      f"({r['flower']['seconds']:.1f} s); loss pick {100 * r['in_process']['accuracy_loss_pick']:.2f}, "
                      f"{100 * r['flower']['accuracy_loss_pick']:.2f}", flush=True)
                runs.append(r)
        runs.sort(key=lambda r: list(METHODS).index(r["method"]))
        kept = sorted({r["method"] for r in runs} - set(args.methods))
        results["table"] = {"command": cmd.strip() + (f" (the {', '.join(kept)} runs kept from the call before)"
                                                       if kept else ""), "runs": runs,
                            "cpu_kernels": cpu_kernels()}
    if args.phase in ("timing", "all"):
        timing = {"command": cmd.strip(), "run": _one("MosT", 0, args.timing_rounds),
                  "cpu_kernels": cpu_kernels()}
        if args.deployment:
            timing["deployment"] = _deployment(3)
        results["timing"] = timing
    write(results, args.out)
    print(f"wrote {args.out / 'flower.md'}")


if __name__ == "__main__":
    main()
