"""The recurrent trainer: PPO with truncated backpropagation through time on many agents (the grid-arena task).

Each iteration collects `ppo.steps_per_env` steps of every agent into a `[segments, bptt_horizon]` buffer (each
agent fills consecutive rows; the recurrent state an agent carried into a row is snapshotted with it), computes
advantages over the rows (GAE, or V-trace recomputed every epoch from the latest ratios), and trains on whole rows
replayed from their snapshots, with the losses `losses.*` enable (see `syncfree.algo.sequence_losses`).

The rules of the hot loop hold as in `syncfree.train.trainer`: no host read per rollout step or minibatch on the
training side (a CPU simulator such as MettaGrid is the env boundary: its step copies the actions to the host
and the observations back, explicitly), and one host transfer per iteration for everything logged.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from syncfree.algo.ppo import PPO
from syncfree.algo.segments import Field, SegmentBuffer, prioritized_beta
from syncfree.algo.sequence_losses import (
    LossInputs,
    build_losses,
    needed_fields,
    needs_full_log_probs,
    teacher_fields,
)
from syncfree.algo.vtrace import vtrace_advantages
from syncfree.config import TrainConfig, from_dict, to_dict, validate
from syncfree.envs import VecEnv, make_env
from syncfree.errors import UserError
from syncfree.perf.memory import retain_freed_memory
from syncfree.perf.phases import Phases
from syncfree.policy.recurrent import RecurrentTokenPolicy
from syncfree.train import checkpoint
from syncfree.train.distributed import Distributed
from syncfree.train.logger import RunLogger
from syncfree.train.monitors import EpisodeStats

SWITCHES_READ = ("gate_full_log_probs", "cached_batch_metadata", "preallocated_last_actions", "cpu_time_index",
                 "cached_minibatch_indices", "deferred_episode_stats", "grad_finite_from_norm", "fused_adamw",
                 "device_adaptive_lr", "zero_grad_set_to_none", "deterministic", "retain_host_memory")
"""The `PerfConfig` switches this trainer reads (the others, e.g. `compile`, do not apply to it yet)."""

TRAINING_STATS = ("grad_norm",)
"""Logged after the losses' own statistics; then `skipped_steps` and `learning_rate`."""


def build_recurrent_policy(cfg: TrainConfig, env: VecEnv, emit_full_log_probs: bool) -> RecurrentTokenPolicy:
    if env.action_spec.kind != "discrete" or len(env.obs_shapes["policy"]) != 2:
        raise UserError(f"policy.kind=recurrent: task {cfg.task!r} has no token observations or no discrete actions")
    r = cfg.policy.recurrent
    return RecurrentTokenPolicy(env.action_spec.size, embed_dim=r.embed_dim, encoder_hidden=r.encoder_hidden,
                                hidden=r.hidden, max_tokens=r.max_tokens or None,
                                emit_full_log_probs=emit_full_log_probs, core=r.core,
                                last_action_input=r.last_action_input)


def load_teacher(path: str, env: VecEnv, device: torch.device) -> RecurrentTokenPolicy:
    """The policy of a recurrent run's checkpoint, frozen, emitting its full log-probabilities."""
    state = checkpoint.load(path)
    cfg = from_dict(TrainConfig, state["config"])
    if cfg.policy.kind != "recurrent":
        raise UserError(f"losses.teacher: {path} holds a policy.kind={cfg.policy.kind} policy, not a recurrent one")
    if tuple(state["action_spec"]) != (env.action_spec.kind, env.action_spec.size):
        raise UserError(f"losses.teacher: {path} acts in {tuple(state['action_spec'])} but this env has "
                        f"{(env.action_spec.kind, env.action_spec.size)}")
    teacher = build_recurrent_policy(cfg, env, emit_full_log_probs=True)
    teacher.load_state_dict(state["policy"])
    return teacher.to(device).eval().requires_grad_(False)


