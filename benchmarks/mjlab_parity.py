"""syncfree's drop-in `OnPolicyRunner` against rsl_rl as mjlab ships it (`MjlabOnPolicyRunner`, rsl-rl-lib 5.4.2), on
mjlab's own task, env, wrapper and runner config; runs in mjlab's virtual environment (see docs/rsl_rl.md).

For each seed, both learners train in turn (interleaved) on a fresh env for `--iterations` iterations (equal env
steps); then each final policy acts deterministically on a fresh env of `--num_envs` envs for `--eval_steps`
steps, and its mean reward per env step is the figure. Wall time is split with a timer around the env's `step`:
the learner's time is everything else (acting, storing, advantages, the update, logging). With `--device cuda`
(mjlab's envs on Warp's CUDA kernels) each iteration ends with a device synchronization and only whole iterations
are timed: the env's calls return before its kernels finish, so no split is reported.

    CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 .venv-mjlab/bin/python benchmarks/mjlab_parity.py \\
        --task Mjlab-Cartpole-Balance --num_envs 256 --iterations 40 --seeds 0 1 2 --out benchmarks/results/x

`--eval_steps 0` times only (e.g. G1 at a few iterations). mjlab's tracking tasks need a motion `.npz`:
`--motion_file PATH`, or `--standing_motion`, which writes one made with mjlab's own G1 model (the robot standing
in its default pose for two seconds) to `<out>/standing_motion.npz`. Writes `<out>/runs.jsonl` (one line per run, appended
as each finishes) and prints a summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

MOTION_FILE = ""
"""The motion `.npz` of mjlab's tracking tasks (`--motion_file`); empty for other tasks."""


def make_env(task: str, num_envs: int, seed: int, device: str = "cpu") -> Any:
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.tasks.registry import load_env_cfg, load_rl_cfg

    cfg = load_env_cfg(task)
    cfg.scene.num_envs, cfg.seed = num_envs, seed
    if "motion" in cfg.commands:
        cfg.commands["motion"].motion_file = MOTION_FILE
    return RslRlVecEnvWrapper(ManagerBasedRlEnv(cfg=cfg, device=device), clip_actions=load_rl_cfg(task).clip_actions)


def write_standing_motion(path: Path, seconds: float = 2.0, fps: int = 50) -> Path:
    """A motion `.npz` as mjlab's tracking command reads it (`fps`, `joint_pos`, `joint_vel` and the world poses
    and velocities of every body): mjlab's G1 in its default pose, still, for `seconds`. The poses come from mjlab's
    own model and kinematics, so the file fits its tracking tasks' body names and joint order."""
    from mjlab.scene import Scene
    from mjlab.sim.sim import Simulation, SimulationCfg
    from mjlab.tasks.tracking.config.g1.env_cfgs import unitree_g1_flat_tracking_env_cfg

    sim_cfg = SimulationCfg()
    sim_cfg.mujoco.timestep = 1.0 / fps
    scene = Scene(unitree_g1_flat_tracking_env_cfg().scene, device="cpu")
    sim = Simulation(num_envs=1, cfg=sim_cfg, model=scene.compile(), device="cpu")
    scene.initialize(sim.mj_model, sim.model, sim.data)
    robot = scene["robot"]
    robot.write_root_state_to_sim(robot.data.default_root_state.clone())
    robot.write_joint_state_to_sim(robot.data.default_joint_pos.clone(), robot.data.default_joint_vel.clone())
    sim.forward()
    scene.update(sim_cfg.mujoco.timestep)
    data = robot.data
    pose = {"joint_pos": data.joint_pos, "joint_vel": data.joint_vel, "body_pos_w": data.body_link_pos_w,
            "body_quat_w": data.body_link_quat_w, "body_lin_vel_w": data.body_link_lin_vel_w,
            "body_ang_vel_w": data.body_link_ang_vel_w}
    frames = int(seconds * fps)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, fps=np.array([fps]), **{k: np.repeat(v[:1].cpu().numpy(), frames, axis=0) for k, v in pose.items()})
    return path


class StepTimer:
    """Times the env's `step` (an attribute set on the wrapper instance: both runners call `env.step`)."""

    def __init__(self, env: Any) -> None:
        self.seconds = 0.0
        step = env.step

        def timed(actions: torch.Tensor) -> Any:
            start = time.perf_counter()
            out = step(actions)
            self.seconds += time.perf_counter() - start
            return out

        env.step = timed


