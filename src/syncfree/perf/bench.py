"""`syncfree bench`: configurations of the perf switches timed side by side, counted, and set against a compute floor.

Timing rules: warm-up first; configurations interleaved (A B C A B C ...) for several repeats, with the same
seeds; medians, extremes and per-repeat ratios reported. Counts (host syncs, ops, allocations) come from a
separate, untimed iteration: a dispatch mode slows everything it watches.

Tasks with a recurrent policy (grid-arena) run the recurrent trainer (`syncfree.train.sequence`): sizes count
MettaGrid simulations (as `env.num_envs` does), steps are agent steps (simulations x `env.grid.agents_per_env`
x `ppo.steps_per_env` per iteration), the ablation rows cover only the switches that trainer reads
(`syncfree.train.sequence.SWITCHES_READ`), everything runs eagerly, and each size also reports MettaGrid's own
env-only speed and the adapter's at the same settings.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
from tqdm import tqdm

from syncfree.config import PerfConfig, TrainConfig, preset
from syncfree.envs import make_env
from syncfree.errors import UserError
from syncfree.perf.memory import live_bytes, peak_resident_bytes
from syncfree.perf.phases import ALL_PHASES, ROLLOUT_PHASES, UPDATE_PHASES, PhaseCounter, PhaseTimer
from syncfree.train import compiled
from syncfree.train.trainer import Trainer, make_trainer, resolve_device, set_deterministic

if TYPE_CHECKING:
    from syncfree.envs.adapters.mettagrid import MettaGridSpec
    from syncfree.train.sequence import SequenceTrainer

Profile = Literal["quick", "full", "gpu-smoke"]

PROFILES: dict[str, dict[str, Any]] = {
    "quick": dict(num_envs=[64, 1024], scaling=[], ablations=False, repeats=3, iterations=2),
    "full": dict(num_envs=[64, 4096], scaling=[16, 64, 256, 1024, 4096, 16384], ablations=True, repeats=3,
                 iterations=2),
    "gpu-smoke": dict(num_envs=[1024, 4096], scaling=[], ablations=False, repeats=3, iterations=3),
}
"""The profiles' defaults for the feed-forward tasks (sizes in envs)."""
RECURRENT_PROFILES: dict[str, dict[str, Any]] = {
    "quick": dict(num_envs=[16, 64], scaling=[], ablations=False, repeats=3, iterations=1),
    "full": dict(num_envs=[16, 256], scaling=[4, 16, 64, 256], ablations=True, repeats=3, iterations=1),
    "gpu-smoke": dict(num_envs=[64, 256], scaling=[], ablations=False, repeats=3, iterations=1),
}
"""The profiles' defaults for the recurrent tasks (grid-arena; sizes in MettaGrid simulations)."""


@dataclass
class BenchConfig:
    """What to measure. Sizes and steps default to the task's preset and the profile.

    Profile defaults (`num_envs`; `scaling`; ablations; repeats x iterations):

    - feed-forward tasks, sizes in envs: quick [64, 1024]; none; off; 3 x 2. full [64, 4096]; [16, 64, 256, 1024,
      4096, 16384]; on; 3 x 2. gpu-smoke [1024, 4096]; none; off; 3 x 3.
    - grid-arena (recurrent trainer), sizes in MettaGrid simulations of `env.grid.agents_per_env` agents each (the
      preset's 4: 64 to 1024 agents), where one iteration of 256 simulations takes tens of seconds on one CPU
      thread: quick [16, 64]; none; off; 3 x 1. full [16, 256]; [4, 16, 64, 256]; on; 3 x 1. gpu-smoke [64, 256];
      none; off; 3 x 1 (MettaGrid steps on the CPU whatever the device). All its configurations run eagerly
      (`compile` is set to false: the recurrent trainer does not compile).
    """

    task: str = "point-mass"
    backend: str = ""
    """g1-track's physics backend (`env.backend`: torch, mujoco, mujoco-warp; empty: the task's default)."""
    profile: Profile = "quick"
    num_envs: list[int] = field(default_factory=list)
    """Sizes for the configuration comparison (empty: the profile's)."""
    scaling: list[int] = field(default_factory=list)
    """Sizes for the scaling sweep (empty: the profile's; the quick and gpu-smoke profiles have none)."""
    ablations: bool | None = None
    """Leave-one-out and add-one-in rows for every switch (default: only in the full profile); for grid-arena, for
    every switch the recurrent trainer reads (`syncfree.train.sequence.SWITCHES_READ`)."""
    add_one_in: bool = True
    """With ablations: the add-one-in rows too (false: leave-one-out only, half the trainers and memory)."""
    rows: list[str] = field(default_factory=list)
    """Only these configurations, by their names in the report (e.g. `optimized - autocast`, `baseline +
    compile`); `baseline` and `optimized` always run. Empty: all of them."""
    repeats: int = 0
    """Interleaved repeats (0: the profile's)."""
    iterations: int = 0
    """Timed training iterations per configuration and repeat (0: the profile's)."""
    warmup: int = 1
    """Untimed iterations per configuration before the first repeat."""
    min_seconds: float = 1.0
    """Each measurement runs at least this long (more iterations at small sizes, where one is short)."""
    device: str = "auto"
    threads: int = 0
    """torch intra-op threads (0: leave torch's default)."""
    compile: bool = True
    """False: every configuration runs eagerly and the `compile` rows are left out (no compile time to wait
    for; for checking the bench itself)."""
    seed: int = 0

    def resolved(self) -> BenchConfig:
        recurrent = is_recurrent(self.task)
        defaults = (RECURRENT_PROFILES if recurrent else PROFILES)[self.profile]
        out = dataclasses.replace(self)
        for key, value in defaults.items():
            if getattr(out, key) in (None, 0, []):
                setattr(out, key, value)
        if recurrent:
            out.compile = False
        return out


