"""Input checks shared by the solvers.

Every public entry point validates its inputs once, up front, and raises a
``ValueError`` that says what is wrong and how to fix it, before any work is done.
"""

from __future__ import annotations

import difflib
import math
import os
import sys

import numpy as np
import torch
from torch import Tensor

#: Absolute tolerance for "sums to one" checks on marginals.
SIMPLEX_ATOL = 1e-6


def as_tensor(x, *, name: str, like: Tensor | None = None) -> Tensor:
    """Converts array-likes to a floating tensor (dtype/device follow ``like`` when given).

    Complex input is refused (``TypeError``): casting it to a real dtype would silently drop
    the imaginary part. Integer and bool input is converted to the default float dtype."""
    if isinstance(x, Tensor):
        t = x
    else:
        try:
            t = torch.as_tensor(x)
        except Exception as exc:
            raise ValueError(
                f"`{name}` must be a tensor or array-like of numbers; got {type(x).__name__}"
                + (f" of dtype {x.dtype}" if isinstance(x, np.ndarray) else "") + "."
            ) from exc
        if t.is_floating_point() and t.dtype != torch.float64 and not bool(torch.isfinite(t).all()):
            wide = torch.as_tensor(x, dtype=torch.float64)  # e.g. a list holding 1e200: inf in float32
            if bool(torch.isfinite(wide).all()):
                t = wide
    check_has_data(t, name=name)
    if t.is_complex():
        raise TypeError(
            f"`{name}` must be real; got complex dtype {t.dtype}. Pass its real part (`.real`) or its "
            "modulus (`.abs()`) explicitly: the imaginary part is not dropped silently."
        )
    if like is not None:
        t = t.to(dtype=like.dtype, device=like.device)
    elif not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    return t


def check_has_data(t: Tensor, *, name: str) -> Tensor:
    """Refuses a tensor on the ``meta`` device: it has a shape and a dtype but no values, so
    nothing can be computed from it (torch would fail later with an internal error)."""
    if isinstance(t, Tensor) and t.device.type == "meta":
        raise ValueError(
            f"`{name}` is a tensor on the 'meta' device (shape {tuple(t.shape)}, dtype {t.dtype}): it holds "
            "no values, so nothing can be computed from it. Pass a tensor with data, on 'cpu' or an "
            "accelerator (a tensor moved to 'meta' cannot be moved back: keep the original)."
        )
    return t


def simplex_atol(dtype: torch.dtype) -> float:
    """Tolerance of the "sums to one" check for a marginal given in ``dtype``: :data:`SIMPLEX_ATOL`,
    or the dtype's resolution when that is coarser (float16, bfloat16), so that ``x / x.sum()``
    computed in that dtype always passes."""
    if dtype.is_floating_point:
        return max(SIMPLEX_ATOL, 2 * torch.finfo(dtype).eps)
    return SIMPLEX_ATOL


def matrix_range(x: Tensor | np.ndarray, *, name: str) -> tuple[float, float]:
    """Checks that ``x`` is a finite, non-empty ``[n, m]`` matrix and returns ``(min, max)``
    (one device sync: a NaN or inf shows in the extremes, so finiteness needs no pass of its own).
    ``x`` is a tensor or a NumPy array (the exact transport solver checks on the host)."""
    if x.ndim != 2:
        raise ValueError(f"`{name}` must be a 2-D matrix of shape [n, m]; got shape {tuple(x.shape)}.")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(
            f"`{name}` has shape {tuple(x.shape)}: there must be at least one objective (row) "
            "and one model (column)."
        )
    if isinstance(x, np.ndarray):
        lo, hi = float(x.min()), float(x.max())
    else:
        # the extremes do not depend on the layout: a column-major matrix (the loss matrix, a
        # transposed view) is reduced as its contiguous transpose, which reads memory in order
        flat = x.T if not x.is_contiguous() and x.T.is_contiguous() else x
        lo, hi = (float(v) for v in torch.stack(torch.aminmax(flat)).tolist())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        bad = (~torch.isfinite(torch.as_tensor(x))).nonzero()[0].tolist()
        raise ValueError(
            f"`{name}` contains a non-finite value (NaN or inf), first at row {bad[0]}, column {bad[1]}."
        )
    if not math.isfinite(hi - lo):
        raise ValueError(
            f"`{name}` spans [{lo:.3g}, {hi:.3g}]: its range overflows float64. Divide it by a constant, "
            f"e.g. `{name} / abs({name}).max()` (the plan does not change)."
        )
    return lo, hi


