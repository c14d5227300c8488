"""`syncfree bench`: configurations of the perf switches timed side by side, counted, and set against a compute floor.

Timing rules: warm-up first; configurations interleaved (A B C A B C ...) for several repeats, with the same
seeds; medians, extremes and per-repeat ratios reported. Counts (host syncs, ops, allocations) come from a
separate, untimed iteration: a dispatch mode slows everything it watches.

Sizes are `env.num_envs`; steps are env rows (a multi-agent task's agents) x the rollout's steps per iteration.
The result names both as the task's env section does (`EnvConfig.NOUNS`, under `envs`, with its one-line
`summary`), so the report speaks of simulations and agents where the task does. A task whose spec reports its
env's own speed (`TaskSpec.env_only`) has it at every size.

Ablation rows are run only for switches that act at the bench's sizes (`syncfree.bench.matrix`); the report lists
the rows left out and why.

The parts: `config` (profiles, sizes), `matrix` (the configurations), `timing` (seconds and counts of a runner's
iterations), `floor` (the compute floor), `envs` (env-only loops), `report` (JSON, markdown, plots); this module
runs them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import statistics
import time
from typing import Any

import torch
from tqdm import tqdm

from syncfree.bench.config import BenchConfig, train_config
from syncfree.bench.floor import Floor
from syncfree.bench.hardware import compute_dtype, hardware_fraction, measure_peaks
from syncfree.bench.matrix import bench_configurations, skipped_rows
from syncfree.bench.timing import (
    count_iteration,
    summarize,
    tensor_bytes,
    time_iterations,
    time_phases,
    warm_up,
)
from syncfree.config import EnvConfig
from syncfree.core.device import resolve_device
from syncfree.core.memory import live_bytes, peak_resident_bytes
from syncfree.core.switches import PerfConfig
from syncfree.tasks import get_task
from syncfree.train.runner import Runner


def interleave(runners: dict[str, Runner], floor: Floor, bench: BenchConfig,
               progress: tqdm | None = None) -> tuple[dict[str, list[float]], dict[str, float], int]:
    """Seconds per iteration of every runner, repeat by repeat (A B C ... A B C ...), and the median floor.

    Each measurement runs enough iterations to last `min_seconds` (at least `iterations`), judged from the
    optimized runner's speed so every configuration runs the same count.
    """
    per_iteration = time_iterations(runners["optimized"], 1)
    iterations = max(bench.iterations, math.ceil(bench.min_seconds / per_iteration))
    times: dict[str, list[float]] = {name: [] for name in runners}
    floors = []
    for _ in range(bench.repeats):
        for name, runner in runners.items():
            times[name].append(time_iterations(runner, iterations))
            if progress is not None:
                progress.update(1)
        floors.append(floor.measure())
    floor_median = {key: statistics.median(f[key] for f in floors) for key in floors[0]}
    return times, floor_median, iterations


def bench_size(bench: BenchConfig, num_envs: int, configs: list[tuple[str, PerfConfig]],
               progress: tqdm, peaks: dict[str, float]) -> dict[str, Any]:
    """Every configuration at one size: interleaved timing, counts, phases, memory, floor, and the fraction of the
    device's matrix-product peak (`peaks`, GFLOP/s by dtype) each reaches."""
    runners: dict[str, Runner] = {}
    memory: dict[str, dict[str, float]] = {}
    warmup_seconds: dict[str, float] = {}
    """Untimed warm-up iterations, compile time included (graphs another configuration compiled are reused), until
    one has trained."""
    for name, perf in configs:
        cfg = train_config(bench, num_envs, perf)
        if cfg.device != "cpu" and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        runner = Runner(cfg)
        started = time.perf_counter()
        warm_up(runner, bench.warmup)
        warmup_seconds[name] = time.perf_counter() - started
        runners[name] = runner
        memory[name] = {"tensor_bytes": tensor_bytes(runner), "bytes_per_env": tensor_bytes(runner) / num_envs,
                        "bytes_per_row": tensor_bytes(runner) / runner.env.num_envs}
        if runner.device.type == "cuda":
            memory[name]["cuda_max_allocated"] = torch.cuda.max_memory_allocated(runner.device)
        progress.update(1)
    floor = Floor(bench, num_envs)
    live_after_warmup = live_bytes(runners["optimized"].device)
    times, floor_time, iterations = interleave(runners, floor, bench, progress)
    live_after_timing = live_bytes(runners["optimized"].device)
    first = next(iter(runners.values()))
    steps_per_iteration = first.algorithm.steps_per_env * first.env.num_envs
    optimized = runners["optimized"]
    flops = optimized.algorithm.flops_per_env_step(optimized.obs)
    rows = {}
    for name, runner in runners.items():
        row = summarize(times[name], times["baseline"], steps_per_iteration)
        row["efficiency"] = floor_time["total"] / statistics.median(times[name])
        row["hardware_fraction"] = hardware_fraction(row["steps_per_s"]["median"], sum(flops.values()), peaks,
                                                     compute_dtype(runner))
        # optimizer steps (PPO's minibatches of every epoch, a student's chunks, an off-policy learner's updates) per
        # second of the timed iterations
        row["gradient_steps_per_s"] = runner.algorithm.minibatches_per_update / statistics.median(times[name])
        row["counts"] = count_iteration(runner)
        row["phase_seconds"] = time_phases(runner)
        row["memory"] = memory[name]
        row["warmup_seconds"] = warmup_seconds[name]
        rows[name] = row
        progress.update(1)
    out = {"num_envs": num_envs, "num_rows": first.env.num_envs, "steps_per_iteration": steps_per_iteration,
           "floor_seconds": floor_time, "iterations_per_measurement": iterations,
           "live_bytes": {"after_warmup": live_after_warmup, "after_timing": live_after_timing,
                          "timed_iterations_per_config": bench.repeats * iterations},
           "floor_steps_per_s": steps_per_iteration / floor_time["total"], "flops_per_step": flops,
           "configs": rows}
    env_only = get_task(bench.task).env_only
    if env_only is not None:
        out["env_only"] = env_only(runners["optimized"].cfg, num_envs, bench.repeats)  # the adapter as it trains
    return out


