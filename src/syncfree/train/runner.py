"""The training loop, one for every algorithm: rollout, advantages, update, one host transfer, log, save.

`Runner` builds the env a config's task makes (`syncfree.tasks`), and the algorithm the config's type chooses
(`syncfree.algo.algorithm_for`) with its policy, and drives them; the algorithm owns storage, the rollout step's
two halves, advantages and the update (`syncfree.algo.base`). Everything the host needs from an iteration (the
algorithm's statistics, the monitors' buffers, the env's log, with several processes the ranks' shared flags)
reaches it in one named transfer (`syncfree.core.transfer`).
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from syncfree.algo import algorithm_for
from syncfree.algo.base import CheckpointReader
from syncfree.config import TimeLimitEnvConfig, TrainConfig, flatten, to_dict
from syncfree.core.compile import hot
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
from syncfree.tasks import make_task_env, stored_algorithm, switch_scope, validated
from syncfree.train import checkpoint
from syncfree.train.callbacks import Callbacks, IterationCallback
from syncfree.train.compile_choice import resolve_compile
from syncfree.train.distributed import Distributed, NormalizerSync
from syncfree.train.logger import RunLogger, WandbRun, copy_records
from syncfree.train.monitors import StepMonitors
from syncfree.train.progress import Progress
from syncfree.train.run_lock import RunLock
from syncfree.train.schema import check_checkpoint

log = logging.getLogger("syncfree")

RANK_SHARED = ("skipped_steps", "learning_rate", "longest_skip_run", "non_finite_parameters")
"""Statistics every rank holds the same value of (the gradients and the KL are averaged before the step)."""


class Runner:
    """PPO on one process, or on one rank of several (`dist`; by default the initialized process group, if
    any, see `syncfree.train.distributed`)."""

    def __init__(self, cfg: TrainConfig, run_dir: Path | None = None, env: VecEnv | None = None,
                 dist: Distributed | None = None, on_iteration: Sequence[IterationCallback] = (),
                 read_checkpoint: CheckpointReader | None = None) -> None:
        self.read_checkpoint: CheckpointReader = read_checkpoint or checkpoint.read
        """How the algorithm reads the checkpoints its config names (a teacher): syncfree's files by default."""
        self.cfg = validated(cfg)
        self.dist = dist or Distributed.current()
        """None in a single process: then no collective runs and nothing below differs from one process."""
        self.rank = self.dist.rank if self.dist is not None else 0
        self.world_size = self.dist.world_size if self.dist is not None else 1
        self.is_main = self.rank == 0
        self.run_dir = run_dir if self.is_main else None
        """Only rank 0 writes metrics and checkpoints."""
        self._lock: RunLock | None = None
        created = self._created = None
        """The outermost folder of `run_dir` this runner created (removed again if it never trains)."""
        if self.run_dir is not None:
            created = self._created = checkpoint.first_missing(self.run_dir)
            removed = checkpoint.prepare_run_dir(self.run_dir)
            if removed:
                log.info("removed %d temporary file(s) an interrupted save left in %s", len(removed), self.run_dir)
            self._lock = RunLock(self.run_dir)
        try:
            if self._lock is not None:
                self._lock.acquire()
            self._build(cfg, env, on_iteration)
        except BaseException:  # a run that never started leaves no folder behind (nor its lock)
            if self._lock is not None:
                self._lock.release()
            if created is not None and self.run_dir is not None:
                checkpoint.remove_unused(self.run_dir, created)
            raise

    def _build(self, cfg: TrainConfig, env: VecEnv | None, on_iteration: Sequence[IterationCallback]) -> None:
        """The device, the env, the algorithm and its policy, the monitors and the iteration's transfer."""
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
        self.callbacks = Callbacks(cfg, on_iteration, None if env is not None else (
            lambda num_envs, seed: make_task_env(cfg, num_envs, self.device, seed)))
        """Evaluation, the best checkpoint, early stopping, the API's functions (`callbacks.*`); rank 0 asks."""
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
        if cfg.perf.compile != "off":
            self.env.compile_step(lambda fn: hot(fn, cfg.perf, self.device))
        self.steps_per_iteration = self.algorithm.steps_per_env * self.env.num_envs * self.world_size
        """Env steps (agent steps) of one iteration, all ranks together."""

        self.transfer = HostTransfer()
        """The iteration's one host read: the algorithm's statistics, the monitors' buffers, the env's log."""
        self.transfer.register("algo", self.algorithm.statistics)
        self.transfer.register("episodes", self.monitors.episodes.device_payload)
        self.transfer.register("nonfinite", self.monitors.nonfinite.device_payload)
        self.transfer.register("env", self.env.pop_log)
        self.norm_sync: NormalizerSync | None = None
        self.rnd_norm_sync: NormalizerSync | None = None
        """With several processes and RND: its input and reward normalizers, merged after each update."""
        self._env_takes_reduce = False
        if self.dist is not None:
            self.dist.check_agreement(self.agreed_facts())
            self.broadcast_modules()
            self.norm_sync = NormalizerSync(running_norms(self.policy), self.dist)
            rnd = self.algorithm.rnd
            if rnd is not None:
                self.rnd_norm_sync = NormalizerSync(running_norms(rnd.module), self.dist)
            self._env_takes_reduce = "reduce" in inspect.signature(self.env.end_iteration).parameters
            self._rank_means = [name for name in self.algorithm.statistics() if name not in RANK_SHARED]
            """Statistics averaged over ranks (the others, the skip count and the learning rate, are equal on all)."""
            self._shared = torch.zeros(len(self._rank_means) + 2, dtype=torch.float64, device=self.device)
            """Per-iteration all-reduce: summed statistics, any rank's non-finite flag, any rank's stop request."""
            self.transfer.register("ranks", lambda: self._shared)

        self.obs: dict[str, torch.Tensor]
        """The env's current observations."""
        self.reset_env()
        self.iteration = 0
        self.env_steps = 0
        """Env steps of all ranks."""
        self._iterations_run = 0
        """Iterations this runner has run (not counting those of a checkpoint it resumed)."""
        self.last_saved: Path | None = None
        """The run's newest checkpoint: `latest.pt` once this runner saved, else the one it resumed, if any."""
        self.resumed_from: Path | None = None
        """The checkpoint this run continues (`syncfree.train.session.resume`): a run folder of its own starts with
        that run's metrics up to it."""
        self.stop_requested = False
        """Set from a signal handler: the loop finishes the current iteration, saves, and returns (with several
        processes: once any rank asked, all stop after the same iteration)."""
        self._stop_agreed = False
        self._callback_stopped = False
        """The last `learn` ended because a callback asked (the next `learn` trains on)."""
        self._lost_records = 0
        """Records that could not be written (a full disk)."""
        self.logger: RunLogger | None = None
        """Opened when training starts, where it knows whether the run continues a checkpoint."""
        self.wandb_id = cfg.log.wandb_id
        """The W&B run this run logs to (`log.wandb_id`, else the resumed checkpoint's, else W&B's new one)."""

    def learn(self, until: int | None = None) -> dict[str, Any]:
        """Train until iteration `until` (by default `cfg.iterations`, the run's length, which the linear
        learning-rate schedule and the prioritized sampler anneal over: a run trained in parts passes `until`);
        returns the last iteration's record."""
        cfg, record = self.cfg, {}
        until = cfg.iterations if until is None else until
        if self._callback_stopped:  # a callback ended the last call; training asked for again goes on
            self.stop_requested = self._stop_agreed = self._callback_stopped = False
        set_deterministic(cfg.perf.deterministic)  # a process-wide setting: other runners may have changed it
        self.open_logger()
        progress = Progress(cfg.log, self.iteration, until, show=self.is_main)
        if self.compiles_first_iteration() and self.iteration < until:
            progress.compiling()  # the first iteration of a compiled loop: graphs are built
        try:
            while self.iteration < until and not self.stopping():
                record = self.iterate()
                progress.update(record)
                stop = self.callbacks.after_iteration(self, record) if self.is_main else None
                if stop is not None:
                    log.info("iteration %d: stopping: %s", self.iteration, stop)
                    self.stop_requested = self._callback_stopped = True
                last = self.iteration == until or self.stopping()
                if self.iteration % cfg.save_every == 0 or last:
                    self.save(last)
        finally:
            progress.close()
        return record

    def iterate(self) -> dict[str, Any]:
        """One iteration: rollout, advantages, update, the one host transfer; returns its record (logged when a
        logger is open). `learn` runs these until the run's end and saves; the rsl_rl-shaped runner
        (`syncfree.rsl_rl`) runs them on its own schedule."""
        algorithm, start = self.algorithm, time.perf_counter()
        algorithm.begin_rollout()
        with torch.inference_mode():
            for t in range(algorithm.steps_per_env):
                self.rollout_step(t)
            if self.norm_sync is not None:
                self.norm_sync.merge()
            algorithm.compute_returns(self.obs)
        self.end_env_iteration()
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

    def switch_scope(self) -> Scope:
        """Where this run stands for the perf switches (`PerfConfig.inert_switches` says which change nothing)."""
        return switch_scope(self.cfg, self.device, self.world_size, env_layer=isinstance(self.env, ManagerBasedEnv),
                            env_switches=self.env.env_switches, policy=self.policy)

    def agreed_facts(self) -> dict[str, Any]:
        """What every rank must share: the config (flattened), the policy's tensor shapes and dtypes, the env's
        observation shapes, action spec and count."""
        facts: dict[str, Any] = {f"config.{k}": v for k, v in flatten(to_dict(self.cfg)).items()}
        facts.update({f"policy.{name}": (tuple(t.shape), str(t.dtype)) for name, t in self.policy.state_dict().items()})
        facts["env.obs_shapes"] = {k: tuple(v) for k, v in self.env.obs_shapes.items()}
        facts["env.action_spec"] = (self.env.action_spec.kind, self.env.action_spec.size)
        facts["env.num_envs"] = self.env.num_envs
        return facts

    def execution(self) -> str:
        """Where and how this run computes, resolved: device, threads and why, compile mode, precision."""
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''} ({self.threads_reason})"
        chosen = f" ({self.compile_choice.reason})" if self.compile_choice.reason else ""
        return f"{self.device}, {threads}, perf.compile={self.cfg.perf.compile}{chosen}, {self.precision}"

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

    def end_env_iteration(self) -> None:
        if self._env_takes_reduce:
            self.env.end_iteration(reduce=self.reduce_env_statistics)
        else:
            self.env.end_iteration()

    def reduce_env_statistics(self, tensor: torch.Tensor) -> torch.Tensor:
        """Passed to `VecEnv.end_iteration` with several processes: sums `tensor` over ranks in place."""
        assert self.dist is not None  # passed only with several processes
        return self.dist.all_reduce(tensor, "env statistics (VecEnv.end_iteration)")

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
        first_bad = self.monitors.nonfinite.end_iteration(host.get("nonfinite"))
        where = f"rank {self.rank}: " if self.dist is not None else ""
        if first_bad is not None:
            step, envs = first_bad
            shown = ", ".join(map(str, envs[:8])) + (f", ... ({len(envs)} envs)" if len(envs) > 8 else "")
            raise NonFiniteError(f"{where}iteration {self.iteration}: non-finite observation or reward from env ids "
                                 f"[{shown}] at rollout step {step}; stopped; {self.kept()}")
        if shared is not None and shared[len(names)] > 0:
            raise NonFiniteError(f"{where}iteration {self.iteration}: another rank's envs produced a non-finite "
                                 f"observation or reward (its error names them); stopped; {self.kept()}")
        self.check_divergence(stats, where)
        episodes = self.monitors.episodes
        episodes.end_iteration(host.get("episodes"))
        record: dict[str, Any] = {"iteration": self.iteration, "env_steps": self.env_steps,
                                  "steps_per_s": self.steps_per_iteration / seconds, "iteration_seconds": seconds,
                                  "episodes": len(episodes.iteration_episodes), **episodes.summary()}
        record.update({name.removeprefix("env/"): float(value) for name, value in host.items()
                       if name.startswith("env/") and not math.isnan(value)})  # NaN: no sample this iteration
        record.update(stats)
        record["skipped_steps"], record["longest_skip_run"] = int(stats["skipped_steps"]), int(stats["longest_skip_run"])
        del record["non_finite_parameters"]  # 0 whenever a record is written
        if self.is_main:
            record.update(self.callbacks.evaluations(self, self.iteration))
        if self.logger is not None:
            self.log_record(record)
        return record

    def log_record(self, record: dict[str, Any]) -> None:
        """Append the record to the run's metrics; a run folder that disappeared stops the run in one line, a
        write that fails (disk full) is a warning and training goes on (the checkpoint is tried as usual)."""
        assert self.logger is not None
        folder = self.logger.path.parent
        if not folder.is_dir():
            raise UserError(f"run folder {folder} disappeared during iteration {self.iteration}; stopped (nothing "
                            "can be saved there)")
        try:
            self.logger.log(record)
        except OSError as e:
            self._lost_records += 1
            if self._lost_records == 1:
                log.warning("iteration %d: metrics not written to %s (%s); training goes on, checkpoints are still "
                            "tried", self.iteration, self.logger.path, e.strerror or e)

    def check_divergence(self, stats: dict[str, float], where: str) -> None:
        """Stop, before the iteration is saved, when the algorithm says the run diverged (`Algorithm.divergence`)."""
        reason = self.algorithm.divergence(stats)
        if reason is not None:
            raise NonFiniteError(f"{where}iteration {self.iteration}: {reason}; stopped; {self.kept()}")

    # -- checkpoints -------------------------------------------------------------------------------------

    def kept(self) -> str:
        """What a run that stops on bad output keeps: its newest checkpoint, or that it has none."""
        return f"last good checkpoint {self.last_saved}" if self.last_saved else "no checkpoint written yet"

    def state_dict(self) -> dict[str, Any]:
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
            "policy": self.policy.state_dict(),
            "ppo": self.algorithm.state_dict(),
            "env": self.env.state_dict() if self.env.saveable else None,
            "obs": {k: v.clone() for k, v in self.obs.items()},
            "episodes": self.monitors.episodes.state_dict(),
            "rng": checkpoint.rng_state(),
            "wandb_id": self.wandb_id,
            "callbacks": self.callbacks.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], source: str = "checkpoint", resume: bool = True) -> None:
        """Load a checkpoint. `resume`: training continues from it, so each process must have as many envs as the
        one that wrote it had (False when only the policy is wanted, as in evaluation); the process count may
        differ (the trainer state is every rank's; rank 0 continues the saved envs, the others start new ones).

        With several processes every rank reads the same file: trainer state (policy, optimizer, learning rate,
        iteration) on all ranks, env state, last observations and RNG states (rank 0's, as saved) on rank 0 only;
        the other ranks' envs start new episodes and their RNGs are reseeded from (seed, rank, iteration). Envs
        that cannot be saved (MettaGrid, Gymnasium, Isaac Lab) start new episodes; everything else continues
        exactly."""
        if resume:
            saved = state.get("world_size", 1)
            if isinstance(saved, int) and saved != self.world_size and self.is_main:
                log.info("%s: written by %d process%s, resumed by %d: the trainer state (policy, optimizer, learning "
                         "rate, iteration, env steps) continues, rank 0 continues the saved envs and the other ranks "
                         "start new episodes; an iteration now collects %d x %s", source, saved,
                         "es" if saved != 1 else "", self.world_size, self.world_size,
                         self.cfg.env.describe(self.env.num_envs))
            if state.get("num_envs") != self.env.num_envs:
                raise UserError(f"{source}: written with {state.get('num_envs')} env rows but this run has "
                                f"{self.cfg.env.describe(self.env.num_envs)} (env.num_envs={self.cfg.env.num_envs}); "
                                "resume with the same")
        check_compatible(state, self, source)
        if self.env.saveable:
            self.env.check_state_dict(state.get("env"))
        check_checkpoint(state, self.state_dict(), source, self.algorithm.optim.params)
        try:
            self.policy.load_state_dict(state["policy"])
        except RuntimeError as e:
            lines = str(e).strip().splitlines()
            detail = lines[1].strip() if len(lines) > 1 else lines[0]
            raise UserError(f"{source}: policy does not fit this config ({detail})") from None
        self.algorithm.load_state_dict(state["ppo"])
        self.iteration, self.env_steps = state["iteration"], state["env_steps"]
        if resume and not self.cfg.log.wandb_id:
            self.wandb_id = state.get("wandb_id") or ""  # the same W&B run continues
        if resume:
            self.callbacks.load_state_dict(state.get("callbacks"))
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

    def open_logger(self) -> None:
        """Start the metrics of this run (rank 0, with a run folder): a fresh run refuses a folder that holds
        another run; a resumed run drops the records past its checkpoint's iteration. Writes the run's config as
        `config.yaml` (a resume, with the options it overrides)."""
        if self.run_dir is None or self.logger is not None:
            return
        if self.iteration == 0:
            checkpoint.check_run_dir_unused(self.run_dir)
        source = self.resumed_from.parent / "metrics.jsonl" if self.resumed_from is not None else None
        if source is not None and source.resolve() != (self.run_dir / "metrics.jsonl").resolve():
            copy_records(source, self.run_dir / "metrics.jsonl", self.iteration)
        checkpoint.write_config(to_dict(self.cfg), self.run_dir, resolved=self.execution())
        log_cfg = self.cfg.log
        wandb = WandbRun(log_cfg.wandb_project, log_cfg.wandb_entity, log_cfg.wandb_group,
                         self.wandb_id) if log_cfg.wandb else None
        self.logger = RunLogger(self.run_dir, log_cfg.tensorboard, wandb, to_dict(self.cfg),
                                start_iteration=self.iteration, start_env_steps=self.env_steps)
        self.wandb_id = self.logger.wandb_id or self.wandb_id

    def save(self, last: bool = True) -> Path | None:
        """Write this iteration's checkpoint (rank 0, with a run folder). A write that fails (disk full, no
        permission) keeps the previous checkpoint and, unless it is the run's `last` save, lets training go on
        with a warning; the last save failing is an error naming the newest checkpoint that exists."""
        if self.run_dir is None:
            return None
        try:
            checkpoint.save_run(self.state_dict(), self.run_dir, self.iteration)
            self.last_saved = self.run_dir / "latest.pt"
        except OSError as e:
            reason = f"cannot write {e.filename or self.run_dir} ({e.strerror or e})"
            kept = f"newest checkpoint {self.last_saved}" if self.last_saved else "no checkpoint written by this run"
            if last:
                raise UserError(f"iteration {self.iteration}: checkpoint not saved: {reason}; {kept}") from None
            log.warning("iteration %d: checkpoint not saved: %s; %s; training goes on", self.iteration, reason, kept)
        return self.last_saved

    def abandon(self) -> None:
        """Close a runner that will not train (a checkpoint it was to resume was refused): the folder it created is
        removed again, as when building it fails."""
        self.close()
        if self._created is not None and self.run_dir is not None:
            checkpoint.remove_unused(self.run_dir, self._created)

    def close(self) -> None:
        self.callbacks.close()
        if self.logger is not None:
            self.logger.close()
        if self._lock is not None:
            self._lock.release()
        if self._owns_env:  # an env passed in stays its owner's to close
            self.env.close()


def check_compatible(state: dict[str, Any], runner: Runner, source: str) -> None:
    """A checkpoint must match the task's observation and action shapes and the env count, and have been trained by
    the run's algorithm with the settings its weights mean something under (`Algorithm.check_resumable`)."""
    env = runner.env
    expected = {"task": runner.cfg.task, "obs_dims": runner.algorithm.obs_dims(env),
                "action_spec": (env.action_spec.kind, env.action_spec.size), "num_envs": env.num_envs}
    for key, value in expected.items():
        got = state.get(key)
        if isinstance(got, list):
            got = tuple(got)
        if got != value:
            raise UserError(f"{source}: {key} is {got!r} but this run has {value!r}")
    trained_by = stored_algorithm(state["config"])
    if trained_by != runner.cfg.algorithm:
        raise UserError(f"{source}: trained by {trained_by} but this run trains by {runner.cfg.algorithm} "
                        "(--algorithm); a resumed run keeps its algorithm, whose optimizer state the checkpoint holds")
    runner.algorithm.check_resumable(state["config"], runner.cfg, source)