def simplex_stats(x: Tensor, *, name: str, size: int, atol: float = SIMPLEX_ATOL) -> tuple[float, float]:
    """Checks that ``x`` is a length-``size`` probability vector and returns ``(min, sum)`` (one device sync)."""
    if x.ndim != 1 or x.shape[0] != size:
        raise ValueError(f"`{name}` must be a vector of length {size}; got shape {tuple(x.shape)}.")
    if x.device.type == "cpu":
        lo, total = float(x.min()), float(x.sum())
    else:
        lo, total = (float(v) for v in torch.stack([x.min(), x.sum()]).tolist())  # one sync
    if not (math.isfinite(lo) and math.isfinite(total)):
        raise ValueError(f"`{name}` contains NaN or inf; it must be a probability vector.")
    if lo < 0:
        i = int((x < 0).nonzero()[0])
        raise ValueError(
            f"`{name}` must be non-negative (a probability vector); entry {i} is {float(x[i]):.3g}."
        )
    if abs(total - 1.0) > atol:
        raise ValueError(
            f"`{name}` must sum to 1 (a probability vector); it sums to {total:.8g}. "
            f"Divide it by its sum, e.g. `{name} / {name}.sum()`."
        )
    return lo, total


def host_marginal(x, *, name: str, size: int) -> np.ndarray:
    """The validated marginal as a float64 NumPy vector, rescaled to sum to 1 (a new array),
    for the transport solvers that run on the host.

    The sum is torch's, as in ``most.transport._marginal`` (NumPy's pairwise sum can differ in
    the last bit, which is enough to change the simplex's choice between tied optimal plans)."""
    src = as_tensor(x, name=name)
    t = src.detach().to("cpu", torch.float64)
    _, total = simplex_stats(t, name=name, size=size, atol=simplex_atol(src.dtype))
    return t.numpy() / total


def _describe(value) -> str:
    """``value!r``, plus its type when the repr does not show it (e.g. a str that looks like a number)."""
    text = repr(value)
    if isinstance(value, str):
        return f"{text} (a str; pass a number, not a string)"
    return text


def as_number(value, *, name: str, kind: str = "a number") -> int | float:
    """``value`` as a Python ``int`` or ``float``.

    Accepts Python and NumPy integers and floats and 0-d (or one-element) real tensors and
    arrays, e.g. ``np.float32(0.1)``, ``np.int64(3)`` or ``torch.tensor(0.5)``; refuses
    ``bool`` (``True`` is not a step size), complex numbers, strings and everything else with
    a ``ValueError`` naming ``name`` and ``kind`` (what the setting must be)."""
    v = value
    if isinstance(v, Tensor):
        if v.numel() != 1 or v.ndim > 1 or v.dtype == torch.bool or v.is_complex():
            raise ValueError(f"`{name}` must be {kind}; got a tensor of shape {tuple(v.shape)} and dtype {v.dtype}.")
        v = v.item()
    elif isinstance(v, np.ndarray):
        if v.size != 1 or v.ndim > 1 or v.dtype.kind not in "iuf":
            raise ValueError(f"`{name}` must be {kind}; got an array of shape {v.shape} and dtype {v.dtype}.")
        v = v.reshape(()).item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"`{name}` must be {kind}; got {_describe(value)}.")
    return int(v) if isinstance(v, (int, np.integer)) else float(v)


def holds_bool(value) -> bool:
    """Whether ``value`` (a number, a bool tensor or array, or nested lists and tuples) holds a
    bool: NumPy turns ``[True, 0.5]`` into ``[1.0, 0.5]`` without a word, so a vector of numbers
    is checked for them before it is converted."""
    if isinstance(value, (bool, np.bool_)):
        return True
    if isinstance(value, Tensor):
        return value.dtype == torch.bool
    if isinstance(value, np.ndarray):
        return value.dtype == np.bool_ or (value.dtype == object and any(holds_bool(item) for item in value.ravel().tolist()))
    if isinstance(value, (list, tuple)):
        return any(holds_bool(v) for v in value)
    return False


def check_positive_int(value, *, name: str, minimum: int = 1) -> int:
    """An ``int >= minimum`` (NumPy integers and integer 0-d tensors accepted), returned as ``int``."""
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not is_int and isinstance(value, (Tensor, np.ndarray)) and value.ndim == 0:
        is_int = (value.dtype.kind in "iu") if isinstance(value, np.ndarray) else (
            not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool)
    if not is_int or int(value) < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}; got {_describe(value)}.")
    return int(value)


