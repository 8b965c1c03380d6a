r"""Objectives that are a model's mean loss on datasets of their own (:meth:`most.Problem.from_datasets`).

Objective i is the mean per-sample loss of a model on dataset i,

.. math::

    L_i(\theta) = \frac{1}{|D_i|} \sum_{(x, y) \in D_i} \ell(f_\theta(x), y),

or, with ``batch_size`` b, its estimate on b rows of :math:`D_i` drawn without replacement at
every evaluation from the run's generator. The datasets are held stacked, as rows with the index
of their objective, so that every objective at every model is one vectorised pass: the m
models (:func:`torch.func.vmap` of one template module) on all rows, and the per-objective
means by a segment sum (:meth:`torch.Tensor.index_add`). The reverse pass of weighted losses
(linear combiners) is one backward pass through that; the gradients of selected objectives
(min-norm combiners) are taken objective by objective in one vectorised call, each over its own
rows (the datasets padded to the longest, with a mask).

Random layers in training mode (dropout) draw their masks from torch's random generator, forked
and seeded for each pass from a seed the evaluation draws from the run's generator (a fixed one
without a generator), so that a run with them is reproducible and resumes from a checkpoint to
the uninterrupted result, as the mini-batches do.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Sequence, cast

import torch
from torch import Tensor
from torch.func import grad_and_value, vmap

from ._base import Evaluator
from .._modules import ModuleLayout
from .._random import derive_seed
from ._checks import NO_GRADIENT
from .._validation import check_has_data, check_positive_int

PerSampleLoss = Callable[..., Tensor]

#: torch's ``ignore_index``: a class label its classification losses skip
_IGNORE_INDEX = -100

#: The values (model outputs and the module's intermediates, about) one vectorised pass over rows
#: may hold at once: an evaluation over more rows runs in chunks of rows (2^25, 128 MiB in float32).
_PASS_VALUES = 2**25


#: A pass whose rows hold at most this many values per model (inputs or the forward's values, whichever
#: are more) evaluates the models with one vmap call; a larger one, model by model (see
#: ``DatasetsEvaluator.vectorize``).
_VMAP_VALUES = 2**18


class _Draw:
    """The rows of one evaluation: ``flat`` (row indices into the stacked data, or ``None`` for
    all of them) with each row's objective ``owner`` (grouped by objective, in order) and each
    objective's row count ``counts``; the same rows laid out per objective, ``slots [n, L]``
    with ``mask [n, L]``. ``width``: the common count when every objective has as many rows."""

    __slots__ = ("flat", "owner", "counts", "slots", "mask", "width", "seed")

    def __init__(self, flat: Tensor | None, owner: Tensor, counts: Tensor, slots: Tensor, mask: Tensor,
                 width: int | None, seed: int | None = None):
        self.flat, self.owner, self.counts, self.slots, self.mask = flat, owner, counts, slots, mask
        self.width = width
        #: the seed of the random layers' draws in this evaluation's passes (``None``: the module has none)
        self.seed = seed

    def seeded(self, seed: int) -> "_Draw":
        """The same rows, with the random layers' seed ``seed``."""
        return _Draw(self.flat, self.owner, self.counts, self.slots, self.mask, self.width, seed)


