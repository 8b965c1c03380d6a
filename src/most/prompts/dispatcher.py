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

from .._validation import check_positive, check_positive_int

__all__ = ["Dispatcher", "fit_dispatcher", "prompt_embeddings"]


class Dispatcher(nn.Module):
    """Cross-attention from an instance embedding to the m prompt embeddings.

    ``forward(instances [N, d_in], prompts [m, d_prompt]) -> logits [N, m]``; the prompts
    enter as a set, so permuting them permutes the logits.
    """

    def __init__(self, instance_dim: int, prompt_dim: int, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        for name, value in (("instance_dim", instance_dim), ("prompt_dim", prompt_dim), ("width", width),
                            ("heads", heads)):
            check_positive_int(value, name=name)
        if width % heads:
            raise ValueError(f"`width` ({width}) must be a multiple of `heads` ({heads}).")
        self.query = nn.Sequential(nn.LayerNorm(instance_dim), nn.Linear(instance_dim, width))
        self.key = nn.Sequential(nn.LayerNorm(prompt_dim), nn.Linear(prompt_dim, width))
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.feed_forward = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
        self.width = width

    def forward(self, instances: Tensor, prompts: Tensor) -> Tensor:
        if instances.ndim != 2 or prompts.ndim != 2:
            raise ValueError(
                f"Expected instances [N, d] and prompts [m, d']; got {tuple(instances.shape)} and {tuple(prompts.shape)}."
            )
        q = self.query(instances).unsqueeze(1)  # [N, 1, w]
        k = self.key(prompts).unsqueeze(0).expand(q.shape[0], -1, -1)  # [N, m, w]
        h = self.norm1(q + self.attention(q, k, k, need_weights=False)[0])  # MAB(q, K)
        h = self.norm2(h + self.feed_forward(h))
        return (h @ k.transpose(1, 2)).squeeze(1) / math.sqrt(self.width)


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
    """Trains a :class:`Dispatcher` (full-batch Adam) to predict ``targets [N]`` in ``0..m-1``.

    The prompt embeddings are fixed (the prompts are trained already); the class weights are
    balanced so that a prompt that is rarely best is still learnt.
    """
    check_positive_int(epochs, name="epochs")
    check_positive(lr, name="lr")
    instances, prompts = instances.detach().float(), prompts.detach().float()
    targets = torch.as_tensor(targets, dtype=torch.long)
    m = prompts.shape[0]
    if targets.shape != (instances.shape[0],):
        raise ValueError(f"`targets` must have shape [{instances.shape[0]}]; got {tuple(targets.shape)}.")
    if targets.numel() == 0 or int(targets.min()) < 0 or int(targets.max()) >= m:
        raise ValueError(f"`targets` must be non-empty prompt indices in 0..{m - 1}.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
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
