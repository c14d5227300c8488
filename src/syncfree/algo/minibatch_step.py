"""The whole PPO minibatch update as one function of device tensors (`PerfConfig.compile=step`).

Gather the minibatch, forward, losses, gradients, KL-adaptive learning rate, gradient-norm clip, AdamW step with the
skip on non-finite gradients, and the statistics: everything is read from and written to device tensors in place
(parameters, AdamW moments and step counts, the learning rate, the statistics, the skip count) and nothing is
returned, so `torch.compile(fullgraph=True)` makes one graph of it, and on a GPU one CUDA graph.

Two things differ from the `hot` update, because a whole graph cannot hold them: gradients come from
`torch.func.grad_and_value` rather than `.backward()` (dynamo cannot trace a backward call inside a whole graph),
and the AdamW step is written out below with `torch.optim.AdamW`'s formulas rather than run by the optimizer. The
moments live in the optimizer's own state, so checkpoints are the same in every mode.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar, cast

import torch
from torch import Tensor, nn

from syncfree.algo.storage import Batch

MB = TypeVar("MB")
"""What one minibatch is to a loss function (PPO's: a `Batch`)."""

LossFn = Callable[[MB], tuple[Tensor, tuple[Tensor, ...], Tensor]]


class StepState(NamedTuple):
    """The tensors one minibatch step updates in place (`MinibatchStep.state`)."""

    params: list[Tensor]
    moments: list[Tensor]
    squares: list[Tensor]
    steps: list[Tensor]
    lr: Tensor
    stats: Tensor
    skipped: Tensor


def global_norm_clip_coefficient(grads: list[Tensor], max_norm: float) -> tuple[Tensor, Tensor]:
    """(total L2 norm of all gradients, the factor that scales them to at most `max_norm`): the arithmetic of
    `torch.nn.utils.clip_grad_norm_` (each gradient's norm, then the norm of those). Eagerly the norms are one
    `torch._foreach_norm`, as the eager clip takes them; compiled, each is its own `vector_norm`, which the graph
    computes in its own kernels: `_foreach_norm` has no lowering and would leave the graph for an eager kernel at
    every minibatch."""
    if torch.compiler.is_compiling():
        norms = [torch.linalg.vector_norm(g) for g in grads]
    else:
        norms = list(torch._foreach_norm(grads))
    total = torch.linalg.vector_norm(torch.stack(norms))
    return total, (max_norm / (total + 1e-6)).clamp(max=1.0)


def group_clip_coefficients(grads: list[Tensor], groups: list[list[int]], max_norm: float
                            ) -> tuple[Tensor, list[Tensor]]:
    """`global_norm_clip_coefficient` for each group of gradients (indices into `grads`), as
    `PolicyOptimizer.clip_gradients` clips them: (the norm of all gradients, each gradient's factor)."""
    if len(groups) == 1:
        total, coefficient = global_norm_clip_coefficient(grads, max_norm)
        return total, [coefficient] * len(grads)
    factors: dict[int, Tensor] = {}
    norms = []
    for group in groups:
        norm, coefficient = global_norm_clip_coefficient([grads[i] for i in group], max_norm)
        norms.append(norm)
        factors.update(dict.fromkeys(group, coefficient))
    return torch.linalg.vector_norm(torch.stack(norms)), [factors[i] for i in range(len(grads))]


def adamw_factors(next_steps: Tensor, lr: Tensor, coefficients: Tensor, betas: tuple[float, float],
                  weight_decay: float) -> Tensor:
    """The numbers each parameter's AdamW step scales by, for all parameters at once: `[params, 4]` float32 rows
    of (step size `lr / (1 - beta1^t)`, `sqrt(1 - beta2^t)`, decay `1 - lr * weight_decay`, gradient clip
    coefficient), from the step counts `next_steps` [params] (t, the step being taken), the learning rate and the
    clip coefficients [params], in float64 as `torch.optim.AdamW` computes them on the host.

    The powers are written `exp(t * log(beta))`: torch.compile's CPU code keeps a value read by several kernels in
    memory when its expression holds an `exp`, and otherwise recomputes it inside each reader's per-element loop,
    here two powers, a square root and float64 arithmetic for every eight elements of every parameter (4x the time
    of the whole AdamW step on a 560k-parameter policy on one CPU thread)."""
    beta1, beta2 = betas
    t = next_steps.double()
    step_size = lr / (1 - torch.exp(t * math.log(beta1)))
    bias2_sqrt = (1 - torch.exp(t * math.log(beta2))).sqrt()
    decay = (1 - lr * weight_decay).expand_as(step_size)
    return torch.stack((step_size, bias2_sqrt, decay, coefficients.double()), dim=-1).float()


def adamw_update(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, factors: Tensor,
                 betas: tuple[float, float], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """One AdamW step for one parameter, its gradient clipped, with its row of `adamw_factors`: (new parameter,
    new first and second moments). Out of place, so a caller can keep the old values where the step is skipped."""
    beta1, beta2 = betas
    step_size, bias2_sqrt, decay, coefficient = factors.unbind()
    grad = grad * coefficient
    exp_avg = exp_avg.lerp(grad, 1 - beta1)
    exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
    denom = exp_avg_sq.sqrt() / bias2_sqrt + eps
    param = param * decay - step_size * exp_avg / denom
    return param, exp_avg, exp_avg_sq


def adamw_step(params: list[Tensor], grads: list[Tensor], state: tuple[list[Tensor], list[Tensor], list[Tensor]],
               lr: Tensor, coefficients: Tensor, hyper: tuple[tuple[float, float], float, float],
               finite: Tensor | None = None) -> None:
    """One AdamW step of every parameter in place (`torch.optim.AdamW`'s formulas; Adam's where the weight decay is
    0): `state` its moments, second moments and step counts (`adam_moments`), `lr` a 1-element tensor,
    `coefficients` each gradient's clip factor, `hyper` (betas, eps, weight decay). Where `finite` is False the
    parameters and the state are left alone (a non-finite gradient)."""
    moments, squares, steps = state
    betas, eps, weight_decay = hyper
    next_steps = torch.cat(steps) + 1
    factors = adamw_factors(next_steps, lr, coefficients, betas, weight_decay)
    for i, (p, g, m, v, step) in enumerate(zip(params, grads, moments, squares, steps, strict=True)):
        new = (next_steps[i : i + 1], *adamw_update(p, g, m, v, factors[i], betas, eps))
        for old, value in zip((step, p, m, v), new, strict=True):
            old.copy_(value if finite is None else torch.where(finite, value, old))


def adam_moments(optimizer: torch.optim.Optimizer, params: list[Tensor], device: torch.device
                 ) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """`optimizer`'s first and second moments and step counts of `params` (Adam's and AdamW's state), created as torch
    creates them where it has not stepped yet, the step counts on `device` (a loaded checkpoint may hold them on the
    host) and as 1-element views: torch 2.13's compiled CPU code drops in-place updates of 0-dim inputs."""
    moments, squares, steps = [], [], []
    for p in params:
        state = optimizer.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        elif state["step"].device != device:
            state["step"] = state["step"].to(device, torch.float32)
        moments.append(state["exp_avg"])
        squares.append(state["exp_avg_sq"])
        steps.append(state["step"].view(1))
    return moments, squares, steps


class MinibatchStep(Generic[MB]):
    """`step(data, idx, state)`: one whole minibatch update on the rows `idx` of the flat rollout `data`
    (`step.update(mb, state)`: on a minibatch already gathered, of whatever `losses` reads).

    `losses(mb) -> (loss, parts, kl_mean)` is PPO's pure loss function of the policy's parameters; `adapt(lr, kl)`
    returns the next learning rate (or None for a fixed schedule); `skip_nonfinite` (`grad_finite_from_norm`):
    a step whose gradient norm is not finite leaves parameters and AdamW state alone and is counted, else it is
    taken as rsl_rl takes it. The state the step updates in place comes as arguments (`StepState`), not as
    attributes: a compiled graph updates its inputs."""

    def __init__(self, policy: nn.Module, losses: LossFn[MB], optimizer: torch.optim.AdamW, max_grad_norm: float,
                 adapt: Callable[[Tensor, Tensor], Tensor] | None, skip_nonfinite: bool = True,
                 clip_groups: list[list[nn.Parameter]] | None = None) -> None:
        self.loss_module = _LossModule(policy, losses)
        self.names = [f"policy.{n}" for n, p in policy.named_parameters() if p.requires_grad]
        self.params: list[Tensor] = [p for p in policy.parameters() if p.requires_grad]
        index = {id(p): i for i, p in enumerate(self.params)}
        self.clip_groups = [[index[id(p)] for p in group] for group in clip_groups if group] if clip_groups else \
            [list(range(len(self.params)))]
        """Indices into `params` of each group clipped by its own norm (`PolicyOptimizer.clip_groups`)."""
        self.optimizer, self.max_grad_norm, self.adapt = optimizer, max_grad_norm, adapt
        self.skip_nonfinite = skip_nonfinite
        group = optimizer.param_groups[0]
        self.betas, self.eps, self.weight_decay = tuple(group["betas"]), group["eps"], group["weight_decay"]

    def state(self, lr: Tensor, stats: Tensor, skipped: Tensor) -> StepState:
        """What a step updates: the parameters, the optimizer's moments and step counts (created as
        `torch.optim.AdamW` creates them if it has not stepped yet, with the step counts on the device: a loaded
        checkpoint may hold them on the host), the learning rate, the statistics (`(*parts, grad_norm)` added) and
        the count of skipped steps.

        0-dim tensors go in as 1-element views: torch 2.13's compiled CPU code drops in-place updates of 0-dim
        float64 inputs (the learning rate)."""
        moments, squares, steps = adam_moments(self.optimizer, self.params, lr.device)
        return StepState(self.params, moments, squares, steps, lr.view(1), stats, skipped.view(1))

    def loss(self, params: dict[str, Tensor], mb: MB) -> tuple[Tensor, tuple[tuple[Tensor, ...], Tensor]]:
        # `functional_call` returns what the module's forward does (`_LossModule.forward`); torch types it as Any
        return cast("tuple[Tensor, tuple[tuple[Tensor, ...], Tensor]]",
                    torch.func.functional_call(self.loss_module, params, (mb,)))

    def __call__(self, data: Batch, idx: Tensor, state: StepState) -> None:
        self.update(cast(MB, Batch(*(x[idx] for x in data))), state)

    def update(self, mb: MB, state: StepState) -> None:
        detached = {name: p.detach() for name, p in zip(self.names, state.params, strict=True)}
        grads_by_name, (_, (parts, kl_mean)) = torch.func.grad_and_value(self.loss, has_aux=True)(detached, mb)
        grads = [grads_by_name[name] for name in self.names]
        with torch.no_grad():
            lr = state.lr
            if self.adapt is not None:
                lr.copy_(self.adapt(lr, kl_mean))
            grad_norm, coefficients = group_clip_coefficients(grads, self.clip_groups, self.max_grad_norm)
            finite = torch.isfinite(grad_norm) if self.skip_nonfinite else None
            adamw_step(state.params, grads, (state.moments, state.squares, state.steps), lr,
                       torch.stack(coefficients), (self.betas, self.eps, self.weight_decay), finite)
            if finite is not None:
                state.skipped.add_(finite.logical_not().long())
            state.stats.add_(torch.stack((*parts, grad_norm)))


class _LossModule(nn.Module):
    """The loss as a module call, so `torch.func.functional_call` can run it with parameters given as inputs."""

    def __init__(self, policy: nn.Module, losses: LossFn[Any]) -> None:
        super().__init__()
        self.policy = policy
        self.losses = losses

    def forward(self, mb: Any) -> tuple[Tensor, tuple[tuple[Tensor, ...], Tensor]]:
        loss, parts, kl_mean = self.losses(mb)
        return loss, (parts, kl_mean)

