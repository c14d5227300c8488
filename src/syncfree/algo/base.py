"""The interface between the runner and an algorithm.

The runner (`syncfree.train.runner`) owns the env, the loop, logging, checkpoints and the process group; an
algorithm owns its policy's training: its storage, the two halves of a rollout step around the env step (`act`
before, `record` after), its advantages, its update, its statistics (device tensors, read by the runner once
per iteration) and its state. Two algorithms implement it: PPO on flat rollouts (`syncfree.algo.feedforward`)
and PPO on BPTT segments (`syncfree.algo.recurrent`).

Every method that runs per rollout step or per minibatch keeps the rules of the hot loop: device tensors only,
no host read, nothing allocated that a preallocated buffer could hold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from syncfree.algo.optim import Collective, PolicyOptimizer, ScheduleFreeAdamW
from syncfree.algo.rnd import RND
from syncfree.algo.settings import PPOConfig
from syncfree.config import TrainConfig, flatten
from syncfree.core.phases import Phases
from syncfree.core.switches import Scope
from syncfree.envs.api import StepResult, VecEnv
from syncfree.errors import UserError
from syncfree.policy.build import EnvShape
from syncfree.policy.normalizer import RewardScale

log = logging.getLogger("syncfree")


class CheckpointReader(Protocol):
    """Reads a syncfree checkpoint a config names (e.g. a teacher's): its config and its whole state."""

    def __call__(self, path: str) -> tuple[TrainConfig, dict[str, Any]]: ...


class StepObserver(Protocol):
    """Bookkeeping that reads every env step beside the algorithm (the runner's episode statistics and non-finite
    check). The algorithm runs it from its own record step, so that a compiled record step stays one graph."""

    fused: bool
    """Whether `record_rows` is a pure function of device tensors that a record step may run inside itself; if
    not, the algorithm calls `record` after its own record step."""

    def rows(self, t: int) -> tuple[Tensor, ...]:
        """Where step `t` is written (views made once: a compiled step takes them as inputs)."""
        ...

    def record_rows(self, step: StepResult, rows: tuple[Tensor, ...]) -> None:
        """Record one step into `rows`: device tensors only."""
        ...

    def record(self, t: int, step: StepResult) -> None:
        """Record step `t` by whichever path the observer's switches choose."""
        ...


class Algorithm(ABC):
    """PPO in one of its forms, driven by the runner.

    Per iteration the runner calls `begin_rollout()`, then per step `act(obs, t)`, steps the env and calls
    `record(t, step)`; then `compute_returns(obs)` with the observation after the last step, and `update(progress)`.
    `statistics()` names the device tensors the runner moves to the host once per iteration.

    The class owns what differs between algorithms outside the loop too: the config type it trains from, building
    itself and its policy, evaluating a policy, where the perf switches act, and the bench's policy forward."""

    name: ClassVar[str]
    """The algorithm's name (`--algorithm NAME`)."""
    description: ClassVar[str]
    """One line for `syncfree algorithms`."""
    label: ClassVar[str]
    """How the start line and the help name it (`PPO`, `recurrent PPO`)."""
    family: ClassVar[str]
    """Algorithms of one family differ in the policy they train (`policy.kind`): PPO and recurrent PPO, distillation
    into a feed-forward or a recurrent student."""
    config_type: ClassVar[type[TrainConfig]]
    """The config type this algorithm trains from: the run's settings and the algorithm's own sections."""
    chosen_by_policy_kind: ClassVar[str | None] = None
    """The `policy.kind` that, asked for on another algorithm of the family, chooses this one instead (recurrent PPO:
    `recurrent`); None: none does."""
    own_payback: ClassVar[bool] = False
    """Whether `perf.compile=auto` weighs figures measured for this algorithm itself (the payback table's `learners`:
    the off-policy learners, whose gradient steps compile apart from PPO's update) rather than its task's; where
    the table has none for it, `auto` runs it eagerly."""
    learning_rate_key: ClassVar[str] = "ppo.learning_rate"
    """The setting a diverged run is told to lower."""

    @classmethod
    def search_space(cls, cfg: Any) -> dict[str, dict[str, Any]]:
        """What `syncfree tune` searches when no space is given, around the run's config `cfg` (a `config_type`): by
        dotted key, `{type: float|int|categorical, low, high, log, choices}`; empty: the algorithm has no default
        space (a study names its own)."""
        return {}

    @classmethod
    @abstractmethod
    def build(cls, cfg: Any, env: VecEnv, device: torch.device, dist: Collective | None = None,
              read_checkpoint: CheckpointReader | None = None) -> Algorithm:
        """The algorithm and the policy `cfg` (a `config_type`) asks for, on `device`, training on `env`;
        `read_checkpoint` reads checkpoints the config names (teachers)."""

    @classmethod
    @abstractmethod
    def build_policy(cls, cfg: Any, env: EnvShape) -> nn.Module:
        """The policy `cfg` asks for, for `env`'s observation shapes and action spec (an env, or a checkpoint's
        record of them): how training, evaluation and export build it."""

    @staticmethod
    @abstractmethod
    def evaluate(policy: Any, env: VecEnv, greedy: bool = True) -> np.ndarray:
        """The return of each env row's first episode under the policy's most likely actions (`greedy`) or sampled
        ones."""

    @classmethod
    @abstractmethod
    def scope(cls, cfg: Any, device_type: str, world_size: int, env_layer: bool) -> Scope:
        """Where a run of `cfg` stands for the perf switches (`PerfConfig.inert_switches` says which change
        nothing there)."""

    @abstractmethod
    def obs_dims(self, env: EnvShape) -> dict[str, Any]:
        """The observation shapes a checkpoint of this algorithm's policy records (a resumed run must match)."""

    @abstractmethod
    def forward_only(self, obs: dict[str, Tensor]) -> Callable[[], list[Tensor]]:
        """For the bench's compute floor: a function running the policy forwards of one rollout (as `act` runs
        them, without storage) from copies of `obs` and of the per-row state, returning each step's actions."""

    policy: nn.Module
    optim: PolicyOptimizer
    """The optimizer half shared by both algorithms: AdamW, clip, skip on non-finite gradients, learning rate."""
    phases: Phases
    stat_names: tuple[str, ...]
    """The update's statistics, in the order `statistics()` gives them (means over the iteration's minibatches,
    averaged over ranks with several processes); `statistics()` adds `skipped_steps` and `learning_rate`."""
    steps_per_env: int
    """Rollout steps per iteration."""
    minibatches_per_update: int
    """Optimizer steps of one update (PPO: epochs x minibatches; distillation: its chunks)."""
    num_envs: int
    """Env rows the algorithm acts for (agents, for multi-agent envs)."""
    observer: StepObserver | None = None
    """Run at every `record` (set by the runner: its monitors)."""
    reward_scale: RewardScale | None = None
    """`ppo.normalize_rewards`: scales the rewards the algorithm learns from (the observer sees the env's)."""
    rnd: RND | None = None
    """Random network distillation (`rnd` settings, `syncfree.algo.rnd`): its intrinsic reward is added to the env's
    in each record step (`rewarded`), its predictor steps after each minibatch."""

    def begin_rollout(self) -> None:
        """Before the first `act` of an iteration (RND's sum of the rollout's intrinsic rewards restarts)."""
        if self.rnd is not None:
            self.rnd.begin_rollout()

    @abstractmethod
    def act(self, obs: dict[str, Tensor], t: int) -> Tensor:
        """The policy's actions for rollout step `t`, with the policy's side of the step stored."""

    @abstractmethod
    def record(self, t: int, step: StepResult) -> None:
        """Store the env's side of rollout step `t` (rewards, dones, the next observation's statistics), and run the
        observer on it."""

    @abstractmethod
    def compute_returns(self, obs: dict[str, Tensor]) -> None:
        """Advantages and returns of the finished rollout; `obs`: the observation after its last step."""

    @abstractmethod
    def update(self, progress: float = 0.0) -> None:
        """Epochs x minibatches over the rollout, `progress` (the fraction of the run done) into the run, for the
        schedules that anneal; the statistics stay on the device (`statistics()`)."""

    def iterations_before_update(self) -> int:
        """The iterations to come before the first whose update trains the policy (an off-policy learner's random
        steps and the filling of its buffer; 0: the next one does): where a compiled run builds its update's graphs."""
        return 0

    def updated(self) -> bool:
        """Whether the last iteration's update trained the policy (an off-policy learner takes no gradient step while
        its buffer fills): a benchmark warms up until it has, so that its timed iterations are the run's steady
        state."""
        return True

    samples_actions: ClassVar[bool] = True
    """Whether `evaluate(greedy=False)` draws actions from the policy (TD3's deterministic actor draws none)."""

    def warn_idle(self, iterations_left: int) -> None:
        """A warning line when the run's `iterations_left` iterations would end before the policy is trained (an
        off-policy learner's `learning_starts` or its buffer out of reach); PPO trains at every iteration."""
        return None

    @abstractmethod
    def statistics(self) -> dict[str, Tensor]:
        """The last iteration's statistics as device tensors, by name: `stat_names`, then the optimizer's
        (`PolicyOptimizer.statistics`: `skipped_steps`, `learning_rate`, `longest_skip_run`,
        `non_finite_parameters`), then any the algorithm adds."""

    stats: Tensor
    """The update's statistics (`stat_names`), summed over the iteration's minibatches on the device."""
    max_skipped_updates: int = PPOConfig.max_skipped_updates
    """A run stops once this many minibatch updates in a row were skipped for non-finite gradients (0: never)."""
    skipped_updates_key: ClassVar[str] = "ppo.max_skipped_updates"
    """The setting that gives `max_skipped_updates` (none: the class's own)."""

    shared_statistics: ClassVar[tuple[str, ...]] = ("skipped_steps", "learning_rate", "longest_skip_run",
                                                    "non_finite_parameters")
    """Statistics every rank holds the same value of (the gradients and the KL are averaged before each step): with
    several processes the others are averaged over the ranks, these are not."""

    def record_statistics(self, stats: dict[str, float]) -> dict[str, Any]:
        """The iteration's statistics (`statistics()`, on the host) as its record holds them: counts as integers,
        `non_finite_parameters` left out (a record is written only while it is 0)."""
        record: dict[str, Any] = {k: v for k, v in stats.items() if k != "non_finite_parameters"}
        record["skipped_steps"], record["longest_skip_run"] = int(stats["skipped_steps"]), int(stats["longest_skip_run"])
        return record

    def divergence(self, stats: dict[str, float]) -> str | None:
        """Why the run diverged, from the iteration's statistics on the host (`statistics()`): the update left
        non-finite parameters, or skipped `max_skipped_updates` minibatch updates in a row; None while it did not."""
        if stats["non_finite_parameters"] > 0:
            return f"the update left non-finite parameters (the run diverged: try a smaller {self.learning_rate_key})"
        limit = self.max_skipped_updates
        if limit and stats["longest_skip_run"] >= limit:
            setting = f" ({self.skipped_updates_key}={limit})" if self.skipped_updates_key else ""
            return (f"{int(stats['longest_skip_run'])} minibatch updates in a row skipped for non-finite gradients"
                    f"{setting}: the run diverged")
        return None

    def backward_and_step(self, loss: Tensor, parts: Sequence[Tensor], kl_mean: Tensor | None) -> None:
        """The second half of a minibatch update, the same for every algorithm: gradients of `loss`, then the
        optimizer's step (`PolicyOptimizer.step`), and the minibatch's statistics (`parts`, then the gradient norm)
        added to `stats`."""
        with self.phases("update.backward"):
            self.optim.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        with self.phases("update.optimizer"):
            grad_norm = self.optim.step(kl_mean)
            self.add_statistics(parts, grad_norm)

    def add_statistics(self, parts: Sequence[Tensor], grad_norm: Tensor) -> None:
        """Add one minibatch's statistics to `stats`, on the device."""
        with torch.no_grad():
            self.stats.add_(torch.stack((*parts, grad_norm)))

    epochs: int = 1
    """Passes over the rollout per update (`minibatches_per_update` steps in all)."""

    def rows_per_minibatch(self) -> int:
        """Rows one optimizer step's forward reads (what autocast's `auto` weighs)."""
        return self.num_envs * self.steps_per_env * self.epochs // max(self.minibatches_per_update, 1)

    @abstractmethod
    def rollout_forward(self, obs: dict[str, Tensor]) -> None:
        """One rollout step's policy forward for every row, as `act` runs it, storing nothing (the bench counts its
        FLOPs)."""

    @abstractmethod
    def first_minibatch_loss(self) -> Tensor:
        """The loss of the update's first optimizer step on the stored rollout, as `update` computes it (the bench
        counts the FLOPs of its forward and backward)."""

    def flops_per_env_step(self, obs: dict[str, Tensor]) -> dict[str, float]:
        """Matrix-product FLOPs per env (agent) step of an iteration, counted eagerly from the operands' shapes:
        `rollout` (the policy's forward of each step, from `obs`) and `update` (forward and backward of every
        optimizer step, on the stored rollout; gradients cleared after)."""
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as rollout, torch.inference_mode():
            self.rollout_forward(obs)
        with FlopCounterMode(display=False) as update:
            self.first_minibatch_loss().backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        for p in self.policy.parameters():
            p.grad = None
        return {"rollout": rollout.get_total_flops() / self.num_envs,
                "update": update.get_total_flops() * self.minibatches_per_update / (self.num_envs * self.steps_per_env)}

    @abstractmethod
    def storage_tensors(self) -> list[Tensor]:
        """The rollout storage and per-agent state the algorithm holds (for the bench's memory figures)."""

    def reset_episodes(self) -> None:
        """The env was reset everywhere (at start, and where a checkpoint could not restore it): forget any
        per-episode state (e.g. recurrent states; the reward scale's running returns, not its statistics)."""
        if self.reward_scale is not None:
            self.reward_scale.returns.zero_()

    def learned_reward(self, reward: Tensor, done: Tensor) -> Tensor:
        """The reward the algorithm stores for a step: the env's, or scaled by `reward_scale` (which this updates)."""
        return reward if self.reward_scale is None else self.reward_scale(reward, done)

    def rewarded(self, step: StepResult) -> Tensor:
        """The step's reward to learn from before any scaling: the env's, plus RND's intrinsic reward on the step's
        next observation when `rnd` is on."""
        if self.rnd is None:
            return step.reward
        return step.reward + self.rnd.module.intrinsic_reward(step.obs[self.rnd.group])

    def rnd_statistics(self, minibatches: int) -> dict[str, Tensor]:
        """RND's entries of `statistics()` (none without RND)."""
        return {} if self.rnd is None else self.rnd.statistics(minibatches, self.steps_per_env * self.num_envs)

    @classmethod
    def check_resumable(cls, saved: dict[str, Any], cfg: TrainConfig, source: str) -> None:
        """A run of `cfg` may continue a checkpoint trained with the config `saved` (a dict): the policy settings that
        shape what its weights compute are the same (those of `POLICY_CHANGEABLE` may differ), and its optimizer keeps
        state of the same kind (adam and adamw: AdamW's moments; muon: Muon's momentum and AdamW's moments;
        schedule_free_adamw: its own)."""
        for section in (f.name for f in dataclasses.fields(cfg)):
            ours = getattr(getattr(cfg, section, None), "optimizer", None)
            stored = saved.get(section)
            if not isinstance(ours, str) or not isinstance(stored, dict):
                continue
            theirs = stored.get("optimizer", "adam")  # written before the setting: Adam
            if {theirs, ours} != {"adam", "adamw"} and theirs != ours:
                raise UserError(f"{source}: its optimizer state is {section}.optimizer={theirs}'s but this run has "
                                f"{section}.optimizer={ours}; resume with {section}.optimizer={theirs}")
        policy = getattr(cfg, "policy", None)
        if policy is None:
            return
        trained = flatten(saved.get("policy", {}), "policy.")
        for key, value in flatten(dataclasses.asdict(policy), "policy.").items():
            if key not in POLICY_CHANGEABLE and key in trained and trained[key] != value:
                raise UserError(f"{source}: trained with {key}={trained[key]!r} but this run has {key}={value!r}; the "
                                "network's weights only mean something with the settings they were trained with")

    optional_state: ClassVar[tuple[str, ...]] = ("reward_scale", "rnd")
    """Keys of `state_dict` a checkpoint may have or lack (an extension turned on or off since it was written: the run
    starts that part new, or drops it)."""

    def average_weights(self) -> contextlib.AbstractContextManager[bool]:
        """A block in which the policy holds the weights to evaluate, export and save: with schedule-free AdamW its
        average (`PolicyOptimizer.average_weights`), else the policy as it is."""
        optim = getattr(self, "optim", None)
        return optim.average_weights() if isinstance(optim, PolicyOptimizer) else contextlib.nullcontext(False)

    def keep_average_weights(self) -> None:
        """After the last update: the policy keeps the weights to evaluate and export (schedule-free AdamW's average;
        a later update steps on from the weights this recomputes from it, no longer exactly those of an unbroken
        run)."""
        optim = getattr(self, "optim", None)
        if isinstance(optim, PolicyOptimizer) and isinstance(optim.optimizer, ScheduleFreeAdamW):
            optim.optimizer.eval()

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """Every optimizer the algorithm steps (the bench counts their state's memory): the policy's, and RND's
        predictor's with RND."""
        return [self.optim.optimizer, *([self.rnd.optimizer] if self.rnd is not None else [])]

    def optimizer_params(self) -> dict[str, list[Tensor]]:
        """The parameters of each Adam optimizer whose state `state_dict` holds, by its key there (`optimizer`,
        `rnd.optimizer`), in the optimizer's order: a checkpoint's moments are checked against their shapes."""
        found: dict[str, list[Tensor]] = {"optimizer": list(self.optim.state_params())}
        if self.rnd is not None:
            found["rnd.optimizer"] = list(self.rnd.params)
        return found

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state, the reward scale's statistics and RND's state (the policy's parameters are saved
        by the runner)."""
        state = self.optim.state_dict()
        if self.reward_scale is not None:
            state["reward_scale"] = self.reward_scale.state_dict()
        if self.rnd is not None:
            state["rnd"] = self.rnd.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A checkpoint written without `ppo.normalize_rewards` (or `rnd`) leaves the reward scale's statistics (or
        RND's networks) new."""
        self.optim.load_state_dict(state)
        if self.reward_scale is not None and "reward_scale" in state:
            self.reward_scale.load_state_dict(state["reward_scale"])
        if self.rnd is not None and "rnd" in state:
            self.rnd.load_state_dict(state["rnd"])


POLICY_CHANGEABLE = ("policy.init_std", "policy.token.init_std", "policy.token.reconstruction_weight")
"""Policy settings a resumed run may change: they shape a fresh network (a checkpoint's weights replace their
effect) or weigh a loss, and leave what the saved weights compute as it was."""


def reward_scale(cfg: PPOConfig, num_envs: int, device: torch.device) -> RewardScale | None:
    """The algorithm's `reward_scale`: one running return per env (agent) row, when `cfg.normalize_rewards`."""
    return RewardScale(num_envs, cfg.gamma).to(device) if cfg.normalize_rewards else None


EVALUATION_STEP_LIMIT = 100_000
"""The most steps an evaluation takes on an env that declares no time limit (`max_episode_length` 0, a Gymnasium
spec without `max_episode_steps`): the rows whose first episode has not ended by then are left out, and said."""

EVALUATION_CHECK_EVERY = 64
"""On such an env, the steps between two reads of whether every first episode has ended."""


def evaluation_steps(env: VecEnv, finished: Tensor) -> Iterator[int]:
    """The steps of an evaluation that plays each env's first episode to its end, `finished` (updated in place by
    the caller) marking those that ended: the env's `max_episode_length` steps, every episode ending by then; on an
    env that declares none, until every one has ended (read every `EVALUATION_CHECK_EVERY` steps) or
    `EVALUATION_STEP_LIMIT` steps have passed, the rows still running then said in a warning (their return NaN)."""
    if env.max_episode_length > 0:
        yield from range(env.max_episode_length)
        return
    for step in range(EVALUATION_STEP_LIMIT):
        if step % EVALUATION_CHECK_EVERY == 0 and step and bool(finished.all()):
            return
        yield step
    if not bool(finished.all()):
        log.warning("evaluation: %d of %d envs ran %d steps without ending their first episode (the env declares "
                    "no max_episode_length); their return is left out (NaN)",
                    int((~finished).sum()), finished.numel(), EVALUATION_STEP_LIMIT)


def first_episode_returns(env: VecEnv, act: Callable[[dict[str, Tensor]], Tensor]) -> np.ndarray:
    """The return of each env's first episode when `act` chooses the actions from the observations (each episode
    ends by the env's time limit, or, where it declares none, within `EVALUATION_STEP_LIMIT` steps:
    `evaluation_steps`); call it in inference mode."""
    obs = env.reset()
    first_return = torch.full((env.num_envs,), float("nan"), device=env.device)
    finished = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    for _ in evaluation_steps(env, finished):
        step = env.step(act(obs))
        done = step.terminated | step.truncated
        first_return = torch.where(done & ~finished, step.info["episode_return"], first_return)
        finished |= done
        obs = step.obs
    return first_return.cpu().numpy()