@torch.inference_mode()
def evaluate_recurrent(policy: RecurrentTokenPolicy, env: VecEnv, greedy: bool = True) -> np.ndarray:
    """Return of each agent's first episode (every row of `env`), acting with the most likely action (`greedy`)
    or sampling."""
    n = env.num_envs
    obs = env.reset()["policy"]
    state = policy.initial_state(n, env.device)
    done = torch.ones(n, dtype=torch.bool, device=env.device)
    last = torch.zeros(n, dtype=torch.int64, device=env.device)
    first_return = torch.full((n,), float("nan"), device=env.device)
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_length):  # every episode ends by its time limit
        out, state = policy.step(obs, state, done, last if policy.last_action is not None else None, greedy=greedy)
        step = env.step(out.actions)
        done = step.terminated | step.truncated
        first_return = torch.where(done & ~finished, step.info["episode_return"], first_return)
        finished |= done
        obs, last = step.obs["policy"], out.actions
    return first_return.cpu().numpy()


class SequenceTrainer:
    """Recurrent PPO on one process. Mirrors `Trainer`'s interface (`learn`, `save`, `state_dict`,
    `load_state_dict`, `phases`, `stop_requested`) so the command line and the bench drive either."""

    def __init__(self, cfg: TrainConfig, run_dir: Path | None = None, env: VecEnv | None = None,
                 dist: Distributed | None = None) -> None:
        self.cfg = validate(cfg)
        if (dist or Distributed.current()) is not None:
            raise UserError("policy.kind=recurrent trains in one process; several processes (torchrun) are not "
                            "supported for it")
        from syncfree.train.trainer import resolve_device, set_deterministic

        self.dist, self.rank, self.world_size, self.is_main = None, 0, 1, True
        self.device = resolve_device(cfg.device)
        set_deterministic(cfg.perf.deterministic)
        checkpoint.seed_everything(cfg.seed)
        if cfg.perf.retain_host_memory:
            retain_freed_memory()
        p, perf = cfg.ppo, cfg.perf
        self.env = env or make_env(cfg.task, cfg.env.num_envs, self.device, cfg.seed, cfg.env.max_episode_length,
                                   grid=cfg.env.grid)
        n = self.num_agents = self.env.num_envs
        self.losses = build_losses(cfg.losses, p)
        self.stat_names = tuple(name for _, loss in self.losses for name in loss.stats) + TRAINING_STATS
        emit = needs_full_log_probs(self.losses) or not perf.gate_full_log_probs
        self.policy = build_recurrent_policy(cfg, self.env, emit).to(self.device)
        self.teacher = load_teacher(cfg.losses.teacher, self.env, self.device) if cfg.losses.teacher else None
        self.env_teacher = self.scripted_teacher() if cfg.losses.supervised > 0 else None
        self.phases = Phases()
        self.ppo = PPO(self.policy, p, perf, self.device, self.phases)
        """The optimizer, gradient clipping, non-finite step skipping and learning-rate schedule."""

        num_actions = self.env.action_spec.size
        tokens, token_dim = self.env.obs_shapes["policy"]
        self.stored_tokens = min(tokens, cfg.policy.recurrent.max_tokens or tokens)
        """Tokens stored per observation: those the policy reads (MettaGrid packs the valid ones first)."""
        fields = {"obs": Field((self.stored_tokens, token_dim), torch.uint8), "actions": Field((), torch.int64),
                  "log_prob": Field((), torch.float32), "values": Field((), torch.float32),
                  "rewards": Field((), torch.float32), "dones": Field((), torch.bool)}
        if cfg.policy.recurrent.last_action_input:
            fields["last_actions"] = Field((), torch.int64)
        if p.advantage == "vtrace":
            fields["ratio"] = Field((), torch.float32)
        if emit:  # the behaviour policy's full distribution, kept with the step (what the gate saves)
            fields["full_log_probs"] = Field((num_actions,), torch.float32)
        fields.update({k: v for k, v in teacher_fields(num_actions).items() if k in needed_fields(self.losses)})
        segments = n * (p.steps_per_env // p.bptt_horizon)
        self.buffer = SegmentBuffer(fields, segments, p.bptt_horizon, n, [(self.policy.hidden,)] *
                                    self.policy.state_size, self.device, cpu_time_index=perf.cpu_time_index,
                                    preallocated_last_actions=perf.preallocated_last_actions,
                                    cached_minibatch_indices=perf.cached_minibatch_indices,
                                    cached_batch_metadata=perf.cached_batch_metadata)
        self.returns = torch.zeros_like(self.buffer.advantages)
        self.episodes = EpisodeStats(p.steps_per_env, n, self.device, deferred=perf.deferred_episode_stats)
        self.reward_total = torch.zeros((), device=self.device)
        """The env reward of the iteration's rollout, summed over agents and steps."""
        self.stats = torch.zeros(len(self.stat_names), device=self.device)
        self._everyone = slice(0, n)
        self._ones = torch.ones(n, device=self.device)
        self._bootstrap = torch.zeros(n, device=self.device)
        self.iteration, self.env_steps = 0, 0
        self.reset_agents()
        self.run_dir = run_dir
        self.stop_requested = False
        self.logger = RunLogger(run_dir, cfg.log.tensorboard, cfg.log.wandb, to_dict(cfg)) if run_dir else None

    def scripted_teacher(self):
        from syncfree.envs.adapters.mettagrid_teacher import MinesTeacher

        return MinesTeacher.from_env(self.env)

    def reset_agents(self) -> None:
        """New episodes everywhere: reset the env, zero the recurrent states, mark every agent's step as a first."""
        n = self.num_agents
        self.obs = self.env.reset()["policy"]
        self.state = self.policy.initial_state(n, self.device)
        self.teacher_state = self.teacher.initial_state(n, self.device) if self.teacher is not None else None
        self.done = torch.ones(n, dtype=torch.bool, device=self.device)
        self.reward_in = torch.zeros(n, device=self.device)
        """The reward that led to the current observation (stored with it: the row convention of `vtrace`)."""

    # -- the loop ------------------------------------------------------------------------------------------

    def learn(self) -> dict[str, Any]:
        """Train until `cfg.iterations`; returns the last iteration's record."""
        cfg, record = self.cfg, {}
        from syncfree.train.trainer import set_deterministic

        set_deterministic(cfg.perf.deterministic)
        bar = tqdm(total=cfg.iterations, initial=self.iteration, disable=not cfg.log.progress, unit="it",
                   dynamic_ncols=True)
        while self.iteration < cfg.iterations and not self.stopping():
            start = time.perf_counter()
            self.collect()
            update_stats = self.update()
            with self.phases("logging"):
                host = torch.cat([update_stats, self.reward_total.view(1)]
                                 + ([self.episodes.device_payload()] if self.episodes.deferred else [])).cpu().numpy()
                self.iteration += 1
                self.env_steps += cfg.ppo.steps_per_env * self.num_agents
                record = self.finish_iteration(host, time.perf_counter() - start)
            bar.set_postfix(agent_steps_per_s=f"{record['steps_per_s']:.0f}",
                            reward=f"{record['reward_per_agent_step']:.3f}", refresh=False)
            bar.update(1)
            if self.iteration % cfg.save_every == 0 or self.iteration == cfg.iterations or self.stopping():
                self.save()
        bar.close()
        return record

    def stopping(self) -> bool:
        return self.stop_requested

    def collect(self) -> None:
        """One rollout: every agent's `steps_per_env` steps into the buffer."""
        self.buffer.reset_for_rollout()
        self.reward_total.zero_()
        with torch.inference_mode():
            for t in range(self.cfg.ppo.steps_per_env):
                self.rollout_step(t)

    def rollout_step(self, t: int) -> None:
        buf, phase = self.buffer, self.phases
        with phase("act"):
            last_actions = buf.previous_actions(self._everyone) if "last_actions" in buf.data else None
            out, state = self.policy.step(self.obs, self.state, self.done, last_actions)
            data = {"obs": self.obs[:, : self.stored_tokens], "actions": out.actions, "log_prob": out.log_prob, "values": out.value,
                    "rewards": self.reward_in, "dones": self.done}
            if last_actions is not None:
                data["last_actions"] = last_actions  # stored before `store` overwrites them with `actions`
            if out.full_log_probs is not None:
                data["full_log_probs"] = out.full_log_probs
            self.teacher_step(data, last_actions)
        with phase("store"):
            if "ratio" in buf.data:
                data["ratio"] = self._ones
            buf.store(self._everyone, data, self.state)
        with phase("env"):
            step = self.env.step(out.actions)
        with phase("stats"):
            # time-outs bootstrap from the value before the step (MettaGrid gives no final observation)
            torch.mul(out.value, step.truncated, out=self._bootstrap)
            torch.add(step.reward, self._bootstrap, alpha=self.cfg.ppo.gamma, out=self.reward_in)
            torch.logical_or(step.terminated, step.truncated, out=self.done)
            self.reward_total.add_(step.reward.sum())
            self.episodes.record(t, self.done, step.info["episode_return"], step.info["episode_length"])
        self.obs, self.state = step.obs["policy"], state

    def teacher_step(self, data: dict, last_actions: torch.Tensor | None) -> None:
        """The teachers' outputs for this step, for the fields some enabled loss reads."""
        fields = self.buffer.data
        if "teacher_actions" in fields:
            data["teacher_actions"] = self.env_teacher(self.obs)
        if self.teacher is not None:
            out, self.teacher_state = self.teacher.step(self.obs, self.teacher_state, self.done, last_actions)
            if "teacher_log_probs" in fields:
                data["teacher_log_probs"] = out.full_log_probs
            if "teacher_values" in fields:
                data["teacher_values"] = out.value

    def compute_advantages(self) -> None:
        p, d, buf = self.cfg.ppo, self.buffer.data, self.buffer
        ratio = d["ratio"] if p.advantage == "vtrace" else None
        vtrace_advantages(d["rewards"], d["values"], d["dones"], ratio, p.gamma, p.lam, p.vtrace_rho_clip,
                          p.vtrace_c_clip, out=buf.advantages)
        torch.add(buf.advantages, d["values"], out=self.returns)

    def minibatch(self, mb: int, count: int, beta: float):
        p = self.cfg.ppo
        if p.minibatch_sampler == "prioritized":
            return self.buffer.prioritized_minibatch(mb, count, p.prio_alpha, beta)
        return self.buffer.sequential_minibatch(mb, count)

    def update(self) -> torch.Tensor:
        """Epochs x minibatches of whole rows; returns [*stat_names, skipped_steps, learning_rate] on the device."""
        p, phase, buf = self.cfg.ppo, self.phases, self.buffer
        count = buf.segments // p.num_minibatches
        beta = prioritized_beta(p.prio_beta0, self.iteration / max(self.cfg.iterations, 1))
        self.stats.zero_()
        skipped_before = self.ppo.skipped_steps.clone()
        for epoch in range(p.num_epochs):
            if epoch == 0 or p.advantage == "vtrace":
                with phase("advantages"), torch.no_grad():
                    self.compute_advantages()
            for mb in range(p.num_minibatches):
                with phase("update.forward"):
                    batch = self.minibatch(mb, count, beta)
                    loss, parts = self.minibatch_loss(batch)
                with phase("update.backward"):
                    self.ppo.optimizer.zero_grad(set_to_none=self.cfg.perf.zero_grad_set_to_none)
                    loss.backward()
                with phase("update.optimizer"):
                    grad_norm = self.ppo.clip_and_step()
                    with torch.no_grad():
                        self.stats.add_(torch.stack((*parts, grad_norm)))
        lr = self.ppo.lr if self.ppo.lr_on_device else torch.tensor(self.ppo.learning_rate, device=self.device)
        skipped = (self.ppo.skipped_steps - skipped_before).float()
        return torch.cat((self.stats / (p.num_epochs * p.num_minibatches), skipped.view(1), lr.float().view(1)))

    def minibatch_loss(self, batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The weighted sum of the enabled losses on a minibatch of rows, and their statistics."""
        d = batch.data
        ev = self.policy.evaluate_sequence(d["obs"], d["actions"], batch.initial_state, d["dones"],
                                           d.get("last_actions"))
        inputs = LossInputs(ev, d, batch.advantages, self.returns.index_select(0, batch.indices), batch.prio_weights)
        total, parts = None, []
        for weight, loss_fn in self.losses:
            value, stats = loss_fn(inputs)
            total = weight * value if total is None else total + weight * value
            parts.extend(stats)
        if "ratio" in self.buffer.data or self.ppo.adaptive:
            with torch.no_grad():
                log_ratio = ev.log_prob - d["log_prob"]
                ratio = log_ratio.exp()
                if "ratio" in self.buffer.data:  # V-trace reads the latest policy's ratios at the next epoch
                    self.buffer.data["ratio"].index_copy_(0, batch.indices, ratio)
                if self.ppo.adaptive:
                    self.ppo.adapt_learning_rate(((ratio - 1.0) - log_ratio)[:, :-1].mean())
        return total, parts

    def finish_iteration(self, host: np.ndarray, seconds: float) -> dict[str, Any]:
        n_stats = len(self.stat_names)
        steps = self.cfg.ppo.steps_per_env * self.num_agents
        self.episodes.end_iteration(host[n_stats + 3 :] if self.episodes.deferred else None)
        from syncfree.train.trainer import log_iteration

        return log_iteration(self, steps, seconds, self.stat_names, host,
                             reward_per_agent_step=float(host[n_stats + 2]) / steps)

    # -- checkpoints ---------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": checkpoint.FORMAT_VERSION,
            "config": to_dict(self.cfg),
            "task": self.cfg.task,
            "obs_dims": {"policy": list(self.env.obs_shapes["policy"])},
            "action_spec": (self.env.action_spec.kind, self.env.action_spec.size),
            "num_envs": self.env.num_envs,
            "world_size": 1,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "policy": self.policy.state_dict(),
            "ppo": self.ppo.state_dict(),
            "env": None,
            "episodes": self.episodes.state_dict(),
            "rng": checkpoint.rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any], source: str = "checkpoint", resume: bool = True) -> None:
        """Load a checkpoint. MettaGrid episodes cannot be saved: a resumed run restores the policy, optimizer,
        schedule, counters and random streams exactly and starts new episodes."""
        expected = {"task": self.cfg.task, "action_spec": (self.env.action_spec.kind, self.env.action_spec.size)}
        if resume and state.get("num_envs") != self.num_agents:
            raise UserError(f"{source}: written with {state.get('num_envs')} agents but this run has "
                            f"{self.num_agents} (env.num_envs x env.grid.agents_per_env); resume with the same")
        for key, value in expected.items():
            got = tuple(state.get(key)) if isinstance(state.get(key), list) else state.get(key)
            if got != value:
                raise UserError(f"{source}: {key} is {got!r} but this run has {value!r}")
        try:
            self.policy.load_state_dict(state["policy"])
        except RuntimeError as e:
            lines = str(e).strip().splitlines()
            raise UserError(f"{source}: policy does not fit this config ({lines[-1].strip()})") from None
        self.ppo.load_state_dict(state["ppo"])
        self.iteration, self.env_steps = state["iteration"], state["env_steps"]
        self.episodes.load_state_dict(state["episodes"])
        self.reset_agents()
        checkpoint.set_rng_state(state["rng"])

    def save(self) -> Path | None:
        if self.run_dir is None:
            return None
        return checkpoint.save_run(self.state_dict(), self.run_dir, self.iteration)

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()
        self.env.close()
