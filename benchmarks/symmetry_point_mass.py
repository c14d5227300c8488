"""Mirror symmetry on point-mass: how far trained policies are from mirror-symmetric, with and without `symmetry`.

    python benchmarks/symmetry_point_mass.py [--seeds 0 1 2] [--iterations 50] [--num_envs 1024]
    python benchmarks/symmetry_point_mass.py --task g1-track --num_envs 256 --iterations 100 \
        --settings plain "augment + mirror loss"

Each run is the point-mass preset (24 steps per env and iteration; 1,024 envs by default, the preset's 4,096 with
`--num_envs 4096`; its own process, one thread) with one of:
`plain` (no symmetry), `augment` (`symmetry.augment`), `augment + mirror loss` (`symmetry.augment` and
`symmetry.mirror_loss`, weight 1). After training, on 4,096 held-out states (positions uniform in [-2, 2]^2,
velocities in [-1, 1]^2, the same states for every run):

- the mirror error: the mean over states of |mean(pi(M s)) - M mean(pi(s))| (M: point-mass's reflection in the
  y axis), the policy's mean actions;
- the evaluation return: `syncfree.evaluate` (the most likely actions, 64 envs, each's first episode).

`--task g1-track`: the task's preset at `--num_envs`; the held-out states are the `policy` observations of 256
fresh envs (seed 12345, random clips and frames) over their first 8 steps with zero actions (the default pose's
targets), 2,048 states, the same for every run; M is the task's left/right reflection
(`syncfree.envs.builtin.g1_track.mirror`).

Writes benchmarks/results/symmetry-<task>-cpu/results.json and results.md (mean and standard deviation over
the seeds, and each seed's figures)."""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

from syncfree.bench.report import save_results

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"plain": [], "augment": ["--symmetry.augment", "true"],
            "augment + mirror loss": ["--symmetry.augment", "true", "--symmetry.mirror_loss", "true",
                                      "--symmetry.mirror_loss_coef", "1.0"]}


def train(task: str, setting: str, seed: int, iterations: int, num_envs: int, runs: Path) -> Path:
    folder = runs / f"{setting.replace(' ', '').replace('+', '-')}-{num_envs}envs-seed{seed}"
    if not (folder / "latest.pt").is_file():
        command = [sys.executable, "-m", "syncfree", "train", "--task", task, "--seed", str(seed),
                   "--iterations", str(iterations), "--env.num_envs", str(num_envs), "--log.dir", str(runs),
                   "--log.run_name", folder.name,
                   "--log.progress", "false", *SETTINGS[setting]]
        subprocess.run(command, check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return folder / "latest.pt"


def held_out_states(task: str):
    """The states every run's mirror error is measured on, and the task's reflection."""
    import torch

    if task == "point-mass":
        from syncfree.envs.builtin.point_mass import PointMass

        g = torch.Generator().manual_seed(12345)
        return torch.cat((4 * torch.rand(4096, 2, generator=g) - 2, 2 * torch.rand(4096, 2, generator=g) - 1),
                         dim=-1), PointMass(1).mirror()
    from syncfree.tasks import make_env

    env = make_env(task, 256, seed=12345)
    states = [env.reset()["policy"]]
    zeros = torch.zeros(env.num_envs, env.action_spec.size)
    with torch.no_grad():
        for _ in range(7):
            states.append(env.step(zeros).obs["policy"])
    return torch.cat(states), env.mirror()


def measure(task: str, checkpoint: Path) -> dict[str, float]:
    import torch

    import syncfree

    loaded = syncfree.load(checkpoint)
    states, mirror = held_out_states(task)
    with torch.no_grad():
        policy = loaded.policy
        means = policy.act_deterministic(states)
        on_mirrored = policy.act_deterministic(mirror.observations("policy", states))
        error = (on_mirrored - mirror.actions(means)).norm(dim=-1).mean().item()
    returns = syncfree.evaluate(loaded, num_envs=64)
    return {"mirror_error": error, "eval_return": float(returns.mean())}


def summary(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4g} ± {sd:.2g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="point-mass", choices=["point-mass", "g1-track"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--num_envs", type=int, default=1024)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--runs", type=Path, default=None, help="default: runs/symmetry-<task>")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/symmetry-<task>-cpu")
    args = parser.parse_args()
    runs = args.runs or ROOT / "runs" / f"symmetry-{args.task}"
    out = args.out or ROOT / "benchmarks" / "results" / f"symmetry-{args.task}-cpu"
    results = []
    jobs = [(setting, seed) for seed in args.seeds for setting in args.settings]
    for setting, seed in tqdm(jobs, desc="symmetry", unit="run"):
        results.append({"setting": setting, "seed": seed, **measure(
            args.task, train(args.task, setting, seed, args.iterations, args.num_envs, runs))})
    rerun = shlex.join(["python", "benchmarks/symmetry_point_mass.py", *sys.argv[1:]])
    lines = [f"# Mirror symmetry on {args.task} ({args.num_envs} envs, {args.iterations} iterations, seeds "
             f"{args.seeds})", "",
             f"Rerun: `{rerun}`. Mean ± standard deviation over the seeds.", "",
             "| setting | mirror error | evaluation return |", "|---|---|---|"]
    for setting in args.settings:
        rows = [r for r in results if r["setting"] == setting]
        lines.append(f"| {setting} | {summary([r['mirror_error'] for r in rows])} | "
                     f"{summary([r['eval_return'] for r in rows])} |")
    lines += ["", "| setting | seed | mirror error | evaluation return |", "|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['seed']} | {r['mirror_error']:.4g} | {r['eval_return']:.4g} |" for r in results]
    save_results(out, {"task": args.task, "iterations": args.iterations, "num_envs": args.num_envs,
                       "results": results}, "\n".join(lines), show=True)


if __name__ == "__main__":
    main()
