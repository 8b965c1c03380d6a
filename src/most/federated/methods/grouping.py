"""Groups of clients told apart by how their inputs map to their labels, whatever classes each
client holds: each client's gradient per class at one shared model, compared class by class.

Under label skew a client's update, losses and mean input follow the classes it holds more
than its group (its rotation of the images, its labelling). Its gradient *per class* does not:
two clients' gradients of class ``c`` at the same model compare the images each calls ``c``. So
the clients' similarity is the mean, over the classes both hold, of the cosine between their
per-class gradients (each class's mean over all clients removed first, so that what every
client shares does not count), weighted by the smaller of the two clients' counts of that class.
Spectral clustering of that similarity proposes the groups; each client then moves to the group
it is most similar to on average, until none moves or the moves cycle (spectral clustering's
normalised cut favours groups of like size and can split a large group where a small one should
stand alone). The groups are kept only when every group holds together and stands apart: at
the median of every group, a client's mean similarity to its own group (over the clients it
shares classes with) is at least ``min_margin`` and exceeds that to any other group by at least
``min_margin``; otherwise there is no group structure to follow and nothing is returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from torch.nn.functional import cross_entropy

from ..._validation import as_number, check_bool, check_positive, check_positive_int
from ..clients import CHUNK_VALUES, chunk_slices
from ..models import FlatModel
from .updates import update_groups

#: the seed of the count sketch's hash and signs (fixed: every client and the server use the same)
SKETCH_SEED = 0


def count_sketch(vectors: Tensor, size: int) -> Tensor:
    """``vectors [..., d]`` projected to ``[..., size]`` by a count sketch (each coordinate added,
    with a random sign, to one of ``size`` buckets; both drawn from :data:`SKETCH_SEED`), which
    keeps inner products in expectation; ``vectors`` themselves when ``d <= size``."""
    d = vectors.shape[-1]
    if d <= size:
        return vectors
    g = torch.Generator().manual_seed(SKETCH_SEED)
    bucket = torch.randint(size, (d,), generator=g).to(vectors.device)
    sign = (torch.randint(2, (d,), generator=g) * 2 - 1).to(vectors)
    out = vectors.new_zeros(*vectors.shape[:-1], size)
    return out.index_add_(-1, bucket, vectors * sign)


def class_gradients(model: FlatModel, theta: Tensor, x: Tensor, y: Tensor, w: Tensor, *,
                    sketch: int) -> tuple[Tensor, Tensor]:
    """Client side: each client's gradient of its mean loss on each class's samples at the
    model ``theta [d]``, sketched (:func:`count_sketch`), and its counts of each class.

    ``x, y, w`` are ``[n, N, ...]``, ``[n, N]``, ``[n, N]`` (``w`` 1 for a real sample, 0 for
    padding), for one client or many at once. Returns ``(grads [n, C, k], counts [n, C])``,
    ``k = min(d, sketch)``; a class a client lacks has a zero gradient and count 0. Every
    (client, class) pair is one copy of the model in a batched pass over that pair's samples
    alone (as local training trains pairs), so one reverse pass gives every pair's own gradient
    and each sample is read once.

    The number of classes ``C`` is the model's number of outputs, read from one forward pass on
    up to ``N`` of the real samples (the first client's row, padding included, when there are
    none): a batch at least as large as any pair's in the gradient pass, so that a model whose
    forward needs more than one sample (batch statistics) runs on it wherever that pass does."""
    n, N = y.shape
    n_classes = _n_outputs(model, theta, x, w)
    onehot = torch.nn.functional.one_hot(y.long(), n_classes).to(w.dtype)
    counts = (onehot * w[..., None]).sum(1)  # [n, C]
    pairs = (counts > 0).nonzero()  # [P, 2]: (client, class), by client then class
    k = min(model.dim, sketch)
    grads = torch.zeros(n, n_classes, k, dtype=theta.dtype, device=theta.device)
    if not len(pairs):
        return grads, counts
    # each pair's samples packed into a row of ``index [P, L]`` (rows of the flat data; padding
    # points at row 0 with weight 0)
    pair_of = torch.full((n, n_classes), -1, dtype=torch.long, device=y.device)
    pair_of[pairs[:, 0], pairs[:, 1]] = torch.arange(len(pairs), device=y.device)
    real = (w > 0).reshape(-1).nonzero().squeeze(1)  # the real samples' flat rows
    owner = pair_of.reshape(-1)[(real // N) * n_classes + y.reshape(-1)[real].long()]
    order = torch.sort(owner, stable=True).indices
    real, owner = real[order], owner[order]
    sizes = torch.bincount(owner, minlength=len(pairs))
    slot = torch.arange(len(owner), device=owner.device) - (torch.cumsum(sizes, 0) - sizes)[owner]
    L = int(sizes.max())
    index = torch.zeros(len(pairs), L, dtype=torch.long, device=y.device)
    index[owner, slot] = real
    weight = torch.zeros(len(pairs), L, dtype=w.dtype, device=w.device)
    weight[owner, slot] = w.reshape(-1)[real]
    flat_x = x.reshape(n * N, *x.shape[2:])
    per_sample = L * model.values_per_sample(tuple(x.shape[2:]))
    per_chunk = max(1, min(CHUNK_VALUES // max(1, per_sample), CHUNK_VALUES // (8 * model.dim)))
    with torch.enable_grad():
        for sl in chunk_slices(len(pairs), per_chunk):
            rows, cls = pairs[sl, 0], pairs[sl, 1]
            leaf = theta.detach()[None].expand(len(rows), -1).clone().requires_grad_()
            logits = model.batched_logits(leaf, flat_x[index[sl]])  # [p, L, C]
            target = cls[:, None].expand(-1, L).reshape(-1)
            ce = cross_entropy(logits.flatten(0, 1), target, reduction="none").view(len(rows), L)
            loss = ((ce * weight[sl]).sum(1) / counts[rows, cls]).sum()
            (g,) = torch.autograd.grad(loss, leaf)
            grads[rows, cls] = count_sketch(g.detach(), k)
    return grads, counts


def _n_outputs(model: FlatModel, theta: Tensor, x: Tensor, w: Tensor) -> int:
    """The model's number of outputs (its logits' last size) at ``theta [d]`` on up to ``N`` of
    the real samples of ``x [n, N, ...]`` (``w [n, N]`` > 0), or on the first client's row when
    none is real."""
    n, N = w.shape
    real = (w > 0).reshape(-1).nonzero().squeeze(1)[:N]
    probe = x.reshape(n * N, *x.shape[2:])[real][None] if len(real) else x[:1]
    with torch.no_grad():
        return int(model.batched_logits(theta.detach()[None], probe).shape[-1])


def class_similarity(grads: Tensor, counts: Tensor, *, support: bool = False):
    """``[n, n]`` the clients' similarity from ``grads [n, C, k]`` (each client's gradient per
    class) and ``counts [n, C]`` (its samples of each class; a class it lacks has count 0): the
    mean over the classes two clients share of the cosine of their centred per-class gradients,
    weighted by the smaller count. Clients that share no class have similarity 0. With
    ``support=True``, ``(similarity, support [n, n])``: the sum of those weights (0: no class shared)."""
    n, C = counts.shape
    counts = counts.double()
    num = torch.zeros(n, n, dtype=torch.float64, device=grads.device)
    den = torch.zeros_like(num)
    for c in range(C):
        w = counts[:, c]
        if float(w.sum()) <= 0:
            continue
        g = grads[:, c].double()
        g = g - (g * w[:, None]).sum(0) / w.sum()  # what every client's gradient of class c shares
        g = g / g.norm(dim=1, keepdim=True).clamp_min(1e-300)
        g = torch.where(w[:, None] > 0, g, torch.zeros_like(g))
        pair = torch.minimum(w[:, None], w[None, :])
        num += (g @ g.T) * pair
        den += pair
    sim = torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num))
    return (sim, den) if support else sim


def affinity_eigenvectors(similarity: Tensor) -> Tensor:
    """``[n, n]`` the eigenvectors of the normalised affinity of ``similarity [n, n]`` (its
    negative entries set to 0), in ascending order of eigenvalue, on the CPU in float64: what
    :func:`spectral_groups` clusters, computed once for every ``k`` of a search."""
    a = similarity.double().clamp_min(0.0)
    a = (a + a.T) / 2
    degree = a.sum(1).clamp_min(1e-300)
    lap = a / degree.sqrt()[:, None] / degree.sqrt()[None, :]
    return torch.linalg.eigh(lap.cpu())[1]


def spectral_groups(similarity: Tensor, k: int, *, restarts: int = 3, eigenvectors: Tensor | None = None) -> Tensor:
    """``[n]`` groups ``0 .. k-1`` of the clients by spectral clustering of ``similarity [n, n]``
    (Ng, Jordan and Weiss 2001: the k leading eigenvectors of the normalised affinity, its
    negative entries set to 0, rows scaled to unit length, then spherical k-means, the best of
    ``restarts`` seeded starts). Deterministic: it draws nothing from a run's generator.
    ``eigenvectors``: :func:`affinity_eigenvectors` of the same similarity, when already
    computed (a search over several ``k``: one decomposition of the n x n matrix serves all)."""
    n = similarity.shape[0]
    check_positive_int(k, name="k")
    if n <= k:
        return torch.arange(n, device=similarity.device)
    vectors = affinity_eigenvectors(similarity) if eigenvectors is None else eigenvectors
    u = vectors[:, -k:]
    u = u / u.norm(dim=1, keepdim=True).clamp_min(1e-300)
    best, best_cost = torch.arange(n) % k, float("inf")
    for seed in range(restarts):
        labels = update_groups(u, k, torch.Generator().manual_seed(seed), balanced=False)
        centres = torch.zeros(k, k, dtype=u.dtype).index_add_(0, labels, u)
        centres = centres / centres.norm(dim=1, keepdim=True).clamp_min(1e-300)
        cost = float(((u - centres[labels]) ** 2).sum())
        if cost < best_cost:
            best, best_cost = labels, cost
    return best.to(similarity.device)


def _neighbour_weights(similarity: Tensor, support: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(similarity * weight, weight)``, both ``[n, n]``: each other client's weight in a
    client's means, ``support`` (all 1 when ``None``) with the diagonal removed."""
    weight = torch.ones_like(similarity) if support is None else support.to(similarity.dtype)
    weight = weight - torch.diag(torch.diagonal(weight))  # a client is not its own neighbour
    return similarity * weight, weight


