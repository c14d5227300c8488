"""Training throughput of this checkout against another one (e.g. an older commit in a git worktree), interleaved.

    git worktree add /tmp/before <commit>
    python benchmarks/compare_trees.py --baseline /tmp/before --task point-mass --num_envs 64 4096

For each size, one long-lived worker process per tree builds the task's preset trainer (with `--num_envs` envs,
all switches at their optimized defaults; `--compile` sets `perf.compile` in both), warms it up, then times
`--iterations` training iterations whenever the parent asks: the parent asks the two workers in turn (A B A B ...)
for `--rounds` rounds, so only one of them runs at a time and both see the same drift of a shared machine. Reported: each tree's median steps/s, and the median,
min and max of the per-round ratios (this tree / baseline). For grid-arena, sizes count simulations and steps are
agent steps.

Each worker imports syncfree from its tree's `src/` (PYTHONPATH), so the trees must share this interpreter's
packages. The worker speaks to every layout so far: presets from `syncfree.tasks` (earlier `syncfree.presets`, then
`syncfree.config`), the trainer `syncfree.train.runner.Runner` (earlier `syncfree.train.trainer.make_trainer`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

WORKER = r"""
import json, sys, time, torch
task, num_envs, threads, warmup, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), 0
compile_mode = sys.argv[5]
torch.set_num_threads(threads)
try:  # the task registry; before it, the presets module; before that, the config module
    from syncfree.tasks import preset
except ImportError:
    try:
        from syncfree.presets import preset
    except ImportError:
        from syncfree.config import preset
try:
    from syncfree.train.runner import Runner as make
except ImportError:
    from syncfree.train.trainer import make_trainer as make
cfg = preset(task)
cfg.env.num_envs, cfg.seed, cfg.log.progress = num_envs, seed, False
if compile_mode:
    cfg.perf.compile = compile_mode
trainer = make(cfg)
steps = cfg.ppo.steps_per_env * trainer.env.num_envs

def seconds_per_iteration(k):
    trainer.cfg.iterations = trainer.iteration + k
    start = time.perf_counter()
    trainer.learn()
    return (time.perf_counter() - start) / k

warm = seconds_per_iteration(warmup)
print(json.dumps({"steps_per_iteration": steps, "warmup_seconds_per_iteration": warm}), flush=True)
for line in sys.stdin:
    print(json.dumps({"seconds": seconds_per_iteration(int(line))}), flush=True)
"""


class Worker:
    def __init__(self, tree: Path, args: argparse.Namespace, num_envs: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": str(args.threads)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, args.task, str(num_envs), str(args.threads), str(args.warmup),
             args.compile],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
        self.info = self.answer()

    def answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"compare_trees: a worker exited (code {self.process.wait()})")
        return json.loads(line)

    def seconds(self, iterations: int) -> float:
        self.process.stdin.write(f"{iterations}\n")
        self.process.stdin.flush()
        return self.answer()["seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def compare(num_envs: int, args: argparse.Namespace) -> dict:
    trees = {"this": Path(__file__).resolve().parents[1], "baseline": Path(args.baseline).resolve()}
    workers = {name: Worker(tree, args, num_envs) for name, tree in trees.items()}
    steps = {w.info["steps_per_iteration"] for w in workers.values()}
    if len(steps) != 1:
        raise SystemExit(f"compare_trees: the trees collect different steps per iteration: {steps}")
    steps_per_iteration = steps.pop()
    times: dict[str, list[float]] = {name: [] for name in workers}
    for _ in tqdm(range(args.rounds), desc=f"{args.task} {num_envs}", unit="round", file=sys.stderr):
        for name, worker in workers.items():
            times[name].append(worker.seconds(args.iterations))
    for worker in workers.values():
        worker.close()
    ratios = [b / t for t, b in zip(times["this"], times["baseline"], strict=True)]
    return {"num_envs": num_envs, "steps_per_iteration": steps_per_iteration,
            "steps_per_s": {name: statistics.median(steps_per_iteration / t for t in ts) for name, ts in times.items()},
            "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
            "seconds_per_iteration": times,
            "warmup_seconds_per_iteration": {n: w.info["warmup_seconds_per_iteration"] for n, w in workers.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the other checkout (its src/ is imported)")
    parser.add_argument("--task", default="point-mass")
    parser.add_argument("--num_envs", type=int, nargs="+", default=[64, 4096])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations per round and tree")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (compile included)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", default="", help="perf.compile for both trees (default: each preset's)")
    parser.add_argument("--out", default="", help="JSON file for the results (default: print only)")
    args = parser.parse_args()
    results = {"task": args.task, "baseline": str(args.baseline), "threads": args.threads,
               "rounds": args.rounds, "iterations": args.iterations,
               "sizes": [compare(n, args) for n in args.num_envs]}
    for size in results["sizes"]:
        r = size["ratio"]
        print(f"{args.task} {size['num_envs']}: this {size['steps_per_s']['this']:,.0f} steps/s, baseline "
              f"{size['steps_per_s']['baseline']:,.0f}; ratio {r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
