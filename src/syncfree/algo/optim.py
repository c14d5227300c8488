"""The optimizer half of PPO, shared by both algorithms: AdamW, gradient-norm clip, the skip on non-finite gradients,
the KL-adaptive learning rate, and (with several processes) the gradient all-reduce."""

from __future__ import annotations

from typing import Any, Protocol, cast

import torch
from torch import Tensor, nn

from syncfree.algo.settings import PPOConfig
from syncfree.core.switches import SEED_BEFORE, PerfConfig


class Collective(Protocol):
    """The collectives an algorithm needs with several processes (`syncfree.train.distributed.Distributed`)."""

    world_size: int

    def all_reduce(self, tensor: Tensor, what: str) -> Tensor:
        """Sum `tensor` over all ranks in place and return it; `what` names it in errors."""
        ...


MIN_LR, MAX_LR = 1e-5, 1e-2
"""Bounds of the adaptive learning rate (rsl_rl's)."""


class PolicyOptimizer:
    """AdamW over `params` with PPO's step rules; `lr_on_device` (`perf.device_adaptive_lr` with the adaptive
    schedule) keeps the learning rate in a device tensor that the schedule updates without a host read.
    `clip_groups`: the parameter groups whose gradients are clipped each by its own norm (`ppo.grad_clip`); one
    group, all of `params`, by default."""

    def __init__(self, params: list[nn.Parameter], cfg: PPOConfig, perf: PerfConfig, device: torch.device,
                 dist: Collective | None = None, clip_groups: list[list[nn.Parameter]] | None = None) -> None:
        self.params, self.cfg, self.perf = params, cfg, perf
        self.clip_groups = [group for group in clip_groups if group] if clip_groups else [params]
        self.adaptive = cfg.schedule == "adaptive"
        self.annealed = cfg.schedule == "linear"
        self.adapt_per_minibatch = self.adaptive and cfg.kl_adapt_every == "minibatch"
        """Adapt after every minibatch (rsl_rl); otherwise (`kl_adapt_every=update`) once, in `end_update`."""
        self.lr_on_device = self.adaptive and perf.device_adaptive_lr
        self.learning_rate = cfg.learning_rate
        """Host-side learning rate (the conventional adaptive schedule, the fixed and the linear one)."""
        self.lr = torch.tensor(cfg.learning_rate, dtype=torch.float64, device=device)
        """Device-side learning rate (float64, so each step rounds exactly like the host schedule)."""
        optimizer_lr: float | Tensor = cfg.learning_rate
        if self.lr_on_device:
            # The CUDA fused kernel reads a float32 lr tensor; the CPU kernels use the float64 one, which rounds
            # each step exactly like a Python float learning rate.
            optimizer_lr = self.lr.float() if perf.fused_adamw and device.type != "cpu" else self.lr
        self.optimizer_lr = optimizer_lr
        self.optimizer = torch.optim.AdamW(
            params, lr=optimizer_lr, weight_decay=cfg.weight_decay, fused=perf.fused_adamw or None,
            foreach=False if isinstance(optimizer_lr, Tensor) and not perf.fused_adamw else None,
        )
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        if perf.grad_finite_from_norm is True and perf.fused_adamw:
            # read by the fused kernel: skips the step when 1 (torch reads it with getattr; its stubs do not declare it)
            self.optimizer.found_inf = self.found_inf  # type: ignore[attr-defined]
        self.skipped_steps = torch.zeros((), dtype=torch.int64, device=device)
        self.grad_all_reduce = GradientAllReduce(params, dist) if dist is not None else None
        """With several processes: averages gradients and the minibatch KL over ranks (one collective)."""
        self._skipped_before = torch.zeros_like(self.skipped_steps)
        self._skipped_last = torch.zeros_like(self.skipped_steps)
        self._step_skipped = torch.zeros_like(self.skipped_steps)
        self.skip_run = torch.zeros_like(self.skipped_steps)
        """Minibatch updates skipped in a row up to now (0 after an update that stepped)."""
        self.longest_skip_run = torch.zeros_like(self.skipped_steps)
        """The longest run of skipped updates that reached into this iteration's update."""
        self._no_kl = torch.zeros((), device=device)
        """What rides along the gradient all-reduce when the schedule reads no KL."""
        self.update_kl = torch.zeros((), device=device)
        """`kl_adapt_every=update`: the sum of this update's minibatch KLs (averaged over ranks)."""
        self.update_minibatches = 0

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=self.perf.zero_grad_set_to_none)

    def step(self, kl_mean: Tensor | None = None) -> Tensor:
        """After the backward pass: average the gradients (and `kl_mean`) over ranks, adapt the learning rate to
        the minibatch KL (adaptive schedule), clip the gradients and step; returns their norm before clipping."""
        if self.grad_all_reduce is not None:
            kl_mean = self.grad_all_reduce(kl_mean if kl_mean is not None else self._no_kl)
        # the adaptive schedule's callers always pass the minibatch KL (None only with another schedule)
        if self.adapt_per_minibatch:
            self.adapt_learning_rate(cast(Tensor, kl_mean))
        elif self.adaptive:
            self.record_kl(cast(Tensor, kl_mean))
        grad_norm = self.clip_and_step()
        self.track_skips()
        return grad_norm

    def track_skips(self) -> None:
        """After each minibatch update, whichever path stepped: extend or end the run of skipped updates (on the
        device, allocating nothing)."""
        torch.sub(self.skipped_steps, self._skipped_last, out=self._step_skipped)
        self.skip_run.add_(1).mul_(self._step_skipped)
        torch.maximum(self.longest_skip_run, self.skip_run, out=self.longest_skip_run)
        self._skipped_last.copy_(self.skipped_steps)

    def clip_gradients(self) -> Tensor:
        """Clip each group's gradient to `max_grad_norm` by the group's norm; returns the norm of all gradients
        before clipping."""
        norms = [torch.nn.utils.clip_grad_norm_(group, self.cfg.max_grad_norm) for group in self.clip_groups]
        return norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))

    def clip_and_step(self) -> Tensor:
        """Clip the gradients and step, skipping (and counting) steps with non-finite gradients
        (`grad_finite_from_norm`; off, every step is taken, as in rsl_rl)."""
        grad_norm = self.clip_gradients()
        if self.perf.grad_finite_from_norm == SEED_BEFORE:
            self.step_if_every_gradient_is_finite()
            return grad_norm
        if not self.perf.grad_finite_from_norm:  # rsl_rl: no check, a non-finite gradient reaches AdamW
            self.optimizer.step()
            return grad_norm
        torch.logical_not(torch.isfinite(grad_norm), out=self.found_inf)
        self.skipped_steps.add_(self.found_inf.long())
        if self.perf.fused_adamw:
            self.optimizer.step()  # the fused kernel leaves parameters and state untouched when found_inf is 1
        elif not bool(self.found_inf):  # one host read: the for-loop AdamW cannot skip on the device
            self.optimizer.step()
        return grad_norm

    def step_if_every_gradient_is_finite(self) -> None:
        """The humanoid pipeline's check before its change (`grad_finite_from_norm=seed_before`): each parameter's
        gradient tested on the host, one read per tensor up to the first that is not finite, which skips the step
        (counted)."""
        gradients = (p.grad for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None)
        if all(bool(torch.isfinite(grad).all()) for grad in gradients):
            self.optimizer.step()
        else:
            self.skipped_steps.add_(1)

    def adapt_learning_rate(self, kl_mean: Tensor) -> None:
        """Divide the learning rate by 1.5 when the KL is above twice its target, multiply below half of it."""
        target = self.cfg.desired_kl
        if not self.lr_on_device:
            if kl_mean > target * 2.0:
                self.learning_rate = max(MIN_LR, self.learning_rate / 1.5)
            elif kl_mean < target / 2.0 and kl_mean > 0.0:
                self.learning_rate = min(MAX_LR, self.learning_rate * 1.5)
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate
            return
        self.lr.copy_(self.next_learning_rate(self.lr, kl_mean))
        if self.optimizer_lr is not self.lr:
            cast(Tensor, self.optimizer_lr).copy_(self.lr)  # a tensor whenever `lr_on_device`

    def next_learning_rate(self, lr: Tensor, kl_mean: Tensor) -> Tensor:
        """The adaptive schedule on the device: `lr` / 1.5 above twice the KL target, x 1.5 below half of it."""
        target = self.cfg.desired_kl
        lower = (lr / 1.5).clamp_(min=MIN_LR)
        higher = (lr * 1.5).clamp_(max=MAX_LR)
        raise_lr = (kl_mean < target / 2.0) & (kl_mean > 0.0)
        return torch.where(kl_mean > target * 2.0, lower, torch.where(raise_lr, higher, lr))

    def record_kl(self, kl_sum: Tensor, minibatches: int = 1) -> None:
        """`kl_adapt_every=update`: add the KL of `minibatches` minibatches (summed) to this update's (device)."""
        self.update_kl.add_(kl_sum)
        self.update_minibatches += minibatches

    def end_update(self) -> None:
        """After the update's last minibatch: `kl_adapt_every=update` adapts the learning rate to the update's mean
        KL (the per-minibatch schedule has adapted already)."""
        if self.adaptive and not self.adapt_per_minibatch and self.update_minibatches:
            self.adapt_learning_rate(self.update_kl / self.update_minibatches)

    def begin_update(self, progress: float = 0.0) -> None:
        """Mark the start of an iteration's update (for `statistics` and the per-update schedule); the linear
        schedule sets this update's rate from `progress`, the fraction of the run done before it."""
        if self.annealed:
            self.set_learning_rate(annealed_learning_rate(self.cfg.learning_rate, progress))
        self.update_kl.zero_()
        self.update_minibatches = 0
        self._skipped_before.copy_(self.skipped_steps)
        self._skipped_last.copy_(self.skipped_steps)
        self.longest_skip_run.copy_(self.skip_run)

    def set_learning_rate(self, lr: float) -> None:
        """Set the rate from the host (the linear schedule): the optimizer's groups and the device copy that the
        whole-step graph reads (a host-to-device write, no read)."""
        self.learning_rate = lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.lr.fill_(lr)

    def statistics(self) -> dict[str, Tensor]:
        """Steps skipped since `begin_update`, the current learning rate, the longest run of skipped updates and
        whether any parameter is NaN or infinite, as device tensors."""
        lr = self.lr if self.lr_on_device else torch.tensor(self.learning_rate, dtype=torch.float64,
                                                            device=self.lr.device)
        finite = torch.stack([torch.isfinite(p).all() for p in self.params]).all()
        return {"skipped_steps": self.skipped_steps - self._skipped_before, "learning_rate": lr,
                "longest_skip_run": self.longest_skip_run, "non_finite_parameters": finite.logical_not()}

    def current_learning_rate(self) -> float:
        """The learning rate now, as a Python float (a host read when the adaptive schedule keeps it on the device:
        for saving and reporting, never in the loop)."""
        return float(self.lr) if self.lr_on_device else self.learning_rate

    def state_dict(self) -> dict[str, Any]:
        """The learning rate is saved as one float64 tensor whichever path kept it, so a run may resume with
        `device_adaptive_lr` switched."""
        lr = self.lr if self.lr_on_device else torch.tensor(self.learning_rate, dtype=torch.float64)
        return {"optimizer": self.optimizer.state_dict(), "lr": lr.clone(), "skipped_steps": self.skipped_steps.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_optimizer_state(state["optimizer"])
        self.lr.copy_(state["lr"])
        if isinstance(self.optimizer_lr, Tensor) and self.optimizer_lr is not self.lr:
            self.optimizer_lr.copy_(self.lr)
        self.learning_rate = float(state["lr"])
        self.skipped_steps.copy_(state["skipped_steps"])
        for group in self.optimizer.param_groups:
            group["lr"] = self.optimizer_lr if isinstance(self.optimizer_lr, Tensor) else self.learning_rate

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Load moments and step counts but keep this run's optimizer options (fused, foreach, lr object). The
        tensors are copied: `torch.optim` would otherwise keep those of a live state dict and share them."""
        own_groups = self.optimizer.state_dict()["param_groups"]
        moments = {key: {name: value.clone() if isinstance(value, Tensor) else value for name, value in entry.items()}
                   for key, entry in state["state"].items()}
        self.optimizer.load_state_dict({"state": moments, "param_groups": own_groups})


def annealed_learning_rate(initial: float, progress: float) -> float:
    """The linear schedule's rate after the fraction `progress` of the run: `initial` x (1 - progress), at least 0."""
    return initial * max(1.0 - progress, 0.0)


class GradientAllReduce:
    """Average gradients over ranks with one `all_reduce` per minibatch.

    Gradients are copied into a flat buffer preallocated once (one `_foreach_copy_`), the buffer is summed over
    ranks (one collective) and divided by the world size, and the averages are copied back (one
    `_foreach_copy_`). A few extra scalars (the minibatch KL) ride along in the same buffer. Parameters without
    a gradient (unused in this minibatch on every rank, as the graph is the same everywhere) are skipped."""

    def __init__(self, params: list[nn.Parameter], ctx: Collective, extra: int = 1) -> None:
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1:
            raise ValueError(f"gradient all-reduce: parameters must share one dtype, got {sorted(map(str, dtypes))}")
        self.params, self.ctx = params, ctx
        total = sum(p.numel() for p in params)
        self.flat = torch.zeros(total + extra, dtype=params[0].dtype, device=params[0].device)
        self.views = [v.view_as(p) for v, p in zip(torch.split(self.flat[:total], [p.numel() for p in params]), params,
                                                   strict=True)]
        self.extra = self.flat[total:]

    def __call__(self, extra: Tensor) -> Tensor:
        """Average every parameter's gradient in place; returns the rank average of `extra` (a view into the
        buffer, valid until the next call)."""
        views, grads = [], []
        for view, p in zip(self.views, self.params, strict=True):
            if p.grad is not None:
                views.append(view)
                grads.append(p.grad)
        torch._foreach_copy_([*views, self.extra], [*grads, extra.reshape(-1)])
        self.ctx.all_reduce(self.flat, "gradient all-reduce")
        self.flat.div_(self.ctx.world_size)
        torch._foreach_copy_(grads, views)
        return self.extra.view(extra.shape)
