"""The classic tasks' presets over several seeds: final training return, deterministic evaluation and wall time,
as a mean with its spread (the figures of docs/tasks.md).

    python benchmarks/preset_seeds.py [--tasks cartpole cartpole-continuous pendulum] [--seeds 0 1 2]

Each run is `syncfree train --task T --seed S` (the preset, its own process, one thread), then `syncfree eval` of
its last checkpoint (20 episodes). `--processes 1 2` adds runs on 2 processes (`torchrun --nproc_per_node=2`, each
process one thread and the preset's envs divided among them: the same env steps per iteration). Resumable: a
finished (task, processes, seed) is read back from its run folder (under `--runs`). Writes
benchmarks/results/preset-seeds-cpu/results.json and results.md."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

from syncfree.bench.report import save_results


def run(task: str, seed: int, runs: Path, processes: int = 1) -> dict:
    folder = runs / (f"{task}-seed{seed}" if processes == 1 else f"{task}-{processes}proc-seed{seed}")
    done = folder / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    if folder.exists():  # an interrupted run: start it again
        for path in sorted(folder.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        folder.rmdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    command = [sys.executable, "-m", "syncfree", "train", "--task", task, "--seed", str(seed), "--log.dir",
               str(runs), "--log.run_name", folder.name, "--log.progress", "false"]
    if processes > 1:
        from syncfree.tasks import preset

        command[:3] = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                       "-m", "syncfree"]
        command += ["--env.num_envs", str(preset(task).env.num_envs // processes)]
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    evaluated = subprocess.run([sys.executable, "-m", "syncfree", "eval", str(folder / "latest.pt"),
                                "--num_envs", "20"], check=True, env=env, capture_output=True, text=True)
    mean = float(re.search(r"mean return (-?[\d.]+)", evaluated.stdout + evaluated.stderr).group(1))
    result = {"task": task, "processes": processes, "seed": seed, "wall_seconds": seconds, "env_steps": records[-1]["env_steps"],
              "train_return": records[-1]["mean_return"], "eval_return": mean}
    done.write_text(json.dumps(result))
    return result


def spread(values: list[float]) -> str:
    mean = statistics.mean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.1f} ± {sd:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["cartpole", "cartpole-continuous", "pendulum"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", default="benchmarks/results/preset-seeds-cpu")
    parser.add_argument("--processes", nargs="+", type=int, default=[1], help="process counts to train with")
    parser.add_argument("--runs", default="runs/preset-seeds", help="where the runs are written (and found again)")
    args = parser.parse_args()
    out, runs = Path(args.out), Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    runs.mkdir(parents=True, exist_ok=True)
    jobs = [(t, n, s) for t in args.tasks for n in args.processes for s in args.seeds]
    results = [run(task, seed, runs, n) for task, n, seed in tqdm(jobs, desc="preset seeds", unit="run")]
    lines = [f"# Presets over seeds {', '.join(map(str, args.seeds))}", "",
             "`python benchmarks/preset_seeds.py`: each run `syncfree train --task T --seed S` (one thread), then "
             "`syncfree eval` (20 episodes, deterministic policy). Mean ± standard deviation over the seeds.", "",
             "| task | env steps | wall time, s | train return (last 100 episodes) | eval return | per seed (eval) |",
             "|---|---|---|---|---|---|"]
    for task, n in dict.fromkeys((t, n) for t, n, _ in jobs):
        rows = [r for r in results if r["task"] == task and r.get("processes", 1) == n]
        label = f"`{task}`" + (f", {n} processes" if n > 1 else "")
        lines.append(f"| {label} | {rows[0]['env_steps']:,} | {spread([r['wall_seconds'] for r in rows])} | "
                     f"{spread([r['train_return'] for r in rows])} | {spread([r['eval_return'] for r in rows])} | "
                     + ", ".join(f"{r['eval_return']:.1f}" for r in rows) + " |")
    save_results(out, results, "\n".join(lines), show=True)


if __name__ == "__main__":
    main()
