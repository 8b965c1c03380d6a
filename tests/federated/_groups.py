"""Federated data with planted groups of clients under label skew, for the tests of MosT's
class groups: the groups differ in how inputs map to labels (each turns the class means by its
own rotation), and each client holds a few classes of its own."""

from __future__ import annotations

import torch

import most.federated as fl


def skewed_groups(sizes=(3, 5, 8), per=60, dim=20, held=5, seed=0) -> fl.FederatedDataset:
    """Clients in groups of ``sizes``; a client holds ``held`` of 10 classes (label skew) and
    its inputs are the class means plus noise, turned by its group's random rotation."""
    g = torch.Generator().manual_seed(seed)
    means = 2.0 * torch.randn(10, dim, generator=g)
    turns = [torch.linalg.qr(torch.randn(dim, dim, generator=g))[0] for _ in sizes]
    clients, groups = [], []
    for group, size in enumerate(sizes):
        for _ in range(size):
            classes = torch.randperm(10, generator=g)[:held]
            y = classes[torch.randint(held, (per,), generator=g)]
            x = (means[y] + torch.randn(per, dim, generator=g)) @ turns[group].T
            a, b = int(per * 0.6), int(per * 0.8)
            clients.append(fl.ClientData(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:]))
            groups.append(group)
    return fl.FederatedDataset.from_clients(clients, name="skewed groups", n_classes=10, groups=groups)
