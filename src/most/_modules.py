"""Where a module's parameters sit in the flat parameter vector ``theta [d]``."""

from __future__ import annotations

from torch import nn


def parameter_range(module: nn.Module, name: str, *, owner: str = "The module") -> tuple[int, int]:
    """``(start, stop)`` of parameter ``name`` of ``module`` in the flat vector of its parameters
    (``named_parameters()`` order); ``"last"`` is the last parameter (e.g. the final layer's bias).
    ``owner`` names the module in the error for an unknown name."""
    layout, start = {}, 0
    for key, p in module.named_parameters():
        layout[key] = (start, start + p.numel())
        start += p.numel()
    if name == "last":
        name = list(layout)[-1]
    if name not in layout:
        raise ValueError(f"{owner} has no parameter {name!r}; its parameters are "
                         f"{', '.join(repr(n) for n in layout)} (or 'last').")
    return layout[name]
