"""The optimizer half of PPO, shared by both algorithms: the optimizer (`make_optimizer`: AdamW, or Muon with AdamW),
gradient-norm clip, the skip on non-finite gradients, the KL-adaptive learning rate, and (with several processes) the
gradient all-reduce."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, cast

import torch
from torch import Tensor, nn

from syncfree.algo.settings import OPTIMIZERS, PPOConfig
from syncfree.core.switches import SEED_BEFORE, PerfConfig
from syncfree.errors import UserError


class Collective(Protocol):
    """The collectives an algorithm needs with several processes (`syncfree.train.distributed.Distributed`)."""

    world_size: int

    def all_reduce(self, tensor: Tensor, what: str) -> Tensor:
        """Sum `tensor` over all ranks in place and return it; `what` names it in errors."""
        ...


MIN_LR, MAX_LR = 1e-5, 1e-2
"""Bounds of the adaptive learning rate (rsl_rl's)."""


def hidden_matrices(module: nn.Module) -> list[nn.Parameter]:
    """Muon's share of a network: the weight of each linear layer of an `nn.Sequential` but its first and last (the
    hidden matrices; the input and output layers, biases and everything else step with AdamW)."""
    found: dict[int, nn.Parameter] = {}
    for sub in module.modules():
        if isinstance(sub, nn.Sequential):
            linears = [m for m in sub if isinstance(m, nn.Linear)]
            found.update((id(m.weight), cast(nn.Parameter, m.weight)) for m in linears[1:-1])
    return list(found.values())


def searchable_optimizers(*hidden: list[int], fixed_rate: bool = True) -> list[str]:
    """The optimizers a default search space draws from for MLPs of the `hidden` sizes, each its own optimizer:
    `muon` where every one has a hidden matrix (two hidden layers or more), `schedule_free_adamw` with a fixed rate
    (`fixed_rate`; it is made for one)."""
    return [name for name in OPTIMIZERS if (name != "muon" or all(len(sizes) >= 2 for sizes in hidden))
            and (name != "schedule_free_adamw" or fixed_rate)]


def make_optimizer(params: list[nn.Parameter], name: str, lr: float | Tensor, weight_decay: float = 0.0, *,
                   matrices: list[nn.Parameter] | None = None, fused: bool | None = None, foreach: bool | None = None,
                   found_inf: Tensor | None = None) -> torch.optim.Optimizer:
    """The optimizer `name` (`ppo.optimizer`: adam, adamw, muon, schedule_free_adamw) over `params`. `adam` and
    `adamw` are torch's AdamW with `weight_decay` (the caller picks the decay: `PPOConfig.decay`); `muon` is
    `MuonAdamW`, Muon on the `matrices` among `params` (e.g. `hidden_matrices(network)`), AdamW on the rest;
    `schedule_free_adamw` is `ScheduleFreeAdamW` (call its `train()` before stepping, `eval()` before acting,
    evaluating or saving). `lr`: a float, or a 0-dim tensor that a schedule updates on the device.
    `fused`/`foreach`: AdamW's. `found_inf`: a 0-dim float tensor; when it is 1 the step leaves parameters and state
    alone, decided on the device (AdamW's needs `fused`)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer {name!r}: expected one of {', '.join(OPTIMIZERS)}")
    if found_inf is not None and not fused and name != "schedule_free_adamw":
        raise ValueError("found_inf: AdamW skips its step on the device only with fused=True")
    optimizer: torch.optim.Optimizer
    if name == "schedule_free_adamw":
        optimizer = ScheduleFreeAdamW(params, lr, weight_decay, found_inf=found_inf)
    elif name == "muon":
        chosen = {id(p) for p in matrices or ()}
        hidden = [p for p in params if id(p) in chosen]
        if not hidden:
            raise ValueError("muon: no hidden matrix among the parameters (a linear layer between two others)")
        optimizer = MuonAdamW(hidden, [p for p in params if id(p) not in chosen], lr, weight_decay, fused=fused,
                              foreach=foreach, found_inf=found_inf)
    else:
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused, foreach=foreach)
        if found_inf is not None:
            # read by the fused kernel: skips the step when 1 (torch reads it with getattr; its stubs do not declare it)
            optimizer.found_inf = found_inf  # type: ignore[attr-defined]
    return optimizer


class MuonAdamW(torch.optim.Optimizer):
    """torch's Muon on the hidden matrices and torch's AdamW on the other parameters, as one optimizer: one state
    dict (its parameter groups: Muon's, then AdamW's), one `step`, one `zero_grad`.

    Muon's step is orthogonalized momentum scaled to AdamW's RMS (`adjust_lr_fn="match_rms_adamw"`), so one
    learning rate serves both halves. Two things torch's Muon would read on the host are done on the device: a
    learning rate kept in a tensor (Muon passes it as a Python number to `add_`) and the skip on non-finite
    gradients (`found_inf`, which fused AdamW reads itself). For either, Muon's parameters and momentum buffers are
    copied before its step; with a tensor rate Muon steps at rate 1 and the change is scaled by the rate (its step is
    linear in the rate, weight decay included), and with `found_inf` at 1 the copies are put back. With a float rate
    and no `found_inf` the step is torch's own, bit for bit."""

    def __init__(self, matrices: list[nn.Parameter], others: list[nn.Parameter], lr: float | Tensor,
                 weight_decay: float = 0.0, fused: bool | None = None, foreach: bool | None = None,
                 found_inf: Tensor | None = None) -> None:
        self.lr = lr
        self.muon = torch.optim.Muon(matrices, lr=1.0 if isinstance(lr, Tensor) else lr, weight_decay=weight_decay,
                                     adjust_lr_fn="match_rms_adamw")
        self.adamw = torch.optim.AdamW(others, lr=lr, weight_decay=weight_decay, fused=fused, foreach=foreach)
        super().__init__([*self.muon.param_groups, *self.adamw.param_groups], {})
        self._share_state()
        self.found_inf = found_inf
        if found_inf is not None:
            self.adamw.found_inf = found_inf  # type: ignore[attr-defined]  # read by the fused kernel
        self.matrices: list[Tensor] = list(matrices)
        guarded = found_inf is not None or isinstance(lr, Tensor)
        self._before = [torch.zeros_like(p) for p in matrices] if guarded else []
        self._momentum_before = [torch.zeros_like(p) for p in matrices] if found_inf is not None else []
        """Muon's parameters (and, to skip, momentum buffers; zero before the first step) as they were before the
        step."""

    def _share_state(self) -> None:
        """Both halves keep their state in this optimizer's (parameters are distinct, so are the keys)."""
        self.muon.state = self.adamw.state = self.state
        split = len(self.muon.param_groups)
        self.muon.param_groups, self.adamw.param_groups = self.param_groups[:split], self.param_groups[split:]

    def lr_groups(self) -> list[dict[str, Any]]:
        """The parameter groups whose `lr` follows the schedule: all of them with a float rate; AdamW's with a tensor
        rate (Muon's stays 1, its step scaled by the tensor)."""
        return self.adamw.param_groups if isinstance(self.lr, Tensor) else self.param_groups

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]  # no closure: returns no loss
        """Muon's step on the matrices, then AdamW's on the rest."""
        if self._before:
            torch._foreach_copy_(self._before, self.matrices)
            momentum = [self.state[p].get("momentum_buffer") for p in self.matrices]
            if self._momentum_before and momentum[0] is not None:
                torch._foreach_copy_(self._momentum_before, cast(list[Tensor], momentum))
        self.muon.step()  # type: ignore[no-untyped-call]  # torch's Muon is unannotated
        if isinstance(self.lr, Tensor):  # stepped at rate 1: p0 + lr * (p1 - p0)
            torch._foreach_sub_(self.matrices, self._before)
            torch._foreach_mul_(self.matrices, self.lr)
            torch._foreach_add_(self.matrices, self._before)
        if self.found_inf is not None:
            skip = self.found_inf.bool()
            momentum = [self.state[p]["momentum_buffer"] for p in self.matrices]
            for now, before in zip([*self.matrices, *momentum], [*self._before, *self._momentum_before], strict=True):
                now.copy_(torch.where(skip, before, now))
        self.adamw.step()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._share_state()