def is_recurrent(task: str) -> bool:
    """Whether the task trains a recurrent policy (with `SequenceTrainer`; grid-arena)."""
    return preset(task).policy.kind == "recurrent"


def bench_configurations(bench: BenchConfig) -> list[tuple[str, PerfConfig]]:
    """The task's configurations: for a recurrent task, ablation rows only for the switches its trainer reads;
    with `bench.rows`, only those rows (and baseline and optimized)."""
    if is_recurrent(bench.task):
        from syncfree.train.sequence import SWITCHES_READ

        configs = configurations(bench.ablations or bool(bench.rows), bench.add_one_in, compile=False,
                                 switches=SWITCHES_READ)
    else:
        configs = configurations(bench.ablations or bool(bench.rows), bench.add_one_in, bench.compile)
    if not bench.rows:
        return configs
    names = [name for name, _ in configs]
    unknown = [row for row in bench.rows if row not in names]
    if unknown:
        raise UserError(f"bench: rows={unknown} unknown; allowed: {', '.join(names)}")
    return [(name, perf) for name, perf in configs if name in ("baseline", "optimized", *bench.rows)]


def configurations(ablations: bool, add_one_in: bool = True, compile: bool = True,
                   switches: Sequence[str] | None = None) -> list[tuple[str, PerfConfig]]:
    """baseline, optimized, and per switch: optimized without it (leave-one-out), baseline with it (add-one-in).
    `compile=False`: all eager, without the compile rows. `switches`: ablation rows for these switches only
    (None: every switch)."""
    if not compile:
        return [(name, dataclasses.replace(perf, compile="off"))
                for name, perf in configurations(ablations, add_one_in, switches=switches)
                if not name.endswith(" compile") and "compile=" not in name]
    configs = [("baseline", PerfConfig.preset("baseline")), ("optimized", PerfConfig.preset("optimized"))]
    # a process-wide switch (e.g. retain_host_memory) is on for every trainer once one turned it on: rows in one
    # process cannot compare its values (benchmarks/host_memory.py does, in separate processes)
    ablated = [f for f in PerfConfig.switches()
               if (switches is None or f.name in switches) and not f.metadata["process_wide"]]
    if ablations:
        for f in ablated:
            changes = {f.name: f.metadata["baseline"]}
            needing = [g.name for g in PerfConfig.switches()  # switches that cannot run without this one
                       if g.metadata["requires"].get(f.name, f.metadata["baseline"]) != f.metadata["baseline"]]
            changes.update({name: PerfConfig.switches_by_name()[name].metadata["baseline"] for name in needing})
            also = f" (and {', '.join(needing)})" if needing else ""
            configs.append((f"optimized - {f.name}{also}", dataclasses.replace(PerfConfig(), **changes)))
        for f in ablated:
            configs.extend((f"optimized, {f.name}={value}", dataclasses.replace(PerfConfig(), **{f.name: value}))
                           for value in f.metadata["variants"])
        for f in ablated if add_one_in else ():  # with the values it needs (e.g. compile)
            configs.append((f"baseline + {f.name}", dataclasses.replace(
                PerfConfig.preset("baseline"), **{f.name: f.metadata["optimized"], **f.metadata["requires"]})))
    return configs


