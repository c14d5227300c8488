"""The adaptive learning rate inside each update: the rate every minibatch stepped at and the minibatch's KL.

    python benchmarks/lr_schedule_probe.py --task g1-track --num_envs 256 --iterations 40 \\
        --learning_rate 1e-3 --desired_kl 0.01 --kl_adapt_every minibatch

Trains the task's preset (eagerly, one thread) and records, per iteration, the learning rate each minibatch's
optimizer step used, each minibatch's KL to the rollout's policy, the rate after the update and the mean return.
Prints how often the rate after the update, and the rate of a minibatch step, sat at a bound of the schedule
(1e-5, 1e-2); writes the records to `--out` (JSON)."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from syncfree.algo.optim import MAX_LR, MIN_LR, PolicyOptimizer
from syncfree.tasks import preset
from syncfree.train.runner import Runner


def at_bound(lr: float) -> bool:
    return abs(lr - MIN_LR) <= 1e-12 or abs(lr - MAX_LR) <= 1e-12


def record_minibatch_steps(optim: PolicyOptimizer) -> tuple[list[float], list[float]]:
    """From now on, the learning rate each minibatch's optimizer step uses and that minibatch's KL (two lists the
    eager update path appends to: every minibatch's step goes through `optim.step`)."""
    used, kls = [], []
    step = optim.step

    def recording_step(kl_mean=None):
        kls.append(float(kl_mean))
        out = step(kl_mean)
        used.append(float(optim.lr) if optim.lr_on_device else optim.learning_rate)
        return out

    optim.step = recording_step
    return used, kls


def probe(args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(1)
    cfg = preset(args.task)
    cfg.seed, cfg.device, cfg.log.progress, cfg.perf.compile = args.seed, "cpu", False, "off"
    cfg.iterations = args.iterations
    cfg.env.num_envs = args.num_envs or cfg.env.num_envs
    cfg.ppo.schedule, cfg.ppo.kl_adapt_every = "adaptive", args.kl_adapt_every
    cfg.ppo.learning_rate = args.learning_rate or cfg.ppo.learning_rate
    cfg.ppo.desired_kl = args.desired_kl or cfg.ppo.desired_kl
    runner = Runner(cfg)
    used, kls = record_minibatch_steps(runner.algorithm.optim)
    rows = []
    for it in range(1, args.iterations + 1):
        used.clear()
        kls.clear()
        record = runner.learn(until=it)
        rows.append({"iteration": it, "minibatch_lr": list(used), "minibatch_kl": list(kls),
                     "lr_after_update": record["learning_rate"], "mean_return": record.get("mean_return")})
    runner.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="g1-track")
    parser.add_argument("--num_envs", type=int, default=0, help="0: the preset's")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--learning_rate", type=float, default=0.0, help="0: the preset's")
    parser.add_argument("--desired_kl", type=float, default=0.0, help="0: the preset's")
    parser.add_argument("--kl_adapt_every", choices=["minibatch", "update"], default="minibatch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = probe(args)
    steps = [lr for r in rows for lr in r["minibatch_lr"]]
    summary = {
        "args": vars(args),
        "updates_ending_at_a_bound": sum(at_bound(r["lr_after_update"]) for r in rows) / len(rows),
        "minibatch_steps_at_a_bound": sum(map(at_bound, steps)) / len(steps),
        "median_minibatch_lr": statistics.median(steps),
        "largest_minibatch_lr_after_the_first_update": max(max(r["minibatch_lr"]) for r in rows[1:]),
        "update_mean_kl_after_the_first": [min(statistics.fmean(r["minibatch_kl"]) for r in rows[1:]),
                                           max(statistics.fmean(r["minibatch_kl"]) for r in rows[1:])],
        "mean_return_last_10": statistics.fmean(r["mean_return"] for r in rows[-10:]),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"summary": summary, "iterations": rows}, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