def check_seed(value, *, name: str = "seed") -> int:
    """A random seed: an int in ``[0, 2**64)``. Each seed below ``2**32`` gives its own stream;
    torch's CPU generator keeps 32 bits of its seed, so a larger seed is hashed into those 32 bits
    (:func:`most._random.torch_seed`) and may share its stream with another seed."""
    try:
        seed = check_positive_int(value, name=name, minimum=0)
    except ValueError:
        seed = None
    if seed is None or seed >= 2**64:
        raise ValueError(f"`{name}` must be an int in [0, 2**64); got {_describe(value)}.")
    return seed


def check_non_negative(value, *, name: str, allow_inf: bool = False) -> float:
    """A finite number ``>= 0`` (``inf`` too with ``allow_inf=True``), returned as ``float``."""
    return _check_bound(value, name=name, positive=False, allow_inf=allow_inf)


def check_positive(value, *, name: str, allow_inf: bool = False) -> float:
    """A finite number ``> 0`` (``inf`` too with ``allow_inf=True``), returned as ``float``.
    NaN is always refused."""
    return _check_bound(value, name=name, positive=True, allow_inf=allow_inf)


def _check_bound(value, *, name: str, positive: bool, allow_inf: bool) -> float:
    sign = "positive" if positive else "non-negative"
    finite = "" if allow_inf else " finite"
    try:
        v = float(as_number(value, name=name, kind=f"a {sign}{finite} number"))
    except OverflowError:  # an int too large for a float
        raise ValueError(f"`{name}` must be a {sign}{finite} number; got an int too large for a float.") from None
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise ValueError(f"`{name}` must be a {sign}{finite} number; got {v!r}.")
    if not (v > 0 if positive else v >= 0):
        raise ValueError(f"`{name}` must be a {sign} number; got {value!r}.")
    return v


def check_bool(value, *, name: str) -> bool:
    """``value`` as a bool: a Python or NumPy bool only. A string such as ``"no"`` is truthy,
    and ``0``/``1`` hide a mistaken argument, so both are refused with a ``TypeError``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be True or False; got {value!r} ({type(value).__name__}). A string such as "
                        "'no' or 'false' counts as true in Python: pass the bool itself.")
    return bool(value)


def check_callback(value, *, name: str = "callback", signature: str = "callback(record, params)") -> None:
    """Refuses a ``callback`` that is neither ``None`` nor callable, before the first round (it
    is first called after that round, where Python's own error would come with the round lost)."""
    if value is not None and not callable(value):
        raise TypeError(f"`{name}` must be a function called as {signature} after every round, or None; got "
                        f"{short_repr(value)} ({type(value).__name__}).")


def check_path(value, *, name: str = "path", what: str = "a folder"):
    """Refuses a ``path`` that is not a ``str`` or ``os.PathLike`` (an int, a list), naming the
    argument; ``pathlib`` itself would say only "expected str, bytes or os.PathLike object"."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"`{name}` must be the path of {what} (a str or pathlib.Path); got {short_repr(value)} "
                        f"({type(value).__name__}).")
    return value


def short_repr(value) -> str:
    """``repr(value)`` cut to 60 characters, for a message that names a value of any size."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def public_path(cls: type) -> str:
    """The shortest dotted path below the top package under which ``cls`` is importable
    (``most.methods.Assignment`` for a class defined in ``most.methods.assignments``), for
    messages that tell users what to pass; the defining module when no package exports it."""
    parts = cls.__module__.split(".")
    for end in range(2, len(parts)):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None and getattr(module, cls.__name__, None) is cls:
            return f"{module.__name__}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def check_component(value, *, name: str, example: str, base: type | None = None) -> None:
    """Refuses a component given as a class instead of an instance (``combiner=STCHSetCombiner``,
    ``weighting=MajorityShare``): the class would be called in place of the instance's method and
    fail in the middle of a run."""
    if isinstance(value, type):
        raise TypeError(f"`{name}` must be an instance, not the class {public_path(value)}: "
                        f"pass an instance, e.g. {value.__name__}().")
    if base is not None and not isinstance(value, base):
        raise TypeError(f"`{name}` must be a {public_path(base)} (e.g. {example}); got {value!r}.")


def did_you_mean(word, choices) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to ``word``, or ``""``."""
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