def train_config(bench: BenchConfig, num_envs: int, perf: PerfConfig) -> TrainConfig:
    cfg = preset(bench.task)
    cfg.env.num_envs, cfg.perf, cfg.seed, cfg.device = num_envs, perf, bench.seed, bench.device
    cfg.env.backend = bench.backend
    cfg.log.progress = False
    batch = num_envs * cfg.ppo.steps_per_env
    if cfg.policy.kind == "recurrent":  # minibatches of whole BPTT segments
        batch = num_envs * cfg.env.grid.agents_per_env * (cfg.ppo.steps_per_env // cfg.ppo.bptt_horizon)
    while batch % cfg.ppo.num_minibatches:
        cfg.ppo.num_minibatches -= 1
    return cfg


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_iterations(trainer: Trainer | SequenceTrainer, iterations: int) -> float:
    """Seconds per training iteration, the per-iteration host transfer and bookkeeping included."""
    trainer.cfg.iterations = trainer.iteration + iterations
    sync(trainer.device)
    start = time.perf_counter()
    trainer.learn()
    sync(trainer.device)
    return (time.perf_counter() - start) / iterations


class Floor:
    """The compute floor of one iteration: env-only, policy-forward-only and update-only loops at the same sizes,
    with the optimized kernels (compiled ones unless the bench runs eagerly), on a trainer of its own (its rollout
    storage filled by one real iteration)."""

    def __init__(self, bench: BenchConfig, num_envs: int) -> None:
        self.trainer = Trainer(train_config(bench, num_envs, PerfConfig(compile=PerfConfig().compile if bench.compile
                                                                        else "off")))
        time_iterations(self.trainer, 1)
        steps, policy, obs = self.trainer.cfg.ppo.steps_per_env, self.trainer.policy, self.trainer.obs
        self.act = compiled.hot(policy.act, self.trainer.cfg.perf, self.trainer.device)
        """The policy's act as the trainer runs it (one compiled graph with compile on)."""
        with torch.inference_mode():
            self.obs = {k: v.clone() for k, v in obs.items()}
            self.actions = torch.stack([self.act(self.obs["policy"], self.obs["critic"]).actions
                                        for _ in range(steps)])

    def measure(self) -> dict[str, float]:
        trainer, steps = self.trainer, self.trainer.cfg.ppo.steps_per_env
        set_deterministic(trainer.cfg.perf.deterministic)  # process-wide: the last trainer timed may have set it

        def policy_loop() -> None:
            with torch.inference_mode():
                for _ in range(steps):
                    self.act(self.obs["policy"], self.obs["critic"])

        return floor_seconds(trainer.device, lambda: env_loop(trainer.env, self.actions), policy_loop,
                             lambda: trainer.ppo.update(trainer.storage))


class SequenceFloor:
    """The compute floor of one recurrent-trainer iteration: env-only (the env stepped with actions the policy
    drew beforehand), policy-forward-only (`policy.step` on the trainer's observations, recurrent state, done
    flags and, if the policy reads them, last actions) and update-only (`update()` on the buffer one real
    iteration filled) loops at the same sizes, with the optimized switches, on a trainer of its own."""

    def __init__(self, bench: BenchConfig, num_envs: int) -> None:
        self.trainer: SequenceTrainer = make_trainer(train_config(bench, num_envs, PerfConfig(compile="off")))
        trainer = self.trainer
        time_iterations(trainer, 1)
        everyone = slice(0, trainer.env.num_envs)
        with torch.inference_mode():
            self.obs, self.done = trainer.obs.clone(), trainer.done.clone()
            self.state = type(trainer.state)(*(s.clone() for s in trainer.state))
            self.last_actions = (trainer.buffer.previous_actions(everyone).clone()
                                 if "last_actions" in trainer.buffer.data else None)
            actions, state = [], self.state
            for _ in range(trainer.cfg.ppo.steps_per_env):
                out, state = trainer.policy.step(self.obs, state, self.done, self.last_actions)
                actions.append(out.actions)
            self.actions = torch.stack(actions)

    def measure(self) -> dict[str, float]:
        trainer, steps = self.trainer, self.trainer.cfg.ppo.steps_per_env
        set_deterministic(trainer.cfg.perf.deterministic)

        def policy_loop() -> None:
            with torch.inference_mode():
                state = self.state
                for _ in range(steps):
                    _, state = trainer.policy.step(self.obs, state, self.done, self.last_actions)

        return floor_seconds(trainer.device, lambda: env_loop(trainer.env, self.actions), policy_loop, trainer.update)


def env_loop(env: Any, actions: torch.Tensor) -> None:
    """The env alone, stepped with actions drawn beforehand (one per step)."""
    with torch.inference_mode():
        for step_actions in actions:
            env.step(step_actions)


def floor_seconds(device: torch.device, env_loop: Callable[[], Any], policy_loop: Callable[[], Any],
                  update: Callable[[], Any]) -> dict[str, float]:
    def timed(fn: Callable[[], Any]) -> float:
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - start

    result = {"env": timed(env_loop), "policy_forward": timed(policy_loop), "update": timed(update)}
    result["total"] = sum(result.values())
    return result


def make_floor(bench: BenchConfig, num_envs: int) -> Floor | SequenceFloor:
    """The floor for the task's trainer."""
    return SequenceFloor(bench, num_envs) if is_recurrent(bench.task) else Floor(bench, num_envs)


def grid_spec(cfg: TrainConfig) -> MettaGridSpec:
    """The MettaGrid simulation `cfg` trains on (as the grid-arena task builds it)."""
    from syncfree.envs.adapters.mettagrid import MettaGridSpec

    g = cfg.env.grid
    return MettaGridSpec(g.map, agents_per_env=g.agents_per_env, width=g.width, height=g.height,
                         max_steps=cfg.env.max_episode_length or g.max_steps, mines=g.mines)


def env_only(bench: BenchConfig, num_envs: int, repeats: int) -> dict[str, Any]:
    """Agent steps per second of stepping `num_envs` simulations with random actions drawn beforehand, without
    training: MettaGrid alone (`mettagrid_raw_throughput`) and through the adapter (`env_only_throughput`),
    alternated `repeats` times (median, min, max)."""
    from syncfree.envs.adapters.mettagrid import env_only_throughput, mettagrid_raw_throughput

    cfg = train_config(bench, num_envs, PerfConfig(compile="off"))
    spec = grid_spec(cfg)
    env = make_env(cfg.task, num_envs, resolve_device(cfg.device), cfg.seed, cfg.env.max_episode_length,
                   grid=cfg.env.grid)
    raw, adapter = [], []
    try:
        with torch.inference_mode():
            for _ in range(max(repeats, 1)):
                raw.append(mettagrid_raw_throughput(spec, num_envs, seed=cfg.seed))
                adapter.append(env_only_throughput(env, seed=cfg.seed))
    finally:
        env.close()

    def stats(xs: list[float]) -> dict[str, float]:
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    return {"mettagrid_raw_steps_per_s": stats(raw), "adapter_steps_per_s": stats(adapter),
            "num_agents": num_envs * spec.agents_per_env, "runs": len(raw)}


def interleave(trainers: dict[str, Trainer | SequenceTrainer], floor: Floor | SequenceFloor, bench: BenchConfig,
               progress: tqdm | None = None) -> tuple[dict[str, list[float]], dict[str, float], int]:
    """Seconds per iteration of every trainer, repeat by repeat (A B C ... A B C ...), and the median floor.

    Each measurement runs enough iterations to last `min_seconds` (at least `iterations`), judged from the
    optimized trainer's speed so every configuration runs the same count.
    """
    per_iteration = time_iterations(trainers["optimized"], 1)
    iterations = max(bench.iterations, math.ceil(bench.min_seconds / per_iteration))
    times: dict[str, list[float]] = {name: [] for name in trainers}
    floors = []
    for _ in range(bench.repeats):
        for name, trainer in trainers.items():
            times[name].append(time_iterations(trainer, iterations))
            if progress is not None:
                progress.update(1)
        floors.append(floor.measure())
    floor_median = {key: statistics.median(f[key] for f in floors) for key in floors[0]}
    return times, floor_median, iterations


def count_iteration(trainer: Trainer | SequenceTrainer) -> dict[str, Any]:
    """Host syncs, ops and allocations of one iteration, per phase, per rollout step and per minibatch."""
    recorder = PhaseCounter()
    with trainer.phases.attached(recorder):
        time_iterations(trainer, 1)
    cfg = trainer.cfg.ppo
    per = {"step": cfg.steps_per_env, "minibatch": cfg.num_epochs * cfg.num_minibatches}
    phases = {name: {"syncs": c.syncs, "ops": c.num_ops, "allocations": c.allocations,
                     "allocated_bytes": c.allocated_bytes} for name, c in recorder.counts.items()}

    def total(names: tuple[str, ...], key: str) -> int:
        return sum(phases.get(n, {}).get(key, 0) for n in names)

    out: dict[str, Any] = {"phases": phases}
    for unit, names in (("step", ROLLOUT_PHASES), ("minibatch", UPDATE_PHASES)):
        for key in ("syncs", "ops", "allocations"):
            out[f"{key}_per_{unit}"] = total(names, key) / per[unit]
    out["trainer_ops_per_step"] = total(tuple(p for p in ROLLOUT_PHASES if p != "env"), "ops") / per["step"]
    for key in ("syncs", "ops", "allocations"):
        out[f"{key}_per_iteration"] = total(ALL_PHASES, key)
    return out


def time_phases(trainer: Trainer | SequenceTrainer) -> dict[str, float]:
    recorder = PhaseTimer(trainer.device)
    with trainer.phases.attached(recorder):
        time_iterations(trainer, 1)
    return recorder.seconds()


def tensor_bytes(trainer: Trainer | SequenceTrainer) -> int:
    """Bytes held by the rollout storage (the recurrent trainer's segment buffer with its state snapshots,
    advantages and returns, and the agents' recurrent states), env state, policy and optimizer state."""
    buffer = getattr(trainer, "buffer", None)
    if buffer is not None:
        tensors = list(getattr(buffer, "_data", buffer.data).values())
        tensors += [*getattr(buffer, "_states", buffer.states), buffer.advantages, buffer.last_actions,
                    trainer.returns, *trainer.state]
    else:
        tensors = list(trainer.storage.state_tensors().values())
    tensors += list(trainer.policy.state_dict().values())
    tensors += [v for v in trainer.env.state_dict().values() if isinstance(v, torch.Tensor)]
    for state in trainer.ppo.optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def summarize(times: list[float], baseline: list[float], steps_per_iteration: int) -> dict[str, Any]:
    sps = [steps_per_iteration / t for t in times]
    ratios = [b / t for t, b in zip(times, baseline, strict=True)]
    return {"seconds_per_iteration": times, "steps_per_s": {"median": statistics.median(sps), "min": min(sps),
                                                             "max": max(sps)},
            "ratio_to_baseline": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}}


