"""PPO update: clipped surrogate and value losses, entropy bonus, KL-adaptive learning rate."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from syncfree.algo.minibatch_step import MinibatchStep
from syncfree.algo.storage import Batch, RolloutStorage
from syncfree.config import PerfConfig, PPOConfig
from syncfree.perf.phases import Phases
from syncfree.policy.actor_critic import ActorCritic
from syncfree.train import compiled

if TYPE_CHECKING:
    from syncfree.train.distributed import Distributed

log = logging.getLogger("syncfree")

UPDATE_STATS = ("surrogate_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")
"""Means over the iteration's minibatches; followed by `skipped_steps` (a count) and `learning_rate`."""

_MIN_LR, _MAX_LR = 1e-5, 1e-2


class PPO:
    def __init__(self, policy: ActorCritic, cfg: PPOConfig, perf: PerfConfig, device: torch.device,
                 phases: Phases | None = None, dist: Distributed | None = None) -> None:
        self.policy, self.cfg, self.perf = policy, cfg, perf
        self.phases = phases or Phases()
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.adaptive = cfg.schedule == "adaptive"
        self.lr_on_device = self.adaptive and perf.device_adaptive_lr
        self.learning_rate = cfg.learning_rate
        """Host-side learning rate (the conventional adaptive schedule and the fixed one)."""
        self.lr = torch.tensor(cfg.learning_rate, dtype=torch.float64, device=device)
        """Device-side learning rate (float64, so each step rounds exactly like the host schedule)."""
        optimizer_lr: float | Tensor = cfg.learning_rate
        if self.lr_on_device:
            # The CUDA fused kernel reads a float32 lr tensor; the CPU kernels use the float64 one, which rounds
            # each step exactly like a Python float learning rate.
            optimizer_lr = self.lr.float() if perf.fused_adamw and device.type != "cpu" else self.lr
        self.optimizer_lr = optimizer_lr
        self.optimizer = torch.optim.AdamW(
            self.params, lr=optimizer_lr, weight_decay=cfg.weight_decay, fused=perf.fused_adamw or None,
            foreach=False if isinstance(optimizer_lr, Tensor) and not perf.fused_adamw else None,
        )
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        if perf.grad_finite_from_norm and perf.fused_adamw:
            self.optimizer.found_inf = self.found_inf  # read by the fused kernel: skips the step when 1
        self.skipped_steps = torch.zeros((), dtype=torch.int64, device=device)
        self.stats = torch.zeros(len(UPDATE_STATS), device=device)
        self.losses = compiled.hot(self.minibatch_losses, perf, device)
        """`minibatch_losses`, or its compiled graph (`PerfConfig.compile`); its backward is compiled with it."""
        self.whole_step: MinibatchStep | None = None
        """`compile=step`: the whole minibatch update as one function (`syncfree.algo.minibatch_step`)."""
        fallback = self.whole_step_fallback(dist) if perf.compile == "step" else None
        if fallback is not None:
            log.info("perf.compile=step: the minibatch update is compiled as with perf.compile=hot (%s)", fallback)
        elif perf.compile == "step":
            adapt = self.next_learning_rate if self.adaptive else None
            self.whole_step = MinibatchStep(policy, self.minibatch_losses, self.optimizer, cfg.max_grad_norm, adapt)
            self._whole_step = compiled.hot(self.whole_step, perf, device)
        aux = getattr(policy, "auxiliary_loss", None)
        self.auxiliary_loss = aux if aux is not None and policy.cfg.reconstruction_weight > 0 else None
        """The policy's own extra loss (the token policy's reconstruction), added to PPO's."""
        self.grad_all_reduce = None
        """With several processes: averages gradients and the minibatch KL over ranks (one collective)."""
        if dist is not None:
            from syncfree.train.distributed import GradientAllReduce

            self.grad_all_reduce = GradientAllReduce(self.params, dist)

    def update(self, storage: RolloutStorage) -> Tensor:
        """Epochs x minibatches over the rollout; returns [*UPDATE_STATS, skipped_steps, learning_rate] on the device."""
        cfg = self.cfg
        data = storage.flat()
        batch_size = data.returns.shape[0]
        minibatch_size = batch_size // cfg.num_minibatches
        device = data.returns.device
        self.stats.zero_()
        skipped_before = self.skipped_steps.clone()
        state = None
        if self.whole_step is not None:
            state = self.whole_step.state(self.lr, self.stats, self.skipped_steps)
            compiled.mark_static(self.perf, device, *data, *state.moments, *state.steps, state.lr, state.stats,
                                 state.skipped)  # the rollout too: CUDA graph trees copy other inputs in at each replay
        for _ in range(cfg.num_epochs):
            order = self.minibatch_order(batch_size, device)
            for start in range(0, batch_size, minibatch_size):
                idx = order[start : start + minibatch_size]
                if state is not None:
                    with self.phases("update.step"):
                        self._whole_step(data, idx, state)
                else:
                    self.minibatch_update(Batch(*(x[idx] for x in data)))
        num_updates = cfg.num_epochs * cfg.num_minibatches
        lr = self.lr if self.lr_on_device else torch.tensor(self.learning_rate, device=device)
        skipped = (self.skipped_steps - skipped_before).float()
        return torch.cat((self.stats / num_updates, skipped.view(1), lr.float().view(1)))

    def whole_step_fallback(self, dist: Distributed | None) -> str | None:
        """Why `compile=step` runs the minibatch update as `hot` does (None: it does not): the conventional
        paths of these switches, and the gradient all-reduce of several processes, sit between the backward and
        the optimizer step, on the host or in a collective."""
        if dist is not None:
            return "several processes (the gradient all-reduce)"
        if not self.perf.grad_finite_from_norm:
            return "perf.grad_finite_from_norm=false"
        if self.adaptive and not self.perf.device_adaptive_lr:
            return "perf.device_adaptive_lr=false"
        return None

    def minibatch_order(self, batch_size: int, device: torch.device) -> Tensor:
        """The order in which an epoch visits the rollout's samples (consecutive slices are the minibatches).

        With several processes each rank permutes its own rollout, so a minibatch is `world_size` random
        slices, one per rank, rather than one random slice of the combined rollout: the same distribution
        of minibatches, not the same draws."""
        return torch.randperm(batch_size, device=device)

    def minibatch_update(self, mb: Batch) -> None:
        phase = self.phases
        with phase("update.forward"):
            loss, parts, kl_mean = self.losses(mb)
            if self.adaptive and self.grad_all_reduce is None:
                self.adapt_learning_rate(kl_mean)
        with phase("update.backward"):
            self.optimizer.zero_grad(set_to_none=self.perf.zero_grad_set_to_none)
            loss.backward()
            if self.grad_all_reduce is not None:
                kl_mean = self.grad_all_reduce(kl_mean)  # the learning rate only matters at the step, below
        with phase("update.optimizer"):
            if self.adaptive and self.grad_all_reduce is not None:
                self.adapt_learning_rate(kl_mean)
            grad_norm = self.clip_and_step()
            with torch.no_grad():
                self.stats.add_(torch.stack((*parts, grad_norm)))

    def minibatch_losses(self, mb: Batch) -> tuple[Tensor, tuple[Tensor, ...], Tensor]:
        """The loss to minimize; its parts (surrogate, value loss, entropy, KL, clip fraction) without gradient;
        the mean KL. A pure function of the minibatch and the parameters (compiled when asked)."""
        cfg = self.cfg
        ev = self.policy.evaluate(mb.actor_obs, mb.critic_obs, mb.actions)
        with torch.no_grad():
            kl_mean = self.policy.head.kl(mb.old_dist_params, ev.dist_params).mean()
        ratio = torch.exp(ev.log_prob - mb.old_log_prob)
        surrogate = torch.max(-mb.advantages * ratio,
                              -mb.advantages * ratio.clamp(1.0 - cfg.clip_param, 1.0 + cfg.clip_param)).mean()
        if cfg.clipped_value_loss:
            clipped = mb.old_values + (ev.value - mb.old_values).clamp(-cfg.clip_param, cfg.clip_param)
            value_loss = torch.max((ev.value - mb.returns).square(), (clipped - mb.returns).square()).mean()
        else:
            value_loss = (ev.value - mb.returns).square().mean()
        entropy = ev.entropy.mean()
        loss = surrogate + cfg.value_loss_coef * value_loss - cfg.entropy_coef * entropy
        if self.auxiliary_loss is not None:
            loss = loss + self.auxiliary_loss(mb.actor_obs)
        with torch.no_grad():
            clip_fraction = ((ratio - 1.0).abs() > cfg.clip_param).float().mean()
        return loss, (surrogate.detach(), value_loss.detach(), entropy.detach(), kl_mean, clip_fraction), kl_mean

    def clip_and_step(self) -> Tensor:
        """Clip the global gradient norm and step, skipping (and counting) steps with non-finite gradients."""
        if not self.perf.grad_finite_from_norm:
            finite = all(bool(torch.isfinite(p.grad).all()) for p in self.params if p.grad is not None)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
            if finite:
                self.optimizer.step()
            else:
                self.skipped_steps.add_(1)
            return grad_norm
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        torch.logical_not(torch.isfinite(grad_norm), out=self.found_inf)
        self.skipped_steps.add_(self.found_inf.long())
        if self.perf.fused_adamw:
            self.optimizer.step()  # the fused kernel leaves parameters and state untouched when found_inf is 1
        elif not bool(self.found_inf):  # one host read: the for-loop AdamW cannot skip on the device
            self.optimizer.step()
        return grad_norm

    def adapt_learning_rate(self, kl_mean: Tensor) -> None:
        """Divide the learning rate by 1.5 when the KL is above twice its target, multiply below half of it."""
        target = self.cfg.desired_kl
        if not self.lr_on_device:
            if kl_mean > target * 2.0:
                self.learning_rate = max(_MIN_LR, self.learning_rate / 1.5)
            elif kl_mean < target / 2.0 and kl_mean > 0.0:
                self.learning_rate = min(_MAX_LR, self.learning_rate * 1.5)
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate
            return
        self.lr.copy_(self.next_learning_rate(self.lr, kl_mean))
        if self.optimizer_lr is not self.lr:
            self.optimizer_lr.copy_(self.lr)

    def next_learning_rate(self, lr: Tensor, kl_mean: Tensor) -> Tensor:
        """The adaptive schedule on the device: `lr` / 1.5 above twice the KL target, x 1.5 below half of it."""
        target = self.cfg.desired_kl
        lower = (lr / 1.5).clamp_(min=_MIN_LR)
        higher = (lr * 1.5).clamp_(max=_MAX_LR)
        raise_lr = (kl_mean < target / 2.0) & (kl_mean > 0.0)
        return torch.where(kl_mean > target * 2.0, lower, torch.where(raise_lr, higher, lr))

    def state_dict(self) -> dict:
        """The learning rate is saved as one float64 tensor whichever path kept it, so a run may resume with
        `device_adaptive_lr` switched."""
        lr = self.lr if self.lr_on_device else torch.tensor(self.learning_rate, dtype=torch.float64)
        return {"optimizer": self.optimizer.state_dict(), "lr": lr.clone(), "skipped_steps": self.skipped_steps.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.load_optimizer_state(state["optimizer"])
        self.lr.copy_(state["lr"])
        if isinstance(self.optimizer_lr, Tensor) and self.optimizer_lr is not self.lr:
            self.optimizer_lr.copy_(self.lr)
        self.learning_rate = float(state["lr"])
        self.skipped_steps.copy_(state["skipped_steps"])
        for group in self.optimizer.param_groups:
            group["lr"] = self.optimizer_lr if isinstance(self.optimizer_lr, Tensor) else self.learning_rate

    def load_optimizer_state(self, state: dict) -> None:
        """Load moments and step counts but keep this run's optimizer options (fused, foreach, lr object). The
        tensors are copied: `torch.optim` would otherwise keep those of a live state dict and share them."""
        own_groups = self.optimizer.state_dict()["param_groups"]
        moments = {key: {name: value.clone() if isinstance(value, Tensor) else value for name, value in entry.items()}
                   for key, entry in state["state"].items()}
        self.optimizer.load_state_dict({"state": moments, "param_groups": own_groups})
