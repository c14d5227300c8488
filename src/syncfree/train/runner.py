"""The training loop, one for every algorithm: rollout, advantages, update, one host transfer, the record.

`Runner` builds the env a config's task makes (`syncfree.tasks`) and the algorithm it names (`algorithm_for`)
with its policy, and drives them; the algorithm owns storage, the rollout step's two halves,
advantages and the update (`syncfree.algo.base`). Everything the host needs from an iteration (the algorithm's
statistics, the monitors' buffers, the env's log, the ranks' shared flags) reaches it in one named transfer
(`syncfree.core.transfer`). What surrounds the loop (folder, metrics, checkpoints, callbacks, signals) is the run's.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from syncfree.algo import algorithm_for
from syncfree.algo.base import CheckpointReader
from syncfree.config import TimeLimitEnvConfig, TrainConfig, to_dict
from syncfree.core.device import apply_threads, choose_threads, resolve_device, set_deterministic
from syncfree.core.memory import retain_freed_memory
from syncfree.core.switches import Scope
from syncfree.core.transfer import HostTransfer
from syncfree.envs import VecEnv
from syncfree.envs.check import check_env
from syncfree.envs.managers.env import ManagerBasedEnv
from syncfree.errors import ENV_MEMORY, UPDATE_MEMORY, NonFiniteError, UserError, allocating
from syncfree.policy.actor_critic import describe_precision
from syncfree.policy.normalizer import running_norms
from syncfree.tasks import make_task_env, switch_scope, validated
from syncfree.train import checkpoint
from syncfree.train.compile_choice import compile_env_step, resolve_compile
from syncfree.train.distributed import Distributed, NormalizerSync, agreed_facts, env_statistics_reduce
from syncfree.train.evaluate import read_checked
from syncfree.train.monitors import SUMMARY, StepMonitors, stop_on_nonfinite
from syncfree.train.schema import check_fits

log = logging.getLogger("syncfree")


class Runner:
    """The loop of one process, or of one rank of several (`dist`; by default the initialized process group, if
    any, see `syncfree.train.distributed`): the device, the env, the algorithm and its policy, the monitors and the
    iteration's transfer."""

    def __init__(self, cfg: TrainConfig, env: VecEnv | None = None, dist: Distributed | None = None,
                 read_checkpoint: CheckpointReader | None = None) -> None:
        self.read_checkpoint: CheckpointReader = read_checkpoint or read_checked
        """How the algorithm reads the checkpoints its config names (a teacher): syncfree's files by default."""
        cfg = validated(cfg)
        self.dist = dist or Distributed.current()
        """None in a single process: then no collective runs and nothing below differs from one process."""
        self.rank = self.dist.rank if self.dist is not None else 0
        self.world_size = self.dist.world_size if self.dist is not None else 1
        self.is_main = self.rank == 0
        self.device = resolve_device(cfg.device, self.dist.local_rank if self.dist is not None else None)
        cfg, self.compile_choice = resolve_compile(cfg, self.device)
        self.cfg = cfg
        """The config as it runs: `perf.compile=auto` replaced by the mode chosen (what `config.yaml` and the
        checkpoints record)."""
        set_deterministic(cfg.perf.deterministic)
        checkpoint.seed_everything(cfg.seed + self.rank)
        if cfg.perf.retain_host_memory:
            retain_freed_memory()
        if env is not None:  # a user's env: what it declares against what it returns, before anything is built
            check_env(env)
        if env is not None and env.num_envs != cfg.env.rows():
            raise UserError(f"env: {type(env).__name__} has {env.num_envs} envs but the config has "
                            f"{cfg.env.describe(cfg.env.rows())} (env.num_envs={cfg.env.num_envs})")
        self._owns_env = env is None
        with allocating(ENV_MEMORY):
            self.env = env or make_task_env(cfg, cfg.env.num_envs, self.device, cfg.seed + self.rank)
        self.threads, self.threads_reason = choose_threads(cfg.threads, self.device, self.world_size,
                                                           self.env.host_threads, self.env.num_envs)
        """torch intra-op threads this run uses, and why (a process-wide setting, made here)."""
        apply_threads(self.threads, self.threads_reason)
        self.algorithm = algorithm_for(cfg).build(cfg, self.env, self.device, self.dist, self.read_checkpoint)
        self.policy = self.algorithm.policy
        self.precision = describe_precision(self.policy, cfg.perf.autocast, self.device)
        """The precision `perf.autocast` resolved to here, in words."""
        self.phases = self.algorithm.phases
        """Attach a recorder (`syncfree.core.phases`) to time or count each phase of the hot loop."""
        self.monitors = StepMonitors(self.algorithm.steps_per_env, self.env.num_envs, self.device, cfg.perf)
        self.algorithm.observer = self.monitors
        self.compile_choice = compile_env_step(self.env, self.compile_choice, cfg, self.device)
        self.steps_per_iteration = self.algorithm.steps_per_env * self.env.num_envs * self.world_size
        """Env steps (agent steps) of one iteration, all ranks together."""

        self.transfer = HostTransfer()
        """The iteration's one host read: the algorithm's statistics, the monitors' buffers, the env's log."""
        self.transfer.register("algo", self.algorithm.statistics)
        self.transfer.register("episodes", self.monitors.episodes.device_payload)
        self.transfer.register("nonfinite", self.monitors.nonfinite.device_payload)
        self.transfer.register("env", self.env.pop_log)
        self._record_parts: list[str] = []
        """Sources of the transfer whose value goes into each record under its name (`record_part`)."""
        self.metric_names: set[str] = set()
        """Every metric of this run's records, from its first (those without a value yet included)."""
        self.norm_sync: NormalizerSync | None = None
        self.rnd_norm_sync: NormalizerSync | None = None
        """With several processes and RND: its input and reward normalizers, merged after each update."""
        self._env_reduce = env_statistics_reduce(self.env, self.dist)
        """Passed to `VecEnv.end_iteration` with several processes (when it takes it): sums over ranks in place."""
        if self.dist is not None:
            self.dist.check_agreement(agreed_facts(cfg, self.policy, self.env))
            self.broadcast_modules()
            self.norm_sync = NormalizerSync(running_norms(self.policy), self.dist)
            rnd = self.algorithm.rnd
            if rnd is not None:
                self.rnd_norm_sync = NormalizerSync(running_norms(rnd.module), self.dist)
            shared = self.algorithm.shared_statistics
            self._rank_means = [name for name in self.algorithm.statistics() if name not in shared]
            """Statistics averaged over ranks (the others, the skip count and the learning rate, are equal on all)."""
            self._shared = torch.zeros(len(self._rank_means) + 2, dtype=torch.float64, device=self.device)
            """Per-iteration all-reduce: summed statistics, any rank's non-finite flag, any rank's stop request."""
            self.transfer.register("ranks", lambda: self._shared)

        self.obs: dict[str, torch.Tensor]
        """The env's current observations."""
        self.collection_seconds = 0.0
        """Host time of the last iteration's rollout (rsl_rl's collection time; on a GPU, without a sync of its own,
        until the rollout was queued)."""
        self.reset_env()
        self.iteration = 0
        self.env_steps = 0
        """Env steps of all ranks."""
        self._iterations_run = 0
        """Iterations this runner has run (not counting those of a checkpoint it resumed)."""
        self.stop_requested = False
        """Set by `request_stop` (a signal, a callback): the loop ends after the current iteration (with several
        processes: once any rank asked, all stop after the same iteration)."""
        self._stop_agreed = False

    def learn(self, until: int | None = None,
              after_iteration: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Train until iteration `until` (by default `cfg.iterations`, the run's length, which the linear
        learning-rate schedule and the prioritized sampler anneal over: a run trained in parts passes `until`) or
        until a stop is requested, calling `after_iteration` with each record (a run logs, evaluates and saves
        there: `syncfree.train.run.Run`); returns the last iteration's record."""
        record: dict[str, Any] = {}
        until = self.cfg.iterations if until is None else until
        set_deterministic(self.cfg.perf.deterministic)  # a process-wide setting: other runners may have changed it
        while self.iteration < until and not self.stopping():
            record = self.iterate()
            if after_iteration is not None:
                after_iteration(record)
        return record

    def iterate(self) -> dict[str, Any]:
        """One iteration: rollout, advantages, update, the one host transfer; returns its record."""
        algorithm, start = self.algorithm, time.perf_counter()
        algorithm.begin_rollout()
        with torch.inference_mode():
            for t in range(algorithm.steps_per_env):
                self.rollout_step(t)
            self.collection_seconds = time.perf_counter() - start
            if self.norm_sync is not None:
                self.norm_sync.merge()
            algorithm.compute_returns(self.obs)
        if self._env_reduce is not None:
            self.env.end_iteration(reduce=self._env_reduce)
        else:
            self.env.end_iteration()
        with allocating(UPDATE_MEMORY):
            algorithm.update(progress=self.iteration / max(self.cfg.iterations, 1))
        if self.rnd_norm_sync is not None:
            self.rnd_norm_sync.merge()
        with self.phases("logging"):
            host = self.read_iteration()  # the iteration's only host transfer
            self.iteration += 1
            self.env_steps += self.steps_per_iteration
            record = self.finish_iteration(host, time.perf_counter() - start)
        self._iterations_run += 1
        return record

    def record_part(self, name: str, source: Callable[[], torch.Tensor]) -> None:
        """Read `source()` (one value) in each iteration's transfer and put it in the record as `name`: a figure
        a caller logs (the rsl_rl drop-in's action std) costs no host read of its own."""
        self.transfer.register(name, source)
        self._record_parts.append(name)

    def switch_scope(self) -> Scope:
        """Where this run stands for the perf switches (`PerfConfig.inert_switches` says which change nothing)."""
        return switch_scope(self.cfg, self.device, self.world_size, env_layer=isinstance(self.env, ManagerBasedEnv),
                            env_switches=self.env.env_switches, policy=self.policy)

    def execution(self) -> str:
        """Where and how this run computes, resolved: device, threads and why, compile mode, precision."""
        why = f" ({self.threads_reason})" if self.threads_reason != "threads" else ""  # not when the user set it
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}{why}"
        chosen = f" ({self.compile_choice.reason})" if self.compile_choice.reason else ""
        return f"{self.device}, {threads}, {self.precision}, perf.compile={self.cfg.perf.compile}{chosen}"

    @property
    def iterations_run(self) -> int:
        """Iterations this runner has run (not counting those of a checkpoint it resumed)."""
        return self._iterations_run

    def compiles_first_iteration(self) -> bool:
        """The next iteration is this runner's first with `perf.compile` on: it builds the graphs (seconds to
        minutes on a CPU; torch keeps them in its on-disk caches for the next run of the same config)."""
        return self.cfg.perf.compile != "off" and self._iterations_run == 0

    def rollout_step(self, t: int) -> None:
        """Act, step the env, record (the algorithm runs the monitors too): device tensors only."""
        actions = self.algorithm.act(self.obs, t)
        with self.phases("env"):
            step = self.env.step(actions)
        self.algorithm.record(t, step)
        self.obs = step.obs

    def stopping(self) -> bool:
        """A stop was requested: on this process, or with several processes on any rank (agreed each iteration,
        so that all ranks leave the loop after the same iteration)."""
        return self.stop_requested if self.dist is None else self._stop_agreed

    def request_stop(self) -> None:
        """End the loop after the current iteration."""
        self.stop_requested = True

    def clear_stop(self) -> None:
        """Train on after a stop ended the last `learn` (training asked for again goes on)."""
        self.stop_requested = self._stop_agreed = False

    def continue_from(self, iteration: int) -> None:
        """Count on from `iteration` (a checkpoint of another format's, whose env steps are not recorded: as many as
        its iterations took at this run's size)."""
        self.iteration, self.env_steps = iteration, iteration * self.steps_per_iteration

    def read_iteration(self) -> dict[str, np.ndarray]:
        """Everything the host needs from the iteration, in one transfer (with several processes, after one
        all-reduce of the losses, any rank's non-finite output and any rank's stop request)."""
        if self.dist is not None:
            names = self._rank_means
            stats = self.algorithm.statistics()
            self._shared[: len(names)].copy_(torch.stack([stats[name].double() for name in names]))
            self.monitors.nonfinite.any_bad(out=self._shared[len(names)])
            self._shared[len(names) + 1].fill_(float(self.stop_requested))
            self.dist.all_reduce(self._shared, "iteration statistics")
        return self.transfer.read()

    def finish_iteration(self, host: dict[str, np.ndarray], seconds: float) -> dict[str, Any]:
        """Read the transfer by name: stop on non-finite env output, update the episode statistics, log."""
        stats = {name.removeprefix("algo/"): float(value) for name, value in host.items() if name.startswith("algo/")}
        shared = host.get("ranks")
        names = self._rank_means if shared is not None else []
        if shared is not None:  # statistics averaged over ranks
            stats.update(zip(names, (shared[: len(names)] / self.world_size).tolist(), strict=True))
            self._stop_agreed = bool(shared[-1] > 0)
        where = f"{f'rank {self.rank}: ' if self.dist is not None else ''}iteration {self.iteration}"
        stop_on_nonfinite(self.monitors.nonfinite.end_iteration(host.get("nonfinite")),
                          shared is not None and shared[len(names)] > 0, where)
        diverged = self.algorithm.divergence(stats)
        if diverged is not None:  # stopped before the iteration is saved
            raise NonFiniteError(f"{where}: {diverged}; stopped")
        episodes = self.monitors.episodes
        episodes.end_iteration(host.get("episodes"))
        record: dict[str, Any] = {"iteration": self.iteration, "env_steps": self.env_steps,
                                  "steps_per_s": self.steps_per_iteration / seconds, "iteration_seconds": seconds,
                                  "episodes": len(episodes.iteration_episodes), **episodes.summary()}
        record.update({name.removeprefix("env/"): float(value) for name, value in host.items()
                       if name.startswith("env/") and not math.isnan(value)})  # NaN: no sample this iteration
        record.update(self.algorithm.record_statistics(stats))
        record.update({name: float(host[name]) for name in self._record_parts})
        self.metric_names = {*record, *SUMMARY, *(name.removeprefix("env/") for name in host if name.startswith("env/"))}
        return record

    # -- checkpoints -------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The trainer's state: everything a resumed run continues exactly from (a run's checkpoint adds its own:
        `syncfree.train.run.Run.state_dict`). The policy's weights are those to evaluate and export
        (`Algorithm.average_weights`)."""
        with self.algorithm.average_weights() as swapped:
            policy = {k: v.clone() for k, v in self.policy.state_dict().items()} if swapped else \
                self.policy.state_dict()
        return {
            "format": checkpoint.FORMAT_VERSION,
            "config": to_dict(self.cfg),
            "task": self.cfg.task,
            "obs_dims": self.algorithm.obs_dims(self.env),
            "action_spec": (self.env.action_spec.kind, self.env.action_spec.size),
            "num_envs": self.env.num_envs,
            "world_size": self.world_size,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "policy": policy,
            "algorithm": self.algorithm.state_dict(),
            "env": self.env.state_dict() if self.env.saveable else None,
            "obs": {k: v.clone() for k, v in self.obs.items()},
            "episodes": self.monitors.episodes.state_dict(),
            "rng": checkpoint.rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any], source: str = "checkpoint", resume: bool = True,
                        template: dict[str, Any] | None = None) -> None:
        """Load a checkpoint. `resume`: training continues from it, so each process must have as many envs as the
        one that wrote it had (False when only the policy is wanted, as in evaluation); the process count may
        differ (the trainer state is every rank's; rank 0 continues the saved envs, the others start new ones).

        With several processes every rank reads the same file: trainer state (policy, optimizer, learning rate,
        iteration) on all ranks, env state, last observations and RNG states (rank 0's, as saved) on rank 0 only;
        the other ranks' envs start new episodes and their RNGs are reseeded from (seed, rank, iteration). Envs
        that cannot be saved (MettaGrid, Gymnasium, Isaac Lab) start new episodes; everything else continues
        exactly. Every field is checked against `template` (the state this run saves: by default `state_dict()`)
        before anything is restored (`syncfree.train.schema.check_fits`)."""
        check_fits(state, self, template or self.state_dict(), source, resume)
        try:
            self.policy.load_state_dict(state["policy"])
        except RuntimeError as e:
            lines = str(e).strip().splitlines()
            detail = lines[1].strip() if len(lines) > 1 else lines[0]
            raise UserError(f"{source}: policy does not fit this config ({detail})") from None
        self.algorithm.load_state_dict(state["algorithm"])
        self.iteration, self.env_steps = state["iteration"], state["env_steps"]
        if not self.is_main:
            self.reset_env()
            checkpoint.seed_everything(self.cfg.seed + self.rank + 1_000_003 * self.iteration)
        else:
            self.monitors.episodes.load_state_dict(state["episodes"])
            if state["env"] is not None and self.env.saveable:
                with torch.inference_mode(False):
                    self.env.load_state_dict(state["env"])
                self.obs = {k: v.to(self.device) for k, v in state["obs"].items()}
            else:
                self.reset_env()  # external envs cannot be saved: they start new episodes
            checkpoint.set_rng_state(state["rng"])
        if self.dist is not None and self.norm_sync is not None:
            self.broadcast_modules()
            self.norm_sync.snapshot()
            if self.rnd_norm_sync is not None:
                self.rnd_norm_sync.snapshot()

    def broadcast_modules(self) -> None:
        """Rank 0's policy, and its RND networks and normalizers (the random target too), on every rank."""
        assert self.dist is not None  # with several processes only
        self.dist.broadcast_module(self.policy)
        if self.algorithm.rnd is not None:
            self.dist.broadcast_module(self.algorithm.rnd.module)

    def reset_env(self) -> None:
        """New episodes everywhere (with `env.random_start`, each at a random step of its time limit)."""
        self.obs = self.env.reset()
        if isinstance(self.cfg.env, TimeLimitEnvConfig) and self.cfg.env.random_start:
            self.env.start_at_random_steps()
        self.algorithm.reset_episodes()

    def close(self) -> None:
        """Close the env, unless it was passed in (it stays its owner's to close)."""
        if self._owns_env:
            self.env.close()