def bench_size(bench: BenchConfig, num_envs: int, configs: list[tuple[str, PerfConfig]],
               progress: tqdm) -> dict[str, Any]:
    """Every configuration at one size: interleaved timing, counts, phases, memory, floor."""
    trainers: dict[str, Trainer | SequenceTrainer] = {}
    memory: dict[str, dict[str, float]] = {}
    warmup_seconds: dict[str, float] = {}
    """Untimed warm-up iterations, compile time included (graphs another configuration compiled are reused)."""
    for name, perf in configs:
        cfg = train_config(bench, num_envs, perf)
        if cfg.device != "cpu" and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        trainer = make_trainer(cfg)
        started = time.perf_counter()
        time_iterations(trainer, bench.warmup)
        warmup_seconds[name] = time.perf_counter() - started
        trainers[name] = trainer
        memory[name] = {"tensor_bytes": tensor_bytes(trainer), "bytes_per_env": tensor_bytes(trainer) / num_envs}
        if trainer.env.num_envs != num_envs:  # agents of multi-agent simulations
            memory[name]["bytes_per_agent"] = tensor_bytes(trainer) / trainer.env.num_envs
        if trainer.device.type == "cuda":
            memory[name]["cuda_max_allocated"] = torch.cuda.max_memory_allocated(trainer.device)
        progress.update(1)
    floor = make_floor(bench, num_envs)
    live_after_warmup = live_bytes(trainers["optimized"].device)
    times, floor_time, iterations = interleave(trainers, floor, bench, progress)
    live_after_timing = live_bytes(trainers["optimized"].device)
    first = next(iter(trainers.values()))
    steps_per_iteration = first.cfg.ppo.steps_per_env * first.env.num_envs
    rows = {}
    for name, trainer in trainers.items():
        row = summarize(times[name], times["baseline"], steps_per_iteration)
        row["efficiency"] = floor_time["total"] / statistics.median(times[name])
        row["counts"] = count_iteration(trainer)
        row["phase_seconds"] = time_phases(trainer)
        row["memory"] = memory[name]
        row["warmup_seconds"] = warmup_seconds[name]
        rows[name] = row
        progress.update(1)
    out = {"num_envs": num_envs, "steps_per_iteration": steps_per_iteration, "floor_seconds": floor_time,
           "iterations_per_measurement": iterations,
           "live_bytes": {"after_warmup": live_after_warmup, "after_timing": live_after_timing,
                          "timed_iterations_per_config": bench.repeats * iterations},
           "floor_steps_per_s": steps_per_iteration / floor_time["total"], "configs": rows}
    if is_recurrent(bench.task):
        out["num_agents"] = first.env.num_envs
        out["env_only"] = env_only(bench, num_envs, bench.repeats)
    return out