def bench_scaling(bench: BenchConfig, progress: tqdm) -> list[dict[str, Any]]:
    """Steps/s of baseline and optimized, and the floor, against the number of envs."""
    points = []
    for num_envs in bench.scaling:
        runners = {name: Runner(train_config(bench, num_envs, perf))
                    for name, perf in bench_configurations(dataclasses.replace(bench, ablations=False, rows=[]))}
        for runner in runners.values():
            warm_up(runner, bench.warmup)
        times, floor_time, _ = interleave(runners, Floor(bench, num_envs), bench)
        optimized = runners["optimized"]
        steps = optimized.algorithm.steps_per_env * optimized.env.num_envs
        point: dict[str, Any] = {"num_envs": num_envs, "num_rows": optimized.env.num_envs,
                                 "floor_steps_per_s": steps / floor_time["total"]}
        for name, ts in times.items():
            median = statistics.median(ts)
            point[name] = {"steps_per_s": steps / median, "efficiency": floor_time["total"] / median}
        env_only = get_task(bench.task).env_only
        if env_only is not None:
            point["env_only"] = env_only(optimized.cfg, num_envs, bench.repeats)
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
    peaks = measure_peaks(resolve_device(bench.device))
    sizes = [bench_size(bench, n, configs, progress, peaks) for n in bench.num_envs]
    scaling = bench_scaling(bench, progress)
    progress.close()
    device = str(resolve_device(bench.device))
    cfg = train_config(bench, bench.num_envs[0], PerfConfig())
    return {
        "bench": dataclasses.asdict(bench),
        "machine": machine_info(device),
        "algorithm": cfg.algorithm,
        "envs": env_words(cfg.env),
        "train": cfg.algorithm_settings(),
        "iteration": cfg.describe_iteration(),
        "sizes": sizes,
        "scaling": scaling,
        "skipped_rows": skipped_rows(bench),
        "matmul_peak_gflops": peaks,
        "peak_rss_bytes": peak_resident_bytes(),
        "wall_seconds": time.time() - started,
        "notes": "Counts see eager code only (a dispatch mode stops dynamo from compiling what it watches): a "
                 "compiled configuration is counted with its hot functions run eagerly.",
    }


def env_words(env: EnvConfig) -> dict[str, str]:
    """What the report calls the task's envs and rows, and their settings in one line: the task's env section says
    (`EnvConfig.NOUNS`, `EnvConfig.summary`), so the report needs to know no task."""
    return {**dataclasses.asdict(env.NOUNS), "summary": env.summary()}


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
