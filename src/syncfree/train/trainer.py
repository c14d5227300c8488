"""The training loop: rollout into preallocated storage, PPO update, one host transfer per iteration."""

from __future__ import annotations

import inspect
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from syncfree.algo.advantages import compute_gae
from syncfree.algo.ppo import PPO, UPDATE_STATS
from syncfree.algo.storage import RolloutStorage, StepRow, store_env, store_policy
from syncfree.config import TrainConfig, to_dict, validate
from syncfree.envs import VecEnv, make_env
from syncfree.errors import NonFiniteError, UserError
from syncfree.perf.memory import retain_freed_memory
from syncfree.perf.phases import Phases
from syncfree.policy import ActorCritic
from syncfree.policy.actor_critic import set_autocast
from syncfree.policy.token_encoder import TokenActorCritic, default_layout
from syncfree.train import checkpoint, compiled
from syncfree.train.distributed import (
    Distributed,
    NormalizerSync,
    global_mean_std,
    rank_device,
    running_norms,
)
from syncfree.train.logger import RunLogger
from syncfree.train.monitors import EpisodeStats, NonFiniteMonitor, record_row


class Trainer:
    """PPO on one process, or on one rank of several (`dist`; by default the initialized process group, if
    any, see `syncfree.train.distributed`)."""

    def __init__(self, cfg: TrainConfig, run_dir: Path | None = None, env: VecEnv | None = None,
                 dist: Distributed | None = None) -> None:
        self.cfg = validate(cfg)
        self.dist = dist or Distributed.current()
        """None in a single process: then no collective runs and nothing below differs from one process."""
        self.rank = self.dist.rank if self.dist is not None else 0
        self.world_size = self.dist.world_size if self.dist is not None else 1
        self.is_main = self.rank == 0
        self.device = resolve_device(cfg.device, self.dist)
        set_deterministic(cfg.perf.deterministic)
        checkpoint.seed_everything(cfg.seed + self.rank)
        if cfg.perf.retain_host_memory:
            retain_freed_memory()
        if env is not None and env.num_envs != cfg.env.num_envs:
            raise UserError(f"env: {type(env).__name__} has {env.num_envs} envs but env.num_envs={cfg.env.num_envs}")
        self.env = env or make_env(cfg.task, cfg.env.num_envs, self.device, cfg.seed + self.rank,
                                   cfg.env.max_episode_length, robot=cfg.env.robot, motions=cfg.env.motions,
                                   backend=cfg.env.backend,
                                   tokenizer=cfg.policy.kind == "token", perf=cfg.perf)
        self.policy = build_policy(cfg, self.env).to(self.device)
        set_autocast(self.policy, cfg.perf.autocast, self.device)
        self.actor_dim, self.critic_dim = self.policy.actor_obs_dim, obs_dim(self.env, "critic")
        self.phases = Phases()
        """Attach a recorder (`perf.phases`) to time or count each phase of the hot loop."""
        self.norm_sync: NormalizerSync | None = None
        self._env_takes_reduce = False
        if self.dist is not None:
            self.dist.broadcast_module(self.policy)
            self.norm_sync = NormalizerSync(running_norms(self.policy), self.dist)
            self._env_takes_reduce = "reduce" in inspect.signature(self.env.end_iteration).parameters
            self._shared = torch.zeros(len(UPDATE_STATS) + 2, device=self.device)
            """Per-iteration all-reduce: summed losses, any rank's non-finite flag, any rank's stop request."""
        self.ppo = PPO(self.policy, cfg.ppo, cfg.perf, self.device, self.phases, dist=self.dist)
        steps, n = cfg.ppo.steps_per_env, self.env.num_envs
        self.storage = RolloutStorage(steps, n, self.actor_dim, self.critic_dim, self.env.action_spec,
                                      self.policy.head.num_params, self.device)
        self.episodes = EpisodeStats(steps, n, self.device, deferred=cfg.perf.deferred_episode_stats)
        self.nonfinite = NonFiniteMonitor(n, self.device, deferred=cfg.perf.deferred_nonfinite_check, steps=steps)
        self._next_actor_obs = (torch.zeros(n, self.actor_dim, device=self.device)
                                if cfg.policy.kind == "token" else None)
        """Where the token policy assembles the next observation for its normalizers."""
        compiled.use_cuda_graphs(cfg.perf, self.device)  # rejects cuda_graphs=on off a GPU
        self._act_step = compiled.hot(self.act_step, cfg.perf, self.device)
        self._record_step = compiled.hot(self.record_step, cfg.perf, self.device)
        if cfg.perf.compile != "off":
            self.env.compile_step(lambda fn: compiled.hot(fn, cfg.perf, self.device))
        self._gae = compute_gae if self.dist is not None else compiled.hot(compute_gae, cfg.perf, self.device)
        """With several processes the advantage statistics need a collective: GAE then stays eager."""
        self.obs = self.env.reset()
        self.iteration = 0
        self.env_steps = 0
        """Env steps of all ranks."""
        self.run_dir = run_dir if self.is_main else None
        """Only rank 0 writes metrics and checkpoints."""
        self.stop_requested = False
        """Set from a signal handler: the loop finishes the current iteration, saves, and returns (with several
        processes: once any rank asked, all stop after the same iteration)."""
        self._stop_agreed = False
        self.logger = (RunLogger(self.run_dir, cfg.log.tensorboard, cfg.log.wandb, to_dict(cfg))
                       if self.run_dir is not None else None)

    def learn(self) -> dict[str, Any]:
        """Train until `cfg.iterations`; returns the last iteration's record."""
        cfg, record = self.cfg, {}
        set_deterministic(cfg.perf.deterministic)  # a process-wide setting: other trainers may have changed it
        bar = tqdm(total=cfg.iterations, initial=self.iteration, disable=not cfg.log.progress or not self.is_main,
                   unit="it", dynamic_ncols=True)
        while self.iteration < cfg.iterations and not self.stopping():
            start = time.perf_counter()
            with torch.inference_mode():
                for t in range(cfg.ppo.steps_per_env):
                    self.rollout_step(t)
                if self.norm_sync is not None:
                    self.norm_sync.merge()
                with self.phases("advantages"):
                    self.compute_advantages()
            if self._env_takes_reduce:
                self.env.end_iteration(reduce=self.reduce_env_statistics)
            else:
                self.env.end_iteration()
            update_stats = self.ppo.update(self.storage)
            with self.phases("logging"):
                host = self.read_iteration(update_stats)  # the iteration's only host transfer
                self.iteration += 1
                self.env_steps += cfg.ppo.steps_per_env * self.env.num_envs * self.world_size
                record = self.finish_iteration(host, time.perf_counter() - start)
            bar.set_postfix(steps_per_s=f"{record['steps_per_s']:.0f}",
                            mean_return=f"{record.get('mean_return', float('nan')):.1f}", refresh=False)
            bar.update(1)
            if self.iteration % cfg.save_every == 0 or self.iteration == cfg.iterations or self.stopping():
                self.save()
        bar.close()
        return record

    def stopping(self) -> bool:
        """A stop was requested: on this process, or with several processes on any rank (agreed each iteration,
        so that all ranks leave the loop after the same iteration)."""
        return self.stop_requested if self.dist is None else self._stop_agreed

    def reduce_env_statistics(self, tensor: torch.Tensor) -> torch.Tensor:
        """Passed to `VecEnv.end_iteration` with several processes: sums `tensor` over ranks in place."""
        return self.dist.all_reduce(tensor, "env statistics (VecEnv.end_iteration)")

    def rollout_step(self, t: int) -> None:
        """Act, step the environment, store: device tensors only."""
        if self.cfg.perf.compile != "off":
            self.compiled_rollout_step(t)
            return
        obs, phase = self.obs, self.phases
        with phase("act"):
            out = self.storage.actor_obs[t] if self._next_actor_obs is not None else None
            actor_obs = self.policy.actor_input(obs, out=out)
            act = self.policy.act(actor_obs, obs["critic"])
        with phase("store"):
            self.storage.store_policy_step(t, actor_obs, obs["critic"], act)
        with phase("env"):
            step = self.env.step(act.actions)
            done = step.terminated | step.truncated
        bootstrap_values = self.final_values(step)
        with phase("normalizer"):
            self.policy.update_normalizers(self.policy.actor_input(step.obs, out=self._next_actor_obs),
                                           step.obs["critic"])
        with phase("store"):
            self.storage.store_env_step(t, step.reward, done, step.truncated, self.cfg.ppo.gamma, bootstrap_values)
        with phase("stats"):
            self.episodes.record(t, done, step.info["episode_return"], step.info["episode_length"])
            self.nonfinite.check(t, step.obs, step.reward)
        self.obs = step.obs

    def compiled_rollout_step(self, t: int) -> None:
        """The same step as two compiled graphs around the env step: `act_step` (timed as the act phase) and
        `record_step` (normalizers, storage and bookkeeping; timed as the stats phase)."""
        phase, deferred = self.phases, self.episodes.deferred and self.nonfinite.deferred
        with phase("act"):
            actions = self._act_step(self.obs, self.storage.rows[t])
        with phase("env"):
            step = self.env.step(actions)
        bootstrap_values = self.final_values(step)
        with phase("stats"):
            self._record_step(step.obs, step.reward, step.terminated, step.truncated, step.info["episode_return"],
                              step.info["episode_length"], bootstrap_values, self.storage.rows[t],
                              self.episodes.rows[t] if deferred else None,
                              self.nonfinite.step_values[t] if deferred else None)
            if not deferred:  # the conventional monitors read the host: outside the graph
                done = step.terminated | step.truncated
                self.episodes.record(t, done, step.info["episode_return"], step.info["episode_length"])
                self.nonfinite.check(t, step.obs, step.reward)
        self.obs = step.obs

    def act_step(self, obs: dict[str, torch.Tensor], row: StepRow) -> torch.Tensor:
        """Normalize, act, sample and store the policy's side of one step; returns the actions."""
        actor_obs = self.policy.actor_input(obs, out=row.actor_obs if self._next_actor_obs is not None else None)
        act = self.policy.act(actor_obs, obs["critic"])
        store_policy(row, actor_obs, obs["critic"], act)
        return act.actions

    def record_step(self, obs: dict[str, torch.Tensor], reward: torch.Tensor, terminated: torch.Tensor,
                    truncated: torch.Tensor, episode_return: torch.Tensor, episode_length: torch.Tensor,
                    bootstrap_values: torch.Tensor | None, row: StepRow, episode_row: torch.Tensor | None,
                    step_value: torch.Tensor | None) -> None:
        """Normalizer updates, the env's side of the storage, and (when given their rows) the deferred episode
        and non-finite bookkeeping of one step."""
        done = terminated | truncated
        self.policy.update_normalizers(self.policy.actor_input(obs, out=self._next_actor_obs), obs["critic"])
        store_env(row, reward, done, truncated, self.cfg.ppo.gamma, bootstrap_values)
        if episode_row is not None:
            record_row(episode_row, done, episode_return, episode_length)
            self.nonfinite.check_row(step_value, obs, reward)

    def final_values(self, step) -> torch.Tensor | None:
        """Time-outs bootstrap from the value of the episode's last observation, when the env provides it."""
        if "final_obs" not in step.info:
            return None
        with self.phases("act"), torch.inference_mode():
            return self.policy.value(step.info["final_obs"]["critic"])

    def compute_advantages(self) -> None:
        s = self.storage
        last_values = self.policy.value(self.obs["critic"])
        mean_std = None if self.dist is None else (lambda x: global_mean_std(x, self.dist))
        self._gae(s.rewards, s.values, s.dones, last_values, self.cfg.ppo.gamma, self.cfg.ppo.lam,
                  s.advantages, s.returns, mean_std=mean_std)

    def read_iteration(self, update_stats: torch.Tensor) -> np.ndarray:
        parts = [update_stats, self.nonfinite.device_payload(), self.episodes.device_payload()]
        if self.dist is not None:  # losses summed over ranks, any rank's non-finite output, any rank's stop request
            n = len(UPDATE_STATS)
            self._shared[:n].copy_(update_stats[:n])
            self.nonfinite.any_bad(out=self._shared[n])
            self._shared[n + 1].fill_(float(self.stop_requested))
            parts.append(self.dist.all_reduce(self._shared, "iteration statistics"))
        return torch.cat([p for p in parts if p is not None]).cpu().numpy()

    def finish_iteration(self, host: np.ndarray, seconds: float) -> dict[str, Any]:
        """Unpack the host transfer, stop on non-finite env output, log."""
        n_update = len(UPDATE_STATS) + 2
        n_flags = self.nonfinite.payload_size()
        shared = None
        if self.dist is not None:
            host, shared = host[: -len(self._shared)], host[-len(self._shared) :]
            host[: len(UPDATE_STATS)] = shared[: len(UPDATE_STATS)] / self.world_size  # means over ranks
            self._stop_agreed = bool(shared[-1] > 0)
        first_bad = self.nonfinite.end_iteration(host[n_update : n_update + n_flags] if n_flags else None)
        where = f"rank {self.rank}: " if self.dist is not None else ""
        if first_bad is not None:
            step, envs = first_bad
            shown = ", ".join(map(str, envs[:8])) + (f", ... ({len(envs)} envs)" if len(envs) > 8 else "")
            raise NonFiniteError(f"{where}iteration {self.iteration}: non-finite observation or reward from env ids "
                                 f"[{shown}] at rollout step {step}; stopped, last good checkpoint kept")
        if shared is not None and shared[len(UPDATE_STATS)] > 0:
            raise NonFiniteError(f"{where}iteration {self.iteration}: another rank's envs produced a non-finite "
                                 "observation or reward (its error names them); stopped, last good checkpoint kept")
        self.episodes.end_iteration(host[n_update + n_flags :] if self.episodes.deferred else None)
        steps = self.cfg.ppo.steps_per_env * self.env.num_envs * self.world_size
        return log_iteration(self, steps, seconds, UPDATE_STATS, host)

    # -- checkpoints -------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": checkpoint.FORMAT_VERSION,
            "config": to_dict(self.cfg),
            "task": self.cfg.task,
            "obs_dims": {"policy": self.actor_dim, "critic": self.critic_dim},
            "action_spec": (self.env.action_spec.kind, self.env.action_spec.size),
            "num_envs": self.env.num_envs,
            "world_size": self.world_size,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "policy": self.policy.state_dict(),
            "ppo": self.ppo.state_dict(),
            "env": self.env.state_dict() if self.env.saveable else None,
            "obs": {k: v.clone() for k, v in self.obs.items()},
            "episodes": self.episodes.state_dict(),
            "rng": checkpoint.rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any], source: str = "checkpoint", resume: bool = True) -> None:
        """Load a checkpoint. `resume`: training continues from it, so it must come from as many processes as
        this run has (False when only the policy is wanted, as in evaluation).

        With several processes every rank reads the same file: trainer state (policy, optimizer, learning rate,
        iteration) on all ranks, env state, last observations and RNG states (rank 0's, as saved) on rank 0 only;
        the other ranks' envs start new episodes and their RNGs are reseeded from (seed, rank, iteration)."""
        if resume:
            saved = state.get("world_size", 1)
            if saved != self.world_size:
                raise UserError(f"{source}: written by {saved} process{'es' if saved != 1 else ''} (world size "
                                f"{saved}) but this run has world size {self.world_size}; resume it with "
                                f"{saved} process{'es' if saved != 1 else ''}")
        check_compatible(state, self, source)
        try:
            self.policy.load_state_dict(state["policy"])
        except RuntimeError as e:
            lines = str(e).strip().splitlines()
            detail = lines[1].strip() if len(lines) > 1 else lines[0]
            raise UserError(f"{source}: policy does not fit this config ({detail})") from None
        self.ppo.load_state_dict(state["ppo"])
        self.iteration, self.env_steps = state["iteration"], state["env_steps"]
        if not self.is_main:
            self.obs = self.env.reset()
            checkpoint.seed_everything(self.cfg.seed + self.rank + 1_000_003 * self.iteration)
        else:
            self.episodes.load_state_dict(state["episodes"])
            if state["env"] is not None and self.env.saveable:
                with torch.inference_mode(False):
                    self.env.load_state_dict(state["env"])
                self.obs = {k: v.to(self.device) for k, v in state["obs"].items()}
            else:
                self.obs = self.env.reset()  # external envs cannot be saved: they start new episodes
            checkpoint.set_rng_state(state["rng"])
        if self.dist is not None:
            self.dist.broadcast_module(self.policy)
            self.norm_sync.snapshot()

    def save(self) -> Path | None:
        if self.run_dir is None:
            return None
        return checkpoint.save_run(self.state_dict(), self.run_dir, self.iteration)

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()