class DatasetsEvaluator(Evaluator):
    """The evaluations of a :meth:`most.Problem.from_datasets` problem (see the module's docstring).

    Args:
        layout: the module's parameters (:class:`~most._modules.ModuleLayout`).
        data: the stacked rows: inputs first, then the targets, each ``[N, ...]``.
        owner: ``[N]`` the objective of each row.
        n_objectives: n.
        loss: ``loss(output, *targets) -> [rows]``, one loss per row.
        batch_size: rows per objective drawn at each evaluation with a generator (``None``: all).
    """

    rows_alone = True

    def __init__(self, layout: ModuleLayout, data: tuple[Tensor, ...], owner: Tensor, n_objectives: int,
                 loss: PerSampleLoss, batch_size: int | None):
        device = data[0].device
        owner = owner.to(device=device, dtype=torch.long)
        order = torch.sort(owner, stable=True).indices
        if not torch.equal(order, torch.arange(len(owner), device=device)):  # rows grouped by objective
            data, owner = tuple(t[order] for t in data), owner[order]
        self.layout, self.data, self.loss = layout, data, loss
        self.n_objectives, self.batch_size = n_objectives, batch_size
        self._input_values = math.prod(data[0].shape[1:])
        # one affine map of each row's (flattened) inputs: plain nn.Linear on [rows, in], or Flatten + Linear
        affine = layout.affine
        plain = data[0].ndim == 2 or isinstance(layout.template, torch.nn.Sequential)
        self._affine: tuple[int, int] | None = (
            affine if affine is not None and plain and self._input_values == affine[1] else None)
        counts = torch.bincount(owner, minlength=n_objectives)
        starts = torch.cumsum(counts, 0) - counts
        rows = torch.arange(len(owner), device=device)
        slots = torch.full((n_objectives, int(counts.max())), -1, dtype=torch.long, device=device)
        slots[owner, rows - starts[owner]] = rows
        mask = slots >= 0
        width = int(counts[0]) if bool((counts == counts[0]).all()) else None
        #: whether the module has random layers in training mode (dropout): its passes are seeded
        self.random = bool(random_layers(layout.template))
        self.stochastic = batch_size is not None or self.random
        self.all = _Draw(None, owner, counts, torch.where(mask, slots, slots[:, :1]), mask, width,
                         0 if self.random else None)
        self._keys_mask = mask.cpu()
        self._slots_cpu = self.all.slots.cpu()
        self._per_row: int | None = None  # values a row makes in a forward pass, counted when first needed
        #: whether vmap can batch the module over the models (not a recurrent layer, say): when not,
        #: every pass runs the models one after another (set by check_loss's probe)
        self.vmappable = True

    def mark_random(self) -> None:
        """Treats the module as drawing at random (its passes seeded from the run's generator),
        for randomness :func:`random_layers` cannot see (found by :func:`check_loss`)."""
        self.random = self.stochastic = True
        self.all = self.all.seeded(0)

    # ------------------------------------------------------------------ the rows of an evaluation
    def draw(self, generator: torch.Generator | None) -> _Draw:
        """All rows, or with a generator and a ``batch_size`` b, b rows of each objective drawn
        without replacement (each objective's rows ranked by uniform keys from ``generator``,
        drawn on the CPU: the same rows on every device)."""
        if generator is None:
            return self.all
        if self.batch_size is None:
            return self.all.seeded(derive_seed(generator)) if self.random else self.all
        b, n = self.batch_size, self.n_objectives
        keys = torch.rand(self._keys_mask.shape, generator=generator).masked_fill_(~self._keys_mask, 2.0)
        pick = keys.topk(b, dim=1, largest=False, sorted=True).indices
        slots = self._slots_cpu.gather(1, pick).to(self.all.slots.device)
        device = slots.device
        owner = torch.arange(n, device=device).repeat_interleave(b)
        counts = torch.full((n,), b, dtype=torch.long, device=device)
        return _Draw(slots.reshape(-1), owner, counts, slots, torch.ones_like(slots, dtype=torch.bool), b,
                     derive_seed(generator) if self.random else None)

    def _rng(self, draw: _Draw, offset: int):
        """The context of a pass with random layers: torch's generator forked and seeded with the
        draw's seed plus ``offset`` (one per pass, so that a pass run again draws the same); a
        no-op for a module without random layers."""
        if draw.seed is None:
            return contextlib.nullcontext()
        return seeded_rng((draw.seed + offset) % 2**63, self.data[0].device)

    def _rows(self, flat: Tensor | None) -> tuple[Tensor, ...]:
        return self.data if flat is None else tuple(t[flat] for t in self.data)

    # ------------------------------------------------------------------ per-row and per-objective losses
    def per_row(self, theta: Tensor, inputs: Tensor, *targets: Tensor) -> Tensor:
        """``[rows]``: the loss of each row at the model ``theta [dim]``."""
        return self.loss(self.layout.forward(theta, inputs), *targets).reshape(-1)

    def mean_losses(self, theta: Tensor, draw: _Draw) -> Tensor:
        """``[n]``: each objective's mean loss on the draw's rows at one model ``theta [dim]``."""
        return self._means(self.per_row(theta, *self._rows(draw.flat))[None], draw)[0]

    def _means(self, per: Tensor, draw: _Draw) -> Tensor:
        """``[m, rows] -> [m, n]``: each objective's mean over its rows (a segment sum; a plain mean
        over a ``[m, n, width]`` view when every objective has ``width`` rows)."""
        if draw.width is not None:
            return per.view(per.shape[0], self.n_objectives, draw.width).mean(-1)
        total = per.new_zeros(per.shape[0], self.n_objectives).index_add(1, draw.owner, per)
        return total / draw.counts.to(per.dtype)

    def _chunks(self, m: int, draw: _Draw) -> list[Tensor | None]:
        """Positions in the draw's rows, in pieces whose pass over ``m`` models holds about
        ``_PASS_VALUES`` values; ``[None]`` (every row in one pass) when they fit."""
        total = len(draw.owner)
        size = max(1, _PASS_VALUES // (m * self._values_per_row()))
        if size >= total:
            return [None]
        return list(torch.split(torch.arange(total, device=draw.owner.device), size))

    def _values_per_row(self) -> int:
        if self._per_row is None:
            self._per_row = self.layout.values_per_sample(tuple(self.data[0].shape[1:]), self.data[0].dtype)
        return self._per_row

    def vectorize(self, rows: int) -> bool:
        """Whether a pass over ``rows`` rows evaluates the m models with one :func:`torch.func.vmap`
        call (small passes, where a call per model costs more than its arithmetic) or one after
        another (larger passes: vmap's batched forms of a layer with a model axis, e.g. a
        grouped convolution, or a batched product with inputs shared by every model, are slower
        than the plain layer run m times)."""
        return self.vmappable and rows * max(self._values_per_row(), self._input_values) <= _VMAP_VALUES

    def _per_rows(self, params: Tensor, draw: _Draw, positions: Tensor | None) -> Tensor:
        """``[m, rows]``: the losses of the draw's rows at ``positions`` (all: ``None``) at every model."""
        flat = draw.flat if positions is None else positions if draw.flat is None else draw.flat[positions]
        rows = self._rows(flat)
        if self._affine is not None:
            return self._affine_rows(params, rows)
        offset = 0 if positions is None or draw.seed is None else 1 + int(positions[0])  # a chunk: its first position
        with self._rng(draw, offset):
            if self.vectorize(len(rows[0])):
                return vmap(self.per_row, in_dims=(0,) + (None,) * len(rows), randomness="same")(params, *rows)
            return torch.stack([self.per_row(theta, *rows) for theta in params])

    def _affine_rows(self, params: Tensor, rows: tuple[Tensor, ...]) -> Tensor:
        """``[m, rows]`` for a module that is one affine map (``nn.Linear``): every model's outputs
        from one matrix product of the shared inputs with the models' stacked weights (vmap's
        form of the layer, a batched product with the inputs repeated per model, and m separate
        products both cost more), then the loss of each model's outputs."""
        out_features, in_features = cast("tuple[int, int]", self._affine)  # called only when it is set
        m, split = params.shape[0], out_features * in_features
        x = rows[0].reshape(len(rows[0]), in_features)
        weight = params[:, :split].reshape(m * out_features, in_features)
        # [m * out, rows]: the reverse pass's product for the weights then reads rows in order
        outputs = torch.addmm(params[:, split:].reshape(-1, 1), weight, x.T)
        outputs = outputs.view(m, out_features, len(x)).transpose(1, 2)
        per = vmap(self.loss, in_dims=(0,) + (None,) * (len(rows) - 1))(outputs, *rows[1:])
        return per.reshape(m, -1)

    # ------------------------------------------------------------------ the protocol
    def loss_matrix(self, params: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        return self._loss_matrix(params, self.draw(generator))

    def _loss_matrix(self, params: Tensor, draw: _Draw) -> Tensor:
        with torch.no_grad():
            per = torch.cat([self._per_rows(params, draw, part) for part in self._chunks(params.shape[0], draw)], 1)
        return self._means(per, draw).T

    def losses_with_pullback(self, params: Tensor, *, generator: torch.Generator | None = None
                             ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        draw = self.draw(generator)
        parts = self._chunks(params.shape[0], draw)
        leaf = params.detach().requires_grad_(True)
        if len(parts) == 1:  # one pass: its graph is kept for the reverse pass
            with torch.enable_grad():
                means = self._means(self._per_rows(leaf, draw, None), draw)
            values = means.detach()
        else:  # the losses piece by piece without a graph; the reverse pass runs the pieces again
            means, values = None, self._loss_matrix(params, draw).T

        def pullback(w: Tensor) -> Tensor:
            w = w.to(values.dtype)
            with torch.enable_grad():
                if means is not None:
                    (grads,) = torch.autograd.grad((means * w).sum(), leaf, allow_unused=True)
                    return torch.zeros_like(leaf) if grads is None else grads
                out = torch.zeros_like(leaf)
                row_weights = w[:, draw.owner] / draw.counts.to(w.dtype)[draw.owner]  # [m, rows]
                for part in parts:
                    per = self._per_rows(leaf, draw, part)
                    (grads,) = torch.autograd.grad((per * row_weights[:, part]).sum(), leaf, allow_unused=True)
                    if grads is not None:
                        out += grads
                return out

        return values.T, pullback

    def active_jacobian(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                        ) -> tuple[Tensor, Tensor]:
        draw = self.draw(generator)
        values = self._loss_matrix(params, draw)
        return values, self._gradients(params, rows, draw)

    def active_gradients(self, params: Tensor, rows: Tensor, *, generator: torch.Generator | None = None
                         ) -> Tensor:
        return self._gradients(params, rows, self.draw(generator))

    def _gradients(self, params: Tensor, rows: Tensor, draw: _Draw) -> Tensor:
        """``[m, k, dim]``: the gradient of objective ``rows[j, r]`` at model j, the mean of the
        gradients of its own rows (padding masked out), all in one vectorised call."""
        data = self.data

        def objective(theta: Tensor, slots: Tensor, mask: Tensor) -> Tensor:
            per = self.per_row(theta, *(t[slots] for t in data))
            weights = mask.to(per.dtype)
            return (per * weights).sum() / weights.sum()

        if not self.vmappable:  # objective by objective, model by model
            with torch.enable_grad(), self._rng(draw, -1):
                step = grad_and_value(objective)
                jac = torch.stack([torch.stack([step(theta, draw.slots[i], draw.mask[i])[0] for i in idx.tolist()])
                                   for theta, idx in zip(params.detach(), rows)])
            return jac.detach()
        k, width = int(rows.shape[1]), int(draw.slots.shape[1])
        m, per_row = int(params.shape[0]), width * self._values_per_row()
        # models in groups whose pass of one objective each holds about _PASS_VALUES values (all m
        # at once when they fit): many models on large objectives (a seeding's candidates) would
        # otherwise hold every model's pass at once
        group = min(m, max(1, _PASS_VALUES // per_row))
        chunk = max(1, _PASS_VALUES // (group * per_row))
        per_objective = vmap(grad_and_value(objective), in_dims=(None, 0, 0), chunk_size=chunk if chunk < k else None,
                             randomness="same")

        def one_model(theta: Tensor, idx: Tensor) -> Tensor:
            return per_objective(theta, draw.slots[idx], draw.mask[idx])[0]

        with torch.enable_grad(), self._rng(draw, -1):
            jac = torch.cat([vmap(one_model, randomness="same")(params[i:i + group].detach(), rows[i:i + group])
                             for i in range(0, m, group)])
        return jac.detach()


def random_layers(template: torch.nn.Module) -> list[str]:
    """The names of ``template``'s layers that draw at random in training mode (dropout of a
    positive rate, attention and stacked recurrent layers with a dropout rate, randomised leaky
    ReLU). Randomness inside a ``forward`` (``F.dropout``, ``torch.randn_like``) is not a layer:
    :func:`check_loss` finds it by running the module twice."""
    return [name for name, module in template.named_modules() if module.training and (
        (isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0)
        or (isinstance(module, torch.nn.MultiheadAttention) and module.dropout > 0)
        or (isinstance(module, torch.nn.RNNBase) and module.dropout > 0 and module.num_layers > 1)
        or isinstance(module, torch.nn.RReLU))]


@contextlib.contextmanager
def seeded_rng(seed: int, device: torch.device):
    """torch's generator (the CPU's, and ``device``'s when it is a GPU) forked and seeded with ``seed``."""
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if cuda else []):
        torch.default_generator.manual_seed(seed)  # only the generators forked here: the others stay as they are
        if cuda:
            torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()
                                          ].manual_seed(seed)
        yield


def run_rng(generator: torch.Generator | None, device: torch.device):
    """The context of one evaluation with random layers: torch's generator forked and seeded
    from a seed drawn from the run's ``generator`` (a fixed seed, 0, without one)."""
    return seeded_rng(0 if generator is None else derive_seed(generator), device)


def stack_datasets(datasets, objective_index=None, n_objectives=None
                   ) -> tuple[tuple[Tensor, ...], Tensor, int]:
    """The datasets as stacked rows ``(data, owner [N], n)``, checked: one tuple of tensors per
    objective (inputs first, then targets), or, with ``objective_index [N]``, one tuple of
    stacked tensors whose row r belongs to objective ``objective_index[r]``."""
    if objective_index is None:
        if n_objectives is not None:
            raise ValueError(
                "`n_objectives` goes with `objective_index` (stacked rows); with one dataset per objective, "
                "n is the number of datasets. Drop `n_objectives`, or pass the stacked rows with `objective_index`."
            )
        if isinstance(datasets, Tensor) or not isinstance(datasets, Sequence) or isinstance(datasets, (str, bytes)):
            raise TypeError(
                "`datasets` must be a list with one dataset per objective, each a tuple of tensors "
                "(inputs, targets), e.g. `[(x0, y0), (x1, y1)]`; or one tuple of stacked tensors with "
                f"`objective_index` giving each row's objective. Got {type(datasets).__name__}."
            )
        if not datasets:
            raise ValueError("`datasets` is empty: a problem needs at least one objective (one dataset each).")
        parts = [_dataset(d, f"dataset {i}") for i, d in enumerate(datasets)]
        width = len(parts[0])
        try:
            for i, part in enumerate(parts):
                if len(part) != width:
                    raise ValueError(
                        f"dataset {i} has {len(part)} tensors and dataset 0 has {width}; every dataset must hold "
                        "the same tensors (inputs, then targets)."
                    )
                _check_like(part, parts[0], f"dataset {i}", "dataset 0")
        except ValueError as exc:
            if len(datasets) > 1 and all(isinstance(d, Tensor) for d in datasets):  # (x, y) read as two datasets
                raise ValueError(
                    f"{exc} `datasets` is a {type(datasets).__name__} of {len(datasets)} tensors, read as one "
                    "dataset per tensor. For one dataset per objective pass a list of tuples, "
                    "`[(x0, y0), (x1, y1)]`; for stacked rows `(x, y)` pass `objective_index` too."
                ) from None
            raise
        data = tuple(torch.cat([part[t] for part in parts]) for t in range(width))
        owner = torch.cat([torch.full((len(part[0]),), i, dtype=torch.long) for i, part in enumerate(parts)])
        return data, owner.to(data[0].device), len(parts)
    data = _dataset(datasets, "`datasets` (the stacked rows)")
    if not isinstance(objective_index, Tensor):
        objective_index = torch.as_tensor(objective_index)
    if objective_index.dtype in (torch.bool,) or objective_index.is_floating_point() or objective_index.is_complex():
        raise TypeError(f"`objective_index` must hold integers (each row's objective); got dtype {objective_index.dtype}.")
    if objective_index.shape != (len(data[0]),):
        raise ValueError(
            f"`objective_index` must have one entry per row, shape [{len(data[0])}]; got {list(objective_index.shape)}."
        )
    low = int(objective_index.min())
    high = int(objective_index.max()) + 1
    n = high if n_objectives is None else check_positive_int(n_objectives, name="n_objectives")
    if low < 0 or high > n:
        raise ValueError(
            f"`objective_index` must lie in [0, n_objectives = {n}); got values from {low} to {high - 1}."
        )
    counts = torch.bincount(objective_index.long().cpu(), minlength=n)
    if bool((counts == 0).any()):
        empty = int((counts == 0).nonzero()[0])
        raise ValueError(
            f"objective {empty} has no rows in `objective_index`: every objective needs data. Give each of the "
            f"{n} objectives at least one row, or renumber the objectives."
        )
    return data, objective_index.to(device=data[0].device, dtype=torch.long), n


def _dataset(d, what: str) -> tuple[Tensor, ...]:
    """A dataset as a tuple of tensors with one common length >= 1."""
    if isinstance(d, Tensor):
        d = (d,)
    if not isinstance(d, (tuple, list)) or not d or not all(isinstance(t, Tensor) for t in d):
        parts = d if isinstance(d, (tuple, list)) else (d,)
        arrays = any(type(t).__module__.split(".")[0] in ("numpy", "pandas") for t in parts)
        if isinstance(d, torch.utils.data.Dataset):
            fix = ("its tensors, `dataset.tensors`" if isinstance(d, torch.utils.data.TensorDataset) else
                   "its rows stacked into tensors, e.g. `tuple(map(torch.stack, zip(*(dataset[i] for i in "
                   "range(len(dataset))))))`")
            raise TypeError(f"{what} must be a tuple of tensors (inputs, targets) with one row per sample; got a "
                            f"{type(d).__name__}. Pass {fix}.")
        raise TypeError(
            f"{what} must be a tuple of tensors (inputs, targets) with one row per sample; got "
            f"{type(d).__name__}" + (" holding " + ", ".join(type(t).__name__ for t in d) if isinstance(d, (tuple, list)) else "")
            + "." + (" Convert arrays to tensors first, in the dtype the model takes, e.g. "
                     "(torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y)) (NumPy's floats are float64; "
                     "a module's parameters are float32 unless made otherwise)." if arrays else "")
        )
    for t in d:
        check_has_data(t, name=what)
    lengths = {int(t.shape[0]) if t.ndim else -1 for t in d}
    if -1 in lengths:
        raise ValueError(f"{what} holds a 0-d tensor; every tensor needs one row per sample.")
    if len(lengths) != 1:
        raise ValueError(f"{what}'s tensors have different numbers of rows {sorted(lengths)}; they must share one.")
    if lengths == {0}:
        raise ValueError(f"{what} is empty (0 rows): every objective needs at least one sample.")
    devices = {t.device for t in d}
    if len(devices) != 1:
        raise ValueError(f"{what}'s tensors are on different devices {sorted(map(str, devices))}; put them on one.")
    return tuple(d)


def _check_like(part: tuple[Tensor, ...], first: tuple[Tensor, ...], what: str, other: str) -> None:
    for t, (a, b) in enumerate(zip(part, first)):
        role = "inputs" if t == 0 else f"tensor {t} (targets)"
        if a.shape[1:] != b.shape[1:]:
            raise ValueError(
                f"{what}'s {role} have shape [rows, {', '.join(map(str, a.shape[1:]))}] and {other}'s have "
                f"[rows, {', '.join(map(str, b.shape[1:]))}]; every dataset's rows must have the same shape."
            )
        if a.dtype != b.dtype or a.device != b.device:
            raise ValueError(
                f"{what}'s {role} are {a.dtype} on {a.device} and {other}'s are {b.dtype} on {b.device}; "
                "convert them to one dtype and device."
            )


def check_batch_size(batch_size, counts: Tensor, label: Callable[[int], str]) -> int | None:
    """``batch_size`` checked: ``None`` or an int >= 1 that every objective's rows can fill."""
    if batch_size is None:
        return None
    b = check_positive_int(batch_size, name="batch_size")
    small = int(counts.argmin())
    if b > int(counts[small]):
        raise ValueError(
            f"`batch_size` = {b} is larger than {label(small)}'s dataset ({int(counts[small])} rows); batches are "
            f"drawn without replacement. Use batch_size <= {int(counts.min())} (the smallest dataset), or "
            "batch_size=None for every row."
        )
    return b


def check_loss(evaluator: DatasetsEvaluator, theta: Tensor, label: Callable[[int], str]) -> None:
    """Runs the module and ``loss`` on the first two rows of every objective (at ``theta``; an
    objective of one row gives it twice) and checks the targets' class indices against the
    output, before any work: one loss per row, floating point; integer targets ``[rows]`` of a
    module with several outputs ``[rows, C]`` (a classifier's scores) within ``[0, C)``. Two rows
    at least, so that a loss reduced over the rows, or broadcast to ``[rows, rows]``, shows even
    with a single objective. Then, on at most 64 of those rows: once vectorised over the models
    (:func:`_check_vectorised`), once with a gradient (a loss with no gradient path to the
    parameters is refused), and twice under two seeds of torch's generator, where losses that
    differ show randomness no layer declares (the evaluator then seeds its passes)."""
    if torch.is_inference_mode_enabled():
        raise ValueError("The problem is built under torch.inference_mode(), where no gradient can be taken, so it "
                         "could not be trained. Build it outside inference mode (torch.no_grad() is fine).")
    slots = evaluator.all.slots  # an objective's missing slots hold its first row
    data, first = evaluator.data, slots[:, [0, 1] if slots.shape[1] > 1 else [0, 0]].reshape(-1)
    with torch.no_grad():
        try:
            output = evaluator.layout.forward(theta, data[0][first])
        except Exception as exc:
            raise ValueError(
                f"The module fails on the datasets' inputs (shape [rows, {', '.join(map(str, data[0].shape[1:]))}], "
                f"{data[0].dtype}): {' '.join(str(exc).split())[:300]}. The first tensor of each dataset is the "
                "module's input." + (f" The module's parameters are {theta.dtype} and its device {theta.device}: "
                                     "give the inputs the same dtype and device (e.g. `x.to(dtype)`)."
                                     if (data[0].is_floating_point() and data[0].dtype != theta.dtype)
                                     or data[0].device != theta.device else "")
            ) from exc
        scores = _class_scores(output, len(first))
        target = data[1] if len(data) > 1 else None  # the labels, when the first target holds class indices
        if scores is not None and target is not None and target.ndim == 1 and not target.is_floating_point() \
                and target.dtype != torch.bool:
            classes = scores.shape[1]
            # -100 is torch's ignore_index: a row its classification losses skip (loss 0)
            bad = ((target < 0) & (target != _IGNORE_INDEX)) | (target >= classes)
            if bool(bad.any()):
                row = int(bad.nonzero()[0])
                raise ValueError(
                    f"{label(int(evaluator.all.owner[row]))} has the class label {int(target[row])}, outside "
                    f"the model's {classes} outputs (labels 0..{classes - 1}, or -100 for a "
                    "row the loss ignores, torch's ignore_index). Check the labels, or give the model as "
                    "many outputs as there are classes."
                )
        try:
            per = evaluator.loss(output, *(t[first] for t in data[1:]))
        except Exception as exc:
            raise ValueError(
                f"`loss(output, *targets)` fails on the module's output ({_describe_output(output)}): "
                f"{' '.join(str(exc).split())[:300]}."
            ) from exc
    rows = len(first)
    if not isinstance(per, Tensor) or per.numel() != rows or per.ndim == 0 or per.shape[0] != rows:
        shape = list(per.shape) if isinstance(per, Tensor) else type(per).__name__
        raise ValueError(
            f"`loss(output, *targets)` must return one loss per row, shape [rows] (here [{rows}]); got {shape}. "
            "Do not reduce over the rows: e.g. `F.cross_entropy(out, y, reduction='none')`, or "
            "`((out - y) ** 2).sum(-1)` for a squared error."
        )
    if not per.is_floating_point():
        raise TypeError(f"`loss` returned losses of dtype {per.dtype}; they must be floating point.")
    _check_vectorised(evaluator, theta, first)
    sample = tuple(t[first[:64]] for t in data)  # a few rows show a gradient path and random draws alike
    with seeded_rng(0, theta.device), torch.enable_grad():  # the user's generator is left as it was
        tracked = evaluator.per_row(theta.detach().requires_grad_(True), *sample).requires_grad
    if not tracked:
        raise ValueError(NO_GRADIENT.format(what="`loss(output, *targets)` does not",
                                            hint="or compute the loss from `argmax` or a comparison"))
    if not evaluator.random:  # randomness inside a forward (F.dropout, torch.randn_like): two passes differ
        with torch.no_grad():
            with seeded_rng(1, theta.device):
                one = evaluator.per_row(theta, *sample)
            with seeded_rng(2, theta.device):
                two = evaluator.per_row(theta, *sample)
        if not torch.allclose(one, two, rtol=0.0, atol=0.0, equal_nan=True):
            evaluator.mark_random()


def _class_scores(output, rows: int) -> Tensor | None:
    """A classifier's scores ``[rows, C]`` (C > 1) in the module's output: the output itself, or
    the one such tensor among the values of a tuple, list or dict output; None when there is none
    or several."""
    if isinstance(output, Tensor):
        values = [output]
    elif isinstance(output, dict):
        values = list(output.values())
    elif isinstance(output, (tuple, list)):
        values = list(output)
    else:
        return None
    found = [v for v in values if isinstance(v, Tensor) and v.ndim == 2 and v.shape[0] == rows and v.shape[1] > 1]
    return found[0] if len(found) == 1 else None


def _describe_output(output) -> str:
    if isinstance(output, Tensor):
        return f"shape {list(output.shape)}"
    if isinstance(output, dict):
        return "a dict of " + ", ".join(f"{k!r}: {list(v.shape) if isinstance(v, Tensor) else type(v).__name__}"
                                        for k, v in list(output.items())[:5])
    return f"a {type(output).__name__}"


def _check_vectorised(evaluator: DatasetsEvaluator, theta: Tensor, first: Tensor) -> None:
    """Runs the module and the loss on the same rows as the evaluations do, vectorised over the
    models (:func:`torch.func.vmap`), where some operations fail that run alone: integer class
    labels of another dtype than int64 (``gather`` in ``cross_entropy``), refused here naming the
    fix, and layers vmap has no batching rule for (recurrent ones), which the evaluator then runs
    model by model (``vmappable``)."""
    rows = tuple(t[first] for t in evaluator.data)
    try:
        with torch.no_grad():
            vmap(evaluator.per_row, in_dims=(0,) + (None,) * len(rows), randomness="same")(theta[None], *rows)
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        labels = [t for t in rows[1:] if not t.is_floating_point() and t.dtype not in (torch.int64, torch.bool)]
        if labels:
            raise ValueError(
                f"The module and `loss` fail when the models are evaluated together (torch.func.vmap): {message}. "
                f"The targets hold integer labels of dtype {str(labels[0].dtype).removeprefix('torch.')}: torch's "
                "losses take class labels as int64 there; convert them with `y.long()`.") from exc
        # an operation vmap cannot batch (a recurrent layer, say): the models run one after another
        evaluator.vmappable = False