class ScheduleFreeAdamW(torch.optim.Optimizer):
    """Schedule-free AdamW (Defazio et al. 2024; the `schedulefree` package's `AdamWScheduleFree`, without warm-up,
    r=0, weight_lr_power=2), with its scalars in device tensors: a learning rate kept in a tensor and the skip on
    non-finite gradients (`found_inf`) read nothing on the host.

    The parameters hold `y`, where gradients are taken, in train mode (`train()`), and the average `x`, the weights
    to evaluate, export and save, in eval mode (`eval()`); the state holds `z`, the squared-gradient average and the
    step count, the sum of the averaging weights and the largest rate so far (the last three per parameter, equal in
    all). Steps are taken in train mode only."""

    SCALARS = ("step", "weight_sum", "lr_max")

    def __init__(self, params: list[nn.Parameter], lr: float | Tensor, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, found_inf: Tensor | None = None) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.found_inf = found_inf
        self.train_mode = False

    def _init_state(self, device: torch.device) -> None:
        """Create the state as `AdamWScheduleFree` does at the first step: `z` = the parameter, the rest zero."""
        scalars = [torch.zeros((), dtype=torch.float64, device=device) for _ in self.SCALARS]
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p].update(dict(zip(self.SCALARS, scalars, strict=True)), z=p.detach().clone(),
                                     exp_avg_sq=torch.zeros_like(p))

    def _lerp_to_z(self, weight: Callable[[float], float]) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if "z" in self.state[p]:
                    p.lerp_(self.state[p]["z"], weight(group["betas"][0]))

    @torch.no_grad()
    def train(self) -> None:
        """Parameters to `y` = (1 - beta1) z + beta1 x (before the update's first step)."""
        if not self.train_mode:
            self._lerp_to_z(lambda beta1: 1 - beta1)
            self.train_mode = True

    @torch.no_grad()
    def eval(self) -> None:
        """Parameters to the average `x` (after the update's last step)."""
        if self.train_mode:
            self._lerp_to_z(lambda beta1: 1 - 1 / beta1)
            self.train_mode = False

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]  # no closure: returns no loss
        if not self.train_mode:
            raise RuntimeError("ScheduleFreeAdamW.step: call train() first (the parameters hold the average)")
        first = self.param_groups[0]["params"][0]
        if not self.state[first]:
            self._init_state(first.device)
        state = self.state[first]
        step, weight_sum, lr_max = (state[name] for name in self.SCALARS)
        skip = None if self.found_inf is None else self.found_inf.bool()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr = group["lr"]
            next_step = step + 1
            bias_correction2 = 1 - torch.pow(beta2, next_step)
            new_lr_max = torch.clamp(lr_max, min=lr) if not isinstance(lr, Tensor) else torch.maximum(lr_max, lr)
            weight = new_lr_max**2
            new_weight_sum = weight_sum + weight
            ckp1 = weight / new_weight_sum
            y_rate = (lr * (beta1 * (1 - ckp1) - 1)).float()
            z_rate = lr.float() if isinstance(lr, Tensor) else lr
            ckp1_32 = ckp1.float()
            for p in group["params"]:
                if p.grad is None:
                    continue
                entry = self.state[p]
                z, exp_avg_sq = entry["z"], entry["exp_avg_sq"]
                new_sq = exp_avg_sq * beta2 + (1 - beta2) * p.grad * p.grad
                grad = p.grad / ((new_sq / bias_correction2.float()).sqrt() + group["eps"])
                if group["weight_decay"] != 0:
                    grad = grad + group["weight_decay"] * p
                new_y = torch.lerp(p, z, ckp1_32) + grad * y_rate
                new_z = z - grad * z_rate
                for old, new in ((p, new_y), (z, new_z), (exp_avg_sq, new_sq)):
                    old.copy_(new if skip is None else torch.where(skip, old, new))
            for old, new in ((step, next_step), (weight_sum, new_weight_sum), (lr_max, new_lr_max)):
                old.copy_(new if skip is None else torch.where(skip, old, new))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        saved = state_dict["state"].get(state_dict["param_groups"][0]["params"][0])
        if saved:  # one set of float64 scalars (torch's loading casts them to the parameter's dtype), shared by all
            scalars = {name: torch.as_tensor(saved[name]).to(params[0].device, torch.float64, copy=True)
                       for name in self.SCALARS}
            for p in params:
                self.state[p].update(scalars)