def bench_scaling(bench: BenchConfig, progress: tqdm) -> list[dict[str, Any]]:
    """Steps/s of baseline and optimized, and the floor, against the number of envs."""
    points = []
    for num_envs in bench.scaling:
        trainers = {name: make_trainer(train_config(bench, num_envs, perf))
                    for name, perf in bench_configurations(dataclasses.replace(bench, ablations=False, rows=[]))}
        for trainer in trainers.values():
            time_iterations(trainer, bench.warmup)
        times, floor_time, _ = interleave(trainers, make_floor(bench, num_envs), bench)
        optimized = trainers["optimized"]
        steps = optimized.cfg.ppo.steps_per_env * optimized.env.num_envs
        point = {"num_envs": num_envs, "floor_steps_per_s": steps / floor_time["total"]}
        for name, ts in times.items():
            median = statistics.median(ts)
            point[name] = {"steps_per_s": steps / median, "efficiency": floor_time["total"] / median}
        if is_recurrent(bench.task):
            point["num_agents"] = optimized.env.num_envs
            point["env_only"] = env_only(bench, num_envs, bench.repeats)
        points.append(point)
        progress.update(1)
    return points


def run(bench: BenchConfig) -> dict[str, Any]:
    bench = bench.resolved()
    if bench.threads:
        torch.set_num_threads(bench.threads)
    configs = bench_configurations(bench)
    per_size = 2 * len(configs) + bench.repeats * len(configs)
    progress = tqdm(total=per_size * len(bench.num_envs) + len(bench.scaling), unit="step", desc="bench",
                    dynamic_ncols=True)
    started = time.time()
    sizes = [bench_size(bench, n, configs, progress) for n in bench.num_envs]
    scaling = bench_scaling(bench, progress)
    progress.close()
    device = str(resolve_device(bench.device))
    cfg = train_config(bench, bench.num_envs[0], PerfConfig())
    out = {
        "bench": dataclasses.asdict(bench),
        "machine": machine_info(device),
        "train": dataclasses.asdict(cfg.ppo),
        "sizes": sizes,
        "scaling": scaling,
        "peak_rss_bytes": peak_resident_bytes(),
        "wall_seconds": time.time() - started,
        "notes": "Counts see eager code only (a dispatch mode stops dynamo from compiling what it watches): a "
                 "compiled configuration is counted with its hot functions run eagerly.",
    }
    if is_recurrent(bench.task):
        from syncfree.train.sequence import SWITCHES_READ

        out["recurrent"] = {"agents_per_env": cfg.env.grid.agents_per_env, "grid": dataclasses.asdict(cfg.env.grid),
                            "switches_read": list(SWITCHES_READ)}
    return out


def machine_info(device: str) -> dict[str, Any]:
    """What the figures were measured on."""
    info = {"device": device, "torch": torch.__version__, "python": platform.python_version(),
            "processor": _cpu_model(), "cpu_count": len(os.sched_getaffinity(0)),
            "torch_threads": torch.get_num_threads()}
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
