"""The dispatcher of Appendix D.5: which of the m prompts should serve an unseen instance.

Every instance is its own objective, so there is no group whose validation accuracy could pick
a model. The dispatcher learns the match between instances and prompts instead: a
cross-attention block (the MAB of Set Transformer, Lee et al. 2019, Section 3.1) lets the
frozen encoder's embedding of the instance attend over the m prompts' embeddings, and a
bilinear score against each prompt gives logits over the prompts. It is trained with
cross-entropy to predict, for labelled instances, the prompt with the lowest loss.

Examples:
    >>> import torch
    >>> from most.prompts import Dispatcher, fit_dispatcher
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.randn(200, 6, generator=g)
    >>> prompts = torch.randn(3, 5, generator=g)
    >>> target = (x[:, 0] > 0).long() + (x[:, 1] > 1).long()   # a rule the dispatcher can learn
    >>> dispatcher = fit_dispatcher(x, prompts, target, epochs=300, seed=0)
    >>> bool((dispatcher(x, prompts).argmax(1) == target).float().mean() > 0.8)
    True
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._random import torch_seed
from .._validation import as_tensor, check_non_negative, check_positive, check_positive_int, check_seed
from ._checks import class_indices

__all__ = ["Dispatcher", "fit_dispatcher", "prompt_embeddings"]


class Dispatcher(nn.Module):
    """Cross-attention from an instance embedding to the m prompt embeddings.

    ``forward(instances [N, d_in], prompts [m, d_prompt]) -> logits [N, m]``; the prompts
    enter as a set, so permuting them permutes the logits.
    """

    def __init__(self, instance_dim: int, prompt_dim: int, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        instance_dim = check_positive_int(instance_dim, name="instance_dim")
        prompt_dim = check_positive_int(prompt_dim, name="prompt_dim")
        width = check_positive_int(width, name="width")
        heads = check_positive_int(heads, name="heads")
        if width % heads:
            raise ValueError(f"`width` ({width}) must be a multiple of `heads` ({heads}).")
        self.query = nn.Sequential(nn.LayerNorm(instance_dim), nn.Linear(instance_dim, width))
        self.key = nn.Sequential(nn.LayerNorm(prompt_dim), nn.Linear(prompt_dim, width))
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.feed_forward = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
        self.instance_dim, self.prompt_dim, self.width = instance_dim, prompt_dim, width

    def forward(self, instances: Tensor, prompts: Tensor) -> Tensor:
        _check_features(instances, prompts, self.instance_dim, self.prompt_dim)
        q = self.query(instances).unsqueeze(1)  # [N, 1, w]
        k = self.key(prompts).unsqueeze(0).expand(q.shape[0], -1, -1)  # [N, m, w]
        h = self.norm1(q + self.attention(q, k, k, need_weights=False)[0])  # MAB(q, K)
        h = self.norm2(h + self.feed_forward(h))
        return (h @ k.transpose(1, 2)).squeeze(1) / math.sqrt(self.width)


def _check_features(instances: Tensor, prompts: Tensor, instance_dim: int | None, prompt_dim: int | None) -> None:
    """Refuses inputs that are not ``instances [N, instance_dim]`` and ``prompts [m >= 1, prompt_dim]``
    (``None``: any width of at least one)."""
    for name, t, width, rows in (("instances", instances, instance_dim, "N"), ("prompts", prompts, prompt_dim, "m")):
        if t.ndim != 2 or t.shape[1] < 1 or (width is not None and t.shape[1] != width):
            built = f": this dispatcher was built for {width} features per {name[:-1]}" if width is not None else ""
            raise ValueError(
                f"`{name}` must be a matrix [{rows}, {width or 'd'}] (one row of features per {name[:-1]}){built}; "
                f"got shape {tuple(t.shape)}."
            )
    if prompts.shape[0] == 0:
        raise ValueError("`prompts` has no rows: there must be at least one prompt to dispatch to.")


def prompt_embeddings(prompts: Tensor) -> Tensor:
    """``[m, P, D]`` prompt vectors -> ``[m, 2D]`` embeddings (mean and std over the P vectors)."""
    if prompts.ndim != 3:
        raise ValueError(f"`prompts` must be [m, P, D]; got {tuple(prompts.shape)}.")
    std = prompts.std(1) if prompts.shape[1] > 1 else torch.zeros_like(prompts[:, 0])
    return torch.cat([prompts.mean(1), std], dim=1)


def fit_dispatcher(
    instances: Tensor, prompts: Tensor, targets: Tensor, *, epochs: int = 200, lr: float = 3e-3,
    weight_decay: float = 1e-3, width: int = 64, heads: int = 4, seed: int = 0,
) -> Dispatcher:
    """Trains a :class:`Dispatcher` (full-batch AdamW) to predict ``targets [N]`` in ``0..m-1``.

    ``instances [N, d]`` and ``prompts [m, d']`` are tensors or array-likes of numbers; ``targets``
    are integer prompt indices (floating ones are refused, not truncated). ``seed`` (an int in
    ``[0, 2**64)``) draws the dispatcher's initial weights. The prompt embeddings are fixed (the
    prompts are trained already); the class weights are balanced so that a prompt that is rarely
    best is still learnt.
    """
    epochs = check_positive_int(epochs, name="epochs")
    lr = check_positive(lr, name="lr")
    weight_decay = check_non_negative(weight_decay, name="weight_decay")
    seed = check_seed(seed)
    instances = as_tensor(instances, name="instances").detach().float()
    prompts = as_tensor(prompts, name="prompts").detach().float()
    _check_features(instances, prompts, None, None)
    m = prompts.shape[0]
    if instances.shape[0] == 0:
        raise ValueError("`instances` has no rows: the dispatcher needs labelled instances to learn from.")
    targets = class_indices(targets, name="targets", size=instances.shape[0], classes=m, what="prompt indices")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed(seed))
        dispatcher = Dispatcher(instances.shape[1], prompts.shape[1], width=width, heads=heads)
    counts = torch.bincount(targets, minlength=m).float()
    weight = torch.where(counts > 0, counts.sum() / (m * counts.clamp(min=1)), torch.zeros_like(counts))
    optimizer = torch.optim.AdamW(dispatcher.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(dispatcher(instances, prompts), targets, weight=weight)
        loss.backward()
        optimizer.step()
    return dispatcher.eval()
