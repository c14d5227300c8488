"""Writing to "the envs being reset", given either as int64 env ids or as a bool mask over all envs.

The conventional reset path passes ids (found with `nonzero()`, a host sync); the sync-free path passes the
done mask and writes with `torch.where`. Values are computed for all envs (every random draw covers all envs),
so both paths write the same numbers.
"""

from __future__ import annotations

import torch
from torch import Tensor


def is_mask(selection: Tensor) -> bool:
    return selection.dtype == torch.bool


def _broadcast(mask: Tensor, target: Tensor) -> Tensor:
    return mask.view(-1, *([1] * (target.dim() - 1)))


def assign_(target: Tensor, selection: Tensor, value: Tensor) -> None:
    """`target[selected] = value[selected]`; `value` has one row per env."""
    if is_mask(selection):
        torch.where(_broadcast(selection, target), value, target, out=target)
    else:
        target[selection] = value[selection]


def assign_rows_(target: Tensor, selection: Tensor, rows: Tensor) -> None:
    """Like `assign_`, but `rows` has one row per selected id (ids) or per env (mask)."""
    if is_mask(selection):
        torch.where(_broadcast(selection, target), rows, target, out=target)
    else:
        target[selection] = rows


def fill_(target: Tensor, selection: Tensor, value: float) -> None:
    if is_mask(selection):
        target.masked_fill_(_broadcast(selection, target), value)
    else:
        target[selection] = value


def selected_mean(values: Tensor, selection: Tensor) -> tuple[Tensor, Tensor]:
    """Mean over the selected envs along dim 0 (per remaining dims) and the selected count (device tensors)."""
    if is_mask(selection):
        count = selection.sum()
        masked = torch.where(_broadcast(selection, values), values, torch.zeros((), device=values.device))
        return masked.sum(0) / count.clamp(min=1), count
    return torch.mean(values[selection], dim=0), torch.tensor(selection.numel(), device=values.device)
