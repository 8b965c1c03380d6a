"""Measures what one round of fine-tuning EfficientNet-Lite0's last block costs in the
multi-task benchmark (Office-Caltech10, n = 4 domains = objectives, m = 4 models).

A model is the pretrained last MBConv block (192 -> 320 channels, expansion 1152), the head
convolution (320 -> 1280) with its BatchNorm, and a new linear layer (1280 -> 10): about 1.0 M
parameters, trained with the library's round loop (``Problem.from_module``, Adam). BatchNorm
keeps its ImageNet statistics (evaluation mode), as usual with batches of 64.

Two ways to feed it, each measured here:

* **prefix recomputed** -- every round runs the frozen blocks 0-14 on the round's images
  (4 domains x batch 64), then the trainable tail. This is what fine-tuning with data
  augmentation needs; the frozen forward pass dominates.
* **prefix cached** -- blocks 0-14 run once per image and their outputs (192 x 7 x 7) are
  kept; a round runs only the tail (no augmentation possible).

The script times the frozen prefix on 256 images, and a few rounds of MosT (4 model-domain
pairs a round) and MGDA (16) on the tail with cached prefix outputs; it prints the seconds per
round and for the benchmark's 500 rounds. ``--device cuda`` runs it on a GPU (the clock is read
after the device finishes). ``--synthetic`` times the same shapes with the backbone's random
initial weights and random images, where the data or the weights are not at hand: the arithmetic,
and so the time, does not depend on the values (the losses do, and are not reported).

    python benchmarks/mtl_finetune_cost.py --data-path ../shared/data/office_caltech10
    python benchmarks/mtl_finetune_cost.py --synthetic --device cuda --rounds 20
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import most
from most.backbones import EfficientNetLite0, Preprocess, efficientnet_lite0
from most.optim import Adam
from most.problems._office_caltech import OFFICE_CALTECH10_CLASSES, OFFICE_CALTECH10_DOMAINS

BATCH = 64


class Tail(nn.Module):
    """The last block and the head of a pretrained EfficientNet-Lite0, with a new classifier."""

    def __init__(self, backbone, n_classes: int = 10):
        super().__init__()
        self.block = copy.deepcopy(backbone._blocks[-1])
        self.conv = copy.deepcopy(backbone._conv_head)
        self.bn = copy.deepcopy(backbone._bn1)
        self.fc = nn.Linear(backbone.n_features, n_classes)

    def forward(self, x):
        return self.fc(F.relu6(self.bn(self.conv(self.block(x)))).mean((-2, -1)))


def _images(root: Path, domain: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    files = [(f, k) for k, c in enumerate(OFFICE_CALTECH10_CLASSES) for f in sorted((root / "images" / domain / c).glob("*.jpg"))]
    chosen = [files[i] for i in torch.randperm(len(files), generator=torch.Generator().manual_seed(0))[:n].tolist()]
    preprocess = Preprocess()
    return torch.stack([preprocess.load(f) for f, _ in chosen]), torch.tensor([k for _, k in chosen])


@torch.no_grad()
def _prefix(backbone, x):
    x = backbone.stem(x)
    for block in backbone._blocks[:-1]:
        x = block(x)
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path, help="the Office-Caltech10 folder (required unless --synthetic)")
    parser.add_argument("--synthetic", action="store_true",
                        help="random initial weights and random images of the same shapes (timing only)")
    parser.add_argument("--device", default="cpu", help="where the backbone, the data and the models live")
    parser.add_argument("--rounds", type=int, default=3, help="rounds timed per method (after one warm-up round)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.data_path is None and not args.synthetic:
        parser.error("give --data-path DIR (the Office-Caltech10 folder), or --synthetic to time random inputs")
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    most.set_threads(args.threads)

    def clock() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    if args.synthetic:
        gen = torch.Generator().manual_seed(0)
        backbone = EfficientNetLite0()
        data = {d: (torch.randn(BATCH, 3, 224, 224, generator=gen), torch.randint(10, (BATCH,), generator=gen))
                for d in OFFICE_CALTECH10_DOMAINS}
    else:
        backbone = efficientnet_lite0()
        data = {d: _images(args.data_path, d, BATCH) for d in OFFICE_CALTECH10_DOMAINS}
    backbone = backbone.to(device).eval()
    data = {d: (x.to(device), y.to(device)) for d, (x, y) in data.items()}
    _prefix(backbone, data[OFFICE_CALTECH10_DOMAINS[0]][0])  # untimed: kernels chosen, memory allocated

    tic = clock()
    cached = {d: (_prefix(backbone, x), y) for d, (x, y) in data.items()}
    prefix_s = clock() - tic
    print(f"frozen blocks 0-14 on {len(data)} x {BATCH} images: {prefix_s:.2f} s "
          f"({1000 * prefix_s / (len(data) * BATCH):.0f} ms an image); output {tuple(cached['amazon'][0].shape[1:])}")

    def factory():
        return Tail(backbone).to(device).eval()

    objectives = [lambda f, x=x, y=y: F.cross_entropy(f(x), y) for x, y in cached.values()]
    problem = most.Problem.from_module(factory, objectives, names=list(cached))
    print(f"trainable parameters per model: {problem.dim:,}")
    for name, method in (("MosT", most.MosT), ("MGDA", most.MGDA)):
        times = []
        method(n_models=4, rounds=1, lr=1e-3, optimizer=Adam(), seed=0).fit(problem)  # untimed: warm caches
        for rounds in (1, 1 + args.rounds):  # the difference leaves out the set-up and first round
            tic = clock()
            method(n_models=4, rounds=rounds, lr=1e-3, optimizer=Adam(), seed=0).fit(problem)
            times.append(clock() - tic)
        per_round = (times[1] - times[0]) / args.rounds
        print(f"{name}: {per_round:.2f} s a round with cached prefix outputs; with the prefix recomputed "
              f"{per_round + prefix_s:.2f} s; 500 rounds: {500 * per_round / 60:.1f} and "
              f"{500 * (per_round + prefix_s) / 60:.1f} minutes a run")


if __name__ == "__main__":
    main()
