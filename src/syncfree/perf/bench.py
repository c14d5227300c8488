"""`syncfree bench`: configurations of the perf switches timed side by side, counted, and set against a compute floor.

Timing rules: warm-up first; configurations interleaved (A B C A B C ...) for several repeats, with the same
seeds; medians, extremes and per-repeat ratios reported. Counts (host syncs, ops, allocations) come from a
separate, untimed iteration: a dispatch mode slows everything it watches.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from tqdm import tqdm

from syncfree.config import PerfConfig, TrainConfig, preset
from syncfree.perf.memory import live_bytes, peak_resident_bytes
from syncfree.perf.phases import ALL_PHASES, ROLLOUT_PHASES, UPDATE_PHASES, PhaseCounter, PhaseTimer
from syncfree.train import compiled
from syncfree.train.trainer import Trainer, resolve_device

Profile = Literal["quick", "full", "gpu-smoke"]


@dataclass
class BenchConfig:
    """What to measure. Sizes and steps default to the task's preset and the profile."""

    task: str = "point-mass"
    backend: str = ""
    """g1-track's physics backend (`env.backend`: torch, mujoco, mujoco-warp; empty: the task's default)."""
    profile: Profile = "quick"
    num_envs: list[int] = field(default_factory=list)
    """Sizes for the configuration comparison (empty: the profile's)."""
    scaling: list[int] = field(default_factory=list)
    """Sizes for the scaling sweep (empty: the profile's; the quick and gpu-smoke profiles have none)."""
    ablations: bool | None = None
    """Leave-one-out and add-one-in rows for every switch (default: only in the full profile)."""
    add_one_in: bool = True
    """With ablations: the add-one-in rows too (false: leave-one-out only, half the trainers and memory)."""
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
        defaults = {
            "quick": dict(num_envs=[64, 1024], scaling=[], ablations=False, repeats=3, iterations=2),
            "full": dict(num_envs=[64, 4096], scaling=[16, 64, 256, 1024, 4096, 16384], ablations=True, repeats=3,
                         iterations=2),
            "gpu-smoke": dict(num_envs=[1024, 4096], scaling=[], ablations=False, repeats=3, iterations=3),
        }[self.profile]
        out = dataclasses.replace(self)
        for key, value in defaults.items():
            if getattr(out, key) in (None, 0, []):
                setattr(out, key, value)
        return out


def configurations(ablations: bool, add_one_in: bool = True, compile: bool = True) -> list[tuple[str, PerfConfig]]:
    """baseline, optimized, and per switch: optimized without it (leave-one-out), baseline with it (add-one-in).
    `compile=False`: all eager, without the compile rows."""
    if not compile:
        return [(name, dataclasses.replace(perf, compile="off"))
                for name, perf in configurations(ablations, add_one_in) if not name.endswith(" compile")]
    configs = [("baseline", PerfConfig.preset("baseline")), ("optimized", PerfConfig.preset("optimized"))]
    if ablations:
        for f in PerfConfig.switches():
            changes = {f.name: f.metadata["baseline"]}
            needing = [g.name for g in PerfConfig.switches()  # switches that cannot run without this one
                       if g.metadata["requires"].get(f.name, f.metadata["baseline"]) != f.metadata["baseline"]]
            changes.update({name: PerfConfig.switches_by_name()[name].metadata["baseline"] for name in needing})
            also = f" (and {', '.join(needing)})" if needing else ""
            configs.append((f"optimized - {f.name}{also}", dataclasses.replace(PerfConfig(), **changes)))
        for f in PerfConfig.switches() if add_one_in else ():  # with the values it needs (e.g. compile)
            configs.append((f"baseline + {f.name}", dataclasses.replace(
                PerfConfig.preset("baseline"), **{f.name: f.metadata["optimized"], **f.metadata["requires"]})))
    return configs


def train_config(bench: BenchConfig, num_envs: int, perf: PerfConfig) -> TrainConfig:
    cfg = preset(bench.task)
    cfg.env.num_envs, cfg.perf, cfg.seed, cfg.device = num_envs, perf, bench.seed, bench.device
    cfg.env.backend = bench.backend
    cfg.log.progress = False
    batch = num_envs * cfg.ppo.steps_per_env
    while batch % cfg.ppo.num_minibatches:
        cfg.ppo.num_minibatches -= 1
    return cfg


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_iterations(trainer: Trainer, iterations: int) -> float:
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
        self.trainer = Trainer(train_config(bench, num_envs, PerfConfig(compile="hot" if bench.compile else "off")))
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

        def env_loop() -> None:
            with torch.inference_mode():
                for t in range(steps):
                    trainer.env.step(self.actions[t])

        def policy_loop() -> None:
            with torch.inference_mode():
                for _ in range(steps):
                    self.act(self.obs["policy"], self.obs["critic"])

        def timed(fn: Callable[[], None]) -> float:
            sync(trainer.device)
            start = time.perf_counter()
            fn()
            sync(trainer.device)
            return time.perf_counter() - start

        result = {"env": timed(env_loop), "policy_forward": timed(policy_loop),
                  "update": timed(lambda: trainer.ppo.update(trainer.storage))}
        result["total"] = sum(result.values())
        return result


