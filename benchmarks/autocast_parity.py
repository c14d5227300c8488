"""Learning parity of `perf.autocast`: the same task and seeds trained with float32 and with bfloat16 hidden
layers, compared by the mean return of the last iterations (each run its own `syncfree train` process).

    python benchmarks/autocast_parity.py --task point-mass --seeds 0 1 --modes off bf16
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from syncfree.bench.report import save_results


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="point-mass")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--modes", nargs="+", default=["off", "bf16"], help="perf.autocast values")
    p.add_argument("--iterations", type=int, default=0, help="0: the preset's")
    p.add_argument("--num_envs", type=int, default=0, help="0: the preset's")
    p.add_argument("--last", type=int, default=10, help="iterations averaged at the end")
    p.add_argument("--parallel", type=int, default=2, help="runs at once (each on one thread)")
    p.add_argument("--out", default="")
    return p.parse_args()


def command(args: argparse.Namespace, seed: int, mode: str, log_dir: str) -> list[str]:
    cmd = [sys.executable, "-m", "syncfree", "train", "--task", args.task, "--seed", str(seed),
           "--perf.autocast", mode, "--log.dir", log_dir, "--log.run_name", f"{mode}-{seed}", "--log.progress",
           "false", "--device", "cpu"]
    if args.iterations:
        cmd += ["--iterations", str(args.iterations)]
    if args.num_envs:
        cmd += ["--env.num_envs", str(args.num_envs)]
    return cmd


def main() -> None:
    args = parse()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = [(seed, mode) for seed in args.seeds for mode in args.modes]
    with tempfile.TemporaryDirectory() as log_dir:
        pending = list(runs)
        while pending:
            batch, pending = pending[: args.parallel], pending[args.parallel :]
            procs = [subprocess.Popen(command(args, seed, mode, log_dir), env=env, stdout=subprocess.DEVNULL)
                     for seed, mode in batch]
            for proc in procs:
                if proc.wait() != 0:
                    raise SystemExit(f"autocast_parity: {proc.args} failed")
        results = {}
        for seed, mode in runs:
            lines = (Path(log_dir) / f"{mode}-{seed}" / "metrics.jsonl").read_text().splitlines()
            records = [json.loads(line) for line in lines]
            tail = records[-args.last :]
            results[f"{mode}-{seed}"] = {
                "seed": seed, "autocast": mode, "env_steps": records[-1]["env_steps"],
                "mean_return_last": statistics.mean(r["mean_return"] for r in tail),
                "steps_per_s_median": statistics.median(r["steps_per_s"] for r in records[1:] or records)}
    lines = [f"perf.autocast learning parity on {args.task} (mean return of the last {args.last} iterations, "
             f"{records[-1]['env_steps']:,} env steps, 1 thread per run, {args.parallel} runs at once):",
             "| seed | " + " | ".join(args.modes) + " |", "|---|" + "---|" * len(args.modes)]
    for seed in args.seeds:
        lines.append(f"| {seed} | " + " | ".join(f"{results[f'{m}-{seed}']['mean_return_last']:.2f}"
                                                  for m in args.modes) + " |")
    print("\n".join(lines))
    if args.out:
        save_results(Path(args.out), {"args": vars(args), "runs": results}, "\n".join(lines))


if __name__ == "__main__":
    main()
