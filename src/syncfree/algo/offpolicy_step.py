"""An off-policy gradient step as one function of device tensors (`perf.compile=step` for SAC and TD3).

The critics' loss, its gradients and their optimizer's step; the actor's loss (SAC's with the temperature's), its
gradients and steps, against the stepped critics; the targets' soft update; the statistics. Everything is read from
and written to device tensors in place and nothing is returned, so `torch.compile(fullgraph=True)` makes one graph
of it, and on a GPU one CUDA graph. As in PPO's whole minibatch step (`syncfree.algo.minibatch_step`), the gradients
come from `torch.func.grad_and_value` rather than `.backward()` and the steps are `torch.optim.AdamW`'s formulas
written out (`adamw_step`; torch's Adam's where the weight decay is 0); the moments stay in the optimizers' own
state, so checkpoints are the same in every mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor, nn

from syncfree.algo.minibatch_step import adam_moments, adamw_step


class Trained(NamedTuple):
    """One optimizer's share of a whole step: its parameters (and their names in the policy, for
    `torch.func.functional_call`), their moments, second moments and step counts, its learning rate (1-element
    views), its (betas, eps, weight decay) and the gradients' clip factors (none clipped)."""

    names: list[str]
    params: list[Tensor]
    moments: list[Tensor]
    squares: list[Tensor]
    steps: list[Tensor]
    lr: Tensor
    hyper: tuple[tuple[float, float], float, float]
    unclipped: Tensor
    """Each gradient's clip factor, all 1 (made once, not at every step)."""

    def tensors(self) -> list[Tensor]:
        """The tensors the step updates in place, and the clip factors it reads: each keeps its address (a graph's
        static inputs, which a CUDA graph's replay does not copy in)."""
        return [*self.params, *self.moments, *self.squares, *self.steps, self.lr, self.unclipped]


def steps_whole(optimizer: torch.optim.Optimizer) -> bool:
    """Whether a whole step can take `optimizer`'s steps: torch's AdamW (`adam` and `adamw` are), or torch's Adam
    without weight decay (SAC's temperature's), with one setting for all its parameters."""
    groups = optimizer.param_groups
    if type(optimizer) not in (torch.optim.AdamW, torch.optim.Adam):
        return False
    first = (groups[0]["betas"], groups[0]["eps"], groups[0]["weight_decay"])
    same = all((g["betas"], g["eps"], g["weight_decay"]) == first for g in groups)
    plain = not any(g.get("amsgrad") or g.get("maximize") for g in groups)
    return same and plain and (type(optimizer) is torch.optim.AdamW or first[2] == 0)


def trained(policy: nn.Module, optimizer: torch.optim.Optimizer, lr: Tensor) -> Trained:
    """`optimizer`'s share of a whole step over `policy`'s parameters, at the learning rate `lr` (a 1-element
    float64 tensor the caller sets)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    name_of = {id(p): f"policy.{name}" for name, p in policy.named_parameters()}
    group = optimizer.param_groups[0]
    moments, squares, steps = adam_moments(optimizer, params, lr.device)
    return Trained([name_of[id(p)] for p in params], params, moments, squares, steps, lr,
                   (cast(tuple[float, float], tuple(group["betas"])), float(group["eps"]),
                    float(group["weight_decay"])), torch.ones(len(params), device=lr.device))


class PolicyCall(nn.Module):
    """`fn(*args)` as the call of a module holding `policy`, so that `torch.func.functional_call` runs it with some
    of the policy's parameters given as inputs."""

    def __init__(self, policy: nn.Module, fn: Callable[..., tuple[Tensor, ...]]) -> None:
        super().__init__()
        self.policy = policy
        self.fn = fn

    def forward(self, *args: Any) -> tuple[Tensor, ...]:
        return self.fn(*args)


def gradients(call: PolicyCall, parts: Sequence[Trained], *args: Any) -> tuple[list[list[Tensor]], tuple[Tensor, ...]]:
    """The gradients of `call(*args)`'s first output with respect to each part's parameters (the policy's other
    parameters held constant), and its outputs."""
    names = [name for part in parts for name in part.names]
    params = {name: p.detach() for part in parts for name, p in zip(part.names, part.params, strict=True)}

    def loss(given: dict[str, Tensor], *inputs: Any) -> tuple[Tensor, tuple[Tensor, ...]]:
        outputs = cast(tuple[Tensor, ...], torch.func.functional_call(call, given, inputs))
        return outputs[0], outputs

    grads, (_, outputs) = torch.func.grad_and_value(loss, has_aux=True)(params, *args)
    flat = [grads[name] for name in names]
    split, start = [], 0
    for part in parts:
        split.append(flat[start : start + len(part.names)])
        start += len(part.names)
    return split, outputs


def step(part: Trained, grads: list[Tensor]) -> None:
    """The optimizer's step of `part`'s parameters along `grads`, in place."""
    with torch.no_grad():
        adamw_step(part.params, grads, (part.moments, part.squares, part.steps), part.lr, part.unclipped, part.hyper)