def _group_means(weighted: Tensor, weight: Tensor, groups: Tensor) -> Tensor:
    """``[n, k]`` each client's mean similarity to each group's other clients, from
    :func:`_neighbour_weights`' pair."""
    member = torch.nn.functional.one_hot(groups, int(groups.max()) + 1).to(weighted.dtype)  # [n, k]
    return (weighted @ member) / (weight @ member).clamp_min(1e-300)


def group_margins(similarity: Tensor, groups: Tensor, *, support: Tensor | None = None, own: bool = False):
    """``[n]`` each client's mean similarity to the other clients of its group minus its highest
    mean similarity to another group (positive: it stands with its group); with ``own=True``,
    ``(own [n], margins [n])``, its mean similarity to its group too. With ``support [n, n]``
    (:func:`class_similarity`'s), the means weigh each other client by it, so a client that
    shares no class with this one does not count."""
    k = int(groups.max()) + 1
    mean = _group_means(*_neighbour_weights(similarity, support), groups)
    cohesion = mean.gather(1, groups[:, None]).squeeze(1)
    mean = mean.scatter(1, groups[:, None], float("-inf"))
    margins = cohesion - mean.max(1).values if k > 1 else cohesion
    return (cohesion, margins) if own else margins


def refine_groups(similarity: Tensor, groups: Tensor, *, support: Tensor | None = None, min_size: int = 1,
                  max_steps: int = 100) -> Tensor:
    """``[n]`` ``groups`` after moving every client to the group it is most similar to on average
    (:func:`group_margins`' means, weighted by ``support``), repeated until no client moves: a
    local search from the spectral groups that raises the margins :func:`group_margins` measures.
    Every client moves at once, as in Lloyd's k-means, so the moves can cycle (two groupings in
    turn, where the clients have no groups to find): a step back to a grouping already visited is
    not taken, nor one that would leave a group with fewer than ``min_size`` clients (the groups
    before it are returned), nor more than ``max_steps``; the number of groups never changes."""
    check_positive_int(min_size, name="min_size")
    check_positive_int(max_steps, name="max_steps", minimum=0)
    n = similarity.shape[0] if similarity.dim() == 2 else -1
    if similarity.shape != (n, n):
        raise ValueError(f"refine_groups: `similarity` must be a square [n, n] matrix; got shape "
                         f"{list(similarity.shape)}.")
    if groups.shape != (n,) or groups.dtype.is_floating_point or groups.dtype == torch.bool or int(groups.min()) < 0:
        raise ValueError(f"refine_groups: `groups` must be {n} group indices 0, 1, ... (one per client, an "
                         f"integer tensor); got shape {list(groups.shape)} of {groups.dtype}.")
    k = int(groups.max()) + 1
    weighted, weight = _neighbour_weights(similarity, support)  # the same every step
    visited = [groups]
    for _ in range(max_steps):
        moved = _group_means(weighted, weight, groups).argmax(1)
        if (int(torch.bincount(moved, minlength=k).min()) < min_size
                or any(torch.equal(moved, earlier) for earlier in visited)):
            break
        groups = moved
        visited.append(groups)
    return groups


