"""Mirror symmetry on point-mass: how far trained policies are from mirror-symmetric, with and without `symmetry`.

    python benchmarks/symmetry_point_mass.py [--seeds 0 1 2] [--iterations 50] [--num_envs 1024]

Each run is the point-mass preset (24 steps per env and iteration; 1,024 envs by default, the preset's 4,096 with
`--num_envs 4096`; its own process, one thread) with one of:
`plain` (no symmetry), `augment` (`symmetry.augment`), `augment + mirror loss` (`symmetry.augment` and
`symmetry.mirror_loss`, weight 1). After training, on 4,096 held-out states (positions uniform in [-2, 2]^2,
velocities in [-1, 1]^2, the same states for every run):

- the mirror error: the mean over states of |mean(pi(M s)) - M mean(pi(s))| (M: point-mass's reflection in the
  y axis), the policy's mean actions;
- the evaluation return: `syncfree.evaluate` (the most likely actions, 64 envs, each's first episode).

Writes benchmarks/results/symmetry-point-mass-cpu/results.json and results.md (mean and standard deviation over
the seeds, and each seed's figures)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"plain": [], "augment": ["--symmetry.augment", "true"],
            "augment + mirror loss": ["--symmetry.augment", "true", "--symmetry.mirror_loss", "true",
                                      "--symmetry.mirror_loss_coef", "1.0"]}


def train(setting: str, seed: int, iterations: int, num_envs: int, runs: Path) -> Path:
    folder = runs / f"{setting.replace(' ', '').replace('+', '-')}-{num_envs}envs-seed{seed}"
    if not (folder / "latest.pt").is_file():
        command = [sys.executable, "-m", "syncfree", "train", "--task", "point-mass", "--seed", str(seed),
                   "--iterations", str(iterations), "--env.num_envs", str(num_envs), "--log.dir", str(runs),
                   "--log.run_name", folder.name,
                   "--log.progress", "false", *SETTINGS[setting]]
        subprocess.run(command, check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return folder / "latest.pt"


def measure(checkpoint: Path) -> dict[str, float]:
    import torch

    import syncfree
    from syncfree.envs.builtin.point_mass import PointMass

    loaded = syncfree.load(checkpoint)
    mirror = PointMass(1).mirror()
    g = torch.Generator().manual_seed(12345)
    states = torch.cat((4 * torch.rand(4096, 2, generator=g) - 2, 2 * torch.rand(4096, 2, generator=g) - 1), dim=-1)
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
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--num_envs", type=int, default=1024)
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "symmetry-point-mass")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "symmetry-point-mass-cpu")
    args = parser.parse_args()
    results = []
    jobs = [(setting, seed) for seed in args.seeds for setting in SETTINGS]
    for setting, seed in tqdm(jobs, desc="symmetry", unit="run"):
        results.append({"setting": setting, "seed": seed,
                        **measure(train(setting, seed, args.iterations, args.num_envs, args.runs))})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"iterations": args.iterations, "num_envs": args.num_envs,
                                                       "results": results}, indent=1))
    lines = [f"# Mirror symmetry on point-mass ({args.num_envs} envs, {args.iterations} iterations, seeds "
             f"{args.seeds})", "",
             "Rerun: `python benchmarks/symmetry_point_mass.py`. Mean ± standard deviation over the seeds.", "",
             "| setting | mirror error | evaluation return |", "|---|---|---|"]
    for setting in SETTINGS:
        rows = [r for r in results if r["setting"] == setting]
        lines.append(f"| {setting} | {summary([r['mirror_error'] for r in rows])} | "
                     f"{summary([r['eval_return'] for r in rows])} |")
    lines += ["", "| setting | seed | mirror error | evaluation return |", "|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['seed']} | {r['mirror_error']:.4g} | {r['eval_return']:.4g} |" for r in results]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