def log_iteration(trainer: Any, steps: int, seconds: float, stat_names: tuple[str, ...], host: np.ndarray,
                  **extra: float) -> dict[str, Any]:
    """The iteration's record (counters, speed, `extra`, episode summary, env log, the update statistics read from
    `host`: `stat_names`, then skipped steps and learning rate), logged and returned."""
    n = len(stat_names)
    record: dict[str, Any] = {"iteration": trainer.iteration, "env_steps": trainer.env_steps,
                              "steps_per_s": steps / seconds, "iteration_seconds": seconds, **extra,
                              "episodes": len(trainer.episodes.iteration_episodes)}
    record.update(trainer.episodes.summary())
    record.update(trainer.env.pop_log())
    record.update(zip(stat_names, host[:n].tolist(), strict=True))
    record["skipped_steps"] = int(host[n])
    record["learning_rate"] = float(host[n + 1])
    if trainer.logger is not None:
        trainer.logger.log(record)
    return record


def make_trainer(cfg: TrainConfig, run_dir: Path | None = None, env: VecEnv | None = None,
                 dist: Distributed | None = None) -> Trainer:
    """The trainer for `cfg`: `SequenceTrainer` (BPTT segments) for recurrent policies, else `Trainer`."""
    if cfg.policy.kind == "recurrent":
        from syncfree.train.sequence import SequenceTrainer

        return SequenceTrainer(cfg, run_dir, env, dist)
    return Trainer(cfg, run_dir, env, dist)