@dataclass(frozen=True)
class ClassGroups:
    """The clients' groups from their gradients per class (the module's method), for
    :class:`~most.federated.methods.WarmUp` ``(groups=ClassGroups())``: the warm-up's last
    round asks every client for its gradient of each class at the shared model, and the models
    start apart, one per group found, each group's share the balance point of the plan.

    Args:
        min_margin: how closely each group holds together and how far it stands apart: the
            median, over each group's clients, of their mean similarity to their group, and of
            that minus their mean similarity to the nearest other group, both at least this in
            every group (similarities are cosines, in [-1, 1]).
        min_size: the fewest clients a group may have.
        sketch: the length each client's gradient of a class is sketched to before it is sent
            (:func:`count_sketch`; not sketched when the model has no more parameters), so a
            client sends ``n_classes x sketch`` numbers once.
        hold: the rounds after the warm-up in which each group's clients train their group's
            model alone (FedAvg within the groups found, as :class:`~most.federated.methods.Oracle`
            trains the true ones), before the plan decides: one step apart, the models differ
            less than the clients' label mixes make their losses differ, so the first plans
            would mix the groups again.
        start_apart: where no grouping stands apart, the models still start apart where the
            clients fall into m groups at all: model j takes the mean step of the j-th of the m
            groups of :meth:`start` (the spectral groups of the same similarity at ``k = m``),
            when in every one of them the median client's mean similarity to its group and its
            margin over the nearest other group are both above ``start_margin``. So the first
            plan after the warm-up compares m different models instead of breaking a tie between
            m equal ones. Those groups are neither held nor made the plan's balance point: the
            plan and the re-split decide from the first round after the warm-up, as without them.
            Where the per-class gradients are too noisy for the groups to stand apart (a few
            samples of each class a client) but the clients do fall into groups, this starts the
            models near them; where some spectral group is no group (its typical client is closer
            to another group, or to no one), the models start equal and the tie decides, as with
            ``start_apart=False``.
        start_margin: how far the start's groups must hold together and stand apart (the same
            two medians as ``min_margin``'s, each strictly above this in every group); ``None``
            starts the models apart along the spectral groups whatever they show. The default
            0 asks only that each group be one: its typical client more similar to its group
            than to the rest, and than to any other group.

    :meth:`find` tries ``k = m, m-1, ..., 2`` groups (:func:`spectral_groups`, then
    :func:`refine_groups`) and returns the first grouping that stands apart, so a model left
    over (more models than groups) starts from the shared model.
    """

    min_margin: float = 0.25
    min_size: int = 2
    sketch: int = 2048
    hold: int = 5
    start_apart: bool = True
    start_margin: float | None = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "hold", check_positive_int(self.hold, name="hold", minimum=0))
        object.__setattr__(self, "start_apart", check_bool(self.start_apart, name="start_apart"))
        if self.start_margin is not None:
            margin = float(as_number(self.start_margin, name="start_margin", kind="a number in [-2, 2) or None"))
            if not -2.0 <= margin < 2.0:  # margins are differences of cosines
                raise ValueError(f"`start_margin` must be a number in [-2, 2) or None (start apart whatever the "
                                 f"groups show); got {self.start_margin!r}.")
            object.__setattr__(self, "start_margin", margin)
        object.__setattr__(self, "min_margin", check_positive(self.min_margin, name="min_margin"))
        object.__setattr__(self, "min_size", check_positive_int(self.min_size, name="min_size"))
        object.__setattr__(self, "sketch", check_positive_int(self.sketch, name="sketch"))

    def find(self, grads: Tensor, counts: Tensor, m: int) -> Tensor | None:
        """``[n]`` each client's group (``0 .. k-1``, ``k <= m``) from ``grads [n, C, k']`` and
        ``counts [n, C]``, or ``None`` when no grouping into 2 to m groups stands apart."""
        groups, apart = self._search("find", grads, counts, m, first=False)
        return groups if apart else None

    def start(self, grads: Tensor, counts: Tensor, m: int) -> Tensor | None:
        """``[n]`` the groups ``0 .. k-1`` the models start from where :meth:`find` finds none
        and ``start_apart`` is set: the spectral groups of the clients' similarity at
        ``k = min(m, n // min_size)`` (:func:`spectral_groups`, then :func:`refine_groups` with
        ``min_size``), when in every group the median client's mean similarity to its group and
        its margin over the nearest other group are above ``start_margin`` (whatever they are
        with ``start_margin=None``); ``None`` otherwise, or when fewer than 2 groups of
        ``min_size`` clients fit. Deterministic, as those are."""
        return self._search("start", grads, counts, m, first=True)[0]

    def split(self, grads: Tensor, counts: Tensor, m: int) -> tuple[Tensor | None, bool]:
        """What the warm-up's last round starts the models from: ``(groups, True)`` where a
        grouping stands apart (:meth:`find`'s), else ``(groups, False)`` with :meth:`start`'s
        groups when ``start_apart`` is set and they pass ``start_margin``, else
        ``(None, False)``; the similarity and the groupings are computed once for both."""
        groups, apart = self._search("split", grads, counts, m, first=False)
        return (groups, True) if apart else (groups if self.start_apart else None, False)

    def _search(self, name: str, grads: Tensor, counts: Tensor, m: int, *, first: bool) -> tuple[Tensor | None, bool]:
        """``(groups, apart)``: the first grouping of ``k = m, m-1, ..., 2`` that stands apart
        (``apart=True``), else the grouping at the largest ``k`` where it passes
        ``start_margin`` (``None`` where it does not, or no ``k`` fits); with ``first=True``
        that start grouping alone, without the margins' test (``start_margin``'s still applies)."""
        _check_signal(name, grads, counts)
        n = counts.shape[0]
        sim, support = class_similarity(grads, counts, support=True)
        start, top = None, min(m, n // self.min_size)
        vectors = affinity_eigenvectors(sim) if top > 1 else None
        for k in range(top, 1, -1):
            groups = refine_groups(sim, spectral_groups(sim, k, eigenvectors=vectors), support=support,
                                   min_size=self.min_size)
            sizes = torch.bincount(groups.cpu(), minlength=k)
            own, margin = _weakest_group(sim, support, groups, k) if int(sizes.min()) > 0 else (-math.inf, -math.inf)
            if k == top:
                if self.start_margin is None or (own > self.start_margin and margin > self.start_margin):
                    start = groups
                if first:
                    break
            if int(sizes.min()) < self.min_size:
                continue
            if own >= self.min_margin and margin >= self.min_margin:
                return groups, True
        return start, False


def _weakest_group(sim: Tensor, support: Tensor, groups: Tensor, k: int) -> tuple[float, float]:
    """The smallest, over the ``k`` groups, of the median client's mean similarity to its group
    and of its margin over the nearest other group (:func:`group_margins`)."""
    own, margins = (v.cpu() for v in group_margins(sim, groups, support=support, own=True))
    g = groups.cpu()
    return (min(float(own[g == j].median()) for j in range(k)),
            min(float(margins[g == j].median()) for j in range(k)))


def _check_signal(name: str, grads: Tensor, counts: Tensor) -> None:
    if grads.shape[:2] != counts.shape:
        raise ValueError(f"ClassGroups.{name}: gradients of shape {list(grads.shape)} and counts of shape "
                         f"{list(counts.shape)} do not match (one gradient per client and class).")
    if not torch.isfinite(grads).all():
        raise ValueError(f"ClassGroups.{name}: the clients' gradients per class contain NaN or inf; the warm-up "
                         "diverged. Try a smaller local `lr` or server step.")
