"""grid-arena's agent steps per second against simulations and processes: `syncfree train --task grid-arena` with
`--env.num_envs` simulations in all (split evenly over the processes; several run under torchrun with gloo, one
intra-op thread each; one process runs with `OMP_NUM_THREADS=1`), a few iterations each, the preset otherwise.

    python benchmarks/grid_scale.py --sims 16 64 256 1024 --ranks 1 2 --iterations 3 \
        --out benchmarks/results/grid-arena-scale-cpu

Per configuration: the median `steps_per_s` (agent steps of all processes) over the iterations after the first
(which builds the buffers and warms the allocator), the mean iteration time, the last iteration's reward per agent
step and finite losses (it trains), and the command's wall time. Writes `results.json` and `results.md` in `--out`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm


def command(sims: int, ranks: int, iterations: int, log_dir: Path) -> list[str]:
    train = ["-m", "syncfree", "train", "--task", "grid-arena", "--env.num_envs", str(sims // ranks), "--iterations",
             str(iterations), "--save_every", str(iterations), "--log.dir", str(log_dir), "--log.run_name", "run",
             "--log.progress", "false"]
    if ranks == 1:
        return [sys.executable, *train]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", *train]


def measure(sims: int, ranks: int, iterations: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        cmd = command(sims, ranks, iterations, Path(folder))
        start = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        wall = time.perf_counter() - start
        if run.returncode != 0:
            raise SystemExit(f"grid_scale: {sims} simulations on {ranks} process(es) failed:\n{run.stderr[-3000:]}")
        records = [json.loads(line) for line in (Path(folder) / "run" / "metrics.jsonl").read_text().splitlines()]
    timed = records[1:] or records
    last = records[-1]
    return {"simulations": sims, "ranks": ranks, "agents": sims * 4, "iterations": len(records),
            "agent_steps_per_iteration": last["env_steps"] // len(records),
            "agent_steps_per_s": statistics.median(r["steps_per_s"] for r in timed),
            "iteration_seconds": statistics.mean(r["iteration_seconds"] for r in timed),
            "reward_per_agent_step": last.get("reward_per_agent_step"),
            "losses_finite": all(math.isfinite(r[k]) for r in records for k in ("surrogate_loss", "value_loss")),
            "wall_seconds": wall, "command": " ".join(cmd[1:]).replace(folder, "<tmp>")}


def table(rows: list[dict]) -> str:
    lines = ["| simulations (agents) | processes | agent steps per iteration | agent steps/s | s per iteration | "
             "reward per agent step (last iteration) | losses finite | wall time, s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        reward = r["reward_per_agent_step"]
        lines.append(f"| {r['simulations']:,} ({r['agents']:,}) | {r['ranks']} | {r['agent_steps_per_iteration']:,} | "
                     f"{r['agent_steps_per_s']:,.0f} | {r['iteration_seconds']:.2f} | "
                     f"{'' if reward is None else f'{reward:.3f}'} | {'yes' if r['losses_finite'] else 'NO'} | "
                     f"{r['wall_seconds']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/grid-arena-scale-cpu"))
    args = parser.parse_args(argv)
    bad = [f"{s} simulations on {r} processes" for s in args.sims for r in args.ranks if s % r or s < r]
    if bad or args.iterations < 2:
        raise SystemExit(f"grid_scale: {'; '.join(bad) or '--iterations'}: simulations must split evenly over the "
                         "processes, and --iterations must be >= 2 (the first is not timed)")
    rows = [measure(s, r, args.iterations) for s, r in tqdm([(s, r) for s in args.sims for r in args.ranks],
                                                             desc="grid scale", unit="run")]
    args.out.mkdir(parents=True, exist_ok=True)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    (args.out / "results.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))
    text = (f"# grid-arena: agent steps/s against simulations and processes\n\n`python benchmarks/grid_scale.py "
            f"--sims {' '.join(map(str, args.sims))} --ranks {' '.join(map(str, args.ranks))} --iterations "
            f"{args.iterations} --out {args.out}` on {machine}; one intra-op thread per process; medians over "
            f"the iterations after the first.\n\n{table(rows)}\n")
    (args.out / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
