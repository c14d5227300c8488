"""Random network distillation on point-mass-goal or point-mass-maze: how often trained policies reach the sparse
goal, with and without `rnd`.

    python benchmarks/rnd_point_mass.py [--task point-mass-maze] [--seeds 0 1 2 3 4] [--iterations 100] [--jobs 2]
        [--settings ppo] [--arg=--ppo.lam=0.99 ...] [--rnd-arg=--rnd.final_step=800 ...]

Each run is the task's preset (point-mass-goal's: 1,024 envs x 32 steps per iteration; point-mass-maze's: 2,048;
both settings take the same env steps; its own process, one thread) with one of: `ppo` (PPO alone), `ppo + rnd`
(`--rnd.enabled true`, the preset's RND settings: weight 0.5 fading linearly to 0, by env step 1,500 on
point-mass-goal and 800 on point-mass-maze, state normalization, 64x64 networks with a 16-wide embedding). After
training, `syncfree.evaluate` runs 1,000 fresh envs (seed 12345, the same for every run) with the policy's most
likely actions, each's first episode; an episode's return is the number of steps it spent inside the
goal, so the success is the fraction of episodes with a return above 0. The same envs are played again with actions
drawn from the policy (seeded with 12345): where the actions are clipped, the most likely action is not the average
of what the trained policy does, and the two successes can differ. `--arg` adds a setting to every run, `--rnd-arg`
to the `ppo + rnd` runs; each run's folder is named by its setting, seed, iterations and these, and a folder with a
`latest.pt` is measured again without training.

Writes results.json and results.md (mean and standard deviation over the seeds, and each seed's figures) to
benchmarks/results/rnd-point-mass-cpu/ (point-mass-maze: rnd-point-mass-maze-cpu/)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"ppo": [], "ppo + rnd": ["--rnd.enabled", "true"]}
EVAL_ENVS = 1000
EVAL_SEED = 12345


def train(task: str, setting: str, seed: int, iterations: int, runs: Path, rnd_args: list[str],
          args: list[str]) -> Path:
    extra = [*args, *(rnd_args if setting == "ppo + rnd" else [])]
    tag = "".join(f"-{a.removeprefix('--').removeprefix('rnd.')}" for a in extra).replace("_", "")
    folder = runs / f"{task}-{setting.replace(' ', '').replace('+', '-')}-seed{seed}-{iterations}it{tag}"
    if not (folder / "latest.pt").is_file():
        command = [sys.executable, "-m", "syncfree", "train", "--task", task, "--seed", str(seed),
                   "--iterations", str(iterations), "--log.dir", str(runs), "--log.run_name", folder.name,
                   "--log.progress", "false", *SETTINGS[setting], *extra]
        subprocess.run(command, check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return folder


def measure(folder: Path, task: str) -> dict[str, float]:
    import syncfree

    policy = syncfree.load(folder / "latest.pt")
    if policy.cfg.task != task:  # a folder of another task's run: it would be evaluated on that task's envs
        sys.exit(f"{folder}: a run of {policy.cfg.task}, not {task}; remove it or pick another --runs")
    greedy = syncfree.evaluate(policy, num_envs=EVAL_ENVS, seed=EVAL_SEED)
    sampled = syncfree.evaluate(policy, num_envs=EVAL_ENVS, seed=EVAL_SEED, sample=True)
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    reached = [r["iteration"] for r in records if r.get("mean_return", 0.0) > 0.0]
    return {"success": float((greedy > 0).mean()), "eval_return": float(greedy.mean()),
            "sampled_success": float((sampled > 0).mean()), "env_steps": records[-1]["env_steps"],
            "first_iteration_reached": reached[0] if reached else None}


def summary(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["point-mass-goal", "point-mass-maze"], default="point-mass-goal")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one thread each)")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "rnd-point-mass")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/rnd-point-mass-cpu, or "
                        "rnd-point-mass-maze-cpu for point-mass-maze")
    parser.add_argument("--rnd-arg", dest="rnd_args", action="append", default=[],
                        help="a further `rnd.*` setting of the `ppo + rnd` runs (repeatable), e.g. "
                             "--rnd-arg=--rnd.final_step=800")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--arg", dest="args", action="append", default=[],
                        help="a further setting of every run (repeatable), e.g. --arg=--ppo.lam=0.99")
    args = parser.parse_args()
    if args.out is None:
        name = "rnd-point-mass-cpu" if args.task == "point-mass-goal" else "rnd-point-mass-maze-cpu"
        args.out = ROOT / "benchmarks" / "results" / name
    jobs = [(setting, seed) for seed in args.seeds for setting in args.settings]
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = pool.map(lambda job: train(args.task, *job, args.iterations, args.runs, args.rnd_args, args.args),
                        jobs)
        folders = list(tqdm(runs, total=len(jobs), desc="rnd", unit="run"))
    results = [{"setting": setting, "seed": seed, **measure(folder, args.task)}
               for (setting, seed), folder in zip(jobs, folders, strict=True)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"task": args.task, "iterations": args.iterations,
                                                       "eval_envs": EVAL_ENVS, "eval_seed": EVAL_SEED,
                                                       "args": args.args, "rnd_args": args.rnd_args,
                                                       "results": results}, indent=1))
    steps = results[0]["env_steps"]
    settings = "" if args.task == "point-mass-goal" else f" --task {args.task}"
    settings += "".join(f" --{name}={value}" for name, values in (("arg", args.args), ("rnd-arg", args.rnd_args))
                       for value in values)
    if args.settings != list(SETTINGS):
        settings += " --settings " + " ".join(f'"{setting}"' for setting in args.settings)
    lines = [f"# Random network distillation on {args.task} ({args.iterations} iterations, {steps:,} env steps "
             f"per run, seeds {args.seeds})", "",
             f"Rerun: `python benchmarks/rnd_point_mass.py --iterations {args.iterations} --seeds "
             f"{' '.join(map(str, args.seeds))}{settings}`. Success: the fraction of {EVAL_ENVS:,} evaluation "
             "episodes (most likely actions) that reached the goal; mean ± standard deviation over the seeds. The last "
             "column plays actions drawn from the policy instead (seeded with the same seed).", "",
             "| setting | success | evaluation return (steps inside the goal) | seeds at >= 80 % | seeds below 20 % "
             "| success, sampled actions |", "|---|---|---|---|---|---|"]
    for setting in args.settings:
        rows = [r for r in results if r["setting"] == setting]
        success = [r["success"] for r in rows]
        lines.append(f"| {setting} | {summary(success)} | {summary([r['eval_return'] for r in rows])} | "
                     f"{sum(s >= 0.8 for s in success)} of {len(rows)} | {sum(s < 0.2 for s in success)} of "
                     f"{len(rows)} | {summary([r['sampled_success'] for r in rows])} |")
    lines += ["", "| setting | seed | success | evaluation return | success, sampled actions | first iteration with "
              "a training episode inside the goal |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['seed']} | {r['success']:.3f} | {r['eval_return']:.1f} | "
              f"{r['sampled_success']:.3f} | {r['first_iteration_reached'] or 'never'} |" for r in results]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
