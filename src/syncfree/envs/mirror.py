"""An env's mirror symmetry: how its observations and actions change when the world is reflected (left and right
swapped), for symmetry augmentation and the mirror loss (`syncfree.algo.symmetry`).

A `Mirror` is two pure tensor functions: one per observation group and one for actions, each mapping a batch
`[rows, dim]` to its reflection. Most reflections swap left and right entries and flip the sign of lateral ones: a
`Reflection` is that, a signed permutation per group (`mirrored[:, i] = sign[i] * x[:, index[i]]`), one gather and one
product on the device, no host read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor


@runtime_checkable
class Mirror(Protocol):
    """The reflection of an env's observation groups and actions (each a batch `[rows, dim]`, mapped row by row)."""

    def observations(self, group: str, obs: Tensor) -> Tensor: ...

    def actions(self, actions: Tensor) -> Tensor: ...


class SignedPermutation:
    """`x[..., index] * sign`: entry `i` of the reflection is entry `index[i]` with sign `sign[i]`."""

    def __init__(self, index: Sequence[int], sign: Sequence[float], device: torch.device | str = "cpu") -> None:
        if len(index) != len(sign):
            raise ValueError(f"a reflection needs one sign per entry: {len(index)} indices, {len(sign)} signs")
        if sorted(index) != list(range(len(index))):
            raise ValueError(f"a reflection's indices must permute 0..{len(index) - 1}, got {list(index)}")
        if any(s not in (-1.0, 1.0) for s in sign):
            raise ValueError(f"a reflection's signs are -1 or 1, got {list(sign)}")
        self.index = torch.tensor(list(index), dtype=torch.int64, device=device)
        self.sign = torch.tensor(list(sign), dtype=torch.float32, device=device)

    @classmethod
    def identity(cls, size: int, device: torch.device | str = "cpu") -> SignedPermutation:
        return cls(range(size), [1.0] * size, device)

    def __len__(self) -> int:
        return int(self.index.numel())

    def __call__(self, x: Tensor) -> Tensor:
        return x.index_select(-1, self.index) * self.sign.to(x.dtype)

    def is_involution(self) -> bool:
        """Reflecting twice gives back the input (what a mirror symmetry must do)."""
        probe = torch.arange(1, len(self) + 1, dtype=torch.float32, device=self.index.device)
        return bool(torch.equal(self(self(probe)), probe))


class Reflection:
    """A `Mirror` made of one `SignedPermutation` per observation group and one for the actions."""

    def __init__(self, observations: Mapping[str, SignedPermutation], actions: SignedPermutation) -> None:
        self.groups = dict(observations)
        self.action_map = actions
        for name, reflection in {**self.groups, "actions": actions}.items():
            if not reflection.is_involution():
                raise ValueError(f"the reflection of {name} applied twice does not give back its input")

    def observations(self, group: str, obs: Tensor) -> Tensor:
        return self.groups[group](obs)

    def actions(self, actions: Tensor) -> Tensor:
        return self.action_map(actions)