def train(learner: str, task: str, num_envs: int, iterations: int, seed: int,
          overrides: dict[str, Any] | None = None, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    from mjlab.tasks.registry import load_rl_cfg, load_runner_cls

    env = make_env(task, num_envs, seed, device)
    timer = StepTimer(env) if device == "cpu" else None
    cfg = dataclasses.asdict(load_rl_cfg(task))
    cfg.update(seed=seed, logger="tensorboard", upload_model=False)
    torch.manual_seed(seed)
    if learner == "rsl_rl":
        from mjlab.rl import MjlabOnPolicyRunner

        runner_cls = load_runner_cls(task) or MjlabOnPolicyRunner
        runner = runner_cls(env, cfg, log_dir=None, device=device)
    else:
        from syncfree.rsl_rl import OnPolicyRunner

        runner = OnPolicyRunner(env, {**cfg, "syncfree": overrides or {}}, log_dir=None, device=device)
    seconds, env_seconds = [], []
    for iteration in range(iterations):
        if timer is not None:
            timer.seconds = 0.0
        start = time.perf_counter()
        runner.learn(1, init_at_random_ep_len=iteration == 0)  # as mjlab's train script starts
        if device != "cpu":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        env_seconds.append(timer.seconds if timer is not None else math.nan)
    steady = seconds[1:] or seconds  # the first iteration builds graphs and caches
    steps_per_iteration = num_envs * cfg["num_steps_per_env"]
    row = {"learner": learner, "seed": seed, "iterations": iterations, "num_envs": num_envs, "device": device,
           "env_steps": iterations * steps_per_iteration, "seconds": sum(seconds),
           "iteration_seconds": seconds, "first_iteration_seconds": seconds[0],
           "env_steps_per_s": steps_per_iteration / statistics.median(steady)}
    if timer is not None:
        learner_seconds = [s - e for s, e in zip(seconds, env_seconds, strict=True)]
        row.update(env_seconds=sum(env_seconds),
                   learner_seconds_per_iteration=statistics.median(learner_seconds[1:] or learner_seconds))
    return runner, row


def evaluate(runner: Any, task: str, num_envs: int, steps: int, seed: int, device: str = "cpu") -> float:
    """Mean reward per env step of the deterministic policy on a fresh env."""
    env = make_env(task, num_envs, seed, device)
    policy = runner.get_inference_policy(device=device)
    obs = env.get_observations()
    total = 0.0
    with torch.inference_mode():
        for _ in range(steps):
            obs, reward, _, _ = env.step(policy(obs))
            total += float(reward.mean())
    return total / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="Mjlab-Cartpole-Balance")
    parser.add_argument("--num_envs", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval_steps", type=int, default=500)
    parser.add_argument("--learners", nargs="+", default=["rsl_rl", "syncfree"], choices=["rsl_rl", "syncfree"])
    parser.add_argument("--syncfree", nargs="*", default=[], metavar="KEY=VALUE",
                        help="syncfree settings for its runner, e.g. perf.compile=off")
    parser.add_argument("--inductor_fallback_random", action="store_true",
                        help="compiled graphs draw their random numbers with torch's eager generator")
    parser.add_argument("--motion_file", default="", help="the motion .npz of a tracking task")
    parser.add_argument("--standing_motion", action="store_true",
                        help="write <out>/standing_motion.npz (mjlab's G1 standing still) and track it")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # mjlab's scripts pick the CPU this way
    global MOTION_FILE
    MOTION_FILE = str(write_standing_motion(args.out / "standing_motion.npz")) if args.standing_motion \
        else args.motion_file
    if args.inductor_fallback_random:
        from torch._inductor import config as inductor_config

        inductor_config.fallback_random = True
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for seed in args.seeds:
        for learner in args.learners:
            overrides = dict(item.split("=", 1) for item in args.syncfree)
            runner, row = train(learner, args.task, args.num_envs, args.iterations, seed, overrides, args.device)
            if learner == "syncfree" and overrides:
                row["syncfree"] = overrides
            if args.eval_steps:
                row["eval_reward_per_step"] = evaluate(runner, args.task, args.num_envs, args.eval_steps, 1000 + seed,
                                                       args.device)
            row["task"] = args.task
            if MOTION_FILE:
                row["motion_file"] = MOTION_FILE
            rows.append(row)
            with open(args.out / "runs.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    summarize(rows)


def summarize(rows: list[dict[str, Any]]) -> None:
    by = {learner: [r for r in rows if r["learner"] == learner] for learner in ("rsl_rl", "syncfree")}
    for learner, runs in by.items():
        if runs:
            speed = statistics.median(r["env_steps_per_s"] for r in runs)
            print(f"{learner}: env steps/s past the first iteration (median over runs) {speed:,.0f}")
    if "learner_seconds_per_iteration" not in rows[0]:
        return  # timed on a GPU: whole iterations only
    for learner, runs in by.items():
        if runs:
            learn = statistics.median(r["learner_seconds_per_iteration"] for r in runs)
            print(f"{learner}: learner s/iteration (median over runs) {learn:.3f}")
    if by["rsl_rl"] and by["syncfree"]:
        ratio = [a["learner_seconds_per_iteration"] / b["learner_seconds_per_iteration"]
                 for a, b in zip(by["rsl_rl"], by["syncfree"], strict=True)]
        print(f"rsl_rl / syncfree learner time per seed: {', '.join(f'{r:.2f}' for r in ratio)}")
        if "eval_reward_per_step" in by["rsl_rl"][0]:
            diffs = [b["eval_reward_per_step"] - a["eval_reward_per_step"]
                     for a, b in zip(by["rsl_rl"], by["syncfree"], strict=True)]
            mean = statistics.fmean(diffs)
            half = 0.0 if len(diffs) < 2 else t95(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
            print(f"eval reward per step, syncfree - rsl_rl (paired by seed): {mean:+.4f} "
                  f"[{mean - half:+.4f}, {mean + half:+.4f}] (95 % t interval)")


def t95(dof: int) -> float:
    """Two-sided 95 % Student t quantile."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
    return table.get(dof, 1.96)


if __name__ == "__main__":
    main()
