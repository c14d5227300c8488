"""Timing and counting one runner's iterations: seconds, phases, host syncs, ops, allocations, bytes held."""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

import torch

from syncfree.core.phases import ALL_PHASES, ROLLOUT_PHASES, UPDATE_PHASES, PhaseCounter, PhaseTimer
from syncfree.train.runner import Runner

log = logging.getLogger("syncfree")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_iterations(runner: Runner, iterations: int) -> float:
    """Seconds per training iteration, the per-iteration host transfer and bookkeeping included."""
    runner.cfg.iterations = runner.iteration + iterations
    sync(runner.device)
    start = time.perf_counter()
    runner.learn()
    sync(runner.device)
    return (time.perf_counter() - start) / iterations


def warm_up(runner: Runner, iterations: int) -> None:
    """`iterations` untimed iterations (compile included), then more until one has trained: an off-policy learner's
    first iterations only fill its buffer, and its update's graphs compile at its first gradient step."""
    if iterations == 0:
        return
    time_iterations(runner, iterations)
    if not runner.algorithm.updated():
        log.info("bench: no gradient step in %d warm-up iteration(s) (the replay buffer fills first); warming up "
                 "until one", iterations)
    while not runner.algorithm.updated():
        time_iterations(runner, 1)


def count_iteration(runner: Runner) -> dict[str, Any]:
    """Host syncs, ops, allocations and bytes allocated in one iteration, per phase, per rollout step and per
    minibatch."""
    recorder = PhaseCounter()
    with runner.phases.attached(recorder):
        time_iterations(runner, 1)
    per = {"step": runner.algorithm.steps_per_env, "minibatch": runner.algorithm.minibatches_per_update}
    phases = {name: {"syncs": c.syncs, "ops": c.num_ops, "allocations": c.allocations,
                     "allocated_bytes": c.allocated_bytes} for name, c in recorder.counts.items()}

    def total(names: tuple[str, ...], key: str) -> int:
        return sum(phases.get(n, {}).get(key, 0) for n in names)

    out: dict[str, Any] = {"phases": phases}
    for unit, names in (("step", ROLLOUT_PHASES), ("minibatch", UPDATE_PHASES)):
        for key in ("syncs", "ops", "allocations", "allocated_bytes"):
            out[f"{key}_per_{unit}"] = total(names, key) / per[unit]
    out["trainer_ops_per_step"] = total(tuple(p for p in ROLLOUT_PHASES if p != "env"), "ops") / per["step"]
    for key in ("syncs", "ops", "allocations", "allocated_bytes"):
        out[f"{key}_per_iteration"] = total(ALL_PHASES, key)
    return out


def time_phases(runner: Runner) -> dict[str, float]:
    recorder = PhaseTimer(runner.device)
    with runner.phases.attached(recorder):
        time_iterations(runner, 1)
    return recorder.seconds()


def tensor_bytes(runner: Runner) -> int:
    """Bytes held by the algorithm's rollout storage and per-row state (a recurrent policy's), the env state, the
    policy and its optimizers' state."""
    tensors = runner.algorithm.storage_tensors()
    tensors += list(runner.policy.state_dict().values())
    tensors += [v for v in runner.env.state_dict().values() if isinstance(v, torch.Tensor)]
    for optimizer in runner.algorithm.optimizers():
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def summarize(times: list[float], baseline: list[float], steps_per_iteration: int) -> dict[str, Any]:
    sps = [steps_per_iteration / t for t in times]
    ratios = [b / t for t, b in zip(times, baseline, strict=True)]
    return {"seconds_per_iteration": times, "steps_per_s": {"median": statistics.median(sps), "min": min(sps),
                                                             "max": max(sps)},
            "ratio_to_baseline": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}}
