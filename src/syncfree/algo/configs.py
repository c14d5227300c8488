"""Each algorithm's config type: the run's settings (`syncfree.config.TrainConfig`) and the algorithm's own sections,
validated together. `--algorithm NAME` chooses one (`syncfree.algo.ALGORITHMS`); `convert` carries a config to
another algorithm's type, keeping every setting both have."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from syncfree.algo.settings import (
    DistillConfig,
    LossesConfig,
    PPOConfig,
    RecurrentPPOConfig,
    RNDConfig,
    SymmetryConfig,
)
from syncfree.config import TrainConfig, section_types
from syncfree.errors import check
from syncfree.policy.settings import PolicyConfig, RecurrentMLPPolicyConfig


@dataclass
class PPOTrainConfig(TrainConfig):
    """PPO on flat rollouts (`--algorithm ppo`): the policy, PPO's settings, and its extensions random network
    distillation (`rnd`) and mirror symmetry (`symmetry`)."""

    ALGORITHM: ClassVar[str] = "ppo"

    algorithm: str = "ppo"
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    rnd: RNDConfig = field(default_factory=RNDConfig)
    symmetry: SymmetryConfig = field(default_factory=SymmetryConfig)

    def minibatch_rows(self) -> tuple[int, str]:
        """What a rollout's minibatches split (`ppo.num_minibatches` must divide it): the count and how it is
        made."""
        return self.env.rows() * self.ppo.steps_per_env, "env.num_envs * ppo.steps_per_env"

    def rollout_steps(self) -> int:
        return self.ppo.steps_per_env

    def describe_iteration(self) -> str:
        return f"{super().describe_iteration()}, {self.ppo.num_epochs} epochs x {self.ppo.num_minibatches} minibatches"

    def fit_to_rollout(self) -> None:
        rows = self.minibatch_rows()[0]
        while rows % self.ppo.num_minibatches:
            self.ppo.num_minibatches -= 1

    def validate(self) -> None:
        super().validate()
        self.policy.validate(self.algorithm)
        self.ppo.validate()
        rows, made = self.minibatch_rows()
        check(1 <= self.ppo.num_minibatches <= rows and rows % self.ppo.num_minibatches == 0, "ppo.num_minibatches",
              f"a divisor of {made} = {rows}", self.ppo.num_minibatches)
        self.symmetry.validate()
        check(not self.symmetry.active() or self.policy.MIRRORABLE, "symmetry.augment",
              "false: symmetry covers MLP policies, feed-forward or recurrent, not the recurrent token policy",
              self.symmetry.augment or self.symmetry.mirror_loss or self.symmetry.log_only)
        self.rnd.validate()

    def unused_settings(self, defaults: TrainConfig | None = None) -> list[tuple[str, str]]:
        base = defaults if isinstance(defaults, PPOTrainConfig) else type(self)()
        unused = []
        if not self.rnd.enabled:
            unused += [(f"rnd.{f.name}={getattr(self.rnd, f.name)!r}", "rnd.enabled is false")
                       for f in dataclasses.fields(RNDConfig) if getattr(self.rnd, f.name) != getattr(base.rnd, f.name)]
        if not self.symmetry.active() and self.symmetry.mirror != base.symmetry.mirror:
            unused.append((f"symmetry.mirror={self.symmetry.mirror!r}",
                           "symmetry.augment, symmetry.mirror_loss and symmetry.log_only are all false"))
        if not self.symmetry.mirror_loss and self.symmetry.mirror_loss_coef != base.symmetry.mirror_loss_coef:
            unused.append((f"symmetry.mirror_loss_coef={self.symmetry.mirror_loss_coef!r}",
                           "symmetry.mirror_loss is false"))
        return unused


@dataclass
class RecurrentPPOTrainConfig(PPOTrainConfig):
    """PPO on BPTT segments with a recurrent policy (`--algorithm recurrent-ppo`): the recurrent MLP policy on flat
    observations (rsl_rl's RNN actor-critic), or a task's own (grid-arena's recurrent token policy, with the
    teacher losses of `losses`)."""

    ALGORITHM: ClassVar[str] = "recurrent-ppo"

    algorithm: str = "recurrent-ppo"
    policy: PolicyConfig = field(default_factory=RecurrentMLPPolicyConfig)
    ppo: RecurrentPPOConfig = field(default_factory=RecurrentPPOConfig)
    losses: LossesConfig = field(default_factory=LossesConfig)

    def describe_iteration(self) -> str:
        rollout, update = PPOTrainConfig.describe_iteration(self).split(", ", 1)
        return f"{rollout} in BPTT segments of {self.ppo.horizon()}, {update}"

    def minibatch_rows(self) -> tuple[int, str]:
        """Minibatches of whole BPTT segments."""
        segments = self.env.rows() * (self.ppo.steps_per_env // max(self.ppo.horizon(), 1))
        return segments, "the segments per rollout, env rows * ppo.steps_per_env / ppo.bptt_horizon"

    def validate(self) -> None:
        super().validate()
        self.losses.validate()
        if not self.policy.TEACHER_LOSSES:
            for name in ("supervised", "kickstarter", "kickstarter_value", "behavior_cloning"):
                check(getattr(self.losses, name) == 0, f"losses.{name}",
                      "0: the recurrent MLP policy trains with losses.ppo only", getattr(self.losses, name))

    @classmethod
    def adopt(cls, cfg: RecurrentPPOTrainConfig, source: TrainConfig) -> None:
        """From a feed-forward config the rollout is one BPTT segment per env (as rsl_rl trains its recurrent
        models)."""
        if not isinstance(getattr(source, "ppo", None), RecurrentPPOConfig):
            cfg.ppo.bptt_horizon = 0


@dataclass
class DistillationTrainConfig(TrainConfig):
    """Student-teacher distillation (`--algorithm distillation`, rsl_rl's `Distillation`): the student policy and
    the settings of `distill`."""

    ALGORITHM: ClassVar[str] = "distillation"

    algorithm: str = "distillation"
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)

    def rollout_steps(self) -> int:
        return self.distill.steps_per_env

    def describe_iteration(self) -> str:
        d = self.distill
        return (f"{super().describe_iteration()}, {d.num_epochs} epoch(s) in chunks of {d.gradient_length} steps, one "
                "optimizer step each (distillation)")

    def fit_to_rollout(self) -> None:
        """The chunk: the largest divisor of the update's steps up to `gradient_length` (no step left over)."""
        total = self.distill.num_epochs * self.distill.steps_per_env
        self.distill.gradient_length = max(d for d in range(1, min(total, self.distill.gradient_length) + 1)
                                           if total % d == 0)

    def validate(self) -> None:
        super().validate()
        self.policy.validate(self.algorithm)
        self.distill.validate()

    @classmethod
    def adopt(cls, cfg: DistillationTrainConfig, source: TrainConfig) -> None:
        """From a PPO config the rollout keeps its length."""
        ppo = getattr(source, "ppo", None)
        if isinstance(ppo, PPOConfig):
            cfg.distill.steps_per_env = ppo.steps_per_env


@dataclass
class RecurrentDistillationTrainConfig(DistillationTrainConfig):
    """Distillation into the recurrent MLP student (`--algorithm recurrent-distillation`), trained on the rollout's
    steps in order with truncated backpropagation through time."""

    ALGORITHM: ClassVar[str] = "recurrent-distillation"

    algorithm: str = "recurrent-distillation"
    policy: PolicyConfig = field(default_factory=RecurrentMLPPolicyConfig)


ConfigT = TypeVar("ConfigT", bound=TrainConfig)


def convert(cfg: TrainConfig, cls: type[ConfigT], sections: Mapping[str, type] | None = None) -> ConfigT:
    """`cfg`'s settings in the config type `cls` (another algorithm's, with the task's section types `sections`):
    the run's settings as they are, and of each section both have, the fields both have; the rest are `cls`'s
    defaults (and what its `adopt` makes of `cfg`)."""
    cfg = copy.deepcopy(cfg)
    own = section_types(cls, sections)
    run_level = {f.name for f in dataclasses.fields(TrainConfig)}
    values: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(TrainConfig)
                              if f.name != "algorithm"}
    for name, section_type in own.items():
        if name in run_level:
            continue
        fresh = section_type()
        theirs = getattr(cfg, name, None)
        if dataclasses.is_dataclass(theirs):
            shared = {f.name for f in dataclasses.fields(theirs)} & {f.name for f in dataclasses.fields(fresh)}
            fresh = dataclasses.replace(fresh, **{k: getattr(theirs, k) for k in shared if k != "kind"})
        values[name] = fresh
    out = cls(**values)
    adopt = getattr(cls, "adopt", None)
    if adopt is not None:
        adopt(out, cfg)
    return out
