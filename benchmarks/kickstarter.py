"""Kickstarting on grid-arena: a student trained with a teacher checkpoint against one trained from scratch.

Trains a teacher with the grid-arena preset (or takes `--teacher`), measures its reward per agent per step, then
trains students from scratch and with the kickstarter losses (`losses.kickstarter`, `losses.kickstarter_value`,
PPO kept) on the same seeds, and reports the agent steps each needs to reach a fraction of the teacher's reward
(mean over a sliding window of rollouts). Writes `results.json`, `results.md` and a plot to `--out`:

    python benchmarks/kickstarter.py --seeds 0 1 --iterations 60
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from syncfree.algo.settings import LossesConfig
from syncfree.tasks import preset
from syncfree.train.runner import Runner


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teacher", default="", help="teacher checkpoint (default: train one with the preset)")
    p.add_argument("--teacher-iterations", type=int, default=100)
    p.add_argument("--iterations", type=int, default=60, help="student iterations (2,048 agent steps each)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--kickstarter", type=float, default=1.0, help="weight of the KL to the teacher")
    p.add_argument("--kickstarter-value", type=float, default=0.5, help="weight of the value regression")
    p.add_argument("--fraction", type=float, default=0.9, help="target: this fraction of the teacher's reward")
    p.add_argument("--window", type=int, default=3, help="rollouts averaged when testing the target")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/grid-arena-kickstarter-cpu")
    return p.parse_args()


def train(iterations: int, seed: int, losses: LossesConfig, run_dir: Path | None = None) -> list[float]:
    """Reward per agent per step of every rollout."""
    cfg = preset("grid-arena")
    cfg.seed, cfg.iterations, cfg.losses, cfg.log.progress = seed, iterations, losses, False
    trainer = Runner(cfg)
    rewards = []
    for it in range(1, iterations + 1):  # one iteration at a time, for the reward of every rollout
        rewards.append(trainer.learn(until=it)["reward_per_agent_step"])
    if run_dir is not None:  # the teacher: its checkpoint (latest.pt) and metrics
        trainer.run_dir = run_dir
        trainer.save()
        (run_dir / "rewards.json").write_text(json.dumps(rewards))
    trainer.close()
    return rewards


def teacher_level(path: str, simulations: int = 64, seed: int = 1234) -> float:
    """The teacher's reward per agent per step on fresh episodes (sampled actions, as in training): the mean
    return of every agent's first episode over the episode length."""
    from syncfree.algo import RecurrentPPO
    from syncfree.tasks import make_env
    from syncfree.train import checkpoint

    cfg = preset("grid-arena")
    env = make_env("grid-arena", simulations, "cpu", seed)
    returns = RecurrentPPO.evaluate(RecurrentPPO.load_teacher(path, env, checkpoint.read), env, greedy=False)
    env.close()
    return float(returns.mean()) / cfg.env.max_steps


def steps_to_reach(rewards: list[float], target: float, window: int, steps_per_iteration: int) -> int | None:
    """Agent steps until the mean of `window` consecutive rollouts first reaches `target` (None: never)."""
    smoothed = np.convolve(rewards, np.ones(window) / window, mode="valid")
    hits = np.flatnonzero(smoothed >= target)
    return None if len(hits) == 0 else int((hits[0] + window) * steps_per_iteration)


def main() -> None:
    args = parse()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = preset("grid-arena")
    per_iteration = cfg.env.num_envs * cfg.env.agents_per_env * cfg.ppo.steps_per_env
    started = time.perf_counter()
    teacher = args.teacher
    teacher_curve: list[float] = []
    if not teacher:
        teacher_curve = train(args.teacher_iterations, 100, LossesConfig(), run_dir=out / "teacher")
        teacher = str(out / "teacher" / "latest.pt")
        print(f"teacher: {args.teacher_iterations} iterations, last 10 rollouts "
              f"{np.mean(teacher_curve[-10:]):.3f} reward/agent/step", flush=True)
    level = teacher_level(teacher)
    print(f"teacher {teacher}: {level:.3f} reward/agent/step (sampled actions, fresh episodes)", flush=True)
    runs: dict[str, dict[int, list[float]]] = {"scratch": {}, "kickstarter": {}}
    losses = {"scratch": LossesConfig(),
              "kickstarter": LossesConfig(kickstarter=args.kickstarter, kickstarter_value=args.kickstarter_value,
                                          teacher=teacher)}
    for seed in args.seeds:
        for name in runs:
            runs[name][seed] = train(args.iterations, seed, losses[name])
            print(f"{name} seed {seed}: last 3 rollouts {np.mean(runs[name][seed][-3:]):.3f}", flush=True)
    target = args.fraction * level
    reach = {name: {seed: steps_to_reach(r, target, args.window, per_iteration) for seed, r in by_seed.items()}
             for name, by_seed in runs.items()}
    result = {"teacher": teacher, "teacher_reward": level, "target": target, "fraction": args.fraction,
              "window": args.window, "agent_steps_per_iteration": per_iteration, "iterations": args.iterations,
              "weights": {"kickstarter": args.kickstarter, "kickstarter_value": args.kickstarter_value},
              "teacher_curve": teacher_curve, "curves": runs, "agent_steps_to_target": reach,
              "torch_threads": args.threads, "wall_seconds": time.perf_counter() - started}
    (out / "results.json").write_text(json.dumps(result, indent=1))
    lines = ["# Kickstarting on grid-arena\n",
             f"Teacher: {(teacher_curve and f'{args.teacher_iterations} iterations of the preset') or teacher}, "
             f"reward per agent per step {level:.3f} (its sampled policy on fresh episodes of {64} simulations). Target: {args.fraction:.0%} "
             f"of it, {target:.3f}, as the mean of {args.window} consecutive rollouts. "
             f"{per_iteration} agent steps per iteration, {args.iterations} iterations per student.\n",
             "| seed | scratch: agent steps to target | kickstarter: agent steps to target | scratch final | "
             "kickstarter final |", "|---|---|---|---|---|"]
    for seed in args.seeds:
        cells = [f"{reach[n][seed]:,}" if reach[n][seed] is not None else "not reached" for n in runs]
        finals = [f"{np.mean(runs[n][seed][-3:]):.3f}" for n in runs]
        lines.append(f"| {seed} | {cells[0]} | {cells[1]} | {finals[0]} | {finals[1]} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot(runs, level, target, per_iteration, out / "curves.png")
    print("\n".join(lines))


def plot(runs: dict, level: float, target: float, per_iteration: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colors = {"scratch": "tab:gray", "kickstarter": "tab:blue"}
    for name, by_seed in runs.items():
        for i, rewards in enumerate(by_seed.values()):
            steps = np.arange(1, len(rewards) + 1) * per_iteration
            ax.plot(steps, rewards, color=colors[name], alpha=0.8, label=name if i == 0 else None)
    ax.axhline(level, color="black", linestyle="--", linewidth=1, label="teacher")
    ax.axhline(target, color="black", linestyle=":", linewidth=1, label="target")
    ax.set_xlabel("agent steps")
    ax.set_ylabel("reward per agent per step")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