def lr_groups(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """The parameter groups whose `lr` a schedule sets from the host (`MuonAdamW.lr_groups`; all, for AdamW)."""
    return optimizer.lr_groups() if isinstance(optimizer, MuonAdamW) else optimizer.param_groups


class PolicyOptimizer:
    """The optimizer of `cfg.optimizer` (`make_optimizer`) over `params` with PPO's step rules; `lr_on_device`
    (`perf.device_adaptive_lr` with the adaptive schedule) keeps the learning rate in a device tensor that the
    schedule updates without a host read. `clip_groups`: the parameter groups whose gradients are clipped each by its
    own norm (`ppo.grad_clip`); one group, all of `params`, by default. `matrices`: Muon's parameters
    (`hidden_matrices` of the network) with `optimizer=muon`."""

    def __init__(self, params: list[nn.Parameter], cfg: PPOConfig, perf: PerfConfig, device: torch.device,
                 dist: Collective | None = None, clip_groups: list[list[nn.Parameter]] | None = None,
                 matrices: list[nn.Parameter] | None = None, key: str = "ppo") -> None:
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
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        if cfg.optimizer == "muon" and not {id(p) for p in matrices or ()} & {id(p) for p in params}:
            raise UserError(f"config: {key}.optimizer='muon' is invalid here: the policy has no hidden matrix (a "
                            "linear layer between two others of an MLP); give its MLPs two hidden layers or more, or "
                            "use adam")
        self.optimizer = make_optimizer(
            params, cfg.optimizer, optimizer_lr, cfg.decay(), matrices=matrices, fused=perf.fused_adamw or None,
            foreach=False if isinstance(optimizer_lr, Tensor) and not perf.fused_adamw else None,
            found_inf=self.found_inf if perf.grad_finite_from_norm is True and perf.fused_adamw else None,
        )
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

    def state_params(self) -> list[nn.Parameter]:
        """The parameters in the order of the optimizer's state dict (its groups': `params`, for AdamW)."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

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
            for group in lr_groups(self.optimizer):
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
        if isinstance(self.optimizer, ScheduleFreeAdamW):  # from the first update on, the parameters hold y
            self.optimizer.train()
        self.update_kl.zero_()
        self.update_minibatches = 0
        self._skipped_before.copy_(self.skipped_steps)
        self._skipped_last.copy_(self.skipped_steps)
        self.longest_skip_run.copy_(self.skip_run)

    def set_learning_rate(self, lr: float) -> None:
        """Set the rate from the host (the linear schedule): the optimizer's groups and the device copy that the
        whole-step graph reads (a host-to-device write, no read)."""
        self.learning_rate = lr
        for group in lr_groups(self.optimizer):
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

    def average_weights(self) -> contextlib.AbstractContextManager[bool]:
        """With schedule-free AdamW, the parameters hold its average inside the block (`average_weights`)."""
        return average_weights([self.optimizer])

    def state_dict(self) -> dict[str, Any]:
        """The learning rate is saved as one float64 tensor whichever path kept it, so a run may resume with
        `device_adaptive_lr` switched. Schedule-free AdamW adds the weights the run acts and steps with (the policy's
        saved weights are its average), so a resumed run continues exactly."""
        lr = self.lr if self.lr_on_device else torch.tensor(self.learning_rate, dtype=torch.float64)
        state = {"optimizer": self.optimizer.state_dict(), "lr": lr.clone(), "skipped_steps": self.skipped_steps.clone()}
        if isinstance(self.optimizer, ScheduleFreeAdamW):
            state["acting_weights"] = [p.detach().clone() for p in self.params]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_optimizer_state(state["optimizer"])
        self.lr.copy_(state["lr"])
        if isinstance(self.optimizer_lr, Tensor) and self.optimizer_lr is not self.lr:
            self.optimizer_lr.copy_(self.lr)
        self.learning_rate = float(state["lr"])
        self.skipped_steps.copy_(state["skipped_steps"])
        if isinstance(self.optimizer, ScheduleFreeAdamW):  # the policy was loaded with the average
            acting = [w.to(p.device) for w, p in zip(state["acting_weights"], self.params, strict=True)]
            with torch.no_grad():
                torch._foreach_copy_(list[Tensor](self.params), acting)
            self.optimizer.train_mode = True
        for group in lr_groups(self.optimizer):
            group["lr"] = self.optimizer_lr if isinstance(self.optimizer_lr, Tensor) else self.learning_rate

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        load_moments(self.optimizer, state)


def load_moments(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a saved optimizer state's moments and step counts into `optimizer` but keep its own options (learning
    rate, betas, eps, weight decay, fused, foreach, the lr object): a checkpoint's are data nothing checks, and the
    run's config gives them. The tensors are copied: `torch.optim` would otherwise keep those of a live state dict
    and share them."""
    own_groups = optimizer.state_dict()["param_groups"]
    moments = {key: {name: value.clone() if isinstance(value, Tensor) else value for name, value in entry.items()}
               for key, entry in state["state"].items()}
    optimizer.load_state_dict({"state": moments, "param_groups": own_groups})


@contextlib.contextmanager
def average_weights(optimizers: Sequence[torch.optim.Optimizer]) -> Iterator[bool]:
    """Inside the block, the parameters of each schedule-free AdamW among `optimizers` (in train mode) hold its
    average, to evaluate or save them; after it, the weights the run acts and steps with, exactly as they were. Yields
    whether any was swapped."""
    swapped = [o for o in optimizers if isinstance(o, ScheduleFreeAdamW) and o.train_mode]
    if not swapped:
        yield False
        return
    params: list[Tensor] = [p for o in swapped for group in o.param_groups for p in group["params"]]
    acting = [p.detach().clone() for p in params]
    for optimizer in swapped:
        optimizer.eval()
    try:
        yield True
    finally:
        with torch.no_grad():
            torch._foreach_copy_(params, acting)
        for optimizer in swapped:
            optimizer.train_mode = True


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
