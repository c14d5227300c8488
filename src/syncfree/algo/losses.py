"""Losses of the recurrent trainer, each declaring what it reads.

A loss names the buffer fields it needs stored during the rollout (`fields`) and whether it reads the policy's
full log-probabilities (`needs_full_log_probs`). The trainer stores only the fields some enabled loss names, and
(with `perf.gate_full_log_probs`) has the policy emit full log-probabilities only when an enabled loss needs them.
A loss that needs them and does not get them raises instead of training on something else.

Every loss sees whole BPTT rows `[count, T]` and leaves out each row's last step, whose advantage is 0 by the
row convention of `syncfree.algo.vtrace` (it has no successor in the row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from syncfree.algo.settings import LossesConfig, PPOConfig
from syncfree.core.fields import Field
from syncfree.errors import UserError
from syncfree.policy.recurrent import SequenceEvaluation


class LossInputs(NamedTuple):
    ev: SequenceEvaluation
    """The learner's evaluation of the minibatch rows."""
    data: dict[str, Tensor]
    """The rows' stored fields, [count, T, ...] each."""
    advantages: Tensor
    """[count, T]."""
    returns: Tensor
    """[count, T] value targets."""
    prio_weights: Tensor
    """[count, T] importance weights of prioritized sampling (ones otherwise)."""


def teacher_fields(num_actions: int) -> dict[str, Field]:
    """Buffer fields a teacher fills during the rollout (only those some enabled loss names are stored)."""
    return {"teacher_actions": Field((), torch.int64), "teacher_log_probs": Field((num_actions,), torch.float32),
            "teacher_values": Field((), torch.float32)}


def _head(x: Tensor) -> Tensor:
    """All steps of each row but the last."""
    return x[:, :-1]


def _full_log_probs(loss: str, ev: SequenceEvaluation) -> Tensor:
    if ev.full_log_probs is None:
        raise UserError(f"losses.{loss} needs the policy's full log-probabilities, but the policy does not emit them "
                        "(emit_full_log_probs was turned off)")
    return _head(ev.full_log_probs)


@dataclass(frozen=True)
class PPOLoss:
    """Clipped surrogate (weighted by the prioritized-sampling weights), value loss (clipped like the ratio when
    `clipped_value_loss`) and entropy bonus, with advantages normalized over the minibatch."""

    cfg: PPOConfig
    name: str = "ppo"
    fields: tuple[str, ...] = ("actions", "log_prob", "values")
    needs_full_log_probs: bool = False
    stats: tuple[str, ...] = ("surrogate_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")

    def __call__(self, x: LossInputs) -> tuple[Tensor, tuple[Tensor, ...]]:
        cfg, d = self.cfg, x.data
        advantages = _head(x.advantages)
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_ratio = _head(x.ev.log_prob) - _head(d["log_prob"])
        ratio = log_ratio.exp()
        surrogate = torch.max(-advantages * ratio, -advantages * ratio.clamp(1.0 - cfg.clip_param, 1.0 + cfg.clip_param))
        surrogate = (surrogate * _head(x.prio_weights)).mean()
        value, old_value, target = _head(x.ev.value), _head(d["values"]), _head(x.returns)
        if cfg.clipped_value_loss:
            clipped = old_value + (value - old_value).clamp(-cfg.clip_param, cfg.clip_param)
            value_loss = torch.max((value - target).square(), (clipped - target).square()).mean()
        else:
            value_loss = (value - target).square().mean()
        entropy = _head(x.ev.entropy).mean()
        loss = surrogate + cfg.value_loss_coef * value_loss - cfg.entropy_coef * entropy
        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - log_ratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > cfg.clip_param).float().mean()
        return loss, (surrogate.detach(), value_loss.detach(), entropy.detach(), approx_kl, clip_fraction)


@dataclass(frozen=True)
class SupervisedLoss:
    """Cross-entropy to the env's teacher actions (supervised imitation)."""

    name: str = "supervised"
    fields: tuple[str, ...] = ("teacher_actions",)
    needs_full_log_probs: bool = True
    stats: tuple[str, ...] = ("supervised_loss", "teacher_agreement")

    def __call__(self, x: LossInputs) -> tuple[Tensor, tuple[Tensor, ...]]:
        log_probs = _full_log_probs(self.name, x.ev)
        target = _head(x.data["teacher_actions"])
        loss = -log_probs.gather(-1, target.unsqueeze(-1)).mean()
        with torch.no_grad():
            agreement = (log_probs.argmax(-1) == target).float().mean()
        return loss, (loss.detach(), agreement)


@dataclass(frozen=True)
class KickstarterLoss:
    """KL(teacher || student) over the full action distribution, the teacher's log-probs stored in the rollout."""

    name: str = "kickstarter"
    fields: tuple[str, ...] = ("teacher_log_probs",)
    needs_full_log_probs: bool = True
    stats: tuple[str, ...] = ("kickstarter_kl",)

    def __call__(self, x: LossInputs) -> tuple[Tensor, tuple[Tensor, ...]]:
        log_probs = _full_log_probs(self.name, x.ev)
        teacher = _head(x.data["teacher_log_probs"])
        kl = (teacher.exp() * (teacher - log_probs)).sum(-1).mean()
        return kl, (kl.detach(),)


@dataclass(frozen=True)
class KickstarterValueLoss:
    """Huber loss (delta 1) of the student's value to the teacher's. A squared error would start in the hundreds
    (a trained teacher's values against a fresh student's zeros) and, through the global gradient-norm clip, starve
    the other losses of gradient; the Huber gradient is at most 1 per step."""

    name: str = "kickstarter_value"
    fields: tuple[str, ...] = ("teacher_values",)
    needs_full_log_probs: bool = False
    stats: tuple[str, ...] = ("kickstarter_value_loss",)

    def __call__(self, x: LossInputs) -> tuple[Tensor, tuple[Tensor, ...]]:
        loss = torch.nn.functional.smooth_l1_loss(_head(x.ev.value), _head(x.data["teacher_values"]))
        return loss, (loss.detach(),)


@dataclass(frozen=True)
class BehaviorCloningLoss:
    """Cross-entropy to the teacher policy's most likely action (the student clones the teacher's greedy
    behaviour)."""

    name: str = "behavior_cloning"
    fields: tuple[str, ...] = ("teacher_log_probs",)
    needs_full_log_probs: bool = True
    stats: tuple[str, ...] = ("behavior_cloning_loss",)

    def __call__(self, x: LossInputs) -> tuple[Tensor, tuple[Tensor, ...]]:
        log_probs = _full_log_probs(self.name, x.ev)
        target = _head(x.data["teacher_log_probs"]).argmax(-1, keepdim=True)
        loss = -log_probs.gather(-1, target).mean()
        return loss, (loss.detach(),)


Loss = PPOLoss | SupervisedLoss | KickstarterLoss | KickstarterValueLoss | BehaviorCloningLoss


def build_losses(losses: LossesConfig, ppo: PPOConfig) -> list[tuple[float, Loss]]:
    """(weight, loss) of every loss with a weight > 0, in a fixed order."""
    candidates = (PPOLoss(ppo), SupervisedLoss(), KickstarterLoss(), KickstarterValueLoss(), BehaviorCloningLoss())
    return [(getattr(losses, loss.name), loss) for loss in candidates if getattr(losses, loss.name) > 0]


def needs_full_log_probs(losses: list[tuple[float, Loss]]) -> bool:
    return any(loss.needs_full_log_probs for _, loss in losses)


def needed_fields(losses: list[tuple[float, Loss]]) -> set[str]:
    return {name for _, loss in losses for name in loss.fields}
