"""FedEM's synthetic mixture data (Marfoq et al. 2021): each client's samples are drawn from its
own mixture of a few linear classification tasks; generated, nothing to download."""

from __future__ import annotations

import numpy as np
import torch

from ..._validation import check_non_negative, check_positive, check_positive_int
from ._dataset import ClientData, FederatedDataset, numpy_rng

__all__ = ["mixture_synthetic"]


def mixture_synthetic(
    *,
    n_clients: int = 300,
    n_components: int = 3,
    dim: int = 150,
    concentration: float = 0.4,
    noise: float = 0.1,
    min_samples: int = 50,
    max_samples: int = 1000,
    val_fraction: float = 0.2,
    test_samples: int = 500,
    reference_labels: bool = False,
    seed: int = 0,
) -> FederatedDataset:
    r"""FedEM's synthetic data: binary classification where each client draws each sample from
    its own mixture of ``n_components`` linear tasks.

    The generative process of the FedEM paper's synthetic data set (Marfoq, Neglia, Bellet,
    Kameni and Vidal, NeurIPS 2021; defaults as its data generator's):

    * the components ``theta_j ~ U(-1, 1)^dim``, ``j = 1..M``;
    * client t's mixture weights ``pi_t ~ Dirichlet(concentration * 1_M)`` and its number of
      samples ``n_t = min(floor(LogNormal(4, 2)) + min_samples, max_samples)``;
    * each sample: a component ``z ~ pi_t``, ``x ~ U(-1, 1)^dim`` and the label
      ``y = 1[x . theta_z + eps > 0]`` with ``eps ~ N(0, noise^2)`` (the reference code's
      ``round(sigmoid(x . theta_z + eps))``).

    A client's ``n_t`` samples are split into training and validation (``val_fraction`` of them,
    at least one of each), and its test set is ``test_samples`` more from the same mixture (the
    reference uses 5000 per client; fewer keep the data in memory on a laptop).

    ``reference_labels=True`` labels as the reference generator does: there the index of the
    block of samples each component labels stays at 0, so component j overwrites the first
    ``count_j`` samples in turn and the samples beyond the largest count keep the label 0 (a
    share of about ``1 - max_j pi_tj`` of the client's data is labelled 0 whatever ``x``). The
    numbers of the paper's table come from that labelling.

    :attr:`~most.federated.FederatedDataset.groups` records each client's largest component (the
    group a clustering method could find). All randomness comes from
    ``np.random.default_rng(seed)``; client ids ``task_000``, ``task_001``, ...
    """
    check_positive_int(n_clients, name="n_clients")
    check_positive_int(n_components, name="n_components")
    check_positive_int(dim, name="dim")
    concentration = check_positive(concentration, name="concentration")
    noise = check_non_negative(noise, name="noise")
    check_positive_int(min_samples, name="min_samples", minimum=2)
    check_positive_int(max_samples, name="max_samples", minimum=2)
    check_positive_int(test_samples, name="test_samples")
    if max_samples < min_samples:
        raise ValueError(f"`max_samples` ({max_samples}) must be at least `min_samples` ({min_samples}).")
    val_fraction = check_positive(val_fraction, name="val_fraction")
    if val_fraction >= 1:
        raise ValueError(f"`val_fraction` must be below 1 (the rest trains); got {val_fraction}.")
    if not isinstance(reference_labels, bool):
        raise ValueError(f"`reference_labels` must be True or False; got {reference_labels!r}.")
    rng = numpy_rng(seed)
    sizes = np.minimum(rng.lognormal(4.0, 2.0, n_clients).astype(np.int64) + min_samples, max_samples)
    mixture = rng.dirichlet(np.full(n_components, concentration), size=n_clients)
    theta = rng.uniform(-1.0, 1.0, size=(n_components, dim))

    def draw(t: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        counts = rng.multinomial(n, mixture[t])
        x = rng.uniform(-1.0, 1.0, size=(n, dim))
        y: np.ndarray = np.zeros(n, dtype=np.int64)
        start = 0
        for j, c in enumerate(counts):
            at = slice(0, c) if reference_labels else slice(start, start + c)
            y[at] = (x[at] @ theta[j] + noise * rng.standard_normal(c) > 0).astype(np.int64)
            start += c
        order = rng.permutation(n)
        return x[order], y[order]

    clients = []
    for t in range(n_clients):
        x, y = draw(t, int(sizes[t]))
        n_val = min(max(1, int(round(val_fraction * len(y)))), len(y) - 1)
        x_test, y_test = draw(t, test_samples)
        as_x = lambda a: torch.from_numpy(a.astype(np.float32))  # noqa: E731
        clients.append(ClientData(as_x(x[n_val:]), torch.from_numpy(y[n_val:]), as_x(x[:n_val]),
                                  torch.from_numpy(y[:n_val]), as_x(x_test), torch.from_numpy(y_test)))
    width = max(3, len(str(n_clients - 1)))
    name = f"FedEM synthetic ({n_components} components" + (", reference labels)" if reference_labels else ")")
    return FederatedDataset.from_clients(clients, name=name, n_classes=2, input_shape=(dim,),
                                         client_ids=[f"task_{t:0{width}d}" for t in range(n_clients)],
                                         groups=mixture.argmax(1).tolist())