def check_compatible(state: dict[str, Any], trainer: Trainer, source: str) -> None:
    """A checkpoint must match the task's observation and action shapes and the env count."""
    expected = {"task": trainer.cfg.task, "obs_dims": {"policy": trainer.actor_dim, "critic": trainer.critic_dim},
                "action_spec": (trainer.env.action_spec.kind, trainer.env.action_spec.size),
                "num_envs": trainer.env.num_envs}
    for key, value in expected.items():
        got = state.get(key)
        if isinstance(got, list):
            got = tuple(got)
        if got != value:
            raise UserError(f"{source}: {key} is {got!r} but this run has {value!r}")


def build_policy(cfg: TrainConfig, env: VecEnv) -> ActorCritic | TokenActorCritic:
    critic_dim = obs_dim(env, "critic")
    if cfg.policy.kind == "mlp":
        return ActorCritic(obs_dim(env, "policy"), critic_dim, env.action_spec, cfg.policy,
                           validate_distributions=cfg.perf.validate_distributions,
                           critic_chunk_size=cfg.perf.critic_chunk_size)
    if env.action_spec.kind != "continuous" or not any(k.startswith("tokenizer/") for k in env.obs_shapes):
        raise UserError(f"policy.kind=token: task {cfg.task!r} has no tokenizer observations or no continuous "
                        "actions (use it with g1-track)")
    try:
        layout = default_layout(env.obs_shapes, cfg.policy.token)
        return TokenActorCritic(layout, critic_dim, env.action_spec, cfg.policy.token,
                                validate_distributions=cfg.perf.validate_distributions,
                                cache_encoded_outputs=cfg.perf.cache_encoded_outputs,
                                cache_full_latent=cfg.perf.cache_full_latent,
                                critic_chunk_size=cfg.perf.critic_chunk_size)
    except ValueError as e:
        raise UserError(f"policy.token: {e}") from None


def resolve_device(name: str, dist: Distributed | None = None) -> torch.device:
    """`auto` is CUDA when available; with several processes `cuda` is `cuda:LOCAL_RANK`."""
    return rank_device(name, dist)


def set_deterministic(on: bool) -> None:
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on


def obs_dim(env: VecEnv, group: str) -> int:
    if group not in env.obs_shapes:
        raise UserError(f"env: observation group {group!r} missing (has {', '.join(env.obs_shapes)})")
    shape = env.obs_shapes[group]
    if len(shape) != 1:
        raise UserError(f"env: observation group {group!r} has shape {shape}; the MLP policy needs 1-D observations")
    return shape[0]
