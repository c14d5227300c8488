"""The run's settings: `TrainConfig` (task, algorithm, seed, device, iterations, where it writes) and the sections
every run has (env, log, perf, distributed, callbacks). An algorithm's own sections (PPO's `policy`, `ppo`, `rnd`,
`symmetry`, ...) are declared by its config type, a subclass of `TrainConfig` beside the algorithm
(`syncfree.algo.configs`)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from syncfree.core.switches import PerfConfig
from syncfree.errors import check


@dataclass(frozen=True)
class EnvNouns:
    """What reports call a task's envs (counted: `16 simulations`) and the env rows the trainer acts for (`agent
    steps`, `64 agents`)."""

    envs: str = "envs"
    row: str = "env"
    rows: str = "envs"


@dataclass
class EnvConfig:
    """The environments: how many. A task whose envs read options has its own section type, a subclass of this one
    (`syncfree.tasks`), so each task's `env` section holds just what its envs read."""

    NOUNS: ClassVar[EnvNouns] = EnvNouns()
    """What reports call one env and one env row; a task whose envs hold several rows each names both (grid-arena:
    a simulation, an agent)."""

    num_envs: int = 256
    """Parallel environments per process: under torchrun each rank steps its own `num_envs` envs, so an
    iteration collects `world_size x num_envs x ppo.steps_per_env` env steps."""

    def rows(self) -> int:
        """Env rows the trainer acts for: one per env (a multi-agent task: one per agent)."""
        return self.num_envs

    def row_name(self) -> str:
        """What one env row is, in a word."""
        return self.NOUNS.row

    def describe(self, rows: int) -> str:
        """`rows` env rows in words, for the start-up line and `syncfree eval`."""
        return f"{rows} {self.NOUNS.rows}"

    def summary(self) -> str:
        """The envs' settings in one line, for a report's header (grid-arena's: `mines map, 8 x 8, 4 agents each,
        64-step episodes`); empty: nothing to say beside their count."""
        return ""

    def validate(self) -> None:
        check(self.num_envs >= 1, "env.num_envs", "an integer >= 1", self.num_envs)


@dataclass
class TimeLimitEnvConfig(EnvConfig):
    """Envs whose time limit a run may change (the classic tasks, g1-track)."""

    max_episode_length: int = 0
    """Time limit in env steps; 0 keeps the task's own (500 for CartPole, 200 for Pendulum, 500 for g1-track)."""
    random_start: bool = False
    """Training starts each env's first episode at a random step of its time limit (rsl_rl's
    `init_at_random_ep_len`), so that the envs' episodes do not all end in the same step: where few episodes end
    early, a rollout would otherwise hold the same part of every episode, and the next another. As in Isaac Lab,
    the first episodes' reported lengths (and g1-track's per-step tracking metrics, divided by them) count from the
    drawn step. Evaluation starts every episode at step 0."""

    def validate(self) -> None:
        super().validate()
        check(self.max_episode_length >= 0, "env.max_episode_length", "an integer >= 0", self.max_episode_length)


RUN_NAME_BYTES = 255
"""The longest file name most file systems take."""


@dataclass
class LogConfig:
    """Where a run writes (metrics, checkpoints, config) and what it logs to."""

    dir: str = "runs"
    """Root folder; each run writes `<dir>/<run_name>/` (metrics.jsonl, checkpoints, config)."""
    run_name: str = ""
    """Run folder name; empty means `<task>-<timestamp>`."""
    tensorboard: bool = False
    """Also write TensorBoard event files."""
    wandb: bool = False
    """Also log to Weights & Biases (needs the `wandb` extra; `WANDB_MODE=offline` logs to files)."""
    wandb_project: str = "syncfree"
    """W&B project."""
    wandb_entity: str = ""
    """W&B entity (user or team); empty: W&B's default for the logged-in user."""
    wandb_group: str = ""
    """W&B group (e.g. one per sweep, or the seeds of one config); empty: none."""
    wandb_id: str = ""
    """W&B run id; empty: a new one. The id is saved with the checkpoints, so a resumed run continues the same
    W&B run."""
    progress: bool = True
    """Report progress on stderr while training (see `progress_style`)."""
    progress_style: Literal["auto", "bar", "lines"] = "auto"
    """`bar`: a progress bar; `lines`: one line every `progress_every` iterations (iteration, env steps, the
    learning figure, steps/s, time left), which reads well in a log file; `auto`: a bar on a terminal, lines when
    stderr is a file or a pipe."""
    progress_every: int = 0
    """With line output, one line every this many iterations (and the first and the last); 0: about 20 lines a
    run."""


STOP_CONDITION = re.compile(r"\s*([A-Za-z_][\w/.]*)\s*(>=|<=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*")
"""`callbacks.stop_when`: `<metric> <op> <number>`."""


@dataclass
class CallbackConfig:
    """What happens between iterations, outside the hot loop: evaluation, the best checkpoint, early stopping (rank 0
    decides; with several processes all ranks stop one iteration later)."""

    eval_every: int = 0
    """Evaluate the policy every this many iterations (0: never) on `eval_envs` fresh envs of the task, each's first
    episode with the most likely actions; the record (metrics.jsonl, TensorBoard) gets `eval_return` and
    `eval_return_std`. Random draws of training are not touched: a run with evaluations trains bit for bit as one
    without."""
    eval_envs: int = 16
    """Envs per evaluation (a multi-agent task: simulations, every agent's first episode)."""
    eval_seed: int = 12345
    """The evaluation envs' seed (the same envs each time, so evaluations compare)."""
    save_best: str = ""
    """A record metric (e.g. `eval_return`, `mean_return`): `best.pt` in the run folder is written whenever it
    reaches a new high; empty: no best checkpoint."""
    stop_when: str = ""
    """`<metric> <op> <number>` (op `>=`, `<=`, `>` or `<`; e.g. `eval_return >= 450`): stop, saving, after the first
    iteration whose record meets it; empty: never."""
    patience: int = 0
    """Stop, saving, when the `save_best` metric has not reached a new high in this many of the records that report
    it (0: never)."""

    def validate(self) -> None:
        check(self.eval_every >= 0, "callbacks.eval_every", "an integer >= 0 (0: never)", self.eval_every)
        check(self.eval_envs >= 1, "callbacks.eval_envs", "an integer >= 1", self.eval_envs)
        check(self.stop_when == "" or STOP_CONDITION.fullmatch(self.stop_when) is not None, "callbacks.stop_when",
              "'<metric> <op> <number>' with op one of >=, <=, >, < (e.g. 'eval_return >= 450')", self.stop_when)
        check(self.patience >= 0, "callbacks.patience", "an integer >= 0 (0: never)", self.patience)
        check(self.patience == 0 or self.save_best != "", "callbacks.patience",
              "0 unless callbacks.save_best names the metric it watches", self.patience)
        condition = self.stop_condition()
        for key, metric in (("callbacks.save_best", self.save_best), ("callbacks.stop_when", condition and condition[0])):
            check(not (isinstance(metric, str) and metric.startswith("eval_")) or self.eval_every > 0, key,
                  f"a metric the records have ({metric} comes only with callbacks.eval_every > 0)",
                  self.save_best if key == "callbacks.save_best" else self.stop_when)

    def stop_condition(self) -> tuple[str, str, float] | None:
        """`stop_when` as (metric, op, value), or None."""
        match = STOP_CONDITION.fullmatch(self.stop_when)
        return (match.group(1), match.group(2), float(match.group(3))) if match else None


@dataclass
class DistributedConfig:
    """Multi-process training (`torchrun --nproc_per_node=N -m syncfree train ...`); inert in a single process."""

    timeout: float = 120.0
    """Seconds a collective waits for the other ranks before it fails: a rank that died or hangs makes the others
    stop with an error naming the lost peer instead of waiting forever."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """Process-group backend; `auto`: NCCL when training on CUDA (each rank on `cuda:LOCAL_RANK`), gloo on CPU."""


@dataclass
class TrainConfig:
    """A run: the task, the algorithm that trains it, and the settings every run has. The algorithm's own sections
    come with its config type, a subclass (`syncfree.algo.configs`); `syncfree train --algorithm NAME --help` lists
    them."""

    ALGORITHM: ClassVar[str] = ""
    """The algorithm this config type is the settings of (its `algorithm` field's value)."""

    task: str = "cartpole"
    """Task name (see `syncfree tasks`)."""
    algorithm: str = ""
    """The algorithm that trains the task (`ppo`, `recurrent-ppo`, `distillation`, `recurrent-distillation`, ...);
    the task's preset names its own. The sections after `callbacks` are this algorithm's settings."""
    seed: int = 0
    """Seeds torch, numpy, Python and the environment."""
    device: str = "auto"
    """`cpu`, `cuda`, `cuda:N`, or `auto` (CUDA when available)."""
    threads: int = 0
    """torch intra-op threads of this process; 0 chooses: `OMP_NUM_THREADS` or a count the program set with
    `torch.set_num_threads` are kept; else 1 when several processes or a simulator's own threads share the cores,
    or on the CPU with fewer than 1,024 envs (more threads do not pay there and stall on a busy machine); else
    torch's default (the core count). The start-up line says which."""
    iterations: int = 100
    """Training iterations (rollout + update)."""
    save_every: int = 50
    """Checkpoint every K iterations (and always at the end)."""
    resume: str = ""
    """Checkpoint to continue from; the run continues exactly where it stopped, in a new run folder beside the
    resumed run's (a checkpoint kept alone: in `runs/`; `log.dir` chooses another) named `log.run_name`, else
    `<its run>-resumed-<time>`, that starts with its metrics up to the checkpoint."""
    resume_in_place: bool = False
    """With `resume`: write on in the checkpoint's own folder (its metrics past the checkpoint are dropped; refused
    while another process trains there), e.g. a job that requeues itself with the same `--resume`."""
    env: EnvConfig = field(default_factory=EnvConfig)
    log: LogConfig = field(default_factory=LogConfig)
    perf: PerfConfig = field(default_factory=PerfConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    callbacks: CallbackConfig = field(default_factory=CallbackConfig)

    def __post_init__(self) -> None:
        if not self.algorithm:
            self.algorithm = self.ALGORITHM

    def algorithm_settings(self) -> dict[str, Any]:
        """The algorithm's own sections as plain data (what a report shows of how the run trains)."""
        run = {f.name for f in dataclasses.fields(TrainConfig)}
        return {f.name: dataclasses.asdict(getattr(self, f.name)) for f in dataclasses.fields(self)
                if f.name not in run}

    def rollout_steps(self) -> int:
        """Rollout steps per env and iteration (the algorithm's setting)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how long its rollout is")

    def describe_iteration(self) -> str:
        """An iteration in words (`24 steps per env, 5 epochs x 4 minibatches`), for reports."""
        return f"{self.rollout_steps()} steps per {self.env.row_name()}"

    def learn_at_once(self) -> tuple[int, str]:
        """Make the run update from its first iteration on (for `syncfree doctor train`, whose counted iteration
        must take its update) and return the iterations that must run before one does, with a note on what was
        changed ("" when nothing was)."""
        return 1, ""

    def iterations_before_learning(self) -> int:
        """Iterations a fresh run takes before its first update (an off-policy learner's random steps and the
        filling of its buffer; 0 where every iteration updates): the compile warm-up `perf.compile=auto` weighs pays
        back over the iterations after them."""
        return 0

    def fit_to_rollout(self) -> None:
        """Lower the settings that must divide the rollout (a minibatch count, a chunk length) until they do, for a
        run at another env count than the preset's (the bench's sizes)."""

    def unused_settings(self, defaults: TrainConfig | None = None) -> list[tuple[str, str]]:
        """Settings of a feature that is off, set away from `defaults` (the task's preset; else the config type's
        own): (`key=value`, why it changes nothing). A user who set `rnd.weight` without `rnd.enabled` is told
        rather than left to wonder. The run-level settings have none; an algorithm's config type adds its own."""
        return []

    def validate(self) -> None:
        """Reject values that parse but make no sense, naming the key (the task name is checked by
        `syncfree.tasks.check_task`, the algorithm's name by `syncfree.algo.algorithm_for`)."""
        for key, value in _numbers(self):
            check(math.isfinite(value), key, "a finite number", value)
        check(self.algorithm == self.ALGORITHM, "algorithm",
              f"{self.ALGORITHM or 'an algorithm'} (this config holds {self.ALGORITHM or 'no'} algorithm's settings; "
              "choose the algorithm with --algorithm, which gives its settings)", self.algorithm)
        check(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"), "device",
              "auto, cpu, cuda, cuda:N", self.device)
        check(self.iterations >= 0, "iterations", "an integer >= 0", self.iterations)
        check(self.threads >= 0, "threads", "an integer >= 0 (0: chosen)", self.threads)
        check(self.save_every >= 1, "save_every", "an integer >= 1", self.save_every)
        check(bool(self.resume) or not self.resume_in_place, "resume_in_place", "false unless resume names a checkpoint",
              self.resume_in_place)
        self.env.validate()
        name = self.log.run_name
        check(name == "" or (name not in (".", "..") and not any(c in name for c in "/\\\0")
                             and len(name.encode()) <= RUN_NAME_BYTES), "log.run_name",
              f"one folder name inside log.dir (no '/', not '.' or '..', at most {RUN_NAME_BYTES} bytes)",
              name if len(name) <= 80 else f"{name[:40]}...{name[-20:]} ({len(name.encode())} bytes)")
        check(self.log.progress_style in ("auto", "bar", "lines"), "log.progress_style", "auto, bar, lines",
              self.log.progress_style)
        check(self.log.progress_every >= 0, "log.progress_every", "an integer >= 0 (0: about 20 lines a run)",
              self.log.progress_every)
        self.callbacks.validate()
        check(self.distributed.timeout > 0, "distributed.timeout", "a number of seconds > 0", self.distributed.timeout)
        check(self.distributed.backend in ("auto", "nccl", "gloo"), "distributed.backend", "auto, nccl, gloo",
              self.distributed.backend)
        _validate_perf(self.perf)


def validate(cfg: TrainConfigT) -> TrainConfigT:
    """`cfg.validate()`, returning `cfg`."""
    cfg.validate()
    return cfg


TrainConfigT = TypeVar("TrainConfigT", bound=TrainConfig)


def _validate_perf(perf: PerfConfig) -> None:
    check(perf.compile in ("off", "auto", "hot", "step"), "perf.compile", "off, auto, hot, step", perf.compile)
    check(perf.autocast in ("off", "auto", "bf16"), "perf.autocast", "off, auto, bf16", perf.autocast)
    check(perf.cuda_graphs in ("off", "auto", "on"), "perf.cuda_graphs", "off, auto, on", perf.cuda_graphs)
    for f in PerfConfig.switches():
        seed_before, value = f.metadata["seed_before"], getattr(perf, f.name)
        if seed_before != f.metadata["baseline"]:  # a switch with the seed's before as a third value
            check(isinstance(value, bool) or value == seed_before, f"perf.{f.name}", f"true, false, {seed_before}",
                  value)
    check(perf.cuda_graphs != "on" or perf.compile != "off", "perf.cuda_graphs",
          "off or auto while perf.compile=off (CUDA graphs replay compiled graphs)", perf.cuda_graphs)
    for f in PerfConfig.switches():
        if getattr(perf, f.name) != f.metadata["baseline"]:
            for other, needed in f.metadata["requires"].items():
                check(getattr(perf, other) == needed, f"perf.{other}",
                      f"{str(needed).lower()} while perf.{f.name}={getattr(perf, f.name)}", getattr(perf, other))
    check(perf.critic_chunk_size >= 1, "perf.critic_chunk_size", "an integer >= 1", perf.critic_chunk_size)
    check(perf.physics_partitions >= 1, "perf.physics_partitions", "an integer >= 1", perf.physics_partitions)


def _numbers(section: Any, prefix: str = "") -> list[tuple[str, float]]:
    """Every float of a config (a value such as `1e400` parses to infinity)."""
    found = []
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            found += _numbers(value, f"{prefix}{f.name}.")
        elif isinstance(value, float):
            found.append((prefix + f.name, value))
    return found