def interleave(trainers: dict[str, Trainer], floor: Floor, bench: BenchConfig,
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


def count_iteration(trainer: Trainer) -> dict[str, Any]:
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


def time_phases(trainer: Trainer) -> dict[str, float]:
    recorder = PhaseTimer(trainer.device)
    with trainer.phases.attached(recorder):
        time_iterations(trainer, 1)
    return recorder.seconds()


def tensor_bytes(trainer: Trainer) -> int:
    """Bytes held by the rollout storage, env state, policy and optimizer state."""
    tensors = list(trainer.storage.state_tensors().values()) + list(trainer.policy.state_dict().values())
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
    trainers: dict[str, Trainer] = {}
    memory: dict[str, dict[str, float]] = {}
    warmup_seconds: dict[str, float] = {}
    """Untimed warm-up iterations, compile time included (graphs another configuration compiled are reused)."""
    for name, perf in configs:
        cfg = train_config(bench, num_envs, perf)
        if cfg.device != "cpu" and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        trainer = Trainer(cfg)
        started = time.perf_counter()
        time_iterations(trainer, bench.warmup)
        warmup_seconds[name] = time.perf_counter() - started
        trainers[name] = trainer
        memory[name] = {"tensor_bytes": tensor_bytes(trainer), "bytes_per_env": tensor_bytes(trainer) / num_envs}
        if trainer.device.type == "cuda":
            memory[name]["cuda_max_allocated"] = torch.cuda.max_memory_allocated(trainer.device)
        progress.update(1)
    floor = Floor(bench, num_envs)
    live_after_warmup = live_bytes(trainers["optimized"].device)
    times, floor_time, iterations = interleave(trainers, floor, bench, progress)
    live_after_timing = live_bytes(trainers["optimized"].device)
    steps_per_iteration = next(iter(trainers.values())).cfg.ppo.steps_per_env * num_envs
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
    return {"num_envs": num_envs, "steps_per_iteration": steps_per_iteration, "floor_seconds": floor_time,
            "iterations_per_measurement": iterations,
            "live_bytes": {"after_warmup": live_after_warmup, "after_timing": live_after_timing,
                           "timed_iterations_per_config": bench.repeats * iterations},
            "floor_steps_per_s": steps_per_iteration / floor_time["total"], "configs": rows}


def bench_scaling(bench: BenchConfig, progress: tqdm) -> list[dict[str, Any]]:
    """Steps/s of baseline and optimized, and the floor, against the number of envs."""
    points = []
    for num_envs in bench.scaling:
        trainers = {name: Trainer(train_config(bench, num_envs, perf))
                    for name, perf in configurations(False, compile=bench.compile)}
        for trainer in trainers.values():
            time_iterations(trainer, bench.warmup)
        times, floor_time, _ = interleave(trainers, Floor(bench, num_envs), bench)
        steps = trainers["optimized"].cfg.ppo.steps_per_env * num_envs
        point = {"num_envs": num_envs, "floor_steps_per_s": steps / floor_time["total"]}
        for name, ts in times.items():
            median = statistics.median(ts)
            point[name] = {"steps_per_s": steps / median, "efficiency": floor_time["total"] / median}
        points.append(point)
        progress.update(1)
    return points


def run(bench: BenchConfig) -> dict[str, Any]:
    bench = bench.resolved()
    if bench.threads:
        torch.set_num_threads(bench.threads)
    configs = configurations(bench.ablations, bench.add_one_in, bench.compile)
    per_size = 2 * len(configs) + bench.repeats * len(configs)
    progress = tqdm(total=per_size * len(bench.num_envs) + len(bench.scaling), unit="step", desc="bench",
                    dynamic_ncols=True)
    started = time.time()
    sizes = [bench_size(bench, n, configs, progress) for n in bench.num_envs]
    scaling = bench_scaling(bench, progress)
    progress.close()
    device = str(resolve_device(bench.device))
    return {
        "bench": dataclasses.asdict(bench),
        "machine": machine_info(device),
        "train": dataclasses.asdict(train_config(bench, bench.num_envs[0], PerfConfig()).ppo),
        "sizes": sizes,
        "scaling": scaling,
        "peak_rss_bytes": peak_resident_bytes(),
        "wall_seconds": time.time() - started,
        "notes": "Counts see eager code only (a dispatch mode stops dynamo from compiling what it watches): a "
                 "compiled configuration is counted with its hot functions run eagerly.",
    }


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
